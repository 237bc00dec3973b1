package dtr

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph/dtrlog"
	"github.com/remat-dev/remat/graph/models"
)

// logTrace compiles a DTR log given as lines of JSON.
func logTrace(t *testing.T, lines []string) *dtrlog.Trace {
	t.Helper()
	tr, err := dtrlog.Compile(strings.NewReader(strings.Join(lines, "\n") + "\n"))
	require.NoError(t, err)
	return tr
}

func logConst(name string, size int64) []string {
	return []string{
		fmt.Sprintf(`{"INSTRUCTION":"CONSTANT","NAME":%q}`, name),
		fmt.Sprintf(`{"INSTRUCTION":"MEMORY","MEMORY":"%d","NAME":%q}`, size, name),
	}
}

func logCall(name string, args []string, results []string, sizes []int64) []string {
	q := func(l []string) string {
		var b strings.Builder
		for i, s := range l {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "%q", s)
		}
		return b.String()
	}
	out := []string{fmt.Sprintf(`{"ARGS":[%s],"INSTRUCTION":"CALL","NAME":%q,"RESULT":[%s],"TIME":"10"}`, q(args), name, q(results))}
	for i, r := range results {
		out = append(out, fmt.Sprintf(`{"INSTRUCTION":"MEMORY","MEMORY":"%d","NAME":%q}`, sizes[i], r),
			fmt.Sprintf(`{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":%q}`, r))
	}
	return out
}

func logRelease(name string) string {
	return fmt.Sprintf(`{"INSTRUCTION":"RELEASE","NAME":%q}`, name)
}

// TestTightenLowerBoundHand: k reads A and B, each made from a 10-byte
// tensor (P, Q) made from the pinned input. The largest single-op working
// set is fa's or fb's: input + P + A = 12 bytes. But before k runs, A and B
// are both resident, and the later of the two was made while the other was
// held: input + A + P + B = 13 bytes (either order). Such a run exists
// (drop P once A is made), so 13 is the least budget that fits, and the
// sweep's runs agree: none fits 12, some fit 13.
func TestTightenLowerBoundHand(t *testing.T) {
	var lines []string
	lines = append(lines, logConst("in", 1)...)
	lines = append(lines, logCall("f", []string{"in"}, []string{"P"}, []int64{10})...)
	lines = append(lines, logCall("fa", []string{"P"}, []string{"A"}, []int64{1})...)
	lines = append(lines, logCall("g", []string{"in"}, []string{"Q"}, []int64{10})...)
	lines = append(lines, logCall("fb", []string{"Q"}, []string{"B"}, []int64{1})...)
	lines = append(lines, logRelease("P"), logRelease("Q"))
	lines = append(lines, logCall("k", []string{"A", "B"}, []string{"O"}, []int64{1})...)
	tr := logTrace(t, lines)
	simple := ComputeLowerBound(tr)
	require.Equal(t, int64(12), simple.Bytes)
	require.Empty(t, simple.Source)
	lb, err := TightenLowerBound(context.Background(), tr, simple, 0)
	require.NoError(t, err)
	require.Equal(t, int64(13), lb.Bytes)
	require.Equal(t, BoundInputs, lb.Source)
	require.Equal(t, "k", tr.Ops[lb.Op].Name)
	require.Equal(t, tr.Ops[lb.Op].Line, lb.Line)

	base, err := MeasureBaseline(tr)
	require.NoError(t, err)
	require.Equal(t, int64(23), base.PeakBytes) // P is released after B
	require.False(t, anyFits(t, tr, base, lb.Bytes, 12))
	require.True(t, anyFits(t, tr, base, lb.Bytes, 13))

	_, err = TightenLowerBound(context.Background(), tr, simple, -1)
	require.ErrorContains(t, err, "effort -1")
	got, err := TightenLowerBound(context.Background(), nil, LowerBound{Bytes: 5}, 0)
	require.ErrorIs(t, err, ErrNilTrace)
	require.Equal(t, LowerBound{Bytes: 5}, got)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err = TightenLowerBound(ctx, tr, simple, 0)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, simple, got)
}

