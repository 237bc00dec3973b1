package onnx

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

func TestEinsumShape(t *testing.T) {
	v := func(shape ...int64) *value { return &value{shape: shape, tensor: graph.NoTensor} }
	for _, tc := range []struct {
		eq    string
		xs    []*value
		shape []int64
		flops int64
	}{
		{"bhqd,bhkd->bhqk", []*value{v(2, 4, 8, 16), v(2, 4, 6, 16)}, []int64{2, 4, 8, 6}, 2 * 2 * 4 * 8 * 6 * 16},
		{"bhqk,bhkd->bqhd", []*value{v(2, 4, 8, 6), v(2, 4, 6, 16)}, []int64{2, 8, 4, 16}, 2 * 2 * 4 * 8 * 6 * 16},
		{"ij,jk", []*value{v(3, 4), v(4, 5)}, []int64{3, 5}, 2 * 3 * 4 * 5},
		{"...ij,...jk->...ik", []*value{v(7, 3, 4), v(4, 5)}, []int64{7, 3, 5}, 2 * 7 * 3 * 4 * 5},
		{"b i d, d e -> b i e", []*value{v(2, 3, 4), v(4, 6)}, []int64{2, 3, 6}, 2 * 2 * 3 * 4 * 6},
		{"ij->ji", []*value{v(3, 4)}, []int64{4, 3}, 12},
		{"bij->b", []*value{v(2, 3, 4)}, []int64{2}, 24},
		{"i,i", []*value{v(1), v(5)}, nil, 10},
	} {
		shape, flops, err := einsumShape(tc.eq, tc.xs)
		require.NoError(t, err, tc.eq)
		assert.Equal(t, tc.shape, shape, tc.eq)
		assert.Equal(t, tc.flops, flops, tc.eq)
	}
	for _, tc := range []struct {
		eq   string
		xs   []*value
		want string
	}{
		{"ii->i", []*value{v(3, 3)}, "repeats index i (a diagonal)"},
		{"ij,jk->ik", []*value{v(3, 4), v(5, 6)}, "index j is 4 in one operand and 5 in another"},
		{"ij,jk->iz", []*value{v(3, 4), v(4, 6)}, "output index z is in no operand"},
		{"ij,jk", []*value{v(3, 4)}, "2 operand terms, the node 1 inputs"},
		{"ijk->i", []*value{v(3, 4)}, `term "ijk" names 3 dimensions, operand 0 has shape [3 4]`},
		{"i1->i", []*value{v(3, 4)}, `character '1'`},
		{"...i,...i->i", []*value{v(2, 3), v(2, 3)}, "the output drops the operands' ... dimensions"},
		{"....i->i", []*value{v(2, 3)}, `expected at most one "..."`},
	} {
		_, _, err := einsumShape(tc.eq, tc.xs)
		require.Error(t, err, tc.eq)
		assert.Contains(t, err.Error(), tc.want, tc.eq)
	}
}

// TestEinsumImport: an attention written with torch.einsum imports as
// einsum ops whose backward reads both operands.
func TestEinsumImport(t *testing.T) {
	f := TensorProto_FLOAT
	eq := func(s string) *AttributeProto {
		return &AttributeProto{Name: strp("equation"), Type: attrType(AttributeProto_STRING), S: []byte(s)}
	}
	data := headed(17, []*NodeProto{
		node("Mul", "/scale", []string{"x", "s.weight"}, []string{"xs"}),
		node("Einsum", "/scores", []string{"xs", "xs"}, []string{"a"}, eq("bchw,bdhw->bcdh")),
		node("Einsum", "/mix", []string{"a", "xs"}, []string{"o"}, eq("bcdh,bdhw->bchw")),
	}, "o", vi("x", tensorType(f, "N", 8, 4, 4)), vi("s.weight", tensorType(f, 1, 8, 1, 1)))
	g, err := Import(bytes.NewReader(data), Options{Batch: 2})
	require.NoError(t, err)
	ops := opsOfType(g, OpEinsum)
	require.Len(t, ops, 2)
	assert.Equal(t, graph.Shape{2, 8, 8, 4}, g.Tensors[ops[0].Outputs[0]].Shape)
	assert.Equal(t, graph.Shape{2, 8, 4, 4}, g.Tensors[ops[1].Outputs[0]].Shape)
	bw := backwardOf(g, ops[1])
	require.NotNil(t, bw)
	assert.Contains(t, bw.Inputs, ops[1].Inputs[0])
	assert.Contains(t, bw.Inputs, ops[1].Inputs[1])

	three := headed(17, []*NodeProto{node("Einsum", "/e", []string{"x", "x", "x"}, []string{"o"}, eq("bchw,bchw,bchw->bchw"))}, "o",
		vi("x", tensorType(f, "N", 8, 4, 4)))
	_, err = Import(bytes.NewReader(three), Options{Batch: 2})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "3 operands: einsum of one or two operands is supported")
}
