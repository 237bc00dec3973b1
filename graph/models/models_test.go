package models

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestParamCountsMatchPublished(t *testing.T) {
	// Sources: torchvision's model documentation tables ("num_params" of the
	// IMAGENET1K_V1 weights), nanoGPT's GPT-2 small count with tied
	// embeddings (124,439,808 = 124M incl. positional table), and He et al.
	// 2016 table 6 (CIFAR ResNet-32 0.46M, ResNet-1202 19.4M).
	for name, want := range map[string]int64{
		"resnet18": 11_689_512, "resnet34": 21_797_672, "resnet50": 25_557_032,
		"resnet101": 44_549_160, "resnet152": 60_192_808,
		"vgg16": 138_357_544, "vgg19": 143_667_240,
		"densenet121": 7_978_856, "mobilenet_v2": 3_504_872,
		"gpt": 124_439_808,
	} {
		fwd, _, err := BuildForward(name, Options{Batch: 1})
		require.NoError(t, err, name)
		assert.Equal(t, want, fwd.ParamCount(), name)
	}
	for name, wantM := range map[string]float64{"resnet32": 0.46, "resnet1202": 19.4} {
		fwd, _, err := BuildForward(name, Options{Batch: 1})
		require.NoError(t, err)
		got := float64(fwd.ParamCount()) / 1e6
		assert.InDelta(t, wantM, got, 0.05, name)
	}
	// nn.LSTM / nn.Embedding / nn.Linear formulas for the lstm defaults.
	fwd, _, err := BuildForward("lstm", Options{})
	require.NoError(t, err)
	V, H := int64(10000), int64(650)
	lstmLayer := 4*H*(H+H) + 8*H
	assert.Equal(t, V*H+2*lstmLayer+H*V+V, fwd.ParamCount())
}

func shapes(g *graph.Graph) map[string]graph.Shape {
	m := make(map[string]graph.Shape, len(g.Tensors))
	for _, t := range g.Tensors {
		m[t.Name] = t.Shape
	}
	return m
}

func checkShapes(t *testing.T, model string, o Options, want map[string]graph.Shape) {
	t.Helper()
	fwd, _, err := BuildForward(model, o)
	require.NoError(t, err)
	got := shapes(fwd)
	for name, s := range want {
		require.Contains(t, got, name, model)
		assert.Equal(t, s, got[name], "%s: %s", model, name)
	}
}

