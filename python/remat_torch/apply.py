"""Apply a remat plan (`sim plan --format json`) to an unmodified PyTorch model.

apply(model, plan, example_inputs) returns a module that shares model's
parameters and buffers and whose training step follows the plan:

* The forward runs under a TorchDispatchMode that numbers the aten calls the
  way remat_torch.trace numbers ops (every call returning tensors is one op,
  in order), checks each against the plan's signature (type, output dtypes
  and shapes; the first mismatch is an error naming the op) and records how
  to run it again (the aten function, its non-tensor arguments, and its
  tensor arguments as graph tensor IDs or, for tensors from outside the step
  such as parameters, the tensors themselves).
* Autograd's saved tensors go through saved_tensors_hooks: a tensor the plan
  drops (an output of an op the plan computes more than once) or swaps is
  packed as a handle holding only its tensor ID, so autograd keeps no
  reference to it; every other saved tensor is kept as autograd would.
* The applier holds a reference to a tensor only while the plan keeps it
  resident and it is needed later for a recompute or as a dropped saved
  tensor; the plan's free steps drop those references (so the tensor's
  memory goes when PyTorch's own references go, as the simulator assumes).
* Backward: a pre-hook on every autograd node of the step pushes the same
  dispatch mode (the engine restores thread-local state per node) and aligns
  the plan cursor with the node's first kernel through the forward links of
  the plan's signature. Before each kernel the plan's steps up to its compute
  run: recomputes (compute of an op already computed), frees, swaps. An
  unpacked handle returns the recomputed tensor; if the plan has not
  recomputed it yet at that point it is recomputed on demand, recursively
  from resident tensors, and the plan's own recompute of it later reuses it.
* Recompute pitfalls: an op that consumes random numbers runs with the CPU
  (and CUDA) RNG state captured before its first run (dropout draws the same
  mask); arguments an op writes but does not return (batch norm's running
  statistics) are cloned, so they are updated exactly once; an in-place op
  recomputed on an original tensor writes a clone; every held tensor carries
  the version counter it had, and a tensor modified in place since is
  recomputed rather than returned, unless the writer was a recomputed
  in-place op on the runner's own recomputed storage (a mask filled through
  slices): the tensors held on that storage then hold what the forward's
  later readers read.

The loss and the optimizer run outside the returned module: their ops are in
the plan (the trace saw them) but are not intercepted; a plan step on one of
their tensors is skipped.
"""

import re
import weakref

import torch
import torch.utils._python_dispatch as _pd
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from .trace import DTYPES, RANDOM_OPS, InplaceTwins, NodeMap, graph_nodes, is_unpack_detach

_DTYPES_BY_NAME = {v: k for k, v in DTYPES.items()}
_OUT = re.compile(r"^(\d+):([^\[]*)\[([^\]]*)\](?:=(\d+))?$")


class PlanMismatch(ValueError):
    """The plan was made for another graph (other model or input shapes)."""


class PlanError(ValueError):
    """The plan JSON is malformed or cannot be applied."""


class _Op:
    __slots__ = ("phase", "type", "forward", "outputs", "text")

    def __init__(self, phase, typ, forward, outputs, text):
        self.phase, self.type, self.forward, self.outputs, self.text = phase, typ, forward, outputs, text


