package mirror

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

func opOf(typ string, attrs map[string]string, flags graph.OpFlags) *graph.Op {
	return &graph.Op{Type: typ, Phase: graph.Forward, Attrs: attrs, Flags: flags, Forward: graph.NoOp}
}

func TestPredicateRules(t *testing.T) {
	on16 := Predicate{DoMirror: true, Variant: MXNet16}
	on17 := Predicate{DoMirror: true, Variant: MXNet17}
	off := Predicate{DoMirror: false, Variant: MXNet16}
	force1 := map[string]string{graph.AttrForceMirroring: "1"}
	force0 := map[string]string{graph.AttrForceMirroring: "0"}
	cases := []struct {
		name string
		p    Predicate
		op   *graph.Op
		want bool
		rule Rule
	}{
		{"backward op", on16, &graph.Op{Type: "relu", Phase: graph.Backward}, false, RuleNotForward},
		{"dropout never, even forced", on16, opOf("dropout", force1, graph.NonDeterministic), false, RuleDropout},
		{"impure never", on16, opOf("relu", nil, graph.Impure), false, RuleNotRecomputable},
		{"random without saved rng", on16, opOf("rand_like", nil, graph.NonDeterministic), false, RuleNotRecomputable},
		{"random with saved rng", on16, opOf("rand_like", map[string]string{graph.AttrRNGSaved: "1"}, graph.NonDeterministic), true, RuleDefault},
		{"force on beats global off", off, opOf("conv2d", force1, 0), true, RuleForceOn},
		{"force off ignored by classic 1.x", on16, opOf("relu", force0, 0), true, RuleDefault},
		{"force off honoured when asked", Predicate{DoMirror: true, HonourForceOff: true}, opOf("relu", force0, 0), false, RuleForceOff},
		{"global off", off, opOf("relu", nil, 0), false, RuleGlobalOff},
		{"convolution", on16, opOf("conv2d", nil, 0), false, RuleNeverType},
		{"fully connected", on16, opOf("linear", nil, 0), false, RuleNeverType},
		{"matmul is FullyConnected", on16, opOf("matmul", nil, 0), false, RuleNeverType},
		{"concat", on16, opOf("concat", nil, 0), false, RuleNeverType},
		{"softmax output", on16, opOf("cross_entropy", nil, 0), false, RuleNeverType},
		{"batchnorm 1.6", on16, opOf("batchnorm", nil, 0), false, RuleBatchNorm16},
		{"batchnorm 1.7", on17, opOf("batchnorm", nil, 0), true, RuleDefault},
		{"embedding classic", on16, opOf("embedding", nil, 0), true, RuleDefault},
		{"embedding later master", Predicate{DoMirror: true, NeverEmbedding: true}, opOf("embedding", nil, 0), false, RuleNeverType},
		{"relu default", on16, opOf("relu", nil, 0), true, RuleDefault},
		{"traced convolution", on16, opOf("convolution", nil, 0), false, RuleNeverType},
		{"traced mm", on16, opOf("mm", nil, 0), false, RuleNeverType},
		{"traced batch norm 1.6", on16, opOf("native_batch_norm", nil, 0), false, RuleBatchNorm16},
		{"traced batch norm 1.7", on17, opOf("native_batch_norm", nil, 0), true, RuleDefault},
		{"traced loss", on16, opOf("nll_loss_forward", nil, 0), false, RuleNeverType},
		{"traced dropout", on16, opOf("native_dropout", nil, 0), false, RuleDropout},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rule, err := c.p.Decide(c.op)
			require.NoError(t, err)
			assert.Equal(t, c.want, rule.Mirrors())
			assert.Equal(t, c.rule, rule, "rule %v", rule)
		})
	}
}

// peakOf replays a plan on the ideal allocator.
func peakOf(t *testing.T, g *graph.Graph, p *sim.Plan) *sim.Result {
	t.Helper()
	res, err := sim.Simulate(g, p, sim.Options{})
	require.NoError(t, err)
	return res
}

