package sublinear

import (
	"sort"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/internal/dedup"
	"github.com/remat-dev/remat/sim"
)

// mgeProblem is the read-only, per-graph part of MegEngine's sublinear
// search: the operator sequence reduced to what the planner needs, in flat
// slices indexed by OpID and TensorID. Workers share one mgeProblem; every
// mutable buffer lives in an mgeEvaluator.
//
// Memory semantics mirror sim.PlanFromSchedule and the Machine: a tensor's
// storage is its alias root; roots without a producer or of a persistent kind
// are never freed ("kept"); views add no bytes and extend the life of their
// root; every other storage is freed right after its last read before it is
// re-created.
type mgeProblem struct {
	g  *graph.Graph
	n  int // ops
	nt int // tensors

	root []graph.TensorID // storage root of each tensor
	keep []bool           // root never freed (external or persistent)
	size []int64          // StorageBytes (0 for views)
	// isVar: a storage the planner may reason about: produced by an op,
	// not kept. mutated: a view of it is written by an op that cannot run
	// twice (an in-place op such as relu_ or bernoulli_): recomputing its
	// producer alone would not give its value back.
	isVar   []bool
	mutated []bool
	prod    []int32 // producer op (-1 for external tensors)

	// Access lists of vars in CSR form: accTime[accStart[v]:accStart[v+1]]
	// is the creation op followed by the distinct readers (reads of a view
	// count as reads of its root), in op order. Empty for non-vars.
	accStart []int32
	accTime  []int32
	lastAcc  []int32 // last access (creation if never read); -1 for non-vars
	// firstDisc, when set (SearchOptions.ForwardOnly), is per var the
	// first index into its access list it may be discarded after.
	firstDisc []int32

	// Per op.
	varIn      []int32 // distinct var inputs (storage roots)
	usedOut    []int32 // var outputs that are read by someone
	noDup      []bool  // may not be duplicated by a recompute
	endpoint   []bool  // carries AttrSublinearEndpoint
	opTime     []int64 // time charged for a duplicate
	workspace  []int64 // temporary bytes while the op runs
	hasEndpts  bool
	cands      []int32 // positions allowed as split points, excluding n-1
	arenaT     []int32 // tensors in the atomic-clean arena
	resident0  int64   // bytes resident from the start (external storages, arena)
	wsSlots    int     // workspaces alive at once (sim.TempSlots)
	totalTimeN int64   // sum of opTime, for penalties

	// Per-op input roots (distinct vars) and storage-owning outputs, CSR.
	inStart []int32
	inRoots []int32
	// Per-op outputs that are vars, CSR: the hot loops read these flat
	// slices instead of the graph's ops (144-byte structs, a cache miss
	// each on large graphs).
	outStart []int32
	outVars  []int32
	// Slots for the liveness passes: per op, its storage-owning non-kept
	// outputs followed by its distinct non-kept input roots that are not
	// also outputs. slotOut[op] = number of output slots. Slots and allocs
	// hold storage indices (sidSize), not tensor IDs.
	slotStart []int32
	slots     []int32
	slotOut   []int32
	// Storage-owning outputs (root == self), kept or not: what a compute
	// allocates when not resident.
	allocStart []int32
	allocs     []int32
	// sidSize is the size of each storage the peak pass tracks, indexed
	// densely in the order the ops first name them. The pass's per-storage
	// state then fits in one small array, mostly read in order: indexed by
	// tensor ID, its random reads missed the cache on 100k-op graphs. It
	// holds an index into sizes, the distinct storage sizes, so that the
	// pass's record is 8 bytes.
	sidSize []int32
	sizes   []int64
}

// mgeMemModel is the part of sim's Machine the fitness mirrors: each op's
// workspace, whether memset-initialized outputs live in one arena allocated
// at start (atomic clean policy 0), and how many workspaces stay alive
// (sim.TempSlots).
type mgeMemModel struct {
	workspace func(graph.OpID) int64
	arena     bool
	wsSlots   int
}

