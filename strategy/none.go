package strategy

import (
	"context"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

var none = Strategy{
	Name:    Baseline,
	Doc:     "no recomputation: free each tensor after its last use (PyTorch's default)",
	Planner: planNone,
}

func planNone(_ context.Context, g *graph.Graph, _ Options) (Result, error) {
	return Result{Plan: sim.DefaultPlan(g)}, nil
}
