package dtrlog

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNumbered(t *testing.T) {
	for name, want := range map[string]int{"x0": 0, "x7": 7, "x5265": 5265, "x999999999": 999999999, "t12": 12, "X3": 3} {
		p, n, ok := numbered(name)
		assert.True(t, ok, name)
		assert.Equal(t, want, n, name)
		assert.Equal(t, name[0], p, name)
		p, n, ok = numbered([]byte(name))
		assert.True(t, ok, name)
		assert.Equal(t, want, n, name)
		assert.Equal(t, name[0], p, name)
	}
	for _, name := range []string{"", "x", "01", "x01", "x00", "x-1", "x+1", "x1a", "x1000000000", "_1", "x 1", "xx1", `\u00781`, "é1"} {
		_, _, ok := numbered(name)
		assert.False(t, ok, name)
	}
	// every accepted name is the canonical spelling of its number
	for i := 0; i < 100000; i++ {
		name := "x" + strconv.Itoa(i)
		_, n, ok := numbered(name)
		require.True(t, ok)
		require.Equal(t, i, n)
	}
	// a window takes the names of the letter of its first name
	var w window[int32]
	assert.True(t, w.holds('t'))
	w.set('t', 5, 1)
	assert.True(t, w.holds('t'))
	assert.False(t, w.holds('x'), "another letter's name is not the window's")
}

// TestNamesOfTwoLetters: "t1" and "x1" name different tensors, whichever
// letter a window took first.
func TestNamesOfTwoLetters(t *testing.T) {
	for _, first := range []string{"t", "x"} {
		other := map[string]string{"t": "x", "x": "t"}[first]
		src := startLine +
			`{"INSTRUCTION":"CONSTANT","NAME":"` + first + `1"}` + "\n" +
			`{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"` + first + `1"}` + "\n" +
			call(first+"1", other+"1", "5") + call(other+"1", first+"2", "6") +
			`{"INSTRUCTION":"RELEASE","NAME":"` + first + `1"}` + "\n"
		tr, err := Compile(strings.NewReader(src))
		require.NoError(t, err, first)
		require.Len(t, tr.Tensors, 3, first)
		names := []string{tr.Tensors[0].Name, tr.Tensors[1].Name, tr.Tensors[2].Name}
		assert.Equal(t, []string{first + "1", other + "1", first + "2"}, names)
		assert.Equal(t, []int32{0}, tr.Ops[1].Args, "%s1 reads %s1", other, first)
		assert.Equal(t, []int32{1}, tr.Ops[2].Args, "%s2 reads %s1, not %s1", first, other, first)
	}
}

func TestWindowStaysProportional(t *testing.T) {
	var w window[int32]
	require.True(t, w.fits(1_000_000))
	w.set('x', 1_000_000, 1)
	assert.False(t, w.fits(999_999), "below the base")
	assert.False(t, w.fits(1_000_000+windowSlack+2), "far past the names held")
	assert.True(t, w.fits(1_000_000+windowSlack-1))
	for i := 1; i < 5000; i++ {
		require.True(t, w.fits(1_000_000+i))
		w.set('x', 1_000_000+i, int32(i+1))
	}
	assert.LessOrEqual(t, len(w.vals), 2*5000+windowSlack)
	v, ok := w.get(1_004_999)
	assert.True(t, ok)
	assert.Equal(t, int32(5000), v)
	_, ok = w.get(1_005_000)
	assert.False(t, ok)
	_, ok = w.get(0)
	assert.False(t, ok)
}

