package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/onnx"
	"github.com/remat-dev/remat/sim"

	"github.com/remat-dev/remat/internal/testinputs"
)

func importFile(t *testing.T, name string, batch int64) *graph.Graph {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "testdata", "onnx", name+".onnx"))
	require.NoError(t, err)
	defer f.Close()
	g, err := onnx.Import(f, onnx.Options{Batch: batch, Optimizer: graph.OptSGD, InPlaceUpdate: true, DropoutMask: onnx.DropoutMaskLikeInput})
	require.NoError(t, err)
	return g
}

// The checkpoint_sequential plan recomputes the checkpointed segments once
// each and lowers the peak below the plan without a strategy; so does
// per-stage checkpointing of a ResNet (several regions).
func TestCheckpointPlan(t *testing.T) {
	for _, c := range []struct{ model, spec string }{
		{"vgg16", "features.0-6;features.7-13;features.14-20"},
		{"resnet18", "layer1;layer2;layer3;layer4"},
	} {
		g := importFile(t, c.model, 2)
		base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
		require.NoError(t, err)
		regions, err := parseRegions(c.spec)
		require.NoError(t, err)
		p, err := checkpointPlan(g, regions)
		require.NoError(t, err)
		res, err := sim.Simulate(g, p, sim.Options{})
		require.NoError(t, err)
		assert.Less(t, res.PeakAllocated, base.PeakAllocated, c.model)
		assert.Positive(t, res.Recomputes, c.model)
	}
	seq, err := sequentialRegions("features:31:4")
	require.NoError(t, err)
	assert.Equal(t, []region{{"features", 0, 6}, {"features", 7, 13}, {"features", 14, 20}}, seq)
	_, err = sequentialRegions("features:31")
	assert.ErrorContains(t, err, "expected MODULE:N:K")
	_, err = parseRegions("layer1;;layer2")
	assert.ErrorContains(t, err, "empty region")
	_, err = parseRegions("features.7-3")
	assert.ErrorContains(t, err, "0 <= A <= B")
	g := importFile(t, "vgg16", 2)
	_, err = checkpointPlan(g, []region{{"nothere", -1, -1}})
	assert.ErrorContains(t, err, "region nothere: no forward op")
	_, err = checkpointPlan(g, []region{{"features", 0, 6}, {"features", 5, 8}})
	assert.ErrorContains(t, err, "must not overlap")
}

// pythonWithTorch returns REMAT_PYTHON, else the first of /usr/bin/python3
// and python3 on PATH that imports torch, and skips the test when none
// does.
func pythonWithTorch(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, c := range []string{os.Getenv("REMAT_PYTHON"), "/usr/bin/python3", "python3"} {
		if c == "" {
			continue
		}
		out, err := exec.Command(c, "-c", "import torch, torchvision").CombinedOutput()
		if err == nil {
			testinputs.Track(t)
			return c
		}
		tried = append(tried, fmt.Sprintf("%s: %v %s", c, err, out))
	}
	t.Skipf("no python3 with torch and torchvision (set REMAT_PYTHON): skipping the PyTorch test; tried %v", tried)
	return ""
}

