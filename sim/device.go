package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/remat-dev/remat/graph"
)

// Peaks holds a device's peak arithmetic throughput per element type, in
// FLOP/s. Zero means the type has no native fast path on the device: ops of
// that type run at the F32 rate.
type Peaks struct {
	F32  float64 `json:"f32"`
	F16  float64 `json:"f16"`
	BF16 float64 `json:"bf16"`
	F64  float64 `json:"f64"`
}

// For returns the peak FLOP/s used for ops of dtype dt: the dtype's own
// figure when set, the F32 figure otherwise (integer types, or a type
// without native support).
func (p Peaks) For(dt graph.DType) float64 {
	var v float64
	switch dt {
	case graph.F16:
		v = p.F16
	case graph.BF16:
		v = p.BF16
	case graph.F64:
		v = p.F64
	}
	if v > 0 {
		return v
	}
	return p.F32
}

// Profile describes a device for the cost and memory model.
type Profile struct {
	// Name is the profile's short name (v100-16gb, a100-80gb, ...).
	Name string `json:"name"`
	// Description says which product and variant the figures are for.
	Description string `json:"description,omitempty"`
	// Capacity is the device memory in bytes.
	Capacity int64 `json:"capacity_bytes"`
	// PeakFLOPS is the peak throughput per element type (FLOP/s).
	PeakFLOPS Peaks `json:"peak_flops"`
	// MemBandwidth is the device memory bandwidth (bytes/s).
	MemBandwidth float64 `json:"memory_bandwidth"`
	// HostBandwidth is the host link bandwidth in one direction (bytes/s),
	// used for swaps.
	HostBandwidth float64 `json:"host_bandwidth"`
	// LaunchOverheadNs is added to every op (kernel launch / dispatch).
	LaunchOverheadNs int64 `json:"launch_overhead_ns"`
}

// DefaultDevice is the profile whose cost model an Options with a zero Device
// uses (with unlimited capacity unless Options.Capacity says otherwise).
const DefaultDevice = "v100-16gb"

const (
	gib = int64(1) << 30
	// tera and giga are decimal, as vendors quote FLOP/s and bandwidth.
	tera = 1e12
	giga = 1e9
	// gpuLaunchNs is the modelled per-kernel launch overhead on a GPU. It is
	// not a datasheet figure: CUDA kernel launch latency is commonly measured
	// at 3-7 us end to end from a framework; remat uses 5 us.
	gpuLaunchNs = 5000
	// cpuLaunchNs is the modelled per-op dispatch overhead of a CPU framework
	// (not a datasheet figure).
	cpuLaunchNs = 1000
)

