package dtr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/remat-dev/remat/sim/alloc"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
)

// sizedChain is a chain of relu-like ops with activations of the given sizes
// (MiB) after a 1 MiB input, and its reverse sweep: backward op i reads the
// gradient so far and activation i and writes a gradient of activation i's
// input size.
func sizedChain(t *testing.T, sz []int64) *graph.Graph {
	b := graph.NewBuilder("frag")
	x := b.Input("x", graph.F32, 1<<18)
	acts := []graph.TensorID{x}
	for i, s := range sz {
		acts = append(acts, b.Op("relu", fmt.Sprintf("f%d", i), acts[len(acts)-1]).OutBytes(fmt.Sprintf("a%d", i), s<<20).TimeNs(1000).T())
	}
	b.SetPhase(graph.Backward)
	g := acts[len(sz)]
	for i := len(sz) - 1; i >= 0; i-- {
		g = b.Op("relu_grad", fmt.Sprintf("b%d", i), g, acts[i]).OutBytes(fmt.Sprintf("g%d", i), sz[max(i-1, 0)]<<20).TimeNs(1000).T()
	}
	gr, err := b.Build()
	require.NoError(t, err)
	return gr
}

// TestHostOOMRetryFragmentation: activations of 12, 12 and 9 MiB after a
// 1 MiB input under a 50 MiB caching allocator (and DTR budget). The caching
// model gives x a 2 MiB small segment, a0 and a1 12 MiB segments each, and
// a2 a 20 MiB segment (requests under 10 MiB get 20 MiB segments) split into
// 9 MiB used + 11 MiB cached: 46 MiB reserved. The first backward op needs
// a 12 MiB gradient: DTR's accounting (34 + 12 = 46 MiB <= 50) evicts
// nothing, but no cached block holds 12 MiB and a new segment would reserve
// 58 MiB. Without retrying (parity mode) the run fails; with it, DTR evicts
// a0 (the only unlocked candidate), the allocator releases a0's segment and
// the op fits.
func TestHostOOMRetryFragmentation(t *testing.T) {
	g := sizedChain(t, []int64{12, 12, 9})
	const capMiB = 50
	run := func(cfg Config) (*sim.Result, Stats, error) {
		m, err := sim.NewMachine(g, sim.Options{Allocator: alloc.NewCaching(capMiB << 20), Capacity: -1})
		require.NoError(t, err)
		cfg.Budget = capMiB << 20
		return RunOnMachine(context.Background(), m, cfg)
	}
	_, _, err := run(ParityConfig(HDTREqClass))
	require.Error(t, err, "parity mode does not retry host allocation failures")
	require.ErrorIs(t, err, sim.ErrOutOfMemory)
	require.ErrorIs(t, err, ErrHostOutOfMemory)

	cfg := DefaultConfig()
	cfg.EvicteeMinSize = 0
	cfg.LazyLock = false
	res, st, err := run(cfg)
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.HostRetries, int64(1))
	require.LessOrEqual(t, res.PeakReserved, int64(capMiB<<20))
	require.Equal(t, int(st.Remats), res.Recomputes)
	t.Logf("host retries %d, evictions %d, remats %d, peak reserved %d", st.HostRetries, st.Evictions, st.Remats, res.PeakReserved)
}

// fragHost fails the Compute of the newest op with ErrHostOutOfMemory while
// tensor block is resident (the block next to the free space the request needs) and reports
// adjacency only for that block.
type fragHost struct {
	rt       *Runtime
	block    TensorID
	adjFree  int64
	failures int
}

func (h *fragHost) Compute(op OpID) error {
	if h.block >= 0 && h.rt.Resident(h.block) && int(op) == len(h.rt.ops)-1 {
		h.failures++
		return fmt.Errorf("fake allocator: no contiguous block: %w", ErrHostOutOfMemory)
	}
	return nil
}
func (h *fragHost) Free(TensorID)          {}
func (h *fragHost) SwapOut(TensorID) error { return errors.New("no swap") }
func (h *fragHost) SwapIn(TensorID) error  { return errors.New("no swap") }
func (h *fragHost) AdjacentFree(t TensorID) int64 {
	if t == h.block {
		return h.adjFree
	}
	return 0
}

// TestHostOOMPrefersAdjacentFree: after a host allocation failure the
// runtime scores candidates with the free bytes adjacent to their block
// added to their size, so it evicts the storage whose block borders free
// space (which makes the allocation succeed) rather than the stalest one.
func TestHostOOMPrefersAdjacentFree(t *testing.T) {
	for _, adj := range []bool{false, true} {
		h := &fragHost{block: -1}
		if adj {
			h.adjFree = 64 << 20
		}
		cfg := DefaultConfig()
		cfg.EvicteeMinSize = 0
		rt, err := New(cfg, h)
		require.NoError(t, err)
		h.rt = rt
		x, err := rt.Constant(1 << 20)
		require.NoError(t, err)
		var acts []TensorID
		for i := 0; i < 4; i++ {
			_, out, err := rt.Compute([]TensorID{x}, 100, []Output{{Bytes: 4 << 20, AliasOf: -1}})
			require.NoError(t, err)
			acts = append(acts, out[0])
		}
		h.block = acts[2] // a fresher storage than acts[0] and acts[1]
		// the next op fails while acts[2] is resident
		_, _, err = rt.Compute([]TensorID{x}, 100, []Output{{Bytes: 4 << 20, AliasOf: -1}})
		require.NoError(t, err)
		st := rt.Stats()
		require.False(t, rt.Resident(acts[2]), "the blocking storage is evicted")
		if adj {
			require.Equal(t, int64(1), st.HostRetries, "adjacency picks the blocking storage first")
			require.True(t, rt.Resident(acts[0]) && rt.Resident(acts[1]))
		} else {
			require.Equal(t, int64(3), st.HostRetries, "without adjacency the stalest go first")
		}
	}
}

