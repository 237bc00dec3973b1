package models

import (
	"fmt"
	"sort"
	"strings"

	"github.com/remat-dev/remat/graph"
)

// Options size a model. Zero values mean the model's defaults (Spec.Defaults);
// setting an option the model does not use is an error.
type Options struct {
	Batch   int // samples per step
	Image   int // input height = width (vision models)
	Seq     int // sequence length (gpt, lstm)
	Depth   int // layers (chain n, mlp hidden layers, resnet-cifar depth 6n+2, gpt layers, lstm layers)
	Width   int // hidden width (mlp), d_model (gpt), hidden size (lstm)
	Heads   int // attention heads (gpt)
	Vocab   int // vocabulary size (gpt, lstm)
	Classes int // output classes (vision models, mlp)
	// DType is the element type of activations and parameters (default f32).
	DType graph.DType
	// Optimizer for Build: none, sgd (default), momentum, adam.
	Optimizer string
	// InPlaceUpdate makes the optimizer update parameters in place
	// (MEGENGINE_INPLACE_UPDATE=1).
	InPlaceUpdate bool
}

// Spec describes one model of the zoo.
type Spec struct {
	Name        string
	Family      string
	Description string
	// Defaults are the values used for zero options.
	Defaults Options
	// Uses lists the Options fields the model reads (besides DType,
	// Optimizer and InPlaceUpdate, which every model accepts).
	Uses []string

	build func(b *graph.Builder, o Options) graph.TensorID
	// direct models (chain) build their own backward pass.
	direct func(o Options) (*graph.Graph, graph.TensorID, error)
	// scale lists the options that set the number of ops (layers, unrolled
	// time steps), with their smallest value and step, for the size
	// estimate.
	scale []scaling
}

// scaling is an option that sets how many ops a model has.
type scaling struct {
	option    string
	min, step int
}

// Limits on the graph a model may build: the size of the graph is
// estimated before it is built, and a larger one is refused, so that a
// --depth of 1e8 gets an error instead of exhausting memory.
const (
	MaxOps     = 1 << 23
	MaxTensors = 1 << 24
)

var optionNames = []string{"Batch", "Image", "Seq", "Depth", "Width", "Heads", "Vocab", "Classes"}

func (o *Options) field(name string) *int {
	switch name {
	case "Batch":
		return &o.Batch
	case "Image":
		return &o.Image
	case "Seq":
		return &o.Seq
	case "Depth":
		return &o.Depth
	case "Width":
		return &o.Width
	case "Heads":
		return &o.Heads
	case "Vocab":
		return &o.Vocab
	case "Classes":
		return &o.Classes
	}
	return nil
}

var registry = map[string]*Spec{}

func register(s *Spec) { registry[s.Name] = s }

