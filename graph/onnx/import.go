package onnx

import (
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/remat-dev/remat/graph"
)

// maxFold is the largest constant (in elements) the importer folds and keeps
// the values of; larger constants keep only their shape.
const maxFold = 1 << 16

// maxRank bounds tensor ranks (ONNX has no limit; no real model comes near).
const maxRank = 64

// LossCrossEntropy is the loss Import appends by default.
const LossCrossEntropy = "cross_entropy"

// Options configures an import.
type Options struct {
	// Name is the graph's name (default: the ONNX graph's name, else
	// "onnx").
	Name string
	// Batch is the size of the batch axis: the first dimension of every data
	// input that is symbolic (dim_param, or unset), whatever its name.
	// Default 1.
	Batch int64
	// Dims gives the sizes of other symbolic dimensions by their dim_param
	// name (for example "seq"). A name listed here wins over Batch.
	Dims map[string]int64
	// DataInputs names the graph inputs fed from outside each step. Default:
	// every graph input without an initializer that has a symbolic dimension;
	// if none has, the first graph input without an initializer. Every other
	// graph input is a weight: a parameter if it is floating-point, a
	// constant if it is an integer or a batch norm's running statistic.
	DataInputs []string
	// Output names the graph output the loss reads (default: the first).
	Output string
	// Loss is the loss Import appends: "" or "cross_entropy" (mean
	// F.cross_entropy of the output, read as [N, C, ...] logits, against an
	// int64 label input "label" of shape [N, ...]).
	Loss string
	// Optimizer selects the update ops appended after backward (default
	// none).
	Optimizer graph.Optimizer
	// InPlaceUpdate makes the updates write the parameters in place.
	InPlaceUpdate bool
	// Rules are the gradient rules (default: Rules()).
	Rules *graph.Rules
	// DropoutMask is the element type of the mask a training-mode Dropout
	// keeps for its backward pass (default DropoutMaskByte). It depends on
	// where PyTorch trains: see DropoutMask.
	DropoutMask DropoutMask
	// Frozen are glob patterns (path.Match syntax, matched against the
	// whole name) of weights that take no gradient and no update: a
	// matching floating-point weight is a constant. torch.onnx exports a
	// module's registered buffers (rotary embeddings' cos and sin tables,
	// fixed masks, normalization constants) and parameters with
	// requires_grad=False as weights like any other; without this every
	// float weight is a parameter, and an op that multiplies by a buffer
	// keeps its other operand for the buffer's gradient. Each pattern must
	// match at least one weight.
	Frozen []string
	// ChannelsLast says the model trains channels-last (setting
	// conv.memory_format): an InstanceNormalization (nn.InstanceNorm) then
	// copies its 4-D input to the contiguous layout first, as
	// at::instance_norm's input.contiguous() does, and its backward reads
	// the copy.
	ChannelsLast bool
}

// DropoutMask selects the element type of the mask each training-mode
// Dropout saves for its backward pass: the only tensor dropout's backward
// reads, alive from the forward to the dropout's gradient.
type DropoutMask uint8

const (
	// DropoutMaskByte is a one-byte mask (u8): ONNX's bool mask output, and
	// what PyTorch saves on CUDA, where F.dropout runs the fused
	// native_dropout kernel (bool mask).
	DropoutMaskByte DropoutMask = iota
	// DropoutMaskLikeInput is a mask of the input's element type and shape:
	// what PyTorch saves on CPU, where F.dropout is not fused
	// (at::native::is_fused_kernel_acceptable needs a CUDA, XPU or lazy
	// tensor) and computes input * noise with noise =
	// empty_like(input).bernoulli_(1-p).div_(1-p); the mul's backward saves
	// noise, 4 bytes per element in f32 instead of 1.
	DropoutMaskLikeInput
)

// String returns "byte" or "like-input".
func (m DropoutMask) String() string {
	switch m {
	case DropoutMaskByte:
		return "byte"
	case DropoutMaskLikeInput:
		return "like-input"
	}
	return "DropoutMask(" + strconv.Itoa(int(m)) + ")"
}

// ParseDropoutMask returns the DropoutMask named s ("byte" or
// "like-input").
func ParseDropoutMask(s string) (DropoutMask, error) {
	switch s {
	case "byte":
		return DropoutMaskByte, nil
	case "like-input":
		return DropoutMaskLikeInput, nil
	}
	return 0, fmt.Errorf("onnx: dropout mask %q: expected \"byte\" or \"like-input\"", s)
}

