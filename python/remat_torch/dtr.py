"""Runtime DTR (Dynamic Tensor Rematerialization) in unmodified PyTorch.

dtr(model, budget_bytes, heuristic="eq-class") returns a module sharing
model's parameters and buffers whose training step keeps the saved
activations under a byte budget at run time, as the DTR runtime does
(Kirisame et al. 2021; references.md section 5), without a patched PyTorch:

* The forward runs under a TorchDispatchMode (remat_torch.apply's) that
  numbers every aten call returning tensors, times it (time.perf_counter_ns:
  the op's cost c), and records how to run it again (apply's recipe: the
  aten function, its non-tensor arguments, its tensor arguments as tensor
  IDs or, for tensors from outside the step such as parameters and inputs,
  the tensors themselves; the RNG state of ops that draw random numbers;
  which arguments it writes).
* Autograd's saved tensors go through saved_tensors_hooks. A saved tensor
  produced inside the step (not a parameter, buffer or input, nor a view of
  one; at least min_size bytes; not a scalar) is *managed*: autograd keeps a
  handle holding only its ID, the runtime holds the tensor. Managed
  tensors are counted by storage (views of one storage count once).
* Whenever the resident managed bytes pass budget_bytes the runtime evicts
  (drops its reference to) the unlocked resident storage with the lowest
  heuristic score, until they fit. An unpack of an evicted tensor
  rematerializes it: the missing ancestors are recomputed in op order
  (recursively if one is evicted again meanwhile), each op's arguments locked
  while it runs; recomputed tensors are managed like the others.
* Recompute pitfalls are apply's: same RNG state for dropout, batch-norm
  running statistics written to a clone (updated once), an in-place op on a
  recomputed tensor rebuilds the version it wrote, a tensor modified in place
  since it was held is recomputed rather than returned.
* Before a backward node runs, its saved tensors are made resident
  together (the node's saved attributes are read, which calls unpack): the
  resident ones are accessed and locked, then the evicted ones
  rematerialized, as a runtime acquires an op's inputs; autograd then
  unpacks them one at a time and finds them there.
* A forward op that reads a storage a later op writes in place cannot be
  rerun after the write (it would read what was written): its outputs on
  other storages are never evicted from the write on, and one evicted
  before it is rematerialized first (autograd's clone of the input of
  nn.SiLU(inplace=True) or nn.Hardswish(inplace=True) is saved, and can be
  evicted, before the activation runs).
* A tensor read (or saved) after in-place writes to its storage is read at
  that version: rematerialized by rerunning its producer it is at the
  version it was made with, so the writes the forward made before the read
  are replayed (by rematerializing the last writer's output, whose input is
  the storage one write earlier). Swin Transformer's attention mask is
  new_zeros filled through slices, then viewed.
* When every saved use of a managed tensor is done (autograd released all
  its handles) the runtime drops it (a release, not an eviction).

Heuristics (lowest score evicted, ties to the storage made last; staleness
= clock - last access + 1, the clock ticks once per forward op, pack,
unpack and recompute, and an access is an op reading the tensor, a pack,
an unpack or a recompute; c = measured op
time, m = storage bytes): "dtr" h_DTR (c + c(e*)) / (m * staleness) with the
exact evicted neighbourhood e*; "eq-class" the same with e* approximated by
union-find equivalence classes (on eviction a tensor gets a new class merged
with the classes of its evicted neighbours; on recompute the class loses its
cost without splitting); "local" c / (m * staleness); "msps" (c + cost of the
evicted ancestors) / m; "lru" last access; "size" 1 / m. The Go dtr
package's names (dtr-eqclass, dtr-local, ...) are accepted too; the
lookahead heuristics need the future op sequence and do not exist at run
time.

Budget semantics: budget_bytes bounds the managed (saved-activation) bytes
the runtime holds, not the process's memory: parameters, gradients,
optimizer state, the tensors the forward code still references and the
backward's working set come on top. The budget is checked after each new
managed tensor (pack, recompute), so for one op at a time it can be passed by
that op's outputs. When it is passed and nothing is evictable (everything
resident is locked by the op running), the default is to proceed over
budget and count it (stats over_budget, max_over_bytes): the memory is
there on a CPU and a training run should not die mid-backward because of a
budget on one tensor class; strict=True raises BudgetExceeded instead.
"""

import time
import weakref

import torch
from torch.utils._pytree import tree_flatten

from .apply import RANDOM_OPS, Applied, Runner, _detached, _Mode, _Ref, written_arg_names

HEURISTICS = ("dtr", "eq-class", "local", "msps", "lru", "size")
_ALIASES = {
    "dtr": "dtr", "full": "dtr", "h_dtr": "dtr", "dtr-full": "dtr",
    "eq-class": "eq-class", "eqclass": "eq-class", "dtr-eqclass": "eq-class", "dtr-eq-class": "eq-class",
    "local": "local", "dtr-local": "local",
    "msps": "msps", "lru": "lru",
    "size": "size", "largest": "size", "largest-size": "size",
}


class BudgetExceeded(RuntimeError):
    """strict=True: the managed bytes passed the budget with nothing evictable."""


