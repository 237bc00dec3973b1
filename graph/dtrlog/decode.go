package dtrlog

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// A hand-rolled decoder for the fixed shape of a log line: one JSON object
// whose known keys hold strings, string arrays, integers (JSON strings or
// numbers) or an integer array; unknown keys are skipped whatever their
// value. It follows encoding/json where a line is valid JSON (keys match
// case-insensitively, the last of duplicate keys wins, null leaves a field
// unset, invalid UTF-8 in strings becomes U+FFFD) and rejects what
// encoding/json rejects, without reflection and, for names already seen,
// without allocating (the Reader interns them).

// strField is a string-valued key.
type strField struct {
	v   string
	set bool
}

// num is an integer-valued key: a JSON string holding a decimal integer
// ("123", as the logs write them) or a JSON number.
type num struct {
	v   int64
	set bool
}

// rawLine holds the keys of one line.
type rawLine struct {
	Instruction, Name, Dst, Src, Annotation strField
	Memory, Time, Alias                     num
	Args, Result                            []string
	ArgsSet, ResultSet                      bool
	Mutate                                  []num
	MutateSet                               bool
}

// maxDepth bounds the nesting of skipped values (encoding/json's limit).
const maxDepth = 10000

type decoder struct {
	b      []byte
	i      int
	buf    []byte            // scratch for unescaped strings
	intern map[string]string // names seen (nil: no interning)
	// xnames interns the numbered names of the logs' tensors ("x<n>", or
	// sim convert's "t<n>": one letter and a number) by number (names.go:
	// the fast path; other names, and those outside its window, go to
	// intern).
	xnames window[string]
	// reuse: the arrays of a line are decoded into the scratch slices below,
	// valid until the next line, instead of new slices.
	reuse         bool
	args, results []string
	mutate        []num
	idx           []int
}

func kindOfValue(c byte) string {
	switch {
	case c == '"':
		return "a string"
	case c == '[':
		return "an array"
	case c == '{':
		return "an object"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case c == '-' || (c >= '0' && c <= '9'):
		return "a number"
	case c == 0:
		return "the end of the line"
	}
	return fmt.Sprintf("%q", c)
}

// errf returns a syntax error at the current column.
func (d *decoder) errf(format string, a ...any) error {
	return fmt.Errorf("%w: column %d: %s", ErrSyntax, d.i+1, fmt.Sprintf(format, a...))
}

func (d *decoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end).
func (d *decoder) peek() byte {
	if d.i < len(d.b) && d.b[d.i] > ' ' {
		return d.b[d.i]
	}
	d.ws()
	if d.i >= len(d.b) {
		return 0
	}
	return d.b[d.i]
}

func (d *decoder) expect(c byte, what string) error {
	if got := d.peek(); got != c {
		if got == 0 {
			return d.errf("unexpected end of line, expected %s", what)
		}
		return d.errf("found %q, expected %s", got, what)
	}
	d.i++
	return nil
}

// decodeLine decodes b into raw.
func (d *decoder) decodeLine(b []byte, raw *rawLine) error {
	d.b, d.i = b, 0
	if d.peek() == 'n' {
		// encoding/json accepts a top-level null (nothing is set)
		if err := d.literal("null"); err != nil {
			return err
		}
	} else if err := d.object(raw); err != nil {
		return err
	}
	if d.ws(); d.i < len(d.b) {
		return d.errf("found %q after the object, expected the end of the line", d.b[d.i])
	}
	return nil
}

