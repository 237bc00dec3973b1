package mirror

import (
	"context"
	"errors"
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
		return nil, errors.New("mirror: graph is nil")
	}
	mirrored := make([]bool, len(g.Ops))
	rules := make([]Rule, len(g.Ops))
	for i := range g.Ops {
		r, err := p.Decide(&g.Ops[i])
		if err != nil {
			return nil, err
		}
		mirrored[i], rules[i] = r.Mirrors(), r
	}
	dropOverwrittenReaders(g, mirrored, rules)
	return build(g, "mirror", mirrored, rules)
}

// dropOverwrittenReaders unmarks (RuleNotRecomputable) each marked op
// whose recompute would read other data than its first run read, because a
// forward op wrote the storage it reads in place (the optimizer's in-place
// updates come after the backward pass and do not count). Schedule reruns
// a read tensor's producer, and through a view its base's, when they are
// marked; in-place ops are never marked. So the reader's recompute either
// makes the storage afresh (remade), and must not read it after an
// in-place write, or reads the storage kept from the forward pass, and
// must not read it before one.
//
//   - Kept and overwritten later: PyTorch's autograd clones a tensor before
//     an in-place op that destroys what a backward formula needs. Before
//     efficientnet's nn.SiLU(inplace=True) the clone reads a convolution's
//     output (never mirrored), and remat_torch.apply refused the plan that
//     recomputed it; before mobilenet_v2's ReLU6(inplace=True) it reads a
//     batch norm's output, remade with it.
//   - Remade without the writes before: Swin Transformer's shifted-window
//     attention mask is new_zeros filled in place through views (fill_),
//     then viewed and cloned; mirror re-ran new_zeros, the view and the
//     clone, and the applied step's gradients were wrong.
//
// Unmarking an op can unmark its readers, so it runs to a fixed point.
func dropOverwrittenReaders(g *graph.Graph, marked []bool, rules []Rule) {
	w := graph.ForwardWrites(g)
	if !w.Any {
		return // no forward op writes in place: every recompute reads what it read
	}
	// remade[t]: the recompute of a reader of t makes t's storage afresh
	// (Schedule reruns t's producer, and through a view its base's, when
	// they are marked); otherwise the reader reads the storage kept from
	// the forward pass, as the last forward write left it.
	remade := make([]bool, len(g.Tensors))
	for changed := true; changed; {
		changed = false
		for i := range g.Ops {
			op := &g.Ops[i]
			for _, o := range op.Outputs {
				remade[o] = false
				if !marked[i] || op.Flags.Has(graph.InPlace) {
					continue
				}
				if r := w.Root[o]; r == o {
					remade[o] = true
				} else {
					for _, u := range op.Inputs {
						if w.Root[u] == r {
							remade[o] = remade[u]
							break
						}
					}
				}
			}
		}
		for i := range g.Ops {
			if !marked[i] {
				continue
			}
			for k, in := range g.Ops[i].Inputs {
				r := w.Root[in]
				// written: an in-place op wrote the storage after its
				// producer made it and before op i read it
				last := w.Before(graph.OpID(i), k)
				written := last != graph.NoOp && last != g.Tensors[r].Producer
				if remade[in] && written || !remade[in] && w.Last[r] > int32(i) {
					marked[i], rules[i], changed = false, RuleNotRecomputable, true
					break
				}
			}
		}
	}
}