def parse_heuristic(name):
    if not isinstance(name, str) or name.lower() not in _ALIASES:
        extra = ""
        if isinstance(name, str) and name.lower().startswith(("lookahead", "belady")):
            extra = " (the lookahead heuristics need the future op sequence, unknown at run time)"
        raise ValueError("heuristic %r: expected one of %s%s" % (name, ", ".join(HEURISTICS), extra))
    return _ALIASES[name.lower()]


class _OpRec:
    __slots__ = ("outputs",)

    def __init__(self, outputs):
        self.outputs = outputs


class _DHandle:
    """What autograd stores for a managed saved tensor: its ID only."""

    __slots__ = ("tid", "step", "rt", "__weakref__")

    def __init__(self, tid, step, rt):
        self.tid, self.step, self.rt = tid, step, rt

    def __del__(self):
        try:
            if self.step is not None and not self.step.finished:
                self.step.dead.append(self.tid)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class _DStep:
    def __init__(self):
        self.store = {}  # tid -> (tensor, version): resident tensors the runtime holds
        self.ids = {}  # id(python tensor) -> (weakref, tid)
        self.recipes = {}  # op -> apply._Recipe
        self.dead = []  # tids whose handle autograd released
        self.finished = False
        self.phase = "forward"
        self.handles = []


