package sim

import (
	"fmt"
	"strconv"
	"strings"

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
}

// isConvType reports whether typ names a 2-D convolution (forward) or one of
// its gradients (a type starting with the forward name and "_").
func isConvType(typ string) (fwd, any bool) {
	switch typ {
	case "conv2d", "convolution":
		return true, true
	}
	return false, strings.HasPrefix(typ, "conv2d_") || strings.HasPrefix(typ, "convolution_")
}

// convDims extracts the shapes of op's convolution: its own for a forward
// conv2d, its forward op's for a gradient op. ok is false when the op is not
// a convolution or the shapes are unknown.
func convDims(g *graph.Graph, op *graph.Op) (convShapes, bool) {
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
	if x == nil || w == nil || y == nil || len(x.Shape) != 4 || len(w.Shape) != 4 || len(y.Shape) != 4 {
		return convShapes{}, false
	}
	d := convShapes{n: x.Shape[0], c: x.Shape[1], h: x.Shape[2], w: x.Shape[3],
		k: w.Shape[0], cg: w.Shape[1], r: w.Shape[2], s: w.Shape[3],
		p: y.Shape[2], q: y.Shape[3], elem: x.DType.Size()}
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
	if g == nil || op == nil {
		return nil
	}
	d, ok := convDims(g, op)
	if !ok {
		return nil
	}
	c := []ConvAlgo{
		{"implicit_gemm", 1.0, 0},
		{"implicit_precomp_gemm", 0.80, satMul(4, d.cg, d.r, d.s)},
		{"gemm", 0.90, satMul(d.elem, d.n, d.cg, d.r, d.s, d.p, d.q)},
	}
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
