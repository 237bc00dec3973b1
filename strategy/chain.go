package strategy

import (
	"context"
	"fmt"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/chain"
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
	limit := o.planningLimit()
	if limit <= 0 {
		return Result{Status: StatusInfeasible, Reason: "needs a budget (--budget) or a device with a capacity"}, nil
	}
	so, err := o.judgeOptions()
	if err != nil {
		return Result{}, err
	}
	p, rep, err := chain.OptimalChain(ctx, g, limit, chain.OptimalOptions{Sim: so})
	if err != nil && p == nil {
		return Result{Status: StatusInfeasible, Reason: err.Error()}, nil
	}
	return Result{Plan: p, Stats: Stats{Detail: fmt.Sprintf("%d stages", rep.Stages)}}, err
}