class Runtime(Runner):
    """The DTR runtime of one module (see the module doc). It reuses
    apply.Runner's recipe recording (_record: RNG state, written arguments,
    batch-norm statistics), tensor naming (_tid) and dispatch mode, and
    replaces its plan with eviction by score."""

    def __init__(self, model, budget_bytes, heuristic="eq-class", min_size=0, strict=False):
        # Runner.__init__ parses a plan; the runtime has none, so it sets the
        # attributes Runner's recording and recompute use itself.
        if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, (int, float)) or budget_bytes < 0:
            raise ValueError("budget_bytes %r: expected a number of bytes >= 0" % (budget_bytes,))
        if isinstance(min_size, bool) or not isinstance(min_size, int) or min_size < 0:
            raise ValueError("min_size %r: expected an integer number of bytes >= 0" % (min_size,))
        self.model = model
        self.budget = int(budget_bytes)
        self.heuristic = parse_heuristic(heuristic)
        self.min_size = min_size
        self.strict = bool(strict)
        self.mode = _Mode(self)
        self.saved_names = {}  # autograd node type -> its saved tensor attributes (_saved_names)
        self.internal = 0
        self.st = None
        self.device = torch.device("cpu")
        self.strategy = "dtr"
        self.stats = {}
        self._reset_stats()

    def _reset_stats(self):
        self.stats.clear()
        self.stats.update({"evictions": 0, "evicted_bytes": 0, "recomputes": 0, "recompute_ns": 0,
                           "releases": 0, "peak_bytes": 0, "over_budget": 0, "max_over_bytes": 0,
                           "managed": 0, "forward_ops": 0, "forward_ns": 0})

    # -- per-step state --

    def _new_step(self, inputs):
        self.st = _DStep()
        self.ops = []  # op -> _OpRec (outputs as (tid, None, None, None))
        self.producer = {}  # tid -> (op, output index)
        self.cost = {}  # tid -> ns of its op
        self.parents = {}  # tid -> input tids of its op
        self.children = {}  # tid -> output tids of the ops reading it
        self.last = {}  # tid -> clock of last access
        self.nhandles = {}  # tid -> live handles autograd holds
        self.skey = {}  # tid -> storage key while held and counted
        self.sbytes = {}  # storage key -> bytes
        self.stids = {}  # storage key -> set of held counted tids
        self.resident = 0
        self.locks = {}  # tid -> lock count
        self.frames = []  # lock sets of the recomputes running
        self.node_locked = []  # tids unpacked for the autograd node running
        self.peek = None  # (node frame, evicted tids) while _acquire_node reads a node's saved tensors
        self.clock = 0
        self.zero = set()  # tids with no live handle left, to drop
        self.obytes = {}  # op -> bytes of its outputs in the forward
        # storage key -> the forward ops that read it since it was last
        # written in place; okeys: op -> its outputs' storage keys; fixed:
        # tids never evicted (_before_write)
        self.readers = {}
        self.okeys = {}
        self.fixed = set()
        # storage key -> the output of the last forward op that wrote it in
        # place; needs: op -> (argument tid, version it read, that writer's
        # output) for arguments read after a write; pack_req: tid -> the same
        # for a saved tensor (_at_version)
        self.last_write = {}
        self.needs = {}
        self.pack_req = {}
        self.overlay = None
        # union-find for eq-class: tid -> node; node parent and value.
        self.ufnode, self.ufparent, self.ufvalue = {}, [], []
        ext = set()
        for t in list(self.model.parameters()) + list(self.model.buffers()) + [i for i in inputs if isinstance(i, torch.Tensor)]:
            ext.add(_skey(t)[0])
        self.external = ext
        self._reset_stats()

    # -- resident accounting --

    def _hold(self, tid, t):
        self._drop(tid)
        st = self.st
        st.store[tid] = (t, t._version)
        key, nb = _skey(t)
        self.last[tid] = self.clock
        if key in self.external or nb < self.min_size or t.dim() == 0:
            return  # held, not counted nor evictable (a view of a parameter, a tiny tensor)
        self.skey[tid] = key
        s = self.stids.get(key)
        if not s:
            s = self.stids[key] = set()
            self.sbytes[key] = nb
            self.resident += nb
            self.stats["peak_bytes"] = max(self.stats["peak_bytes"], self.resident)
        s.add(tid)
        if self.frames:
            self._lock(tid, self.frames[-1])
        self._uf_resident(tid)

    def _drop(self, tid):
        """Forget the runtime's reference to tid (no stats)."""
        if self.st.store.pop(tid, None) is None:
            return
        key = self.skey.pop(tid, None)
        if key is None:
            return
        s = self.stids[key]
        s.discard(tid)
        if not s:
            del self.stids[key]
            self.resident -= self.sbytes.pop(key)

    def _get(self, tid):
        e = self.st.store.get(tid)
        if e is None:
            # the arguments of the forward op being dispatched are there
            # even when the runtime does not hold them (_before_write)
            return self.overlay.get(tid) if self.overlay else None
        t, v = e
        if t._version != v:
            self._drop(tid)  # modified in place since: stale
            return None
        return t

    def _lock(self, tid, frame):
        if tid not in frame:
            frame.add(tid)
            self.locks[tid] = self.locks.get(tid, 0) + 1

    def _unlock_all(self, tids):
        for tid in tids:
            n = self.locks.get(tid, 0) - 1
            if n <= 0:
                self.locks.pop(tid, None)
            else:
                self.locks[tid] = n

    # -- eviction --

    def _evict_to(self, limit):
        while self.resident > limit:
            key = self._choose()
            if key is None:
                over = self.resident - limit
                if self.strict:
                    raise BudgetExceeded(
                        "remat_torch.dtr: %d bytes of managed tensors are resident and %d more are about to be "
                        "produced, budget_bytes is %d, and nothing resident is evictable (all locked by the op "
                        "running): raise budget_bytes by at least %d or pass strict=False to proceed over budget" % (
                            self.resident, self.budget - limit, self.budget, over))
                self.stats["over_budget"] += 1
                self.stats["max_over_bytes"] = max(self.stats["max_over_bytes"], self.resident - self.budget)
                return
            nb = self.sbytes[key]
            for tid in sorted(self.stids[key]):
                self._drop(tid)
                self._uf_evicted(tid)
            self.stats["evictions"] += 1
            self.stats["evicted_bytes"] += nb

    def _choose(self):
        best, best_score = None, None
        # deterministic order, oldest tensor first; ties go to the later
        # storage, as in sim's DTR (and the reference simulator), so that
        # sim --dtr-budget-scope saved predicts this runtime's choices
        for key in sorted(self.stids, key=lambda k: min(self.stids[k])):
            tids = self.stids[key]
            if any(t in self.locks or t in self.fixed for t in tids) or any(
                    self.producer.get(t, (None,))[0] not in self.st.recipes for t in tids):
                continue
            sc = self._score(key, tids)
            if best_score is None or sc <= best_score:
                best, best_score = key, sc
        return best

    def _score(self, key, tids):
        h = self.heuristic
        m = float(self.sbytes[key]) or 1.0
        last = max(self.last.get(t, 0) for t in tids)
        if h == "lru":
            return float(last)
        if h == "size":
            return 1.0 / m
        c = float(sum(self.cost.get(t, 0) for t in tids))
        stale = float(self.clock - last + 1)
        if h == "local":
            return c / (m * stale)
        if h == "msps":
            return (c + self._region(tids, up=True, down=False)) / m
        if h == "dtr":
            return (c + self._region(tids, up=True, down=True)) / (m * stale)
        # eq-class
        roots = set()
        for t in tids:
            for n in self._neighbours(t):
                if n not in tids and not self._resident(n) and n in self.producer:
                    roots.add(self._uf_find(self._uf_node(n)))
        return (c + sum(self.ufvalue[r] for r in roots)) / (m * stale)

    def _neighbours(self, t):
        return list(self.parents.get(t, ())) + list(self.children.get(t, ()))

    def _resident(self, t):
        e = self.st.store.get(t)
        return e is not None and e[0]._version == e[1]

    def _region(self, tids, up, down):
        """Cost of the evicted tensors reachable from tids through evicted
        tensors (parents when up, children when down)."""
        seen, stack, total = set(tids), [], 0
        for t in tids:
            if up:
                stack.extend(self.parents.get(t, ()))
            if down:
                stack.extend(self.children.get(t, ()))
        while stack:
            n = stack.pop()
            if n in seen or n not in self.producer or self._resident(n):
                continue
            seen.add(n)
            total += self.cost.get(n, 0)
            if up:
                stack.extend(self.parents.get(n, ()))
            if down:
                stack.extend(self.children.get(n, ()))
        return total

    # union-find (eq-class)
    def _uf_new(self, value):
        self.ufparent.append(len(self.ufparent))
        self.ufvalue.append(value)
        return len(self.ufparent) - 1

    def _uf_find(self, x):
        p = self.ufparent
        while p[x] != x:
            p[x] = p[p[x]]
            x = p[x]
        return x

    def _uf_union(self, a, b):
        a, b = self._uf_find(a), self._uf_find(b)
        if a == b:
            return a
        if a > b:
            a, b = b, a
        self.ufparent[b] = a
        self.ufvalue[a] += self.ufvalue[b]
        return a

    def _uf_node(self, t):
        """t's class node; an evicted tensor without one (never held, or
        released) gets a new class merged with its classed evicted neighbours."""
        x = self.ufnode.get(t)
        if x is None:
            x = self.ufnode[t] = self._uf_new(self.cost.get(t, 0))
            for n in self._neighbours(t):
                y = self.ufnode.get(n)
                if y is not None and not self._resident(n):
                    self._uf_union(x, y)
        return x

    def _uf_evicted(self, t):
        if self.heuristic != "eq-class":
            return
        self.ufnode.pop(t, None)
        x = self._uf_node(t)
        for n in self._neighbours(t):
            if n in self.producer and not self._resident(n):
                self._uf_union(x, self._uf_node(n))

    def _uf_resident(self, t):
        x = self.ufnode.pop(t, None)
        if x is not None and self.heuristic == "eq-class":
            self.ufvalue[self._uf_find(x)] -= self.cost.get(t, 0)

    # -- recompute (_rerun runs the op as apply.Runner._recompute does) --

    def _recompute(self, op, depth=0):
        top = not self.frames
        frame = set()
        self.frames.append(frame)
        t0 = time.perf_counter_ns()
        try:
            # The arguments first (resident and locked in this frame), then
            # room for the outputs, then the op (apply's recompute finds the
            # arguments resident).
            for tid in self._arg_tids(self.st.recipes[op]):
                self._resolve(tid, depth)
            for tid, ver, w in self.needs.get(op, ()):
                self._at_version(tid, ver, w, depth)
            self._evict_to(self.budget - self.obytes.get(op, 0))
            self._rerun(op, depth)
            self.clock += 1
            self._evict_to(self.budget)
        finally:
            self.frames.pop()
            self._unlock_all(frame)
            if top:
                self.stats["recompute_ns"] += time.perf_counter_ns() - t0

    def _saved_version(self, tid):
        """Bring resident saved tensor tid to the version autograd saved
        (_at_version) and return it."""
        req = self.pack_req.get(tid)
        if req is not None:
            self._at_version(tid, req[0], req[1], 0)
        return self._get(tid)

    def _at_version(self, tid, ver, w, depth):
        """Bring resident tensor tid to version ver, the one a forward op
        read (or autograd saved): a storage rebuilt by rerunning its
        producer is at the version it was made with, and the in-place
        writes the forward made to it before that read are replayed by
        rematerializing w, the output of the last of them (its input is the
        storage at the version before, recursively). Swin Transformer's
        attention mask is new_zeros filled through slices, then viewed:
        rebuilt without the fills it was zeros."""
        t = self._get(tid)
        if t is None or t._version >= ver or w not in self.producer:
            return
        self._resolve(w, depth)
        self.clock += 1

    def _rerun(self, op, depth):
        """Run op's recipe again and hold its outputs (apply.Runner's
        _rerun_recipe, with this runtime's _resolve for the arguments)."""
        self._rerun_recipe(op, depth)
        self.stats["recomputes"] += 1

    def _resolve(self, tid, depth=0):
        t = self._get(tid)
        if t is None:
            p = self.producer.get(tid)
            if p is None or p[0] not in self.st.recipes:
                raise RuntimeError("remat_torch.dtr: tensor %d is needed but neither resident nor recomputable" % tid)
            if depth > 150:  # before Python's own recursion limit
                raise RuntimeError("remat_torch.dtr: rematerializing tensor %d needs a chain of more than 150 "
                                   "evicted tensors (budget_bytes %d too small?)" % (tid, self.budget))
            if depth == 0:
                self._prefetch(tid)
            if self._get(tid) is None:
                self._recompute(p[0], depth + 1)
            t = self._get(tid)
            if t is None:
                raise RuntimeError("remat_torch.dtr: recomputing op %d did not give tensor %d" % (p[0], tid))
        self.last[tid] = self.clock
        if self.frames:
            self._lock(tid, self.frames[-1])
        return t

    def _prefetch(self, tid):
        """Recompute the evicted ancestors of tid in op order (ancestors
        first), so that the recursion of _resolve stays shallow."""
        need, stack, seen = set(), [tid], set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if self._get(n) is not None:
                continue
            p = self.producer.get(n)
            if p is None or p[0] not in self.st.recipes:
                continue
            need.add(p[0])
            r = self.st.recipes[p[0]]
            stack.extend(self._arg_tids(r))
        for op in sorted(need)[:-1]:  # the last is tid's own op: _resolve runs it
            outs = [t for t, _, _, _ in self.ops[op].outputs]
            if any(self._get(t) is None for t in outs):
                self._recompute(op, 1)

    @staticmethod
    def _arg_tids(r):
        flat, _ = tree_flatten((r.args, r.kwargs))
        return [a.tid for a in flat if isinstance(a, _Ref)]

    # -- forward --

    def dispatch(self, func, args, kwargs):
        st = self.st
        if self.internal or st is None or st.finished or st.phase != "forward":
            return func(*args, **kwargs)
        flat_in, spec = tree_flatten((args, kwargs))
        in_tids = [self._tid(v) if isinstance(v, torch.Tensor) else None for v in flat_in]
        name = func.overloadpacket.__name__
        rng = None
        if name in RANDOM_OPS:
            dev = self._device_of(flat_in)
            rng = (torch.get_rng_state(), torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None)
        wkeys = self._write_keys(func, args, kwargs)
        if wkeys:
            self.overlay = {t: v for v, t in zip(flat_in, in_tids) if t is not None}
            try:
                self._before_write(wkeys)
            finally:
                self.overlay = None
        # the version of each argument this op reads (a storage written in
        # place since its tensor was made is read at a later version)
        pre = [(t, v._version, _skey(v)[0]) for v, t in zip(flat_in, in_tids) if t is not None]
        t0 = time.perf_counter_ns()
        out = func(*args, **kwargs)
        dt = time.perf_counter_ns() - t0
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        if not outs:
            return out
        k = len(self.ops)
        for t in in_tids:
            if t is not None and t in self.last:
                self.last[t] = self.clock  # an access (staleness counts from it)
        tids = []
        for j, o in enumerate(outs):
            tid = len(self.producer)
            tids.append(tid)
            self.producer[tid] = (k, j)
            self.cost[tid] = dt
            self.last[tid] = self.clock
            st.ids[id(o)] = (weakref.ref(o), tid)
        self.ops.append(_OpRec([(t, None, None, None) for t in tids]))
        oskeys = [_skey(o) for o in outs]
        self.obytes[k] = sum(dict((key, nb) for key, nb in oskeys if key not in self.external).values())
        ins = sorted({t for t in in_tids if t is not None})
        for t in tids:
            self.parents[t] = ins
        for p in ins:
            self.children.setdefault(p, []).extend(tids)
        self._record(k, func, args, kwargs, flat_in, in_tids, spec, outs, rng)
        self.okeys[k] = [key for key, _ in oskeys]
        in_keys = {key for _, _, key in pre} | {_skey(v)[0] for v, t in zip(flat_in, in_tids)
                                               if t is None and isinstance(v, torch.Tensor)}
        for key in self.okeys[k]:
            if key not in in_keys:
                # a new storage, maybe at the address of a freed one: no
                # readers or writes yet
                self.readers.pop(key, None)
                self.last_write.pop(key, None)
        for t, ver, key in pre:
            w = self.last_write.get(key)
            if w is not None and w != t:
                self.needs.setdefault(k, []).append((t, ver, w))
        if wkeys:
            for t, key in zip(tids, self.okeys[k]):
                if key in wkeys:
                    self.last_write[key] = t
        for key in in_keys:
            self.readers.setdefault(key, []).append(k)
        self.clock += 1
        self.stats["forward_ops"] += 1
        self.stats["forward_ns"] += dt
        return out

    @staticmethod
    def _write_keys(func, args, kwargs):
        """The storages func writes in place (its schema's written
        arguments)."""
        schema = func._schema
        names = written_arg_names(schema)
        if not names:
            return ()
        keys = []
        for i, a in enumerate(args):
            if i < len(schema.arguments) and schema.arguments[i].name in names:
                keys.extend(_skey(v)[0] for v in tree_flatten(a)[0] if isinstance(v, torch.Tensor))
        for n, a in kwargs.items():
            if n in names:
                keys.extend(_skey(v)[0] for v in tree_flatten(a)[0] if isinstance(v, torch.Tensor))
        return keys

    def _before_write(self, wkeys):
        """An op about to write a storage in place: the ops that read it
        before cannot be rerun after the write (they would read what it
        wrote). Their outputs on other storages are never evicted from now
        on, and those already evicted are rematerialized first, while the
        storage still holds what they read. autograd's clone of the input of
        an in-place activation (nn.SiLU(inplace=True),
        nn.Hardswish(inplace=True)) is such an output: autograd saves it,
        and may see it evicted, before the activation runs. sim's DTR keeps
        such outputs too (dtr's overwrites: ForbidRemat)."""
        for key in wkeys:
            for j in self.readers.pop(key, ()):
                for (t, _, _, _), okey in zip(self.ops[j].outputs, self.okeys.get(j, ())):
                    if okey == key or t in self.fixed:
                        continue  # a view of the written storage: rebuilt with its writes
                    self.fixed.add(t)
                    if self.nhandles.get(t, 0) > 0 and self._get(t) is None:
                        self.internal += 1
                        try:
                            self._resolve(t)
                        finally:
                            self.internal -= 1

    # -- saved tensors --

    def pack(self, t):
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            return t
        self.internal += 1
        try:
            st = self.st
            tid = self._tid(t) if st is not None and not st.finished else None
            if tid is None or tid not in self.producer:
                return _detached(t)
            key, nb = _skey(t)
            if key in self.external or nb < self.min_size:
                return _detached(t)
            if self._get(tid) is None:
                self._hold(tid, _detached(t))
                self.stats["managed"] += 1
            w = self.last_write.get(key)
            if w is not None and w != tid:
                self.pack_req[tid] = (t._version, w)
            self.last[tid] = self.clock
            self.clock += 1
            self.nhandles[tid] = self.nhandles.get(tid, 0) + 1
            self._evict_to(self.budget)
            return _DHandle(tid, st, self)
        finally:
            self.internal -= 1

    def unpack(self, h):
        if not isinstance(h, _DHandle):
            return h
        st = h.step
        if st is not self.st or st.finished:
            raise RuntimeError("remat_torch.dtr: a saved tensor of an earlier step was unpacked (backward called "
                               "twice on one step? retain_graph is not supported by the DTR runtime)")
        if self.peek is not None:
            t = self._get(h.tid)
            req = self.pack_req.get(h.tid)
            if t is None or (req is not None and t._version < req[0]):
                self.peek[1].append(h.tid)
                return torch.empty(0)
            self.last[h.tid] = self.clock
            self._lock(h.tid, self.peek[0])
            return t
        self.internal += 1
        try:
            self._reap()
            self._resolve(h.tid)
            t = self._saved_version(h.tid)
            self.clock += 1
            frame = set()
            self._lock(h.tid, frame)  # until the autograd node has run
            self.node_locked.append(frame)
            return t
        finally:
            self.internal -= 1

    def _reap(self):
        """Drop the tensors whose every handle autograd has released (once
        no running op or node has them locked)."""
        st = self.st
        while st.dead:
            tid = st.dead.pop()
            n = self.nhandles.get(tid, 0) - 1
            self.nhandles[tid] = n
            if n <= 0:
                self.zero.add(tid)
        for tid in sorted(self.zero):
            if tid in self.locks:
                continue
            self.zero.discard(tid)
            if tid in st.store:
                self._drop(tid)
                self.stats["releases"] += 1

    # -- backward --

    def _prehook(self, grad_outputs, node=None, saved=()):
        st = self.st
        if st is None or st.finished:
            return
        if st.phase == "forward":
            st.phase = "backward"
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)
        for f in self.node_locked:
            self._unlock_all(f)
        self.node_locked = []
        self._reap()
        if saved:
            self._acquire_node(node, saved)

    def _acquire_node(self, node, saved):
        """Before a backward node runs, make its saved tensors resident as
        a runtime does with an op's inputs: the resident ones are accessed
        and locked first, then the evicted ones rematerialized (autograd
        unpacks them one at a time, and rematerializing the first must not
        evict the others). Reading a node's saved attributes calls unpack,
        which in this pass only notes the evicted ones."""
        frame = set()  # locked until the node has run
        self.node_locked.append(frame)
        self.peek = (frame, [])
        try:
            for name in saved:
                try:
                    getattr(node, name)
                except RuntimeError:
                    # a saved value autograd cannot hand out here: the
                    # node's own unpack will resolve it as before
                    continue
        finally:
            frame, missing = self.peek
            self.peek = None
        for tid in missing:
            if self._get(tid) is None:
                self._resolve(tid)
                self.clock += 1
            self._saved_version(tid)
            self._lock(tid, frame)

    def _node_hook(self, node):
        saved = _saved_names(node, self.saved_names)

        def hook(grad_outputs):
            self._prehook(grad_outputs, node, saved)

        return hook

    def _finish(self):
        st = self.st
        if st is None:
            return
        st.finished = True
        for h in st.handles:
            h.remove()
        st.store.clear()
        st.recipes.clear()
        self.stids, self.sbytes, self.skey, self.resident = {}, {}, {}, 0
        self.st = None

    def forward(self, *inputs):
        if self.st is not None:
            self._finish()
        self._new_step(inputs)
        st = self.st
        self.device = self._device_of(inputs)
        with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack):
            with self.mode:
                out = self.model(*inputs)
        from .trace import graph_nodes

        seen = set()
        for o in tree_flatten(out)[0]:
            if isinstance(o, torch.Tensor) and o.grad_fn is not None:
                for n in graph_nodes(o.grad_fn):
                    if id(n) not in seen:
                        seen.add(id(n))
                        st.handles.append(n.register_prehook(self._node_hook(n)))
        return out


