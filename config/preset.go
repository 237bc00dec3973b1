package config

import (
	"fmt"
	"strings"
)

// DeviceKind is the kind of hardware a step runs on, as far as framework
// presets care: what a framework does can differ between its CPU and CUDA
// kernels.
type DeviceKind string

// Device kinds.
const (
	DeviceCPU DeviceKind = "cpu"
	DeviceGPU DeviceKind = "gpu"
)

// ParseDeviceKind parses "cpu" or "gpu".
func ParseDeviceKind(s string) (DeviceKind, error) {
	switch k := DeviceKind(strings.ToLower(strings.TrimSpace(s))); k {
	case DeviceCPU, DeviceGPU:
		return k, nil
	}
	return "", fmt.Errorf("device kind %q: expected cpu or gpu", s)
}

// PresetEntry is one value a framework preset gives a setting.
type PresetEntry struct {
	Framework string     // pytorch, mxnet or megengine
	Device    DeviceKind // the device kind it applies to; "" for every device
	Setting   string     // setting name
	Value     string     // the value
	Why       string     // what the framework does, and where that is documented or measured
}

// presets lists what each framework decides, by setting. A setting a preset
// does not list keeps its built-in default. Every entry says why.
var presets = []PresetEntry{
	{"pytorch", "", "optimizer.inplace_update", "true",
		"torch.optim's step() updates each parameter in place (SGD: param.add_(grad, alpha=-lr)); no copy of the parameters is made"},
	{"pytorch", DeviceCPU, "cudnn.autotune", "off",
		"CPU convolutions use no cuDNN algorithm workspaces"},
	{"pytorch", DeviceCPU, "conv.library", "onednn",
		"PyTorch's CPU convolutions run through oneDNN (mkldnn), whose reorder buffers (or slow_conv2d's im2col columns) are their temporaries, measured against the profiler's allocation events"},
	{"pytorch", DeviceCPU, "dropout.mask", "like-input",
		"F.dropout on CPU is not the fused native_dropout (is_fused_kernel_acceptable needs CUDA): it computes input * noise and saves the f32 noise, measured in docs/fidelity.md"},
	{"pytorch", DeviceCPU, "recompute.rng_state_bytes", "5056",
		"to recompute a random op, remat_torch.apply keeps torch.get_rng_state() from its first run (as torch.utils.checkpoint does per segment), a 5056-byte CPU tensor (the mt19937 generator's state), until the backward pass ends; measured in docs/fidelity-plans.md"},
	{"pytorch", "", "recompute.forward_only", "true",
		"an eager step's Python references keep a forward tensor until its last forward use, and autograd runs each backward node once: a plan applied to a step (remat_torch.apply, torch.utils.checkpoint) recomputes forward ops for the backward pass only; measured in docs/fidelity-plans.md"},
	{"mxnet", "", "optimizer.inplace_update", "true",
		"MXNet's optimizers write the weight in place (sgd_update(weight, grad, out=weight))"},
	{"mxnet", DeviceCPU, "cudnn.autotune", "off",
		"CPU convolutions use no cuDNN algorithm workspaces"},
	{"mxnet", DeviceCPU, "dropout.mask", "like-input",
		"MXNet's Dropout keeps a mask output of the input's type (dropout-inl.h); the cuDNN dropout of GPUs keeps a byte-sized reserve"},
	{"megengine", DeviceCPU, "cudnn.autotune", "off",
		"CPU convolutions use no cuDNN algorithm workspaces"},
}

// Presets returns every framework preset entry, in table order (by
// framework, then device kind).
func Presets() []PresetEntry {
	return append([]PresetEntry(nil), presets...)
}

// WithPreset returns a copy of s where every setting that is still at its
// built-in default takes the value the framework preset (the framework
// setting) gives it on a device of kind dev; the source of such a value is
// "preset FRAMEWORK on KIND". Values from the environment, options, flags or
// attributes are kept: they win over the preset. A snapshot that already
// has preset values is first reset to the defaults of those settings, so
// WithPreset can be applied again for another device.
func (s *Settings) WithPreset(dev DeviceKind) (*Settings, error) {
	if s == nil {
		return nil, fmt.Errorf("config: WithPreset on nil settings")
	}
	if _, err := ParseDeviceKind(string(dev)); err != nil {
		return nil, err
	}
	fw := s.Enum(Framework)
	c := *s
	for i := range c.vals {
		if c.vals[i].Source.Kind != SourcePreset {
			continue
		}
		d := &registry[i]
		v, err := d.parse(d.defaultFn(c.ncpu), c.ncpu, Source{Kind: SourceDefault}, "default of "+d.env)
		if err != nil {
			return nil, err
		}
		c.vals[i] = v
	}
	src := Source{Kind: SourcePreset, Name: fw + " on " + string(dev)}
	for _, p := range presets {
		if p.Framework != fw || (p.Device != "" && p.Device != dev) {
			continue
		}
		i, ok := resolve(p.Setting)
		if !ok {
			return nil, fmt.Errorf("config: preset %s: %w %q", fw, ErrUnknownSetting, p.Setting)
		}
		if c.vals[i].Source.Kind != SourceDefault {
			continue
		}
		d := &registry[i]
		v, err := d.parse(p.Value, c.ncpu, src, "preset "+src.Name)
		if err != nil {
			return nil, err
		}
		c.vals[i] = v
	}
	return &c, nil
}
