package dtr

import (
	"context"
	"fmt"
	"math"
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

// resnetCIFARSetup builds resnet-cifar at depth and the configuration of
// heuristic h at half its baseline peak (caching allocator, no capacity).
func resnetCIFARSetup(b *testing.B, depth int, h Heuristic) (*graph.Graph, Config) {
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
	return g, cfg
}

func benchResnetCIFAR(b *testing.B, depth int, h Heuristic) {
	g, cfg := resnetCIFARSetup(b, depth, h)
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

// BenchmarkIndexCrowded runs the lookahead heuristic with kept storages
// (the dtr strategy's) on resnet-cifar at about 10k, 100k and 1M ops
// (about 3 GB of peak RSS at 1M), budget 0.5, with the index's crowded
// buckets split into finer heaps (split, the default) and with one heap
// per bucket whatever its size (one-heap), and reports the heap nodes a
// choice looks at. On a deep model of a few layer kinds one heap per
// bucket makes that figure grow with the model (its buckets hold kinds a
// few percent apart in cost per byte).
//
//	go test ./dtr -run XXX -bench IndexCrowded -benchtime 1x
//	go test ./dtr -run XXX -bench 'IndexCrowded/depth=9500$/' -benchtime 3x
func BenchmarkIndexCrowded(b *testing.B) {
	for _, depth := range []int{950, 9500, 95000} {
		// a depth's graph is built only when -bench selects it
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			g, cfg := resnetCIFARSetup(b, depth, Lookahead)
			cfg.KeepForRemat = true
			for _, c := range []struct {
				name    string
				crowded int
			}{{"split", idxCrowded}, {"one-heap", math.MaxInt}} {
				b.Run(c.name, func(b *testing.B) {
					var rt *Runtime
					for i := 0; i < b.N; i++ {
						m, err := sim.NewMachine(g, sim.Options{Allocator: alloc.NewCaching(-1), Capacity: -1})
						if err != nil {
							b.Fatal(err)
						}
						tune := func(r *Runtime) { rt, r.idx.crowded = r, c.crowded }
						if _, _, _, err := runOnMachine(context.Background(), m, cfg, false, tune); err != nil {
							b.Fatal(err)
						}
					}
					nodes, choices := rt.idxNodes, rt.idxChoices
					b.ReportMetric(float64(len(g.Ops)), "graph-ops")
					b.ReportMetric(float64(nodes)/float64(choices), "nodes/choice")
					b.ReportMetric(float64(choices), "choices")
				})
			}
		})
	}
}
