package sim

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/remat-dev/remat/graph"
)

// Workspace model.
//
// Every op may need temporary memory (graph.Op.Workspace, or the workspace of
// the convolution algorithm chosen for it, see below). The Machine allocates
// it when the op starts and releases it when it is no longer in use.
//
// How many temporary workspaces are alive at once follows MXNet's two
// settings: MXNET_EXEC_NUM_TEMP (temp space copies per device) and
// MXNET_GPU_WORKER_NTHREADS (ops running concurrently per GPU). With
// k = min(NumTemp, WorkerThreads) (each at least 1), up to k ops may be in
// flight, each holding its own temp space: an op's workspace is released only
// once k-1 further ops have started, so at any moment the workspaces of the
// last k computed ops are alive. k = 1 (either setting at 1) gives the
// minimum: each workspace lives exactly for its op. The ring is drained when
// a replay ends. (MXNet's real temp space copies grow to the largest request
// and are kept; remat keeps per-op sizes so that the figure reflects what
// the ops need.)

// CudnnTune selects how convolution algorithms are chosen. The numbering is
// MXNET_CUDNN_AUTOTUNE_DEFAULT's.
type CudnnTune uint8

// Convolution algorithm choice policies.
const (
	// CudnnOff uses the default algorithm: the op as described (its
	// Workspace field, its cost-model time).
	CudnnOff CudnnTune = iota
	// CudnnLimitedWorkspace picks the fastest algorithm whose workspace fits
	// the limit (Options.ConvWorkspaceLimit, or the op's "workspace"
	// attribute in MB).
	CudnnLimitedWorkspace
	// CudnnFastest picks the fastest algorithm regardless of workspace.
	CudnnFastest
)

var tuneNames = [...]string{"off", "limited_workspace", "fastest"}

// Valid reports whether t is a defined policy.
func (t CudnnTune) Valid() bool { return t <= CudnnFastest }

// String returns the policy's name as MXNet's cudnn_tune spells it.
func (t CudnnTune) String() string {
	if !t.Valid() {
		return fmt.Sprintf("cudnn_tune(%d)", uint8(t))
	}
	return tuneNames[t]
}

// ParseCudnnTune parses a policy: off, limited_workspace, fastest, or the
// MXNET_CUDNN_AUTOTUNE_DEFAULT numbers 0, 1, 2 ("none" means off).
func ParseCudnnTune(s string) (CudnnTune, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "off", "none", "0":
		return CudnnOff, nil
	case "limited_workspace", "1":
		return CudnnLimitedWorkspace, nil
	case "fastest", "2":
		return CudnnFastest, nil
	}
	return 0, fmt.Errorf("cudnn_tune %q: expected off, limited_workspace, fastest (or 0, 1, 2)", s)
}

// DefaultConvWorkspaceLimit is the workspace limit of limited_workspace when
// neither Options nor the op set one: 1024 MB, the default of MXNet's
// Convolution "workspace" parameter.
const DefaultConvWorkspaceLimit = int64(1024) << 20

// AttrConvWorkspace is the op attribute holding a convolution's workspace
// limit in MB (MXNet's Convolution parameter "workspace").
const AttrConvWorkspace = "workspace"

// ConvAlgo is one convolution algorithm candidate for an op: its time as a
// factor of the op's default time and the workspace it needs.
type ConvAlgo struct {
	Name       string  `json:"name"`
	TimeFactor float64 `json:"time_factor"`
	Workspace  int64   `json:"workspace"`
}

// convShapes holds a 2-D convolution's dimensions.
type convShapes struct {
	n, c, h, w  int64 // input
	k, cg, r, s int64 // weight (cg = input channels per group)
	p, q        int64 // output spatial
	elem        int64
	oneD        bool // a 1-D convolution, as 2-D with h = r = p = 1
}

// convTypes are the op types of the registry's convolution workspace class
// (graph.WorkspaceConv: conv2d, and convolution as traced steps name it).
var convTypes = sync.OnceValue(func() []string {
	var ts []string
	for _, e := range graph.OpTypes() {
		if e.Workspace == graph.WorkspaceConv {
			ts = append(ts, e.Name)
		}
	}
	return ts
})

// isConvType reports whether typ names a 2-D convolution (forward) or one of
// its gradients (a type starting with the forward name and "_").
func isConvType(typ string) (fwd, any bool) {
	for _, c := range convTypes() {
		if typ == c {
			return true, true
		}
		if strings.HasPrefix(typ, c) && strings.HasPrefix(typ[len(c):], "_") {
			any = true
		}
	}
	return false, any
}

