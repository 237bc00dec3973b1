package strategy

import (
	"context"
	"strconv"
	"testing"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// BenchmarkScale plans every strategy on the zoo's residual resnet-cifar
// at about 10k and 100k ops (depths 950 and 9500), at half the baseline
// peak on an unlimited device with the ideal allocator; the ratio of the two
// times shows how each strategy grows (issue: at most 15x for 10x ops).
//
//	go test ./strategy -run XXX -bench Scale -benchtime 1x
func BenchmarkScale(b *testing.B) {
	for _, depth := range []int{950, 9500} {
		g, err := models.Build("resnet-cifar", models.Options{Depth: depth})
		if err != nil {
			b.Fatal(err)
		}
		o, err := OptionsFrom(config.Defaults())
		if err != nil {
			b.Fatal(err)
		}
		o.Allocator = AllocIdeal
		base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
		if err != nil {
			b.Fatal(err)
		}
		o.Budget = base.PeakAllocated / 2
		for _, s := range All() {
			b.Run(s.Name+"/ops="+strconv.Itoa(len(g.Ops)), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if _, err := s.Plan(context.Background(), g, o); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
