package graph

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// validBase returns a small valid graph:
//
//	t0 x (input), t1 w (parameter)
//	op0 fc   (x, w) -> t2 h
//	op1 relu (h)    -> t3 r
//	op2 view (r)    -> t4 v, alias of r
//	op3 relu_grad (r) -> t5 dr (backward, forward op1)
func validBase(t *testing.T) *Graph {
	t.Helper()
	b := NewBuilder("base")
	x := b.Input("x", F32, 2, 4)
	w := b.Parameter("w", F32, 4, 4)
	h := b.Op("linear", "fc", x, w).Out("h", F32, 2, 4).T()
	relu := b.Op("relu", "act", h).Out("r", F32, 2, 4)
	b.Op("reshape", "view", relu.T()).Out("v", F32, 8).Alias(relu.T())
	b.SetPhase(Backward)
	b.Op("relu_grad", "act.grad", relu.T()).Out("dr", F32, 2, 4).Forward(relu.ID())
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func TestValidateErrors(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(g *Graph)
		path   string
		op     OpID
		tensor TensorID
		msg    []string // substrings of the message (the op or tensor label and the problem)
	}{
		{"tensor id mismatch", func(g *Graph) { g.Tensors[1].ID = 7 }, "tensors[1].id", NoOp, 1,
			[]string{`tensor #1 "w"`, "ID is 7, expected its index 1"}},
		{"op id mismatch", func(g *Graph) { g.Ops[2].ID = 0 }, "ops[2].id", 2, NoTensor,
			[]string{`op #2 "view" (reshape)`, "ID is 0, expected its index 2"}},
		{"undefined input", func(g *Graph) { g.Ops[0].Inputs[1] = 99 }, "ops[0].inputs[1]", 0, NoTensor,
			[]string{`op #0 "fc" (linear)`, "input tensor 99 is not defined (graph has 6 tensors)"}},
		{"negative input", func(g *Graph) { g.Ops[1].Inputs[0] = -4 }, "ops[1].inputs[0]", 1, NoTensor,
			[]string{`op #1 "act" (relu)`, "input tensor -4 is not defined"}},
		{"undefined output", func(g *Graph) { g.Ops[1].Outputs = append(g.Ops[1].Outputs, 6) }, "ops[1].outputs[1]", 1, NoTensor,
			[]string{`op #1 "act"`, "output tensor 6 is not defined"}},
		{"undefined producer", func(g *Graph) { g.Tensors[2].Producer = 40 }, "tensors[2].producer", NoOp, 2,
			[]string{`tensor #2 "h"`, "producer op 40 is not defined (graph has 4 ops)"}},
		{"undefined alias", func(g *Graph) { g.Tensors[4].AliasOf = 17 }, "tensors[4].alias_of", NoOp, 4,
			[]string{`tensor #4 "v"`, "alias of tensor 17, which is not defined"}},
		{"alias of itself", func(g *Graph) { g.Tensors[4].AliasOf = 4 }, "tensors[4].alias_of", NoOp, 4,
			[]string{`tensor #4 "v"`, "alias of itself"}},
		{"alias cycle", func(g *Graph) { g.Tensors[3].AliasOf = 4 }, "tensors[3].alias_of", NoOp, 3,
			[]string{`tensor #3 "r"`, "alias chain forms a cycle"}},
		{"produced twice", func(g *Graph) {
			g.Ops[1].Outputs = append(g.Ops[1].Outputs, 2)
		}, "ops[1].outputs[1]", 1, NoTensor,
			[]string{`op #1 "act"`, `output #2 "h" is already produced by op #0 "fc" (linear)`}},
		{"view of a later tensor", func(g *Graph) { g.Tensors[4].AliasOf = 5 }, "tensors[4].alias_of", NoOp, 4,
			[]string{`tensor #4 "v"`, `view produced by op #2 "view" (reshape) of #5 "dr", which op #3 "act.grad" (relu_grad) produces later`}},
		{"view without producer of a produced tensor", func(g *Graph) {
			g.Ops[2].Outputs = nil
			g.Tensors[4].Producer = NoOp
		}, "tensors[4].alias_of", NoOp, 4,
			[]string{`tensor #4 "v"`, `view without a producer op (resident from the start) of #3 "r", which op #1 "act" (relu) produces later`}},
		{"producer mismatch", func(g *Graph) { g.Tensors[3].Producer = 2 }, "ops[1].outputs[0]", 1, NoTensor,
			[]string{`op #1 "act"`, `output #3 "r" names op 2 as its producer`}},
		{"producer does not list it", func(g *Graph) { g.Ops[0].Outputs = nil }, "tensors[2].producer", NoOp, 2,
			[]string{`tensor #2 "h"`, `names op #0 "fc" (linear) as producer, but that op does not list it as an output`}},
		{"ops out of order", func(g *Graph) { g.Ops[0].Inputs[0] = 3 }, "ops[0].inputs[0]", 0, NoTensor,
			[]string{`op #0 "fc"`, `reads #3 "r", produced by op #1 "act" (relu) which runs later`}},
		{"self read", func(g *Graph) { g.Ops[1].Inputs = append(g.Ops[1].Inputs, 3) }, "ops[1].inputs[1]", 1, NoTensor,
			[]string{`op #1 "act"`, `reads its own output #3 "r" (cycle)`}},
		{"negative bytes", func(g *Graph) { g.Tensors[0].Bytes = -1 }, "tensors[0].bytes", NoOp, 0,
			[]string{`tensor #0 "x"`, "bytes is -1, expected 0..1152921504606846976"}},
		{"negative dimension", func(g *Graph) { g.Tensors[0].Shape = Shape{2, -4} }, "tensors[0].shape", NoOp, 0,
			[]string{`tensor #0 "x"`, "dimension 1 is -4"}},
		{"overflowing element count", func(g *Graph) { g.Tensors[0].Shape = Shape{1 << 40, 1 << 40} }, "tensors[0].shape", NoOp, 0,
			[]string{`tensor #0 "x"`, "element count: size overflows int64"}},
		{"overflowing byte size", func(g *Graph) { g.Tensors[0].Shape = Shape{1 << 62} }, "tensors[0].shape", NoOp, 0,
			[]string{`tensor #0 "x"`, "bytes: size overflows int64"}},
		{"overflow without dtype", func(g *Graph) {
			g.Tensors[0].DType = 0
			g.Tensors[0].Shape = Shape{1 << 32, 1 << 32}
		}, "tensors[0].shape", NoOp, 0,
			[]string{"size overflows int64"}},
		{"activation without producer", func(g *Graph) {
			g.Ops[0].Outputs = nil
			g.Tensors[2].Producer = NoOp
		}, "tensors[2]", NoOp, 2,
			[]string{`tensor #2 "h"`, "activation tensor has no producer op"}},
		{"gradient without producer", func(g *Graph) {
			g.Ops[3].Outputs = nil
			g.Tensors[5].Producer = NoOp
		}, "tensors[5]", NoOp, 5,
			[]string{`tensor #5 "dr"`, "gradient tensor has no producer op"}},
		{"forward op missing", func(g *Graph) { g.Ops[3].Forward = 9 }, "ops[3].forward", 3, NoTensor,
			[]string{`op #3 "act.grad" (relu_grad)`, "forward op 9 does not exist (graph has 4 ops)"}},
		{"forward op negative", func(g *Graph) { g.Ops[3].Forward = -7 }, "ops[3].forward", 3, NoTensor,
			[]string{"forward op -7 does not exist"}},
		{"forward op not forward", func(g *Graph) { g.Ops[3].Forward = 3 }, "ops[3].forward", 3, NoTensor,
			[]string{`forward op #3 "act.grad" (relu_grad) is in phase backward, expected forward`}},
		{"bad phase", func(g *Graph) { g.Ops[2].Phase = 0 }, "ops[2].phase", 2, NoTensor,
			[]string{`op #2 "view"`, "phase 0 is not valid"}},
		{"bad phase high", func(g *Graph) { g.Ops[2].Phase = 9 }, "ops[2].phase", 2, NoTensor,
			[]string{"phase 9 is not valid"}},
		{"bad kind", func(g *Graph) { g.Tensors[1].Kind = 0 }, "tensors[1].kind", NoOp, 1,
			[]string{`tensor #1 "w"`, "kind 0 is not valid"}},
		{"bad dtype", func(g *Graph) { g.Tensors[1].DType = 77 }, "tensors[1].dtype", NoOp, 1,
			[]string{`tensor #1 "w"`, "dtype 77 is not valid"}},
		{"negative flops", func(g *Graph) { g.Ops[0].FLOPs = -5 }, "ops[0].flops", 0, NoTensor,
			[]string{`op #0 "fc"`, "negative cost (flops -5"}},
		{"negative bytes accessed", func(g *Graph) { g.Ops[0].BytesAccessed = -5 }, "ops[0].bytes_accessed", 0, NoTensor,
			[]string{"bytes accessed -5"}},
		{"negative time", func(g *Graph) { g.Ops[0].TimeNs = -5 }, "ops[0].time_ns", 0, NoTensor,
			[]string{"time -5 ns"}},
		{"negative workspace", func(g *Graph) { g.Ops[0].Workspace = -5 }, "ops[0].workspace", 0, NoTensor,
			[]string{"workspace -5"}},
		{"loss out of range", func(g *Graph) { g.Loss = 6 }, "loss", NoOp, NoTensor,
			[]string{"loss tensor 6 is not defined (graph has 6 tensors)"}},
		{"loss negative", func(g *Graph) { g.Loss = -3 }, "loss", NoOp, NoTensor,
			[]string{"loss tensor -3 is not defined"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := validBase(t)
			c.mutate(g)
			err := g.Validate()
			require.Error(t, err)
			require.ErrorIs(t, err, ErrInvalid)
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			assert.Equal(t, c.path, ve.Path)
			assert.Equal(t, c.op, ve.Op)
			assert.Equal(t, c.tensor, ve.Tensor)
			assert.Contains(t, err.Error(), c.path+": ")
			for _, m := range c.msg {
				assert.Contains(t, err.Error(), m)
			}
		})
	}
}

