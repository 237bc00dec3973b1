package onnx

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// rotary is a MatMul by a weight whose output is multiplied by a table, as
// a rotary embedding multiplies q by its cos buffer, then a Gemm head.
func rotary() []byte {
	f := TensorProto_FLOAT
	return model(17, []*NodeProto{
		node("MatMul", "/q/MatMul", []string{"x", "wq"}, []string{"q"}),
		node("Mul", "/Mul", []string{"q", "attn.cos"}, []string{"qc"}),
		node("Gemm", "/head/Gemm", []string{"qc", "head.weight", "head.bias"}, []string{"y"}, intAttr("transB", 1)),
	}, []*ValueInfoProto{
		vi("x", tensorType(f, "N", 8)), vi("wq", tensorType(f, 8, 16)), vi("attn.cos", tensorType(f, 1, 16)),
		vi("head.weight", tensorType(f, 4, 16)), vi("head.bias", tensorType(f, 4)),
	}, "y")
}

// TestFrozenWeights: a weight named by Options.Frozen is a constant (no
// gradient, no update, not counted as a parameter), so an op multiplying
// by it no longer keeps its other operand for that gradient; patterns that
// match nothing or are malformed are errors that say so.
func TestFrozenWeights(t *testing.T) {
	g, err := Import(bytes.NewReader(rotary()), Options{Batch: 2, Loss: LossCrossEntropy, Optimizer: graph.OptSGD})
	require.NoError(t, err)
	assert.Equal(t, int64(8*16+16+4*16+4), g.ParamCount())
	assert.ElementsMatch(t, []string{"q", "attn.cos"}, saves(t, g, graph.OpMul), "the table as a parameter: q kept for its gradient")

	g, err = Import(bytes.NewReader(rotary()), Options{Batch: 2, Loss: LossCrossEntropy, Optimizer: graph.OptSGD, Frozen: []string{"*.cos"}})
	require.NoError(t, err)
	assert.Equal(t, int64(8*16+4*16+4), g.ParamCount())
	assert.Equal(t, []string{"attn.cos"}, saves(t, g, graph.OpMul), "a buffer: only the table, as PyTorch's MulBackward0 keeps")
	for i := range g.Tensors {
		if g.Tensors[i].Name == "attn.cos" {
			assert.Equal(t, graph.Constant, g.Tensors[i].Kind)
		}
	}
	for i := range g.Ops {
		for _, in := range g.Ops[i].Inputs {
			assert.NotEqual(t, "attn.cos.grad", g.Tensors[in].Name, "no gradient of a frozen weight")
		}
	}

	// Freezing a layer's weights (fine-tuning the head only).
	g, err = Import(bytes.NewReader(rotary()), Options{Batch: 2, Frozen: []string{"wq", "attn.*"}})
	require.NoError(t, err)
	assert.Equal(t, int64(4*16+4), g.ParamCount())

	for _, tc := range []struct{ pattern, want string }{
		{"*.sin", `frozen pattern "*.sin" matches no weight of the graph, expected a pattern of weight names such as "attn.cos", "head.bias", "head.weight", "wq"`},
		{"x", `frozen pattern "x" matches no weight`}, // the data input is not a weight
		{"[a", `frozen pattern "[a": syntax error in pattern`},
	} {
		_, err := Import(bytes.NewReader(rotary()), Options{Batch: 2, Frozen: []string{tc.pattern}})
		require.Error(t, err, tc.pattern)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// TestFoldedConvsMarkInferenceExports: a Conv whose weight torch.onnx named
// as a folded constant (onnx::Conv_<n>, what an inference export folds a
// batch norm into) is counted in AttrFoldedConvs; a training export's
// weights keep their module names and leave the attribute unset.
func TestFoldedConvsMarkInferenceExports(t *testing.T) {
	f := TensorProto_FLOAT
	conv := func(weight string) []byte {
		return headed(14, []*NodeProto{
			node("Conv", "/conv/Conv", []string{"x", weight, "onnx::Conv_9"}, []string{"c"}, intsAttr("pads", 1, 1, 1, 1)),
			node("Relu", "/relu", []string{"c"}, []string{"z"}),
		}, "z", vi("x", tensorType(f, "N", 3, 8, 8)), vi(weight, tensorType(f, 1, 3, 3, 3)), vi("onnx::Conv_9", tensorType(f, 1)))
	}
	g, err := Import(bytes.NewReader(conv("onnx::Conv_8")), Options{Batch: 2})
	require.NoError(t, err)
	assert.Equal(t, "1", g.Attrs[AttrFoldedConvs])
	g, err = Import(bytes.NewReader(conv("conv.weight")), Options{Batch: 2})
	require.NoError(t, err)
	assert.NotContains(t, g.Attrs, AttrFoldedConvs)
}
