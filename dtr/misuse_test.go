package dtr

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph/dtrlog"
)

// TestMisuseReturnsErrors: nil and inconsistent traces, a zero Runtime and
// a SimHost not bound to a run give errors (or -1 / zero answers where the
// signature has no error), never panics (issue 15).
func TestMisuseReturnsErrors(t *testing.T) {
	ctx := context.Background()
	_, err := Sweep(ctx, nil, SweepOptions{})
	assert.ErrorIs(t, err, ErrNilTrace)
	_, err = SweepBest(ctx, nil, nil)
	assert.ErrorIs(t, err, ErrNilTrace)
	_, err = MeasureBaseline(nil)
	assert.ErrorIs(t, err, ErrNilTrace)
	_, err = Replay(ctx, nil, DefaultConfig(), nil)
	assert.ErrorIs(t, err, ErrNilTrace)
	assert.Equal(t, LowerBound{}, ComputeLowerBound(nil))

	bad := &dtrlog.Trace{
		Ops:     []dtrlog.Op{{Args: []int32{7}, Results: []int32{0}, Sizes: []int64{8}, Aliases: []int32{-1}}},
		Tensors: []dtrlog.Tensor{{}},
		Cmds:    []dtrlog.Cmd{{Kind: dtrlog.CmdCompute, ID: 0}},
	}
	_, err = MeasureBaseline(bad)
	assert.ErrorIs(t, err, ErrBadTrace)
	assert.ErrorContains(t, err, "op 0 arg 0: tensor 7")
	assert.Equal(t, LowerBound{}, ComputeLowerBound(bad))
	bad.Ops[0].Args = nil
	bad.Cmds = append(bad.Cmds, dtrlog.Cmd{Kind: dtrlog.CmdRelease, ID: 3})
	_, err = Sweep(ctx, bad, SweepOptions{})
	assert.ErrorIs(t, err, ErrBadTrace)
	assert.ErrorContains(t, err, "command 1 (release): ID 3")

	var rt Runtime
	assert.Equal(t, OpID(-1), rt.Producer(0))
	assert.Equal(t, TensorID(-1), rt.Root(-1))
	assert.False(t, rt.Resident(1<<30))

	var h SimHost
	assert.ErrorIs(t, h.Compute(0), ErrUnboundHost)
	assert.ErrorIs(t, h.SwapIn(-1), ErrUnboundHost)
	assert.ErrorIs(t, h.SwapOut(1<<30), ErrUnboundHost)
	assert.Zero(t, h.AdjacentFree(0))
	h.Free(0)
	var nh *SimHost
	assert.ErrorIs(t, nh.Compute(0), ErrUnboundHost)

	_, _, err = RunOnMachine(ctx, nil, DefaultConfig())
	require.Error(t, err)
}

// TestMisuseEmptyTrace: a trace without ops is an error.
func TestMisuseEmptyTrace(t *testing.T) {
	_, err := MeasureBaseline(&dtrlog.Trace{})
	assert.ErrorIs(t, err, ErrBadTrace)
	_, err = Sweep(context.Background(), &dtrlog.Trace{}, SweepOptions{})
	assert.ErrorIs(t, err, ErrBadTrace)
	_, err = SweepBest(context.Background(), &dtrlog.Trace{}, nil)
	assert.ErrorIs(t, err, ErrBadTrace)
	_, err = dtrlog.ToGraph(&dtrlog.Trace{})
	assert.ErrorIs(t, err, dtrlog.ErrInvalid)
}
