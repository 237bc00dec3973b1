package graph

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// twoOps is a valid two-op graph whose ops take t0 and t1 ns.
func twoOps(t0, t1 int64) *Graph {
	return &Graph{Loss: NoTensor,
		Tensors: []Tensor{
			{ID: 0, Kind: Activation, Bytes: 4, Producer: 0, AliasOf: NoTensor},
			{ID: 1, Kind: Activation, Bytes: 4, Producer: 1, AliasOf: NoTensor},
		},
		Ops: []Op{
			{ID: 0, Type: "x", Phase: Forward, Outputs: []TensorID{0}, TimeNs: t0, Forward: NoOp},
			{ID: 1, Type: "x", Phase: Forward, Inputs: []TensorID{0}, Outputs: []TensorID{1}, TimeNs: t1, Forward: NoOp},
		}}
}

func TestValidateBoundsQuantities(t *testing.T) {
	require.NoError(t, twoOps(MaxQuantity/2, MaxQuantity/2).Validate())
	err := twoOps(1<<63-1, 1).Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ops[0].time_ns")
	assert.Contains(t, err.Error(), "at most 1152921504606846976")
	err = twoOps(MaxQuantity, 1).Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ops[1].time_ns")
	assert.Contains(t, err.Error(), "add up past")

	g := twoOps(1, 1)
	g.Tensors[0].Bytes, g.Tensors[1].Bytes = MaxQuantity, 1
	err = g.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "tensors[1].bytes")

	var nilGraph *Graph
	assert.True(t, errors.Is(nilGraph.Validate(), ErrInvalid))
}

func TestDecodeEncodings(t *testing.T) {
	var b strings.Builder
	require.NoError(t, Encode(&b, twoOps(1, 2)))
	g, err := Decode(strings.NewReader("\xef\xbb\xbf" + b.String()))
	require.NoError(t, err, "a UTF-8 byte order mark is accepted")
	assert.Len(t, g.Ops, 2)
	_, err = Decode(strings.NewReader("\xff\xfe{\x00}\x00"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "UTF-16")
}