// convDims extracts the shapes of op's convolution: its own for a forward
// conv2d, its forward op's for a gradient op. ok is false when the op is not
// a convolution or the shapes are unknown. With oneD, a 1-D convolution
// (3-D input, weight and output) is read as the 2-D one PyTorch runs it as
// (its input viewed as N x C x 1 x L).
func convDims(g *graph.Graph, op *graph.Op, oneD bool) (convShapes, bool) {
	fwd, anyConv := isConvType(op.Type)
	if !anyConv {
		return convShapes{}, false
	}
	f := op
	if !fwd {
		if f = g.Op(op.Forward); f == nil { // none, or not g's
			return convShapes{}, false
		}
		if ff, _ := isConvType(f.Type); !ff {
			return convShapes{}, false
		}
	}
	if len(f.Inputs) < 2 || len(f.Outputs) < 1 {
		return convShapes{}, false
	}
	x, w, y := g.Tensor(f.Inputs[0]), g.Tensor(f.Inputs[1]), g.Tensor(f.Outputs[0])
	if x == nil || w == nil || y == nil {
		return convShapes{}, false
	}
	var d convShapes
	switch {
	case len(x.Shape) == 4 && len(w.Shape) == 4 && len(y.Shape) == 4:
		d = convShapes{n: x.Shape[0], c: x.Shape[1], h: x.Shape[2], w: x.Shape[3],
			k: w.Shape[0], cg: w.Shape[1], r: w.Shape[2], s: w.Shape[3],
			p: y.Shape[2], q: y.Shape[3], elem: x.DType.Size()}
	case oneD && len(x.Shape) == 3 && len(w.Shape) == 3 && len(y.Shape) == 3:
		d = convShapes{n: x.Shape[0], c: x.Shape[1], h: 1, w: x.Shape[2],
			k: w.Shape[0], cg: w.Shape[1], r: 1, s: w.Shape[2],
			p: 1, q: y.Shape[2], elem: x.DType.Size(), oneD: true}
	default:
		return convShapes{}, false
	}
	if d.elem == 0 {
		d.elem = 4
	}
	for _, v := range []int64{d.n, d.c, d.h, d.w, d.k, d.cg, d.r, d.s, d.p, d.q} {
		if v <= 0 || v > 1<<20 {
			return convShapes{}, false
		}
	}
	return d, true
}

// satMul multiplies non-negative factors, saturating at 1<<62.
func satMul(f ...int64) int64 {
	r := int64(1)
	for _, v := range f {
		if v != 0 && r > (int64(1)<<62)/v {
			return int64(1) << 62
		}
		r *= v
	}
	return r
}

// ConvCandidates lists the algorithm candidates of a convolution op (forward
// or gradient), derived from its shapes; nil if op is not a convolution with
// known 4-D shapes. The table (remat's model, relative to implicit GEMM):
//
//	implicit_gemm          1.00  0
//	implicit_precomp_gemm  0.80  4*Cg*R*S               (offset table)
//	gemm                   0.90  e*N*Cg*R*S*P*Q         (explicit im2col of the batch)
//	fft                    0.55 (R*S >= 25) / 0.95      8*(N*C + K*Cg + N*K)*(H+R-1)*((W+S-1)/2+1)
//	winograd               0.70  0                      (fused; 3x3, stride 1)
//	winograd_nonfused      0.50  e*36*(T*C + C*K + T*K), T = N*ceil(P/4)*ceil(Q/4)  (F(4x4,3x3))
//
// FFT and Winograd need stride 1 (P >= H-R+1, Q >= W-S+1) and one group; the
// Winograd variants need a 3x3 filter; FFT needs a filter larger than 1x1.
// e is the element size; shapes are NCHW input, KCgRS weight, NKPQ output.
func ConvCandidates(g *graph.Graph, op *graph.Op) []ConvAlgo {
	return appendConvCandidates(nil, g, op)
}

