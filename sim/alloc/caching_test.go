package alloc

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	kib int64 = 1 << 10
	mib int64 = 1 << 20
)

// Interface conformance.
var (
	_ AddressAllocator   = (*Caching)(nil)
	_ NeighbourAllocator = (*Caching)(nil)
	_ InPlaceAllocator   = (*Static)(nil)
	_ Holder             = (*Caching)(nil)
)

// keyLess orders treap keys (the order the trees must keep).
func keyLess(a1, a2, b1, b2 int64) bool { return a1 < b1 || (a1 == b1 && a2 < b2) }

func mustAlloc(t *testing.T, a Allocator, bytes int64) Block {
	t.Helper()
	b, err := a.Alloc(bytes)
	require.NoError(t, err, "alloc %d", bytes)
	return b
}

func TestCachingRounding(t *testing.T) {
	c := NewCaching(0)
	// 1 B -> 512; 0 B -> 512 (round_size's minimum); 513 -> 1024; 1024 stays.
	for _, tc := range []struct{ in, want int64 }{{1, 512}, {0, 512}, {512, 512}, {513, 1024}, {1024, 1024}} {
		b := mustAlloc(t, c, tc.in)
		assert.Equal(t, tc.want, c.Size(b), "request %d", tc.in)
	}
	// Allocated = 512+512+512+1024+1024 = 3584; all from one 2 MiB segment.
	assert.Equal(t, int64(3584), c.Allocated())
	assert.Equal(t, 2*mib, c.Reserved())
	assert.Equal(t, int64(1), c.Stats().SegmentAllocs)

	_, err := c.Alloc(-1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "alloc bytes -1")
	assert.False(t, errors.Is(err, ErrOutOfMemory))
}

func TestCachingSegmentSizes(t *testing.T) {
	for _, tc := range []struct {
		req, seg int64
		pool     uint8
	}{
		{1 * mib, 2 * mib, poolSmall},       // <= 1 MiB: small pool, 2 MiB segment
		{1*mib + 1, 20 * mib, poolLarge},    // rounds to 1 MiB + 512: large, < 10 MiB -> 20 MiB
		{10*mib - 512, 20 * mib, poolLarge}, // still < 10 MiB -> 20 MiB
		{10 * mib, 10 * mib, poolLarge},     // >= 10 MiB: rounded up to 2 MiB = 10 MiB
		{12 * mib, 12 * mib, poolLarge},     // 12 MiB is a multiple of 2 MiB
		{21*mib + 1, 22 * mib, poolLarge},   // 21 MiB + 512 -> next multiple of 2 MiB = 22 MiB
		{100*mib + 3, 102 * mib, poolLarge}, // 100 MiB + 512 -> 102 MiB
	} {
		c := NewCaching(0)
		b := mustAlloc(t, c, tc.req)
		assert.Equal(t, tc.seg, c.Reserved(), "request %d", tc.req)
		assert.Equal(t, tc.pool, c.meta[b].pool, "request %d", tc.req)
		assert.Equal(t, tc.seg, CachingSegmentSize(CachingRoundSize(tc.req)))
		checkCaching(t, c)
	}
}

// TestCachingHold: before every allocation of a random sequence of
// allocations and frees (small and large requests, remainders on both
// sides of the split thresholds), Hold predicts the size of the block
// Alloc then returns, and leaves the allocator as it was. Some blocks
// keep a remainder, so Hold is not just the rounded request.
func TestCachingHold(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := []int64{1, 511, 512, 513, 100 * kib, 1*mib - 512, 1 * mib, 1*mib + 1, 3 * mib, 9*mib + 700*kib, 10 * mib, 19 * mib, 19*mib - 512, 21*mib + 3}
	c := NewCaching(0)
	require.Equal(t, int64(-1), c.Hold(-1), "a refused request holds its bytes")
	var live []Block
	kept := 0
	for i := 0; i < 20000; i++ {
		if len(live) > 0 && rng.IntN(5) < 2 {
			k := rng.IntN(len(live))
			c.Free(live[k])
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
			continue
		}
		bytes := sizes[rng.IntN(len(sizes))] + rng.Int64N(4096) - 2048
		bytes = max(bytes, 0)
		before := c.Stats()
		h := c.Hold(bytes)
		require.Equal(t, before, c.Stats(), "Hold changes nothing")
		b := mustAlloc(t, c, bytes)
		require.Equal(t, c.Size(b), h, "alloc %d (step %d)", bytes, i)
		if h > CachingRoundSize(bytes) {
			kept++
		}
		live = append(live, b)
	}
	checkCaching(t, c)
	require.Greater(t, kept, 100, "some blocks keep a remainder")
}

