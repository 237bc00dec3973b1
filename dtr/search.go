package dtr

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"

	"github.com/remat-dev/remat/graph/dtrlog"
	"github.com/remat-dev/remat/sim"
)

// SearchOptions configure OfflineSearch.
type SearchOptions struct {
	// Ratio: budget = Ratio x the baseline peak.
	Ratio float64
	// Runs: number of randomized replays (default 200).
	Runs int
	// Seed makes the search reproducible.
	Seed uint64
	// Heuristics to perturb (default dtr, dtr-eqclass, msps, megengine,
	// lookahead, lookahead-msps).
	Heuristics []Heuristic
	// MaxSigma: each run draws sigma uniformly in [0, MaxSigma] and
	// multiplies every score by exp(sigma x N(0,1)) (default 1.5).
	MaxSigma float64
	// RematLimit stops a run once its rematerialization compute exceeds
	// RematLimit x the baseline compute (default 1: the sweep's thrash
	// limit; a run past it would be reported as thrashing anyway).
	RematLimit float64
}

// SearchResult is the outcome of OfflineSearch.
type SearchResult struct {
	Ratio       float64  `json:"ratio"`
	BudgetBytes int64    `json:"budget_bytes"`
	Baseline    Baseline `json:"baseline"`
	Runs        int      `json:"runs"`
	Completed   int      `json:"completed"` // runs that reached the end of the trace
	OOM         int      `json:"oom"`
	// Thrashed counts the runs stopped at the RematLimit, Pruned those
	// stopped once their rematerialization compute exceeded the best of
	// the earlier batches (they could not win).
	Thrashed int `json:"thrashed"`
	Pruned   int `json:"pruned"`
	// Best is the completed run with the least rematerialization compute;
	// if no run completed but one reached the RematLimit, the first such
	// run (Status thrash, counters up to the stop); zero if every run ran
	// out of memory.
	Best RatioResult `json:"best"`
	// BestRematRatio = Best.RematComputeNs / baseline compute.
	BestRematRatio float64 `json:"best_remat_ratio"`
	BestHeuristic  string  `json:"best_heuristic"`
	BestLazy       bool    `json:"best_lazy"`
	BestSigma      float64 `json:"best_sigma"`
}

// searchBatch is the number of runs OfflineSearch replays concurrently
// between updates of its pruning limit. It is fixed (not the number of
// workers) so that which runs are pruned, and so the counts, do not depend
// on the machine.
const searchBatch = 8

// searchRun is one replay of OfflineSearch: its parameters, drawn in run
// order before any replay, and its outcome.
type searchRun struct {
	h            Heuristic
	lazy         bool
	sigma        float64
	seed1, seed2 uint64
	st           Stats
	err          error
}

// OfflineSearch searches eviction orders for tr at one budget: it replays
// the trace many times, each run with one heuristic (eager or lazy locking)
// whose scores are perturbed by random log-normal noise, so the runs explore
// eviction orders around the heuristics' choices (sigma 0 is the heuristic
// itself; those runs use the candidate index, which makes the scan's
// choices). The result is the least rematerialization compute found for the
// budget, up to SearchOptions.RematLimit. It is a search, not a proof: it
// gives an upper bound on the optimum.
//
// Runs are replayed in batches of eight on up to GOMAXPROCS goroutines; a
// run is stopped (pruned) once its rematerialization compute exceeds the
// best of the batches before its own, since it can no longer win. The
// result is the same as replaying every run to the end one after another
// (the least rematerialization compute, ties to the earlier run), and does
// not depend on the number of workers. Cancelling ctx returns the best of
// the batches done with ctx's error.
func OfflineSearch(ctx context.Context, tr *dtrlog.Trace, opt SearchOptions) (*SearchResult, error) {
	return offlineSearch(ctx, tr, opt, searchBatch, runtime.GOMAXPROCS(0))
}

