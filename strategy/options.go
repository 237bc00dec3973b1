package strategy

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/remat-dev/remat/sim/alloc"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/dtr"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/mirror"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/sublinear"
)

// Allocator model names.
const (
	AllocIdeal   = "ideal"
	AllocCaching = "caching"
	AllocStatic  = "static"
)

// Allocators lists the allocator model names.
var Allocators = []string{AllocIdeal, AllocCaching, AllocStatic}

// DefaultAllocator is the allocator model when Options.Allocator is empty:
// PyTorch's caching allocator, the one most users train with.
const DefaultAllocator = AllocCaching

// DefaultSeed seeds the randomized searches when Options.Seed is 0.
const DefaultSeed uint64 = 2333

// DefaultGeneticIters is the number of GA iterations of sublinear-ga and
// sublinear-budget when MGB_SUBLINEAR_MEMORY_GENETIC_NR_ITER is left at its
// default of 0 (GA off): MegEngine's documented example value
// (genetic_nr_iter=20, references.md section 3).
const DefaultGeneticIters = 20

// Options is everything a strategy needs besides the graph. Build it with
// OptionsFrom, then set the device, allocator and budget of the run.
type Options struct {
	// Device is the hardware profile; the zero value is an unlimited
	// device with the default cost model.
	Device sim.Profile
	// Allocator is the allocator model: ideal, caching or static ("":
	// DefaultAllocator).
	Allocator string
	// Budget is the memory limit strategies plan for, in bytes (0: the
	// device's usable capacity).
	Budget int64
	// Seed seeds the randomized searches (0: DefaultSeed).
	Seed uint64
	// Trace makes the simulator record trace events (a Chrome trace).
	Trace bool
	// Timeline makes the simulator record memory over time (one point per
	// step, Result.Sim.Timeline) for plots; it costs memory proportional to
	// the plan's length.
	Timeline bool
	// Progress, when not nil, is told how long searches get on.
	Progress sim.Progress
	// DTRPlan makes the dtr strategy also record the schedule its run
	// amounts to (Result.Plan; 'sim plan --strategy dtr'). The run keeps
	// every compute, free and swap step in memory, so reports leave it off.
	DTRPlan bool

	// Settings is the snapshot the options came from (for provenance).
	Settings *config.Settings
	// Machine holds the simulator settings (pool reserve, workspaces,
	// in-place reuse, ...) from the settings snapshot.
	Machine MachineOptions
	// Mirror holds the mirror pass's settings.
	Mirror MirrorOptions
	// Search holds MegEngine's sublinear search settings. Its Sim field is
	// filled per run from Machine.
	Search sublinear.SearchOptions
	// DTR is the runtime evictor's configuration (budget set per run).
	DTR dtr.Config
	// DTRRematLimit (dtr.remat_limit) stops the dtr strategy's run as
	// thrash once its recomputation passes this many times the step's
	// compute (0: no limit).
	DTRRematLimit float64
	// Slots is optimal-chain's memory discretization (0:
	// chain.OptimalDefaultSlots); it also bounds the chain depth its DP
	// affords before grouping stages (chain.OptimalMaxStages).
	Slots int
	// DTREnabled records MEGENGINE_ENABLE_DROP / MEGENGINE_DTR_AUTO_DROP:
	// the sublinear strategies refuse to run with DTR enabled, as MegEngine
	// does (config.CheckExclusive).
	DTREnabled bool

	planLimit int64 // lowered planning limit after an allocator overshoot
}

// MachineOptions are the settings that shape the simulated memory.
type MachineOptions struct {
	PoolReservePercent int
	ReserveAll         bool
	NumTemp            int
	WorkerThreads      int
	AtomicCleanPolicy  int
	CudnnTune          sim.CudnnTune
	ConvLibrary        sim.ConvLibrary // setting conv.library (the pytorch preset: oneDNN on a CPU)
	CPUThreads         int             // setting cpu.threads (oneDNN's per-thread buffers)
	CPUISA             sim.CPUISA      // setting cpu.isa (oneDNN's channel blocks)
	ConvChannelsLast   bool            // setting conv.memory_format channels_last
	RNGStateBytes      int64           // setting recompute.rng_state_bytes (the pytorch preset on a CPU: 5056)
	MatchRange         int64
	InPlace            bool
}