// convChain builds conv -> bn -> relu -> tanh -> sigmoid -> conv -> loss.
func convChain(t *testing.T) *graph.Graph {
	b := graph.NewBuilder("chain")
	x := b.Input("x", graph.F32, 8, 16, 32, 32)
	h := b.Conv2d("conv1", x, 16, 3, 1, 1)
	h = b.BatchNorm2d("bn1", h)
	h = b.ReLU("relu1", h)
	h = b.Tanh("tanh1", h)
	h = b.Sigmoid("sig1", h)
	h = b.Conv2d("conv2", h, 16, 3, 1, 1)
	h = b.Flatten("flat", h, 1)
	y := b.Input("labels", graph.I64, 8)
	h = b.Linear("fc", h, 10, true)
	loss := b.CrossEntropy("loss", h, y)
	fwd, err := b.Build()
	require.NoError(t, err)
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Optimizer: graph.OptSGD})
	require.NoError(t, err)
	return g
}

func opID(t *testing.T, g *graph.Graph, name string) graph.OpID {
	for i := range g.Ops {
		if g.Ops[i].Name == name {
			return graph.OpID(i)
		}
	}
	t.Fatalf("no op %q", name)
	return graph.NoOp
}

func TestChainRecomputedFromNearestKeptAncestor(t *testing.T) {
	g := convChain(t)
	res, err := Classic(g, Predicate{DoMirror: true, Variant: MXNet16})
	require.NoError(t, err)
	// relu, tanh, sigmoid are mirrored; conv, bn (1.6) and fc are kept.
	mirrored := map[string]bool{}
	for _, d := range res.Decisions {
		mirrored[d.Name] = d.Mirrored
	}
	assert.True(t, mirrored["relu1"] && mirrored["tanh1"] && mirrored["sig1"])
	assert.False(t, mirrored["conv1"] || mirrored["bn1"] || mirrored["conv2"] || mirrored["fc"])

	// The recompute of relu1 reads bn1's original output (the kept
	// ancestor), and relu1, tanh1, sig1 are recomputed in that order before
	// the first backward op reading any of them.
	relu, tanh, sig := opID(t, g, "relu1"), opID(t, g, "tanh1"), opID(t, g, "sig1")
	var seen []graph.OpID
	computes := map[graph.OpID]int{}
	for _, s := range res.Plan.Steps {
		if s.Kind != sim.Compute {
			continue
		}
		computes[s.Op]++
		if computes[s.Op] == 2 && (s.Op == relu || s.Op == tanh || s.Op == sig) {
			seen = append(seen, s.Op)
		}
	}
	require.Equal(t, []graph.OpID{relu, tanh, sig}, seen)
	assert.Equal(t, 1, computes[opID(t, g, "bn1")], "the kept ancestor is not recomputed")
	assert.Equal(t, 1, computes[opID(t, g, "conv1")])
	baseline := peakOf(t, g, sim.DefaultPlan(g))
	mr := peakOf(t, g, res.Plan)
	assert.Equal(t, res.Recomputed, mr.Recomputes)
	assert.Greater(t, mr.RecomputeNs, int64(0))
	assert.Greater(t, mr.TotalNs, baseline.TotalNs)
}

func TestDropoutNeverRecomputed(t *testing.T) {
	b := graph.NewBuilder("drop")
	x := b.Input("x", graph.F32, 4, 64)
	h := b.Linear("fc1", x, 64, true)
	h = b.ReLU("relu", h)
	h = b.Dropout("drop", h, 0.5)
	h = b.Tanh("tanh", h)
	h = b.Linear("fc2", h, 10, true)
	loss := b.CrossEntropy("loss", h, b.Input("y", graph.I64, 4))
	fwd, err := b.Build()
	require.NoError(t, err)
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{})
	require.NoError(t, err)
	g.Ops[opID(t, g, "drop")].Attrs = map[string]string{graph.AttrForceMirroring: "1"}
	for _, run := range []func() (*Result, error){
		func() (*Result, error) { return Classic(g, Predicate{DoMirror: true, Variant: MXNet17}) },
		func() (*Result, error) { return CostAware(context.Background(), g, CostOptions{Variant: MXNet17}) },
	} {
		res, err := run()
		require.NoError(t, err)
		assert.Equal(t, 1, computes(res.Plan, opID(t, g, "drop")), "dropout computed exactly once")
		_, err = sim.Simulate(g, res.Plan, sim.Options{})
		require.NoError(t, err)
	}
}

