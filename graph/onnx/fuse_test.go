package onnx

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/internal/testinputs"
	"github.com/remat-dev/remat/sim"
)

func floatConst(name string, v float32) *NodeProto {
	e := int32(TensorProto_FLOAT)
	tt := AttributeProto_TENSOR
	an := "value"
	return node("Constant", name, nil, []string{name}, &AttributeProto{Name: &an, Type: &tt,
		T: &TensorProto{DataType: &e, FloatData: []float32{v}}})
}

func intAttr(name string, v int64) *AttributeProto {
	t := AttributeProto_INT
	return &AttributeProto{Name: &name, Type: &t, I: &v}
}

// encoderBlock is what torch.onnx exports (opset 14) for
// head(gelu(fc(layer_norm(x))).mean(1)): layer_norm decomposed into
// ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, gelu into
// Div/Erf/Add/Mul/Mul, the mean over tokens a ReduceMean feeding a Gemm.
// exponent, half: the Pow exponent and GELU's final factor (2 and 0.5 in
// torch's export).
func encoderBlock(exponent, half float32) []byte {
	f := TensorProto_FLOAT
	return model(14, []*NodeProto{
		node("ReduceMean", "/n/ReduceMean", []string{"x"}, []string{"mean"}, intsAttr("axes", -1)),
		node("Sub", "/n/Sub", []string{"x", "mean"}, []string{"diff"}),
		floatConst("/n/Constant", exponent),
		node("Pow", "/n/Pow", []string{"diff", "/n/Constant"}, []string{"sq"}),
		node("ReduceMean", "/n/ReduceMean_1", []string{"sq"}, []string{"var"}, intsAttr("axes", -1)),
		floatConst("/n/Constant_1", 1e-5),
		node("Add", "/n/Add", []string{"var", "/n/Constant_1"}, []string{"vareps"}),
		node("Sqrt", "/n/Sqrt", []string{"vareps"}, []string{"std"}),
		node("Div", "/n/Div", []string{"diff", "std"}, []string{"normed"}),
		node("Mul", "/n/Mul", []string{"normed", "n.weight"}, []string{"scaled"}),
		node("Add", "/n/Add_1", []string{"scaled", "n.bias"}, []string{"ln"}),
		node("Transpose", "/fc/Transpose", []string{"fc.weight"}, []string{"wt"}, intsAttr("perm", 1, 0)),
		node("MatMul", "/fc/MatMul", []string{"ln", "wt"}, []string{"mm"}),
		node("Add", "/fc/Add", []string{"fc.bias", "mm"}, []string{"h"}),
		floatConst("/Constant", float32(math.Sqrt2)),
		node("Div", "/Div", []string{"h", "/Constant"}, []string{"hs"}),
		node("Erf", "/Erf", []string{"hs"}, []string{"erf"}),
		floatConst("/Constant_1", 1),
		node("Add", "/Add", []string{"erf", "/Constant_1"}, []string{"erf1"}),
		node("Mul", "/Mul", []string{"h", "erf1"}, []string{"hx"}),
		floatConst("/Constant_2", half),
		node("Mul", "/Mul_1", []string{"hx", "/Constant_2"}, []string{"act"}),
		node("ReduceMean", "/ReduceMean", []string{"act"}, []string{"pooled"}, intsAttr("axes", 1), intAttr("keepdims", 0)),
		node("Gemm", "/head/Gemm", []string{"pooled", "head.weight", "head.bias"}, []string{"y"}, intAttr("transB", 1)),
	}, []*ValueInfoProto{
		vi("x", tensorType(f, "batch", 6, 8)),
		vi("n.weight", tensorType(f, 8)), vi("n.bias", tensorType(f, 8)),
		vi("fc.weight", tensorType(f, 16, 8)), vi("fc.bias", tensorType(f, 16)),
		vi("head.weight", tensorType(f, 4, 16)), vi("head.bias", tensorType(f, 4)),
	}, "y")
}

func opTypes(g *graph.Graph, phase graph.Phase) []string {
	var out []string
	for i := range g.Ops {
		if g.Ops[i].Phase == phase {
			out = append(out, g.Ops[i].Type)
		}
	}
	return out
}

