package chain

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oraclePoint is one schedule's figures under the chain model: the least
// memory it fits in and its time.
type oraclePoint struct{ need, time int64 }

// oracleFrontiers enumerates, for every subchain i..l and both subproblem
// kinds (S and S1, see rotor.go), every schedule the recurrence can
// express, in exact memory units, keeping the Pareto frontier (least need
// for each time). It shares no code with RotorSolve: it composes whole
// schedules' figures instead of filling a table indexed by memory, so that
// it checks the table's indexing, clamping and the released-memory
// offsets. Memory is unbounded here; a schedule fits m when need <= m.
type oracleFrontiers struct {
	st         []RotorStage
	memo, mem1 map[[2]int][]oraclePoint
}

func newOracle(st []RotorStage) *oracleFrontiers {
	return &oracleFrontiers{st: st, memo: map[[2]int][]oraclePoint{}, mem1: map[[2]int][]oraclePoint{}}
}

func (o *oracleFrontiers) din(l int) int64 {
	if l+1 < len(o.st) {
		return o.st[l+1].GradOut
	}
	return 0
}

// pg is the net memory the backward of stages a..b leaves held (held
// gradients minus released pinned memory).
func (o *oracleFrontiers) pg(a, b int) int64 {
	var s int64
	for k := a; k <= b; k++ {
		s += o.st[k].HeldGrad - o.st[k].Release
	}
	return s
}

