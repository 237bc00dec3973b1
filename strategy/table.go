package strategy

// table is the one ordered list of strategies: the CLI, the report and the
// Go API all iterate it (through All, Names, Lookup and Resolve). Adding a
// strategy is a file with its planner and one line here. The order is the
// report order: the baseline first, then the static passes from the
// simplest, then the runtime evictor.
var table = [...]Strategy{
	none,
	mirrorClassic,
	mirrorCost,
	sublinearThresholds,
	sublinearGA,
	sublinearBudget,
	chenSqrt,
	chenGreedy,
	optimalChain,
	dtrRuntime,
}
