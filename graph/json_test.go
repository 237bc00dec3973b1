package graph

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files")

// exampleGraph is the small graph documented in docs/format.md and stored as
// testdata/example.json: a one-layer classifier with a backward pass and an
// SGD update.
func exampleGraph(t testing.TB) *Graph {
	t.Helper()
	b := NewBuilder("tiny-mlp")
	b.SetAttr("batch_size", "2")
	x := b.Input("x", F32, 2, 4)
	y := b.Input("label", I64, 2)
	w := b.Parameter("fc.weight", F32, 3, 4)
	fc := b.Op("linear", "fc", x, w).Out("logits", F32, 2, 3).FLOPs(2*2*4*3).Attr(AttrCudnnTune, "fastest")
	drop := b.Op("dropout", "drop", fc.T()).Out("dropped", F32, 2, 3).OutKind("drop.mask", Activation, U8, 2, 3).
		Flags(NonDeterministic).Attr(AttrRNGSaved, "1")
	flat := b.Op("reshape", "flatten", drop.T()).Out("flat", F32, 6).Alias(drop.T())
	loss := b.Op("cross_entropy", "loss", flat.T(), y).Out("loss", F32).TimeNs(1500).Attr(AttrSublinearEndpoint, "1").T()
	b.SetLoss(loss)
	b.SetPhase(Backward)
	dl := b.Op("cross_entropy_grad", "loss.grad", flat.T(), y).Out("flat.grad", F32, 6).Forward(OpID(3))
	dd := b.Op("dropout_grad", "drop.grad", dl.T(), drop.Output(1)).Out("logits.grad", F32, 2, 3).Forward(drop.ID())
	dw := b.Op("linear_grad_weight", "fc.grad", dd.T(), x).OutKind("fc.weight.grad", ParamGradient, F32, 3, 4).
		FLOPs(2 * 2 * 4 * 3).Workspace(1024).Forward(fc.ID())
	b.SetPhase(Update)
	b.Op("sgd", "fc.weight.update", w, dw.T()).Out("fc.weight'", F32, 3, 4).Flags(InPlace).Alias(w).BytesAccessed(144)
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// fullGraph exercises every dtype, kind, phase and flag, aliases, attributes,
// explicit bytes without a shape, scalars (nil and empty shapes), empty
// non-nil slices and maps, escaped and non-ASCII strings, and extreme costs.
func fullGraph(t testing.TB) *Graph {
	t.Helper()
	b := NewBuilder("full \"graph\"\n\twith escapes \u00e9\u4e2d\x01")
	b.SetAttr("batch", "32")
	b.SetAttr("", "empty key")
	b.SetAttr("unicode", "\u2028 π")
	x := b.Input("x", F32, 4, 8)
	lbl := b.Input("label", I64, 4)
	w := b.Parameter("w", BF16, 8, 8)
	b.Constant("mask", Bool, 8)
	mom := b.NewTensor("w.momentum", OptimizerState, F64, 8, 8)
	b.Constant("lut", U8, 256)
	b.Constant("q", I8, 16)
	b.Constant("idx", I32, 3)
	half := b.Constant("h", F16) // scalar, nil shape
	fc := b.Op("linear", "fc1", x, w).Out("h1", F32, 4, 8).
		FLOPs(MaxQuantity).BytesAccessed(1).TimeNs(2).Workspace(3).
		Attr(AttrCudnnTune, "limited_workspace").Attr(AttrForceMirroring, "1")
	drop := b.Op("dropout", "drop", fc.T(), half).Out("d", F32, 4, 8).OutKind("drop.mask", Activation, U8, 4, 8).
		Flags(NonDeterministic).Attr(AttrRNGSaved, "1")
	view := b.Op("reshape", "flat", drop.Output(0)).Out("flat", F32, 32).Alias(drop.Output(0))
	tr := b.Op("custom", "traced", view.T()).OutBytes("blob", 12345).Attr(AttrNoStatsOnRecompute, "1")
	loss := b.Op("cross_entropy", "loss", tr.T(), lbl).Out("loss", F32).Attr(AttrSublinearEndpoint, "1").T()
	b.SetLoss(loss)
	b.SetPhase(Backward)
	seed := b.Op("fill", "loss.grad").Out("loss.grad", F32)
	gw := b.Op("linear_grad", "fc1.grad", x, seed.T()).OutKind("w.grad", ParamGradient, BF16, 8, 8).
		Forward(fc.ID()).Flags(Impure)
	b.SetPhase(Update)
	b.Op("sgd_momentum", "w.update", w, gw.T(), mom).Out("w'", BF16, 8, 8).Alias(w).Flags(InPlace | Impure)
	g, err := b.Build()
	require.NoError(t, err)
	// Go values that only a hand-built graph has: empty non-nil slices and
	// maps, an empty (non-nil) scalar shape, bytes that disagree with shape.
	g.Ops[seed.ID()].Inputs = []TensorID{}
	g.Ops[seed.ID()].Attrs = map[string]string{}
	g.Tensors[loss].Shape = Shape{}
	g.Tensors[x].Bytes = 4 * 8 * 4 * 2 // e.g. a padded allocation
	require.NoError(t, g.Validate())
	return g
}

func validated(t testing.TB, g *Graph) *Graph {
	t.Helper()
	require.NoError(t, g.Validate())
	return g
}

func encode(t testing.TB, g *Graph) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, Encode(&buf, g))
	return buf.Bytes()
}

