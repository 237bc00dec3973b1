package onnx

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/remat-dev/remat/graph"
)

// opInstanceNorm maps InstanceNormalization onto group_norm with one group
// per channel: (x, scale, B) -> (y, mean, rstd), mean and rstd [N, C].
// torch.onnx emits it for nn.InstanceNorm (PyTorch trains that as a batch
// norm over a [1, N*C, ...] view, which saves the same input and N*C
// statistics) and, between two Reshapes with constant ones and zeros, for
// nn.GroupNorm (fused into one group_norm by matchGroupNorm).
func opInstanceNorm(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "input")
	if err != nil {
		return nil, err
	}
	scale, err := input(in, 1, "scale")
	if err != nil {
		return nil, err
	}
	bias, err := input(in, 2, "B")
	if err != nil {
		return nil, err
	}
	if len(x.shape) < 3 {
		return nil, fmt.Errorf("input %v, expected [N, C, D1, ...]", x.shape)
	}
	c := x.shape[1]
	for i, v := range []*value{scale, bias} {
		if len(v.shape) != 1 || v.shape[0] != c {
			return nil, fmt.Errorf("input %d %q has shape %v, expected [%d]", i+1, v.name, v.shape, c)
		}
	}
	eps, err := attrFloat(n, "epsilon", 1e-5)
	if err != nil {
		return nil, err
	}
	if imp.opts.ChannelsLast && len(x.shape) == 4 && !x.isConst {
		// PyTorch 1.13, nn.InstanceNorm2d on a channels-last [2, 64, 16,
		// 16] input: clone (the contiguous copy), view to [1, 128, 16, 16],
		// native_batch_norm (remat_torch.trace).
		cp := &value{name: x.name + ".contiguous", et: x.et, shape: x.shape, tensor: graph.NoTensor}
		if _, err := imp.emit1(n, graph.OpContiguous, []*value{x}, cp, 0); err != nil {
			return nil, err
		}
		x = cp
	}
	return imp.groupNorm(n, x, scale, bias, c, eps)
}

// groupNorm emits group_norm(x, gamma, beta) with groups groups; gamma and
// beta may be nil (no affine part).
func (imp *importer) groupNorm(n *NodeProto, x, gamma, beta *value, groups int64, eps float64) ([]*value, error) {
	if !isFloatType(x.et) {
		return nil, fmt.Errorf("input %q has element type %s, expected a floating-point type", x.name, typeName(x.et))
	}
	y := imp.newOut(n, 0, x.et, x.shape)
	f32 := int32(TensorProto_FLOAT)
	st := []int64{x.shape[0], groups}
	mean := &value{name: imp.outName(n, 0) + ".mean", et: f32, shape: st, tensor: graph.NoTensor}
	rstd := &value{name: imp.outName(n, 0) + ".rstd", et: f32, shape: st, tensor: graph.NoTensor}
	if _, err := imp.emit(n, OpGroupNorm, []*value{x, gamma, beta}, []*value{y, mean, rstd}, 8*numel(x.shape),
		"groups", strconv.FormatInt(groups, 10), "eps", ftoa(eps)); err != nil {
		return nil, err
	}
	return []*value{y}, nil
}

// opPRelu maps PRelu (slope broadcast to x, as nn.PReLU's weight unsqueezed
// to [C, 1, 1]) onto prelu.
func opPRelu(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "X")
	if err != nil {
		return nil, err
	}
	slope, err := input(in, 1, "slope")
	if err != nil {
		return nil, err
	}
	shape, err := broadcast(x.shape, slope.shape)
	if err != nil {
		return nil, err
	}
	if !equalShape(shape, x.shape) {
		return nil, fmt.Errorf("slope %v does not broadcast to X %v (unidirectionally)", slope.shape, x.shape)
	}
	if x.isConst && slope.isConst {
		return imp.fold(n, x.et, shape, []*value{x, slope}, func(v []float64) float64 {
			if v[0] < 0 {
				return v[0] * v[1]
			}
			return v[0]
		}), nil
	}
	return imp.emit1(n, OpPReLU, []*value{x, slope}, imp.newOut(n, 0, x.et, x.shape), 2*numel(x.shape))
}

