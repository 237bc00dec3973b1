package dtr

import (
	"context"
	"testing"

	"github.com/remat-dev/remat/sim/alloc"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// resnetCIFARRun runs DTR with cfg on g under a caching allocator without
// a capacity (as `sim report --device none --strategies dtr` does).
func resnetCIFARRun(tb testing.TB, g *graph.Graph, cfg Config) Stats {
	m, err := sim.NewMachine(g, sim.Options{Allocator: alloc.NewCaching(-1), Capacity: -1})
	if err != nil {
		tb.Fatal(err)
	}
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
	base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{Allocator: alloc.NewCaching(-1), Capacity: -1})
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Heuristic = h
	cfg.Budget = base.PeakAllocated / 2
	var st Stats
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st = resnetCIFARRun(b, g, cfg)
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