// Expected shapes are those of PyTorch's forward pass of the same module
// (torchvision/models/resnet.py, vgg.py, densenet.py, mobilenetv2.py;
// nanoGPT model.py; the U-Net paper's figure 1), as torchinfo.summary
// prints them for the given input size.
func TestActivationShapesMatchPyTorch(t *testing.T) {
	checkShapes(t, "resnet50", Options{Batch: 2}, map[string]graph.Shape{
		"conv1": {2, 64, 112, 112}, "bn1": {2, 64, 112, 112}, "maxpool": {2, 64, 56, 56},
		"layer1.0.conv1": {2, 64, 56, 56}, "layer1.0.conv2": {2, 64, 56, 56}, "layer1.0.conv3": {2, 256, 56, 56},
		"layer1.0.downsample.0": {2, 256, 56, 56}, "layer1.0.relu": {2, 256, 56, 56},
		"layer2.0.conv1": {2, 128, 56, 56}, "layer2.0.conv2": {2, 128, 28, 28}, "layer2.0.downsample.0": {2, 512, 28, 28},
		"layer4.2.relu": {2, 2048, 7, 7}, "avgpool": {2, 2048, 1, 1}, "flatten": {2, 2048}, "fc": {2, 1000},
		"conv1.weight": {64, 3, 7, 7}, "layer1.0.downsample.0.weight": {256, 64, 1, 1},
		"layer1.0.bn3.running_mean": {256}, "fc.weight": {1000, 2048},
	})
	checkShapes(t, "resnet18", Options{Batch: 1}, map[string]graph.Shape{
		"maxpool": {1, 64, 56, 56}, "layer1.0.conv1": {1, 64, 56, 56}, "layer1.0.conv2": {1, 64, 56, 56},
		"layer2.0.conv1": {1, 128, 28, 28}, "layer2.0.downsample.0": {1, 128, 28, 28}, "layer4.1.relu": {1, 512, 7, 7},
	})
	checkShapes(t, "resnet32", Options{Batch: 2}, map[string]graph.Shape{
		"conv1": {2, 16, 32, 32}, "layer1.0.conv1": {2, 16, 32, 32}, "layer2.0.conv1": {2, 32, 16, 16},
		"layer2.0.shortcut.w": {2, 16, 16, 16}, "layer2.0.shortcut.pad": {2, 32, 16, 16},
		"layer3.4.relu": {2, 64, 8, 8}, "linear": {2, 10},
	})
	checkShapes(t, "vgg16", Options{Batch: 2}, map[string]graph.Shape{
		"features.0": {2, 64, 224, 224}, "features.4": {2, 64, 112, 112}, "features.5": {2, 128, 112, 112},
		"features.30": {2, 512, 7, 7}, "avgpool": {2, 512, 7, 7}, "flatten": {2, 25088},
		"classifier.0": {2, 4096}, "classifier.6": {2, 1000}, "features.28.weight": {512, 512, 3, 3},
	})
	checkShapes(t, "vgg19", Options{Batch: 1}, map[string]graph.Shape{"features.36": {1, 512, 7, 7}})
	checkShapes(t, "densenet121", Options{Batch: 2}, map[string]graph.Shape{
		"features.conv0": {2, 64, 112, 112}, "features.pool0": {2, 64, 56, 56},
		"features.denseblock1.denselayer1.conv1": {2, 128, 56, 56},
		"features.denseblock1.denselayer1.conv2": {2, 32, 56, 56},
		"features.denseblock1.denselayer6.cat":   {2, 224, 56, 56},
		"features.denseblock1.cat":               {2, 256, 56, 56},
		"features.transition1.conv":              {2, 128, 56, 56}, "features.transition1.pool": {2, 128, 28, 28},
		"features.denseblock4.cat": {2, 1024, 7, 7}, "classifier": {2, 1000},
	})
	checkShapes(t, "mobilenet_v2", Options{Batch: 2}, map[string]graph.Shape{
		"features.0.0": {2, 32, 112, 112}, "features.1.conv.0.0": {2, 32, 112, 112}, "features.1.conv.1": {2, 16, 112, 112},
		"features.2.conv.0.0": {2, 96, 112, 112}, "features.2.conv.1.0": {2, 96, 56, 56}, "features.2.conv.2": {2, 24, 56, 56},
		"features.3.add": {2, 24, 56, 56}, "features.17.conv.3": {2, 320, 7, 7}, "features.18.0": {2, 1280, 7, 7},
		"features.2.conv.1.0.weight": {96, 1, 3, 3}, "classifier.1": {2, 1000},
	})
	checkShapes(t, "unet", Options{}, map[string]graph.Shape{
		"down1.conv1": {1, 64, 570, 570}, "down1.conv2": {1, 64, 568, 568}, "down1.pool": {1, 64, 284, 284},
		"down4.conv2": {1, 512, 64, 64}, "bottom.conv2": {1, 1024, 28, 28}, "up1.upconv": {1, 512, 56, 56},
		"up1.crop.w": {1, 512, 56, 56}, "up1.cat": {1, 1024, 56, 56}, "up4.conv2": {1, 64, 388, 388},
		"final": {1, 2, 388, 388},
	})
	checkShapes(t, "gpt", Options{Batch: 2, Seq: 64}, map[string]graph.Shape{
		"transformer.wte": {2, 64, 768}, "transformer.wpe": {64, 768}, "transformer.emb_add": {2, 64, 768},
		"transformer.h.0.attn.c_attn": {2, 64, 2304}, "transformer.h.0.attn.q.transpose": {2, 12, 64, 64},
		"transformer.h.0.attn.qk": {2, 12, 64, 64}, "transformer.h.0.attn.av": {2, 12, 64, 64},
		"transformer.h.0.attn.view": {2, 64, 768}, "transformer.h.0.mlp.c_fc": {2, 64, 3072},
		"transformer.h.11.add2": {2, 64, 768}, "lm_head": {2, 64, 50257}, "lm_head.view": {128, 50257},
		"transformer.wpe.weight": {1024, 768},
	})
	checkShapes(t, "lstm", Options{Batch: 4, Seq: 3}, map[string]graph.Shape{
		"encoder": {3, 4, 650}, "rnn.l0.t0.gates_x": {4, 2600}, "rnn.l1.t2.h": {4, 650},
		"rnn.l1.t2.workspace": {4, 2600}, "out.cat": {3, 4, 650}, "decoder.view": {12, 10000},
		"rnn.weight_ih_l0": {2600, 650}, "rnn.bias_hh_l1": {2600},
	})
}

