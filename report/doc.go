// Package report runs remat's strategies side by side on one graph, device
// and allocator, and renders what-if reports (compare, budget sweeps, largest
// batch) as tables, Markdown, CSV, JSON and plots. It holds no algorithm
// logic: every number comes from the strategy packages and the simulator.
package report