// Import reads an ONNX model and returns its training graph: the forward
// ops, the loss (see Options.Loss), the backward ops derived by
// graph.Differentiate and the optimizer's updates.
func Import(r io.Reader, opts Options) (*graph.Graph, error) {
	m, err := ReadModel(r)
	if err != nil {
		return nil, err
	}
	return FromModel(m, opts)
}

// ImportForward reads an ONNX model and returns its forward graph only
// (no loss, no backward).
func ImportForward(r io.Reader, opts Options) (*graph.Graph, error) {
	m, err := ReadModel(r)
	if err != nil {
		return nil, err
	}
	return FromModelForward(m, opts)
}

// FromModelForward converts a parsed model into its forward graph (see
// ImportForward).
func FromModelForward(m *ModelProto, opts Options) (*graph.Graph, error) {
	b, _, err := build(m, opts)
	if err != nil {
		return nil, err
	}
	g, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	return g, nil
}

// FromModel converts a parsed model into a training graph (see Import).
func FromModel(m *ModelProto, opts Options) (*graph.Graph, error) {
	if opts.Loss != "" && opts.Loss != LossCrossEntropy {
		return nil, fmt.Errorf("onnx: loss %q: expected %q", opts.Loss, LossCrossEntropy)
	}
	b, imp, err := build(m, opts)
	if err != nil {
		return nil, err
	}
	out, err := imp.outputValue(opts.Output)
	if err != nil {
		return nil, err
	}
	logits := imp.tensorOf(out)
	if logits == graph.NoTensor {
		return nil, fmt.Errorf("onnx: output %q is a constant, expected a value computed from the inputs", out.name)
	}
	ls := out.shape
	if len(ls) < 2 || !isFloatType(out.et) {
		return nil, fmt.Errorf("onnx: output %q has shape %v and type %s, expected floating-point logits [N, C, ...] for the cross_entropy loss", out.name, ls, typeName(out.et))
	}
	lshape := append([]int64{ls[0]}, ls[2:]...)
	label := b.Input(uniqueName(imp, "label"), graph.I64, lshape...)
	loss := b.CrossEntropy("loss", logits, label)
	if err := b.Err(); err != nil {
		return nil, fmt.Errorf("onnx: adding the loss: %w", err)
	}
	b.SetLoss(loss)
	fwd, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	rules := opts.Rules
	if rules == nil {
		rules = Rules()
	}
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Rules: rules, Optimizer: opts.Optimizer, InPlaceUpdate: opts.InPlaceUpdate})
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	return g, nil
}

func uniqueName(imp *importer, s string) string {
	name := s
	for i := 1; imp.vals[name] != nil; i++ {
		name = s + "_" + strconv.Itoa(i)
	}
	return name
}

// value is what the importer knows about one ONNX value.
type value struct {
	name  string
	et    int32   // ONNX element type
	shape []int64 // always fully known
	// Constant data (at most maxFold elements): ints for integer and bool
	// types, flts for floating-point ones. isConst says whether it is known.
	ints    []int64
	flts    []float64
	isConst bool
	// kind of a graph input or initializer (Input, Parameter, Constant); 0
	// for node outputs.
	kind graph.TensorKind
	// tensor is the graph tensor holding the value (NoTensor until
	// materialized by tensorOf).
	tensor graph.TensorID
	// strided: the value is a non-contiguous view (a transpose or a slice
	// of inner elements); reshaping it needs a copy, as in PyTorch.
	strided bool
	// lazy, when set, emits the view that produces the value the first time
	// an op reads it (transposed weights that a fused linear reads directly
	// never appear).
	lazy func() graph.TensorID
	// transposeOf is set on the transpose [1, 0] of a 2-D weight.
	transposeOf *value
	// params, on a view of parameters or a concatenation of such views,
	// lists the parameters it reads, in order of first appearance.
	params []*value
}

// importer holds the state of one conversion.
type importer struct {
	m     *ModelProto
	g     *GraphProto
	opset int64
	opts  Options
	b     *graph.Builder
	vals  map[string]*value
	// users counts the nodes reading each value (plus one per graph output).
	users map[string]int
	// fused marks nodes already emitted as part of an earlier node (the
	// bias Add of a MatMul turned into linear).
	fused []bool
	// deferred marks nodes of a fusion converted at its last node, and
	// fusions holds each fusion by its last node (see fuse.go).
	deferred []bool
	fusions  map[int]*fusion
	nodes    []*NodeProto
	cur      int // index of the node being converted
	ifDepth  int // If branches being converted (opIf)
}