func TestBuildTrainingGraphs(t *testing.T) {
	for _, s := range List() {
		o := Options{Batch: 2}
		switch s.Name {
		case "chain":
			o = Options{Depth: 5}
		case "gpt":
			o.Seq, o.Depth = 32, 2
		case "lstm":
			o.Seq = 4
		case "resnet1202":
			o.Batch = 1
		}
		g, err := Build(s.Name, o)
		require.NoError(t, err, s.Name)
		require.NoError(t, g.Validate(), s.Name)
		if s.Name == "chain" {
			continue
		}
		assert.Positive(t, g.OpsInPhase(graph.Backward), s.Name)
		params := 0
		for _, tt := range g.Tensors {
			if tt.Kind == graph.Parameter && tt.Producer == graph.NoOp {
				params++
			}
		}
		assert.Equal(t, params, g.OpsInPhase(graph.Update), "%s: one sgd update per parameter", s.Name)
	}
}

func TestGPTTiedEmbeddingAccumulates(t *testing.T) {
	g, err := Build("gpt", Options{Batch: 1, Seq: 8, Depth: 1, Optimizer: "adam", InPlaceUpdate: true})
	require.NoError(t, err)
	var acc *graph.Op
	for i := range g.Ops {
		if g.Ops[i].Type == graph.OpGradAccumulate && g.Tensors[g.Ops[i].Outputs[0]].Name == "transformer.wte.weight.grad" {
			acc = &g.Ops[i]
		}
	}
	require.NotNil(t, acc, "wte receives gradients from the embedding and the lm head")
	assert.Equal(t, graph.ParamGradient, g.Tensors[acc.Outputs[0]].Kind)
	for _, op := range g.Ops {
		if op.Type == graph.OpAdamUpdate {
			assert.Len(t, op.Outputs, 3)
			assert.Equal(t, op.Inputs[0], g.Tensors[op.Outputs[0]].AliasOf)
		}
	}
}

func TestChainIsCheckmateLinear(t *testing.T) {
	const n = 6
	g, err := Build("chain", Options{Depth: n})
	require.NoError(t, err)
	require.Len(t, g.Ops, 2*n+1)
	require.Len(t, g.Tensors, 2*n+1)
	for i, op := range g.Ops {
		assert.Equal(t, int64(ChainOpTimeNs), op.TimeNs)
		require.Len(t, op.Outputs, 1)
		assert.Equal(t, int64(ChainTensorBytes), g.Tensors[op.Outputs[0]].Bytes)
		var want []graph.TensorID
		if i > 0 {
			want = append(want, g.Ops[i-1].Outputs[0])
		}
		if i > n {
			f := 2*n - i
			want = append(want, g.Ops[f].Outputs[0])
			assert.Equal(t, graph.OpID(f), op.Forward)
			assert.Equal(t, graph.Backward, op.Phase)
		} else {
			assert.Equal(t, graph.Forward, op.Phase)
		}
		assert.Equal(t, want, op.Inputs, "node %d", i)
	}
	assert.Equal(t, g.Ops[n].Outputs[0], g.Loss)
	g16, err := Build("chain", Options{})
	require.NoError(t, err)
	assert.Len(t, g16.Ops, 33)
}

func TestOptionErrors(t *testing.T) {
	_, err := Build("resnet51", Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "resnet50")
	assert.Contains(t, err.Error(), "vgg16")
	_, err = Build("gpt", Options{Image: 224})
	require.ErrorContains(t, err, "Image=224")
	_, err = Build("gpt", Options{Width: 100})
	require.ErrorContains(t, err, "Width=100")
	_, err = Build("resnet50", Options{Batch: -1})
	require.ErrorContains(t, err, "Batch=-1")
	_, err = Build("resnet50", Options{Optimizer: "rmsprop"})
	require.ErrorContains(t, err, "sgd, momentum, adam")
	_, err = Build("resnet-cifar", Options{Depth: 33})
	require.ErrorContains(t, err, "6n+2")
	_, err = Build("vgg16", Options{Image: 16}) // the fifth 2x2 max pool sees a 1x1 map
	require.Error(t, err)
	_, err = Build("unet", Options{Image: 100})
	require.Error(t, err)
	_, err = Build("mlp", Options{DType: graph.I64})
	require.ErrorContains(t, err, "DType")
}

func TestListSortedWithDefaults(t *testing.T) {
	l := List()
	require.NotEmpty(t, l)
	for i := 1; i < len(l); i++ {
		assert.Less(t, l[i-1].Name, l[i].Name)
	}
	for _, s := range l {
		assert.NotEmpty(t, s.Description, s.Name)
		assert.NotEmpty(t, s.Uses, s.Name)
	}
	want := []string{"chain", "densenet121", "gpt", "lstm", "mlp", "mobilenet_v2", "resnet-cifar", "resnet101",
		"resnet1202", "resnet152", "resnet18", "resnet32", "resnet34", "resnet50", "unet", "vgg16", "vgg19"}
	assert.Equal(t, want, Names())
}

