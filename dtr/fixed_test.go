package dtr

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/sim/alloc"
)

// fixedKeeps is releaseFixed's decision by a plain walk, without side
// effects: whether the storages reached from s through traversable ones
// include a referenced evicted one or resident ones of more bytes than s.
func (r *Runtime) fixedKeeps(s int32) bool {
	var bytes int64
	ref := r.walkDependents(s, func(k int32) (bool, bool) {
		ks := &r.storages[k]
		switch {
		case ks.pinned || ks.fixed:
		case ks.material || ks.swapped:
			bytes += ks.size
		case ks.refExt > 0:
			return false, true
		default:
			return true, false
		}
		return false, false
	})
	return ref || bytes > r.storages[s].size
}

// gptRatios are the budgets, as ratios of the no-recompute peak, that
// gptUnderDTR runs at.
var gptRatios = []float64{0.6, 0.75, 0.9, 1}

// gptUnderDTR runs a small GPT (its dropouts unrecomputable) under DTR
// with KeepForRemat at ratio of its no-recompute peak, the ideal
// allocator, after setup has set the runtime's test hooks.
func gptUnderDTR(t *testing.T, ratio float64, setup func(*Runtime)) (*Runtime, *sim.Result, error) {
	t.Helper()
	return zooUnderDTR(t, "gpt", models.Options{Depth: 6, Batch: 1, Seq: 32}, ratio,
		func(cfg *Config, _ *sim.Result) { cfg.KeepForRemat = true }, setup)
}

// lstmUnderDTR runs a small LSTM (its two dropouts unrecomputable; the
// input dropout's storage has a view per time step, and most of what the
// steps save keeps it) as gptUnderDTR runs the GPT.
func lstmUnderDTR(t *testing.T, ratio float64, setup func(*Runtime)) (*Runtime, *sim.Result, error) {
	t.Helper()
	return zooUnderDTR(t, "lstm", models.Options{Seq: 64}, ratio,
		func(cfg *Config, _ *sim.Result) { cfg.KeepForRemat = true }, setup)
}

// lstmRatios are the budgets lstmUnderDTR runs at (below 0.9 the loss op's
// working set alone does not fit).
var lstmRatios = []float64{0.9, 0.95, 1}

// requireWitnessBooks checks the incremental witness bookkeeping of every
// pending storage against the watch lists: its count and bytes of current
// private witnesses, and the runtime's count of listed chg entries; with
// arenaMin set, the arenas are compacted often on the way.
func requireWitnessBooks(t *testing.T, rt *Runtime) {
	t.Helper()
	n := make(map[int32]int32)
	b := make(map[int32]int64)
	for x := range rt.watchHead {
		for e := rt.watchHead[x]; e >= 0; e = rt.watchArena[e].next {
			we := rt.watchArena[e]
			require.Equal(t, int32(x), we.x, "watch entry %d on the list of %d", e, x)
			if we.s >= 0 && rt.storages[we.s].pendingFree && rt.storages[we.s].witGen == we.gen {
				n[we.s]++
				b[we.s] += rt.storages[x].size
			}
		}
	}
	listed := 0
	for s := range rt.storages {
		st := &rt.storages[s]
		if !st.pendingFree {
			require.Zero(t, st.chg, "storage %d is not pending", s)
			continue
		}
		require.Equal(t, n[int32(s)], st.witN, "witnesses of storage %d", s)
		require.Equal(t, b[int32(s)], st.witBytes, "witness bytes of storage %d", s)
		for e := st.chg; e != 0; e = rt.chgArena[e-1].next {
			listed++
		}
	}
	require.Equal(t, rt.chgLive, listed, "chg entries listed")
}

// zooUnderDTR runs zoo model name's training step under DTR at ratio of its
// no-recompute peak, with the ideal allocator: config adjusts the default
// Config (given the no-recompute run), setup sets the runtime's test hooks.
func zooUnderDTR(t *testing.T, name string, o models.Options, ratio float64, config func(*Config, *sim.Result), setup func(*Runtime)) (*Runtime, *sim.Result, error) {
	t.Helper()
	g, err := models.Build(name, o)
	require.NoError(t, err)
	base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
	require.NoError(t, err)
	budget := int64(float64(base.PeakAllocated) * ratio)
	m, err := sim.NewMachine(g, sim.Options{Allocator: alloc.NewIdeal(budget), Capacity: -1})
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.Budget = budget
	config(&cfg, base)
	h := &SimHost{M: m}
	rt, err := New(cfg, h)
	require.NoError(t, err)
	setup(rt)
	h.d = newDriver(g, rt)
	_, err = drive(context.Background(), h.d, m.OpTime, m.OpWorkspace)
	return rt, m.Result(), err
}

// fixedProgram drives rt with a random program whose ops are often
// unrecomputable (ForbidRemat), with views and releases in random order.
func fixedProgram(rt *Runtime, rng *rand.Rand, n int) error {
	var live []TensorID
	for i := 0; i < 3; i++ {
		c, err := rt.Constant(int64(1 + rng.IntN(1000)))
		if err != nil {
			return err
		}
		live = append(live, c)
	}
	for i := 0; i < n; i++ {
		k := 1 + rng.IntN(3)
		ins := make([]TensorID, 0, k)
		for j := 0; j < k && len(live) > 0; j++ {
			ins = append(ins, live[len(live)-1-rng.IntN(min(len(live), 10))])
		}
		outs := []Output{{Bytes: int64(1 + rng.IntN(5000)), AliasOf: -1}}
		if rng.IntN(10) == 0 {
			outs = append(outs, Output{AliasOf: rng.IntN(len(ins))})
		}
		op, res, err := rt.Compute(ins, int64(1+rng.IntN(1000)), outs)
		if err != nil {
			return err
		}
		if rng.IntN(4) == 0 {
			if err := rt.ForbidRemat(op); err != nil {
				return err
			}
		}
		live = append(live, res...)
		for len(live) > 40 || (len(live) > 3 && rng.IntN(2) == 0) {
			j := 3 + rng.IntN(len(live)-3)
			if err := rt.Release(live[j]); err != nil {
				return err
			}
			live = append(live[:j], live[j+1:]...)
		}
	}
	return nil
}

