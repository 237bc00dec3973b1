package onnx

import (
	"fmt"
	"math"

	"github.com/remat-dev/remat/graph"
)

// handler converts one node: it infers the outputs' types and shapes, folds
// them when their inputs are constants, and otherwise emits graph ops. It
// returns the output values in order (nil for outputs it does not produce).
type handler func(imp *importer, n *NodeProto, in []*value) ([]*value, error)

var handlers map[string]handler

func init() {
	handlers = map[string]handler{
		// constants and shape arithmetic (folded)
		"Constant": opConstant, "Shape": opShape, "Size": opSize, "Identity": opIdentity,
		"Cast": opCast, "Gather": opGather, "Unsqueeze": opUnsqueeze, "Squeeze": opSqueeze,
		"Concat": opConcat, "Reshape": opReshape, "Flatten": opFlatten, "Transpose": opTranspose,
		"Expand": opExpand, "Slice": opSlice, "Split": opSplit, "Range": opRange,
		"ConstantOfShape": opConstantOfShape, "Where": opWhere,
		"Equal": opCompare, "Less": opCompare, "Greater": opCompare, "LessOrEqual": opCompare,
		"GreaterOrEqual": opCompare, "And": opCompare, "Or": opCompare, "Xor": opCompare, "Not": opNot,
		// element-wise arithmetic
		"Add": opBinary, "Sub": opBinary, "Mul": opBinary, "Div": opBinary, "Pow": opBinary,
		"Max": opBinary, "Min": opBinary, "Mod": opBinary, "Sum": opSum,
		"Relu": opUnary, "Sigmoid": opUnary, "Tanh": opUnary, "HardSwish": opUnary, "HardSigmoid": opUnary,
		"Sqrt": opUnary, "Erf": opUnary, "Exp": opUnary, "Log": opUnary, "Neg": opUnary, "Abs": opUnary,
		"Reciprocal": opUnary, "LeakyRelu": opUnary, "Elu": opUnary, "Softplus": opUnary, "Floor": opUnary,
		"Ceil": opUnary, "Round": opUnary, "Sin": opUnary, "Cos": opUnary, "Gelu": opUnary, "Selu": opUnary,
		"Clip": opClip, "Softmax": opSoftmax, "LogSoftmax": opSoftmax, "Dropout": opDropout,
		"ReduceMean": opReduce, "ReduceSum": opReduce, "ReduceMax": opReduce, "ReduceMin": opReduce,
		"ReduceProd": opReduce,
		// layers
		"Conv": opConv, "ConvTranspose": opConv, "BatchNormalization": opBatchNorm,
		"LayerNormalization": opLayerNorm, "MaxPool": opPool, "AveragePool": opPool,
		"GlobalAveragePool": opGlobalPool, "GlobalMaxPool": opGlobalPool, "Resize": opResize, "Upsample": opResize,
		"Gemm": opGemm, "MatMul": opMatMul, "Pad": opPad, "LSTM": opLSTM, "GRU": opLSTM, "RNN": opLSTM,
		"InstanceNormalization": opInstanceNorm, "PRelu": opPRelu, "Tile": opTile,
		"DepthToSpace": opDepthToSpace, "SpaceToDepth": opDepthToSpace, "CumSum": opCumSum,
		"ReduceL1": opReduce, "ReduceL2": opReduce, "ReduceLogSumExp": opReduce,
		"Sign": opUnary, "Celu": opUnary, "Einsum": opEinsum, "If": opIf, "Trilu": opTrilu,
		"GatherElements": opGatherElements, "ScatterElements": opScatterElements, "Scatter": opScatterElements, "ScatterND": opScatterND,
		"TopK": opTopK,
	}
}

// constOut makes a folded constant output. Data longer than maxFold is
// dropped (the value keeps its shape and becomes a Constant tensor when an
// op reads it).
func (imp *importer) constOut(n *NodeProto, i int, et int32, shape []int64, ints []int64, flts []float64) *value {
	v := imp.newOut(n, i, et, shape)
	if numel(shape) <= maxFold {
		v.ints, v.flts, v.isConst = ints, flts, true
	}
	return v
}