// build converts the model's forward graph into a builder.
func build(m *ModelProto, opts Options) (*graph.Builder, *importer, error) {
	if m == nil || m.GetGraph() == nil {
		return nil, nil, fmt.Errorf("onnx: model has no graph")
	}
	if opts.Batch < 0 {
		return nil, nil, fmt.Errorf("onnx: batch %d, expected > 0", opts.Batch)
	}
	if opts.Batch == 0 {
		opts.Batch = 1
	}
	if opts.DropoutMask > DropoutMaskLikeInput {
		return nil, nil, fmt.Errorf("onnx: dropout mask %d, expected DropoutMaskByte (0) or DropoutMaskLikeInput (1)", opts.DropoutMask)
	}
	for k, v := range opts.Dims {
		if v <= 0 {
			return nil, nil, fmt.Errorf("onnx: dimension %q is %d, expected > 0", k, v)
		}
	}
	g := m.GetGraph()
	imp := &importer{m: m, g: g, opts: opts, vals: map[string]*value{}, users: map[string]int{}, nodes: g.GetNode()}
	imp.opset = -1
	for _, o := range m.GetOpsetImport() {
		if o.GetDomain() == "" || o.GetDomain() == "ai.onnx" {
			imp.opset = o.GetVersion()
		}
	}
	if imp.opset < 0 {
		// IR version 1..2 files predate opset_import; they mean opset 1.
		imp.opset = 1
	}
	if err := imp.checkSupported(); err != nil {
		return nil, nil, err
	}
	name := opts.Name
	if name == "" {
		name = g.GetName()
	}
	if name == "" {
		name = "onnx"
	}
	imp.b = graph.NewBuilder(name)
	imp.b.SetAttr("source", "onnx")
	imp.b.SetAttr("batch", strconv.FormatInt(opts.Batch, 10))
	if p := m.GetProducerName(); p != "" {
		imp.b.SetAttr("onnx_producer", p+" "+m.GetProducerVersion())
	}
	imp.b.SetAttr("onnx_opset", strconv.FormatInt(imp.opset, 10))
	imp.b.Reserve(len(imp.nodes)*2, len(imp.nodes)*3)
	countUses(imp.nodes, imp.users, 0)
	for _, o := range g.GetOutput() {
		imp.users[o.GetName()]++
	}
	if err := imp.declareInputs(); err != nil {
		return nil, nil, err
	}
	imp.fused = make([]bool, len(imp.nodes))
	imp.findFusions()
	for i, n := range imp.nodes {
		if imp.fused[i] || imp.deferred[i] {
			continue
		}
		imp.cur = i
		var err error
		if f := imp.fusions[i]; f != nil {
			err = imp.emitFusion(f)
		} else {
			err = imp.node(n)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("onnx: node %d %q (%s): %w", i, n.GetName(), n.GetOpType(), err)
		}
	}
	// Graph outputs must be computed: materialize them so that the forward
	// graph ends with them.
	for _, o := range g.GetOutput() {
		v := imp.vals[o.GetName()]
		if v == nil {
			return nil, nil, fmt.Errorf("onnx: graph output %q is not produced by any node or input", o.GetName())
		}
		imp.tensorOf(v)
	}
	if err := imp.b.Err(); err != nil {
		return nil, nil, fmt.Errorf("onnx: %w", err)
	}
	if k := imp.foldedConvs(); k > 0 {
		imp.b.SetAttr(AttrFoldedConvs, strconv.Itoa(k))
	}
	return imp.b, imp, nil
}

// AttrFoldedConvs is the graph attribute counting the convolutions whose
// weight is named as torch.onnx names the constants it folds
// ("onnx::Conv_<n>"): the mark of a model exported for inference
// (torch.onnx.export's default, TrainingMode.EVAL), where each batch norm
// after a convolution is folded into its weight and bias and dropouts are
// dropped. A training step of the original model runs both; the imported
// graph has neither. Import sets it only when the count is positive; the
// CLI warns.
const AttrFoldedConvs = "onnx_folded_convs"

// foldedConvs counts the Conv nodes whose weight input is a graph weight
// named "onnx::Conv_..." (see AttrFoldedConvs).
func (imp *importer) foldedConvs() int {
	k := 0
	for _, n := range imp.nodes {
		if n.GetOpType() != "Conv" || !defaultDomain(n) || len(n.GetInput()) < 2 {
			continue
		}
		w := n.GetInput()[1]
		if v := imp.vals[w]; v != nil && (v.kind == graph.Parameter || v.kind == graph.Constant) && strings.HasPrefix(w, "onnx::Conv_") {
			k++
		}
	}
	return k
}

