package sim

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/remat-dev/remat/sim/alloc"

	"github.com/remat-dev/remat/graph"
)

// Options configures a Machine. The zero value simulates the ideal allocator
// on a device with unlimited memory and the DefaultDevice cost model, one
// temp workspace, the default convolution algorithms and atomic clean
// policy 0. A settings layer fills these from MXNET_*/MGB_* variables.
type Options struct {
	// Device is the device profile (cost model and capacity). The zero value
	// means DefaultDevice's cost model with unlimited capacity.
	Device Profile
	// Allocator is the allocator model; nil means Ideal. The Machine calls
	// its Reset when it starts. Construct it with the Machine's capacity
	// (see CapacityOf): the Machine also fails any allocation after which
	// the allocator reserves more than the capacity.
	Allocator alloc.Allocator
	// Capacity overrides the device capacity in bytes when > 0; < 0 means
	// unlimited.
	Capacity int64
	// PoolReservePercent is the percentage of device memory kept out of the
	// pool (MXNET_GPU_MEM_POOL_RESERVE), 0..99.
	PoolReservePercent int
	// ReserveAll reserves the whole capacity up front
	// (MGB_CUDA_RESERVE_MEMORY): the reserved peak is the capacity.
	ReserveAll bool
	// AtomicCleanPolicy places memset-initialized outputs (see IsAtomicClean):
	// 0 allocates them all together in one block at graph start, live
	// throughout (one memset); 1 allocates each when its op runs (a memset
	// per output, added to the op's time).
	AtomicCleanPolicy int
	// NumTemp is MXNET_EXEC_NUM_TEMP and WorkerThreads
	// MXNET_GPU_WORKER_NTHREADS: min of the two (at least 1) op workspaces
	// are alive at once (see the workspace model in workspace.go).
	NumTemp       int
	WorkerThreads int
	// CudnnTune is the global convolution algorithm policy
	// (MXNET_CUDNN_AUTOTUNE_DEFAULT); an op's cudnn_tune attribute overrides
	// it.
	CudnnTune CudnnTune
	// ConvWorkspaceLimit is limited_workspace's limit in bytes (0:
	// DefaultConvWorkspaceLimit); an op's "workspace" attribute (MB)
	// overrides it.
	ConvWorkspaceLimit int64
	// ConvLibrary selects the convolution temporaries modelled: cuDNN's
	// algorithm workspaces (ConvCuDNN, the default, with CudnnTune) or
	// PyTorch's CPU convolutions (ConvOneDNN, see CPUConvWorkspace).
	ConvLibrary ConvLibrary
	// CPUThreads is PyTorch's CPU thread count, for ConvOneDNN's
	// per-thread buffers (0: DefaultCPUThreads).
	CPUThreads int
	// CPUISA is the instruction set oneDNN runs with, for ConvOneDNN's
	// channel blocks (the zero value is AVX-512).
	CPUISA CPUISA
	// ConvChannelsLast runs, with ConvOneDNN, the convolutions of a graph
	// that does not record memory formats channels-last (CPU.ChannelsLast).
	ConvChannelsLast bool
	// RNGStateBytes is what a random op keeps for its RNG state when a plan
	// recomputes it (setting recompute.rng_state_bytes): during Replay, the
	// first run of a NonDeterministic op that the plan runs again allocates
	// this many bytes, held until the first Update-phase op or the end of
	// the plan (PyTorch frees the saved state when the backward pass ends).
	// 0 holds nothing.
	RNGStateBytes int64
	// Timeline records per-step memory in Result.Timeline.
	Timeline bool
	// Trace records events for WriteTrace in Result.Events.
	Trace bool
	// LiveAtPeak keeps every block live at the allocated peak in the
	// Result (Result.TopTensorsAtPeak then returns any number of them);
	// without it only the TopTensorsKept largest are kept, which on a
	// million-op graph saves a list of every live block.
	LiveAtPeak bool
	// InPlace enables in-place reuse during Replay
	// (MXNET_EXEC_ENABLE_INPLACE): when the allocator implements
	// InPlaceAllocator, an op's first output may take the storage block of
	// an input that the plan frees right after the op (see InPlaceRuleOf and
	// docs/simulator.md). It has no effect with other allocators or on
	// direct Compute calls. The static allocator must also permit it
	// (StaticOptions.InPlace).
	InPlace bool
}

// AttrAtomicClean marks an op whose outputs are memset-initialized before it
// runs (value "1" or "true").
const AttrAtomicClean = "atomic_clean"

// OpAccumulateGrad is the op type graph.Differentiate emits where a tensor
// receives several partial gradients (grad_accumulate). Those follow
// PyTorch: an out-of-place sum allocated when it runs, not a
// memset-initialized buffer, so they are not atomic clean unless marked with
// AttrAtomicClean (as a GE graph's atomic-add accumulators would be).
const OpAccumulateGrad = graph.OpGradAccumulate

// OpAccumulateGradLegacy ("accumulate_grad") is the op type of gradient
// accumulators that write into a zeroed buffer (atomic adds, as in GE
// graphs): its outputs are always memset-initialized.
const OpAccumulateGradLegacy = "accumulate_grad"

// IsAtomicClean reports whether op's outputs are memset-initialized: its
// type is accumulate_grad (OpAccumulateGradLegacy) or it has attribute
// atomic_clean = 1/true. Only outputs with their own storage (not views) are
// placed by the policy.
func IsAtomicClean(op *graph.Op) bool {
	if op == nil {
		return false
	}
	if op.Type == OpAccumulateGradLegacy {
		return true
	}
	v := op.Attrs[AttrAtomicClean]
	return v == "1" || v == "true"
}

// TensorState is where a tensor is.
type TensorState uint8

// Tensor states.
const (
	// NeverComputed: the producer has not run yet.
	NeverComputed TensorState = iota
	// Resident: on the device.
	Resident
	// Freed: computed, then its storage was released.
	Freed
	// Swapped: copied to host memory, device storage released.
	Swapped
)

var stateNames = [...]string{"never_computed", "resident", "freed", "swapped"}

// String returns the state's name.
func (s TensorState) String() string {
	if s > Swapped {
		return fmt.Sprintf("state(%d)", uint8(s))
	}
	return stateNames[s]
}

// per-tensor flags
const (
	flPinned  uint8 = 1 << iota
	flArena         // storage in the atomic-clean arena (policy 0)
	flView          // has AliasOf
	flAtomic        // memset-initialized output
	flDonated       // freed by in-place reuse at its last reader; the plan's free is a no-op
)

const openEnd = int32(1<<31 - 1)

// liveRec is one allocation's lifetime in steps: [start, end]; end is openEnd
// while live. t is the tensor (-1 for a workspace or the arena, recRNG for
// an op's RNG state).
type liveRec struct {
	t, op      int32
	start, end int32
	bytes      int64
}

// recRNG is the tensor of a live record that holds an op's RNG state
// (Options.RNGStateBytes).
const recRNG = -2

// heldBlock is a freed storage whose memory a hold keeps (graph.AttrHolds)
// until op runs.
type heldBlock struct {
	block alloc.Block
	rec   int32
	op    int32
}

