package strategy

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/dtr"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

func TestTableNamesAreUniqueAndDocumented(t *testing.T) {
	seen := map[string]bool{}
	specs := map[string]bool{}
	for _, sp := range config.Specs() {
		specs[sp.Name] = true
	}
	for _, s := range All() {
		assert.False(t, seen[s.Name], "duplicate %s", s.Name)
		seen[s.Name] = true
		assert.NotEmpty(t, s.Doc, s.Name)
		assert.NotNil(t, s.Planner, s.Name)
		for _, r := range s.Reads {
			assert.True(t, specs[r], "%s reads unknown setting %q", s.Name, r)
		}
	}
	assert.True(t, seen[Baseline])
}

func TestResolve(t *testing.T) {
	all, err := Resolve(nil)
	require.NoError(t, err)
	assert.Equal(t, Names(), namesOf(all))
	two, err := Resolve([]string{"dtr", "none"})
	require.NoError(t, err)
	assert.Equal(t, []string{"dtr", "none"}, namesOf(two))
	for _, bad := range [][]string{{""}, {"none", ""}, {"none", "none"}, {"nope"}} {
		_, err := Resolve(bad)
		assert.Error(t, err, "%q", bad)
	}
	_, err = Resolve([]string{"nope"})
	assert.ErrorContains(t, err, `strategy "nope": expected one of none, mirror`)
}

func namesOf(sts []Strategy) []string {
	var out []string
	for _, s := range sts {
		out = append(out, s.Name)
	}
	return out
}

func TestAllIsACopy(t *testing.T) {
	a := All()
	a[0].Name = "changed"
	assert.Equal(t, Baseline, All()[0].Name)
}

func TestEveryStrategyPlansAChain(t *testing.T) {
	g, err := models.Build("chain", models.Options{Depth: 16})
	require.NoError(t, err)
	o, err := OptionsFrom(nil)
	require.NoError(t, err)
	o.Allocator = AllocIdeal
	base, err := mustLookup(t, Baseline).Plan(context.Background(), g, o)
	require.NoError(t, err)
	require.Equal(t, StatusOK, base.Status)
	o.Budget = base.PeakAllocated() * 6 / 10
	for _, s := range All() {
		res, err := s.Plan(context.Background(), g, o)
		require.NoError(t, err, s.Name)
		assert.Equal(t, s.Name, res.Strategy)
		require.NotNil(t, res.Sim, "%s: %s %s", s.Name, res.Status, res.Reason)
		if s.Name == Baseline {
			assert.Equal(t, StatusInfeasible, res.Status)
			continue
		}
		if s.PlansForLimit || s.Name == "dtr" {
			assert.Equal(t, StatusOK, res.Status, "%s: %s", s.Name, res.Reason)
			assert.LessOrEqual(t, res.PeakAllocated(), o.Budget, s.Name)
		}
		if s.Name == "mirror" || s.Name == "mirror-cost" {
			// MXNet never mirrors FullyConnected, the chain's only op type.
			assert.Equal(t, base.PeakAllocated(), res.PeakAllocated(), s.Name)
			continue
		}
		assert.Less(t, res.PeakAllocated(), base.PeakAllocated(), "%s reduces the peak of a chain", s.Name)
	}
}

func mustLookup(t *testing.T, name string) Strategy {
	t.Helper()
	s, err := Lookup(name)
	require.NoError(t, err)
	return s
}

// planWithEnv plans g with the named strategy on the ideal allocator, with
// settings loaded from env and the given budget (0: none).
func planWithEnv(t *testing.T, g *graph.Graph, name string, env map[string]string, budget int64) Result {
	t.Helper()
	s, _, err := config.Load(config.MapEnv(env))
	require.NoError(t, err)
	o, err := OptionsFrom(s)
	require.NoError(t, err)
	o.Allocator = AllocIdeal
	o.Budget = budget
	res, err := mustLookup(t, name).Plan(context.Background(), g, o)
	require.NoError(t, err)
	return res
}

