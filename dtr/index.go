package dtr

import (
	"math"
	mathbits "math/bits"
)

// Candidate index (default mode). The linear scan of the pool evaluates
// every candidate's exact score on every eviction: O(pool) evaluations, which
// dominates when the pool is large. The index keeps the candidates in binary
// min-heaps ordered by a key from which a lower bound of the exact score
// follows, and evaluates exactly only the candidates whose bound does not
// exceed the best exact score found so far (branch and bound over the heap
// trees). It returns the same candidate as the scan:
//
//   - the scan keeps the last candidate in pool order among those with the
//     lowest exact score (cmpScore compares as exact rationals, so this is
//     a total preorder), and stops at the first zero score, which is then the
//     first zero in pool order (scores are never negative);
//   - the index compares (score, pool sequence number) with the same rule:
//     lower score wins, a tie goes to the later candidate, except between
//     two zero scores where the earlier one wins;
//   - a candidate is skipped only when its lower bound is strictly above the
//     best exact score already found, hence strictly above the final best.
//
// Kinds of index, by heuristic:
//
//   - staleness family (dtr, dtr-eqclass, dtr-local): score = num / (m *
//     (clock - lastAccess)) with num >= c (the e* and eq-class neighbour
//     costs are non-negative). Candidates are bucketed by k = floor(log2(c /
//     m)); within a bucket the heap is ordered by last access (oldest at the
//     root), and the bound 2^k / (clock - lastAccess) grows from the root
//     down. The clock moves every candidate's staleness but not the order
//     within a bucket, so nothing has to be re-keyed when time passes; a
//     candidate is re-keyed only when its own last access or cost changes.
//     c = 0 goes to a bucket with bound 0, m = 0 to one with bound +Inf.
//     A bucket whose heap is crowded files further candidates in finer
//     heaps of a quarter of its range each (idxCrowded).
//   - static (msps: c / m <= (c + ancestors) / m; size: 1 / m exact): one
//     heap on the static key.
//   - lru: one heap on the last access, which is the exact score.
//   - lookahead family (lookahead, lookahead-msps): score = num / (m *
//     max(next - step, 1)) with num >= c. Buckets by c/m as for staleness;
//     within a bucket the heap is ordered by next use, latest at the root,
//     and the bound 2^k / max(next - step, 1) grows from the root down. The
//     step moves every distance but not the order within a bucket; a
//     candidate's next use changes only when the step passes it, that is
//     after the top-level op that reads it, whose inputs are then re-keyed
//     (the Oracle contract). Keys use the program's next use (progNextUse);
//     the score's next use can only be earlier (a pending rematerialization
//     needs the storage sooner), which raises the score above the bound. Candidates never used again score exactly 0
//     and go to a bucket ordered by pool sequence. lookahead-dtr is of the
//     staleness family but sends its never-used candidates there too: the
//     ones whose next use, the program's or one an evaluation or a kept
//     storage's walk found (refineNext, keyKept), is none.
//
// In the bucket of zero-cost candidates (bound 0) and the never-used bucket,
// the heap is ordered by pool sequence number: once a zero score is found,
// a subtree whose root comes later in pool order cannot win (ties between
// zeros go to the earlier candidate), so it is skipped.
//
// Parity mode indexes the six reference heuristics too. The scan's rule is
// the reference's (exact comparison, ties to the later candidate, stop at
// the first zero score), so the index returns the reference's choice, and
// choose reports the evaluations the reference's scan makes (the live pool
// up to the first zero score, or all of it) instead of its own. The index
// steps aside for the scan where the exact comparison is not a total
// order or the keys' bounds may fail: a candidate whose score is 0/0 (no
// cost, and no size or no staleness: it ties with every score), an LRU
// candidate never accessed (a negative score after a zero one, which the
// scan never reaches), or a live eq-class below zero whose negative mass
// exceeds a candidate's cost (see eqKeyPart).
//
// megengine is of the staleness family with est for c (its recompute
// penalty only raises the score). Its size term counts the free bytes next
// to a block: on a host that reports their growth (growthHost) the keys
// count them as they were at keying time (storage.ksize), and adjRekey
// re-keys the candidates whose free neighbours grew past that before each
// choice; on a host that can only list the candidates next to free memory
// the keys count the size alone and those candidates are evaluated apart
// (nextToFree); otherwise the scan chooses. Sqrt sampling keeps the scan, as does the host-retry
// scoring with adjacent free bytes where the host cannot list them.

type idxKind uint8

const (
	idxNone idxKind = iota
	idxStale
	idxStatic
	idxLRU
	idxAhead
)

// idxKeptList is the ibucket of a storage in the kept list.
const idxKeptList = -2

const (
	// idxPerOctave buckets per factor of 2 of c/m: a candidate's bound is
	// at most 2^(1/16) = 4.4% below its local score.
	idxOctaveShift = 4
	idxPerOctave   = 1 << idxOctaveShift
	idxOctaves     = 64 // c/m from 2^-64 to 2^64, clamped beyond
	idxZero        = 0  // c = 0: bound 0
	idxLow         = 1  // c/m below 2^-64: bound 0
	idxFirst       = 2  // first log bucket
	idxInfB        = idxFirst + 2*idxOctaves*idxPerOctave
	idxNever       = idxInfB + 1  // lookahead: never used again, score 0
	idxBuckets     = idxNever + 1 // idxInfB: m = 0, bound +Inf
	idxSlack       = 1e-9         // relative slack on bounds, far above float rounding

	// A log bucket whose heap holds idxCrowded members files the next
	// ones in one of idxSplit finer heaps (a quarter of its c/m range
	// each), heap idxSplitHeap(b, j). A bucket's members may hold two or
	// more costs per byte a few percent apart (layer kinds of a deep
	// model); when the best is of the cheaper kind a search walks every
	// member of the dearer kind whose next use or staleness is within
	// that factor of the best's, which grows with the model. The finer
	// heaps cut that factor, and a bucket that holds few members (every
	// bucket of a small log) keeps its one heap: more heaps cost every
	// choice a look at their heads.
	idxCrowded    = 256
	idxSplitShift = 2
	idxSplit      = 1 << idxSplitShift
	idxAllHeaps   = idxBuckets + (idxInfB-idxFirst)*idxSplit
)

// idxSplitHeap returns the j-th finer heap of log bucket b.
func idxSplitHeap(b, j int) int { return idxBuckets + (b-idxFirst)*idxSplit + j }

