package chain

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/remat-dev/remat/graph"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// optTapedChain is a homogeneous chain whose stages save a tape of tape
// bytes for their backward, with weightless, gradient-free stages: Revolve's
// setting, where snapshots cost one unit and a taped step is reversed right
// away.
func optTapedChain(t testing.TB, L int, u, tape int64) *graph.Graph {
	sp := optChainSpec{}
	for k := 0; k < L; k++ {
		sp.act = append(sp.act, u)
		sp.grad = append(sp.grad, 0)
		sp.fwd = append(sp.fwd, 10)
		sp.bwd = append(sp.bwd, 20)
		sp.saved = append(sp.saved, tape)
	}
	return optChainGraph(t, sp)
}

// On a homogeneous chain Rotor reduces to Revolve: with the minimal memory
// plus s-1 snapshot units it re-runs exactly F(L, s) forward steps.
func TestRotorReducesToRevolve(t *testing.T) {
	for _, L := range []int{3, 10, 16, 25} {
		const u = 1000
		g := optTapedChain(t, L, u, 100*u)
		ch, err := StagesOf(g, StagesOptions{})
		require.NoError(t, err)
		rs, err := RotorStagesOf(ch, u)
		require.NoError(t, err)
		var base int64
		for _, s := range rs {
			base += s.Fwd + s.Bwd
		}
		top := 200 + L
		sol, err := RotorSolve(context.Background(), rs, top)
		require.NoError(t, err)
		require.True(t, sol.Feasible)
		mmin := sol.MinSlots
		for s := 1; s <= L; s++ {
			sol, err := RotorSolve(context.Background(), rs, mmin+s-1)
			require.NoError(t, err)
			require.True(t, sol.Feasible)
			f, _ := RevolveExtraForwards(int64(L), int64(s))
			assert.Equal(t, f, (sol.Time-base)/10, "L=%d s=%d", L, s)
			fwd := 0
			for _, a := range sol.Actions {
				if a.Kind != RotorBackward {
					fwd++
				}
			}
			assert.Equal(t, int64(L)+f, int64(fwd), "forward actions L=%d s=%d", L, s)
		}
	}
}

// The plans of Revolve and of Rotor on the taped chain agree with the
// simulator: Revolve's schedule recomputes F(L, s) stage forwards, and Rotor
// at the memory Revolve's plan needs is at least as fast.
func TestRevolvePlanAndRotorOnGraph(t *testing.T) {
	const L, u = 12, 1000
	g := optTapedChain(t, L, u, 20*u)
	for s := 1; s <= 5; s++ {
		p, rep, err := RevolvePlan(g, s, OptimalOptions{})
		require.NoError(t, err)
		res := optSimulate(t, g, p)
		f, _ := RevolveExtraForwards(L, int64(s))
		assert.Equal(t, int(f), rep.Recomputes, "s=%d", s)
		assert.Equal(t, res.TotalNs, rep.PredictedTime)
		assert.Equal(t, res.TotalNs, rep.SimTimeNs)

		p2, rep2, err := OptimalChain(context.Background(), g, res.PeakAllocated, OptimalOptions{Slots: int(res.PeakAllocated / 100)})
		require.NoError(t, err, "s=%d", s)
		res2 := optSimulate(t, g, p2)
		assert.LessOrEqual(t, res2.PeakAllocated, res.PeakAllocated)
		assert.LessOrEqual(t, res2.TotalNs, res.TotalNs, "s=%d", s)
		assert.Equal(t, rep2.PredictedTime, res2.TotalNs)
	}
}

// optEnumSchedules lists every schedule of S(i, l) the recurrence can
// express (leaf, chain, checkpoint at any j, recursively) in a chain whose
// last stage is last: a leaf runs the forward its backward needs (F_leaf),
// but the last stage's whole forward (F_all).
func optEnumSchedules(i, l, last int) [][]RotorAction {
	if i == l {
		k := RotorForwardLeaf
		if l == last {
			k = RotorForwardAll
		}
		return [][]RotorAction{{{k, int32(i)}, {RotorBackward, int32(i)}}}
	}
	var out [][]RotorAction
	for _, sub := range optEnumSchedules(i+1, l, last) {
		s := []RotorAction{{RotorForwardAll, int32(i)}}
		s = append(s, sub...)
		out = append(out, append(s, RotorAction{RotorBackward, int32(i)}))
	}
	for j := i + 1; j <= l; j++ {
		for _, a := range optEnumSchedules(j, l, last) {
			for _, b := range optEnumSchedules(i, j-1, last) {
				var s []RotorAction
				for k := i; k < j; k++ {
					s = append(s, RotorAction{RotorForwardNone, int32(k)})
				}
				s = append(s, a...)
				out = append(out, append(s, b...))
			}
		}
	}
	return out
}

