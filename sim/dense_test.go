package sim_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// The Machine indexes by the graph's dense index: a graph changed after
// that index was built, without Validate, is simulated as it was (no
// panic on an ID now out of range); Validate then rejects the change.
func TestChangedGraphSimulatedAsIndexed(t *testing.T) {
	g, err := models.Build("resnet18", models.Options{Batch: 1})
	require.NoError(t, err)
	p := sim.DefaultPlan(g)
	want, err := sim.Simulate(g, p, sim.Options{InPlace: true})
	require.NoError(t, err)
	for i := range g.Ops {
		if len(g.Ops[i].Inputs) > 0 {
			g.Ops[i].Inputs[0] = graph.TensorID(1 << 20)
		}
	}
	var got *sim.Result
	require.NotPanics(t, func() { got, err = sim.Simulate(g, p, sim.Options{InPlace: true}) })
	require.NoError(t, err)
	assert.Equal(t, want.PeakAllocated, got.PeakAllocated)
	assert.ErrorIs(t, g.Validate(), graph.ErrInvalid)
	_, err = sim.Simulate(g, p, sim.Options{})
	assert.ErrorIs(t, err, graph.ErrInvalid, "a changed graph that was never indexed is checked")
}
