"""Trace one PyTorch training step into remat's native graph JSON.

Runs forward, loss, backward and the optimizer step of an nn.Module once under
a TorchDispatchMode that sees every aten operator the step executes -
including the backward kernels the autograd engine runs, which read exactly
the tensors autograd saved for backward. Each operator that returns tensors
becomes one op of the graph (type = the aten operator's name: convolution,
native_batch_norm, convolution_backward, ...); each tensor it returns becomes
a tensor with its dtype, shape and storage size. An output sharing the
storage of an earlier tensor is a view (alias_of); an operator that writes one
of its arguments and returns it (relu_, add_, the optimizer's updates) gets
the inplace flag and its output is a new version of the argument aliasing it.
Each op carries its cost for sim's cost model: `flops` of convolutions and
matrix products (op_flops) and `bytes_accessed` (op_bytes). Phases follow the
step: forward until loss.backward(), backward until optimizer.step(), update
after. Convolutions carry the attributes sim's CPU model reads (conv_attrs:
geometry and memory formats), and convolution_backward and
embedding_dense_backward the layout of the gradient they were given
(grad_format).

Forward links: every backward kernel carries `forward`, the forward op whose
autograd node (grad_fn) it runs in. During the forward, the node autograd
attaches to an op's outputs is mapped to that op; before backward a pre-hook
on every node of the graph tells the recorder which node the engine runs, so
the kernels that follow (which read the node's saved tensors) are linked to
the node's forward op. Kernels outside any node's forward op (the loss seed,
gradient accumulation) carry no link.
"""

import json
import time
import weakref

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# aten ops that draw random numbers. The trace flags them nondeterministic
# with rng_saved=1: remat_torch.apply recomputes them under the RNG state of
# their first run, which it keeps until the backward pass ends (the simulator's
# setting recompute.rng_state_bytes).
RANDOM_OPS = {
    "bernoulli", "bernoulli_", "native_dropout", "dropout", "feature_dropout", "alpha_dropout",
    "feature_alpha_dropout", "rand", "rand_like", "randn", "randn_like", "randint", "randint_like",
    "randperm", "normal", "normal_", "uniform_", "exponential_", "geometric_", "cauchy_",
    "log_normal_", "random_", "multinomial", "rrelu_with_noise", "rrelu_with_noise_",
    "_fused_dropout", "poisson", "_standard_gamma", "binomial",
}

DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool",
}


