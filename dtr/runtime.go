package dtr

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"

	"github.com/remat-dev/remat/sim"
)

// TensorID identifies a tensor of the runtime: IDs are dense, assigned in
// creation order (the outputs of each Compute in order).
type TensorID int32

// OpID identifies an op: IDs are dense, assigned in Compute call order.
type OpID int32

// Host is what the runtime asks of the executor that owns the buffers.
type Host interface {
	// Compute runs op (first time or again): the runtime has made room for
	// its outputs and every input is resident. The host (re)creates all of
	// the op's outputs, views included.
	Compute(op OpID) error
	// Free drops the device storage whose root tensor is t.
	Free(t TensorID)
	// SwapOut copies storage t to host memory and frees it on the device;
	// SwapIn brings it back. Only called when Config.Swap is set.
	SwapOut(t TensorID) error
	SwapIn(t TensorID) error
}

// blockHost is implemented by hosts whose allocator can hand out a block
// larger than the rounded request (SimHost on the caching model: a free
// remainder too small to split off stays with its block). With a Granule
// the runtime counts those bytes too: it makes room for the blocks an op's
// allocations would get now (HoldFor) and, once a storage is resident,
// counts the block it got (Held).
type blockHost interface {
	// HoldFor returns the summed sizes of the blocks that allocations of
	// sizes, made in turn now, would get (their sum when the allocator
	// does not say).
	HoldFor(sizes []int64) int64
	// Held returns the size of the block holding storage t (0 when it is
	// not resident or the allocator does not say).
	Held(t TensorID) int64
}

// AdjacencyHost is implemented by hosts that place storages at addresses
// (sim's caching allocator): the MegEngine heuristic adds the free bytes
// physically adjacent to a candidate to its size term.
type AdjacencyHost interface {
	AdjacentFree(t TensorID) int64
}

// Oracle tells the Lookahead heuristic when a tensor is next used: the step
// (count of top-level Compute calls) of its next use at or after now, or
// math.MaxInt64 if never. A tensor's answer may change only once the step
// passes it: a use at step k is an input of the k-th top-level Compute (the
// candidate index re-keys that op's inputs after it, see index.go).
type Oracle interface {
	NextUse(t TensorID, now int64) int64
}

// storageOracle is an Oracle that also answers for a whole storage: the
// first step at or after now that reads any tensor on the storage whose
// root is root. That is the least NextUse over the storage's tensors, but
// one query however many views the storage has (an LSTM's sequence tensor
// has one per time step, and the lookahead keys ask on every re-key).
type storageOracle interface {
	NextUseStorage(root TensorID, now int64) int64
}

// Output describes one output of an op: its size, or AliasOf >= 0 to make it
// a view (0 bytes) of the storage of that input or, for AliasOf >= the
// number of inputs n, of the op's earlier output AliasOf-n. A view is
// resident exactly when its storage is: evicting the storage drops every
// view of it, and rematerializing a view recomputes its storage first.
//
// Unbudgeted puts a new storage outside the budget (Config.SavedOnly: what a
// runtime that manages only some tensors does not manage): its bytes count
// in Stats.Memory and PeakMemory but not against Budget or Threshold, it is
// never an eviction candidate, and its last release frees it. A
// rematerialization that computes it again brings it under the budget, as a
// runtime manages what it recomputes.
type Output struct {
	Bytes      int64
	AliasOf    int
	Unbudgeted bool
}

// Errors the runtime returns; a run that returned one cannot continue. When
// nothing evictable is left and an op does not fit, the error wraps
// sim.ErrOutOfMemory, the one out-of-memory error of every package.
var (
	// ErrThrashing: rematerialization compute exceeded Config.RematLimit.
	ErrThrashing = errors.New("dtr: rematerialization limit exceeded (thrashing)")
	// ErrHostOutOfMemory is what a Host wraps in the error of Compute or
	// SwapIn when its allocator cannot place the storages although the
	// runtime's byte accounting fits (fragmentation, rounding, workspaces,
	// a caching allocator's reserved memory). Outside parity mode the
	// runtime then evicts one more candidate (preferring, with an
	// AdjacencyHost, storages next to free space) and retries, until the
	// call succeeds or nothing is evictable (then sim.ErrOutOfMemory), as
	// MegEngine >= 1.5 does on a failed allocation.
	ErrHostOutOfMemory = errors.New("dtr: host out of memory")
	// ErrRegionLimit: in parity mode, h_DTR's or MSPS's regions kept as
	// the reference simulator keeps them outgrew their limit (regions.go);
	// without parity mode the regions are walked exactly, in bounded
	// memory.
	ErrRegionLimit = errors.New("dtr: parity mode's kept regions (the reference simulator's h_DTR/MSPS bookkeeping) outgrew their limit; without parity mode the regions are walked, not kept")
)

// Stats are the runtime's counters.
type Stats struct {
	Clock          int64 `json:"clock_ns"`           // starts at 1, as in the reference
	ModelCompute   int64 `json:"model_compute_ns"`   // first computations
	RematCompute   int64 `json:"remat_compute_ns"`   // recomputations
	SwapTime       int64 `json:"swap_time_ns"`       // transfers
	Evictions      int64 `json:"evictions"`          // chosen by the heuristic
	EagerFrees     int64 `json:"eager_frees"`        // freed on last release
	Remats         int64 `json:"rematerializations"` // ops rerun
	SwapOuts       int64 `json:"swap_outs"`
	SwapIns        int64 `json:"swap_ins"`
	HeuristicEvals int64 `json:"heuristic_evals"`
	Memory         int64 `json:"memory_bytes"`
	PeakMemory     int64 `json:"peak_memory_bytes"`
	// PeakBudgeted is the peak of the bytes the budget counts when some
	// storages are outside it (Output.Unbudgeted); 0 when none are.
	PeakBudgeted int64 `json:"peak_budgeted_bytes,omitempty"`
	// OverBudget counts the times a soft limit (Threshold, or Budget with
	// Config.SavedOnly) was passed with nothing left to evict, so the run
	// went on over it.
	OverBudget int64 `json:"over_budget,omitempty"`
	Banished   int64 `json:"banished"`
	// HostRetries counts evictions made because the host's allocator failed
	// although the runtime's accounting fitted (ErrHostOutOfMemory).
	HostRetries int64 `json:"host_retries"`
	// FixedKept counts unrecomputable storages (see ForbidRemat) kept
	// resident after their last release because dependents may need them.
	FixedKept int64 `json:"fixed_kept"`
	// KeptForRemat counts storages kept resident after their last release
	// because an evicted, still referenced dependent needs them
	// (Config.KeepForRemat).
	KeptForRemat int64 `json:"kept_for_remat"`
	// ReferenceAsserts (parity mode, h_DTR and MSPS) counts the
	// absorptions at which the reference simulator's region bookkeeping
	// fails an assertion (a region told to absorb a storage that is not on its
	// frontier, see regions.go): simrd stops there, sim goes on without
	// that absorption.
	ReferenceAsserts int64 `json:"reference_asserts,omitempty"`
}

const negInf = math.MinInt64

type storage struct {
	size       int64
	compute    int64 // sum of unique producer op times
	est        int64 // sum of unique producer op input+output bytes
	root       int32
	lbBurst    uint32
	tensors    []int32
	lastAccess int64
	poolPos    int32
	ecn        int32
	ecv        int64 // cost added to the eq-class at eviction
	refInt     int32
	refExt     int32
	remats     int32
	material   bool
	pinned     bool
	swapped    bool
	banished   bool
	// fixed: the producer cannot be rerun (non-deterministic without saved
	// RNG state, impure): never dropped, only swapped.
	fixed       bool
	pendingFree bool // unrecomputable, released, kept resident for dependents
	// unbud: outside the budget (Output.Unbudgeted) until a
	// rematerialization computes it again
	unbud bool
	// witN, witBytes (a storage kept by releaseFixed): how many of the
	// dependents its walks found keep it (its private witnesses, each with
	// s on its watch list) and their bytes. chg (1 + the head of a list in
	// the runtime's chgArena; 0: none) lists the storages reached from s
	// that its next check takes again: the witnesses that left the set
	// when their state was about to change (notify), its detached group's
	// owner, and the freed storages its last walk queued but did not
	// expand (keepFrontier)
	witN     int32
	chg      int32
	pendPos  int32 // index in the runtime's pending list while pendingFree
	witBytes int64
	// eqc: 1 + the index of its neighbour-class counts in the runtime's
	// eqCaches (0: none; eqcache.go)
	eqc int32
	// witGen numbers the storage's witness sets (watch entries of older
	// ones are stale)
	witGen uint32
	// liveKids (once refExt is 0, see markGone): the distinct dependent
	// storages not yet gone
	liveKids int32
	inZero   bool // listed in the index's zeroCost (parity mode)
	// fresh (parity mode, eq-class heuristics): a new op's output not yet
	// computed. The reference gives it an eq-class node of value 0 when
	// the op starts and counts it, not being material, as an evicted
	// neighbour until the op has run; freshMerged: an eviction merged its
	// node into a class (see Compute).
	fresh       bool
	freshMerged bool

	// candidate index (index.go): bucket (-1 = not indexed), position in
	// the bucket's heap, heap key, and pool sequence number (pool order).
	ibucket int16
	ipos    int32
	ikey    float64
	seq     int64
	// spos is the position in the runtime's small heap (-1: not in it).
	spos int32
	// kstick (a storage with neighbour-class counts): the index's stick
	// stamp when its eq-class key part kpart was computed and registered,
	// while that part stays a valid key part (keyNum reuses it); 0: none
	kstick uint32
	inext  int64 // next use when keyed (lookahead index; lookahead-dtr: MaxInt64 in the never-used bucket)
	// rnext (with rnextOK): the next use an evaluation found for a
	// candidate of the lookahead index (or lookahead-dtr's), earlier than
	// its program's (a referenced evicted dependent is read sooner); it
	// keys the candidate until the storage is read again (lock clears it).
	// See refineNext.
	rnext int64
	knum  int64 // the score numerator the key was computed with
	kpart int64
	// ksize: the size term the key was computed with (the size, or for
	// megengine with adjWatch the size plus the free bytes next to the
	// block then)
	ksize int64
	// lb is a lower bound of the storage's score for the rest of eviction
	// burst lbBurst (see startBurst).
	lb float64
	// kexact: keyed with its eq-classes' exact values rather than their
	// floors (index.go; set when a search found the floors too low for it,
	// cleared when it is evicted)
	kexact bool
	// adjPend: listed in adjGrown; kmem: listed in the index's kept list
	adjPend bool
	kmem    bool
	kept    bool // released, kept resident for evicted dependents (KeepForRemat)
	rnextOK bool
}

type tensor struct {
	op       int32
	index    int32
	st       int32
	refExt   int32
	defined  bool
	children []int32
}

type op struct {
	cost   int64
	est    int64
	total  int64
	utotal int64 // bytes of the outputs made outside the budget (Output.Unbudgeted)
	// ws: the transient bytes the op holds while it runs (a workspace),
	// besides its outputs: room is made for them too (computeWith)
	ws      int64
	args    []int32
	results []int32
	sizes   []int64
}

