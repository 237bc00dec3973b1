package sim

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// TestCPUWorkspaceBatchNormBackward: PyTorch 1.13's CPU
// native_batch_norm_backward holds a temporary of its input's size
// (python/remat_torch's applier measured it at the peak of plans that
// recompute a network's stem, docs/fidelity-plans.md).
func TestCPUWorkspaceBatchNormBackward(t *testing.T) {
	b := graph.NewBuilder("bn")
	x := b.Input("x", graph.F32, 4, 64, 32, 32)
	y := b.Op("native_batch_norm", "bn", x).Out("y", graph.F32, 4, 64, 32, 32).T()
	b.SetLoss(y)
	b.SetPhase(graph.Backward)
	gy := b.Input("gy", graph.F32, 4, 64, 32, 32)
	bw := b.Op("native_batch_norm_backward", "bn_bw", gy, x).Out("gx", graph.F32, 4, 64, 32, 32)
	other := b.Op("threshold_backward", "relu_bw", gy, x).Out("gr", graph.F32, 4, 64, 32, 32)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := CPUWorkspace(g, &g.Ops[bw.ID()], CPU{Threads: 2}), int64(4*64*32*32*4); got != want {
		t.Errorf("CPUWorkspace(native_batch_norm_backward) = %d, want %d (the input's bytes)", got, want)
	}
	if got := CPUWorkspace(g, &g.Ops[other.ID()], CPU{Threads: 2}); got != 0 {
		t.Errorf("CPUWorkspace(threshold_backward) = %d, want 0", got)
	}
}

// TestCPUWorkspaceBatchNormLayouts: the temporary is the forward input's
// size for a graph's batchnorm too (an ONNX import, a zoo model), and
// absent for a strided input (a BatchNorm1d over a transposed sequence:
// the kernel's generic path; python/tests test_batchnorm_layouts).
func TestCPUWorkspaceBatchNormLayouts(t *testing.T) {
	b := graph.NewBuilder("bn")
	x := b.Input("x", graph.F32, 8, 64, 32)
	dense := b.Op(graph.OpBatchNorm, "bn", x).Out("y", graph.F32, 8, 64, 32)
	strided := b.Op("native_batch_norm", "bn_t", x).Attr(graph.AttrInputFormat, graph.Strided).Out("yt", graph.F32, 8, 64, 32)
	b.SetPhase(graph.Backward)
	gy := b.Input("gy", graph.F32, 8, 64, 32)
	bw := b.Op(graph.BackwardType(graph.OpBatchNorm), "bn_bw", gy).Forward(dense.ID()).Out("gx", graph.F32, 8, 64, 32)
	bwT := b.Op("native_batch_norm_backward", "bn_t_bw", gy, x).Forward(strided.ID()).Out("gxt", graph.F32, 8, 64, 32)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	cpu := CPU{Threads: 2}
	if got, want := CPUWorkspace(g, &g.Ops[bw.ID()], cpu), int64(8*64*32*4); got != want {
		t.Errorf("CPUWorkspace(batchnorm_backward) = %d, want %d (the input's bytes)", got, want)
	}
	if got := CPUWorkspace(g, &g.Ops[bwT.ID()], cpu); got != 0 {
		t.Errorf("CPUWorkspace(native_batch_norm_backward of a strided input) = %d, want 0", got)
	}
}

// TestCPUWorkspaceReductionCast: a sum into another dtype copies its input
// into that dtype first (profiler, torch 1.13: a [4, 32, 128] bool mask
// summed over its last dimension allocates +1024 for the int64 result,
// then +131072 -131072; sum(dtype=torch.float32) of the same mask +65536;
// mean(dtype=torch.float64) of an f32 tensor of that shape +131072; an f32
// or int64 sum nothing). amax's backward counts ties so, and a
// small Conv1d network (python/tests' custom models) peaked there.
func TestCPUWorkspaceReductionCast(t *testing.T) {
	b := graph.NewBuilder("sum")
	m := b.Input("mask", graph.Bool, 4, 32, 128)
	f := b.Input("x", graph.F32, 4, 32, 128)
	count := b.Op("sum", "count", m).Out("n", graph.I64, 4, 32, 1)
	asF32 := b.Op("sum", "count_f32", m).Out("nf", graph.F32, 4, 32, 1)
	plain := b.Op("sum", "total", f).Out("s", graph.F32, 4, 32, 1)
	mean := b.Op("mean", "avg", f).Out("a", graph.F64, 4, 32, 1)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		op   graph.OpID
		want int64
	}{{count.ID(), 131072}, {asF32.ID(), 65536}, {plain.ID(), 0}, {mean.ID(), 4 * 32 * 128 * 8}} {
		if got := CPUWorkspace(g, &g.Ops[tc.op], CPU{}); got != tc.want {
			t.Errorf("CPUWorkspace(%s) = %d, want %d", g.Ops[tc.op].Name, got, tc.want)
		}
	}
}

