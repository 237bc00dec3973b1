package alloc

import "errors"

// ErrOutOfMemory is wrapped by every error that reports memory running out
// (an allocator that cannot satisfy a request within its capacity, a plan
// step past the device capacity).
var ErrOutOfMemory = errors.New("out of memory")

// Block identifies one allocation made by an Allocator. Blocks are dense
// small integers chosen by the allocator; a freed block's number may be
// reused by a later allocation.
type Block int32

// Allocator models a device memory allocator. The Machine calls Alloc and
// Free as tensors and workspaces come and go, and reads Allocated and
// Reserved after each call to track peaks.
type Allocator interface {
	// Name is the model's short name (ideal, caching, static).
	Name() string
	// Alloc obtains a block of at least bytes (bytes >= 0). It returns an
	// error wrapping ErrOutOfMemory when the model cannot satisfy the request
	// within its capacity; the allocator's state is then unchanged.
	Alloc(bytes int64) (Block, error)
	// Free returns a block obtained from Alloc. Freeing a block that is not
	// live (unknown, or already free) does nothing.
	Free(b Block)
	// Allocated is the number of bytes in live blocks, as the allocator
	// accounts them (after its rounding).
	Allocated() int64
	// Reserved is the number of bytes the allocator holds from the device
	// (live blocks plus cached free memory); Reserved >= Allocated.
	Reserved() int64
	// Reset returns the allocator to its initial empty state.
	Reset()
}

// Granular is implemented by allocators that hold every request as a
// multiple of a granule, and at least one, and count those bytes in
// Allocated (the caching model: 512 B). A runtime that keeps its own byte
// count under a budget counts storages so to match Allocated.
type Granular interface {
	Allocator
	// Granule is the rounding in bytes (> 0).
	Granule() int64
}

// Holder is implemented by allocators whose blocks can be larger than the
// rounded request (the caching model keeps a free remainder too small to
// split off with its block) and that can tell, without allocating, how
// large the block for a request would be now. A runtime that keeps its
// own byte count under a budget makes room for that many bytes.
type Holder interface {
	Allocator
	// Hold returns the size of the block Alloc(bytes) would return if
	// called now, in the allocator's current state (bytes >= 0).
	Hold(bytes int64) int64
	// HoldSeq returns the summed sizes of the blocks Alloc would return
	// for each of sizes, called in turn from the current state.
	HoldSeq(sizes []int64) int64
}

// AddressAllocator is implemented by allocators that place blocks at
// addresses (the caching model). Fragmentation-aware eviction heuristics use
// it to see which blocks are physically adjacent.
type AddressAllocator interface {
	Allocator
	// Addr returns the block's segment and offset within it.
	Addr(b Block) (segment int32, offset int64)
	// Size returns the block's size as allocated (after rounding).
	Size(b Block) int64
	// AdjacentFree returns the free bytes immediately before and after the
	// block in its segment (what freeing the block would merge with).
	AdjacentFree(b Block) int64
}

// NeighbourAllocator is an AddressAllocator that can list the blocks with
// free memory next to them without looking at every block.
type NeighbourAllocator interface {
	AddressAllocator
	// FreeNeighbours calls visit once with every handed-out block whose
	// AdjacentFree is positive.
	FreeNeighbours(visit func(b Block))
}

// GrowthNotifier is a NeighbourAllocator that can report, as it happens,
// every handed-out block whose AdjacentFree grows, so that a caller keeping
// figures derived from the free bytes next to blocks (an evictor's keys)
// can bring up to date just the blocks concerned instead of listing them
// all (FreeNeighbours) each time it needs them.
type GrowthNotifier interface {
	NeighbourAllocator
	// NotifyFreeGrowth makes the allocator call grew with every handed-out
	// block whose AdjacentFree has just grown, once per block and change,
	// after the change (so AdjacentFree already gives the new figure). It
	// replaces any earlier function; nil stops the calls. The function
	// must not call back into the allocator's Alloc or Free.
	NotifyFreeGrowth(grew func(b Block))
}

// InPlaceAllocator is implemented by allocators that can hand an op's output
// the storage of an input that dies at that op (MXNET_EXEC_ENABLE_INPLACE).
type InPlaceAllocator interface {
	Allocator
	// AllocInPlace transfers block from (whose tensor dies now) to a new
	// allocation of bytes if the model allows it, returning the new block and
	// true; otherwise it changes nothing and returns false.
	AllocInPlace(from Block, bytes int64) (Block, bool)
}

// Reserver is implemented by allocators that can make room ahead for a
// number of blocks (the simulator passes a graph's storage count).
type Reserver interface {
	Reserve(blocks int)
}
