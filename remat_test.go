package remat_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat"
	"github.com/remat-dev/remat/graph/models"
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
