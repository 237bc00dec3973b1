package dtr

import (
	"context"
	"testing"

	"github.com/remat-dev/remat/sim/alloc"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// TestGraphHeuristics compares eq-class and lookahead (with the Oracle
// RunOnMachine builds from the schedule) on model training graphs at 50% of
// the no-recomputation peak, ideal allocator: both must fit the budget, and
// lookahead (knowing the future) must not be worse in overhead by more than
// 1%. GPT's dropouts are marked rng_saved (as PyTorch's checkpointing and
// the DTR prototype save the RNG state): without it their outputs cannot be
// recomputed and hold 6.8 GB at batch 8, over the 9.9 GB budget with the
// parameters and the 1.6 GB logits and their gradient.
func TestGraphHeuristics(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three model graphs")
	}
	cases := []struct {
		model string
		batch int
	}{{"resnet50", 64}, {"gpt", 8}, {"vgg19", 256}}
	for _, c := range cases {
		g, err := models.Build(c.model, models.Options{Batch: c.batch})
		require.NoError(t, err)
		for i := range g.Ops {
			if o := &g.Ops[i]; o.Flags.Has(graph.NonDeterministic) {
				if o.Attrs == nil {
					o.Attrs = map[string]string{}
				}
				o.Attrs[graph.AttrRNGSaved] = "1"
			}
		}
		base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
		require.NoError(t, err)
		budget := base.PeakAllocated / 2
		over := map[Heuristic]float64{}
		for _, h := range []Heuristic{HDTREqClass, Lookahead, LookaheadMSPS} {
			m, err := sim.NewMachine(g, sim.Options{Allocator: alloc.NewIdeal(budget), Capacity: -1})
			require.NoError(t, err)
			cfg := DefaultConfig()
			cfg.Heuristic = h
			cfg.Budget = budget
			res, st, err := RunOnMachine(context.Background(), m, cfg)
			if err != nil {
				t.Logf("%s %d %s: %v", c.model, c.batch, h, err)
				continue
			}
			require.LessOrEqual(t, res.PeakAllocated, budget)
			over[h] = float64(m.Clock()) / float64(base.ComputeNs)
			t.Logf("%s batch %d, budget %d (50%% of %d): %s overhead %.4f, remats %d, evictions %d, host retries %d",
				c.model, c.batch, budget, base.PeakAllocated, h, over[h], st.Remats, st.Evictions, st.HostRetries)
		}
		require.LessOrEqual(t, over[Lookahead], over[HDTREqClass]*1.01, c.model)
	}
}
