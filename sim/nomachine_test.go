package sim

import (
	"errors"
	"testing"

	"github.com/remat-dev/remat/sim/alloc"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

func TestNilAndZeroMachine(t *testing.T) {
	for name, m := range map[string]*Machine{"nil": nil, "zero": new(Machine)} {
		t.Run(name, func(t *testing.T) {
			for _, err := range []error{m.Reset(), m.Compute(0), m.Free(0), m.SwapOut(0), m.SwapIn(0), m.Replay(&Plan{})} {
				assert.ErrorIs(t, err, ErrNoMachine)
			}
			assert.False(t, m.Resident(0))
			assert.Equal(t, NeverComputed, m.State(0))
			assert.Equal(t, graph.TensorID(3), m.Storage(3))
			assert.Zero(t, m.Bytes(0)+m.OpTime(0)+m.OpWorkspace(0)+m.SwapTime(0)+m.Allocated()+m.Reserved()+m.Capacity()+m.Clock())
			assert.Zero(t, m.Runs(0)+m.Step()+m.InPlaceReuses())
			m.Pin(0)
			assert.False(t, m.Pinned(0))
			res := m.Result()
			require.NotNil(t, res)
			assert.Zero(t, res.PeakAllocated)
		})
	}
}

func TestMachineForeignIDs(t *testing.T) {
	g := resnetLike(t, 1, 8)
	m, err := NewMachine(g, Options{})
	require.NoError(t, err)
	for _, id := range []graph.TensorID{-1, graph.TensorID(len(g.Tensors)), 1 << 30} {
		assert.False(t, m.Resident(id))
		assert.Equal(t, NeverComputed, m.State(id))
		assert.Zero(t, m.Bytes(id)+m.SwapTime(id)+m.AdjacentFree(id))
		m.Pin(id)
		m.Unpin(id)
		assert.False(t, m.Pinned(id))
		var se *StepError
		require.ErrorAs(t, m.Free(id), &se)
		assert.Equal(t, KindInvalidStep, se.Kind)
	}
	for _, op := range []graph.OpID{-1, graph.OpID(len(g.Ops)), 1 << 30} {
		assert.Zero(t, m.Runs(op))
		assert.Zero(t, m.OpTime(op)+m.OpWorkspace(op))
		assert.Empty(t, m.ConvAlgo(op))
	}

	// A plan of a bigger graph is an invalid plan for the small one: an
	// error naming the step, not a panic.
	big := resnetLike(t, 4, 8)
	_, err = Simulate(g, DefaultPlan(big), Options{})
	var se *StepError
	require.ErrorAs(t, err, &se)
	assert.ErrorIs(t, err, ErrInvalidPlan)
}

func TestPlanHelpersOnNilAndMalformedGraphs(t *testing.T) {
	p := DefaultPlan(nil)
	require.NotNil(t, p)
	assert.Empty(t, p.Steps)
	_, err := PlanFromSchedule(nil, "x", nil)
	assert.ErrorIs(t, err, graph.ErrInvalid)

	bad := &graph.Graph{Ops: []graph.Op{{ID: 0, Type: "relu", Inputs: []graph.TensorID{5}, Forward: graph.NoOp}}}
	_, err = PlanFromSchedule(bad, "x", []graph.OpID{0})
	assert.ErrorIs(t, err, graph.ErrInvalid)
	assert.Nil(t, DefaultPlan(bad), "no plan for a graph naming tensors it does not have")
	_, err = Simulate(bad, DefaultPlan(bad), Options{})
	assert.True(t, errors.Is(err, graph.ErrInvalid))

	op := &bad.Ops[0]
	assert.Equal(t, graph.F32, OpDType(bad, op))
	assert.Nil(t, ConvCandidates(bad, &graph.Op{Type: "conv2d_backward_data", Forward: 7}))
	assert.False(t, IsAtomicClean(nil))
	assert.Zero(t, CostModel{}.OpTime(nil, nil))
}

func TestZeroIdeal(t *testing.T) {
	var a alloc.Ideal
	b, err := a.Alloc(1 << 40)
	require.NoError(t, err, "the zero alloc.Ideal is unlimited")
	assert.Equal(t, int64(1<<40), a.Allocated())
	a.Free(b)
	assert.Zero(t, a.Allocated())
	assert.Equal(t, alloc.Unlimited, a.Capacity())
}