// MirrorOptions are the mirror pass's settings.
type MirrorOptions struct {
	// DoMirror is MXNET_BACKWARD_DO_MIRROR for the mirror strategy. An
	// explicit value (environment, option or flag) is the global switch, so
	// MXNET_BACKWARD_DO_MIRROR=0 leaves only ops with force_mirroring=1
	// mirrored, as in MXNet; left at its default, choosing the strategy
	// turns it on.
	DoMirror bool
	// Variant selects the BatchNorm rule.
	Variant mirror.Variant
}

// DeviceKind is the kind of a device profile for the framework presets
// (config.Settings.WithPreset): a CPU when the profile's name is "cpu" or
// starts with "cpu-" (the built-in cpu profile, or a profile file named
// so), otherwise a GPU. The zero profile (an unlimited device) is a GPU.
func DeviceKind(p sim.Profile) config.DeviceKind {
	n := strings.ToLower(strings.TrimSpace(p.Name))
	if n == "cpu" || strings.HasPrefix(n, "cpu-") {
		return config.DeviceCPU
	}
	return config.DeviceGPU
}

// ForDevice returns s (nil: the built-in defaults) with the framework
// preset for dev's kind applied: each setting still at its built-in default
// takes the value the framework (setting framework.name) gives it on that
// kind of device. The CLI and the Go API call it before OptionsFrom and
// before importing a model, so that the preset decides both.
func ForDevice(s *config.Settings, dev sim.Profile) (*config.Settings, error) {
	if s == nil {
		s = config.Defaults()
	}
	return s.WithPreset(DeviceKind(dev))
}

// OptionsFor is ForDevice then OptionsFrom, with the device set: the
// options of a run on dev, and the settings they came from (for importing
// the model with the same preset).
func OptionsFor(s *config.Settings, dev sim.Profile) (Options, *config.Settings, error) {
	s, err := ForDevice(s, dev)
	if err != nil {
		return Options{}, nil, err
	}
	o, err := OptionsFrom(s)
	if err != nil {
		return Options{}, nil, err
	}
	o.Device = dev
	return o, s, nil
}