def parse_plan(plan):
    """Check a parsed plan dict and return (steps, ops): steps a list of
    (kind, id), ops the parsed signature entries."""
    if not isinstance(plan, dict):
        raise PlanError("plan: got %s, expected the parsed JSON object of `sim plan --format json`" % type(plan).__name__)
    if plan.get("format") != "remat.plan":
        raise PlanError("plan: field format is %r, expected 'remat.plan'" % (plan.get("format"),))
    if plan.get("version") != 1:
        raise PlanError("plan: field version is %r, expected 1" % (plan.get("version"),))
    sig = plan.get("signature")
    if not isinstance(sig, list) or not sig:
        raise PlanError("plan: field signature is %s, expected one entry per op (made by `sim plan` of this "
                        "version from a graph traced with remat_torch.trace)" % ("missing" if sig is None else repr(sig)[:40]))
    ops = []
    for i, e in enumerate(sig):
        if not isinstance(e, str):
            raise PlanError("plan: signature[%d] is %r, expected a string" % (i, e))
        f = e.split(" ")
        if len(f) < 2 or f[0] not in ("forward", "backward", "update"):
            raise PlanError("plan: signature[%d] is %r, expected 'PHASE TYPE [<FORWARD] [ID:DTYPE[DIMS][=ALIAS]]...'" % (i, e))
        fwd = None
        rest = f[2:]
        if rest and rest[0].startswith("<"):
            try:
                fwd = int(rest[0][1:])
            except ValueError:
                raise PlanError("plan: signature[%d]: forward link %r, expected <OP" % (i, rest[0])) from None
            rest = rest[1:]
        outs = []
        for r in rest:
            m = _OUT.match(r)
            if not m:
                raise PlanError("plan: signature[%d]: output %r, expected ID:DTYPE[DIMS][=ALIAS]" % (i, r))
            dims = m.group(3)
            shape = None if dims == "?" else ([int(d) for d in dims.split(",")] if dims else [])
            outs.append((int(m.group(1)), m.group(2), shape, int(m.group(4)) if m.group(4) else None))
        ops.append(_Op(f[0], f[1], fwd, outs, e))
    steps = []
    kinds = ("compute", "free", "swap_out", "swap_in")
    raw = plan.get("steps")
    if not isinstance(raw, list):
        raise PlanError("plan: field steps is %r, expected an array" % (raw,))
    for i, s in enumerate(raw):
        if not isinstance(s, dict) or len(s) != 1 or next(iter(s)) not in kinds:
            raise PlanError("plan: steps[%d] is %r, expected one of compute, free, swap_out, swap_in" % (i, s))
        k, v = next(iter(s.items()))
        if not isinstance(v, int) or v < 0:
            raise PlanError("plan: steps[%d].%s is %r, expected an ID >= 0" % (i, k, v))
        if k == "compute" and v >= len(ops):
            raise PlanError("plan: steps[%d].compute is op %d, expected 0..%d (the signature's ops)" % (i, v, len(ops) - 1))
        steps.append((k, v))
    return steps, ops


def _describe(t):
    dt = DTYPES.get(t.dtype, "?")
    return "%s[%s]" % (dt, ",".join(str(d) for d in t.shape))


class _Handle:
    """What autograd stores for a dropped or swapped saved tensor."""

    __slots__ = ("tid", "step")

    def __init__(self, tid, step):
        self.tid, self.step = tid, step


def written_arg_names(schema):
    """The names of the arguments an op's schema marks as written in place."""
    return {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}


class _Recipe:
    __slots__ = ("func", "args", "kwargs", "rng", "writes", "writes_only")

    def __init__(self, func, args, kwargs, rng, writes, writes_only):
        self.func, self.args, self.kwargs, self.rng = func, args, kwargs, rng
        self.writes, self.writes_only = writes, writes_only


class _Ref:
    """A tensor argument of a recipe that is an op output: its graph ID."""

    __slots__ = ("tid",)

    def __init__(self, tid):
        self.tid = tid


class _Mode(TorchDispatchMode):
    def __init__(self, runner):
        super().__init__()
        self.runner = runner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return _rewrap(self.runner.dispatch(func, args, kwargs or {}), args)


class _Step:
    """The state of one training step."""

    def __init__(self):
        self.pos = 0  # next plan step
        self.fpos = 0  # next forward op position
        self.bpos = None  # next backward op position
        self.done = set()  # ops computed at least once
        self.ahead = set()  # plan steps run ahead of the cursor (see _lookahead)
        self.standins = {}  # id(stand-in) -> (weakref, tid), see Runner._standin
        self.store = {}  # tid -> (tensor, version): tensors the applier holds
        self.host = {}  # tid -> swapped-out copy
        self.ids = {}  # id(python tensor) -> (weakref, tid)
        self.recipes = {}  # forward op -> _Recipe
        self.rng = {}  # forward op -> RNG states
        self.nodes = NodeMap()
        self.twins = InplaceTwins()
        self.handles = []
        self.phase = "forward"
        self.finished = False


