package graph

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// denseGraph has a view chain (v2 -> v1 -> c), an in-place op, a backward
// op linked to its forward op and an op with the holds attribute.
func denseGraph(t *testing.T) *Graph {
	t.Helper()
	b := NewBuilder("dense")
	x := b.Input("x", F32, 16)
	w := b.Parameter("w", BF16, 16)
	conv := b.Op("conv", "conv", x, w).Out("c", F32, 16)
	v1 := b.Op("view", "v1", conv.T()).Out("v1", F32, 4, 4).Alias(conv.T())
	v2 := b.Op("view", "v2", v1.T()).Out("v2", F32, 16).Alias(v1.T())
	relu := b.Op("relu_", "relu", v2.T()).Out("r", F32, 16).Alias(v2.T()).Flags(InPlace)
	loss := b.Op("sum", "loss", relu.T()).Out("l", F32)
	b.SetLoss(loss.T())
	b.SetPhase(Backward)
	b.Op("conv_backward", "conv_bw", x, relu.T()).Forward(conv.ID()).Attr(AttrHolds, "0").Out("gw", BF16, 16)
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// Every fact of the index is the graph's own.
func TestDenseMatchesGraph(t *testing.T) {
	g := denseGraph(t)
	d := g.Dense()
	require.Equal(t, len(g.Ops), d.NumOps())
	require.Equal(t, len(g.Tensors), d.NumTensors())
	for i := range g.Tensors {
		tt := &g.Tensors[i]
		id := TensorID(i)
		assert.Equal(t, tt.Producer, d.Producer[i])
		assert.Equal(t, g.StorageOf(id), d.Root[i])
		assert.Equal(t, tt.StorageBytes(), d.StorageBytes[i])
		assert.Equal(t, tt.Kind, d.Kind[i])
		assert.Equal(t, tt.DType, d.DType[i])
	}
	var holders []OpID
	for i := range g.Ops {
		o := &g.Ops[i]
		id := OpID(i)
		assert.Equal(t, o.Inputs, d.Inputs(id))
		assert.Equal(t, o.Outputs, d.Outputs(id))
		assert.Equal(t, o.Phase, d.Phase[i])
		assert.Equal(t, o.Flags, d.Flags[i])
		assert.Equal(t, o.Forward, d.Forward[i])
		assert.Equal(t, o.Type, d.Types[d.Type[i]])
		if _, ok := o.Attrs[AttrHolds]; ok {
			holders = append(holders, id)
		}
	}
	assert.Equal(t, holders, d.Holders)
	require.Len(t, holders, 1)
	assert.Equal(t, NoTensor, d.AliasCycle())
	assert.Equal(t, NoTensor, d.EarlyView())
	assert.NoError(t, d.Err())
	assert.Equal(t, []string{"conv", "view", "relu_", "sum", "conv_backward"}, d.Types, "each type once, in order of first use")
	assert.Equal(t, TensorID(2), d.Root[4], "v2's storage is the conv's, two views up")
	assert.Zero(t, d.StorageBytes[4])
	ins := d.Inputs(2)
	require.Len(t, ins, 1)
	_ = append(ins, 99)
	assert.Equal(t, g.Ops[3].Inputs, d.Inputs(3), "an append to one op's inputs leaves the next op's alone")
	assert.Nil(t, d.Inputs(-1))
	assert.Nil(t, d.Outputs(OpID(len(g.Ops))))
	assert.Same(t, d, g.Dense(), "kept between calls")
	read := d.ReadOutsideForward()
	for i := range read {
		// the backward op reads x and, through the view relu_ wrote, the
		// conv's storage
		assert.Equal(t, i == 0 || i == 2, read[i], "tensor %d", i)
	}
}

// Validate drops the index, so that it shows the graph as changed.
func TestDenseRebuiltAfterValidate(t *testing.T) {
	g := denseGraph(t)
	d := g.Dense()
	g.Tensors[0].Bytes = 128
	g.Tensors[0].Shape = Shape{32}
	assert.Same(t, d, g.Dense(), "a changed size is not seen before Validate")
	require.NoError(t, g.Validate())
	d2 := g.Dense()
	assert.NotSame(t, d, d2)
	assert.Equal(t, int64(128), d2.StorageBytes[0])
	// more tensors: rebuilt without Validate
	g.Tensors = append(g.Tensors, Tensor{ID: TensorID(len(g.Tensors)), Name: "extra", DType: F32, Shape: Shape{1}, Bytes: 4, Kind: Input, Producer: NoOp, AliasOf: NoTensor})
	assert.Equal(t, len(g.Tensors), g.Dense().NumTensors())
}

// Callers on several goroutines get an index each, without a data race
// (go test -race).
func TestDenseConcurrent(t *testing.T) {
	g := denseGraph(t)
	var wg sync.WaitGroup
	out := make([]*Dense, 8)
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = g.Dense()
		}()
	}
	wg.Wait()
	for _, d := range out {
		assert.Equal(t, out[0].Root, d.Root)
	}
}

