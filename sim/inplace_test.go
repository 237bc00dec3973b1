package sim

import (
	"testing"

	"github.com/remat-dev/remat/sim/alloc"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

func opNamed(t *testing.T, g *graph.Graph, name string) graph.OpID {
	t.Helper()
	for i := range g.Ops {
		if g.Ops[i].Name == name {
			return graph.OpID(i)
		}
	}
	t.Fatalf("no op %q", name)
	return graph.NoOp
}

func tensorNamed(t *testing.T, g *graph.Graph, name string) graph.TensorID {
	t.Helper()
	for i := range g.Tensors {
		if g.Tensors[i].Name == name {
			return graph.TensorID(i)
		}
	}
	t.Fatalf("no tensor %q", name)
	return graph.NoTensor
}

// TestAtomicCleanGradAccumulate replays a graph from graph.Differentiate in
// which a hidden activation feeds two layers, so its gradient is summed by a
// grad_accumulate op, under both atomic clean policies.
func TestAtomicCleanGradAccumulate(t *testing.T) {
	b := graph.NewBuilder("mlp-fanout")
	x := b.Input("x", graph.F32, 2, 8)               // 64 B
	h := b.ReLU("act", b.Linear("fc0", x, 8, false)) // fc0.weight 256 B, fc0 64 B, act 64 B
	y := b.Add("sum", b.Linear("fc1", h, 8, false), b.Linear("fc2", h, 8, false))
	loss := b.CrossEntropy("loss", y, b.Input("labels", graph.I64, 2)) // labels 16 B
	fwd, err := b.Build()
	require.NoError(t, err)
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{})
	require.NoError(t, err)

	acc := opNamed(t, g, "act.grad")
	require.Equal(t, graph.OpGradAccumulate, g.Ops[acc].Type)
	assert.Equal(t, OpAccumulateGrad, g.Ops[acc].Type)
	assert.False(t, IsAtomicClean(&g.Ops[acc]), "PyTorch-style accumulation is not memset-initialized")
	// Mark it as a GE graph's atomic-add accumulator would be.
	g.Ops[acc].Attrs = map[string]string{AttrAtomicClean: "1"}
	assert.True(t, IsAtomicClean(&g.Ops[acc]))
	assert.True(t, IsAtomicClean(&graph.Op{Type: OpAccumulateGradLegacy}))
	nAtomic := 0
	for i := range g.Ops {
		if IsAtomicClean(&g.Ops[i]) {
			nAtomic++
		}
	}
	assert.Equal(t, 1, nAtomic, "one tensor (act) has two readers that need its gradient")
	accOut := g.Ops[acc].Outputs[0]
	require.Equal(t, int64(64), g.Tensors[accOut].Bytes)

	p := DefaultPlan(g)
	r1, err := Simulate(g, p, Options{AtomicCleanPolicy: 1})
	require.NoError(t, err)
	r0, err := Simulate(g, p, Options{AtomicCleanPolicy: 0})
	require.NoError(t, err)

	// Pinned from the start: x 64 + three 8x8 f32 weights 3*256 + labels 16
	// = 848 B. Each weight's gradient stays allocated to the end of the step
	// (its .grad, though no optimizer reads it), so the peak is while fc0's
	// backward runs, the last op:
	//   fc2.weight.grad, fc1.weight.grad, fc0.weight.grad 3*256
	//   fc0.grad 64 (relu's gradient of fc0's output, read by fc0's backward)
	// Policy 1: 848 + 768 + 64 = 1680; act.grad (64 B) was freed after
	// relu's backward.
	fc0b := opNamed(t, g, "fc0.backward")
	assert.Equal(t, int64(1680), r1.PeakAllocated)
	assert.Equal(t, fc0b, r1.PeakAllocatedOp)
	// Policy 0: act.grad sits in the atomic-clean arena, live for the
	// whole graph, so the same moment holds 1680 + 64 = 1744.
	assert.Equal(t, int64(1744), r0.PeakAllocated)
	assert.Equal(t, fc0b, r0.PeakAllocatedOp)
	assert.Equal(t, r1.PeakAllocatedStep, r0.PeakAllocatedStep)
	// Both pay one 64-byte memset: policy 0 at the start, policy 1 in the
	// grad_accumulate op.
	assert.Equal(t, r1.ComputeNs, r0.ComputeNs)
}