func decodeString(s string) (*Graph, error) { return Decode(strings.NewReader(s)) }

func TestRoundTrip(t *testing.T) {
	for name, g := range map[string]*Graph{"example": exampleGraph(t), "full": fullGraph(t), "empty": validated(t, &Graph{Loss: NoTensor})} {
		t.Run(name, func(t *testing.T) {
			data := encode(t, g)
			g2, err := Decode(bytes.NewReader(data))
			require.NoError(t, err)
			require.Equal(t, g, g2, "Decode(Encode(g)) must equal g field by field")
			require.Equal(t, string(data), string(encode(t, g2)), "Encode(Decode(file)) must be byte-identical")
		})
	}
}

func TestRoundTripFullCoversEverything(t *testing.T) {
	g := fullGraph(t)
	dtypes, kinds, phases := map[DType]bool{}, map[TensorKind]bool{}, map[Phase]bool{}
	var flags OpFlags
	aliases, shapeless := 0, 0
	for i := range g.Tensors {
		tn := &g.Tensors[i]
		dtypes[tn.DType] = true
		kinds[tn.Kind] = true
		if tn.AliasOf != NoTensor {
			aliases++
		}
		if tn.DType == 0 && tn.Shape == nil && tn.Bytes > 0 {
			shapeless++
		}
	}
	for i := range g.Ops {
		phases[g.Ops[i].Phase] = true
		flags |= g.Ops[i].Flags
	}
	for d := F32; d <= Bool; d++ {
		assert.True(t, dtypes[d], "dtype %s not covered", d)
	}
	for k := Activation; k <= Constant; k++ {
		assert.True(t, kinds[k], "kind %s not covered", k)
	}
	for p := Forward; p <= Update; p++ {
		assert.True(t, phases[p], "phase %s not covered", p)
	}
	assert.Equal(t, NonDeterministic|InPlace|Impure, flags)
	assert.Equal(t, 2, aliases)
	assert.Equal(t, 1, shapeless)
}