// supported lists the op types of the default domain the importer maps.
func supported(op string) bool {
	_, ok := handlers[op]
	return ok
}

// checkSupported fails with every unsupported op type, sorted, with counts.
func (imp *importer) checkSupported() error {
	bad := map[string]int{}
	for _, n := range imp.nodes {
		op := n.GetOpType()
		if d := n.GetDomain(); d != "" && d != "ai.onnx" {
			bad[d+"::"+op]++
			continue
		}
		if !supported(op) {
			bad[op]++
		}
	}
	if len(bad) == 0 {
		return nil
	}
	keys := make([]string, 0, len(bad))
	for k := range bad {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s (%d)", k, bad[k])
	}
	return fmt.Errorf("onnx: %d unsupported op types: %s: %w", len(keys), strings.Join(parts, ", "), ErrUnsupported)
}

// declareInputs records initializers and graph inputs.
func (imp *importer) declareInputs() error {
	g := imp.g
	inits := map[string]bool{}
	for i, t := range g.GetInitializer() {
		name := t.GetName()
		if name == "" {
			return fmt.Errorf("onnx: initializer %d has no name", i)
		}
		dims := t.GetDims()
		if len(dims) > maxRank {
			return fmt.Errorf("onnx: initializer %q has rank %d, expected at most %d", name, len(dims), maxRank)
		}
		for j, d := range dims {
			if d < 0 {
				return fmt.Errorf("onnx: initializer %q: dimension %d is %d, expected >= 0", name, j, d)
			}
		}
		if t.GetSegment() != nil {
			return fmt.Errorf("onnx: initializer %q is segmented: %w", name, ErrUnsupported)
		}
		v := &value{name: name, et: t.GetDataType(), shape: append([]int64(nil), dims...), tensor: graph.NoTensor}
		ints, flts, ok, err := tensorData(t, v.shape)
		if err != nil {
			return fmt.Errorf("onnx: initializer: %w", err)
		}
		if ok {
			v.ints, v.flts, v.isConst = ints, flts, true
		}
		inits[name] = true
		imp.vals[name] = v
	}
	var data map[string]bool
	if len(imp.opts.DataInputs) > 0 {
		data = map[string]bool{}
		for _, n := range imp.opts.DataInputs {
			data[n] = true
		}
		for n := range data {
			found := false
			for _, in := range g.GetInput() {
				if in.GetName() == n {
					found = true
				}
			}
			if !found {
				return fmt.Errorf("onnx: data input %q is not a graph input", n)
			}
		}
	}
	type decl struct {
		vi       *ValueInfoProto
		symbolic bool
	}
	var decls []decl
	anySym := false
	for i, in := range g.GetInput() {
		name := in.GetName()
		if name == "" {
			return fmt.Errorf("onnx: graph input %d has no name", i)
		}
		if inits[name] {
			continue // an initializer listed as input: its data wins
		}
		tt := in.GetType().GetTensorType()
		if tt == nil {
			return fmt.Errorf("onnx: graph input %q is not a tensor: %w", name, ErrUnsupported)
		}
		sym := false
		for _, d := range tt.GetShape().GetDim() {
			if _, ok := d.GetValue().(*TensorShapeProto_Dimension_DimValue); !ok {
				sym = true
			}
		}
		if tt.GetShape() == nil {
			return fmt.Errorf("onnx: graph input %q has no shape, expected a tensor type with a shape", name)
		}
		anySym = anySym || sym
		decls = append(decls, decl{in, sym})
	}
	for i, d := range decls {
		name := d.vi.GetName()
		isData := false
		switch {
		case data != nil:
			isData = data[name]
		case anySym:
			isData = d.symbolic
		default:
			isData = i == 0
		}
		tt := d.vi.GetType().GetTensorType()
		dims := tt.GetShape().GetDim()
		if len(dims) > maxRank {
			return fmt.Errorf("onnx: graph input %q has rank %d, expected at most %d", name, len(dims), maxRank)
		}
		shape := make([]int64, len(dims))
		for j, dim := range dims {
			switch x := dim.GetValue().(type) {
			case *TensorShapeProto_Dimension_DimValue:
				if x.DimValue < 0 {
					return fmt.Errorf("onnx: graph input %q: dimension %d is %d, expected >= 0", name, j, x.DimValue)
				}
				shape[j] = x.DimValue
			case *TensorShapeProto_Dimension_DimParam:
				if s, ok := imp.opts.Dims[x.DimParam]; ok {
					shape[j] = s
				} else if j == 0 && isData {
					shape[j] = imp.opts.Batch
				} else {
					return fmt.Errorf("onnx: graph input %q: dimension %d is symbolic (%q): set its size with Options.Dims", name, j, x.DimParam)
				}
			default:
				if j == 0 && isData {
					shape[j] = imp.opts.Batch
				} else {
					return fmt.Errorf("onnx: graph input %q: dimension %d has no size: set it with Options.Dims or fix the model", name, j)
				}
			}
		}
		v := &value{name: name, et: tt.GetElemType(), shape: shape, tensor: graph.NoTensor}
		if isData {
			v.kind = graph.Input
		}
		imp.vals[name] = v
	}
	// Weights: parameters unless integer, scalar, or a running statistic.
	stats := map[string]bool{}
	for _, n := range imp.nodes {
		if n.GetOpType() == "BatchNormalization" {
			for j, in := range n.GetInput() {
				if j >= 3 {
					stats[in] = true
				}
			}
		}
	}
	frozen, err := imp.frozenWeights()
	if err != nil {
		return err
	}
	for name, v := range imp.vals {
		if v.kind == graph.Input {
			continue
		}
		switch {
		case stats[name] || !isFloatType(v.et) || frozen[name]:
			v.kind = graph.Constant
		case inits[name] && numel(v.shape) <= 1:
			v.kind = graph.Constant
		default:
			v.kind = graph.Parameter
		}
	}
	return nil
}

