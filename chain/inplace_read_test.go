package chain

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// hswishHead builds the classifier of torchvision's mobilenet_v3 as
// PyTorch runs it: Linear, autograd's clone of the Linear's output (the
// backward of the in-place Hardswish needs the original), hardswish_
// writing the Linear's output in place, then an in-place dropout whose
// mask is made from the activation's shape and applied with mul_ on the
// same storage, and the head. Stages of linear+relu come before it.
func hswishHead(t *testing.T, layers int) (g *graph.Graph, clone, mask graph.OpID, fc graph.TensorID) {
	t.Helper()
	b := graph.NewBuilder("hswish")
	x := b.Input("x", graph.F32, 4, 256)
	h := b.Linear("fc0", x, 256, true)
	for i := 1; i <= layers; i++ {
		h = b.ReLU(fmt.Sprintf("relu%d", i), b.Linear(fmt.Sprintf("fc%d", i), h, 256, true))
	}
	c := b.Linear("fc", h, 256, true)
	k := b.Op("clone", "clone", c).Out("k", graph.F32, 4, 256)
	// hardswish_ writes fc's output; its backward reads the clone, its
	// second input here
	hs := b.Op("hardswish_", "hswish", c, k.T()).Out("hs", graph.F32, 4, 256).Alias(c).Flags(graph.InPlace)
	m := b.Op("dropout_mask", "mask", hs.T()).Out("m", graph.F32, 4, 256)
	d := b.Op("mul_", "drop", hs.T(), m.T()).Out("d", graph.F32, 4, 256).Alias(c).Flags(graph.InPlace)
	y := b.Linear("head", d.T(), 10, true)
	loss := b.CrossEntropy("loss", y, b.Input("label", graph.I64, 4))
	fwd, err := b.Build()
	require.NoError(t, err)
	rules := graph.DefaultRules()
	require.NoError(t, rules.RegisterGradRule("clone", graph.GradRule{View: graph.ViewAll, Factor: 1}))
	require.NoError(t, rules.RegisterGradRule("hardswish_", graph.GradRule{Saves: []graph.Saved{graph.SaveIn(1)}, NoGradInputs: []int{1}, Factor: 1}))
	require.NoError(t, rules.RegisterGradRule("dropout_mask", graph.GradRule{NoGradInputs: []int{0}, Factor: 0}))
	require.NoError(t, rules.RegisterGradRule("mul_", graph.GradRule{Saves: []graph.Saved{graph.SaveIn(1)}, NoGradInputs: []int{1}, Factor: 1}))
	g, err = graph.Differentiate(fwd, loss, graph.BackwardOptions{Rules: rules})
	require.NoError(t, err)
	return g, k.ID(), m.ID(), c
}

// A recompute must read what the op's first run read. When the chain
// planners keep the stage whose output is the storage hardswish_ and the
// dropout's mul_ overwrite (mobilenet_v3's classifier: chen-greedy and
// chen-sqrt kept it on mobilenet_v3_small and _large, and remat_torch.apply
// refused the plans), the clone and the mask read that storage before the
// writes: recomputed from the kept storage they would copy hardswish's
// result and shape a mask after it. They are kept from the forward pass
// instead; the rest of the segment is still recomputed.
func TestRecomputeDoesNotReadOverwrittenStorage(t *testing.T) {
	g, clone, mask, fc := hswishHead(t, 6)
	ch, err := StagesOf(g, StagesOptions{})
	require.NoError(t, err)
	// the stage whose output is fc's storage (the mul_'s version of it)
	ks := int32(-1)
	for s, st := range ch.Stages {
		if st.Output != graph.NoTensor && g.StorageOf(st.Output) == fc {
			ks = int32(s)
		}
	}
	require.GreaterOrEqual(t, ks, int32(1), "a stage ends on the overwritten storage")
	for _, kept := range [][]int32{{ks}, {ks - 1, ks}, {0, ks}} {
		p, recomputes, err := ChenPlan(g, ch, kept, "chen")
		require.NoError(t, err)
		assert.Empty(t, sim.StaleReads(g, p), "kept %v", kept)
		assert.Positive(t, recomputes, "kept %v: the segment before is recomputed (else this checks nothing)", kept)
		runs := map[graph.OpID]int{}
		for _, s := range p.Steps {
			if s.Kind == sim.Compute {
				runs[s.Op]++
			}
		}
		assert.Equal(t, 1, runs[clone], "kept %v: the clone runs once", kept)
		assert.Equal(t, 1, runs[mask], "kept %v: the mask runs once", kept)
		_, err = sim.Simulate(g, p, sim.Options{})
		require.NoError(t, err)
	}
	// every chain planner, at every depth around the stage choice
	ctx := context.Background()
	for layers := 2; layers <= 12; layers++ {
		g, _, _, _ := hswishHead(t, layers)
		base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
		require.NoError(t, err)
		plans := map[string]*sim.Plan{}
		plans["chen-sqrt"], _, err = ChenSqrt(ctx, g, ChenOptions{})
		require.NoError(t, err)
		plans["chen-greedy"], _, err = ChenGreedyPlan(ctx, g, ChenOptions{})
		require.NoError(t, err)
		p, _, err := OptimalChain(ctx, g, base.PeakAllocated*3/4, OptimalOptions{})
		if err == nil {
			plans["optimal-chain"] = p
		}
		for name, p := range plans {
			assert.Empty(t, sim.StaleReads(g, p), "%s, %d layers", name, layers)
		}
	}
}
