package graph

import (
	"fmt"
	"sort"
)

// Phase is the part of a training step an op belongs to.
type Phase uint8

// Phases of a training step.
const (
	Forward Phase = iota + 1
	Backward
	Update
)

var phaseNames = [...]string{"", "forward", "backward", "update"}

// Valid reports whether p is a defined phase.
func (p Phase) Valid() bool { return p >= Forward && p <= Update }

// String returns the phase's name.
func (p Phase) String() string {
	if !p.Valid() {
		return fmt.Sprintf("phase(%d)", uint8(p))
	}
	return phaseNames[p]
}

// ParsePhase parses a phase name.
func ParsePhase(s string) (Phase, error) {
	for p := Forward; p <= Update; p++ {
		if phaseNames[p] == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("phase %q: expected one of forward, backward, update", s)
}

// MarshalText implements encoding.TextMarshaler.
func (p Phase) MarshalText() ([]byte, error) {
	if !p.Valid() {
		return nil, fmt.Errorf("phase %d: not a valid phase", uint8(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (p *Phase) UnmarshalText(b []byte) error {
	v, err := ParsePhase(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// OpFlags are properties that restrict what a strategy may do with an op.
type OpFlags uint8

// Op flags.
const (
	// NonDeterministic ops (dropout, random init) give different results when
	// rerun: they may be recomputed only if their RNG state is saved.
	NonDeterministic OpFlags = 1 << iota
	// InPlace ops write one of their inputs (the output aliases that input).
	InPlace
	// Impure ops have effects beyond their outputs (I/O, collectives, updating
	// running statistics) and must run exactly once.
	Impure
)

// Has reports whether all flags in m are set.
func (f OpFlags) Has(m OpFlags) bool { return f&m == m }

// Strings lists the set flags by name, in a fixed order.
func (f OpFlags) Strings() []string {
	var s []string
	if f.Has(NonDeterministic) {
		s = append(s, "nondeterministic")
	}
	if f.Has(InPlace) {
		s = append(s, "inplace")
	}
	if f.Has(Impure) {
		s = append(s, "impure")
	}
	return s
}

// ParseOpFlag parses one flag name as printed by Strings.
func ParseOpFlag(s string) (OpFlags, error) {
	switch s {
	case "nondeterministic":
		return NonDeterministic, nil
	case "inplace":
		return InPlace, nil
	case "impure":
		return Impure, nil
	}
	return 0, fmt.Errorf("op flag %q: expected one of nondeterministic, inplace, impure", s)
}

// Well-known attribute keys. Attributes are per-op overrides of global
// settings; their values are strings as in MXNet's symbol attributes.
const (
	AttrForceMirroring     = "force_mirroring"       // "1"/"true" forces mirroring on, "0"/"false" off
	AttrCudnnTune          = "cudnn_tune"            // off, limited_workspace, fastest
	AttrSublinearEndpoint  = "sublinear_endpoint"    // "1": a block of the sublinear search may end here
	AttrRNGSaved           = "rng_saved"             // "1": a non-deterministic op's RNG state is saved, so it may be recomputed
	AttrNoStatsOnRecompute = "no_stats_on_recompute" // set on recomputed batch norms that must not update running statistics
	AttrMemoryFormat       = "memory_format"         // ChannelsLast: a convolution ran on channels-last (NHWC) tensors
	AttrWeightFormat       = "weight_format"         // ChannelsLast: a convolution's weight is itself channels-last
	AttrGradFormat         = "grad_format"           // Contiguous, ChannelsLast or Strided: the layout of the gradient a backward kernel was given
	AttrInputFormat        = "input_format"          // Contiguous, ChannelsLast or Strided: the layout of a convolution's input
	AttrTransposed         = "transposed"            // "1": a traced convolution is a transposed one (ConvTranspose)
	AttrHolds              = "holds"                 // comma-separated tensor IDs whose storage stays allocated until this op has run, even when freed earlier
)

// Memory-format values of AttrMemoryFormat, AttrWeightFormat,
// AttrGradFormat and AttrInputFormat (remat_torch.trace writes them).
const (
	Contiguous   = "contiguous"    // dense in the dimension order (NCHW)
	ChannelsLast = "channels_last" // dense with channels innermost (NHWC)
	Strided      = "strided"       // neither: a transposed or sliced view
)

// Op is one operation of the training graph. (The small fields sit
// together so that the struct has as little padding as it can: a
// million-op graph holds a million of them.)
type Op struct {
	ID    OpID
	Phase Phase
	Flags OpFlags
	// Forward is, for a backward op, the forward op it differentiates (NoOp
	// if none).
	Forward OpID
	Name    string
	Type    string // lower-case op type: conv2d, linear, relu, batchnorm, ...
	Inputs  []TensorID
	Outputs []TensorID

	FLOPs         int64 // floating-point operations
	BytesAccessed int64 // bytes read and written (for the memory-bound part of the cost)
	TimeNs        int64 // measured time; > 0 overrides the cost model
	Workspace     int64 // temporary bytes alive while the op runs

	// Attrs holds the op's attributes. Ops may share one map: a Builder
	// and the JSON decoder give ops with equal attributes the same map,
	// and copies of a graph share their ops' maps. Treat it as read-only;
	// to change one op's attributes, give it a new map.
	Attrs map[string]string
}

// Attr returns the attribute value and whether it is set.
func (o *Op) Attr(key string) (string, bool) {
	v, ok := o.Attrs[key]
	return v, ok
}

// AttrKeys returns the op's attribute keys sorted.
func (o *Op) AttrKeys() []string {
	keys := make([]string, 0, len(o.Attrs))
	for k := range o.Attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Recomputable reports whether a strategy may run the op a second time:
// impure and in-place ops never, non-deterministic ops only with saved RNG
// state (attribute rng_saved=1).
func (o *Op) Recomputable() bool {
	if o.Flags&(Impure|InPlace) != 0 {
		return false
	}
	if o.Flags.Has(NonDeterministic) {
		v := o.Attrs[AttrRNGSaved]
		return v == "1" || v == "true"
	}
	return true
}
