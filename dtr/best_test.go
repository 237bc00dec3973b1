package dtr

import (
	"context"
	"testing"
	"time"

	"github.com/remat-dev/remat/graph/dtrlog"
	"github.com/remat-dev/remat/graph/models"
	"github.com/stretchr/testify/require"
)

// TestSweepBestPruning checks that the portfolio's caps (a run after the
// first that fits a ratio stops once it recomputes as much as the best so
// far) leave every best-of cell, winner and counter as running every run
// to the end does, and that they stop some runs early.
func TestSweepBestPruning(t *testing.T) {
	type log struct {
		name string
		tr   *dtrlog.Trace
	}
	var logs []log
	if _, ok := logsPresent(); ok {
		logs = append(logs, log{"unet", loadTrace(t, "unet")}, log{"resnet32", loadTrace(t, "resnet32")})
	}
	if !testing.Short() || len(logs) == 0 {
		logs = append(logs, log{"lstm (zoo)", zooTrace(t, "lstm", models.Options{})})
	}
	if testing.Short() {
		logs = logs[:1] // the race detector's run
	}
	ctx := context.Background()
	for _, l := range logs {
		t0 := time.Now()
		full, err := sweepBest(ctx, l.tr, nil, bestKnobs{noPrune: true})
		require.NoError(t, err)
		pruned := 0
		got, err := sweepBest(ctx, l.tr, nil, bestKnobs{pruned: &pruned})
		require.NoError(t, err)
		require.Equal(t, full, got, l.name)
		require.Positive(t, pruned, "%s: no run was stopped early", l.name)
		t.Logf("%s (%v): %d of %d runs stopped early or skipped", l.name, time.Since(t0), pruned, (2*len(Heuristics)+len(ReferenceHeuristics))*len(DefaultRatios))
	}
}

// TestSweepProgress: Sweep calls Progress once per ratio whatever the
// workers; SweepBestWith reports each of its budget runs, the done sweeps
// standing in for its eager ones, counting up to a total that is right from
// the first call, with the same result as SweepBest.
func TestSweepProgress(t *testing.T) {
	ctx := context.Background()
	tr := zooTrace(t, "resnet-cifar", models.Options{Batch: 32, Depth: 20})
	ratios := []float64{0.9, 0.6, 0.4, 0.3}
	for _, w := range []int{1, 2, 3} {
		calls := 0
		_, err := Sweep(ctx, tr, SweepOptions{Heuristic: LookaheadMSPS, Ratios: ratios, Workers: w, Progress: func() { calls++ }})
		require.NoError(t, err)
		require.Equal(t, len(ratios), calls, "workers %d", w)
	}
	plain, err := SweepBest(ctx, tr, ratios)
	require.NoError(t, err)
	var rows []*SweepResult
	for _, h := range Heuristics[:4] {
		res, err := Sweep(ctx, tr, SweepOptions{Heuristic: h, Ratios: ratios})
		require.NoError(t, err)
		rows = append(rows, res)
	}
	for _, done := range [][]*SweepResult{nil, rows} {
		var seen, totals []int
		want := (2*len(Heuristics) + len(ReferenceHeuristics) - len(done)) * len(ratios)
		got, err := SweepBestWith(ctx, tr, ratios, BestOptions{Done: done, Progress: func(d, total int) {
			seen, totals = append(seen, d), append(totals, total)
		}})
		require.NoError(t, err)
		require.Equal(t, plain, got)
		require.Len(t, seen, want)
		for i, d := range seen {
			require.Equal(t, i+1, d)
			require.Equal(t, want, totals[i])
		}
	}
}
