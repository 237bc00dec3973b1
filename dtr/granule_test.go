package dtr

import (
	"context"
	"testing"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/sim/alloc"
	"github.com/stretchr/testify/require"
)

// oddMLP is the training graph (SGD) of an MLP whose tensors are not
// multiples of the caching allocator's 512-byte granule: batch 997, widths
// 301 and 203, f32.
func oddMLP(t *testing.T, layers int) *graph.Graph {
	return oddMLPWidths(t, layers, 203, 301)
}

// oddMLPWidths is oddMLP with hidden widths w0 (even layers) and w1.
func oddMLPWidths(t *testing.T, layers, w0, w1 int) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder("odd-mlp")
	x := b.Input("x", graph.F32, 997, 301)
	for i := 0; i < layers; i++ {
		w := w1
		if i%2 == 0 {
			w = w0
		}
		x = b.ReLU("relu", b.Linear("fc", x, w, true))
	}
	loss := b.CrossEntropy("loss", b.Linear("head", x, 10, true), b.Input("labels", graph.I64, 997))
	fwd, err := b.Build()
	require.NoError(t, err)
	g, err := graph.Differentiate(fwd, loss, graph.BackwardOptions{Optimizer: graph.OptSGD})
	require.NoError(t, err)
	return g
}

// blockCheck is a SimHost that, before each graph op it runs, compares the
// runtime's byte count with the bytes of the blocks the caching allocator
// holds for the Machine's resident tensors (each the rounded request, or
// more when a remainder too small to split off stayed with it), counting
// the ops checked and those that differ (wrong), and checks that those
// blocks are all the Machine allocates between ops (unheld counts the ops
// where they are not).
type blockCheck struct {
	*SimHost
	rt             *Runtime
	checked, wrong int
	kept           int // ops before which some block kept a remainder
	// unheld: ops before which the resident tensors' blocks did not add
	// up to the Machine's allocated bytes
	unheld int
}

func (b *blockCheck) Compute(op OpID) error {
	if b.d.rec.opMap[op] == graph.NoOp {
		// a tensor from outside the step: resident on the Machine from
		// the start, counted by the runtime as it is created
		return b.SimHost.Compute(op)
	}
	var held, rounded int64
	m := b.M
	for t := range m.Graph().Tensors {
		if id := graph.TensorID(t); m.Resident(id) && m.Storage(id) == id {
			held += m.BlockBytes(id)
			rounded += alloc.CachingRoundSize(m.Bytes(id))
		}
	}
	if held > rounded {
		b.kept++
	}
	if held != m.Allocated() {
		b.unheld++
	}
	b.checked++
	if held != b.rt.stats.Memory {
		b.wrong++
	}
	return b.SimHost.Compute(op)
}

// runBlockCheck drives g's default schedule under a runtime with cfg on
// Machine m through a blockCheck host (op times and workspaces from m).
func runBlockCheck(t *testing.T, g *graph.Graph, m *sim.Machine, cfg Config) (*Runtime, *blockCheck, error) {
	t.Helper()
	h := &blockCheck{SimHost: &SimHost{M: m}}
	rt, err := New(cfg, h)
	require.NoError(t, err)
	h.rt = rt
	h.d = newDriver(g, rt)
	_, err = drive(context.Background(), h.d, m.OpTime, m.OpWorkspace)
	return rt, h, err
}

