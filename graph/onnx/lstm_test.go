package onnx

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/remat-dev/remat/graph"
)

// lstmModel is an LSTM node (hidden 4, input 3, 5 steps) whose W, R and B
// are, as torch.onnx exports nn.LSTM, Slice/Concat reorderings of the
// parameters w_ih [16 3], w_hh [16 4], b_ih [16], b_hh [16] (per
// direction), unsqueezed to [dirs, ...]. outputs: Y, Y_h or both.
func lstmModel(direction string, outputs ...string) []byte {
	f := TensorProto_FLOAT
	i64 := int32(TensorProto_INT64)
	ic := func(name string, v ...int64) *NodeProto {
		tt := AttributeProto_TENSOR
		an := "value"
		return node("Constant", name, nil, []string{name}, &AttributeProto{Name: &an, Type: &tt,
			T: &TensorProto{DataType: &i64, Dims: []int64{int64(len(v))}, Int64Data: v}})
	}
	nodes := []*NodeProto{ic("zero", 0), ic("h4", 4), ic("h8", 8), ic("h16", 16), ic("ax0", 0)}
	dirs := []string{""}
	if direction == "bidirectional" {
		dirs = append(dirs, "_reverse")
	}
	var ws, rs, bs []string
	for _, d := range dirs {
		// Gate order i, f, g, o (PyTorch) -> i, o, f, c (ONNX): slices
		// [0:4], [12:16], [4:12] of each weight, concatenated.
		for _, p := range []string{"w_ih", "w_hh", "b_ih", "b_hh"} {
			src := p + d
			nodes = append(nodes,
				node("Slice", src+"/a", []string{src, "zero", "h4", "ax0"}, []string{src + ".a"}),
				node("Slice", src+"/b", []string{src, "h16", "h16", "ax0"}, []string{src + ".b"}),
				node("Slice", src+"/c", []string{src, "h4", "h16", "ax0"}, []string{src + ".c"}),
				node("Concat", src+"/cat", []string{src + ".a", src + ".b", src + ".c"}, []string{src + ".cat"}, intAttr("axis", 0)))
		}
		nodes = append(nodes, node("Concat", "b"+d+"/cat", []string{"b_ih" + d + ".cat", "b_hh" + d + ".cat"}, []string{"b" + d}, intAttr("axis", 0)))
		ws, rs, bs = append(ws, "w_ih"+d+".cat"), append(rs, "w_hh"+d+".cat"), append(bs, "b"+d)
	}
	stack := func(name string, xs []string) string {
		var us []string
		for _, x := range xs {
			nodes = append(nodes, node("Unsqueeze", x+"/u", []string{x, "ax0"}, []string{x + ".u"}))
			us = append(us, x+".u")
		}
		nodes = append(nodes, node("Concat", name, us, []string{name}, intAttr("axis", 0)))
		return name
	}
	w, r, b := stack("W", ws), stack("R", rs), stack("B", bs)
	nodes = append(nodes, node("LSTM", "/lstm/LSTM", []string{"x", w, r, b}, []string{"Y", "Y_h", "Y_c"},
		intAttr("hidden_size", 4), &AttributeProto{Name: strp("direction"), Type: attrType(AttributeProto_STRING), S: []byte(direction)}))
	ins := []*ValueInfoProto{vi("x", tensorType(f, 5, "batch", 3))}
	for _, d := range dirs {
		ins = append(ins, vi("w_ih"+d, tensorType(f, 16, 3)), vi("w_hh"+d, tensorType(f, 16, 4)),
			vi("b_ih"+d, tensorType(f, 16)), vi("b_hh"+d, tensorType(f, 16)))
	}
	return model(14, nodes, ins, outputs...)
}

func strp(s string) *string { return &s }

func attrType(t AttributeProto_AttributeType) *AttributeProto_AttributeType { return &t }

func count(xs []string, s string) int {
	n := 0
	for _, x := range xs {
		if x == s {
			n++
		}
	}
	return n
}

