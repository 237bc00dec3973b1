package dtr

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/remat-dev/remat/graph/dtrlog"
	"github.com/remat-dev/remat/sim"
)

// Baseline is a trace replayed with unlimited memory.
type Baseline struct {
	PeakBytes     int64 `json:"peak_bytes"`     // includes constants
	ComputeNs     int64 `json:"compute_ns"`     // sum of op times
	ConstantBytes int64 `json:"constant_bytes"` // pinned CONSTANT tensors
}

// traceOracle answers next-use queries from a trace's schedule.
type traceOracle struct {
	uses [][]int64 // per tensor: steps at which a top-level op reads it (or pins it)
	pos  []int32
}

func newTraceOracle(tr *dtrlog.Trace) *traceOracle {
	o := &traceOracle{uses: make([][]int64, len(tr.Tensors)), pos: make([]int32, len(tr.Tensors))}
	var step int64
	for _, c := range tr.Cmds {
		switch c.Kind {
		case dtrlog.CmdCompute:
			for _, a := range tr.Ops[c.ID].Args {
				o.uses[a] = append(o.uses[a], step)
			}
			step++
		case dtrlog.CmdPin:
			o.uses[c.ID] = append(o.uses[c.ID], step)
		}
	}
	return o
}

// NextUse implements Oracle.
func (o *traceOracle) NextUse(t TensorID, now int64) int64 {
	if int(t) >= len(o.uses) {
		return math.MaxInt64
	}
	u := o.uses[t]
	p := o.pos[t]
	for int(p) < len(u) && u[p] < now {
		p++
	}
	o.pos[t] = p
	if int(p) == len(u) {
		return math.MaxInt64
	}
	return u[p]
}

// reset rewinds the oracle's cursors for a new replay of its trace.
func (o *traceOracle) reset() { clear(o.pos) }

// replayer replays one trace budget after budget on a recycled runtime (a
// sweep worker's): the runtime's arrays and the next-use oracle are built
// once per worker, not once per budget.
type replayer struct {
	tr     *dtrlog.Trace
	rt     *Runtime
	oracle *traceOracle
}

// run replays the trace with cfg (no host) and returns the runtime, valid
// until the next run.
func (p *replayer) run(ctx context.Context, cfg Config) (*Runtime, error) {
	if p.rt == nil {
		rt, err := New(cfg, nil)
		if err != nil {
			return nil, err
		}
		p.rt = rt
	} else if err := p.rt.recycle(cfg, nil); err != nil {
		return nil, err
	}
	if cfg.Heuristic.NeedsOracle() {
		if p.oracle == nil {
			p.oracle = newTraceOracle(p.tr)
		} else {
			p.oracle.reset()
		}
		p.rt.SetOracle(p.oracle)
	}
	return p.rt, p.rt.replay(ctx, p.tr)
}

// Replay runs a trace on a new runtime with cfg and host (nil for pure
// simulation). It returns the runtime (for its Stats) and the first error
// (sim.ErrOutOfMemory, ErrThrashing or a host error).
func Replay(ctx context.Context, tr *dtrlog.Trace, cfg Config, host Host) (*Runtime, error) {
	if err := checkTrace(tr); err != nil {
		return nil, err
	}
	rt, err := New(cfg, host)
	if err != nil {
		return nil, err
	}
	if cfg.Heuristic.NeedsOracle() {
		rt.SetOracle(newTraceOracle(tr))
	}
	return rt, rt.replay(ctx, tr)
}

// ErrNilTrace is returned by the functions given a nil *dtrlog.Trace.
var ErrNilTrace = errors.New("dtr: nil trace (expected one from dtrlog.Compile)")

// ErrBadTrace is wrapped by the errors about a trace whose ops, tensors or
// commands refer to IDs it does not have (one not built by dtrlog.Compile).
var ErrBadTrace = errors.New("dtr: inconsistent trace")

