package sim_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/sim/alloc"
)

// The top blocks at the peak (and at an out-of-memory failure) are the same
// whether the Machine keeps every live block (LiveAtPeak) or selects the
// largest as it goes.
func TestTopAtPeakSelection(t *testing.T) {
	for _, name := range []string{"resnet18", "gpt", "densenet121"} {
		g, err := models.Build(name, models.Options{Batch: 2})
		require.NoError(t, err)
		p := sim.DefaultPlan(g)
		sel, err := sim.Simulate(g, p, sim.Options{})
		require.NoError(t, err)
		all, err := sim.Simulate(g, p, sim.Options{LiveAtPeak: true})
		require.NoError(t, err)
		assert.Equal(t, all.TopAtPeak, sel.TopAtPeak, name)
		assert.Len(t, sel.TopAtPeak, sim.TopTensorsKept, name)
		assert.Greater(t, len(all.TopTensorsAtPeak(1<<20)), sim.TopTensorsKept, name)

		// Out of memory half-way: the largest live blocks at the failure.
		capacity := all.PeakAllocated / 2
		oom, err := sim.Simulate(g, p, sim.Options{Allocator: alloc.NewIdeal(capacity), Capacity: capacity})
		require.ErrorIs(t, err, sim.ErrOutOfMemory, name)
		require.NotNil(t, oom.OOM, name)
		largest := oom.OOM.Largest
		require.Len(t, largest, sim.TopTensorsKept, name)
		for i := 1; i < len(largest); i++ {
			assert.GreaterOrEqual(t, largest[i-1].Bytes, largest[i].Bytes, "%s: largest first", name)
		}
		var live int64
		for _, l := range largest {
			live += l.Bytes
		}
		assert.LessOrEqual(t, live, oom.OOM.Allocated, name)
	}
}
