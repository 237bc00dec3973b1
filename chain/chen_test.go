package chain

import (
	"context"
	"testing"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func optUnit(n int) ([]int64, []bool) {
	s := make([]int64, n)
	c := make([]bool, n)
	for i := range s {
		s[i], c[i] = 1, true
	}
	return s, c
}

func optSeq(start, step, n int) []int32 {
	var v []int32
	for i := 0; i < n; i++ {
		v = append(v, int32(start+i*step))
	}
	return v
}

// Test vectors of /work/shared/references.md section 2 (Chen et al. 2016's
// greedy planner on a unit-size chain, all nodes candidates).
func TestChenGreedyVectors(t *testing.T) {
	cases := []struct {
		n    int
		b    int64
		kept []int32
		x, y int64
	}{
		{16, 0, optSeq(0, 1, 16), 16, 1},
		{16, 3, []int32{3, 7, 11, 15}, 4, 4},
		{16, 4, []int32{4, 9, 14}, 3, 5},
		{100, 9, optSeq(9, 10, 10), 10, 10},
		{100, 10, optSeq(10, 11, 9), 9, 11},
	}
	for _, c := range cases {
		s, cand := optUnit(c.n)
		kept, x, y := ChenGreedy(s, cand, c.b)
		assert.Equal(t, c.kept, kept, "n=%d B=%d", c.n, c.b)
		assert.Equal(t, c.x, x, "x n=%d B=%d", c.n, c.b)
		assert.Equal(t, c.y, y, "y n=%d B=%d", c.n, c.b)
	}
	assert.Equal(t, int32(98), optSeq(10, 11, 9)[8])
	// Only candidates may be kept.
	s, cand := optUnit(8)
	for i := range cand {
		cand[i] = i%2 == 1
	}
	kept, _, _ := ChenGreedy(s, cand, 2)
	assert.Equal(t, []int32{3, 7}, kept)
}

func TestChenSqrtKept(t *testing.T) {
	assert.Equal(t, []int32{3, 7, 11, 15}, ChenSqrtKept(16))
	assert.Equal(t, optSeq(9, 10, 10), ChenSqrtKept(100))
	assert.Equal(t, []int32{0}, ChenSqrtKept(1))
	assert.Nil(t, ChenSqrtKept(0))
}

func TestChenBudgetSearchMemonger(t *testing.T) {
	sizes, cand := optUnit(100)
	// Cost: the classic estimate x + y of the plan.
	var calls []int64
	cost := func(kept []int32) (int64, int64, error) {
		n := int64(len(kept))
		// The largest segment between kept nodes.
		prev, seg := int32(-1), int64(0)
		for _, k := range kept {
			seg = max(seg, int64(k-prev))
			prev = k
		}
		seg = max(seg, int64(99-prev))
		calls = append(calls, n+seg)
		return n + seg, 0, nil
	}
	best, hist, err := ChenBudgetSearch(context.Background(), sizes, cand, 6, cost)
	require.NoError(t, err)
	// Rounds: B=0 keeps all (x=100, y=1) -> B=sqrt(50)=7 -> keeps every 8th
	// (x=12, y=8) -> B=sqrt(48)=6; grid from min y = 1 up to 6*sqrt2 = 8.
	require.GreaterOrEqual(t, len(hist), 3)
	assert.Equal(t, []int64{0, 7, 6}, []int64{hist[0].Budget, hist[1].Budget, hist[2].Budget})
	assert.Equal(t, int64(100), hist[0].X)
	assert.Equal(t, int64(1), hist[0].Y)
	assert.Equal(t, int64(12), hist[1].X)
	assert.Equal(t, int64(8), hist[1].Y)
	assert.Len(t, hist, 3+6, "grid step (8-1)/6 = 1 > 0")
	assert.Equal(t, int64(2), hist[3].Budget)
	for _, p := range hist {
		assert.GreaterOrEqual(t, p.Cost, best.Cost)
	}
	assert.Equal(t, len(hist), len(calls))
	// Cancelled: the best so far (nothing) and the context's error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, hist, err = ChenBudgetSearch(ctx, sizes, cand, 6, cost)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, hist)
}

func TestChenPlansOnChain(t *testing.T) {
	const L, u = 16, 1000
	g := optUniformChain(t, L, u)
	base := optSimulate(t, g, sim.DefaultPlan(g))
	ctx := context.Background()

	p, rep, err := ChenSqrt(ctx, g, ChenOptions{})
	require.NoError(t, err)
	res := optSimulate(t, g, p)
	assert.Equal(t, rep.SimPeak, res.PeakAllocated)
	// 15 candidates -> every 4th kept: stages 3, 7, 11.
	assert.Equal(t, []int32{3, 7, 11}, rep.KeptStages)
	assert.Less(t, res.PeakAllocated, base.PeakAllocated)
	// Every dropped stage is recomputed once: 16 stages minus 3 kept minus
	// the last segment (stages 12..15) not re-run.
	assert.Equal(t, 16-3-4, rep.Recomputes)
	assert.Equal(t, base.TotalNs+int64(rep.Recomputes)*10, res.TotalNs)

	p, rep2, err := ChenGreedyPlan(ctx, g, ChenOptions{})
	require.NoError(t, err)
	res2 := optSimulate(t, g, p)
	assert.Equal(t, rep2.SimPeak, res2.PeakAllocated)
	assert.LessOrEqual(t, res2.PeakAllocated, res.PeakAllocated, "the search includes sqrt-like budgets")
	for _, h := range rep2.History {
		assert.GreaterOrEqual(t, h.Cost, rep2.SimPeak)
	}
	// Budget mode: the fastest searched plan within the budget.
	p, rep3, err := ChenGreedyPlan(ctx, g, ChenOptions{Budget: base.PeakAllocated})
	require.NoError(t, err)
	res3 := optSimulate(t, g, p)
	assert.LessOrEqual(t, res3.PeakAllocated, base.PeakAllocated)
	assert.LessOrEqual(t, res3.TotalNs, res2.TotalNs)
	assert.Equal(t, rep3.SimTimeNs, res3.TotalNs)
	_, _, err = ChenGreedyPlan(ctx, g, ChenOptions{Budget: 10})
	assert.ErrorContains(t, err, "least simulated peak")
}

func TestChenPlansOnResNetAndPinned(t *testing.T) {
	g := optResNetGraph(t, 6, 1000)
	g.Ops[2].Flags |= graph.NonDeterministic // a dropout-like op that may not be rerun
	base := optSimulate(t, g, sim.DefaultPlan(g))
	for _, f := range []func(context.Context, *graph.Graph, ChenOptions) (*sim.Plan, ChenReport, error){ChenSqrt, ChenGreedyPlan} {
		p, rep, err := f(context.Background(), g, ChenOptions{})
		require.NoError(t, err)
		res := optSimulate(t, g, p) // a recompute of op 2 would fail here
		assert.Equal(t, rep.SimPeak, res.PeakAllocated)
		assert.LessOrEqual(t, res.PeakAllocated, base.PeakAllocated, rep.Strategy)
		assert.Greater(t, rep.Recomputes, 0, rep.Strategy)
		runs := 0
		for _, st := range p.Steps {
			if st.Kind == sim.Compute && st.Op == 2 {
				runs++
			}
		}
		assert.Equal(t, 1, runs, "op 2 runs in the forward only")
	}
}
