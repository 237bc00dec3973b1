package sim

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// convSpec is a test convolution x [n c h h] * w [k c/groups r r],
// stride s, padding r/2, and its backward op.
type convSpec struct {
	n, c, h, k, r, s, groups int64
	dil                      int64 // dilation (0: 1); the padding is dil*(r/2)
	noPad                    bool  // no padding (a patch embedding)
	bias                     bool
	noGX                     bool // the backward returns no input gradient (x is an input)
	// traced: as remat_torch.trace records it (types convolution and
	// convolution_backward, its attributes, a seed op making the output's
	// gradient, which the backward reads), with cl and weightCL its memory
	// formats; else conv2d and a backward reading the output itself.
	traced, cl, weightCL bool
}

// build builds the spec's graph: the forward op first, the backward last.
func (c convSpec) build(t *testing.T) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder("cpuconv")
	x := b.Parameter("x", graph.F32, c.n, c.c, c.h, c.h) // a parameter: it may take a gradient
	if c.noGX {
		x = b.Input("x", graph.F32, c.n, c.c, c.h, c.h)
	}
	w := b.Parameter("w", graph.F32, c.k, c.c/c.groups, c.r, c.r)
	ins := []graph.TensorID{x, w}
	if c.bias {
		ins = append(ins, b.Parameter("b", graph.F32, c.k))
	}
	dil := max(c.dil, 1)
	pad := dil * (c.r / 2)
	if c.noPad {
		pad = 0
	}
	p := (c.h+2*pad-dil*(c.r-1)-1)/c.s + 1
	typ := "conv2d"
	if c.traced {
		typ = "convolution"
	}
	o := b.Op(typ, "conv", ins...).Out("y", graph.F32, c.n, c.k, p, p).
		Attr("stride", fmt.Sprintf("%d,%d", c.s, c.s)).Attr("padding", fmt.Sprintf("%d,%d", pad, pad))
	if c.traced || dil > 1 {
		o.Attr("dilation", fmt.Sprintf("%d,%d", dil, dil))
	}
	if c.traced {
		o.Attr("groups", fmt.Sprint(c.groups))
	}
	if c.cl {
		o.Attr(graph.AttrMemoryFormat, graph.ChannelsLast)
	}
	if c.weightCL {
		o.Attr(graph.AttrWeightFormat, graph.ChannelsLast)
	}
	y := o.T()
	b.SetPhase(graph.Backward)
	gy := y
	if c.traced {
		gy = b.Op("ones_like", "seed", y).Out("gy", graph.F32, c.n, c.k, p, p).T()
	}
	bo := b.Op(typ+"_backward", "conv.backward", gy, x, w).Forward(o.ID())
	if !c.noGX {
		bo.Out("gx", graph.F32, c.n, c.c, c.h, c.h)
	}
	bo.Out("gw", graph.F32, c.k, c.c/c.groups, c.r, c.r)
	if c.bias {
		bo.Out("gb", graph.F32, c.k)
	}
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// cpuConv builds a convolution x [n c h h] * w [k c/groups r r] (stride s,
// padding r/2, with or without bias) and its backward op, which returns the
// input gradient only if withGX.
func cpuConv(t *testing.T, n, c, h, k, r, s, groups int64, bias, withGX bool) *graph.Graph {
	t.Helper()
	return convSpec{n: n, c: c, h: h, k: k, r: r, s: s, groups: groups, bias: bias, noGX: !withGX}.build(t)
}

