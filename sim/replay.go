package sim

import (
	"errors"
	"fmt"

	"github.com/remat-dev/remat/graph"
)

// ErrInvalidPlan is wrapped by every StepError that is not an out-of-memory
// error: the plan (or the caller driving the Machine) asked for something
// impossible.
var ErrInvalidPlan = errors.New("invalid plan")

// ErrorKind classifies a StepError.
type ErrorKind uint8

// Kinds of step errors.
const (
	// KindInvalidStep: an unknown step kind or an op/tensor ID out of range.
	KindInvalidStep ErrorKind = iota + 1
	// KindInputNotComputed: an op reads a tensor that was never computed.
	KindInputNotComputed
	// KindUseAfterFree: an op reads a tensor that was freed.
	KindUseAfterFree
	// KindInputSwappedOut: an op reads a tensor that is swapped out.
	KindInputSwappedOut
	// KindFreePinned: a free of a pinned tensor (inputs, parameters,
	// optimizer state, constants, anything pinned with Pin).
	KindFreePinned
	// KindFreeDead: a free of a tensor that is not live (never computed or
	// already freed).
	KindFreeDead
	// KindSwapOutNotResident: a swap-out of a tensor that is not resident.
	KindSwapOutNotResident
	// KindSwapInNotSwapped: a swap-in of a tensor that is not swapped out.
	KindSwapInNotSwapped
	// KindSwapPinned: a swap-out of a pinned tensor.
	KindSwapPinned
	// KindRecomputeNondeterministic: a second run of a non-deterministic op
	// whose RNG state is not saved (attribute rng_saved).
	KindRecomputeNondeterministic
	// KindRecomputeForbidden: a second run of an impure or in-place op.
	KindRecomputeForbidden
	// KindOutOfMemory: the step needs memory past the capacity.
	KindOutOfMemory
)

var kindErrNames = [...]string{"", "invalid_step", "input_not_computed", "use_after_free", "input_swapped_out",
	"free_pinned", "free_dead", "swap_out_not_resident", "swap_in_not_swapped", "swap_pinned",
	"recompute_nondeterministic", "recompute_forbidden", "out_of_memory"}

var kindErrText = [...]string{"", "invalid step", "input was never computed", "input used after free", "input is swapped out",
	"free of a pinned tensor", "free of a tensor that is not live", "swap-out of a tensor that is not resident",
	"swap-in of a tensor that is not swapped out", "swap-out of a pinned tensor",
	"recompute of a non-deterministic op without saved RNG state", "recompute of an impure or in-place op", "out of memory"}

// String returns the kind's stable name (snake case).
func (k ErrorKind) String() string {
	if k < KindInvalidStep || k > KindOutOfMemory {
		return fmt.Sprintf("error_kind(%d)", uint8(k))
	}
	return kindErrNames[k]
}