type candIndex struct {
	kind  idxKind
	heaps [][]int32 // per bucket, then per finer heap (idxSplitHeap): storage ids, min-heap on storage.ikey
	// kmin (staleness and lookahead families): the least knum/size of the
	// bucket's members since it was last empty. A member's key does not
	// change while it is filed, so this is a lower bound of c/m over the
	// members, tighter than bucketLo: layers of one shape share one c/m,
	// and with bucketLo's slack (up to 2^(1/16)) alone a search walked
	// every member whose staleness was within that factor of the best's (a
	// fixed share of the pool on a deep chain, so each choice grew with the
	// model).
	kmin  []float64
	full  []uint64 // bitset of non-empty buckets
	stack []int32  // scratch: DFS over a heap
	// eq: the key's numerator includes the eq-class neighbour cost
	// (dtr-eqclass, lookahead), lowered to stay a lower bound of the
	// score's (see keyNum). Evictions only raise class values; a
	// recomputation lowers its class's by what its eviction added. In a
	// neg epoch (below) drop sums those decreases since the epoch began and
	// allow is the epoch's allowance for them; dropped lists the storages recomputed since
	// the last re-keying of their neighbours. refresh lists the
	// candidates a search found costlier than their keys say (re-keyed
	// after it: the lazy update).
	eq bool
	// kept: the storages kept for rematerialization (storage.kmem; their
	// next use is a dependent's). With keptIdx (lookahead family and
	// lookahead-dtr, without swaps or banishing) they are also filed in
	// the heaps, keyed with the next use their evicted dependents give
	// them (keyKept), and every candidate's key takes the next use its
	// evaluations found (refineNext); without it they have ibucket
	// idxKeptList and are evaluated exactly on every choice.
	kept    []int32
	keptIdx bool
	// never: storages never read again score 0 (lookahead-dtr): they go
	// to the never-used bucket, until a walk finds one needed by an
	// evicted dependent (bucketOf)
	never bool
	// exact (lru, size): the one heap's key is the exact score, and the
	// heap is ordered as the scan ranks its candidates (idxBefore), ties
	// included, so its root is the scan's choice among them
	exact bool
	// parity mode: the pool's zero-cost storages (the only ones that can
	// score 0/0; stale entries are skipped) and whether the last choice
	// scored 0
	zeroCost []int32
	lastZero bool
	// neg (eq-class): this epoch's keys allow for negative classes (see
	// eqKeyPart); negEpochs counts the epochs keyed so
	neg       bool
	negEpochs int
	drop      int64
	allow     int64
	dropped   []int32
	refresh   []int32
	// renext lists the candidates a search found needed sooner than their
	// keys' next use says (refineNext), re-keyed after it
	renext []int32
	// Outside neg epochs keys count the floors of the neighbouring
	// classes (value less slack, Runtime.ufSlack), and a class whose value
	// falls below its floor re-keys the candidates whose keys counted it:
	// reg lists, per eq-class root, the candidates registered when keyed
	// (nodes of a flat linked list; a node is stale once its candidate
	// was keyed again, Runtime.kg), merged with their classes; flush lists the
	// roots that lost value since the last re-keying.
	// regX and flushX are the same for the candidates keyed with the
	// classes' exact values (storage.kexact: a search found the floors
	// too low for them), re-keyed at every drop of a class they count.
	reg, regX     classLists
	flush, flushX []int32
	// stick stamps the key parts storages may reuse (storage.kstick): a
	// new epoch or run moves it on, which makes every earlier part stale
	stick uint32
	// region (h_DTR and the MSPS family without parity's kept regions):
	// a key counts, besides the candidate's cost, the region sum its last
	// evaluation walked (storage.kpart, regionKeyed); Runtime.wreg lists,
	// per evicted storage, the candidates whose key parts counted it
	region bool
	// crowded: the members a log bucket's heap holds before the bucket
	// files in its finer heaps (idxCrowded; tests lower it); splitFiled
	// counts the filings in finer heaps (tests)
	crowded    int
	splitFiled int64
}

// classLists holds a linked list of (candidate, key generation) nodes per
// eq-class root, in flat arrays with a free list.
type classLists struct {
	head, tail []int32 // per root: first and last node, -1: empty
	n, compact []int32 // per root: nodes, and nodes after the last compaction
	s          []int32 // per node: candidate
	gen        []uint32
	next       []int32
	free       int32
}

func indexKind(cfg *Config) idxKind {
	if cfg.SqrtSampling || cfg.Scan {
		return idxNone
	}
	switch cfg.Heuristic {
	case HDTR, HDTREqClass, HDTRLocal, LookaheadDTR, MegEngine:
		return idxStale
	case MSPS, Size:
		return idxStatic
	case LRU:
		return idxLRU
	case Lookahead, LookaheadMSPS:
		return idxAhead
	}
	return idxNone
}

func newCandIndex(k idxKind) *candIndex {
	return &candIndex{kind: k, heaps: make([][]int32, idxBuckets), kmin: make([]float64, idxBuckets), full: make([]uint64, (idxBuckets+63)/64), reg: classLists{free: -1}, regX: classLists{free: -1}, stick: 1, crowded: idxCrowded}
}

// bucketLo returns the lower bound of c/m in bucket b of the staleness
// and lookahead families, less the slack: 2^(j/idxPerOctave) for the j-th
// log bucket, computed from octaveSteps as logBucket compares with them (so
// every member's c/m is at least its bucket's bound before the slack), 0
// for the zero-cost, low and never-used buckets, +Inf for idxInfB.
//
// For a finer heap (idxSplitHeap) it is the lower edge of its quarter of
// the bucket's range: 2^(j/(idxPerOctave*idxSplit)), from octaveSteps too.
func bucketLo(b int) float64 {
	var j int // the bound's step, in finer heaps' steps from c/m = 1
	switch {
	case b >= idxBuckets:
		j = (b - idxBuckets) - idxOctaves*idxPerOctave*idxSplit
	case b < idxFirst || b > idxInfB:
		return 0
	case b == idxInfB:
		return math.Inf(1)
	default:
		j = (b - idxFirst - idxOctaves*idxPerOctave) * idxSplit
	}
	// floor division: the steps per octave are a power of two
	e, k := j>>(idxOctaveShift+idxSplitShift), j&(idxPerOctave*idxSplit-1)
	// 2^e as a float64's exponent bits (e is within ±idxOctaves, far from
	// the subnormals), so the product is exact: bound() reads this for
	// every heap node a search visits, where math.Ldexp would check for
	// special values each time
	return octaveSteps[k] * math.Float64frombits(uint64(e+1023)<<52) * (1 - idxSlack)
}

// reset empties x for a new run with index kind k, keeping its buffers.
func (x *candIndex) reset(k idxKind) {
	heaps, kmin, full := x.heaps, x.kmin, x.full
	for w, bits := range full { // an empty bucket's heap is empty already
		for bits != 0 {
			b := w<<6 | mathbits.TrailingZeros64(bits)
			bits &= bits - 1
			heaps[b] = heaps[b][:0]
		}
	}
	clear(full)
	*x = candIndex{kind: k, heaps: heaps, kmin: kmin, full: full, stack: x.stack[:0], kept: x.kept[:0],
		zeroCost: x.zeroCost[:0], dropped: x.dropped[:0], refresh: x.refresh[:0], renext: x.renext[:0], reg: x.reg.reset(), regX: x.regX.reset(),
		flush: x.flush[:0], flushX: x.flushX[:0], stick: x.stick + 1, crowded: idxCrowded}
}

// seqKeyed reports whether bucket b's heap is ordered by pool sequence (the
// zero-cost and never-used buckets of the staleness and lookahead kinds).
func (x *candIndex) seqKeyed(b int) bool {
	return (x.kind == idxStale || x.kind == idxAhead) && (b == idxZero || b == idxNever)
}

// logBucket returns the bucket of c/m for c > 0, m > 0.
//
// It is floor(16 log2(c/m)) without a logarithm: the binary exponent of c/m
// gives the octave, the mantissa's place among the octave's 16 steps
// (octaveSteps, the same powers of two the buckets' bounds lo use) the
// step, so c/m >= lo of its bucket holds exactly.
func logBucket(c, m int64) int {
	x := float64(c) / float64(m)
	bits := math.Float64bits(x)
	e := int((bits>>52)&0x7ff) - 1023
	j := e*idxPerOctave + octaveStep(x, idxPerOctave)
	switch {
	case (bits>>52)&0x7ff == 0 || j < -idxOctaves*idxPerOctave:
		return idxLow
	case j >= idxOctaves*idxPerOctave:
		return idxInfB - 1
	}
	return idxFirst + idxOctaves*idxPerOctave + j
}

// logSplit returns which finer heap of its log bucket c/m goes to (c > 0,
// m > 0): the quarter of the bucket's range, from the same octaveSteps.
// For c/m clamped to the top bucket any quarter's bound is below it.
func logSplit(c, m int64) int {
	return octaveStep(float64(c)/float64(m), idxPerOctave*idxSplit) & (idxSplit - 1)
}

