// Package graph is remat's training-graph IR: ops in execution order, tensors
// with sizes, op costs and attributes, validation, the native JSON format,
// the op-type registry (LookupOpType: per type, the gradient rule, in-place
// class, MXNet mirror class and workspace class, so that a new op type is
// one entry) and the autodiff that derives a backward pass from a forward
// graph with the registry's gradient rules.
//
// It knows no plans, memory policies or strategies: those read the registry
// and the IR from the packages above it (sim, mirror, sublinear, chain, dtr).
//
// IDs are dense int32 indexes into Graph.Ops and Graph.Tensors; adjacency is
// kept in flat slices so that graphs of millions of ops build and validate
// quickly. The order of Graph.Ops is the execution order and must be a
// topological order; it is the default schedule every strategy starts from.
package graph
