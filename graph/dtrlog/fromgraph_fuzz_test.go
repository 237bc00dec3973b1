package dtrlog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/remat-dev/remat/graph"
)

// FuzzFromGraph feeds graphs decoded from arbitrary bytes to FromGraph: a
// valid graph gives a log or an error, never a panic, a log it gives
// writes and compiles, and WriteGraph writes the same log (or fails the
// same way). The seed corpus is the graph package's JSON test
// files, a graph with views and chained in-place ops, and
// testdata/fuzz/FuzzFromGraph.
func FuzzFromGraph(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "*.json"))
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	b := graph.NewBuilder("inplace")
	x := b.Input("x", graph.F32, 256)
	h := b.Op("relu", "h", x).OutBytes("h", 1024).T()
	v := b.Op("narrow", "v", h).Out("v", graph.F32, 128).Alias(h).T()
	w := b.Op("sigmoid_", "w", v).Out("w", graph.F32, 128).Alias(h).Flags(graph.InPlace).T()
	k := b.Op("mul_", "k", h, x).Out("k", graph.F32, 256).Alias(h).Flags(graph.InPlace).T()
	k2 := b.Op("add_", "k2", k, w).Out("k2", graph.F32, 256).Alias(h).Flags(graph.InPlace).T()
	b.SetPhase(graph.Backward)
	b.Op("sum", "out", k2).OutBytes("o", 4)
	g, err := b.Build()
	if err != nil {
		f.Fatal(err)
	}
	var seed bytes.Buffer
	if err := graph.Encode(&seed, g); err != nil {
		f.Fatal(err)
	}
	f.Add(seed.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := graph.Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		var streamed bytes.Buffer
		streamErr := WriteGraph(&streamed, g, nil)
		ins, err := FromGraph(g, nil)
		if err != nil {
			want := strings.Replace(err.Error(), "FromGraph", "WriteGraph", 1)
			if streamErr == nil || streamErr.Error() != want {
				t.Fatalf("WriteGraph: %v; FromGraph: %v", streamErr, err)
			}
			return
		}
		var buf bytes.Buffer
		if err := WriteAll(&buf, ins); err != nil {
			t.Fatalf("WriteAll of FromGraph's log: %v", err)
		}
		if streamErr != nil || !bytes.Equal(buf.Bytes(), streamed.Bytes()) {
			t.Fatalf("WriteGraph (error %v) wrote another log than FromGraph and WriteAll", streamErr)
		}
		if _, err := Compile(&buf); err != nil {
			t.Fatalf("FromGraph's log does not compile: %v\n%s", err, buf.Bytes())
		}
	})
}