// TestCachingHoldSeq: from random allocator states (allocations and frees
// of small and large requests), HoldSeq of two to four requests equals the
// summed sizes of the blocks Alloc then returns for them in turn, and
// leaves the allocator as it was; often the requests' own splits change
// which block a later one gets, so the sum of single Holds would not.
func TestCachingHoldSeq(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	sizes := []int64{1, 513, 100 * kib, 1*mib - 512, 1*mib + 1, 1500 * kib, 3 * mib, 9*mib + 700*kib, 10 * mib, 19*mib - 512, 21*mib + 3}
	c := NewCaching(0)
	var live []Block
	differ := 0
	for i := 0; i < 5000; i++ {
		if len(live) > 0 && rng.IntN(3) == 0 {
			for k := rng.IntN(4); k >= 0 && len(live) > 0; k-- {
				j := rng.IntN(len(live))
				c.Free(live[j])
				live[j] = live[len(live)-1]
				live = live[:len(live)-1]
			}
			continue
		}
		seq := make([]int64, 2+rng.IntN(3))
		var single int64
		for j := range seq {
			seq[j] = max(sizes[rng.IntN(len(sizes))]+rng.Int64N(4096)-2048, 0)
			single += c.Hold(seq[j])
		}
		before := c.Stats()
		h := c.HoldSeq(seq)
		require.Equal(t, before, c.Stats(), "HoldSeq changes nothing")
		var got int64
		for _, bytes := range seq {
			b := mustAlloc(t, c, bytes)
			got += c.Size(b)
			live = append(live, b)
		}
		require.Equal(t, got, h, "step %d: %v", i, seq)
		if single != h {
			differ++
		}
	}
	checkCaching(t, c)
	require.Greater(t, differ, 50, "the requests' own blocks matter")
	require.Equal(t, c.Hold(7), c.HoldSeq([]int64{7}))
	require.Equal(t, int64(-3), c.HoldSeq([]int64{-3}))
}

func TestCachingSplitThresholds(t *testing.T) {
	t.Run("small pool splits remainders of 512 B", func(t *testing.T) {
		c := NewCaching(0)
		a := mustAlloc(t, c, 1*mib) // 2 MiB segment -> a = 1 MiB, remainder 1 MiB cached
		assert.Equal(t, 1*mib, c.Size(a))
		b := mustAlloc(t, c, 1*mib-512) // takes the 1 MiB block, remainder 512 >= 512: split
		assert.Equal(t, 1*mib-512, c.Size(b))
		d := mustAlloc(t, c, 1) // takes the 512 B remainder exactly
		assert.Equal(t, int64(512), c.Size(d))
		st := c.Stats()
		assert.Equal(t, int64(1), st.SegmentAllocs)
		assert.Equal(t, int64(2), st.CacheHits)
		assert.Equal(t, int64(2), st.Splits)
		assert.Equal(t, 2*mib, c.Allocated()) // 1 MiB + (1 MiB - 512) + 512
		checkCaching(t, c)
	})
	t.Run("large pool keeps a remainder of exactly 1 MiB", func(t *testing.T) {
		c := NewCaching(0)
		a := mustAlloc(t, c, 19*mib) // 20 MiB segment, remainder 1 MiB is not > 1 MiB
		assert.Equal(t, 20*mib, c.Size(a))
		assert.Equal(t, 20*mib, c.Allocated())
		assert.Equal(t, int64(0), c.Stats().Splits)
		checkCaching(t, c)
	})
	t.Run("large pool splits a remainder above 1 MiB", func(t *testing.T) {
		c := NewCaching(0)
		a := mustAlloc(t, c, 19*mib-512) // remainder 1 MiB + 512 > 1 MiB: split
		assert.Equal(t, 19*mib-512, c.Size(a))
		assert.Equal(t, 19*mib-512, c.Allocated())
		assert.Equal(t, int64(1), c.Stats().Splits)
		assert.Equal(t, 1*mib+512, c.Stats().LargestFree)
		checkCaching(t, c)
	})
}

