package alloc

import (
	"fmt"
	"math"
	"slices"
)

// Constants of PyTorch's CUDA caching allocator
// (c10/cuda/CUDACachingAllocator.cpp), which the Caching model follows.
const (
	// CachingMinBlock is the rounding granularity: every request is rounded
	// up to a multiple of 512 bytes (kMinBlockSize).
	CachingMinBlock int64 = 512
	// CachingSmallSize is the largest request served by the small pool
	// (kSmallSize, 1 MiB).
	CachingSmallSize int64 = 1 << 20
	// CachingSmallBuffer is the size of a small-pool segment (kSmallBuffer,
	// 2 MiB).
	CachingSmallBuffer int64 = 2 << 20
	// CachingLargeBuffer is the segment size given to large requests below
	// CachingMinLargeAlloc (kLargeBuffer, 20 MiB).
	CachingLargeBuffer int64 = 20 << 20
	// CachingMinLargeAlloc is the request size from which a large segment is
	// sized to the request itself (kMinLargeAlloc, 10 MiB).
	CachingMinLargeAlloc int64 = 10 << 20
	// CachingRoundLarge is the granularity of segments for requests of at
	// least CachingMinLargeAlloc (kRoundLarge, 2 MiB).
	CachingRoundLarge int64 = 2 << 20
)

const (
	poolSmall = 0
	poolLarge = 1
)

// block states of the caching model.
const (
	blkUnused uint8 = iota // on the recycle list
	blkLive                // handed out by Alloc
	blkCached              // free, in its pool's free tree
)

// cblockMeta is the non-key part of a caching block; the key (size, address)
// lives in the parallel tnode slice.
type cblockMeta struct {
	prev, next int32 // neighbours in the segment, -1 at the ends
	seg        int32
	state      uint8
	pool       uint8
}

// cseg is one device allocation (cudaMalloc) of the caching model.
type cseg struct {
	base  int64 // virtual address of the segment's first byte
	size  int64
	first int32 // the block at offset 0
	pool  uint8
	live  bool
}

// CachingStats are the counters of a Caching allocator since its last Reset.
type CachingStats struct {
	// Segments is the number of segments currently held from the device.
	Segments int
	// Blocks is the number of blocks currently in segments (live + cached).
	Blocks int
	// LiveBlocks and CachedBlocks split Blocks into handed-out and free ones.
	LiveBlocks, CachedBlocks int
	// Allocs and Frees count successful Alloc and Free calls.
	Allocs, Frees int64
	// CacheHits counts allocations served from a cached free block without a
	// new segment.
	CacheHits int64
	// SegmentAllocs counts new segments (cudaMalloc calls).
	SegmentAllocs int64
	// SegmentReleases counts segments released because a new segment would
	// have exceeded the capacity (cudaFree of fully free cached segments).
	SegmentReleases int64
	// Splits counts blocks split in two; Merges counts free neighbours merged.
	Splits, Merges int64
	// OOMs counts Alloc calls that failed with ErrOutOfMemory.
	OOMs int64
	// PeakAllocated and PeakReserved are the highest Allocated and Reserved
	// seen.
	PeakAllocated, PeakReserved int64
	// FreeBytes is Reserved - Allocated: bytes cached in free blocks.
	FreeBytes int64
	// LargestFree is the size of the largest cached free block (any pool).
	LargestFree int64
}

