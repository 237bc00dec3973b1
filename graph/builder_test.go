package graph

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBuilderCollectsErrors(t *testing.T) {
	b := NewBuilder("broken")
	x := b.Input("x", F32, 2, -3)                             // negative dimension
	b.Parameter("huge", F32, 1<<40, 1<<40)                    // overflow
	y := b.Op("relu", "r", x, 42).Out("y", F32, 2, 3).T()     // undefined input
	b.Op("noop", "n").Output(1)                               // no outputs
	b.Op("view", "v", y).Alias(y)                             // alias without an output
	b.Op("view", "w", y).Out("w", F32, 6).Alias(TensorID(99)) // alias of an undefined tensor
	b.Op("trace", "t").OutBytes("blob", -8)                   // negative bytes
	assert.Nil(t, b.Shape(1234))
	assert.Equal(t, DType(0), b.DType(-1))
	b.Errorf("custom %d", 7)

	require.NotPanics(t, func() {
		g, err := b.Build()
		require.Error(t, err)
		assert.Nil(t, g)
		assert.Contains(t, err.Error(), "(and 9 more errors)", "one line: the first mistake and a count")
		all := err.Error()
		if m, ok := errors.Unwrap(err).(interface{ Unwrap() []error }); ok {
			for _, e := range m.Unwrap() {
				all += "\n" + e.Error()
			}
		}
		for _, want := range []string{
			`graph "broken"`,
			`tensor "x": shape [2 -3]: dimension 1 is -3`,
			`tensor "huge": shape [1099511627776 1099511627776]: element count: size overflows int64`,
			`op "r" (relu): input tensor 42 is not defined`,
			`op "n" has 0 outputs, asked for output 1`,
			`op "v": Alias(2) needs an output and a defined tensor`,
			`op "w": Alias(99) needs an output and a defined tensor`,
			`op "t": output "blob" has -8 bytes, expected >= 0`,
			`tensor 1234 is not defined`,
			`tensor -1 is not defined`,
			`custom 7`,
		} {
			assert.Contains(t, all, want)
		}
	})
}

func TestBuilderOutputIndex(t *testing.T) {
	b := NewBuilder("g")
	x := b.Input("x", F32, 4)
	op := b.Op("split", "s", x).Out("a", F32, 2).Out("b", F32, 2)
	assert.Equal(t, TensorID(1), op.Output(0))
	assert.Equal(t, TensorID(2), op.Output(1))
	assert.Equal(t, TensorID(1), op.T())
	require.NoError(t, b.Err())
	assert.Equal(t, NoTensor, op.Output(2))
	assert.Equal(t, NoTensor, op.Output(-1))
	err := b.Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `op "s" has 2 outputs, asked for output 2`)
	assert.Contains(t, err.Error(), "(and 1 more errors)", "the first mistake is named, the rest counted")
	all, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok)
	require.Len(t, all.Unwrap(), 2)
	assert.Contains(t, all.Unwrap()[1].Error(), `op "s" has 2 outputs, asked for output -1`)
	_, err = b.Build()
	require.Error(t, err)
}

func TestBuilderAlias(t *testing.T) {
	b := NewBuilder("g")
	x := b.Input("x", F16, 4, 4)
	v := b.Op("transpose", "t", x).Out("xt", F16, 4, 4).Alias(x).T()
	vv := b.Op("reshape", "r", v).Out("flat", F16, 16).Alias(v).T()
	g, err := b.Build()
	require.NoError(t, err)
	assert.Equal(t, x, g.Tensors[v].AliasOf)
	assert.Equal(t, x, g.StorageOf(vv), "storage follows the alias chain")
	assert.Equal(t, int64(32), g.Tensors[vv].Bytes, "a view keeps its logical size")
	assert.Equal(t, int64(0), g.Tensors[vv].StorageBytes(), "but adds no storage")
	assert.Equal(t, int64(32), g.Tensors[x].StorageBytes())
}

