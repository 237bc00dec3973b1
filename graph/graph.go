package graph

import (
	"sync/atomic"

	"github.com/remat-dev/remat/internal/dedup"
)

// Graph is a training graph: ops in execution order and the tensors they read
// and write. Build one with a Builder, decode one from JSON, or fill the
// slices directly and call Validate, which also builds the consumer index.
//
// A nil *Graph reads as the empty graph (no ops, no tensors) in the
// accessors; Validate rejects it.
type Graph struct {
	Name    string
	Ops     []Op
	Tensors []Tensor
	// Loss is the scalar the backward pass differentiates (NoTensor if the
	// graph has none, e.g. a forward-only or imported trace).
	Loss TensorID
	// Attrs holds graph-level metadata (model name, batch size, ...).
	Attrs map[string]string

	// Consumer index in CSR form: the consumers of tensor t are
	// consList[consStart[t]:consStart[t+1]], in op order.
	consStart []int32
	consList  []OpID
	// dense holds the *Dense that Dense returns, built on its first call
	// (Validate drops it). An atomic.Value, not a mutex, so that a Graph
	// stays copyable (Builder holds one by value) and comparable with
	// reflect.DeepEqual.
	dense atomic.Value
}

// NumOps returns the number of ops.
func (g *Graph) NumOps() int {
	if g == nil {
		return 0
	}
	return len(g.Ops)
}

// NumTensors returns the number of tensors.
func (g *Graph) NumTensors() int {
	if g == nil {
		return 0
	}
	return len(g.Tensors)
}

// Op returns a pointer to op id.
// It returns nil for an ID the graph does not have (from another graph).
func (g *Graph) Op(id OpID) *Op {
	if g == nil || id < 0 || int(id) >= len(g.Ops) {
		return nil
	}
	return &g.Ops[id]
}

// Tensor returns a pointer to tensor id.
// It returns nil for an ID the graph does not have (from another graph).
func (g *Graph) Tensor(id TensorID) *Tensor {
	if g == nil || id < 0 || int(id) >= len(g.Tensors) {
		return nil
	}
	return &g.Tensors[id]
}

// Consumers returns the ops reading tensor t, in execution order (an op that
// reads t twice appears once). The slice aliases the graph's index: do not
// modify it. The index is built by Validate (or by the first call here on a
// graph that was never validated; that lazy build is not safe for concurrent
// use, so validate graphs before sharing them between goroutines).
//
// A tensor the graph does not have has no consumers.
func (g *Graph) Consumers(t TensorID) []OpID {
	if g == nil || t < 0 || int(t) >= len(g.Tensors) {
		return nil
	}
	if len(g.consStart) != len(g.Tensors)+1 {
		g.buildIndex()
	}
	return g.consList[g.consStart[t]:g.consStart[t+1]]
}

// buildIndex fills the CSR consumer index. It assumes every input ID is in
// range (Validate checks that first).
func (g *Graph) buildIndex() {
	nt := len(g.Tensors)
	start := make([]int32, nt+1)
	seen := dedup.New(nt) // an op's distinct inputs
	for i := range g.Ops {
		seen.Next()
		for _, t := range g.Ops[i].Inputs {
			if !seen.Seen(int32(t)) {
				start[t+1]++
			}
		}
	}
	for t := 0; t < nt; t++ {
		start[t+1] += start[t]
	}
	list := make([]OpID, start[nt])
	fill := make([]int32, nt)
	copy(fill, start[:nt])
	for i := range g.Ops {
		seen.Next()
		for _, t := range g.Ops[i].Inputs {
			if !seen.Seen(int32(t)) {
				list[fill[t]] = OpID(i)
				fill[t]++
			}
		}
	}
	g.consStart, g.consList = start, list
}

// StorageOf returns the tensor whose storage t uses: t itself, or the root of
// its alias chain.
//
// A tensor the graph does not have is returned unchanged.
func (g *Graph) StorageOf(t TensorID) TensorID {
	if g == nil || t < 0 || int(t) >= len(g.Tensors) {
		return t
	}
	for n := 0; n <= len(g.Tensors); n++ {
		a := g.Tensors[t].AliasOf
		if a < 0 || int(a) >= len(g.Tensors) {
			break // NoTensor, or out of range (Validate reports it)
		}
		t = a
	}
	return t
}

// ParamCount returns the number of elements in parameter tensors (the figure
// model zoos publish). Tensors without a shape count as zero.
func (g *Graph) ParamCount() int64 {
	if g == nil {
		return 0
	}
	var n int64
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.Kind == Parameter && t.Producer == NoOp && t.AliasOf == NoTensor {
			if e, err := t.Shape.NumElements(); err == nil {
				n += e
			}
		}
	}
	return n
}

// OpsInPhase counts the ops of a phase.
func (g *Graph) OpsInPhase(p Phase) int {
	if g == nil {
		return 0
	}
	n := 0
	for i := range g.Ops {
		if g.Ops[i].Phase == p {
			n++
		}
	}
	return n
}