// chainGraph: x(100, input) -> op0 relu a(100) -> op1 sigmoid b(100) ->
// op2 tanh c(100); nothing reads c.
func chainGraph(t *testing.T) *graph.Graph {
	b := graph.NewBuilder("act-chain")
	x := b.Input("x", graph.F32, 25)
	b.Tanh("c", b.Sigmoid("b", b.ReLU("a", x)))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func TestInPlaceChainStatic(t *testing.T) {
	g := chainGraph(t)
	p := DefaultPlan(g)
	a, bt, c := tensorNamed(t, g, "a"), tensorNamed(t, g, "b"), tensorNamed(t, g, "c")
	require.Equal(t, []Step{ComputeStep(0), ComputeStep(1), FreeStep(a), ComputeStep(2), FreeStep(bt), FreeStep(c)}, p.Steps)

	run := func(inPlace bool) (*Result, *alloc.Static) {
		s := alloc.NewStatic(alloc.DefaultStaticOptions())
		res, err := Simulate(g, p, Options{Allocator: s, InPlace: inPlace})
		require.NoError(t, err)
		return res, s
	}
	// Off: x takes block 0; a block 1; b needs a new block 2 (a is still
	// read by sigmoid); after a's free, c reuses block 1. The chain uses two
	// blocks, the arena is 300 B, the peak x+a+b = 300 B.
	off, sOff := run(false)
	assert.Equal(t, 3, sOff.Stats().Storages)
	assert.Equal(t, int64(300), off.PeakReserved)
	assert.Equal(t, int64(300), off.PeakAllocated)
	assert.Zero(t, off.InPlace)
	// On: a takes block 1 (x is an input: pinned, never donated); sigmoid
	// writes b over a, which the plan frees right after; tanh writes c over
	// b. One block for the chain: arena 200 B, peak 200 B.
	on, sOn := run(true)
	assert.Equal(t, 2, sOn.Stats().Storages)
	assert.Equal(t, []alloc.StorageSlot{{Offset: 0, Size: 100}, {Offset: 100, Size: 100}}, sOn.Layout())
	assert.Equal(t, int64(200), on.PeakReserved)
	assert.Equal(t, int64(200), on.PeakAllocated)
	assert.Equal(t, 2, on.InPlace)
	assert.Equal(t, int64(2), sOn.Stats().InPlace)
	// The frees stay valid steps.
	assert.Equal(t, 3, on.Frees)
	assert.Equal(t, len(p.Steps), on.Steps)
	// The blocks live at the peak: x and one chain tensor, not the donor.
	require.Len(t, on.TopAtPeak, 2)
	assert.Equal(t, int64(200), on.TopAtPeak[0].Bytes+on.TopAtPeak[1].Bytes)

	// InPlace has no effect when the static model forbids it, or with an
	// allocator that cannot reuse in place.
	s := alloc.NewStatic(alloc.StaticOptions{MatchRange: 10})
	res, err := Simulate(g, p, Options{Allocator: s, InPlace: true})
	require.NoError(t, err)
	assert.Equal(t, int64(300), res.PeakReserved)
	assert.Zero(t, res.InPlace)
	res, err = Simulate(g, p, Options{InPlace: true})
	require.NoError(t, err)
	assert.Equal(t, int64(300), res.PeakAllocated)
	assert.Zero(t, res.InPlace)
}

func TestInPlaceConditions(t *testing.T) {
	// x -> relu a -> sigmoid b; add(a, b) -> c; all 100 B.
	b := graph.NewBuilder("fork")
	x := b.Input("x", graph.F32, 25)
	a := b.ReLU("a", x)
	b.Add("c", a, b.Sigmoid("b", a))
	g, err := b.Build()
	require.NoError(t, err)
	p := DefaultPlan(g)
	require.Equal(t, []Step{ComputeStep(0), ComputeStep(1), ComputeStep(2), FreeStep(1), FreeStep(2), FreeStep(3)}, p.Steps)
	s := alloc.NewStatic(alloc.DefaultStaticOptions())
	res, err := Simulate(g, p, Options{Allocator: s, InPlace: true})
	require.NoError(t, err)
	// sigmoid cannot write over a (add reads it later): b gets block 2.
	// add writes c over a (input 0, freed right after): 3 blocks, not 4.
	assert.Equal(t, 1, res.InPlace)
	assert.Equal(t, 3, s.Stats().Storages)
	assert.Equal(t, int64(300), res.PeakReserved)

	// A swap of the donor before its free forbids the reuse.
	g2 := chainGraph(t)
	a2, b2, c2 := tensorNamed(t, g2, "a"), tensorNamed(t, g2, "b"), tensorNamed(t, g2, "c")
	p2 := plan(ComputeStep(0), ComputeStep(1), SwapOutStep(a2), FreeStep(a2), ComputeStep(2), FreeStep(b2), FreeStep(c2))
	s = alloc.NewStatic(alloc.DefaultStaticOptions())
	res, err = Simulate(g2, p2, Options{Allocator: s, InPlace: true})
	require.NoError(t, err)
	assert.Equal(t, 1, res.InPlace, "only tanh over b")

	// Direct Compute calls never reuse in place.
	s = alloc.NewStatic(alloc.DefaultStaticOptions())
	m, err := NewMachine(g2, Options{Allocator: s, InPlace: true})
	require.NoError(t, err)
	require.NoError(t, m.Compute(0))
	require.NoError(t, m.Compute(1))
	assert.True(t, m.Resident(a2))
	assert.Zero(t, m.InPlaceReuses())

	// After an in-place reuse the donor is gone: the plan's free is a no-op,
	// a second free is an error and a reader sees a use after free.
	s = alloc.NewStatic(alloc.DefaultStaticOptions())
	m, err = NewMachine(g2, Options{Allocator: s, InPlace: true})
	require.NoError(t, err)
	err = m.Replay(plan(ComputeStep(0), ComputeStep(1), FreeStep(a2)))
	require.NoError(t, err)
	assert.Equal(t, 1, m.InPlaceReuses())
	assert.False(t, m.Resident(a2))
	assert.Equal(t, Freed, m.State(a2))
	assert.Equal(t, int64(200), m.Allocated())
	err = m.Free(a2)
	var se *StepError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, KindFreeDead, se.Kind)
	// Replay stopping between the op and the free leaves the donor freed.
	m.Reset()
	err = m.Replay(plan(ComputeStep(0), ComputeStep(1), FreeStep(c2), FreeStep(a2)))
	require.ErrorAs(t, err, &se)
	assert.Equal(t, KindFreeDead, se.Kind)
	err = m.Compute(1) // sigmoid again: its input a was overwritten
	require.ErrorAs(t, err, &se)
	assert.Equal(t, KindUseAfterFree, se.Kind)
	assert.Equal(t, a2, se.Tensor)
}