// newMgeProblem indexes g. opTime gives the time charged for duplicating an
// op; endpoint attributes restrict split points.
func newMgeProblem(g *graph.Graph, opTime func(graph.OpID) int64, mm mgeMemModel) *mgeProblem {
	n, nt := len(g.Ops), len(g.Tensors)
	p := &mgeProblem{g: g, n: n, nt: nt, wsSlots: max(1, mm.wsSlots)}
	freed := freedStorages(g)
	p.root = make([]graph.TensorID, nt)
	p.keep = make([]bool, nt)
	p.size = make([]int64, nt)
	p.isVar = make([]bool, nt)
	p.mutated = make([]bool, nt)
	p.prod = make([]int32, nt)
	for i := range g.Tensors {
		t := &g.Tensors[i]
		r := g.StorageOf(graph.TensorID(i))
		p.root[i] = r
		rt := &g.Tensors[r]
		p.keep[i] = rt.Producer == graph.NoOp || rt.Kind.Persistent() || !freed[r]
		p.size[i] = t.StorageBytes()
		p.prod[i] = int32(t.Producer)
		if r != graph.TensorID(i) {
			if t.Producer != graph.NoOp && !g.Ops[t.Producer].Recomputable() {
				p.mutated[r] = true
			}
		} else if t.Producer == graph.NoOp {
			p.resident0 += t.StorageBytes()
		}
	}
	if mm.arena {
		// Atomic clean policy 0: the outputs of memset-initialized ops
		// live in one arena from the start; computing or freeing them
		// changes nothing.
		for i := range g.Ops {
			if !sim.IsAtomicClean(&g.Ops[i]) {
				continue
			}
			for _, o := range g.Ops[i].Outputs {
				if p.root[o] == o && !p.keep[o] {
					p.resident0 += p.size[o]
					p.size[o] = 0
					p.arenaT = append(p.arenaT, int32(o))
				}
			}
		}
	}
	for i := range g.Tensors {
		p.isVar[i] = p.root[i] == graph.TensorID(i) && !p.keep[i] && g.Tensors[i].Producer != graph.NoOp
	}
	for _, t := range p.arenaT {
		p.isVar[t] = false
	}

	// Distinct var input roots per op, and slots.
	p.inStart = make([]int32, n+1)
	p.slotStart = make([]int32, n+1)
	p.slotOut = make([]int32, n)
	p.allocStart = make([]int32, n+1)
	p.varIn = make([]int32, n)
	p.usedOut = make([]int32, n)
	p.noDup = make([]bool, n)
	p.endpoint = make([]bool, n)
	p.opTime = make([]int64, n)
	p.workspace = make([]int64, n)
	inSeen := dedup.New(len(g.Tensors)) // an op's distinct input roots
	sid := make([]int32, nt)            // storage index + 1 (0: none yet)
	sizeIdx := make(map[int64]int32)    // index in p.sizes
	sidOf := func(t graph.TensorID) int32 {
		if sid[t] == 0 {
			k, ok := sizeIdx[p.size[t]]
			if !ok {
				k = int32(len(p.sizes))
				sizeIdx[p.size[t]] = k
				p.sizes = append(p.sizes, p.size[t])
			}
			p.sidSize = append(p.sidSize, k)
			sid[t] = int32(len(p.sidSize))
		}
		return sid[t] - 1
	}
	for i := range g.Ops {
		op := &g.Ops[i]
		for _, o := range op.Outputs {
			if p.root[o] == o {
				p.allocs = append(p.allocs, sidOf(o))
				if !p.keep[o] {
					p.slots = append(p.slots, sidOf(o))
					p.slotOut[i]++
				}
			}
		}
		inSeen.Next()
		for _, t := range op.Inputs {
			r := p.root[t]
			if inSeen.Seen(int32(r)) {
				continue
			}
			if p.isVar[r] {
				p.inRoots = append(p.inRoots, int32(r))
			}
			if !p.keep[r] && !mgeIsOutput(op, r) {
				p.slots = append(p.slots, sidOf(r))
			}
		}
		p.inStart[i+1] = int32(len(p.inRoots))
		p.slotStart[i+1] = int32(len(p.slots))
		p.allocStart[i+1] = int32(len(p.allocs))
		p.varIn[i] = p.inStart[i+1] - p.inStart[i]

		nd := !op.Recomputable()
		for _, o := range op.Outputs {
			if p.root[o] != o || p.mutated[o] || p.keep[o] {
				nd = true
			}
		}
		p.noDup[i] = nd
		if v, ok := op.Attr(graph.AttrSublinearEndpoint); ok && (v == "1" || v == "true") {
			p.endpoint[i] = true
			p.hasEndpts = true
		}
		p.opTime[i] = opTime(graph.OpID(i))
		if p.opTime[i] < 0 {
			p.opTime[i] = 0
		}
		p.totalTimeN += p.opTime[i]
		if mm.workspace != nil {
			p.workspace[i] = mm.workspace(graph.OpID(i))
		} else {
			p.workspace[i] = op.Workspace
		}
	}

	p.outStart = make([]int32, n+1)
	for i := range g.Ops {
		for _, o := range g.Ops[i].Outputs {
			if p.isVar[o] {
				p.outVars = append(p.outVars, int32(o))
			}
		}
		p.outStart[i+1] = int32(len(p.outVars))
	}

	// Access lists: creation + distinct readers.
	cnt := make([]int32, nt+1)
	for i := 0; i < nt; i++ {
		if p.isVar[i] {
			cnt[i+1] = 1
		}
	}
	for i := 0; i < n; i++ {
		for _, r := range p.inRoots[p.inStart[i]:p.inStart[i+1]] {
			cnt[r+1]++
		}
	}
	for i := 0; i < nt; i++ {
		cnt[i+1] += cnt[i]
	}
	p.accStart = cnt
	p.accTime = make([]int32, cnt[nt])
	fill := make([]int32, nt)
	copy(fill, cnt[:nt])
	for i := 0; i < nt; i++ {
		if p.isVar[i] {
			p.accTime[fill[i]] = p.prod[i]
			fill[i]++
		}
	}
	for i := 0; i < n; i++ {
		for _, r := range p.inRoots[p.inStart[i]:p.inStart[i+1]] {
			p.accTime[fill[r]] = int32(i)
			fill[r]++
		}
	}
	p.lastAcc = make([]int32, nt)
	for i := 0; i < nt; i++ {
		if p.isVar[i] {
			p.lastAcc[i] = p.accTime[p.accStart[i+1]-1]
			if p.lastAcc[i] > p.prod[i] {
				p.usedOut[p.prod[i]]++
			}
		} else {
			p.lastAcc[i] = -1
		}
	}
	for i := 0; i < n-1; i++ {
		if !p.hasEndpts || p.endpoint[i] {
			p.cands = append(p.cands, int32(i))
		}
	}
	return p
}

