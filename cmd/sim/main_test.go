package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/remat-dev/remat/dtr"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/onnx"
)

var update = flag.Bool("update", false, "rewrite golden files")

// fixedEnv is the environment the golden runs see.
var fixedEnv = map[string]string{"HOME": "/home/user", "MXNET_EXEC_NUM_TEMP": "1"}

func run(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCtx(t, context.Background(), env, args...)
}

// runCtx is run with a context (a cancelled one stands for Ctrl-C).
func runCtx(t *testing.T, ctx context.Context, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	environ := func() []string {
		var kv []string
		for k, v := range env {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		return kv
	}
	code = Main(ctx, args, &out, &errb, lookup, environ)
	return out.String(), errb.String(), code
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file: run go test ./cmd/sim -update")
	assert.Equal(t, string(want), got)
}

var formats = []string{"table", "markdown", "csv", "json"}

// TestGolden runs every command in every format on small models.
func TestGolden(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"models", []string{"models"}},
		{"env", []string{"env", "--mirror=1"}},
		{"validate", []string{"validate", "testdata/chain4.json"}},
		{"report_chain", []string{"report", "--model", "chain", "--depth", "8", "--device", "none", "--budget", "0.5"}},
		{"report_resnet18", []string{"report", "--model", "resnet18", "--batch", "2", "--device", "t4"}},
		{"report_resnet50_b32_a100_baseline", []string{"report", "--model", "resnet50", "--batch", "32", "--device", "a100-40gb", "--strategies", "none"}},
		{"sweep_chain", []string{"sweep", "--model", "chain", "--depth", "8", "--device", "none", "--ratios", "1,0.6,0.4", "--strategies", "chen-greedy,sublinear-budget,optimal-chain,dtr"}},
		{"maxbatch_mlp", []string{"maxbatch", "--model", "mlp", "--device", "t4", "--budget", "64MiB", "--strategies", "none,mirror,sublinear-budget"}},
	}
	for _, c := range cases {
		for _, f := range formats {
			t.Run(c.name+"_"+f, func(t *testing.T) {
				out, errOut, code := run(t, fixedEnv, append(c.args, "--format", f)...)
				require.Equal(t, 0, code, "stderr: %s", errOut)
				golden(t, c.name+"."+f, out)
				if f == "json" {
					var v map[string]any
					require.NoError(t, json.Unmarshal([]byte(out), &v), out)
					assert.EqualValues(t, 1, v["version"], "every JSON document carries a version")
				}
			})
		}
	}
	// The plan is JSON in its own format.
	out, errOut, code := run(t, fixedEnv, "plan", "--model", "chain", "--depth", "8", "--device", "none", "--strategy", "chen-sqrt")
	require.Equal(t, 0, code, errOut)
	golden(t, "plan_chain.json", out)
}

func TestExitCodes(t *testing.T) {
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"report"}, exitUsage, "give one input"},
		{[]string{"report", "--model", "nosuch"}, exitUsage, "nosuch"},
		{[]string{"report", "--model", "chain", "--format", "xml"}, exitUsage, "--format"},
		{[]string{"report", "--model", "chain", "--bogus"}, exitUsage, "unknown flag"},
		{[]string{"nosuchcommand"}, exitUsage, "unknown command"},
		{[]string{"validate", "testdata/does-not-exist.json"}, exitError, "does-not-exist"},
		{[]string{"validate", "testdata/bad.json"}, exitError, "bad.json"},
		{[]string{"report", "--model", "chain", "--mirror=maybe"}, exitUsage, "--mirror"},
		{[]string{"report", "--model", "chain", "--depth", "8", "--device", "none", "--strategies", "none", "--fail-over", "1MiB"}, exitFailOver, "fail-over"},
	}
	// Sublinear planning and DTR cannot be enabled together.
	_, errOut, code := run(t, map[string]string{"MEGENGINE_ENABLE_DROP": "1"}, "plan", "--model", "chain", "--strategy", "sublinear")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "DTR")
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, errOut, code := run(t, fixedEnv, c.args...)
			assert.Equal(t, c.code, code, "stderr: %s", errOut)
			assert.Contains(t, errOut, c.msg)
			if c.code != exitFailOver {
				assert.Empty(t, out, "nothing on stdout on failure")
			}
			lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
			assert.True(t, strings.HasPrefix(lines[0], "sim: "), "cause first: %q", errOut)
			assert.Len(t, lines, 1, "one stderr line: %q", errOut)
		})
	}
}

