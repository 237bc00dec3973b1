package sim

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/remat-dev/remat/sim/alloc"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

var update = flag.Bool("update", false, "rewrite golden files")

// chain builds a small training graph with hand-checkable sizes:
//
//	x(100, input) w(40, param)
//	op0 fwd_a (x,w) -> a 200      op1 fwd_b (a) -> b 300    op2 fwd_c (b) -> c 50
//	op3 bwd_c (c,b) -> gb 300     op4 bwd_b (gb,a) -> ga 200
//	op5 bwd_w (ga,x) -> gw 40     op6 sgd (w,gw) -> w2 40 (parameter)
//
// Every op takes 1000 ns.
func chain(t testing.TB, ws ...int64) *graph.Graph {
	b := graph.NewBuilder("chain")
	x := b.Input("x", graph.F32, 25)
	w := b.Parameter("w", graph.F32, 10)
	wsOf := func(i int) int64 {
		if i < len(ws) {
			return ws[i]
		}
		return 0
	}
	a := b.Op("linear", "fwd_a", x, w).OutBytes("a", 200).TimeNs(1000).Workspace(wsOf(0)).T()
	bb := b.Op("relu", "fwd_b", a).OutBytes("b", 300).TimeNs(1000).Workspace(wsOf(1)).T()
	c := b.Op("loss", "fwd_c", bb).OutBytes("c", 50).TimeNs(1000).Workspace(wsOf(2)).T()
	b.SetLoss(c)
	b.SetPhase(graph.Backward)
	gb := b.Op("loss_grad", "bwd_c", c, bb).OutBytes("gb", 300).TimeNs(1000).Workspace(wsOf(3)).T()
	ga := b.Op("relu_grad", "bwd_b", gb, a).OutBytes("ga", 200).TimeNs(1000).Workspace(wsOf(4)).T()
	gw := b.Op("linear_grad", "bwd_w", ga, x).OutBytes("gw", 40).TimeNs(1000).Workspace(wsOf(5)).T()
	b.SetPhase(graph.Update)
	b.Op("sgd", "sgd", w, gw).OutBytes("w2", 40).TimeNs(1000).Workspace(wsOf(6))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// tensor IDs of chain
const (
	tX graph.TensorID = iota
	tW
	tA
	tB
	tC
	tGB
	tGA
	tGW
	tW2
)

func plan(steps ...Step) *Plan { return &Plan{Strategy: "test", Steps: steps} }

func TestDefaultPlanChainPeak(t *testing.T) {
	g := chain(t)
	p := DefaultPlan(g)
	// Frees right after the last use, tensor IDs ascending.
	want := []Step{ComputeStep(0), ComputeStep(1), ComputeStep(2), ComputeStep(3), FreeStep(tB), FreeStep(tC),
		ComputeStep(4), FreeStep(tA), FreeStep(tGB), ComputeStep(5), FreeStep(tGA), ComputeStep(6), FreeStep(tGW)}
	require.Equal(t, want, p.Steps)
	res, err := Simulate(g, p, Options{Timeline: true})
	require.NoError(t, err)
	// 140 resident; +200 +300 +50 +300 = 990 at op 3 (step 3).
	assert.Equal(t, int64(990), res.PeakAllocated)
	assert.Equal(t, int64(990), res.PeakReserved)
	assert.Equal(t, 3, res.PeakAllocatedStep)
	assert.Equal(t, graph.OpID(3), res.PeakAllocatedOp)
	assert.Equal(t, int64(7000), res.ComputeNs)
	assert.Equal(t, int64(7000), res.TotalNs)
	assert.Equal(t, 7, res.Computes)
	assert.Equal(t, 6, res.Frees)
	top := res.TopTensorsAtPeak(10)
	names := []string{}
	for _, l := range top {
		names = append(names, l.Name)
	}
	assert.Equal(t, []string{"b", "gb", "a", "x", "c", "w"}, names)
	alloc := []int64{}
	for _, p := range res.Timeline {
		alloc = append(alloc, p.Allocated)
	}
	// Per step: the most allocated during the step (a free step reports the
	// value before the free).
	assert.Equal(t, []int64{340, 640, 690, 990, 990, 690, 840, 840, 640, 380, 380, 220, 220}, alloc)
	assert.Len(t, res.TopTensorsAtPeak(2), 2)
}

// TestDefaultPlanFreesAfterLastUse checks on a larger graph that each free
// comes right after the last reader of the storage (or its producer) and
// that the plan replays.
func TestDefaultPlanFreesAfterLastUse(t *testing.T) {
	g := resnetLike(t, 30, 64)
	p := DefaultPlan(g)
	last := make([]int, len(g.Tensors))
	for i := range last {
		last[i] = int(g.Tensors[i].Producer)
	}
	for i := range g.Ops {
		for _, in := range g.Ops[i].Inputs {
			r := g.StorageOf(in)
			last[r] = max(last[r], i)
		}
	}
	cur := -1
	freed := make([]bool, len(g.Tensors))
	for _, st := range p.Steps {
		if st.Kind == Compute {
			cur = int(st.Op)
			continue
		}
		require.Equal(t, Free, st.Kind)
		assert.Equal(t, last[st.Tensor], cur, "tensor %d", st.Tensor)
		freed[st.Tensor] = true
	}
	for i := range g.Tensors {
		tt := &g.Tensors[i]
		should := tt.Producer != graph.NoOp && !tt.Kind.Persistent() && tt.AliasOf == graph.NoTensor
		assert.Equal(t, should, freed[i], "tensor %d %s", i, tt.Name)
	}
	res, err := Simulate(g, p, Options{})
	require.NoError(t, err)
	assert.Equal(t, len(p.Steps), res.Steps)
}

func TestWorkspaceSlots(t *testing.T) {
	g := chain(t, 0, 0, 500, 1000)
	p := DefaultPlan(g)
	res, err := Simulate(g, p, Options{})
	require.NoError(t, err)
	// One temp space: op 3 peaks at 990 + 1000.
	assert.Equal(t, int64(1990), res.PeakAllocated)
	assert.Equal(t, 3, res.PeakAllocatedStep)
	top := res.TopTensorsAtPeak(1)
	assert.Equal(t, "workspace:bwd_c", top[0].Name)
	assert.Equal(t, "workspace", top[0].Kind)

	// min(NumTemp, WorkerThreads) = 1 is the same.
	res1, err := Simulate(g, p, Options{NumTemp: 4, WorkerThreads: 1})
	require.NoError(t, err)
	assert.Equal(t, res.PeakAllocated, res1.PeakAllocated)

	// Two temp spaces: op 2's 500 bytes are still alive while op 3 runs.
	res2, err := Simulate(g, p, Options{NumTemp: 2, WorkerThreads: 2})
	require.NoError(t, err)
	assert.Equal(t, int64(2490), res2.PeakAllocated)
	assert.Equal(t, 2, TempSlots(2, 3))
	assert.Equal(t, 1, TempSlots(0, 0))
}

// accGraph: x(100) -> op0 a(200) -> op1 b(10) -> op2 accumulate_grad g(64)
// -> op3 out(10).
func accGraph(t testing.TB) *graph.Graph {
	b := graph.NewBuilder("acc")
	x := b.Input("x", graph.F32, 25)
	a := b.Op("relu", "a", x).OutBytes("a", 200).TimeNs(10).T()
	bb := b.Op("relu", "b", a).OutBytes("b", 10).TimeNs(10).T()
	b.SetPhase(graph.Backward)
	gg := b.Op(OpAccumulateGradLegacy, "acc", bb).OutBytes("g", 64).TimeNs(10).T()
	b.Op("relu", "out", gg).OutBytes("out", 10).TimeNs(10)
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func TestAtomicCleanPolicy(t *testing.T) {
	g := accGraph(t)
	p := DefaultPlan(g)
	// Policy 1: 100, 300, 310 (free a) 110, 174 (free b) 164, 174 -> peak 310.
	r1, err := Simulate(g, p, Options{AtomicCleanPolicy: 1})
	require.NoError(t, err)
	assert.Equal(t, int64(310), r1.PeakAllocated)
	// Policy 0: the 64-byte accumulator lives from the start: 164, 364, 374.
	r0, err := Simulate(g, p, Options{AtomicCleanPolicy: 0})
	require.NoError(t, err)
	assert.Equal(t, int64(374), r0.PeakAllocated)
	assert.Equal(t, 1, r0.PeakAllocatedStep)
	// Policy 0 pays one memset at start, policy 1 one per output; with the
	// default cost model both are launch + bytes/bandwidth.
	cm := CostModel{Device: mustDevice(t, DefaultDevice)}
	assert.Equal(t, 40+cm.MemsetNs(64), r1.ComputeNs)
	assert.Equal(t, 40+cm.MemsetNs(64), r0.ComputeNs)
	_, err = Simulate(g, p, Options{AtomicCleanPolicy: 2})
	assert.ErrorContains(t, err, "AtomicCleanPolicy")
}

func mustDevice(t testing.TB, name string) Profile {
	p, err := Device(name)
	require.NoError(t, err)
	return p
}

func TestPoolReserveAndReserveAll(t *testing.T) {
	g := chain(t)
	p := DefaultPlan(g)
	// 1000 bytes fit the 990 peak ...
	res, err := Simulate(g, p, Options{Capacity: 1000})
	require.NoError(t, err)
	assert.Equal(t, int64(1000), res.Capacity)
	// ... but not with 5% of it kept out of the pool (950 usable).
	res, err = Simulate(g, p, Options{Capacity: 1000, PoolReservePercent: 5})
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Equal(t, int64(950), res.Capacity)
	var se *StepError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, KindOutOfMemory, se.Kind)
	assert.Equal(t, 3, se.Step)

	// Reserve-all: the reserved peak is the whole capacity.
	res, err = Simulate(g, p, Options{Capacity: 2000, ReserveAll: true})
	require.NoError(t, err)
	assert.Equal(t, int64(2000), res.PeakReserved)
	assert.Equal(t, -1, res.PeakReservedStep)
	assert.Equal(t, int64(990), res.PeakAllocated)
	_, err = Simulate(g, p, Options{ReserveAll: true})
	assert.ErrorContains(t, err, "ReserveAll")
	// Device capacity minus the reserve.
	c, lim := CapacityOf(Options{Device: mustDevice(t, "v100-16gb"), PoolReservePercent: 5})
	assert.True(t, lim)
	assert.Equal(t, 16*gib-16*gib/100*5, c)
}

func TestOOMInfo(t *testing.T) {
	g := chain(t)
	res, err := Simulate(g, DefaultPlan(g), Options{Capacity: 800})
	require.ErrorIs(t, err, ErrOutOfMemory)
	var se *StepError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, KindOutOfMemory, se.Kind)
	assert.Equal(t, 3, se.Step)
	assert.Equal(t, graph.OpID(3), se.Op)
	assert.Equal(t, tGB, se.Tensor)
	assert.Equal(t, int64(300), se.Requested)
	assert.Contains(t, err.Error(), `step 3 (compute op #3 "bwd_c" (loss_grad)): tensor #5 "gb": out of memory`)
	require.NotNil(t, res.OOM)
	assert.True(t, res.Failed())
	assert.Equal(t, 3, res.OOM.Step)
	assert.Equal(t, int64(300), res.OOM.Requested)
	assert.Equal(t, int64(690), res.OOM.Allocated)
	assert.Equal(t, int64(800), res.OOM.Capacity)
	names := []string{}
	for _, l := range res.OOM.Largest {
		names = append(names, l.Name)
	}
	assert.Equal(t, []string{"b", "a", "x", "c", "w"}, names)
	assert.Equal(t, 3, res.Steps)
}

