package sublinear

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

var (
	bench10kOnce sync.Once
	bench10k     *graph.Graph
)

// graph10k is the synthetic training step of about 10,000 ops (1250 units
// of conv/bn/relu with residual adds, forward and backward).
func graph10k(b testing.TB) *graph.Graph {
	bench10kOnce.Do(func() { bench10k = trainingGraph(b, 1250) })
	return bench10k
}

func TestGraph10kSize(t *testing.T) {
	g := graph10k(t)
	require.InDelta(t, 10000, len(g.Ops), 200)
}

// TestEvaluateAllocationFree: once its buffers have grown, an evaluator
// allocates nothing per genome.
func TestEvaluateAllocationFree(t *testing.T) {
	g := trainingGraph(t, 100)
	s, err := newMgeSearch(context.Background(), g, DefaultSearchOptions())
	require.NoError(t, err)
	ev := newMgeEvaluator(s.p)
	gs := s.p.thresholdSplits(s.p.resident0/50+1<<20, ev.mark, nil)
	ev.evaluate(gs)
	allocs := testing.AllocsPerRun(20, func() { ev.evaluate(gs) })
	require.Zero(t, allocs)
}

// BenchmarkEvaluate10k measures one genome evaluation on the 10k-op graph.
func BenchmarkEvaluate10k(b *testing.B) {
	g := graph10k(b)
	s, err := newMgeSearch(context.Background(), g, DefaultSearchOptions())
	require.NoError(b, err)
	ev := newMgeEvaluator(s.p)
	gs := s.p.thresholdSplits(64<<20, ev.mark, nil)
	ev.evaluate(gs)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev.evaluate(gs)
	}
}

// BenchmarkThresholdSearch10k: MegEngine's defaults (threshold presets, no
// genetic search) on the 10k-op graph. Target < 0.5 s.
func BenchmarkThresholdSearch10k(b *testing.B) {
	g := graph10k(b)
	opts := DefaultSearchOptions()
	b.ResetTimer()
	var rep SearchReport
	for i := 0; i < b.N; i++ {
		var err error
		_, rep, err = Thresholds(context.Background(), g, opts)
		require.NoError(b, err)
	}
	b.ReportMetric(float64(rep.Peak)/(1<<20), "peak_MiB")
	b.ReportMetric(float64(rep.BaselinePeak)/(1<<20), "baseline_MiB")
	b.ReportMetric(float64(rep.Evaluations), "evals")
}

// BenchmarkGA10k: presets + 20 generations with pool 20 on the 10k-op graph,
// with 1 and 2 workers. Target < 3 s, and faster with 2 workers.
func BenchmarkGA10k(b *testing.B) {
	g := graph10k(b)
	for _, w := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) {
			opts := DefaultSearchOptions()
			opts.Workers = w
			opts.GeneticIters = 20
			opts.PoolSize = 20
			var rep SearchReport
			for i := 0; i < b.N; i++ {
				var err error
				_, rep, err = Genetic(context.Background(), g, opts)
				require.NoError(b, err)
			}
			b.ReportMetric(float64(rep.Peak)/(1<<20), "peak_MiB")
			b.ReportMetric(float64(rep.Evaluations), "evals")
		})
	}
}

// BenchmarkBudget10k: budget mode (20 generations, pool 20, polish) on the
// 10k-op graph with a budget halfway between the threshold search's peak
// and the baseline.
func BenchmarkBudget10k(b *testing.B) {
	g := graph10k(b)
	_, base, err := Thresholds(context.Background(), g, DefaultSearchOptions())
	require.NoError(b, err)
	budget := base.Peak + (base.BaselinePeak-base.Peak)/2
	b.ResetTimer()
	var rep SearchReport
	for i := 0; i < b.N; i++ {
		_, rep, err = WithinBudget(context.Background(), g, budget, DefaultSearchOptions())
		require.NoError(b, err)
	}
	b.ReportMetric(float64(rep.RecomputeNs)/1e6, "recompute_ms")
	b.ReportMetric(float64(base.RecomputeNs)/1e6, "thresh_recompute_ms")
	b.ReportMetric(float64(rep.Evaluations), "evals")
}

// BenchmarkPlanMemo runs the threshold search (sublinear), the genetic
// search (sublinear-ga) and budget mode (sublinear-budget, a budget halfway
// from the threshold search's peak to the baseline's) on the zoo's LSTM
// language model
// (380 steps) and resnet-cifar (depth 950), about 10k ops each, with the
// plan memo (score) and without it, and reports the evaluations and how
// many of them reused an earlier genome's plan. Both variants return the
// same plans (TestPlanMemoSamePlans).
//
//	go test ./sublinear -run XXX -bench PlanMemo -benchtime 2x
func BenchmarkPlanMemo(b *testing.B) {
	for _, m := range []struct {
		name string
		o    models.Options
	}{{"lstm", models.Options{Seq: 380}}, {"resnet-cifar", models.Options{Depth: 950}}} {
		g, err := models.Build(m.name, m.o)
		require.NoError(b, err)
		base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{Capacity: -1})
		require.NoError(b, err)
		// a budget halfway from the threshold search's peak to the
		// baseline's: feasible, with room to trade
		_, thr, err := Thresholds(context.Background(), g, DefaultSearchOptions())
		require.NoError(b, err)
		budget := (thr.Peak + base.PeakAllocated) / 2
		for _, strategy := range []string{StrategySublinear, StrategySublinearGA, StrategySublinearBudget} {
			for _, memo := range []bool{true, false} {
				name := fmt.Sprintf("%s/%s/memo=%v", m.name, strategy, memo)
				b.Run(name, func(b *testing.B) {
					opts := DefaultSearchOptions()
					opts.noPlanMemo = !memo
					var rep SearchReport
					var reused int64
					for i := 0; i < b.N; i++ {
						rep, reused = runWithMemo(b, g, opts, strategy, budget)
					}
					b.ReportMetric(float64(rep.Evaluations), "evaluations")
					b.ReportMetric(float64(reused), "plan-reuses")
				})
			}
		}
	}
}
