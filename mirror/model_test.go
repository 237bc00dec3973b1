package mirror

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// modelGraphs are random graphs and zoo models, some with force_mirroring
// attributes.
func modelGraphs(t *testing.T) []*graph.Graph {
	var gs []*graph.Graph
	for s := uint64(0); s < 30; s++ {
		gs = append(gs, randomGraph(t, s))
	}
	for _, name := range []string{"resnet18", "mobilenet_v2", "densenet121", "gpt", "lstm", "unet"} {
		o := models.Options{Batch: 2, Image: 64}
		switch name {
		case "gpt", "lstm":
			o = models.Options{Batch: 2, Seq: 32, Depth: 2}
		case "unet":
			o = models.Options{Batch: 1}
		}
		g, err := models.Build(name, o)
		require.NoError(t, err, name)
		gs = append(gs, g)
	}
	// Force some ops on and off.
	r := rand.New(rand.NewPCG(3, 4))
	for _, g := range gs[len(gs)-3:] {
		for i := range g.Ops {
			if g.Ops[i].Phase != graph.Forward || r.IntN(6) != 0 {
				continue
			}
			if g.Ops[i].Attrs == nil {
				g.Ops[i].Attrs = map[string]string{}
			}
			g.Ops[i].Attrs[graph.AttrForceMirroring] = fmt.Sprint(r.IntN(2))
		}
	}
	return gs
}

// The incremental peak model agrees with the simulator on every state it is
// asked about: random on/off choices of the candidate groups, switched one
// group at a time like the cost-aware pass does.
func TestPeakModelMatchesSimulator(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, g := range modelGraphs(t) {
		pred := Predicate{DoMirror: true, Variant: MXNet17, HonourForceOff: true, NeverEmbedding: true}
		n := len(g.Ops)
		cand, forced := make([]bool, n), make([]bool, n)
		rules := make([]Rule, n)
		for i := range g.Ops {
			rule, err := pred.Decide(&g.Ops[i])
			require.NoError(t, err)
			cand[i], forced[i], rules[i] = rule.Mirrors(), rule == RuleForceOn, rule
		}
		groups := groupsOf(g, cand)
		groupOf := make([]int32, n)
		for i := range groupOf {
			groupOf[i] = -1
		}
		for gi, grp := range groups {
			for _, o := range grp {
				groupOf[o] = int32(gi)
			}
		}
		m, _, err := newPeakModel(g, sim.Options{}, groups, groupOf, forced)
		require.NoError(t, err)
		mirrored := make([]bool, n)
		copy(mirrored, forced)
		check := func(what string) {
			res, err := build(g, "test", mirrored, rules)
			require.NoError(t, err)
			got, err := sim.Simulate(g, res.Plan, sim.Options{})
			require.NoError(t, err, "%s %s", g.Name, what)
			require.Equal(t, got.PeakAllocated, m.peak(), "%s: %s", g.Name, what)
		}
		check("forced only")
		if len(groups) == 0 {
			continue
		}
		for k := 0; k < 12; k++ {
			gi := r.IntN(len(groups))
			on := !m.on[gi]
			m.set(int32(gi), on)
			for _, o := range groups[gi] {
				if !forced[o] {
					mirrored[o] = on
				}
			}
			check(fmt.Sprintf("group %d (%d ops) -> %v", gi, len(groups[gi]), on))
		}
	}
}

// Cancelling the cost-aware pass returns a valid plan and sim.ErrCanceled.
func TestCostAwareCanceled(t *testing.T) {
	g, err := models.Build("resnet18", models.Options{Batch: 2, Image: 64})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := CostAware(ctx, g, CostOptions{})
	require.ErrorIs(t, err, sim.ErrCanceled)
	require.NotNil(t, res)
	_, err = sim.Simulate(g, res.Plan, sim.Options{})
	require.NoError(t, err)
}

// API misuse is an error, never a panic.
func TestMisuseErrors(t *testing.T) {
	_, err := Schedule(nil, nil)
	require.Error(t, err)
	_, err = Schedule(&graph.Graph{Ops: make([]graph.Op, 2)}, nil)
	require.ErrorContains(t, err, "one per op")
	_, err = Predicate{}.Decide(nil)
	require.Error(t, err)
	op := opOf("relu", map[string]string{graph.AttrForceMirroring: "maybe"}, 0)
	_, err = Predicate{DoMirror: true}.Decide(op)
	require.ErrorContains(t, err, "force_mirroring")
	require.ErrorContains(t, err, "maybe")
	g := convChain(t)
	g.Ops[2].Attrs = map[string]string{graph.AttrForceMirroring: "maybe"}
	_, err = Classic(g, Predicate{DoMirror: true})
	require.ErrorContains(t, err, "maybe")
	_, err = CostAware(context.Background(), g, CostOptions{})
	require.ErrorContains(t, err, "maybe")
}

// With several live workspaces the model is not exact; the pass checks its
// plan with the simulator and never returns one with a higher peak than the
// force-mirrored plan.
func TestCostAwareSeveralWorkspaces(t *testing.T) {
	so := sim.Options{NumTemp: 3, WorkerThreads: 3}
	for _, g := range modelGraphs(t) {
		base, err := build(g, "base", make([]bool, len(g.Ops)), make([]Rule, len(g.Ops)))
		require.NoError(t, err)
		bres, err := sim.Simulate(g, base.Plan, so)
		require.NoError(t, err)
		res, err := CostAware(context.Background(), g, CostOptions{Sim: so})
		require.NoError(t, err, g.Name)
		got, err := sim.Simulate(g, res.Plan, so)
		require.NoError(t, err)
		forced := 0
		for i := range g.Ops {
			if g.Ops[i].Attrs[graph.AttrForceMirroring] == "1" {
				forced++
			}
		}
		if forced == 0 {
			require.LessOrEqual(t, got.PeakAllocated, bres.PeakAllocated, g.Name)
		}
	}
}