// Runtime is a DTR runtime. It is not safe for concurrent use.
type Runtime struct {
	cfg  Config
	host Host
	adj  AdjacencyHost
	// holds (with a Granule, see blockHost): extra[s] is what the block of
	// resident storage s holds beyond its size, counted in Memory;
	// opExtra what the running op's blocks were predicted to hold beyond
	// their sizes, outputs and workspace (compute takes the outputs'
	// actual share off it for the workspace's)
	holds   blockHost
	extra   []int64
	opExtra int64
	holdBuf []int64 // scratch: the sizes asked for
	oracle  Oracle
	// soracle: oracle's storage queries, when it answers them
	soracle storageOracle
	rng     *rand.Rand

	ops      []op
	tensors  []tensor
	storages []storage

	pool    []int32 // storage ids in pool order, -1 = hole
	holes   int
	poolSeq int64 // sequence numbers given to pool entries (pool order)
	// small is a heap of the pool members below Config.EvicteeMinSize,
	// largest first and, among equal sizes, first in pool order: the scan's
	// fallback choice when no candidate passes the size filter (small.go).
	small  []smallEntry
	smallH posHeap[smallEntry]

	// idx is the candidate index (nil: scan the pool).
	idx *candIndex
	// idxCheck (tests) runs the scan after every indexed choice and counts
	// disagreements in idxMismatch, and checks every filed key against the
	// state, counting keys that are no bound in idxBadKeys, and counts in
	// idxBadRefs the storages whose refRoot disagrees with their refExt or
	// whose needSkip with their walk node and gone flag.
	idxCheck    bool
	idxMismatch int64
	idxBadKeys  int64
	idxBadRefs  int64
	// needRef (tests) is compared with every stillNeeded answer that its
	// cap did not cut, counting the answers in needChecks and the
	// disagreements in needMismatch.
	needRef      func(s int32) bool
	needChecks   int64
	needMismatch int64
	needCapped   bool
	// neededByRef (tests) is compared with every neededBy answer of a
	// choice whose walks the cap did not cut (nbChecks; disagreements in
	// nbMismatch).
	neededByRef func(s int32) int64
	nbChecks    int64
	nbMismatch  int64
	// fixedRef (tests) is compared with every decision of releaseFixed
	// that its witnesses made without a walk from the storage
	// (fixedChecks; disagreements in fixedMismatch).
	fixedRef      func(s int32) bool
	fixedChecks   int64
	fixedMismatch int64
	// retryAll (tests) makes retryPending retry every pending storage.
	retryAll bool
	// arenaMin (tests: 0 is arenaMinDefault) is the length below which the
	// watch and chg arenas are never compacted.
	arenaMin int

	// evNext: the next use the last evaluation scored with (the next-use
	// heuristics; MaxInt64 otherwise), which refineNext reads
	evNext int64
	// evalBest: the best score of the choice in progress (+Inf, or 0
	// before the first choice: none); evaluate may stop summing a
	// numerator that puts a candidate above it (withRegions, which reads
	// only a finite positive best).
	evalBest float64

	// noise (OfflineSearch) perturbs every score by exp(noiseSigma * N(0,1)).
	noise      *rand.Rand
	noiseSigma float64
	noiseZ     float64 // the next score's N(0,1) draw, if noiseDrawn
	noiseDrawn bool

	// union-find for eq-class (value = summed cost of the class). A
	// class is live while one of its storages is still evicted since the
	// eviction that added it (ufLive counts them at the root): only a live
	// class is ever a neighbour's class again or merged. ufNeg is the live
	// classes' negative mass, the sum of -value over the live roots whose
	// value is below zero (parity mode's classes can go negative, see
	// compute).
	ufParent []int32
	ufValue  []int64
	// ufSlack (the candidate index's eq-class keys, index.go): per root,
	// how far the class's value may still fall before the keys that count
	// it must be re-keyed; keys count its floor, value - slack.
	ufSlack []int64
	ufLive  []int32
	ufNeg   int64
	ufMark  []uint32
	markGen uint32
	// neighbour-class counts of the storages of high degree (eqcache.go):
	// the counts, the free slots, a buffer, the stamp of the last change;
	// eqMin (tests: 0 is eqCacheMin) the degree from which a storage keeps
	// counts; with eqRef (tests) every query is compared with a scan
	// (eqChecks; disagreements in eqMismatch); keyReuses counts the keys
	// filed with a kept key part (storage.kstick), stalePrunes the subtrees
	// staleSubtreeAbove cut
	eqCaches    []eqCache
	eqFree      []int32
	eqScratch   []int32
	eqStamp     uint32
	eqMin       int
	eqRef       bool
	eqChecks    int64
	eqMismatch  int64
	keyReuses   int64
	stalePrunes int64
	// idxNodes counts the heap nodes the index's searches looked at, and
	// idxChoices the choices the index made (benchmarks)
	idxNodes, idxChoices int64
	// eqOf, eqSum, eqFloor: the last eqNeighbours call's storage, sum
	// and floor sum
	eqOf    int32
	eqSum   int64
	eqFloor int64

	// walk holds the storages' walk nodes (same index), edges their
	// neighbour lists (walk.go); stGen is the current walk's mark
	// (newMark)
	walk  []walkNode
	edges []int32
	stGen uint32
	// need's memo (see need): needStamp[s] == needGen while s is on the
	// search stack, needGen+1 once needVal[s] is final for this state.
	needStamp []uint32
	needVal   []int64
	// refRoot: per storage, its root tensor while the program references
	// it (refExt > 0), else -1: what need reads of a storage it reaches,
	// kept apart from the storage records so that a walk over a large
	// dropped region reads 4 bytes per storage, not a record's cache line
	refRoot []int32
	// needSkip: per storage, whether need passes it over (not evicted,
	// banished, or gone): the walk node's flags and gone in one byte, so
	// that need's look at each dependent of a storage it visits reads a
	// byte instead of the dependent's 64-byte walk node (syncSkip keeps it)
	needSkip []bool
	needGen  uint32
	needLeft int // storages need may still visit in this choice
	// needCap: the storages need and stillNeeded may visit per choice
	// (needWalk; tests lower it to reach the capped paths)
	needCap int
	// needCapHit: a walk of need stopped at the cap since resetNeed
	needCapHit bool
	needStack  []needFrame
	keptKeyed  int64 // kept storages filed with a key (tests)
	keptCapped int64 // kept storages keyed from a capped walk (tests)
	// refinedChecks (tests): keys from refineNext that checkScan compared
	// with a fresh walk
	refinedChecks int64
	// fragEvals and fragSkips: candidates next to free memory that
	// nextToFree evaluated, and that their index bound ruled out (tests)
	fragEvals, fragSkips int64
	// adjWatch (megengine, on a host that reports growth of the free
	// memory next to a storage, growthHost): the index keys count those
	// free bytes in the size term (storage.ksize), and adjGrown lists the
	// indexed storages whose free neighbours grew since the last choice,
	// re-keyed before it (adjRekey)
	adjWatch  bool
	adjGrown  []int32
	adjRekeys int64 // re-keys adjRekey made (tests)
	// gone[s]: no external reference to s or to any storage that depends
	// on it is left, and none can come back (see markGone), so neither
	// the program nor a rematerialization will read s again: need's walks
	// stop at it. goneOff: a released storage was read again, which voids
	// that reasoning for the rest of the run (gone stays all false).
	// upStack is the scratch stack of markGone and leave.
	gone    []bool
	goneOff bool
	upStack []int32
	// nn[s] (with nnOn, that is keeps()): stillNeeded's memo that the
	// dropped storage s is not needed. It holds for a dropped storage that
	// the program does not read again and whose dropped, not gone
	// dependents all hold it; see stillNeeded and nnDropped for how it is
	// kept true.
	nn      []bool
	nnOn    bool
	nnVisit []int32
	stack   []int32
	scratch []int32

	// fragMode: scoring for a host allocation failure (size term + the
	// free bytes adjacent to the candidate's block).
	fragMode bool

	pending []int32 // storages kept by releaseFixed
	// chgArena holds the pending storages' chg lists (chgLive: the entries
	// still listed). trav[x]: a walk of
	// releaseFixed (or a check of witnesses) went through x since x last
	// stopped being traversable; current witnesses may be reached through
	// the storages marked so, and only through them (see leave)
	chgArena []chgEntry
	chgLive  int
	trav     []bool
	// watchHead[x] heads the list (in watchArena) of the pending storages
	// that x is a witness of, and of the groups it owns; the arena is
	// compacted to its current entries (into watchSpare) when it reaches
	// watchCompact. dirty has a bit per pending list position: retry it
	// at the next retryPending. pendHoles counts the pending list's
	// removed entries (-1).
	watchHead    []int32
	watchArena   []watchEntry
	watchSpare   []watchEntry
	watchCompact int
	dirty        []uint64
	dirtySum     []uint64 // bit w: dirty[w] != 0
	pendHoles    int
	// witness groups (fixedgroup.go): groups, the retired ones' numbers,
	// the ones whose owner changed, each storage's membership and the
	// group each storage owns (-1: none)
	groups      []fixedGroup
	freeGroups  []int32
	dirtyGroups []int32
	grpm        []grpMember
	ownGrp      []int32
	grpH        posHeap[int32] // orders a group's members by need
	grpHeld     int64          // members kept by their group's check (tests)
	// deadAt[x] == deadEpoch: a walk of releaseFixed found that freed
	// storage x reaches no resident or referenced storage (see deadAfter);
	// leave ends the epoch
	deadAt    []uint32
	deadEpoch uint32
	noDead    bool // tests: never mark

	// burst: the number of the current free call; lbOn: its scores are
	// monotone (see startBurst).
	burst uint32
	lbOn  bool
	// noBurstBounds (tests) turns the burst's bounds off; noScanCut (tests)
	// makes the scan's region walks run to the end.
	noBurstBounds bool
	noScanCut     bool
	// walkCuts counts the scores whose walks withRegions stopped at the
	// best so far (read by tests).
	walkCuts int64
	// wrec: region walks list the storages they count in wlist and sum
	// their costs in wsum (an indexed evaluation: regionKeep)
	wrec  bool
	wlist []int32
	wsum  int64
	// kg[s]: the generation of storage s's key (index.go: registrations of
	// a node's generation are stale once its candidate is keyed again)
	kg []uint32
	// wreg[s] (region key parts): the candidates whose parts counted
	// storage s, each at the key generation it registered with, and
	// wregLive[s] the live ones at the last compaction
	wreg      [][]regNode
	wregLive  []int32
	wregTotal int64 // registrations in all of wreg
	wregCap   int64 // wregTotal that starts a compaction of every list
	// wregCompactions counts those compactions (read by tests)
	wregCompactions int64
	// walkKeeps and keepNodes: the walks of the current search that may become
	// key parts (regionKeep)
	walkKeeps []regionWalk
	keepNodes []int32
	// regionFlushes counts the returns of storages that region key parts
	// counted (their candidates re-keyed; read by tests)
	regionFlushes int64

	limit int64 // effective limit for eviction (budget or threshold)
	hard  bool  // limit is a hard budget
	// unbud is the resident bytes of storages outside the budget
	// (Output.Unbudgeted); unbudOn: some output was made so
	unbud   int64
	unbudOn bool
	step    int64
	stats   Stats
	dead    error

	// v1Baseline frees released storages even when pinned (simrd V1).
	v1Baseline bool

	// kept regions (regions.go): incOn in parity mode with h_DTR or MSPS,
	// inc[2s] and inc[2s+1] storage s's forward and reverse regions;
	// scratch lists
	incOn   bool
	inc     []incRegion
	incTmp  []int32
	incMark []uint32
	incGen  uint32
	incLive int64 // entries in all regions' lists
	incPeak int64 // the most incLive has been (read by tests)
	incWork int64 // steps of their bookkeeping

	// trace of decisions for Static export
	rec *recorder

	// slabs the ops' small slices are cut from (fewer allocations)
	slab32 []int32
	slab64 []int64
	slabT  []TensorID
}

const slabLen = 4096

// cut returns a zeroed slice of n elements cut from *slab (its capacity is
// n, so appending to it copies); a new slab of at least slabLen elements is
// started when the current one is full.
func cut[E any](slab *[]E, n int) []E {
	if cap(*slab)-len(*slab) < n {
		*slab = make([]E, 0, max(slabLen, n))
	}
	l := len(*slab)
	*slab = (*slab)[:l+n]
	return (*slab)[l : l+n : l+n]
}

func (r *Runtime) alloc32(n int) []int32   { return cut(&r.slab32, n) }
func (r *Runtime) alloc64(n int) []int64   { return cut(&r.slab64, n) }
func (r *Runtime) allocT(n int) []TensorID { return cut(&r.slabT, n) }

// New returns a runtime. host may be nil for pure simulation.
func New(cfg Config, host Host) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Runtime{}
	r.init(cfg, host)
	return r, nil
}

// init sets up a fresh runtime for a valid cfg (r's fields are zero, except
// the buffers recycle hands over).
func (r *Runtime) init(cfg Config, host Host) {
	r.cfg, r.host = cfg, host
	r.rng = rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	if a, ok := host.(AdjacencyHost); ok {
		r.adj = a
	}
	if b, ok := host.(blockHost); ok && cfg.Granule > 0 && !cfg.SavedOnly {
		r.holds = b
	}
	switch {
	case cfg.Budget > 0 && (cfg.Threshold == 0 || cfg.Budget <= cfg.Threshold):
		// SavedOnly goes over the budget when nothing is evictable, as
		// remat_torch.dtr does by default (its strict=False)
		r.limit, r.hard = cfg.Budget, !cfg.SavedOnly
	case cfg.Threshold > 0:
		r.limit = cfg.Threshold
	default:
		r.limit = math.MaxInt64
	}
	r.stats.Clock = 1
	r.needCap = needWalk
	r.deadEpoch = 1 // deadAt starts at 0: nothing dead
	r.grpH = posHeap[int32]{
		above:  func(a, b int32) bool { return r.grpm[a].need > r.grpm[b].need },
		setPos: func(x, i int32) { r.grpm[x].pos = i },
	}
	r.smallH = posHeap[smallEntry]{above: smallBefore, setPos: func(x smallEntry, i int32) { r.storages[x.s].spos = i }}
	r.incOn = incFor(&cfg)
	if k := indexKind(&cfg); k != idxNone {
		if r.idx != nil {
			r.idx.reset(k)
		} else {
			r.idx = newCandIndex(k)
		}
		r.idx.eq = cfg.Heuristic == HDTREqClass || cfg.Heuristic == Lookahead || cfg.Heuristic == MegEngine
		r.idx.never = cfg.Heuristic == LookaheadDTR
		r.idx.exact = k == idxLRU || cfg.Heuristic == Size
		r.idx.keptIdx = (k == idxAhead || cfg.Heuristic == LookaheadDTR) && !cfg.Swap && !cfg.Banish
		r.idx.region = regionKeyed(&cfg)
		r.wregCap = wregFirstCap
	} else {
		r.idx = nil
	}
	r.adjGrown = r.adjGrown[:0]
	if gh, ok := host.(growthHost); ok {
		// megengine's size term counts the free bytes next to a block: with
		// a host that reports their growth, the keys count them too
		r.adjWatch = r.idx != nil && r.adj != nil && cfg.Heuristic == MegEngine && gh.WatchAdjacentFree(r.noteAdjGrown)
		if !r.adjWatch {
			gh.WatchAdjacentFree(nil)
		}
	}
}

