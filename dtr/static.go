package dtr

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// graphDriver runs a graph's default schedule on a runtime.
type graphDriver struct {
	g    *graph.Graph
	rt   *Runtime
	rec  *recorder
	toRT []TensorID // graph tensor -> runtime tensor (-1 before creation)
}

// newDriver prepares to run g's default schedule on rt. The tensors without
// a producer (inputs, parameters, optimizer state: resident from the start
// on a sim.Machine) become pinned constants first, in tensor ID order, one
// runtime step each; then op i is step (number of those tensors) + i. With
// the Lookahead heuristic the runtime gets an Oracle of that schedule.
func newDriver(g *graph.Graph, rt *Runtime) *graphDriver {
	d := &graphDriver{g: g, rt: rt, rec: &recorder{}, toRT: make([]TensorID, len(g.Tensors))}
	rt.rec = d.rec
	if len(rt.ops) == 0 {
		// one runtime op per graph op and per tensor without a producer
		rt.ops = make([]op, 0, len(g.Ops)+len(g.Tensors)/4)
		rt.tensors = make([]tensor, 0, len(g.Tensors))
		rt.storages = make([]storage, 0, len(g.Tensors))
		rt.walk = make([]walkNode, 0, len(g.Tensors))
		rt.edges = make([]int32, 0, edgesPerStorage*len(g.Tensors))
		d.rec.opMap = make([]graph.OpID, 0, cap(rt.ops))
		d.rec.tenMap = make([]graph.TensorID, 0, len(g.Tensors))
	}
	for i := range d.toRT {
		d.toRT[i] = -1
	}
	if rt.cfg.Heuristic.NeedsOracle() {
		rt.SetOracle(newGraphOracle(g, d.rec))
	}
	return d
}

// graphOracle answers next-use queries from a graph's default schedule as
// the driver runs it. The steps of the ops reading each graph tensor are
// one flat array (CSR: start per tensor), and pos[t] is the index in it
// of t's next use not yet passed.
//
// The same for storages: rsteps[rstart[r]:rstart[r+1]] are the steps of
// the ops that read a tensor whose root is r (once per op, see
// newGraphOracle), and rpos[r] the next one not yet passed.
type graphOracle struct {
	rec   *recorder
	root  []graph.TensorID // the graph's storage roots (Dense.Root)
	start []int32
	steps []int64
	pos   []int32

	rstart []int32
	rsteps []int64
	rpos   []int32
}

func newGraphOracle(g *graph.Graph, rec *recorder) *graphOracle {
	d := g.Dense()
	nt := d.NumTensors()
	var nc int64
	for _, p := range d.Producer {
		if p == graph.NoOp {
			nc++
		}
	}
	// seen[t]: the mark of the last op that listed t (a key an op uses
	// twice counts once)
	seen := make([]int32, nt)
	inputs := func(i int, mark int32, f func(k graph.TensorID)) {
		for _, in := range d.Inputs(graph.OpID(i)) {
			if seen[in] != mark {
				seen[in] = mark
				f(in)
			}
		}
	}
	// an op whose output views a storage none of its inputs is on reads
	// that storage too (the driver passes the root as an extra input to
	// create the view)
	roots := func(i int, mark int32, f func(k graph.TensorID)) {
		for _, in := range d.Inputs(graph.OpID(i)) {
			if r := d.Root[in]; seen[r] != mark {
				seen[r] = mark
				f(r)
			}
		}
		for _, out := range d.Outputs(graph.OpID(i)) {
			if r := d.Root[out]; r != out && d.Producer[r] != graph.OpID(i) && seen[r] != mark {
				seen[r] = mark
				f(r)
			}
		}
	}
	o := &graphOracle{rec: rec, root: d.Root}
	o.start, o.steps = opSteps(nt, d.NumOps(), nc, 0, inputs)
	o.rstart, o.rsteps = opSteps(nt, d.NumOps(), nc, 2*int32(d.NumOps()), roots)
	o.pos, o.rpos = slices.Clone(o.start[:nt]), slices.Clone(o.rstart[:nt])
	return o
}

