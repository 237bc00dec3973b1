package dtrlog

// The logs name their tensors "x" and a counter ("x5265"), consecutive
// numbers from wherever the recording started; sim convert names them "t"
// and the tensor's ID. Tables keyed by such names (the decoder's interned
// strings, the compiler's name bindings) keep them in a window: a slice
// indexed by the number, faster and far smaller than a map. A window holds
// the names of one letter, the first one it stores (maps keyed by two
// million names "t<n>" were a quarter of the memory compiling a million-op
// log took). Any other name, and one outside the window, goes to the
// table's map.

// numbered returns the letter and number n of a name that is one ASCII
// letter followed by n in decimal without leading zeros and with at most 9
// digits, so that the letter and n name it uniquely.
func numbered[S string | []byte](name S) (byte, int, bool) {
	// name[0]|0x20 folds an ASCII capital to its small letter
	if len(name) < 2 || len(name) > 10 || (name[0]|0x20)-'a' >= 26 || (name[1] == '0' && len(name) > 2) {
		return 0, 0, false
	}
	n := 0
	for i := 1; i < len(name); i++ {
		c := name[i] - '0'
		if c > 9 {
			return 0, 0, false
		}
		n = n*10 + int(c)
	}
	return name[0], n, true
}

// windowSlack is how far a window may reach past twice its entries: its
// size stays proportional to the names it holds, whatever numbers a log
// uses.
const windowSlack = 1024

// window maps the numbers of names of one letter to values (the zero V:
// none) for the numbers from base; the first name set fixes both.
type window[V comparable] struct {
	letter byte // 0 until the first set
	base   int
	vals   []V
	used   int // non-zero values in vals
}

// holds reports whether the window is for names of letter p (any letter
// before its first set).
func (w *window[V]) holds(p byte) bool { return w.letter == p || w.letter == 0 }

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
func (w *window[V]) set(letter byte, n int, v V) {
	if w.vals == nil {
		w.letter, w.base = letter, n
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