func TestMirrorFollowsTheGlobalSwitch(t *testing.T) {
	g, err := models.Build("resnet18", models.Options{Batch: 2})
	require.NoError(t, err)
	run := func(env map[string]string) Result { return planWithEnv(t, g, "mirror", env, 0) }
	def := run(nil)
	assert.Greater(t, def.Sim.Recomputes, 0, "choosing the strategy turns mirroring on")
	off := run(map[string]string{"MXNET_BACKWARD_DO_MIRROR": "0"})
	assert.Equal(t, 0, off.Sim.Recomputes, "an explicit 0 is MXNet's global switch")
	on := run(map[string]string{"MXNET_BACKWARD_DO_MIRROR": "1"})
	assert.Equal(t, def.Sim.Recomputes, on.Sim.Recomputes)
}

func TestSublinearRefusesDTR(t *testing.T) {
	g, err := models.Build("chain", models.Options{Depth: 4})
	require.NoError(t, err)
	s, _, err := config.Load(config.MapEnv{"MEGENGINE_ENABLE_DROP": "1"})
	require.NoError(t, err)
	o, err := OptionsFrom(s)
	require.NoError(t, err)
	for _, st := range All() {
		_, err := st.Plan(context.Background(), g, o)
		if st.ExcludesDTR {
			assert.ErrorIs(t, err, config.ErrConflict, st.Name)
		} else {
			assert.NoError(t, err, st.Name)
		}
	}
}

