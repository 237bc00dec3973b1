package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/remat-dev/remat/graph"
)

// ErrUnsupported is wrapped by the error of a model that uses op types,
// data types or features the importer does not handle.
var ErrUnsupported = errors.New("unsupported")

// MaxModelBytes bounds the size of a model ReadModel accepts (2 GiB, the
// protobuf limit; files with external weights are smaller).
const MaxModelBytes = 2 << 30

// ReadModel reads and parses a binary ModelProto.
func ReadModel(r io.Reader) (*ModelProto, error) {
	if r == nil {
		return nil, fmt.Errorf("onnx: reader is nil")
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxModelBytes+1))
	if err != nil {
		return nil, fmt.Errorf("onnx: reading model: %w", err)
	}
	if len(data) > MaxModelBytes {
		return nil, fmt.Errorf("onnx: model is larger than %d bytes, expected a protobuf message within the 2 GiB limit", MaxModelBytes)
	}
	m := &ModelProto{}
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("onnx: parsing ModelProto (%d bytes): %w", len(data), err)
	}
	if m.Graph == nil {
		return nil, fmt.Errorf("onnx: model has no graph (field ModelProto.graph is empty), expected a GraphProto")
	}
	return m, nil
}

// dtypeOf maps an ONNX element type to a graph dtype (0 if there is none).
func dtypeOf(et int32) graph.DType {
	switch TensorProto_DataType(et) {
	case TensorProto_FLOAT:
		return graph.F32
	case TensorProto_FLOAT16:
		return graph.F16
	case TensorProto_BFLOAT16:
		return graph.BF16
	case TensorProto_DOUBLE:
		return graph.F64
	case TensorProto_INT64:
		return graph.I64
	case TensorProto_INT32:
		return graph.I32
	case TensorProto_INT8:
		return graph.I8
	case TensorProto_UINT8:
		return graph.U8
	case TensorProto_BOOL:
		return graph.Bool
	}
	return 0
}

// typeName names an ONNX element type for error messages.
func typeName(et int32) string {
	if s, ok := TensorProto_DataType_name[et]; ok {
		return s
	}
	return fmt.Sprintf("type %d", et)
}

// isFloatType reports whether an ONNX element type holds floating-point
// values.
func isFloatType(et int32) bool {
	switch TensorProto_DataType(et) {
	case TensorProto_FLOAT, TensorProto_FLOAT16, TensorProto_BFLOAT16, TensorProto_DOUBLE:
		return true
	}
	return false
}

// isIntType reports whether an ONNX element type holds integers (or bools).
func isIntType(et int32) bool {
	switch TensorProto_DataType(et) {
	case TensorProto_INT64, TensorProto_INT32, TensorProto_INT16, TensorProto_INT8,
		TensorProto_UINT8, TensorProto_UINT16, TensorProto_UINT32, TensorProto_UINT64, TensorProto_BOOL:
		return true
	}
	return false
}

// numel is the element count of a shape, saturating at MaxInt64.
func numel(s []int64) int64 {
	n := int64(1)
	for _, d := range s {
		n = mulSat(n, d)
	}
	return n
}

