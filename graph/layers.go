package graph

import (
	"strconv"
	"strings"
)

// Op types of the built-in layer catalogue. Every layer helper of Builder
// emits ops of these types and DefaultRules has a gradient rule for each of
// them; docs/gradients.md lists inputs, outputs, attributes, saved tensors and
// backward cost factors.
const (
	OpConv2d           = "conv2d"             // (x, w[, b]) -> y
	OpConvTranspose2d  = "conv_transpose2d"   // (x, w[, b]) -> y
	OpLinear           = "linear"             // (x, w[, b]) -> y, w is [out, in]
	OpMatMul           = "matmul"             // (a, b) -> a @ b, batched over leading dims
	OpBatchNorm        = "batchnorm"          // (x, gamma, beta, running_mean, running_var) -> (y, save_mean, save_invstd)
	OpLayerNorm        = "layernorm"          // (x, gamma, beta) -> (y, mean, rstd)
	OpReLU             = "relu"               // x -> y
	OpReLU6            = "relu6"              // x -> y
	OpHardtanh         = "hardtanh"           // x -> y (attrs min_val, max_val)
	OpGELU             = "gelu"               // x -> y (attr approximate: none or tanh)
	OpSiLU             = "silu"               // x -> y
	OpSigmoid          = "sigmoid"            // x -> y
	OpTanh             = "tanh"               // x -> y
	OpHardswish        = "hardswish"          // x -> y
	OpAdd              = "add"                // (a, b) -> a + b, broadcasting
	OpMul              = "mul"                // (a, b) -> a * b, broadcasting
	OpScale            = "scale"              // x -> x * factor (a constant; division is scaling by 1/c)
	OpMaskedFill       = "masked_fill"        // (x, mask) -> x with mask positions set to value
	OpDropout          = "dropout"            // x -> (y, mask); non-deterministic
	OpMaxPool2d        = "maxpool2d"          // x -> (y, indices)
	OpAvgPool2d        = "avgpool2d"          // x -> y
	OpAdaptiveAvgPool  = "adaptive_avgpool2d" // x -> y
	OpFlatten          = "flatten"            // x -> view
	OpReshape          = "reshape"            // x -> view
	OpTranspose        = "transpose"          // x -> view with two dims swapped
	OpSlice            = "slice"              // x -> strided view along one dim
	OpContiguous       = "contiguous"         // x -> dense copy (of a transposed view)
	OpPad              = "pad"                // x -> constant-padded copy
	OpConcat           = "concat"             // (x0, x1, ...) -> y
	OpSplit            = "split"              // x -> (views...)
	OpSoftmax          = "softmax"            // x -> y
	OpLogSoftmax       = "log_softmax"        // x -> y
	OpEmbedding        = "embedding"          // (ids, w) -> y
	OpCrossEntropy     = "cross_entropy"      // (logits, labels) -> (loss, log_probs)
	OpUpsample         = "upsample_nearest2d" // x -> y
	OpLSTMCell         = "lstm_cell"          // (gates_x, gates_h, c, b_ih, b_hh) -> (h, c_new, workspace)
	OpGradSeed         = "ones_like"          // backward: () -> d loss / d loss = 1
	OpGradAccumulate   = "grad_accumulate"    // backward: (g_sum, g_part) -> g_sum + g_part
	OpSGDUpdate        = "sgd_update"         // update: (p, g) -> p'
	OpMomentumUpdate   = "momentum_update"    // update: (p, g, buf) -> (p', buf')
	OpAdamUpdate       = "adam_update"        // update: (p, g, exp_avg, exp_avg_sq) -> (p', exp_avg', exp_avg_sq')
	backwardTypeSuffix = "_backward"
)

// BackwardType returns the type of the backward op generated for a forward
// op type: the forward type with "_backward" appended (conv2d_backward, ...).
func BackwardType(forwardType string) string { return forwardType + backwardTypeSuffix }

// Per-element FLOP counts used by the layer helpers for element-wise and
// normalisation ops (documented in docs/gradients.md).
const (
	flopsReLU      = 1
	flopsClamp     = 2
	flopsGELU      = 8
	flopsSiLU      = 5
	flopsSigmoid   = 4
	flopsTanh      = 4
	flopsHardswish = 5
	flopsSoftmax   = 5
	flopsNorm      = 8
	flopsDropout   = 2
	flopsCE        = 5
	flopsLSTMCell  = 36
)

// ConvOption changes a convolution from its defaults (bias on, groups 1,
// dilation 1, output padding 0), as nn.Conv2d's keyword arguments do.
type ConvOption func(*convCfg)

type convCfg struct {
	groups, dilation, outPad int
	noBias                   bool
}

// ConvGroups sets the number of groups (in and out channels must divide by
// it; groups = in channels is a depthwise convolution).
func ConvGroups(g int) ConvOption { return func(c *convCfg) { c.groups = g } }

// ConvDilation sets the dilation of the kernel.
func ConvDilation(d int) ConvOption { return func(c *convCfg) { c.dilation = d } }

// ConvNoBias omits the bias parameter (bias=False).
func ConvNoBias() ConvOption { return func(c *convCfg) { c.noBias = true } }

// ConvOutputPadding sets a transposed convolution's output_padding.
func ConvOutputPadding(p int) ConvOption { return func(c *convCfg) { c.outPad = p } }

