package onnx

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/remat-dev/remat/graph"
)

var update = flag.Bool("update", false, "rewrite golden files")

// modelDir holds the small models tools/export_onnx.py writes
// (export_params=False: weights are shaped graph inputs).
const modelDir = "../../testdata/onnx"

func readModelFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(modelDir, name+".onnx"))
	require.NoError(t, err)
	return b
}

// TestParamCountsMatchTorchvision compares the parameter count of each
// imported graph, computed from the import, with the number torchvision
// publishes for the model (the "Params" column of
// https://pytorch.org/vision/0.14/models.html and each weight's
// meta["num_params"], e.g. ResNet18_Weights.IMAGENET1K_V1).
func TestParamCountsMatchTorchvision(t *testing.T) {
	published := map[string]int64{
		"resnet18":     11_689_512,
		"resnet50":     25_557_032,
		"mobilenet_v2": 3_504_872,
		"densenet121":  7_978_856,
		"vgg16":        138_357_544,
	}
	for name, want := range published {
		t.Run(name, func(t *testing.T) {
			g, err := ImportForward(bytes.NewReader(readModelFile(t, name)), Options{Batch: 2})
			require.NoError(t, err)
			assert.Equal(t, want, g.ParamCount())
		})
	}
}

// The transformer of tools/export_onnx.py: embedding 1000x128, positions
// 64x128, two encoder layers (in_proj 3*128x128+384, out_proj 128x128+128,
// linear1 512x128+512, linear2 128x512+128, two layer norms 2*2*128), a final
// layer norm 2*128 and the head 10x128+10.
func TestTransformerParamCount(t *testing.T) {
	layer := int64(3*128*128 + 3*128 + 128*128 + 128 + 512*128 + 512 + 128*512 + 128 + 4*128)
	want := 1000*128 + 64*128 + 2*layer + 2*128 + 10*128 + 10
	g, err := ImportForward(bytes.NewReader(readModelFile(t, "transformer")), Options{Batch: 2})
	require.NoError(t, err)
	assert.Equal(t, want, g.ParamCount())
}

func TestImportTrainingGraphs(t *testing.T) {
	for _, name := range []string{"resnet18", "resnet50", "mobilenet_v2", "densenet121", "vgg16", "transformer"} {
		t.Run(name, func(t *testing.T) {
			g, err := Import(bytes.NewReader(readModelFile(t, name)), Options{Batch: 3, Optimizer: graph.OptSGD})
			require.NoError(t, err)
			require.NoError(t, g.Validate())
			assert.NotEqual(t, graph.NoTensor, g.Loss)
			assert.Positive(t, g.OpsInPhase(graph.Forward))
			assert.Positive(t, g.OpsInPhase(graph.Backward))
			assert.Positive(t, g.OpsInPhase(graph.Update))
			// The batch option reaches the data input and the labels.
			var in, label *graph.Tensor
			for i := range g.Tensors {
				switch g.Tensors[i].Name {
				case "input":
					in = &g.Tensors[i]
				case "label":
					label = &g.Tensors[i]
				}
			}
			require.NotNil(t, in)
			require.NotNil(t, label)
			assert.Equal(t, graph.Input, in.Kind)
			assert.Equal(t, int64(3), in.Shape[0])
			assert.Equal(t, graph.Shape{3}, label.Shape)
			// Shape arithmetic is folded away: no op reads or makes shapes.
			for i := range g.Ops {
				assert.NotContains(t, []string{"shape", "gather", "constant", "unsqueeze"}, g.Ops[i].Type)
			}
		})
	}
}

// TestTransformerMapping checks the op mapping of the transformer export:
// x @ W^T + b becomes linear (Gemm too), Shape/Gather/Concat chains fold
// into reshape views, and training dropouts stay non-deterministic.
func TestTransformerMapping(t *testing.T) {
	g, err := ImportForward(bytes.NewReader(readModelFile(t, "transformer")), Options{Batch: 4})
	require.NoError(t, err)
	count := map[string]int{}
	for i := range g.Ops {
		count[g.Ops[i].Type]++
		if g.Ops[i].Type == graph.OpDropout {
			assert.True(t, g.Ops[i].Flags.Has(graph.NonDeterministic))
		}
	}
	// Per layer: in_proj, out_proj (Gemm), linear1, linear2; plus the head.
	assert.Equal(t, 2*4+1, count[graph.OpLinear])
	assert.Equal(t, 2*2, count[graph.OpMatMul])  // q@k^T and attn@v per layer
	assert.Equal(t, 2*4, count[graph.OpDropout]) // attention, dropout1, dropout, dropout2
	assert.Equal(t, 2*2+1, count[graph.OpLayerNorm])
	assert.Equal(t, 1, count[graph.OpEmbedding])
	assert.Zero(t, count[graph.OpTranspose+"_weight"])
	checkGolden(t, "transformer_ops.txt", histogram(g))
}

