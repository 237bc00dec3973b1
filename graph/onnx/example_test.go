package onnx_test

import (
	"fmt"
	"os"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/onnx"
	"github.com/remat-dev/remat/sim"
)

// Import resnet18 (exported by tools/export_onnx.py with export_params=False)
// at batch 2 as a training graph with SGD, and simulate its peak memory.
func ExampleImport() {
	f, err := os.Open("../../testdata/onnx/resnet18.onnx")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	g, err := onnx.Import(f, onnx.Options{Batch: 2, Optimizer: graph.OptSGD, InPlaceUpdate: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("parameters:", g.ParamCount())
	fmt.Println("forward ops:", g.OpsInPhase(graph.Forward))
	fmt.Println("peak > parameters:", res.PeakAllocated > 4*g.ParamCount())
	// Output:
	// parameters: 11689512
	// forward ops: 70
	// peak > parameters: true
}