// appendConvCandidates appends op's candidates to c (nil when op is not a
// convolution), so that a Machine pricing every op reuses one buffer.
func appendConvCandidates(c []ConvAlgo, g *graph.Graph, op *graph.Op) []ConvAlgo {
	if g == nil || op == nil {
		return nil
	}
	d, ok := convDims(g, op, false)
	if !ok {
		return nil
	}
	c = append(c,
		ConvAlgo{"implicit_gemm", 1.0, 0},
		ConvAlgo{"implicit_precomp_gemm", 0.80, satMul(4, d.cg, d.r, d.s)},
		ConvAlgo{"gemm", 0.90, satMul(d.elem, d.n, d.cg, d.r, d.s, d.p, d.q)},
	)
	stride1 := d.p >= d.h-d.r+1 && d.q >= d.w-d.s+1
	groups1 := d.cg == d.c
	if stride1 && groups1 && d.r*d.s > 1 {
		f := 0.95
		if d.r*d.s >= 25 {
			f = 0.55
		}
		planes := satMul(d.n, d.c) + satMul(d.k, d.cg) + satMul(d.n, d.k)
		c = append(c, ConvAlgo{"fft", f, satMul(8, planes, d.h+d.r-1, (d.w+d.s-1)/2+1)})
	}
	if stride1 && groups1 && d.r == 3 && d.s == 3 {
		t := satMul(d.n, (d.p+3)/4, (d.q+3)/4)
		c = append(c, ConvAlgo{"winograd", 0.70, 0},
			ConvAlgo{"winograd_nonfused", 0.50, satMul(d.elem, 36, satMul(t, d.c)+satMul(d.c, d.k)+satMul(t, d.k))})
	}
	return c
}

// ChooseConvAlgo picks from candidates: the fastest whose workspace is at
// most limit (CudnnLimitedWorkspace) or the fastest overall (CudnnFastest);
// ties go to the smaller workspace, then to the earlier candidate. ok is
// false for CudnnOff or no candidates.
func ChooseConvAlgo(cands []ConvAlgo, tune CudnnTune, limit int64) (ConvAlgo, bool) {
	if tune == CudnnOff || len(cands) == 0 {
		return ConvAlgo{}, false
	}
	best := -1
	for i, a := range cands {
		if tune == CudnnLimitedWorkspace && a.Workspace > limit {
			continue
		}
		if best < 0 || a.TimeFactor < cands[best].TimeFactor ||
			(a.TimeFactor == cands[best].TimeFactor && a.Workspace < cands[best].Workspace) {
			best = i
		}
	}
	if best < 0 {
		return ConvAlgo{}, false
	}
	return cands[best], true
}

// opTune resolves the cudnn_tune policy and workspace limit of one op: the
// op's attributes override the global values.
func opTune(op *graph.Op, global CudnnTune, limit int64) (CudnnTune, int64, error) {
	tune := global
	if v, ok := op.Attrs[graph.AttrCudnnTune]; ok {
		t, err := ParseCudnnTune(v)
		if err != nil {
			return 0, 0, fmt.Errorf("op #%d %q (%s): attribute %s: %w", op.ID, op.Name, op.Type, graph.AttrCudnnTune, err)
		}
		tune = t
	}
	if v, ok := op.Attrs[AttrConvWorkspace]; ok {
		mb, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || mb < 0 || mb > 1<<40 {
			return 0, 0, fmt.Errorf("op #%d %q (%s): attribute %s is %q, expected a workspace limit in MB (integer >= 0)", op.ID, op.Name, op.Type, AttrConvWorkspace, v)
		}
		limit = mb << 20
	}
	return tune, limit, nil
}

// TempSlots returns how many op workspaces may be alive at once:
// min(numTemp, workers), each taken as 1 when below 1.
func TempSlots(numTemp, workers int) int {
	if numTemp < 1 {
		numTemp = 1
	}
	if workers < 1 {
		workers = 1
	}
	return min(numTemp, workers)
}

// DefaultCPUThreads is the thread count CPUConvWorkspace assumes for
// PyTorch's CPU kernels when none is given: the setting cpu.threads'
// default, and the count the fidelity tables are measured with.
const DefaultCPUThreads = 2

// ConvLibrary selects whose convolution kernels the Machine models the
// temporary memory of.
type ConvLibrary uint8

const (
	// ConvCuDNN (the default) models cuDNN: a convolution's workspace is
	// that of the algorithm CudnnTune chooses (see ConvCandidates), or the
	// op's Workspace field with CudnnOff.
	ConvCuDNN ConvLibrary = iota
	// ConvOneDNN models PyTorch's CPU convolutions: oneDNN (mkldnn)
	// reorder buffers, or slow_conv2d's im2col columns where PyTorch does
	// not use oneDNN (see CPUConvWorkspace). CudnnTune does not apply.
	ConvOneDNN
)

