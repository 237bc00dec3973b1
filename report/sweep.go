package report

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/remat-dev/remat/dtr"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/dtrlog"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/strategy"
)

// SweepPoint is one strategy at one budget.
type SweepPoint struct {
	Strategy      string  `json:"strategy"`
	Ratio         float64 `json:"ratio,omitempty"` // budget / baseline peak, when the sweep is by ratio
	Budget        int64   `json:"budget"`
	Status        string  `json:"status"`
	Reason        string  `json:"reason,omitempty"`
	PeakAllocated int64   `json:"peak_allocated"`
	TimeNs        int64   `json:"time_ns"`
	Overhead      float64 `json:"overhead"`
	Recomputes    int     `json:"recomputes"`
	Evictions     int     `json:"evictions"`
}

// Sweep is budgets x strategies: the overhead each strategy pays at each
// budget (the DTR paper's Pareto figure).
type Sweep struct {
	Version        int          `json:"version"`
	Kind           string       `json:"kind"`
	Graph          string       `json:"graph"`
	Device         string       `json:"device"`
	Allocator      string       `json:"allocator"`
	BaselinePeak   int64        `json:"baseline_peak"`
	BaselineTimeNs int64        `json:"baseline_time_ns"`
	Strategies     []string     `json:"strategies"`
	Budgets        []int64      `json:"budgets"`
	Ratios         []float64    `json:"ratios,omitempty"`
	Points         []SweepPoint `json:"points"`
}

// SweepBudgets runs every strategy (nil: all but the baseline) at every
// budget. Give either ratios (of the baseline's allocated peak) or absolute
// budgets in bytes; o.Budget is ignored. Cancelling ctx returns an error
// matching sim.ErrCanceled and no sweep.
//
// The cells (a strategy at a budget) are independent runs: they run up to
// one per CPU at once, fewer on large graphs (parallelRuns), and the sweep
// is the same whatever the number. g must not be modified meanwhile; it is
// validated first when runs share it (which builds the index they read).
func SweepBudgets(ctx context.Context, g *graph.Graph, o strategy.Options, strategies []strategy.Strategy, ratios []float64, budgets []int64, progress sim.Progress) (*Sweep, error) {
	return sweepBudgets(ctx, g, o, strategies, ratios, budgets, progress, 0)
}

// runBytes estimates the memory one strategy run holds per op and tensor
// of the graph (a dtr or sublinear run on resnet-cifar at 100k ops holds
// about 250-300 MB besides the graph, whose 100k ops come with 200k
// tensors), and runsMemory the memory the runs going at once may hold
// together.
const (
	runBytes   = 1 << 10
	runsMemory = 1 << 30
)

// parallelRuns is how many of runs strategy runs on g SweepBudgets and
// Compare make at once: one per CPU (GOMAXPROCS), no more than runsMemory
// allows for runs of g's size, at least one.
func parallelRuns(g *graph.Graph, runs int) int {
	w := runtime.GOMAXPROCS(0)
	if per := int64(len(g.Ops)+len(g.Tensors)) * runBytes; per > 0 {
		w = int(min(int64(w), runsMemory/per))
	}
	return max(1, min(w, runs))
}

// shareGraph prepares g for workers runs at once: with more than one it
// validates g, which builds the consumer index that Graph.Consumers would
// otherwise build lazily, unsafely for concurrent use (one run at a time
// leaves g as it is, as before: a million-op graph the command line has
// validated is not validated again).
func shareGraph(g *graph.Graph, workers int) error {
	if workers <= 1 {
		return nil
	}
	return g.Validate()
}

