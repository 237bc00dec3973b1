// Package dtrlog reads and writes the DTR log format: one JSON object per
// line recording the tensor operations of one training iteration, as written
// by the patched PyTorch of the DTR paper (Kirisame et al., ICLR 2021). It
// compiles a log into a Trace (ops, tensors and a schedule of compute / get /
// release / pin commands with the replay semantics of the reference simulator
// simrd) and converts a Trace into a graph.Graph for static strategies.
package dtrlog