// saves returns the names of the forward tensors the backward op of the
// forward op of type typ reads (its saved tensors, gradients left out).
func saves(t *testing.T, g *graph.Graph, typ string) []string {
	t.Helper()
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Phase != graph.Backward || op.Forward == graph.NoOp || g.Ops[op.Forward].Type != typ {
			continue
		}
		var names []string
		for _, in := range op.Inputs {
			tt := &g.Tensors[in]
			if tt.Kind != graph.Gradient && tt.Kind != graph.ParamGradient {
				names = append(names, tt.Name)
			}
		}
		return names
	}
	t.Fatalf("no backward op of a %s", typ)
	return nil
}

func TestFuseLayerNormAndGELU(t *testing.T) {
	g, err := Import(bytes.NewReader(encoderBlock(2, 0.5)), Options{Batch: 3})
	require.NoError(t, err)
	assert.Equal(t, []string{graph.OpLayerNorm, graph.OpLinear, graph.OpGELU, OpReduceMean, graph.OpLinear, graph.OpCrossEntropy},
		opTypes(g, graph.Forward))
	// native_layer_norm saves its input, mean, rstd, weight and bias; gelu
	// its input; the mean over tokens its input too (torch 1.13's
	// MeanBackward1 keeps self, although the gradient reads only its sizes).
	assert.Equal(t, []string{"x", "mean", "/n/LayerNormalization:rstd", "n.weight", "n.bias"}, saves(t, g, graph.OpLayerNorm))
	assert.Equal(t, []string{"h"}, saves(t, g, graph.OpGELU))
	assert.Len(t, saves(t, g, OpReduceMean), 1)
	for i := range g.Ops {
		op := &g.Ops[i]
		switch op.Type {
		case graph.OpLayerNorm:
			assert.Equal(t, "/n/LayerNormalization", op.Name)
			assert.Equal(t, "1e-05", op.Attrs["eps"])
			assert.Equal(t, "2", op.Attrs["axis"])
			assert.Equal(t, graph.Shape{3, 6, 1}, g.Tensors[op.Outputs[1]].Shape)
		case graph.OpGELU:
			assert.Equal(t, "/Gelu", op.Name)
			assert.Equal(t, "act", g.Tensors[op.Outputs[0]].Name)
		}
	}
}

// A decomposition whose constants differ from torch's export is not the
// aten op: its nodes are converted one by one.
func TestFusionNeedsTorchConstants(t *testing.T) {
	g, err := ImportForward(bytes.NewReader(encoderBlock(3, 0.6)), Options{Batch: 3})
	require.NoError(t, err)
	assert.Equal(t, []string{OpReduceMean, OpSub, OpPow, OpReduceMean, graph.OpAdd, OpSqrt, OpDiv, graph.OpMul, graph.OpAdd,
		graph.OpLinear, graph.OpScale, OpErf, graph.OpAdd, graph.OpMul, graph.OpScale, OpReduceMean, graph.OpLinear},
		opTypes(g, graph.Forward))
}

// An intermediate read outside the pattern (here a graph output) keeps the
// nodes apart: the fused op would not produce it.
func TestFusionKeepsSharedIntermediates(t *testing.T) {
	var m ModelProto
	require.NoError(t, proto.Unmarshal(encoderBlock(2, 0.5), &m))
	m.Graph.Output = append(m.Graph.Output, vi("std", nil), vi("erf", nil))
	g, err := FromModelForward(&m, Options{Batch: 3})
	require.NoError(t, err)
	types := opTypes(g, graph.Forward)
	assert.NotContains(t, types, graph.OpLayerNorm)
	assert.NotContains(t, types, graph.OpGELU)
	assert.Contains(t, types, OpErf)
}

