package sim

import (
	"fmt"
	"slices"

	"github.com/remat-dev/remat/graph"
)

// PlanFromSchedule turns a sequence of op computations into a Plan. An op may
// appear more than once: a repeat is a recompute that re-creates the op's
// outputs. Every tensor instance is freed right after its last read before it
// is re-created (or right after it is produced if nothing reads it), which is
// what an executor that drops references eagerly does. Tensors without a
// producer (inputs, parameters, constants, initial optimizer state) and
// persistent kinds (parameters, optimizer state, constants: e.g. updated
// weights) are never freed. Views add no storage: the free of a storage is
// emitted for its base tensor once neither it nor any view of it is read
// again. Frees after one step are ordered by tensor ID, so the plan is
// deterministic.
//
// The work is O(len(ops) + edges) with two passes and no maps.
func PlanFromSchedule(g *graph.Graph, strategy string, ops []graph.OpID) (*Plan, error) {
	nt := len(g.Tensors)
	for i, o := range ops {
		if o < 0 || int(o) >= len(g.Ops) {
			return nil, fmt.Errorf("schedule position %d: op %d is not defined (graph has %d ops)", i, o, len(g.Ops))
		}
	}
	root := make([]graph.TensorID, nt)
	keep := make([]bool, nt) // never freed
	for i := range g.Tensors {
		r := g.StorageOf(graph.TensorID(i))
		root[i] = r
		rt := &g.Tensors[r]
		keep[i] = rt.Producer == graph.NoOp || rt.Kind.Persistent()
	}
	// Reverse pass: liveAfter[r] says storage r is read later, before being
	// re-created. freeAt collects (position, tensor) pairs.
	liveAfter := make([]bool, nt)
	type freeEv struct {
		pos int32
		t   graph.TensorID
	}
	frees := make([]freeEv, 0, nt)
	for i := len(ops) - 1; i >= 0; i-- {
		op := &g.Ops[ops[i]]
		for _, t := range op.Outputs {
			if root[t] != t || keep[t] { // views have no storage of their own
				continue
			}
			if !liveAfter[t] {
				frees = append(frees, freeEv{int32(i), t})
			}
			liveAfter[t] = false
		}
		for _, t := range op.Inputs {
			r := root[t]
			if keep[r] || liveAfter[r] {
				continue
			}
			if isOutput(op, r) {
				continue
			}
			liveAfter[r] = true
			frees = append(frees, freeEv{int32(i), r})
		}
	}
	slices.SortFunc(frees, func(a, b freeEv) int {
		if a.pos != b.pos {
			return int(a.pos - b.pos)
		}
		return int(a.t - b.t)
	})
	steps := make([]Step, 0, len(ops)+len(frees))
	f := 0
	for i, o := range ops {
		steps = append(steps, ComputeStep(o))
		for f < len(frees) && frees[f].pos == int32(i) {
			// The same storage may be both read as an input and reach its
			// last use in one step; emit its free once.
			if f == 0 || frees[f-1].pos != frees[f].pos || frees[f-1].t != frees[f].t {
				steps = append(steps, FreeStep(frees[f].t))
			}
			f++
		}
	}
	return &Plan{Strategy: strategy, Steps: steps}, nil
}

func isOutput(op *graph.Op, t graph.TensorID) bool {
	for _, o := range op.Outputs {
		if o == t {
			return true
		}
	}
	return false
}
