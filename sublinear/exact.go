package sublinear

import (
	"context"
	"fmt"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// MaxExactPositions bounds the exact solver: it enumerates 2^positions
// genomes, where positions is the number of ops that may end a block other
// than the last (every op but the last, or the endpoint ops).
const MaxExactPositions = 22

// ExactSearch enumerates every split-point genome of a tiny graph and
// returns the optimum under the search's order: the smallest peak (then
// fewer split points) or, with opts.Budget > 0, the least recompute time
// within the budget (then lower peak). It is the yardstick the tests use to
// measure the genetic search. Graphs with more than MaxExactPositions
// possible split points are rejected. Cancellation returns the best genome
// of the part enumerated.
func ExactSearch(ctx context.Context, g *graph.Graph, opts SearchOptions) (*sim.Plan, SearchReport, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	s, err := newMgeSearch(ctx, g, opts)
	if err != nil {
		return nil, SearchReport{}, err
	}
	p := s.p
	m := len(p.cands)
	if m > MaxExactPositions {
		return nil, SearchReport{}, fmt.Errorf("sublinear: exact search over %d ops has %d possible split points, expected at most %d", p.n, m, MaxExactPositions)
	}
	last := int32(p.n - 1)
	base := s.evalOne(p.thresholdSplits(1<<62, s.evals[0].mark, nil))
	s.best = mgeRecord{s: p.thresholdSplits(1<<62, s.evals[0].mark, nil), r: base}
	if p.n >= 2 {
		total := 1 << m
		nw := len(s.evals)
		chunk := (total + nw - 1) / nw
		bests := make([]mgeRecord, nw)
		done := make([]bool, nw)
		s.parallel(nw, func(w, i int) {
			ev := s.evals[w]
			buf := make([]int32, 0, m+1)
			var bestBuf []int32
			var best mgeRecord
			lo, hi := i*chunk, min(total, (i+1)*chunk)
			for mask := lo; mask < hi; mask++ {
				if mask&0xfff == 0 && ctx.Err() != nil {
					break
				}
				buf = buf[:0]
				for b := 0; b < m; b++ {
					if mask&(1<<b) != 0 {
						buf = append(buf, p.cands[b])
					}
				}
				buf = append(buf, last)
				rec := mgeRecord{s: buf, r: ev.evaluate(buf)}
				if best.s == nil || s.cmp(&rec, &best) < 0 {
					bestBuf = append(bestBuf[:0], buf...)
					best = mgeRecord{s: bestBuf, r: rec.r}
				}
			}
			s.nEval.Add(int64(hi - lo))
			bests[i] = best
		}, done)
		for i := range bests {
			if done[i] && bests[i].s != nil && s.cmp(&bests[i], &s.best) < 0 {
				s.best = bests[i]
			}
		}
		if ctx.Err() != nil {
			s.cancelled = true
		}
	}
	s.bestThresh = -1
	return s.finish(StrategySublinearExact, base.peak)
}
