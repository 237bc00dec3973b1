package report

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/dtr"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/internal/zoolog"
)

// TestSweepDTRLogSearchInBestOf: with the portfolio and the offline search
// both asked for (`--heuristic all,search`), the best-of row is the
// portfolio's (dtr.SweepBest) except where the search's run recomputed
// strictly less, which it then names as the winner.
func TestSweepDTRLogSearchInBestOf(t *testing.T) {
	ctx := context.Background()
	ratios := []float64{0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3}
	won := 0
	for _, l := range []struct {
		name string
		o    models.Options
	}{
		{"resnet-cifar", models.Options{Batch: 32, Depth: 20}},
		{"gpt", models.Options{Batch: 8, Seq: 256, Depth: 2, Width: 128, Heads: 4, Vocab: 1000}},
	} {
		tr, err := zoolog.Trace(l.name, l.o)
		require.NoError(t, err)
		sw, err := SweepDTRLog(ctx, l.name, tr, DTRSweepOptions{Heuristics: dtr.Heuristics, Search: true, SearchSeed: 1, Ratios: ratios, Portfolio: true})
		require.NoError(t, err)
		search := sw.Runs[len(sw.Runs)-1]
		require.Equal(t, SearchHeuristic, search.Heuristic)
		port, err := dtr.SweepBest(ctx, tr, ratios)
		require.NoError(t, err)
		for i := range ratios {
			s, p, b := search.Results[i], port[i], sw.Best[i]
			if s.Status == dtr.StatusOK && (p.Status != dtr.StatusOK || s.Overhead < p.Overhead) {
				require.Equal(t, SearchHeuristic, b.Winner, "%s at %g", l.name, ratios[i])
				require.Equal(t, s, b.RatioResult)
				won++
				continue
			}
			require.Equal(t, p, b, "%s at %g", l.name, ratios[i])
		}
		var tab strings.Builder
		require.NoError(t, sw.Write(&tab, FormatTable))
		require.Contains(t, tab.String(), "best-of (portfolio, search)")
	}
	t.Logf("the search won %d cells", won)
	require.Positive(t, won, "no cell exercises the search's win")
}

// TestSweepDTRLogProgress: a log sweep with the portfolio and the search
// reports every budget run it makes, counting up by one to a total that is
// exact from the portfolio's first run on (rows, search, then the
// portfolio's lazy and parity runs), and ends at done == total.
func TestSweepDTRLogProgress(t *testing.T) {
	tr, err := zoolog.Trace("resnet-cifar", models.Options{Batch: 32, Depth: 20})
	require.NoError(t, err)
	ratios := []float64{0.8, 0.5, 0.3}
	type call struct {
		done, total int
		what        string
	}
	var calls []call
	_, err = SweepDTRLog(context.Background(), "zoo", tr, DTRSweepOptions{Heuristics: dtr.Heuristics, Search: true, SearchRuns: 4, Ratios: ratios, Portfolio: true,
		Progress: func(done, total int, what string) { calls = append(calls, call{done, total, what}) }})
	require.NoError(t, err)
	want := len(ratios) * (len(dtr.Heuristics) + 1 + len(dtr.Heuristics) + len(dtr.ReferenceHeuristics))
	require.Len(t, calls, want)
	for i, c := range calls {
		require.Equal(t, i+1, c.done)
		require.Equal(t, want, c.total, "call %d (%s)", i, c.what)
	}
	require.Equal(t, dtr.Heuristics[0].String(), calls[0].what)
	require.Equal(t, SearchHeuristic, calls[len(ratios)*len(dtr.Heuristics)].what)
	require.Equal(t, "portfolio", calls[len(calls)-1].what)
}
