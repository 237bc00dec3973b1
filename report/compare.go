package report

import (
	"context"
	"errors"
	"fmt"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/strategy"
)

// Status of one strategy's run (the values of strategy.Status).
const (
	StatusOK         = string(strategy.StatusOK)
	StatusOOM        = string(strategy.StatusOOM)
	StatusInfeasible = string(strategy.StatusInfeasible)
	StatusThrash     = string(strategy.StatusThrash)
	StatusError      = string(strategy.StatusError)
)

// SchemaVersion is the version of the JSON documents the report commands
// write (docs/cli.md). It changes only when a field changes meaning or is
// removed.
const SchemaVersion = 1

// Row is one strategy's line of a report.
type Row struct {
	Strategy      string  `json:"strategy"`
	Status        string  `json:"status"`
	Reason        string  `json:"reason,omitempty"`
	Detail        string  `json:"detail,omitempty"`
	PeakAllocated int64   `json:"peak_allocated"`
	PeakReserved  int64   `json:"peak_reserved"`
	Change        float64 `json:"change"` // relative change of the allocated peak vs the baseline
	TimeNs        int64   `json:"time_ns"`
	Overhead      float64 `json:"overhead"` // step time / baseline step time
	Recomputes    int     `json:"recomputes"`
	Evictions     int     `json:"evictions"`
	Swaps         int     `json:"swaps"`
	FitsDevice    bool    `json:"fits_device"`
	FitsBudget    bool    `json:"fits_budget"`
	// SavedPeak (dtr with dtr.budget_scope saved) is the peak of the saved
	// activations, the bytes the budget bounds.
	SavedPeak int64 `json:"saved_peak,omitempty"`
	// PlanningMs is the wall-clock time the strategy took to plan; it is
	// left out of JSON and golden files because it is not deterministic.
	PlanningMs float64 `json:"-"`

	Result *sim.Result `json:"-"`
	Plan   *sim.Plan   `json:"-"`
}

// Report compares strategies on one graph, device and allocator.
type Report struct {
	Version   int    `json:"version"`
	Kind      string `json:"kind"`
	Graph     string `json:"graph"`
	Ops       int    `json:"ops"`
	Tensors   int    `json:"tensors"`
	Device    string `json:"device"`
	Allocator string `json:"allocator"`
	Capacity  int64  `json:"capacity"`
	Budget    int64  `json:"budget"`
	Rows      []Row  `json:"rows"`
	// Best is the fastest strategy that fits (the budget if one is set,
	// else the device), or the one with the smallest peak if none fits.
	Best string `json:"best"`
	// TopTensors are the ten blocks that dominate the best strategy's peak.
	TopTensors []sim.LiveTensor `json:"top_tensors"`
}

// Compare runs the strategies (nil: all) side by side on g. A strategy that
// finds no plan (infeasible budget, out of memory, thrashing, an error)
// becomes a row with that status and the reason; it does not abort the
// report. The baseline (strategy.Baseline) is always run first (added if not
// asked for); changes and overheads are computed against it. Cancelling ctx
// returns an error matching sim.ErrCanceled and no report.
//
// After the baseline the strategies run up to one per CPU at once, fewer on
// large graphs (as SweepBudgets' cells); the report is the same whatever
// the number, but for the rows' planning times. g must not be modified
// meanwhile; it is validated first when runs share it.
func Compare(ctx context.Context, g *graph.Graph, o strategy.Options, strategies []strategy.Strategy, progress sim.Progress) (*Report, error) {
	return compare(ctx, g, o, strategies, progress, 0)
}

