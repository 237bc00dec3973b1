package strategy

import "github.com/remat-dev/remat/sim"

// Status is the outcome of one strategy's run.
type Status string

// Statuses.
const (
	StatusOK         Status = "ok"
	StatusOOM        Status = "oom"        // the plan does not fit the device
	StatusInfeasible Status = "infeasible" // no plan meets the budget
	StatusThrash     Status = "thrash"     // DTR exceeded its rematerialization limit
	StatusError      Status = "error"      // the strategy failed; Reason says why
)

// Result is what every strategy returns: the plan, its simulated outcome on
// the run's device and allocator, the status and search statistics.
type Result struct {
	// Strategy is the strategy's name.
	Strategy string
	// Status is ok, oom, infeasible, thrash or error; Reason explains any
	// status but ok.
	Status Status
	Reason string
	// Plan is the schedule the strategy chose (for DTR: the schedule its
	// run amounts to). It may be set when Status is not ok.
	Plan *sim.Plan
	// Sim is the simulated outcome of Plan (nil when there is nothing to
	// measure). When the plan ran out of memory on the device, Sim is its
	// replay on an unlimited device, so it still shows what the plan needs.
	Sim *sim.Result
	// FitsDevice and FitsBudget say whether the plan's reserved peak fits
	// the device and its allocated peak the budget.
	FitsDevice bool
	FitsBudget bool
	// SavedBudget says the budget bounded only the saved activations (dtr
	// with dtr.budget_scope saved), whose peak is SavedPeak. The budget is
	// checked after each op, so SavedPeak can pass it by an op's outputs;
	// FitsBudget says the run never found the saved activations over the
	// budget with nothing left to evict (SavedOver counts the times it
	// did, going on over it). The allocated peak adds the rest of the
	// step's memory.
	SavedBudget bool
	SavedPeak   int64
	SavedOver   int64
	// Stats are the planner's search statistics.
	Stats Stats
}

// Stats are a planner's search statistics.
type Stats struct {
	// Detail is a short strategy-specific note (ops mirrored, blocks,
	// stages kept, evictions).
	Detail string
	// Evaluations counts the candidate plans the planner judged (0 when
	// it judges none).
	Evaluations int
	// Replans counts the times the plan was made again with a lower limit
	// because the allocator's overhead broke the device's capacity.
	Replans int
	// PlanningNs is the wall-clock time spent planning and measuring. It is
	// not deterministic: reports leave it out of golden output.
	PlanningNs int64
}

// PeakAllocated is the simulated allocated peak (0 without a simulation).
func (r *Result) PeakAllocated() int64 {
	if r == nil || r.Sim == nil {
		return 0
	}
	return r.Sim.PeakAllocated
}

// TimeNs is the simulated step time (0 without a simulation).
func (r *Result) TimeNs() int64 {
	if r == nil || r.Sim == nil {
		return 0
	}
	return r.Sim.TotalNs
}
