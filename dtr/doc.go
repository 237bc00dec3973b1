// Package dtr is a Dynamic Tensor Rematerialization runtime (Kirisame et al.,
// ICLR 2021, and MegEngine's DTR): it decides, while a program runs, which
// tensors to evict (drop and recompute later, or swap to host) to stay
// within a memory budget. A real executor embeds it through the small Host
// interface; the simulator drives it on sim.Machine; Sweep runs the paper's
// budget protocol on a DTR log; PlanOnMachine (on a Machine) and StaticPlan
// (without one) export what it did as a sim.Plan.
//
// It renders nothing: tables of sweeps are the report package's and the
// CLI's. Running out of memory is an error wrapping sim.ErrOutOfMemory, as
// in every package.
package dtr