func TestInPlaceOOMLeavesMachineUnchanged(t *testing.T) {
	// sigmoid needs a 60 B workspace: x 100 + a 100 (b over a) + 60 > 250.
	b := graph.NewBuilder("ws")
	x := b.Input("x", graph.F32, 25)
	a := b.ReLU("a", x)
	b.Op(graph.OpSigmoid, "b", a).Out("b", graph.F32, 25).Workspace(60)
	g, err := b.Build()
	require.NoError(t, err)
	s := alloc.NewStatic(alloc.StaticOptions{MatchRange: 10, InPlace: true, Capacity: 250})
	m, err := NewMachine(g, Options{Allocator: s, InPlace: true, Capacity: 250})
	require.NoError(t, err)
	err = m.Replay(DefaultPlan(g))
	require.ErrorIs(t, err, ErrOutOfMemory)
	at := tensorNamed(t, g, "a")
	assert.True(t, m.Resident(at))
	assert.Equal(t, NeverComputed, m.State(tensorNamed(t, g, "b")))
	assert.Equal(t, int64(200), m.Allocated())
	assert.Zero(t, m.InPlaceReuses())
	require.NoError(t, m.Free(at))
	assert.Equal(t, int64(100), m.Allocated())
}

func TestInPlaceTrainingGraph(t *testing.T) {
	// A forward + backward graph: every plan step must stay valid with
	// in-place reuse, and reuse can only shrink the static arena.
	b := graph.NewBuilder("mlp")
	x := b.Input("x", graph.F32, 4, 16)
	h := b.Sigmoid("s1", b.ReLU("r1", b.Linear("fc0", x, 16, true)))
	h = b.Tanh("t2", b.Add("res", h, b.Linear("fc1", h, 16, true)))
	loss := b.CrossEntropy("loss", h, b.Input("labels", graph.I64, 4))
	fwd, err := b.Build()
	require.NoError(t, err)
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Optimizer: graph.OptSGD})
	require.NoError(t, err)
	p := DefaultPlan(g)
	for _, pol := range []int{0, 1} {
		off, err := Simulate(g, p, Options{Allocator: alloc.NewStatic(alloc.DefaultStaticOptions()), AtomicCleanPolicy: pol})
		require.NoError(t, err)
		on, err := Simulate(g, p, Options{Allocator: alloc.NewStatic(alloc.DefaultStaticOptions()), AtomicCleanPolicy: pol, InPlace: true})
		require.NoError(t, err)
		assert.Positive(t, on.InPlace)
		assert.LessOrEqual(t, on.PeakReserved, off.PeakReserved)
		assert.LessOrEqual(t, on.PeakAllocated, off.PeakAllocated)
		assert.Equal(t, off.Frees, on.Frees)
		assert.Equal(t, off.ComputeNs, on.ComputeNs)
	}
}

