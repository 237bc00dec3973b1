package strategy

import (
	"context"
	"errors"
	"fmt"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/sublinear"
)

var sublinearReads = []string{"sublinear.thresh_nr_try", "sublinear.genetic_nr_iter", "sublinear.genetic_pool_size",
	"sublinear.lower_bound", "sublinear.workers", "recompute.forward_only", "dtr.drop", "dtr.auto_drop"}

var sublinearThresholds = Strategy{
	Name:        "sublinear",
	Doc:         "MegEngine sublinear search, threshold presets only (MegEngine defaults)",
	Reads:       sublinearReads,
	ExcludesDTR: true,
	Planner:     planSublinear(false),
}

var sublinearGA = Strategy{
	Name:        "sublinear-ga",
	Doc:         "MegEngine sublinear search with the genetic algorithm",
	Reads:       sublinearReads,
	ExcludesDTR: true,
	Planner:     planSublinear(true),
}

var sublinearBudget = Strategy{
	Name:          "sublinear-budget",
	Doc:           "sublinear search minimizing recompute time within the budget",
	Reads:         sublinearReads,
	PlansForLimit: true,
	ExcludesDTR:   true,
	Planner:       planSublinearBudget,
}

// errDTRConflict is returned by the sublinear strategies with DTR enabled.
var errDTRConflict = config.CheckExclusive(true, true)

// searchOptions are the sublinear search options of one run.
func (o Options) searchOptions(ga bool) (sublinear.SearchOptions, error) {
	so := o.Search
	so.Seed = o.Seed
	if ga && so.GeneticIters == 0 {
		so.GeneticIters = DefaultGeneticIters
	}
	sim, err := o.judgeOptions()
	if err != nil {
		return so, err
	}
	so.Sim = sim
	return so, nil
}

func searchStats(rep sublinear.SearchReport) Stats {
	return Stats{Detail: fmt.Sprintf("%d blocks", len(rep.SplitPoints)), Evaluations: rep.Evaluations}
}

func planSublinear(ga bool) Planner {
	return func(ctx context.Context, g *graph.Graph, o Options) (Result, error) {
		so, err := o.searchOptions(ga)
		if err != nil {
			return Result{}, err
		}
		var p *sim.Plan
		var rep sublinear.SearchReport
		if ga {
			p, rep, err = sublinear.Genetic(ctx, g, so)
		} else {
			p, rep, err = sublinear.Thresholds(ctx, g, so)
		}
		return Result{Plan: p, Stats: searchStats(rep)}, err
	}
}

func planSublinearBudget(ctx context.Context, g *graph.Graph, o Options) (Result, error) {
	limit := o.planningLimit()
	if limit <= 0 {
		return Result{Status: StatusInfeasible, Reason: "needs a budget (--budget) or a device with a capacity"}, nil
	}
	so, err := o.searchOptions(true)
	if err != nil {
		return Result{}, err
	}
	p, rep, err := sublinear.WithinBudget(ctx, g, limit, so)
	var inf *sublinear.InfeasibleBudgetError
	if errors.As(err, &inf) {
		return Result{Plan: p, Status: StatusInfeasible, Reason: inf.Error(), Stats: searchStats(rep)}, nil
	}
	return Result{Plan: p, Stats: searchStats(rep)}, err
}
