package dtr

// The small heap holds the pool members below Config.EvicteeMinSize. When
// no candidate passes the size filter, the scan evicts the largest of them
// (the first in pool order among equal sizes); with the candidate index the
// heap gives that choice in O(1), where a scan of a pool of small tensors
// (a transformer at batch 1 has most of its activations under 1 MiB) would
// cost O(pool) per eviction.

// smallEntry is a member of the small heap with the keys of its order, so
// that sifting compares entries of the heap's own array instead of reading
// two storages per step (far apart in a program of 100k ops: a cache miss
// each).
type smallEntry struct {
	size, seq int64
	s         int32
}

// smallBefore reports whether a comes before b in the fallback order:
// larger, or as large and earlier in the pool.
func smallBefore(a, b *smallEntry) bool {
	if a.size != b.size {
		return a.size > b.size
	}
	return a.seq < b.seq
}

// smallInsert adds pool member s (its seq set) to the small heap.
func (r *Runtime) smallInsert(s int32) {
	st := &r.storages[s]
	r.small = append(r.small, smallEntry{size: st.size, seq: st.seq, s: s})
	r.smallUp(len(r.small) - 1)
}

// smallRemove takes s out of the small heap.
func (r *Runtime) smallRemove(s int32) {
	i := int(r.storages[s].spos)
	r.storages[s].spos = -1
	last := len(r.small) - 1
	if i != last {
		r.small[i] = r.small[last]
		r.small = r.small[:last]
		r.smallUp(r.smallDown(i))
		return
	}
	r.small = r.small[:last]
}

func (r *Runtime) smallUp(i int) {
	h := r.small
	x := h[i]
	for i > 0 {
		q := (i - 1) / 2
		if !smallBefore(&x, &h[q]) {
			break
		}
		h[i] = h[q]
		r.storages[h[i].s].spos = int32(i)
		i = q
	}
	h[i] = x
	r.storages[x.s].spos = int32(i)
}

// smallDown sifts the member at i down and returns its final position.
func (r *Runtime) smallDown(i int) int {
	h := r.small
	n := len(h)
	x := h[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && smallBefore(&h[c+1], &h[c]) {
			c++
		}
		if !smallBefore(&h[c], &x) {
			break
		}
		h[i] = h[c]
		r.storages[h[i].s].spos = int32(i)
		i = c
	}
	h[i] = x
	r.storages[x.s].spos = int32(i)
	return i
}

// largestSmall returns the scan's fallback choice: the largest pool member
// below the minimum evictee size, first in pool order among equals, or -1.
func (r *Runtime) largestSmall() int32 {
	if len(r.small) == 0 {
		return -1
	}
	return r.small[0].s
}

// largestSmallScan is largestSmall by a pass over the pool (the check of
// the heap in tests).
func (r *Runtime) largestSmallScan() int32 {
	best, bsz := int32(-1), int64(-1)
	for _, s := range r.pool {
		if s >= 0 && r.storages[s].size > bsz {
			best, bsz = s, r.storages[s].size
		}
	}
	return best
}