// octaveStep returns the step of x's mantissa among n steps per octave
// (n a power of two dividing len(octaveSteps)): the largest k with
// octaveSteps[k*len(octaveSteps)/n] <= the mantissa, by binary search.
func octaveStep(x float64, n int) int {
	mant := math.Float64frombits(math.Float64bits(x)&(1<<52-1) | 1023<<52) // in [1, 2)
	stride := len(octaveSteps) / n
	k := 0
	for step := n / 2; step > 0; step /= 2 {
		if mant >= octaveSteps[(k+step)*stride] {
			k += step
		}
	}
	return k
}

// octaveSteps[k] = 2^(k/(idxPerOctave*idxSplit)): the steps of logBucket's
// octaves (every idxSplit-th) and of the finer heaps' (logSplit).
var octaveSteps = func() (s [idxPerOctave * idxSplit]float64) {
	for k := range s {
		s[k] = math.Exp2(float64(k) / (idxPerOctave * idxSplit))
	}
	return s
}()

// keyNext sets and returns the next use storage s is keyed with
// (storage.inext): a kept storage's from keyKept's walk, else the
// program's, or the earlier one an evaluation found (refineNext).
func (r *Runtime) keyNext(s int32) int64 {
	st := &r.storages[s]
	if !st.kmem {
		st.inext = r.progNextUse(s)
		if st.rnextOK && st.rnext < st.inext {
			st.inext = st.rnext
		}
	}
	return st.inext
}

// bucketOf returns the bucket of storage s and sets its heap key.
func (r *Runtime) bucketOf(s int32) int {
	st := &r.storages[s]
	switch r.idx.kind {
	case idxStale:
		if r.idx.never {
			// lookahead-dtr: a storage scores 0 while nothing reads it
			// again; once a walk finds a referenced evicted dependent that
			// needs it (keyKept, refineNext), it scores as h_DTR until it
			// is read
			if r.keyNext(s) == math.MaxInt64 {
				st.ikey = float64(st.seq)
				return idxNever
			}
		}
		st.ikey = float64(st.lastAccess)
		kn := r.keyNum(s, true)
		st.knum, st.ksize = kn, r.keySize(s)
		switch {
		case st.ksize == 0:
			return idxInfB
		case kn == 0:
			st.ikey = float64(st.seq)
			return idxZero
		}
		return logBucket(kn, st.ksize)
	case idxAhead:
		n := r.keyNext(s)
		st.ikey = -float64(n)
		st.ksize = r.keySize(s)
		switch {
		case n == math.MaxInt64:
			st.ikey = float64(st.seq)
			return idxNever
		case st.ksize == 0:
			return idxInfB
		}
		kn := r.keyNum(s, true)
		st.knum = kn
		if kn == 0 {
			st.ikey = float64(st.seq)
			return idxZero
		}
		return logBucket(kn, st.ksize)
	case idxStatic:
		st.ksize = st.size
		if r.cfg.Heuristic == Size {
			st.ikey = 1 / float64(st.size)
		} else {
			st.knum = r.keyNum(s, true)
			st.ikey = float64(st.knum) / float64(st.size)
		}
		if st.size == 0 {
			st.ikey = math.Inf(1)
		}
		return 0
	default: // idxLRU
		st.ksize = st.size
		st.ikey = float64(st.lastAccess)
		return 0
	}
}

// keySize returns the size term s is keyed with: the size, plus for
// megengine with adjWatch the free bytes next to its block now (which its
// score divides by too). A later growth of those bytes lowers the score
// below such a key's bound: adjRekey re-keys it before the next choice.
func (r *Runtime) keySize(s int32) int64 {
	if r.adjWatch {
		return r.sizeTerm(s)
	}
	return r.storages[s].size
}

// keyNum is the score numerator a key is computed with: the storage's
// cost, plus, when the index tracks it, the part of its eq-class neighbour
// cost that stays a lower bound until the classes concerned re-key it
// (eqKeyPart). With file (a key being filed) it starts a new key
// generation and, outside neg epochs, registers s with every class the
// key counts. Not counted as a heuristic evaluation.
func (r *Runtime) keyNum(s int32, file bool) int64 {
	st := &r.storages[s]
	x := r.idx
	if x.region {
		if st.kstick == x.stick {
			if file {
				r.keyReuses++
			}
			return st.compute + st.kpart
		}
		if file {
			r.kg[s]++ // a key without a part: no registrations
		}
		return st.compute
	}
	if !x.eq {
		return st.compute
	}
	c := r.hcost(s)
	if file {
		if st.kstick == x.stick {
			r.keyReuses++
			return max(c+st.kpart, 0)
		}
		r.kg[s]++
	}
	r.eqNeighbours(s, file && !x.neg)
	part := r.eqKeyPart(st.kexact)
	if file && st.eqc != 0 && !x.neg {
		st.kstick, st.kpart = x.stick, part
	}
	return max(c+part, 0)
}

// eqSlackShift sets how far below its value a class's floor is set (1/32
// of the value: eqSlack). A smaller slack gives tighter keys and more
// re-keying: none at all re-keyed the registered candidates at every
// recomputation, which made the parity eq-class sweeps of the traced logs
// 1.2-5x slower; with 1/4 a GPT of 1,428 layers (batch 1, seq 128, 0.6)
// took 2.9 s instead of 1.85 s, with 1/256 the traced unroll-gan's parity
// sweep 0.21 s instead of 0.08 s. The candidates for which the slack is
// too loose are keyed exactly (storage.kexact) instead.
const eqSlackShift = 5

// eqSlack is the slack a class of value v starts with: its floor is then
// v - v/32.
func eqSlack(v int64) int64 { return max(v, 0) >> eqSlackShift }

// eqFlushSlackShift sets the slack a class gets when its value has fallen
// below its floor and its registered candidates are re-keyed (idxDropped):
// 1/8 of its value. A class that has spent a slack is one whose storages
// are being recomputed, and it will likely fall again: with 1/32 again, a
// class holding most of a model's evicted storages (a GPT's in parity mode,
// where every recomputation lowers its class) re-keyed its candidates every
// few recomputations, a quarter of a sweep's time. BenchmarkParitySweepGPT
// went from 12.2-14.5 to 10.6-11.2 ms, and the resnet32 and unet sweeps
// stayed within their noise. A parity eq-class sweep of each traced log
// (tools/traced_logs.py) on one worker, two runs each: unroll-gan
// 91.3-93.0 -> 66.9-69.0 ms, densenet-bc 36.6-39.7 -> 32.3-33.0 ms,
// treelstm 107.6-108.9 -> 101.5-104.9 ms, the others within their noise.
// 1/2 made treelstm 122.9-125.3 ms and dtr-treelstm 54.6-56.0 ms (against
// 47.1-51.4). Keys stay lower bounds whatever the slack, so the choices,
// and parity's evaluation counts, do not change; default mode's own
// evaluation counts do.
const eqFlushSlackShift = 3

// eqFlushSlack is the slack a class of value v gets when its candidates
// are re-keyed: its floor is then v - v/8.
func eqFlushSlack(v int64) int64 { return max(v, 0) >> eqFlushSlackShift }

// eqKeyPart is the part of the eq-class neighbour cost the last
// eqNeighbours call found that a key may count. Outside neg epochs that is
// the sum of the classes' floors: a class's value falls only when one of
// its storages is recomputed, and before it falls below its floor the
// candidates registered with it are re-keyed (idxClassDropped); merges add
// values and floors alike. For a candidate keyed exactly (exact:
// storage.kexact) it is the classes' values, and every drop re-keys it.
//
// In parity mode a recomputation lowers its class by its current cost,
// which exceeds what its eviction added when a view op raised that cost
// meanwhile, so classes may go negative. A candidate's neighbour cost then
// also falls when a negative class merges into a neighbouring one, by at
// most the classes' negative mass (ufNeg). That mass grows only by
// recomputations (an eviction adds a class of non-negative value, a merge
// does not add to it), so by at most (allow - drop) within the epoch: an
// epoch that begins with negative mass, or in which it appears (then
// every candidate is re-keyed at once, see compute), keys with e - 2(allow
// - drop) - ufNeg, which may be below the storage's own cost
// (parityIndexable then checks that no exact score can be negative).
func (r *Runtime) eqKeyPart(exact bool) int64 {
	switch x := r.idx; {
	case x.neg:
		return r.eqSum - 2*(x.allow-x.drop) - r.ufNeg
	case exact:
		return r.eqSum
	}
	return r.eqFloor
}

