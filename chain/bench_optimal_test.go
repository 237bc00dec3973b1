package chain

import (
	"context"
	"testing"
)

// BenchmarkRotor100x500 runs the Rotor DP on a heterogeneous 100-stage chain
// with 500 memory slots (the O(M L^3) table).
func BenchmarkRotor100x500(b *testing.B) {
	stages := make([]RotorStage, 100)
	for k := range stages {
		a := int64(2 + k%5)
		stages[k] = RotorStage{Fwd: 10 + int64(k%7), Bwd: 20 + int64(k%3), In: a, XBar: 2 * a, XBarBwd: 2 * a, FwdNone: a, FwdAll: 2 * a, BwdPeak: a, GradOut: a}
	}
	b.ReportAllocs()
	for b.Loop() {
		sol, err := RotorSolve(context.Background(), stages, 500)
		if err != nil || !sol.Feasible {
			b.Fatal(err, sol.Feasible)
		}
	}
}

// BenchmarkRevolveSchedule builds the optimal schedule of a 1000-step chain
// with 10 snapshots.
func BenchmarkRevolveSchedule(b *testing.B) {
	for b.Loop() {
		if _, err := RevolveSchedule(1000, 10); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOptimalChainResNet runs the whole strategy (stages, DP, plan,
// simulation) on a 30-block residual network.
func BenchmarkOptimalChainResNet(b *testing.B) {
	g := optResNetGraph(b, 30, 1<<20)
	for b.Loop() {
		if _, _, err := OptimalChain(context.Background(), g, 40<<20, OptimalOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOptimalChain10k runs the whole strategy on a homogeneous chain of
// 10,000 stages at a quarter of its baseline peak: stage discovery, grouping
// into OptimalMaxStages(500) groups, the DP and the simulated search over
// its memory levels.
func BenchmarkOptimalChain10k(b *testing.B) {
	g := optUniformChain(b, 10000, 1<<10)
	for b.Loop() {
		if _, _, err := OptimalChain(context.Background(), g, 10000*(1<<10)/4, OptimalOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
