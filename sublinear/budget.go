package sublinear

import "slices"

// Budget mode (beyond MegEngine): with SearchOptions.Budget > 0 the search
// minimizes the recompute time subject to peak <= Budget. The genome, the
// threshold presets and the genetic operators are MegEngine's; the order of
// records changes (mgeSearch.primaryCmp): feasible before infeasible; among
// feasible records less recompute time, then lower peak; among infeasible
// ones lower peak, then less time; then fewer split points. So when nothing
// fits, the best record is the one with the smallest peak, which is what
// the InfeasibleBudgetError reports.
//
// Two additions make the budget search reliable:
//   - the population is also seeded with the genome that makes every op a
//     split point (nothing recomputed, the baseline peak), the other end of
//     the time/memory trade-off from MegEngine's single block;
//   - after the generations, a local search polishes the best record: it
//     sweeps the allowed positions, toggling each as a split point and
//     moving each split point within its gap, keeping every improvement,
//     until a sweep changes nothing or it has spent as many evaluations as
//     the genetic search did (at least 64 per allowed position for tiny
//     graphs).

// runBudget runs presets, the genetic search and the polish under the
// budget order. The lb_memory refine does not apply: the budget is the
// bound.
func (s *mgeSearch) runBudget() {
	p := s.p
	if p.n >= 2 {
		all := make([]int32, 0, len(p.cands)+1)
		all = append(all, p.cands...)
		all = append(all, int32(p.n-1))
		s.extraSeeds = append(s.extraSeeds, all)
		// Random genomes of graded density, drawn from the seed.
		rng := newMgeRand(s.opts.Seed, 1<<42)
		np := max(s.opts.PoolSize, 1)
		for i := 0; i < np; i++ {
			var sp []int32
			for _, c := range p.cands {
				if rng.Uint64()%uint64(np+1) <= uint64(i) {
					sp = append(sp, c)
				}
			}
			s.extraSeeds = append(s.extraSeeds, append(sp, int32(p.n-1)))
		}
	}
	s.run()
	if p.n >= 2 && s.ctx.Err() == nil {
		gaEvals := int64(s.opts.GeneticIters) * int64(s.opts.PoolSize) * 2
		limit := max(gaEvals, min(64*int64(len(p.cands)), 4*gaEvals))
		// An evaluation visits every op, so on large graphs the polish is
		// capped by ops visited, not evaluations: the budget search stays
		// near-linear in the graph (about polishOpVisits / n evaluations).
		limit = min(limit, max(polishOpVisits/int64(p.n), 1))
		s.polish(limit)
	}
	if s.ctx.Err() != nil {
		s.cancelled = true
	}
}

// polishOpVisits caps the ops the polish visits (evaluations times ops):
// about five seconds of evaluations on one core. It binds only on graphs of
// more than about 30k ops.
const polishOpVisits = 100_000_000

// polishStarts is the number of distinct top records the local search
// starts from, besides the extra seeds.
const polishStarts = 8

// polish spends at most limit evaluations on local search: single-change
// climbs from the best records and from every extra seed (each capped at
// 8 evaluations per allowed position), then a climb with pair changes from
// the best record with what is left. Each local optimum is offered.
func (s *mgeSearch) polish(limit int64) {
	p := s.p
	starts := []mgeRecord{s.best}
	recs := slices.Clone(s.records)
	slices.SortStableFunc(recs, func(a, b mgeRecord) int { return s.cmp(&a, &b) })
	for _, sp := range s.extraSeeds {
		recs = append(recs, mgeRecord{s: sp})
	}
	for i := range recs {
		if i < len(recs)-len(s.extraSeeds) && len(starts) > polishStarts {
			continue
		}
		dup := false
		for j := range starts {
			if slices.Equal(starts[j].s, recs[i].s) {
				dup = true
				break
			}
		}
		if !dup {
			starts = append(starts, recs[i])
		}
	}
	spent := int64(0)
	per := 8 * int64(len(p.cands))
	if spent < limit && s.ctx.Err() == nil {
		for _, ratio := range []bool{true, false} {
			g, used := s.greedyMerge(limit-spent, ratio)
			spent += used
			best, used := s.climb(g, min(per, limit-spent), false)
			spent += used
			s.offer(best)
		}
	}
	for _, st := range starts {
		if s.ctx.Err() != nil || spent >= limit {
			return
		}
		if st.r == (mgeResult{}) {
			st.r = s.evalOne(st.s)
			spent++
		}
		best, used := s.climb(st, min(per, limit-spent), false)
		spent += used
		s.offer(best)
	}
	if spent < limit && s.ctx.Err() == nil {
		best, _ := s.climb(s.best, limit-spent, true)
		s.offer(best)
	}
}