// recycle readies r, whose run is over (its stats read), for a new run with
// cfg, as New would, but keeping the capacity of its buffers: a sweep's
// worker replays budget after budget without allocating (and faulting in)
// the same arrays again. Nothing of the old run survives: need's marks
// are cleared with their generation, the walk nodes start afresh, and the
// storages' and tensors' inner lists are reused only through
// newStorage/newTensor, which truncate them.
func (r *Runtime) recycle(cfg Config, host Host) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	old := *r
	*r = Runtime{
		ops:        old.ops[:0],
		tensors:    old.tensors[:0],
		storages:   old.storages[:0],
		pool:       old.pool[:0],
		small:      old.small[:0],
		ufParent:   old.ufParent[:0],
		ufValue:    old.ufValue[:0],
		ufSlack:    old.ufSlack[:0],
		ufLive:     old.ufLive[:0],
		ufMark:     old.ufMark[:0],
		eqFree:     old.eqFree[:0],
		eqScratch:  old.eqScratch[:0],
		walk:       old.walk[:0],
		edges:      old.edges[:0],
		needStamp:  old.needStamp,
		needVal:    old.needVal,
		needStack:  old.needStack[:0],
		gone:       old.gone[:0],
		refRoot:    old.refRoot[:0],
		needSkip:   old.needSkip[:0],
		upStack:    old.upStack[:0],
		nn:         old.nn[:0],
		nnVisit:    old.nnVisit[:0],
		stack:      old.stack[:0],
		scratch:    old.scratch[:0],
		pending:    old.pending[:0],
		chgArena:   old.chgArena[:0],
		watchSpare: old.watchSpare[:0],
		trav:       old.trav[:0],
		watchHead:  old.watchHead[:0],
		watchArena: old.watchArena[:0],
		groups:     old.groups[:0],
		grpm:       old.grpm[:0],
		ownGrp:     old.ownGrp[:0],
		deadAt:     old.deadAt[:0],
		kg:         old.kg[:0],
		extra:      old.extra[:0],
		wreg:       old.wreg[:0],
		wregLive:   old.wregLive[:0],
		wlist:      old.wlist[:0],
		walkKeeps:  old.walkKeeps[:0],
		keepNodes:  old.keepNodes[:0],
		dirty:      old.dirty[:0],
		dirtySum:   old.dirtySum[:0],
		slab32:     old.slab32[:0],
		slab64:     old.slab64[:0],
		slabT:      old.slabT[:0],
		idx:        old.idx,
		inc:        old.inc[:0],
		incTmp:     old.incTmp[:0],
		incMark:    old.incMark[:0],
		incGen:     old.incGen,
	}
	clear(r.needStamp)
	r.init(cfg, host)
	return nil
}

// slot extends *s by one element and returns it. Within capacity the
// element is the old one left there (by a recycled runtime), for the caller
// to reuse its inner slices.
func slot[E any](s *[]E) *E {
	n := len(*s)
	if n < cap(*s) {
		*s = (*s)[:n+1]
	} else {
		var zero E
		*s = append(*s, zero)
	}
	return &(*s)[n]
}

// newStorage appends a storage (not yet computed) and its walk node,
// reusing the tensor list of a recycled slot.
func (r *Runtime) newStorage(s storage) int32 {
	p := slot(&r.storages)
	s.tensors = p.tensors[:0]
	*p = s
	r.walk = append(r.walk, newWalkNode())
	r.gone = append(r.gone, false)
	r.refRoot = append(r.refRoot, -1)
	r.needSkip = append(r.needSkip, false) // evicted until computed
	r.nn = append(r.nn, false)
	r.watchHead = append(r.watchHead, -1)
	r.trav = append(r.trav, false)
	r.grpm = append(r.grpm, grpMember{grp: -1, pos: -1})
	r.ownGrp = append(r.ownGrp, -1)
	r.deadAt = append(r.deadAt, 0)
	r.kg = append(r.kg, 0)
	if r.holds != nil {
		r.extra = append(r.extra, 0)
	}
	if r.idx != nil && r.idx.region {
		w := slot(&r.wreg)
		*w = (*w)[:0]
		r.wregLive = append(r.wregLive, 0)
	}
	if r.incOn {
		r.incNew()
	}
	return int32(len(r.storages) - 1)
}

// setResidency sets whether storage s is resident and whether it is swapped
// out (keeping its walk node's evicted flag in step).
func (r *Runtime) setResidency(s int32, material, swapped bool) {
	st := &r.storages[s]
	if (material || swapped) && st.ecn >= 0 && r.walk[s].evicted {
		r.eqNeighbourChange(s, -1)
	}
	if (material || swapped) && r.traversable(s) {
		r.leave(s)
	}
	if r.watchHead[s] >= 0 {
		r.notify(s)
	}
	if st.pendingFree {
		r.markDirty(s)
	}
	st.material, st.swapped = material, swapped
	w := &r.walk[s]
	was := w.evicted
	w.evicted = !material && !swapped
	r.syncSkip(s)
	if was && !w.evicted && r.idx != nil && r.idx.region {
		// the keys that counted s in their region parts lose it
		if len(r.wreg[s]) > 0 {
			r.regionFlushes++
			r.wregFlush(s)
		}
	}
	if r.nnOn {
		if !w.evicted {
			r.nn[s] = false
		} else if !was {
			r.nnDropped(s)
		}
	}
}

// newTensor appends a tensor, reusing the children list of a recycled slot.
func (r *Runtime) newTensor(t tensor) {
	p := slot(&r.tensors)
	t.children = p.children[:0]
	*p = t
}

// SetOracle sets the next-use oracle used by the Lookahead heuristic.
func (r *Runtime) SetOracle(o Oracle) {
	r.oracle = o
	r.soracle, _ = o.(storageOracle)
	r.nnOn = r.keeps()
	clear(r.nn)
}

// Stats returns the counters so far.
func (r *Runtime) Stats() Stats {
	s := r.stats
	return s
}

// Step returns the number of top-level Compute calls so far.
func (r *Runtime) Step() int64 { return r.step }

// NumTensors returns the number of tensors created.
func (r *Runtime) NumTensors() int { return len(r.tensors) }

// Resident reports whether tensor t is usable now (defined and its storage
// on the device).
func (r *Runtime) Resident(t TensorID) bool {
	if t < 0 || int(t) >= len(r.tensors) {
		return false
	}
	tt := &r.tensors[t]
	return tt.defined && r.storages[tt.st].material
}

// Producer returns the op that created t, or -1 if the runtime has no
// tensor t.
func (r *Runtime) Producer(t TensorID) OpID {
	if t < 0 || int(t) >= len(r.tensors) {
		return -1
	}
	return OpID(r.tensors[t].op)
}

// Root returns the tensor whose storage t uses, or -1 if the runtime has no
// tensor t.
func (r *Runtime) Root(t TensorID) TensorID {
	if t < 0 || int(t) >= len(r.tensors) {
		return -1
	}
	return TensorID(r.storages[r.tensors[t].st].root)
}

func (r *Runtime) checkTensor(what string, t TensorID) error {
	if r.dead != nil {
		return fmt.Errorf("dtr: %s after a failed run: %w", what, r.dead)
	}
	if t < 0 || int(t) >= len(r.tensors) {
		return fmt.Errorf("dtr: %s tensor %d: not defined (runtime has %d tensors)", what, t, len(r.tensors))
	}
	return nil
}

// Constant creates a pinned, zero-cost tensor of the given size (parameters,
// inputs, constants).
func (r *Runtime) Constant(bytes int64) (TensorID, error) { return r.constant(bytes, false) }

// constant is Constant, the storage outside the budget when unbudgeted.
func (r *Runtime) constant(bytes int64, unbudgeted bool) (TensorID, error) {
	_, out, err := r.Compute(nil, 0, []Output{{Bytes: bytes, AliasOf: -1, Unbudgeted: unbudgeted}})
	if err != nil {
		return -1, err
	}
	if err := r.Pin(out[0]); err != nil {
		return -1, err
	}
	return out[0], nil
}

// Compute runs a new op reading inputs, taking cost ns, with the given
// outputs; each output starts with one external reference. It returns the
// op's ID and its output tensors.
func (r *Runtime) Compute(inputs []TensorID, cost int64, outs []Output) (OpID, []TensorID, error) {
	return r.computeWith(inputs, cost, 0, outs)
}

// computeWith is Compute for an op that also holds ws transient bytes (its
// workspace) while it runs, every time it runs: the runtime makes room for
// them with its outputs and counts them in its peak, and they are gone once
// it has run. The graph driver gives each op the workspace its Machine
// allocates for it, so that the budget bounds the bytes the allocator
// holds at the op. Not with SavedOnly, whose budget counts saved
// activations alone.
func (r *Runtime) computeWith(inputs []TensorID, cost, ws int64, outs []Output) (OpID, []TensorID, error) {
	if r.dead != nil {
		return -1, nil, fmt.Errorf("dtr: compute after a failed run: %w", r.dead)
	}
	if cost < 0 {
		return -1, nil, fmt.Errorf("dtr: compute cost %d: expected >= 0 ns", cost)
	}
	if ws < 0 {
		return -1, nil, fmt.Errorf("dtr: compute workspace %d: expected >= 0 bytes", ws)
	}
	if r.cfg.SavedOnly {
		ws = 0
	} else if ws > 0 {
		ws = r.cfg.blockBytes(ws) // an allocator's block, when there is one
	}
	if len(outs) == 0 {
		return -1, nil, fmt.Errorf("dtr: compute with 0 outputs: expected at least one")
	}
	for i, t := range inputs {
		if t < 0 || int(t) >= len(r.tensors) {
			return -1, nil, r.checkTensor(fmt.Sprintf("compute input %d", i), t)
		}
	}
	for i, o := range outs {
		if o.AliasOf >= len(inputs)+i || o.AliasOf < -1 {
			return -1, nil, fmt.Errorf("dtr: compute output %d AliasOf %d: expected -1, an index into the %d inputs or %d + the index of an earlier output", i, o.AliasOf, len(inputs), len(inputs))
		}
		if o.AliasOf < 0 && o.Bytes < 0 {
			return -1, nil, fmt.Errorf("dtr: compute output %d Bytes %d: expected >= 0", i, o.Bytes)
		}
		if o.AliasOf >= 0 && o.Unbudgeted {
			return -1, nil, fmt.Errorf("dtr: compute output %d: Unbudgeted with AliasOf %d: expected Unbudgeted only on an output with a storage of its own (AliasOf -1)", i, o.AliasOf)
		}
	}
	id := int32(len(r.ops))
	o := op{cost: cost, ws: ws, args: r.alloc32(len(inputs)), results: r.alloc32(len(outs)), sizes: r.alloc64(len(outs))}
	for i, t := range inputs {
		o.args[i] = int32(t)
		st := &r.storages[r.tensors[t].st]
		o.est += st.size
		if st.refExt == 0 && !r.goneOff {
			// a released storage is read again: it gains dependents, and
			// markGone's counts no longer hold
			r.goneOff = true
			clear(r.gone)
			for x := range r.needSkip {
				r.syncSkip(int32(x))
			}
		}
	}
	for i, out := range outs {
		t := int32(len(r.tensors))
		o.results[i] = t
		var st int32
		if out.AliasOf >= len(inputs) {
			st = r.tensors[o.results[out.AliasOf-len(inputs)]].st
		} else if out.AliasOf >= 0 {
			st = r.tensors[inputs[out.AliasOf]].st
		} else {
			b := r.cfg.blockBytes(out.Bytes)
			o.sizes[i] = b
			o.total += b
			st = r.newStorage(storage{size: b, root: t, lastAccess: negInf, poolPos: -1, ecn: -1, ibucket: -1, ipos: -1, spos: -1, unbud: out.Unbudgeted})
			if out.Unbudgeted {
				o.utotal += b
				r.unbudOn = true
			}
		}
		r.newTensor(tensor{op: id, index: int32(i), st: st, refExt: 1})
	}
	o.est += o.total
	r.ops = append(r.ops, o)
	// register the tensors on their storages (unique op costs). An earlier
	// output of this op on the same storage was appended in this loop, so
	// it would be the storage's last tensor.
	for _, t := range o.results {
		s := &r.storages[r.tensors[t].st]
		seen := len(s.tensors) > 0 && r.tensors[s.tensors[len(s.tensors)-1]].op == id
		s.tensors = append(s.tensors, t)
		if s.refExt == 0 && len(s.tensors) > 1 {
			if r.traversable(r.tensors[t].st) {
				r.leave(r.tensors[t].st) // a view of a released, evicted storage
			}
			if r.watchHead[r.tensors[t].st] >= 0 {
				r.notify(r.tensors[t].st)
			}
			if s.pendingFree {
				r.markDirty(r.tensors[t].st)
			}
		}
		if s.refExt++; s.refExt == 1 {
			r.refRoot[r.tensors[t].st] = s.root
		}
		if !seen {
			s.compute += cost
			r.walk[r.tensors[t].st].compute = s.compute
			s.est += o.est
			if cost != 0 && s.ibucket >= 0 {
				r.idxRekey(r.tensors[t].st) // a view op added to its cost
			}
		}
	}
	for _, p := range o.args {
		r.tensors[p].children = append(r.tensors[p].children, o.results...)
		for _, t := range o.results {
			r.link(r.tensors[p].st, r.tensors[t].st)
		}
	}
	if r.rec != nil {
		r.rec.top = true
	}
	if r.cfg.Parity && r.usesEqClass() {
		r.markFresh(o.results, outs)
	}
	if err := r.materialize(o.results[0], false); err != nil {
		r.dead = err
		return -1, nil, err
	}
	for _, t := range o.results {
		r.touch(r.tensors[t].st, r.stats.Clock)
	}
	if r.cfg.SavedOnly && r.used() > r.limit {
		if err := r.free(0); err != nil {
			r.dead = err
			return -1, nil, err
		}
	}
	r.step++
	if r.idx != nil && (r.idx.kind == idxAhead || r.idx.never) {
		// the inputs' next uses were this step: re-key them (the index's
		// Oracle contract, see index.go)
		for _, p := range o.args {
			if s := r.tensors[p].st; r.storages[s].ibucket >= 0 {
				r.idxRekey(s)
			}
		}
	}
	if len(r.pending) > 0 {
		r.retryPending()
	}
	res := r.allocT(len(o.results))
	for i, t := range o.results {
		res[i] = TensorID(t)
	}
	return OpID(id), res, nil
}

