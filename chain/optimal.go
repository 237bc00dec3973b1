package chain

import (
	"context"
	"errors"
	"fmt"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// ErrChainInfeasible is wrapped by the error OptimalChain returns when no
// schedule fits the budget; the ChainReport then holds MinFeasibleBytes.
var ErrChainInfeasible = errors.New("memory budget below the minimal feasible memory")

// OptimalDefaultSlots is the default memory discretization of OptimalChain.
const OptimalDefaultSlots = 500

// OptimalOptions configures OptimalChain.
type OptimalOptions struct {
	// Time is the per-op time callback (nil: StagesDefaultTime). Plug the
	// simulator's cost model in to optimize simulated time.
	Time StageTimeFunc
	// Slots is the number of memory slots the budget is divided into (0:
	// OptimalDefaultSlots). Sizes are rounded up to whole slots, so a finer
	// discretization finds faster schedules at O(Slots) more work.
	Slots int
	// Sim configures the simulation that checks the emitted plan (zero
	// value: ideal allocator, unlimited capacity).
	Sim sim.Options
}

// ChainReport describes what OptimalChain (or RevolvePlan) found.
type ChainReport struct {
	// Strategy is "optimal-chain" or "revolve".
	Strategy string
	// Stages is the number of chain stages; Slots and SlotBytes the
	// discretization (SlotBytes bytes per slot).
	Stages    int
	Slots     int
	SlotBytes int64
	// Budget is the memory budget in bytes; PinnedBytes the part of it
	// held throughout the forward and backward passes (inputs, parameters,
	// non-recomputable outputs).
	Budget      int64
	PinnedBytes int64
	// Feasible reports whether a schedule fits. MinFeasibleBytes is the
	// smallest budget for which the solver (at its discretization) finds
	// one, filled when the budget is infeasible.
	Feasible         bool
	MinFeasibleBytes int64
	// PredictedPeak is the solver's upper bound on the peak (PinnedBytes
	// plus the slots the schedule needs); PredictedTime its total time
	// (time callback units) and BaseTime the time without recomputation.
	PredictedPeak int64
	PredictedTime int64
	BaseTime      int64
	// SimPeak and SimTimeNs are what the simulator measured replaying the
	// plan (allocated peak, total time); Recomputes the number of recomputed
	// op runs.
	SimPeak    int64
	SimTimeNs  int64
	Recomputes int
	// Actions is the stage-level schedule.
	Actions []RotorAction
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// RotorStagesOf converts a stage chain into solver figures with slotBytes
// bytes per slot, rounding every size up so that a schedule within m slots
// never needs more than m*slotBytes bytes under the solver's accounting.
func RotorStagesOf(ch *StageChain, slotBytes int64) []RotorStage {
	if slotBytes < 1 {
		slotBytes = 1
	}
	out := make([]RotorStage, len(ch.Stages))
	for k := range ch.Stages {
		s := &ch.Stages[k]
		out[k] = RotorStage{
			Fwd: s.FwdTime, Bwd: s.BwdTime,
			In: ceilDiv(s.InputBytes, slotBytes), InBwd: ceilDiv(s.InputBwdBytes, slotBytes),
			XBar: ceilDiv(s.XBarBytes, slotBytes), XBarBwd: ceilDiv(s.XBarBwdBytes, slotBytes), XBarRest: ceilDiv(s.XBarRestBytes, slotBytes),
			FwdNone: ceilDiv(s.FwdPeakNone, slotBytes), FwdAll: ceilDiv(s.FwdPeakAll, slotBytes),
			BwdPeak: ceilDiv(s.BwdPeak, slotBytes),
			GradOut: ceilDiv(s.GradOutBytes, slotBytes), HeldGrad: ceilDiv(s.HeldGradBytes, slotBytes),
		}
	}
	return out
}

// stageUpperBytes is a memory that certainly admits the store-everything
// schedule: the sum of every stage's figures.
func stageUpperBytes(ch *StageChain) int64 {
	var u int64
	for k := range ch.Stages {
		s := &ch.Stages[k]
		u += s.InputBytes + s.XBarBytes + s.FwdPeakNone + s.FwdPeakAll + s.BwdPeak + s.GradOutBytes + s.HeldGradBytes
	}
	return u + 1
}

// chainSolve runs the DP for a budget: it returns the solution, the slot
// size and the number of slots used.
func chainSolve(ctx context.Context, ch *StageChain, budget int64, slots int) (*RotorSolution, int64, int, error) {
	avail := budget - ch.Pinned
	if avail < 0 || ch.UpdatePeak > budget {
		return &RotorSolution{MinSlots: -1}, 1, 0, nil
	}
	q := ceilDiv(avail, int64(slots))
	if q < 1 {
		q = 1
	}
	// When every size is a multiple of a common unit not much finer than
	// q, slots of that unit round nothing (at most 2x the slots).
	if u := stageSizeGCD(ch); u > 0 && u < q && avail/u <= 2*int64(slots) {
		q = u
	} else if u >= q {
		q = u
	}
	mem := int(avail / q)
	sol, err := RotorSolve(ctx, RotorStagesOf(ch, q), mem)
	return sol, q, mem, err
}

// OptimalChain computes the optimal stage-level checkpointing schedule of g
// (Rotor's dynamic program over the stage decomposition) for a memory
// budget in bytes, and emits it as a plan on g. Strategy "optimal-chain".
//
// The plan runs every stage's forward ops (pinned ones only the first time)
// and backward ops in the schedule's order, then the update ops, with frees
// placed by sim.PlanFromSchedule. It is replayed in the simulator before it
// is returned; a budget the solver cannot meet gives an error wrapping
// ErrChainInfeasible with the report's MinFeasibleBytes set.
func OptimalChain(ctx context.Context, g *graph.Graph, budget int64, opts OptimalOptions) (*sim.Plan, ChainReport, error) {
	rep := ChainReport{Strategy: "optimal-chain", Budget: budget}
	if budget <= 0 {
		return nil, rep, fmt.Errorf("optimal-chain: budget = %d bytes, expected > 0", budget)
	}
	slots := opts.Slots
	if slots == 0 {
		slots = OptimalDefaultSlots
	}
	if slots < 1 || slots > 1<<20 {
		return nil, rep, fmt.Errorf("optimal-chain: slots = %d, expected 1..%d", opts.Slots, 1<<20)
	}
	rep.Slots = slots
	ch, err := StagesOf(g, StagesOptions{Time: opts.Time})
	if err != nil {
		return nil, rep, fmt.Errorf("optimal-chain: %w", err)
	}
	rep.Stages, rep.PinnedBytes = len(ch.Stages), ch.Pinned
	for k := range ch.Stages {
		rep.BaseTime += ch.Stages[k].FwdTime + ch.Stages[k].BwdTime
	}
	rep.BaseTime += ch.PinnedTime + ch.UpdateTime
	// No recomputation is the fastest schedule there is: when it fits, it is
	// optimal, whatever the discretized chain model (an upper bound on
	// memory) would say.
	if err := ctx.Err(); err != nil {
		return nil, rep, fmt.Errorf("optimal-chain: %w", err)
	}
	if base := sim.DefaultPlan(g); base != nil {
		if res, err := sim.Simulate(g, base, opts.Sim); err == nil && res.PeakAllocated <= budget {
			base.Strategy = "optimal-chain"
			rep.Feasible = true
			rep.SimPeak, rep.SimTimeNs = res.PeakAllocated, res.TotalNs
			rep.PredictedPeak, rep.PredictedTime = res.PeakAllocated, res.TotalNs
			return base, rep, nil
		}
	}
	sol, q, _, err := chainSolve(ctx, ch, budget, slots)
	if err != nil {
		return nil, rep, fmt.Errorf("optimal-chain: %w", err)
	}
	rep.SlotBytes = q
	if !sol.Feasible {
		rep.MinFeasibleBytes, err = chainMinFeasible(ctx, ch, slots)
		if err != nil {
			return nil, rep, fmt.Errorf("optimal-chain: %w", err)
		}
		return nil, rep, fmt.Errorf("optimal-chain: budget %d bytes, minimal feasible about %d bytes (%d pinned): %w", budget, rep.MinFeasibleBytes, ch.Pinned, ErrChainInfeasible)
	}
	rep.Feasible = true
	rep.Actions = sol.Actions
	rep.PredictedTime = sol.Time + ch.PinnedTime + ch.UpdateTime
	rep.PredictedPeak = max(ch.Pinned+int64(sol.UsedSlots)*q, ch.UpdatePeak)
	plan, nre, err := StagesPlan(g, ch, sol.Actions, "optimal-chain")
	if err != nil {
		return nil, rep, fmt.Errorf("optimal-chain: %w", err)
	}
	rep.Recomputes = nre
	res, err := sim.Simulate(g, plan, opts.Sim)
	if err != nil {
		return nil, rep, fmt.Errorf("optimal-chain: replaying the plan: %w", err)
	}
	rep.SimPeak, rep.SimTimeNs = res.PeakAllocated, res.TotalNs
	if res.PeakAllocated > budget {
		rep.Feasible = false
		return nil, rep, fmt.Errorf("optimal-chain: the simulated peak %d bytes exceeds the budget %d bytes (the update phase or the simulator's workspace/allocator model needs more than the chain model): %w", res.PeakAllocated, budget, ErrChainInfeasible)
	}
	return plan, rep, nil
}

// chainMinFeasible returns a budget for which the solver finds a schedule:
// the minimal slots at a coarse discretization of an upper bound, confirmed
// (and raised if needed) by re-solving at that budget.
func chainMinFeasible(ctx context.Context, ch *StageChain, slots int) (int64, error) {
	u := stageUpperBytes(ch)
	q := ceilDiv(u, int64(slots))
	sol, err := RotorSolve(ctx, RotorStagesOf(ch, q), int(u/q)+1)
	if err != nil {
		return 0, err
	}
	if sol.MinSlots < 0 {
		return 0, fmt.Errorf("no schedule even with %d bytes (internal error)", u)
	}
	b := max(ch.Pinned+int64(sol.MinSlots)*q, ch.UpdatePeak)
	for try := 0; try < 64; try++ {
		s2, _, _, err := chainSolve(ctx, ch, b, slots)
		if err != nil {
			return 0, err
		}
		if s2.Feasible {
			return b, nil
		}
		b += q
	}
	return b, nil
}

// StagesPlan turns a stage-level schedule into a plan on g: each forward
// action runs the stage's forward ops (pinned ops only the first time), each
// backward action its backward ops, and the update ops follow; frees are
// placed by sim.PlanFromSchedule. It returns the plan and the number of
// recomputed op runs, or an error if the schedule runs an op before its
// inputs exist (for example a backward before its stage's forward).
func StagesPlan(g *graph.Graph, ch *StageChain, acts []RotorAction, strategy string) (*sim.Plan, int, error) {
	n := len(ch.Stages)
	ran := make([]bool, len(g.Ops))
	produced := make([]bool, len(g.Tensors))
	for i := range g.Tensors {
		produced[i] = g.Tensors[i].Producer == graph.NoOp
	}
	var seq []graph.OpID
	recomputes := 0
	run := func(op graph.OpID) error {
		for _, t := range g.Ops[op].Inputs {
			if !produced[t] {
				return fmt.Errorf("schedule position %d: op %d %q reads tensor %d %q before it is computed", len(seq), op, g.Ops[op].Name, t, g.Tensors[t].Name)
			}
		}
		if ran[op] {
			recomputes++
		}
		ran[op] = true
		for _, t := range g.Ops[op].Outputs {
			produced[t] = true
		}
		seq = append(seq, op)
		return nil
	}
	for ai, a := range acts {
		if a.Stage < 0 || int(a.Stage) >= n {
			return nil, 0, fmt.Errorf("action %d: stage %d, expected 0..%d", ai, a.Stage, n-1)
		}
		st := &ch.Stages[a.Stage]
		switch a.Kind {
		case RotorForwardNone, RotorForwardAll:
			for _, op := range st.Fwd {
				if ch.OpPinned[op] && ran[op] {
					continue
				}
				if err := run(op); err != nil {
					return nil, 0, err
				}
			}
		case RotorBackward:
			for _, op := range st.Bwd {
				if ran[op] {
					return nil, 0, fmt.Errorf("action %d: backward of stage %d runs op %d twice", ai, a.Stage, op)
				}
				if err := run(op); err != nil {
					return nil, 0, err
				}
			}
		default:
			return nil, 0, fmt.Errorf("action %d: kind %d, expected F_none, F_all or B", ai, a.Kind)
		}
	}
	for _, op := range ch.Update {
		if err := run(op); err != nil {
			return nil, 0, err
		}
	}
	for i := range ran {
		if !ran[i] {
			return nil, 0, fmt.Errorf("schedule never runs op %d %q", i, g.Ops[i].Name)
		}
	}
	p, err := sim.PlanFromSchedule(g, strategy, seq)
	return p, recomputes, err
}

// RevolveStageActions maps a Revolve schedule onto stage actions: step k is
// stage k-1; an advance runs the stages' forwards keeping only outputs, a
// turn runs the stage's forward keeping x-bar and then its backward.
func RevolveStageActions(acts []RevolveAction) []RotorAction {
	var out []RotorAction
	for _, a := range acts {
		switch a.Kind {
		case RevolveAdvance:
			for s := a.Step - a.N; s < a.Step; s++ {
				out = append(out, RotorAction{RotorForwardNone, int32(s)})
			}
		case RevolveFirstTurn, RevolveYouTurn:
			out = append(out, RotorAction{RotorForwardAll, int32(a.Step - 1)}, RotorAction{RotorBackward, int32(a.Step - 1)})
		}
	}
	return out
}

// RevolvePlan emits Revolve's schedule with the given number of snapshots
// (the graph input counting as one) on g's stage decomposition, treating
// every stage as one step of a homogeneous chain. Strategy "revolve".
func RevolvePlan(g *graph.Graph, snapshots int, opts OptimalOptions) (*sim.Plan, ChainReport, error) {
	rep := ChainReport{Strategy: "revolve"}
	ch, err := StagesOf(g, StagesOptions{Time: opts.Time})
	if err != nil {
		return nil, rep, fmt.Errorf("revolve: %w", err)
	}
	rep.Stages, rep.PinnedBytes = len(ch.Stages), ch.Pinned
	acts, err := RevolveSchedule(int64(len(ch.Stages)), int64(snapshots))
	if err != nil {
		return nil, rep, err
	}
	rep.Actions = RevolveStageActions(acts)
	plan, nre, err := StagesPlan(g, ch, rep.Actions, "revolve")
	if err != nil {
		return nil, rep, fmt.Errorf("revolve: %w", err)
	}
	rep.Recomputes, rep.Feasible = nre, true
	for k := range ch.Stages {
		rep.BaseTime += ch.Stages[k].FwdTime + ch.Stages[k].BwdTime
	}
	rep.BaseTime += ch.PinnedTime + ch.UpdateTime
	rep.PredictedTime = ch.PinnedTime + ch.UpdateTime
	for _, a := range rep.Actions {
		if a.Kind == RotorBackward {
			rep.PredictedTime += ch.Stages[a.Stage].BwdTime
		} else {
			rep.PredictedTime += ch.Stages[a.Stage].FwdTime
		}
	}
	res, err := sim.Simulate(g, plan, opts.Sim)
	if err != nil {
		return nil, rep, fmt.Errorf("revolve: replaying the plan: %w", err)
	}
	rep.SimPeak, rep.SimTimeNs = res.PeakAllocated, res.TotalNs
	return plan, rep, nil
}

// stageSizeGCD returns the greatest common divisor of every stage figure in
// bytes (0 if all are 0).
func stageSizeGCD(ch *StageChain) int64 {
	gcd := func(a, b int64) int64 {
		for b != 0 {
			a, b = b, a%b
		}
		return a
	}
	var u int64
	for k := range ch.Stages {
		s := &ch.Stages[k]
		for _, v := range [...]int64{s.InputBytes, s.InputBwdBytes, s.XBarBytes, s.XBarBwdBytes, s.XBarRestBytes, s.FwdPeakNone, s.FwdPeakAll, s.BwdPeak, s.GradOutBytes, s.HeldGradBytes} {
			u = gcd(u, v)
		}
	}
	return u
}