// TestFuseLayerNormWithoutAffine: nn.LayerNorm(elementwise_affine=False)
// exports the normalization alone (no Mul by a weight, no Add of a bias);
// it is native_layer_norm(x, None, None), which saves x, mean and rstd
// (python/tests OnnxRouteTest checks the peak against PyTorch). Node by
// node the Sub, Sqrt and Div would save their operands too. A weight
// without a bias, or a bias without a weight, fuses likewise.
func TestFuseLayerNormWithoutAffine(t *testing.T) {
	var m ModelProto
	require.NoError(t, proto.Unmarshal(encoderBlock(2, 0.5), &m))
	var nodes []*NodeProto
	for _, n := range m.Graph.Node {
		switch n.GetName() {
		case "/n/Mul", "/n/Add_1":
			continue
		case "/fc/MatMul":
			n.Input[0] = "normed"
		}
		nodes = append(nodes, n)
	}
	m.Graph.Node = nodes
	var ins []*ValueInfoProto
	for _, v := range m.Graph.Input {
		if v.GetName() != "n.weight" && v.GetName() != "n.bias" {
			ins = append(ins, v)
		}
	}
	m.Graph.Input = ins
	g, err := FromModelForward(&m, Options{Batch: 3})
	require.NoError(t, err)
	assert.Equal(t, []string{graph.OpLayerNorm, graph.OpLinear, graph.OpGELU, OpReduceMean, graph.OpLinear},
		opTypes(g, graph.Forward))
	ln := &g.Ops[0]
	require.Len(t, ln.Inputs, 1, "x only")
	assert.Equal(t, "x", g.Tensors[ln.Inputs[0]].Name)
	assert.Equal(t, "/n/LayerNormalization", ln.Name)
	assert.Len(t, ln.Outputs, 3)

	// A Mul by a weight without the Add of a bias is torch's export of
	// F.layer_norm(x, shape, weight, None) (nanoGPT's LayerNorm with
	// bias=False): native_layer_norm(x, weight, None), which saves x, mean,
	// rstd and the weight; an Add of a constant after it is another op.
	require.NoError(t, proto.Unmarshal(encoderBlock(2, 0.5), &m))
	for _, n := range m.Graph.Node {
		if n.GetName() == "/n/Add_1" {
			n.Input[1] = "/n/Constant_1" // a constant, not a parameter
		}
	}
	g, err = FromModelForward(&m, Options{Batch: 3})
	require.NoError(t, err)
	assert.Equal(t, []string{graph.OpLayerNorm, graph.OpAdd, graph.OpLinear, graph.OpGELU, OpReduceMean, graph.OpLinear},
		opTypes(g, graph.Forward))
	assert.Equal(t, []string{"x", "n.weight"}, names(g, g.Ops[0].Inputs))

	// The Add of a bias without the Mul (weight None) fuses as well.
	require.NoError(t, proto.Unmarshal(encoderBlock(2, 0.5), &m))
	nodes = nodes[:0]
	for _, n := range m.Graph.Node {
		switch n.GetName() {
		case "/n/Mul":
			continue
		case "/n/Add_1":
			n.Input[0] = "normed"
		}
		nodes = append(nodes, n)
	}
	m.Graph.Node = nodes
	g, err = FromModelForward(&m, Options{Batch: 3})
	require.NoError(t, err)
	assert.Equal(t, []string{graph.OpLayerNorm, graph.OpLinear, graph.OpGELU, OpReduceMean, graph.OpLinear}, opTypes(g, graph.Forward))
	assert.Equal(t, []string{"x", "n.bias"}, names(g, g.Ops[0].Inputs))

	// A Mul by a constant is not the layer norm's weight: the pattern
	// ends at the Div, and the Mul and the Add are ops of their own.
	require.NoError(t, proto.Unmarshal(encoderBlock(2, 0.5), &m))
	for _, n := range m.Graph.Node {
		if n.GetName() == "/n/Mul" {
			n.Input[1] = "/n/Constant_1"
		}
	}
	g, err = FromModelForward(&m, Options{Batch: 3})
	require.NoError(t, err)
	assert.Equal(t, []string{graph.OpLayerNorm, graph.OpScale, graph.OpAdd, graph.OpLinear, graph.OpGELU, OpReduceMean, graph.OpLinear},
		opTypes(g, graph.Forward))
	assert.Equal(t, []string{"x"}, names(g, g.Ops[0].Inputs))
}

// names returns the names of tensors ids of g.
func names(g *graph.Graph, ids []graph.TensorID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = g.Tensors[id].Name
	}
	return out
}