// checkShape validates a computed shape.
func checkShape(s []int64, what string) error {
	if len(s) > maxRank {
		return fmt.Errorf("%s has rank %d, expected at most %d", what, len(s), maxRank)
	}
	for i, d := range s {
		if d < 0 {
			return fmt.Errorf("%s %v: dimension %d is %d, expected >= 0", what, s, i, d)
		}
	}
	if _, err := graph.Shape(s).Bytes(graph.F64); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func opConstant(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	for _, a := range n.GetAttribute() {
		switch a.GetName() {
		case "value":
			t := a.GetT()
			if t == nil {
				return nil, fmt.Errorf("attribute value holds no tensor")
			}
			if err := checkShape(t.GetDims(), "attribute value's shape"); err != nil {
				return nil, err
			}
			ints, flts, ok, err := tensorData(t, t.GetDims())
			if err != nil {
				return nil, err
			}
			v := imp.newOut(n, 0, t.GetDataType(), append([]int64(nil), t.GetDims()...))
			if ok {
				v.ints, v.flts, v.isConst = ints, flts, true
			}
			return []*value{v}, nil
		case "value_float":
			return []*value{imp.constOut(n, 0, int32(TensorProto_FLOAT), nil, nil, []float64{float64(a.GetF())})}, nil
		case "value_floats":
			f := make([]float64, len(a.GetFloats()))
			for i, x := range a.GetFloats() {
				f[i] = float64(x)
			}
			return []*value{imp.constOut(n, 0, int32(TensorProto_FLOAT), []int64{int64(len(f))}, nil, f)}, nil
		case "value_int":
			return []*value{imp.constOut(n, 0, int32(TensorProto_INT64), nil, []int64{a.GetI()}, nil)}, nil
		case "value_ints":
			v := append([]int64(nil), a.GetInts()...)
			return []*value{imp.constOut(n, 0, int32(TensorProto_INT64), []int64{int64(len(v))}, v, nil)}, nil
		case "sparse_value", "value_string", "value_strings":
			return nil, fmt.Errorf("attribute %s: %w", a.GetName(), ErrUnsupported)
		}
	}
	return nil, fmt.Errorf("no value attribute, expected one of value, value_float(s), value_int(s)")
}

func opShape(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "data")
	if err != nil {
		return nil, err
	}
	r := int64(len(x.shape))
	start, err := attrInt(n, "start", 0)
	if err != nil {
		return nil, err
	}
	end, err := attrInt(n, "end", r)
	if err != nil {
		return nil, err
	}
	clamp := func(v int64) int64 {
		if v < 0 {
			v += r
		}
		return min(max(v, 0), r)
	}
	start, end = clamp(start), clamp(end)
	s := append([]int64{}, x.shape[start:max(start, end)]...)
	return []*value{imp.constOut(n, 0, int32(TensorProto_INT64), []int64{int64(len(s))}, s, nil)}, nil
}

func opSize(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "data")
	if err != nil {
		return nil, err
	}
	return []*value{imp.constOut(n, 0, int32(TensorProto_INT64), nil, []int64{numel(x.shape)}, nil)}, nil
}

func opIdentity(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "input")
	if err != nil {
		return nil, err
	}
	return []*value{x}, nil
}

// convert converts constant data to element type et.
func convert(v *value, et int32) (ints []int64, flts []float64) {
	switch {
	case isFloatType(et) && v.flts != nil:
		return nil, v.flts
	case isFloatType(et):
		flts = make([]float64, len(v.ints))
		for i, x := range v.ints {
			flts[i] = float64(x)
		}
		return nil, flts
	}
	src := v.ints
	if v.flts != nil {
		src = make([]int64, len(v.flts))
		for i, f := range v.flts {
			switch {
			case math.IsNaN(f):
			case f >= math.MaxInt64:
				src[i] = math.MaxInt64
			case f <= math.MinInt64:
				src[i] = math.MinInt64
			default:
				src[i] = int64(f)
			}
		}
	}
	if TensorProto_DataType(et) == TensorProto_BOOL {
		out := make([]int64, len(src))
		for i, x := range src {
			if x != 0 {
				out[i] = 1
			}
		}
		return out, nil
	}
	return src, nil
}

func opCast(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "input")
	if err != nil {
		return nil, err
	}
	to, err := attrInt(n, "to", 0)
	if err != nil {
		return nil, err
	}
	if _, ok := TensorProto_DataType_name[int32(to)]; !ok || to == 0 || to > math.MaxInt32 {
		return nil, fmt.Errorf("attribute to is %d, expected an ONNX data type", to)
	}
	et := int32(to)
	if x.isConst {
		ints, flts := convert(x, et)
		return []*value{imp.constOut(n, 0, et, x.shape, ints, flts)}, nil
	}
	if et == x.et {
		return []*value{x}, nil
	}
	out := imp.newOut(n, 0, et, x.shape)
	return imp.emit1(n, "cast", []*value{x}, out, numel(x.shape))
}