func TestDeterministic(t *testing.T) {
	var prev []byte
	for i := 0; i < 2; i++ {
		g, err := Build("densenet121", Options{Batch: 1})
		require.NoError(t, err)
		var buf bytes.Buffer
		require.NoError(t, graph.Encode(&buf, g))
		if prev != nil {
			assert.Equal(t, prev, buf.Bytes())
		}
		prev = buf.Bytes()
	}
}

func golden(t *testing.T, file string, g *graph.Graph) {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, graph.Encode(&buf, g))
	path := filepath.Join("testdata", file)
	if *update {
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./graph/models -update to create %s", path)
	assert.True(t, bytes.Equal(want, buf.Bytes()), "%s differs from the built graph; rerun with -update if the change is intended", path)
	back, err := graph.Decode(bytes.NewReader(want))
	require.NoError(t, err)
	assert.Equal(t, len(g.Ops), len(back.Ops))
	assert.Equal(t, g.ParamCount(), back.ParamCount())
}

func TestGoldenChain4(t *testing.T) {
	g, err := Build("chain", Options{Depth: 4})
	require.NoError(t, err)
	golden(t, "chain4.json", g)
}

func TestGoldenResNet18(t *testing.T) {
	g, err := Build("resnet18", Options{Batch: 1})
	require.NoError(t, err)
	golden(t, "resnet18_b1.json", g)
}

func BenchmarkBuildResNet50(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := Build("resnet50", Options{Batch: 64}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBuildResNet152(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := Build("resnet152", Options{Batch: 64}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBackwardGPT(b *testing.B) {
	fwd, loss, err := BuildForward("gpt", Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Optimizer: graph.OptAdam}); err != nil {
			b.Fatal(err)
		}
	}
}

// ExampleBuild builds ResNet-50's training graph at batch 32.
func ExampleBuild() {
	g, err := Build("resnet50", Options{Batch: 32, Optimizer: "momentum"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("parameters:", g.ParamCount())
	fmt.Println("forward ops:", g.OpsInPhase(graph.Forward))
	fmt.Println("backward ops:", g.OpsInPhase(graph.Backward))
	fmt.Println("update ops:", g.OpsInPhase(graph.Update))
	// Output:
	// parameters: 25557032
	// forward ops: 176
	// backward ops: 193
	// update ops: 161
}

func TestUNetOtherSizes(t *testing.T) {
	checkShapes(t, "unet", Options{Image: 508, Batch: 2}, map[string]graph.Shape{"final": {2, 2, 324, 324}})
}

// BenchmarkBuild100k builds graphs of about 100k ops (forward, backward
// and SGD updates), where the op and tensor arrays are tens of megabytes
// and the garbage collector runs while they are copied.
func BenchmarkBuild100k(b *testing.B) {
	for _, c := range []struct {
		name string
		o    Options
	}{{"mlp", Options{Depth: 16666}}, {"resnet-cifar", Options{Depth: 9524}}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := Build(c.name, c.o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestBackwardRoom checks the room graph.Differentiate reserves for the
// backward pass (1.25 ops per forward op, 1.125 tensors per forward
// tensor, besides the exactly counted updates) against the zoo's models:
// these fit it, so their op and tensor arrays are copied once and not
// regrown; the LSTM and DenseNet do not (go test -v logs the ratios).
func TestBackwardRoom(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
		fits bool
	}{
		{"mlp", Options{Depth: 1666}, true}, {"resnet-cifar", Options{Depth: 950}, true}, {"gpt", Options{Depth: 12}, true},
		{"resnet50", Options{}, true}, {"vgg16", Options{}, true}, {"mobilenet_v2", Options{}, true}, {"unet", Options{}, true},
		{"lstm", Options{}, false}, {"densenet121", Options{}, false},
	} {
		fwd, _, err := BuildForward(c.name, c.o)
		require.NoError(t, err)
		g, err := Build(c.name, c.o)
		require.NoError(t, err)
		var bwdOps, updOps int
		for i := range g.Ops {
			switch g.Ops[i].Phase {
			case graph.Backward:
				bwdOps++
			case graph.Update:
				updOps++
			}
		}
		bwdTensors := len(g.Tensors) - len(fwd.Tensors) - updOps // SGD: one new parameter per update
		no, nt := len(fwd.Ops), len(fwd.Tensors)
		t.Logf("%-14s backward: %.2f ops per forward op, %.2f tensors per forward tensor", c.name, float64(bwdOps)/float64(no), float64(bwdTensors)/float64(nt))
		fits := bwdOps <= no+no/4+1 && bwdTensors <= nt+nt/8
		require.Equal(t, c.fits, fits, c.name)
	}
}