// PoolOption changes a pooling layer from its defaults.
type PoolOption func(*poolCfg)

type poolCfg struct {
	ceil       bool
	excludePad bool
}

// PoolCeilMode rounds the output size up (ceil_mode=True).
func PoolCeilMode() PoolOption { return func(c *poolCfg) { c.ceil = true } }

// PoolCountExcludePad makes average pooling ignore padding in its divisor
// (count_include_pad=False).
func PoolCountExcludePad() PoolOption { return func(c *poolCfg) { c.excludePad = true } }

// LSTMParams are the weights of one LSTM layer, named and shaped as in
// nn.LSTM: weight_ih [4H, in], weight_hh [4H, H], bias_ih and bias_hh [4H].
type LSTMParams struct {
	WeightIH, WeightHH, BiasIH, BiasHH TensorID
	Hidden                             int64
}

// ---- internal helpers ----

// in checks that t is a defined tensor with a shape of at least minRank
// dims. When an earlier helper already failed (t == NoTensor and errors are
// recorded) it stays silent, so one mistake gives one error.
func (b *Builder) in(op string, t TensorID, minRank int) (Shape, bool) {
	if t == NoTensor && len(b.errs) > 0 {
		return nil, false
	}
	if !b.valid(t) {
		b.Errorf("layer %q: input tensor %d is not defined", op, t)
		return nil, false
	}
	s := b.g.Tensors[t].Shape
	if len(s) < minRank {
		b.Errorf("layer %q: input %q has shape %v, expected at least %d dimensions", op, b.g.Tensors[t].Name, s, minRank)
		return nil, false
	}
	return s, true
}

func numel(s Shape) int64 {
	n, err := s.NumElements()
	if err != nil {
		return 0
	}
	return n
}

