package graph

import (
	"fmt"
	"strings"
	"sync"
)

// InPlaceClass says whether an op's output may take over the storage of an
// input that dies at the op (MXNET_EXEC_ENABLE_INPLACE, PyTorch's in-place
// element-wise kernels). The simulator's in-place allocators read it.
type InPlaceClass uint8

// In-place classes.
const (
	// InPlaceNever: the output never reuses an input's storage
	// (convolutions, matmuls, reductions, softmax, views, updates).
	InPlaceNever InPlaceClass = iota
	// InPlaceFirstInput: element-wise over its first input (relu, scale,
	// dropout, batchnorm's normalised output).
	InPlaceFirstInput
	// InPlaceEitherOperand: a binary element-wise op whose output may take
	// either operand's storage (add, mul).
	InPlaceEitherOperand
)

// WorkspaceClass says which temporary-memory model prices an op's
// workspace beyond graph.Op.Workspace.
type WorkspaceClass uint8

// Workspace classes.
const (
	// WorkspaceNone: only the op's own Workspace field.
	WorkspaceNone WorkspaceClass = iota
	// WorkspaceConv: a convolution whose algorithm choice (cuDNN autotune
	// on GPUs, the CPU kernels' scratch) decides its workspace.
	WorkspaceConv
)

// OpType is one entry of the op-type registry: everything remat's packages
// know about an op type, so that a new op type is one entry (plus, for the
// layer catalogue, a Builder method that computes its shapes and FLOPs).
type OpType struct {
	// Name is the type as ops carry it (Op.Type).
	Name string
	// Grad is the gradient rule autodiff applies (what the backward saves,
	// its cost factor); nil for types that are not differentiated by a rule
	// (backward, update and seed ops, and names from other front ends).
	Grad *GradRule
	// InPlace is the type's in-place class.
	InPlace InPlaceClass
	// MXNet is the MXNet operator the mirror predicate treats the type as
	// ("Convolution", "FullyConnected", "Concat", "SoftmaxOutput",
	// "BatchNorm", "Dropout", "Embedding"); "" when the predicate's lists do
	// not name it.
	MXNet string
	// Workspace is the type's workspace class.
	Workspace WorkspaceClass
}