// TestBinary builds the real binary and checks exit codes and the
// stdout/stderr split end to end.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "sim")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	cmd := exec.Command(bin, "report", "--model", "chain", "--depth", "8", "--device", "none", "--strategies", "none,chen-sqrt", "--format", "csv")
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	require.NoError(t, cmd.Run())
	assert.Empty(t, se.String(), "no progress or noise on stderr when it is not a terminal")
	assert.True(t, strings.HasPrefix(so.String(), "strategy,status,"), so.String())

	cmd = exec.Command(bin, "report", "--model", "nosuch")
	so.Reset()
	se.Reset()
	cmd.Stdout, cmd.Stderr = &so, &se
	err = cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, exitUsage, ee.ExitCode())
	assert.Empty(t, so.String())
	assert.Contains(t, se.String(), "nosuch")

	dir := t.TempDir()
	cmd = exec.Command(bin, "report", "--model", "chain", "--depth", "4", "--device", "none", "--strategies", "none", "--quiet")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MXNET_PROFILER_AUTOSTART=1")
	require.NoError(t, cmd.Run())
	b, err := os.ReadFile(filepath.Join(dir, "profile.json"))
	require.NoError(t, err, "MXNET_PROFILER_AUTOSTART=1 writes profile.json as MXNet does")
	var trace map[string]any
	require.NoError(t, json.Unmarshal(b, &trace))

	cmd = exec.Command(bin, "completion", "bash")
	so.Reset()
	cmd.Stdout = &so
	require.NoError(t, cmd.Run())
	assert.Contains(t, so.String(), "sim")
}

func TestPlotFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"m.svg", "m.png"} {
		p := filepath.Join(dir, name)
		_, errOut, code := run(t, fixedEnv, "report", "--model", "chain", "--depth", "8", "--device", "none", "--strategies", "none,chen-sqrt", "--plot", p)
		require.Equal(t, 0, code, errOut)
		st, err := os.Stat(p)
		require.NoError(t, err)
		assert.Greater(t, st.Size(), int64(1000))
	}
	out, errOut, code := run(t, fixedEnv, "report", "--model", "chain", "--device", "none", "--strategies", "none", "--plot", filepath.Join(dir, "m.gif"))
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, ".svg or .png")
	assert.Empty(t, out, "a bad plot name is refused before the report runs")
}