// build turns the mirrored set into a plan and the decision list.
func build(g *graph.Graph, strategy string, mirrored []bool, rules []Rule) (*Result, error) {
	order, err := Schedule(g, mirrored)
	if err != nil {
		return nil, err
	}
	plan, err := sim.PlanFromSchedule(g, strategy, order)
	if err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	res := &Result{Plan: plan, Recomputed: len(order) - len(g.Ops)}
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
// and lives until its last reader. The number of recomputes is
// len(order) - len(g.Ops). mirrored has one entry per op; a nil graph or a
// slice of another length is an error.
func Schedule(g *graph.Graph, mirrored []bool) ([]graph.OpID, error) {
	if g == nil {
		return nil, errors.New("mirror: graph is nil")
	}
	if len(mirrored) != len(g.Ops) {
		return nil, fmt.Errorf("mirror: mirrored has %d entries, expected one per op (%d)", len(mirrored), len(g.Ops))
	}
	order := make([]graph.OpID, 0, len(g.Ops)+len(g.Ops)/2)
	cloned := make([]bool, len(g.Ops))
	// mp[t]: the producer of tensor t if it is mirrored, else NoOp (the
	// walks below read the graph's dense index, not its Op and Tensor
	// structs)
	d := g.Dense()
	mp := make([]graph.OpID, len(g.Tensors))
	for t, p := range d.Producer {
		mp[t] = graph.NoOp
		if p != graph.NoOp && mirrored[p] {
			mp[t] = p
		}
	}
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
			for _, u := range d.Inputs(top) {
				if q := mp[u]; q != graph.NoOp && !cloned[q] {
					stack = append(stack, q)
					pending = true
				}
			}
			if pending {
				continue
			}
			cloned[top] = true
			order = append(order, top)
			stack = stack[:len(stack)-1]
		}
	}
	for i, ph := range d.Phase {
		if ph != graph.Forward {
			for _, t := range d.Inputs(graph.OpID(i)) {
				if p := mp[t]; p != graph.NoOp && d.Phase[p] == graph.Forward {
					ensure(p)
				}
			}
		}
		order = append(order, graph.OpID(i))
	}
	return order, nil
}

// CostOptions configures the cost-aware pass.
type CostOptions struct {
	// Variant selects the BatchNorm rule.
	Variant Variant
	// Sim configures the memory model that judges each candidate group
	// (workspaces, atomic clean policy) and the simulator that checks the
	// final plan. Capacity and allocator are ignored: peaks are the ideal
	// allocator's. The zero value is sim's default.
	Sim sim.Options
}

