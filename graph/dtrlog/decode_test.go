package dtrlog

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// jsonNum and jsonLine are the encoding/json decoding of a line that the
// hand-rolled decoder replaced; FuzzDecodeMatchesJSON checks that both agree.
type jsonNum struct {
	v   int64
	set bool
}

func (n *jsonNum) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return err
		}
		n.v, n.set = v, true
		return nil
	}
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return err
	}
	n.v, n.set = v, true
	return nil
}

type jsonLine struct {
	Instruction *string   `json:"INSTRUCTION"`
	Name        *string   `json:"NAME"`
	Memory      jsonNum   `json:"MEMORY"`
	Args        []string  `json:"ARGS"`
	Result      []string  `json:"RESULT"`
	Time        jsonNum   `json:"TIME"`
	Alias       jsonNum   `json:"ALIAS"`
	Dst         *string   `json:"DST"`
	Src         *string   `json:"SRC"`
	Mutate      []jsonNum `json:"MUTATE"`
	Annotation  *string   `json:"ANNOTATION"`
}

func strOf(p *string) strField {
	if p == nil {
		return strField{}
	}
	return strField{v: *p, set: true}
}

// viaJSON decodes b with encoding/json into a rawLine.
func viaJSON(b []byte) (rawLine, error) {
	var j jsonLine
	if err := json.Unmarshal(b, &j); err != nil {
		return rawLine{}, err
	}
	r := rawLine{
		Instruction: strOf(j.Instruction), Name: strOf(j.Name), Dst: strOf(j.Dst), Src: strOf(j.Src), Annotation: strOf(j.Annotation),
		Memory: num(j.Memory), Time: num(j.Time), Alias: num(j.Alias),
		Args: j.Args, ArgsSet: j.Args != nil, Result: j.Result, ResultSet: j.Result != nil, MutateSet: j.Mutate != nil,
	}
	if j.Mutate != nil {
		r.Mutate = make([]num, len(j.Mutate))
		for i, m := range j.Mutate {
			r.Mutate[i] = num(m)
		}
	}
	return r, nil
}

func checkDecodeMatchesJSON(t *testing.T, b []byte) {
	want, errJ := viaJSON(b)
	var got rawLine
	d := decoder{intern: map[string]string{}}
	errD := d.decodeLine(b, &got)
	if errJ != nil {
		require.Error(t, errD, "encoding/json rejects %q (%v)", b, errJ)
		require.ErrorIs(t, errD, ErrSyntax)
		return
	}
	require.NoError(t, errD, "encoding/json accepts %q", b)
	// encoding/json keeps empty slices empty, not nil: compare lengths
	for _, p := range [][2]*[]string{{&want.Args, &got.Args}, {&want.Result, &got.Result}} {
		if len(*p[0]) == 0 && len(*p[1]) == 0 {
			*p[0], *p[1] = nil, nil
		}
	}
	if len(want.Mutate) == 0 && len(got.Mutate) == 0 {
		want.Mutate, got.Mutate = nil, nil
	}
	require.Equal(t, want, got, "line %q", b)
}

func TestDecodeMatchesJSON(t *testing.T) {
	for _, line := range []string{
		`{"INSTRUCTION":"CALL","NAME":"op","ARGS":["a","b"],"RESULT":["c"],"TIME":"12"}`,
		`{"instruction":"MEMORY","name":"x","memory":7}`,
		`{"INSTRUCTION":"MUTATE","NAME":"add_","ARGS":["a"],"MUTATE":[0,"0",null],"TIME":"1"}`,
		`{"INSTRUCTION":"ALIAS","NAME":"x","ALIAS":"-1","EXTRA":{"a":[1,2,{"b":null}],"c":true}}`,
		`{"NAME":"a","NAME":null,"TIME":"5","TIME":null}`,
		`{"NAME":"\u00e9\ud83d\ude00\ud800x\n\"\\\/"}`,
		"{\"NAME\":\"\xff\xfe\"}",
		`{"ARGS":[null,"a"],"RESULT":[]}`,
		`{"TIME":"000000000000000000000001","MEMORY":"+5","ALIAS":-0}`,
		`null`,
		` { } `,
		`{"TIME":"9223372036854775807","MEMORY":"-9223372036854775808"}`,
		// keys like the known ones (the decoder matches `"NAME":` directly)
		`{"NAME" : "a", "ARG":1, "ARGSX":[1], "MEMORYY":"x", "A":1, "M":2, "ALIASES":3, "INSTRUCTIONS":"CALL", "MUTATEX":[[]]}`,
		`{"NAM":1,"N":2,"":3,"I":4,"AN":5,"AL":6,"AR":7,"MU":8,"ME":9,"DSTX":[],"SRC\u0000":0,"TIMe":"5","Result":["a"]}`,
		`{"NAME":"a","NAME\"":"b","NA\u004dE":"c"}`,
		// rejected
		`{"TIME":"9223372036854775808"}`, `{"TIME":1.5}`, `{"TIME":1e3}`, `{"TIME":"0x10"}`, `{"TIME":true}`,
		`{"NAME":1}`, `{"ARGS":"a"}`, `{"ARGS":[1]}`, `{"MUTATE":[[0]]}`, `[]`, `"x"`, `{`, `{"a":01}`, `{"a":.5}`,
		`{"a":-}`, `{"a":1.}`, `{"a" 1}`, `{"a":1,}`, `{"a":1}x`, `{"a":nul}`, "{\"a\":\"\x01\"}", `{"a":"\x"}`, `{"a":"\u12"}`,
	} {
		checkDecodeMatchesJSON(t, []byte(line))
	}
}

func TestDecodeErrorsNameFieldValueAndExpectation(t *testing.T) {
	for line, want := range map[string][]string{
		`{"INSTRUCTION":"MEMORY","NAME":"x","MEMORY":"12a"}`:     {"MEMORY", `"12a"`, "expected a decimal integer"},
		`{"INSTRUCTION":"CALL","NAME":"op","TIME":[1]}`:          {"TIME", "an array", "expected an integer"},
		`{"INSTRUCTION":"CALL","NAME":"op","ARGS":["a",2]}`:      {"ARGS[1]", "a number", "expected a string"},
		`{"INSTRUCTION":"MUTATE","NAME":"op","MUTATE":["zero"]}`: {"MUTATE[0]", `"zero"`, "expected a decimal integer"},
		`{"INSTRUCTION":5}`:       {"INSTRUCTION", "a number", "expected a string"},
		`{"INSTRUCTION":"CALL",}`: {"column 23", "expected a key"},
	} {
		_, err := Compile(bytes.NewReader([]byte(line + "\n")))
		require.Error(t, err, line)
		assert.ErrorIs(t, err, ErrSyntax, line)
		assert.Contains(t, err.Error(), "line 1:", line)
		for _, w := range want {
			assert.Contains(t, err.Error(), w, line)
		}
	}
}

func FuzzDecodeMatchesJSON(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.log"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, l := range bytes.Split(b, []byte{'\n'}) {
			f.Add(l)
		}
	}
	f.Add([]byte(`{"INSTRUCTION":"MUTATE","NAME":"add_","ARGS":["a"],"MUTATE":[0],"TIME":"1","X":{"y":[null,true,1e-3]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecodeMatchesJSON(t, b)
		// parsing never panics and fails with ErrSyntax
		if _, err := ParseLine(b); err != nil {
			require.ErrorIs(t, err, ErrSyntax)
		}
	})
}
