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

// OptimalMaxSlots is the largest Slots OptimalChain accepts.
const OptimalMaxSlots = 1 << 20

// optimalMaxEntries caps OptimalChain's DP tables (24 bytes an entry over
// the two time tables and their choices: about 100 MB).
const optimalMaxEntries = 1 << 22

// optimalMaxWork caps the DP's inner steps, about L^3/3 times the memory
// levels (a few seconds on one core).
const optimalMaxWork = 4e8

// OptimalOptions configures OptimalChain.
type OptimalOptions struct {
	// Time is the per-op time callback (nil: the simulator's cost model
	// under Sim, sim.Machine.OpTime, so that the DP minimizes simulated
	// time).
	Time StageTimeFunc
	// Slots is the number of memory slots the budget is divided into (0:
	// OptimalDefaultSlots). Sizes are rounded up to whole slots, so a finer
	// discretization finds faster schedules at O(Slots) more work; it also
	// bounds the chain depth the DP affords (OptimalMaxStages).
	Slots int
	// Sim configures the simulation that checks the emitted plans and the
	// workspaces the stage figures count (zero value: ideal allocator,
	// unlimited capacity).
	Sim sim.Options
	// Progress, when not nil, is told about the plans tried.
	Progress sim.Progress
	// MaxStages, when > 0, groups the chain into at most that many stages
	// even where the DP affords more (less time, a coarser plan).
	MaxStages int
}

// ChainReport describes what OptimalChain (or RevolvePlan) found.
type ChainReport struct {
	// Strategy is "optimal-chain" or "revolve".
	Strategy string
	// Stages is the number of chain stages the graph's cuts give; Groups
	// the number the DP solved (Stages when the DP affords the chain, else
	// consecutive stages grouped, see GroupGapBound). Slots and SlotBytes
	// are the discretization (SlotBytes bytes per slot).
	Stages    int
	Groups    int
	Slots     int
	SlotBytes int64
	// Budget is the memory budget in bytes; PinnedBytes the part of it
	// held throughout the forward and backward passes (inputs, parameters,
	// non-recomputable outputs).
	Budget      int64
	PinnedBytes int64
	// Feasible reports whether a schedule fits. MinFeasibleBytes is the
	// smallest simulated peak of the schedules tried (the least-memory
	// schedule of the DP), filled when the budget is infeasible.
	Feasible         bool
	MinFeasibleBytes int64
	// PredictedPeak is the solver's bound on the peak (PinnedBytes plus the
	// slots the schedule needs); PredictedTime its total time (time
	// callback units) and BaseTime the time without recomputation.
	PredictedPeak int64
	PredictedTime int64
	BaseTime      int64
	// GroupGapBound bounds what grouping stages costs, in time units: the
	// schedule's predicted time minus the no-recompute time (a lower bound
	// of the optimum of the ungrouped chain). 0 when nothing was grouped
	// (the DP is optimal for the chain it sees).
	GroupGapBound int64
	// Tried is the number of DP schedules replayed in the simulator to pick
	// the fastest that fits (the DP's memory accounting is checked, and
	// corrected, against the simulator's).
	Tried int
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

// checkChainOf reports whether ch is a usable stage chain of g.
func checkChainOf(g *graph.Graph, ch *StageChain) error {
	switch {
	case g == nil:
		return fmt.Errorf("graph is nil")
	case ch == nil:
		return fmt.Errorf("stage chain is nil, expected one from StagesOf")
	case len(ch.Stages) == 0:
		return fmt.Errorf("stage chain has 0 stages, expected one from StagesOf")
	case ch.ops != len(g.Ops) || len(ch.OpPinned) != len(g.Ops) || len(ch.StageOf) != len(g.Ops):
		return fmt.Errorf("stage chain was made for a graph of %d ops, expected graph %q's %d", ch.ops, g.Name, len(g.Ops))
	}
	for k := range ch.Stages {
		for _, ops := range [2][]graph.OpID{ch.Stages[k].Fwd, ch.Stages[k].Bwd} {
			for _, op := range ops {
				if op < 0 || int(op) >= len(g.Ops) {
					return fmt.Errorf("stage %d: op %d, expected 0..%d", k, op, len(g.Ops)-1)
				}
			}
		}
	}
	return nil
}

// RotorStagesOf converts a stage chain into solver figures with slotBytes
// bytes per slot, rounding every size up so that a schedule within m slots
// never needs more than m*slotBytes bytes under the solver's accounting.
func RotorStagesOf(ch *StageChain, slotBytes int64) ([]RotorStage, error) {
	if ch == nil || len(ch.Stages) == 0 {
		return nil, fmt.Errorf("rotor stages: the stage chain is nil or has 0 stages, expected one from StagesOf")
	}
	if slotBytes < 1 {
		return nil, fmt.Errorf("rotor stages: slotBytes = %d, expected >= 1", slotBytes)
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
			// Released memory rounds down, so that it is never credited
			// beyond what the stage frees.
			Release: s.ReleasedBytes / slotBytes,
			LeafSet: true, FwdLeaf: s.FwdLeafTime, FwdLeafPeak: ceilDiv(s.FwdPeakLeaf, slotBytes),
		}
	}
	return out, nil
}

