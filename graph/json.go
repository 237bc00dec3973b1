package graph

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/remat-dev/remat/internal/gzfile"
)

// The native JSON format: docs/format.md describes it field by field and
// docs/graph.schema.json is its JSON Schema.
const (
	// FormatName is the value of the "format" key that opens every file.
	FormatName = "remat.graph"
	// FormatVersion is the format version this build writes and reads.
	FormatVersion = 1
)

// ErrUnsupportedFormat is wrapped by the error Decode returns for a file
// whose "format" tag is not FormatName or whose version this build cannot
// read.
var ErrUnsupportedFormat = errors.New("unsupported graph format")

// FormatError is a problem found while decoding a graph file: a syntax
// error, a wrong type, an unknown or missing field. Path locates the value in
// the document ("ops[12].inputs[1]", "attrs.batch"; empty for the document
// itself), Offset is the 0-based byte offset in the input (-1 if unknown) and
// Line the 1-based line (0 if unknown).
//
// Semantic problems found by Validate after a file parsed (an undefined
// tensor, ops out of order, ...) are returned as *ValidationError, whose Path
// uses the same notation.
type FormatError struct {
	Path   string
	Offset int64
	Line   int
	Err    error
}

func (e *FormatError) Error() string {
	s := ""
	if e.Path != "" {
		s = e.Path + ": "
	}
	switch {
	case e.Line > 0 && e.Offset >= 0:
		s += fmt.Sprintf("line %d, byte %d: ", e.Line, e.Offset)
	case e.Offset >= 0:
		s += fmt.Sprintf("byte %d: ", e.Offset)
	}
	if e.Err == nil {
		return s + "invalid graph file"
	}
	return s + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *FormatError) Unwrap() error { return e.Err }

// ---------------------------------------------------------------- encoding

// Encode writes g in the native JSON format. The graph is validated first
// (on a shallow copy, so g itself is not modified): Encode only writes files
// that Decode accepts. The output is deterministic: keys in a fixed order,
// attributes sorted, one tensor or op per line, zero-valued optional fields
// omitted (nil slices and maps are omitted, empty non-nil ones are written
// as [] and {} so that Decode gives back exactly g).
func Encode(w io.Writer, g *Graph) error {
	if g == nil {
		return errors.New("encode graph: graph is nil")
	}
	c := Graph{Name: g.Name, Ops: g.Ops, Tensors: g.Tensors, Loss: g.Loss, Attrs: g.Attrs}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("encode graph %q: %w", g.Name, err)
	}
	e := encoder{w: bufio.NewWriterSize(w, 64<<10)}
	if err := e.graph(g); err != nil {
		return fmt.Errorf("encode graph %q: %w", g.Name, err)
	}
	if err := e.w.Flush(); err != nil {
		return fmt.Errorf("encode graph %q: %w", g.Name, err)
	}
	return nil
}

type encoder struct {
	w    *bufio.Writer
	line []byte // the line being formatted, reused
	keys []string
}

// flush writes the formatted line.
func (e *encoder) flush() error {
	_, err := e.w.Write(e.line)
	e.line = e.line[:0]
	return err
}

func (e *encoder) graph(g *Graph) error {
	b := append(e.line[:0], "{\n  \"format\": "...)
	b = strconv.AppendQuote(b, FormatName)
	b = append(b, ",\n  \"version\": "...)
	b = strconv.AppendInt(b, FormatVersion, 10)
	if g.Name != "" {
		b = append(b, ",\n  \"name\": "...)
		var err error
		if b, err = appendString(b, g.Name, "name"); err != nil {
			return err
		}
	}
	if g.Attrs != nil {
		b = append(b, ",\n  \"attrs\": "...)
		var err error
		if b, err = e.appendAttrs(b, g.Attrs, "attrs"); err != nil {
			return err
		}
	}
	if g.Loss != NoTensor {
		b = append(b, ",\n  \"loss\": "...)
		b = strconv.AppendInt(b, int64(g.Loss), 10)
	}
	e.line = b
	if g.Tensors != nil {
		e.line = append(e.line, ",\n  \"tensors\": ["...)
		for i := range g.Tensors {
			if i > 0 {
				e.line = append(e.line, ',')
			}
			if err := e.tensor(i, &g.Tensors[i]); err != nil {
				return err
			}
		}
		if len(g.Tensors) > 0 {
			e.line = append(e.line, "\n  "...)
		}
		e.line = append(e.line, ']')
	}
	if g.Ops != nil {
		e.line = append(e.line, ",\n  \"ops\": ["...)
		for i := range g.Ops {
			if i > 0 {
				e.line = append(e.line, ',')
			}
			if err := e.op(i, &g.Ops[i]); err != nil {
				return err
			}
		}
		if len(g.Ops) > 0 {
			e.line = append(e.line, "\n  "...)
		}
		e.line = append(e.line, ']')
	}
	e.line = append(e.line, "\n}\n"...)
	return e.flush()
}

func (e *encoder) tensor(i int, t *Tensor) error {
	b := append(e.line, "\n    {\"id\": "...)
	b = strconv.AppendInt(b, int64(i), 10)
	var err error
	if t.Name != "" {
		b = append(b, ", \"name\": "...)
		if b, err = appendString(b, t.Name, tensorPath(i, ".name")); err != nil {
			return err
		}
	}
	if t.DType != 0 {
		b = append(b, ", \"dtype\": \""...)
		b = append(b, t.DType.String()...)
		b = append(b, '"')
	}
	if t.Shape != nil {
		b = append(b, ", \"shape\": ["...)
		for j, d := range t.Shape {
			if j > 0 {
				b = append(b, ", "...)
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, ']')
	}
	b = append(b, ", \"bytes\": "...)
	b = strconv.AppendInt(b, t.Bytes, 10)
	b = append(b, ", \"kind\": \""...)
	b = append(b, t.Kind.String()...)
	b = append(b, '"')
	if t.Producer != NoOp {
		b = append(b, ", \"producer\": "...)
		b = strconv.AppendInt(b, int64(t.Producer), 10)
	}
	if t.AliasOf != NoTensor {
		b = append(b, ", \"alias_of\": "...)
		b = strconv.AppendInt(b, int64(t.AliasOf), 10)
	}
	e.line = append(b, '}')
	return e.flushIfLarge()
}

// flushIfLarge writes the pending text once it is a few KiB, so memory use
// does not grow with the graph.
func (e *encoder) flushIfLarge() error {
	if len(e.line) < 4096 {
		return nil
	}
	return e.flush()
}

func appendIDs(b []byte, ids []TensorID) []byte {
	b = append(b, '[')
	for j, t := range ids {
		if j > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, int64(t), 10)
	}
	return append(b, ']')
}

func appendCost(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	b = append(b, ", \""...)
	b = append(b, key...)
	b = append(b, "\": "...)
	return strconv.AppendInt(b, v, 10)
}

