#!/usr/bin/python3
"""Trace one PyTorch training step into remat's native graph JSON.

Runs forward, loss, backward and the optimizer step of an nn.Module once under
a TorchDispatchMode that sees every aten operator the step executes -
including the backward kernels the autograd engine runs, which read exactly
the tensors autograd saved for backward. Each operator becomes one op of the
graph (type = the aten operator's name: convolution, native_batch_norm,
convolution_backward, ...); each tensor it returns becomes a tensor with its
dtype, shape and storage size. An output sharing the storage of an earlier
tensor is a view (alias_of); an operator that writes one of its arguments and
returns it (relu_, add_, the optimizer's updates) gets the inplace flag and
its output is a new version of the argument aliasing it. Phases follow the
step: forward until loss.backward(), backward until optimizer.step(), update
after. With --measure each op's wall time (ns, median of the repeated
step's timings) is written as time_ns.

The JSON is the format of docs/format.md (graph.Decode reads it). Simulating
it with sim.DefaultPlan frees every tensor after its last reader, which is
when PyTorch frees it: saved tensors after the backward kernel that reads
them, everything else when the step drops its last reference.

Usage (from the repository root):

    /usr/bin/python3 tools/export_torch.py --model resnet18 --batch 2 --out step.json
    /usr/bin/python3 tools/export_torch.py --model mypkg.models:Net --input-shape 8,3,32,32 --classes 10 --out net.json

--model is a torchvision model name, "transformer" (the encoder of
tools/export_onnx.py), or module:callable returning an nn.Module. The loss is
F.cross_entropy(model(x), label) with random int64 labels; the optimizer SGD
(lr 0.01, no momentum) unless --optimizer momentum or adam is given.

Each backward kernel carries `forward`, the forward op whose autograd node it
runs in (see python/remat_torch/trace.py).

This script is a thin command-line wrapper over the remat_torch package
(python/remat_torch): trace_step(model, inputs, labels) is remat_torch.trace
and write_graph(graph, path) remat_torch.write_graph.
"""

import argparse
import importlib
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
from remat_torch.trace import DTYPES, trace, write_graph  # noqa: E402,F401


def trace_step(model, inputs, labels, loss_fn=F.cross_entropy, optimizer=None, measure=False, name="model"):
    """remat_torch.trace: the graph of one training step as a dict."""
    return trace(model, inputs, labels, loss_fn=loss_fn, optimizer=optimizer, measure=measure, name=name)


def build_model(spec):
    """Return an nn.Module for a --model value."""
    if ":" in spec:
        mod, fn = spec.split(":", 1)
        return getattr(importlib.import_module(mod), fn)()
    if spec == "transformer":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from export_onnx import TinyTransformer

        return TinyTransformer()
    import torchvision

    return getattr(torchvision.models, spec)()


def example_inputs(model, spec, batch, image, shape):
    if shape:
        return torch.randn(*shape)
    if spec == "transformer":
        return torch.randint(0, 1000, (batch, model.seq), dtype=torch.int64)
    return torch.randn(batch, 3, image, image)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="torchvision name, 'transformer', or module:callable")
    ap.add_argument("--batch", type=int, default=2, help="batch size (default 2)")
    ap.add_argument("--image", type=int, default=224, help="image size for vision models (default 224)")
    ap.add_argument("--input-shape", help="explicit input shape, comma-separated (overrides --batch/--image)")
    ap.add_argument("--classes", type=int, default=0, help="number of classes of the labels (default: the output's dim 1)")
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "momentum", "adam"])
    ap.add_argument("--measure", action="store_true", help="record op times (time_ns)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="output JSON path")
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    model = build_model(args.model)
    shape = [int(s) for s in args.input_shape.split(",")] if args.input_shape else None
    x = example_inputs(model, args.model, args.batch, args.image, shape)
    with torch.no_grad():
        model.eval()
        classes = args.classes or model(x[:1]).shape[1]
    labels = torch.randint(0, classes, (x.shape[0],), dtype=torch.int64)
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    elif args.optimizer == "momentum":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = trace_step(model, x, labels, optimizer=opt, measure=args.measure, name=args.model)
    write_graph(g, args.out)
    print("%s: %d ops, %d tensors" % (args.out, len(g["ops"]), len(g["tensors"])), file=sys.stderr)


if __name__ == "__main__":
    main()