// opGather: an embedding lookup when the data is a 2-D weight, a view
// (select) for a constant scalar index, index_select otherwise.
func opGather(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "data")
	if err != nil {
		return nil, err
	}
	idx, err := input(in, 1, "indices")
	if err != nil {
		return nil, err
	}
	a, err := attrInt(n, "axis", 0)
	if err != nil {
		return nil, err
	}
	if len(x.shape) == 0 {
		return nil, fmt.Errorf("data %q is a scalar, expected rank >= 1", x.name)
	}
	axis, err := normAxis(a, len(x.shape), "axis")
	if err != nil {
		return nil, err
	}
	if !isIntType(idx.et) {
		return nil, fmt.Errorf("indices %q have type %s, expected int32 or int64", idx.name, typeName(idx.et))
	}
	shape := append(append(append([]int64{}, x.shape[:axis]...), idx.shape...), x.shape[axis+1:]...)
	if err := checkShape(shape, "output shape"); err != nil {
		return nil, err
	}
	dim := x.shape[axis]
	if idx.isConst {
		for _, i := range idx.ints {
			if i < -dim || i >= dim {
				return nil, fmt.Errorf("index %d is out of range for axis %d of size %d", i, axis, dim)
			}
		}
	}
	if x.isConst && idx.isConst {
		outer := numel(x.shape[:axis])
		inner := numel(x.shape[axis+1:])
		total := mulSat(mulSat(outer, int64(len(idx.ints))), inner)
		if total > maxFold {
			return []*value{imp.newOut(n, 0, x.et, shape)}, nil
		}
		var ints []int64
		var flts []float64
		for o := int64(0); o < outer; o++ {
			for _, i := range idx.ints {
				if i < 0 {
					i += dim
				}
				base := (o*dim + i) * inner
				for k := int64(0); k < inner; k++ {
					if x.flts != nil {
						flts = append(flts, x.flts[base+k])
					} else {
						ints = append(ints, x.ints[base+k])
					}
				}
			}
		}
		return []*value{imp.constOut(n, 0, x.et, shape, ints, flts)}, nil
	}
	out := imp.newOut(n, 0, x.et, shape)
	if x.kind == graph.Parameter && axis == 0 && len(x.shape) == 2 && !idx.isConst {
		return imp.emit1(n, graph.OpEmbedding, []*value{idx, x}, out, numel(shape))
	}
	if idx.isConst && len(idx.shape) == 0 {
		i := idx.ints[0]
		if i < 0 {
			i += dim
		}
		out.strided = x.strided || isStridedAxis(x.shape, axis)
		return imp.view(n, graph.OpSlice, x, out, "dim", fmt.Sprint(axis), "index", fmt.Sprint(i))
	}
	return imp.emit1(n, "gather", []*value{x, idx}, out, numel(shape), "dim", fmt.Sprint(axis))
}

// axesOf reads the axes of Squeeze/Unsqueeze/Reduce*: the attribute before
// the opset that moved it to an input.
func (imp *importer) axesOf(n *NodeProto, in []*value, inputSince int64) ([]int64, bool, error) {
	if imp.opset >= inputSince {
		v := opt(in, 1)
		if v == nil {
			return nil, false, nil
		}
		a, err := constInts(v, "axes")
		return a, true, err
	}
	return attrInts(n, "axes")
}

func opUnsqueeze(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "data")
	if err != nil {
		return nil, err
	}
	axes, ok, err := imp.axesOf(n, in, 13)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("axes are missing")
	}
	r := len(x.shape) + len(axes)
	if r > maxRank {
		return nil, fmt.Errorf("output rank %d, expected at most %d", r, maxRank)
	}
	ins := make([]bool, r)
	for _, a := range axes {
		ax, err := normAxis(a, r, "axis")
		if err != nil {
			return nil, err
		}
		if ins[ax] {
			return nil, fmt.Errorf("axis %d repeats", a)
		}
		ins[ax] = true
	}
	shape := make([]int64, 0, r)
	j := 0
	for i := 0; i < r; i++ {
		if ins[i] {
			shape = append(shape, 1)
		} else {
			shape = append(shape, x.shape[j])
			j++
		}
	}
	return imp.reshaped(n, x, shape, false)
}

// reshaped gives x a new shape with the same elements: a folded constant, or
// a reshape view (after a copy if copy is set and x is strided).
func (imp *importer) reshaped(n *NodeProto, x *value, shape []int64, copyStrided bool) ([]*value, error) {
	if x.isConst {
		return []*value{imp.constOut(n, 0, x.et, shape, x.ints, x.flts)}, nil
	}
	src := x
	if copyStrided {
		var err error
		if src, err = imp.contiguous(n, x); err != nil {
			return nil, err
		}
	}
	out := imp.newOut(n, 0, x.et, shape)
	out.strided = src.strided
	return imp.view(n, graph.OpReshape, src, out, "shape", joinInts(shape))
}

func opSqueeze(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "data")
	if err != nil {
		return nil, err
	}
	axes, ok, err := imp.axesOf(n, in, 13)
	if err != nil {
		return nil, err
	}
	drop := make([]bool, len(x.shape))
	if !ok {
		for i, d := range x.shape {
			drop[i] = d == 1
		}
	}
	for _, a := range axes {
		ax, err := normAxis(a, len(x.shape), "axis")
		if err != nil {
			return nil, err
		}
		if x.shape[ax] != 1 {
			return nil, fmt.Errorf("axis %d has size %d, expected 1", a, x.shape[ax])
		}
		drop[ax] = true
	}
	var shape []int64
	for i, d := range x.shape {
		if !drop[i] {
			shape = append(shape, d)
		}
	}
	return imp.reshaped(n, x, shape, false)
}