class InplaceTwins:
    """Backward formulas written with in-place ops on their own fresh
    tensors call the out-of-place twin instead whenever a dispatch mode is
    active, because torch's isTensorSubclassLike is then true for every
    tensor; under the tracer's and the applier's modes they would allocate
    tensors the step run without a mode does not. Two kinds:

    * filling a fresh zero tensor with an in-place index op:
      gather_backward (new_zeros then scatter_add_), index_select_backward
      (index_add_), index_backward (index_put_), masked_select_backward
      (masked_scatter_), and value_selecting_reduction_backward, the
      backward of topk, sort, max and min along a dimension (zeros then
      scatter_);
    * in-place chains in one formula: binary_cross_entropy_with_logits'
      backward input.sigmoid().sub_(target).mul_(grad) (the profiler shows
      one allocation of the input's size without a mode, three with one).

    A mode's dispatch passes each backward kernel through func(), which
    runs the in-place op when the kernel is such a twin and its first
    argument is the tensor the kernel just before it made (the formula's
    own local, read by nothing else): the values are the same, and so is
    the memory of the step without a mode. node is the forward op type of
    the autograd node running (for the chains)."""

    TWINS = {"scatter_add", "index_add", "index_put", "masked_scatter", "scatter"}
    ZEROS = {"new_zeros", "zeros", "zeros_like"}
    CHAINS = {"binary_cross_entropy_with_logits": {("sigmoid", "sub"), ("sub", "mul")}}
    # kernels whose output a twin may take in place: only theirs is watched
    HEADS = ZEROS | {a for links in CHAINS.values() for a, _ in links}

    def __init__(self):
        self.fresh = None  # weak reference to the tensor the last kernel made
        self.prev = ""  # that kernel's name

    def func(self, func, args, node=None):
        """The kernel to run and its arguments for func(*args): its in-place
        twin (with a commutative op's operands swapped when the fresh
        tensor comes second: grad * t is t.mul_(grad)), or func and args."""
        z = self.fresh() if self.fresh is not None else None
        self.fresh = None
        name = func.overloadpacket.__name__
        if z is None or len(args) < 1:
            return func, args
        chain = (self.prev, name) in self.CHAINS.get(node, ())
        if not ((self.prev in self.ZEROS and name in self.TWINS) or chain):
            return func, args
        if args[0] is not z:
            if not (chain and name in ("mul", "add") and len(args) == 2 and args[1] is z):
                return func, args
            args = (args[1], args[0])
        if chain and len(args) > 1 and isinstance(args[1], torch.Tensor):
            o = args[1]
            if o.dtype != z.dtype or torch.broadcast_shapes(z.shape, o.shape) != z.shape:
                return func, args  # the result would not fit in place: keep the kernel as called
        inplace = getattr(torch.ops.aten, name + "_", None)
        f = getattr(inplace, func._overloadname, None) if inplace is not None else None
        return (f, args) if f is not None else (func, args)

    def ran(self, func, out):
        """Note the kernel func just ran and returned out."""
        self.prev = func.overloadpacket.__name__.rstrip("_")  # an in-place link of a chain as its op
        self.fresh = weakref.ref(out) if self.prev in self.HEADS and isinstance(out, torch.Tensor) else None


# Factories that allocate without reading or writing the memory.
_ALLOCATORS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}


def _nbytes(t):
    return t.numel() * t.element_size()


def _prod(xs):
    n = 1
    for x in xs:
        n *= int(x)
    return n


def _conv_flops(x, w, out, transposed):
    """2 x multiply-adds of a convolution with input x, weight w and output
    out: each output element of a convolution sums Cin/groups x kernel
    products (weight [Cout, Cin/groups, k...]); a transposed one scatters
    each input element over Cout/groups x kernel outputs (weight [Cin,
    Cout/groups, k...])."""
    per = int(w.shape[1]) * _prod(w.shape[2:])
    return 2 * (x.numel() if transposed else out.numel()) * per


def op_flops(name, args, outs):
    """FLOPs (2 per multiply-add) of the matrix products and convolutions,
    from their arguments' shapes; 0 for every other op, which the cost model
    prices by the bytes it reads and writes (elementwise ops, normalizations
    and copies are memory-bound)."""
    try:
        if name in ("mm", "addmm"):
            a, b = (args[0], args[1]) if name == "mm" else (args[1], args[2])
            return 2 * a.shape[0] * a.shape[1] * b.shape[1]
        if name in ("bmm", "baddbmm"):
            a, b = (args[0], args[1]) if name == "bmm" else (args[1], args[2])
            return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
        if name == "convolution":
            # convolution(input, weight, bias, stride, padding, dilation, transposed, ...)
            return _conv_flops(args[0], args[1], outs[0], bool(args[6]))
        if name == "convolution_backward":
            # convolution_backward(grad_output, input, weight, bias_sizes,
            # stride, padding, dilation, transposed, output_padding, groups,
            # output_mask): the input and the weight gradient each cost a
            # forward's products
            mask = args[10]
            fwd = _conv_flops(args[1], args[2], args[0], bool(args[7]))
            return fwd * (int(bool(mask[0])) + int(bool(mask[1])))
    except (IndexError, AttributeError, TypeError):
        pass
    return 0


