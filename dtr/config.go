package dtr

import (
	"fmt"
	"math"
	"strings"
)

// Heuristic selects how the runtime scores eviction candidates (the lowest
// score is evicted). See docs/dtr.md for the formulas.
type Heuristic uint8

// Heuristics. The first six are those of the DTR paper's simulator.
const (
	// HDTR is h_DTR with the exact evicted neighbourhood e*:
	// (c(s) + c(e*(s))) / (m(s) * staleness(s)).
	HDTR Heuristic = iota + 1
	// HDTREqClass approximates e* with union-find equivalence classes.
	HDTREqClass
	// HDTRLocal is c(s) / (m(s) * staleness(s)).
	HDTRLocal
	// MSPS is (c(s) + cost of evicted ancestors) / m(s).
	MSPS
	// LRU evicts the least recently used storage.
	LRU
	// Size evicts the largest storage.
	Size
	// MegEngine is MegEngine's DTR score: estimated cost from the producer's
	// input+output bytes plus union-find neighbour cost, over (bytes + free
	// bytes adjacent to the block) times staleness, times
	// 1.0001^recompute_count.
	MegEngine
	// Lookahead uses the known future op sequence: (c(s) + eq-class
	// neighbour cost) / (m(s) * distance to the next use), evicting storages
	// never needed again first. It needs an Oracle.
	Lookahead
	// LookaheadMSPS is (c(s) + cost of the evicted ancestors) / (m(s) *
	// distance to the next use): MSPS's rematerialization cost (what
	// recomputing s really takes) with Belady's next-use distance in place
	// of staleness. It needs an Oracle.
	LookaheadMSPS
	// LookaheadDTR is h_DTR (c(s) + c(e*(s))) / (m(s) * staleness(s)),
	// except that the storages the known schedule never reads again score
	// 0 and go first (Belady's rule where it is free of doubt; for the
	// rest, staleness with the whole evicted neighbourhood's cost orders
	// better than the next-use distance does on tight budgets). It needs
	// an Oracle.
	LookaheadDTR
)

// lastHeuristic is the highest Heuristic value.
const lastHeuristic = LookaheadDTR

var heuristicNames = [...]string{"", "dtr", "dtr-eqclass", "dtr-local", "msps", "lru", "size", "megengine", "lookahead", "lookahead-msps", "lookahead-dtr"}

// Heuristics lists every heuristic in a fixed order.
var Heuristics = []Heuristic{HDTR, HDTREqClass, HDTRLocal, MSPS, LRU, Size, MegEngine, Lookahead, LookaheadMSPS, LookaheadDTR}

// ReferenceHeuristics are the six heuristics of the reference simulator's
// tables.
var ReferenceHeuristics = []Heuristic{HDTR, HDTREqClass, HDTRLocal, MSPS, LRU, Size}

// String returns the heuristic's name.
func (h Heuristic) String() string {
	if h < HDTR || h > lastHeuristic {
		return fmt.Sprintf("heuristic(%d)", uint8(h))
	}
	return heuristicNames[h]
}

// NeedsOracle reports whether the heuristic scores with next-use distances
// (an Oracle: Replay and RunOnMachine build one from the known schedule).
func (h Heuristic) NeedsOracle() bool {
	return h == Lookahead || h == LookaheadMSPS || h == LookaheadDTR
}

// ParseHeuristic parses a heuristic name (aliases: "full", "eqclass",
// "eq-class", "local", "largest", "megengine").
func ParseHeuristic(s string) (Heuristic, error) {
	switch strings.ToLower(s) {
	case "dtr", "full", "h_dtr", "dtr-full":
		return HDTR, nil
	case "dtr-eqclass", "eqclass", "eq-class", "dtr-eq-class":
		return HDTREqClass, nil
	case "dtr-local", "local":
		return HDTRLocal, nil
	case "msps":
		return MSPS, nil
	case "lru":
		return LRU, nil
	case "size", "largest", "largest-size":
		return Size, nil
	case "megengine", "mge":
		return MegEngine, nil
	case "lookahead", "belady":
		return Lookahead, nil
	case "lookahead-msps", "belady-msps":
		return LookaheadMSPS, nil
	case "lookahead-dtr", "belady-dtr":
		return LookaheadDTR, nil
	}
	return 0, fmt.Errorf("heuristic %q: expected one of %s", s, strings.Join(heuristicNames[1:], ", "))
}

// MarshalText implements encoding.TextMarshaler.
func (h Heuristic) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (h *Heuristic) UnmarshalText(b []byte) error {
	v, err := ParseHeuristic(string(b))
	if err != nil {
		return err
	}
	*h = v
	return nil
}

