package sim

import (
	"fmt"

	"github.com/remat-dev/remat/graph"
)

// StepKind is what one step of a Plan does.
type StepKind uint8

// Step kinds.
const (
	// Compute runs an op: allocates its outputs that are not resident and
	// marks them resident. Running an op a second time is a recompute.
	Compute StepKind = iota + 1
	// Free releases a resident tensor's storage.
	Free
	// SwapOut copies a resident tensor to host memory and frees its device
	// storage.
	SwapOut
	// SwapIn copies a swapped-out tensor back to device memory.
	SwapIn
)

var stepNames = [...]string{"", "compute", "free", "swap_out", "swap_in"}

// Valid reports whether k is a defined step kind.
func (k StepKind) Valid() bool { return k >= Compute && k <= SwapIn }

// String returns the step kind's name as used in plan JSON.
func (k StepKind) String() string {
	if !k.Valid() {
		return fmt.Sprintf("step(%d)", uint8(k))
	}
	return stepNames[k]
}

// MarshalText implements encoding.TextMarshaler.
func (k StepKind) MarshalText() ([]byte, error) {
	if !k.Valid() {
		return nil, fmt.Errorf("step kind %d: not valid", uint8(k))
	}
	return []byte(stepNames[k]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *StepKind) UnmarshalText(b []byte) error {
	for i := Compute; i <= SwapIn; i++ {
		if stepNames[i] == string(b) {
			*k = i
			return nil
		}
	}
	return fmt.Errorf("step kind %q: expected compute, free, swap_out or swap_in", b)
}

// Step is one action of a Plan. Compute steps name an Op; Free, SwapOut and
// SwapIn name a Tensor.
type Step struct {
	Kind   StepKind
	Op     graph.OpID
	Tensor graph.TensorID
}

// Plan is what every static strategy emits and the simulator replays: the
// sequence of computes (first or again), frees and swaps for one training
// step of a graph.
type Plan struct {
	// Strategy names the strategy that made the plan ("none", "mirror", ...).
	Strategy string
	Steps    []Step
	// Signature, when set, describes the graph the plan was made for, one
	// entry per op (docs/simulator.md, "Plan JSON"), so that a framework
	// applying the plan can refuse a different graph. Optional.
	Signature []string
}

// ComputeStep returns a compute step for op.
func ComputeStep(op graph.OpID) Step { return Step{Kind: Compute, Op: op, Tensor: graph.NoTensor} }

// FreeStep returns a free step for tensor t.
func FreeStep(t graph.TensorID) Step { return Step{Kind: Free, Op: graph.NoOp, Tensor: t} }

// SwapOutStep returns a swap-out step for tensor t.
func SwapOutStep(t graph.TensorID) Step { return Step{Kind: SwapOut, Op: graph.NoOp, Tensor: t} }

// SwapInStep returns a swap-in step for tensor t.
func SwapInStep(t graph.TensorID) Step { return Step{Kind: SwapIn, Op: graph.NoOp, Tensor: t} }