// TestGranuleCountsBlocks runs the lookahead runtime on a Machine with the
// caching allocator at budgets from 0.5 to 0.9 of the no-recompute peak,
// on a model whose tensors are not multiples of 512 bytes. With
// Config.Granule set to the allocator's granule the runtime's byte count
// equals, before every graph op, the bytes of the blocks the allocator
// holds for the resident tensors (rounding and the remainders a block
// keeps: SimHost is a blockHost), so its budget bounds the Machine's
// allocated peak; counting tensor bytes it falls short of them by the
// rounding before every op. (Before the runtime counted the remainders
// too, the dtr strategy ran again with a lower budget whenever they took
// the allocator's peak past the budget; strategy's TestDTRFirstRunFits
// checks that its first run fits.)
func TestGranuleCountsBlocks(t *testing.T) {
	g := oddMLP(t, 40)
	kept := 0
	base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{Allocator: alloc.NewCaching(-1)})
	require.NoError(t, err)
	for _, ratio := range []float64{0.5, 0.6, 0.7, 0.8, 0.9} {
		for _, granule := range []int64{0, alloc.CachingMinBlock} {
			a := alloc.NewCaching(-1)
			require.Equal(t, alloc.CachingMinBlock, a.Granule())
			m, err := sim.NewMachine(g, sim.Options{Allocator: a, Capacity: -1})
			require.NoError(t, err)
			cfg := DefaultConfig()
			cfg.Heuristic, cfg.KeepForRemat = Lookahead, true
			cfg.Budget = int64(float64(base.PeakAllocated) * ratio)
			cfg.Granule = granule
			rt, h, err := runBlockCheck(t, g, m, cfg)
			require.NoError(t, err, "ratio %.1f granule %d", ratio, granule)
			require.Greater(t, rt.stats.Evictions, int64(0), "ratio %.1f", ratio)
			require.Greater(t, h.checked, len(g.Ops), "ratio %.1f", ratio)
			require.Zero(t, h.unheld, "ratio %.1f: the resident tensors' blocks are all the Machine allocates between ops", ratio)
			kept += h.kept
			if granule == 0 {
				require.Equal(t, h.checked, h.wrong, "ratio %.1f: tensor bytes never match the blocks", ratio)
				continue
			}
			require.Zero(t, h.wrong, "ratio %.1f: the runtime counts the blocks", ratio)
			require.LessOrEqual(t, rt.stats.PeakMemory, cfg.Budget, "ratio %.1f", ratio)
			require.LessOrEqual(t, m.Result().PeakAllocated, cfg.Budget, "ratio %.1f", ratio)
		}
	}
	require.Positive(t, kept, "some blocks keep a remainder")
}

func TestGranuleBlockBytes(t *testing.T) {
	c := DefaultConfig()
	require.EqualValues(t, 7, c.blockBytes(7))
	c.Granule = 512
	for _, tc := range [][2]int64{{0, 512}, {1, 512}, {512, 512}, {513, 1024}, {12000, 12288}, {1 << 40, 1 << 40}, {1<<62 + 1, 1<<62 + 512}} {
		require.Equal(t, tc[1], c.blockBytes(tc[0]), "bytes %d", tc[0])
	}
	require.EqualValues(t, int64(1<<63-1), c.blockBytes(1<<63-1), "no overflow near MaxInt64")
	c.Granule = -1
	require.ErrorContains(t, c.Validate(), "Granule -1")
	c.Granule = 1 << 31
	require.ErrorContains(t, c.Validate(), "expected 0 (exact bytes)")
	c = DefaultConfig()
	c.Parity, c.Granule = true, 512
	require.ErrorContains(t, c.Validate(), "Parity=true with Granule=512")
}

// workspaceModel builds resnet-cifar (depth 20, batch 64) and simulates it
// without recomputation with cuDNN's limited_workspace algorithms, as the
// CLI picks them; it returns the graph, those options and the result.
func workspaceModel(t *testing.T) (*graph.Graph, sim.Options, *sim.Result) {
	t.Helper()
	g, err := models.Build("resnet-cifar", models.Options{Depth: 20, Batch: 64})
	require.NoError(t, err)
	opts := sim.Options{CudnnTune: sim.CudnnLimitedWorkspace}
	base, err := sim.Simulate(g, sim.DefaultPlan(g), opts)
	require.NoError(t, err)
	return g, opts, base
}

