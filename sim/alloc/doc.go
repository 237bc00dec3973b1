// Package alloc holds the device memory allocator models the simulator runs
// plans under, behind one small interface (Allocator): Ideal (exact bytes,
// no fragmentation: the lower bound any allocator reaches), Caching
// (PyTorch's CUDA caching allocator: size classes, block splitting and
// merging within segments, cached free memory counted as reserved) and
// Static (MXNet's graph memory planner: one arena of storages shared by size
// within MXNET_EXEC_MATCH_RANGE, with in-place reuse).
//
// It knows bytes and blocks only: not graphs, tensors, plans or strategies.
// The simulator (package sim) maps tensors to blocks; docs/allocators.md
// describes the models and the numbers they are tested against.
package alloc
