package dtrlog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Kind is the INSTRUCTION of one log line.
type Kind uint8

// Instruction kinds.
const (
	Annotate Kind = iota + 1
	Constant
	Memory
	Call
	Alias
	Copy
	CopyFrom
	Release
	Mutate
)

var kindNames = [...]string{"", "ANNOTATE", "CONSTANT", "MEMORY", "CALL", "ALIAS", "COPY", "COPY_FROM", "RELEASE", "MUTATE"}

// String returns the instruction name as written in logs.
func (k Kind) String() string {
	if k < Annotate || k > Mutate {
		return fmt.Sprintf("kind(%d)", uint8(k))
	}
	return kindNames[k]
}

// Annotations of ANNOTATE lines.
const (
	AnnotationStart    = "START"
	AnnotationBackward = "BACKWARD"
)

// Instr is one decoded log line. Which fields are set depends on Kind:
// ANNOTATE: Annotation; CONSTANT, RELEASE: Name; MEMORY: Name, Memory;
// CALL: Name (op), Args, Results, Time; ALIAS: Name, Alias; COPY, COPY_FROM:
// Dst, Src; MUTATE: Name (op), Args, Mutate, Time.
type Instr struct {
	Kind       Kind
	Line       int // 1-based line number in the source (0 if built in code)
	Name       string
	Args       []string
	Results    []string
	Mutate     []int
	Time       int64
	Memory     int64
	Alias      int
	Dst, Src   string
	Annotation string
}

// ErrSyntax is wrapped by every error about a malformed line.
var ErrSyntax = errors.New("dtr log syntax error")

// LineError reports a problem on one line of a log.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string {
	if e.Line <= 0 {
		return fmt.Sprintf("dtr log: %v", e.Err)
	}
	return fmt.Sprintf("dtr log line %d: %v", e.Line, e.Err)
}

// Unwrap returns the underlying error.
func (e *LineError) Unwrap() error { return e.Err }

// Reader streams instructions from a log.
type Reader struct {
	sc   *bufio.Scanner
	line int
	dec  decoder
}

var utf8BOM = []byte{0xef, 0xbb, 0xbf}

// MaxLineBytes is the longest line the Reader accepts.
const MaxLineBytes = 64 << 20

// ErrNoReader is returned by a Reader not created by NewReader.
var ErrNoReader = errors.New("dtrlog: Reader has no source (expected one from NewReader on a non-nil io.Reader)")

// NewReader returns a Reader on r (a nil r reads as an empty log).
func NewReader(r io.Reader) *Reader {
	if r == nil {
		r = bytes.NewReader(nil)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 16<<10), MaxLineBytes)
	return &Reader{sc: sc, dec: decoder{intern: map[string]string{}}}
}

// Next returns the next instruction, skipping blank lines, or io.EOF at the
// end. A malformed line gives a *LineError wrapping ErrSyntax.
func (r *Reader) Next() (Instr, error) {
	var in Instr
	if err := r.next(&in); err != nil {
		return Instr{}, err
	}
	return in, nil
}

// next is Next decoding into *in.
func (r *Reader) next(in *Instr) error {
	if r == nil || r.sc == nil {
		return ErrNoReader
	}
	for r.sc.Scan() {
		r.line++
		b := r.sc.Bytes()
		if r.line == 1 {
			switch {
			case bytes.HasPrefix(b, utf8BOM):
				b = b[len(utf8BOM):] // a UTF-8 byte order mark is accepted
			case bytes.HasPrefix(b, []byte{0xff, 0xfe}), bytes.HasPrefix(b, []byte{0xfe, 0xff}):
				return &LineError{Line: 1, Err: fmt.Errorf("%w: the file is UTF-16 (it starts with a UTF-16 byte order mark): expected UTF-8 JSON lines", ErrSyntax)}
			}
		}
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			continue
		}
		if err := r.dec.parseLine(b, in); err != nil {
			if rerr := r.sc.Err(); rerr != nil {
				// A failed read (a truncated compressed file) cut the
				// line short: the read's error is the cause.
				return readError(r.line, rerr)
			}
			return &LineError{Line: r.line, Err: err}
		}
		in.Line = r.line
		return nil
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return &LineError{Line: r.line + 1, Err: fmt.Errorf("%w: the line is longer than %d bytes (MaxLineBytes)", ErrSyntax, MaxLineBytes)}
		}
		return readError(r.line+1, err)
	}
	return io.EOF
}

// readError is the error of a failed read at line.
func readError(line int, err error) error {
	return &LineError{Line: line, Err: fmt.Errorf("%w: %w", ErrSyntax, err)}
}

