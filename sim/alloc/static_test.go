package alloc

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStaticShareWithinMatchRange(t *testing.T) {
	s := NewStatic(DefaultStaticOptions()) // MatchRange 10, in-place on
	a := mustAlloc(t, s, 100)
	s.Free(a)
	// 50 B: the free 100 B block is in [50, 500]: shared, no growth.
	b := mustAlloc(t, s, 50)
	assert.Equal(t, a, b)
	assert.Equal(t, int64(100), s.Reserved())
	assert.Equal(t, int64(50), s.Allocated())
	s.Free(b)
	// 1001 B: no free block >= 1001; 100 >= 1001/10 = 100: the 100 B block
	// grows by 901 B to 1001 B.
	c := mustAlloc(t, s, 1001)
	assert.Equal(t, a, c)
	assert.Equal(t, int64(1001), s.Reserved())
	st := s.Stats()
	assert.Equal(t, int64(2), st.Shared)
	assert.Equal(t, int64(1), st.Grown)
	assert.Equal(t, int64(901), st.GrownBytes)
	s.Free(c)
	// 20000 B: 1001 < 20000/10 = 2000: out of range, a new block.
	d := mustAlloc(t, s, 20000)
	assert.NotEqual(t, a, d)
	assert.Equal(t, int64(21001), s.Reserved())
	assert.Equal(t, 2, s.Stats().Storages)
	s.Free(d)
	// 99 B: the smallest free block >= 99 is 1001 > 990: too large; nothing
	// smaller is free: a new block. Arena 21001 + 99 = 21100.
	mustAlloc(t, s, 99)
	assert.Equal(t, int64(21100), s.Reserved())
	assert.Equal(t, 3, s.Stats().Storages)
}

func TestStaticNoSharingAtRangeZero(t *testing.T) {
	s := NewStatic(StaticOptions{MatchRange: 0})
	a := mustAlloc(t, s, 100)
	s.Free(a)
	b := mustAlloc(t, s, 100)
	assert.NotEqual(t, a, b)
	// two storage blocks of 100 B each
	assert.Equal(t, int64(200), s.Reserved())
	assert.Equal(t, int64(100), s.Allocated())
	assert.Equal(t, int64(0), s.Stats().Shared)
}

func TestStaticBestChoice(t *testing.T) {
	s := NewStatic(StaticOptions{MatchRange: 10})
	x := mustAlloc(t, s, 300)
	y := mustAlloc(t, s, 200)
	z := mustAlloc(t, s, 150)
	s.Free(x)
	s.Free(y)
	s.Free(z)
	// 180 B: the smallest free block >= 180 is 200 (y).
	assert.Equal(t, y, mustAlloc(t, s, 180))
	// 100 B: free {300, 150}: smallest >= 100 is 150 (z).
	assert.Equal(t, z, mustAlloc(t, s, 100))
	// 400 B: free {300}: nothing >= 400; 300 >= 40: x grows to 400.
	assert.Equal(t, x, mustAlloc(t, s, 400))
	// Arena 400 + 200 + 150 = 750; live 180 + 100 + 400 = 680.
	assert.Equal(t, int64(750), s.Reserved())
	assert.Equal(t, int64(680), s.Allocated())

	// The largest smaller block is preferred: free {50, 80}, request 100 ->
	// the 80 B block grows to 100.
	s = NewStatic(StaticOptions{MatchRange: 10})
	p := mustAlloc(t, s, 50)
	q := mustAlloc(t, s, 80)
	s.Free(p)
	s.Free(q)
	assert.Equal(t, q, mustAlloc(t, s, 100))
	assert.Equal(t, int64(150), s.Reserved()) // 50 + 100
	assert.Equal(t, []StorageSlot{{Offset: 0, Size: 50}, {Offset: 50, Size: 100}}, s.Layout())

	// Equal sizes: the larger-side search takes the earliest released block,
	// as MXNet's multimap lower_bound does.
	s = NewStatic(StaticOptions{MatchRange: 10})
	u := mustAlloc(t, s, 64)
	v := mustAlloc(t, s, 64)
	s.Free(v)
	s.Free(u)
	assert.Equal(t, v, mustAlloc(t, s, 64))
}

