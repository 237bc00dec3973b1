package onnx

import (
	"sync"

	"github.com/remat-dev/remat/graph"
)

// Op types the importer emits beyond graph's layer catalogue. Rules
// registers a gradient rule for each, following what PyTorch's autograd
// saves for the equivalent aten op (tools/autograd/derivatives.yaml).
const (
	OpSub             = "sub"                              // (a, b) -> a - b
	OpDiv             = "div"                              // (a, b) -> a / b; saves a and b
	OpPow             = "pow"                              // x -> x ** exponent (attr, a scalar); saves x
	OpPowTensor       = "pow_tensor"                       // (x, exponent) -> x ** exponent; saves both and the output
	OpMaximum         = "maximum"                          // (a, b) -> max(a, b); saves a and b
	OpMinimum         = "minimum"                          // (a, b) -> min(a, b); saves a and b
	OpMod             = "mod"                              // (a, b) -> a mod b
	OpSqrt            = "sqrt"                             // x -> sqrt(x); saves the output
	OpRsqrt           = "rsqrt"                            // x -> 1 / sqrt(x); saves the output
	OpErf             = "erf"                              // x -> erf(x); saves the input
	OpExp             = "exp"                              // x -> exp(x); saves the output
	OpLog             = "log"                              // x -> log(x); saves the input
	OpNeg             = "neg"                              // x -> -x
	OpAbs             = "abs"                              // x -> |x|; saves the input
	OpReciprocal      = "reciprocal"                       // x -> 1/x; saves the output
	OpHardsigmoid     = "hardsigmoid"                      // x -> relu6(x + 3) / 6; saves the input
	OpLeakyReLU       = "leaky_relu"                       // x -> y; saves the input
	OpELU             = "elu"                              // x -> y (elu, selu); saves the input
	OpSoftplus        = "softplus"                         // x -> y; saves the input
	OpFloor           = "floor"                            // x -> y (floor, ceil, round); zero gradient
	OpSin             = "sin"                              // x -> y (sin, cos); saves the input
	OpCast            = "cast"                             // x -> x converted to another dtype
	OpWhere           = "where"                            // (cond, a, b) -> y; saves cond
	OpGather          = "gather"                           // (x, indices) -> index_select copy; saves indices
	OpExpand          = "expand"                           // x -> broadcast view
	OpReduceMean      = "reduce_mean"                      // x -> mean over dims
	OpReduceSum       = "reduce_sum"                       // x -> sum over dims
	OpReduceProd      = "reduce_prod"                      // x -> product over dims
	OpReduceMax       = "reduce_max"                       // x -> max (or min) over dims; saves input and output
	OpMaxDim          = "max_dim"                          // x -> (values, indices) along one dim (max or min); saves indices
	OpAdaptiveMaxPool = "adaptive_maxpool2d"               // x -> (y, indices)
	OpLSTMStep        = "lstm_step"                        // (x_proj_t, h_prev, c_prev, W_hh[, b_hh][, P]) -> (h, c, gates, tanh_c); see opLSTM
	OpGRUStep         = "gru_step"                         // (x_proj_t, h_prev, W_hh[, b_hh]) -> (h, gates, n_h, n, d); see opLSTM
	OpRNNStep         = "rnn_step"                         // (x_proj_t, h_prev, W_hh[, b_hh]) -> h (attr activation); see opLSTM
	OpCompare         = "compare"                          // (a, b) -> bool (attr op: Equal, Less, ...); no gradient
	OpNot             = "not"                              // x -> bool; no gradient
	OpGroupNorm       = "group_norm"                       // (x[, gamma[, beta]]) -> (y, mean, rstd) over groups of channels (attr groups); see opInstanceNorm, matchGroupNorm
	OpPReLU           = "prelu"                            // (x, slope) -> y; saves both
	OpNorm            = "norm"                             // x -> p-norm or logsumexp over dims; saves input and output
	OpTile            = "tile"                             // x -> x repeated along each dimension (Tile, torch's repeat)
	OpPixelShuffle    = "pixel_shuffle"                    // x -> depth moved to space (DepthToSpace) or back (SpaceToDepth); a copy
	OpCumSum          = "cumsum"                           // x -> running sum along an axis
	OpGatherElements  = "gather_elements"                  // (x, index) -> x's elements at index along dim; saves both
	OpScatter         = "scatter"                          // (x, index, updates) -> x with updates written at index; saves index
	OpScatterAdd      = "scatter_add"                      // (x, index, updates) -> x with updates added at index; saves index, x's gradient is the output's
	OpVar             = "var"                              // x -> variance over dims (attrs dims, keepdim, correction); saves x; see matchVar
	OpStd             = "std"                              // x -> standard deviation over dims; saves x and the output
	OpMish            = "mish"                             // x -> x * tanh(softplus(x)); saves x; see matchMish
	OpTopK            = "topk"                             // x -> (values, indices) of the k largest or smallest along dim; saves indices
	OpPadReflect      = "pad_reflect"                      // x -> x padded by reflection or replication (attr mode); saves x
	OpTrilu           = "trilu"                            // x -> its upper or lower triangle (attrs upper, k); see opTrilu
	OpEinsum          = "einsum"                           // (a[, b]) -> contraction by attr equation; saves the other operand for each gradient
	OpBCEWithLogits   = "binary_cross_entropy_with_logits" // (x, target) -> loss (attr reduction); saves both; see matchBCEWithLogits
	OpConstant        = "constant"                         // () -> a folded constant the model makes in its forward (the data of a scatter); see makeInStep
)

