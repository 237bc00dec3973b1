package onnx

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/remat-dev/remat/graph"
)

// node converts one node: resolves its inputs, runs its handler and binds
// its outputs.
func (imp *importer) node(n *NodeProto) error {
	ins := make([]*value, len(n.GetInput()))
	for i, name := range n.GetInput() {
		if name == "" {
			continue // an omitted optional input
		}
		v := imp.vals[name]
		if v == nil {
			return fmt.Errorf("input %d %q is not defined by an earlier node, an initializer or a graph input (nodes must be in topological order)", i, name)
		}
		ins[i] = v
	}
	outs, err := handlers[n.GetOpType()](imp, n, ins)
	if err != nil {
		return err
	}
	return imp.bind(n, outs)
}

// bind records a node's output values under their names.
func (imp *importer) bind(n *NodeProto, outs []*value) error {
	for i, name := range n.GetOutput() {
		if name == "" || i >= len(outs) || outs[i] == nil {
			continue
		}
		if imp.vals[name] != nil {
			return fmt.Errorf("output %d %q: a value of that name is already defined (ONNX graphs are in SSA form)", i, name)
		}
		imp.vals[name] = outs[i]
	}
	return nil
}

// opName names the graph op of a node.
func (imp *importer) opName(n *NodeProto) string {
	if n.GetName() != "" {
		return n.GetName()
	}
	return n.GetOpType() + "_" + strconv.Itoa(imp.cur)
}

// outName names output i of a node.
func (imp *importer) outName(n *NodeProto, i int) string {
	if outs := n.GetOutput(); i < len(outs) && outs[i] != "" {
		return outs[i]
	}
	return imp.opName(n) + ":" + strconv.Itoa(i)
}

// newOut makes the value of output i.
func (imp *importer) newOut(n *NodeProto, i int, et int32, shape []int64) *value {
	return &value{name: imp.outName(n, i), et: et, shape: shape, tensor: graph.NoTensor}
}

// emit adds an op of type typ reading ins (nil entries are skipped) whose
// outputs are outs (values with type and shape set, which get their
// tensors). flops is the op's FLOP count; bytes accessed are the inputs'
// and outputs' bytes.
func (imp *importer) emit(n *NodeProto, typ string, ins []*value, outs []*value, flops int64, attrs ...string) (*graph.OpBuilder, error) {
	ids := make([]graph.TensorID, 0, len(ins))
	for _, v := range ins {
		if v == nil {
			continue
		}
		t := imp.tensorOf(v)
		if t == graph.NoTensor {
			return nil, fmt.Errorf("input %q: %w", v.name, imp.b.Err())
		}
		ids = append(ids, t)
	}
	ob := imp.b.Op(typ, imp.opName(n), ids...)
	var by int64
	for _, t := range ids {
		by = addSat(by, imp.b.Graph().Tensors[t].Bytes)
	}
	for _, o := range outs {
		dt := dtypeOf(o.et)
		if dt == 0 {
			return nil, fmt.Errorf("output %q has element type %s, which remat cannot represent: %w", o.name, typeName(o.et), ErrUnsupported)
		}
		if _, err := graph.Shape(o.shape).Bytes(dt); err != nil {
			return nil, fmt.Errorf("output %q: %w", o.name, err)
		}
		ob.OutKind(o.name, graph.Activation, dt, o.shape...)
		o.tensor = ob.Output(len(imp.b.Graph().Ops[ob.ID()].Outputs) - 1)
		by = addSat(by, imp.b.Graph().Tensors[o.tensor].Bytes)
	}
	for i := 0; i+1 < len(attrs); i += 2 {
		ob.Attr(attrs[i], attrs[i+1])
	}
	ob.FLOPs(flops).BytesAccessed(by)
	return ob, nil
}

// emit1 is emit for a single output, returning that output.
func (imp *importer) emit1(n *NodeProto, typ string, ins []*value, out *value, flops int64, attrs ...string) ([]*value, error) {
	if _, err := imp.emit(n, typ, ins, []*value{out}, flops, attrs...); err != nil {
		return nil, err
	}
	return []*value{out}, nil
}

// view adds a zero-cost op of type typ whose output aliases src. A view of
// a parameter (or of a view of one, see value.params) is emitted lazily,
// when an op reads it: torch.onnx reorders the gates of nn.LSTM's weights
// with Slice and Concat nodes that the lstm op reads through to the
// parameters, so these views never appear.
func (imp *importer) view(n *NodeProto, typ string, src, out *value, attrs ...string) ([]*value, error) {
	if ps := paramSources(src); ps != nil && out.lazy == nil {
		out.params = ps
		out.lazy = func() graph.TensorID {
			vs, err := imp.viewNow(n, typ, src, out, attrs...)
			if err != nil {
				imp.b.Errorf("node %q: %v", n.GetName(), err)
				return graph.NoTensor
			}
			return vs[0].tensor
		}
		return []*value{out}, nil
	}
	return imp.viewNow(n, typ, src, out, attrs...)
}

