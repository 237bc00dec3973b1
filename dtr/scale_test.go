package dtr

import (
	"context"
	"testing"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// resnetCIFARRun runs DTR with cfg's heuristic on the zoo's resnet-cifar of
// the given depth under a caching allocator without a capacity (as
// `sim report --device none --strategies dtr --budget 0.5` does), with the
// runtime's budget at ratio of the no-recompute peak allocated.
func resnetCIFARRun(tb testing.TB, g *graph.Graph, cfg Config, ratio float64) Stats {
	base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{Allocator: sim.NewCaching(-1), Capacity: -1})
	if err != nil {
		tb.Fatal(err)
	}
	m, err := sim.NewMachine(g, sim.Options{Allocator: sim.NewCaching(-1), Capacity: -1})
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Budget = int64(ratio * float64(base.PeakAllocated))
	_, st, err := RunOnMachine(context.Background(), m, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

func benchResnetCIFAR(b *testing.B, depth int, h Heuristic) {
	g, err := models.Build("resnet-cifar", models.Options{Depth: depth})
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Heuristic = h
	var st Stats
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st = resnetCIFARRun(b, g, cfg, 0.5)
	}
	b.ReportMetric(float64(len(g.Ops)), "graph-ops")
	b.ReportMetric(float64(st.Evictions), "evictions")
	b.ReportMetric(float64(st.HeuristicEvals), "evals")
}

// Scale: resnet-cifar at about 10k ops (depth 950) and 100k ops (depth
// 9500), budget 0.5, the lookahead heuristic of the dtr strategy. Issue 17
// asks time(100k)/time(10k) <= 15.
func BenchmarkResnetCIFAR10kLookahead(b *testing.B)  { benchResnetCIFAR(b, 950, Lookahead) }
func BenchmarkResnetCIFAR100kLookahead(b *testing.B) { benchResnetCIFAR(b, 9500, Lookahead) }
func BenchmarkResnetCIFAR10kEqClass(b *testing.B)    { benchResnetCIFAR(b, 950, HDTREqClass) }
func BenchmarkResnetCIFAR100kEqClass(b *testing.B)   { benchResnetCIFAR(b, 9500, HDTREqClass) }
