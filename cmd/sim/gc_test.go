package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gcSettings returns the collector's GOGC and memory limit (reading them
// leaves them as they are).
func gcSettings() (int, int64) {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p, debug.SetMemoryLimit(-1)
}

func TestTuneGC(t *testing.T) {
	p0, l0 := gcSettings()
	t.Cleanup(func() {
		debug.SetGCPercent(p0)
		debug.SetMemoryLimit(l0)
	})
	env := func(set string) func(string) (string, bool) {
		return func(k string) (string, bool) { return "50", k == set }
	}

	// the user's settings stand
	tuneGC(env("GOGC"))
	p, l := gcSettings()
	require.Equal(t, p0, p)
	require.Equal(t, l0, l)
	tuneGC(env("GOMEMLIMIT"))
	p, l = gcSettings()
	require.Equal(t, p0, p)
	require.Equal(t, l0, l)

	// no collection below the floor, then GOGC 100 under the ceiling
	tuneGC(env(""))
	p, l = gcSettings()
	require.Equal(t, -1, p)
	require.Equal(t, int64(gcFloor), l)
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		if p, l = gcSettings(); p == 100 && l == gcCeiling {
			break
		}
		require.True(t, time.Now().Before(deadline), "the settings after the first collection never came: GOGC %d, limit %d", p, l)
		time.Sleep(time.Millisecond)
	}
	// the ceiling stays while the live heap is small
	runtime.GC()
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	_, l = gcSettings()
	require.Equal(t, int64(gcCeiling), l)
}

func TestCeilingAfter(t *testing.T) {
	p0, l0 := gcSettings()
	t.Cleanup(func() {
		debug.SetGCPercent(p0)
		debug.SetMemoryLimit(l0)
	})
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(gcCeiling)
	// a heap in use well below the ceiling keeps it
	require.False(t, ceilingAfter(gcCeiling-gcHeadroom))
	p, l := gcSettings()
	require.Equal(t, 100, p)
	require.Equal(t, int64(gcCeiling), l)
	// one near it lifts it, and the heap may grow by half the live heap
	require.True(t, ceilingAfter(gcCeiling-gcHeadroom+1))
	p, l = gcSettings()
	require.Equal(t, gcPercentLarge, p)
	require.Equal(t, int64(math.MaxInt64), l)
}