// TestTorchExportsMatchTrace exports a ViT-style model, a GPT-style encoder
// with dropout and a 2-layer LSTM with torch.onnx (the exporter's default
// opset, 14: GELU and LayerNorm decomposed, LSTM weights reordered by
// Slice/Concat) and traces the same training step with
// tools/export_torch.py (testdata/torch_models.py), then checks that the
// import saves the tensors PyTorch's autograd saves, by type and size, and
// that the simulated peaks agree. Skipped without PyTorch.
func TestTorchExportsMatchTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs PyTorch")
	}
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch").Run(); err != nil {
		t.Skip("PyTorch is not installed for /usr/bin/python3")
	}
	testinputs.Track(t)
	dir := t.TempDir()
	cmd := exec.Command(py, filepath.Join("testdata", "torch_models.py"), dir, "2")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, name := range []string{"vit", "gpt", "lstm"} {
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(filepath.Join(dir, name+".onnx"))
			require.NoError(t, err)
			defer f.Close()
			g, err := Import(f, Options{Batch: 2, Optimizer: graph.OptSGD, InPlaceUpdate: true, DropoutMask: DropoutMaskLikeInput})
			require.NoError(t, err)
			trace, err := graph.ReadFile(filepath.Join(dir, name+".json"))
			require.NoError(t, err)
			got, want := savedBytes(g), savedBytes(trace)
			if name == "lstm" {
				// PyTorch allocates the zero initial states (2 layers x
				// [batch, hidden]) in the step; the export makes them
				// constants, which are not saved activations.
				want = without(want, savedTensor{graph.F32, 2 * 2 * 48 * 4}, 2)
			}
			assert.Equal(t, want, got, "saved tensors")
			gr, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
			require.NoError(t, err)
			tr, err := sim.Simulate(trace, sim.DefaultPlan(trace), sim.Options{})
			require.NoError(t, err)
			assert.InEpsilon(t, tr.PeakAllocated, gr.PeakAllocated, 0.005, "peak: import %d, trace %d", gr.PeakAllocated, tr.PeakAllocated)
		})
	}
}

// without removes n copies of s from xs.
func without(xs []savedTensor, s savedTensor, n int) []savedTensor {
	var out []savedTensor
	for _, x := range xs {
		if x == s && n > 0 {
			n--
			continue
		}
		out = append(out, x)
	}
	return out
}

// geluTanh is torch.onnx's export of fc2(gelu(fc1(x), approximate="tanh"))
// at opset 14; kappa is its cube coefficient (0.044715).
func geluTanh(kappa float32) []byte {
	f := TensorProto_FLOAT
	return model(14, []*NodeProto{
		node("Gemm", "/fc1/Gemm", []string{"x", "fc1.weight", "fc1.bias"}, []string{"h"}, intAttr("transB", 1)),
		node("Mul", "/Mul", []string{"h", "h"}, []string{"sq"}),
		node("Mul", "/Mul_1", []string{"h", "sq"}, []string{"cube"}),
		floatConst("/Constant", kappa),
		node("Mul", "/Mul_2", []string{"/Constant", "cube"}, []string{"kc"}),
		node("Add", "/Add", []string{"h", "kc"}, []string{"inner"}),
		floatConst("/Constant_1", float32(math.Sqrt(2/math.Pi))),
		node("Mul", "/Mul_3", []string{"/Constant_1", "inner"}, []string{"scaled"}),
		node("Tanh", "/Tanh", []string{"scaled"}, []string{"t"}),
		floatConst("/Constant_2", 1),
		node("Add", "/Add_1", []string{"/Constant_2", "t"}, []string{"t1"}),
		node("Mul", "/Mul_4", []string{"h", "t1"}, []string{"ht"}),
		floatConst("/Constant_3", 0.5),
		node("Mul", "/Mul_5", []string{"/Constant_3", "ht"}, []string{"act"}),
		node("Gemm", "/fc2/Gemm", []string{"act", "fc2.weight", "fc2.bias"}, []string{"y"}, intAttr("transB", 1)),
	}, []*ValueInfoProto{
		vi("x", tensorType(f, "batch", 8)),
		vi("fc1.weight", tensorType(f, 16, 8)), vi("fc1.bias", tensorType(f, 16)),
		vi("fc2.weight", tensorType(f, 4, 16)), vi("fc2.bias", tensorType(f, 4)),
	}, "y")
}

