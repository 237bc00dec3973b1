package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/onnx"
	"github.com/remat-dev/remat/sim"
)

func main() {
	mode := os.Args[1]
	var g *graph.Graph
	var err error
	if mode == "onnx" {
		f, _ := os.Open(os.Args[2])
		b, _ := strconv.Atoi(os.Args[3])
		dm := onnx.DropoutMaskLikeInput
		if os.Getenv("BYTE") != "" {
			dm = onnx.DropoutMaskByte
		}
		g, err = onnx.Import(f, onnx.Options{Batch: int64(b), Optimizer: graph.OptSGD, InPlaceUpdate: true, DropoutMask: dm})
	} else {
		g, err = graph.ReadFile(os.Args[2])
	}
	if err != nil {
		panic(err)
	}
	res, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{Timeline: true})
	if err != nil {
		panic(err)
	}
	fmt.Printf("peak %d (%.3f MiB) step %d op %d %s %s\n", res.PeakAllocated, float64(res.PeakAllocated)/(1<<20), res.PeakAllocatedStep, res.PeakAllocatedOp, g.Ops[res.PeakAllocatedOp].Name, g.Ops[res.PeakAllocatedOp].Type)
	live := res.TopTensorsAtPeak(10000)
	kinds := map[string]int64{}
	for _, l := range live {
		kinds[l.Kind] += l.Bytes
	}
	fmt.Println("live at peak by kind:", kinds)
	if len(os.Args) > 4 && os.Args[4] == "live" {
		sort.Slice(live, func(i, j int) bool { return live[i].Tensor < live[j].Tensor })
		for _, l := range live {
			if l.Kind == "parameter" || l.Kind == "constant" {
				continue
			}
			ty := ""
			if l.Op >= 0 {
				ty = g.Ops[l.Op].Type
			}
			fmt.Printf("  %6d %-10s %-28s %8d %s\n", l.Tensor, l.Kind, ty, l.Bytes, l.Name)
		}
	}
	if len(os.Args) > 4 && os.Args[4] == "saved" {
		// forward tensors (storage) read by backward ops
		for i := range g.Ops {
			op := &g.Ops[i]
			if op.Phase != graph.Forward {
				continue
			}
			for _, t := range op.Outputs {
				tt := &g.Tensors[t]
				var bw []string
				for _, c := range g.Consumers(t) {
					if g.Ops[c].Phase == graph.Backward {
						bw = append(bw, g.Ops[c].Type)
					}
				}
				al := ""
				if tt.AliasOf != graph.NoTensor {
					al = "view"
				}
				fmt.Printf("F %4d %-28s %-40s %-20v %8d %4s bw=%v\n", i, op.Type, tt.Name, tt.Shape, tt.Bytes, al, bw)
			}
		}
	}
	if len(os.Args) > 4 && os.Args[4] == "timeline" {
		for i, p := range res.Timeline {
			fmt.Println(i, p.Allocated)
		}
	}
}