// Every committed ONNX model reports at batch 32 (issue acceptance:
// `sim report --onnx testdata/onnx/X.onnx --batch 32`).
func TestReportONNX(t *testing.T) {
	files, err := filepath.Glob("../../testdata/onnx/*.onnx")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			out, errOut, code := run(t, fixedEnv, "report", "--onnx", f, "--batch", "32", "--strategies", "none,mirror-cost,sublinear", "--format", "json")
			require.Equal(t, 0, code, errOut)
			var rep struct {
				Rows []struct {
					Status        string `json:"status"`
					PeakAllocated int64  `json:"peak_allocated"`
				} `json:"rows"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &rep))
			require.Len(t, rep.Rows, 3)
			for _, r := range rep.Rows {
				assert.Equal(t, "ok", r.Status)
				assert.Greater(t, r.PeakAllocated, int64(0))
			}
		})
	}
}

func TestConvertRoundTripAndDTRLogSweep(t *testing.T) {
	in, err := os.ReadFile("testdata/chain4.json")
	require.NoError(t, err)
	out, errOut, code := run(t, fixedEnv, "convert", "testdata/chain4.json", "-")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, string(in), out, "remat JSON converts to itself byte for byte")
	p := filepath.Join(t.TempDir(), "x.json")
	_, errOut, code = run(t, fixedEnv, "convert", "testdata/chain4.json", p)
	require.Equal(t, 0, code, errOut)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, in, b)
	_, errOut, code = run(t, fixedEnv, "convert", "testdata/chain4.json", filepath.Join(t.TempDir(), "x.txt"))
	assert.Equal(t, exitUsage, code, errOut)

	// A DTR log (graph/dtrlog's small hand-written one) converts and sweeps;
	// a malformed one is an error naming the line.
	_, errOut, code = run(t, fixedEnv, "validate", "../../graph/dtrlog/testdata/bad_negative.log")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "line")
	logs := []string{"../../graph/dtrlog/testdata/small.log"}
	_, errOut, code = run(t, fixedEnv, "convert", logs[0], "-")
	require.Equal(t, 0, code, errOut)
	// a log names no model: its summary names the file
	out, errOut, code = run(t, fixedEnv, "validate", logs[0], "--format", "csv")
	require.Equal(t, 0, code, errOut)
	assert.True(t, strings.HasPrefix(strings.Split(out, "\n")[1], "small,"), out)
	out, errOut, code = run(t, fixedEnv, "sweep", "--dtr-log", logs[0], "--strategies", "dtr", "--heuristic", "eq-class,lru", "--ratios", "1,0.5", "--format", "json")
	require.Equal(t, 0, code, errOut)
	var sw struct {
		Kind string `json:"kind"`
		Runs []struct {
			Heuristic string `json:"heuristic"`
			Results   []struct {
				Status string `json:"status"`
			} `json:"results"`
			Bound struct {
				Bytes int64 `json:"bytes"`
			} `json:"lower_bound"`
		} `json:"runs"`
		LowerBoundRatio float64 `json:"lower_bound_ratio"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &sw))
	assert.Equal(t, "dtr-sweep", sw.Kind)
	require.Len(t, sw.Runs, 2)
	assert.Len(t, sw.Runs[0].Results, 2)

	// every flag the log sweep reads (logSweepProtocol, logSweepIO) is accepted
	out, errOut, code = run(t, fixedEnv, "sweep", "--dtr-log", logs[0], "--strategies", "dtr", "--heuristic", "search", "--ratios", "1,0.6", "--format", "json", "--seed", "7", "-q", "--parity=false")
	require.Equal(t, 0, code, errOut)
	out, errOut, code = run(t, fixedEnv, "sweep", "--dtr-log", logs[0], "--strategies", "dtr", "--heuristic", "search", "--ratios", "1,0.6", "--format", "json")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &sw))
	require.Len(t, sw.Runs, 1)
	assert.Equal(t, "search", sw.Runs[0].Heuristic)
	assert.Equal(t, "ok", sw.Runs[0].Results[0].Status)
	// the search row carries the log's lower bound like a heuristic's
	assert.Positive(t, sw.Runs[0].Bound.Bytes)
	assert.Positive(t, sw.LowerBoundRatio)
	_, errOut, code = run(t, fixedEnv, "sweep", "--dtr-log", logs[0], "--strategies", "dtr", "--heuristic", "search", "--parity")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "parity")
	// "all" combines with the search (and with names it includes, listed
	// once): every heuristic's row, the search's, and the best-of
	out, errOut, code = run(t, fixedEnv, "sweep", "--dtr-log", logs[0], "--strategies", "dtr", "--heuristic", "lru,all,search", "--ratios", "1,0.6", "--format", "json")
	require.Equal(t, 0, code, errOut)
	var all struct {
		Runs []struct {
			Heuristic string `json:"heuristic"`
		} `json:"runs"`
		Best []struct {
			Winner string `json:"winner"`
		} `json:"best"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &all))
	var names []string
	for _, r := range all.Runs {
		names = append(names, r.Heuristic)
	}
	want := []string{}
	for _, h := range dtr.Heuristics {
		want = append(want, h.String())
	}
	assert.Equal(t, append(want, "search"), names)
	assert.Len(t, all.Best, 2)
	_, errOut, code = run(t, fixedEnv, "sweep", "--dtr-log", logs[0], "--strategies", "dtr", "--heuristic", "all,bogus")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, `"bogus"`)
	assert.Contains(t, errOut, "'all'")
	assert.Contains(t, errOut, "'search'")
}

// TestConvertONNXArgumentTakesFlags: `sim convert M.onnx OUT` reads the
// model with the input flags (--batch, --optimizer, --frozen) as `sim
// convert --onnx M.onnx OUT` does; it used to import batch 1 with SGD
// whatever they said.
func TestConvertONNXArgumentTakesFlags(t *testing.T) {
	const m = "../../testdata/onnx/resnet18.onnx"
	flags := []string{"--batch", "3", "--optimizer", "adam", "--frozen", "fc.*"}
	byArg, errOut, code := run(t, fixedEnv, append([]string{"convert", m, "-"}, flags...)...)
	require.Equal(t, 0, code, errOut)
	byFlag, errOut, code := run(t, fixedEnv, append([]string{"convert", "--onnx", m, "-"}, flags...)...)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, byFlag, byArg)
	g, err := graph.Decode(strings.NewReader(byArg))
	require.NoError(t, err)
	for i := range g.Tensors {
		if g.Tensors[i].Kind == graph.Input && g.Tensors[i].Name == "input" {
			assert.Equal(t, int64(3), g.Tensors[i].Shape[0], "the batch")
		}
	}
	updates := 0
	for i := range g.Ops {
		if g.Ops[i].Type == graph.OpAdamUpdate {
			updates++
		}
	}
	assert.Equal(t, 60, updates, "resnet18's 62 parameters but the frozen fc.weight and fc.bias")
}

