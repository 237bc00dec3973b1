package graph_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// tinyMLP is x [4, 8] -> linear(16) -> relu -> linear(3) -> cross entropy.
func tinyMLP(t testing.TB) (*graph.Graph, graph.TensorID) {
	b := graph.NewBuilder("mlp")
	x := b.Input("x", graph.F32, 4, 8)
	h := b.ReLU("relu", b.Linear("fc1", x, 16, true))
	logits := b.Linear("fc2", h, 3, true)
	loss := b.CrossEntropy("loss", logits, b.Input("y", graph.I64, 4))
	b.SetLoss(loss)
	g, err := b.Build()
	require.NoError(t, err)
	return g, loss
}

func names(g *graph.Graph, ids []graph.TensorID) []string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = g.Tensors[id].Name
	}
	return s
}

func opByName(t *testing.T, g *graph.Graph, name string) *graph.Op {
	t.Helper()
	for i := range g.Ops {
		if g.Ops[i].Name == name {
			return &g.Ops[i]
		}
	}
	t.Fatalf("no op %q", name)
	return nil
}

func TestDifferentiateMLP(t *testing.T) {
	fwd, loss := tinyMLP(t)
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{})
	require.NoError(t, err)
	require.NoError(t, g.Validate())

	// Forward part unchanged, same IDs.
	require.GreaterOrEqual(t, len(g.Ops), len(fwd.Ops))
	for i := range fwd.Ops {
		assert.Equal(t, fwd.Ops[i].Name, g.Ops[i].Name)
		assert.Equal(t, fwd.Ops[i].Outputs, g.Ops[i].Outputs)
	}
	for i := range fwd.Tensors {
		assert.Equal(t, fwd.Tensors[i], g.Tensors[i])
	}
	var bwd []string
	for _, op := range g.Ops[len(fwd.Ops):] {
		assert.Equal(t, graph.Backward, op.Phase, op.Name)
		bwd = append(bwd, op.Type)
	}
	assert.Equal(t, []string{"ones_like", "cross_entropy_backward", "linear_backward", "relu_backward", "linear_backward"}, bwd)

	// Saved tensors + output gradients, exactly.
	ce := opByName(t, g, "loss.backward")
	assert.Equal(t, []string{"y", "loss.log_probs", "loss.grad"}, names(g, ce.Inputs))
	assert.Equal(t, []string{"fc2.grad"}, names(g, ce.Outputs))
	assert.Equal(t, fwd.Ops[3].ID, ce.Forward)
	fc2 := opByName(t, g, "fc2.backward")
	assert.Equal(t, []string{"relu", "fc2.weight", "fc2.grad"}, names(g, fc2.Inputs))
	assert.Equal(t, []string{"relu.grad", "fc2.weight.grad", "fc2.bias.grad"}, names(g, fc2.Outputs))
	assert.Equal(t, 2*fwd.Ops[2].FLOPs, fc2.FLOPs)
	relu := opByName(t, g, "relu.backward")
	assert.Equal(t, []string{"relu", "relu.grad"}, names(g, relu.Inputs), "relu saves its output")
	// The first layer's input needs no gradient: only x is saved (for dW),
	// not the weight, and only parameter gradients are produced.
	fc1 := opByName(t, g, "fc1.backward")
	assert.Equal(t, []string{"x", "fc1.grad"}, names(g, fc1.Inputs))
	assert.Equal(t, []string{"fc1.weight.grad", "fc1.bias.grad"}, names(g, fc1.Outputs))
	assert.Equal(t, fwd.Ops[0].FLOPs, fc1.FLOPs)
	for _, o := range fc1.Outputs {
		assert.Equal(t, graph.ParamGradient, g.Tensors[o].Kind)
	}
	var by int64
	for _, id := range append(append([]graph.TensorID{}, fc1.Inputs...), fc1.Outputs...) {
		by += g.Tensors[id].Bytes
	}
	assert.Equal(t, by, fc1.BytesAccessed)
	for _, tt := range g.Tensors {
		if tt.Name == "x.grad" || tt.Name == "y.grad" {
			t.Errorf("input %s got a gradient", tt.Name)
		}
	}
}

