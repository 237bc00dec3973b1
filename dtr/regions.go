package dtr

import (
	"fmt"
	"slices"
)

// Kept regions (parity mode, h_DTR and MSPS).
//
// By default the region terms of h_DTR and MSPS are exact: evaluate walks
// the evicted storages reachable from the candidate (region). The
// reference simulator keeps them incrementally instead, per storage and
// direction, as an interior (the evicted storages reached), a frontier (the
// resident storages where the walk stopped) and the interior's summed cost:
//
//   - when a storage is evicted, each resident storage on its reverse
//     frontier absorbs it into its forward region (and each on its forward
//     frontier into its reverse region): the evicted storage leaves that
//     frontier, its own frontier joins it, and it and its own interior join
//     the interior, their costs added as they are now (the evicted storage's
//     always, even if it was in the interior already);
//   - when an op runs, the storages it brought back are rebuilt (walked
//     again) in both directions, then the forward regions of their reverse
//     frontiers and the reverse regions of their forward frontiers.
//
// Nothing else updates a region. A new op's outputs are not computed until
// its inputs are rematerialized, so a region rebuilt in between walks
// through them as evicted storages and keeps them after the op has run;
// and a region built before the op was created does not reach them when
// they are evicted behind a storage it has absorbed. These regions can
// differ from the exact ones, and parity mode keeps them as the reference
// does: incRegion, kept for every storage (inc[2s] forward, inc[2s+1]
// reverse) when Runtime.incOn.

// incRegion is one kept region: storage ids (unordered: a region is a set,
// and its cost a sum) and the interior's cost. A region that absorbs gets
// hash tables over its lists (the interior's members, the frontier's
// positions), built at its first absorption after a rebuild or a clear and
// kept up to date until the next one: an absorption then costs the size of
// the absorbed region, not of the absorbing one.
type incRegion struct {
	interior []int32
	frontier []int32
	compute  int64
	// absorbed: the region has absorbed since it was last walked or
	// cleared; hashed: its hash tables are built
	absorbed, hashed bool
	ih               i32set
	fh               i32map
}

// incReset empties region g (its entries leave r.incLive). Large lists
// and tables are let go: a storage whose region was large once would
// otherwise hold that memory for the rest of the run (in all, the sum over
// storages of their largest regions, where the live regions are far less).
func (r *Runtime) incReset(g *incRegion) {
	r.incLive -= int64(len(g.interior) + len(g.frontier))
	g.interior, g.frontier = shrink(g.interior), shrink(g.frontier)
	g.compute, g.absorbed, g.hashed = 0, false, false
	if cap(g.ih.keys) > incKeep {
		g.ih = i32set{}
	}
	if cap(g.fh.keys) > incKeep {
		g.fh = i32map{}
	}
}

// incKeep is the capacity up to which an emptied region keeps its lists
// and tables for reuse.
const incKeep = 256

// shrink empties l, letting go of a large backing array.
func shrink(l []int32) []int32 {
	if cap(l) > incKeep {
		return nil
	}
	return l[:0]
}

// incFor reports whether cfg keeps regions: parity mode with a heuristic
// that reads them.
func incFor(cfg *Config) bool {
	return cfg.Parity && (cfg.Heuristic == HDTR || cfg.Heuristic == MSPS)
}

// incNew adds the two (empty) regions and the set mark of a new storage,
// reusing the lists of a recycled runtime's slots.
func (r *Runtime) incNew() {
	for range 2 {
		g := slot(&r.inc)
		// a recycled slot's lists were counted by the old run, not this one
		g.interior, g.frontier = g.interior[:0], g.frontier[:0]
		r.incReset(g)
	}
	r.incMark = append(r.incMark, 0)
}

// incNewMark starts a set over storages: incMark[s] == the result marks s
// as a member.
func (r *Runtime) incNewMark() uint32 {
	r.incGen++
	if r.incGen == 0 {
		clear(r.incMark)
		r.incGen = 1
	}
	return r.incGen
}

// incCost is the kept region cost of storage s: forward and reverse (both)
// or reverse only.
func (r *Runtime) incCost(s int32, both bool) int64 {
	c := r.inc[2*s+1].compute
	if both {
		c += r.inc[2*s].compute
	}
	return c
}

