package dtr

import (
	"math"
	"math/big"
	"math/bits"
)

// score is num / (d1 * d2) (d1*d2 == 0 means +Inf), or, for LRU, the value
// num itself (d1 = d2 = 1). Keeping the integer terms lets parity mode
// compare exactly, as Python's exact integer division does for equal
// ratios.
type score struct {
	f      float64
	num    int64
	d1, d2 int64
	mul    float64 // extra multiplicative factor (MegEngine penalty); 1 = none
}

func mkScore(num, d1, d2 int64) score {
	if d1 == 0 || d2 == 0 {
		return score{f: math.Inf(1), num: num, d1: d1, d2: d2, mul: 1}
	}
	return score{f: float64(num) / (float64(d1) * float64(d2)), num: num, d1: d1, d2: d2, mul: 1}
}

// cmp returns -1, 0, 1 comparing a and b. Floats decide unless they are
// within a relative 1e-12, where the exact rational comparison decides. An
// infinite score (a zero denominator, as the reference scores it: 0/0
// too) is above every finite one and ties with every infinite one; the
// rational comparison must not see it, since n/0 cross-multiplies to 0.
func cmpScore(a, b score) int {
	if ai, bi := math.IsInf(a.f, 1), math.IsInf(b.f, 1); ai || bi {
		switch {
		case ai && bi:
			return 0
		case ai:
			return 1
		}
		return -1
	}
	if a.f < b.f {
		if b.f-a.f > 1e-12*math.Abs(b.f) || a.mul != 1 || b.mul != 1 {
			return -1
		}
	} else if a.f > b.f {
		if a.f-b.f > 1e-12*math.Abs(a.f) || a.mul != 1 || b.mul != 1 {
			return 1
		}
	} else if a.mul != 1 || b.mul != 1 {
		return 0
	}
	// exact: a.num * b.d1 * b.d2 vs b.num * a.d1 * a.d2 (192-bit products
	// of non-negative terms; big.Int for the rest)
	if a.num >= 0 && a.d1 >= 0 && a.d2 >= 0 && b.num >= 0 && b.d1 >= 0 && b.d2 >= 0 {
		return cmp192(mul192(uint64(a.num), uint64(b.d1), uint64(b.d2)), mul192(uint64(b.num), uint64(a.d1), uint64(a.d2)))
	}
	var x, y, t big.Int
	x.SetInt64(a.num)
	x.Mul(&x, t.SetInt64(b.d1))
	x.Mul(&x, t.SetInt64(b.d2))
	y.SetInt64(b.num)
	y.Mul(&y, t.SetInt64(a.d1))
	y.Mul(&y, t.SetInt64(a.d2))
	return x.Cmp(&y)
}

// mul192 returns a*b*c as three 64-bit limbs, most significant first.
func mul192(a, b, c uint64) [3]uint64 {
	h1, l1 := bits.Mul64(a, b)
	lh, ll := bits.Mul64(l1, c)
	hh, hl := bits.Mul64(h1, c)
	mid, carry := bits.Add64(lh, hl, 0)
	return [3]uint64{hh + carry, mid, ll}
}

func cmp192(x, y [3]uint64) int {
	for i := range x {
		switch {
		case x[i] < y[i]:
			return -1
		case x[i] > y[i]:
			return 1
		}
	}
	return 0
}

// cmp compares scores for the runtime: outside parity mode an infinite
// score (zero size or zero staleness) is above every finite one even when
// its numerator is 0 (0/0, which the exact comparison of cmpScore would
// call a tie with anything and so make the order intransitive); parity mode
// keeps cmpScore as it is.
func (r *Runtime) cmp(a, b score) int {
	if !r.cfg.Parity {
		ai, bi := math.IsInf(a.f, 1), math.IsInf(b.f, 1)
		switch {
		case ai && bi:
			return 0
		case ai:
			return 1
		case bi:
			return -1
		}
	}
	return cmpScore(a, b)
}

func (r *Runtime) staleness(s int32) int64 {
	return r.stats.Clock - r.storages[s].lastAccess
}

