package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dirEntries lists the names in dir.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestOutputPathsCheckedBeforeWork(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "old.svg")
	require.NoError(t, os.WriteFile(existing, []byte("keep"), 0o644))
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"plot extension", []string{"report", "--model", "chain", "--device", "none", "--plot", filepath.Join(dir, "m.gif")}, ".svg or .png"},
		{"plot dir missing", []string{"report", "--model", "chain", "--device", "none", "--plot", filepath.Join(dir, "nope", "m.svg")}, "does not exist"},
		{"trace is a dir", []string{"report", "--model", "chain", "--device", "none", "--trace", dir}, "is a directory"},
		{"out dir missing", []string{"plan", "--model", "chain", "--device", "none", "--strategy", "none", "--out", filepath.Join(dir, "nope", "p.json")}, filepath.Join(dir, "nope")},
		{"convert out ext", []string{"convert", "x.onnx", filepath.Join(dir, "g.txt")}, "ending in .json"},
		{"usage error keeps an existing plot", []string{"report", "--model", "chain", "--device", "none", "--budget", "2", "--plot", existing}, "--budget"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := run(t, fixedEnv, c.args...)
			assert.Equal(t, exitUsage, code, errOut)
			assert.Contains(t, errOut, c.want)
			assert.Empty(t, out)
			assert.ElementsMatch(t, []string{"old.svg"}, dirEntries(t, dir), "no new or temporary file")
		})
	}
	b, err := os.ReadFile(existing)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(b))
}

func TestOutputFilesModeSymlinkAndFIFO(t *testing.T) {
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	_, errOut, code := run(t, fixedEnv, "plan", "--model", "chain", "--depth", "4", "--device", "none", "--strategy", "chen-sqrt", "--out", plan)
	require.Equal(t, 0, code, errOut)
	st, err := os.Stat(plan)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(fileMode), st.Mode().Perm(), "one file mode for every output")

	// A symlink is followed: its target is replaced, the link stays.
	target := filepath.Join(dir, "target.json")
	require.NoError(t, os.WriteFile(target, []byte("old"), 0o644))
	link := filepath.Join(dir, "link.json")
	require.NoError(t, os.Symlink(target, link))
	_, errOut, code = run(t, fixedEnv, "convert", "testdata/chain4.json", link)
	require.Equal(t, 0, code, errOut)
	lst, err := os.Lstat(link)
	require.NoError(t, err)
	assert.NotZero(t, lst.Mode()&os.ModeSymlink, "the link is kept")
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"ops"`)

	// A FIFO is written to, not replaced.
	fifo := filepath.Join(dir, "fifo.json")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	got := make(chan []byte)
	go func() {
		b, _ := os.ReadFile(fifo)
		got <- b
	}()
	_, errOut, code = run(t, fixedEnv, "plan", "--model", "chain", "--depth", "4", "--device", "none", "--strategy", "none", "--out", fifo)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, string(<-got), "remat.plan")
	fst, err := os.Lstat(fifo)
	require.NoError(t, err)
	assert.NotZero(t, fst.Mode()&os.ModeNamedPipe, "the FIFO is still a FIFO")
	for _, n := range dirEntries(t, dir) {
		assert.NotContains(t, n, ".tmp", "no temporary file left")
	}
}

// An interrupted run exits 130, prints no result and writes no file.
func TestInterruptedRunWritesNothing(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, args := range [][]string{
		{"report", "--model", "chain", "--device", "none", "--plot", filepath.Join(dir, "m.svg")},
		{"plan", "--model", "chain", "--device", "none", "--strategy", "chen-sqrt", "--out", filepath.Join(dir, "p.json")},
		{"plan", "--model", "chain", "--device", "none", "--strategy", "none"},
		{"sweep", "--model", "chain", "--device", "none", "--ratios", "1,0.5", "--plot", filepath.Join(dir, "s.svg")},
		{"maxbatch", "--model", "chain", "--device", "v100-16gb", "--strategies", "none"},
		{"convert", "testdata/chain4.json", filepath.Join(dir, "c.json")},
		{"convert", "--model", "resnet32", filepath.Join(dir, "c.log.gz")},
		{"validate", "testdata/chain4.json"},
		{"report", "--graph", "testdata/chain4.json", "--device", "none"},
		{"validate", filepath.Join("..", "..", "testdata", "onnx", "resnet18.onnx")},
	} {
		out, errOut, code := runCtx(t, ctx, fixedEnv, args...)
		assert.Equal(t, exitInterrupted, code, "%v: %s", args, errOut)
		assert.Empty(t, out, "%v", args)
		assert.Equal(t, "sim: interrupted\n", errOut, "%v", args)
	}
	assert.Empty(t, dirEntries(t, dir))
}

// render writes a file output into a temporary file beside it; commit
// renames it, and an interrupted commit, discard or a failed render leaves
// nothing behind.
func TestRenderStreamsToTempFile(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	a, err := render("--plot", filepath.Join(dir, "a.svg"), write("A"))
	require.NoError(t, err)
	require.NotEmpty(t, a.tmp, "a file output is rendered on disk, not in memory")
	assert.Nil(t, a.data)
	b, err := render("--trace", filepath.Join(dir, "b.json"), write("B"))
	require.NoError(t, err)
	assert.Len(t, dirEntries(t, dir), 2, "two temporary files")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, commit(ctx, a, b))
	assert.Empty(t, dirEntries(t, dir), "an interrupted commit removes the temporary files")

	a, err = render("--plot", filepath.Join(dir, "a.svg"), write("A"))
	require.NoError(t, err)
	discard([]output{a})
	assert.Empty(t, dirEntries(t, dir), "discard removes what commit did not rename")

	_, err = render("--plot", filepath.Join(dir, "a.svg"), func(w io.Writer) error {
		_, _ = io.WriteString(w, strings.Repeat("x", 1<<20))
		return errors.New("encoder failed")
	})
	require.ErrorContains(t, err, "encoder failed")
	assert.Empty(t, dirEntries(t, dir), "a failed render leaves no temporary file")

	a, err = render("--plot", filepath.Join(dir, "a.svg"), write("A"))
	require.NoError(t, err)
	require.NoError(t, commit(context.Background(), a))
	discard([]output{a}) // after commit: nothing to remove, nothing removed
	assert.Equal(t, []string{"a.svg"}, dirEntries(t, dir))
	got, err := os.ReadFile(filepath.Join(dir, "a.svg"))
	require.NoError(t, err)
	assert.Equal(t, "A", string(got))

	s, err := render("--out", "-", write("S"))
	require.NoError(t, err)
	assert.Empty(t, s.tmp)
	assert.Equal(t, "S", string(s.data), "standard output is rendered into memory")
}
