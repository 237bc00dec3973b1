package dtrlog

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

var update = flag.Bool("update", false, "rewrite golden files")

func compileFile(t *testing.T, name string) (*Trace, error) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	require.NoError(t, err)
	defer f.Close()
	return Compile(f)
}

func TestCompileSmall(t *testing.T) {
	tr, err := compileFile(t, "small.log")
	require.NoError(t, err)
	// ops: const w, const x, conv, view, split, add_ (the constant before
	// START is skipped)
	require.Len(t, tr.Ops, 6)
	assert.True(t, tr.Ops[0].Constant)
	assert.Equal(t, []int64{0}, tr.Ops[3].Sizes, "view is an alias: 0 bytes")
	view := tr.Tensors[tr.Ops[3].Results[0]]
	assert.Equal(t, tr.Ops[2].Results[0], view.Storage)
	assert.Equal(t, int64(2048), view.StorageSize)
	mut := tr.Ops[5]
	assert.True(t, mut.Mutate)
	assert.True(t, mut.Backward)
	assert.Equal(t, []int64{1024}, mut.Sizes)
	// outputs: w2 (still referenced), x, new version of a, and c -> a$.
	names := []string{}
	for _, o := range tr.Outputs {
		names = append(names, tr.Tensors[o].Name)
	}
	assert.Equal(t, []string{"w", "x", "a$"}, names)
	g, err := ToGraph(tr)
	require.NoError(t, err)
	assert.Len(t, g.Ops, 4)
	assert.Equal(t, int64(100), g.Ops[0].TimeNs)
}

func TestCompileErrors(t *testing.T) {
	for name, want := range map[string]string{
		"bad_unknown.log":  "line 1: invalid dtr log: CALL \"relu\" ARGS[0] \"nope\": unknown tensor",
		"bad_nomemory.log": "line 4: invalid dtr log: CALL \"relu\" (line 3): result 0 \"y\" needs a MEMORY line here, got RELEASE \"x\"",
		"bad_negative.log": "line 2: dtr log syntax error: MEMORY of \"x\" is -8, expected >= 0",
		"bad_json.log":     "line 2: dtr log syntax error",
	} {
		_, err := compileFile(t, name)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), want, name)
		var le *LineError
		assert.True(t, errors.As(err, &le), name)
	}
	_, err := Compile(strings.NewReader(`{"INSTRUCTION":"CONSTANT","NAME":"x"}` + "\n"))
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestWriteRoundTrip(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "small.log"))
	require.NoError(t, err)
	ins, err := ReadAll(bytes.NewReader(src))
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, WriteAll(&buf, ins))
	assert.Equal(t, string(src), buf.String(), "writer reproduces the original key order and formatting")
}

func FuzzRead(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.log"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := Compile(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, c := range tr.Cmds {
			if c.Kind == CmdCompute {
				require.Less(t, int(c.ID), len(tr.Ops))
			} else {
				require.Less(t, int(c.ID), len(tr.Tensors))
			}
		}
		_, _ = ToGraph(tr)
	})
}

// TestFromGraphViews: views in traced graphs name their storage's root as
// AliasOf (a view of a view too), and the first kernel of a backward node
// lists the node's saved tensors as extra inputs. FromGraph writes a view of
// a view as an alias of the input it was taken from (not as fresh memory),
// lists only the viewed inputs on a view's CALL (a view reads no data, and
// extra parents of a viewed storage break the reference simulator's
// regions), and keeps every input of an in-place op, which reads them.
func TestFromGraphViews(t *testing.T) {
	b := graph.NewBuilder("views")
	x := b.Input("x", graph.F32, 1024)
	s := b.Input("saved", graph.F32, 1024)
	h := b.Op("relu", "f0", x).OutBytes("h", 4096).TimeNs(10).T()
	v1 := b.Op("transpose", "v1", h).Out("v1", graph.F32, 1024).Alias(h).T()
	v2 := b.Op("reshape", "v2", v1, s).Out("v2", graph.F32, 1024).Alias(h).T() // root as AliasOf, an extra input
	w := b.Op("add_", "w", v2, s).Out("w", graph.F32, 1024).Alias(h).Flags(graph.InPlace).T()
	b.Op("sum", "out", w).OutBytes("o", 4)
	g, err := b.Build()
	require.NoError(t, err)
	ins, err := FromGraph(g, nil)
	require.NoError(t, err)
	calls := map[string]Instr{}
	alias := map[string]int{}
	mem := map[string]int64{}
	for _, in := range ins {
		switch in.Kind {
		case Call:
			calls[in.Results[0]] = in
		case Alias:
			alias[in.Name] = in.Alias
		case Memory:
			mem[in.Name] = in.Memory
		}
	}
	name := func(id graph.TensorID) string { return fmt.Sprintf("t%d", id) }
	assert.Equal(t, []string{name(v1)}, calls[name(v2)].Args, "a view lists only the input it views")
	assert.Equal(t, 0, alias[name(v2)], "a view of a view aliases its input")
	assert.Equal(t, int64(0), mem[name(v2)])
	assert.Equal(t, []string{name(v2), name(s)}, calls[name(w)].Args, "an in-place op keeps the inputs it reads")
	assert.Equal(t, 0, alias[name(w)])
	var buf bytes.Buffer
	require.NoError(t, WriteAll(&buf, ins))
	tr, err := Compile(&buf)
	require.NoError(t, err)
	// memory: h and the output only, as the graph counts it
	var total int64
	for i := range tr.Ops {
		if !tr.Ops[i].Constant {
			total += tr.Ops[i].TotalSize()
		}
	}
	assert.Equal(t, int64(4096+4), total)
}

// TestFromGraphRoundTrip: a small graph written as a log compiles, and
// ToGraph of the trace has the same ops, times and tensor sizes.
func TestFromGraphRoundTrip(t *testing.T) {
	b := graph.NewBuilder("rt")
	x := b.Input("x", graph.F32, 1024)
	h := b.Op("relu", "f0", x).OutBytes("a0", 4096).TimeNs(10).T()
	v := b.Op("reshape", "view", h).Out("v", graph.F32, 1024).T()
	b.SetPhase(graph.Backward)
	b.Op("relu_grad", "b0", v, x).OutBytes("g0", 4096).TimeNs(20)
	g, err := b.Build()
	require.NoError(t, err)
	ins, err := FromGraph(g, nil)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, WriteAll(&buf, ins))
	tr, err := Compile(&buf)
	require.NoError(t, err)
	g2, err := ToGraph(tr)
	require.NoError(t, err)
	require.Len(t, g2.Ops, len(g.Ops))
	for i := range g.Ops {
		assert.Equal(t, g.Ops[i].TimeNs, g2.Ops[i].TimeNs, "op %d", i)
		assert.Equal(t, g.Ops[i].Phase, g2.Ops[i].Phase, "op %d", i)
		assert.Equal(t, len(g.Ops[i].Inputs), len(g2.Ops[i].Inputs), "op %d", i)
	}
	_, err = FromGraph(nil, nil)
	assert.Error(t, err)
}
