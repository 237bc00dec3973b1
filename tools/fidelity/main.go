// Command fidelity predicts the peak memory of one training step through the
// CLI's own path, for the fidelity harness (tools/fidelity.py) and for
// checkpoint plans the CLI cannot express. The settings are the
// environment's (REMAT_*, MXNET_*, ... as sim reads them) with the same
// flags as sim (-device, -framework, -dropout-mask, -optimizer), the
// framework preset for the device and the strategy options come from
// strategy.OptionsFor, and an ONNX model is imported with remat.ImportONNX:
// the calls `sim report` makes, so a plain run prints the peak_allocated of
//
//	sim report --onnx M --batch B --device cpu --allocator ideal --strategies none
//
// (TestSameAsCLI checks that). The graph comes from an ONNX file or from the
// PyTorch exporter's native JSON (tools/export_torch.py).
//
// With -checkpoint REGIONS the plan instead mirrors torch.utils.checkpoint
// (use_reentrant=False) around each region: the forward ops of a region keep
// nothing for backward but the region's input, and the region is
// recomputed as a whole right before the first backward op that
// differentiates one of its ops (when autograd first unpacks one of its
// saved tensors). REGIONS is a list separated by ';' of
//
//	MODULE       every forward op of module MODULE (ONNX scope /MODULE/), e.g. layer1
//	MODULE.A-B   children A..B of the Sequential MODULE, e.g. features.0-6
//
// and -checkpoint-sequential MODULE:N:K is shorthand for the regions of
// torch.utils.checkpoint.checkpoint_sequential(MODULE, K) over a Sequential
// of N children (segments of N/K children, all but the last checkpointed).
//
// Output: one JSON object {"graph", "ops", "params", "resident",
// "peak_allocated", "recomputes"}; resident is the bytes of the tensors no op
// produces (parameters, buffers, inputs, labels), resident from the start.
//
// With -steps it prints instead the plan's replay step by step (bytes
// allocated above the resident ones, and the op computed or the tensor
// freed), to set beside tools/peak_events.py --events, the profiler's
// allocation events of the same step.
//
// With -compare TRACE.json (and -onnx) it prints instead a tensor-by-tensor
// comparison of the import with tools/export_torch.py's trace of the same
// step: the saved forward tensors of each by type and size, each graph's
// peak, the op it is reached at and what is live there.
//
//	go run ./tools/fidelity -onnx testdata/onnx/resnet18.onnx -batch 2
//	go run ./tools/fidelity -onnx testdata/onnx/vgg16.onnx -batch 2 -checkpoint-sequential features:31:4
//	go run ./tools/fidelity -onnx testdata/onnx/resnet18.onnx -batch 2 -checkpoint 'layer1;layer2;layer3;layer4'
//	go run ./tools/fidelity -onnx testdata/onnx/transformer.onnx -batch 2 -compare step.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/remat-dev/remat"
	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/strategy"
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
	Resident      int64  `json:"resident"`
	PeakAllocated int64  `json:"peak_allocated"`
	Recomputes    int    `json:"recomputes"`
}

// settingFlags are the sim flags of settings this tool accepts, set through
// config.Settings.With as sim sets them.
var settingFlags = []string{"framework", "dropout-mask", "inplace-update", "cudnn-autotune", "conv-memory-format"}

func run(args []string) error { return runTo(os.Stdout, args) }