// idxDropped re-keys, after recomputations, the candidates next to the
// recomputed storages (they may have lost their link to a class) and, once
// the classes' values have dropped by more than the epoch's allowance since
// it began, every candidate (a new epoch).
func (r *Runtime) idxDropped() {
	x := r.idx
	if x.drop > x.allow {
		r.idxNewEpoch()
	} else {
		for _, c := range x.flush {
			if r.ufSlack[c] < 0 {
				r.ufSlack[c] = eqFlushSlack(r.ufValue[c])
				r.idxFlushList(&x.reg, c)
				r.idxFlushList(&x.regX, c)
			}
		}
		for _, c := range x.flushX {
			r.idxFlushList(&x.regX, c)
		}
		for _, s := range x.dropped {
			r.idxRekeyNeighbours(s)
		}
	}
	x.dropped = x.dropped[:0]
	x.flush = x.flush[:0]
	x.flushX = x.flushX[:0]
}

// idxClassDropped records that the class whose root is c lost dec of its
// value. Within a neg epoch the drop counts against the epoch's allowance.
// Outside one the candidates keyed with the class's exact value are
// re-keyed (idxDropped), and the drop comes out of the class's slack; once
// that is spent (the value is below the floor the keys counted) the class
// gets a new floor and all its registered candidates are re-keyed.
func (r *Runtime) idxClassDropped(c int32, dec int64) {
	x := r.idx
	if x.neg {
		x.drop += dec
		return
	}
	if dec != 0 && x.regX.has(c) {
		x.flushX = append(x.flushX, c)
	}
	if r.ufSlack[c] >= 0 {
		return
	}
	if x.reg.has(c) || x.regX.has(c) {
		x.flush = append(x.flush, c)
	} else {
		r.ufSlack[c] = eqSlack(r.ufValue[c]) // no key counts it
	}
}

// idxFlushList re-keys the candidates of list l registered with class
// root c whose current keys counted it (their registration's generation is
// their key's). Re-keying registers them again with the classes they count
// now.
func (r *Runtime) idxFlushList(l *classLists, c int32) {
	if !l.has(c) {
		return
	}
	n := l.head[c]
	l.head[c], l.tail[c], l.n[c], l.compact[c] = -1, -1, 0, 0
	for n >= 0 {
		s, gen, next := l.s[n], l.gen[n], l.next[n]
		l.next[n], l.free = l.free, n
		if r.kg[s] == gen {
			r.keyLost(s) // its key counted c, whose floor it lost
		}
		n = next
	}
}

// keyLost re-keys candidate s, whose key's part counted what it may no
// longer count, without that part (if it is filed; else its next filing
// computes a fresh key).
func (r *Runtime) keyLost(s int32) {
	st := &r.storages[s]
	st.kstick = 0
	if st.ibucket >= 0 {
		// back to the floors: only a search that finds them too low again
		// keys it exactly, so the re-keyings exact keys cost stay within
		// the evaluations that asked for them
		st.kexact = false
		r.idxRekey(s)
	}
}

// regNode is a registration of a candidate's key at a key generation.
type regNode struct {
	s   int32
	gen uint32
}

// wregAdd registers candidate s, keyed at generation gen, with storage w
// (region key parts). The list is compacted (stale registrations dropped)
// once it has doubled since the last compaction: amortised O(1).
func (r *Runtime) wregAdd(w, s int32, gen uint32) {
	l := append(r.wreg[w], regNode{s, gen})
	r.wregTotal++
	if len(l) > 2*int(r.wregLive[w])+16 {
		n := len(l)
		l = r.liveRegs(l)
		r.wregTotal -= int64(n - len(l))
		r.wregLive[w] = int32(len(l))
	}
	r.wreg[w] = l
}

// liveRegs drops, in place, the registrations of l whose candidates have
// been keyed again since.
func (r *Runtime) liveRegs(l []regNode) []regNode {
	j := 0
	for _, n := range l {
		if r.kg[n.s] == n.gen {
			l[j] = n
			j++
		}
	}
	return l[:j]
}

// wregCompactAll drops the stale registrations of every list (a list is
// compacted by its own appends only, so one that stops growing would keep
// its stale entries for the rest of the run), and doubles Runtime.wregCap
// if live ones still fill more than half of it: the lists then hold at
// most about twice their live registrations, and the work is amortised
// over the registrations made since the last time.
func (r *Runtime) wregCompactAll() {
	r.wregCompactions++
	var total int64
	for w, l := range r.wreg {
		if len(l) == 0 {
			continue
		}
		k := r.liveRegs(l)
		r.wreg[w], r.wregLive[w] = k, int32(len(k))
		if len(k) == 0 && cap(k) > incKeep {
			r.wreg[w] = nil
		}
		total += int64(len(k))
	}
	r.wregTotal = total
	if 2*total > r.wregCap {
		r.wregCap *= 2
	}
}

// wregFirstCap is Runtime.wregCap at the start of a run.
const wregFirstCap = 1 << 20

// wregFlush re-keys the live registrations of storage w, which is no
// longer evicted, and empties its list.
func (r *Runtime) wregFlush(w int32) {
	l := r.wreg[w]
	r.wreg[w], r.wregLive[w] = l[:0], 0
	r.wregTotal -= int64(len(l))
	if cap(l) > incKeep {
		r.wreg[w] = nil // let a large list go
	}
	for _, n := range l {
		if r.kg[n.s] == n.gen {
			r.keyLost(n.s)
		}
	}
}

// has reports whether class root c has a list.
func (l *classLists) has(c int32) bool { return int(c) < len(l.head) && l.head[c] >= 0 }

// reset empties l, keeping its buffers.
func (l *classLists) reset() classLists {
	return classLists{head: l.head[:0], tail: l.tail[:0], n: l.n[:0], compact: l.compact[:0],
		s: l.s[:0], gen: l.gen[:0], next: l.next[:0], free: -1}
}

// regAdd registers candidate s, keyed at generation gen, with class root c
// (in regX if s is keyed exactly).
func (r *Runtime) regAdd(c, s int32, gen uint32) {
	l := &r.idx.reg
	if r.storages[s].kexact {
		l = &r.idx.regX
	}
	l.size(c)
	n := l.free
	if n >= 0 {
		l.free = l.next[n]
		l.s[n], l.gen[n], l.next[n] = s, gen, -1
	} else {
		n = int32(len(l.s))
		l.s, l.gen, l.next = append(l.s, s), append(l.gen, gen), append(l.next, -1)
	}
	if t := l.tail[c]; t < 0 {
		l.head[c] = n
	} else {
		l.next[t] = n
	}
	l.tail[c] = n
	l.n[c]++
	if l.n[c] > 2*l.compact[c]+16 {
		r.regCompact(l, c)
	}
}

// size makes room for class root c's list.
func (l *classLists) size(c int32) {
	if int(c) < len(l.head) {
		return
	}
	k := max(int(c)+1, 2*len(l.head))
	for len(l.head) < k {
		l.head, l.tail = append(l.head, -1), append(l.tail, -1)
		l.n, l.compact = append(l.n, 0), append(l.compact, 0)
	}
}

