package graph

import (
	"fmt"
)

// Builder assembles a Graph op by op, in execution order. Mistakes (bad
// shapes, unknown tensors) are collected and returned by Build, so a network
// description reads as a straight sequence of calls:
//
//	b := graph.NewBuilder("mlp")
//	x := b.Input("x", graph.F32, 32, 784)
//	w := b.Parameter("fc.weight", graph.F32, 10, 784)
//	y := b.Op("linear", "fc", x, w).Out("y", graph.F32, 32, 10).FLOPs(2 * 32 * 784 * 10).T()
//	g, err := b.Build()
type Builder struct {
	g     Graph
	phase Phase
	errs  []error
	// Chunks that small per-op slices (inputs, outputs, shapes) are carved
	// from, so that building a graph costs a few allocations per thousand
	// ops instead of several per op.
	ids  []TensorID
	dims []int64
	// Equal shapes and attribute sets share one copy (intern.go).
	shapes shapeTable
	attrs  attrTable
}

// arenaChunk is the number of elements per chunk of carve.
const arenaChunk = 4096

// carve returns a copy of src in a slice cut from *chunk (full slice
// expression: cap == len, so appending to the result never writes into the
// chunk). An empty src gives nil.
func carve[E any](chunk *[]E, src []E) []E {
	n := len(src)
	if n == 0 {
		return nil
	}
	if cap(*chunk)-len(*chunk) < n {
		*chunk = make([]E, 0, max(arenaChunk, n))
	}
	c := *chunk
	l := len(c)
	c = append(c, src...)
	*chunk = c
	return c[l : l+n : l+n]
}

// NewBuilder starts an empty graph. Ops are added in the forward phase until
// SetPhase changes it.
func NewBuilder(name string) *Builder {
	return &Builder{g: Graph{Name: name, Loss: NoTensor}, phase: Forward}
}

// FromGraph returns a builder that appends to a copy of g's ops and tensors
// (their slices are copied; per-op input and output slices are shared until
// modified, which builders never do). A nil g is the empty graph: the
// builder starts from nothing, as NewBuilder("") does.
func FromGraph(g *Graph) *Builder { return fromGraph(g, 0, 0) }

// fromGraph is FromGraph with room for extraOps more ops and extraTensors
// more tensors (one copy of the arrays instead of a copy and regrowth).
func fromGraph(g *Graph, extraOps, extraTensors int) *Builder {
	if g == nil {
		return NewBuilder("")
	}
	c := Graph{
		Name:    g.Name,
		Ops:     grownCopy(g.Ops, extraOps),
		Tensors: grownCopy(g.Tensors, extraTensors),
		Loss:    g.Loss,
	}
	if g.Attrs != nil {
		c.Attrs = make(map[string]string, len(g.Attrs))
		for k, v := range g.Attrs {
			c.Attrs[k] = v
		}
	}
	return &Builder{g: c, phase: Forward}
}

// Reserve makes room for ops more ops and tensors more tensors, so that
// importers that know a graph's size build it without regrowing (and
// copying) the op and tensor arrays. Negative counts are ignored.
func (b *Builder) Reserve(ops, tensors int) {
	b.g.Ops = reserve(b.g.Ops, ops)
	b.g.Tensors = reserve(b.g.Tensors, tensors)
}

// SetPhase sets the phase of the ops added from now on.
func (b *Builder) SetPhase(p Phase) { b.phase = p }

// Phase returns the phase new ops get.
func (b *Builder) Phase() Phase { return b.phase }

// Errorf records an error; Build will return it. Layer helpers use it to
// report bad arguments without panicking.
func (b *Builder) Errorf(format string, a ...any) {
	b.errs = append(b.errs, fmt.Errorf(format, a...))
}

// Err returns the errors recorded so far, joined.
//
// It names the first mistake and counts the others, so that one bad size
// repeated over a hundred layers is one line.
func (b *Builder) Err() error {
	switch len(b.errs) {
	case 0:
		return nil
	case 1:
		return b.errs[0]
	}
	return &builderErrors{errs: b.errs}
}

// builderErrors is what Err returns for several mistakes: the first, and
// how many more (all of them match errors.Is / errors.As).
type builderErrors struct{ errs []error }

func (e *builderErrors) Error() string {
	return fmt.Sprintf("%v (and %d more errors)", e.errs[0], len(e.errs)-1)
}

func (e *builderErrors) Unwrap() []error { return e.errs }

// SetLoss marks the loss tensor.
func (b *Builder) SetLoss(t TensorID) { b.g.Loss = t }

// SetAttr sets a graph-level attribute.
func (b *Builder) SetAttr(k, v string) {
	if b.g.Attrs == nil {
		b.g.Attrs = map[string]string{}
	}
	b.g.Attrs[k] = v
}

// Graph gives read access to the graph under construction (for layer helpers
// that need shapes of existing tensors). Do not keep the pointer past Build.
func (b *Builder) Graph() *Graph { return &b.g }