// Caching models PyTorch's CUDA caching allocator: requests are rounded to
// 512 B, small ones (<= 1 MiB) come from 2 MiB segments of a small pool and
// large ones from a large pool (20 MiB segments below 10 MiB, else the request
// rounded up to 2 MiB); a request takes the best-fitting cached free block of
// its pool (smallest size, then lowest address), splitting off the remainder
// when it is large enough; freed blocks merge with free neighbours of the same
// segment and stay cached. When a new segment would exceed the capacity, all
// fully free cached segments are released first (as PyTorch does before
// reporting out of memory).
//
// Every block is addressed: segments get increasing virtual base addresses,
// so the model can answer which blocks are adjacent (AddressAllocator).
// Alloc and Free run in O(log n) for n cached blocks and do not allocate in
// steady state. A Caching is not safe for concurrent use. The zero value is
// an empty unlimited allocator, like NewCaching(0).
type Caching struct {
	capacity int64
	nodes    []tnode      // key (size, address) of every block
	meta     []cblockMeta // parallel to nodes
	recycled []int32      // unused block numbers
	segs     []cseg
	freeSegs []int32 // unused segment numbers
	pools    [2]treap
	nextAddr int64
	alloc    int64
	reserved int64
	stats    CachingStats
	// grew (NotifyFreeGrowth) is called with each live block whose free
	// neighbour a Free creates or enlarges; it outlives Reset
	grew func(Block)
}

// NewCaching returns an empty caching allocator that holds at most capacity
// bytes of device memory (reserved); capacity <= 0 means unlimited.
func NewCaching(capacity int64) *Caching {
	if capacity <= 0 {
		capacity = math.MaxInt64
	}
	c := &Caching{capacity: capacity}
	c.Reset()
	return c
}

// Reserve makes room for n more blocks, so that a caller who knows how
// many allocations are coming (the simulator knows a graph's storages) does
// not have the block arrays copied as they grow. Capacity that is never used
// is never touched, so it costs address space, not resident memory.
func (c *Caching) Reserve(n int) {
	if n <= 0 || cap(c.nodes)-len(c.nodes) >= n {
		return
	}
	c.nodes = append(make([]tnode, 0, len(c.nodes)+n), c.nodes...)
	c.meta = append(make([]cblockMeta, 0, len(c.meta)+n), c.meta...)
}

// init makes a zero Caching an empty unlimited one (NewCaching sets a
// positive capacity, so this runs at most once).
func (c *Caching) init() {
	if c.capacity <= 0 {
		c.capacity = math.MaxInt64
		c.Reset()
	}
}

// Name returns "caching".
func (c *Caching) Name() string { return "caching" }

// Capacity returns the capacity in bytes (math.MaxInt64 when unlimited).
func (c *Caching) Capacity() int64 {
	c.init()
	return c.capacity
}

// Allocated returns the bytes of live blocks (their sizes after rounding and
// after any unsplit remainder, as PyTorch's allocated_bytes counts them).
func (c *Caching) Allocated() int64 { return c.alloc }

// Reserved returns the bytes of all segments held from the device.
func (c *Caching) Reserved() int64 { return c.reserved }

// Reset releases everything and clears the statistics. Internal slices keep
// their capacity so a reused allocator does not allocate again.
func (c *Caching) Reset() {
	c.nodes = c.nodes[:0]
	c.meta = c.meta[:0]
	c.recycled = c.recycled[:0]
	c.segs = c.segs[:0]
	c.freeSegs = c.freeSegs[:0]
	c.pools = [2]treap{{root: -1}, {root: -1}}
	c.nextAddr = 0
	c.alloc = 0
	c.reserved = 0
	c.stats = CachingStats{}
}

// Granule returns the caching model's rounding: every request is held as
// a multiple of CachingMinBlock bytes, and at least one (see
// CachingRoundSize). It implements Granular.
func (c *Caching) Granule() int64 { return CachingMinBlock }

// CachingRoundSize returns the size the caching model gives a request of
// bytes: at least 512 B and rounded up to a multiple of 512 B.
func CachingRoundSize(bytes int64) int64 {
	if bytes < CachingMinBlock {
		return CachingMinBlock
	}
	return (bytes + CachingMinBlock - 1) / CachingMinBlock * CachingMinBlock
}

// CachingSegmentSize returns the size of the segment the caching model
// allocates for a rounded request of size bytes: 2 MiB for small requests
// (<= 1 MiB), 20 MiB below 10 MiB, else size rounded up to 2 MiB.
func CachingSegmentSize(size int64) int64 {
	switch {
	case size <= CachingSmallSize:
		return CachingSmallBuffer
	case size < CachingMinLargeAlloc:
		return CachingLargeBuffer
	default:
		return (size + CachingRoundLarge - 1) / CachingRoundLarge * CachingRoundLarge
	}
}