// freedStorages marks the storages sim.PlanFromSchedule frees in the
// graph's own order. A produced storage it never frees (persistent kinds, a
// parameter's final gradient) is kept, so the fitness follows whatever the
// simulator's planner holds to the end of the step.
func freedStorages(g *graph.Graph) []bool {
	freed := make([]bool, len(g.Tensors))
	p := sim.DefaultPlan(g)
	if p == nil {
		return freed
	}
	for _, st := range p.Steps {
		if st.Kind == sim.Free && st.Tensor >= 0 && int(st.Tensor) < len(freed) {
			freed[st.Tensor] = true
		}
	}
	return freed
}

func mgeIsOutput(op *graph.Op, t graph.TensorID) bool {
	for _, o := range op.Outputs {
		if o == t {
			return true
		}
	}
	return false
}

// lowerBound is a peak no plan of the search (indeed no recompute plan) can
// go below: bytes resident from the start, plus bytes held to the end once
// created (kept storages with a producer), plus, at the op where it is
// largest, the op's working set (its distinct non-kept input storages and
// its non-kept outputs, which must be resident together while it runs, and
// its workspace) on top of the kept storages created before it. It returns
// the bound and its first two parts.
func (p *mgeProblem) lowerBound() (lb, resident, held int64) {
	g := p.g
	seen := make([]bool, p.nt)
	inSeen := dedup.New(p.nt) // an op's distinct input roots
	var keptSoFar int64
	lb = p.resident0
	for i := 0; i < p.n; i++ {
		op := &g.Ops[i]
		var ws int64
		inSeen.Next()
		for _, t := range op.Inputs {
			r := p.root[t]
			if !p.keep[r] && !inSeen.Seen(int32(r)) {
				ws += p.size[r]
			}
		}
		for _, o := range op.Outputs {
			r := p.root[o]
			if r != o {
				continue
			}
			if p.keep[o] {
				if !seen[o] && g.Tensors[o].Producer != graph.NoOp {
					seen[o] = true
					keptSoFar += p.size[o]
				}
			} else {
				ws += p.size[o]
			}
		}
		lb = max(lb, p.resident0+keptSoFar+ws+p.workspace[i])
	}
	return max(lb, p.resident0+keptSoFar), p.resident0, keptSoFar
}

