package sim

import (
	"maps"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// clConv builds a channels-last convolution as remat_torch.trace records
// it (convSpec: the backward, the last op, reads the output's gradient gy,
// x and w and returns gx, gw and, with bias, gb).
func clConv(t *testing.T, n, c, h, k, r, s, groups int64, bias, weightCL bool) *graph.Graph {
	t.Helper()
	return convSpec{n: n, c: c, h: h, k: k, r: r, s: s, groups: groups, bias: bias, traced: true, cl: true, weightCL: weightCL}.build(t)
}

// TestCPUChannelsLastMatchesPyTorch compares CPUConvWorkspace on
// channels-last convolutions with PyTorch 1.13's own: the largest running
// sum of the profiler's [memory] events while the convolution runs (its
// forward, then y.backward(gy)), minus its outputs, for a channels-last
// input x of batch 2 that requires grad (f32; the event lists are in the
// comments; AVX2 rows ran with ONEDNN_MAX_CPU_ISA=AVX2 on the same
// AVX-512 machine). slack is what the model leaves out.
func TestCPUChannelsLastMatchesPyTorch(t *testing.T) {
	for _, tc := range []struct {
		name               string
		isa                CPUISA
		c, h, k, r, s, grp int64
		threads            int
		bias, weightCL     bool
		fwd, bwd           int64 // measured
		fwdSlack, bwdSlack int64 // measured - modelled
	}{
		// fwd +y 196608 +8320 +w_r 18816 -w_r -8320. bwd +gx 196608 +w_r
		// 18816 -w_r +gw_b 4816896 +6272 +gb 384 -6272 +384 +18816 +gw
		// 18816 -18816 -gw_b -384: gw_b is 256 times the weight.
		{"ConvNeXt depthwise 96 7x7", ISAAVX512, 96, 16, 96, 7, 1, 96, 2, true, false, 27136, 4836096, 0, 0},
		// fwd scratch 4224 instead of 8320, the backward as above
		{"the same, 1 thread", ISAAVX512, 96, 16, 96, 7, 1, 96, 1, true, false, 23040, 4836096, 0, 0},
		// fwd +y +8320 +w_r 6272 (24 channels padded to 32). bwd +gx +w_r
		// 6272 -w_r +gw_b 1204224 +1664 +96 -1664 +96 +4704 +4704 -4704
		// -gw_b -96.
		{"depthwise 24 channels", ISAAVX512, 24, 16, 24, 7, 1, 24, 2, true, false, 14592, 1209024, 0, 0},
		// oneDNN's depthwise kernel: bwd +gx +3456 -3456 +3456 +4096 +384
		// -4096 +384 +3456 +3456 -3456 -3456 -384.
		{"depthwise 3x3", ISAAVX512, 96, 16, 96, 3, 1, 96, 2, true, false, 11776, 7296, 0, 0},
		// MobileNetV2's last depthwise convolution at 64x64 images: the
		// 2x2 input cannot hold the kernel, so the blocked kernel runs.
		// fwd +y +8320 +34560 -34560 -8320. bwd +gx +34560 -34560 +gw_b
		// 8847360 +34560 +gw 34560 -34560 -gw_b.
		{"depthwise 3x3 on 2x2", ISAAVX512, 960, 2, 960, 3, 1, 960, 2, false, false, 42880, 8881920, 0, 0},
		// -t_pad mod stride = 1 more row needed: bwd +gx +3456 -3456
		// +gw_b 884736 +3456 +3456 -3456 -gw_b.
		{"depthwise 3x3 stride 2 on 3x3", ISAAVX512, 96, 3, 96, 3, 2, 96, 2, false, false, 11776, 888192, 0, 0},
		// the GEMM-based kernel: bwd ... +18816 +151176 +384 -151176 +384
		// +18816 -18816. Its forward (+520 +y -520 +768 -768) is not
		// modelled: the model counts the blocked kernel's 8320 + w_r.
		{"depthwise 7x7 on 1x1", ISAAVX512, 96, 1, 96, 7, 1, 96, 2, true, false, 768, 151176, 768 - 27136, -136},
		// a channel multiplier: the grouped kernel's blocked weight in
		// both directions. fwd +y +4816896 -4816896. bwd +gx +4816896
		// -4816896 +gw_b 4816896 +6272 +768 -6272 +768 +37632 +37632
		// -37632 -gw_b -768.
		{"depthwise multiplier 2", ISAAVX512, 96, 16, 192, 7, 1, 96, 2, true, false, 4816896, 4855296, 0, 0},
		// fwd +w_cl 34560 +y 81920 +12288 +w_r 41472 -w_r -12288 -w_cl.
		// bwd +w_cl +gx 49152 +55296 -55296 +gw_b 55296 +320 +gb 160 -320
		// +160 +34560 +gw 34560 -34560 -gw_b -160 -w_cl (+34560 -34560).
		{"dense 3x3, plain weight", ISAAVX512, 24, 16, 40, 3, 1, 1, 2, true, false, 88320, 124576, 0, 0},
		// the same on a channels-last weight: no w_cl
		{"dense 3x3, channels-last weight", ISAAVX512, 24, 16, 40, 3, 1, 1, 2, true, true, 53760, 90016, 0, 0},
		// fwd +y +12288 +w_r 147456 -w_r -12288. bwd +gx +147456 -147456
		// +gw_b 147456 +1536 +1536 +147456 +gw 147456 -147456 -gw_b -1536.
		{"1x1", ISAAVX512, 96, 16, 384, 1, 1, 1, 2, true, false, 159744, 296448, 0, 0},
		// ConvNeXt's downsampling: fwd +w_cl 294912 +y +12288 +w_r 294912.
		{"2x2 stride 2", ISAAVX512, 96, 16, 192, 2, 2, 1, 2, true, false, 602112, 885504, 0, 0},
		// fwd +w_cl 9216 +y +w_r 9216. bwd +w_cl +gx +9216 -9216 +gw_b
		// 147456 +1152 +256 -1152 +256 +9216 +gw 9216 -9216 -gw_b -256
		// -w_cl.
		{"16 groups of 4", ISAAVX512, 64, 16, 64, 3, 1, 16, 2, true, false, 18432, 166144, 0, 0},
		// AVX2: 8-channel blocks. fwd +y +w_r 18816 -w_r. bwd +gx +18816
		// -18816 +gw_b 1204224 +3200 +384 -3200 +384 +18816 +18816 -18816
		// -gw_b -384.
		{"AVX2 ConvNeXt depthwise 96 7x7", ISAAVX2, 96, 16, 96, 7, 1, 96, 2, true, false, 18816, 1223424, 0, 0},
		// AVX2's blocked kernel needs an input at least as high as the
		// kernel: bwd +gx +18816 -18816 +18816 +157312 +384 -157312 +384
		// +18816 +18816 -18816 +18816 -18816 -18816 -384.
		{"AVX2 depthwise 7x7 on 4x4", ISAAVX2, 96, 4, 96, 7, 1, 96, 2, true, false, 18816, 157312, 0, 0},
		// MobileNetV2's at 64x64 images: the depthwise kernel takes it.
		// bwd +gx +20736 -20736 +20736 +20864 -20864 +20736 +20736 -20736
		// -20736.
		{"AVX2 depthwise 3x3 stride 2 on 4x4", ISAAVX2, 576, 4, 576, 3, 2, 576, 2, false, false, 20736, 41472, 0, 0},
		// ResNet's last 3x3 convolutions at 64x64 images: bwd +gx +147456
		// -147456 +147456 +1200512 -1200512 +147456 +gw 147456 -147456
		// +147456 -147456 -147456.
		{"AVX2 dense 3x3 on 2x2", ISAAVX2, 64, 2, 64, 3, 1, 1, 2, false, true, 147456, 1200512, 0, 0},
		// fwd +w_cl 34560 +y +w_r 34560 -w_r -w_cl. bwd +w_cl +gx +34560
		// -34560 +gw_b 34560 +160 +160 +34560 +gw 34560 ...
		{"AVX2 dense 3x3, plain weight", ISAAVX2, 24, 16, 40, 3, 1, 1, 2, true, false, 69120, 103840, 0, 0},
		{"AVX2 1x1", ISAAVX2, 96, 16, 384, 1, 1, 1, 2, true, false, 147456, 296448, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := clConv(t, 2, tc.c, tc.h, tc.k, tc.r, tc.s, tc.grp, tc.bias, tc.weightCL)
			cpu := CPU{Threads: tc.threads, ISA: tc.isa}
			assert.Equal(t, tc.fwd-tc.fwdSlack, CPUConvWorkspace(g, &g.Ops[0], cpu), "forward")
			assert.Equal(t, tc.bwd-tc.bwdSlack, CPUConvWorkspace(g, &g.Ops[2], cpu), "backward")
			m, err := NewMachine(g, Options{ConvLibrary: ConvOneDNN, CPUThreads: tc.threads, CPUISA: tc.isa})
			require.NoError(t, err)
			assert.Equal(t, tc.bwd-tc.bwdSlack, m.OpWorkspace(2))
		})
	}
}

