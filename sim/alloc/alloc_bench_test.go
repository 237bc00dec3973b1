package alloc

import (
	"math/rand/v2"
	"testing"
)

// allocTrace is a pre-generated mixed-size sequence: at each step one tensor
// of a window of live tensors dies (a random slot) and a new one is
// allocated in its place, as in a training step where activations of various
// layers overlap.
type allocTrace struct {
	sizes []int64 // request of step i
	slots []int32 // window slot replaced at step i
}

// makeAllocTrace draws n requests from randomTensorBytes, or, when palette >
// 0, from a palette of that many sizes drawn once (a network's repeated layer
// shapes).
func makeAllocTrace(n, window, palette int) allocTrace {
	rng := rand.New(rand.NewPCG(2024, 1))
	tr := allocTrace{sizes: make([]int64, n), slots: make([]int32, n)}
	pal := make([]int64, palette)
	for i := range pal {
		pal[i] = randomTensorBytes(rng)
	}
	for i := range n {
		if palette > 0 {
			tr.sizes[i] = pal[rng.IntN(palette)]
		} else {
			tr.sizes[i] = randomTensorBytes(rng)
		}
		tr.slots[i] = int32(rng.IntN(window))
	}
	return tr
}

// benchAllocator measures one Free + one Alloc per op over the trace, after
// a warm-up pass that brings the allocator to steady state.
func benchAllocator(b *testing.B, a Allocator, window, palette int) {
	const n = 1 << 16
	tr := makeAllocTrace(n, window, palette)
	live := make([]Block, window)
	for i := range live {
		blk, err := a.Alloc(tr.sizes[i])
		if err != nil {
			b.Fatal(err)
		}
		live[i] = blk
	}
	step := func(i int) {
		j := i & (n - 1)
		s := tr.slots[j]
		a.Free(live[s])
		blk, err := a.Alloc(tr.sizes[j])
		if err != nil {
			b.Fatal(err)
		}
		live[s] = blk
	}
	for i := range n { // warm-up: grow internal slices to their steady size
		step(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		step(i)
	}
}

// BenchmarkCachingAllocFree: one Free + one Alloc of a mixed-size sequence
// with 256 live tensors (about 2.6 GiB live on average).
func BenchmarkCachingAllocFree(b *testing.B) {
	benchAllocator(b, NewCaching(0), 256, 0)
}

// BenchmarkCachingAllocFreeWide is the same with 4096 live tensors.
func BenchmarkCachingAllocFreeWide(b *testing.B) {
	benchAllocator(b, NewCaching(0), 4096, 0)
}

// BenchmarkStaticAllocFree: the MXNet-style planner on the same sequence.
func BenchmarkStaticAllocFree(b *testing.B) {
	benchAllocator(b, NewStatic(DefaultStaticOptions()), 256, 0)
}

// BenchmarkCachingAllocFreeLayered: 256 live tensors whose sizes come from 32
// distinct layer shapes, closer to a real network than all-distinct sizes.
func BenchmarkCachingAllocFreeLayered(b *testing.B) {
	benchAllocator(b, NewCaching(0), 256, 32)
}
