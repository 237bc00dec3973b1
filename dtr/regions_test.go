package dtr

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestI32Map checks the kept regions' hash table against a Go map over a
// random mix of puts, gets and deletes on a small key range (long probe
// runs, wrap-around and backward shifts over deleted slots), growing
// from its smallest size.
func TestI32Map(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, keys := range []int32{5, 40, 1000} {
		var h i32map
		h.init(0)
		want := map[int32]int32{}
		for i := 0; i < 20000; i++ {
			k := rng.Int32N(keys)
			switch rng.IntN(3) {
			case 0:
				v := rng.Int32()
				h.put(k, v)
				want[k] = v
			case 1:
				h.del(k)
				delete(want, k)
			}
			v, ok := h.get(k)
			w, wok := want[k]
			require.Equal(t, wok, ok, "key %d after step %d", k, i)
			require.Equal(t, w, v, "key %d after step %d", k, i)
			require.Equal(t, len(want), h.n)
		}
		for k := range keys {
			v, ok := h.get(k)
			w, wok := want[k]
			require.Equal(t, []any{wok, w}, []any{ok, v}, "key %d", k)
		}
	}
}

// TestRegionLimit: a parity sweep of h_DTR whose kept regions outgrow the
// limit fails with ErrRegionLimit (naming the count), and the portfolio
// leaves such sweeps out instead of failing.
func TestRegionLimit(t *testing.T) {
	tr := loadTrace(t, "resnet32")
	_, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: HDTR, Parity: true, regionLimit: 1000})
	require.ErrorIs(t, err, ErrRegionLimit)
	require.Contains(t, err.Error(), "(limit 1000)")
	res, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: HDTR, Parity: true})
	require.NoError(t, err)
	require.Len(t, res.Results, len(DefaultRatios))
	best, err := sweepBest(context.Background(), tr, nil, 1000)
	require.NoError(t, err)
	// no parity row wins on resnet32, so leaving h_DTR's and MSPS's out
	// changes nothing
	want, err := SweepBest(context.Background(), tr, nil)
	require.NoError(t, err)
	require.Equal(t, want, best)
}

// TestI32Set checks the interior's hash set against a Go map.
func TestI32Set(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	var h i32set
	h.init(0)
	want := map[int32]bool{}
	for i := 0; i < 5000; i++ {
		k := rng.Int32N(3000)
		require.Equal(t, !want[k], h.add(k), "key %d", k)
		want[k] = true
		require.Equal(t, len(want), h.n)
	}
}

// TestRegionPeak logs, for the artifact's two logs, the most entries the
// kept regions of a parity h_DTR run hold at any budget of the sweep
// (docs/dtr.md quotes them), and checks that they are far below the limit.
func TestRegionPeak(t *testing.T) {
	for _, name := range []string{"resnet32", "unet"} {
		tr := loadTrace(t, name)
		base, err := MeasureBaseline(tr)
		require.NoError(t, err)
		var peak int64
		for _, ratio := range DefaultRatios {
			cfg := ParityConfig(HDTR)
			cfg.Budget = int64(float64(base.PeakBytes) * ratio)
			cfg.RematLimit = base.ComputeNs
			rt, err := New(cfg, nil)
			require.NoError(t, err)
			_ = rt.replay(context.Background(), tr) // out of memory or thrashing at low budgets
			peak = max(peak, rt.incPeak)
		}
		t.Logf("%s: at most %d region entries", name, peak)
		require.Positive(t, peak)
		require.Less(t, peak, int64(incMaxLive/16))
	}
}