var convLibNames = [...]string{"cudnn", "onednn"}

// Valid reports whether l is a defined library.
func (l ConvLibrary) Valid() bool { return l <= ConvOneDNN }

// String returns "cudnn" or "onednn".
func (l ConvLibrary) String() string {
	if !l.Valid() {
		return fmt.Sprintf("conv_library(%d)", uint8(l))
	}
	return convLibNames[l]
}

// ParseConvLibrary parses "cudnn" or "onednn" ("mkldnn" is accepted for
// the latter, PyTorch's name for it).
func ParseConvLibrary(s string) (ConvLibrary, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "cudnn":
		return ConvCuDNN, nil
	case "onednn", "mkldnn":
		return ConvOneDNN, nil
	}
	return 0, fmt.Errorf("convolution library %q: expected cudnn or onednn", s)
}

// oneDNNBlock is the channel block of oneDNN's blocked activation and
// weight layouts on AVX-512 CPUs (nChw16c, OIhw16i16o): a reordered
// tensor's channel dimensions are padded to a multiple of it (a 1000-channel
// gradient reorders into 1008 channels).
const oneDNNBlock = 16

func roundUp(v, m int64) int64 { return (v + m - 1) / m * m }

// CPUConvWorkspace returns the temporary memory PyTorch 1.13's CPU
// convolution allocates beyond its outputs, for a 2-D convolution (conv2d
// or the exporter's convolution) or its backward (a type starting with
// "conv2d_" or "convolution_" whose forward op is the convolution); 0 for
// other ops or unknown shapes. It is the largest number of bytes the kernel
// holds at once, minus the op's outputs (the Machine allocates the outputs
// and then the workspace when the op starts).
//
// PyTorch runs a float convolution through oneDNN (ConvParams::use_mkldnn)
// unless the batch is 1, the kernel at most 3x3, the group count 1 and the
// input at most 20480 elements, or, with a single thread, the convolution
// is an unstrided 1x1 one of a batch below 16. oneDNN computes in blocked
// layouts, so the dense NCHW tensors are reordered into temporary buffers
// with channels padded to a multiple of 16 (b() below), measured with the
// profiler's allocation events inside aten::convolution_backward
// (tools/peak_events.py):
//
//	forward:       x_r + w_r + y_b, then y_b + y       (y_b copied into the dense output y)
//	backward data: gy_r + w_r + gx_b, then gx_b + gx
//	backward weights (after gx): gx + gy_r + x_r + gw_b + gb, then gx + gw_b + gb + gb' + gw
//
// with x_r = N*b(C)*H*W, w_r = gw_b = b(K)*b(C/G)*R*S (the exact weight size
// with groups), y_b = gy_r = N*b(K)*P*Q, times the element size. An input
// of at most 3 channels (a network's first convolution) is read in its
// plain layout (no x_r) with a plain weight. A grouped convolution with 2
// to 7 channels per group (ResNeXt's 32x4d) computes its weight gradient
// without the gy_r and x_r reorders. Not modelled: oneDNN's
// per-thread reduction buffer of the weight gradient (up to one more weight
// copy, depending on how oneDNN splits the work among threads).
//
// Without oneDNN, PyTorch's slow_conv2d unfolds the input into columns of
// C*R*S x P*Q elements (per batch element, the batch being 1 there) in the
// forward and in the backward; a 1x1 convolution with stride 1 and no
// padding reads the input as its columns.
//
// A 1-D convolution (3-D input, weight and output) is the 2-D one PyTorch
// runs it as: its input viewed as N x C x 1 x L.
//
// A depthwise convolution (one input channel per group) whose kernel is at
// least 4 wide computes its weight gradient on the plain layouts (no gy_r,
// x_r) with a scratch buffer per thread: gx + gw_b + scratch + gb, where
// scratch = threads * (4 * weight + e*R*S*P*Q) + 256 bytes (profiler, f32,
// 1 and 2 threads, 16 to 672 channels, kernels 3x5 to 11x11, strides 1
// and 2, channel multipliers 1 and 2: exact). threads is PyTorch's
// intra-op thread count (setting cpu.threads); 0 means DefaultCPUThreads.
func CPUConvWorkspace(g *graph.Graph, op *graph.Op, threads int) int64 {
	if g == nil || op == nil {
		return 0
	}
	if threads <= 0 {
		threads = DefaultCPUThreads
	}
	d, ok := convDims(g, op, true)
	if !ok {
		return 0
	}
	fwd, _ := isConvType(op.Type)
	var outBytes int64
	for _, t := range op.Outputs {
		if tt := g.Tensor(t); tt != nil {
			outBytes = satAdd(outBytes, tt.Bytes)
		}
	}
	e := d.elem
	groups := int64(1)
	if d.cg > 0 && d.c%d.cg == 0 {
		groups = d.c / d.cg
	}
	kvol := satMul(d.r, d.s)
	mkldnn := groups > 1 || (d.r > 3 && d.s > 3) || d.n > 1 || satMul(d.n, d.c, d.h, d.w) > 20480
	if threads == 1 && d.r == 1 && d.s == 1 && d.n < 16 && d.p == d.h && d.q == d.w && !padded(forwardOf(g, op)) {
		// One thread: PyTorch runs an unstrided 1x1 convolution of a batch
		// below 16 with slow_conv2d (faster single-threaded).
		mkldnn = false
	}
	if !mkldnn {
		f := forwardOf(g, op)
		if d.r == 1 && d.s == 1 && d.p == d.h && d.q == d.w && !padded(f) {
			return 0
		}
		return satMul(e, d.c, kvol, d.p, d.q)
	}
	b := func(c int64) int64 { return roundUp(c, oneDNNBlock) }
	xr := satMul(e, d.n, b(d.c), d.h, d.w)
	yb := satMul(e, d.n, b(d.k), d.p, d.q)
	wr := satMul(e, b(d.k), b(d.cg), kvol)
	if groups > 1 {
		wr = satMul(e, d.k, d.cg, kvol)
	}
	first := d.c <= 3
	var peak int64
	if fwd {
		xf, wf := xr, wr
		if first {
			xf, wf = 0, satMul(e, d.k, d.cg, kvol)
		}
		peak = max(satAdd(satAdd(xf, wf), yb), satAdd(yb, outBytes))
		return max(peak-outBytes, 0)
	}
	// Which gradients the backward op returns, by shape.
	var gx, gw, gb int64
	xs := []int64{d.n, d.c, d.h, d.w}
	ws := []int64{d.k, d.cg, d.r, d.s}
	if d.oneD {
		xs, ws = []int64{d.n, d.c, d.w}, []int64{d.k, d.cg, d.s}
	}
	for _, t := range op.Outputs {
		tt := g.Tensor(t)
		switch {
		case tt == nil:
		case tt.Shape.Equal(xs):
			gx = tt.Bytes
		case tt.Shape.Equal(ws):
			gw = tt.Bytes
		case len(tt.Shape) == 1 && tt.Shape[0] == d.k:
			gb = tt.Bytes
		}
	}
	if gx > 0 {
		gxb := satMul(e, d.n, b(d.c), d.h, d.w)
		peak = max(satAdd(satAdd(yb, wr), gxb), satAdd(gxb, gx))
	}
	if gw > 0 || gb > 0 {
		xw, gyw, gwb := xr, yb, wr
		if first {
			xw, gwb = 0, satMul(e, d.k, d.cg, kvol)
		}
		if groups > 1 && d.cg > 1 && d.cg < 8 {
			// Fewer than 8 channels per group: oneDNN computes the weight
			// gradient with its GEMM-based kernel on the plain layouts, no
			// reorders (its im2col scratch is not modelled).
			xw, gyw = 0, 0
		}
		var scratch int64
		if groups > 1 && d.cg == 1 && d.s >= 4 {
			// depthwise, kernel at least 4 wide: per-thread scratch
			xw, gyw = 0, 0
			scratch = satAdd(satMul(int64(threads), satAdd(satMul(4, wr), satMul(e, kvol, d.p, d.q))), 256)
		}
		c1 := satAdd(satAdd(satAdd(gx, gyw), satAdd(xw, gwb)), satAdd(gb, scratch))
		c2 := satAdd(satAdd(gx, gwb), satAdd(satAdd(gb, gb), gw))
		peak = max(peak, c1, c2)
	}
	return max(peak-outBytes, 0)
}