func TestReplayErrorKinds(t *testing.T) {
	g := chain(t)
	drop := dropoutGraph(t, false)
	dropSaved := dropoutGraph(t, true)
	// Freeing the updated parameter w2 (pinned when produced).
	withFreeW2 := plan(append(append([]Step{}, DefaultPlan(g).Steps...), FreeStep(tW2))...)
	cases := []struct {
		name   string
		g      *graph.Graph
		p      *Plan
		kind   ErrorKind
		step   int
		tensor graph.TensorID
		op     graph.OpID
	}{
		{"not computed", g, plan(ComputeStep(1)), KindInputNotComputed, 0, tA, 1},
		{"use after free", g, plan(ComputeStep(0), FreeStep(tA), ComputeStep(1)), KindUseAfterFree, 2, tA, 1},
		{"swapped", g, plan(ComputeStep(0), SwapOutStep(tA), ComputeStep(1)), KindInputSwappedOut, 2, tA, 1},
		{"free pinned param", g, plan(FreeStep(tW)), KindFreePinned, 0, tW, graph.NoOp},
		{"free pinned input", g, plan(FreeStep(tX)), KindFreePinned, 0, tX, graph.NoOp},
		{"free updated param", g, withFreeW2, KindFreePinned, 13, tW2, graph.NoOp},
		{"free never computed", g, plan(FreeStep(tA)), KindFreeDead, 0, tA, graph.NoOp},
		{"double free", g, plan(ComputeStep(0), FreeStep(tA), FreeStep(tA)), KindFreeDead, 2, tA, graph.NoOp},
		{"swap out not resident", g, plan(SwapOutStep(tA)), KindSwapOutNotResident, 0, tA, graph.NoOp},
		{"swap in not swapped", g, plan(ComputeStep(0), SwapInStep(tA)), KindSwapInNotSwapped, 1, tA, graph.NoOp},
		{"swap out pinned", g, plan(SwapOutStep(tW)), KindSwapPinned, 0, tW, graph.NoOp},
		{"recompute dropout", drop, plan(ComputeStep(0), ComputeStep(0)), KindRecomputeNondeterministic, 1, graph.NoTensor, 0},
		{"recompute impure", impureGraph(t), plan(ComputeStep(0), ComputeStep(0)), KindRecomputeForbidden, 1, graph.NoTensor, 0},
		{"op out of range", g, plan(ComputeStep(99)), KindInvalidStep, 0, graph.NoTensor, 99},
		{"tensor out of range", g, plan(FreeStep(99)), KindInvalidStep, 0, 99, graph.NoOp},
		{"bad kind", g, plan(Step{Kind: 9, Op: graph.NoOp, Tensor: graph.NoTensor}), KindInvalidStep, 0, graph.NoTensor, graph.NoOp},
		{"oom", g, DefaultPlan(g), KindOutOfMemory, 3, tGB, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := Options{}
			if c.kind == KindOutOfMemory {
				opts.Capacity = 900
			}
			res, err := Simulate(c.g, c.p, opts)
			require.Error(t, err)
			var se *StepError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, c.kind, se.Kind, err.Error())
			assert.Equal(t, c.step, se.Step)
			assert.Equal(t, c.tensor, se.Tensor)
			assert.Equal(t, c.op, se.Op)
			if c.kind == KindOutOfMemory {
				assert.ErrorIs(t, err, ErrOutOfMemory)
				assert.NotNil(t, res.OOM)
			} else {
				assert.ErrorIs(t, err, ErrInvalidPlan)
				assert.Nil(t, res.OOM)
			}
			assert.Equal(t, c.step, res.Steps)
		})
	}
	// With saved RNG state the dropout may be recomputed.
	res, err := Simulate(dropSaved, plan(ComputeStep(0), ComputeStep(0)), Options{})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Recomputes)
}