func TestInPlaceRuleOf(t *testing.T) {
	for typ, want := range map[string]InPlaceRule{
		graph.OpReLU: InPlaceFirstInput, graph.OpBatchNorm: InPlaceFirstInput, graph.OpDropout: InPlaceFirstInput,
		graph.OpAdd: InPlaceEitherOperand, graph.OpMul: InPlaceEitherOperand,
		"relu_backward": InPlaceOutputGrad, "batchnorm_backward": InPlaceOutputGrad, "mul_backward": InPlaceOutputGrad,
		graph.OpConv2d: InPlaceNone, "conv2d_backward": InPlaceNone, graph.OpGradAccumulate: InPlaceNone,
		graph.OpSoftmax: InPlaceNone, graph.OpReshape: InPlaceNone, "_backward": InPlaceNone,
	} {
		assert.Equal(t, want, InPlaceRuleOf(typ), typ)
	}
	assert.Equal(t, "output_grad", InPlaceOutputGrad.String())
	assert.Equal(t, "in_place_rule(9)", InPlaceRule(9).String())
}

func TestMachineAdjacentFree(t *testing.T) {
	// All 512 B: the caching model serves them from one 2 MiB small-pool
	// segment, back to back: x at 0, a at 512, bb at 1024, the rest cached.
	b := graph.NewBuilder("adj")
	x := b.Input("x", graph.F32, 128)
	a := b.ReLU("a", x)
	bb := b.ReLU("b", a)
	v := b.Op(graph.OpReshape, "v", bb).Out("v", graph.F32, 2, 64).Alias(bb).T()
	g, err := b.Build()
	require.NoError(t, err)
	m, err := NewMachine(g, Options{Allocator: alloc.NewCaching(0)})
	require.NoError(t, err)
	require.NoError(t, m.Compute(0))
	require.NoError(t, m.Compute(1))
	require.NoError(t, m.Compute(2))
	tail := int64(2<<20 - 3*512)
	assert.Equal(t, tail, m.AdjacentFree(bb))
	require.NoError(t, m.Free(a))
	// a's 512 B hole lies between x and b.
	assert.Equal(t, int64(512), m.AdjacentFree(x))
	assert.Equal(t, 512+tail, m.AdjacentFree(bb))
	assert.Equal(t, 512+tail, m.AdjacentFree(v), "a view reports its storage")
	assert.Zero(t, m.AdjacentFree(a), "not resident")
	assert.Zero(t, m.AdjacentFree(-1))
	assert.Zero(t, m.AdjacentFree(99))

	// Without an address allocator there is no adjacency.
	mi, err := NewMachine(g, Options{})
	require.NoError(t, err)
	assert.Zero(t, mi.AdjacentFree(x))
}