func TestDifferentiateAccumulatesAndViews(t *testing.T) {
	// A residual: h is read by the linear and by the add, so it receives two
	// partial gradients; the add passes its gradient through as a view.
	b := graph.NewBuilder("res")
	x := b.Input("x", graph.F32, 2, 4)
	h := b.Linear("fc0", x, 4, false)
	y := b.Add("add", h, b.Linear("fc1", h, 4, false))
	y = b.Reshape("view", y, 8)
	loss := b.CrossEntropy("loss", b.Reshape("v2", y, 2, 4), b.Input("labels", graph.I64, 2))
	fwd, err := b.Build()
	require.NoError(t, err)
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Optimizer: graph.OptNone})
	require.NoError(t, err)
	addB := opByName(t, g, "add.backward")
	require.Len(t, addB.Outputs, 2)
	for _, o := range addB.Outputs {
		assert.Equal(t, addB.Inputs[0], g.Tensors[o].AliasOf, "add gradient is a view of its output gradient")
	}
	assert.Zero(t, addB.FLOPs)
	viewB := opByName(t, g, "view.backward")
	assert.Equal(t, viewB.Inputs[0], g.Tensors[viewB.Outputs[0]].AliasOf)
	assert.Zero(t, viewB.BytesAccessed)
	acc := 0
	for _, op := range g.Ops {
		if op.Type == graph.OpGradAccumulate {
			acc++
			assert.Equal(t, "fc0.grad", g.Tensors[op.Outputs[0]].Name)
			assert.Equal(t, []string{"fc0.grad.0", "fc0.grad.1"}, names(g, op.Inputs))
			// The summed gradient feeds fc0's backward.
			fc0 := opByName(t, g, "fc0.backward")
			assert.Contains(t, fc0.Inputs, op.Outputs[0])
		}
	}
	assert.Equal(t, 1, acc)
	assert.Zero(t, g.OpsInPhase(graph.Update))
}

func TestDifferentiateOptimizers(t *testing.T) {
	fwd, loss := tinyMLP(t)
	params := 4
	for _, tc := range []struct {
		opt    graph.Optimizer
		states int
	}{{graph.OptNone, 0}, {graph.OptSGD, 0}, {graph.OptMomentum, 1}, {graph.OptAdam, 2}} {
		for _, inPlace := range []bool{false, true} {
			g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Optimizer: tc.opt, InPlaceUpdate: inPlace})
			require.NoError(t, err)
			if tc.opt == graph.OptNone {
				assert.Zero(t, g.OpsInPhase(graph.Update))
				continue
			}
			assert.Equal(t, params, g.OpsInPhase(graph.Update), tc.opt)
			nstate := 0
			for _, tt := range g.Tensors {
				if tt.Kind == graph.OptimizerState && tt.Producer == graph.NoOp {
					nstate++
				}
			}
			assert.Equal(t, params*tc.states, nstate, tc.opt)
			for _, op := range g.Ops {
				if op.Phase != graph.Update {
					continue
				}
				assert.Len(t, op.Outputs, 1+tc.states)
				for i, o := range op.Outputs {
					old := op.Inputs[0]
					if i > 0 {
						old = op.Inputs[1+i]
					}
					if inPlace {
						assert.Equal(t, old, g.Tensors[o].AliasOf)
						assert.Zero(t, g.Tensors[o].StorageBytes())
					} else {
						assert.Equal(t, graph.NoTensor, g.Tensors[o].AliasOf)
						assert.Equal(t, g.Tensors[old].Bytes, g.Tensors[o].StorageBytes())
					}
				}
			}
			// Updated parameters are not counted again.
			assert.Equal(t, fwd.ParamCount(), g.ParamCount())
		}
	}
	_, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Optimizer: "lamb"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sgd, momentum, adam")
}

