package sublinear

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// Strategy names of the plans this file's searches emit.
const (
	StrategySublinear       = "sublinear"        // threshold presets (MegEngine's defaults)
	StrategySublinearGA     = "sublinear-ga"     // presets + genetic search
	StrategySublinearBudget = "sublinear-budget" // least recompute time within a memory budget
	StrategySublinearExact  = "sublinear-exact"  // exhaustive over split-point sets (tiny graphs)
)

// MegEngine's defaults (SublinearMemoryConfig).
const (
	DefaultThreshNrTry = 10   // thresh_nr_try, MGB_SUBLINEAR_MEMORY_THRESH_NR_TRY
	DefaultPoolSize    = 20   // genetic_pool_size, MGB_SUBLINEAR_MEMORY_GENETIC_POOL_SIZE
	DefaultSearchSeed  = 2333 // the seed of MegEngine's genetic search RNG
	// DefaultGAIters is the number of generations Genetic and
	// WithinBudget run when SearchOptions.GeneticIters is 0 (the value
	// MegEngine's documentation uses as its example).
	DefaultGAIters = 20
)

// SearchOptions configures MegEngine's sublinear checkpoint search. Start
// from DefaultSearchOptions: the zero value turns the linear presets off.
// A settings layer fills the fields from MGB_SUBLINEAR_MEMORY_*.
type SearchOptions struct {
	// ThreshNrTry is the number of linear threshold presets and of presets
	// around the best threshold (thresh_nr_try; >= 0).
	ThreshNrTry int
	// GeneticIters is the number of generations of the genetic search
	// (genetic_nr_iter; 0 turns it off; >= 0).
	GeneticIters int
	// PoolSize is the number of records selected per generation
	// (genetic_pool_size; > 0 when the genetic search runs).
	PoolSize int
	// Workers evaluates genomes concurrently (num_worker; 0 means
	// max(1, NumCPU/2)). Results do not depend on it.
	Workers int
	// LowerBound is lb_memory in bytes: when the best peak is below it,
	// duplicated ops are turned back into split points while the peak stays
	// within it, trading spare memory for less recomputation. 0 turns it off.
	LowerBound int64
	// Budget, when > 0, switches to budget mode: minimize recompute time
	// subject to peak <= Budget (bytes).
	Budget int64
	// Seed seeds the genetic search.
	Seed uint64
	// OpTime gives the time in ns charged when an op is duplicated. Nil
	// uses sim's cost model for Sim's device (the op's TimeNs when set, else
	// a roofline on its FLOPs and bytes plus launch overhead): the time sim
	// reports for the recompute.
	OpTime func(op graph.OpID) int64
	// ForwardOnly restricts recomputation to what a plan applied to an
	// eager PyTorch step can carry out (setting recompute.forward_only):
	// only forward ops are duplicated, and a var is discarded only after
	// its last access by a forward op (its next access is in the backward
	// pass). MegEngine's pass (false) duplicates any op of the sequence.
	ForwardOnly bool
	// noPlanMemo (benchmarks): score remembers no plan, so every
	// evaluation replays its plan
	noPlanMemo bool
	// Sim is the memory model the fitness mirrors: its op workspaces
	// (convolution algorithm choice), atomic clean policy and number of
	// live workspaces. Capacity and allocator are ignored: the fitness is
	// the ideal allocator's peak. The zero value is sim's default.
	Sim sim.Options
}

// DefaultSearchOptions returns MegEngine's defaults: 10 threshold tries,
// genetic search off, pool 20, NumCPU/2 workers, no lower bound, seed 2333.
func DefaultSearchOptions() SearchOptions {
	return SearchOptions{
		ThreshNrTry: DefaultThreshNrTry,
		PoolSize:    DefaultPoolSize,
		Workers:     defaultSearchWorkers(),
		Seed:        DefaultSearchSeed,
	}
}

func defaultSearchWorkers() int { return max(1, runtime.NumCPU()/2) }