// incEvict updates the kept regions after storage s was evicted: the
// storages on its frontiers absorb it, then its own regions are cleared.
func (r *Runtime) incEvict(s int32) {
	fw, rv := 2*s, 2*s+1
	// copies: a frontier may hold s itself (a cycle through a view), and
	// absorbing into s's own region would change the list being walked
	r.incTmp = append(r.incTmp[:0], r.inc[rv].frontier...)
	for _, p := range r.incTmp {
		r.incAbsorb(2*p, s, fw)
	}
	r.incTmp = append(r.incTmp[:0], r.inc[fw].frontier...)
	for _, c := range r.incTmp {
		r.incAbsorb(2*c+1, s, rv)
	}
	r.incReset(&r.inc[fw])
	r.incReset(&r.inc[rv])
}

// incAbsorb makes region k absorb the evicted storage f, whose region of
// the same direction is region from.
func (r *Runtime) incAbsorb(k int32, f int32, from int32) {
	g := &r.inc[k]
	n0 := len(g.interior) + len(g.frontier)
	// the reference's work: the absorbed region's entries (sim's own
	// marking or hashing of the absorbing region is not counted, so the
	// limit does not depend on how sim does it)
	src := &r.inc[from]
	r.incWork += int64(len(src.interior) + len(src.frontier))
	r.incAbsorbInto(g, f, src)
	r.incLive += int64(len(g.interior) + len(g.frontier) - n0)
	r.incPeak = max(r.incPeak, r.incLive)
}

// incAbsorbInto is incAbsorb's update of g with src, f's region.
func (r *Runtime) incAbsorbInto(g *incRegion, f int32, src *incRegion) {
	if !g.hashed && g.absorbed {
		g.ih.init(len(g.interior))
		for _, x := range g.interior {
			g.ih.add(x)
		}
		g.fh.init(len(g.frontier))
		for i, x := range g.frontier {
			g.fh.put(x, int32(i))
		}
		g.hashed = true
	}
	if !g.hashed {
		// the first absorption since the region was walked: sets marked
		// for this call (most regions are walked again before they absorb
		// twice)
		g.absorbed = true
		r.incAbsorbMarked(g, f, src)
		return
	}
	i, ok := g.fh.get(f)
	if !ok {
		r.stats.ReferenceAsserts++ // the reference asserts that f is on the frontier
		return
	}
	last := int32(len(g.frontier) - 1)
	if i != last {
		x := g.frontier[last]
		g.frontier[i] = x
		g.fh.put(x, i)
	}
	g.frontier = g.frontier[:last]
	g.fh.del(f)
	for _, x := range src.frontier {
		if _, in := g.fh.get(x); !in {
			g.fh.put(x, int32(len(g.frontier)))
			g.frontier = append(g.frontier, x)
		}
	}
	// add (src.interior - g.interior) + {f} and its cost: f counts even
	// when it is in the interior already (the reference adds it to the
	// difference)
	fromSrc := false
	for _, x := range src.interior {
		if g.ih.add(x) {
			g.compute += r.storages[x].compute
			g.interior = append(g.interior, x)
			fromSrc = fromSrc || x == f
		}
	}
	if !fromSrc {
		g.compute += r.storages[f].compute
		if g.ih.add(f) {
			g.interior = append(g.interior, f)
		}
	}
}

// incAbsorbMarked is incAbsorbInto with the sets' members marked in
// incMark (the region's hash tables are not built).
func (r *Runtime) incAbsorbMarked(g *incRegion, f int32, src *incRegion) {
	i := slices.Index(g.frontier, f)
	if i < 0 {
		r.stats.ReferenceAsserts++ // the reference asserts that f is on the frontier
		return
	}
	last := len(g.frontier) - 1
	g.frontier[i] = g.frontier[last]
	g.frontier = g.frontier[:last]
	mark := r.incMark
	if len(src.frontier) > 0 {
		m := r.incNewMark()
		for _, x := range g.frontier {
			mark[x] = m
		}
		for _, x := range src.frontier {
			if mark[x] != m {
				mark[x] = m
				g.frontier = append(g.frontier, x)
			}
		}
	}
	m := r.incNewMark()
	for _, x := range g.interior {
		mark[x] = m
	}
	fromSrc := false
	for _, x := range src.interior {
		if mark[x] != m {
			mark[x] = m
			g.compute += r.storages[x].compute
			g.interior = append(g.interior, x)
			fromSrc = fromSrc || x == f
		}
	}
	if !fromSrc {
		g.compute += r.storages[f].compute
		if mark[f] != m {
			g.interior = append(g.interior, f)
		}
	}
}

