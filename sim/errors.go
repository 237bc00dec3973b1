package sim

import "github.com/remat-dev/remat/sim/alloc"

// ErrOutOfMemory is wrapped by every error that reports memory running out:
// an allocator that cannot satisfy a request within its capacity, a plan
// step past the device capacity. It is alloc.ErrOutOfMemory, so errors.Is
// matches either name.
var ErrOutOfMemory = alloc.ErrOutOfMemory
