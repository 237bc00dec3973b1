package dtrlog

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const startLine = `{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}` + "\n"

func call(arg, res, time string) string {
	return `{"ARGS":["` + arg + `"],"INSTRUCTION":"CALL","NAME":"op","RESULT":["` + res + `"],"TIME":"` + time + `"}` + "\n" +
		`{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"` + res + `"}` + "\n" +
		`{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"` + res + `"}` + "\n"
}

const constant = `{"INSTRUCTION":"CONSTANT","NAME":"x0"}` + "\n" + `{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"x0"}` + "\n"

func TestRejectsLogsWithoutOps(t *testing.T) {
	for name, log := range map[string]string{
		"empty":       "",
		"blank lines": "\n\n  \n",
		"start only":  startLine,
		"constants":   startLine + constant,
	} {
		_, err := Compile(strings.NewReader(log))
		require.Error(t, err, name)
		assert.ErrorIs(t, err, ErrInvalid, name)
		assert.Contains(t, err.Error(), "no CALL", name)
	}
	_, err := Compile(strings.NewReader(startLine + constant + call("x0", "x1", "5")))
	assert.NoError(t, err)
}

func TestSumsAreChecked(t *testing.T) {
	big := "9223372036854775000"
	_, err := Compile(strings.NewReader(startLine + constant + call("x0", "x1", big)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "TIMEs add up past")
	half := "700000000000000000" // 7e17: two of them pass MaxTotal (2^60 ~ 1.15e18)
	_, err = Compile(strings.NewReader(startLine + constant + call("x0", "x1", half) + call("x1", "x2", half)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 7:", "the second CALL")
	mem := startLine + `{"INSTRUCTION":"CONSTANT","NAME":"a"}` + "\n" + `{"INSTRUCTION":"MEMORY","MEMORY":"9223372036854775807","NAME":"a"}` + "\n" + call("a", "b", "1")
	_, err = Compile(strings.NewReader(mem))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MEMORYs add up past")
}

func TestCompileInstrsRejectsNegatives(t *testing.T) {
	_, err := CompileInstrs([]Instr{{Kind: Constant, Name: "a"}, {Kind: Memory, Name: "a", Memory: -1}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MEMORY")
	_, err = CompileInstrs([]Instr{{Kind: Call, Name: "op", Time: -5}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "TIME")
	_, err = CompileInstrs(nil)
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestEncodings(t *testing.T) {
	log := startLine + constant + call("x0", "x1", "5")
	tr, err := Compile(strings.NewReader("\xef\xbb\xbf" + log))
	require.NoError(t, err, "a UTF-8 byte order mark is accepted")
	assert.Len(t, tr.Ops, 2)
	_, err = Compile(strings.NewReader("\xff\xfe{\x00"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "UTF-16")
	assert.True(t, errors.Is(err, ErrSyntax))
}

// failAfter reads r, then fails with err instead of io.EOF.
type failAfter struct {
	r   io.Reader
	err error
}

func (f *failAfter) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		err = f.err
	}
	return n, err
}

// TestReadErrorCutsALine: a read that fails in the middle of a line (a
// truncated compressed log) gives the read's error at that line, not a
// syntax error of the half line; one that fails between lines gives it at
// the next line.
func TestReadErrorCutsALine(t *testing.T) {
	errRead := errors.New("read failed")
	log := startLine + constant + call("x0", "x1", "5")
	half := log[:len(log)-10]
	_, err := Compile(&failAfter{strings.NewReader(half), errRead})
	require.ErrorIs(t, err, errRead)
	var le *LineError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, strings.Count(half, "\n")+1, le.Line, "%v", err)
	assert.NotContains(t, err.Error(), "unterminated")

	_, err = Compile(&failAfter{strings.NewReader(log), errRead})
	require.ErrorIs(t, err, errRead)
	require.ErrorAs(t, err, &le)
	assert.Equal(t, strings.Count(log, "\n")+1, le.Line, "%v", err)
}

func TestLongLineNamesTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a 64 MiB line")
	}
	line := `{"INSTRUCTION":"CONSTANT","NAME":"` + strings.Repeat("x", MaxLineBytes) + `"}`
	_, err := Compile(strings.NewReader(line))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "longer than 67108864 bytes")
}

// TestMisuseReturnsErrors: zero Readers and Writers and a nil trace give
// errors, not panics (issue 15).
func TestMisuseReturnsErrors(t *testing.T) {
	var r Reader
	_, err := r.Next()
	assert.ErrorIs(t, err, ErrNoReader)
	var nr *Reader
	_, err = nr.Next()
	assert.ErrorIs(t, err, ErrNoReader)
	_, err = NewReader(nil).Next()
	assert.Equal(t, io.EOF, err, "a nil io.Reader reads as an empty log")
	var w Writer
	assert.ErrorIs(t, w.Flush(), ErrNoWriter)
	assert.ErrorIs(t, w.Write(Instr{Kind: Release, Name: "x"}), ErrNoWriter)
	assert.ErrorIs(t, WriteAll(nil, nil), ErrNoWriter)
	_, err = ToGraph(nil)
	assert.Error(t, err)
}