// TestConvertToDTRLog: a zoo model or a graph file converts to a DTR log
// (op times from the device's cost model) that sweeps, and the log
// converts back to a graph with the same ops.
func TestConvertToDTRLog(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "chain.log")
	_, errOut, code := run(t, fixedEnv, "convert", "--model", "chain", "--depth", "6", p)
	require.Equal(t, 0, code, errOut)
	first, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Contains(t, string(first), `"INSTRUCTION":"CALL"`)
	require.Contains(t, string(first), `"INSTRUCTION":"RELEASE"`)
	out, errOut, code := run(t, fixedEnv, "sweep", "--dtr-log", p, "--strategies", "dtr", "--heuristic", "eq-class", "--parity", "--ratios", "1,0.5", "--format", "json")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"kind": "dtr-sweep"`)

	// the same graph from a file gives the same log; back to a graph, the
	// log has the chain's 13 ops
	g := filepath.Join(dir, "chain.json")
	_, errOut, code = run(t, fixedEnv, "convert", "--model", "chain", "--depth", "6", g)
	require.Equal(t, 0, code, errOut)
	p2 := filepath.Join(dir, "again.jsonl")
	_, errOut, code = run(t, fixedEnv, "convert", g, p2)
	require.Equal(t, 0, code, errOut)
	again, err := os.ReadFile(p2)
	require.NoError(t, err)
	assert.Equal(t, string(first), string(again))
	out, errOut, code = run(t, fixedEnv, "validate", p2, "--format", "json")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"ops": 13`)

	// op times follow --device (the chain's are fixed; an MLP's are not)
	var logs [2]string
	for i, dev := range []string{"a100-40gb", "t4"} {
		p := filepath.Join(dir, dev+".log")
		_, errOut, code = run(t, fixedEnv, "convert", "--model", "mlp", "--depth", "1", "--width", "16", "--batch", "2", "--device", dev, p)
		require.Equal(t, 0, code, errOut)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		logs[i] = string(b)
	}
	assert.NotEqual(t, logs[0], logs[1])

	// input given twice, unknown device
	_, errOut, code = run(t, fixedEnv, "convert", g, "--model", "chain", p)
	assert.Equal(t, exitUsage, code, errOut)
	_, errOut, code = run(t, fixedEnv, "convert", "--model", "chain", "--device", "nope", p)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, "nope")
}