// checkTrace checks that tr's IDs are in range, so a replay cannot index
// out of bounds.
func checkTrace(tr *dtrlog.Trace) error {
	if tr == nil {
		return ErrNilTrace
	}
	if len(tr.Ops) == 0 {
		return fmt.Errorf("%w: no ops (expected a compiled log with at least one CALL)", ErrBadTrace)
	}
	nt, no := int32(len(tr.Tensors)), int32(len(tr.Ops))
	for i := range tr.Tensors {
		t := &tr.Tensors[i]
		if t.Storage < 0 || t.Storage >= nt || t.Op < 0 || t.Op >= no {
			return fmt.Errorf("%w: tensor %d: storage %d, op %d: expected a tensor < %d and an op < %d", ErrBadTrace, i, t.Storage, t.Op, nt, no)
		}
	}
	for i := range tr.Ops {
		o := &tr.Ops[i]
		if len(o.Sizes) != len(o.Results) || len(o.Aliases) != len(o.Results) {
			return fmt.Errorf("%w: op %d: %d results, %d sizes, %d aliases: expected as many of each", ErrBadTrace, i, len(o.Results), len(o.Sizes), len(o.Aliases))
		}
		for j, a := range o.Args {
			if a < 0 || a >= nt {
				return fmt.Errorf("%w: op %d arg %d: tensor %d: expected 0 <= tensor < %d", ErrBadTrace, i, j, a, nt)
			}
		}
		for j, r := range o.Results {
			if r < 0 || r >= nt {
				return fmt.Errorf("%w: op %d result %d: tensor %d: expected 0 <= tensor < %d", ErrBadTrace, i, j, r, nt)
			}
			if a := o.Aliases[j]; a < -1 || int(a) >= len(o.Args) {
				return fmt.Errorf("%w: op %d result %d: alias %d: expected -1 or an index into its %d args", ErrBadTrace, i, j, a, len(o.Args))
			}
		}
	}
	for i, c := range tr.Cmds {
		lim := nt
		if c.Kind == dtrlog.CmdCompute {
			lim = no
		}
		if c.ID < 0 || c.ID >= lim {
			return fmt.Errorf("%w: command %d (%s): ID %d: expected 0 <= ID < %d", ErrBadTrace, i, c.Kind, c.ID, lim)
		}
	}
	return nil
}