// OptimalMaxStages returns the depth OptimalChain solves without grouping
// at the given number of slots when its tables span their most, twice the
// slots (see OptimalChain): a narrower span affords deeper chains, memory
// released by backward stages extends the tables and affords shallower
// ones. It is never more than the slots: each held checkpoint is rounded up
// by less than a slot, and more stages than slots could lose the whole
// budget to rounding.
func OptimalMaxStages(slots int) int {
	if slots <= 0 {
		slots = OptimalDefaultSlots
	}
	return min(maxStagesFor(2*slots), slots)
}

// maxStagesFor is the deepest chain whose tables of levels+1 memory levels
// fit optimalMaxEntries and optimalMaxWork.
func maxStagesFor(levels int) int {
	L := 1
	for {
		n := L + 1
		if rotorTableEntries(n, levels) > optimalMaxEntries || float64(n)*float64(n)*float64(n)/3*float64(levels+1) > optimalMaxWork {
			return L
		}
		L = n
	}
}

// stageCallbacks returns the time and workspace callbacks of the stage
// figures: the given time callback or the simulator's, and the simulator's
// workspaces after its algorithm choice.
func stageCallbacks(g *graph.Graph, so sim.Options, timeOf StageTimeFunc) (StagesOptions, error) {
	m, err := sim.NewMachine(g, so)
	if err != nil {
		return StagesOptions{}, err
	}
	if timeOf == nil {
		timeOf = m.OpTime
	}
	return StagesOptions{Time: timeOf, Workspace: m.OpWorkspace}, nil
}

