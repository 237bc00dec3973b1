package sim

import (
	"strings"
	"testing"

	"github.com/remat-dev/remat/graph"
)

// FuzzParseProfile checks that the device profile parser never panics, that
// every profile it accepts is valid, and that the cost model prices an op on
// it with a finite, non-negative time.
func FuzzParseProfile(f *testing.F) {
	for _, s := range []string{
		`{"name":"my-gpu","capacity_bytes":25769803776,"peak_flops":{"f32":30e12,"f16":120e12,"bf16":120e12,"f64":0.5e12},"memory_bandwidth":936e9,"host_bandwidth":16e9,"launch_overhead_ns":5000}`,
		`{"name":"slow","capacity_bytes":17179869184,"peak_flops":{"f32":1e-300},"memory_bandwidth":9e11,"host_bandwidth":1.2e10}`,
		`{"name":"neg","capacity_bytes":-1,"peak_flops":{"f32":1e13},"memory_bandwidth":9e11,"host_bandwidth":1.2e10}`,
		`{"name":"x","capacity_bytes":1,"peak_flops":{"f32":1e6},"memory_bandwidth":1e3,"host_bandwidth":1e3,"launch_overhead_ns":1000000000}`,
		`{"name":""}`, `{}`, `[]`, ``, `{"name":"a"} {"name":"b"}`, `{"capacity_bytes":1e400}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseProfile(strings.NewReader(s))
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("ParseProfile accepted an invalid profile: %v", err)
		}
		op := &graph.Op{FLOPs: graph.MaxQuantity, BytesAccessed: graph.MaxQuantity}
		g := &graph.Graph{}
		if ns := (CostModel{Device: p}).OpTime(g, op); ns < 0 {
			t.Fatalf("op time %d on %+v", ns, p)
		}
	})
}