class Runner:
    """Runs training steps of a model under a plan (see the module doc)."""

    def __init__(self, model, plan, check_only=False):
        self.model = model
        self.steps, self.ops = parse_plan(plan)
        self.strategy = plan.get("strategy", "")
        n = len(self.ops)
        self.first = [-1] * n  # index of each op's first compute step
        counts = [0] * n
        for i, (k, v) in enumerate(self.steps):
            if k == "compute":
                if self.first[v] < 0:
                    self.first[v] = i
                counts[v] += 1
        self.recomputed = {i for i in range(n) if counts[i] > 1 and self.ops[i].phase == "forward"}
        self.producer = {}  # tid -> (op, output index)
        for i, o in enumerate(self.ops):
            for j, (tid, _, _, _) in enumerate(o.outputs):
                self.producer[tid] = (i, j)
        # Views: freeing a base frees its views (as in the simulator).
        alias = {tid: a for o in self.ops for tid, _, _, a in o.outputs if a is not None}
        self.views = {}
        for tid in alias:
            r, n = tid, 0
            while r in alias and n <= len(alias):
                r, n = alias[r], n + 1
            self.views.setdefault(r, []).append(tid)
        self.view_ops = {i for i, o in enumerate(self.ops) if o.phase == "forward" and any(a is not None for _, _, _, a in o.outputs)}
        swapped = {v for k, v in self.steps if k == "swap_out"}
        # Tensors packed as handles: outputs of recomputed ops, swapped tensors.
        self.dropped = {tid for i in self.recomputed for tid, _, _, _ in self.ops[i].outputs} | swapped
        # A saved view of a dropped base is dropped too: kept, it would keep
        # the base's storage alive, which the simulator frees with the base.
        for root, vs in self.views.items():
            if root in self.dropped:
                self.dropped.update(vs)
        self.links = {}  # forward op -> backward op positions linked to it
        for i, o in enumerate(self.ops):
            if o.phase == "backward" and o.forward is not None:
                self.links.setdefault(o.forward, []).append(i)
        self.nforward = sum(1 for o in self.ops if o.phase == "forward")
        self.mode = _Mode(self)
        self.internal = 0
        self.unpacked = []
        self.st = None
        self.check_only = check_only
        self.stats = {"recomputes": 0, "on_demand": 0, "backward_mismatches": 0, "skipped_steps": 0,
                      "stand_ins": 0, "stand_in_reads": 0, "view_rebuilds": 0}

    # -- tensors held by the applier --

    def _hold(self, tid, t):
        self.st.store[tid] = (t, t._version)

    def _get(self, tid):
        """The held tensor tid if it still has the version it had, else None."""
        e = self.st.store.get(tid)
        if e is None:
            return None
        t, v = e
        if t._version != v:
            return None
        return t

    def _tid(self, t):
        e = self.st.ids.get(id(t))
        if e is None or e[0]() is not t:
            return None
        return e[1]

    # -- plan cursor --

    def _advance(self, target):
        """Run the plan's steps before the first compute of op target."""
        st = self.st
        end = self.first[target] if 0 <= target < len(self.first) else -1
        if end < st.pos:
            return
        while st.pos < end:
            k, v = self.steps[st.pos]
            st.pos += 1
            if st.pos - 1 not in st.ahead:
                self._run_step(k, v)
        st.pos = end + 1
        st.done.add(target)

    def _run_step(self, k, v):
        st = self.st
        if k == "compute":
            if v not in st.done:
                st.done.add(v)  # an op outside the module (loss, optimizer) or not seen
                self.stats["skipped_steps"] += 1
            elif v in st.recipes:
                if any(self._get(tid) is None for tid, _, _, _ in self.ops[v].outputs):
                    self._recompute(v)
            else:
                self.stats["skipped_steps"] += 1
        elif k == "free":
            st.store.pop(v, None)
            st.host.pop(v, None)
            for w in self.views.get(v, ()):
                st.store.pop(w, None)
                st.host.pop(w, None)
        elif k == "swap_out":
            t = self._get(v)
            if t is not None:
                st.host[v] = t if t.device.type == "cpu" else t.detach().to("cpu", copy=True)
                st.store.pop(v, None)
        elif k == "swap_in":
            h = st.host.pop(v, None)
            if h is not None:
                dev = self.device
                self._hold(v, h if dev.type == "cpu" else h.to(dev))

    # -- recompute --

    def _resolve(self, tid, depth=0):
        t = self._get(tid)
        if t is not None:
            return t
        if depth > 200:
            raise RuntimeError("remat_torch: recomputing tensor %d needs a chain of more than 200 dropped tensors" % tid)
        p = self.producer.get(tid)
        if p is None or p[0] not in self.st.recipes:
            raise RuntimeError("remat_torch: tensor %d (%s) is needed for a recompute but is neither held nor "
                               "recomputable (op outside the module)" % (tid, self.ops[p[0]].text if p else "?"))
        if p[0] in self.view_ops and p[0] not in self.recomputed:
            self.stats["view_rebuilds"] += 1
        else:
            self.stats["on_demand"] += 1
        self._recompute(p[0], depth + 1)
        t = self._get(tid)
        if t is None:
            raise RuntimeError("remat_torch: recomputing op %d did not give tensor %d" % (p[0], tid))
        return t

    def _recompute(self, op, depth=0):
        self._rerun_recipe(op, depth)
        if op in self.recomputed:
            self.stats["recomputes"] += 1

    def _rerun_recipe(self, op, depth=0):
        """Run op's recorded recipe again and hold its outputs, its
        arguments resolved through self._resolve (recursively): the RNG state
        of the first run, written arguments cloned unless they are this
        runner's own recomputed tensors (batch-norm running statistics:
        always cloned). Shared with the DTR runtime (dtr.py)."""
        r = self.st.recipes[op]
        own = set()

        def arg(a):
            if isinstance(a, _Ref):
                t = self._resolve(a.tid, depth)
                own.add(id(t))
                return t
            return a

        args = tree_map(arg, r.args)
        kwargs = tree_map(arg, r.kwargs)
        # Arguments the op writes: a clone when the op does not return them
        # (batch norm's running statistics: updated once, in the forward) or
        # when they are not the applier's own recomputed tensors; an in-place
        # op on a recomputed input rebuilds the version it wrote, as the
        # simulator's alias does.
        written = []  # this runner's own recomputed tensors the op writes
        if r.writes:
            flat, spec = tree_flatten((args, kwargs))
            for i in r.writes:
                t = flat[i]
                if isinstance(t, torch.Tensor) and (i in r.writes_only or id(t) not in own):
                    flat[i] = t.clone()
                elif isinstance(t, torch.Tensor):
                    written.append(t)
            args, kwargs = _unflatten(flat, spec)
        self.internal += 1
        try:
            with torch.no_grad():
                if r.rng is not None:
                    with torch.random.fork_rng(devices=[self.device] if r.rng[1] is not None else []):
                        torch.set_rng_state(r.rng[0])
                        if r.rng[1] is not None:
                            torch.cuda.set_rng_state(r.rng[1], self.device)
                        out = r.func(*args, **kwargs)
                else:
                    out = r.func(*args, **kwargs)
        finally:
            self.internal -= 1
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        for (tid, _, _, _), o in zip(self.ops[op].outputs, outs):
            self._hold(tid, o)
        if written:
            # The op wrote, in place, a storage this recompute made afresh,
            # as its first run wrote the forward's: the held tensors on that
            # storage (its base, other views of it) now hold what the
            # forward's readers after this op read. Swin Transformer's
            # attention mask is new_zeros filled through slices, one fill_
            # after another; the next slice reads the base as the previous
            # fill_ left it, not the zeros it was held with.
            ptrs = {w.storage().data_ptr() for w in written}
            for tid, (t, v) in list(self.st.store.items()):
                if t._version != v and t.storage().data_ptr() in ptrs:
                    self._hold(tid, t)

    # -- dispatch --

    def dispatch(self, func, args, kwargs):
        if self.internal:
            return func(*args, **kwargs)
        st = self.st
        if st is None or st.finished:
            return func(*args, **kwargs)
        if self.unpacked and is_unpack_detach(func, args, self.unpacked):
            # autograd's detach of an unpacked tensor: not an op (see trace)
            out = func(*args, **kwargs)
            e = st.standins.get(id(args[0]))
            if e is not None and e[0]() is args[0] and isinstance(out, torch.Tensor):
                st.standins[id(out)] = (weakref.ref(out), e[1])
            return out
        if st.phase == "forward":
            return self._forward_op(func, args, kwargs)
        return self._backward_op(func, args, kwargs)

    def _forward_op(self, func, args, kwargs):
        st = self.st
        st.nodes.flush()
        k = st.fpos
        name = func.overloadpacket.__name__
        if k >= self.nforward or self.ops[k].phase != "forward":
            raise PlanMismatch("plan %r does not match this model: the model runs more forward ops than the plan's "
                               "graph has (op #%d %s; the plan's graph has %d forward ops)" % (self.strategy, k, name, self.nforward))
        exp = self.ops[k]
        if exp.type != name:
            raise PlanMismatch("plan %r does not match this model: op #%d: the plan expects %r, the model runs %s "
                               "(trace the step with the same model and input shapes and plan again)" % (self.strategy, k, exp.text, name))
        flat_in, spec = tree_flatten((args, kwargs))
        if not self.check_only:
            self._advance(k)
        rng, in_tids = None, None
        if k in self.view_ops and k not in self.recomputed and not self.check_only:
            # A view: the simulator revives it with its base, so the applier
            # can rebuild it from a recomputed base (nothing held for it).
            in_tids = [self._tid(v) if isinstance(v, torch.Tensor) else None for v in flat_in]
        if k in self.recomputed and not self.check_only:
            # The recompute's inputs, named before the op runs (an in-place op
            # returns its input as a new version) and held at the version it
            # reads until the plan frees them.
            in_tids = [self._tid(v) if isinstance(v, torch.Tensor) else None for v in flat_in]
            for v, tid in zip(flat_in, in_tids):
                if tid is not None and self._get(tid) is None:
                    self._hold(tid, v)
        if k in self.recomputed and name in RANDOM_OPS:
            dev = self._device_of(flat_in)
            rng = (torch.get_rng_state(), torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None)
        out = func(*args, **kwargs)
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        if not outs:
            return out  # not an op of the graph: the tracer counts only calls returning tensors
        if not self.check_only:
            st.done.add(k)
        if len(outs) != len(exp.outputs) or any(
                _describe(o) != "%s[%s]" % (d, "?" if s is None else ",".join(map(str, s)))
                for o, (_, d, s, _) in zip(outs, exp.outputs)):
            got = " ".join(_describe(o) for o in outs)
            raise PlanMismatch("plan %r does not match this model: op #%d %s: the plan expects %r, the model's "
                               "outputs are %s (trace the step with the same input shapes and plan again)" % (
                                   self.strategy, k, name, exp.text, got))
        st.fpos += 1
        if self.check_only:
            st.nodes.produced(k, outs)  # the same references as a real step (they can change what autograd does)
            return out
        for (tid, _, _, _), o in zip(exp.outputs, outs):
            st.ids[id(o)] = (weakref.ref(o), tid)
            if tid in self.dropped:
                self._hold(tid, o)
        if k in self.recomputed or k in self.view_ops:
            self._record(k, func, args, kwargs, flat_in, in_tids, spec, outs, rng)
        st.nodes.produced(k, outs)
        return out

    def _record(self, k, func, args, kwargs, flat_in, in_tids, spec, outs, rng):
        st = self.st
        schema = func._schema
        writes, flat_args = [], []
        # Map schema arguments to flattened positions: positional args first,
        # then kwargs, each tensor or list of tensors.
        written_names = written_arg_names(schema)
        out_ids = {id(o) for o in outs}
        idx = 0
        writes_only = set()
        sargs = schema.arguments

        def walk(value, is_write):
            nonlocal idx
            f, _ = tree_flatten(value)
            for v in f:
                if is_write and isinstance(v, torch.Tensor):
                    writes.append(idx)
                    if id(v) not in out_ids:
                        writes_only.add(idx)
                idx += 1

        for i, a in enumerate(args):
            walk(a, i < len(sargs) and sargs[i].name in written_names)
        for n in kwargs:
            walk(kwargs[n], n in written_names)
        if "batch_norm" in func.overloadpacket.__name__:
            # torch 1.13's batch-norm schemas do not mark the running
            # statistics (arguments 3 and 4) as written.
            pos = 0
            for i, a in enumerate(args):
                n = len(tree_flatten(a)[0])
                if i in (3, 4) and isinstance(a, torch.Tensor) and pos not in writes:
                    writes.append(pos)
                    writes_only.add(pos)
                pos += n
        for v, tid in zip(flat_in, in_tids):
            flat_args.append(_Ref(tid) if tid is not None else v)
        a2, k2 = _unflatten(flat_args, spec)
        st.recipes[k] = _Recipe(func, a2, k2, rng, writes, writes_only)

    def _backward_op(self, func, args, kwargs):
        st = self.st
        p = st.bpos
        exp = self.ops[p] if p is not None and p < len(self.ops) else None  # the kernel the plan expects
        node = self.ops[exp.forward].type if exp is not None and exp.forward is not None else None
        func, args = st.twins.func(func, args, node)  # the plain step's in-place kernel (trace.InplaceTwins)
        name = func.overloadpacket.__name__
        if exp is not None and exp.type == name:
            self._advance(p)
            st.bpos = p + 1
        else:
            self.stats["backward_mismatches"] += 1
        if st.standins:
            args, kwargs = self._real(args, kwargs)
        out = func(*args, **kwargs)
        st.twins.ran(func, out)
        return out

    # -- saved tensors --

    def pack(self, t):
        if not isinstance(t, torch.Tensor) or t.dim() == 0:  # scalars (wrapped numbers cannot be detached)
            return t
        st = self.st
        if st is None or self.internal:
            return _detached(t)
        tid = self._tid(t)
        if tid is None or tid not in self.dropped:
            # Kept: a detached alias (same storage and version counter). The
            # tensor itself would close a reference cycle (an output saved by
            # its own node) that leaks the graph when no backward runs.
            self.internal += 1
            try:
                return _detached(t)
            finally:
                self.internal -= 1
        if self._get(tid) is None:
            self._hold(tid, t)
        return _Handle(tid, st)

    def unpack(self, h):
        t = self._unpack(h)
        self.unpacked.append(t)
        return t

    def _unpack(self, h):
        if not isinstance(h, _Handle):
            return h
        st = h.step
        if st is not self.st or st.finished:
            raise RuntimeError("remat_torch: a saved tensor of an earlier step was unpacked (backward called twice "
                               "on one step? retain_graph is not supported by the applier)")
        if st.bpos is not None:
            self.internal += 1
            try:
                self._advance_before(st.bpos)
            finally:
                self.internal -= 1
        self.internal += 1
        try:
            if self._get(h.tid) is None:
                self._lookahead(h.tid)
            t = self._get(h.tid)
            if t is not None:
                return t
            # Not resident in the plan here: the node's kernels do not read
            # it (the trace names the tensors they read), autograd saved it
            # for its metadata (mean's input, for its sizes). A stand-in of
            # its dtype and shape on one element of memory; a kernel that
            # reads it after all gets the real tensor, recomputed on demand.
            return self._standin(h.tid)
        finally:
            self.internal -= 1

    def _standin(self, tid):
        op, j = self.producer[tid]
        _, dtype, shape, _ = self.ops[op].outputs[j]
        dt = _DTYPES_BY_NAME.get(dtype)
        if dt is None or shape is None:
            return self._resolve(tid)
        t = torch.zeros((), dtype=dt, device=self.device).expand(shape)
        self.st.standins[id(t)] = (weakref.ref(t), tid)
        self.stats["stand_ins"] += 1
        return t

    def _real(self, args, kwargs):
        """args and kwargs with stand-ins replaced by their real tensors."""
        st = self.st

        def real(a):
            if isinstance(a, torch.Tensor):
                e = st.standins.get(id(a))
                if e is not None and e[0]() is a:
                    self.stats["stand_in_reads"] += 1
                    self.internal += 1
                    try:
                        return self._resolve(e[1])
                    finally:
                        self.internal -= 1
            return a

        return tree_map(real, args), tree_map(real, kwargs)

    def _lookahead(self, tid):
        """An autograd node unpacks a tensor the plan recomputes only later
        (it saved a tensor its kernels do not read, e.g. for its shape): run
        the plan's recomputes up to the one that gives tid now, in the plan's
        order, and mark them done; frees stay in place."""
        st = self.st
        p = self.producer.get(tid)
        if p is None:
            return
        target = None
        for i in range(st.pos, len(self.steps)):
            k, v = self.steps[i]
            if k == "compute" and v == p[0] and v in st.done:
                target = i
                break
        if target is None:
            return
        for i in range(st.pos, target + 1):
            k, v = self.steps[i]
            if k == "compute" and v in st.done and v in st.recipes and i not in st.ahead:
                st.ahead.add(i)
                self._run_step(k, v)

    def _advance_before(self, p):
        """Run the plan's steps before the first compute of op p, without
        marking p computed."""
        st = self.st
        end = self.first[p] if 0 <= p < len(self.first) else -1
        while st.pos < end:
            k, v = self.steps[st.pos]
            st.pos += 1
            if st.pos - 1 not in st.ahead:
                self._run_step(k, v)

    # -- backward hooks --

    def _prehook(self, op_id):
        def pre(grad_outputs):
            st = self.st
            if st is None or st.finished:
                return
            if st.phase == "forward":
                st.phase = "backward"
                torch.autograd.Variable._execution_engine.queue_callback(self._finish)
            if op_id is not None:
                ps = self.links.get(op_id)
                if ps:
                    cur = st.bpos if st.bpos is not None else -1
                    nxt = [q for q in ps if q >= cur]
                    if nxt:
                        st.bpos = nxt[0]
            _pd._push_mode(self.mode)

        return pre

    def _finish(self):
        st = self.st
        if st is None:
            return
        st.finished = True
        for h in st.handles:
            h.remove()
        st.nodes.close()
        st.store.clear()
        st.host.clear()
        st.recipes.clear()
        self.st = None

    @staticmethod
    def _device_of(flat):
        for v in flat:
            if isinstance(v, torch.Tensor):
                return v.device
        return torch.device("cpu")

    # -- the step --

    def forward(self, *inputs):
        if self.st is not None:
            self._finish()
        st = self.st = _Step()
        self.device = self._device_of(inputs)
        with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack):
            with self.mode:
                out = self.model(*inputs)
        st.nodes.flush()
        roots = [o.grad_fn for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.grad_fn is not None]
        seen = set()
        for r in roots:
            for n in graph_nodes(r):
                if id(n) in seen:
                    continue
                seen.add(id(n))
                e = st.nodes.nodes.get(id(n))
                op_id = e[1] if e is not None and e[0] is n else None
                st.handles.append(n.register_prehook(self._prehook(op_id)))
        # Step with tensors outside the module: the forward ops after the
        # module's (the loss) are not intercepted.
        return out


