package sim

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/remat-dev/remat/graph"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDeviceLookup(t *testing.T) {
	names := DeviceNames()
	assert.True(t, sort.StringsAreSorted(names))
	assert.Equal(t, []string{"a100-40gb", "a100-80gb", "cpu", "h100-80gb", "h200-141gb", "rtx2080ti", "t4", "titanv", "v100-16gb", "v100-32gb"}, names)
	for _, p := range Devices() {
		require.NoError(t, p.Validate(), p.Name)
		q, err := Device(strings.ToUpper(p.Name))
		require.NoError(t, err)
		assert.Equal(t, p, q)
	}
	_, err := Device("p100")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `device "p100": unknown, expected one of a100-40gb, a100-80gb, cpu`)
	// Spot checks against the datasheets cited in device.go.
	v, _ := Device("v100-16gb")
	assert.Equal(t, int64(16)<<30, v.Capacity)
	assert.Equal(t, 900e9, v.MemBandwidth)
	r, _ := Device("rtx2080ti")
	assert.Equal(t, int64(11)<<30, r.Capacity)
	// V100 has no BF16: it runs at the F32 rate.
	assert.Equal(t, v.PeakFLOPS.F32, v.PeakFLOPS.For(graph.BF16))
	assert.Equal(t, 125e12, v.PeakFLOPS.For(graph.F16))
	assert.Equal(t, v.PeakFLOPS.F32, v.PeakFLOPS.For(graph.I64))
}

