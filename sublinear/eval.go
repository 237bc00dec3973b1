package sublinear

import (
	"slices"
	"sync"

	"github.com/remat-dev/remat/graph"
)

// mgeResult is the outcome of evaluating one genome.
type mgeResult struct {
	peak   int64 // simulated ideal-allocator peak bytes
	time   int64 // recompute time: sum of the duplicated ops' times
	nsplit int32 // number of split points
	ndup   int32 // duplicated ops
}

// mgeRecomp is one scheduled recompute: var v, discarded after its access at
// time disc, is recomputed right before the original op reader, by
// duplicates that reach back no further than bb, the first op of v's block.
type mgeRecomp struct {
	reader, disc, v, bb int32
}

// mgeEvaluator turns a genome (split points) into the modified operator
// sequence and measures it. It holds every scratch buffer, so evaluating a
// genome allocates nothing once the buffers have grown; one evaluator per
// worker. The work is O(ops + edges + duplicates).
type mgeEvaluator struct {
	p *mgeProblem

	stamp   int32
	vs      []mgeVar
	recomps []mgeRecomp
	recTmp  []mgeRecomp // sortRecomps' other buffer
	bucket  []int32     // sortRecomps' counts, one per op + 1
	discs   []mgeRecomp // the discard plan's discards, v = -1 once cancelled
	planTmp []mgeRecomp // score's copy of a plan, to compare with a memo hit's
	// planHash is the last discard plan's hash (the sum of mixRecomp over
	// its recomputes, mixed with their count)
	planHash uint64

	seq   []int32   // modified sequence: op ids
	dup   []bool    // seq[i] is a duplicate
	flags []bool    // free flags per slot of seq (liveness pass)
	st    []mgeStor // peak's per-storage state, by storage index
	mark  []int32   // scratch for thresholdSplits
	ring  []int64   // workspace ring of the forward pass
}

// mgeStor is the peak pass's state of one storage in 8 bytes, half what
// the size inline would take, since the passes read it at scattered
// places: its size, as an index into the problem's table of distinct
// sizes (mgeProblem.sizes), and one stamp. The reverse pass sets mark to
// its stamp for "read later"; the forward pass takes the next stamp and
// sets mark to it for "resident", which no mark of the reverse pass
// equals.
type mgeStor struct {
	mark int32
	size int32 // index into mgeProblem.sizes
}

// mgeVar is what applyDiscardPlan's recursion reads of a var, in one
// 16-byte record: the recursion visits vars all over the graph, and on
// 100k-op graphs each of the separate per-tensor arrays it read (producer,
// last access, discard and recompute stamps, the discard's access) missed
// the cache.
type mgeVar struct {
	dupOp   int32 // producer, or -1 if a recompute may not duplicate it
	lastAcc int32 // p.lastAcc
	// end replaces lastAcc as the var's last planned access when
	// endStamp == stamp: its discard access, or endRecomputed once a
	// duplicate has recomputed it (MegEngine's var_map).
	endStamp int32
	end      int32
}

// endRecomputed is mgeVar.end of a var recomputed in this evaluation: it
// stays resident for every later reader.
const endRecomputed = 1<<31 - 1

func newMgeEvaluator(p *mgeProblem) *mgeEvaluator {
	e := &mgeEvaluator{
		p:    p,
		vs:   make([]mgeVar, p.nt),
		st:   make([]mgeStor, len(p.sidSize)),
		mark: make([]int32, p.nt),
	}
	for i := range e.vs {
		op := p.prod[i]
		if op < 0 || p.noDup[op] {
			op = -1
		}
		e.vs[i] = mgeVar{dupOp: op, lastAcc: p.lastAcc[i]}
	}
	for i, k := range p.sidSize {
		e.st[i].size = k
	}
	return e
}

func (e *mgeEvaluator) nextStamp() {
	e.stamp++
	if e.stamp == 1<<31-1 { // wrap: clear every stamped array
		e.stamp = 1
		for i := range e.vs {
			e.vs[i].endStamp = 0
		}
		for i := range e.st {
			e.st[i].mark = 0
		}
	}
}

// evaluate builds the modified sequence for split points s (a valid genome)
// and returns its peak and recompute time. The sequence stays in e.seq and
// e.dup until the next call.
func (e *mgeEvaluator) evaluate(s []int32) mgeResult {
	if e.p.n == 0 {
		return mgeResult{peak: e.p.resident0}
	}
	e.plan(s)
	return e.run(s)
}

