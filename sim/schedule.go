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
// weights) are never freed, nor is a parameter's final gradient (its .grad,
// held to the end of the step). Views add no storage: the free of a storage is
// emitted for its base tensor once neither it nor any view of it is read
// again. Frees after one step are ordered by tensor ID, so the plan is
// deterministic.
//
// The work is O(len(ops) + edges) with two passes and no maps. A nil graph,
// or one whose ops name tensors or ops it does not have, is an error wrapping
// graph.ErrInvalid.
func PlanFromSchedule(g *graph.Graph, strategy string, ops []graph.OpID) (*Plan, error) {
	if g == nil {
		return nil, fmt.Errorf("plan from schedule: graph is nil: %w", graph.ErrInvalid)
	}
	if err := checkGraph(g); err != nil {
		return nil, fmt.Errorf("plan from schedule: %w", err)
	}
	nt := len(g.Tensors)
	for i, o := range ops {
		if o < 0 || int(o) >= len(g.Ops) {
			return nil, fmt.Errorf("schedule position %d: op %d is not defined (graph has %d ops)", i, o, len(g.Ops))
		}
	}
	d := g.Dense()
	root := d.Root
	keep := make([]bool, nt) // never freed
	for i, r := range root {
		keep[i] = keep[i] || d.Producer[r] == graph.NoOp || d.Kind[r].Persistent()
		// A parameter's final gradient keeps its storage (it may be a
		// view: in an exporter trace, .grad is a detach of the backward
		// kernel's output).
		if d.Kind[i] == graph.ParamGradient && isFinalParamGrad(g, d, graph.TensorID(i)) {
			keep[r] = true
		}
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
		ins, outs := d.Inputs(ops[i]), d.Outputs(ops[i])
		for _, t := range outs {
			if root[t] != t || keep[t] { // views have no storage of their own
				continue
			}
			if !liveAfter[t] {
				frees = append(frees, freeEv{int32(i), t})
			}
			liveAfter[t] = false
		}
		for _, t := range ins {
			r := root[t]
			if keep[r] || liveAfter[r] {
				continue
			}
			if slices.Contains(outs, r) {
				continue
			}
			liveAfter[r] = true
			frees = append(frees, freeEv{int32(i), r})
		}
	}
	// The pass appended the frees by position, last first: reversed, they
	// are in step order, and only each step's few frees need sorting (by
	// tensor), not the whole list.
	slices.Reverse(frees)
	for lo := 0; lo < len(frees); {
		hi := lo + 1
		for hi < len(frees) && frees[hi].pos == frees[lo].pos {
			hi++
		}
		if hi-lo > 1 {
			slices.SortFunc(frees[lo:hi], func(a, b freeEv) int { return int(a.t - b.t) })
		}
		lo = hi
	}
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

// isFinalParamGrad reports whether tensor r is a parameter's gradient that
// no grad_accumulate sums further: the parameter's .grad (PyTorch), gradient
// array (MXNet) or param.grad (MegEngine), which the framework holds until
// the next step clears it, so it stays allocated to the end of the step
// whether or not an update reads it. Partial gradients summed by
// grad_accumulate are freed as usual.
func isFinalParamGrad(g *graph.Graph, d *graph.Dense, r graph.TensorID) bool {
	if d.Kind[r] != graph.ParamGradient {
		return false
	}
	for _, c := range g.Consumers(r) {
		if d.Types[d.Type[c]] == graph.OpGradAccumulate {
			return false
		}
	}
	return true
}