// regCompact drops the stale nodes of class root c's list (candidates keyed
// again since, or taken out of the index: idxRemove moves the generation
// on), so that a class whose candidates are
// re-keyed often but which never loses value keeps a list as long as its
// live registrations (amortised: it runs when the list has doubled).
func (r *Runtime) regCompact(l *classLists, c int32) {
	prev, live := int32(-1), int32(0)
	for n := l.head[c]; n >= 0; {
		next := l.next[n]
		if r.kg[l.s[n]] == l.gen[n] {
			if prev < 0 {
				l.head[c] = n
			} else {
				l.next[prev] = n
			}
			prev = n
			live++
		} else {
			l.next[n], l.free = l.free, n
		}
		n = next
	}
	if prev < 0 {
		l.head[c] = -1
	} else {
		l.next[prev] = -1
	}
	l.tail[c] = prev
	l.n[c], l.compact[c] = live, live
}

// regMerge moves class root a's registrations to root b (a merged into b).
func (r *Runtime) regMerge(a, b int32) {
	r.idx.reg.merge(a, b)
	r.idx.regX.merge(a, b)
}

// merge moves root a's list to the end of root b's.
func (l *classLists) merge(a, b int32) {
	if !l.has(a) {
		return
	}
	if l.size(b); l.head[b] < 0 {
		l.head[b], l.tail[b], l.n[b], l.compact[b] = l.head[a], l.tail[a], l.n[a], l.compact[a]
	} else {
		l.next[l.tail[b]] = l.head[a]
		l.tail[b] = l.tail[a]
		l.n[b] += l.n[a]
		l.compact[b] += l.compact[a]
	}
	l.head[a], l.tail[a], l.n[a], l.compact[a] = -1, -1, 0, 0
}

// idxNewEpoch starts an epoch of the eq-class keys: the allowance is a
// sixteenth of the model compute so far (so a run has about 16 epochs per
// baseline compute recomputed), and every candidate is re-keyed.
func (r *Runtime) idxNewEpoch() {
	x := r.idx
	x.stick++
	x.drop = 0
	x.allow = max(r.stats.ModelCompute/16, 1)
	if x.neg = r.ufNeg > 0; x.neg {
		x.negEpochs++
	}
	for _, s := range r.pool {
		if s >= 0 && r.storages[s].ibucket >= 0 {
			r.idxRekey(s)
		}
	}
}

// idxRekeyNeighbours re-keys the indexed neighbours of storage s whose key
// numerator is no longer the current one.
func (r *Runtime) idxRekeyNeighbours(s int32) {
	for _, t := range r.storages[s].tensors {
		tt := &r.tensors[t]
		for _, p := range r.ops[tt.op].args {
			r.idxRekeyIfChanged(s, r.tensors[p].st)
		}
		for _, c := range tt.children {
			r.idxRekeyIfChanged(s, r.tensors[c].st)
		}
	}
}

func (r *Runtime) idxRekeyIfChanged(s, ns int32) {
	if ns != s && r.storages[ns].ibucket >= 0 && r.keyNum(ns, false) != r.storages[ns].knum {
		r.idxRekey(ns)
	}
}

// idxInsert adds pool member s to the index (if it passes the size filter).
func (r *Runtime) idxInsert(s int32) {
	st := &r.storages[s]
	if st.ibucket != -1 || st.size < r.cfg.EvicteeMinSize {
		return
	}
	if st.kept {
		st.kmem = true
		r.idx.kept = append(r.idx.kept, s)
		r.keyKept(s)
		return
	}
	r.idxFile(s, r.bucketOf(s))
}

// idxFile puts s into bucket b's heap, or into one of its finer heaps if
// that is crowded (its key set by bucketOf).
func (r *Runtime) idxFile(s int32, b int) {
	st := &r.storages[s]
	x := r.idx
	if k := x.kind; (k == idxStale || k == idxAhead) && b >= idxFirst && b < idxInfB {
		if len(x.heaps[b]) >= x.crowded {
			if len(x.heaps) < idxAllHeaps {
				x.growSplit()
			}
			b = idxSplitHeap(b, logSplit(st.knum, st.ksize))
			x.splitFiled++
		}
		v := float64(st.knum) / float64(st.ksize)
		if len(x.heaps[b]) == 0 || v < x.kmin[b] {
			x.kmin[b] = v
		}
	}
	h := x.heaps[b]
	st.ibucket = int16(b)
	st.ipos = int32(len(h))
	x.heaps[b] = append(h, s)
	x.full[b>>6] |= 1 << (b & 63)
	r.idxUp(b, int(st.ipos))
}

// growSplit makes room for the finer heaps (idxSplitHeap), the first time
// a bucket is crowded: an index that never needs them does not allocate
// them.
func (x *candIndex) growSplit() {
	x.heaps = append(x.heaps, make([][]int32, idxAllHeaps-len(x.heaps))...)
	x.kmin = append(x.kmin, make([]float64, idxAllHeaps-len(x.kmin))...)
	x.full = append(x.full, make([]uint64, (idxAllHeaps+63)/64-len(x.full))...)
}

// idxRemove takes s out of the index.
func (r *Runtime) idxRemove(s int32) {
	st := &r.storages[s]
	if st.kmem {
		st.kmem = false
		for i, x := range r.idx.kept {
			if x == s {
				r.idx.kept = append(r.idx.kept[:i], r.idx.kept[i+1:]...)
				break
			}
		}
	}
	r.idxUnfile(s)
}

// idxUnfile takes s out of its bucket's heap, or out of the kept list's
// unkeyed state.
func (r *Runtime) idxUnfile(s int32) {
	st := &r.storages[s]
	b := int(st.ibucket)
	if b == idxKeptList {
		st.ibucket = -1
		return
	}
	if b < 0 {
		return
	}
	h := r.idx.heaps[b]
	i := int(st.ipos)
	last := len(h) - 1
	st.ibucket, st.ipos = -1, -1
	if st.kstick != r.idx.stick {
		r.kg[s]++ // its class registrations are stale
	} // else they stay, for keyNum to reuse when it is filed again
	if i != last {
		h[i] = h[last]
		r.storages[h[i]].ipos = int32(i)
	}
	r.idx.heaps[b] = h[:last]
	if last == 0 {
		r.idx.full[b>>6] &^= 1 << (b & 63)
	}
	if i != last {
		r.idxDown(b, i)
		r.idxUp(b, i)
	}
}

// refineNext (keptIdx) records, after evaluate(s), the next use the
// evaluation scored s with when it is earlier than the one s is keyed
// with, so that the search re-keys s with it (renext), and keyNext (keyKept
// for a kept storage) keys s with it until s is read again; for
// lookahead-dtr only when s is in the never-used bucket (a needed one
// scores as h_DTR, whose key ignores the next use). The score's next use
// is the program's next read of s or, sooner, the earliest read of a
// referenced evicted storage reachable from s through evicted dependents
// (neededBy).
// Such a key stays a bound from below, by keyKept's argument: an eviction
// only adds paths and makes that use sooner; a path from s gets cut, or
// its far end's read passes, only when one of its storages is recomputed,
// which recomputes the path back to s and so reads s; and the program's
// own next read moves on only when s is read. Every read locks s (lock),
// which drops the refined use. A capped walk (needWalk) finds a next use
// no earlier than an uncapped one would, so its key is a bound as well.
// Without it a candidate keyed when its dependents were resident keeps the
// program's next use after they are evicted, scores far above its key,
// and is evaluated, walking the evicted region below it, at every choice:
// on a deep DAG with skip connections that share of the pool grows with
// the model.
func (r *Runtime) refineNext(s int32) {
	st := &r.storages[s]
	if !r.idx.keptIdx || r.evNext >= st.inext {
		return
	}
	if r.idx.never && st.inext != math.MaxInt64 {
		return // lookahead-dtr: the next use only decides the never-used bucket
	}
	if !st.rnextOK || r.evNext < st.rnext {
		st.rnext, st.rnextOK = r.evNext, true
	}
	r.idx.renext = append(r.idx.renext, s)
}

