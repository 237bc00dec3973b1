package dtr

import (
	"context"
	"fmt"
	"strings"

	"github.com/remat-dev/remat/graph/dtrlog"
)

// Cell formats one sweep result as in the reference tables: the overhead
// with three decimals, "thr" for thrashing, "OOM" for out of memory.
func (rr RatioResult) Cell() string {
	switch rr.Status {
	case StatusOK:
		return fmt.Sprintf("%.3f", rr.Overhead)
	case StatusThrash:
		return "thr"
	}
	return "OOM"
}

// SweepTable runs Sweep for every heuristic on tr and renders a Markdown
// table (rows: heuristics; columns: ratios).
func SweepTable(ctx context.Context, tr *dtrlog.Trace, hs []Heuristic, parity bool, base *Config) (string, []*SweepResult, error) {
	if err := checkTrace(tr); err != nil {
		return "", nil, fmt.Errorf("dtr sweep table: %w", err)
	}
	var b strings.Builder
	var all []*SweepResult
	b.WriteString("| heuristic |")
	for _, r := range DefaultRatios {
		fmt.Fprintf(&b, " %.1f |", r)
	}
	b.WriteString("\n|---|")
	for range DefaultRatios {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, h := range hs {
		res, err := Sweep(ctx, tr, SweepOptions{Heuristic: h, Parity: parity, Base: base})
		if err != nil {
			return "", nil, err
		}
		all = append(all, res)
		fmt.Fprintf(&b, "| %s |", h)
		for _, rr := range res.Results {
			fmt.Fprintf(&b, " %s |", rr.Cell())
		}
		b.WriteString("\n")
	}
	return b.String(), all, nil
}

// BestResult is, per ratio, the best successful run among several
// configurations (the lowest overhead; failures only if every one fails).
type BestResult struct {
	RatioResult
	// Winner names the heuristic and locking mode that achieved it.
	Winner string `json:"winner"`
}

// SweepBest is the "portfolio" strategy a static planner can afford because
// the op sequence is known in advance: it runs every heuristic with both the
// reference's eager locking and lazy locking (and Config.KeepForRemat, which
// only the next-use heuristics use) and keeps, per ratio, the lowest
// overhead.
func SweepBest(ctx context.Context, tr *dtrlog.Trace, ratios []float64) ([]BestResult, error) {
	if err := checkTrace(tr); err != nil {
		return nil, fmt.Errorf("dtr sweep best: %w", err)
	}
	if len(ratios) == 0 {
		ratios = DefaultRatios
	}
	best := make([]BestResult, len(ratios))
	for _, lazy := range []bool{false, true} {
		for _, h := range Heuristics {
			base := DefaultConfig()
			base.EvicteeMinSize = 0
			base.LazyLock = lazy
			base.KeepForRemat = true
			res, err := Sweep(ctx, tr, SweepOptions{Heuristic: h, Ratios: ratios, Base: &base})
			if err != nil {
				return nil, err
			}
			name := h.String()
			if lazy {
				name += "+lazy"
			}
			for i, rr := range res.Results {
				b := &best[i]
				if b.Winner == "" || (rr.Status == StatusOK && (b.Status != StatusOK || rr.Overhead < b.Overhead)) {
					*b = BestResult{RatioResult: rr, Winner: name}
				}
			}
		}
	}
	return best, nil
}