func (d *decoder) object(raw *rawLine) error {
	if c := d.peek(); c != '{' {
		if c == 0 {
			return d.errf("empty value, expected a JSON object")
		}
		return d.errf("found %s, expected a JSON object", kindOfValue(c))
	}
	d.i++
	if d.peek() == '}' {
		d.i++
		return nil
	}
	for {
		if c := d.peek(); c != '"' {
			if c == 0 {
				return d.errf("unexpected end of line, expected a key")
			}
			return d.errf("found %q, expected a key (a string)", c)
		}
		k := d.quotedKey()
		if k == keyUnknown {
			key, err := d.str()
			if err != nil {
				return err
			}
			if err := d.expect(':', "':' after a key"); err != nil {
				return err
			}
			k = keyOf(key)
		}
		if err := d.field(k, raw); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return nil
		case 0:
			return d.errf("unexpected end of line, expected ',' or '}'")
		default:
			return d.errf("found %q, expected ',' or '}'", d.b[d.i])
		}
	}
}

// The keys a line may hold, as indexes into keyNames.
const (
	keyInstruction = iota
	keyName
	keyDst
	keySrc
	keyAnnotation
	keyMemory
	keyTime
	keyAlias
	keyArgs
	keyResult
	keyMutate
	keyUnknown
)

// keyNames are the keys a line may hold.
var keyNames = [...]string{"INSTRUCTION", "NAME", "DST", "SRC", "ANNOTATION", "MEMORY", "TIME", "ALIAS", "ARGS", "RESULT", "MUTATE"}

// keyOf returns the key (keyUnknown for none) that key names as
// encoding/json matches keys (exactly or else under Unicode case folding).
func keyOf(key []byte) int {
	switch string(key) {
	case "INSTRUCTION":
		return keyInstruction
	case "NAME":
		return keyName
	case "DST":
		return keyDst
	case "SRC":
		return keySrc
	case "ANNOTATION":
		return keyAnnotation
	case "MEMORY":
		return keyMemory
	case "TIME":
		return keyTime
	case "ALIAS":
		return keyAlias
	case "ARGS":
		return keyArgs
	case "RESULT":
		return keyResult
	case "MUTATE":
		return keyMutate
	}
	return foldKey(key)
}

// foldKey returns the known key matching key under Unicode case folding, or
// keyUnknown. A key holding a non-ASCII rune is longer than the ASCII name
// it may fold to, and an ASCII key folds only to a name of its length.
func foldKey(key []byte) int {
	for k, name := range keyNames {
		switch {
		case len(key) == len(name):
			ok := true
			for i := 0; i < len(key) && ok; i++ {
				c := key[i]
				if 'a' <= c && c <= 'z' {
					c -= 'a' - 'A'
				}
				ok = c == name[i]
			}
			if ok {
				return k
			}
		case len(key) > len(name) && strings.EqualFold(string(key), name):
			return k
		}
	}
	return keyUnknown
}

// quotedKeys are the keys as the logs write them: `"NAME":`.
var quotedKeys = func() (q [keyUnknown]string) {
	for k, name := range keyNames {
		q[k] = `"` + name + `":`
	}
	return q
}()

// quotedKey returns the key at d.i, after its colon, when it is written as
// in quotedKeys (the common case, checked without scanning a string), else
// keyUnknown, leaving d.i as it was.
func (d *decoder) quotedKey() int {
	rest := d.b[d.i:]
	if len(rest) < 3 {
		return keyUnknown
	}
	var k int
	switch rest[1] {
	case 'I':
		k = keyInstruction
	case 'N':
		k = keyName
	case 'D':
		k = keyDst
	case 'S':
		k = keySrc
	case 'T':
		k = keyTime
	case 'R':
		k = keyResult
	case 'M':
		k = keyMemory
		if rest[2] == 'U' {
			k = keyMutate
		}
	case 'A':
		switch rest[2] {
		case 'N':
			k = keyAnnotation
		case 'L':
			k = keyAlias
		default:
			k = keyArgs
		}
	default:
		return keyUnknown
	}
	q := quotedKeys[k]
	if len(rest) < len(q) || string(rest[:len(q)]) != q {
		return keyUnknown
	}
	d.i += len(q)
	return k
}

