package dtr

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/remat-dev/remat/graph/dtrlog"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/internal/zoolog"
)

func benchSweep(b *testing.B, h Heuristic, parity bool) {
	trs := []string{"resnet32", "unet"}
	var evals int64
	for i := 0; i < b.N; i++ {
		evals = 0
		for _, m := range trs {
			tr := loadTrace(b, m)
			res, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: h, Parity: parity})
			if err != nil {
				b.Fatal(err)
			}
			for _, rr := range res.Results {
				evals += rr.HeuristicEvals
			}
		}
	}
	b.ReportMetric(float64(evals), "evals/op")
}

// Acceptance: the whole 10-ratio sweep of both logs, eq-class < 1 s, exact
// h_DTR < 5 s (parse included).
func BenchmarkSweepEqClass(b *testing.B)   { benchSweep(b, HDTREqClass, true) }
func BenchmarkSweepDTRFull(b *testing.B)   { benchSweep(b, HDTR, true) }
func BenchmarkSweepLookahead(b *testing.B) { benchSweep(b, Lookahead, false) }
func BenchmarkSweepEqClassSqrt(b *testing.B) {
	base := DefaultConfig()
	base.EvicteeMinSize = 0
	base.SqrtSampling = true
	var evals int64
	for i := 0; i < b.N; i++ {
		evals = 0
		for _, m := range []string{"resnet32", "unet"} {
			res, err := Sweep(context.Background(), loadTrace(b, m), SweepOptions{Heuristic: HDTREqClass, Base: &base})
			if err != nil {
				b.Fatal(err)
			}
			for _, rr := range res.Results {
				evals += rr.HeuristicEvals
			}
		}
	}
	b.ReportMetric(float64(evals), "evals/op")
}

// benchSweepDefault runs the default-mode sweep (DefaultConfig with
// EvicteeMinSize 0) of both logs with the candidate index or with the
// linear scan (Config.Scan).
func benchSweepDefault(b *testing.B, h Heuristic, scan bool) {
	base := DefaultConfig()
	base.EvicteeMinSize = 0
	base.Scan = scan
	var evals, evictions int64
	trs := []*dtrlog.Trace{loadTrace(b, "resnet32"), loadTrace(b, "unet")}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		evals, evictions = 0, 0
		for _, tr := range trs {
			res, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: h, Base: &base})
			if err != nil {
				b.Fatal(err)
			}
			for _, rr := range res.Results {
				evals += rr.HeuristicEvals
				evictions += rr.Evictions
			}
		}
	}
	b.ReportMetric(float64(evals), "evals/op")
	b.ReportMetric(float64(evictions), "evictions/op")
}

// Default mode: candidate index vs linear scan, same choices.
func BenchmarkSweepDefaultEqClassIndex(b *testing.B) { benchSweepDefault(b, HDTREqClass, false) }
func BenchmarkSweepDefaultEqClassScan(b *testing.B)  { benchSweepDefault(b, HDTREqClass, true) }
func BenchmarkSweepDefaultDTRIndex(b *testing.B)     { benchSweepDefault(b, HDTR, false) }
func BenchmarkSweepDefaultDTRScan(b *testing.B)      { benchSweepDefault(b, HDTR, true) }
func BenchmarkSweepDefaultLocalIndex(b *testing.B)   { benchSweepDefault(b, HDTRLocal, false) }
func BenchmarkSweepDefaultLocalScan(b *testing.B)    { benchSweepDefault(b, HDTRLocal, true) }
func BenchmarkSweepDefaultMSPSIndex(b *testing.B)    { benchSweepDefault(b, MSPS, false) }
func BenchmarkSweepDefaultMSPSScan(b *testing.B)     { benchSweepDefault(b, MSPS, true) }

// lstmProgram drives rt with an unrolled LSTM-like training step of n time
// steps: per step an input x_t, gates g_t (from x_t, h_{t-1} and the
// weights) and state h_t, all kept for the backward pass, so the forward pass
// ends with about 3n live eviction candidates; the backward pass walks the
// steps in reverse, reading g_t, h_{t-1}, x_t and releasing them. Sizes and
// costs are drawn from rng. It returns the peak bytes the program would need
// without eviction (for choosing budgets) and the first error.
func lstmProgram(rt *Runtime, n int, rng *rand.Rand) (int64, error) {
	w, err := rt.Constant(1 << 20)
	if err != nil {
		return 0, err
	}
	peak := int64(1 << 20)
	_, h0, err := rt.Compute(nil, 1000, []Output{{Bytes: 4096, AliasOf: -1}})
	if err != nil {
		return 0, err
	}
	xs := make([]TensorID, n+1)
	gs := make([]TensorID, n+1)
	hs := make([]TensorID, n+1)
	hs[0] = h0[0]
	peak += 4096
	for t := 1; t <= n; t++ {
		sx := 1024 + int64(rng.IntN(4096))
		sh := 2048 + int64(rng.IntN(4096))
		_, x, err := rt.Compute([]TensorID{w}, 500+int64(rng.IntN(2000)), []Output{{Bytes: sx, AliasOf: -1}})
		if err != nil {
			return peak, err
		}
		_, g, err := rt.Compute([]TensorID{x[0], hs[t-1], w}, 5000+int64(rng.IntN(20000)), []Output{{Bytes: 4 * sh, AliasOf: -1}})
		if err != nil {
			return peak, err
		}
		_, h, err := rt.Compute([]TensorID{g[0], hs[t-1]}, 1000+int64(rng.IntN(4000)), []Output{{Bytes: sh, AliasOf: -1}})
		if err != nil {
			return peak, err
		}
		xs[t], gs[t], hs[t] = x[0], g[0], h[0]
		peak += sx + 5*sh
	}
	_, dh, err := rt.Compute([]TensorID{hs[n]}, 1000, []Output{{Bytes: 4096, AliasOf: -1}})
	if err != nil {
		return peak, err
	}
	cur := dh[0]
	for t := n; t >= 1; t-- {
		_, d, err := rt.Compute([]TensorID{cur, gs[t], hs[t-1], xs[t], w}, 10000+int64(rng.IntN(30000)), []Output{{Bytes: 4096, AliasOf: -1}})
		if err != nil {
			return peak, err
		}
		for _, r := range []TensorID{cur, gs[t], xs[t], hs[t]} {
			if err := rt.Release(r); err != nil {
				return peak, err
			}
		}
		cur = d[0]
	}
	return peak, nil
}

