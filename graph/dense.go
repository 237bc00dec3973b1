package graph

import "fmt"

// Dense holds, as flat arrays indexed by ID, the facts about a graph's
// tensors and ops that planners and the simulator read in their inner
// loops. An Op is about 150 bytes and a Tensor about 70, so a loop that
// reads one field of each touches a cache line per element; on a graph of
// 100k ops that no longer fits in cache. The same facts here take about 20
// bytes per tensor and 30 per op (with two inputs and one output), and a
// pass over them reads consecutive memory.
//
// A Dense is read-only: every caller (and every simulator Machine) shares
// its slices, so do not modify them. Get it with (*Graph).Dense.
type Dense struct {
	// Producer[t] is tensors[t].Producer.
	Producer []OpID
	// Root[t] is the storage of tensor t (StorageOf): t itself, or the root
	// of its alias chain.
	Root []TensorID
	// StorageBytes[t] is tensors[t].Bytes when t owns its storage (Root[t]
	// is t), 0 for a view (Tensor.StorageBytes).
	StorageBytes []int64
	// Kind[t] is tensors[t].Kind.
	Kind []TensorKind
	// DType[t] is tensors[t].DType.
	DType []DType
	// Phase[op] is ops[op].Phase.
	Phase []Phase
	// Flags[op] is ops[op].Flags.
	Flags []OpFlags
	// Forward[op] is ops[op].Forward.
	Forward []OpID
	// Holders lists, in order, the ops that carry the AttrHolds attribute.
	Holders []OpID
	// Types lists the graph's op types, each once, in order of first use;
	// Type[op] is the index of ops[op].Type in it, so that a loop over ops
	// decides per type (a few dozen) what it would otherwise decide per op
	// by comparing strings.
	Types []string
	Type  []int32

	cycle    TensorID // the first tensor whose alias chain is a cycle
	err      error    // the first ID out of range or negative size
	early    TensorID // the first view that exists before its base
	inStart  []int32  // per op, and one past the last: index of its first input in ins
	ins      []TensorID
	outStart []int32
	outs     []TensorID
}

// Inputs returns op's inputs (ops[op].Inputs), or nil for an ID the graph
// does not have.
func (d *Dense) Inputs(op OpID) []TensorID {
	if d == nil || op < 0 || int(op)+1 >= len(d.inStart) {
		return nil
	}
	a, b := d.inStart[op], d.inStart[op+1]
	return d.ins[a:b:b] // capped: an append copies instead of writing the next op's

}

// Outputs returns op's outputs (ops[op].Outputs), or nil for an ID the graph
// does not have.
func (d *Dense) Outputs(op OpID) []TensorID {
	if d == nil || op < 0 || int(op)+1 >= len(d.outStart) {
		return nil
	}
	a, b := d.outStart[op], d.outStart[op+1]
	return d.outs[a:b:b]
}

// Err returns the first problem found while building the index that
// would make indexing by the graph's IDs unsafe, in the order tensors
// (alias, producer, bytes), then ops (inputs, outputs, forward op): an ID
// the graph does not have or a negative size, wrapping ErrInvalid; nil if
// none. Validate checks much more; this is what code that indexes arrays
// by those IDs needs.
func (d *Dense) Err() error {
	if d == nil {
		return nil
	}
	return d.err
}

// EarlyView returns the first view that would exist before the tensor it
// aliases: its producer runs before its base's, or it has none (resident
// from the start) while its base has one. NoTensor if none (Validate
// rejects such a graph).
func (d *Dense) EarlyView() TensorID {
	if d == nil {
		return NoTensor
	}
	return d.early
}

// AliasCycle returns the first tensor whose alias chain never reaches a
// tensor that owns its storage (Validate rejects such a graph; Root then
// holds a tensor of the cycle), or NoTensor.
func (d *Dense) AliasCycle() TensorID {
	if d == nil {
		return NoTensor
	}
	return d.cycle
}

// ReadOutsideForward returns, per storage (indexed by its root tensor),
// whether an op outside the forward pass (backward or update) reads it,
// directly or through a view: what a planner that drops forward storages
// must keep or remake for the backward. Entries of tensors that are views
// are false. A new slice on every call.
func (d *Dense) ReadOutsideForward() []bool {
	read := make([]bool, d.NumTensors())
	for i, ph := range d.Phase {
		if ph == Forward {
			continue
		}
		for _, t := range d.Inputs(OpID(i)) {
			if t >= 0 && int(t) < len(read) {
				read[d.Root[t]] = true
			}
		}
	}
	return read
}

// NumOps returns the number of ops the index covers.
func (d *Dense) NumOps() int {
	if d == nil {
		return 0
	}
	return len(d.Phase)
}

// NumTensors returns the number of tensors the index covers.
func (d *Dense) NumTensors() int {
	if d == nil {
		return 0
	}
	return len(d.Producer)
}