// opTile maps Tile (torch's repeat) onto tile.
func opTile(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "input")
	if err != nil {
		return nil, err
	}
	rv, err := input(in, 1, "repeats")
	if err != nil {
		return nil, err
	}
	reps, err := constInts(rv, "repeats")
	if err != nil {
		return nil, err
	}
	if len(reps) != len(x.shape) {
		return nil, fmt.Errorf("repeats has %d values, expected %d (the input's rank)", len(reps), len(x.shape))
	}
	shape := make([]int64, len(x.shape))
	for i, r := range reps {
		if r < 0 {
			return nil, fmt.Errorf("repeats[%d] is %d, expected >= 0", i, r)
		}
		shape[i] = mulSat(x.shape[i], r)
		if r == 0 {
			shape[i] = 0
		}
	}
	if err := checkShape(shape, "output shape"); err != nil {
		return nil, err
	}
	if x.isConst {
		src := func(o int64) int64 { // index into x of output element o
			var i, st int64 = 0, 1
			for d := len(shape) - 1; d >= 0; d-- {
				c := o % shape[d] % x.shape[d]
				o /= shape[d]
				i += c * st
				st *= x.shape[d]
			}
			return i
		}
		tot := numel(shape)
		if tot > maxFold {
			return []*value{imp.constOut(n, 0, x.et, shape, nil, nil)}, nil
		}
		var ints []int64
		var flts []float64
		for o := int64(0); o < tot; o++ {
			if x.flts != nil {
				flts = append(flts, x.flts[src(o)])
			} else {
				ints = append(ints, x.ints[src(o)])
			}
		}
		return []*value{imp.constOut(n, 0, x.et, shape, ints, flts)}, nil
	}
	return imp.emit1(n, OpTile, []*value{x}, imp.newOut(n, 0, x.et, shape), 0, "repeats", joinInts(reps))
}

// opDepthToSpace maps DepthToSpace (nn.PixelShuffle) and SpaceToDepth
// (nn.PixelUnshuffle) onto pixel_shuffle, a copy into the new layout.
func opDepthToSpace(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "input")
	if err != nil {
		return nil, err
	}
	b, err := attrInt(n, "blocksize", 0)
	if err != nil {
		return nil, err
	}
	if b < 1 || b > 1<<16 {
		return nil, fmt.Errorf("attribute blocksize is %d, expected 1..%d", b, 1<<16)
	}
	if len(x.shape) != 4 {
		return nil, fmt.Errorf("input %v, expected [N, C, H, W]", x.shape)
	}
	nb, c, h, w := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
	var shape []int64
	attrs := []string{"blocksize", strconv.FormatInt(b, 10), "onnx_op", n.GetOpType()}
	if n.GetOpType() == "DepthToSpace" {
		if c%(b*b) != 0 {
			return nil, fmt.Errorf("input %v: channels %d are not a multiple of blocksize^2 = %d", x.shape, c, b*b)
		}
		mode, err := attrString(n, "mode", "DCR")
		if err != nil {
			return nil, err
		}
		if mode != "DCR" && mode != "CRD" {
			return nil, fmt.Errorf("attribute mode is %q, expected DCR or CRD", mode)
		}
		shape = []int64{nb, c / (b * b), mulSat(h, b), mulSat(w, b)}
		attrs = append(attrs, "mode", mode)
	} else {
		if h%b != 0 || w%b != 0 {
			return nil, fmt.Errorf("input %v: height and width are not multiples of blocksize %d", x.shape, b)
		}
		shape = []int64{nb, mulSat(c, b*b), h / b, w / b}
	}
	if err := checkShape(shape, "output shape"); err != nil {
		return nil, err
	}
	if x.isConst {
		return nil, fmt.Errorf("constant input: %w", ErrUnsupported)
	}
	return imp.emit1(n, OpPixelShuffle, []*value{x}, imp.newOut(n, 0, x.et, shape), 0, attrs...)
}

