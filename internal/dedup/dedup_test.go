package dedup

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestStampsMatchScan compares Seen with a scan of the entries before each
// one, over random lists (some long) and across a stamp wrap-around.
func TestStampsMatchScan(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	s := New(50)
	for list := 0; list < 2000; list++ {
		if list == 1000 {
			s.cur = ^uint32(0) - 1 // the next two lists wrap the stamp
		}
		s.Next()
		n := r.Intn(8)
		if list%100 == 0 {
			n = 300
		}
		keys := make([]int32, n)
		for j := range keys {
			keys[j] = int32(r.Intn(50))
		}
		for j, k := range keys {
			want := false
			for _, u := range keys[:j] {
				if u == k {
					want = true
					break
				}
			}
			assert.Equal(t, want, s.Seen(k), "list %d entry %d", list, j)
		}
	}
}

// BenchmarkWideList marks a list of 38,400 distinct keys (a scan of the
// entries before each key compares 737 million pairs).
func BenchmarkWideList(b *testing.B) {
	const n = 38400
	s := New(n)
	for i := 0; i < b.N; i++ {
		s.Next()
		for k := int32(0); k < n; k++ {
			if s.Seen(k) {
				b.Fatal("distinct key seen twice")
			}
		}
	}
}
