#!/usr/bin/python3
"""Show where PyTorch's measured peak of one training step happens.

Runs the step of tools/fidelity.py (same model, batch, seed, warm-up and
profiler settings), finds the moment the running sum of the profiler's
[memory] events is largest (the measured peak), and prints the operators
running at that moment, outermost first, and every [memory] event
(allocation +, free -) inside the innermost aten kernel that is not a
plain allocation (aten::empty and the like), with the kernel's running
balance. Allocations inside a kernel that it does not return are its scratch
buffers: tools/export_torch.py's trace, which sees only the tensors
operators return, cannot see them.

    /usr/bin/python3 tools/peak_events.py resnet18 2
    /usr/bin/python3 tools/peak_events.py vgg11s 2 --checkpoint vgg11s
    /usr/bin/python3 tools/peak_events.py resnet18 2 --optimizer none --image 224

--checkpoint MODEL runs the model checkpointed as tools/fidelity.py's
checkpoint row of MODEL does. --events prints every [memory] event of the
step with the aten operator it happened in, for comparing with the replay of
a plan step by step.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fidelity  # noqa: E402

ALLOCATORS = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::as_strided_", "aten::resize_"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="one of %s, %s" % (", ".join(fidelity.MODELS), fidelity.export_onnx.OTHER_MODELS))
    ap.add_argument("batch", type=int)
    ap.add_argument("--image", type=int, default=fidelity.IMAGE, help="image size (default %d, as tools/fidelity.py)" % fidelity.IMAGE)
    ap.add_argument("--optimizer", choices=fidelity.OPTIMIZERS, default="sgd")
    ck = {c[0]: c[3] for c in fidelity.CHECKPOINTS}
    ap.add_argument("--checkpoint", metavar="MODEL", choices=sorted(ck), help="checkpoint the model as tools/fidelity.py's row of MODEL does")
    ap.add_argument("--events", action="store_true", help="print every [memory] event with its operator")
    ap.add_argument("--channels-last", action="store_true", help="move the model and its input to channels-last memory format")
    args = ap.parse_args(argv)
    if not fidelity.export_onnx.known(args.model):
        ap.error("model %r: expected one of %s, %s" % (args.model, ", ".join(fidelity.MODELS), fidelity.export_onnx.OTHER_MODELS))
    torch.set_num_threads(2)
    model, x, y = fidelity.make(args.model, args.batch, args.image, args.channels_last)
    if args.checkpoint:
        if args.checkpoint != args.model:
            ap.error("--checkpoint %s: the checkpoint row of model %s" % (args.checkpoint, args.checkpoint))
        model = fidelity.checkpointed(model, ck[args.checkpoint])
    mem, events = fidelity.step_events(model, x, y, args.optimizer)
    if args.events:
        ops = sorted((e for e in events if e.name().startswith("aten::") and e.name() not in ALLOCATORS),
                     key=lambda e: (e.start_us(), -e.duration_us()))
        cur = 0
        for e in mem:
            cur += e.nbytes()
            inner = [o.name() for o in ops if o.start_us() <= e.start_us() <= o.start_us() + o.duration_us()]
            print("%+12d %12d %s" % (e.nbytes(), cur, " > ".join(inner[-2:])))
    cur = peak = 0
    at = None
    for e in mem:
        cur += e.nbytes()
        if cur > peak:
            peak, at = cur, e
    resident = fidelity.resident_bytes(model, x, y)
    t = at.start_us()
    print("measured peak %d bytes (%.1f MiB): resident %d + allocated %d" % (resident + peak, (resident + peak) / 2**20, resident, peak))
    running = [e for e in events if e.name() != "[memory]" and e.start_us() <= t <= e.start_us() + e.duration_us()]
    running.sort(key=lambda e: (e.start_us(), -e.duration_us()))
    print("operators running at the peak, outermost first:")
    for e in running:
        print("  " + e.name())
    kernels = [e for e in running if e.name().startswith("aten::") and e.name() not in ALLOCATORS]
    if not kernels:
        return
    k = kernels[-1]
    lo, hi = k.start_us(), k.start_us() + k.duration_us()
    print("[memory] events inside %s (bytes, running balance of the kernel):" % k.name())
    bal = 0
    for e in mem:
        if lo <= e.start_us() <= hi:
            bal += e.nbytes()
            print("  %+12d  %12d%s" % (e.nbytes(), bal, "  <- peak" if e is at else ""))


if __name__ == "__main__":
    main()
