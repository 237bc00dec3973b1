package graph

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// ErrOverflow is returned (wrapped) when a shape's element count or byte size
// does not fit in an int64.
var ErrOverflow = errors.New("size overflows int64")

// Shape is a tensor's dimensions, outermost first. A nil or empty shape is a
// scalar (one element).
type Shape []int64

// NumElements returns the product of the dimensions. A negative dimension or
// a product that overflows int64 is an error.
func (s Shape) NumElements() (int64, error) {
	n := uint64(1)
	for i, d := range s {
		if d < 0 {
			return 0, fmt.Errorf("shape %v: dimension %d is %d, expected >= 0", []int64(s), i, d)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > uint64(1<<63-1) {
			return 0, fmt.Errorf("shape %v: element count: %w", []int64(s), ErrOverflow)
		}
		n = lo
	}
	return int64(n), nil
}

// Bytes returns the storage size of a tensor of this shape and dtype.
func (s Shape) Bytes(d DType) (int64, error) {
	if !d.Valid() {
		return 0, fmt.Errorf("dtype %d: not a valid dtype", uint8(d))
	}
	n, err := s.NumElements()
	if err != nil {
		return 0, err
	}
	hi, lo := bits.Mul64(uint64(n), uint64(d.Size()))
	if hi != 0 || lo > uint64(1<<63-1) {
		return 0, fmt.Errorf("shape %v of %s: bytes: %w", []int64(s), d, ErrOverflow)
	}
	return int64(lo), nil
}

// Equal reports whether two shapes have the same dimensions.
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

// Clone returns a copy of s.
func (s Shape) Clone() Shape {
	if s == nil {
		return nil
	}
	return append(Shape(nil), s...)
}

// String formats the shape as [d0 d1 ...]; a scalar prints as [].
func (s Shape) String() string {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, d := range s {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(strconv.FormatInt(d, 10))
	}
	sb.WriteByte(']')
	return sb.String()
}