func histogram(g *graph.Graph) string {
	count := map[string]int{}
	for i := range g.Ops {
		count[g.Ops[i].Type]++
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "%s %d\n", k, count[k])
	}
	return sb.String()
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./graph/onnx -update to create %s", path)
	assert.Equal(t, string(want), got)
}

func TestResNet18Shapes(t *testing.T) {
	g, err := ImportForward(bytes.NewReader(readModelFile(t, "resnet18")), Options{Batch: 2})
	require.NoError(t, err)
	byName := map[string]*graph.Tensor{}
	for i := range g.Tensors {
		byName[g.Tensors[i].Name] = &g.Tensors[i]
	}
	// Shapes PyTorch gives resnet18 on 224x224 inputs.
	assert.Equal(t, graph.Shape{2, 64, 112, 112}, byName["/conv1/Conv_output_0"].Shape)
	assert.Equal(t, graph.Shape{2, 64, 56, 56}, byName["/maxpool/MaxPool_output_0"].Shape)
	assert.Equal(t, graph.Shape{2, 512, 1, 1}, byName["/avgpool/GlobalAveragePool_output_0"].Shape)
	assert.Equal(t, graph.Shape{2, 512}, byName["/Flatten_output_0"].Shape)
	assert.Equal(t, graph.Shape{2, 1000}, byName["output"].Shape)
	assert.Equal(t, graph.Constant, byName["bn1.running_mean"].Kind)
	assert.Equal(t, graph.Parameter, byName["bn1.weight"].Kind)
}

func TestDeterministic(t *testing.T) {
	data := readModelFile(t, "mobilenet_v2")
	var out [2]bytes.Buffer
	for i := range out {
		g, err := Import(bytes.NewReader(data), Options{Batch: 2, Optimizer: graph.OptAdam})
		require.NoError(t, err)
		require.NoError(t, graph.Encode(&out[i], g))
	}
	assert.Equal(t, out[0].String(), out[1].String())
}

// ---- hand-built models ----

func tensorType(et TensorProto_DataType, dims ...any) *TypeProto {
	var ds []*TensorShapeProto_Dimension
	for _, d := range dims {
		switch v := d.(type) {
		case int:
			ds = append(ds, &TensorShapeProto_Dimension{Value: &TensorShapeProto_Dimension_DimValue{DimValue: int64(v)}})
		case string:
			ds = append(ds, &TensorShapeProto_Dimension{Value: &TensorShapeProto_Dimension_DimParam{DimParam: v}})
		}
	}
	e := int32(et)
	return &TypeProto{Value: &TypeProto_TensorType{TensorType: &TypeProto_Tensor{ElemType: &e, Shape: &TensorShapeProto{Dim: ds}}}}
}

func vi(name string, tp *TypeProto) *ValueInfoProto { return &ValueInfoProto{Name: &name, Type: tp} }

func node(op, name string, ins, outs []string, attrs ...*AttributeProto) *NodeProto {
	return &NodeProto{OpType: &op, Name: &name, Input: ins, Output: outs, Attribute: attrs}
}

func intsAttr(name string, v ...int64) *AttributeProto {
	t := AttributeProto_INTS
	return &AttributeProto{Name: &name, Type: &t, Ints: v}
}

