package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/remat-dev/remat"
	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/dtrlog"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/internal/gzfile"
	"github.com/remat-dev/remat/sim"
)

// inputFlags select the graph a command works on.
type inputFlags struct {
	model                        string
	batch, seq, image, depth     int
	width, heads, vocab, classes int
	dtype, optimizer             string
	graphFile, dtrLog, onnxFile  string
	positional                   bool // the file was an argument (setFile), not a flag
	frozen                       []string
	// warn receives warnings about the input (nil: none are written).
	warn io.Writer
}

// register adds the input flags to cmd; warnings about the input go to warn.
func (in *inputFlags) register(cmd *cobra.Command, warn io.Writer) {
	in.warn = warn
	f := cmd.Flags()
	f.StringVarP(&in.model, "model", "m", "", "zoo model (see 'sim models')")
	countVar(f, &in.batch, "batch", "batch size (0: the model's default)")
	countVar(f, &in.seq, "seq", "sequence length (gpt, lstm)")
	countVar(f, &in.image, "image", "input image size (vision models)")
	countVar(f, &in.depth, "depth", "layers (chain, mlp, resnet-cifar, gpt, lstm)")
	countVar(f, &in.width, "width", "hidden width (mlp, gpt d_model, lstm)")
	countVar(f, &in.heads, "heads", "attention heads (gpt)")
	countVar(f, &in.vocab, "vocab", "vocabulary size (gpt, lstm)")
	countVar(f, &in.classes, "classes", "output classes (vision models, mlp)")
	f.StringVar(&in.dtype, "dtype", "", "element type: f32, f16, bf16, f64 (default f32)")
	f.StringVar(&in.optimizer, "optimizer", "", "optimizer update ops: none (backward only; each gradient stays allocated as .grad), sgd, momentum, adam (default sgd)")
	f.StringVar(&in.graphFile, "graph", "", "a graph in remat's JSON format (gzip-compressed too)")
	f.StringVar(&in.dtrLog, "dtr-log", "", "a DTR log (JSON lines; gzip-compressed too)")
	f.StringVar(&in.onnxFile, "onnx", "", "an ONNX model (gzip-compressed too)")
	f.StringSliceVar(&in.frozen, "frozen", nil, "ONNX weights that take no gradient and no update, as glob patterns of their names "+
		"(comma-separated, e.g. 'backbone.*' or '*.cos,*.sin'): a model's registered buffers, or layers frozen for fine-tuning")
	_ = cmd.RegisterFlagCompletionFunc("model", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return models.Names(), cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.RegisterFlagCompletionFunc("dtype", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"f32", "f16", "bf16", "f64"}, cobra.ShellCompDirectiveNoFileComp
	})
}

// countVar defines an integer flag that also takes integral numbers in
// scientific notation (--depth 1e5), as the sizes a scaling study sweeps
// are written; the value's range is checked where it is used (a model's
// options, the graph size limits).
func countVar(f *pflag.FlagSet, p *int, name, usage string) {
	*p = 0
	f.Var(countValue{p}, name, usage)
}

// countValue is the pflag.Value of countVar.
type countValue struct{ p *int }

// String returns the flag's value in decimal.
func (c countValue) String() string {
	if c.p == nil {
		return "0"
	}
	return strconv.Itoa(*c.p)
}

// Type names the value in the usage text.
func (c countValue) Type() string { return "int" }

// Set parses s with parseCount.
func (c countValue) Set(s string) error {
	v, err := parseCount(s)
	if err != nil {
		return err
	}
	*c.p = v
	return nil
}

// parseCount parses an integer flag: an integer as Go writes it (56, 0x40,
// 1_000) or an integral number in decimal or scientific notation (1e5,
// 2.5e4, 100.0) that fits an int.
func parseCount(s string) (int, error) {
	s = strings.TrimSpace(s)
	v, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err == nil {
		return int(v), nil
	}
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("out of range: expected an integer in [%d, %d]", math.MinInt, math.MaxInt)
	}
	const want = "expected an integer such as 56 or 1e5"
	f, ferr := strconv.ParseFloat(s, 64)
	switch {
	case ferr != nil && !errors.Is(ferr, strconv.ErrRange), math.IsNaN(f):
		return 0, errors.New(want)
	case math.IsInf(f, 0) || f >= math.MaxInt || f < math.MinInt:
		return 0, fmt.Errorf("out of range: expected an integer in [%d, %d]", math.MinInt, math.MaxInt)
	case f != math.Trunc(f):
		return 0, fmt.Errorf("not a whole number: %s", want)
	}
	return int(f), nil
}