// markFresh gives the new storages among an op's results (outputs that
// alias nothing) the reference's eq-class node of value 0 and makes them
// count as evicted neighbours until the op has run. The reference does
// this when an op starts (simrd's RuntimeV2Optimized.compute), and it
// shows when the op's inputs are rematerialized: an input evicted again
// meanwhile merges its class with the outputs' nodes, and when the op runs
// each output's cost is subtracted from its class (compute), although its
// eviction never added it.
func (r *Runtime) markFresh(results []int32, outs []Output) {
	for i, t := range results {
		if outs[i].AliasOf >= 0 {
			continue
		}
		s := r.tensors[t].st
		st := &r.storages[s]
		st.ecn, st.ecv = r.ufNew(0), 0
		st.fresh, st.freshMerged = true, false
		r.walk[s].evicted = true
		r.syncSkip(s)
		if r.nnOn {
			r.nnDropped(s)
		}
	}
}

// Get adds an external reference to t.
func (r *Runtime) Get(t TensorID) error {
	if err := r.checkTensor("get", t); err != nil {
		return err
	}
	tt := &r.tensors[t]
	s := &r.storages[tt.st]
	if s.refExt <= 0 {
		return fmt.Errorf("dtr: get tensor %d: its storage has no external references left", t)
	}
	s.refExt++
	tt.refExt++
	return nil
}

// Release drops an external reference to t. With EagerEvict, a storage
// whose last reference goes is freed at once.
func (r *Runtime) Release(t TensorID) error {
	if err := r.checkTensor("release", t); err != nil {
		return err
	}
	tt := &r.tensors[t]
	s := &r.storages[tt.st]
	if s.refExt <= 0 || tt.refExt <= 0 {
		return fmt.Errorf("dtr: release tensor %d: no external references left", t)
	}
	s.refExt--
	tt.refExt--
	if s.refExt == 0 {
		r.refRoot[tt.st] = -1
	}
	if s.refExt == 0 && r.watchHead[tt.st] >= 0 {
		r.notify(tt.st)
	}
	if s.refExt == 0 && !r.goneOff {
		r.markGone(tt.st)
	}
	if s.refExt == 0 && s.material && r.v1Baseline {
		// simrd's RuntimeV1 (used for the baseline) banishes a storage whose
		// last reference goes even if it is pinned.
		if s.pinned {
			s.pinned = false
			s.refInt = 0
		}
		r.evict(tt.st, false)
		r.stats.EagerFrees++
		return nil
	}
	if s.refExt == 0 && s.material && s.unbud && !s.pinned && !s.fixed && s.refInt == 0 {
		// outside the budget: what the runtime does not manage is freed
		// by its owner, whatever depends on it
		r.evict(tt.st, false)
		r.stats.EagerFrees++
		return nil
	}
	if s.refExt == 0 && s.material && !s.pinned {
		if s.fixed {
			if r.cfg.EagerEvict || r.cfg.Banish {
				r.releaseFixed(tt.st)
			}
			return nil
		}
		if r.cfg.Banish {
			r.tryBanish(tt.st)
		} else if r.cfg.EagerEvict {
			if s.refInt != 0 {
				return fmt.Errorf("dtr: release tensor %d: storage is locked by a running op", t)
			}
			needed := r.keeps() && r.stillNeeded(tt.st)
			if r.needRef != nil && r.keeps() && !r.needCapped {
				r.needChecks++
				if needed != r.needRef(tt.st) {
					r.needMismatch++
				}
			}
			if needed {
				// a referenced evicted dependent needs it to be
				// rematerialized: it stays a candidate (its next use is
				// that dependent's) instead of lengthening that
				// dependent's rematerialization chain unseen
				s.kept, s.rnextOK = true, false // keyKept walks afresh
				r.stats.KeptForRemat++
				if s.ibucket != -1 {
					r.idxRemove(tt.st)
					r.idxInsert(tt.st)
				}
				return nil
			}
			r.evict(tt.st, false)
			r.stats.EagerFrees++
		}
	}
	return nil
}

// keeps reports whether released storages are kept for rematerialization
// (Config.KeepForRemat with a next-use heuristic and its oracle).
func (r *Runtime) keeps() bool {
	return r.cfg.KeepForRemat && r.cfg.Heuristic.NeedsOracle() && r.oracle != nil
}

// newMark starts a walk over storages: it returns a generation that no
// walk node's mark holds yet.
func (r *Runtime) newMark() uint32 {
	r.stGen++
	if r.stGen == 0 {
		for i := range r.walk {
			r.walk[i].mark = 0
		}
		r.stGen = 1
	}
	return r.stGen
}

// neededBy returns the earliest next use of a still referenced storage
// reachable from s through evicted dependents (MaxInt64 if none).
func (r *Runtime) neededBy(s int32) int64 {
	best := int64(math.MaxInt64)
	for _, t := range r.storages[s].tensors {
		for _, c := range r.tensors[t].children {
			if cs := r.tensors[c].st; cs != s && r.dropped(cs) && !r.gone[cs] {
				if best = min(best, r.need(cs)); best <= r.step {
					return best // needed now: nothing is earlier
				}
			}
		}
	}
	return best
}

// stillNeeded reports whether a rematerialization may still read s: whether
// a storage that the program will read again (a next use by the oracle) is
// reachable from s through dropped dependents. It answers neededBy(s) <
// MaxInt64 for the current state without need's memo: the walk stops at
// the first such storage instead of looking for the earliest use, and it
// visits at most needCap storages (beyond them, s counts as not needed,
// as need's capped walks do).
//
// A walk that ends without finding one has shown that none of the storages
// it visited is needed, and marks them so (nn): the next walk stops at
// them. On a long run the dropped region (every storage freed so far)
// grows with the trace, and without the marks each release would walk it
// again, up to the cap. A mark stays true while its storage stays dropped
// and no storage it reaches becomes needed: the program's next reads and
// references of a dropped storage only go away, and nnDropped clears the
// marks that a newly dropped storage may make false.
func (r *Runtime) stillNeeded(s int32) bool {
	m := r.newMark()
	r.walk[s].mark = m
	stack := append(r.stack[:0], s)
	visit := r.nnVisit[:0]
	left := r.needCap
	found := false
	r.needCapped = false
	for len(stack) > 0 && !found {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for ns, c := r.neighbours(x, kidsList); ; ns, c = r.chunk(c) {
			for _, k := range ns {
				w := &r.walk[k]
				if w.mark == m || !w.evicted || w.banished || r.gone[k] || r.nn[k] {
					continue
				}
				w.mark = m
				if r.ownNeeded(k) {
					found = true
					break
				}
				if left--; left == 0 {
					r.needCapped = true
					r.stack, r.nnVisit = stack, visit
					return false
				}
				stack = append(stack, k)
				visit = append(visit, k)
			}
			if c < 0 || found {
				break
			}
		}
	}
	if !found && r.nnOn {
		for _, k := range visit {
			r.nn[k] = true
		}
	}
	r.stack, r.nnVisit = stack, visit
	return found
}

// ownNeeded reports whether the program still references storage s and
// will read it again.
func (r *Runtime) ownNeeded(s int32) bool {
	return r.storages[s].refExt > 0 && r.progNextUse(s) < math.MaxInt64
}

// nnDropped keeps stillNeeded's marks true when storage y has just become
// dropped. If y is not needed by the program and each of its dropped, not
// gone dependents is marked, y is marked too and no mark changes. Otherwise
// y may be needed, and so may every dropped storage that reaches it: the
// marks of y's dropped ancestors are cleared, up to the first unmarked ones
// (a marked storage's dropped dependents are all marked, so an unmarked one
// has no marked ancestor through it that needs clearing on y's account).
// Each cleared mark was set by a walk's visit, which pays for the clearing.
func (r *Runtime) nnDropped(y int32) {
	r.nn[y] = false
	if r.gone[y] {
		return
	}
	if !r.ownNeeded(y) && r.nnKids(y) {
		r.nn[y] = true
		return
	}
	r.nnVisit = r.clearUp(y, r.nn, r.nnVisit, nil)
}

// clearUp walks up from storage x (its producers' inputs, and theirs)
// through the storages whose mark is set, clearing the marks, and calls
// visit (if not nil) with every storage it looks at. stack is scratch
// space, returned for reuse.
func (r *Runtime) clearUp(x int32, mark []bool, stack []int32, visit func(p int32)) []int32 {
	stack = append(stack[:0], x)
	for len(stack) > 0 {
		y := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for ns, c := r.neighbours(y, parsList); ; ns, c = r.chunk(c) {
			for _, p := range ns {
				if mark[p] {
					mark[p] = false
					stack = append(stack, p)
				}
				if visit != nil {
					visit(p)
				}
			}
			if c < 0 {
				break
			}
		}
	}
	return stack
}

// nnKids reports whether every dropped, not gone dependent of storage y is
// marked not needed.
func (r *Runtime) nnKids(y int32) bool {
	for ns, c := r.neighbours(y, kidsList); ; ns, c = r.chunk(c) {
		for _, k := range ns {
			if w := &r.walk[k]; w.evicted && !w.banished && !r.gone[k] && !r.nn[k] {
				return false
			}
		}
		if c < 0 {
			return true
		}
	}
}

// dropped reports whether s is neither resident, swapped out nor banished:
// a storage that rematerialization would recompute.
func (r *Runtime) dropped(s int32) bool {
	st := &r.storages[s]
	return !st.material && !st.swapped && !st.banished
}

// need returns, for a dropped storage e, the earliest next use of e (if the
// program still references it) or of a still referenced dropped storage
// reachable from e through dropped dependents. Values are memoized for the
// current state (needGen, advanced by resetNeed whenever storages may have
// changed residency), so the candidates of one choice share their walks: the
// memo turns a walk per candidate into one pass over the dropped region. The
// walk is an iterative depth-first search (chains are thousands deep); a
// dependent still on the search stack (a cycle through views of an earlier
// storage) contributes nothing, a value at the current step stops the
// search of its storage early (nothing is earlier), and once the choice has
// visited needCap storages the unvisited dependents count as not needed.
//
// The walk passes over the storages stillNeeded's walks marked not needed
// (nn, kept true by nnDropped; all false without nnOn): no storage the
// program reads again is reachable from them, so their value is MaxInt64
// and leaving them out changes no value (a walk that leaves them out
// reaches the cap later, if at all). On a deep DAG with skip
// connections most of the dropped region below a candidate is such
// (released activations whose dependents are not all gone), and without
// the marks every choice walked it again, up to the cap.
func (r *Runtime) need(e int32) int64 {
	if len(r.needStamp) < len(r.storages) {
		r.needStamp = append(r.needStamp, make([]uint32, len(r.storages)-len(r.needStamp))...)
		r.needVal = append(r.needVal, make([]int64, len(r.storages)-len(r.needVal))...)
	}
	if r.needGen == 0 {
		r.resetNeed()
	}
	g := r.needGen
	if r.needStamp[e] == g+1 {
		return r.needVal[e]
	}
	if r.nn[e] {
		return math.MaxInt64
	}
	push := func(x int32) {
		r.needLeft--
		r.needStamp[x] = g // on the stack
		v := int64(math.MaxInt64)
		if root := r.refRoot[x]; root >= 0 {
			v = r.progNextUseRoot(x, root)
		}
		r.needVal[x] = v
		ns, c := r.neighbours(x, kidsList)
		r.needStack = append(r.needStack, needFrame{st: x, c: c, left: ns})
	}
	push(e)
	for len(r.needStack) > 0 {
		f := &r.needStack[len(r.needStack)-1]
		x := f.st
		next := int32(-1)
		for next < 0 && r.needVal[x] > r.step {
			if len(f.left) == 0 {
				if f.c < 0 {
					break
				}
				f.left, f.c = r.chunk(f.c)
				continue
			}
			cs := f.left[0]
			f.left = f.left[1:]
			if r.needSkip[cs] || r.nn[cs] {
				continue
			}
			switch r.needStamp[cs] {
			case g + 1:
				r.needVal[x] = min(r.needVal[x], r.needVal[cs])
			case g:
				// on the stack: a cycle through views
			default:
				if r.needLeft > 0 {
					next = cs
				} else {
					r.lbOn = false // capped: later values may be lower
					r.needCapHit = true
				}
			}
		}
		if next >= 0 {
			push(next)
			continue
		}
		r.needStamp[x] = g + 1 // done
		r.needStack = r.needStack[:len(r.needStack)-1]
		if n := len(r.needStack); n > 0 {
			p := r.needStack[n-1].st
			r.needVal[p] = min(r.needVal[p], r.needVal[x])
		}
	}
	return r.needVal[e]
}

