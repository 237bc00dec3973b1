package dtr

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// indexedHeuristics are the heuristics the default mode searches with the
// candidate index.
var indexedHeuristics = []Heuristic{HDTR, HDTREqClass, HDTRLocal, MSPS, LRU, Size, MegEngine, Lookahead, LookaheadMSPS, LookaheadDTR}

// TestIndexMatchesScanOnLogs replays both logs at every ratio with every
// indexed heuristic, eager and lazy locking, and checks at every eviction
// that the index chose exactly the candidate the linear scan chooses in the
// same state, and that the whole run equals a run with Config.Scan.
func TestIndexMatchesScanOnLogs(t *testing.T) {
	for _, m := range []string{"resnet32", "unet"} {
		tr := loadTrace(t, m)
		base, err := MeasureBaseline(tr)
		require.NoError(t, err)
		var evIdx, evScan, choices int64
		for _, h := range indexedHeuristics {
			for _, lazy := range []bool{false, true} {
				for _, ratio := range DefaultRatios {
					cfg := logRunConfig(h, lazy, base, ratio)
					rt, err := New(cfg, nil)
					require.NoError(t, err)
					require.NotNil(t, rt.idx, h.String())
					rt.idxCheck = true
					if h.NeedsOracle() {
						rt.SetOracle(newTraceOracle(tr))
					}
					errI := rt.replay(context.Background(), tr)
					sc := cfg
					sc.Scan = true
					rs, err := New(sc, nil)
					require.NoError(t, err)
					require.Nil(t, rs.idx)
					if h.NeedsOracle() {
						rs.SetOracle(newTraceOracle(tr))
					}
					errS := rs.replay(context.Background(), tr)
					name := fmt.Sprintf("%s %s lazy=%v ratio %.1f", m, h, lazy, ratio)
					requireIndexAgreed(t, name, rt, errI, errS)
					a, b := rt.Stats(), rs.Stats()
					// the check re-runs the scan without counting it
					require.Equal(t, b.Evictions, a.Evictions, name)
					require.Equal(t, b.Clock, a.Clock, name)
					require.Equal(t, b.RematCompute, a.RematCompute, name)
					require.Equal(t, b.PeakMemory, a.PeakMemory, name)
					evIdx += a.HeuristicEvals
					evScan += b.HeuristicEvals
					choices += a.Evictions
				}
			}
		}
		t.Logf("%s: %d evictions, %d score evaluations with the index, %d with the scan", m, choices, evIdx, evScan)
	}
}

// logRunConfig is the configuration of the index tests' log runs:
// heuristic h, eager or lazy locking, no minimum evictee size, kept
// storages with the next-use heuristics, the budget ratio of base's peak
// and a rematerialization limit of its compute.
func logRunConfig(h Heuristic, lazy bool, base Baseline, ratio float64) Config {
	cfg := DefaultConfig()
	cfg.EvicteeMinSize = 0
	cfg.Heuristic = h
	cfg.LazyLock = lazy
	cfg.KeepForRemat = h.NeedsOracle()
	cfg.Budget = int64(float64(base.PeakBytes) * ratio)
	cfg.RematLimit = base.ComputeNs
	return cfg
}

// requireIndexAgreed requires that the indexed run ri (checked against the
// scan at every choice) never chose otherwise, and that it ended as the
// scan run did (errI, errS): both fine, or both failed, thrashing alike.
func requireIndexAgreed(t *testing.T, name string, ri *Runtime, errI, errS error) {
	t.Helper()
	require.Zero(t, ri.idxMismatch, name)
	require.Zero(t, ri.idxBadKeys, name)
	require.Zero(t, ri.idxBadRefs, name)
	require.Equal(t, errS == nil, errI == nil, name)
	if errS != nil {
		require.Equal(t, errors.Is(errS, ErrThrashing), errors.Is(errI, ErrThrashing), name)
	}
}