// The expected workspaces are PyTorch 1.13's own: the largest running sum
// of the profiler's [memory] events inside the convolution (forward) or
// aten::convolution_backward, minus the op's outputs (2 threads, AVX-512;
// the event lists are in the comments). gap is what the model leaves out:
// oneDNN's weight-reduction scratch in the backward and a padded bias
// buffer in the forward, which appear only in some configurations.
func TestCPUConvWorkspaceMatchesPyTorch(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		n, c, h, k, r, s, grp int64
		bias, gx              bool
		fwd, bwd              int64 // measured
		fwdGap, bwdGap        int64 // not modelled
	}{
		// fwd: +x_r 131072 +w_r 147456 +y_b 32768 -w_r -x_r +y 32768 -y_b:
		// peak 311296 - y.
		// bwd: +gy_r 32768 +w_r 147456 +gx_b 131072 -w_r -gy_r +gx -gx_b
		// +gy_r +x_r 131072 +gw_b 147456 +gb_b 256 -x_r -gy_r +gb +gw -gw_b
		// -gb_b: peak 442624 - outputs 278784.
		{"3x3 stride 2", 2, 64, 16, 64, 3, 2, 1, true, true, 278528, 163840, 0, 0},
		// squeezenet1_0's classifier conv at 96x96 (1000 channels reorder
		// into 1008). fwd: +4160 +x_r 102400 +w_r 2064384 +y_b 201600 -w_r
		// -x_r -4160 +y 200000 -y_b: peak 2372544 - y. bwd: peak 4222784
		// (gx + gw_b 2064384 + gb_b + gb + gw) - outputs 2154400.
		{"1x1 to 1000 classes", 2, 512, 5, 1000, 1, 1, 1, true, true, 2172544, 2068384, 4160, 0},
		// Depthwise: the grouped weight keeps its size. fwd: +x_r 131072
		// +w_r 2304 +y_b 131072 -w_r -x_r +y -y_b: peak 264448 - y. bwd:
		// peak 395776 - outputs 133632.
		{"depthwise", 2, 64, 16, 64, 3, 1, 64, true, true, 133376, 262144, 0, 0},
		// A first convolution (3 channels, no input gradient): the input
		// stays in its plain layout. fwd: +w 3456 +y_b 262144 -w +y -y_b:
		// peak 524288 - y. bwd: +gy_r 262144 +gw_b 3456 +11904 +gb_b 128
		// -11904 -gy_r +gb +gw -gw_b -gb_b: peak 277632 - outputs 3584,
		// the 11904-byte weight-reduction scratch not modelled.
		{"first conv", 2, 3, 32, 32, 3, 1, 1, true, false, 262144, 274048, 0, 11904},
		// ResNeXt-style groups (32 groups of 4 channels, no bias): the
		// weight gradient runs without reorders. fwd: +x_r 262144 +w_r
		// 18432 +y_b 262144 -w_r -x_r +y -y_b: peak 542720 - y. bwd: +gy_r
		// 262144 +w_r 18432 +gx_b 262144 -w_r -gy_r +gx -gx_b +gw_b 18432
		// +221440 -221440 +gw -gw_b: peak 542720 - outputs 280576 (the
		// 221440-byte GEMM scratch comes after the peak).
		{"32 groups of 4", 2, 128, 16, 128, 3, 1, 32, false, true, 280576, 262144, 0, 0},
		// Batch 1, 3x3, 16384 input elements: slow_conv2d's im2col
		// columns, 64*9*16*16 floats. fwd: +589824 +y -589824; bwd: +gx +gb
		// +gw +589824 -589824.
		{"slow_conv2d", 1, 64, 16, 64, 3, 1, 1, true, true, 589824, 589824, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := cpuConv(t, tc.n, tc.c, tc.h, tc.k, tc.r, tc.s, tc.grp, tc.bias, tc.gx)
			assert.Equal(t, tc.fwd-tc.fwdGap, CPUConvWorkspace(g, &g.Ops[0], CPU{Threads: 2}), "forward")
			assert.Equal(t, tc.bwd-tc.bwdGap, CPUConvWorkspace(g, &g.Ops[1], CPU{Threads: 2}), "backward")
			m, err := NewMachine(g, Options{ConvLibrary: ConvOneDNN})
			require.NoError(t, err)
			assert.Equal(t, tc.fwd-tc.fwdGap, m.OpWorkspace(0))
			assert.Equal(t, tc.bwd-tc.bwdGap, m.OpWorkspace(1))
		})
	}
}

