package config

import (
	"fmt"
	"math"
	"strings"
)

// Type is the value type of a setting.
type Type uint8

// Setting value types.
const (
	TypeBool   Type = iota + 1 // 0/1/true/false/yes/no/on/off
	TypeInt                    // base-10 integer within a range
	TypeSize                   // bytes with optional unit (see ParseSize)
	TypeEnum                   // one of a fixed set of choices (with aliases)
	TypeString                 // free text checked by a per-setting validator
	TypeFloat                  // finite decimal number within a range
)

// String returns the type's lower-case name.
func (t Type) String() string {
	switch t {
	case TypeBool:
		return "bool"
	case TypeInt:
		return "int"
	case TypeSize:
		return "size"
	case TypeEnum:
		return "enum"
	case TypeString:
		return "string"
	case TypeFloat:
		return "float"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// Choice is one allowed value of an enum setting.
type Choice struct {
	Name    string   // canonical spelling, shown as the value
	Aliases []string // other accepted spellings (e.g. the numeric code)
}

// Spec describes one setting. It is a copy: changing it changes nothing.
type Spec struct {
	Name        string   // setting name, e.g. "mirror.enabled"
	Env         string   // environment variable, e.g. "MXNET_BACKWARD_DO_MIRROR"
	Flag        string   // CLI flag of the sim subcommands, without dashes, e.g. "mirror"
	Attr        string   // per-op attribute key overriding it, or ""
	Type        Type     // value type
	Default     string   // default value; a formula such as "ncpu/2 (at least 1)" when it depends on the machine
	Accepted    string   // human description of the accepted values
	Choices     []Choice // enum choices (TypeEnum only)
	ReadOnce    bool     // captured the first time a process reads its settings; later changes are ignored
	Description string   // one-paragraph description shown by `sim env`
}

// def is the registry entry behind a key.
type def struct {
	name, env, flag, attr string
	typ                   Type
	readOnce              bool
	desc                  string

	// defaultFn returns the default's text for a machine with ncpu CPUs;
	// defaultDoc is the machine-independent text shown in documentation.
	defaultFn  func(ncpu int) string
	defaultDoc string

	// Int and size ranges (inclusive); maxFn overrides max when set.
	min, max int64
	maxFn    func(ncpu int) int64
	maxDoc   string
	// Float range (inclusive).
	fmin, fmax float64
	// plainUnit is the multiplier of a size given without unit (1 = bytes).
	plainUnit int64
	// Enum choices.
	choices []Choice
	// String validator: returns the canonical text or an error; accepted
	// describes what it accepts.
	validate func(string) (string, error)
	accepted string
}

func (d *def) maxFor(ncpu int) int64 {
	if d.maxFn != nil {
		return d.maxFn(ncpu)
	}
	return d.max
}

// acceptedText describes the accepted values; with ncpu < 1 machine-dependent
// bounds are given as formulas.
func (d *def) acceptedText(ncpu int) string {
	switch d.typ {
	case TypeBool:
		return BoolSyntax
	case TypeInt:
		hi := fmt.Sprint(d.max)
		if d.maxFn != nil {
			if ncpu < 1 {
				hi = d.maxDoc
			} else {
				hi = fmt.Sprint(d.maxFn(ncpu))
			}
		}
		if d.max == math.MaxInt64 && d.maxFn == nil {
			return fmt.Sprintf("an integer >= %d", d.min)
		}
		return fmt.Sprintf("an integer in %d..%s", d.min, hi)
	case TypeSize:
		s := SizeSyntax
		if d.plainUnit == MiB {
			s = "a size; a plain number means MiB (MegEngine's unit for this variable), units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB are accepted (KB..TB mean powers of 1024)"
		}
		return s
	case TypeEnum:
		parts := make([]string, len(d.choices))
		for i, c := range d.choices {
			parts[i] = strings.Join(append([]string{c.Name}, c.Aliases...), "|")
		}
		return "one of " + strings.Join(parts, ", ") + " (case-insensitive)"
	case TypeString:
		return d.accepted
	case TypeFloat:
		return fmt.Sprintf("a number in %s..%s", formatFloat(d.fmin), formatFloat(d.fmax))
	}
	return ""
}

func (d *def) spec() Spec {
	s := Spec{
		Name: d.name, Env: d.env, Flag: d.flag, Attr: d.attr, Type: d.typ,
		Default: d.defaultDoc, Accepted: d.acceptedText(0), ReadOnce: d.readOnce,
		Description: d.desc,
	}
	for _, c := range d.choices {
		s.Choices = append(s.Choices, Choice{Name: c.Name, Aliases: append([]string(nil), c.Aliases...)})
	}
	return s
}

// Key identifies a setting. The typed keys (BoolKey, IntKey, ...) implement it.
type Key interface {
	// Spec returns the setting's description.
	Spec() Spec
	index() int
}

// BoolKey identifies a boolean setting.
type BoolKey int

// IntKey identifies an integer setting.
type IntKey int

// SizeKey identifies a size (bytes) setting.
type SizeKey int

// EnumKey identifies an enumerated setting.
type EnumKey int

// StringKey identifies a free-text setting with a validator.
type StringKey int

// FloatKey identifies a floating-point setting.
type FloatKey int

// The settings. Each constant is an index into the registry; its Go type
// tells which getter reads it.
const (
	BackwardDoMirror         BoolKey   = iota // MXNET_BACKWARD_DO_MIRROR
	ExecEnableInplace        BoolKey   = iota // MXNET_EXEC_ENABLE_INPLACE
	ExecMatchRange           IntKey    = iota // MXNET_EXEC_MATCH_RANGE
	ExecNumTemp              IntKey    = iota // MXNET_EXEC_NUM_TEMP
	GPUWorkerThreads         IntKey    = iota // MXNET_GPU_WORKER_NTHREADS
	GPUCopyThreads           IntKey    = iota // MXNET_GPU_COPY_NTHREADS
	GPUMemPoolReserve        FloatKey  = iota // MXNET_GPU_MEM_POOL_RESERVE
	CudnnAutotune            EnumKey   = iota // MXNET_CUDNN_AUTOTUNE_DEFAULT
	ProfilerAutostart        BoolKey   = iota // MXNET_PROFILER_AUTOSTART
	SublinearThreshNrTry     IntKey    = iota // MGB_SUBLINEAR_MEMORY_THRESH_NR_TRY
	SublinearGeneticNrIter   IntKey    = iota // MGB_SUBLINEAR_MEMORY_GENETIC_NR_ITER
	SublinearGeneticPoolSize IntKey    = iota // MGB_SUBLINEAR_MEMORY_GENETIC_POOL_SIZE
	SublinearLowerBound      SizeKey   = iota // MGB_SUBLINEAR_MEMORY_LOWER_BOUND_MB
	SublinearWorkers         IntKey    = iota // MGB_SUBLINEAR_MEMORY_WORKERS
	DTREnableSwap            BoolKey   = iota // MEGENGINE_ENABLE_SWAP
	DTREnableDrop            BoolKey   = iota // MEGENGINE_ENABLE_DROP
	DTRAutoDrop              BoolKey   = iota // MEGENGINE_DTR_AUTO_DROP
	DTREvictionThreshold     SizeKey   = iota // MEGENGINE_DTR_EVICTION_THRESHOLD
	DTREvicteeMinimumSize    SizeKey   = iota // MEGENGINE_DTR_EVICTEE_MINIMUM_SIZE
	InplaceUpdate            BoolKey   = iota // MEGENGINE_INPLACE_UPDATE
	CUDAReserveMemory        BoolKey   = iota // MGB_CUDA_RESERVE_MEMORY
	ExecutionStrategy        StringKey = iota // MEGENGINE_EXECUTION_STRATEGY
	GEStaticMemoryPolicy     IntKey    = iota // GE_USE_STATIC_MEMORY
	Framework                EnumKey   = iota // REMAT_FRAMEWORK
	DropoutMask              EnumKey   = iota // REMAT_DROPOUT_MASK
	ConvLibrary              EnumKey   = iota // REMAT_CONV_LIBRARY
	CPUThreads               IntKey    = iota // REMAT_CPU_THREADS
	CPUISA                   EnumKey   = iota // REMAT_CPU_ISA
	ConvMemoryFormat         EnumKey   = iota // REMAT_CONV_MEMORY_FORMAT
	RNGStateBytes            SizeKey   = iota // REMAT_RNG_STATE_BYTES
	DTRHeuristic             EnumKey   = iota // REMAT_DTR_HEURISTIC
	RecomputeForwardOnly     BoolKey   = iota // REMAT_RECOMPUTE_FORWARD_ONLY
	DTRBudgetScope           EnumKey   = iota // REMAT_DTR_BUDGET_SCOPE
	DTRRematLimit            FloatKey  = iota // REMAT_DTR_REMAT_LIMIT
	numKeys                            = iota
)

// Unit tests check that every constant's Go type matches the registry type.

const maxCount = 1 << 20 // generous upper bound for thread/try/iteration counts

func constDefault(s string) func(int) string { return func(int) string { return s } }

// registry holds one def per key constant, in constant order.
var registry = [numKeys]def{
	BackwardDoMirror: {
		name: "mirror.enabled", env: "MXNET_BACKWARD_DO_MIRROR", flag: "mirror", attr: "force_mirroring",
		typ: TypeBool, defaultFn: constDefault("false"), defaultDoc: "false",
		desc: "Run MXNet's mirror pass: drop cheap forward outputs after forward and recompute them in backward. " +
			"A node's force_mirroring attribute overrides it for that node (1 forces mirroring on even when this is off, 0 forces it off).",
	},
	ExecEnableInplace: {
		name: "exec.inplace", env: "MXNET_EXEC_ENABLE_INPLACE", flag: "allocator-inplace",
		typ: TypeBool, defaultFn: constDefault("true"), defaultDoc: "true",
		desc: "Let an op's output reuse the memory of an input that dies at that op (in-place reuse in the memory planner).",
	},
	ExecMatchRange: {
		name: "exec.match_range", env: "MXNET_EXEC_MATCH_RANGE", flag: "allocator-match-range",
		typ: TypeInt, defaultFn: constDefault("10"), defaultDoc: "10", min: 0, max: 1 << 16,
		desc: "Size-matching range of the memory-sharing planner: a free block may be reused for a request up to this factor smaller. 0 disables sharing.",
	},
	ExecNumTemp: {
		name: "exec.num_temp", env: "MXNET_EXEC_NUM_TEMP", flag: "num-temp",
		typ: TypeInt, defaultFn: constDefault("1"), defaultDoc: "1", min: 1, max: 1 << 10,
		desc: "Temporary workspaces per device. For minimum memory keep min(exec.num_temp, gpu.worker_threads) = 1.",
	},
	GPUWorkerThreads: {
		name: "gpu.worker_threads", env: "MXNET_GPU_WORKER_NTHREADS", flag: "gpu-workers", readOnce: true,
		typ: TypeInt, defaultFn: constDefault("2"), defaultDoc: "2", min: 1, max: 1 << 10,
		desc: "Concurrent compute workers per GPU; more workers keep more temporaries alive at once. Read once, when the engine starts.",
	},
	GPUCopyThreads: {
		name: "gpu.copy_threads", env: "MXNET_GPU_COPY_NTHREADS", flag: "gpu-copy-workers", readOnce: true,
		typ: TypeInt, defaultFn: constDefault("1"), defaultDoc: "1", min: 1, max: 1 << 10,
		desc: "Copy workers per GPU (host<->device transfers, used by swapping). Read once, when the engine starts.",
	},
	GPUMemPoolReserve: {
		name: "gpu.pool_reserve_percent", env: "MXNET_GPU_MEM_POOL_RESERVE", flag: "pool-reserve", readOnce: true,
		typ: TypeFloat, defaultFn: constDefault("5"), defaultDoc: "5", fmin: 0, fmax: 100,
		desc: "Percent of device memory kept out of the allocator's pool. Read once, when the pool is created.",
	},
	CudnnAutotune: {
		name: "cudnn.autotune", env: "MXNET_CUDNN_AUTOTUNE_DEFAULT", flag: "cudnn-autotune", attr: "cudnn_tune",
		typ: TypeEnum, defaultFn: constDefault("limited_workspace"), defaultDoc: "limited_workspace (1)",
		choices: []Choice{
			{Name: "off", Aliases: []string{"0"}},
			{Name: "limited_workspace", Aliases: []string{"1"}},
			{Name: "fastest", Aliases: []string{"2"}},
		},
		desc: "Convolution algorithm choice when an op has no cudnn_tune attribute: 0 off, 1 limited_workspace (bounded workspace), 2 fastest (largest workspace). " +
			"Default 1 as in current MXNet and its later docs; the older MXNet environment table said 0.",
	},
	ProfilerAutostart: {
		name: "profiler.autostart", env: "MXNET_PROFILER_AUTOSTART", flag: "profile", readOnce: true,
		typ: TypeBool, defaultFn: constDefault("false"), defaultDoc: "false",
		desc: "Write a Chrome trace (profile.json) of the run in the working directory. Read once, at start-up.",
	},
	SublinearThreshNrTry: {
		name: "sublinear.thresh_nr_try", env: "MGB_SUBLINEAR_MEMORY_THRESH_NR_TRY", flag: "sublinear-thresh-nr-try",
		typ: TypeInt, defaultFn: constDefault("10"), defaultDoc: "10", min: 1, max: maxCount,
		desc: "Number of block-size thresholds tried by the sublinear search in each preset sweep.",
	},
	SublinearGeneticNrIter: {
		name: "sublinear.genetic_nr_iter", env: "MGB_SUBLINEAR_MEMORY_GENETIC_NR_ITER", flag: "sublinear-genetic-nr-iter",
		typ: TypeInt, defaultFn: constDefault("0"), defaultDoc: "0", min: 0, max: maxCount,
		desc: "Generations of the genetic refinement of sublinear split points; 0 turns the genetic search off.",
	},
	SublinearGeneticPoolSize: {
		name: "sublinear.genetic_pool_size", env: "MGB_SUBLINEAR_MEMORY_GENETIC_POOL_SIZE", flag: "sublinear-genetic-pool-size",
		typ: TypeInt, defaultFn: constDefault("20"), defaultDoc: "20", min: 1, max: maxCount,
		desc: "Records selected per generation by the genetic search.",
	},
	SublinearLowerBound: {
		name: "sublinear.lower_bound", env: "MGB_SUBLINEAR_MEMORY_LOWER_BOUND_MB", flag: "sublinear-lower-bound",
		typ: TypeSize, defaultFn: constDefault("0"), defaultDoc: "0", min: 0, max: math.MaxInt64, plainUnit: MiB,
		desc: "Memory the sublinear plan may use anyway: when the best peak is below it, recomputed ops are turned back into checkpoints (buying back time) until the peak reaches it. " +
			"A plain number is MiB, as MegEngine reads this variable; 0 turns the refinement off.",
	},
	SublinearWorkers: {
		name: "sublinear.workers", env: "MGB_SUBLINEAR_MEMORY_WORKERS", flag: "sublinear-workers",
		typ: TypeInt, defaultFn: func(ncpu int) string { return fmt.Sprint(max(ncpu/2, 1)) }, defaultDoc: "ncpu/2 (at least 1)",
		min: 1, maxFn: func(ncpu int) int64 { return 4 * int64(max(ncpu, 1)) }, maxDoc: "4*ncpu",
		desc: "Worker goroutines evaluating sublinear plans. Results do not depend on it.",
	},
	DTREnableSwap: {
		name: "dtr.swap", env: "MEGENGINE_ENABLE_SWAP", flag: "dtr-swap", readOnce: true,
		typ: TypeBool, defaultFn: constDefault("false"), defaultDoc: "false",
		desc: "Let the runtime evictor swap tensors to host memory instead of only dropping them (older MegEngine releases). Read once.",
	},
	DTREnableDrop: {
		name: "dtr.drop", env: "MEGENGINE_ENABLE_DROP", flag: "dtr-drop", readOnce: true,
		typ: TypeBool, defaultFn: constDefault("false"), defaultDoc: "false",
		desc: "Enable dynamic tensor rematerialization (drop and recompute at run time). Cannot be combined with the sublinear search. Read once.",
	},
	DTRAutoDrop: {
		name: "dtr.auto_drop", env: "MEGENGINE_DTR_AUTO_DROP", flag: "dtr-auto-drop", readOnce: true,
		typ: TypeBool, defaultFn: constDefault("false"), defaultDoc: "false",
		desc: "Enable DTR with automatic eviction when memory runs short. Cannot be combined with the sublinear search. Read once.",
	},
	DTREvictionThreshold: {
		name: "dtr.eviction_threshold", env: "MEGENGINE_DTR_EVICTION_THRESHOLD", flag: "dtr-threshold", readOnce: true,
		typ: TypeSize, defaultFn: constDefault("0"), defaultDoc: "0", min: 0, max: math.MaxInt64, plainUnit: 1,
		desc: "DTR soft memory limit: eviction starts when usage exceeds it (a hint, not a hard limit); 0 means no threshold. Read once.",
	},
	DTREvicteeMinimumSize: {
		name: "dtr.evictee_minimum_size", env: "MEGENGINE_DTR_EVICTEE_MINIMUM_SIZE", flag: "dtr-evictee-min-size", readOnce: true,
		typ: TypeSize, defaultFn: constDefault("1MiB"), defaultDoc: "1MiB (1048576)", min: 0, max: math.MaxInt64, plainUnit: 1,
		desc: "Tensors at least this large are the heuristic's eviction candidates; a smaller one is evicted only when no larger candidate is left, the largest first. Read once.",
	},
	InplaceUpdate: {
		name: "optimizer.inplace_update", env: "MEGENGINE_INPLACE_UPDATE", flag: "inplace-update", readOnce: true,
		typ: TypeBool, defaultFn: constDefault("false"), defaultDoc: "false",
		desc: "Update parameters in place, saving one copy of the parameters. Read once, when the optimizer module loads.",
	},
	CUDAReserveMemory: {
		name: "cuda.reserve_memory", env: "MGB_CUDA_RESERVE_MEMORY", flag: "reserve-memory", readOnce: true,
		typ: TypeBool, defaultFn: constDefault("false"), defaultDoc: "false",
		desc: "Reserve all device memory up front (reserved = device capacity from the start). Read once.",
	},
	ExecutionStrategy: {
		name: "kernel.execution_strategy", env: "MEGENGINE_EXECUTION_STRATEGY", flag: "execution-strategy", readOnce: true,
		typ: TypeString, defaultFn: constDefault("HEURISTIC"), defaultDoc: "HEURISTIC",
		validate: validateStrategy,
		accepted: "HEURISTIC, PROFILE, REPRODUCIBLE, OPTIMIZED or a combination joined by '_' such as PROFILE_REPRODUCIBLE " +
			"(case-insensitive; HEURISTIC and PROFILE exclude each other)",
		desc: "Kernel algorithm choice: HEURISTIC picks by rule, PROFILE measures candidates, REPRODUCIBLE keeps deterministic kernels only, OPTIMIZED uses optimized kernels. Read once, at import.",
	},
	GEStaticMemoryPolicy: {
		name: "ge.static_memory_policy", env: "GE_USE_STATIC_MEMORY", flag: "static-memory", readOnce: true,
		typ: TypeInt, defaultFn: constDefault("0"), defaultDoc: "0", min: 0, max: 4,
		desc: "0 dynamic allocation by actual size; 2 static shapes: one arena sized to the largest graph of a session, reused across graphs; " +
			"3 dynamic expansion for dynamic shapes; 4 both 2 and 3; 1 behaves as 2. 2 and 4 are not allowed with concurrently running graphs; " +
			"must not be combined with MemoryConfig.StaticMemoryPolicy. Read once, at session start.",
	},
	Framework: {
		name: "framework.name", env: "REMAT_FRAMEWORK", flag: "framework",
		typ: TypeEnum, defaultFn: constDefault("pytorch"), defaultDoc: "pytorch",
		choices: []Choice{{Name: "pytorch"}, {Name: "mxnet"}, {Name: "megengine"}},
		desc: "The framework whose training step is simulated, for every input (zoo, graph files, ONNX, DTR logs). " +
			"Its preset sets the defaults of the settings it decides for the device's kind (CPU or GPU): " +
			"see the presets table in docs/settings.md. An environment variable or flag for such a setting still wins.",
	},
	DropoutMask: {
		name: "dropout.mask", env: "REMAT_DROPOUT_MASK", flag: "dropout-mask",
		typ: TypeEnum, defaultFn: constDefault("byte"), defaultDoc: "byte",
		choices: []Choice{{Name: "byte"}, {Name: "like-input"}},
		desc: "What a training-mode dropout of an imported ONNX model saves for its backward pass: byte, a one-byte mask (PyTorch on CUDA: the fused native_dropout's bool mask), " +
			"or like-input, a tensor of the input's type and shape (PyTorch on CPU: input * noise saves the f32 noise).",
	},
	ConvLibrary: {
		name: "conv.library", env: "REMAT_CONV_LIBRARY", flag: "conv-library",
		typ: TypeEnum, defaultFn: constDefault("cudnn"), defaultDoc: "cudnn",
		choices: []Choice{{Name: "cudnn"}, {Name: "onednn", Aliases: []string{"mkldnn"}}},
		desc: "Whose convolution kernels the simulator models the temporary memory of: cudnn (the algorithm workspace cudnn.autotune chooses) " +
			"or onednn (PyTorch's CPU convolutions: oneDNN's reorder buffers, or slow_conv2d's im2col columns where PyTorch does not use oneDNN).",
	},
	CPUThreads: {
		name: "cpu.threads", env: "REMAT_CPU_THREADS", flag: "cpu-threads",
		typ: TypeInt, defaultFn: constDefault("2"), defaultDoc: "2", min: 1, max: 1 << 10,
		desc: "Threads PyTorch's CPU kernels run with (torch.get_num_threads(); set it to what OMP_NUM_THREADS or torch.set_num_threads gives PyTorch). With conv.library onednn, oneDNN's weight gradient of a " +
			"depthwise convolution its depthwise kernel does not take (a kernel at least 4 wide, or an image too small for the kernel) keeps a scratch buffer per thread, and with one thread PyTorch runs an unstrided 1x1 convolution of a batch below 16 without oneDNN.",
	},
	CPUISA: {
		name: "cpu.isa", env: "REMAT_CPU_ISA", flag: "cpu-isa",
		typ: TypeEnum, defaultFn: constDefault("avx512"), defaultDoc: "avx512",
		choices: []Choice{{Name: "avx512", Aliases: []string{"avx512_core"}}, {Name: "avx2"}},
		desc: "The vector instruction set oneDNN runs PyTorch's CPU convolutions with (the best the CPU has, or ONEDNN_MAX_CPU_ISA): with conv.library onednn, " +
			"its blocked layouts pad channels to 16 (avx512) or 8 (avx2), and a channels-last depthwise convolution's weight gradient takes 256 (avx512) or 64 (avx2) times the weight.",
	},
	ConvMemoryFormat: {
		name: "conv.memory_format", env: "REMAT_CONV_MEMORY_FORMAT", flag: "conv-memory-format",
		typ: TypeEnum, defaultFn: constDefault("contiguous"), defaultDoc: "contiguous",
		choices: []Choice{{Name: "contiguous", Aliases: []string{"nchw"}}, {Name: "channels_last", Aliases: []string{"nhwc"}}},
		desc: "The memory format PyTorch runs a graph's convolutions in when the graph does not record it (an ONNX import, a zoo model; remat_torch.trace records it): " +
			"channels_last is a model moved with model.to(memory_format=torch.channels_last) and given channels-last inputs. With conv.library onednn, a channels-last convolution's temporaries are the weight's, not reordered activations, and its backward copies a gradient that arrives contiguous (after a mean or a flatten); an ONNX import's InstanceNormalization copies its input to the contiguous layout, as PyTorch's instance_norm does.",
	},
	RNGStateBytes: {
		name: "recompute.rng_state_bytes", env: "REMAT_RNG_STATE_BYTES", flag: "rng-state-bytes",
		typ: TypeSize, defaultFn: constDefault("0"), defaultDoc: "0", min: 0, max: 1 << 30, plainUnit: 1,
		desc: "Bytes of the simulated device's memory that a random op (dropout) keeps for its RNG state from its first run to the end of the backward pass when a plan recomputes it, " +
			"so that the recompute draws the same numbers (remat_torch.apply saves torch.get_rng_state(), a 5056-byte CPU tensor, per recomputed random op, as torch.utils.checkpoint does per checkpointed segment; on a GPU it and the CUDA state are host memory).",
	},
	DTRHeuristic: {
		name: "dtr.heuristic", env: "REMAT_DTR_HEURISTIC", flag: "dtr-heuristic",
		typ: TypeEnum, defaultFn: constDefault("lookahead"), defaultDoc: "lookahead",
		choices: []Choice{
			{Name: "dtr", Aliases: []string{"full", "h_dtr", "dtr-full"}},
			{Name: "dtr-eqclass", Aliases: []string{"eqclass", "eq-class", "dtr-eq-class"}},
			{Name: "dtr-local", Aliases: []string{"local"}},
			{Name: "msps"},
			{Name: "lru"},
			{Name: "size", Aliases: []string{"largest", "largest-size"}},
			{Name: "megengine", Aliases: []string{"mge"}},
			{Name: "lookahead", Aliases: []string{"belady"}},
			{Name: "lookahead-msps", Aliases: []string{"belady-msps"}},
			{Name: "lookahead-dtr", Aliases: []string{"belady-dtr"}},
		},
		desc: "The heuristic the dtr strategy evicts by on a training graph (docs/dtr.md has the formulas). " +
			"The default, lookahead, uses the graph's known op sequence (the next use of each tensor), which a runtime cannot know; " +
			"to ask what a runtime DTR does, give its heuristic: megengine for MegEngine's, dtr-eqclass (or the one passed to it) for remat_torch.dtr. " +
			"dtr, msps and lookahead-dtr sum the evicted regions next to a candidate by walking them: where a deep model's evicted tensors form one region (GPT at batch 1), their time can grow with the square of the depth (docs/dtr.md, \"Region key parts\"). " +
			"Sweeps of a DTR log take theirs from --heuristic.",
	},
	RecomputeForwardOnly: {
		name: "recompute.forward_only", env: "REMAT_RECOMPUTE_FORWARD_ONLY", flag: "recompute-forward-only",
		typ: TypeBool, defaultFn: constDefault("false"), defaultDoc: "false",
		desc: "Let the sublinear strategies (sublinear, sublinear-ga, sublinear-budget) recompute only forward ops, and only for the backward pass: a tensor stays until its last forward reader, and no backward op runs twice. " +
			"MegEngine's pass (the default, false) duplicates any operator of the sequence, backward ones included, and may drop a tensor between two forward readers; " +
			"in an eager PyTorch step the forward's Python references keep a tensor until its last forward use and autograd runs each backward node once, so remat_torch.apply cannot carry out such plans (the pytorch preset sets true).",
	},
	DTRBudgetScope: {
		name: "dtr.budget_scope", env: "REMAT_DTR_BUDGET_SCOPE", flag: "dtr-budget-scope",
		typ: TypeEnum, defaultFn: constDefault("all"), defaultDoc: "all",
		choices: []Choice{{Name: "all"}, {Name: "saved", Aliases: []string{"saved-activations"}}},
		desc: "What the dtr strategy's budget bounds on a training graph. all (the default, as in the DTR paper and MegEngine): every byte of the step; the runtime evicts whatever it can to stay under it. " +
			"saved: only the saved activations (tensors a forward op makes and the backward or update reads, at least dtr.evictee_minimum_size bytes), each from the op that saves it on, as remat_torch.dtr's runtime does; " +
			"inputs, parameters, optimizer state, gradients and the backward's working set are never evicted and come on top, so the peak passes the budget by them. " +
			"Give remat_torch.dtr's budget_bytes as --budget with saved to predict that runtime.",
	},
	DTRRematLimit: {
		name: "dtr.remat_limit", env: "REMAT_DTR_REMAT_LIMIT", flag: "dtr-remat-limit",
		typ: TypeFloat, defaultFn: constDefault("3"), defaultDoc: "3", fmin: 0, fmax: 1000,
		desc: "Stop a run of the dtr strategy as thrash once what it recomputes takes more than this many times the step's compute without recomputation (3, the default: the step would take more than four times as long); 0 means no limit. " +
			"1 is the bound sim sweep and the DTR paper call thrashing. Past the bound the evictor mostly recomputes what it has just evicted, and a run's time and memory grow with the recomputes rather than with the graph.",
	},
}

// strategyParts lists the components of an execution strategy in canonical order.
var strategyParts = []string{"HEURISTIC", "PROFILE", "REPRODUCIBLE", "OPTIMIZED"}

// validateStrategy canonicalizes a MegEngine execution strategy such as
// "profile_reproducible" into "PROFILE_REPRODUCIBLE".
func validateStrategy(s string) (string, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	if t == "" {
		return "", fmt.Errorf("empty execution strategy")
	}
	seen := make([]bool, len(strategyParts))
	for _, p := range strings.Split(t, "_") {
		found := false
		for i, name := range strategyParts {
			if p == name {
				seen[i], found = true, true
			}
		}
		if !found {
			return "", fmt.Errorf("unknown strategy component %q", p)
		}
	}
	if seen[0] && seen[1] {
		return "", fmt.Errorf("HEURISTIC and PROFILE exclude each other")
	}
	var out []string
	for i, name := range strategyParts {
		if seen[i] {
			out = append(out, name)
		}
	}
	return strings.Join(out, "_"), nil
}

func (k BoolKey) index() int   { return int(k) }
func (k IntKey) index() int    { return int(k) }
func (k SizeKey) index() int   { return int(k) }
func (k EnumKey) index() int   { return int(k) }
func (k StringKey) index() int { return int(k) }
func (k FloatKey) index() int  { return int(k) }

// lookupDef returns the def of an index if it is valid and of type t.
func lookupDef(i int, t Type) *def {
	if i < 0 || i >= int(numKeys) || registry[i].typ != t {
		return nil
	}
	return &registry[i]
}

func specOf(i int, t Type) Spec {
	if d := lookupDef(i, t); d != nil {
		return d.spec()
	}
	return Spec{}
}

// Spec returns the setting's description (zero Spec for an invalid key).
func (k BoolKey) Spec() Spec { return specOf(int(k), TypeBool) }

// Spec returns the setting's description (zero Spec for an invalid key).
func (k IntKey) Spec() Spec { return specOf(int(k), TypeInt) }

// Spec returns the setting's description (zero Spec for an invalid key).
func (k SizeKey) Spec() Spec { return specOf(int(k), TypeSize) }

// Spec returns the setting's description (zero Spec for an invalid key).
func (k EnumKey) Spec() Spec { return specOf(int(k), TypeEnum) }

// Spec returns the setting's description (zero Spec for an invalid key).
func (k StringKey) Spec() Spec { return specOf(int(k), TypeString) }

// Spec returns the setting's description (zero Spec for an invalid key).
func (k FloatKey) Spec() Spec { return specOf(int(k), TypeFloat) }

// Name returns the setting name ("" for an invalid key).
func (k BoolKey) Name() string { return k.Spec().Name }

// Name returns the setting name ("" for an invalid key).
func (k IntKey) Name() string { return k.Spec().Name }

// Name returns the setting name ("" for an invalid key).
func (k SizeKey) Name() string { return k.Spec().Name }

// Name returns the setting name ("" for an invalid key).
func (k EnumKey) Name() string { return k.Spec().Name }

// Name returns the setting name ("" for an invalid key).
func (k StringKey) Name() string { return k.Spec().Name }

// Name returns the setting name ("" for an invalid key).
func (k FloatKey) Name() string { return k.Spec().Name }

// Specs returns every setting's description, sorted by name.
func Specs() []Spec {
	out := make([]Spec, 0, numKeys)
	for _, i := range sortedIndexes {
		out = append(out, registry[i].spec())
	}
	return out
}

// sortedIndexes lists registry indexes sorted by setting name.
var sortedIndexes = func() []int {
	idx := make([]int, numKeys)
	for i := range idx {
		idx[i] = i
	}
	// Insertion sort keeps this dependency-free and it runs once.
	for i := 1; i < len(idx); i++ {
		for j := i; j > 0 && registry[idx[j]].name < registry[idx[j-1]].name; j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	return idx
}()

// resolve finds a setting by name, environment variable, flag (with or
// without leading dashes) or attribute key.
func resolve(key string) (int, bool) {
	k := strings.TrimSpace(key)
	flag := strings.TrimLeft(k, "-")
	for i := range registry {
		d := &registry[i]
		if k == d.name || k == d.env || flag == d.flag || (d.attr != "" && k == d.attr) {
			return i, true
		}
	}
	return -1, false
}

// knownKeysText lists the accepted setting names for error messages.
func knownKeysText() string {
	names := make([]string, 0, numKeys)
	for _, i := range sortedIndexes {
		names = append(names, registry[i].name)
	}
	return "a setting name (" + strings.Join(names, ", ") + "), its environment variable or its flag"
}