// keyKept files kept storage s, listed in kept: in the heaps when the index
// keys kept storages (keptIdx), else with idxKeptList (evaluated at every
// choice). Its key's next use is the one a walk found since s was last
// read (rnext, from an earlier keying or an evaluation: refineNext), or a
// fresh walk's.
//
// A kept storage is read by no program op (it is released); its next use is
// the earliest step at which a referenced evicted dependent, reachable
// through evicted storages, is read (need). Evictions only add paths, and
// make it earlier; a dependent's release or its becoming gone changes
// nothing, as the program reads neither again. It gets later only when a
// dependent reading s directly is recomputed (its path is cut there), or
// when the step passes it, which means such a dependent was recomputed
// (the read at that step rematerialized the path from s). Either way s was
// read, and every op locks its inputs (lock), which takes s out of the
// index and drops rnext; it is filed again, with a fresh walk, when they
// are unlocked. So a key's next use is never before the one a walk would
// find now, and its score bound is a bound from below (checkScan checks
// both in the tests). A walk that reached the cap (needWalk) left
// dependents unvisited, so its next use is no earlier than an uncapped
// walk's: a bound as well. Evaluations in a choice whose walks were capped
// may score a candidate below its key; such a choice is not the scan's
// either, whose capped walks depend on the order it evaluates in.
func (r *Runtime) keyKept(s int32) {
	st := &r.storages[s]
	if !r.idx.keptIdx {
		st.ibucket = idxKeptList
		return
	}
	if !st.rnextOK {
		n, capped := r.keptNext(s)
		if capped {
			r.keptCapped++
		}
		st.rnext, st.rnextOK = n, true
	}
	st.inext = st.rnext
	r.keptKeyed++
	r.idxFile(s, r.bucketOf(s))
}

// keptNext returns kept storage s's next use from a fresh walk (its own
// memo and cap) and whether the walk was capped; the state of a choice in
// progress (the cap left, the burst bounds' flag) is left as it was.
func (r *Runtime) keptNext(s int32) (int64, bool) {
	left, lb, hit := r.needLeft, r.lbOn, r.needCapHit
	r.resetNeed()
	n := r.nextUse(s)
	capped := r.needCapHit
	r.needLeft, r.lbOn, r.needCapHit = left, lb, hit
	return n, capped
}

// idxRekey re-files s after its last access or cost changed.
func (r *Runtime) idxRekey(s int32) {
	if r.idx == nil || r.storages[s].ibucket < 0 {
		return // not indexed, or in the kept list (no key)
	}
	if r.storages[s].kmem {
		r.idxUnfile(s) // it stays listed in kept
		r.keyKept(s)
		return
	}
	r.idxRemove(s)
	r.idxInsert(s)
}

// touch sets s's last access (re-keying it in the index).
func (r *Runtime) touch(s int32, clock int64) {
	st := &r.storages[s]
	if st.lastAccess == clock {
		return
	}
	st.lastAccess = clock
	if r.idx != nil && st.ibucket >= 0 && (r.idx.kind == idxStale || r.idx.kind == idxLRU) && !r.idx.seqKeyed(int(st.ibucket)) {
		// the key only grows: sift down in place
		st.ikey = float64(clock)
		r.idxDown(int(st.ibucket), int(st.ipos))
	}
}

func (r *Runtime) idxLess(a, b int32) bool {
	if r.idx.exact {
		return r.idxBefore(a, b)
	}
	sa, sb := &r.storages[a], &r.storages[b]
	if r.idx.kind == idxStatic {
		// msps: by the key's c/m compared exactly, ties to the later in
		// pool order first (staticSubtreeAbove)
		if sa.size != 0 && sb.size != 0 {
			if c := cmpScore(mkScore(sa.knum, sa.size, 1), mkScore(sb.knum, sb.size, 1)); c != 0 {
				return c < 0
			}
		} else if sa.ikey != sb.ikey {
			return sa.ikey < sb.ikey
		}
		return sa.seq > sb.seq
	}
	if sa.ikey != sb.ikey || r.idx.kind != idxStale {
		return sa.ikey < sb.ikey
	}
	// staleness buckets: ties in the last access (the seq-keyed buckets
	// have none) by the key's c/m, then the later in pool order first, so
	// that the nodes below a node and accessed at its clock rank after it
	// by their keys (staleSubtreeAbove)
	if c := cmpScore(mkScore(sa.knum, sa.size, 1), mkScore(sb.knum, sb.size, 1)); c != 0 {
		return c < 0
	}
	return sa.seq > sb.seq
}

// staleSubtreeAbove reports whether no storage in the subtree of s in
// staleness bucket b's heap can beat the best c holds. The storages there
// last accessed at the same clock as s score at least s's key, num / (m x
// d), and rank after s among equal keys (idxLess); for dtr-local, whose key
// is the exact score, that decides a tie too (the later in pool order
// wins). Those accessed later have a staleness of at most d - 1 (the clock
// counts whole ns), so they score at least the bucket's least c/m over
// d - 1. Ties in the last access are common: a rematerialization touches
// the arguments of every op up its recursion before it runs any.
func (r *Runtime) staleSubtreeAbove(b int, s int32, c *idxChoice) bool {
	st := &r.storages[s]
	d := r.stats.Clock - st.lastAccess
	if d <= 0 || st.ksize == 0 {
		return false // infinite scores: bound() decides
	}
	if d > 1 && !(r.idx.blo(b)/float64(d-1) > c.bs.f) {
		return false
	}
	if r.cfg.Heuristic == HDTRLocal {
		return !r.idxBetter(mkScore(st.knum, st.ksize, d), st.seq, c.bs, c.bseq)
	}
	return r.nodeBound(b, s) > c.bs.f
}

// staticSubtreeAbove reports whether no storage in the subtree of s in the
// static (msps) heap can beat the best c holds: they score at least their
// keys, which are at least s's, and among keys equal to s's rank after it
// in pool order (idxLess), so with s's key at the best score and s before
// the best in pool order, a tie loses too (it goes to the later
// candidate). Between zero scores the earlier wins, so a zero best
// prunes nothing here. Layers of one shape with no evicted ancestors tie
// exactly: without this a choice evaluated each of them.
func (r *Runtime) staticSubtreeAbove(s int32, c *idxChoice) bool {
	st := &r.storages[s]
	if st.size == 0 || c.bs.f == 0 {
		return false
	}
	k := r.cmp(mkScore(st.knum, st.size, 1), c.bs)
	return k > 0 || (k == 0 && st.seq < c.bseq)
}

// idxBefore reports whether the scan would rank candidate a before b by
// the exact scores of lru and size (lower first, ties as idxBetter breaks
// them: to the later candidate in pool order, or the earlier one between
// zero scores), comparing the last accesses and sizes themselves (1/m
// may round two sizes alike). Ties in the last access are common: a
// rematerialization touches the arguments of every op up its recursion
// before it runs any, so a chain rebuilt from far back leaves hundreds of
// storages accessed at one clock, which the search used to evaluate one
// by one.
func (r *Runtime) idxBefore(a, b int32) bool {
	sa, sb := &r.storages[a], &r.storages[b]
	if r.cfg.Heuristic == Size {
		switch {
		case sa.size == sb.size: // ties, +Inf (size 0) too
			return sa.seq > sb.seq
		case sa.size == 0 || sb.size == 0:
			return sb.size == 0
		}
		return sa.size > sb.size
	}
	if sa.lastAccess != sb.lastAccess {
		return sa.lastAccess < sb.lastAccess
	}
	if sa.lastAccess == 0 {
		return sa.seq < sb.seq
	}
	return sa.seq > sb.seq
}

