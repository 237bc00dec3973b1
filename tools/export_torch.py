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

From Python: trace_step(model, inputs, labels) returns the graph as a dict and
write_graph(graph, path) writes it.
"""

import argparse
import importlib
import json
import os
import sys
import time
import weakref

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool",
}


def _storage(t):
    s = t.storage()
    return s.data_ptr(), s.nbytes()


class _Recorder(TorchDispatchMode):
    """Records every aten call as an op of the graph."""

    def __init__(self, measure=False):
        super().__init__()
        self.tensors = []  # dicts in the JSON layout
        self.ops = []
        # id(python tensor) -> (weak reference, tensor id). Only weak
        # references: a strong one would raise the tensors' use counts and
        # change what PyTorch does (AccumulateGrad steals a gradient only when
        # nothing else holds it, else it copies it).
        self.ids = {}
        self.keep = []  # the storages: data pointers stay unique while tracing
        self.roots = {}  # storage data_ptr -> root tensor id
        self.phase = "forward"
        self.measure = measure

    # -- tensors --

    def add_tensor(self, t, name, kind, producer=None):
        tid = len(self.tensors)
        ptr, nbytes = _storage(t)
        rec = {"id": tid, "name": name, "kind": kind}
        if t.dtype in DTYPES:
            rec["dtype"] = DTYPES[t.dtype]
            rec["shape"] = list(t.shape)
        root = self.roots.get(ptr) if nbytes > 0 else None
        if root is not None:
            rec["alias_of"] = root
            rec["bytes"] = t.numel() * t.element_size()
        else:
            rec["bytes"] = nbytes
            if nbytes > 0:
                self.roots[ptr] = tid
        if producer is not None:
            rec["producer"] = producer
        self.tensors.append(rec)
        self.ids[id(t)] = (weakref.ref(t), tid)
        self.keep.append(t.storage())
        return tid

    def lookup(self, t):
        """The tensor id of a live python tensor, or None."""
        e = self.ids.get(id(t))
        if e is None or e[0]() is not t:
            return None
        return e[1]

    def tensor_id(self, t):
        tid = self.lookup(t)
        if tid is None:  # created outside the step: a constant
            tid = self.add_tensor(t, "const%d" % len(self.tensors), "constant")
        return tid

    # -- ops --

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat_in, _ = tree_flatten((args, kwargs))
        ins = [self.tensor_id(a) for a in flat_in if isinstance(a, torch.Tensor)]
        t0 = time.perf_counter_ns()
        out = func(*args, **kwargs)
        dt = time.perf_counter_ns() - t0
        flat_out, _ = tree_flatten(out)
        outs = [o for o in flat_out if isinstance(o, torch.Tensor)]
        if not outs:
            return out
        schema = func._schema
        writes = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
        oid = len(self.ops)
        name = func.overloadpacket.__name__
        op = {"id": oid, "name": "%s#%d" % (name, oid), "type": name, "phase": self.phase, "inputs": ins, "outputs": []}
        if self.measure:
            op["time_ns"] = max(dt, 1)
        inplace = False
        for j, o in enumerate(outs):
            kind = {"forward": "activation", "backward": "gradient", "update": "parameter"}[self.phase]
            prev = self.lookup(o)
            if prev is not None:
                # The op returned one of its arguments: an in-place write.
                inplace = inplace or writes
                kind = self.tensors[prev]["kind"]
                if kind in ("input",):
                    kind = "activation"
            tid = self.add_tensor(o, "%s:%d" % (op["name"], j), kind, producer=oid)
            if prev is not None and "alias_of" not in self.tensors[tid]:
                self.tensors[tid]["alias_of"] = prev
            op["outputs"].append(tid)
        if inplace:
            op["flags"] = ["inplace"]
        self.ops.append(op)
        return out


def trace_step(model, inputs, labels, loss_fn=F.cross_entropy, optimizer=None, measure=False, name="model"):
    """Trace one training step of model and return the graph as a dict in the
    native JSON layout. inputs is a tensor or a tuple of tensors, labels the
    loss target. optimizer defaults to SGD(lr=0.01). With measure, each op's
    time_ns is the median over three traced steps."""
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    model.train()
    if optimizer is None:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    runs = 3 if measure else 1
    graphs = []
    for _ in range(runs):
        optimizer.zero_grad(set_to_none=True)
        rec = _Recorder(measure=measure)
        names = {}
        for n, p in model.named_parameters():
            names[id(p)] = n
            rec.add_tensor(p, n, "parameter")
        for n, b in model.named_buffers():
            rec.add_tensor(b, n, "constant")
        for i, x in enumerate(inputs):
            rec.add_tensor(x, "input%d" % i if len(inputs) > 1 else "input", "input")
        rec.add_tensor(labels, "label", "input")
        for st in optimizer.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor):
                    rec.add_tensor(v, "optimizer_state%d" % len(rec.tensors), "optimizer_state")
        with rec:
            loss = loss_fn(model(*inputs), labels)
            rec.phase = "backward"
            loss.backward()
            rec.phase = "update"
            optimizer.step()
        loss_id = rec.lookup(loss)
        for n, p in model.named_parameters():
            if p.grad is not None and rec.lookup(p.grad) is not None:
                g = rec.tensors[rec.lookup(p.grad)]
                if g["kind"] == "gradient":
                    g["kind"] = "param_gradient"
                    g["name"] = n + ".grad"
        graphs.append((rec, loss_id))
        del rec.keep
    rec, loss_id = graphs[-1]
    if measure:
        for i, op in enumerate(rec.ops):
            ts = sorted(g.ops[i].get("time_ns", 1) for g, _ in graphs if i < len(g.ops))
            op["time_ns"] = ts[len(ts) // 2]
    batch = inputs[0].shape[0] if inputs and inputs[0].dim() > 0 else 1
    return {
        "format": "remat.graph",
        "version": 1,
        "name": name,
        "attrs": {"source": "export_torch.py", "torch": torch.__version__, "batch": str(batch)},
        "loss": loss_id,
        "tensors": rec.tensors,
        "ops": rec.ops,
    }


def write_graph(g, path):
    """Write a graph dict as JSON (format and version first)."""
    with open(path, "w") as f:
        json.dump(g, f, separators=(",", ":"))
        f.write("\n")


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