func dropoutGraph(t testing.TB, saved bool) *graph.Graph {
	b := graph.NewBuilder("dropout")
	x := b.Input("x", graph.F32, 4)
	o := b.Op("dropout", "drop", x).OutBytes("y", 16).Flags(graph.NonDeterministic)
	if saved {
		o.Attr(graph.AttrRNGSaved, "1")
	}
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func impureGraph(t testing.TB) *graph.Graph {
	b := graph.NewBuilder("impure")
	x := b.Input("x", graph.F32, 4)
	b.Op("print", "print", x).OutBytes("y", 16).Flags(graph.Impure)
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func TestErrorMessageNamesStepOpTensor(t *testing.T) {
	g := chain(t)
	_, err := Simulate(g, plan(ComputeStep(0), FreeStep(tA), ComputeStep(1)), Options{})
	assert.EqualError(t, err, `step 2 (compute op #1 "fwd_b" (relu)): tensor #2 "a": input used after free`)
	_, err = Simulate(g, plan(FreeStep(tW)), Options{})
	assert.EqualError(t, err, `step 0 (free): tensor #1 "w": free of a pinned tensor`)
	assert.Equal(t, "use_after_free", KindUseAfterFree.String())
}

func TestRecomputeAndEvictionCounts(t *testing.T) {
	g := chain(t)
	p := plan(ComputeStep(0), ComputeStep(1), FreeStep(tA), ComputeStep(2), ComputeStep(3), FreeStep(tB), FreeStep(tC),
		ComputeStep(0), ComputeStep(4))
	res, err := Simulate(g, p, Options{})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Recomputes)
	assert.Equal(t, 1, res.Evictions)
	assert.Equal(t, 3, res.Frees)
	assert.Equal(t, int64(1000), res.RecomputeNs)
	assert.Equal(t, int64(5000), res.ComputeNs)
	assert.Equal(t, int64(6000), res.TotalNs)
	// 140 +200 +300 (640) -200 (440) +50 +300 (790) -350 (440) +200 (640) +200 (840)
	assert.Equal(t, int64(840), res.PeakAllocated)
	base, err := Simulate(g, DefaultPlan(g), Options{})
	require.NoError(t, err)
	assert.InDelta(t, 1-840.0/990.0, res.MemorySaving(base), 1e-12)
}

// swapDevice moves 1 byte per ns over the host link.
func swapDevice() Profile {
	return Profile{Name: "swap-test", Capacity: 1 << 30, PeakFLOPS: Peaks{F32: 1e12}, MemBandwidth: 1e11, HostBandwidth: 1e9}
}

func TestSwapTimeAndStall(t *testing.T) {
	g := chain(t)
	// Swap a out after op 1 and back in right before op 4 reads it: the
	// copy (200 ns) starts when compute reaches it (t=4000), so op 4 waits
	// 200 ns.
	late := plan(ComputeStep(0), ComputeStep(1), SwapOutStep(tA), ComputeStep(2), ComputeStep(3), FreeStep(tB), FreeStep(tC),
		SwapInStep(tA), ComputeStep(4), FreeStep(tA), FreeStep(tGB), ComputeStep(5), FreeStep(tGA), ComputeStep(6), FreeStep(tGW))
	res, err := Simulate(g, late, Options{Device: swapDevice(), Trace: true})
	require.NoError(t, err)
	assert.Equal(t, int64(7000), res.ComputeNs)
	assert.Equal(t, int64(400), res.SwapNs)
	assert.Equal(t, int64(200), res.StallNs)
	assert.Equal(t, int64(7200), res.TotalNs)
	assert.Equal(t, 1, res.SwapOuts)
	assert.Equal(t, 1, res.SwapIns)
	assert.Equal(t, int64(400), res.SwapBytes)
	// 140 +200 +300 = 640, -200 = 440, +50 +300 = 790, -350 = 440, +200 = 640, +200 = 840.
	assert.Equal(t, int64(840), res.PeakAllocated)
	var copies []Event
	for _, e := range res.Events {
		if e.Kind == EvSwapIn || e.Kind == EvSwapOut {
			copies = append(copies, e)
		}
	}
	require.Len(t, copies, 2)
	assert.Equal(t, Event{Kind: EvSwapOut, Step: 2, ID: int32(tA), StartNs: 2000, DurNs: 200}, copies[0])
	assert.Equal(t, Event{Kind: EvSwapIn, Step: 7, ID: int32(tA), StartNs: 4000, DurNs: 200}, copies[1])

	// Prefetch one op earlier: the copy overlaps op 3, no stall.
	early := plan(ComputeStep(0), ComputeStep(1), SwapOutStep(tA), ComputeStep(2), SwapInStep(tA), ComputeStep(3), FreeStep(tB), FreeStep(tC),
		ComputeStep(4), FreeStep(tA), FreeStep(tGB), ComputeStep(5), FreeStep(tGA), ComputeStep(6), FreeStep(tGW))
	res2, err := Simulate(g, early, Options{Device: swapDevice()})
	require.NoError(t, err)
	assert.Equal(t, int64(0), res2.StallNs)
	assert.Equal(t, int64(7000), res2.TotalNs)
	assert.InDelta(t, 200.0/7000, res.Overhead(res2), 1e-12)

	// A trailing swap-out still running at the end counts as stall.
	tail := plan(ComputeStep(0), SwapOutStep(tA))
	res3, err := Simulate(g, tail, Options{Device: swapDevice()})
	require.NoError(t, err)
	assert.Equal(t, int64(200), res3.StallNs)
	assert.Equal(t, int64(1200), res3.TotalNs)
}

func TestMachineDirectAPI(t *testing.T) {
	g := chain(t)
	m, err := NewMachine(g, Options{Capacity: 850})
	require.NoError(t, err)
	assert.Equal(t, Resident, m.State(tX))
	assert.True(t, m.Pinned(tW))
	assert.Equal(t, NeverComputed, m.State(tA))
	require.NoError(t, m.Compute(0))
	require.NoError(t, m.Compute(1))
	assert.True(t, m.Resident(tB))
	require.NoError(t, m.Compute(2))
	assert.Equal(t, int64(690), m.Allocated())
	// Op 3 does not fit: the error leaves the machine unchanged, and after
	// dropping a (an eviction) it does.
	err = m.Compute(3)
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Equal(t, int64(690), m.Allocated())
	assert.Equal(t, NeverComputed, m.State(tGB))
	assert.NotNil(t, m.Result().OOM)
	require.NoError(t, m.Free(tA))
	assert.Equal(t, Freed, m.State(tA))
	require.NoError(t, m.Compute(3))
	assert.Nil(t, m.Result().OOM)
	require.NoError(t, m.Free(tB))
	require.NoError(t, m.Free(tC))
	require.NoError(t, m.Compute(0)) // rematerialize a
	require.NoError(t, m.Compute(4))
	r := m.Result()
	assert.Equal(t, 1, r.Evictions)
	assert.Equal(t, 1, r.Recomputes)
	assert.Equal(t, int64(6000), m.Clock())
	assert.Equal(t, int64(1000), m.OpTime(3))
	assert.Equal(t, int64(850), m.Capacity())
	assert.Equal(t, "ideal", m.Allocator().Name())
	m.Pin(tGA)
	assert.ErrorContains(t, m.Free(tGA), "pinned")
	m.Unpin(tGA)
	require.NoError(t, m.Free(tGA))
	// Reset brings back the initial state.
	require.NoError(t, m.Reset())
	assert.Equal(t, int64(140), m.Allocated())
	assert.Equal(t, 0, m.Step())
	assert.Equal(t, NeverComputed, m.State(tA))
}

// viewGraph: op0 produces base (100) and op1 a view of it; op2 reads the view.
func viewGraph(t testing.TB) *graph.Graph {
	b := graph.NewBuilder("views")
	x := b.Input("x", graph.F32, 4)
	base := b.Op("relu", "make", x).OutBytes("base", 100).TimeNs(10).T()
	v := b.Op("reshape", "view", base).OutBytes("v", 100).Alias(base).TimeNs(10).T()
	b.Op("relu", "use", v).OutBytes("y", 8).TimeNs(10)
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func TestViews(t *testing.T) {
	g := viewGraph(t)
	p := DefaultPlan(g)
	// base is freed after op 2, the last reader of its view; the view is
	// never freed itself.
	assert.Equal(t, []Step{ComputeStep(0), ComputeStep(1), ComputeStep(2), FreeStep(1), FreeStep(3)}, p.Steps)
	res, err := Simulate(g, p, Options{})
	require.NoError(t, err)
	assert.Equal(t, int64(16+100+8), res.PeakAllocated)

	m, err := NewMachine(g, Options{})
	require.NoError(t, err)
	require.NoError(t, m.Compute(0))
	require.NoError(t, m.Compute(1))
	assert.Equal(t, int64(116), m.Allocated())
	// Freeing the view only drops the view.
	require.NoError(t, m.Free(2))
	assert.Equal(t, int64(116), m.Allocated())
	assert.Equal(t, Resident, m.State(1))
	require.NoError(t, m.Compute(1))
	// Freeing the base frees the storage: the view is no longer resident.
	require.NoError(t, m.Free(1))
	assert.Equal(t, int64(16), m.Allocated())
	assert.False(t, m.Resident(2))
	assert.Equal(t, Freed, m.State(2))
	err = m.Compute(2)
	var se *StepError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, KindUseAfterFree, se.Kind)
	// Swapping a view moves its storage.
	require.NoError(t, m.Compute(0))
	assert.True(t, m.Resident(2))
	require.NoError(t, m.SwapOut(2))
	assert.Equal(t, Swapped, m.State(2))
	assert.Equal(t, Swapped, m.State(1))
	require.NoError(t, m.SwapIn(2))
	require.NoError(t, m.Compute(2))
}

func TestNewMachineErrors(t *testing.T) {
	g := chain(t)
	_, err := NewMachine(nil, Options{})
	assert.ErrorContains(t, err, "graph is nil")
	_, err = NewMachine(g, Options{PoolReservePercent: 100})
	assert.ErrorContains(t, err, "PoolReservePercent is 100")
	_, err = NewMachine(g, Options{NumTemp: -1})
	assert.ErrorContains(t, err, "NumTemp")
	_, err = NewMachine(g, Options{CudnnTune: 7})
	assert.ErrorContains(t, err, "CudnnTune")
	_, err = NewMachine(g, Options{Device: Profile{Name: "bad"}})
	assert.ErrorContains(t, err, "capacity_bytes")
	// Resident tensors alone exceed the capacity.
	_, err = NewMachine(g, Options{Capacity: 100})
	assert.ErrorIs(t, err, ErrOutOfMemory)
	bad := &graph.Graph{Name: "bad", Ops: []graph.Op{{ID: 0, Inputs: []graph.TensorID{5}}}}
	_, err = NewMachine(bad, Options{})
	assert.ErrorIs(t, err, graph.ErrInvalid)
	_, err = Simulate(g, nil, Options{})
	assert.ErrorIs(t, err, ErrInvalidPlan)
}

func TestSimulateWithCachingAllocator(t *testing.T) {
	g := resnetLike(t, 10, 64)
	p := DefaultPlan(g)
	ideal, err := Simulate(g, p, Options{})
	require.NoError(t, err)
	res, err := Simulate(g, p, Options{Allocator: alloc.NewCaching(0)})
	require.NoError(t, err)
	assert.Equal(t, "caching", res.Allocator)
	// Rounding to 512-byte blocks and caching can only add memory.
	assert.GreaterOrEqual(t, res.PeakAllocated, ideal.PeakAllocated)
	assert.GreaterOrEqual(t, res.PeakReserved, res.PeakAllocated)
	assert.Equal(t, ideal.TotalNs, res.TotalNs)
	// The Machine enforces its capacity over the allocator's reserved bytes.
	_, err = Simulate(g, p, Options{Allocator: alloc.NewCaching(0), Capacity: ideal.PeakAllocated})
	assert.ErrorIs(t, err, ErrOutOfMemory)
	// A reused allocator is reset by each machine.
	a := alloc.NewCaching(0)
	r1, err := Simulate(g, p, Options{Allocator: a})
	require.NoError(t, err)
	r2, err := Simulate(g, p, Options{Allocator: a})
	require.NoError(t, err)
	assert.Equal(t, r1.PeakReserved, r2.PeakReserved)
}

func TestResultJSONGolden(t *testing.T) {
	g := chain(t, 0, 0, 0, 64)
	p := plan(ComputeStep(0), ComputeStep(1), SwapOutStep(tA), ComputeStep(2), SwapInStep(tA), ComputeStep(3), FreeStep(tB), FreeStep(tC),
		ComputeStep(4), FreeStep(tA), FreeStep(tGB), ComputeStep(5), FreeStep(tGA), ComputeStep(6), FreeStep(tGW))
	res, err := Simulate(g, p, Options{Device: swapDevice(), Timeline: true})
	require.NoError(t, err)
	got, err := json.MarshalIndent(res, "", "  ")
	require.NoError(t, err)
	golden(t, "result_chain.golden.json", append(got, '\n'))
	var back Result
	require.NoError(t, json.Unmarshal(got, &back))
	assert.Equal(t, res.PeakAllocated, back.PeakAllocated)
	assert.Equal(t, res.TopTensorsAtPeak(3), back.TopTensorsAtPeak(3))
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./sim -update to create %s", path)
	assert.Equal(t, string(want), string(got))
}

func TestStateAndKindNames(t *testing.T) {
	assert.Equal(t, "swapped", Swapped.String())
	assert.Equal(t, "out_of_memory", KindOutOfMemory.String())
	b, err := KindFreeDead.MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "free_dead", string(b))
	var k EventKind
	require.NoError(t, k.UnmarshalText([]byte("swap_in")))
	assert.Equal(t, EvSwapIn, k)
	assert.Error(t, k.UnmarshalText([]byte("nope")))
	assert.True(t, errors.Is(&StepError{Err: ErrInvalidPlan}, ErrInvalidPlan))
}

