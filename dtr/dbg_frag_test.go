package dtr

import (
	"context"
	"fmt"
	"testing"

	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

func TestDbgFrag(t *testing.T) {
	g, err := models.Build("vgg19", models.Options{Batch: 300})
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := sim.Device("v100-16gb")
	so := sim.Options{Device: dev}
	capa, _ := sim.CapacityOf(so)
	c := sim.NewCaching(capa)
	so.Allocator = c
	so.Capacity = -1
	m, err := sim.NewMachine(g, so)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Budget = capa
	res, st, err := RunOnMachine(context.Background(), m, cfg)
	fmt.Println(err)
	fmt.Printf("%+v\n%+v\n", st, c.Stats())
	if res.OOM != nil {
		fmt.Printf("req %d alloc %d res %d cap %d\n", res.OOM.Requested, res.OOM.Allocated, res.OOM.Reserved, res.OOM.Capacity)
		for _, l := range res.OOM.Largest {
			fmt.Println(l.Name, l.Kind, l.Bytes)
		}
	}
}
