package strategy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/remat-dev/remat/chain"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

var chenSqrt = Strategy{
	Name:    "chen-sqrt",
	Doc:     "Chen et al. 2016: keep every sqrt(n)-th stage output",
	Planner: planChenSqrt,
}

var chenGreedy = Strategy{
	Name:    "chen-greedy",
	Doc:     "Chen et al. 2016: greedy budget planner with the sqrt(x*y) search",
	Planner: planChenGreedy,
}

var optimalChain = Strategy{
	Name:          "optimal-chain",
	Doc:           "Rotor-style optimal checkpointing over the graph's chain of stages",
	PlansForLimit: true,
	Planner:       planOptimalChain,
}

func planChenSqrt(ctx context.Context, g *graph.Graph, o Options) (Result, error) {
	so, err := o.judgeOptions()
	if err != nil {
		return Result{}, err
	}
	p, rep, err := chain.ChenSqrt(ctx, g, chain.ChenOptions{Sim: so})
	return Result{Plan: p, Stats: Stats{Detail: fmt.Sprintf("%d of %d stages kept", len(rep.KeptStages), rep.Stages)}}, err
}

func planChenGreedy(ctx context.Context, g *graph.Graph, o Options) (Result, error) {
	so, err := o.judgeOptions()
	if err != nil {
		return Result{}, err
	}
	p, rep, err := chain.ChenGreedyPlan(ctx, g, chain.ChenOptions{Sim: so})
	return Result{Plan: p, Stats: Stats{Detail: fmt.Sprintf("%d of %d stages kept", len(rep.KeptStages), rep.Stages)}}, err
}

func planOptimalChain(ctx context.Context, g *graph.Graph, o Options) (Result, error) {
	if o.Slots < 0 || o.Slots > chain.OptimalMaxSlots {
		return Result{}, fmt.Errorf("optimal-chain: slots = %d, expected 0..%d (0: %d)", o.Slots, chain.OptimalMaxSlots, chain.OptimalDefaultSlots)
	}
	limit := o.planningLimit()
	if limit <= 0 {
		return Result{Status: StatusInfeasible, Reason: "needs a budget (--budget) or a device with a capacity"}, nil
	}
	so, err := o.judgeOptions()
	if err != nil {
		return Result{}, err
	}
	p, rep, err := chain.OptimalChain(ctx, g, limit, chain.OptimalOptions{Sim: so, Slots: o.Slots, Progress: o.Progress})
	st := Stats{Detail: optimalDetail(rep), Evaluations: rep.Tried}
	if err != nil && p != nil && errors.Is(err, chain.ErrChainInfeasible) {
		// The least-memory plan: measured like any other, it shows how far
		// the peak goes down and that it misses the budget.
		return Result{Plan: p, Stats: st, Status: StatusInfeasible, Reason: strings.TrimPrefix(err.Error(), "optimal-chain: ")}, nil
	}
	if err != nil && p == nil && !errors.Is(err, sim.ErrCanceled) {
		return Result{Status: StatusInfeasible, Reason: err.Error(), Stats: st}, nil
	}
	return Result{Plan: p, Stats: st}, err
}

// optimalDetail says how many stages the DP solved and, when it grouped
// them, what grouping may cost.
func optimalDetail(rep chain.ChainReport) string {
	if rep.Groups == 0 || rep.Groups == rep.Stages {
		return fmt.Sprintf("%d stages, exact", rep.Stages)
	}
	gap := 0.0
	if rep.BaseTime > 0 {
		gap = 100 * float64(rep.GroupGapBound) / float64(rep.BaseTime)
	}
	return fmt.Sprintf("%d stages grouped into %d (--slots %d), grouping costs at most %.1f%% of the no-recompute step time (a loose bound: all the recompute time)", rep.Stages, rep.Groups, rep.Slots, gap)
}
