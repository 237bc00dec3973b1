package onnx

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// ifModel is xs = x [N, 8, 4, 4] times a weight, then If(cond) whose then
// branch is Relu(xs) and whose else branch is Sigmoid(xs) (or op), then the
// head. cond is Equal(Size(Shape(xs)), rank): known at import time.
func ifModel(rank int64, elseOp string) []byte {
	f := TensorProto_FLOAT
	branch := func(name, op string) *AttributeProto {
		g := &GraphProto{Name: strp(name), Node: []*NodeProto{node(op, "/"+name+"/"+op, []string{"xs"}, []string{name + "_out"})},
			Output: []*ValueInfoProto{vi(name+"_out", nil)}}
		return &AttributeProto{Name: strp(name), Type: attrType(AttributeProto_GRAPH), G: g}
	}
	return headed(14, []*NodeProto{
		node("Mul", "/scale", []string{"x", "s.weight"}, []string{"xs"}),
		node("Shape", "/shape", []string{"xs"}, []string{"sh"}),
		node("Size", "/rank", []string{"sh"}, []string{"r"}),
		constNode("/want", &TensorProto{DataType: proto32(TensorProto_INT64), Int64Data: []int64{rank}}),
		node("Equal", "/eq", []string{"r", "/want"}, []string{"cond"}),
		node("If", "/if", []string{"cond"}, []string{"o"}, branch("then_branch", "Relu"), branch("else_branch", elseOp)),
	}, "o", vi("x", tensorType(f, "N", 8, 4, 4)), vi("s.weight", tensorType(f, 1, 8, 1, 1)))
}

func proto32(t TensorProto_DataType) *int32 { v := int32(t); return &v }

// TestIf: an If on shapes (torch.onnx's export of a Python branch on a
// rank, as F.local_response_norm's) imports the branch it takes.
func TestIf(t *testing.T) {
	g, err := Import(bytes.NewReader(ifModel(4, "Sigmoid")), Options{Batch: 2})
	require.NoError(t, err)
	assert.Contains(t, opTypes(g, graph.Forward), "relu")
	assert.NotContains(t, opTypes(g, graph.Forward), "sigmoid")
	g, err = Import(bytes.NewReader(ifModel(3, "Sigmoid")), Options{Batch: 2})
	require.NoError(t, err)
	assert.Contains(t, opTypes(g, graph.Forward), "sigmoid")
	assert.NotContains(t, opTypes(g, graph.Forward), "relu")

	_, err = Import(bytes.NewReader(ifModel(3, "Zeta")), Options{Batch: 2})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "else_branch node 0")
	assert.ErrorIs(t, err, ErrUnsupported)

	// A condition known only at run time.
	f := TensorProto_FLOAT
	then := &GraphProto{Name: strp("t"), Node: []*NodeProto{node("Relu", "/t", []string{"x"}, []string{"t_out"})}, Output: []*ValueInfoProto{vi("t_out", nil)}}
	dyn := headed(14, []*NodeProto{
		node("ReduceMax", "/max", []string{"x"}, []string{"m"}, intAttr("keepdims", 0)),
		node("Greater", "/gt", []string{"m", "zero"}, []string{"cond"}),
		node("If", "/if", []string{"cond"}, []string{"o"}, &AttributeProto{Name: strp("then_branch"), Type: attrType(AttributeProto_GRAPH), G: then},
			&AttributeProto{Name: strp("else_branch"), Type: attrType(AttributeProto_GRAPH), G: then}),
	}, "o", vi("x", tensorType(f, "N", 8, 4, 4)), vi("zero", tensorType(f)))
	_, err = Import(bytes.NewReader(dyn), Options{Batch: 2})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `condition "cond" is not known at import time`)
}
