// Package sublinear plans static recomputation ("sublinear memory") for a
// training graph and emits sim.Plans: MegEngine's sublinear checkpoint
// search (threshold presets, genetic search, lb_memory refine), a budget
// mode that minimizes recompute time under a memory budget and an exact
// solver for tiny graphs. The chain planners (Chen's baselines, Revolve and
// optimal-chain) are package chain.
//
// MegEngine's search (Search, Thresholds, Genetic, WithinBudget,
// ExactSearch) works on the whole operator sequence. A Genome is a sorted
// set of split points (ops that end a block; the last op always does). For
// each block, every var created in it and alive after it, except the block's
// checkpoints (the outputs of its last op), is freed after one of its
// accesses and recomputed before the next one by duplicating its producers,
// never reaching before the block and never duplicating ops that may not
// run twice. The fitness of a genome is the peak of the modified sequence
// as sim's ideal allocator counts it; see docs/sublinear.md.
package sublinear
