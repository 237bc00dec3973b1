package dtr

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/dtrlog"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// savedCases are zoo graphs with views, in-place updates, several outputs
// per op and persistent state, for the SavedOnly tests.
var savedCases = []struct {
	name string
	o    models.Options
}{
	{"mlp", models.Options{Batch: 16}},
	{"resnet-cifar", models.Options{Depth: 8, Batch: 8}},
	{"gpt", models.Options{Depth: 2, Batch: 2, Seq: 64, Width: 128, Heads: 4, Vocab: 500}},
	{"lstm", models.Options{Seq: 12, Batch: 8, Width: 64, Vocab: 100}},
}

// savedOracle computes, from the graph alone, which storages Config.SavedOnly
// budgets (made by a forward op, read by a backward or update op, not
// persistent) and the peak of their resident bytes in the default schedule
// without evictions: a storage counts from the op that saves it, the
// earliest forward op whose backward op reads it (or its producer when no
// backward op names its forward op, or when that is the producer), and goes
// after the last op reading it or a view of it; one nobody reads stays.
// at[r] is the op that saves storage r (-1 for the others).
func savedOracle(g *graph.Graph) (saved []bool, at []int, peak int64) {
	saved = make([]bool, len(g.Tensors))
	last := make([]int, len(g.Tensors))
	at = make([]int, len(g.Tensors))
	for i := range last {
		last[i], at[i] = -1, -1
	}
	for i, op := range g.Ops {
		for _, in := range op.Inputs {
			r := g.StorageOf(in)
			last[r] = i
			if op.Phase != graph.Forward {
				saved[r] = true
			}
			if op.Phase == graph.Backward && op.Forward != graph.NoOp && g.Ops[op.Forward].Phase == graph.Forward && (at[r] < 0 || int(op.Forward) < at[r]) {
				at[r] = int(op.Forward)
			}
		}
	}
	for r := range saved {
		t := &g.Tensors[r]
		if saved[r] && (t.Producer == graph.NoOp || g.Ops[t.Producer].Phase != graph.Forward || t.Kind.Persistent() || g.StorageOf(graph.TensorID(r)) != graph.TensorID(r)) {
			saved[r] = false
		}
		if saved[r] {
			at[r] = max(at[r], int(t.Producer))
		} else {
			at[r] = -1
		}
	}
	var live int64
	for i := range g.Ops {
		for r := range saved {
			if saved[r] && at[r] == i {
				live += g.Tensors[r].StorageBytes()
			}
		}
		peak = max(peak, live)
		for r, l := range last {
			if l == i && saved[r] {
				live -= g.Tensors[r].StorageBytes()
			}
		}
	}
	return saved, at, peak
}

// readLater reports whether a compute step of steps reads storage r.
func readLater(steps []sim.Step, dn *graph.Dense, r graph.TensorID) bool {
	for _, s := range steps {
		if s.Kind == sim.Compute {
			for _, in := range dn.Inputs(s.Op) {
				if dn.Root[in] == r {
					return true
				}
			}
		}
	}
	return false
}

// TestSavedOnlyAccounting: without a budget, the peak of the bytes
// SavedOnly budgets is the oracle's peak of the saved activations, and the
// step's peak is the whole graph's.
func TestSavedOnlyAccounting(t *testing.T) {
	for _, c := range savedCases {
		g, err := models.Build(c.name, c.o)
		require.NoError(t, err)
		_, _, want := savedOracle(g)
		require.Positive(t, want, c.name)
		cfg := DefaultConfig()
		cfg.EvicteeMinSize, cfg.SavedOnly = 0, true
		_, st, err := StaticPlan(context.Background(), g, cfg)
		require.NoError(t, err, c.name)
		require.Equal(t, want, st.PeakBudgeted, c.name)
		require.Greater(t, st.PeakMemory, st.PeakBudgeted, c.name)
	}
}

