package onnx

import (
	"fmt"
	"math"
	"strconv"

	"github.com/remat-dev/remat/graph"
)

// binaryType maps ONNX element-wise binary ops to remat op types.
var binaryType = map[string]string{
	"Add": graph.OpAdd, "Sub": OpSub, "Mul": graph.OpMul, "Div": OpDiv, "Pow": OpPowTensor,
	"Max": OpMaximum, "Min": OpMinimum, "Mod": OpMod,
}

func evalBinary(op string, a, b float64, isFloat bool) float64 {
	switch op {
	case "Add":
		return a + b
	case "Sub":
		return a - b
	case "Mul":
		return a * b
	case "Div":
		if !isFloat {
			if b == 0 {
				return 0
			}
			return float64(toInt(a) / toInt(b))
		}
		return a / b
	case "Pow":
		return math.Pow(a, b)
	case "Max":
		return math.Max(a, b)
	case "Min":
		return math.Min(a, b)
	}
	if b == 0 {
		return 0
	}
	return math.Mod(a, b)
}

func opBinary(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	if op := n.GetOpType(); op == "Max" || op == "Min" {
		// Variadic: one input is the identity; more than two are not mapped.
		switch len(in) {
		case 1:
			x, err := input(in, 0, "data_0")
			if err != nil {
				return nil, err
			}
			return []*value{x}, nil
		case 2:
		default:
			return nil, fmt.Errorf("%d inputs: only one or two are %w", len(in), ErrUnsupported)
		}
	}
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
	op := n.GetOpType()
	et := a.et
	if a.isConst && b.isConst {
		fl := isFloatType(et)
		return imp.fold(n, et, shape, []*value{a, b}, func(v []float64) float64 { return evalBinary(op, v[0], v[1], fl) }), nil
	}
	out := imp.newOut(n, 0, et, shape)
	k := numel(shape)
	// Multiplying or dividing by a constant scalar is a scale.
	if c, ok := constScalar(b); ok && isFloatType(et) && equalShape(a.shape, shape) {
		switch {
		case op == "Mul":
			return imp.emit1(n, graph.OpScale, []*value{a}, out, k, "factor", ftoa(c))
		case op == "Div" && c != 0:
			return imp.emit1(n, graph.OpScale, []*value{a}, out, k, "factor", ftoa(1/c))
		case op == "Pow":
			return imp.emit1(n, OpPow, []*value{a}, out, 2*k, "exponent", ftoa(c))
		}
	}
	if c, ok := constScalar(a); ok && isFloatType(et) && op == "Mul" && equalShape(b.shape, shape) {
		out.et = b.et
		return imp.emit1(n, graph.OpScale, []*value{b}, out, k, "factor", ftoa(c))
	}
	return imp.emit1(n, binaryType[op], []*value{a, b}, out, k)
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// opSum adds its inputs pairwise.
func opSum(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	var xs []*value
	for _, v := range in {
		if v != nil {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return nil, fmt.Errorf("no inputs")
	}
	if len(xs) == 1 {
		return []*value{xs[0]}, nil
	}
	acc := xs[0]
	for i, x := range xs[1:] {
		shape, err := broadcast(acc.shape, x.shape)
		if err != nil {
			return nil, err
		}
		var out *value
		if i == len(xs)-2 {
			out = imp.newOut(n, 0, acc.et, shape)
		} else {
			out = &value{name: imp.outName(n, 0) + ".partial" + strconv.Itoa(i), et: acc.et, shape: shape, tensor: graph.NoTensor}
		}
		if acc.isConst && x.isConst {
			fl := isFloatType(acc.et)
			out = imp.fold(n, acc.et, shape, []*value{acc, x}, func(v []float64) float64 { return evalBinary("Add", v[0], v[1], fl) })[0]
		} else if _, err := imp.emit1(n, graph.OpAdd, []*value{acc, x}, out, numel(shape)); err != nil {
			return nil, err
		}
		acc = out
	}
	return []*value{acc}, nil
}

// unaryType maps ONNX element-wise unary ops to remat op types and their
// per-element FLOPs.
var unaryType = map[string]struct {
	typ   string
	flops int64
	f     func(float64) float64
}{
	"Relu":        {graph.OpReLU, 1, func(x float64) float64 { return math.Max(x, 0) }},
	"Sigmoid":     {graph.OpSigmoid, 4, func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }},
	"Tanh":        {graph.OpTanh, 4, math.Tanh},
	"HardSwish":   {graph.OpHardswish, 5, func(x float64) float64 { return x * math.Min(math.Max(x+3, 0), 6) / 6 }},
	"HardSigmoid": {OpHardsigmoid, 3, nil},
	"Sqrt":        {OpSqrt, 1, math.Sqrt},
	"Erf":         {OpErf, 8, math.Erf},
	"Exp":         {OpExp, 4, math.Exp},
	"Log":         {OpLog, 4, math.Log},
	"Neg":         {OpNeg, 1, func(x float64) float64 { return -x }},
	"Abs":         {OpAbs, 1, math.Abs},
	"Reciprocal":  {OpReciprocal, 1, func(x float64) float64 { return 1 / x }},
	"LeakyRelu":   {OpLeakyReLU, 2, nil},
	"Elu":         {OpELU, 4, nil},
	"Selu":        {OpELU, 5, nil},
	"Softplus":    {OpSoftplus, 5, nil},
	"Floor":       {OpFloor, 1, math.Floor},
	"Ceil":        {OpFloor, 1, math.Ceil},
	"Round":       {OpFloor, 1, math.RoundToEven},
	"Sin":         {OpSin, 8, math.Sin},
	"Cos":         {OpSin, 8, math.Cos},
	"Gelu":        {graph.OpGELU, 8, nil},
	"Sign":        {OpFloor, 1, sign},
	"Celu":        {OpELU, 4, nil},
}

func sign(x float64) float64 {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return x // 0, -0 and NaN
}

func opUnary(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "X")
	if err != nil {
		return nil, err
	}
	u := unaryType[n.GetOpType()]
	if x.isConst && u.f != nil {
		et := x.et
		if !isFloatType(et) && n.GetOpType() != "Neg" && n.GetOpType() != "Abs" && n.GetOpType() != "Relu" {
			et = int32(TensorProto_FLOAT)
		}
		return imp.fold(n, et, x.shape, []*value{x}, func(v []float64) float64 { return u.f(v[0]) }), nil
	}
	out := imp.newOut(n, 0, x.et, x.shape)
	var attrs []string
	switch n.GetOpType() {
	case "Gelu":
		ap, err := attrString(n, "approximate", "none")
		if err != nil {
			return nil, err
		}
		attrs = []string{"approximate", ap}
	case "LeakyRelu":
		alpha, err := attrFloat(n, "alpha", 0.01)
		if err != nil {
			return nil, err
		}
		attrs = []string{"negative_slope", ftoa(alpha)}
	case "Ceil", "Round", "Cos", "Selu", "Sign":
		attrs = []string{"onnx_op", n.GetOpType()}
	case "Celu":
		alpha, err := attrFloat(n, "alpha", 1)
		if err != nil {
			return nil, err
		}
		attrs = []string{"onnx_op", "Celu", "alpha", ftoa(alpha)}
	}
	return imp.emit1(n, u.typ, []*value{x}, out, u.flops*numel(x.shape), attrs...)
}