// poolOf returns the pool that serves a rounded request of size bytes.
func poolOf(size int64) uint8 {
	if size <= CachingSmallSize {
		return poolSmall
	}
	return poolLarge
}

func shouldSplit(pool uint8, remaining int64) bool {
	if pool == poolSmall {
		return remaining >= CachingMinBlock
	}
	return remaining > CachingSmallSize
}

// maxRequest is the largest request whose rounding cannot overflow.
const maxRequest = math.MaxInt64 - 2*CachingRoundLarge

// Alloc returns a block of at least bytes (bytes >= 0). The request is rounded
// (CachingRoundSize); the block comes from the best-fitting cached free block
// of its pool, else from a new segment. An error wrapping ErrOutOfMemory
// names the request, Allocated, Reserved and the capacity when a new segment
// would not fit even after releasing every fully free cached segment; the
// allocator is then unchanged.
func (c *Caching) Alloc(bytes int64) (Block, error) {
	c.init()
	if bytes < 0 || bytes > maxRequest {
		return -1, fmt.Errorf("caching allocator: alloc bytes %d: expected 0..%d", bytes, int64(maxRequest))
	}
	size := CachingRoundSize(bytes)
	pool := poolOf(size)
	tr := &c.pools[pool]
	b := tr.takeLowerBound(c.nodes, size)
	if b >= 0 {
		c.stats.CacheHits++
	} else {
		segSize := CachingSegmentSize(size)
		if segSize > c.capacity-c.reserved {
			if segSize > c.capacity-(c.reserved-c.releasable()) {
				c.stats.OOMs++
				return -1, fmt.Errorf("caching allocator: request of %d bytes (rounded to %d) needs a new segment of %d bytes: allocated %d, reserved %d, capacity %d: %w",
					bytes, size, segSize, c.alloc, c.reserved, c.capacity, ErrOutOfMemory)
			}
			c.releaseCached()
		}
		b = c.newSegment(pool, segSize)
	}
	if rem := c.nodes[b].k1 - size; shouldSplit(pool, rem) {
		r := c.newBlock()
		m := &c.meta[b]
		c.nodes[r].k1 = rem
		c.nodes[r].k2 = c.nodes[b].k2 + size
		c.meta[r] = cblockMeta{prev: b, next: m.next, seg: m.seg, state: blkCached, pool: pool}
		if m.next >= 0 {
			c.meta[m.next].prev = r
		}
		m.next = r
		c.nodes[b].k1 = size
		tr.insert(c.nodes, r)
		c.stats.Splits++
	}
	c.meta[b].state = blkLive
	c.alloc += c.nodes[b].k1
	if c.alloc > c.stats.PeakAllocated {
		c.stats.PeakAllocated = c.alloc
	}
	c.stats.Allocs++
	return Block(b), nil
}

// Hold implements Holder: the size of the block Alloc(bytes) would return
// now. That is the rounded request, unless the best-fitting cached block
// (or, without one, a new segment) leaves a remainder too small to split
// off, which stays with the block. A request Alloc would refuse (negative
// or too large) holds bytes as they are.
func (c *Caching) Hold(bytes int64) int64 {
	return c.HoldSeq([]int64{bytes})
}

