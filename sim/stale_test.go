package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// conv -> clone (reads conv's output) -> relu_ (writes it in place): a
// second clone reads fresh data only after conv ran again; reading through
// relu_'s own version is fresh as long as nothing wrote the storage since.
func TestStaleReads(t *testing.T) {
	b := graph.NewBuilder("stale")
	x := b.Input("x", graph.F32, 16)
	conv := b.Op("conv", "conv", x).Out("c", graph.F32, 16)
	clone := b.Op("clone", "clone", conv.T()).Out("k", graph.F32, 16)
	relu := b.Op("relu_", "relu", conv.T()).Out("r", graph.F32, 16).Alias(conv.T()).Flags(graph.InPlace)
	view := b.Op("view", "view", relu.T()).Out("v", graph.F32, 16).Alias(conv.T())
	use := b.Op("neg", "neg", view.T(), clone.T()).Out("y", graph.F32, 16)
	c, k, r, v, u, ct := conv.ID(), clone.ID(), relu.ID(), view.ID(), use.ID(), conv.T()
	g, err := b.Build()
	require.NoError(t, err)
	steps := func(ops ...graph.OpID) *Plan {
		p := &Plan{Strategy: "t"}
		for _, o := range ops {
			p.Steps = append(p.Steps, ComputeStep(o))
		}
		return p
	}
	assert.Empty(t, StaleReads(g, steps(c, k, r, v, u)), "one run of each op")
	got := StaleReads(g, steps(c, k, r, v, u, k))
	require.Len(t, got, 1, "the clone again, after relu_ wrote conv's output")
	assert.Equal(t, StaleRead{Step: 5, Op: k, Tensor: ct, Wrote: r, FirstWrote: c}, got[0])
	assert.Empty(t, StaleReads(g, steps(c, k, r, v, u, c, k)), "conv again first: the clone reads a fresh copy")
	assert.Empty(t, StaleReads(g, steps(c, k, r, v, u, c, k, r, v)), "the view of relu_'s version, after conv and relu_ again")
	got = StaleReads(g, steps(c, k, r, v, u, c, v))
	require.Len(t, got, 1, "the view of relu_'s version after conv alone ran again")
	assert.Equal(t, c, got[0].Wrote)
	assert.Nil(t, StaleReads(nil, nil))
	// steps that do not name ops of g are skipped (Simulate reports them)
	assert.Empty(t, StaleReads(g, &Plan{Steps: []Step{ComputeStep(99), {Kind: Free, Tensor: 0}}}))
}