func opConcat(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	var xs []*value
	for _, v := range in {
		if v != nil {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return nil, fmt.Errorf("no inputs")
	}
	a, err := attrInt(n, "axis", 0)
	if err != nil {
		return nil, err
	}
	if len(xs[0].shape) == 0 {
		return nil, fmt.Errorf("input %q is a scalar, expected rank >= 1", xs[0].name)
	}
	axis, err := normAxis(a, len(xs[0].shape), "axis")
	if err != nil {
		return nil, err
	}
	shape := append([]int64(nil), xs[0].shape...)
	allConst := xs[0].isConst
	for _, v := range xs[1:] {
		if len(v.shape) != len(shape) {
			return nil, fmt.Errorf("inputs %q %v and %q %v have different ranks", xs[0].name, xs[0].shape, v.name, v.shape)
		}
		for i := range shape {
			if i != axis && v.shape[i] != shape[i] {
				return nil, fmt.Errorf("inputs %q %v and %q %v differ outside axis %d", xs[0].name, xs[0].shape, v.name, v.shape, axis)
			}
		}
		shape[axis] = addSat(shape[axis], v.shape[axis])
		allConst = allConst && v.isConst
	}
	if err := checkShape(shape, "output shape"); err != nil {
		return nil, err
	}
	if allConst {
		if numel(shape) > maxFold {
			return []*value{imp.newOut(n, 0, xs[0].et, shape)}, nil
		}
		outer := numel(shape[:axis])
		var ints []int64
		var flts []float64
		fl := isFloatType(xs[0].et)
		for o := int64(0); o < outer; o++ {
			for _, v := range xs {
				chunk := numel(v.shape[axis:])
				vi, vf := convert(v, xs[0].et)
				if fl {
					flts = append(flts, vf[o*chunk:(o+1)*chunk]...)
				} else {
					ints = append(ints, vi[o*chunk:(o+1)*chunk]...)
				}
			}
		}
		return []*value{imp.constOut(n, 0, xs[0].et, shape, ints, flts)}, nil
	}
	out := imp.newOut(n, 0, xs[0].et, shape)
	// A concatenation of parameters (torch.onnx's reordering of LSTM gate
	// weights) is emitted only if an op other than an lstm reads it.
	var params []*value
	for _, v := range xs {
		ps := paramSources(v)
		if ps == nil {
			params = nil
			break
		}
		for _, p := range ps {
			dup := false
			for _, q := range params {
				dup = dup || q == p
			}
			if !dup {
				params = append(params, p)
			}
		}
	}
	if params != nil {
		out.params = params
		out.lazy = func() graph.TensorID {
			if _, err := imp.emit1(n, graph.OpConcat, xs, out, 0, "dim", fmt.Sprint(axis)); err != nil {
				imp.b.Errorf("node %q: %v", n.GetName(), err)
				return graph.NoTensor
			}
			return out.tensor
		}
		return []*value{out}, nil
	}
	return imp.emit1(n, graph.OpConcat, xs, out, 0, "dim", fmt.Sprint(axis))
}

func opReshape(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "data")
	if err != nil {
		return nil, err
	}
	var target []int64
	if imp.opset >= 5 {
		sv, err := input(in, 1, "shape")
		if err != nil {
			return nil, err
		}
		if target, err = constInts(sv, "shape"); err != nil {
			return nil, err
		}
	} else {
		var ok bool
		if target, ok, err = attrInts(n, "shape"); err != nil || !ok {
			return nil, fmt.Errorf("attribute shape is missing (%v)", err)
		}
	}
	allowZero, err := attrInt(n, "allowzero", 0)
	if err != nil {
		return nil, err
	}
	if len(target) > maxRank {
		return nil, fmt.Errorf("target shape has rank %d, expected at most %d", len(target), maxRank)
	}
	shape := make([]int64, len(target))
	free := -1
	prod := int64(1)
	for i, d := range target {
		switch {
		case d == 0 && allowZero == 0:
			if i >= len(x.shape) {
				return nil, fmt.Errorf("target shape %v copies dimension %d of %v, which does not exist", target, i, x.shape)
			}
			shape[i] = x.shape[i]
		case d == -1 && free < 0:
			free = i
			continue
		case d < 0:
			return nil, fmt.Errorf("target shape %v: dimension %d is %d, expected >= 0 or a single -1", target, i, d)
		default:
			shape[i] = d
		}
		prod = mulSat(prod, shape[i])
	}
	total := numel(x.shape)
	if free >= 0 {
		if prod == 0 || total%prod != 0 {
			return nil, fmt.Errorf("cannot reshape %v (%d elements) to %v", x.shape, total, target)
		}
		shape[free] = total / prod
	}
	if numel(shape) != total {
		return nil, fmt.Errorf("cannot reshape %v (%d elements) to %v (%d elements)", x.shape, total, shape, numel(shape))
	}
	return imp.reshaped(n, x, shape, true)
}