// TestCPUWorkspacePReLUBackward: prelu_backward computes the weight
// gradient element-wise into an input-sized temporary before summing it
// (profiler, PReLU(32) on [2, 32, 8, 8]: +16384 (grad_input), +128, +16384,
// +128 (grad_weight), -128, -16384 bytes; PReLU() the same with 4 bytes in
// place of 128), in a traced step (grad, self, weight) and in an imported
// one (self, slope [C, 1, 1], grad).
func TestCPUWorkspacePReLUBackward(t *testing.T) {
	b := graph.NewBuilder("prelu")
	gy := b.Input("gy", graph.F32, 2, 32, 8, 8)
	x := b.Input("x", graph.F32, 2, 32, 8, 8)
	w := b.Parameter("w", graph.F32, 32)
	one := b.Parameter("one", graph.F32, 1)
	slope := b.Parameter("slope", graph.F32, 32, 1, 1)
	traced := b.Op("prelu_backward", "traced", gy, x, w).Out("gx", graph.F32, 2, 32, 8, 8).Out("gw", graph.F32, 32)
	single := b.Op("prelu_backward", "single", gy, x, one).Out("gx1", graph.F32, 2, 32, 8, 8).Out("gw1", graph.F32, 1)
	imported := b.Op("prelu_backward", "imported", x, slope, gy).Out("gx2", graph.F32, 2, 32, 8, 8).Out("gw2", graph.F32, 32, 1, 1)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		op   graph.OpID
		want int64
	}{{traced.ID(), 16384 + 128}, {single.ID(), 16384 + 4}, {imported.ID(), 16384 + 128}} {
		if got := CPUWorkspace(g, &g.Ops[tc.op], CPU{}); got != tc.want {
			t.Errorf("CPUWorkspace(%s) = %d, want %d", g.Ops[tc.op].Name, got, tc.want)
		}
	}
}

// TestAutogradWorkspaceDiv: an imported a / b's backward holds the
// formula's intermediates (measured in autogradWorkspace's comment) when b
// needs a gradient; with a constant divisor it computes grad / b only.
func TestAutogradWorkspaceDiv(t *testing.T) {
	b := graph.NewBuilder("div")
	x := b.Input("x", graph.F32, 64, 256)
	w := b.Parameter("w", graph.F32, 64, 256)
	n := b.Parameter("n", graph.F32, 64, 1)
	c := b.Constant("c", graph.F32, 64, 256)
	const s = 64 * 256 * 4
	cases := []struct {
		name    string
		divisor graph.TensorID
		outs    [][]int64
		want    int64
	}{
		{"equal shapes", w, [][]int64{{64, 256}, {64, 256}}, 4*s - 2*s},
		{"broadcast divisor", n, [][]int64{{64, 256}, {64, 1}}, 4*s - s - 256},
		{"constant divisor", c, [][]int64{{64, 256}}, 0},
	}
	var checks []wsCheck
	for _, tc := range cases {
		f := b.Op("div", "f_"+tc.name, x, tc.divisor).Out("y_"+tc.name, graph.F32, 64, 256)
		y := f.T()
		bo := b.Op("div_backward", "b_"+tc.name, x, tc.divisor, y).Forward(f.ID())
		for i, sh := range tc.outs {
			bo.Out("g"+strconv.Itoa(i)+"_"+tc.name, graph.F32, sh...)
		}
		checks = append(checks, wsCheck{tc.name, bo.ID(), tc.want})
	}
	g := checkAutogradWorkspace(t, b, checks)
	// Every device: the Machine charges it without the CPU model.
	m, err := NewMachine(g, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.OpWorkspace(checks[0].op); got != cases[0].want {
		t.Errorf("OpWorkspace = %d, want %d", got, cases[0].want)
	}
}

// wsCheck is one op whose autogradWorkspace a test expects.
type wsCheck struct {
	name string // the case, for messages
	op   graph.OpID
	want int64
}

// checkAutogradWorkspace builds b and checks autogradWorkspace of each
// check's op; it returns the graph.
func checkAutogradWorkspace(t *testing.T, b *graph.Builder, checks []wsCheck) *graph.Graph {
	t.Helper()
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		if got := autogradWorkspace(g, &g.Ops[c.op]); got != c.want {
			t.Errorf("%s: autogradWorkspace = %d, want %d", c.name, got, c.want)
		}
	}
	return g
}