func TestGoldenExample(t *testing.T) {
	path := filepath.Join("testdata", "example.json")
	data := encode(t, exampleGraph(t))
	if *update {
		require.NoError(t, os.WriteFile(path, data, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(data), "run go test ./graph -update to rewrite %s", path)
}

// TestDocExample checks that the complete example in docs/format.md is
// exactly testdata/example.json, and that it decodes.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "format.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- example:begin -->\n```json\n(.*?)```\n<!-- example:end -->").FindSubmatch(doc)
	require.NotNil(t, m, "docs/format.md must hold the example between <!-- example:begin --> and <!-- example:end -->")
	want, err := os.ReadFile(filepath.Join("testdata", "example.json"))
	require.NoError(t, err)
	require.Equal(t, string(want), string(m[1]), "docs/format.md example is stale: copy testdata/example.json into it")
	g, err := Decode(bytes.NewReader(m[1]))
	require.NoError(t, err)
	assert.Equal(t, exampleGraph(t), g)
}

func TestFileRoundTrip(t *testing.T) {
	g := fullGraph(t)
	path := filepath.Join(t.TempDir(), "g.json")
	require.NoError(t, WriteFile(path, g))
	g2, err := ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, g, g2)

	_, err = ReadFile(filepath.Join(t.TempDir(), "missing.json"))
	require.Error(t, err)
	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"format": "remat.graph", "version": 9}`), 0o644))
	_, err = ReadFile(bad)
	require.ErrorIs(t, err, ErrUnsupportedFormat)
	assert.Contains(t, err.Error(), "bad.json")
	require.Error(t, WriteFile(filepath.Join(t.TempDir(), "no", "such", "dir.json"), g))
}

// A hand-written file: other key order, extra whitespace, explicit nulls,
// omitted bytes (derived from shape and dtype), an escaped key.
const handWritten = `{ "format" : "remat.graph", "version": 1,
  "ops": [ {"type": "relu", "phase": "forward", "id": 0, "inputs": [0], "outputs": [1], "forward": null, "flags": [], "attrs": null,
            "name": null, "flops": null, "bytes_accessed": null, "time_ns": null, "workspace": null} ],
  "name": null,
  "loss": null,
  "tensors": [
    {"kind": "input", "id": 0, "dtype": "f16", "shape": [3, 5], "producer": null, "alias_of": null},
    {"id": 1, "kind": "activation", "producer": 0, "dtype": "f16", "shape": [3, 5], "n\u0061me": "y", "bytes": null},
    {"id": 2, "name": null, "dtype": null, "bytes": 7, "kind": "input"}
  ]
}`

func TestDecodeHandWritten(t *testing.T) {
	g, err := decodeString(handWritten)
	require.NoError(t, err)
	assert.Equal(t, int64(30), g.Tensors[0].Bytes, "bytes derived from shape and dtype")
	assert.Equal(t, "y", g.Tensors[1].Name)
	assert.Equal(t, int64(30), g.Tensors[1].Bytes, "bytes: null is derived too")
	assert.Equal(t, Tensor{ID: 2, Bytes: 7, Kind: Input, Producer: NoOp, AliasOf: NoTensor}, g.Tensors[2])
	assert.Equal(t, NoTensor, g.Loss)
	assert.Equal(t, NoOp, g.Ops[0].Forward)
	assert.Nil(t, g.Ops[0].Attrs)
	assert.Equal(t, []OpID{0}, g.Consumers(0), "consumer index built")
	e1 := encode(t, g)
	g2, err := Decode(bytes.NewReader(e1))
	require.NoError(t, err)
	require.Equal(t, g, g2)
	require.Equal(t, string(e1), string(encode(t, g2)))
}

func TestDecodeValidationErrorPath(t *testing.T) {
	// A chain of 13 ops whose last op reads an undefined tensor.
	b := NewBuilder("chain")
	x := b.Input("x", F32, 4)
	for i := 0; i < 13; i++ {
		x = b.Op("add", "add"+string(rune('a'+i)), x, x).Out("t", F32, 4).T()
	}
	g, err := b.Build()
	require.NoError(t, err)
	data := encode(t, g)
	s := strings.Replace(string(data), `"inputs": [12, 12]`, `"inputs": [12, 99]`, 1)
	require.NotEqual(t, string(data), s)
	_, err = decodeString(s)
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "ops[12].inputs[1]", ve.Path)
	assert.Equal(t, OpID(12), ve.Op)
	assert.Contains(t, err.Error(), `ops[12].inputs[1]: op #12 "addm" (add): input tensor 99 is not defined`)
	assert.ErrorIs(t, err, ErrInvalid)
}

