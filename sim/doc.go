// Package sim is remat's memory and time simulator. A Machine holds the live
// tensors of one graph, an allocator model (package sim/alloc: ideal,
// caching or static, behind one Allocator interface), a device profile with its
// roofline cost model, and two clocks (a compute stream and a copy stream for
// swaps). Static strategies emit a Plan (compute, free, swap out, swap in)
// that Simulate replays with validation; runtime strategies such as DTR drive
// the Machine directly. Either way the outcome is a Result: peak allocated
// and reserved memory, the time split into compute, recompute, swap and
// stall, counts, an optional per-step timeline and Chrome trace, and on
// failure where memory ran out and what was live.
//
// DefaultPlan is the baseline without any strategy. Plans serialize with
// EncodePlan / DecodePlan. Device profiles are built in (Device, Devices) or
// loaded from JSON (LoadProfile). docs/simulator.md describes the models.
package sim