// An RNN cell: h' = tanh(W x + U h + b). add and tanh are mirrorable, but
// tanh's backward needs its output and add's output is tanh's only input:
// recomputing them keeps the matmul outputs alive instead, so nothing is
// saved.
func TestRNNCellMirroringBringsNoBenefit(t *testing.T) {
	b := graph.NewBuilder("rnn")
	const batch, hidden, steps = 16, 256, 8
	h := b.Input("h0", graph.F32, batch, hidden)
	for s := 0; s < steps; s++ {
		x := b.Input(fmt.Sprintf("x%d", s), graph.F32, batch, hidden)
		wx := b.Linear(fmt.Sprintf("wx%d", s), x, hidden, false)
		uh := b.Linear(fmt.Sprintf("uh%d", s), h, hidden, false)
		a := b.Add(fmt.Sprintf("add%d", s), wx, uh)
		h = b.Tanh(fmt.Sprintf("tanh%d", s), a)
	}
	out := b.Linear("out", h, 10, false)
	loss := b.CrossEntropy("loss", out, b.Input("y", graph.I64, batch))
	fwd, err := b.Build()
	require.NoError(t, err)
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{})
	require.NoError(t, err)
	base := peakOf(t, g, sim.DefaultPlan(g))
	classic, err := Classic(g, Predicate{DoMirror: true, Variant: MXNet16})
	require.NoError(t, err)
	cr := peakOf(t, g, classic.Plan)
	assert.GreaterOrEqual(t, cr.PeakAllocated, base.PeakAllocated, "classic mirroring of add+tanh saves nothing")
	assert.Greater(t, classic.Mirrored, 0)
	cost, err := CostAware(context.Background(), g, CostOptions{Variant: MXNet16})
	require.NoError(t, err)
	assert.Equal(t, 0, cost.Mirrored, "the cost-aware pass mirrors nothing")
	assert.Equal(t, base.PeakAllocated, peakOf(t, g, cost.Plan).PeakAllocated)
}

// A graph built so that classic mirroring raises the peak, as MXNet issue
// #14383 reported for ResNet-50 (3317 MB without, 4496 MB with mirror): a
// large activation is widened by a cheap op to a small one that backward
// needs, so recomputing the small one keeps the large one alive.
func TestClassicRaisesPeakCostAwareDoesNot(t *testing.T) {
	// Activations dominate (weights and their gradients are small), so the
	// peak sits in the forward/backward gap where mirroring acts.
	b := graph.NewBuilder("raise")
	x := b.Input("x", graph.F32, 4096, 256)
	big := b.Linear("fc_big", x, 4096, true) // large, read only by the cheap op
	small := b.AdaptiveAvgPool2d("pool", b.Reshape("r", big, 4096, 64, 8, 8), 1, 1)
	small = b.Sigmoid("sig", small) // backward needs its output
	h := b.Flatten("flat", small, 1)
	h = b.Linear("fc2", h, 256, true)
	h = b.ReLU("relu2", h)
	h = b.Linear("fc3", h, 256, true)
	h = b.ReLU("relu3", h)
	h = b.Linear("fc4", h, 10, true)
	loss := b.CrossEntropy("loss", h, b.Input("y", graph.I64, 4096))
	fwd, err := b.Build()
	require.NoError(t, err)
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{})
	require.NoError(t, err)
	base := peakOf(t, g, sim.DefaultPlan(g))
	classic, err := Classic(g, Predicate{DoMirror: true, Variant: MXNet16})
	require.NoError(t, err)
	cr := peakOf(t, g, classic.Plan)
	require.Greater(t, cr.PeakAllocated, base.PeakAllocated, "classic raises the peak")
	cost, err := CostAware(context.Background(), g, CostOptions{Variant: MXNet16})
	require.NoError(t, err)
	assert.LessOrEqual(t, peakOf(t, g, cost.Plan).PeakAllocated, base.PeakAllocated)
}