func opClip(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "input")
	if err != nil {
		return nil, err
	}
	lo, hi := math.Inf(-1), math.Inf(1)
	if imp.opset >= 11 {
		if v := opt(in, 1); v != nil {
			c, ok := constScalar(v)
			if !ok {
				return nil, fmt.Errorf("min %q is not a constant scalar: %w", v.name, ErrUnsupported)
			}
			lo = c
		}
		if v := opt(in, 2); v != nil {
			c, ok := constScalar(v)
			if !ok {
				return nil, fmt.Errorf("max %q is not a constant scalar: %w", v.name, ErrUnsupported)
			}
			hi = c
		}
	} else {
		if lo, err = attrFloat(n, "min", lo); err != nil {
			return nil, err
		}
		if hi, err = attrFloat(n, "max", hi); err != nil {
			return nil, err
		}
	}
	if x.isConst {
		return imp.fold(n, x.et, x.shape, []*value{x}, func(v []float64) float64 { return math.Min(math.Max(v[0], lo), hi) }), nil
	}
	out := imp.newOut(n, 0, x.et, x.shape)
	k := numel(x.shape)
	switch {
	case lo == 0 && hi == 6:
		return imp.emit1(n, graph.OpReLU6, []*value{x}, out, 2*k)
	case lo == 0 && math.IsInf(hi, 1):
		return imp.emit1(n, graph.OpReLU, []*value{x}, out, k)
	}
	return imp.emit1(n, graph.OpHardtanh, []*value{x}, out, 2*k, "min_val", ftoa(lo), "max_val", ftoa(hi))
}

func opSoftmax(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "input")
	if err != nil {
		return nil, err
	}
	def := int64(-1)
	if imp.opset < 13 {
		def = 1
	}
	a, err := attrInt(n, "axis", def)
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
	typ := graph.OpSoftmax
	if n.GetOpType() == "LogSoftmax" {
		typ = graph.OpLogSoftmax
	}
	return imp.emit1(n, typ, []*value{x}, imp.newOut(n, 0, x.et, x.shape), 5*numel(x.shape), "dim", strconv.Itoa(axis))
}