// HoldSeq implements Holder: the summed sizes of the blocks that Alloc
// would return for each of sizes in turn, from the allocator's current
// state, without changing it. Each request takes the best-fitting free
// block left by the ones before it (the cached blocks not yet taken and the
// remainders split off so far) or a new segment, as Alloc does when new
// segments fit; under a capacity that makes Alloc release cached segments
// first, those segments still count as free here. Negative or too large
// requests count as their bytes.
func (c *Caching) HoldSeq(sizes []int64) int64 {
	c.init()
	type free struct {
		size, addr int64
		pool       uint8
	}
	var takenBuf [8]int32
	var splitBuf [8]free
	taken := takenBuf[:0] // cached blocks the requests so far took
	split := splitBuf[:0] // remainders split off by them, still free
	next := c.nextAddr
	var total int64
	for _, bytes := range sizes {
		if bytes < 0 || bytes > maxRequest {
			total += bytes
			continue
		}
		size := CachingRoundSize(bytes)
		pool := poolOf(size)
		// the best cached block of the pool not taken yet
		b := c.pools[pool].lowerBound(c.nodes, size)
		for b >= 0 && slices.Contains(taken, b) {
			b = c.pools[pool].lowerBound2(c.nodes, c.nodes[b].k1, c.nodes[b].k2+1)
		}
		// or a remainder split off before, if it fits better
		r := -1
		for i, f := range split {
			if f.pool == pool && f.size >= size && (r < 0 || f.size < split[r].size || (f.size == split[r].size && f.addr < split[r].addr)) {
				r = i
			}
		}
		var block, addr int64
		switch {
		case r >= 0 && (b < 0 || split[r].size < c.nodes[b].k1 || (split[r].size == c.nodes[b].k1 && split[r].addr < c.nodes[b].k2)):
			block, addr = split[r].size, split[r].addr
			split = append(split[:r], split[r+1:]...)
		case b >= 0:
			block, addr = c.nodes[b].k1, c.nodes[b].k2
			taken = append(taken, b)
		default:
			block, addr = CachingSegmentSize(size), next
			next += block
		}
		if rem := block - size; shouldSplit(pool, rem) {
			split = append(split, free{size: rem, addr: addr + size, pool: pool})
			block = size
		}
		total += block
	}
	return total
}

// Free returns block b to its pool's cache, merging it with free neighbours
// in its segment. Freeing a block that is not live (unknown, or already
// free) does nothing, as with Ideal.
func (c *Caching) Free(blk Block) {
	b := int32(blk)
	if b < 0 || int(b) >= len(c.meta) || c.meta[b].state != blkLive {
		return
	}
	m := &c.meta[b]
	tr := &c.pools[m.pool]
	c.alloc -= c.nodes[b].k1
	if p := m.prev; p >= 0 && c.meta[p].state == blkCached {
		// absorb the free block before b
		tr.delete(c.nodes, p)
		c.nodes[b].k1 += c.nodes[p].k1
		c.nodes[b].k2 = c.nodes[p].k2
		m.prev = c.meta[p].prev
		if m.prev >= 0 {
			c.meta[m.prev].next = b
		} else {
			c.segs[m.seg].first = b
		}
		c.recycle(p)
		c.stats.Merges++
	}
	if n := m.next; n >= 0 && c.meta[n].state == blkCached {
		tr.delete(c.nodes, n)
		c.nodes[b].k1 += c.nodes[n].k1
		m.next = c.meta[n].next
		if m.next >= 0 {
			c.meta[m.next].prev = b
		}
		c.recycle(n)
		c.stats.Merges++
	}
	m.state = blkCached
	tr.insert(c.nodes, b)
	c.stats.Frees++
	if c.grew != nil {
		// the free block b (merged) is the only one that grew: its
		// neighbours, when handed out, now have more free bytes next to
		// them (a merge removes cached blocks, it never exposes a live
		// block that had none)
		if p := m.prev; p >= 0 && c.meta[p].state == blkLive {
			c.grew(Block(p))
		}
		if n := m.next; n >= 0 && c.meta[n].state == blkLive {
			c.grew(Block(n))
		}
	}
}

// NotifyFreeGrowth implements GrowthNotifier: only Free makes the free
// bytes next to a live block grow (Alloc takes cached blocks and splits
// them, which shrinks the free space next to a neighbour; whole free
// segments that are released have no live block), so grew is called from
// Free, for at most two blocks. The subscription outlives Reset.
func (c *Caching) NotifyFreeGrowth(grew func(b Block)) { c.grew = grew }

// Addr returns the block's segment number and its offset in the segment
// (-1, -1 for a block that does not exist).
func (c *Caching) Addr(blk Block) (segment int32, offset int64) {
	b := int32(blk)
	if b < 0 || int(b) >= len(c.meta) || c.meta[b].state == blkUnused {
		return -1, -1
	}
	s := c.meta[b].seg
	return s, c.nodes[b].k2 - c.segs[s].base
}

