package sublinear

import (
	"slices"

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
// time disc, is recomputed right before the original op reader.
type mgeRecomp struct {
	reader, disc, v int32
}

// mgeEvaluator turns a genome (split points) into the modified operator
// sequence and measures it. It holds every scratch buffer, so evaluating a
// genome allocates nothing once the buffers have grown; one evaluator per
// worker. The work is O(ops + edges + duplicates).
type mgeEvaluator struct {
	p *mgeProblem

	stamp      int32
	blockBegin []int32 // per op: first op of its block
	discK      []int32 // per var: access index after which it is discarded
	discStamp  []int32 // discK valid when == stamp
	recStamp   []int32 // var recomputed (MegEngine's var_map) when == stamp
	recomps    []mgeRecomp
	recTmp     []mgeRecomp // sortRecomps' other buffer
	bucket     []int32     // sortRecomps' counts, one per op + 1
	prevDisc   []int32     // vars discarded by the previous block
	curDisc    []int32
	allDisc    []int32

	seq   []int32   // modified sequence: op ids
	dup   []bool    // seq[i] is a duplicate
	flags []bool    // free flags per slot of seq (liveness pass)
	st    []mgeStor // peak's per-storage state, by storage index
	mark  []int32   // scratch for thresholdSplits
	ring  []int64   // workspace ring of the forward pass
}

// mgeStor is the peak pass's state of one storage: its size and the
// liveness and residency stamps, side by side so that a slot's visit
// touches one cache line.
type mgeStor struct {
	size int64
	live int32 // "read later" when == stamp (reverse pass)
	res  int32 // resident (forward pass) when == stamp
}

func newMgeEvaluator(p *mgeProblem) *mgeEvaluator {
	e := &mgeEvaluator{
		p:          p,
		blockBegin: make([]int32, p.n),
		discK:      make([]int32, p.nt),
		discStamp:  make([]int32, p.nt),
		recStamp:   make([]int32, p.nt),
		st:         make([]mgeStor, len(p.sidSize)),
		mark:       make([]int32, p.nt),
	}
	for i, sz := range p.sidSize {
		e.st[i].size = sz
	}
	return e
}

func (e *mgeEvaluator) nextStamp() {
	e.stamp++
	if e.stamp == 1<<31-1 { // wrap: clear every stamped array
		e.stamp = 1
		clear(e.discStamp)
		clear(e.recStamp)
		for i := range e.st {
			e.st[i].live, e.st[i].res = 0, 0
		}
	}
}

// evaluate builds the modified sequence for split points s (a valid genome)
// and returns its peak and recompute time. The sequence stays in e.seq and
// e.dup until the next call.
func (e *mgeEvaluator) evaluate(s []int32) mgeResult {
	p := e.p
	e.nextStamp()
	e.seq = e.seq[:0]
	e.dup = e.dup[:0]
	if p.n == 0 {
		return mgeResult{peak: p.resident0}
	}
	e.makeDiscardPlan(s)
	var r mgeResult
	r.nsplit = int32(len(s))
	r.time, r.ndup = e.applyDiscardPlan()
	r.peak = e.peak()
	return r
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
	e.prevDisc = e.prevDisc[:0]
	e.allDisc = e.allDisc[:0]
	begin := int32(0)
	for bi, end := range s {
		e.curDisc = e.curDisc[:0]
		for op := begin; op <= end; op++ {
			e.blockBegin[op] = begin
			if op == end {
				break // outputs of the last op are the block's checkpoints
			}
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
					e.discK[v] = best
					e.discStamp[v] = e.stamp
					e.curDisc = append(e.curDisc, v)
					e.allDisc = append(e.allDisc, v)
				}
			}
		}
		// refine_block_discard_rec: a var discarded by the previous block
		// and needed again within this block is kept.
		if bi > 0 {
			for _, v := range e.prevDisc {
				if e.discStamp[v] != e.stamp {
					continue
				}
				next := p.accTime[p.accStart[v]+e.discK[v]+1]
				if next >= begin && next <= end {
					e.discStamp[v] = 0
				}
			}
		}
		e.prevDisc, e.curDisc = e.curDisc, e.prevDisc
		begin = end + 1
	}
	// Collect the surviving discards as scheduled recomputes.
	for _, v := range e.allDisc {
		if e.discStamp[v] != e.stamp {
			continue
		}
		a := p.accStart[v] + e.discK[v]
		e.recomps = append(e.recomps, mgeRecomp{reader: p.accTime[a+1], disc: p.accTime[a], v: v})
	}
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

// alive reports whether var x, not recomputed, is still resident when the
// original op at time t is about to run: produced before t and its last
// planned access (the discard access, or its last read) not before t.
func (e *mgeEvaluator) alive(x int32, t int32) bool {
	p := e.p
	end := p.lastAcc[x]
	if e.discStamp[x] == e.stamp {
		end = p.accTime[p.accStart[x]+e.discK[x]]
	}
	return p.prod[x] < t && end >= t
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
			v := e.recomps[k].v
			k++
			if e.recStamp[v] == e.stamp {
				continue
			}
			bb := e.blockBegin[p.prod[v]]
			time, ndup = e.addDep(v, bb, t, time, ndup)
		}
		e.seq = append(e.seq, t)
		e.dup = append(e.dup, false)
	}
	return time, ndup
}

func (e *mgeEvaluator) addDep(x, bb, t int32, time int64, ndup int32) (int64, int32) {
	p := e.p
	if e.recStamp[x] == e.stamp || e.alive(x, t) {
		return time, ndup
	}
	op := p.prod[x]
	if op < bb || p.noDup[op] {
		return time, ndup
	}
	for _, r := range p.inRoots[p.inStart[op]:p.inStart[op+1]] {
		time, ndup = e.addDep(r, bb, t, time, ndup)
	}
	e.seq = append(e.seq, op)
	e.dup = append(e.dup, true)
	for _, o := range p.outVars[p.outStart[op]:p.outStart[op+1]] {
		e.recStamp[o] = e.stamp
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
	e.nextStamp() // fresh liveness/residency stamps; discard stamps are no longer needed
	pos := total
	for i := len(e.seq) - 1; i >= 0; i-- {
		op := e.seq[i]
		sl := p.slots[p.slotStart[op]:p.slotStart[op+1]]
		pos -= len(sl)
		no := int(p.slotOut[op])
		for j, t := range sl {
			s := &e.st[t]
			e.flags[pos+j] = s.live != e.stamp
			if j < no {
				s.live = 0
			} else {
				s.live = e.stamp
			}
		}
	}
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
			if s := &e.st[t]; s.res != e.stamp {
				s.res = e.stamp
				cur += s.size
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
				s.res = 0
				cur -= s.size
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