def op_bytes(name, ins, outs, out_views, writes):
    """Bytes an aten call reads and writes, for the cost model: its distinct
    tensor arguments (ins: (tensor id, tensor) pairs) read, its outputs
    written (a view writes nothing; an in-place output is its argument
    written back). An op whose outputs are all views and that writes
    nothing (view, t, detach, slice, ...) and an allocation (empty) move no
    bytes: the cost model gives them the launch overhead alone."""
    if name in _ALLOCATORS or (not writes and all(out_views)):
        return 0
    seen = set()
    n = 0
    for tid, a in ins:
        if tid not in seen:
            seen.add(tid)
            n += _nbytes(a)
    for o, view in zip(outs, out_views):
        if writes or not view:
            n += _nbytes(o)
    return n


def channels_last(t):
    """Whether t is a 4-D tensor laid out channels-last (NHWC) and not also
    contiguous (a 1x1 image is both): a convolution's output is, when
    PyTorch ran it channels-last."""
    return t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)


def memory_format(t):
    """contiguous, channels_last (and not contiguous) or strided (neither):
    sim's names for a tensor's layout."""
    if t.is_contiguous():
        return "contiguous"
    return "channels_last" if channels_last(t) else "strided"


def conv_attrs(args, out):
    """The attributes of an aten convolution(input, weight, bias, stride,
    padding, dilation, transposed, output_padding, groups) call that sim's
    CPU workspace model reads: the input's layout (input_format: PyTorch
    copies an input not laid out as the convolution runs), stride, padding
    and dilation ("2,2"), groups, transposed=1 for a transposed convolution
    (its weight is C_in x C_out/groups x R x S), memory_format: channels_last
    when PyTorch ran it on channels-last tensors (its input or weight was
    channels-last, so its output is), else contiguous, and the weight's
    layout weight_format (a kernel copies a weight not laid out as it runs:
    oneDNN a plain weight of a channels-last convolution, slow_conv_transpose2d
    a channels-last one)."""
    attrs = {}
    if args and isinstance(args[0], torch.Tensor):
        attrs["input_format"] = memory_format(args[0])
    for key, i in (("stride", 3), ("padding", 4), ("dilation", 5)):
        if len(args) > i and isinstance(args[i], (list, tuple)):
            attrs[key] = ",".join(str(int(v)) for v in args[i])
    if len(args) > 8 and isinstance(args[8], int):
        attrs["groups"] = str(args[8])
    if len(args) > 6 and args[6] is True:
        attrs["transposed"] = "1"
    attrs["memory_format"] = "channels_last" if channels_last(out) else "contiguous"
    if len(args) > 1 and isinstance(args[1], torch.Tensor):
        attrs["weight_format"] = memory_format(args[1])
    return attrs


def _storage(t):
    s = t.storage()
    return s.data_ptr(), s.nbytes()


def graph_nodes(root):
    """Every autograd node reachable from root (a grad_fn), root first."""
    seen, order, stack = set(), [], [root]
    while stack:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        order.append(n)
        for nxt, _ in n.next_functions:
            stack.append(nxt)
    return order