// OptionsFrom turns a settings snapshot (nil: the built-in defaults) into
// strategy options. It is the only place where settings become options: the
// CLI and the Go API both call it.
func OptionsFrom(s *config.Settings) (Options, error) {
	if s == nil {
		s = config.Defaults()
	}
	o := Options{Settings: s, Allocator: DefaultAllocator, Seed: DefaultSeed}
	tune, err := sim.ParseCudnnTune(s.Enum(config.CudnnAutotune))
	if err != nil {
		return Options{}, fmt.Errorf("MXNET_CUDNN_AUTOTUNE_DEFAULT: %w", err)
	}
	// conv.library: oneDNN for PyTorch on a CPU (the framework preset,
	// ForDevice), else cuDNN.
	lib, err := sim.ParseConvLibrary(s.Enum(config.ConvLibrary))
	if err != nil {
		return Options{}, fmt.Errorf("REMAT_CONV_LIBRARY: %w", err)
	}
	isa, err := sim.ParseCPUISA(s.Enum(config.CPUISA))
	if err != nil {
		return Options{}, fmt.Errorf("REMAT_CPU_ISA: %w", err)
	}
	o.Machine = MachineOptions{
		PoolReservePercent: int(math.Round(s.Float(config.GPUMemPoolReserve))),
		ReserveAll:         s.Bool(config.CUDAReserveMemory),
		NumTemp:            s.Int(config.ExecNumTemp),
		WorkerThreads:      s.Int(config.GPUWorkerThreads),
		AtomicCleanPolicy:  int(s.MemoryConfig().AtomicCleanPolicy),
		CudnnTune:          tune,
		ConvLibrary:        lib,
		CPUThreads:         s.Int(config.CPUThreads),
		CPUISA:             isa,
		ConvChannelsLast:   s.Enum(config.ConvMemoryFormat) == "channels_last",
		RNGStateBytes:      s.Size(config.RNGStateBytes),
		MatchRange:         int64(s.Int(config.ExecMatchRange)),
		InPlace:            s.Bool(config.ExecEnableInplace),
	}

	o.Mirror = MirrorOptions{DoMirror: true, Variant: mirror.MXNet17}
	if v := s.Value(config.BackwardDoMirror); v.Source.Kind != config.SourceDefault {
		o.Mirror.DoMirror = s.Bool(config.BackwardDoMirror)
	}

	so := sublinear.DefaultSearchOptions()
	so.ThreshNrTry = s.Int(config.SublinearThreshNrTry)
	so.GeneticIters = s.Int(config.SublinearGeneticNrIter)
	so.PoolSize = s.Int(config.SublinearGeneticPoolSize)
	so.Workers = s.Int(config.SublinearWorkers)
	so.LowerBound = s.Size(config.SublinearLowerBound)
	so.ForwardOnly = s.Bool(config.RecomputeForwardOnly)
	o.Search = so

	cfg := dtr.DefaultConfig()
	// The graph's op sequence is known, so the next-use distance is
	// available: lookahead (the setting's default) was the best or within
	// 1% of the best on resnet50, gpt and vgg19 at half their peak (dtr's
	// TestGraphHeuristics). A runtime's own heuristic predicts that runtime.
	h, err := dtr.ParseHeuristic(s.Enum(config.DTRHeuristic))
	if err != nil {
		return Options{}, fmt.Errorf("REMAT_DTR_HEURISTIC: %w", err)
	}
	cfg.Heuristic = h
	if v := s.Size(config.DTREvicteeMinimumSize); v >= 0 {
		cfg.EvicteeMinSize = v
	}
	cfg.Swap = s.Bool(config.DTREnableSwap)
	// Choosing the strategy enables dropping; an explicit
	// MEGENGINE_ENABLE_DROP or MEGENGINE_DTR_AUTO_DROP is honoured, so
	// DROP=0 with SWAP=1 gives a swap-only run.
	if v := s.Value(config.DTREnableDrop); v.Source.Kind != config.SourceDefault {
		cfg.Drop = s.Bool(config.DTREnableDrop)
	}
	if v := s.Value(config.DTRAutoDrop); v.Source.Kind != config.SourceDefault {
		cfg.AutoDrop = s.Bool(config.DTRAutoDrop)
	}
	cfg.Threshold = s.Size(config.DTREvictionThreshold)
	cfg.SavedOnly = s.Enum(config.DTRBudgetScope) == "saved"
	o.DTR = cfg
	o.DTRRematLimit = s.Float(config.DTRRematLimit)
	o.DTREnabled = s.DTREnabled()
	return o, nil
}

// validate checks the run-level fields.
func (o *Options) validate() error {
	switch o.Allocator {
	case "":
		o.Allocator = DefaultAllocator
	case AllocIdeal, AllocCaching, AllocStatic:
	default:
		return fmt.Errorf("allocator %q: expected one of ideal, caching, static", o.Allocator)
	}
	if o.Budget < 0 {
		return fmt.Errorf("budget %d bytes: expected >= 0", o.Budget)
	}
	if o.DTRRematLimit < 0 || math.IsNaN(o.DTRRematLimit) || math.IsInf(o.DTRRematLimit, 0) {
		return fmt.Errorf("DTRRematLimit %v: expected a finite number >= 0 (0: no limit)", o.DTRRematLimit)
	}
	if o.Settings == nil {
		return fmt.Errorf("options: no settings snapshot: build options with strategy.OptionsFrom")
	}
	if o.Seed == 0 {
		o.Seed = DefaultSeed
	}
	return nil
}