func TestLSTMPerStep(t *testing.T) {
	g, err := ImportForward(bytes.NewReader(lstmModel("forward", "Y")), Options{Dims: map[string]int64{"batch": 2}})
	require.NoError(t, err)
	types := opTypes(g, graph.Forward)
	// The input projection, its per-step views, one lstm_step per time
	// step, the stacked Y (and its [seq, 1, batch, H] view). The gate
	// reordering of the weights is not materialized: no slice of a
	// parameter, no concatenation but Y's.
	assert.Equal(t, []string{graph.OpLinear, graph.OpSplit, OpLSTMStep, OpLSTMStep, OpLSTMStep, OpLSTMStep, OpLSTMStep,
		graph.OpConcat, graph.OpReshape}, types)
	stack := opsOfType(g, graph.OpConcat)[0]
	steps := opsOfType(g, OpLSTMStep)
	want := []graph.TensorID{g.Ops[0].Inputs[0], steps[4].Outputs[0], steps[4].Outputs[1], opsOfType(g, graph.OpLinear)[0].Outputs[0]}
	assert.Equal(t, tensorList(want), stack.Attrs[graph.AttrHolds], "the layer holds X, the last h and c and the input projection to its end")
	assert.Equal(t, int64(16*3+16*4+16+16), g.ParamCount())
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Type != OpLSTMStep {
			continue
		}
		names := []string{}
		for _, in := range op.Inputs {
			names = append(names, g.Tensors[in].Name)
		}
		assert.Equal(t, []string{"w_hh", "b_hh"}, names[3:], "step %s reads the parameters", op.Name)
		// gates [1, 1, batch, 4H] and tanh(c) are saved for the backward;
		// the i*g product is the workspace.
		assert.Equal(t, graph.Shape{1, 1, 2, 16}, g.Tensors[op.Outputs[2]].Shape)
		assert.Equal(t, int64(2*4*4), op.Workspace)
	}
	y := g.Tensors[g.Ops[len(g.Ops)-1].Outputs[0]]
	assert.Equal(t, "Y", y.Name)
	assert.Equal(t, graph.Shape{5, 1, 2, 4}, y.Shape)
	r := Rules()
	rule, ok := r.Lookup(OpLSTMStep)
	require.True(t, ok)
	assert.Equal(t, []graph.Saved{graph.SaveIn(1), graph.SaveIn(2), graph.SaveIn(3), graph.SaveOut(2), graph.SaveOut(3)}, rule.Saves)
}

func TestLSTMBidirectional(t *testing.T) {
	g, err := ImportForward(bytes.NewReader(lstmModel("bidirectional", "Y", "Y_h")), Options{Dims: map[string]int64{"batch": 2}})
	require.NoError(t, err)
	types := opTypes(g, graph.Forward)
	assert.Equal(t, 10, count(types, OpLSTMStep))
	assert.Equal(t, 2, count(types, graph.OpLinear))
	assert.Equal(t, int64(2*(16*3+16*4+16+16)), g.ParamCount())
	shapes := map[string]graph.Shape{}
	for i := range g.Tensors {
		shapes[g.Tensors[i].Name] = g.Tensors[i].Shape
	}
	assert.Equal(t, graph.Shape{5, 2, 2, 4}, shapes["Y"])
	assert.Equal(t, graph.Shape{2, 2, 4}, shapes["Y_h"])
	// The reverse direction runs from the last time step to the first.
	var order []string
	for i := range g.Ops {
		if op := &g.Ops[i]; op.Type == OpLSTMStep && op.Attrs["time"] != "" {
			order = append(order, op.Attrs["time"])
		}
	}
	assert.Equal(t, []string{"0", "1", "2", "3", "4", "4", "3", "2", "1", "0"}, order)
	// The first direction's projection is held until the second's exists.
	projs := opsOfType(g, graph.OpLinear)
	assert.Equal(t, tensorList(projs[0].Outputs), projs[1].Attrs[graph.AttrHolds])
}