// opDropout: training-mode dropout becomes dropout (y, mask), the mask's
// element type set by Options.DropoutMask; inference dropout is the
// identity.
func opDropout(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "data")
	if err != nil {
		return nil, err
	}
	ratio := 0.5
	training := false
	if imp.opset >= 12 {
		if v := opt(in, 1); v != nil {
			c, ok := constScalar(v)
			if !ok {
				return nil, fmt.Errorf("ratio %q is not a constant scalar: %w", v.name, ErrUnsupported)
			}
			ratio = c
		}
		if v := opt(in, 2); v != nil {
			c, ok := constScalar(v)
			if !ok {
				return nil, fmt.Errorf("training_mode %q is not a constant: %w", v.name, ErrUnsupported)
			}
			training = c != 0
		}
	} else {
		if ratio, err = attrFloat(n, "ratio", 0.5); err != nil {
			return nil, err
		}
		isTest, err := attrInt(n, "is_test", 0)
		if err != nil {
			return nil, err
		}
		training = isTest == 0 && len(n.GetOutput()) > 1 && n.GetOutput()[1] != ""
	}
	if !(ratio >= 0 && ratio < 1) {
		return nil, fmt.Errorf("ratio %g, expected 0 <= ratio < 1", ratio)
	}
	if !training || ratio == 0 {
		outs := []*value{x}
		if len(n.GetOutput()) > 1 && n.GetOutput()[1] != "" {
			mask := imp.newOut(n, 1, int32(TensorProto_BOOL), x.shape)
			mask.ints = make([]int64, 0)
			if numel(x.shape) <= maxFold {
				mask.ints = make([]int64, numel(x.shape))
				for i := range mask.ints {
					mask.ints[i] = 1
				}
				mask.isConst = true
			}
			outs = append(outs, mask)
		}
		return outs, nil
	}
	y := imp.newOut(n, 0, x.et, x.shape)
	// The mask the backward reads: one byte per element, or the scaled
	// noise of the input's type that PyTorch's unfused (CPU) dropout saves
	// (see DropoutMask).
	met := int32(TensorProto_UINT8)
	if imp.opts.DropoutMask == DropoutMaskLikeInput {
		met = x.et
	}
	mask := imp.newOut(n, 1, met, x.shape)
	ob, err := imp.emit(n, graph.OpDropout, []*value{x}, []*value{y, mask}, 2*numel(x.shape), "p", ftoa(ratio))
	if err != nil {
		return nil, err
	}
	ob.Flags(graph.NonDeterministic)
	return []*value{y, mask}, nil
}

var reduceType = map[string]string{
	"ReduceMean": OpReduceMean, "ReduceSum": OpReduceSum, "ReduceMax": OpReduceMax,
	"ReduceMin": OpReduceMax, "ReduceProd": OpReduceProd,
	"ReduceL1": OpNorm, "ReduceL2": OpNorm, "ReduceLogSumExp": OpNorm,
}

func opReduce(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "data")
	if err != nil {
		return nil, err
	}
	since := int64(18)
	if n.GetOpType() == "ReduceSum" {
		since = 13
	}
	axes, ok, err := imp.axesOf(n, in, since)
	if err != nil {
		return nil, err
	}
	keep, err := attrInt(n, "keepdims", 1)
	if err != nil {
		return nil, err
	}
	noop, err := attrInt(n, "noop_with_empty_axes", 0)
	if err != nil {
		return nil, err
	}
	r := len(x.shape)
	red := make([]bool, r)
	if (!ok || len(axes) == 0) && noop != 0 {
		return []*value{x}, nil
	}
	if !ok || len(axes) == 0 {
		for i := range red {
			red[i] = true
		}
	}
	for _, a := range axes {
		ax, err := normAxis(a, r, "axis")
		if err != nil {
			return nil, err
		}
		red[ax] = true
	}
	var shape []int64
	var names []int64
	for i, d := range x.shape {
		switch {
		case !red[i]:
			shape = append(shape, d)
		case keep != 0:
			shape = append(shape, 1)
		}
		if red[i] {
			names = append(names, int64(i))
		}
	}
	op := n.GetOpType()
	if x.isConst {
		return imp.foldReduce(n, x, red, shape, op), nil
	}
	if (op == "ReduceMax" || op == "ReduceMin") && len(names) == 1 && r > 1 {
		// x.max(dim) (and min): torch exports its values as a ReduceMax over
		// the one axis; PyTorch saves the indices (int64, the output's
		// shape) and scatters the gradient into zeros at them. amax over
		// several axes and a max of everything save the input and the
		// output (reduce_max).
		y := imp.newOut(n, 0, x.et, shape)
		idx := &value{name: y.name + ".indices", et: int32(TensorProto_INT64), shape: shape, tensor: graph.NoTensor}
		if _, err := imp.emit(n, OpMaxDim, []*value{x}, []*value{y, idx}, numel(x.shape),
			"dim", strconv.FormatInt(names[0], 10), "keepdim", strconv.FormatBool(keep != 0), "onnx_op", op); err != nil {
			return nil, err
		}
		return []*value{y}, nil
	}
	return imp.emit1(n, reduceType[op], []*value{x}, imp.newOut(n, 0, x.et, shape), numel(x.shape),
		"dims", joinInts(names), "keepdim", strconv.FormatBool(keep != 0), "onnx_op", op)
}

