package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type envRows struct {
	Settings []struct {
		Name   string `json:"name"`
		Value  string `json:"value"`
		Source string `json:"source"`
	} `json:"settings"`
}

func envValues(t *testing.T, env map[string]string, args ...string) map[string][2]string {
	t.Helper()
	out, stderr, code := run(t, env, append([]string{"env", "--format", "json"}, args...)...)
	require.Equal(t, 0, code, stderr)
	var rows envRows
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	m := map[string][2]string{}
	for _, r := range rows.Settings {
		m[r.Name] = [2]string{r.Value, r.Source}
	}
	return m
}

// sim env shows what the framework preset decides for the device, with the
// preset as the source; the environment and flags win over it.
func TestEnvPreset(t *testing.T) {
	cpu := envValues(t, fixedEnv, "--device", "cpu")
	assert.Equal(t, [2]string{"off", "preset pytorch on cpu"}, cpu["cudnn.autotune"])
	assert.Equal(t, [2]string{"like-input", "preset pytorch on cpu"}, cpu["dropout.mask"])
	assert.Equal(t, [2]string{"onednn", "preset pytorch on cpu"}, cpu["conv.library"])
	assert.Equal(t, [2]string{"true", "preset pytorch on cpu"}, cpu["optimizer.inplace_update"])
	assert.Equal(t, [2]string{"pytorch", "default"}, cpu["framework.name"])

	gpu := envValues(t, fixedEnv)
	assert.Equal(t, [2]string{"limited_workspace", "default"}, gpu["cudnn.autotune"])
	assert.Equal(t, [2]string{"byte", "default"}, gpu["dropout.mask"])

	mg := envValues(t, fixedEnv, "--device", "cpu", "--framework", "megengine")
	assert.Equal(t, [2]string{"false", "default"}, mg["optimizer.inplace_update"])
	assert.Equal(t, [2]string{"megengine", "flag --framework"}, mg["framework.name"])

	env := map[string]string{"REMAT_DROPOUT_MASK": "byte"}
	over := envValues(t, env, "--device", "cpu", "--inplace-update=0")
	assert.Equal(t, [2]string{"byte", "env REMAT_DROPOUT_MASK"}, over["dropout.mask"])
	assert.Equal(t, [2]string{"false", "flag --inplace-update"}, over["optimizer.inplace_update"])
}

func reportPeak(t *testing.T, env map[string]string, args ...string) int64 {
	t.Helper()
	args = append([]string{"report", "--format", "json", "--allocator", "ideal", "--strategies", "none"}, args...)
	out, stderr, code := run(t, env, args...)
	require.Equal(t, 0, code, stderr)
	var doc struct {
		Rows []struct {
			PeakAllocated int64 `json:"peak_allocated"`
		} `json:"rows"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Len(t, doc.Rows, 1)
	return doc.Rows[0].PeakAllocated
}

// On an ONNX model, the CLI's defaults are the preset's: the optimizer is
// sgd as --optimizer's help says, --optimizer none keeps every gradient to
// the end of the step (so the backward peak is the same as with in-place
// SGD), and each preset value is one flag away.
func TestONNXDefaults(t *testing.T) {
	m := filepath.Join("..", "..", "testdata", "onnx", "transformer.onnx")
	base := []string{"--onnx", m, "--batch", "2", "--device", "cpu"}
	def := reportPeak(t, fixedEnv, base...)
	assert.Equal(t, def, reportPeak(t, fixedEnv, append(base, "--optimizer", "sgd", "--inplace-update=1", "--dropout-mask", "like-input")...))
	assert.Equal(t, def, reportPeak(t, fixedEnv, append(base, "--optimizer", "none")...), "the gradients stay allocated as .grad")
	// A copy of every parameter with updates that are not in place.
	assert.Greater(t, reportPeak(t, fixedEnv, append(base, "--inplace-update=0")...), def)
	// One-byte dropout masks (PyTorch on CUDA) save less.
	assert.Less(t, reportPeak(t, fixedEnv, append(base, "--dropout-mask", "byte")...), def)
	// The same model on a GPU: byte masks by default.
	gpu := []string{"--onnx", m, "--batch", "2", "--device", "a100-40gb"}
	assert.Equal(t, reportPeak(t, fixedEnv, append(gpu, "--dropout-mask", "byte")...), reportPeak(t, fixedEnv, gpu...))
}

// A boolean setting's flag given alone means true, and leaves the next
// argument alone (it took it as its value before); a value goes after "=".
func TestBoolSettingFlagAlone(t *testing.T) {
	on := envValues(t, fixedEnv, "--mirror", "--device", "cpu", "--dtr-swap")
	assert.Equal(t, [2]string{"true", "flag --mirror"}, on["mirror.enabled"])
	assert.Equal(t, [2]string{"like-input", "preset pytorch on cpu"}, on["dropout.mask"], "--device after --mirror is a flag of its own")
	assert.Equal(t, [2]string{"true", "flag --dtr-swap"}, on["dtr.swap"])

	off := envValues(t, map[string]string{"MXNET_BACKWARD_DO_MIRROR": "1"}, "--mirror=0")
	assert.Equal(t, [2]string{"false", "flag --mirror"}, off["mirror.enabled"])

	_, stderr, code := run(t, fixedEnv, "report", "--model", "chain", "--mirror", "--strategies", "none", "--format", "csv")
	assert.Equal(t, 0, code, stderr)
}
