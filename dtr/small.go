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
func smallBefore(a, b smallEntry) bool {
	if a.size != b.size {
		return a.size > b.size
	}
	return a.seq < b.seq
}

// smallInsert adds pool member s (its seq set) to the small heap.
func (r *Runtime) smallInsert(s int32) {
	st := &r.storages[s]
	r.small = r.smallH.push(r.small, smallEntry{size: st.size, seq: st.seq, s: s})
}

// smallRemove takes s out of the small heap.
func (r *Runtime) smallRemove(s int32) {
	i := int(r.storages[s].spos)
	r.storages[s].spos = -1
	r.small = r.smallH.remove(r.small, i)
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