// anyFits runs every heuristic, with eager and lazy locking, at budget
// bytes of tr (baseline base), requires every run that fits to peak at lb
// or above, and reports whether one fits.
func anyFits(t *testing.T, tr *dtrlog.Trace, base Baseline, lb, budget int64) bool {
	t.Helper()
	fit := false
	for _, h := range Heuristics {
		for _, lazy := range []bool{false, true} {
			cfg := DefaultConfig()
			cfg.EvicteeMinSize, cfg.LazyLock, cfg.KeepForRemat = 0, lazy, true
			// half a byte up: the ratio times the peak must not round
			// below the budget
			res, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: h, Base: &cfg, Ratios: []float64{(float64(budget) + 0.5) / float64(base.PeakBytes)}})
			require.NoError(t, err)
			if r := res.Results[0]; r.Status == StatusOK {
				require.GreaterOrEqual(t, r.PeakMemoryBytes, lb, "%s lazy %v at %d bytes", h, lazy, budget)
				fit = true
			}
		}
	}
	return fit
}

// randomLog is a small random DAG: pinned constants, a few branches that
// make a small tensor from a large one, then ops of one to three arguments
// among the tensors made so far (some of them views, some mutating their
// first argument in place) with one or two results, small or large; most
// tensors are released soon after.
func randomLog(rng *rand.Rand, ops int) []string {
	var lines []string
	var live []string
	for i := range 1 + rng.IntN(2) {
		n := fmt.Sprintf("c%d", i)
		lines = append(lines, logConst(n, 1+rng.Int64N(4))...)
		live = append(live, n)
	}
	// branches that make a small tensor from a large one, joined later:
	// the pattern where producing an op's inputs holds more than the op
	for i := range 2 + rng.IntN(4) {
		p, a := fmt.Sprintf("p%d", i), fmt.Sprintf("a%d", i)
		lines = append(lines, logCall("big", []string{live[rng.IntN(len(live))]}, []string{p}, []int64{8 + rng.Int64N(12)})...)
		lines = append(lines, logCall("small", []string{p}, []string{a}, []int64{1 + rng.Int64N(2)})...)
		lines = append(lines, logRelease(p))
		live = append(live, a)
	}
	for i := range ops {
		var args []string
		for range 1 + rng.IntN(3) {
			args = append(args, live[rng.IntN(len(live))])
		}
		if a := args[0]; rng.IntN(6) == 0 && !strings.HasPrefix(a, "c") && !strings.HasPrefix(a, "v") {
			// in place: a new version of the first argument's storage
			q := make([]string, len(args))
			for k, x := range args {
				q[k] = fmt.Sprintf("%q", x)
			}
			lines = append(lines, fmt.Sprintf(`{"ARGS":[%s],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"add_","TIME":"5"}`, strings.Join(q, ",")))
			continue
		}
		if rng.IntN(6) == 0 {
			v := fmt.Sprintf("v%d", i)
			lines = append(lines, fmt.Sprintf(`{"ARGS":[%q],"INSTRUCTION":"CALL","NAME":"view","RESULT":[%q],"TIME":"1"}`, args[0], v),
				fmt.Sprintf(`{"INSTRUCTION":"MEMORY","MEMORY":"0","NAME":%q}`, v),
				fmt.Sprintf(`{"ALIAS":"0","INSTRUCTION":"ALIAS","NAME":%q}`, v))
			live = append(live, v)
			continue
		}
		var res []string
		var sizes []int64
		for j := range 1 + rng.IntN(2) {
			res = append(res, fmt.Sprintf("t%d_%d", i, j))
			// mostly small, so that the branches' large tensors decide
			if rng.IntN(4) == 0 {
				sizes = append(sizes, 4+rng.Int64N(12))
			} else {
				sizes = append(sizes, 1+rng.Int64N(3))
			}
		}
		lines = append(lines, logCall(fmt.Sprintf("op%d", i), args, res, sizes)...)
		live = append(live, res...)
		// release most tensors soon (what is live at the end stays
		// pinned, and would be the bound); the constants stay
		for len(live) > 4 {
			k := len(live) - 1 - rng.IntN(len(live)-2)
			if strings.HasPrefix(live[k], "c") {
				break
			}
			lines = append(lines, logRelease(live[k]))
			live = append(live[:k], live[k+1:]...)
		}
	}
	return lines
}