func TestDifferentiateMissingRulesNamed(t *testing.T) {
	b := graph.NewBuilder("custom")
	x := b.Input("x", graph.F32, 2, 4)
	h := b.Linear("fc", x, 4, false)
	h = b.Op("mystery", "m1", h).Out("m1", graph.F32, 2, 4).T()
	h = b.Op("enigma", "e1", h).Out("e1", graph.F32, 2, 4).T()
	h = b.Op("mystery", "m2", h).Out("m2", graph.F32, 2, 4).T()
	// An op off the gradient path needs no rule.
	b.Op("unused_kind", "u", x).Out("u", graph.F32, 2, 4)
	loss := b.CrossEntropy("loss", h, b.Input("y", graph.I64, 2))
	fwd, err := b.Build()
	require.NoError(t, err)
	_, err = graph.Differentiate(fwd, loss, graph.BackwardOptions{})
	require.Error(t, err)
	assert.True(t, errors.Is(err, graph.ErrNoGradRule))
	assert.Contains(t, err.Error(), "enigma, mystery:")
	assert.NotContains(t, err.Error(), "unused_kind")

	// Registering rules (one declarative, one custom) makes it work.
	rules := graph.DefaultRules()
	require.NoError(t, rules.RegisterGradRule("mystery", graph.GradRule{Saves: []graph.Saved{graph.SaveIn(0)}, Factor: 2}))
	require.NoError(t, rules.RegisterGradRule("enigma", graph.GradRule{Emit: func(c *graph.GradContext) error {
		dy := c.OutGrads[0]
		c.InGrads[0] = c.B.Op("enigma_grad", c.Forward.Name+".grad_op", dy).Forward(c.Forward.ID).
			Out(c.Forward.Name+".in_grad", graph.F32, 2, 4).T()
		return nil
	}}))
	require.Error(t, rules.RegisterGradRule("", graph.GradRule{}))
	require.Error(t, rules.RegisterGradRule("neg", graph.GradRule{Factor: -1}))
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Rules: rules})
	require.NoError(t, err)
	m2 := opByName(t, g, "m2.backward")
	assert.Equal(t, "mystery_backward", m2.Type)
	assert.Equal(t, []string{"e1", "m2.grad"}, names(g, m2.Inputs))
	opByName(t, g, "e1.grad_op")
	// The default registry is unaffected.
	_, ok := graph.DefaultRules().Lookup("mystery")
	assert.False(t, ok)
}

// TestViewFirst: with ViewFirst the first input's gradient is the output
// gradient itself (scatter_add passes grad to self) and the others are
// fresh, also when they have the output's shape; a first input of another
// shape gets a fresh one too.
func TestViewFirst(t *testing.T) {
	rules := graph.DefaultRules()
	require.NoError(t, rules.RegisterGradRule("pass_first", graph.GradRule{View: graph.ViewFirst, Factor: 1}))
	require.Error(t, rules.RegisterGradRule("bad_view", graph.GradRule{View: graph.ViewFirst + 1}))
	b := graph.NewBuilder("viewfirst")
	x := b.Input("x", graph.F32, 2, 4)
	a := b.Linear("fa", x, 4, false)
	c := b.Linear("fc", x, 4, false)
	h := b.Op("pass_first", "p", a, c).Out("p", graph.F32, 2, 4).T()
	small := b.Linear("fs", x, 1, false)
	h2 := b.Op("pass_first", "q", small, h).Out("q", graph.F32, 2, 4).T()
	loss := b.CrossEntropy("loss", h2, b.Input("y", graph.I64, 2))
	fwd, err := b.Build()
	require.NoError(t, err)
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Rules: rules})
	require.NoError(t, err)
	p := opByName(t, g, "p.backward")
	dy := p.Inputs[len(p.Inputs)-1]
	require.Len(t, p.Outputs, 2)
	assert.Equal(t, dy, g.Tensors[p.Outputs[0]].AliasOf, "self's gradient is the output gradient")
	assert.Equal(t, graph.NoTensor, g.Tensors[p.Outputs[1]].AliasOf, "the other input's is fresh")
	q := opByName(t, g, "q.backward")
	assert.Equal(t, graph.NoTensor, g.Tensors[q.Outputs[0]].AliasOf, "a first input of another shape gets a fresh gradient")
}

