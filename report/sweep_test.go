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

// TestDTRSweepGapNote: under the table (not in CSV or JSON), a DTR sweep
// states the gap between the lowest ratio that fits (the best-of row's, or
// the one run's) and the lower bound, where the bound comes from, and the
// lowest of its ratios the bound allows.
func TestDTRSweepGapNote(t *testing.T) {
	d := &DTRSweep{Ratios: []float64{1, 0.5, 0.2, 0.1}, LowerBoundRatio: 0.15, Runs: []*dtr.SweepResult{{
		Heuristic: "dtr",
		Bound:     dtr.LowerBound{Bytes: 15, Op: 3, Line: 42, Source: dtr.BoundInputs},
		Results: []dtr.RatioResult{
			{Ratio: 1, Status: dtr.StatusOK, Overhead: 1},
			{Ratio: 0.5, Status: dtr.StatusOK, Overhead: 1.2},
			{Ratio: 0.2, Status: dtr.StatusOOM},
			{Ratio: 0.1, Status: dtr.StatusOOM},
		},
	}}}
	const want = "gap to the lower bound: the lowest ratio that fits is 0.5, 3.33x the bound 0.15 (what producing an op's inputs holds, log line 42); the lowest of these ratios it allows is 0.2\n"
	for _, f := range []Format{FormatTable, FormatMarkdown, FormatCSV, FormatJSON} {
		var b bytes.Buffer
		require.NoError(t, d.Write(&b, f))
		if f == FormatCSV || f == FormatJSON {
			require.NotContains(t, b.String(), "gap to the lower bound", f)
			continue
		}
		require.True(t, strings.HasSuffix(b.String(), want), "%s output ends with the gap:\n%s", f, b.String())
		if f == FormatMarkdown {
			// a blank line ends the table: a line right under it would
			// read as one more row
			require.Contains(t, b.String(), "|\n\n"+want)
		}
	}
	// the best-of row decides when there is one
	d.Best = []dtr.BestResult{{RatioResult: dtr.RatioResult{Ratio: 1, Status: dtr.StatusOK}}, {RatioResult: dtr.RatioResult{Ratio: 0.5, Status: dtr.StatusOK}},
		{RatioResult: dtr.RatioResult{Ratio: 0.2, Status: dtr.StatusOK}}, {RatioResult: dtr.RatioResult{Ratio: 0.1, Status: dtr.StatusOOM}}}
	d.LowestRatio = 0.2
	require.Contains(t, d.gapNote(), "the lowest ratio that fits is 0.2, 1.33x the bound 0.15")
	d.Best, d.LowestRatio = nil, 0
	for i := range d.Runs[0].Results {
		d.Runs[0].Results[i].Status = dtr.StatusThrash
	}
	d.Runs[0].Bound = dtr.LowerBound{Bytes: 15, Op: -1}
	require.Equal(t, "gap to the lower bound: no ratio fits; the bound is 0.15 (one op's working set); the lowest of these ratios it allows is 0.2\n", d.gapNote())
	d.LowerBoundRatio = 0
	require.Empty(t, d.gapNote())
}
