package onnx

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

func constNode(name string, tp *TensorProto) *NodeProto {
	an, tt := "value", AttributeProto_TENSOR
	return node("Constant", name, nil, []string{name}, &AttributeProto{Name: &an, Type: &tt, T: tp})
}

// headed appends what every test model ends with: the mean of z over all
// but the batch dimension (z has rank 4) and a Gemm to 4 classes.
func headed(opset int64, nodes []*NodeProto, z string, inputs ...*ValueInfoProto) []byte {
	f := TensorProto_FLOAT
	nodes = append(nodes,
		node("ReduceMean", "/pool", []string{z}, []string{"pooled"}, intsAttr("axes", 1, 2, 3)),
		node("Flatten", "/flat", []string{"pooled"}, []string{"flat"}),
		node("Gemm", "/head/Gemm", []string{"flat", "head.weight", "head.bias"}, []string{"y"}, intAttr("transB", 1)))
	inputs = append(inputs, vi("head.weight", tensorType(f, 4, 1)), vi("head.bias", tensorType(f, 4)))
	return model(opset, nodes, inputs, "y")
}

// groupNormModel is what torch.onnx exports (opset 14) for nn.GroupNorm(4,
// 8) on xs = x [N, 8, 4, 4] times a weight: Reshape to [0, 4, -1], InstanceNormalization with
// constant ones and zeros, Reshape to Shape(x), Mul and Add of the
// unsqueezed weight and bias (affine), then Relu. one is the instance
// norm's scale value (1 in torch's export).
func groupNormModel(affine bool, one float32) []byte {
	f := TensorProto_FLOAT
	nodes := []*NodeProto{
		node("Mul", "/scale", []string{"x", "s.weight"}, []string{"xs"}),
		constNode("/gn/Constant", ints64(0, 4, -1)),
		node("Reshape", "/gn/Reshape", []string{"xs", "/gn/Constant"}, []string{"r"}),
		constNode("/gn/Constant_1", floats(one, one, one, one)),
		constNode("/gn/Constant_2", floats(0, 0, 0, 0)),
		node("InstanceNormalization", "/gn/InstanceNormalization", []string{"r", "/gn/Constant_1", "/gn/Constant_2"}, []string{"in"}),
		node("Shape", "/gn/Shape", []string{"xs"}, []string{"sx"}),
		node("Reshape", "/gn/Reshape_1", []string{"in", "sx"}, []string{"normed"}),
	}
	z := "normed"
	if affine {
		nodes = append(nodes,
			constNode("/gn/Constant_3", ints64(1, 2)),
			node("Unsqueeze", "/gn/Unsqueeze", []string{"gn.weight", "/gn/Constant_3"}, []string{"wu"}),
			node("Mul", "/gn/Mul", []string{"normed", "wu"}, []string{"scaled"}),
			constNode("/gn/Constant_4", ints64(1, 2)),
			node("Unsqueeze", "/gn/Unsqueeze_1", []string{"gn.bias", "/gn/Constant_4"}, []string{"bu"}),
			node("Add", "/gn/Add", []string{"scaled", "bu"}, []string{"gn"}))
		z = "gn"
	}
	nodes = append(nodes, node("Relu", "/relu", []string{z}, []string{"act"}))
	return headed(14, nodes, "act", vi("x", tensorType(f, "N", 8, 4, 4)), vi("s.weight", tensorType(f, 1, 8, 1, 1)),
		vi("gn.weight", tensorType(f, 8)), vi("gn.bias", tensorType(f, 8)))
}

func opsOfType(g *graph.Graph, typ string) []*graph.Op {
	var out []*graph.Op
	for i := range g.Ops {
		if g.Ops[i].Type == typ {
			out = append(out, &g.Ops[i])
		}
	}
	return out
}

func tensorNames(g *graph.Graph, ids []graph.TensorID) []string {
	var out []string
	for _, t := range ids {
		out = append(out, g.Tensors[t].Name)
	}
	return out
}

// backwardOf returns the backward op differentiating op (nil if none).
func backwardOf(g *graph.Graph, op *graph.Op) *graph.Op {
	for i := range g.Ops {
		if g.Ops[i].Phase == graph.Backward && g.Ops[i].Forward == op.ID {
			return &g.Ops[i]
		}
	}
	return nil
}

