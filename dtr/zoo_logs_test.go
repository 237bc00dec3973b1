package dtr

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph/dtrlog"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// zooTrace writes the zoo model's default schedule as a DTR log
// (dtrlog.FromGraph, op times from the a100-40gb cost model) and compiles it.
func zooTrace(t testing.TB, name string, o models.Options) *dtrlog.Trace {
	t.Helper()
	g, err := models.Build(name, o)
	require.NoError(t, err)
	dev, err := sim.Device("a100-40gb")
	require.NoError(t, err)
	m, err := sim.NewMachine(g, sim.Options{Device: dev, Capacity: -1})
	require.NoError(t, err)
	ins, err := dtrlog.FromGraph(g, m.OpTime)
	require.NoError(t, err)
	tr, err := dtrlog.CompileInstrs(ins)
	require.NoError(t, err)
	tr.Name = name
	return tr
}

// lowestOK returns the lowest ratio with a successful run (1.1 if none).
func lowestOK(rs []RatioResult) float64 {
	low := 1.1
	for _, r := range rs {
		if r.Status == StatusOK && r.Ratio < low {
			low = r.Ratio
		}
	}
	return low
}

// TestGeneralityOnZooLogs replays DTR logs made from the zoo's graphs
// (architectures other than the artifact's two logs: a CIFAR ResNet, a
// MobileNet, a transformer, an LSTM; activation-heavy sizes so that the
// memory lower bound leaves room) with the reference heuristics in parity
// mode and with the best-of portfolio (SweepBest, default mode). It
// requires the portfolio never to be worse than the best reference
// heuristic at a ratio where both fit, and logs, per log, the lowest ratio
// of the 0.1 grid each reaches and the lowest the memory lower bound
// allows (docs/dtr.md, "Other logs").
func TestGeneralityOnZooLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("replays four logs with every heuristic")
	}
	logs := []struct {
		name string
		o    models.Options
	}{
		{"resnet-cifar", models.Options{Batch: 32, Depth: 20}},
		{"mobilenet_v2", models.Options{Batch: 4, Image: 96}},
		{"gpt", models.Options{Batch: 8, Seq: 256, Depth: 2, Width: 128, Heads: 4, Vocab: 1000}},
		{"lstm", models.Options{Batch: 64, Seq: 35, Depth: 2, Width: 128, Vocab: 1000}},
	}
	ctx := context.Background()
	good := 0
	for _, l := range logs {
		tr := zooTrace(t, l.name, l.o)
		base, err := MeasureBaseline(tr)
		require.NoError(t, err)
		lb := ComputeLowerBound(tr)
		lbRatio := float64(lb.Bytes) / float64(base.PeakBytes)
		allowed := math.Ceil(lbRatio*10-1e-9) / 10 // lowest grid ratio >= the bound
		refLow := 1.1
		refBest := make([]float64, len(DefaultRatios))
		for i := range refBest {
			refBest[i] = math.Inf(1)
		}
		for _, h := range ReferenceHeuristics {
			res, err := Sweep(ctx, tr, SweepOptions{Heuristic: h, Parity: true})
			require.NoError(t, err)
			refLow = min(refLow, lowestOK(res.Results))
			for i, r := range res.Results {
				if r.Status == StatusOK {
					refBest[i] = min(refBest[i], r.Overhead)
				}
			}
		}
		best, err := SweepBest(ctx, tr, nil)
		require.NoError(t, err)
		rs := make([]RatioResult, len(best))
		winners := ""
		for i, b := range best {
			rs[i] = b.RatioResult
			if b.Status == StatusOK && b.Ratio < 0.55 {
				winners += " " + b.Winner
			}
			if b.Status == StatusOK && !math.IsInf(refBest[i], 1) {
				require.LessOrEqual(t, b.Overhead, refBest[i]+0.0005, "%s ratio %.1f: best-of %s vs reference best", l.name, b.Ratio, b.Winner)
			}
		}
		low := lowestOK(rs)
		ok := low < refLow-1e-9 || low <= allowed+1e-9
		if ok {
			good++
		}
		t.Logf("%-13s %5d ops: lower bound %.3f x peak (grid %.1f); lowest ratio: reference %.1f, best-of %.1f (%v); winners below 0.55:%s",
			l.name, len(tr.Ops), lbRatio, allowed, refLow, low, ok, winners)
	}
	t.Logf("best-of beats every reference heuristic (or reaches the bound's grid ratio) on %d of %d logs", good, len(logs))
}