func TestFuseGELUTanh(t *testing.T) {
	g, err := Import(bytes.NewReader(geluTanh(0.044715)), Options{Batch: 3})
	require.NoError(t, err)
	assert.Equal(t, []string{graph.OpLinear, graph.OpGELU, graph.OpLinear, graph.OpCrossEntropy}, opTypes(g, graph.Forward))
	assert.Equal(t, []string{"h"}, saves(t, g, graph.OpGELU))
	assert.Equal(t, "tanh", g.Ops[1].Attrs["approximate"])
	g, err = ImportForward(bytes.NewReader(geluTanh(0.05)), Options{Batch: 3})
	require.NoError(t, err)
	assert.NotContains(t, opTypes(g, graph.Forward), graph.OpGELU)
	assert.Contains(t, opTypes(g, graph.Forward), graph.OpTanh)
}

// TestFuseMishAndScatterAdd: nn.Mish's export, Softplus -> Tanh -> Mul(x,
// .), is mish(x), which saves x alone; torch's scatter_add export for opset
// < 16, ScatterElements(zeros, index, src) -> Add(self, .), is scatter_add
// (self, index, src), which saves the index and passes the output gradient
// to self. Scattered data that are not zeros stay two ops.
func TestFuseMishAndScatterAdd(t *testing.T) {
	f := TensorProto_FLOAT
	build := func(fill float32) *graph.Graph { // the scattered data: zeros but element 5
		e := int32(f)
		z := &TensorProto{DataType: &e, Dims: []int64{2, 8, 4, 4}, FloatData: make([]float32, 2*8*4*4)}
		z.FloatData[5] = fill
		nodes := []*NodeProto{
			node("Mul", "/scale", []string{"x", "s.weight"}, []string{"xs"}),
			node("Softplus", "/act/Softplus", []string{"xs"}, []string{"sp"}),
			node("Tanh", "/act/Tanh", []string{"sp"}, []string{"th"}),
			node("Mul", "/act/Mul", []string{"xs", "th"}, []string{"m"}),
			constNode("/zeros", z),
			node("ScatterElements", "/ScatterElements", []string{"/zeros", "i", "u"}, []string{"sc"}, intAttr("axis", 3)),
			node("Add", "/Add", []string{"m", "sc"}, []string{"o"}),
		}
		data := headed(14, nodes, "o", vi("x", tensorType(f, 2, 8, 4, 4)), vi("s.weight", tensorType(f, 1, 8, 1, 1)),
			vi("i", tensorType(TensorProto_INT64, 2, 8, 4, 2)), vi("u", tensorType(f, 2, 8, 4, 2)))
		g, err := Import(bytes.NewReader(data), Options{Batch: 2})
		require.NoError(t, err)
		return g
	}
	g := build(0)
	assert.Equal(t, []string{graph.OpMul, OpMish, OpScatterAdd, OpReduceMean, graph.OpFlatten, graph.OpLinear, graph.OpCrossEntropy}, opTypes(g, graph.Forward))
	assert.Equal(t, []string{"xs"}, saves(t, g, OpMish))
	assert.Equal(t, []string{"i"}, saves(t, g, OpScatterAdd))
	sa := opsOfType(g, OpScatterAdd)[0]
	assert.Equal(t, "m", g.Tensors[sa.Inputs[0]].Name, "scatter_add reads self, not the zeros")
	bw := backwardOf(g, sa)
	require.NotNil(t, bw)
	assert.Equal(t, bw.Inputs[len(bw.Inputs)-1], g.Tensors[bw.Outputs[0]].AliasOf, "self's gradient is the output gradient")

	// A scatter into data that are not all zeros is a scatter, then an add.
	types := opTypes(build(1), graph.Forward)
	assert.Contains(t, types, OpScatter)
	assert.NotContains(t, types, OpScatterAdd)
}