// Brute force: on random heterogeneous chains of 2..8 stages, every
// schedule of the recurrence (up to a few thousand) is emitted as a plan and
// replayed in the simulator; the fastest one whose simulated peak fits the
// budget is compared with OptimalChain's plan at every distinct simulated
// peak as budget. With one byte per slot the solver must find the optimum.
func TestRotorMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for trial := 0; trial < 40; trial++ {
		L := 2 + trial%7
		sp := optChainSpec{paramBytes: 4 * r.Int64N(3)}
		for k := 0; k < L; k++ {
			sp.act = append(sp.act, 10*(1+r.Int64N(20)))
			if trial%2 == 0 {
				sp.grad = append(sp.grad, sp.act[k])
			} else {
				sp.grad = append(sp.grad, 10*r.Int64N(20))
			}
			sp.fwd = append(sp.fwd, 1+r.Int64N(30))
			sp.bwd = append(sp.bwd, 1+r.Int64N(60))
			sp.saved = append(sp.saved, 10*r.Int64N(20))
		}
		g := optChainGraph(t, sp)
		ch, err := StagesOf(g, StagesOptions{})
		require.NoError(t, err)
		scheds := optEnumSchedules(0, L-1, L-1)
		type pt struct{ peak, time int64 }
		var pts []pt
		for _, s := range scheds {
			p, _, err := StagesPlan(g, ch, s, "brute")
			require.NoError(t, err)
			res := optSimulate(t, g, p)
			pts = append(pts, pt{res.PeakAllocated, res.TotalNs})
		}
		budgets := map[int64]bool{}
		for _, p := range pts {
			budgets[p.peak] = true
		}
		for b := range budgets {
			best := int64(-1)
			for _, p := range pts {
				if p.peak <= b && (best < 0 || p.time < best) {
					best = p.time
				}
			}
			plan, rep, err := OptimalChain(context.Background(), g, b, OptimalOptions{Slots: int(b)})
			require.NoError(t, err, "trial %d budget %d", trial, b)
			res := optSimulate(t, g, plan)
			assert.LessOrEqual(t, res.PeakAllocated, b)
			assert.LessOrEqual(t, res.PeakAllocated, rep.PredictedPeak, "the solver's bound")
			assert.Equal(t, rep.PredictedTime, res.TotalNs)
			assert.Equal(t, best, res.TotalNs, "trial %d L=%d budget %d: brute-force optimum", trial, L, b)
		}
	}
}

func TestRotorSolveErrors(t *testing.T) {
	_, err := RotorSolve(context.Background(), nil, 10)
	assert.ErrorContains(t, err, "0 stages")
	_, err = RotorSolve(context.Background(), []RotorStage{{Fwd: -1}}, 10)
	assert.ErrorContains(t, err, "negative")
	_, err = RotorSolve(context.Background(), []RotorStage{{}}, -1)
	assert.ErrorContains(t, err, "memory")
	big := make([]RotorStage, 1000)
	_, err = RotorSolve(context.Background(), big, 1000)
	// 1000 stages: 1000*1001/2 = 500500 pairs, times 1001 levels.
	assert.ErrorContains(t, err, "1000 stages need 500500 stage pairs x 1001 memory levels (1000 slots + 1 + 0 released) = 501000500 table entries")
	assert.ErrorContains(t, err, "--slots")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = RotorSolve(ctx, make([]RotorStage, 5), 10)
	assert.ErrorIs(t, err, context.Canceled)
	// A stage that does not fit at all.
	sol, err := RotorSolve(context.Background(), []RotorStage{{FwdAll: 5, XBar: 5}}, 4)
	require.NoError(t, err)
	assert.False(t, sol.Feasible)
	assert.Equal(t, -1, sol.MinSlots)
}