// eqNeighbours returns the summed value of the distinct eq-classes of the
// evicted neighbours of s. It leaves s, that sum and the sum of the
// classes' floors (value less slack, see ufSlack) in eqOf, eqSum and
// eqFloor for the candidate index's keys (eqKeyPart), and with reg
// registers s with each class (regAdd). A storage of high degree keeps
// the counts of its neighbours' classes instead of scanning them (eqcache.go).
func (r *Runtime) eqNeighbours(s int32, reg bool) int64 {
	if ci := r.storages[s].eqc; ci != 0 {
		if r.eqRef {
			sum, floor, _ := r.eqScan(s, false)
			r.eqCached(s, &r.eqCaches[ci-1], false)
			r.eqChecks++
			if sum != r.eqSum || floor != r.eqFloor {
				r.eqMismatch++
			}
		}
		return r.eqCached(s, &r.eqCaches[ci-1], reg)
	}
	sum, floor, deg := r.eqScan(s, reg)
	if deg >= r.eqCacheFloor() && r.usesEqClass() {
		r.eqCacheBuild(s)
	}
	r.eqOf, r.eqSum, r.eqFloor = s, sum, floor
	return sum
}

// eqScan is eqNeighbours by a scan of the neighbours of s (deg: how many
// it listed).
func (r *Runtime) eqScan(s int32, reg bool) (sum, floor int64, deg int) {
	r.markGen++
	if r.markGen == 0 {
		for i := range r.ufMark {
			r.ufMark[i] = 0
		}
		r.markGen = 1
	}
	g := r.markGen
	for _, d := range [2]int{parsList, kidsList} {
		for ns, c := r.neighbours(s, d); ; ns, c = r.chunk(c) {
			deg += len(ns)
			for _, n := range ns {
				if !r.eqCounted(n) {
					continue
				}
				root := r.ufFind(r.storages[n].ecn)
				if r.ufMark[root] != g {
					r.ufMark[root] = g
					sum += r.ufValue[root]
					floor += r.ufValue[root] - max(r.ufSlack[root], 0)
					if reg {
						r.regAdd(root, s, r.kg[s])
					}
				}
			}
			if c < 0 {
				break
			}
		}
	}
	return sum, floor, deg
}

// region sums the costs of the evicted storages reachable from s through
// evicted storages, following children (forward) or parents (reverse). It
// stops as soon as the sum exceeds cut (the caller only needs to know that
// it does), returning the partial sum.
func (r *Runtime) region(s int32, reverse bool, cut int64) int64 {
	g := r.newMark()
	w := r.walk
	w[s].mark = g // s itself is not part of its regions
	var sum int64
	stack := append(r.stack[:0], s)
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		d := kidsList
		if reverse {
			d = parsList
		}
		for next, c := r.neighbours(x, d); ; next, c = r.chunk(c) {
			for _, us := range next {
				if n := &w[us]; n.evicted && n.mark != g {
					n.mark = g
					sum += n.compute
					if r.wrec {
						r.wlist = append(r.wlist, us)
						r.wsum += n.compute
					}
					if sum > cut {
						r.stack = stack[:0]
						return sum
					}
					stack = append(stack, us)
				}
			}
			if c < 0 {
				break
			}
		}
	}
	r.stack = stack
	return sum
}

// nextUse is the step at which s is next needed: by the program (the
// oracle's next read of one of its tensors) or, sooner, to rematerialize a
// still referenced evicted dependent (neededBy): a storage that a pending
// rematerialization chain will read is as good as read by that chain's
// consumer, whatever the program does with it later. Without the second
// term a next-use heuristic evicts, in the middle of rematerializing a
// chain, the link it has just recomputed (its own next read is far away, in
// the backward pass) and recomputes it again for the next link: quadratic
// rematerialization on recurrent chains. Index keys use progNextUse, which
// is never earlier, so their bounds stay lower bounds of this score.
func (r *Runtime) nextUse(s int32) int64 {
	if r.oracle == nil {
		return math.MaxInt64
	}
	best := r.progNextUse(s)
	if best > r.step {
		nb := r.neededBy(s)
		if r.neededByRef != nil && !r.needCapHit {
			r.nbChecks++
			if ref := r.neededByRef(s); nb != ref && (nb > r.step || ref > r.step) {
				r.nbMismatch++ // (any value at or before the step stops the walk)
			}
		}
		best = min(best, nb)
	}
	return best
}

// progNextUse is the step of s's next use by the program (the oracle's).
func (r *Runtime) progNextUse(s int32) int64 {
	return r.progNextUseRoot(s, r.storages[s].root)
}