// randomProgram drives rt with a random program of n ops: random inputs
// among the live tensors, random sizes and costs (zeros included), views,
// multi-output ops, random releases and pins. It returns the first error.
func randomProgram(rt *Runtime, rng *rand.Rand, n int) error {
	var live []TensorID
	for i := 0; i < 4; i++ {
		c, err := rt.Constant(int64(rng.IntN(1000)))
		if err != nil {
			return err
		}
		live = append(live, c)
	}
	sizes := []int64{0, 1, 7, 100, 1000, 1 << 12, 1 << 16}
	for i := 0; i < n; i++ {
		k := 1 + rng.IntN(3)
		ins := make([]TensorID, 0, k)
		for j := 0; j < k && len(live) > 0; j++ {
			ins = append(ins, live[len(live)-1-rng.IntN(min(len(live), 12))])
		}
		nout := 1 + rng.IntN(2)
		outs := make([]Output, nout)
		for j := range outs {
			outs[j] = Output{Bytes: sizes[rng.IntN(len(sizes))] + int64(rng.IntN(50)), AliasOf: -1}
			if len(ins) > 0 && rng.IntN(8) == 0 {
				outs[j] = Output{AliasOf: rng.IntN(len(ins))}
			}
		}
		cost := []int64{0, 1, 10, 1000, 12345}[rng.IntN(5)] + int64(rng.IntN(3))
		_, res, err := rt.Compute(ins, cost, outs)
		if err != nil {
			return err
		}
		live = append(live, res...)
		if rng.IntN(40) == 0 {
			if err := rt.Pin(res[0]); err != nil {
				return err
			}
		}
		for len(live) > 24 || (len(live) > 4 && rng.IntN(3) == 0) {
			j := 4 + rng.IntN(len(live)-4)
			if err := rt.Release(live[j]); err != nil {
				return err
			}
			live = append(live[:j], live[j+1:]...)
		}
	}
	return nil
}

// TestIndexMatchesScanRandom checks the index against the scan at every
// eviction on random programs (zero costs, zero sizes, views, ties), with
// and without a minimum evictee size.
func TestIndexMatchesScanRandom(t *testing.T) {
	var evictions int64
	for seed := uint64(1); seed <= 16; seed++ {
		for _, h := range indexedHeuristics {
			for _, minSize := range []int64{0, 1000} {
				cfg := smallConfig(h, 150_000+int64(seed%12)*20_000, "drop")
				cfg.EvicteeMinSize = minSize
				cfg.LazyLock = seed%2 == 0
				rt, err := New(cfg, nil)
				require.NoError(t, err)
				rt.idxCheck = true
				err = randomProgram(rt, rand.New(rand.NewPCG(seed, 7)), 400)
				if err != nil {
					require.ErrorIs(t, err, sim.ErrOutOfMemory)
				}
				name := fmt.Sprintf("seed %d %s min %d", seed, h, minSize)
				require.Zero(t, rt.idxMismatch, name)
				require.Zero(t, rt.idxBadKeys, name)
				require.Zero(t, rt.idxBadRefs, name)
				evictions += rt.Stats().Evictions
			}
		}
	}
	t.Logf("%d evictions checked", evictions)
	require.Greater(t, evictions, int64(1000))
}

// TestCmpScoreExact checks the 192-bit exact comparison against big.Int
// on random and extreme terms.
func TestCmpScoreExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	vals := []int64{0, 1, 2, 3, 1 << 31, 1<<62 - 1, 1<<63 - 1, 1 << 60, 12345678901}
	pick := func() int64 {
		if rng.IntN(2) == 0 {
			return vals[rng.IntN(len(vals))]
		}
		return rng.Int64N(1 << uint(1+rng.IntN(62)))
	}
	for i := 0; i < 20000; i++ {
		a := score{num: pick(), d1: pick(), d2: pick(), mul: 1}
		b := score{num: pick(), d1: pick(), d2: pick(), mul: 1}
		if i%3 == 0 {
			b = score{num: a.num, d1: a.d2, d2: a.d1, mul: 1} // ties
		}
		var x, y, tt big.Int
		x.SetInt64(a.num)
		x.Mul(&x, tt.SetInt64(b.d1))
		x.Mul(&x, tt.SetInt64(b.d2))
		y.SetInt64(b.num)
		y.Mul(&y, tt.SetInt64(a.d1))
		y.Mul(&y, tt.SetInt64(a.d2))
		require.Equal(t, x.Cmp(&y), cmp192(mul192(uint64(a.num), uint64(b.d1), uint64(b.d2)), mul192(uint64(b.num), uint64(a.d1), uint64(a.d2))), "%+v %+v", a, b)
	}
}

