package report

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/dtr"
	"github.com/remat-dev/remat/mirror"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/sublinear"
)

// Status of one strategy's run.
const (
	StatusOK         = "ok"
	StatusOOM        = "oom"        // the plan does not fit the device
	StatusInfeasible = "infeasible" // no plan meets the budget
	StatusThrash     = "thrash"     // DTR exceeded its rematerialization limit
	StatusError      = "error"
)

// Outcome is what a strategy returns: a static plan (replayed by the
// runner), or a dynamic result (DTR) with the plan it amounts to.
type Outcome struct {
	Plan   *sim.Plan
	Result *sim.Result // set by dynamic strategies; nil: replay Plan
	Status string      // "" means decide from the replay
	Reason string
	// Detail is a short strategy-specific note (mirrored ops, split points).
	Detail string
}

// Strategy is one way of running a training step.
type Strategy struct {
	Name        string
	Description string
	// Run plans (or runs) the step in env.
	Run func(ctx context.Context, env *Env) (*Outcome, error)
	// PlansForLimit marks static strategies that plan for env.Limit() in
	// allocated bytes; the runner lowers their planning limit when the
	// allocator's overhead (rounding, fragmentation) makes the plan
	// overshoot the device.
	PlansForLimit bool
}

// Strategies returns every strategy, in report order.
func Strategies() []Strategy {
	return []Strategy{
		{"none", "no recomputation: free each tensor after its last use (PyTorch's default)", runNone, false},
		{"mirror", "MXNet 1.x mirror pass (MXNET_BACKWARD_DO_MIRROR=1, BatchNorm mirrored as in 1.7+)", runMirror, false},
		{"mirror-cost", "cost-aware mirror judged by the simulator: never raises the peak", runMirrorCost, false},
		{"sublinear", "MegEngine sublinear search, threshold presets only (MegEngine defaults)", runSublinear(false), false},
		{"sublinear-ga", "MegEngine sublinear search with the genetic algorithm", runSublinear(true), false},
		{"sublinear-budget", "sublinear search minimizing recompute time within the budget", runSublinearBudget, true},
		{"chen-sqrt", "Chen et al. 2016: keep every sqrt(n)-th stage output", runChenSqrt, false},
		{"chen-greedy", "Chen et al. 2016: greedy budget planner with the sqrt(x*y) search", runChenGreedy, false},
		{"optimal-chain", "Rotor-style optimal checkpointing over the graph's chain of stages", runOptimalChain, true},
		{"dtr", "DTR runtime eviction within the budget (lookahead heuristic: the op sequence is known)", runDTR, false},
	}
}

// StrategyNames lists the strategy names in report order.
func StrategyNames() []string {
	var n []string
	for _, s := range Strategies() {
		n = append(n, s.Name)
	}
	return n
}