// Capacity is the device's usable capacity in bytes (0: unlimited).
func (o Options) Capacity() int64 {
	if o.Device.Name == "" {
		return 0
	}
	c, _ := sim.CapacityOf(sim.Options{Device: o.Device, PoolReservePercent: o.Machine.PoolReservePercent})
	return c
}

// Limit is the memory strategies must fit: the budget if set, else the
// usable capacity (0: unlimited).
func (o Options) Limit() int64 {
	if o.Budget > 0 {
		return o.Budget
	}
	return o.Capacity()
}

// planningLimit is the limit static planners aim at: Limit, or the lowered
// limit set after an allocator overshoot.
func (o Options) planningLimit() int64 {
	if o.planLimit > 0 {
		return o.planLimit
	}
	return o.Limit()
}

// SimOptions returns simulator options for one run: a fresh allocator of the
// chosen model sized to the usable capacity, and the machine settings.
func (o Options) SimOptions() (sim.Options, error) {
	return o.simOptions(o.Capacity())
}

// simOptions builds simulator options with an allocator of the given
// capacity (0: unlimited).
func (o Options) simOptions(capacity int64) (sim.Options, error) {
	m := o.Machine
	so := sim.Options{
		Device:             o.Device,
		PoolReservePercent: m.PoolReservePercent,
		ReserveAll:         m.ReserveAll,
		NumTemp:            m.NumTemp,
		WorkerThreads:      m.WorkerThreads,
		AtomicCleanPolicy:  m.AtomicCleanPolicy,
		CudnnTune:          m.CudnnTune,
		ConvLibrary:        m.ConvLibrary,
		CPUThreads:         m.CPUThreads,
		CPUISA:             m.CPUISA,
		ConvChannelsLast:   m.ConvChannelsLast,
		RNGStateBytes:      m.RNGStateBytes,
		Trace:              o.Trace,
	}
	switch o.Allocator {
	case AllocCaching, "":
		so.Allocator = alloc.NewCaching(capacity)
	case AllocStatic:
		st := alloc.DefaultStaticOptions()
		st.MatchRange = m.MatchRange
		st.InPlace = m.InPlace
		st.Capacity = capacity
		if err := st.Validate(); err != nil {
			return sim.Options{}, err
		}
		so.Allocator = alloc.NewStatic(st)
		so.InPlace = st.InPlace
	case AllocIdeal:
		so.Allocator = alloc.NewIdeal(capacity)
	default:
		return sim.Options{}, fmt.Errorf("allocator %q: expected one of ideal, caching, static", o.Allocator)
	}
	return so, nil
}

// judgeOptions are simulator options for planners that judge candidate
// plans by their allocated peak: the ideal allocator on an unlimited device
// with the run's machine settings.
func (o Options) judgeOptions() (sim.Options, error) {
	so, err := o.SimOptions()
	if err != nil {
		return so, err
	}
	so.Allocator = nil
	so.Capacity = -1
	so.Trace = false
	return so, nil
}

// WithBudgetRatio returns o with its budget set to ratio times the baseline
// (strategy none) allocated peak of g under o's device and allocator. The
// ratio must be in (0, 1] and the budget it gives at least one byte.
func WithBudgetRatio(ctx context.Context, g *graph.Graph, o Options, ratio float64) (Options, error) {
	if !(ratio > 0 && ratio <= 1) {
		return o, fmt.Errorf("budget ratio %g: expected a number in (0, 1]", ratio)
	}
	base, err := none.Plan(ctx, g, withoutBudget(o))
	if err != nil {
		return o, err
	}
	if base.Sim == nil {
		return o, fmt.Errorf("baseline: %s", base.Reason)
	}
	b := ratio * float64(base.Sim.PeakAllocated)
	if b < 1 {
		return o, fmt.Errorf("budget ratio %g of the baseline peak (%d bytes) is below one byte", ratio, base.Sim.PeakAllocated)
	}
	o.Budget = int64(b)
	return o, nil
}

func withoutBudget(o Options) Options {
	o.Budget = 0
	return o
}