func (o SearchOptions) validate() error {
	if o.ThreshNrTry < 0 {
		return fmt.Errorf("sublinear: ThreshNrTry is %d, expected >= 0", o.ThreshNrTry)
	}
	if o.GeneticIters < 0 {
		return fmt.Errorf("sublinear: GeneticIters is %d, expected >= 0", o.GeneticIters)
	}
	if o.GeneticIters > 0 && o.PoolSize <= 0 {
		return fmt.Errorf("sublinear: PoolSize is %d, expected > 0 when GeneticIters (%d) > 0", o.PoolSize, o.GeneticIters)
	}
	if o.PoolSize < 0 {
		return fmt.Errorf("sublinear: PoolSize is %d, expected >= 0", o.PoolSize)
	}
	if o.Workers < 0 {
		return fmt.Errorf("sublinear: Workers is %d, expected >= 0 (0 = NumCPU/2)", o.Workers)
	}
	if o.LowerBound < 0 {
		return fmt.Errorf("sublinear: LowerBound is %d bytes, expected >= 0", o.LowerBound)
	}
	if o.Budget < 0 {
		return fmt.Errorf("sublinear: Budget is %d bytes, expected >= 0 (0 = minimize peak)", o.Budget)
	}
	return nil
}

// Genome is a set of split points: sorted operator indexes at which blocks
// end. The last operator is always a split point.
type Genome []graph.OpID

// SearchReport describes the plan a search returned.
type SearchReport struct {
	Strategy string
	// Peak is the plan's peak bytes under the ideal allocator, resident
	// external tensors included (what sim reports for the plan).
	Peak int64
	// BaselinePeak is the peak of the unmodified sequence.
	BaselinePeak int64
	// RecomputeNs is the summed time of the duplicated ops.
	RecomputeNs int64
	// SplitPoints is the genome of the plan.
	SplitPoints Genome
	// Duplicated lists the recomputed ops in plan order.
	Duplicated []graph.OpID
	// Evaluations counts the genomes evaluated.
	Evaluations int
	// Threshold is the block-size threshold whose split points won, or -1
	// if the winner came from the genetic search, the refine step or the
	// exact solver.
	Threshold int64
	// Budget is the memory budget in budget mode (0 otherwise); Feasible
	// says whether Peak <= Budget.
	Budget   int64
	Feasible bool
	// Cancelled is set when the context ended the search early; the plan is
	// the best found until then.
	Cancelled bool
}

// InfeasibleBudgetError reports that no plan found fits the memory budget.
// It wraps sim.ErrOutOfMemory.
type InfeasibleBudgetError struct {
	Budget  int64 // bytes asked for
	MinPeak int64 // smallest peak found
	// LowerBound is a peak no recompute plan can go below: the storages
	// resident throughout (inputs, parameters, optimizer state, the
	// atomic-clean arena), those held to the end of the step once created
	// (a parameter's final gradient, persistent outputs), and the largest
	// working set of one op (its inputs, outputs and workspace) on top of
	// what is held at that point.
	LowerBound int64
	// Resident and Held are the first two parts of LowerBound: bytes
	// resident from the start, and bytes held to the end of the step.
	Resident, Held int64
}

func (e *InfeasibleBudgetError) Error() string {
	msg := fmt.Sprintf("sublinear: budget %d bytes is infeasible: the smallest peak found is %d bytes", e.Budget, e.MinPeak)
	if e.LowerBound > e.Budget {
		msg += fmt.Sprintf("; no plan can go below %d bytes (%d resident throughout: inputs, parameters, optimizer state; %d held to the end of the step: parameter gradients and persistent outputs; plus the largest op's working set)",
			e.LowerBound, e.Resident, e.Held)
	}
	return msg
}

// Unwrap lets errors.Is match sim.ErrOutOfMemory.
func (e *InfeasibleBudgetError) Unwrap() error { return sim.ErrOutOfMemory }

// mgeRecord is an evaluated genome.
type mgeRecord struct {
	s []int32
	r mgeResult
}

// mgeSearch is one run of the search: the problem, the evaluators of the
// workers and the best record so far.
type mgeSearch struct {
	ctx    context.Context
	p      *mgeProblem
	opts   SearchOptions
	budget int64
	evals  []*mgeEvaluator
	nEval  atomic.Int64

	fbMu sync.Mutex // guards evals[0] when used outside batches

	best       mgeRecord
	bestThresh int64 // -1 when best did not come from a threshold
	records    []mgeRecord
	cancelled  bool
	baseline   int64      // peak of the unmodified sequence
	extraSeeds [][]int32  // genomes evaluated with the presets (budget mode)
	lastGA     any        // *eaopt.GA of the last genetic run (tests)
	memo       genomeMemo // results of the genomes the genetic search evaluated
	plans      planMemo   // results of the discard plans scored (score)
}

