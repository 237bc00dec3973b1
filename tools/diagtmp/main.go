package main

import (
	"fmt"
	"os"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/onnx"
	"github.com/remat-dev/remat/sim"
)

func main() {
	f, _ := os.Open("testdata/onnx/resnet50.onnx")
	g, err := onnx.Import(f, onnx.Options{Batch: 4, Optimizer: "sgd", InPlaceUpdate: true})
	if err != nil { panic(err) }
	r, _ := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
	op := g.Ops[r.PeakAllocatedOp]
	fmt.Println("onnx peak", r.PeakAllocated, op.Name, op.Type, op.Phase)
	var kinds = map[graph.TensorKind]int64{}
	for _, l := range r.TopAtPeak { _ = l }
	_ = kinds
	for _, l := range r.TopAtPeak[:5] { if l.Tensor >= 0 { fmt.Println(" ", g.Tensors[l.Tensor].Name, g.Tensors[l.Tensor].Bytes) } }
	g2, _ := graph.ReadFile("/tmp/r50.json")
	r2, _ := sim.Simulate(g2, sim.DefaultPlan(g2), sim.Options{})
	op2 := g2.Ops[r2.PeakAllocatedOp]
	fmt.Println("exp peak", r2.PeakAllocated, op2.Name, op2.Phase)
	for _, l := range r2.TopAtPeak[:5] { if l.Tensor >= 0 { fmt.Println(" ", g2.Tensors[l.Tensor].Name, g2.Tensors[l.Tensor].Bytes) } }
}
