package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// families are the models of every family tools/fidelity.py measures, one
// or two each: CNNs (residual, depthwise, Inception, SqueezeNet,
// VGG-style, UNet-style with GroupNorm, SiLU, InstanceNorm, PReLU and
// PixelShuffle), a vision transformer, a transformer encoder, a GPT-style
// language model (a loss per token over the vocabulary), an LSTM.
var families = []string{"resnet18", "mobilenet_v2", "googlenet", "squeezenet1_1", "vgg11s", "unet_gn", "vit", "transformer", "gpt", "lstm"}

// TestFamiliesCLIMatchesTrace runs the user's path - the model exported
// with torch.onnx.export in training mode, then
//
//	sim report --onnx M --batch 2 --device cpu --allocator ideal --strategies none
//
// with no other flag, and again with --optimizer none - against sim report
// on tools/export_torch.py's trace of the same step (the aten operators
// PyTorch runs, the tensors they return, freed when PyTorch frees them),
// for every family, at tiny sizes. The step peaks (without the parameters,
// buffers, input and labels resident from the start) must agree within
// 0.5% (both routes go through the same simulator and CPU model, so what
// differs is the import; the LSTM's +0.11% is the largest difference), so
// the ONNX import and the CLI's defaults cannot drift away from what
// PyTorch does. tools/fidelity, which the harness uses for checkpoint
// plans, must print the CLI's peak.
func TestFamiliesCLIMatchesTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("exports and traces ten PyTorch models: skipped with -short")
	}
	py := pythonWithTorch(t)
	dir := t.TempDir()
	cmd := exec.Command(py, filepath.Join("..", "fidelity.py"), "--export", dir, "--models", strings.Join(families, ","),
		"--batches", "2", "--image", "32")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	simBin := filepath.Join(dir, "sim")
	b, err = exec.Command("go", "build", "-o", simBin, "../../cmd/sim").CombinedOutput()
	require.NoError(t, err, "%s", b)
	report := func(args ...string) int64 {
		t.Helper()
		args = append([]string{"report"}, append(args, "--device", "cpu", "--allocator", "ideal", "--strategies", "none", "--format", "json")...)
		out, err := exec.Command(simBin, args...).Output()
		require.NoError(t, err, "sim %v", args)
		var doc struct {
			Rows []struct {
				PeakAllocated int64 `json:"peak_allocated"`
			} `json:"rows"`
		}
		require.NoError(t, json.Unmarshal(out, &doc))
		require.Len(t, doc.Rows, 1)
		return doc.Rows[0].PeakAllocated
	}
	for _, name := range families {
		for _, opt := range []string{"sgd", "none"} {
			onnxPath := filepath.Join(dir, name+".onnx")
			tracePath := filepath.Join(dir, name+"."+opt+".json")
			flags := []string{"--onnx", onnxPath, "--batch", "2"}
			if opt == "none" {
				flags = append(flags, "--optimizer", "none")
			}
			pOnnx := report(flags...)
			pTrace := report("--graph", tracePath)
			tr, err := graph.ReadFile(tracePath)
			require.NoError(t, err)
			res := residentBytes(tr)
			stepOnnx, stepTrace := pOnnx-res, pTrace-res
			require.Positive(t, stepTrace, "%s %s", name, opt)
			d := float64(stepOnnx-stepTrace) / float64(stepTrace)
			t.Logf("%-13s %-4s step peak: onnx %d, trace %d (%+.2f%%)", name, opt, stepOnnx, stepTrace, 100*d)
			assert.InDelta(t, 0, d, 0.005, "%s, optimizer %s: ONNX route %d vs the trace's %d bytes above the resident %d", name, opt, stepOnnx, stepTrace, res)

			// tools/fidelity goes through the same path (both read the
			// same environment).
			var buf bytes.Buffer
			args := []string{"-onnx", onnxPath, "-batch", "2", "-device", "cpu"}
			if opt == "none" {
				args = append(args, "-optimizer", "none")
			}
			require.NoError(t, runTo(&buf, args))
			var r result
			require.NoError(t, json.Unmarshal(buf.Bytes(), &r))
			assert.Equal(t, pOnnx, r.PeakAllocated, "%s %s: tools/fidelity and sim report differ", name, opt)
		}
	}
}
