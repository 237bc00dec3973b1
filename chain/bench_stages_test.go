package chain

import (
	"strconv"
	"testing"

	"github.com/remat-dev/remat/graph/models"
)

// BenchmarkStagesOf cuts the zoo's resnet-cifar at about 10k and 100k ops
// into stages (the first step of chen-sqrt, chen-greedy and optimal-chain).
// It reads the graph's dense index, so that the 100k-op graph's passes do
// not miss the cache on every Op and Tensor struct; the ratio of the two
// sizes is the figure to watch (about 10 for linear work).
//
//	go test ./chain -run XXX -bench StagesOf
func BenchmarkStagesOf(b *testing.B) {
	for _, depth := range []int{950, 9500} {
		g, err := models.Build("resnet-cifar", models.Options{Depth: depth})
		if err != nil {
			b.Fatal(err)
		}
		g.Dense() // built once per graph, as the first planner call does
		b.Run("ops="+strconv.Itoa(len(g.Ops)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := StagesOf(g, StagesOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