// plan starts an evaluation of s: a fresh stamp, an empty sequence and
// s's discard plan.
func (e *mgeEvaluator) plan(s []int32) {
	e.nextStamp()
	e.seq = e.seq[:0]
	e.dup = e.dup[:0]
	e.makeDiscardPlan(s)
}

// run builds the modified sequence from the discard plan made for s and
// measures it.
func (e *mgeEvaluator) run(s []int32) mgeResult {
	var r mgeResult
	r.nsplit = int32(len(s))
	r.time, r.ndup = e.applyDiscardPlan()
	r.peak = e.peak()
	return r
}

// score returns what evaluate(s) returns, without building and replaying
// the modified sequence when memo holds a genome with the same discard
// plan: the plan (the recomputes, with the block each may reach back to)
// decides the sequence, hence its peak, time and duplicates, and different
// split points often give the same plan (a point moved or added where no
// var is discarded). The memo is keyed by a hash of the plan; a hit is
// checked by making the remembered genome's plan again and comparing, so
// the result is always the replay's. e.seq is left undefined.
func (e *mgeEvaluator) score(s []int32, memo *planMemo) mgeResult {
	if e.p.n == 0 {
		return e.evaluate(s)
	}
	e.plan(s)
	h := e.planHash
	if g, r, ok := memo.get(h); ok {
		e.planTmp = append(e.planTmp[:0], e.recomps...)
		e.plan(g)
		if slices.Equal(e.recomps, e.planTmp) {
			memo.hit()
			r.nsplit = int32(len(s))
			return r
		}
		e.plan(s) // a different plan with the same hash: s's own
		return e.run(s)
	}
	r := e.run(s)
	memo.put(h, s, r)
	return r
}

// mixRecomp is a recompute's term of its plan's hash (makeDiscardPlan sums
// them): two multiplications, where hashing the sorted list in a pass of
// its own took 5% of a genetic search on resnet-cifar. A weak hash costs
// only memo hits that the check turns down.
func mixRecomp(r mgeRecomp) uint64 {
	x := (uint64(uint32(r.reader))<<32 | uint64(uint32(r.v))) * 0x9e3779b97f4a7c15
	y := (uint64(uint32(r.disc))<<32 | uint64(uint32(r.bb))) * 0xc2b2ae3d27d4eb4f
	x ^= y
	return x ^ x>>29
}

// planMemo remembers, per discard plan hash, the first genome scored with
// that plan and its result, for one search's evaluators (score). It holds
// at most limit split points in all, as genomeMemo does; which genomes it
// keeps may depend on the order the workers score them, never a result.
type planMemo struct {
	mu    sync.Mutex
	m     map[uint64]mgeRecord
	held  int
	limit int
	hits  int64 // scores answered from the memo (tests, benchmarks)
}

func (m *planMemo) get(h uint64) ([]int32, mgeResult, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.m[h]
	return rec.s, rec.r, ok
}

func (m *planMemo) put(h uint64, s []int32, r mgeResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m[h]; ok || m.held+len(s) > m.limit {
		return
	}
	if m.m == nil {
		m.m = map[uint64]mgeRecord{}
	}
	m.held += len(s)
	m.m[h] = mgeRecord{s: slices.Clone(s), r: r}
}

func (m *planMemo) hit() {
	m.mu.Lock()
	m.hits++
	m.mu.Unlock()
}

func (m *planMemo) reuses() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hits
}