// extraRules lists the gradient rules of the importer's own op types. (The
// built-in avgpool2d rule saves its input, as PyTorch's autograd does; the
// PyTorch trace of densenet121 from tools/export_torch.py showed it.)
func extraRules() map[string]graph.GradRule {
	saveIn := graph.GradRule{Saves: []graph.Saved{graph.SaveIn(0)}, Factor: 1}
	saveOut := graph.GradRule{Saves: []graph.Saved{graph.SaveOut(0)}, Factor: 1}
	two := graph.GradRule{Saves: []graph.Saved{graph.SaveIn(0), graph.SaveIn(1)}, Factor: 1}
	return map[string]graph.GradRule{
		OpSub: {Factor: 1},
		OpDiv: {Saves: []graph.Saved{graph.SaveIn(0, 1), graph.SaveIn(1)}, InputFactors: []float64{1, 3}},
		OpPow: {Saves: []graph.Saved{graph.SaveIn(0)}, Factor: 2},
		// pow(Tensor, Tensor) saves self, exponent and its result (for
		// pow_backward_exponent(grad, self, exponent, result)), also when
		// the exponent needs no gradient (a trace's PowBackward1 unpacks
		// all three).
		OpPowTensor:   {Saves: []graph.Saved{graph.SaveIn(0), graph.SaveIn(1), graph.SaveOut(0)}, Factor: 2},
		OpMaximum:     two,
		OpMinimum:     two,
		OpMod:         {Factor: 1},
		OpSqrt:        saveOut,
		OpRsqrt:       saveOut,
		OpErf:         {Saves: []graph.Saved{graph.SaveIn(0)}, Factor: 1.5},
		OpExp:         saveOut,
		OpLog:         saveIn,
		OpNeg:         {Factor: 1},
		OpAbs:         saveIn,
		OpReciprocal:  {Saves: []graph.Saved{graph.SaveOut(0)}, Factor: 2},
		OpHardsigmoid: saveIn,
		OpLeakyReLU:   saveIn,
		OpELU:         saveIn,
		OpSoftplus:    saveIn,
		OpFloor:       {Factor: 0},
		OpSin:         saveIn,
		OpCast:        {Factor: 1},
		OpWhere:       {Saves: []graph.Saved{graph.SaveIn(0)}, NoGradInputs: []int{0}, Factor: 1},
		OpGather:      {Saves: []graph.Saved{graph.SaveIn(1)}, NoGradInputs: []int{1}, Factor: 1},
		OpExpand:      {Factor: 1},
		// torch 1.13's MeanBackward1 keeps self (_saved_self) although the
		// gradient needs only its sizes, so the input stays alive to the
		// backward as it does in PyTorch.
		OpReduceMean: {Saves: []graph.Saved{graph.SaveIn(0)}, Factor: 1},
		// sum_backward is grad.unsqueeze(dims).expand(sizes): a view of the
		// output gradient, no memory (torch.stack's export, Unsqueeze and
		// Concat, then a sum over the stacked axis was 4.6% high with a
		// fresh gradient).
		OpReduceSum: {View: graph.ViewAll, Factor: 1},
		// prod_backward(grad, self, result, dim, keepdim) reads both.
		OpReduceProd: {Saves: []graph.Saved{graph.SaveIn(0), graph.SaveOut(0)}, Factor: 2},
		OpReduceMax:  {Saves: []graph.Saved{graph.SaveIn(0), graph.SaveOut(0)}, Factor: 1},
		// value_selecting_reduction_backward(grad, dim, indices, sizes).
		OpMaxDim:          {Saves: []graph.Saved{graph.SaveOut(1)}, NoGradOutputs: []int{1}, Factor: 1},
		OpAdaptiveMaxPool: {Saves: []graph.Saved{graph.SaveIn(0), graph.SaveOut(1)}, NoGradOutputs: []int{1}, Factor: 0.2},
		// One step of PyTorch's CPU LSTMCell: the backward reads h_prev
		// (addmm), c_prev (f*c_prev), W_hh, the activated gates and tanh(c).
		// native_group_norm_backward(grad, input, mean, rstd, weight, ...):
		// derivatives.yaml. Measured (profiler, GroupNorm(4, 32) on
		// [2, 32, 8, 8]): the forward allocates y, mean and rstd ([N, G]
		// each), the backward the gradients and two [N, C] temporaries.
		OpGroupNorm: {Saves: []graph.Saved{graph.SaveIn(0), graph.SaveIn(1), graph.SaveOut(1), graph.SaveOut(2)},
			NoGradOutputs: []int{1, 2}, Factor: 2},
		// _prelu_kernel_backward(grad, self, weight).
		OpPReLU: {Saves: []graph.Saved{graph.SaveIn(0), graph.SaveIn(1)}, Factor: 2},
		// norm_backward(grad, self, p, result), logsumexp_backward(grad,
		// self, result, dim, keepdim).
		OpNorm:         {Saves: []graph.Saved{graph.SaveIn(0), graph.SaveOut(0)}, Factor: 2},
		OpTile:         {Factor: 1},
		OpPixelShuffle: {Factor: 1},
		OpCumSum:       {Factor: 1},
		OpTrilu:        {Factor: 1},
		// reflection_pad2d_backward(grad, self, padding), and replication_pad's.
		OpPadReflect: {Saves: []graph.Saved{graph.SaveIn(0)}, Factor: 1},
		// gather_backward(grad, self, dim, index): zeros of self's size
		// with the gradient added at index in place.
		OpGatherElements: {Saves: []graph.Saved{graph.SaveIn(0), graph.SaveIn(1)}, NoGradInputs: []int{1}, Factor: 1},
		OpScatter:        {Saves: []graph.Saved{graph.SaveIn(1)}, NoGradInputs: []int{1}, Factor: 1},
		// scatter_add: self's gradient is grad itself, src's grad.gather(dim, index).
		OpScatterAdd: {Saves: []graph.Saved{graph.SaveIn(1)}, NoGradInputs: []int{1}, View: graph.ViewFirst, Factor: 1},
		OpMish:       {Saves: []graph.Saved{graph.SaveIn(0)}, Factor: 1.5},
		// binary_cross_entropy_with_logits_backward(grad, self, target, ...):
		// input.sigmoid().sub_(target).mul_(grad), one tensor of x's size
		// (and the target's gradient, when it needs one, in the same node).
		OpBCEWithLogits: {Saves: []graph.Saved{graph.SaveIn(0), graph.SaveIn(1)}, Factor: 1},
		OpVar:           {Saves: []graph.Saved{graph.SaveIn(0)}, Factor: 2},
		OpStd:           {Saves: []graph.Saved{graph.SaveIn(0), graph.SaveOut(0)}, Factor: 2},
		OpTopK:          {Saves: []graph.Saved{graph.SaveOut(1)}, NoGradOutputs: []int{1}, Factor: 1},
		// einsum's backward: each operand's gradient is an einsum of the
		// output gradient with the other operand.
		OpEinsum: {Saves: []graph.Saved{graph.SaveIn(0, 1), graph.SaveIn(1, 0)}, InputFactors: []float64{1, 1}},
		// One step of PyTorch's CPU GRU cell: the backward reads h_prev
		// (addmm), W_hh, the gates (the in-place sigmoids and n_h*r), the
		// copy of n_h, n (tanh) and the copy of h_prev - n.
		OpGRUStep: {Saves: []graph.Saved{graph.SaveIn(1), graph.SaveIn(2), graph.SaveOut(1), graph.SaveOut(2), graph.SaveOut(3), graph.SaveOut(4)},
			NoGradOutputs: []int{1, 2, 3, 4}, Factor: 2},
		// One step of nn.RNN: addmm reads h_prev, tanh's (relu's) backward h.
		OpRNNStep: {Saves: []graph.Saved{graph.SaveIn(1), graph.SaveIn(2), graph.SaveOut(0)}, Factor: 2},
		OpLSTMStep: {Saves: []graph.Saved{graph.SaveIn(1), graph.SaveIn(2), graph.SaveIn(3), graph.SaveOut(2), graph.SaveOut(3)},
			NoGradOutputs: []int{2, 3}, Factor: 2},
	}
}

var baseRules = sync.OnceValue(func() *graph.Rules {
	r := graph.DefaultRules()
	for typ, rule := range extraRules() {
		if err := r.RegisterGradRule(typ, rule); err != nil {
			// The table above is fixed: a failure is a bug in this file.
			panic("onnx: gradient rule " + typ + ": " + err.Error())
		}
	}
	return r
})

// Rules returns a new registry with graph's built-in gradient rules plus one
// for every op type the importer adds (OpSub, OpDiv, ...), with avgpool2d's
// rule replaced by one that saves the input (see extraRules). Pass it to
// graph.Differentiate to differentiate a graph from ImportForward.
func Rules() *graph.Rules { return baseRules().Clone() }