func opFlatten(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "input")
	if err != nil {
		return nil, err
	}
	a, err := attrInt(n, "axis", 1)
	if err != nil {
		return nil, err
	}
	r := int64(len(x.shape))
	if a < 0 {
		a += r
	}
	if a < 0 || a > r {
		return nil, fmt.Errorf("axis %d is out of range for rank %d", a, r)
	}
	shape := []int64{numel(x.shape[:a]), numel(x.shape[a:])}
	if x.isConst {
		return []*value{imp.constOut(n, 0, x.et, shape, x.ints, x.flts)}, nil
	}
	src, err := imp.contiguous(n, x)
	if err != nil {
		return nil, err
	}
	out := imp.newOut(n, 0, x.et, shape)
	return imp.view(n, graph.OpFlatten, src, out, "start_dim", fmt.Sprint(a))
}

func opTranspose(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "data")
	if err != nil {
		return nil, err
	}
	r := len(x.shape)
	perm, ok, err := attrInts(n, "perm")
	if err != nil {
		return nil, err
	}
	if !ok {
		perm = make([]int64, r)
		for i := range perm {
			perm[i] = int64(r - 1 - i)
		}
	}
	if len(perm) != r {
		return nil, fmt.Errorf("perm %v has %d entries, expected the rank %d", perm, len(perm), r)
	}
	seen := make([]bool, r)
	shape := make([]int64, r)
	for i, p := range perm {
		if p < 0 || p >= int64(r) || seen[p] {
			return nil, fmt.Errorf("perm %v is not a permutation of 0..%d", perm, r-1)
		}
		seen[p] = true
		shape[i] = x.shape[p]
	}
	if x.isConst {
		tot := numel(x.shape)
		var ints []int64
		var flts []float64
		strides := make([]int64, r)
		st := int64(1)
		for d := r - 1; d >= 0; d-- {
			strides[d] = st
			st *= x.shape[d]
		}
		for i := int64(0); i < tot; i++ {
			rem, src := i, int64(0)
			for d := r - 1; d >= 0; d-- {
				c := rem % shape[d]
				rem /= shape[d]
				src += c * strides[perm[d]]
			}
			if x.flts != nil {
				flts = append(flts, x.flts[src])
			} else {
				ints = append(ints, x.ints[src])
			}
		}
		return []*value{imp.constOut(n, 0, x.et, shape, ints, flts)}, nil
	}
	out := imp.newOut(n, 0, x.et, shape)
	// Strided unless the non-unit dimensions keep their order.
	last := int64(-1)
	for _, p := range perm {
		if x.shape[p] == 1 {
			continue
		}
		if p < last {
			out.strided = true
		}
		last = p
	}
	out.strided = out.strided || x.strided
	if x.kind == graph.Parameter && r == 2 && perm[0] == 1 {
		// A transposed weight: a fused linear may read the weight itself.
		out.transposeOf = x
		out.lazy = func() graph.TensorID {
			vs, err := imp.viewNow(n, graph.OpTranspose, x, out, "perm", joinInts(perm))
			if err != nil {
				imp.b.Errorf("node %q: %v", n.GetName(), err)
				return graph.NoTensor
			}
			return vs[0].tensor
		}
		return []*value{out}, nil
	}
	return imp.view(n, graph.OpTranspose, x, out, "perm", joinInts(perm))
}

func opExpand(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "input")
	if err != nil {
		return nil, err
	}
	sv, err := input(in, 1, "shape")
	if err != nil {
		return nil, err
	}
	target, err := constInts(sv, "shape")
	if err != nil {
		return nil, err
	}
	for i, d := range target {
		if d < 0 {
			return nil, fmt.Errorf("shape %v: dimension %d is %d, expected >= 0", target, i, d)
		}
	}
	shape, err := broadcast(x.shape, target)
	if err != nil {
		return nil, err
	}
	if err := checkShape(shape, "output shape"); err != nil {
		return nil, err
	}
	if x.isConst {
		if numel(shape) > maxFold {
			return []*value{imp.newOut(n, 0, x.et, shape)}, nil
		}
		tot := numel(shape)
		var ints []int64
		var flts []float64
		for i := int64(0); i < tot; i++ {
			j := bcastIndex(shape, x.shape, i)
			if x.flts != nil {
				flts = append(flts, x.flts[j])
			} else {
				ints = append(ints, x.ints[j])
			}
		}
		return []*value{imp.constOut(n, 0, x.et, shape, ints, flts)}, nil
	}
	out := imp.newOut(n, 0, x.et, shape)
	out.strided = numel(shape) != numel(x.shape) || x.strided
	return imp.view(n, "expand", x, out, "shape", joinInts(shape))
}

