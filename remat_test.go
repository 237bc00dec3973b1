package remat_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/remat-dev/remat"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/graph/onnx"
	"github.com/remat-dev/remat/sim"
)

// fencedAfter returns the body of the first fenced block that opens after
// marker in doc.
func fencedAfter(t *testing.T, doc, marker string) string {
	t.Helper()
	i := strings.Index(doc, marker)
	require.GreaterOrEqual(t, i, 0, "README has no %q", marker)
	rest := doc[i+len(marker):]
	j := strings.Index(rest, "```")
	require.GreaterOrEqual(t, j, 0)
	rest = rest[j:]
	nl := strings.IndexByte(rest, '\n')
	body := rest[nl+1:]
	end := strings.Index(body, "```")
	require.GreaterOrEqual(t, end, 0)
	return body[:end]
}

// The README's library example is examples/library/main.go, unchanged, and
// the output it shows is what the program prints.
func TestREADMELibraryExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	prog, err := os.ReadFile("examples/library/main.go")
	require.NoError(t, err)
	assert.Equal(t, string(prog), fencedAfter(t, string(readme), "This complete program is `examples/library/main.go`:"))
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH: cannot run the example")
	}
	cmd := exec.Command(goTool, "run", "./examples/library")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = cleanEnv()
	require.NoError(t, cmd.Run(), errb.String())
	assert.Equal(t, fencedAfter(t, string(readme), "`go run ./examples/library` prints:"), out.String())
}

// cleanEnv is the process environment without the settings remat reads, so
// the example prints the defaults' numbers.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "MXNET_"), strings.HasPrefix(kv, "MGB_"), strings.HasPrefix(kv, "MEGENGINE_"), strings.HasPrefix(kv, "GE_"), strings.HasPrefix(kv, "REMAT_"):
			continue
		}
		env = append(env, kv)
	}
	return env
}

func TestRunMisuse(t *testing.T) {
	o, err := remat.Options("none")
	require.NoError(t, err)
	_, err = remat.Run(context.Background(), nil, o)
	assert.Error(t, err)
	g, err := models.Build("chain", models.Options{Depth: 4})
	require.NoError(t, err)
	_, err = remat.Run(context.Background(), g, o, "nope")
	assert.ErrorContains(t, err, `strategy "nope"`)
	_, err = remat.Options("no-such-device")
	assert.Error(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := remat.Run(ctx, g, o)
	assert.True(t, errors.Is(err, sim.ErrCanceled), "%v", err)
	assert.Empty(t, res)
}

// Run every strategy on a small chain within 60% of its baseline peak.
func ExampleRun() {
	g, err := models.Build("chain", models.Options{Depth: 16})
	if err != nil {
		panic(err)
	}
	o, err := remat.Options("none") // an unlimited device
	if err != nil {
		panic(err)
	}
	o.Allocator = "ideal"
	o.Budget = 11 << 20
	results, err := remat.Run(context.Background(), g, o, "none", "chen-sqrt", "optimal-chain", "dtr")
	if err != nil {
		panic(err)
	}
	for _, r := range results {
		fmt.Printf("%-13s %-10s %2d MiB %3.0f ms\n", r.Strategy, r.Status, r.PeakAllocated()>>20, float64(r.TimeNs())/1e6)
	}
	// Output:
	// none          infeasible 18 MiB  33 ms
	// chen-sqrt     ok          8 MiB  45 ms
	// optimal-chain ok         11 MiB  40 ms
	// dtr           ok         11 MiB  40 ms
}

// TestImportONNXModelLeavesTheModel: maxbatch imports one parsed model at
// many batch sizes, so an import must not change the model (fusions build
// nodes of their own) and must give what ImportONNX gives from the file.
func TestImportONNXModelLeavesTheModel(t *testing.T) {
	for _, name := range []string{"resnet18", "transformer"} {
		path := filepath.Join("testdata", "onnx", name+".onnx")
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		m, err := onnx.ReadModel(bytes.NewReader(b))
		require.NoError(t, err)
		before := proto.Clone(m)
		var encoded []string
		for _, batch := range []int64{3, 5, 3} {
			g, err := remat.ImportONNXModel(m, nil, remat.ONNXInput{Batch: batch})
			require.NoError(t, err, name)
			var buf bytes.Buffer
			require.NoError(t, graph.Encode(&buf, g))
			encoded = append(encoded, buf.String())
		}
		assert.True(t, proto.Equal(before, m), "%s: the import changed the model", name)
		assert.Equal(t, encoded[0], encoded[2], "%s: the same batch twice", name)
		assert.NotEqual(t, encoded[0], encoded[1], "%s: another batch", name)
		g, err := remat.ImportONNX(bytes.NewReader(b), nil, remat.ONNXInput{Batch: 3})
		require.NoError(t, err)
		var buf bytes.Buffer
		require.NoError(t, graph.Encode(&buf, g))
		assert.Equal(t, encoded[0], buf.String(), "%s: as ImportONNX from the file", name)
	}
}