// Config holds the runtime's parameters. A settings layer fills it from the
// MEGENGINE_* environment variables; DefaultConfig and ParityConfig give the
// two standard starting points.
type Config struct {
	// Budget is a hard limit in bytes: an op that cannot fit after evicting
	// every candidate fails with ErrOutOfMemory. 0 = unlimited.
	Budget int64
	// Threshold is MegEngine's eviction_threshold: a soft limit. Eviction
	// starts when usage would exceed it and stops when nothing is left to
	// evict, without failing. 0 = off.
	Threshold int64
	// EvicteeMinSize: only storages of at least this many bytes are
	// candidates (MegEngine default 1 MiB; 0 in parity mode).
	EvicteeMinSize int64
	// Granule: when > 0, every storage counts as the block an allocator
	// with this granularity holds for it: its bytes rounded up to a
	// multiple of Granule, and at least one Granule (PyTorch's caching
	// allocator: 512, alloc.CachingMinBlock). The budget then bounds the
	// bytes such an allocator reports as allocated rather than the tensor
	// bytes, which fall short of them by the rounding. On a host whose
	// allocator hands out larger blocks (SimHost on the caching model,
	// which keeps a remainder too small to split off with its block) the
	// runtime counts each block as the host reports it, and makes room
	// for the blocks the allocator would hand out. 0 (the default and
	// parity mode's): exact bytes, as the DTR logs and the reference
	// simulator count them.
	Granule int64
	// Heuristic scores candidates.
	Heuristic Heuristic
	// Drop allows evicting by dropping (and later recomputing); Swap allows
	// swapping to host memory over a link of HostBandwidth bytes/ns. With
	// both, each victim takes the cheaper of its recompute time and its
	// transfer time (out and back in).
	Drop, Swap    bool
	HostBandwidth float64
	// AutoDrop (MEGENGINE_DTR_AUTO_DROP) enables eviction at all; with it
	// false the runtime only counts memory and fails past the budget.
	AutoDrop bool
	// SqrtSampling scores only about sqrt(N) candidates, taken with a random
	// stride (the prototype's trick); Seed makes the sampling reproducible.
	SqrtSampling bool
	Seed         uint64
	// EagerEvict frees a storage as soon as its last external reference is
	// released (the paper's default); its metadata stays so dependents can
	// still be recomputed.
	EagerEvict bool
	// Banish permanently frees a released storage once none of its
	// dependents is evicted, pinning those dependents (the paper's V1
	// runtime); it bounds metadata at the price of pinning.
	Banish bool
	// LazyLock rematerializes an op's missing inputs before locking its
	// available ones, so a recursive rematerialization holds locks only on
	// the inputs of the op being run rather than on those of every pending
	// op up the recursion. Off by default, as in the reference: on the DTR
	// logs measured (docs/dtr.md) eager locking reached a lower ratio than
	// lazy locking in 8 heuristic x log sweeps and a higher one in 2: an
	// available input left unlocked while the missing ones are rebuilt can
	// be evicted and has to be rebuilt too (SweepBest runs both).
	LazyLock bool
	// KeepForRemat (with EagerEvict and a next-use heuristic: lookahead,
	// lookahead-msps, lookahead-dtr) keeps a storage resident after its
	// last release when a still referenced evicted dependent needs it to be
	// rematerialized: it stays an eviction candidate whose next use is that
	// dependent's, instead of being freed at once, which lengthens the
	// dependent's rematerialization chain unseen (up to recomputing a whole
	// backward pass). Log sweeps (Sweep without Base) turn it on.
	KeepForRemat bool
	// RematLimit: once the rematerialization compute exceeds this many ns
	// the run fails with ErrThrashing. 0 = no limit.
	RematLimit int64
	// Scan forces the linear scan of the candidate pool on every eviction.
	// By default (outside parity mode, without sqrt sampling) dtr,
	// dtr-eqclass, dtr-local, msps, lru and size search an index instead,
	// which returns the same candidate with fewer score evaluations (see
	// docs/dtr.md); Scan is for measurement and cross-checking.
	Scan bool
	// Parity follows the reference simulator simrd exactly: exact score
	// comparison with ties to the later candidate in pool order, a linear
	// scan of the pool that stops at a zero score, no size filter.
	Parity bool
	// SavedOnly (runs on a training graph: RunOnMachine, StaticPlan) limits
	// the budget to the saved activations, as remat_torch.dtr's runtime
	// does: storages of at least EvicteeMinSize bytes that a forward op
	// makes and a backward or update op reads. The rest (inputs,
	// parameters, optimizer state, forward intermediates nothing saves,
	// gradients, the backward pass's working set) is outside the budget
	// (Output.Unbudgeted): never evicted, freed at its last use, not
	// counted against Budget or Threshold, though the peak counts it.
	// What a rematerialization recomputes is managed like the saved
	// activations. As in remat_torch.dtr, a saved activation comes under
	// the budget when autograd saves it, after the first forward op whose
	// backward op reads it has run (StaticPlan saves an op's inputs, then
	// its outputs), and the budget is checked after each save (a
	// rematerialization still makes room first); with nothing evictable
	// the run goes over the budget instead of failing (the runtime's
	// default, strict=False). A rematerialization acquires its op's
	// arguments one at a time, each accessed once resident, and its
	// outputs are accessed when it has run, as in the runtime (otherwise
	// every argument is accessed when the rematerialization starts, as in
	// the reference). DTR logs have no passes: Replay rejects it.
	SavedOnly bool

	// regionLimit (tests): the kept regions' entry limit (0: incMaxLive)
	regionLimit int64
}

