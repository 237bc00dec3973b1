package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// holdGraph: x (input 100) -> a 1000 -> b 10 -> c 400 -> d 10; op2 (c)
// holds a when hold is set.
func holdGraph(t *testing.T, hold string) *graph.Graph {
	b := graph.NewBuilder("holds")
	x := b.Input("x", graph.F32, 25)
	a := b.Op("relu", "op0", x).OutBytes("a", 1000).T()
	bb := b.Op("sum", "op1", a).OutBytes("b", 10).T()
	o := b.Op("expand", "op2", bb).OutBytes("c", 400)
	if hold != "" {
		o.Attr(graph.AttrHolds, hold)
	}
	c := o.T()
	b.Op("sum", "op3", c).OutBytes("d", 10)
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func TestHoldKeepsFreedStorage(t *testing.T) {
	const ta, tb = 1, 2
	p := plan(ComputeStep(0), ComputeStep(1), FreeStep(ta), ComputeStep(2), FreeStep(tb), ComputeStep(3))
	free, err := Simulate(holdGraph(t, ""), p, Options{})
	require.NoError(t, err)
	// 100 + 1000 + 10 at op1; then a is freed: 100 + 10 + 400 at op2.
	assert.Equal(t, int64(1110), free.PeakAllocated)

	held, err := Simulate(holdGraph(t, "1"), p, Options{Timeline: true})
	require.NoError(t, err)
	// a's memory stays through op2: 100 + 1000 + 10 + 400.
	assert.Equal(t, int64(1510), held.PeakAllocated)
	assert.Equal(t, graph.OpID(2), held.PeakAllocatedOp)
	// released after op2: at the next step x, b and c remain.
	assert.Equal(t, int64(510), held.Timeline[4].Allocated)

	// A recompute while held allocates anew.
	re := plan(ComputeStep(0), ComputeStep(1), FreeStep(ta), ComputeStep(0), ComputeStep(2), FreeStep(tb), FreeStep(ta), ComputeStep(3))
	r, err := Simulate(holdGraph(t, "1"), re, Options{})
	require.NoError(t, err)
	assert.Equal(t, int64(2510), r.PeakAllocated)

	// A hold whose op has already run holds nothing: freeing a after op2
	// releases it at once.
	late := plan(ComputeStep(0), ComputeStep(1), ComputeStep(2), FreeStep(ta), FreeStep(tb), ComputeStep(3))
	r, err = Simulate(holdGraph(t, "1"), late, Options{Timeline: true})
	require.NoError(t, err)
	assert.Equal(t, int64(510), r.Timeline[4].Allocated, "x, b and c after a's free")
}

func TestHoldsAttributeValidated(t *testing.T) {
	for _, v := range []string{"9", "x", "1,-1"} {
		_, err := NewMachine(holdGraph(t, v), Options{})
		require.Error(t, err, v)
		assert.Contains(t, err.Error(), `op 2 "op2": attribute holds=`)
		assert.Contains(t, err.Error(), "is not a tensor ID (expected 0..4)")
	}
}