func TestCachingMergeWithinSegmentOnly(t *testing.T) {
	c := NewCaching(0)
	// One 20 MiB segment: a@0, b@5, c@10 MiB (5 MiB each), 5 MiB tail cached.
	a := mustAlloc(t, c, 5*mib)
	b := mustAlloc(t, c, 5*mib)
	d := mustAlloc(t, c, 5*mib)
	for i, blk := range []Block{a, b, d} {
		seg, off := c.Addr(blk)
		assert.Equal(t, int32(0), seg)
		assert.Equal(t, int64(i)*5*mib, off)
		assert.Equal(t, 5*mib, c.Size(blk))
	}
	// AddressAllocator on the crafted layout: only d touches the free tail.
	assert.Equal(t, int64(0), c.AdjacentFree(a))
	assert.Equal(t, int64(0), c.AdjacentFree(b))
	assert.Equal(t, 5*mib, c.AdjacentFree(d))
	c.Free(a)
	assert.Equal(t, 5*mib, c.AdjacentFree(b)) // a's hole before b
	c.Free(b)                                 // merges with a: 10 MiB @0
	st := c.Stats()
	assert.Equal(t, int64(1), st.Merges)
	assert.Equal(t, 10*mib, st.LargestFree)
	assert.Equal(t, 15*mib, c.AdjacentFree(d)) // 10 MiB before + 5 MiB after
	c.Free(d)                                  // merges with both: the whole 20 MiB
	st = c.Stats()
	assert.Equal(t, int64(3), st.Merges)
	assert.Equal(t, 1, st.CachedBlocks)
	assert.Equal(t, 20*mib, st.LargestFree)
	assert.Equal(t, 0.0, c.Fragmentation())
	checkCaching(t, c)

	// Two whole 20 MiB segments are adjacent in the virtual address space
	// ([0, 20) and [20, 40) MiB) but never merge.
	c2 := NewCaching(0)
	x := mustAlloc(t, c2, 19*mib) // whole segment 0 (1 MiB remainder not split)
	y := mustAlloc(t, c2, 19*mib) // whole segment 1
	sx, _ := c2.Addr(x)
	sy, _ := c2.Addr(y)
	assert.Equal(t, int32(0), sx)
	assert.Equal(t, int32(1), sy)
	assert.Equal(t, c2.nodes[x].k2+c2.nodes[x].k1, c2.nodes[y].k2, "segments are contiguous in address")
	c2.Free(x)
	c2.Free(y)
	st = c2.Stats()
	assert.Equal(t, int64(0), st.Merges)
	assert.Equal(t, 2, st.CachedBlocks)
	assert.Equal(t, 20*mib, st.LargestFree)
	// Fragmentation = 1 - 20 MiB / 40 MiB = 0.5.
	assert.InDelta(t, 0.5, c2.Fragmentation(), 1e-12)
	checkCaching(t, c2)
}

func TestCachingBestFit(t *testing.T) {
	c := NewCaching(0)
	// Small-pool segment layout (KiB): A 256@0, B 64@256, C 128@320, D 64@448,
	// E 512@512, F 64@1024, tail 960@1088.
	A := mustAlloc(t, c, 256*kib)
	mustAlloc(t, c, 64*kib)
	C := mustAlloc(t, c, 128*kib)
	mustAlloc(t, c, 64*kib)
	E := mustAlloc(t, c, 512*kib)
	mustAlloc(t, c, 64*kib)
	c.Free(A)
	c.Free(C)
	c.Free(E)
	// Holes: 256@0, 128@320, 512@512, 960@1088. 100 KiB fits best in 128@320.
	x := mustAlloc(t, c, 100*kib)
	_, off := c.Addr(x)
	assert.Equal(t, 320*kib, off)
	// 200 KiB: holes now 28@420, 256@0, 512@512, 960@1088 -> 256@0.
	y := mustAlloc(t, c, 200*kib)
	_, off = c.Addr(y)
	assert.Equal(t, int64(0), off)
	// 300 KiB -> 512@512.
	z := mustAlloc(t, c, 300*kib)
	_, off = c.Addr(z)
	assert.Equal(t, 512*kib, off)
	assert.Equal(t, int64(1), c.Stats().SegmentAllocs)
	checkCaching(t, c)

	// Ties in size go to the lower address.
	c = NewCaching(0)
	p := mustAlloc(t, c, 64*kib) // @0
	mustAlloc(t, c, 64*kib)      // @64
	q := mustAlloc(t, c, 64*kib) // @128
	mustAlloc(t, c, 64*kib)      // @192
	c.Free(q)
	c.Free(p)
	r := mustAlloc(t, c, 64*kib)
	_, off = c.Addr(r)
	assert.Equal(t, int64(0), off)
	checkCaching(t, c)
}

