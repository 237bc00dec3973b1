package sim

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/config"
)

// Three static-shape graphs of 300, 500 and 400 MiB run in that order.
var staticGraphs = []SessionGraph{
	{Name: "A", Peak: 300 * mib},
	{Name: "B", Peak: 500 * mib},
	{Name: "C", Peak: 400 * mib},
}

func runHeld(r SessionResult) []int64 {
	out := make([]int64, len(r.Runs))
	for i, run := range r.Runs {
		out[i] = run.Held
	}
	return out
}

func TestSessionPolicyDynamic(t *testing.T) {
	r, err := PlanSession(staticGraphs, config.StaticDynamic, false)
	require.NoError(t, err)
	// Each graph holds its own peak only while it runs.
	assert.Equal(t, []int64{300 * mib, 500 * mib, 400 * mib}, runHeld(r))
	assert.Equal(t, 500*mib, r.Peak)
	assert.Equal(t, int64(0), r.Final)
	assert.Equal(t, 3, r.DeviceAllocs)
	assert.Equal(t, 1200*mib, r.DeviceBytes) // 300 + 500 + 400
	for _, run := range r.Runs {
		assert.Equal(t, SourceDynamic, run.Source)
	}
}

func TestSessionPolicyStatic(t *testing.T) {
	r, err := PlanSession(staticGraphs, config.StaticArena, false)
	require.NoError(t, err)
	// A allocates a 300 MiB arena; B releases it and allocates 500 MiB; C
	// runs in the 500 MiB arena.
	assert.Equal(t, []int64{300 * mib, 500 * mib, 500 * mib}, runHeld(r))
	assert.Equal(t, SessionRun{Name: "B", Peak: 500 * mib, Source: SourceArena, Memory: 500 * mib,
		Allocated: 500 * mib, Released: 300 * mib, Held: 500 * mib}, r.Runs[1])
	assert.Equal(t, int64(0), r.Runs[2].Allocated)
	assert.Equal(t, 500*mib, r.Peak)
	assert.Equal(t, 500*mib, r.Final)
	assert.Equal(t, 500*mib, r.Arena)
	assert.Equal(t, 1, r.Reallocations)
	assert.Equal(t, 2, r.DeviceAllocs)
	assert.Equal(t, 800*mib, r.DeviceBytes) // 300 + 500

	// Policy 1 behaves as 2.
	r1, err := PlanSession(staticGraphs, config.StaticPolicy(1), false)
	require.NoError(t, err)
	assert.Equal(t, r, r1)
	assert.Equal(t, config.StaticArena, r1.Policy)
}

func TestSessionPolicyExpand(t *testing.T) {
	dyn := []SessionGraph{
		{Name: "D1", Peak: 300 * mib, Dynamic: true},
		{Name: "D2", Peak: 500 * mib, Dynamic: true},
		{Name: "D3", Peak: 400 * mib, Dynamic: true},
	}
	r, err := PlanSession(dyn, config.StaticExpand, false)
	require.NoError(t, err)
	// The pool grows 300 -> 500 MiB by the 200 MiB shortfall; no release.
	assert.Equal(t, []int64{300 * mib, 500 * mib, 500 * mib}, runHeld(r))
	assert.Equal(t, []int64{300 * mib, 200 * mib, 0}, []int64{r.Runs[0].Allocated, r.Runs[1].Allocated, r.Runs[2].Allocated})
	assert.Equal(t, 500*mib, r.Peak)
	assert.Equal(t, 500*mib, r.Pool)
	assert.Equal(t, 2, r.Expansions)
	assert.Equal(t, 0, r.Reallocations)
	assert.Equal(t, 500*mib, r.DeviceBytes) // vs 800 MiB moved by policy 2

	// Static-shape graphs are not served by policy 3's pool.
	rs, err := PlanSession(staticGraphs, config.StaticExpand, false)
	require.NoError(t, err)
	r0, err := PlanSession(staticGraphs, config.StaticDynamic, false)
	require.NoError(t, err)
	r0.Policy = config.StaticExpand
	assert.Equal(t, r0, rs)
}

