package strategy

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// planViolations counts what a plan applied to an eager PyTorch step cannot
// carry out: a compute of a backward or update op that is not its first,
// and a recompute of a forward op before the backward pass starts (the
// tensor was dropped between two forward readers, which Python holds it
// across).
func planViolations(g *graph.Graph, p *sim.Plan) (backward, early int) {
	seen := make([]bool, len(g.Ops))
	inBackward := false
	for _, s := range p.Steps {
		if s.Kind != sim.Compute {
			continue
		}
		op := &g.Ops[s.Op]
		if op.Phase != graph.Forward {
			inBackward = true
		}
		if seen[s.Op] {
			if op.Phase != graph.Forward {
				backward++
			} else if !inBackward {
				early++
			}
		}
		seen[s.Op] = true
	}
	return backward, early
}

// TestForwardOnlyPlans: testdata/gpt_step.json is remat_torch.trace's step
// of tools/export_onnx.py's TinyGPT (batch 8, measured op times), on which
// `sim plan --strategy sublinear-budget --budget 0.5 --device cpu` made a
// plan that dropped the tied head's weight gradient and recomputed the
// loss's backward ops to make it again at the end of the backward pass;
// remat_torch.apply cannot run a backward op twice, and the applied step
// measured 9.4% above the prediction. With recompute.forward_only (the
// pytorch preset) no sublinear strategy recomputes a backward op or a
// forward op before the backward pass; with MegEngine's unrestricted pass
// (recompute.forward_only=false) sublinear-budget does.
func TestForwardOnlyPlans(t *testing.T) {
	g, err := graph.ReadFile("testdata/gpt_step.json")
	require.NoError(t, err)
	dev, err := sim.Device("cpu")
	require.NoError(t, err)
	ctx := context.Background()
	for _, fwdOnly := range []string{"false", ""} {
		s := config.Defaults()
		if fwdOnly != "" {
			s, err = s.With("recompute.forward_only", fwdOnly, config.FlagSource("recompute-forward-only"))
			require.NoError(t, err)
		}
		o, s, err := OptionsFor(s, dev)
		require.NoError(t, err)
		assert.Equal(t, fwdOnly == "", s.Bool(config.RecomputeForwardOnly), "the pytorch preset sets it")
		o.Allocator = AllocIdeal
		o, err = WithBudgetRatio(ctx, g, o, 0.5)
		require.NoError(t, err)
		for _, name := range []string{"sublinear", "sublinear-ga", "sublinear-budget"} {
			st, err := Lookup(name)
			require.NoError(t, err)
			res, err := st.Plan(ctx, g, o)
			require.NoError(t, err, name)
			require.NotNil(t, res.Plan, name)
			bw, early := planViolations(g, res.Plan)
			if fwdOnly == "" {
				assert.Zero(t, bw, "%s: backward ops recomputed", name)
				assert.Zero(t, early, "%s: forward ops recomputed before the backward pass", name)
			} else if name == "sublinear-budget" {
				assert.Positive(t, bw, "MegEngine's pass recomputes the loss's backward ops here")
			}
		}
	}
}
