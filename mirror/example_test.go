package mirror_test

import (
	"context"
	"fmt"

	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/mirror"
	"github.com/remat-dev/remat/sim"
)

// Mirror resnet18's cheap forward ops the way MXNet 1.x does with
// MXNET_BACKWARD_DO_MIRROR=1, and with the cost-aware pass, and compare the
// simulated peaks with no mirroring.
func Example() {
	g, err := models.Build("resnet18", models.Options{Batch: 8})
	if err != nil {
		panic(err)
	}
	base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
	if err != nil {
		panic(err)
	}
	classic, err := mirror.Classic(g, mirror.Predicate{DoMirror: true, Variant: mirror.MXNet17})
	if err != nil {
		panic(err)
	}
	cost, err := mirror.CostAware(context.Background(), g, mirror.CostOptions{Variant: mirror.MXNet17})
	if err != nil {
		panic(err)
	}
	for _, r := range []struct {
		name string
		plan *sim.Plan
	}{{"none", sim.DefaultPlan(g)}, {"classic", classic.Plan}, {"cost-aware", cost.Plan}} {
		res, err := sim.Simulate(g, r.plan, sim.Options{})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-10s peak %4d MiB (%+.1f%%)\n", r.name, res.PeakAllocated>>20,
			100*(float64(res.PeakAllocated)/float64(base.PeakAllocated)-1))
	}
	fmt.Println("mirrored ops:", classic.Mirrored, "classic,", cost.Mirrored, "cost-aware")
	// Output:
	// none       peak  245 MiB (+0.0%)
	// classic    peak  215 MiB (-12.1%)
	// cost-aware peak  215 MiB (-12.1%)
	// mirrored ops: 48 classic, 13 cost-aware
}
