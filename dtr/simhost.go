package dtr

import (
	"context"
	"fmt"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// SimHost adapts a sim.Machine to Host: the runtime's decisions become
// Machine steps, so the Machine's allocator, clock and checks judge them.
type SimHost struct {
	M *sim.Machine
	d *graphDriver
}

// Compute implements Host.
func (h *SimHost) Compute(op OpID) error {
	g := h.d.rec.opMap[op]
	if g == graph.NoOp {
		return nil // a tensor from outside the step: resident on the Machine
	}
	return h.M.Compute(g)
}

// Free implements Host.
func (h *SimHost) Free(t TensorID) {
	if g := h.d.rec.tensor(int32(t)); g != graph.NoTensor && h.M.Resident(g) {
		_ = h.M.Free(g) // the runtime never frees pinned or dead tensors
	}
}

// SwapOut implements Host.
func (h *SimHost) SwapOut(t TensorID) error { return h.M.SwapOut(h.d.rec.tensor(int32(t))) }

// SwapIn implements Host.
func (h *SimHost) SwapIn(t TensorID) error { return h.M.SwapIn(h.d.rec.tensor(int32(t))) }

// RunOnMachine runs g's default schedule under DTR on m (op times from
// m.OpTime) and returns the Machine's result and the runtime's counters.
func RunOnMachine(ctx context.Context, m *sim.Machine, cfg Config) (*sim.Result, Stats, error) {
	h := &SimHost{M: m}
	rt, err := New(cfg, h)
	if err != nil {
		return nil, Stats{}, err
	}
	g := m.Graph()
	// drive fills the recorder's maps as it goes; the host reads them.
	h.d = newDriver(g, rt)
	_, err = drive(ctx, h.d, m.OpTime)
	if err != nil {
		return m.Result(), rt.Stats(), fmt.Errorf("dtr on machine: %w", err)
	}
	return m.Result(), rt.Stats(), nil
}
