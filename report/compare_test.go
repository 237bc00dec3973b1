package report

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

var update = flag.Bool("update", false, "rewrite golden files")

// golden compares got with testdata/name, rewriting it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "golden file missing: run go test ./report -update")
	assert.Equal(t, string(want), string(got))
}

func TestCompareEveryStrategyOnResNet18(t *testing.T) {
	g, err := models.Build("resnet18", models.Options{Batch: 2})
	require.NoError(t, err)
	dev, err := sim.Device("a100-40gb")
	require.NoError(t, err)
	env, err := NewEnv(g, dev, "caching", 0, nil)
	require.NoError(t, err)
	rep, err := Compare(context.Background(), env, nil, nil)
	require.NoError(t, err)
	require.Len(t, rep.Rows, len(Strategies()))
	for _, r := range rep.Rows {
		assert.NotEqual(t, StatusError, r.Status, "%s: %s", r.Strategy, r.Reason)
		if r.Plan != nil && r.Strategy != "dtr" {
			_, err := sim.Simulate(g, r.Plan, sim.Options{})
			assert.NoError(t, err, r.Strategy)
		}
	}
	assert.Equal(t, "none", rep.Rows[0].Strategy)
	assert.InDelta(t, 1.0, rep.Rows[0].Overhead, 1e-12)
}

func TestMirrorStrategyFollowsTheGlobalSwitch(t *testing.T) {
	g, err := models.Build("resnet18", models.Options{Batch: 2})
	require.NoError(t, err)
	mirrorOnly, err := LookupStrategies([]string{"mirror"})
	require.NoError(t, err)
	run := func(env map[string]string) Row {
		s, _, err := config.Load(config.MapEnv(env))
		require.NoError(t, err)
		e, err := NewEnv(g, sim.Profile{}, "ideal", 0, s)
		require.NoError(t, err)
		return RunStrategy(context.Background(), e, mirrorOnly[0])
	}
	def := run(nil)
	assert.Greater(t, def.Recomputes, 0, "choosing the strategy turns mirroring on")
	off := run(map[string]string{"MXNET_BACKWARD_DO_MIRROR": "0"})
	assert.Equal(t, 0, off.Recomputes, "an explicit 0 is MXNet's global switch")
	on := run(map[string]string{"MXNET_BACKWARD_DO_MIRROR": "1"})
	assert.Equal(t, def.Recomputes, on.Recomputes)
}
