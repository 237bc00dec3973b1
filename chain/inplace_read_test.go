package chain

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// TestReaderBeforeInPlaceWriteIsPinned: autograd clones the input of
// nn.Hardswish(inplace=True) before the in-place kernel overwrites it (the
// backward needs the original). Re-running that clone later would copy what
// the in-place ops wrote, also when its stage is recomputed and the written
// storage is the stage's kept output: chen-greedy's plan for
// mobilenet_v3_small did so, and remat_torch.apply refused it. Such a
// reader is pinned (computed once); every chain planner then computes it
// once.
func TestReaderBeforeInPlaceWriteIsPinned(t *testing.T) {
	b := graph.NewBuilder("hswish")
	x := b.Input("x", graph.F32, 4, 256)
	h := b.Linear("fc0", x, 256, true)
	for i := 0; i < 6; i++ {
		h = b.ReLU("relu"+string(rune('0'+i)), b.Linear("fc"+string(rune('1'+i)), h, 256, true))
	}
	c := b.Linear("fc", h, 256, true)
	k := b.Op("clone", "clone", c).Out("k", graph.F32, 4, 256)
	// hardswish_ writes fc's output in place; its backward reads the clone
	// (PyTorch's saved original input), its second input here
	hs := b.Op("hardswish_", "hswish", c, k.T()).Out("hs", graph.F32, 4, 256).Alias(c).Flags(graph.InPlace)
	y := b.Linear("head", hs.T(), 10, true)
	loss := b.CrossEntropy("loss", y, b.Input("label", graph.I64, 4))
	fwd, err := b.Build()
	require.NoError(t, err)
	rules := graph.DefaultRules()
	require.NoError(t, rules.RegisterGradRule("clone", graph.GradRule{View: graph.ViewAll, Factor: 1}))
	require.NoError(t, rules.RegisterGradRule("hardswish_", graph.GradRule{Saves: []graph.Saved{graph.SaveIn(1)}, NoGradInputs: []int{1}, Factor: 1}))
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Rules: rules})
	require.NoError(t, err)
	ch, err := StagesOf(g, StagesOptions{})
	require.NoError(t, err)
	cl := k.ID()
	assert.True(t, ch.OpPinned[cl], "the clone reads fc's output before hardswish_ overwrites it")
	total := 0
	for _, plan := range []func() (*sim.Plan, error){
		func() (*sim.Plan, error) {
			p, _, err := ChenGreedyPlan(context.Background(), g, ChenOptions{})
			return p, err
		},
		func() (*sim.Plan, error) {
			p, _, err := ChenSqrt(context.Background(), g, ChenOptions{})
			return p, err
		},
	} {
		p, err := plan()
		require.NoError(t, err)
		n, recomputes := 0, 0
		seen := map[graph.OpID]bool{}
		for _, s := range p.Steps {
			if s.Kind != sim.Compute {
				continue
			}
			if s.Op == cl {
				n++
			}
			if seen[s.Op] {
				recomputes++
			}
			seen[s.Op] = true
		}
		total += recomputes
		assert.Equal(t, 1, n, "the clone is computed once")
	}
	assert.Positive(t, total, "the plans recompute something (else this checks nothing)")
}