const hdr = `{"format": "remat.graph", "version": 1, `

func TestDecodeErrors(t *testing.T) {
	cases := []struct {
		name, in    string
		path, msg   string
		at          string // the error offset is where this substring starts in the input ("$": the end; "": not checked)
		line        int
		unsupported bool
	}{
		{"empty", "", "", "empty input", "", 1, false},
		{"not an object", "[1]", "", "expected a graph object, got array", "[1]", 1, false},
		{"syntax", "{\"format\": \"remat.graph\",\n \"version\": 1,\n \"tensors\": [{\"id\": 0,, }]}", "tensors[0]", "syntax error: invalid character ','", ", }", 3, false},
		{"syntax in token", "{\"format\" \"remat.graph\"}", "format", "syntax error: expected colon", `"remat.graph"`, 1, false},
		{"truncated", hdr + `"tensors": [{"id": 0, "kind": "input"}`, "tensors", "unexpected end of input", "$", 1, false},
		{"truncated value", hdr + `"tensors": [{"id": 0, "kind": "inp`, "tensors[0]", "unexpected end of input", "$", 0, false},
		{"trailing data", `{"format": "remat.graph", "version": 1} {}`, "", "unexpected object after the graph object", "{}", 1, false},
		{"format not first", `{"version": 1, "format": "remat.graph"}`, "version", `first key is "version", expected "format"`, `"version"`, 1, false},
		{"version not second", `{"format": "remat.graph", "name": "x", "version": 1}`, "name", `second key is "name", expected "version"`, `"name"`, 1, false},
		{"wrong format", `{"format": "onnx", "version": 1}`, "format", `format "onnx", expected "remat.graph"`, `"onnx"`, 1, true},
		{"wrong version", `{"format": "remat.graph", "version": 2}`, "version", "version 2, this build reads version 1", "2}", 1, true},
		{"version string", `{"format": "remat.graph", "version": "1"}`, "version", "expected an integer, got a string", `"1"`, 1, false},
		{"version float", `{"format": "remat.graph", "version": 1.0}`, "version", "expected an integer, got 1.0", "1.0", 1, false},
		{"missing version", `{"format": "remat.graph"}`, "", `missing required key "version"`, "", 1, false},
		{"duplicate format", hdr + `"format": "remat.graph"}`, "format", `duplicate field "format"`, "", 1, false},
		{"unknown top field", hdr + `"nodes": []}`, "nodes", `unknown field "nodes" at the top level`, `"nodes"`, 1, false},
		{"duplicate name", hdr + `"name": "a", "name": "b"}`, "name", `duplicate field "name"`, `"name": "b"`, 1, false},
		{"name type", hdr + `"name": 5}`, "name", "expected a string, got a number", "5}", 1, false},
		{"attrs type", hdr + `"attrs": {"a": 1}}`, "attrs.a", "expected a string, got a number", "1}}", 1, false},
		{"attrs duplicate", hdr + `"attrs": {"a": "1", "a": "2"}}`, "attrs.a", `duplicate attribute "a"`, "", 1, false},
		{"loss negative", hdr + `"loss": -1}`, "loss", "tensor id -1, expected null or 0..2147483647", "-1", 1, false},
		{"tensors type", hdr + `"tensors": {}}`, "tensors", "expected an array, got object", "{}}", 1, false},
		{"tensor not object", hdr + `"tensors": [3]}`, "tensors[0]", "expected a tensor object, got a number", "3]", 1, false},
		{"unknown tensor field", hdr + "\"tensors\": [\n  {\"id\": 0, \"kind\": \"input\", \"size\": 4}]}", "tensors[0].size", `unknown field "size", expected one of id, name, dtype`, `"size"`, 2, false},
		{"unknown op field", hdr + `"ops": [{"id": 0, "type": "a", "phase": "forward", "cost": 1}]}`, "ops[0].cost", `unknown field "cost"`, `"cost"`, 1, false},
		{"tensor id mismatch", hdr + `"tensors": [{"id": 3, "kind": "input"}]}`, "tensors[0].id", "id is 3, expected the element's index 0", `"id": 3`, 1, false},
		{"op id mismatch", hdr + `"ops": [{"id": 1, "type": "a", "phase": "forward"}]}`, "ops[0].id", "id is 1, expected the element's index 0", `"id": 1`, 1, false},
		{"id string", hdr + `"tensors": [{"id": "0", "kind": "input"}]}`, "tensors[0].id", "expected an integer, got a string", `"0"`, 1, false},
		{"missing kind", hdr + `"tensors": [{"id": 0}]}`, "tensors[0]", `missing required field "kind"`, `{"id": 0}`, 1, false},
		{"missing id", hdr + `"tensors": [{"kind": "input"}]}`, "tensors[0]", `missing required field "id"`, "", 1, false},
		{"missing phase", hdr + `"ops": [{"id": 0, "type": "a"}]}`, "ops[0]", `missing required field "phase"`, "", 1, false},
		{"missing type", hdr + `"ops": [{"id": 0, "phase": "forward"}]}`, "ops[0]", `missing required field "type"`, "", 1, false},
		{"duplicate tensor field", hdr + `"tensors": [{"id": 0, "kind": "input", "kind": "input"}]}`, "tensors[0].kind", `duplicate field "kind"`, "", 1, false},
		{"bad dtype", hdr + `"tensors": [{"id": 0, "kind": "input", "dtype": "float32"}]}`, "tensors[0].dtype", `dtype "float32", expected one of f32, f16, bf16, f64, i64, i32, i8, u8, bool`, `"float32"`, 1, false},
		{"bad kind", hdr + `"tensors": [{"id": 0, "kind": "weight"}]}`, "tensors[0].kind", `kind "weight", expected one of activation, input`, "", 1, false},
		{"bad phase", hdr + `"ops": [{"id": 0, "type": "a", "phase": "fwd"}]}`, "ops[0].phase", `phase "fwd", expected one of forward, backward, update`, "", 1, false},
		{"shape type", hdr + `"tensors": [{"id": 0, "kind": "input", "shape": "3x4"}]}`, "tensors[0].shape", "expected an array, got a string", "", 1, false},
		{"shape element", hdr + `"tensors": [{"id": 0, "kind": "input", "shape": [3, 4.5]}]}`, "tensors[0].shape[1]", "expected an integer, got 4.5", "4.5", 1, false},
		{"shape overflow", hdr + `"tensors": [{"id": 0, "kind": "input", "dtype": "f32", "shape": [4294967296, 4294967296]}]}`, "tensors[0].shape", "bytes not given and cannot be derived", "", 1, false},
		{"bytes too big", hdr + `"tensors": [{"id": 0, "kind": "input", "bytes": 9223372036854775808}]}`, "tensors[0].bytes", "out of range", "", 1, false},
		{"producer negative", hdr + `"tensors": [{"id": 0, "kind": "input", "producer": -1}]}`, "tensors[0].producer", "op id -1, expected null or 0..2147483647", "", 1, false},
		{"alias too big", hdr + `"tensors": [{"id": 0, "kind": "input", "alias_of": 2147483648}]}`, "tensors[0].alias_of", "tensor id 2147483648", "", 1, false},
		{"inputs type", hdr + `"ops": [{"id": 0, "type": "a", "phase": "forward", "inputs": 0}]}`, "ops[0].inputs", "expected an array, got a number", "", 1, false},
		{"inputs element", hdr + `"ops": [{"id": 0, "type": "a", "phase": "forward", "inputs": [0, "x"]}]}`, "ops[0].inputs[1]", "expected an integer, got a string", `"x"`, 1, false},
		{"outputs negative", hdr + `"ops": [{"id": 0, "type": "a", "phase": "forward", "outputs": [-3]}]}`, "ops[0].outputs[0]", "tensor id -3, expected 0..2147483647", "", 1, false},
		{"flops type", hdr + `"ops": [{"id": 0, "type": "a", "phase": "forward", "flops": true}]}`, "ops[0].flops", "expected an integer, got a boolean", "", 1, false},
		{"bad flag", hdr + `"ops": [{"id": 0, "type": "a", "phase": "forward", "flags": ["pure"]}]}`, "ops[0].flags[0]", `op flag "pure", expected one of nondeterministic, inplace, impure`, `"pure"`, 1, false},
		{"duplicate flag", hdr + `"ops": [{"id": 0, "type": "a", "phase": "forward", "flags": ["impure", "impure"]}]}`, "ops[0].flags[1]", `listed twice`, `"impure"]`, 1, false},
		{"op attrs type", hdr + `"ops": [{"id": 0, "type": "a", "phase": "forward", "attrs": ["x"]}]}`, "ops[0].attrs", "expected an object of strings, got an array", "", 1, false},
		{"op attr value", hdr + `"ops": [{"id": 0, "type": "a", "phase": "forward", "attrs": {"k": null}}]}`, "ops[0].attrs.k", "expected a string, got null", "null}}", 1, false},
		{"forward type", hdr + `"ops": [{"id": 0, "type": "a", "phase": "forward", "forward": "fc"}]}`, "ops[0].forward", "expected an integer, got a string", `"fc"`, 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := decodeString(c.in)
			require.Error(t, err)
			require.Nil(t, g)
			var fe *FormatError
			require.ErrorAs(t, err, &fe, "error %v", err)
			assert.Equal(t, c.path, fe.Path, "error: %v", err)
			assert.Contains(t, err.Error(), c.msg)
			switch c.at {
			case "":
			case "$":
				assert.Equal(t, int64(len(c.in)), fe.Offset, "error: %v", err)
			default:
				require.Contains(t, c.in, c.at)
				assert.Equal(t, int64(strings.Index(c.in, c.at)), fe.Offset, "error: %v", err)
			}
			if c.line != 0 {
				assert.Equal(t, c.line, fe.Line, "error: %v", err)
			}
			assert.Equal(t, c.unsupported, errors.Is(err, ErrUnsupportedFormat))
			if c.path != "" {
				assert.True(t, strings.HasPrefix(err.Error(), c.path+": "), "error %q should start with its path", err)
			}
			// The streaming decoder refills its window mid-value: a reader
			// that returns one byte at a time gives the same error.
			_, err1 := Decode(iotest.OneByteReader(strings.NewReader(c.in)))
			require.Error(t, err1)
			assert.Equal(t, err.Error(), err1.Error())
		})
	}
}