func TestCachingReuseWithoutNewSegment(t *testing.T) {
	c := NewCaching(0)
	a := mustAlloc(t, c, 5*mib)
	seg, off := c.Addr(a)
	c.Free(a)
	b := mustAlloc(t, c, 5*mib)
	seg2, off2 := c.Addr(b)
	assert.Equal(t, seg, seg2)
	assert.Equal(t, off, off2)
	st := c.Stats()
	assert.Equal(t, int64(1), st.SegmentAllocs)
	assert.Equal(t, int64(1), st.CacheHits) // the first alloc used a new segment
	assert.Equal(t, 20*mib, c.Reserved())
	// Small requests never come from the large pool's cached 15 MiB.
	mustAlloc(t, c, 4*kib)
	assert.Equal(t, int64(2), c.Stats().SegmentAllocs)
	assert.Equal(t, 22*mib, c.Reserved())
}

func TestCachingReleaseOnOOMThenSuccess(t *testing.T) {
	c := NewCaching(50 * mib)
	a := mustAlloc(t, c, 19*mib) // segment 0: 20 MiB
	mustAlloc(t, c, 19*mib)      // segment 1: 20 MiB
	c.Free(a)                    // segment 0 fully free, cached
	assert.Equal(t, 40*mib, c.Reserved())
	// 30 MiB needs a 30 MiB segment: 40 + 30 > 50, so segment 0 (20 MiB) is
	// released first: 20 + 30 = 50 <= 50.
	big := mustAlloc(t, c, 30*mib)
	assert.Equal(t, 50*mib, c.Reserved())
	assert.Equal(t, 50*mib, c.Allocated()) // 20 + 30
	st := c.Stats()
	assert.Equal(t, int64(1), st.SegmentReleases)
	assert.Equal(t, int64(3), st.SegmentAllocs)
	assert.Equal(t, 2, st.Segments)
	seg, _ := c.Addr(big)
	assert.Equal(t, int32(0), seg, "segment number 0 is reused")
	checkCaching(t, c)

	// Nothing is releasable now: 12 MiB needs a 12 MiB segment; 50 + 12 > 50.
	_, err := c.Alloc(12 * mib)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrOutOfMemory))
	// 12 MiB = 12582912; 50 MiB = 52428800.
	assert.Equal(t, "caching allocator: request of 12582912 bytes (rounded to 12582912) needs a new segment of 12582912 bytes: allocated 52428800, reserved 52428800, capacity 52428800: out of memory", err.Error())
	assert.Equal(t, int64(1), c.Stats().OOMs)
	assert.Equal(t, 50*mib, c.Reserved())
	checkCaching(t, c)
}

func TestCachingOOMLeavesStateUnchanged(t *testing.T) {
	c := NewCaching(40 * mib)
	a := mustAlloc(t, c, 19*mib)
	mustAlloc(t, c, 19*mib)
	c.Free(a)
	// 30 MiB: even after releasing segment 0, 20 + 30 = 50 > 40, so nothing
	// is released and the cached 20 MiB stays.
	_, err := c.Alloc(30 * mib)
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Equal(t, 40*mib, c.Reserved())
	assert.Equal(t, int64(0), c.Stats().SegmentReleases)
	// The cached segment still serves a fitting request.
	mustAlloc(t, c, 19*mib)
	assert.Equal(t, int64(2), c.Stats().SegmentAllocs)
	checkCaching(t, c)
}

