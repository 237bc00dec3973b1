package sublinear

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph/models"
)

// BenchmarkEvaluateScale evaluates the threshold-preset genomes of the
// residual CIFAR ResNet at about 10k and 100k ops: time per op should stay
// flat (issue: near-linear planners).
func BenchmarkEvaluateScale(b *testing.B) {
	for _, depth := range []int{950, 9500} {
		g, err := models.Build("resnet-cifar", models.Options{Depth: depth})
		require.NoError(b, err)
		s, err := newMgeSearch(context.Background(), g, DefaultSearchOptions())
		require.NoError(b, err)
		ev := newMgeEvaluator(s.p)
		base := ev.evaluate(s.p.thresholdSplits(1<<62, ev.mark, nil)).peak - s.p.resident0
		var gs [][]int32
		for i := int64(1); i <= 10; i++ {
			gs = append(gs, s.p.thresholdSplits(base*i/11, ev.mark, nil))
		}
		b.Run(fmt.Sprintf("ops=%d", len(g.Ops)), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				ev.evaluate(gs[i%len(gs)])
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(g.Ops)), "ns/op-of-graph")
		})
	}
}