// Shape returns a tensor's shape (nil for an unknown ID, which is recorded as
// an error).
func (b *Builder) Shape(t TensorID) Shape {
	if !b.valid(t) {
		b.Errorf("tensor %d is not defined", t)
		return nil
	}
	return b.g.Tensors[t].Shape
}

// DType returns a tensor's dtype (0 for an unknown ID).
func (b *Builder) DType(t TensorID) DType {
	if !b.valid(t) {
		b.Errorf("tensor %d is not defined", t)
		return 0
	}
	return b.g.Tensors[t].DType
}

func (b *Builder) valid(t TensorID) bool { return t >= 0 && int(t) < len(b.g.Tensors) }

// NewTensor adds a tensor from outside the step (no producer) of the given
// kind, with bytes derived from shape and dtype.
func (b *Builder) NewTensor(name string, kind TensorKind, dt DType, shape ...int64) TensorID {
	id := TensorID(len(b.g.Tensors))
	sh := b.shapes.intern(&b.dims, shape)
	by, err := sh.Bytes(dt)
	if err != nil {
		b.Errorf("tensor %q: %w", name, err)
	}
	b.g.Tensors = append(growCap(b.g.Tensors), Tensor{ID: id, Name: name, DType: dt, Shape: sh, Bytes: by, Kind: kind, Producer: NoOp, AliasOf: NoTensor})
	return id
}

// Input adds a per-step input (data, labels).
func (b *Builder) Input(name string, dt DType, shape ...int64) TensorID {
	return b.NewTensor(name, Input, dt, shape...)
}

// Parameter adds a trainable weight.
func (b *Builder) Parameter(name string, dt DType, shape ...int64) TensorID {
	return b.NewTensor(name, Parameter, dt, shape...)
}

// Constant adds a fixed tensor (a buffer such as batch norm's running mean).
func (b *Builder) Constant(name string, dt DType, shape ...int64) TensorID {
	return b.NewTensor(name, Constant, dt, shape...)
}

// growCap returns s with room for at least one more element, doubling the
// capacity when full. append alone grows large slices by only 1.25x, which
// for million-op graphs copies the op array about five times over.
func growCap[E any](s []E) []E {
	if len(s) < cap(s) {
		return s
	}
	return reserve(s, cap(s)+64)
}

// reserve returns s with room for at least extra more elements.
func reserve[E any](s []E, extra int) []E {
	if extra <= 0 || cap(s)-len(s) >= extra {
		return s
	}
	return grownCopy(s, extra)
}

// grownCopy returns a copy of s in a new array with room for extra more
// elements (none when extra <= 0), never sharing s's array. It copies as
// append does when it grows a slice: one copy whose write barrier reads
// only the source. Copying into a made slice while the collector marks
// (it did in chunks, so that the copy could be preempted) reads each
// destination word first, which maps every fresh page to the shared zero
// page before the write copies it, a TLB flush on each core the process
// runs on: perf put 20% of a 100k-op MLP report there and 20% more in
// the collector waiting to stop the copying goroutine, and the report
// took 0.30 s instead of 0.16 s (BenchmarkBuild100k in graph/models).
func grownCopy[E any](s []E, extra int) []E {
	switch {
	case len(s) == 0:
		return make([]E, 0, max(extra, 0))
	case extra <= 0:
		return append([]E(nil), s...)
	}
	return append(s[:len(s):len(s)], make([]E, extra)...)[:len(s)]
}

// OpBuilder adds outputs and costs to the op just created by Builder.Op.
type OpBuilder struct {
	b  *Builder
	id OpID
}

// Op appends an op of the given type reading inputs, in the builder's
// current phase. Chain Out, FLOPs, ... on the result and finish with T or
// Output to get the output tensor IDs.
func (b *Builder) Op(typ, name string, inputs ...TensorID) *OpBuilder {
	id := OpID(len(b.g.Ops))
	for _, t := range inputs {
		if !b.valid(t) {
			b.Errorf("op %q (%s): input tensor %d is not defined", name, typ, t)
		}
	}
	b.g.Ops = append(growCap(b.g.Ops), Op{ID: id, Name: name, Type: typ, Phase: b.phase,
		Inputs: carve(&b.ids, inputs), Forward: NoOp})
	return &OpBuilder{b: b, id: id}
}

func (o *OpBuilder) op() *Op {
	if o.b == nil {
		// The zero OpBuilder (not made by Builder.Op) builds nothing.
		return &Op{ID: NoOp, Forward: NoOp}
	}
	if o.id < 0 || int(o.id) >= len(o.b.g.Ops) {
		// Only possible when an OpBuilder is used after Build: record it
		// and hand out a throwaway op instead of panicking.
		o.b.Errorf("op %d: OpBuilder used after Build", o.id)
		return &Op{ID: o.id, Forward: NoOp}
	}
	return &o.b.g.Ops[o.id]
}

