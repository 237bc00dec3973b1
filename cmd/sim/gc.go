package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

const (
	// gcFloor is the Go memory below which the sim process does not
	// collect.
	gcFloor = 64 << 20
	// gcCeiling is the soft limit on the Go memory from then on, while the
	// live heap leaves at least gcHeadroom below it.
	gcCeiling = 896 << 20
	// gcHeadroom is the least room between the live heap and gcCeiling:
	// the collector runs once per gcHeadroom allocated at the most.
	gcHeadroom = 96 << 20
	// gcPercentLarge is GOGC once the live heap has come near the ceiling:
	// the heap may then grow to 1.5 times the live heap between
	// collections instead of twice.
	gcPercentLarge = 50
)

// tuneGC sets the process's collector for a command-line run:
//
//   - no collection until the Go memory reaches gcFloor. A run on a small
//     input (a DTR log of a few thousand lines, a zoo model) finishes in
//     tens of milliseconds, of which the default collector, starting from
//     a 4 MB heap, took a quarter (11 of 44 ms for a 10-budget parity
//     sweep of an 11,700-line log);
//   - from the first collection on, the default (GOGC 100) with a soft
//     limit of gcCeiling: the heap may grow to twice the live heap, but
//     not past the limit while the live heap is well below it, so a
//     report on a million-op graph (652 MB live in its last collection,
//     GODEBUG=gctrace=1; 800-835 MB before graphs shared equal shapes and
//     attribute maps) stays below 1 GiB instead of reaching up to 1.2 GB;
//   - once the live heap after a collection comes within gcHeadroom of
//     the ceiling, no limit (collecting at a limit near the live heap
//     would run the collector almost continuously) and GOGC
//     gcPercentLarge: a run that large is bound by memory (a strategy on
//     a graph of a million ops holds 0.7 to 1.9 GB live), and with GOGC
//     100 its peak RSS would be wherever the heap stood between two
//     collections, up to twice the live heap; the collector runs twice
//     as often instead, each time marking the live heap.
//
// GOGC or GOMEMLIMIT in the environment leave the collector as they set
// it. main calls it (Main, which the tests run in process, does not).
func tuneGC(getenv func(string) (string, bool)) {
	if _, ok := getenv("GOGC"); ok {
		return
	}
	if _, ok := getenv("GOMEMLIMIT"); ok {
		return
	}
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(gcFloor)
	afterGC(func() {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(gcCeiling)
		afterGC(liftCeiling)
	})
}

// liftCeiling runs after each collection while the ceiling holds: it
// lifts the limit once the live heap nears it. It reads the live heap that
// the collection marked (runtime/metrics), not the heap in use when it
// runs (runtime.ReadMemStats), which adds what was allocated during the
// marking and since: reading a million-op DTR log, 210 to 300 MiB more
// (GODEBUG=gctrace=1), enough to lift the ceiling well below its live-heap
// mark and let such a run pass 1 GiB of RSS. (The package's initialisation costs every run 0.07 to 0.23 ms,
// GODEBUG=inittrace=1, within the noise of perf stat -r 60 sim help.)
func liftCeiling() {
	s := [1]metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s[:])
	if s[0].Value.Kind() != metrics.KindUint64 || !ceilingAfter(s[0].Value.Uint64()) {
		afterGC(liftCeiling)
	}
}

// ceilingAfter sets the collector for a live heap of live bytes after a
// collection and reports whether the ceiling is lifted (for good).
func ceilingAfter(live uint64) bool {
	if live <= gcCeiling-gcHeadroom {
		return false
	}
	debug.SetGCPercent(gcPercentLarge)
	debug.SetMemoryLimit(math.MaxInt64)
	return true
}

// afterGC runs f once, after the next garbage collection (from the
// finalizer of an object that only that collection finds unreachable).
func afterGC(f func()) {
	runtime.SetFinalizer(new(gcSentinel), func(*gcSentinel) { f() })
}

// gcSentinel is large enough not to be a tiny allocation (whose finalizer
// may never run).
type gcSentinel struct{ _ [32]byte }