class NodeMap:
    """Maps autograd nodes to the forward op that created them and, during
    backward, tells which node the engine is running (Node.register_prehook).

    Forward: after op k returns, autograd attaches its node to the outputs;
    the map reads output.grad_fn when the next op starts (or at flush()).
    Strong references to op k's outputs are held only until then."""

    def __init__(self, rec=None):
        self.pending = None  # (op id, outputs)
        self.nodes = {}  # id(node) -> (node, forward op id)
        self.current = None  # forward op of the node running in backward
        self.started = False  # a node started and has run no kernel yet
        self.node_saved = []  # tensor IDs the starting node unpacked
        self.handles = []
        self.rec = rec  # the recorder whose ops and tensors the nodes run in
        self.hold = True  # list a node's inputs on its last kernel (trace's hold_node_inputs)
        self.open = None  # (first op, first tensor) of the running node

    def produced(self, op_id, outs):
        self.flush()
        self.pending = (op_id, outs)

    def flush(self):
        if self.pending is None:
            return
        op_id, outs = self.pending
        self.pending = None
        for o in outs:
            fn = o.grad_fn
            if fn is not None and id(fn) not in self.nodes:
                self.nodes[id(fn)] = (fn, op_id)

    def hook_backward(self, loss):
        """Register a pre-hook on every node of loss's graph."""
        self.flush()
        if loss.grad_fn is None:
            return
        for n in graph_nodes(loss.grad_fn):
            e = self.nodes.get(id(n))
            op_id = e[1] if e is not None and e[0] is n else None
            self.handles.append(n.register_prehook(self._enter(op_id)))
            if op_id is not None:
                # Reset after the node: the engine's gradient accumulation
                # (InputBuffer adds) that follows belongs to no node.
                self.handles.append(n.register_hook(self._leave))

    def _enter(self, op_id):
        def pre(grad_outputs):
            self.open = None  # a node without a post-hook ended unseen
            self.current = op_id
            self.started = True  # the node's saved tensors are unpacked next, before its first kernel
            self.node_saved = []
            if op_id is not None and self.rec is not None and self.hold:
                self.open = (len(self.rec.ops), len(self.rec.tensors))

        return pre

    def _leave(self, grad_inputs, grad_outputs):
        if self.open is not None:
            self.rec.hold_to_node_end(*self.open)
            self.open = None
        self.current = None

    def close(self):
        for h in self.handles:
            h.remove()
        self.handles = []
        self.nodes = {}
        self.current = None
        self.pending = None
        self.open = None


