package dtrlog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
)

// requireSameGraph checks that ReadGraph, which builds the graph while it
// compiles, gives what ToGraph gives on the compiled trace, or the same
// error.
func requireSameGraph(t *testing.T, src []byte) {
	t.Helper()
	got, gotErr := ReadGraph(bytes.NewReader(src))
	want, err := func() (*graph.Graph, error) {
		tr, err := Compile(bytes.NewReader(src))
		if err != nil {
			return nil, err
		}
		return ToGraph(tr)
	}()
	if err != nil {
		require.EqualError(t, gotErr, err.Error())
		return
	}
	require.NoError(t, gotErr)
	require.Equal(t, want, got)
}

// TestReadGraphMatchesToGraph: ReadGraph's graph is ToGraph's, on the test
// logs (the bad ones give the same errors), the DTR artifact's logs (when
// ../shared is there) and zoo models written as logs: a CNN with views and
// constants, a GPT, and an LSTM whose in-place ops are MUTATEs.
func TestReadGraphMatchesToGraph(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.log"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, p := range files {
		src, err := os.ReadFile(p)
		require.NoError(t, err)
		t.Run(filepath.Base(p), func(t *testing.T) { requireSameGraph(t, src) })
	}
	for _, name := range []string{"resnet32", "unet"} {
		t.Run(name, func(t *testing.T) { requireSameGraph(t, sharedLog(t, name)) })
	}
	for _, m := range []struct {
		name string
		o    models.Options
	}{
		{"resnet18", models.Options{Batch: 2, Image: 32}},
		{"gpt", models.Options{Batch: 1, Seq: 16, Depth: 2}},
		{"lstm", models.Options{Batch: 2, Seq: 4, Depth: 2}},
	} {
		t.Run(m.name, func(t *testing.T) {
			g, err := models.Build(m.name, m.o)
			require.NoError(t, err)
			var buf bytes.Buffer
			require.NoError(t, WriteGraph(&buf, g, nil))
			requireSameGraph(t, buf.Bytes())
		})
	}
	// A log whose TIMEs add up past MaxTotal after a later line's error
	// gives the later line's error, as Compile does.
	requireSameGraph(t, []byte(`{"INSTRUCTION":"CONSTANT","NAME":"x"}
{"INSTRUCTION":"MEMORY","MEMORY":"1","NAME":"x"}
{"ARGS":["x"],"INSTRUCTION":"CALL","NAME":"f","RESULT":["y"],"TIME":"1152921504606846977"}
{"INSTRUCTION":"MEMORY","MEMORY":"1","NAME":"y"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"y"}
{"INSTRUCTION":"RELEASE","NAME":"y","X":
`))
	requireSameGraph(t, []byte(strings.Repeat(`{"INSTRUCTION":"CONSTANT","NAME":"c"}
{"INSTRUCTION":"MEMORY","MEMORY":"1152921504606846976","NAME":"c"}
`, 1)+`{"INSTRUCTION":"CONSTANT","NAME":"d"}
{"INSTRUCTION":"MEMORY","MEMORY":"1","NAME":"d"}
`))
}
