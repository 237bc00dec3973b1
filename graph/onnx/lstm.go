package onnx

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/remat-dev/remat/graph"
)

// opLSTM converts an LSTM, GRU or RNN node into the ops PyTorch's CPU
// recurrent layers run (aten/src/ATen/native/RNN.cpp, _rnn_impl: FullLayer
// with pre_compute_input, then one cell per time step), per direction:
//
//   - the input projection of every time step at once: linear(X, W_ih,
//     b_ih) -> [seq, batch, gates*H] (X copied first, once per direction,
//     when it is a strided view, as matmul's reshape does for a transposed
//     batch-first input), split into per-step views (unbind);
//   - one step op per time step (cells below), its backward reading what
//     autograd saves for the cell's aten ops;
//   - Y: the per-step h stacked (concat), both directions concatenated;
//     Y_h (and an LSTM's Y_c), emitted only if some op reads them;
//   - holds (graph.AttrHolds, a lifetime, not a data dependency) of what
//     PyTorch keeps past its last reader: X and the last h (and an LSTM's
//     c) of each direction on the layer's last op (the module's forward
//     holds its input; h_n and c_n are built at the end), and each
//     direction's projection on the next direction's projection or the
//     layer's last op (profiler, a bidirectional nn.GRU and nn.LSTM: the
//     projections are freed when the layer function returns, the first
//     once the second exists).
//
// The cells (remat_torch.trace of nn.LSTM, nn.GRU and nn.RNN, torch 1.13):
//
//   - LSTM, lstm_step (x_t, h_prev, c_prev, W_hh[, b_hh][, P]) -> (h, c,
//     gates, tanh_c): gates = linear(h, W_hh, b_hh) + x_t, the sigmoid/tanh
//     gate activations in place, c = f*c_prev + i*g, h = o*tanh(c). The
//     backward reads h_prev (addmm), c_prev (f*c_prev), the gates (the
//     in-place activations and the products' operands) and tanh(c): 4H +
//     3H per batch row per step, h and c being the next step's h_prev and
//     c_prev. The product i*g, added into f*c_prev in place, is the op's
//     workspace.
//   - GRU, gru_step (x_t, h_prev, W_hh[, b_hh]) -> (h, gates, n_h, n, d):
//     gates = linear(h_prev, W_hh, b_hh) [batch, 3H], r and z the in-place
//     sigmoids of its first two thirds plus x_t's, n_h a copy of the third
//     (mul_ by r keeps it), n = tanh(x_t's third + n_h*r) in a tensor of its
//     own, d = h_prev - n and its copy (mul_ by z keeps it), h = d*z + n in
//     d's storage. The backward reads h_prev, the gates, n_h, n and d's
//     copy: 3H + 4H per batch row per step, h included.
//   - RNN, rnn_step (x_t, h_prev, W_hh[, b_hh]) -> h: h = tanh (or relu) of
//     linear(h_prev, W_hh, b_hh) + x_t, the sum in place in the linear's
//     output, the op's workspace; the activation is out of place. The
//     backward reads h_prev and h.
//
// W, R and B are read through torch.onnx's gate reordering (Slice and Concat
// of the parameters, see view): the ops read the layer's parameters
// weight_ih, weight_hh, bias_ih, bias_hh themselves. The sequence_lens
// input is ignored (every sequence is taken as full length).
func opLSTM(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	kind := n.GetOpType()
	cell := rnnCells[kind]
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
	if kind != "LSTM" {
		c0, peep = nil, nil
	}
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
	var act string
	if kind == "RNN" {
		acts, err := attrStrings(n, "activations")
		if err != nil {
			return nil, err
		}
		act = "Tanh"
		for i, a := range acts {
			if a != "Tanh" && a != "Relu" {
				return nil, fmt.Errorf("activations[%d] is %q, expected Tanh or Relu (what nn.RNN exports)", i, a)
			}
			if i == 0 {
				act = a
			}
		}
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
	ng := cell.gates
	if w.shape[0] != dirs || w.shape[1] != ng*h || w.shape[2] != isz || r.shape[0] != dirs || r.shape[1] != ng*h || r.shape[2] != h {
		return nil, fmt.Errorf("W %v and R %v, expected [%d %d %d] and [%d %d %d]", w.shape, r.shape, dirs, ng*h, isz, dirs, ng*h, h)
	}
	if seq <= 0 || batch <= 0 {
		return nil, fmt.Errorf("X %v: expected a non-empty sequence and batch", x.shape)
	}
	if seq*dirs > maxRNNSteps {
		return nil, fmt.Errorf("X %v: %d time steps in %d directions, expected at most %d steps in all (one op each)", x.shape, seq, dirs, maxRNNSteps)
	}
	yShape := []int64{seq, dirs, batch, h}
	st := []int64{dirs, batch, h}
	step := []int64{1, 1, batch, h} // one step's h, c, tanh(c), in Y's layout
	gsh := []int64{1, 1, batch, ng * h}
	proj := []int64{seq, batch, ng * h}
	if layout != 0 {
		yShape = []int64{batch, seq, dirs, h}
		st = []int64{batch, dirs, h}
		step = []int64{batch, 1, 1, h}
		gsh = []int64{batch, 1, 1, ng * h}
		proj = []int64{batch, seq, ng * h}
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
	base := imp.opName(n)
	sub := func(suffix string) *NodeProto {
		return &NodeProto{Name: proto.String(base + suffix), OpType: proto.String(kind)}
	}
	tmp := func(name string, shape []int64) *value {
		return &value{name: name, et: x.et, shape: shape, tensor: graph.NoTensor}
	}
	dt := dtypeOf(x.et)
	elem := dt.Size()
	var ys, hs, cs []*value
	held := []*value{x} // what the layer holds to its end (graph.AttrHolds)
	var prevProj *value
	var lastOp *graph.OpBuilder // the layer's last op (Y's)
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
		// Each direction's linear copies a strided X itself (matmul's
		// reshape), and its backward keeps that copy.
		xin, err := imp.contiguous(sub(sfx+".input"), x)
		if err != nil {
			return nil, err
		}
		pins := append(append([]*value{xin}, wd[d]...), bih)
		pob, err := imp.emit(pn, graph.OpLinear, pins, []*value{xp}, mulSat(mulSat(2*seq*batch, isz), ng*h))
		if err != nil {
			return nil, err
		}
		if prevProj != nil {
			// the first direction's projection is freed once the
			// second's is computed
			pob.Attr(graph.AttrHolds, tensorIDs(prevProj))
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
		if cPrev == nil && kind == "LSTM" {
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
			hv := tmp(sn.GetName()+".h", step)
			ins := []*value{xt, hPrev}
			outs := []*value{hv}
			var attrs []string
			switch kind {
			case "LSTM":
				cv := tmp(sn.GetName()+".c", step)
				ins = append(ins, cPrev)
				outs = append(outs, cv, tmp(sn.GetName()+".gates", gsh), tmp(sn.GetName()+".tanh_c", step))
				cPrev, cLast = cv, cv
			case "GRU":
				outs = append(outs, tmp(sn.GetName()+".gates", gsh), tmp(sn.GetName()+".n_h", step), tmp(sn.GetName()+".n", step),
					tmp(sn.GetName()+".d", step))
			case "RNN":
				attrs = []string{"activation", act}
			}
			ins = append(ins, rd[d]...) // a fresh slice: rd[d] shares its array
			ins = append(ins, bhh...)
			if peep != nil {
				ins = append(ins, peep)
			}
			ob, err := imp.emit(sn, cell.step, ins, outs,
				addSat(mulSat(mulSat(2*batch, h), ng*h), mulSat(cell.flops*batch, h)),
				append(attrs, "hidden_size", strconv.FormatInt(h, 10), "time", strconv.FormatInt(t, 10))...)
			if err != nil {
				return nil, err
			}
			if cell.workspace {
				ob.Workspace(mulSat(mulSat(batch, h), elem))
			}
			hAt[t], hPrev = hv, hv
			hLast = hv
		}
		y := tmp(base+sfx+".Y", append([]int64(nil), step...))
		y.shape[seqAxis] = seq
		if lastOp, err = imp.emit(sub(sfx+".stack"), graph.OpConcat, hAt, []*value{y}, 0, "dim", strconv.Itoa(seqAxis)); err != nil {
			return nil, err
		}
		prevProj = xp
		held = append(held, hLast)
		if cLast != nil {
			held = append(held, cLast)
		}
		ys, hs, cs = append(ys, y), append(hs, hLast), append(cs, cLast)
	}
	outs := []*value{imp.newOut(n, 0, x.et, yShape), imp.newOut(n, 1, x.et, st)}
	states := [][]*value{hs}
	if kind == "LSTM" {
		outs = append(outs, imp.newOut(n, 2, x.et, st))
		states = append(states, cs)
	}
	if dirs == 1 {
		outs[0].tensor = ys[0].tensor
		// Y keeps its own name: a view is free.
		if _, err := imp.viewNow(sub(".Y"), graph.OpReshape, ys[0], outs[0], "shape", joinInts(yShape)); err != nil {
			return nil, err
		}
	} else if lastOp, err = imp.emit(sub(".Y"), graph.OpConcat, ys, outs[:1], 0, "dim", strconv.Itoa(dirAxis)); err != nil {
		return nil, err
	}
	lastOp.Attr(graph.AttrHolds, tensorIDs(append(held, prevProj)...))
	// Y_h and Y_c: the last step's h and c of each direction, made only if
	// read.
	for k, last := range states {
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

// tensorIDs joins the tensors of materialized values with commas (the
// value of graph.AttrHolds).
func tensorIDs(vs ...*value) string {
	ids := make([]string, len(vs))
	for i, v := range vs {
		ids[i] = strconv.Itoa(int(v.tensor))
	}
	return strings.Join(ids, ",")
}

// maxRNNSteps bounds the time steps (times directions) of one LSTM, GRU
// or RNN node: each becomes an op.
const maxRNNSteps = 1 << 16

// rnnCell describes a recurrent node's per-step op (see opLSTM).
type rnnCell struct {
	gates     int64  // gate blocks in W and R (H rows each)
	step      string // the step op's type
	flops     int64  // element-wise FLOPs per batch row and hidden unit
	workspace bool   // a [batch, H] temporary
}

var rnnCells = map[string]rnnCell{
	"LSTM": {gates: 4, step: OpLSTMStep, flops: 20, workspace: true},
	"GRU":  {gates: 3, step: OpGRUStep, flops: 15},
	"RNN":  {gates: 1, step: OpRNNStep, flops: 5, workspace: true},
}

// zeros returns a constant zero tensor (an LSTM's initial state when the
// node has none).
func (imp *importer) zeros(name string, et int32, shape []int64) *value {
	v := &value{name: uniqueName(imp, name), et: et, shape: shape, tensor: graph.NoTensor, kind: graph.Constant}
	imp.vals[v.name] = v
	return v
}
