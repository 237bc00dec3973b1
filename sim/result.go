package sim

import (
	"sort"

	"github.com/remat-dev/remat/graph"
)

// Result is what every simulation returns, whatever the strategy, so that
// reports compare like with like. Its JSON field names are stable.
//
// Times are in nanoseconds. TotalNs = ComputeNs + RecomputeNs + StallNs:
// swaps run on a copy stream that overlaps compute, so SwapNs (the copy
// stream's busy time) is not added; only the time compute waits for a copy
// (and the tail of copies still running when compute ends) counts, as
// StallNs.
type Result struct {
	Graph     string `json:"graph"`
	Strategy  string `json:"strategy"`
	Device    string `json:"device"`
	Allocator string `json:"allocator"`
	// Capacity is the usable memory (device or override, minus the pool
	// reserve) in bytes; 0 means unlimited.
	Capacity int64 `json:"capacity"`
	// Steps is the number of steps executed successfully.
	Steps int `json:"steps"`

	// PeakAllocated is the largest number of bytes in live blocks, as the
	// allocator accounts them; PeakAllocatedStep is the step at which it was
	// first reached (-1: before the first step, i.e. the resident inputs,
	// parameters and state alone) and PeakAllocatedOp the op of that step
	// (-1 if it is not a compute step).
	PeakAllocated     int64      `json:"peak_allocated"`
	PeakAllocatedStep int        `json:"peak_allocated_step"`
	PeakAllocatedOp   graph.OpID `json:"peak_allocated_op"`
	// PeakReserved is the largest number of bytes the allocator held from
	// the device (with ReserveAll: the whole capacity).
	PeakReserved     int64      `json:"peak_reserved"`
	PeakReservedStep int        `json:"peak_reserved_step"`
	PeakReservedOp   graph.OpID `json:"peak_reserved_op"`

	TotalNs     int64 `json:"total_ns"`
	ComputeNs   int64 `json:"compute_ns"`
	RecomputeNs int64 `json:"recompute_ns"`
	SwapNs      int64 `json:"swap_ns"`
	StallNs     int64 `json:"stall_ns"`

	// Computes counts first runs of ops, Recomputes further runs.
	Computes   int `json:"computes"`
	Recomputes int `json:"recomputes"`
	// Frees counts free steps; Evictions counts the frees whose tensor was
	// later brought back by a recompute.
	Frees     int   `json:"frees"`
	Evictions int   `json:"evictions"`
	SwapOuts  int   `json:"swap_outs"`
	SwapIns   int   `json:"swap_ins"`
	SwapBytes int64 `json:"swap_bytes"`
	// InPlace counts outputs that took an input's storage in place
	// (Options.InPlace with an InPlaceAllocator).
	InPlace int `json:"in_place,omitempty"`

	// TopAtPeak lists the largest blocks live at the allocated peak, largest
	// first (at most TopTensorsKept).
	TopAtPeak []LiveTensor `json:"top_at_peak"`
	// OOM describes the failure when the simulation ran out of memory.
	OOM *OOMInfo `json:"oom,omitempty"`
	// Timeline has one point per executed step when Options.Timeline is set.
	Timeline []TimelinePoint `json:"timeline,omitempty"`
	// Events are the trace events when Options.Trace is set (see WriteTrace).
	Events []Event `json:"events,omitempty"`

	liveAtPeak []LiveTensor // every block live at the peak, largest first
}

// TopTensorsKept is how many live blocks Result.TopAtPeak and OOMInfo.Largest
// keep.
const TopTensorsKept = 10

// LiveTensor is a block live at some moment: a tensor's storage, an op's
// workspace or the atomic-clean arena.
type LiveTensor struct {
	// Tensor is the tensor (-1 for a workspace or the arena).
	Tensor graph.TensorID `json:"tensor"`
	// Op is the tensor's producer or the workspace's op (-1 if none).
	Op graph.OpID `json:"op"`
	// Name is the tensor's name, "workspace:<op name>", "rng_state:<op name>"
	// (Options.RNGStateBytes) or "atomic_clean_arena".
	Name string `json:"name"`
	// Kind is the tensor kind, "workspace", "rng_state" or "arena".
	Kind  string `json:"kind"`
	Bytes int64  `json:"bytes"`
}

// OOMInfo describes where memory ran out.
type OOMInfo struct {
	Step   int            `json:"step"`
	Op     graph.OpID     `json:"op"`
	OpName string         `json:"op_name,omitempty"`
	Tensor graph.TensorID `json:"tensor"`
	// Requested is the size of the allocation that failed.
	Requested int64 `json:"requested"`
	Allocated int64 `json:"allocated"`
	Reserved  int64 `json:"reserved"`
	Capacity  int64 `json:"capacity"`
	// Largest are the largest blocks live when the allocation failed.
	Largest []LiveTensor `json:"largest"`
}

// TopTensorsAtPeak returns the n largest blocks live at the allocated peak,
// largest first (fewer if fewer were live). Beyond TopTensorsKept it knows
// more only when the simulation ran with Options.LiveAtPeak (a Result
// decoded from JSON knows only TopAtPeak).
func (r *Result) TopTensorsAtPeak(n int) []LiveTensor {
	src := r.liveAtPeak
	if src == nil {
		src = r.TopAtPeak
	}
	if n > len(src) {
		n = len(src)
	}
	if n < 0 {
		n = 0
	}
	return append([]LiveTensor(nil), src[:n]...)
}

// Overhead returns the relative time overhead over baseline:
// (TotalNs - baseline.TotalNs) / baseline.TotalNs (0 when the baseline took
// no time).
func (r *Result) Overhead(baseline *Result) float64 {
	if baseline == nil || baseline.TotalNs == 0 {
		return 0
	}
	return float64(r.TotalNs-baseline.TotalNs) / float64(baseline.TotalNs)
}

// MemorySaving returns the relative reduction of the allocated peak against
// baseline: 1 - PeakAllocated / baseline.PeakAllocated (0 when the baseline
// peak is 0).
func (r *Result) MemorySaving(baseline *Result) float64 {
	if baseline == nil || baseline.PeakAllocated == 0 {
		return 0
	}
	return 1 - float64(r.PeakAllocated)/float64(baseline.PeakAllocated)
}

// Failed reports whether the simulation ran out of memory.
func (r *Result) Failed() bool { return r.OOM != nil }

// sortLive orders blocks largest first, then by tensor, op and name, so that
// output is deterministic.
func sortLive(l []LiveTensor) {
	sort.Slice(l, func(i, j int) bool { return liveLess(&l[i], &l[j]) })
}

// liveLess is sortLive's order.
func liveLess(a, b *LiveTensor) bool {
	if a.Bytes != b.Bytes {
		return a.Bytes > b.Bytes
	}
	if a.Tensor != b.Tensor {
		return a.Tensor < b.Tensor
	}
	if a.Op != b.Op {
		return a.Op < b.Op
	}
	return a.Name < b.Name
}