// TestOOMRecordKeepsFailureState: an out-of-memory record lists the
// largest live tensors of the failure's state. It stays through failed
// calls (which change nothing) and a Pin, and the next successful step
// drops it.
func TestOOMRecordKeepsFailureState(t *testing.T) {
	g := chain(t)
	names := func(o *OOMInfo) []string {
		var n []string
		for _, l := range o.Largest {
			n = append(n, l.Name)
		}
		return n
	}
	m, err := NewMachine(g, Options{Capacity: 850})
	require.NoError(t, err)
	for op := graph.OpID(0); op < 3; op++ {
		require.NoError(t, m.Compute(op))
	}
	require.ErrorIs(t, m.Compute(3), ErrOutOfMemory)
	want := names(m.Result().OOM)
	assert.Equal(t, []string{"b", "a", "x", "c", "w"}, want) // as TestOOMInfo's
	require.ErrorIs(t, m.Compute(3), ErrOutOfMemory)
	require.Error(t, m.Free(tW)) // pinned
	m.Pin(tA)
	m.Unpin(tA)
	require.NotNil(t, m.Result().OOM)
	assert.Equal(t, want, names(m.Result().OOM))
	require.NoError(t, m.Free(tA))
	assert.Nil(t, m.Result().OOM)
}

// neighbourStep runs one step of the sequence TestFreeNeighbours and
// TestWatchAdjacentFree drive: op, or -1 and -2 to free tA and tB.
func neighbourStep(t *testing.T, m *Machine, op graph.OpID) {
	t.Helper()
	switch op {
	case -1:
		require.NoError(t, m.Free(tA)) // leaves a cached block between live ones
	case -2:
		require.NoError(t, m.Free(tB))
	default:
		require.NoError(t, m.Compute(op))
	}
}