// foldReduce reduces constant data over the axes marked in red.
func (imp *importer) foldReduce(n *NodeProto, x *value, red []bool, shape []int64, op string) []*value {
	// Output index of each input element: drop reduced coordinates.
	tot := numel(x.shape)
	outN := numel(shape)
	acc := make([]float64, outN)
	cnt := make([]int64, outN)
	for i := int64(0); i < tot; i++ {
		rem, o, st := i, int64(0), int64(1)
		for d := len(x.shape) - 1; d >= 0; d-- {
			c := rem % x.shape[d]
			rem /= x.shape[d]
			if !red[d] {
				o += c * st
				st *= x.shape[d]
			}
		}
		v := 0.0
		if x.flts != nil {
			v = x.flts[i]
		} else {
			v = float64(x.ints[i])
		}
		switch op {
		case "ReduceL1":
			v = math.Abs(v)
		case "ReduceL2":
			v *= v
		case "ReduceLogSumExp":
			v = math.Exp(v)
		}
		switch {
		case cnt[o] == 0:
			acc[o] = v
		case op == "ReduceMax":
			acc[o] = math.Max(acc[o], v)
		case op == "ReduceMin":
			acc[o] = math.Min(acc[o], v)
		case op == "ReduceProd":
			acc[o] *= v
		default:
			acc[o] += v
		}
		cnt[o]++
	}
	for i := range acc {
		switch op {
		case "ReduceMean":
			if cnt[i] > 0 {
				acc[i] /= float64(cnt[i])
			}
		case "ReduceL2":
			acc[i] = math.Sqrt(acc[i])
		case "ReduceLogSumExp":
			acc[i] = math.Log(acc[i])
		}
	}
	if isFloatType(x.et) {
		return []*value{imp.constOut(n, 0, x.et, shape, nil, acc)}
	}
	ints := make([]int64, len(acc))
	for i, f := range acc {
		ints[i] = toInt(f)
	}
	return []*value{imp.constOut(n, 0, x.et, shape, ints, nil)}
}

func opConv(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "X")
	if err != nil {
		return nil, err
	}
	w, err := input(in, 1, "W")
	if err != nil {
		return nil, err
	}
	bias := opt(in, 2)
	if len(x.shape) < 3 || len(w.shape) != len(x.shape) {
		return nil, fmt.Errorf("X %v and W %v: expected [N, C, spatial...] and a weight of the same rank", x.shape, w.shape)
	}
	nsp := len(x.shape) - 2
	win, err := readWindow(n, nsp, w.shape[2:])
	if err != nil {
		return nil, err
	}
	g, err := attrInt(n, "group", 1)
	if err != nil {
		return nil, err
	}
	N, C := x.shape[0], x.shape[1]
	transpose := n.GetOpType() == "ConvTranspose"
	var O int64
	if g <= 0 || C%g != 0 {
		return nil, fmt.Errorf("group %d, expected > 0 and dividing the %d input channels", g, C)
	}
	if transpose {
		if w.shape[0] != C {
			return nil, fmt.Errorf("W %v: expected %d input channels in dimension 0", w.shape, C)
		}
		O = mulSat(w.shape[1], g)
	} else {
		O = w.shape[0]
		if mulSat(w.shape[1], g) != C || O%g != 0 {
			return nil, fmt.Errorf("W %v with group %d does not fit %d input channels", w.shape, g, C)
		}
	}
	if bias != nil && (len(bias.shape) != 1 || bias.shape[0] != O) {
		return nil, fmt.Errorf("B %v, expected [%d]", bias.shape, O)
	}
	var sp []int64
	if transpose {
		op, _, err := attrInts(n, "output_padding")
		if err != nil {
			return nil, err
		}
		os, hasOS, err := attrInts(n, "output_shape")
		if err != nil {
			return nil, err
		}
		sp = make([]int64, nsp)
		for i := 0; i < nsp; i++ {
			if hasOS && len(os) >= nsp {
				sp[i] = os[len(os)-nsp+i]
				continue
			}
			var opad int64
			if i < len(op) {
				opad = op[i]
			}
			sp[i] = win.strides[i]*(x.shape[2+i]-1) + opad + (win.kernel[i]-1)*win.dilations[i] + 1 - win.pads[i] - win.pads[nsp+i]
		}
	} else if sp, err = win.outSize(x.shape[2:], false); err != nil {
		return nil, err
	}
	shape := append([]int64{N, O}, sp...)
	if err := checkShape(shape, "output shape"); err != nil {
		return nil, err
	}
	kvol := numel(win.kernel)
	var flops int64
	if transpose {
		flops = mulSat(mulSat(mulSat(2*N, C), numel(x.shape[2:])), mulSat(O/g, kvol))
	} else {
		flops = mulSat(mulSat(mulSat(2*N, O), numel(sp)), mulSat(C/g, kvol))
	}
	if bias != nil {
		flops = addSat(flops, numel(shape))
	}
	typ := graph.OpConv2d
	if transpose {
		typ = graph.OpConvTranspose2d
	}
	pk, pv := padAttr(win.pads)
	attrs := []string{"kernel", joinInts(win.kernel), "stride", joinInts(win.strides), pk, pv,
		"dilation", joinInts(win.dilations), "groups", strconv.FormatInt(g, 10)}
	if x.strided {
		// a transposed or sliced view (a Conv1d over a [N, T, C] sequence
		// transposed to [N, C, T]): the kernel copies it, in the forward and
		// again in the backward, as a trace's input_format says
		attrs = append(attrs, graph.AttrInputFormat, graph.Strided)
	}
	return imp.emit1(n, typ, []*value{x, w, bias}, imp.newOut(n, 0, x.et, shape), flops, attrs...)
}