// field decodes the value of key k (keyUnknown: skips it).
func (d *decoder) field(k int, raw *rawLine) error {
	switch k {
	case keyInstruction:
		return d.strValue("INSTRUCTION", &raw.Instruction, true)
	case keyName:
		return d.strValue("NAME", &raw.Name, false)
	case keyDst:
		return d.strValue("DST", &raw.Dst, false)
	case keySrc:
		return d.strValue("SRC", &raw.Src, false)
	case keyAnnotation:
		return d.strValue("ANNOTATION", &raw.Annotation, false)
	case keyMemory:
		return d.numValue("MEMORY", -1, &raw.Memory)
	case keyTime:
		return d.numValue("TIME", -1, &raw.Time)
	case keyAlias:
		return d.numValue("ALIAS", -1, &raw.Alias)
	case keyArgs:
		return d.strList("ARGS", &raw.Args, &raw.ArgsSet, &d.args)
	case keyResult:
		return d.strList("RESULT", &raw.Result, &raw.ResultSet, &d.results)
	case keyMutate:
		return d.numList("MUTATE", &raw.Mutate, &raw.MutateSet)
	}
	return d.skip(0)
}

// name turns string bytes into a string, interned when the decoder has a
// table (log names repeat on many lines).
func (d *decoder) name(b []byte) string {
	if d.intern == nil {
		return string(b)
	}
	if p, n, ok := numbered(b); ok && d.xnames.holds(p) {
		if s, ok := d.xnames.get(n); ok {
			return s
		}
		if d.xnames.fits(n) {
			s := string(b)
			d.xnames.set(p, n, s)
			return s
		}
	}
	if s, ok := d.intern[string(b)]; ok {
		return s
	}
	s := string(b)
	d.intern[s] = s
	return s
}

// keyword returns the INSTRUCTION b as a constant string when it is one of
// the instructions, else as name does.
func (d *decoder) keyword(b []byte) string {
	switch string(b) {
	case "ANNOTATE":
		return "ANNOTATE"
	case "CONSTANT":
		return "CONSTANT"
	case "MEMORY":
		return "MEMORY"
	case "CALL":
		return "CALL"
	case "ALIAS":
		return "ALIAS"
	case "COPY":
		return "COPY"
	case "COPY_FROM":
		return "COPY_FROM"
	case "RELEASE":
		return "RELEASE"
	case "MUTATE":
		return "MUTATE"
	}
	return d.name(b)
}

// strValue decodes a string-valued key (keyword: an INSTRUCTION).
func (d *decoder) strValue(field string, f *strField, keyword bool) error {
	switch c := d.peek(); c {
	case '"':
		b, err := d.str()
		if err != nil {
			return err
		}
		if keyword {
			f.v = d.keyword(b)
		} else {
			f.v = d.name(b)
		}
		f.set = true
		return nil
	case 'n':
		f.v, f.set = "", false
		return d.literal("null")
	case 0:
		return d.errf("%s has no value, expected a string", field)
	default:
		return d.errf("%s is %s, expected a string", field, kindOfValue(c))
	}
}

// strList decodes an array of strings into *out (a new slice, or in reuse
// mode the scratch *scratch).
func (d *decoder) strList(field string, out *[]string, set *bool, scratch *[]string) error {
	return list(d, field, "strings", 4, out, set, scratchFor(d, scratch), func(k int) (string, error) {
		switch c := d.peek(); c {
		case '"':
			b, err := d.str()
			if err != nil {
				return "", err
			}
			return d.name(b), nil
		case 'n':
			return "", d.literal("null") // "" as encoding/json
		case 0:
			return "", d.errf("unexpected end of line in %s, expected a string", field)
		default:
			return "", d.errf("%s[%d] is %s, expected a string", field, k, kindOfValue(c))
		}
	})
}

