package dtr

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph/dtrlog"
)

var update = flag.Bool("update", false, "rewrite golden files")

// logsDir returns ../shared/data/dtr-logs relative to the repository root,
// skipping the test when absent.
func logsDir(t testing.TB) string {
	t.Helper()
	d, ok := logsPresent()
	if !ok {
		t.Skipf("DTR logs not available at %s", d)
	}
	return d
}

// logsPresent returns ../shared/data/dtr-logs relative to the repository
// root and whether the logs are there.
func logsPresent() (string, bool) {
	_, file, _, _ := runtime.Caller(0)
	repoRoot := filepath.Dir(filepath.Dir(file))
	d := filepath.Join(repoRoot, "..", "shared", "data", "dtr-logs")
	_, err := os.Stat(filepath.Join(d, "resnet32.log"))
	return d, err == nil
}

func loadTrace(t testing.TB, name string) *dtrlog.Trace {
	t.Helper()
	f, err := os.Open(filepath.Join(logsDir(t), name+".log"))
	require.NoError(t, err)
	defer f.Close()
	tr, err := dtrlog.Compile(f)
	require.NoError(t, err)
	tr.Name = name
	return tr
}

// refCell is one cell of the reference tables: overhead, or "thr" / "OOM".
type refCell struct {
	status   string
	overhead float64
}

func ok(x float64) refCell { return refCell{StatusOK, x} }

var thr = refCell{status: StatusThrash}
var oom = refCell{status: StatusOOM}

// Reference results from /work/shared/data/dtr-logs/README.md ("Reference
// results", measured with the authors' simulator simrd), ratios 1.0 .. 0.1.
var reference = map[string]map[Heuristic][]refCell{
	"resnet32": {
		HDTR:        {ok(1.002), ok(1.013), ok(1.025), ok(1.046), ok(1.074), ok(1.107), ok(1.140), ok(1.178), ok(1.371), thr},
		HDTREqClass: {ok(1.002), ok(1.013), ok(1.025), ok(1.046), ok(1.074), ok(1.107), ok(1.140), ok(1.179), ok(1.332), oom},
		HDTRLocal:   {ok(1.002), ok(1.013), ok(1.041), ok(1.067), ok(1.133), ok(1.197), thr, thr, thr, oom},
		MSPS:        {ok(1.002), ok(1.013), ok(1.024), ok(1.037), ok(1.063), ok(1.106), ok(1.146), ok(1.209), ok(1.431), oom},
		LRU:         {ok(1.003), ok(1.032), ok(1.067), ok(1.095), ok(1.130), thr, thr, thr, thr, oom},
		Size:        {ok(1.002), ok(1.030), ok(1.065), ok(1.092), ok(1.234), ok(1.452), ok(1.738), thr, thr, oom},
	},
	"unet": {
		HDTR:        {ok(1.003), ok(1.033), ok(1.058), ok(1.085), ok(1.131), ok(1.159), oom, oom, oom, oom},
		HDTREqClass: {ok(1.003), ok(1.033), ok(1.058), ok(1.085), ok(1.149), ok(1.159), oom, oom, oom, oom},
		HDTRLocal:   {ok(1.003), ok(1.028), ok(1.056), ok(1.091), ok(1.137), ok(1.847), oom, thr, oom, oom},
		MSPS:        {ok(1.003), ok(1.016), ok(1.033), ok(1.049), ok(1.088), ok(1.132), ok(1.241), ok(1.585), oom, oom},
		LRU:         {ok(1.008), ok(1.039), ok(1.062), ok(1.104), ok(1.225), thr, oom, thr, oom, oom},
		Size:        {ok(1.013), ok(1.043), ok(1.128), ok(1.158), ok(1.592), ok(1.659), oom, oom, oom, oom},
	},
}

// Baselines from the same README.
var referenceBaseline = map[string]Baseline{
	"resnet32": {PeakBytes: 10061179152, ComputeNs: 291905487, ConstantBytes: 35584920},
	"unet":     {PeakBytes: 8415764640, ComputeNs: 435278292, ConstantBytes: 93386276},
}

// Heuristic evaluations counted by simrd at resnet32, eq-class (README).
var referenceEvalsResnetEq = []int64{221, 1115, 1955, 2856, 3748, 4290, 4746, 5182, 8837, 31431}

func TestBaselineMatchesReference(t *testing.T) {
	for _, m := range []string{"resnet32", "unet"} {
		tr := loadTrace(t, m)
		b, err := MeasureBaseline(tr)
		require.NoError(t, err)
		require.Equal(t, referenceBaseline[m], b, m)
	}
}

func TestParityWithReference(t *testing.T) {
	for _, m := range []string{"resnet32", "unet"} {
		tr := loadTrace(t, m)
		for _, h := range ReferenceHeuristics {
			res, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: h, Parity: true})
			require.NoError(t, err)
			want := reference[m][h]
			for i, rr := range res.Results {
				w := want[i]
				msg := fmt.Sprintf("%s %s ratio %.1f: got %s %.4f (evals %d), want %s %.3f", m, h, rr.Ratio, rr.Status, rr.Overhead, rr.HeuristicEvals, w.status, w.overhead)
				t.Log(msg)
				if !(rr.Status == w.status && (w.status != StatusOK || math.Abs(rr.Overhead-w.overhead) <= 0.002)) {
					t.Error(msg)
				}
				if m == "resnet32" && h == HDTREqClass {
					if rr.HeuristicEvals != referenceEvalsResnetEq[i] {
						t.Errorf("resnet32 eq-class ratio %.1f: %d heuristic evaluations, reference %d", rr.Ratio, rr.HeuristicEvals, referenceEvalsResnetEq[i])
					}
				}
			}
		}
	}
}
