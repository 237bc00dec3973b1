package alloc

import "fmt"

// Ideal is the allocator model without rounding or fragmentation: allocated
// and reserved are both the sum of live bytes. It fails a request only when
// the live bytes would exceed its capacity. Alloc and Free are O(1) and do
// not allocate once the block table has grown to the peak number of live
// blocks. The zero value is an empty unlimited allocator, like NewIdeal(0).
type Ideal struct {
	capacity  int64
	allocated int64
	sizes     []int64 // per block; -1 when free
	free      []Block // free block numbers, reused LIFO
}

// NewIdeal returns an ideal allocator with the given capacity in bytes
// (capacity <= 0 means unlimited).
func NewIdeal(capacity int64) *Ideal {
	if capacity <= 0 {
		capacity = Unlimited
	}
	return &Ideal{capacity: capacity}
}

// Unlimited is the capacity of a device without a limit.
const Unlimited = int64(1) << 62

// Name returns "ideal".
func (a *Ideal) Name() string { return "ideal" }

// Capacity returns the allocator's capacity in bytes.
func (a *Ideal) Capacity() int64 {
	if a.capacity <= 0 {
		return Unlimited // the zero value
	}
	return a.capacity
}

// Alloc records a live block of bytes.
func (a *Ideal) Alloc(bytes int64) (Block, error) {
	if bytes < 0 {
		return -1, fmt.Errorf("ideal allocator: request of %d bytes, expected >= 0", bytes)
	}
	if bytes > a.capacity-a.allocated {
		if a.capacity <= 0 { // the zero value: unlimited
			a.capacity = Unlimited
			return a.Alloc(bytes)
		}
		return -1, fmt.Errorf("ideal allocator: %d bytes requested, %d of %d in use: %w", bytes, a.allocated, a.capacity, ErrOutOfMemory)
	}
	a.allocated += bytes
	if n := len(a.free); n > 0 {
		b := a.free[n-1]
		a.free = a.free[:n-1]
		a.sizes[b] = bytes
		return b, nil
	}
	a.sizes = append(a.sizes, bytes)
	return Block(len(a.sizes) - 1), nil
}

// Free releases block b. Freeing an unknown or already free block does
// nothing.
func (a *Ideal) Free(b Block) {
	if b < 0 || int(b) >= len(a.sizes) || a.sizes[b] < 0 {
		return
	}
	a.allocated -= a.sizes[b]
	a.sizes[b] = -1
	a.free = append(a.free, b)
}

// Allocated returns the live bytes.
func (a *Ideal) Allocated() int64 { return a.allocated }

// Reserved equals Allocated: the ideal model caches nothing.
func (a *Ideal) Reserved() int64 { return a.allocated }

// Reset frees every block (keeping the tables' capacity).
func (a *Ideal) Reset() {
	a.allocated = 0
	a.sizes = a.sizes[:0]
	a.free = a.free[:0]
}
