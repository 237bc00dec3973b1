package graph

// Dense holds, as flat arrays indexed by ID, the facts about a graph's
// tensors and ops that planners and the simulator read in their inner
// loops. An Op is about 150 bytes and a Tensor about 70, so a loop that
// reads one field of each touches a cache line per element; on a graph of
// 100k ops that no longer fits in cache. The same facts here take about 20
// bytes per tensor and 30 per op (with two inputs and one output), and a
// pass over them reads consecutive memory.
//
// A Dense is read-only: its slices alias the graph's index, so do not
// modify them. Get it with (*Graph).Dense.
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

	cycle    TensorID // the first tensor whose alias chain is a cycle
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
	return d.ins[d.inStart[op]:d.inStart[op+1]]
}

// Outputs returns op's outputs (ops[op].Outputs), or nil for an ID the graph
// does not have.
func (d *Dense) Outputs(op OpID) []TensorID {
	if d == nil || op < 0 || int(op)+1 >= len(d.outStart) {
		return nil
	}
	return d.outs[d.outStart[op]:d.outStart[op+1]]
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
// graph as it was when built: after changing an op's inputs, outputs,
// phase or flags, or a tensor's producer, alias, bytes or kind, call
// Validate, which drops it. A nil graph gives an empty index.
//
// The index does not check the graph: on a graph that Validate would
// reject, it holds whatever IDs the ops name.
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
// outputs are kept as they are (Validate reports them); an alias out of
// range or in a cycle ends the root walk where StorageOf ends it.
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
		cycle:        NoTensor,
		inStart:      make([]int32, no+1),
		outStart:     make([]int32, no+1),
	}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		d.Producer[i], d.Kind[i], d.DType[i] = t.Producer, t.Kind, t.DType
	}
	for i := range g.Tensors {
		if g.Tensors[i].AliasOf == NoTensor {
			d.Root[i] = TensorID(i)
			d.StorageBytes[i] = g.Tensors[i].Bytes
			continue
		}
		r := g.StorageOf(TensorID(i))
		d.Root[i] = r
		if a := g.Tensors[r].AliasOf; a >= 0 && int(a) < nt && d.cycle == NoTensor {
			d.cycle = TensorID(i) // the walk stopped on its bound
		}
	}
	nin, nout := 0, 0
	for i := range g.Ops {
		o := &g.Ops[i]
		d.Phase[i], d.Flags[i], d.Forward[i] = o.Phase, o.Flags, o.Forward
		if _, ok := o.Attrs[AttrHolds]; ok {
			d.Holders = append(d.Holders, OpID(i))
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