func newMgeSearch(ctx context.Context, g *graph.Graph, opts SearchOptions) (*mgeSearch, error) {
	if g == nil {
		return nil, fmt.Errorf("sublinear: graph is nil")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Workers == 0 {
		opts.Workers = defaultSearchWorkers()
	}
	p, err := newMgeProblemSim(g, &opts)
	if err != nil {
		return nil, err
	}
	s := &mgeSearch{ctx: ctx, p: p, opts: opts, budget: opts.Budget, bestThresh: -1}
	s.evals = make([]*mgeEvaluator, opts.Workers)
	for i := range s.evals {
		s.evals[i] = newMgeEvaluator(p)
	}
	if !opts.noPlanMemo {
		s.plans.limit = 16*p.n + 1<<20 // split points, as the genome memo holds
	}
	return s, nil
}

// feasible reports whether r fits the budget (always true in peak mode).
func (s *mgeSearch) feasible(r mgeResult) bool { return s.budget <= 0 || r.peak <= s.budget }

// primaryCmp compares results by the objective only: peak in peak mode;
// (feasible, recompute time, peak) in budget mode.
func (s *mgeSearch) primaryCmp(a, b mgeResult) int {
	if s.budget > 0 {
		fa, fb := s.feasible(a), s.feasible(b)
		if fa != fb {
			if fa {
				return -1
			}
			return 1
		}
		if fa {
			if a.time != b.time {
				return cmpInt64(a.time, b.time)
			}
			return cmpInt64(a.peak, b.peak)
		}
		if a.peak != b.peak {
			return cmpInt64(a.peak, b.peak)
		}
		return cmpInt64(a.time, b.time)
	}
	return cmpInt64(a.peak, b.peak)
}

// cmp is the full order of records: the objective, then fewer split
// points, then the split points lexicographically (MegEngine's cmp_sps).
func (s *mgeSearch) cmp(a, b *mgeRecord) int {
	if c := s.primaryCmp(a.r, b.r); c != 0 {
		return c
	}
	if len(a.s) != len(b.s) {
		return len(a.s) - len(b.s)
	}
	return slices.Compare(a.s, b.s)
}

// fitness is the float64 eaopt sees (lower is better). Peak mode: the peak.
// Budget mode: the recompute time when feasible, else 1e18 + peak.
func (s *mgeSearch) fitness(r mgeResult) float64 {
	if s.budget > 0 {
		if s.feasible(r) {
			return float64(r.time)
		}
		return 1e18 + float64(r.peak)
	}
	return float64(r.peak)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// evalOne evaluates one genome on the first evaluator (serialized).
func (s *mgeSearch) evalOne(g []int32) mgeResult {
	s.fbMu.Lock()
	defer s.fbMu.Unlock()
	s.nEval.Add(1)
	return s.evals[0].score(g, &s.plans)
}

// parallel runs job(worker, i) for i in [0, n) on the workers, stopping
// early when the context ends. done[i] says whether job i ran. Which worker
// runs a job never changes its result.
func (s *mgeSearch) parallel(n int, job func(w, i int), done []bool) {
	var next atomic.Int64
	work := func(w int) {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			if s.ctx.Err() != nil {
				return
			}
			job(w, i)
			done[i] = true
		}
	}
	s.fbMu.Lock() // the batch uses evals[0] too
	defer s.fbMu.Unlock()
	nw := min(len(s.evals), n)
	if nw <= 1 {
		work(0)
		return
	}
	var wg sync.WaitGroup
	for w := 0; w < nw; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			work(w)
		}(w)
	}
	wg.Wait()
}

// evalBatch evaluates genomes in parallel; ok[i] is false for genomes left
// out because the context ended.
func (s *mgeSearch) evalBatch(gs [][]int32) (res []mgeResult, ok []bool) {
	res = make([]mgeResult, len(gs))
	ok = make([]bool, len(gs))
	if len(gs) == 1 || len(s.evals) == 1 {
		s.fbMu.Lock()
		defer s.fbMu.Unlock()
		for i, g := range gs {
			if s.ctx.Err() != nil {
				break
			}
			res[i] = s.evals[0].score(g, &s.plans)
			ok[i] = true
			s.nEval.Add(1)
		}
		return res, ok
	}
	s.parallel(len(gs), func(w, i int) {
		res[i] = s.evals[w].score(gs[i], &s.plans)
		s.nEval.Add(1)
	}, ok)
	return res, ok
}