// TestFreeNeighbours: on the caching allocator the Machine lists the
// resident storages with free memory next to their blocks, the ones whose
// AdjacentFree is positive; on other allocators it lists nothing.
func TestFreeNeighbours(t *testing.T) {
	g := chain(t)
	m, err := NewMachine(g, Options{Allocator: alloc.NewCaching(0), Capacity: -1})
	require.NoError(t, err)
	check := func() {
		got := map[graph.TensorID]bool{}
		require.True(t, m.FreeNeighbours(func(x graph.TensorID) {
			require.False(t, got[x], "tensor %d listed twice", x)
			got[x] = true
		}))
		for i := range g.Tensors {
			x := graph.TensorID(i)
			assert.Equal(t, m.AdjacentFree(x) > 0 && m.Storage(x) == x, got[x], "tensor %d", x)
		}
	}
	var listed int
	for _, op := range []graph.OpID{0, 1, -1, 2, 3, 0, 4, -2, 5, 6} {
		neighbourStep(t, m, op)
		m.FreeNeighbours(func(graph.TensorID) { listed++ })
		check()
	}
	require.Positive(t, listed)
	assert.True(t, m.FreeNeighbours(nil), "a nil visit visits nothing")
	ideal, err := NewMachine(g, Options{Capacity: -1})
	require.NoError(t, err)
	// no addresses: nothing is next to free memory, and the list is empty
	assert.True(t, ideal.FreeNeighbours(func(graph.TensorID) { t.Fatal("listed on the ideal allocator") }))
}

