package dtr

import (
	"context"
	"errors"
	"fmt"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// SimHost adapts a sim.Machine to Host: the runtime's decisions become
// Machine steps, so the Machine's allocator, clock and checks judge them.
// It is an AdjacencyHost: the Machine reports the free bytes next to a
// storage's block (non-zero with an addressing allocator such as
// sim.NewCaching). Allocation failures of the Machine (sim.ErrOutOfMemory)
// are reported wrapped in ErrHostOutOfMemory, so the runtime evicts more and
// retries.
type SimHost struct {
	M *sim.Machine
	d *graphDriver
}

var _ AdjacencyHost = (*SimHost)(nil)

func hostErr(err error) error {
	if err != nil && errors.Is(err, sim.ErrOutOfMemory) {
		return fmt.Errorf("%w: %w", ErrHostOutOfMemory, err)
	}
	return err
}

// Compute implements Host.
func (h *SimHost) Compute(op OpID) error {
	g := h.d.rec.opMap[op]
	if g == graph.NoOp {
		return nil // a tensor from outside the step: resident on the Machine
	}
	return hostErr(h.M.Compute(g))
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
func (h *SimHost) SwapIn(t TensorID) error { return hostErr(h.M.SwapIn(h.d.rec.tensor(int32(t)))) }

// AdjacentFree implements AdjacencyHost.
func (h *SimHost) AdjacentFree(t TensorID) int64 {
	g := h.d.rec.tensor(int32(t))
	if g == graph.NoTensor {
		return 0
	}
	return h.M.AdjacentFree(g)
}

// RunOnMachine runs g's default schedule under DTR on m (op times from
// m.OpTime) and returns the Machine's result and the runtime's counters.
// The op sequence is known, so the Lookahead heuristic gets an Oracle built
// from it. When the Machine's allocator fails although the runtime's
// accounting fits (fragmentation), the runtime evicts more and retries
// (see ErrHostOutOfMemory).
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
