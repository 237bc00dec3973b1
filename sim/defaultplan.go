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
// g should be valid. A nil graph has no ops: its plan has no steps. A graph
// whose ops name tensors or ops it does not have has no plan: DefaultPlan
// returns nil (PlanFromSchedule says why), which Simulate and Replay reject.
func DefaultPlan(g *graph.Graph) *Plan {
	if g == nil {
		return &Plan{Strategy: "none", Steps: []Step{}}
	}
	order := make([]graph.OpID, len(g.Ops))
	for i := range order {
		order[i] = graph.OpID(i)
	}
	// Every op of the identity order is in range, so PlanFromSchedule
	// fails only on a malformed graph.
	p, err := PlanFromSchedule(g, "none", order)
	if err != nil {
		return nil
	}
	return p
}
