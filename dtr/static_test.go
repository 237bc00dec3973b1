package dtr

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/sim/alloc"
)

// chain builds an n-layer MLP-like chain with a reverse (backward) sweep.
func chain(t *testing.T, n int) *graph.Graph {
	b := graph.NewBuilder("chain")
	x := b.Input("x", graph.F32, 1024, 256)
	acts := []graph.TensorID{x}
	for i := 0; i < n; i++ {
		acts = append(acts, b.Op("relu", "f", acts[len(acts)-1]).Out("a", graph.F32, 1024, 256).TimeNs(1000).T())
	}
	b.SetPhase(graph.Backward)
	g := acts[n]
	for i := n - 1; i >= 0; i-- {
		g = b.Op("relu_grad", "b", g, acts[i]).Out("g", graph.F32, 1024, 256).TimeNs(1000).T()
	}
	gr, err := b.Build()
	require.NoError(t, err)
	return gr
}

func TestStaticPlanReplaysOnSim(t *testing.T) {
	g := chain(t, 30)
	const mb = 1024 * 256 * 4
	cfg := DefaultConfig()
	cfg.EvicteeMinSize = 0
	cfg.Budget = 8 * mb
	plan, st, err := StaticPlan(context.Background(), g, cfg)
	require.NoError(t, err)
	require.Greater(t, st.Remats, int64(0))
	res, err := sim.Simulate(g, plan, sim.Options{})
	require.NoError(t, err, "the exported plan is valid on the simulator")
	t.Logf("plan steps %d, remats %d, sim peak %d (budget %d)", len(plan.Steps), st.Remats, res.PeakAllocated, cfg.Budget)
	require.LessOrEqual(t, res.PeakAllocated, cfg.Budget+mb, "sim peak within the budget (+1 input the runtime pins)")
}

func TestRunOnMachine(t *testing.T) {
	g := chain(t, 30)
	const mb = 1024 * 256 * 4
	m, err := sim.NewMachine(g, sim.Options{})
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.EvicteeMinSize = 0
	cfg.Budget = 8 * mb
	res, st, err := RunOnMachine(context.Background(), m, cfg)
	require.NoError(t, err)
	require.Greater(t, st.Remats, int64(0))
	require.Equal(t, int(st.Remats), int(res.Recomputes))
	t.Logf("machine peak %d, clock %d, runtime clock %d", res.PeakAllocated, m.Clock(), st.Clock)
}

// TestPlanOnMachineReplays records a run on a Machine with the caching
// allocator and cuDNN workspaces, and replays the plan on the simulator with
// the same options: the replay's peak and time are the run's, and the peak
// stays within the budget.
func TestPlanOnMachineReplays(t *testing.T) {
	g, opts, base := workspaceModel(t)
	for _, ratio := range []float64{0.6, 0.8} {
		opts.Allocator, opts.Capacity = alloc.NewCaching(-1), -1
		m, err := sim.NewMachine(g, opts)
		require.NoError(t, err)
		cfg := DefaultConfig()
		cfg.Heuristic, cfg.KeepForRemat = Lookahead, true
		cfg.Granule = alloc.CachingMinBlock
		cfg.Budget = int64(float64(base.PeakAllocated) * ratio)
		plan, res, st, err := PlanOnMachine(context.Background(), m, cfg)
		require.NoError(t, err, "ratio %.1f", ratio)
		require.Greater(t, st.Remats, int64(0), "ratio %.1f", ratio)
		require.Equal(t, "dtr/lookahead", plan.Strategy)
		opts.Allocator = alloc.NewCaching(-1)
		replay, err := sim.Simulate(g, plan, opts)
		require.NoError(t, err, "ratio %.1f: the recorded plan is valid on the simulator", ratio)
		require.Equal(t, res.PeakAllocated, replay.PeakAllocated, "ratio %.1f", ratio)
		require.Equal(t, res.TotalNs, replay.TotalNs, "ratio %.1f", ratio)
		require.LessOrEqual(t, res.PeakAllocated, cfg.Budget, "ratio %.1f", ratio)
	}
}
