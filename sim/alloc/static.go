package alloc

import (
	"fmt"
	"math"
)

// StaticOptions configure the Static planner. The zero value means no
// sharing, no in-place reuse and unlimited capacity; DefaultStaticOptions
// gives MXNet's defaults.
type StaticOptions struct {
	// MatchRange is MXNET_EXEC_MATCH_RANGE: a free storage block of size s
	// may serve a request of size n when n/MatchRange <= s <= n*MatchRange
	// (integer division, as MXNet). 0 disables sharing: every request gets
	// its own storage block. Negative values are invalid (Validate) and
	// NewStatic treats them as 0.
	MatchRange int64
	// InPlace is MXNET_EXEC_ENABLE_INPLACE: AllocInPlace may hand an op's
	// output the storage of an input that dies at that op.
	InPlace bool
	// Capacity bounds the arena (Reserved) in bytes; <= 0 means unlimited.
	Capacity int64
}

// DefaultStaticOptions returns MXNet's defaults: MatchRange 10, InPlace true,
// unlimited capacity.
func DefaultStaticOptions() StaticOptions {
	return StaticOptions{MatchRange: 10, InPlace: true}
}

// Validate reports an error naming the field when the options are invalid.
func (o StaticOptions) Validate() error {
	if o.MatchRange < 0 {
		return fmt.Errorf("static allocator: MatchRange %d: expected >= 0 (0 disables sharing)", o.MatchRange)
	}
	return nil
}

// StorageSlot is one storage block of a Static arena.
type StorageSlot struct {
	// Offset is the block's first byte in the arena (blocks are laid out in
	// creation order, back to back).
	Offset int64
	// Size is the block's size: the largest request it served.
	Size int64
}

// StaticStats are the counters of a Static planner since its last Reset.
type StaticStats struct {
	// Storages is the number of storage blocks in the arena.
	Storages int
	// Allocs and Frees count successful Alloc and Free calls; InPlace counts
	// successful AllocInPlace calls.
	Allocs, Frees, InPlace int64
	// Shared counts requests served by an existing free storage block (of
	// which Grown needed the block to grow, by GrownBytes in total).
	Shared, Grown int64
	// GrownBytes is the total growth of reused storage blocks.
	GrownBytes int64
	// OOMs counts Alloc calls that failed with ErrOutOfMemory.
	OOMs int64
	// PeakAllocated is the highest Allocated seen.
	PeakAllocated int64
}

// Static models MXNet's graph-executor storage planner (nnvm PlanMemory's
// GraphAllocator): tensors are assigned to storage blocks of one arena as the
// graph is walked in execution order. A request of n bytes takes the free
// storage block with the smallest size >= n if that size is <= n*MatchRange,
// else the largest free block smaller than n if its size is >= n/MatchRange
// (which then grows to n), else a new storage block. Storage blocks never
// shrink or go away, so Reserved (the arena) is the sum of their sizes;
// Allocated is the bytes of live tensors as requested.
//
// A Block of a Static is its storage block number; Layout maps it to an
// arena offset. A Static is not safe for concurrent use. The zero value is
// an empty unlimited planner with zero StaticOptions (no matching, no
// in-place reuse), like NewStatic(StaticOptions{}).
type Static struct {
	opts     StaticOptions
	capacity int64
	sizes    []int64 // storage block sizes
	live     []int64 // live bytes in each storage block, -1 when free
	nodes    []tnode // free-set key (size, release sequence) per block
	free     treap
	seq      int64
	alloc    int64
	reserved int64
	stats    StaticStats
}

// NewStatic returns an empty planner with opts (see StaticOptions).
func NewStatic(opts StaticOptions) *Static {
	if opts.MatchRange < 0 {
		opts.MatchRange = 0
	}
	s := &Static{opts: opts, capacity: opts.Capacity}
	if s.capacity <= 0 {
		s.capacity = math.MaxInt64
	}
	s.Reset()
	return s
}

// init makes a zero Static an empty unlimited one (NewStatic sets a
// positive capacity, so this runs at most once).
func (s *Static) init() {
	if s.capacity <= 0 {
		s.opts.MatchRange = max(s.opts.MatchRange, 0)
		s.capacity = math.MaxInt64
		s.Reset()
	}
}

// Name returns "static".
func (s *Static) Name() string { return "static" }

// Options returns the options in effect.
func (s *Static) Options() StaticOptions { return s.opts }

// Allocated returns the bytes of live tensors as requested.
func (s *Static) Allocated() int64 { return s.alloc }

// Reserved returns the arena size: the sum of the storage blocks' sizes.
func (s *Static) Reserved() int64 { return s.reserved }

// Reset forgets every storage block and clears the statistics.
func (s *Static) Reset() {
	s.sizes = s.sizes[:0]
	s.live = s.live[:0]
	s.nodes = s.nodes[:0]
	s.free = treap{root: -1}
	s.seq = 0
	s.alloc = 0
	s.reserved = 0
	s.stats = StaticStats{}
}