func (in *inputFlags) given() int {
	n := 0
	for _, s := range []string{in.model, in.graphFile, in.dtrLog, in.onnxFile} {
		if s != "" {
			n++
		}
	}
	return n
}

// modelOptions builds the zoo options from the flags and settings.
func (in *inputFlags) modelOptions(s *config.Settings) (models.Options, error) {
	o := models.Options{Batch: in.batch, Image: in.image, Seq: in.seq, Depth: in.depth, Width: in.width,
		Heads: in.heads, Vocab: in.vocab, Classes: in.classes, Optimizer: in.optimizer,
		InPlaceUpdate: s.Bool(config.InplaceUpdate)}
	if in.dtype != "" {
		dt, err := graph.ParseDType(in.dtype)
		if err != nil {
			return o, usageError{fmt.Errorf("--dtype: %w", err)}
		}
		o.DType = dt
	}
	return o, nil
}

// setFile selects a file given as an argument as the input, by its
// extension as readAny reads it (inputKind).
func (in *inputFlags) setFile(path string) {
	in.positional = true
	switch inputKind(path) {
	case kindONNX:
		in.onnxFile = path
	case kindLog:
		in.dtrLog = path
	default:
		in.graphFile = path
	}
}

// The kinds of input file inputKind tells apart.
const (
	kindGraph = iota // remat JSON graph
	kindLog          // DTR log
	kindONNX         // ONNX model
)

// inputKind is the kind of the file path by its extension, in any case,
// with a .gz after it ignored (every input is read decompressed when its
// content is gzip): .onnx an ONNX model, .log or .jsonl a DTR log,
// anything else a graph in remat's JSON format.
func inputKind(path string) int {
	path, _ = trimGz(strings.ToLower(path))
	switch {
	case strings.HasSuffix(path, ".onnx"):
		return kindONNX
	case strings.HasSuffix(path, ".log") || strings.HasSuffix(path, ".jsonl"):
		return kindLog
	}
	return kindGraph
}

// trimGz returns path without a final .gz (in any case) and whether it
// had one.
func trimGz(path string) (string, bool) {
	if n := len(path) - len(".gz"); n >= 0 && strings.EqualFold(path[n:], ".gz") {
		return path[:n], true
	}
	return path, false
}

// applicable rejects an input flag the selected input does not read, which
// would otherwise be ignored without a word: the zoo's shape flags apply to
// --model only; --batch, --seq and --optimizer to --model and --onnx;
// --frozen to --onnx; a graph file or DTR log takes none of them.
func (in *inputFlags) applicable() error {
	type flag struct {
		name  string
		set   bool
		model bool // read by --model
		onnx  bool // read by --onnx
	}
	flags := []flag{
		{"batch", in.batch != 0, true, true},
		{"seq", in.seq != 0, true, true},
		{"optimizer", in.optimizer != "", true, true},
		{"image", in.image != 0, true, false},
		{"depth", in.depth != 0, true, false},
		{"width", in.width != 0, true, false},
		{"heads", in.heads != 0, true, false},
		{"vocab", in.vocab != 0, true, false},
		{"classes", in.classes != 0, true, false},
		{"dtype", in.dtype != "", true, false},
		{"frozen", len(in.frozen) > 0, false, true},
	}
	var input string
	switch {
	case in.model != "":
		input = "--model"
	case in.onnxFile != "":
		input = "--onnx"
	case in.graphFile != "":
		input = "--graph"
	default:
		input = "--dtr-log"
	}
	for _, f := range flags {
		if !f.set || (input == "--model" && f.model) || (input == "--onnx" && f.onnx) {
			continue
		}
		var reads []string
		if f.model {
			reads = append(reads, "--model")
		}
		if f.onnx {
			reads = append(reads, "--onnx")
		}
		return usagef("--%s applies to %s, not to %s", f.name, strings.Join(reads, " and "), input)
	}
	return nil
}