// markGone counts, for storage s whose last external reference has just
// gone, its distinct dependent storages that are not gone, and marks s
// gone when there are none; a storage marked gone lowers the count of each
// released parent, which may be marked gone in turn. A storage without
// external references gains no dependents (Compute sets goneOff if one is
// read) and gets no references back, so gone is for good, and need's walks
// skip the gone storages without changing a value: a gone storage and all
// its dependents are needed by nobody. On a long run most of the dropped
// region is gone (the early forward's evicted activations, released in
// the backward pass), and need's per-release walks would otherwise cross
// it again and again.
func (r *Runtime) markGone(s int32) {
	live := int32(0)
	m := r.newMark()
	for ns, c := r.neighbours(s, kidsList); ; ns, c = r.chunk(c) {
		for _, k := range ns {
			if w := &r.walk[k]; w.mark != m {
				w.mark = m
				if !r.gone[k] {
					live++
				}
			}
		}
		if c < 0 {
			break
		}
	}
	r.storages[s].liveKids = live
	if live > 0 {
		return
	}
	stack := append(r.upStack[:0], s)
	r.gone[s] = true
	r.syncSkip(s)
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		m := r.newMark()
		for ns, c := r.neighbours(x, parsList); ; ns, c = r.chunk(c) {
			for _, p := range ns {
				w := &r.walk[p]
				if w.mark == m {
					continue
				}
				w.mark = m
				ps := &r.storages[p]
				if ps.refExt != 0 || r.gone[p] {
					continue // counted when its last reference goes
				}
				if ps.liveKids--; ps.liveKids == 0 {
					r.gone[p] = true
					r.syncSkip(p)
					stack = append(stack, p)
				}
			}
			if c < 0 {
				break
			}
		}
	}
	r.upStack = stack
}

// resetNeed invalidates need's memo (two generations per state: on the
// stack and done).
func (r *Runtime) resetNeed() {
	r.needLeft = r.needCap
	r.needCapHit = false
	r.needGen += 2
	if r.needGen == 0 || r.needGen == math.MaxUint32 {
		clear(r.needStamp)
		r.needGen = 2
	}
}

// syncSkip sets needSkip[s] from s's walk node and gone flag.
func (r *Runtime) syncSkip(s int32) { r.needSkip[s] = r.skipOf(s) }

// skipOf is needSkip's definition: whether need passes storage s over (not
// evicted, banished, or gone).
func (r *Runtime) skipOf(s int32) bool {
	w := &r.walk[s]
	return !w.evicted || w.banished || r.gone[s]
}

// needFrame is a storage on need's search stack: the rest of its current
// run of dependents (left, in its walk node or a chunk) and the chunk that
// follows (-1: none).
type needFrame struct {
	left  []int32
	st, c int32
}

// needWalk caps the storages need visits per choice: on a long log the
// dropped region (evicted and released storages) grows with the trace, and
// an uncapped pass over it at every choice is quadratic. The rematerialization
// chains the next-use term is for are short walks from the candidates.
const needWalk = 4096

// Pin rematerializes t if needed and keeps its storage resident for good.
func (r *Runtime) Pin(t TensorID) error {
	if err := r.checkTensor("pin", t); err != nil {
		return err
	}
	tt := &r.tensors[t]
	if !tt.defined {
		if err := r.materialize(int32(t), true); err != nil {
			r.dead = err
			return err
		}
	} else if !r.storages[tt.st].material {
		if err := r.swapIn(tt.st); err != nil {
			r.dead = err
			return err
		}
	}
	s := &r.storages[tt.st]
	if s.pinned {
		return nil
	}
	r.lock(tt.st)
	if r.watchHead[tt.st] >= 0 {
		r.notify(tt.st)
	}
	if s.pendingFree {
		r.markDirty(tt.st)
	}
	s.pinned = true
	return nil
}

// ForbidRemat marks op's outputs as impossible to recompute (a
// non-deterministic op without saved RNG state, an impure op): their
// storages are never dropped (only swapped, when Swap is on). When such a
// storage's last reference is released it is freed only if no dependent
// that may still need rematerializing reads it; the resident storages
// that depend on it through freed ones then become unrecomputable in turn.
// Call it right after the op's Compute.
func (r *Runtime) ForbidRemat(op OpID) error {
	if r.dead != nil {
		return fmt.Errorf("dtr: forbid remat after a failed run: %w", r.dead)
	}
	if op < 0 || int(op) >= len(r.ops) {
		return fmt.Errorf("dtr: forbid remat op %d: not defined (runtime has %d ops)", op, len(r.ops))
	}
	for _, t := range r.ops[op].results {
		r.fix(r.tensors[t].st)
	}
	return nil
}

func (r *Runtime) fix(s int32) {
	st := &r.storages[s]
	if st.fixed || st.pinned {
		return
	}
	if r.traversable(s) {
		r.leave(s)
	}
	if r.watchHead[s] >= 0 {
		r.notify(s)
	}
	st.fixed = true
	if !r.cfg.Swap {
		r.makeUnevictable(s)
	}
}

// releaseFixed tries to free unrecomputable storage s whose last reference
// is gone. It walks the dependents through non-resident storages: if one of
// them is still referenced it may need s again, and s stays resident;
// otherwise the resident dependents reached would become unrecomputable once
// s is gone. If they hold more bytes than s, s stays resident too (keeping
// it is cheaper than pinning them); else they are marked unrecomputable and
// s is freed. A storage kept is tried again after each top-level op. It
// reports whether s was freed.
//
// The decision depends only on the set of storages the walk reaches, so a
// storage kept remembers the dependents that kept it (its witnesses: the
// resident ones reached, or the referenced evicted one) and where its walk
// stopped, and a retry first checks them (witnessesHold): a long backward
// pass keeps a storage for hundreds of ops whose retries would otherwise
// each walk the whole chain of freed gradients to the current one.
func (r *Runtime) releaseFixed(s int32) bool {
	st := &r.storages[s]
	if r.grpm[s].grp >= 0 {
		r.grpDetach(s)
	}
	if st.refInt != 0 {
		r.keepPending(s)
		return false
	}
	if r.witnessesHold(s) {
		if r.fixedRef != nil {
			r.fixedChecks++
			if !r.fixedRef(s) {
				r.fixedMismatch++
			}
		}
		r.keepPending(s)
		return false
	}
	r.clearWitnesses(s)
	r.walk[s].mark = r.newMark()
	w := fixedWalk{size: st.size, base: len(r.scratch), queue: append(r.stack[:0], s)}
	r.fixedRun(&w)
	base := w.base
	if w.decided() {
		r.pend(s)
		r.keepOn(s, r.scratch[base:])
		r.keepFrontier(s, &w)
		r.scratch = r.scratch[:base]
		r.keepPending(s)
		return false
	}
	r.deadAfter(w.queue)
	for _, cs := range r.scratch[base:] {
		r.fix(cs)
	}
	r.scratch = r.scratch[:base]
	if st.pendingFree {
		r.unpend(s)
	}
	r.evict(s, false)
	r.stats.EagerFrees++
	return true
}

// deadAfter marks dead the storages an undecided walk went through (q: s,
// then the freed storages queued). The resident dependents it found become
// unrecomputable and are passed over from now on, and it found no
// referenced evicted one, so nothing any of them reaches counts for a walk
// any more: later walks (a backward pass that ends frees its kept storages
// one after another, each after a walk over the same freed region) stop at
// them. That holds until a freed storage stops being passable, which
// leave, called then, records by ending the epoch: freeing a storage
// cannot make a dead one reach anything, as a dead one reaches no resident
// storage to free.
func (r *Runtime) deadAfter(q []int32) {
	if r.noDead {
		return
	}
	for _, x := range q {
		r.deadAt[x] = r.deadEpoch
	}
}

// fixedWalk is the state of releaseFixed's walk (or of a check of
// witnesses) for a storage of size bytes: the resident dependents found
// (r.scratch from base; only the referenced evicted one once keep), their
// bytes, and the queue of traversable storages still to expand.
type fixedWalk struct {
	size  int64
	base  int
	queue []int32
	head  int
	bytes int64
	keep  bool
	// of: 1 + the pending storage whose witnesses are checked (their
	// bytes are counted already: a walk that reaches one passes it over);
	// 0 for a walk from the storage
	of int32
}

// decided reports whether what the walk found keeps the storage.
func (w *fixedWalk) decided() bool { return w.keep || w.bytes > w.size }

// fixedReach takes storage x, reached by the walk, into account: a pinned
// or unrecomputable one is passed over, a resident one counts its bytes, a
// referenced evicted one keeps the storage, a traversable one is queued
// (and marked trav). It reports whether the walk is decided.
func (r *Runtime) fixedReach(w *fixedWalk, x int32) bool {
	xs := &r.storages[x]
	switch {
	case xs.pinned || xs.fixed:
	case xs.material || xs.swapped:
		if w.of != 0 && r.isWitness(x, w.of-1) {
			break
		}
		r.scratch = append(r.scratch, x)
		w.bytes += xs.size
	case xs.refExt > 0:
		w.keep = true // a referenced evicted dependent may need the storage
		r.scratch = append(r.scratch[:w.base], x)
	case r.deadAt[x] == r.deadEpoch:
		// nothing behind it counts
	default:
		w.queue = append(w.queue, x)
		r.trav[x] = true
	}
	return w.decided()
}

// fixedRun expands the walk's queue breadth first (the storages reached
// carry the current walk mark) until it is decided or empty, and hands the
// queue's buffer back to r.stack. Breadth first, the nearby resident
// dependents that settle a decision are found before a long chain of freed
// storages is followed to its end; the decision depends only on the set
// reached.
func (r *Runtime) fixedRun(w *fixedWalk) {
	g := r.stGen
walk:
	for ; w.head < len(w.queue) && !w.decided(); w.head++ {
		for ns, c := r.neighbours(w.queue[w.head], kidsList); ; ns, c = r.chunk(c) {
			for _, x := range ns {
				if r.walk[x].mark == g {
					continue
				}
				r.walk[x].mark = g
				if r.fixedReach(w, x) {
					break walk
				}
			}
			if c < 0 {
				break
			}
		}
	}
	r.stack = w.queue[:0]
}

// traversable reports whether releaseFixed's walk goes on through storage
// x: neither resident nor swapped out, unreferenced, not pinned, not
// unrecomputable.
func (r *Runtime) traversable(x int32) bool {
	xs := &r.storages[x]
	return !xs.material && !xs.swapped && xs.refExt == 0 && !xs.pinned && !xs.fixed
}

// leave records that traversable storage x is about to stop being
// traversable. Only if a walk went through x since it last left (trav) can
// a current witness be reached through it: then the kept storages whose
// walks may have, those above x through storages marked trav, lose their
// witnesses (their next retry walks), and the marks passed are cleared.
// Each mark is cleared once for each time a walk set it.
func (r *Runtime) leave(x int32) {
	r.deadEpoch++
	if r.deadEpoch == 0 {
		clear(r.deadAt)
		r.deadEpoch = 1
	}
	if !r.trav[x] {
		return
	}
	r.trav[x] = false
	r.upStack = r.clearUp(x, r.trav, r.upStack, func(p int32) {
		if ps := &r.storages[p]; ps.pendingFree && (ps.witN != 0 || ps.chg != 0 || r.grpm[p].grp >= 0) {
			r.clearWitnesses(p)
			r.markDirty(p)
		}
	})
}

// keepPending keeps s resident, pending a retry of releaseFixed. Unless
// witnesses keep it (a change to one of them, or to a storage their paths
// go through, marks it dirty: notify, leave), it is retried at the next
// retryPending.
func (r *Runtime) keepPending(s int32) {
	r.pend(s)
	st := &r.storages[s]
	if st.refInt != 0 || (st.witN == 0 && r.grpm[s].grp < 0) {
		r.setDirty(int(st.pendPos))
	}
}

// pend puts s on the pending list (chg lists are kept only there).
func (r *Runtime) pend(s int32) {
	if st := &r.storages[s]; !st.pendingFree {
		st.pendingFree = true
		st.pendPos = int32(len(r.pending))
		r.pending = append(r.pending, s)
		for len(r.dirty) < (len(r.pending)+63)>>6 {
			r.dirty = append(r.dirty, 0)
		}
		for len(r.dirtySum) < (len(r.dirty)+63)>>6 {
			r.dirtySum = append(r.dirtySum, 0)
		}
		r.stats.FixedKept++
	}
}

// markDirty has pending storage s retried at the next retryPending.
func (r *Runtime) markDirty(s int32) {
	r.setDirty(int(r.storages[s].pendPos))
}

// setDirty and clearDirty set and clear pending position i's dirty bit,
// and the bit of its word in dirtySum (set while the word has one).
func (r *Runtime) setDirty(i int) {
	r.dirty[i>>6] |= 1 << (i & 63)
	r.dirtySum[i>>12] |= 1 << ((i >> 6) & 63)
}