// opSteps lists, for each of n keys, the steps (nc + the op's index) of the
// ops that use it, in op order, as a CSR (start per key, n+1 long). each(i,
// mark, f) calls f once for each key op i uses, telling repeats apart by
// mark, which is distinct for every call: base + 1.. for the first pass
// over the ops, base + ops + 1.. for the second.
func opSteps(n, ops int, nc int64, base int32, each func(i int, mark int32, f func(k graph.TensorID))) (start []int32, steps []int64) {
	start = make([]int32, n+1)
	count := func(k graph.TensorID) { start[k+1]++ }
	for i := 0; i < ops; i++ {
		each(i, base+int32(i)+1, count)
	}
	for k := 0; k < n; k++ {
		start[k+1] += start[k]
	}
	steps = make([]int64, start[n])
	pos := slices.Clone(start[:n])
	var step int64
	fill := func(k graph.TensorID) {
		steps[pos[k]] = step
		pos[k]++
	}
	for i := 0; i < ops; i++ {
		step = nc + int64(i)
		each(i, base+int32(ops+i)+1, fill)
	}
	return start, steps
}

// NextUseStorage implements storageOracle: the first step at or after now
// that reads the storage whose root is root.
func (o *graphOracle) NextUseStorage(root TensorID, now int64) int64 {
	g := o.rec.tensor(int32(root))
	if g == graph.NoTensor {
		return math.MaxInt64
	}
	r := o.root[g]
	return nextStep(o.rsteps, &o.rpos[r], o.rstart[r+1], now)
}

// nextStep returns the first of steps[*pos:end] at or after now (MaxInt64:
// none) and moves *pos to it.
func nextStep(steps []int64, pos *int32, end int32, now int64) int64 {
	p := *pos
	for p < end && steps[p] < now {
		p++
	}
	*pos = p
	if p == end {
		return math.MaxInt64
	}
	return steps[p]
}

// NextUse implements Oracle (now must not decrease between calls for a
// tensor, as the runtime's step does not).
func (o *graphOracle) NextUse(t TensorID, now int64) int64 {
	g := o.rec.tensor(int32(t))
	if g == graph.NoTensor {
		return math.MaxInt64
	}
	return nextStep(o.steps, &o.pos[g], o.start[g+1], now)
}

