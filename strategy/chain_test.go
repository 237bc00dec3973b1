package strategy

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/chain"
	"github.com/remat-dev/remat/graph/models"
)

// Options.Slots (the CLI's --slots) reaches optimal-chain: the depth solved
// exactly follows the slots, and the detail says how stages were grouped.
func TestOptimalChainSlots(t *testing.T) {
	g, err := models.Build("chain", models.Options{Depth: 400})
	require.NoError(t, err)
	o, err := OptionsFrom(nil)
	require.NoError(t, err)
	o.Allocator = AllocIdeal
	o, err = WithBudgetRatio(context.Background(), g, o, 0.5)
	require.NoError(t, err)
	s, err := Lookup("optimal-chain")
	require.NoError(t, err)
	var groups []int
	for _, slots := range []int{0, 100} {
		o.Slots = slots
		res, err := s.Plan(context.Background(), g, o)
		require.NoError(t, err)
		assert.Equal(t, StatusOK, res.Status, res.Reason)
		var n, grp int
		_, err = fmt.Sscanf(res.Stats.Detail, "%d stages grouped into %d", &n, &grp)
		require.NoError(t, err, res.Stats.Detail)
		assert.Equal(t, 401, n)
		assert.GreaterOrEqual(t, grp, chain.OptimalMaxStages(slots), "slots %d", slots)
		wantSlots := slots
		if slots == 0 {
			wantSlots = chain.OptimalDefaultSlots
		}
		assert.Contains(t, res.Stats.Detail, fmt.Sprintf("--slots %d", wantSlots))
		assert.LessOrEqual(t, grp, wantSlots, "at most one stage per slot")
		assert.LessOrEqual(t, res.PeakAllocated(), o.Budget)
		groups = append(groups, grp)
	}
	assert.Less(t, groups[1], groups[0], "100 slots: at most 100 stages")
	o.Slots = -1
	_, err = s.Plan(context.Background(), g, o)
	assert.ErrorContains(t, err, "slots = -1")
}