// greedyMerge builds a plan from the dense end: starting with every op a
// split point (nothing recomputed), it repeatedly removes the split point
// that lowers the peak most per unit of added recompute time, until the
// budget is met, no removal lowers the peak, or the next round (one
// evaluation per split point) would pass limit evaluations.
func (s *mgeSearch) greedyMerge(limit int64, ratio bool) (mgeRecord, int64) {
	p := s.p
	cur := make([]int32, 0, len(p.cands)+1)
	cur = append(cur, p.cands...)
	cur = append(cur, int32(p.n-1))
	best := mgeRecord{s: cur, r: s.evalOne(cur)}
	spent := int64(1)
	// A round evaluates every removal; one that cannot finish within limit
	// is not started (its choice would only see a prefix of the graph).
	for !s.feasible(best.r) && spent+int64(len(best.s)-1) <= limit && s.ctx.Err() == nil {
		var next mgeRecord
		bestGain := -1.0
		for k := 0; k+1 < len(best.s) && spent < limit; k++ {
			cand := slices.Delete(slices.Clone(best.s), k, k+1)
			r := s.evalOne(cand)
			spent++
			if r.peak >= best.r.peak {
				continue
			}
			var gain float64
			if ratio {
				gain = float64(best.r.peak-r.peak) / float64(max(r.time-best.r.time, 0)+1)
			} else {
				gain = 1 / float64(max(r.time-best.r.time, 0)+1)
			}
			if gain > bestGain {
				bestGain, next = gain, mgeRecord{s: cand, r: r}
			}
		}
		if bestGain < 0 {
			break
		}
		best = next
	}
	return best, spent
}

// climb is a first-improvement local search from start, spending at most
// limit evaluations: toggle each allowed position, move each split point
// within its gap, and (with pairs) when neither helps, toggle pairs of
// positions. It returns the local optimum and the evaluations spent.
func (s *mgeSearch) climb(start mgeRecord, limit int64, pairs bool) (mgeRecord, int64) {
	p := s.p
	best := start
	spent := int64(0)
	try := func(cand []int32) bool {
		spent++
		rec := mgeRecord{s: cand, r: s.evalOne(cand)}
		if s.cmp(&rec, &best) < 0 {
			best = rec
			return true
		}
		return false
	}
	stop := func() bool { return spent >= limit || s.ctx.Err() != nil }
	for improved := true; improved && !stop(); {
		improved = false
		for _, c := range p.cands {
			if stop() {
				return best, spent
			}
			if try(toggleSplit(slices.Clone(best.s), c)) {
				improved = true
			}
		}
		for k := 0; k+1 < len(best.s); k++ {
			st := int32(0)
			if k > 0 {
				st = best.s[k-1] + 1
			}
			lo, hi := p.candRange(st, best.s[k+1]-1)
			for j := lo; j < hi; j++ {
				if stop() {
					return best, spent
				}
				cur := best.s
				if k+1 >= len(cur) || p.cands[j] == cur[k] ||
					(k > 0 && p.cands[j] <= cur[k-1]) || p.cands[j] >= cur[k+1] {
					continue
				}
				cand := slices.Clone(cur)
				cand[k] = p.cands[j]
				if try(cand) {
					improved = true
				}
			}
		}
		if improved || !pairs {
			continue
		}
		for a := 0; a < len(p.cands) && !improved; a++ {
			for b := a + 1; b < len(p.cands) && !improved; b++ {
				if stop() {
					return best, spent
				}
				improved = try(toggleSplit(toggleSplit(slices.Clone(best.s), p.cands[a]), p.cands[b]))
			}
		}
	}
	return best, spent
}

// toggleSplit adds c to the sorted split points sp, or removes it.
func toggleSplit(sp []int32, c int32) []int32 {
	i, found := slices.BinarySearch(sp, c)
	if found {
		return slices.Delete(sp, i, i+1)
	}
	return slices.Insert(sp, i, c)
}