// incRebuild walks region k of storage s (resident) again: the evicted
// storages reachable from s in its direction, stopping at resident ones.
func (r *Runtime) incRebuild(s int32, reverse bool) {
	k, d := 2*s, kidsList
	if reverse {
		k, d = 2*s+1, parsList
	}
	g := &r.inc[k]
	// The lists are sized for the region as it was: incReset lets a large
	// list go, and regrowing it by doubling at every rebuild was 15% of a
	// region-kept msps sweep (densenet-bc); a rebuilt region is mostly
	// about as large as before.
	ni, nf := len(g.interior), len(g.frontier)
	r.incReset(g)
	if cap(g.interior) < ni {
		g.interior = make([]int32, 0, ni)
	}
	if cap(g.frontier) < nf {
		g.frontier = make([]int32, 0, nf)
	}
	m := r.newMark()
	fm := r.incNewMark()
	w, mark := r.walk, r.incMark
	stack := append(r.stack[:0], s)
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for next, c := r.neighbours(x, d); ; next, c = r.chunk(c) {
			r.incWork += int64(len(next))
			for _, y := range next {
				n := &w[y]
				if !n.evicted { // resident (parity mode has no swaps)
					if y != s && mark[y] != fm {
						mark[y] = fm
						g.frontier = append(g.frontier, y)
					}
					continue
				}
				if n.mark != m {
					n.mark = m
					g.compute += n.compute
					g.interior = append(g.interior, y)
					stack = append(stack, y)
				}
			}
			if c < 0 {
				break
			}
		}
	}
	r.stack = stack
	r.incLive += int64(len(g.interior) + len(g.frontier))
	r.incPeak = max(r.incPeak, r.incLive)
}

// incMaxLive bounds the entries of all kept regions of a run (with the
// hash tables of the regions that absorb and the lists let go, about 60
// bytes each: 1 GB at the limit), and incMaxWork the steps of their
// bookkeeping that the reference takes too (edges walked, entries
// absorbed; 6 to 15 ns each here). The reference's bookkeeping grows with
// the number of storages times the size of their regions, which on long
// logs is quadratic. The artifact's two logs peak at 89,516 (resnet32) and
// 45,143 (unet) entries and 5.9 million steps per budget (TestRegionPeak);
// a TreeLSTM and an LSTM traced with the artifact's cell
// (tools/traced_logs.py) at 177,000 and 473,000 entries and 1.1e7 and
// 5.6e7 steps, where simrd takes 12.5 and 52 s per sweep of ten budgets
// (4.9e7 and 2.1e8 steps): 0.26 us per step, 0.2 to 0.35 on earlier
// versions of these logs, so the step limit is minutes of simrd per
// budget, above the 20 to 60 s per budget that the artifact's README
// reports with full h_DTR on its larger logs. A budget that reaches either
// limit gets StatusLimit, not a result that could differ from the
// reference's.
const (
	incMaxLive = 1 << 24
	incMaxWork = 1 << 30
)

// incComputed updates the kept regions after an op ran: remat lists the
// storages it brought back (or computed for the first time). It fails with
// ErrRegionLimit once the regions hold more than incMaxLive entries or
// their bookkeeping has taken more than incMaxWork steps.
func (r *Runtime) incComputed(remat []int32) error {
	if len(remat) == 0 {
		return nil
	}
	for _, s := range remat {
		r.incRebuild(s, false)
		r.incRebuild(s, true)
	}
	// then the regions the new residents cut: the forward regions of
	// their reverse frontiers and the reverse regions of their forward
	// frontiers (each once)
	for _, reverse := range [2]bool{false, true} {
		k := int32(1)
		if reverse {
			k = 0
		}
		m := r.incNewMark()
		aff := r.incTmp[:0]
		for _, s := range remat {
			for _, x := range r.inc[2*s+k].frontier {
				if r.incMark[x] != m {
					r.incMark[x] = m
					aff = append(aff, x)
				}
			}
		}
		for _, x := range aff {
			r.incRebuild(x, reverse)
		}
		r.incTmp = aff[:0]
	}
	limit := r.cfg.regionLimit
	if limit == 0 {
		limit = incMaxLive
	}
	if r.incLive > limit || r.incWork > incMaxWork {
		return fmt.Errorf("%w: %d entries (limit %d), %d steps (limit %d)", ErrRegionLimit, r.incLive, limit, r.incWork, int64(incMaxWork))
	}
	return nil
}

