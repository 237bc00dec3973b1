package dtr

import (
	"container/heap"
	"context"
	"fmt"
	"slices"

	"github.com/remat-dev/remat/graph/dtrlog"
)

// Production-order bound. ComputeLowerBound counts one op's working set:
// its inputs and outputs must be resident at once. Before the op runs, its
// inputs were produced one by one, and the last of them to be produced (by
// its op, last run then) was produced while all the others were resident;
// that producer's inputs were in turn produced in some order, and so on.
// For a set S of storages that must be resident at once, let x be the one
// whose last production came last, by op p: when p ran, the rest of S,
// p's inputs and all of p's results (an op allocates every result as it
// runs, x and any other member of S among them) were resident, and just
// before, the set (S \ outputs of p) ∪ inputs of p had to be resident at
// once. So, with T = (S \ out(p)) ∪ in(p) and a(p) the bytes p
// allocates (the sum of its result sizes, as ComputeLowerBound counts),
//
//	f(S) = min over x in S of max(|T| + a(p), f(T))
//
// with f(∅) = 0, |.| the bytes of a set plus the storages pinned before the
// first op (resident throughout; they never enter a set), is a lower bound
// of the peak of every run that brings evicted storages back by
// recomputing them (not by swapping), and max(working set, f(inputs)) is
// one for each op. A min over orders is a search: TightenLowerBound runs a
// best-first (bottleneck) search over the sets, expanding the set whose
// path so far has the least maximum; the maximum of the last set it
// expands is a lower bound even when it stops before reaching the empty
// set, since every order passes through a set not yet expanded, whose
// maximum is at least that. Leaving storages out of a set only lowers f,
// so the search may count less than a run holds and stays a bound.

// DefaultBoundEffort is the work TightenLowerBound does when given 0,
// counted in set members visited (an expansion of a set of n storages
// visits n^2 + n of them): 0.03-0.09 s on the logs of tools/traced_logs.py
// and the artifact's, about 0.2 s on a 75,000-line log.
const DefaultBoundEffort = 1 << 21

// boundOps is the number of ops, those with the largest working sets, whose
// inputs' production TightenLowerBound searches; boundOpStates caps the
// sets it expands for one op, and each op gets at most a boundOps-th of
// the effort.
const (
	boundOps      = 32
	boundOpStates = 1 << 13
)

// TightenLowerBound returns the larger of lb (ComputeLowerBound's bound of
// tr) and the production-order bound (above) of the ops with the largest
// working sets, searching with at most effort work in all (0:
// DefaultBoundEffort). The result's Source is "inputs" when the search
// raised it. It stops early, returning what it has with ctx's error, when
// ctx is cancelled, and lb with an error for a nil or inconsistent trace
// (ErrNilTrace, ErrBadTrace). The bound assumes evicted storages are
// recomputed: a run that swaps them out and in may hold less.
func TightenLowerBound(ctx context.Context, tr *dtrlog.Trace, lb LowerBound, effort int64) (LowerBound, error) {
	if effort < 0 {
		return lb, fmt.Errorf("dtr lower bound: effort %d: expected >= 0 (0: %d)", effort, int64(DefaultBoundEffort))
	}
	if effort == 0 {
		effort = DefaultBoundEffort
	}
	if err := checkTrace(tr); err != nil {
		return lb, fmt.Errorf("dtr lower bound: %w", err)
	}
	b := newBoundSearch(tr)
	left := effort
	for _, c := range b.candidates() {
		if left <= 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			return lb, err
		}
		v, w := b.search(c.op, c.need, min(left, max(effort/boundOps, 1)))
		left -= w
		if v > lb.Bytes {
			lb = LowerBound{Bytes: v, Op: c.op, Line: tr.Ops[c.op].Line, Source: BoundInputs}
		}
	}
	return lb, nil
}

// BoundInputs is LowerBound.Source for a bound that counts the production
// of an op's inputs (TightenLowerBound).
const BoundInputs = "inputs"

// boundSearch holds the trace's storage graph for the searches: for each
// storage (root tensor id) its size and producing op, and for each op its
// distinct input storages, without those pinned before the first op.
type boundSearch struct {
	tr      *dtrlog.Trace
	size    []int64
	pinned0 []bool
	p0      int64 // bytes pinned before the first op
	ins     [][]int32
	total   []int64  // bytes each op allocates (all its results)
	mark    []uint32 // set membership, by generation
	gen     uint32
	// search state: the sets (sorted storage ids) in one arena, their
	// path maxima, the heap of unexpanded sets and the index of each set
	sets  []int32
	start []int32 // set i is sets[start[i]:start[i+1]]
	val   []int64
	done  []bool
	seen  map[string]int32
	h     boundHeap
	buf   []int32
	key   []byte
}

type boundCand struct {
	op   int32
	need int64
}

