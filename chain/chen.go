package chain

import (
	"context"
	"fmt"
	"math"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// Chen et al. baselines.
//
// Source: T. Chen, B. Xu, C. Zhang, C. Guestrin, "Training Deep Nets with
// Sublinear Memory Cost", arXiv:1604.06174, 2016, and its MXNet
// implementation "memonger" (search_plan / make_mirror_plan). A chain cut
// into segments stores only the segment inputs during the forward pass and
// re-runs each segment's forward before its backward. chen-sqrt keeps every
// sqrt(n)-th candidate split point; chen-greedy keeps a candidate whenever
// the bytes accumulated since the last kept one exceed a budget B, and
// searches B around sqrt(x*y) as memonger does.

// ChenGreedy runs Chen's greedy planner over nodes in topological order with
// the given sizes, keeping candidate nodes as checkpoints:
//
//	temp = 0
//	for v in order: temp += size(v)
//	    if v is a candidate and temp > B: keep v, x += size(v), y = max(y, temp), temp = 0
//
// It returns the kept node indexes (ascending), x (the checkpoint bytes) and
// y (the largest segment's bytes, counting only closed segments).
func ChenGreedy(sizes []int64, candidate []bool, budget int64) (kept []int32, x, y int64) {
	var temp int64
	for v, s := range sizes {
		temp += s
		if v < len(candidate) && candidate[v] && temp > budget {
			kept = append(kept, int32(v))
			x += s
			y = max(y, temp)
			temp = 0
		}
	}
	return kept, x, y
}

// ChenSqrtKept returns the checkpoints of chen-sqrt among n candidates
// (0-based): every k-th, k = round(sqrt(n)) (at least 1), i.e. k-1, 2k-1, ...
func ChenSqrtKept(n int) []int32 {
	if n <= 0 {
		return nil
	}
	k := int(math.Round(math.Sqrt(float64(n))))
	if k < 1 {
		k = 1
	}
	var kept []int32
	for v := k - 1; v < n; v += k {
		kept = append(kept, int32(v))
	}
	return kept
}

// ChenSearchPoint is one budget tried by ChenBudgetSearch.
type ChenSearchPoint struct {
	// Budget is the greedy planner's B; Kept, X and Y its result.
	Budget int64
	Kept   []int32
	X, Y   int64
	// Cost is the callback's value for the kept set (lower is better),
	// Time a secondary figure the callback reports (e.g. simulated time).
	Cost, Time int64
}

// ChenDefaultTrials is memonger's number of grid points after the three
// guessing rounds.
const ChenDefaultTrials = 6

// ChenBudgetSearch is memonger's search for the greedy planner's budget:
// three rounds starting from B = 0, each setting B = sqrt(x*y/2) from the
// previous result (x checkpoint bytes, y largest segment), then a grid of
// trials points from the smallest y seen plus one step up to sqrt(2) times
// the last guess. cost evaluates a kept set (memonger used the planned
// memory); the history keeps every point in the order tried and best is the
// first point of least cost. Cancelling ctx returns the best point so far
// with a *sim.CanceledError.
func ChenBudgetSearch(ctx context.Context, sizes []int64, candidate []bool, trials int, cost func(kept []int32) (c, t int64, err error)) (best ChenSearchPoint, history []ChenSearchPoint, err error) {
	if trials < 0 {
		return best, nil, fmt.Errorf("chen search: trials = %d, expected >= 0", trials)
	}
	if cost == nil {
		return best, nil, fmt.Errorf("chen search: cost callback is nil, expected a function evaluating a kept set")
	}
	if len(sizes) == 0 {
		return best, nil, fmt.Errorf("chen search: sizes has 0 nodes, expected >= 1")
	}
	if len(candidate) != len(sizes) {
		return best, nil, fmt.Errorf("chen search: candidate has %d entries, expected %d (one per size)", len(candidate), len(sizes))
	}
	for v, sz := range sizes {
		if sz < 0 {
			return best, nil, fmt.Errorf("chen search: sizes[%d] = %d, expected >= 0", v, sz)
		}
	}
	try := func(b int64) error {
		if err := sim.Canceled(ctx, "chen search"); err != nil {
			return err
		}
		kept, x, y := ChenGreedy(sizes, candidate, b)
		c, t, err := cost(kept)
		if err != nil {
			return fmt.Errorf("chen search: budget %d: %w", b, err)
		}
		p := ChenSearchPoint{Budget: b, Kept: kept, X: x, Y: y, Cost: c, Time: t}
		history = append(history, p)
		if len(history) == 1 || c < best.Cost {
			best = p
		}
		return nil
	}
	threshold := int64(0)
	minThreshold := int64(-1)
	for k := 0; k < 3; k++ {
		if err := try(threshold); err != nil {
			return best, history, err
		}
		p := history[len(history)-1]
		if minThreshold < 0 || p.Y < minThreshold {
			minThreshold = p.Y
		}
		threshold = int64(math.Sqrt(float64(p.X) * float64(p.Y) / 2))
	}
	maxThreshold := int64(float64(threshold) * math.Sqrt2)
	if trials > 0 {
		step := (maxThreshold - minThreshold) / int64(trials)
		threshold = minThreshold + step
		if step > 0 {
			for k := 0; k < trials; k++ {
				if err := try(threshold); err != nil {
					return best, history, err
				}
				threshold += step
			}
		}
	}
	return best, history, nil
}

// ChenOptions configures ChenSqrt and ChenGreedyPlan.
type ChenOptions struct {
	// Time is the per-op time callback for the stage decomposition (nil:
	// StagesDefaultTime).
	Time StageTimeFunc
	// Budget, when > 0, makes ChenGreedyPlan return the fastest searched
	// plan whose simulated peak fits (an error if none does); 0 returns the
	// plan of least peak, as memonger does.
	Budget int64
	// Trials is the number of grid points after the guessing rounds (0:
	// ChenDefaultTrials; < 0 disables the grid).
	Trials int
	// Sim configures the simulations that measure each plan.
	Sim sim.Options
}

// ChenReport describes a Chen plan.
type ChenReport struct {
	// Strategy is "chen-sqrt" or "chen-greedy".
	Strategy string
	// Stages is the number of chain stages; KeptStages the stages whose
	// output is checkpointed.
	Stages     int
	KeptStages []int32
	// Budget is the greedy planner's B of the chosen plan (0 for chen-sqrt);
	// X and Y its checkpoint and largest-segment bytes.
	Budget, X, Y int64
	// SimPeak and SimTimeNs are the simulated allocated peak and total time;
	// Recomputes counts recomputed op runs.
	SimPeak, SimTimeNs int64
	Recomputes         int
	// History lists the budgets tried by chen-greedy (Cost = simulated
	// peak, Time = simulated total time).
	History []ChenSearchPoint
}

// chenNodes returns the greedy planner's view of g's forward pass: one node
// per forward op, sized by its outputs' storage (pinned storage excluded),
// candidates the last ops of every stage but the last.
func chenNodes(g *graph.Graph, ch *StageChain) (sizes []int64, cand []bool, stageEnd []int32) {
	nf := 0
	for nf < len(g.Ops) && g.Ops[nf].Phase == graph.Forward {
		nf++
	}
	sizes = make([]int64, nf)
	cand = make([]bool, nf)
	stageEnd = make([]int32, nf)
	for i := range stageEnd {
		stageEnd[i] = -1
	}
	// A storage counts at the last op of its stage that writes or views it
	// (conv -> relu_ -> detach: the detach), so that a stage's last op,
	// the candidate, carries the stage output's bytes.
	owner := make([]int32, len(g.Tensors))
	for i := range owner {
		owner[i] = -1
	}
	for i := 0; i < nf; i++ {
		for _, t := range g.Ops[i].Outputs {
			tt := &g.Tensors[t]
			if tt.AliasOf == graph.NoTensor {
				if !ch.OpPinned[i] && !tt.Kind.Persistent() {
					sizes[i] += tt.Bytes
					owner[t] = int32(i)
				}
				continue
			}
			r := g.StorageOf(t)
			if o := owner[r]; o >= 0 && int(o) != i && ch.StageOf[o] == ch.StageOf[i] {
				b := g.Tensors[r].Bytes
				sizes[o] -= b
				sizes[i] += b
				owner[r] = int32(i)
			}
		}
	}
	for s := 0; s+1 < len(ch.Stages); s++ {
		last := ch.Stages[s].Fwd[len(ch.Stages[s].Fwd)-1]
		cand[last] = true
		stageEnd[last] = int32(s)
	}
	return sizes, cand, stageEnd
}

// ChenPlan emits the plan that checkpoints the outputs of the kept stages:
// the forward runs once; in the backward, right before the first backward op
// that reads a dropped activation of a segment (the stages after one kept
// stage up to the next), the segment's forward ops that produce what the
// backward still reads are re-run. The last segment is not re-run (its
// backward starts right after the forward). Non-recomputable ops keep their
// outputs. Frees are placed by sim.PlanFromSchedule. It returns the plan and
// the number of recomputed op runs.
func ChenPlan(g *graph.Graph, ch *StageChain, keptStages []int32, strategy string) (*sim.Plan, int, error) {
	if err := checkChainOf(g, ch); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", strategy, err)
	}
	return chenPlan(newChenGraph(g), ch, keptStages, strategy)
}