// offlineSearch is OfflineSearch with batches of batch runs on up to
// workers goroutines (a batch as large as the run count prunes nothing).
func offlineSearch(ctx context.Context, tr *dtrlog.Trace, opt SearchOptions, batch, workers int) (*SearchResult, error) {
	if tr == nil {
		return nil, fmt.Errorf("dtr search: %w", ErrNilTrace)
	}
	if !(opt.Ratio > 0) {
		return nil, fmt.Errorf("dtr search: Ratio %v: expected > 0", opt.Ratio)
	}
	if opt.Runs < 0 {
		return nil, fmt.Errorf("dtr search: Runs %d: expected >= 0 (0 = 200)", opt.Runs)
	}
	if opt.MaxSigma < 0 || math.IsInf(opt.MaxSigma, 1) {
		return nil, fmt.Errorf("dtr search: MaxSigma %v: expected a finite number >= 0 (0 = 1.5)", opt.MaxSigma)
	}
	if opt.RematLimit < 0 || math.IsInf(opt.RematLimit, 1) {
		return nil, fmt.Errorf("dtr search: RematLimit %v: expected a finite number >= 0 (0 = 1)", opt.RematLimit)
	}
	if err := checkTrace(tr); err != nil {
		return nil, fmt.Errorf("dtr search: %w", err)
	}
	if opt.Runs == 0 {
		opt.Runs = 200
	}
	if opt.MaxSigma == 0 {
		opt.MaxSigma = 1.5
	}
	if opt.RematLimit == 0 {
		opt.RematLimit = 1
	}
	hs := opt.Heuristics
	if len(hs) == 0 {
		hs = []Heuristic{HDTR, HDTREqClass, MSPS, MegEngine, Lookahead, LookaheadMSPS}
	}
	base, err := MeasureBaseline(tr)
	if err != nil {
		return nil, err
	}
	res := &SearchResult{Ratio: opt.Ratio, BudgetBytes: int64(float64(base.PeakBytes) * opt.Ratio), Baseline: base}
	remCap := max(int64(float64(base.ComputeNs)*opt.RematLimit), 1)
	rng := rand.New(rand.NewPCG(opt.Seed, 0x5eed))
	runs := make([]searchRun, opt.Runs)
	for i := range runs {
		// the first len(hs)*2 runs are the unperturbed heuristics
		r := &runs[i]
		r.h = hs[i%len(hs)]
		r.lazy = (i/len(hs))%2 == 1
		if i >= 2*len(hs) {
			r.sigma = rng.Float64() * opt.MaxSigma
		}
		if r.sigma > 0 {
			r.seed1, r.seed2 = rng.Uint64(), rng.Uint64()
		}
	}
	one := func(r *searchRun, limit int64) {
		cfg := DefaultConfig()
		cfg.EvicteeMinSize = 0
		cfg.Heuristic = r.h
		cfg.LazyLock = r.lazy
		cfg.Scan = r.sigma > 0 // perturbed scores have no index bounds
		cfg.Budget = res.BudgetBytes
		cfg.RematLimit = limit
		rt, err := New(cfg, nil)
		if err != nil {
			r.err = err
			return
		}
		if r.sigma > 0 {
			rt.noise = rand.New(rand.NewPCG(r.seed1, r.seed2))
			rt.noiseSigma = r.sigma
		}
		if r.h.NeedsOracle() {
			rt.SetOracle(newTraceOracle(tr))
		}
		r.err = rt.replay(ctx, tr)
		r.st = rt.Stats()
	}
	for lo := 0; lo < len(runs); lo += batch {
		group := runs[lo:min(lo+batch, len(runs))]
		limit, prune := remCap, false
		if res.Completed > 0 && res.Best.RematComputeNs < remCap {
			limit, prune = max(res.Best.RematComputeNs, 1), true
		}
		forEach(len(group), workers, func(k, _ int) { one(&group[k], limit) })
		if err := ctx.Err(); err != nil {
			return res, err
		}
		for k := range group {
			r := &group[k]
			res.Runs++
			switch {
			case r.err == nil:
			case errors.Is(r.err, sim.ErrOutOfMemory):
				res.OOM++
				continue
			case errors.Is(r.err, ErrThrashing) && prune:
				res.Pruned++
				continue
			case errors.Is(r.err, ErrThrashing):
				res.Thrashed++
				if res.Best.Status == "" {
					res.Best = searchRow(opt.Ratio, res.BudgetBytes, StatusThrash, r.st, base)
					res.BestHeuristic, res.BestLazy, res.BestSigma = r.h.String(), r.lazy, r.sigma
					res.BestRematRatio = float64(r.st.RematCompute) / float64(base.ComputeNs)
				}
				continue
			default:
				return res, r.err
			}
			res.Completed++
			if res.Completed > 1 && r.st.RematCompute >= res.Best.RematComputeNs {
				continue
			}
			status := StatusOK
			if r.st.RematCompute > base.ComputeNs {
				status = StatusThrash // above 1x, under a RematLimit above 1
			}
			res.Best = searchRow(opt.Ratio, res.BudgetBytes, status, r.st, base)
			res.BestHeuristic, res.BestLazy, res.BestSigma = r.h.String(), r.lazy, r.sigma
			res.BestRematRatio = float64(r.st.RematCompute) / float64(base.ComputeNs)
		}
	}
	return res, nil
}

// searchRow is a search run's statistics as a sweep cell.
func searchRow(ratio float64, budget int64, status string, st Stats, base Baseline) RatioResult {
	return RatioResult{Ratio: ratio, BudgetBytes: budget, Status: status,
		Overhead: float64(st.Clock) / float64(base.ComputeNs), Evictions: st.Evictions, Remats: st.Remats,
		HeuristicEvals: st.HeuristicEvals, RematComputeNs: st.RematCompute, ClockNs: st.Clock, PeakMemoryBytes: st.PeakMemory}
}
