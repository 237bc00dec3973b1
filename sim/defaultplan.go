package sim

import "github.com/remat-dev/remat/graph"

// DefaultPlan is the plan without any strategy (Strategy "none"): compute
// every op in graph order and free each storage right after its last use,
// which keeps exactly what backward reads, as PyTorch does. It is
// PlanFromSchedule on the graph order, so baseline and strategy plans free
// memory by one rule:
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
// g must be valid.
func DefaultPlan(g *graph.Graph) *Plan {
	order := make([]graph.OpID, len(g.Ops))
	for i := range order {
		order[i] = graph.OpID(i)
	}
	// Every op of the identity order is in range, so PlanFromSchedule
	// cannot fail here.
	p, _ := PlanFromSchedule(g, "none", order)
	return p
}
