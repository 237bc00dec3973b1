package mirror

import (
	"context"
	"fmt"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// Decision records, for one forward op, whether it was mirrored and why.
type Decision struct {
	Op       graph.OpID `json:"op"`
	Name     string     `json:"name"`
	Type     string     `json:"type"`
	Mirrored bool       `json:"mirrored"`
	Rule     Rule       `json:"-"`
	Reason   string     `json:"reason"`
}

// Result is a mirror pass's output: the plan to replay and the per-op
// decisions (one per forward op, in graph order).
type Result struct {
	Plan      *sim.Plan
	Decisions []Decision
	// Mirrored counts the mirrored forward ops.
	Mirrored int
	// Recomputed counts the recompute steps in the plan.
	Recomputed int
}

// Classic runs MXNet 1.x's mirror pass: every forward op for which the
// predicate says yes is mirrored.
func Classic(g *graph.Graph, p Predicate) (*Result, error) {
	if g == nil {
		return nil, fmt.Errorf("mirror: graph is nil")
	}
	mirrored := make([]bool, len(g.Ops))
	rules := make([]Rule, len(g.Ops))
	for i := range g.Ops {
		mirrored[i], rules[i] = p.Decide(&g.Ops[i])
	}
	return build(g, "mirror", mirrored, rules)
}

// build turns the mirrored set into a plan and the decision list.
func build(g *graph.Graph, strategy string, mirrored []bool, rules []Rule) (*Result, error) {
	order, recomputed := Schedule(g, mirrored)
	plan, err := sim.PlanFromSchedule(g, strategy, order)
	if err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	res := &Result{Plan: plan, Recomputed: recomputed}
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Phase != graph.Forward {
			continue
		}
		if mirrored[i] {
			res.Mirrored++
		}
		res.Decisions = append(res.Decisions, Decision{Op: op.ID, Name: op.Name, Type: op.Type,
			Mirrored: mirrored[i], Rule: rules[i], Reason: rules[i].String()})
	}
	return res, nil
}

// Schedule returns the op sequence of the mirror transform: forward ops run
// as in the graph; before each backward or update op, the clones of the
// mirrored ops it reads are computed, each clone reading the clones of its
// mirrored inputs (so a run of mirrored ops is recomputed from the nearest
// kept ancestor). Each clone is computed once, just before its first reader,
// and lives until its last reader. It also returns the number of recomputes.
func Schedule(g *graph.Graph, mirrored []bool) ([]graph.OpID, int) {
	order := make([]graph.OpID, 0, len(g.Ops)+len(g.Ops)/2)
	cloned := make([]bool, len(g.Ops))
	recomputed := 0
	var stack []graph.OpID
	// ensure computes the clone of op p after the clones it depends on,
	// iteratively (chains of mirrored ops can be thousands long).
	ensure := func(p graph.OpID) {
		stack = append(stack[:0], p)
		for len(stack) > 0 {
			top := stack[len(stack)-1]
			if cloned[top] {
				stack = stack[:len(stack)-1]
				continue
			}
			pending := false
			for _, u := range g.Ops[top].Inputs {
				q := g.Tensors[u].Producer
				if q != graph.NoOp && mirrored[q] && !cloned[q] {
					stack = append(stack, q)
					pending = true
				}
			}
			if pending {
				continue
			}
			cloned[top] = true
			order = append(order, top)
			recomputed++
			stack = stack[:len(stack)-1]
		}
	}
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Phase != graph.Forward {
			for _, t := range op.Inputs {
				if p := g.Tensors[t].Producer; p != graph.NoOp && mirrored[p] && g.Ops[p].Phase == graph.Forward {
					ensure(p)
				}
			}
		}
		order = append(order, op.ID)
	}
	return order, recomputed
}

// CostOptions configures the cost-aware pass.
type CostOptions struct {
	// Variant selects the BatchNorm rule.
	Variant Variant
	// Sim configures the simulator that judges each candidate group (its
	// Allocator must be nil or fresh: each judgement builds a new machine).
	// The zero value is the ideal allocator on an unlimited device.
	Sim sim.Options
}