def is_unpack_detach(func, args, unpacked):
    """Whether this call is autograd's detach of a tensor an unpack hook just
    returned (unpacked: those tensors, oldest first); consumes the mark."""
    if func is not torch.ops.aten.detach.default or not args:
        unpacked.clear()
        return False
    for i, u in enumerate(unpacked):
        if u is args[0]:
            del unpacked[: i + 1]
            return True
    unpacked.clear()
    return False


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
        self.twins = InplaceTwins()
        self.phase = "forward"
        self.measure = measure
        self.nodes = NodeMap(self)
        self.unpacked = []
        self.silent = 0
        # Storage lifetimes: root tensor id -> Python tensors alive for it,
        # and -> (ops recorded, phase) when its last one died.
        self.live = {}
        self.died = {}

    def hold_to_node_end(self, first_op, first_tensor):
        """A backward node's kernels were ops[first_op:]. The tensors they
        read that existed before the node started (its saved tensors and the
        gradients the engine passed it) are held until the node returns: the
        engine keeps its arguments and the node's unpacked saved tensors for
        the whole call (BmmBackward's second product still holds the mat2
        its first one read). They are listed as inputs of the node's last
        kernel, so that a simulation frees them after it, not earlier."""
        ops = self.ops[first_op:]
        if not ops:
            return
        held = []
        for op in ops:
            for tid in op["inputs"]:
                if tid < first_tensor and tid not in held:
                    held.append(tid)
        last = ops[-1]["inputs"]
        for tid in held:
            if tid not in last:
                last.append(tid)

    def _ref(self, t, tid):
        """A weak reference to t standing for tensor tid, which notes when
        the last Python tensor of tid's storage dies. A tensor a C++ kernel
        still holds keeps its Python object (PyTorch preserves it), so the
        death is the storage's real end."""
        root = self.tensors[tid].get("alias_of", tid)
        self.live[root] = self.live.get(root, 0) + 1

        def gone(_, root=root, rec=weakref.ref(self)):
            r = rec()
            if r is None:
                return
            r.live[root] -= 1
            if r.live[root] == 0:
                r.died[root] = (len(r.ops), r.phase)

        return weakref.ref(t, gone)

    def hold_to_death(self):
        """A storage that PyTorch frees later than its last reader, in the
        phase that made it, is held until then: the op recorded last before
        it died lists it in its attribute holds (graph.AttrHolds), so that a simulation keeps
        its memory until that op has run, also when a plan frees it earlier
        (a Python frame or a composite op still references it: aten::gru
        and aten::lstm keep each direction's input projection and final
        state until they return, a module's forward its locals until it
        returns; a backward formula's C++ temporaries live to the end of
        its expression). A hold is no data dependency: a recompute does not
        need the tensor. Profiler: a bidirectional nn.GRU frees the first
        direction's input projection after the second's is computed, an
        attention's q, k, v views keep the projection until its forward
        returns, and DivBackward's -grad * self / (other * other) holds its
        four intermediates at once."""
        last = {}
        for op in self.ops:
            for tid in op["inputs"]:
                root = self.tensors[tid].get("alias_of", tid)
                last[root] = op["id"]
        for root, (n, phase) in sorted(self.died.items()):
            t = self.tensors[root]
            p = t.get("producer")
            if p is None or self.ops[p]["phase"] != phase or n < 1:
                continue
            end = self.ops[n - 1]
            if end["phase"] != phase or end["id"] <= last.get(root, p):
                continue
            attrs = end.setdefault("attrs", {})
            held = attrs.get("holds")
            attrs["holds"] = str(root) if not held else held + "," + str(root)

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
        self.ids[id(t)] = (self._ref(t, tid), tid)
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

    def pack(self, t):
        """Identity pack hook: a detached alias of t (the tensor itself would
        close a reference cycle for an output saved by its own node), not
        recorded as an op, standing for t's tensor ID."""
        if not isinstance(t, torch.Tensor) or t.dim() == 0:  # scalars (wrapped numbers cannot be detached)
            return t
        self.silent += 1
        try:
            d = t.detach()
        finally:
            self.silent -= 1
        tid = self.lookup(t)
        if tid is not None:
            self.ids[id(d)] = (self._ref(d, tid), tid)
        return d

    def unpack(self, t):
        """Identity unpack hook that marks t: autograd detaches what an
        unpack hook returns, and that detach is bookkeeping, not an op. A node
        unpacks all its saved tensors before its first kernel: they are
        recorded as inputs of that kernel, so they are alive (kept or
        recomputed) when the node starts, as in PyTorch."""
        self.unpacked.append(t)
        if self.nodes.started and isinstance(t, torch.Tensor):
            tid = self.lookup(t)
            if tid is not None:
                self.nodes.node_saved.append(tid)
        return t

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.silent:
            return func(*args, **kwargs)
        if self.unpacked and is_unpack_detach(func, args, self.unpacked):
            out = func(*args, **kwargs)
            if not isinstance(out, torch.Tensor):
                # A saved wrapped number (x * 0.5 saves its scalar operand):
                # torch 1.13's dispatch returns its detach as a Python float.
                out = torch.tensor(out, dtype=args[0].dtype)
            tid = self.lookup(args[0])
            if tid is not None:  # readers of the unpacked tensor read the saved one
                self.ids[id(out)] = (self._ref(out, tid), tid)
            return out
        if self.phase == "forward":
            self.nodes.flush()
        else:
            cur = self.nodes.current
            func, args = self.twins.func(func, args, self.ops[cur]["type"] if cur is not None else None)
        flat_in, _ = tree_flatten((args, kwargs))
        in_tensors = [a for a in flat_in if isinstance(a, torch.Tensor)]
        ins = [self.tensor_id(a) for a in in_tensors]
        read = list(zip(ins, in_tensors))  # before backward adds the node's saved tensors to ins
        t0 = time.perf_counter_ns()
        out = func(*args, **kwargs)
        dt = time.perf_counter_ns() - t0
        self.twins.ran(func, out)
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
        if self.phase == "backward" and self.nodes.current is not None:
            op["forward"] = self.nodes.current
        if self.phase == "backward" and self.nodes.started:
            self.nodes.started = False
            for tid in self.nodes.node_saved:
                if tid not in ins:
                    ins.append(tid)
            self.nodes.node_saved = []
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
        if name in RANDOM_OPS:
            op.setdefault("flags", []).append("nondeterministic")
            op["attrs"] = {"rng_saved": "1"}
        if name == "convolution":
            op["attrs"] = conv_attrs(args, outs[0])
        elif name == "native_batch_norm" and args and isinstance(args[0], torch.Tensor):
            # the CPU backward's input-sized temporary depends on the layout
            op["attrs"] = {"input_format": memory_format(args[0])}
        elif name in ("convolution_backward", "embedding_dense_backward") and args and isinstance(args[0], torch.Tensor):
            # the kernel copies a gradient not laid out as its forward ran
            op["attrs"] = {"grad_format": memory_format(args[0])}
        out_views = ["alias_of" in self.tensors[tid] for tid in op["outputs"]]
        flops = op_flops(name, args, outs)
        if flops > 0:
            op["flops"] = int(flops)
        nbytes = op_bytes(name, read, outs, out_views, inplace)
        if nbytes > 0:
            op["bytes_accessed"] = int(nbytes)
        self.ops.append(op)
        if self.phase == "forward":
            self.nodes.produced(oid, outs)
        return out


