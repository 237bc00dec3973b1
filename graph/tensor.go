package graph

import "fmt"

// TensorID is a dense index into Graph.Tensors.
type TensorID int32

// OpID is a dense index into Graph.Ops.
type OpID int32

// NoOp marks a tensor without a producer (inputs, parameters, constants,
// initial optimizer state) or a backward op without a forward counterpart.
const NoOp OpID = -1

// NoTensor marks a tensor that is not an alias.
const NoTensor TensorID = -1

// TensorKind says what role a tensor plays in a training step.
type TensorKind uint8

// Tensor kinds.
const (
	Activation     TensorKind = iota + 1 // produced by a forward op
	Input                                // fed from outside each step (data, labels)
	Parameter                            // a trainable weight, resident for the whole step
	Gradient                             // gradient of an activation or input
	ParamGradient                        // gradient of a parameter
	OptimizerState                       // momentum, Adam moments, ...
	Constant                             // a fixed tensor (buffers, running statistics)
)

var kindNames = [...]string{"", "activation", "input", "parameter", "gradient", "param_gradient", "optimizer_state", "constant"}

// Valid reports whether k is a defined kind.
func (k TensorKind) Valid() bool { return k >= Activation && k <= Constant }

// String returns the kind's name as used in the JSON format.
func (k TensorKind) String() string {
	if !k.Valid() {
		return fmt.Sprintf("kind(%d)", uint8(k))
	}
	return kindNames[k]
}

// Persistent reports whether tensors of this kind live across training steps
// (parameters, optimizer state, constants) and so are resident throughout.
func (k TensorKind) Persistent() bool {
	return k == Parameter || k == OptimizerState || k == Constant
}

// ParseTensorKind parses a kind name as printed by String.
func ParseTensorKind(s string) (TensorKind, error) {
	for k := Activation; k <= Constant; k++ {
		if kindNames[k] == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("tensor kind %q: expected one of activation, input, parameter, gradient, param_gradient, optimizer_state, constant", s)
}

// MarshalText implements encoding.TextMarshaler.
func (k TensorKind) MarshalText() ([]byte, error) {
	if !k.Valid() {
		return nil, fmt.Errorf("tensor kind %d: not a valid kind", uint8(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *TensorKind) UnmarshalText(b []byte) error {
	v, err := ParseTensorKind(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// Tensor is a value of the training graph. Bytes is its storage size: derived
// from Shape and DType when the graph is built from shapes, or given
// explicitly (traces often know sizes but not shapes). A tensor with AliasOf
// set is a view sharing that tensor's storage: it adds no bytes of its own.
//
// The fields are ordered to keep the padding small (64 bytes in all): a
// million-op graph holds about two million of them.
type Tensor struct {
	ID    TensorID
	DType DType
	Kind  TensorKind
	Name  string
	// Shape is read-only: a Builder and the JSON decoder give tensors of
	// equal shapes the same slice (its capacity is its length, so an
	// append copies it).
	Shape    Shape
	Bytes    int64
	Producer OpID     // NoOp if the tensor comes from outside the step
	AliasOf  TensorID // NoTensor unless this tensor is a view of another
}

// StorageBytes returns the bytes this tensor adds to memory: 0 for a view.
func (t *Tensor) StorageBytes() int64 {
	if t.AliasOf != NoTensor {
		return 0
	}
	return t.Bytes
}