// offer makes rec the best if it is better under the full order.
func (s *mgeSearch) offer(rec mgeRecord) bool {
	if s.best.s == nil || s.cmp(&rec, &s.best) < 0 {
		s.best = rec
		s.bestThresh = -1
		return true
	}
	return false
}

// tryThresholds evaluates the split points of each threshold and accepts a
// result if it is strictly better, or equal with a larger threshold
// (do_search_update_thresh). Results are accepted in the order given, so the
// outcome does not depend on the workers.
func (s *mgeSearch) tryThresholds(ths []int64) {
	if len(ths) == 0 {
		return
	}
	gs := make([][]int32, len(ths))
	for i, t := range ths {
		gs[i] = s.p.thresholdSplits(t, s.evals[0].mark, nil)
	}
	res, ok := s.evalBatch(gs)
	for i := range gs {
		if !ok[i] {
			s.cancelled = true
			continue
		}
		rec := mgeRecord{s: gs[i], r: res[i]}
		c := s.primaryCmp(rec.r, s.best.r)
		if c < 0 || (c == 0 && ths[i] > s.bestThresh) {
			s.best, s.bestThresh = rec, ths[i]
		}
		s.records = append(s.records, rec)
	}
}

// searchPreset is MegEngine's search_preset. init is the baseline's
// bottleneck: the peak of the unmodified sequence without the resident
// external storages (MegEngine's planner only counts the vars it plans).
func (s *mgeSearch) searchPreset(init int64) {
	var ths []int64
	// (a) log space.
	for t := init >> 1; t >= 1024; t >>= 1 {
		ths = append(ths, t)
	}
	// (b) linear space.
	nr := int64(s.opts.ThreshNrTry)
	if nr > 0 {
		step := init / (nr + 1)
		for i := int64(1); i <= nr; i++ {
			ths = append(ths, step*i)
		}
	}
	s.tryThresholds(ths)
	if nr == 0 || s.ctx.Err() != nil {
		return
	}
	// (c) around the best threshold. The initial "infinite" threshold
	// stands for init; NR = 1 tries best/2 alone (MegEngine divides by
	// NR-1 there).
	bt := s.bestThresh
	if bt < 0 || bt > init {
		bt = init
	}
	start := bt / 2
	ths = ths[:0]
	if nr == 1 {
		ths = append(ths, start)
	} else {
		step := (bt*2 - start) / (nr - 1)
		for i := int64(0); i < nr; i++ {
			ths = append(ths, start+step*i)
		}
	}
	s.tryThresholds(ths)
}

// run executes the configured search: presets, genetic search, refine.
func (s *mgeSearch) run() {
	p := s.p
	// Init: an infinite threshold gives one block, i.e. the unmodified
	// sequence.
	initG := p.thresholdSplits(math.MaxInt64, s.evals[0].mark, nil)
	initR := s.evalOne(initG)
	s.best = mgeRecord{s: initG, r: initR}
	s.bestThresh = math.MaxInt64
	s.records = append(s.records, s.best)
	s.baseline = initR.peak
	if p.n < 2 {
		return
	}
	if s.ctx.Err() != nil {
		s.cancelled = true
		return
	}
	s.searchPreset(max(0, initR.peak-p.resident0))
	if len(s.extraSeeds) > 0 && s.ctx.Err() == nil {
		res, ok := s.evalBatch(s.extraSeeds)
		for i := range s.extraSeeds {
			if ok[i] {
				rec := mgeRecord{s: s.extraSeeds[i], r: res[i]}
				s.offer(rec)
				s.records = append(s.records, rec)
			}
		}
	}
	if s.opts.GeneticIters > 0 && s.ctx.Err() == nil {
		s.searchGenetic()
	}
	if s.budget == 0 && s.opts.LowerBound > 0 && s.ctx.Err() == nil {
		s.searchRefine()
	}
	if s.ctx.Err() != nil {
		s.cancelled = true
	}
}