// DefaultConfig returns MegEngine-style defaults: drop enabled, auto drop,
// eager eviction, eager locking, evictee minimum size 1 MiB, h_DTR
// eq-class, 12 bytes/ns host link for swapping (when enabled).
func DefaultConfig() Config {
	return Config{
		EvicteeMinSize: 1 << 20,
		Heuristic:      HDTREqClass,
		Drop:           true,
		AutoDrop:       true,
		EagerEvict:     true,
		LazyLock:       false,
		HostBandwidth:  12,
	}
}

// ParityConfig returns the configuration replaying the reference simulator
// (simrd's RuntimeV2EagerOptimized) with heuristic h.
func ParityConfig(h Heuristic) Config {
	c := DefaultConfig()
	c.EvicteeMinSize = 0
	c.Heuristic = h
	c.Parity = true
	c.LazyLock = false
	return c
}

// maxGranule bounds Config.Granule (1 GiB, far above any allocator's
// rounding).
const maxGranule = 1 << 30

// blockBytes returns the bytes a storage of the given size counts as: its
// size, or with a Granule the block an allocator of that granularity holds
// (see Config.Granule). A size within a granule of MaxInt64 stays as it is.
func (c *Config) blockBytes(bytes int64) int64 {
	g := c.Granule
	if g <= 0 {
		return bytes
	}
	if bytes < g {
		return g
	}
	if bytes > math.MaxInt64-g {
		return bytes
	}
	return (bytes + g - 1) / g * g
}

// Validate checks the configuration; errors name the field and the value.
func (c *Config) Validate() error {
	if c.Budget < 0 {
		return fmt.Errorf("dtr config: Budget %d: expected >= 0 bytes (0 = unlimited)", c.Budget)
	}
	if c.Threshold < 0 {
		return fmt.Errorf("dtr config: Threshold %d: expected >= 0 bytes (0 = off)", c.Threshold)
	}
	if c.EvicteeMinSize < 0 {
		return fmt.Errorf("dtr config: EvicteeMinSize %d: expected >= 0 bytes", c.EvicteeMinSize)
	}
	if c.Granule < 0 || c.Granule > maxGranule {
		return fmt.Errorf("dtr config: Granule %d: expected 0 (exact bytes) to %d bytes", c.Granule, int64(maxGranule))
	}
	if c.Parity && c.Granule != 0 {
		return fmt.Errorf("dtr config: Parity=true with Granule=%d: parity mode counts exact bytes, as the reference simulator does (expected Granule 0)", c.Granule)
	}
	if c.Heuristic < HDTR || c.Heuristic > lastHeuristic {
		return fmt.Errorf("dtr config: Heuristic %d: expected one of %s", c.Heuristic, strings.Join(heuristicNames[1:], ", "))
	}
	if c.AutoDrop && !c.Drop && !c.Swap {
		return fmt.Errorf("dtr config: Drop=false and Swap=false with AutoDrop=true: expected at least one eviction method")
	}
	if c.Swap && !(c.HostBandwidth > 0) {
		return fmt.Errorf("dtr config: HostBandwidth %v: expected > 0 bytes/ns when Swap is enabled", c.HostBandwidth)
	}
	if c.RematLimit < 0 {
		return fmt.Errorf("dtr config: RematLimit %d: expected >= 0 ns (0 = none)", c.RematLimit)
	}
	if c.Parity && c.SavedOnly {
		return fmt.Errorf("dtr config: Parity=true with SavedOnly=true: parity mode replays DTR logs, which budget every storage")
	}
	if c.Parity && (c.Swap || c.EvicteeMinSize != 0 || c.SqrtSampling || c.Banish || c.LazyLock || c.KeepForRemat || c.Heuristic > Size) {
		return fmt.Errorf("dtr config: Parity=true with Swap=%v, EvicteeMinSize=%d, SqrtSampling=%v, Banish=%v, LazyLock=%v, KeepForRemat=%v, Heuristic=%s: parity mode expects drop only, no size filter, no sampling, no banishing, no lazy locking, no keeping for rematerialization and a reference heuristic",
			c.Swap, c.EvicteeMinSize, c.SqrtSampling, c.Banish, c.LazyLock, c.KeepForRemat, c.Heuristic)
	}
	return nil
}
