package dtr

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/dtrlog"
)

// TestConvertedInPlaceParity: a TreeLSTM traced with the DTR artifact's
// cell (testdata/inplace-treelstm.json, `tools/traced_logs.py --small
// --models dtr-treelstm`: c += a; c += b in place, once per child) written
// as a DTR log by dtrlog.FromGraph replays in parity mode with h_DTR and
// MSPS without an absorption at which the reference simulator's region
// assertion fails. Written as a CALL viewing c, the second in-place add
// made its other input a parent of c's existing storage, and simrd
// stopped on its assertion at every budget.
func TestConvertedInPlaceParity(t *testing.T) {
	g, err := graph.ReadFile(filepath.Join("testdata", "inplace-treelstm.json"))
	require.NoError(t, err)
	ins, err := dtrlog.FromGraph(g, nil)
	require.NoError(t, err)
	tr, err := dtrlog.CompileInstrs(ins)
	require.NoError(t, err)
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
