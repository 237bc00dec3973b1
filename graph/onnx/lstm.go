package onnx

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/remat-dev/remat/graph"
)

// opLSTM converts an LSTM node into the ops PyTorch's CPU LSTM runs
// (aten/src/ATen/native/RNN.cpp, _lstm_impl: FullLayer with
// pre_compute_input, LSTMCell), per direction:
//
//   - the input projection of every time step at once: linear(X, W_ih,
//     b_ih) -> [seq, batch, 4H] (X copied first when it is a strided view,
//     as matmul's reshape does for a transposed batch-first input), split
//     into per-step views (unbind);
//   - one lstm_step op per time step: gates = linear(h, W_hh, b_hh) + the
//     step's projection, the sigmoid/tanh gate activations in place,
//     c = f*c_prev + i*g, h = o*tanh(c). It returns h, c, the activated
//     gates [batch, 4H] and tanh(c); its backward reads what autograd saves
//     for these ops: h_prev (addmm), c_prev (f*c_prev), the gates (the
//     in-place sigmoid/tanh outputs and the products' operands) and tanh(c):
//     4H + 3H per batch row per step, h and c being the next step's
//     h_prev and c_prev. The product i*g, added into f*c_prev in place, is
//     the op's workspace;
//   - Y: the per-step h stacked (concat), both directions concatenated;
//     Y_h and Y_c, emitted only if some op reads them.
//
// W, R and B are read through torch.onnx's gate reordering (Slice and Concat
// of the parameters, see view): the ops read nn.LSTM's parameters
// weight_ih, weight_hh, bias_ih, bias_hh themselves. The sequence_lens
// input is ignored (every sequence is taken as full length).
func opLSTM(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	x, err := input(in, 0, "X")
	if err != nil {
		return nil, err
	}
	w, err := input(in, 1, "W")
	if err != nil {
		return nil, err
	}
	r, err := input(in, 2, "R")
	if err != nil {
		return nil, err
	}
	bias, h0, c0, peep := opt(in, 3), opt(in, 5), opt(in, 6), opt(in, 7)
	h, err := attrInt(n, "hidden_size", 0)
	if err != nil {
		return nil, err
	}
	dir, err := attrString(n, "direction", "forward")
	if err != nil {
		return nil, err
	}
	layout, err := attrInt(n, "layout", 0)
	if err != nil {
		return nil, err
	}
	dirs := int64(1)
	switch dir {
	case "forward", "reverse":
	case "bidirectional":
		dirs = 2
	default:
		return nil, fmt.Errorf("direction %q, expected forward, reverse or bidirectional", dir)
	}
	if layout != 0 && layout != 1 {
		return nil, fmt.Errorf("layout %d, expected 0 or 1", layout)
	}
	if len(x.shape) != 3 || len(w.shape) != 3 || len(r.shape) != 3 {
		return nil, fmt.Errorf("X %v, W %v, R %v: expected rank-3 tensors", x.shape, w.shape, r.shape)
	}
	if !isFloatType(x.et) {
		return nil, fmt.Errorf("X %q has type %s, expected a floating-point type", x.name, typeName(x.et))
	}
	if h <= 0 {
		h = r.shape[2]
	}
	seq, batch, isz := x.shape[0], x.shape[1], x.shape[2]
	seqAxis, dirAxis := 0, 1
	if layout != 0 {
		seq, batch = batch, seq
		seqAxis, dirAxis = 1, 2
	}
	if w.shape[0] != dirs || w.shape[1] != 4*h || w.shape[2] != isz || r.shape[0] != dirs || r.shape[1] != 4*h || r.shape[2] != h {
		return nil, fmt.Errorf("W %v and R %v, expected [%d %d %d] and [%d %d %d]", w.shape, r.shape, dirs, 4*h, isz, dirs, 4*h, h)
	}
	if seq <= 0 || batch <= 0 {
		return nil, fmt.Errorf("X %v: expected a non-empty sequence and batch", x.shape)
	}
	if seq*dirs > maxLSTMSteps {
		return nil, fmt.Errorf("X %v: %d time steps in %d directions, expected at most %d steps in all (one op each)", x.shape, seq, dirs, maxLSTMSteps)
	}
	yShape := []int64{seq, dirs, batch, h}
	st := []int64{dirs, batch, h}
	step := []int64{1, 1, batch, h} // one step's h, c, tanh(c), in Y's layout
	gsh := []int64{1, 1, batch, 4 * h}
	proj := []int64{seq, batch, 4 * h}
	if layout != 0 {
		yShape = []int64{batch, seq, dirs, h}
		st = []int64{batch, dirs, h}
		step = []int64{batch, 1, 1, h}
		gsh = []int64{batch, 1, 1, 4 * h}
		proj = []int64{batch, seq, 4 * h}
	}
	for _, s := range [][]int64{yShape, proj} {
		if err := checkShape(s, "output shape"); err != nil {
			return nil, err
		}
	}
	// Per-direction parameters: the parameters W, R and B read through
	// their reordering when there is one per direction (B: bias_ih, bias_hh
	// per direction), else the whole input for every direction.
	perDir := func(v *value, k int) [][]*value {
		out := make([][]*value, dirs)
		ps := paramSources(v)
		for d := range out {
			switch {
			case v == nil:
			case int64(len(ps)) == dirs*int64(k):
				out[d] = ps[d*k : (d+1)*k]
			default:
				out[d] = []*value{v}
			}
		}
		return out
	}
	wd, rd, bd := perDir(w, 1), perDir(r, 1), perDir(bias, 2)
	xin, err := imp.contiguous(n, x)
	if err != nil {
		return nil, err
	}
	base := imp.opName(n)
	sub := func(suffix string) *NodeProto {
		return &NodeProto{Name: proto.String(base + suffix), OpType: proto.String("LSTM")}
	}
	tmp := func(name string, shape []int64) *value {
		return &value{name: name, et: x.et, shape: shape, tensor: graph.NoTensor}
	}
	dt := dtypeOf(x.et)
	elem := dt.Size()
	var ys, hs, cs []*value
	for d := int64(0); d < dirs; d++ {
		sfx := ""
		if dirs == 2 || dir == "reverse" {
			sfx = map[bool]string{false: ".forward", true: ".reverse"}[dir == "reverse" || d == 1]
		}
		// Input projection and its per-step views.
		bih := (*value)(nil)
		if len(bd[d]) == 2 {
			bih = bd[d][0]
		}
		xp := tmp(base+sfx+".input_proj", proj)
		pn := sub(sfx + ".input_proj")
		pins := append(append([]*value{xin}, wd[d]...), bih)
		if _, err := imp.emit(pn, graph.OpLinear, pins, []*value{xp},
			mulSat(mulSat(2*seq*batch, isz), 4*h)); err != nil {
			return nil, err
		}
		sizes := make([]int, seq)
		for i := range sizes {
			sizes[i] = 1
		}
		parts := imp.b.Split(base+sfx+".unbind", xp.tensor, seqAxis, sizes...)
		if err := imp.b.Err(); err != nil {
			return nil, err
		}
		if int64(len(parts)) != seq {
			return nil, fmt.Errorf("splitting the input projection into %d steps gave %d tensors", seq, len(parts))
		}
		var bhh []*value
		switch len(bd[d]) {
		case 2:
			bhh = bd[d][1:]
		case 1:
			bhh = bd[d] // one bias input for both: read once per step
		}
		hPrev, cPrev := h0, c0
		if hPrev == nil {
			hPrev = imp.zeros(base+sfx+".h0", x.et, step)
		}
		if cPrev == nil {
			cPrev = imp.zeros(base+sfx+".c0", x.et, step)
		}
		hAt := make([]*value, seq)
		var hLast, cLast *value
		for i := int64(0); i < seq; i++ {
			t := i
			if dir == "reverse" || d == 1 {
				t = seq - 1 - i
			}
			sn := sub(sfx + ".step" + strconv.FormatInt(t, 10))
			xt := &value{name: sn.GetName() + ".x", et: x.et, shape: gsh, tensor: parts[t]}
			hv, cv := tmp(sn.GetName()+".h", step), tmp(sn.GetName()+".c", step)
			gates, tc := tmp(sn.GetName()+".gates", gsh), tmp(sn.GetName()+".tanh_c", step)
			ins := append([]*value{xt, hPrev, cPrev}, rd[d]...) // a fresh slice: rd[d] shares its array
			ins = append(ins, bhh...)
			if peep != nil {
				ins = append(ins, peep)
			}
			ob, err := imp.emit(sn, OpLSTMStep, ins, []*value{hv, cv, gates, tc},
				addSat(mulSat(mulSat(2*batch, h), 4*h), mulSat(20*batch, h)),
				"hidden_size", strconv.FormatInt(h, 10), "time", strconv.FormatInt(t, 10))
			if err != nil {
				return nil, err
			}
			ob.Workspace(mulSat(mulSat(batch, h), elem))
			hAt[t], hPrev, cPrev = hv, hv, cv
			hLast, cLast = hv, cv
		}
		y := tmp(base+sfx+".Y", append([]int64(nil), step...))
		y.shape[seqAxis] = seq
		if _, err := imp.emit(sub(sfx+".stack"), graph.OpConcat, hAt, []*value{y}, 0, "dim", strconv.Itoa(seqAxis)); err != nil {
			return nil, err
		}
		ys, hs, cs = append(ys, y), append(hs, hLast), append(cs, cLast)
	}
	outs := []*value{imp.newOut(n, 0, x.et, yShape), imp.newOut(n, 1, x.et, st), imp.newOut(n, 2, x.et, st)}
	if dirs == 1 {
		outs[0].tensor = ys[0].tensor
		// Y keeps its own name: a view is free.
		if _, err := imp.viewNow(sub(".Y"), graph.OpReshape, ys[0], outs[0], "shape", joinInts(yShape)); err != nil {
			return nil, err
		}
	} else if _, err := imp.emit(sub(".Y"), graph.OpConcat, ys, outs[:1], 0, "dim", strconv.Itoa(dirAxis)); err != nil {
		return nil, err
	}
	// Y_h and Y_c: the last step's h and c of each direction, made only if
	// read.
	for k, last := range [][]*value{hs, cs} {
		o := outs[1+k]
		last := last
		stShape := st
		o.lazy = func() graph.TensorID {
			views := make([]*value, len(last))
			one := append([]int64(nil), stShape...)
			one[dirAxis-1] = 1
			for i, v := range last {
				views[i] = tmp(o.name+"."+strconv.Itoa(i), one)
				if _, err := imp.viewNow(sub(".final"), graph.OpReshape, v, views[i], "shape", joinInts(one)); err != nil {
					imp.b.Errorf("node %q: %v", n.GetName(), err)
					return graph.NoTensor
				}
			}
			if len(views) == 1 {
				vs, err := imp.viewNow(sub(".final"), graph.OpReshape, views[0], o, "shape", joinInts(stShape))
				if err != nil {
					imp.b.Errorf("node %q: %v", n.GetName(), err)
					return graph.NoTensor
				}
				return vs[0].tensor
			}
			if _, err := imp.emit(sub(".final"), graph.OpConcat, views, []*value{o}, 0, "dim", strconv.Itoa(dirAxis-1)); err != nil {
				imp.b.Errorf("node %q: %v", n.GetName(), err)
				return graph.NoTensor
			}
			return o.tensor
		}
	}
	return outs, nil
}

// maxLSTMSteps bounds the time steps (times directions) of one LSTM node:
// each becomes an op.
const maxLSTMSteps = 1 << 16

// zeros returns a constant zero tensor (an LSTM's initial state when the
// node has none).
func (imp *importer) zeros(name string, et int32, shape []int64) *value {
	v := &value{name: uniqueName(imp, name), et: et, shape: shape, tensor: graph.NoTensor, kind: graph.Constant}
	imp.vals[v.name] = v
	return v
}