func need(field string, p strField, k string) (string, error) {
	if !p.set {
		return "", fmt.Errorf("%w: %s line has no %s", ErrSyntax, k, field)
	}
	return p.v, nil
}

// ParseLine decodes one log line (without its line number).
func ParseLine(b []byte) (Instr, error) {
	var d decoder
	var in Instr
	if err := d.parseLine(b, &in); err != nil {
		return Instr{}, err
	}
	return in, nil
}

// parseLine decodes line b into *in (which it zeroes first).
func (d *decoder) parseLine(b []byte, in *Instr) error {
	*in = Instr{}
	var raw rawLine
	if err := d.decodeLine(b, &raw); err != nil {
		return err
	}
	if !raw.Instruction.set {
		return fmt.Errorf("%w: no INSTRUCTION key", ErrSyntax)
	}
	var err error
	k := raw.Instruction.v
	switch k {
	case "ANNOTATE":
		in.Kind = Annotate
		in.Annotation, err = need("ANNOTATION", raw.Annotation, k)
	case "CONSTANT":
		in.Kind = Constant
		in.Name, err = need("NAME", raw.Name, k)
	case "RELEASE":
		in.Kind = Release
		in.Name, err = need("NAME", raw.Name, k)
	case "MEMORY":
		in.Kind = Memory
		if in.Name, err = need("NAME", raw.Name, k); err != nil {
			break
		}
		if !raw.Memory.set {
			return fmt.Errorf("%w: MEMORY line has no MEMORY", ErrSyntax)
		}
		if raw.Memory.v < 0 {
			return fmt.Errorf("%w: MEMORY of %q is %d, expected >= 0", ErrSyntax, in.Name, raw.Memory.v)
		}
		in.Memory = raw.Memory.v
	case "ALIAS":
		in.Kind = Alias
		if in.Name, err = need("NAME", raw.Name, k); err != nil {
			break
		}
		if !raw.Alias.set {
			return fmt.Errorf("%w: ALIAS line has no ALIAS", ErrSyntax)
		}
		if raw.Alias.v < -1 || raw.Alias.v > 1<<30 {
			return fmt.Errorf("%w: ALIAS of %q is %d, expected -1 or an argument index", ErrSyntax, in.Name, raw.Alias.v)
		}
		in.Alias = int(raw.Alias.v)
	case "COPY", "COPY_FROM":
		in.Kind = Copy
		if k == "COPY_FROM" {
			in.Kind = CopyFrom
		}
		if in.Dst, err = need("DST", raw.Dst, k); err != nil {
			break
		}
		in.Src, err = need("SRC", raw.Src, k)
	case "CALL", "MUTATE":
		in.Kind = Call
		if k == "MUTATE" {
			in.Kind = Mutate
		}
		if in.Name, err = need("NAME", raw.Name, k); err != nil {
			break
		}
		if !raw.Time.set {
			return fmt.Errorf("%w: %s line has no TIME", ErrSyntax, k)
		}
		if raw.Time.v < 0 {
			return fmt.Errorf("%w: TIME of %s %q is %d, expected >= 0", ErrSyntax, k, in.Name, raw.Time.v)
		}
		in.Time = raw.Time.v
		in.Args = raw.Args
		if in.Kind == Call {
			if !raw.ResultSet {
				return fmt.Errorf("%w: CALL line has no RESULT", ErrSyntax)
			}
			in.Results = raw.Result
		} else {
			if !raw.MutateSet {
				return fmt.Errorf("%w: MUTATE line has no MUTATE", ErrSyntax)
			}
			in.Mutate = d.ints(len(raw.Mutate))
			for i, m := range raw.Mutate {
				if !m.set || m.v < 0 || m.v >= int64(len(in.Args)) {
					return fmt.Errorf("%w: MUTATE[%d] of %q is %d, expected an index into its %d ARGS", ErrSyntax, i, in.Name, m.v, len(in.Args))
				}
				in.Mutate[i] = int(m.v)
			}
		}
	default:
		return fmt.Errorf("%w: INSTRUCTION %q: expected one of ANNOTATE, CONSTANT, MEMORY, CALL, ALIAS, COPY, COPY_FROM, RELEASE, MUTATE", ErrSyntax, k)
	}
	return err
}

// ints returns a slice of n ints for an instruction's MUTATE: a new one, or
// in reuse mode the decoder's scratch.
func (d *decoder) ints(n int) []int {
	if !d.reuse {
		return make([]int, n)
	}
	if cap(d.idx) < n {
		d.idx = make([]int, n)
	}
	return d.idx[:n]
}

// ReadAll reads every instruction of a log.
func ReadAll(r io.Reader) ([]Instr, error) {
	rd := NewReader(r)
	var out []Instr
	for {
		in, err := rd.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
}
