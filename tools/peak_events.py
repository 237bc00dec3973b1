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
    /usr/bin/python3 tools/peak_events.py vgg16 2 --checkpoint features:4
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fidelity  # noqa: E402

ALLOCATORS = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::as_strided_", "aten::resize_"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", choices=fidelity.MODELS)
    ap.add_argument("batch", type=int)
    ap.add_argument("--checkpoint", metavar="ATTR:K", help="run model.ATTR under checkpoint_sequential with K segments, as tools/fidelity.py's checkpoint rows")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    model, x, y = fidelity.make(args.model, args.batch)
    if args.checkpoint:
        attr, k = args.checkpoint.split(":")
        model = fidelity.Checkpointed(model, attr, int(k))
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    step()
    opt.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = list(prof.profiler.kineto_results.events())
    mem = sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_us())
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
