#!/usr/bin/python3
"""Fidelity harness: remat's predicted peak memory vs PyTorch's own.

For each model and batch size it runs one training step on CPU (forward,
F.cross_entropy against random labels, backward, SGD step without momentum,
gradients set to None beforehand) under torch.profiler with
profile_memory=True, after one warm-up step. The measured peak is the bytes
resident before the step (parameters, buffers, the input and the labels) plus
the largest running sum of the profiler's [memory] allocation and free events
in time order: what PyTorch's CPU allocator had handed out at its fullest.

It then predicts the same peak twice, with the ideal allocator and no
strategy (sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})), through
tools/fidelity (go run ./tools/fidelity):
  * ONNX route: testdata/onnx/<model>.onnx imported with graph/onnx.Import
    (batch set, loss cross_entropy, SGD updating in place, dropout saving a
    mask of the input's type as PyTorch does on CPU);
  * exporter route: tools/export_torch.py's trace of the same step.

Checkpoint rows run torch.utils.checkpoint.checkpoint_sequential over
vgg16.features (31 modules) and mobilenet_v2.features (19 modules) with k
segments (use_reentrant=False) and compare with the equivalent plan built by
tools/fidelity -checkpoint from the ONNX import.

Images are 224x224 (the ONNX files' size; vgg16's adaptive pooling cannot be
exported at smaller sizes), the transformer reads 64 tokens. Batch sizes 2
and 4. Runtime on 2 cores: a few minutes.

    /usr/bin/python3 tools/fidelity.py --out docs/fidelity.md
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import export_onnx  # noqa: E402
import export_torch  # noqa: E402

MODELS = ["resnet18", "resnet50", "mobilenet_v2", "densenet121", "vgg16", "transformer"]
BATCHES = [2, 4]
NOTES_MARKER = "<!-- notes: kept by tools/fidelity.py -->"
CHECKPOINTS = [("vgg16", "features", 31, 4), ("mobilenet_v2", "features", 19, 4)]


def make(name, batch):
    torch.manual_seed(0)
    model, _ = export_onnx.build(name)
    if name == "transformer":
        x = torch.randint(0, 1000, (batch, model.seq), dtype=torch.int64)
        classes = 10
    else:
        x = torch.randn(batch, 3, 224, 224)
        classes = 1000
    y = torch.randint(0, classes, (batch,), dtype=torch.int64)
    return model, x, y


def checkpoint_sequential(functions, segments, x):
    """torch.utils.checkpoint.checkpoint_sequential's own segmentation loop,
    calling checkpoint with use_reentrant=False: torch 1.13's
    checkpoint_sequential only offers the reentrant variant, which computes no
    parameter gradients for the first segment unless the input requires
    grad."""
    from torch.utils.checkpoint import checkpoint

    def run(start, end):
        def forward(inp):
            for j in range(start, end + 1):
                inp = functions[j](inp)
            return inp

        return forward

    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        x = checkpoint(run(start, end), x, use_reentrant=False)
    return run(end + 1, len(functions) - 1)(x)


class Checkpointed(nn.Module):
    """A torchvision model whose `attr` Sequential runs under
    checkpoint_sequential with k segments."""

    def __init__(self, model, attr, k):
        super().__init__()
        self.model, self.attr, self.k = model, attr, k

    def forward(self, x):
        x = checkpoint_sequential(getattr(self.model, self.attr), self.k, x)
        m = self.model
        if hasattr(m, "avgpool"):  # vgg
            x = torch.flatten(m.avgpool(x), 1)
        else:  # mobilenet_v2
            x = torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1)
        return m.classifier(x)


def resident_bytes(model, *tensors):
    n = sum(p.numel() * p.element_size() for p in model.parameters())
    n += sum(b.numel() * b.element_size() for b in model.buffers())
    return n + sum(t.numel() * t.element_size() for t in tensors)


def measure(model, x, y):
    """PyTorch's peak bytes of one training step (see the module doc)."""
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
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_us())  # stable: ties keep record order
    cur = peak = 0
    for e in events:
        cur += e.nbytes()
        peak = max(peak, cur)
    return resident_bytes(model, x, y) + peak


# What PyTorch's CPU dropout saves for backward: a noise tensor of the input's
# type (F.dropout is fused into native_dropout, with a bool mask, only on
# CUDA); the ONNX import must model it to predict a CPU step (see
# graph/onnx.DropoutMaskLikeInput).
DROPOUT_MASK = "like-input"