// TestDecodeSmallReads decodes the test files and a large graph through
// readers that return one byte, or half of what is asked, at a time: the
// graphs equal those read at once.
func TestDecodeSmallReads(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	var inputs [][]byte
	for _, p := range files {
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		inputs = append(inputs, data)
	}
	var buf bytes.Buffer
	require.NoError(t, Encode(&buf, fullGraph(t)))
	inputs = append(inputs, buf.Bytes())
	for i, data := range inputs {
		want, wantErr := Decode(bytes.NewReader(data))
		for _, r := range []io.Reader{iotest.OneByteReader(bytes.NewReader(data)), iotest.HalfReader(bytes.NewReader(data))} {
			got, err := Decode(r)
			if wantErr != nil {
				require.Error(t, err, "input %d", i)
				assert.Equal(t, wantErr.Error(), err.Error())
				continue
			}
			require.NoError(t, err, "input %d", i)
			assert.Equal(t, encode(t, want), encode(t, got), "input %d", i)
		}
	}
	// A read error is a FormatError at the offset reached.
	_, err = Decode(io.MultiReader(strings.NewReader(hdr), iotest.ErrReader(errors.New("disk on fire"))))
	var fe *FormatError
	require.ErrorAs(t, err, &fe)
	assert.Contains(t, err.Error(), "disk on fire")
	assert.Equal(t, int64(len(hdr)), fe.Offset)
}