// bruteBound is the production-order bound by exhaustive memoized
// recursion over storage sets (bit masks), over every op with arguments:
// the oracle for TightenLowerBound's search on tiny traces.
func bruteBound(tr *dtrlog.Trace) int64 {
	b := newBoundSearch(tr)
	idx := map[int32]int{} // storage root -> bit
	var roots []int32
	for i := range tr.Tensors {
		if s := int32(i); tr.Tensors[i].Storage == s && !b.pinned0[s] {
			idx[s] = len(roots)
			roots = append(roots, s)
		}
	}
	if len(roots) > 62 {
		panic("trace too large for the oracle")
	}
	maskOf := func(l []int32) uint64 {
		var m uint64
		for _, s := range l {
			m |= 1 << idx[s]
		}
		return m
	}
	size := func(m uint64) int64 {
		v := b.p0
		for i, s := range roots {
			if m&(1<<i) != 0 {
				v += b.size[s]
			}
		}
		return v
	}
	memo := map[uint64]int64{}
	var f func(m uint64) int64
	f = func(m uint64) int64 {
		if m == 0 {
			return 0
		}
		if v, ok := memo[m]; ok {
			return v
		}
		best := int64(-1)
		for i, x := range roots {
			if m&(1<<i) == 0 {
				continue
			}
			p := tr.Tensors[x].Op
			var outs uint64
			for j, y := range roots {
				if tr.Tensors[y].Op == p {
					outs |= 1 << j
				}
			}
			in := maskOf(b.ins[p])
			v := max(size((m&^outs)|in)+tr.Ops[p].TotalSize(), f((m&^outs)|in))
			if best < 0 || v < best {
				best = v
			}
		}
		memo[m] = best
		return best
	}
	lb := ComputeLowerBound(tr).Bytes
	for _, c := range b.candidates() {
		lb = max(lb, c.need, f(maskOf(b.ins[c.op])))
	}
	return lb
}

// TestTightenLowerBoundRandom: on random tiny traces the search finds the
// exhaustive recursion's bound exactly (every op is a candidate, and the
// effort is enough to finish), and no run of any heuristic (eager and lazy
// locking, and the reference heuristics in parity mode), at any budget,
// peaks below it.
func TestTightenLowerBoundRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 17))
	raised := 0
	const trials = 200
	for trial := range trials {
		tr := logTrace(t, randomLog(rng, 4+rng.IntN(9)))
		require.LessOrEqual(t, len(tr.Ops), boundOps)
		simple := ComputeLowerBound(tr)
		lb, err := TightenLowerBound(context.Background(), tr, simple, 1<<40)
		require.NoError(t, err)
		require.Equal(t, bruteBound(tr), lb.Bytes, "trial %d", trial)
		require.GreaterOrEqual(t, lb.Bytes, simple.Bytes)
		if lb.Bytes > simple.Bytes {
			raised++
		}
		base, err := MeasureBaseline(tr)
		require.NoError(t, err)
		var ratios []float64
		for r := 1.0; r > 0.2; r -= 0.04 {
			ratios = append(ratios, r)
		}
		// every heuristic with eager and lazy locking, and the reference
		// heuristics with the reference simulator's semantics
		var opts []SweepOptions
		for _, h := range Heuristics {
			for _, lazy := range []bool{false, true} {
				cfg := DefaultConfig()
				cfg.EvicteeMinSize, cfg.KeepForRemat, cfg.LazyLock = 0, true, lazy
				opts = append(opts, SweepOptions{Heuristic: h, Base: &cfg, Ratios: ratios})
			}
		}
		for _, h := range ReferenceHeuristics {
			opts = append(opts, SweepOptions{Heuristic: h, Parity: true, Ratios: ratios})
		}
		for _, o := range opts {
			res, err := Sweep(context.Background(), tr, o)
			require.NoError(t, err)
			for _, r := range res.Results {
				if r.Status == StatusOK {
					require.GreaterOrEqual(t, r.PeakMemoryBytes, lb.Bytes, "trial %d %s (parity %v) at %.2f (baseline %d)", trial, o.Heuristic, o.Parity, r.Ratio, base.PeakBytes)
				}
			}
		}
	}
	t.Logf("the search raised the single-op bound on %d of %d traces", raised, trials)
	require.GreaterOrEqual(t, raised, 5)
}