// TestGroupNormFusion: torch's GroupNorm export becomes one group_norm that
// reads the parameters themselves and whose backward saves x, the weight,
// mean and rstd (native_group_norm_backward), not the normalized tensor a
// Mul would save.
func TestGroupNormFusion(t *testing.T) {
	for _, affine := range []bool{true, false} {
		g, err := Import(bytes.NewReader(groupNormModel(affine, 1)), Options{Batch: 2})
		require.NoError(t, err)
		assert.Equal(t, []string{"mul", "group_norm", "relu", "reduce_mean", "flatten", "linear", "cross_entropy"}, opTypes(g, graph.Forward), "affine %v", affine)
		gn := opsOfType(g, OpGroupNorm)[0]
		want := []string{"xs"}
		if affine {
			want = append(want, "gn.weight", "gn.bias")
		}
		assert.Equal(t, want, tensorNames(g, gn.Inputs))
		assert.Equal(t, "4", gn.Attrs["groups"])
		assert.Equal(t, graph.Shape{2, 8, 4, 4}, g.Tensors[gn.Outputs[0]].Shape)
		assert.Equal(t, graph.Shape{2, 4}, g.Tensors[gn.Outputs[1]].Shape)
		bw := backwardOf(g, gn)
		require.NotNil(t, bw)
		saved := append([]graph.TensorID{gn.Inputs[0]}, gn.Outputs[1], gn.Outputs[2])
		if affine {
			saved = append(saved, gn.Inputs[1])
		}
		for _, s := range saved {
			assert.Contains(t, bw.Inputs, s, "affine %v: the backward reads %s", affine, g.Tensors[s].Name)
		}
		assert.NotContains(t, bw.Inputs, gn.Outputs[0])
	}
	// Constants torch does not emit: the nodes are converted one by one
	// (the instance norm of the [N, 4, 32] reshape, then Mul and Add).
	g, err := Import(bytes.NewReader(groupNormModel(true, 2)), Options{Batch: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{"mul", "reshape", "group_norm", "reshape", "reshape", "mul", "reshape", "add", "relu", "reduce_mean", "flatten", "linear", "cross_entropy"},
		opTypes(g, graph.Forward))
	gn := opsOfType(g, OpGroupNorm)[0]
	assert.Equal(t, graph.Shape{2, 4, 32}, g.Tensors[gn.Inputs[0]].Shape)
	assert.Equal(t, graph.Shape{2, 4}, g.Tensors[gn.Outputs[1]].Shape)
}

// TestSiLUFusion: torch's SiLU export x * sigmoid(x) becomes silu(x), which
// saves only x; a sigmoid read elsewhere too stays a sigmoid and a mul.
func TestSiLUFusion(t *testing.T) {
	f := TensorProto_FLOAT
	build := func(shared bool) []byte {
		nodes := []*NodeProto{
			node("Sigmoid", "/act/Sigmoid", []string{"x"}, []string{"s"}),
			node("Mul", "/act/Mul", []string{"s", "x"}, []string{"a"}),
		}
		z := "a"
		if shared {
			nodes = append(nodes, node("Add", "/add", []string{"a", "s"}, []string{"as"}))
			z = "as"
		}
		return headed(14, nodes, z, vi("x", tensorType(f, "N", 8, 4, 4)))
	}
	g, err := Import(bytes.NewReader(build(false)), Options{Batch: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{"silu", "reduce_mean", "flatten", "linear", "cross_entropy"}, opTypes(g, graph.Forward))
	g, err = Import(bytes.NewReader(build(true)), Options{Batch: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{"sigmoid", "mul", "add", "reduce_mean", "flatten", "linear", "cross_entropy"}, opTypes(g, graph.Forward))
}

// oneOp is xs = x [N, 8, 4, 4] times a weight (so that it needs a
// gradient) -> op -> head.
func oneOp(op string, ins []string, consts map[string]*TensorProto, extra []*ValueInfoProto, attrs ...*AttributeProto) []byte {
	f := TensorProto_FLOAT
	nodes := []*NodeProto{node("Mul", "/scale", []string{"x", "s.weight"}, []string{"xs"})}
	for name, tp := range consts {
		nodes = append(nodes, constNode(name, tp))
	}
	nodes = append(nodes, node(op, "/op", append([]string{"xs"}, ins...), []string{"o"}, attrs...))
	return headed(17, nodes, "o", append([]*ValueInfoProto{vi("x", tensorType(f, "N", 8, 4, 4)), vi("s.weight", tensorType(f, 1, 8, 1, 1))}, extra...)...)
}

func strAttr(name, v string) *AttributeProto {
	t := AttributeProto_STRING
	return &AttributeProto{Name: &name, Type: &t, S: []byte(v)}
}

// TestMoreOps: the op types the importer maps for GroupNorm's and
// InstanceNorm's InstanceNormalization, PReLU, PixelShuffle, repeat,
// cumsum, F.normalize and friends, with their shapes and what their
// backward reads (what PyTorch's autograd saves).
func TestMoreOps(t *testing.T) {
	f := TensorProto_FLOAT
	slope := []*ValueInfoProto{vi("p.weight", tensorType(f, 8, 1, 1))}
	for _, tc := range []struct {
		name  string
		data  []byte
		typ   string
		shape graph.Shape
		saves []int // forward inputs (>= 0) and outputs (-1 - i) the backward reads
	}{
		{"InstanceNormalization", oneOp("InstanceNormalization", []string{"s", "b"}, nil,
			[]*ValueInfoProto{vi("s", tensorType(f, 8)), vi("b", tensorType(f, 8))}), OpGroupNorm, graph.Shape{2, 8, 4, 4}, []int{0, 1, -2, -3}},
		{"PRelu", oneOp("PRelu", []string{"p.weight"}, nil, slope), OpPReLU, graph.Shape{2, 8, 4, 4}, []int{0, 1}},
		{"ReduceL2", oneOp("ReduceL2", nil, nil, nil, intsAttr("axes", 1), intAttr("keepdims", 1)),
			OpNorm, graph.Shape{2, 1, 4, 4}, []int{0, -1}},
		{"ReduceLogSumExp", oneOp("ReduceLogSumExp", nil, nil, nil, intsAttr("axes", 2)),
			OpNorm, graph.Shape{2, 8, 1, 4}, []int{0, -1}},
		{"Tile", oneOp("Tile", []string{"reps"}, map[string]*TensorProto{"reps": ints64(1, 1, 2, 3)}, nil), OpTile, graph.Shape{2, 8, 8, 12}, nil},
		{"DepthToSpace DCR", oneOp("DepthToSpace", nil, nil, nil, intAttr("blocksize", 2)), OpPixelShuffle, graph.Shape{2, 2, 8, 8}, nil},
		{"DepthToSpace CRD", oneOp("DepthToSpace", nil, nil, nil, intAttr("blocksize", 2), strAttr("mode", "CRD")), OpPixelShuffle, graph.Shape{2, 2, 8, 8}, nil},
		{"SpaceToDepth", oneOp("SpaceToDepth", nil, nil, nil, intAttr("blocksize", 2)), OpPixelShuffle, graph.Shape{2, 32, 2, 2}, nil},
		{"CumSum", oneOp("CumSum", []string{"axis"}, map[string]*TensorProto{"axis": ints64(-1)}, nil, intAttr("reverse", 1)), OpCumSum, graph.Shape{2, 8, 4, 4}, nil},
		{"Celu", oneOp("Celu", nil, nil, nil), OpELU, graph.Shape{2, 8, 4, 4}, []int{0}},
		{"Sign", oneOp("Sign", nil, nil, nil), OpFloor, graph.Shape{2, 8, 4, 4}, nil},
		{"Trilu", oneOp("Trilu", []string{"k"}, map[string]*TensorProto{"k": ints64(1)}, nil), OpTrilu, graph.Shape{2, 8, 4, 4}, nil},
		{"GatherElements", oneOp("GatherElements", []string{"i"}, nil, []*ValueInfoProto{vi("i", tensorType(TensorProto_INT64, "N", 8, 4, 2))}, intAttr("axis", 3)),
			OpGatherElements, graph.Shape{2, 8, 4, 2}, []int{0, 1}},
		{"ScatterElements", oneOp("ScatterElements", []string{"i", "u"}, nil, []*ValueInfoProto{vi("i", tensorType(TensorProto_INT64, "N", 8, 4, 2)),
			vi("u", tensorType(f, "N", 8, 4, 2))}, intAttr("axis", 3)), OpScatter, graph.Shape{2, 8, 4, 4}, []int{1}},
		{"ScatterElements add", oneOp("ScatterElements", []string{"i", "u"}, nil, []*ValueInfoProto{vi("i", tensorType(TensorProto_INT64, "N", 8, 4, 2)),
			vi("u", tensorType(f, "N", 8, 4, 2))}, intAttr("axis", 3), strAttr("reduction", "add")), OpScatterAdd, graph.Shape{2, 8, 4, 4}, []int{1}},
		{"ScatterND", oneOp("ScatterND", []string{"i", "u"}, nil, []*ValueInfoProto{vi("i", tensorType(TensorProto_INT64, "N", 8, 2)),
			vi("u", tensorType(f, "N", 8, 4, 4))}), OpScatter, graph.Shape{2, 8, 4, 4}, []int{1}},
		{"ScatterND add", oneOp("ScatterND", []string{"i", "u"}, nil, []*ValueInfoProto{vi("i", tensorType(TensorProto_INT64, "N", 8, 2)),
			vi("u", tensorType(f, "N", 8, 4, 4))}, strAttr("reduction", "add")), OpScatterAdd, graph.Shape{2, 8, 4, 4}, []int{1}},
		{"ReduceMax one axis", oneOp("ReduceMax", nil, nil, nil, intsAttr("axes", 1), intAttr("keepdims", 1)), OpMaxDim, graph.Shape{2, 1, 4, 4}, []int{-2}},
		{"ReduceMax two axes", oneOp("ReduceMax", nil, nil, nil, intsAttr("axes", 2, 3), intAttr("keepdims", 1)), OpReduceMax, graph.Shape{2, 8, 1, 1}, []int{0, -1}},
		{"Pad reflect", oneOp("Pad", []string{"p"}, map[string]*TensorProto{"p": ints64(0, 0, 1, 1, 0, 0, 1, 1)}, nil, strAttr("mode", "reflect")), OpPadReflect, graph.Shape{2, 8, 6, 6}, []int{0}},
		{"TopK", oneOp("TopK", []string{"k"}, map[string]*TensorProto{"k": ints64(3)}, nil, intAttr("axis", 1)), OpTopK, graph.Shape{2, 3, 4, 4}, []int{-2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Import(bytes.NewReader(tc.data), Options{Batch: 2})
			require.NoError(t, err)
			ops := opsOfType(g, tc.typ)
			require.Len(t, ops, 1)
			op := ops[0]
			assert.Equal(t, tc.shape, g.Tensors[op.Outputs[0]].Shape)
			bw := backwardOf(g, op)
			if bw == nil {
				assert.Empty(t, tc.saves)
				return
			}
			var reads []int
			for _, in := range bw.Inputs {
				for i, x := range op.Inputs {
					if x == in {
						reads = append(reads, i)
					}
				}
				for i, x := range op.Outputs {
					if x == in {
						reads = append(reads, -1-i)
					}
				}
			}
			assert.ElementsMatch(t, tc.saves, reads)
		})
	}
}

// TestMoreOpsFold: constant inputs fold (shape arithmetic through Tile,
// norms and signs of constants).
func TestMoreOpsFold(t *testing.T) {
	imp := &importer{opset: 18, vals: map[string]*value{}}
	c := func(shape []int64, v ...float64) *value {
		return &value{name: "c", et: int32(TensorProto_FLOAT), shape: shape, flts: v, isConst: true, tensor: graph.NoTensor}
	}
	reps := &value{name: "r", et: int32(TensorProto_INT64), shape: []int64{2}, ints: []int64{2, 2}, isConst: true, tensor: graph.NoTensor}
	out, err := opTile(imp, node("Tile", "t", []string{"c", "r"}, []string{"o"}), []*value{c([]int64{1, 2}, 1, 2), reps})
	require.NoError(t, err)
	assert.Equal(t, []int64{2, 4}, out[0].shape)
	assert.Equal(t, []float64{1, 2, 1, 2, 1, 2, 1, 2}, out[0].flts)

	axes := &value{name: "a", et: int32(TensorProto_INT64), shape: []int64{1}, ints: []int64{1}, isConst: true, tensor: graph.NoTensor}
	for op, want := range map[string][]float64{"ReduceL2": {5}, "ReduceL1": {7}, "ReduceSum": {-1}} {
		out, err = opReduce(imp, node(op, "r", []string{"c", "a"}, []string{"o"}), []*value{c([]int64{1, 2}, 3, -4), axes})
		require.NoError(t, err)
		assert.Equal(t, want, out[0].flts, op)
	}
	out, err = opUnary(imp, node("Sign", "s", []string{"c"}, []string{"o"}), []*value{c([]int64{3}, 2, 0, -3)})
	require.NoError(t, err)
	assert.Equal(t, []float64{1, 0, -1}, out[0].flts)
	out, err = opPRelu(imp, node("PRelu", "p", []string{"c", "s"}, []string{"o"}), []*value{c([]int64{2}, 2, -3), c([]int64{1}, 0.5)})
	require.NoError(t, err)
	assert.Equal(t, []float64{2, -1.5}, out[0].flts)

	// A causal mask: torch.ones(3, 3).triu(1), and tril with k = -1 of a
	// batch of two 2 x 3 matrices.
	ones := c([]int64{3, 3}, 1, 1, 1, 1, 1, 1, 1, 1, 1)
	k1 := &value{name: "k", et: int32(TensorProto_INT64), shape: []int64{}, ints: []int64{1}, isConst: true, tensor: graph.NoTensor}
	out, err = opTrilu(imp, node("Trilu", "u", []string{"c", "k"}, []string{"o"}), []*value{ones, k1})
	require.NoError(t, err)
	assert.Equal(t, []float64{0, 1, 1, 0, 0, 1, 0, 0, 0}, out[0].flts)
	km := &value{name: "k", et: int32(TensorProto_INT64), shape: []int64{}, ints: []int64{-1}, isConst: true, tensor: graph.NoTensor}
	out, err = opTrilu(imp, node("Trilu", "l", []string{"c", "k"}, []string{"o"}, intAttr("upper", 0)),
		[]*value{c([]int64{2, 2, 3}, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12), km})
	require.NoError(t, err)
	assert.Equal(t, []float64{0, 0, 0, 4, 0, 0, 0, 0, 0, 10, 0, 0}, out[0].flts)
}

func TestMoreOpsErrors(t *testing.T) {
	f := TensorProto_FLOAT
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"blocksize 0", "attribute blocksize is 0, expected 1..65536", oneOp("DepthToSpace", nil, nil, nil, intAttr("blocksize", 0))},
		{"channels", "channels 8 are not a multiple of blocksize^2 = 9", oneOp("DepthToSpace", nil, nil, nil, intAttr("blocksize", 3))},
		{"mode", `attribute mode is "XYZ", expected DCR or CRD`, oneOp("DepthToSpace", nil, nil, nil, intAttr("blocksize", 2), strAttr("mode", "XYZ"))},
		{"space", "height and width are not multiples of blocksize 3", oneOp("SpaceToDepth", nil, nil, nil, intAttr("blocksize", 3))},
		{"repeats rank", "repeats has 2 values, expected 4 (the input's rank)", oneOp("Tile", []string{"r"}, map[string]*TensorProto{"r": ints64(1, 2)}, nil)},
		{"repeats negative", "repeats[1] is -2, expected >= 0", oneOp("Tile", []string{"r"}, map[string]*TensorProto{"r": ints64(1, -2, 1, 1)}, nil)},
		{"repeats dynamic", "repeats \"r\" is not a constant", oneOp("Tile", []string{"r"}, nil, []*ValueInfoProto{vi("r", tensorType(TensorProto_INT64, 4))})},
		{"cumsum axis", "axis 4 is out of range for rank 4", oneOp("CumSum", []string{"a"}, map[string]*TensorProto{"a": ints64(4)}, nil)},
		{"cumsum reverse", "attribute reverse is 2, expected 0 or 1", oneOp("CumSum", []string{"a"}, map[string]*TensorProto{"a": ints64(1)}, nil, intAttr("reverse", 2))},
		{"instance norm scale", `input 1 "s" has shape [4], expected [8]`, oneOp("InstanceNormalization", []string{"s", "b"}, nil,
			[]*ValueInfoProto{vi("s", tensorType(f, 4)), vi("b", tensorType(f, 8))})},
		{"trilu upper", "attribute upper is 2, expected 0 or 1", oneOp("Trilu", nil, nil, nil, intAttr("upper", 2))},
		{"gather rank", "indices [2 8] and data [2 8 4 4], expected the same rank >= 1", oneOp("GatherElements", []string{"i"}, nil, []*ValueInfoProto{vi("i", tensorType(TensorProto_INT64, "N", 8))})},
		{"gather float indices", "have type FLOAT, expected int32 or int64", oneOp("GatherElements", []string{"i"}, nil, []*ValueInfoProto{vi("i", tensorType(f, "N", 8, 4, 4))})},
		{"scatter updates", "updates [2 8 4 1], expected the indices' shape [2 8 4 2]", oneOp("ScatterElements", []string{"i", "u"}, nil,
			[]*ValueInfoProto{vi("i", tensorType(TensorProto_INT64, "N", 8, 4, 2)), vi("u", tensorType(f, "N", 8, 4, 1))})},
		{"scatter reduction", `reduction "mul"`, oneOp("ScatterElements", []string{"i", "u"}, nil,
			[]*ValueInfoProto{vi("i", tensorType(TensorProto_INT64, "N", 8, 4, 2)), vi("u", tensorType(f, "N", 8, 4, 2))}, strAttr("reduction", "mul"))},
		{"scatternd depth", "indices [2 8 5]: last dimension 5, expected 1..4 (the data's rank)", oneOp("ScatterND", []string{"i", "u"}, nil,
			[]*ValueInfoProto{vi("i", tensorType(TensorProto_INT64, "N", 8, 5)), vi("u", tensorType(f, "N", 8))})},
		{"scatternd updates", "updates [2 8 3], expected [2 8 4 4] (the indices' shape but the last, then the data's from dimension 2)", oneOp("ScatterND", []string{"i", "u"}, nil,
			[]*ValueInfoProto{vi("i", tensorType(TensorProto_INT64, "N", 8, 2)), vi("u", tensorType(f, "N", 8, 3))})},
		{"scatternd reduction", `reduction "mul"`, oneOp("ScatterND", []string{"i", "u"}, nil,
			[]*ValueInfoProto{vi("i", tensorType(TensorProto_INT64, "N", 8, 2)), vi("u", tensorType(f, "N", 8, 4, 4))}, strAttr("reduction", "mul"))},
		{"scatternd float indices", "have type FLOAT, expected int64", oneOp("ScatterND", []string{"i", "u"}, nil,
			[]*ValueInfoProto{vi("i", tensorType(f, "N", 8, 2)), vi("u", tensorType(f, "N", 8, 4, 4))})},
		{"topk k", "K is 9, expected 0..8 (the size of axis 1)", oneOp("TopK", []string{"k"}, map[string]*TensorProto{"k": ints64(9)}, nil, intAttr("axis", 1))},
		{"topk dynamic k", "K \"k\" is not a constant", oneOp("TopK", []string{"k"}, nil, []*ValueInfoProto{vi("k", tensorType(TensorProto_INT64, 1))}, intAttr("axis", 1))},
		{"trilu k dynamic", "k \"k\" is not a constant scalar", oneOp("Trilu", []string{"k"}, nil, []*ValueInfoProto{vi("k", tensorType(TensorProto_INT64))})},
		{"prelu slope", "slope [2 1 1 1 1] does not broadcast to X [2 8 4 4] (unidirectionally)", oneOp("PRelu", []string{"p"}, nil, []*ValueInfoProto{vi("p", tensorType(f, 2, 1, 1, 1, 1))})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Import(bytes.NewReader(tc.data), Options{Batch: 2})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestChannelsLastCopies: a model trained channels-last (Options.ChannelsLast
// and sim's CPU.ChannelsLast, both from conv.memory_format) copies what
// PyTorch copies. A mean over the image hands the last convolution a
// contiguous gradient, which its backward copies to channels-last (the
// exporter's trace of tools/export_onnx.py's unet_gn shows the copy); a
// global average pool's gradient stays channels-last. nn.InstanceNorm2d
// copies its input to the contiguous layout (clone, then a batch norm on
// the view).
func TestChannelsLastCopies(t *testing.T) {
	f := TensorProto_FLOAT
	build := func(pool string, norm bool) []byte {
		nodes := []*NodeProto{node("Conv", "/conv/Conv", []string{"x", "conv.weight"}, []string{"c"}, intsAttr("kernel_shape", 1, 1))}
		z := "c"
		if norm {
			nodes = append(nodes, node("InstanceNormalization", "/in", []string{"c", "in.weight", "in.bias"}, []string{"n"}))
			z = "n"
		}
		if pool == "mean" {
			nodes = append(nodes, node("ReduceMean", "/pool", []string{z}, []string{"p"}, intsAttr("axes", 2, 3), intAttr("keepdims", 1)))
		} else {
			nodes = append(nodes, node("GlobalAveragePool", "/pool", []string{z}, []string{"p"}))
		}
		nodes = append(nodes, node("Flatten", "/flat", []string{"p"}, []string{"flat"}),
			node("Gemm", "/head/Gemm", []string{"flat", "head.weight", "head.bias"}, []string{"y"}, intAttr("transB", 1)))
		return model(14, nodes, []*ValueInfoProto{vi("x", tensorType(f, "N", 8, 16, 16)), vi("conv.weight", tensorType(f, 8, 8, 1, 1)),
			vi("in.weight", tensorType(f, 8)), vi("in.bias", tensorType(f, 8)),
			vi("head.weight", tensorType(f, 4, 8)), vi("head.bias", tensorType(f, 4))}, "y")
	}
	const act = 2 * 8 * 16 * 16 * 4 // the convolution's output
	convBackwardWs := func(g *graph.Graph, cl bool) int64 {
		for i := range g.Ops {
			if g.Ops[i].Type == "conv2d_backward" {
				return sim.CPUWorkspace(g, &g.Ops[i], sim.CPU{ChannelsLast: cl})
			}
		}
		t.Fatal("no conv2d_backward")
		return 0
	}
	ws := map[string]map[bool]int64{}
	for _, pool := range []string{"mean", "gap"} {
		g, err := Import(bytes.NewReader(build(pool, false)), Options{Batch: 2, ChannelsLast: true})
		require.NoError(t, err)
		ws[pool] = map[bool]int64{false: convBackwardWs(g, false), true: convBackwardWs(g, true)}
	}
	assert.Equal(t, int64(act), ws["mean"][true]-ws["gap"][true], "channels-last: a mean's gradient is copied, a pool's is not")
	assert.Equal(t, ws["mean"][false], ws["gap"][false], "contiguous: neither is copied")
	for _, cl := range []bool{false, true} {
		g, err := Import(bytes.NewReader(build("gap", true)), Options{Batch: 2, ChannelsLast: cl})
		require.NoError(t, err)
		types := opTypes(g, graph.Forward)
		if cl {
			assert.Equal(t, []string{"conv2d", "contiguous", "group_norm", "adaptive_avgpool2d", "flatten", "linear", "cross_entropy"}, types)
		} else {
			assert.Equal(t, []string{"conv2d", "group_norm", "adaptive_avgpool2d", "flatten", "linear", "cross_entropy"}, types)
		}
	}
}

// TestConvStridedInput: a convolution of a transposed view (a Conv1d over
// a [N, T, C] sequence transposed to [N, C, T]) records input_format
// strided, so sim's CPU model counts the kernel's copy of it in the forward
// and the backward, as for a trace; a convolution of a dense input records
// nothing.
func TestConvStridedInput(t *testing.T) {
	f := TensorProto_FLOAT
	nodes := []*NodeProto{
		node("Mul", "/scale", []string{"x", "s.weight"}, []string{"xs"}),
		node("Transpose", "/t", []string{"xs"}, []string{"xt"}, intsAttr("perm", 0, 3, 1, 2)),
		node("Conv", "/c1", []string{"xt", "w1"}, []string{"h"}, intsAttr("pads", 1, 1, 1, 1)),
		node("Conv", "/c2", []string{"h", "w2"}, []string{"z"}, intsAttr("pads", 1, 1, 1, 1)),
	}
	data := headed(14, nodes, "z", vi("x", tensorType(f, "N", 4, 4, 8)), vi("s.weight", tensorType(f, 1, 1, 1, 8)),
		vi("w1", tensorType(f, 8, 8, 3, 3)), vi("w2", tensorType(f, 1, 8, 3, 3)))
	g, err := Import(bytes.NewReader(data), Options{Batch: 2})
	require.NoError(t, err)
	convs := opsOfType(g, graph.OpConv2d)
	require.Len(t, convs, 2)
	assert.Equal(t, graph.Strided, convs[0].Attrs[graph.AttrInputFormat])
	_, ok := convs[1].Attrs[graph.AttrInputFormat]
	assert.False(t, ok)
	cpu := sim.CPU{Threads: 2}
	with := sim.CPUWorkspace(g, convs[0], cpu)
	delete(convs[0].Attrs, graph.AttrInputFormat)
	assert.Equal(t, g.Tensors[convs[0].Inputs[0]].Bytes, with-sim.CPUWorkspace(g, convs[0], cpu), "the copy of the strided input")
}

// scatterNDModel assigns u [2, 3, 4, 4] to x*w at the (n, c) pairs listed
// by the constant indices [2, 3, 2] (n in 0..1, c in cs), as torch exports
// x[:, 2:5] = u (a box: basic indexing) or x[:, idx] = u.
func scatterNDModel(cs [3]int64) []byte {
	f := TensorProto_FLOAT
	e := int32(TensorProto_INT64)
	var v []int64
	for n := int64(0); n < 2; n++ {
		for _, c := range cs {
			v = append(v, n, c)
		}
	}
	nodes := []*NodeProto{
		node("Mul", "/scale", []string{"x", "s.weight"}, []string{"xs"}),
		constNode("/idx", &TensorProto{DataType: &e, Dims: []int64{2, 3, 2}, Int64Data: v}),
		node("Mul", "/upd", []string{"u", "u"}, []string{"us"}),
		node("ScatterND", "/ScatterND", []string{"xs", "/idx", "us"}, []string{"o"}),
	}
	return headed(17, nodes, "o", vi("x", tensorType(f, 2, 8, 4, 4)), vi("s.weight", tensorType(f, 1, 8, 1, 1)), vi("u", tensorType(f, 2, 3, 4, 4)))
}

// TestScatterNDIndexing: constant indices that list a box in row-major
// order are a basic slice's assignment, others a tensor index's; the
// simulator prices their backward differently (PyTorch's CopySlices clones
// the whole gradient and runs an out-of-place index_put for a tensor
// index: two temporaries of the data's size; for a slice one of the
// updates' size).
func TestScatterNDIndexing(t *testing.T) {
	for _, c := range []struct {
		cs       [3]int64
		indexing string
		ws       int64
	}{
		{[3]int64{2, 3, 4}, "basic", 2 * 3 * 4 * 4 * 4},
		{[3]int64{0, 7, 3}, "advanced", 2 * (2 * 8 * 4 * 4 * 4)},
		{[3]int64{2, 4, 3}, "advanced", 2 * (2 * 8 * 4 * 4 * 4)}, // a box, not in order
	} {
		g, err := Import(bytes.NewReader(scatterNDModel(c.cs)), Options{Batch: 2})
		require.NoError(t, err)
		ops := opsOfType(g, OpScatter)
		require.Len(t, ops, 1)
		assert.Equal(t, c.indexing, ops[0].Attrs["indexing"], c.cs)
		bw := backwardOf(g, ops[0])
		require.NotNil(t, bw)
		m, err := sim.NewMachine(g, sim.Options{})
		require.NoError(t, err)
		assert.Equal(t, c.ws, m.OpWorkspace(bw.ID), c.cs)
	}
}

// TestScatterElementsFolded: a ScatterElements of constants (torch's
// export of index_fill computes its expanded shape so) is computed at
// import: here the repeats of a Tile.
func TestScatterElementsFolded(t *testing.T) {
	f := TensorProto_FLOAT
	nodes := []*NodeProto{
		node("Mul", "/scale", []string{"x", "s.weight"}, []string{"xs"}),
		constNode("/ones", ints64(1, 1, 1, 1)),
		constNode("/at", ints64(3)),
		constNode("/two", ints64(2)),
		node("ScatterElements", "/ScatterElements", []string{"/ones", "/at", "/two"}, []string{"reps"}, intAttr("axis", 0)),
		node("Tile", "/Tile", []string{"xs", "reps"}, []string{"o"}),
	}
	g, err := Import(bytes.NewReader(headed(17, nodes, "o", vi("x", tensorType(f, "N", 8, 4, 4)), vi("s.weight", tensorType(f, 1, 8, 1, 1)))), Options{Batch: 2})
	require.NoError(t, err)
	tile := opsOfType(g, OpTile)
	require.Len(t, tile, 1)
	assert.Equal(t, graph.Shape{2, 8, 4, 8}, g.Tensors[tile[0].Outputs[0]].Shape)
	assert.Empty(t, opsOfType(g, OpScatter), "folded, not an op")

	bad := append(nodes[:4:4], node("ScatterElements", "/ScatterElements", []string{"/ones", "/at", "/two"}, []string{"reps"}, intAttr("axis", 0)), nodes[5])
	bad[2] = constNode("/at", ints64(7))
	_, err = Import(bytes.NewReader(headed(17, bad, "o", vi("x", tensorType(f, "N", 8, 4, 4)), vi("s.weight", tensorType(f, 1, 8, 1, 1)))), Options{Batch: 2})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "index 7 at position 0: out of range for axis 0 of size 4")
}

// TestScatterDataMadeInStep: zeros the model makes in its forward
// (torch.zeros_like(x).scatter(...): ConstantOfShape of x's shape, folded
// by the import) are made where the scatter runs, as PyTorch allocates
// them, not resident from the start.
func TestScatterDataMadeInStep(t *testing.T) {
	f := TensorProto_FLOAT
	nodes := []*NodeProto{
		node("Mul", "/scale", []string{"x", "s.weight"}, []string{"xs"}),
		node("Shape", "/Shape", []string{"xs"}, []string{"shp"}),
		node("ConstantOfShape", "/zeros", []string{"shp"}, []string{"z"}),
		node("ScatterElements", "/ScatterElements", []string{"z", "i", "xs2"}, []string{"o"}, intAttr("axis", 3)),
		node("Slice", "/xs2", []string{"xs", "/s0", "/s1", "/ax"}, []string{"xs2"}),
	}
	nodes = append(nodes[:3], constNode("/s0", ints64(0)), constNode("/s1", ints64(2)), constNode("/ax", ints64(3)), nodes[4], nodes[3])
	g, err := Import(bytes.NewReader(headed(17, nodes, "o", vi("x", tensorType(f, "N", 8, 4, 4)), vi("s.weight", tensorType(f, 1, 8, 1, 1)),
		vi("i", tensorType(TensorProto_INT64, "N", 8, 4, 2)))), Options{Batch: 2})
	require.NoError(t, err)
	sc := opsOfType(g, OpScatter)
	require.Len(t, sc, 1)
	z := &g.Tensors[sc[0].Inputs[0]]
	assert.Equal(t, graph.Activation, z.Kind)
	require.NotEqual(t, graph.NoOp, z.Producer)
	assert.Equal(t, OpConstant, g.Ops[z.Producer].Type)
	assert.Equal(t, graph.Forward, g.Ops[z.Producer].Phase)
	for i := range g.Tensors {
		assert.NotEqual(t, graph.Constant, g.Tensors[i].Kind, "no resident constant: %s", g.Tensors[i].Name)
	}
}