// drive runs every op of g in order. cost gives each op's time in ns.
// Tensors from outside the step are pinned constants; persistent outputs
// (updated parameters and state) are pinned when produced, as the Machine
// pins them; an op's inputs are released after their last consumer;
// tensors nobody consumes stay referenced.
func drive(ctx context.Context, d *graphDriver, cost, ws func(graph.OpID) int64) (*graphDriver, error) {
	g, rt := d.g, d.rt
	// The loops below read the graph's dense index: at 100k ops the Op and
	// Tensor structs no longer fit in the cache.
	dn := g.Dense()
	last := make([]int32, len(g.Tensors))
	for i := range last {
		last[i] = -1
	}
	for i := range g.Ops {
		for _, in := range dn.Inputs(graph.OpID(i)) {
			last[in] = int32(i)
		}
	}
	stale := overwrites(g, last)
	var saved []bool // Config.SavedOnly: the storages under the budget
	var packStart []int32
	var packed []graph.TensorID
	if rt.cfg.SavedOnly {
		saved = savedStorages(dn, rt.cfg.EvicteeMinSize)
		packStart, packed = packOps(dn, saved)
	}
	for i := range g.Tensors {
		tt := &g.Tensors[i]
		if tt.Producer != graph.NoOp {
			continue
		}
		d.rec.opMap = append(d.rec.opMap, graph.NoOp)
		d.rec.tenMap = append(d.rec.tenMap, graph.TensorID(i))
		id, err := rt.constant(tt.StorageBytes(), saved != nil)
		if err != nil {
			return d, fmt.Errorf("dtr static: tensor %d %q (%d bytes, no producer): %w", i, tt.Name, tt.StorageBytes(), err)
		}
		d.toRT[i] = id
	}
	var ins []TensorID
	var outs []Output
	var extra []graph.TensorID // alias roots read by an op beside its inputs
	var sib []int              // per output: the earlier output it views, or -1
	for i := range g.Ops {
		if i&63 == 0 {
			if err := ctx.Err(); err != nil {
				return d, err
			}
		}
		o := &g.Ops[i]
		oIns, oOuts := dn.Inputs(graph.OpID(i)), dn.Outputs(graph.OpID(i))
		ins = ins[:0]
		for _, in := range oIns {
			if d.toRT[in] < 0 {
				return d, fmt.Errorf("dtr static: op %d %q: input tensor %d %q read before its producer ran", i, o.Name, in, g.Tensors[in].Name)
			}
			ins = append(ins, d.toRT[in])
		}
		outs = outs[:0]
		sib = sib[:0]
		for range oOuts {
			sib = append(sib, -1)
		}
		for k, out := range oOuts {
			root := dn.Root[out]
			if root == out {
				// under SavedOnly every storage starts outside the budget;
				// the saved ones come under it when their op has run
				outs = append(outs, Output{Bytes: dn.StorageBytes[out], AliasOf: -1, Unbudgeted: saved != nil})
				continue
			}
			t := &g.Tensors[out]
			// A view shares the storage of its alias root, which the graph
			// may name through a chain (a transpose of a view of x has
			// AliasOf x, its input being the view): the runtime's storage
			// must be the same as the Machine's, so the view aliases an
			// input on that storage, an earlier output of the op that is
			// the root, or else the root itself, read as an extra input
			// (the Machine needs it resident to create the view).
			al := -1
			for j, in := range oIns {
				if dn.Root[in] == root {
					al = j
					break
				}
			}
			if al < 0 {
				for j := range extra {
					if extra[j] == root {
						al = len(oIns) + j
						break
					}
				}
			}
			if al < 0 && dn.Producer[root] == graph.OpID(i) {
				for j, u := range oOuts[:k] {
					if u == root {
						sib[k] = j
						break
					}
				}
				if sib[k] < 0 {
					return d, fmt.Errorf("dtr static: op %d %q: output %d %q is a view of tensor %d %q, a later output of the same op: expected a view of an input, an earlier tensor or an earlier output", i, o.Name, k, t.Name, root, g.Tensors[root].Name)
				}
				outs = append(outs, Output{})
				continue
			}
			if al < 0 {
				if d.toRT[root] < 0 {
					return d, fmt.Errorf("dtr static: op %d %q: output %d %q is a view of tensor %d %q, not computed yet", i, o.Name, k, t.Name, root, g.Tensors[root].Name)
				}
				al = len(oIns) + len(extra)
				extra = append(extra, root)
				ins = append(ins, d.toRT[root])
			}
			outs = append(outs, Output{AliasOf: al})
		}
		// views of an earlier output of the op: indexes past the inputs,
		// known once the extra inputs are
		for k, j := range sib {
			if j >= 0 {
				outs[k].AliasOf = len(ins) + j
			}
		}
		extra = extra[:0]
		d.rec.opMap = append(d.rec.opMap, graph.OpID(i))
		d.rec.tenMap = append(d.rec.tenMap, oOuts...)
		opID, res, err := rt.computeWith(ins, cost(graph.OpID(i)), ws(graph.OpID(i)), outs)
		if err != nil {
			return d, fmt.Errorf("dtr static: op %d %q: %w", i, o.Name, err)
		}
		for j, out := range oOuts {
			d.toRT[out] = res[j]
		}
		if !rerunnable(g, graph.OpID(i)) || stale[i] {
			if err := rt.ForbidRemat(opID); err != nil {
				return d, err
			}
		}
		for j, out := range oOuts {
			if dn.Kind[out].Persistent() {
				if err := rt.Pin(res[j]); err != nil {
					return d, fmt.Errorf("dtr static: op %d %q: pin persistent output %q: %w", i, o.Name, g.Tensors[out].Name, err)
				}
			}
		}
		if packStart != nil {
			// autograd saves the op's tensors after it has run, one at a
			// time, and remat_torch.dtr checks the budget after each (here
			// once the runtime knows which outputs it cannot rerun)
			for _, r := range packed[packStart[i]:packStart[i+1]] {
				if err := rt.pack(d.toRT[r]); err != nil {
					return d, fmt.Errorf("dtr static: op %d %q: save tensor %d %q: %w", i, o.Name, r, g.Tensors[r].Name, err)
				}
			}
		}
		for _, in := range oIns {
			if last[in] == int32(i) && dn.Producer[in] != graph.NoOp {
				last[in] = -1 // released: an input listed twice once
				if err := rt.Release(d.toRT[in]); err != nil {
					return d, err
				}
			}
		}
	}
	return d, nil
}