// opBatchNorm maps BatchNormalization onto batchnorm (x, gamma, beta,
// running_mean, running_var) -> (y, save_mean, save_invstd). The running
// statistics ONNX returns in training mode are the buffers themselves
// (PyTorch updates them in place).
func opBatchNorm(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	var xs [5]*value
	for i, what := range []string{"X", "scale", "B", "input_mean", "input_var"} {
		v, err := input(in, i, what)
		if err != nil {
			return nil, err
		}
		xs[i] = v
	}
	x := xs[0]
	if len(x.shape) < 2 {
		return nil, fmt.Errorf("X %v, expected [N, C, ...]", x.shape)
	}
	c := x.shape[1]
	for i, v := range xs[1:] {
		if len(v.shape) != 1 || v.shape[0] != c {
			return nil, fmt.Errorf("input %d %q has shape %v, expected [%d]", i+1, v.name, v.shape, c)
		}
	}
	eps, err := attrFloat(n, "epsilon", 1e-5)
	if err != nil {
		return nil, err
	}
	mom, err := attrFloat(n, "momentum", 0.9)
	if err != nil {
		return nil, err
	}
	y := imp.newOut(n, 0, x.et, x.shape)
	f32 := int32(TensorProto_FLOAT)
	sm := &value{name: imp.outName(n, 0) + ".save_mean", et: f32, shape: []int64{c}, tensor: graph.NoTensor}
	si := &value{name: imp.outName(n, 0) + ".save_invstd", et: f32, shape: []int64{c}, tensor: graph.NoTensor}
	attrs := []string{"eps", ftoa(eps), "momentum", ftoa(1 - mom)}
	if x.strided {
		// a BatchNorm1d over a transposed [N, L, C] sequence: PyTorch's CPU
		// backward then takes its generic path, without the temporary
		attrs = append(attrs, graph.AttrInputFormat, graph.Strided)
	}
	if _, err := imp.emit(n, graph.OpBatchNorm, xs[:], []*value{y, sm, si}, 8*numel(x.shape), attrs...); err != nil {
		return nil, err
	}
	outs := []*value{y, xs[3], xs[4]}
	if imp.opset < 14 {
		outs = append(outs, sm, si)
	}
	return outs, nil
}

func opLayerNorm(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "X")
	if err != nil {
		return nil, err
	}
	scale, err := input(in, 1, "Scale")
	if err != nil {
		return nil, err
	}
	bias := opt(in, 2)
	a, err := attrInt(n, "axis", -1)
	if err != nil {
		return nil, err
	}
	if len(x.shape) == 0 {
		return nil, fmt.Errorf("X is a scalar, expected rank >= 1")
	}
	axis, err := normAxis(a, len(x.shape), "axis")
	if err != nil {
		return nil, err
	}
	eps, err := attrFloat(n, "epsilon", 1e-5)
	if err != nil {
		return nil, err
	}
	st := append([]int64(nil), x.shape...)
	for i := axis; i < len(st); i++ {
		st[i] = 1
	}
	y := imp.newOut(n, 0, x.et, x.shape)
	f32 := int32(TensorProto_FLOAT)
	mean := imp.newOut(n, 1, f32, st)
	rstd := imp.newOut(n, 2, f32, st)
	if _, err := imp.emit(n, graph.OpLayerNorm, []*value{x, scale, bias}, []*value{y, mean, rstd}, 8*numel(x.shape),
		"eps", ftoa(eps), "axis", strconv.Itoa(axis)); err != nil {
		return nil, err
	}
	return []*value{y, mean, rstd}, nil
}