// writeConvModel writes a one-convolution ONNX model (Conv with weight and
// bias, then Flatten) to dir/name and returns its path; batch < 0 makes
// the batch axis symbolic, else it is that size.
func writeConvModel(t *testing.T, dir, name, weight, bias string, batch int64) string {
	t.Helper()
	et := int32(onnx.TensorProto_FLOAT)
	// vi declares a float tensor; a negative size is the symbolic batch
	vi := func(name string, ds ...int64) *onnx.ValueInfoProto {
		var sd []*onnx.TensorShapeProto_Dimension
		for _, d := range ds {
			if d < 0 {
				sd = append(sd, &onnx.TensorShapeProto_Dimension{Value: &onnx.TensorShapeProto_Dimension_DimParam{DimParam: "N"}})
			} else {
				sd = append(sd, &onnx.TensorShapeProto_Dimension{Value: &onnx.TensorShapeProto_Dimension_DimValue{DimValue: d}})
			}
		}
		tp := &onnx.TypeProto{Value: &onnx.TypeProto_TensorType{TensorType: &onnx.TypeProto_Tensor{ElemType: &et, Shape: &onnx.TensorShapeProto{Dim: sd}}}}
		return &onnx.ValueInfoProto{Name: proto.String(name), Type: tp}
	}
	opset := int64(14)
	m := &onnx.ModelProto{OpsetImport: []*onnx.OperatorSetIdProto{{Domain: proto.String(""), Version: &opset}},
		Graph: &onnx.GraphProto{Name: proto.String("conv"),
			Node: []*onnx.NodeProto{
				{OpType: proto.String("Conv"), Name: proto.String("/conv"), Input: []string{"x", weight, bias}, Output: []string{"c"}},
				{OpType: proto.String("Flatten"), Name: proto.String("/flat"), Input: []string{"c"}, Output: []string{"y"}},
			},
			Input:  []*onnx.ValueInfoProto{vi("x", batch, 3, 4, 4), vi(weight, 4, 3, 3, 3), vi(bias, 4)},
			Output: []*onnx.ValueInfoProto{{Name: proto.String("y")}}}}
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return p
}

// TestWarnsOnInferenceExport: an ONNX file whose convolution weights are
// named as torch.onnx names the constants it folds batch norms into
// (onnx::Conv_<n>) gets a warning on stderr that the training step lacks
// the batch norms and dropouts; the committed training exports get none.
func TestWarnsOnInferenceExport(t *testing.T) {
	p := writeConvModel(t, t.TempDir(), "eval.onnx", "onnx::Conv_5", "onnx::Conv_6", -1)
	for _, args := range [][]string{
		{"report", "--onnx", p, "--batch", "2", "--strategies", "none"},
		{"validate", p},
	} {
		_, errOut, code := run(t, fixedEnv, args...)
		require.Equal(t, 0, code, errOut)
		assert.Contains(t, errOut, "sim: warning: "+p+": 1 convolution has a weight named onnx::Conv_*", args)
		assert.Contains(t, errOut, "training=torch.onnx.TrainingMode.TRAINING")
	}
	_, errOut, code := run(t, fixedEnv, "report", "--onnx", "../../testdata/onnx/resnet18.onnx", "--batch", "2", "--strategies", "none")
	require.Equal(t, 0, code, errOut)
	assert.Empty(t, errOut)
}

