package sim

import (
	"testing"

	"github.com/remat-dev/remat/graph"
)

// TestCPUWorkspaceBatchNormBackward: PyTorch 1.13's CPU
// native_batch_norm_backward holds a temporary of its input's size
// (python/remat_torch's applier measured it at the peak of plans that
// recompute a network's stem, docs/fidelity-plans.md).
func TestCPUWorkspaceBatchNormBackward(t *testing.T) {
	b := graph.NewBuilder("bn")
	x := b.Input("x", graph.F32, 4, 64, 32, 32)
	y := b.Op("native_batch_norm", "bn", x).Out("y", graph.F32, 4, 64, 32, 32).T()
	b.SetLoss(y)
	b.SetPhase(graph.Backward)
	gy := b.Input("gy", graph.F32, 4, 64, 32, 32)
	bw := b.Op("native_batch_norm_backward", "bn_bw", gy, x).Out("gx", graph.F32, 4, 64, 32, 32)
	other := b.Op("threshold_backward", "relu_bw", gy, x).Out("gr", graph.F32, 4, 64, 32, 32)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := CPUWorkspace(g, &g.Ops[bw.ID()], 2), int64(4*64*32*32*4); got != want {
		t.Errorf("CPUWorkspace(native_batch_norm_backward) = %d, want %d (the input's bytes)", got, want)
	}
	if got := CPUWorkspace(g, &g.Ops[other.ID()], 2); got != 0 {
		t.Errorf("CPUWorkspace(threshold_backward) = %d, want 0", got)
	}
}