// parityRun replays tr (or a random program when tr is nil) in parity mode
// with heuristic h at the budget, with the index (checked against the scan
// at every choice) or with Config.Scan; it returns the runtime and error.
func parityRun(t *testing.T, run func(*Runtime) error, h Heuristic, budget, rematLimit int64, scan bool) (*Runtime, error) {
	t.Helper()
	cfg := ParityConfig(h)
	cfg.Budget = budget
	cfg.RematLimit = rematLimit
	cfg.Scan = scan
	rt, err := New(cfg, nil)
	require.NoError(t, err)
	if scan {
		require.Nil(t, rt.idx)
	} else {
		require.NotNil(t, rt.idx, h.String())
		rt.idxCheck = true
	}
	return rt, run(rt)
}

// TestParityIndexMatchesScan checks, in parity mode, that the index picks
// the reference scan's candidate at every eviction and that whole runs,
// evaluation counts included, equal the scan's: on both logs at every ratio
// with the six reference heuristics, and on random programs (zero costs and
// sizes, which make 0/0 scores, and views).
func TestParityIndexMatchesScan(t *testing.T) {
	same := func(name string, ri, rs *Runtime, errI, errS error) {
		requireIndexAgreed(t, name, ri, errI, errS)
		require.Equal(t, rs.Stats(), ri.Stats(), name)
	}
	var idxEvals, evictions, deficits int64 // deficits: runs with an epoch keyed for negative classes
	for _, m := range []string{"resnet32", "unet"} {
		tr := loadTrace(t, m)
		base, err := MeasureBaseline(tr)
		require.NoError(t, err)
		replay := func(rt *Runtime) error { return rt.replay(context.Background(), tr) }
		for _, h := range ReferenceHeuristics {
			for _, ratio := range DefaultRatios {
				b := int64(float64(base.PeakBytes) * ratio)
				ri, errI := parityRun(t, replay, h, b, base.ComputeNs, false)
				rs, errS := parityRun(t, replay, h, b, base.ComputeNs, true)
				same(fmt.Sprintf("%s %s ratio %.1f", m, h, ratio), ri, rs, errI, errS)
				evictions += ri.Stats().Evictions
				if ri.idx.negEpochs > 0 {
					deficits++
				}
			}
		}
	}
	for seed := uint64(1); seed <= 24; seed++ {
		prog := func(rt *Runtime) error { return randomProgram(rt, rand.New(rand.NewPCG(seed, 11)), 400) }
		for _, h := range ReferenceHeuristics {
			b := 150_000 + int64(seed%12)*20_000
			ri, errI := parityRun(t, prog, h, b, 0, false)
			rs, errS := parityRun(t, prog, h, b, 0, true)
			if errS != nil {
				require.ErrorIs(t, errS, sim.ErrOutOfMemory)
			}
			same(fmt.Sprintf("seed %d %s", seed, h), ri, rs, errI, errS)
			evictions += ri.Stats().Evictions
			if ri.idx.negEpochs > 0 {
				deficits++
			}
			idxEvals += ri.Stats().HeuristicEvals
		}
	}
	t.Logf("%d evictions checked; %d runs had eq-classes going negative", evictions, deficits)
	require.Greater(t, evictions, int64(5000))
	require.Positive(t, deficits, "the negative-class path is exercised")
}

// TestSweepWorkersDeterministic: the budgets of a sweep run concurrently,
// and the result does not depend on how many at once.
func TestSweepWorkersDeterministic(t *testing.T) {
	tr := loadTrace(t, "unet")
	for _, parity := range []bool{true, false} {
		one, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: MSPS, Parity: parity, Workers: 1})
		require.NoError(t, err)
		many, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: MSPS, Parity: parity, Workers: 7})
		require.NoError(t, err)
		require.Equal(t, one, many)
		// the workers take the lowest budget first; the results stay in
		// the caller's order, each the one its budget gives alone
		mixed := []float64{0.5, 0.9, 0.2, 1.0}
		got, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: MSPS, Parity: parity, Ratios: mixed, Workers: 2})
		require.NoError(t, err)
		require.Len(t, got.Results, len(mixed))
		for i, r := range mixed {
			alone, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: MSPS, Parity: parity, Ratios: []float64{r}, Workers: 1})
			require.NoError(t, err)
			require.Equal(t, alone.Results[0], got.Results[i], "ratio %g", r)
		}
	}
	_, err := Sweep(context.Background(), tr, SweepOptions{Workers: -1})
	require.ErrorContains(t, err, "Workers -1")
}