func model(opset int64, nodes []*NodeProto, inputs []*ValueInfoProto, outputs ...string) []byte {
	var outs []*ValueInfoProto
	for _, o := range outputs {
		outs = append(outs, vi(o, nil))
	}
	name := "test"
	dom := ""
	m := &ModelProto{OpsetImport: []*OperatorSetIdProto{{Domain: &dom, Version: &opset}},
		Graph: &GraphProto{Name: &name, Node: nodes, Input: inputs, Output: outs}}
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// mlp is Gemm -> Relu -> Gemm with a symbolic batch.
func mlp() []byte {
	f := TensorProto_FLOAT
	one := int64(1)
	tb := AttributeProto_INT
	transB := "transB"
	tr := &AttributeProto{Name: &transB, Type: &tb, I: &one}
	return model(17, []*NodeProto{
		node("Gemm", "fc1", []string{"x", "w1", "b1"}, []string{"h"}, tr),
		node("Relu", "relu", []string{"h"}, []string{"a"}),
		node("Gemm", "fc2", []string{"a", "w2", "b2"}, []string{"y"}, tr),
	}, []*ValueInfoProto{
		vi("x", tensorType(f, "N", 8)), vi("w1", tensorType(f, 16, 8)), vi("b1", tensorType(f, 16)),
		vi("w2", tensorType(f, 4, 16)), vi("b2", tensorType(f, 4)),
	}, "y")
}

func TestHandBuiltMLP(t *testing.T) {
	g, err := Import(bytes.NewReader(mlp()), Options{Batch: 5})
	require.NoError(t, err)
	assert.Equal(t, int64(16*8+16+4*16+4), g.ParamCount())
	var y *graph.Tensor
	for i := range g.Tensors {
		if g.Tensors[i].Name == "y" {
			y = &g.Tensors[i]
		}
	}
	require.NotNil(t, y)
	assert.Equal(t, graph.Shape{5, 4}, y.Shape)
	assert.Equal(t, "linear", g.Ops[y.Producer].Type)
	assert.Equal(t, int64(2*5*16*4+5*4), g.Ops[y.Producer].FLOPs)
}

func TestUnsupportedOpsListedWithCounts(t *testing.T) {
	f := TensorProto_FLOAT
	custom := "com.example"
	n3 := node("Fancy", "c", []string{"b"}, []string{"c"})
	n3.Domain = &custom
	data := model(17, []*NodeProto{
		node("Zeta", "a", []string{"x"}, []string{"a"}),
		node("Alpha", "b", []string{"a"}, []string{"b"}),
		n3,
		node("Zeta", "d", []string{"c"}, []string{"d"}),
		node("Relu", "e", []string{"d"}, []string{"e"}),
	}, []*ValueInfoProto{vi("x", tensorType(f, "N", 3))}, "e")
	_, err := Import(bytes.NewReader(data), Options{})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnsupported)
	assert.Contains(t, err.Error(), "3 unsupported op types: Alpha (1), Zeta (2), com.example::Fancy (1)")
}

func TestErrorsNameTheProblem(t *testing.T) {
	f := TensorProto_FLOAT
	cases := map[string]struct {
		data []byte
		opts Options
		want string
	}{
		"garbage":   {[]byte{0xff, 0xff, 0xff}, Options{}, "parsing ModelProto"},
		"no graph":  {nil, Options{}, "model has no graph"},
		"bad batch": {mlp(), Options{Batch: -1}, "batch -1"},
		"undefined input": {model(17, []*NodeProto{node("Relu", "r", []string{"nope"}, []string{"y"})},
			[]*ValueInfoProto{vi("x", tensorType(f, "N", 3))}, "y"), Options{}, `input 0 "nope" is not defined`},
		"symbolic inner dim": {model(17, []*NodeProto{node("Relu", "r", []string{"x"}, []string{"y"})},
			[]*ValueInfoProto{vi("x", tensorType(f, "N", "S"))}, "y"), Options{}, `dimension 1 is symbolic ("S")`},
		"bad conv": {model(17, []*NodeProto{node("Conv", "c", []string{"x", "w"}, []string{"y"})},
			[]*ValueInfoProto{vi("x", tensorType(f, "N", 3, 8, 8)), vi("w", tensorType(f, 4, 5, 3, 3))}, "y"),
			Options{}, "does not fit 3 input channels"},
		"dynamic reshape": {model(17, []*NodeProto{node("Reshape", "r", []string{"x", "s"}, []string{"y"})},
			[]*ValueInfoProto{vi("x", tensorType(f, "N", 6)), vi("s", tensorType(TensorProto_INT64, 2))}, "y"),
			Options{DataInputs: []string{"x", "s"}}, "shape \"s\" is not a constant"},
		"unknown data input": {mlp(), Options{DataInputs: []string{"z"}}, `data input "z" is not a graph input`},
		"bad loss":           {mlp(), Options{Loss: "mse"}, `loss "mse"`},
		"bad output":         {mlp(), Options{Output: "h"}, `output "h": expected one of the graph outputs "y"`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Import(bytes.NewReader(c.data), c.opts)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// TestConstantFolding runs a Shape -> Gather -> Unsqueeze -> Concat ->
// Reshape chain (what transformer exports emit for x.view(N, -1)).
func TestConstantFolding(t *testing.T) {
	f := TensorProto_FLOAT
	i64 := TensorProto_INT64
	mk := func(name string, v ...int64) *NodeProto {
		dims := []int64{int64(len(v))}
		if name == "zero" {
			dims = nil // a scalar index
		}
		e := int32(i64)
		tt := AttributeProto_TENSOR
		an := "value"
		return node("Constant", name, nil, []string{name}, &AttributeProto{Name: &an, Type: &tt,
			T: &TensorProto{DataType: &e, Dims: dims, Int64Data: v}})
	}
	data := model(17, []*NodeProto{
		node("Shape", "s", []string{"x"}, []string{"s"}),
		mk("zero", 0),
		node("Gather", "g", []string{"s", "zero"}, []string{"n"}),
		mk("axes", 0),
		node("Unsqueeze", "u", []string{"n", "axes"}, []string{"nu"}),
		mk("minus1", -1),
		node("Concat", "c", []string{"nu", "minus1"}, []string{"shape"}, intsAttr("unused")),
		node("Reshape", "r", []string{"x", "shape"}, []string{"y"}),
		node("Relu", "relu", []string{"y"}, []string{"z"}),
	}, []*ValueInfoProto{vi("x", tensorType(f, "N", 3, 4))}, "z")
	// Concat needs its axis attribute: add it.
	var m ModelProto
	require.NoError(t, proto.Unmarshal(data, &m))
	ax := "axis"
	it := AttributeProto_INT
	zero := int64(0)
	m.Graph.Node[6].Attribute = []*AttributeProto{{Name: &ax, Type: &it, I: &zero}}
	g, err := FromModelForward(&m, Options{Batch: 7})
	require.NoError(t, err)
	types := []string{}
	for i := range g.Ops {
		types = append(types, g.Ops[i].Type)
	}
	assert.Equal(t, []string{graph.OpReshape, graph.OpReLU}, types)
	assert.Equal(t, graph.Shape{7, 12}, g.Tensors[g.Ops[1].Outputs[0]].Shape)
}

// TestBackendNodeModels imports every node test model of ONNX's backend
// test data (Debian's libonnx-testdata) to exercise op parsing: a model may
// fail only with ErrUnsupported or a graph-level error, never panic.
func TestBackendNodeModels(t *testing.T) {
	const dir = "/usr/share/libonnx-testdata/data/node"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Skipf("ONNX backend test data not installed (%v); apt-get install libonnx-testdata", err)
	}
	ok, unsupported, other := 0, 0, 0
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name(), "model.onnx"))
		if err != nil {
			continue
		}
		_, err = ImportForward(bytes.NewReader(data), Options{Batch: 1})
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrUnsupported):
			unsupported++
		default:
			other++
			t.Logf("%s: %v", e.Name(), err)
		}
	}
	t.Logf("%d node models: %d imported, %d unsupported, %d other errors", len(entries), ok, unsupported, other)
	assert.Positive(t, ok)
	assert.Zero(t, other, "errors other than ErrUnsupported")
}