// TestVGG19FitsWithDTR: VGG-19 at batch 300 needs about 34 GB reserved
// without recomputation under the caching allocator, far beyond a 16 GB
// V100; DTR evicting (and retrying on fragmentation) fits it.
func TestVGG19FitsWithDTR(t *testing.T) {
	g, err := models.Build("vgg19", models.Options{Batch: 300})
	require.NoError(t, err)
	dev, err := sim.Device("v100-16gb")
	require.NoError(t, err)
	capa, limited := sim.CapacityOf(sim.Options{Device: dev})
	require.True(t, limited)
	opts := sim.Options{Device: dev, Allocator: alloc.NewCaching(capa)}
	_, err = sim.Simulate(g, sim.DefaultPlan(g), opts)
	require.ErrorIs(t, err, sim.ErrOutOfMemory, "no strategy: does not fit")

	opts.Allocator = alloc.NewCaching(capa)
	m, err := sim.NewMachine(g, opts)
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.Budget = capa
	res, st, err := RunOnMachine(context.Background(), m, cfg)
	require.NoError(t, err)
	require.LessOrEqual(t, res.PeakReserved, capa)
	require.Greater(t, st.Remats, int64(0))
	t.Logf("vgg19 batch 300: peak reserved %d of %d, remats %d, host retries %d, overhead %.3f", res.PeakReserved, capa, st.Remats, st.HostRetries, float64(m.Clock())/float64(res.ComputeNs))
}

// cachingUnderDTR runs zoo model name under DTR (lookahead with KeepForRemat,
// as planDTR runs it, or heuristic h) on a Machine whose caching allocator
// holds capacity times the no-recompute peak, with the runtime's budget at
// budget times that peak, so that allocations fail on fragmentation and the
// runtime evicts for them (retryHost). check runs the scan beside every
// indexed choice.
func cachingUnderDTR(t *testing.T, name string, o models.Options, h Heuristic, capacity, budget float64, check bool) (*Runtime, *sim.Result, error) {
	return cachingUnderDTRHost(t, name, o, h, capacity, budget, check, false)
}

// listingHost is a SimHost that can list the storages next to free memory
// but not report their growth (not a growthHost): megengine's index then
// keys by size and evaluates those storages at every choice (nextToFree).
type listingHost struct{ h *SimHost }

func (l listingHost) Compute(op OpID) error                  { return l.h.Compute(op) }
func (l listingHost) Free(t TensorID)                        { l.h.Free(t) }
func (l listingHost) SwapOut(t TensorID) error               { return l.h.SwapOut(t) }
func (l listingHost) SwapIn(t TensorID) error                { return l.h.SwapIn(t) }
func (l listingHost) AdjacentFree(t TensorID) int64          { return l.h.AdjacentFree(t) }
func (l listingHost) FreeNeighbours(v func(t TensorID)) bool { return l.h.FreeNeighbours(v) }

// cachingUnderDTRHost is cachingUnderDTR, with listing the runtime's host a
// listingHost.
func cachingUnderDTRHost(t *testing.T, name string, o models.Options, h Heuristic, capacity, budget float64, check, listing bool) (*Runtime, *sim.Result, error) {
	t.Helper()
	g, err := models.Build(name, o)
	require.NoError(t, err)
	base, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{})
	require.NoError(t, err)
	m, err := sim.NewMachine(g, sim.Options{Allocator: alloc.NewCaching(int64(float64(base.PeakAllocated) * capacity)), Capacity: -1})
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.Budget = int64(float64(base.PeakAllocated) * budget)
	cfg.Heuristic, cfg.KeepForRemat = h, true
	cfg.RematLimit = 50 * base.TotalNs
	host := &SimHost{M: m}
	var rh Host = host
	if listing {
		rh = listingHost{host}
	}
	rt, err := New(cfg, rh)
	require.NoError(t, err)
	rt.idxCheck = check
	host.d = newDriver(g, rt)
	_, err = drive(context.Background(), host.d, m.OpTime, m.OpWorkspace)
	return rt, m.Result(), err
}

