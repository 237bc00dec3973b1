package chain

import (
	"fmt"
	"testing"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// optChainSpec describes a test chain: stage k's forward op reads a_{k-1}
// (the input x for k = 0) and produces a_k of act[k] bytes (a_{L-1} is the
// loss); its backward op reads a_{k-1}, the gradient of a_k and the weight,
// and produces the gradient of a_{k-1} (grad[k-1] bytes) and the weight
// gradient (paramBytes); update ops follow.
type optChainSpec struct {
	act, grad  []int64
	fwd, bwd   []int64 // ns
	paramBytes int64
	saved      []int64 // > 0: the forward also saves an extra tensor of this size for backward
}

func optChainGraph(t testing.TB, sp optChainSpec) *graph.Graph {
	t.Helper()
	L := len(sp.act)
	b := graph.NewBuilder("chain")
	x := b.Input("x", graph.F32, 0)
	prev := x
	ins := make([]graph.TensorID, L)
	ws := make([]graph.TensorID, L)
	acts := make([]graph.TensorID, L)
	saved := make([]graph.TensorID, L)
	fw := make([]graph.OpID, L)
	for k := 0; k < L; k++ {
		ws[k] = b.NewTensor(fmt.Sprintf("w%d", k), graph.Parameter, graph.F32, sp.paramBytes/4)
		ins[k] = prev
		ob := b.Op("linear", fmt.Sprintf("f%d", k), prev, ws[k]).OutBytes(fmt.Sprintf("a%d", k), sp.act[k]).TimeNs(sp.fwd[k])
		saved[k] = graph.NoTensor
		if sp.saved != nil && sp.saved[k] > 0 {
			ob.OutBytes(fmt.Sprintf("s%d", k), sp.saved[k])
			saved[k] = ob.Output(1)
		}
		fw[k] = ob.ID()
		acts[k] = ob.T()
		prev = acts[k]
	}
	b.SetLoss(prev)
	b.SetPhase(graph.Backward)
	d := acts[L-1] // the loss seeds the backward
	dws := make([]graph.TensorID, L)
	for k := L - 1; k >= 0; k-- {
		in := []graph.TensorID{ins[k], ws[k], d}
		if saved[k] != graph.NoTensor {
			in = append(in, saved[k])
		}
		ob := b.Op("linear_grad", fmt.Sprintf("b%d", k), in...).Forward(fw[k]).TimeNs(sp.bwd[k])
		ob.OutKind(fmt.Sprintf("dw%d", k), graph.ParamGradient, graph.F32, sp.paramBytes/4)
		dws[k] = ob.Output(0)
		if k > 0 {
			ob.OutBytes(fmt.Sprintf("d%d", k-1), sp.grad[k-1])
			d = ob.Output(1)
		}
	}
	b.SetPhase(graph.Update)
	for k := 0; k < L; k++ {
		b.Op("sgd", fmt.Sprintf("u%d", k), ws[k], dws[k]).Out(fmt.Sprintf("w%d'", k), graph.F32, sp.paramBytes/4).TimeNs(1)
	}
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// optUniformChain is a homogeneous chain of L stages of unit bytes u.
func optUniformChain(t testing.TB, L int, u int64) *graph.Graph {
	sp := optChainSpec{paramBytes: 0}
	for k := 0; k < L; k++ {
		sp.act = append(sp.act, u)
		sp.grad = append(sp.grad, u)
		sp.fwd = append(sp.fwd, 10)
		sp.bwd = append(sp.bwd, 20)
	}
	return optChainGraph(t, sp)
}

// optResNetGraph builds nblocks residual blocks: h = relu(conv2(relu(conv1(x))) + x),
// with linked backward ops and gradient accumulation of the skip path,
// then a head producing the loss.
func optResNetGraph(t testing.TB, nblocks int, u int64) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder("resnet")
	x := b.Input("x", graph.F32, 0)
	h := b.Op("linear", "stem", x).OutBytes("h0", u).TimeNs(5)
	stem := h.ID()
	cur := h.T()
	type blk struct {
		in, c1, r1, c2, add, out  graph.TensorID
		fc1, fr1, fc2, fadd, fout graph.OpID
	}
	var bs []blk
	for i := 0; i < nblocks; i++ {
		var k blk
		k.in = cur
		o := b.Op("linear", fmt.Sprintf("c1_%d", i), cur).OutBytes(fmt.Sprintf("c1_%d", i), 2*u).TimeNs(7)
		k.c1, k.fc1 = o.T(), o.ID()
		o = b.Op("relu", fmt.Sprintf("r1_%d", i), k.c1).OutBytes(fmt.Sprintf("r1_%d", i), 2*u).TimeNs(1)
		k.r1, k.fr1 = o.T(), o.ID()
		o = b.Op("linear", fmt.Sprintf("c2_%d", i), k.r1).OutBytes(fmt.Sprintf("c2_%d", i), u).TimeNs(7)
		k.c2, k.fc2 = o.T(), o.ID()
		o = b.Op("add", fmt.Sprintf("add_%d", i), k.c2, k.in).OutBytes(fmt.Sprintf("add_%d", i), u).TimeNs(1)
		k.add, k.fadd = o.T(), o.ID()
		o = b.Op("relu", fmt.Sprintf("out_%d", i), k.add).OutBytes(fmt.Sprintf("out_%d", i), u).TimeNs(1)
		k.out, k.fout = o.T(), o.ID()
		cur = k.out
		bs = append(bs, k)
	}
	lo := b.Op("loss", "loss", cur).OutBytes("loss", 4).TimeNs(2)
	b.SetLoss(lo.T())
	b.SetPhase(graph.Backward)
	d := b.Op("loss_grad", "loss_grad", lo.T(), cur).Forward(lo.ID()).OutBytes("dout", u).TimeNs(2).T()
	for i := nblocks - 1; i >= 0; i-- {
		k := bs[i]
		dadd := b.Op("relu_grad", fmt.Sprintf("gout_%d", i), d, k.out).Forward(k.fout).OutBytes(fmt.Sprintf("dadd_%d", i), u).TimeNs(1).T()
		dr1 := b.Op("linear_grad", fmt.Sprintf("gc2_%d", i), dadd, k.r1).Forward(k.fc2).OutBytes(fmt.Sprintf("dr1_%d", i), 2*u).TimeNs(14).T()
		dc1 := b.Op("relu_grad", fmt.Sprintf("gr1_%d", i), dr1, k.c1).Forward(k.fr1).OutBytes(fmt.Sprintf("dc1_%d", i), 2*u).TimeNs(1).T()
		dx := b.Op("linear_grad", fmt.Sprintf("gc1_%d", i), dc1, k.in).Forward(k.fc1).OutBytes(fmt.Sprintf("dx_%d", i), u).TimeNs(14).T()
		d = b.Op("add", fmt.Sprintf("acc_%d", i), dx, dadd).OutBytes(fmt.Sprintf("din_%d", i), u).TimeNs(1).T()
	}
	b.Op("linear_grad", "gstem", d, x).Forward(stem).OutBytes("dstem", 0).TimeNs(5)
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func TestStagesChain(t *testing.T) {
	sp := optChainSpec{act: []int64{100, 200, 300, 4}, grad: []int64{100, 200, 300}, fwd: []int64{1, 2, 3, 4}, bwd: []int64{5, 6, 7, 8}, paramBytes: 8, saved: []int64{0, 50, 0, 0}}
	g := optChainGraph(t, sp)
	ch, err := StagesOf(g, StagesOptions{})
	require.NoError(t, err)
	require.Len(t, ch.Stages, 4)
	for k, st := range ch.Stages {
		assert.Equal(t, []graph.OpID{graph.OpID(k)}, st.Fwd, "stage %d", k)
		assert.Len(t, st.Bwd, 1)
		assert.Equal(t, sp.fwd[k], st.FwdTime)
		assert.Equal(t, sp.bwd[k], st.BwdTime)
		if k > 0 {
			assert.Equal(t, sp.act[k-1], st.InputBytes)
			assert.Equal(t, ch.Stages[k-1].Output, st.Input)
		}
		assert.Equal(t, sp.act[k], st.OutputBytes)
		assert.Equal(t, sp.act[k]+sp.saved[k], st.XBarBytes, "x-bar of stage %d", k)
		assert.Equal(t, sp.act[k]+sp.saved[k], st.FwdPeakAll)
		assert.Equal(t, sp.act[k]+sp.saved[k], st.FwdPeakNone, "the saved output is allocated then freed")
		if k > 0 {
			assert.Equal(t, sp.grad[k-1], st.GradOutBytes, "gradient passed by stage %d", k)
		}
		assert.Equal(t, sp.paramBytes, st.HeldGradBytes, "weight gradient of stage %d", k)
	}
	assert.Equal(t, g.Loss, ch.Stages[3].Output)
	// Pinned: the weights; the update adds the updated weights while the
	// weight gradients die one by one.
	assert.Equal(t, int64(4*8), ch.Pinned)
	assert.Equal(t, int64(4*8+4*8+8), ch.UpdatePeak)
	assert.Len(t, ch.Update, 4)
}

func TestStagesResidualBlocks(t *testing.T) {
	g := optResNetGraph(t, 3, 1000)
	ch, err := StagesOf(g, StagesOptions{})
	require.NoError(t, err)
	// stem, per block: {c1, r1, c2, add} (the skip connection keeps two
	// tensors live inside it) and {out} (only add's output crosses the cut
	// before it), the loss.
	require.Len(t, ch.Stages, 8)
	assert.Len(t, ch.Stages[1].Fwd, 4)
	assert.Len(t, ch.Stages[1].Bwd, 4, "three linked backward ops and the gradient accumulation")
	assert.Len(t, ch.Stages[2].Fwd, 1)
	assert.Equal(t, int64(1000), ch.Stages[2].InputBytes)
	// x-bar of a block body: c1, r1 (read by its backward) plus the output.
	assert.Equal(t, int64(2000+2000+1000), ch.Stages[1].XBarBytes)
	// The relu stage passes d(add) to the block body.
	assert.Equal(t, int64(1000), ch.Stages[2].GradOutBytes)
	assert.Equal(t, int64(1000), ch.Stages[1].GradInBytes)
	// Custom time callback.
	ch2, err := StagesOf(g, StagesOptions{Time: func(graph.OpID) int64 { return 3 }})
	require.NoError(t, err)
	assert.Equal(t, int64(12), ch2.Stages[1].FwdTime)
}

func TestStagesNonRecomputablePinned(t *testing.T) {
	g := optUniformChain(t, 4, 1000)
	g.Ops[1].Flags |= graph.NonDeterministic // dropout without saved RNG state
	ch, err := StagesOf(g, StagesOptions{})
	require.NoError(t, err)
	assert.True(t, ch.OpPinned[1])
	assert.Equal(t, int64(1000), ch.Pinned)
	assert.Equal(t, int64(0), ch.Stages[2].InputBytes)
	assert.Equal(t, int64(10), ch.PinnedTime)
}

func TestStagesErrors(t *testing.T) {
	_, err := StagesOf(nil, StagesOptions{})
	assert.Error(t, err)
	b := graph.NewBuilder("bwdfirst")
	b.SetPhase(graph.Backward)
	x := b.Input("x", graph.F32, 1)
	b.Op("relu", "r", x).OutBytes("y", 4)
	g, err := b.Build()
	require.NoError(t, err)
	_, err = StagesOf(g, StagesOptions{})
	assert.ErrorContains(t, err, "not a forward op")
}

// optSimulate replays a plan in the simulator (ideal allocator).
func optSimulate(t testing.TB, g *graph.Graph, p *sim.Plan) *sim.Result {
	t.Helper()
	res, err := sim.Simulate(g, p, sim.Options{})
	require.NoError(t, err)
	return res
}

// ExampleStagesOf cuts a three-layer chain into stages and shows what the
// solvers see of each.
func ExampleStagesOf() {
	b := graph.NewBuilder("chain3")
	x := b.Input("x", graph.F32, 0)
	prev := x
	var fw []graph.OpID
	var ins []graph.TensorID
	for k := 0; k < 3; k++ {
		ins = append(ins, prev)
		o := b.Op("linear", fmt.Sprintf("f%d", k), prev).OutBytes(fmt.Sprintf("a%d", k), 1000).TimeNs(10)
		fw, prev = append(fw, o.ID()), o.T()
	}
	b.SetLoss(prev)
	b.SetPhase(graph.Backward)
	d := prev
	for k := 2; k >= 0; k-- {
		d = b.Op("linear_grad", fmt.Sprintf("b%d", k), ins[k], d).Forward(fw[k]).OutBytes(fmt.Sprintf("d%d", k), 1000).TimeNs(20).T()
	}
	g, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	ch, err := StagesOf(g, StagesOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for k, s := range ch.Stages {
		fmt.Printf("stage %d: %d fwd op, in %d B (backward reads %d), x-bar %d B, time %d+%d\n", k, len(s.Fwd), s.InputBytes, s.InputBwdBytes, s.XBarBytes, s.FwdTime, s.BwdTime)
	}
	// Output:
	// stage 0: 1 fwd op, in 0 B (backward reads 0), x-bar 1000 B, time 10+20
	// stage 1: 1 fwd op, in 1000 B (backward reads 1000), x-bar 1000 B, time 10+20
	// stage 2: 1 fwd op, in 1000 B (backward reads 1000), x-bar 1000 B, time 10+20
}
