package dtr

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// eqHeuristics are the heuristics that sum neighbour classes.
var eqHeuristics = []Heuristic{HDTREqClass, Lookahead, MegEngine}

// TestEqCacheMatchesScan: every query a storage's neighbour-class counts
// answer gives the sum and floor a scan of its neighbours gives, with
// counts kept from degree 2 on (nearly every storage), on random programs
// with views and unrecomputable ops (dropping, swapping or banishing), and
// on zoo models under DTR (the LSTM's per-step views of one storage
// included), dropping or swapping.
func TestEqCacheMatchesScan(t *testing.T) {
	var checks int64
	for _, h := range eqHeuristics {
		for seed := uint64(1); seed <= 12; seed++ {
			for _, mode := range []string{"drop", "swap", "banish"} {
				cfg := DefaultConfig()
				cfg.Heuristic = h
				cfg.EvicteeMinSize = 0
				cfg.Budget = 60_000 + int64(seed%8)*15_000
				evictMode(&cfg, mode)
				rt, err := New(cfg, nil)
				require.NoError(t, err)
				rt.eqMin, rt.eqRef = 2, true
				if err := fixedProgram(rt, rand.New(rand.NewPCG(seed, 5)), 600); err != nil {
					require.ErrorIs(t, err, sim.ErrOutOfMemory)
				}
				require.Zero(t, rt.eqMismatch, "%s seed %d %s", h, seed, mode)
				checks += rt.eqChecks
			}
		}
		for _, m := range eqZoo {
			for _, mode := range []string{"drop", "swap"} {
				rt, _, err := zooUnderDTR(t, m.name, m.o, m.ratio, func(cfg *Config, _ *sim.Result) {
					cfg.Heuristic, cfg.KeepForRemat = h, true
					evictMode(cfg, mode)
				}, func(rt *Runtime) { rt.eqMin, rt.eqRef = 2, true })
				name := fmt.Sprintf("%s %s %s", h, m.name, mode)
				if err != nil {
					require.ErrorIs(t, err, sim.ErrOutOfMemory, name)
				}
				require.Zero(t, rt.eqMismatch, name)
				checks += rt.eqChecks
			}
		}
	}
	t.Logf("%d queries answered by counts", checks)
	require.Greater(t, checks, int64(10_000))
}

// evictMode sets cfg to evict by mode: drop (the default), swap (to a host
// of 100 bytes per ns) or banish.
func evictMode(cfg *Config, mode string) {
	switch mode {
	case "swap":
		cfg.Swap, cfg.HostBandwidth = true, 100
	case "banish":
		cfg.Banish = true
	}
}

// eqZoo are zoo models and budgets (ratios of the no-recompute peak) for
// the neighbour-class tests.
var eqZoo = []struct {
	name  string
	o     models.Options
	ratio float64
}{
	{"lstm", models.Options{Seq: 64}, 0.9},
	{"gpt", models.Options{Depth: 4, Batch: 1, Seq: 32}, 0.6},
	{"resnet-cifar", models.Options{Depth: 20}, 0.5},
}

// TestEqCacheSameRuns: runs with neighbour-class counts (from degree 2 on)
// and without any (scans only) give the same counters, clock and peak.
func TestEqCacheSameRuns(t *testing.T) {
	for _, h := range eqHeuristics {
		for _, m := range eqZoo {
			for _, mode := range []string{"drop", "swap"} {
				var st [2]Stats
				var res [2]*sim.Result
				for i, min := range []int{2, 1 << 30} {
					rt, r, _ := zooUnderDTR(t, m.name, m.o, m.ratio, func(cfg *Config, _ *sim.Result) {
						cfg.Heuristic, cfg.KeepForRemat = h, true
						evictMode(cfg, mode)
					}, func(rt *Runtime) { rt.eqMin = min })
					st[i], res[i] = rt.Stats(), r
				}
				name := fmt.Sprintf("%s %s %s", h, m.name, mode)
				require.Equal(t, st[1], st[0], name)
				require.Positive(t, st[0].Evictions+st[0].SwapOuts, name)
				require.Equal(t, res[1].PeakAllocated, res[0].PeakAllocated, name)
				require.Equal(t, res[1].TotalNs, res[0].TotalNs, name)
			}
		}
	}
}
