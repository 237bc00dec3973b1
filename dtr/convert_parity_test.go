package dtr

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/dtrlog"
)

// convertedTreeLSTM returns testdata/inplace-treelstm.json written as a DTR
// log by dtrlog.FromGraph and compiled.
func convertedTreeLSTM(t *testing.T) *dtrlog.Trace {
	t.Helper()
	g, err := graph.ReadFile(filepath.Join("testdata", "inplace-treelstm.json"))
	require.NoError(t, err)
	ins, err := dtrlog.FromGraph(g, nil)
	require.NoError(t, err)
	tr, err := dtrlog.CompileInstrs(ins)
	require.NoError(t, err)
	return tr
}

// TestConvertedInPlaceParity: a TreeLSTM traced with the DTR artifact's
// cell (testdata/inplace-treelstm.json, `tools/traced_logs.py --small
// --models dtr-treelstm`: c += a; c += b in place, once per child) written
// as a DTR log by dtrlog.FromGraph replays in parity mode with h_DTR and
// MSPS without an absorption at which the reference simulator's region
// assertion fails. Written as a CALL viewing c, the second in-place add
// made its other input a parent of c's existing storage, and simrd
// stopped on its assertion at every budget.
func TestConvertedInPlaceParity(t *testing.T) {
	tr := convertedTreeLSTM(t)
	for _, h := range []Heuristic{HDTR, MSPS} {
		res, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: h, Parity: true})
		require.NoError(t, err)
		var evictions int64
		for _, rr := range res.Results {
			require.Zero(t, rr.ReferenceAsserts, "%s at %v", h, rr.Ratio)
			evictions += rr.Evictions
		}
		require.Positive(t, evictions, "%s: no budget evicted anything", h)
	}
}

// TestConvertedParityIndexMatchesScan: on the traced TreeLSTM (views and
// in-place ops, whose costs rise while their storages are evicted, so
// parity mode's eq-classes can lose more than their evictions added), the
// index picks the scan's candidate at every eviction with the six
// reference heuristics at every ratio, and whole runs equal the scan's.
func TestConvertedParityIndexMatchesScan(t *testing.T) {
	tr := convertedTreeLSTM(t)
	base, err := MeasureBaseline(tr)
	require.NoError(t, err)
	replay := func(rt *Runtime) error { return rt.replay(context.Background(), tr) }
	var evictions int64
	negEpochs := 0
	for _, h := range ReferenceHeuristics {
		for _, ratio := range DefaultRatios {
			b := int64(float64(base.PeakBytes) * ratio)
			ri, errI := parityRun(t, replay, h, b, base.ComputeNs, false)
			rs, errS := parityRun(t, replay, h, b, base.ComputeNs, true)
			name := fmt.Sprintf("%s ratio %.1f", h, ratio)
			require.Zero(t, ri.idxMismatch, name)
			require.Zero(t, ri.idxBadKeys, name)
			require.Zero(t, ri.idxBadRefs, name)
			require.Equal(t, errS == nil, errI == nil, name)
			require.Equal(t, rs.Stats(), ri.Stats(), name)
			evictions += ri.Stats().Evictions
			negEpochs += ri.idx.negEpochs
		}
	}
	t.Logf("%d evictions checked; %d epochs keyed with live negative eq-classes", evictions, negEpochs)
	require.Positive(t, evictions)
}