func TestCachingFragmentationClassic(t *testing.T) {
	c := NewCaching(0)
	// Ten 2 MiB blocks fill one 20 MiB large-pool segment exactly: each
	// split leaves a remainder of 18, 16, ..., 2 MiB (> 1 MiB) and the 10th
	// takes the last 2 MiB whole.
	var blocks []Block
	for range 10 {
		blocks = append(blocks, mustAlloc(t, c, 2*mib))
	}
	require.Equal(t, 20*mib, c.Reserved())
	require.Equal(t, int64(1), c.Stats().SegmentAllocs)
	// Free every other one: five 2 MiB holes, none adjacent.
	for i := 0; i < 10; i += 2 {
		c.Free(blocks[i])
	}
	assert.Equal(t, 10*mib, c.Allocated())
	// Fragmentation = 1 - 2 MiB / 10 MiB = 0.8.
	assert.InDelta(t, 0.8, c.Fragmentation(), 1e-12)
	// 4 MiB fits in no hole although 10 MiB are free: a new 20 MiB segment
	// (4 MiB < 10 MiB), split into 4 + 16 MiB.
	mustAlloc(t, c, 4*mib)
	st := c.Stats()
	assert.Equal(t, int64(2), st.SegmentAllocs)
	// Allocated = 5*2 + 4 = 14 MiB; Reserved = 40 MiB; the excess 26 MiB is
	// the five trapped 2 MiB holes plus the 16 MiB tail.
	assert.Equal(t, 14*mib, c.Allocated())
	assert.Equal(t, 40*mib, c.Reserved())
	assert.Equal(t, 26*mib, c.Reserved()-c.Allocated())
	assert.Equal(t, 26*mib, st.FreeBytes)
	assert.Equal(t, 16*mib, st.LargestFree)
	// Fragmentation = 1 - 16/26.
	assert.InDelta(t, 1-16.0/26.0, c.Fragmentation(), 1e-12)
	checkCaching(t, c)
}

func TestCachingResetAndBadFrees(t *testing.T) {
	c := NewCaching(0)
	a := mustAlloc(t, c, 3*mib)
	c.Free(a)
	before := c.Stats()
	c.Free(a) // double free: nothing happens
	c.Free(99)
	c.Free(-1)
	assert.Equal(t, before, c.Stats(), "frees of blocks that are not live change nothing")
	assert.Equal(t, int64(0), c.Allocated())
	checkCaching(t, c)
	c.Reset()
	assert.Equal(t, int64(0), c.Reserved())
	assert.Equal(t, int64(0), c.Allocated())
	assert.Equal(t, CachingStats{}, c.Stats())
	s, off := c.Addr(a)
	assert.Equal(t, int32(-1), s)
	assert.Equal(t, int64(-1), off)
	assert.Equal(t, int64(0), c.Size(a))
	b := mustAlloc(t, c, 3*mib)
	_, off = c.Addr(b)
	assert.Equal(t, int64(0), off)
	assert.Equal(t, "caching", c.Name())
	assert.Equal(t, int64(math.MaxInt64), c.Capacity(), "capacity 0 is unlimited")
	assert.Equal(t, int64(0), c.AdjacentFree(-1))
	assert.Equal(t, 0.0, c.Fragmentation(), "the segment's remainder is the only free block")

	// The zero value is an empty unlimited allocator.
	var z Caching
	assert.Equal(t, int64(math.MaxInt64), z.Capacity())
	zb := mustAlloc(t, &z, 3*mib)
	assert.Equal(t, c.Size(b), z.Size(zb))
	z.Free(zb)
	assert.Equal(t, int64(0), z.Allocated())
	checkCaching(t, &z)
	c.Free(b)
	assert.Equal(t, 0.0, c.Fragmentation(), "one whole free segment")
	mustAlloc(t, c, 19*mib) // takes the cached 20 MiB segment whole
	assert.Equal(t, int64(0), c.Stats().FreeBytes)
	assert.Equal(t, 0.0, c.Fragmentation(), "nothing cached")
	assert.Equal(t, int64(7), NewCaching(7).Capacity())
}

func TestCachingEmptyCache(t *testing.T) {
	c := NewCaching(0)
	a := mustAlloc(t, c, 1*kib)  // small segment 2 MiB
	b := mustAlloc(t, c, 19*mib) // large segment 20 MiB, taken whole
	mustAlloc(t, c, 12*mib)      // large segment 12 MiB, stays live
	c.Free(a)
	c.Free(b)
	// Releases the two fully free segments: 2 + 20 MiB.
	assert.Equal(t, 22*mib, c.EmptyCache())
	assert.Equal(t, 12*mib, c.Reserved())
	assert.Equal(t, int64(2), c.Stats().SegmentReleases)
	checkCaching(t, c)
}