// load reads the selected graph. Exactly one of --model, --graph, --dtr-log
// and --onnx must be given.
func (in *inputFlags) load(ctx context.Context, s *config.Settings) (*graph.Graph, error) {
	switch in.given() {
	case 0:
		return nil, usagef("give one input: --model NAME, --graph FILE, --dtr-log FILE or --onnx FILE")
	case 1:
	default:
		return nil, usagef("give only one of --model, --graph, --dtr-log and --onnx")
	}
	if err := in.applicable(); err != nil {
		return nil, err
	}
	switch {
	case in.model != "":
		o, err := in.modelOptions(s)
		if err != nil {
			return nil, err
		}
		g, err := models.Build(in.model, o)
		if err != nil {
			return nil, usageError{err}
		}
		return g, nil
	case in.graphFile != "":
		return readGraphFile(ctx, in.graphFile, in.positional)
	case in.dtrLog != "":
		return readLogFile(ctx, in.dtrLog, in.positional)
	default:
		return loadONNX(ctx, in.onnxFile, in, s)
	}
}

// settingsFlags exposes every setting as a flag of a command; a flag that is
// set overrides the environment (and shows as its source in 'sim env').
type settingsFlags struct {
	values map[string]*string
	cmd    *cobra.Command
}

func registerSettings(cmd *cobra.Command) *settingsFlags {
	sf := &settingsFlags{values: map[string]*string{}, cmd: cmd}
	for _, sp := range config.Specs() {
		if sp.Flag == "" || cmd.Flags().Lookup(sp.Flag) != nil {
			continue
		}
		v := new(string)
		sf.values[sp.Flag] = v
		cmd.Flags().StringVar(v, sp.Flag, "", fmt.Sprintf("setting %s (%s; default %s)", sp.Name, sp.Env, sp.Default))
		if sp.Type == config.TypeBool {
			// Like any boolean flag: given alone it means true (it
			// took the next argument as its value before); a value
			// goes after "=", as in --mirror=0.
			cmd.Flags().Lookup(sp.Flag).NoOptDefVal = "true"
		}
	}
	return sf
}

type envAdapter struct {
	lookup  func(string) (string, bool)
	environ func() []string
}

func (e envAdapter) Lookup(n string) (string, bool) { return e.lookup(n) }
func (e envAdapter) Names() []string {
	var out []string
	for _, kv := range e.environ() {
		if n, _, _ := strings.Cut(kv, "="); n != "" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// settings loads the environment's settings, reports warnings on stderr and
// applies the command's setting flags.
func (a *app) settings(sf *settingsFlags) (*config.Settings, error) {
	s, warns, err := config.Load(envAdapter{a.lookupEnv, a.environ})
	if err != nil {
		return nil, err
	}
	for _, w := range warns {
		fmt.Fprintln(a.stderr, "sim: warning:", w.Message)
	}
	if sf == nil {
		return s, nil
	}
	names := make([]string, 0, len(sf.values))
	for n := range sf.values {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !sf.cmd.Flags().Changed(n) {
			continue
		}
		s, err = s.With(n, *sf.values[n], config.FlagSource(n))
		if err != nil {
			return nil, usageError{fmt.Errorf("--%s: %w", n, err)}
		}
	}
	return s, nil
}

// device resolves --device: a built-in name, a JSON profile file, or
// none for an unlimited device (remat.Device).
func device(name string) (sim.Profile, error) {
	p, err := remat.Device(name)
	if err != nil && !strings.HasSuffix(name, ".json") {
		return p, usageError{fmt.Errorf("--device: %w", err)}
	}
	if err != nil {
		return p, fmt.Errorf("--device: %w", err)
	}
	return p, nil
}

// budgetSyntax is the --budget grammar, quoted in its errors.
const budgetSyntax = "expected a size with a unit such as 8GiB or 512MB, a ratio of the baseline peak in (0, 1] such as 0.5, or a percentage in (0, 100] such as 50%"

// parseBudget reads --budget. The grammar has no ambiguous form: a number
// with a unit is a size; a plain number with a decimal point is a ratio of
// the baseline peak and must lie in (0, 1]; a number followed by % is a
// percentage in (0, 100]. A bare integer is refused (a size needs its
// unit, a ratio its decimal point), as are NaN, infinities and zero.
func parseBudget(s string) (size int64, ratio float64, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, 0, nil
	}
	bad := func(why string) error {
		if why != "" {
			return usagef("--budget %q: %s; %s", s, why, budgetSyntax)
		}
		return usagef("--budget %q: %s", s, budgetSyntax)
	}
	if num, ok := strings.CutSuffix(s, "%"); ok {
		r, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || math.IsNaN(r) || r <= 0 || r > 100 {
			return 0, 0, bad("")
		}
		return 0, r / 100, nil
	}
	if r, err := strconv.ParseFloat(s, 64); err == nil {
		switch {
		case strings.Trim(s, "+0123456789") == "":
			return 0, 0, bad("a bare integer is neither a size (it needs a unit) nor a ratio (write 1.0 or 0.5)")
		case math.IsNaN(r) || math.IsInf(r, 0) || r <= 0:
			return 0, 0, bad("")
		case r > 1:
			return 0, 0, bad("a plain number is a ratio, and a size needs a unit")
		}
		return 0, r, nil
	}
	v, err := config.ParseSize(s)
	if err != nil {
		return 0, 0, bad(err.Error())
	}
	if v <= 0 {
		return 0, 0, bad("the size is zero")
	}
	return v, 0, nil
}

// progress returns a progress callback drawing a bar on stderr once the work
// has taken a second, only when stderr is a terminal and --quiet is off.
func (a *app) progress(what string) sim.Progress {
	f, ok := a.stderr.(*os.File)
	if a.quiet || !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	start := time.Now()
	var bar *progressbar.ProgressBar
	barMax := 0
	return func(done, total int, strategy string) {
		if bar == nil {
			if time.Since(start) < time.Second || done >= total {
				return
			}
			bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription(what),
				progressbar.OptionClearOnFinish(), progressbar.OptionShowCount())
			barMax = total
		}
		if total != barMax { // an estimated total made exact (a log sweep's portfolio)
			bar.ChangeMax(total)
			barMax = total
		}
		bar.Describe(fmt.Sprintf("%s %s", what, strategy))
		_ = bar.Set(done)
		if done >= total {
			_ = bar.Finish()
		}
	}
}

