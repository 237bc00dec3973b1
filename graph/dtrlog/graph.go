package dtrlog

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/internal/dedup"
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
	if len(tr.Ops) == 0 {
		return nil, fmt.Errorf("%w: ToGraph of a trace without ops (expected one from Compile, which has at least one CALL)", ErrInvalid)
	}
	g := &graph.Graph{Name: tr.Name, Loss: graph.NoTensor}
	g.Tensors = make([]graph.Tensor, len(tr.Tensors))
	// The ops and their input and output lists are allocated at their
	// final sizes, the lists cut from one array.
	nops, nids := 0, 0
	for i := range tr.Ops {
		if o := &tr.Ops[i]; !o.Constant {
			nops++
			nids += len(o.Args) + len(o.Results)
		}
	}
	g.Ops = make([]graph.Op, 0, nops)
	b := graphBuilder{g: g, ids: make([]graph.TensorID, nids)}
	opOf := make([]graph.OpID, len(tr.Ops))
	for i := range tr.Ops {
		opOf[i] = b.op(int32(i), &tr.Ops[i])
	}
	for i := range tr.Tensors {
		t := &tr.Tensors[i]
		g.Tensors[i] = graphTensor(graph.TensorID(i), t, &tr.Ops[t.Op], opOf[t.Op])
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("dtr log to graph: %w", err)
	}
	return g, nil
}

// graphBuilder makes a graph's ops from a trace's.
type graphBuilder struct {
	g *graph.Graph
	// ids is where the ops' input and output lists are cut from; chunks
	// of idChunk when their total is not known ahead
	ids []graph.TensorID
	// mutated is the attributes of every MUTATE's op (one map: op
	// attributes are read-only)
	mutated map[string]string
}

// idChunk is the length of the chunks a graphBuilder cuts lists from when
// it does not know their total.
const idChunk = 1 << 16

// cut returns n tensor IDs cut from b.ids (capacity n: appending to one
// list cannot write into the next).
func (b *graphBuilder) cut(n int) []graph.TensorID {
	if n > len(b.ids) || b.ids == nil { // an empty list is not nil, as ToGraph's
		b.ids = make([]graph.TensorID, max(n, idChunk))
	}
	l := b.ids[:n:n]
	b.ids = b.ids[n:]
	return l
}

// op adds the graph op of trace op o (number i) and returns its ID, or
// NoOp for a CONSTANT (its tensor is a constant without producer).
func (b *graphBuilder) op(i int32, o *Op) graph.OpID {
	if o.Constant {
		return graph.NoOp
	}
	g := b.g
	id := graph.OpID(len(g.Ops))
	ph := graph.Forward
	if o.Backward {
		ph = graph.Backward
	}
	gop := graph.Op{ID: id, Name: o.Name + "#" + strconv.Itoa(int(i)), Type: o.Name, Phase: ph, TimeNs: o.Time, Forward: graph.NoOp}
	gop.Inputs = b.cut(len(o.Args))
	for j, a := range o.Args {
		gop.Inputs[j] = graph.TensorID(a)
	}
	gop.Outputs = b.cut(len(o.Results))
	for j, r := range o.Results {
		gop.Outputs[j] = graph.TensorID(r)
	}
	if o.Mutate {
		if b.mutated == nil {
			b.mutated = map[string]string{"dtr_mutate": "1"}
		}
		gop.Attrs = b.mutated
	}
	g.Ops = append(g.Ops, gop)
	return id
}

// graphTensor is the graph tensor of trace tensor t (ID id), a result of
// trace op o, whose graph op is producer.
func graphTensor(id graph.TensorID, t *Tensor, o *Op, producer graph.OpID) graph.Tensor {
	gt := graph.Tensor{ID: id, Name: t.Name, Bytes: t.StorageSize, Producer: producer, AliasOf: graph.NoTensor}
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
	return gt
}

// ReadGraph compiles a log and converts it to a graph: the graph of
// ToGraph(Compile(r)), or Compile's error. It builds the graph while it
// reads, without keeping the trace: on a log of a million ops, the trace
// and the graph together took about 0.75 GB at the peak.
func ReadGraph(r io.Reader) (*graph.Graph, error) {
	// Tensors not nil, as ToGraph's: a log whose ops make none has none.
	g := &graph.Graph{Loss: graph.NoTensor, Tensors: []graph.Tensor{}}
	b := graphBuilder{g: g}
	c := newCompiler()
	c.sink = func(i int32, o *Op) {
		id := b.op(i, o)
		for _, r := range o.Results {
			t := &c.t.Tensors[r]
			for len(g.Tensors) <= int(r) {
				g.Tensors = append(g.Tensors, graph.Tensor{})
			}
			g.Tensors[r] = graphTensor(graph.TensorID(r), t, o, id)
		}
	}
	tr, err := compile(c, r)
	if err != nil {
		return nil, err
	}
	g.Name = tr.Name
	if len(g.Tensors) != len(tr.Tensors) {
		return nil, fmt.Errorf("dtrlog: ReadGraph: %d tensors made for %d in the log (a tensor that is no op's result)", len(g.Tensors), len(tr.Tensors))
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("dtr log to graph: %w", err)
	}
	return g, nil
}