// Size returns the block's size after rounding (0 for a block that does not
// exist).
func (c *Caching) Size(blk Block) int64 {
	b := int32(blk)
	if b < 0 || int(b) >= len(c.meta) || c.meta[b].state == blkUnused {
		return 0
	}
	return c.nodes[b].k1
}

// AdjacentFree returns the bytes of the cached free blocks immediately before
// and after the block in its segment: what freeing it would merge with.
func (c *Caching) AdjacentFree(blk Block) int64 {
	b := int32(blk)
	if b < 0 || int(b) >= len(c.meta) || c.meta[b].state == blkUnused {
		return 0
	}
	var n int64
	if p := c.meta[b].prev; p >= 0 && c.meta[p].state == blkCached {
		n += c.nodes[p].k1
	}
	if q := c.meta[b].next; q >= 0 && c.meta[q].state == blkCached {
		n += c.nodes[q].k1
	}
	return n
}

// FreeNeighbours calls visit once with every handed-out block that a
// cached free block adjoins in its segment (the blocks whose AdjacentFree
// is positive), walking the free blocks in the pools' order. The work is
// proportional to the number of free blocks, not of handed-out ones. A nil
// visit visits nothing.
func (c *Caching) FreeNeighbours(visit func(b Block)) {
	if visit == nil {
		return
	}
	c.init()
	for p := range c.pools {
		c.pools[p].each(c.nodes, func(x int32) {
			m := &c.meta[x]
			if q := m.next; q >= 0 && c.meta[q].state == blkLive {
				visit(Block(q))
			}
			// a live block with free blocks on both sides is visited as
			// the next block of the one before it
			if q := m.prev; q >= 0 && c.meta[q].state == blkLive {
				if pp := c.meta[q].prev; pp < 0 || c.meta[pp].state != blkCached {
					visit(Block(q))
				}
			}
		})
	}
}

// Fragmentation returns the external fragmentation of the cached memory:
// 1 - LargestFree / (Reserved - Allocated), in [0, 1); 0 when nothing is
// cached. It is 0 when all free bytes form one block and approaches 1 when
// they are scattered in many small holes. Reserved - Allocated itself (the
// bytes held but not in use) is Stats().FreeBytes.
func (c *Caching) Fragmentation() float64 {
	c.init()
	free := c.reserved - c.alloc
	if free <= 0 {
		return 0
	}
	return 1 - float64(c.largestFree())/float64(free)
}

// Stats returns the allocator's counters.
func (c *Caching) Stats() CachingStats {
	c.init()
	s := c.stats
	s.Blocks = len(c.meta) - len(c.recycled)
	s.Segments = len(c.segs) - len(c.freeSegs)
	s.LiveBlocks = int(s.Allocs - s.Frees)
	s.CachedBlocks = s.Blocks - s.LiveBlocks
	s.FreeBytes = c.reserved - c.alloc
	s.LargestFree = c.largestFree()
	return s
}

// EmptyCache releases every fully free cached segment (torch.cuda.empty_cache)
// and returns the number of bytes released.
func (c *Caching) EmptyCache() int64 {
	c.init()
	before := c.reserved
	c.releaseCached()
	return before - c.reserved
}

func (c *Caching) largestFree() int64 {
	var m int64
	for p := range c.pools {
		if x := c.pools[p].max(c.nodes); x >= 0 && c.nodes[x].k1 > m {
			m = c.nodes[x].k1
		}
	}
	return m
}

// newBlock returns an unused block number.
func (c *Caching) newBlock() int32 {
	if n := len(c.recycled); n > 0 {
		b := c.recycled[n-1]
		c.recycled = c.recycled[:n-1]
		return b
	}
	b := int32(len(c.nodes))
	c.nodes = append(c.nodes, tnode{prio: treapPrio(uint32(b))})
	c.meta = append(c.meta, cblockMeta{})
	return b
}

