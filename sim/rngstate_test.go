package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// rngGraph is a step whose forward draws random numbers:
//
//	op0 drop (x) -> y 1000 (nondeterministic, rng_saved)   op1 fwd (y) -> z 100
//	op2 bwd (z, y) -> gx 400                               op3 sgd (w, gx) -> w2 upd
//
// upd is the update's output size (to put the peak in the update phase).
func rngGraph(t *testing.T, upd int64) *graph.Graph {
	b := graph.NewBuilder("rng")
	x := b.Input("x", graph.F32, 25)
	w := b.Parameter("w", graph.F32, 10)
	y := b.Op("dropout", "drop", x).OutBytes("y", 1000).Flags(graph.NonDeterministic).Attr(graph.AttrRNGSaved, "1").T()
	z := b.Op("loss", "fwd", y).OutBytes("z", 100).T()
	b.SetLoss(z)
	b.SetPhase(graph.Backward)
	gx := b.Op("loss_grad", "bwd", z, y).OutBytes("gx", 400).T()
	b.SetPhase(graph.Update)
	b.Op("sgd", "sgd", w, gx).OutBytes("w2", upd)
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// rngPlan drops y after the forward and recomputes it for the backward when
// recompute is set.
func rngPlan(recompute bool) *Plan {
	const y, z, gx = 2, 3, 4
	if !recompute {
		return plan(ComputeStep(0), ComputeStep(1), ComputeStep(2), FreeStep(y), FreeStep(z), ComputeStep(3), FreeStep(gx))
	}
	return plan(ComputeStep(0), ComputeStep(1), FreeStep(y), ComputeStep(0), ComputeStep(2), FreeStep(y), FreeStep(z),
		ComputeStep(3), FreeStep(gx))
}

func TestRNGStateHeldForRecomputedRandomOp(t *testing.T) {
	g := rngGraph(t, 40)
	const state = 5056
	base, err := Simulate(g, rngPlan(true), Options{})
	require.NoError(t, err)
	// 140 resident; the backward holds z 100, y 1000 and gx 400.
	require.Equal(t, int64(140+100+1000+400), base.PeakAllocated)

	res, err := Simulate(g, rngPlan(true), Options{RNGStateBytes: state})
	require.NoError(t, err)
	assert.Equal(t, base.PeakAllocated+state, res.PeakAllocated, "the state is held from the first run through the backward")
	top := res.TopTensorsAtPeak(10)
	var names []string
	for _, lt := range top {
		names = append(names, lt.Name)
		if lt.Kind == "rng_state" {
			assert.Equal(t, "rng_state:drop", lt.Name)
			assert.Equal(t, int64(state), lt.Bytes)
			assert.Equal(t, graph.OpID(0), lt.Op)
		}
	}
	assert.Contains(t, names, "rng_state:drop")

	// A plan that runs the random op once keeps no state.
	once, err := Simulate(g, rngPlan(false), Options{RNGStateBytes: state})
	require.NoError(t, err)
	plain, err := Simulate(g, rngPlan(false), Options{})
	require.NoError(t, err)
	assert.Equal(t, plain.PeakAllocated, once.PeakAllocated)

	// Replaying again on the same Machine gives the same peak (Reset drops
	// the held states).
	m, err := NewMachine(g, Options{RNGStateBytes: state})
	require.NoError(t, err)
	for i := 0; i < 2; i++ {
		require.NoError(t, m.Reset())
		require.NoError(t, m.Replay(rngPlan(true)))
		assert.Equal(t, res.PeakAllocated, m.Result().PeakAllocated)
		assert.Equal(t, int64(140+40), m.Allocated(), "the state is released by the end of the step")
	}
}

func TestRNGStateReleasedBeforeUpdate(t *testing.T) {
	// The update's output (1 MB) makes the peak; the state is gone by then,
	// as PyTorch frees it when the backward pass ends.
	g := rngGraph(t, 1<<20)
	base, err := Simulate(g, rngPlan(true), Options{})
	require.NoError(t, err)
	res, err := Simulate(g, rngPlan(true), Options{RNGStateBytes: 5056})
	require.NoError(t, err)
	assert.Equal(t, base.PeakAllocated, res.PeakAllocated)
	assert.Equal(t, graph.OpID(3), res.PeakAllocatedOp)
}

func TestRNGStateOutOfMemory(t *testing.T) {
	g := rngGraph(t, 40)
	// Room for the forward (140 + 1000 + 100) but not for a state on top of
	// the first run's output.
	_, err := Simulate(g, rngPlan(true), Options{Capacity: 140 + 1000 + 400, RNGStateBytes: 5056})
	require.Error(t, err)
	var se *StepError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 0, se.Step)
	assert.Contains(t, err.Error(), "RNG state")
}

func TestRNGStateBytesValidated(t *testing.T) {
	g := rngGraph(t, 40)
	for _, v := range []int64{-1, 1<<30 + 1} {
		_, err := NewMachine(g, Options{RNGStateBytes: v})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "RNGStateBytes")
	}
}