// packOps returns, for the saved storages (savedStorages), the forward op
// at which remat_torch.dtr's runtime starts to manage each: the first
// forward op whose backward op reads it, for autograd saves a tensor (the
// pack) when the op that saves it runs, not when the tensor is made. A
// max-pool's output that only the next convolution saves is managed from
// that convolution on; before it, it is the forward's own, outside the
// budget. A storage that no backward op linked to a forward op reads is
// managed from its producer on. packed[packStart[i]:packStart[i+1]] lists
// the storages op i brings under the budget: those it reads, in argument
// order, then those it makes, then any other (autograd's clone of the
// input of an in-place activation is saved when the activation runs).
func packOps(dn *graph.Dense, saved []bool) (packStart []int32, packed []graph.TensorID) {
	nt, no := dn.NumTensors(), dn.NumOps()
	at := make([]int32, nt) // the saving op (-1: not saved)
	for r := range at {
		at[r] = -1
	}
	for i := 0; i < no; i++ {
		if dn.Phase[i] != graph.Backward {
			continue
		}
		f := dn.Forward[i]
		if f == graph.NoOp || f < 0 || int(f) >= no || dn.Phase[f] != graph.Forward {
			continue
		}
		for _, t := range dn.Inputs(graph.OpID(i)) {
			if r := dn.Root[t]; saved[r] && (at[r] < 0 || int32(f) < at[r]) {
				at[r] = int32(f)
			}
		}
	}
	packStart = make([]int32, no+1)
	for r := range at {
		if saved[r] {
			// a forward op cannot save what is made after it
			at[r] = max(at[r], int32(dn.Producer[r]))
			packStart[at[r]+1]++
		}
	}
	for i := 0; i < no; i++ {
		packStart[i+1] += packStart[i]
	}
	packed = make([]graph.TensorID, packStart[no])
	fill := append([]int32(nil), packStart[:no]...)
	listed := make([]bool, nt)
	for i := 0; i < no; i++ {
		if dn.Phase[i] != graph.Forward {
			continue
		}
		for _, ts := range [2][]graph.TensorID{dn.Inputs(graph.OpID(i)), dn.Outputs(graph.OpID(i))} {
			for _, t := range ts {
				if r := dn.Root[t]; at[r] == int32(i) && !listed[r] {
					listed[r] = true
					packed[fill[i]] = r
					fill[i]++
				}
			}
		}
	}
	for r, f := range at {
		if f >= 0 && !listed[r] {
			packed[fill[f]] = graph.TensorID(r)
			fill[f]++
		}
	}
	return packStart, packed
}

// savedStorages returns, per storage root, whether Config.SavedOnly puts it
// under the budget: a forward op makes it, an op of the backward or update
// pass reads it (directly or through a view), it is not persistent state,
// and it has at least minSize bytes.
func savedStorages(dn *graph.Dense, minSize int64) []bool {
	saved := dn.ReadOutsideForward()
	for t, ok := range saved {
		if !ok {
			continue
		}
		p := dn.Producer[t]
		saved[t] = p != graph.NoOp && dn.Phase[p] == graph.Forward && !dn.Kind[t].Persistent() && dn.StorageBytes[t] >= minSize
	}
	return saved
}

// overwrites reports the ops whose outputs DTR must not evict because an
// in-place write would make their rerun read other data (stale[op]): op
// makes a storage from one (not one it writes itself) that an in-place op
// of the forward or backward pass overwrites while the storage made is
// still read (after op, before its last reader; last[t] is tensor t's
// last reader). The runtime keeps one version of a storage, so a rerun
// after the write would read what was written: autograd's clone of the
// input of an in-place activation (nn.Hardswish(inplace=True),
// nn.SiLU(inplace=True)), which the backward reads. Such an op's outputs
// are unrecomputable (kept while referenced, as for an impure op).
//
// The update phase's in-place writes (the optimizer's) do not count: as in
// the DTR paper's simulator, a gradient evicted before the update may be
// rematerialized during it by rerunning backward (and forward) ops, which
// then read parameters the update already wrote; the paper's PyTorch
// prototype copies on write for that, and the simulator charges no copy.
func overwrites(g *graph.Graph, last []int32) []bool {
	nt := len(g.Tensors)
	stale := make([]bool, len(g.Ops))
	// each calls f for every in-place write (op i, storage r) outside the
	// update phase, in op order
	each := func(f func(i int32, r graph.TensorID)) {
		for i := range g.Ops {
			o := &g.Ops[i]
			if !o.Flags.Has(graph.InPlace) || o.Phase == graph.Update {
				continue
			}
			for _, out := range o.Outputs {
				if r := g.StorageOf(out); r != out {
					f(int32(i), r)
				}
			}
		}
	}
	// writes[start[r]:start[r+1]]: the ops writing storage r in place
	start := make([]int32, nt+1)
	each(func(_ int32, r graph.TensorID) { start[r+1]++ })
	for r := 0; r < nt; r++ {
		start[r+1] += start[r]
	}
	if start[nt] == 0 {
		return stale
	}
	// lastUse[r]: the last reader of storage r (of any tensor on it)
	lastUse := make([]int32, nt)
	for t := range lastUse {
		lastUse[t] = -1
	}
	for t := 0; t < nt; t++ {
		r := g.StorageOf(graph.TensorID(t))
		lastUse[r] = max(lastUse[r], last[t])
	}
	writes := make([]int32, start[nt])
	fill := append([]int32(nil), start[:nt]...)
	each(func(i int32, r graph.TensorID) {
		writes[fill[r]] = i
		fill[r]++
	})
	for i := range g.Ops {
		o := &g.Ops[i]
		if o.Phase == graph.Update {
			continue
		}
		// the last reader of a storage the op makes (a view or an
		// in-place output reads the storage when it is read, and a rerun
		// of the op makes none)
		end := int32(-1)
		for _, out := range o.Outputs {
			if g.Tensors[out].AliasOf == graph.NoTensor {
				end = max(end, lastUse[out])
			}
		}
	reads:
		for _, in := range o.Inputs {
			r := g.StorageOf(in)
			if writesStorage(g, o, r) {
				continue
			}
			for _, w := range writes[start[r]:start[r+1]] {
				if w > int32(i) && w < end {
					stale[i] = true
					break reads
				}
			}
		}
	}
	return stale
}