// TestDecodeErrorOffsetPointsAtValue checks that an element-level error's
// offset and line point at the offending value.
func TestDecodeErrorOffsetPointsAtValue(t *testing.T) {
	in := hdr + "\"ops\": [\n  {\"id\": 0, \"type\": \"a\", \"phase\": \"forward\"},\n  {\"id\": 1, \"type\": \"b\", \"phase\": \"forward\", \"inputs\": [0, \"oops\"]}\n]}"
	_, err := decodeString(in)
	var fe *FormatError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "ops[1].inputs[1]", fe.Path)
	assert.Equal(t, int64(strings.Index(in, `"oops"`)), fe.Offset)
	assert.Equal(t, 3, fe.Line)
}

func TestDecodeStreamsLargeInput(t *testing.T) {
	// A reader that fails after the graph object would be an error only if
	// Decode read past what it needs; here we check Decode works through a
	// one-byte-at-a-time reader (no assumption about read sizes).
	data := encode(t, fullGraph(t))
	g, err := Decode(&oneByteReader{data: data})
	require.NoError(t, err)
	assert.Equal(t, fullGraph(t), g)
}

type oneByteReader struct{ data []byte }

func (r *oneByteReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, os.ErrClosed // any error other than EOF must surface
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = r.data[0]
	r.data = r.data[1:]
	if len(r.data) == 0 {
		return 1, errEOF
	}
	return 1, nil
}