// mulSat multiplies non-negative numbers, saturating at MaxInt64.
func mulSat(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// addSat adds non-negative numbers, saturating at MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// tensorData decodes the values of a TensorProto: integers (and bools) into
// ints, floating-point values into flts. Only tensors of at most maxFold
// elements are decoded; ok is false for larger ones, external data and
// types without a numeric decoding.
func tensorData(t *TensorProto, shape []int64) (ints []int64, flts []float64, ok bool, err error) {
	n := numel(shape)
	if n > maxFold || t.GetDataLocation() == TensorProto_EXTERNAL || len(t.GetExternalData()) > 0 {
		return nil, nil, false, nil
	}
	et := t.GetDataType()
	raw := t.GetRawData()
	name := t.GetName()
	bad := func(have int64, field string) error {
		return fmt.Errorf("tensor %q: %s holds %d values, expected %d for shape %v", name, field, have, n, shape)
	}
	if raw != nil {
		size := map[TensorProto_DataType]int64{
			TensorProto_FLOAT: 4, TensorProto_DOUBLE: 8, TensorProto_INT64: 8, TensorProto_INT32: 4,
			TensorProto_INT16: 2, TensorProto_INT8: 1, TensorProto_UINT8: 1, TensorProto_UINT16: 2,
			TensorProto_UINT32: 4, TensorProto_UINT64: 8, TensorProto_BOOL: 1, TensorProto_FLOAT16: 2,
			TensorProto_BFLOAT16: 2,
		}[TensorProto_DataType(et)]
		if size == 0 {
			return nil, nil, false, nil
		}
		if int64(len(raw)) != n*size {
			return nil, nil, false, fmt.Errorf("tensor %q: raw_data has %d bytes, expected %d (%d elements of %s)", name, len(raw), n*size, n, typeName(et))
		}
		if isFloatType(et) {
			flts = make([]float64, n)
		} else {
			ints = make([]int64, n)
		}
		le := binary.LittleEndian
		for i := int64(0); i < n; i++ {
			b := raw[i*size:]
			switch TensorProto_DataType(et) {
			case TensorProto_FLOAT:
				flts[i] = float64(math.Float32frombits(le.Uint32(b)))
			case TensorProto_DOUBLE:
				flts[i] = math.Float64frombits(le.Uint64(b))
			case TensorProto_FLOAT16:
				flts[i] = half(le.Uint16(b))
			case TensorProto_BFLOAT16:
				flts[i] = float64(math.Float32frombits(uint32(le.Uint16(b)) << 16))
			case TensorProto_INT64, TensorProto_UINT64:
				ints[i] = int64(le.Uint64(b))
			case TensorProto_INT32:
				ints[i] = int64(int32(le.Uint32(b)))
			case TensorProto_UINT32:
				ints[i] = int64(le.Uint32(b))
			case TensorProto_INT16:
				ints[i] = int64(int16(le.Uint16(b)))
			case TensorProto_UINT16:
				ints[i] = int64(le.Uint16(b))
			case TensorProto_INT8:
				ints[i] = int64(int8(b[0]))
			default: // UINT8, BOOL
				ints[i] = int64(b[0])
			}
		}
		return ints, flts, true, nil
	}
	switch TensorProto_DataType(et) {
	case TensorProto_FLOAT:
		d := t.GetFloatData()
		if int64(len(d)) != n {
			return nil, nil, false, bad(int64(len(d)), "float_data")
		}
		flts = make([]float64, n)
		for i, v := range d {
			flts[i] = float64(v)
		}
	case TensorProto_DOUBLE:
		d := t.GetDoubleData()
		if int64(len(d)) != n {
			return nil, nil, false, bad(int64(len(d)), "double_data")
		}
		flts = append([]float64(nil), d...)
	case TensorProto_INT64:
		d := t.GetInt64Data()
		if int64(len(d)) != n {
			return nil, nil, false, bad(int64(len(d)), "int64_data")
		}
		ints = append([]int64(nil), d...)
	case TensorProto_UINT32, TensorProto_UINT64:
		d := t.GetUint64Data()
		if int64(len(d)) != n {
			return nil, nil, false, bad(int64(len(d)), "uint64_data")
		}
		ints = make([]int64, n)
		for i, v := range d {
			ints[i] = int64(v)
		}
	case TensorProto_INT32, TensorProto_INT16, TensorProto_INT8, TensorProto_UINT16, TensorProto_UINT8, TensorProto_BOOL:
		d := t.GetInt32Data()
		if int64(len(d)) != n {
			return nil, nil, false, bad(int64(len(d)), "int32_data")
		}
		ints = make([]int64, n)
		for i, v := range d {
			ints[i] = int64(v)
		}
	case TensorProto_FLOAT16, TensorProto_BFLOAT16:
		d := t.GetInt32Data()
		if int64(len(d)) != n {
			return nil, nil, false, bad(int64(len(d)), "int32_data")
		}
		flts = make([]float64, n)
		for i, v := range d {
			if TensorProto_DataType(et) == TensorProto_FLOAT16 {
				flts[i] = half(uint16(v))
			} else {
				flts[i] = float64(math.Float32frombits(uint32(uint16(v)) << 16))
			}
		}
	default:
		return nil, nil, false, nil
	}
	return ints, flts, true, nil
}

// half decodes an IEEE 754 binary16 value.
func half(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	frac := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * frac * math.Pow(2, -24)
	case 31:
		if frac == 0 {
			return sign * math.Inf(1)
		}
		return math.NaN()
	}
	return sign * (1 + frac/1024) * math.Pow(2, float64(exp-15))
}

// ---- attributes ----

func findAttr(n *NodeProto, name string) *AttributeProto {
	for _, a := range n.GetAttribute() {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

func attrInt(n *NodeProto, name string, def int64) (int64, error) {
	a := findAttr(n, name)
	if a == nil {
		return def, nil
	}
	if a.GetType() != AttributeProto_INT && a.GetType() != AttributeProto_UNDEFINED {
		return 0, fmt.Errorf("attribute %q has type %s, expected INT", name, a.GetType())
	}
	return a.GetI(), nil
}

func attrFloat(n *NodeProto, name string, def float64) (float64, error) {
	a := findAttr(n, name)
	if a == nil {
		return def, nil
	}
	if a.GetType() != AttributeProto_FLOAT && a.GetType() != AttributeProto_UNDEFINED {
		return 0, fmt.Errorf("attribute %q has type %s, expected FLOAT", name, a.GetType())
	}
	return float64(a.GetF()), nil
}

func attrInts(n *NodeProto, name string) ([]int64, bool, error) {
	a := findAttr(n, name)
	if a == nil {
		return nil, false, nil
	}
	if a.GetType() != AttributeProto_INTS && a.GetType() != AttributeProto_UNDEFINED {
		return nil, false, fmt.Errorf("attribute %q has type %s, expected INTS", name, a.GetType())
	}
	return a.GetInts(), true, nil
}

func attrStrings(n *NodeProto, name string) ([]string, error) {
	a := findAttr(n, name)
	if a == nil {
		return nil, nil
	}
	if a.GetType() != AttributeProto_STRINGS && a.GetType() != AttributeProto_UNDEFINED {
		return nil, fmt.Errorf("attribute %q has type %s, expected STRINGS", name, a.GetType())
	}
	out := make([]string, len(a.GetStrings()))
	for i, b := range a.GetStrings() {
		out[i] = string(b)
	}
	return out, nil
}

func attrString(n *NodeProto, name, def string) (string, error) {
	a := findAttr(n, name)
	if a == nil {
		return def, nil
	}
	if a.GetType() != AttributeProto_STRING && a.GetType() != AttributeProto_UNDEFINED {
		return "", fmt.Errorf("attribute %q has type %s, expected STRING", name, a.GetType())
	}
	return string(a.GetS()), nil
}
