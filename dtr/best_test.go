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
