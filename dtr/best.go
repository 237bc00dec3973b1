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
	// Winner names the heuristic and mode that achieved it: "+lazy" for
	// lazy locking, "+parity" for the reference simulator's semantics.
	Winner string `json:"winner"`
}

// SweepBest is the "portfolio" strategy a static planner can afford because
// the op sequence is known in advance: it runs every heuristic with both the
// reference's eager locking and lazy locking (and Config.KeepForRemat, which
// only the next-use heuristics use), and the six reference heuristics with
// the reference simulator's exact semantics (parity mode), and keeps, per
// ratio, the lowest overhead. Because the parity runs are the reference's
// own, the portfolio is never worse than the best reference heuristic at a
// ratio where one fits.
//
// done may hold sweeps of tr already run by Sweep at the same ratios, as a
// caller that shows them has: those run with Sweep's default configuration
// (no Base, no Parity) stand in for the portfolio's eager-locking runs of
// their heuristics, which are the same runs; the others are ignored.
//
// A budget of a parity sweep of h_DTR or MSPS whose kept regions outgrow
// their limit (StatusLimit, on logs far longer than the reference simulator
// can replay) has no result and cannot win; the sweep's other budgets can.
func SweepBest(ctx context.Context, tr *dtrlog.Trace, ratios []float64, done ...*SweepResult) ([]BestResult, error) {
	return sweepBest(ctx, tr, ratios, 0, done...)
}

// sweepBest is SweepBest with the parity runs' region limit (0: the
// default).
func sweepBest(ctx context.Context, tr *dtrlog.Trace, ratios []float64, regionLimit int64, done ...*SweepResult) ([]BestResult, error) {
	if err := checkTrace(tr); err != nil {
		return nil, fmt.Errorf("dtr sweep best: %w", err)
	}
	if len(ratios) == 0 {
		ratios = DefaultRatios
	}
	reuse := func(h Heuristic) *SweepResult {
		for _, d := range done {
			if d == nil || !d.byDefault || d.Heuristic != h.String() || len(d.Results) != len(ratios) {
				continue
			}
			same := true
			for i, rr := range d.Results {
				same = same && rr.Ratio == ratios[i]
			}
			if same {
				return d
			}
		}
		return nil
	}
	best := make([]BestResult, len(ratios))
	keep := func(res *SweepResult, name string) {
		for i, rr := range res.Results {
			b := &best[i]
			if b.Winner == "" || (rr.Status == StatusOK && (b.Status != StatusOK || rr.Overhead < b.Overhead)) {
				*b = BestResult{RatioResult: rr, Winner: name}
			}
		}
	}
	for _, lazy := range []bool{false, true} {
		for _, h := range Heuristics {
			base := DefaultConfig()
			base.EvicteeMinSize = 0
			base.LazyLock = lazy
			base.KeepForRemat = true
			res := reuse(h)
			if lazy || res == nil {
				var err error
				if res, err = Sweep(ctx, tr, SweepOptions{Heuristic: h, Ratios: ratios, Base: &base}); err != nil {
					return nil, err
				}
			}
			name := h.String()
			if lazy {
				name += "+lazy"
			}
			keep(res, name)
		}
	}
	for _, h := range ReferenceHeuristics {
		res, err := Sweep(ctx, tr, SweepOptions{Heuristic: h, Ratios: ratios, Parity: true, regionLimit: regionLimit})
		if err != nil {
			return nil, err
		}
		keep(res, h.String()+"+parity")
	}
	return best, nil
}