// TestNamesOutsideTheWindow: logs whose names are not "x<n>", or are spread
// out, compile the same as with consecutive "x<n>" names.
func TestNamesOutsideTheWindow(t *testing.T) {
	rename := func(f func(i int) string) string {
		var b strings.Builder
		b.WriteString(startLine + `{"INSTRUCTION":"CONSTANT","NAME":"` + f(0) + `"}` + "\n" +
			`{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"` + f(0) + `"}` + "\n")
		for i := 1; i < 3000; i++ {
			b.WriteString(call(f(i-1), f(i), "5"))
			if i%3 == 0 {
				b.WriteString(`{"INSTRUCTION":"RELEASE","NAME":"` + f(i-2) + `"}` + "\n")
			}
		}
		return b.String()
	}
	want, err := Compile(strings.NewReader(rename(func(i int) string { return "x" + strconv.Itoa(i) })))
	require.NoError(t, err)
	for name, f := range map[string]func(i int) string{
		"other prefix":   func(i int) string { return "t" + strconv.Itoa(i) },
		"leading zeros":  func(i int) string { return "x0" + strconv.Itoa(i) },
		"spread out":     func(i int) string { return "x" + strconv.Itoa(i*100000) },
		"descending":     func(i int) string { return "x" + strconv.Itoa(100000-i) },
		"mixed":          func(i int) string { return []string{"x", "y", "x0"}[i%3] + strconv.Itoa(i) },
		"high then low":  func(i int) string { return "x" + strconv.Itoa((i%2)*900000000+i) },
		"escaped prefix": func(i int) string { return `\u0078` + strconv.Itoa(i) },
	} {
		got, err := Compile(strings.NewReader(rename(f)))
		require.NoError(t, err, name)
		require.Equal(t, len(want.Tensors), len(got.Tensors), name)
		for i := range got.Tensors {
			got.Tensors[i].Name = want.Tensors[i].Name
		}
		assert.Equal(t, want, got, name)
	}
}

// TestCompileKeepsNoScratch: the trace of a log does not change when the
// reader decodes later lines into the same scratch slices (a MEMORY line
// carrying ARGS and RESULT keys between a CALL and its ALIAS line).
func TestCompileKeepsNoScratch(t *testing.T) {
	log := startLine + constant +
		`{"ARGS":["x0","x0"],"INSTRUCTION":"CALL","NAME":"op","RESULT":["x1","x2"],"TIME":"5"}` + "\n" +
		`{"ARGS":["zz","zz","zz"],"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"x1","RESULT":["q","r","s"]}` + "\n" +
		`{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"x1","MUTATE":[7,8,9]}` + "\n" +
		`{"ARGS":["zz"],"INSTRUCTION":"MEMORY","MEMORY":"32","NAME":"x2","RESULT":["q"]}` + "\n" +
		`{"ALIAS":"1","INSTRUCTION":"ALIAS","NAME":"x2"}` + "\n" +
		`{"ARGS":["x1","x2"],"INSTRUCTION":"MUTATE","MUTATE":[1,0],"NAME":"add_","TIME":"3"}` + "\n"
	tr, err := Compile(strings.NewReader(log))
	require.NoError(t, err)
	ins, err := ReadAll(strings.NewReader(log))
	require.NoError(t, err)
	want, err := CompileInstrs(ins[1:])
	require.NoError(t, err)
	assert.Equal(t, want, tr)
	require.Len(t, tr.Ops, 3)
	assert.Equal(t, []int32{0, 0}, tr.Ops[1].Args)
	assert.Equal(t, []int64{64, 0}, tr.Ops[1].Sizes)
	assert.Equal(t, []int32{-1, 1}, tr.Ops[1].Aliases)
	assert.Equal(t, []int32{1, 2}, tr.Ops[2].Args)
	var names []string
	for _, r := range tr.Ops[2].Results {
		names = append(names, tr.Tensors[r].Name)
	}
	assert.Equal(t, []string{"x2$", "x1$"}, names)
}

// TestOpSlicesAreSeparate: appending to one op's slice leaves the others
// alone (they are cut from shared chunks with their capacity limited).
func TestOpSlicesAreSeparate(t *testing.T) {
	log := startLine + constant + call("x0", "x1", "5") + call("x1", "x2", "5")
	tr, err := Compile(bytes.NewReader([]byte(log)))
	require.NoError(t, err)
	for i := range tr.Ops {
		o := &tr.Ops[i]
		assert.Equal(t, len(o.Args), cap(o.Args))
		assert.Equal(t, len(o.Results), cap(o.Results))
		assert.Equal(t, len(o.Sizes), cap(o.Sizes))
		assert.Equal(t, len(o.Aliases), cap(o.Aliases))
		assert.Equal(t, o.Constant, o.Args == nil, "constants have no Args")
	}
	_ = append(tr.Ops[1].Args, 99)
	assert.Equal(t, []int32{1}, tr.Ops[2].Args)
}