func (rt *Runtime) replay(ctx context.Context, tr *dtrlog.Trace) error {
	if err := checkTrace(tr); err != nil {
		return err
	}
	if rt.cfg.SavedOnly {
		return errors.New("dtr: SavedOnly=true on a DTR log: expected false (a log has no forward and backward passes to tell saved activations by)")
	}
	if len(rt.ops) == 0 {
		// sized once (a recycled runtime has the capacity already)
		if cap(rt.ops) < len(tr.Ops) {
			rt.ops = make([]op, 0, len(tr.Ops))
		}
		if cap(rt.tensors) < len(tr.Tensors) {
			rt.tensors = make([]tensor, 0, len(tr.Tensors))
		}
		if cap(rt.storages) < len(tr.Tensors) {
			rt.storages = make([]storage, 0, len(tr.Tensors))
			rt.walk = make([]walkNode, 0, len(tr.Tensors))
			rt.edges = make([]int32, 0, edgesPerStorage*len(tr.Tensors))
		}
	}
	var outs []Output
	var ins []TensorID
	for i, c := range tr.Cmds {
		// kept regions (parity h_DTR, MSPS) can take milliseconds per
		// command on long logs: check at every one then
		if i&255 == 0 || rt.incOn {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		switch c.Kind {
		case dtrlog.CmdCompute:
			o := &tr.Ops[c.ID]
			ins = ins[:0]
			for _, a := range o.Args {
				ins = append(ins, TensorID(a))
			}
			outs = outs[:0]
			for j := range o.Results {
				outs = append(outs, Output{Bytes: o.Sizes[j], AliasOf: int(o.Aliases[j])})
			}
			id, _, err := rt.Compute(ins, o.Time, outs)
			if err != nil {
				return err
			}
			if int32(id) != c.ID {
				return fmt.Errorf("dtr: replay: op %d got runtime id %d", c.ID, id)
			}
		case dtrlog.CmdGet:
			if err := rt.Get(TensorID(c.ID)); err != nil {
				return err
			}
		case dtrlog.CmdRelease:
			if err := rt.Release(TensorID(c.ID)); err != nil {
				return err
			}
		case dtrlog.CmdPin:
			if err := rt.Pin(TensorID(c.ID)); err != nil {
				return err
			}
		}
	}
	return nil
}

// MeasureBaseline replays tr with unlimited memory.
func MeasureBaseline(tr *dtrlog.Trace) (Baseline, error) {
	b, _, err := measureBaseline(tr)
	return b, err
}

// measureBaseline is MeasureBaseline, also returning its runtime (for a
// sweep worker to recycle).
func measureBaseline(tr *dtrlog.Trace) (Baseline, *Runtime, error) {
	if err := checkTrace(tr); err != nil {
		return Baseline{}, nil, err
	}
	rt, err := New(ParityConfig(HDTRLocal), nil)
	if err != nil {
		return Baseline{}, nil, err
	}
	rt.v1Baseline = true
	if err := rt.replay(context.Background(), tr); err != nil {
		return Baseline{}, nil, fmt.Errorf("dtr baseline: %w", err)
	}
	b := Baseline{PeakBytes: rt.stats.PeakMemory, ComputeNs: rt.stats.ModelCompute}
	for i := range tr.Ops {
		if tr.Ops[i].Constant {
			b.ConstantBytes += tr.Ops[i].TotalSize()
		}
	}
	return b, rt, nil
}

// Status of one budget of a sweep.
const (
	StatusOK     = "ok"
	StatusOOM    = "oom"
	StatusThrash = "thrash"
	// StatusLimit: parity mode with h_DTR or MSPS, whose regions kept as
	// the reference simulator keeps them outgrew their limit at this
	// budget (ErrRegionLimit): no result, neither a fit nor a failure to
	// fit (the default mode walks the regions exactly, in bounded memory).
	StatusLimit = "limit"
)

// RatioResult is one budget of a sweep.
type RatioResult struct {
	Ratio           float64 `json:"ratio"`
	BudgetBytes     int64   `json:"budget_bytes"`
	Status          string  `json:"status"`
	Overhead        float64 `json:"overhead"` // clock / baseline compute (also for failed runs, up to the failure)
	Evictions       int64   `json:"evictions"`
	Remats          int64   `json:"rematerializations"`
	HeuristicEvals  int64   `json:"heuristic_evals"`
	RematComputeNs  int64   `json:"remat_compute_ns"`
	ClockNs         int64   `json:"clock_ns"`
	PeakMemoryBytes int64   `json:"peak_memory_bytes"`
	// ReferenceAsserts (parity mode): see Stats.ReferenceAsserts. Where it
	// is not 0 the reference simulator fails on the log at this budget,
	// and the cell has no reference to agree with.
	ReferenceAsserts int64 `json:"reference_asserts,omitempty"`
}

// SweepResult is the paper's protocol on one trace and heuristic.
type SweepResult struct {
	Heuristic string        `json:"heuristic"`
	Parity    bool          `json:"parity"`
	Baseline  Baseline      `json:"baseline"`
	Bound     LowerBound    `json:"lower_bound"`
	Results   []RatioResult `json:"results"`
	// byDefault: run with Sweep's default configuration (no Base, no
	// Parity), which SweepBest may reuse
	byDefault bool
}

// SweepOptions configure Sweep.
type SweepOptions struct {
	Heuristic Heuristic
	Ratios    []float64 // default 1.0, 0.9, ..., 0.1
	// Parity follows the reference simulator exactly (ParityConfig);
	// otherwise Base (or DefaultConfig with EvicteeMinSize 0 if Base is nil)
	// is used with Heuristic.
	Parity bool
	Base   *Config
	// OverheadLimit: a run thrashes once remat compute exceeds
	// (OverheadLimit-1) x baseline compute. Default 2 (the paper's).
	OverheadLimit float64
	// Workers: budgets replayed at once (0: GOMAXPROCS). The results do
	// not depend on it.
	Workers int
	// Progress, if set, is called once for each ratio when its run ends,
	// from the sweep's goroutines but one call at a time (for a progress
	// display; the order of the calls depends on the workers).
	Progress func()

	// regionLimit (tests): Config.regionLimit of the parity runs
	regionLimit int64
	// rematCap (SweepBest), per ratio when set: a run there stops once
	// its rematerialization compute exceeds rematCap[i] (> 0) if that is
	// below the thrash limit, and is not run at all when rematCap[i] < 0;
	// its result then cannot beat the portfolio's best so far.
	rematCap []int64
}

// DefaultRatios are the paper's budget ratios, largest first.
var DefaultRatios = []float64{1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1}

// Sweep runs the paper's protocol: baseline with unlimited memory; per ratio
// budget = ratio x baseline peak; thrash once remat compute exceeds 1x the
// baseline compute; overhead = clock / baseline compute. A budget whose
// parity-mode regions outgrow their limit has StatusLimit, and the other
// budgets still run. Cancelling ctx returns the ratios finished so far and
// ctx's error.
func Sweep(ctx context.Context, tr *dtrlog.Trace, opt SweepOptions) (*SweepResult, error) {
	if opt.Heuristic == 0 {
		opt.Heuristic = HDTREqClass
	}
	ratios := opt.Ratios
	if len(ratios) == 0 {
		ratios = DefaultRatios
	}
	for i, r := range ratios {
		if !(r > 0) || math.IsInf(r, 0) {
			return nil, fmt.Errorf("dtr sweep: ratio[%d] = %v: expected a positive finite number", i, r)
		}
	}
	lim := opt.OverheadLimit
	if lim == 0 {
		lim = 2
	}
	if lim < 1 {
		return nil, fmt.Errorf("dtr sweep: OverheadLimit %v: expected >= 1", lim)
	}
	if opt.Workers < 0 {
		return nil, fmt.Errorf("dtr sweep: Workers %d: expected >= 0 (0 = GOMAXPROCS)", opt.Workers)
	}
	base, baseRT, err := measureBaseline(tr)
	if err != nil {
		return nil, fmt.Errorf("dtr sweep: %w", err)
	}
	res := &SweepResult{Heuristic: opt.Heuristic.String(), Parity: opt.Parity, Baseline: base, Bound: ComputeLowerBound(tr), byDefault: !opt.Parity && opt.Base == nil}
	if opt.rematCap != nil && len(opt.rematCap) != len(ratios) {
		return nil, fmt.Errorf("dtr sweep: %d remat caps for %d ratios", len(opt.rematCap), len(ratios))
	}
	one := func(p *replayer, i int, ratio float64) (RatioResult, error) {
		var cfg Config
		switch {
		case opt.Parity:
			cfg = ParityConfig(opt.Heuristic)
			cfg.regionLimit = opt.regionLimit
		case opt.Base != nil:
			cfg = *opt.Base
			cfg.Heuristic = opt.Heuristic
		default:
			cfg = DefaultConfig()
			cfg.EvicteeMinSize = 0
			cfg.KeepForRemat = true
			cfg.Heuristic = opt.Heuristic
		}
		cfg.Budget = int64(float64(base.PeakBytes) * ratio)
		cfg.RematLimit = int64(float64(base.ComputeNs) * (lim - 1))
		if cfg.RematLimit == 0 {
			cfg.RematLimit = 1 // a limit of 0 means none; 1 ns keeps "no remat allowed"
		}
		if opt.rematCap != nil {
			switch c := opt.rematCap[i]; {
			case c < 0:
				return RatioResult{Ratio: ratio, BudgetBytes: cfg.Budget, Status: StatusThrash}, nil
			case c > 0 && c < cfg.RematLimit:
				cfg.RematLimit = c
			}
		}
		rt, err := p.run(ctx, cfg)
		rr := RatioResult{Ratio: ratio, BudgetBytes: cfg.Budget, Status: StatusOK}
		if rt != nil {
			st := rt.Stats()
			rr.Overhead = float64(st.Clock) / float64(base.ComputeNs)
			rr.Evictions, rr.Remats, rr.HeuristicEvals = st.Evictions, st.Remats, st.HeuristicEvals
			rr.RematComputeNs, rr.ClockNs, rr.PeakMemoryBytes = st.RematCompute, st.Clock, st.PeakMemory
			rr.ReferenceAsserts = st.ReferenceAsserts
		}
		switch {
		case err == nil:
		case errors.Is(err, sim.ErrOutOfMemory):
			rr.Status = StatusOOM
		case errors.Is(err, ErrThrashing):
			rr.Status = StatusThrash
		case errors.Is(err, ErrRegionLimit):
			rr.Status = StatusLimit
		default:
			return rr, err
		}
		return rr, nil
	}
	// The budgets are independent replays of the same (read-only) trace:
	// they run on up to GOMAXPROCS goroutines, each result in its slot, so
	// the output does not depend on the number of workers or on the order
	// they take the budgets in. They take the lowest first: a lower budget
	// evicts and rematerializes more, and the longest replay started last
	// would leave the other workers idle (on resnet1202's log, h_DTR's
	// budget at 0.1 takes two thirds of the sweep's work).
	order := make([]int, len(ratios))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ratios[a], ratios[b]) })
	out := make([]RatioResult, len(ratios))
	errs := make([]error, len(ratios))
	workers := min(runtime.GOMAXPROCS(0), len(ratios))
	if opt.Workers > 0 {
		workers = min(opt.Workers, len(ratios))
	}
	ps := make([]*replayer, workers)
	for w := range ps {
		ps[w] = &replayer{tr: tr}
	}
	ps[0].rt = baseRT  // done with: its buffers are recycled
	var pmu sync.Mutex // serializes opt.Progress
	forEach(len(ratios), workers, func(k, w int) {
		i := order[k]
		if err := ctx.Err(); err != nil {
			errs[i] = err
			return
		}
		out[i], errs[i] = one(ps[w], i, ratios[i])
		if opt.Progress != nil {
			pmu.Lock()
			opt.Progress()
			pmu.Unlock()
		}
	})
	for i := range ratios {
		if errs[i] != nil {
			return res, errs[i]
		}
		res.Results = append(res.Results, out[i])
	}
	return res, nil
}

