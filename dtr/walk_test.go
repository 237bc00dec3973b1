package dtr

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// walkCheckHost checks, on every computation the runtime asks for, that the
// walk nodes agree with the tensor graph they summarize (walkNodesAgree).
type walkCheckHost struct {
	t        *testing.T
	rt       *Runtime
	checks   int
	overflow bool
}

func (h *walkCheckHost) Compute(OpID) error {
	h.checks++
	if h.checks%7 == 0 {
		h.overflow = walkNodesAgree(h.t, h.rt) || h.overflow
	}
	return nil
}
func (h *walkCheckHost) Free(TensorID)          {}
func (h *walkCheckHost) SwapOut(TensorID) error { return nil }
func (h *walkCheckHost) SwapIn(TensorID) error  { return nil }

// storageEvicted is the walk nodes' evicted flag from the storage's own
// fields: gone from the device, to be recomputed.
func storageEvicted(r *Runtime, s int32) bool {
	st := &r.storages[s]
	return !st.material && !st.swapped
}

// walkNodesAgree checks every storage's walk node against the tensor graph:
// its cost and evicted flag, its neighbour sets (the storages the
// consumers of its tensors produce, the storages its producers read), and
// the region sums of every storage against a walk of the tensor graph. It
// reports whether some list overflowed into the edges arena.
func walkNodesAgree(t *testing.T, r *Runtime) bool {
	t.Helper()
	overflow := false
	list := func(x int32, d int) []int32 {
		var out []int32
		for ns, c := r.neighbours(x, d); ; ns, c = r.chunk(c) {
			out = append(out, ns...)
			if c < 0 {
				break
			}
			overflow = true
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	graph := func(x int32, reverse bool) []int32 {
		var out []int32
		for _, tt := range r.storages[x].tensors {
			next := r.tensors[tt].children
			if reverse {
				next = r.ops[r.tensors[tt].op].args
			}
			for _, u := range next {
				if us := r.tensors[u].st; us != x {
					out = append(out, us)
				}
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	refRegion := func(s int32, reverse bool) int64 {
		seen := map[int32]bool{s: true}
		stack := []int32{s}
		var sum int64
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, y := range graph(x, reverse) {
				if !seen[y] && storageEvicted(r, y) {
					seen[y] = true
					sum += r.storages[y].compute
					stack = append(stack, y)
				}
			}
		}
		return sum
	}
	require.Len(t, r.walk, len(r.storages))
	for x := range r.storages {
		s := int32(x)
		w := &r.walk[s]
		require.Equal(t, r.storages[s].compute, w.compute, "storage %d cost", s)
		require.Equal(t, storageEvicted(r, s), w.evicted, "storage %d evicted", s)
		require.Equal(t, r.storages[s].banished, w.banished, "storage %d banished", s)
		require.Equal(t, graph(s, false), list(s, kidsList), "storage %d kids", s)
		require.Equal(t, graph(s, true), list(s, parsList), "storage %d pars", s)
		if !w.evicted {
			require.Equal(t, refRegion(s, false), r.region(s, false, math.MaxInt64), "storage %d forward region", s)
			require.Equal(t, refRegion(s, true), r.region(s, true, math.MaxInt64), "storage %d reverse region", s)
		}
	}
	return overflow
}

// TestWalkNodes replays random programs (views, multi-output ops, pins,
// releases, evictions and rematerializations; with swaps and banishing
// too) and checks the walk nodes against the tensor graph along the way.
func TestWalkNodes(t *testing.T) {
	overflow := false
	for seed := uint64(1); seed <= 8; seed++ {
		for _, mode := range []string{"drop", "swap", "banish"} {
			h := &walkCheckHost{t: t}
			rt, err := New(smallConfig(HDTR, 150_000+int64(seed%5)*40_000, mode), h)
			require.NoError(t, err)
			h.rt = rt
			_ = randomProgram(rt, rand.New(rand.NewPCG(seed, 3)), 300)
			h.overflow = walkNodesAgree(t, rt) || h.overflow
			require.Positive(t, h.checks)
			require.Positive(t, rt.Stats().Evictions+rt.Stats().SwapOuts, "seed %d %s", seed, mode)
			overflow = overflow || h.overflow
		}
	}
	require.True(t, overflow, "no neighbour list overflowed its node: the edges arena is untested")
}

// TestWalkNodeSize: a walk node fills one cache line (see walkNode).
func TestWalkNodeSize(t *testing.T) {
	require.EqualValues(t, 64, unsafe.Sizeof(walkNode{}))
}

// TestStorageSize pins the runtime's per-storage record (one per log
// tensor in every replay; the fields are ordered to keep padding small),
// so that a new field or more padding changes it on purpose.
func TestStorageSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes pinned for 64-bit platforms")
	}
	require.EqualValues(t, 224, unsafe.Sizeof(storage{}))
}