// TestFuseVarStd: torch's var/std export (ReduceMean, Sub, Mul(d, d),
// ReduceMean, the correction's Mul and Div, Sqrt) is var or std: var saves
// the input, std the input and its result. A correction factor that is not
// N / (N - c) stays node by node.
func TestFuseVarStd(t *testing.T) {
	f := TensorProto_FLOAT
	build := func(sqrt bool, n float32) *graph.Graph {
		nodes := []*NodeProto{
			node("Mul", "/scale", []string{"x", "s.weight"}, []string{"xs"}),
			node("ReduceMean", "/ReduceMean", []string{"xs"}, []string{"mean"}, intsAttr("axes", 2, 3)),
			node("Sub", "/Sub", []string{"xs", "mean"}, []string{"d"}),
			node("Mul", "/Mul", []string{"d", "d"}, []string{"sq"}),
			node("ReduceMean", "/ReduceMean_1", []string{"sq"}, []string{"v"}, intsAttr("axes", 2, 3)),
			floatConst("/N", n),
			node("Mul", "/Mul_1", []string{"v", "/N"}, []string{"vn"}),
			floatConst("/N1", 15),
			node("Div", "/Div", []string{"vn", "/N1"}, []string{"var"}),
		}
		out := "var"
		if sqrt {
			nodes = append(nodes, node("Sqrt", "/Sqrt", []string{"var"}, []string{"std"}))
			out = "std"
		}
		nodes = append(nodes, node("Mul", "/out", []string{"xs", out}, []string{"o"}))
		data := headed(14, nodes, "o", vi("x", tensorType(f, "N", 8, 4, 4)), vi("s.weight", tensorType(f, 1, 8, 1, 1)))
		g, err := Import(bytes.NewReader(data), Options{Batch: 2})
		require.NoError(t, err)
		return g
	}
	g := build(false, 16)
	assert.Equal(t, []string{graph.OpMul, OpVar, graph.OpMul, OpReduceMean, graph.OpFlatten, graph.OpLinear, graph.OpCrossEntropy}, opTypes(g, graph.Forward))
	v := opsOfType(g, OpVar)[0]
	assert.Equal(t, graph.Shape{2, 8, 1, 1}, g.Tensors[v.Outputs[0]].Shape)
	assert.Equal(t, "2,3", v.Attrs["dims"])
	assert.Equal(t, "1", v.Attrs["correction"])
	assert.Equal(t, []string{"xs"}, saves(t, g, OpVar))
	g = build(true, 16)
	assert.Equal(t, []string{"xs", "std"}, saves(t, g, OpStd))
	// 16 / 14 is not torch's correction for 16 elements
	assert.NotContains(t, opTypes(build(true, 14), graph.Forward), OpStd)
}

// bceModel is torch's export (opset 14) of
// F.binary_cross_entropy_with_logits(x * w, t, reduction) inside a network,
// the loss (a scalar for mean and sum) times x feeding the head; one and
// another are the two Sub constants (1 in torch's export), shared makes a
// third node read the sigmoid.
func bceModel(reduce string, one, another float32, shared bool) []byte {
	f := TensorProto_FLOAT
	nodes := []*NodeProto{
		node("Mul", "/scale", []string{"x", "s.weight"}, []string{"xs"}),
		node("Sigmoid", "/Sigmoid", []string{"xs"}, []string{"s"}),
		node("Log", "/Log", []string{"s"}, []string{"ls"}),
		floatConst("/Constant", one),
		node("Sub", "/Sub", []string{"/Constant", "s"}, []string{"q"}),
		floatConst("/Constant_1", another),
		node("Sub", "/Sub_1", []string{"/Constant_1", "t"}, []string{"u"}),
		node("Log", "/Log_1", []string{"q"}, []string{"lq"}),
		node("Mul", "/Mul", []string{"t", "ls"}, []string{"a"}),
		node("Mul", "/Mul_1", []string{"u", "lq"}, []string{"b"}),
		node("Add", "/Add", []string{"a", "b"}, []string{"c"}),
		node("Neg", "/Neg", []string{"c"}, []string{"l"}),
	}
	loss := "l"
	if reduce != "" {
		nodes = append(nodes, node(reduce, "/"+reduce, []string{"l"}, []string{"lr"}, intAttr("keepdims", 0)))
		loss = "lr"
	}
	nodes = append(nodes, node("Mul", "/Mul_2", []string{loss, "xs"}, []string{"o"}))
	if shared {
		nodes = append(nodes, node("Add", "/Add_1", []string{"o", "s"}, []string{"o2"}))
	} else {
		nodes = append(nodes, node("Identity", "/Identity", []string{"o"}, []string{"o2"}))
	}
	return headed(14, nodes, "o2", vi("x", tensorType(f, 2, 8, 4, 4)), vi("s.weight", tensorType(f, 1, 8, 1, 1)),
		vi("t", tensorType(f, 2, 8, 4, 4)))
}