// finish turns the best record into a plan and a report.
func (s *mgeSearch) finish(strategy string, baseline int64) (*sim.Plan, SearchReport, error) {
	ev := s.evals[0]
	r := ev.evaluate(s.best.s)
	seq, dups := ev.schedule()
	plan, err := sim.PlanFromSchedule(s.p.g, strategy, seq)
	if err != nil {
		return nil, SearchReport{}, fmt.Errorf("sublinear: %w", err)
	}
	rep := SearchReport{
		Strategy:     strategy,
		Peak:         r.peak,
		BaselinePeak: baseline,
		RecomputeNs:  r.time,
		SplitPoints:  toGenome(s.best.s),
		Duplicated:   dups,
		Evaluations:  int(s.nEval.Load()),
		Threshold:    s.bestThresh,
		Budget:       s.budget,
		Feasible:     s.feasible(r),
		Cancelled:    s.cancelled,
	}
	if rep.Threshold == math.MaxInt64 {
		rep.Threshold = -1 // the unmodified sequence
	}
	if s.budget > 0 && !rep.Feasible {
		lb, res, held := s.p.lowerBound()
		return plan, rep, &InfeasibleBudgetError{Budget: s.budget, MinPeak: s.minPeak(), LowerBound: lb, Resident: res, Held: held}
	}
	return plan, rep, nil
}

// minPeak is the smallest peak found. When no record is feasible the best
// record is the one with the smallest peak (infeasible records compare by
// peak first), so its peak is the figure.
func (s *mgeSearch) minPeak() int64 { return s.best.r.peak }

func toGenome(s []int32) Genome {
	g := make(Genome, len(s))
	for i, x := range s {
		g[i] = graph.OpID(x)
	}
	return g
}

// fromGenome is a genome as the evaluator takes it (toGenome's inverse).
func fromGenome(g Genome) []int32 {
	s := make([]int32, len(g))
	for i, x := range g {
		s[i] = int32(x)
	}
	return s
}

// Search runs MegEngine's sublinear memory search on g as opts configure it:
// threshold presets, then the genetic search if opts.GeneticIters > 0, then
// the lb_memory refine if opts.LowerBound > 0; in budget mode
// (opts.Budget > 0) it minimizes recompute time within the budget instead.
// It returns the plan, which replays on sim, and its report. When ctx ends
// early it returns the best plan found so far with Report.Cancelled set. A
// budget that no plan found fits gives the smallest-peak plan, its report and
// an *InfeasibleBudgetError.
func Search(ctx context.Context, g *graph.Graph, opts SearchOptions) (*sim.Plan, SearchReport, error) {
	strategy := StrategySublinear
	if opts.Budget > 0 {
		strategy = StrategySublinearBudget
	} else if opts.GeneticIters > 0 {
		strategy = StrategySublinearGA
	}
	return runSearch(ctx, g, opts, strategy)
}

func runSearch(ctx context.Context, g *graph.Graph, opts SearchOptions, strategy string) (*sim.Plan, SearchReport, error) {
	s, err := searched(ctx, g, opts)
	if err != nil {
		return nil, SearchReport{}, err
	}
	return s.finish(strategy, s.baseline)
}

// searched runs the search opts describe (budget mode if opts.Budget > 0)
// and returns it for finish.
func searched(ctx context.Context, g *graph.Graph, opts SearchOptions) (*mgeSearch, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	s, err := newMgeSearch(ctx, g, opts)
	if err != nil {
		return nil, err
	}
	if s.budget > 0 {
		s.runBudget()
	} else {
		s.run()
	}
	return s, nil
}

// strategyOptions returns the options strategy (StrategySublinear,
// StrategySublinearGA or StrategySublinearBudget) searches with: no
// genetic search for the first; DefaultGAIters generations and
// DefaultPoolSize for the others where opts leaves them 0; budget as the
// budget of the last (the others ignore it).
func strategyOptions(strategy string, opts SearchOptions, budget int64) SearchOptions {
	opts.Budget = 0
	if strategy == StrategySublinearBudget {
		opts.Budget = budget
	}
	if strategy == StrategySublinear {
		opts.GeneticIters = 0
		return opts
	}
	if opts.GeneticIters == 0 {
		opts.GeneticIters = DefaultGAIters
	}
	if opts.PoolSize == 0 {
		opts.PoolSize = DefaultPoolSize
	}
	return opts
}

// runStrategy runs strategy's search (see strategyOptions) and finishes it.
func runStrategy(ctx context.Context, g *graph.Graph, strategy string, opts SearchOptions, budget int64) (*sim.Plan, SearchReport, error) {
	return runSearch(ctx, g, strategyOptions(strategy, opts, budget), strategy)
}