// TestCPUDepthwiseScratchMatchesPyTorch: a depthwise convolution whose
// kernel is at least 4 wide computes its weight gradient with a scratch
// buffer per thread (bias, input gradient; profiler events of
// aten::convolution_backward, f32):
//
//	672 channels 5x5, batch 2, 4x4, 2 threads: +gy_r 86016 +w_r 67200
//	+gx_b 86016 -w_r -gy_r +gx 86016 -gx_b +gw_b 67200 +541056 +gb_b 2688
//	-541056 +gb 2688 +gw 67200 -gw_b -gb_b: peak 696960 - outputs 155904.
//	The same with 1 thread: scratch 270656 (peak 426560).
//	96 channels 7x7, batch 2, 16x16, 2 threads: scratch 251136, peak
//	466944 - outputs 215808.
//
// A 3x3 depthwise convolution has no such buffer (TestCPUConvWorkspace-
// MatchesPyTorch's "depthwise").
func TestCPUDepthwiseScratchMatchesPyTorch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		c, h, r int64
		threads int
		bwd     int64
	}{
		{"672 channels 5x5, 2 threads", 672, 4, 5, 2, 541056},
		{"672 channels 5x5, 1 thread", 672, 4, 5, 1, 270656},
		{"96 channels 7x7, 2 threads", 96, 16, 7, 2, 251136},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := cpuConv(t, 2, tc.c, tc.h, tc.c, tc.r, 1, tc.c, true, true)
			assert.Equal(t, tc.bwd, CPUConvWorkspace(g, &g.Ops[1], CPU{Threads: tc.threads}))
			m, err := NewMachine(g, Options{ConvLibrary: ConvOneDNN, CPUThreads: tc.threads})
			require.NoError(t, err)
			assert.Equal(t, tc.bwd, m.OpWorkspace(1))
		})
	}
	_, err := NewMachine(cpuConv(t, 2, 8, 4, 8, 5, 1, 8, true, true), Options{ConvLibrary: ConvOneDNN, CPUThreads: -1})
	assert.ErrorContains(t, err, "field CPUThreads is -1")
}

// TestCPUOneThread1x1: with one thread PyTorch runs an unstrided 1x1
// convolution of a batch below 16 with slow_conv2d, which reads the input
// as its columns: no temporaries (64 to 64 channels, batch 2, 16x16, bias:
// forward +y 131072, backward +gx 131072 +gb 256 +gw 16384). With two
// threads oneDNN reorders it (+x_r 131072 +w_r 16384 +y_b 131072 ...).
func TestCPUOneThread1x1(t *testing.T) {
	g := cpuConv(t, 2, 64, 16, 64, 1, 1, 1, true, true)
	assert.Zero(t, CPUConvWorkspace(g, &g.Ops[0], CPU{Threads: 1}), "forward, 1 thread")
	assert.Zero(t, CPUConvWorkspace(g, &g.Ops[1], CPU{Threads: 1}), "backward, 1 thread")
	assert.Equal(t, int64(147456), CPUConvWorkspace(g, &g.Ops[0], CPU{Threads: 2}), "forward, 2 threads: x_r + w_r + y_b - y")
	assert.Positive(t, CPUConvWorkspace(g, &g.Ops[1], CPU{Threads: 2}), "backward, 2 threads")
	big := cpuConv(t, 16, 64, 4, 64, 1, 1, 1, true, true)
	assert.Positive(t, CPUConvWorkspace(big, &big.Ops[0], CPU{Threads: 1}), "batch 16 goes to oneDNN with one thread too")
}