def _as_tuple(inputs):
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs)
    return (inputs,)


def trace(model, inputs, labels, loss_fn=None, optimizer=None, measure=False, name="model", hold_node_inputs=True):
    """Trace one training step of model and return the graph as a dict in the
    native JSON layout (docs/format.md).

    inputs is a tensor or a tuple of forward's positional tensors, labels the
    loss target, loss_fn(output, labels) defaults to F.cross_entropy and
    optimizer (over model's parameters) to SGD(lr=0.01). Gradients are set to
    None before the step. With measure, each op's time_ns is the median over
    three traced steps. The step really runs: parameters are updated and
    batch-norm statistics move, as in training.

    With hold_node_inputs (the default), a backward node's last kernel also
    lists what the node was given (saved tensors, incoming gradients), which
    PyTorch holds until the node returns (_Recorder.hold_to_node_end). A
    trace for a DTR log turns it off: the DTR prototype's logs record what
    kernels access, and there a held reference does not pin an evicted
    tensor's memory."""
    inputs = _as_tuple(inputs)
    if loss_fn is None:
        loss_fn = F.cross_entropy
    model.train()
    if optimizer is None:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    runs = 3 if measure else 1
    graphs = []
    for _ in range(runs):
        optimizer.zero_grad(set_to_none=True)
        rec = _Recorder(measure=measure)
        rec.nodes.hold = hold_node_inputs
        for n, p in model.named_parameters():
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
        try:
            # Identity saved-tensor hooks: autograd then saves and unpacks
            # tensors as it does under remat_torch.apply (without hooks it
            # adds detach calls for saved outputs), so the op numbering of the
            # trace is the one the applier sees. The detach autograd applies
            # to each unpacked tensor is not an op of the graph (see unpack).
            with rec, torch.autograd.graph.saved_tensors_hooks(rec.pack, rec.unpack):
                loss = loss_fn(model(*inputs), labels)
                rec.nodes.hook_backward(loss)
                rec.phase = "backward"
                loss.backward()
                rec.nodes.close()
                rec.phase = "update"
                optimizer.step()
        finally:
            rec.nodes.close()
        if rec.nodes.hold:
            rec.hold_to_death()
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
        "attrs": {"source": "remat_torch.trace", "torch": torch.__version__, "batch": str(batch)},
        "loss": loss_id,
        "tensors": rec.tensors,
        "ops": rec.ops,
    }


def write_graph(g, path):
    """Write a graph dict as JSON (format and version first)."""
    with open(path, "w") as f:
        json.dump(g, f, separators=(",", ":"))
        f.write("\n")
