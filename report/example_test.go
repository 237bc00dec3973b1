package report_test

import (
	"context"
	"os"

	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/report"
	"github.com/remat-dev/remat/strategy"
)

// Compare runs strategies side by side on one model and device.
func ExampleCompare() {
	g, err := models.Build("chain", models.Options{Depth: 8})
	if err != nil {
		panic(err)
	}
	o, err := strategy.OptionsFrom(nil) // the built-in settings
	if err != nil {
		panic(err)
	}
	o.Allocator, o.Budget = strategy.AllocIdeal, 6<<20
	sts, _ := strategy.Resolve([]string{"none", "chen-sqrt", "sublinear-budget"})
	rep, err := report.Compare(context.Background(), g, o, sts, nil)
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
