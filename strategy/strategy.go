package strategy

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// Planner plans (or, for a runtime strategy, runs) one training step. It
// returns a Result with Plan set for a static strategy, or with Sim (and
// the Plan it amounts to) for a dynamic one, and a Status and Reason when it
// found no plan that meets the limit. It leaves the measuring to
// Strategy.Plan.
type Planner func(ctx context.Context, g *graph.Graph, o Options) (Result, error)

// Strategy is one way of running a training step: a value in the table.
type Strategy struct {
	// Name is what users type (--strategies NAME).
	Name string
	// Doc is a one-line description.
	Doc string
	// Reads names the settings (config names) the strategy reads, for
	// documentation and for 'sim env'.
	Reads []string
	// PlansForLimit marks static strategies that plan for the budget (or
	// the device's capacity) in allocated bytes. Plan makes them again with
	// a lower limit when the allocator's rounding and fragmentation make
	// the plan overshoot the device.
	PlansForLimit bool
	// ExcludesDTR marks strategies that cannot run with DTR enabled
	// (MegEngine's sublinear search).
	ExcludesDTR bool
	// Planner makes the plan.
	Planner Planner
}

// Baseline is the name of the strategy every report compares against: no
// recomputation.
const Baseline = "none"

// All returns the strategy table in report order. The slice is a copy.
func All() []Strategy {
	out := make([]Strategy, len(table))
	copy(out, table[:])
	return out
}

// Names lists the strategy names in table order.
func Names() []string {
	out := make([]string, len(table))
	for i := range table {
		out[i] = table[i].Name
	}
	return out
}

// Lookup returns the strategy with the given name.
func Lookup(name string) (Strategy, error) {
	for i := range table {
		if table[i].Name == name {
			return table[i], nil
		}
	}
	return Strategy{}, fmt.Errorf("strategy %q: expected one of %s", name, strings.Join(Names(), ", "))
}

// Resolve turns a list of names into strategies, in the order given. An
// empty list means all of them. An empty name or a name given twice is an
// error, so that a list such as "," or "none,none" is not silently read as
// something else.
func Resolve(names []string) ([]Strategy, error) {
	if len(names) == 0 {
		return All(), nil
	}
	out := make([]Strategy, 0, len(names))
	for i, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			return nil, fmt.Errorf("strategy list: entry %d is empty: expected names from %s", i+1, strings.Join(Names(), ", "))
		}
		for _, prev := range out {
			if prev.Name == n {
				return nil, fmt.Errorf("strategy list: %q is given twice", n)
			}
		}
		s, err := Lookup(n)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// maxReplans bounds the replanning of limit-planning strategies.
const maxReplans = 6