func TestCPUConvWorkspaceOtherOps(t *testing.T) {
	g := cpuConv(t, 2, 64, 16, 64, 3, 1, 1, false, true)
	assert.Zero(t, CPUConvWorkspace(nil, &g.Ops[0], CPU{Threads: 2}))
	assert.Zero(t, CPUConvWorkspace(g, nil, CPU{Threads: 2}))
	b := graph.NewBuilder("relu")
	x := b.Input("x", graph.F32, 2, 3)
	b.Op("relu", "relu", x).Out("y", graph.F32, 2, 3)
	g2, err := b.Build()
	require.NoError(t, err)
	assert.Zero(t, CPUConvWorkspace(g2, &g2.Ops[0], CPU{Threads: 2}))
	// Without ConvOneDNN the cuDNN model applies: CudnnOff keeps the op's
	// own (zero) workspace.
	m, err := NewMachine(g, Options{})
	require.NoError(t, err)
	assert.Zero(t, m.OpWorkspace(1))
	_, err = NewMachine(g, Options{ConvLibrary: ConvLibrary(9)})
	assert.ErrorContains(t, err, "ConvLibrary is 9")
}

func TestParseConvLibrary(t *testing.T) {
	for s, want := range map[string]ConvLibrary{"cudnn": ConvCuDNN, "oneDNN": ConvOneDNN, " mkldnn ": ConvOneDNN} {
		got, err := ParseConvLibrary(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, got)
		assert.True(t, got.Valid())
	}
	_, err := ParseConvLibrary("winograd")
	assert.ErrorContains(t, err, `"winograd"`)
	assert.Equal(t, "onednn", ConvOneDNN.String())
	assert.Equal(t, "conv_library(7)", ConvLibrary(7).String())
}

// patchEmbed is a ViT's patch embedding (a 3->64 8x8 convolution with
// stride 8 on 2x3x32x32, bias) whose output is flattened and transposed with
// perm; its backward receives the gradient through the views' backward ops.
func patchEmbed(t *testing.T, perm string, tshape ...int64) (*graph.Graph, graph.TensorID) {
	t.Helper()
	b := graph.NewBuilder("patch")
	x := b.Input("x", graph.F32, 2, 3, 32, 32)
	w := b.Parameter("w", graph.F32, 64, 3, 8, 8)
	bias := b.Parameter("b", graph.F32, 64)
	conv := b.Op("conv2d", "conv", x, w, bias).Out("y", graph.F32, 2, 64, 4, 4).Attr("stride", "8,8")
	fl := b.Op(graph.OpReshape, "flat", conv.T()).Out("f", graph.F32, 2, 64, 16).Alias(conv.T())
	tr := b.Op(graph.OpTranspose, "tr", fl.T()).Out("t", graph.F32, tshape...).Alias(fl.T()).Attr("perm", perm)
	b.SetPhase(graph.Backward)
	seed := b.Op("ones_like", "seed", tr.T()).OutKind("dt", graph.Gradient, graph.F32, tshape...)
	dtr := b.Op("transpose_backward", "tr.backward", seed.T()).Forward(tr.ID()).
		OutKind("df", graph.Gradient, graph.F32, 2, 64, 16).Alias(seed.T())
	dfl := b.Op("reshape_backward", "flat.backward", dtr.T()).Forward(fl.ID()).
		OutKind("dy", graph.Gradient, graph.F32, 2, 64, 4, 4).Alias(dtr.T())
	b.Op("conv2d_backward", "conv.backward", x, w, dfl.T()).Forward(conv.ID()).
		OutKind("gw", graph.ParamGradient, graph.F32, 64, 3, 8, 8).OutKind("gb", graph.ParamGradient, graph.F32, 64)
	dy := dfl.T()
	g, err := b.Build()
	require.NoError(t, err)
	return g, dy
}