// LowerBound is a budget below which no eviction order can run the trace:
// at some op, the pinned storages plus the op's inputs and outputs must all
// be resident at once.
type LowerBound struct {
	Bytes int64 `json:"bytes"`
	// Op is the trace op where the bound is reached, Line its log line.
	Op   int32 `json:"op"`
	Line int   `json:"line"`
	// Source is BoundInputs when the bound counts what producing the op's
	// inputs holds (TightenLowerBound); empty for the op's own working set.
	Source string `json:"source,omitempty"`
}

// ComputeLowerBound returns the largest, over the trace's ops, of pinned
// bytes at that point + the distinct input storages + the op's outputs
// (including the final pinned outputs for the end of the trace). A nil or
// inconsistent trace (see ErrBadTrace) has the zero LowerBound.
func ComputeLowerBound(tr *dtrlog.Trace) LowerBound {
	if checkTrace(tr) != nil {
		return LowerBound{}
	}
	var lb LowerBound
	opBounds(tr, func(op int32, need int64) {
		if need > lb.Bytes {
			lb = LowerBound{Bytes: need, Op: op}
			if op >= 0 {
				lb.Line = tr.Ops[op].Line
			}
		}
	})
	return lb
}

// opBounds walks tr's schedule and calls f with each op's single-op bound
// (pinned bytes then + its distinct unpinned input storages + its outputs)
// as it is computed, and with op -1 and the pinned bytes after each pin.
func opBounds(tr *dtrlog.Trace, f func(op int32, need int64)) {
	var pinned int64
	isPinned := make([]bool, len(tr.Tensors))
	mark := make([]int32, len(tr.Tensors)) // op+1 that counted the storage
	for _, c := range tr.Cmds {
		switch c.Kind {
		case dtrlog.CmdPin:
			s := tr.Tensors[c.ID].Storage
			if !isPinned[s] {
				isPinned[s] = true
				pinned += tr.Tensors[s].StorageSize
			}
			f(-1, pinned)
		case dtrlog.CmdCompute:
			o := &tr.Ops[c.ID]
			need := pinned + o.TotalSize()
			for _, a := range o.Args {
				if s := tr.Tensors[a].Storage; !isPinned[s] && mark[s] != c.ID+1 {
					mark[s] = c.ID + 1
					need += tr.Tensors[s].StorageSize
				}
			}
			f(c.ID, need)
		}
	}
}

// forEach calls f(i, w) once for every i in [0, n), on up to workers
// goroutines (at least one); w < workers numbers the goroutine making the
// call, so f may keep per-goroutine state in a slice indexed by w.
func forEach(n, workers int, f func(i, w int)) {
	workers = max(min(workers, n), 1)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i, w)
			}
		}()
	}
	wg.Wait()
}
