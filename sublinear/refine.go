package sublinear

import "slices"

// searchRefine is MegEngine's search_refine (lb_memory): when the best peak
// is below the lower bound, spare memory buys back time. The ops the best
// plan duplicates are visited from the most expensive (op time) down; each
// is made a split point, so that its outputs become checkpoints instead of
// being recomputed, and the change is kept if the peak stays within the
// lower bound and the recompute time drops. MegEngine stops at the first
// plan whose peak reaches the bound and takes it even if it exceeds the
// bound; remat never exceeds it and keeps trying the remaining ops.
func (s *mgeSearch) searchRefine() {
	p := s.p
	lb := s.opts.LowerBound
	if s.best.r.peak >= lb {
		return
	}
	ev := s.evals[0]
	s.fbMu.Lock()
	ev.evaluate(s.best.s)
	s.nEval.Add(1)
	var dups []int32
	for i, op := range ev.seq {
		if ev.dup[i] {
			dups = append(dups, op)
		}
	}
	s.fbMu.Unlock()
	slices.Sort(dups)
	dups = slices.Compact(dups)
	slices.SortStableFunc(dups, func(a, b int32) int { return cmpInt64(p.opTime[b], p.opTime[a]) })

	cur := s.best
	for _, op := range dups {
		if s.ctx.Err() != nil {
			return
		}
		if op >= int32(p.n-1) || (p.hasEndpts && !p.endpoint[op]) {
			continue
		}
		i, found := slices.BinarySearch(cur.s, op)
		if found {
			continue
		}
		cand := slices.Insert(slices.Clone(cur.s), i, op)
		r := s.evalOne(cand)
		if r.peak <= lb && r.time < cur.r.time {
			cur = mgeRecord{s: cand, r: r}
		}
	}
	if cur.r.time < s.best.r.time {
		s.best = cur
		s.bestThresh = -1
	}
}
