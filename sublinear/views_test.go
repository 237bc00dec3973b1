package sublinear

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// viewedMLP is a traced-style MLP: every activation is reshaped (a view)
// before the next linear reads it, as PyTorch's traced steps do, so the
// storages backward keeps all have views.
func viewedMLP(t testing.TB, layers int) *graph.Graph {
	b := graph.NewBuilder("viewed")
	h := b.Input("x", graph.F32, 4096, 64)
	for i := 0; i < layers; i++ {
		h = b.Reshape(fmt.Sprintf("view%d", i), h, 4096, 64)
		h = b.Linear(fmt.Sprintf("fc%d", i), h, 64, true)
		h = b.Tanh(fmt.Sprintf("tanh%d", i), h)
		h = b.Reshape(fmt.Sprintf("flat%d", i), h, 4096, 8, 8)
		h = b.Sigmoid(fmt.Sprintf("sig%d", i), h)
		h = b.Reshape(fmt.Sprintf("back%d", i), h, 4096, 64)
	}
	out := b.Linear("out", h, 10, true)
	loss := b.CrossEntropy("loss", out, b.Input("y", graph.I64, 4096))
	fwd, err := b.Build()
	require.NoError(t, err)
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{})
	require.NoError(t, err)
	return g
}

// Storage read through views is discardable: the recompute of its producer
// brings the storage back and the views read it. The search lowers the peak
// of a graph whose activations are all viewed, and its plan replays with the
// peak it reports.
func TestViewedStorageIsDiscardable(t *testing.T) {
	g := viewedMLP(t, 12)
	views := 0
	for i := range g.Tensors {
		if g.Tensors[i].AliasOf != graph.NoTensor {
			views++
		}
	}
	require.Positive(t, views)
	plan, rep, err := Thresholds(context.Background(), g, DefaultSearchOptions())
	require.NoError(t, err)
	require.Less(t, rep.Peak, rep.BaselinePeak, "the search finds a reduction")
	require.NotEmpty(t, rep.Duplicated)
	res, err := sim.Simulate(g, plan, sim.Options{})
	require.NoError(t, err)
	require.Equal(t, res.PeakAllocated, rep.Peak)
}

// A storage written in place through a view (dropout's mask filled by
// bernoulli_) is not discardable: recomputing its producer alone would not
// give its value back.
func TestMutatedStorageIsKept(t *testing.T) {
	b := graph.NewBuilder("mutated")
	x := b.Input("x", graph.F32, 64, 256)
	h := b.Linear("fc0", x, 256, true)
	mask := b.Op("empty_like", "mask", h).Out("mask", graph.F32, 64, 256).T()
	filled := b.Op("bernoulli_", "fill", mask).Flags(graph.InPlace|graph.NonDeterministic).Out("filled", graph.F32, 64, 256).Alias(mask).T()
	h = b.Mul("drop", h, filled)
	h = b.Linear("fc1", h, 256, true)
	out := b.Linear("out", b.Tanh("tanh", h), 10, true)
	b.SetLoss(b.CrossEntropy("loss", out, b.Input("y", graph.I64, 64)))
	g, err := b.Build()
	require.NoError(t, err)
	p := newMgeProblem(g, func(graph.OpID) int64 { return 1 }, mgeMemModel{})
	require.True(t, p.mutated[mask])
	require.False(t, p.discardable(int32(mask)))
}

// The lower bound an infeasible budget reports is never above a peak the
// search finds, on random graphs and the zoo.
func TestLowerBoundBelowEveryPeak(t *testing.T) {
	gs := []*graph.Graph{viewedMLP(t, 6), trainingGraph(t, 20)}
	for _, name := range []string{"resnet18", "gpt", "mobilenet_v2"} {
		o := models.Options{Batch: 2, Image: 64}
		if name == "gpt" {
			o = models.Options{Batch: 2, Seq: 32, Depth: 2}
		}
		g, err := models.Build(name, o)
		require.NoError(t, err, name)
		gs = append(gs, g)
	}
	for _, g := range gs {
		opts := DefaultSearchOptions()
		opts.GeneticIters = 3
		_, rep, err := WithinBudget(context.Background(), g, 1, opts)
		var inf *InfeasibleBudgetError
		require.True(t, errors.As(err, &inf), "%s: %v", g.Name, err)
		require.ErrorIs(t, err, sim.ErrOutOfMemory)
		require.LessOrEqual(t, inf.LowerBound, rep.Peak, g.Name)
		require.LessOrEqual(t, inf.Resident+inf.Held, inf.LowerBound, g.Name)
		require.Contains(t, err.Error(), "no plan can go below", g.Name)
	}
}
