package mirror

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph/models"
)

// BenchmarkCostAware runs the cost-aware pass on the residual CIFAR ResNet
// at about 10k and 100k ops: time per op should grow no faster than log n
// (it was a simulator replay per group, quadratic).
func BenchmarkCostAware(b *testing.B) {
	for _, depth := range []int{950, 9500} {
		g, err := models.Build("resnet-cifar", models.Options{Depth: depth})
		require.NoError(b, err)
		b.Run(fmt.Sprintf("ops=%d", len(g.Ops)), func(b *testing.B) {
			b.ReportAllocs()
			var res *Result
			for i := 0; i < b.N; i++ {
				res, err = CostAware(context.Background(), g, CostOptions{Variant: MXNet17})
				require.NoError(b, err)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(g.Ops)), "ns/op-of-graph")
			b.ReportMetric(float64(res.Mirrored), "mirrored")
		})
	}
}
