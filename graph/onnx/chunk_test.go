package onnx

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// chunkModel is torch.onnx's export (opset 14, prim_constant_chunk) of
// h = x @ w; a, b = h.chunk(2, -1); y = a * b, then a Gemm head: the
// chunk size from Shape(h)[-1], and Slices each starting at the value the
// one before ends at. With slicing, it is instead x[..., :8], x[..., 8:]
// as Python slicing exports it: Slices with constants of their own and a
// steps input.
func chunkModel(slicing bool) []byte {
	f := TensorProto_FLOAT
	var nodes []*NodeProto
	nodes = append(nodes, node("MatMul", "/m/MatMul", []string{"x", "w"}, []string{"h"}))
	if slicing {
		nodes = append(nodes,
			constNode("/s0", ints64(0)), constNode("/e0", ints64(8)), constNode("/ax0", ints64(-1)), constNode("/st0", ints64(1)),
			node("Slice", "/Slice", []string{"h", "/s0", "/e0", "/ax0", "/st0"}, []string{"a"}),
			constNode("/s1", ints64(8)), constNode("/e1", ints64(9223372036854775807)), constNode("/ax1", ints64(-1)), constNode("/st1", ints64(1)),
			node("Slice", "/Slice_1", []string{"h", "/s1", "/e1", "/ax1", "/st1"}, []string{"b"}))
	} else {
		nodes = append(nodes,
			node("Shape", "/Shape", []string{"h"}, []string{"shape"}),
			constNode("/axis", ints64(-1)),
			node("Gather", "/Gather", []string{"shape", "/axis"}, []string{"dim"}, intAttr("axis", 0)),
			constNode("/start", ints64(0)),
			constNode("/km1", ints64(1)),
			node("Add", "/Add", []string{"dim", "/km1"}, []string{"dimk"}),
			constNode("/k", ints64(2)),
			node("Div", "/Div", []string{"dimk", "/k"}, []string{"size"}),
			constNode("/i1", ints64(1)),
			node("Mul", "/Mul", []string{"size", "/i1"}, []string{"end1"}),
			node("Slice", "/Slice", []string{"h", "/start", "end1", "/axis"}, []string{"a"}),
			constNode("/i2", ints64(2)),
			node("Mul", "/Mul_1", []string{"size", "/i2"}, []string{"end2"}),
			node("Slice", "/Slice_1", []string{"h", "end1", "end2", "/axis"}, []string{"b"}))
	}
	nodes = append(nodes,
		node("Mul", "/Mul_2", []string{"a", "b"}, []string{"ab"}),
		node("Gemm", "/head/Gemm", []string{"ab", "head.weight", "head.bias"}, []string{"y"}, intAttr("transB", 1)))
	return model(14, nodes, []*ValueInfoProto{
		vi("x", tensorType(f, "N", 8)), vi("w", tensorType(f, 8, 16)),
		vi("head.weight", tensorType(f, 4, 8)), vi("head.bias", tensorType(f, 4)),
	}, "y")
}

// TestChunkIsOneSplit: torch's export of chunk becomes one split (views of
// h, one backward op making h's gradient, as SplitBackward), Python
// slicing stays two slices (two SliceBackward, each a gradient of h's size,
// summed), as PyTorch runs each.
func TestChunkIsOneSplit(t *testing.T) {
	g, err := Import(bytes.NewReader(chunkModel(false)), Options{Batch: 4})
	require.NoError(t, err)
	assert.Equal(t, []string{graph.OpMatMul, graph.OpSplit, graph.OpMul, graph.OpLinear, graph.OpCrossEntropy}, opTypes(g, graph.Forward))
	var split *graph.Op
	for i := range g.Ops {
		if g.Ops[i].Type == graph.OpSplit {
			split = &g.Ops[i]
		}
	}
	require.NotNil(t, split)
	assert.Equal(t, "/Slice", split.Name)
	assert.Equal(t, "8,8", split.Attrs["sizes"])
	require.Len(t, split.Outputs, 2)
	for _, o := range split.Outputs {
		assert.Equal(t, graph.Shape{4, 8}, g.Tensors[o].Shape)
	}
	assert.Equal(t, 0, count(opTypes(g, graph.Backward), graph.OpGradAccumulate), "one gradient of h")

	g, err = Import(bytes.NewReader(chunkModel(true)), Options{Batch: 4})
	require.NoError(t, err)
	assert.Equal(t, []string{graph.OpMatMul, graph.OpSlice, graph.OpSlice, graph.OpMul, graph.OpLinear, graph.OpCrossEntropy}, opTypes(g, graph.Forward))
	assert.Equal(t, 1, count(opTypes(g, graph.Backward), graph.OpGradAccumulate), "two gradients of h, summed")
}