// sliceSpec resolves Slice's starts/ends/axes/steps for a shape: per
// dimension start and step and the output shape.
func sliceSpec(shape, starts, ends, axes, steps []int64) (st, sp, out []int64, err error) {
	r := len(shape)
	if len(ends) != len(starts) || (axes != nil && len(axes) != len(starts)) || (steps != nil && len(steps) != len(starts)) {
		return nil, nil, nil, fmt.Errorf("starts %v, ends %v, axes %v, steps %v: expected equal lengths", starts, ends, axes, steps)
	}
	st = make([]int64, r)
	sp = make([]int64, r)
	out = append([]int64(nil), shape...)
	for i := range sp {
		sp[i] = 1
	}
	seen := make([]bool, r)
	for i := range starts {
		a := int64(i)
		if axes != nil {
			a = axes[i]
		}
		ax, err := normAxis(a, r, "axis")
		if err != nil {
			return nil, nil, nil, err
		}
		if seen[ax] {
			return nil, nil, nil, fmt.Errorf("axis %d repeats", a)
		}
		seen[ax] = true
		step := int64(1)
		if steps != nil {
			step = steps[i]
		}
		if step == 0 {
			return nil, nil, nil, fmt.Errorf("step 0 on axis %d, expected a non-zero step", a)
		}
		d := shape[ax]
		s, e := starts[i], ends[i]
		if s < 0 {
			s += d
		}
		if e < 0 && e > math.MinInt64+d {
			e += d
		}
		if step > 0 {
			s = min(max(s, 0), d)
			e = min(max(e, 0), d)
			out[ax] = max(0, (e-s+step-1)/step)
		} else {
			s = min(max(s, -1), d-1)
			e = min(max(e, -1), d-1)
			out[ax] = max(0, (s-e-step-1)/(-step))
		}
		st[ax], sp[ax] = s, step
	}
	return st, sp, out, nil
}

func opSlice(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "data")
	if err != nil {
		return nil, err
	}
	var starts, ends, axes, steps []int64
	if imp.opset >= 10 {
		sv, err := input(in, 1, "starts")
		if err != nil {
			return nil, err
		}
		ev, err := input(in, 2, "ends")
		if err != nil {
			return nil, err
		}
		if starts, err = constInts(sv, "starts"); err != nil {
			return nil, err
		}
		if ends, err = constInts(ev, "ends"); err != nil {
			return nil, err
		}
		if v := opt(in, 3); v != nil {
			if axes, err = constInts(v, "axes"); err != nil {
				return nil, err
			}
		}
		if v := opt(in, 4); v != nil {
			if steps, err = constInts(v, "steps"); err != nil {
				return nil, err
			}
		}
	} else {
		if starts, _, err = attrInts(n, "starts"); err != nil {
			return nil, err
		}
		if ends, _, err = attrInts(n, "ends"); err != nil {
			return nil, err
		}
		if axes, _, err = attrInts(n, "axes"); err != nil {
			return nil, err
		}
	}
	st, sp, shape, err := sliceSpec(x.shape, starts, ends, axes, steps)
	if err != nil {
		return nil, err
	}
	if x.isConst {
		ints, flts := sliceData(x, st, sp, shape)
		return []*value{imp.constOut(n, 0, x.et, shape, ints, flts)}, nil
	}
	out := imp.newOut(n, 0, x.et, shape)
	out.strided = x.strided
	for i := range shape {
		if shape[i] != x.shape[i] && (sp[i] != 1 || isStridedAxis(x.shape, i)) {
			out.strided = true
		}
	}
	return imp.view(n, graph.OpSlice, x, out, "starts", joinInts(st), "steps", joinInts(sp), "shape", joinInts(shape))
}

// sliceData copies the constant elements selected by per-dimension starts
// and steps into a tensor of shape out.
func sliceData(x *value, st, sp, out []int64) ([]int64, []float64) {
	r := len(out)
	strides := make([]int64, r)
	s := int64(1)
	for d := r - 1; d >= 0; d-- {
		strides[d] = s
		s *= x.shape[d]
	}
	tot := numel(out)
	var ints []int64
	var flts []float64
	for i := int64(0); i < tot; i++ {
		rem, src := i, int64(0)
		for d := r - 1; d >= 0; d-- {
			c := rem % out[d]
			rem /= out[d]
			src += (st[d] + c*sp[d]) * strides[d]
		}
		if x.flts != nil {
			flts = append(flts, x.flts[src])
		} else {
			ints = append(ints, x.ints[src])
		}
	}
	return ints, flts
}