func pareto(ps []oraclePoint) []oraclePoint {
	slices.SortFunc(ps, func(a, b oraclePoint) int {
		if a.time != b.time {
			return cmpInt(a.time, b.time)
		}
		return cmpInt(a.need, b.need)
	})
	var out []oraclePoint
	for _, p := range ps {
		if len(out) == 0 || p.need < out[len(out)-1].need {
			out = append(out, p)
		}
	}
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// s returns the frontier of S(i, l) (once: S1(i, l)).
func (o *oracleFrontiers) s(i, l int, once bool) []oraclePoint {
	memo := o.memo
	if once {
		memo = o.mem1
	}
	if r, ok := memo[[2]int{i, l}]; ok {
		return r
	}
	si := o.st[i]
	c := si.Fwd + si.Bwd
	var in, inBwd int64
	if once {
		in, inBwd = si.In, si.InBwd
	}
	var ps []oraclePoint
	if i == l {
		fwd, fpeak := si.Fwd, si.FwdAll
		if si.LeafSet && l+1 < len(o.st) {
			fwd, fpeak = si.FwdLeaf, si.FwdLeafPeak
		}
		ps = append(ps, oraclePoint{max(o.din(i)+in+fpeak, o.din(i)+inBwd+si.XBarBwd+si.BwdPeak), fwd + si.Bwd})
	} else {
		bwdNeed := o.pg(i+1, l) + o.din(i) + inBwd + si.XBarBwd + si.BwdPeak
		lo := max(o.din(l)+in+si.FwdAll, bwdNeed)
		for _, p := range o.s(i+1, l, false) {
			ps = append(ps, oraclePoint{max(lo, p.need+inBwd+si.XBar), c + p.time})
		}
		if si.XBarRest+o.st[i+1].In <= si.XBar {
			for _, p := range o.s(i+1, l, true) {
				ps = append(ps, oraclePoint{max(lo, p.need+inBwd+si.XBarRest), c + p.time})
			}
		}
		if !once {
			var ph1, cf int64
			for j := i + 1; j <= l; j++ {
				k := j - 1
				v := o.st[k].FwdNone
				if k > i {
					v += o.st[k].In
				}
				ph1 = max(ph1, v)
				cf += o.st[k].Fwd
				pg := o.pg(j, l)
				lo := max(o.din(l)+ph1, pg, 0)
				for _, b := range o.s(i, j-1, false) {
					for _, a := range o.s(j, l, false) {
						ps = append(ps, oraclePoint{max(lo, a.need+o.st[j].In, b.need+pg), cf + a.time + b.time})
					}
					for _, a := range o.s(j, l, true) {
						ps = append(ps, oraclePoint{max(lo, a.need, b.need+pg), cf + a.time + b.time})
					}
				}
			}
		}
	}
	r := pareto(ps)
	memo[[2]int{i, l}] = r
	return r
}

// best is the least time of the whole chain within m, -1 if none fits.
func (o *oracleFrontiers) best(m int64) int64 {
	for _, p := range o.s(0, len(o.st)-1, false) {
		if p.need <= m {
			return p.time
		}
	}
	return -1
}

// TestRotorMatchesExhaustiveOptimum: on random chains of 1..12 stages with
// heterogeneous figures (saved activations, gradients, held gradients,
// released pinned memory, inputs the backward does or does not read),
// RotorSolve's time equals the exhaustive optimum over every schedule of
// the recurrence at every memory from the least feasible one up to where no
// recomputation is needed, and its schedule's figures replayed by the
// oracle's rules fit.
func TestRotorMatchesExhaustiveOptimum(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 5))
	trials := 120
	if testing.Short() {
		trials = 30
	}
	for trial := 0; trial < trials; trial++ {
		L := 1 + trial%12
		st := make([]RotorStage, L)
		for k := range st {
			s := &st[k]
			s.Fwd, s.Bwd = 1+r.Int64N(20), 1+r.Int64N(40)
			s.In = r.Int64N(6)
			if r.IntN(2) == 0 {
				s.InBwd = s.In
			}
			out := r.Int64N(6)
			saved := r.Int64N(8)
			s.XBar = out + saved
			s.XBarBwd = saved
			s.XBarRest = saved
			if r.IntN(3) == 0 { // the backward reads the output
				s.XBarBwd += out
				s.XBarRest += out
			}
			s.FwdNone = out + r.Int64N(4)
			s.FwdAll = s.XBar + r.Int64N(4)
			s.BwdPeak = r.Int64N(8)
			s.GradOut = r.Int64N(5)
			s.HeldGrad = r.Int64N(3)
			if r.IntN(3) == 0 {
				s.Release = r.Int64N(6)
			}
			if r.IntN(4) != 0 {
				s.LeafSet = true
				s.FwdLeaf = r.Int64N(s.Fwd + 1)
				s.FwdLeafPeak = s.XBarBwd + r.Int64N(s.FwdAll-s.XBarBwd+1)
			}
		}
		o := newOracle(st)
		front := o.s(0, L-1, false)
		require.NotEmpty(t, front)
		top := front[0].need // the fastest schedule's need
		least := front[len(front)-1].need
		for m := max(least-1, 0); m <= top+1; m++ {
			want := o.best(m)
			sol, err := RotorSolve(context.Background(), st, int(m))
			require.NoError(t, err)
			if want < 0 {
				assert.False(t, sol.Feasible, "trial %d L=%d m=%d: oracle finds nothing", trial, L, m)
				continue
			}
			require.True(t, sol.Feasible, "trial %d L=%d m=%d: oracle finds %d", trial, L, m, want)
			assert.Equal(t, want, sol.Time, "trial %d L=%d m=%d", trial, L, m)
			assert.Equal(t, int(least), sol.MinSlots, "trial %d L=%d", trial, L)
			// The schedule runs every stage's backward once, after a forward.
			var fw, bw int64
			for _, a := range sol.Actions {
				switch a.Kind {
				case RotorBackward:
					bw += st[a.Stage].Bwd
				case RotorForwardLeaf:
					fw += st[a.Stage].FwdLeaf
				default:
					fw += st[a.Stage].Fwd
				}
			}
			assert.Equal(t, sol.Time, fw+bw, "trial %d: the schedule's time", trial)
		}
	}
}

