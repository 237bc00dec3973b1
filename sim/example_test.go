package sim_test

import (
	"fmt"

	"github.com/remat-dev/remat/sim/alloc"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// Example builds a two-layer MLP training step, replays the plan without any
// strategy on a V100 and prints the peak memory and time.
func Example() {
	b := graph.NewBuilder("mlp")
	x := b.Input("x", graph.F32, 64, 1024)
	w1 := b.Parameter("fc1.w", graph.F32, 1024, 1024)
	w2 := b.Parameter("fc2.w", graph.F32, 1024, 10)
	h := b.Op("linear", "fc1", x, w1).Out("h", graph.F32, 64, 1024).FLOPs(2 * 64 * 1024 * 1024).T()
	r := b.Op("relu", "relu", h).Out("r", graph.F32, 64, 1024).BytesAccessed(2 * 64 * 1024 * 4).T()
	y := b.Op("linear", "fc2", r, w2).Out("y", graph.F32, 64, 10).FLOPs(2 * 64 * 1024 * 10).T()
	b.SetLoss(y)
	b.SetPhase(graph.Backward)
	gr := b.Op("linear_grad_x", "fc2_grad", y, w2).Out("gr", graph.F32, 64, 1024).FLOPs(2 * 64 * 1024 * 10).T()
	gh := b.Op("relu_grad", "relu_grad", gr, r).Out("gh", graph.F32, 64, 1024).BytesAccessed(3 * 64 * 1024 * 4).T()
	b.Op("linear_grad_w", "fc1_grad", gh, x).Out("gw1", graph.F32, 1024, 1024).FLOPs(2 * 64 * 1024 * 1024)
	g, err := b.Build()
	if err != nil {
		panic(err)
	}
	dev, err := sim.Device("v100-16gb")
	if err != nil {
		panic(err)
	}
	res, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{Device: dev})
	if err != nil {
		panic(err)
	}
	fmt.Printf("peak %d bytes at step %d (op %q), time %d ns\n",
		res.PeakAllocated, res.PeakAllocatedStep, g.Ops[res.PeakAllocatedOp].Name, res.TotalNs)
	for _, t := range res.TopTensorsAtPeak(2) {
		fmt.Printf("  %s %d bytes\n", t.Name, t.Bytes)
	}
	// Output:
	// peak 8953856 bytes at step 9 (op "fc1_grad"), time 48723 ns
	//   fc1.w 4194304 bytes
	//   gw1 4194304 bytes
}

// ExampleOptions_inPlace replays x -> relu -> sigmoid -> tanh under MXNet's
// static storage planner with and without in-place reuse
// (MXNET_EXEC_ENABLE_INPLACE).
func ExampleOptions_inPlace() {
	b := graph.NewBuilder("chain")
	x := b.Input("x", graph.F32, 1024) // 4 KiB each
	b.Tanh("c", b.Sigmoid("b", b.ReLU("a", x)))
	g, err := b.Build()
	if err != nil {
		panic(err)
	}
	for _, inPlace := range []bool{false, true} {
		st := alloc.NewStatic(alloc.DefaultStaticOptions())
		res, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{Allocator: st, InPlace: inPlace})
		if err != nil {
			panic(err)
		}
		fmt.Printf("in-place %v: %d storage blocks, arena %d bytes, %d reuses\n",
			inPlace, st.Stats().Storages, res.PeakReserved, res.InPlace)
	}
	// Output:
	// in-place false: 3 storage blocks, arena 12288 bytes, 0 reuses
	// in-place true: 2 storage blocks, arena 8192 bytes, 2 reuses
}
