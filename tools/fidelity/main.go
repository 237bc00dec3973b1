// Command fidelity prints remat's predicted peak memory of one training step
// for the fidelity harness (tools/fidelity.py): the graph comes from an ONNX
// file (graph/onnx.Import) or from the PyTorch exporter's native JSON
// (tools/export_torch.py), and is simulated with the ideal allocator and no
// strategy: sim.Simulate(g, sim.DefaultPlan(g), sim.Options{}).
//
// With -checkpoint PREFIX:MODULES:K the plan instead mirrors
// torch.utils.checkpoint.checkpoint_sequential(PREFIX, K): forward ops whose
// ONNX node name lies in module PREFIX.i of the first K-1 segments keep only
// the segment inputs, and each such segment is recomputed right before the
// first backward op that differentiates one of its ops.
//
// The ONNX import models PyTorch on CPU by default (-dropout-mask
// like-input: dropout saves a mask of the input's type, see
// onnx.DropoutMaskLikeInput), since the harness measures CPU steps.
//
// Output: one JSON object {"graph", "ops", "params", "peak_allocated"}.
//
// With -compare TRACE.json (and -onnx) it prints instead a tensor-by-tensor
// comparison of the import with tools/export_torch.py's trace of the same
// step: the saved forward tensors of each by type and size, each graph's
// peak, the op it is reached at and what is live there.
//
//	go run ./tools/fidelity -onnx testdata/onnx/resnet18.onnx -batch 2
//	go run ./tools/fidelity -json step.json
//	go run ./tools/fidelity -onnx vgg16.onnx -batch 2 -checkpoint features:31:4
//	go run ./tools/fidelity -onnx transformer.onnx -batch 2 -compare step.json
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/onnx"
	"github.com/remat-dev/remat/sim"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fidelity:", err)
		os.Exit(1)
	}
}

type result struct {
	Graph         string `json:"graph"`
	Ops           int    `json:"ops"`
	Params        int64  `json:"params"`
	PeakAllocated int64  `json:"peak_allocated"`
	Recomputes    int    `json:"recomputes"`
}

func run(args []string) error {
	fs := flag.NewFlagSet("fidelity", flag.ContinueOnError)
	onnxPath := fs.String("onnx", "", "ONNX model to import")
	jsonPath := fs.String("json", "", "native JSON graph (from tools/export_torch.py)")
	batch := fs.Int64("batch", 1, "batch size for the ONNX import")
	dims := fs.String("dims", "", "other symbolic dimensions, name=size,...")
	optim := fs.String("optimizer", "sgd", "optimizer appended to the ONNX import (updates in place)")
	ckpt := fs.String("checkpoint", "", "PREFIX:MODULES:K: plan of checkpoint_sequential over module PREFIX (ONNX only)")
	cmp := fs.String("compare", "", "with -onnx: print a tensor-by-tensor comparison with this exporter trace (native JSON) instead of the JSON result")
	mask := fs.String("dropout-mask", "like-input", "mask each training-mode Dropout saves (ONNX only): like-input (PyTorch on CPU, what the harness measures) or byte (PyTorch on CUDA)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cmp != "" && *onnxPath == "" {
		return errors.New("-compare needs -onnx")
	}
	var g *graph.Graph
	var err error
	switch {
	case *onnxPath != "" && *jsonPath == "":
		f, err := os.Open(*onnxPath)
		if err != nil {
			return err
		}
		defer f.Close()
		dm, err := onnx.ParseDropoutMask(*mask)
		if err != nil {
			return fmt.Errorf("-dropout-mask: %w", err)
		}
		opts := onnx.Options{Batch: *batch, Optimizer: graph.Optimizer(*optim), InPlaceUpdate: true, DropoutMask: dm}
		if *dims != "" {
			opts.Dims = map[string]int64{}
			for _, kv := range strings.Split(*dims, ",") {
				k, v, ok := strings.Cut(kv, "=")
				n, err := strconv.ParseInt(v, 10, 64)
				if !ok || err != nil {
					return fmt.Errorf("-dims %q: expected name=size pairs", *dims)
				}
				opts.Dims[k] = n
			}
		}
		if g, err = onnx.Import(f, opts); err != nil {
			return err
		}
	case *jsonPath != "" && *onnxPath == "":
		if g, err = graph.ReadFile(*jsonPath); err != nil {
			return err
		}
	default:
		return errors.New("give exactly one of -onnx and -json")
	}
	if *cmp != "" {
		trace, err := graph.ReadFile(*cmp)
		if err != nil {
			return err
		}
		return compare(os.Stdout, g, trace)
	}
	plan := sim.DefaultPlan(g)
	if *ckpt != "" {
		if plan, err = checkpointPlan(g, *ckpt); err != nil {
			return err
		}
	}
	res, err := sim.Simulate(g, plan, sim.Options{})
	if err != nil {
		return err
	}
	out := result{Graph: g.Name, Ops: len(g.Ops), Params: g.ParamCount(), PeakAllocated: res.PeakAllocated, Recomputes: res.Recomputes}
	enc := json.NewEncoder(os.Stdout)
	return enc.Encode(out)
}

// checkpointPlan builds the plan of checkpoint_sequential(PREFIX, K) over a
// Sequential of MODULES children: segments of MODULES/K modules, all but the
// last checkpointed.
func checkpointPlan(g *graph.Graph, spec string) (*sim.Plan, error) {
	parts := strings.Split(spec, ":")
	if len(parts) != 3 {
		return nil, fmt.Errorf("-checkpoint %q: expected PREFIX:MODULES:K", spec)
	}
	prefix := parts[0]
	mods, err1 := strconv.Atoi(parts[1])
	k, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || mods <= 0 || k <= 0 || k > mods {
		return nil, fmt.Errorf("-checkpoint %q: expected MODULES > 0 and 0 < K <= MODULES", spec)
	}
	size := mods / k // torch: segment_size = len(functions) // segments
	segOf := make([]int, len(g.Ops))
	marker := "/" + prefix + "/" + prefix + "."
	found := 0
	for i := range g.Ops {
		segOf[i] = -1
		op := &g.Ops[i]
		if op.Phase != graph.Forward {
			continue
		}
		j := strings.Index(op.Name, marker)
		if j < 0 {
			continue
		}
		rest := op.Name[j+len(marker):]
		end := strings.IndexByte(rest, '/')
		if end < 0 {
			continue
		}
		m, err := strconv.Atoi(rest[:end])
		if err != nil {
			continue
		}
		if s := m / size; s < k-1 {
			segOf[i] = s
			found++
		}
	}
	if found == 0 {
		return nil, fmt.Errorf("-checkpoint %q: no forward op name contains %q", spec, marker)
	}
	var order []graph.OpID
	done := make([]bool, k)
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Phase == graph.Backward && op.Forward != graph.NoOp {
			if s := segOf[op.Forward]; s >= 0 && !done[s] {
				done[s] = true
				for j := range g.Ops {
					if segOf[j] == s {
						order = append(order, graph.OpID(j))
					}
				}
			}
		}
		order = append(order, graph.OpID(i))
	}
	return sim.PlanFromSchedule(g, "checkpoint_sequential", order)
}