func TestSessionMixedShapes(t *testing.T) {
	mixed := []SessionGraph{
		{Name: "S1", Peak: 300 * mib},
		{Name: "D1", Peak: 200 * mib, Dynamic: true},
		{Name: "S2", Peak: 500 * mib},
		{Name: "D2", Peak: 100 * mib, Dynamic: true},
	}
	for _, tc := range []struct {
		policy       config.StaticPolicy
		held         []int64
		peak, final  int64
		deviceAllocs int
	}{
		// 0: each run holds its own peak.
		{config.StaticDynamic, []int64{300 * mib, 200 * mib, 500 * mib, 100 * mib}, 500 * mib, 0, 4},
		// 2: arena 300 held; D1 adds 200 for its run; arena reallocated to
		// 500; D2 adds 100 for its run.
		{config.StaticArena, []int64{300 * mib, 500 * mib, 500 * mib, 600 * mib}, 600 * mib, 500 * mib, 4},
		// 3: S1 dynamic 300; pool 200; S2 dynamic 500 + pool 200; pool 200.
		{config.StaticExpand, []int64{300 * mib, 200 * mib, 700 * mib, 200 * mib}, 700 * mib, 200 * mib, 3},
		// 4: arena 300; + pool 200; arena 500 + pool 200; same.
		{config.StaticArenaExpand, []int64{300 * mib, 500 * mib, 700 * mib, 700 * mib}, 700 * mib, 700 * mib, 3},
	} {
		r, err := PlanSession(mixed, tc.policy, false)
		require.NoError(t, err)
		assert.Equal(t, tc.held, runHeld(r), "policy %d", tc.policy)
		assert.Equal(t, tc.peak, r.Peak, "policy %d", tc.policy)
		assert.Equal(t, tc.final, r.Final, "policy %d", tc.policy)
		assert.Equal(t, tc.deviceAllocs, r.DeviceAllocs, "policy %d", tc.policy)
	}
}

func TestSessionConcurrent(t *testing.T) {
	for _, p := range []config.StaticPolicy{config.StaticPolicy(1), config.StaticArena, config.StaticArenaExpand} {
		_, err := PlanSession(staticGraphs, p, true)
		require.Error(t, err, "policy %d", p)
		assert.Contains(t, err.Error(), fmt.Sprintf("static memory policy %d", p))
		assert.Contains(t, err.Error(), "concurrently")
	}
	// 0: every graph holds its peak at once: 300 + 500 + 400 = 1200 MiB.
	r, err := PlanSession(staticGraphs, config.StaticDynamic, true)
	require.NoError(t, err)
	assert.Equal(t, []int64{300 * mib, 800 * mib, 1200 * mib}, runHeld(r))
	assert.Equal(t, 1200*mib, r.Peak)
	// 3 with dynamic-shape graphs: the pool grows to the sum, 300 + 500.
	r, err = PlanSession([]SessionGraph{
		{Name: "D1", Peak: 300 * mib, Dynamic: true},
		{Name: "D2", Peak: 500 * mib, Dynamic: true},
	}, config.StaticExpand, true)
	require.NoError(t, err)
	assert.Equal(t, 800*mib, r.Peak)
	assert.Equal(t, 800*mib, r.Pool)
	assert.Equal(t, 2, r.Expansions)
}

func TestSessionErrors(t *testing.T) {
	_, err := PlanSession(staticGraphs, 5, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "policy 5")
	_, err = PlanSession([]SessionGraph{{Name: "bad", Peak: -1}}, config.StaticDynamic, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `graph 0 ("bad") Peak -1`)
	r, err := PlanSession(nil, config.StaticArena, false)
	require.NoError(t, err)
	assert.Equal(t, int64(0), r.Peak)
}

func ExamplePlanSession() {
	const gib = 1 << 30
	graphs := []SessionGraph{
		{Name: "train", Peak: 6 * gib},
		{Name: "eval", Peak: 2 * gib},
		{Name: "train_big_batch", Peak: 8 * gib},
	}
	for _, policy := range []config.StaticPolicy{config.StaticDynamic, config.StaticArena} {
		r, _ := PlanSession(graphs, policy, false)
		fmt.Printf("policy %d: peak %d GiB, held at end %d GiB, reallocations %d, device allocations %d\n",
			r.Policy, r.Peak/gib, r.Final/gib, r.Reallocations, r.DeviceAllocs)
	}
	// Output:
	// policy 0: peak 8 GiB, held at end 0 GiB, reallocations 0, device allocations 3
	// policy 2: peak 8 GiB, held at end 8 GiB, reallocations 1, device allocations 2
}
