package graph

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every type of the layer catalogue has a registry entry with a gradient
// rule, and the default gradient rules are exactly the registry's.
func TestOpTypeRegistry(t *testing.T) {
	for _, name := range []string{OpConv2d, OpConvTranspose2d, OpLinear, OpMatMul, OpBatchNorm, OpLayerNorm, OpReLU,
		OpReLU6, OpHardtanh, OpGELU, OpSiLU, OpSigmoid, OpTanh, OpHardswish, OpAdd, OpMul, OpScale, OpMaskedFill,
		OpDropout, OpMaxPool2d, OpAvgPool2d, OpAdaptiveAvgPool, OpFlatten, OpReshape, OpTranspose, OpSlice,
		OpContiguous, OpPad, OpConcat, OpSplit, OpSoftmax, OpLogSoftmax, OpEmbedding, OpCrossEntropy, OpUpsample,
		OpLSTMCell} {
		e, ok := LookupOpType(name)
		require.True(t, ok, name)
		require.NotNil(t, e.Grad, "%s has no gradient rule", name)
		r, ok := DefaultRules().Lookup(name)
		require.True(t, ok, name)
		assert.Equal(t, *e.Grad, r, name)
	}
	for _, name := range []string{OpGradSeed, OpGradAccumulate, OpSGDUpdate, OpMomentumUpdate, OpAdamUpdate} {
		e, ok := LookupOpType(name)
		require.True(t, ok, name)
		assert.Nil(t, e.Grad, name)
		assert.Equal(t, InPlaceNever, e.InPlace, "%s's output must not take an input's storage", name)
	}
	n := 0
	for _, e := range OpTypes() {
		if e.Grad != nil {
			n++
		}
	}
	assert.Len(t, DefaultRules().Types(), n)

	// Case-insensitive lookup, classes of other front ends' names.
	e, ok := LookupOpType("Conv2d")
	require.True(t, ok)
	assert.Equal(t, WorkspaceConv, e.Workspace)
	e, ok = LookupOpType("gemm")
	require.True(t, ok)
	assert.Equal(t, "FullyConnected", e.MXNet)
	_, ok = LookupOpType("no_such_type")
	assert.False(t, ok)

	// OpTypes returns a copy.
	a := OpTypes()
	a[0].Name = "changed"
	assert.Equal(t, OpConv2d, OpTypes()[0].Name)
}

// Look up what remat knows of an op type.
func ExampleLookupOpType() {
	e, _ := LookupOpType("dropout")
	fmt.Println(e.Name, e.MXNet, e.InPlace == InPlaceFirstInput, len(e.Grad.Saves))
	// Output: dropout Dropout true 1
}
