package dtr

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph/dtrlog"
)

// simrdCase is one testdata/simrd/LOG.HEURISTIC.json: the cells the
// reference simulator simrd (the DTR paper's, uwsampl/dtr-prototype)
// computed for LOG with HEURISTIC under the paper's protocol, written by
//
//	PYTHONPATH=DTR_PROTOTYPE/simrd /usr/bin/python3 tools/simrd_compare.py --worker LOG CLASS
//
// (the heuristic's simrd class as in tools/simrd_compare.py's HEURISTICS).
type simrdCase struct {
	Log       string `json:"log"`
	Heuristic string `json:"heuristic"`
	Cells     []struct {
		Ratio          float64 `json:"ratio"`
		Status         string  `json:"status"`
		ClockNs        int64   `json:"clock_ns"`
		RematComputeNs int64   `json:"remat_compute_ns"`
		HeuristicEvals int64   `json:"heuristic_evals"`
	} `json:"cells"`
}

// TestParitySimrdCases replays the small logs in testdata/simrd, each cut
// down by tools/simrd_fuzz.py --minimize from a random log on which sim's
// --parity sweep once disagreed with simrd, and checks every cell against
// simrd's own numbers: status, clock, rematerialization compute and
// heuristic evaluations.
//   - zero-time.log: ops of TIME 0 give staleness 0, which simrd scores as
//     +inf (n/0, 0/0 too); an infinite score must lose to every finite one
//     (the exact rational comparison cross-multiplied n/0 to 0).
//   - fresh-merge.log: simrd gives a new op's outputs an eq-class node of
//     value 0 when the op starts; an input evicted again while another
//     input is rematerialized merges with them, and the op's cost is then
//     subtracted from that class when it runs.
//   - region-new-child.log, region-choice.log: h_DTR's regions as simrd
//     keeps them (regions.go). A region walked before an op was created
//     does not reach the op's outputs behind a storage it holds, and one
//     walked while the op's inputs were being rematerialized keeps them;
//     the exact walk differs in evaluations (new-child) and in a choice
//     (choice: clock and rematerialization compute).
func TestParitySimrdCases(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "simrd", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			var c simrdCase
			require.NoError(t, json.Unmarshal(b, &c))
			h, err := ParseHeuristic(c.Heuristic)
			require.NoError(t, err)
			src, err := os.Open(filepath.Join("testdata", "simrd", c.Log))
			require.NoError(t, err)
			defer src.Close()
			tr, err := dtrlog.Compile(src)
			require.NoError(t, err)
			res, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: h, Parity: true})
			require.NoError(t, err)
			require.Len(t, res.Results, len(c.Cells))
			for i, want := range c.Cells {
				got := res.Results[i]
				require.Equal(t, want.Ratio, got.Ratio)
				require.Equal(t, []any{want.Status, want.ClockNs, want.RematComputeNs, want.HeuristicEvals},
					[]any{got.Status, got.ClockNs, got.RematComputeNs, got.HeuristicEvals},
					"ratio %.1f: status, clock, remat compute, evaluations", want.Ratio)
			}
		})
	}
}

// TestParityReferenceAsserts checks the count of the absorptions at which
// simrd's region bookkeeping would fail its assertion (RatioResult's
// ReferenceAsserts): region-assert.log is a random log (tools/simrd_fuzz.py
// --seeds 1:2 --ops 8, views on) on which simrd's h_DTR and MSPS stop with
// "assert frontier_s.root_id in self.frontier" at every budget below 1.0;
// simrd completes every other log in testdata/simrd, where the count must
// be 0 in every cell.
func TestParityReferenceAsserts(t *testing.T) {
	logs, err := filepath.Glob(filepath.Join("testdata", "simrd", "*.log"))
	require.NoError(t, err)
	for _, path := range logs {
		src, err := os.Open(path)
		require.NoError(t, err)
		tr, err := dtrlog.Compile(src)
		src.Close()
		require.NoError(t, err)
		fails := filepath.Base(path) == "region-assert.log"
		for _, h := range []Heuristic{HDTR, MSPS} {
			res, err := Sweep(context.Background(), tr, SweepOptions{Heuristic: h, Parity: true})
			require.NoError(t, err)
			for _, rr := range res.Results {
				if fails && rr.Ratio < 1 {
					require.Positive(t, rr.ReferenceAsserts, "%s %s ratio %.1f", path, h, rr.Ratio)
				} else {
					require.Zero(t, rr.ReferenceAsserts, "%s %s ratio %.1f", path, h, rr.Ratio)
				}
			}
		}
	}
}