func (e *encoder) op(i int, o *Op) error {
	b := append(e.line, "\n    {\"id\": "...)
	b = strconv.AppendInt(b, int64(i), 10)
	var err error
	if o.Name != "" {
		b = append(b, ", \"name\": "...)
		if b, err = appendString(b, o.Name, opPath(i, ".name", -1)); err != nil {
			return err
		}
	}
	b = append(b, ", \"type\": "...)
	if b, err = appendString(b, o.Type, opPath(i, ".type", -1)); err != nil {
		return err
	}
	b = append(b, ", \"phase\": \""...)
	b = append(b, o.Phase.String()...)
	b = append(b, '"')
	if o.Inputs != nil {
		b = append(b, ", \"inputs\": "...)
		b = appendIDs(b, o.Inputs)
	}
	if o.Outputs != nil {
		b = append(b, ", \"outputs\": "...)
		b = appendIDs(b, o.Outputs)
	}
	b = appendCost(b, "flops", o.FLOPs)
	b = appendCost(b, "bytes_accessed", o.BytesAccessed)
	b = appendCost(b, "time_ns", o.TimeNs)
	b = appendCost(b, "workspace", o.Workspace)
	if o.Forward != NoOp {
		b = append(b, ", \"forward\": "...)
		b = strconv.AppendInt(b, int64(o.Forward), 10)
	}
	if o.Flags != 0 {
		if unknown := o.Flags &^ (NonDeterministic | InPlace | Impure); unknown != 0 {
			return fmt.Errorf("%s: flags %#x: unknown bits %#x, expected a combination of nondeterministic, inplace, impure",
				opPath(i, ".flags", -1), uint8(o.Flags), uint8(unknown))
		}
		b = append(b, ", \"flags\": ["...)
		for j, f := range o.Flags.Strings() {
			if j > 0 {
				b = append(b, ", "...)
			}
			b = append(b, '"')
			b = append(b, f...)
			b = append(b, '"')
		}
		b = append(b, ']')
	}
	if o.Attrs != nil {
		b = append(b, ", \"attrs\": "...)
		if b, err = e.appendAttrs(b, o.Attrs, opPath(i, ".attrs", -1)); err != nil {
			return err
		}
	}
	e.line = append(b, '}')
	return e.flushIfLarge()
}