// TestWatchAdjacentFree: on the caching allocator the Machine reports the
// resident storages whose AdjacentFree grows: every storage resident
// before and after a step whose free neighbours grew is reported, and only
// resident storages with free memory next to them are. On an allocator
// without addresses it accepts the watch and reports nothing.
func TestWatchAdjacentFree(t *testing.T) {
	g := chain(t)
	m, err := NewMachine(g, Options{Allocator: alloc.NewCaching(0), Capacity: -1})
	require.NoError(t, err)
	var got map[graph.TensorID]int
	require.True(t, m.WatchAdjacentFree(func(x graph.TensorID) { got[x]++ }))
	type snap struct {
		adj      int64
		resident bool
	}
	state := func() []snap {
		a := make([]snap, len(g.Tensors))
		for i := range a {
			if x := graph.TensorID(i); m.Storage(x) == x && m.Resident(x) {
				a[i] = snap{m.AdjacentFree(x), true}
			}
		}
		return a
	}
	reported := 0
	for _, op := range []graph.OpID{0, 1, -1, 2, 3, 0, 4, -2, 5, 6} {
		before := state()
		got = map[graph.TensorID]int{}
		neighbourStep(t, m, op)
		after := state()
		for i := range after {
			if before[i].resident && after[i].resident && after[i].adj > before[i].adj {
				assert.Positive(t, got[graph.TensorID(i)], "tensor %d: %d -> %d free bytes next to it, not reported", i, before[i].adj, after[i].adj)
			}
		}
		for x := range got {
			assert.True(t, after[x].resident, "tensor %d reported, not a resident storage", x)
			assert.Positive(t, after[x].adj, "tensor %d reported, no free memory next to it", x)
		}
		reported += len(got)
	}
	require.Positive(t, reported)
	require.True(t, m.WatchAdjacentFree(nil))
	ideal, err := NewMachine(g, Options{Capacity: -1})
	require.NoError(t, err)
	assert.True(t, ideal.WatchAdjacentFree(func(graph.TensorID) { t.Fatal("reported on the ideal allocator") }))
	for op := range g.Ops {
		require.NoError(t, ideal.Compute(graph.OpID(op)))
	}
}
