package dtr

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// viewChain builds an n-layer chain whose layers use storage the way a
// traced PyTorch step does: a fresh activation a, a view of it, a transpose
// of that view recorded as an alias of a (not of its input, the view), an
// in-place ReLU on the transpose (also an alias of a), and a split whose
// second output is a view of its first. The reverse sweep reads the views
// and in-place outputs, so under a budget DTR must evict their storages
// and rematerialize them through the views and the in-place op.
func viewChain(t *testing.T, n int) (*graph.Graph, []graph.OpID) {
	const rows, cols = 1024, 256
	b := graph.NewBuilder("views")
	h := b.Input("x", graph.F32, rows, cols)
	var hs, ts, ss []graph.TensorID
	var inplace []graph.OpID
	for i := 0; i < n; i++ {
		a := b.Op("linear", "lin", h).Out("a", graph.F32, rows, cols).TimeNs(1000).T()
		v := b.Op("view", "view", a).Out("v", graph.F32, rows, cols).Alias(a).TimeNs(1).T()
		tr := b.Op("transpose", "tr", v).Out("t", graph.F32, cols, rows).Alias(a).TimeNs(1).T()
		ip := b.Op("relu_", "relu_", tr).Out("h", graph.F32, cols, rows).Alias(a).TimeNs(100).Flags(graph.InPlace)
		inplace = append(inplace, ip.ID())
		sp := b.Op("split", "split", ip.T()).Out("s0", graph.F32, rows, cols).Out("s1", graph.F32, rows/2, cols)
		sp.Alias(sp.Output(0)).TimeNs(500)
		ts, hs, ss = append(ts, tr), append(hs, ip.T()), append(ss, sp.Output(1))
		h = sp.Output(0)
	}
	b.SetPhase(graph.Backward)
	g := h
	for i := n - 1; i >= 0; i-- {
		g = b.Op("relu_grad", "grad", g, hs[i], ts[i], ss[i]).Out("g", graph.F32, rows, cols).TimeNs(1000).T()
	}
	gr, err := b.Build()
	require.NoError(t, err)
	return gr, inplace
}

// TestViewsAndInPlaceOnMachine: views and in-place outputs share their
// storage's residency on the Machine (sim tracks storage by the alias root),
// so DTR must evict and rematerialize by that storage. Before the runtime
// took a view's storage from its alias root, a transpose of a view got a
// storage of its own, stayed "resident" after the real storage was evicted,
// and the Machine failed with "input used after free".
func TestViewsAndInPlaceOnMachine(t *testing.T) {
	const n, mb = 16, 1024 * 256 * 4
	g, inplace := viewChain(t, n)
	none, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
	require.NoError(t, err)
	for _, h := range Heuristics {
		t.Run(h.String(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Heuristic = h
			cfg.EvicteeMinSize = 0
			cfg.Budget = 8 * mb
			require.Less(t, cfg.Budget, none.PeakAllocated/2)
			m, err := sim.NewMachine(g, sim.Options{})
			require.NoError(t, err)
			res, st, err := RunOnMachine(context.Background(), m, cfg)
			require.NoError(t, err)
			require.Greater(t, st.Remats, int64(0))
			require.Equal(t, int(st.Remats), int(res.Recomputes))
			require.LessOrEqual(t, res.PeakAllocated, cfg.Budget)
			reran := false
			for _, op := range inplace {
				reran = reran || m.Runs(op) > 1
			}
			require.True(t, reran, "an in-place op is recomputed after its storage's producer")

			plan, _, err := StaticPlan(context.Background(), g, cfg)
			require.NoError(t, err)
			require.Empty(t, sim.StaleReads(g, plan), "no recompute reads a storage without its in-place writes")
			pres, err := sim.Simulate(g, plan, sim.Options{})
			require.NoError(t, err, "the exported plan replays")
			require.LessOrEqual(t, pres.PeakAllocated, cfg.Budget)
		})
	}
}

// TestInPlaceNotRerunnable: an in-place op that is random without saved RNG
// state, or writes a storage without a producer, is never rerun: its
// storage stays resident (the Machine would refuse the recompute).
func TestInPlaceNotRerunnable(t *testing.T) {
	b := graph.NewBuilder("inplace")
	w := b.Parameter("w", graph.F32, 16)
	x := b.Input("x", graph.F32, 16)
	a := b.Op("empty_like", "e", x).Out("a", graph.F32, 16).T()
	drop := b.Op("bernoulli_", "bern", a).Out("m", graph.F32, 16).Alias(a).Flags(graph.InPlace | graph.NonDeterministic)
	relu := b.Op("relu_", "relu_", a).Out("r", graph.F32, 16).Alias(a).Flags(graph.InPlace)
	upd := b.Op("add_", "upd", w, x).Out("w2", graph.F32, 16).Alias(w).Flags(graph.InPlace)
	g, err := b.Build()
	require.NoError(t, err)
	require.False(t, rerunnable(g, drop.ID()))
	require.True(t, rerunnable(g, relu.ID()))
	require.False(t, rerunnable(g, upd.ID()))
	require.True(t, rerunnable(g, 0))
}

