package config

import (
	"bytes"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files")

// golden compares got with the file, or rewrites it with -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./config -update")
	assert.Equal(t, string(want), string(got), "%s differs; run go test ./config -update and review the diff", path)
}

func TestRegistryConsistency(t *testing.T) {
	keys := map[int]Type{
		int(BackwardDoMirror): TypeBool, int(ExecEnableInplace): TypeBool, int(ExecMatchRange): TypeInt,
		int(ExecNumTemp): TypeInt, int(GPUWorkerThreads): TypeInt, int(GPUCopyThreads): TypeInt,
		int(GPUMemPoolReserve): TypeFloat, int(CudnnAutotune): TypeEnum, int(ProfilerAutostart): TypeBool,
		int(SublinearThreshNrTry): TypeInt, int(SublinearGeneticNrIter): TypeInt, int(SublinearGeneticPoolSize): TypeInt,
		int(SublinearLowerBound): TypeSize, int(SublinearWorkers): TypeInt, int(DTREnableSwap): TypeBool,
		int(DTREnableDrop): TypeBool, int(DTRAutoDrop): TypeBool, int(DTREvictionThreshold): TypeSize,
		int(DTREvicteeMinimumSize): TypeSize, int(InplaceUpdate): TypeBool, int(CUDAReserveMemory): TypeBool,
		int(ExecutionStrategy): TypeString, int(GEStaticMemoryPolicy): TypeInt,
		int(Framework): TypeEnum, int(DropoutMask): TypeEnum, int(ConvLibrary): TypeEnum,
		int(CPUThreads):           TypeInt,
		int(CPUISA):               TypeEnum,
		int(ConvMemoryFormat):     TypeEnum,
		int(RNGStateBytes):        TypeSize,
		int(DTRHeuristic):         TypeEnum,
		int(RecomputeForwardOnly): TypeBool,
		int(DTRBudgetScope):       TypeEnum,
		int(DTRRematLimit):        TypeFloat,
	}
	require.Len(t, keys, int(numKeys), "every registry entry has exactly one typed constant")
	for i, typ := range keys {
		assert.Equal(t, typ, registry[i].typ, "key %d (%s): Go key type and registry type differ", i, registry[i].name)
	}
	seen := map[string]string{}
	for i := range registry {
		d := &registry[i]
		for _, id := range []string{d.name, d.env, d.flag} {
			require.NotEmpty(t, id, "entry %d", i)
			prev, dup := seen[id]
			require.False(t, dup, "%q used by %s and %s", id, prev, d.name)
			seen[id] = d.name
		}
		assert.NotEmpty(t, d.desc, d.name)
		assert.NotEmpty(t, d.defaultDoc, d.name)
		for _, ncpu := range []int{1, 2, 8, 64} {
			_, err := d.parse(d.defaultFn(ncpu), ncpu, Source{Kind: SourceDefault}, "default")
			assert.NoError(t, err, "default of %s with ncpu=%d", d.name, ncpu)
		}
		_, ok := resolve(d.env)
		assert.True(t, ok)
	}
}

func TestSeedDefaults(t *testing.T) {
	// Defaults from /work/shared/references.md sections 3, 5 and 6.
	s, warns, err := Load(MapEnv{}, WithNumCPU(8))
	require.NoError(t, err)
	assert.Empty(t, warns)
	assert.False(t, s.Bool(BackwardDoMirror))
	assert.True(t, s.Bool(ExecEnableInplace))
	assert.Equal(t, 10, s.Int(ExecMatchRange))
	assert.Equal(t, 1, s.Int(ExecNumTemp))
	assert.Equal(t, 2, s.Int(GPUWorkerThreads))
	assert.Equal(t, 1, s.Int(GPUCopyThreads))
	assert.Equal(t, 5.0, s.Float(GPUMemPoolReserve))
	assert.Equal(t, "limited_workspace", s.Enum(CudnnAutotune))
	assert.Equal(t, int64(1), s.Value(CudnnAutotune).Int())
	assert.False(t, s.Bool(ProfilerAutostart))
	assert.Equal(t, 10, s.Int(SublinearThreshNrTry))
	assert.Equal(t, 0, s.Int(SublinearGeneticNrIter))
	assert.Equal(t, 20, s.Int(SublinearGeneticPoolSize))
	assert.Equal(t, int64(0), s.Size(SublinearLowerBound))
	assert.Equal(t, 4, s.Int(SublinearWorkers))
	assert.Equal(t, int64(0), s.Size(DTREvictionThreshold))
	assert.Equal(t, int64(1048576), s.Size(DTREvicteeMinimumSize))
	assert.False(t, s.DTREnabled())
	assert.False(t, s.Bool(InplaceUpdate))
	assert.False(t, s.Bool(CUDAReserveMemory))
	assert.Equal(t, "HEURISTIC", s.Text(ExecutionStrategy))
	assert.Equal(t, StaticDynamic, s.StaticMemoryPolicy())
	for _, r := range s.Rows(nil) {
		assert.Equal(t, "default", r.Source, r.Name)
		assert.Equal(t, r.Default, r.Value, r.Name)
	}
}

