package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/dtr"
)

// TestDTRSweepReferenceNote: parity cells where the reference simulator
// fails an assertion are marked "*" in table and markdown output, with the
// note under the table, and left unmarked in CSV (which carries no note).
func TestDTRSweepReferenceNote(t *testing.T) {
	d := &DTRSweep{Ratios: []float64{1, 0.5}, Parity: true, Runs: []*dtr.SweepResult{{
		Heuristic: "dtr", Parity: true,
		Results: []dtr.RatioResult{
			{Ratio: 1, Status: dtr.StatusOK, Overhead: 1},
			{Ratio: 0.5, Status: dtr.StatusOOM, ReferenceAsserts: 2},
		},
	}}}
	for _, f := range []Format{FormatTable, FormatMarkdown, FormatCSV} {
		var b bytes.Buffer
		require.NoError(t, d.Write(&b, f))
		out := b.String()
		if f == FormatCSV {
			require.NotContains(t, out, "*")
			require.Contains(t, out, "dtr,1.000000,oom")
			continue
		}
		require.Contains(t, out, "oom*")
		require.NotContains(t, out, "1.000*")
		require.True(t, strings.HasSuffix(out, referenceNote), "%s output ends with the note:\n%s", f, out)
	}
	d.Runs[0].Results[1].ReferenceAsserts = 0
	var b bytes.Buffer
	require.NoError(t, d.Write(&b, FormatTable))
	require.NotContains(t, b.String(), "*")
}

// TestDTRSweepLimitNote: a budget whose parity regions outgrew their limit
// shows "limit" in every format and, outside CSV and JSON, the note that
// explains it; without such a cell there is no note.
func TestDTRSweepLimitNote(t *testing.T) {
	d := &DTRSweep{Ratios: []float64{1, 0.5}, Parity: true, Runs: []*dtr.SweepResult{{
		Heuristic: "dtr", Parity: true,
		Results: []dtr.RatioResult{
			{Ratio: 1, Status: dtr.StatusOK, Overhead: 1},
			{Ratio: 0.5, Status: dtr.StatusLimit},
		},
	}}}
	for _, f := range []Format{FormatTable, FormatMarkdown, FormatCSV, FormatJSON} {
		var b bytes.Buffer
		require.NoError(t, d.Write(&b, f))
		out := b.String()
		switch f {
		case FormatCSV:
			require.Contains(t, out, "dtr,1.000000,limit")
			require.NotContains(t, out, limitNote)
		case FormatJSON:
			require.Contains(t, out, `"status": "limit"`)
			require.NotContains(t, out, limitNote)
		default:
			require.Contains(t, out, "limit")
			require.True(t, strings.HasSuffix(out, limitNote), "%s output ends with the note:\n%s", f, out)
		}
	}
	d.Runs[0].Results[1].Status = dtr.StatusOOM
	var b bytes.Buffer
	require.NoError(t, d.Write(&b, FormatTable))
	require.NotContains(t, b.String(), limitNote)
}