// appendAttrs writes a string map with sorted keys.
func (e *encoder) appendAttrs(b []byte, m map[string]string, path string) ([]byte, error) {
	keys := e.keys[:0]
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	e.keys = keys
	b = append(b, '{')
	var err error
	for j, k := range keys {
		if j > 0 {
			b = append(b, ", "...)
		}
		if b, err = appendString(b, k, path); err != nil {
			return b, err
		}
		b = append(b, ": "...)
		if b, err = appendString(b, m[k], path+"."+k); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Only '"', '\\' and control
// characters are escaped, so the output is canonical. A string that is not
// valid UTF-8 cannot be written losslessly and is an error.
func appendString(b []byte, s, path string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return b, fmt.Errorf("%s: string %q is not valid UTF-8", path, s)
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"'), nil
}

// WriteFile encodes g to path. It writes a temporary file in the same
// directory and renames it, so a failed write never leaves a truncated file.
func WriteFile(path string, g *Graph) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write graph: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err = Encode(f, g); err != nil {
		return fmt.Errorf("write graph %s: %w", path, err)
	}
	if err = f.Chmod(0o644); err != nil {
		return fmt.Errorf("write graph %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write graph %s: %w", path, err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write graph %s: %w", path, err)
	}
	return nil
}

// ---------------------------------------------------------------- decoding

// ReadFile decodes and validates the graph file at path, which may be
// gzip-compressed (found by its first bytes, whatever its name). Errors name
// the file. A first pass counts the tensors and ops (a syntax scan, no
// parsing) so that the graph's slices are allocated once at their exact
// size: on a million-op file this saves the slack and the garbage of
// growing them.
func ReadFile(path string) (*Graph, error) {
	return ReadFileContext(context.Background(), path)
}

// ReadFileContext is ReadFile reading until ctx is done: then it stops at
// its next read of the file with an error that matches ctx.Err() under
// errors.Is (a million-op file takes seconds to read).
func ReadFileContext(ctx context.Context, path string) (*Graph, error) {
	r, err := gzfile.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("read graph: %w", err)
	}
	cr := &countingReader{r: r}
	var hint [2]int
	if nt, no, ok := countElements(cr); ok {
		// No valid tensor or op takes fewer than minElementBytes bytes
		// ({"id":0,"kind":"input"}), so a file cannot make the decoder
		// reserve more elements than the bytes the scan read allow.
		most := int(min(cr.n/minElementBytes, int64(1<<31-1)))
		hint = [2]int{min(nt, most), min(no, most)}
	}
	r.Close()
	if r, err = gzfile.Open(ctx, path); err != nil {
		return nil, fmt.Errorf("read graph: %w", err)
	}
	defer r.Close()
	g, err := decode(r, hint)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Decode reads a graph in the native JSON format, validates it and builds
// its consumer index. The input is streamed: tensors and ops are parsed one
// element at a time straight into the graph's slices, never holding a second
// copy of the document. Syntax, type, unknown-field and missing-field errors
// are *FormatError (with the JSON path, byte offset and line); semantic
// errors are *ValidationError, whose Path names the same location, e.g.
// "ops[12].inputs[1]".
func Decode(r io.Reader) (*Graph, error) {
	return decode(r, [2]int{})
}

// decode is Decode with capacity hints for the tensors and ops.
func decode(r io.Reader, hint [2]int) (*Graph, error) {
	if r == nil {
		return nil, errors.New("decode graph: reader is nil")
	}
	br, err := skipBOM(r)
	if err != nil {
		return nil, err
	}
	d := newDecoder(br)
	d.hint = hint
	g, err := d.graph()
	if err != nil {
		return nil, err
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return g, nil
}

// skipBOM accepts a UTF-8 byte order mark and refuses UTF-16.
func skipBOM(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	switch head, _ := br.Peek(3); {
	case bytes.HasPrefix(head, []byte{0xef, 0xbb, 0xbf}):
		_, _ = br.Discard(3) // a UTF-8 byte order mark is accepted
	case bytes.HasPrefix(head, []byte{0xff, 0xfe}), bytes.HasPrefix(head, []byte{0xfe, 0xff}):
		return nil, &FormatError{Offset: 0, Line: 1, Err: errors.New("the file is UTF-16 (it starts with a UTF-16 byte order mark): expected UTF-8 JSON")}
	}
	return br, nil
}

// countElements counts the elements of a graph document's top-level
// "tensors" and "ops" arrays with a fast structural pass (strings, escapes
// and nesting only; the decoding pass checks everything). The counts are
// capacity hints: decode trusts them only after hintTrust elements decoded,
// and ReadFile caps them by the file's size. ok is false if the document
// does not even nest properly.
func countElements(r io.Reader) (nt, no int, ok bool) {
	buf := make([]byte, 1<<20)
	depth := 0
	inStr, esc := false, false
	var key, lastKey []byte // the last string at depth 1
	which := 0              // array being counted: 1 tensors, 2 ops
	count, seen := 0, false
	first := true
	for {
		n, err := r.Read(buf)
		chunk := buf[:n]
		if first && bytes.HasPrefix(chunk, []byte{0xef, 0xbb, 0xbf}) {
			chunk = chunk[3:]
		}
		if n > 0 {
			first = false
		}
		bs := -1 // index in chunk of the next backslash at or after the scan (-1: not looked for yet)
		for i := 0; i < len(chunk); i++ {
			c := chunk[i]
			if inStr {
				if depth == 1 {
					// Keys are short; collect them.
					switch {
					case esc:
						esc = false
						key = append(key, c)
					case c == '\\':
						esc = true
					case c == '"':
						inStr = false
						lastKey = append(lastKey[:0], key...)
					default:
						key = append(key, c)
					}
					continue
				}
				if esc {
					esc = false
					continue
				}
				// Skip to the closing quote: the next quote, unless a
				// backslash comes first (the next backslash is found
				// once per chunk and backslash, not once per string).
				if bs < i {
					if k := bytes.IndexByte(chunk[i:], '\\'); k >= 0 {
						bs = i + k
					} else {
						bs = len(chunk)
					}
				}
				q := len(chunk)
				if k := bytes.IndexByte(chunk[i:], '"'); k >= 0 {
					q = i + k
				}
				switch {
				case bs < q:
					i, esc = bs, true // the loop steps to the escaped byte
				case q == len(chunk):
					i = len(chunk)
				default:
					i, inStr = q, false
				}
				continue
			}
			if depth > 2 {
				// Inside an element only strings and nesting count:
				// skip the bytes that are neither.
				for !structural[c] {
					if i++; i == len(chunk) {
						break
					}
					c = chunk[i]
				}
				if i == len(chunk) {
					break
				}
			}
			switch c {
			case '"':
				inStr = true
				if depth == 1 {
					key = key[:0]
				} else if depth == 2 && which != 0 {
					seen = true
				}
			case '{', '[':
				if depth == 1 && c == '[' {
					which, count, seen = 0, 0, false
					switch string(lastKey) {
					case "tensors":
						which = 1
					case "ops":
						which = 2
					}
				} else if depth == 2 && which != 0 {
					seen = true
				}
				depth++
			case '}', ']':
				depth--
				if depth < 0 {
					return 0, 0, false
				}
				if depth == 1 && c == ']' && which != 0 {
					if seen {
						count++
					}
					if which == 1 {
						nt = count
					} else {
						no = count
					}
					which = 0
				}
			case ',':
				if depth == 2 && which != 0 {
					count++
				}
			case ' ', '\t', '\r', '\n':
			default:
				if depth == 2 && which != 0 {
					seen = true
				}
			}
		}
		if err != nil {
			return nt, no, errors.Is(err, io.EOF) && depth == 0
		}
	}
}

// decoder streams the document through a window of the input. It scans
// each value (a tensor, an op, a top-level scalar) byte by byte, checking
// JSON syntax with the byte offset of the first bad byte, and hands the
// value's bytes, still in the window, to the parser that fills the graph: no
// reflection and no copy of the document.
type decoder struct {
	r    io.Reader
	buf  []byte // window: input bytes [base, base+len(buf))
	i    int    // read position in buf
	keep int    // buf[keep:] must survive a refill (-1: nothing to keep)
	base int64  // input offset of buf[0]
	nl   int64  // newlines in the input before buf[0]
	eof  bool
	rerr error // read error other than io.EOF

	raw   []byte // the value being parsed (aliases buf)
	rawAt int64  // its input offset
	p     parser

	ids     []TensorID // chunk that inputs/outputs are carved from
	dims    []int64    // chunk that shapes are carved from
	scratch []int64
	stack   []byte            // open containers while scanning a value
	types   map[string]string // interned op types
	shapes  shapeTable        // interned shapes
	attrTab attrTable         // interned attribute sets
	hint    [2]int            // expected tensors and ops (0: unknown)
	elemAt  int               // buf index of the element elem delimited (-1: fully scanned)
}

const decodeChunk = 64 << 10

func newDecoder(r io.Reader) *decoder {
	return &decoder{r: r, keep: -1, buf: make([]byte, 0, decodeChunk), types: map[string]string{}}
}

// fill reads more input into the window; it returns false at the end of the
// input (or on a read error, kept in d.rerr). Between values it first drops
// the consumed bytes when they fill half the window; while a value is being
// scanned (d.keep >= 0) nothing moves, so indexes into buf stay valid, and
// the window grows if the value does not fit.
func (d *decoder) fill() bool {
	if d.eof {
		return false
	}
	if d.keep < 0 && d.i > 0 && d.i >= len(d.buf)/2 {
		d.compact()
	}
	if len(d.buf) == cap(d.buf) {
		nb := make([]byte, len(d.buf), 2*cap(d.buf))
		copy(nb, d.buf)
		d.buf = nb
	}
	for {
		n, err := d.r.Read(d.buf[len(d.buf):cap(d.buf)])
		d.buf = d.buf[:len(d.buf)+n]
		if err != nil {
			d.eof = true
			if !errors.Is(err, io.EOF) {
				d.rerr = err
			}
			return n > 0
		}
		if n > 0 {
			return true
		}
	}
}

// compact drops the consumed bytes buf[:i].
func (d *decoder) compact() {
	d.nl += int64(bytes.Count(d.buf[:d.i], newline))
	d.base += int64(d.i)
	n := copy(d.buf, d.buf[d.i:])
	d.buf = d.buf[:n]
	d.i = 0
}

var newline = []byte{'\n'}

// peekByte skips whitespace and returns the next byte without consuming
// it; ok is false at the end of the input.
func (d *decoder) peekByte() (byte, bool) {
	for {
		for d.i < len(d.buf) {
			switch c := d.buf[d.i]; c {
			case ' ', '\t', '\r', '\n':
				d.i++
			default:
				return c, true
			}
		}
		if !d.fill() {
			return 0, false
		}
	}
}

// offset is the input offset of the read position.
func (d *decoder) offset() int64 { return d.base + int64(d.i) }

// lineOf returns the 1-based line of input offset off, or 0 if it is no
// longer in the window.
func (d *decoder) lineOf(off int64) int {
	k := off - d.base
	if k < 0 || k > int64(len(d.buf)) {
		return 0
	}
	return int(d.nl+int64(bytes.Count(d.buf[:k], newline))) + 1
}

// vpath is the JSON path of a value, built only when an error needs it:
// name, or name[idx] when idx >= 0.
type vpath struct {
	name string
	idx  int
}

func (v vpath) String() string {
	if v.idx < 0 {
		return v.name
	}
	return v.name + "[" + strconv.Itoa(v.idx) + "]"
}

// top is the path of a top-level value.
func top(name string) vpath { return vpath{name, -1} }

// pos is a location in the input: byte offset and line (0 if unknown).
type pos struct {
	off  int64
	line int
}

// errAtPos builds a FormatError at p.
func errAtPos(path string, p pos, err error) *FormatError {
	return &FormatError{Path: path, Offset: p.off, Line: p.line, Err: err}
}

// errAt builds a FormatError at input offset off.
func (d *decoder) errAt(path string, off int64, err error) *FormatError {
	return &FormatError{Path: path, Offset: off, Line: d.lineOf(off), Err: err}
}

// nextPos returns the location of the next non-whitespace byte.
func (d *decoder) nextPos() pos {
	d.peekByte()
	off := d.offset()
	return pos{off, d.lineOf(off)}
}

// endErr is the error for input that ends (or fails to read) inside path.
func (d *decoder) endErr(path vpath) error {
	end := d.base + int64(len(d.buf))
	if d.rerr != nil {
		return &FormatError{Path: path.String(), Offset: end, Err: d.rerr}
	}
	return d.errAt(path.String(), end, errors.New("unexpected end of input"))
}

// syntaxErr is a syntax error at the byte at buf[k].
func (d *decoder) syntaxErr(path vpath, k int, format string, a ...any) error {
	return d.errAt(path.String(), d.base+int64(k), fmt.Errorf("syntax error: "+format, a...))
}

func quoteChar(c byte) string {
	switch {
	case c == '\'':
		return `'\''`
	case c == '"':
		return `'"'`
	case c < 0x20 || c >= 0x7f:
		return fmt.Sprintf("%q", []byte{c})
	}
	return "'" + string(c) + "'"
}

// at returns the byte at buf[k], reading more input if needed; ok is false
// at the end of the input.
func (d *decoder) at(k int) (byte, bool) {
	for k >= len(d.buf) {
		if !d.fill() {
			return 0, false
		}
	}
	return d.buf[k], true
}

// scanValue scans one complete JSON value at the read position (after
// whitespace), checking its syntax, and leaves it in d.raw (aliasing the
// window until the next scan) with its input offset in d.rawAt. Errors name
// path and the offset of the first bad byte.
func (d *decoder) scanValue(path vpath) error {
	if _, ok := d.peekByte(); !ok {
		return d.endErr(path)
	}
	if d.i >= len(d.buf)/2 {
		d.compact()
	}
	d.keep = d.i
	defer func() { d.keep = -1 }()
	start := d.i
	k := d.i
	d.stack = d.stack[:0]
	next := func() (byte, bool) {
		for {
			c, ok := d.at(k)
			if !ok {
				return 0, false
			}
			if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
				k++
				continue
			}
			return c, true
		}
	}
	const (
		stValue = iota
		stAfter
		stKey // after '{' or ','
	)
	st := stValue
	first := false // just after '{' or '['
	for {
		if st == stAfter && len(d.stack) == 0 {
			d.raw = d.buf[start:k]
			d.rawAt = d.base + int64(start)
			d.i = k
			return nil
		}
		c, ok := next()
		if !ok {
			return d.endErr(path)
		}
		switch st {
		case stKey:
			if c == '}' && first {
				k++
				d.stack = d.stack[:len(d.stack)-1]
				st = stAfter
				continue
			}
			if c != '"' {
				return d.syntaxErr(path, k, "invalid character %s looking for beginning of object key string", quoteChar(c))
			}
			var err error
			if k, err = d.scanString(path, k); err != nil {
				return err
			}
			if c, ok = next(); !ok {
				return d.endErr(path)
			}
			if c != ':' {
				return d.syntaxErr(path, k, "invalid character %s after object key", quoteChar(c))
			}
			k++
			st, first = stValue, false
			continue
		case stAfter:
			top := d.stack[len(d.stack)-1]
			switch {
			case c == ',':
				k++
				st, first = stValue, false
				if top == '{' {
					st = stKey
				}
			case top == '{' && c == '}', top == '[' && c == ']':
				k++
				d.stack = d.stack[:len(d.stack)-1]
			case top == '{':
				return d.syntaxErr(path, k, "invalid character %s after object key:value pair", quoteChar(c))
			default:
				return d.syntaxErr(path, k, "invalid character %s after array element", quoteChar(c))
			}
			continue
		}
		// stValue
		var err error
		switch {
		case c == ']' && first:
			k++
			d.stack = d.stack[:len(d.stack)-1]
		case c == '{' || c == '[':
			if len(d.stack) >= 10000 {
				return d.syntaxErr(path, k, "exceeded max depth")
			}
			k++
			d.stack = append(d.stack, c)
			first = true
			if c == '{' {
				st = stKey
			}
			continue
		case c == '"':
			k, err = d.scanString(path, k)
		case c == '-' || (c >= '0' && c <= '9'):
			k, err = d.scanNumber(path, k)
		case c == 't' || c == 'f' || c == 'n':
			lit := "true"
			if c == 'f' {
				lit = "false"
			} else if c == 'n' {
				lit = "null"
			}
			for j := 1; j < len(lit); j++ {
				b, ok := d.at(k + j)
				if !ok {
					return d.endErr(path)
				}
				if b != lit[j] {
					return d.syntaxErr(path, k+j, "invalid character %s in literal %s (expecting %s)", quoteChar(b), lit, quoteChar(lit[j]))
				}
			}
			k += len(lit)
		default:
			return d.syntaxErr(path, k, "invalid character %s looking for beginning of value", quoteChar(c))
		}
		if err != nil {
			return err
		}
		st = stAfter
	}
}

// scanString scans a string whose opening quote is buf[k]; it returns the
// index after the closing quote.
func (d *decoder) scanString(path vpath, k int) (int, error) {
	j := k + 1
	for {
		// Fast path over plain bytes already in the window.
		for j < len(d.buf) {
			if c := d.buf[j]; c == '"' || c == '\\' || c < 0x20 {
				break
			}
			j++
		}
		c, ok := d.at(j)
		if !ok {
			return j, d.endErr(path)
		}
		switch {
		case c == '"':
			return j + 1, nil
		case c < 0x20:
			return j, d.syntaxErr(path, j, "invalid character %s in string literal", quoteChar(c))
		case c == '\\':
			e, ok := d.at(j + 1)
			if !ok {
				return j, d.endErr(path)
			}
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				for h := 2; h < 6; h++ {
					x, ok := d.at(j + h)
					if !ok {
						return j, d.endErr(path)
					}
					if !(x >= '0' && x <= '9' || x >= 'a' && x <= 'f' || x >= 'A' && x <= 'F') {
						return j, d.syntaxErr(path, j+h, "invalid character %s in \\u hexadecimal character escape", quoteChar(x))
					}
				}
				j += 6
			default:
				return j, d.syntaxErr(path, j+1, "invalid character %s in string escape code", quoteChar(e))
			}
		default:
			j++
		}
	}
}

// scanNumber scans a number starting at buf[k] with JSON's grammar; it
// returns the index after it. The byte after the number is left to the
// caller.
func (d *decoder) scanNumber(path vpath, k int) (int, error) {
	j := k
	digits := func() int {
		n := 0
		for {
			c, ok := d.at(j)
			if !ok || c < '0' || c > '9' {
				return n
			}
			j++
			n++
		}
	}
	if c, _ := d.at(j); c == '-' {
		j++
		c2, ok := d.at(j)
		if !ok {
			return j, d.endErr(path)
		}
		if c2 < '0' || c2 > '9' {
			return j, d.syntaxErr(path, j, "invalid character %s in numeric literal", quoteChar(c2))
		}
	}
	if c, _ := d.at(j); c == '0' {
		j++
	} else {
		digits()
	}
	if c, ok := d.at(j); ok && c == '.' {
		j++
		if digits() == 0 {
			c, ok := d.at(j)
			if !ok {
				return j, d.endErr(path)
			}
			return j, d.syntaxErr(path, j, "invalid character %s after decimal point in numeric literal", quoteChar(c))
		}
	}
	if c, ok := d.at(j); ok && (c == 'e' || c == 'E') {
		j++
		if c, ok := d.at(j); ok && (c == '+' || c == '-') {
			j++
		}
		if digits() == 0 {
			c, ok := d.at(j)
			if !ok {
				return j, d.endErr(path)
			}
			return j, d.syntaxErr(path, j, "invalid character %s in exponent of numeric literal", quoteChar(c))
		}
	}
	return j, nil
}

// elem finds the extent of the next array element and points the parser
// at it. An object is delimited by a structural pass (strings, escapes and
// nesting only): the parser that reads it checks everything else, and
// elemErr rescans the element with the full syntax check when the parser
// fails, so that a syntax error is reported as such. Anything but an object
// takes the full scan at once.
func (d *decoder) elem(path vpath) error {
	c, ok := d.peekByte()
	if !ok {
		return d.endErr(path)
	}
	if c != '{' {
		d.elemAt = -1
		return d.value(path)
	}
	if d.i >= len(d.buf)/2 {
		d.compact()
	}
	d.keep = d.i
	defer func() { d.keep = -1 }()
	start, k, depth := d.i, d.i, 0
	for {
		// Fast path over bytes already in the window.
		for k < len(d.buf) && !structural[d.buf[k]] {
			k++
		}
		c, ok := d.at(k)
		if !ok {
			return d.endErr(path)
		}
		switch c {
		case '"':
			for k++; ; k++ {
				if k < len(d.buf) {
					if j := bytes.IndexByte(d.buf[k:], '"'); j >= 0 && bytes.IndexByte(d.buf[k:k+j], '\\') < 0 {
						k += j
						break
					}
				}
				c, ok := d.at(k)
				if !ok {
					return d.endErr(path)
				}
				if c == '"' {
					break
				}
				if c == '\\' {
					k++
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				k++
				d.raw, d.rawAt, d.elemAt = d.buf[start:k], d.base+int64(start), start
				d.i = k
				d.p = parser{b: d.raw}
				return nil
			}
		}
		k++
	}
}

// structural marks the bytes elem's structural pass and countElements
// (inside an element) stop at.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

// elemErr turns a failure to parse the element elem delimited into the
// syntax error its full scan finds, or else the parser's error; it also
// rejects bytes the parser left after the element.
func (d *decoder) elemErr(path vpath, err error) error {
	if err == nil {
		d.p.ws()
		if d.p.i == len(d.p.b) {
			return nil
		}
		err = d.p.errf(d.p.i, "", "unexpected data after the element")
	}
	if d.elemAt >= 0 {
		end := d.i
		d.i = d.elemAt
		if serr := d.scanValue(path); serr != nil {
			return serr
		}
		d.i = end
	}
	return d.perr(err)
}

// value scans the next value and points the parser at it.
func (d *decoder) value(path vpath) error {
	if err := d.scanValue(path); err != nil {
		return err
	}
	d.p = parser{b: d.raw}
	return nil
}

// perr converts a parser error into a FormatError.
func (d *decoder) perr(err error) error {
	var pe *parseError
	if !errors.As(err, &pe) {
		return err
	}
	return d.errAt(pe.path, d.rawAt+int64(pe.pos), pe.err)
}

// kindOf names the JSON type of a value starting with byte c.
func kindOf(c byte) string {
	switch {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == '-' || (c >= '0' && c <= '9'):
		return "number"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	}
	return "data"
}

// Top-level keys, as bits of a seen-set.
const (
	topName = 1 << iota
	topAttrs
	topLoss
	topTensors
	topOps
)

func (d *decoder) graph() (*Graph, error) {
	g := &Graph{Loss: NoTensor}
	off := d.nextPos()
	c, ok := d.peekByte()
	if !ok {
		if d.rerr != nil {
			return nil, d.endErr(top(""))
		}
		return nil, errAtPos("", off, errors.New("empty input, expected a graph object"))
	}
	if c != '{' {
		if k := kindOf(c); k != "data" {
			return nil, errAtPos("", off, fmt.Errorf("expected a graph object, got %s", k))
		}
		return nil, d.syntaxErr(top(""), d.i, "invalid character %s looking for beginning of value", quoteChar(c))
	}
	d.i++
	var seen uint
	n := 0
	for {
		c, ok := d.peekByte()
		if !ok {
			return nil, d.endErr(top(""))
		}
		if c == '}' {
			if n < 2 {
				miss := "format"
				if n == 1 {
					miss = "version"
				}
				return nil, errAtPos("", d.nextPos(), fmt.Errorf("missing required key %q", miss))
			}
			d.i++
			break
		}
		if n > 0 {
			if c != ',' {
				return nil, d.syntaxErr(top(""), d.i, "invalid character %s after object key:value pair", quoteChar(c))
			}
			d.i++
			if c, ok = d.peekByte(); !ok {
				return nil, d.endErr(top(""))
			}
		}
		if c != '"' {
			return nil, d.syntaxErr(top(""), d.i, "invalid character %s looking for beginning of object key string", quoteChar(c))
		}
		koff := d.nextPos()
		if err := d.value(top("")); err != nil {
			return nil, err
		}
		kb, err := d.p.strBytes("")
		if err != nil {
			return nil, d.perr(err)
		}
		key := string(kb)
		c, ok = d.peekByte()
		if !ok {
			return nil, d.endErr(top(key))
		}
		if c != ':' {
			return nil, d.syntaxErr(top(key), d.i, "expected colon after object key, got %s", quoteChar(c))
		}
		d.i++
		switch {
		case n == 0 && key != "format":
			return nil, errAtPos(key, koff, fmt.Errorf("first key is %q, expected \"format\" (a %s file starts with {\"format\": %q, \"version\": %d})", key, FormatName, FormatName, FormatVersion))
		case n == 1 && key != "version":
			return nil, errAtPos(key, koff, fmt.Errorf("second key is %q, expected \"version\"", key))
		}
		if n >= 2 && (key == "format" || key == "version") {
			return nil, errAtPos(key, koff, fmt.Errorf("duplicate field %q", key))
		}
		n++
		if err := d.topValue(g, key, koff, &seen); err != nil {
			return nil, err
		}
	}
	off = d.nextPos()
	if c, ok := d.peekByte(); ok {
		return nil, errAtPos("", off, fmt.Errorf("unexpected %s after the graph object", kindOf(c)))
	}
	if d.rerr != nil {
		return nil, d.endErr(top(""))
	}
	return g, nil
}

func (d *decoder) topValue(g *Graph, key string, koff pos, seen *uint) error {
	bit := uint(0)
	switch key {
	case "name":
		bit = topName
	case "attrs":
		bit = topAttrs
	case "loss":
		bit = topLoss
	case "tensors":
		bit = topTensors
	case "ops":
		bit = topOps
	case "format", "version":
	default:
		return errAtPos(key, koff, fmt.Errorf("unknown field %q at the top level, expected one of format, version, name, attrs, loss, tensors, ops", key))
	}
	if bit != 0 {
		if *seen&bit != 0 {
			return errAtPos(key, koff, fmt.Errorf("duplicate field %q", key))
		}
		*seen |= bit
	}
	switch key {
	case "tensors":
		return d.tensors(g)
	case "ops":
		return d.ops(g)
	}
	if err := d.value(top(key)); err != nil {
		return err
	}
	p := &d.p
	p.at = top(key)
	var err error
	switch key {
	case "format":
		var s []byte
		if s, err = p.strBytes(""); err == nil && string(s) != FormatName {
			err = p.errf(0, "", "%w: format %q, expected %q", ErrUnsupportedFormat, s, FormatName)
		}
	case "version":
		var v int64
		if v, err = p.int(""); err == nil && v != FormatVersion {
			err = p.errf(0, "", "%w: version %d, this build reads version %d", ErrUnsupportedFormat, v, FormatVersion)
		}
	case "name":
		g.Name, err = p.optStr("")
	case "attrs":
		g.Attrs, err = p.attrs("")
	case "loss":
		var id int32
		if id, err = p.optID("", int32(NoTensor), "tensor"); err == nil {
			g.Loss = TensorID(id)
		}
	}
	if err != nil {
		return d.perr(err)
	}
	return nil
}

// array reads '[' (or null) and calls elem for each element, which scans
// and parses it.
func (d *decoder) array(name string, elem func(i int) error) (isNull bool, err error) {
	off := d.nextPos()
	c, ok := d.peekByte()
	if !ok {
		return false, d.endErr(top(name))
	}
	if c == 'n' {
		if err := d.scanValue(top(name)); err != nil {
			return false, err
		}
		return true, nil
	}
	if c != '[' {
		if k := kindOf(c); k != "data" {
			return false, errAtPos(name, off, fmt.Errorf("expected an array, got %s", k))
		}
		return false, d.syntaxErr(top(name), d.i, "invalid character %s looking for beginning of value", quoteChar(c))
	}
	d.i++
	for i := 0; ; i++ {
		c, ok := d.peekByte()
		if !ok {
			return false, d.endErr(top(name))
		}
		if c == ']' {
			d.i++
			return false, nil
		}
		if i > 0 {
			if c != ',' {
				return false, d.syntaxErr(top(name), d.i, "invalid character %s after array element", quoteChar(c))
			}
			d.i++
		}
		if i == 1<<31-1 {
			return false, errAtPos(name, d.nextPos(), errors.New("more than 2^31-1 elements"))
		}
		if err := elem(i); err != nil {
			return false, err
		}
	}
}

// minElementBytes is the size of the smallest valid tensor or op object.
const minElementBytes = 20

// hintTrust is how many elements must decode before the counted size is
// trusted: a file that fails early (or that lies about its size with a
// million empty objects) allocates little up front.
const hintTrust = 1 << 16

// startCap is the first capacity of a slice whose final length is hinted.
func startCap(hint int) int { return max(16, min(hint, hintTrust)) }

// growHint makes room for one more element: straight to the hinted length
// once the slice is full at hintTrust elements or more, by growCap otherwise
// (or beyond the hint).
func growHint[E any](s []E, hint int) []E {
	if len(s) < cap(s) {
		return s
	}
	if hint > len(s) && len(s) >= min(hint, hintTrust) {
		n := make([]E, len(s), hint)
		copy(n, s)
		return n
	}
	return growCap(s)
}

func (d *decoder) tensors(g *Graph) error {
	g.Tensors = make([]Tensor, 0, startCap(d.hint[0]))
	null, err := d.array("tensors", func(i int) error {
		path := vpath{"tensors", i}
		if err := d.elem(path); err != nil {
			return err
		}
		g.Tensors = append(growHint(g.Tensors, d.hint[0]), Tensor{})
		return d.elemErr(path, d.tensor(i, &g.Tensors[i]))
	})
	if null {
		g.Tensors = nil
	}
	return err
}

func (d *decoder) ops(g *Graph) error {
	g.Ops = make([]Op, 0, startCap(d.hint[1]))
	null, err := d.array("ops", func(i int) error {
		path := vpath{"ops", i}
		if err := d.elem(path); err != nil {
			return err
		}
		g.Ops = append(growHint(g.Ops, d.hint[1]), Op{})
		return d.elemErr(path, d.op(i, &g.Ops[i]))
	})
	if null {
		g.Ops = nil
	}
	return err
}

// Tensor fields, as bits of a seen-set.
const (
	tfID = 1 << iota
	tfName
	tfDType
	tfShape
	tfBytes
	tfKind
	tfProducer
	tfAliasOf
)

const tensorFields = "id, name, dtype, shape, bytes, kind, producer, alias_of"

func (d *decoder) tensor(i int, t *Tensor) error {
	p := &d.p
	p.at = vpath{"tensors", i}
	*t = Tensor{ID: TensorID(i), Producer: NoOp, AliasOf: NoTensor}
	if err := p.open('{', "", "a tensor object"); err != nil {
		return err
	}
	var seen uint
	derive := false // bytes null: derive it as if absent
	for first := true; ; first = false {
		key, kpos, ok, err := p.member(first)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		var bit uint
		switch string(key) {
		case "id":
			bit = tfID
			var id int64
			if id, err = p.int(".id"); err == nil && id != int64(i) {
				err = p.errf(kpos, ".id", "id is %d, expected the element's index %d (ids must equal the position in the tensors array)", id, i)
			}
		case "name":
			bit = tfName
			t.Name, err = p.optStr(".name")
		case "dtype":
			bit = tfDType
			if !p.null() {
				t.DType, err = p.dtype(".dtype")
			}
		case "shape":
			bit = tfShape
			t.Shape, err = d.shape(".shape")
		case "bytes":
			bit = tfBytes
			if p.null() {
				derive = true
			} else {
				t.Bytes, err = p.int(".bytes")
			}
		case "kind":
			bit = tfKind
			t.Kind, err = p.kind(".kind")
		case "producer":
			bit = tfProducer
			var id int32
			id, err = p.optID(".producer", int32(NoOp), "op")
			t.Producer = OpID(id)
		case "alias_of":
			bit = tfAliasOf
			var id int32
			id, err = p.optID(".alias_of", int32(NoTensor), "tensor")
			t.AliasOf = TensorID(id)
		default:
			return p.errf(kpos, "."+string(key), "unknown field %q, expected one of %s", key, tensorFields)
		}
		if err != nil {
			return err
		}
		if seen&bit != 0 {
			return p.errf(kpos, "."+string(key), "duplicate field %q", key)
		}
		seen |= bit
	}
	if seen&tfID == 0 {
		return p.errf(0, "", "missing required field \"id\"")
	}
	if seen&tfKind == 0 {
		return p.errf(0, "", "missing required field \"kind\"")
	}
	if (seen&tfBytes == 0 || derive) && t.DType != 0 {
		by, err := t.Shape.Bytes(t.DType)
		if err != nil {
			return p.errf(0, ".shape", "bytes not given and cannot be derived: %w", err)
		}
		t.Bytes = by
	}
	return nil
}

// shape parses an array of dimensions (or null) into a slice carved from
// the decoder's chunk.
func (d *decoder) shape(field string) (Shape, error) {
	p := &d.p
	if p.null() {
		return nil, nil
	}
	dims := d.scratch[:0]
	err := p.array(field, func(j int) error {
		v, err := p.int("")
		if err != nil {
			var pe *parseError
			if errors.As(err, &pe) {
				pe.path = p.at.String() + field + "[" + strconv.Itoa(j) + "]"
			}
		}
		dims = append(dims, v)
		return err
	})
	d.scratch = dims
	if err != nil {
		return nil, err
	}
	if len(dims) == 0 {
		return Shape{}, nil
	}
	return d.shapes.intern(&d.dims, dims), nil
}

// idList parses an array of tensor ids (or null).
func (d *decoder) idList(field string) ([]TensorID, error) {
	p := &d.p
	if p.null() {
		return nil, nil
	}
	ids := d.scratch[:0]
	err := p.array(field, func(j int) error {
		pos := p.i
		v, err := p.int("")
		if err == nil && (v < 0 || v > 1<<31-1) {
			err = p.errf(pos, "", "tensor id %d, expected 0..%d", v, 1<<31-1)
		}
		if err != nil {
			var pe *parseError
			if errors.As(err, &pe) {
				pe.path = p.at.String() + field + "[" + strconv.Itoa(j) + "]"
			}
		}
		ids = append(ids, v)
		return err
	})
	d.scratch = ids
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return []TensorID{}, nil
	}
	if cap(d.ids)-len(d.ids) < len(ids) {
		d.ids = make([]TensorID, 0, max(arenaChunk, len(ids)))
	}
	l := len(d.ids)
	for _, v := range ids {
		d.ids = append(d.ids, TensorID(v))
	}
	return d.ids[l:len(d.ids):len(d.ids)], nil
}

// Op fields, as bits of a seen-set.
const (
	ofID = 1 << iota
	ofName
	ofType
	ofPhase
	ofInputs
	ofOutputs
	ofFLOPs
	ofBytesAccessed
	ofTimeNs
	ofWorkspace
	ofForward
	ofFlags
	ofAttrs
)

const opFields = "id, name, type, phase, inputs, outputs, flops, bytes_accessed, time_ns, workspace, forward, flags, attrs"

func (d *decoder) op(i int, o *Op) error {
	p := &d.p
	p.at = vpath{"ops", i}
	*o = Op{ID: OpID(i), Forward: NoOp}
	if err := p.open('{', "", "an op object"); err != nil {
		return err
	}
	var seen uint
	for first := true; ; first = false {
		key, kpos, ok, err := p.member(first)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		var bit uint
		switch string(key) {
		case "id":
			bit = ofID
			var id int64
			if id, err = p.int(".id"); err == nil && id != int64(i) {
				err = p.errf(kpos, ".id", "id is %d, expected the element's index %d (ids must equal the position in the ops array)", id, i)
			}
		case "name":
			bit = ofName
			o.Name, err = p.optStr(".name")
		case "type":
			bit = ofType
			var s []byte
			if s, err = p.strBytes(".type"); err == nil {
				typ, ok := d.types[string(s)]
				if !ok {
					typ = string(s)
					d.types[typ] = typ
				}
				o.Type = typ
			}
		case "phase":
			bit = ofPhase
			o.Phase, err = p.phase(".phase")
		case "inputs":
			bit = ofInputs
			o.Inputs, err = d.idList(".inputs")
		case "outputs":
			bit = ofOutputs
			o.Outputs, err = d.idList(".outputs")
		case "flops":
			bit = ofFLOPs
			o.FLOPs, err = p.optInt(".flops")
		case "bytes_accessed":
			bit = ofBytesAccessed
			o.BytesAccessed, err = p.optInt(".bytes_accessed")
		case "time_ns":
			bit = ofTimeNs
			o.TimeNs, err = p.optInt(".time_ns")
		case "workspace":
			bit = ofWorkspace
			o.Workspace, err = p.optInt(".workspace")
		case "forward":
			bit = ofForward
			var id int32
			id, err = p.optID(".forward", int32(NoOp), "op")
			o.Forward = OpID(id)
		case "flags":
			bit = ofFlags
			o.Flags, err = p.flags(".flags")
		case "attrs":
			bit = ofAttrs
			o.Attrs, err = p.attrs(".attrs")
			o.Attrs = d.attrTab.intern(o.Attrs)
		default:
			return p.errf(kpos, "."+string(key), "unknown field %q, expected one of %s", key, opFields)
		}
		if err != nil {
			return err
		}
		if seen&bit != 0 {
			return p.errf(kpos, "."+string(key), "duplicate field %q", key)
		}
		seen |= bit
	}
	for _, req := range [...]struct {
		bit  uint
		name string
	}{{ofID, "id"}, {ofType, "type"}, {ofPhase, "phase"}} {
		if seen&req.bit == 0 {
			return p.errf(0, "", "missing required field %q", req.name)
		}
	}
	return nil
}

// ---------------------------------------------------------------- parser

// parseError is an error at byte pos of the value being parsed; path is the
// full JSON path.
type parseError struct {
	pos  int
	path string
	err  error
}

func (e *parseError) Error() string { return e.path + ": " + e.err.Error() }
func (e *parseError) Unwrap() error { return e.err }

// parser reads one JSON value (a tensor, an op, a top-level scalar) that the
// json.Decoder has already checked for syntax. It is still written to fail
// with an error, never a panic, on any byte sequence.
type parser struct {
	b  []byte
	i  int
	at vpath // path of the value being parsed, e.g. ops[3]
}

// errf returns a parseError at pos for path p.at+field.
func (p *parser) errf(pos int, field, format string, a ...any) error {
	return &parseError{pos: pos, path: p.at.String() + field, err: fmt.Errorf(format, a...)}
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\r', '\n':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) peek() byte {
	p.ws()
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

// kindAt names the JSON type of the value at the current position.
func (p *parser) kindAt() string {
	switch c := p.peek(); {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case c == '-' || (c >= '0' && c <= '9'):
		return "a number"
	case c == 0:
		return "the end of the value"
	}
	return "an invalid value"
}

func (p *parser) open(c byte, field, what string) error {
	if p.peek() != c {
		return p.errf(p.i, field, "expected %s, got %s", what, p.kindAt())
	}
	p.i++
	return nil
}

// null consumes a null literal if one is next.
func (p *parser) null() bool {
	if p.peek() == 'n' && bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += 4
		return true
	}
	return false
}

// member reads the next key of an object (after '{'); ok is false at '}'.
func (p *parser) member(first bool) (key []byte, pos int, ok bool, err error) {
	c := p.peek()
	if c == '}' {
		p.i++
		return nil, 0, false, nil
	}
	if !first {
		if c != ',' {
			return nil, p.i, false, p.errf(p.i, "", "expected ',' or '}' in object")
		}
		p.i++
	}
	pos = p.i
	if p.peek() != '"' {
		return nil, pos, false, p.errf(p.i, "", "expected a field name")
	}
	pos = p.i
	key, err = p.strBytes("")
	if err != nil {
		return nil, pos, false, err
	}
	if p.peek() != ':' {
		return nil, pos, false, p.errf(p.i, "", "expected ':' after field name")
	}
	p.i++
	return key, pos, true, nil
}

// array reads '[' ... ']' and calls elem for each element.
func (p *parser) array(field string, elem func(j int) error) error {
	if err := p.open('[', field, "an array"); err != nil {
		return err
	}
	for j := 0; ; j++ {
		c := p.peek()
		if c == ']' {
			p.i++
			return nil
		}
		if j > 0 {
			if c != ',' {
				return p.errf(p.i, field, "expected ',' or ']' in array")
			}
			p.i++
		}
		if err := elem(j); err != nil {
			return err
		}
	}
}

// strBytes reads a string. The result aliases the input when the string
// has no escapes and is valid UTF-8; otherwise it is decoded (with
// encoding/json's rules: invalid UTF-8 becomes U+FFFD).
func (p *parser) strBytes(field string) ([]byte, error) {
	if p.peek() != '"' {
		return nil, p.errf(p.i, field, "expected a string, got %s", p.kindAt())
	}
	start := p.i
	escaped := false
	for j := start + 1; j < len(p.b); j++ {
		switch p.b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			p.i = j + 1
			s := p.b[start+1 : j]
			for k, c := range s {
				if c < 0x20 { // JSON forbids raw control characters
					return nil, p.errf(start+1+k, field, "invalid character %s in string literal", quoteChar(c))
				}
			}
			if !escaped && utf8.Valid(s) {
				return s, nil
			}
			var v string
			if err := json.Unmarshal(p.b[start:j+1], &v); err != nil {
				return nil, p.errf(start, field, "bad string: %w", err)
			}
			return []byte(v), nil
		}
	}
	return nil, p.errf(start, field, "unterminated string")
}