func TestLoadProfile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	good := write("good.json", `{"name": "my-gpu", "capacity_bytes": 25769803776,
		"peak_flops": {"f32": 30e12, "f16": 120e12, "bf16": 120e12, "f64": 0.5e12},
		"memory_bandwidth": 936e9, "host_bandwidth": 16e9, "launch_overhead_ns": 5000}`)
	p, err := LoadProfile(good)
	require.NoError(t, err)
	assert.Equal(t, "my-gpu", p.Name)
	assert.Equal(t, int64(24)<<30, p.Capacity)
	assert.Equal(t, 120e12, p.PeakFLOPS.BF16)

	// ok is a valid profile body after the name; each case breaks one field.
	const ok = `"capacity_bytes": 1, "peak_flops": {"f32": 1e12}, "memory_bandwidth": 1e9, "host_bandwidth": 1e9`
	bad := map[string]string{
		`{` + ok + `}`: "field name is empty",
		`{"name": "x", "peak_flops": {"f32": 1e12}, "memory_bandwidth": 1e9, "host_bandwidth": 1e9}`:                                        "field capacity_bytes is 0",
		`{"name": "x", "capacity_bytes": 1, "memory_bandwidth": 1e9, "host_bandwidth": 1e9}`:                                                "field peak_flops.f32 is 0",
		`{"name": "x", "capacity_bytes": 1, "peak_flops": {"f32": 1e12, "f16": -1}, "memory_bandwidth": 1e9, "host_bandwidth": 1e9}`:        "field peak_flops.f16 is -1",
		`{"name": "x", "capacity_bytes": 1, "peak_flops": {"f32": 1e12, "bf16": -1}, "memory_bandwidth": 1e9, "host_bandwidth": 1e9}`:       "field peak_flops.bf16",
		`{"name": "x", "capacity_bytes": 1, "peak_flops": {"f32": 1e12, "f64": -2}, "memory_bandwidth": 1e9, "host_bandwidth": 1e9}`:        "field peak_flops.f64",
		`{"name": "x", "capacity_bytes": 1, "peak_flops": {"f32": 1e12}, "host_bandwidth": 1e9}`:                                            "field memory_bandwidth is 0",
		`{"name": "x", "capacity_bytes": 1, "peak_flops": {"f32": 1e12}, "memory_bandwidth": 1e9}`:                                          "field host_bandwidth is 0",
		`{"name": "x", ` + ok + `, "launch_overhead_ns": -1}`:                                                                               "field launch_overhead_ns is -1",
		`{"name": "x", ` + ok + `, "launch_overhead_ns": 9223372036854775807}`:                                                              "expected 0..1000000000",
		`{"name": "x", "capacity_bytes": 1, "peak_flops": {"f32": 1e-300}, "memory_bandwidth": 1e9, "host_bandwidth": 1e9}`:                 "field peak_flops.f32 is 1e-300, expected 1e+06..1e+21 FLOP/s",
		`{"name": "x", "capacity_bytes": 1, "peak_flops": {"f32": 1e12}, "memory_bandwidth": 1e30, "host_bandwidth": 1e9}`:                  "field memory_bandwidth is 1e+30",
		`{"name": "x", "capacity_bytes": 9223372036854775807, "peak_flops": {"f32": 1e12}, "memory_bandwidth": 1e9, "host_bandwidth": 1e9}`: "field capacity_bytes",
		`{"name": "x", "capacity": 1}`: `unknown field "capacity"`,
		`{"name": "x"} {}`:             "trailing data",
	}
	i := 0
	for body, want := range bad {
		i++
		path := write(filepathName(i), body)
		_, err := LoadProfile(path)
		require.Error(t, err, body)
		assert.Contains(t, err.Error(), want, body)
		assert.Contains(t, err.Error(), path)
	}
	_, err = LoadProfile(filepath.Join(dir, "missing.json"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func filepathName(i int) string { return "bad" + string(rune('a'+i)) + ".json" }

func TestCostModel(t *testing.T) {
	v := mustDevice(t, "v100-16gb")
	cm := CostModel{Device: v}
	b := graph.NewBuilder("cost")
	x := b.Input("x", graph.F32, 1000)
	// Compute-bound: 15.7e6 FLOPs at 15.7 TFLOP/s = 1 us.
	b.Op("linear", "cb", x).Out("y", graph.F32, 10).FLOPs(15_700_000).BytesAccessed(9000)
	// Memory-bound: 1.8 MB at 900 GB/s = 2 us.
	b.Op("relu", "mb", x).Out("z", graph.F32, 10).FLOPs(1000).BytesAccessed(1_800_000)
	// f16 runs on Tensor Cores: 125e6 FLOPs at 125 TFLOP/s = 1 us.
	b.Op("linear", "tc", x).Out("h", graph.F16, 10).FLOPs(125_000_000)
	// Measured time wins.
	b.Op("linear", "meas", x).Out("m", graph.F32, 10).FLOPs(1 << 40).TimeNs(1234)
	g, err := b.Build()
	require.NoError(t, err)
	assert.Equal(t, int64(1000+5000), cm.OpTime(g, &g.Ops[0]))
	assert.Equal(t, int64(2000+5000), cm.OpTime(g, &g.Ops[1]))
	assert.Equal(t, int64(1000+5000), cm.OpTime(g, &g.Ops[2]))
	assert.Equal(t, int64(1234), cm.OpTime(g, &g.Ops[3]))
	// Swap: 16 GB/s host link: 16 MB take 1 ms.
	assert.Equal(t, int64(1_000_000), cm.SwapNs(16_000_000))
	assert.Equal(t, int64(0), cm.SwapNs(0))
	m, err := NewMachine(g, Options{Device: v})
	require.NoError(t, err)
	assert.Equal(t, int64(6000), m.OpTime(0))
	assert.Equal(t, cm.SwapNs(4000), m.SwapTime(x))
}

// convGraph: a ResNet-style 3x3 convolution, 32x64x56x56 -> 32x64x56x56, and
// its data gradient.
func convGraph(t testing.TB, attrs map[string]string) *graph.Graph {
	b := graph.NewBuilder("conv")
	x := b.Input("x", graph.F32, 32, 64, 56, 56)
	w := b.Parameter("w", graph.F32, 64, 64, 3, 3)
	o := b.Op("conv2d", "conv", x, w).Out("y", graph.F32, 32, 64, 56, 56).TimeNs(100_000).Workspace(1 << 20)
	for k, v := range attrs {
		o.Attr(k, v)
	}
	y := o.T()
	b.SetPhase(graph.Backward)
	b.Op("conv2d_backward_data", "conv_grad", y, w).Forward(o.ID()).Out("gx", graph.F32, 32, 64, 56, 56).TimeNs(200_000)
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func TestConvAlgorithms(t *testing.T) {
	g := convGraph(t, nil)
	cands := ConvCandidates(g, &g.Ops[0])
	byName := map[string]ConvAlgo{}
	for _, c := range cands {
		byName[c.Name] = c
	}
	require.Len(t, cands, 6)
	assert.Equal(t, int64(0), byName["implicit_gemm"].Workspace)
	assert.Equal(t, int64(4*64*9), byName["implicit_precomp_gemm"].Workspace)
	assert.Equal(t, int64(4*32*64*9*56*56), byName["gemm"].Workspace)                           // 231 MB
	assert.Equal(t, int64(8*(32*64+64*64+32*64)*58*30), byName["fft"].Workspace)                // 114 MB
	assert.Equal(t, int64(4*36*(6272*64+64*64+6272*64)), byName["winograd_nonfused"].Workspace) // 116 MB, T = 32*14*14
	// The gradient op uses its forward op's shapes.
	assert.Equal(t, cands, ConvCandidates(g, &g.Ops[1]))

	run := func(opts Options, attrs map[string]string) *Machine {
		m, err := NewMachine(convGraph(t, attrs), opts)
		require.NoError(t, err)
		return m
	}
	// off: the op as described.
	m := run(Options{}, nil)
	assert.Equal(t, "", m.ConvAlgo(0))
	assert.Equal(t, int64(1<<20), m.OpWorkspace(0))
	assert.Equal(t, int64(100_000), m.OpTime(0))
	// limited_workspace with the default 1 GiB limit and fastest: Winograd
	// non-fused, half the time.
	for _, tune := range []CudnnTune{CudnnLimitedWorkspace, CudnnFastest} {
		m = run(Options{CudnnTune: tune}, nil)
		assert.Equal(t, "winograd_nonfused", m.ConvAlgo(0))
		assert.Equal(t, byName["winograd_nonfused"].Workspace, m.OpWorkspace(0))
		assert.Equal(t, int64(50_000), m.OpTime(0))
		assert.Equal(t, int64(100_000), m.OpTime(1))
	}
	// A 100 MB limit (per-op attribute) excludes FFT, GEMM and non-fused
	// Winograd: fused Winograd.
	m = run(Options{CudnnTune: CudnnLimitedWorkspace}, map[string]string{AttrConvWorkspace: "100"})
	assert.Equal(t, "winograd", m.ConvAlgo(0))
	assert.Equal(t, int64(0), m.OpWorkspace(0))
	assert.Equal(t, int64(70_000), m.OpTime(0))
	// The per-op attribute overrides the global policy.
	m = run(Options{CudnnTune: CudnnFastest}, map[string]string{graph.AttrCudnnTune: "off"})
	assert.Equal(t, "", m.ConvAlgo(0))
	m = run(Options{}, map[string]string{graph.AttrCudnnTune: "fastest"})
	assert.Equal(t, "winograd_nonfused", m.ConvAlgo(0))
	// Bad attributes are errors naming the op.
	_, err := NewMachine(convGraph(t, map[string]string{graph.AttrCudnnTune: "turbo"}), Options{})
	assert.ErrorContains(t, err, `op #0 "conv" (conv2d): attribute cudnn_tune`)
	_, err = NewMachine(convGraph(t, map[string]string{AttrConvWorkspace: "lots"}), Options{CudnnTune: CudnnLimitedWorkspace})
	assert.ErrorContains(t, err, `attribute workspace is "lots"`)
	// The workspace shows up in the peak.
	g2 := convGraph(t, nil)
	r, err := Simulate(g2, DefaultPlan(g2), Options{CudnnTune: CudnnFastest})
	require.NoError(t, err)
	act := int64(4 * 32 * 64 * 56 * 56)
	assert.Equal(t, act+4*64*64*9+act+byName["winograd_nonfused"].Workspace+act, r.PeakAllocated)

	for s, want := range map[string]CudnnTune{"0": CudnnOff, "none": CudnnOff, "1": CudnnLimitedWorkspace, "FASTEST": CudnnFastest} {
		got, err := ParseCudnnTune(s)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	_, err = ParseCudnnTune("3")
	assert.Error(t, err)
}