// TestFragChoiceMatchesScan: after a failed host allocation the runtime
// evicts the candidate whose score counts the free bytes next to its block.
// With the caching allocator listing the blocks next to free memory, that
// choice is the index's ordinary one or one of those blocks' storages; it
// must equal the fragmentation-mode scan's at every retry.
func TestFragChoiceMatchesScan(t *testing.T) {
	cases := []struct {
		model  string
		o      models.Options
		capBud [][2]float64 // capacity and budget, as ratios of the peak
	}{
		{"resnet-cifar", models.Options{Depth: 56, Batch: 32}, [][2]float64{{0.5, 0.6}, {0.6, 0.6}, {0.4, 0.45}}},
		{"densenet121", models.Options{Batch: 16, Image: 64}, [][2]float64{{0.6, 0.6}}},
	}
	hs := []Heuristic{Lookahead, HDTR, HDTREqClass, LookaheadMSPS}
	if testing.Short() {
		cases, hs = cases[:1], hs[:2]
	}
	var retries, evals, skips int64
	for _, c := range cases {
		for _, h := range hs {
			for _, capBud := range c.capBud {
				name := fmt.Sprintf("%s %s capacity %.2f budget %.2f", c.model, h, capBud[0], capBud[1])
				ri, resI, errI := cachingUnderDTR(t, c.model, c.o, h, capBud[0], capBud[1], true)
				_, resS, errS := cachingUnderDTR(t, c.model, c.o, h, capBud[0], capBud[1], false)
				require.Zero(t, ri.idxMismatch, name)
				require.Equal(t, errS == nil, errI == nil, name)
				if errI != nil {
					require.True(t, errors.Is(errI, sim.ErrOutOfMemory) || errors.Is(errI, ErrThrashing), name)
				}
				require.Equal(t, resS.PeakReserved, resI.PeakReserved, name)
				require.Equal(t, resS.Evictions, resI.Evictions, name)
				retries += ri.Stats().HostRetries
				evals += ri.fragEvals
				skips += ri.fragSkips
			}
		}
	}
	t.Logf("%d evictions after failed host allocations checked; %d candidates next to free memory evaluated, %d ruled out by their bound", retries, evals, skips)
	require.Greater(t, retries, int64(200))
	require.Greater(t, evals, int64(100))
	require.Greater(t, skips, int64(50))
}

// TestMegEngineIndexMatchesScan: megengine's size term counts the free
// bytes next to a candidate's block. On the caching allocator, which
// reports when they grow, the index keys count them as they were at keying
// time and re-keys a candidate whose free neighbours grew (adjRekey); on a
// host that can only list the candidates next to free memory, the keys
// count the size alone and those candidates are evaluated at every choice
// besides the index's (nextToFree). Either way every choice must equal the
// scan's, with every filed key a lower bound (for the first, no key's size
// term below the candidate's now).
func TestMegEngineIndexMatchesScan(t *testing.T) {
	cases := []struct {
		model  string
		o      models.Options
		capBud [][2]float64 // capacity and budget, as ratios of the peak
	}{
		{"resnet-cifar", models.Options{Depth: 56, Batch: 32}, [][2]float64{{0.5, 0.6}, {0.6, 0.6}, {0.4, 0.45}, {1.2, 0.5}}},
		{"densenet121", models.Options{Batch: 16, Image: 64}, [][2]float64{{0.6, 0.6}, {1.2, 0.5}}},
	}
	for _, listing := range []bool{false, true} {
		var choices, listed, rekeys int64
		for _, c := range cases {
			for _, capBud := range c.capBud {
				name := fmt.Sprintf("%s capacity %.2f budget %.2f listing %v", c.model, capBud[0], capBud[1], listing)
				rt, res, err := cachingUnderDTRHost(t, c.model, c.o, MegEngine, capBud[0], capBud[1], true, listing)
				require.NotNil(t, rt.idx, name)
				require.Equal(t, !listing, rt.adjWatch, name)
				require.Zero(t, rt.idxMismatch, name)
				require.Zero(t, rt.idxBadKeys, name)
				require.Zero(t, rt.idxBadRefs, name)
				if err != nil {
					require.True(t, errors.Is(err, sim.ErrOutOfMemory) || errors.Is(err, ErrThrashing), name)
				}
				// the other host chooses alike, so the run is the same
				ro, reso, erro := cachingUnderDTRHost(t, c.model, c.o, MegEngine, capBud[0], capBud[1], false, !listing)
				require.Equal(t, err == nil, erro == nil, name)
				require.Equal(t, rt.Stats().Evictions, ro.Stats().Evictions, name)
				require.Equal(t, res.PeakReserved, reso.PeakReserved, name)
				require.Equal(t, res.TotalNs, reso.TotalNs, name)
				choices += rt.Stats().Evictions
				listed += rt.fragEvals
				rekeys += rt.adjRekeys
			}
		}
		t.Logf("listing %v: %d evictions checked; %d candidates next to free memory evaluated apart, %d re-keyed as their free neighbours grew", listing, choices, listed, rekeys)
		require.Greater(t, choices, int64(500))
		if listing {
			require.Greater(t, listed, int64(100))
			require.Zero(t, rekeys)
		} else {
			require.Zero(t, listed)
			require.Greater(t, rekeys, int64(100))
		}
	}
}