// TestFuseBCEWithLogits: torch's export of binary_cross_entropy_with_logits
// is the one op, which saves its input and target (node by node the
// sigmoid, both logarithms and both products were saved, 25% over
// PyTorch's peak in docs/fidelity-layers.md); with reduction mean or sum
// it takes the Reduce too. Constants other than 1, or a sigmoid read
// elsewhere, leave the nodes as they are.
func TestFuseBCEWithLogits(t *testing.T) {
	for _, c := range []struct{ reduce, reduction string }{{"", "none"}, {"ReduceMean", "mean"}, {"ReduceSum", "sum"}} {
		g, err := Import(bytes.NewReader(bceModel(c.reduce, 1, 1, false)), Options{Batch: 2})
		require.NoError(t, err, c.reduction)
		ops := opsOfType(g, OpBCEWithLogits)
		require.Len(t, ops, 1, c.reduction)
		assert.Equal(t, []string{"xs", "t"}, tensorNames(g, ops[0].Inputs), c.reduction)
		assert.Equal(t, c.reduction, ops[0].Attrs["reduction"])
		assert.Equal(t, []string{"xs", "t"}, saves(t, g, OpBCEWithLogits), c.reduction)
		types := opTypes(g, graph.Forward)
		assert.NotContains(t, types, OpLog, c.reduction)
		assert.NotContains(t, types, graph.OpSigmoid, c.reduction)
		out := &g.Tensors[ops[0].Outputs[0]]
		if c.reduction == "none" {
			assert.Equal(t, graph.Shape{2, 8, 4, 4}, out.Shape)
			assert.NotContains(t, types, OpReduceSum)
		} else {
			assert.Empty(t, out.Shape, "a scalar loss")
		}
		_, err = sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
		require.NoError(t, err)
	}
	for name, data := range map[string][]byte{
		"constant 2":      bceModel("", 2, 1, false),
		"target constant": bceModel("", 1, 0.5, false),
		"shared sigmoid":  bceModel("", 1, 1, true),
	} {
		g, err := Import(bytes.NewReader(data), Options{Batch: 2})
		require.NoError(t, err, name)
		assert.Empty(t, opsOfType(g, OpBCEWithLogits), name)
		assert.Contains(t, opTypes(g, graph.Forward), OpLog, name)
	}
}