// torchvision's VisionTransformer patch embedding at batch 2: the profiler
// shows convolution_backward copying its transposed output gradient first
// (+8192, freed last), then the first-convolution reorders: +gy_r 8192
// +gw_b 49152 +gb_b 256 -gy_r +gb 256 +gw 49152 -gw_b -gb_b -copy: peak
// 107008 - outputs 49408 = 57600.
func TestCPUWorkspaceCopiesStridedGradient(t *testing.T) {
	g, dy := patchEmbed(t, "0,2,1", 2, 16, 64)
	assert.True(t, StridedGradient(g, dy))
	bwd := &g.Ops[len(g.Ops)-1]
	assert.Equal(t, int64(49408), CPUConvWorkspace(g, bwd, CPU{Threads: 2}))
	assert.Equal(t, int64(57600), CPUWorkspace(g, bwd, CPU{Threads: 2}))
	m, err := NewMachine(g, Options{ConvLibrary: ConvOneDNN})
	require.NoError(t, err)
	assert.Equal(t, int64(57600), m.OpWorkspace(bwd.ID))
	// A permutation that keeps the larger-than-1 dimensions in order is a
	// contiguous view: no copy.
	g, dy = patchEmbed(t, "0,1,2", 2, 64, 16)
	assert.False(t, StridedGradient(g, dy))
	assert.Equal(t, int64(49408), CPUWorkspace(g, &g.Ops[len(g.Ops)-1], CPU{Threads: 2}))
	assert.False(t, StridedGradient(g, graph.TensorID(999)))
	assert.Zero(t, CPUWorkspace(nil, nil, CPU{Threads: 2}))
}

func TestPermutesNonUnit(t *testing.T) {
	assert.True(t, permutesNonUnit("1,0", graph.Shape{2, 3}))
	assert.False(t, permutesNonUnit("1,0", graph.Shape{1, 3}))
	assert.False(t, permutesNonUnit("0,2,1", graph.Shape{4, 1, 5}))
	assert.True(t, permutesNonUnit("x", graph.Shape{4}))
	assert.True(t, permutesNonUnit("3", graph.Shape{4}))
}

// The part of a concatenation's gradient that goes to one input is a
// strided view when the concatenated dimension has a larger-than-1
// dimension outside it (a ViT's class token joined along the tokens).
func TestStridedGradientOfConcat(t *testing.T) {
	build := func(dim string, a, c []int64, out []int64) (*graph.Graph, graph.TensorID) {
		b := graph.NewBuilder("cat")
		x := b.Input("x", graph.F32, a...)
		cls := b.Parameter("cls", graph.F32, c...)
		cat := b.Op(graph.OpConcat, "cat", cls, x).Out("y", graph.F32, out...).Attr("dim", dim)
		b.SetPhase(graph.Backward)
		seed := b.Op("ones_like", "seed", cat.T()).OutKind("dy", graph.Gradient, graph.F32, out...)
		cb := b.Op("concat_backward", "cat.backward", seed.T()).Forward(cat.ID()).
			OutKind("dcls", graph.ParamGradient, graph.F32, c...).Alias(seed.T()).
			OutKind("dx", graph.Gradient, graph.F32, a...).Alias(seed.T())
		dx := cb.Output(1)
		g, err := b.Build()
		require.NoError(t, err)
		return g, dx
	}
	g, dx := build("1", []int64{2, 16, 64}, []int64{2, 1, 64}, []int64{2, 17, 64})
	assert.True(t, StridedGradient(g, dx))
	// Along the outermost dimension, each part is contiguous.
	g, dx = build("0", []int64{2, 16, 64}, []int64{1, 16, 64}, []int64{3, 16, 64})
	assert.False(t, StridedGradient(g, dx))
}