type wsSlot struct {
	block alloc.Block
	rec   int32
}

// Machine simulates one graph on one device: it holds the live tensors, the
// allocator model and the clocks. Plans are replayed on it (Replay), and a
// runtime such as the DTR evictor drives it op by op with Compute, Free,
// SwapOut and SwapIn.
//
// Views (tensors with AliasOf) share their base's storage. A view is
// resident when it has been produced (and not freed itself) and its storage
// is resident. Freeing a view only drops the view; the storage is released
// when its base tensor is freed (then every view of it stops being
// resident). Swaps of a view move its storage.
//
// Inputs, parameters, optimizer state and constants without a producer are
// resident from the start and pinned; persistent outputs (updated parameters
// and state) are pinned when produced. Freeing or swapping out a pinned
// tensor is an error.
//
// A Machine is not safe for concurrent use; several Machines may share one
// (validated) graph.
//
// Only NewMachine makes a usable Machine. On a nil or zero Machine the
// methods that return an error return ErrNoMachine, and the others return
// zero values; so do the per-tensor and per-op queries for an ID the graph
// does not have.
type Machine struct {
	g        *graph.Graph
	d        *graph.Dense // g.Dense()
	opts     Options
	dev      Profile
	devName  string
	cost     CostModel
	alloc    alloc.Allocator
	addr     alloc.AddressAllocator   // alloc, when it places blocks at addresses
	nbr      alloc.NeighbourAllocator // alloc, when it lists blocks next to free memory
	inPlace  alloc.InPlaceAllocator   // alloc, when Options.InPlace and supported
	capacity int64                    // usable bytes; unlimited if not limited
	limited  bool

	// per tensor
	root   []graph.TensorID
	bytes  []int64
	state  []TensorState
	flags  []uint8
	block  []alloc.Block
	rec    []int32
	ready  []int64 // time the device copy is available
	host   []int64 // time the host copy is complete
	evict  []bool  // freed while resident (a recompute then counts an eviction)
	opRuns []int32
	// per op
	opTime  []int64
	opWs    []int64
	opAlgo  []uint8       // index in convAlgoNames
	recomp  []ErrorKind   // 0 when the op may be recomputed
	ipRule  []InPlaceRule // per op, when inPlace != nil
	arenaSz int64
	arenaB  alloc.Block

	ring              []wsSlot
	ringHead, ringLen int

	// Holds (graph.AttrHolds): holdOp[t] is the op until whose first run
	// storage t stays allocated (-1: none); nil when the graph has none.
	// held are the freed storages waiting for their op.
	holdOp []int32
	held   []heldBlock

	// RNG states (Options.RNGStateBytes), when the graph has random ops:
	// rngLeft[op] counts the computes of op the current Replay has still to
	// run; rngHeld are the states allocated so far.
	rngLeft []int32
	rngHeld []wsSlot

	clock, copyClock       int64
	computeNs, recomputeNs int64
	swapNs, stallNs        int64
	initNs                 int64
	computes, recomputes   int
	frees, evictions       int
	inPlaceN               int
	swapOuts, swapIns      int
	swapBytes              int64

	step                 int
	peakA, peakR         int64
	peakAStep, peakRStep int
	peakAOp, peakROp     graph.OpID
	stepMaxA, stepMaxR   int64
	records              []liveRec
	timeline             []TimelinePoint
	events               []Event
	oom                  *OOMInfo
	// oomPending: oom.Largest is still to be filled in (fillOOM) from the
	// state of the failure, which nothing has changed since
	oomPending bool
	strategy   string
	// owner[b]: the tensor block b was last handed to (-1: a workspace),
	// kept when nbr is set; FreeNeighbours checks it against block
	owner []int32
}

// ErrNoMachine is returned by the methods of a Machine that NewMachine did
// not make (a nil or zero Machine: what a failed NewMachine returns).
var ErrNoMachine = errors.New("sim: the Machine was not made by NewMachine (nil or zero Machine)")

// CapacityOf returns the usable capacity opts describe (device or override,
// minus the pool reserve) and whether it is limited.
func CapacityOf(opts Options) (int64, bool) {
	var c int64
	switch {
	case opts.Capacity > 0:
		c = opts.Capacity
	case opts.Capacity < 0:
		return alloc.Unlimited, false
	case opts.Device.Name == "":
		return alloc.Unlimited, false
	default:
		c = opts.Device.Capacity
	}
	if p := opts.PoolReservePercent; p > 0 && p < 100 {
		c -= c / 100 * int64(p)
	}
	return c, true
}

func (o *Options) validate() error {
	if o.Device.Name != "" {
		if err := o.Device.Validate(); err != nil {
			return fmt.Errorf("options: field Device: %w", err)
		}
	}
	switch {
	case o.PoolReservePercent < 0 || o.PoolReservePercent > 99:
		return fmt.Errorf("options: field PoolReservePercent is %d, expected 0..99", o.PoolReservePercent)
	case o.AtomicCleanPolicy != 0 && o.AtomicCleanPolicy != 1:
		return fmt.Errorf("options: field AtomicCleanPolicy is %d, expected 0 or 1", o.AtomicCleanPolicy)
	case o.NumTemp < 0:
		return fmt.Errorf("options: field NumTemp is %d, expected >= 0 (0 means 1)", o.NumTemp)
	case o.WorkerThreads < 0:
		return fmt.Errorf("options: field WorkerThreads is %d, expected >= 0 (0 means 1)", o.WorkerThreads)
	case !o.CudnnTune.Valid():
		return fmt.Errorf("options: field CudnnTune is %d, expected 0 (off), 1 (limited_workspace) or 2 (fastest)", o.CudnnTune)
	case o.ConvWorkspaceLimit < 0:
		return fmt.Errorf("options: field ConvWorkspaceLimit is %d, expected >= 0 (0 means %d)", o.ConvWorkspaceLimit, DefaultConvWorkspaceLimit)
	case !o.ConvLibrary.Valid():
		return fmt.Errorf("options: field ConvLibrary is %d, expected 0 (cudnn) or 1 (onednn)", o.ConvLibrary)
	case o.CPUThreads < 0 || o.CPUThreads > 1<<10:
		return fmt.Errorf("options: field CPUThreads is %d, expected 0..%d (0 means %d)", o.CPUThreads, 1<<10, DefaultCPUThreads)
	case !o.CPUISA.Valid():
		return fmt.Errorf("options: field CPUISA is %d, expected 0 (avx512) or 1 (avx2)", o.CPUISA)
	case o.RNGStateBytes < 0 || o.RNGStateBytes > 1<<30:
		return fmt.Errorf("options: field RNGStateBytes is %d, expected 0..%d", o.RNGStateBytes, 1<<30)
	}
	if _, lim := CapacityOf(*o); o.ReserveAll && !lim {
		return fmt.Errorf("options: field ReserveAll is set but the capacity is unlimited, expected a Device or a Capacity > 0")
	}
	return nil
}