// TestWorkspaceBoundsAllocated runs the lookahead runtime on a Machine with
// the ideal allocator (no rounding, no split blocks) on resnet-cifar, whose
// convolutions take cuDNN workspaces, at budgets from 0.5 to 0.9 of the
// no-recompute peak. Given each op's workspace (RunOnMachine passes
// Machine.OpWorkspace), the runtime makes room for it with the outputs, so
// the Machine's allocated peak, workspaces included, stays within the
// budget and equals the runtime's own peak; driven without them, the
// workspaces push the Machine past the budget.
func TestWorkspaceBoundsAllocated(t *testing.T) {
	g, opts, base := workspaceModel(t)
	over := 0
	for _, ratio := range []float64{0.5, 0.6, 0.7, 0.8, 0.9} {
		for _, withWs := range []bool{false, true} {
			opts.Allocator, opts.Capacity = alloc.NewIdeal(-1), -1
			m, err := sim.NewMachine(g, opts)
			require.NoError(t, err)
			cfg := DefaultConfig()
			cfg.Heuristic, cfg.KeepForRemat = Lookahead, true
			cfg.Budget = int64(float64(base.PeakAllocated) * ratio)
			h := &SimHost{M: m}
			rt, err := New(cfg, h)
			require.NoError(t, err)
			h.d = newDriver(g, rt)
			ws := func(graph.OpID) int64 { return 0 }
			if withWs {
				ws = m.OpWorkspace
			}
			_, err = drive(context.Background(), h.d, m.OpTime, ws)
			require.NoError(t, err, "ratio %.1f", ratio)
			res := m.Result()
			if !withWs {
				if res.PeakAllocated > cfg.Budget {
					over++
				}
				continue
			}
			require.LessOrEqual(t, res.PeakAllocated, cfg.Budget, "ratio %.1f", ratio)
			require.Equal(t, res.PeakAllocated, rt.stats.PeakMemory, "ratio %.1f", ratio)
		}
	}
	require.Positive(t, over, "without workspaces some run passes the budget")
}

// TestGranuleCountsBlocksWithSwaps is TestGranuleCountsBlocks with every
// eviction a swap, on activations of two large-pool sizes (1.2 and 1.4
// MB): a storage swapped out gives its block back, and one swapped in gets
// a block, at times a larger free one that keeps the difference, which the
// runtime counts as the allocator holds it. Before every graph op the
// runtime's count equals the Machine's allocated bytes, and the Machine's
// peak stays within the budget.
func TestGranuleCountsBlocksWithSwaps(t *testing.T) {
	g := oddMLPWidths(t, 40, 353, 301) // large-pool blocks of two sizes
	base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{Allocator: alloc.NewCaching(-1)})
	require.NoError(t, err)
	var swaps int64
	for _, ratio := range []float64{0.5, 0.6, 0.7, 0.8, 0.9} {
		m, err := sim.NewMachine(g, sim.Options{Allocator: alloc.NewCaching(-1), Capacity: -1})
		require.NoError(t, err)
		cfg := DefaultConfig()
		cfg.Heuristic, cfg.Swap, cfg.Drop = Lookahead, true, false // swap every eviction
		cfg.Budget = int64(float64(base.PeakAllocated) * ratio)
		cfg.Granule = alloc.CachingMinBlock
		rt, h, err := runBlockCheck(t, g, m, cfg)
		require.NoError(t, err, "ratio %.1f", ratio)
		require.GreaterOrEqual(t, h.checked, len(g.Ops), "ratio %.1f", ratio)
		require.Zero(t, h.unheld, "ratio %.1f: the resident tensors' blocks are all the Machine allocates between ops", ratio)
		require.Zero(t, h.wrong, "ratio %.1f: the runtime counts the blocks", ratio)
		require.LessOrEqual(t, m.Result().PeakAllocated, cfg.Budget, "ratio %.1f", ratio)
		swaps += rt.stats.SwapIns
	}
	require.Positive(t, swaps, "storages were swapped in")
}
