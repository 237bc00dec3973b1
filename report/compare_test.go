package report

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/strategy"
)

var update = flag.Bool("update", false, "rewrite golden files")

// golden compares got with testdata/name, rewriting it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "golden file missing: run go test ./report -update")
	assert.Equal(t, string(want), string(got))
}

func TestCompareEveryStrategyOnResNet18(t *testing.T) {
	g, err := models.Build("resnet18", models.Options{Batch: 2})
	require.NoError(t, err)
	o, err := strategy.OptionsFrom(nil)
	require.NoError(t, err)
	o.Device, err = sim.Device("a100-40gb")
	require.NoError(t, err)
	rep, err := Compare(context.Background(), g, o, nil, nil)
	require.NoError(t, err)
	require.Len(t, rep.Rows, len(strategy.All()))
	for _, r := range rep.Rows {
		assert.NotEqual(t, StatusError, r.Status, "%s: %s", r.Strategy, r.Reason)
		if r.Plan != nil && r.Strategy != "dtr" {
			_, err := sim.Simulate(g, r.Plan, sim.Options{})
			assert.NoError(t, err, r.Strategy)
		}
	}
	assert.Equal(t, strategy.Baseline, rep.Rows[0].Strategy)
	assert.InDelta(t, 1.0, rep.Rows[0].Overhead, 1e-12)
}

func TestCompareAddsTheBaselineFirst(t *testing.T) {
	g, err := models.Build("chain", models.Options{Depth: 8})
	require.NoError(t, err)
	o, err := strategy.OptionsFrom(nil)
	require.NoError(t, err)
	sts, err := strategy.Resolve([]string{"chen-sqrt"})
	require.NoError(t, err)
	rep, err := Compare(context.Background(), g, o, sts, nil)
	require.NoError(t, err)
	require.Len(t, rep.Rows, 2)
	assert.Equal(t, strategy.Baseline, rep.Rows[0].Strategy)
	assert.Equal(t, "chen-sqrt", rep.Rows[1].Strategy)
}

