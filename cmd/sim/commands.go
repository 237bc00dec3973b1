package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/dtr"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/dtrlog"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/internal/gzfile"
	"github.com/remat-dev/remat/report"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/strategy"
)

func (a *app) addCommands(root *cobra.Command) {
	root.AddCommand(a.modelsCmd(), a.validateCmd(), a.convertCmd(), a.envCmd(), a.reportCmd(), a.planCmd(), a.sweepCmd(), a.maxbatchCmd())
}

func (a *app) modelsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "models",
		Short:   "List the built-in model zoo with its options and defaults",
		Example: "  sim models\n  sim models --format json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := a.outFormat()
			if err != nil {
				return err
			}
			type modelRow struct {
				Name        string         `json:"name"`
				Family      string         `json:"family"`
				Parameters  int64          `json:"parameters"`
				Options     map[string]int `json:"options"`
				Description string         `json:"description"`
			}
			var rows []modelRow
			t := &report.Table{Columns: []string{"model", "family", "parameters", "defaults", "description"}, RightAlign: []bool{false, false, true, false, false}}
			for _, sp := range models.List() {
				fwd, _, err := models.BuildForward(sp.Name, models.Options{})
				if err != nil {
					return fmt.Errorf("model %s: %w", sp.Name, err)
				}
				opts := map[string]int{}
				var parts []string
				for _, u := range sp.Uses {
					v := optionValue(sp.Defaults, u)
					opts[strings.ToLower(u)] = v
					parts = append(parts, fmt.Sprintf("%s=%d", strings.ToLower(u), v))
				}
				rows = append(rows, modelRow{sp.Name, sp.Family, fwd.ParamCount(), opts, sp.Description})
				t.AddRow(report.Text(sp.Name), report.Text(sp.Family), report.Int(fwd.ParamCount()), report.Text(strings.Join(parts, " ")), report.Text(sp.Description))
			}
			if f == report.FormatJSON {
				return report.WriteJSON(a.stdout, struct {
					Version int        `json:"version"`
					Kind    string     `json:"kind"`
					Models  []modelRow `json:"models"`
				}{report.SchemaVersion, "models", rows})
			}
			return t.Write(a.stdout, f)
		},
	}
}

func optionValue(o models.Options, name string) int {
	switch name {
	case "Batch":
		return o.Batch
	case "Image":
		return o.Image
	case "Seq":
		return o.Seq
	case "Depth":
		return o.Depth
	case "Width":
		return o.Width
	case "Heads":
		return o.Heads
	case "Vocab":
		return o.Vocab
	case "Classes":
		return o.Classes
	}
	return 0
}

// readAny reads a graph from a file by its extension: .json (remat), .log or
// .jsonl (DTR log), .onnx, each also gzip-compressed (inputKind).
func readAny(ctx context.Context, path string, s *config.Settings, warn io.Writer) (*graph.Graph, error) {
	// validate and convert take no --device: an ONNX model is imported for
	// the kind of the commands' default device (a GPU).
	s, err := strategy.ForDevice(s, sim.Profile{})
	if err != nil {
		return nil, err
	}
	switch inputKind(path) {
	case kindONNX:
		return loadONNX(ctx, path, &inputFlags{warn: warn}, s)
	case kindLog:
		g, err := readLogFile(ctx, path, true)
		if err != nil {
			return nil, err
		}
		if g.Name == "" {
			// a log names no model: the summary names the file
			base, _ := trimGz(filepath.Base(path))
			g.Name = strings.TrimSuffix(base, filepath.Ext(base))
		}
		return g, nil
	default:
		return readGraphFile(ctx, path, true)
	}
}

// nonEmpty rejects a graph file without ops: it is well formed, but there
// is no training step to validate, simulate or plan (as for a DTR log
// without calls).
func nonEmpty(path string, g *graph.Graph) error {
	if g.NumOps() == 0 {
		return fmt.Errorf("%s: ops: the graph has no ops, expected a training step with at least one op", path)
	}
	return nil
}

func (a *app) validateCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "validate FILE",
		Short:   "Check a graph file (remat JSON, DTR log or ONNX) and summarise it",
		Example: "  sim validate model.json\n  sim validate trace.log --format json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := a.outFormat()
			if err != nil {
				return err
			}
			s, err := a.settings(nil)
			if err != nil {
				return err
			}
			g, err := readAny(cmd.Context(), args[0], s, a.stderr)
			if err != nil {
				return err
			}
			if err := sim.Canceled(cmd.Context(), "sim validate"); err != nil {
				return err
			}
			sum := summarize(g)
			if f == report.FormatJSON {
				return report.WriteJSON(a.stdout, sum)
			}
			t := &report.Table{Columns: []string{"graph", "ops", "forward", "backward", "update", "tensors", "parameters", "parameter bytes", "valid"},
				RightAlign: []bool{false, true, true, true, true, true, true, true, false}}
			t.AddRow(report.Text(sum.Graph), report.Int(int64(sum.Ops)), report.Int(int64(sum.Forward)), report.Int(int64(sum.Backward)),
				report.Int(int64(sum.Update)), report.Int(int64(sum.Tensors)), report.Int(sum.Parameters), report.Bytes(sum.ParameterBytes), report.Bool(true))
			return t.Write(a.stdout, f)
		},
	}
}

