package graph

import (
	"encoding/binary"
	"slices"
)

// Interning: a training graph repeats a few attribute sets and shapes over
// and over (every 3x3 stride-1 convolution has the same five attributes,
// every activation of a stage the same shape), so the Builder and the JSON
// decoder give equal values one copy. On a million-op ResNet this saves
// about a tenth of the graph's memory. The shared values are read-only
// (see Op.Attrs and Tensor.Shape).

const (
	// maxInterned bounds the distinct values a table keeps; values past it
	// are looked up but not added (a graph of mostly unique values, such
	// as a trace whose ops each hold different tensors, gains nothing).
	maxInterned = 1 << 14
	// maxAttrKey is the longest encoded attribute set that is interned.
	maxAttrKey = 512
	// maxShapeRank is the highest rank of an interned shape.
	maxShapeRank = 6
)

// attrTable interns attribute maps by their contents.
type attrTable struct {
	m    map[string]map[string]string
	keys []string
	buf  []byte
}

// intern returns a map equal to m: an earlier one with the same entries if
// the table has one, else m (which it remembers while it has room). Nil
// and empty maps are returned as they are.
func (t *attrTable) intern(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	t.keys = t.keys[:0]
	n := 0
	for k, v := range m {
		t.keys = append(t.keys, k)
		n += len(k) + len(v) + 2*binary.MaxVarintLen64
	}
	if n > maxAttrKey {
		return m
	}
	slices.Sort(t.keys)
	b := t.buf[:0]
	for _, k := range t.keys {
		v := m[k]
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	t.buf = b
	if s, ok := t.m[string(b)]; ok {
		return s
	}
	if len(t.m) < maxInterned {
		if t.m == nil {
			t.m = make(map[string]map[string]string)
		}
		t.m[string(b)] = m
	}
	return m
}

// shapeKey is a shape of rank at most maxShapeRank as a map key.
type shapeKey struct {
	rank int
	dims [maxShapeRank]int64
}

// shapeTable interns shapes: NewTensor and the decoder carve each new
// shape once from a chunk and hand the same slice to the tensors that
// repeat it.
type shapeTable struct {
	m map[shapeKey]Shape
}

// intern returns a read-only copy of dims (cap == len, so appending to it
// copies): a slice already handed out for equal dims, or one carved from
// *chunk. A shape of rank 0 is nil.
func (t *shapeTable) intern(chunk *[]int64, dims []int64) Shape {
	if len(dims) == 0 {
		return nil
	}
	if len(dims) > maxShapeRank {
		return carve(chunk, dims)
	}
	k := shapeKey{rank: len(dims)}
	copy(k.dims[:], dims)
	if s, ok := t.m[k]; ok {
		return s
	}
	s := Shape(carve(chunk, dims))
	if len(t.m) < maxInterned {
		if t.m == nil {
			t.m = make(map[shapeKey]Shape)
		}
		t.m[k] = s
	}
	return s
}