// readGraphFile reads the remat JSON graph file path, which must have ops,
// until ctx is done; byExtension as for misfiled.
func readGraphFile(ctx context.Context, path string, byExtension bool) (*graph.Graph, error) {
	g, err := graph.ReadFileContext(ctx, path)
	if err != nil {
		return nil, misfiled(err, path, false, byExtension) // err names the file
	}
	return g, nonEmpty(path, g)
}

// readLogFile reads the DTR log file path as a graph until ctx is done;
// byExtension as for misfiled.
func readLogFile(ctx context.Context, path string, byExtension bool) (*graph.Graph, error) {
	f, err := gzfile.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	g, err := dtrlog.ReadGraph(f)
	if err != nil {
		return nil, misfiled(fmt.Errorf("%s: %w", path, err), path, true, byExtension)
	}
	return g, nil
}

// misfiled adds a hint to err, the error reading the input file path as a
// DTR log (asLog) or a remat JSON graph, when the file's start shows the
// other kind: a DTR log (a first line with an "INSTRUCTION" key) or a remat
// JSON graph (a "remat.graph" format in its first 4 KiB). The hint names
// the flag to use, or for a file whose extension chose the kind
// (byExtension), the extension.
func misfiled(err error, path string, asLog, byExtension bool) error {
	f, ferr := gzfile.Open(context.Background(), path)
	if ferr != nil {
		return err
	}
	defer f.Close()
	var buf [4096]byte
	n, _ := io.ReadFull(f, buf[:])
	b := bytes.TrimLeft(buf[:n], " \t\r\n\ufeff")
	if len(b) == 0 || b[0] != '{' {
		return err
	}
	line := b
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		line = b[:i]
	}
	var kind, fix string
	switch {
	case !asLog && bytes.Contains(line, []byte(`"INSTRUCTION"`)):
		kind, fix = "a DTR log", "pass it with --dtr-log"
		if byExtension {
			fix = "name it .log or .jsonl"
		}
	case asLog && bytes.Contains(b, []byte(`"remat.graph"`)):
		kind, fix = "a remat JSON graph", "pass it with --graph"
		if byExtension {
			fix = "name it .json"
		}
	default:
		return err
	}
	return fmt.Errorf("%w (%s looks like %s: %s)", err, path, kind, fix)
}