// builtinProfiles are the built-in devices. Every figure cites its source;
// docs/simulator.md repeats the table. FLOP/s figures: f32 is the plain FP32
// (CUDA core) rate, f16 and bf16 the dense Tensor Core rate with FP32
// accumulate where the device has Tensor Cores (no sparsity), f64 the FP64
// vector rate; 0 = no native support (runs at the f32 rate). Host bandwidth
// is one direction of the PCIe link (datasheets quote both directions).
var builtinProfiles = []Profile{
	{
		// NVIDIA Tesla V100 datasheet (SXM2): 7.8 TFLOPS FP64, 15.7 TFLOPS
		// FP32, 125 TFLOPS Tensor, 16 GB HBM2 at 900 GB/s, PCIe 32 GB/s
		// (bidirectional). No BF16.
		Name: "v100-16gb", Description: "NVIDIA Tesla V100 SXM2 16 GB",
		Capacity:     16 * gib,
		PeakFLOPS:    Peaks{F32: 15.7 * tera, F16: 125 * tera, F64: 7.8 * tera},
		MemBandwidth: 900 * giga, HostBandwidth: 16 * giga, LaunchOverheadNs: gpuLaunchNs,
	},
	{
		// NVIDIA Tesla V100 datasheet (SXM2 32 GB): same compute, 32 GB HBM2
		// at 900 GB/s.
		Name: "v100-32gb", Description: "NVIDIA Tesla V100 SXM2 32 GB",
		Capacity:     32 * gib,
		PeakFLOPS:    Peaks{F32: 15.7 * tera, F16: 125 * tera, F64: 7.8 * tera},
		MemBandwidth: 900 * giga, HostBandwidth: 16 * giga, LaunchOverheadNs: gpuLaunchNs,
	},
	{
		// NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM): 9.7 TFLOPS
		// FP64, 19.5 TFLOPS FP32, 312 TFLOPS FP16/BF16 Tensor Core (dense),
		// 1,555 GB/s HBM2, PCIe Gen4 64 GB/s (bidirectional).
		Name: "a100-40gb", Description: "NVIDIA A100 SXM4 40 GB",
		Capacity:     40 * gib,
		PeakFLOPS:    Peaks{F32: 19.5 * tera, F16: 312 * tera, BF16: 312 * tera, F64: 9.7 * tera},
		MemBandwidth: 1555 * giga, HostBandwidth: 32 * giga, LaunchOverheadNs: gpuLaunchNs,
	},
	{
		// NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM): as the 40 GB
		// part with 2,039 GB/s HBM2e.
		Name: "a100-80gb", Description: "NVIDIA A100 SXM4 80 GB",
		Capacity:     80 * gib,
		PeakFLOPS:    Peaks{F32: 19.5 * tera, F16: 312 * tera, BF16: 312 * tera, F64: 9.7 * tera},
		MemBandwidth: 2039 * giga, HostBandwidth: 32 * giga, LaunchOverheadNs: gpuLaunchNs,
	},
	{
		// NVIDIA H100 Tensor Core GPU datasheet (H100 SXM): 34 TFLOPS FP64,
		// 67 TFLOPS FP32, 1,979 TFLOPS FP16/BF16 Tensor Core with sparsity
		// (989.5 dense), 80 GB HBM3 at 3.35 TB/s, PCIe Gen5 128 GB/s
		// (bidirectional).
		Name: "h100-80gb", Description: "NVIDIA H100 SXM5 80 GB",
		Capacity:     80 * gib,
		PeakFLOPS:    Peaks{F32: 67 * tera, F16: 989.5 * tera, BF16: 989.5 * tera, F64: 34 * tera},
		MemBandwidth: 3350 * giga, HostBandwidth: 64 * giga, LaunchOverheadNs: gpuLaunchNs,
	},
	{
		// NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): compute as H100
		// SXM (34 FP64, 67 FP32, 1,979 FP16/BF16 with sparsity = 989.5 dense),
		// 141 GB HBM3e at 4.8 TB/s, PCIe Gen5 128 GB/s (bidirectional).
		Name: "h200-141gb", Description: "NVIDIA H200 SXM 141 GB",
		Capacity:     141 * 1000 * 1000 * 1000,
		PeakFLOPS:    Peaks{F32: 67 * tera, F16: 989.5 * tera, BF16: 989.5 * tera, F64: 34 * tera},
		MemBandwidth: 4800 * giga, HostBandwidth: 64 * giga, LaunchOverheadNs: gpuLaunchNs,
	},
	{
		// NVIDIA Turing architecture whitepaper, GeForce RTX 2080 Ti
		// (reference clocks): 13.4 TFLOPS FP32, 53.8 TFLOPS FP16 Tensor with
		// FP32 accumulate, FP64 at 1/32 of FP32 (0.42 TFLOPS), 11 GB GDDR6 at
		// 616 GB/s; PCIe 3.0 x16 (15.75 GB/s per direction). No BF16.
		Name: "rtx2080ti", Description: "NVIDIA GeForce RTX 2080 Ti 11 GB",
		Capacity:     11 * gib,
		PeakFLOPS:    Peaks{F32: 13.4 * tera, F16: 53.8 * tera, F64: 0.42 * tera},
		MemBandwidth: 616 * giga, HostBandwidth: 15.75 * giga, LaunchOverheadNs: gpuLaunchNs,
	},
	{
		// NVIDIA TITAN V product specifications: 110 TFLOPS deep learning
		// (Tensor), 12 GB HBM2 at 652.8 GB/s; Volta whitepaper rates give
		// 14.9 TFLOPS FP32 and 7.45 TFLOPS FP64 at its 1455 MHz boost with
		// 5120 CUDA cores; PCIe 3.0 x16 (15.75 GB/s per direction).
		Name: "titanv", Description: "NVIDIA TITAN V 12 GB",
		Capacity:     12 * gib,
		PeakFLOPS:    Peaks{F32: 14.9 * tera, F16: 110 * tera, F64: 7.45 * tera},
		MemBandwidth: 652.8 * giga, HostBandwidth: 15.75 * giga, LaunchOverheadNs: gpuLaunchNs,
	},
	{
		// NVIDIA T4 Tensor Core GPU datasheet: 8.1 TFLOPS FP32, 65 TFLOPS
		// mixed-precision FP16/FP32, 16 GB GDDR6 at 320+ GB/s, PCIe Gen3 x16
		// 32 GB/s (bidirectional). FP64 is not quoted by the datasheet: 0
		// (runs at the FP32 rate in this model, an optimistic bound).
		Name: "t4", Description: "NVIDIA T4 16 GB",
		Capacity:     16 * gib,
		PeakFLOPS:    Peaks{F32: 8.1 * tera, F16: 65 * tera},
		MemBandwidth: 320 * giga, HostBandwidth: 16 * giga, LaunchOverheadNs: gpuLaunchNs,
	},
	{
		// Intel Xeon Platinum 8280 (Cascade Lake, 28 cores) product
		// specifications: 6 channels of DDR4-2933 = 140.8 GB/s; peak with two
		// AVX-512 FMA units at the 1.8 GHz all-core AVX-512 frequency:
		// 28 x 1.8 GHz x 64 = 3.2 TFLOPS FP32, 1.6 TFLOPS FP64; no native
		// FP16/BF16. Capacity: a 6 x 32 GB DIMM configuration (192 GB).
		// "Swapping" on a CPU is a memory copy: host bandwidth = half the
		// memory bandwidth (read + write).
		Name: "cpu", Description: "Intel Xeon Platinum 8280, 6x32 GB DDR4-2933",
		Capacity:     192 * gib,
		PeakFLOPS:    Peaks{F32: 3.2 * tera, F64: 1.6 * tera},
		MemBandwidth: 140.8 * giga, HostBandwidth: 70.4 * giga, LaunchOverheadNs: cpuLaunchNs,
	},
}