// TestAutogradWorkspaceUnary: the imported element-wise ops whose backward
// formula computes a function of the input first (measured in
// autogradWorkspace's comment).
func TestAutogradWorkspaceUnary(t *testing.T) {
	b := graph.NewBuilder("unary")
	x := b.Parameter("x", graph.F32, 64, 256)
	e := b.Parameter("e", graph.F32, 64, 256)
	const s = 64 * 256 * 4
	type tc struct {
		fwd, onnxOp string
		ins         []graph.TensorID
		want        int64
	}
	cases := []tc{
		{"pow", "", []graph.TensorID{x}, 2 * s},
		{"pow", "", []graph.TensorID{x, e}, 0}, // a tensor exponent: not measured
		{"reciprocal", "", []graph.TensorID{x}, 2 * s},
		{"erf", "", []graph.TensorID{x}, 4 * s},
		{"sqrt", "", []graph.TensorID{x}, s},
		{"abs", "", []graph.TensorID{x}, s},
		{"sin", "", []graph.TensorID{x}, s},
		{"sin", "Cos", []graph.TensorID{x}, 2 * s},
		{"rsqrt", "", []graph.TensorID{x}, 2 * s}, // profiler: +S (-0.5 * grad) +S (result^3) +S (the product) -S -S
		{"exp", "", []graph.TensorID{x}, 0},
	}
	var checks []wsCheck
	for i, c := range cases {
		name := strconv.Itoa(i)
		f := b.Op(c.fwd, "f"+name, c.ins...).Out("y"+name, graph.F32, 64, 256)
		if c.onnxOp != "" {
			f.Attr("onnx_op", c.onnxOp)
		}
		y := f.T()
		dy := b.Op("grad_seed", "dy"+name).Out("dy"+name, graph.F32, 64, 256).T()
		op := b.Op(c.fwd+"_backward", "b"+name, x, y, dy).Forward(f.ID()).Out("gx"+name, graph.F32, 64, 256).ID()
		checks = append(checks, wsCheck{fmt.Sprintf("%s %s (%d inputs)", c.fwd, c.onnxOp, len(c.ins)), op, c.want})
	}
	checkAutogradWorkspace(t, b, checks)
}