// checkGraph verifies, without modifying g, that every ID the Machine indexes
// is in range, so that an unvalidated graph gives an error instead of a panic.
// It reads the graph's dense index (graph.Dense.Err), which the Machine then
// indexes by: a graph changed since that index was built (without Validate)
// is seen as it was.
func checkGraph(g *graph.Graph) error {
	if g == nil {
		return fmt.Errorf("graph is nil: %w", graph.ErrInvalid)
	}
	if err := g.Dense().Err(); err != nil {
		return fmt.Errorf("graph %q: %w", g.Name, err)
	}
	return nil
}

// checkViewOrder verifies that no view exists before the tensor it aliases:
// a view's producer must not run before its base's producer, and a view
// without a producer (resident from the start) may only alias a tensor
// without a producer. Such a view would otherwise never become resident.
// IDs must be in range (checkGraph).
func checkViewOrder(g *graph.Graph) error {
	i := g.Dense().EarlyView()
	if i == graph.NoTensor {
		return nil
	}
	t := &g.Tensors[i]
	if t.AliasOf < 0 || int(t.AliasOf) >= len(g.Tensors) || (t.Producer != graph.NoOp && g.Op(t.Producer) == nil) || g.Op(g.Tensors[t.AliasOf].Producer) == nil {
		// changed since its dense index was built
		return fmt.Errorf("graph %q: tensors[%d]: view exists before the tensor it aliases: %w", g.Name, i, graph.ErrInvalid)
	}
	base := &g.Tensors[t.AliasOf]
	vp := "has no producer (resident from the start)"
	if t.Producer != graph.NoOp {
		vp = "is produced by op " + opLabel(g, t.Producer)
	}
	return fmt.Errorf("graph %q: tensors[%d]: view #%d %q %s but aliases tensor #%d %q, produced later by op %s: %w",
		g.Name, i, i, t.Name, vp, t.AliasOf, base.Name, opLabel(g, base.Producer), graph.ErrInvalid)
}

func opLabel(g *graph.Graph, op graph.OpID) string {
	o := &g.Ops[op]
	return fmt.Sprintf("#%d %q (%s)", op, o.Name, o.Type)
}