func (p *parser) str(field string) (string, error) {
	s, err := p.strBytes(field)
	return string(s), err
}

// int reads an integer that fits in an int64.
func (p *parser) int(field string) (int64, error) {
	c := p.peek()
	start := p.i
	if c != '-' && (c < '0' || c > '9') {
		return 0, p.errf(start, field, "expected an integer, got %s", p.kindAt())
	}
	neg := c == '-'
	if neg {
		p.i++
	}
	var u uint64
	digits := 0
	overflow := false
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		dgt := uint64(p.b[p.i] - '0')
		if u > (1<<64-1-dgt)/10 {
			overflow = true
		} else {
			u = u*10 + dgt
		}
		p.i++
		digits++
	}
	for p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E' || p.b[p.i] == '+' || p.b[p.i] == '-' || (p.b[p.i] >= '0' && p.b[p.i] <= '9')) {
		p.i++
		digits = -1 << 30 // not an integer
	}
	lit := p.b[start:p.i]
	if digits <= 0 {
		return 0, p.errf(start, field, "expected an integer, got %s", lit)
	}
	if first := start + b2i(neg); digits > 1 && p.b[first] == '0' {
		return 0, p.errf(start, field, "invalid number %s: leading zero", lit)
	}
	limit := uint64(1<<63 - 1)
	if neg {
		limit++
	}
	if overflow || u > limit {
		return 0, p.errf(start, field, "integer %s out of range, expected -2^63..2^63-1", lit)
	}
	if neg {
		return int64(-u), nil
	}
	return int64(u), nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// optStr reads a string or null ("").