type graphSummary struct {
	Version        int    `json:"version"`
	Kind           string `json:"kind"`
	Graph          string `json:"graph"`
	Valid          bool   `json:"valid"`
	Ops            int    `json:"ops"`
	Forward        int    `json:"forward"`
	Backward       int    `json:"backward"`
	Update         int    `json:"update"`
	Tensors        int    `json:"tensors"`
	Parameters     int64  `json:"parameters"`
	ParameterBytes int64  `json:"parameter_bytes"`
}

func summarize(g *graph.Graph) graphSummary {
	s := graphSummary{Version: report.SchemaVersion, Kind: "validate", Graph: g.Name, Valid: true, Ops: len(g.Ops), Tensors: len(g.Tensors),
		Forward: g.OpsInPhase(graph.Forward), Backward: g.OpsInPhase(graph.Backward), Update: g.OpsInPhase(graph.Update), Parameters: g.ParamCount()}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.Kind == graph.Parameter && t.Producer == graph.NoOp {
			s.ParameterBytes += t.StorageBytes()
		}
	}
	return s
}

func (a *app) convertCmd() *cobra.Command {
	var in inputFlags
	var devName string
	cmd := &cobra.Command{
		Use:   "convert [IN] OUT",
		Short: "Convert a DTR log, ONNX model, remat JSON graph or zoo model to remat's JSON format or a DTR log",
		Long: `convert reads IN by its extension (.json remat graph, .log/.jsonl DTR log, .onnx), or the
input given by --model, --graph, --dtr-log or --onnx instead of IN, and writes OUT by its
extension: .json in remat's native JSON format (docs/format.md; '-' for stdout), .log or
.jsonl as a DTR log of the graph's schedule (each op a CALL whose TIME is the --device cost
model's, a RELEASE after each tensor's last reader), which 'sim sweep --dtr-log' replays.
A gzip-compressed IN is read decompressed, and an OUT ending in .gz (model.json.gz,
trace.log.gz) is written compressed; a .gz after the extension does not change the kind.`,
		Example: "  sim convert resnet32.log resnet32.json\n  sim convert model.onnx -\n  sim convert --model resnet32 --batch 64 resnet32-b64.log",
		Args:    cobra.RangeArgs(1, 2),
	}
	in.register(cmd, a.stderr)
	cmd.Flags().StringVarP(&devName, "device", "d", defaultDevice, "device profile whose cost model gives a DTR log's op TIMEs")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		out := args[len(args)-1]
		toLog := inputKind(out) == kindLog
		_, gz := trimGz(out) // OUT.gz is written gzip-compressed
		if out != "-" {
			if err := checkOutput("OUT", out, ".json", ".log", ".jsonl", ".json.gz", ".log.gz", ".jsonl.gz"); err != nil {
				return err
			}
		}
		if len(args) == 2 && in.given() > 0 {
			return usagef("give the input as IN or as --model, --graph, --dtr-log or --onnx, not both")
		}
		if len(args) == 2 {
			in.setFile(args[0])
		}
		s, err := a.settings(nil)
		if err != nil {
			return err
		}
		dev, err := device(devName)
		if err != nil {
			return err
		}
		// An ONNX model is imported with the preset of the device's kind.
		if s, err = strategy.ForDevice(s, dev); err != nil {
			return err
		}
		g, err := in.load(cmd.Context(), s)
		if err != nil {
			return err
		}
		write := func(w io.Writer) error { return graph.Encode(w, g) }
		if toLog {
			m, err := sim.NewMachine(g, sim.Options{Device: dev, Capacity: -1})
			if err != nil {
				return err
			}
			// written as made: FromGraph's instructions of a
			// million-op graph took 3.0 to 3.7 GiB
			write = func(w io.Writer) error { return dtrlog.WriteGraph(w, g, m.OpTime) }
		}
		if gz {
			write = gzipped(write)
		}
		write = untilDone(cmd.Context(), write)
		o, err := render("OUT", out, write)
		if err != nil {
			return err
		}
		defer discard([]output{o})
		if out == "-" {
			if err := sim.Canceled(cmd.Context(), "sim convert"); err != nil {
				return err
			}
			_, err := a.stdout.Write(o.data)
			return err
		}
		return commit(cmd.Context(), o)
	}
	return cmd
}