// benchLSTM runs lstmProgram with n steps at the given fraction of its
// no-eviction peak, with the index or the scan.
func benchLSTM(b *testing.B, h Heuristic, n int, frac float64, scan bool) {
	if scan && os.Getenv("DTR_BENCH_SCAN") == "" {
		b.Skip("the linear scan takes about 16 s per run here; set DTR_BENCH_SCAN=1 to run it")
	}
	probe, err := New(DefaultConfig(), nil)
	if err != nil {
		b.Fatal(err)
	}
	peak, err := lstmProgram(probe, n, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		b.Fatal(err)
	}
	var st Stats
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cfg := DefaultConfig()
		cfg.EvicteeMinSize = 0
		cfg.Heuristic = h
		cfg.Scan = scan
		cfg.Budget = int64(float64(peak) * frac)
		rt, err := New(cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := lstmProgram(rt, n, rand.New(rand.NewPCG(1, 2))); err != nil {
			b.Fatal(err)
		}
		st = rt.Stats()
	}
	b.ReportMetric(float64(st.HeuristicEvals), "evals/op")
	b.ReportMetric(float64(st.Evictions), "evictions/op")
	b.ReportMetric(float64(st.HeuristicEvals)/float64(max(st.Evictions, 1)), "evals/eviction")
}

// Long synthetic trace: 40,000 LSTM steps, about 120,000 live candidates at
// the end of the forward pass, budget 99% of the peak (about 2,000
// evictions, each scanning ~118,000 candidates without the index). The scan
// variants run only with DTR_BENCH_SCAN=1.
func BenchmarkLSTM40kEqClassIndex(b *testing.B) { benchLSTM(b, HDTREqClass, 40000, 0.99, false) }
func BenchmarkLSTM40kEqClassScan(b *testing.B)  { benchLSTM(b, HDTREqClass, 40000, 0.99, true) }
func BenchmarkLSTM40kLocalIndex(b *testing.B)   { benchLSTM(b, HDTRLocal, 40000, 0.99, false) }
func BenchmarkLSTM40kLocalScan(b *testing.B)    { benchLSTM(b, HDTRLocal, 40000, 0.99, true) }

// benchParitySweepLog is `sim sweep --dtr-log LOG --strategies dtr
// --heuristic eq-class --parity` without the CLI: parse and compile the
// log, measure the baseline, replay the 10 ratios.
func benchParitySweepLog(b *testing.B, name string) { benchParitySweepLogH(b, name, HDTREqClass) }

func benchParitySweepLogH(b *testing.B, name string, h Heuristic) {
	src, err := os.ReadFile(filepath.Join(logsDir(b), name+".log"))
	if err != nil {
		b.Skip(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tr, err := dtrlog.Compile(bytes.NewReader(src))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: h, Parity: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// Issue 17: at least 100x faster than the reference simulator simrd, which
// needs 0.1 to 2.5 s per budget on these logs
// (/work/shared/data/dtr-logs/README.md), i.e. 1 to 25 s per 10-ratio sweep.
func BenchmarkParitySweepResnet32(b *testing.B) { benchParitySweepLog(b, "resnet32") }
func BenchmarkParitySweepUnet(b *testing.B)     { benchParitySweepLog(b, "unet") }

// BenchmarkParitySweepGPT sweeps the zoo GPT's log in parity mode with
// eq-class, on one worker (the sweep's CPU time): the log of `sim convert
// --model gpt --depth 14 --batch 2 --seq 128` (5,091 lines). Most of its
// evicted storages are in one eq-class, which every recomputation lowers,
// so re-keying the candidates registered with a class whose value fell
// below its floor is much of the sweep (eqFlushSlackShift).
func BenchmarkParitySweepGPT(b *testing.B) {
	tr, err := zoolog.Trace("gpt", models.Options{Depth: 14, Batch: 2, Seq: 128})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: HDTREqClass, Parity: true, Workers: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// Full h_DTR in parity mode keeps its regions as simrd does (regions.go):
// the reference's bookkeeping, a walk per rematerialized storage and per
// storage on its frontiers.
func BenchmarkParitySweepDTRResnet32(b *testing.B) { benchParitySweepLogH(b, "resnet32", HDTR) }
func BenchmarkParitySweepDTRUnet(b *testing.B)     { benchParitySweepLogH(b, "unet", HDTR) }