// ID returns the op's ID.
func (o *OpBuilder) ID() OpID { return o.id }

func (o *OpBuilder) defaultKind() TensorKind {
	switch o.op().Phase {
	case Backward:
		return Gradient
	case Update:
		return Parameter
	}
	return Activation
}

// Out adds an output tensor with a shape; its kind follows the op's phase
// (activation, gradient, or parameter for update ops) unless OutKind is used.
func (o *OpBuilder) Out(name string, dt DType, shape ...int64) *OpBuilder {
	return o.OutKind(name, o.defaultKind(), dt, shape...)
}

// OutKind adds an output tensor of an explicit kind.
func (o *OpBuilder) OutKind(name string, kind TensorKind, dt DType, shape ...int64) *OpBuilder {
	if o.b == nil {
		return o // the zero OpBuilder builds nothing
	}
	t := o.b.NewTensor(name, kind, dt, shape...)
	o.b.g.Tensors[t].Producer = o.id
	o.addOutput(t)
	return o
}

// addOutput appends t to the op's outputs; the first output is carved from
// the builder's chunk.
func (o *OpBuilder) addOutput(t TensorID) {
	op := o.op()
	if op.Outputs == nil {
		op.Outputs = carve(&o.b.ids, []TensorID{t})
		return
	}
	op.Outputs = append(op.Outputs, t)
}

// OutBytes adds an output known only by its size.
func (o *OpBuilder) OutBytes(name string, bytes int64) *OpBuilder {
	if o.b == nil {
		return o // the zero OpBuilder builds nothing
	}
	if bytes < 0 {
		o.b.Errorf("op %q: output %q has %d bytes, expected >= 0", o.op().Name, name, bytes)
		bytes = 0
	}
	id := TensorID(len(o.b.g.Tensors))
	o.b.g.Tensors = append(growCap(o.b.g.Tensors), Tensor{ID: id, Name: name, Bytes: bytes, Kind: o.defaultKind(), Producer: o.id, AliasOf: NoTensor})
	o.addOutput(id)
	return o
}

// Alias makes the most recently added output a view of tensor of (sharing its
// storage, adding no bytes).
func (o *OpBuilder) Alias(of TensorID) *OpBuilder {
	if o.b == nil {
		return o // the zero OpBuilder builds nothing
	}
	op := o.op()
	if len(op.Outputs) == 0 || !o.b.valid(of) {
		o.b.Errorf("op %q: Alias(%d) needs an output and a defined tensor", op.Name, of)
		return o
	}
	o.b.g.Tensors[op.Outputs[len(op.Outputs)-1]].AliasOf = of
	return o
}

// FLOPs sets the op's floating-point operation count.
func (o *OpBuilder) FLOPs(n int64) *OpBuilder { o.op().FLOPs = n; return o }

// BytesAccessed sets the bytes the op reads and writes.
func (o *OpBuilder) BytesAccessed(n int64) *OpBuilder { o.op().BytesAccessed = n; return o }

// TimeNs sets a measured time that overrides the cost model.
func (o *OpBuilder) TimeNs(ns int64) *OpBuilder { o.op().TimeNs = ns; return o }

// Workspace sets the op's temporary memory.
func (o *OpBuilder) Workspace(n int64) *OpBuilder { o.op().Workspace = n; return o }

// Flags adds op flags.
func (o *OpBuilder) Flags(f OpFlags) *OpBuilder { o.op().Flags |= f; return o }

// Forward records the forward op a backward op differentiates.
func (o *OpBuilder) Forward(f OpID) *OpBuilder { o.op().Forward = f; return o }

// Attr sets an attribute.
func (o *OpBuilder) Attr(k, v string) *OpBuilder {
	if o.b == nil {
		return o // the zero OpBuilder builds nothing
	}
	op := o.op()
	if op.Attrs == nil {
		op.Attrs = map[string]string{}
	}
	op.Attrs[k] = v
	return o
}

// T returns the op's first output (NoTensor, recorded as an error, if it has
// none).
func (o *OpBuilder) T() TensorID { return o.Output(0) }

// Output returns the op's i-th output.
func (o *OpBuilder) Output(i int) TensorID {
	if o.b == nil {
		return NoTensor
	}
	op := o.op()
	if i < 0 || i >= len(op.Outputs) {
		o.b.Errorf("op %q has %d outputs, asked for output %d", op.Name, len(op.Outputs), i)
		return NoTensor
	}
	return op.Outputs[i]
}

// Build validates and returns the graph. The builder must not be used
// afterwards.
func (b *Builder) Build() (*Graph, error) {
	if err := b.Err(); err != nil {
		return nil, fmt.Errorf("graph %q: %w", b.g.Name, err)
	}
	g := b.g
	b.g = Graph{}
	for i := range g.Ops {
		if o := &g.Ops[i]; o.Attrs != nil {
			o.Attrs = b.attrs.intern(o.Attrs)
		}
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return &g, nil
}
