// Package chain plans checkpointing for a training graph seen as a chain of
// stages: Chen et al.'s baselines (every sqrt(n)-th stage, and the greedy
// budget planner with memonger's search), Griewank and Walther's Revolve for
// homogeneous chains, and Rotor-style optimal checkpointing for
// heterogeneous chains (optimal-chain). Each planner emits a sim.Plan that
// the simulator replays.
//
// StagesOf cuts the forward part of a graph into stages at the points where
// exactly one forward activation is live (never between a storage's
// producer and an in-place op writing it) and measures each stage as the
// plans will run it; every planner here works on that chain, so a graph
// whose forward has no such cuts (one stage) leaves it nothing to choose.
// Chains deeper than optimal-chain's dynamic program affords are grouped
// (OptimalMaxStages) and the report bounds what grouping costs.
//
// This package is not MegEngine's sublinear search over the whole operator
// sequence (package sublinear), not the MXNet mirror pass (package mirror)
// and not the runtime evictor (package dtr); it imports none of them. It has
// no memory model of its own for judging plans: candidate plans are replayed
// by package sim, which has the last word. See docs/optimal.md.
package chain
