package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// badInputs writes the bad input files into dir and returns their paths by
// name.
func badInputs(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{
		"empty.json":      "",
		"text.json":       "not json at all",
		"array.json":      "[1, 2, 3]",
		"negsize.json":    `{"format":"remat.graph","version":1,"tensors":[{"id":0,"kind":"activation","bytes":-4,"producer":0}],"ops":[{"id":0,"type":"x","phase":"forward","outputs":[0]}]}`,
		"dangling.json":   `{"format":"remat.graph","version":1,"tensors":[],"ops":[{"id":0,"type":"x","phase":"forward","inputs":[7]}]}`,
		"hugetime.json":   `{"format":"remat.graph","version":1,"tensors":[{"id":0,"kind":"activation","bytes":4,"producer":0},{"id":1,"kind":"activation","bytes":4,"producer":1}],"ops":[{"id":0,"type":"x","phase":"forward","outputs":[0],"time_ns":9223372036854775807},{"id":1,"type":"x","phase":"forward","inputs":[0],"outputs":[1],"time_ns":9223372036854775807}]}`,
		"utf16.json":      "\xff\xfe{\x00}\x00",
		"noops.json":      `{"format":"remat.graph","version":1,"tensors":[],"ops":[]}`,
		"empty.log":       "",
		"nocall.log":      `{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}` + "\n" + `{"INSTRUCTION":"CONSTANT","NAME":"x1"}` + "\n" + `{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"x1"}` + "\n",
		"negmem.log":      `{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}` + "\n" + `{"INSTRUCTION":"CONSTANT","NAME":"x1"}` + "\n" + `{"INSTRUCTION":"MEMORY","MEMORY":"-64","NAME":"x1"}` + "\n",
		"bigtime.log":     bigTimeLog(),
		"garbage.onnx":    "\x08\x07garbage that is not a protobuf model \xff\xff\xff",
		"tinyflops.json":  `{"name":"slow","capacity_bytes":17179869184,"peak_flops":{"f32":1e-300},"memory_bandwidth":9e11,"host_bandwidth":1.2e10,"launch_overhead_ns":5000}`,
		"negcap.json":     `{"name":"neg","capacity_bytes":-1,"peak_flops":{"f32":1e13},"memory_bandwidth":9e11,"host_bandwidth":1.2e10}`,
		"hugelaunch.json": `{"name":"launch","capacity_bytes":17179869184,"peak_flops":{"f32":1e13},"memory_bandwidth":9e11,"host_bandwidth":1.2e10,"launch_overhead_ns":9223372036854775807}`,
	}
	out := map[string]string{}
	for name, body := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		out[name] = p
	}
	return out
}

// bigTimeLog is a DTR log whose op TIMEs sum past 2^63.
func bigTimeLog() string {
	var b strings.Builder
	b.WriteString(`{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}` + "\n")
	b.WriteString(`{"INSTRUCTION":"CONSTANT","NAME":"x0"}` + "\n" + `{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"x0"}` + "\n")
	for i := 1; i <= 3; i++ {
		prev, cur := "x"+string(rune('0'+i-1)), "x"+string(rune('0'+i))
		b.WriteString(`{"ARGS":["` + prev + `"],"INSTRUCTION":"CALL","NAME":"op","RESULT":["` + cur + `"],"TIME":"9223372036854775000"}` + "\n")
		b.WriteString(`{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"` + cur + `"}` + "\n")
		b.WriteString(`{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"` + cur + `"}` + "\n")
	}
	return b.String()
}

