package report_test

import (
	"context"
	"fmt"
	"os"

	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/report"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/sublinear"
)

// Compare runs strategies side by side on one model and device.
func ExampleCompare() {
	g, err := models.Build("chain", models.Options{Depth: 8})
	if err != nil {
		panic(err)
	}
	env, err := report.NewEnv(g, sim.Profile{}, "ideal", 6<<20, nil)
	if err != nil {
		panic(err)
	}
	sts, _ := report.LookupStrategies([]string{"none", "chen-sqrt", "sublinear-budget"})
	rep, err := report.Compare(context.Background(), env, sts, nil)
	if err != nil {
		panic(err)
	}
	_ = rep.RowsTable().Write(os.Stdout, report.FormatCSV)
	// Output:
	// strategy,status,peak allocated,peak reserved,change,step time,overhead,recomputes,evictions,swaps,fits device,fits budget
	// none,infeasible,10485760,10485760,0.000000,17000000,1.000000,0,0,0,true,false
	// chen-sqrt,ok,6291456,6291456,-0.400000,21000000,1.235294,4,4,0,true,true
	// sublinear-budget,ok,6291456,6291456,-0.400000,21000000,1.235294,4,4,0,true,true
}

// The README's library example: the baseline and a budget-mode plan for
// resnet50 on an A100.
func Example_library() {
	ctx := context.Background()
	g, _ := models.Build("resnet50", models.Options{Batch: 32})
	dev, _ := sim.Device("a100-40gb")
	base, _ := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{Device: dev})
	plan, _, err := sublinear.SublinearBudget(ctx, g, 2<<30, sublinear.DefaultSearchOptions())
	if err != nil {
		panic(err)
	}
	res, _ := sim.Simulate(g, plan, sim.Options{Device: dev})
	fmt.Println(base.PeakAllocated > 2<<30, res.PeakAllocated <= 2<<30, res.TotalNs > base.TotalNs)
	// Output: true true true
}
