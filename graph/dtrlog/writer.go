package dtrlog

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Writer writes instructions in the DTR log format, one JSON object per line
// with keys sorted as the original logs have them and numbers as strings
// (MUTATE indices as JSON integers, as in the original logs).
type Writer struct {
	w   *bufio.Writer
	buf []byte
}

// NewWriter returns a Writer on w. Call Flush when done.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriter(w)} }

// ErrNoWriter is returned by a Writer not created by NewWriter (or on a nil
// io.Writer).
var ErrNoWriter = errors.New("dtrlog: Writer has no destination (expected one from NewWriter on a non-nil io.Writer)")

// Flush writes buffered lines to the underlying writer.
func (w *Writer) Flush() error {
	if w == nil || w.w == nil {
		return ErrNoWriter
	}
	return w.w.Flush()
}

func appendStr(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

func appendKV(b []byte, first bool, k, v string) []byte {
	if !first {
		b = append(b, ',')
	}
	b = appendStr(b, k)
	b = append(b, ':')
	return appendStr(b, v)
}

func appendList(b []byte, k string, xs []string) []byte {
	b = append(b, ',')
	b = appendStr(b, k)
	b = append(b, ":["...)
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendStr(b, x)
	}
	return append(b, ']')
}

// Write writes one instruction.
func (w *Writer) Write(in Instr) error {
	if w == nil || w.w == nil {
		return ErrNoWriter
	}
	b := append(w.buf[:0], '{')
	switch in.Kind {
	case Annotate:
		b = appendKV(b, true, "ANNOTATION", in.Annotation)
		b = appendKV(b, false, "INSTRUCTION", "ANNOTATE")
	case Constant, Release:
		b = appendKV(b, true, "INSTRUCTION", in.Kind.String())
		b = appendKV(b, false, "NAME", in.Name)
	case Memory:
		b = appendKV(b, true, "INSTRUCTION", "MEMORY")
		b = appendKV(b, false, "MEMORY", strconv.FormatInt(in.Memory, 10))
		b = appendKV(b, false, "NAME", in.Name)
	case Alias:
		b = appendKV(b, true, "ALIAS", strconv.Itoa(in.Alias))
		b = appendKV(b, false, "INSTRUCTION", "ALIAS")
		b = appendKV(b, false, "NAME", in.Name)
	case Copy, CopyFrom:
		b = appendKV(b, true, "DST", in.Dst)
		b = appendKV(b, false, "INSTRUCTION", in.Kind.String())
		b = appendKV(b, false, "SRC", in.Src)
	case Call:
		b = appendStr(b, "ARGS")
		b = append(b, ':', '[')
		for i, x := range in.Args {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendStr(b, x)
		}
		b = append(b, ']')
		b = appendKV(b, false, "INSTRUCTION", "CALL")
		b = appendKV(b, false, "NAME", in.Name)
		b = appendList(b, "RESULT", in.Results)
		b = appendKV(b, false, "TIME", strconv.FormatInt(in.Time, 10))
	case Mutate:
		b = appendStr(b, "ARGS")
		b = append(b, ':', '[')
		for i, x := range in.Args {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendStr(b, x)
		}
		b = append(b, ']')
		b = appendKV(b, false, "INSTRUCTION", "MUTATE")
		b = append(b, `,"MUTATE":[`...)
		for i, m := range in.Mutate {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(m), 10)
		}
		b = append(b, ']')
		b = appendKV(b, false, "NAME", in.Name)
		b = appendKV(b, false, "TIME", strconv.FormatInt(in.Time, 10))
	default:
		return fmt.Errorf("dtrlog: write instruction kind %d: expected a defined kind", in.Kind)
	}
	b = append(b, '}', '\n')
	w.buf = b
	_, err := w.w.Write(b)
	return err
}

// WriteAll writes instructions to w.
func WriteAll(w io.Writer, ins []Instr) error {
	if w == nil {
		return ErrNoWriter
	}
	wr := NewWriter(w)
	for _, in := range ins {
		if err := wr.Write(in); err != nil {
			return err
		}
	}
	return wr.Flush()
}