// opCumSum maps CumSum onto cumsum.
func opCumSum(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "x")
	if err != nil {
		return nil, err
	}
	av, err := input(in, 1, "axis")
	if err != nil {
		return nil, err
	}
	a, ok := constScalar(av)
	if !ok {
		return nil, fmt.Errorf("axis %q is not a constant scalar: %w", av.name, ErrUnsupported)
	}
	if len(x.shape) == 0 {
		return nil, fmt.Errorf("x is a scalar, expected rank >= 1")
	}
	axis, err := normAxis(int64(a), len(x.shape), "axis")
	if err != nil {
		return nil, err
	}
	attrs := []string{"dim", strconv.Itoa(axis)}
	for _, k := range []string{"exclusive", "reverse"} {
		v, err := attrInt(n, k, 0)
		if err != nil {
			return nil, err
		}
		if v != 0 && v != 1 {
			return nil, fmt.Errorf("attribute %s is %d, expected 0 or 1", k, v)
		}
		attrs = append(attrs, k, strconv.FormatBool(v == 1))
	}
	if x.isConst {
		return nil, fmt.Errorf("constant input: %w", ErrUnsupported)
	}
	return imp.emit1(n, OpCumSum, []*value{x}, imp.newOut(n, 0, x.et, x.shape), numel(x.shape), attrs...)
}

// opTrilu maps Trilu (torch.triu, torch.tril) onto trilu, whose gradient is
// the output gradient's triangle (derivatives.yaml: grad.triu(diagonal)):
// it saves nothing. A constant input (a causal mask built from ones) is
// folded.
func opTrilu(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "input")
	if err != nil {
		return nil, err
	}
	if len(x.shape) < 2 {
		return nil, fmt.Errorf("input %v has rank %d, expected >= 2", x.shape, len(x.shape))
	}
	var k int64
	if kv := opt(in, 1); kv != nil {
		c, ok := constScalar(kv)
		if !ok {
			return nil, fmt.Errorf("k %q is not a constant scalar: %w", kv.name, ErrUnsupported)
		}
		k = int64(c)
	}
	upper, err := attrInt(n, "upper", 1)
	if err != nil {
		return nil, err
	}
	if upper != 0 && upper != 1 {
		return nil, fmt.Errorf("attribute upper is %d, expected 0 or 1", upper)
	}
	r, c := x.shape[len(x.shape)-2], x.shape[len(x.shape)-1]
	keep := func(i int64) bool { // element i lies in the kept triangle
		row, col := i/c%r, i%c
		if upper == 1 {
			return col-row >= k
		}
		return col-row <= k
	}
	if x.isConst {
		tot := numel(x.shape)
		var ints []int64
		var flts []float64
		for i := int64(0); i < tot; i++ {
			switch {
			case x.flts != nil && keep(i):
				flts = append(flts, x.flts[i])
			case x.flts != nil:
				flts = append(flts, 0)
			case keep(i):
				ints = append(ints, x.ints[i])
			default:
				ints = append(ints, 0)
			}
		}
		return []*value{imp.constOut(n, 0, x.et, x.shape, ints, flts)}, nil
	}
	if x.tensor == graph.NoTensor && x.lazy == nil && x.kind == 0 {
		// a constant too large to fold keeps its shape, not its data
		return []*value{imp.constOut(n, 0, x.et, x.shape, nil, nil)}, nil
	}
	return imp.emit1(n, OpTrilu, []*value{x}, imp.newOut(n, 0, x.et, x.shape), numel(x.shape),
		"upper", strconv.FormatBool(upper == 1), "k", strconv.FormatInt(k, 10))
}

// opGatherElements maps GatherElements (torch.gather, take_along_dim) onto
// gather_elements: the output has the indices' shape; torch saves self and
// the index (gather_backward scatters the gradient into zeros of self's
// size).
func opGatherElements(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, idx, axis, err := elementsOperands(n, in)
	if err != nil {
		return nil, err
	}
	for d := range idx.shape {
		if d != axis && idx.shape[d] > x.shape[d] {
			return nil, fmt.Errorf("indices %v exceed data %v in dimension %d", idx.shape, x.shape, d)
		}
	}
	if x.isConst {
		return nil, fmt.Errorf("constant data: %w", ErrUnsupported)
	}
	return imp.emit1(n, OpGatherElements, []*value{x, idx}, imp.newOut(n, 0, x.et, idx.shape), numel(idx.shape), "dim", strconv.Itoa(axis))
}