func (c *Caching) recycle(b int32) {
	c.meta[b] = cblockMeta{prev: -1, next: -1, seg: -1, state: blkUnused}
	c.recycled = append(c.recycled, b)
}

// newSegment allocates a segment of segSize bytes for pool and returns its
// single block (not in the free tree).
func (c *Caching) newSegment(pool uint8, segSize int64) int32 {
	var s int32
	if n := len(c.freeSegs); n > 0 {
		s = c.freeSegs[n-1]
		c.freeSegs = c.freeSegs[:n-1]
	} else {
		s = int32(len(c.segs))
		c.segs = append(c.segs, cseg{})
	}
	b := c.newBlock()
	c.segs[s] = cseg{base: c.nextAddr, size: segSize, first: b, pool: pool, live: true}
	c.nextAddr += segSize
	c.nodes[b].k1 = segSize
	c.nodes[b].k2 = c.segs[s].base
	c.meta[b] = cblockMeta{prev: -1, next: -1, seg: s, state: blkCached, pool: pool}
	c.reserved += segSize
	if c.reserved > c.stats.PeakReserved {
		c.stats.PeakReserved = c.reserved
	}
	c.stats.SegmentAllocs++
	return b
}

// releasable returns the bytes of segments that consist of one cached block.
func (c *Caching) releasable() int64 {
	var n int64
	for i := range c.segs {
		sg := &c.segs[i]
		if sg.live {
			if f := sg.first; c.meta[f].state == blkCached && c.meta[f].next < 0 {
				n += sg.size
			}
		}
	}
	return n
}

// releaseCached releases every segment that consists of one cached block, in
// segment-number order.
func (c *Caching) releaseCached() {
	for i := range c.segs {
		sg := &c.segs[i]
		if !sg.live {
			continue
		}
		f := sg.first
		if c.meta[f].state != blkCached || c.meta[f].next >= 0 {
			continue
		}
		c.pools[sg.pool].delete(c.nodes, f)
		c.recycle(f)
		c.reserved -= sg.size
		sg.live = false
		c.freeSegs = append(c.freeSegs, int32(i))
		c.stats.SegmentReleases++
	}
}

// tnode is a node of a treap keyed by (k1, k2); keys are unique. Nodes live
// in a caller-owned slice and are named by their index, so trees allocate
// nothing. ch[0] is the left child, ch[1] the right one (-1 for none); the
// descents index ch with a comparison result instead of branching on it,
// which keeps them free of mispredicted branches.
type tnode struct {
	k1, k2 int64
	ch     [2]int32
	prio   uint32
}

// treap is an ordered set of nodes of a []tnode (a randomized search tree
// with deterministic priorities).
type treap struct{ root int32 }

// treapPrio is a fixed pseudo-random priority for node i (a 32-bit mix).
func treapPrio(i uint32) uint32 {
	x := i*0x9E3779B9 + 0x7F4A7C15
	x ^= x >> 16
	x *= 0x85EBCA6B
	x ^= x >> 13
	x *= 0xC2B2AE35
	x ^= x >> 16
	return x
}

// b2i converts a bool to 0/1 (compiled to a flag set, not a branch).
func b2i(b bool) int {
	var i int
	if b {
		i = 1
	}
	return i
}

// geq returns 1 when (a1, a2) >= (b1, b2), else 0: the child index to follow
// when searching for (a1, a2) below a node keyed (b1, b2).
func geq(a1, a2, b1, b2 int64) int {
	return b2i(a1 > b1) | (b2i(a1 == b1) & b2i(a2 >= b2))
}