// list decodes a JSON array (or null) of what into *out, one element at a
// time with elem, and sets *set when the field held an array. The elements
// go into a new slice, or into *scratch (kept for the next line) when
// scratch is not nil.
func list[E any](d *decoder, field, what string, capHint int, out *[]E, set *bool, scratch *[]E, elem func(k int) (E, error)) error {
	switch c := d.peek(); c {
	case '[':
	case 'n':
		*out, *set = nil, false
		return d.literal("null")
	case 0:
		return d.errf("%s has no value, expected an array of %s", field, what)
	default:
		return d.errf("%s is %s, expected an array of %s", field, kindOfValue(c), what)
	}
	d.i++
	var xs []E
	if scratch != nil && *scratch != nil {
		xs = (*scratch)[:0]
	} else {
		xs = make([]E, 0, capHint)
	}
	if d.peek() != ']' {
		for k := 0; ; k++ {
			x, err := elem(k)
			if err != nil {
				return err
			}
			xs = append(xs, x)
			c := d.peek()
			if c == ']' {
				break
			}
			switch c {
			case ',':
				d.i++
			case 0:
				return d.errf("unexpected end of line in %s, expected ',' or ']'", field)
			default:
				return d.errf("found %q in %s, expected ',' or ']'", c, field)
			}
		}
	}
	d.i++ // ']'
	if scratch != nil {
		*scratch = xs
	}
	*out, *set = xs, true
	return nil
}

// scratchFor returns scratch in reuse mode, else nil (new slices).
func scratchFor[E any](d *decoder, scratch *[]E) *[]E {
	if d.reuse {
		return scratch
	}
	return nil
}

// numValue decodes an integer-valued key, or element k of one when k >= 0.
func (d *decoder) numValue(key string, k int, n *num) error {
	switch c := d.peek(); {
	case c == '"':
		b, err := d.str()
		if err != nil {
			return err
		}
		v, ok := parseInt(b)
		if !ok {
			return d.errf("%s %q: expected a decimal integer in int64 range", elemName(key, k), b)
		}
		n.v, n.set = v, true
		return nil
	case c == '-' || (c >= '0' && c <= '9'):
		b, err := d.number()
		if err != nil {
			return err
		}
		v, ok := parseInt(b)
		if !ok {
			return d.errf("%s %s: expected a decimal integer in int64 range", elemName(key, k), b)
		}
		n.v, n.set = v, true
		return nil
	case c == 'n':
		return d.literal("null") // leaves the field as it was
	case c == 0:
		return d.errf("%s has no value, expected an integer", elemName(key, k))
	default:
		return d.errf("%s is %s, expected an integer (a decimal string or number)", elemName(key, k), kindOfValue(c))
	}
}

// elemName names key, or its element k when k >= 0 ("MUTATE[2]").
func elemName(key string, k int) string {
	if k < 0 {
		return key
	}
	return fmt.Sprintf("%s[%d]", key, k)
}

func (d *decoder) numList(field string, out *[]num, set *bool) error {
	return list(d, field, "integers", 2, out, set, scratchFor(d, &d.mutate), func(k int) (num, error) {
		var n num
		err := d.numValue(field, k, &n)
		return n, err
	})
}

// parseInt parses an optionally signed decimal integer (as
// strconv.ParseInt(s, 10, 64) does) without allocating.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	neg := false
	switch b[0] {
	case '-':
		neg = true
		b = b[1:]
	case '+':
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if u > (1<<63)/10 {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case neg && u > 1<<63:
		return 0, false
	case neg:
		return -int64(u), true
	case u > 1<<63-1:
		return 0, false
	}
	return int64(u), true
}

// literal consumes the literal word (true, false, null).
func (d *decoder) literal(w string) error {
	if len(d.b)-d.i < len(w) || string(d.b[d.i:d.i+len(w)]) != w {
		return d.errf("invalid literal, expected %s", w)
	}
	d.i += len(w)
	return nil
}

// number consumes a JSON number and returns its text.
func (d *decoder) number() ([]byte, error) {
	start := d.i
	b := d.b
	i := d.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() int {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i - j
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		d.i = i
		return nil, d.errf("invalid number, expected a digit")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			d.i = i
			return nil, d.errf("invalid number, expected a digit after '.'")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			d.i = i
			return nil, d.errf("invalid number, expected a digit in the exponent")
		}
	}
	d.i = i
	return b[start:i], nil
}

