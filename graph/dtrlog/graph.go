package dtrlog

import (
	"errors"
	"fmt"
	"io"

	"github.com/remat-dev/remat/graph"
)

// ToGraph converts a trace into a graph.Graph for static strategies: every
// CALL and MUTATE becomes an op in log order with TimeNs set from TIME;
// CONSTANT tensors become constants without producer; alias results become
// views (AliasOf) of the argument they alias; MUTATE results are new tensors
// (the new versions) of the mutated argument's storage size. Ops are in the
// forward phase until the BACKWARD annotation (or the first op whose name
// contains "backward"), then in the backward phase.
func ToGraph(tr *Trace) (*graph.Graph, error) {
	if tr == nil {
		return nil, errors.New("dtrlog: ToGraph of a nil trace (expected one from Compile)")
	}
	g := &graph.Graph{Name: tr.Name, Loss: graph.NoTensor}
	g.Tensors = make([]graph.Tensor, len(tr.Tensors))
	opOf := make([]graph.OpID, len(tr.Ops))
	for i := range tr.Ops {
		o := &tr.Ops[i]
		if o.Constant {
			opOf[i] = graph.NoOp
			continue
		}
		id := graph.OpID(len(g.Ops))
		opOf[i] = id
		ph := graph.Forward
		if o.Backward {
			ph = graph.Backward
		}
		gop := graph.Op{ID: id, Name: fmt.Sprintf("%s#%d", o.Name, i), Type: o.Name, Phase: ph, TimeNs: o.Time, Forward: graph.NoOp}
		gop.Inputs = make([]graph.TensorID, len(o.Args))
		for j, a := range o.Args {
			gop.Inputs[j] = graph.TensorID(a)
		}
		gop.Outputs = make([]graph.TensorID, len(o.Results))
		for j, r := range o.Results {
			gop.Outputs[j] = graph.TensorID(r)
		}
		if o.Mutate {
			gop.Attrs = map[string]string{"dtr_mutate": "1"}
		}
		g.Ops = append(g.Ops, gop)
	}
	for i := range tr.Tensors {
		t := &tr.Tensors[i]
		o := &tr.Ops[t.Op]
		gt := graph.Tensor{ID: graph.TensorID(i), Name: t.Name, Bytes: t.StorageSize, Producer: opOf[t.Op], AliasOf: graph.NoTensor}
		switch {
		case o.Constant:
			gt.Kind = graph.Constant
		case o.Backward:
			gt.Kind = graph.Gradient
		default:
			gt.Kind = graph.Activation
		}
		if a := o.Aliases[t.Index]; a >= 0 {
			gt.AliasOf = graph.TensorID(o.Args[a])
		}
		g.Tensors[i] = gt
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("dtr log to graph: %w", err)
	}
	return g, nil
}

// ReadGraph compiles a log and converts it to a graph.
func ReadGraph(r io.Reader) (*graph.Graph, error) {
	tr, err := Compile(r)
	if err != nil {
		return nil, err
	}
	return ToGraph(tr)
}