// sample draws one schedule of S(i, l) (once: S1(i, l)) at random among
// the recurrence's choices and returns its figures under the model and its
// actions, composed as the oracle composes them.
func (o *oracleFrontiers) sample(r *rand.Rand, i, l int, once bool) (need, time int64, acts []RotorAction) {
	si := o.st[i]
	var in, inBwd int64
	if once {
		in, inBwd = si.In, si.InBwd
	}
	if i == l {
		fwd, fpeak, k := si.Fwd, si.FwdAll, RotorForwardAll
		if si.LeafSet && l+1 < len(o.st) {
			fwd, fpeak, k = si.FwdLeaf, si.FwdLeafPeak, RotorForwardLeaf
		}
		return max(o.din(i)+in+fpeak, o.din(i)+inBwd+si.XBarBwd+si.BwdPeak), fwd + si.Bwd,
			[]RotorAction{{k, int32(i)}, {RotorBackward, int32(i)}}
	}
	c := si.Fwd + si.Bwd
	lo := max(o.din(l)+in+si.FwdAll, o.pg(i+1, l)+o.din(i)+inBwd+si.XBarBwd+si.BwdPeak)
	canOnce := si.XBarRest+o.st[i+1].In <= si.XBar
	choices := 1 // chain through S
	if canOnce {
		choices++ // chain through S1
	}
	if !once {
		choices += 2 * (l - i) // checkpoint j through S or S1
	}
	ch := r.IntN(choices)
	chain := func(sub bool, off int64) (int64, int64, []RotorAction) {
		n, t, a := o.sample(r, i+1, l, sub)
		acts := append([]RotorAction{{RotorForwardAll, int32(i)}}, a...)
		return max(lo, n+inBwd+off), c + t, append(acts, RotorAction{RotorBackward, int32(i)})
	}
	switch {
	case ch == 0:
		return chain(false, si.XBar)
	case ch == 1 && canOnce:
		return chain(true, si.XBarRest)
	}
	if canOnce {
		ch--
	}
	ch--
	j, sub := i+1+ch/2, ch%2 == 1
	var ph1, cf int64
	for k := i; k < j; k++ {
		v := o.st[k].FwdNone
		if k > i {
			v += o.st[k].In
		}
		ph1 = max(ph1, v)
		cf += o.st[k].Fwd
		acts = append(acts, RotorAction{RotorForwardNone, int32(k)})
	}
	pg := o.pg(j, l)
	an, at, aa := o.sample(r, j, l, sub)
	bn, bt, ba := o.sample(r, i, j-1, false)
	aoff := o.st[j].In
	if sub {
		aoff = 0
	}
	acts = append(append(acts, aa...), ba...)
	return max(o.din(l)+ph1, pg, 0, an+aoff, bn+pg), cf + at + bt, acts
}

// The chain model is exact for the chain graphs it sees: on random chains
// of up to 12 stages, random schedules of the recurrence, emitted as plans
// and replayed by the simulator, take exactly the model's time and peak
// (pinned bytes plus the schedule's need). With TestRotorMatchesExhaustive-
// Optimum, the DP's plan is then the simulated optimum of the recurrence's
// schedules on every such chain.
func TestChainModelMatchesSimulator(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	exact, total := 0, 0
	for trial := 0; trial < 24; trial++ {
		L := 1 + trial%12
		sp := optChainSpec{paramBytes: 4 * r.Int64N(3)}
		for k := 0; k < L; k++ {
			sp.act = append(sp.act, 10*(1+r.Int64N(20)))
			sp.grad = append(sp.grad, 10*r.Int64N(20))
			sp.fwd = append(sp.fwd, 1+r.Int64N(30))
			sp.bwd = append(sp.bwd, 1+r.Int64N(60))
			sp.saved = append(sp.saved, 10*r.Int64N(20))
		}
		g := optChainGraph(t, sp)
		ch, err := StagesOf(g, StagesOptions{})
		require.NoError(t, err)
		st, err := RotorStagesOf(ch, 1)
		require.NoError(t, err)
		o := newOracle(st)
		for n := 0; n < 25; n++ {
			need, tm, acts := o.sample(r, 0, len(st)-1, false)
			plan, _, err := StagesPlan(g, ch, acts, "sample")
			require.NoError(t, err)
			res := optSimulate(t, g, plan)
			assert.Equal(t, tm+ch.PinnedTime+ch.UpdateTime, res.TotalNs, "trial %d: %v", trial, acts)
			model := max(ch.Pinned+need, ch.UpdatePeak)
			assert.Equal(t, model, res.PeakAllocated, "trial %d: %v", trial, acts)
			total++
			if res.PeakAllocated == model {
				exact++
			}
		}
	}
	t.Logf("simulated peak equal to the model's in %d of %d random schedules", exact, total)
}