// progNextUseRoot is progNextUse for storage s whose root tensor the
// caller has at hand: with a storage-level oracle it reads nothing of s.
func (r *Runtime) progNextUseRoot(s, root int32) int64 {
	best := int64(math.MaxInt64)
	if r.oracle == nil {
		return best
	}
	if r.soracle != nil {
		return r.soracle.NextUseStorage(TensorID(root), r.step)
	}
	for _, t := range r.storages[s].tensors {
		if n := r.oracle.NextUse(TensorID(t), r.step); n < best {
			best = n
		}
	}
	return best
}

// sizeTerm is the bytes eviction of s is credited with: its size, plus the
// free bytes adjacent to its block (what freeing it merges with) for the
// MegEngine heuristic and after a host allocation failure, when the host
// reports adjacency.
func (r *Runtime) sizeTerm(s int32) int64 {
	m := r.storages[s].size
	if r.adj != nil && (r.fragMode || r.cfg.Heuristic == MegEngine) {
		m += r.adj.AdjacentFree(TensorID(r.storages[s].root))
	}
	return m
}

// withRegions returns s's cost plus the costs of its evicted ancestors (and,
// with both, of its evicted descendants): the numerator of h_DTR and MSPS.
// When the caller has a best score so far (evalBest), the walks stop once
// the numerator puts the score over 1+1e-6 times it: the partial numerator
// returned then still scores strictly above the best (so the candidate
// loses exactly as it would with the whole sum), at a fraction of the
// walk.
func (r *Runtime) withRegions(s int32, both bool, m, d int64) int64 {
	cut := int64(math.MaxInt64)
	if b := r.evalBest; b > 0 && !math.IsInf(b, 1) && m > 0 && d > 0 {
		f := 1 + 1e-6
		if r.wrec {
			f = regionOverWalk
		}
		if x := b * float64(m) * float64(d) * f; x < 1<<62 {
			cut = int64(x) + 1
		}
	}
	c := r.storages[s].compute
	if c > cut {
		r.walkCuts++
		return c
	}
	if both {
		c += r.region(s, false, cut-c)
		if c > cut {
			r.walkCuts++
			return c
		}
	}
	c += r.region(s, true, cut-c)
	if c > cut {
		r.walkCuts++
	}
	return c
}

// regionOverWalk: an indexed evaluation's walks (wrec) go on to this
// factor times the best before they stop, so the key part they leave
// (regionKeep) holds the candidate off for more than the next choice.
const regionOverWalk = 2

// evaluate scores candidate s (see withRegions for evalBest).
func (r *Runtime) evaluate(s int32) score {
	r.stats.HeuristicEvals++
	r.wlist, r.wsum = r.wlist[:0], 0
	r.eqOf = -1
	r.evNext = math.MaxInt64
	st := &r.storages[s]
	switch r.cfg.Heuristic {
	case HDTR:
		m, d := r.sizeTerm(s), r.staleness(s)
		if r.incOn {
			return mkScore(st.compute+r.incCost(s, true), m, d)
		}
		return mkScore(r.withRegions(s, true, m, d), m, d)
	case HDTREqClass:
		return mkScore(st.compute+r.eqNeighbours(s, false), r.sizeTerm(s), r.staleness(s))
	case HDTRLocal:
		return mkScore(st.compute, r.sizeTerm(s), r.staleness(s))
	case MSPS:
		m := r.sizeTerm(s)
		if r.incOn {
			return mkScore(st.compute+r.incCost(s, false), m, 1)
		}
		return mkScore(r.withRegions(s, false, m, 1), m, 1)
	case LRU:
		return score{f: float64(st.lastAccess), num: st.lastAccess, d1: 1, d2: 1, mul: 1}
	case Size:
		return mkScore(1, r.sizeTerm(s), 1)
	case MegEngine:
		sc := mkScore(st.est+r.eqNeighbours(s, false), r.sizeTerm(s), r.staleness(s))
		if st.remats > 0 {
			sc.mul = math.Pow(1.0001, float64(st.remats))
			sc.f *= sc.mul
		}
		return sc
	case Lookahead:
		n := r.nextUse(s)
		r.evNext = n
		if n == math.MaxInt64 {
			return mkScore(0, 1, 1)
		}
		d := n - r.step
		if d < 1 {
			d = 1
		}
		return mkScore(st.compute+r.eqNeighbours(s, false), r.sizeTerm(s), d)
	case LookaheadMSPS:
		n := r.nextUse(s)
		r.evNext = n
		if n == math.MaxInt64 {
			return mkScore(0, 1, 1)
		}
		d := max(n-r.step, 1)
		m := r.sizeTerm(s)
		return mkScore(r.withRegions(s, false, m, d), m, d)
	case LookaheadDTR:
		n := r.nextUse(s)
		r.evNext = n
		if n == math.MaxInt64 {
			return mkScore(0, 1, 1) // never read again: first to go
		}
		m, d := r.sizeTerm(s), r.staleness(s)
		return mkScore(r.withRegions(s, true, m, d), m, d)
	}
	return mkScore(0, 1, 1)
}