// Device returns the built-in profile with the given name (case-insensitive).
// An unknown name is an error listing the valid names.
func Device(name string) (Profile, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, p := range builtinProfiles {
		if p.Name == n {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("device %q: unknown, expected one of %s", name, strings.Join(DeviceNames(), ", "))
}

// DeviceNames returns the built-in profile names, sorted.
func DeviceNames() []string {
	ps := Devices()
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return names
}

// Devices returns the built-in profiles sorted by name.
func Devices() []Profile {
	ps := append([]Profile(nil), builtinProfiles...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	return ps
}

// Validate checks a profile; the error names the first bad field.
func (p Profile) Validate() error {
	fin := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	rate := func(field string, v, lo, hi float64, zeroOK bool, unit string) error {
		if zeroOK && v == 0 {
			return nil
		}
		if !fin(v) || v < lo || v > hi {
			zero := ""
			if zeroOK {
				zero = " or 0 (runs at the f32 rate)"
			}
			return fmt.Errorf("device profile %q: field %s is %g, expected %g..%g %s%s", p.Name, field, v, lo, hi, unit, zero)
		}
		return nil
	}
	if strings.TrimSpace(p.Name) == "" {
		return fmt.Errorf("device profile: field name is empty, expected a name")
	}
	if p.Capacity <= 0 || p.Capacity > MaxDeviceBytes {
		return fmt.Errorf("device profile %q: field capacity_bytes is %d, expected 1..%d", p.Name, p.Capacity, MaxDeviceBytes)
	}
	for _, c := range []struct {
		field    string
		v        float64
		lo, hi   float64
		zeroOK   bool
		unitText string
	}{
		{"peak_flops.f32", p.PeakFLOPS.F32, MinFLOPS, MaxFLOPS, false, "FLOP/s"},
		{"peak_flops.f16", p.PeakFLOPS.F16, MinFLOPS, MaxFLOPS, true, "FLOP/s"},
		{"peak_flops.bf16", p.PeakFLOPS.BF16, MinFLOPS, MaxFLOPS, true, "FLOP/s"},
		{"peak_flops.f64", p.PeakFLOPS.F64, MinFLOPS, MaxFLOPS, true, "FLOP/s"},
		{"memory_bandwidth", p.MemBandwidth, MinBandwidth, MaxBandwidth, false, "bytes/s"},
		{"host_bandwidth", p.HostBandwidth, MinBandwidth, MaxBandwidth, false, "bytes/s"},
	} {
		if err := rate(c.field, c.v, c.lo, c.hi, c.zeroOK, c.unitText); err != nil {
			return err
		}
	}
	if p.LaunchOverheadNs < 0 || p.LaunchOverheadNs > MaxLaunchOverheadNs {
		return fmt.Errorf("device profile %q: field launch_overhead_ns is %d, expected 0..%d", p.Name, p.LaunchOverheadNs, MaxLaunchOverheadNs)
	}
	return nil
}

// Ranges a device profile's fields must lie in: wide enough for any real
// device (a microcontroller to an exascale machine), narrow enough that the
// cost model's times and the simulator's sums stay far from overflow.
const (
	MaxDeviceBytes            = int64(1) << 60 // 1 EiB
	MinFLOPS                  = 1e6            // 1 MFLOP/s
	MaxFLOPS                  = 1e21           // 1 ZFLOP/s
	MinBandwidth              = 1e3            // 1 kB/s
	MaxBandwidth              = 1e16           // 10 PB/s
	MaxLaunchOverheadNs int64 = 1e9            // 1 s per kernel launch
)

// ParseProfile decodes a device profile from JSON (the field names of
// Profile's JSON tags; unknown fields are errors) and validates it.
func ParseProfile(r io.Reader) (Profile, error) {
	var p Profile
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Profile{}, fmt.Errorf("device profile: %w", err)
	}
	if dec.More() {
		return Profile{}, fmt.Errorf("device profile: trailing data after the JSON object")
	}
	if err := p.Validate(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

// LoadProfile reads a user device profile from a JSON file, for example
//
//	{"name": "my-gpu", "capacity_bytes": 25769803776,
//	 "peak_flops": {"f32": 30e12, "f16": 120e12, "bf16": 120e12, "f64": 0.5e12},
//	 "memory_bandwidth": 936e9, "host_bandwidth": 16e9, "launch_overhead_ns": 5000}
func LoadProfile(path string) (Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Profile{}, fmt.Errorf("device profile: %w", err)
	}
	p, err := ParseProfile(bytes.NewReader(b))
	if err != nil {
		return Profile{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}
