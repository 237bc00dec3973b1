package dtr

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph/dtrlog"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// walkDependents visits, depth first, each storage that depends on s (by
// the tensors' children, not the runtime's walk lists), once: visit says
// whether to go on through k and whether to stop the walk. It reports
// whether a visit stopped it.
func (r *Runtime) walkDependents(s int32, visit func(k int32) (through, stop bool)) bool {
	seen := map[int32]bool{s: true}
	stack := []int32{s}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, t := range r.storages[x].tensors {
			for _, c := range r.tensors[t].children {
				k := r.tensors[c].st
				if seen[k] {
					continue
				}
				seen[k] = true
				through, stop := visit(k)
				if stop {
					return true
				}
				if through {
					stack = append(stack, k)
				}
			}
		}
	}
	return false
}

// refNeeded is stillNeeded's definition as a plain walk: whether a storage
// the program reads again is reachable from s through dropped dependents,
// with no cap and without skipping the storages markGone marked.
func (r *Runtime) refNeeded(s int32) bool {
	return r.walkDependents(s, func(k int32) (bool, bool) {
		if !r.dropped(k) {
			return false, false
		}
		return true, r.storages[k].refExt > 0 && r.progNextUse(k) < math.MaxInt64
	})
}

// checkGone fails unless every storage marked gone has no external
// reference and no storage that depends on it, resident or not, has one.
func checkGone(t *testing.T, r *Runtime, name string) (gone int) {
	t.Helper()
	for s := range r.storages {
		if !r.gone[s] {
			continue
		}
		gone++
		require.Zero(t, r.storages[s].refExt, "%s: storage %d is gone but referenced", name, s)
		r.walkDependents(int32(s), func(k int32) (bool, bool) {
			require.Zero(t, r.storages[k].refExt, "%s: storage %d is gone, but %d, which depends on it, is referenced", name, s, k)
			return true, false
		})
	}
	return gone
}

// TestStillNeededMatchesWalk replays the logs with the next-use heuristics
// and KeepForRemat at every ratio and checks, at every release of a
// resident storage, that stillNeeded (which stops at the first needed
// storage and skips the storages marked gone) answers as the plain walk
// does, that so does every answer of neededBy (need's walks, which pass
// over the storages stillNeeded marked) in a choice the cap did not cut,
// and after every run that the storages marked gone are needed by nobody.
func TestStillNeededMatchesWalk(t *testing.T) {
	traces := []*dtrlog.Trace{convertedTreeLSTM(t)}
	if _, ok := logsPresent(); ok {
		traces = append(traces, loadTrace(t, "resnet32"), loadTrace(t, "unet"))
	}
	var checks, nbChecks, gone, kept, marked int64
	for _, tr := range traces {
		base, err := MeasureBaseline(tr)
		require.NoError(t, err)
		for _, h := range []Heuristic{Lookahead, LookaheadMSPS, LookaheadDTR} {
			for _, ratio := range DefaultRatios {
				cfg := DefaultConfig()
				cfg.EvicteeMinSize = 0
				cfg.Heuristic = h
				cfg.KeepForRemat = true
				cfg.Budget = int64(float64(base.PeakBytes) * ratio)
				cfg.RematLimit = base.ComputeNs
				rt, err := New(cfg, nil)
				require.NoError(t, err)
				rt.SetOracle(newTraceOracle(tr))
				name := fmt.Sprintf("%s %s ratio %.1f", tr.Name, h, ratio)
				calls, badMarks := 0, 0
				rt.needRef = func(s int32) bool {
					if calls++; calls%16 == 0 {
						badMarks += wrongMarks(rt)
						marked += countMarks(rt)
					}
					return rt.refNeeded(s)
				}
				rt.neededByRef = rt.refNeededBy
				_ = rt.replay(context.Background(), tr) // thrashing at low ratios is fine
				require.Zero(t, rt.needMismatch, name)
				require.Zero(t, rt.nbMismatch, "%s: neededBy differs from the plain walk", name)
				nbChecks += rt.nbChecks
				require.Zero(t, badMarks, "%s: storages marked not needed that are", name)
				checks += rt.needChecks
				kept += rt.Stats().KeptForRemat
				gone += int64(checkGone(t, rt, name))
			}
		}
	}
	t.Logf("%d releases checked, %d neededBy answers, %d kept for rematerialization, %d storages gone at the ends of the runs, %d marks checked", checks, nbChecks, kept, gone, marked)
	require.Greater(t, nbChecks, int64(1000))
	require.Greater(t, checks, int64(10000))
	require.Positive(t, kept)
	require.Positive(t, gone)
	require.Positive(t, marked)
}