// sweepBudgets is SweepBudgets with workers cells at once (0:
// parallelRuns).
func sweepBudgets(ctx context.Context, g *graph.Graph, o strategy.Options, strategies []strategy.Strategy, ratios []float64, budgets []int64, progress sim.Progress, workers int) (*Sweep, error) {
	if g == nil {
		return nil, fmt.Errorf("sweep: graph is nil")
	}
	if (len(ratios) == 0) == (len(budgets) == 0) {
		return nil, fmt.Errorf("sweep: give either ratios or budgets")
	}
	for _, r := range ratios {
		if !(r > 0) || r > 1 {
			return nil, fmt.Errorf("sweep: ratio %g: expected a number in (0, 1]", r)
		}
	}
	for _, b := range budgets {
		if b <= 0 {
			return nil, fmt.Errorf("sweep: budget %d bytes: expected > 0", b)
		}
	}
	if len(strategies) == 0 {
		for _, s := range strategy.All() {
			if s.Name != strategy.Baseline {
				strategies = append(strategies, s)
			}
		}
	}
	baseline, err := strategy.Lookup(strategy.Baseline)
	if err != nil {
		return nil, err
	}
	if o.Allocator == "" {
		o.Allocator = strategy.DefaultAllocator
	}
	bo := o
	bo.Budget = 0
	base, err := RunStrategy(ctx, g, bo, baseline)
	if err != nil {
		return nil, err
	}
	if base.Result == nil {
		return nil, fmt.Errorf("sweep: baseline: %s", base.Reason)
	}
	sw := &Sweep{Version: SchemaVersion, Kind: "sweep", Graph: g.Name, Device: o.Device.Name, Allocator: o.Allocator,
		BaselinePeak: base.PeakAllocated, BaselineTimeNs: base.TimeNs, Ratios: ratios}
	for _, s := range strategies {
		sw.Strategies = append(sw.Strategies, s.Name)
	}
	for _, r := range ratios {
		b := int64(r * float64(base.PeakAllocated))
		if b <= 0 {
			return nil, fmt.Errorf("sweep: ratio %g of the baseline peak %d bytes is below one byte", r, base.PeakAllocated)
		}
		budgets = append(budgets, b)
	}
	sw.Budgets = budgets
	total := len(budgets) * len(strategies)
	if workers <= 0 {
		workers = parallelRuns(g, total)
	}
	if err := shareGraph(g, workers); err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	sw.Points = make([]SweepPoint, total)
	// cell k is strategy k % len(strategies) at budget k / len(strategies)
	err = runCells(total, workers, progress, func(k int) string { return strategies[k%len(strategies)].Name }, func(k int) error {
		i, s := k/len(strategies), strategies[k%len(strategies)]
		e := o
		e.Budget = budgets[i]
		row, err := RunStrategy(ctx, g, e, s)
		if err != nil {
			return err
		}
		p := SweepPoint{Strategy: s.Name, Budget: budgets[i], Status: row.Status, Reason: row.Reason, PeakAllocated: row.PeakAllocated,
			TimeNs: row.TimeNs, Recomputes: row.Recomputes, Evictions: row.Evictions}
		if len(ratios) > 0 {
			p.Ratio = ratios[i]
		}
		if row.Result != nil && base.TimeNs > 0 {
			p.Overhead = float64(row.TimeNs) / float64(base.TimeNs)
		}
		sw.Points[k] = p
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sw, nil
}

// runCells runs cells 0 .. total-1 with run, workers at once, reporting
// progress (name(k): the cell's strategy) as each starts and once at the
// end. The first error (by cell) stops the cells not yet started and is
// returned; run is a RunStrategy, whose only errors are cancellations.
func runCells(total, workers int, progress sim.Progress, name func(k int) string, run func(k int) error) error {
	errs := make([]error, total)
	var (
		next   atomic.Int64
		mu     sync.Mutex // progress and done
		done   int
		wg     sync.WaitGroup
		failed atomic.Bool
	)
	for w := 0; w < max(workers, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				k := int(next.Add(1) - 1)
				if k >= total {
					return
				}
				mu.Lock()
				progress.Report(done, total, name(k))
				mu.Unlock()
				if errs[k] = run(k); errs[k] != nil {
					failed.Store(true)
					continue
				}
				mu.Lock()
				done++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	progress.Report(total, total, "")
	return nil
}

// Table lays the sweep out with one row per budget and one column per
// strategy; a cell is the overhead, or the status when the strategy did not
// fit the budget.
func (sw *Sweep) Table() *Table {
	t := &Table{Columns: []string{"budget"}, RightAlign: []bool{true}}
	if len(sw.Ratios) > 0 {
		t.Columns = append(t.Columns, "ratio")
		t.RightAlign = append(t.RightAlign, true)
	}
	for _, s := range sw.Strategies {
		t.Columns = append(t.Columns, s)
		t.RightAlign = append(t.RightAlign, true)
	}
	for i, b := range sw.Budgets {
		cells := []Cell{Bytes(b)}
		if len(sw.Ratios) > 0 {
			cells = append(cells, Text(strconv.FormatFloat(sw.Ratios[i], 'f', -1, 64)))
		}
		for j := range sw.Strategies {
			p := sw.Points[i*len(sw.Strategies)+j]
			if p.Status == StatusOK {
				cells = append(cells, Ratio(p.Overhead))
			} else {
				cells = append(cells, Text(p.Status))
			}
		}
		t.AddRow(cells...)
	}
	return t
}

// Write renders the sweep.
func (sw *Sweep) Write(w interface{ Write([]byte) (int, error) }, f Format) error {
	if f == FormatJSON {
		return WriteJSON(w, sw)
	}
	return sw.Table().Write(w, f)
}

// DTRSweep is the DTR paper's protocol on a log: one result per heuristic.
type DTRSweep struct {
	Version int                `json:"version"`
	Kind    string             `json:"kind"`
	Log     string             `json:"log"`
	Parity  bool               `json:"parity"`
	Ratios  []float64          `json:"ratios"`
	Runs    []*dtr.SweepResult `json:"runs"`
	// Best is the portfolio's result per ratio (DTRSweepOptions.Portfolio:
	// every heuristic with eager and lazy locking and the reference
	// heuristics with the reference's semantics), with its winner; without
	// it the best-of row is the best of Runs.
	Best []dtr.BestResult `json:"best,omitempty"`
	// LowerBoundRatio is the log's memory lower bound over its baseline
	// peak (no eviction order that recomputes what it evicts runs below
	// it; outside parity mode it counts the production of an op's inputs
	// too, dtr.TightenLowerBound); LowestRatio is the lowest
	// ratio where the best-of row succeeds (0 if none does).
	LowerBoundRatio float64 `json:"lower_bound_ratio"`
	LowestRatio     float64 `json:"lowest_ratio"`
}

// SearchHeuristic is the name SweepDTRLog gives the offline search
// (dtr.OfflineSearch): randomized replays of the known trace, keeping the
// completed run with the least rematerialization.
const SearchHeuristic = "search"

// DTRSweepOptions configures SweepDTRLog.
type DTRSweepOptions struct {
	Heuristics []dtr.Heuristic
	// Search adds a row for the offline search with SearchRuns replays per
	// ratio (0: 60) and seed SearchSeed.
	Search     bool
	SearchRuns int
	SearchSeed uint64
	Ratios     []float64 // default dtr.DefaultRatios
	Parity     bool
	// Portfolio computes the best-of row with dtr.SweepBest instead of as
	// the best of the Heuristics' rows (not with Parity); with Search, the
	// search's result wins a ratio where its overhead is lower.
	Portfolio bool
	// Progress, if set, is told of each budget run (a row's, the search's
	// or the portfolio's) as it ends, with an estimate of the total that
	// becomes exact once the portfolio starts.
	Progress sim.Progress
}

// SweepDTRLog runs the paper's protocol (budget = ratio x baseline peak,
// thrash past 1x extra compute, overhead = clock / baseline compute) for
// each heuristic on a DTR log, and optionally the offline search. A nil
// trace, or one without ops, is an error.
func SweepDTRLog(ctx context.Context, name string, tr *dtrlog.Trace, o DTRSweepOptions) (*DTRSweep, error) {
	if tr == nil || len(tr.Ops) == 0 {
		return nil, fmt.Errorf("report: dtr sweep of %q: the trace has no ops, expected a compiled DTR log with at least one call", name)
	}
	ratios := o.Ratios
	if len(ratios) == 0 {
		ratios = dtr.DefaultRatios
	}
	out := &DTRSweep{Version: SchemaVersion, Kind: "dtr-sweep", Log: name, Parity: o.Parity, Ratios: ratios}
	// progress: budget runs done and their total; the portfolio's share
	// is estimated as its lazy and parity runs (the rows stand in for its
	// eager ones) until it reports its own count
	done, total := 0, len(ratios)*len(o.Heuristics)
	if o.Search {
		total += len(ratios)
	}
	if o.Portfolio {
		total += len(ratios) * (len(dtr.Heuristics) + len(dtr.ReferenceHeuristics))
	}
	var tick func()
	what := ""
	if o.Progress != nil {
		tick = func() {
			done++
			o.Progress(done, total, what)
		}
	}
	for _, h := range o.Heuristics {
		what = h.String()
		res, err := dtr.Sweep(ctx, tr, dtr.SweepOptions{Heuristic: h, Ratios: ratios, Parity: o.Parity, Progress: tick})
		if err != nil {
			return nil, fmt.Errorf("sweep %s: %w", h, err)
		}
		out.Runs = append(out.Runs, res)
	}
	var searchRow *dtr.SweepResult
	if o.Search {
		if o.Parity {
			return nil, fmt.Errorf("sweep: the offline search has no parity mode")
		}
		runs := o.SearchRuns
		if runs == 0 {
			runs = 60
		}
		row := &dtr.SweepResult{Heuristic: SearchHeuristic, Bound: dtr.ComputeLowerBound(tr)}
		for _, r := range ratios {
			sr, err := dtr.OfflineSearch(ctx, tr, dtr.SearchOptions{Ratio: r, Runs: runs, Seed: o.SearchSeed})
			if err != nil {
				return nil, fmt.Errorf("search at ratio %g: %w", r, err)
			}
			row.Baseline = sr.Baseline
			best := sr.Best
			if best.Status == "" { // every run ran out of memory
				best = dtr.RatioResult{Ratio: r, BudgetBytes: sr.BudgetBytes, Status: dtr.StatusOOM}
			}
			row.Results = append(row.Results, best)
			if tick != nil {
				what = SearchHeuristic
				tick()
			}
		}
		out.Runs = append(out.Runs, row)
		searchRow = row
	}
	if o.Portfolio {
		if o.Parity {
			return nil, fmt.Errorf("sweep: the portfolio best-of has no parity mode")
		}
		// the default-mode rows stand in for the portfolio's eager runs
		bo := dtr.BestOptions{Done: out.Runs}
		if o.Progress != nil {
			before := done
			bo.Progress = func(d, t int) {
				done, total = before+d, before+t
				o.Progress(done, total, "portfolio")
			}
		}
		best, err := dtr.SweepBestWith(ctx, tr, ratios, bo)
		if err != nil {
			return nil, fmt.Errorf("sweep best-of: %w", err)
		}
		// the offline search, when asked for, is one more offline
		// configuration: it wins a ratio with a lower overhead (a tie
		// keeps the portfolio's winner)
		if searchRow != nil {
			for i, rr := range searchRow.Results {
				if b := &best[i]; rr.Status == dtr.StatusOK && (b.Status != dtr.StatusOK || rr.Overhead < b.Overhead) {
					*b = dtr.BestResult{RatioResult: rr, Winner: SearchHeuristic}
				}
			}
		}
		out.Best = best
	}
	if len(out.Runs) > 0 && !o.Parity {
		// the bound that counts the production of an op's inputs, once
		// for the sweep (parity sweeps keep the reference's protocol and
		// the single-op bound: the search costs more than their replays)
		lb, err := dtr.TightenLowerBound(ctx, tr, out.Runs[0].Bound, 0)
		if err != nil {
			return nil, fmt.Errorf("sweep lower bound: %w", err)
		}
		for _, run := range out.Runs {
			run.Bound = lb
		}
	}
	if len(out.Runs) > 0 && out.Runs[0].Baseline.PeakBytes > 0 {
		out.LowerBoundRatio = float64(out.Runs[0].Bound.Bytes) / float64(out.Runs[0].Baseline.PeakBytes)
	}
	for i, r := range ratios {
		if b, _ := out.best(i); b >= 0 && (out.LowestRatio == 0 || r < out.LowestRatio) {
			out.LowestRatio = r
		}
	}
	return out, nil
}

// best returns the best-of overhead at ratio index i (-1 if no run
// succeeds there) and whether there is a best-of row at all.
func (d *DTRSweep) best(i int) (float64, bool) {
	if len(d.Best) > 0 {
		if i < len(d.Best) && d.Best[i].Status == "ok" {
			return d.Best[i].Overhead, true
		}
		return -1, true
	}
	if len(d.Runs) < 2 {
		return -1, false
	}
	best := -1.0
	for _, run := range d.Runs {
		if i < len(run.Results) && run.Results[i].Status == "ok" && (best < 0 || run.Results[i].Overhead < best) {
			best = run.Results[i].Overhead
		}
	}
	return best, true
}

// Table has one row per heuristic and one column per ratio: the overhead,
// or the status (oom, thrash) of a failed run, or limit (see limitNote).
func (d *DTRSweep) Table() *Table {
	t := &Table{Columns: []string{"heuristic"}, RightAlign: []bool{false}}
	for _, r := range d.Ratios {
		t.Columns = append(t.Columns, strconv.FormatFloat(r, 'f', -1, 64))
		t.RightAlign = append(t.RightAlign, true)
	}
	for _, run := range d.Runs {
		cells := []Cell{Text(run.Heuristic)}
		for _, rr := range run.Results {
			var c Cell
			if rr.Status == "ok" {
				c = Cell{Human: strconv.FormatFloat(rr.Overhead, 'f', 3, 64), Exact: strconv.FormatFloat(rr.Overhead, 'f', 6, 64)}
			} else {
				c = Text(rr.Status)
			}
			if rr.ReferenceAsserts > 0 {
				if c.Exact == "" {
					c.Exact = c.Human // CSV stays unmarked
				}
				c.Human += "*" // see referenceNote
			}
			cells = append(cells, c)
		}
		t.AddRow(cells...)
	}
	// best of the rows (or the portfolio) per ratio, and the log's memory
	// lower bound as a ratio of the baseline peak: ratios below it are
	// infeasible for any eviction order
	if _, ok := d.best(0); ok {
		name := "best-of"
		if len(d.Best) > 0 {
			name = "best-of (portfolio)"
			if d.Runs[len(d.Runs)-1].Heuristic == SearchHeuristic {
				name = "best-of (portfolio, search)"
			}
		}
		cells := []Cell{Text(name)}
		for i := range d.Ratios {
			if best, _ := d.best(i); best < 0 {
				cells = append(cells, Text("none"))
			} else {
				cells = append(cells, Cell{Human: strconv.FormatFloat(best, 'f', 3, 64), Exact: strconv.FormatFloat(best, 'f', 6, 64)})
			}
		}
		t.AddRow(cells...)
	}
	if len(d.Runs) > 0 && d.Runs[0].Baseline.PeakBytes > 0 {
		cells := []Cell{Text("lower bound " + d.boundText())}
		for _, r := range d.Ratios {
			if r < d.LowerBoundRatio {
				cells = append(cells, Text("below"))
			} else {
				cells = append(cells, Text("-"))
			}
		}
		t.AddRow(cells...)
	}
	return t
}

// referenceNote explains the cells marked "*" (parity mode: the reference
// simulator fails an assertion on the log at that budget).
const referenceNote = "* the reference simulator (simrd) fails an assertion in its region bookkeeping on this log at this budget: no reference to agree with\n"

// limitNote explains the cells with status "limit" (parity mode, h_DTR or
// MSPS: the regions kept as the reference keeps them outgrew their limit).
const limitNote = "limit: the reference simulator's region bookkeeping (parity mode, dtr and msps), quadratic on long logs, outgrew sim's limits at this budget: no result; without --parity the regions are walked exactly\n"

// Write renders the DTR sweep.
func (d *DTRSweep) Write(w interface{ Write([]byte) (int, error) }, f Format) error {
	if f == FormatJSON {
		return WriteJSON(w, d)
	}
	if err := d.Table().Write(w, f); err != nil {
		return err
	}
	if f == FormatCSV {
		return nil
	}
	asserts, limit := false, false
	for _, run := range d.Runs {
		for _, rr := range run.Results {
			asserts = asserts || rr.ReferenceAsserts > 0
			limit = limit || rr.Status == dtr.StatusLimit
		}
	}
	var notes []string
	if asserts {
		notes = append(notes, referenceNote)
	}
	if limit {
		notes = append(notes, limitNote)
	}
	if g := d.gapNote(); g != "" {
		notes = append(notes, g)
	}
	if len(notes) > 0 && f == FormatMarkdown {
		// a line right under a markdown table would read as one more row
		notes = append([]string{"\n"}, notes...)
	}
	for _, n := range notes {
		if _, err := w.Write([]byte(n)); err != nil {
			return err
		}
	}
	return nil
}

// boundText is the lower bound ratio with three significant digits: a
// bound just under a grid ratio (0.0998) must not read as that ratio.
func (d *DTRSweep) boundText() string {
	return strconv.FormatFloat(d.LowerBoundRatio, 'g', 3, 64)
}

// gapNote states the gap between the lowest ratio where the best-of row
// (or, without one, any run) fits and the log's lower bound, where the
// bound comes from, and the lowest of the sweep's ratios the bound allows.
func (d *DTRSweep) gapNote() string {
	if len(d.Runs) == 0 || d.LowerBoundRatio <= 0 {
		return ""
	}
	lowest := d.LowestRatio
	if len(d.Best) == 0 && len(d.Runs) == 1 {
		for _, rr := range d.Runs[0].Results {
			if rr.Status == dtr.StatusOK && (lowest == 0 || rr.Ratio < lowest) {
				lowest = rr.Ratio
			}
		}
	}
	lb := d.Runs[0].Bound
	from := "one op's working set"
	if lb.Source == dtr.BoundInputs {
		from = "what producing an op's inputs holds"
	}
	if lb.Line > 0 {
		from += fmt.Sprintf(", log line %d", lb.Line)
	}
	bound := d.boundText()
	var sb strings.Builder
	if lowest > 0 {
		fmt.Fprintf(&sb, "gap to the lower bound: the lowest ratio that fits is %g, %.2fx the bound %s (%s)", lowest, lowest/d.LowerBoundRatio, bound, from)
	} else {
		fmt.Fprintf(&sb, "gap to the lower bound: no ratio fits; the bound is %s (%s)", bound, from)
	}
	allowed := -1.0
	for _, r := range d.Ratios {
		if r >= d.LowerBoundRatio && (allowed < 0 || r < allowed) {
			allowed = r
		}
	}
	if allowed > 0 {
		fmt.Fprintf(&sb, "; the lowest of these ratios it allows is %g", allowed)
	}
	sb.WriteString("\n")
	return sb.String()
}