// Every time step is an op: a sequence past maxLSTMSteps is refused with
// the limit named, not built.
func TestLSTMStepLimit(t *testing.T) {
	var m ModelProto
	require.NoError(t, proto.Unmarshal(lstmModel("bidirectional", "Y"), &m))
	dim := m.Graph.Input[0].GetType().GetTensorType().GetShape().GetDim()[0]
	dim.Value = &TensorShapeProto_Dimension_DimValue{DimValue: 40000}
	_, err := FromModelForward(&m, Options{Dims: map[string]int64{"batch": 2}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"/lstm/LSTM" (LSTM)`)
	assert.Contains(t, err.Error(), "40000 time steps in 2 directions, expected at most 65536")
}

// rnnModel is a GRU or RNN node (hidden 4, input 3, 5 steps, batch 2) with
// W, R and B graph inputs (parameters) and the given attributes.
func rnnModel(op string, gates int, attrs ...*AttributeProto) []byte {
	f := TensorProto_FLOAT
	nodes := []*NodeProto{node(op, "/rnn/"+op, []string{"x", "W", "R", "B"}, []string{"Y", "Y_h"}, append(attrs, intAttr("hidden_size", 4))...)}
	return model(14, nodes, []*ValueInfoProto{vi("x", tensorType(f, 5, "batch", 3)), vi("W", tensorType(f, 1, gates*4, 3)),
		vi("R", tensorType(f, 1, gates*4, 4)), vi("B", tensorType(f, 1, 2*gates*4))}, "Y")
}

// TestGRUAndRNNPerStep: nn.GRU and nn.RNN import as nn.LSTM does, with the
// per-step ops of PyTorch's CPU cells (see opLSTM).
func TestGRUAndRNNPerStep(t *testing.T) {
	acts := func(v ...string) *AttributeProto {
		var b [][]byte
		for _, s := range v {
			b = append(b, []byte(s))
		}
		return &AttributeProto{Name: strp("activations"), Type: attrType(AttributeProto_STRINGS), Strings: b}
	}
	for _, tc := range []struct {
		name, step string
		data       []byte
		outs       []graph.Shape // the step's outputs
		activation string
	}{
		{"GRU", OpGRUStep, rnnModel("GRU", 3, intAttr("linear_before_reset", 1)),
			[]graph.Shape{{1, 1, 2, 4}, {1, 1, 2, 12}, {1, 1, 2, 4}, {1, 1, 2, 4}, {1, 1, 2, 4}}, ""},
		{"RNN", OpRNNStep, rnnModel("RNN", 1), []graph.Shape{{1, 1, 2, 4}}, "Tanh"},
		{"RNN relu", OpRNNStep, rnnModel("RNN", 1, acts("Relu")), []graph.Shape{{1, 1, 2, 4}}, "Relu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := ImportForward(bytes.NewReader(tc.data), Options{Dims: map[string]int64{"batch": 2}})
			require.NoError(t, err)
			assert.Equal(t, []string{graph.OpLinear, graph.OpSplit, tc.step, tc.step, tc.step, tc.step, tc.step, graph.OpConcat, graph.OpReshape},
				opTypes(g, graph.Forward))
			for _, op := range opsOfType(g, tc.step) {
				var shapes []graph.Shape
				for _, o := range op.Outputs {
					shapes = append(shapes, g.Tensors[o].Shape)
				}
				assert.Equal(t, tc.outs, shapes, op.Name)
				assert.Equal(t, tc.activation, op.Attrs["activation"])
				if tc.step == OpRNNStep {
					assert.Equal(t, int64(2*4*4), op.Workspace, "the pre-activation sum")
				} else {
					assert.Zero(t, op.Workspace)
				}
			}
			assert.Equal(t, graph.Shape{5, 1, 2, 4}, g.Tensors[g.Ops[len(g.Ops)-1].Outputs[0]].Shape)
		})
	}
	r := Rules()
	gru, _ := r.Lookup(OpGRUStep)
	assert.Equal(t, []graph.Saved{graph.SaveIn(1), graph.SaveIn(2), graph.SaveOut(1), graph.SaveOut(2), graph.SaveOut(3), graph.SaveOut(4)}, gru.Saves)
	rnn, _ := r.Lookup(OpRNNStep)
	assert.Equal(t, []graph.Saved{graph.SaveIn(1), graph.SaveIn(2), graph.SaveOut(0)}, rnn.Saves)

	_, err := ImportForward(bytes.NewReader(rnnModel("RNN", 1, acts("Sigmoid"))), Options{Dims: map[string]int64{"batch": 2}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `activations[0] is "Sigmoid", expected Tanh or Relu`)
	_, err = ImportForward(bytes.NewReader(rnnModel("GRU", 4)), Options{Dims: map[string]int64{"batch": 2}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "W [1 16 3] and R [1 16 4], expected [1 12 3] and [1 12 4]")
}

func tensorList(ids []graph.TensorID) string {
	s := ""
	for i, id := range ids {
		if i > 0 {
			s += ","
		}
		s += strconv.Itoa(int(id))
	}
	return s
}