// TestAutogradWorkspaceBinary: maximum/minimum and pow by a tensor exponent
// (the formulas in autogradWorkspace), by which inputs need a gradient and
// with a broadcast operand. S is the output's size, m a bool mask's.
func TestAutogradWorkspaceBinary(t *testing.T) {
	b := graph.NewBuilder("binary")
	x := b.Parameter("x", graph.F32, 64, 256)
	e := b.Parameter("e", graph.F32, 64, 256)
	r := b.Parameter("r", graph.F32, 64, 1)
	c := b.Constant("c", graph.F32, 1, 256)
	const s, m = 64 * 256 * 4, 64 * 256
	cases := []struct {
		name, fwd string
		a, b      graph.TensorID
		outs      [][]int64
		want      int64
	}{
		{"maximum, both", "maximum", x, e, [][]int64{{64, 256}, {64, 256}}, 3*s + 2*m - 2*s},
		{"minimum, broadcast", "minimum", x, r, [][]int64{{64, 256}, {64, 1}}, 3*s + 2*m - s - 256},
		{"maximum, constant", "maximum", x, c, [][]int64{{64, 256}}, 2*s + 2*m - s},
		{"pow, both", "pow_tensor", x, e, [][]int64{{64, 256}, {64, 256}}, max(s+3*s+m, m+m+s+2*s-s)},
		{"pow, base", "pow_tensor", x, c, [][]int64{{64, 256}}, 1024 + 3*s + 256},
		{"pow, exponent", "pow_tensor", c, e, [][]int64{{64, 256}}, 256 + m + 1024 + 2*s},
	}
	var checks []wsCheck
	for _, tc := range cases {
		f := b.Op(tc.fwd, "f_"+tc.name, tc.a, tc.b).Out("y_"+tc.name, graph.F32, 64, 256)
		bo := b.Op(tc.fwd+"_backward", "b_"+tc.name, tc.a, tc.b, f.T()).Forward(f.ID())
		for i, sh := range tc.outs {
			bo.Out("g"+strconv.Itoa(i)+"_"+tc.name, graph.F32, sh...)
		}
		checks = append(checks, wsCheck{tc.name, bo.ID(), tc.want})
	}
	checkAutogradWorkspace(t, b, checks)
}

// TestAutogradWorkspaceReductions: a broadcast mul's full-size product,
// var's and std's difference from the mean, and the ONNX norms' formulas
// (autogradWorkspace, normTemporaries).
func TestAutogradWorkspaceReductions(t *testing.T) {
	b := graph.NewBuilder("reductions")
	x := b.Parameter("x", graph.F32, 64, 256)
	r := b.Parameter("r", graph.F32, 64, 1)
	c := b.Constant("c", graph.F32, 64, 1)
	const s, small = 64 * 256 * 4, 64 * 4
	cases := []struct {
		name, fwd, onnxOp string
		ins               []graph.TensorID
		out               []int64
		want              int64
	}{
		{"mul, broadcast", "mul", "", []graph.TensorID{x, r}, []int64{64, 256}, s},
		{"mul, same shapes", "mul", "", []graph.TensorID{x, x}, []int64{64, 256}, 0},
		{"mul, constant broadcast", "mul", "", []graph.TensorID{x, c}, []int64{64, 256}, 0},
		{"var", "var", "", []graph.TensorID{x}, []int64{64, 1}, s + 2*small},
		{"std", "std", "", []graph.TensorID{x}, []int64{64, 1}, s + 3*small + 64},
		{"logsumexp", "norm", "ReduceLogSumExp", []graph.TensorID{x}, []int64{64, 1}, 2 * s},
		{"l2", "norm", "ReduceL2", []graph.TensorID{x}, []int64{64, 1}, s + 64},
		{"l1", "norm", "ReduceL1", []graph.TensorID{x}, []int64{64, 1}, s},
		{"norm, other", "norm", "", []graph.TensorID{x}, []int64{64, 1}, 0},
	}
	var checks []wsCheck
	for _, tc := range cases {
		f := b.Op(tc.fwd, "f_"+tc.name, tc.ins...).Out("y_"+tc.name, graph.F32, tc.out...)
		if tc.onnxOp != "" {
			f.Attr("onnx_op", tc.onnxOp)
		}
		op := b.Op(tc.fwd+"_backward", "b_"+tc.name, f.T()).Forward(f.ID()).Out("g_"+tc.name, graph.F32, 64, 256).ID()
		checks = append(checks, wsCheck{tc.name, op, tc.want})
	}
	checkAutogradWorkspace(t, b, checks)
}

// TestBCEWithLogitsWorkspace: a traced binary_cross_entropy_with_logits
// holds five tensors of its input's size, its output among them when not
// reduced.
func TestBCEWithLogitsWorkspace(t *testing.T) {
	b := graph.NewBuilder("bce")
	x := b.Parameter("x", graph.F32, 64, 256)
	y := b.Constant("y", graph.F32, 64, 256)
	const s = 64 * 256 * 4
	none := b.Op("binary_cross_entropy_with_logits", "none", x, y).Out("l", graph.F32, 64, 256).ID()
	mean := b.Op("binary_cross_entropy_with_logits", "mean", x, y).Out("m", graph.F32).ID()
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if got := autogradWorkspace(g, &g.Ops[none]); got != 4*s {
		t.Errorf("reduction none: %d, want %d", got, 4*s)
	}
	if got := autogradWorkspace(g, &g.Ops[mean]); got != 5*s-4 {
		t.Errorf("reduction mean: %d, want %d", got, 5*s-4)
	}
}