// TestDWKernelFits checks the depthwise kernel's applicability against
// what PyTorch ran (the size of the weight-gradient buffer told the kernel
// apart: the weight for the depthwise kernel, 256 weights for the blocked
// one), for kernels 3x3, 5x3 (5 high) and 3x5, "same" padding.
func TestDWKernelFits(t *testing.T) {
	for _, tc := range []struct {
		r, s, h, w, stride int64
		want               bool
	}{
		{3, 3, 1, 8, 1, false}, {3, 3, 2, 8, 1, false}, {3, 3, 3, 8, 1, true}, {3, 3, 4, 8, 1, true},
		{3, 3, 1, 8, 2, false}, {3, 3, 2, 8, 2, false}, {3, 3, 3, 8, 2, false}, {3, 3, 4, 8, 2, true}, {3, 3, 5, 8, 2, true},
		{5, 3, 4, 8, 1, false}, {5, 3, 5, 8, 1, true}, {5, 3, 16, 4, 1, true},
		{5, 3, 4, 8, 2, false}, {5, 3, 5, 8, 2, true}, {5, 3, 10, 8, 2, true},
		{3, 5, 16, 4, 1, false}, {3, 5, 4, 16, 1, false}, {7, 7, 16, 16, 1, false},
		{1, 3, 1, 8, 1, true},
	} {
		p := (tc.h+2*(tc.r/2)-tc.r)/tc.stride + 1
		q := (tc.w+2*(tc.s/2)-tc.s)/tc.stride + 1
		d := convShapes{n: 2, c: 96, h: tc.h, w: tc.w, k: 96, cg: 1, r: tc.r, s: tc.s, p: p, q: q, elem: 4}
		op := &graph.Op{Attrs: map[string]string{"stride": strconv.FormatInt(tc.stride, 10), "padding": strconv.FormatInt(tc.r/2, 10) + "," + strconv.FormatInt(tc.s/2, 10)}}
		assert.Equal(t, tc.want, dwKernelFits(d, geometry(op, d)), "%dx%d kernel, %dx%d input, stride %d", tc.r, tc.s, tc.h, tc.w, tc.stride)
		// Without attributes (an older trace), the geometry is inferred:
		// "same" padding and the stride the shapes imply.
		assert.Equal(t, tc.want, dwKernelFits(d, geometry(&graph.Op{}, d)), "inferred: %dx%d kernel, %dx%d input, stride %d", tc.r, tc.s, tc.h, tc.w, tc.stride)
	}
}

