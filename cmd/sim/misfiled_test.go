package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMisfiledInput: a DTR log given as --graph, or a remat JSON graph as
// --dtr-log, or either under the other kind's extension to validate and
// convert, fails with the reader's error and a hint naming the right flag
// or extension; an input of the right kind that is broken gets no hint.
func TestMisfiledInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(data), 0o644))
		return p
	}
	const logLines = `{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}
{"INSTRUCTION":"CONSTANT","NAME":"x1"}
{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"x1"}
`
	graphJSON, err := os.ReadFile(filepath.Join("testdata", "chain4.json"))
	require.NoError(t, err)
	logAsJSON := write("trace.json", logLines)
	logAsLog := write("trace.log", logLines)
	graphAsLog := write("graph.log", string(graphJSON))
	graphAsJSON := write("graph.json", string(graphJSON))
	for _, c := range []struct {
		args []string
		hint string
	}{
		{[]string{"report", "--graph", logAsLog, "--device", "none"}, logAsLog + " looks like a DTR log: pass it with --dtr-log)"},
		{[]string{"report", "--dtr-log", graphAsJSON, "--device", "none"}, graphAsJSON + " looks like a remat JSON graph: pass it with --graph)"},
		{[]string{"sweep", "--dtr-log", graphAsJSON, "--strategies", "dtr"}, graphAsJSON + " looks like a remat JSON graph: pass it with --graph)"},
		{[]string{"validate", logAsJSON}, logAsJSON + " looks like a DTR log: name it .log or .jsonl)"},
		{[]string{"validate", graphAsLog}, graphAsLog + " looks like a remat JSON graph: name it .json)"},
		{[]string{"convert", graphAsLog, filepath.Join(dir, "out.json")}, "looks like a remat JSON graph: name it .json)"},
	} {
		_, stderr, code := run(t, nil, c.args...)
		assert.NotZero(t, code, "%v", c.args)
		assert.Contains(t, stderr, c.hint, "%v", c.args)
	}
	// a broken input of the kind given: the reader's error alone
	badLog := write("bad.log", `{"INSTRUCTION":"MEMORY","MEMORY":"1","NAME":"y"}`+"\n")
	_, stderr, code := run(t, nil, "report", "--dtr-log", badLog, "--device", "none")
	assert.NotZero(t, code)
	assert.Contains(t, stderr, "MEMORY line")
	assert.NotContains(t, stderr, "looks like")
	_, stderr, code = run(t, nil, "validate", filepath.Join("testdata", "bad.json"))
	assert.NotZero(t, code)
	assert.NotContains(t, stderr, "looks like")
	_, err = os.Stat(filepath.Join(dir, "out.json"))
	assert.True(t, os.IsNotExist(err), "a failed convert writes nothing")
}