func (r *Runtime) clearDirty(i int) {
	if r.dirty[i>>6] &^= 1 << (i & 63); r.dirty[i>>6] == 0 {
		r.dirtySum[i>>12] &^= 1 << ((i >> 6) & 63)
	}
}

// nextDirtyWord returns the first word of dirty at or after w with a set
// bit, or -1.
func (r *Runtime) nextDirtyWord(w int) int {
	for k := w >> 6; k < len(r.dirtySum); k++ {
		m := r.dirtySum[k]
		if k == w>>6 {
			m &^= 1<<(w&63) - 1
		}
		if m != 0 {
			return k<<6 | bits.TrailingZeros64(m)
		}
	}
	return -1
}

// unpend takes s, no longer pending, off the pending list.
func (r *Runtime) unpend(s int32) {
	st := &r.storages[s]
	st.pendingFree = false
	r.clearWitnesses(s)
	r.clearDirty(int(st.pendPos))
	r.pending[st.pendPos] = -1
	st.pendPos = -1
	r.pendHoles++
}

// watchEntry lists pending storage s (its witness set gen) on the watch
// list of its witness x; s < 0 lists group -2-s (its generation gen) on
// the list of its owner x.
type watchEntry struct {
	x, s, next int32
	gen        uint32
}

// chgEntry lists x on the chg list of a pending storage (next: 1 + the
// index of the next entry; 0 ends the list).
type chgEntry struct{ x, next int32 }

// notify takes x, whose state is about to change, out of the witness sets
// that hold it (witLost), marks dirty the groups it owns, and empties its
// watch list.
func (r *Runtime) notify(x int32) {
	for e := r.watchHead[x]; e >= 0; e = r.watchArena[e].next {
		we := &r.watchArena[e]
		if we.s < 0 {
			r.groupNotify(-2-we.s, we.gen)
			continue
		}
		if st := &r.storages[we.s]; st.pendingFree && st.witGen == we.gen {
			r.witLost(we.s, x)
		}
	}
	r.watchHead[x] = -1
}

// witLost moves witness x of pending storage s to s's chg list. The other
// witnesses still keep s if their bytes exceed its size and s is in no
// group (a group's hold counted on them: the member's need); else s is
// marked dirty, and its retry checks the chg list.
func (r *Runtime) witLost(s, x int32) {
	st := &r.storages[s]
	st.witN--
	st.witBytes -= r.storages[x].size
	r.chgPush(s, x)
	if st.witBytes <= st.size || r.grpm[s].grp >= 0 {
		r.markDirty(s)
	}
}

// chgPush lists x on pending storage s's chg list. The arena is compacted
// when most of it is dropped lists.
func (r *Runtime) chgPush(s, x int32) {
	if n := len(r.chgArena); n >= r.arenaFloor() && n >= 4*r.chgLive {
		r.compactChg()
	}
	st := &r.storages[s]
	r.chgArena = append(r.chgArena, chgEntry{x: x, next: st.chg})
	st.chg = int32(len(r.chgArena))
	r.chgLive++
}

// chgDrop empties s's chg list.
func (r *Runtime) chgDrop(s int32) {
	st := &r.storages[s]
	for e := st.chg; e != 0; e = r.chgArena[e-1].next {
		r.chgLive--
	}
	st.chg = 0
	if r.chgLive == 0 {
		r.chgArena = r.chgArena[:0]
	}
}

// compactChg copies the chg lists of the pending storages, in order, to a
// new arena.
func (r *Runtime) compactChg() {
	arena := make([]chgEntry, 0, 2*r.chgLive+64)
	for _, p := range r.pending {
		if p < 0 || r.storages[p].chg == 0 {
			continue
		}
		ps := &r.storages[p]
		start := int32(len(arena))
		for e := ps.chg; e != 0; e = r.chgArena[e-1].next {
			arena = append(arena, chgEntry{x: r.chgArena[e-1].x, next: int32(len(arena)) + 2})
		}
		arena[len(arena)-1].next = 0
		ps.chg = start + 1
	}
	r.chgArena = arena
}

// clearWitnesses forgets the witnesses of s: its set (its watch entries go
// stale), its chg list and its group.
func (r *Runtime) clearWitnesses(s int32) {
	st := &r.storages[s]
	st.witN, st.witBytes = 0, 0
	st.witGen++
	if st.chg != 0 {
		r.chgDrop(s)
	}
	if r.grpm[s].grp >= 0 {
		r.grpRemove(s)
	}
}

// addWitnesses adds w, none of them a witness of s already, to the private
// witnesses of s: s goes on the watch list of each.
func (r *Runtime) addWitnesses(s int32, w []int32) {
	r.watchRoom(len(w))
	st := &r.storages[s]
	for _, x := range w {
		r.watchArena = append(r.watchArena, watchEntry{x: x, s: s, next: r.watchHead[x], gen: st.witGen})
		r.watchHead[x] = int32(len(r.watchArena) - 1)
		st.witBytes += r.storages[x].size
	}
	st.witN += int32(len(w))
}

// watchRoom makes room for n more watch entries: once the arena has reached
// watchCompact, it is copied to watchSpare keeping only the current
// entries (of current witness sets and of live groups), each list in its
// order, and the next compaction waits until it has grown four times as
// large.
func (r *Runtime) watchRoom(n int) {
	if len(r.watchArena)+n < max(r.arenaFloor(), r.watchCompact) {
		return
	}
	old, nw := r.watchArena, r.watchSpare[:0]
	for _, e := range old {
		h := r.watchHead[e.x]
		if h < 0 {
			continue // empty, or copied already (-2 - the new head)
		}
		head, tail := int32(-1), int32(-1)
		for i := h; i >= 0; i = old[i].next {
			we := old[i]
			if !r.watchCurrent(we) {
				continue
			}
			we.next = -1
			nw = append(nw, we)
			k := int32(len(nw) - 1)
			if tail < 0 {
				head = k
			} else {
				nw[tail].next = k
			}
			tail = k
		}
		r.watchHead[e.x] = -2 - head
	}
	for _, e := range nw {
		if h := r.watchHead[e.x]; h <= -2 {
			r.watchHead[e.x] = -2 - h
		}
	}
	r.watchArena, r.watchSpare = nw, old[:0]
	r.watchCompact = 4 * (len(nw) + n)
}

// arenaMinDefault is the length below which the watch and chg arenas are
// never compacted (Runtime.arenaMin).
const arenaMinDefault = 4096

func (r *Runtime) arenaFloor() int {
	if r.arenaMin > 0 {
		return r.arenaMin
	}
	return arenaMinDefault
}

// watchCurrent reports whether watch entry we is current: of a pending
// storage's current witness set, or of a live group's current generation.
func (r *Runtime) watchCurrent(we watchEntry) bool {
	if we.s < 0 {
		gr := &r.groups[-2-we.s]
		return gr.live && gr.gen == we.gen
	}
	st := &r.storages[we.s]
	return st.pendingFree && st.witGen == we.gen
}

// keepFrontier lists on pending storage s's chg list the storages walk w
// (decided: s is kept) queued and did not expand: a later check of s goes
// on from them when the witnesses found no longer keep s, instead of
// walking again from s through the storages w went through.
func (r *Runtime) keepFrontier(s int32, w *fixedWalk) {
	for _, x := range w.queue[w.head:] {
		r.chgPush(s, x)
	}
}

// isWitness reports whether x is a private witness of pending storage s.
func (r *Runtime) isWitness(x, s int32) bool {
	gen := r.storages[s].witGen
	for e := r.watchHead[x]; e >= 0; e = r.watchArena[e].next {
		if we := &r.watchArena[e]; we.s == s && we.gen == gen {
			return true
		}
	}
	return false
}

// witnessesHold reports whether pending storage s is still kept, judged
// from its witnesses without walking from s again. While s has witnesses
// (leave drops them when a storage their walk went through stops being
// traversable), every witness is still reached from s, by the walk's path
// or through witnesses that have become traversable since. The private
// witnesses whose state has not changed since they were found count their
// bytes (witBytes); those that changed since (the chg list, with a
// detached group's owner) are taken again: one resident counts its bytes,
// one referenced and evicted keeps s, one now traversable is walked on
// from, for new witnesses (the current ones passed over), until they keep
// s. A check costs the witnesses that changed, not the whole set. If they
// do not keep s, or s has none, the caller walks from s: only that walk
// frees s.
func (r *Runtime) witnessesHold(s int32) bool {
	st := &r.storages[s]
	if st.witN == 0 && st.chg == 0 {
		return false
	}
	g := r.newMark()
	r.walk[s].mark = g
	w := fixedWalk{size: st.size, base: len(r.scratch), queue: r.stack[:0], bytes: st.witBytes, of: s + 1}
	for {
		// one entry at a time, each walked on from before the next: the
		// entries left when s is found kept stay listed
		r.fixedRun(&w)
		if w.decided() || st.chg == 0 {
			break
		}
		e := &r.chgArena[st.chg-1]
		st.chg = e.next
		r.chgLive--
		if x := e.x; r.walk[x].mark != g {
			r.walk[x].mark = g
			r.fixedReach(&w, x)
		}
	}
	held := w.decided()
	if held {
		if w.keep {
			r.keepOn(s, r.scratch[w.base:])
		} else {
			r.keepMore(s, r.scratch[w.base:])
		}
		r.keepFrontier(s, &w)
	}
	r.scratch = r.scratch[:w.base]
	return held
}

// retryPending tries again to free the unrecomputable storages kept by
// releaseFixed, in the order they were kept, as if each were retried:
// a storage whose witnesses are unchanged since they kept it, and still
// reached, would be kept again, and is skipped. The others are marked
// dirty (keepPending, notify, leave), and
// one marked dirty during the pass is retried in it if it comes later in
// the order, at the next pass otherwise, as a full pass would.
func (r *Runtime) retryPending() {
	if r.pendHoles > 64 && 2*r.pendHoles > len(r.pending) {
		r.compactPending()
	}
	if r.retryAll {
		for i, s := range r.pending {
			if s >= 0 {
				r.setDirty(i)
			}
		}
	}
	for w := 0; ; w++ {
		// the words with a dirty bit, in order (dirtySum): a pass costs
		// the dirty entries, not the pending list's length
		r.processGroups()
		if w = r.nextDirtyWord(w); w < 0 {
			break
		}
		var done uint64 // the bits of this word passed already
		for {
			r.processGroups()
			word := r.dirty[w] &^ done
			if word == 0 {
				break
			}
			b := uint(bits.TrailingZeros64(word))
			done |= 2<<b - 1
			r.clearDirty(w<<6 | int(b))
			s := r.pending[w<<6|int(b)]
			if s < 0 {
				continue
			}
			st := &r.storages[s]
			if !st.material || st.pinned || st.refExt > 0 {
				r.unpend(s)
				continue
			}
			r.releaseFixed(s)
		}
	}
}

// compactPending drops the removed entries of the pending list (its
// order kept) and moves the dirty bits with the entries.
func (r *Runtime) compactPending() {
	j := 0
	for i, s := range r.pending {
		if s < 0 {
			continue
		}
		d := r.dirty[i>>6]>>(i&63)&1 != 0
		r.dirty[i>>6] &^= 1 << (i & 63)
		if d {
			r.dirty[j>>6] |= 1 << (j & 63)
		}
		r.pending[j] = s
		r.storages[s].pendPos = int32(j)
		j++
	}
	r.pending = r.pending[:j]
	clear(r.dirty[(j+63)>>6:])
	r.dirty = r.dirty[:(j+63)>>6]
	r.dirtySum = r.dirtySum[:(len(r.dirty)+63)>>6]
	clear(r.dirtySum)
	for w, word := range r.dirty {
		if word != 0 {
			r.dirtySum[w>>6] |= 1 << (w & 63)
		}
	}
	r.pendHoles = 0
}

// --- pool ---

func (r *Runtime) makeEvictable(s int32) {
	st := &r.storages[s]
	if st.poolPos >= 0 || st.unbud || (st.fixed && !r.cfg.Swap) {
		return
	}
	st.poolPos = int32(len(r.pool))
	r.pool = append(r.pool, s)
	st.seq = r.poolSeq
	r.poolSeq++
	if st.size < r.cfg.EvicteeMinSize {
		r.smallInsert(s)
	}
	if r.idx != nil {
		r.idxInsert(s)
		if r.cfg.Parity && st.compute == 0 && !st.inZero {
			st.inZero = true
			r.idx.zeroCost = append(r.idx.zeroCost, s)
		}
	}
}

func (r *Runtime) makeUnevictable(s int32) {
	st := &r.storages[s]
	if st.poolPos < 0 {
		return
	}
	if st.ibucket != -1 {
		r.idxRemove(s)
	}
	if st.spos >= 0 {
		r.smallRemove(s)
	}
	r.pool[st.poolPos] = -1
	st.poolPos = -1
	r.holes++
	if r.holes > 64 && r.holes*2 > len(r.pool) {
		j := 0
		for _, x := range r.pool {
			if x >= 0 {
				r.pool[j] = x
				r.storages[x].poolPos = int32(j)
				j++
			}
		}
		r.pool = r.pool[:j]
		r.holes = 0
	}
}

func (r *Runtime) lock(s int32) {
	st := &r.storages[s]
	if st.refInt == 0 {
		r.makeUnevictable(s)
	}
	st.refInt++
	st.rnextOK = false // read: its next use may move later (refineNext)
}

