package dtr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// keptRun runs zoo model name under DTR with KeepForRemat and heuristic h
// at ratio of its no-recompute peak, eager or lazy locking, with the scan
// (scan) or the index checked against it at every choice.
func keptRun(t *testing.T, name string, o models.Options, h Heuristic, ratio float64, lazy, scan bool) (*Runtime, error) {
	t.Helper()
	rt, _, err := zooUnderDTR(t, name, o, ratio, func(cfg *Config, base *sim.Result) {
		cfg.Heuristic, cfg.KeepForRemat, cfg.EvicteeMinSize = h, true, 0
		cfg.Scan, cfg.LazyLock = scan, lazy
		cfg.RematLimit = 50 * base.TotalNs
	}, func(rt *Runtime) { rt.idxCheck = !scan })
	return rt, err
}

// TestKeptIndexMatchesScan: with the lookahead heuristics the storages kept
// for rematerialization are filed in the index with the next use their
// evicted dependents give them. On zoo models where many are kept, every
// choice equals the scan's in the same state, every kept key is no earlier
// than a fresh walk's next use (checkScan), and whole runs equal scan runs.
func TestKeptIndexMatchesScan(t *testing.T) {
	cases := []struct {
		model  string
		o      models.Options
		ratios []float64 // above the parameters' share of the peak
	}{
		{"gpt", models.Options{Depth: 24, Batch: 1, Seq: 128}, []float64{0.45, 0.5, 0.55, 0.6, 0.65}},
		{"gpt", models.Options{Depth: 48, Batch: 1, Seq: 128}, []float64{0.5, 0.6}},
		{"resnet-cifar", models.Options{Depth: 20, Batch: 8}, []float64{0.3}},
		{"lstm", models.Options{Seq: 40, Batch: 32, Width: 64, Vocab: 100}, []float64{0.45}},
	}
	lazies, minKeyed := []bool{false, true}, int64(1000)
	if testing.Short() {
		// the race detector's run: one locking mode, one ratio per model
		lazies, minKeyed = lazies[:1], 100
		for i := range cases {
			cases[i].ratios = cases[i].ratios[:1]
		}
	}
	var keyed, choices int64
	for _, c := range cases {
		for _, h := range []Heuristic{Lookahead, LookaheadMSPS, LookaheadDTR} {
			for _, lazy := range lazies {
				for _, ratio := range c.ratios {
					name := fmt.Sprintf("%s %s lazy=%v %.2f", c.model, h, lazy, ratio)
					ri, errI := keptRun(t, c.model, c.o, h, ratio, lazy, false)
					rs, errS := keptRun(t, c.model, c.o, h, ratio, lazy, true)
					requireIndexAgreed(t, name, ri, errI, errS)
					a, b := ri.Stats(), rs.Stats()
					require.Equal(t, b.Evictions, a.Evictions, name)
					require.Equal(t, b.Clock, a.Clock, name)
					require.Equal(t, b.PeakMemory, a.PeakMemory, name)
					keyed += ri.keptKeyed
					choices += a.Evictions
				}
			}
		}
	}
	t.Logf("%d choices checked, %d kept storages keyed", choices, keyed)
	require.Greater(t, keyed, minKeyed)
}

// TestKeptCappedWalks lowers the need walks' cap so that keying kept
// storages hits it: a kept storage whose walk was capped is keyed with
// the next use that walk found, and every filed key, kept or refined by an
// evaluation (refineNext), stays a bound of the next use an uncapped walk
// finds (idxBadKeys). Choices themselves may differ from the scan's here,
// since capped walks depend on the order candidates are evaluated in; the
// runs must still fit their budgets.
func TestKeptCappedWalks(t *testing.T) {
	cases := []struct {
		model string
		o     models.Options
		ratio float64
	}{
		{"gpt", models.Options{Depth: 24, Batch: 1, Seq: 128}, 0.55},
		{"gpt", models.Options{Depth: 24, Batch: 1, Seq: 128}, 0.7},
		{"resnet-cifar", models.Options{Depth: 20, Batch: 8}, 0.3},
		{"lstm", models.Options{Seq: 40, Batch: 32, Width: 64, Vocab: 100}, 0.45},
	}
	caps, lazies, minRuns, minKeys := []int{4, 24, 64}, []bool{false, true}, 8, int64(100)
	if testing.Short() {
		// the race detector's run: one cap, one locking mode
		caps, lazies, minRuns, minKeys = caps[1:2], lazies[:1], 2, 10
	}
	var keyed, capped, refined, choices, differ int64
	completed := 0
	for _, walkCap := range caps {
		for _, c := range cases {
			for _, h := range []Heuristic{Lookahead, LookaheadMSPS, LookaheadDTR} {
				for _, lazy := range lazies {
					name := fmt.Sprintf("cap %d %s %s lazy=%v %.2f", walkCap, c.model, h, lazy, c.ratio)
					var budget int64
					rt, _, err := zooUnderDTR(t, c.model, c.o, c.ratio, func(cfg *Config, base *sim.Result) {
						cfg.Heuristic, cfg.KeepForRemat, cfg.EvicteeMinSize = h, true, 0
						cfg.LazyLock = lazy
						cfg.RematLimit = 50 * base.TotalNs
						budget = cfg.Budget
					}, func(rt *Runtime) {
						rt.idxCheck = true
						rt.needCap = walkCap
					})
					if err != nil {
						require.True(t, errors.Is(err, sim.ErrOutOfMemory) || errors.Is(err, ErrThrashing), name)
					} else {
						completed++
					}
					require.Zero(t, rt.idxBadKeys, name)
					require.Zero(t, rt.idxBadRefs, name)
					require.LessOrEqual(t, rt.Stats().PeakMemory, budget, name)
					keyed += rt.keptKeyed
					capped += rt.keptCapped
					refined += rt.refinedChecks
					choices += rt.Stats().Evictions
					differ += rt.idxMismatch
				}
			}
		}
	}
	t.Logf("%d runs completed; %d choices (%d unlike the scan's); %d kept storages keyed, %d of them from a capped walk; %d refined keys checked",
		completed, choices, differ, keyed, capped, refined)
	require.Greater(t, completed, minRuns)
	require.Greater(t, keyed, minKeys)
	require.Greater(t, capped, minKeys)
	require.Greater(t, refined, minKeys)
}
