package graph

import (
	"fmt"
	"strings"
)

// DType is the element type of a tensor.
type DType uint8

// Element types. The zero value is invalid so that a forgotten dtype is caught
// by validation.
const (
	F32 DType = iota + 1
	F16
	BF16
	F64
	I64
	I32
	I8
	U8
	Bool
)

var dtypeNames = [...]string{"", "f32", "f16", "bf16", "f64", "i64", "i32", "i8", "u8", "bool"}
var dtypeSizes = [...]int64{0, 4, 2, 2, 8, 8, 4, 1, 1, 1}

// Valid reports whether d is one of the defined element types.
func (d DType) Valid() bool { return d >= F32 && d <= Bool }

// Size is the number of bytes of one element (0 for an invalid dtype).
func (d DType) Size() int64 {
	if !d.Valid() {
		return 0
	}
	return dtypeSizes[d]
}

// String returns the dtype's short name (f32, bf16, ...).
func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeNames[d]
}

// ParseDType parses a dtype name. It accepts the short names (f32, f16, bf16,
// f64, i64, i32, i8, u8, bool) and the common long spellings (float32,
// float16, half, bfloat16, float64, double, int64, int32, int8, uint8).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "f32", "float32", "float":
		return F32, nil
	case "f16", "float16", "half":
		return F16, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "f64", "float64", "double":
		return F64, nil
	case "i64", "int64", "long":
		return I64, nil
	case "i32", "int32", "int":
		return I32, nil
	case "i8", "int8":
		return I8, nil
	case "u8", "uint8":
		return U8, nil
	case "bool":
		return Bool, nil
	}
	return 0, fmt.Errorf("dtype %q: expected one of f32, f16, bf16, f64, i64, i32, i8, u8, bool", s)
}

// MarshalText implements encoding.TextMarshaler.
func (d DType) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("dtype %d: not a valid dtype", uint8(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