// frozenWeights returns the weights (values that are not data inputs) whose
// names match a pattern of Options.Frozen; a malformed pattern, or one that
// matches no weight, is an error that lists some weight names.
func (imp *importer) frozenWeights() (map[string]bool, error) {
	if len(imp.opts.Frozen) == 0 {
		return nil, nil
	}
	var weights []string
	for name, v := range imp.vals {
		if v.kind != graph.Input {
			weights = append(weights, name)
		}
	}
	sort.Strings(weights)
	frozen := map[string]bool{}
	for _, p := range imp.opts.Frozen {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("onnx: frozen pattern %q: %w, expected a glob pattern of weight names (path.Match syntax)", p, err)
		}
		n := 0
		for _, w := range weights {
			if ok, _ := path.Match(p, w); ok {
				frozen[w] = true
				n++
			}
		}
		if n == 0 {
			some := weights[:min(len(weights), 8)]
			more := ""
			if len(weights) > len(some) {
				more = fmt.Sprintf(", ... (%d in all)", len(weights))
			}
			return nil, fmt.Errorf("onnx: frozen pattern %q matches no weight of the graph, expected a pattern of weight names such as %s%s",
				p, strings.Join(quoteAll(some), ", "), more)
		}
	}
	return frozen, nil
}

// quoteAll returns each of s quoted.
func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strconv.Quote(v)
	}
	return out
}

// outputValue returns the named graph output, or the first.
func (imp *importer) outputValue(name string) (*value, error) {
	outs := imp.g.GetOutput()
	if len(outs) == 0 {
		return nil, fmt.Errorf("onnx: graph has no outputs")
	}
	if name == "" {
		name = outs[0].GetName()
	}
	for _, o := range outs {
		if o.GetName() == name {
			if v := imp.vals[name]; v != nil {
				return v, nil
			}
		}
	}
	names := make([]string, len(outs))
	for i, o := range outs {
		names[i] = strconv.Quote(o.GetName())
	}
	return nil, fmt.Errorf("onnx: output %q: expected one of the graph outputs %s", name, strings.Join(names, ", "))
}

// tensorOf returns the graph tensor of v, creating it for graph inputs,
// weights and constants, and emitting a pending lazy view.
func (imp *importer) tensorOf(v *value) graph.TensorID {
	if v == nil {
		return graph.NoTensor
	}
	if v.tensor != graph.NoTensor {
		return v.tensor
	}
	if v.lazy != nil {
		f := v.lazy
		v.lazy = nil
		v.tensor = f()
		return v.tensor
	}
	dt := dtypeOf(v.et)
	if dt == 0 {
		imp.b.Errorf("value %q has element type %s, which remat cannot represent: %w", v.name, typeName(v.et), ErrUnsupported)
		return graph.NoTensor
	}
	kind := v.kind
	if kind == 0 {
		kind = graph.Constant // a folded constant read by a real op
	}
	v.tensor = imp.b.NewTensor(v.name, kind, dt, v.shape...)
	return v.tensor
}
