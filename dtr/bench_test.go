package dtr

import (
	"context"
	"testing"
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