// NewMachine prepares a Machine for g: it resolves op times and workspaces
// (cost model, cudnn_tune), allocates the resident inputs, parameters,
// optimizer state and constants, and (atomic clean policy 0) the
// atomic-clean arena. Running out of memory there is an error wrapping
// ErrOutOfMemory. g should be validated (graph.Validate) beforehand; the
// Machine does not modify it.
func NewMachine(g *graph.Graph, opts Options) (*Machine, error) {
	if err := checkGraph(g); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	m := &Machine{g: g, d: g.Dense(), opts: opts}
	m.dev = opts.Device
	m.devName = opts.Device.Name
	if m.devName == "" {
		m.dev, _ = Device(DefaultDevice)
		m.devName = "unlimited"
	}
	m.cost = CostModel{Device: m.dev}
	m.capacity, m.limited = CapacityOf(opts)
	if opts.Allocator != nil {
		m.alloc = opts.Allocator
	} else {
		c := m.capacity
		if !m.limited {
			c = 0
		}
		m.alloc = alloc.NewIdeal(c)
	}
	m.addr, _ = m.alloc.(alloc.AddressAllocator)
	m.nbr, _ = m.alloc.(alloc.NeighbourAllocator)
	if ip, ok := m.alloc.(alloc.InPlaceAllocator); ok && opts.InPlace {
		m.inPlace = ip
	}
	nt, no := len(g.Tensors), len(g.Ops)
	if r, ok := m.alloc.(alloc.Reserver); ok {
		r.Reserve(nt) // at most one block per storage, plus cache splits the arrays grow for
	}
	m.root = m.d.Root          // read-only, shared with the graph's index
	m.bytes = m.d.StorageBytes // read-only, shared with the graph's index
	m.state = make([]TensorState, nt)
	m.flags = make([]uint8, nt)
	m.block = make([]alloc.Block, nt)
	m.rec = make([]int32, nt)
	m.ready = make([]int64, nt)
	m.evict = make([]bool, nt)
	if i := m.d.AliasCycle(); i != graph.NoTensor {
		return nil, fmt.Errorf("sim: graph %q: tensors[%d]: alias chain forms a cycle: %w", g.Name, i, graph.ErrInvalid)
	}
	for i, r := range m.root {
		if r != graph.TensorID(i) {
			m.flags[i] |= flView
		}
	}
	if err := checkViewOrder(g); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	m.opRuns = make([]int32, no)
	m.opTime = make([]int64, no)
	m.opWs = make([]int64, no)
	m.opAlgo = make([]uint8, no)
	m.recomp = make([]ErrorKind, no)
	if m.inPlace != nil {
		m.ipRule = make([]InPlaceRule, no)
		rule := make([]InPlaceRule, len(m.d.Types)) // per op type
		for k, typ := range m.d.Types {
			rule[k] = InPlaceRuleOf(typ)
		}
		for i, k := range m.d.Type {
			m.ipRule[i] = rule[k]
		}
	}
	limit := opts.ConvWorkspaceLimit
	if limit == 0 {
		limit = DefaultConvWorkspaceLimit
	}
	var candBuf []ConvAlgo
	var convs convMemo
	for i := range g.Ops {
		op := &g.Ops[i]
		t := m.cost.opTime(op, denseDType(m.d, graph.OpID(i)))
		ws := max(op.Workspace, autogradWorkspace(g, op), broadcastCopy(g, op))
		if opts.ConvLibrary == ConvOneDNN {
			ws = max(ws, CPUWorkspace(g, op, CPU{Threads: opts.CPUThreads, ISA: opts.CPUISA, ChannelsLast: opts.ConvChannelsLast}))
		} else if d, ok := convs.of(g, i); ok {
			cands := appendConvAlgos(candBuf[:0], d)
			candBuf = cands
			tune, lim, err := opTune(op, opts.CudnnTune, limit)
			if err != nil {
				return nil, fmt.Errorf("sim: %w", err)
			}
			if a, ok := ChooseConvAlgo(cands, tune, lim); ok {
				launch := m.dev.LaunchOverheadNs
				if op.TimeNs > 0 {
					launch = 0
				}
				t = ceilNs(float64(t-launch)*a.TimeFactor) + launch
				ws = a.Workspace
				m.opAlgo[i] = convAlgoCode(a.Name)
			}
		}
		if IsAtomicClean(op) {
			for _, o := range m.d.Outputs(graph.OpID(i)) {
				if m.flags[o]&flView == 0 {
					m.flags[o] |= flAtomic
					if opts.AtomicCleanPolicy == 1 {
						t = satAdd(t, m.cost.MemsetNs(m.bytes[o]))
					}
				}
			}
		}
		m.opTime[i], m.opWs[i] = t, ws
		if !op.Recomputable() {
			if op.Flags&(graph.Impure|graph.InPlace) != 0 {
				m.recomp[i] = KindRecomputeForbidden
			} else {
				m.recomp[i] = KindRecomputeNondeterministic
			}
		}
	}
	if err := m.readHolds(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if opts.RNGStateBytes > 0 {
		for i := range m.d.Flags {
			if m.d.Flags[i].Has(graph.NonDeterministic) {
				m.rngLeft = make([]int32, no)
				break
			}
		}
	}
	m.ring = make([]wsSlot, TempSlots(opts.NumTemp, opts.WorkerThreads))
	if err := m.Reset(); err != nil {
		return nil, err
	}
	return m, nil
}

// Reset returns the Machine to its initial state (resident inputs,
// parameters, state and constants; nothing computed; clocks at 0), resetting
// the allocator, and keeps its tables' memory so that replays on a reused
// Machine do not allocate.
func (m *Machine) Reset() error {
	if m.missing() {
		return ErrNoMachine
	}
	g := m.g
	m.alloc.Reset()
	for i := range m.state {
		m.state[i] = NeverComputed
		m.flags[i] &^= flPinned | flArena | flDonated
		m.block[i] = -1
		m.rec[i] = -1
		m.ready[i] = 0
		m.evict[i] = false
	}
	clear(m.host) // allocated by the first swap-out
	for i := range m.opRuns {
		m.opRuns[i] = 0
	}
	m.ringHead, m.ringLen = 0, 0
	m.rngHeld = m.rngHeld[:0]
	m.held = m.held[:0]
	m.clock, m.copyClock = 0, 0
	m.computeNs, m.recomputeNs, m.swapNs, m.stallNs, m.initNs = 0, 0, 0, 0, 0
	m.computes, m.recomputes, m.frees, m.evictions, m.swapOuts, m.swapIns = 0, 0, 0, 0, 0, 0
	m.inPlaceN = 0
	m.swapBytes = 0
	m.step = 0
	m.peakA, m.peakR, m.peakAStep, m.peakRStep = 0, 0, -1, -1
	m.peakAOp, m.peakROp = graph.NoOp, graph.NoOp
	m.records = m.records[:0]
	m.timeline = m.timeline[:0]
	m.events = m.events[:0]
	m.oom, m.oomPending = nil, false
	m.arenaSz, m.arenaB = 0, -1
	m.step = -1 // initial allocations belong to no step
	// Resident from the start: tensors without a producer, in ID order.
	for i, p := range m.d.Producer {
		if p != graph.NoOp || m.flags[i]&flView != 0 {
			continue
		}
		m.flags[i] |= flPinned
		b, err := m.allocate(m.bytes[i], int32(i), -1)
		if err != nil {
			return fmt.Errorf("sim: graph %q: resident tensor #%d %q (%d bytes) does not fit: %w", g.Name, i, g.Tensors[i].Name, m.bytes[i], err)
		}
		m.block[i] = b
		m.rec[i] = int32(len(m.records) - 1)
		m.state[i] = Resident
	}
	for i, p := range m.d.Producer {
		if p == graph.NoOp && m.flags[i]&flView != 0 {
			m.flags[i] |= flPinned
			if m.state[m.root[i]] == Resident {
				m.state[i] = Resident
			}
		}
	}
	if m.opts.AtomicCleanPolicy == 0 {
		for i := range m.flags {
			if m.flags[i]&flAtomic != 0 {
				m.flags[i] |= flArena
				m.arenaSz += m.bytes[i]
			}
		}
		if m.arenaSz > 0 {
			b, err := m.allocate(m.arenaSz, -1, -1)
			if err != nil {
				return fmt.Errorf("sim: graph %q: atomic-clean arena (%d bytes) does not fit: %w", g.Name, m.arenaSz, err)
			}
			m.arenaB = b
			m.initNs = m.cost.MemsetNs(m.arenaSz)
			m.clock = m.initNs
			m.computeNs = m.initNs
		}
	}
	m.notePeak(graph.NoOp)
	m.step = 0
	m.stepMaxA, m.stepMaxR = m.alloc.Allocated(), m.reserved()
	return nil
}

// allocate obtains a block from the allocator, enforcing the capacity, and
// opens a live record.
func (m *Machine) allocate(bytes int64, t, op int32) (alloc.Block, error) {
	b, err := m.alloc.Alloc(bytes)
	if err != nil {
		if !errors.Is(err, ErrOutOfMemory) {
			err = fmt.Errorf("%w: %w", ErrOutOfMemory, err)
		}
		return -1, err
	}
	if m.limited && m.alloc.Reserved() > m.capacity {
		r := m.alloc.Reserved()
		m.alloc.Free(b)
		return -1, fmt.Errorf("allocator %s would reserve %d bytes, capacity is %d: %w", m.alloc.Name(), r, m.capacity, ErrOutOfMemory)
	}
	if m.limited && m.alloc.Allocated() > m.capacity {
		a := m.alloc.Allocated()
		m.alloc.Free(b)
		return -1, fmt.Errorf("allocator %s would hold %d bytes, capacity is %d: %w", m.alloc.Name(), a, m.capacity, ErrOutOfMemory)
	}
	m.records = append(m.records, liveRec{t: t, op: op, start: int32(m.step), end: openEnd, bytes: bytes})
	m.setOwner(b, t)
	return b, nil
}

// setOwner notes that block b now holds tensor t (-1: a workspace).
func (m *Machine) setOwner(b alloc.Block, t int32) {
	if m.nbr == nil || b < 0 {
		return
	}
	if int(b) >= len(m.owner) {
		m.owner = append(m.owner, make([]int32, int(b)+1-len(m.owner))...)
		m.owner = m.owner[:cap(m.owner)]
	}
	m.owner[b] = t
}

// release frees a block and closes its live record.
func (m *Machine) release(b alloc.Block, rec int32) {
	m.alloc.Free(b)
	if rec >= 0 {
		m.records[rec].end = int32(m.step)
	}
}

// notePeak updates the peaks and the step's maxima after allocations.
func (m *Machine) notePeak(op graph.OpID) {
	a, r := m.alloc.Allocated(), m.reserved()
	if a > m.stepMaxA {
		m.stepMaxA = a
	}
	if r > m.stepMaxR {
		m.stepMaxR = r
	}
	if a > m.peakA {
		m.peakA, m.peakAOp, m.peakAStep = a, op, m.step
	}
	if r > m.peakR {
		m.peakR, m.peakROp, m.peakRStep = r, op, m.step
	}
}

// endStep records the step's timeline point and advances the step counter.
func (m *Machine) endStep() {
	if m.opts.Timeline {
		m.timeline = append(m.timeline, TimelinePoint{Allocated: m.stepMaxA, Reserved: m.stepMaxR, TimeNs: m.clock})
	}
	if m.opts.Trace {
		m.events = append(m.events, Event{Kind: EvMemory, Step: m.step, ID: -1, StartNs: m.clock,
			Allocated: m.alloc.Allocated(), Reserved: m.reserved()})
	}
	m.step++
	m.oom, m.oomPending = nil, false
	m.stepMaxA, m.stepMaxR = m.alloc.Allocated(), m.reserved()
}

func (m *Machine) reserveRecords(steps int) {
	if m.opts.Timeline && cap(m.timeline)-len(m.timeline) < steps {
		m.timeline = append(make([]TimelinePoint, 0, len(m.timeline)+steps), m.timeline...)
	}
	if cap(m.records)-len(m.records) < steps {
		m.records = append(make([]liveRec, 0, len(m.records)+steps), m.records...)
	}
}

// stepErr builds a StepError for the current step.
func (m *Machine) stepErr(kind ErrorKind, sk StepKind, op graph.OpID, t graph.TensorID, detail string) *StepError {
	e := &StepError{Step: m.step, Kind: kind, StepKind: sk, Op: op, Tensor: t, Detail: detail, Err: ErrInvalidPlan}
	if op >= 0 && int(op) < len(m.g.Ops) {
		e.OpName, e.OpType = m.g.Ops[op].Name, m.g.Ops[op].Type
	} else if op != graph.NoOp {
		e.Op = op
	}
	if t >= 0 && int(t) < len(m.g.Tensors) {
		e.TensorName = m.g.Tensors[t].Name
	}
	return e
}

// oomErr builds the out-of-memory StepError and records OOM info.
func (m *Machine) oomErr(sk StepKind, op graph.OpID, t graph.TensorID, req int64, cause error) *StepError {
	e := m.stepErr(KindOutOfMemory, sk, op, t, "")
	e.Requested = req
	e.Err = cause
	e.Detail = fmt.Sprintf("%d bytes requested", req)
	info := &OOMInfo{Step: m.step, Op: op, Tensor: t, Requested: req,
		Allocated: m.alloc.Allocated(), Reserved: m.reserved(), Capacity: m.Capacity()}
	if op >= 0 {
		info.OpName = m.g.Ops[op].Name
	}
	m.oom, m.oomPending = info, true
	return e
}

// fillOOM fills in the largest live tensors of a pending out-of-memory
// record, from the state of the failure. A failed call leaves the Machine
// unchanged and a successful one ends its step, which drops the record, so
// only the calls that change the state without a step (Pin, Unpin, the
// workspace drain of Replay's error path) and Result call it. A runtime
// that makes room after every failed allocation and retries (DTR on the
// Machine) thus never pays for the scan of the records (topLive).
func (m *Machine) fillOOM() {
	if m.oomPending {
		m.oom.Largest = m.topLive(func(r *liveRec) bool { return r.end == openEnd })
		m.oomPending = false
	}
}

// topLive returns the TopTensorsKept largest records that keep selects, in
// sortLive's order. It builds a LiveTensor only for a record that can enter
// the top, so it needs no list of every live block.
func (m *Machine) topLive(keep func(*liveRec) bool) []LiveTensor {
	top := make([]LiveTensor, 0, TopTensorsKept)
	for i := range m.records {
		r := &m.records[i]
		if !keep(r) {
			continue
		}
		full := len(top) == TopTensorsKept
		if full {
			// Ranks below the last kept entry by bytes, tensor and op
			// (liveLess's keys but the name) without building its names.
			last := &top[len(top)-1]
			if r.bytes < last.Bytes {
				continue
			}
			if r.bytes == last.Bytes {
				t, op := graph.TensorID(r.t), graph.OpID(r.op)
				if r.t >= 0 {
					op = m.d.Producer[r.t]
				}
				if t > last.Tensor || t == last.Tensor && op > last.Op {
					continue
				}
			}
		}
		lt := m.liveTensor(r)
		if full {
			if !liveLess(&lt, &top[len(top)-1]) {
				continue
			}
			top = top[:len(top)-1]
		}
		j := sort.Search(len(top), func(k int) bool { return liveLess(&lt, &top[k]) })
		top = append(top, LiveTensor{})
		copy(top[j+1:], top[j:])
		top[j] = lt
	}
	return top
}

func (m *Machine) liveTensor(r *liveRec) LiveTensor {
	lt := LiveTensor{Tensor: graph.TensorID(r.t), Op: graph.OpID(r.op), Bytes: r.bytes}
	switch {
	case r.t >= 0:
		t := &m.g.Tensors[r.t]
		lt.Name, lt.Kind, lt.Op = t.Name, t.Kind.String(), t.Producer
	case r.t == recRNG:
		lt.Name, lt.Kind = "rng_state:"+m.g.Ops[r.op].Name, "rng_state"
	case r.op >= 0:
		lt.Name, lt.Kind = "workspace:"+m.g.Ops[r.op].Name, "workspace"
	default:
		lt.Name, lt.Kind = "atomic_clean_arena", "arena"
	}
	return lt
}

// inputKind maps a non-resident state to the error kind of reading it.
func inputKind(s TensorState) ErrorKind {
	switch s {
	case Freed:
		return KindUseAfterFree
	case Swapped:
		return KindInputSwappedOut
	}
	return KindInputNotComputed
}

// Compute runs op: the first time, or again (a recompute, allowed only for
// ops that graph.Op.Recomputable accepts). Its inputs must be resident. It
// allocates the outputs that are not resident, then the op's workspace, and
// advances the compute clock by the op's time (after waiting for swap-ins of
// its inputs to finish: stall time). On any error the Machine is unchanged.
// Direct calls never reuse storage in place (that needs the plan's frees;
// see Options.InPlace and Replay).
func (m *Machine) Compute(op graph.OpID) error {
	if m.missing() {
		return ErrNoMachine
	}
	return m.compute(op, nil)
}

// inPlaceFresh reports whether an in-place op may run again: it is not
// impure, not random without saved RNG state, and every storage it writes
// was computed again since its last run, so that it rewrites fresh values as
// the first time did (a recomputed conv followed by its ReLU_).
func (m *Machine) inPlaceFresh(op graph.OpID) bool {
	o := &m.g.Ops[op]
	if o.Flags.Has(graph.Impure) || !o.Flags.Has(graph.InPlace) {
		return false
	}
	if o.Flags.Has(graph.NonDeterministic) {
		if v := o.Attrs[graph.AttrRNGSaved]; v != "1" && v != "true" {
			return false
		}
	}
	wrote := false
	for _, t := range m.d.Outputs(op) {
		r := m.root[t]
		if r == t {
			continue
		}
		p := m.d.Producer[r]
		if p == graph.NoOp || m.opRuns[p] <= m.opRuns[op] {
			return false
		}
		wrote = true
	}
	return wrote
}

// compute runs op; next holds the plan steps after this one (Replay), which
// lets the first output take an input's storage in place when the plan frees
// that input right after the op (see inPlaceDonor).
func (m *Machine) compute(op graph.OpID, next []Step) error {
	g := m.g
	if op < 0 || int(op) >= len(g.Ops) {
		return m.stepErr(KindInvalidStep, Compute, op, graph.NoTensor, fmt.Sprintf("op %d is not defined (graph has %d ops)", op, len(g.Ops)))
	}
	ins, outs := m.d.Inputs(op), m.d.Outputs(op)
	re := m.opRuns[op] > 0
	if re && m.recomp[op] != 0 && !m.inPlaceFresh(op) {
		return m.stepErr(m.recomp[op], Compute, op, graph.NoTensor, "")
	}
	start := m.clock
	for _, in := range ins {
		s := m.state[in]
		r := m.root[in]
		if s == Resident && r != in {
			s = m.state[r]
		}
		if s != Resident {
			return m.stepErr(inputKind(s), Compute, op, in, "")
		}
		if m.ready[r] > start {
			start = m.ready[r]
		}
	}
	// Views among the outputs need their storage: resident already, or a
	// non-view output of this op.
	for _, out := range outs {
		if m.flags[out]&flView == 0 {
			continue
		}
		r := m.root[out]
		if m.state[r] != Resident && g.Tensors[r].Producer != op {
			return m.stepErr(inputKind(m.state[r]), Compute, op, out, fmt.Sprintf("the storage of this view, tensor #%d %q, is not resident", r, g.Tensors[r].Name))
		}
	}
	nrec := len(m.records)
	m.stepMaxA, m.stepMaxR = m.alloc.Allocated(), m.reserved()
	donor := graph.NoTensor
	for i, out := range outs {
		f := m.flags[out]
		if f&(flView|flArena) != 0 || m.state[out] == Resident {
			continue
		}
		if m.inPlace != nil && i == 0 && next != nil && f&flAtomic == 0 && m.ipRule[op] != InPlaceNone {
			if in := m.inPlaceDonor(op, m.ipRule[op], out, next); in != graph.NoTensor {
				if b, ok := m.inPlace.AllocInPlace(m.block[in], m.bytes[out]); ok {
					m.block[out] = b
					m.setOwner(b, int32(out))
					donor = in
					m.records = append(m.records, liveRec{t: int32(out), op: int32(op), start: int32(m.step), end: openEnd, bytes: m.bytes[out]})
					continue
				}
			}
		}
		b, err := m.allocate(m.bytes[out], int32(out), int32(op))
		if err != nil {
			m.rollback(outs, i, nrec, donor)
			return m.oomErr(Compute, op, out, m.bytes[out], err)
		}
		m.block[out] = b
	}
	var wsb alloc.Block = -1
	wsr := int32(-1)
	if ws := m.opWs[op]; ws > 0 {
		b, err := m.allocate(ws, -1, int32(op))
		if err != nil {
			m.rollback(outs, len(outs), nrec, donor)
			return m.oomErr(Compute, op, graph.NoTensor, ws, fmt.Errorf("workspace: %w", err))
		}
		wsb, wsr = b, int32(len(m.records)-1)
	}
	m.notePeak(op)
	// Commit.
	rec := int32(nrec)
	for _, out := range outs {
		f := m.flags[out]
		if f&flView != 0 {
			m.state[out] = Resident
			continue
		}
		if m.state[out] == Resident {
			continue
		}
		if m.evict[out] {
			m.evictions++
			m.evict[out] = false
		}
		if f&flArena == 0 {
			m.rec[out] = rec
			rec++
		}
		m.state[out] = Resident
		m.flags[out] &^= flDonated
		if m.d.Kind[out].Persistent() {
			m.flags[out] |= flPinned
		}
	}
	if donor != graph.NoTensor {
		m.donate(donor)
	}
	t := m.opTime[op]
	m.stallNs = satAdd(m.stallNs, start-m.clock)
	if m.opts.Trace {
		k := EvCompute
		if re {
			k = EvRecompute
		}
		m.events = append(m.events, Event{Kind: k, Step: m.step, ID: int32(op), StartNs: start, DurNs: t},
			Event{Kind: EvMemory, Step: m.step, ID: int32(op), StartNs: start, Allocated: m.stepMaxA, Reserved: m.stepMaxR})
	}
	m.clock = satAdd(start, t)
	for _, out := range outs {
		m.ready[m.root[out]] = max(m.ready[m.root[out]], m.clock)
	}
	if re {
		m.recomputeNs = satAdd(m.recomputeNs, t)
		m.recomputes++
	} else {
		m.computeNs = satAdd(m.computeNs, t)
		m.computes++
	}
	m.opRuns[op]++
	if len(m.held) > 0 {
		m.releaseHeld(int32(op))
	}
	m.pushWorkspace(wsb, wsr)
	m.endStep()
	return nil
}

// readHolds reads the graph's holds (graph.AttrHolds): holdOp[r] is the
// latest op holding storage r.
func (m *Machine) readHolds() error {
	g := m.g
	for _, i := range m.d.Holders {
		v, ok := g.Ops[i].Attrs[graph.AttrHolds]
		if !ok {
			continue
		}
		if m.holdOp == nil {
			m.holdOp = make([]int32, len(g.Tensors))
			for j := range m.holdOp {
				m.holdOp[j] = -1
			}
		}
		for _, f := range strings.Split(v, ",") {
			id, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || id < 0 || id >= len(g.Tensors) {
				return fmt.Errorf("op %d %q: attribute %s=%q: %q is not a tensor ID (expected 0..%d)", i, g.Ops[i].Name, graph.AttrHolds, v, f, len(g.Tensors)-1)
			}
			r := m.root[id]
			m.holdOp[r] = max(m.holdOp[r], int32(i))
		}
	}
	return nil
}

// holdUntil returns the op a hold keeps storage t for (-1: none, or that
// op has run).
func (m *Machine) holdUntil(t graph.TensorID) int32 {
	if m.holdOp == nil {
		return -1
	}
	h := m.holdOp[t]
	if h < 0 || m.opRuns[h] > 0 {
		return -1
	}
	return h
}

// releaseHeld releases the freed storages held until op (or every one when
// op is -1).
func (m *Machine) releaseHeld(op int32) {
	k := 0
	for _, b := range m.held {
		if op >= 0 && b.op != op {
			m.held[k] = b
			k++
			continue
		}
		m.release(b.block, b.rec)
	}
	m.held = m.held[:k]
}

// rollback undoes the allocations of outputs[:n] made by a failing Compute.
// An output that took donor's block in place gives it back: the block stays
// live with the same bytes, so the allocator needs no call (only a Static's
// in-place counter keeps the attempt).
func (m *Machine) rollback(outs []graph.TensorID, n, nrec int, donor graph.TensorID) {
	for i, out := range outs[:n] {
		if m.flags[out]&(flView|flArena) != 0 || m.state[out] == Resident {
			continue
		}
		if i == 0 && donor != graph.NoTensor {
			m.block[out] = -1
			continue
		}
		m.alloc.Free(m.block[out])
		m.block[out] = -1
	}
	m.records = m.records[:nrec]
}

// pushWorkspace puts an op's workspace into the ring of live temp spaces and
// releases the oldest when more than the ring's size are alive.
// With k slots, the workspaces of the last k ops (this one included) were
// alive while this op ran; afterwards the k-1 newest stay.
func (m *Machine) pushWorkspace(b alloc.Block, rec int32) {
	n := len(m.ring)
	m.ring[(m.ringHead+m.ringLen)%n] = wsSlot{block: b, rec: rec}
	m.ringLen++
	for m.ringLen > n-1 {
		old := m.ring[m.ringHead]
		if old.block >= 0 {
			m.release(old.block, old.rec)
		}
		m.ringHead = (m.ringHead + 1) % n
		m.ringLen--
	}
}

// drainWorkspaces releases every workspace still in the ring.
func (m *Machine) drainWorkspaces() {
	m.fillOOM()
	n := len(m.ring)
	for ; m.ringLen > 0; m.ringLen-- {
		s := m.ring[m.ringHead]
		if s.block >= 0 {
			m.release(s.block, s.rec)
		}
		m.ringHead = (m.ringHead + 1) % n
	}
}

func (m *Machine) tensorOK(sk StepKind, t graph.TensorID) error {
	if t < 0 || int(t) >= len(m.g.Tensors) {
		return m.stepErr(KindInvalidStep, sk, graph.NoOp, t, fmt.Sprintf("tensor %d is not defined (graph has %d tensors)", t, len(m.g.Tensors)))
	}
	return nil
}

// Free releases tensor t. Freeing a view drops only the view; freeing a base
// tensor releases the storage it shares with its views. Freeing a swapped-out
// tensor discards its host copy. Freeing a pinned tensor, or one that is not
// live (never computed, already freed), is an error.
func (m *Machine) Free(t graph.TensorID) error {
	if m.missing() {
		return ErrNoMachine
	}
	return m.free(t)
}

// free is Free on a Machine made by NewMachine (Replay checks that once).
func (m *Machine) free(t graph.TensorID) error {
	if err := m.tensorOK(Free, t); err != nil {
		return err
	}
	if m.flags[t]&flPinned != 0 {
		return m.stepErr(KindFreePinned, Free, graph.NoOp, t, "")
	}
	s := m.state[t]
	if s == Freed && m.flags[t]&flDonated != 0 {
		// Its storage went to an output of its last reader (in-place
		// reuse): the plan's free is valid and releases nothing.
		m.flags[t] &^= flDonated
		m.frees++
		m.endStep()
		return nil
	}
	if s != Resident && s != Swapped {
		return m.stepErr(KindFreeDead, Free, graph.NoOp, t, "state "+s.String())
	}
	if m.flags[t]&flView == 0 {
		if s == Resident && m.flags[t]&flArena == 0 {
			if h := m.holdUntil(t); h >= 0 {
				// the framework still holds it: the memory goes when op h
				// has run
				m.held = append(m.held, heldBlock{block: m.block[t], rec: m.rec[t], op: h})
			} else {
				m.release(m.block[t], m.rec[t])
			}
			m.block[t], m.rec[t] = -1, -1
		}
		m.evict[t] = true
	}
	m.state[t] = Freed
	m.frees++
	m.endStep()
	return nil
}

// SwapOut copies t's storage to the host on the copy stream and releases its
// device memory (at this step: the model does not delay reuse until the copy
// ends). The copy starts when the copy stream is free, the tensor is ready
// and the compute stream has reached this step.
func (m *Machine) SwapOut(t graph.TensorID) error {
	if m.missing() {
		return ErrNoMachine
	}
	return m.swapOut(t)
}

func (m *Machine) swapOut(t graph.TensorID) error {
	if err := m.tensorOK(SwapOut, t); err != nil {
		return err
	}
	r := m.root[t]
	if m.flags[r]&flPinned != 0 || m.flags[t]&flPinned != 0 {
		return m.stepErr(KindSwapPinned, SwapOut, graph.NoOp, t, "")
	}
	if m.state[r] != Resident || m.state[t] != Resident {
		s := m.state[r]
		if m.state[t] != Resident {
			s = m.state[t]
		}
		return m.stepErr(KindSwapOutNotResident, SwapOut, graph.NoOp, t, "state "+s.String())
	}
	d := m.cost.SwapNs(m.bytes[r])
	start := max(m.copyClock, m.ready[r], m.clock)
	if m.opts.Trace {
		m.events = append(m.events, Event{Kind: EvSwapOut, Step: m.step, ID: int32(r), StartNs: start, DurNs: d})
	}
	m.copyClock = satAdd(start, d)
	if m.host == nil {
		m.host = make([]int64, len(m.state))
	}
	m.host[r] = m.copyClock
	m.swapNs = satAdd(m.swapNs, d)
	if m.flags[r]&flArena == 0 {
		m.release(m.block[r], m.rec[r])
		m.block[r], m.rec[r] = -1, -1
	}
	m.state[r] = Swapped
	m.swapOuts++
	m.swapBytes = satAdd(m.swapBytes, m.bytes[r])
	m.endStep()
	return nil
}

// SwapIn allocates device memory for swapped-out t and copies it back on the
// copy stream, starting when the copy stream is free, the swap-out has
// finished and the compute stream has reached this step. An op reading t
// waits for the copy to end (stall time).
func (m *Machine) SwapIn(t graph.TensorID) error {
	if m.missing() {
		return ErrNoMachine
	}
	return m.swapIn(t)
}

func (m *Machine) swapIn(t graph.TensorID) error {
	if err := m.tensorOK(SwapIn, t); err != nil {
		return err
	}
	r := m.root[t]
	if m.state[r] != Swapped {
		return m.stepErr(KindSwapInNotSwapped, SwapIn, graph.NoOp, t, "state "+m.state[r].String())
	}
	if m.flags[r]&flArena == 0 {
		b, err := m.allocate(m.bytes[r], int32(r), int32(m.g.Tensors[r].Producer))
		if err != nil {
			return m.oomErr(SwapIn, graph.NoOp, t, m.bytes[r], err)
		}
		m.block[r], m.rec[r] = b, int32(len(m.records)-1)
	}
	m.notePeak(graph.NoOp)
	d := m.cost.SwapNs(m.bytes[r])
	start := max(m.copyClock, m.host[r], m.clock)
	if m.opts.Trace {
		m.events = append(m.events, Event{Kind: EvSwapIn, Step: m.step, ID: int32(r), StartNs: start, DurNs: d})
	}
	m.copyClock = satAdd(start, d)
	m.ready[r] = m.copyClock
	m.swapNs = satAdd(m.swapNs, d)
	m.state[r] = Resident
	m.swapIns++
	m.swapBytes = satAdd(m.swapBytes, m.bytes[r])
	m.endStep()
	return nil
}

// Resident reports whether t is on the device (for a view: produced, not
// dropped, and its storage resident).
func (m *Machine) Resident(t graph.TensorID) bool {
	if !m.hasTensor(t) || m.state[t] != Resident {
		return false
	}
	return m.state[m.root[t]] == Resident
}

// State returns where t is. For a view that has been produced and not
// dropped, it is its storage's state.
func (m *Machine) State(t graph.TensorID) TensorState {
	if !m.hasTensor(t) {
		return NeverComputed
	}
	s := m.state[t]
	if s == Resident && m.root[t] != t {
		return m.state[m.root[t]]
	}
	return s
}

// Pin marks t (and, for a view, its storage) so that it can be neither freed
// nor swapped out.
func (m *Machine) Pin(t graph.TensorID) {
	if !m.hasTensor(t) {
		return
	}
	m.fillOOM()
	m.flags[t] |= flPinned
	m.flags[m.root[t]] |= flPinned
}

// Unpin clears t's pin (not its storage's).
func (m *Machine) Unpin(t graph.TensorID) {
	if m.hasTensor(t) {
		m.fillOOM()
		m.flags[t] &^= flPinned
	}
}

// Pinned reports whether t is pinned.
func (m *Machine) Pinned(t graph.TensorID) bool { return m.hasTensor(t) && m.flags[t]&flPinned != 0 }

// Storage returns the tensor whose storage t uses (t itself unless a view;
// t as well for an ID the graph does not have).
func (m *Machine) Storage(t graph.TensorID) graph.TensorID {
	if !m.hasTensor(t) {
		return t
	}
	return m.root[t]
}

// Bytes returns the storage bytes t adds (0 for a view).
func (m *Machine) Bytes(t graph.TensorID) int64 {
	if !m.hasTensor(t) {
		return 0
	}
	return m.bytes[t]
}

// Runs returns how many times op has been computed.
func (m *Machine) Runs(op graph.OpID) int {
	if !m.hasOp(op) {
		return 0
	}
	return int(m.opRuns[op])
}

// Graph returns the simulated graph.
func (m *Machine) Graph() *graph.Graph {
	if m == nil {
		return nil
	}
	return m.g
}

// Options returns the Machine's options.
func (m *Machine) Options() Options {
	if m == nil {
		return Options{}
	}
	return m.opts
}

// Allocated returns the bytes in live blocks (as the allocator accounts them).
func (m *Machine) Allocated() int64 {
	if m.missing() {
		return 0
	}
	return m.alloc.Allocated()
}

// Reserved returns the bytes held from the device: the allocator's reserved
// bytes, or the whole capacity with ReserveAll.
func (m *Machine) Reserved() int64 {
	if m.missing() {
		return 0
	}
	return m.reserved()
}

// reserved is Reserved on a Machine made by NewMachine (the hot path: small
// enough to inline).
func (m *Machine) reserved() int64 {
	if m.opts.ReserveAll {
		return m.capacity
	}
	return m.alloc.Reserved()
}

// Capacity returns the usable capacity in bytes (0 when unlimited).
func (m *Machine) Capacity() int64 {
	if m == nil || !m.limited {
		return 0
	}
	return m.capacity
}

// Clock returns the compute stream's clock in ns.
func (m *Machine) Clock() int64 {
	if m == nil {
		return 0
	}
	return m.clock
}

// Step returns the number of steps executed since the Machine was created or
// reset.
func (m *Machine) Step() int {
	if m == nil {
		return 0
	}
	return m.step
}

// OpTime returns op's time in ns under this Machine's cost model and
// convolution algorithm choice.
func (m *Machine) OpTime(op graph.OpID) int64 {
	if !m.hasOp(op) {
		return 0
	}
	return m.opTime[op]
}

// OpWorkspace returns op's workspace in bytes after the algorithm choice.
func (m *Machine) OpWorkspace(op graph.OpID) int64 {
	if !m.hasOp(op) {
		return 0
	}
	return m.opWs[op]
}

// ConvAlgo returns the convolution algorithm chosen for op ("" when the op
// is not a convolution or cudnn_tune is off for it).
func (m *Machine) ConvAlgo(op graph.OpID) string {
	if !m.hasOp(op) {
		return ""
	}
	return convAlgoNames[m.opAlgo[op]]
}

// SwapTime returns the time to move t's storage over the host link.
func (m *Machine) SwapTime(t graph.TensorID) int64 {
	if !m.hasTensor(t) {
		return 0
	}
	return m.cost.SwapNs(m.bytes[m.root[t]])
}

// BlockBytes returns the size of the block that holds t's storage while it
// is resident, as the allocator counts it in Allocated (with the caching
// model it can exceed the rounded request: a remainder too small to split
// off stays with the block); 0 when the storage is not resident, and -1
// when the allocator does not report block sizes (it is not an
// alloc.AddressAllocator).
func (m *Machine) BlockBytes(t graph.TensorID) int64 {
	if !m.hasTensor(t) {
		return 0
	}
	r := m.root[t]
	b := m.block[r]
	if m.state[r] != Resident || b < 0 {
		return 0
	}
	a, ok := m.alloc.(alloc.AddressAllocator)
	if !ok {
		return -1
	}
	return a.Size(b)
}

// Allocator returns the allocator model.
func (m *Machine) Allocator() alloc.Allocator {
	if m == nil {
		return nil
	}
	return m.alloc
}

// Device returns the device profile used by the cost model.
func (m *Machine) Device() Profile {
	if m == nil {
		return Profile{}
	}
	return m.dev
}

// missing reports whether m was not made by NewMachine (nil or zero).
func (m *Machine) missing() bool { return m == nil || m.g == nil }

// hasTensor reports whether t is a tensor of m's graph (false on a nil or
// zero Machine).
func (m *Machine) hasTensor(t graph.TensorID) bool {
	return m != nil && t >= 0 && int(t) < len(m.state) && int(t) < len(m.root)
}

// hasOp reports whether op is an op of m's graph (false on a nil or zero
// Machine).
func (m *Machine) hasOp(op graph.OpID) bool {
	return m != nil && op >= 0 && int(op) < len(m.opRuns) && int(op) < len(m.opTime)
}

// Result summarizes the run so far. It does not change the Machine. On a nil
// or zero Machine it is an empty Result.
func (m *Machine) Result() *Result {
	if m.missing() {
		return &Result{TopAtPeak: []LiveTensor{}}
	}
	m.fillOOM()
	res := &Result{
		Graph: m.g.Name, Strategy: m.strategy, Device: m.devName, Allocator: m.alloc.Name(),
		Capacity: m.Capacity(), Steps: m.step,
		PeakAllocated: m.peakA, PeakAllocatedStep: m.peakAStep, PeakAllocatedOp: m.peakAOp,
		PeakReserved: m.peakR, PeakReservedStep: m.peakRStep, PeakReservedOp: m.peakROp,
		ComputeNs: m.computeNs, RecomputeNs: m.recomputeNs, SwapNs: m.swapNs, StallNs: m.stallNs,
		Computes: m.computes, Recomputes: m.recomputes, Frees: m.frees, Evictions: m.evictions,
		SwapOuts: m.swapOuts, SwapIns: m.swapIns, SwapBytes: m.swapBytes, InPlace: m.inPlaceN,
	}
	if m.copyClock > m.clock {
		res.StallNs = satAdd(res.StallNs, m.copyClock-m.clock)
	}
	res.TotalNs = satAdd(satAdd(res.ComputeNs, res.RecomputeNs), res.StallNs)
	ps := int32(m.peakAStep)
	atPeak := func(r *liveRec) bool { return r.start <= ps && (r.end == openEnd || r.end >= ps) }
	if m.opts.LiveAtPeak {
		nlive := 0 // count first: a million live blocks are not grown by doubling
		for i := range m.records {
			if atPeak(&m.records[i]) {
				nlive++
			}
		}
		live := make([]LiveTensor, 0, nlive)
		for i := range m.records {
			if r := &m.records[i]; atPeak(r) {
				live = append(live, m.liveTensor(r))
			}
		}
		sortLive(live)
		res.liveAtPeak = live
		res.TopAtPeak = append([]LiveTensor{}, live[:min(len(live), TopTensorsKept)]...)
	} else {
		res.TopAtPeak = m.topLive(atPeak)
	}
	if m.oom != nil {
		o := *m.oom
		o.Largest = append([]LiveTensor(nil), o.Largest...)
		res.OOM = &o
	}
	if m.opts.Timeline {
		res.Timeline = append([]TimelinePoint(nil), m.timeline...)
	}
	if m.opts.Trace {
		res.Events = append([]Event(nil), m.events...)
	}
	return res
}