func pair(a, b int64) string {
	return strconv.FormatInt(a, 10) + "," + strconv.FormatInt(b, 10)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// finish sets FLOPs and BytesAccessed (bytes of all inputs plus outputs) and
// returns the op's first output.
func (o *OpBuilder) finish(flops int64) TensorID {
	op := o.op()
	var by int64
	for _, t := range op.Inputs {
		if o.b.valid(t) {
			by += o.b.g.Tensors[t].Bytes
		}
	}
	for _, t := range op.Outputs {
		by += o.b.g.Tensors[t].Bytes
	}
	op.FLOPs, op.BytesAccessed = flops, by
	return o.T()
}

// view adds a zero-cost op whose single output aliases x.
func (b *Builder) view(typ, name string, x TensorID, shape Shape, attrs ...string) TensorID {
	o := b.Op(typ, name, x).Out(name, b.g.Tensors[x].DType, shape...).Alias(x)
	for i := 0; i+1 < len(attrs); i += 2 {
		o.Attr(attrs[i], attrs[i+1])
	}
	return o.T()
}

// unary adds an element-wise op with output shaped like x.
func (b *Builder) unary(typ, name string, x TensorID, perElem int64, attrs ...string) TensorID {
	s, ok := b.in(name, x, 0)
	if !ok {
		return NoTensor
	}
	o := b.Op(typ, name, x).Out(name, b.g.Tensors[x].DType, s...)
	for i := 0; i+1 < len(attrs); i += 2 {
		o.Attr(attrs[i], attrs[i+1])
	}
	return o.finish(perElem * numel(s))
}

func normDim(name string, b *Builder, dim, rank int) (int, bool) {
	if dim < 0 {
		dim += rank
	}
	if dim < 0 || dim >= rank {
		b.Errorf("layer %q: dim %d out of range for a %d-dimensional tensor", name, dim, rank)
		return 0, false
	}
	return dim, true
}

// convOut is PyTorch's output size of a convolution or pooling window:
// floor((n + 2p - d(k-1) - 1) / s) + 1, or the ceil_mode variant (whose last
// window must start inside the input or left padding).
func convOut(n, k, s, p, d int64, ceil bool) int64 {
	num := n + 2*p - d*(k-1) - 1
	if num < 0 {
		return 0
	}
	if !ceil {
		return num/s + 1
	}
	out := (num+s-1)/s + 1
	if (out-1)*s >= n+p {
		out--
	}
	return out
}

// ---- convolutions ----

// Conv2d adds nn.Conv2d(inC, outC, k, stride, pad) applied to x [N, C, H, W]
// with parameters name.weight [outC, inC/groups, k, k] and name.bias [outC]
// (unless ConvNoBias). Output sizes follow PyTorch (floor division).
func (b *Builder) Conv2d(name string, x TensorID, outC, k, stride, pad int, opts ...ConvOption) TensorID {
	return b.conv(OpConv2d, name, x, outC, k, stride, pad, opts)
}

// ConvTranspose2d adds nn.ConvTranspose2d(inC, outC, k, stride, pad) with
// parameters name.weight [inC, outC/groups, k, k] and name.bias [outC]; the
// output size is (H-1)*stride - 2*pad + dilation*(k-1) + output_padding + 1.
func (b *Builder) ConvTranspose2d(name string, x TensorID, outC, k, stride, pad int, opts ...ConvOption) TensorID {
	return b.conv(OpConvTranspose2d, name, x, outC, k, stride, pad, opts)
}

func (b *Builder) conv(typ, name string, x TensorID, outC, k, stride, pad int, opts []ConvOption) TensorID {
	cfg := convCfg{groups: 1, dilation: 1}
	for _, f := range opts {
		f(&cfg)
	}
	s, ok := b.in(name, x, 4)
	if !ok {
		return NoTensor
	}
	if len(s) != 4 {
		b.Errorf("layer %q: input shape %v, expected [N, C, H, W]", name, s)
		return NoTensor
	}
	n, inC, h, w := s[0], s[1], s[2], s[3]
	O, K, S, P, D, G := int64(outC), int64(k), int64(stride), int64(pad), int64(cfg.dilation), int64(cfg.groups)
	bad := true
	switch {
	case O <= 0:
		b.Errorf("layer %q: out channels %d, expected > 0", name, outC)
	case K <= 0:
		b.Errorf("layer %q: kernel size %d, expected > 0", name, k)
	case S <= 0:
		b.Errorf("layer %q: stride %d, expected > 0", name, stride)
	case P < 0:
		b.Errorf("layer %q: padding %d, expected >= 0", name, pad)
	case D <= 0:
		b.Errorf("layer %q: dilation %d, expected > 0", name, cfg.dilation)
	case G <= 0 || inC%G != 0 || O%G != 0:
		b.Errorf("layer %q: groups %d, expected > 0 and dividing in channels %d and out channels %d", name, cfg.groups, inC, outC)
	case cfg.outPad < 0 || (cfg.outPad > 0 && int64(cfg.outPad) >= S && int64(cfg.outPad) >= D):
		b.Errorf("layer %q: output padding %d, expected >= 0 and smaller than stride %d or dilation %d", name, cfg.outPad, stride, cfg.dilation)
	default:
		bad = false
	}
	if bad {
		return NoTensor
	}
	dt := b.g.Tensors[x].DType
	var oh, ow int64
	var wt TensorID
	if typ == OpConvTranspose2d {
		op := int64(cfg.outPad)
		oh = (h-1)*S - 2*P + D*(K-1) + op + 1
		ow = (w-1)*S - 2*P + D*(K-1) + op + 1
		wt = b.Parameter(name+".weight", dt, inC, O/G, K, K)
	} else {
		oh = convOut(h, K, S, P, D, false)
		ow = convOut(w, K, S, P, D, false)
		wt = b.Parameter(name+".weight", dt, O, inC/G, K, K)
	}
	if oh <= 0 || ow <= 0 {
		b.Errorf("layer %q: input %dx%d with kernel %d, stride %d, padding %d, dilation %d gives an empty output %dx%d", name, h, w, k, stride, pad, cfg.dilation, oh, ow)
		return NoTensor
	}
	ins := []TensorID{x, wt}
	if !cfg.noBias {
		ins = append(ins, b.Parameter(name+".bias", dt, O))
	}
	var flops int64
	if typ == OpConvTranspose2d {
		flops = 2 * n * inC * h * w * (O / G) * K * K
	} else {
		flops = 2 * n * O * oh * ow * (inC / G) * K * K
	}
	if !cfg.noBias {
		flops += n * O * oh * ow
	}
	o := b.Op(typ, name, ins...).Out(name, dt, n, O, oh, ow).
		Attr("kernel", pair(K, K)).Attr("stride", pair(S, S)).Attr("padding", pair(P, P)).
		Attr("dilation", pair(D, D)).Attr("groups", itoa(G))
	if typ == OpConvTranspose2d {
		o.Attr("output_padding", pair(int64(cfg.outPad), int64(cfg.outPad)))
	}
	return o.finish(flops)
}

// ---- dense layers ----

// Linear adds nn.Linear(in, out, bias) on the last dimension of x, with
// parameters name.weight [out, in] and name.bias [out].
func (b *Builder) Linear(name string, x TensorID, out int, bias bool) TensorID {
	s, ok := b.in(name, x, 1)
	if !ok {
		return NoTensor
	}
	if out <= 0 {
		b.Errorf("layer %q: out features %d, expected > 0", name, out)
		return NoTensor
	}
	dt := b.g.Tensors[x].DType
	w := b.Parameter(name+".weight", dt, int64(out), s[len(s)-1])
	bt := NoTensor
	if bias {
		bt = b.Parameter(name+".bias", dt, int64(out))
	}
	return b.LinearWith(name, x, w, bt)
}

// LinearWith adds a linear op with existing parameters (for tied weights):
// y = x @ w^T + bias, w [out, in]; bias may be NoTensor.
func (b *Builder) LinearWith(name string, x, w, bias TensorID) TensorID {
	s, ok := b.in(name, x, 1)
	if !ok {
		return NoTensor
	}
	ws, ok := b.in(name, w, 2)
	if !ok {
		return NoTensor
	}
	in := s[len(s)-1]
	if len(ws) != 2 || ws[1] != in {
		b.Errorf("layer %q: weight shape %v, expected [out, %d]", name, ws, in)
		return NoTensor
	}
	out := ws[0]
	ins := []TensorID{x, w}
	if bias != NoTensor {
		bs, ok := b.in(name, bias, 1)
		if !ok {
			return NoTensor
		}
		if len(bs) != 1 || bs[0] != out {
			b.Errorf("layer %q: bias shape %v, expected [%d]", name, bs, out)
			return NoTensor
		}
		ins = append(ins, bias)
	}
	os := s.Clone()
	os[len(os)-1] = out
	m := numel(s[:len(s)-1])
	flops := 2 * m * in * out
	if bias != NoTensor {
		flops += m * out
	}
	return b.Op(OpLinear, name, ins...).Out(name, b.g.Tensors[x].DType, os...).finish(flops)
}

// MatMul adds torch.matmul(a, c) for a [..., m, k] and c [..., k, n] with
// broadcast batch dimensions.
func (b *Builder) MatMul(name string, a, c TensorID) TensorID {
	as, ok := b.in(name, a, 2)
	if !ok {
		return NoTensor
	}
	cs, ok := b.in(name, c, 2)
	if !ok {
		return NoTensor
	}
	m, k, k2, n := as[len(as)-2], as[len(as)-1], cs[len(cs)-2], cs[len(cs)-1]
	if k != k2 {
		b.Errorf("layer %q: shapes %v and %v: inner dimensions %d and %d differ", name, as, cs, k, k2)
		return NoTensor
	}
	batch, ok := broadcast(as[:len(as)-2], cs[:len(cs)-2])
	if !ok {
		b.Errorf("layer %q: batch dimensions of %v and %v do not broadcast", name, as, cs)
		return NoTensor
	}
	os := append(batch, m, n)
	return b.Op(OpMatMul, name, a, c).Out(name, b.g.Tensors[a].DType, os...).finish(2 * numel(batch) * m * k * n)
}

// broadcast returns the numpy-style broadcast of two shapes.
func broadcast(x, y Shape) (Shape, bool) {
	n := max(len(x), len(y))
	out := make(Shape, n)
	for i := 0; i < n; i++ {
		a, c := int64(1), int64(1)
		if j := len(x) - n + i; j >= 0 {
			a = x[j]
		}
		if j := len(y) - n + i; j >= 0 {
			c = y[j]
		}
		switch {
		case a == c || c == 1:
			out[i] = a
		case a == 1:
			out[i] = c
		default:
			return nil, false
		}
	}
	return out, true
}

// ---- normalisation ----

// BatchNorm2d adds nn.BatchNorm2d(C) in training mode on x [N, C, ...]:
// parameters name.weight and name.bias [C], buffers name.running_mean and
// name.running_var [C] (constants). Outputs y and the saved batch statistics
// save_mean and save_invstd [C] (f32).
func (b *Builder) BatchNorm2d(name string, x TensorID) TensorID {
	s, ok := b.in(name, x, 2)
	if !ok {
		return NoTensor
	}
	dt := b.g.Tensors[x].DType
	c := s[1]
	g := b.Parameter(name+".weight", dt, c)
	be := b.Parameter(name+".bias", dt, c)
	rm := b.Constant(name+".running_mean", F32, c)
	rv := b.Constant(name+".running_var", F32, c)
	return b.Op(OpBatchNorm, name, x, g, be, rm, rv).Out(name, dt, s...).
		OutKind(name+".save_mean", Activation, F32, c).OutKind(name+".save_invstd", Activation, F32, c).
		Attr("eps", "1e-05").Attr("momentum", "0.1").finish(flopsNorm * numel(s))
}

// LayerNorm adds nn.LayerNorm(D) over the last dimension of x, with
// parameters name.weight and name.bias [D]. Outputs y, mean and rstd
// ([..., 1], f32).
func (b *Builder) LayerNorm(name string, x TensorID) TensorID {
	s, ok := b.in(name, x, 1)
	if !ok {
		return NoTensor
	}
	dt := b.g.Tensors[x].DType
	d := s[len(s)-1]
	g := b.Parameter(name+".weight", dt, d)
	be := b.Parameter(name+".bias", dt, d)
	st := s.Clone()
	st[len(st)-1] = 1
	return b.Op(OpLayerNorm, name, x, g, be).Out(name, dt, s...).
		OutKind(name+".mean", Activation, F32, st...).OutKind(name+".rstd", Activation, F32, st...).
		Attr("eps", "1e-05").finish(flopsNorm * numel(s))
}

// ---- activations ----

// ReLU adds an (out-of-place) ReLU.
func (b *Builder) ReLU(name string, x TensorID) TensorID {
	return b.unary(OpReLU, name, x, flopsReLU)
}

// ReLU6 adds min(max(x, 0), 6).
func (b *Builder) ReLU6(name string, x TensorID) TensorID {
	return b.unary(OpReLU6, name, x, flopsClamp)
}

// Hardtanh adds min(max(x, lo), hi).
func (b *Builder) Hardtanh(name string, x TensorID, lo, hi float64) TensorID {
	if !(lo < hi) {
		b.Errorf("layer %q: hardtanh bounds [%g, %g], expected min < max", name, lo, hi)
		return NoTensor
	}
	return b.unary(OpHardtanh, name, x, flopsClamp, "min_val", ftoa(lo), "max_val", ftoa(hi))
}

// GELU adds the exact (erf) GELU.
func (b *Builder) GELU(name string, x TensorID) TensorID {
	return b.unary(OpGELU, name, x, flopsGELU, "approximate", "none")
}

// GELUTanh adds the tanh approximation of GELU (GPT-2's gelu_new).
func (b *Builder) GELUTanh(name string, x TensorID) TensorID {
	return b.unary(OpGELU, name, x, flopsGELU, "approximate", "tanh")
}

// SiLU adds x * sigmoid(x).
func (b *Builder) SiLU(name string, x TensorID) TensorID {
	return b.unary(OpSiLU, name, x, flopsSiLU)
}

// Sigmoid adds the logistic function.
func (b *Builder) Sigmoid(name string, x TensorID) TensorID {
	return b.unary(OpSigmoid, name, x, flopsSigmoid)
}

// Tanh adds the hyperbolic tangent.
func (b *Builder) Tanh(name string, x TensorID) TensorID {
	return b.unary(OpTanh, name, x, flopsTanh)
}

// Hardswish adds x * relu6(x + 3) / 6.
func (b *Builder) Hardswish(name string, x TensorID) TensorID {
	return b.unary(OpHardswish, name, x, flopsHardswish)
}

// Scale adds x * factor for a constant factor (use 1/c to divide by c).
func (b *Builder) Scale(name string, x TensorID, factor float64) TensorID {
	return b.unary(OpScale, name, x, 1, "factor", ftoa(factor))
}

// Dropout adds training-mode dropout with drop probability p; it outputs y
// and the mask (u8, shaped like x) and is flagged NonDeterministic.
func (b *Builder) Dropout(name string, x TensorID, p float64) TensorID {
	s, ok := b.in(name, x, 0)
	if !ok {
		return NoTensor
	}
	if !(p >= 0 && p < 1) {
		b.Errorf("layer %q: dropout probability %g, expected 0 <= p < 1", name, p)
		return NoTensor
	}
	return b.Op(OpDropout, name, x).Out(name, b.g.Tensors[x].DType, s...).
		OutKind(name+".mask", Activation, U8, s...).Flags(NonDeterministic).
		Attr("p", ftoa(p)).finish(flopsDropout * numel(s))
}

// binary adds an element-wise op of two broadcasting operands.
func (b *Builder) binary(typ, name string, x, y TensorID) TensorID {
	xs, ok := b.in(name, x, 0)
	if !ok {
		return NoTensor
	}
	ys, ok := b.in(name, y, 0)
	if !ok {
		return NoTensor
	}
	os, ok := broadcast(xs, ys)
	if !ok {
		b.Errorf("layer %q: shapes %v and %v do not broadcast", name, xs, ys)
		return NoTensor
	}
	return b.Op(typ, name, x, y).Out(name, b.g.Tensors[x].DType, os...).finish(numel(os))
}

// Add adds x + y (broadcasting).
func (b *Builder) Add(name string, x, y TensorID) TensorID { return b.binary(OpAdd, name, x, y) }

// Mul adds x * y (broadcasting).
func (b *Builder) Mul(name string, x, y TensorID) TensorID { return b.binary(OpMul, name, x, y) }

// MaskedFill adds x.masked_fill(mask, value) for a boolean mask that
// broadcasts to x.
func (b *Builder) MaskedFill(name string, x, mask TensorID, value float64) TensorID {
	xs, ok := b.in(name, x, 0)
	if !ok {
		return NoTensor
	}
	ms, ok := b.in(name, mask, 0)
	if !ok {
		return NoTensor
	}
	if os, ok := broadcast(xs, ms); !ok || !os.Equal(xs) {
		b.Errorf("layer %q: mask shape %v does not broadcast to %v", name, ms, xs)
		return NoTensor
	}
	return b.Op(OpMaskedFill, name, x, mask).Out(name, b.g.Tensors[x].DType, xs...).
		Attr("value", ftoa(value)).finish(numel(xs))
}

// Softmax adds softmax along dim.
func (b *Builder) Softmax(name string, x TensorID, dim int) TensorID {
	return b.softmax(OpSoftmax, name, x, dim)
}

// LogSoftmax adds log_softmax along dim.
func (b *Builder) LogSoftmax(name string, x TensorID, dim int) TensorID {
	return b.softmax(OpLogSoftmax, name, x, dim)
}

func (b *Builder) softmax(typ, name string, x TensorID, dim int) TensorID {
	s, ok := b.in(name, x, 1)
	if !ok {
		return NoTensor
	}
	d, ok := normDim(name, b, dim, len(s))
	if !ok {
		return NoTensor
	}
	return b.unary(typ, name, x, flopsSoftmax, "dim", strconv.Itoa(d))
}

// ---- pooling ----

// MaxPool2d adds nn.MaxPool2d(k, stride, pad) on x [N, C, H, W]; outputs y
// and the argmax indices (i64, shaped like y).
func (b *Builder) MaxPool2d(name string, x TensorID, k, stride, pad int, opts ...PoolOption) TensorID {
	return b.pool(OpMaxPool2d, name, x, k, stride, pad, opts)
}

// AvgPool2d adds nn.AvgPool2d(k, stride, pad).
func (b *Builder) AvgPool2d(name string, x TensorID, k, stride, pad int, opts ...PoolOption) TensorID {
	return b.pool(OpAvgPool2d, name, x, k, stride, pad, opts)
}

func (b *Builder) pool(typ, name string, x TensorID, k, stride, pad int, opts []PoolOption) TensorID {
	var cfg poolCfg
	for _, f := range opts {
		f(&cfg)
	}
	s, ok := b.in(name, x, 4)
	if !ok {
		return NoTensor
	}
	if len(s) != 4 {
		b.Errorf("layer %q: input shape %v, expected [N, C, H, W]", name, s)
		return NoTensor
	}
	if k <= 0 || stride <= 0 || pad < 0 || 2*pad > k {
		b.Errorf("layer %q: kernel %d, stride %d, padding %d: expected kernel > 0, stride > 0 and 0 <= padding <= kernel/2", name, k, stride, pad)
		return NoTensor
	}
	K, S, P := int64(k), int64(stride), int64(pad)
	oh, ow := convOut(s[2], K, S, P, 1, cfg.ceil), convOut(s[3], K, S, P, 1, cfg.ceil)
	if oh <= 0 || ow <= 0 {
		b.Errorf("layer %q: input %dx%d is smaller than the pooling window %d (padding %d)", name, s[2], s[3], k, pad)
		return NoTensor
	}
	dt := b.g.Tensors[x].DType
	os := Shape{s[0], s[1], oh, ow}
	o := b.Op(typ, name, x).Out(name, dt, os...)
	if typ == OpMaxPool2d {
		o.OutKind(name+".indices", Activation, I64, os...)
	}
	o.Attr("kernel", pair(K, K)).Attr("stride", pair(S, S)).Attr("padding", pair(P, P)).
		Attr("ceil_mode", strconv.FormatBool(cfg.ceil))
	if typ == OpAvgPool2d {
		o.Attr("count_include_pad", strconv.FormatBool(!cfg.excludePad))
	}
	return o.finish(numel(os) * K * K)
}

// AdaptiveAvgPool2d adds nn.AdaptiveAvgPool2d((oh, ow)).
func (b *Builder) AdaptiveAvgPool2d(name string, x TensorID, oh, ow int) TensorID {
	s, ok := b.in(name, x, 4)
	if !ok {
		return NoTensor
	}
	if len(s) != 4 || oh <= 0 || ow <= 0 {
		b.Errorf("layer %q: input %v, output size %dx%d: expected [N, C, H, W] and positive output size", name, s, oh, ow)
		return NoTensor
	}
	// Window i covers [floor(i*H/oh), ceil((i+1)*H/oh)).
	win := func(n, o int64) int64 {
		var sum int64
		for i := int64(0); i < o; i++ {
			sum += ((i+1)*n+o-1)/o - (i*n)/o
		}
		return sum
	}
	flops := s[0] * s[1] * win(s[2], int64(oh)) * win(s[3], int64(ow))
	return b.Op(OpAdaptiveAvgPool, name, x).Out(name, b.g.Tensors[x].DType, s[0], s[1], int64(oh), int64(ow)).
		Attr("output_size", pair(int64(oh), int64(ow))).finish(flops)
}

// Upsample adds nearest-neighbour upsampling of x [N, C, H, W] by an
// integer factor.
func (b *Builder) Upsample(name string, x TensorID, factor int) TensorID {
	s, ok := b.in(name, x, 4)
	if !ok {
		return NoTensor
	}
	if len(s) != 4 || factor <= 0 {
		b.Errorf("layer %q: input %v, factor %d: expected [N, C, H, W] and factor > 0", name, s, factor)
		return NoTensor
	}
	f := int64(factor)
	os := Shape{s[0], s[1], s[2] * f, s[3] * f}
	return b.Op(OpUpsample, name, x).Out(name, b.g.Tensors[x].DType, os...).
		Attr("scale_factor", itoa(f)).finish(numel(os))
}

// ---- views and copies ----

// Flatten adds torch.flatten(x, startDim) (through the last dimension) as a
// view of x.
func (b *Builder) Flatten(name string, x TensorID, startDim int) TensorID {
	s, ok := b.in(name, x, 1)
	if !ok {
		return NoTensor
	}
	d, ok := normDim(name, b, startDim, len(s))
	if !ok {
		return NoTensor
	}
	os := append(s[:d:d].Clone(), numel(s[d:]))
	return b.view(OpFlatten, name, x, os, "start_dim", strconv.Itoa(d))
}

// Reshape adds x.view(shape) as a view of x; one dimension may be -1.
func (b *Builder) Reshape(name string, x TensorID, shape ...int64) TensorID {
	s, ok := b.in(name, x, 0)
	if !ok {
		return NoTensor
	}
	os := Shape(shape).Clone()
	free, prod := -1, int64(1)
	for i, d := range os {
		switch {
		case d == -1 && free < 0:
			free = i
		case d <= 0:
			b.Errorf("layer %q: target shape %v: dimension %d is %d, expected > 0 (or one -1)", name, shape, i, d)
			return NoTensor
		default:
			prod *= d
		}
	}
	n := numel(s)
	if free >= 0 && prod > 0 && n%prod == 0 {
		os[free] = n / prod
	}
	if numel(os) != n || (free >= 0 && os[free] <= 0) {
		b.Errorf("layer %q: cannot view shape %v as %v", name, s, shape)
		return NoTensor
	}
	parts := make([]string, len(os))
	for i, d := range os {
		parts[i] = itoa(d)
	}
	return b.view(OpReshape, name, x, os, "shape", strings.Join(parts, ","))
}

// Transpose adds x.transpose(d0, d1) as a view of x.
func (b *Builder) Transpose(name string, x TensorID, d0, d1 int) TensorID {
	s, ok := b.in(name, x, 1)
	if !ok {
		return NoTensor
	}
	a, ok1 := normDim(name, b, d0, len(s))
	c, ok2 := normDim(name, b, d1, len(s))
	if !ok1 || !ok2 {
		return NoTensor
	}
	os := s.Clone()
	os[a], os[c] = os[c], os[a]
	return b.view(OpTranspose, name, x, os, "dims", pair(int64(a), int64(c)))
}

// Slice adds x[..., start:end:step, ...] along dim as a view of x.
func (b *Builder) Slice(name string, x TensorID, dim, start, end, step int) TensorID {
	s, ok := b.in(name, x, 1)
	if !ok {
		return NoTensor
	}
	d, ok := normDim(name, b, dim, len(s))
	if !ok {
		return NoTensor
	}
	if start < 0 || int64(end) > s[d] || start >= end || step <= 0 {
		b.Errorf("layer %q: slice %d:%d:%d of dimension %d (size %d): expected 0 <= start < end <= size and step > 0", name, start, end, step, d, s[d])
		return NoTensor
	}
	os := s.Clone()
	os[d] = int64((end - start + step - 1) / step)
	return b.view(OpSlice, name, x, os, "dim", strconv.Itoa(d), "range", itoa(int64(start))+":"+itoa(int64(end))+":"+itoa(int64(step)))
}

// Contiguous adds a dense copy of x (x.contiguous() of a non-contiguous
// view).
func (b *Builder) Contiguous(name string, x TensorID) TensorID {
	return b.unary(OpContiguous, name, x, 0)
}

// Pad adds F.pad(x, pads) with zeros. pads lists (before, after) pairs
// starting from the last dimension, as in PyTorch.
func (b *Builder) Pad(name string, x TensorID, pads ...int) TensorID {
	s, ok := b.in(name, x, 0)
	if !ok {
		return NoTensor
	}
	if len(pads)%2 != 0 || len(pads)/2 > len(s) {
		b.Errorf("layer %q: %d pad values for a %d-dimensional tensor, expected an even number up to %d", name, len(pads), len(s), 2*len(s))
		return NoTensor
	}
	os := s.Clone()
	parts := make([]string, len(pads))
	for i := 0; i < len(pads); i += 2 {
		if pads[i] < 0 || pads[i+1] < 0 {
			b.Errorf("layer %q: pad values %v, expected >= 0", name, pads)
			return NoTensor
		}
		os[len(os)-1-i/2] += int64(pads[i] + pads[i+1])
		parts[i], parts[i+1] = strconv.Itoa(pads[i]), strconv.Itoa(pads[i+1])
	}
	return b.Op(OpPad, name, x).Out(name, b.g.Tensors[x].DType, os...).
		Attr("pad", strings.Join(parts, ",")).finish(0)
}

// Concat adds torch.cat(xs, dim).
func (b *Builder) Concat(name string, dim int, xs ...TensorID) TensorID {
	if len(xs) == 0 {
		b.Errorf("layer %q: concat of no tensors", name)
		return NoTensor
	}
	s0, ok := b.in(name, xs[0], 1)
	if !ok {
		return NoTensor
	}
	d, ok := normDim(name, b, dim, len(s0))
	if !ok {
		return NoTensor
	}
	os := s0.Clone()
	for _, x := range xs[1:] {
		s, ok := b.in(name, x, 1)
		if !ok {
			return NoTensor
		}
		if len(s) != len(os) {
			b.Errorf("layer %q: cannot concatenate shapes %v and %v", name, s0, s)
			return NoTensor
		}
		for i := range s {
			if i != d && s[i] != os[i] {
				b.Errorf("layer %q: cannot concatenate shapes %v and %v along dim %d", name, s0, s, d)
				return NoTensor
			}
		}
		os[d] += s[d]
	}
	return b.Op(OpConcat, name, xs...).Out(name, b.g.Tensors[xs[0]].DType, os...).
		Attr("dim", strconv.Itoa(d)).finish(0)
}

// Split adds torch.split(x, sizes, dim): views of consecutive pieces of x.
// The output tensors are named name.0, name.1, ...
func (b *Builder) Split(name string, x TensorID, dim int, sizes ...int) []TensorID {
	s, ok := b.in(name, x, 1)
	if !ok {
		return nil
	}
	d, ok := normDim(name, b, dim, len(s))
	if !ok {
		return nil
	}
	var sum int64
	parts := make([]string, len(sizes))
	for i, n := range sizes {
		if n <= 0 {
			b.Errorf("layer %q: split size %d, expected > 0", name, n)
			return nil
		}
		sum += int64(n)
		parts[i] = strconv.Itoa(n)
	}
	if len(sizes) == 0 || sum != s[d] {
		b.Errorf("layer %q: split sizes %v sum to %d, expected dimension %d's size %d", name, sizes, sum, d, s[d])
		return nil
	}
	dt := b.g.Tensors[x].DType
	o := b.Op(OpSplit, name, x).Attr("dim", strconv.Itoa(d)).Attr("sizes", strings.Join(parts, ","))
	for i, n := range sizes {
		os := s.Clone()
		os[d] = int64(n)
		o.Out(name+"."+strconv.Itoa(i), dt, os...).Alias(x)
	}
	return append([]TensorID(nil), o.op().Outputs...)
}

// ---- embeddings and losses ----

// Embedding adds nn.Embedding(num, dim) looking up ids (integer tensor), with
// parameter name.weight [num, dim]. Output: ids.shape + [dim].
func (b *Builder) Embedding(name string, ids TensorID, num, dim int) TensorID {
	if _, ok := b.in(name, ids, 0); !ok {
		return NoTensor
	}
	if num <= 0 || dim <= 0 {
		b.Errorf("layer %q: embedding %d x %d, expected positive sizes", name, num, dim)
		return NoTensor
	}
	w := b.Parameter(name+".weight", F32, int64(num), int64(dim))
	return b.EmbeddingWith(name, ids, w)
}

// EmbeddingWith adds an embedding lookup in an existing weight w [num, dim]
// (for weights tied with an output layer). Its output has w's dtype.
func (b *Builder) EmbeddingWith(name string, ids, w TensorID) TensorID {
	is, ok := b.in(name, ids, 0)
	if !ok {
		return NoTensor
	}
	ws, ok := b.in(name, w, 2)
	if !ok {
		return NoTensor
	}
	if dt := b.g.Tensors[ids].DType; dt != I64 && dt != I32 {
		b.Errorf("layer %q: ids %q have dtype %s, expected i64 or i32", name, b.g.Tensors[ids].Name, dt)
		return NoTensor
	}
	if len(ws) != 2 {
		b.Errorf("layer %q: weight shape %v, expected [num, dim]", name, ws)
		return NoTensor
	}
	os := append(is.Clone(), ws[1])
	return b.Op(OpEmbedding, name, ids, w).Out(name, b.g.Tensors[w].DType, os...).finish(numel(os))
}

// CrossEntropy adds F.cross_entropy(logits, labels) with mean reduction for
// logits [N, C, ...] and integer labels [N, ...]. Outputs the scalar loss
// and log_probs (log_softmax of the logits, which the backward reads). It
// does not mark the loss; call SetLoss.
func (b *Builder) CrossEntropy(name string, logits, labels TensorID) TensorID {
	ls, ok := b.in(name, logits, 2)
	if !ok {
		return NoTensor
	}
	ys, ok := b.in(name, labels, 1)
	if !ok {
		return NoTensor
	}
	want := append(Shape{ls[0]}, ls[2:]...)
	if !ys.Equal(want) {
		b.Errorf("layer %q: labels shape %v, expected %v for logits %v", name, ys, want, ls)
		return NoTensor
	}
	if dt := b.g.Tensors[labels].DType; dt != I64 && dt != I32 {
		b.Errorf("layer %q: labels have dtype %s, expected i64 or i32", name, dt)
		return NoTensor
	}
	dt := b.g.Tensors[logits].DType
	return b.Op(OpCrossEntropy, name, logits, labels).Out(name, dt).
		OutKind(name+".log_probs", Activation, dt, ls...).Attr("reduction", "mean").
		finish(flopsCE * numel(ls))
}

// ---- recurrent ----

// LSTMLayerParams creates the parameters of nn.LSTM's layer `layer`
// (prefix.weight_ih_l{layer}, ...), for input size in and hidden size hidden.
func (b *Builder) LSTMLayerParams(prefix string, layer, in, hidden int, dt DType) LSTMParams {
	if in <= 0 || hidden <= 0 || layer < 0 {
		b.Errorf("lstm %q layer %d: input size %d, hidden size %d: expected positive sizes", prefix, layer, in, hidden)
		return LSTMParams{NoTensor, NoTensor, NoTensor, NoTensor, 0}
	}
	l := strconv.Itoa(layer)
	H := int64(hidden)
	return LSTMParams{
		WeightIH: b.Parameter(prefix+".weight_ih_l"+l, dt, 4*H, int64(in)),
		WeightHH: b.Parameter(prefix+".weight_hh_l"+l, dt, 4*H, H),
		BiasIH:   b.Parameter(prefix+".bias_ih_l"+l, dt, 4*H),
		BiasHH:   b.Parameter(prefix+".bias_hh_l"+l, dt, 4*H),
		Hidden:   H,
	}
}

// LSTMCell adds one LSTM step as PyTorch's CUDA path runs it: the gate
// pre-activations x @ W_ih^T and h @ W_hh^T (two linear ops without bias)
// and the fused cell (_thnn_fused_lstm_cell), which adds both biases and
// returns the new hidden and cell states plus a [N, 4H] workspace that its
// backward reads. x is [N, in]; h and c are [N, H].
func (b *Builder) LSTMCell(name string, x, h, c TensorID, p LSTMParams) (hOut, cOut TensorID) {
	gx := b.LinearWith(name+".gates_x", x, p.WeightIH, NoTensor)
	gh := b.LinearWith(name+".gates_h", h, p.WeightHH, NoTensor)
	cs, ok := b.in(name, c, 2)
	if !ok || gx == NoTensor || gh == NoTensor {
		return NoTensor, NoTensor
	}
	if len(cs) != 2 || cs[1] != p.Hidden || !b.g.Tensors[gx].Shape.Equal(Shape{cs[0], 4 * p.Hidden}) {
		b.Errorf("layer %q: cell state shape %v, expected [%d, %d]", name, cs, b.g.Tensors[gx].Shape[0], p.Hidden)
		return NoTensor, NoTensor
	}
	dt := b.g.Tensors[gx].DType
	o := b.Op(OpLSTMCell, name, gx, gh, c, p.BiasIH, p.BiasHH).
		Out(name+".h", dt, cs...).Out(name+".c", dt, cs...).
		OutKind(name+".workspace", Activation, dt, cs[0], 4*p.Hidden)
	o.finish(flopsLSTMCell * numel(cs))
	return o.Output(0), o.Output(1)
}