func (a *app) envCmd() *cobra.Command {
	var in inputFlags
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Show every setting, its effective value and where it came from",
		Long: `env lists every setting remat reads: its environment variable, effective value, source
(default, preset FRAMEWORK on KIND, env VAR, flag --x, or attribute on N ops of the given
graph), whether it is read once or on every use, and its description. Flags override the
environment, which overrides the framework preset (--framework) for the device's kind
(--device: cpu or a GPU profile).`,
		Example: "  sim env\n  sim env --device cpu\n  MXNET_BACKWARD_DO_MIRROR=1 sim env --format json\n  sim env --model resnet18 --mirror=1",
		Args:    cobra.NoArgs,
	}
	in.register(cmd, a.stderr)
	var devName string
	cmd.Flags().StringVarP(&devName, "device", "d", defaultDevice, "device profile whose kind (CPU or GPU) selects the framework preset")
	sf := registerSettings(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f, err := a.outFormat()
		if err != nil {
			return err
		}
		s, err := a.settings(sf)
		if err != nil {
			return err
		}
		dev, err := device(devName)
		if err != nil {
			return err
		}
		if s, err = strategy.ForDevice(s, dev); err != nil {
			return err
		}
		var counts map[string]int
		if in.given() > 0 {
			g, err := in.load(cmd.Context(), s)
			if err != nil {
				return err
			}
			counts = map[string]int{}
			for i := range g.Ops {
				for k := range g.Ops[i].Attrs {
					counts[k]++
				}
			}
		}
		rows := s.Rows(counts)
		switch f {
		case report.FormatJSON:
			return config.WriteJSON(a.stdout, rows)
		case report.FormatTable:
			return config.WriteTable(a.stdout, rows)
		}
		t := &report.Table{Columns: []string{"setting", "variable", "value", "source", "read", "description"}}
		for _, r := range rows {
			read := "dynamic"
			if r.ReadOnce {
				read = "once"
			}
			t.AddRow(report.Text(r.Name), report.Text(r.Env), report.Text(r.Value), report.Text(r.Source), report.Text(read), report.Text(r.Description))
		}
		return t.Write(a.stdout, f)
	}
	return cmd
}

// defaultDevice is the --device of every command that takes one.
const defaultDevice = "a100-40gb"

// commonRun holds the flags report, plan, sweep and maxbatch share.
type commonRun struct {
	in         inputFlags
	sf         *settingsFlags
	device     string
	allocator  string
	strategies string
	budget     string
	seed       uint64
	slots      int
	cmd        *cobra.Command
}

// listed reports whether the user gave --strategies (or plan's --strategy).
func (c *commonRun) listed() bool {
	return c.cmd != nil && (c.cmd.Flags().Changed("strategies") || c.cmd.Flags().Changed("strategy"))
}

// register adds the shared flags. A command that runs several strategies
// takes them as --strategies (defaultStrategies: its default list); plan
// takes one --strategy and registers no list. Warnings about the input go
// to warn.
func (c *commonRun) register(cmd *cobra.Command, warn io.Writer, list bool, defaultStrategies string) {
	c.cmd = cmd
	c.in.register(cmd, warn)
	f := cmd.Flags()
	f.StringVarP(&c.device, "device", "d", defaultDevice, "device profile name, a profile JSON file, or 'none' for unlimited memory")
	f.StringVar(&c.allocator, "allocator", strategy.DefaultAllocator, "allocator model: ideal, caching (PyTorch's) or static (MXNet's planner)")
	if list {
		f.StringVarP(&c.strategies, "strategies", "s", defaultStrategies, "comma-separated strategies ("+strings.Join(strategy.Names(), ", ")+"); empty: all; each name once")
		_ = cmd.RegisterFlagCompletionFunc("strategies", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return strategy.Names(), cobra.ShellCompDirectiveNoFileComp
		})
	}
	f.StringVar(&c.budget, "budget", "", "memory budget: a size with a unit (8GiB, 512MB) or a ratio of the baseline peak in (0, 1] (0.5) or a percentage (50%)")
	f.Uint64Var(&c.seed, "seed", strategy.DefaultSeed, "seed of the randomized searches")
	countVar(f, &c.slots, "slots", "memory slots of optimal-chain's dynamic program (0: 500); more slots plan finer, and deeper chains are grouped sooner")
	c.sf = registerSettings(cmd)
	_ = cmd.RegisterFlagCompletionFunc("device", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return sim.DeviceNames(), cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.RegisterFlagCompletionFunc("allocator", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return strategy.Allocators, cobra.ShellCompDirectiveNoFileComp
	})
}