// makeDiscardPlan is MegEngine's make_discard_plan: for each block, every
// var created in it and alive after it (except the outputs of its last op,
// the checkpoints) is discarded after the access whose gap to the next access
// is largest, provided that gap exceeds the next reader's input count; then
// refine_block_discard_rec cancels discards of the previous block's vars
// that would be recomputed right in this block.
func (e *mgeEvaluator) makeDiscardPlan(s []int32) {
	p := e.p
	e.recomps = e.recomps[:0]
	e.discs = e.discs[:0]
	prevLo, prevHi := 0, 0 // the previous block's discards in e.discs
	begin := int32(0)
	for bi, end := range s {
		lo := len(e.discs)
		// the outputs of the last op (end) are the block's checkpoints
		for op := begin; op < end; op++ {
			for _, v := range p.outVars[p.outStart[op]:p.outStart[op+1]] {
				if !p.discardable(v) || p.lastAcc[v] <= end {
					continue
				}
				a0, a1 := p.accStart[v], p.accStart[v+1]
				acc := p.accTime[a0:a1]
				// next access: first with time > end.
				na := int32(1)
				for acc[na] <= end {
					na++
				}
				best := int32(-1)
				var bestStride int32
				first := na - 1
				if p.firstDisc != nil {
					first = max(first, p.firstDisc[v])
				}
				for i := first; i < int32(len(acc))-1; i++ {
					if i == 0 && p.usedOut[op] == 1 {
						continue // never discard a single output right away
					}
					stride := acc[i+1] - acc[i]
					if stride > p.varIn[acc[i+1]] && (best < 0 || stride > bestStride) {
						best, bestStride = i, stride
					}
				}
				if best >= 0 {
					e.discs = append(e.discs, mgeRecomp{reader: acc[best+1], disc: acc[best], v: v, bb: begin})
				}
			}
		}
		// refine_block_discard_rec: a var discarded by the previous block
		// and needed again within this block is kept.
		if bi > 0 {
			for i := prevLo; i < prevHi; i++ {
				if d := &e.discs[i]; d.reader >= begin && d.reader <= end {
					d.v = -1
				}
			}
		}
		prevLo, prevHi = lo, len(e.discs)
		begin = end + 1
	}
	// Collect the surviving discards as scheduled recomputes, hashing
	// them as a set (a plan lists each var once) for score's memo.
	var h uint64
	for _, d := range e.discs {
		if d.v < 0 {
			continue
		}
		e.recomps = append(e.recomps, d)
		e.vs[d.v].endStamp, e.vs[d.v].end = e.stamp, d.disc
		h += mixRecomp(d)
	}
	e.planHash = splitmix64(h ^ uint64(len(e.recomps)))
	e.sortRecomps()
}

// sortRecomps orders the recomputes by (reader, discard access, var): a
// counting sort on the reader (an op index), then insertion sort within
// each reader's few entries. O(ops + recomputes), where a comparison sort
// was the largest superlinear term on 100k-op graphs.
func (e *mgeEvaluator) sortRecomps() {
	rs := e.recomps
	if len(rs) < 64 {
		slices.SortFunc(rs, cmpRecomp)
		return
	}
	n := e.p.n
	if cap(e.bucket) < n+1 {
		e.bucket = make([]int32, n+1)
	}
	cnt := e.bucket[:n+1]
	clear(cnt)
	for _, r := range rs {
		cnt[r.reader+1]++
	}
	for i := 0; i < n; i++ {
		cnt[i+1] += cnt[i]
	}
	if cap(e.recTmp) < len(rs) {
		e.recTmp = make([]mgeRecomp, len(rs))
	}
	tmp := e.recTmp[:len(rs)]
	for _, r := range rs {
		tmp[cnt[r.reader]] = r
		cnt[r.reader]++
	}
	// tmp is grouped by reader in increasing order; sort each group.
	for lo := 0; lo < len(tmp); {
		hi := lo + 1
		for hi < len(tmp) && tmp[hi].reader == tmp[lo].reader {
			hi++
		}
		for i := lo + 1; i < hi; i++ {
			for j := i; j > lo && cmpRecomp(tmp[j], tmp[j-1]) < 0; j-- {
				tmp[j], tmp[j-1] = tmp[j-1], tmp[j]
			}
		}
		lo = hi
	}
	e.recomps, e.recTmp = tmp, rs
}

func cmpRecomp(a, b mgeRecomp) int {
	if a.reader != b.reader {
		return int(a.reader - b.reader)
	}
	if a.disc != b.disc {
		return int(a.disc - b.disc)
	}
	return int(a.v - b.v)
}

// resident reports whether var x is resident when the original op at time
// t is about to run: recomputed already, or its last planned access (the
// discard access, or its last read) not before t. x is always produced
// before t: it is read at t, or by an op produced before t.
func (e *mgeEvaluator) resident(x, t int32) bool {
	v := &e.vs[x]
	if v.endStamp == e.stamp {
		return v.end >= t
	}
	return v.lastAcc >= t
}