// opTypeTable is the registry's one table. Entries without a Builder
// method (gemm, bmm, conv1d, ...) are types other front ends (ONNX, traced
// PyTorch steps, DTR logs) name, listed for the classes they share.
func opTypeTable() []OpType {
	unarySaveIn := GradRule{Saves: []Saved{SaveIn(0)}, Factor: 1}
	unarySaveOut := GradRule{Saves: []Saved{SaveOut(0)}, Factor: 1}
	view := GradRule{View: ViewAll}
	// Weighted ops: dX needs W, dW needs X; the bias gradient is a reduction.
	weighted := GradRule{Saves: []Saved{SaveIn(0, 1), SaveIn(1, 0)}, InputFactors: []float64{1, 1, 0}}
	r := func(g GradRule) *GradRule { return &g }
	const fc, conv = "FullyConnected", "Convolution"
	return []OpType{
		// Rules follow what PyTorch's autograd saves
		// (tools/autograd/derivatives.yaml); see docs/gradients.md.
		{Name: OpConv2d, Grad: r(weighted), MXNet: conv, Workspace: WorkspaceConv},
		{Name: OpConvTranspose2d, Grad: r(weighted), MXNet: conv},
		{Name: OpLinear, Grad: r(weighted), MXNet: fc},
		{Name: OpMatMul, Grad: r(GradRule{Saves: []Saved{SaveIn(0, 1), SaveIn(1, 0)}, InputFactors: []float64{1, 1}}), MXNet: fc},
		{Name: OpBatchNorm, Grad: r(GradRule{Saves: []Saved{SaveIn(0), SaveIn(1), SaveIn(3), SaveIn(4), SaveOut(1), SaveOut(2)},
			NoGradInputs: []int{3, 4}, NoGradOutputs: []int{1, 2}, Factor: 2}), InPlace: InPlaceFirstInput, MXNet: "BatchNorm"},
		{Name: OpLayerNorm, Grad: r(GradRule{Saves: []Saved{SaveIn(0), SaveOut(1), SaveOut(2), SaveIn(1), SaveIn(2)},
			NoGradOutputs: []int{1, 2}, Factor: 2})},
		{Name: OpReLU, Grad: r(unarySaveOut), InPlace: InPlaceFirstInput},
		{Name: OpReLU6, Grad: r(unarySaveIn), InPlace: InPlaceFirstInput},
		{Name: OpHardtanh, Grad: r(unarySaveIn), InPlace: InPlaceFirstInput},
		{Name: OpGELU, Grad: r(GradRule{Saves: []Saved{SaveIn(0)}, Factor: 1.5}), InPlace: InPlaceFirstInput},
		{Name: OpSiLU, Grad: r(GradRule{Saves: []Saved{SaveIn(0)}, Factor: 1.5}), InPlace: InPlaceFirstInput},
		{Name: OpSigmoid, Grad: r(GradRule{Saves: []Saved{SaveOut(0)}, Factor: 0.75}), InPlace: InPlaceFirstInput},
		{Name: OpTanh, Grad: r(GradRule{Saves: []Saved{SaveOut(0)}, Factor: 0.75}), InPlace: InPlaceFirstInput},
		{Name: OpHardswish, Grad: r(unarySaveIn), InPlace: InPlaceFirstInput},
		{Name: OpAdd, Grad: r(GradRule{View: ViewSameShape, Factor: 1}), InPlace: InPlaceEitherOperand},
		{Name: OpMul, Grad: r(GradRule{Saves: []Saved{SaveIn(1, 0), SaveIn(0, 1)}, InputFactors: []float64{1, 1}}), InPlace: InPlaceEitherOperand},
		{Name: OpScale, Grad: r(GradRule{Factor: 1}), InPlace: InPlaceFirstInput},
		{Name: OpMaskedFill, Grad: r(GradRule{Saves: []Saved{SaveIn(1)}, NoGradInputs: []int{1}, Factor: 1}), InPlace: InPlaceFirstInput},
		{Name: OpDropout, Grad: r(GradRule{Saves: []Saved{SaveOut(1)}, NoGradOutputs: []int{1}, Factor: 0.5}), InPlace: InPlaceFirstInput, MXNet: "Dropout"},
		{Name: OpMaxPool2d, Grad: r(GradRule{Saves: []Saved{SaveIn(0), SaveOut(1)}, NoGradOutputs: []int{1}, Factor: 0.2})},
		{Name: OpAvgPool2d, Grad: r(GradRule{Saves: []Saved{SaveIn(0)}, Factor: 1})},
		{Name: OpAdaptiveAvgPool, Grad: r(GradRule{Factor: 1})},
		{Name: OpUpsample, Grad: r(GradRule{Factor: 1})},
		{Name: OpFlatten, Grad: r(view)},
		{Name: OpReshape, Grad: r(view)},
		{Name: OpTranspose, Grad: r(view)},
		{Name: OpSlice, Grad: r(GradRule{Factor: 1})},
		{Name: OpContiguous, Grad: r(GradRule{Factor: 1})},
		{Name: OpPad, Grad: r(GradRule{Factor: 1})},
		{Name: OpConcat, Grad: r(view), MXNet: "Concat"},
		{Name: OpSplit, Grad: r(GradRule{Factor: 1})},
		{Name: OpSoftmax, Grad: r(GradRule{Saves: []Saved{SaveOut(0)}, Factor: 0.8})},
		{Name: OpLogSoftmax, Grad: r(GradRule{Saves: []Saved{SaveOut(0)}, Factor: 0.8}), MXNet: "SoftmaxOutput"},
		{Name: OpEmbedding, Grad: r(GradRule{Saves: []Saved{SaveIn(0)}, NoGradInputs: []int{0}, Factor: 1}), MXNet: "Embedding"},
		{Name: OpCrossEntropy, Grad: r(GradRule{Saves: []Saved{SaveIn(1), SaveOut(1)}, NoGradInputs: []int{1}, NoGradOutputs: []int{1},
			Factor: 0.6}), MXNet: "SoftmaxOutput"},
		{Name: OpLSTMCell, Grad: r(GradRule{Saves: []Saved{SaveIn(2), SaveOut(1), SaveOut(2)}, NoGradOutputs: []int{2}, Factor: 1})},
		{Name: OpGradSeed},
		{Name: OpGradAccumulate}, // its output is memset-initialised: never in place
		{Name: OpSGDUpdate},
		{Name: OpMomentumUpdate},
		{Name: OpAdamUpdate},

		// Names other front ends (ONNX, aten ops of traced PyTorch steps,
		// MXNet, DTR logs) use for the classes above.
		{Name: "conv1d", MXNet: conv},
		{Name: "conv3d", MXNet: conv},
		{Name: "conv", MXNet: conv},
		{Name: "convolution", MXNet: conv, Workspace: WorkspaceConv},
		{Name: "_convolution", MXNet: conv},
		{Name: "cudnn_convolution", MXNet: conv},
		{Name: "mkldnn_convolution", MXNet: conv},
		{Name: "gemm", MXNet: fc},
		{Name: "fully_connected", MXNet: fc},
		{Name: "fullyconnected", MXNet: fc},
		{Name: "mm", MXNet: fc},
		{Name: "bmm", MXNet: fc},
		{Name: "addmm", MXNet: fc},
		{Name: "baddbmm", MXNet: fc},
		{Name: "addbmm", MXNet: fc},
		{Name: "cat", MXNet: "Concat"},
		{Name: "softmax_cross_entropy", MXNet: "SoftmaxOutput"},
		{Name: "softmax_output", MXNet: "SoftmaxOutput"},
		{Name: "softmaxoutput", MXNet: "SoftmaxOutput"},
		{Name: "nll_loss", MXNet: "SoftmaxOutput"},
		{Name: "nll_loss_forward", MXNet: "SoftmaxOutput"},
		{Name: "nll_loss2d_forward", MXNet: "SoftmaxOutput"},
		{Name: "_log_softmax", MXNet: "SoftmaxOutput"},
		{Name: "cross_entropy_loss", MXNet: "SoftmaxOutput"},
		{Name: "batch_norm", MXNet: "BatchNorm"},
		{Name: "batchnorm2d", MXNet: "BatchNorm"},
		{Name: "native_batch_norm", MXNet: "BatchNorm"},
		{Name: "_native_batch_norm_legit", MXNet: "BatchNorm"},
		{Name: "cudnn_batch_norm", MXNet: "BatchNorm"},
		{Name: "batchnormalization", MXNet: "BatchNorm"},
		{Name: "native_dropout", MXNet: "Dropout"},
		{Name: "feature_dropout", MXNet: "Dropout"},
		{Name: "alpha_dropout", MXNet: "Dropout"},
	}
}