// A graph that Validate rejects gives an index, not a panic: IDs out of
// range are kept, an alias out of range ends the walk, and a cycle is
// reported by AliasCycle.
func TestDenseInvalidGraph(t *testing.T) {
	g := &Graph{
		Tensors: []Tensor{
			{ID: 0, Producer: NoOp, AliasOf: NoTensor, Bytes: 8},
			{ID: 1, Producer: 0, AliasOf: 7, Bytes: 8}, // alias out of range
			{ID: 2, Producer: 0, AliasOf: 3},
			{ID: 3, Producer: 0, AliasOf: 2}, // 2 <-> 3
		},
		Ops: []Op{{ID: 0, Inputs: []TensorID{0, 9}, Outputs: []TensorID{1, 2, 3}, Forward: NoOp}},
	}
	var d *Dense
	require.NotPanics(t, func() { d = g.Dense() })
	assert.ErrorIs(t, d.Err(), ErrInvalid)
	assert.EqualError(t, d.Err(), "tensors[1]: alias of tensor 7, not defined: invalid graph")
	assert.Equal(t, []TensorID{0, 9}, d.Inputs(0))
	assert.Equal(t, TensorID(1), d.Root[1])
	assert.Equal(t, TensorID(2), d.AliasCycle())
	assert.Equal(t, TensorID(1), g.StorageOf(1), "StorageOf stops at an alias out of range")
	g.Tensors = append(g.Tensors, Tensor{ID: 4, AliasOf: 4, Producer: NoOp})
	assert.Equal(t, TensorID(2), g.Dense().AliasCycle(), "the first cycle")
	g.Tensors = g.Tensors[:2]
	assert.Equal(t, NoTensor, g.Dense().AliasCycle())

	// the checks in order, each alone
	for _, c := range []struct {
		g   *Graph
		err string
	}{
		{&Graph{Tensors: []Tensor{{Producer: 3, AliasOf: NoTensor}}}, "tensors[0]: producer op 3, not defined"},
		{&Graph{Tensors: []Tensor{{Producer: NoOp, AliasOf: NoTensor, Bytes: -1}}}, "tensors[0]: bytes -1, expected >= 0"},
		{&Graph{Ops: []Op{{Outputs: []TensorID{0}, Forward: NoOp}}}, "ops[0].outputs[0]: tensor 0, not defined"},
		{&Graph{Ops: []Op{{Forward: 5}}}, "ops[0].forward: op 5, not defined"},
	} {
		assert.EqualError(t, c.g.Dense().Err(), c.err+": invalid graph")
	}
	// a view produced before its base, and one resident from the start
	// of a produced base
	early := &Graph{
		Tensors: []Tensor{
			{ID: 0, Producer: NoOp, AliasOf: NoTensor},
			{ID: 1, Producer: 1, AliasOf: NoTensor},
			{ID: 2, Producer: 0, AliasOf: 1},
		},
		Ops: []Op{{ID: 0, Inputs: []TensorID{0}, Outputs: []TensorID{2}, Forward: NoOp}, {ID: 1, Inputs: []TensorID{0}, Outputs: []TensorID{1}, Forward: NoOp}},
	}
	assert.NoError(t, early.Dense().Err())
	assert.Equal(t, TensorID(2), early.Dense().EarlyView())
	early.Tensors[2].Producer = NoOp
	early.Ops[0].Outputs = nil
	assert.Equal(t, TensorID(2), (&Graph{Tensors: early.Tensors, Ops: early.Ops}).Dense().EarlyView())
	early.Tensors[1].Producer = NoOp
	assert.Equal(t, NoTensor, (&Graph{Tensors: early.Tensors, Ops: early.Ops}).Dense().EarlyView(), "both resident from the start")

	var nd *Dense
	assert.NoError(t, nd.Err())
	assert.Equal(t, NoTensor, nd.EarlyView())
	assert.Zero(t, nd.NumOps())
	assert.Zero(t, nd.NumTensors())
	assert.Nil(t, nd.Inputs(0))
	assert.Nil(t, nd.Outputs(0))
	assert.Equal(t, NoTensor, nd.AliasCycle())
	assert.Zero(t, (*Graph)(nil).Dense().NumOps())
}
