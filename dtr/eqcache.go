package dtr

import "slices"

// Neighbour-class counts. eqNeighbours sums the distinct eq-classes of a
// storage's evicted neighbours; a scan of the neighbours costs the
// storage's degree, and a storage read through a view per time step (the
// gradient of an LSTM's concatenated outputs has one reader per step) is
// keyed again after nearly every step: the scans grew with the square of
// the sequence. A storage with at least eqCacheMin neighbours therefore
// keeps, from its first such scan on, the count of its evicted neighbours
// in each class (by a node of the class): an eviction adds one to the
// counts of the storages it neighbours, a storage that stops being evicted
// takes one away, and a query resolves the nodes to their classes, merges
// the counts of classes that have merged and sums the classes with a count.
// A neighbour linked while evicted (a view made on an evicted storage)
// drops the counts, and the next query scans again.

// eqCacheMin is the degree from which a storage keeps neighbour-class
// counts (Runtime.eqMin in tests).
const eqCacheMin = 64

// eqEntry counts the evicted neighbours of a storage in the class of node.
type eqEntry struct{ node, n int32 }

// eqCache is a storage's neighbour-class counts; seen is the stamp of the
// last change that counted it (a change counts each storage once however
// often the changed storage lists it).
type eqCache struct {
	ents []eqEntry
	seen uint32
	norm int // len(ents) after the last compaction
}

func (r *Runtime) eqCacheFloor() int {
	if r.eqMin > 0 {
		return r.eqMin
	}
	return eqCacheMin
}

// eqCounted reports whether neighbour n counts for eqNeighbours: evicted,
// with a class.
func (r *Runtime) eqCounted(n int32) bool {
	return r.walk[n].evicted && r.storages[n].ecn >= 0
}

// eqCacheBuild gives storage s neighbour-class counts from a scan of its
// neighbours, each counted once.
func (r *Runtime) eqCacheBuild(s int32) {
	ns := r.eqScratch[:0]
	for _, d := range [2]int{parsList, kidsList} {
		for l, c := r.neighbours(s, d); ; l, c = r.chunk(c) {
			for _, n := range l {
				if r.eqCounted(n) {
					ns = append(ns, n)
				}
			}
			if c < 0 {
				break
			}
		}
	}
	slices.Sort(ns)
	ns = slices.Compact(ns)
	ci := takeSlot(&r.eqCaches, &r.eqFree)
	ec := &r.eqCaches[ci]
	ec.ents = ec.ents[:0]
	for _, n := range ns {
		ec.ents = append(ec.ents, eqEntry{node: r.storages[n].ecn, n: 1})
	}
	r.eqScratch = ns[:0]
	r.storages[s].eqc = ci + 1
	r.eqCompact(ec)
}

// eqCacheDrop drops storage s's counts (the next query scans).
func (r *Runtime) eqCacheDrop(s int32) {
	st := &r.storages[s]
	r.eqFree = append(r.eqFree, st.eqc-1)
	st.eqc, st.kstick = 0, 0
}

// eqCompact resolves ec's nodes to their classes and merges the entries of
// one class, dropping those with no count left.
func (r *Runtime) eqCompact(ec *eqCache) {
	sorted := true // by class, one entry per class, none empty
	for i := range ec.ents {
		e := &ec.ents[i]
		e.node = r.ufFind(e.node)
		if e.n == 0 || (i > 0 && e.node <= ec.ents[i-1].node) {
			sorted = false
		}
	}
	if sorted {
		ec.norm = len(ec.ents)
		return
	}
	slices.SortFunc(ec.ents, func(a, b eqEntry) int { return int(a.node - b.node) })
	j := 0
	for _, e := range ec.ents {
		switch {
		case e.n == 0:
		case j > 0 && ec.ents[j-1].node == e.node:
			ec.ents[j-1].n += e.n
		default:
			ec.ents[j] = e
			j++
		}
	}
	ec.ents = ec.ents[:j]
	ec.norm = j
}

// eqCached is eqNeighbours for storage s with counts ec.
func (r *Runtime) eqCached(s int32, ec *eqCache, reg bool) int64 {
	r.eqCompact(ec)
	var sum, floor int64
	for _, e := range ec.ents {
		root := e.node
		sum += r.ufValue[root]
		floor += r.ufValue[root] - max(r.ufSlack[root], 0)
		if reg {
			r.regAdd(root, s, r.kg[s])
		}
	}
	r.eqOf, r.eqSum, r.eqFloor = s, sum, floor
	return sum
}

// eqNeighbourChange adds d (+1: n was just evicted and given its class
// node; -1: n is about to stop being evicted) to the counts of n's class
// in the storages that neighbour n and keep counts.
func (r *Runtime) eqNeighbourChange(n int32, d int32) {
	if len(r.eqCaches) == len(r.eqFree) {
		return // no storage keeps counts
	}
	r.eqStamp++
	node := r.storages[n].ecn
	for _, dir := range [2]int{parsList, kidsList} {
		for l, c := r.neighbours(n, dir); ; l, c = r.chunk(c) {
			for _, x := range l {
				ci := r.storages[x].eqc
				if ci == 0 {
					continue
				}
				ec := &r.eqCaches[ci-1]
				if ec.seen == r.eqStamp {
					continue
				}
				ec.seen = r.eqStamp
				if d > 0 {
					if ec.ents = append(ec.ents, eqEntry{node: node, n: 1}); len(ec.ents) >= 2*max(ec.norm, 16) {
						r.eqCompact(ec)
					}
					continue
				}
				// x may lose n's class: a key part that counted it
				// is no longer a lower bound
				r.storages[x].kstick = 0
				root := r.ufFind(node)
				found := false
				for i := range ec.ents {
					if e := &ec.ents[i]; e.n > 0 && r.ufFind(e.node) == root {
						e.n--
						found = true
						break
					}
				}
				if !found {
					r.eqCacheDrop(x) // counts out of step: scan at the next query
				}
			}
			if c < 0 {
				break
			}
		}
	}
}

// eqLinked records a link between p and c: a storage that keeps counts and
// gains a counted neighbour this way drops its counts (it may list that
// neighbour already; the next query scans).
func (r *Runtime) eqLinked(p, c int32) {
	if r.storages[p].eqc != 0 && r.eqCounted(c) {
		r.eqCacheDrop(p)
	}
	if r.storages[c].eqc != 0 && r.eqCounted(p) {
		r.eqCacheDrop(c)
	}
}

// takeSlot returns the index of a free element of items (the last one
// freed), or of a zero element appended.
func takeSlot[T any](items *[]T, free *[]int32) int32 {
	if n := len(*free); n > 0 {
		i := (*free)[n-1]
		*free = (*free)[:n-1]
		return i
	}
	var zero T
	*items = append(*items, zero)
	return int32(len(*items) - 1)
}
