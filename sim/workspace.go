package sim

import (
	"fmt"
	"math/bits"
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
	// A 3-D convolution has its depths (input dd, kernel kd, output pd)
	// folded into the heights: h = dd*H, r = kd*R, p = pd*P, so that every
	// product of the 2-D model counts the volumes.
	threeD     bool
	dd, kd, pd int64
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
// a convolution or the shapes are unknown. With cpuRanks, a 1-D convolution
// (3-D input, weight and output) is read as the 2-D one PyTorch's CPU runs
// it as (its input viewed as N x C x 1 x L), and a 3-D one (5-D tensors)
// with its depths folded into the heights (convShapes.threeD).
func convDims(g *graph.Graph, op *graph.Op, cpuRanks bool) (convShapes, bool) {
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
	case cpuRanks && len(x.Shape) == 3 && len(w.Shape) == 3 && len(y.Shape) == 3:
		d = convShapes{n: x.Shape[0], c: x.Shape[1], h: 1, w: x.Shape[2],
			k: w.Shape[0], cg: w.Shape[1], r: 1, s: w.Shape[2],
			p: 1, q: y.Shape[2], elem: x.DType.Size(), oneD: true}
	case cpuRanks && len(x.Shape) == 5 && len(w.Shape) == 5 && len(y.Shape) == 5:
		// the folded factors, checked before they are multiplied
		for _, v := range [...]int64{x.Shape[2], x.Shape[3], w.Shape[2], w.Shape[3], y.Shape[2], y.Shape[3]} {
			if v <= 0 || v > 1<<20 {
				return convShapes{}, false
			}
		}
		d = convShapes{n: x.Shape[0], c: x.Shape[1], h: satMul(x.Shape[2], x.Shape[3]), w: x.Shape[4],
			k: w.Shape[0], cg: w.Shape[1], r: satMul(w.Shape[2], w.Shape[3]), s: w.Shape[4],
			p: satMul(y.Shape[2], y.Shape[3]), q: y.Shape[4], elem: x.DType.Size(),
			threeD: true, dd: x.Shape[2], kd: w.Shape[2], pd: y.Shape[2]}
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

// convAlgoNames are the names appendConvAlgos gives, after "" (none): a
// Machine keeps each op's choice as an index in it.
var convAlgoNames = [...]string{"", "implicit_gemm", "implicit_precomp_gemm", "gemm", "fft", "winograd", "winograd_nonfused"}

// convAlgoCode returns name's index in convAlgoNames (0 for a name not in
// it).
func convAlgoCode(name string) uint8 {
	for i, n := range convAlgoNames {
		if n == name {
			return uint8(i)
		}
	}
	return 0
}

// convMemo remembers the shapes of each forward convolution of one graph, so
// that pricing its two gradient ops does not read the forward op and its
// tensors again (far apart in a large graph: a cache miss each).
type convMemo struct {
	at   []int32 // per op: 0 not seen, -1 not a convolution, else 1 + index in dims
	dims []convShapes
	// kind decides isConvType once per op type of g's dense index: 0 not
	// yet, 1 not a convolution, 2 a gradient, 3 a forward convolution.
	d    *graph.Dense
	kind []int8
}

// of returns convDims(g, &g.Ops[i], false), remembered by forward op.
func (c *convMemo) of(g *graph.Graph, i int) (convShapes, bool) {
	op := &g.Ops[i]
	if c.d == nil {
		c.d = g.Dense()
		c.kind = make([]int8, len(c.d.Types))
	}
	k := &c.kind[c.d.Type[i]]
	if *k == 0 {
		f, a := isConvType(op.Type)
		*k = 1
		if a {
			*k = 2
		}
		if f {
			*k = 3
		}
	}
	fwd, any := *k == 3, *k >= 2
	if !any {
		return convShapes{}, false
	}
	f := graph.OpID(i)
	if !fwd {
		if f = op.Forward; f < 0 || int(f) >= len(g.Ops) {
			return convShapes{}, false
		}
	}
	if c.at == nil {
		c.at = make([]int32, len(g.Ops))
	}
	switch k := c.at[f]; {
	case k < 0:
		return convShapes{}, false
	case k > 0:
		return c.dims[k-1], true
	}
	d, ok := convDims(g, op, false)
	if !ok {
		c.at[f] = -1
		return convShapes{}, false
	}
	c.dims = append(c.dims, d)
	c.at[f] = int32(len(c.dims))
	return d, true
}

// satMul multiplies non-negative factors, saturating at 1<<62 (a negative
// factor saturates too). The overflow test is a 128-bit product, not a
// division per factor: NewMachine sizes every convolution's candidates
// with it.
func satMul(f ...int64) int64 {
	const lim = int64(1) << 62
	r := int64(1)
	for _, v := range f {
		if v < 0 {
			return lim
		}
		hi, lo := bits.Mul64(uint64(r), uint64(v))
		if hi != 0 || lo > uint64(lim) {
			return lim
		}
		r = int64(lo)
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
	return appendConvAlgos(c, d)
}

// appendConvAlgos appends the candidates of a convolution of shapes d.
func appendConvAlgos(c []ConvAlgo, d convShapes) []ConvAlgo {
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

// CPUISA is the vector instruction set oneDNN's convolution kernels use,
// which sets their channel block: a reordered tensor's channel dimensions
// are padded to a multiple of the vector width in floats (16 with AVX-512,
// nChw16c and OIhw16i16o: a 1000-channel gradient reorders into 1008
// channels; 8 with AVX2).
type CPUISA uint8

const (
	// ISAAVX512 (the default) is AVX-512 (oneDNN's avx512_core): 16-float
	// blocks.
	ISAAVX512 CPUISA = iota
	// ISAAVX2 is AVX2: 8-float blocks.
	ISAAVX2
)

var isaNames = [...]string{"avx512", "avx2"}

// Valid reports whether isa is a defined instruction set.
func (isa CPUISA) Valid() bool { return isa <= ISAAVX2 }

// String returns "avx512" or "avx2".
func (isa CPUISA) String() string {
	if !isa.Valid() {
		return fmt.Sprintf("cpu_isa(%d)", uint8(isa))
	}
	return isaNames[isa]
}

// Block returns the channel block (the vector width in floats): 16 for
// AVX-512, 8 for AVX2.
func (isa CPUISA) Block() int64 {
	if isa == ISAAVX2 {
		return 8
	}
	return 16
}

// ParseCPUISA parses "avx512" (or oneDNN's name for it, "avx512_core") or
// "avx2", case-insensitively.
func ParseCPUISA(s string) (CPUISA, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "avx2":
		return ISAAVX2, nil
	case "avx512", "avx512_core":
		return ISAAVX512, nil
	}
	return 0, fmt.Errorf("CPU instruction set %q: expected avx512 or avx2", s)
}

// CPU describes the CPU PyTorch's kernels run on, for ConvOneDNN's buffers.
// The zero value is DefaultCPUThreads threads on AVX-512.
type CPU struct {
	// Threads is PyTorch's intra-op thread count (torch.set_num_threads;
	// setting cpu.threads); 0 means DefaultCPUThreads.
	Threads int
	// ISA is the instruction set oneDNN runs with (setting cpu.isa).
	ISA CPUISA
	// ChannelsLast runs the convolutions of a graph that does not record
	// memory formats (no memory_format attribute: an ONNX import, a zoo
	// model) channels-last, with channels-last weights and inputs, as a
	// model moved with model.to(memory_format=torch.channels_last) (setting
	// conv.memory_format).
	ChannelsLast bool
}

// relaid reports whether op's layout attribute key (input_format,
// weight_format, grad_format) names a layout other than want: the kernel
// then copies that operand into want first. A graph without the attribute
// says nothing (false).
func relaid(op *graph.Op, key, want string) bool {
	v, ok := op.Attrs[key]
	return ok && v != want
}

// convLayout returns whether forward convolution f runs channels-last and
// whether its weight is channels-last: its attributes say, or cpu's
// default for a graph that does not record them.
func convLayout(f *graph.Op, cpu CPU) (cl, weightCL bool) {
	if f == nil {
		return false, false
	}
	mf, ok := f.Attrs[graph.AttrMemoryFormat]
	if !ok {
		return cpu.ChannelsLast, cpu.ChannelsLast
	}
	return mf == graph.ChannelsLast, f.Attrs[graph.AttrWeightFormat] == graph.ChannelsLast
}

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
// with groups), y_b = gy_r = N*b(K)*P*Q, times the element size. The
// forward reads an input of fewer channels than a block (one group; a
// network's first convolution) in its plain layout (no x_r) with a plain
// weight; the weight gradient does so for at most 3 channels (AVX2:
// exactly 3), and otherwise pads up to 8 channels to 8, not to the block
// (profiler, 1 to 16 input channels). Not modelled: oneDNN's
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
// oneDNN computes the weight gradient with its GEMM-based kernel on the
// plain layouts (no gy_r, x_r) and a scratch buffer per thread, gx + w +
// scratch + gb with scratch = threads * (4 * weight + e*(C/G)*R*S*P*Q) +
// 256 bytes, for a depthwise convolution (one input channel per group)
// that its depthwise kernel does not take (dwKernelFits: a kernel at least
// 4 wide, or an input too small to hold the kernel, as a 3x3 kernel on a
// 2x2 image; profiler, f32, 1 and 2 threads, 16 to 672 channels, kernels
// 3x3 to 11x11, images 1x1 to 32x32, strides 1 and 2, channel multipliers
// 1 and 2, dilations 1 to 4: exact), for 2 to 7 channels per group, and
// for a dense convolution its blocked kernel refuses (gemmWeightGrad: a
// dilated one on a small image; with AVX2 any dilated one, or an image
// lower than the kernel). threads is PyTorch's intra-op thread count
// (cpu.Threads).
//
// A convolution PyTorch runs on channels-last tensors (its forward op has
// the attribute memory_format=channels_last, which remat_torch.trace
// writes; ConvNeXt's are, after its blocks' permutes) reads and writes the
// activations in place, without reorders (cpuChannelsLast).
//
// The channel block is the vector width of cpu.ISA (16 floats with
// AVX-512, 8 with AVX2).
func CPUConvWorkspace(g *graph.Graph, op *graph.Op, cpu CPU) int64 {
	if g == nil || op == nil {
		return 0
	}
	if f := transposedForward(g, op); f != nil {
		return cpuConvTranspose(g, op, f, cpu)
	}
	threads := cpu.Threads
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
	blk := cpu.ISA.Block()
	b := func(c int64) int64 { return roundUp(c, blk) }
	if cl, weightCL := convLayout(forwardOf(g, op), cpu); cl {
		return cpuChannelsLast(g, op, d, fwd, groups, weightCL, threads, cpu.ISA)
	}
	xr := satMul(e, d.n, b(d.c), d.h, d.w)
	yb := satMul(e, d.n, b(d.k), d.p, d.q)
	wr := satMul(e, b(d.k), b(d.cg), kvol)
	if groups > 1 {
		wr = satMul(e, d.k, d.cg, kvol)
	}
	// oneDNN's kernel for a first convolution reads the input in its plain
	// layout with a plain weight: in the forward, for fewer input channels
	// than a block (one group); in the weight gradient for at most 3 (AVX2:
	// exactly 3), which otherwise reorders the input and weight gradient
	// with channels padded to 8 up to 8 channels.
	fwdPlain := d.c <= 3 || groups == 1 && d.c < blk
	bwdPlain := d.c == 3 || d.c < 3 && cpu.ISA == ISAAVX512
	bw := func(c int64) int64 {
		if c <= 8 {
			return roundUp(c, 8)
		}
		return b(c)
	}
	var peak int64
	if fwd {
		xf, wf := xr, wr
		if fwdPlain {
			xf, wf = 0, satMul(e, d.k, d.cg, kvol)
		}
		peak = max(satAdd(satAdd(xf, wf), yb), satAdd(yb, outBytes))
		return max(peak-outBytes, 0)
	}
	gx, gw, gb := convGrads(g, op, d)
	if gx > 0 {
		gxb := satMul(e, d.n, b(d.c), d.h, d.w)
		peak = max(satAdd(satAdd(yb, wr), gxb), satAdd(gxb, gx))
	}
	if gw > 0 || gb > 0 {
		xw, gyw, gwb := satMul(e, d.n, bw(d.c), d.h, d.w), yb, wr
		if groups == 1 {
			gwb = satMul(e, b(d.k), bw(d.cg), kvol)
		}
		if bwdPlain {
			xw, gwb = 0, satMul(e, d.k, d.cg, kvol)
		}
		var scratch int64
		geo := geometry(forwardOf(g, op), d)
		if groups > 1 && d.cg > 1 && d.cg < 8 || // fewer than 8 channels per group
			groups > 1 && d.cg == 1 && !dwKernelFits(d, geo) || // depthwise, not for the depthwise kernel
			groups == 1 && gemmWeightGrad(d, geo, cpu.ISA) {
			// oneDNN's GEMM-based weight gradient on the plain layouts:
			// no reorders, a scratch per thread
			w := satMul(e, d.k, d.cg, kvol)
			xw, gyw, gwb = 0, 0, w
			p := d.p
			if d.threeD {
				p /= d.pd // its columns hold one output frame
			}
			// a 2-D one splits the work over the threads by sample:
			// min(threads, N) scratches (profiler, patch embeddings at
			// batch 1, 2 and 4 with 1 and 2 threads; FCN's dilated
			// convolutions at batch 1); a 3-D one keeps one per thread
			// (r3d_18 at batch 1)
			scratches := int64(threads)
			if !d.threeD {
				scratches = min(scratches, max(d.n, 1))
			}
			scratch = satAdd(satMul(scratches, satAdd(satMul(4, w), satMul(e, d.cg, kvol, p, d.q))), 256)
		}
		c1 := satAdd(satAdd(satAdd(gx, gyw), satAdd(xw, gwb)), satAdd(gb, scratch))
		c2 := satAdd(satAdd(gx, gwb), satAdd(satAdd(gb, gb), gw))
		peak = max(peak, c1, c2)
	}
	return max(peak-outBytes, 0)
}

// transposedForward returns the transposed convolution op is or
// differentiates (conv_transpose2d, or a traced convolution with
// transposed=1), or nil.
func transposedForward(g *graph.Graph, op *graph.Op) *graph.Op {
	is := func(o *graph.Op) bool {
		return o != nil && (o.Type == graph.OpConvTranspose2d || o.Attrs[graph.AttrTransposed] == "1" && o.Type == "convolution")
	}
	if is(op) {
		return op
	}
	if f := g.Op(op.Forward); f != op && is(f) {
		return f
	}
	return nil
}

// cpuConvTranspose is CPUConvWorkspace for a transposed convolution f
// (forward op) or its backward op: PyTorch 1.13's CPU runs it with
// slow_conv_transpose2d, whose im2col columns hold C_out*R*S x H*W
// elements (one sample at a time; H x W the input's image), in the forward
// with a row of ones of the output's P*Q elements when it has a bias, and
// in the backward (profiler, 4x4 kernels, strides 1 and 2, 3 to 128
// channels, 1x1 to 16x16 inputs: exact). The kernel wants contiguous
// tensors: an input or weight not contiguous (attributes input_format and
// weight_format: a model moved to channels-last) is copied in the forward
// and again in the backward, a gradient not contiguous (grad_format) in
// the backward (profiler, 64 to 16 channels 3x3 on 4x4 channels-last:
// +x 16384 +w 36864 +y +cols 9216 +196 ...).
func cpuConvTranspose(g *graph.Graph, op, f *graph.Op, cpu CPU) int64 {
	if len(f.Inputs) < 2 || len(f.Outputs) < 1 {
		return 0
	}
	x, w, y := g.Tensor(f.Inputs[0]), g.Tensor(f.Inputs[1]), g.Tensor(f.Outputs[0])
	if x == nil || w == nil || y == nil || len(x.Shape) != 4 || len(w.Shape) != 4 || len(y.Shape) != 4 {
		return 0
	}
	for _, v := range []int64{x.Shape[2], x.Shape[3], w.Shape[2], w.Shape[3], y.Shape[1], y.Shape[2], y.Shape[3]} {
		if v <= 0 || v > 1<<20 {
			return 0
		}
	}
	e := x.DType.Size()
	if e == 0 {
		e = 4
	}
	cols := satMul(e, y.Shape[1], w.Shape[2], w.Shape[3], x.Shape[2], x.Shape[3])
	ws := cols
	if relaid(f, graph.AttrInputFormat, graph.Contiguous) {
		ws = satAdd(ws, x.Bytes)
	}
	if relaid(f, graph.AttrWeightFormat, graph.Contiguous) {
		ws = satAdd(ws, w.Bytes)
	}
	if op == f {
		if len(f.Inputs) > 2 {
			ws = satAdd(ws, satMul(e, y.Shape[2], y.Shape[3])) // the bias's ones
		}
	} else if relaid(op, graph.AttrGradFormat, graph.Contiguous) {
		ws = satAdd(ws, y.Bytes)
	}
	return ws
}

// convGrads returns the bytes of the gradients a convolution's backward op
// returns, told apart by shape: of the input, the weight and the bias (0
// for those it does not return).
func convGrads(g *graph.Graph, op *graph.Op, d convShapes) (gx, gw, gb int64) {
	xs := []int64{d.n, d.c, d.h, d.w}
	ws := []int64{d.k, d.cg, d.r, d.s}
	switch {
	case d.oneD:
		xs, ws = []int64{d.n, d.c, d.w}, []int64{d.k, d.cg, d.s}
	case d.threeD:
		xs, ws = []int64{d.n, d.c, d.dd, d.h / d.dd, d.w}, []int64{d.k, d.cg, d.kd, d.r / d.kd, d.s}
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
	return gx, gw, gb
}

// cpuChannelsLast is CPUConvWorkspace for a oneDNN convolution on
// channels-last tensors. oneDNN reads and writes the activations as they
// are (no x_r, y_b, gy_r or gx_b), so the temporaries are the weight's
// (profiler allocation events inside aten::convolution and
// aten::convolution_backward, f32, 1 and 2 threads, AVX-512 and AVX2 via
// ONEDNN_MAX_CPU_ISA; dense, grouped and depthwise convolutions of 16 to
// 384 channels, kernels 1x1 to 11x11, strides 1 and 2, batches 1 to 8):
//
//	forward:  y + w_cl + s_f + w_r
//	backward: gx + w_cl + max(w_r, gw_b + max(red + gb, 2*gb + 2*gw))
//
// w_cl is a channels-last copy of the weight, made when the weight of
// shape K x C/G x R x S is not channels-last (C/G > 1 and R*S > 1, and the
// forward op lacks weight_format=channels_last: a model moved to
// channels-last has channels-last weights).
// w_r is the weight reordered for oneDNN: b(K) x C/G x R x S for a dense
// convolution, b(C) x R x S for a depthwise one, the weight itself for a
// grouped one, or with AVX-512 and fewer than 4 channels per group (or a
// depthwise channel multiplier above 1) gw_b's blocked layout below. s_f
// is AVX-512's forward scratch: 4096*(threads+1) bytes for a dense
// convolution, 4096*threads + 128 for an undilated depthwise one (none
// with AVX2, none for grouped ones; AVX2's grouped kernel keeps a scratch
// that is not modelled). gw_b is the weight gradient in oneDNN's blocked
// layout, each group's K/G and C/G padded to the block:
// G * b(K/G) * b(C/G) * R * S elements, which makes a depthwise
// convolution's block*block times its weight (4.8 MB for ConvNeXt's 96
// channels at 7x7 on AVX-512, whatever the batch and image). oneDNN's
// depthwise kernel, which takes a kernel at most 3 wide on an input that
// holds it (dwKernelFits: not MobileNet's 3x3 convolutions on its last
// 2x2 images), uses the weight instead.
// red is a bias reduction buffer of block*G elements + 128 bytes (grouped
// and depthwise convolutions). The weight gradient is computed into a
// temporary of its size (the second gw) and copied out. oneDNN's blocked
// kernel does not take what gemmWeightGrad and dwGEMMChannelsLast list
// (dilated convolutions on small images, AVX2's dilated ones and images
// lower than the kernel: ConvNeXt's 7x7 kernels on its last stages' 2x2
// and 4x4 images, ResNet's 3x3 ones on 2x2 images; an undilated depthwise
// one of a 1x1 image with AVX-512); its GEMM-based kernel then uses the
// weight for gw_b and buffers red of threads * (4*weight +
// e*(C/G)*R*S*P*Q + e*(K/G)*P*Q) + 384 bytes (within 512 bytes). A dilated
// depthwise convolution whose image holds its top padding reorders its
// weight into the blocked layout for the data gradient too (w_r = the
// blocked gw_b), and its forward has no s_f. Not modelled: AVX2's
// reduction buffer of about threads weights of a 1x1 convolution on small
// images.
func cpuChannelsLast(g *graph.Graph, op *graph.Op, d convShapes, fwd bool, groups int64, weightCL bool, threads int, isa CPUISA) int64 {
	e, blk := d.elem, isa.Block()
	b := func(c int64) int64 { return roundUp(c, blk) }
	kvol := satMul(d.r, d.s)
	w := satMul(e, d.k, d.cg, kvol)
	kg := d.k / groups
	depthwise := groups > 1 && d.cg == 1
	var wcl int64
	if d.cg > 1 && kvol > 1 && !weightCL {
		wcl = w
	}
	if fwd {
		var wr, sf int64
		switch {
		case groups == 1:
			wr = satMul(e, b(d.k), d.cg, kvol)
			if isa == ISAAVX512 {
				sf = satMul(4096, int64(threads)+1)
			}
		case depthwise && kg == 1:
			wr = satMul(e, b(d.k), kvol)
			if geo := geometry(forwardOf(g, op), d); isa == ISAAVX512 && geo.dh == 1 && geo.dw == 1 {
				// (none when dilated)
				sf = satAdd(satMul(4096, int64(threads)), 128)
			}
		case isa == ISAAVX512 && d.cg < 4:
			// few channels per group (or a channel multiplier): the
			// blocked grouped kernel, its weight padded per group
			wr = satMul(e, groups, b(kg), b(d.cg), kvol)
		default:
			wr = w
		}
		return satAdd(satAdd(wcl, sf), wr)
	}
	_, gw, gb := convGrads(g, op, d)
	blocked := satMul(e, groups, b(kg), b(d.cg), kvol)
	gwb := blocked
	geo := geometry(forwardOf(g, op), d)
	var red int64
	switch {
	case depthwise && dwKernelFits(d, geo):
		gwb = w
	case depthwise && dwGEMMChannelsLast(d, geo, isa) || !depthwise && gemmWeightGrad(d, geo, isa):
		// oneDNN's blocked kernel does not take this input: its
		// GEMM-based one keeps buffers per thread.
		gwb = w
		perThread := satAdd(satAdd(satMul(4, w), satMul(e, d.cg, kvol, d.p, d.q)), satMul(e, kg, d.p, d.q))
		red = satAdd(satMul(int64(threads), perThread), 384)
	case groups > 1:
		red = satAdd(satMul(e, blk, groups), 128)
	}
	wr := blocked
	if groups > 1 && !(depthwise && (geo.dh > 1 || geo.dw > 1) && geo.th <= d.h) {
		// a grouped convolution's data gradient reads the weight as it
		// is, except a dilated depthwise one whose image holds its top
		// padding: that reorders it into the blocked layout first
		wr = w
	}
	peak := wr
	if gw > 0 || gb > 0 {
		peak = max(peak, satAdd(gwb, max(satAdd(red, gb), satAdd(satMul(2, gb), satMul(2, gw)))))
	}
	return max(satAdd(wcl, peak)-gw-gb, 0)
}

// CPUWorkspace returns the temporary memory PyTorch 1.13's CPU kernel of op
// allocates beyond its outputs: CPUConvWorkspace for convolutions, the
// input's copy of a sum or mean into another dtype (a traced step's sum of
// a bool mask counts in int64), batch norm's backward temporary, plus, for
// the backward kernels that make their output gradient contiguous first
// (convolution_backward and embedding_dense_backward call
// grad.contiguous()), a copy of that gradient when it reaches them as a
// strided view (see StridedGradient): the gradient of a transposed or
// concatenated activation, as a ViT's patch embedding or a batch-first
// LSTM's embedding receives. A channels-last convolution's backward copies
// its gradient into channels-last layout instead. Where the trace recorded
// the gradient's layout (attribute grad_format), that decides. A
// convolution whose input is not laid out as it runs (attribute
// input_format: a contiguous input of a channels-last convolution, as
// ShuffleNet's channel shuffle leaves in a channels-last model, or a
// strided one) copies it, in the forward and again in the backward.
func CPUWorkspace(g *graph.Graph, op *graph.Op, cpu CPU) int64 {
	if g == nil || op == nil {
		return 0
	}
	ws := CPUConvWorkspace(g, op, cpu)
	f := forwardOf(g, op)
	if (op.Type == "sum" || op.Type == "mean") && len(op.Inputs) > 0 && len(op.Outputs) > 0 {
		// A reduction into another dtype (the int64 sum of a bool mask,
		// as max's and amax's backward counts ties; sum(dtype=...))
		// first copies its input into that dtype (profiler, a [4, 32,
		// 128] bool mask summed over its last dimension: +1024 (the
		// result), +131072, -131072 bytes).
		in, out := g.Tensor(op.Inputs[0]), g.Tensor(op.Outputs[0])
		if in != nil && out != nil && in.DType.Valid() && out.DType.Valid() && in.DType != out.DType {
			if n, err := in.Shape.NumElements(); err == nil {
				ws = satAdd(ws, satMul(n, out.DType.Size()))
			}
		}
	}
	if (op.Type == "native_batch_norm_backward" || op.Type == graph.BackwardType(graph.OpBatchNorm)) && len(op.Inputs) > 0 {
		// The CPU kernel allocates a temporary of its input's size after
		// its outputs and frees it before returning (profiler, batch 4, 64
		// channels, 32x32: +1048576, +256, +256, +1048576, -1048576 bytes),
		// for a contiguous or channels-last input; a strided one (a
		// BatchNorm1d over a transposed [N, L, C] sequence, as the trace's
		// input_format says) takes the generic path without it (profiler:
		// +65536 for the input gradient and the statistics' gradients only).
		// A batchnorm of a graph (an ONNX import, a zoo model) is PyTorch's
		// too; its first input is also the forward's input.
		if f == nil || f.Attrs[graph.AttrInputFormat] != graph.Strided {
			in := op.Inputs[0]
			if f != nil && len(f.Inputs) > 0 {
				in = f.Inputs[0]
			}
			if t := g.Tensor(in); t != nil {
				ws = satAdd(ws, t.Bytes)
			}
		}
	}
	if op.Type == "prelu_backward" && len(op.Inputs) > 0 {
		// The weight gradient is computed element-wise into an input-sized
		// temporary and summed (profiler, PReLU(32) on [2, 32, 8, 8]:
		// +16384 (grad_input), +128, +16384, +128 (grad_weight), -128,
		// -16384 bytes; PReLU() the same with 4 in place of 128). The
		// largest input is the input (or its gradient), the smallest the
		// weight.
		var big, small int64 = 0, -1
		for _, in := range op.Inputs {
			if t := g.Tensor(in); t != nil {
				big = max(big, t.Bytes)
				if small < 0 || t.Bytes < small {
					small = t.Bytes
				}
			}
		}
		ws = satAdd(ws, satAdd(big, max(small, 0)))
	}
	if f == nil {
		return ws
	}
	if fwd, _ := isConvType(f.Type); !fwd && f.Type != graph.OpEmbedding {
		return ws
	}
	if len(f.Outputs) == 0 {
		return ws
	}
	if transposedForward(g, op) != nil {
		return ws // cpuConvTranspose counted its copies
	}
	cl, _ := convLayout(f, cpu)
	layout := graph.Contiguous
	if cl {
		layout = graph.ChannelsLast
	}
	if len(f.Inputs) > 0 && relaid(f, graph.AttrInputFormat, layout) {
		// the forward copies an input not laid out as it runs
		// (input.contiguous(memory_format)), and the backward its saved
		// input again
		if x := g.Tensor(f.Inputs[0]); x != nil {
			ws = satAdd(ws, x.Bytes)
		}
	}
	if f == op {
		return ws
	}
	y := g.Tensor(f.Outputs[0])
	for _, in := range op.Inputs {
		t := g.Tensor(in)
		if t == nil || t.Kind != graph.Gradient || y == nil || !t.Shape.Equal(y.Shape) {
			continue
		}
		var copied bool
		if _, ok := op.Attrs[graph.AttrGradFormat]; ok {
			// what the trace saw: the kernel copies a gradient not laid
			// out as its forward ran (grad.contiguous(memory_format))
			copied = relaid(op, graph.AttrGradFormat, layout)
		} else if cl {
			copied = !channelsLastGradient(g, in)
		} else {
			copied = StridedGradient(g, in)
		}
		if copied {
			ws = satAdd(ws, t.Bytes)
		}
		break
	}
	return ws
}

// channelsLastGradient reports whether gradient t of a graph that records
// no layouts (an ONNX import run with conv.memory_format channels_last)
// arrives channels-last at a convolution's backward. Element-wise,
// convolution and pooling backwards keep their operands' layout; three
// kinds of gradient do not, and the convolution copies them: a reduction's
// (torch's mean and sum backward expand the incoming gradient into the
// contiguous layout; profiler, a channels-last [2, 32, 128, 128]
// convolution followed by mean((2, 3)): +4194304 bytes in its backward) and
// a view of a gradient of another rank (a flatten's, [N, C*H*W] reshaped to
// [N, C, H, W]). A permuted view is no sign: the gradient of ConvNeXt's
// permute(0, 2, 3, 1) of a channels-last output is channels-last.
func channelsLastGradient(g *graph.Graph, t graph.TensorID) bool {
	tt := g.Tensor(t)
	rt := g.Tensor(g.StorageOf(t))
	if tt == nil || rt == nil {
		return true
	}
	if len(rt.Shape) != len(tt.Shape) {
		return false
	}
	if p := g.Op(rt.Producer); p != nil {
		if f := g.Op(p.Forward); f != nil && f != p {
			switch f.Type {
			case "reduce_mean", "reduce_sum", "mean", "sum": // the ONNX import's and aten's reductions
				return false
			}
		}
	}
	return true
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

// convGeom is a 2-D convolution's geometry along its height and width:
// strides, dilations and the padding before the first row (th) and column
// (lw).
type convGeom struct{ sh, sw, dh, dw, th, lw int64 }

// attrPair reads a convolution attribute of one value per spatial dimension
// ("2,2"; a single value applies to both) into (h, w), or def for a missing
// or unreadable one.
func attrPair(f *graph.Op, key string, def int64) (int64, int64) {
	v, ok := f.Attrs[key]
	if !ok {
		return def, def
	}
	parts := strings.Split(v, ",")
	var out [2]int64
	for i := range out {
		p := parts[min(i, len(parts)-1)]
		n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil || n < 0 || n > 1<<20 {
			return def, def
		}
		out[i] = n
	}
	return out[0], out[1]
}

// geometry returns f's geometry from its attributes (stride, dilation, and
// padding or ONNX's pads "t,l,b,r"); for what they leave out or do not
// read as expected, that of a "same"-padded convolution of d's shapes with
// the smallest stride they allow.
func geometry(f *graph.Op, d convShapes) convGeom {
	if f == nil {
		f = &graph.Op{}
	}
	// pair reads an attribute into (h, w); a 1-D convolution's one value
	// is its width's (PyTorch runs it as a 2-D one of height 1)
	pair := func(key string, defH, defW int64) (int64, int64) {
		h, w := attrPair(f, key, -1)
		switch {
		case h < 0:
			return defH, defW
		case d.oneD:
			return defH, h
		}
		return h, w
	}
	g := convGeom{}
	g.dh, g.dw = pair("dilation", 1, 1)
	g.dh, g.dw = max(g.dh, 1), max(g.dw, 1)
	g.th, g.lw = pair("padding", (d.r-1)/2, (d.s-1)/2)
	if _, ok := f.Attrs["padding"]; !ok && !d.oneD {
		if pads := strings.Split(f.Attrs["pads"], ","); len(pads) == 4 {
			t, err1 := strconv.ParseInt(strings.TrimSpace(pads[0]), 10, 64)
			l, err2 := strconv.ParseInt(strings.TrimSpace(pads[1]), 10, 64)
			if err1 == nil && err2 == nil && t >= 0 && l >= 0 && t <= 1<<20 && l <= 1<<20 {
				g.th, g.lw = t, l
			}
		}
	}
	implied := func(in, k, pad, out, dil int64) int64 {
		// the smallest stride that gives out positions
		l := in + 2*pad - (k-1)*dil - 1
		if l < 0 || out < 1 {
			return 1
		}
		return l/out + 1
	}
	g.sh, g.sw = pair("stride", implied(d.h, d.r, g.th, d.p, g.dh), implied(d.w, d.s, g.lw, d.q, g.dw))
	g.sh, g.sw = max(g.sh, 1), max(g.sw, 1)
	return g
}

// gemmWeightGrad reports whether oneDNN's blocked weight-gradient kernel
// refuses a dense convolution, which then runs its GEMM-based kernel: with
// AVX-512 a dilated convolution of an image lower than the dilated kernel
// (FCN's and DeepLab's dilated 3x3 convolutions on small images) and a 3-D
// one of fewer frames than the kernel's depth, with AVX2 any dilated or
// 3-D convolution and any image lower than the kernel (profiler, 3x3 and
// 3x3x3 kernels, dilations 1 to 4, images 2x2 to 16x16 of 1 to 4 frames,
// plain and channels-last). The GEMM columns of a 3-D convolution hold one
// output frame.
func gemmWeightGrad(d convShapes, g convGeom, isa CPUISA) bool {
	if d.threeD {
		// AVX-512: a 3-D convolution of fewer frames than the kernel's
		// depth (a video ResNet's last stages); AVX2: every 3-D one
		return isa == ISAAVX2 || d.dd < d.kd
	}
	dilated := g.dh > 1 || g.dw > 1
	if isa == ISAAVX2 {
		return dilated || d.h < d.r
	}
	// AVX-512: a kernel wider than 14 (a vision transformer's 16x16 or
	// 32x32 patch embedding; profiler, 3 and 16 input channels, kernels 8
	// to 16 and 32, strides equal to the kernel and half of it: 15 and
	// wider take the GEMM kernel, 13 and narrower do not)
	return dilated && d.h < (d.r-1)*g.dh+1 || d.s > 14
}

// dwGEMMChannelsLast reports whether a channels-last depthwise convolution
// that oneDNN's depthwise kernel does not take runs the GEMM-based weight
// gradient rather than the blocked one: as a dense convolution does
// (gemmWeightGrad), or undilated on a 1x1 image with AVX-512 (profiler,
// 3x3 kernels with dilations 1 to 4, 5x5 with dilation 2, 7x7, images 1x1
// to 16x16, both ISAs).
func dwGEMMChannelsLast(d convShapes, g convGeom, isa CPUISA) bool {
	dilated := g.dh > 1 || g.dw > 1
	return gemmWeightGrad(d, g, isa) || isa == ISAAVX512 && !dilated && d.h == 1 && d.w == 1
}

// endPad is oneDNN's padding after the last row or column: the rows the
// last output's window reaches beyond the input.
func endPad(in, k, begin, out, stride, dil int64) int64 {
	return (out-1)*stride + (k-1)*dil + 1 - in - begin
}

// dwKernelFits reports whether oneDNN's depthwise weight-gradient kernel
// (jit_uni_dw_conv_bwd_weights) takes a depthwise convolution: a kernel at
// most 3 wide with a stride no wider, no dilation, paddings at most half
// the kernel (a non-unit one a multiple of the stride), and an input that
// holds the kernel (kh plus -t_pad mod stride rows).
func dwKernelFits(d convShapes, g convGeom) bool {
	if d.threeD || d.s > 3 || g.sw > d.s || g.dh != 1 || g.dw != 1 {
		return false
	}
	bh := endPad(d.h, d.r, g.th, d.p, g.sh, 1)
	rw := endPad(d.w, d.s, g.lw, d.q, g.sw, 1)
	if g.th > d.r/2 || bh > d.r/2 || g.lw > d.s/2 || rw > d.s/2 || bh < 0 || rw < 0 {
		return false
	}
	if g.th > 1 && g.th%g.sh != 0 || bh > 1 && bh%g.sh != 0 {
		return false
	}
	return d.h >= d.r+((g.sh-g.th%g.sh)%g.sh)
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

// autogradWorkspace returns the temporaries of a backward op whose
// autograd formula PyTorch evaluates as several kernels, on every device,
// for graphs that list the op whole (the ONNX import; a trace records the
// kernels themselves). div_backward (a / b with a gradient for b):
// derivatives.yaml's other: -grad * self / (other * other) keeps three
// intermediates of the output's size next to grad / other before the
// divisor's gradient is made and reduced (profiler, [64, 256] / [64, 256]:
// +S +S +S +S -S -S -S +S with S = 65536 bytes; / [64, 1]: the same, then
// +256 -S for the reduction), so the op peaks at four times its output
// gradient's size, of which its outputs are part.
//
// maximum and minimum (each input: where(self == other, grad / 2,
// grad).masked_fill_(mask, 0)) and pow by a tensor exponent hold
// temporaries of the output's size S and bool masks next to their outputs
// (see the cases below; derived from the kernels a trace of each records,
// whose simulation matches the measured step).
//
// Element-wise ops whose formula computes a function of the input before
// multiplying by the gradient hold that many temporaries of the output
// gradient's size S (profiler, [64, 256], backward of the op alone): pow by
// a scalar grad * (exponent * self.pow(exponent - 1)) 2S, reciprocal
// -grad * (result * result) 2S, rsqrt -0.5 * grad * result.pow(3) 2S, erf
// 2/sqrt(pi) * exp(-self^2) * grad 4S, cos -grad * sin(self) 2S, sqrt grad / (2 * result), abs grad *
// sign(self) and sin grad * cos(self) 1S each; exp, log, tanh, sigmoid and
// the activations' own backward kernels none.
func autogradWorkspace(g *graph.Graph, op *graph.Op) int64 {
	if op.Type == "binary_cross_entropy_with_logits" && len(op.Inputs) > 0 && len(op.Outputs) > 0 {
		// A traced forward kernel built of other ops, below what a trace
		// sees: (1 - target).mul_(input).add_(max_val).add_((-max_val).exp_()
		// .add_((-input - max_val).exp_()).log_()) holds five tensors of the
		// input's size at once (profiler, [64, 256]: +5S -4S with
		// reduction none, the loss itself a temporary when reduced).
		x, y := g.Tensor(op.Inputs[0]), g.Tensor(op.Outputs[0])
		if x == nil || y == nil {
			return 0
		}
		return max(0, satMul(5, x.Bytes)-y.Bytes)
	}
	if k := unaryTemporaries(g, op); k > 0 {
		if len(op.Inputs) == 0 {
			return 0
		}
		dy := g.Tensor(op.Inputs[len(op.Inputs)-1]) // the output gradient comes last
		if dy == nil {
			return 0
		}
		return satMul(k, dy.Bytes)
	}
	switch op.Type {
	case "cross_entropy_backward", "norm_backward", "var_backward", "std_backward",
		"mul_backward", "maximum_backward", "minimum_backward", "pow_tensor_backward", "div_backward",
		"scatter_backward":
		// the types the two switches below price, from the forward op
	default:
		// Decided before reading the forward op and its tensors: in a
		// large graph those are far from the op (a cache miss each).
		return 0
	}
	f := g.Op(op.Forward)
	if f == nil || f == op || len(f.Inputs) == 0 || len(f.Outputs) == 0 {
		return 0
	}
	x, y := g.Tensor(f.Inputs[0]), g.Tensor(f.Outputs[0])
	if x == nil || y == nil {
		return 0
	}
	s := y.Bytes
	switch op.Type {
	case "cross_entropy_backward":
		// F.cross_entropy is log_softmax then nll_loss; its backward is
		// nll_loss_backward, a zero-filled gradient of the log-probabilities'
		// size with the loss's gradient scattered into it, then
		// _log_softmax_backward_data, whose output (the logits' gradient)
		// is made while that gradient is live (profiler, [256, 512] logits:
		// +S +S -S at the backward, S = 524288 bytes). For a language
		// model's head the log-probabilities are the largest tensor of
		// the step.
		if len(f.Outputs) > 1 {
			if lp := g.Tensor(f.Outputs[1]); lp != nil {
				return lp.Bytes
			}
		}
		return 0
	case "norm_backward":
		return normTemporaries(f, x, y)
	case "var_backward":
		// (2 / n) * grad * (self - self.mean(dim, true)) holds the mean, the
		// scaled gradient and the difference (the input's size).
		return satAdd(x.Bytes, satMul(2, s))
	case "scatter_backward":
		// An index assignment (torch's ScatterND export of x[i] = v) is
		// differentiated by PyTorch's CopySlices: the gradient cloned into
		// the data's gradient, the assigned view of it cloned again and
		// the assignment's own backward run on that clone. For a tensor
		// index the view is the whole tensor and that backward an
		// out-of-place index_put (two data-sized temporaries, profiled in
		// tools/layer_fidelity.py's setitem case); for a basic slice the
		// view is the slice and the backward fills it with zeros (one
		// temporary of the updates' size).
		if f.Attrs["onnx_op"] != "ScatterND" || len(f.Inputs) < 3 {
			return 0
		}
		if f.Attrs["indexing"] == "basic" {
			if u := g.Tensor(f.Inputs[2]); u != nil {
				return u.Bytes
			}
			return 0
		}
		return satMul(2, x.Bytes)
	case "std_backward":
		// var_backward of grad / (result * 2), masked where the result is 0.
		return satAdd(satAdd(x.Bytes, satMul(3, s)), maskBytes(y))
	}
	if len(f.Inputs) < 2 {
		return 0
	}
	switch op.Type {
	case "mul_backward":
		// mul_tensor_backward(grad, other) is grad * other at the output's
		// size; a broadcast operand's gradient is summed down from it
		// (sum_to), one operand after the other.
		for _, in := range f.Inputs[:2] {
			if t := g.Tensor(in); t != nil && needsGrad(g, in) && t.Bytes < s {
				return s
			}
		}
	case "maximum_backward", "minimum_backward":
		// Per input: at::where(self == other, grad / 2, grad).masked_fill_(self < other, 0),
		// at the output's size (a broadcast input's is summed down at the
		// end): grad / 2 and two masks live to the end of the expression,
		// the first input's gradient while the second's is made.
		n := int64(0)
		for _, in := range f.Inputs[:2] {
			if needsGrad(g, in) {
				n++
			}
		}
		if n > 0 {
			return max(0, satAdd(satMul(n+1, s), satMul(2, maskBytes(y)))-outBytes(g, op))
		}
	case "pow_tensor_backward":
		// pow(Tensor, Tensor). The exponent's gradient first:
		// grad * where(self == 0 & exponent >= 0, 0, result * self.log())
		// holds two masks (self == 0 and their conjunction), log(self) and
		// two products; then the base's:
		// where(exponent == 0, 0, grad * (exponent * self.pow(exponent - 1)))
		// holds exponent - 1, three products and a mask, next to the
		// exponent's gradient.
		e := g.Tensor(f.Inputs[1])
		if e == nil {
			return 0
		}
		base := satAdd(satAdd(e.Bytes, satMul(3, s)), maskBytes(e))
		expo := satAdd(satAdd(maskBytes(x), maskBytes(y)), satAdd(x.Bytes, satMul(2, s)))
		switch gx, ge := needsGrad(g, f.Inputs[0]), needsGrad(g, f.Inputs[1]); {
		case gx && ge:
			return max(base, expo-x.Bytes) // the outputs include the base's gradient from the start
		case gx:
			return base
		case ge:
			return expo
		}
	case "div_backward":
		if needsGrad(g, f.Inputs[1]) { // else grad / other only
			return max(0, satMul(4, s)-outBytes(g, op))
		}
	}
	return 0
}

// broadcastCopy returns the temporary of a matrix product that reads a
// broadcast view: the largest such operand's size (profiler:
// x.sum(-1, keepdim=True) * x after a Linear, batch 8, 32 tokens, 64
// features: AddmmBackward0's two mm calls each clone the [256, 64]
// expanded gradient, +65536 -65536 inside each). A broadcast view is one
// whose size exceeds its storage's.
//
// The matrix products (mm, addmm, mv, addmv, and the ONNX import's linear
// and its backward) copy such an operand to a dense tensor first: BLAS
// takes no zero stride (at::mm's CPU and cuBLAS paths both clone it).
// Element-wise kernels read such views as they are.
func broadcastCopy(g *graph.Graph, op *graph.Op) int64 {
	switch op.Type {
	case "mm", "addmm", "mv", "addmv", "linear", "linear_backward":
	default:
		return 0
	}
	var ws int64
	for _, in := range op.Inputs {
		t := g.Tensor(in)
		if t == nil || t.AliasOf == graph.NoTensor {
			continue // not a view
		}
		if r := g.StorageOf(in); r != in {
			if rt := g.Tensor(r); rt != nil && t.Bytes > rt.Bytes {
				ws = max(ws, t.Bytes)
			}
		}
	}
	return ws
}

// outBytes is the size of op's outputs.
func outBytes(g *graph.Graph, op *graph.Op) int64 {
	var out int64
	for _, o := range op.Outputs {
		if t := g.Tensor(o); t != nil {
			out = satAdd(out, t.Bytes)
		}
	}
	return out
}

// normTemporaries returns the temporaries of the ONNX import's norm
// backward (f is the forward op, x its input, y its output), by the
// reduction it imports: logsumexp_backward's
// grad * (self - result).exp() holds self - result and its exponential
// (both of the input's size) next to the gradient; norm_backward's p = 2
// grad * (self / norm).masked_fill_(norm == 0, 0) the quotient and a mask
// of the norm's shape; p = 1 self.sgn() * grad the sign.
func normTemporaries(f *graph.Op, x, y *graph.Tensor) int64 {
	switch f.Attrs["onnx_op"] {
	case "ReduceLogSumExp":
		return satMul(2, x.Bytes)
	case "ReduceL2":
		return satAdd(x.Bytes, maskBytes(y))
	case "ReduceL1":
		return x.Bytes
	}
	return 0
}

// maskBytes is the size of a bool tensor of t's shape.
func maskBytes(t *graph.Tensor) int64 {
	if sz := t.DType.Size(); sz > 1 {
		return t.Bytes / sz
	}
	return t.Bytes
}

// needsGrad reports whether tensor t of an imported graph gets a gradient
// (an activation or a parameter; inputs and constants do not).
func needsGrad(g *graph.Graph, t graph.TensorID) bool {
	x := g.Tensor(t)
	return x != nil && (x.Kind == graph.Activation || x.Kind == graph.Parameter)
}

// unaryTemporaries returns how many output-gradient-sized temporaries the
// backward formula of an element-wise op of the ONNX import holds (see
// autogradWorkspace); 0 for other ops.
func unaryTemporaries(g *graph.Graph, op *graph.Op) int64 {
	var k int64
	switch op.Type {
	case "pow_backward", "reciprocal_backward", "rsqrt_backward":
		k = 2
	case "erf_backward":
		k = 4
	case "sqrt_backward", "abs_backward", "sin_backward":
		k = 1
	default:
		return 0
	}
	f := g.Op(op.Forward)
	if f == nil || f == op || len(f.Inputs) != 1 {
		return 0
	}
	if f.Attrs["onnx_op"] == "Cos" { // -grad * sin(self): the sine and its negation
		return 2
	}
	return k
}