// discardable reports whether var v may be freed and recomputed: produced by
// a duplicable op (MegEngine skips vars of bad oprs) and not written in place
// through a view. Views of v need no recompute of their own: they read v's
// storage, which the recompute brings back (reads of a view count as reads of
// v). Traced steps view nearly every activation (reshape before a matmul,
// transpose for attention heads), so excluding viewed storage would leave
// little to discard.
func (p *mgeProblem) discardable(v int32) bool {
	return p.isVar[v] && !p.mutated[v] && !p.noDup[p.prod[v]]
}

// forwardOnly restricts the problem to forward recomputation
// (SearchOptions.ForwardOnly): ops outside the forward phase may not be
// duplicated, and firstDisc[v] is the index in v's access list of its last
// access by a forward op, before which v may not be discarded.
func (p *mgeProblem) forwardOnly(g *graph.Graph) {
	p.firstDisc = make([]int32, p.nt)
	for i := range g.Ops {
		if g.Ops[i].Phase != graph.Forward {
			p.noDup[i] = true
		}
	}
	for v := 0; v < p.nt; v++ {
		a0, a1 := p.accStart[v], p.accStart[v+1]
		for k := a1 - 1; k >= a0; k-- {
			if g.Ops[p.accTime[k]].Phase == graph.Forward {
				p.firstDisc[v] = k - a0
				break
			}
		}
	}
}

// thresholdSplits is MegEngine's get_split_point_set: walk the ops keeping
// the bytes of vars produced in the current block that are still alive
// (a var dies at its last reader); close the block once they reach thresh
// (only at endpoint ops if the graph marks any). The last op always closes a
// block. mark is scratch of length nt.
func (p *mgeProblem) thresholdSplits(thresh int64, mark []int32, dst []int32) []int32 {
	dst = dst[:0]
	if p.n == 0 {
		return dst
	}
	for i := range mark {
		mark[i] = -1
	}
	var usage int64
	block := int32(0)
	for i := 0; i < p.n; i++ {
		for _, o := range p.outVars[p.outStart[i]:p.outStart[i+1]] {
			if p.lastAcc[o] > int32(i) {
				mark[o] = block
				usage += p.size[o]
			}
		}
		for _, r := range p.inRoots[p.inStart[i]:p.inStart[i+1]] {
			if p.lastAcc[r] == int32(i) && mark[r] == block {
				mark[r] = -1
				usage -= p.size[r]
			}
		}
		if i+1 < p.n && (usage < thresh || (p.hasEndpts && !p.endpoint[i])) {
			continue
		}
		dst = append(dst, int32(i))
		usage = 0
		block++
	}
	return dst
}

// validGenome checks that s is a strictly increasing list of allowed split
// positions ending at n-1.
func (p *mgeProblem) validGenome(s []int32) bool {
	if p.n == 0 {
		return len(s) == 0
	}
	if len(s) == 0 || s[len(s)-1] != int32(p.n-1) {
		return false
	}
	for i, x := range s[:len(s)-1] {
		if x < 0 || (i > 0 && x <= s[i-1]) || x >= int32(p.n-1) {
			return false
		}
		if p.hasEndpts && !p.endpoint[x] {
			return false
		}
	}
	return true
}

// candRange returns the indexes [lo, hi) into cands of positions in
// [from, to] (inclusive).
func (p *mgeProblem) candRange(from, to int32) (int, int) {
	lo := sort.Search(len(p.cands), func(i int) bool { return p.cands[i] >= from })
	hi := sort.Search(len(p.cands), func(i int) bool { return p.cands[i] > to })
	return lo, hi
}