// FromGraph writes g's default schedule as DTR log instructions (the
// inverse of ToGraph, up to names): START; every tensor without a producer
// as a CONSTANT with its MEMORY line (in tensor order); then every op in
// order as a CALL named by its type with one MEMORY and ALIAS line per output (a
// view's ALIAS is the index of the input sharing its storage; the CALL of an
// op whose outputs are all views, not in-place, lists only the inputs they
// view; an in-place op writing whole storages is a MUTATE of the inputs it
// writes, then a COPY naming each output), TIME from timeNs (nil: the op's TimeNs), a BACKWARD
// annotation before the first op of the backward phase, and a RELEASE of
// each input after its last reader.
// Tensors are named t<ID>. Outputs nobody reads stay referenced (pinned at
// the end by the replay), as RunOnMachine keeps them.
func FromGraph(g *graph.Graph, timeNs func(graph.OpID) int64) ([]Instr, error) {
	var out []Instr
	err := emitGraph("FromGraph", g, timeNs, func(in Instr) error {
		out = append(out, in)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// WriteGraph writes FromGraph(g, timeNs)'s instructions to w as a DTR log,
// each line as soon as its instruction is made, and flushes. FromGraph
// holds every instruction at once (3.0 to 3.7 GiB of RSS converting a zoo
// graph of a million ops); WriteGraph needs a few arrays of g's size
// beyond g itself. On an error (g invalid, a negative time, w failing)
// part of the log may have been written: write to a temporary file and
// keep it only on success.
func WriteGraph(w io.Writer, g *graph.Graph, timeNs func(graph.OpID) int64) error {
	if w == nil {
		return ErrNoWriter
	}
	wr := NewWriter(w)
	if err := emitGraph("WriteGraph", g, timeNs, wr.Write); err != nil {
		return err
	}
	return wr.Flush()
}

// emitGraph makes FromGraph's instructions in order and passes each to
// emit (fresh slices: emit may keep them), stopping at emit's first error.
// fn names the caller in errors.
func emitGraph(fn string, g *graph.Graph, timeNs func(graph.OpID) int64, emit func(Instr) error) error {
	if g == nil {
		return fmt.Errorf("dtrlog: %s of a nil graph", fn)
	}
	if len(g.Ops) == 0 {
		return fmt.Errorf("dtrlog: %s: graph %q has no ops: expected at least one (a DTR log needs a CALL)", fn, g.Name)
	}
	name := func(t graph.TensorID) string { return "t" + strconv.Itoa(int(t)) }
	last := make([]int32, len(g.Tensors))
	rel := dedup.New(len(g.Tensors)) // an op's distinct inputs
	for i := range last {
		last[i] = -1
	}
	for i := range g.Ops {
		for _, in := range g.Ops[i].Inputs {
			if int(in) < 0 || int(in) >= len(g.Tensors) {
				return fmt.Errorf("dtrlog: %s: op %d input %d: expected a tensor < %d", fn, i, in, len(g.Tensors))
			}
			last[in] = int32(i)
		}
	}
	if err := emit(Instr{Kind: Annotate, Annotation: AnnotationStart}); err != nil {
		return err
	}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.Producer != graph.NoOp {
			continue
		}
		n := name(graph.TensorID(i))
		if err := emit(Instr{Kind: Constant, Name: n}); err != nil {
			return err
		}
		if err := emit(Instr{Kind: Memory, Name: n, Memory: t.StorageBytes()}); err != nil {
			return err
		}
	}
	bwd := false
	copied := make([]bool, len(g.Tensors)) // outputs of a MUTATE, named by a COPY
	var al []int
	var args []graph.TensorID
	for i := range g.Ops {
		o := &g.Ops[i]
		if !bwd && o.Phase == graph.Backward {
			bwd = true
			if err := emit(Instr{Kind: Annotate, Annotation: AnnotationBackward}); err != nil {
				return err
			}
		}
		tm := o.TimeNs
		if timeNs != nil {
			tm = timeNs(graph.OpID(i))
		}
		if tm < 0 {
			return fmt.Errorf("dtrlog: %s: op %d %q: time %d ns: expected >= 0", fn, i, o.Name, tm)
		}
		for _, r := range o.Outputs {
			if int(r) < 0 || int(r) >= len(g.Tensors) {
				return fmt.Errorf("dtrlog: %s: op %d output %d: expected a tensor < %d", fn, i, r, len(g.Tensors))
			}
		}
		// A result views input j when they share a storage: a view of a
		// view names the storage's root as AliasOf, not the input it was
		// taken from.
		al = al[:0]
		views := len(o.Outputs) > 0
		for _, r := range o.Outputs {
			k := -1
			if g.Tensors[r].AliasOf != graph.NoTensor {
				root := g.StorageOf(r)
				for j, in := range o.Inputs {
					if g.StorageOf(in) == root {
						k = j
						break
					}
				}
			}
			al = append(al, k)
			views = views && k >= 0
		}
		// An in-place write of a whole storage is a MUTATE of the inputs it
		// writes, as the DTR prototype logs it: each written input gets a
		// new version (its name is rebound to it; the copy-on-write costs
		// the storage's size), and each output becomes another reference
		// to that version (COPY). As a CALL whose outputs view the written
		// storage, its other inputs would become parents of an existing
		// storage, which the reference simulator's regions cannot absorb.
		// A write through a view stays a CALL: a MUTATE would copy the
		// whole storage for each view written (four gate buffers for an
		// LSTM cell's in-place activations of its chunks) where PyTorch
		// allocates nothing. A written input is a whole storage when it is
		// the storage's root or the output of such a MUTATE (a COPY naming
		// the new version: `c += a; c += b` writes c twice).
		whole := views && o.Flags.Has(graph.InPlace)
		for _, k := range al {
			whole = whole && (g.Tensors[o.Inputs[k]].AliasOf == graph.NoTensor || copied[o.Inputs[k]])
		}
		if whole {
			m := Instr{Kind: Mutate, Name: o.Type, Time: tm, Args: make([]string, len(o.Inputs))}
			for j, in := range o.Inputs {
				m.Args[j] = name(in)
				if slices.Contains(al, j) {
					m.Mutate = append(m.Mutate, j)
				}
			}
			if err := emit(m); err != nil {
				return err
			}
			for j, r := range o.Outputs {
				if err := emit(Instr{Kind: Copy, Dst: name(r), Src: name(o.Inputs[al[j]])}); err != nil {
					return err
				}
				copied[r] = true
			}
			if err := emitReleases(emit, g, o, int32(i), last, rel, name); err != nil {
				return err
			}
			continue
		}
		// A view (not an in-place write) reads no data: its CALL lists only
		// the inputs its results view. Other inputs of such an op (the
		// saved tensors a traced backward node unpacks before its first
		// kernel) would otherwise become parents of the viewed storage,
		// which no real DTR log has and the reference simulator's regions
		// cannot absorb.
		args = append(args[:0], o.Inputs...)
		if views && !o.Flags.Has(graph.InPlace) {
			args = args[:0]
			for j, in := range o.Inputs {
				if !slices.Contains(al, j) {
					continue
				}
				for r := range al {
					if al[r] == j {
						al[r] = -2 - len(args) // renumbered, told apart from input numbers
					}
				}
				args = append(args, in)
			}
			for r := range al {
				al[r] = -2 - al[r]
			}
		}
		call := Instr{Kind: Call, Name: o.Type, Time: tm, Args: make([]string, len(args)), Results: make([]string, len(o.Outputs))}
		for j, in := range args {
			call.Args[j] = name(in)
		}
		for j, r := range o.Outputs {
			call.Results[j] = name(r)
		}
		if err := emit(call); err != nil {
			return err
		}
		for j, r := range o.Outputs {
			b := g.Tensors[r].Bytes
			if al[j] >= 0 {
				b = 0
			}
			if err := emit(Instr{Kind: Memory, Name: name(r), Memory: b}); err != nil {
				return err
			}
			if err := emit(Instr{Kind: Alias, Name: name(r), Alias: al[j]}); err != nil {
				return err
			}
		}
		if err := emitReleases(emit, g, o, int32(i), last, rel, name); err != nil {
			return err
		}
	}
	return nil
}

// emitReleases emits a RELEASE of each distinct input of op o (number i)
// whose last reader it is, unless the input comes from outside the step
// (rel finds the repeated inputs).
func emitReleases(emit func(Instr) error, g *graph.Graph, o *graph.Op, i int32, last []int32, rel *dedup.Stamps, name func(graph.TensorID) string) error {
	rel.Next()
	for _, in := range o.Inputs {
		if last[in] != i || g.Tensors[in].Producer == graph.NoOp || rel.Seen(int32(in)) {
			continue
		}
		if err := emit(Instr{Kind: Release, Name: name(in)}); err != nil {
			return err
		}
	}
	return nil
}
