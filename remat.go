// Package remat is the short way into remat's Go API: read or build a
// training graph, choose a device, run one memory strategy or all of them,
// and read each one's peak memory and step time.
//
//	g, _ := models.Build("resnet50", models.Options{Batch: 32})
//	o, _ := remat.Options("a100-40gb")
//	results, _ := remat.Run(ctx, g, o)
//
// Options reads the process's environment exactly as the sim command does
// (the same settings snapshot, through strategy.OptionsFrom), so a program
// and `sim report` with the same environment and flags get the same plans.
//
// The packages behind it, along the flow: graph (the IR) and its codecs
// graph/native, graph/onnx and graph/dtrlog; graph/models (the zoo); config
// (settings); sim (the simulator); mirror, sublinear, chain and dtr (the
// algorithms); strategy (the table of strategies, their options and their
// one Result); report (side-by-side reports and tables); cmd/sim (the CLI).
package remat

import (
	"context"
	"fmt"
	"strings"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/strategy"
)

// Options returns strategy options for a device: the settings of this
// process's environment (MXNET_*, MGB_*, MEGENGINE_*, GE_* variables, read
// as sim reads them), PyTorch's caching allocator, no budget (the device's
// capacity is the limit). device is a built-in profile name (sim.Devices),
// a device profile JSON file (NAME.json), or "" / "none" for an unlimited
// device. Set the returned Options' Budget, Allocator or Seed to change the
// run.
func Options(device string) (strategy.Options, error) {
	s, _, err := config.Global()
	if err != nil {
		return strategy.Options{}, err
	}
	o, err := strategy.OptionsFrom(s)
	if err != nil {
		return strategy.Options{}, err
	}
	o.Device, err = Device(device)
	return o, err
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