// MarshalText implements encoding.TextMarshaler.
func (k ErrorKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// StepError is the error of a plan step (or of a Machine call): it names the
// step index, the op, the tensor and the kind of problem.
type StepError struct {
	// Step is the index of the step in the plan (for direct Machine calls,
	// the number of steps executed before this one).
	Step int
	Kind ErrorKind
	// StepKind is what the step did.
	StepKind StepKind
	// Op is the op being computed (NoOp for free and swap steps).
	Op     graph.OpID
	OpName string
	OpType string
	// Tensor is the tensor concerned (NoTensor if none).
	Tensor     graph.TensorID
	TensorName string
	// Requested is the allocation that failed (KindOutOfMemory).
	Requested int64
	// Detail adds context (for example the allocator's message).
	Detail string
	// Err is the wrapped cause: ErrOutOfMemory (with the allocator's error)
	// or ErrInvalidPlan.
	Err error
}

// Error formats the error as "step N (compute op #i "name" (type)): tensor #j
// "name": problem: detail".
func (e *StepError) Error() string {
	s := fmt.Sprintf("step %d (%s", e.Step, e.StepKind)
	if e.Op != graph.NoOp {
		s += fmt.Sprintf(" op #%d %q (%s)", e.Op, e.OpName, e.OpType)
	}
	s += ")"
	if e.Tensor != graph.NoTensor {
		s += fmt.Sprintf(": tensor #%d %q", e.Tensor, e.TensorName)
	}
	if e.Kind >= KindInvalidStep && e.Kind <= KindOutOfMemory {
		s += ": " + kindErrText[e.Kind]
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the cause (ErrOutOfMemory or ErrInvalidPlan).
func (e *StepError) Unwrap() error { return e.Err }

// Simulate replays plan p on a new Machine for graph g and returns the
// result. On a failing step it returns the error (a *StepError) together with
// a Result describing the run up to that step (with OOM info when memory ran
// out); errors in opts or g are returned with a nil Result.
func Simulate(g *graph.Graph, p *Plan, opts Options) (*Result, error) {
	m, err := NewMachine(g, opts)
	if err != nil {
		return nil, err
	}
	err = m.Replay(p)
	return m.Result(), err
}

// Replay runs every step of p in order and stops at the first failing step,
// returning its *StepError (whose Step is the index in p). The workspace ring
// is drained at the end. Replay does not allocate per step once the
// Machine's tables have grown (Reset keeps them), unless Options.Timeline or
// Options.Trace asks for records. With Options.InPlace and an
// InPlaceAllocator, an op may write its first output over an input that the
// plan frees right after it (see InPlaceRuleOf and docs/simulator.md); that
// free then releases nothing.
func (m *Machine) Replay(p *Plan) error {
	if m.missing() {
		return ErrNoMachine
	}
	if p == nil {
		return fmt.Errorf("replay: plan is nil: %w", ErrInvalidPlan)
	}
	m.strategy = p.Strategy
	m.reserveRecords(len(p.Steps))
	rng := m.rngLeft != nil && m.countRNG(p)
	base := m.step
	for i := range p.Steps {
		st := &p.Steps[i]
		var err error
		switch st.Kind {
		case Compute:
			if rng {
				err = m.rngState(st.Op)
			}
			if err == nil {
				err = m.compute(st.Op, p.Steps[i+1:])
			}
		case Free:
			err = m.free(st.Tensor)
		case SwapOut:
			err = m.swapOut(st.Tensor)
		case SwapIn:
			err = m.swapIn(st.Tensor)
		default:
			err = &StepError{Step: m.step, Kind: KindInvalidStep, StepKind: st.Kind, Op: graph.NoOp, Tensor: graph.NoTensor,
				Detail: fmt.Sprintf("step kind %d, expected compute, free, swap_out or swap_in", uint8(st.Kind)), Err: ErrInvalidPlan}
		}
		if err != nil {
			if se, ok := err.(*StepError); ok && base != 0 {
				se.Step -= base
				if m.oom != nil {
					m.oom.Step -= base
				}
			}
			m.drainWorkspaces()
			m.releaseRNG()
			m.releaseHeld(-1)
			return err
		}
	}
	m.drainWorkspaces()
	m.releaseRNG()
	m.releaseHeld(-1)
	return nil
}

// countRNG sets rngLeft to the number of computes p runs of each random op
// and reports whether some random op runs more than once: only then is an
// RNG state held.
func (m *Machine) countRNG(p *Plan) bool {
	random := func(st *Step) bool {
		return st.Kind == Compute && st.Op >= 0 && int(st.Op) < len(m.d.Flags) && m.d.Flags[st.Op].Has(graph.NonDeterministic)
	}
	for i := range p.Steps {
		if st := &p.Steps[i]; random(st) {
			m.rngLeft[st.Op] = 0
		}
	}
	again := false
	for i := range p.Steps {
		if st := &p.Steps[i]; random(st) {
			m.rngLeft[st.Op]++
			again = again || m.rngLeft[st.Op] > 1
		}
	}
	return again
}

// rngState runs before a Replay's compute of op: the first run of a random
// op that the plan runs again keeps its RNG state (Options.RNGStateBytes)
// until the backward pass ends, as PyTorch's recomputation saves
// torch.get_rng_state() before the op draws; the first Update-phase op
// releases the states.
func (m *Machine) rngState(op graph.OpID) error {
	if op < 0 || int(op) >= len(m.g.Ops) {
		return nil // compute reports it
	}
	if m.d.Phase[op] == graph.Update {
		m.releaseRNG()
		return nil
	}
	if !m.d.Flags[op].Has(graph.NonDeterministic) {
		return nil
	}
	left := m.rngLeft[op]
	m.rngLeft[op]--
	if left < 2 || m.opRuns[op] > 0 {
		return nil
	}
	b, err := m.allocate(m.opts.RNGStateBytes, recRNG, int32(op))
	if err != nil {
		e := m.oomErr(Compute, op, graph.NoTensor, m.opts.RNGStateBytes, fmt.Errorf("RNG state: %w", err))
		e.Detail += " for the op's RNG state (recompute.rng_state_bytes)"
		return e
	}
	m.notePeak(op)
	m.rngHeld = append(m.rngHeld, wsSlot{block: b, rec: int32(len(m.records) - 1)})
	return nil
}

// releaseRNG frees the RNG states held so far.
func (m *Machine) releaseRNG() {
	for _, s := range m.rngHeld {
		m.release(s.block, s.rec)
	}
	m.rngHeld = m.rngHeld[:0]
}