var opTypes = sync.OnceValues(func() ([]OpType, map[string]int) {
	t := opTypeTable()
	idx := make(map[string]int, len(t))
	for i, e := range t {
		if e.Name == "" || e.Name != strings.ToLower(e.Name) {
			panic(fmt.Sprintf("op type table entry %d: name %q must be non-empty and lower case", i, e.Name)) // a bug in the table
		}
		if _, dup := idx[e.Name]; dup {
			panic(fmt.Sprintf("op type table: %q listed twice", e.Name)) // a bug in the table
		}
		if e.Grad != nil {
			if err := e.Grad.check(); err != nil {
				panic(fmt.Sprintf("op type table: %q: %v", e.Name, err)) // a bug in the table
			}
		}
		idx[e.Name] = i
	}
	return t, idx
})

// LookupOpType returns the registry's entry for an op type; names are
// matched without regard to case ("Conv2d" is conv2d). The entry's Grad
// must not be modified.
func LookupOpType(name string) (OpType, bool) {
	t, idx := opTypes()
	i, ok := idx[name]
	if !ok {
		i, ok = idx[strings.ToLower(name)]
	}
	if !ok {
		return OpType{}, false
	}
	return t[i], true
}

// OpTypes returns a copy of the registry, in table order: the layer
// catalogue's types first, then the names of other front ends.
func OpTypes() []OpType {
	t, _ := opTypes()
	return append([]OpType(nil), t...)
}