// splitList splits a comma-separated list, keeping empty entries so that
// they can be rejected; the empty string is the empty list.
func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	out := strings.Split(s, ",")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// parseStrategies resolves a --strategies list (empty: all).
func parseStrategies(flag, s string) ([]strategy.Strategy, error) {
	sts, err := strategy.Resolve(splitList(s))
	if err != nil {
		return nil, usageError{fmt.Errorf("--%s: %w", flag, err)}
	}
	return sts, nil
}

// checkExclusive refuses, as a usage error, a strategy list that names a
// strategy that cannot run with DTR enabled (MegEngine's sublinear search)
// while DTR is (MEGENGINE_ENABLE_DROP / MEGENGINE_DTR_AUTO_DROP). With the
// default list the strategies still run, and their rows say why they failed.
func checkExclusive(listed bool, sts []strategy.Strategy, o strategy.Options) error {
	if !listed || !o.DTREnabled {
		return nil
	}
	for _, s := range sts {
		if s.ExcludesDTR {
			return usageError{fmt.Errorf("%s: %w", s.Name, config.CheckExclusive(true, true))}
		}
	}
	return nil
}

// runSetup is what a run of strategies needs: the graph, the options (one
// path: strategy.OptionsFrom) and the strategies.
type runSetup struct {
	g        *graph.Graph
	o        strategy.Options
	sts      []strategy.Strategy
	settings *config.Settings
}

// setup builds the run from the flags, in the order the user would fix
// them: flags first, then the input. A ratio budget is resolved against the
// baseline peak.
func (a *app) setup(ctx context.Context, c *commonRun, list string) (*runSetup, error) {
	s, err := a.settings(c.sf)
	if err != nil {
		return nil, err
	}
	dev, err := device(c.device)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(strategy.Allocators, c.allocator) {
		return nil, usagef("--allocator %q: expected one of %s", c.allocator, strings.Join(strategy.Allocators, ", "))
	}
	sts, err := parseStrategies(list, c.strategies)
	if err != nil {
		return nil, err
	}
	size, ratio, err := parseBudget(c.budget)
	if err != nil {
		return nil, err
	}
	// One path: the framework preset for the device, then the options and
	// the input from the same settings.
	o, s, err := strategy.OptionsFor(s, dev)
	if err != nil {
		return nil, err
	}
	o.Allocator, o.Budget, o.Seed, o.Slots = c.allocator, size, c.seed, c.slots
	if err := checkExclusive(c.listed(), sts, o); err != nil {
		return nil, err
	}
	g, err := c.in.load(ctx, s)
	if err != nil {
		return nil, err
	}
	if ratio > 0 {
		if o, err = strategy.WithBudgetRatio(ctx, g, o, ratio); err != nil {
			return nil, err
		}
	}
	return &runSetup{g: g, o: o, sts: sts, settings: s}, nil
}

