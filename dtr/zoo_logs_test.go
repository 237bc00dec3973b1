package dtr

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph/dtrlog"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/internal/zoolog"
)

// zooTrace writes the zoo model's default schedule as a DTR log
// (dtrlog.FromGraph, op times from the a100-40gb cost model) and compiles it.
func zooTrace(t testing.TB, name string, o models.Options) *dtrlog.Trace {
	t.Helper()
	tr, err := zoolog.Trace(name, o)
	require.NoError(t, err)
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

// zooLogs are the logs made from zoo graphs for the generality check:
// architectures other than the artifact's two logs, with activation-heavy
// sizes so that the memory lower bound leaves room.
var zooLogs = []struct {
	name, opts string
	o          models.Options
}{
	{"resnet-cifar", "batch 32, depth 20", models.Options{Batch: 32, Depth: 20}},
	{"resnet32", "batch 64", models.Options{Batch: 64}},
	{"mobilenet_v2", "batch 4, image 96", models.Options{Batch: 4, Image: 96}},
	{"gpt", "batch 8, seq 256, 2 x 128, 4 heads", models.Options{Batch: 8, Seq: 256, Depth: 2, Width: 128, Heads: 4, Vocab: 1000}},
	{"lstm", "batch 64, seq 35, 2 x 128", models.Options{Batch: 64, Seq: 35, Depth: 2, Width: 128, Vocab: 1000}},
	{"densenet121", "batch 8, image 64", models.Options{Batch: 8, Image: 64}},
	{"resnet50", "batch 8, image 96", models.Options{Batch: 8, Image: 96}},
}

// frontierSteps is the number of bisection steps of lowestFeasible below a
// configuration's lowest successful grid ratio (a resolution of 0.1/16).
const frontierSteps = 4

// lowestFeasible bisects the lowest ratio in (grid - 0.1, grid] at which run
// succeeds, given that it succeeds at grid (success is not always monotone
// in the budget: the result is the frontier the bisection finds).
func lowestFeasible(grid float64, run func(ratio float64) bool) float64 {
	lo, hi := grid-0.1, grid
	for k := 0; k < frontierSteps && lo > 0; k++ {
		mid := (lo + hi) / 2
		if run(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// frontier renders, per log, the lower bound, the lowest ratio of the 0.1
// grid the reference heuristics (parity mode) and the portfolio
// (SweepBest's configurations) reach, and the bisected lowest feasible
// ratio of each; it requires the portfolio to fit, and to be no worse than
// the best reference heuristic, at every grid ratio where one fits.
func frontier(t *testing.T) string {
	ctx := context.Background()
	type entry struct {
		tr   *dtrlog.Trace
		desc string
	}
	var logs []entry
	if _, ok := logsPresent(); ok {
		for _, m := range []string{"resnet32", "unet"} {
			logs = append(logs, entry{loadTrace(t, m), m + ".log (DTR artifact)"})
		}
	}
	for _, l := range zooLogs {
		logs = append(logs, entry{zooTrace(t, l.name, l.o), l.name + " (zoo, " + l.opts + ")"})
	}
	type config struct {
		h            Heuristic
		parity, lazy bool
	}
	var configs []config
	for _, h := range ReferenceHeuristics {
		configs = append(configs, config{h, true, false})
	}
	for _, h := range Heuristics {
		configs = append(configs, config{h, false, false}, config{h, false, true})
	}
	var sb strings.Builder
	sb.WriteString("| log | ops | lower bound | grid: reference | grid: best-of | frontier: reference | frontier: best-of | best-of / bound |\n|---|---|---|---|---|---|---|---|\n")
	good := 0
	for _, l := range logs {
		tr := l.tr
		base, err := MeasureBaseline(tr)
		require.NoError(t, err)
		lb := tightBound(t, tr)
		lbRatio := float64(lb.Bytes) / float64(base.PeakBytes)
		allowed := math.Ceil(lbRatio*10-1e-9) / 10 // lowest grid ratio >= the bound
		refBest := make([]float64, len(DefaultRatios))
		best := make([]float64, len(DefaultRatios))
		for i := range refBest {
			refBest[i], best[i] = math.Inf(1), math.Inf(1)
		}
		refLow, low, refF, bestF := 1.1, 1.1, 1.1, 1.1
		for _, c := range configs {
			o := SweepOptions{Heuristic: c.h, Parity: c.parity}
			if !c.parity {
				b := DefaultConfig()
				b.EvicteeMinSize = 0
				b.LazyLock = c.lazy
				b.KeepForRemat = true
				o.Base = &b
			}
			res, err := Sweep(ctx, tr, o)
			require.NoError(t, err)
			g := lowestOK(res.Results)
			for i, r := range res.Results {
				if r.Status != StatusOK {
					continue
				}
				// no run holds less than the bound
				require.GreaterOrEqual(t, r.PeakMemoryBytes, lb.Bytes, "%s %v ratio %.1f", tr.Name, c, r.Ratio)
				best[i] = min(best[i], r.Overhead)
				if c.parity {
					refBest[i] = min(refBest[i], r.Overhead)
				}
			}
			f := g
			if g <= 1 {
				f = lowestFeasible(g, func(ratio float64) bool {
					o.Ratios = []float64{ratio}
					res, err := Sweep(ctx, tr, o)
					require.NoError(t, err)
					ok := res.Results[0].Status == StatusOK
					if ok {
						require.GreaterOrEqual(t, res.Results[0].PeakMemoryBytes, lb.Bytes, "%s %v ratio %.4f", tr.Name, c, ratio)
					}
					return ok
				})
			}
			low, bestF = min(low, g), min(bestF, f)
			if c.parity {
				refLow, refF = min(refLow, g), min(refF, f)
			}
		}
		for i := range best {
			if !math.IsInf(refBest[i], 1) {
				require.LessOrEqual(t, best[i], refBest[i], "%s ratio %.1f", tr.Name, DefaultRatios[i])
			}
		}
		if low < refLow-1e-9 || low <= allowed+1e-9 {
			good++
		}
		grid := func(x float64) string {
			if x > 1 {
				return "none"
			}
			return fmt.Sprintf("%.1f", x)
		}
		fmt.Fprintf(&sb, "| %s | %d | %.3f | %s | %s | %.3f | %.3f | %.2f |\n", l.desc, len(tr.Ops), lbRatio, grid(refLow), grid(low), refF, bestF, bestF/lbRatio)
	}
	fmt.Fprintf(&sb, "\nThe best-of reaches a lower grid ratio than every reference heuristic, or the lowest grid ratio the bound allows, on %d of %d logs.\n", good, len(logs))
	return sb.String()
}

// TestFrontier checks the portfolio against the reference heuristics on the
// artifact's logs (when present) and on DTR logs made from zoo graphs, and
// keeps the table of docs/dtr.md ("Other logs") between its frontier
// markers (go test ./dtr -run TestFrontier -update). Without the artifact's
// logs it checks the zoo logs only and leaves the table alone.
func TestFrontier(t *testing.T) {
	if testing.Short() {
		t.Skip("bisects the lowest feasible budget of every heuristic on nine logs")
	}
	got := frontier(t)
	t.Log("\n" + got)
	if _, ok := logsPresent(); !ok {
		return
	}
	docPath := filepath.Join("..", "docs", "dtr.md")
	doc, err := os.ReadFile(docPath)
	require.NoError(t, err)
	const begin, end = "<!-- frontier:begin (go test ./dtr -run TestFrontier -update) -->\n", "<!-- frontier:end -->"
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	require.True(t, i >= 0 && j > i, "docs/dtr.md has the frontier markers")
	newDoc := string(doc[:i+len(begin)]) + "\n" + got + "\n" + string(doc[j:])
	if *update {
		require.NoError(t, os.WriteFile(docPath, []byte(newDoc), 0o644))
		doc = []byte(newDoc)
	}
	require.Equal(t, newDoc, string(doc), "docs/dtr.md frontier table is stale: go test ./dtr -run TestFrontier -update")
}
