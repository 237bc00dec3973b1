package sim

import (
	"math"

	"github.com/remat-dev/remat/graph"
)

// CostModel turns op costs and tensor sizes into nanoseconds for one device.
//
// An op's time is its measured TimeNs when that is > 0; otherwise the
// roofline time
//
//	max(FLOPs / peak FLOP/s of the op's dtype, BytesAccessed / memory bandwidth) + launch overhead
//
// where the op's dtype is that of its first output (of its first input when
// it has no outputs, f32 when neither has one). A swap moves a tensor over
// the host link: bytes / host bandwidth.
type CostModel struct {
	Device Profile
}

// OpDType returns the dtype whose peak throughput prices op. Tensors g does
// not have (op from another graph) have no dtype; a nil op is priced as f32.
func OpDType(g *graph.Graph, op *graph.Op) graph.DType {
	if op == nil {
		return graph.F32
	}
	for _, t := range op.Outputs {
		if t := g.Tensor(t); t != nil && t.DType.Valid() {
			return t.DType
		}
	}
	for _, t := range op.Inputs {
		if t := g.Tensor(t); t != nil && t.DType.Valid() {
			return t.DType
		}
	}
	return graph.F32
}

// RooflineNs returns the roofline time of flops and bytes at dtype dt,
// without launch overhead, rounded up to whole nanoseconds.
func (c CostModel) RooflineNs(flops, bytes int64, dt graph.DType) int64 {
	var ct, mt float64
	if pk := c.Device.PeakFLOPS.For(dt); pk > 0 && flops > 0 {
		ct = float64(flops) / pk * 1e9
	}
	if bw := c.Device.MemBandwidth; bw > 0 && bytes > 0 {
		mt = float64(bytes) / bw * 1e9
	}
	return ceilNs(math.Max(ct, mt))
}

// OpTime returns op's time in ns: TimeNs when measured, else the roofline
// time plus the device's launch overhead (0 for a nil op).
func (c CostModel) OpTime(g *graph.Graph, op *graph.Op) int64 {
	if op == nil {
		return 0
	}
	if op.TimeNs > 0 {
		return op.TimeNs
	}
	return c.opTime(op, OpDType(g, op))
}

// opTime is OpTime with the op's dtype (OpDType) given.
func (c CostModel) opTime(op *graph.Op, dt graph.DType) int64 {
	if op.TimeNs > 0 {
		return op.TimeNs
	}
	return satAdd(c.RooflineNs(op.FLOPs, op.BytesAccessed, dt), c.Device.LaunchOverheadNs)
}

// denseDType is OpDType read from the graph's dense index.
func denseDType(d *graph.Dense, op graph.OpID) graph.DType {
	for _, t := range d.Outputs(op) {
		if dt := d.DType[t]; dt.Valid() {
			return dt
		}
	}
	for _, t := range d.Inputs(op) {
		if dt := d.DType[t]; dt.Valid() {
			return dt
		}
	}
	return graph.F32
}

// SwapNs returns the time to move bytes across the host link in one
// direction.
func (c CostModel) SwapNs(bytes int64) int64 {
	if bytes <= 0 || c.Device.HostBandwidth <= 0 {
		return 0
	}
	return ceilNs(float64(bytes) / c.Device.HostBandwidth * 1e9)
}

// MemsetNs returns the time of one memset kernel writing bytes (a launch plus
// a bandwidth-bound write), used by the atomic clean policies.
func (c CostModel) MemsetNs(bytes int64) int64 {
	return satAdd(c.RooflineNs(0, bytes, graph.F32), c.Device.LaunchOverheadNs)
}

// satAdd adds two non-negative quantities (times, bytes), saturating at
// math.MaxInt64 instead of wrapping.
func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// ceilNs rounds a non-negative time up to whole nanoseconds, saturating.
func ceilNs(ns float64) int64 {
	if !(ns > 0) {
		return 0
	}
	if ns >= math.MaxInt64/4 {
		return math.MaxInt64 / 4
	}
	return int64(math.Ceil(ns - 1e-9))
}
