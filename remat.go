package remat

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/onnx"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/strategy"
)

// Options returns strategy options for a device: the settings of this
// process's environment (MXNET_*, MGB_*, MEGENGINE_*, GE_*, REMAT_*
// variables, read as sim reads them) with the framework preset for the
// device's kind (strategy.ForDevice), PyTorch's caching allocator, no
// budget (the device's capacity is the limit). device is a built-in profile
// name (sim.Devices), a device profile JSON file (NAME.json), or "" /
// "none" for an unlimited device. Set the returned Options' Budget,
// Allocator or Seed to change the run. The settings the options came from
// are o.Settings: import an ONNX model with them (ImportONNX) so that the
// preset decides the import too.
func Options(device string) (strategy.Options, error) {
	s, _, err := config.Global()
	if err != nil {
		return strategy.Options{}, err
	}
	dev, err := Device(device)
	if err != nil {
		return strategy.Options{}, err
	}
	o, _, err := strategy.OptionsFor(s, dev)
	return o, err
}

// DefaultOptimizer is the optimizer appended to an imported ONNX model (and
// to zoo models) when none is named: SGD, as `sim --optimizer`'s help says.
const DefaultOptimizer = graph.OptSGD

// ONNXInput is what an ONNX import needs besides the settings.
type ONNXInput struct {
	// Batch is the size of the batch axis (0: 1).
	Batch int64
	// Dims are the sizes of other symbolic dimensions by name ("seq").
	Dims map[string]int64
	// Optimizer names the update ops appended after backward: none, sgd,
	// momentum or adam ("": DefaultOptimizer).
	Optimizer string
	// Frozen are glob patterns of weights that take no gradient and no
	// update (onnx.Options.Frozen): registered buffers, frozen layers.
	Frozen []string
}

// ONNXOptions returns the import options of an ONNX model under settings s
// (nil: the built-in defaults; pass the settings of strategy.OptionsFor so
// that the framework preset applies): the updates are in place when
// optimizer.inplace_update says so, dropout saves what dropout.mask says,
// and conv.memory_format channels_last adds the copies a channels-last
// model makes (onnx.Options.ChannelsLast). The CLI and tools/fidelity import through it.
func ONNXOptions(s *config.Settings, in ONNXInput) (onnx.Options, error) {
	if s == nil {
		s = config.Defaults()
	}
	if in.Batch < 0 {
		return onnx.Options{}, fmt.Errorf("batch %d: expected a size >= 1 (0: 1)", in.Batch)
	}
	opt := DefaultOptimizer
	if in.Optimizer != "" {
		var err error
		if opt, err = graph.ParseOptimizer(in.Optimizer); err != nil {
			return onnx.Options{}, err
		}
	}
	mask, err := onnx.ParseDropoutMask(s.Enum(config.DropoutMask))
	if err != nil {
		return onnx.Options{}, fmt.Errorf("setting dropout.mask: %w", err)
	}
	o := onnx.Options{Batch: in.Batch, Optimizer: opt, InPlaceUpdate: s.Bool(config.InplaceUpdate), DropoutMask: mask,
		ChannelsLast: s.Enum(config.ConvMemoryFormat) == "channels_last"}
	o.Frozen = append([]string(nil), in.Frozen...)
	if len(in.Dims) > 0 {
		o.Dims = make(map[string]int64, len(in.Dims))
		for k, v := range in.Dims {
			o.Dims[k] = v
		}
	}
	return o, nil
}

// ImportONNX reads an ONNX model as a training graph with ONNXOptions.
func ImportONNX(r io.Reader, s *config.Settings, in ONNXInput) (*graph.Graph, error) {
	if r == nil {
		return nil, fmt.Errorf("remat: ONNX reader is nil")
	}
	o, err := ONNXOptions(s, in) // checked before a large file is read
	if err != nil {
		return nil, err
	}
	m, err := onnx.ReadModel(r)
	if err != nil {
		return nil, err
	}
	return onnx.FromModel(m, o)
}

// ImportONNXModel is ImportONNX on a model already read (onnx.ReadModel):
// importing one parsed model at several batch sizes reads the file once.
// The model is not modified.
func ImportONNXModel(m *onnx.ModelProto, s *config.Settings, in ONNXInput) (*graph.Graph, error) {
	if m == nil {
		return nil, fmt.Errorf("remat: ONNX model is nil")
	}
	o, err := ONNXOptions(s, in)
	if err != nil {
		return nil, err
	}
	return onnx.FromModel(m, o)
}

// Device resolves a device: a built-in profile name, a profile JSON file
// (a name ending in .json), or "" / "none" / "unlimited" for a device
// without a memory limit.
func Device(name string) (sim.Profile, error) {
	switch {
	case name == "" || name == "none" || name == "unlimited":
		return sim.Profile{}, nil
	case strings.HasSuffix(name, ".json"):
		return sim.LoadProfile(name)
	}
	return sim.Device(name)
}

// Run runs the named strategies (none given: every strategy, in table
// order) on g and returns one Result each, in the order asked. A strategy
// that finds no plan has a Result with its status and reason; the error is
// for unknown names, misuse and cancellation (errors.Is(err,
// sim.ErrCanceled)), which returns the results finished so far.
func Run(ctx context.Context, g *graph.Graph, o strategy.Options, names ...string) ([]strategy.Result, error) {
	if g == nil {
		return nil, fmt.Errorf("remat: graph is nil")
	}
	sts, err := strategy.Resolve(names)
	if err != nil {
		return nil, err
	}
	out := make([]strategy.Result, 0, len(sts))
	for _, s := range sts {
		res, err := s.Plan(ctx, g, o)
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	return out, nil
}
