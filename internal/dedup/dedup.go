// Package dedup finds the repeated entries of short lists drawn from a
// dense ID space (an op's inputs, or their storage roots) in O(1) per
// entry. Scanning the entries before each one is quadratic in the list,
// which matters for wide ops: a gradient sum over the 38,400 steps of an
// unrolled LSTM has 38,400 inputs.
package dedup

// Stamps marks the keys of the current list. The zero value has room for
// no keys; make one with New.
type Stamps struct {
	stamp []uint32 // per key: the list that last saw it
	cur   uint32   // the current list
}

// New returns Stamps for keys in [0, n). A negative n is taken as 0.
func New(n int) *Stamps {
	return &Stamps{stamp: make([]uint32, max(n, 0)), cur: 1}
}

// Next starts a new list: every key is unseen again.
func (s *Stamps) Next() {
	s.cur++
	if s.cur == 0 { // wrapped after 2^32 lists
		clear(s.stamp)
		s.cur = 1
	}
}

// Seen reports whether k was already seen in the current list, and marks
// it seen. k must be in [0, n).
func (s *Stamps) Seen(k int32) bool {
	if s.stamp[k] == s.cur {
		return true
	}
	s.stamp[k] = s.cur
	return false
}