// TestFixedWitnessesMatchWalk: every time a storage kept by releaseFixed
// stays kept on its witnesses alone, the plain walk keeps it too. On random
// programs with unrecomputable ops (some swapping), and on GPT (dropouts without saved RNG
// state) under DTR at several budgets.
func TestFixedWitnessesMatchWalk(t *testing.T) {
	var checks, kept, grouped int64
	for seed := uint64(1); seed <= 40; seed++ {
		cfg := DefaultConfig()
		cfg.EvicteeMinSize = 0
		cfg.Budget = 60_000 + int64(seed%8)*15_000
		if seed%4 == 3 {
			evictMode(&cfg, "swap") // unrecomputable storages may be swapped out
		}
		rt, err := New(cfg, nil)
		require.NoError(t, err)
		rt.fixedRef = rt.fixedKeeps
		if seed%2 == 1 {
			rt.arenaMin = 8
		}
		err = fixedProgram(rt, rand.New(rand.NewPCG(seed, 11)), 600)
		if err != nil {
			require.ErrorIs(t, err, sim.ErrOutOfMemory)
		}
		require.Zero(t, rt.fixedMismatch, "seed %d", seed)
		requireWitnessBooks(t, rt)
		checks += rt.fixedChecks
		kept += rt.Stats().FixedKept
		grouped += rt.grpHeld
	}
	zoo := func(name string, run func(*testing.T, float64, func(*Runtime)) (*Runtime, *sim.Result, error), ratios []float64) {
		for _, ratio := range ratios {
			rt, _, err := run(t, ratio, func(rt *Runtime) { rt.fixedRef, rt.arenaMin = rt.fixedKeeps, 64 })
			name := fmt.Sprintf("%s ratio %.2f", name, ratio)
			if err != nil {
				require.ErrorIs(t, err, sim.ErrOutOfMemory, name)
			}
			require.Zero(t, rt.fixedMismatch, name)
			requireWitnessBooks(t, rt)
			checks += rt.fixedChecks
			kept += rt.Stats().FixedKept
			grouped += rt.grpHeld
		}
	}
	zoo("gpt", gptUnderDTR, gptRatios)
	zoo("lstm", lstmUnderDTR, lstmRatios)
	t.Logf("%d storages kept, %d retries decided by their witnesses, %d kept by a group's check", kept, checks, grouped)
	require.Greater(t, checks, int64(1000))
	require.Greater(t, grouped, int64(1000))
}

// requireDirtySum checks that the summary of the dirty bits has a bit for
// exactly the words of dirty that have one (retryPending visits only those).
func requireDirtySum(t *testing.T, rt *Runtime) {
	t.Helper()
	require.Len(t, rt.dirtySum, (len(rt.dirty)+63)>>6)
	for w := range rt.dirtySum {
		var want uint64
		for k := 0; k < 64 && w<<6|k < len(rt.dirty); k++ {
			if rt.dirty[w<<6|k] != 0 {
				want |= 1 << k
			}
		}
		require.Equal(t, want, rt.dirtySum[w], "dirtySum word %d", w)
	}
}

// TestDirtyRetriesMatchFullRetries: retryPending, which retries only the
// pending storages whose witnesses changed or may no longer be reached,
// gives the runs that retrying every pending storage after every op gives:
// the same counters, clock and memory, on random programs with
// unrecomputable ops and on GPT under DTR at several budgets.
func TestDirtyRetriesMatchFullRetries(t *testing.T) {
	var kept int64
	for seed := uint64(1); seed <= 40; seed++ {
		var st [2]Stats
		var errs [2]error
		for i, all := range []bool{false, true} {
			cfg := DefaultConfig()
			cfg.EvicteeMinSize = 0
			cfg.Budget = 60_000 + int64(seed%8)*15_000
			rt, err := New(cfg, nil)
			require.NoError(t, err)
			rt.retryAll, rt.noDead = all, all
			errs[i] = fixedProgram(rt, rand.New(rand.NewPCG(seed, 11)), 600)
			st[i] = rt.Stats()
			requireDirtySum(t, rt)
		}
		require.Equal(t, errs[1] == nil, errs[0] == nil, "seed %d", seed)
		require.Equal(t, st[1], st[0], "seed %d", seed)
		kept += st[0].FixedKept
	}
	zoo := func(name string, run func(*testing.T, float64, func(*Runtime)) (*Runtime, *sim.Result, error), ratios []float64) {
		for _, ratio := range ratios {
			var st [2]Stats
			var res [2]*sim.Result
			for i, all := range []bool{false, true} {
				rt, r, _ := run(t, ratio, func(rt *Runtime) { rt.retryAll, rt.noDead = all, all })
				st[i], res[i] = rt.Stats(), r
			}
			name := fmt.Sprintf("%s ratio %.2f", name, ratio)
			require.Equal(t, st[1], st[0], name)
			require.Equal(t, res[1].PeakAllocated, res[0].PeakAllocated, name)
			require.Equal(t, res[1].TotalNs, res[0].TotalNs, name)
			kept += st[0].FixedKept
		}
	}
	zoo("gpt", gptUnderDTR, gptRatios)
	zoo("lstm", lstmUnderDTR, lstmRatios)
	require.Positive(t, kept)
}
