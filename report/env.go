package report

import (
	"fmt"
	"math"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// Allocators lists the allocator model names.
var Allocators = []string{"ideal", "caching", "static"}

// Env is what every strategy of one report shares: the graph, the device,
// the allocator model, the budget and the effective settings.
type Env struct {
	Graph     *graph.Graph
	Device    sim.Profile
	Allocator string // ideal, caching or static
	// Budget is the memory limit strategies plan for, in bytes (0: the
	// device's usable capacity).
	Budget   int64
	Settings *config.Settings
	// Seed seeds the randomized searches.
	Seed uint64
	// Trace makes the simulator record trace events (for a Chrome trace).
	Trace bool

	planningLimit int64 // set by RunStrategy when a plan overshot the device
}

// NewEnv validates the pieces of an Env. A nil settings snapshot means the
// built-in defaults.
func NewEnv(g *graph.Graph, device sim.Profile, allocator string, budget int64, s *config.Settings) (*Env, error) {
	if g == nil {
		return nil, fmt.Errorf("report: graph is nil")
	}
	ok := false
	for _, a := range Allocators {
		ok = ok || a == allocator
	}
	if !ok {
		return nil, fmt.Errorf("allocator %q: expected one of ideal, caching, static", allocator)
	}
	if budget < 0 {
		return nil, fmt.Errorf("budget %d bytes: expected >= 0", budget)
	}
	if s == nil {
		s = config.Defaults()
	}
	return &Env{Graph: g, Device: device, Allocator: allocator, Budget: budget, Settings: s, Seed: 2333}, nil
}

// SimOptions returns simulator options for one run: a fresh allocator of the
// chosen model sized to the usable capacity, and the settings that shape the
// simulated memory (pool reserve, reserve-all, workspaces, cudnn_tune,
// atomic clean policy, in-place reuse and match range).
func (e *Env) SimOptions() (sim.Options, error) {
	s := e.Settings
	opts := sim.Options{
		Device:             e.Device,
		PoolReservePercent: int(math.Round(s.Float(config.GPUMemPoolReserve))),
		ReserveAll:         s.Bool(config.CUDAReserveMemory),
		NumTemp:            s.Int(config.ExecNumTemp),
		WorkerThreads:      s.Int(config.GPUWorkerThreads),
		AtomicCleanPolicy:  int(s.MemoryConfig().AtomicCleanPolicy),
		Trace:              e.Trace,
	}
	tune, err := sim.ParseCudnnTune(s.Enum(config.CudnnAutotune))
	if err != nil {
		return sim.Options{}, fmt.Errorf("MXNET_CUDNN_AUTOTUNE_DEFAULT: %w", err)
	}
	opts.CudnnTune = tune
	capacity, _ := sim.CapacityOf(opts)
	if e.Device.Name == "" {
		capacity = 0
	}
	switch e.Allocator {
	case "caching":
		opts.Allocator = sim.NewCaching(capacity)
	case "static":
		so := sim.DefaultStaticOptions()
		so.MatchRange = int64(s.Int(config.ExecMatchRange))
		so.InPlace = s.Bool(config.ExecEnableInplace)
		so.Capacity = capacity
		if err := so.Validate(); err != nil {
			return sim.Options{}, err
		}
		opts.Allocator = sim.NewStatic(so)
		opts.InPlace = so.InPlace
	default:
		opts.Allocator = sim.NewIdeal(capacity)
	}
	return opts, nil
}

// Capacity is the device's usable capacity in bytes (0: unlimited).
func (e *Env) Capacity() int64 {
	if e.Device.Name == "" {
		return 0
	}
	c, _ := sim.CapacityOf(sim.Options{Device: e.Device, PoolReservePercent: int(math.Round(e.Settings.Float(config.GPUMemPoolReserve)))})
	return c
}

// Limit is the memory strategies must fit: the budget if set, else the
// usable capacity (0: unlimited).
func (e *Env) Limit() int64 {
	if e.Budget > 0 {
		return e.Budget
	}
	return e.Capacity()
}