// compare is Compare with workers strategies at once after the baseline
// (0: parallelRuns).
func compare(ctx context.Context, g *graph.Graph, o strategy.Options, strategies []strategy.Strategy, progress sim.Progress, workers int) (*Report, error) {
	if g == nil {
		return nil, fmt.Errorf("report: graph is nil")
	}
	if len(strategies) == 0 {
		strategies = strategy.All()
	}
	base, err := strategy.Lookup(strategy.Baseline)
	if err != nil {
		return nil, err
	}
	ordered := []strategy.Strategy{base}
	for _, s := range strategies {
		if s.Name != strategy.Baseline {
			ordered = append(ordered, s)
		}
	}
	if o.Allocator == "" {
		o.Allocator = strategy.DefaultAllocator
	}
	rep := &Report{Version: SchemaVersion, Kind: "report", Graph: g.Name, Ops: len(g.Ops), Tensors: len(g.Tensors),
		Device: o.Device.Name, Allocator: o.Allocator, Capacity: o.Capacity(), Budget: o.Budget}
	rep.Rows = make([]Row, len(ordered))
	progress.Report(0, len(ordered), ordered[0].Name)
	row, err := RunStrategy(ctx, g, o, ordered[0])
	if err != nil {
		return nil, err
	}
	if row.Result == nil {
		return nil, fmt.Errorf("baseline: %s", row.Reason)
	}
	rep.Rows[0] = row
	rest := ordered[1:]
	if workers <= 0 {
		workers = parallelRuns(g, len(rest))
	}
	if err := shareGraph(g, workers); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	shifted := func(done, total int, what string) { progress.Report(done+1, total+1, what) }
	err = runCells(len(rest), workers, shifted, func(k int) string { return rest[k].Name }, func(k int) error {
		row, err := RunStrategy(ctx, g, o, rest[k])
		rep.Rows[k+1] = row
		return err
	})
	if err != nil {
		return nil, err
	}
	base0 := rep.Rows[0]
	for i := range rep.Rows {
		r := &rep.Rows[i]
		if r.Result == nil {
			continue
		}
		if base0.PeakAllocated > 0 {
			r.Change = float64(r.PeakAllocated)/float64(base0.PeakAllocated) - 1
		}
		if base0.TimeNs > 0 {
			r.Overhead = float64(r.TimeNs) / float64(base0.TimeNs)
		}
	}
	best := -1
	for i := range rep.Rows {
		r := &rep.Rows[i]
		if r.Result == nil || r.Status != StatusOK || !r.FitsBudget {
			continue
		}
		if best < 0 || r.TimeNs < rep.Rows[best].TimeNs {
			best = i
		}
	}
	if best < 0 {
		for i := range rep.Rows {
			if r := &rep.Rows[i]; r.Result != nil && (best < 0 || r.PeakAllocated < rep.Rows[best].PeakAllocated) {
				best = i
			}
		}
	}
	if best >= 0 {
		rep.Best = rep.Rows[best].Strategy
		rep.TopTensors = rep.Rows[best].Result.TopAtPeak
	}
	return rep, nil
}

// RunStrategy plans g with one strategy (strategy.Strategy.Plan) and turns
// its Result into a report row. A strategy that fails becomes a row with
// status error; the error return is for cancellation (matching
// sim.ErrCanceled), which leaves no row, and for a nil graph (wrapping
// graph.ErrInvalid): no strategy can run without one.
func RunStrategy(ctx context.Context, g *graph.Graph, o strategy.Options, s strategy.Strategy) (Row, error) {
	if g == nil {
		return Row{Strategy: s.Name}, fmt.Errorf("report: strategy %q: graph is nil: %w", s.Name, graph.ErrInvalid)
	}
	res, err := s.Plan(ctx, g, o)
	if err != nil {
		if errors.Is(err, sim.ErrCanceled) || ctx.Err() != nil {
			return Row{Strategy: s.Name}, err
		}
		return Row{Strategy: s.Name, Status: StatusError, Reason: err.Error()}, nil
	}
	return RowOf(res), nil
}

// RowOf turns a strategy's Result into a report row.
func RowOf(res strategy.Result) Row {
	row := Row{Strategy: res.Strategy, Status: string(res.Status), Reason: res.Reason, Detail: res.Stats.Detail,
		PlanningMs: float64(res.Stats.PlanningNs) / 1e6, Plan: res.Plan, FitsDevice: res.FitsDevice, FitsBudget: res.FitsBudget}
	if res.SavedBudget {
		row.SavedPeak = res.SavedPeak
	}
	if r := res.Sim; r != nil {
		row.Result = r
		row.PeakAllocated, row.PeakReserved, row.TimeNs = r.PeakAllocated, r.PeakReserved, r.TotalNs
		row.Recomputes, row.Evictions, row.Swaps = r.Recomputes, r.Evictions, r.SwapOuts+r.SwapIns
	}
	return row
}
