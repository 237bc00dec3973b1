package strategy_test

import (
	"context"
	"fmt"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/strategy"
)

// Plan a chain with every strategy of the table within 60% of its
// no-recompute peak. The options come from the built-in settings here; a
// program that wants what sim would use reads the environment's snapshot
// (config.Global) and passes it to OptionsFor with its device.
func Example() {
	g, err := models.Build("chain", models.Options{Depth: 24})
	if err != nil {
		panic(err)
	}
	o, err := strategy.OptionsFrom(config.Defaults())
	if err != nil {
		panic(err)
	}
	o.Allocator = strategy.AllocIdeal
	base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
	if err != nil {
		panic(err)
	}
	o.Budget = base.PeakAllocated * 6 / 10
	for _, s := range strategy.All() {
		r, err := s.Plan(context.Background(), g, o)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-16s %-10s %5.1f%% of the peak, %.2fx the time\n", s.Name, r.Status,
			100*float64(r.PeakAllocated())/float64(base.PeakAllocated), float64(r.TimeNs())/float64(base.TotalNs))
	}
	// Output:
	// none             infeasible 100.0% of the peak, 1.00x the time
	// mirror           infeasible 100.0% of the peak, 1.51x the time
	// mirror-cost      infeasible 100.0% of the peak, 1.00x the time
	// sublinear        ok          38.5% of the peak, 1.33x the time
	// sublinear-ga     ok          34.6% of the peak, 1.35x the time
	// sublinear-budget ok          57.7% of the peak, 1.22x the time
	// chen-sqrt        ok          38.5% of the peak, 1.33x the time
	// chen-greedy      ok          38.5% of the peak, 1.37x the time
	// optimal-chain    ok          57.7% of the peak, 1.22x the time
	// dtr              ok          57.7% of the peak, 1.22x the time
}
