package chain

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On a residual network (stages of several ops, skip connections, gradient
// accumulation, weights) the solver's accounting is an upper bound: every
// plan fits its budget in the simulator, the predicted time is the simulated
// one, and no schedule of the brute-force enumeration that fits is faster
// than the solver's by more than the accounting's slack allows (here: none).
func TestOptimalChainResNetBruteForce(t *testing.T) {
	g := optResNetGraph(t, 2, 1000)
	ch, err := StagesOf(g, StagesOptions{})
	require.NoError(t, err)
	L := len(ch.Stages)
	type pt struct{ peak, time int64 }
	var pts []pt
	for _, s := range optEnumSchedules(0, L-1, L-1) {
		p, _, err := StagesPlan(g, ch, s, "brute")
		require.NoError(t, err)
		res := optSimulate(t, g, p)
		pts = append(pts, pt{res.PeakAllocated, res.TotalNs})
	}
	base := optSimulate(t, g, sim.DefaultPlan(g))
	feasible := 0
	for b := base.PeakAllocated / 2; b <= base.PeakAllocated; b += 250 {
		best := int64(-1)
		for _, p := range pts {
			if p.peak <= b && (best < 0 || p.time < best) {
				best = p.time
			}
		}
		plan, rep, err := OptimalChain(context.Background(), g, b, OptimalOptions{Slots: int(b / 10)})
		if err != nil {
			require.ErrorIs(t, err, ErrChainInfeasible)
			assert.Greater(t, rep.MinFeasibleBytes, b)
			continue
		}
		feasible++
		res := optSimulate(t, g, plan)
		assert.LessOrEqual(t, res.PeakAllocated, b)
		assert.LessOrEqual(t, res.PeakAllocated, rep.PredictedPeak)
		assert.Equal(t, rep.PredictedTime, res.TotalNs)
		assert.Equal(t, rep.SimTimeNs, res.TotalNs)
		require.GreaterOrEqual(t, best, int64(0))
		assert.Equal(t, best, res.TotalNs, "budget %d", b)
	}
	assert.Greater(t, feasible, 3)
	// With the whole baseline peak and exact slots, nothing is recomputed.
	_, rep, err := OptimalChain(context.Background(), g, base.PeakAllocated, OptimalOptions{Slots: int(base.PeakAllocated)})
	require.NoError(t, err)
	assert.Equal(t, 0, rep.Recomputes)
	assert.Equal(t, base.TotalNs, rep.SimTimeNs)
}

func TestOptimalChainInfeasibleAndErrors(t *testing.T) {
	g := optUniformChain(t, 20, 1000)
	_, rep, err := OptimalChain(context.Background(), g, 2000, OptimalOptions{})
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrChainInfeasible))
	assert.False(t, rep.Feasible)
	require.Greater(t, rep.MinFeasibleBytes, int64(2000))
	assert.Contains(t, err.Error(), fmt.Sprint(rep.MinFeasibleBytes))
	// The reported minimum is feasible, and its plan fits.
	p, rep2, err := OptimalChain(context.Background(), g, rep.MinFeasibleBytes, OptimalOptions{})
	require.NoError(t, err)
	res := optSimulate(t, g, p)
	assert.LessOrEqual(t, res.PeakAllocated, rep.MinFeasibleBytes)
	assert.Greater(t, rep2.Recomputes, 0)

	_, _, err = OptimalChain(context.Background(), g, 0, OptimalOptions{})
	assert.ErrorContains(t, err, "budget = 0")
	_, _, err = OptimalChain(context.Background(), g, 1e6, OptimalOptions{Slots: -3})
	assert.ErrorContains(t, err, "slots = -3")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err = OptimalChain(ctx, g, 1e6, OptimalOptions{})
	assert.ErrorIs(t, err, context.Canceled)
	// A schedule that runs a backward before its forward is rejected.
	ch, err := StagesOf(g, StagesOptions{})
	require.NoError(t, err)
	_, _, err = StagesPlan(g, ch, []RotorAction{{RotorBackward, 3}}, "bad")
	assert.Error(t, err)
}

// The cost model of the simulator plugs in as the time callback; with
// measured times absent, the predicted time is then the simulated one.
func TestOptimalChainSimCostModel(t *testing.T) {
	g := optResNetGraph(t, 3, 1<<20)
	for i := range g.Ops {
		g.Ops[i].TimeNs = 0
		g.Ops[i].FLOPs = int64(1+i%5) * 1e9
		g.Ops[i].BytesAccessed = 3 << 20
	}
	cm := sim.CostModel{}
	prof, err := sim.Device(sim.DefaultDevice)
	require.NoError(t, err)
	cm.Device = prof
	timeOf := func(op graph.OpID) int64 { return cm.OpTime(g, &g.Ops[op]) }
	base := optSimulate(t, g, sim.DefaultPlan(g))
	budget := base.PeakAllocated * 2 / 3
	p, rep, err := OptimalChain(context.Background(), g, budget, OptimalOptions{Time: timeOf})
	require.NoError(t, err)
	res := optSimulate(t, g, p)
	assert.LessOrEqual(t, res.PeakAllocated, budget)
	assert.Equal(t, rep.PredictedTime, res.TotalNs)
	assert.Greater(t, res.TotalNs, base.TotalNs)
}

// ExampleOptimalChain plans a 16-stage chain of 1 MB activations and
// gradients within 8 MB, then asks for an impossible 2 MB.
func ExampleOptimalChain() {
	b := graph.NewBuilder("chain16")
	x := b.Input("x", graph.F32, 0)
	prev, fw := x, []graph.OpID{}
	ins := []graph.TensorID{}
	for k := 0; k < 16; k++ {
		ins = append(ins, prev)
		o := b.Op("linear", fmt.Sprintf("f%d", k), prev).OutBytes(fmt.Sprintf("a%d", k), 1<<20).TimeNs(100)
		fw, prev = append(fw, o.ID()), o.T()
	}
	b.SetLoss(prev)
	b.SetPhase(graph.Backward)
	d := prev
	for k := 15; k >= 0; k-- {
		o := b.Op("linear_grad", fmt.Sprintf("b%d", k), ins[k], d).Forward(fw[k]).OutBytes(fmt.Sprintf("d%d", k), 1<<20).TimeNs(200)
		d = o.T()
	}
	g, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	plan, rep, err := OptimalChain(context.Background(), g, 8<<20, OptimalOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(plan.Strategy, rep.Stages, "stages")
	fmt.Println("recomputed stage forwards:", rep.Recomputes)
	fmt.Println("time:", rep.BaseTime, "->", rep.SimTimeNs)
	fmt.Println("fits:", rep.SimPeak <= 8<<20)
	_, rep, err = OptimalChain(context.Background(), g, 2<<20, OptimalOptions{})
	fmt.Println(errors.Is(err, ErrChainInfeasible), rep.MinFeasibleBytes>>20, "MB needed")
	// Output:
	// optimal-chain 16 stages
	// recomputed stage forwards: 9
	// time: 4800 -> 5700
	// fits: true
	// true 3 MB needed
}