// CPUWorkspace returns the temporary memory PyTorch 1.13's CPU kernel of op
// allocates beyond its outputs: CPUConvWorkspace for convolutions, plus, for
// the backward kernels that make their output gradient contiguous first
// (convolution_backward and embedding_dense_backward call
// grad.contiguous()), a copy of that gradient when it reaches them as a
// strided view (see StridedGradient): the gradient of a transposed or
// concatenated activation, as a ViT's patch embedding or a batch-first
// LSTM's embedding receives.
func CPUWorkspace(g *graph.Graph, op *graph.Op, threads int) int64 {
	if g == nil || op == nil {
		return 0
	}
	ws := CPUConvWorkspace(g, op, threads)
	if op.Type == "native_batch_norm_backward" && len(op.Inputs) > 0 {
		// The CPU kernel allocates a temporary of its input's size after
		// its outputs and frees it before returning (profiler, batch 4, 64
		// channels, 32x32: +1048576, +256, +256, +1048576, -1048576 bytes).
		if t := g.Tensor(op.Inputs[0]); t != nil {
			ws = satAdd(ws, t.Bytes)
		}
	}
	f := forwardOf(g, op)
	if f == nil || f == op {
		return ws
	}
	if fwd, _ := isConvType(f.Type); !fwd && f.Type != graph.OpEmbedding {
		return ws
	}
	if len(f.Outputs) == 0 {
		return ws
	}
	y := g.Tensor(f.Outputs[0])
	for _, in := range op.Inputs {
		t := g.Tensor(in)
		if t == nil || t.Kind != graph.Gradient || y == nil || !t.Shape.Equal(y.Shape) {
			continue
		}
		if StridedGradient(g, in) {
			ws = satAdd(ws, t.Bytes)
		}
		break
	}
	return ws
}