// CostAware runs the cost-aware mirror pass. Candidates are the forward ops
// the predicate allows with mirroring on (force_mirroring=0 forces an op off,
// force_mirroring=1 on), grouped into connected groups of mirrorable ops.
// Following MXNet PR #18228, a group is dropped when recomputing it would
// release fewer bytes across the forward/backward gap than it keeps alive for
// the recompute. remat then judges by the simulated peak: groups are added in
// forward order when they do not raise the peak, and finally every group
// whose removal does not raise the peak is removed again, to save its
// recompute time. Each judgement is incremental (a memory curve over every
// step any choice of groups can produce, updated in O(log n) per storage the
// group touches), so the pass is O((n + e) log n) rather than a replay per
// group. The returned plan's peak, checked by the simulator, is never above
// the peak without cost-aware mirroring (force-mirrored ops only).
// Cancelling ctx returns the best plan found so far.
func CostAware(ctx context.Context, g *graph.Graph, opts CostOptions) (*Result, error) {
	if g == nil {
		return nil, errors.New("mirror: graph is nil")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	pred := Predicate{DoMirror: true, Variant: opts.Variant, HonourForceOff: true, NeverEmbedding: true}
	n := len(g.Ops)
	cand := make([]bool, n)
	forced := make([]bool, n)
	rules := make([]Rule, n)
	for i := range g.Ops {
		r, err := pred.Decide(&g.Ops[i])
		if err != nil {
			return nil, err
		}
		cand[i], rules[i] = r.Mirrors(), r
		forced[i] = r == RuleForceOn
	}
	// A candidate reading a storage written in place later is one only with
	// its producer: then both are in one group (groupsOf joins connected
	// candidates), mirrored together or not at all.
	dropOverwrittenReaders(g, cand, rules)
	for i := range forced {
		forced[i] = forced[i] && cand[i]
	}
	groups := groupsOf(g, cand)
	groupOf := make([]int32, n)
	for i := range groupOf {
		groupOf[i] = -1
	}
	for gi, grp := range groups {
		for _, o := range grp {
			groupOf[o] = int32(gi)
		}
	}
	mirrored := make([]bool, n)
	copy(mirrored, forced)
	model, _, err := newPeakModel(g, opts.Sim, groups, groupOf, forced)
	if err != nil {
		return nil, err
	}
	best := model.peak()
	set := func(gi int, v bool, r Rule) {
		model.set(int32(gi), v)
		for _, o := range groups[gi] {
			if !forced[o] {
				mirrored[o] = v
				rules[o] = r
			}
		}
	}
	var accepted []int
	var canceled error
	bal := newBalance(g, cand)
	for gi, grp := range groups {
		if canceled = sim.Canceled(ctx, "mirror-cost"); canceled != nil {
			break
		}
		if saved, kept := bal.of(grp); saved <= kept {
			set(gi, false, RuleCostKept)
			continue
		}
		set(gi, true, RuleCostMirrored)
		if peak := model.peak(); peak <= best {
			best = peak
			accepted = append(accepted, gi)
		} else {
			set(gi, false, RuleSimKept)
		}
	}
	// Prune: drop groups that do not pay for their recompute time.
	for i := len(accepted) - 1; i >= 0 && canceled == nil; i-- {
		if canceled = sim.Canceled(ctx, "mirror-cost"); canceled != nil {
			break
		}
		set(accepted[i], false, RuleSimKept)
		if peak := model.peak(); peak <= best {
			best = peak
		} else {
			set(accepted[i], true, RuleCostMirrored)
		}
	}
	res, err := build(g, "mirror-cost", mirrored, rules)
	if err != nil {
		return nil, err
	}
	// The model is exact with one live workspace (the default, tested
	// against the simulator); with more, check the plan with the simulator
	// so that the promise holds for every option.
	if len(accepted) > 0 && sim.TempSlots(opts.Sim.NumTemp, opts.Sim.WorkerThreads) > 1 {
		if err := checkNotWorse(g, res, forced, rules, opts.Sim, &res); err != nil {
			return nil, err
		}
	}
	return res, canceled
}

// checkNotWorse simulates res and the force-mirrored-only plan and replaces
// *out by the latter when res has the higher peak.
func checkNotWorse(g *graph.Graph, res *Result, forced []bool, rules []Rule, so sim.Options, out **Result) error {
	so.Capacity, so.Allocator, so.ReserveAll = -1, nil, false
	so.Timeline, so.Trace = false, false
	got, err := sim.Simulate(g, res.Plan, so)
	if err != nil {
		return fmt.Errorf("mirror-cost: simulating the plan: %w", err)
	}
	base, err := build(g, "mirror-cost", forced, rules)
	if err != nil {
		return err
	}
	want, err := sim.Simulate(g, base.Plan, so)
	if err != nil {
		return fmt.Errorf("mirror-cost: simulating the force-mirrored plan: %w", err)
	}
	if got.PeakAllocated > want.PeakAllocated {
		for i := range base.Decisions {
			if d := &base.Decisions[i]; !d.Mirrored && d.Rule == RuleCostMirrored {
				d.Rule, d.Reason = RuleSimKept, RuleSimKept.String()
			}
		}
		*out = base
	}
	return nil
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
	d := g.Dense()
	for i := range g.Ops {
		if !cand[i] {
			continue
		}
		for _, t := range d.Inputs(graph.OpID(i)) {
			if p := d.Producer[t]; p != graph.NoOp && cand[p] {
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

// balance estimates, for mirroring one group, the bytes it stops keeping
// across the forward/backward gap (storages the group's ops own that
// backward reads, directly or through a view) and the bytes it must keep
// alive instead (storages from outside the group that the group's recompute
// reads and backward would not have kept anyway). Storage is what counts:
// traced steps read most activations through views (a reshape before a
// matmul), so a view read by backward keeps its base alive.
type balance struct {
	d      *graph.Dense
	cand   []bool
	byBack []bool // per storage: some non-forward op reads it or a view of it
}

func newBalance(g *graph.Graph, cand []bool) *balance {
	d := g.Dense()
	return &balance{d: d, cand: cand, byBack: d.ReadOutsideForward()}
}

func (b *balance) of(grp []graph.OpID) (saved, kept int64) {
	d, root := b.d, b.d.Root
	for _, o := range grp {
		for _, t := range d.Outputs(o) {
			if root[t] == t && b.byBack[t] {
				saved += d.StorageBytes[t]
			}
		}
		for _, t := range d.Inputs(o) {
			if p := d.Producer[t]; p == graph.NoOp || b.cand[p] || d.Kind[t].Persistent() {
				continue
			}
			if r := root[t]; !b.byBack[r] {
				kept += d.StorageBytes[r]
			}
		}
	}
	return saved, kept
}