func TestCanceledContext(t *testing.T) {
	g, err := models.Build("chain", models.Options{Depth: 8})
	require.NoError(t, err)
	o, err := OptionsFrom(nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, s := range All() {
		_, err := s.Plan(ctx, g, o)
		assert.ErrorIs(t, err, sim.ErrCanceled, s.Name)
		assert.ErrorIs(t, err, context.Canceled, s.Name)
	}
}

func TestMisuse(t *testing.T) {
	o, err := OptionsFrom(nil)
	require.NoError(t, err)
	g, err := models.Build("chain", models.Options{Depth: 4})
	require.NoError(t, err)
	cases := map[string]func() error{
		"nil graph":    func() error { _, err := All()[0].Plan(context.Background(), nil, o); return err },
		"zero options": func() error { _, err := All()[0].Plan(context.Background(), g, Options{}); return err },
		"bad allocator": func() error {
			oo := o
			oo.Allocator = "buddy"
			_, err := All()[0].Plan(context.Background(), g, oo)
			return err
		},
		"negative budget": func() error {
			oo := o
			oo.Budget = -1
			_, err := All()[0].Plan(context.Background(), g, oo)
			return err
		},
		"no planner": func() error { _, err := Strategy{Name: "x"}.Plan(context.Background(), g, o); return err },
		"nil context": func() error {
			//lint:ignore SA1012 a nil context is a misuse the API must survive
			_, err := All()[0].Plan(nil, g, o) //nolint:staticcheck
			return err
		},
	}
	for name, call := range cases {
		t.Run(name, func(t *testing.T) {
			var err error
			assert.NotPanics(t, func() { err = call() })
			if name != "nil context" {
				assert.Error(t, err)
			}
		})
	}
}

// TestResidentAboveTheDevice: on a device smaller than the parameters and
// inputs alone, no strategy errs: each reports that the model does not fit
// (dtr, which cannot even place the resident tensors, says oom and why).
func TestResidentAboveTheDevice(t *testing.T) {
	g, err := models.Build("gpt", models.Options{Depth: 4, Batch: 1, Seq: 16})
	require.NoError(t, err)
	var resident int64
	for i := range g.Tensors {
		if g.Tensors[i].Producer < 0 {
			resident += g.Tensors[i].Bytes
		}
	}
	dev, err := sim.Device("v100-16gb")
	require.NoError(t, err)
	dev.Capacity = resident / 2
	o, _, err := OptionsFor(config.Defaults(), dev)
	require.NoError(t, err)
	for _, s := range All() {
		res, err := s.Plan(context.Background(), g, o)
		require.NoError(t, err, s.Name)
		assert.Contains(t, []Status{StatusOOM, StatusInfeasible}, res.Status, "%s: %s", s.Name, res.Reason)
		if s.Name == "dtr" {
			assert.Equal(t, StatusOOM, res.Status)
			assert.Contains(t, res.Reason, "resident from the start")
		}
	}
}

// resnet18None builds resnet18 at batch 32 and plans strategy none on it
// with the ideal allocator.
func resnet18None(t *testing.T) (*graph.Graph, Result) {
	t.Helper()
	g, err := models.Build("resnet18", models.Options{Batch: 32})
	require.NoError(t, err)
	base, err := OptionsFrom(nil)
	require.NoError(t, err)
	base.Allocator = AllocIdeal
	none, err := mustLookup(t, "none").Plan(context.Background(), g, base)
	require.NoError(t, err)
	return g, none
}

// TestDTRHeuristicSetting checks that dtr.heuristic names exactly dtr's
// heuristics (every choice parses to one, every heuristic is a choice) and
// that the dtr strategy evicts by the one it names: a runtime heuristic
// and the default lookahead make different runs on resnet18 (batch 32) at
// 0.7 of its peak.
func TestDTRHeuristicSetting(t *testing.T) {
	spec := config.DTRHeuristic.Spec()
	seen := map[dtr.Heuristic]bool{}
	for _, c := range spec.Choices {
		for _, name := range append([]string{c.Name}, c.Aliases...) {
			h, err := dtr.ParseHeuristic(name)
			require.NoError(t, err, name)
			assert.Equal(t, c.Name, h.String(), "alias %q", name)
			seen[h] = true
		}
	}
	for _, h := range dtr.Heuristics {
		assert.True(t, seen[h], "dtr.heuristic has no choice %s", h)
	}

	g, none := resnet18None(t)
	run := func(env map[string]string) Result {
		res := planWithEnv(t, g, "dtr", env, none.Sim.PeakAllocated*7/10)
		require.Equal(t, StatusOK, res.Status, "%v: %s", env, res.Reason)
		return res
	}
	def := run(nil)
	assert.Equal(t, def.Sim, run(map[string]string{"REMAT_DTR_HEURISTIC": "lookahead"}).Sim, "lookahead is the default")
	lru := run(map[string]string{"REMAT_DTR_HEURISTIC": "lru"})
	assert.NotEqual(t, def.Sim.Recomputes, lru.Sim.Recomputes, "lru evicts differently from lookahead")
	assert.LessOrEqual(t, lru.Sim.PeakAllocated, none.Sim.PeakAllocated*7/10)

	_, _, err := config.Load(config.MapEnv{"REMAT_DTR_HEURISTIC": "belady-lru"})
	require.ErrorContains(t, err, "REMAT_DTR_HEURISTIC")
}

// TestDTRBudgetScopeSaved: with dtr.budget_scope saved the budget bounds
// the saved activations alone, checked after each save. On resnet18 a
// quarter of the peak, which the default scope finds infeasible, fits: the
// saved activations stay within it up to one op's outputs (their peak is
// in the detail) and the rest of the step comes on top.
func TestDTRBudgetScopeSaved(t *testing.T) {
	g, none := resnet18None(t)
	budget := none.Sim.PeakAllocated / 4
	env := map[string]string{"REMAT_DTR_BUDGET_SCOPE": "saved", "REMAT_DTR_HEURISTIC": "dtr-eqclass", "MEGENGINE_DTR_EVICTEE_MINIMUM_SIZE": "0"}
	saved := planWithEnv(t, g, "dtr", env, budget)
	require.Equal(t, StatusOK, saved.Status, saved.Reason)
	require.True(t, saved.SavedBudget)
	require.True(t, saved.FitsBudget)
	require.Positive(t, saved.SavedPeak)
	var maxOut int64 // the most bytes one op makes
	for _, op := range g.Ops {
		var b int64
		for _, out := range op.Outputs {
			b += g.Tensors[out].StorageBytes()
		}
		maxOut = max(maxOut, b)
	}
	require.LessOrEqual(t, saved.SavedPeak, budget+maxOut, "within the budget up to one op's outputs")
	require.Greater(t, saved.Sim.PeakAllocated, budget)
	require.Less(t, saved.Sim.PeakAllocated, none.Sim.PeakAllocated)
	require.Contains(t, saved.Stats.Detail, fmt.Sprintf("saved activations peak %d bytes", saved.SavedPeak))

	delete(env, "REMAT_DTR_BUDGET_SCOPE")
	all := planWithEnv(t, g, "dtr", env, budget)
	require.NotEqual(t, StatusOK, all.Status)
	require.False(t, all.SavedBudget)

	_, _, err := config.Load(config.MapEnv{"REMAT_DTR_BUDGET_SCOPE": "activations"})
	require.ErrorContains(t, err, "REMAT_DTR_BUDGET_SCOPE")
}

// TestDTRRematLimit: dtr.remat_limit stops a dtr run as thrash once its
// recomputation passes that many times the step's compute. On a 200-layer
// chain at 3% of its peak DTR fits with about twice the step's compute
// recomputed: the same run with no bound (0), under the default bound and
// under one just above its ratio, thrash under the DTR paper's bound of 1
// and under one just below its ratio; a bad value is an error that names
// the variable.
func TestDTRRematLimit(t *testing.T) {
	g, err := models.Build("chain", models.Options{Depth: 200})
	require.NoError(t, err)
	base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
	require.NoError(t, err)
	budget := base.PeakAllocated * 3 / 100
	free := planWithEnv(t, g, "dtr", map[string]string{"REMAT_DTR_REMAT_LIMIT": "0"}, budget)
	require.Equal(t, StatusOK, free.Status, free.Reason)
	ratio := float64(free.Sim.RecomputeNs) / float64(free.Sim.ComputeNs)
	require.Greater(t, ratio, 1.5, "the run recomputes more than the step's compute")
	require.Less(t, ratio, 3.0, "the default bound lets the run finish")

	for _, limit := range []string{"", fmt.Sprint(ratio + 0.1)} {
		env := map[string]string{"REMAT_DTR_REMAT_LIMIT": limit}
		if limit == "" {
			env = nil
		}
		res := planWithEnv(t, g, "dtr", env, budget)
		require.Equal(t, StatusOK, res.Status, "limit %q: %s", limit, res.Reason)
		assert.Equal(t, free.Sim, res.Sim, "limit %q", limit)
	}
	for _, limit := range []string{"1", fmt.Sprint(ratio - 0.1)} {
		res := planWithEnv(t, g, "dtr", map[string]string{"REMAT_DTR_REMAT_LIMIT": limit}, budget)
		assert.Equal(t, StatusThrash, res.Status, "limit %q", limit)
		assert.Contains(t, res.Reason, "dtr.remat_limit", "limit %q", limit)
	}

	_, _, err = config.Load(config.MapEnv{"REMAT_DTR_REMAT_LIMIT": "-1"})
	require.ErrorContains(t, err, "REMAT_DTR_REMAT_LIMIT")
}

// A dtr run that fails because the step's tensors are under the evictee
// minimum size (a CIFAR ResNet at batch 4: every tensor is under 1 MiB)
// says so in its reason, with the count and byte share its graph has; with
// the minimum at 0 the same budget fits.
func TestDTRSmallTensorsNote(t *testing.T) {
	g, err := models.Build("resnet-cifar", models.Options{Batch: 4, Depth: 20})
	require.NoError(t, err)
	base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
	require.NoError(t, err)
	budget := base.PeakAllocated / 2
	res := planWithEnv(t, g, "dtr", nil, budget)
	require.Contains(t, []Status{StatusThrash, StatusInfeasible}, res.Status, res.Reason)
	var n, all int
	for i := range g.Tensors {
		if tt := &g.Tensors[i]; tt.Producer != graph.NoOp && tt.StorageBytes() > 0 {
			all++
			if tt.StorageBytes() < 1<<20 {
				n++
			}
		}
	}
	require.Positive(t, n)
	assert.Contains(t, res.Reason, fmt.Sprintf("; %d of the %d tensors the step makes (", n, all))
	assert.Contains(t, res.Reason, "are under dtr.evictee_minimum_size (1048576 bytes)")

	every := planWithEnv(t, g, "dtr", map[string]string{"MEGENGINE_DTR_EVICTEE_MINIMUM_SIZE": "0"}, budget)
	require.Equal(t, StatusOK, every.Status, every.Reason)
	assert.Empty(t, smallTensorsNote(g, 0))
	assert.Empty(t, smallTensorsNote(g, 1), "no tensor the step makes is under one byte")
}

// TestDTRPlanIsTheRun plans dtr with DTRPlan (what sim plan --strategy dtr
// does) on the CLI's options and replays the plan on the simulator with
// the same options: it reaches the run's peak and time, so the plan is the
// run that the report shows, replans and host retries included.
func TestDTRPlanIsTheRun(t *testing.T) {
	g, err := models.Build("resnet-cifar", models.Options{Depth: 20, Batch: 64})
	require.NoError(t, err)
	s, err := Lookup("dtr")
	require.NoError(t, err)
	for _, ratio := range []float64{0.5, 0.7} {
		o, _, err := OptionsFor(config.Defaults(), sim.Profile{})
		require.NoError(t, err)
		o.DTRPlan = true
		o, err = WithBudgetRatio(context.Background(), g, o, ratio)
		require.NoError(t, err)
		res, err := s.Plan(context.Background(), g, o)
		require.NoError(t, err)
		require.Equal(t, StatusOK, res.Status, "ratio %.1f: %s", ratio, res.Reason)
		require.NotNil(t, res.Plan, "ratio %.1f", ratio)
		so, err := o.SimOptions()
		require.NoError(t, err)
		replay, err := sim.Simulate(g, res.Plan, so)
		require.NoError(t, err, "ratio %.1f", ratio)
		require.Equal(t, res.Sim.PeakAllocated, replay.PeakAllocated, "ratio %.1f", ratio)
		require.Equal(t, res.Sim.TotalNs, replay.TotalNs, "ratio %.1f", ratio)
	}
}

// TestLookaheadDTRKeysKept plans dtr with lookahead-dtr on a residual DAG
// whose skips reach back to any earlier layer (skipDAG's far family), on
// the CLI's options at half the baseline peak. There many storages are
// kept for rematerialization (released, needed by evicted dependents): the
// index keys them (keyKept) instead of evaluating them at every choice,
// which cost 51 evaluations per eviction at this size (at 100k ops the run
// did not finish in 150 s). It also checks that the run fits.
func TestLookaheadDTRKeysKept(t *testing.T) {
	g := skipDAG(t, 3300, 0)
	o, _, err := OptionsFor(config.Defaults(), sim.Profile{})
	require.NoError(t, err)
	o, err = WithBudgetRatio(context.Background(), g, o, 0.5)
	require.NoError(t, err)
	o.DTR.Heuristic = dtr.LookaheadDTR
	s, err := Lookup("dtr")
	require.NoError(t, err)
	res, err := s.Plan(context.Background(), g, o)
	require.NoError(t, err)
	require.Equal(t, StatusOK, res.Status, res.Reason)
	require.NotNil(t, res.Sim)
	require.Greater(t, res.Sim.Evictions, 1000)
	perEviction := float64(res.Stats.Evaluations) / float64(res.Sim.Evictions)
	t.Logf("%d evictions, %.2f evaluations per eviction", res.Sim.Evictions, perEviction)
	require.Less(t, perEviction, 10.0)
}

// TestDTRFirstRunFits runs strategy dtr's first run (dtrSetup's Machine and
// configuration, the caching allocator) on zoo models whose blocks keep
// remainders too small to split off, at 0.4 to 0.8 of their peaks: the
// Machine's allocated peak stays within the budget, so the strategy does
// not run the step again with a lower one. (Before the runtime counted the
// remainders, densenet121 and mobilenet_v2 went over at every ratio.)
func TestDTRFirstRunFits(t *testing.T) {
	cases := []struct {
		model string
		o     models.Options
	}{
		{"densenet121", models.Options{}},
		{"mobilenet_v2", models.Options{}},
		{"resnet18", models.Options{}},
		{"resnet-cifar", models.Options{}},
		{"gpt", models.Options{Depth: 12, Batch: 1, Seq: 128}},
	}
	ran := 0
	for _, c := range cases {
		g, err := models.Build(c.model, c.o)
		require.NoError(t, err)
		for _, ratio := range []float64{0.4, 0.5, 0.6, 0.7, 0.8} {
			o, _, err := OptionsFor(config.Defaults(), sim.Profile{})
			require.NoError(t, err)
			o, err = WithBudgetRatio(context.Background(), g, o, ratio)
			require.NoError(t, err)
			m, cfg, _, err := dtrSetup(g, o)
			require.NoError(t, err)
			if m == nil {
				continue // nothing to run at this ratio
			}
			res, _, err := dtr.RunOnMachine(context.Background(), m, cfg)
			if err != nil {
				// no plan fits: out of memory or thrashing, and nothing else
				require.True(t, errors.Is(err, sim.ErrOutOfMemory) || errors.Is(err, dtr.ErrThrashing), "%s at %.1f: %v", c.model, ratio, err)
				continue
			}
			ran++
			t.Logf("%s %.1f: peak %d budget %d evictions %d", c.model, ratio, res.PeakAllocated, cfg.Budget, res.Evictions)
			require.LessOrEqual(t, res.PeakAllocated, cfg.Budget, "%s at %.1f", c.model, ratio)
		}
	}
	require.Greater(t, ran, 15)
}