// writesStorage reports whether o writes storage r in place.
func writesStorage(g *graph.Graph, o *graph.Op, r graph.TensorID) bool {
	if !o.Flags.Has(graph.InPlace) {
		return false
	}
	for _, out := range o.Outputs {
		if out != r && g.StorageOf(out) == r {
			return true
		}
	}
	return false
}

// rerunnable reports whether the runtime may run op o again. Besides the
// ops graph.Op.Recomputable accepts, that is an in-place op (neither impure
// nor random without saved RNG state) whose outputs that are views all write
// storages computed by an op: the Machine reruns it only after the
// producer of each storage it writes has run again since (sim's
// inPlaceFresh: it rewrites fresh values, a recomputed conv then its
// relu_), and the runtime reruns it only to rematerialize its output after
// that storage was evicted, which recomputes the storage's producer first
// (the in-place op's input is on that storage). Its first run is the
// newest version of the storage; the older versions read by later ops are
// recomputed in order along the same chain.
//
// It reads the op's flags from the graph's dense index, and the op's struct
// only for the attribute of a random op: at 100k ops the structs no longer
// fit in the cache.
func rerunnable(g *graph.Graph, op graph.OpID) bool {
	d := g.Dense()
	f := d.Flags[op]
	if f.Has(graph.Impure) {
		return false
	}
	if f.Has(graph.NonDeterministic) {
		if v := g.Ops[op].Attrs[graph.AttrRNGSaved]; v != "1" && v != "true" {
			return false
		}
	}
	if !f.Has(graph.InPlace) {
		return true
	}
	wrote := false
	for _, out := range d.Outputs(op) {
		root := d.Root[out]
		if root == out {
			continue
		}
		if d.Producer[root] == graph.NoOp {
			return false
		}
		wrote = true
	}
	return wrote
}

// StaticPlan runs DTR once on g's default schedule (op times from TimeNs, or 1 ns
// when unset; workspaces from Workspace) and exports what it did as a
// sim.Plan: every compute (first or again), free (evictions and eager frees)
// and swap, in order. Without a Machine it sees no allocator: PlanOnMachine
// records the run on one.
func StaticPlan(ctx context.Context, g *graph.Graph, cfg Config) (*sim.Plan, Stats, error) {
	rt, err := New(cfg, nil)
	if err != nil {
		return nil, Stats{}, err
	}
	d, err := drive(ctx, newDriver(g, rt), func(op graph.OpID) int64 {
		if t := g.Ops[op].TimeNs; t > 0 {
			return t
		}
		return 1
	}, func(op graph.OpID) int64 { return max(g.Ops[op].Workspace, 0) })
	if err != nil {
		return nil, rt.Stats(), err
	}
	return &sim.Plan{Strategy: "dtr-static/" + cfg.Heuristic.String(), Steps: d.rec.steps}, rt.Stats(), nil
}