// Plan plans g with the strategy and measures the plan in the simulator
// under o's device and allocator. A plan that runs out of memory on the
// device is measured again on an unlimited device (Result.Sim shows what it
// needs) and gets status oom. Strategies that plan for a limit are made
// again, up to six times with a lower limit, while the allocator's overhead
// (rounding, fragmentation) makes their plan allocate more than the budget
// or reserve more than the device has.
//
// A strategy that finds no plan returns a Result with a status and reason
// and a nil error; the error is for misuse (nil graph, bad options) and for
// cancellation, which returns the best result so far with an error matching
// sim.ErrCanceled.
func (s Strategy) Plan(ctx context.Context, g *graph.Graph, o Options) (Result, error) {
	res := Result{Strategy: s.Name}
	if s.Planner == nil {
		return res, fmt.Errorf("strategy %q has no planner", s.Name)
	}
	if g == nil {
		return res, fmt.Errorf("strategy %s: graph is nil", s.Name)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if err := o.validate(); err != nil {
		return res, fmt.Errorf("strategy %s: %w", s.Name, err)
	}
	if s.ExcludesDTR && o.DTREnabled {
		return res, fmt.Errorf("strategy %s: %w", s.Name, errDTRConflict)
	}
	if err := sim.Canceled(ctx, s.Name); err != nil {
		return res, err
	}
	start := time.Now()
	defer func() { res.Stats.PlanningNs += time.Since(start).Nanoseconds() }()
	res, gaveUp, err := s.once(ctx, g, o)
	if err != nil {
		return res, err
	}
	if !s.PlansForLimit {
		return res, nil
	}
	// The planners count bytes as the ideal allocator does; the chosen
	// allocator's rounding and fragmentation can make the plan overshoot
	// the budget (allocated) or the device (reserved). Plan again for a
	// limit lowered by the overshoot (at least 1% of the limit, doubling
	// each time) while it does.
	limit, step := o.Limit(), int64(0)
	for i := 0; i < maxReplans && !gaveUp; i++ {
		over := overshoot(res, o)
		if over <= 0 {
			break
		}
		step = max(2*step, over, limit/100)
		limit -= step
		if limit <= 0 {
			break
		}
		oo := o
		oo.planLimit = limit
		next, nextGaveUp, err := s.once(ctx, g, oo)
		if err != nil {
			if errors.Is(err, sim.ErrCanceled) {
				return res, err
			}
			return next, err
		}
		if next.Sim == nil || nextGaveUp {
			// No plan for the lower limit: keep the one that overshoots.
			break
		}
		next.Stats.Replans = res.Stats.Replans + 1
		next.Stats.Evaluations += res.Stats.Evaluations
		res = next
	}
	return res, nil
}

// overshoot is how many bytes a measured plan is over its budget
// (allocated) or its device (reserved), whichever is more; <= 0 when it
// fits or was not measured.
func overshoot(res Result, o Options) int64 {
	if res.Sim == nil {
		return 0
	}
	var over int64
	if o.Budget > 0 {
		over = res.Sim.PeakAllocated - o.Budget
	}
	if c := o.Capacity(); c > 0 {
		over = max(over, res.Sim.PeakReserved-c)
	}
	return over
}

// once plans and measures one time. gaveUp reports that the planner itself
// found no plan within its limit (it set a status).
func (s Strategy) once(ctx context.Context, g *graph.Graph, o Options) (res Result, gaveUp bool, err error) {
	out, err := s.Planner(ctx, g, o)
	out.Strategy = s.Name
	gaveUp = out.Status != "" && out.Status != StatusOK
	if err != nil {
		if errors.Is(err, sim.ErrCanceled) && (out.Plan != nil || out.Sim != nil) {
			// The best plan found before the cancellation: measure it.
			m, merr := measureInto(g, o, out)
			if merr != nil {
				return out, gaveUp, err
			}
			return m, gaveUp, err
		}
		return out, gaveUp, err
	}
	res, err = measureInto(g, o, out)
	return res, gaveUp, err
}

// measureInto measures out.Plan (when the planner did not simulate it) and
// sets the fits and the status.
func measureInto(g *graph.Graph, o Options, out Result) (Result, error) {
	if out.Status != "" && out.Status != StatusOK && out.Sim != nil {
		// A dynamic run that stopped part-way: its numbers describe an
		// unfinished step, so only the status and reason are kept.
		out.Sim = nil
		return out, nil
	}
	oom := false
	if out.Sim == nil && out.Plan != nil {
		res, o2, err := measure(g, o, out.Plan)
		if err != nil {
			return out, err
		}
		out.Sim, oom = res, o2
	}
	if out.Sim == nil {
		if out.Status == "" {
			out.Status = StatusError
			out.Reason = "the strategy returned no plan"
		}
		return out, nil
	}
	res := out.Sim
	capacity := o.Capacity()
	out.FitsDevice = !oom && (capacity <= 0 || res.PeakReserved <= capacity)
	peak := res.PeakAllocated
	withinBudget := peak <= o.Budget
	if out.SavedBudget {
		// the planner checked its budget of saved activations after each
		// op, as the runtime it models does, and says when it went over
		peak, withinBudget = out.SavedPeak, out.SavedOver == 0
	}
	out.FitsBudget = out.FitsDevice && (o.Budget <= 0 || withinBudget)
	if out.Status == "" {
		switch {
		case !out.FitsDevice:
			out.Status = StatusOOM
			if out.Reason == "" {
				out.Reason = fmt.Sprintf("needs %d bytes reserved, device has %d", res.PeakReserved, capacity)
			}
		case !out.FitsBudget:
			out.Status = StatusInfeasible
			if out.Reason == "" {
				out.Reason = fmt.Sprintf("peak %d bytes exceeds the budget of %d", peak, o.Budget)
				if out.SavedBudget {
					out.Reason = fmt.Sprintf("the saved activations passed the budget of %d bytes %d times with nothing left to evict (their peak: %d bytes)", o.Budget, out.SavedOver, peak)
				}
			}
		default:
			out.Status = StatusOK
		}
	}
	return out, nil
}

// measure replays a plan on the device; on running out of memory it replays
// again without a capacity limit and reports oom.
func measure(g *graph.Graph, o Options, p *sim.Plan) (*sim.Result, bool, error) {
	so, err := o.SimOptions()
	if err != nil {
		return nil, false, err
	}
	so.Timeline = o.Timeline
	res, err := sim.Simulate(g, p, so)
	if err == nil {
		return res, false, nil
	}
	if !errors.Is(err, sim.ErrOutOfMemory) {
		return nil, false, err
	}
	// The failed run's machine is garbage now; collect it before a second
	// machine of the same size is built, so that a graph of millions of
	// ops is not held twice (a collection costs little next to a replay).
	res = nil
	runtime.GC()
	so, err = o.simOptions(0)
	if err != nil {
		return nil, false, err
	}
	so.Timeline = o.Timeline
	so.Capacity = -1
	so.ReserveAll = false
	res, err = sim.Simulate(g, p, so)
	if err != nil {
		return nil, false, err
	}
	return res, true, nil
}