// TestSweepBestReusesDefaultRuns: SweepBest given the default-mode sweeps
// a caller already has returns what it computes alone, and ignores sweeps
// of other configurations.
func TestSweepBestReusesDefaultRuns(t *testing.T) {
	tr := loadTrace(t, "unet")
	alone, err := SweepBest(context.Background(), tr, nil)
	require.NoError(t, err)
	var done []*SweepResult
	for _, h := range Heuristics {
		res, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: h})
		require.NoError(t, err)
		done = append(done, res)
	}
	eager := DefaultConfig()
	eager.EvicteeMinSize, eager.LazyLock = 0, false
	other, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: Size, Base: &eager, OverheadLimit: 1.01})
	require.NoError(t, err)
	with, err := SweepBest(context.Background(), tr, nil, append([]*SweepResult{other}, done...)...)
	require.NoError(t, err)
	require.Equal(t, alone, with)
}

// TestLogBucket checks logBucket against floor(16 log2(c/m)) and against
// the buckets' bounds: c/m is at least its bucket's lower bound and below
// the next bucket's (the index's pruning relies on the first); and the
// same of logSplit's finer heap.
func TestLogBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	vals := []int64{1, 2, 3, 7, 1 << 20, 1<<62 + 12345, math.MaxInt64}
	for i := 0; i < 20000; i++ {
		vals = append(vals, rng.Int64N(1<<uint(1+rng.IntN(62)))+1)
	}
	for _, c := range vals {
		for _, m := range vals[:200] {
			b := logBucket(c, m)
			q := float64(c) / float64(m)
			if b < idxFirst || b >= idxInfB {
				t.Fatalf("logBucket(%d, %d) = %d: outside the finite buckets", c, m, b)
			}
			if q < bucketLo(b) || (b+1 < idxInfB && q >= bucketLo(b+1)/(1-idxSlack)) {
				t.Fatalf("logBucket(%d, %d) = %d: c/m = %v outside [%v, %v)", c, m, b, q, bucketLo(b), bucketLo(b+1))
			}
			want := idxFirst + idxOctaves*idxPerOctave + int(math.Floor(math.Log2(q)*idxPerOctave))
			if d := b - want; d < -1 || d > 1 {
				t.Fatalf("logBucket(%d, %d) = %d, floor(16 log2) gives %d", c, m, b, want)
			}
			// the finer heap: its quarter of the bucket's range
			j := logSplit(c, m)
			f := idxSplitHeap(b, j)
			if q < bucketLo(f) || (j+1 < idxSplit && q >= bucketLo(f+1)/(1-idxSlack)) || (j+1 == idxSplit && b+1 < idxInfB && q >= bucketLo(b+1)/(1-idxSlack)) {
				t.Fatalf("logSplit(%d, %d) = %d: c/m = %v outside [%v, %v)", c, m, j, q, bucketLo(f), bucketLo(f+1))
			}
		}
	}
}

// TestBucketLo checks bucketLo against 2^(j/idxPerOctave) less the slack,
// the closed form of the j-th log bucket's bound, and against
// 2^(k/(idxPerOctave*idxSplit)) for the finer heaps.
func TestBucketLo(t *testing.T) {
	for b := idxFirst; b < idxInfB; b++ {
		want := math.Exp2(float64(b-idxFirst-idxOctaves*idxPerOctave)/idxPerOctave) * (1 - idxSlack)
		if got := bucketLo(b); math.Abs(got-want) > want*1e-15 {
			t.Fatalf("bucketLo(%d) = %v, want %v", b, got, want)
		}
	}
	for b := idxFirst; b < idxInfB; b++ {
		for j := 0; j < idxSplit; j++ {
			k := (b-idxFirst-idxOctaves*idxPerOctave)*idxSplit + j
			want := math.Exp2(float64(k)/(idxPerOctave*idxSplit)) * (1 - idxSlack)
			if got := bucketLo(idxSplitHeap(b, j)); math.Abs(got-want) > want*1e-15 {
				t.Fatalf("bucketLo(finer heap %d of %d) = %v, want %v", j, b, got, want)
			}
		}
		require.Equal(t, bucketLo(b), bucketLo(idxSplitHeap(b, 0)), "the first finer heap's bound is its bucket's")
	}
	require.Less(t, idxAllHeaps, math.MaxInt16, "heap numbers fit storage.ibucket")
	require.Zero(t, bucketLo(idxZero))
	require.Zero(t, bucketLo(idxLow))
	require.Zero(t, bucketLo(idxNever))
	require.True(t, math.IsInf(bucketLo(idxInfB), 1))
}

