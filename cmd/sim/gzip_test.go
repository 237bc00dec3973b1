package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGzipInputs: every command reads a gzip-compressed remat JSON graph,
// DTR log or ONNX model as it reads the plain file (the content decides,
// not the name: a compressed file named .json reads too), convert writes
// OUT.json.gz and OUT.log.gz compressed, with the same bytes on every run,
// and a compressed input cut short fails with an error that names the
// file and gzip.
func TestGzipInputs(t *testing.T) {
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	mustRun := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := run(t, nil, args...)
		require.Zero(t, code, "%v: %s", args, stderr)
		return stdout
	}
	gunzip := func(p string) []byte {
		t.Helper()
		f, err := os.Open(p)
		require.NoError(t, err)
		defer f.Close()
		zr, err := gzip.NewReader(f)
		require.NoError(t, err, p)
		b, err := io.ReadAll(zr)
		require.NoError(t, err, p)
		return b
	}
	for _, ext := range []string{".json", ".log"} {
		plain, packed := path("m"+ext), path("m"+ext+".gz")
		mustRun("convert", "--model", "resnet32", "--batch", "8", plain)
		mustRun("convert", "--model", "resnet32", "--batch", "8", packed)
		want, err := os.ReadFile(plain)
		require.NoError(t, err)
		assert.Equal(t, want, gunzip(packed), "convert %s", packed)
		first, err := os.ReadFile(packed)
		require.NoError(t, err)
		mustRun("convert", "--model", "resnet32", "--batch", "8", packed)
		again, err := os.ReadFile(packed)
		require.NoError(t, err)
		assert.Equal(t, first, again, "convert %s writes the same bytes again", packed)
		assert.Less(t, len(first), len(want)/4, "%s is compressed", packed)

		flag := "--graph"
		if ext == ".log" {
			flag = "--dtr-log"
		}
		for _, args := range [][]string{
			{"validate", "IN"},
			{"report", flag, "IN", "--strategies", "none,mirror,dtr", "--budget", "0.5", "--device", "none", "--format", "csv"},
			{"convert", "IN", "-"},
		} {
			with := func(in string) []string { return replaceArg(args, "IN", in) }
			out := mustRun(with(plain)...)
			assert.Equal(t, strings.ReplaceAll(out, "m"+ext, "M"), strings.ReplaceAll(mustRun(with(packed)...), "m"+ext+".gz", "M"), "%v", args)
		}
	}
	// the DTR protocol's sweep, and a compressed log under a plain name
	log := path("m.log")
	renamed := path("renamed.log")
	require.NoError(t, os.Rename(path("m.log.gz"), renamed))
	sweep := func(in string) string {
		return mustRun("sweep", "--dtr-log", in, "--strategies", "dtr", "--heuristic", "eq-class", "--parity", "--ratios", "0.8,0.5")
	}
	assert.Equal(t, sweep(log), sweep(renamed))

	// an ONNX model, compressed
	onnxModel := filepath.Join("..", "..", "testdata", "onnx", "resnet18.onnx")
	raw, err := os.ReadFile(onnxModel)
	require.NoError(t, err)
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, err = zw.Write(raw)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	packedONNX := path("resnet18.onnx.gz")
	require.NoError(t, os.WriteFile(packedONNX, b.Bytes(), 0o644))
	assert.Equal(t, mustRun("validate", onnxModel), mustRun("validate", packedONNX))

	// cut short: the error names the file and says gzip
	for _, name := range []string{"m.json.gz", "renamed.log"} {
		full, err := os.ReadFile(path(name))
		require.NoError(t, err)
		cut := path("cut-" + name)
		require.NoError(t, os.WriteFile(cut, full[:len(full)/2], 0o644))
		_, stderr, code := run(t, nil, "validate", cut)
		assert.NotZero(t, code)
		assert.Contains(t, stderr, cut)
		assert.Contains(t, stderr, "gzip: unexpected EOF")
	}
}

// replaceArg returns a copy of args with every old replaced by new.
func replaceArg(args []string, old, new string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == old {
			a = new
		}
		out[i] = a
	}
	return out
}