// applyDiscardPlan is MegEngine's apply_discard_plan: walk the original
// sequence; before each op, recompute the vars scheduled for it by
// duplicating their producers recursively. A duplicate never reaches before
// the block of the var being recomputed and never duplicates a bad op: such
// inputs are used as they are (their lives are extended). Once recomputed, a
// var stays resident for all later readers.
func (e *mgeEvaluator) applyDiscardPlan() (time int64, ndup int32) {
	p := e.p
	k := 0
	for t := int32(0); t < int32(p.n); t++ {
		for k < len(e.recomps) && e.recomps[k].reader == t {
			r := e.recomps[k]
			k++
			if v := &e.vs[r.v]; v.endStamp == e.stamp && v.end == endRecomputed {
				continue
			}
			time, ndup = e.addDep(r.v, r.bb, t, time, ndup)
		}
		e.seq = append(e.seq, t)
		e.dup = append(e.dup, false)
	}
	return time, ndup
}

func (e *mgeEvaluator) addDep(x, bb, t int32, time int64, ndup int32) (int64, int32) {
	p := e.p
	if e.resident(x, t) {
		return time, ndup
	}
	op := e.vs[x].dupOp // -1 if it may not be duplicated
	if op < bb {
		return time, ndup
	}
	for _, r := range p.inRoots[p.inStart[op]:p.inStart[op+1]] {
		time, ndup = e.addDep(r, bb, t, time, ndup)
	}
	e.seq = append(e.seq, op)
	e.dup = append(e.dup, true)
	for _, o := range p.outVars[p.outStart[op]:p.outStart[op+1]] {
		e.vs[o].endStamp, e.vs[o].end = e.stamp, endRecomputed
	}
	return time + p.opTime[op], ndup + 1
}

// peak replays e.seq the way sim.PlanFromSchedule plans it and the ideal
// allocator counts it: external storages resident throughout; a compute
// allocates its storage-owning outputs that are not resident, plus its
// workspace while it runs; each storage is freed right after its last read
// before it is re-created (or right after it is produced if unread).
func (e *mgeEvaluator) peak() int64 {
	p := e.p
	// Reverse pass: free flags per slot.
	total := 0
	for _, op := range e.seq {
		total += int(p.slotStart[op+1] - p.slotStart[op])
	}
	if cap(e.flags) < total {
		e.flags = make([]bool, total)
	}
	e.flags = e.flags[:total]
	e.nextStamp() // fresh liveness stamp; the vars' marks are no longer needed
	live := e.stamp
	pos := total
	for i := len(e.seq) - 1; i >= 0; i-- {
		op := e.seq[i]
		sl := p.slots[p.slotStart[op]:p.slotStart[op+1]]
		pos -= len(sl)
		no := int(p.slotOut[op])
		for j, t := range sl {
			s := &e.st[t]
			e.flags[pos+j] = s.mark != live
			if j < no {
				s.mark = 0
			} else {
				s.mark = live
			}
		}
	}
	e.nextStamp() // residency stamp, equal to no mark the reverse pass left
	res := e.stamp
	// Forward pass. ring holds the workspaces of the previous wsSlots-1
	// computes, still alive (sim's workspace ring).
	cur := p.resident0
	peak := cur
	pos = 0
	keepWs := p.wsSlots - 1
	if cap(e.ring) < keepWs+1 {
		e.ring = make([]int64, keepWs+1)
	}
	ring := e.ring[:0]
	for _, op := range e.seq {
		for _, t := range p.allocs[p.allocStart[op]:p.allocStart[op+1]] {
			if s := &e.st[t]; s.mark != res {
				s.mark = res
				cur += p.sizes[s.size]
			}
		}
		ws := p.workspace[op]
		if c := cur + ws; c > peak {
			peak = c
		}
		if keepWs > 0 {
			cur += ws
			if len(ring) == keepWs {
				cur -= ring[0]
				copy(ring, ring[1:])
				ring = ring[:keepWs-1]
			}
			ring = append(ring, ws)
		}
		sl := p.slots[p.slotStart[op]:p.slotStart[op+1]]
		for j, t := range sl {
			if e.flags[pos+j] {
				s := &e.st[t]
				s.mark = 0
				cur -= p.sizes[s.size]
			}
		}
		pos += len(sl)
	}
	return peak
}

// schedule returns the last evaluated sequence as op IDs and the duplicated
// ops in plan order (fresh slices).
func (e *mgeEvaluator) schedule() (seq, dups []graph.OpID) {
	seq = make([]graph.OpID, len(e.seq))
	for i, op := range e.seq {
		seq[i] = graph.OpID(op)
		if e.dup[i] {
			dups = append(dups, graph.OpID(op))
		}
	}
	return seq, dups
}