// TestCachingRandomInvariants replays a random mixed-size sequence and checks
// every structural invariant plus best fit against a brute-force search.
func TestCachingRandomInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	c := NewCaching(600 * mib)
	var live []Block
	for step := range 4000 {
		if len(live) > 0 && (rng.IntN(2) == 0 || len(live) > 200) {
			i := rng.IntN(len(live))
			c.Free(live[i])
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		} else {
			req := randomTensorBytes(rng)
			want := bruteBestFit(c, req)
			b, err := c.Alloc(req)
			if err != nil {
				require.ErrorIs(t, err, ErrOutOfMemory)
				continue
			}
			if want >= 0 {
				// served from the cache: same start address as brute force
				assert.Equal(t, c.nodes[want].k2, c.nodes[b].k2, "step %d: best fit for %d", step, req)
			}
			live = append(live, b)
		}
		if step%97 == 0 {
			checkCaching(t, c)
		}
	}
	checkCaching(t, c)
	for _, b := range live {
		c.Free(b)
	}
	checkCaching(t, c)
	assert.Equal(t, int64(0), c.Allocated())
	assert.Equal(t, c.Reserved(), c.EmptyCache())
	assert.Equal(t, 0, c.Stats().Blocks)
}

// bruteBestFit returns the cached block a request of req should take: the
// smallest (size, address) of its pool with size >= the rounded request.
func bruteBestFit(c *Caching, req int64) int32 {
	size := CachingRoundSize(req)
	pool := uint8(poolLarge)
	if size <= CachingSmallSize {
		pool = poolSmall
	}
	best := int32(-1)
	for i := range c.meta {
		m := c.meta[i]
		if m.state != blkCached || m.pool != pool || c.nodes[i].k1 < size {
			continue
		}
		if best < 0 || keyLess(c.nodes[i].k1, c.nodes[i].k2, c.nodes[best].k1, c.nodes[best].k2) {
			best = int32(i)
		}
	}
	return best
}

// checkCaching verifies the caching model's invariants: blocks tile every
// live segment, no two cached neighbours, Allocated/Reserved match the
// blocks, and each pool's tree holds exactly its cached blocks in key order.
func checkCaching(t *testing.T, c *Caching) {
	t.Helper()
	var alloc, reserved, cached int64
	nCached := [2]int{}
	for s := range c.segs {
		sg := c.segs[s]
		if !sg.live {
			continue
		}
		reserved += sg.size
		addr := sg.base
		prev := int32(-1)
		prevCached := false
		for b := sg.first; b >= 0; b = c.meta[b].next {
			m := c.meta[b]
			require.Equal(t, prev, m.prev, "segment %d block %d prev", s, b)
			require.Equal(t, int32(s), m.seg)
			require.Equal(t, sg.pool, m.pool)
			require.Equal(t, addr, c.nodes[b].k2, "segment %d block %d address", s, b)
			switch m.state {
			case blkLive:
				alloc += c.nodes[b].k1
				prevCached = false
			case blkCached:
				require.False(t, prevCached, "segment %d: adjacent cached blocks", s)
				cached += c.nodes[b].k1
				nCached[m.pool]++
				prevCached = true
			default:
				t.Fatalf("segment %d: unused block %d linked", s, b)
			}
			addr += c.nodes[b].k1
			prev = b
		}
		require.Equal(t, sg.base+sg.size, addr, "segment %d tiles", s)
	}
	require.Equal(t, alloc, c.Allocated())
	require.Equal(t, reserved, c.Reserved())
	require.Equal(t, reserved-alloc, cached)
	for p := range c.pools {
		n := 0
		var last [2]int64
		first := true
		var walk func(x int32)
		walk = func(x int32) {
			if x < 0 {
				return
			}
			walk(c.nodes[x].ch[0])
			require.Equal(t, uint8(p), c.meta[x].pool)
			require.Equal(t, blkCached, c.meta[x].state)
			if !first {
				require.True(t, keyLess(last[0], last[1], c.nodes[x].k1, c.nodes[x].k2), "tree order")
			}
			for _, ch := range c.nodes[x].ch {
				if ch >= 0 {
					require.LessOrEqual(t, c.nodes[ch].prio, c.nodes[x].prio, "heap order")
				}
			}
			first = false
			last = [2]int64{c.nodes[x].k1, c.nodes[x].k2}
			n++
			walk(c.nodes[x].ch[1])
		}
		walk(c.pools[p].root)
		require.Equal(t, nCached[p], n, "pool %d tree size", p)
	}
	checkFreeNeighbours(t, c)
}

