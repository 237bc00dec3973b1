package dtr

import (
	"context"
	"fmt"

	"github.com/remat-dev/remat/graph/dtrlog"
)

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