// TestBadInputs gives sim about seventy bad inputs across its commands.
// Each must be handled: exit 1 (bad input) or 2 (usage), one stderr line
// naming the problem, nothing on stdout, no panic, no new file.
func TestBadInputs(t *testing.T) {
	dir := t.TempDir()
	in := badInputs(t, dir)
	out := filepath.Join(dir, "out")
	require.NoError(t, os.Mkdir(out, 0o755))
	m := []string{"--model", "chain", "--depth", "8", "--device", "none"}
	with := func(cmd string, extra ...string) []string {
		return append(append([]string{cmd}, m...), extra...)
	}
	cases := []struct {
		name string
		args []string
		want string // a word the error must contain
	}{
		{"validate missing file", []string{"validate", filepath.Join(dir, "nope.json")}, "nope.json"},
		{"validate a directory", []string{"validate", dir}, "directory"},
		{"validate empty", []string{"validate", in["empty.json"]}, "empty.json"},
		{"validate no ops", []string{"validate", in["noops.json"]}, "no ops"},
		{"report no ops", []string{"report", "--graph", in["noops.json"]}, "no ops"},
		{"plan no ops", []string{"plan", "--graph", in["noops.json"], "--strategy", "none"}, "no ops"},
		{"validate text", []string{"validate", in["text.json"]}, "text.json"},
		{"validate array", []string{"validate", in["array.json"]}, "array.json"},
		{"validate negative size", []string{"validate", in["negsize.json"]}, "bytes"},
		{"validate dangling input", []string{"validate", in["dangling.json"]}, "7"},
		{"validate utf16", []string{"validate", in["utf16.json"]}, "UTF-16"},
		{"validate empty log", []string{"validate", in["empty.log"]}, "empty.log"},
		{"validate log without calls", []string{"validate", in["nocall.log"]}, "CALL"},
		{"validate negative memory", []string{"validate", in["negmem.log"]}, "MEMORY"},
		{"validate garbage onnx", []string{"validate", in["garbage.onnx"]}, "garbage.onnx"},
		{"validate no args", []string{"validate"}, "arg"},
		{"validate two args", []string{"validate", "a", "b"}, "arg"},
		{"convert bad out ext", []string{"convert", in["negsize.json"], filepath.Join(out, "g.txt")}, ".json"},
		{"convert out dir missing", []string{"convert", "testdata/chain4.json", filepath.Join(dir, "missing", "g.json")}, "does not exist"},
		{"convert in missing", []string{"convert", filepath.Join(dir, "nope.json"), filepath.Join(out, "g.json")}, "nope.json"},
		{"convert out is a dir", []string{"convert", "testdata/chain4.json", out}, "out"},
		{"report unknown model", []string{"report", "--model", "nope"}, "nope"},
		{"batch of a graph file", []string{"report", "--graph", "testdata/chain4.json", "--batch", "4"}, "--batch applies to --model and --onnx, not to --graph"},
		{"image of an onnx model", []string{"report", "--onnx", "../../testdata/onnx/resnet18.onnx", "--image", "64"}, "--image applies to --model, not to --onnx"},
		{"frozen of a zoo model", []string{"report", "--model", "resnet18", "--frozen", "fc.*"}, "--frozen applies to --onnx, not to --model"},
		{"optimizer of a dtr log", []string{"sweep", "--dtr-log", in["nocall.log"], "--optimizer", "adam"}, "--optimizer applies to --model and --onnx, not to --dtr-log"},
		{"convert seq of a graph file", []string{"convert", "testdata/chain4.json", "--seq", "8", filepath.Join(out, "g.json")}, "--seq applies to --model and --onnx, not to --graph"},
		{"frozen matches nothing", []string{"report", "--onnx", "../../testdata/onnx/resnet18.onnx", "--frozen", "nosuch.*"}, `frozen pattern "nosuch.*" matches no weight`},
		{"frozen malformed", []string{"report", "--onnx", "../../testdata/onnx/resnet18.onnx", "--frozen", "[x"}, "syntax error in pattern"},
		{"report negative batch", []string{"report", "--model", "resnet18", "--batch", "-1"}, "Batch=-1"},
		{"report depth not an int", []string{"report", "--model", "chain", "--depth", "eight"}, `invalid argument "eight" for "--depth" flag: expected an integer`},
		{"report depth not whole", []string{"report", "--model", "chain", "--depth", "1.25e1"}, `"--depth" flag: not a whole number`},
		{"report depth past int64", []string{"report", "--model", "chain", "--depth", "1e19"}, `"--depth" flag: out of range`},
		{"report chain depth 1e8 written so", []string{"report", "--model", "chain", "--depth", "1e8", "--device", "none"}, "Depth=100000000 gives a graph of about"},
		{"report mlp depth 1e8", []string{"report", "--model", "mlp", "--depth", "100000000", "--device", "none"}, "more than the limit"},
		{"report chain depth 1e8", []string{"report", "--model", "chain", "--depth", "100000000", "--device", "none"}, "more than the limit"},
		{"report lstm seq 1e7", []string{"report", "--model", "lstm", "--seq", "10000000", "--device", "none"}, "more than the limit"},
		{"report gpt seq 1e8", []string{"report", "--model", "gpt", "--seq", "100000000", "--device", "none"}, "bytes"},
		{"report mlp width 2e9", []string{"report", "--model", "mlp", "--width", "2000000000", "--device", "none"}, "overflows"},
		{"report huge time graph", []string{"report", "--graph", in["hugetime.json"], "--device", "none", "--strategies", "none"}, "time_ns"},
		{"report budget 1", with("report", "--budget", "1"), "--budget"},
		{"report budget 1.5", with("report", "--budget", "1.5"), "--budget"},
		{"report budget nan%", with("report", "--budget", "nan%"), "--budget"},
		{"report budget tiny ratio", with("report", "--budget", "1e-300"), "below one byte"},
		{"report budget negative", with("report", "--budget", "-5GiB"), "--budget"},
		{"report budget zero", with("report", "--budget", "0GiB"), "--budget"},
		{"report strategies comma", with("report", "--strategies", ","), "empty"},
		{"report strategies twice", with("report", "--strategies", "none,none"), "twice"},
		{"report strategies unknown", with("report", "--strategies", "bogus"), "bogus"},
		{"report unknown device", []string{"report", "--model", "chain", "--device", "nope"}, "nope"},
		{"report device file missing", []string{"report", "--model", "chain", "--device", filepath.Join(dir, "gpu.json")}, "gpu.json"},
		{"report device tiny flops", []string{"report", "--model", "chain", "--device", in["tinyflops.json"]}, "peak_flops"},
		{"report device negative capacity", []string{"report", "--model", "chain", "--device", in["negcap.json"]}, "capacity_bytes"},
		{"report device huge launch", []string{"report", "--model", "chain", "--device", in["hugelaunch.json"]}, "launch_overhead_ns"},
		{"report allocator", with("report", "--allocator", "buddy"), "buddy"},
		{"report format", with("report", "--format", "yaml"), "yaml"},
		{"report plot ext", with("report", "--plot", filepath.Join(out, "m.gif")), ".svg"},
		{"report trace dir", with("report", "--trace", out), "directory"},
		{"report mirror maybe", with("report", "--mirror=maybe"), "--mirror"},
		{"report two inputs", []string{"report", "--model", "chain", "--graph", "testdata/chain4.json"}, "only one"},
		{"report no input", []string{"report"}, "--model"},
		{"report dtype", with("report", "--dtype", "f8"), "--dtype"},
		{"report optimizer", with("report", "--optimizer", "lion"), "optimizer"},
		{"report fail-over", with("report", "--fail-over", "abc"), "--fail-over"},
		{"report pick", with("report", "--strategies", "none,chen-sqrt", "--pick", "dtr"), "--pick"},
		{"report unknown flag", with("report", "--nope"), "nope"},
		{"report env bad value", with("report", "--strategies", "none"), ""}, // replaced below by env case
		{"report empty log", []string{"report", "--dtr-log", in["empty.log"], "--device", "none"}, "empty.log"},
		{"report log without calls", []string{"report", "--dtr-log", in["nocall.log"], "--device", "none"}, "CALL"},
		{"report log time overflow", []string{"report", "--dtr-log", in["bigtime.log"], "--device", "none"}, "TIME"},
		{"sweep ratio 1.5", with("sweep", "--ratios", "1.5"), "--ratios"},
		{"sweep ratio twice", with("sweep", "--ratios", "0.5,0.5"), "twice"},
		{"sweep budgets bare", with("sweep", "--budgets", "1"), "--budgets"},
		{"sweep ratios and budgets", with("sweep", "--ratios", "0.5", "--budgets", "1GiB"), "not both"},
		{"sweep budget flag", with("sweep", "--budget", "0.5"), "--ratios"},
		{"sweep empty log", []string{"sweep", "--dtr-log", in["empty.log"], "--strategies", "dtr"}, "empty.log"},
		{"sweep log heuristic", []string{"sweep", "--dtr-log", in["nocall.log"], "--strategies", "dtr", "--heuristic", "bogus"}, "bogus"},
		{"sweep log time overflow", []string{"sweep", "--dtr-log", in["bigtime.log"], "--strategies", "dtr"}, "TIME"},
		{"sweep log dtr-heuristic", []string{"sweep", "--dtr-log", in["nocall.log"], "--strategies", "dtr", "--dtr-heuristic", "lru"}, "--heuristic"},
		// a log sweep reads no device, budget, setting or model size: each
		// ignored silently would answer another question
		{"sweep log device", []string{"sweep", "--dtr-log", in["nocall.log"], "--strategies", "dtr", "--device", "a100-40gb"}, "--device: a --dtr-log sweep"},
		{"sweep log budget and settings", []string{"sweep", "--dtr-log", in["nocall.log"], "--strategies", "dtr", "--dtr-threshold", "0.5", "--budget", "0.5", "--dtr-evictee-min-size", "2MiB"}, "--budget, --dtr-evictee-min-size, --dtr-threshold: a --dtr-log sweep"},
		{"sweep log batch", []string{"sweep", "--dtr-log", in["nocall.log"], "--strategies", "dtr", "--batch", "4"}, "--batch: a --dtr-log sweep"},
		{"sweep log heuristic with other strategies", []string{"sweep", "--dtr-log", in["nocall.log"], "--strategies", "dtr,none", "--heuristic", "lru"}, "--heuristic applies to the DTR paper's protocol"},
		{"sweep log parity with other strategies", []string{"sweep", "--dtr-log", in["nocall.log"], "--strategies", "none", "--parity"}, "--parity applies to the DTR paper's protocol"},
		{"sweep log budgets", []string{"sweep", "--dtr-log", in["nocall.log"], "--strategies", "dtr", "--budgets", "1GiB"}, "--budgets: a --dtr-log sweep"},
		{"sweep graph heuristic", with("sweep", "--strategies", "dtr", "--heuristic", "lru"), "--dtr-heuristic"},
		{"sweep log dtr-budget-scope", []string{"sweep", "--dtr-log", in["nocall.log"], "--strategies", "dtr", "--dtr-budget-scope", "saved"}, "a log has no passes"},
		{"report dtr-budget-scope", with("report", "--strategies", "dtr", "--dtr-budget-scope", "activations"), "activations"},
		{"report dtr-heuristic", with("report", "--strategies", "dtr", "--dtr-heuristic", "bogus"), "bogus"},
		{"maxbatch no model", []string{"maxbatch", "--graph", "testdata/chain4.json"}, "--model"},
		{"maxbatch batch given", []string{"maxbatch", "--model", "chain", "--batch", "4"}, "--batch"},
		{"maxbatch ratio budget", []string{"maxbatch", "--model", "chain", "--budget", "0.5"}, "ratio"},
		{"maxbatch unlimited device", []string{"maxbatch", "--model", "chain", "--device", "none"}, "capacity"},
		{"plan no strategy", with("plan"), "--strategy"},
		{"plan unknown strategy", with("plan", "--strategy", "bogus"), "bogus"},
		{"plan strategies flag", with("plan", "--strategies", "none"), "strategies"},
		{"plan out dir missing", with("plan", "--strategy", "none", "--out", filepath.Join(dir, "missing", "p.json")), "does not exist"},
		{"env bad flag value", []string{"env", "--mirror=maybe"}, "--mirror"},
		{"env format", []string{"env", "--format", "yaml"}, "yaml"},
		{"env bad model", []string{"env", "--model", "nope"}, "nope"},
	}
	for _, c := range cases {
		if c.name == "report env bad value" {
			c.name = "report env MXNET_EXEC_NUM_TEMP=-1"
		}
		t.Run(c.name, func(t *testing.T) {
			env := fixedEnv
			if c.name == "report env MXNET_EXEC_NUM_TEMP=-1" {
				env = map[string]string{"MXNET_EXEC_NUM_TEMP": "-1"}
			}
			before := dirEntries(t, out)
			var stdout, stderr string
			var code int
			require.NotPanics(t, func() { stdout, stderr, code = run(t, env, c.args...) })
			assert.Contains(t, []int{exitError, exitUsage}, code, "exit code; stderr: %s", stderr)
			assert.Empty(t, stdout, "nothing on stdout")
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			assert.Len(t, lines, 1, "one stderr line: %q", stderr)
			assert.True(t, strings.HasPrefix(stderr, "sim: "), stderr)
			assert.Contains(t, stderr, c.want)
			assert.Equal(t, before, dirEntries(t, out), "no new file")
		})
	}
}