// insert adds node x (its key set, not in the tree): walk down by key to the
// first node of lower priority, then split that subtree around x's key.
func (t *treap) insert(n []tnode, x int32) {
	nx := &n[x]
	k1, k2, pr := nx.k1, nx.k2, nx.prio
	link := &t.root
	for {
		cur := *link
		if cur < 0 {
			nx.ch = [2]int32{-1, -1}
			*link = x
			return
		}
		nc := &n[cur]
		if pr > nc.prio {
			break
		}
		link = &nc.ch[geq(k1, k2, nc.k1, nc.k2)]
	}
	// split *link: keys below x go to x's left spine, the rest to its right
	var side [2]*int32
	side[0], side[1] = &nx.ch[0], &nx.ch[1]
	for cur := *link; cur >= 0; {
		nc := &n[cur]
		d := geq(nc.k1, nc.k2, k1, k2) // 0: nc < x, goes left of x
		*side[d] = cur
		side[d] = &nc.ch[1-d]
		cur = nc.ch[1-d]
	}
	*side[0], *side[1] = -1, -1
	*link = x
}

// delete removes node x, which must be in the tree, by merging its children
// in its place.
func (t *treap) delete(n []tnode, x int32) {
	k1, k2 := n[x].k1, n[x].k2
	link := &t.root
	for cur := *link; cur != x; cur = *link {
		nc := &n[cur]
		link = &nc.ch[geq(k1, k2, nc.k1, nc.k2)]
	}
	treapMergeAt(n, link, n[x].ch[0], n[x].ch[1])
}

// treapMergeAt stores at link the merge of subtrees a and b, where every key
// of a is below every key of b.
func treapMergeAt(n []tnode, link *int32, a, b int32) {
	for {
		if a < 0 {
			*link = b
			return
		}
		if b < 0 {
			*link = a
			return
		}
		if na, nb := &n[a], &n[b]; na.prio > nb.prio {
			*link = a
			link = &na.ch[1]
			a = na.ch[1]
		} else {
			*link = b
			link = &nb.ch[0]
			b = nb.ch[0]
		}
	}
}

// lowerBound returns the node with the smallest key whose k1 >= k1, or -1.
func (t *treap) lowerBound(n []tnode, k1 int64) int32 {
	best := int32(-1)
	for cur := t.root; cur >= 0; {
		nc := &n[cur]
		ge := nc.k1 >= k1
		if ge {
			best = cur
		}
		cur = nc.ch[1-b2i(ge)]
	}
	return best
}

// lowerBound2 returns the node with the smallest key (k1, k2) at or above
// the given one, or -1.
func (t *treap) lowerBound2(n []tnode, k1, k2 int64) int32 {
	best := int32(-1)
	for cur := t.root; cur >= 0; {
		nc := &n[cur]
		ge := geq(nc.k1, nc.k2, k1, k2)
		if ge == 1 {
			best = cur
		}
		cur = nc.ch[1-ge]
	}
	return best
}

// takeLowerBound removes and returns the node lowerBound(k1) would return
// (-1 when none), in one descent.
func (t *treap) takeLowerBound(n []tnode, k1 int64) int32 {
	best := int32(-1)
	var bestLink *int32
	for link := &t.root; *link >= 0; {
		cur := *link
		nc := &n[cur]
		if nc.k1 >= k1 {
			best, bestLink = cur, link
			link = &nc.ch[0]
		} else {
			link = &nc.ch[1]
		}
	}
	if best >= 0 {
		treapMergeAt(n, bestLink, n[best].ch[0], n[best].ch[1])
	}
	return best
}

// below returns the node with the largest key whose k1 < k1, or -1.
func (t *treap) below(n []tnode, k1 int64) int32 {
	best := int32(-1)
	for cur := t.root; cur >= 0; {
		nc := &n[cur]
		lt := nc.k1 < k1
		if lt {
			best = cur
		}
		cur = nc.ch[b2i(lt)]
	}
	return best
}

// max returns the node with the largest key, or -1.
// each calls f with every node of t in key order.
func (t *treap) each(n []tnode, f func(x int32)) { eachNode(n, t.root, f) }

func eachNode(n []tnode, x int32, f func(x int32)) {
	for x >= 0 {
		eachNode(n, n[x].ch[0], f)
		f(x)
		x = n[x].ch[1]
	}
}

func (t *treap) max(n []tnode) int32 {
	cur := t.root
	if cur < 0 {
		return -1
	}
	for n[cur].ch[1] >= 0 {
		cur = n[cur].ch[1]
	}
	return cur
}