// List returns every model's spec, sorted by name.
func List() []Spec {
	out := make([]Spec, 0, len(registry))
	for _, s := range registry {
		c := *s
		c.Uses = append([]string(nil), s.Uses...)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns the model names, sorted.
func Names() []string {
	n := make([]string, 0, len(registry))
	for k := range registry {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Lookup returns the spec of a model.
func Lookup(name string) (Spec, error) {
	s, ok := registry[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return Spec{}, fmt.Errorf("model %q: unknown, expected one of %s", name, strings.Join(Names(), ", "))
	}
	return *s, nil
}

// resolve fills defaults and checks the options against the spec.
func resolve(s *Spec, o Options) (Options, error) {
	r := o
	for _, n := range optionNames {
		v := *r.field(n)
		uses := false
		for _, u := range s.Uses {
			if u == n {
				uses = true
			}
		}
		if !uses {
			if v != 0 {
				return r, fmt.Errorf("model %s: option %s=%d: not used by this model (it uses %s)", s.Name, n, v, strings.Join(s.Uses, ", "))
			}
			continue
		}
		if v < 0 {
			return r, fmt.Errorf("model %s: option %s=%d: expected > 0 (0 means the default %d)", s.Name, n, v, *s.Defaults.field(n))
		}
		if v == 0 {
			*r.field(n) = *s.Defaults.field(n)
		}
	}
	if r.DType == 0 {
		r.DType = graph.F32
	}
	if r.DType != graph.F32 && r.DType != graph.F16 && r.DType != graph.BF16 && r.DType != graph.F64 {
		return r, fmt.Errorf("model %s: option DType=%s: expected one of f32, f16, bf16, f64", s.Name, r.DType)
	}
	if r.Optimizer == "" {
		r.Optimizer = string(graph.OptSGD)
	}
	if _, err := graph.ParseOptimizer(r.Optimizer); err != nil {
		return r, fmt.Errorf("model %s: option Optimizer: %w", s.Name, err)
	}
	return r, nil
}

// BuildForward builds a model's forward graph and returns it with its loss
// tensor. For the chain model, which is defined with its backward nodes,
// the result is its full graph.
func BuildForward(name string, o Options) (*graph.Graph, graph.TensorID, error) {
	s, ok := registry[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return nil, graph.NoTensor, fmt.Errorf("model %q: unknown, expected one of %s", name, strings.Join(Names(), ", "))
	}
	r, err := resolve(s, o)
	if err != nil {
		return nil, graph.NoTensor, err
	}
	if ops, tensors, err := estimate(s, r); err != nil {
		return nil, graph.NoTensor, err
	} else if ops > MaxOps || tensors > MaxTensors {
		return nil, graph.NoTensor, fmt.Errorf("model %s: %s gives a graph of about %d ops and %d tensors, more than the limit of %d ops and %d tensors",
			s.Name, scaleText(s, r), ops, tensors, MaxOps, MaxTensors)
	}
	return buildForward(s, r)
}

// buildForward builds the forward graph of resolved options.
func buildForward(s *Spec, r Options) (*graph.Graph, graph.TensorID, error) {
	if s.direct != nil {
		return s.direct(r)
	}
	b := graph.NewBuilder(s.Name)
	b.SetAttr("model", s.Name)
	for _, n := range s.Uses {
		b.SetAttr(strings.ToLower(n), fmt.Sprint(*r.field(n)))
	}
	b.SetAttr("dtype", r.DType.String())
	loss := s.build(b, r)
	b.SetLoss(loss)
	g, err := b.Build()
	if err != nil {
		return nil, graph.NoTensor, fmt.Errorf("model %s: %w", s.Name, err)
	}
	return g, loss, nil
}

// Build builds a model's full training graph: forward, backward (derived by
// graph.Differentiate with the built-in rules) and the optimizer's update
// ops (default sgd).
func Build(name string, o Options) (*graph.Graph, error) {
	fwd, loss, err := BuildForward(name, o)
	if err != nil {
		return nil, err
	}
	s := registry[strings.ToLower(strings.TrimSpace(name))]
	r, _ := resolve(s, o) // checked by BuildForward
	return differentiate(s, r, fwd, loss)
}

// differentiate adds the backward pass and the optimizer to a forward graph.
func differentiate(s *Spec, r Options, fwd *graph.Graph, loss graph.TensorID) (*graph.Graph, error) {
	if s.direct != nil {
		return fwd, nil
	}
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{
		Optimizer: graph.Optimizer(r.Optimizer), InPlaceUpdate: r.InPlaceUpdate})
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", s.Name, err)
	}
	g.Attrs["optimizer"] = r.Optimizer
	if r.InPlaceUpdate {
		g.Attrs["inplace_update"] = "1"
	}
	return g, nil
}

// loss adds the classification head's loss: cross entropy of logits
// [N, classes] against integer labels.
func classLoss(b *graph.Builder, logits graph.TensorID, n int) graph.TensorID {
	labels := b.Input("labels", graph.I64, int64(n))
	return b.CrossEntropy("loss", logits, labels)
}

// estimate returns about how many ops and tensors Build makes for resolved
// options r: it builds the model at the smallest and next values of each
// option that sets the number of ops (the others at their defaults) and
// extends the counts linearly (bilinearly for two such options, as an
// unrolled LSTM's layers times time steps). The counts are exact for the
// zoo's models, whose op counts are affine in their depth.
func estimate(s *Spec, r Options) (ops, tensors int64, err error) {
	if len(s.scale) == 0 {
		return 0, 0, nil
	}
	if len(s.scale) > 2 {
		return 0, 0, fmt.Errorf("model %s: size estimate over %d options is not supported", s.Name, len(s.scale))
	}
	small := s.Defaults
	small.DType, small.Optimizer, small.InPlaceUpdate = r.DType, r.Optimizer, r.InPlaceUpdate
	count := func(steps []int) (float64, float64, error) {
		o := small
		for i, sc := range s.scale {
			*o.field(sc.option) = sc.min + steps[i]*sc.step
		}
		fwd, loss, err := buildForward(s, o)
		if err != nil {
			return 0, 0, fmt.Errorf("model %s: size estimate: %w", s.Name, err)
		}
		g, err := differentiate(s, o, fwd, loss)
		if err != nil {
			return 0, 0, fmt.Errorf("model %s: size estimate: %w", s.Name, err)
		}
		return float64(len(g.Ops)), float64(len(g.Tensors)), nil
	}
	// k[i] is how many steps option i lies above its smallest value.
	k := make([]float64, len(s.scale))
	for i, sc := range s.scale {
		k[i] = float64(*r.field(sc.option)-sc.min) / float64(sc.step)
	}
	o00, t00, err := count([]int{0, 0})
	if err != nil {
		return 0, 0, err
	}
	o10, t10, err := count([]int{1, 0})
	if err != nil {
		return 0, 0, err
	}
	eo := o00 + k[0]*(o10-o00)
	et := t00 + k[0]*(t10-t00)
	if len(s.scale) == 2 {
		o01, t01, err := count([]int{0, 1})
		if err != nil {
			return 0, 0, err
		}
		o11, t11, err := count([]int{1, 1})
		if err != nil {
			return 0, 0, err
		}
		eo += k[1]*(o01-o00) + k[0]*k[1]*(o11-o10-o01+o00)
		et += k[1]*(t01-t00) + k[0]*k[1]*(t11-t10-t01+t00)
	}
	return clampCount(eo), clampCount(et), nil
}

// clampCount turns an estimate into a count that cannot overflow.
func clampCount(f float64) int64 {
	if !(f < 1<<62) {
		return 1 << 62
	}
	if f < 0 {
		return 0
	}
	return int64(f + 0.5)
}

// scaleText names the options that set the model's size, with their values.
func scaleText(s *Spec, r Options) string {
	var parts []string
	for _, sc := range s.scale {
		parts = append(parts, fmt.Sprintf("%s=%d", sc.option, *r.field(sc.option)))
	}
	return strings.Join(parts, " ")
}