// Thresholds is the "sublinear" strategy: MegEngine's threshold presets and
// lb_memory refine with the genetic search off, whatever
// opts.GeneticIters says.
func Thresholds(ctx context.Context, g *graph.Graph, opts SearchOptions) (*sim.Plan, SearchReport, error) {
	return runStrategy(ctx, g, StrategySublinear, opts, 0)
}

// Genetic is the "sublinear-ga" strategy: presets, then
// opts.GeneticIters generations of MegEngine's genetic search
// (DefaultGAIters if 0), then the lb_memory refine.
func Genetic(ctx context.Context, g *graph.Graph, opts SearchOptions) (*sim.Plan, SearchReport, error) {
	return runStrategy(ctx, g, StrategySublinearGA, opts, 0)
}

// WithinBudget is the "sublinear-budget" strategy: the same genome and
// operators, minimizing recompute time subject to peak <= budget
// (opts.GeneticIters generations, DefaultGAIters if 0). An infeasible budget
// returns the smallest-peak plan found and an *InfeasibleBudgetError.
func WithinBudget(ctx context.Context, g *graph.Graph, budget int64, opts SearchOptions) (*sim.Plan, SearchReport, error) {
	if budget <= 0 {
		return nil, SearchReport{}, fmt.Errorf("sublinear: budget is %d bytes, expected > 0", budget)
	}
	return runStrategy(ctx, g, StrategySublinearBudget, opts, budget)
}

// newMgeProblemSim indexes g with the memory model and cost model of a sim
// Machine built from opts.Sim (unlimited capacity, ideal allocator), and
// fills opts.OpTime when nil.
func newMgeProblemSim(g *graph.Graph, opts *SearchOptions) (*mgeProblem, error) {
	so := opts.Sim
	so.Capacity, so.Allocator, so.ReserveAll = -1, nil, false
	so.Timeline, so.Trace = false, false
	m, err := sim.NewMachine(g, so)
	if err != nil {
		return nil, fmt.Errorf("sublinear: memory model: %w", err)
	}
	if opts.OpTime == nil {
		opts.OpTime = m.OpTime
	}
	mm := mgeMemModel{
		workspace: m.OpWorkspace,
		arena:     so.AtomicCleanPolicy == 0,
		wsSlots:   sim.TempSlots(so.NumTemp, so.WorkerThreads),
	}
	p := newMgeProblem(g, opts.OpTime, mm)
	if opts.ForwardOnly {
		p.forwardOnly(g)
	}
	return p, nil
}

// ThresholdGenome returns the split points MegEngine derives from a block
// size threshold in bytes (get_split_point_set), with sim's default memory
// model.
func ThresholdGenome(g *graph.Graph, thresh int64) (Genome, error) {
	if g == nil {
		return nil, fmt.Errorf("sublinear: graph is nil")
	}
	opts := DefaultSearchOptions()
	p, err := newMgeProblemSim(g, &opts)
	if err != nil {
		return nil, err
	}
	return toGenome(p.thresholdSplits(thresh, make([]int32, p.nt), nil)), nil
}

// EvaluateGenome builds the plan of one genome (sorted split points ending at
// the last op; allowed positions only when the graph marks endpoints) and
// reports its peak and recompute time.
func EvaluateGenome(g *graph.Graph, genome Genome, opts SearchOptions) (*sim.Plan, SearchReport, error) {
	s, err := newMgeSearch(context.Background(), g, opts)
	if err != nil {
		return nil, SearchReport{}, err
	}
	gs := fromGenome(genome)
	if !s.p.validGenome(gs) {
		return nil, SearchReport{}, fmt.Errorf("sublinear: genome %v: expected strictly increasing split points in [0, %d] ending at %d (endpoint ops only, if the graph marks any)", genome, len(g.Ops)-1, len(g.Ops)-1)
	}
	base := s.evalOne(s.p.thresholdSplits(math.MaxInt64, s.evals[0].mark, nil))
	s.best = mgeRecord{s: gs, r: s.evalOne(gs)}
	s.records = append(s.records, s.best)
	strategy := StrategySublinear
	if s.budget > 0 {
		strategy = StrategySublinearBudget
	}
	return s.finish(strategy, base.peak)
}