// paramSources returns the parameters v is, or is a view or a
// concatenation of views of (value.params); nil for other values.
func paramSources(v *value) []*value {
	if v == nil {
		return nil
	}
	if v.kind == graph.Parameter {
		return []*value{v}
	}
	return v.params
}

// viewNow emits the view op of view at once.
func (imp *importer) viewNow(n *NodeProto, typ string, src, out *value, attrs ...string) ([]*value, error) {
	t := imp.tensorOf(src)
	if t == graph.NoTensor {
		return nil, fmt.Errorf("input %q: %w", src.name, imp.b.Err())
	}
	dt := dtypeOf(out.et)
	if dt == 0 {
		return nil, fmt.Errorf("output %q has element type %s, which remat cannot represent: %w", out.name, typeName(out.et), ErrUnsupported)
	}
	ob := imp.b.Op(typ, imp.opName(n), t).OutKind(out.name, graph.Activation, dt, out.shape...).Alias(t)
	for i := 0; i+1 < len(attrs); i += 2 {
		ob.Attr(attrs[i], attrs[i+1])
	}
	out.tensor = ob.T()
	return []*value{out}, nil
}

// contiguous returns src, or a dense copy of it when it is a strided view
// (PyTorch's reshape copies exactly then).
func (imp *importer) contiguous(n *NodeProto, src *value) (*value, error) {
	if !src.strided || src.isConst {
		return src, nil
	}
	c := &value{name: src.name + ".contiguous", et: src.et, shape: src.shape, tensor: graph.NoTensor}
	if _, err := imp.emit1(n, graph.OpContiguous, []*value{src}, c, 0); err != nil {
		return nil, err
	}
	return c, nil
}

// ---- small helpers ----

func joinInts(v []int64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.FormatInt(x, 10)
	}
	return strings.Join(parts, ",")
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// input returns input i, or an error when it is missing.
func input(in []*value, i int, what string) (*value, error) {
	if i >= len(in) || in[i] == nil {
		return nil, fmt.Errorf("input %d (%s) is missing", i, what)
	}
	return in[i], nil
}

// opt returns optional input i (nil when absent).
func opt(in []*value, i int) *value {
	if i >= len(in) {
		return nil
	}
	return in[i]
}

// normAxis normalizes a possibly negative axis for a rank.
func normAxis(axis int64, rank int, what string) (int, error) {
	if axis < 0 {
		axis += int64(rank)
	}
	if axis < 0 || axis >= int64(rank) {
		return 0, fmt.Errorf("%s %d is out of range for rank %d", what, axis, rank)
	}
	return int(axis), nil
}

// constInts returns the integer data of a constant input.
func constInts(v *value, what string) ([]int64, error) {
	if v == nil || !v.isConst {
		name := ""
		if v != nil {
			name = " " + strconv.Quote(v.name)
		}
		return nil, fmt.Errorf("%s%s is not a constant, expected values known at import time: dynamic shapes are %w", what, name, ErrUnsupported)
	}
	if v.ints != nil || len(v.flts) == 0 {
		return v.ints, nil
	}
	out := make([]int64, len(v.flts))
	for i, f := range v.flts {
		out[i] = int64(f)
	}
	return out, nil
}

// constScalar returns the single value of a one-element constant as a float.
func constScalar(v *value) (float64, bool) {
	if v == nil || !v.isConst || numel(v.shape) != 1 {
		return 0, false
	}
	if v.flts != nil {
		return v.flts[0], true
	}
	if v.ints != nil {
		return float64(v.ints[0]), true
	}
	return 0, false
}

// isStridedAxis reports whether restricting dimension axis of shape gives a
// non-contiguous view (some outer dimension is larger than one).
func isStridedAxis(shape []int64, axis int) bool {
	for _, d := range shape[:axis] {
		if d > 1 {
			return true
		}
	}
	return false
}

// broadcast returns the numpy-style broadcast of shapes.
func broadcast(shapes ...[]int64) ([]int64, error) {
	r := 0
	for _, s := range shapes {
		r = max(r, len(s))
	}
	out := make([]int64, r)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		off := r - len(s)
		for j, d := range s {
			switch o := out[off+j]; {
			case o == d || d == 1:
			case o == 1:
				out[off+j] = d
			default:
				return nil, fmt.Errorf("shapes %v do not broadcast (dimension %d: %d vs %d)", shapes, off+j, o, d)
			}
		}
	}
	return out, nil
}

