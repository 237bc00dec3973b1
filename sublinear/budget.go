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
	}
	s.run()
	if p.n >= 2 && s.ctx.Err() == nil {
		limit := max(int64(s.opts.GeneticIters)*int64(s.opts.PoolSize)*2, 64*int64(len(p.cands)))
		s.polish(limit)
	}
	if s.ctx.Err() != nil {
		s.cancelled = true
	}
}

// polishStarts is the number of distinct records the local search starts
// from.
const polishStarts = 8

// polish runs the local search from the best record and from every extra
// seed (the dense end of the trade-off), splitting limit evaluations
// between the starts, and offers each local optimum.
func (s *mgeSearch) polish(limit int64) {
	starts := []mgeRecord{s.best}
	recs := slices.Clone(s.records)
	slices.SortStableFunc(recs, func(a, b mgeRecord) int { return s.cmp(&a, &b) })
	for i := range recs {
		if len(starts) >= polishStarts {
			break
		}
		if !slices.EqualFunc(starts, starts, func(mgeRecord, mgeRecord) bool { return true }) {
			break
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
	per := limit / int64(len(starts))
	for _, st := range starts {
		if s.ctx.Err() != nil {
			return
		}
		s.offer(s.climb(st, per))
	}
}

// climb is a first-improvement local search from start, spending at most
// limit evaluations: toggle each allowed position, move each split point
// within its gap, and when neither helps, toggle pairs of positions.
func (s *mgeSearch) climb(start mgeRecord, limit int64) mgeRecord {
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
				return best
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
					return best
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
		if improved {
			continue
		}
		for a := 0; a < len(p.cands) && !improved; a++ {
			for b := a + 1; b < len(p.cands) && !improved; b++ {
				if stop() {
					return best
				}
				improved = try(toggleSplit(toggleSplit(slices.Clone(best.s), p.cands[a]), p.cands[b]))
			}
		}
	}
	return best
}

// toggleSplit adds c to the sorted split points sp, or removes it.
func toggleSplit(sp []int32, c int32) []int32 {
	i, found := slices.BinarySearch(sp, c)
	if found {
		return slices.Delete(sp, i, i+1)
	}
	return slices.Insert(sp, i, c)
}