// StridedGradient reports whether gradient t is a non-contiguous view:
// somewhere along its chain of views is the gradient of a transpose that
// moves a dimension larger than 1, or a part of the gradient of a
// concatenation along a dimension with a larger-than-1 dimension outside it
// (graph.Differentiate makes both views of the incoming gradient, as
// autograd does).
func StridedGradient(g *graph.Graph, t graph.TensorID) bool {
	for hops := 0; hops < 1<<10; hops++ {
		tt := g.Tensor(t)
		if tt == nil || tt.AliasOf == graph.NoTensor {
			return false
		}
		p := g.Op(tt.Producer)
		if p == nil {
			return false
		}
		if f := g.Op(p.Forward); f != nil && f != p && len(f.Inputs) > 0 {
			switch f.Type {
			case graph.OpTranspose:
				if x := g.Tensor(f.Inputs[0]); x != nil && permutesNonUnit(f.Attrs["perm"], x.Shape) {
					return true
				}
			case graph.OpConcat:
				d, err := strconv.Atoi(f.Attrs["dim"])
				if len(f.Inputs) > 1 && err == nil && d > 0 && d <= len(tt.Shape) && satMul(tt.Shape[:d]...) > 1 {
					return true
				}
			}
		}
		// Step to the view's source: the producer's input sharing its
		// storage (AliasOf names the root storage, not the source).
		next := graph.NoTensor
		for _, in := range p.Inputs {
			if in != t && g.StorageOf(in) == g.StorageOf(t) {
				next = in
				break
			}
		}
		if next == graph.NoTensor {
			return false
		}
		t = next
	}
	return false
}

// permutesNonUnit reports whether a permutation ("0,2,1") of shape reorders
// two dimensions larger than 1 (the transposed view is then not
// contiguous). An unreadable permutation counts as reordering.
func permutesNonUnit(perm string, shape graph.Shape) bool {
	last := -1
	for _, f := range strings.Split(perm, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || p < 0 || p >= len(shape) {
			return true
		}
		if shape[p] == 1 {
			continue
		}
		if p < last {
			return true
		}
		last = p
	}
	return false
}

// forwardOf returns op itself for a forward convolution, else its forward
// op (nil if none).
func forwardOf(g *graph.Graph, op *graph.Op) *graph.Op {
	if fwd, _ := isConvType(op.Type); fwd {
		return op
	}
	return g.Op(op.Forward)
}

// padded reports whether a convolution op has non-zero padding attributes.
func padded(op *graph.Op) bool {
	if op == nil {
		return false
	}
	for _, k := range []string{"padding", "pads"} {
		for _, p := range strings.Split(op.Attrs[k], ",") {
			if v := strings.TrimSpace(p); v != "" && v != "0" {
				return true
			}
		}
	}
	return false
}