func (p *parser) optStr(field string) (string, error) {
	if p.null() {
		return "", nil
	}
	return p.str(field)
}

// optInt reads an integer or null (0).
func (p *parser) optInt(field string) (int64, error) {
	if p.null() {
		return 0, nil
	}
	return p.int(field)
}

// optID reads an id (0..2^31-1) or null (none).
func (p *parser) optID(field string, none int32, what string) (int32, error) {
	if p.null() {
		return none, nil
	}
	pos := p.i
	v, err := p.int(field)
	if err != nil {
		return none, err
	}
	if v < 0 || v > 1<<31-1 {
		return none, p.errf(pos, field, "%s id %d, expected null or 0..%d", what, v, 1<<31-1)
	}
	return int32(v), nil
}

// enum reads a string that must be one of names[1:]; it returns the index.
func (p *parser) enum(field, what string, names []string) (int, error) {
	pos := p.peekPos()
	s, err := p.strBytes(field)
	if err != nil {
		return 0, err
	}
	for k := 1; k < len(names); k++ {
		if string(s) == names[k] {
			return k, nil
		}
	}
	var list bytes.Buffer
	for k := 1; k < len(names); k++ {
		if k > 1 {
			list.WriteString(", ")
		}
		list.WriteString(names[k])
	}
	return 0, p.errf(pos, field, "%s %q, expected one of %s", what, s, list.String())
}

