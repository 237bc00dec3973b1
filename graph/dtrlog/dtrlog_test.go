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
		// ReadGraph, which builds the graph as it reads, agrees with
		// ToGraph on the compiled trace, errors included
		requireSameGraph(t, b)
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
	})
}

// TestFromGraphViews: views in traced graphs name their storage's root as
// AliasOf (a view of a view too), and the first kernel of a backward node
// lists the node's saved tensors as extra inputs. FromGraph writes a view of
// a view as an alias of the input it was taken from (not as fresh memory),
// lists only the viewed inputs on a view's CALL (a view reads no data, and
// extra parents of a viewed storage break the reference simulator's
// regions), writes an in-place op on a whole storage as the DTR prototype
// logs it (a MUTATE of the input it writes, with every input it reads, and
// a COPY naming its output) and keeps an in-place write through a view a
// CALL that allocates nothing.
func TestFromGraphViews(t *testing.T) {
	b := graph.NewBuilder("views")
	x := b.Input("x", graph.F32, 1024)
	s := b.Input("saved", graph.F32, 1024)
	h := b.Op("relu", "f0", x).OutBytes("h", 4096).TimeNs(10).T()
	v1 := b.Op("transpose", "v1", h).Out("v1", graph.F32, 1024).Alias(h).T()
	v2 := b.Op("reshape", "v2", v1, s).Out("v2", graph.F32, 1024).Alias(h).T() // root as AliasOf, an extra input
	w := b.Op("add_", "w", v2, s).Out("w", graph.F32, 1024).Alias(h).Flags(graph.InPlace).T()
	k := b.Op("exp", "k", x).OutBytes("k", 4096).T()
	k2 := b.Op("mul_", "k2", k, s).Out("k2", graph.F32, 1024).Alias(k).Flags(graph.InPlace).TimeNs(7).T()
	k3 := b.Op("add_", "k3", k2, s).Out("k3", graph.F32, 1024).Alias(k).Flags(graph.InPlace).TimeNs(8).T() // writes k2, all of k
	b.Op("add", "out", w, k3).OutBytes("o", 4096)
	g, err := b.Build()
	require.NoError(t, err)
	ins, err := FromGraph(g, nil)
	require.NoError(t, err)
	name := func(id graph.TensorID) string { return fmt.Sprintf("t%d", id) }
	calls := map[string]Instr{}
	alias := map[string]int{}
	mem := map[string]int64{}
	var mut []Instr
	copies := map[string]string{}
	for _, in := range ins {
		switch in.Kind {
		case Call:
			calls[in.Results[0]] = in
		case Alias:
			alias[in.Name] = in.Alias
		case Memory:
			mem[in.Name] = in.Memory
		case Mutate:
			mut = append(mut, in)
		case Copy:
			copies[in.Dst] = in.Src
		}
	}
	assert.Equal(t, []string{name(v1)}, calls[name(v2)].Args, "a view lists only the input it views")
	assert.Equal(t, 0, alias[name(v2)], "a view of a view aliases its input")
	assert.Equal(t, int64(0), mem[name(v2)])
	assert.Equal(t, []string{name(v2), name(s)}, calls[name(w)].Args, "a write through a view is a CALL with the inputs it reads")
	assert.Equal(t, 0, alias[name(w)])
	assert.Equal(t, int64(0), mem[name(w)])
	require.Len(t, mut, 2, "the in-place writes of a whole storage are MUTATEs")
	assert.Equal(t, "mul_", mut[0].Name)
	assert.Equal(t, []string{name(k), name(s)}, mut[0].Args)
	assert.Equal(t, []int{0}, mut[0].Mutate)
	assert.Equal(t, int64(7), mut[0].Time)
	assert.Equal(t, name(k), copies[name(k2)], "the output names the new version")
	assert.NotContains(t, calls, name(k2))
	// a second in-place op on the first one's output writes the whole
	// storage too (c += a; c += b): as a CALL viewing it, the inputs it
	// reads would become parents of an existing storage
	assert.Equal(t, "add_", mut[1].Name)
	assert.Equal(t, []string{name(k2), name(s)}, mut[1].Args)
	assert.Equal(t, []int{0}, mut[1].Mutate)
	assert.Equal(t, name(k2), copies[name(k3)])
	assert.NotContains(t, calls, name(k3))
	var buf bytes.Buffer
	require.NoError(t, WriteAll(&buf, ins))
	tr, err := Compile(&buf)
	require.NoError(t, err)
	// h, k, the new versions of k the MUTATEs write and the output: views
	// and the write through a view add nothing
	var total int64
	for i := range tr.Ops {
		if !tr.Ops[i].Constant {
			total += tr.Ops[i].TotalSize()
		}
	}
	assert.Equal(t, int64(5*4096), total)
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