// opScatterElements maps ScatterElements (torch.scatter) onto scatter: a
// copy of data with updates written at the indices; torch saves only the
// index (self's gradient is grad.scatter(dim, index, 0), src's
// grad.gather(dim, index)). With reduction add (opset 16) it is
// scatter_add, whose self gradient is grad itself; torch's export for
// older opsets is matched by matchScatterAdd.
func opScatterElements(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, idx, axis, err := elementsOperands(n, in)
	if err != nil {
		return nil, err
	}
	upd, err := input(in, 2, "updates")
	if err != nil {
		return nil, err
	}
	if !equalShape(upd.shape, idx.shape) {
		return nil, fmt.Errorf("updates %v, expected the indices' shape %v", upd.shape, idx.shape)
	}
	red, err := attrString(n, "reduction", "none")
	if err != nil {
		return nil, err
	}
	switch red {
	case "none", "add":
	default:
		return nil, fmt.Errorf("reduction %q: %w (none and add are mapped)", red, ErrUnsupported)
	}
	if x.isConst && upd.isConst {
		if idx.isConst {
			// a shape computation (torch's export of index_fill expands
			// the index with one): folded
			return imp.foldScatterElements(n, x, idx, upd, axis, red == "add")
		}
		return nil, fmt.Errorf("constant data and updates with computed indices: %w", ErrUnsupported)
	}
	typ := OpScatter
	if red == "add" {
		typ = OpScatterAdd
	}
	if err := imp.makeInStep(n, x); err != nil {
		return nil, err
	}
	return imp.emit1(n, typ, []*value{x, idx, upd}, imp.newOut(n, 0, x.et, x.shape), numel(idx.shape), "dim", strconv.Itoa(axis))
}

// makeInStep gives a folded constant that a scatter writes into a producing
// op (OpConstant) where the scatter runs, instead of the resident constant
// tensorOf would make. Such data is a tensor the model makes in its
// forward (torch.zeros_like(x).scatter(...), exported as a
// ConstantOfShape the import folds), which PyTorch allocates in the step
// and frees after its last reader; a module's buffer is an initializer,
// not folded, and stays resident.
func (imp *importer) makeInStep(n *NodeProto, v *value) error {
	if v.kind != 0 || v.tensor != graph.NoTensor || v.lazy != nil {
		return nil
	}
	dt := dtypeOf(v.et)
	if dt == 0 {
		return nil // tensorOf reports it
	}
	if _, err := graph.Shape(v.shape).Bytes(dt); err != nil {
		return fmt.Errorf("data %q: %w", v.name, err)
	}
	ob := imp.b.Op(OpConstant, imp.opName(n)+".data").OutKind(v.name, graph.Activation, dt, v.shape...)
	v.tensor = ob.Output(0)
	ob.BytesAccessed(imp.b.Graph().Tensors[v.tensor].Bytes)
	return nil
}

// foldScatterElements computes a ScatterElements of constants (data,
// indices and updates known at import): the data with each update written
// (added, for add) where its index along axis says.
func (imp *importer) foldScatterElements(n *NodeProto, x, idx, upd *value, axis int, add bool) ([]*value, error) {
	r := len(x.shape)
	stride := make([]int64, r)
	s := int64(1)
	for d := r - 1; d >= 0; d-- {
		stride[d] = s
		s *= x.shape[d]
	}
	ints, flts := slices.Clone(x.ints), slices.Clone(x.flts)
	at := func(v *value, i int64) float64 {
		if v.flts != nil {
			return v.flts[i]
		}
		return float64(v.ints[i])
	}
	cnt := numel(idx.shape)
	for p := int64(0); p < cnt; p++ {
		rem, off := p, int64(0)
		for d := r - 1; d >= 0; d-- {
			c := rem % idx.shape[d]
			rem /= idx.shape[d]
			if d == axis {
				j := int64(at(idx, p))
				if j < 0 {
					j += x.shape[d]
				}
				if j < 0 || j >= x.shape[d] {
					return nil, fmt.Errorf("index %d at position %d: out of range for axis %d of size %d", int64(at(idx, p)), p, axis, x.shape[d])
				}
				c = j
			} else if c >= x.shape[d] {
				return nil, fmt.Errorf("indices %v larger than data %v along axis %d", idx.shape, x.shape, d)
			}
			off += c * stride[d]
		}
		v := at(upd, p)
		switch {
		case ints != nil && add:
			ints[off] += toInt(v)
		case ints != nil:
			ints[off] = toInt(v)
		case add:
			flts[off] += v
		default:
			flts[off] = v
		}
	}
	return []*value{imp.constOut(n, 0, x.et, x.shape, ints, flts)}, nil
}

