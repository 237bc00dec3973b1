package dtr

// posHeap holds the operations of a binary max-heap of members E that
// records each member's position (so a member can be removed): above
// orders the heap, setPos records where x now is. The witness groups'
// member heaps (fixedgroup.go: storage IDs) and the small-candidate heap
// (small.go: storage IDs with their keys) use one each; init builds them.
type posHeap[E any] struct {
	above  func(a, b E) bool
	setPos func(x E, i int32)
}

// push appends x to h and restores the order.
func (p *posHeap[E]) push(h []E, x E) []E {
	h = append(h, x)
	p.up(h, len(h)-1)
	return h
}

// remove takes the member at position i out of h.
func (p *posHeap[E]) remove(h []E, i int) []E {
	last := len(h) - 1
	if i == last {
		return h[:last]
	}
	x := h[last]
	h[i] = x
	h = h[:last]
	p.up(h, p.down(h, i))
	return h
}

func (p *posHeap[E]) up(h []E, i int) {
	x := h[i]
	for i > 0 {
		q := (i - 1) / 2
		if !p.above(x, h[q]) {
			break
		}
		h[i] = h[q]
		p.setPos(h[i], int32(i))
		i = q
	}
	h[i] = x
	p.setPos(x, int32(i))
}

// down sifts the member at i down and returns its final position.
func (p *posHeap[E]) down(h []E, i int) int {
	n := len(h)
	x := h[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && p.above(h[c+1], h[c]) {
			c++
		}
		if !p.above(h[c], x) {
			break
		}
		h[i] = h[c]
		p.setPos(h[i], int32(i))
		i = c
	}
	h[i] = x
	p.setPos(x, int32(i))
	return i
}