func opPool(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "X")
	if err != nil {
		return nil, err
	}
	if len(x.shape) < 3 {
		return nil, fmt.Errorf("X %v, expected [N, C, spatial...]", x.shape)
	}
	nsp := len(x.shape) - 2
	win, err := readWindow(n, nsp, nil)
	if err != nil {
		return nil, err
	}
	ceil, err := attrInt(n, "ceil_mode", 0)
	if err != nil {
		return nil, err
	}
	sp, err := win.outSize(x.shape[2:], ceil != 0)
	if err != nil {
		return nil, err
	}
	shape := append([]int64{x.shape[0], x.shape[1]}, sp...)
	flops := mulSat(numel(shape), numel(win.kernel))
	pk, pv := padAttr(win.pads)
	attrs := []string{"kernel", joinInts(win.kernel), "stride", joinInts(win.strides), pk, pv,
		"ceil_mode", strconv.FormatBool(ceil != 0)}
	y := imp.newOut(n, 0, x.et, shape)
	if n.GetOpType() == "AveragePool" {
		cip, err := attrInt(n, "count_include_pad", 0)
		if err != nil {
			return nil, err
		}
		return imp.emit1(n, graph.OpAvgPool2d, []*value{x}, y, flops, append(attrs, "count_include_pad", strconv.FormatBool(cip != 0))...)
	}
	idx := imp.newOut(n, 1, int32(TensorProto_INT64), shape)
	if _, err := imp.emit(n, graph.OpMaxPool2d, []*value{x}, []*value{y, idx}, flops, attrs...); err != nil {
		return nil, err
	}
	return []*value{y, idx}, nil
}

func opGlobalPool(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "X")
	if err != nil {
		return nil, err
	}
	if len(x.shape) < 3 {
		return nil, fmt.Errorf("X %v, expected [N, C, spatial...]", x.shape)
	}
	shape := []int64{x.shape[0], x.shape[1]}
	ones := make([]int64, len(x.shape)-2)
	for range ones {
		shape = append(shape, 1)
	}
	for i := range ones {
		ones[i] = 1
	}
	y := imp.newOut(n, 0, x.et, shape)
	if n.GetOpType() == "GlobalAveragePool" {
		return imp.emit1(n, graph.OpAdaptiveAvgPool, []*value{x}, y, numel(x.shape), "output_size", joinInts(ones))
	}
	idx := &value{name: y.name + ".indices", et: int32(TensorProto_INT64), shape: shape, tensor: graph.NoTensor}
	if _, err := imp.emit(n, OpAdaptiveMaxPool, []*value{x}, []*value{y, idx}, numel(x.shape), "output_size", joinInts(ones)); err != nil {
		return nil, err
	}
	return []*value{y}, nil
}

// opResize maps Resize (F.interpolate; opset 9's Upsample) onto an
// upsampling op (graph.OpUpsample, its mode kept as an attribute): the
// output shape comes from the constant sizes, else from the constant
// scales (floor(dim * scale)). PyTorch's upsampling backward, in every
// mode, reads nothing of the forward but its sizes, so one op type serves
// nearest, linear and cubic modes.
func opResize(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "X")
	if err != nil {
		return nil, err
	}
	rank := len(x.shape)
	if rank < 3 {
		return nil, fmt.Errorf("X %v, expected [N, C, spatial...]", x.shape)
	}
	var sizes, scales *value
	switch {
	case n.GetOpType() == "Upsample" || len(in) == 2: // opset 9-10: (X, scales)
		scales = opt(in, 1)
	default: // opset 11+: (X, roi, scales, sizes)
		scales, sizes = opt(in, 2), opt(in, 3)
	}
	shape := make([]int64, rank)
	switch {
	case sizes != nil && numel(sizes.shape) > 0:
		s, err := constInts(sizes, "sizes")
		if err != nil {
			return nil, err
		}
		if len(s) != rank {
			return nil, fmt.Errorf("sizes %v, expected %d values (one per dimension of X %v)", s, rank, x.shape)
		}
		copy(shape, s)
	case scales != nil && numel(scales.shape) > 0:
		if !scales.isConst {
			return nil, fmt.Errorf("scales %q is not a constant, expected values known at import time: dynamic shapes are %w", scales.name, ErrUnsupported)
		}
		f := scales.flts
		if f == nil {
			for _, v := range scales.ints {
				f = append(f, float64(v))
			}
		}
		if len(f) != rank {
			return nil, fmt.Errorf("scales %v, expected %d values (one per dimension of X %v)", f, rank, x.shape)
		}
		for i, sc := range f {
			if !(sc > 0) || math.IsInf(sc, 0) {
				return nil, fmt.Errorf("scales[%d] = %v, expected a positive finite number", i, sc)
			}
			shape[i] = int64(math.Floor(float64(x.shape[i]) * sc))
		}
	default:
		return nil, fmt.Errorf("neither sizes nor scales is given, expected one of them")
	}
	for i, d := range shape {
		if d < 1 || d > 1<<31 {
			return nil, fmt.Errorf("output dimension %d = %d, expected 1..%d", i, d, int64(1)<<31)
		}
	}
	if shape[0] != x.shape[0] || shape[1] != x.shape[1] {
		return nil, fmt.Errorf("output shape %v resizes the batch or channels of X %v, expected only spatial dimensions to change", shape, x.shape)
	}
	mode, err := attrString(n, "mode", "nearest")
	if err != nil {
		return nil, err
	}
	y := imp.newOut(n, 0, x.et, shape)
	return imp.emit1(n, graph.OpUpsample, []*value{x}, y, numel(shape), "mode", mode)
}

