package graph

import (
	"fmt"
	"strings"
)

// Optimizer names the parameter update appended by Backward.
type Optimizer string

// Optimizers.
const (
	OptNone     Optimizer = "none"     // no update ops
	OptSGD      Optimizer = "sgd"      // p -= lr * g
	OptMomentum Optimizer = "momentum" // buf = mu*buf + g; p -= lr * buf (one state tensor per parameter)
	OptAdam     Optimizer = "adam"     // exp_avg, exp_avg_sq (two state tensors per parameter)
)

// Optimizers lists the valid optimizer names.
func Optimizers() []Optimizer { return []Optimizer{OptNone, OptSGD, OptMomentum, OptAdam} }

// ParseOptimizer parses an optimizer name; "" means none.
func ParseOptimizer(s string) (Optimizer, error) {
	switch o := Optimizer(strings.ToLower(strings.TrimSpace(s))); o {
	case "", OptNone:
		return OptNone, nil
	case OptSGD, OptMomentum, OptAdam:
		return o, nil
	}
	return "", fmt.Errorf("optimizer %q: expected one of none, sgd, momentum, adam", s)
}

// updateFLOPs is the per-element cost of each update (see docs/gradients.md).
func updateFLOPs(o Optimizer) int64 {
	switch o {
	case OptSGD:
		return 2
	case OptMomentum:
		return 4
	case OptAdam:
		return 12
	}
	return 0
}

// optimizerStates names the state tensors o keeps per parameter (the
// suffixes of their names).
func optimizerStates(o Optimizer) []string {
	switch o {
	case OptMomentum:
		return []string{"momentum_buffer"}
	case OptAdam:
		return []string{"exp_avg", "exp_avg_sq"}
	}
	return nil
}

// appendUpdate adds the update op of parameter p with gradient g. Updated
// parameters keep kind Parameter and updated state kind OptimizerState; with
// inPlace each output is an alias of the tensor it replaces.
func appendUpdate(b *Builder, opt Optimizer, p, g TensorID, inPlace bool) {
	pt := b.g.Tensors[p]
	states := optimizerStates(opt)
	typ := OpSGDUpdate
	switch opt {
	case OptMomentum:
		typ = OpMomentumUpdate
	case OptAdam:
		typ = OpAdamUpdate
	}
	ins := []TensorID{p, g}
	for _, s := range states {
		var st TensorID
		if len(pt.Shape) > 0 || pt.DType != 0 {
			st = b.NewTensor(pt.Name+"."+s, OptimizerState, pt.DType, pt.Shape...)
		} else {
			st = TensorID(len(b.g.Tensors))
			b.g.Tensors = append(b.g.Tensors, Tensor{ID: st, Name: pt.Name + "." + s, Bytes: pt.Bytes, Kind: OptimizerState, Producer: NoOp, AliasOf: NoTensor})
		}
		ins = append(ins, st)
	}
	o := b.Op(typ, pt.Name+".update", ins...)
	for i, old := range append([]TensorID{p}, ins[2:]...) {
		ot := b.g.Tensors[old]
		name := ot.Name + ".new"
		kind := Parameter
		if i > 0 {
			kind = OptimizerState
		}
		if len(ot.Shape) > 0 || ot.DType != 0 {
			o.OutKind(name, kind, ot.DType, ot.Shape...)
		} else {
			o.OutBytes(name, ot.Bytes)
			b.g.Tensors[o.op().Outputs[i]].Kind = kind
		}
		if inPlace {
			o.Alias(old)
		}
	}
	var by int64
	for _, t := range ins {
		by += b.g.Tensors[t].Bytes
	}
	by += pt.Bytes * int64(1+len(states)) // written, in place or not
	op := o.op()
	op.FLOPs = updateFLOPs(opt) * numel(pt.Shape)
	op.BytesAccessed = by
	if inPlace {
		op.Flags |= InPlace
	}
}
