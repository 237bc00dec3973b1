// Package strategy is remat's one table of memory strategies. Each strategy
// is a value (name, one-line doc, the settings it reads, a planner) and every
// caller — the CLI, the report package, the top-level remat facade and Go
// programs — iterates the same ordered Table. OptionsFrom is the only place
// where settings become strategy options, so a Go program with the same
// environment gets the same plan as the sim command.
//
// Strategy.Plan plans a graph and measures the plan in the simulator. It
// returns one Result for every strategy: the plan, the simulated outcome, the
// status (ok, oom, infeasible, thrash) and search statistics.
//
// Cancellation follows the one rule of sim.ErrCanceled: when the context is
// done, Plan returns the best result found so far (possibly none) with an
// error matching sim.ErrCanceled. Long work reports progress through
// Options.Progress (a sim.Progress).
//
// The algorithms live in their own packages (mirror, sublinear, chain, dtr);
// this package only wires them to options and measures their plans. It
// renders nothing: tables, JSON and plots belong to report and cmd/sim.
package strategy