func TestStaticInPlace(t *testing.T) {
	s := NewStatic(DefaultStaticOptions())
	a := mustAlloc(t, s, 100)
	b, ok := s.AllocInPlace(a, 80)
	require.True(t, ok)
	assert.Equal(t, a, b)
	assert.Equal(t, int64(80), s.Allocated())
	assert.Equal(t, int64(100), s.Reserved())
	// 120 B does not fit in the 100 B storage.
	_, ok = s.AllocInPlace(b, 120)
	assert.False(t, ok)
	assert.Equal(t, int64(80), s.Allocated())
	assert.Equal(t, int64(1), s.Stats().InPlace)
	// A free block cannot be reused in place.
	s.Free(b)
	_, ok = s.AllocInPlace(b, 10)
	assert.False(t, ok)

	off := NewStatic(StaticOptions{MatchRange: 10, InPlace: false})
	c := mustAlloc(t, off, 100)
	_, ok = off.AllocInPlace(c, 80)
	assert.False(t, ok)
	assert.Equal(t, int64(100), off.Allocated())
}

func TestStaticArenaAndLayout(t *testing.T) {
	s := NewStatic(StaticOptions{MatchRange: 0})
	for _, n := range []int64{100, 200, 50} {
		mustAlloc(t, s, n)
	}
	// Arena = 100 + 200 + 50 = 350; offsets 0, 100, 300.
	assert.Equal(t, int64(350), s.Reserved())
	assert.Equal(t, []StorageSlot{{0, 100}, {100, 200}, {300, 50}}, s.Layout())
	assert.Equal(t, int64(200), s.Size(1))
	assert.Equal(t, int64(0), s.Size(3))
	assert.Equal(t, int64(0), s.Size(-1))
	s.Reset()
	assert.Equal(t, int64(0), s.Reserved())
	assert.Empty(t, s.Layout())
	assert.Equal(t, "static", s.Name())
}

func TestStaticCapacity(t *testing.T) {
	s := NewStatic(StaticOptions{MatchRange: 10, Capacity: 250})
	a := mustAlloc(t, s, 200)
	_, err := s.Alloc(100) // new block: 200 + 100 > 250
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrOutOfMemory))
	assert.Equal(t, "static allocator: request of 100 bytes would grow the arena by 100: allocated 200, reserved 200, capacity 250: out of memory", err.Error())
	s.Free(a)
	// Growing the 200 B block to 300 B exceeds 250 too; state unchanged.
	_, err = s.Alloc(300)
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Equal(t, int64(200), s.Reserved())
	assert.Equal(t, int64(2), s.Stats().OOMs)
	// 250 B grows it by 50: exactly the capacity.
	mustAlloc(t, s, 250)
	assert.Equal(t, int64(250), s.Reserved())

	_, err = s.Alloc(-5)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "alloc bytes -5")
	before := s.Stats()
	s.Free(7) // not a block: nothing happens
	assert.Equal(t, before, s.Stats())

	// The zero value is an empty unlimited planner.
	var z Static
	zb, err := z.Alloc(300)
	require.NoError(t, err)
	z.Free(zb)
	z.Free(zb)
	assert.Equal(t, int64(0), z.Allocated())
	assert.Equal(t, int64(300), z.Reserved())
}

func TestStaticOptionsValidate(t *testing.T) {
	require.NoError(t, DefaultStaticOptions().Validate())
	err := StaticOptions{MatchRange: -1}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MatchRange -1")
	assert.Equal(t, int64(0), NewStatic(StaticOptions{MatchRange: -1}).Options().MatchRange)
}

func ExampleStatic() {
	s := NewStatic(DefaultStaticOptions()) // MXNET_EXEC_MATCH_RANGE=10, in-place on
	a, _ := s.Alloc(400)                   // storage 0: 400 B
	b, _ := s.Alloc(300)                   // storage 1: 300 B
	s.Free(a)
	c, _ := s.Alloc(1000)          // storage 0 (400 >= 1000/10) grows to 1000 B
	d, _ := s.AllocInPlace(b, 300) // b's storage passes to its consumer's output
	fmt.Println(a == c, b == d, s.Allocated(), s.Reserved())
	fmt.Println(s.Layout())
	// Output:
	// true true 1300 1300
	// [{0 1000} {1000 300}]
}