// Alloc assigns a storage block to a tensor of bytes (bytes >= 0) following
// MXNet's matching rule (see Static). An error wrapping ErrOutOfMemory names
// the request, Allocated, Reserved and the capacity when a new or grown block
// would make the arena exceed the capacity; the planner is then unchanged.
func (s *Static) Alloc(bytes int64) (Block, error) {
	s.init()
	if bytes < 0 {
		return -1, fmt.Errorf("static allocator: alloc bytes %d: expected >= 0", bytes)
	}
	if m := s.opts.MatchRange; m > 0 && s.free.root >= 0 {
		hi := int64(math.MaxInt64)
		if bytes <= math.MaxInt64/m {
			hi = bytes * m
		}
		if b := s.free.lowerBound(s.nodes, bytes); b >= 0 && s.sizes[b] <= hi {
			s.free.delete(s.nodes, b)
			s.stats.Shared++
			return s.take(b, bytes), nil
		}
		if b := s.free.below(s.nodes, bytes); b >= 0 && s.sizes[b] >= bytes/m {
			grow := bytes - s.sizes[b]
			if grow > s.capacity-s.reserved {
				return -1, s.oom(bytes, grow)
			}
			s.free.delete(s.nodes, b)
			s.sizes[b] = bytes
			s.reserved += grow
			s.stats.Shared++
			s.stats.Grown++
			s.stats.GrownBytes += grow
			return s.take(b, bytes), nil
		}
	}
	if bytes > s.capacity-s.reserved {
		return -1, s.oom(bytes, bytes)
	}
	b := int32(len(s.sizes))
	s.sizes = append(s.sizes, bytes)
	s.live = append(s.live, -1)
	s.nodes = append(s.nodes, tnode{prio: treapPrio(uint32(b))})
	s.reserved += bytes
	return s.take(b, bytes), nil
}

func (s *Static) oom(bytes, grow int64) error {
	s.stats.OOMs++
	return fmt.Errorf("static allocator: request of %d bytes would grow the arena by %d: allocated %d, reserved %d, capacity %d: %w",
		bytes, grow, s.alloc, s.reserved, s.capacity, ErrOutOfMemory)
}

func (s *Static) take(b int32, bytes int64) Block {
	s.live[b] = bytes
	s.alloc += bytes
	if s.alloc > s.stats.PeakAllocated {
		s.stats.PeakAllocated = s.alloc
	}
	s.stats.Allocs++
	return Block(b)
}

// Free releases the tensor in storage block b; the block becomes available
// to later requests. Freeing a block that holds no tensor (unknown, or
// already free) does nothing, as with Ideal.
func (s *Static) Free(blk Block) {
	b := int32(blk)
	if b < 0 || int(b) >= len(s.live) || s.live[b] < 0 {
		return
	}
	s.alloc -= s.live[b]
	s.live[b] = -1
	s.seq++
	// MXNet keeps free blocks in a multimap keyed by size: among equal sizes
	// the larger-side search takes the earliest released, the smaller-side
	// search the latest released; keying by (size, release order) does both.
	s.nodes[b].k1 = s.sizes[b]
	s.nodes[b].k2 = s.seq
	s.free.insert(s.nodes, b)
	s.stats.Frees++
}

// AllocInPlace gives a new tensor of bytes the storage block of from, whose
// tensor dies now, when in-place reuse is enabled, from is live and bytes
// fits in the block's size; it returns from itself (the block number is the
// storage). Otherwise nothing changes and it returns false.
//
// MXNet additionally requires the two tensors to have equal element counts
// and dtype sizes; the model only needs the output to fit.
func (s *Static) AllocInPlace(from Block, bytes int64) (Block, bool) {
	b := int32(from)
	if !s.opts.InPlace || bytes < 0 || b < 0 || int(b) >= len(s.live) || s.live[b] < 0 || bytes > s.sizes[b] {
		return -1, false
	}
	s.alloc += bytes - s.live[b]
	s.live[b] = bytes
	if s.alloc > s.stats.PeakAllocated {
		s.stats.PeakAllocated = s.alloc
	}
	s.stats.InPlace++
	return from, true
}

// Size returns the size of storage block b (0 when it does not exist).
func (s *Static) Size(b Block) int64 {
	if b < 0 || int(b) >= len(s.sizes) {
		return 0
	}
	return s.sizes[b]
}

// Layout returns the storage blocks in block-number order with their offsets
// in the arena: block i starts where block i-1 ends. Call it after a run to
// get the final plan; the last offset plus size equals Reserved.
func (s *Static) Layout() []StorageSlot {
	out := make([]StorageSlot, len(s.sizes))
	var off int64
	for i, sz := range s.sizes {
		out[i] = StorageSlot{Offset: off, Size: sz}
		off += sz
	}
	return out
}

// Stats returns the planner's counters.
func (s *Static) Stats() StaticStats {
	st := s.stats
	st.Storages = len(s.sizes)
	return st
}
