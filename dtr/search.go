package dtr

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

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
}

// SearchResult is the outcome of OfflineSearch.
type SearchResult struct {
	Ratio       float64  `json:"ratio"`
	BudgetBytes int64    `json:"budget_bytes"`
	Baseline    Baseline `json:"baseline"`
	Runs        int      `json:"runs"`
	Completed   int      `json:"completed"` // runs that reached the end of the trace
	OOM         int      `json:"oom"`
	// Best is the completed run with the least rematerialization compute
	// (Status reports whether it stays under the thrash limit of 1x the
	// baseline compute); zero if no run completed.
	Best RatioResult `json:"best"`
	// BestRematRatio = Best.RematComputeNs / baseline compute.
	BestRematRatio float64 `json:"best_remat_ratio"`
	BestHeuristic  string  `json:"best_heuristic"`
	BestLazy       bool    `json:"best_lazy"`
	BestSigma      float64 `json:"best_sigma"`
}

// OfflineSearch searches eviction orders for tr at one budget: it replays
// the trace many times, each run with one heuristic (eager or lazy locking)
// whose scores are perturbed by random log-normal noise, so the runs explore
// eviction orders around the heuristics' choices (sigma 0 is the heuristic
// itself). Runs have no thrash limit, so the result is the least
// rematerialization compute found for the budget. It is a search, not a
// proof: it gives an upper bound on the optimum. Cancelling ctx returns the
// best so far with ctx's error.
func OfflineSearch(ctx context.Context, tr *dtrlog.Trace, opt SearchOptions) (*SearchResult, error) {
	if tr == nil {
		return nil, fmt.Errorf("dtr search: %w", ErrNilTrace)
	}
	if !(opt.Ratio > 0) {
		return nil, fmt.Errorf("dtr search: Ratio %v: expected > 0", opt.Ratio)
	}
	if opt.Runs < 0 {
		return nil, fmt.Errorf("dtr search: Runs %d: expected >= 0 (0 = 200)", opt.Runs)
	}
	if opt.MaxSigma < 0 {
		return nil, fmt.Errorf("dtr search: MaxSigma %v: expected >= 0 (0 = 1.5)", opt.MaxSigma)
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
	hs := opt.Heuristics
	if len(hs) == 0 {
		hs = []Heuristic{HDTR, HDTREqClass, MSPS, MegEngine, Lookahead, LookaheadMSPS}
	}
	base, err := MeasureBaseline(tr)
	if err != nil {
		return nil, err
	}
	res := &SearchResult{Ratio: opt.Ratio, BudgetBytes: int64(float64(base.PeakBytes) * opt.Ratio), Baseline: base}
	rng := rand.New(rand.NewPCG(opt.Seed, 0x5eed))
	for i := 0; i < opt.Runs; i++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		// the first len(hs)*2 runs are the unperturbed heuristics
		h := hs[i%len(hs)]
		lazy := (i/len(hs))%2 == 1
		sigma := 0.0
		if i >= 2*len(hs) {
			sigma = rng.Float64() * opt.MaxSigma
		}
		cfg := DefaultConfig()
		cfg.EvicteeMinSize = 0
		cfg.Heuristic = h
		cfg.LazyLock = lazy
		cfg.Scan = true // perturbed scores have no index bounds
		cfg.Budget = res.BudgetBytes
		rt, err := New(cfg, nil)
		if err != nil {
			return res, err
		}
		if sigma > 0 {
			rt.noise = rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
			rt.noiseSigma = sigma
		}
		if h.NeedsOracle() {
			rt.SetOracle(newTraceOracle(tr))
		}
		err = rt.replay(ctx, tr)
		res.Runs++
		switch {
		case err == nil:
		case errors.Is(err, sim.ErrOutOfMemory):
			res.OOM++
			continue
		case ctx.Err() != nil:
			return res, err
		default:
			return res, err
		}
		res.Completed++
		st := rt.Stats()
		if res.Best.Status != "" && st.RematCompute >= res.Best.RematComputeNs {
			continue
		}
		rr := RatioResult{Ratio: opt.Ratio, BudgetBytes: cfg.Budget, Status: StatusOK,
			Overhead: float64(st.Clock) / float64(base.ComputeNs), Evictions: st.Evictions, Remats: st.Remats,
			HeuristicEvals: st.HeuristicEvals, RematComputeNs: st.RematCompute, ClockNs: st.Clock, PeakMemoryBytes: st.PeakMemory}
		if st.RematCompute > base.ComputeNs {
			rr.Status = StatusThrash
		}
		res.Best, res.BestHeuristic, res.BestLazy, res.BestSigma = rr, h.String(), lazy, sigma
		res.BestRematRatio = float64(st.RematCompute) / float64(base.ComputeNs)
	}
	return res, nil
}
