package dtr

import (
	"context"
	"errors"
	"fmt"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/sim/alloc"
)

// SimHost adapts a sim.Machine to Host: the runtime's decisions become
// Machine steps, so the Machine's allocator, clock and checks judge them.
// It is an AdjacencyHost: the Machine reports the free bytes next to a
// storage's block (non-zero with an addressing allocator such as
// alloc.NewCaching). Allocation failures of the Machine (sim.ErrOutOfMemory)
// are reported wrapped in ErrHostOutOfMemory, so the runtime evicts more and
// retries.
//
// A SimHost maps the runtime's ops and tensors to the graph's while
// RunOnMachine drives the graph: one built otherwise (the zero value, or
// with only M set, as for Replay of a log) answers ErrUnboundHost from
// Compute, SwapOut and SwapIn, frees nothing and reports no adjacent free
// bytes.
type SimHost struct {
	M *sim.Machine
	d *graphDriver
	// rev maps the Machine's graph tensors to runtime tensors (-1: none),
	// for the first revN entries of the recorder's tenMap
	rev  []TensorID
	revN int
}

// ErrUnboundHost is returned by a SimHost not created by RunOnMachine (it
// cannot map runtime ops and tensors to its Machine's graph).
var ErrUnboundHost = errors.New("dtr: SimHost is not bound to a graph run (expected the host RunOnMachine creates)")

// bound reports whether h can map runtime IDs to its Machine's graph.
func (h *SimHost) bound() bool { return h != nil && h.M != nil && h.d != nil && h.d.rec != nil }

// tensorOf maps runtime tensor t to the Machine's graph tensor.
func (h *SimHost) tensorOf(what string, t TensorID) (graph.TensorID, error) {
	if !h.bound() {
		return graph.NoTensor, ErrUnboundHost
	}
	if t < 0 || int(t) >= len(h.d.rec.tenMap) {
		return graph.NoTensor, fmt.Errorf("dtr: SimHost %s tensor %d: expected a runtime tensor < %d", what, t, len(h.d.rec.tenMap))
	}
	return h.d.rec.tenMap[t], nil
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
	if !h.bound() {
		return ErrUnboundHost
	}
	if op < 0 || int(op) >= len(h.d.rec.opMap) {
		return fmt.Errorf("dtr: SimHost compute op %d: expected a runtime op < %d", op, len(h.d.rec.opMap))
	}
	g := h.d.rec.opMap[op]
	if g == graph.NoOp {
		return nil // a tensor from outside the step: resident on the Machine
	}
	return hostErr(h.M.Compute(g))
}

// Free implements Host.
func (h *SimHost) Free(t TensorID) {
	if g, err := h.tensorOf("free", t); err == nil && g != graph.NoTensor && h.M.Resident(g) {
		_ = h.M.Free(g) // the runtime never frees pinned or dead tensors
	}
}

// SwapOut implements Host.
func (h *SimHost) SwapOut(t TensorID) error {
	g, err := h.tensorOf("swap out", t)
	if err != nil {
		return err
	}
	return h.M.SwapOut(g)
}

// SwapIn implements Host.
func (h *SimHost) SwapIn(t TensorID) error {
	g, err := h.tensorOf("swap in", t)
	if err != nil {
		return err
	}
	return hostErr(h.M.SwapIn(g))
}

// AdjacentFree implements AdjacencyHost.
func (h *SimHost) AdjacentFree(t TensorID) int64 {
	g, err := h.tensorOf("adjacent free", t)
	if err != nil || g == graph.NoTensor {
		return 0
	}
	return h.M.AdjacentFree(g)
}

var _ blockHost = (*SimHost)(nil)

// HoldFor implements blockHost: the summed sizes of the blocks the
// Machine's allocator would hand out for sizes, allocated in turn from now
// (alloc.Holder: the caching model keeps a remainder too small to split
// off with its block); the sum of sizes when it does not say.
func (h *SimHost) HoldFor(sizes []int64) int64 {
	if h != nil && h.M != nil {
		if a, ok := h.M.Allocator().(alloc.Holder); ok {
			return a.HoldSeq(sizes)
		}
	}
	var sum int64
	for _, b := range sizes {
		sum += b
	}
	return sum
}

// Held implements blockHost: the size of the block holding runtime
// storage t on the Machine (sim.Machine.BlockBytes), 0 when it is not
// resident, the allocator does not report block sizes or h is not bound to
// a graph run.
func (h *SimHost) Held(t TensorID) int64 {
	g, err := h.tensorOf("held", t)
	if err != nil || g == graph.NoTensor {
		return 0
	}
	return max(h.M.BlockBytes(g), 0)
}