func TestDifferentiateRejectsBadInput(t *testing.T) {
	fwd, loss := tinyMLP(t)
	_, err := graph.Differentiate(nil, 0, graph.BackwardOptions{})
	require.Error(t, err)
	_, err = graph.Differentiate(fwd, 999, graph.BackwardOptions{})
	require.ErrorContains(t, err, "loss tensor 999")
	_, err = graph.Differentiate(fwd, 0, graph.BackwardOptions{}) // x: an input
	require.ErrorContains(t, err, "no producer")
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{})
	require.NoError(t, err)
	_, err = graph.Differentiate(g, loss, graph.BackwardOptions{})
	require.ErrorContains(t, err, "forward-only")

	// A loss that depends on no parameter.
	b := graph.NewBuilder("noparam")
	x := b.Input("x", graph.F32, 2, 3)
	l := b.CrossEntropy("loss", b.ReLU("r", x), b.Input("y", graph.I64, 2))
	fg, err := b.Build()
	require.NoError(t, err)
	_, err = graph.Differentiate(fg, l, graph.BackwardOptions{})
	require.ErrorContains(t, err, "does not depend on any parameter")
}

func TestDefaultRulesCoverCatalogue(t *testing.T) {
	rules := graph.DefaultRules()
	for _, typ := range []string{graph.OpConv2d, graph.OpConvTranspose2d, graph.OpLinear, graph.OpMatMul,
		graph.OpBatchNorm, graph.OpLayerNorm, graph.OpReLU, graph.OpReLU6, graph.OpHardtanh, graph.OpGELU,
		graph.OpSiLU, graph.OpSigmoid, graph.OpTanh, graph.OpHardswish, graph.OpAdd, graph.OpMul, graph.OpScale,
		graph.OpMaskedFill, graph.OpDropout, graph.OpMaxPool2d, graph.OpAvgPool2d, graph.OpAdaptiveAvgPool,
		graph.OpFlatten, graph.OpReshape, graph.OpTranspose, graph.OpSlice, graph.OpContiguous, graph.OpPad,
		graph.OpConcat, graph.OpSplit, graph.OpSoftmax, graph.OpLogSoftmax, graph.OpEmbedding,
		graph.OpCrossEntropy, graph.OpUpsample, graph.OpLSTMCell} {
		_, ok := rules.Lookup(typ)
		assert.True(t, ok, typ)
	}
	assert.Len(t, rules.Types(), 36)
}

func TestDifferentiateDoesNotModifyForward(t *testing.T) {
	fwd, loss := tinyMLP(t)
	before := len(fwd.Ops)
	nt := len(fwd.Tensors)
	_, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Optimizer: graph.OptAdam})
	require.NoError(t, err)
	assert.Len(t, fwd.Ops, before)
	assert.Len(t, fwd.Tensors, nt)
}

// ExampleDifferentiate derives the training graph of a tiny MLP.
func ExampleDifferentiate() {
	b := graph.NewBuilder("mlp")
	x := b.Input("x", graph.F32, 32, 784)
	h := b.ReLU("relu", b.Linear("fc1", x, 128, true))
	logits := b.Linear("fc2", h, 10, true)
	loss := b.CrossEntropy("loss", logits, b.Input("labels", graph.I64, 32))
	fwd, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Optimizer: graph.OptSGD})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, op := range g.Ops {
		fmt.Printf("%-8s %-22s %s\n", op.Phase, op.Type, op.Name)
	}
	fmt.Println("parameters:", g.ParamCount())
	// Output:
	// forward  linear                 fc1
	// forward  relu                   relu
	// forward  linear                 fc2
	// forward  cross_entropy          loss
	// backward ones_like              loss.grad_seed
	// backward cross_entropy_backward loss.backward
	// backward linear_backward        fc2.backward
	// backward relu_backward          relu.backward
	// backward linear_backward        fc1.backward
	// update   sgd_update             fc1.weight.update
	// update   sgd_update             fc1.bias.update
	// update   sgd_update             fc2.weight.update
	// update   sgd_update             fc2.bias.update
	// parameters: 101770
}