// BenchmarkTightenLowerBound: the production-order bound at its default
// effort on the artifact's two logs (skipped without them) and on a zoo
// log; the figures are the bound over the baseline peak, before and after.
//
//	go test ./dtr -run XXX -bench TightenLowerBound
func BenchmarkTightenLowerBound(b *testing.B) {
	type entry struct {
		name string
		tr   *dtrlog.Trace
	}
	logs := []entry{{"resnet-cifar-zoo", zooTrace(b, "resnet-cifar", models.Options{Batch: 32, Depth: 20})}}
	if _, ok := logsPresent(); ok {
		logs = append(logs, entry{"resnet32", loadTrace(b, "resnet32")}, entry{"unet", loadTrace(b, "unet")})
	}
	for _, l := range logs {
		b.Run(l.name, func(b *testing.B) {
			base, err := MeasureBaseline(l.tr)
			if err != nil {
				b.Fatal(err)
			}
			simple := ComputeLowerBound(l.tr)
			var lb LowerBound
			for i := 0; i < b.N; i++ {
				if lb, err = TightenLowerBound(context.Background(), l.tr, simple, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(simple.Bytes)/float64(base.PeakBytes), "op-bound")
			b.ReportMetric(float64(lb.Bytes)/float64(base.PeakBytes), "bound")
		})
	}
}

// TestTightenLowerBoundAllResults: an op allocates all its results when it
// runs, also those no later op reads. k reads A and B (1 byte each). fa
// makes A and a 10-byte W (released at once) from P (2 bytes); fb makes B
// from Q (12 bytes); both working sets are 14 bytes with the pinned input.
// Whichever of A and B is made last, the other is held: 15 bytes either
// way. Counting only the results a later op reads, making A last would
// hold 1 + 1 + 2 + 1 = 5 bytes, and the bound would stay at 14. A run fits
// 15 (drop P before fb runs), so 15 is the least budget that fits.
func TestTightenLowerBoundAllResults(t *testing.T) {
	var lines []string
	lines = append(lines, logConst("in", 1)...)
	lines = append(lines, logCall("f", []string{"in"}, []string{"P"}, []int64{2})...)
	lines = append(lines, logCall("fa", []string{"P"}, []string{"A", "W"}, []int64{1, 10})...)
	lines = append(lines, logRelease("W"))
	lines = append(lines, logCall("g", []string{"in"}, []string{"Q"}, []int64{12})...)
	lines = append(lines, logCall("fb", []string{"Q"}, []string{"B"}, []int64{1})...)
	lines = append(lines, logRelease("P"), logRelease("Q"))
	lines = append(lines, logCall("k", []string{"A", "B"}, []string{"O"}, []int64{1})...)
	tr := logTrace(t, lines)
	simple := ComputeLowerBound(tr)
	require.Equal(t, int64(14), simple.Bytes)
	lb, err := TightenLowerBound(context.Background(), tr, simple, 0)
	require.NoError(t, err)
	require.Equal(t, int64(15), lb.Bytes)
	require.Equal(t, bruteBound(tr), lb.Bytes)
	require.Equal(t, "k", tr.Ops[lb.Op].Name)
	base, err := MeasureBaseline(tr)
	require.NoError(t, err)
	require.False(t, anyFits(t, tr, base, lb.Bytes, 14))
	require.True(t, anyFits(t, tr, base, lb.Bytes, 15), "no heuristic fits the bound")
}