// CostAware runs the cost-aware mirror pass. Candidates are the forward ops
// the predicate allows with mirroring on (force_mirroring=0 forces an op off,
// force_mirroring=1 on), grouped into connected groups of mirrorable ops.
// Following MXNet PR #18228, a group is dropped when recomputing it would
// release fewer bytes across the forward/backward gap than it keeps alive for
// the recompute. remat then lets the simulator judge: groups are added in
// forward order when they do not raise the simulated peak, and finally every
// group whose removal does not raise the peak is removed again, to save its
// recompute time. The returned plan's peak is never above the peak without
// mirroring. Cancelling ctx returns the best plan found so far.
func CostAware(ctx context.Context, g *graph.Graph, opts CostOptions) (*Result, error) {
	if g == nil {
		return nil, fmt.Errorf("mirror: graph is nil")
	}
	pred := Predicate{DoMirror: true, Variant: opts.Variant, HonourForceOff: true, NeverEmbedding: true}
	n := len(g.Ops)
	cand := make([]bool, n)
	forced := make([]bool, n)
	rules := make([]Rule, n)
	for i := range g.Ops {
		cand[i], rules[i] = pred.Decide(&g.Ops[i])
		forced[i] = rules[i] == RuleForceOn
	}
	groups := groupsOf(g, cand)
	mirrored := make([]bool, n)
	for i := range forced {
		mirrored[i] = forced[i]
	}
	judge := func() (int64, error) {
		order, _ := Schedule(g, mirrored)
		p, err := sim.PlanFromSchedule(g, "mirror-cost", order)
		if err != nil {
			return 0, err
		}
		res, err := sim.Simulate(g, p, opts.Sim)
		if err != nil {
			return 0, fmt.Errorf("mirror-cost: simulating candidate plan: %w", err)
		}
		return res.PeakAllocated, nil
	}
	best, err := judge()
	if err != nil {
		return nil, err
	}
	set := func(grp []graph.OpID, v bool, r Rule) {
		for _, o := range grp {
			if !forced[o] {
				mirrored[o] = v
				rules[o] = r
			}
		}
	}
	var accepted [][]graph.OpID
	for _, grp := range groups {
		if ctx.Err() != nil {
			break
		}
		if saved, kept := groupBalance(g, grp, cand); saved <= kept {
			set(grp, false, RuleCostKept)
			continue
		}
		set(grp, true, RuleCostMirrored)
		peak, err := judge()
		if err != nil {
			return nil, err
		}
		if peak <= best {
			best = peak
			accepted = append(accepted, grp)
		} else {
			set(grp, false, RuleSimKept)
		}
	}
	// Prune: drop groups that do not pay for their recompute time.
	for i := len(accepted) - 1; i >= 0 && ctx.Err() == nil; i-- {
		set(accepted[i], false, RuleSimKept)
		peak, err := judge()
		if err != nil {
			return nil, err
		}
		if peak <= best {
			best = peak
		} else {
			set(accepted[i], true, RuleCostMirrored)
		}
	}
	return build(g, "mirror-cost", mirrored, rules)
}

// groupsOf returns the connected groups of candidate forward ops (joined
// through tensors one candidate produces and another reads), in order of
// their first op, each sorted.
func groupsOf(g *graph.Graph, cand []bool) [][]graph.OpID {
	n := len(g.Ops)
	parent := make([]int32, n)
	for i := range parent {
		parent[i] = int32(i)
	}
	var find func(int32) int32
	find = func(x int32) int32 {
		for parent[x] != x {
			parent[x] = parent[parent[x]]
			x = parent[x]
		}
		return x
	}
	for i := range g.Ops {
		if !cand[i] {
			continue
		}
		for _, t := range g.Ops[i].Inputs {
			if p := g.Tensors[t].Producer; p != graph.NoOp && cand[p] {
				a, b := find(int32(i)), find(int32(p))
				if a != b {
					if a < b {
						parent[b] = a
					} else {
						parent[a] = b
					}
				}
			}
		}
	}
	index := make([]int32, n)
	for i := range index {
		index[i] = -1
	}
	var groups [][]graph.OpID
	for i := range g.Ops {
		if !cand[i] {
			continue
		}
		r := find(int32(i))
		if index[r] < 0 {
			index[r] = int32(len(groups))
			groups = append(groups, nil)
		}
		groups[index[r]] = append(groups[index[r]], graph.OpID(i))
	}
	return groups
}

// groupBalance estimates, for mirroring one group, the bytes it stops keeping
// across the forward/backward gap (outputs of the group that backward reads)
// and the bytes it must keep alive instead (tensors from outside the group
// that the group's recompute reads and backward would not have kept anyway).
func groupBalance(g *graph.Graph, grp []graph.OpID, cand []bool) (saved, kept int64) {
	readByBackward := func(t graph.TensorID) bool {
		for _, c := range g.Consumers(t) {
			if g.Ops[c].Phase != graph.Forward {
				return true
			}
		}
		return false
	}
	for _, o := range grp {
		op := &g.Ops[o]
		for _, t := range op.Outputs {
			if readByBackward(t) {
				saved += g.Tensors[t].StorageBytes()
			}
		}
		for _, t := range op.Inputs {
			tt := &g.Tensors[t]
			if tt.Producer == graph.NoOp || cand[tt.Producer] || tt.Kind.Persistent() {
				continue
			}
			if !readByBackward(t) {
				kept += g.Tensors[g.StorageOf(t)].Bytes
			}
		}
	}
	return saved, kept
}