// TestExportTorch runs tools/export_torch.py on a tiny model and decodes
// the native JSON it writes.
func TestExportTorch(t *testing.T) {
	py := pythonWithTorch(t)
	dir := t.TempDir()
	src := `import torch.nn as nn
def Net():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True),
                         nn.Flatten(), nn.Linear(4 * 8 * 8, 5))
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tinynet.py"), []byte(src), 0o644))
	out := filepath.Join(dir, "step.json")
	cmd := exec.Command(py, filepath.Join("..", "export_torch.py"), "--model", "tinynet:Net",
		"--input-shape", "2,3,8,8", "--measure", "--out", out)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	g, err := graph.ReadFile(out)
	require.NoError(t, err)
	// conv 4x3x3x3+4, batch norm 4+4, linear 5x256+5.
	assert.Equal(t, int64(4*3*3*3+4+4+4+5*256+5), g.ParamCount())
	assert.NotEqual(t, graph.NoTensor, g.Loss)
	assert.Positive(t, g.OpsInPhase(graph.Forward))
	assert.Positive(t, g.OpsInPhase(graph.Backward))
	assert.Positive(t, g.OpsInPhase(graph.Update))
	types := map[string]bool{}
	inplace := false
	for i := range g.Ops {
		types[g.Ops[i].Type] = true
		assert.Positive(t, g.Ops[i].TimeNs, "op %s has no time", g.Ops[i].Name)
		inplace = inplace || g.Ops[i].Flags.Has(graph.InPlace)
	}
	assert.True(t, types["convolution"], "types: %v", types)
	assert.True(t, types["convolution_backward"], "types: %v", types)
	assert.True(t, inplace, "relu_ and the SGD update are in place")
	res, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
	require.NoError(t, err)
	assert.Positive(t, res.PeakAllocated)
}

// readTrace decodes graph/onnx's gzipped exporter trace of the transformer
// step (tools/export_torch.py --model transformer --batch 2).
func readTrace(t *testing.T) *graph.Graph {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "graph", "onnx", "testdata", "transformer_torch_b2.json.gz"))
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	g, err := graph.Decode(zr)
	require.NoError(t, err)
	return g
}

// compare lists, by type and size, the saved tensors and the activations
// live at the peak of both graphs: with the CPU dropout mask the only saved
// tensors that differ are the loss's two scalars, and the activations live
// at the peaks agree; with the one-byte mask the u8 masks are what differs.
func TestCompareTransformer(t *testing.T) {
	trace := readTrace(t)
	f, err := os.Open(filepath.Join("..", "..", "testdata", "onnx", "transformer.onnx"))
	require.NoError(t, err)
	defer f.Close()
	m, err := onnx.ReadModel(f)
	require.NoError(t, err)
	for _, mask := range []onnx.DropoutMask{onnx.DropoutMaskLikeInput, onnx.DropoutMaskByte} {
		g, err := onnx.FromModel(m, onnx.Options{Batch: 2, Optimizer: graph.OptSGD, InPlaceUpdate: true, DropoutMask: mask})
		require.NoError(t, err)
		var buf bytes.Buffer
		require.NoError(t, compare(&buf, g, trace))
		out := buf.String()
		var differs []string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasSuffix(line, "differs") {
				differs = append(differs, strings.Fields(line)[0])
			}
		}
		if mask == onnx.DropoutMaskLikeInput {
			assert.Equal(t, []string{"f32"}, differs, "%s", out)
			assert.Regexp(t, `trace: nll_loss_forward nll_loss_forward#[0-9]+:0 \[\]`, out)
			assert.Contains(t, out, "total: onnx 3542016 B, trace 3542016 B, difference +0 B", "%s", out)
		} else {
			assert.Contains(t, differs, "u8", "%s", out)
			assert.Contains(t, out, "onnx:  dropout /encoder/layers.0/dropout/Dropout_output_1 [2 64 512]")
		}
	}
}

func TestRunFlagErrors(t *testing.T) {
	assert.ErrorContains(t, run([]string{"-json", "x.json", "-compare", "y.json"}), "-compare needs -onnx")
	onnxPath := filepath.Join("..", "..", "testdata", "onnx", "transformer.onnx")
	assert.ErrorContains(t, run([]string{"-onnx", onnxPath, "-dropout-mask", "bool"}), `-dropout-mask: flag --dropout-mask="bool"`)
	assert.ErrorContains(t, run([]string{"-onnx", onnxPath, "-device", "tpu"}), `-device: device "tpu": unknown`)
	assert.ErrorContains(t, run([]string{"-onnx", onnxPath, "-checkpoint", "a", "-checkpoint-sequential", "a:2:1"}), "not both")
	assert.ErrorContains(t, run([]string{"-onnx", onnxPath, "-optimizer", "lion"}), `optimizer "lion"`)
	assert.ErrorContains(t, run([]string{}), "exactly one of -onnx and -json")
}