// chenGraph is what ChenPlan reads of a graph for every kept set, built
// once per planner run (a search builds many plans of one graph): dense
// copies of the per-tensor and per-op facts its loops read, so that they
// do not walk the graph's Tensor and Op structs.
type chenGraph struct {
	g *graph.Graph
	d *graph.Dense // g.Dense()
	// readByBwd[r]: a non-forward op reads storage r
	readByBwd []bool
	// writes: the forward pass's in-place writes (last writer of each
	// storage, and of each forward input's storage when its reader ran)
	writes *graph.Writes
}

func newChenGraph(g *graph.Graph) *chenGraph {
	d := g.Dense()
	return &chenGraph{g: g, d: d, readByBwd: d.ReadOutsideForward(), writes: graph.ForwardWrites(g)}
}

// chenPlan is ChenPlan on a checked chain.
func chenPlan(c *chenGraph, ch *StageChain, keptStages []int32, strategy string) (*sim.Plan, int, error) {
	g, d, readByBwd, writes := c.g, c.d, c.readByBwd, c.writes
	root, prod := d.Root, d.Producer
	L := len(ch.Stages)
	seg := make([]int32, L)
	kept := make([]bool, L)
	for _, s := range keptStages {
		if s < 0 || int(s) >= L {
			return nil, 0, fmt.Errorf("%s: kept stage %d, expected 0..%d", strategy, s, L-1)
		}
		kept[s] = true
	}
	nseg := int32(0)
	for s := 0; s < L; s++ {
		seg[s] = nseg
		if kept[s] {
			nseg++
		}
	}
	lastSeg := seg[L-1]
	nt := len(g.Tensors)
	// Checkpoint storages (outputs of kept stages) stay resident.
	isCkpt := make([]bool, nt)
	for s := 0; s < L; s++ {
		if kept[s] && ch.Stages[s].Output != graph.NoTensor {
			isCkpt[ch.Stages[s].Output] = true
		}
	}
	produced := make([]bool, nt)
	for i := range produced {
		produced[i] = prod[i] == graph.NoOp
	}
	ran := make([]bool, len(g.Ops))
	var seq []graph.OpID
	recomputes := 0
	run := func(op graph.OpID) error {
		for _, t := range d.Inputs(op) {
			if !produced[t] {
				return fmt.Errorf("%s: op %d %q reads tensor %d %q before it is computed", strategy, op, g.Ops[op].Name, t, g.Tensors[t].Name)
			}
		}
		if ran[op] {
			recomputes++
		}
		ran[op] = true
		for _, t := range d.Outputs(op) {
			produced[t] = true
		}
		seq = append(seq, op)
		return nil
	}
	for s := 0; s < L; s++ {
		for _, op := range ch.Stages[s].Fwd {
			if err := run(op); err != nil {
				return nil, 0, err
			}
		}
	}
	recomputed := make([]bool, nseg+1)
	wanted := make([]bool, nt)
	// segStart[k]: the first stage of segment k (seg is non-decreasing).
	segStart := make([]int32, nseg+2)
	for s := L - 1; s >= 0; s-- {
		segStart[seg[s]] = int32(s)
	}
	segStart[lastSeg+1] = int32(L)
	// segStages returns the stage range [a, b] of segment k.
	segStages := func(k int32) (int, int) {
		return int(segStart[k]), int(segStart[k+1]) - 1
	}
	recompute := func(k int32) error {
		recomputed[k] = true
		a, b := segStages(k)
		first, last := ch.Stages[a].Fwd[0], ch.Stages[b].Fwd[len(ch.Stages[b].Fwd)-1]
		// keep: ops of the segment not recomputed although the backward
		// reads their outputs (those stay resident from the forward pass),
		// see stale below.
		keep := make([]bool, last-first+1)
		inSeg := func(r graph.TensorID) bool {
			p := prod[r]
			return p != graph.NoOp && p >= first && p <= last && !isCkpt[r] && !ch.OpPinned[p] && !keep[p-first]
		}
		need := make([]bool, last-first+1)
		for changed := true; changed; {
			changed = false
			for op := first; op <= last; op++ {
				for _, t := range d.Outputs(op) {
					r := root[t]
					wanted[r] = inSeg(r) && readByBwd[r]
				}
			}
			clear(need)
			for op := last; op >= first; op-- {
				if ch.OpPinned[op] || keep[op-first] {
					continue
				}
				for _, t := range d.Outputs(op) {
					if wanted[root[t]] {
						need[op-first] = true
					}
				}
				if need[op-first] {
					for _, t := range d.Inputs(op) {
						if r := root[t]; inSeg(r) {
							wanted[r] = true
						}
					}
				}
			}
			// stale: a needed op that reads a storage a later forward op
			// writes in place would read what that op wrote, unless this
			// recompute runs again the op that last wrote the storage
			// before the first read (its producer, remaking it afresh, or
			// an in-place op after it). Autograd's clone of the input of
			// nn.Hardswish(inplace=True) in mobilenet_v3's classifier reads
			// the output of a Linear that is the segment's kept output:
			// such an op is kept instead (computed once, its outputs
			// resident from the forward pass), and the need is worked out
			// again without it. The clone before mobilenet_v2's
			// ReLU6(inplace=True) reads a batch norm's output that the
			// recompute makes again for its saved statistics, and stays.
			for op := first; op <= last; op++ {
				if !need[op-first] {
					continue
				}
				for k, t := range d.Inputs(op) {
					if writes.Last[root[t]] <= int32(op) {
						continue
					}
					if w := writes.Before(op, k); w == graph.NoOp || w < first || !need[w-first] {
						keep[op-first], changed = true, true
						break
					}
				}
			}
		}
		for op := first; op <= last; op++ {
			if need[op-first] {
				if err := run(op); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for s := L - 1; s >= 0; s-- {
		for _, op := range ch.Stages[s].Bwd {
			for _, t := range d.Inputs(op) {
				r := root[t]
				p := prod[r]
				if p == graph.NoOp || d.Phase[p] != graph.Forward || ch.OpPinned[p] || isCkpt[r] {
					continue
				}
				k := seg[ch.StageOf[p]]
				if k == lastSeg || recomputed[k] {
					continue
				}
				if err := recompute(k); err != nil {
					return nil, 0, err
				}
			}
			if err := run(op); err != nil {
				return nil, 0, err
			}
		}
	}
	for _, op := range ch.Update {
		if err := run(op); err != nil {
			return nil, 0, err
		}
	}
	p, err := sim.PlanFromSchedule(g, strategy, seq)
	return p, recomputes, err
}

// chenEval builds the plan of a kept node set and replays it on m (reset
// first: one Machine serves every plan a search measures, so the tables
// are built once).
func chenEval(c *chenGraph, ch *StageChain, stageEnd []int32, keptNodes []int32, strategy string, m *sim.Machine) (*sim.Plan, []int32, *sim.Result, int, error) {
	stages := make([]int32, 0, len(keptNodes))
	for _, v := range keptNodes {
		if s := stageEnd[v]; s >= 0 {
			stages = append(stages, s)
		}
	}
	plan, nre, err := chenPlan(c, ch, stages, strategy)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	if err := m.Reset(); err != nil {
		return nil, nil, nil, 0, fmt.Errorf("%s: %w", strategy, err)
	}
	if err := m.Replay(plan); err != nil {
		return nil, nil, nil, 0, fmt.Errorf("%s: replaying the plan: %w", strategy, err)
	}
	return plan, stages, m.Result(), nre, nil
}

// ChenSqrt is strategy chen-sqrt: the stage outputs (all but the last
// stage's) are the candidates, and every round(sqrt(n))-th is kept.
func ChenSqrt(ctx context.Context, g *graph.Graph, opts ChenOptions) (*sim.Plan, ChenReport, error) {
	rep := ChenReport{Strategy: "chen-sqrt"}
	if err := sim.Canceled(ctx, "chen-sqrt"); err != nil {
		return nil, rep, err
	}
	ch, err := StagesOf(g, StagesOptions{Time: opts.Time})
	if err != nil {
		return nil, rep, fmt.Errorf("chen-sqrt: %w", err)
	}
	rep.Stages = len(ch.Stages)
	sizes, cand, stageEnd := chenNodes(g, ch)
	var nodes []int32
	for v := range cand {
		if cand[v] {
			nodes = append(nodes, int32(v))
		}
	}
	var keptNodes []int32
	for _, i := range ChenSqrtKept(len(nodes)) {
		keptNodes = append(keptNodes, nodes[i])
	}
	for _, v := range keptNodes {
		rep.X += sizes[v]
	}
	m, err := sim.NewMachine(g, opts.Sim)
	if err != nil {
		return nil, rep, fmt.Errorf("chen-sqrt: %w", err)
	}
	if err := checkChainOf(g, ch); err != nil {
		return nil, rep, fmt.Errorf("chen-sqrt: %w", err)
	}
	plan, stages, res, nre, err := chenEval(newChenGraph(g), ch, stageEnd, keptNodes, "chen-sqrt", m)
	if err != nil {
		return nil, rep, err
	}
	rep.KeptStages, rep.Recomputes = stages, nre
	rep.SimPeak, rep.SimTimeNs = res.PeakAllocated, res.TotalNs
	return plan, rep, nil
}

// ChenGreedyPlan is strategy chen-greedy: the greedy planner over the
// forward ops with the stage outputs as candidates, its budget searched as
// memonger does (ChenBudgetSearch), each plan measured in the simulator.
// Cancelling ctx returns the best plan found so far.
func ChenGreedyPlan(ctx context.Context, g *graph.Graph, opts ChenOptions) (*sim.Plan, ChenReport, error) {
	rep := ChenReport{Strategy: "chen-greedy"}
	if opts.Budget < 0 {
		return nil, rep, fmt.Errorf("chen-greedy: budget = %d bytes, expected >= 0", opts.Budget)
	}
	trials := opts.Trials
	if trials == 0 {
		trials = ChenDefaultTrials
	} else if trials < 0 {
		trials = 0
	}
	ch, err := StagesOf(g, StagesOptions{Time: opts.Time})
	if err != nil {
		return nil, rep, fmt.Errorf("chen-greedy: %w", err)
	}
	rep.Stages = len(ch.Stages)
	sizes, cand, stageEnd := chenNodes(g, ch)
	m, err := sim.NewMachine(g, opts.Sim)
	if err != nil {
		return nil, rep, fmt.Errorf("chen-greedy: %w", err)
	}
	if err := checkChainOf(g, ch); err != nil {
		return nil, rep, fmt.Errorf("chen-greedy: %w", err)
	}
	c := newChenGraph(g)
	cost := func(kept []int32) (int64, int64, error) {
		_, _, res, _, err := chenEval(c, ch, stageEnd, kept, "chen-greedy", m)
		if err != nil {
			return 0, 0, err
		}
		return res.PeakAllocated, res.TotalNs, nil
	}
	best, hist, serr := ChenBudgetSearch(ctx, sizes, cand, trials, cost)
	rep.History = hist
	if len(hist) == 0 {
		return nil, rep, fmt.Errorf("chen-greedy: %w", serr)
	}
	if opts.Budget > 0 {
		found := false
		for _, p := range hist {
			if p.Cost > opts.Budget {
				continue
			}
			if !found || p.Time < best.Time || (p.Time == best.Time && p.Cost < best.Cost) {
				best, found = p, true
			}
		}
		if !found {
			minPeak := hist[0].Cost
			for _, p := range hist {
				minPeak = min(minPeak, p.Cost)
			}
			return nil, rep, fmt.Errorf("chen-greedy: budget %d bytes: the least simulated peak among %d searched plans is %d bytes", opts.Budget, len(hist), minPeak)
		}
	}
	plan, stages, res, nre, err := chenEval(c, ch, stageEnd, best.Kept, "chen-greedy", m)
	if err != nil {
		return nil, rep, err
	}
	rep.Budget, rep.X, rep.Y = best.Budget, best.X, best.Y
	rep.KeptStages, rep.Recomputes = stages, nre
	rep.SimPeak, rep.SimTimeNs = res.PeakAllocated, res.TotalNs
	if serr != nil {
		return plan, rep, fmt.Errorf("chen-greedy: search stopped early: %w", serr)
	}
	return plan, rep, nil
}