// Dense returns the graph's dense index (see Dense). The first call builds
// it and later calls return the same one while the graph keeps its number
// of ops and tensors; it is safe for concurrent use. The index shows the
// graph as it was when built: after changing an op's type, inputs,
// outputs, phase, flags or forward op, or a tensor's producer, alias,
// bytes, kind or dtype, call Validate, which drops it. A nil graph gives
// an empty index.
//
// The index does not reject a graph: on one that Validate would reject,
// it holds whatever IDs the ops name, and Err, AliasCycle and EarlyView
// report the problems that make indexing by them unsafe.
func (g *Graph) Dense() *Dense {
	if g == nil {
		return &Dense{}
	}
	if d, _ := g.dense.Load().(*Dense); d != nil && len(d.Phase) == len(g.Ops) && len(d.Producer) == len(g.Tensors) {
		return d
	}
	d := newDense(g) // callers racing here each build one; the last stored is kept
	g.dense.Store(d)
	return d
}

// newDense builds the index. Tensor IDs out of range in an op's inputs or
// outputs are kept as they are; an alias out of range or in a cycle ends
// the root walk where StorageOf ends it; the first such problem is kept
// for Err.
func newDense(g *Graph) *Dense {
	nt, no := len(g.Tensors), len(g.Ops)
	d := &Dense{
		Producer:     make([]OpID, nt),
		Root:         make([]TensorID, nt),
		StorageBytes: make([]int64, nt),
		Kind:         make([]TensorKind, nt),
		DType:        make([]DType, nt),
		Phase:        make([]Phase, no),
		Flags:        make([]OpFlags, no),
		Forward:      make([]OpID, no),
		Type:         make([]int32, no),
		cycle:        NoTensor,
		early:        NoTensor,
		inStart:      make([]int32, no+1),
		outStart:     make([]int32, no+1),
	}
	inT := func(t TensorID) bool { return t >= 0 && int(t) < nt }
	inO := func(o OpID) bool { return o >= 0 && int(o) < no }
	for i := range g.Tensors {
		t := &g.Tensors[i]
		d.Producer[i], d.Kind[i], d.DType[i] = t.Producer, t.Kind, t.DType
		switch {
		case d.err != nil:
		case t.AliasOf != NoTensor && !inT(t.AliasOf):
			d.err = fmt.Errorf("tensors[%d]: alias of tensor %d, not defined: %w", i, t.AliasOf, ErrInvalid)
		case t.Producer != NoOp && !inO(t.Producer):
			d.err = fmt.Errorf("tensors[%d]: producer op %d, not defined: %w", i, t.Producer, ErrInvalid)
		case t.Bytes < 0:
			d.err = fmt.Errorf("tensors[%d]: bytes %d, expected >= 0: %w", i, t.Bytes, ErrInvalid)
		}
		if t.AliasOf == NoTensor {
			d.Root[i] = TensorID(i)
			d.StorageBytes[i] = t.Bytes
			continue
		}
		if a := t.AliasOf; inT(a) && d.early == NoTensor {
			if bp := g.Tensors[a].Producer; bp != NoOp && (t.Producer == NoOp || t.Producer < bp) {
				d.early = TensorID(i)
			}
		}
		r := g.StorageOf(TensorID(i))
		d.Root[i] = r
		if a := g.Tensors[r].AliasOf; inT(a) && d.cycle == NoTensor {
			d.cycle = TensorID(i) // the walk stopped on its bound
		}
	}
	code := make(map[string]int32)
	nin, nout := 0, 0
	for i := range g.Ops {
		o := &g.Ops[i]
		d.Phase[i], d.Flags[i], d.Forward[i] = o.Phase, o.Flags, o.Forward
		c, ok := code[o.Type]
		if !ok {
			c = int32(len(d.Types))
			code[o.Type] = c
			d.Types = append(d.Types, o.Type)
		}
		d.Type[i] = c
		if _, ok := o.Attrs[AttrHolds]; ok {
			d.Holders = append(d.Holders, OpID(i))
		}
		if d.err == nil {
			d.err = opIDsErr(i, o, inT, inO)
		}
		nin += len(o.Inputs)
		nout += len(o.Outputs)
		d.inStart[i+1], d.outStart[i+1] = int32(nin), int32(nout)
	}
	d.ins, d.outs = make([]TensorID, 0, nin), make([]TensorID, 0, nout)
	for i := range g.Ops {
		d.ins = append(d.ins, g.Ops[i].Inputs...)
		d.outs = append(d.outs, g.Ops[i].Outputs...)
	}
	return d
}

// opIDsErr reports the first input, output or forward op of op i that the
// graph does not have.
func opIDsErr(i int, o *Op, inT func(TensorID) bool, inO func(OpID) bool) error {
	for j, t := range o.Inputs {
		if !inT(t) {
			return fmt.Errorf("ops[%d].inputs[%d]: tensor %d, not defined: %w", i, j, t, ErrInvalid)
		}
	}
	for j, t := range o.Outputs {
		if !inT(t) {
			return fmt.Errorf("ops[%d].outputs[%d]: tensor %d, not defined: %w", i, j, t, ErrInvalid)
		}
	}
	if o.Forward != NoOp && !inO(o.Forward) {
		return fmt.Errorf("ops[%d].forward: op %d, not defined: %w", i, o.Forward, ErrInvalid)
	}
	return nil
}