// opGemm maps Gemm onto linear (A, B[, C]): B is the weight, [N, K] with
// transB=1 as nn.Linear exports it.
func opGemm(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	a, err := input(in, 0, "A")
	if err != nil {
		return nil, err
	}
	b, err := input(in, 1, "B")
	if err != nil {
		return nil, err
	}
	c := opt(in, 2)
	ta, err := attrInt(n, "transA", 0)
	if err != nil {
		return nil, err
	}
	tb, err := attrInt(n, "transB", 0)
	if err != nil {
		return nil, err
	}
	if len(a.shape) != 2 || len(b.shape) != 2 {
		return nil, fmt.Errorf("A %v and B %v, expected matrices", a.shape, b.shape)
	}
	M, K := a.shape[0], a.shape[1]
	if ta != 0 {
		M, K = K, M
	}
	K2, N := b.shape[0], b.shape[1]
	if tb != 0 {
		K2, N = N, K2
	}
	if K != K2 {
		return nil, fmt.Errorf("A %v (transA=%d) and B %v (transB=%d): inner dimensions %d and %d differ", a.shape, ta, b.shape, tb, K, K2)
	}
	shape := []int64{M, N}
	if c != nil {
		if _, err := broadcast(shape, c.shape); err != nil {
			return nil, fmt.Errorf("C %v does not broadcast to [%d %d]", c.shape, M, N)
		}
	}
	flops := mulSat(mulSat(2*M, K), N)
	if c != nil {
		flops = addSat(flops, M*N)
	}
	attrs := []string{}
	if ta != 0 {
		attrs = append(attrs, "trans_a", "1")
	}
	if tb == 0 {
		attrs = append(attrs, "trans_b", "0")
	}
	return imp.emit1(n, graph.OpLinear, []*value{a, b, c}, imp.newOut(n, 0, a.et, shape), flops, attrs...)
}