func opSplit(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "input")
	if err != nil {
		return nil, err
	}
	a, err := attrInt(n, "axis", 0)
	if err != nil {
		return nil, err
	}
	if len(x.shape) == 0 {
		return nil, fmt.Errorf("input %q is a scalar, expected rank >= 1", x.name)
	}
	axis, err := normAxis(a, len(x.shape), "axis")
	if err != nil {
		return nil, err
	}
	var sizes []int64
	if imp.opset >= 13 {
		if v := opt(in, 1); v != nil {
			if sizes, err = constInts(v, "split"); err != nil {
				return nil, err
			}
		}
	} else if sizes, _, err = attrInts(n, "split"); err != nil {
		return nil, err
	}
	nout := len(n.GetOutput())
	d := x.shape[axis]
	if sizes == nil {
		k, err := attrInt(n, "num_outputs", int64(nout))
		if err != nil {
			return nil, err
		}
		if k <= 0 || k > maxFold {
			return nil, fmt.Errorf("%d outputs, expected at least one", k)
		}
		chunk := (d + k - 1) / k
		for rem := d; rem > 0 || int64(len(sizes)) < k; rem -= chunk {
			sizes = append(sizes, max(min(chunk, rem), 0))
			if int64(len(sizes)) >= k {
				break
			}
		}
	}
	var sum int64
	for _, s := range sizes {
		if s < 0 {
			return nil, fmt.Errorf("split sizes %v, expected values >= 0", sizes)
		}
		sum = addSat(sum, s)
	}
	if sum != d || len(sizes) != nout {
		return nil, fmt.Errorf("split sizes %v of axis %d (size %d) into %d outputs: expected sizes summing to the axis size, one per output", sizes, axis, d, nout)
	}
	return imp.split(n, x, axis, sizes)
}

// split emits the split of x along axis into pieces of the given sizes
// (summing to the axis size) as n's outputs: views of x (one graph op whose
// backward makes x's gradient at once, as PyTorch's SplitBackward does), or
// folded constants when x is one.
func (imp *importer) split(n *NodeProto, x *value, axis int, sizes []int64) ([]*value, error) {
	outs := make([]*value, len(sizes))
	var off int64
	for i, s := range sizes {
		shape := append([]int64(nil), x.shape...)
		shape[axis] = s
		st := make([]int64, len(shape))
		sp := make([]int64, len(shape))
		for j := range sp {
			sp[j] = 1
		}
		st[axis] = off
		off += s
		if x.isConst {
			ints, flts := sliceData(x, st, sp, shape)
			outs[i] = imp.constOut(n, i, x.et, shape, ints, flts)
		} else {
			outs[i] = imp.newOut(n, i, x.et, shape)
			outs[i].strided = x.strided || isStridedAxis(x.shape, axis)
		}
	}
	if x.isConst {
		return outs, nil
	}
	t := imp.tensorOf(x)
	if t == graph.NoTensor {
		return nil, fmt.Errorf("input %q: %w", x.name, imp.b.Err())
	}
	dt := dtypeOf(x.et)
	ob := imp.b.Op(graph.OpSplit, imp.opName(n), t).Attr("dim", fmt.Sprint(axis)).Attr("sizes", joinInts(sizes))
	for i, o := range outs {
		ob.OutKind(o.name, graph.Activation, dt, o.shape...).Alias(t)
		o.tensor = ob.Output(i)
	}
	return outs, nil
}

func opRange(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	var p [3]float64
	var et int32
	for i, what := range []string{"start", "limit", "delta"} {
		v, err := input(in, i, what)
		if err != nil {
			return nil, err
		}
		f, ok := constScalar(v)
		if !ok {
			return nil, fmt.Errorf("%s %q is not a constant scalar: dynamic shapes are %w", what, v.name, ErrUnsupported)
		}
		p[i], et = f, v.et
	}
	if p[2] == 0 || math.IsNaN(p[0]) || math.IsNaN(p[1]) || math.IsNaN(p[2]) {
		return nil, fmt.Errorf("range(%g, %g, %g): expected a non-zero delta and numbers", p[0], p[1], p[2])
	}
	cnt := math.Ceil((p[1] - p[0]) / p[2])
	if cnt < 0 {
		cnt = 0
	}
	if cnt > 1<<40 {
		return nil, fmt.Errorf("range(%g, %g, %g) has %g elements, implausibly many", p[0], p[1], p[2], cnt)
	}
	k := int64(cnt)
	if k > maxFold {
		return []*value{imp.newOut(n, 0, et, []int64{k})}, nil
	}
	var ints []int64
	var flts []float64
	for i := int64(0); i < k; i++ {
		f := p[0] + float64(i)*p[2]
		if isFloatType(et) {
			flts = append(flts, f)
		} else {
			ints = append(ints, int64(f))
		}
	}
	return []*value{imp.constOut(n, 0, et, []int64{k}, ints, flts)}, nil
}