// cosineModel is torch's export (opset 14) of F.cosine_similarity(x * w,
// x * v, dim) times x inside a network; axes2 is the axis of the third sum (dim
// in torch's export); shared makes another node read the first norm.
func cosineModel(dim, axes2 int64, shared bool) []byte {
	f := TensorProto_FLOAT
	e := int32(TensorProto_INT64)
	axes := func(name string, a int64) *NodeProto {
		return constNode(name, &TensorProto{DataType: &e, Dims: []int64{1}, Int64Data: []int64{a}})
	}
	nodes := []*NodeProto{
		node("Mul", "/scale", []string{"x", "s.weight"}, []string{"a"}),
		node("Mul", "/scale_1", []string{"x", "v.weight"}, []string{"b"}),
		node("Mul", "/Mul", []string{"a", "b"}, []string{"p"}),
		axes("/Constant", dim),
		node("ReduceSum", "/ReduceSum", []string{"p", "/Constant"}, []string{"cross"}, intAttr("keepdims", 0)),
		node("Mul", "/Mul_1", []string{"a", "a"}, []string{"p1"}),
		axes("/Constant_1", dim),
		node("ReduceSum", "/ReduceSum_1", []string{"p1", "/Constant_1"}, []string{"n1"}, intAttr("keepdims", 0)),
		node("Mul", "/Mul_2", []string{"b", "b"}, []string{"p2"}),
		axes("/Constant_2", axes2),
		node("ReduceSum", "/ReduceSum_2", []string{"p2", "/Constant_2"}, []string{"n2"}, intAttr("keepdims", 0)),
		node("Mul", "/Mul_3", []string{"n1", "n2"}, []string{"m"}),
		node("Sqrt", "/Sqrt", []string{"m"}, []string{"r"}),
		floatConst("/Constant_3", 1e-8),
		node("Max", "/Max", []string{"r", "/Constant_3"}, []string{"den"}),
		node("Div", "/Div", []string{"cross", "den"}, []string{"cos"}),
		axes("/Constant_4", dim),
		node("Unsqueeze", "/Unsqueeze", []string{"cos", "/Constant_4"}, []string{"cu"}),
		node("Mul", "/Mul_4", []string{"cu", "x"}, []string{"o"}),
	}
	if shared {
		nodes = append(nodes, node("Unsqueeze", "/Unsqueeze_1", []string{"n1", "/Constant_4"}, []string{"nu"}),
			node("Mul", "/Mul_5", []string{"o", "nu"}, []string{"o2"}))
		return headed(14, nodes, "o2", vi("x", tensorType(f, 2, 8, 4, 4)), vi("s.weight", tensorType(f, 1, 8, 1, 1)), vi("v.weight", tensorType(f, 1, 8, 1, 1)))
	}
	return headed(14, nodes, "o", vi("x", tensorType(f, 2, 8, 4, 4)), vi("s.weight", tensorType(f, 1, 8, 1, 1)), vi("v.weight", tensorType(f, 1, 8, 1, 1)))
}

// TestFuseCosineSimilarity: torch's export of cosine_similarity becomes
// ATen's decomposition, whose product saves both operands divided by their
// norms (tensors of the operands' size that node by node never exist: the
// layer-fidelity row was 33% low). Sums over different axes, or a norm read
// elsewhere, stay node by node.
func TestFuseCosineSimilarity(t *testing.T) {
	g, err := Import(bytes.NewReader(cosineModel(3, 3, false)), Options{Batch: 2})
	require.NoError(t, err)
	types := opTypes(g, graph.Forward)
	assert.Equal(t, []string{graph.OpMul, graph.OpMul, OpPow, OpReduceSum, OpSqrt, OpPow, OpReduceSum, OpSqrt, OpDiv, OpDiv, graph.OpMul, OpReduceSum},
		types[:12], "the two scalings, then the decomposition")
	assert.NotContains(t, types, OpMaximum)
	muls := opsOfType(g, graph.OpMul)
	require.Len(t, muls, 4)
	prod := muls[2]
	for _, in := range prod.Inputs {
		assert.Equal(t, graph.Shape{2, 8, 4, 4}, g.Tensors[in].Shape, "a quotient of the operands' size")
		assert.Equal(t, OpDiv, g.Ops[g.Tensors[in].Producer].Type)
	}
	var read []graph.TensorID
	for i := range g.Ops {
		if g.Ops[i].Phase == graph.Backward && g.Ops[i].Forward == prod.ID {
			read = append(read, g.Ops[i].Inputs...)
		}
	}
	assert.Subset(t, read, prod.Inputs, "the product's backward reads both quotients")
	out := &g.Tensors[opsOfType(g, OpReduceSum)[2].Outputs[0]]
	assert.Equal(t, "cos", out.Name)
	assert.Equal(t, graph.Shape{2, 8, 4}, out.Shape)
	_, err = sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
	require.NoError(t, err)

	for name, data := range map[string][]byte{
		"other axis":  cosineModel(3, 2, false),
		"shared norm": cosineModel(3, 3, true),
	} {
		g, err := Import(bytes.NewReader(data), Options{Batch: 2})
		require.NoError(t, err, name)
		assert.Contains(t, opTypes(g, graph.Forward), OpMaximum, name)
		assert.NotContains(t, opTypes(g, graph.Forward), OpPow, name)
	}
}
