package graph

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sameMap reports whether a and b are one map (not just equal ones).
func sameMap(a, b map[string]string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	a["\x00probe"] = "1"
	_, ok := b["\x00probe"]
	delete(a, "\x00probe")
	return ok
}

// TestBuilderInternsAttrsAndShapes: ops with equal attributes share one
// map and tensors of equal shapes one slice, from the Builder and from the
// JSON decoder; unequal ones do not; appending to a shared shape copies it.
func TestBuilderInternsAttrsAndShapes(t *testing.T) {
	b := NewBuilder("interned")
	x := b.Input("x", F32, 8, 3, 32, 32)
	c1 := b.Conv2d("c1", x, 16, 3, 1, 1)
	c2 := b.Conv2d("c2", c1, 16, 3, 1, 1)
	c3 := b.Conv2d("c3", c2, 16, 3, 2, 1) // another stride
	b.SetLoss(b.Op("sum", "loss", c3).Out("loss", F32).T())
	g, err := b.Build()
	require.NoError(t, err)

	conv := func(name string) *Op {
		for i := range g.Ops {
			if g.Ops[i].Name == name {
				return &g.Ops[i]
			}
		}
		t.Fatalf("no op %q", name)
		return nil
	}
	check := func(g *Graph, what string) {
		o1, o2, o3 := conv("c1"), conv("c2"), conv("c3")
		require.NotEmpty(t, o1.Attrs)
		assert.Equal(t, o1.Attrs, o2.Attrs)
		assert.True(t, sameMap(o1.Attrs, o2.Attrs), "%s: equal attributes share a map", what)
		assert.False(t, sameMap(o1.Attrs, o3.Attrs), "%s: other attributes keep their own map", what)
		s1, s2 := g.Tensors[c1].Shape, g.Tensors[c2].Shape
		require.Equal(t, Shape{8, 16, 32, 32}, s1)
		assert.Equal(t, s1, s2)
		assert.Same(t, &s1[0], &s2[0], "%s: equal shapes share a slice", what)
		assert.Equal(t, len(s1), cap(s1), "%s: a shared shape has no spare capacity", what)
		assert.NotSame(t, &s1[0], &g.Tensors[c3].Shape[0], "%s: another shape has its own slice", what)
		grown := append(s1, 7)
		grown[0] = 99
		assert.Equal(t, int64(8), s2[0], "%s: appending to a shared shape copied it", what)
	}
	check(g, "builder")

	var buf bytes.Buffer
	require.NoError(t, Encode(&buf, g))
	d, err := Decode(&buf)
	require.NoError(t, err)
	g = d
	check(g, "decoder")
}

// TestAttrTableKeysAreExact: sets that differ only in where a key ends and
// its value starts, or in one entry, are interned apart; equal sets built in
// another insertion order are one; long sets and nil maps pass through.
func TestAttrTableKeysAreExact(t *testing.T) {
	var tab attrTable
	a := tab.intern(map[string]string{"ab": "c"})
	b := tab.intern(map[string]string{"a": "bc"})
	c := tab.intern(map[string]string{"a": "b", "c": ""})
	d := tab.intern(map[string]string{"c": "", "a": "b"})
	e := tab.intern(map[string]string{"a": "b"})
	assert.False(t, sameMap(a, b))
	assert.False(t, sameMap(a, c))
	assert.False(t, sameMap(b, c))
	assert.True(t, sameMap(c, d), "insertion order does not matter")
	assert.False(t, sameMap(c, e))
	assert.Equal(t, map[string]string{"a": "b"}, e)

	long := map[string]string{"holds": string(bytes.Repeat([]byte("1,"), maxAttrKey))}
	assert.True(t, sameMap(long, tab.intern(long)), "a long set is returned as it is")
	assert.Nil(t, tab.intern(nil))
	empty := map[string]string{}
	assert.True(t, sameMap(empty, tab.intern(empty)))

	// The table stops growing at maxInterned sets but still finds them.
	var full attrTable
	first := full.intern(map[string]string{"k": "0"})
	for i := 1; i < maxInterned+10; i++ {
		full.intern(map[string]string{"k": strconv.Itoa(i)})
	}
	assert.Len(t, full.m, maxInterned)
	assert.True(t, sameMap(first, full.intern(map[string]string{"k": "0"})))
}