func (p *parser) peekPos() int {
	p.ws()
	return p.i
}

func (p *parser) dtype(field string) (DType, error) {
	k, err := p.enum(field, "dtype", dtypeNames[:])
	return DType(k), err
}

func (p *parser) kind(field string) (TensorKind, error) {
	k, err := p.enum(field, "kind", kindNames[:])
	return TensorKind(k), err
}

func (p *parser) phase(field string) (Phase, error) {
	k, err := p.enum(field, "phase", phaseNames[:])
	return Phase(k), err
}

var flagNames = []string{"", "nondeterministic", "inplace", "impure"}

func (p *parser) flags(field string) (OpFlags, error) {
	if p.null() {
		return 0, nil
	}
	var f OpFlags
	err := p.array(field, func(j int) error {
		pos := p.peekPos()
		el := field + "[" + strconv.Itoa(j) + "]"
		k, err := p.enum(el, "op flag", flagNames)
		if err != nil {
			return err
		}
		bit := OpFlags(1) << (k - 1)
		if f&bit != 0 {
			return p.errf(pos, el, "op flag %q listed twice", flagNames[k])
		}
		f |= bit
		return nil
	})
	return f, err
}

// attrs reads an object of string values (or null).
func (p *parser) attrs(field string) (map[string]string, error) {
	if p.null() {
		return nil, nil
	}
	if err := p.open('{', field, "an object of strings"); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for first := true; ; first = false {
		key, kpos, ok, err := p.member(first)
		if err != nil {
			return nil, err
		}
		if !ok {
			return m, nil
		}
		k := string(key)
		if _, dup := m[k]; dup {
			return nil, p.errf(kpos, field+"."+k, "duplicate attribute %q", k)
		}
		v, err := p.str(field + "." + k)
		if err != nil {
			return nil, err
		}
		m[k] = v
	}
}