func (r *Runtime) idxUp(b, i int) {
	h := r.idx.heaps[b]
	for i > 0 {
		p := (i - 1) / 2
		if !r.idxLess(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		r.storages[h[i]].ipos = int32(i)
		r.storages[h[p]].ipos = int32(p)
		i = p
	}
}

func (r *Runtime) idxDown(b, i int) {
	h := r.idx.heaps[b]
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if l+1 < n && r.idxLess(h[l+1], h[l]) {
			c = l + 1
		}
		if !r.idxLess(h[c], h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		r.storages[h[i]].ipos = int32(i)
		r.storages[h[c]].ipos = int32(c)
		i = c
	}
}

// bound is a lower bound of s's exact score in bucket b at the current clock.
func (r *Runtime) bound(b int, s int32) float64 {
	if r.idx.seqKeyed(b) {
		return 0 // the heap order says nothing about the score
	}
	st := &r.storages[s]
	switch r.idx.kind {
	case idxStale:
		d := r.stats.Clock - st.lastAccess
		if d <= 0 {
			return math.Inf(1)
		}
		return r.idx.blo(b) / float64(d)
	case idxAhead:
		if b == idxNever {
			return 0
		}
		d := st.inext - r.step
		if d < 1 {
			d = 1
		}
		return r.idx.blo(b) / float64(d)
	}
	if math.IsInf(st.ikey, 0) {
		return st.ikey // size 0 (Inf - Inf x slack would be NaN)
	}
	return st.ikey - math.Abs(st.ikey)*idxSlack
}

// blo returns a lower bound of c/m over the members of bucket b of the
// staleness or lookahead index: the larger of the bucket's edge and its
// members' least key (less the slack).
func (x *candIndex) blo(b int) float64 {
	if b < idxFirst || (b >= idxInfB && b < idxBuckets) {
		return bucketLo(b)
	}
	return max(bucketLo(b), x.kmin[b]*(1-idxSlack))
}

// startBurst begins an eviction burst: the choices of one free call, between
// which only evictions happen. The clock, the step, the pinned and
// referenced sets and every storage's size and own cost stay put, and an
// eviction only adds to the evicted regions, eq-classes and dropped
// dependents the scores sum or look up: so within a burst a candidate's
// score never falls, and the score a choice computed bounds it from below
// for the rest of the burst (lbSkip). That holds for the heuristics whose
// numerators count evicted neighbourhoods and whose next-use terms only get
// sooner, and not with a host's adjacent free bytes in the size term, swaps
// (their transfer advances the clock), search noise, classes below zero
// (parity mode's negative eq-classes: a merge with one lowers a
// neighbour cost; a burst that begins without them has none) or need's walk cap (a
// capped walk may find a later next use: the burst stops using bounds).
func (r *Runtime) startBurst() {
	r.burst++
	if r.burst == 0 {
		for i := range r.storages {
			r.storages[i].lbBurst = 0
		}
		r.burst = 1
	}
	r.lbOn = false
	if r.idx == nil || r.adj != nil || r.cfg.Swap || r.noise != nil || r.noBurstBounds || r.ufNeg > 0 {
		return
	}
	switch r.cfg.Heuristic {
	case HDTR, HDTREqClass, MSPS, Lookahead, LookaheadMSPS, LookaheadDTR:
		r.lbOn = true
	}
}

// lbSkip reports whether s's bound from an earlier choice of this burst puts
// it strictly above best (it cannot win or tie).
func (r *Runtime) lbSkip(s int32, best float64) bool {
	st := &r.storages[s]
	return r.lbOn && st.lbBurst == r.burst && st.lb > best+math.Abs(best)*1e-9
}

// lbStore records s's score in this burst (an early-stopped walk's partial
// score is below the exact one, so still a lower bound).
func (r *Runtime) lbStore(s int32, sc score) {
	if r.lbOn {
		st := &r.storages[s]
		st.lb, st.lbBurst = sc.f, r.burst
	}
}

// nodeBound is a lower bound of s's own exact score from its key's
// numerator (tighter than its bucket's, which holds for the subtree).
func (r *Runtime) nodeBound(b int, s int32) float64 {
	if r.idx.seqKeyed(b) || (r.idx.kind != idxStale && r.idx.kind != idxAhead) {
		return r.bound(b, s)
	}
	st := &r.storages[s]
	var d int64
	if r.idx.kind == idxStale {
		d = r.stats.Clock - st.lastAccess
	} else {
		d = max(st.inext-r.step, 1)
	}
	if d <= 0 || st.ksize == 0 {
		return math.Inf(1)
	}
	return float64(st.knum) / (float64(st.ksize) * float64(d)) * (1 - idxSlack)
}

// idxBetter reports whether (sc, seq) beats the best so far under the scan's
// rule: lower score, ties to the later candidate, the first of two zeros.
func (r *Runtime) idxBetter(sc score, seq int64, bs score, bseq int64) bool {
	if sc.f == 0 && bs.f == 0 {
		return seq < bseq
	}
	c := r.cmp(sc, bs)
	return c < 0 || (c == 0 && seq > bseq)
}

// chooseIndexed returns the candidate the scan would choose and its score,
// or -1 if the index is empty. It searches the bucket with the lowest head
// bound first (to find a good best early), then every other bucket whose
// head bound does not exceed the best.
func (r *Runtime) chooseIndexed() (int32, score) {
	r.idxChoices++
	x := r.idx
	first, fb := -1, math.Inf(1)
	for w, bits := range x.full {
		for bits != 0 {
			b := w<<6 | mathbits.TrailingZeros64(bits)
			bits &= bits - 1
			if hb := r.bound(b, x.heaps[b][0]); first < 0 || hb < fb {
				first, fb = b, hb
			}
		}
	}
	c := idxChoice{best: -1}
	if first < 0 && len(x.kept) == 0 {
		return -1, score{}
	}
	if first >= 0 {
		r.idxSearch(first, &c)
	}
	for w, bits := range x.full {
		for bits != 0 {
			b := w<<6 | mathbits.TrailingZeros64(bits)
			bits &= bits - 1
			if b != first {
				r.idxSearch(b, &c)
			}
		}
	}
	// the kept storages without a key (all of them, unless the index keys
	// them: keptIdx)
	if !x.keptIdx {
		for _, s := range x.kept {
			if c.best >= 0 && r.lbSkip(s, c.bs.f) {
				continue
			}
			sc := r.evaluate(s)
			r.lbStore(s, sc)
			if seq := r.storages[s].seq; c.best < 0 || r.idxBetter(sc, seq, c.bs, c.bseq) {
				c.best, c.bs, c.bseq = s, sc, seq
			}
		}
	}
	// lazy update: the candidates found costlier than their keys say get
	// their keys raised, so later searches skip them sooner
	if len(r.walkKeeps) > 0 {
		r.regionKeepAll(c.best)
	}
	for _, s := range x.refresh {
		if st := &r.storages[s]; st.ibucket >= 0 {
			if !x.region {
				st.kstick = 0 // a fresh key part, not the one kept
			} // else the part is the evaluation's (regionKeep)
			r.idxRekey(s)
		}
	}
	x.refresh = x.refresh[:0]
	for _, s := range x.renext {
		if st := &r.storages[s]; st.ibucket >= 0 && st.rnextOK && st.rnext < st.inext {
			r.idxRekey(s)
		}
	}
	x.renext = x.renext[:0]
	x.lastZero = c.best >= 0 && c.bs.f == 0
	return c.best, c.bs
}

// parityIndexable reports whether, in parity mode, the index may choose now
// (see the package comment on the index): no candidate scores 0/0, and no
// LRU candidate has a negative last access. The zero-cost candidates are
// the only ones that can score 0/0.
func (r *Runtime) parityIndexable() bool {
	x := r.idx
	if r.ufNeg > 0 {
		// an exact numerator is at least the cost less the classes'
		// negative mass: a candidate costing less may score below zero,
		// which the index's bounds do not allow for
		for _, s := range r.pool {
			if s >= 0 && r.storages[s].compute < r.ufNeg {
				return false
			}
		}
	}
	if x.kind == idxLRU {
		h := x.heaps[0]
		return len(h) == 0 || r.storages[h[0]].lastAccess >= 0
	}
	if r.cfg.Heuristic == Size {
		return true // numerator 1
	}
	j := 0
	for _, s := range x.zeroCost {
		if st := &r.storages[s]; st.poolPos < 0 || st.compute != 0 {
			st.inZero = false // makeEvictable lists it again if it returns
			continue
		}
		x.zeroCost[j] = s
		j++
	}
	x.zeroCost = x.zeroCost[:j]
	for _, s := range x.zeroCost {
		st := &r.storages[s]
		if st.size == 0 || (r.cfg.Heuristic != MSPS && r.staleness(s) == 0) {
			evals := r.stats.HeuristicEvals
			num := r.evaluate(s).num
			r.stats.HeuristicEvals = evals
			if num == 0 {
				return false
			}
		}
	}
	return true
}

// scanEvals is the number of evaluations the reference's scan makes to
// choose best: the live pool entries up to and including best when its
// score is 0 (the scan stops there), else the whole live pool.
func (r *Runtime) scanEvals(best int32) int64 {
	if !r.idx.lastZero {
		return int64(len(r.pool) - r.holes)
	}
	n := int64(0)
	for _, s := range r.pool[:r.storages[best].poolPos+1] {
		if s >= 0 {
			n++
		}
	}
	return n
}

// idxChoice is the best candidate found so far.
type idxChoice struct {
	best int32
	bs   score
	bseq int64
}

// idxSearch evaluates the candidates of bucket b whose bound does not exceed
// the best so far (a pruned DFS over the heap: a node's descendants have
// keys, hence bounds, at least its own).
func (r *Runtime) idxSearch(b int, c *idxChoice) {
	h := r.idx.heaps[b]
	staleTies := r.idx.kind == idxStale && !r.idx.seqKeyed(b) // staleSubtreeAbove applies
	staticTies := r.idx.kind == idxStatic && !r.idx.exact     // staticSubtreeAbove applies
	stack := append(r.idx.stack[:0], 0)
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		s := h[i]
		r.idxNodes++
		if c.best >= 0 && r.bound(b, s) > c.bs.f {
			continue // the whole subtree is bounded above the best
		}
		if c.best >= 0 && staticTies && r.staticSubtreeAbove(s, c) {
			r.stalePrunes++
			continue
		}
		if c.best >= 0 && staleTies && r.staleSubtreeAbove(b, s, c) {
			r.stalePrunes++
			continue
		}
		if c.best >= 0 && c.bs.f == 0 && r.idx.seqKeyed(b) && r.storages[s].seq > c.bseq {
			continue // the subtree comes after the best zero in pool order
		}
		// an exact heap's descendants rank after s (idxBefore)
		if l := 2*i + 1; int(l) < len(h) && !r.idx.exact {
			stack = append(stack, l)
			if l+1 < int32(len(h)) {
				stack = append(stack, l+1)
			}
		}
		if c.best >= 0 && (r.nodeBound(b, s) > c.bs.f || r.lbSkip(s, c.bs.f)) {
			continue // s itself cannot win (its subtree may)
		}
		if c.best >= 0 {
			r.evalBest = c.bs.f
		}
		r.wrec = r.idx.region
		sc := r.evaluate(s)
		r.evalBest = math.Inf(1)
		if r.idx.region {
			r.regionKeep(s)
		}
		r.lbStore(s, sc)
		st := &r.storages[s]
		stale := false
		switch {
		case r.idx.eq && b != idxNever && r.eqOf == s:
			if !r.idx.neg && !st.kexact && r.hcost(s)+r.eqSum > st.knum {
				// the floors were too low for it: key it exactly from now on
				st.kexact = true
				stale = true
			} else {
				stale = max(r.hcost(s)+r.eqKeyPart(st.kexact), 0) > st.knum
			}
		}
		// keyed while more memory was free next to it (megengine): its
		// bound is below its score by their ratio
		if stale || (r.adjWatch && r.sizeTerm(s) < st.ksize) {
			r.idx.refresh = append(r.idx.refresh, s)
		}
		r.refineNext(s)
		if seq := r.storages[s].seq; c.best < 0 || r.idxBetter(sc, seq, c.bs, c.bseq) {
			c.best, c.bs, c.bseq = s, sc, seq
		}
	}
	r.idx.stack = stack
}