// TestSavedOnlyEvictsSavedActivations: under a budget of a half and a fifth
// of the saved activations' peak the run evicts, only saved activations (or
// storages a rematerialization made again), none before the op that saves
// it has run, keeps their bytes within the budget plus one op's outputs
// (the check follows an op's first run), and its plan replays on the
// simulator with every other byte on top of the budget.
func TestSavedOnlyEvictsSavedActivations(t *testing.T) {
	for _, c := range savedCases {
		g, err := models.Build(c.name, c.o)
		require.NoError(t, err)
		saved, at, peak := savedOracle(g)
		var maxOut int64 // the most saved bytes one op makes
		for _, op := range g.Ops {
			var b int64
			for _, out := range op.Outputs {
				if saved[out] {
					b += g.Tensors[out].StorageBytes()
				}
			}
			maxOut = max(maxOut, b)
		}
		for _, run := range []struct {
			div  int64
			swap bool
		}{{2, false}, {2, true}, {5, false}, {5, true}} {
			swap := run.swap
			name := fmt.Sprintf("%s budget=peak/%d swap=%v", c.name, run.div, swap)
			cfg := DefaultConfig()
			cfg.EvicteeMinSize, cfg.SavedOnly, cfg.Budget, cfg.Swap = 0, true, peak/run.div, swap
			p, st, err := StaticPlan(context.Background(), g, cfg)
			require.NoError(t, err, name)
			require.Positive(t, st.Evictions+st.SwapOuts, name)
			t.Logf("%s: budget %d, saved activations peak %d (%d without a budget), %d evictions, %d swap-outs, %d times over the budget", name, cfg.Budget, st.PeakBudgeted, peak, st.Evictions, st.SwapOuts, st.OverBudget)
			if st.OverBudget == 0 {
				require.LessOrEqual(t, st.PeakBudgeted, cfg.Budget+maxOut, name)
			} else {
				require.Greater(t, st.PeakBudgeted, cfg.Budget, name)
			}
			// a free of a storage read again later is an eviction
			dn := g.Dense()
			runs := make([]int, len(g.Ops))
			remade := make([]bool, len(g.Tensors))
			freedAt := map[graph.TensorID]int{}
			for k, s := range p.Steps {
				switch s.Kind {
				case sim.Compute:
					runs[s.Op]++
					for _, in := range dn.Inputs(s.Op) {
						r := dn.Root[in]
						if at, ok := freedAt[r]; ok {
							require.True(t, saved[r] || remade[r], "%s: step %d: storage %d %q evicted at step %d is neither saved nor remade", name, k, r, g.Tensors[r].Name, at)
							delete(freedAt, r)
						}
					}
					if runs[s.Op] > 1 {
						for _, out := range dn.Outputs(s.Op) {
							remade[dn.Root[out]] = true
						}
					}
				case sim.Free, sim.SwapOut:
					r := dn.Root[s.Tensor]
					freedAt[r] = k
					// remat_torch.dtr manages a storage once autograd
					// saves it: nothing evicts it before that op has run
					if s.Kind == sim.SwapOut || (saved[r] && !remade[r] && readLater(p.Steps[k+1:], dn, r)) {
						require.True(t, at[r] >= 0 && runs[at[r]] > 0, "%s: step %d: storage %d %q evicted before op %d saves it", name, k, r, g.Tensors[r].Name, at[r])
					}
				case sim.SwapIn:
					r := dn.Root[s.Tensor]
					require.True(t, saved[r] || remade[r], "%s: step %d: storage %d %q swapped is neither saved nor remade", name, k, r, g.Tensors[r].Name)
					delete(freedAt, r)
				}
			}
			res, err := sim.Simulate(g, p, sim.Options{})
			require.NoError(t, err, name)
			require.Greater(t, res.PeakAllocated, cfg.Budget, name)
		}
	}
}

// TestSavedOnlyErrors: the settings that cannot go with SavedOnly, and an
// unbudgeted view, are refused with the field named.
func TestSavedOnlyErrors(t *testing.T) {
	cfg := ParityConfig(HDTREqClass)
	cfg.SavedOnly = true
	require.ErrorContains(t, cfg.Validate(), "SavedOnly=true")

	cfg = DefaultConfig()
	cfg.SavedOnly = true
	tr, err := dtrlog.Compile(strings.NewReader(`{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}
{"INSTRUCTION":"CONSTANT","NAME":"x"}
{"INSTRUCTION":"MEMORY","MEMORY":"1024","NAME":"x"}
{"ARGS":["x"],"INSTRUCTION":"CALL","NAME":"relu","RESULT":["y"],"TIME":"500"}
{"INSTRUCTION":"MEMORY","MEMORY":"1024","NAME":"y"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"y"}
`))
	require.NoError(t, err)
	_, err = Replay(context.Background(), tr, cfg, nil)
	require.ErrorContains(t, err, "SavedOnly=true on a DTR log")

	rt, err := New(DefaultConfig(), nil)
	require.NoError(t, err)
	c, err := rt.Constant(10)
	require.NoError(t, err)
	_, _, err = rt.Compute([]TensorID{c}, 1, []Output{{AliasOf: 0, Unbudgeted: true}})
	require.ErrorContains(t, err, "Unbudgeted with AliasOf 0")
}
