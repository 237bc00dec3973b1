// Command library is the README's library example: build resnet50 at batch
// 32, plan it three ways within 2 GiB of an A100 and print each plan's
// peak memory and step time.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/remat-dev/remat"
	"github.com/remat-dev/remat/graph/models"
)

func main() {
	g, err := models.Build("resnet50", models.Options{Batch: 32})
	if err != nil {
		log.Fatal(err)
	}
	o, err := remat.Options("a100-40gb") // settings from the environment, as sim reads them
	if err != nil {
		log.Fatal(err)
	}
	o.Budget = 2 << 30
	results, err := remat.Run(context.Background(), g, o, "none", "sublinear-budget", "dtr")
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		fmt.Printf("%-16s %-10s peak %4d MiB  step %.2f ms\n",
			r.Strategy, r.Status, r.PeakAllocated()>>20, float64(r.TimeNs())/1e6)
	}
}
