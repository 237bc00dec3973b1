// Package graph is remat's training-graph IR: ops in execution order, tensors
// with sizes, op costs and attributes, validation, the native JSON format and
// the gradient rules that derive a backward pass from a forward graph.
//
// IDs are dense int32 indexes into Graph.Ops and Graph.Tensors; adjacency is
// kept in flat slices so that graphs of millions of ops build and validate
// quickly. The order of Graph.Ops is the execution order and must be a
// topological order; it is the default schedule every strategy starts from.
package graph