// choose returns the storage to evict, or -1 when the pool is empty. Like
// the reference, ties go to the later candidate in pool order and a zero
// score stops the scan.
func (r *Runtime) choose() int32 {
	r.resetNeed()
	nh, adjOK := r.adjListing()
	if r.idx != nil && !r.fragMode && adjOK && (!r.cfg.Parity || r.parityIndexable()) {
		evals := r.stats.HeuristicEvals
		if s, sc := r.chooseIndexed(); s >= 0 {
			if nh != nil {
				s = r.nextToFree(nh, s, sc)
			}
			if r.cfg.Parity {
				// the reference's count, not the index's
				r.stats.HeuristicEvals = evals + r.scanEvals(s)
			}
			r.checkScan(s)
			return s
		}
		if !r.cfg.Parity {
			// the index is empty: every candidate is below the minimum
			// size, and the scan would take the largest
			s := r.largestSmall()
			r.checkScan(s)
			return s
		}
	}
	return r.scan()
}

// adjListing reports whether the index may choose for a heuristic whose
// size term counts the free bytes next to a candidate's block (megengine
// with an AdjacencyHost), and returns the host that lists the candidates
// with such bytes (nil when the size term is the size alone). The index's
// keys use the size, so their bounds hold for the candidates without free
// neighbours only; the others are evaluated on every choice (nextToFree),
// which needs a host that can list them.
func (r *Runtime) adjListing() (neighbourHost, bool) {
	if r.cfg.Heuristic != MegEngine || r.adj == nil {
		return nil, true
	}
	if r.adjWatch {
		// the keys count the free bytes next to a block (keySize)
		r.adjRekey()
		return nil, true
	}
	nh, ok := r.host.(neighbourHost)
	if !ok || !nh.FreeNeighbours(nil) {
		return nil, false
	}
	return nh, true
}

// nextToFree returns the better, under the scan's order, of the index's
// choice best and the candidates with free memory next to their blocks
// (listed by nh), whose scores a size term counting those bytes (megengine's,
// or any in fragMode) lowers below their bounds. The index skipped a
// candidate only when its bound was above the best, which holds for every
// candidate without free neighbours, so the result is the scan's choice.
// A listed candidate is skipped too when its bound scaled by its size over
// its size term is above the best (fragSkip). bs is best's score under the
// size term in use.
func (r *Runtime) nextToFree(nh neighbourHost, best int32, bs score) int32 {
	bseq := r.storages[best].seq
	nh.FreeNeighbours(func(t TensorID) {
		s := r.tensors[t].st
		st := &r.storages[s]
		if s == best || st.poolPos < 0 || st.size < r.cfg.EvicteeMinSize {
			return
		}
		if r.fragSkip(s, bs.f) {
			r.fragSkips++
			return
		}
		r.fragEvals++
		if bs.f > 0 && !math.IsInf(bs.f, 1) && !r.noScanCut {
			r.evalBest = bs.f
		}
		sc := r.evaluate(s)
		r.evalBest = math.Inf(1)
		if r.idxBetter(sc, st.seq, bs, bseq) {
			best, bs, bseq = s, sc, st.seq
		}
	})
	return best
}

