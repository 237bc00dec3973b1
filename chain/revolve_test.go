package chain

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// revolveRefTable is the table of /work/shared/references.md section 4,
// values of Griewank & Walther's binomial formula (Evaluating Derivatives,
// ch. 12; Algorithm 799 "revolve").
var revolveRefTable = []struct{ l, s, f int64 }{
	{10, 1, 45}, {10, 2, 20}, {10, 3, 15}, {10, 9, 9}, {16, 4, 27},
	{20, 3, 45}, {55, 2, 330}, {56, 2, 340}, {100, 5, 316}, {100, 10, 222},
	{1000, 3, 12155}, {1000, 10, 3636}, {10000, 20, 37976},
}

func TestRevolveReferenceTable(t *testing.T) {
	table, err := RevolveTable(1000, 10)
	require.NoError(t, err)
	for _, c := range revolveRefTable {
		f, err := RevolveExtraForwards(c.l, c.s)
		require.NoError(t, err)
		assert.Equal(t, c.f, f, "closed form F(%d,%d)", c.l, c.s)
		assert.Equal(t, c.f, revolveFast(c.l, c.s), "int64 closed form F(%d,%d)", c.l, c.s)
		if c.l <= 1000 && c.s <= 10 {
			assert.Equal(t, c.f, table[c.l*11+c.s], "DP F(%d,%d)", c.l, c.s)
		}
	}
}

func TestRevolveClosedFormMatchesDP(t *testing.T) {
	const lmax, smax = 300, 12
	table, err := RevolveTable(lmax, smax)
	require.NoError(t, err)
	for l := int64(1); l <= lmax; l++ {
		for s := int64(1); s <= smax; s++ {
			f, err := RevolveExtraForwards(l, s)
			require.NoError(t, err)
			require.Equal(t, table[l*(smax+1)+s], f, "F(%d,%d)", l, s)
			require.Equal(t, f, revolveFast(l, s), "fast F(%d,%d)", l, s)
		}
		// Identities: one snapshot re-runs from the input each time; with
		// enough snapshots every step is advanced once (but the last).
		f1, _ := RevolveExtraForwards(l, 1)
		assert.Equal(t, l*(l-1)/2, f1)
		for s := max(1, l-1); s <= l+3; s++ {
			fs, _ := RevolveExtraForwards(l, s)
			assert.Equal(t, l-1, fs, "F(%d,%d)", l, s)
		}
	}
}

func TestRevolveLargeAndErrors(t *testing.T) {
	// Large chains: the closed form stays exact with big binomials.
	f, err := RevolveExtraForwards(1_000_000, 1)
	require.NoError(t, err)
	assert.Equal(t, int64(1_000_000)*999_999/2, f)
	for _, s := range []int64{2, 5, 30, 500} {
		f, err := RevolveExtraForwards(1_000_000, s)
		require.NoError(t, err)
		assert.Equal(t, revolveFast(1_000_000, s), f, "s=%d", s)
		// More snapshots never cost more forwards.
		f2, _ := RevolveExtraForwards(1_000_000, s+1)
		assert.LessOrEqual(t, f2, f)
	}
	// Huge s: C(s+1, s) = s+1 >= l at once.
	f, err = RevolveExtraForwards(1000, 1<<40)
	require.NoError(t, err)
	assert.Equal(t, int64(999), f)
	_, err = RevolveExtraForwards(0, 3)
	assert.ErrorContains(t, err, "l = 0")
	_, err = RevolveExtraForwards(5, 0)
	assert.ErrorContains(t, err, "s = 0")
	_, err = RevolveExtraForwards(1<<40, 1)
	assert.ErrorContains(t, err, "overflows")
	_, err = RevolveTable(0, 1)
	assert.Error(t, err)
	_, err = RevolveSchedule(3, 0)
	assert.Error(t, err)
}

func TestRevolveScheduleCounts(t *testing.T) {
	for l := int64(1); l <= 60; l++ {
		for s := int64(1); s <= 8; s++ {
			acts, err := RevolveSchedule(l, s)
			require.NoError(t, err)
			extra, taped, snaps, err := RevolveCounts(acts)
			require.NoError(t, err, "l=%d s=%d", l, s)
			f, _ := RevolveExtraForwards(l, s)
			require.Equal(t, f, extra, "extra forwards l=%d s=%d", l, s)
			require.Equal(t, l, taped, "taped steps l=%d s=%d", l, s)
			require.LessOrEqual(t, snaps, s, "snapshots l=%d s=%d", l, s)
			require.Equal(t, RevolveFirstTurn, firstTurn(acts).Kind)
		}
	}
	for _, c := range revolveRefTable[:len(revolveRefTable)-1] {
		acts, err := RevolveSchedule(c.l, c.s)
		require.NoError(t, err)
		extra, taped, snaps, err := RevolveCounts(acts)
		require.NoError(t, err)
		assert.Equal(t, c.f, extra, "l=%d s=%d", c.l, c.s)
		assert.Equal(t, c.l, taped)
		assert.LessOrEqual(t, snaps, c.s)
	}
	// A broken schedule is rejected.
	_, _, _, err := RevolveCounts([]RevolveAction{{Kind: RevolveRestore, Step: 2}})
	assert.Error(t, err)
}

func firstTurn(acts []RevolveAction) RevolveAction {
	for _, a := range acts {
		if a.Kind == RevolveFirstTurn || a.Kind == RevolveYouTurn {
			return a
		}
	}
	return RevolveAction{}
}

// ExampleRevolveExtraForwards reverses a 10-step chain with 3 snapshots.
func ExampleRevolveExtraForwards() {
	f, _ := RevolveExtraForwards(10, 3)
	acts, _ := RevolveSchedule(10, 3)
	extra, taped, snaps, _ := RevolveCounts(acts)
	fmt.Println(f, extra, taped, snaps)
	for _, a := range acts[:6] {
		fmt.Println(a.Kind, a.Step)
	}
	// Output:
	// 15 15 10 3
	// takeshot 0
	// advance 4
	// takeshot 4
	// advance 7
	// takeshot 7
	// advance 9
}