// opMatMul maps MatMul onto matmul, or onto linear when B is a transposed
// weight (x @ W^T), fusing a following Add of a bias vector as PyTorch's
// linear does.
func opMatMul(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	a, err := input(in, 0, "A")
	if err != nil {
		return nil, err
	}
	b, err := input(in, 1, "B")
	if err != nil {
		return nil, err
	}
	as, bs := a.shape, b.shape
	if len(as) == 0 || len(bs) == 0 {
		return nil, fmt.Errorf("A %v and B %v: expected tensors of rank >= 1", as, bs)
	}
	if len(as) == 1 {
		as = []int64{1, as[0]}
	}
	if len(bs) == 1 {
		bs = []int64{bs[0], 1}
	}
	m, k, k2, nn := as[len(as)-2], as[len(as)-1], bs[len(bs)-2], bs[len(bs)-1]
	if k != k2 {
		return nil, fmt.Errorf("A %v and B %v: inner dimensions %d and %d differ", a.shape, b.shape, k, k2)
	}
	batch, err := broadcast(as[:len(as)-2], bs[:len(bs)-2])
	if err != nil {
		return nil, err
	}
	shape := append(append([]int64{}, batch...), m, nn)
	if len(a.shape) == 1 {
		shape = append(shape[:len(shape)-2], nn)
	}
	if len(b.shape) == 1 {
		shape = shape[:len(shape)-1]
	}
	if err := checkShape(shape, "output shape"); err != nil {
		return nil, err
	}
	flops := mulSat(mulSat(mulSat(2*numel(batch), m), k), nn)
	if w := b.transposeOf; w != nil && len(a.shape) >= 2 {
		outs := []*value{imp.newOut(n, 0, a.et, shape)}
		var bias *value
		if j, ok := imp.biasAdd(n, shape); ok {
			bn := imp.nodes[j]
			other := bn.GetInput()[0]
			if other == imp.outName(n, 0) {
				other = bn.GetInput()[1]
			}
			bias = imp.vals[other]
			imp.fused[j] = true
			o := &value{name: bn.GetOutput()[0], et: a.et, shape: shape, tensor: graph.NoTensor}
			if _, err := imp.emit1(n, graph.OpLinear, []*value{a, w, bias}, o, addSat(flops, numel(shape))); err != nil {
				return nil, err
			}
			// Bind the Add's output too (the MatMul's is read only by it).
			if imp.vals[o.name] != nil {
				return nil, fmt.Errorf("output %q of the fused bias Add is defined twice", o.name)
			}
			imp.vals[o.name] = o
			outs[0] = o
			return outs, nil
		}
		return imp.emit1(n, graph.OpLinear, []*value{a, w}, outs[0], flops)
	}
	// PyTorch's matmul reshapes each operand into the 3-D (bmm) or 2-D (mm)
	// operand it multiplies, merging the leading dimensions: a strided view
	// whose leading dimensions cannot merge is copied, and the copy is what
	// the backward saves. That happens to an operand of rank >= 4 (batched
	// path) and to one of rank >= 3 multiplied with a matrix or vector
	// (folded path); a rank-3 operand of a batched product keeps its shape
	// and is read as it is.
	copyOp := func(x *value, otherRank int) (*value, error) {
		r := len(x.shape)
		if x.strided && (r >= 4 || (r == 3 && otherRank <= 2)) {
			return imp.contiguous(n, x)
		}
		return x, nil
	}
	if a, err = copyOp(a, len(b.shape)); err != nil {
		return nil, err
	}
	if b, err = copyOp(b, len(a.shape)); err != nil {
		return nil, err
	}
	return imp.emit1(n, graph.OpMatMul, []*value{a, b}, imp.newOut(n, 0, a.et, shape), flops)
}

// biasAdd finds the node that adds a bias vector to this MatMul's output: the
// output's only reader, an Add whose other operand is a 1-D weight of the
// output's last dimension, with the same output shape.
func (imp *importer) biasAdd(n *NodeProto, shape []int64) (int, bool) {
	outs := n.GetOutput()
	if len(outs) == 0 || outs[0] == "" || imp.users[outs[0]] != 1 || len(shape) == 0 {
		return 0, false
	}
	name := outs[0]
	for j := imp.cur + 1; j < len(imp.nodes); j++ {
		bn := imp.nodes[j]
		ins := bn.GetInput()
		reads := false
		for _, s := range ins {
			if s == name {
				reads = true
			}
		}
		if !reads {
			continue
		}
		if bn.GetOpType() != "Add" || (bn.GetDomain() != "" && bn.GetDomain() != "ai.onnx") || len(ins) != 2 || len(bn.GetOutput()) != 1 || bn.GetOutput()[0] == "" {
			return 0, false
		}
		other := ins[0]
		if other == name {
			other = ins[1]
		}
		v := imp.vals[other]
		if v == nil || v.kind != graph.Parameter || len(v.shape) != 1 || v.shape[0] != shape[len(shape)-1] {
			return 0, false
		}
		return j, true
	}
	return 0, false
}

func opPad(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "data")
	if err != nil {
		return nil, err
	}
	var pads []int64
	if imp.opset >= 11 {
		pv, err := input(in, 1, "pads")
		if err != nil {
			return nil, err
		}
		if pads, err = constInts(pv, "pads"); err != nil {
			return nil, err
		}
		if v := opt(in, 3); v != nil {
			return nil, fmt.Errorf("input axes: %w", ErrUnsupported)
		}
	} else if pads, _, err = attrInts(n, "pads"); err != nil {
		return nil, err
	}
	r := len(x.shape)
	if len(pads) != 2*r {
		return nil, fmt.Errorf("pads %v has %d entries, expected %d", pads, len(pads), 2*r)
	}
	mode, err := attrString(n, "mode", "constant")
	if err != nil {
		return nil, err
	}
	shape := append([]int64(nil), x.shape...)
	for i := range shape {
		if pads[i] < -(1<<40) || pads[i] > 1<<40 || pads[r+i] < -(1<<40) || pads[r+i] > 1<<40 {
			return nil, fmt.Errorf("pads %v: implausibly large", pads)
		}
		shape[i] += pads[i] + pads[r+i]
	}
	if err := checkShape(shape, "output shape"); err != nil {
		return nil, err
	}
	typ := graph.OpPad
	if mode == "reflect" || mode == "edge" {
		// reflection_pad and replication_pad: their backward reads self
		typ = OpPadReflect
	}
	return imp.emit1(n, typ, []*value{x}, imp.newOut(n, 0, x.et, shape), 0, "pads", joinInts(pads), "mode", mode)
}