def _saved_names(node, cache):
    """node's saved tensor attributes (cache: node type -> names)."""
    names = cache.get(type(node))
    if names is None:
        names = cache[type(node)] = tuple(
            "_saved_" + a[len("_raw_saved_"):] for a in dir(node) if a.startswith("_raw_saved_"))
    return names


def _skey(t):
    s = t.storage()
    return s.data_ptr(), s.nbytes()


class DTR(Applied):
    """model with its saved activations managed by a DTR runtime (see dtr):
    apply's module with the runtime in place of a plan's runner."""

    @property
    def runtime(self):
        return self.runner

    @property
    def stats(self):
        """The last step's counts: evictions, evicted_bytes, recomputes,
        recompute_ns (wall time of the rematerializations), releases,
        peak_bytes (largest resident managed bytes, including an op's new
        outputs before the eviction they cause), over_budget and
        max_over_bytes (budget passed with nothing evictable), managed
        (saved tensors taken over), forward_ops, forward_ns (measured op
        time of the forward)."""
        return dict(self.runtime.stats)


def dtr(model, budget_bytes, heuristic="eq-class", min_size=0, strict=False):
    """Return a module sharing model's parameters and buffers whose training
    step keeps the saved activations it manages under budget_bytes by
    evicting and rematerializing them at run time (see the module doc).
    heuristic: one of dtr, eq-class, local, msps, lru, size; min_size: saved
    tensors smaller than this (bytes) are left to autograd; strict: raise
    BudgetExceeded instead of proceeding over budget when nothing is
    evictable."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError("model: got %s, expected a torch.nn.Module" % type(model).__name__)
    return DTR(model, Runtime(model, budget_bytes, heuristic, min_size, strict))




# -- python3 -m remat_torch dtr: runtime DTR against sim's DTR prediction --

def add_parser(sub):
    """Register the dtr subcommand on an argparse subparsers object."""
    d = sub.add_parser("dtr", help="run runtime DTR and compare with sim's DTR prediction at the same budget")
    d.add_argument("--model", required=True, help="torchvision name, 'transformer', 'gpt', 'llama' (tools/export_onnx.py's) or module:callable")
    d.add_argument("--batch", type=int, default=4)
    d.add_argument("--image", type=int, default=64, help="image size of vision models (default 64)")
    d.add_argument("--budget", default="0.5", help="the step's budget: a ratio of sim's baseline peak such as 0.5, or a size; "
                   "the runtime gets what is left of it for saved activations, and sim predicts that runtime "
                   "(--dtr-budget-scope saved)")
    d.add_argument("--heuristic", default="eq-class", help="runtime heuristic: " + ", ".join(HEURISTICS))
    d.add_argument("--min-size", type=int, default=0, help="saved tensors below this many bytes stay with autograd")
    d.add_argument("--runs", type=int, default=3, help="timed steps (fastest taken)")
    d.add_argument("--threads", type=int, default=2)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--sim", help="the sim binary (default $REMAT_SIM, sim on PATH, or go build)")
    d.set_defaults(func=cmd_dtr)
    return d


def compare(model, inputs, labels, sim, budget="0.5", heuristic="eq-class", min_size=0, runs=3, name="model",
            loss_fn=None, workdir=None):
    """Trace one step of model, ask sim for the no-recompute prediction
    and budget's bytes (sim report --graph --device cpu --allocator ideal
    --strategies none --budget), run the plain step and the runtime-DTR step
    and measure them as remat_torch.measure does. The runtime's budget_bytes
    is sim's budget in bytes minus the bytes resident before the step
    (parameters, buffers, inputs, labels, optimizer state) and minus the
    parameters' gradients (they accumulate during backward); 0 when those
    alone pass the budget. sim's DTR prediction is for that runtime: the
    same budget_bytes as --budget with --dtr-budget-scope saved (the budget
    bounds the saved activations alone), the runtime's heuristic as
    --dtr-heuristic and min_size as --dtr-evictee-min-size.
    Returns a dict of the numbers."""
    import copy
    import json
    import os
    import shutil
    import tempfile

    import torch.nn.functional as F

    from . import measure
    from .trace import trace, write_graph

    loss_fn = loss_fn or F.cross_entropy
    inputs = tuple(inputs)
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="remat-dtr-")
    gpath = os.path.join(workdir, "step.json")
    out = {"model": name, "heuristic": parse_heuristic(heuristic), "budget_arg": budget}
    try:
        base = copy.deepcopy(model.state_dict())
        measure.log("%s: tracing one step (op times measured)" % name)
        tm = copy.deepcopy(model)
        write_graph(trace(tm, inputs, labels, loss_fn=loss_fn, measure=True, name=name), gpath)
        del tm
        doc = json.loads(sim._run(["report", "--graph", gpath, "--device", "cpu", "--allocator", "ideal",
                                   "--strategies", "none", "--budget", str(budget), "--format", "json"]))
        out["budget_bytes_sim"] = doc.get("budget")
        out["sim_none"] = {r["strategy"]: r for r in doc["rows"]}.get("none")

        def fresh():
            m = copy.deepcopy(model)
            m.load_state_dict(base)
            return m

        # plain step
        m = fresh()
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        step = measure.make_step(m, m, inputs, labels, loss_fn, opt)
        step()  # warm-up
        m.load_state_dict(base)
        opt.zero_grad(set_to_none=True)
        resident = measure.resident_bytes(m, inputs + (labels,), opt)
        out["meas_none_peak"] = resident + measure.profiled_peak(step)
        plain = step
        # runtime DTR
        b = out["budget_bytes_sim"]
        grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
        managed = max(0, int(b) - resident - grads) if b else None
        if managed is None:
            raise RuntimeError("sim report gave no budget in bytes for --budget %r" % (budget,))
        out["resident"] = resident
        out["grad_bytes"] = grads
        out["managed_budget"] = managed
        if managed > 0:
            doc = json.loads(sim._run(["report", "--graph", gpath, "--device", "cpu", "--allocator", "ideal",
                                       "--strategies", "dtr", "--budget", "%dB" % managed, "--dtr-budget-scope", "saved",
                                       "--dtr-evictee-min-size", str(min_size), "--dtr-heuristic", out["heuristic"],
                                       "--format", "json"]))
            out["sim_dtr"] = {r["strategy"]: r for r in doc["rows"]}.get("dtr")
        if managed <= 0:
            # Nothing left for activations: every saved tensor would be
            # evicted at once and each unpack recompute its whole prefix.
            out["not_run"] = ("parameters, buffers, inputs, optimizer state and gradients (%s MiB) already reach "
                              "the budget (%s MiB)" % (_mib(resident + grads), _mib(b)))
            return out
        m = fresh()
        ref = fresh()
        d = dtr(m, managed, heuristic=heuristic, min_size=min_size)
        gok, bok, worst = measure.grads_match(ref, m, inputs, labels, loss_fn, d)  # also the warm-up
        del ref
        m.load_state_dict(base)
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        step = measure.make_step(d, m, inputs, labels, loss_fn, opt)
        opt.zero_grad(set_to_none=True)
        out["meas_dtr_peak"] = measure.resident_bytes(m, inputs + (labels,), opt) + measure.profiled_peak(step)
        out["stats"] = d.stats  # of the profiled step
        # Step times: the fastest of runs steps each, plain and DTR steps
        # alternating (the machine is shared: both see the same load).
        tp, td = [], []
        for _ in range(runs):
            tp.append(measure.min_time(plain, 1))
            td.append(measure.min_time(step, 1))
        out["meas_none_ns"], out["meas_dtr_ns"] = min(tp), min(td)
        out["grads"], out["buffers"], out["grad_rel_diff"] = gok, bok, worst
        return out
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)


def _mib(b):
    return "%.1f" % (b / 2**20)


def format_compare(r):
    """The comparison as the dtr subcommand prints it."""
    lines = []
    sd, sn = r.get("sim_dtr") or {}, r.get("sim_none") or {}
    lines.append("%s: budget %s = %s MiB (sim's bytes); runtime budget_bytes = that - %s MiB resident before the "
                 "step - %s MiB of parameter gradients = %s MiB of saved activations, sim's dtr the same with "
                 "--dtr-budget-scope saved; heuristic %s" % (
                     r["model"], r["budget_arg"], _mib(r["budget_bytes_sim"]), _mib(r["resident"]),
                     _mib(r["grad_bytes"]), _mib(r["managed_budget"]), r["heuristic"]))
    lines.append("%-24s %10s %10s %10s" % ("", "peak MiB", "step ms", "overhead"))
    if sn:
        lines.append("%-24s %10s %10.1f %10s" % ("sim none (predicted)", _mib(sn["peak_allocated"]), sn["time_ns"] / 1e6, "1.00"))
    if sd:
        if sd.get("status") in ("ok", "infeasible", "thrash") and sd.get("time_ns"):
            ov = "%.2f" % (sd["time_ns"] / sn["time_ns"]) if sn.get("time_ns") else "-"
            note = "" if sd["status"] == "ok" else "  " + sd["status"] + ": " + (sd.get("reason") or "")[:100]
            saved = ", saved peak %s MiB" % _mib(sd["saved_peak"]) if sd.get("saved_peak") else ""
            lines.append("%-24s %10s %10.1f %10s  %d recomputes, %d evictions%s%s" % (
                "sim dtr (predicted)", _mib(sd["peak_allocated"]), sd["time_ns"] / 1e6, ov, sd.get("recomputes", 0),
                sd.get("evictions", 0), saved, note))
        else:
            lines.append("%-24s %10s %10s %10s  %s: %s" % ("sim dtr (predicted)", "-", "-", "-", sd.get("status"),
                                                        (sd.get("reason") or "")[:160]))
    if r.get("not_run"):
        lines.append("%-24s %10s %10s %10s" % ("plain step (measured)", _mib(r["meas_none_peak"]), "-", "-"))
        lines.append("%-24s %10s %10s %10s  not run: %s" % ("runtime dtr (measured)", "-", "-", "-", r["not_run"]))
        return "\n".join(lines)
    lines.append("%-24s %10s %10.1f %10s" % ("plain step (measured)", _mib(r["meas_none_peak"]), r["meas_none_ns"] / 1e6, "1.00"))
    st = r["stats"]
    lines.append("%-24s %10s %10.1f %10.2f  %d recomputes (%.1f ms), %d evictions, managed peak %s MiB, %d over budget; "
                 "grads %s" % (
                     "runtime dtr (measured)", _mib(r["meas_dtr_peak"]), r["meas_dtr_ns"] / 1e6,
                     r["meas_dtr_ns"] / r["meas_none_ns"], st["recomputes"], st["recompute_ns"] / 1e6, st["evictions"],
                     _mib(st["peak_bytes"]), st["over_budget"],
                     "ok" if r["grads"] and r["buffers"] else ("MISMATCH" if not r["grads"] else "bn MISMATCH")))
    if sd.get("peak_allocated") and (sd.get("status") == "ok" or sd.get("saved_peak")):
        # a run over its budget of saved activations still ran the whole step
        lines.append("measured dtr peak vs sim dtr prediction: %+.1f%%" % (
            100.0 * (r["meas_dtr_peak"] - sd["peak_allocated"]) / sd["peak_allocated"]))
    return "\n".join(lines)


def cmd_dtr(args):
    from . import measure
    from .__main__ import build_model, example

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    model = build_model(args.model)
    x, y = example(model, args.model, args.batch, args.image)
    sim = measure.Sim(args.sim)
    try:
        r = compare(model, (x,), y, sim, budget=args.budget, heuristic=args.heuristic, min_size=args.min_size,
                    runs=args.runs, name="%s batch %d" % (args.model, args.batch))
    finally:
        sim.close()
    print(format_compare(r))
    return 0