// randomTensorBytes draws a tensor size from a mix resembling a CNN/
// transformer training step: 55% small (<= 1 MiB: biases, norms, small
// activations), 35% medium (1-16 MiB), 10% large (16-128 MiB).
func randomTensorBytes(rng *rand.Rand) int64 {
	switch r := rng.IntN(100); {
	case r < 55:
		return 256 + rng.Int64N(mib)
	case r < 90:
		return mib + rng.Int64N(15*mib)
	default:
		return 16*mib + rng.Int64N(112*mib)
	}
}

func ExampleCaching() {
	c := NewCaching(0)       // unlimited capacity
	a, _ := c.Alloc(1)       // small pool: 512 B block of a new 2 MiB segment
	b, _ := c.Alloc(5 << 20) // large pool: a 20 MiB segment, split 5 + 15 MiB
	c.Free(b)                // stays cached: reserved does not change
	b, _ = c.Alloc(12 << 20) // served from the cached 20 MiB block (remainder 8 MiB split off)
	seg, off := c.Addr(b)
	fmt.Println(c.Size(a), c.Allocated(), c.Reserved())
	fmt.Println(seg, off, c.Stats().SegmentAllocs, c.Stats().CacheHits)
	// Output:
	// 512 12583424 23068672
	// 1 0 2 1
}

// checkFreeNeighbours verifies that FreeNeighbours visits, once each,
// exactly the handed-out blocks whose AdjacentFree is positive.
func checkFreeNeighbours(t *testing.T, c *Caching) {
	t.Helper()
	seen := map[Block]int{}
	c.FreeNeighbours(func(b Block) { seen[b]++ })
	want := 0
	for i := range c.meta {
		b := Block(i)
		if c.meta[i].state != blkLive || c.AdjacentFree(b) == 0 {
			require.Zero(t, seen[b], "block %d: no free neighbour, visited", i)
			continue
		}
		want++
		require.Equal(t, 1, seen[b], "block %d: %d free bytes next to it, visits", i, c.AdjacentFree(b))
	}
	require.Len(t, seen, want)
}

// TestNotifyFreeGrowth: over random allocations and frees, the blocks the
// caching allocator reports (NotifyFreeGrowth) are, once each, exactly the
// handed-out blocks whose AdjacentFree grew; an allocation reports none
// (and makes none grow). The subscription outlives Reset; nil ends it.
func TestNotifyFreeGrowth(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	c := NewCaching(0)
	var _ GrowthNotifier = c
	var got map[Block]int
	c.NotifyFreeGrowth(func(b Block) { got[b]++ })
	adj := func() map[Block]int64 {
		m := map[Block]int64{}
		for i := range c.meta {
			if c.meta[i].state == blkLive {
				m[Block(i)] = c.AdjacentFree(Block(i))
			}
		}
		return m
	}
	var live []Block
	reported := 0
	for round := 0; round < 2; round++ {
		for i := 0; i < 3000; i++ {
			before := adj()
			got = map[Block]int{}
			freed := Block(-1)
			if len(live) > 0 && (len(live) > 200 || rng.IntN(2) == 0) {
				k := rng.IntN(len(live))
				freed = live[k]
				live[k] = live[len(live)-1]
				live = live[:len(live)-1]
				c.Free(freed)
			} else {
				b, err := c.Alloc(randomTensorBytes(rng))
				require.NoError(t, err)
				live = append(live, b)
			}
			after := adj()
			for b, n := range after {
				if p, ok := before[b]; ok && n > p { // a new block is not a growth
					require.NotEqual(t, Block(-1), freed, "block %d grew on an allocation", b)
					require.Equal(t, 1, got[b], "block %d: free bytes next to it %d -> %d, reports", b, before[b], n)
				} else {
					require.Zero(t, got[b], "block %d did not grow (%d -> %d), reported", b, before[b], n)
				}
			}
			for b := range got {
				_, ok := after[b]
				require.True(t, ok, "block %d reported but not handed out", b)
			}
			reported += len(got)
		}
		c.Reset()
		live = live[:0]
	}
	require.Greater(t, reported, 1000)
	c.NotifyFreeGrowth(nil)
	b1, _ := c.Alloc(mib)
	b2, _ := c.Alloc(mib)
	_, _ = c.Alloc(mib)
	c.Free(b1)
	c.Free(b2) // b3 grows, unreported
}