var errEOF = ioEOF()

func TestDecodeReadError(t *testing.T) {
	_, err := Decode(&failingReader{prefix: []byte(hdr + `"tensors": [`)})
	require.Error(t, err)
	assert.ErrorIs(t, err, errDisk)
	_, err = Decode(nil)
	require.Error(t, err)
}

var errDisk = errors.New("disk on fire")

type failingReader struct{ prefix []byte }

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.prefix) == 0 {
		return 0, errDisk
	}
	n := copy(p, r.prefix)
	r.prefix = r.prefix[n:]
	return n, nil
}

func TestEncodeErrors(t *testing.T) {
	require.Error(t, Encode(&bytes.Buffer{}, nil))

	g := exampleGraph(t)
	g.Ops[1].Inputs[0] = 42
	err := Encode(&bytes.Buffer{}, g)
	var ve *ValidationError
	require.ErrorAs(t, err, &ve, "Encode validates")
	assert.Equal(t, "ops[1].inputs[0]", ve.Path)

	g = exampleGraph(t)
	g.Tensors[2].Name = "bad\xffutf8"
	err = Encode(&bytes.Buffer{}, g)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "tensors[2].name")
	assert.Contains(t, err.Error(), "not valid UTF-8")

	g = exampleGraph(t)
	g.Ops[0].Flags |= 1 << 6
	err = Encode(&bytes.Buffer{}, g)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ops[0].flags")

	g = exampleGraph(t)
	g.Ops[0].Attrs = map[string]string{"k\xfe": "v"} // ops may share a map: give op 0 its own
	err = Encode(&bytes.Buffer{}, g)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ops[0].attrs")

	err = Encode(&failingWriter{}, exampleGraph(t))
	require.ErrorIs(t, err, errDisk)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errDisk }

func TestEncodeDeterministic(t *testing.T) {
	// Map iteration order is random: encoding the same graph many times
	// must give the same bytes.
	g := fullGraph(t)
	first := encode(t, g)
	for i := 0; i < 20; i++ {
		require.Equal(t, first, encode(t, g))
	}
	// Encode leaves g untouched (it validates a copy).
	assert.Equal(t, fullGraph(t), g)
}

func TestEncodeOmitsZeroFields(t *testing.T) {
	s := string(encode(t, exampleGraph(t)))
	for _, absent := range []string{`"producer": null`, `"alias_of": null`, `"forward": null`, `"flops": 0`, `"workspace": 0`, `"flags": []`} {
		assert.NotContains(t, s, absent)
	}
	assert.True(t, strings.HasPrefix(s, "{\n  \"format\": \"remat.graph\",\n  \"version\": 1,"))
}