// TestOutputViewOfEarlierOutput: Output.AliasOf past the inputs names an
// earlier output of the same op; later ones are refused.
func TestOutputViewOfEarlierOutput(t *testing.T) {
	rt, err := New(DefaultConfig(), nil)
	require.NoError(t, err)
	x, err := rt.Constant(64)
	require.NoError(t, err)
	_, out, err := rt.Compute([]TensorID{x}, 10, []Output{{Bytes: 128, AliasOf: -1}, {AliasOf: 1}, {AliasOf: 0}})
	require.NoError(t, err)
	require.Equal(t, out[0], rt.Root(out[1]))
	require.Equal(t, x, rt.Root(out[2]))
	require.Equal(t, int64(64+128), rt.Stats().Memory)
	_, _, err = rt.Compute([]TensorID{x}, 10, []Output{{AliasOf: 2}, {Bytes: 8, AliasOf: -1}})
	require.ErrorContains(t, err, "earlier output")
}

// cloneChain builds n layers as PyTorch runs a layer followed by an
// in-place activation whose backward needs its input and a projection:
// autograd clones the layer's output (k), the activation overwrites it (h,
// in place), the projection (y) feeds the next layer, and the backward
// reads h, the clone and y.
func cloneChain(t *testing.T, n int) (*graph.Graph, []graph.OpID) {
	const rows, cols = 1024, 256
	b := graph.NewBuilder("clones")
	y := b.Input("x", graph.F32, rows, cols)
	var ks, hs, ys []graph.TensorID
	var clones []graph.OpID
	for i := 0; i < n; i++ {
		ys = append(ys, y)
		// random without saved RNG state: DTR keeps a's storage (as a
		// checkpoint it may not rerun), so the clone's rerun would read
		// the activation's result
		a := b.Op("linear_dropout", "lin", y).Out("a", graph.F32, rows, cols).TimeNs(1000).Flags(graph.NonDeterministic).T()
		k := b.Op("clone", "clone", a).Out("k", graph.F32, rows, cols).TimeNs(10)
		clones = append(clones, k.ID())
		h := b.Op("hardswish_", "hswish", a).Out("h", graph.F32, rows, cols).Alias(a).TimeNs(100).Flags(graph.InPlace).T()
		y = b.Op("linear", "proj", h).Out("y", graph.F32, rows, cols).TimeNs(1000).T()
		ks, hs = append(ks, k.T()), append(hs, h)
	}
	b.SetPhase(graph.Backward)
	g := y
	for i := n - 1; i >= 0; i-- {
		g = b.Op("linear_backward", "pgrad", g, hs[i]).Out("gp", graph.F32, rows, cols).TimeNs(1000).T()
		g = b.Op("hardswish_backward", "grad", g, ks[i]).Out("gh", graph.F32, rows, cols).TimeNs(100).T()
		g = b.Op("linear_backward", "lgrad", g, ys[i]).Out("g", graph.F32, rows, cols).TimeNs(1000).T()
	}
	gr, err := b.Build()
	require.NoError(t, err)
	return gr, clones
}

// TestCloneBeforeInPlaceNotRematerialized: a clone that reads a storage an
// in-place op overwrites next is never rerun (its rerun would copy the
// in-place op's result, and remat_torch.apply refuses such a plan), under
// every heuristic, while DTR still evicts and rematerializes the rest.
func TestCloneBeforeInPlaceNotRematerialized(t *testing.T) {
	g, clones := cloneChain(t, 16)
	none, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
	require.NoError(t, err)
	for _, h := range Heuristics {
		t.Run(h.String(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Heuristic = h
			cfg.EvicteeMinSize = 0
			cfg.Budget = none.PeakAllocated * 3 / 4
			plan, st, err := StaticPlan(context.Background(), g, cfg)
			require.NoError(t, err)
			require.Greater(t, st.Remats, int64(0), "DTR rematerializes something (else this checks nothing)")
			require.Empty(t, sim.StaleReads(g, plan))
			runs := make(map[graph.OpID]int)
			for _, s := range plan.Steps {
				if s.Kind == sim.Compute {
					runs[s.Op]++
				}
			}
			for _, c := range clones {
				require.Equal(t, 1, runs[c], "clone %d runs once", c)
			}
			res, err := sim.Simulate(g, plan, sim.Options{})
			require.NoError(t, err)
			require.LessOrEqual(t, res.PeakAllocated, cfg.Budget)
		})
	}
}