func TestNewMachineRejectsViewOfLaterTensor(t *testing.T) {
	// op0 makes v, a view of b, which op1 produces only afterwards (or v
	// has no producer at all). graph.Validate rejects both; the Machine
	// must fail cleanly on such an unvalidated graph.
	mk := func(viewByOp0 bool) *graph.Graph {
		g := &graph.Graph{Name: "bad", Loss: graph.NoTensor}
		g.Tensors = []graph.Tensor{
			{ID: 0, Name: "x", Bytes: 100, Kind: graph.Input, Producer: graph.NoOp, AliasOf: graph.NoTensor},
			{ID: 1, Name: "v", Kind: graph.Activation, Producer: graph.NoOp, AliasOf: 2},
			{ID: 2, Name: "b", Bytes: 100, Kind: graph.Activation, Producer: 1, AliasOf: graph.NoTensor},
			{ID: 3, Name: "o", Bytes: 10, Kind: graph.Activation, Producer: 2, AliasOf: graph.NoTensor},
		}
		g.Ops = []graph.Op{
			{ID: 0, Name: "mkview", Type: "reshape", Phase: graph.Forward, Inputs: []graph.TensorID{0}, Forward: graph.NoOp},
			{ID: 1, Name: "mkbase", Type: "relu", Phase: graph.Forward, Inputs: []graph.TensorID{0}, Outputs: []graph.TensorID{2}, Forward: graph.NoOp},
			{ID: 2, Name: "use", Type: "relu", Phase: graph.Forward, Inputs: []graph.TensorID{1}, Outputs: []graph.TensorID{3}, Forward: graph.NoOp},
		}
		if viewByOp0 {
			g.Tensors[1].Producer = 0
			g.Ops[0].Outputs = []graph.TensorID{1}
		}
		return g
	}
	for _, byOp := range []bool{true, false} {
		g := mk(byOp)
		require.ErrorIs(t, g.Validate(), graph.ErrInvalid)
		for _, al := range []alloc.Allocator{nil, alloc.NewCaching(0), alloc.NewStatic(alloc.DefaultStaticOptions())} {
			require.NotPanics(t, func() {
				res, err := Simulate(g, DefaultPlan(g), Options{Allocator: al, InPlace: true})
				require.ErrorIs(t, err, graph.ErrInvalid)
				assert.Nil(t, res)
				assert.Contains(t, err.Error(), `view #1 "v"`)
				assert.Contains(t, err.Error(), `tensor #2 "b", produced later by op #1 "mkbase" (relu)`)
				if byOp {
					assert.Contains(t, err.Error(), `produced by op #0 "mkview" (reshape)`)
				} else {
					assert.Contains(t, err.Error(), "has no producer")
				}
			})
		}
	}
}