func (r *Runtime) unlock(s int32) {
	st := &r.storages[s]
	st.refInt--
	if st.refInt == 0 && st.material {
		r.makeEvictable(s)
	}
}

// avail: the tensor can be read now.
func (r *Runtime) avail(t int32) bool {
	tt := &r.tensors[t]
	return tt.defined && r.storages[tt.st].material
}

func (r *Runtime) usesEqClass() bool {
	h := r.cfg.Heuristic
	return h == HDTREqClass || h == MegEngine || h == Lookahead
}

func (r *Runtime) hcost(s int32) int64 {
	if r.cfg.Heuristic == MegEngine {
		return r.storages[s].est
	}
	return r.storages[s].compute
}

// evict drops storage s (byHeuristic: chosen to make room).
func (r *Runtime) evict(s int32, byHeuristic bool) {
	st := &r.storages[s]
	r.setResidency(s, false, false)
	st.kept, st.kexact, st.kstick, st.rnextOK = false, false, 0, false
	r.stats.Memory -= st.size
	r.dropExtra(s)
	if st.unbud {
		r.unbud -= st.size
	}
	r.makeUnevictable(s)
	for _, t := range st.tensors {
		r.tensors[t].defined = false
	}
	if byHeuristic {
		r.stats.Evictions++
	}
	if r.host != nil {
		r.host.Free(TensorID(st.root))
	}
	if r.rec != nil {
		r.rec.free(st.root)
	}
	if r.incOn {
		r.incEvict(s)
	}
	if r.usesEqClass() {
		st.ecv = r.hcost(s)
		n := r.ufNew(st.ecv)
		st.ecn = n
		for _, d := range [2]int{parsList, kidsList} {
			for ns, c := r.neighbours(s, d); ; ns, c = r.chunk(c) {
				for _, x := range ns {
					if xs := &r.storages[x]; r.walk[x].evicted && xs.ecn >= 0 {
						r.ufMerge(xs.ecn, n)
						if xs.fresh {
							xs.freshMerged = true
						}
					}
				}
				if c < 0 {
					break
				}
			}
		}
		r.eqNeighbourChange(s, 1)
	}
}

// ufNew adds an eq-class node of its own with value v and returns it.
func (r *Runtime) ufNew(v int64) int32 {
	n := int32(len(r.ufParent))
	r.ufParent = append(r.ufParent, -1)
	r.ufValue = append(r.ufValue, v)
	r.ufSlack = append(r.ufSlack, eqSlack(v))
	r.ufLive = append(r.ufLive, 1)
	r.ufMark = append(r.ufMark, 0)
	return n
}

func (r *Runtime) ufFind(x int32) int32 {
	root := x
	for r.ufParent[root] >= 0 {
		root = r.ufParent[root]
	}
	for r.ufParent[x] >= 0 {
		nx := r.ufParent[x]
		r.ufParent[x] = root
		x = nx
	}
	return root
}

// ufMerge merges l's class into r's (r's root stays the root).
func (r *Runtime) ufMerge(l, rr int32) {
	a, b := r.ufFind(l), r.ufFind(rr)
	if a == b {
		return
	}
	r.ufParent[a] = b
	if r.idx != nil && r.idx.eq {
		r.regMerge(a, b)
	}
	va, vb, la, lb := r.ufValue[a], r.ufValue[b], r.ufLive[a], r.ufLive[b]
	r.ufNeg += liveNeg(va+vb, la+lb) - liveNeg(va, la) - liveNeg(vb, lb)
	r.ufValue[b], r.ufLive[b] = va+vb, la+lb
	// keys counting either class count its floor; the merged floor is
	// their sum, so the slacks add
	r.ufSlack[b] += r.ufSlack[a]
}

// ufAdd adds d to the value of the class whose root is root.
func (r *Runtime) ufAdd(root int32, d int64) {
	v, l := r.ufValue[root], r.ufLive[root]
	r.ufNeg += liveNeg(v+d, l) - liveNeg(v, l)
	r.ufValue[root] = v + d
	r.ufSlack[root] += d
}

// ufKill records that a storage of the class whose root is root is no
// longer evicted since its eviction (its ecn is reset).
func (r *Runtime) ufKill(root int32) {
	v, l := r.ufValue[root], r.ufLive[root]
	r.ufNeg += liveNeg(v, l-1) - liveNeg(v, l)
	r.ufLive[root] = l - 1
}

// liveNeg is a class's part of ufNeg: -v for a live class (l > 0) of
// value v < 0, else 0.
func liveNeg(v int64, l int32) int64 {
	if l <= 0 {
		return 0
	}
	return max(-v, 0)
}

// swapIn brings swapped storage s back.
func (r *Runtime) swapIn(s int32) error {
	st := &r.storages[s]
	if err := r.makeRoom(st.size, func() int64 { return r.sizeExtra(st.size) }); err != nil {
		return err
	}
	if r.host != nil {
		for {
			err := r.host.SwapIn(TensorID(st.root))
			if err == nil {
				break
			}
			if err := r.retryHost(err); err != nil {
				return fmt.Errorf("dtr: swap in tensor %d: %w", st.root, err)
			}
		}
		st = &r.storages[s]
	}
	if r.rec != nil {
		r.rec.swapIn(st.root)
	}
	dt := int64(float64(st.size) / r.cfg.HostBandwidth)
	r.stats.Clock += dt
	r.stats.SwapTime += dt
	r.stats.SwapIns++
	r.setResidency(s, true, false)
	r.stats.Memory += st.size + r.chargeHeld(s)
	if r.stats.Memory > r.stats.PeakMemory {
		r.stats.PeakMemory = r.stats.Memory
	}
	if b := r.used(); r.unbudOn && b > r.stats.PeakBudgeted {
		r.stats.PeakBudgeted = b
	}
	if st.refInt == 0 && !st.pinned {
		r.makeEvictable(s)
	}
	return nil
}

func (r *Runtime) swapOut(s int32) error {
	st := &r.storages[s]
	if r.host != nil {
		if err := r.host.SwapOut(TensorID(st.root)); err != nil {
			return fmt.Errorf("dtr: swap out tensor %d: %w", st.root, err)
		}
	}
	if r.rec != nil {
		r.rec.swapOut(st.root)
	}
	dt := int64(float64(st.size) / r.cfg.HostBandwidth)
	r.stats.Clock += dt
	r.stats.SwapTime += dt
	r.stats.SwapOuts++
	r.setResidency(s, false, true)
	r.stats.Memory -= st.size
	r.dropExtra(s)
	r.makeUnevictable(s)
	return nil
}

// makeRoom frees memory until need more bytes, plus the extra bytes the
// allocator's blocks would hold for them now (extra: 0 without a
// blockHost), fit the limit. Evictions change which free blocks the
// allocator would pick, so the extra is asked again after each round; it
// stops when a round frees nothing (a limit that is not hard).
func (r *Runtime) makeRoom(need int64, extra func() int64) error {
	for {
		n := need
		if r.holds != nil {
			n += extra()
		}
		u := r.used()
		if u+n <= r.limit {
			return nil
		}
		if err := r.free(n); err != nil {
			return err
		}
		if r.holds == nil || r.used() >= u {
			return nil
		}
	}
}

// holdExtra is what the blocks of new allocations of r.holdBuf's sizes,
// made in turn now, would hold beyond those sizes (blockHost).
func (r *Runtime) holdExtra() int64 {
	var sum int64
	for _, b := range r.holdBuf {
		sum += b
	}
	return max(r.holds.HoldFor(r.holdBuf)-sum, 0)
}

// sizeExtra is holdExtra for one allocation of size bytes.
func (r *Runtime) sizeExtra(size int64) int64 {
	r.holdBuf = append(r.holdBuf[:0], size)
	return r.holdExtra()
}

// predictOp returns, and keeps in r.opExtra, what the blocks of op o's
// outputs that are not resident and of its workspace would hold beyond
// their sizes now, allocated in that order (the Machine's).
func (r *Runtime) predictOp(o *op) int64 {
	r.holdBuf = r.holdBuf[:0]
	for i, t := range o.results {
		if b := o.sizes[i]; b > 0 {
			if st := &r.storages[r.tensors[t].st]; !st.material && !st.unbud {
				r.holdBuf = append(r.holdBuf, b)
			}
		}
	}
	if o.ws > 0 {
		r.holdBuf = append(r.holdBuf, o.ws)
	}
	r.opExtra = r.holdExtra()
	return r.opExtra
}

// chargeHeld records and returns what the block of storage s, just made
// resident, holds beyond its size (blockHost; 0 without one, and for a
// storage outside the budget).
func (r *Runtime) chargeHeld(s int32) int64 {
	if r.holds == nil || r.extra[s] != 0 {
		return 0
	}
	st := &r.storages[s]
	if st.unbud {
		return 0
	}
	e := max(r.holds.Held(TensorID(st.root))-st.size, 0)
	r.extra[s] = e
	return e
}

// dropExtra uncounts the extra bytes of storage s's block, freed.
func (r *Runtime) dropExtra(s int32) {
	if r.holds != nil {
		r.stats.Memory -= r.extra[s]
		r.extra[s] = 0
	}
}

// used returns the resident bytes the budget counts.
func (r *Runtime) used() int64 { return r.stats.Memory - r.unbud }

// free makes room for need more bytes.
func (r *Runtime) free(need int64) error {
	if r.used()+need > r.limit {
		r.startBurst()
	}
	for r.used()+need > r.limit {
		if !r.cfg.AutoDrop {
			if r.hard {
				return fmt.Errorf("dtr: %w: %d bytes in use + %d needed > budget %d (auto drop off)", sim.ErrOutOfMemory, r.used(), need, r.limit)
			}
			return nil
		}
		s := r.choose()
		if s < 0 {
			if r.hard {
				return fmt.Errorf("dtr: %w: %d bytes in use + %d needed > budget %d and nothing is evictable", sim.ErrOutOfMemory, r.used(), need, r.limit)
			}
			r.stats.OverBudget++
			return nil // soft threshold: proceed past it
		}
		if err := r.evictOne(s); err != nil {
			return err
		}
	}
	return nil
}

// evictOne evicts candidate s by the cheaper enabled method.
func (r *Runtime) evictOne(s int32) error {
	st := &r.storages[s]
	if r.cfg.Swap && (st.fixed || !r.cfg.Drop || 2*float64(st.size)/r.cfg.HostBandwidth < float64(st.compute)) {
		return r.swapOut(s)
	}
	r.evict(s, true)
	return nil
}

// retryHost handles a failed host call: for an ErrHostOutOfMemory outside
// parity mode it evicts one more candidate, scored with the free bytes
// adjacent to its block added to its size, and returns nil so the caller
// retries; otherwise (another error, parity mode, auto drop off, nothing
// left to evict) it returns the error to give up with.
func (r *Runtime) retryHost(err error) error {
	if r.cfg.Parity || !errors.Is(err, ErrHostOutOfMemory) {
		return err
	}
	if !r.cfg.AutoDrop {
		return fmt.Errorf("dtr: %w: host allocation failed and auto drop is off: %w", sim.ErrOutOfMemory, err)
	}
	s := r.chooseFrag()
	if s < 0 {
		return fmt.Errorf("dtr: %w: host allocation failed with nothing left to evict: %w", sim.ErrOutOfMemory, err)
	}
	r.stats.HostRetries++
	return r.evictOne(s)
}

// growthHost is an AdjacencyHost that can report each storage whose free
// memory next to its block grows, as it happens (SimHost on a caching
// allocator). It reports false when it cannot; a nil grew stops the calls.
type growthHost interface {
	WatchAdjacentFree(grew func(t TensorID)) bool
}

// noteAdjGrown (growthHost's callback) lists the indexed storage of t,
// whose free neighbours grew, to be re-keyed before the next choice: its
// key's size term may now exceed the one it was keyed with, so its bound
// may be above its score.
func (r *Runtime) noteAdjGrown(t TensorID) {
	if !r.adjWatch || t < 0 || int(t) >= len(r.tensors) {
		return
	}
	s := r.tensors[t].st
	if s < 0 || int(s) >= len(r.storages) {
		return
	}
	st := &r.storages[s]
	if st.ibucket < 0 || st.adjPend {
		return
	}
	st.adjPend = true
	r.adjGrown = append(r.adjGrown, s)
}

// adjRekey re-keys the storages listed by noteAdjGrown whose size term is
// now above the one their keys were computed with (a key whose size term
// is above the current one stays a lower bound: the free bytes next to a
// block shrink only when memory is taken, and the key is left as it is).
func (r *Runtime) adjRekey() {
	for _, s := range r.adjGrown {
		st := &r.storages[s]
		st.adjPend = false
		if st.ibucket >= 0 && r.sizeTerm(s) > st.ksize {
			r.adjRekeys++
			r.idxRekey(s)
		}
	}
	r.adjGrown = r.adjGrown[:0]
}

// neighbourHost is an AdjacencyHost that can list the storages with free
// memory next to them (SimHost on a caching allocator), in time that grows
// with the free blocks rather than the resident storages. It reports false
// when it cannot; a nil visit only asks.
type neighbourHost interface {
	FreeNeighbours(visit func(t TensorID)) bool
}

