package sublinear

// Budget mode (beyond MegEngine): with SearchOptions.Budget > 0 the search
// minimizes the recompute time subject to peak <= Budget. The genome, the
// threshold presets and the genetic operators are MegEngine's; only the
// order of records changes (mgeSearch.primaryCmp): feasible before
// infeasible; among feasible records less recompute time, then lower peak;
// among infeasible ones lower peak, then less time; then fewer split points.
// So when nothing fits, the best record is the one with the smallest peak,
// which is what the InfeasibleBudgetError reports.

// runBudget runs the presets and the genetic search under the budget order.
// The lb_memory refine does not apply: the budget is the bound.
func (s *mgeSearch) runBudget() {
	s.run()
}
