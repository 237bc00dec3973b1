package dtrlog

// The logs name their tensors "x" and a counter ("x5265"), consecutive
// numbers from wherever the recording started. Tables keyed by such names
// (the decoder's interned strings, the compiler's name bindings) keep them
// in a window: a slice indexed by the number, faster than a map. Any other
// name, and one outside the window, goes to the table's map.

// xnumber returns n when name is "x" followed by n in decimal without
// leading zeros and with at most 9 digits, so that n names it uniquely.
func xnumber[S string | []byte](name S) (int, bool) {
	if len(name) < 2 || len(name) > 10 || name[0] != 'x' || (name[1] == '0' && len(name) > 2) {
		return 0, false
	}
	n := 0
	for i := 1; i < len(name); i++ {
		c := name[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// windowSlack is how far a window may reach past twice its entries: its
// size stays proportional to the names it holds, whatever numbers a log
// uses.
const windowSlack = 1024

// window maps the numbers of names to values (the zero V: none) for the
// numbers from base, which the first name set fixes.
type window[V comparable] struct {
	base int
	vals []V
	used int // non-zero values in vals
}

// get returns the value of number n and whether it has one.
func (w *window[V]) get(n int) (V, bool) {
	var zero V
	k := n - w.base
	if k < 0 || k >= len(w.vals) {
		return zero, false
	}
	v := w.vals[k]
	return v, v != zero
}

// fits reports whether set may store number n.
func (w *window[V]) fits(n int) bool {
	if w.vals == nil {
		return true
	}
	k := n - w.base
	return k >= 0 && k < max(len(w.vals), 2*w.used+windowSlack)
}

// set stores v (not the zero V) for number n, which must fit.
func (w *window[V]) set(n int, v V) {
	if w.vals == nil {
		w.base = n
	}
	k := n - w.base
	if k >= len(w.vals) {
		// grow twofold or to hold n, within the bound of fits
		size := min(max(k+1, 2*len(w.vals), 64), max(len(w.vals), 2*w.used+windowSlack))
		vals := make([]V, size)
		copy(vals, w.vals)
		w.vals = vals
	}
	var zero V
	if w.vals[k] == zero {
		w.used++
	}
	w.vals[k] = v
}