// chooseFrag returns the candidate to evict after a host allocation
// failure: the one the scan would choose with each candidate's size term
// counting the free bytes next to its block (fragMode). A candidate with
// no free neighbour scores as it does outside fragMode, and one with some
// scores lower; so with a neighbourHost that can list them the choice is
// the better of the index's ordinary choice, scored in fragMode, and the
// candidates next to free memory, evaluated in fragMode, under the scan's
// order (idxBetter). Otherwise, or without an index, it is the fragMode
// scan.
func (r *Runtime) chooseFrag() int32 {
	nh, ok := r.host.(neighbourHost)
	if r.cfg.Heuristic == MegEngine {
		// its size term counts the free neighbours already
		return r.choose()
	}
	if !ok || !nh.FreeNeighbours(nil) || r.idx == nil || r.noise != nil {
		r.fragMode = true
		s := r.choose()
		r.fragMode = false
		return s
	}
	best := r.choose()
	if best < 0 || r.storages[best].size < r.cfg.EvicteeMinSize {
		// no candidate of the minimum size: the scan takes the largest
		// small one in fragMode too
		return best
	}
	r.fragMode = true
	// best's score counts its free neighbours too in fragMode
	best = r.nextToFree(nh, best, r.evaluate(best))
	r.checkScan(best) // in fragMode: the scan it compares with is fragMode's
	r.fragMode = false
	return best
}

// fragSkip reports whether candidate s, filed in the index, scores above
// best with the free bytes next to its block in its size term (fragMode,
// or megengine) by its own key's bound alone: its score with the size is
// at least that bound, and the free bytes scale it down by size / (size +
// free bytes). Not in a choice where a need walk was capped (a kept
// storage's key may then be above its evaluated score).
func (r *Runtime) fragSkip(s int32, best float64) bool {
	st := &r.storages[s]
	if st.ibucket < 0 || r.needCapHit || !(best > 0) || math.IsInf(best, 1) || st.ksize <= 0 {
		return false
	}
	lb := r.nodeBound(int(st.ibucket), s)
	if !(lb > 0) || math.IsInf(lb, 1) {
		return false
	}
	return lb*float64(st.ksize)/float64(r.sizeTerm(s)) > best+math.Abs(best)*1e-9
}

// ensure makes tensor p readable (recompute or swap in).
func (r *Runtime) ensure(p int32) error {
	pt := &r.tensors[p]
	if !pt.defined {
		return r.materialize(p, true)
	}
	if !r.storages[pt.st].material {
		return r.swapIn(pt.st)
	}
	return nil
}

// acquire locks the op's inputs as the reference does: first lock those
// available, then rematerialize the others one by one (locking each).
func (r *Runtime) acquire(args []int32) error {
	for _, p := range args {
		if r.avail(p) {
			r.lock(r.tensors[p].st)
		}
	}
	base := len(r.scratch)
	for _, p := range args {
		if !r.avail(p) {
			r.scratch = append(r.scratch, p)
		}
	}
	end := len(r.scratch)
	for i := base; i < end; i++ {
		p := r.scratch[i]
		if err := r.ensure(p); err != nil {
			return err
		}
		r.lock(r.tensors[p].st)
	}
	r.scratch = r.scratch[:base]
	return nil
}

// acquireLazy rematerializes the missing inputs first, without holding locks
// on the available ones (their fresh access time protects them softly), then
// locks the rest, recovering any that were evicted meanwhile. Recursive
// rematerialization then holds locks only on the current op's inputs, not on
// every pending op's inputs up the recursion.
func (r *Runtime) acquireLazy(args []int32) error {
	base := len(r.scratch)
	for i, p := range args {
		if !r.avail(p) {
			r.scratch = append(r.scratch, int32(i))
		}
	}
	end := len(r.scratch)
	for k := base; k < end; k++ {
		p := args[r.scratch[k]]
		if !r.avail(p) {
			if err := r.ensure(p); err != nil {
				return err
			}
		}
		r.lock(r.tensors[p].st)
	}
	k := base
	for i, p := range args {
		if k < end && r.scratch[k] == int32(i) {
			k++
			continue
		}
		if !r.avail(p) {
			if err := r.ensure(p); err != nil {
				return err
			}
		}
		r.lock(r.tensors[p].st)
	}
	r.scratch = r.scratch[:base]
	return nil
}

// pack brings storage t, made outside the budget (Output.Unbudgeted),
// under it, as remat_torch.dtr does when autograd saves a tensor
// (Config.SavedOnly), then makes room if the saved activations pass the
// budget. A resident one counts against the budget from here on and
// becomes a candidate.
func (r *Runtime) pack(t TensorID) error {
	if r.dead != nil {
		return r.dead
	}
	s := r.tensors[t].st
	st := &r.storages[s]
	if !st.unbud {
		return nil
	}
	st.unbud = false
	if !st.material {
		return nil
	}
	r.unbud -= st.size
	if b := r.used(); b > r.stats.PeakBudgeted {
		r.stats.PeakBudgeted = b
	}
	if st.refInt == 0 && !st.pinned {
		r.makeEvictable(s)
	}
	if r.used() > r.limit {
		if err := r.free(0); err != nil {
			r.dead = err
			return err
		}
	}
	return nil
}

// acquireTouched marks every argument accessed at the current clock, then
// acquires them (acquire or acquireLazy): the reference's order, in which an
// op's arguments are accessed when its rematerialization starts, before
// their own missing ancestors are rebuilt.
func (r *Runtime) acquireTouched(args []int32) error {
	clock := r.stats.Clock
	for _, p := range args {
		r.touch(r.tensors[p].st, clock)
	}
	if r.cfg.LazyLock {
		return r.acquireLazy(args)
	}
	return r.acquire(args)
}

// acquireInOrder (Config.SavedOnly) acquires the arguments one at a time,
// in order, as remat_torch.dtr's runtime resolves them: an evicted one is
// rebuilt, then each is marked accessed at the clock of that moment (after
// its own rebuild) and locked. A later argument is not locked while an
// earlier one is rebuilt, and is rebuilt in turn if that evicted it.
func (r *Runtime) acquireInOrder(args []int32) error {
	for _, p := range args {
		if !r.avail(p) {
			if err := r.ensure(p); err != nil {
				return err
			}
		}
		s := r.tensors[p].st
		r.touch(s, r.stats.Clock)
		r.lock(s)
	}
	return nil
}

// materialize computes tensor t (remat: a recomputation).
func (r *Runtime) materialize(t int32, remat bool) error {
	tt := &r.tensors[t]
	o := &r.ops[tt.op]
	if remat && r.cfg.SavedOnly {
		if err := r.acquireInOrder(o.args); err != nil {
			return err
		}
	} else if err := r.acquireTouched(o.args); err != nil {
		return err
	}
	need := o.total + o.ws
	if !remat {
		need -= o.utotal // made outside the budget the first time
	}
	// SavedOnly does not check before an op's first run: remat_torch.dtr
	// checks when autograd saves a tensor (pack, after the op)
	if remat || !r.cfg.SavedOnly {
		if err := r.makeRoom(need, func() int64 { return r.predictOp(o) }); err != nil {
			return err
		}
	}
	for {
		err := r.compute(t, remat)
		if err == nil {
			break
		}
		if err := r.retryHost(err); err != nil {
			return err
		}
	}
	if remat && r.cfg.SavedOnly {
		// remat_torch.dtr holds a rebuilt op's outputs as accessed now
		for _, u := range o.results {
			r.touch(r.tensors[u].st, r.stats.Clock)
		}
	}
	for _, p := range o.args {
		r.unlock(r.tensors[p].st)
	}
	if r.cfg.Banish {
		for _, p := range o.args {
			r.tryBanish(r.tensors[p].st)
		}
	}
	if r.cfg.RematLimit > 0 && r.stats.RematCompute > r.cfg.RematLimit {
		return fmt.Errorf("%w: %d ns recomputed > limit %d ns", ErrThrashing, r.stats.RematCompute, r.cfg.RematLimit)
	}
	return nil
}

func (r *Runtime) compute(t int32, remat bool) error {
	tt := &r.tensors[t]
	o := &r.ops[tt.op]
	// classify siblings before running
	base := len(r.scratch)
	for _, u := range o.results {
		if u != t && r.avail(u) {
			r.scratch = append(r.scratch, u) // dup siblings
		}
	}
	mid := len(r.scratch)
	for _, u := range o.results {
		if u != t && !r.avail(u) {
			r.scratch = append(r.scratch, u) // remat siblings
		}
	}
	rs := len(r.scratch)
	for _, u := range o.results {
		if u != t && !r.storages[r.tensors[u].st].material {
			r.scratch = append(r.scratch, r.tensors[u].st)
		}
	}
	if !r.storages[tt.st].material {
		r.scratch = append(r.scratch, tt.st)
	}
	if r.host != nil {
		if err := r.host.Compute(OpID(tt.op)); err != nil {
			r.scratch = r.scratch[:base]
			return fmt.Errorf("dtr: host compute op %d: %w", tt.op, err)
		}
	}
	if r.rec != nil {
		r.rec.compute(tt.op)
	}
	r.stats.Clock += o.cost
	r.stats.Memory += o.total
	wsExtra := int64(0) // the workspace block's, predicted
	if r.holds != nil {
		outs := int64(0)
		for _, s := range r.scratch[rs:] {
			outs += r.chargeHeld(s)
		}
		r.stats.Memory += outs
		if o.ws > 0 {
			wsExtra = max(r.opExtra-outs, 0)
		}
		r.opExtra = 0
	}
	if m := r.stats.Memory + o.ws + wsExtra; m > r.stats.PeakMemory {
		r.stats.PeakMemory = m // the workspace is freed when the op returns
	}
	r.setResidency(tt.st, true, false)
	tt.defined = true
	if remat {
		r.stats.RematCompute += o.cost
		r.stats.Remats++
	} else {
		r.stats.ModelCompute += o.cost
	}
	for _, u := range r.scratch[mid:rs] {
		ut := &r.tensors[u]
		r.setResidency(ut.st, true, false)
		ut.defined = true
	}
	for _, u := range r.scratch[base:mid] {
		r.stats.Memory -= o.sizes[r.tensors[u].index]
	}
	if r.unbudOn {
		for _, s := range r.scratch[rs:] {
			if st := &r.storages[s]; st.unbud {
				if remat {
					st.unbud = false // recomputed: managed like the others
				} else {
					r.unbud += st.size
				}
			}
		}
		if b := r.used(); b > r.stats.PeakBudgeted {
			r.stats.PeakBudgeted = b
		}
	}
	if r.incOn {
		if err := r.incComputed(r.scratch[rs:]); err != nil {
			r.scratch = r.scratch[:base]
			return err
		}
	}
	eq := r.usesEqClass()
	dropped := false
	for _, s := range r.scratch[rs:] {
		st := &r.storages[s]
		if remat {
			st.remats++
		}
		if st.fresh {
			st.fresh = false
			if !st.freshMerged {
				// its node is still a class of its own: the reference's
				// subtraction below would change no other storage's class
				if st.ecn >= 0 {
					r.ufKill(r.ufFind(st.ecn))
				}
				st.ecn = -1
				continue
			}
		}
		if eq && st.ecn >= 0 {
			dropped = true
			// the class loses what s's eviction added: a view op created
			// on s while it was evicted has raised hcost(s) since, and
			// subtracting the new value would drive the class value
			// negative
			dec := st.ecv
			if r.cfg.Parity {
				// as the reference: s's current cost, so classes may go
				// negative (ufNeg)
				dec = r.hcost(s)
			}
			root := r.ufFind(st.ecn)
			r.ufAdd(root, -dec)
			if r.idx != nil && r.idx.eq {
				r.idx.dropped = append(r.idx.dropped, s)
				r.idxClassDropped(root, dec)
			}
			r.ufKill(root)
			if r.idx != nil && r.idx.eq && r.ufNeg > 0 && !r.idx.neg {
				r.idx.drop = r.idx.allow + 1 // keys made without negative mass: re-key all (idxDropped)
			}
			st.ecn = -1
		}
	}
	for _, s := range r.scratch[rs:] {
		if st := &r.storages[s]; st.refInt == 0 && !st.pinned {
			r.makeEvictable(s)
		}
	}
	if dropped && r.idx != nil && r.idx.eq {
		r.idxDropped()
	}
	r.scratch = r.scratch[:base]
	return nil
}

// tryBanish frees storage s for good when it has no external references and
// none of its dependents is evicted, pinning its material dependents.
func (r *Runtime) tryBanish(s int32) {
	st := &r.storages[s]
	if st.refExt > 0 || st.banished || st.pinned {
		return
	}
	for _, t := range st.tensors {
		for _, c := range r.tensors[t].children {
			if r.tensors[c].st != s && !r.tensors[c].defined && !r.storages[r.tensors[c].st].banished {
				return
			}
		}
	}
	if st.material {
		if st.refInt > 0 {
			return
		}
		r.evict(s, false)
	}
	st = &r.storages[s]
	st.banished = true
	r.walk[s].banished = true
	r.syncSkip(s)
	r.stats.Banished++
	for _, t := range st.tensors {
		for _, c := range r.tensors[t].children {
			cs := r.tensors[c].st
			if cs != s && r.storages[cs].material && !r.storages[cs].pinned {
				r.lock(cs)
				r.storages[cs].pinned = true
			}
		}
	}
}
