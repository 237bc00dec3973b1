package sim

import "github.com/remat-dev/remat/graph"

// DefaultPlan is the plan without any strategy (Strategy "none"): compute
// every op in graph order and free each storage right after its last use,
// which keeps exactly what backward reads, as PyTorch does. The rules (the
// same as PlanFromSchedule's on the graph order):
//
//   - tensors without a producer (inputs, parameters, constants, initial
//     optimizer state) and persistent kinds (parameters, optimizer state,
//     constants, so the updated parameters and state) are never freed;
//   - a storage is freed after the last op that reads it or any view of it;
//   - a tensor nobody reads is freed right after the op that produces it;
//   - views are never freed themselves: they stop being resident with their
//     storage;
//   - frees after one op are ordered by tensor ID.
//
// The work is O(ops + edges) (a bucket sort by free position); g must be
// valid.
func DefaultPlan(g *graph.Graph) *Plan {
	nt, no := len(g.Tensors), len(g.Ops)
	// freeAt[r]: op after which storage r is freed; -1 = never.
	freeAt := make([]int32, nt)
	for i := range g.Tensors {
		t := &g.Tensors[i]
		switch {
		case t.AliasOf != graph.NoTensor, t.Producer == graph.NoOp, t.Kind.Persistent():
			freeAt[i] = -1
		default:
			freeAt[i] = int32(t.Producer)
		}
	}
	root := func(t graph.TensorID) graph.TensorID {
		for n := 0; g.Tensors[t].AliasOf != graph.NoTensor && n <= nt; n++ {
			t = g.Tensors[t].AliasOf
		}
		return t
	}
	for i := range g.Ops {
		for _, t := range g.Ops[i].Inputs {
			r := t
			if g.Tensors[t].AliasOf != graph.NoTensor {
				r = root(t)
			}
			if freeAt[r] >= 0 && int32(i) > freeAt[r] {
				freeAt[r] = int32(i)
			}
		}
	}
	// Bucket the frees by op, tensors ascending within a bucket.
	start := make([]int32, no+1)
	nf := 0
	for i := range freeAt {
		if f := freeAt[i]; f >= 0 {
			start[f+1]++
			nf++
		}
	}
	for i := 0; i < no; i++ {
		start[i+1] += start[i]
	}
	list := make([]graph.TensorID, nf)
	fill := append([]int32(nil), start[:no]...)
	for i := range freeAt {
		if f := freeAt[i]; f >= 0 {
			list[fill[f]] = graph.TensorID(i)
			fill[f]++
		}
	}
	steps := make([]Step, 0, no+nf)
	for i := 0; i < no; i++ {
		steps = append(steps, ComputeStep(graph.OpID(i)))
		for _, t := range list[start[i]:start[i+1]] {
			steps = append(steps, FreeStep(t))
		}
	}
	return &Plan{Strategy: "none", Steps: steps}
}