// TestCPUConv1dWorkspace: PyTorch runs a 1-D convolution as the 2-D one of
// its input viewed as N x C x 1 x L, with the same oneDNN reorders (32 to 32
// channels, kernel 3, batch 4, length 128, bias). fwd: +x_r 65536 +w_r
// 12288 +y_b 65536 -w_r -x_r +y 65536 -y_b: peak 143360 - y. bwd: +gy_r
// 65536 +w_r 12288 +gx_b 65536 -w_r -gy_r +gx -gx_b +gy_r +x_r 65536 +gw_b
// 12288 +gb_b 128 -x_r -gy_r +gb +gw -gw_b -gb_b: peak 209024 - outputs
// 77952.
func TestCPUConv1dWorkspace(t *testing.T) {
	b := graph.NewBuilder("conv1d")
	x := b.Parameter("x", graph.F32, 4, 32, 128)
	w := b.Parameter("w", graph.F32, 32, 32, 3)
	bias := b.Parameter("b", graph.F32, 32)
	o := b.Op("convolution", "conv", x, w, bias).Out("y", graph.F32, 4, 32, 128).Attr("padding", "1")
	y := o.T()
	b.SetPhase(graph.Backward)
	b.Op("convolution_backward", "conv.backward", y, x, w).Forward(o.ID()).
		Out("gx", graph.F32, 4, 32, 128).Out("gw", graph.F32, 32, 32, 3).Out("gb", graph.F32, 32)
	g, err := b.Build()
	require.NoError(t, err)
	assert.Equal(t, int64(143360-65536), CPUConvWorkspace(g, &g.Ops[0], CPU{Threads: 2}), "forward")
	assert.Equal(t, int64(209024-77952), CPUConvWorkspace(g, &g.Ops[1], CPU{Threads: 2}), "backward")
	// cuDNN's algorithms are for 2-D convolutions only
	assert.Nil(t, appendConvCandidates(nil, g, &g.Ops[0]))
}

// TestCPUFewInputChannels: the weight gradient of a convolution with few
// input channels (32 output channels, 3x3, batch 2, 16x16, bias, no input
// gradient; profiler events of aten::convolution_backward, f32, 2 threads)
// reads the input in its plain layout for at most 3 channels (AVX2: exactly
// 3), else reorders it and the weight gradient with channels padded to 8 up
// to 8 channels and to the block beyond:
//
//	AVX-512, 4 channels: +gy_r 65536 +x_r 16384 +gw_b 9216 +128 -x_r -gy_r
//	+gb 128 +gw 4608 -gw_b -128: peak 91264 - outputs 4736.
//	AVX-512, 3 channels: +gy_r 65536 +gw_b 3456 +128 -gy_r +gb +gw ...
//	AVX-512, 1 channel: +gy_r +gw_b 1152 +9600 +128 -9600 ... (the 9600
//	bytes are not modelled).
//	AVX2, 1 channel: +gy_r 65536 +x_r 16384 +gw_b 9216 +128 ...
func TestCPUFewInputChannels(t *testing.T) {
	for _, tc := range []struct {
		isa   CPUISA
		c     int64
		bwd   int64 // measured
		slack int64 // measured - modelled
	}{
		{ISAAVX512, 1, 75136, 9600}, {ISAAVX512, 2, 65536, 0}, {ISAAVX512, 3, 65536, 0}, {ISAAVX512, 4, 86528, 0},
		{ISAAVX512, 8, 81920, 0}, {ISAAVX512, 12, 102912, 0}, {ISAAVX512, 16, 98304, 0},
		{ISAAVX2, 1, 89984, 0}, {ISAAVX2, 2, 88832, 0}, {ISAAVX2, 3, 65536, 0}, {ISAAVX2, 4, 86528, 0},
		{ISAAVX2, 8, 81920, 0}, {ISAAVX2, 12, 102912, 0}, {ISAAVX2, 16, 98304, 0},
	} {
		g := cpuConv(t, 2, tc.c, 16, 32, 3, 1, 1, true, false)
		cpu := CPU{Threads: 2, ISA: tc.isa}
		assert.Equal(t, tc.bwd-tc.slack, CPUConvWorkspace(g, &g.Ops[1], cpu), "%v, %d channels", tc.isa, tc.c)
		// the forward's y_b + y exceeds its reorders here: 65536 measured
		assert.Equal(t, int64(65536), CPUConvWorkspace(g, &g.Ops[0], cpu), "%v, %d channels, forward", tc.isa, tc.c)
	}
}
