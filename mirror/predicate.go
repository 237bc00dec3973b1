package mirror

import (
	"errors"
	"fmt"
	"sync"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph"
)

// Variant selects the MXNet release whose predicate is followed.
type Variant uint8

// Variants of the need-mirror predicate.
const (
	// MXNet16 never mirrors BatchNorm (MXNet <= 1.6).
	MXNet16 Variant = iota + 1
	// MXNet17 mirrors BatchNorm (MXNet >= 1.7); a recomputed batch norm must
	// not update its running statistics.
	MXNet17
)

// String names the variant.
func (v Variant) String() string {
	switch v {
	case MXNet16:
		return "1.6"
	case MXNet17:
		return "1.7"
	}
	return "unknown"
}

// Rule is the predicate rule (or pass decision) that settled whether an op is
// mirrored.
type Rule uint8

// Rules, in the order the classic predicate evaluates them, then the
// decisions of the cost-aware pass.
const (
	RuleNotForward      Rule = iota + 1 // backward and update ops are never candidates
	RuleDropout                         // Dropout: its random mask would differ on recompute
	RuleNotRecomputable                 // impure, in-place, non-deterministic without saved RNG state, or reading a storage a later in-place op writes
	RuleForceOn                         // attribute force_mirroring=1 (beats the global switch)
	RuleForceOff                        // attribute force_mirroring=0 (cost-aware pass and later MXNet master)
	RuleGlobalOff                       // MXNET_BACKWARD_DO_MIRROR=0
	RuleNeverType                       // Convolution, FullyConnected, Concat, SoftmaxOutput (and Embedding in the cost-aware pass)
	RuleBatchNorm16                     // BatchNorm in the 1.6 variant
	RuleDefault                         // everything else is mirrored
	RuleCostKept                        // cost-aware: recomputing the group would not release more than it allocates
	RuleSimKept                         // cost-aware: mirroring the group did not lower the simulated peak
	RuleCostMirrored                    // cost-aware: the group was mirrored and lowered the simulated peak
)

var ruleNames = [...]string{"", "not a forward op", "dropout is never mirrored", "not recomputable (impure, in-place, random without saved RNG state, or reading what a later in-place op overwrites)",
	"attribute force_mirroring=1", "attribute force_mirroring=0", "MXNET_BACKWARD_DO_MIRROR=0",
	"type never mirrored", "BatchNorm is not mirrored in MXNet <= 1.6", "mirrored by default",
	"kept: recompute would release less than it allocates", "kept: did not lower the simulated peak", "mirrored: lowers the simulated peak"}

// Mirrors reports whether the rule mirrors the op.
func (r Rule) Mirrors() bool {
	return r == RuleForceOn || r == RuleDefault || r == RuleCostMirrored
}

// String describes the rule.
func (r Rule) String() string {
	if int(r) < len(ruleNames) && r > 0 {
		return ruleNames[r]
	}
	return "unknown rule"
}

// MXNetType maps remat's op types, ONNX's and the aten operator names of
// traced PyTorch steps (convolution, addmm, mm, native_batch_norm,
// nll_loss_forward, native_dropout, ...) to the MXNet operator names the
// predicate is written in terms of. Types without an MXNet counterpart in
// the predicate's lists map to themselves. The names are the op-type
// registry's (graph.LookupOpType, its MXNet class).
func MXNetType(opType string) string {
	if e, ok := graph.LookupOpType(opType); ok && e.MXNet != "" {
		return e.MXNet
	}
	return opType
}

// defaultSettings are the built-in settings, whose ForOp parses a per-op
// attribute with its setting's parser.
var defaultSettings = sync.OnceValue(func() *config.Settings { return config.Defaults() })

// forceMirroring reads op's force_mirroring attribute with the setting's own
// parser (config's mirror.enabled, whose per-op attribute it is), so that the
// attribute accepts exactly what MXNET_BACKWARD_DO_MIRROR accepts and a bad
// value is an error naming the op, the attribute and the value.
func forceMirroring(op *graph.Op) (val, set bool, err error) {
	_, ok := op.Attrs[graph.AttrForceMirroring]
	if !ok {
		return false, false, nil
	}
	v, err := defaultSettings().ForOp(config.BackwardDoMirror.Name(), op.Attrs)
	if err != nil {
		return false, false, fmt.Errorf("mirror: op %d (%q): %w", op.ID, op.Name, err)
	}
	return v.Bool(), true, nil
}

// Predicate is the need-mirror predicate: it decides, for one op, whether
// the classic pass mirrors it and which rule decided.
type Predicate struct {
	// DoMirror is the global switch (MXNET_BACKWARD_DO_MIRROR).
	DoMirror bool
	// Variant selects the BatchNorm rule.
	Variant Variant
	// HonourForceOff lets force_mirroring=0 force an op off (later MXNet
	// master and the cost-aware pass); classic 1.x ignores a false value.
	HonourForceOff bool
	// NeverEmbedding adds Embedding to the never-mirrored types (later
	// MXNet master).
	NeverEmbedding bool
}

// Decide evaluates the predicate in MXNet's order: variables never (they are
// not ops here); Dropout never; force_mirroring=1 yes; the global switch; the
// never-mirrored types; BatchNorm per variant; otherwise yes. remat adds one
// safety rule MXNet lacks: ops that may not run twice (impure, in-place, or
// random without saved RNG state) are never mirrored. The returned rule says
// what decided (Rule.Mirrors tells whether the op is mirrored). A nil op or a
// force_mirroring value that is no boolean is an error.
func (p Predicate) Decide(op *graph.Op) (Rule, error) {
	if op == nil {
		return 0, errors.New("mirror: op is nil")
	}
	force, set, err := forceMirroring(op)
	if err != nil {
		return 0, err
	}
	if op.Phase != graph.Forward {
		return RuleNotForward, nil
	}
	t := MXNetType(op.Type)
	if t == "Dropout" {
		return RuleDropout, nil
	}
	if !op.Recomputable() {
		return RuleNotRecomputable, nil
	}
	if set {
		if force {
			return RuleForceOn, nil
		}
		if p.HonourForceOff {
			return RuleForceOff, nil
		}
	}
	if !p.DoMirror {
		return RuleGlobalOff, nil
	}
	switch t {
	case "Convolution", "FullyConnected", "Concat", "SoftmaxOutput":
		return RuleNeverType, nil
	case "Embedding":
		if p.NeverEmbedding {
			return RuleNeverType, nil
		}
	case "BatchNorm":
		if p.Variant != MXNet17 {
			return RuleBatchNorm16, nil
		}
	}
	return RuleDefault, nil
}
