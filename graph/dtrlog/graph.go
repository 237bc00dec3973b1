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
	opOf := make([]graph.OpID, len(tr.Ops))
	mutated := map[string]string{"dtr_mutate": "1"} // one map for every MUTATE (op attributes are read-only)
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
			gop.Attrs = mutated
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
	if g == nil {
		return nil, errors.New("dtrlog: FromGraph of a nil graph")
	}
	if len(g.Ops) == 0 {
		return nil, fmt.Errorf("dtrlog: FromGraph: graph %q has no ops: expected at least one (a DTR log needs a CALL)", g.Name)
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
				return nil, fmt.Errorf("dtrlog: FromGraph: op %d input %d: expected a tensor < %d", i, in, len(g.Tensors))
			}
			last[in] = int32(i)
		}
	}
	out := []Instr{{Kind: Annotate, Annotation: AnnotationStart}}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.Producer != graph.NoOp {
			continue
		}
		n := name(graph.TensorID(i))
		out = append(out, Instr{Kind: Constant, Name: n}, Instr{Kind: Memory, Name: n, Memory: t.StorageBytes()})
	}
	bwd := false
	copied := make([]bool, len(g.Tensors)) // outputs of a MUTATE, named by a COPY
	var al []int
	var args []graph.TensorID
	for i := range g.Ops {
		o := &g.Ops[i]
		if !bwd && o.Phase == graph.Backward {
			bwd = true
			out = append(out, Instr{Kind: Annotate, Annotation: AnnotationBackward})
		}
		tm := o.TimeNs
		if timeNs != nil {
			tm = timeNs(graph.OpID(i))
		}
		if tm < 0 {
			return nil, fmt.Errorf("dtrlog: FromGraph: op %d %q: time %d ns: expected >= 0", i, o.Name, tm)
		}
		for _, r := range o.Outputs {
			if int(r) < 0 || int(r) >= len(g.Tensors) {
				return nil, fmt.Errorf("dtrlog: FromGraph: op %d output %d: expected a tensor < %d", i, r, len(g.Tensors))
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
			out = append(out, m)
			for j, r := range o.Outputs {
				out = append(out, Instr{Kind: Copy, Dst: name(r), Src: name(o.Inputs[al[j]])})
				copied[r] = true
			}
			out = appendReleases(out, g, o, int32(i), last, rel, name)
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
		out = append(out, call)
		for j, r := range o.Outputs {
			b := g.Tensors[r].Bytes
			if al[j] >= 0 {
				b = 0
			}
			out = append(out, Instr{Kind: Memory, Name: name(r), Memory: b}, Instr{Kind: Alias, Name: name(r), Alias: al[j]})
		}
		out = appendReleases(out, g, o, int32(i), last, rel, name)
	}
	return out, nil
}

// appendReleases appends a RELEASE of each distinct input of op o (number
// i) whose last reader it is, unless the input comes from outside the step
// (rel finds the repeated inputs).
func appendReleases(out []Instr, g *graph.Graph, o *graph.Op, i int32, last []int32, rel *dedup.Stamps, name func(graph.TensorID) string) []Instr {
	rel.Next()
	for _, in := range o.Inputs {
		if last[in] != i || g.Tensors[in].Producer == graph.NoOp || rel.Seen(int32(in)) {
			continue
		}
		out = append(out, Instr{Kind: Release, Name: name(in)})
	}
	return out
}
