package graph

import (
	"errors"
	"fmt"
	"strconv"
)

// ValidationError describes what is wrong with a graph, naming the op and/or
// tensor concerned. Path, when set, locates the item in the source file (for
// example "ops[12].inputs[1]" in the JSON format).
type ValidationError struct {
	Op     OpID     // NoOp if not about an op
	Tensor TensorID // NoTensor if not about a tensor
	Path   string
	Msg    string
	g      *Graph
}

func (e *ValidationError) Error() string {
	s := ""
	if e.Path != "" {
		s = e.Path + ": "
	}
	if e.Op != NoOp {
		s += "op " + e.g.opLabel(e.Op) + ": "
	}
	if e.Tensor != NoTensor && e.Op == NoOp {
		s += "tensor " + e.g.tensorLabel(e.Tensor) + ": "
	}
	return s + e.Msg
}

// ErrInvalid is wrapped by every validation error, so callers can test with
// errors.Is(err, graph.ErrInvalid).
var ErrInvalid = errors.New("invalid graph")

// Unwrap lets errors.Is match ErrInvalid.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

func (g *Graph) opLabel(id OpID) string {
	if g == nil || id < 0 || int(id) >= len(g.Ops) {
		return fmt.Sprintf("#%d", id)
	}
	o := &g.Ops[id]
	return fmt.Sprintf("#%d %q (%s)", id, o.Name, o.Type)
}

func (g *Graph) tensorLabel(id TensorID) string {
	if g == nil || id < 0 || int(id) >= len(g.Tensors) {
		return fmt.Sprintf("#%d", id)
	}
	return fmt.Sprintf("#%d %q", id, g.Tensors[id].Name)
}

func (g *Graph) opErr(op OpID, path, format string, a ...any) error {
	return &ValidationError{Op: op, Tensor: NoTensor, Path: path, Msg: fmt.Sprintf(format, a...), g: g}
}

func (g *Graph) tensorErr(t TensorID, path, format string, a ...any) error {
	return &ValidationError{Op: NoOp, Tensor: t, Path: path, Msg: fmt.Sprintf(format, a...), g: g}
}

// tensorPath and opPath build the JSON-format location of a field, e.g.
// "tensors[3].alias_of" or "ops[12].inputs[1]" (j < 0: no element index).
// They run only when an error is reported: formatting a path per element up
// front cost two allocations per op on million-op graphs.
func tensorPath(i int, field string) string {
	return "tensors[" + strconv.Itoa(i) + "]" + field
}

func opPath(i int, field string, j int) string {
	s := "ops[" + strconv.Itoa(i) + "]" + field
	if j >= 0 {
		s += "[" + strconv.Itoa(j) + "]"
	}
	return s
}

// MaxQuantity bounds every size and cost of a graph (a tensor's bytes, an
// op's flops, bytes accessed, time and workspace) and the sums of tensor
// bytes and of op times over the graph: 2^60, so that the simulator's
// clocks and peaks, which add them up, cannot overflow int64.
const MaxQuantity = int64(1) << 60

