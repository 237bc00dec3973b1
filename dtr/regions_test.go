package dtr

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/remat-dev/remat/graph/dtrlog"

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
// limit at some budgets gives those budgets StatusLimit and still runs the
// others, whose cells are those of the sweep without the limit; the
// portfolio runs, and a limit cell never wins in it.
func TestRegionLimit(t *testing.T) {
	tr := loadTrace(t, "resnet32")
	ctx := context.Background()
	full, err := Sweep(ctx, tr, SweepOptions{Heuristic: HDTR, Parity: true})
	require.NoError(t, err)
	require.Len(t, full.Results, len(DefaultRatios))
	// a limit that some budgets reach and others do not (a run checks it
	// after each op, so the peak of its regions alone does not tell)
	b, err := MeasureBaseline(tr)
	require.NoError(t, err)
	replay := func(ratio float64, limit int64) error {
		cfg := ParityConfig(HDTR)
		cfg.Budget = int64(float64(b.PeakBytes) * ratio)
		cfg.RematLimit = b.ComputeNs
		cfg.regionLimit = limit
		_, err := Replay(ctx, tr, cfg, nil)
		return err
	}
	var limit int64
	var hit []bool
	for _, l := range []int64{86000, 80000, 70000} {
		hit = hit[:0]
		n := 0
		for _, ratio := range DefaultRatios {
			err := replay(ratio, l)
			hit = append(hit, errors.Is(err, ErrRegionLimit))
			if hit[len(hit)-1] {
				n++
				require.Contains(t, err.Error(), fmt.Sprintf("(limit %d)", l))
			}
		}
		if n > 0 && n < len(DefaultRatios) {
			limit = l
			break
		}
	}
	require.Positive(t, limit, "no limit tried stops some budgets and not others")
	res, err := Sweep(ctx, tr, SweepOptions{Heuristic: HDTR, Parity: true, regionLimit: limit})
	require.NoError(t, err)
	for i, rr := range res.Results {
		if hit[i] {
			require.Equal(t, StatusLimit, rr.Status, "ratio %v", rr.Ratio)
			continue
		}
		require.Equal(t, full.Results[i], rr, "ratio %v", rr.Ratio)
	}
	// the portfolio runs with some or all parity budgets limited: a limit
	// cell never wins, and since no parity run wins on resnet32 the
	// portfolio is the same as without the limit
	want, err := SweepBest(ctx, tr, nil)
	require.NoError(t, err)
	for _, l := range []int64{limit, 1000} {
		best, err := sweepBest(ctx, tr, nil, bestKnobs{regionLimit: l})
		require.NoError(t, err)
		require.Equal(t, want, best, "limit %d", l)
	}
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

// TestRegionPeak logs, for the artifact's two logs (and the logs named in
// REMAT_REGION_LOGS, comma-separated paths), the most entries the kept
// regions of a parity h_DTR or MSPS run hold at any budget of the sweep and
// the most steps of their bookkeeping (docs/dtr.md quotes them), and checks
// that the artifact's are far below the limits.
func TestRegionPeak(t *testing.T) {
	type log struct {
		name string
		tr   *dtrlog.Trace
	}
	var logs []log
	for _, name := range []string{"resnet32", "unet"} {
		logs = append(logs, log{name, loadTrace(t, name)})
	}
	extra := os.Getenv("REMAT_REGION_LOGS")
	for _, p := range strings.Split(extra, ",") {
		if p == "" {
			continue
		}
		f, err := os.Open(p)
		require.NoError(t, err)
		tr, err := dtrlog.Compile(f)
		f.Close()
		require.NoError(t, err, p)
		logs = append(logs, log{p, tr})
	}
	for k, l := range logs {
		base, err := MeasureBaseline(l.tr)
		require.NoError(t, err)
		for _, h := range []Heuristic{HDTR, MSPS} {
			var peak, work int64
			for _, ratio := range DefaultRatios {
				cfg := ParityConfig(h)
				cfg.Budget = int64(float64(base.PeakBytes) * ratio)
				cfg.RematLimit = base.ComputeNs
				rt, err := New(cfg, nil)
				require.NoError(t, err)
				_ = rt.replay(context.Background(), l.tr) // out of memory or thrashing at low budgets
				peak, work = max(peak, rt.incPeak), max(work, rt.incWork)
			}
			t.Logf("%s, %s: at most %d region entries and %d steps per budget (%d storages)", l.name, h, peak, work, len(l.tr.Tensors))
			require.Positive(t, peak)
			if k < 2 {
				require.Less(t, peak, int64(incMaxLive/16))
				require.Less(t, work, int64(incMaxWork/16))
			}
		}
	}
}