func (a *app) reportCmd() *cobra.Command {
	var c commonRun
	var plot, trace, failOver, chosen string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Compare strategies on one model, device and allocator",
		Long: `report runs every strategy (or those given with --strategies) on one training graph and
prints, per strategy, the peak allocated and reserved memory, the change against no
strategy, the step time and overhead, recomputes, evictions and swaps, and whether it fits
the device and the budget. Below the table: the ten tensors that dominate the best
strategy's peak. With --dtr-budget-scope saved the dtr strategy's budget bounds the saved
activations alone, as remat_torch.dtr's runtime does (docs/dtr.md).`,
		Example: `  sim report --model resnet50 --batch 32 --device a100-40gb
  sim report --model gpt --batch 8 --budget 12GiB --strategies none,mirror-cost,sublinear-budget,dtr
  sim report --graph model.json --device v100-16gb --plot memory.svg --format markdown
  sim report --model vgg19 --batch 128 --device v100-16gb --fail-over 16GB --pick optimal-chain
  sim report --model resnet18 --batch 16 --device cpu --allocator ideal --strategies dtr --budget 100MiB --dtr-budget-scope saved --dtr-heuristic dtr-eqclass`,
		Args: cobra.NoArgs,
	}
	c.register(cmd, a.stderr, true, "")
	f := cmd.Flags()
	f.StringVar(&plot, "plot", "", "write the memory-over-time plot (FILE.svg or FILE.png)")
	f.StringVar(&trace, "trace", "", "write a Chrome trace (profile.json) of the picked strategy")
	f.StringVar(&failOver, "fail-over", "", "exit 3 if the picked strategy's peak exceeds this size")
	f.StringVar(&chosen, "pick", "", "the strategy --trace and --fail-over look at (default: the best)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		format, err := a.outFormat()
		if err != nil {
			return err
		}
		var limit int64
		if failOver != "" {
			if limit, err = config.ParseSize(failOver); err != nil || limit <= 0 {
				return usagef("--fail-over %q: expected a size such as 40GB", failOver)
			}
		}
		if plot != "" {
			if err := checkOutput("--plot", plot, plotExts...); err != nil {
				return err
			}
		}
		ctx := cmd.Context()
		r, err := a.setup(ctx, &c, "strategies")
		if err != nil {
			return err
		}
		if chosen != "" && chosen != strategy.Baseline && !slices.ContainsFunc(r.sts, func(s strategy.Strategy) bool { return s.Name == chosen }) {
			return usagef("--pick %q: expected one of the strategies of this report (%s)", chosen, c.strategies)
		}
		if trace == "" && r.settings.Bool(config.ProfilerAutostart) {
			trace = "profile.json" // MXNET_PROFILER_AUTOSTART=1, as MXNet does
		}
		if trace != "" {
			if err := checkOutput("--trace", trace); err != nil {
				return err
			}
		}
		r.o.Timeline = plot != ""
		rep, err := report.Compare(ctx, r.g, r.o, r.sts, a.progress("report"))
		if err != nil {
			return err
		}
		var outs []output
		defer func() { discard(outs) }()
		if plot != "" {
			o, err := PlotTimeline(rep, plot)
			if err != nil {
				return err
			}
			outs = append(outs, o)
		}
		pick := chosen
		if pick == "" {
			pick = rep.Best
		}
		var row *report.Row
		for i := range rep.Rows {
			if rep.Rows[i].Strategy == pick {
				row = &rep.Rows[i]
			}
		}
		if row == nil {
			return fmt.Errorf("no strategy of this report has a result to look at")
		}
		if trace != "" {
			o, err := renderTrace(ctx, r, pick, trace)
			if err != nil {
				return err
			}
			outs = append(outs, o)
		}
		if err := commit(ctx, outs...); err != nil {
			return err
		}
		if err := rep.Write(a.stdout, format); err != nil {
			return err
		}
		if limit > 0 && row.PeakAllocated > limit {
			return failOverError{fmt.Sprintf("strategy %s peaks at %d bytes, over the --fail-over limit of %d", pick, row.PeakAllocated, limit)}
		}
		return nil
	}
	return cmd
}

// renderTrace runs the picked strategy again with trace events on and
// renders its Chrome trace.
func renderTrace(ctx context.Context, r *runSetup, name, path string) (output, error) {
	st, err := strategy.Lookup(name)
	if err != nil {
		return output{}, err
	}
	o := r.o
	o.Trace = true
	res, err := st.Plan(ctx, r.g, o)
	if err != nil {
		return output{}, err
	}
	if res.Sim == nil {
		return output{}, fmt.Errorf("trace of %s: %s", name, res.Reason)
	}
	return render("--trace", path, func(w io.Writer) error { return sim.WriteTrace(w, r.g, res.Sim) })
}

func (a *app) planCmd() *cobra.Command {
	var c commonRun
	var name, out string
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Write a strategy's plan (compute, free, swap steps) as JSON",
		Long: `plan runs one strategy and writes its plan (docs/simulator.md, "Plan JSON") so that it can
be applied in another framework (python/remat_torch applies it to a PyTorch model) or
replayed with 'sim report --graph'.`,
		Example: "  sim plan --model resnet50 --batch 64 --strategy sublinear > plan.json\n  sim plan --model gpt --strategy optimal-chain --budget 10GiB --out plan.json",
		Args:    cobra.NoArgs,
	}
	c.register(cmd, a.stderr, false, "")
	cmd.Flags().StringVar(&name, "strategy", "", "the strategy (required): "+strings.Join(strategy.Names(), ", "))
	cmd.Flags().StringVarP(&out, "out", "o", "", "output file (default stdout)")
	_ = cmd.RegisterFlagCompletionFunc("strategy", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return strategy.Names(), cobra.ShellCompDirectiveNoFileComp
	})
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if name == "" {
			return usagef("--strategy is required (one of %s)", strings.Join(strategy.Names(), ", "))
		}
		if out != "" {
			if err := checkOutput("--out", out); err != nil {
				return err
			}
		}
		c.strategies = name
		r, err := a.setup(cmd.Context(), &c, "strategy")
		if err != nil {
			return err
		}
		o := r.o
		o.DTRPlan = true
		res, err := r.sts[0].Plan(cmd.Context(), r.g, o)
		if errors.Is(err, config.ErrConflict) {
			// MegEngine refuses sublinear planning with DTR enabled, and
			// so does remat.
			return usageError{err}
		}
		if err != nil {
			return err
		}
		if res.Plan == nil {
			return fmt.Errorf("strategy %s gave no plan: %s: %s", name, res.Status, res.Reason)
		}
		if res.Status != strategy.StatusOK {
			fmt.Fprintf(a.stderr, "sim: warning: %s: %s: %s\n", name, res.Status, res.Reason)
		}
		if st := sim.StaleReads(r.g, res.Plan); len(st) > 0 {
			// The simulator replays these; PyTorch would compute them
			// from what an in-place op wrote (docs/simulator.md, Plans).
			s, g := st[0], r.g
			fmt.Fprintf(a.stderr, "sim: warning: %s: %d recomputes read a storage that an in-place op wrote since their first run, "+
				"so PyTorch would compute them from other data (first: step %d, op #%d %q reads tensor #%d %q, written by op #%d %q)\n",
				name, len(st), s.Step, s.Op, g.Ops[s.Op].Name, s.Tensor, g.Tensors[s.Tensor].Name, s.Wrote, g.Ops[s.Wrote].Name)
		}
		res.Plan.Signature = planSignature(r.g)
		o2, err := render("--out", out, func(w io.Writer) error { return sim.EncodePlan(w, res.Plan) })
		if err != nil {
			return err
		}
		defer discard([]output{o2})
		if out == "" {
			if err := sim.Canceled(cmd.Context(), "sim plan"); err != nil {
				return err
			}
			_, err = a.stdout.Write(o2.data)
			return err
		}
		return commit(cmd.Context(), o2)
	}
	return cmd
}

