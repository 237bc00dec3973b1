package dtr

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
	"github.com/stretchr/testify/require"
)

// TestRegionKeys checks the region key parts (regionKeep): with and without
// them, h_DTR and the MSPS family make the same choices (both runs checked
// against the scan at every choice, with every filed part at most its
// candidate's region sum then), end alike, and evaluate fewer candidates
// with them; and the returns of counted storages re-key their candidates
// (regionFlushes), which the scan check needs (a part kept after a return
// overstates the region). The zoo runs compact every list often
// (wregCompactAll), which must drop stale registrations only.
func TestRegionKeys(t *testing.T) {
	var with, without, flushes, zooEvictions, compactions int64
	type run func(rt *Runtime) error
	type prog struct {
		name, mode string
		f          run
	}
	var progs []prog
	for seed := uint64(1); seed <= 6; seed++ {
		mode := []string{"drop", "swap", "banish"}[seed%3]
		progs = append(progs, prog{fmt.Sprintf("random %d %s", seed, mode), mode, func(rt *Runtime) error {
			return randomProgram(rt, rand.New(rand.NewPCG(seed, 11)), 400)
		}})
	}
	for _, h := range []Heuristic{HDTR, MSPS, LookaheadMSPS, LookaheadDTR} {
		for _, ratio := range []float64{0.5, 0.3} {
			var st [2]Stats
			var errs [2]error
			for i, off := range []bool{false, true} {
				rt, _, err := zooUnderDTR(t, "resnet-cifar", models.Options{Depth: 200, Optimizer: "sgd"}, ratio, func(cfg *Config, _ *sim.Result) {
					cfg.Heuristic, cfg.KeepForRemat = h, true
				}, func(rt *Runtime) {
					rt.idxCheck = true
					require.True(t, rt.idx.region, h.String())
					rt.idx.region = !off
					rt.wregCap = 256 // compact every list often (wregCompactAll)
				})
				name := fmt.Sprintf("resnet-cifar %s %.1f region=%v", h, ratio, !off)
				if err != nil {
					require.True(t, errors.Is(err, sim.ErrOutOfMemory) || errors.Is(err, ErrThrashing), name)
				}
				require.Zero(t, rt.idxMismatch, name)
				require.Zero(t, rt.idxBadKeys, name)
				require.Zero(t, rt.idxBadRefs, name)
				st[i], errs[i] = rt.Stats(), err
				if !off {
					flushes += rt.regionFlushes
					compactions += rt.wregCompactions
				}
			}
			name := fmt.Sprintf("resnet-cifar %s %.1f", h, ratio)
			requireSameRun(t, name, st, errs)
			zooEvictions += st[0].Evictions
			with += st[0].HeuristicEvals
			without += st[1].HeuristicEvals
		}
		for _, p := range progs {
			var st [2]Stats
			var errs [2]error
			for i, off := range []bool{false, true} {
				cfg := smallConfig(h, 150_000, p.mode)
				rt, err := New(cfg, nil)
				require.NoError(t, err)
				rt.idxCheck = true
				rt.idx.region = !off
				errs[i] = p.f(rt)
				name := fmt.Sprintf("%s %s region=%v", p.name, h, !off)
				require.Zero(t, rt.idxMismatch, name)
				require.Zero(t, rt.idxBadKeys, name)
				require.Zero(t, rt.idxBadRefs, name)
				st[i] = rt.Stats()
				if !off {
					flushes += rt.regionFlushes
				}
			}
			name := fmt.Sprintf("%s %s", p.name, h)
			requireSameRun(t, name, st, errs)
			with += st[0].HeuristicEvals
			without += st[1].HeuristicEvals
		}
	}
	t.Logf("evaluations: %d with region key parts, %d without; %d returns re-keyed candidates; %d evictions on resnet-cifar; %d compactions of every list", with, without, flushes, zooEvictions, compactions)
	require.Positive(t, compactions)
	require.Greater(t, zooEvictions, int64(2000))
	require.Less(t, with, without)
	require.Greater(t, flushes, int64(100))
}

// requireSameRun requires that two runs made the same choices and ended
// alike (their evaluations aside).
func requireSameRun(t *testing.T, name string, st [2]Stats, errs [2]error) {
	t.Helper()
	require.Equal(t, errs[1] == nil, errs[0] == nil, name)
	require.Equal(t, st[1].Evictions, st[0].Evictions, name)
	require.Equal(t, st[1].Remats, st[0].Remats, name)
	require.Equal(t, st[1].Clock, st[0].Clock, name)
	require.Equal(t, st[1].RematCompute, st[0].RematCompute, name)
	require.Equal(t, st[1].PeakMemory, st[0].PeakMemory, name)
}