// runTo runs the command with its output on w.
func runTo(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("fidelity", flag.ContinueOnError)
	onnxPath := fs.String("onnx", "", "ONNX model to import (as sim --onnx)")
	jsonPath := fs.String("json", "", "native JSON graph (as sim --graph; from tools/export_torch.py)")
	batch := fs.Int64("batch", 0, "batch size for the ONNX import (0: 1)")
	dims := fs.String("dims", "", "other symbolic dimensions, name=size,...")
	optim := fs.String("optimizer", "", "optimizer appended to the ONNX import (as sim --optimizer; default sgd)")
	frozen := fs.String("frozen", "", "weights of the ONNX import that take no gradient, glob patterns separated by ',' (as sim --frozen)")
	devName := fs.String("device", "cpu", "device profile (as sim --device; its kind selects the framework preset)")
	ckpt := fs.String("checkpoint", "", "checkpointed regions: MODULE or MODULE.A-B, separated by ';'")
	seq := fs.String("checkpoint-sequential", "", "MODULE:N:K: the regions of checkpoint_sequential(MODULE, K) over N children")
	steps := fs.Bool("steps", false, "print the plan's replay step by step (op or freed tensor, bytes allocated above the resident) instead of the JSON result, to set beside tools/peak_events.py --events")
	cmp := fs.String("compare", "", "with -onnx: print a tensor-by-tensor comparison with this exporter trace (native JSON) instead of the JSON result")
	sets := map[string]*string{}
	for _, n := range settingFlags {
		sets[n] = fs.String(n, "", "setting flag --"+n+" of sim (default: the environment, else the preset)")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *frozen != "" && *onnxPath == "" {
		return errors.New("-frozen needs -onnx (a trace records which weights train)")
	}
	if *cmp != "" && *onnxPath == "" {
		return errors.New("-compare needs -onnx")
	}
	if *ckpt != "" && *seq != "" {
		return errors.New("give -checkpoint or -checkpoint-sequential, not both")
	}
	s, _, err := config.Global()
	if err != nil {
		return err
	}
	for _, n := range settingFlags {
		if *sets[n] == "" {
			continue
		}
		if s, err = s.With(n, *sets[n], config.FlagSource(n)); err != nil {
			return fmt.Errorf("-%s: %w", n, err)
		}
	}
	dev, err := remat.Device(*devName)
	if err != nil {
		return fmt.Errorf("-device: %w", err)
	}
	o, s, err := strategy.OptionsFor(s, dev)
	if err != nil {
		return err
	}
	o.Allocator = strategy.AllocIdeal
	var g *graph.Graph
	switch {
	case *onnxPath != "" && *jsonPath == "":
		in := remat.ONNXInput{Batch: *batch, Optimizer: *optim}
		if *frozen != "" {
			in.Frozen = strings.Split(*frozen, ",")
		}
		if *dims != "" {
			in.Dims = map[string]int64{}
			for _, kv := range strings.Split(*dims, ",") {
				k, v, ok := strings.Cut(kv, "=")
				n, err := strconv.ParseInt(v, 10, 64)
				if !ok || err != nil || n < 1 {
					return fmt.Errorf("-dims %q: expected name=size pairs with sizes >= 1", *dims)
				}
				in.Dims[k] = n
			}
		}
		f, err := os.Open(*onnxPath)
		if err != nil {
			return err
		}
		defer f.Close()
		if g, err = remat.ImportONNX(f, s, in); err != nil {
			return fmt.Errorf("%s: %w", *onnxPath, err)
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
		return compare(w, g, trace)
	}
	var regions []region
	switch {
	case *ckpt != "":
		if regions, err = parseRegions(*ckpt); err != nil {
			return fmt.Errorf("-checkpoint: %w", err)
		}
	case *seq != "":
		if regions, err = sequentialRegions(*seq); err != nil {
			return fmt.Errorf("-checkpoint-sequential: %w", err)
		}
	}
	var res *sim.Result
	if *steps {
		return writeSteps(w, g, o, regions)
	}
	if regions == nil {
		// The strategy "none" of the table, as sim report runs it.
		st, err := strategy.Lookup(strategy.Baseline)
		if err != nil {
			return err
		}
		r, err := st.Plan(context.Background(), g, o)
		if err != nil {
			return err
		}
		if r.Sim == nil {
			return fmt.Errorf("strategy none: %s: %s", r.Status, r.Reason)
		}
		res = r.Sim
	} else {
		plan, err := checkpointPlan(g, regions)
		if err != nil {
			return err
		}
		so, err := o.SimOptions()
		if err != nil {
			return err
		}
		if res, err = sim.Simulate(g, plan, so); err != nil {
			return err
		}
	}
	out := result{Graph: g.Name, Ops: len(g.Ops), Params: g.ParamCount(), Resident: residentBytes(g),
		PeakAllocated: res.PeakAllocated, Recomputes: res.Recomputes}
	return json.NewEncoder(w).Encode(out)
}

// writeSteps replays the plan (the default plan, or the checkpoint plan of
// regions) with a timeline and prints one line per step: the bytes
// allocated above the resident ones at the step's fullest, and the op it
// computes (recomputes marked) or the tensor it frees.
func writeSteps(w io.Writer, g *graph.Graph, o strategy.Options, regions []region) error {
	plan := sim.DefaultPlan(g)
	if regions != nil {
		var err error
		if plan, err = checkpointPlan(g, regions); err != nil {
			return err
		}
	}
	so, err := o.SimOptions()
	if err != nil {
		return err
	}
	so.Timeline = true
	res, err := sim.Simulate(g, plan, so)
	if err != nil {
		return err
	}
	resident := residentBytes(g)
	ran := make([]bool, len(g.Ops))
	for i, st := range plan.Steps {
		if i >= len(res.Timeline) {
			break
		}
		what := ""
		switch st.Kind {
		case sim.Compute:
			op := &g.Ops[st.Op]
			again := ""
			if ran[st.Op] {
				again = " (recompute)"
			}
			ran[st.Op] = true
			what = fmt.Sprintf("%s %s %s%s", op.Phase, op.Type, op.Name, again)
		case sim.Free:
			t := &g.Tensors[st.Tensor]
			what = fmt.Sprintf("free %s (%d B)", t.Name, t.Bytes)
		default:
			what = st.Kind.String()
		}
		fmt.Fprintf(w, "%6d %12d  %s\n", i, res.Timeline[i].Allocated-resident, what)
	}
	fmt.Fprintf(w, "peak %d B above the resident %d B\n", res.PeakAllocated-resident, resident)
	return nil
}

// residentBytes sums the storages no op produces: parameters, buffers,
// inputs and labels, resident before the step starts.
func residentBytes(g *graph.Graph) int64 {
	var n int64
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.Producer == graph.NoOp && t.AliasOf == graph.NoTensor {
			n += t.Bytes
		}
	}
	return n
}