// TestBurstBounds checks the burst's score bounds (startBurst): replays with
// and without them make the same choices (same evictions, clock and
// rematerializations), and with them the region heuristics evaluate fewer
// candidates.
func TestBurstBounds(t *testing.T) {
	var with, without int64
	for seed := uint64(1); seed <= 8; seed++ {
		for _, h := range []Heuristic{HDTR, HDTREqClass, MSPS, Lookahead, LookaheadMSPS, LookaheadDTR} {
			var st [2]Stats
			var errs [2]error
			for i, off := range []bool{false, true} {
				cfg := DefaultConfig()
				cfg.Heuristic = h
				cfg.EvicteeMinSize = 0
				cfg.LazyLock = seed%2 == 0
				cfg.Budget = 150_000 + int64(seed%12)*20_000
				rt, err := New(cfg, nil)
				require.NoError(t, err)
				rt.noBurstBounds = off
				// region key parts (regionKeep) hold off what the bounds
				// would: without them the bounds show
				rt.idx.region = false
				errs[i] = randomProgram(rt, rand.New(rand.NewPCG(seed, 7)), 400)
				st[i] = rt.Stats()
			}
			name := fmt.Sprintf("seed %d %s", seed, h)
			requireSameRun(t, name, st, errs)
			require.LessOrEqual(t, st[0].HeuristicEvals, st[1].HeuristicEvals, name)
			if h == HDTR || h == MSPS {
				with += st[0].HeuristicEvals
				without += st[1].HeuristicEvals
			}
		}
	}
	t.Logf("h_DTR and MSPS evaluations: %d with the bounds, %d without", with, without)
	require.Less(t, with, without)
}

// TestIndexMatchesScanOnTies: on a residual network whose blocks repeat one
// shape (storages of equal cost and size, accessed at one clock when a
// rematerialization touches a rebuilt chain), the staleness heaps' order of
// ties and the subtrees it prunes (staleSubtreeAbove), and lru's and size's
// exact heaps, choose what the scan chooses at every eviction.
func TestIndexMatchesScanOnTies(t *testing.T) {
	var tc tieChecks
	for _, h := range []Heuristic{HDTR, HDTREqClass, HDTRLocal, LookaheadDTR, LRU, Size} {
		for _, ratio := range []float64{0.5, 0.3} {
			rt, _, err := zooUnderDTR(t, "resnet-cifar", models.Options{Depth: 56, Optimizer: "sgd"}, ratio, func(cfg *Config, _ *sim.Result) {
				cfg.Heuristic, cfg.KeepForRemat = h, true
			}, func(rt *Runtime) { rt.idxCheck = true })
			name := fmt.Sprintf("%s %.1f", h, ratio)
			if err != nil {
				require.True(t, errors.Is(err, sim.ErrOutOfMemory) || errors.Is(err, ErrThrashing), name)
			}
			tc.check(t, rt, name)
		}
	}
	tc.done(t, 0)
}

// tieChecks checks indexed runs against the scan and counts their
// evictions and the tied subtrees pruned.
type tieChecks struct{ prunes, evictions int64 }

func (c *tieChecks) check(t *testing.T, rt *Runtime, name string) {
	t.Helper()
	require.Zero(t, rt.idxMismatch, name)
	require.Zero(t, rt.idxBadKeys, name)
	require.Zero(t, rt.idxBadRefs, name)
	c.prunes += rt.stalePrunes
	c.evictions += rt.Stats().Evictions
}

// done logs the counts and requires more than 100 pruned subtrees and more
// than minEvictions evictions.
func (c *tieChecks) done(t *testing.T, minEvictions int64) {
	t.Helper()
	t.Logf("%d evictions checked, %d tied subtrees pruned", c.evictions, c.prunes)
	require.Greater(t, c.prunes, int64(100))
	require.Greater(t, c.evictions, minEvictions)
}