def _rewrap(out, args):
    """A detach of a wrapped number (a Python scalar autograd saved) comes
    back to Python as a float; the dispatcher wants a tensor."""
    if isinstance(out, (float, int, bool)) and args and isinstance(args[0], torch.Tensor):
        return torch.tensor(out, dtype=args[0].dtype)
    return out


def _detached(t):
    with torch.no_grad():
        return t.detach()


def _unflatten(flat, spec):
    from torch.utils._pytree import tree_unflatten

    return tree_unflatten(flat, spec)


class Applied(torch.nn.Module):
    """model, its training step following a plan (see apply)."""

    def __init__(self, model, runner):
        super().__init__()
        self.model = model
        self.runner = runner

    def forward(self, *inputs):
        if not (self.training and torch.is_grad_enabled()):
            return self.model(*inputs)
        return self.runner.forward(*inputs)

    @property
    def stats(self):
        return dict(self.runner.stats)


def check(model, plan, example_inputs):
    """Raise PlanMismatch unless the forward ops of model on example_inputs
    are those of the plan's graph. Runs one forward in train mode (with
    autograd, as in training; its graph is dropped) and restores the buffers
    and the RNG state afterwards."""
    runner = Runner(model, plan, check_only=True)
    bufs = [(b, b.detach().clone()) for b in model.buffers()]
    rng = torch.get_rng_state()
    was = model.training
    model.train()
    runner.st = _Step()
    try:
        with torch.autograd.graph.saved_tensors_hooks(runner.pack, runner.unpack), runner.mode:
            model(*example_inputs)
    finally:
        runner.st = None
        torch.set_rng_state(rng)
        with torch.no_grad():
            for b, c in bufs:
                b.copy_(c)
        model.train(was)


def apply(model, plan, example_inputs):
    """Return a module sharing model's parameters and buffers whose training
    step follows plan (the parsed JSON of `sim plan --format json` for a graph
    traced with remat_torch.trace on inputs of the same shapes). A plan made
    for another graph is refused with PlanMismatch naming the first op that
    differs."""
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    check(model, plan, tuple(example_inputs))
    return Applied(model, Runner(model, plan))
