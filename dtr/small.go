package dtr

// The small heap holds the pool members below Config.EvicteeMinSize. When
// no candidate passes the size filter, the scan evicts the largest of them
// (the first in pool order among equal sizes); with the candidate index the
// heap gives that choice in O(1), where a scan of a pool of small tensors
// (a transformer at batch 1 has most of its activations under 1 MiB) would
// cost O(pool) per eviction.

// smallAbove reports whether pool member a comes before b in the fallback
// order: larger, or as large and earlier in the pool.
func (r *Runtime) smallAbove(a, b int32) bool {
	sa, sb := &r.storages[a], &r.storages[b]
	if sa.size != sb.size {
		return sa.size > sb.size
	}
	return sa.seq < sb.seq
}

// smallInsert adds pool member s (its seq set) to the small heap.
func (r *Runtime) smallInsert(s int32) {
	r.storages[s].spos = int32(len(r.small))
	r.small = append(r.small, s)
	r.smallUp(len(r.small) - 1)
}

// smallRemove takes s out of the small heap.
func (r *Runtime) smallRemove(s int32) {
	i := int(r.storages[s].spos)
	r.storages[s].spos = -1
	last := len(r.small) - 1
	if i != last {
		x := r.small[last]
		r.small[i] = x
		r.storages[x].spos = int32(i)
		r.small = r.small[:last]
		r.smallDown(i)
		r.smallUp(int(r.storages[x].spos))
		return
	}
	r.small = r.small[:last]
}

func (r *Runtime) smallUp(i int) {
	h := r.small
	x := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if !r.smallAbove(x, h[p]) {
			break
		}
		h[i] = h[p]
		r.storages[h[i]].spos = int32(i)
		i = p
	}
	h[i] = x
	r.storages[x].spos = int32(i)
}

func (r *Runtime) smallDown(i int) {
	h := r.small
	n := len(h)
	x := h[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && r.smallAbove(h[c+1], h[c]) {
			c++
		}
		if !r.smallAbove(h[c], x) {
			break
		}
		h[i] = h[c]
		r.storages[h[i]].spos = int32(i)
		i = c
	}
	h[i] = x
	r.storages[x].spos = int32(i)
}

// largestSmall returns the scan's fallback choice: the largest pool member
// below the minimum evictee size, first in pool order among equals, or -1.
func (r *Runtime) largestSmall() int32 {
	if len(r.small) == 0 {
		return -1
	}
	return r.small[0]
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