// plain marks the bytes a string holds as they are: not the quote, the
// backslash, a control character or part of a non-ASCII rune.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str consumes a JSON string and returns its contents: a slice of the line
// when it has no escapes and is valid UTF-8, else the decoded bytes in the
// decoder's scratch buffer (valid until the next call).
func (d *decoder) str() ([]byte, error) {
	d.i++ // opening quote
	start := d.i
	b := d.b
	n := 0 // plain bytes from start
	for rest := b[start:]; n < len(rest) && plain[rest[n]]; n++ {
	}
	i := start + n
	if i < len(b) && b[i] == '"' {
		d.i = i + 1
		return b[start:i], nil
	}
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			d.i = i + 1
			return d.unescape(b[start:i])
		case c == '\\':
			i++ // skip the escaped byte (checked by unescape)
		case c < 0x20:
			d.i = i
			return nil, d.errf("control character %q in a string", c)
		}
	}
	d.i = len(b)
	return nil, d.errf("unterminated string")
}

// unescape decodes the contents s of a string with escapes or non-ASCII
// bytes; d.i is just past the closing quote.
func (d *decoder) unescape(s []byte) ([]byte, error) {
	out := d.buf[:0]
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) {
				return nil, d.errf("invalid escape at the end of a string")
			}
			e := s[i+1]
			i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hex4(s[i:])
				if !ok {
					return nil, d.errf(`invalid \u escape in a string, expected 4 hex digits`)
				}
				i += 4
				if utf16.IsSurrogate(r) {
					r = utf8.RuneError
					if r2, ok := hex4low(s[i:]); ok {
						if dec := utf16.DecodeRune(rune(mustHex(s[i-4:i])), r2); dec != utf8.RuneError {
							r = dec
							i += 6
						}
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				return nil, d.errf("invalid escape %q in a string", "\\"+string(e))
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError) // as encoding/json
			} else {
				out = append(out, s[i:i+size]...)
			}
			i += size
		}
	}
	d.buf = out
	return out, nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 32)
	if err != nil {
		return 0, false
	}
	return rune(v), true
}

func mustHex(b []byte) rune {
	r, _ := hex4(b)
	return r
}

// hex4low reads a \uXXXX escape holding a low surrogate.
func hex4low(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	return hex4(b[2:])
}

// skip consumes any JSON value (an unknown key's).
func (d *decoder) skip(depth int) error {
	if depth > maxDepth {
		return d.errf("values nested deeper than %d levels", maxDepth)
	}
	switch c := d.peek(); {
	case c == '"':
		_, err := d.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		_, err := d.number()
		return err
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.literal("null")
	case c == '[':
		d.i++
		if d.peek() == ']' {
			d.i++
			return nil
		}
		for {
			if err := d.skip(depth + 1); err != nil {
				return err
			}
			switch d.peek() {
			case ',':
				d.i++
			case ']':
				d.i++
				return nil
			default:
				return d.errf("unexpected %s in an array, expected ',' or ']'", kindOfValue(d.peek()))
			}
		}
	case c == '{':
		d.i++
		if d.peek() == '}' {
			d.i++
			return nil
		}
		for {
			if d.peek() != '"' {
				return d.errf("unexpected %s in an object, expected a key", kindOfValue(d.peek()))
			}
			if _, err := d.str(); err != nil {
				return err
			}
			if err := d.expect(':', "':' after a key"); err != nil {
				return err
			}
			if err := d.skip(depth + 1); err != nil {
				return err
			}
			switch d.peek() {
			case ',':
				d.i++
			case '}':
				d.i++
				return nil
			default:
				return d.errf("unexpected %s in an object, expected ',' or '}'", kindOfValue(d.peek()))
			}
		}
	case c == 0:
		return d.errf("unexpected end of line, expected a value")
	}
	return d.errf("unexpected %q, expected a value", d.b[d.i])
}