func TestGeometryAttrs(t *testing.T) {
	d := convShapes{n: 1, c: 8, h: 9, w: 9, k: 8, cg: 8, r: 3, s: 3, p: 5, q: 5, elem: 4}
	g := geometry(&graph.Op{Attrs: map[string]string{"stride": "2,2", "pads": "1,0,1,0", "dilation": "1"}}, d)
	assert.Equal(t, convGeom{sh: 2, sw: 2, dh: 1, dw: 1, th: 1, lw: 0}, g)
	g = geometry(&graph.Op{Attrs: map[string]string{"stride": "x", "padding": "-1"}}, d)
	assert.Equal(t, convGeom{sh: 2, sw: 2, dh: 1, dw: 1, th: 1, lw: 1}, g, "unreadable values are inferred, as missing ones")
	g = geometry(nil, d)
	assert.Equal(t, convGeom{sh: 2, sw: 2, dh: 1, dw: 1, th: 1, lw: 1}, g, "inferred: same padding, stride from the shapes")
}

func TestParseCPUISA(t *testing.T) {
	for in, want := range map[string]CPUISA{"avx512": ISAAVX512, "AVX512_CORE": ISAAVX512, " avx2 ": ISAAVX2} {
		got, err := ParseCPUISA(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := ParseCPUISA("sse41")
	assert.ErrorContains(t, err, `"sse41": expected avx512 or avx2`)
	assert.Equal(t, "avx2", ISAAVX2.String())
	assert.Equal(t, "cpu_isa(7)", CPUISA(7).String())
	assert.Equal(t, int64(8), ISAAVX2.Block())
	assert.Equal(t, int64(16), ISAAVX512.Block())
	_, err = NewMachine(clConv(t, 2, 8, 4, 8, 3, 1, 8, true, false), Options{ConvLibrary: ConvOneDNN, CPUISA: 9})
	assert.ErrorContains(t, err, "field CPUISA is 9")
}

// TestGeometryOneD: a 1-D convolution's attributes describe its width;
// PyTorch runs it with height 1, no padding and stride 1 along it.
func TestGeometryOneD(t *testing.T) {
	d := convShapes{n: 2, c: 8, h: 1, w: 20, k: 8, cg: 1, r: 1, s: 3, p: 1, q: 10, elem: 4, oneD: true}
	g := geometry(&graph.Op{Attrs: map[string]string{"stride": "2", "padding": "1", "dilation": "1"}}, d)
	assert.Equal(t, convGeom{sh: 1, sw: 2, dh: 1, dw: 1, th: 0, lw: 1}, g)
	assert.Equal(t, g, geometry(&graph.Op{}, d), "inferred from the shapes")
	assert.True(t, dwKernelFits(d, g), "a 3-wide depthwise Conv1d takes oneDNN's depthwise kernel")
}

// TestCPULayoutCopies: a convolution copies an input or gradient not laid
// out as it runs, as the trace's input_format and grad_format attributes
// tell (profiler events, 192 to 256 channels 1x1, batch 2, 4x4, AVX-512, 2
// threads):
//
//	channels-last weight, contiguous input: fwd +x_cl 24576 +y 32768
//	+12288 +w_r 196608 -w_r -12288 -x_cl; bwd +x_cl 24576 +gx 24576
//	+196608 -196608 +gw_b 196608 +1024 +1024 +196608 +gw 196608 ...
//	plain weight, strided (transposed) input: fwd +x 24576 +x_r 24576 +w_r
//	196608 +y_b 32768 -w_r -x_r +y -y_b ...
func TestCPULayoutCopies(t *testing.T) {
	g := clConv(t, 2, 192, 4, 256, 1, 1, 1, true, true)
	fw, bw := &g.Ops[0], &g.Ops[2]
	setAttr(fw, graph.AttrInputFormat, graph.Contiguous)
	cpu := CPU{Threads: 2}
	assert.Equal(t, int64(233472), CPUWorkspace(g, fw, cpu), "forward")
	assert.Equal(t, int64(418816), CPUWorkspace(g, bw, cpu), "backward")
	setAttr(fw, graph.AttrInputFormat, graph.ChannelsLast)
	assert.Equal(t, int64(233472-24576), CPUWorkspace(g, fw, cpu), "no copy of a channels-last input")

	// The gradient: a channels-last convolution copies a contiguous one
	// (the gradient of a mean, TinyConvNeXt in python/tests), a plain one a
	// strided one.
	bw.Attrs = map[string]string{graph.AttrGradFormat: graph.Contiguous}
	assert.Equal(t, int64(418816-24576+32768), CPUWorkspace(g, bw, cpu), "contiguous gradient, channels-last convolution")
	setAttr(bw, graph.AttrGradFormat, graph.ChannelsLast)
	assert.Equal(t, int64(418816-24576), CPUWorkspace(g, bw, cpu))

	p := convSpec{n: 2, c: 192, h: 4, k: 256, r: 1, s: 1, groups: 1, bias: true, traced: true}.build(t)
	fw, bw = &p.Ops[0], &p.Ops[2]
	setAttr(fw, graph.AttrInputFormat, graph.Strided)
	assert.Equal(t, int64(245760), CPUWorkspace(p, fw, cpu), "strided input, plain convolution")
	bw.Attrs = map[string]string{graph.AttrGradFormat: graph.Strided}
	withCopies := CPUWorkspace(p, bw, cpu)
	setAttr(fw, graph.AttrInputFormat, graph.Contiguous)
	setAttr(bw, graph.AttrGradFormat, graph.Contiguous)
	assert.Equal(t, int64(24576+32768), withCopies-CPUWorkspace(p, bw, cpu), "the backward copies the saved input and the gradient")
}

// TestConvMemoryFormatDefault: a graph that records no memory formats (an
// ONNX import) runs its convolutions channels-last when CPU.ChannelsLast
// (setting conv.memory_format) says so, with channels-last weights; a
// recorded memory_format, contiguous or channels_last, wins.
func TestConvMemoryFormatDefault(t *testing.T) {
	plain := convSpec{n: 2, c: 24, h: 16, k: 40, r: 3, s: 1, groups: 1, bias: true}.build(t)
	traced := clConv(t, 2, 24, 16, 40, 3, 1, 1, true, true)
	cpu := CPU{Threads: 2, ChannelsLast: true}
	for i := range plain.Ops {
		assert.Equal(t, CPUConvWorkspace(traced, &traced.Ops[min(2*i, 2)], CPU{Threads: 2}), CPUConvWorkspace(plain, &plain.Ops[i], cpu),
			"op %d: the default gives the traced channels-last convolution's workspace", i)
	}
	assert.NotEqual(t, CPUConvWorkspace(plain, &plain.Ops[1], CPU{Threads: 2}), CPUConvWorkspace(plain, &plain.Ops[1], cpu))
	setAttr(&traced.Ops[0], graph.AttrMemoryFormat, graph.Contiguous)
	assert.Equal(t, CPUConvWorkspace(traced, &traced.Ops[2], CPU{Threads: 2}), CPUConvWorkspace(traced, &traced.Ops[2], cpu),
		"a recorded contiguous convolution stays contiguous")

	m, err := NewMachine(plain, Options{ConvLibrary: ConvOneDNN, ConvChannelsLast: true})
	require.NoError(t, err)
	assert.Equal(t, CPUConvWorkspace(plain, &plain.Ops[1], cpu), m.OpWorkspace(1))
}

// TestCPUDilatedMatchesPyTorch: oneDNN's blocked weight-gradient kernel
// refuses a dilated convolution of an image lower than its dilated kernel
// (AVX-512) or any dilated convolution and any image lower than the kernel
// (AVX2); the GEMM-based kernel then keeps per-thread buffers. FCN's and
// DeepLab's dilated convolutions on small images were 20% and 56% low
// without it. Measured as TestCPUChannelsLastMatchesPyTorch (64 channels
// 3x3 or depthwise 96, batch 2, no bias; event lists in the comments).
func TestCPUDilatedMatchesPyTorch(t *testing.T) {
	for _, tc := range []struct {
		name               string
		isa                CPUISA
		c, h, k, r, dil    int64
		grp                int64
		cl                 bool
		fwd, bwd           int64 // measured
		fwdSlack, bwdSlack int64 // measured - modelled
	}{
		// bwd ... +gw_b 147456 +1253632 -1253632 +gw 147456 -gw_b
		{"dilated 2 on 4x4: GEMM", ISAAVX512, 64, 4, 64, 3, 2, 1, false, 155648, 1253632, 0, 0},
		// the blocked kernel's reorders as without dilation
		{"dilated 2 on 8x8: blocked", ISAAVX512, 64, 8, 64, 3, 2, 1, false, 180224, 147456, 0, 0},
		// bwd +gx 8192 +147456 -147456 +147456 +1261952 -1261952 ...
		{"channels-last dilated 2 on 4x4: GEMM", ISAAVX512, 64, 4, 64, 3, 2, 1, true, 159744, 1261952, 0, 0},
		// bwd +gx 49152 +4736 -4736 +49152 -49152 +3456 +32512 -32512
		// +3456 -3456: the data gradient reorders less than the model's
		// gy_r + w_r + gx_b
		{"depthwise dilated 2 on 8x8", ISAAVX512, 96, 8, 96, 3, 2, 96, false, 52608, 45696, 0, -3456},
		// bwd +gx 49152 +w_r 884736 -w_r +gw_b 884736 +3456 +3456 -3456
		// -gw_b: a dilated depthwise convolution reorders its weight into
		// the blocked layout for the data gradient too
		{"channels-last depthwise dilated 2 on 8x8", ISAAVX512, 96, 8, 96, 3, 2, 96, true, 3456, 888192, 0, 0},
		// LR-ASPP's 5x5 with dilation 2 on 4x4: bwd +gx 12288 +w_r 2457600
		// -w_r +9600 +80512 -80512 ... (GEMM weight gradient)
		{"channels-last depthwise 5x5 dilated 2 on 4x4", ISAAVX512, 96, 4, 96, 5, 2, 96, true, 9600, 2448000, 0, 0},
		{"AVX2 3x3 on 2x2: GEMM", ISAAVX2, 64, 2, 64, 3, 1, 1, false, 149504, 1198336, 0, 0},
		{"AVX2 dilated 2 on 16x16: GEMM", ISAAVX2, 64, 16, 64, 3, 2, 1, false, 278528, 2359552, 0, 0},
		// bwd +gx +w_r 221184 -w_r +3456 +33152 -33152 ...
		{"AVX2 channels-last depthwise dilated 2 on 8x8: GEMM", ISAAVX2, 96, 8, 96, 3, 2, 96, true, 3456, 217728, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := convSpec{n: 2, c: tc.c, h: tc.h, k: tc.k, r: tc.r, s: 1, groups: tc.grp, dil: tc.dil,
				traced: true, cl: tc.cl, weightCL: tc.cl}.build(t)
			if !tc.cl {
				setAttr(&g.Ops[0], graph.AttrMemoryFormat, graph.Contiguous)
			}
			cpu := CPU{Threads: 2, ISA: tc.isa}
			assert.Equal(t, tc.fwd-tc.fwdSlack, CPUConvWorkspace(g, &g.Ops[0], cpu), "forward")
			assert.Equal(t, tc.bwd-tc.bwdSlack, CPUConvWorkspace(g, &g.Ops[2], cpu), "backward")
		})
	}
}

// TestCPUPatchEmbeddingMatchesPyTorch: with AVX-512 oneDNN's weight
// gradient takes its GEMM-based kernel for a kernel wider than 14 (a
// vision transformer's patch embedding: 3 channels, 16x16 or 32x32
// kernels with the kernel's stride, no padding), whose scratch is, per
// thread that gets a sample (min(threads, N)), four weights and one
// sample's columns, plus 256 bytes. Profiler, 768 output channels, 224x224
// images, 2 threads: aten::convolution_backward allocates +gx +gw +scratch
// +gb -scratch ...; vit_b_32 was 7% low without it on both routes.
func TestCPUPatchEmbeddingMatchesPyTorch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n, r    int64
		scratch int64 // measured
	}{
		{"32x32, batch 1", 1, 32, 38351104},
		{"32x32, batch 2", 2, 32, 76701952},
		{"16x16, batch 1", 1, 16, 10039552},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// the image needs no gradient, as a ViT's input (the data
			// gradient of such a kernel is not modelled: +gx +cols -cols
			// +gx-sized -gx-sized when the input needs one)
			g := convSpec{n: tc.n, c: 3, h: 224, k: 768, r: tc.r, s: tc.r, groups: 1, noPad: true, noGX: true, bias: true, traced: true}.build(t)
			setAttr(&g.Ops[0], graph.AttrMemoryFormat, graph.Contiguous)
			assert.Equal(t, tc.scratch, CPUConvWorkspace(g, &g.Ops[2], CPU{Threads: 2, ISA: ISAAVX512}), "backward")
		})
	}
}