// Validate checks the graph and builds its consumer index; it drops the
// dense index (Dense), so that the next call indexes the graph as it is
// now, whether or not the check passes. It reports the first problem found: IDs that are not dense indexes, undefined references,
// a tensor produced twice or not by the op it names, ops out of topological
// order (which includes cycles), invalid dtypes, kinds or phases, negative or
// overflowing sizes, aliases of unknown tensors or alias cycles, views of a
// tensor produced by a later op, and backward ops whose forward op does not
// exist. It never panics, whatever the input.
func (g *Graph) Validate() error {
	if g == nil {
		return fmt.Errorf("graph is nil: %w", ErrInvalid)
	}
	if d, _ := g.dense.Load().(*Dense); d != nil {
		g.dense.Store((*Dense)(nil)) // the next Dense call indexes the graph as it is now
	}
	nt, no := len(g.Tensors), len(g.Ops)
	var totalBytes, totalNs int64
	if int64(nt) > 1<<31-1 || int64(no) > 1<<31-1 {
		return fmt.Errorf("graph %q: %d ops, %d tensors: more than 2^31-1: %w", g.Name, no, nt, ErrInvalid)
	}
	if g.Loss != NoTensor && (g.Loss < 0 || int(g.Loss) >= nt) {
		return &ValidationError{Op: NoOp, Tensor: NoTensor, Path: "loss", Msg: fmt.Sprintf("loss tensor %d is not defined (graph has %d tensors)", g.Loss, nt), g: g}
	}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		id := TensorID(i)
		if t.ID != id {
			return g.tensorErr(id, tensorPath(i, ".id"), "ID is %d, expected its index %d", t.ID, i)
		}
		if t.DType != 0 && !t.DType.Valid() {
			return g.tensorErr(id, tensorPath(i, ".dtype"), "dtype %d is not valid", t.DType)
		}
		if !t.Kind.Valid() {
			return g.tensorErr(id, tensorPath(i, ".kind"), "kind %d is not valid", t.Kind)
		}
		if t.Bytes < 0 || t.Bytes > MaxQuantity {
			return g.tensorErr(id, tensorPath(i, ".bytes"), "bytes is %d, expected 0..%d", t.Bytes, MaxQuantity)
		}
		if t.AliasOf == NoTensor {
			if totalBytes += t.Bytes; totalBytes > MaxQuantity {
				return g.tensorErr(id, tensorPath(i, ".bytes"), "the tensors' bytes add up past %d here: expected a smaller graph", MaxQuantity)
			}
		}
		if t.DType != 0 {
			// The byte size must fit as well as the element count.
			if _, err := t.Shape.Bytes(t.DType); err != nil {
				return g.tensorErr(id, tensorPath(i, ".shape"), "%v", err)
			}
		} else if len(t.Shape) > 0 {
			if _, err := t.Shape.NumElements(); err != nil {
				return g.tensorErr(id, tensorPath(i, ".shape"), "%v", err)
			}
		}
		if t.Producer != NoOp && (t.Producer < 0 || int(t.Producer) >= no) {
			return g.tensorErr(id, tensorPath(i, ".producer"), "producer op %d is not defined (graph has %d ops)", t.Producer, no)
		}
		if t.AliasOf != NoTensor {
			if t.AliasOf < 0 || int(t.AliasOf) >= nt {
				return g.tensorErr(id, tensorPath(i, ".alias_of"), "alias of tensor %d, which is not defined (graph has %d tensors)", t.AliasOf, nt)
			}
			if t.AliasOf == id {
				return g.tensorErr(id, tensorPath(i, ".alias_of"), "is an alias of itself")
			}
		}
		if t.Producer == NoOp && t.AliasOf == NoTensor {
			switch t.Kind {
			case Input, Parameter, Constant, OptimizerState:
			default:
				return g.tensorErr(id, tensorPath(i, ""), "%s tensor has no producer op (only inputs, parameters, constants and optimizer state may come from outside)", t.Kind)
			}
		}
	}
	// Alias chains must end: walk each with a step bound.
	for i := range g.Tensors {
		t := TensorID(i)
		for n := 0; g.Tensors[t].AliasOf != NoTensor; n++ {
			if n > nt {
				return g.tensorErr(TensorID(i), tensorPath(i, ".alias_of"), "alias chain forms a cycle")
			}
			t = g.Tensors[t].AliasOf
		}
	}
	produced := make([]OpID, nt)
	for i := range produced {
		produced[i] = NoOp
	}
	for i := range g.Ops {
		o := &g.Ops[i]
		id := OpID(i)
		if o.ID != id {
			return g.opErr(id, opPath(i, ".id", -1), "ID is %d, expected its index %d", o.ID, i)
		}
		if !o.Phase.Valid() {
			return g.opErr(id, opPath(i, ".phase", -1), "phase %d is not valid", o.Phase)
		}
		for _, f := range [...]struct {
			name string
			v    int64
		}{{".flops", o.FLOPs}, {".bytes_accessed", o.BytesAccessed}, {".time_ns", o.TimeNs}, {".workspace", o.Workspace}} {
			if f.v > MaxQuantity {
				return g.opErr(id, opPath(i, f.name, -1), "%s is %d, expected at most %d", f.name[1:], f.v, MaxQuantity)
			}
		}
		if totalNs += o.TimeNs; totalNs > MaxQuantity {
			return g.opErr(id, opPath(i, ".time_ns", -1), "the ops' time_ns add up past %d ns here: expected a smaller total", MaxQuantity)
		}
		if o.FLOPs < 0 || o.BytesAccessed < 0 || o.TimeNs < 0 || o.Workspace < 0 {
			field := ".workspace"
			switch {
			case o.FLOPs < 0:
				field = ".flops"
			case o.BytesAccessed < 0:
				field = ".bytes_accessed"
			case o.TimeNs < 0:
				field = ".time_ns"
			}
			return g.opErr(id, opPath(i, field, -1), "negative cost (flops %d, bytes accessed %d, time %d ns, workspace %d), expected >= 0",
				o.FLOPs, o.BytesAccessed, o.TimeNs, o.Workspace)
		}
		if o.Forward != NoOp {
			if o.Forward < 0 || int(o.Forward) >= no {
				return g.opErr(id, opPath(i, ".forward", -1), "forward op %d does not exist (graph has %d ops)", o.Forward, no)
			}
			if g.Ops[o.Forward].Phase != Forward {
				return g.opErr(id, opPath(i, ".forward", -1), "forward op %s is in phase %s, expected forward", g.opLabel(o.Forward), g.Ops[o.Forward].Phase)
			}
		}
		for j, t := range o.Inputs {
			if t < 0 || int(t) >= nt {
				return g.opErr(id, opPath(i, ".inputs", j), "input tensor %d is not defined (graph has %d tensors)", t, nt)
			}
			p := g.Tensors[t].Producer
			if p == id {
				return g.opErr(id, opPath(i, ".inputs", j), "reads its own output %s (cycle)", g.tensorLabel(t))
			}
			if p != NoOp && p > id {
				return g.opErr(id, opPath(i, ".inputs", j), "reads %s, produced by op %s which runs later (ops out of topological order, or a cycle)", g.tensorLabel(t), g.opLabel(p))
			}
		}
		for j, t := range o.Outputs {
			if t < 0 || int(t) >= nt {
				return g.opErr(id, opPath(i, ".outputs", j), "output tensor %d is not defined (graph has %d tensors)", t, nt)
			}
			if produced[t] != NoOp {
				return g.opErr(id, opPath(i, ".outputs", j), "output %s is already produced by op %s", g.tensorLabel(t), g.opLabel(produced[t]))
			}
			produced[t] = id
			if g.Tensors[t].Producer != id {
				return g.opErr(id, opPath(i, ".outputs", j), "output %s names op %d as its producer", g.tensorLabel(t), g.Tensors[t].Producer)
			}
		}
	}
	for i := range g.Tensors {
		if p := g.Tensors[i].Producer; p != NoOp && produced[i] != p {
			return g.tensorErr(TensorID(i), tensorPath(i, ".producer"), "names op %s as producer, but that op does not list it as an output", g.opLabel(p))
		}
	}
	// A view cannot exist before the tensor it aliases: its producer must
	// not run before the base's, and a view without a producer (resident
	// from the start) may only alias a tensor without one.
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.AliasOf == NoTensor {
			continue
		}
		bp := g.Tensors[t.AliasOf].Producer
		if bp == NoOp || (t.Producer != NoOp && t.Producer >= bp) {
			continue
		}
		if t.Producer == NoOp {
			return g.tensorErr(TensorID(i), tensorPath(i, ".alias_of"), "view without a producer op (resident from the start) of %s, which op %s produces later",
				g.tensorLabel(t.AliasOf), g.opLabel(bp))
		}
		return g.tensorErr(TensorID(i), tensorPath(i, ".alias_of"), "view produced by op %s of %s, which op %s produces later",
			g.opLabel(t.Producer), g.tensorLabel(t.AliasOf), g.opLabel(bp))
	}
	g.buildIndex()
	return nil
}