// TestCrossEntropyBackwardMatchesPyTorch: F.cross_entropy(x, y).backward()
// on [256, 512] logits that need a gradient, under torch.profiler
// (profile_memory): +S (log_softmax) +4 +4 +4 +S (nll_loss_backward's
// gradient) -4 +S (x.grad) -S -S -4 -4 with S = 524288 bytes, a peak of
// 3S + 8 above the logits. The backward holds the log-probabilities, the
// log-probabilities' gradient and the logits' gradient at once; without the
// middle one the ONNX import of a language model (logits of vocabulary
// size per token) was 5-13% low against the exporter's trace.
func TestCrossEntropyBackwardMatchesPyTorch(t *testing.T) {
	const s = 256 * 512 * 4
	b := graph.NewBuilder("ce")
	x := b.Parameter("x", graph.F32, 256, 512)
	y := b.Input("y", graph.I64, 256)
	b.SetLoss(b.CrossEntropy("loss", x, y))
	fwd, err := b.Build()
	require.NoError(t, err)
	g, err := graph.Differentiate(fwd, fwd.Loss, graph.BackwardOptions{})
	require.NoError(t, err)
	var ce *graph.Op
	for i := range g.Ops {
		if g.Ops[i].Type == "cross_entropy_backward" {
			ce = &g.Ops[i]
		}
	}
	require.NotNil(t, ce)
	assert.Equal(t, int64(s), autogradWorkspace(g, ce))
	res, err := Simulate(g, DefaultPlan(g), Options{})
	require.NoError(t, err)
	resident := int64(s + 256*8) // the logits and the labels
	// 3S + 8 measured; sim's loss, its gradient seed and nothing else small.
	assert.InDelta(t, 3*s+8, res.PeakAllocated-resident, 16)
}

// TestBroadcastCopy: a matrix product reading a broadcast view (a sum's
// expanded gradient) copies it to a dense tensor first (profiler: each of
// AddmmBackward0's mm calls clones the [256, 64] f32 expanded gradient,
// +65536 -65536); a reshape of the same size, or an element-wise op, reads
// views as they are.
func TestBroadcastCopy(t *testing.T) {
	b := graph.NewBuilder("bcast")
	gs := b.Parameter("gs", graph.F32, 8, 32, 1)
	w := b.Parameter("w", graph.F32, 64, 64)
	x := b.Parameter("x", graph.F32, 256, 64)
	ex := b.Op("expand", "expand", gs).Out("ex", graph.F32, 8, 32, 64).Alias(gs).T()
	ev := b.Op("_reshape_alias", "ev", ex).Out("ev", graph.F32, 256, 64).Alias(gs).T()
	xv := b.Op("_reshape_alias", "xv", x).Out("xv", graph.F32, 256, 64).Alias(x).T()
	mm := b.Op("mm", "mm", ev, w).Out("y", graph.F32, 256, 64).ID()
	dense := b.Op("mm", "mm_dense", xv, w).Out("y2", graph.F32, 256, 64).ID()
	mul := b.Op("mul", "mul", ev, x).Out("y3", graph.F32, 256, 64).ID()
	g, err := b.Build()
	require.NoError(t, err)
	assert.Equal(t, int64(65536), broadcastCopy(g, &g.Ops[mm]))
	assert.Zero(t, broadcastCopy(g, &g.Ops[dense]), "a same-size view is dense")
	assert.Zero(t, broadcastCopy(g, &g.Ops[mul]), "element-wise kernels take stride 0")
	m, err := NewMachine(g, Options{})
	require.NoError(t, err)
	assert.Equal(t, int64(65536), m.OpWorkspace(mm), "every device")
}