// LookupStrategies resolves names (nil or empty: all).
func LookupStrategies(names []string) ([]Strategy, error) {
	all := Strategies()
	if len(names) == 0 {
		return all, nil
	}
	var out []Strategy
	for _, n := range names {
		found := false
		for _, s := range all {
			if s.Name == n {
				out = append(out, s)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("strategy %q: expected one of %s", n, strings.Join(StrategyNames(), ", "))
		}
	}
	return out, nil
}

func runNone(_ context.Context, env *Env) (*Outcome, error) {
	return &Outcome{Plan: sim.DefaultPlan(env.Graph)}, nil
}

// mirrorSwitch is MXNET_BACKWARD_DO_MIRROR for the mirror strategy: an
// explicit value (environment, option or flag) is the global switch, so
// MXNET_BACKWARD_DO_MIRROR=0 leaves only ops with force_mirroring=1 mirrored,
// as in MXNet; left at its default, choosing the strategy turns it on.
func (e *Env) mirrorSwitch() bool {
	v := e.Settings.Value(config.BackwardDoMirror)
	if v.Source.Kind == config.SourceDefault {
		return true
	}
	return e.Settings.Bool(config.BackwardDoMirror)
}

func runMirror(_ context.Context, env *Env) (*Outcome, error) {
	res, err := mirror.Classic(env.Graph, mirror.Predicate{DoMirror: env.mirrorSwitch(), Variant: mirror.MXNet17})
	if err != nil {
		return nil, err
	}
	return &Outcome{Plan: res.Plan, Detail: fmt.Sprintf("%d ops mirrored", res.Mirrored)}, nil
}

func runMirrorCost(ctx context.Context, env *Env) (*Outcome, error) {
	so, err := env.SimOptions()
	if err != nil {
		return nil, err
	}
	so.Capacity = -1 // judge peaks, not fits
	so.Allocator = nil
	res, err := mirror.CostAware(ctx, env.Graph, mirror.CostOptions{Variant: mirror.MXNet17, Sim: so})
	if err != nil {
		return nil, err
	}
	return &Outcome{Plan: res.Plan, Detail: fmt.Sprintf("%d ops mirrored", res.Mirrored)}, nil
}

// planLimit is the limit static planners aim at: Limit, or the lowered
// limit the runner set after an overshoot.
func (e *Env) planLimit() int64 {
	if e.planningLimit > 0 {
		return e.planningLimit
	}
	return e.Limit()
}

func (e *Env) searchOptions() (sublinear.SearchOptions, error) {
	s := e.Settings
	o := sublinear.DefaultSearchOptions()
	o.ThreshNrTry = s.Int(config.SublinearThreshNrTry)
	o.GeneticIters = s.Int(config.SublinearGeneticNrIter)
	o.PoolSize = s.Int(config.SublinearGeneticPoolSize)
	o.Workers = s.Int(config.SublinearWorkers)
	o.LowerBound = s.Size(config.SublinearLowerBound)
	o.Seed = e.Seed
	so, err := e.SimOptions()
	if err != nil {
		return o, err
	}
	so.Allocator = nil
	so.Capacity = -1
	o.Sim = so
	return o, nil
}

func runSublinear(ga bool) func(ctx context.Context, env *Env) (*Outcome, error) {
	return func(ctx context.Context, env *Env) (*Outcome, error) {
		o, err := env.searchOptions()
		if err != nil {
			return nil, err
		}
		var p *sim.Plan
		var rep sublinear.SearchReport
		if ga {
			if o.GeneticIters == 0 {
				o.GeneticIters = 20 // MegEngine's documented example value (genetic_nr_iter=20)
			}
			p, rep, err = sublinear.SublinearGA(ctx, env.Graph, o)
		} else {
			p, rep, err = sublinear.Sublinear(ctx, env.Graph, o)
		}
		if err != nil {
			return nil, err
		}
		return &Outcome{Plan: p, Detail: fmt.Sprintf("%d blocks", len(rep.SplitPoints))}, nil
	}
}

func runSublinearBudget(ctx context.Context, env *Env) (*Outcome, error) {
	limit := env.planLimit()
	if limit <= 0 {
		return &Outcome{Status: StatusInfeasible, Reason: "needs a budget (--budget) or a device with a capacity"}, nil
	}
	o, err := env.searchOptions()
	if err != nil {
		return nil, err
	}
	if o.GeneticIters == 0 {
		o.GeneticIters = 20
	}
	p, rep, err := sublinear.SublinearBudget(ctx, env.Graph, limit, o)
	var inf *sublinear.InfeasibleBudgetError
	if errors.As(err, &inf) {
		return &Outcome{Plan: p, Status: StatusInfeasible, Reason: inf.Error()}, nil
	}
	if err != nil {
		return nil, err
	}
	return &Outcome{Plan: p, Detail: fmt.Sprintf("%d blocks", len(rep.SplitPoints))}, nil
}

func (e *Env) optimalOptions() (sublinear.OptimalOptions, error) {
	so, err := e.SimOptions()
	if err != nil {
		return sublinear.OptimalOptions{}, err
	}
	so.Allocator = nil
	so.Capacity = -1
	return sublinear.OptimalOptions{Sim: so}, nil
}

func runOptimalChain(ctx context.Context, env *Env) (*Outcome, error) {
	limit := env.planLimit()
	if limit <= 0 {
		return &Outcome{Status: StatusInfeasible, Reason: "needs a budget (--budget) or a device with a capacity"}, nil
	}
	o, err := env.optimalOptions()
	if err != nil {
		return nil, err
	}
	p, rep, err := sublinear.OptimalChain(ctx, env.Graph, limit, o)
	if err != nil {
		if p == nil {
			return &Outcome{Status: StatusInfeasible, Reason: err.Error()}, nil
		}
		return nil, err
	}
	return &Outcome{Plan: p, Detail: fmt.Sprintf("%d stages", rep.Stages)}, nil
}

func runDTR(ctx context.Context, env *Env) (*Outcome, error) {
	so, err := env.SimOptions()
	if err != nil {
		return nil, err
	}
	cfg := dtr.DefaultConfig()
	// The graph's op sequence is known, so the next-use distance is available:
	// lookahead was the best or within 1% of the best on resnet50, gpt and
	// vgg19 at half their peak (dtr's TestGraphHeuristics).
	cfg.Heuristic = dtr.Lookahead
	s := env.Settings
	if v := s.Size(config.DTREvicteeMinimumSize); v >= 0 {
		cfg.EvicteeMinSize = v
	}
	cfg.Swap = s.Bool(config.DTREnableSwap)
	// Choosing the strategy enables dropping; an explicit
	// MEGENGINE_ENABLE_DROP or MEGENGINE_DTR_AUTO_DROP (environment or flag)
	// is honoured, so DROP=0 with SWAP=1 gives a swap-only run.
	if v := s.Value(config.DTREnableDrop); v.Source.Kind != config.SourceDefault {
		cfg.Drop = s.Bool(config.DTREnableDrop)
	}
	if v := s.Value(config.DTRAutoDrop); v.Source.Kind != config.SourceDefault {
		cfg.AutoDrop = s.Bool(config.DTRAutoDrop)
	}
	cfg.Threshold = s.Size(config.DTREvictionThreshold)
	cfg.Budget = env.Limit()
	if cfg.Budget <= 0 && cfg.Threshold <= 0 {
		return &Outcome{Status: StatusInfeasible, Reason: "needs a budget (--budget), a device with a capacity or MEGENGINE_DTR_EVICTION_THRESHOLD"}, nil
	}
	so.Capacity = -1
	so.Timeline = true
	m, err := sim.NewMachine(env.Graph, so)
	if err != nil {
		return nil, err
	}
	res, st, err := dtr.RunOnMachine(ctx, m, cfg)
	// The runtime counts tensor bytes; the allocator counts its rounded
	// blocks, which can sum to more. When that difference breaks the budget,
	// run again with the runtime's budget lowered, by 0.5% of the budget and
	// then twice as much each time.
	want, step := cfg.Budget, cfg.Budget/200
	for i := 0; i < 5 && err == nil && want > 0 && res.PeakAllocated > want; i++ {
		cfg.Budget -= max(step, res.PeakAllocated-want)
		step *= 2
		if err = m.Reset(); err != nil {
			return nil, err
		}
		res, st, err = dtr.RunOnMachine(ctx, m, cfg)
	}
	switch {
	case errors.Is(err, dtr.ErrThrashing):
		return &Outcome{Result: res, Status: StatusThrash, Reason: "rematerialization exceeded the limit"}, nil
	case errors.Is(err, dtr.ErrOutOfMemory), errors.Is(err, sim.ErrOutOfMemory):
		return &Outcome{Result: res, Status: StatusInfeasible, Reason: err.Error()}, nil
	case err != nil:
		return nil, err
	}
	return &Outcome{Result: res, Detail: fmt.Sprintf("%d evictions, %d remats", st.Evictions, st.Remats)}, nil
}

func (e *Env) chenOptions() (sublinear.ChenOptions, error) {
	o, err := e.optimalOptions()
	if err != nil {
		return sublinear.ChenOptions{}, err
	}
	return sublinear.ChenOptions{Sim: o.Sim}, nil
}

func runChenSqrt(ctx context.Context, env *Env) (*Outcome, error) {
	o, err := env.chenOptions()
	if err != nil {
		return nil, err
	}
	p, rep, err := sublinear.ChenSqrt(ctx, env.Graph, o)
	if err != nil {
		return nil, err
	}
	return &Outcome{Plan: p, Detail: fmt.Sprintf("%d of %d stages kept", len(rep.KeptStages), rep.Stages)}, nil
}

func runChenGreedy(ctx context.Context, env *Env) (*Outcome, error) {
	o, err := env.chenOptions()
	if err != nil {
		return nil, err
	}
	p, rep, err := sublinear.ChenGreedyPlan(ctx, env.Graph, o)
	if err != nil {
		return nil, err
	}
	return &Outcome{Plan: p, Detail: fmt.Sprintf("%d of %d stages kept", len(rep.KeptStages), rep.Stages)}, nil
}