func TestBuilderPhasesAndKinds(t *testing.T) {
	b := NewBuilder("g")
	assert.Equal(t, Forward, b.Phase())
	x := b.Input("x", F32, 2)
	w := b.Parameter("w", F32, 2)
	c := b.Constant("c", F32, 2)
	y := b.Op("mul", "m", x, w, c).Out("y", F32, 2)
	b.SetLoss(y.T())
	b.SetAttr("model", "toy")
	b.SetPhase(Backward)
	dw := b.Op("mul_grad", "m.grad", x).Out("dw", F32, 2).Forward(y.ID())
	b.SetPhase(Update)
	nw := b.Op("sgd", "upd", w, dw.T()).Out("w'", F32, 2)
	yOut, nwOut := y.T(), nw.T()
	g, err := b.Build()
	require.NoError(t, err)
	kinds := []TensorKind{Input, Parameter, Constant, Activation, Gradient, Parameter}
	for i, k := range kinds {
		assert.Equal(t, k, g.Tensors[i].Kind, "tensor %d", i)
	}
	assert.Equal(t, []Phase{Forward, Backward, Update}, []Phase{g.Ops[0].Phase, g.Ops[1].Phase, g.Ops[2].Phase})
	assert.Equal(t, yOut, g.Loss)
	assert.Equal(t, map[string]string{"model": "toy"}, g.Attrs)
	assert.Equal(t, y.ID(), g.Ops[dw.ID()].Forward)
	assert.Equal(t, nw.ID(), g.Tensors[nwOut].Producer)
	// Using an OpBuilder after Build is a mistake, reported, not a panic.
	assert.NotPanics(t, func() { assert.Equal(t, NoTensor, nw.Out("late", F32, 1).Output(0)) })
	assert.Equal(t, []OpID{0, 2}, g.Consumers(w))
	assert.Equal(t, 1, g.OpsInPhase(Backward))
	assert.Equal(t, int64(2), g.ParamCount())
}

// TestBuilderSlicesIndependent checks that the per-op slices the builder
// carves from shared chunks do not overlap: appending to one op's inputs or
// a shape must not change another op.
func TestBuilderSlicesIndependent(t *testing.T) {
	b := NewBuilder("g")
	x := b.Input("x", F32, 3)
	a := b.Op("relu", "a", x).Out("a", F32, 3).T()
	c := b.Op("relu", "c", a).Out("c", F32, 3).T()
	g, err := b.Build()
	require.NoError(t, err)
	in0 := append(g.Ops[0].Inputs, 99)
	out0 := append(g.Ops[0].Outputs, 98)
	sh := append(g.Tensors[x].Shape, 97)
	assert.Equal(t, []TensorID{x, 99}, in0)
	assert.Equal(t, []TensorID{a, 98}, out0)
	assert.Equal(t, Shape{3, 97}, sh)
	assert.Equal(t, []TensorID{a}, g.Ops[1].Inputs)
	assert.Equal(t, []TensorID{c}, g.Ops[1].Outputs)
	assert.Equal(t, Shape{3}, g.Tensors[a].Shape)
	require.NoError(t, g.Validate())
}

func TestFromGraph(t *testing.T) {
	g := exampleGraph(t)
	before := encode(t, g)
	b := FromGraph(g)
	b.SetAttr("batch_size", "64")
	b.SetPhase(Update)
	n := b.Op("zero_grad", "zero", TensorID(len(g.Tensors)-1)).Out("z", F32, 1).T()
	g2, err := b.Build()
	require.NoError(t, err)
	assert.Equal(t, len(g.Ops)+1, len(g2.Ops))
	assert.Equal(t, n, TensorID(len(g.Tensors)))
	assert.Equal(t, "64", g2.Attrs["batch_size"])
	assert.Equal(t, "2", g.Attrs["batch_size"], "the source graph's attrs are copied, not shared")
	assert.Equal(t, string(before), string(encode(t, g)), "FromGraph must leave the source graph unchanged")
	assert.Equal(t, g.Loss, g2.Loss)
	assert.Equal(t, g.Name, g2.Name)
}

func TestBuilderReserve(t *testing.T) {
	build := func(reserve bool) *Graph {
		b := NewBuilder("chain")
		if reserve {
			b.Reserve(10, 11)
			b.Reserve(-1, -1)
		}
		x := b.Input("x", F32, 8)
		for i := 0; i < 10; i++ {
			x = b.Op("relu", "r", x).Out("y", F32, 8).T()
		}
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	g := build(true)
	assert.Equal(t, build(false), g)
	assert.Equal(t, 10, cap(g.Ops), "Reserve sized the op array exactly")
}

// TestGrownCopy: the copy has s's elements, room for extra more, and its
// own array (appending to it or writing it leaves s alone).
func TestGrownCopy(t *testing.T) {
	for _, n := range []int{0, 1, 5, 300, 5000} {
		for _, extra := range []int{-1, 0, 1, 7, 400, 20000} {
			s := make([]Op, n, n+3)
			for i := range s {
				s[i].ID = OpID(i)
			}
			c := grownCopy(s, extra)
			require.NotNil(t, c)
			require.Len(t, c, n)
			require.GreaterOrEqual(t, cap(c), n+max(extra, 0))
			for i := range c {
				require.Equal(t, OpID(i), c[i].ID)
			}
			c = append(c, Op{ID: -5})
			if n > 0 {
				c[0].ID = -7
				require.Equal(t, OpID(0), s[0].ID, "n %d extra %d: the copy shares s's array", n, extra)
			}
			require.Equal(t, OpID(0), s[:n+1][n].ID, "n %d extra %d: appending to the copy wrote s's spare room", n, extra)
		}
	}
}
