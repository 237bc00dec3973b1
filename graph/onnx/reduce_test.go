package onnx

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// TestReduceSumGradientIsAView: PyTorch's sum_backward expands the output
// gradient (a view, no memory), so the imported ReduceSum's input gradient
// aliases it; ReduceProd is its own op, whose backward reads its input and
// result (prod_backward).
func TestReduceSumGradientIsAView(t *testing.T) {
	f := TensorProto_FLOAT
	for _, tc := range []struct {
		onnxOp, typ string
		view        bool
		saves       []string
	}{
		{"ReduceSum", OpReduceSum, true, nil},
		{"ReduceProd", OpReduceProd, false, []string{"h", "r"}},
	} {
		m := model(11, []*NodeProto{
			node("MatMul", "/m/MatMul", []string{"x", "w"}, []string{"h"}),
			node(tc.onnxOp, "/r", []string{"h"}, []string{"r"}, intsAttr("axes", 1), intAttr("keepdims", 0)),
			node("Gemm", "/head/Gemm", []string{"r", "head.weight", "head.bias"}, []string{"y"}, intAttr("transB", 1)),
		}, []*ValueInfoProto{
			vi("x", tensorType(f, "N", 8, 16)), vi("w", tensorType(f, 16, 16)),
			vi("head.weight", tensorType(f, 4, 16)), vi("head.bias", tensorType(f, 4)),
		}, "y")
		g, err := Import(bytes.NewReader(m), Options{Batch: 2})
		require.NoError(t, err, tc.onnxOp)
		var bw *graph.Op
		for i := range g.Ops {
			if g.Ops[i].Type == tc.typ+"_backward" {
				bw = &g.Ops[i]
			}
		}
		require.NotNil(t, bw, tc.onnxOp)
		gx := &g.Tensors[bw.Outputs[0]]
		assert.Equal(t, graph.Shape{2, 8, 16}, gx.Shape, tc.onnxOp)
		if tc.view {
			assert.NotEqual(t, bw.Outputs[0], g.StorageOf(bw.Outputs[0]), "%s: the input gradient is a view of the output gradient", tc.onnxOp)
		} else {
			assert.Equal(t, bw.Outputs[0], g.StorageOf(bw.Outputs[0]), "%s: a fresh gradient", tc.onnxOp)
			assert.ElementsMatch(t, tc.saves, saves(t, g, tc.typ), tc.onnxOp)
		}
	}
}

// TestFuseRsqrt: torch's export of rsqrt, Sqrt then Div(1, .), is the one
// op PyTorch runs, which saves its result only (RMSNorm's normalizer); a
// Div by another constant stays two ops.
func TestFuseRsqrt(t *testing.T) {
	f := TensorProto_FLOAT
	build := func(c float32) []byte {
		return model(14, []*NodeProto{
			node("MatMul", "/m/MatMul", []string{"x", "w"}, []string{"h"}),
			node("Mul", "/n/Mul", []string{"h", "h"}, []string{"sq"}),
			node("Sqrt", "/n/Sqrt", []string{"sq"}, []string{"s"}),
			floatConst("/n/Constant", c),
			node("Div", "/n/Div", []string{"/n/Constant", "s"}, []string{"r"}),
			node("Mul", "/n/Mul_1", []string{"h", "r"}, []string{"z"}),
			node("Gemm", "/head/Gemm", []string{"z", "head.weight", "head.bias"}, []string{"y"}, intAttr("transB", 1)),
		}, []*ValueInfoProto{
			vi("x", tensorType(f, "N", 16)), vi("w", tensorType(f, 16, 16)),
			vi("head.weight", tensorType(f, 4, 16)), vi("head.bias", tensorType(f, 4)),
		}, "y")
	}
	g, err := Import(bytes.NewReader(build(1)), Options{Batch: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{graph.OpMatMul, graph.OpMul, OpRsqrt, graph.OpMul, graph.OpLinear, graph.OpCrossEntropy}, opTypes(g, graph.Forward))
	assert.Equal(t, []string{"r"}, saves(t, g, OpRsqrt))
	g, err = Import(bytes.NewReader(build(2)), Options{Batch: 2})
	require.NoError(t, err)
	assert.Contains(t, opTypes(g, graph.Forward), OpSqrt)
	assert.NotContains(t, opTypes(g, graph.Forward), OpRsqrt)
}
