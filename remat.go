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
