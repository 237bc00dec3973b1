package graph_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

func TestParseOptimizer(t *testing.T) {
	for in, want := range map[string]graph.Optimizer{"": graph.OptNone, "none": graph.OptNone, "SGD": graph.OptSGD,
		" momentum ": graph.OptMomentum, "adam": graph.OptAdam} {
		got, err := graph.ParseOptimizer(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := graph.ParseOptimizer("adagrad")
	require.ErrorContains(t, err, `"adagrad"`)
	assert.Len(t, graph.Optimizers(), 4)
}

func TestUpdateCosts(t *testing.T) {
	fwd, loss := tinyMLP(t)
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Optimizer: graph.OptAdam})
	require.NoError(t, err)
	for _, op := range g.Ops {
		if op.Phase != graph.Update {
			continue
		}
		p := g.Tensors[op.Inputs[0]]
		n, err := p.Shape.NumElements()
		require.NoError(t, err)
		assert.Equal(t, 12*n, op.FLOPs, op.Name)
		// reads p, g, m, v and writes p', m', v'
		assert.Equal(t, 7*p.Bytes, op.BytesAccessed, op.Name)
		assert.False(t, op.Flags.Has(graph.InPlace))
	}
}
