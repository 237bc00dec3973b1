package dtr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// bufHost holds real float64 buffers; op i computes its output from its
// inputs with a deterministic function.
type bufHost struct {
	rt      *Runtime
	inputs  [][]TensorID // per op
	outs    [][]TensorID
	bufs    map[TensorID][]float64
	live    int64
	peak    int64
	reruns  int
	freed   int
	compute func(op OpID, ins [][]float64) []float64
}

func (h *bufHost) Compute(op OpID) error {
	ins := make([][]float64, len(h.inputs[op]))
	for i, t := range h.inputs[op] {
		b, ok := h.bufs[h.rt.Root(t)]
		if !ok {
			return fmt.Errorf("op %d: input %d not resident", op, t)
		}
		ins[i] = b
	}
	out := h.outs[op][0]
	if _, ok := h.bufs[out]; ok {
		return fmt.Errorf("op %d: output already resident", op)
	}
	h.bufs[out] = h.compute(op, ins)
	h.live += int64(len(h.bufs[out]) * 8)
	if h.live > h.peak {
		h.peak = h.live
	}
	return nil
}

func (h *bufHost) Free(t TensorID) {
	h.live -= int64(len(h.bufs[t]) * 8)
	delete(h.bufs, t)
	h.freed++
}
func (h *bufHost) SwapOut(TensorID) error { return errors.New("no swap") }
func (h *bufHost) SwapIn(TensorID) error  { return errors.New("no swap") }

// TestHostRecomputesExactValues runs a 40-layer chain forward and a
// backward-like reverse sweep under a budget of 8 buffers and checks every
// value read equals the value computed without a budget.
func TestHostRecomputesExactValues(t *testing.T) {
	const n, width = 40, 64
	fn := func(op OpID, ins [][]float64) []float64 {
		out := make([]float64, width)
		for i := range out {
			v := float64(op) * 0.5
			for _, in := range ins {
				v += in[i]*1.0001 + float64(i)
			}
			out[i] = v
		}
		return out
	}
	run := func(budget int64) ([][]float64, *bufHost, Stats) {
		h := &bufHost{bufs: map[TensorID][]float64{}, compute: fn}
		cfg := DefaultConfig()
		cfg.EvicteeMinSize = 0
		cfg.Budget = budget
		rt, err := New(cfg, h)
		require.NoError(t, err)
		h.rt = rt
		add := func(ins ...TensorID) TensorID {
			h.inputs = append(h.inputs, ins)
			h.outs = append(h.outs, []TensorID{TensorID(rt.NumTensors())})
			_, out, err := rt.Compute(ins, 10, []Output{{Bytes: width * 8, AliasOf: -1}})
			require.NoError(t, err)
			return out[0]
		}
		x := add()
		require.NoError(t, rt.Pin(x))
		acts := []TensorID{x}
		for i := 0; i < n; i++ {
			acts = append(acts, add(acts[len(acts)-1]))
		}
		var got [][]float64
		g := acts[n]
		for i := n - 1; i >= 0; i-- {
			g2 := add(g, acts[i])
			require.NoError(t, rt.Release(g))
			if i+1 < n {
				require.NoError(t, rt.Release(acts[i+1]))
			}
			g = g2
			require.True(t, rt.Resident(g))
			got = append(got, append([]float64(nil), h.bufs[rt.Root(g)]...))
		}
		return got, h, rt.Stats()
	}
	want, _, base := run(0)
	require.Zero(t, base.Remats)
	got, h, st := run(10 * width * 8)
	require.Greater(t, st.Remats, int64(0), "the budget forces recomputation")
	require.LessOrEqual(t, st.PeakMemory, int64(10*width*8))
	require.LessOrEqual(t, h.peak, int64(10*width*8)+1)
	require.Equal(t, want, got, "recomputed values equal the originals")
	t.Logf("remats %d, evictions %d, clock %d", st.Remats, st.Evictions, st.Clock)
}

func ExampleRuntime() {
	cfg := DefaultConfig()
	cfg.EvicteeMinSize = 0
	cfg.Budget = 4 << 20 // bytes
	rt, _ := New(cfg, nil)
	w, _ := rt.Constant(1 << 20) // pinned
	acts := []TensorID{w}
	for i := 0; i < 6; i++ {
		_, out, err := rt.Compute([]TensorID{acts[len(acts)-1]}, 100, []Output{{Bytes: 1 << 20, AliasOf: -1}})
		if err != nil {
			fmt.Println(err)
			return
		}
		acts = append(acts, out[0])
	}
	// Reading the first activation again rematerializes it.
	if err := rt.Pin(acts[1]); err != nil {
		fmt.Println(err)
		return
	}
	st := rt.Stats()
	fmt.Println(rt.Resident(acts[1]), st.Evictions, st.Remats, st.PeakMemory <= 4<<20)
	// Output: true 4 1 true
}