func randomGraph(t *testing.T, seed uint64) *graph.Graph {
	r := rand.New(rand.NewPCG(seed, 7))
	b := graph.NewBuilder(fmt.Sprintf("rand%d", seed))
	w := 16 + 16*r.IntN(8)
	x := b.Input("x", graph.F32, 8, int64(w))
	live := []graph.TensorID{b.Linear("in", x, w, true)}
	n := 6 + r.IntN(20)
	for i := 0; i < n; i++ {
		a := live[r.IntN(len(live))]
		var y graph.TensorID
		switch r.IntN(7) {
		case 0:
			y = b.Linear(fmt.Sprintf("fc%d", i), a, w, r.IntN(2) == 0)
		case 1:
			y = b.ReLU(fmt.Sprintf("relu%d", i), a)
		case 2:
			y = b.Tanh(fmt.Sprintf("tanh%d", i), a)
		case 3:
			y = b.Add(fmt.Sprintf("add%d", i), a, live[r.IntN(len(live))])
		case 4:
			y = b.Mul(fmt.Sprintf("mul%d", i), a, live[r.IntN(len(live))])
		case 5:
			y = b.Dropout(fmt.Sprintf("drop%d", i), a, 0.1)
		case 6:
			y = b.GELU(fmt.Sprintf("gelu%d", i), a)
		}
		live = append(live, y)
	}
	sum := live[len(live)-1]
	for _, t := range live[:len(live)-1] {
		if r.IntN(3) == 0 {
			sum = b.Add(fmt.Sprintf("sum%d", t), sum, t)
		}
	}
	out := b.Linear("out", sum, 10, true)
	loss := b.CrossEntropy("loss", out, b.Input("y", graph.I64, 8))
	fwd, err := b.Build()
	require.NoError(t, err)
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Optimizer: graph.OptMomentum})
	require.NoError(t, err)
	return g
}

// Property: every mirror plan replays, and the cost-aware plan's peak never
// exceeds the no-mirror peak, on random graphs and the zoo.
func TestCostAwareNeverRaisesPeak(t *testing.T) {
	var gs []*graph.Graph
	for s := uint64(0); s < 60; s++ {
		gs = append(gs, randomGraph(t, s))
	}
	zoo := []string{"resnet18", "mobilenet_v2", "vgg16", "densenet121", "gpt", "unet", "lstm", "mlp"}
	if testing.Short() {
		zoo = zoo[:2]
	}
	for _, name := range zoo {
		o := models.Options{Batch: 2, Image: 64}
		if name == "gpt" || name == "lstm" {
			o = models.Options{Batch: 2, Seq: 64}
		} else if name == "mlp" || name == "unet" {
			o = models.Options{Batch: 2}
		}
		g, err := models.Build(name, o)
		require.NoError(t, err, name)
		gs = append(gs, g)
	}
	for _, g := range gs {
		base := peakOf(t, g, sim.DefaultPlan(g))
		for _, v := range []Variant{MXNet16, MXNet17} {
			classic, err := Classic(g, Predicate{DoMirror: true, Variant: v})
			require.NoError(t, err, g.Name)
			peakOf(t, g, classic.Plan)
			cost, err := CostAware(context.Background(), g, CostOptions{Variant: v})
			require.NoError(t, err, g.Name)
			cr := peakOf(t, g, cost.Plan)
			assert.LessOrEqual(t, cr.PeakAllocated, base.PeakAllocated, "%s %v", g.Name, v)
		}
	}
}

func TestGlobalOffMeansNoPlanChange(t *testing.T) {
	g := convChain(t)
	res, err := Classic(g, Predicate{DoMirror: false})
	require.NoError(t, err)
	assert.Equal(t, 0, res.Mirrored)
	assert.Equal(t, sim.DefaultPlan(g).Steps, res.Plan.Steps)
}

