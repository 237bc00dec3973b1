package report

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/remat-dev/remat/sim"
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

// Progress is told when each strategy starts (a progress bar).
type Progress func(done, total int, strategy string)

// Compare runs the strategies (nil: all) side by side. A strategy that fails
// (infeasible budget, out of memory, thrashing, an error) becomes a row with
// that status and the reason; it does not abort the report. The first row is
// always the baseline "none" (added if not asked for), against which changes
// and overheads are computed.
func Compare(ctx context.Context, env *Env, strategies []Strategy, progress Progress) (*Report, error) {
	if len(strategies) == 0 {
		strategies = Strategies()
	}
	if strategies[0].Name != "none" {
		base := Strategies()[0]
		var rest []Strategy
		for _, s := range strategies {
			if s.Name != "none" {
				rest = append(rest, s)
			}
		}
		strategies = append([]Strategy{base}, rest...)
	}
	g := env.Graph
	rep := &Report{Version: SchemaVersion, Kind: "report", Graph: g.Name, Ops: len(g.Ops), Tensors: len(g.Tensors),
		Device: env.Device.Name, Allocator: env.Allocator, Capacity: env.Capacity(), Budget: env.Budget}
	for i, s := range strategies {
		if progress != nil {
			progress(i, len(strategies), s.Name)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		row := RunStrategy(ctx, env, s)
		if i == 0 && row.Result == nil {
			return nil, fmt.Errorf("baseline: %s", row.Reason)
		}
		rep.Rows = append(rep.Rows, row)
	}
	if progress != nil {
		progress(len(strategies), len(strategies), "")
	}
	base := rep.Rows[0]
	for i := range rep.Rows {
		r := &rep.Rows[i]
		if r.Result == nil {
			continue
		}
		if base.PeakAllocated > 0 {
			r.Change = float64(r.PeakAllocated)/float64(base.PeakAllocated) - 1
		}
		if base.TimeNs > 0 {
			r.Overhead = float64(r.TimeNs) / float64(base.TimeNs)
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

// RunStrategy runs one strategy and measures its plan in the simulator. A
// plan that runs out of memory on the device is measured again on an
// unlimited device so the row still shows how much it would need.
//
// Strategies that plan for a limit in allocated bytes (PlansForLimit) are
// replanned, up to maxReplans times, with the limit lowered by 10% each time,
// while the allocator's rounding and fragmentation make their plan reserve
// more than the device has. (The overshoot itself is measured on an
// unlimited device, where the caching model never releases its cache, so it
// overstates what the plan needs and is not used as the step.)
func RunStrategy(ctx context.Context, env *Env, s Strategy) Row {
	row := runOnce(ctx, env, s)
	capacity := env.Capacity()
	if !s.PlansForLimit || capacity <= 0 || row.Result == nil || row.FitsDevice {
		return row
	}
	e := *env
	limit := e.Limit()
	for i := 0; i < maxReplans && row.Result != nil && !row.FitsDevice; i++ {
		if row.PeakReserved <= capacity {
			break
		}
		limit -= limit / 10
		e.planningLimit = limit
		next := runOnce(ctx, &e, s)
		next.PlanningMs += row.PlanningMs
		if next.Result == nil {
			break
		}
		row = next
	}
	return row
}

// maxReplans bounds the replanning of limit-planning strategies.
const maxReplans = 6

func runOnce(ctx context.Context, env *Env, s Strategy) Row {
	row := Row{Strategy: s.Name}
	start := time.Now()
	out, err := s.Run(ctx, env)
	row.PlanningMs = float64(time.Since(start).Microseconds()) / 1000
	if err != nil {
		row.Status, row.Reason = StatusError, err.Error()
		return row
	}
	row.Detail, row.Reason, row.Plan = out.Detail, out.Reason, out.Plan
	if out.Status != "" && out.Status != StatusOK && out.Result != nil {
		// A dynamic run that stopped part-way: its numbers describe an
		// unfinished step, so the row shows only the status and reason.
		row.Status = out.Status
		return row
	}
	res := out.Result
	oom := false
	if res == nil && out.Plan != nil {
		res, oom, err = measure(env, out.Plan)
		if err != nil {
			row.Status, row.Reason = StatusError, err.Error()
			return row
		}
	}
	row.Status = out.Status
	if res == nil {
		if row.Status == "" {
			row.Status = StatusError
		}
		return row
	}
	row.Result = res
	row.PeakAllocated, row.PeakReserved, row.TimeNs = res.PeakAllocated, res.PeakReserved, res.TotalNs
	row.Recomputes, row.Evictions, row.Swaps = res.Recomputes, res.Evictions, res.SwapOuts+res.SwapIns
	capacity := env.Capacity()
	row.FitsDevice = !oom && (capacity <= 0 || res.PeakReserved <= capacity)
	row.FitsBudget = row.FitsDevice && (env.Budget <= 0 || res.PeakAllocated <= env.Budget)
	if row.Status == "" {
		switch {
		case !row.FitsDevice:
			row.Status = StatusOOM
			if row.Reason == "" {
				row.Reason = fmt.Sprintf("needs %d bytes reserved, device has %d", res.PeakReserved, capacity)
			}
		case !row.FitsBudget:
			row.Status = StatusInfeasible
			if row.Reason == "" {
				row.Reason = fmt.Sprintf("peak %d bytes exceeds the budget of %d", res.PeakAllocated, env.Budget)
			}
		default:
			row.Status = StatusOK
		}
	}
	return row
}

// measure replays a plan on the device; on running out of memory it replays
// again without a capacity limit and reports oom.
func measure(env *Env, p *sim.Plan) (*sim.Result, bool, error) {
	so, err := env.SimOptions()
	if err != nil {
		return nil, false, err
	}
	so.Timeline = true
	res, err := sim.Simulate(env.Graph, p, so)
	if err == nil {
		return res, false, nil
	}
	if !errors.Is(err, sim.ErrOutOfMemory) {
		return nil, false, err
	}
	so, _ = env.SimOptions()
	so.Timeline = true
	so.Capacity = -1
	switch a := so.Allocator.(type) {
	case *sim.Caching:
		so.Allocator = sim.NewCaching(0)
	case *sim.Static:
		o := a.Options()
		o.Capacity = 0
		so.Allocator = sim.NewStatic(o)
	default:
		so.Allocator = nil
	}
	res, err = sim.Simulate(env.Graph, p, so)
	if err != nil {
		return nil, false, err
	}
	return res, true, nil
}