func TestSublinearWorkersDependOnNCPU(t *testing.T) {
	for _, tc := range []struct{ ncpu, def, max int }{{1, 1, 4}, {2, 1, 8}, {3, 1, 12}, {8, 4, 32}} {
		s, _, err := Load(MapEnv{}, WithNumCPU(tc.ncpu))
		require.NoError(t, err)
		assert.Equal(t, tc.def, s.Int(SublinearWorkers), "ncpu=%d", tc.ncpu)
		_, err = s.With("sublinear.workers", itoa(tc.max), OptionSource(""))
		assert.NoError(t, err)
		_, err = s.With("sublinear.workers", itoa(tc.max+1), OptionSource(""))
		assert.Error(t, err)
		_, err = s.With("sublinear.workers", "0", OptionSource(""))
		assert.Error(t, err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestPrecedence(t *testing.T) {
	// cudnn.autotune: default limited_workspace; every source sets a
	// distinct value or name so the winner is visible.
	type tc struct {
		env, flag, opt, attr string
		want, src            string
	}
	cases := []tc{
		{want: "limited_workspace", src: "default"},
		{env: "2", want: "fastest", src: "env MXNET_CUDNN_AUTOTUNE_DEFAULT"},
		{flag: "off", want: "off", src: "flag --cudnn-autotune"},
		{opt: "0", want: "off", src: "option"},
		{attr: "fastest", want: "fastest", src: "attribute cudnn_tune"},
		{env: "2", flag: "off", want: "off", src: "flag --cudnn-autotune"},
		{env: "0", opt: "2", want: "fastest", src: "option"},
		{env: "0", attr: "2", want: "fastest", src: "attribute cudnn_tune"},
		{flag: "off", attr: "1", want: "limited_workspace", src: "attribute cudnn_tune"},
		{opt: "off", attr: "fastest", want: "fastest", src: "attribute cudnn_tune"},
		{env: "2", flag: "0", attr: "limited_workspace", want: "limited_workspace", src: "attribute cudnn_tune"},
		{env: "2", opt: "0", attr: "1", want: "limited_workspace", src: "attribute cudnn_tune"},
	}
	for _, c := range cases {
		env := MapEnv{}
		if c.env != "" {
			env["MXNET_CUDNN_AUTOTUNE_DEFAULT"] = c.env
		}
		s, _, err := Load(env, WithNumCPU(4))
		require.NoError(t, err)
		if c.flag != "" {
			s, err = s.With("--cudnn-autotune", c.flag, FlagSource(""))
			require.NoError(t, err)
		}
		if c.opt != "" {
			s, err = s.With("cudnn.autotune", c.opt, OptionSource(""))
			require.NoError(t, err)
		}
		attrs := map[string]string{"other": "x"}
		if c.attr != "" {
			attrs["cudnn_tune"] = c.attr
		}
		v, err := s.ForOp("MXNET_CUDNN_AUTOTUNE_DEFAULT", attrs)
		require.NoError(t, err)
		assert.Equal(t, c.want, v.Text, "%+v", c)
		assert.Equal(t, c.src, v.Source.String(), "%+v", c)
		if c.attr == "" {
			assert.Equal(t, v, s.Value(CudnnAutotune))
		}
	}
}

func TestMirrorAttributeBeatsEverything(t *testing.T) {
	// references.md section 1: force_mirroring=1 mirrors even when the env var is 0.
	s, _, err := Load(MapEnv{"MXNET_BACKWARD_DO_MIRROR": "0"})
	require.NoError(t, err)
	s, err = s.With("mirror", "false", FlagSource("mirror"))
	require.NoError(t, err)
	v, err := s.ForOp(BackwardDoMirror.Name(), map[string]string{"force_mirroring": "1"})
	require.NoError(t, err)
	assert.True(t, v.Bool())
	assert.Equal(t, "attribute force_mirroring", v.Source.String())
	v, err = s.ForOp("mirror.enabled", nil)
	require.NoError(t, err)
	assert.False(t, v.Bool())
	assert.Equal(t, "flag --mirror", v.Source.String())

	// And force_mirroring=0 forces it off when the global default is on.
	s2, _, err := Load(MapEnv{"MXNET_BACKWARD_DO_MIRROR": "1"})
	require.NoError(t, err)
	v, err = s2.ForOp("mirror.enabled", map[string]string{"force_mirroring": "false"})
	require.NoError(t, err)
	assert.False(t, v.Bool())
	// A setting without attribute ignores attrs.
	v, err = s2.ForOp("dtr.eviction_threshold", map[string]string{"force_mirroring": "1", "dtr.eviction_threshold": "1"})
	require.NoError(t, err)
	assert.Equal(t, "default", v.Source.String())
}

func TestWithLaterWinsAndImmutability(t *testing.T) {
	base, _, err := Load(MapEnv{"MEGENGINE_DTR_EVICTION_THRESHOLD": "1GB"})
	require.NoError(t, err)
	a, err := base.With("dtr-threshold", "2GB", FlagSource(""))
	require.NoError(t, err)
	b, err := a.With("dtr.eviction_threshold", "3GiB", OptionSource("dtr.Options.Threshold"))
	require.NoError(t, err)
	c, err := b.With("--dtr-threshold", "4gb", FlagSource("--dtr-threshold"))
	require.NoError(t, err)
	assert.Equal(t, GiB, base.Size(DTREvictionThreshold))
	assert.Equal(t, "env MEGENGINE_DTR_EVICTION_THRESHOLD", base.Value(DTREvictionThreshold).Source.String())
	assert.Equal(t, 2*GiB, a.Size(DTREvictionThreshold))
	assert.Equal(t, 3*GiB, b.Size(DTREvictionThreshold))
	assert.Equal(t, "option dtr.Options.Threshold", b.Value(DTREvictionThreshold).Source.String())
	assert.Equal(t, 4*GiB, c.Size(DTREvictionThreshold))
	assert.Equal(t, "flag --dtr-threshold", c.Value(DTREvictionThreshold).Source.String())

	_, err = base.With("dtr.eviction_threshold", "1", Source{Kind: SourceEnv, Name: "X"})
	assert.ErrorContains(t, err, "expected an option or flag source")
	_, err = base.With("no.such", "1", OptionSource(""))
	assert.ErrorIs(t, err, ErrUnknownSetting)
	_, err = base.Get("no.such")
	assert.ErrorIs(t, err, ErrUnknownSetting)
	_, err = base.ForOp("no.such", nil)
	assert.ErrorIs(t, err, ErrUnknownSetting)
	v, err := c.Get("MEGENGINE_DTR_EVICTION_THRESHOLD")
	require.NoError(t, err)
	assert.Equal(t, "4GiB", v.Text)
}

func TestInvalidKeysGiveZeroValues(t *testing.T) {
	s := Defaults(WithNumCPU(2))
	assert.False(t, s.Bool(BoolKey(ExecMatchRange)))
	assert.Zero(t, s.Int(IntKey(999)))
	assert.Zero(t, s.Size(SizeKey(-1)))
	assert.Zero(t, s.Float(FloatKey(0)))
	assert.Empty(t, s.Enum(EnumKey(0)))
	assert.Empty(t, s.Text(StringKey(0)))
	assert.Equal(t, Value{}, s.Value(IntKey(999)))
	assert.Equal(t, Spec{}, IntKey(0).Spec())
	assert.Equal(t, "mirror.enabled", BackwardDoMirror.Name())
}

func TestReadOnceVersusDynamic(t *testing.T) {
	env := MapEnv{
		"MEGENGINE_DTR_EVICTION_THRESHOLD": "1GB", // read once
		"MGB_CUDA_RESERVE_MEMORY":          "0",   // read once
		"MXNET_BACKWARD_DO_MIRROR":         "0",   // dynamic
	}
	p := NewProcess(env, WithNumCPU(4))
	s1, w1, err := p.Settings()
	require.NoError(t, err)
	assert.NotContains(t, warningText(w1), "changed")
	assert.Equal(t, GiB, s1.Size(DTREvictionThreshold))
	assert.False(t, s1.Bool(BackwardDoMirror))

	env["MEGENGINE_DTR_EVICTION_THRESHOLD"] = "2GB"
	delete(env, "MGB_CUDA_RESERVE_MEMORY")
	env["MEGENGINE_ENABLE_DROP"] = "1" // read once, was unset at capture
	env["MXNET_BACKWARD_DO_MIRROR"] = "1"
	env["MGB_SUBLINEAR_MEMORY_THRESH_NR_TRY"] = "3"

	s2, w2, err := p.Settings()
	require.NoError(t, err)
	assert.Equal(t, GiB, s2.Size(DTREvictionThreshold), "read-once value must not change")
	assert.False(t, s2.Bool(CUDAReserveMemory))
	assert.False(t, s2.Bool(DTREnableDrop), "a read-once variable set after the capture stays unset")
	assert.True(t, s2.Bool(BackwardDoMirror), "dynamic value follows the environment")
	assert.Equal(t, 3, s2.Int(SublinearThreshNrTry))
	msgs := warningText(w2)
	assert.Contains(t, msgs, `MEGENGINE_DTR_EVICTION_THRESHOLD changed after it was first read (was "1GB", now "2GB"); the change is ignored because it is read once per process`)
	assert.Contains(t, msgs, `MGB_CUDA_RESERVE_MEMORY changed after it was first read (was "0", now unset)`)
	assert.Contains(t, msgs, `MEGENGINE_ENABLE_DROP changed after it was first read (was unset, now "1")`)
	// The snapshot taken first is unaffected.
	assert.False(t, s1.Bool(BackwardDoMirror))

	// Load, by contrast, reads everything fresh.
	s3, _, err := Load(env)
	require.NoError(t, err)
	assert.Equal(t, 2*GiB, s3.Size(DTREvictionThreshold))
	assert.True(t, s3.DTREnabled())

	// An invalid dynamic value is an error now and recovers when fixed.
	env["MXNET_BACKWARD_DO_MIRROR"] = "maybe"
	_, _, err = p.Settings()
	require.Error(t, err)
	env["MXNET_BACKWARD_DO_MIRROR"] = "yes"
	_, _, err = p.Settings()
	require.NoError(t, err)
}

func TestReadOnceInvalidCaptureIsSticky(t *testing.T) {
	env := MapEnv{"MGB_CUDA_RESERVE_MEMORY": "sometimes"}
	p := NewProcess(env)
	_, _, err := p.Settings()
	require.ErrorContains(t, err, "MGB_CUDA_RESERVE_MEMORY")
	env["MGB_CUDA_RESERVE_MEMORY"] = "1"
	_, _, err = p.Settings()
	require.ErrorContains(t, err, `"sometimes"`, "the captured value is what the process uses")
}

func TestGlobal(t *testing.T) {
	t.Setenv("MXNET_EXEC_NUM_TEMP", "3")
	t.Setenv("MGB_CUDA_RESERVE_MEMORY", "1")
	s, _, err := Global()
	require.NoError(t, err)
	assert.Equal(t, 3, s.Int(ExecNumTemp))
	assert.True(t, s.Bool(CUDAReserveMemory))
	t.Setenv("MXNET_EXEC_NUM_TEMP", "4")
	t.Setenv("MGB_CUDA_RESERVE_MEMORY", "0")
	s, w, err := Global()
	require.NoError(t, err)
	assert.Equal(t, 4, s.Int(ExecNumTemp))
	assert.True(t, s.Bool(CUDAReserveMemory))
	assert.Contains(t, warningText(w), "MGB_CUDA_RESERVE_MEMORY changed after it was first read")
}

func warningText(ws []Warning) string {
	var b strings.Builder
	for _, w := range ws {
		b.WriteString(w.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func TestBadValues(t *testing.T) {
	cases := []struct {
		env, value, accepted string
	}{
		{"MXNET_BACKWARD_DO_MIRROR", "2", BoolSyntax},
		{"MXNET_EXEC_ENABLE_INPLACE", "", BoolSyntax},
		{"MGB_CUDA_RESERVE_MEMORY", "enabled", BoolSyntax},
		{"MXNET_EXEC_MATCH_RANGE", "ten", "an integer in 0..65536"},
		{"MXNET_EXEC_MATCH_RANGE", "-1", "an integer in 0..65536"},
		{"MXNET_EXEC_NUM_TEMP", "0", "an integer in 1..1024"},
		{"MXNET_EXEC_NUM_TEMP", "1.5", "an integer in 1..1024"},
		{"MGB_SUBLINEAR_MEMORY_THRESH_NR_TRY", "99999999999999999999", "an integer in 1..1048576"},
		{"MGB_SUBLINEAR_MEMORY_WORKERS", "17", "an integer in 1..16"},
		{"GE_USE_STATIC_MEMORY", "5", "an integer in 0..4"},
		{"MEGENGINE_DTR_EVICTION_THRESHOLD", "5 parsecs", SizeSyntax},
		{"MEGENGINE_DTR_EVICTION_THRESHOLD", "-5GB", SizeSyntax},
		{"MEGENGINE_DTR_EVICTEE_MINIMUM_SIZE", "9000000TB", SizeSyntax},
		{"MGB_SUBLINEAR_MEMORY_LOWER_BOUND_MB", "lots", "a plain number means MiB"},
		{"MXNET_CUDNN_AUTOTUNE_DEFAULT", "3", "one of off|0, limited_workspace|1, fastest|2"},
		{"MXNET_CUDNN_AUTOTUNE_DEFAULT", "slowest", "one of off|0, limited_workspace|1, fastest|2"},
		{"MEGENGINE_EXECUTION_STRATEGY", "FAST", "HEURISTIC, PROFILE, REPRODUCIBLE, OPTIMIZED"},
		{"MEGENGINE_EXECUTION_STRATEGY", "HEURISTIC_PROFILE", "exclude each other"},
		{"MEGENGINE_EXECUTION_STRATEGY", "", "HEURISTIC, PROFILE"},
		{"MXNET_GPU_MEM_POOL_RESERVE", "101", "a number in 0..100"},
		{"MXNET_GPU_MEM_POOL_RESERVE", "NaN", "a number in 0..100"},
		{"MXNET_GPU_MEM_POOL_RESERVE", "five", "a number in 0..100"},
	}
	for _, c := range cases {
		_, _, err := Load(MapEnv{c.env: c.value}, WithNumCPU(4))
		require.Error(t, err, "%s=%q", c.env, c.value)
		msg := err.Error()
		assert.Contains(t, msg, c.env)
		assert.Contains(t, msg, `"`+c.value+`"`)
		assert.Contains(t, msg, c.accepted)
		var ve *ValueError
		require.ErrorAs(t, err, &ve)
		assert.Equal(t, c.env, ve.Origin)
		assert.Equal(t, c.value, ve.Value)
		assert.NotNil(t, errors.Unwrap(ve))
	}
	// Several bad values are all reported.
	_, _, err := Load(MapEnv{"MXNET_EXEC_NUM_TEMP": "x", "GE_USE_STATIC_MEMORY": "9"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MXNET_EXEC_NUM_TEMP")
	assert.Contains(t, err.Error(), "GE_USE_STATIC_MEMORY")

	// Flags and attributes name themselves.
	s := Defaults()
	_, err = s.With("--num-temp", "zero", FlagSource(""))
	assert.ErrorContains(t, err, `flag --num-temp="zero"`)
	_, err = s.ForOp("cudnn.autotune", map[string]string{"cudnn_tune": "turbo"})
	assert.ErrorContains(t, err, `attribute cudnn_tune="turbo"`)
	assert.ErrorContains(t, err, "fastest|2")
	_, err = Parse("mirror", "nah")
	assert.ErrorContains(t, err, BoolSyntax)
	_, err = Parse("nope", "1")
	assert.ErrorIs(t, err, ErrUnknownSetting)
}

func TestValueSpellings(t *testing.T) {
	for _, c := range []struct{ key, in, out string }{
		{"mirror", " YES ", "true"}, {"mirror", "On", "true"}, {"mirror", "0", "false"}, {"mirror", "Off", "false"},
		{"cudnn.autotune", "FASTEST", "fastest"}, {"cudnn.autotune", "0", "off"},
		{"kernel.execution_strategy", "reproducible_profile", "PROFILE_REPRODUCIBLE"},
		{"kernel.execution_strategy", "optimized", "OPTIMIZED"},
		{"gpu.pool_reserve_percent", "2.5", "2.5"}, {"gpu.pool_reserve_percent", "-0", "0"},
		{"sublinear.lower_bound", "512", "512MiB"}, {"sublinear.lower_bound", "1GB", "1GiB"},
		{"sublinear.lower_bound", "100B", "100B"},
		{"dtr.eviction_threshold", "512", "512B"}, {"dtr.eviction_threshold", "5GB", "5GiB"},
		{"exec.match_range", "+7", "7"},
	} {
		v, err := Parse(c.key, c.in, WithNumCPU(4))
		require.NoError(t, err, "%s=%q", c.key, c.in)
		assert.Equal(t, c.out, v.Text, "%s=%q", c.key, c.in)
	}
}

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"1048576", 1048576}, {"  42  ", 42}, {"+42", 42},
		{"1B", 1}, {"1b", 1}, {"1KB", 1024}, {"1kb", 1024}, {"1KiB", 1024}, {"1kib", 1024},
		{"1MB", MiB}, {"1MiB", MiB}, {"5GB", 5 * GiB}, {"5 GB", 5 * GiB}, {"5gib", 5 * GiB},
		{"2TB", 2 * TiB}, {"2TiB", 2 * TiB}, {"1.5GB", 3 * GiB / 2}, {".5KB", 512}, {"1.KB", 1024},
		{"0.1KB", 102}, // 102.4 bytes truncated
		{"1.0000000001B", 1},
		{"8388607TiB", 8388607 * TiB},
		{"9223372036854775807", math.MaxInt64}, {"9223372036854775807B", math.MaxInt64},
	} {
		got, err := ParseSize(c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
	}
	for _, c := range []struct{ in, msg string }{
		{"", "empty"}, {"   ", "empty"}, {"-1", "negative"}, {"GB", "does not start with a number"},
		{"1PB", "unknown unit"}, {"1 G", "unknown unit"}, {"1.2.3", "malformed"}, {".", "malformed"},
		{"1+2", "malformed"}, {"++1", "malformed"}, {"1e9", "unknown unit"},
		{"9223372036854775808", "overflow"}, {"8388608TiB", "overflow"},
		{strings.Repeat("9", 60), "overflow"}, {"0x10", "unknown unit"},
	} {
		_, err := ParseSize(c.in)
		require.Error(t, err, c.in)
		assert.Contains(t, err.Error(), c.msg, c.in)
	}
}

func TestFormatSizeRoundTrip(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0"}, {1, "1B"}, {1023, "1023B"}, {1024, "1KiB"}, {1536, "1536B"}, {1536 * 1024, "1536KiB"},
		{MiB, "1MiB"}, {5 * GiB, "5GiB"}, {3 * GiB / 2, "1536MiB"}, {TiB, "1TiB"}, {math.MaxInt64, "9223372036854775807B"},
	} {
		assert.Equal(t, c.want, FormatSize(c.n))
		back, err := ParseSize(c.want)
		require.NoError(t, err)
		assert.Equal(t, c.n, back)
	}
	assert.Equal(t, "-5", FormatSize(-5))
}

func TestParseBool(t *testing.T) {
	for in, want := range map[string]bool{"1": true, "true": true, "TRUE": true, "yes": true, "on": true, "0": false, "false": false, "No": false, "OFF": false} {
		got, err := ParseBool(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "2", "y", "t", "enable", "-1"} {
		_, err := ParseBool(in)
		assert.Error(t, err, in)
	}
}

func TestDidYouMean(t *testing.T) {
	env := MapEnv{
		"MXNET_BACKWARD_DO_MIROR":       "1", // typo
		"MEGENGINE_DTR_EVICTION_THRESH": "1", // truncated
		"MGB_SUBLINEAR_MEMORY_WORKER":   "2",
		"GE_USE_STATIC_MEMROY":          "2",
		"MXNET_BACKWARD_DO_MIRROR":      "0", // known: no warning
		"PATH":                          "/bin",
		"HOME_MXNET_X":                  "1", // prefix not at start: no warning
	}
	_, warns, err := Load(env)
	require.NoError(t, err)
	got := map[string]string{}
	for _, w := range warns {
		got[w.Var] = w.Suggestion
		assert.Contains(t, w.Message, "did you mean "+w.Suggestion+"?")
	}
	assert.Equal(t, map[string]string{
		"MXNET_BACKWARD_DO_MIROR":       "MXNET_BACKWARD_DO_MIRROR",
		"MEGENGINE_DTR_EVICTION_THRESH": "MEGENGINE_DTR_EVICTION_THRESHOLD",
		"MGB_SUBLINEAR_MEMORY_WORKER":   "MGB_SUBLINEAR_MEMORY_WORKERS",
		"GE_USE_STATIC_MEMROY":          "GE_USE_STATIC_MEMORY",
	}, got)
	// Warnings are sorted by variable name.
	require.Len(t, warns, 4)
	assert.Equal(t, "GE_USE_STATIC_MEMROY", warns[0].Var)

	assert.Equal(t, 0, levenshtein("abc", "abc"))
	assert.Equal(t, 3, levenshtein("", "abc"))
	assert.Equal(t, 3, levenshtein("kitten", "sitting"))
	assert.Equal(t, "MXNET_EXEC_NUM_TEMP", Suggest("mxnet_exec_num_tmp"))
}

func TestConflicts(t *testing.T) {
	assert.NoError(t, CheckExclusive(true, false))
	assert.NoError(t, CheckExclusive(false, true))
	assert.NoError(t, CheckExclusive(false, false))
	err := CheckExclusive(true, true)
	assert.ErrorIs(t, err, ErrConflict)
	assert.ErrorContains(t, err, "sublinear")

	for _, env := range []MapEnv{{"MEGENGINE_ENABLE_DROP": "1"}, {"MEGENGINE_DTR_AUTO_DROP": "on"}} {
		s, _, err := Load(env)
		require.NoError(t, err)
		assert.ErrorIs(t, CheckExclusive(true, s.DTREnabled()), ErrConflict)
	}

	// GE_USE_STATIC_MEMORY and MemoryConfig.StaticMemoryPolicy both set.
	s, _, err := Load(MapEnv{"GE_USE_STATIC_MEMORY": "3"})
	require.NoError(t, err)
	_, err = s.WithMemoryConfig(MemoryConfig{StaticMemoryPolicy: PolicyPtr(StaticArena)})
	assert.ErrorIs(t, err, ErrConflict)
	assert.ErrorContains(t, err, "env GE_USE_STATIC_MEMORY")
	// The same through a flag.
	f, err := Defaults().With("--static-memory", "2", FlagSource(""))
	require.NoError(t, err)
	_, err = f.WithMemoryConfig(MemoryConfig{StaticMemoryPolicy: PolicyPtr(StaticExpand)})
	assert.ErrorIs(t, err, ErrConflict)
	// And in the other order.
	m, err := Defaults().WithMemoryConfig(MemoryConfig{AtomicCleanPolicy: AtomicCleanSeparately, StaticMemoryPolicy: PolicyPtr(StaticExpand)})
	require.NoError(t, err)
	_, err = m.With("static-memory", "2", FlagSource(""))
	assert.ErrorIs(t, err, ErrConflict)
	// Without static policy in MemoryConfig there is no conflict.
	ok, err := s.WithMemoryConfig(MemoryConfig{AtomicCleanPolicy: AtomicCleanSeparately})
	require.NoError(t, err)
	assert.Equal(t, StaticExpand, *ok.MemoryConfig().StaticMemoryPolicy)
	assert.Equal(t, AtomicCleanSeparately, ok.MemoryConfig().AtomicCleanPolicy)
	assert.Equal(t, StaticExpand, m.StaticMemoryPolicy())
	assert.Equal(t, "option MemoryConfig.StaticMemoryPolicy", m.Value(GEStaticMemoryPolicy).Source.String())
	// Invalid MemoryConfig fields.
	_, err = Defaults().WithMemoryConfig(MemoryConfig{AtomicCleanPolicy: 2})
	assert.ErrorContains(t, err, "AtomicCleanPolicy = 2")
	_, err = Defaults().WithMemoryConfig(MemoryConfig{StaticMemoryPolicy: PolicyPtr(7)})
	assert.ErrorContains(t, err, "StaticMemoryPolicy = 7")

	// Static policy 2 or 4 (or 1) with concurrent graphs.
	for _, c := range []struct {
		policy   string
		conflict bool
	}{{"0", false}, {"1", true}, {"2", true}, {"3", false}, {"4", true}} {
		s, _, err := Load(MapEnv{"GE_USE_STATIC_MEMORY": c.policy})
		require.NoError(t, err)
		assert.NoError(t, s.CheckConcurrentGraphs(1), c.policy)
		err = s.CheckConcurrentGraphs(2)
		if c.conflict {
			assert.ErrorIs(t, err, ErrConflict, c.policy)
			assert.ErrorContains(t, err, "env GE_USE_STATIC_MEMORY")
		} else {
			assert.NoError(t, err, c.policy)
		}
	}
	one, _, err := Load(MapEnv{"GE_USE_STATIC_MEMORY": "1"})
	require.NoError(t, err)
	assert.Equal(t, StaticArena, one.StaticMemoryPolicy(), "1 behaves as 2")
}

func TestInertThresholdWarning(t *testing.T) {
	_, w, err := Load(MapEnv{"MEGENGINE_DTR_EVICTION_THRESHOLD": "5GB"})
	require.NoError(t, err)
	assert.Contains(t, warningText(w), "has no effect: DTR is off")
	_, w, err = Load(MapEnv{"MEGENGINE_DTR_EVICTION_THRESHOLD": "5GB", "MEGENGINE_ENABLE_DROP": "1"})
	require.NoError(t, err)
	assert.Empty(t, w)
}

// goldenSettings is the fixed environment of the rendering golden files.
func goldenSettings(t *testing.T) (*Settings, map[string]int) {
	t.Helper()
	s, warns, err := Load(MapEnv{
		"MXNET_BACKWARD_DO_MIRROR":         "1",
		"MEGENGINE_ENABLE_DROP":            "on",
		"MEGENGINE_DTR_EVICTION_THRESHOLD": "5GB",
		"MGB_SUBLINEAR_MEMORY_WORKERS":     "3",
		"MXNET_GPU_MEM_POOL_RESERVE":       "7.5",
	}, WithNumCPU(8))
	require.NoError(t, err)
	require.Empty(t, warns)
	s, err = s.With("--cudnn-autotune", "fastest", FlagSource(""))
	require.NoError(t, err)
	s, err = s.With("exec.num_temp", "2", OptionSource(""))
	require.NoError(t, err)
	return s, map[string]int{"force_mirroring": 3, "cudnn_tune": 1}
}

func TestGoldenTable(t *testing.T) {
	s, counts := goldenSettings(t)
	var buf bytes.Buffer
	require.NoError(t, WriteTable(&buf, s.Rows(counts)))
	out := buf.String()
	assert.Contains(t, out, "env MXNET_BACKWARD_DO_MIRROR; attribute force_mirroring on 3 ops")
	assert.Contains(t, out, "flag --cudnn-autotune; attribute cudnn_tune on 1 op")
	assert.Contains(t, out, "the older MXNet environment table said 0")
	golden(t, "testdata/env_table.golden", buf.Bytes())
}

func TestGoldenJSON(t *testing.T) {
	s, counts := goldenSettings(t)
	var buf bytes.Buffer
	rows := s.Rows(counts)
	require.NoError(t, WriteJSON(&buf, rows))
	assert.True(t, strings.HasPrefix(buf.String(), "{\n  \"version\": 1,"))
	golden(t, "testdata/env.json.golden", buf.Bytes())
	// Rows are sorted by name and deterministic.
	for i := 1; i < len(rows); i++ {
		assert.Less(t, rows[i-1].Name, rows[i].Name)
	}
	assert.Equal(t, rows, s.Rows(counts))
	var empty bytes.Buffer
	require.NoError(t, WriteJSON(&empty, nil))
	assert.Contains(t, empty.String(), `"settings": []`)
}

func TestSettingsDoc(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteMarkdown(&buf))
	for _, sp := range Specs() {
		assert.Contains(t, buf.String(), sp.Env)
	}
	golden(t, filepath.Join("..", "docs", "settings.md"), buf.Bytes())
}
