package graph

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

// FuzzDecode feeds arbitrary bytes to Decode: it must return a graph or an
// error, never panic; a decoded graph must encode, and decoding that
// encoding must give the same graph and the same bytes again. The seed
// corpus is testdata/fuzz/FuzzDecode plus the JSON files in testdata.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(handWritten))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Decode(bytes.NewReader(data))
		// Reading one byte at a time moves the window mid-value: the
		// outcome is the same.
		if g1, err1 := Decode(iotest.OneByteReader(bytes.NewReader(data))); (err == nil) != (err1 == nil) ||
			(err != nil && err.Error() != err1.Error()) || (g1 != nil) != (g != nil) {
			t.Fatalf("one-byte reads differ: %v vs %v", err, err1)
		}
		// The hand-rolled scanner agrees with encoding/json on syntax:
		// what it calls a syntax error is invalid JSON, and what it
		// accepts is valid JSON (a leading UTF-8 byte order mark aside).
		body := bytes.TrimPrefix(data, []byte{0xef, 0xbb, 0xbf})
		if err != nil && strings.Contains(err.Error(), "syntax error") && json.Valid(body) {
			t.Fatalf("Decode reports a syntax error in valid JSON: %v", err)
		}
		if err == nil && !json.Valid(body) {
			t.Fatalf("Decode accepted invalid JSON")
		}
		if err != nil {
			if g != nil {
				t.Fatalf("Decode returned a graph and an error %v", err)
			}
			var fe *FormatError
			var ve *ValidationError
			if !errors.As(err, &fe) && !errors.As(err, &ve) {
				t.Fatalf("Decode error %v (%T) is neither a FormatError nor a ValidationError", err, err)
			}
			return
		}
		// ReadFile's counting pass agrees with the decoded graph.
		if nt, no, ok := countElements(bytes.NewReader(data)); !ok || nt != len(g.Tensors) || no != len(g.Ops) {
			t.Fatalf("countElements = %d, %d, %v; the graph has %d tensors and %d ops", nt, no, ok, len(g.Tensors), len(g.Ops))
		}
		var e1 bytes.Buffer
		if err := Encode(&e1, g); err != nil {
			t.Fatalf("a decoded graph must encode: %v", err)
		}
		g2, err := Decode(bytes.NewReader(e1.Bytes()))
		if err != nil {
			t.Fatalf("decoding the encoding failed: %v\n%s", err, e1.Bytes())
		}
		var e2 bytes.Buffer
		if err := Encode(&e2, g2); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(e1.Bytes(), e2.Bytes()) {
			t.Fatalf("Encode(Decode(Encode(g))) differs from Encode(g):\n%s\n---\n%s", e1.Bytes(), e2.Bytes())
		}
	})
}

// FuzzShapeBytes checks Shape.Bytes against exact arithmetic: for any
// dimensions and dtype it either fails (invalid dtype, negative dimension,
// overflow of int64) or returns the exact product computed with math/big.
func FuzzShapeBytes(f *testing.F) {
	f.Add(uint8(4), int64(32), int64(784), int64(1), int64(1), uint8(F32))
	f.Add(uint8(2), int64(1<<31), int64(1<<31), int64(0), int64(0), uint8(F64))
	f.Add(uint8(1), int64(1<<61), int64(0), int64(0), int64(0), uint8(F32))
	f.Add(uint8(3), int64(-1), int64(2), int64(3), int64(0), uint8(I8))
	f.Add(uint8(0), int64(0), int64(0), int64(0), int64(0), uint8(Bool))
	f.Add(uint8(2), int64(0), int64(-5), int64(0), int64(0), uint8(U8))
	f.Add(uint8(1), int64(5), int64(0), int64(0), int64(0), uint8(0))
	f.Add(uint8(3), int64(1<<62), int64(1<<62), int64(0), int64(0), uint8(BF16))
	f.Fuzz(func(t *testing.T, n uint8, d0, d1, d2, d3 int64, dt uint8) {
		dims := []int64{d0, d1, d2, d3}[:n%5]
		s := Shape(dims)
		d := DType(dt)
		got, err := s.Bytes(d)

		var want *big.Int
		valid := d.Valid()
		negative := false
		if valid {
			want = big.NewInt(d.Size())
			for _, x := range dims {
				if x < 0 {
					negative = true
				}
				want.Mul(want, big.NewInt(x))
			}
		}
		// NumElements fails on overflow of the element count alone, even
		// when a zero dimension later would make the product zero.
		elemOverflow := false
		prod := big.NewInt(1)
		for _, x := range dims {
			if x < 0 {
				break
			}
			prod.Mul(prod, big.NewInt(x))
			if !prod.IsInt64() {
				elemOverflow = true
				break
			}
		}
		switch {
		case !valid, negative, elemOverflow, !want.IsInt64():
			if err == nil {
				t.Fatalf("Shape%v.Bytes(%v) = %d, want an error", dims, d, got)
			}
			if valid && !negative && !errors.Is(err, ErrOverflow) {
				t.Fatalf("overflow error %v does not wrap ErrOverflow", err)
			}
		default:
			if err != nil {
				t.Fatalf("Shape%v.Bytes(%v): %v, want %s", dims, d, err, want)
			}
			if got != want.Int64() {
				t.Fatalf("Shape%v.Bytes(%v) = %d, want %s", dims, d, got, want)
			}
		}
	})
}
