package sublinear

import (
	"context"
	"fmt"
	mrand "math/rand"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/MaxHalford/eaopt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// trainingGraph builds a synthetic training step: units of conv -> batch
// norm -> relu with a residual add every other unit, a loss, and the
// backward pass (relu, batch norm and convolution gradients, gradient
// accumulation at residual forks). About 8 ops per unit.
func trainingGraph(t testing.TB, units int) *graph.Graph {
	const n, c, hw = 8, 64, 28
	act := []int64{n, c, hw, hw}
	convFlops := int64(2 * n * c * c * 9 * hw * hw)
	actBytes := int64(n * c * hw * hw * 4)
	b := graph.NewBuilder(fmt.Sprintf("train%d", units))
	h := b.Input("data", graph.F32, act...)
	type unit struct {
		in, conv, bn, relu, out, w, gamma graph.TensorID
		skip                              graph.TensorID
	}
	us := make([]unit, units)
	prevIn := graph.NoTensor
	for i := range us {
		u := &us[i]
		u.in = h
		u.w = b.Parameter(fmt.Sprintf("w%d", i), graph.F32, c, c, 3, 3)
		u.gamma = b.Parameter(fmt.Sprintf("gamma%d", i), graph.F32, c)
		u.conv = b.Op("conv2d", fmt.Sprintf("conv%d", i), h, u.w).Out(fmt.Sprintf("c%d", i), graph.F32, act...).
			FLOPs(convFlops).BytesAccessed(2 * actBytes).T()
		u.bn = b.Op("batchnorm", fmt.Sprintf("bn%d", i), u.conv, u.gamma).Out(fmt.Sprintf("n%d", i), graph.F32, act...).
			FLOPs(8 * actBytes / 4).BytesAccessed(3 * actBytes).T()
		u.relu = b.Op("relu", fmt.Sprintf("relu%d", i), u.bn).Out(fmt.Sprintf("r%d", i), graph.F32, act...).
			FLOPs(actBytes / 4).BytesAccessed(2 * actBytes).T()
		u.out, u.skip = u.relu, graph.NoTensor
		if i%2 == 1 && prevIn != graph.NoTensor {
			u.skip = prevIn
			u.out = b.Op("add", fmt.Sprintf("add%d", i), u.relu, prevIn).Out(fmt.Sprintf("s%d", i), graph.F32, act...).
				FLOPs(actBytes / 4).BytesAccessed(3 * actBytes).T()
		}
		if i%2 == 0 {
			prevIn = h
		}
		h = u.out
	}
	loss := b.Op("reduce_mean", "loss", h).Out("loss", graph.F32, 1).FLOPs(actBytes / 4).BytesAccessed(actBytes).T()
	b.SetLoss(loss)
	b.SetPhase(graph.Backward)
	dh := b.Op("loss_grad", "dloss", loss, h).Out("dh", graph.F32, act...).BytesAccessed(actBytes).T()
	pending := map[graph.TensorID]graph.TensorID{}
	for i := units - 1; i >= 0; i-- {
		u := &us[i]
		if g, ok := pending[u.out]; ok {
			dh = b.Op("accumulate", fmt.Sprintf("acc_out%d", i), dh, g).Out(fmt.Sprintf("dacc%d", i), graph.F32, act...).BytesAccessed(3 * actBytes).T()
		}
		if u.skip != graph.NoTensor {
			pending[u.skip] = dh // the add passes its gradient to both branches
		}
		dr := b.Op("relu_grad", fmt.Sprintf("relu_grad%d", i), dh, u.relu).Out(fmt.Sprintf("dr%d", i), graph.F32, act...).BytesAccessed(3 * actBytes).T()
		bg := b.Op("batchnorm_grad", fmt.Sprintf("bn_grad%d", i), dr, u.conv, u.gamma).Out(fmt.Sprintf("dn%d", i), graph.F32, act...).
			OutKind(fmt.Sprintf("dgamma%d", i), graph.ParamGradient, graph.F32, c).FLOPs(10 * actBytes / 4).BytesAccessed(4 * actBytes)
		dn := bg.T()
		b.Op("conv2d_grad_w", fmt.Sprintf("conv_grad_w%d", i), dn, u.in).OutKind(fmt.Sprintf("dw%d", i), graph.ParamGradient, graph.F32, c, c, 3, 3).
			FLOPs(convFlops).BytesAccessed(2 * actBytes)
		dh = b.Op("conv2d_grad_x", fmt.Sprintf("conv_grad_x%d", i), dn, u.w).Out(fmt.Sprintf("dx%d", i), graph.F32, act...).
			FLOPs(convFlops).BytesAccessed(2 * actBytes).T()
	}
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// randomGenome draws a random subset of the allowed split points.
func randomGenome(p *mgeProblem, r *rand.Rand) Genome {
	var s Genome
	for _, c := range p.cands {
		if r.IntN(3) == 0 {
			s = append(s, graph.OpID(c))
		}
	}
	return append(s, graph.OpID(p.n-1))
}

// TestFitnessEqualsSimulator checks that every plan replays on sim without
// error and that the search's fitness (peak) and recompute time are what
// sim reports for the plan.
func TestFitnessEqualsSimulator(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	var graphs []*graph.Graph
	for i := 0; i < 60; i++ {
		graphs = append(graphs, randomDAG(t, uint64(i), 6+r.IntN(20)))
	}
	graphs = append(graphs, trainingGraph(t, 12), megBadOprGraph(t, false), megBadOprGraph(t, true), megMultiReuseGraph(t))
	memModels := []sim.Options{{}, {NumTemp: 3, WorkerThreads: 2}, {AtomicCleanPolicy: 1}}
	checked := 0
	for gi, g := range graphs {
		so := memModels[gi%len(memModels)]
		opts := DefaultSearchOptions()
		opts.Sim = so
		s, err := newMgeSearch(context.Background(), g, opts)
		require.NoError(t, err)
		for k := 0; k < 8; k++ {
			gen := randomGenome(s.p, r)
			plan, rep, err := EvaluateGenome(g, gen, opts)
			require.NoError(t, err)
			res, err := sim.Simulate(g, plan, so)
			require.NoError(t, err, "graph %s genome %v", g.Name, gen)
			require.Equal(t, res.PeakAllocated, rep.Peak, "graph %s genome %v", g.Name, gen)
			require.Equal(t, res.RecomputeNs, rep.RecomputeNs, "graph %s genome %v", g.Name, gen)
			require.Equal(t, res.Recomputes, len(rep.Duplicated))
			checked++
		}
		plan, rep, err := Genetic(context.Background(), g, opts)
		require.NoError(t, err)
		res, err := sim.Simulate(g, plan, so)
		require.NoError(t, err)
		require.Equal(t, res.PeakAllocated, rep.Peak)
		base, err := sim.Simulate(g, sim.DefaultPlan(g), so)
		require.NoError(t, err)
		require.Equal(t, base.PeakAllocated, rep.BaselinePeak, g.Name)
		require.LessOrEqual(t, rep.Peak, rep.BaselinePeak)
	}
	t.Logf("checked %d genome plans against sim", checked)
}

// TestGAStoredFitnessFresh guards against eaopt v0.4.2's stale-fitness bug:
// after the genetic search every individual's stored fitness must equal a
// fresh evaluation of its genome.
func TestGAStoredFitnessFresh(t *testing.T) {
	g := trainingGraph(t, 20)
	opts := DefaultSearchOptions()
	opts.GeneticIters = 8
	for _, budget := range []int64{0, 1} {
		s, err := newMgeSearch(context.Background(), g, opts)
		require.NoError(t, err)
		s.run()
		if budget > 0 {
			s.budget = s.best.r.peak + s.best.r.peak/4
		}
		s.searchGenetic()
		ga := s.lastGA.(*eaopt.GA)
		fresh := newMgeEvaluator(s.p)
		require.NotEmpty(t, ga.Populations[0].Individuals)
		for _, ind := range ga.Populations[0].Individuals {
			gn := ind.Genome.(*mgeGenome)
			r := fresh.evaluate(gn.sp)
			require.True(t, ind.Evaluated)
			require.Equal(t, s.fitness(r), ind.Fitness, "stored fitness of %v", gn.sp)
			require.Equal(t, r, gn.r)
		}
	}
	// Crossover changes the receiver only.
	s, err := newMgeSearch(context.Background(), g, opts)
	require.NoError(t, err)
	a := &mgeGenome{s: s, sp: []int32{3, 10, int32(s.p.n - 1)}}
	b := &mgeGenome{s: s, sp: []int32{1, 5, 40, int32(s.p.n - 1)}}
	a.Evaluate()
	b.Evaluate()
	before := append([]int32(nil), b.sp...)
	fb := b.r
	for i := 0; i < 20; i++ {
		a.Crossover(b, newTestRand(uint64(i)))
		require.Equal(t, before, b.sp)
		require.Equal(t, fb, b.r)
		require.True(t, s.p.validGenome(a.sp))
	}
}

// TestDeterminismAcrossWorkers: the same seed gives identical plans and
// reports with 1, 2 and 4 workers, in peak and in budget mode.
func TestDeterminismAcrossWorkers(t *testing.T) {
	g := trainingGraph(t, 40)
	run := func(w int, budget int64) (*sim.Plan, SearchReport) {
		opts := DefaultSearchOptions()
		opts.Workers = w
		opts.GeneticIters = 6
		opts.Seed = 99
		var plan *sim.Plan
		var rep SearchReport
		var err error
		if budget == 0 {
			plan, rep, err = Genetic(context.Background(), g, opts)
		} else {
			plan, rep, err = WithinBudget(context.Background(), g, budget, opts)
		}
		require.NoError(t, err)
		return plan, rep
	}
	p1, r1 := run(1, 0)
	budget := r1.Peak + (r1.BaselinePeak-r1.Peak)/3
	b1, br1 := run(1, budget)
	for _, w := range []int{2, 4} {
		p, r := run(w, 0)
		require.Equal(t, p1, p, "workers %d", w)
		require.Equal(t, r1, r, "workers %d", w)
		b, br := run(w, budget)
		require.Equal(t, b1, b, "budget, workers %d", w)
		require.Equal(t, br1, br, "budget, workers %d", w)
	}
}

func TestInfeasibleBudget(t *testing.T) {
	g := trainingGraph(t, 10)
	opts := DefaultSearchOptions()
	opts.GeneticIters = 3
	plan, rep, err := WithinBudget(context.Background(), g, 1000, opts)
	var ib *InfeasibleBudgetError
	require.ErrorAs(t, err, &ib)
	require.ErrorIs(t, err, sim.ErrOutOfMemory)
	assert.Equal(t, int64(1000), ib.Budget)
	assert.Equal(t, rep.Peak, ib.MinPeak)
	assert.False(t, rep.Feasible)
	require.NotNil(t, plan)
	assert.Contains(t, err.Error(), "budget 1000 bytes is infeasible")
	// It is the smallest peak any search finds.
	_, peakRep, err := Genetic(context.Background(), g, opts)
	require.NoError(t, err)
	assert.LessOrEqual(t, ib.MinPeak, peakRep.Peak)
}

func TestCancellationReturnsBestSoFar(t *testing.T) {
	g := trainingGraph(t, 400)
	opts := DefaultSearchOptions()
	opts.GeneticIters = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	plan, rep, err := Genetic(ctx, g, opts)
	el := time.Since(start)
	require.NoError(t, err)
	require.NotNil(t, plan)
	assert.True(t, rep.Cancelled)
	assert.Less(t, el, 2*time.Second, "cancellation must be prompt")
	assert.LessOrEqual(t, rep.Peak, rep.BaselinePeak)
	res, err := sim.Simulate(g, plan, sim.Options{})
	require.NoError(t, err)
	assert.Equal(t, res.PeakAllocated, rep.Peak)
}

func TestLowerBoundRefine(t *testing.T) {
	g := trainingGraph(t, 30)
	opts := DefaultSearchOptions()
	_, best, err := Thresholds(context.Background(), g, opts)
	require.NoError(t, err)
	require.NotEmpty(t, best.Duplicated)
	lb := best.Peak + (best.BaselinePeak-best.Peak)/2
	opts.LowerBound = lb
	plan, rep, err := Thresholds(context.Background(), g, opts)
	require.NoError(t, err)
	t.Logf("best peak %d time %d; lb %d -> peak %d time %d", best.Peak, best.RecomputeNs, lb, rep.Peak, rep.RecomputeNs)
	assert.LessOrEqual(t, rep.Peak, lb)
	assert.Less(t, rep.RecomputeNs, best.RecomputeNs, "spare memory buys back time")
	res, err := sim.Simulate(g, plan, sim.Options{})
	require.NoError(t, err)
	assert.Equal(t, res.PeakAllocated, rep.Peak)
	// A bound below the best peak changes nothing.
	opts.LowerBound = best.Peak - 1
	_, rep2, err := Thresholds(context.Background(), g, opts)
	require.NoError(t, err)
	assert.Equal(t, best.SplitPoints, rep2.SplitPoints)
}

func TestEndpointsRestrictSplits(t *testing.T) {
	g := trainingGraph(t, 12)
	for i := range g.Ops {
		if g.Ops[i].Type == "relu" && i%3 == 0 {
			g.Ops[i].Attrs = map[string]string{graph.AttrSublinearEndpoint: "1"}
		}
	}
	opts := DefaultSearchOptions()
	opts.GeneticIters = 5
	_, rep, err := Search(context.Background(), g, opts)
	require.NoError(t, err)
	for _, sp := range rep.SplitPoints[:len(rep.SplitPoints)-1] {
		v, _ := g.Ops[sp].Attr(graph.AttrSublinearEndpoint)
		assert.Equal(t, "1", v, "split point %d", sp)
	}
}

func newTestRand(seed uint64) *mrand.Rand { return mrand.New(newMgeRand(seed)) }

// TestEvaluatorStampWrap checks that an evaluator whose stamps wrap around
// (after about 2^31 passes) still measures every genome as a fresh one
// does: the wrap clears every stamped array. Before the wrap every entry
// holds the stamps the first evaluation after it takes (1 for the vars'
// discard and recompute marks, 3 for the peak pass's residency), as marks
// left 2^31 passes earlier could.
func TestEvaluatorStampWrap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	g := trainingGraph(t, 12)
	s, err := newMgeSearch(context.Background(), g, DefaultSearchOptions())
	require.NoError(t, err)
	old := newMgeEvaluator(s.p)
	for i := range old.vs {
		old.vs[i].endStamp, old.vs[i].end = 1, endRecomputed
	}
	for i := range old.st {
		old.st[i].mark = 3
	}
	old.stamp = 1<<31 - 2 // the next stamp wraps to 1
	for k := 0; k < 4; k++ {
		sp := fromGenome(randomGenome(s.p, r))
		want := newMgeEvaluator(s.p).evaluate(sp)
		require.Equal(t, want, old.evaluate(sp), "evaluation %d after the wrap", k)
	}
	require.Equal(t, int32(12), old.stamp, "three stamps per evaluation since the wrap")
}

// score answers from its plan memo exactly what evaluate computes: random
// genomes and their neighbours (one split point moved, added or removed,
// which often leaves the discard plan as it was) on a training step and
// random DAGs, each scored on a shared memo and evaluated afresh, with and
// without forward-only recomputation. The memo must be used.
func TestScoreMatchesEvaluate(t *testing.T) {
	graphs := []*graph.Graph{trainingGraph(t, 12), randomDAG(t, 5, 60), randomDAG(t, 6, 120)}
	for gi, g := range graphs {
		for _, fwd := range []bool{false, true} {
			opts := DefaultSearchOptions()
			opts.ForwardOnly = fwd
			s, err := newMgeSearch(context.Background(), g, opts)
			require.NoError(t, err)
			memo := &planMemo{limit: 1 << 20}
			ev, fresh := newMgeEvaluator(s.p), newMgeEvaluator(s.p)
			r := rand.New(rand.NewPCG(uint64(gi), 7))
			mr := newTestRand(uint64(gi) + 11)
			for k := 0; k < 60; k++ {
				sp := fromGenome(randomGenome(s.p, r))
				for j := 0; j < 4; j++ {
					require.Equal(t, fresh.evaluate(sp), ev.score(sp, memo), "graph %d forward-only %v genome %v", gi, fwd, sp)
					sp = s.mutate(sp, mr, nil)
				}
			}
			assert.Positive(t, memo.hits, "graph %d forward-only %v: no genome shared a plan", gi, fwd)
		}
	}
}

// A memo entry under a plan's hash whose genome makes another plan (a hash
// collision) is not taken: score replays the genome's own plan.
func TestScoreMemoCollision(t *testing.T) {
	g := trainingGraph(t, 12)
	s, err := newMgeSearch(context.Background(), g, DefaultSearchOptions())
	require.NoError(t, err)
	ev := newMgeEvaluator(s.p)
	r := rand.New(rand.NewPCG(4, 4))
	a, b := fromGenome(randomGenome(s.p, r)), fromGenome(randomGenome(s.p, r))
	want := newMgeEvaluator(s.p).evaluate(b)
	ev.plan(a)
	planA := slices.Clone(ev.recomps)
	ev.plan(b)
	require.NotEqual(t, planA, ev.recomps, "the two genomes must make different plans")
	memo := &planMemo{limit: 1 << 20}
	bogus := mgeResult{peak: 1, time: 2, nsplit: 3, ndup: 4}
	hb := ev.planHash
	memo.put(hb, a, bogus) // b's hash, a's genome
	require.Equal(t, want, ev.score(b, memo))
	assert.Zero(t, memo.hits)
	_, got, _ := memo.get(hb)
	require.Equal(t, bogus, got, "the entry stays")
}

// runWithMemo runs strategy's search (StrategySublinear, StrategySublinearGA
// or StrategySublinearBudget, as Thresholds, Genetic and WithinBudget do;
// budget is used by the last) and returns its report and how many
// evaluations its plan memo answered.
func runWithMemo(t testing.TB, g *graph.Graph, opts SearchOptions, strategy string, budget int64) (SearchReport, int64) {
	s, err := searched(context.Background(), g, strategyOptions(strategy, opts, budget))
	require.NoError(t, err, strategy)
	_, rep, err := s.finish(strategy, s.baseline)
	require.NoError(t, err, strategy)
	return rep, s.plans.reuses()
}

// With and without the plan memo the searches return the same plans and
// evaluate as many genomes; with it, some evaluations reuse a plan.
func TestPlanMemoSamePlans(t *testing.T) {
	g := trainingGraph(t, 40)
	base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{Capacity: -1})
	require.NoError(t, err)
	var reused int64
	for _, strategy := range []string{StrategySublinear, StrategySublinearGA, StrategySublinearBudget} {
		opts := DefaultSearchOptions()
		opts.GeneticIters = 10
		with, n := runWithMemo(t, g, opts, strategy, base.PeakAllocated*2/3)
		opts.noPlanMemo = true
		without, none := runWithMemo(t, g, opts, strategy, base.PeakAllocated*2/3)
		assert.Zero(t, none, strategy)
		assert.Equal(t, without, with, strategy)
		reused += n
	}
	assert.Positive(t, reused, "no search reused a plan")
}
