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
// Only a run that recomputes less than the best so far can win a ratio,
// so the runs after the first that fits one stop once they have recomputed
// as much as it: the result is the one running every run to the end gives.
//
// A budget of a parity sweep of h_DTR or MSPS whose kept regions outgrow
// their limit (StatusLimit, on logs far longer than the reference simulator
// can replay) has no result and cannot win; the sweep's other budgets can.
func SweepBest(ctx context.Context, tr *dtrlog.Trace, ratios []float64, done ...*SweepResult) ([]BestResult, error) {
	return sweepBest(ctx, tr, ratios, bestKnobs{}, done...)
}

// BestOptions are SweepBestWith's settings beyond the ratios.
type BestOptions struct {
	// Done: sweeps already run, as SweepBest's done.
	Done []*SweepResult
	// Progress, if set, is called after each budget run of the portfolio
	// (or each budget a cap skips) with the runs done and their total, one
	// call at a time.
	Progress func(done, total int)
}

// SweepBestWith is SweepBest with a progress callback.
func SweepBestWith(ctx context.Context, tr *dtrlog.Trace, ratios []float64, o BestOptions) ([]BestResult, error) {
	return sweepBest(ctx, tr, ratios, bestKnobs{progress: o.Progress}, o.Done...)
}

// bestKnobs are sweepBest's settings for tests.
type bestKnobs struct {
	// regionLimit: the parity runs' region limit (0: the default)
	regionLimit int64
	// noPrune runs every run to its end (see caps in sweepBest)
	noPrune bool
	// pruned, if set, counts the runs (one ratio each) stopped by a cap
	// below the thrash limit or skipped
	pruned *int
	// progress: BestOptions.Progress
	progress func(done, total int)
}

// sweepBest is SweepBest with settings for tests.
func sweepBest(ctx context.Context, tr *dtrlog.Trace, ratios []float64, k bestKnobs, done ...*SweepResult) ([]BestResult, error) {
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
	// the sweeps to run: the lazy runs, the eager runs no done sweep
	// stands in for, the parity runs
	sweeps := len(Heuristics) + len(ReferenceHeuristics)
	for _, h := range Heuristics {
		if reuse(h) == nil {
			sweeps++
		}
	}
	var tick func() // SweepOptions.Progress: one call per budget run
	if k.progress != nil {
		runsDone := 0
		tick = func() {
			runsDone++
			k.progress(runsDone, sweeps*len(ratios))
		}
	}
	best := make([]BestResult, len(ratios))
	keep := func(res *SweepResult, name string, caps []int64) {
		for i, rr := range res.Results {
			if k.pruned != nil && caps != nil && (caps[i] < 0 || (caps[i] > 0 && rr.Status == StatusThrash && rr.RematComputeNs <= res.Baseline.ComputeNs)) {
				*k.pruned++
			}
			b := &best[i]
			if b.Winner == "" || (rr.Status == StatusOK && (b.Status != StatusOK || rr.Overhead < b.Overhead)) {
				*b = BestResult{RatioResult: rr, Winner: name}
			}
		}
	}
	// A run can only win a ratio with less rematerialization compute than
	// the best so far: every completed run computes each op of the trace
	// once and a log sweep does not swap, so its clock is 1 + the model
	// compute + its rematerialization compute, and a tie keeps the earlier
	// winner. The runs after the first that fits a ratio stop once they
	// recompute as much as it (or are skipped when it recomputed nothing),
	// which leaves the best-of as running them to the end would.
	caps := func() []int64 {
		if k.noPrune {
			return nil
		}
		c := make([]int64, len(best))
		for i := range best {
			b := &best[i]
			switch {
			case b.Winner == "" || b.Status != StatusOK:
			case b.RematComputeNs == 0:
				c[i] = -1
			case b.RematComputeNs > 1:
				c[i] = b.RematComputeNs - 1
			}
		}
		return c
	}
	for _, lazy := range []bool{false, true} {
		for _, h := range Heuristics {
			base := DefaultConfig()
			base.EvicteeMinSize = 0
			base.LazyLock = lazy
			base.KeepForRemat = true
			res := reuse(h)
			var c []int64
			if lazy || res == nil {
				var err error
				c = caps()
				if res, err = Sweep(ctx, tr, SweepOptions{Heuristic: h, Ratios: ratios, Base: &base, rematCap: c, Progress: tick}); err != nil {
					return nil, err
				}
			}
			name := h.String()
			if lazy {
				name += "+lazy"
			}
			keep(res, name, c)
		}
	}
	for _, h := range ReferenceHeuristics {
		c := caps()
		res, err := Sweep(ctx, tr, SweepOptions{Heuristic: h, Ratios: ratios, Parity: true, regionLimit: k.regionLimit, rematCap: c, Progress: tick})
		if err != nil {
			return nil, err
		}
		keep(res, h.String()+"+parity", c)
	}
	return best, nil
}
