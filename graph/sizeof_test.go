package graph

import (
	"testing"
	"unsafe"
)

// TestSizeof pins the sizes of the structs a graph holds one of per op and
// per tensor (a million-op graph holds about a million ops and two million
// tensors), as the Go compiler's sizeof_test does for its nodes: a new
// field, or one placed where it adds padding, has to change these numbers
// on purpose.
func TestSizeof(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are pinned for 64-bit platforms")
	}
	for _, c := range []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"Op", unsafe.Sizeof(Op{}), 136},
		{"Tensor", unsafe.Sizeof(Tensor{}), 64},
	} {
		if c.got != c.want {
			t.Errorf("unsafe.Sizeof(%s) = %d, want %d", c.name, c.got, c.want)
		}
	}
}
