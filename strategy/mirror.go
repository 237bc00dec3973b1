package strategy

import (
	"context"
	"fmt"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/mirror"
)

var mirrorClassic = Strategy{
	Name:    "mirror",
	Doc:     "MXNet 1.x mirror pass (MXNET_BACKWARD_DO_MIRROR=1, BatchNorm mirrored as in 1.7+)",
	Reads:   []string{"mirror.enabled"},
	Planner: planMirror,
}

var mirrorCost = Strategy{
	Name:    "mirror-cost",
	Doc:     "cost-aware mirror judged by the simulator: never raises the peak",
	Planner: planMirrorCost,
}

func planMirror(_ context.Context, g *graph.Graph, o Options) (Result, error) {
	res, err := mirror.Classic(g, mirror.Predicate{DoMirror: o.Mirror.DoMirror, Variant: o.Mirror.Variant})
	if err != nil {
		return Result{}, err
	}
	return Result{Plan: res.Plan, Stats: Stats{Detail: fmt.Sprintf("%d ops mirrored", res.Mirrored)}}, nil
}

func planMirrorCost(ctx context.Context, g *graph.Graph, o Options) (Result, error) {
	so, err := o.judgeOptions()
	if err != nil {
		return Result{}, err
	}
	res, err := mirror.CostAware(ctx, g, mirror.CostOptions{Variant: o.Mirror.Variant, Sim: so})
	if res == nil {
		return Result{}, err
	}
	return Result{Plan: res.Plan, Stats: Stats{Detail: fmt.Sprintf("%d ops mirrored", res.Mirrored)}}, err
}