// OptimalChain computes the optimal stage-level checkpointing schedule of g
// (Rotor's dynamic program over the stage decomposition) for a memory
// budget in bytes, and emits it as a plan on g. Strategy "optimal-chain".
//
// The DP's tables cover every memory level from 0 up to the no-recompute
// peak (at most twice the budget's slots); the plan returned is the
// fastest of those levels' optimal schedules whose simulated peak fits the
// budget (a binary search over the levels, each schedule replayed in the
// simulator), so that where the DP's accounting and the simulator's differ
// the simulator decides. Chains deeper than OptimalMaxStages(Slots) are
// grouped into that many groups of consecutive stages, and the report
// bounds what grouping costs (GroupGapBound).
//
// The plan runs every stage's forward ops (pinned ones only the first time)
// and backward ops in the schedule's order, then the update ops, with frees
// placed by sim.PlanFromSchedule. A budget no schedule meets gives an error
// wrapping ErrChainInfeasible with the report's MinFeasibleBytes set, and
// the least-memory plan (which does not fit the budget) when there is one.
// Cancelling ctx returns the best plan found so far with a
// *sim.CanceledError.
func OptimalChain(ctx context.Context, g *graph.Graph, budget int64, opts OptimalOptions) (*sim.Plan, ChainReport, error) {
	rep := ChainReport{Strategy: "optimal-chain", Budget: budget}
	if g == nil || len(g.Ops) == 0 {
		return nil, rep, fmt.Errorf("optimal-chain: graph is nil or has 0 ops, expected a training graph")
	}
	if budget <= 0 {
		return nil, rep, fmt.Errorf("optimal-chain: budget = %d bytes, expected > 0", budget)
	}
	slots := opts.Slots
	if slots == 0 {
		slots = OptimalDefaultSlots
	}
	if slots < 1 || slots > OptimalMaxSlots {
		return nil, rep, fmt.Errorf("optimal-chain: slots = %d, expected 1..%d (0: %d)", opts.Slots, OptimalMaxSlots, OptimalDefaultSlots)
	}
	if opts.MaxStages < 0 {
		return nil, rep, fmt.Errorf("optimal-chain: MaxStages = %d, expected >= 0 (0: as many as the DP affords)", opts.MaxStages)
	}
	rep.Slots = slots
	so, err := stageCallbacks(g, opts.Sim, opts.Time)
	if err != nil {
		return nil, rep, fmt.Errorf("optimal-chain: %w", err)
	}
	ch, err := StagesOf(g, so)
	if err != nil {
		return nil, rep, fmt.Errorf("optimal-chain: %w", err)
	}
	rep.Stages = len(ch.Stages)
	for k := range ch.Stages {
		rep.BaseTime += ch.Stages[k].FwdTime + ch.Stages[k].BwdTime
	}
	rep.BaseTime += ch.PinnedTime + ch.UpdateTime
	if err := sim.Canceled(ctx, "optimal-chain"); err != nil {
		return nil, rep, err
	}
	// No recomputation is the fastest schedule there is: when it fits, it is
	// optimal, whatever the discretized chain model would say.
	var basePeak int64
	if base := sim.DefaultPlan(g); base != nil {
		if res, err := sim.Simulate(g, base, opts.Sim); err == nil {
			basePeak = res.PeakAllocated
			if res.PeakAllocated <= budget {
				base.Strategy = "optimal-chain"
				rep.Feasible, rep.Groups = true, rep.Stages
				rep.SimPeak, rep.SimTimeNs = res.PeakAllocated, res.TotalNs
				rep.PredictedPeak, rep.PredictedTime = res.PeakAllocated, res.TotalNs
				return base, rep, nil
			}
		}
	}
	// Slots of q bytes: the budget's share above the pinned bytes in Slots
	// slots, the table reaching up to the no-recompute peak (at most
	// 2*Slots levels), so that levels above the budget can be tried where
	// the DP's accounting is pessimistic; plus the memory the backward
	// releases (rotorBuild).
	discretize := func(ch *StageChain, widen int64) (q int64, mem, levels int) {
		avail := budget - ch.Pinned
		span := max(basePeak-ch.Pinned, 1)
		if basePeak == 0 { // the no-recompute plan did not replay
			span = stageUpperBytes(ch)
		}
		span *= widen
		q = max(ceilDiv(max(avail, span/2), int64(slots)), 1)
		if u := stageSizeGCD(ch); u > 0 && u < q && max(avail, span/2)/u <= 2*int64(slots) {
			q = u
		} else if u >= q {
			q = u
		}
		mem = int(min(ceilDiv(span, q), 2*int64(slots)))
		mem = max(mem, int(min(avail/q, 2*int64(slots))))
		var rel int64
		for k := range ch.Stages {
			rel += ch.Stages[k].ReleasedBytes / q
		}
		return q, mem, mem + int(min(rel, rotorMaxEntries))
	}
	q, mem, levels := discretize(ch, 1)
	// At most Slots stages too: every held checkpoint is rounded up by
	// less than a slot, so that more stages than slots could lose the
	// whole budget to rounding.
	maxL := min(maxStagesFor(levels), max(slots, 2))
	if opts.MaxStages > 0 {
		maxL = min(maxL, opts.MaxStages)
	}
	if len(ch.Stages) > maxL {
		so.MaxStages = maxL
		if ch, err = StagesOf(g, so); err != nil {
			return nil, rep, fmt.Errorf("optimal-chain: %w", err)
		}
		q, mem, _ = discretize(ch, 1)
	}
	rep.Groups, rep.PinnedBytes = len(ch.Stages), ch.Pinned
	avail := budget - ch.Pinned
	var tab *rotorTable
	lo := -1
	// Where the DP's accounting needs more than the table's span for every
	// schedule (it is pessimistic, or many small figures were rounded up),
	// the table gets more levels while it stays within twice its cap, and
	// coarser slots beyond.
	for try := 0; ; try++ {
		stages, err := RotorStagesOf(ch, q)
		if err != nil {
			return nil, rep, fmt.Errorf("optimal-chain: %w", err)
		}
		if tab, err = rotorBuild(ctx, stages, mem, opts.Progress); err != nil {
			return nil, rep, fmt.Errorf("optimal-chain: %w", err)
		}
		if lo = tab.minSlots(); lo >= 0 || try == 6 {
			break
		}
		if rotorTableEntries(len(stages), 2*mem+int(rotorReleased(stages))) <= 2*optimalMaxEntries {
			mem *= 2
		} else {
			q, mem, _ = discretize(ch, int64(4)<<(2*try))
		}
	}
	rep.SlotBytes = q
	mem = max(mem, lo)
	if lo < 0 {
		return nil, rep, fmt.Errorf("optimal-chain: budget %d bytes: no schedule within %d slots of %d bytes above %d pinned bytes (the table's whole range): %w", budget, mem, q, ch.Pinned, ErrChainInfeasible)
	}
	type probe struct {
		plan *sim.Plan
		acts []RotorAction
		res  *sim.Result
		nre  int
		fits bool
	}
	cache := map[int]*probe{}
	try := func(m int) (*probe, error) {
		m = tab.usedSlots(m)
		if p, ok := cache[m]; ok {
			return p, nil
		}
		if err := sim.Canceled(ctx, "optimal-chain"); err != nil {
			return nil, err
		}
		acts, err := tab.schedule(m)
		if err != nil {
			return nil, err
		}
		plan, nre, err := StagesPlan(g, ch, acts, "optimal-chain")
		if err != nil {
			return nil, err
		}
		res, err := sim.Simulate(g, plan, opts.Sim)
		if err != nil {
			return nil, fmt.Errorf("replaying the plan at %d slots: %w", m, err)
		}
		p := &probe{plan: plan, acts: acts, res: res, nre: nre, fits: res.PeakAllocated <= budget}
		cache[m] = p
		rep.Tried++
		opts.Progress.Report(rep.Tried, 0, fmt.Sprintf("optimal-chain: schedule at %d of %d slots", m, mem))
		return p, nil
	}
	var best *probe
	bestM := -1
	finish := func(err error) (*sim.Plan, ChainReport, error) {
		if best == nil {
			return nil, rep, err
		}
		top := tab.top()
		rep.Feasible = true
		rep.Actions = best.acts
		rep.PredictedTime = top[bestM] + ch.PinnedTime + ch.UpdateTime
		rep.PredictedPeak = max(ch.Pinned+int64(bestM)*q, ch.UpdatePeak)
		rep.Recomputes = best.nre
		rep.SimPeak, rep.SimTimeNs = best.res.PeakAllocated, best.res.TotalNs
		if rep.Groups < rep.Stages {
			rep.GroupGapBound = max(rep.PredictedTime-rep.BaseTime, 0)
		}
		return best.plan, rep, err
	}
	// The largest level whose schedule fits: levels' times never increase
	// with memory; the simulated peaks are checked at each level tried.
	p, err := try(lo)
	if err != nil {
		return finish(fmt.Errorf("optimal-chain: %w", err))
	}
	if !p.fits {
		// The DP's least memory and the simulator's may differ: a few
		// levels above the least (lo+1, lo+2, lo+4, ...) are tried too,
		// the first that fits starts the search, else the lowest peak is
		// kept.
		low, lowM := p, lo
		for step := 1; step <= 32 && lo+step <= mem && !p.fits; step *= 2 {
			m := tab.usedSlots(lo + step)
			if p, err = try(m); err != nil {
				return finish(fmt.Errorf("optimal-chain: %w", err))
			}
			if p.fits {
				lo = m
			} else if p.res.PeakAllocated < low.res.PeakAllocated {
				low, lowM = p, m
			}
		}
		if !p.fits {
			// The least-memory plan is returned with the error: it does
			// not fit, but it is the lowest peak found.
			best, bestM = low, lowM
			plan, rep, _ := finish(nil)
			rep.Feasible = false
			rep.MinFeasibleBytes = low.res.PeakAllocated
			var held int64
			for k := range ch.Stages {
				held += ch.Stages[k].HeldGradBytes
			}
			return plan, rep, fmt.Errorf("optimal-chain: budget %d bytes, the least-memory schedule of %d stages needs %d bytes (%d bytes pinned: inputs, parameters, state and outputs that may not be recomputed; %d bytes of gradients held until the update): %w", budget, rep.Groups, low.res.PeakAllocated, ch.Pinned, held, ErrChainInfeasible)
		}
	}
	best, bestM = p, tab.usedSlots(lo)
	a, b := lo, mem
	first := true
	for a < b {
		mid := (a + b + 1) / 2
		if first {
			// Start where the DP's accounting puts the budget.
			if mb := int(avail / q); mb > a && mb <= b {
				mid = mb
			}
			first = false
		}
		p, err := try(mid)
		if err != nil {
			return finish(fmt.Errorf("optimal-chain: %w", err))
		}
		if p.fits {
			a = mid
			if p.res.TotalNs < best.res.TotalNs || (p.res.TotalNs == best.res.TotalNs && p.res.PeakAllocated < best.res.PeakAllocated) {
				best, bestM = p, tab.usedSlots(mid)
			}
		} else {
			b = mid - 1
		}
	}
	// Simulated peaks need not grow with the level: the next few distinct
	// schedules above the one found are tried too.
	top := tab.top()
	for m, n := a+1, 0; m <= mem && n < 4; m++ {
		if top[m] == top[m-1] {
			continue // the same schedule as the level below
		}
		n++
		p, err := try(m)
		if err != nil {
			return finish(fmt.Errorf("optimal-chain: %w", err))
		}
		if p.fits && (p.res.TotalNs < best.res.TotalNs || (p.res.TotalNs == best.res.TotalNs && p.res.PeakAllocated < best.res.PeakAllocated)) {
			best, bestM = p, tab.usedSlots(m)
		}
	}
	return finish(nil)
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

// StagesPlan turns a stage-level schedule into a plan on g: each forward
// action runs the stage's forward ops (pinned ops only the first time), each
// backward action its backward ops, and the update ops follow; frees are
// placed by sim.PlanFromSchedule. It returns the plan and the number of
// recomputed op runs, or an error if the schedule runs an op before its
// inputs exist (for example a backward before its stage's forward).
func StagesPlan(g *graph.Graph, ch *StageChain, acts []RotorAction, strategy string) (*sim.Plan, int, error) {
	if err := checkChainOf(g, ch); err != nil {
		return nil, 0, err
	}
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
		case RotorForwardLeaf:
			whole := false
			for _, op := range st.Fwd {
				whole = whole || !ran[op]
			}
			ops := st.Leaf
			if whole {
				ops = st.Fwd
			}
			for _, op := range ops {
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
			return nil, 0, fmt.Errorf("action %d: kind %d, expected F_none, F_all, F_leaf or B", ai, a.Kind)
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
	if g == nil || len(g.Ops) == 0 {
		return nil, rep, fmt.Errorf("revolve: graph is nil or has 0 ops, expected a training graph")
	}
	so, err := stageCallbacks(g, opts.Sim, opts.Time)
	if err != nil {
		return nil, rep, fmt.Errorf("revolve: %w", err)
	}
	ch, err := StagesOf(g, so)
	if err != nil {
		return nil, rep, fmt.Errorf("revolve: %w", err)
	}
	rep.Stages, rep.Groups, rep.PinnedBytes = len(ch.Stages), len(ch.Stages), ch.Pinned
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
		for _, v := range [...]int64{s.InputBytes, s.InputBwdBytes, s.XBarBytes, s.XBarBwdBytes, s.XBarRestBytes, s.FwdPeakNone, s.FwdPeakAll, s.BwdPeak, s.GradOutBytes, s.HeldGradBytes, s.ReleasedBytes, s.FwdPeakLeaf} {
			u = gcd(u, v)
		}
	}
	return u
}