// opScatterND maps ScatterND (torch's export of index assignment:
// x[:, a:b] = v, x[idx] = v, index_put_) onto scatter (scatter_add for
// reduction add), the op remat uses for ScatterElements: the updates
// written into a copy of the data, saving the indices; the data's gradient
// is the output's with the written places cleared (for add, the output's
// itself), the updates' a gather of it. torch exports an assignment into a
// clone (z = x.clone(); z[i] = v) as a ScatterND of x, and PyTorch's clone
// is the copy the scatter makes; an assignment into a tensor PyTorch then
// drops is modelled one copy high.
func opScatterND(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "data")
	if err != nil {
		return nil, err
	}
	idx, err := input(in, 1, "indices")
	if err != nil {
		return nil, err
	}
	upd, err := input(in, 2, "updates")
	if err != nil {
		return nil, err
	}
	if !isIntType(idx.et) {
		return nil, fmt.Errorf("indices %q have type %s, expected int64", idx.name, typeName(idx.et))
	}
	r, q := len(x.shape), len(idx.shape)
	if r == 0 || q == 0 {
		return nil, fmt.Errorf("data %v and indices %v, expected both of rank >= 1", x.shape, idx.shape)
	}
	k := idx.shape[q-1]
	if k < 1 || k > int64(r) {
		return nil, fmt.Errorf("indices %v: last dimension %d, expected 1..%d (the data's rank)", idx.shape, k, r)
	}
	want := append(slices.Clone(idx.shape[:q-1]), x.shape[k:]...)
	if !equalShape(upd.shape, want) {
		return nil, fmt.Errorf("updates %v, expected %v (the indices' shape but the last, then the data's from dimension %d)", upd.shape, want, k)
	}
	red, err := attrString(n, "reduction", "none")
	if err != nil {
		return nil, err
	}
	typ := OpScatter
	switch red {
	case "none":
	case "add":
		typ = OpScatterAdd
	default:
		return nil, fmt.Errorf("reduction %q: %w (none and add are mapped)", red, ErrUnsupported)
	}
	if x.isConst && upd.isConst {
		return nil, fmt.Errorf("constant data and updates: %w", ErrUnsupported)
	}
	indexing := "advanced"
	if idx.isConst && boxIndices(idx, x.shape) {
		indexing = "basic"
	}
	if err := imp.makeInStep(n, x); err != nil {
		return nil, err
	}
	return imp.emit1(n, typ, []*value{x, idx, upd}, imp.newOut(n, 0, x.et, x.shape), numel(upd.shape),
		"onnx_op", "ScatterND", "indexing", indexing)
}

