package zoolog

import (
	"fmt"

	"github.com/remat-dev/remat/graph/dtrlog"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// Trace builds zoo model name with o and returns its schedule as a
// compiled DTR log named name.
func Trace(name string, o models.Options) (*dtrlog.Trace, error) {
	g, err := models.Build(name, o)
	if err != nil {
		return nil, fmt.Errorf("zoolog: %w", err)
	}
	dev, err := sim.Device("a100-40gb")
	if err != nil {
		return nil, fmt.Errorf("zoolog: %w", err)
	}
	m, err := sim.NewMachine(g, sim.Options{Device: dev, Capacity: -1})
	if err != nil {
		return nil, fmt.Errorf("zoolog: %s: %w", name, err)
	}
	ins, err := dtrlog.FromGraph(g, m.OpTime)
	if err != nil {
		return nil, fmt.Errorf("zoolog: %s: %w", name, err)
	}
	tr, err := dtrlog.CompileInstrs(ins)
	if err != nil {
		return nil, fmt.Errorf("zoolog: %s: %w", name, err)
	}
	tr.Name = name
	return tr, nil
}
