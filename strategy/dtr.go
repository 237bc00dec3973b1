package strategy

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/remat-dev/remat/dtr"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/sim/alloc"
)

var dtrRuntime = Strategy{
	Name: "dtr",
	Doc:  "DTR runtime eviction within the budget (heuristic dtr.heuristic, by default lookahead: the op sequence is known)",
	Reads: []string{"dtr.swap", "dtr.drop", "dtr.auto_drop", "dtr.eviction_threshold",
		"dtr.evictee_minimum_size", "dtr.heuristic", "dtr.budget_scope", "dtr.remat_limit"},
	Planner: planDTR,
}

func planDTR(ctx context.Context, g *graph.Graph, o Options) (Result, error) {
	m, cfg, verdict, err := dtrSetup(g, o)
	if m == nil {
		return verdict, err
	}
	// With DTRPlan each run is recorded as a plan of compute, free and swap
	// steps (dtr.PlanOnMachine); the plan returned is the last run's.
	var plan *sim.Plan
	run := func() (*sim.Result, dtr.Stats, error) {
		if !o.DTRPlan {
			return dtr.RunOnMachine(ctx, m, cfg)
		}
		p, res, st, err := dtr.PlanOnMachine(ctx, m, cfg)
		plan = p
		return res, st, err
	}
	res, st, err := run()
	// The runtime counts the allocator's blocks as the allocator holds
	// them (Granule, with the remainders a block keeps) and each op's
	// workspace. Should the allocator still hold more at some op (under a
	// capacity that makes it release cached segments between an op's
	// allocations), run again with the runtime's budget lowered, by 0.5% of
	// the budget and then twice as much each time. A budget of the saved
	// activations alone (dtr.budget_scope saved) is not a bound on the peak.
	want, step := cfg.Budget, cfg.Budget/200
	for i := 0; i < 5 && err == nil && want > 0 && !cfg.SavedOnly && res.PeakAllocated > want; i++ {
		cfg.Budget -= max(step, res.PeakAllocated-want)
		step *= 2
		if err = m.Reset(); err != nil {
			return Result{}, err
		}
		res, st, err = run()
	}
	stats := Stats{Detail: fmt.Sprintf("%d evictions, %d remats", st.Evictions, st.Remats), Evaluations: int(st.HeuristicEvals)}
	if cfg.SavedOnly {
		stats.Detail += fmt.Sprintf(", saved activations peak %d bytes", st.PeakBudgeted)
	}
	out := Result{Sim: res, Stats: stats, SavedBudget: cfg.SavedOnly, SavedPeak: st.PeakBudgeted, SavedOver: st.OverBudget}
	switch {
	case errors.Is(err, dtr.ErrThrashing):
		out.Status, out.Reason = StatusThrash, fmt.Sprintf("recomputation passed dtr.remat_limit (%g x the step's compute)", o.DTRRematLimit)+smallTensorsNote(g, cfg.EvicteeMinSize)
		return out, nil
	case errors.Is(err, sim.ErrOutOfMemory):
		out.Status, out.Reason = StatusInfeasible, err.Error()+smallTensorsNote(g, cfg.EvicteeMinSize)
		return out, nil
	case err != nil:
		return Result{Stats: stats}, err
	}
	out.Plan = plan
	return out, nil
}

// smallTensorsNote is what a dtr run that thrashed or ran out of memory
// adds to its reason when tensors the step makes are below the evictee
// minimum size min: the runtime takes them only when no candidate of that
// size is left, the largest first whatever the heuristic, so a step whose
// activations are mostly small (an LSTM cell's at a small batch) thrashes
// at budgets a heuristic choice among them fits. Empty when none is.
func smallTensorsNote(g *graph.Graph, min int64) string {
	if min <= 0 {
		return ""
	}
	var n, all int
	var small, total int64
	for i := range g.Tensors {
		t := &g.Tensors[i]
		b := t.StorageBytes()
		if t.Producer == graph.NoOp || b <= 0 {
			continue
		}
		all++
		total += b
		if b < min {
			n++
			small += b
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d of the %d tensors the step makes (%.3g%% of their bytes) are under dtr.evictee_minimum_size (%d bytes), and the runtime evicts them only when no larger candidate is left, the largest first, whatever the heuristic (dtr.evictee_minimum_size 0 makes every tensor a candidate)",
		n, all, 100*float64(small)/float64(total), min)
}

// dtrSetup returns the Machine and the runtime configuration strategy dtr
// runs g with under o; without a Machine, a verdict (a Result with a
// status) when there is nothing to run, or an error.
func dtrSetup(g *graph.Graph, o Options) (*sim.Machine, dtr.Config, Result, error) {
	so, err := o.SimOptions()
	if err != nil {
		return nil, dtr.Config{}, Result{}, err
	}
	cfg := o.DTR
	cfg.Budget = o.Limit()
	// The op sequence is known, so a storage an evicted dependent still
	// needs stays an eviction candidate rather than being freed unseen
	// (dtr.Config.KeepForRemat; it applies to the next-use heuristics).
	cfg.KeepForRemat = true
	if gr, ok := so.Allocator.(alloc.Granular); ok && !cfg.SavedOnly {
		// count each storage as the allocator's rounded block, so that the
		// budget bounds its allocated bytes (a budget of the saved
		// activations alone counts tensor bytes, as remat_torch.dtr does)
		cfg.Granule = gr.Granule()
	}
	if cfg.Budget <= 0 && cfg.Threshold <= 0 {
		return nil, cfg, Result{Status: StatusInfeasible, Reason: "needs a budget (--budget), a device with a capacity or MEGENGINE_DTR_EVICTION_THRESHOLD"}, nil
	}
	so.Capacity = -1
	so.Timeline = o.Timeline
	m, err := sim.NewMachine(g, so)
	if errors.Is(err, sim.ErrOutOfMemory) {
		// the parameters and inputs alone do not fit the device: nothing
		// to evict, a verdict rather than an error
		return nil, cfg, Result{Status: StatusOOM, Reason: "the tensors resident from the start do not fit: " + err.Error()}, nil
	}
	if err != nil {
		return nil, cfg, Result{}, err
	}
	if o.DTRRematLimit > 0 {
		var base int64 // the step's compute without recomputation
		for i := range g.Ops {
			base += m.OpTime(graph.OpID(i))
		}
		cfg.RematLimit = max(int64(min(float64(base)*o.DTRRematLimit, math.MaxInt64/2)), 1)
	}
	return m, cfg, Result{}, nil
}