// boxIndices reports whether constant ScatterND indices (shape [..., k])
// list every point of a box, a contiguous range in each of the first k
// dimensions of shape, in row-major order: what torch exports for
// assignment to a basic slice (x[:, a:b] = v), as opposed to a tensor index
// (x[:, idx] = v, index_put_). PyTorch differentiates the two differently
// (sim's workspace model of scatter_backward).
func boxIndices(idx *value, shape []int64) bool {
	q := len(idx.shape)
	k := int(idx.shape[q-1])
	n := numel(idx.shape[:q-1])
	if n == 0 || idx.ints == nil || int64(len(idx.ints)) != n*int64(k) {
		return false
	}
	lo, hi := make([]int64, k), make([]int64, k)
	for d := 0; d < k; d++ {
		lo[d], hi[d] = idx.ints[d], idx.ints[d]
	}
	for p := int64(0); p < n; p++ {
		for d := 0; d < k; d++ {
			v := idx.ints[p*int64(k)+int64(d)]
			if v < 0 {
				v += shape[d]
			}
			lo[d], hi[d] = min(lo[d], v), max(hi[d], v)
		}
	}
	box := int64(1)
	for d := 0; d < k; d++ {
		if lo[d] < 0 || hi[d] >= shape[d] {
			return false
		}
		box *= hi[d] - lo[d] + 1
	}
	if box != n {
		return false
	}
	// row-major enumeration of the box
	c := slices.Clone(lo)
	for p := int64(0); p < n; p++ {
		for d := 0; d < k; d++ {
			v := idx.ints[p*int64(k)+int64(d)]
			if v < 0 {
				v += shape[d]
			}
			if v != c[d] {
				return false
			}
		}
		for d := k - 1; d >= 0; d-- {
			if c[d]++; c[d] <= hi[d] {
				break
			}
			c[d] = lo[d]
		}
	}
	return true
}

// elementsOperands reads the data, the indices (of the data's rank) and the
// axis of GatherElements and ScatterElements.
func elementsOperands(n *NodeProto, in []*value) (x, idx *value, axis int, err error) {
	if x, err = input(in, 0, "data"); err != nil {
		return nil, nil, 0, err
	}
	if idx, err = input(in, 1, "indices"); err != nil {
		return nil, nil, 0, err
	}
	if !isIntType(idx.et) {
		return nil, nil, 0, fmt.Errorf("indices %q have type %s, expected int32 or int64", idx.name, typeName(idx.et))
	}
	if len(x.shape) == 0 || len(idx.shape) != len(x.shape) {
		return nil, nil, 0, fmt.Errorf("indices %v and data %v, expected the same rank >= 1", idx.shape, x.shape)
	}
	a, err := attrInt(n, "axis", 0)
	if err != nil {
		return nil, nil, 0, err
	}
	if axis, err = normAxis(a, len(x.shape), "axis"); err != nil {
		return nil, nil, 0, err
	}
	return x, idx, axis, nil
}

// opTopK maps TopK (torch.topk, sort and argsort) onto topk -> (values,
// indices): torch saves the indices (the gradient is scattered into zeros of
// the input's size at them); K must be a constant.
func opTopK(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "X")
	if err != nil {
		return nil, err
	}
	if len(x.shape) == 0 {
		return nil, fmt.Errorf("X is a scalar, expected rank >= 1")
	}
	a, err := attrInt(n, "axis", -1)
	if err != nil {
		return nil, err
	}
	axis, err := normAxis(a, len(x.shape), "axis")
	if err != nil {
		return nil, err
	}
	var k int64
	if imp.opset < 10 {
		if k, err = attrInt(n, "k", -1); err != nil {
			return nil, err
		}
	} else {
		kv, err := input(in, 1, "K")
		if err != nil {
			return nil, err
		}
		c, ok := constScalar(kv)
		if !ok {
			return nil, fmt.Errorf("K %q is not a constant: %w", kv.name, ErrUnsupported)
		}
		k = int64(c)
	}
	if k < 0 || k > x.shape[axis] {
		return nil, fmt.Errorf("K is %d, expected 0..%d (the size of axis %d)", k, x.shape[axis], axis)
	}
	if x.isConst {
		return nil, fmt.Errorf("constant input: %w", ErrUnsupported)
	}
	shape := append([]int64(nil), x.shape...)
	shape[axis] = k
	vals := imp.newOut(n, 0, x.et, shape)
	idx := imp.newOut(n, 1, int32(TensorProto_INT64), shape)
	if _, err := imp.emit(n, OpTopK, []*value{x}, []*value{vals, idx}, numel(x.shape), "dim", strconv.Itoa(axis), "k", strconv.FormatInt(k, 10)); err != nil {
		return nil, err
	}
	return []*value{vals, idx}, nil
}