// regionKeyed reports whether the index keys cfg's candidates with region
// parts: h_DTR and the MSPS family, whose scores sum walked regions
// (without parity mode's kept regions, whose sums cost nothing to read).
//
// A region's sum can only fall when one of its evicted storages is
// brought back (costs only grow, edges are never removed, and an eviction
// only adds to regions): the storages a walk counted stay reachable from
// the candidate through storages the walk counted while all of them stay
// evicted. So the sum an evaluation walked (the whole region, or the part
// before the walk stopped above the best) stays a lower bound of the
// region's sum until one of the storages it counted comes back; those
// storages list the candidate (wreg), and their return re-keys it with
// its cost alone (setResidency). Without it a candidate's key counted its
// cost alone, and a choice evaluated, walking its region each time, every
// candidate whose region made it score far above its key: the stale
// boundary of the evicted part of a deep model, a share of the pool that
// grows with the model.
func regionKeyed(cfg *Config) bool {
	if incFor(cfg) {
		return false
	}
	switch cfg.Heuristic {
	case HDTR, MSPS, LookaheadMSPS, LookaheadDTR:
		return true
	}
	return false
}

// regionKeep records the region sum the last evaluation of candidate s
// walked (wsum over wlist), if it exceeds the part its key has, for
// regionKeepAll to make it the key's part after the search.
func (r *Runtime) regionKeep(s int32) {
	r.wrec = false
	st := &r.storages[s]
	old := int64(0)
	if st.kstick == r.idx.stick {
		old = st.kpart
	}
	if r.wsum <= old {
		return
	}
	r.walkKeeps = append(r.walkKeeps, regionWalk{s: s, end: int32(len(r.keepNodes)) + int32(len(r.wlist)), sum: r.wsum})
	r.keepNodes = append(r.keepNodes, r.wlist...)
}

// regionWalk is a walk regionKeep recorded: its candidate, the end of its
// storages in Runtime.keepNodes (they start where the previous walk's end)
// and their summed cost.
type regionWalk struct {
	s, end int32
	sum    int64
}

// regionKeepAll makes the walks the search recorded their candidates' key
// parts, except the chosen candidate's (it is evicted next, which makes
// its key stale at once; on a model whose evicted storages form one large
// region its walk was most of the search's work): each candidate is
// registered with every storage its walk counted, under a new key
// generation, and re-keyed (refresh).
func (r *Runtime) regionKeepAll(chosen int32) {
	x := r.idx
	start := int32(0)
	for _, k := range r.walkKeeps {
		nodes := r.keepNodes[start:k.end]
		start = k.end
		st := &r.storages[k.s]
		if k.s == chosen {
			continue // regionKeep kept only sums above the key's part
		}
		if r.wregTotal+int64(len(nodes)) > r.wregCap {
			r.wregCompactAll()
		}
		r.kg[k.s]++
		for _, w := range nodes {
			r.wregAdd(w, k.s, r.kg[k.s])
		}
		st.kstick, st.kpart = x.stick, k.sum
		x.refresh = append(x.refresh, k.s)
	}
	r.walkKeeps, r.keepNodes = r.walkKeeps[:0], r.keepNodes[:0]
}
