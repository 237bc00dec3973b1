package sublinear

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

func TestExactMatchesBruteForce(t *testing.T) {
	// The exact solver against an independent enumeration through the
	// public API.
	for seed := uint64(0); seed < 5; seed++ {
		g := randomDAG(t, 1000+seed, 9)
		_, ex, err := ExactSearch(context.Background(), g, DefaultSearchOptions())
		require.NoError(t, err)
		best := int64(-1)
		n := len(g.Ops)
		for mask := 0; mask < 1<<(n-1); mask++ {
			var gen Genome
			for b := 0; b < n-1; b++ {
				if mask&(1<<b) != 0 {
					gen = append(gen, graph.OpID(b))
				}
			}
			gen = append(gen, graph.OpID(n-1))
			_, rep, err := EvaluateGenome(g, gen, DefaultSearchOptions())
			require.NoError(t, err)
			if best < 0 || rep.Peak < best {
				best = rep.Peak
			}
		}
		assert.Equal(t, best, ex.Peak)
		assert.Equal(t, 1<<(n-1)+1, ex.Evaluations)
	}
	big := trainingGraph(t, 10)
	_, _, err := ExactSearch(context.Background(), big, DefaultSearchOptions())
	require.ErrorContains(t, err, "possible split points, expected at most")
}

// TestBudgetGAAgainstExact: on 200 random DAGs of at most 16 ops, the
// budget-mode genetic search must find the exact optimum's recompute time in
// at least 95% of cases and never be more than 10% worse.
func TestBudgetGAAgainstExact(t *testing.T) {
	if testing.Short() {
		t.Skip("enumerates 200 graphs")
	}
	const cases = 200
	r := rand.New(rand.NewPCG(42, 42))
	hit, worst, feasible := 0, 0.0, 0
	var gaEvals, exEvals int
	for i := 0; i < cases; i++ {
		n := 8 + r.IntN(9) // 8..16 ops
		g := randomDAG(t, uint64(5000+i), n)
		opts := DefaultSearchOptions()
		opts.Workers = 2
		_, minRep, err := ExactSearch(context.Background(), g, opts)
		require.NoError(t, err)
		// A budget between the least peak and the baseline.
		budget := minRep.Peak + int64(r.Float64()*float64(minRep.BaselinePeak-minRep.Peak))
		opts.Budget = budget
		_, ex, err := ExactSearch(context.Background(), g, opts)
		require.NoError(t, err)
		require.True(t, ex.Feasible)
		_, ga, err := WithinBudget(context.Background(), g, budget, opts)
		require.NoError(t, err, "case %d", i)
		require.LessOrEqual(t, ga.Peak, budget)
		require.GreaterOrEqual(t, ga.RecomputeNs, ex.RecomputeNs, "exact is a lower bound")
		if ex.RecomputeNs > 0 {
			feasible++
		}
		gaEvals += ga.Evaluations
		exEvals += ex.Evaluations
		if ga.RecomputeNs == ex.RecomputeNs {
			hit++
			continue
		}
		rel := float64(ga.RecomputeNs-ex.RecomputeNs) / float64(ex.RecomputeNs)
		worst = max(worst, rel)
		t.Logf("case %d (%d ops, budget %d): GA time %d, exact %d (+%.1f%%)", i, n, budget, ga.RecomputeNs, ex.RecomputeNs, 100*rel)
	}
	rate := float64(hit) / cases
	t.Logf("budget GA vs exact on %d random DAGs (8-16 ops; %d need recomputation): optimum found in %d (%.1f%%), worst gap %.1f%%, mean evaluations GA %d vs exact %d",
		cases, feasible, hit, 100*rate, 100*worst, gaEvals/cases, exEvals/cases)
	assert.GreaterOrEqual(t, rate, 0.95)
	assert.LessOrEqual(t, worst, 0.10)
}