// tieProgram drives rt with chains of identical ops (one cost, one size)
// whose old links the program reads again at random, so that rebuilding a
// chain touches its links at one clock: ties in cost, size and last
// access, across sibling subtrees of the index's heaps.
func tieProgram(rt *Runtime, rng *rand.Rand, n int) error {
	c, err := rt.Constant(1000)
	if err != nil {
		return err
	}
	var links []TensorID
	prev := c
	for i := 0; i < n; i++ {
		in := prev
		if len(links) > 0 && rng.IntN(6) == 0 {
			in = links[rng.IntN(len(links))] // read an old link again
		}
		if rng.IntN(9) == 0 {
			in = c // a new chain
		}
		_, res, err := rt.Compute([]TensorID{in}, 10, []Output{{Bytes: 1000, AliasOf: -1}})
		if err != nil {
			return err
		}
		links = append(links, res[0])
		prev = res[0]
		if len(links) > 60 {
			j := rng.IntN(len(links) / 2)
			if err := rt.Release(links[j]); err != nil {
				return err
			}
			links = append(links[:j], links[j+1:]...)
		}
	}
	return nil
}

// TestIndexMatchesScanOnTieChains checks the index against the scan at every
// eviction of tieProgram, with the staleness heuristics and lru and size.
func TestIndexMatchesScanOnTieChains(t *testing.T) {
	var tc tieChecks
	for seed := uint64(1); seed <= 24; seed++ {
		for _, h := range []Heuristic{HDTR, HDTREqClass, HDTRLocal, LRU, Size} {
			rt, err := New(smallConfig(h, 12_000+int64(seed%6)*3_000, "drop"), nil)
			require.NoError(t, err)
			rt.idxCheck = true
			if err := tieProgram(rt, rand.New(rand.NewPCG(seed, 13)), 500); err != nil {
				require.ErrorIs(t, err, sim.ErrOutOfMemory)
			}
			tc.check(t, rt, fmt.Sprintf("seed %d %s", seed, h))
		}
	}
	tc.done(t, 1000)
}

// TestIndexSplitMatchesScan lowers the members a log bucket holds before
// it files in its finer heaps (candIndex.crowded) to 2, so that nearly
// every bucket splits, and checks at every eviction that the index still
// chooses what the scan chooses and that every filed key is a bound, on
// both logs at every ratio (the staleness and lookahead kinds, which
// split), on random programs and on zoo models, and in parity mode with
// the reference heuristics of the staleness kind.
func TestIndexSplitMatchesScan(t *testing.T) {
	var split, choices int64
	setup := func(rt *Runtime) {
		rt.idxCheck = true
		if rt.idx != nil {
			rt.idx.crowded = 2
		}
	}
	check := func(rt *Runtime, name string) {
		require.Zero(t, rt.idxMismatch, name)
		require.Zero(t, rt.idxBadKeys, name)
		require.Zero(t, rt.idxBadRefs, name)
		if rt.idx != nil {
			split += rt.idx.splitFiled
		}
		choices += rt.Stats().Evictions
	}
	hs := []Heuristic{HDTR, HDTREqClass, HDTRLocal, MegEngine, Lookahead, LookaheadMSPS, LookaheadDTR}
	eqFixedRuns(t, hs, 13, setup, check)
	eqZooRuns(t, hs, setup, check)
	// parity mode: the reference heuristics of the staleness kind
	for _, h := range []Heuristic{HDTR, HDTREqClass, HDTRLocal} {
		parityRandomRuns(t, h, 12, 17, setup, check)
	}
	if _, ok := logsPresent(); ok {
		for _, m := range []string{"resnet32", "unet"} {
			tr := loadTrace(t, m)
			base, err := MeasureBaseline(tr)
			require.NoError(t, err)
			for _, h := range hs {
				for _, ratio := range DefaultRatios {
					cfg := logRunConfig(h, false, base, ratio)
					rt, err := New(cfg, nil)
					require.NoError(t, err)
					setup(rt)
					if h.NeedsOracle() {
						rt.SetOracle(newTraceOracle(tr))
					}
					_ = rt.replay(context.Background(), tr) // thrashing or out of memory, as the scan would
					check(rt, fmt.Sprintf("%s %s ratio %.1f", m, h, ratio))
					if h == HDTREqClass || h == HDTRLocal {
						pc := ParityConfig(h)
						pc.Budget, pc.RematLimit = cfg.Budget, cfg.RematLimit
						rp, err := New(pc, nil)
						require.NoError(t, err)
						setup(rp)
						_ = rp.replay(context.Background(), tr)
						check(rp, fmt.Sprintf("%s %s parity ratio %.1f", m, h, ratio))
					}
				}
			}
		}
	}
	t.Logf("%d evictions checked, %d filings in finer heaps", choices, split)
	require.Greater(t, split, int64(10000))
}
