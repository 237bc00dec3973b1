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
	hook := func(rt *Runtime) { rt.eqMin, rt.eqRef = 2, true }
	check := func(rt *Runtime, name string) {
		require.Zero(t, rt.eqMismatch, name)
		checks += rt.eqChecks
	}
	eqFixedRuns(t, eqHeuristics, 5, hook, check)
	eqZooRuns(t, eqHeuristics, hook, check)
	t.Logf("%d queries answered by counts", checks)
	require.Greater(t, checks, int64(10_000))
}

// eqFixedRuns runs a random program (fixedProgram, stream picks the
// programs) under each heuristic of hs, 12 seeds and evicting by dropping,
// swapping and banishing, with neighbour-class counts from degree 2 on,
// then calls check. setup sets the runtime's test hooks.
func eqFixedRuns(t *testing.T, hs []Heuristic, stream uint64, setup func(*Runtime), check func(rt *Runtime, name string)) {
	t.Helper()
	for _, h := range hs {
		for seed := uint64(1); seed <= 12; seed++ {
			for _, mode := range []string{"drop", "swap", "banish"} {
				rt, err := New(smallConfig(h, 60_000+int64(seed%8)*15_000, mode), nil)
				require.NoError(t, err)
				setup(rt)
				if err := fixedProgram(rt, rand.New(rand.NewPCG(seed, stream)), 600); err != nil {
					require.ErrorIs(t, err, sim.ErrOutOfMemory)
				}
				check(rt, fmt.Sprintf("%s seed %d %s", h, seed, mode))
			}
		}
	}
}

// eqZooRuns runs each eqZoo model under DTR with each heuristic of hs,
// dropping or swapping, then calls check (an out-of-memory end is allowed).
func eqZooRuns(t *testing.T, hs []Heuristic, setup func(*Runtime), check func(rt *Runtime, name string)) {
	t.Helper()
	for _, h := range hs {
		for _, m := range eqZoo {
			for _, mode := range []string{"drop", "swap"} {
				rt, _, err := zooUnderDTR(t, m.name, m.o, m.ratio, func(cfg *Config, _ *sim.Result) {
					cfg.Heuristic, cfg.KeepForRemat = h, true
					evictMode(cfg, mode)
				}, setup)
				name := fmt.Sprintf("%s %s %s", h, m.name, mode)
				if err != nil {
					require.ErrorIs(t, err, sim.ErrOutOfMemory, name)
				}
				check(rt, name)
			}
		}
	}
}

// parityRandomRuns runs random programs (seeds 1 to seeds of stream)
// under parity mode with heuristic h, budgets from 120,000 to 340,000
// bytes, then calls check (an out-of-memory end is allowed).
func parityRandomRuns(t *testing.T, h Heuristic, seeds, stream uint64, setup func(*Runtime), check func(rt *Runtime, name string)) {
	t.Helper()
	for seed := uint64(1); seed <= seeds; seed++ {
		cfg := ParityConfig(h)
		cfg.Budget = 120_000 + int64(seed%12)*20_000
		rt, err := New(cfg, nil)
		require.NoError(t, err)
		setup(rt)
		if err := randomProgram(rt, rand.New(rand.NewPCG(seed, stream)), 500); err != nil {
			require.ErrorIs(t, err, sim.ErrOutOfMemory)
		}
		check(rt, fmt.Sprintf("parity %s seed %d", h, seed))
	}
}

// smallConfig is the default configuration for the random programs:
// heuristic h, no minimum evictee size, budget bytes, evicting by mode
// (evictMode).
func smallConfig(h Heuristic, budget int64, mode string) Config {
	cfg := DefaultConfig()
	cfg.Heuristic = h
	cfg.EvicteeMinSize = 0
	cfg.Budget = budget
	evictMode(&cfg, mode)
	return cfg
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
// and without any (scans only) give the same counters, clock and peak. The
// score evaluations may differ: a storage with counts keeps its key's
// eq-class part while it stays a lower bound (storage.kstick), so the index
// may evaluate candidates a fresh key would have ruled out (the choices do
// not change: TestKeptKeyPartsMatchScan).
func TestEqCacheSameRuns(t *testing.T) {
	var evals [2]int64
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
				evals[0] += st[0].HeuristicEvals
				evals[1] += st[1].HeuristicEvals
				st[0].HeuristicEvals, st[1].HeuristicEvals = 0, 0
				require.Equal(t, st[1], st[0], name)
				require.Positive(t, st[0].Evictions+st[0].SwapOuts, name)
				require.Equal(t, res[1].PeakAllocated, res[0].PeakAllocated, name)
				require.Equal(t, res[1].TotalNs, res[0].TotalNs, name)
			}
		}
	}
	t.Logf("score evaluations: %d with counts, %d with scans only", evals[0], evals[1])
}

// TestKeptKeyPartsMatchScan: with neighbour-class counts from degree 2 on,
// storages file keys with the eq-class part they kept (storage.kstick)
// while no neighbouring class it counted can have lost value or left; the
// index still chooses what the scan chooses at every eviction, and every
// filed key stays a lower bound of its candidate's score (idxBadKeys), on
// random programs with views and unrecomputable ops (dropping, swapping or
// banishing) and on zoo models (dropping or swapping).
func TestKeptKeyPartsMatchScan(t *testing.T) {
	var reuses, evictions int64
	hook := func(rt *Runtime) { rt.eqMin, rt.idxCheck = 2, true }
	check := func(rt *Runtime, name string) {
		require.Zero(t, rt.idxMismatch, name)
		require.Zero(t, rt.idxBadKeys, name)
		require.Zero(t, rt.idxBadRefs, name)
		reuses += rt.keyReuses
		evictions += rt.Stats().Evictions
	}
	indexed := []Heuristic{HDTREqClass, Lookahead}
	eqFixedRuns(t, indexed, 9, hook, check)
	eqZooRuns(t, indexed, hook, check)
	// parity mode: epochs whose keys allow for negative classes (a kept
	// part from before such an epoch is no bound in it)
	var negEpochs int
	parityRandomRuns(t, HDTREqClass, 24, 11, hook, func(rt *Runtime, name string) {
		check(rt, name)
		if rt.idx != nil {
			negEpochs += rt.idx.negEpochs
		}
	})
	t.Logf("%d evictions checked, %d keys filed with a kept part, %d neg epochs", evictions, reuses, negEpochs)
	require.Greater(t, reuses, int64(1000))
	require.Greater(t, evictions, int64(1000))
}