func ioEOF() error { return io.EOF }

// ReadFile sizes the graph's slices exactly from its counting pass, and
// the counts agree with the decoded graph (a malformed file still gets
// Decode's error).
func TestReadFileExactCapacity(t *testing.T) {
	g := buildChain(t, 5000, false)
	path := filepath.Join(t.TempDir(), "chain.json")
	require.NoError(t, WriteFile(path, g))
	got, err := ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, len(got.Ops), cap(got.Ops))
	assert.Equal(t, len(got.Tensors), cap(got.Tensors))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	nt, no, ok := countElements(bytes.NewReader(data))
	require.True(t, ok)
	assert.Equal(t, len(g.Tensors), nt)
	assert.Equal(t, len(g.Ops), no)
	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, data[:len(data)/2], 0o644))
	_, err = ReadFile(bad)
	var fe *FormatError
	require.ErrorAs(t, err, &fe)
	assert.Contains(t, err.Error(), "unexpected end of input")
}

// ReadFile reads a gzip-compressed graph file as the plain one, whatever
// its name, and exactly sized; one cut short fails with gzip's error.
func TestReadFileGzip(t *testing.T) {
	g := buildChain(t, 500, false)
	dir := t.TempDir()
	plain := filepath.Join(dir, "chain.json")
	require.NoError(t, WriteFile(plain, g))
	data, err := os.ReadFile(plain)
	require.NoError(t, err)
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, err = zw.Write(data)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	packed := filepath.Join(dir, "chain-gz.json")
	require.NoError(t, os.WriteFile(packed, b.Bytes(), 0o644))
	want, err := ReadFile(plain)
	require.NoError(t, err)
	got, err := ReadFile(packed)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, len(got.Ops), cap(got.Ops))
	assert.Equal(t, len(got.Tensors), cap(got.Tensors))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = ReadFileContext(ctx, packed)
	require.ErrorIs(t, err, context.Canceled)

	cut := filepath.Join(dir, "cut.json.gz")
	require.NoError(t, os.WriteFile(cut, b.Bytes()[:b.Len()/2], 0o644))
	_, err = ReadFile(cut)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Contains(t, err.Error(), cut+": ")
	assert.Contains(t, err.Error(), "gzip: unexpected EOF")
}

// countElements counts the elements of the top-level arrays whatever the
// strings, escapes and nesting inside them, and is only a hint elsewhere.
func TestCountElements(t *testing.T) {
	cases := []struct {
		in     string
		nt, no int
		ok     bool
	}{
		{hdr + `"tensors": [], "ops": []}`, 0, 0, true},
		{hdr + `"name": "ops", "tensors": [{"id": 0, "name": "a,b]\"[", "shape": [1, 2]}, {"id": 1}], "ops": [{"attrs": {"tensors": "[,]"}}]}`, 2, 1, true},
		{"\xef\xbb\xbf" + hdr + `"attrs": {"x": "\\"}, "ops": [1, 2, 3]}`, 0, 3, true},
		{hdr + `"tensors": [{"name": "\\\"],[\\", "x": "\\\\"}, {"n": "q\\\\\"]\\\\"}, "\\"], "ops": ["]\\\\", "\\u005d"]}`, 3, 2, true},
		{hdr + `"tensors": [{}, {}`, 0, 0, false},
		{`]`, 0, 0, false},
	}
	for _, c := range cases {
		// whole, and read a byte or half a buffer at a time (strings,
		// escapes and keys cut at every place)
		for _, r := range []io.Reader{strings.NewReader(c.in), iotest.OneByteReader(strings.NewReader(c.in)), iotest.HalfReader(strings.NewReader(c.in))} {
			nt, no, ok := countElements(r)
			assert.Equal(t, c.ok, ok, c.in)
			if c.ok {
				assert.Equal(t, c.nt, nt, c.in)
				assert.Equal(t, c.no, no, c.in)
			}
		}
	}
}