// bcastIndex maps a flat index of the broadcast shape out to a flat index of
// an input of shape in.
func bcastIndex(out, in []int64, i int64) int64 {
	var idx, stride int64 = 0, 1
	off := len(out) - len(in)
	for d := len(out) - 1; d >= 0; d-- {
		c := i % out[d]
		i /= out[d]
		if j := d - off; j >= 0 {
			if in[j] != 1 {
				idx += c * stride
			}
			stride *= in[j]
		}
	}
	return idx
}

// spatial reads the window attributes of convolution and pooling nodes for
// nsp spatial dimensions: kernel (from the attribute or def), strides,
// dilations and pads (begin..., end...).
type window struct {
	kernel, strides, dilations, pads []int64
	autoPad                          string
}

func readWindow(n *NodeProto, nsp int, defKernel []int64) (window, error) {
	var w window
	k, ok, err := attrInts(n, "kernel_shape")
	if err != nil {
		return w, err
	}
	if !ok {
		k = defKernel
	}
	if len(k) != nsp {
		return w, fmt.Errorf("kernel_shape %v has %d entries, expected %d (one per spatial dimension)", k, len(k), nsp)
	}
	ones := func() []int64 {
		s := make([]int64, nsp)
		for i := range s {
			s[i] = 1
		}
		return s
	}
	get := func(name string, want int, def []int64) ([]int64, error) {
		v, ok, err := attrInts(n, name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return def, nil
		}
		if len(v) != want {
			return nil, fmt.Errorf("attribute %s %v has %d entries, expected %d", name, v, len(v), want)
		}
		return v, nil
	}
	if w.strides, err = get("strides", nsp, ones()); err != nil {
		return w, err
	}
	if w.dilations, err = get("dilations", nsp, ones()); err != nil {
		return w, err
	}
	if w.pads, err = get("pads", 2*nsp, make([]int64, 2*nsp)); err != nil {
		return w, err
	}
	if w.autoPad, err = attrString(n, "auto_pad", "NOTSET"); err != nil {
		return w, err
	}
	for i := 0; i < nsp; i++ {
		if k[i] <= 0 || w.strides[i] <= 0 || w.dilations[i] <= 0 {
			return w, fmt.Errorf("kernel %v, strides %v, dilations %v: expected positive values", k, w.strides, w.dilations)
		}
		if w.pads[i] < 0 || w.pads[nsp+i] < 0 || w.pads[i] > 1<<40 || w.pads[nsp+i] > 1<<40 {
			return w, fmt.Errorf("pads %v: expected values >= 0", w.pads)
		}
		if k[i] > 1<<40 || w.strides[i] > 1<<40 || w.dilations[i] > 1<<40 {
			return w, fmt.Errorf("kernel %v, strides %v, dilations %v: implausibly large", k, w.strides, w.dilations)
		}
	}
	w.kernel = k
	switch w.autoPad {
	case "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER":
	default:
		return w, fmt.Errorf("auto_pad %q: expected NOTSET, VALID, SAME_UPPER or SAME_LOWER", w.autoPad)
	}
	return w, nil
}

// outSize computes the output sizes of a window over spatial dims in; it
// resolves auto_pad into w.pads. ceil follows PyTorch (the last window must
// start inside the input or the left padding).
func (w *window) outSize(in []int64, ceil bool) ([]int64, error) {
	nsp := len(in)
	out := make([]int64, nsp)
	for i := 0; i < nsp; i++ {
		ek := (w.kernel[i]-1)*w.dilations[i] + 1
		switch w.autoPad {
		case "VALID":
			w.pads[i], w.pads[nsp+i] = 0, 0
		case "SAME_UPPER", "SAME_LOWER":
			o := (in[i] + w.strides[i] - 1) / w.strides[i]
			total := max((o-1)*w.strides[i]+ek-in[i], 0)
			lo := total / 2
			if w.autoPad == "SAME_LOWER" {
				lo = total - total/2
			}
			w.pads[i], w.pads[nsp+i] = lo, total-lo
		}
		num := in[i] + w.pads[i] + w.pads[nsp+i] - ek
		if num < 0 {
			return nil, fmt.Errorf("spatial dimension %d: input %d with padding %d+%d is smaller than the window %d", i, in[i], w.pads[i], w.pads[nsp+i], ek)
		}
		o := num/w.strides[i] + 1
		if ceil {
			o = (num+w.strides[i]-1)/w.strides[i] + 1
			if (o-1)*w.strides[i] >= in[i]+w.pads[i] {
				o--
			}
		}
		out[i] = o
	}
	return out, nil
}

// padAttr formats pads as remat's "padding" attribute: "p0,p1" when the
// begin and end pads agree, else all of them.
func padAttr(p []int64) (key, val string) {
	h := len(p) / 2
	for i := 0; i < h; i++ {
		if p[i] != p[h+i] {
			return "pads", joinInts(p)
		}
	}
	return "padding", joinInts(p[:h])
}
