package onnx

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// avgpool2d keeps its input for the backward pass, as PyTorch's autograd
// does (avg_pool2d saves self): in densenet121 each transition's
// convolution output is read by the pool's backward op, while the global
// average pool (a mean in PyTorch) saves nothing.
func TestAvgPoolSavesInput(t *testing.T) {
	rule, ok := Rules().Lookup(graph.OpAvgPool2d)
	require.True(t, ok)
	assert.Equal(t, []graph.Saved{graph.SaveIn(0)}, rule.Saves)
	g, err := Import(bytes.NewReader(readModelFile(t, "densenet121")), Options{Batch: 2})
	require.NoError(t, err)
	pools := 0
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Phase != graph.Forward || (op.Type != graph.OpAvgPool2d && op.Type != graph.OpAdaptiveAvgPool) {
			continue
		}
		readByBackward := false
		for _, c := range g.Consumers(op.Inputs[0]) {
			if b := &g.Ops[c]; b.Phase == graph.Backward && b.Forward == op.ID {
				readByBackward = true
			}
		}
		if op.Type == graph.OpAvgPool2d {
			pools++
			assert.True(t, readByBackward, "%s: the input is saved for the backward", op.Name)
		} else {
			assert.False(t, readByBackward, "%s: a global average pool saves nothing", op.Name)
		}
	}
	assert.Equal(t, 3, pools, "densenet121 has three transition pools")
}
