package graph

import (
	"fmt"
	"sort"
	"sync"
)

// Saved names one forward tensor a backward op reads: input Index of the
// forward op, or output Index when Output is set. If ForInputs is not empty
// the tensor is saved only when at least one of those forward inputs needs a
// gradient (conv2d's weight is needed only for the input's gradient, its
// input only for the weight's gradient).
type Saved struct {
	Output    bool
	Index     int
	ForInputs []int
}

// SaveIn returns a Saved for forward input i, needed by the gradients of
// forInputs (all gradients when empty).
func SaveIn(i int, forInputs ...int) Saved { return Saved{Index: i, ForInputs: forInputs} }

// SaveOut returns a Saved for forward output i, needed by the gradients of
// forInputs (all gradients when empty).
func SaveOut(i int, forInputs ...int) Saved {
	return Saved{Output: true, Index: i, ForInputs: forInputs}
}

// ViewMode says whether input gradients share storage with the output
// gradient instead of being computed into fresh memory.
type ViewMode uint8

// View modes.
const (
	// NoView: every input gradient is a fresh tensor.
	NoView ViewMode = iota
	// ViewAll: every input gradient is a view of the first output gradient
	// (reshape, transpose, concat's narrow slices): zero bytes and FLOPs.
	ViewAll
	// ViewSameShape: an input gradient whose shape equals the output's is
	// the output gradient itself (add passes it through); broadcast inputs
	// get a fresh, reduced gradient.
	ViewSameShape
	// ViewFirst: the first input's gradient is the output gradient itself
	// when their shapes agree (scatter_add and index_add pass grad to
	// self); the others are fresh.
	ViewFirst
)

// GradRule says how to differentiate one op type. The declarative fields
// drive the default emission: one backward op of type BackwardType(type)
// reading the saved tensors then the existing output gradients, producing
// one gradient per input that needs one. Emit, when set, replaces the
// default emission entirely.
type GradRule struct {
	// Saves lists the forward tensors the backward reads, in order.
	Saves []Saved
	// NoGradInputs lists input indices that never get a gradient (labels,
	// ids, masks, running statistics).
	NoGradInputs []int
	// NoGradOutputs lists output indices that carry no gradient (indices,
	// masks, saved statistics, workspaces).
	NoGradOutputs []int
	// Factor is backward FLOPs / forward FLOPs when any fresh gradient is
	// computed.
	Factor float64
	// InputFactors, when set, replaces Factor: backward FLOPs = forward
	// FLOPs times the sum of InputFactors[i] over inputs i whose gradient is
	// computed into fresh memory.
	InputFactors []float64
	// View says which gradients alias the output gradient.
	View ViewMode
	// Emit, if set, emits the backward ops itself (see GradContext).
	Emit func(ctx *GradContext) error
}

// GradContext is what a custom GradRule.Emit sees: it appends backward ops
// to B (whose phase is Backward) and sets InGrads[i] for every input with
// NeedGrad[i].
type GradContext struct {
	B *Builder
	// Forward is the op being differentiated (a copy; its ID indexes B's
	// graph).
	Forward Op
	// OutGrads[i] is the gradient of output i (NoTensor if none reaches it).
	OutGrads []TensorID
	// NeedGrad[i] says whether input i needs a gradient.
	NeedGrad []bool
	// InGrads[i] must be set to the gradient of input i when NeedGrad[i].
	InGrads []TensorID
}

func (r *GradRule) noGradIn(i int) bool  { return contains(r.NoGradInputs, i) }
func (r *GradRule) noGradOut(i int) bool { return contains(r.NoGradOutputs, i) }

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (r *GradRule) check() error {
	if r.Factor < 0 {
		return fmt.Errorf("factor %g, expected >= 0", r.Factor)
	}
	for i, f := range r.InputFactors {
		if f < 0 {
			return fmt.Errorf("input factor %d is %g, expected >= 0", i, f)
		}
	}
	for i, s := range r.Saves {
		if s.Index < 0 {
			return fmt.Errorf("saves[%d]: index %d, expected >= 0", i, s.Index)
		}
	}
	if r.View > ViewFirst {
		return fmt.Errorf("view mode %d, expected 0..3", r.View)
	}
	return nil
}

// Rules maps op types to gradient rules. The zero value is an empty registry;
// DefaultRules returns one with every built-in op type.
type Rules struct {
	m map[string]GradRule
}

// NewRules returns an empty registry.
func NewRules() *Rules { return &Rules{m: map[string]GradRule{}} }

// RegisterGradRule adds or replaces the rule for an op type.
func (r *Rules) RegisterGradRule(opType string, rule GradRule) error {
	if opType == "" {
		return fmt.Errorf("register gradient rule: op type is empty")
	}
	if err := rule.check(); err != nil {
		return fmt.Errorf("register gradient rule for %q: %w", opType, err)
	}
	if r.m == nil {
		r.m = map[string]GradRule{}
	}
	r.m[opType] = rule
	return nil
}

// Lookup returns the rule of an op type.
func (r *Rules) Lookup(opType string) (GradRule, bool) {
	g, ok := r.m[opType]
	return g, ok
}

// Types lists the op types with a rule, sorted.
func (r *Rules) Types() []string {
	t := make([]string, 0, len(r.m))
	for k := range r.m {
		t = append(t, k)
	}
	sort.Strings(t)
	return t
}

// Clone returns an independent copy of the registry.
func (r *Rules) Clone() *Rules {
	c := NewRules()
	for k, v := range r.m {
		c.m[k] = v
	}
	return c
}

var defaultRules = sync.OnceValue(func() *Rules {
	r := NewRules()
	for k, v := range builtinRules() {
		if err := r.RegisterGradRule(k, v); err != nil {
			panic(err) // a bug in the built-in table, not an input error
		}
	}
	return r
})

// DefaultRules returns a new registry holding the rules of every built-in op
// type (see docs/gradients.md); add your own op types with RegisterGradRule.
func DefaultRules() *Rules { return defaultRules().Clone() }

// builtinRules are the gradient rules of the op-type registry's entries
// (opTypeTable), following what PyTorch's autograd saves
// (tools/autograd/derivatives.yaml).
func builtinRules() map[string]GradRule {
	m := map[string]GradRule{}
	for _, e := range OpTypes() {
		if e.Grad != nil {
			m[e.Name] = *e.Grad
		}
	}
	return m
}