// wrongMarks counts the storages marked not needed (nn) that are resident,
// swapped out or banished, or that the program or a rematerialization will
// still read.
func wrongMarks(r *Runtime) (bad int) {
	for s := range r.storages {
		if r.nn[s] && (!r.dropped(int32(s)) || r.ownNeeded(int32(s)) || r.refNeeded(int32(s))) {
			bad++
		}
	}
	return bad
}

func countMarks(r *Runtime) (n int64) {
	for _, m := range r.nn {
		if m {
			n++
		}
	}
	return n
}

// TestGoneOffWhenReleasedIsRead: a storage whose last reference has gone
// (and with it every dependent's) is marked gone; when a later op reads it
// all the same, the runtime stops marking storages gone for the run.
func TestGoneOffWhenReleasedIsRead(t *testing.T) {
	rt, err := New(DefaultConfig(), nil)
	require.NoError(t, err)
	_, a, err := rt.Compute(nil, 10, []Output{{Bytes: 100, AliasOf: -1}})
	require.NoError(t, err)
	_, b, err := rt.Compute(a, 10, []Output{{Bytes: 100, AliasOf: -1}})
	require.NoError(t, err)
	require.NoError(t, rt.Release(a[0]))
	require.False(t, rt.gone[rt.tensors[a[0]].st], "b, a dependent, is still referenced")
	require.NoError(t, rt.Release(b[0]))
	require.True(t, rt.gone[rt.tensors[b[0]].st])
	require.True(t, rt.gone[rt.tensors[a[0]].st], "gone once its last dependent is")
	_, _, err = rt.Compute(a, 10, []Output{{Bytes: 100, AliasOf: -1}})
	require.NoError(t, err)
	require.True(t, rt.goneOff)
	for s := range rt.storages {
		require.False(t, rt.gone[s])
	}
}

// refNeededBy is neededBy's definition as a plain walk: the earliest next
// use by the program of a referenced storage reachable from s through
// dropped dependents (MaxInt64 if none), with no cap, no memo and no
// marks.
func (r *Runtime) refNeededBy(s int32) int64 {
	best := int64(math.MaxInt64)
	r.walkDependents(s, func(k int32) (bool, bool) {
		if !r.dropped(k) {
			return false, false
		}
		if r.storages[k].refExt > 0 {
			best = min(best, r.progNextUse(k))
		}
		return true, false
	})
	return best
}

// TestNeededByMatchesWalkZoo runs zoo models under the next-use
// heuristics with KeepForRemat (whose not-needed marks need's walks pass
// over) and checks every answer of neededBy in a choice whose walks the
// cap did not cut against the plain walk, as TestStillNeededMatchesWalk
// does on the logs.
func TestNeededByMatchesWalkZoo(t *testing.T) {
	var checks int64
	// densenet121's concatenations give every activation many dependents
	zoo := []struct {
		name  string
		o     models.Options
		ratio float64
	}{
		{"gpt", models.Options{Depth: 4, Batch: 1, Seq: 32}, 0.4},
		{"resnet-cifar", models.Options{Depth: 20}, 0.3},
		{"densenet121", models.Options{Batch: 2, Image: 32}, 0.4},
	}
	for _, h := range []Heuristic{Lookahead, LookaheadMSPS} {
		for _, m := range zoo {
			rt, _, err := zooUnderDTR(t, m.name, m.o, m.ratio, func(cfg *Config, _ *sim.Result) {
				cfg.Heuristic, cfg.KeepForRemat, cfg.EvicteeMinSize = h, true, 0
			}, func(rt *Runtime) { rt.neededByRef = rt.refNeededBy })
			name := fmt.Sprintf("%s %s", h, m.name)
			if err != nil {
				require.ErrorIs(t, err, sim.ErrOutOfMemory, name)
			}
			require.Zero(t, rt.nbMismatch, "%s: neededBy differs from the plain walk", name)
			checks += rt.nbChecks
		}
	}
	t.Logf("%d neededBy answers checked", checks)
	require.Greater(t, checks, int64(1000))
}