func TestValidateOK(t *testing.T) {
	g := validBase(t)
	require.NoError(t, g.Validate())
	assert.Equal(t, []OpID{1}, g.Consumers(2))
	assert.Equal(t, []OpID{2, 3}, g.Consumers(3))
	assert.Empty(t, g.Consumers(5))
	assert.Equal(t, TensorID(3), g.StorageOf(4))
	assert.Equal(t, int64(0), g.Tensors[4].StorageBytes(), "a view adds no bytes")
	// Bytes alone (no dtype, no shape) is a valid tensor.
	g.Tensors[2].DType, g.Tensors[2].Shape, g.Tensors[2].Bytes = 0, nil, 123
	require.NoError(t, g.Validate())
	// So is an empty graph.
	require.NoError(t, (&Graph{Loss: NoTensor}).Validate())
}

func TestValidationErrorZeroValueDoesNotPanic(t *testing.T) {
	// A ValidationError built outside Validate has no graph to name ops
	// and tensors from; Error must still work.
	e := &ValidationError{Op: 3, Tensor: NoTensor, Path: "ops[3]", Msg: "broken"}
	assert.Equal(t, "ops[3]: op #3: broken", e.Error())
	e = &ValidationError{}
	assert.NotPanics(t, func() { _ = e.Error() })
	assert.True(t, errors.Is(e, ErrInvalid))
}