func parseRatios(s string) ([]float64, error) {
	var out []float64
	for _, p := range splitList(s) {
		r, err := strconv.ParseFloat(p, 64)
		if err != nil || !(r > 0) || r > 1 {
			return nil, usagef("--ratios: %q is not a ratio in (0, 1]", p)
		}
		if slices.Contains(out, r) {
			return nil, usagef("--ratios: %g is given twice", r)
		}
		out = append(out, r)
	}
	return out, nil
}

func (a *app) sweepCmd() *cobra.Command {
	var c commonRun
	var ratios, budgets, heuristics, plot string
	var parity bool
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Overhead of each strategy across memory budgets (the Pareto table)",
		Long: `sweep runs strategies at several budgets, given as ratios of the baseline peak (--ratios) or
as sizes (--budgets), and prints the overhead at each (or the status when a strategy does
not fit). With --dtr-log and --strategies dtr it follows the DTR paper's protocol on the
log: budget = ratio x baseline peak, thrash past 1x extra compute, overhead = clock /
baseline compute, for each --heuristic; --parity follows the reference simulator exactly.`,
		Example: `  sim sweep --model resnet50 --batch 32 --ratios 1,0.8,0.6,0.4 --plot sweep.svg
  sim sweep --dtr-log resnet32.log --strategies dtr --heuristic eq-class --ratios 1.0,0.9,0.8,0.7,0.6,0.5,0.4,0.3,0.2,0.1 --format json
  sim sweep --dtr-log unet.log --strategies dtr --heuristic all --parity
  sim sweep --dtr-log resnet32.log --strategies dtr --heuristic lookahead-msps,search --ratios 0.3,0.2,0.1`,
		Args: cobra.NoArgs,
	}
	c.register(cmd, a.stderr, true, "mirror,mirror-cost,sublinear,sublinear-budget,chen-greedy,optimal-chain,dtr")
	f := cmd.Flags()
	f.StringVar(&ratios, "ratios", "", "budgets as ratios of the baseline peak (default 1.0,0.9,...,0.1)")
	f.StringVar(&budgets, "budgets", "", "budgets as sizes (8GiB,6GiB,...)")
	f.StringVar(&heuristics, "heuristic", "eq-class", "DTR heuristics for --dtr-log sweeps (comma-separated, or 'all': every heuristic plus a best-of row for the portfolio, which adds lazy locking and the reference heuristics' exact runs; with --parity the six reference heuristics); 'search' adds the offline search over eviction orders, which with 'all' also competes in the best-of row")
	f.BoolVar(&parity, "parity", false, "DTR log sweeps: follow the reference simulator's semantics exactly")
	f.StringVar(&plot, "plot", "", "draw overhead vs budget (FILE.svg or FILE.png)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		format, err := a.outFormat()
		if err != nil {
			return err
		}
		rs, err := parseRatios(ratios)
		if err != nil {
			return err
		}
		if ratios != "" && budgets != "" {
			return usagef("give --ratios or --budgets, not both")
		}
		if plot != "" {
			if err := checkOutput("--plot", plot, plotExts...); err != nil {
				return err
			}
		}
		ctx := cmd.Context()
		// Two flags name a DTR heuristic: --heuristic for the sweep of a
		// DTR log (several, 'all', 'search'), the setting dtr.heuristic for
		// the dtr strategy on a training graph. Each ignored silently would
		// answer another question than the one asked.
		if c.in.dtrLog != "" && cmd.Flags().Changed("dtr-heuristic") {
			return usagef("--dtr-heuristic sets the dtr strategy's heuristic on a training graph; a --dtr-log sweep takes --heuristic")
		}
		if c.in.dtrLog != "" && cmd.Flags().Changed("dtr-budget-scope") {
			return usagef("--dtr-budget-scope sets what the dtr strategy's budget bounds on a training graph; a --dtr-log sweep budgets every storage (a log has no passes to tell saved activations by)")
		}
		if c.in.dtrLog == "" && cmd.Flags().Changed("heuristic") {
			return usagef("--heuristic names the heuristics of a --dtr-log sweep; on a training graph give the dtr strategy's with --dtr-heuristic")
		}
		if c.in.dtrLog != "" && c.strategies != "dtr" {
			// the log is swept as the graph it converts to, by the listed
			// strategies: the paper's protocol and its flags do not run
			for _, name := range []string{"heuristic", "parity"} {
				if cmd.Flags().Changed(name) {
					return usagef("--%s applies to the DTR paper's protocol, which a --dtr-log sweep runs with --strategies dtr alone; with --strategies %s the log is swept as a training graph", name, c.strategies)
				}
			}
		}
		if c.in.dtrLog != "" && c.strategies == "dtr" {
			if plot != "" {
				return usagef("--plot draws budget sweeps of graphs; a --dtr-log sweep prints its table only")
			}
			if err := logSweepFlags(cmd); err != nil {
				return err
			}
			return a.sweepLog(ctx, c.in.dtrLog, heuristics, rs, parity, c.seed, format)
		}
		var bs []int64
		for _, p := range splitList(budgets) {
			v, r, err := parseBudget(p)
			if err != nil || r > 0 || v <= 0 {
				return usagef("--budgets: %q is not a size with a unit such as 8GiB", p)
			}
			bs = append(bs, v)
		}
		if len(rs) == 0 && len(bs) == 0 {
			rs = dtr.DefaultRatios
		}
		if c.budget != "" {
			return usagef("sweep takes its budgets from --ratios or --budgets, not --budget")
		}
		r, err := a.setup(ctx, &c, "strategies")
		if err != nil {
			return err
		}
		sw, err := report.SweepBudgets(ctx, r.g, r.o, r.sts, rs, bs, a.progress("sweep"))
		if err != nil {
			return err
		}
		var outs []output
		defer func() { discard(outs) }()
		if plot != "" {
			o, err := PlotSweep(sw, plot)
			if err != nil {
				return err
			}
			outs = append(outs, o)
		}
		if err := commit(ctx, outs...); err != nil {
			return err
		}
		return sw.Write(a.stdout, format)
	}
	return cmd
}