// TestOverwrittenInputNotMirrored: autograd clones a tensor before an
// in-place op that destroys what a backward formula reads (PyTorch's
// original-self clone before nn.SiLU(inplace=True), as in efficientnet's
// squeeze-excitation). Recomputed in the backward pass, the clone would
// copy what the in-place op wrote: remat_torch.apply refused the mirror
// plan of efficientnet_b0 ("needed for a recompute but is neither held nor
// recomputable"). Such an op is not mirrored; with the in-place op
// writing a fresh tensor instead, it is.
func TestOverwrittenInputNotMirrored(t *testing.T) {
	build := func(inplace bool) *graph.Graph {
		b := graph.NewBuilder("se")
		x := b.Input("x", graph.F32, 4, 64)
		c := b.Linear("conv", x, 64, true)
		k := b.Op("clone", "clone", c).Out("k", graph.F32, 4, 64).T()
		s := b.Op("silu_", "silu", c).Out("s", graph.F32, 4, 64)
		if inplace {
			s.Alias(c).Flags(graph.InPlace)
		}
		mul := b.Op("mul", "mul", k, s.T()).Out("y", graph.F32, 4, 64)
		y := mul.T()
		b.SetLoss(y)
		b.SetPhase(graph.Backward)
		gy := b.Op("grad_seed", "gy").Out("gy", graph.F32, 4, 64).T()
		b.Op("mul_backward", "mul_bw", k, s.T(), gy).Forward(mul.ID()).Out("gk", graph.F32, 4, 64).Out("gs", graph.F32, 4, 64)
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	for _, inplace := range []bool{true, false} {
		g := build(inplace)
		res, err := Classic(g, Predicate{DoMirror: true, Variant: MXNet17})
		require.NoError(t, err)
		clone := opID(t, g, "clone")
		n := computes(res.Plan, clone)
		assert.Empty(t, sim.StaleReads(g, res.Plan), "no recompute reads what silu_ wrote")
		if inplace {
			assert.Equal(t, 1, n, "the clone reads what silu_ overwrites: computed once")
			assert.Equal(t, RuleNotRecomputable, res.Decisions[clone].Rule)
		} else {
			assert.Equal(t, 2, n, "without the in-place write the clone is mirrored")
		}
	}
}

// computes counts the compute steps of op in p.
func computes(p *sim.Plan, op graph.OpID) int {
	n := 0
	for _, s := range p.Steps {
		if s.Kind == sim.Compute && s.Op == op {
			n++
		}
	}
	return n
}

// TestFilledStorageNotRemade: Swin Transformer's attention mask is made by
// new_zeros, filled in place through a view (fill_), then viewed and
// cloned, and the backward reads the clone. Mirroring new_zeros, the view
// and the clone re-ran new_zeros without the fill (in-place ops are never
// mirrored): the recomputed clone copied zeros, and the applied step's
// gradients were wrong. The readers of the filled storage are kept; the
// same chain without the fill stays mirrored.
func TestFilledStorageNotRemade(t *testing.T) {
	build := func(fill bool) *graph.Graph {
		b := graph.NewBuilder("mask")
		x := b.Input("x", graph.F32, 4, 64)
		z := b.Op("new_zeros", "zeros", x).Out("z", graph.F32, 4, 64).T()
		m := z
		if fill {
			sl := b.Op("slice", "slice", z).Out("sl", graph.F32, 2, 64).Alias(z).T()
			b.Op("fill_", "fill", sl).Out("f", graph.F32, 2, 64).Alias(z).Flags(graph.InPlace)
		}
		v := b.Op("view", "view", m).Out("v", graph.F32, 256).Alias(z).T()
		k := b.Op("clone", "clone", v).Out("k", graph.F32, 256).T()
		mul := b.Op("mul", "mul", k, k).Out("y", graph.F32, 256)
		b.SetLoss(mul.T())
		b.SetPhase(graph.Backward)
		gy := b.Op("grad_seed", "gy").Out("gy", graph.F32, 256).T()
		b.Op("mul_backward", "mul_bw", k, gy).Forward(mul.ID()).Out("gk", graph.F32, 256)
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	for _, fill := range []bool{true, false} {
		g := build(fill)
		for name, run := range map[string]func() (*Result, error){
			"mirror":      func() (*Result, error) { return Classic(g, Predicate{DoMirror: true, Variant: MXNet17}) },
			"mirror-cost": func() (*Result, error) { return CostAware(context.Background(), g, CostOptions{Variant: MXNet17}) },
		} {
			res, err := run()
			require.NoError(t, err)
			assert.Empty(t, sim.StaleReads(g, res.Plan), "%s, fill=%v", name, fill)
			if name == "mirror" {
				clone := opID(t, g, "clone")
				if fill {
					assert.Equal(t, 1, computes(res.Plan, clone), "the clone reads the filled mask: computed once")
				} else {
					assert.Equal(t, 2, computes(res.Plan, clone), "without the fill the clone is mirrored")
				}
			}
		}
	}
}