// FuzzImport feeds arbitrary bytes (seeded with real and hand-built models)
// to Import: it must return a graph or an error, never panic.
func FuzzImport(f *testing.F) {
	for _, name := range []string{"resnet18", "transformer"} {
		if b, err := os.ReadFile(filepath.Join(modelDir, name+".onnx")); err == nil {
			f.Add(b)
		}
	}
	f.Add(mlp())
	f.Add(groupNormModel(true, 1))
	f.Add(rnnModel("GRU", 3))
	f.Add(ifModel(4, "Sigmoid"))
	f.Add(oneOp("Einsum", []string{"xs"}, nil, nil, &AttributeProto{Name: strp("equation"), Type: attrType(AttributeProto_STRING), S: []byte("bchw,bdhw->bcdh")}))
	f.Add(oneOp("Tile", []string{"r"}, map[string]*TensorProto{"r": ints64(1, 1, 2, 3)}, nil))
	f.Add(oneOp("DepthToSpace", nil, nil, nil, intAttr("blocksize", 2)))
	f.Add(oneOp("Trilu", []string{"k"}, map[string]*TensorProto{"k": ints64(1)}, nil, intAttr("upper", 0)))
	f.Add(oneOp("TopK", []string{"k"}, map[string]*TensorProto{"k": ints64(3)}, nil, intAttr("axis", 1)))
	f.Add(oneOp("GatherElements", []string{"i"}, nil, []*ValueInfoProto{vi("i", tensorType(TensorProto_INT64, "N", 8, 4, 2))}, intAttr("axis", 3)))
	f.Add(oneOp("ScatterElements", []string{"i", "u"}, nil, []*ValueInfoProto{vi("i", tensorType(TensorProto_INT64, "N", 8, 4, 2)),
		vi("u", tensorType(TensorProto_FLOAT, "N", 8, 4, 2))}, intAttr("axis", 3), strAttr("reduction", "add")))
	f.Add(scatterNDModel([3]int64{2, 3, 4})) // basic indexing
	f.Add(scatterNDModel([3]int64{0, 7, 3}))
	f.Add(bceModel("ReduceMean", 1, 1, false)) // the BCE fusion
	f.Add(cosineModel(3, 3, false))            // the cosine fusion
	f.Add(chunkModel(false))                   // the chunk fusion
	f.Add(chunkModel(true))
	f.Add(rotary()) // a Mul by a weight (Options.Frozen's case)
	f.Add(encoderBlock(2, 0.5))
	f.Add([]byte{})
	f.Add([]byte{0x3a, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Import(bytes.NewReader(data), Options{Batch: 2})
		if err == nil {
			require.NoError(t, g.Validate())
		}
	})
}