// i32keys is the key table of i32map and i32set: open addressing over
// storage ids (>= 0) with linear probing, at most half full.
type i32keys struct {
	keys  []int32 // -1: empty
	n     int
	shift uint32
}

// reset empties the table, sized for n keys, and returns its size.
func (h *i32keys) reset(n int) int {
	c, bits := 8, uint32(3)
	for c < 2*n {
		c, bits = c*2, bits+1
	}
	if cap(h.keys) >= c {
		h.keys = h.keys[:c]
	} else {
		h.keys = make([]int32, c)
	}
	for i := range h.keys {
		h.keys[i] = -1
	}
	h.n, h.shift = 0, 32-bits
	return c
}

func (h *i32keys) home(k int32) int {
	return int((uint32(k) * 0x9e3779b1) >> h.shift)
}

// find returns k's slot and true, or the empty slot where k would go and
// false.
func (h *i32keys) find(k int32) (int, bool) {
	mask := len(h.keys) - 1
	for i := h.home(k); ; i = (i + 1) & mask {
		switch h.keys[i] {
		case k:
			return i, true
		case -1:
			return i, false
		}
	}
}

// full reports whether one more key would make the table over half full.
func (h *i32keys) full() bool { return 2*(h.n+1) > len(h.keys) }

// i32map is a hash table from storage ids to int32 values, with
// backward-shift deletion.
type i32map struct {
	i32keys
	vals []int32
}

// init empties the table, sized for n keys.
func (h *i32map) init(n int) {
	c := h.reset(n)
	if cap(h.vals) >= c {
		h.vals = h.vals[:c]
	} else {
		h.vals = make([]int32, c)
	}
}

// get returns k's value and whether k is in the table.
func (h *i32map) get(k int32) (int32, bool) {
	if i, ok := h.find(k); ok {
		return h.vals[i], true
	}
	return 0, false
}

// put sets k's value.
func (h *i32map) put(k, v int32) {
	if h.full() {
		old, oldv := h.keys, h.vals
		h.keys, h.vals = nil, nil
		h.init(2 * (h.n + 1))
		for i, x := range old {
			if x >= 0 {
				h.put(x, oldv[i])
			}
		}
	}
	i, ok := h.find(k)
	if !ok {
		h.keys[i] = k
		h.n++
	}
	h.vals[i] = v
}

// del removes k (if present), shifting back the entries probed past it.
func (h *i32map) del(k int32) {
	i, ok := h.find(k)
	if !ok {
		return
	}
	mask := len(h.keys) - 1
	for j := (i + 1) & mask; h.keys[j] != -1; j = (j + 1) & mask {
		// move the entry at j to the hole at i unless its home lies
		// cyclically in (i, j]
		if hm := h.home(h.keys[j]); (j-hm)&mask >= (j-i)&mask {
			h.keys[i], h.vals[i] = h.keys[j], h.vals[j]
			i = j
		}
	}
	h.keys[i] = -1
	h.n--
}

// i32set is a hash set of storage ids: the members of a kept region's
// interior, which only grows between walks.
type i32set struct {
	i32keys
}

// init empties the set, sized for n members.
func (h *i32set) init(n int) { h.reset(n) }

// add adds k and reports whether it was not a member.
func (h *i32set) add(k int32) bool {
	if h.full() {
		old := h.keys
		h.keys = nil
		h.init(2 * (h.n + 1))
		for _, x := range old {
			if x >= 0 {
				h.add(x)
			}
		}
	}
	i, ok := h.find(k)
	if ok {
		return false
	}
	h.keys[i] = k
	h.n++
	return true
}