// TestCPUConv3DMatchesPyTorch: a 3-D convolution (Conv3d, 64 to 64
// channels, 3x3x3, batch 2, no bias; profiler events of
// aten::convolution_backward) reorders as a 2-D one over its volumes, and
// takes the GEMM-based weight gradient with fewer frames than the kernel's
// depth (AVX-512) or always (AVX2), its columns one output frame:
//
//	AVX-512, 4x8x8: +gy_r 131072 +w_r 442368 +gx_b 131072 -w_r -gy_r +gx
//	-gx_b +gy_r +x_r +gw_b 442368 -x_r -gy_r +gw 442368 -gw_b.
//	AVX-512, 2x4x4: ... +gw_b 442368 +3760384 -3760384 +gw -gw_b.
//	AVX-512, 4x2x2: as 4x8x8 (a low image takes the blocked kernel).
//	AVX2, 4x8x8: ... +gw_b 442368 +4423936 -4423936 +gw -gw_b.
//
// torchvision's r3d_18 at 4x32x32 clips was 57% low without them.
func TestCPUConv3DMatchesPyTorch(t *testing.T) {
	build := func(d, h int64) *graph.Graph {
		b := graph.NewBuilder("conv3d")
		x := b.Parameter("x", graph.F32, 2, 64, d, h, h)
		w := b.Parameter("w", graph.F32, 64, 64, 3, 3, 3)
		o := b.Op("convolution", "conv", x, w).Out("y", graph.F32, 2, 64, d, h, h).
			Attr("stride", "1,1,1").Attr("padding", "1,1,1").Attr("dilation", "1,1,1").Attr("groups", "1").
			Attr(graph.AttrMemoryFormat, graph.Contiguous)
		y := o.T()
		b.SetPhase(graph.Backward)
		gy := b.Op("ones_like", "seed", y).Out("gy", graph.F32, 2, 64, d, h, h).T()
		b.Op("convolution_backward", "conv.backward", gy, x, w).Forward(o.ID()).
			Out("gx", graph.F32, 2, 64, d, h, h).Out("gw", graph.F32, 64, 64, 3, 3, 3)
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	for _, tc := range []struct {
		name string
		isa  CPUISA
		d, h int64
		bwd  int64 // measured
	}{
		{"4x8x8", ISAAVX512, 4, 8, 442368},
		{"2x4x4: GEMM", ISAAVX512, 2, 4, 3760384},
		{"4x2x2", ISAAVX512, 4, 2, 442368},
		{"AVX2 4x8x8: GEMM", ISAAVX2, 4, 8, 4423936},
	} {
		g := build(tc.d, tc.h)
		cpu := CPU{Threads: 2, ISA: tc.isa}
		assert.Equal(t, tc.bwd, CPUConvWorkspace(g, &g.Ops[2], cpu), tc.name)
		if tc.name == "4x8x8" {
			// forward: +x_r 131072 +w_r 442368 +y_b 131072 -w_r -x_r +y -y_b
			assert.Equal(t, int64(573440), CPUConvWorkspace(g, &g.Ops[0], cpu), "forward")
		}
	}
}

// TestCPUConvTranspose: PyTorch 1.13 runs a transposed convolution on the
// CPU with slow_conv_transpose2d, whose im2col columns hold C_out*R*S x
// H*W elements (profiler, batch 4, bias; the forward adds a row of ones of
// the output's size, a channels-last model copies its input and weight):
//
//	64 to 128, 4x4, stride 1, on 1x1: fwd +y 32768 +8192 +64 -64 -8192;
//	bwd +gx 1024 +8192 -8192 +gw 524288 +gb 512 +8192 -8192.
//	128 to 64, 4x4, stride 2, on 4x4: fwd +y +65536 +256 ...; bwd 65536.
//	32 to 3, 4x4, stride 2, on 16x16: fwd +y +49152 +4096 ...; bwd 49152.
//	channels-last 64 to 16, 3x3, stride 2, on 4x4: fwd +x 16384 +w 36864
//	+y +9216 +196 ...; bwd +gx +w 36864 +x 16384 +9216 ...
//
// A DCGAN-style generator was 42% high when these ran as ordinary
// convolutions; the ONNX import's conv_transpose2d had no workspace.
func TestCPUConvTranspose(t *testing.T) {
	for _, tc := range []struct {
		name            string
		cin, cout, k, s int64
		pad, h          int64
		cl              bool
		fwd, bwd        int64 // measured
	}{
		{"64 to 128 on 1x1", 64, 128, 4, 1, 0, 1, false, 8256, 8192},
		{"128 to 64 on 4x4", 128, 64, 4, 2, 1, 4, false, 65792, 65536},
		{"32 to 3 on 16x16", 32, 3, 4, 2, 1, 16, false, 53248, 49152},
		{"channels-last 64 to 16 on 4x4", 64, 16, 3, 2, 1, 4, true, 62660, 62464},
	} {
		p := (tc.h-1)*tc.s - 2*tc.pad + tc.k
		for _, typ := range []string{"convolution", graph.OpConvTranspose2d} {
			b := graph.NewBuilder("tconv")
			x := b.Parameter("x", graph.F32, 4, tc.cin, tc.h, tc.h)
			w := b.Parameter("w", graph.F32, tc.cin, tc.cout, tc.k, tc.k)
			bias := b.Parameter("b", graph.F32, tc.cout)
			o := b.Op(typ, "tconv", x, w, bias).Out("y", graph.F32, 4, tc.cout, p, p)
			if typ == "convolution" {
				format := graph.Contiguous
				if tc.cl {
					format = graph.ChannelsLast
				}
				o.Attr(graph.AttrTransposed, "1").Attr(graph.AttrMemoryFormat, graph.Contiguous).
					Attr(graph.AttrInputFormat, format).Attr(graph.AttrWeightFormat, format)
			}
			y := o.T()
			b.SetPhase(graph.Backward)
			gy := b.Op("ones_like", "seed", y).Out("gy", graph.F32, 4, tc.cout, p, p).T()
			b.Op(typ+"_backward", "tconv.backward", gy, x, w).Forward(o.ID()).
				Out("gx", graph.F32, 4, tc.cin, tc.h, tc.h).Out("gw", graph.F32, tc.cin, tc.cout, tc.k, tc.k).Out("gb", graph.F32, tc.cout)
			g, err := b.Build()
			require.NoError(t, err)
			if tc.cl && typ != "convolution" {
				continue // an ONNX graph records no layouts
			}
			cpu := CPU{Threads: 2}
			assert.Equal(t, tc.fwd, CPUWorkspace(g, &g.Ops[0], cpu), "%s %s forward", tc.name, typ)
			assert.Equal(t, tc.bwd, CPUWorkspace(g, &g.Ops[2], cpu), "%s %s backward", tc.name, typ)
		}
	}
}

// setAttr gives op o a copy of its attributes with k set to v: the ops of
// a built graph may share one attribute map (graph.Op.Attrs).
func setAttr(o *graph.Op, k, v string) {
	m := maps.Clone(o.Attrs)
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	o.Attrs = m
}