func TestCompareCanceled(t *testing.T) {
	g, err := models.Build("chain", models.Options{Depth: 8})
	require.NoError(t, err)
	o, err := strategy.OptionsFrom(nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := Compare(ctx, g, o, nil, nil)
	assert.Nil(t, rep)
	assert.ErrorIs(t, err, sim.ErrCanceled)
	_, err = SweepBudgets(ctx, g, o, nil, []float64{0.5}, nil, nil)
	assert.ErrorIs(t, err, sim.ErrCanceled)
}

// TestCompareNothingFits: when no strategy fits the budget, the report
// names the smallest peak as such, not as the best.
func TestCompareNothingFits(t *testing.T) {
	g, err := models.Build("chain", models.Options{Depth: 8})
	require.NoError(t, err)
	o, err := strategy.OptionsFrom(nil)
	require.NoError(t, err)
	o.Budget = 1 // byte
	sts, err := strategy.Resolve([]string{"chen-sqrt"})
	require.NoError(t, err)
	rep, err := Compare(context.Background(), g, o, sts, nil)
	require.NoError(t, err)
	var sb strings.Builder
	require.NoError(t, rep.Write(&sb, FormatTable))
	assert.Contains(t, sb.String(), "no strategy fits; smallest peak: "+rep.Best+";")
	assert.NotContains(t, sb.String(), "best: ")
}

// TestCompareSavedScope: with dtr.budget_scope saved the dtr row fits its
// budget of saved activations though its allocated peak passes it, its
// JSON row and its note give the saved activations' peak, and the
// baseline is still judged on its whole peak.
func TestCompareSavedScope(t *testing.T) {
	g, err := models.Build("resnet18", models.Options{Batch: 4})
	require.NoError(t, err)
	s, _, err := config.Load(config.MapEnv{"REMAT_DTR_BUDGET_SCOPE": "saved", "REMAT_DTR_HEURISTIC": "dtr-eqclass"})
	require.NoError(t, err)
	o, err := strategy.OptionsFrom(s)
	require.NoError(t, err)
	o.Allocator = strategy.AllocIdeal
	o.Budget = 40 << 20
	sts, err := strategy.Resolve([]string{"dtr"})
	require.NoError(t, err)
	rep, err := Compare(context.Background(), g, o, sts, nil)
	require.NoError(t, err)
	require.Len(t, rep.Rows, 2)
	none, dtr := rep.Rows[0], rep.Rows[1]
	assert.False(t, none.FitsBudget)
	assert.Zero(t, none.SavedPeak)
	require.Equal(t, StatusOK, dtr.Status, dtr.Reason)
	assert.True(t, dtr.FitsBudget)
	assert.Greater(t, dtr.PeakAllocated, o.Budget)
	require.Positive(t, dtr.SavedPeak)
	assert.Less(t, dtr.SavedPeak, dtr.PeakAllocated)
	var sb strings.Builder
	require.NoError(t, rep.Write(&sb, FormatTable))
	assert.Contains(t, sb.String(), "- dtr: the budget bounds the saved activations (dtr.budget_scope saved), checked after each save as remat_torch.dtr does: their peak is "+Bytes(dtr.SavedPeak).Human)
	sb.Reset()
	require.NoError(t, rep.Write(&sb, FormatJSON))
	assert.Contains(t, sb.String(), `"saved_peak":`)
}

// TestWorkers: a report and a sweep are the same, byte for byte, whether
// their runs go one at a time or four at once (the race detector checks the
// runs' sharing of the graph and options; .ci/run runs this package with
// it), with a progress report per run and one at the end.
func TestWorkers(t *testing.T) {
	for _, m := range []struct {
		name string
		o    models.Options
	}{{"resnet-cifar", models.Options{Depth: 8, Batch: 4}}, {"chain", models.Options{Depth: 16}}} {
		g, err := models.Build(m.name, m.o)
		require.NoError(t, err)
		o, err := strategy.OptionsFrom(nil)
		require.NoError(t, err)
		o, err = strategy.WithBudgetRatio(context.Background(), g, o, 0.5)
		require.NoError(t, err)
		var rep, sw [2]string
		for i, w := range []int{1, 4} {
			var calls atomic.Int64
			count := func(done, total int, what string) { calls.Add(1) }
			r, err := compare(context.Background(), g, o, nil, count, w)
			require.NoError(t, err)
			require.Len(t, r.Rows, len(strategy.All()))
			require.Equal(t, int64(len(r.Rows)+1), calls.Load(), "report progress")
			rep[i] = writeJSON(t, func(sb *strings.Builder) error { return r.Write(sb, FormatJSON) })
			calls.Store(0)
			s, err := sweepBudgets(context.Background(), g, o, nil, []float64{1, 0.7, 0.5, 0.3}, nil, count, w)
			require.NoError(t, err)
			require.Len(t, s.Points, 4*len(s.Strategies))
			require.Equal(t, int64(len(s.Points)+1), calls.Load(), "sweep progress")
			sw[i] = writeJSON(t, func(sb *strings.Builder) error { return s.Write(sb, FormatJSON) })
		}
		require.Equal(t, rep[0], rep[1], m.name)
		require.Equal(t, sw[0], sw[1], m.name)
	}
	// the worker count: one per CPU, fewer on large graphs, at least one
	big := &graph.Graph{Ops: make([]graph.Op, 1<<20)}
	assert.Equal(t, 1, parallelRuns(big, 40))
	assert.Equal(t, 1, parallelRuns(&graph.Graph{}, 1))
	assert.LessOrEqual(t, parallelRuns(&graph.Graph{}, 40), runtime.GOMAXPROCS(0))
}

// writeJSON returns what write writes.
func writeJSON(t *testing.T, write func(*strings.Builder) error) string {
	t.Helper()
	var sb strings.Builder
	require.NoError(t, write(&sb))
	return sb.String()
}