// logSweepProtocol are the flags of the DTR paper's protocol (docs/dtr.md)
// that a --dtr-log sweep with --strategies dtr reads, beside the input and
// output flags (logSweepIO). Budgets are ratios of the log's baseline peak,
// the rematerialization limit is the baseline compute, and a log's bytes
// are counted as the reference simulator counts them, with no device,
// allocator or setting.
var (
	logSweepProtocol = []string{"heuristic", "ratios", "parity", "seed"}
	logSweepIO       = []string{"dtr-log", "strategies", "format", "quiet"}
)

// logSweepFlags refuses, as a usage error, the flags given to a --dtr-log
// sweep that it does not read (a device, a budget, a setting, a model's
// sizes): each ignored silently would answer another question than the
// one asked.
func logSweepFlags(cmd *cobra.Command) error {
	var unread []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if !slices.Contains(logSweepProtocol, f.Name) && !slices.Contains(logSweepIO, f.Name) {
			unread = append(unread, "--"+f.Name)
		}
	})
	if len(unread) == 0 {
		return nil
	}
	reads := make([]string, len(logSweepProtocol))
	for i, n := range logSweepProtocol {
		reads[i] = "--" + n
	}
	last := len(reads) - 1
	return usagef("%s: a --dtr-log sweep follows the DTR paper's protocol (docs/dtr.md) and reads only %s and %s", strings.Join(unread, ", "), strings.Join(reads[:last], ", "), reads[last])
}