// FreeNeighbours implements neighbourHost: it calls visit with the runtime
// tensor of every resident storage with free memory next to its block (see
// sim.Machine.FreeNeighbours), and reports false, visiting nothing, when
// the Machine cannot list them or h is not bound to a graph run. A nil
// visit visits nothing.
func (h *SimHost) FreeNeighbours(visit func(t TensorID)) bool {
	if !h.bound() {
		return false
	}
	if visit == nil {
		return h.M.FreeNeighbours(nil)
	}
	h.syncRev()
	return h.M.FreeNeighbours(func(g graph.TensorID) {
		if t := h.rev[g]; t >= 0 {
			visit(t)
		}
	})
}

// syncRev brings rev up to date with the recorder's tensor map (which only
// grows while a run goes on).
func (h *SimHost) syncRev() {
	tm := h.d.rec.tenMap
	if h.rev == nil {
		h.rev = make([]TensorID, len(h.M.Graph().Tensors))
		for i := range h.rev {
			h.rev[i] = -1
		}
	}
	for ; h.revN < len(tm); h.revN++ {
		if g := tm[h.revN]; g >= 0 && int(g) < len(h.rev) {
			h.rev[g] = TensorID(h.revN)
		}
	}
}

// WatchAdjacentFree implements growthHost: it makes the Machine call grew
// with the runtime tensor of every resident storage whose free memory next
// to its block has just grown (see sim.Machine.WatchAdjacentFree), and
// reports whether the Machine can (false for a SimHost without a Machine).
// Until the host is bound to a graph run nothing maps to a runtime tensor
// and nothing is called (AdjacentFree reports 0 then). A nil grew stops the
// calls.
func (h *SimHost) WatchAdjacentFree(grew func(t TensorID)) bool {
	if h == nil || h.M == nil {
		return false
	}
	if grew == nil {
		return h.M.WatchAdjacentFree(nil)
	}
	return h.M.WatchAdjacentFree(func(g graph.TensorID) {
		if !h.bound() {
			return
		}
		h.syncRev()
		if int(g) < len(h.rev) {
			if t := h.rev[g]; t >= 0 {
				grew(t)
			}
		}
	})
}

// RunOnMachine runs g's default schedule under DTR on m (op times from
// m.OpTime, workspaces from m.OpWorkspace: the runtime makes room for an
// op's workspace with its outputs) and returns the Machine's result and the
// runtime's counters. The op sequence is known, so the Lookahead heuristic
// gets an Oracle built from it. When the Machine's allocator fails although
// the runtime's accounting fits (fragmentation), the runtime evicts more
// and retries (see ErrHostOutOfMemory).
func RunOnMachine(ctx context.Context, m *sim.Machine, cfg Config) (*sim.Result, Stats, error) {
	res, _, st, err := runOnMachine(ctx, m, cfg, false, nil)
	return res, st, err
}

// PlanOnMachine is RunOnMachine that also returns what the runtime did as
// a sim.Plan: every compute (first or again), free (evictions and eager
// frees) and swap, in order, including the evictions made for the
// allocator's failures.
func PlanOnMachine(ctx context.Context, m *sim.Machine, cfg Config) (*sim.Plan, *sim.Result, Stats, error) {
	res, p, st, err := runOnMachine(ctx, m, cfg, true, nil)
	return p, res, st, err
}

// runOnMachine is RunOnMachine, and PlanOnMachine when record is set;
// tune, when set, sees the runtime before the run (benchmarks set its
// internals with it and read its counters after).
func runOnMachine(ctx context.Context, m *sim.Machine, cfg Config, record bool, tune func(*Runtime)) (*sim.Result, *sim.Plan, Stats, error) {
	if m == nil {
		return nil, nil, Stats{}, errors.New("dtr on machine: nil *sim.Machine (expected one from sim.NewMachine)")
	}
	h := &SimHost{M: m}
	rt, err := New(cfg, h)
	if err != nil {
		return nil, nil, Stats{}, err
	}
	if tune != nil {
		tune(rt)
	}
	g := m.Graph()
	// drive fills the recorder's maps as it goes; the host reads them.
	h.d = newDriver(g, rt)
	h.d.rec.noSteps = !record
	_, err = drive(ctx, h.d, m.OpTime, m.OpWorkspace)
	// the run is over: the Machine stops reporting to its runtime
	h.WatchAdjacentFree(nil)
	if err != nil {
		return m.Result(), nil, rt.Stats(), fmt.Errorf("dtr on machine: %w", err)
	}
	var p *sim.Plan
	if record {
		p = &sim.Plan{Strategy: "dtr/" + cfg.Heuristic.String(), Steps: h.d.rec.steps}
	}
	return m.Result(), p, rt.Stats(), nil
}