// TestMaxBatchONNX: maxbatch varies an ONNX model's batch axis. The batch
// it reports fits the budget by `sim report --onnx --batch B` and the next
// one does not; its batch-8 probe warns about an inference export once,
// not per probe; a model without a dynamic batch axis is an error that
// says so, since every batch would import the same graph.
func TestMaxBatchONNX(t *testing.T) {
	const m = "../../testdata/onnx/resnet18.onnx"
	out, errOut, code := run(t, fixedEnv, "maxbatch", "--onnx", m, "--device", "none", "--budget", "2GiB", "--strategies", "none,chen-greedy", "--format", "json")
	require.Equal(t, 0, code, errOut)
	var rep struct {
		Model string `json:"model"`
		Rows  []struct {
			Strategy string `json:"strategy"`
			MaxBatch int    `json:"max_batch"`
		} `json:"rows"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.Equal(t, m, rep.Model)
	require.Len(t, rep.Rows, 2)
	assert.Greater(t, rep.Rows[1].MaxBatch, rep.Rows[0].MaxBatch, "checkpointing fits a larger batch")
	for _, r := range rep.Rows {
		require.Positive(t, r.MaxBatch, r.Strategy)
		fits := func(b int) bool {
			out, errOut, code := run(t, fixedEnv, "report", "--onnx", m, "--batch", strconv.Itoa(b), "--device", "none", "--budget", "2GiB",
				"--strategies", r.Strategy, "--format", "json")
			require.Equal(t, 0, code, errOut)
			var doc struct {
				Rows []struct {
					Strategy   string `json:"strategy"`
					Status     string `json:"status"`
					FitsBudget bool   `json:"fits_budget"`
				} `json:"rows"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &doc))
			for _, row := range doc.Rows { // the report also has the baseline's row
				if row.Strategy == r.Strategy {
					return row.Status == "ok" && row.FitsBudget
				}
			}
			t.Fatalf("no row of %s", r.Strategy)
			return false
		}
		assert.True(t, fits(r.MaxBatch), "%s: batch %d fits", r.Strategy, r.MaxBatch)
		assert.False(t, fits(r.MaxBatch+1), "%s: batch %d does not", r.Strategy, r.MaxBatch+1)
	}

	dir := t.TempDir()
	eval := writeConvModel(t, dir, "eval.onnx", "onnx::Conv_5", "onnx::Conv_6", -1)
	_, errOut, code = run(t, fixedEnv, "maxbatch", "--onnx", eval, "--device", "none", "--budget", "1MiB", "--strategies", "none")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, 1, strings.Count(errOut, "sim: warning:"), errOut)

	fixed := writeConvModel(t, dir, "fixed.onnx", "conv.weight", "conv.bias", 2)
	_, errOut, code = run(t, fixedEnv, "maxbatch", "--onnx", fixed, "--device", "none", "--budget", "1MiB", "--strategies", "none")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "no dynamic batch axis")

	_, errOut, code = run(t, fixedEnv, "maxbatch", "--graph", "testdata/chain4.json", "--device", "none", "--budget", "1MiB")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "maxbatch needs --model or --onnx")
}

// TestPlanWarnsOfStaleReads: a plan whose recomputes read a storage an
// in-place op wrote since their first run (the dtr strategy's on a traced
// step: gradients rematerialized during the optimizer's in-place updates)
// is written, with a warning that PyTorch would compute them from other
// data; a plan without such reads gets none.
func TestPlanWarnsOfStaleReads(t *testing.T) {
	step := filepath.Join("..", "..", "chain", "testdata", "traced_squeezenet1_0.json")
	out, errs, code := run(t, fixedEnv, "plan", "--graph", step, "--strategy", "dtr", "--budget", "0.8", "--device", "cpu", "--allocator", "ideal")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, `"format": "remat.plan"`)
	assert.Regexp(t, `sim: warning: dtr: [1-9][0-9]* recomputes read a storage that an in-place op wrote since their first run`, errs)
	assert.Regexp(t, `written by op #[0-9]+ "add_#[0-9]+"\)`, errs, "the optimizer's in-place update")
	_, errs, code = run(t, fixedEnv, "plan", "--graph", step, "--strategy", "chen-greedy", "--device", "cpu", "--allocator", "ideal")
	require.Equal(t, 0, code, errs)
	assert.NotContains(t, errs, "in-place op wrote")
}