func opConstantOfShape(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	sv, err := input(in, 0, "input")
	if err != nil {
		return nil, err
	}
	shape, err := constInts(sv, "shape")
	if err != nil {
		return nil, err
	}
	if err := checkShape(shape, "shape"); err != nil {
		return nil, err
	}
	et := int32(TensorProto_FLOAT)
	fill := 0.0
	if a := findAttr(n, "value"); a != nil && a.GetT() != nil {
		t := a.GetT()
		et = t.GetDataType()
		ints, flts, ok, err := tensorData(t, []int64{1})
		if err != nil {
			return nil, err
		}
		if ok && flts != nil {
			fill = flts[0]
		} else if ok && ints != nil {
			fill = float64(ints[0])
		}
	}
	k := numel(shape)
	if k > maxFold {
		return []*value{imp.newOut(n, 0, et, shape)}, nil
	}
	var ints []int64
	var flts []float64
	for i := int64(0); i < k; i++ {
		if isFloatType(et) {
			flts = append(flts, fill)
		} else {
			ints = append(ints, int64(fill))
		}
	}
	return []*value{imp.constOut(n, 0, et, append([]int64(nil), shape...), ints, flts)}, nil
}

// fold evaluates an element-wise function over constant, broadcast inputs.
func (imp *importer) fold(n *NodeProto, et int32, shape []int64, xs []*value, f func(a []float64) float64) []*value {
	tot := numel(shape)
	if tot > maxFold {
		return []*value{imp.newOut(n, 0, et, shape)}
	}
	var ints []int64
	var flts []float64
	args := make([]float64, len(xs))
	for i := int64(0); i < tot; i++ {
		for j, x := range xs {
			k := bcastIndex(shape, x.shape, i)
			if x.flts != nil {
				args[j] = x.flts[k]
			} else {
				args[j] = float64(x.ints[k])
			}
		}
		r := f(args)
		if isFloatType(et) {
			flts = append(flts, r)
		} else {
			ints = append(ints, toInt(r))
		}
	}
	return []*value{imp.constOut(n, 0, et, shape, ints, flts)}
}

func toInt(f float64) int64 {
	switch {
	case math.IsNaN(f):
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func allConst(xs []*value) bool {
	for _, x := range xs {
		if !x.isConst {
			return false
		}
	}
	return true
}

func opCompare(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	a, err := input(in, 0, "A")
	if err != nil {
		return nil, err
	}
	b, err := input(in, 1, "B")
	if err != nil {
		return nil, err
	}
	shape, err := broadcast(a.shape, b.shape)
	if err != nil {
		return nil, err
	}
	if err := checkShape(shape, "output shape"); err != nil {
		return nil, err
	}
	et := int32(TensorProto_BOOL)
	op := n.GetOpType()
	if allConst([]*value{a, b}) {
		return imp.fold(n, et, shape, []*value{a, b}, func(v []float64) float64 {
			switch op {
			case "Equal":
				return b2f(v[0] == v[1])
			case "Less":
				return b2f(v[0] < v[1])
			case "Greater":
				return b2f(v[0] > v[1])
			case "LessOrEqual":
				return b2f(v[0] <= v[1])
			case "GreaterOrEqual":
				return b2f(v[0] >= v[1])
			case "And":
				return b2f(v[0] != 0 && v[1] != 0)
			case "Or":
				return b2f(v[0] != 0 || v[1] != 0)
			}
			return b2f((v[0] != 0) != (v[1] != 0))
		}), nil
	}
	return imp.emit1(n, "compare", []*value{a, b}, imp.newOut(n, 0, et, shape), numel(shape), "op", op)
}

func opNot(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "X")
	if err != nil {
		return nil, err
	}
	if x.isConst {
		return imp.fold(n, x.et, x.shape, []*value{x}, func(v []float64) float64 { return b2f(v[0] == 0) }), nil
	}
	return imp.emit1(n, "not", []*value{x}, imp.newOut(n, 0, x.et, x.shape), numel(x.shape))
}

func opWhere(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	var xs [3]*value
	for i, what := range []string{"condition", "X", "Y"} {
		v, err := input(in, i, what)
		if err != nil {
			return nil, err
		}
		xs[i] = v
	}
	shape, err := broadcast(xs[0].shape, xs[1].shape, xs[2].shape)
	if err != nil {
		return nil, err
	}
	if err := checkShape(shape, "output shape"); err != nil {
		return nil, err
	}
	et := xs[1].et
	if allConst(xs[:]) {
		return imp.fold(n, et, shape, xs[:], func(v []float64) float64 {
			if v[0] != 0 {
				return v[1]
			}
			return v[2]
		}), nil
	}
	return imp.emit1(n, "where", xs[:], imp.newOut(n, 0, et, shape), numel(shape))
}