func (a *app) sweepLog(ctx context.Context, path, heuristics string, ratios []float64, parity bool, seed uint64, format report.Format) error {
	var hs []dtr.Heuristic
	search := false
	names := splitList(heuristics)
	portfolio := false
	if slices.Contains(names, "all") {
		portfolio = !parity
		// With --parity only the reference simulator's heuristics have a
		// reference to match, so "all" means those. Other names may come
		// with it ("all,search"); those it includes are listed once.
		all := dtr.Heuristics
		if parity {
			all = dtr.ReferenceHeuristics
		}
		var expanded []string
		for _, h := range all {
			expanded = append(expanded, h.String())
		}
		for _, n := range names {
			if n != "all" {
				expanded = append(expanded, n)
			}
		}
		names = expanded
	}
	for _, n := range names {
		if n == report.SearchHeuristic {
			search = true
			continue
		}
		h, err := dtr.ParseHeuristic(n)
		if err != nil {
			return usageError{fmt.Errorf("--heuristic: %w; or 'all' (every heuristic and the best-of row) or '%s' (the offline search)", err, report.SearchHeuristic)}
		}
		if !slices.Contains(hs, h) {
			hs = append(hs, h)
		}
	}
	f, err := gzfile.Open(ctx, path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr, err := dtrlog.Compile(f)
	if err != nil {
		return misfiled(fmt.Errorf("%s: %w", path, err), path, true, false)
	}
	sw, err := report.SweepDTRLog(ctx, path, tr, report.DTRSweepOptions{Heuristics: hs, Search: search, Ratios: ratios, Parity: parity, SearchSeed: seed, Portfolio: portfolio, Progress: a.progress("sweep")})
	if err != nil {
		return err
	}
	return sw.Write(a.stdout, format)
}

func (a *app) maxbatchCmd() *cobra.Command {
	var c commonRun
	cmd := &cobra.Command{
		Use:   "maxbatch",
		Short: "Largest batch size per strategy that fits the device (or budget), with throughput",
		Long: `maxbatch searches, for each strategy, the largest batch of a zoo model (--model) or of an
ONNX model with a dynamic batch axis (--onnx) whose training step fits the device (or
--budget, given as a size), and reports the simulated throughput at that batch: the table
Checkmate and DTR publish.`,
		Example: "  sim maxbatch --model vgg19 --device v100-16gb\n  sim maxbatch --model gpt --seq 512 --device a100-40gb --strategies none,sublinear-budget,dtr\n" +
			"  sim maxbatch --onnx resnet18.onnx --device a100-40gb --strategies none,chen-greedy",
		Args: cobra.NoArgs,
	}
	c.register(cmd, a.stderr, true, "none,mirror,mirror-cost,sublinear,chen-sqrt,chen-greedy,optimal-chain,sublinear-budget,dtr")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		format, err := a.outFormat()
		if err != nil {
			return err
		}
		if c.in.model == "" && c.in.onnxFile == "" {
			return usagef("maxbatch needs --model or --onnx (it varies the batch of a zoo model or of an ONNX model's batch axis)")
		}
		if c.in.given() > 1 {
			return usagef("give only one of --model and --onnx")
		}
		if c.in.batch != 0 {
			return usagef("maxbatch searches the batch size: do not give --batch")
		}
		s, err := a.settings(c.sf)
		if err != nil {
			return err
		}
		dev, err := device(c.device)
		if err != nil {
			return err
		}
		sts, err := parseStrategies("strategies", c.strategies)
		if err != nil {
			return err
		}
		if !slices.Contains(strategy.Allocators, c.allocator) {
			return usagef("--allocator %q: expected one of %s", c.allocator, strings.Join(strategy.Allocators, ", "))
		}
		size, ratio, err := parseBudget(c.budget)
		if err != nil {
			return err
		}
		if ratio > 0 {
			return usagef("maxbatch: --budget must be a size, not a ratio")
		}
		so, s, err := strategy.OptionsFor(s, dev)
		if err != nil {
			return err
		}
		so.Allocator, so.Budget, so.Seed, so.Slots = c.allocator, size, c.seed, c.slots
		if err := checkExclusive(c.listed(), sts, so); err != nil {
			return err
		}
		if err := c.in.applicable(); err != nil {
			return err
		}
		var rep *report.MaxBatchReport
		if c.in.onnxFile != "" {
			build, err := onnxBuilder(cmd.Context(), c.in.onnxFile, &c.in, s)
			if err != nil {
				return err
			}
			if err := batchAxis(c.in.onnxFile, build); err != nil {
				return err
			}
			rep, err = report.MaxBatchOf(cmd.Context(), c.in.onnxFile, build, so, sts, a.progress("maxbatch"))
			if err != nil {
				return err
			}
		} else {
			o, err := c.in.modelOptions(s)
			if err != nil {
				return err
			}
			if _, err := models.Lookup(c.in.model); err != nil {
				return usageError{err}
			}
			if rep, err = report.MaxBatch(cmd.Context(), c.in.model, o, so, sts, a.progress("maxbatch")); err != nil {
				return err
			}
		}
		return rep.Write(a.stdout, format)
	}
	return cmd
}
