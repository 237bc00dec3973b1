package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// conv -> clone (reads conv's output) -> relu_ (writes it in place) ->
// view -> neg; the backward reads the clone. Each forward input records
// the op that last made or wrote its storage when the reader ran.
func TestForwardWrites(t *testing.T) {
	b := NewBuilder("writes")
	x := b.Input("x", F32, 16)
	conv := b.Op("conv", "conv", x).Out("c", F32, 16)
	clone := b.Op("clone", "clone", conv.T()).Out("k", F32, 16)
	relu := b.Op("relu_", "relu", conv.T()).Out("r", F32, 16).Alias(conv.T()).Flags(InPlace)
	view := b.Op("view", "view", relu.T()).Out("v", F32, 16).Alias(conv.T())
	neg := b.Op("neg", "neg", view.T(), clone.T()).Out("y", F32, 16)
	b.SetLoss(neg.T())
	b.SetPhase(Backward)
	bw := b.Op("neg_backward", "neg_bw", clone.T(), relu.T()).Forward(neg.ID()).Out("g", F32, 16)
	c, k, r, v, bwID, ct := conv.ID(), clone.ID(), relu.ID(), view.ID(), bw.ID(), conv.T()
	g, err := b.Build()
	require.NoError(t, err)
	w := ForwardWrites(g)
	assert.True(t, w.Any)
	assert.Equal(t, int32(r), w.Last[ct], "relu_ is the last in-place writer of conv's storage")
	assert.Equal(t, int32(-1), w.Last[0], "nothing writes x")
	assert.Equal(t, c, w.Before(k, 0), "the clone reads what conv made")
	assert.Equal(t, c, w.Before(r, 0))
	assert.Equal(t, r, w.Before(v, 0), "the view reads what relu_ wrote")
	assert.Equal(t, NoOp, w.Before(c, 0), "x is resident from the start")
	assert.Equal(t, NoOp, w.Before(bwID, 0), "backward ops are not indexed")
	assert.Equal(t, NoOp, w.Before(k, 1), "input index out of range")
	assert.Equal(t, NoOp, w.Before(OpID(len(g.Ops)), 0), "op out of range")
	assert.False(t, ForwardWrites(nil).Any)
	assert.Equal(t, NoOp, (*Writes)(nil).Before(0, 0))
}