func newBoundSearch(tr *dtrlog.Trace) *boundSearch {
	b := &boundSearch{tr: tr, size: make([]int64, len(tr.Tensors)), pinned0: make([]bool, len(tr.Tensors)), mark: make([]uint32, len(tr.Tensors))}
	for i := range tr.Tensors {
		b.size[i] = tr.Tensors[i].StorageSize
	}
	for _, c := range tr.Cmds {
		if c.Kind == dtrlog.CmdCompute && !tr.Ops[c.ID].Constant {
			break
		}
		if c.Kind == dtrlog.CmdPin {
			if s := tr.Tensors[c.ID].Storage; !b.pinned0[s] {
				b.pinned0[s] = true
				b.p0 += b.size[s]
			}
		}
	}
	b.ins = make([][]int32, len(tr.Ops))
	b.total = make([]int64, len(tr.Ops))
	for i := range tr.Ops {
		b.total[i] = tr.Ops[i].TotalSize()
	}
	var flat []int32
	off := make([]int, len(tr.Ops)+1)
	for i := range tr.Ops {
		g := b.newGen()
		for _, a := range tr.Ops[i].Args {
			if s := tr.Tensors[a].Storage; !b.pinned0[s] && b.mark[s] != g {
				b.mark[s] = g
				flat = append(flat, s)
			}
		}
		off[i+1] = len(flat)
	}
	for i := range tr.Ops {
		b.ins[i] = flat[off[i]:off[i+1]:off[i+1]]
	}
	return b
}

func (b *boundSearch) newGen() uint32 {
	b.gen++
	if b.gen == 0 {
		clear(b.mark)
		b.gen = 1
	}
	return b.gen
}

// candidates returns the ops to search, with their single-op bounds
// (ComputeLowerBound's), the largest first (ties: the earlier op).
func (b *boundSearch) candidates() []boundCand {
	var cs []boundCand
	opBounds(b.tr, func(op int32, need int64) {
		if op >= 0 && len(b.tr.Ops[op].Args) > 0 { // else nothing is produced before it
			cs = append(cs, boundCand{op, need})
		}
	})
	slices.SortStableFunc(cs, func(x, y boundCand) int {
		switch {
		case x.need > y.need:
			return -1
		case x.need < y.need:
			return 1
		}
		return 0
	})
	return cs[:min(len(cs), boundOps)]
}

// search returns op's production-order bound as far as a search with at
// most limit work (and boundOpStates sets) finds it (at least need, its
// single-op bound), and the work it did.
func (b *boundSearch) search(op int32, need int64, limit int64) (int64, int64) {
	b.sets, b.start, b.val, b.done, b.h = b.sets[:0], b.start[:0], b.val[:0], b.done[:0], b.h[:0]
	b.start = append(b.start, 0)
	if b.seen == nil {
		b.seen = make(map[string]int32)
	}
	clear(b.seen)
	b.buf = append(b.buf[:0], b.ins[op]...)
	slices.Sort(b.buf)
	b.offer(b.buf, need)
	var work int64
	for expanded := 0; len(b.h) > 0; {
		i := heap.Pop(&b.h).(boundItem).set
		if b.done[i] {
			continue
		}
		b.done[i] = true
		v := b.val[i]
		set := b.sets[b.start[i]:b.start[i+1]]
		if len(set) == 0 || work >= limit || expanded >= boundOpStates {
			return v, work // every order passes through a set worth >= v
		}
		expanded++
		work += int64(len(set)) * int64(len(set)+1)
		b.expand(i, set, v)
	}
	return need, work
}

// expand offers the sets that choosing each member of set i (path maximum
// v) as the last produced leads to.
func (b *boundSearch) expand(i int32, set []int32, v int64) {
	tr := b.tr
	for k := 0; k < len(set); k++ {
		set = b.sets[b.start[i]:b.start[i+1]] // offer may grow the arena
		x := set[k]
		p := tr.Tensors[x].Op
		g := b.newGen()
		lvl := b.p0 + b.total[p] // p allocates all its results as it runs
		buf := b.buf[:0]
		for _, y := range set {
			if tr.Tensors[y].Op != p { // p's outputs are produced now
				b.mark[y] = g
				lvl += b.size[y]
				buf = append(buf, y)
			}
		}
		for _, y := range b.ins[p] {
			if b.mark[y] != g {
				b.mark[y] = g
				lvl += b.size[y]
				buf = append(buf, y)
			}
		}
		slices.Sort(buf)
		b.buf = buf
		b.offer(buf, max(v, lvl))
	}
}

// offer records set with path maximum v, unless it is known with a lower
// or equal one.
func (b *boundSearch) offer(set []int32, v int64) {
	b.key = b.key[:0]
	for _, x := range set {
		b.key = append(b.key, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
	}
	if j, ok := b.seen[string(b.key)]; ok {
		if b.done[j] || b.val[j] <= v {
			return
		}
		b.val[j] = v
		heap.Push(&b.h, boundItem{set: j, val: v})
		return
	}
	j := int32(len(b.val))
	b.seen[string(b.key)] = j
	b.sets = append(b.sets, set...)
	b.start = append(b.start, int32(len(b.sets)))
	b.val = append(b.val, v)
	b.done = append(b.done, false)
	heap.Push(&b.h, boundItem{set: j, val: v})
}

type boundItem struct {
	set int32
	val int64
}

// boundHeap orders unexpanded sets by path maximum, then by when they were
// first found (their index: deterministic).
type boundHeap []boundItem

func (h boundHeap) Len() int { return len(h) }
func (h boundHeap) Less(i, j int) bool {
	if h[i].val != h[j].val {
		return h[i].val < h[j].val
	}
	return h[i].set < h[j].set
}
func (h boundHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *boundHeap) Push(x any)   { *h = append(*h, x.(boundItem)) }
func (h *boundHeap) Pop() any {
	o := *h
	x := o[len(o)-1]
	*h = o[:len(o)-1]
	return x
}