// checkScan (idxCheck, tests) counts in idxMismatch a choice s that the
// scan, run without counting its evaluations, would not make, and in
// idxBadKeys every kept storage keyed with a next use earlier than the one
// an uncapped walk finds now, and every filed eq-class key (outside neg
// epochs) whose numerator exceeds the one the candidate has now: such a
// key is no lower bound, whether or not this choice shows it.
func (r *Runtime) checkScan(s int32) {
	if !r.idxCheck {
		return
	}
	counted := r.stats.HeuristicEvals
	if r.scan() != s {
		r.idxMismatch++
	}
	for i := range r.storages {
		want := int32(-1)
		if r.storages[i].refExt > 0 {
			want = r.storages[i].root
		}
		if r.refRoot[i] != want {
			r.idxBadRefs++
		}
		if r.needSkip[i] != r.skipOf(int32(i)) {
			r.idxBadRefs++
		}
	}
	r.stats.HeuristicEvals = counted
	if x := r.idx; x != nil && x.keptIdx {
		// a kept storage's keyed next use, and a refined one
		// (refineNext), must not be before the one a fresh, uncapped walk
		// finds now
		walkCap := r.needCap
		r.needCap = math.MaxInt
		for _, k := range x.kept {
			st := &r.storages[k]
			if st.ibucket < 0 || int(st.ibucket) == idxNever {
				continue
			}
			if n, _ := r.keptNext(k); n > st.inext {
				r.idxBadKeys++
			}
		}
		for _, h := range x.heaps {
			for _, k := range h {
				if st := &r.storages[k]; !st.kmem && st.rnextOK && st.inext == st.rnext {
					r.refinedChecks++
					if n, _ := r.keptNext(k); n > st.inext {
						r.idxBadKeys++
					}
				}
			}
		}
		r.needCap = walkCap
	}
	if x := r.idx; x != nil && r.adjWatch {
		// a key's size term must not be below the one the score has now:
		// the growth notifications reached every storage concerned
		for _, h := range x.heaps {
			for _, c := range h {
				if r.sizeTerm(c) > r.storages[c].ksize {
					r.idxBadKeys++
				}
			}
		}
	}
	if x := r.idx; x != nil && x.region {
		// a region part must not exceed the region's sum now
		for _, h := range x.heaps {
			for _, c := range h {
				st := &r.storages[c]
				if st.kstick != x.stick {
					continue
				}
				sum := r.region(c, true, math.MaxInt64)
				if r.cfg.Heuristic == HDTR || r.cfg.Heuristic == LookaheadDTR {
					sum += r.region(c, false, math.MaxInt64)
				}
				if st.kpart > sum {
					r.idxBadKeys++
				}
			}
		}
	}
	if x := r.idx; x != nil && x.eq && !x.neg {
		for b, h := range x.heaps {
			if b == idxZero || b == idxNever || b == idxInfB {
				continue
			}
			for _, c := range h {
				if r.keyNum(c, false) < r.storages[c].knum {
					r.idxBadKeys++
				}
			}
		}
	}
}

// scan is the linear candidate search over the pool.
func (r *Runtime) scan() int32 {
	n := len(r.pool)
	if n-r.holes <= 0 {
		return -1
	}
	best := int32(-1)
	var bs score
	consider := func(s int32) bool {
		if !r.cfg.Parity && r.storages[s].size < r.cfg.EvicteeMinSize {
			return false
		}
		// offline search: a multiplicative log-normal perturbation of every
		// positive finite score. The factor is drawn before the evaluation
		// (kept for the next one if this score is 0 or infinite, so the
		// draws go to the same scores as drawing after), so the region
		// walks can stop once the perturbed score is above the best.
		mul := 1.0
		if r.noise != nil {
			if !r.noiseDrawn {
				r.noiseZ, r.noiseDrawn = r.noise.NormFloat64(), true
			}
			mul = math.Exp(r.noiseSigma * r.noiseZ)
		}
		r.evalBest = math.Inf(1)
		if best >= 0 && !r.noScanCut {
			r.evalBest = bs.f / mul
		}
		sc := r.evaluate(s)
		r.evalBest = math.Inf(1)
		if r.noise != nil && sc.f > 0 && !math.IsInf(sc.f, 1) {
			sc.mul *= mul
			sc.f *= mul
			r.noiseDrawn = false
		}
		if best < 0 || r.cmp(sc, bs) <= 0 {
			best, bs = s, sc
		}
		return sc.f == 0
	}
	if r.cfg.SqrtSampling && n-r.holes > 16 {
		live := n - r.holes
		k := int(math.Sqrt(float64(live)))
		stride := live / k
		start := r.rng.IntN(stride)
		// walk live entries, taking every stride-th
		idx := 0
		for _, s := range r.pool {
			if s < 0 {
				continue
			}
			if idx >= start && (idx-start)%stride == 0 {
				if consider(s) {
					break
				}
			}
			idx++
		}
		if best >= 0 {
			return best
		}
	}
	for _, s := range r.pool {
		if s < 0 {
			continue
		}
		if consider(s) {
			break
		}
	}
	if best < 0 && !r.cfg.Parity {
		// every candidate is below the minimum size: take the largest
		best = r.largestSmall()
		if r.idxCheck && best != r.largestSmallScan() {
			r.idxMismatch++
		}
	}
	return best
}