def predict(args):
    if "-onnx" in args:
        args = args + ["-dropout-mask", DROPOUT_MASK]
    out = subprocess.run(["go", "run", "./tools/fidelity"] + args, cwd=ROOT, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)["peak_allocated"]


def rel(p, m):
    return (p - m) / m


def mb(b):
    return "%.1f" % (b / 2**20)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="docs/fidelity.md")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("--no-checkpoint", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    rows, ck_rows = [], []
    tmp = tempfile.mkdtemp()
    for name in args.models.split(","):
        onnx_path = os.path.join(ROOT, "testdata", "onnx", name + ".onnx")
        for batch in [int(b) for b in args.batches.split(",")]:
            model, x, y = make(name, batch)
            measured = measure(model, x, y)
            p_onnx = predict(["-onnx", onnx_path, "-batch", str(batch)])
            model, x, y = make(name, batch)
            jpath = os.path.join(tmp, "%s_%d.json" % (name, batch))
            export_torch.write_graph(export_torch.trace_step(model, x, y, name=name), jpath)
            p_exp = predict(["-json", jpath])
            rows.append((name, batch, measured, p_onnx, p_exp))
            print("%-12s b=%d measured %s MB onnx %s (%+.1f%%) exporter %s (%+.1f%%)" % (
                name, batch, mb(measured), mb(p_onnx), 100 * rel(p_onnx, measured), mb(p_exp),
                100 * rel(p_exp, measured)), file=sys.stderr)
    if not args.no_checkpoint:
        for name, attr, mods, k in CHECKPOINTS:
            onnx_path = os.path.join(ROOT, "testdata", "onnx", name + ".onnx")
            for batch in [int(b) for b in args.batches.split(",")]:
                model, x, y = make(name, batch)
                measured = measure(Checkpointed(model, attr, k), x, y)
                p = predict(["-onnx", onnx_path, "-batch", str(batch), "-checkpoint", "%s:%d:%d" % (attr, mods, k)])
                ck_rows.append((name, attr, k, batch, measured, p))
                print("%-12s %s k=%d b=%d measured %s MB plan %s (%+.1f%%)" % (
                    name, attr, k, batch, mb(measured), mb(p), 100 * rel(p, measured)), file=sys.stderr)
    write_doc(args.out, rows, ck_rows)


def write_doc(path, rows, ck_rows):
    notes = NOTES_MARKER + "\n"
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
        if NOTES_MARKER in old:
            notes = old[old.index(NOTES_MARKER):]
    lines = [
        "# Fidelity: predicted vs measured peak memory",
        "",
        "Generated by `/usr/bin/python3 tools/fidelity.py --out docs/fidelity.md` (torch %s, CPU, "
        "224x224 images, 64-token sequences). Do not edit the tables by hand; the prose after them "
        "(after the notes marker) is kept when the file is regenerated." % torch.__version__,
        "",
        "Measured: PyTorch's own peak of one training step (torch.profiler, profile_memory=True: "
        "resident parameters, buffers, input and labels plus the largest running sum of allocation "
        "events). Predicted: remat's simulated peak with the ideal allocator and no strategy, from the "
        "ONNX import (graph/onnx) and from the exporter's trace (tools/export_torch.py). MiB = 2^20 bytes; "
        "error = (predicted - measured) / measured.",
        "",
        "| model | batch | measured MiB | ONNX import MiB | error | exporter MiB | error |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, batch, m, po, pe in rows:
        lines.append("| %s | %d | %s | %s | %+.1f%% | %s | %+.1f%% |" % (
            name, batch, mb(m), mb(po), 100 * rel(po, m), mb(pe), 100 * rel(pe, m)))
    if ck_rows:
        lines += [
            "",
            "## checkpoint_sequential",
            "",
            "torch.utils.checkpoint.checkpoint_sequential(model.features, k, x) (its segmentation loop with use_reentrant=False, see tools/fidelity.py) "
            "measured as above, against the equivalent plan on the ONNX import (`go run ./tools/fidelity "
            "-checkpoint features:MODULES:k`: the first k-1 segments keep only their inputs and are "
            "recomputed before their backward).",
            "",
            "| model | sequential | k | batch | measured MiB | plan MiB | error |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for name, attr, k, batch, m, p in ck_rows:
            lines.append("| %s | %s | %d | %d | %s | %s | %+.1f%% |" % (name, attr, k, batch, mb(m), mb(p), 100 * rel(p, m)))
    lines += ["", notes.rstrip(), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