// On DAGs (residual blocks, traced-style steps with in-place ReLU, views and
// a dropout) the model is an upper bound of the simulator: random schedules
// take exactly its time and never more than its memory.
func TestChainModelBoundsSimulatorOnDAGs(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 1))
	exact, total := 0, 0
	for trial := 0; trial < 12; trial++ {
		var g *graph.Graph
		if trial%2 == 0 {
			g = optResNetGraph(t, 1+trial/2, 1000)
		} else {
			g = tracedStyleGraph(t, 2+trial/2, 1000, 64, trial%4 == 1)
		}
		so, err := stageCallbacks(g, sim.Options{}, nil)
		require.NoError(t, err)
		ch, err := StagesOf(g, so)
		require.NoError(t, err)
		st, err := RotorStagesOf(ch, 1)
		require.NoError(t, err)
		o := newOracle(st)
		for n := 0; n < 25; n++ {
			need, tm, acts := o.sample(r, 0, len(st)-1, false)
			plan, _, err := StagesPlan(g, ch, acts, "sample")
			require.NoError(t, err)
			res := optSimulate(t, g, plan)
			assert.Equal(t, tm+ch.PinnedTime+ch.UpdateTime, res.TotalNs, "trial %d: %v", trial, acts)
			model := max(ch.Pinned+need, ch.UpdatePeak)
			assert.LessOrEqual(t, res.PeakAllocated, model, "trial %d: %v", trial, acts)
			total++
			if res.PeakAllocated == model {
				exact++
			}
		}
	}
	t.Logf("simulated peak equal to the model's in %d of %d random schedules", exact, total)
}

// On those DAGs the DP's accounting is exact for the schedules it picks:
// at every memory level from the least feasible to the no-recompute peak,
// the level's optimal schedule replays with a simulated peak equal to the
// pinned bytes plus the least level with that schedule's time.
func TestDPExactOnDAGs(t *testing.T) {
	levels := 0
	for trial := 0; trial < 10; trial++ {
		var g *graph.Graph
		if trial%2 == 0 {
			g = optResNetGraph(t, 1+trial/2, 1000)
		} else {
			g = tracedStyleGraph(t, 2+trial/2, 1000, 64, trial%4 == 1)
		}
		so, err := stageCallbacks(g, sim.Options{}, nil)
		require.NoError(t, err)
		ch, err := StagesOf(g, so)
		require.NoError(t, err)
		st, err := RotorStagesOf(ch, 1)
		require.NoError(t, err)
		base := optSimulate(t, g, sim.DefaultPlan(g))
		mem := int(base.PeakAllocated)
		tab, err := rotorBuild(context.Background(), st, mem, nil)
		require.NoError(t, err)
		lo := tab.minSlots()
		require.GreaterOrEqual(t, lo, 0)
		last := -1
		for m := lo; m <= mem; m++ {
			u := tab.usedSlots(m)
			if u == last {
				continue
			}
			last = u
			acts, err := tab.schedule(u)
			require.NoError(t, err)
			p, _, err := StagesPlan(g, ch, acts, "dp")
			require.NoError(t, err)
			res := optSimulate(t, g, p)
			assert.Equal(t, max(ch.Pinned+int64(u), ch.UpdatePeak), res.PeakAllocated, "%s trial %d level %d: %v", g.Name, trial, u, acts)
			assert.Equal(t, tab.top()[u]+ch.PinnedTime+ch.UpdateTime, res.TotalNs, "%s trial %d level %d", g.Name, trial, u)
			levels++
		}
	}
	t.Logf("%d distinct DP schedules replayed", levels)
}
