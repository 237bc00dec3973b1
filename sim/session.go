package sim

import (
	"fmt"

	"github.com/remat-dev/remat/config"
)

// SessionGraph is one graph run of a session.
type SessionGraph struct {
	// Name identifies the graph in results.
	Name string
	// Peak is the graph's own memory need in bytes (its feature-map arena:
	// e.g. a Result's peak reserved memory).
	Peak int64
	// Dynamic marks a graph with dynamic shapes (policies 3 and 4 serve it
	// from the expanding pool); false means static shapes (policies 1, 2 and
	// 4 serve it from the reused arena).
	Dynamic bool
}

// Memory sources of a graph run under a session policy.
const (
	SourceDynamic = "dynamic" // allocated by actual size for the run
	SourceArena   = "arena"   // the session's reused static arena
	SourcePool    = "pool"    // the session's expanding pool
)

// SessionRun is what one graph run of a session held.
type SessionRun struct {
	// Name and Peak repeat the graph's.
	Name string
	Peak int64
	// Source is where the graph's memory came from: SourceDynamic,
	// SourceArena or SourcePool.
	Source string
	// Memory is the size of the memory the graph ran in: its own Peak for
	// SourceDynamic, the arena or pool size (after any growth) otherwise.
	Memory int64
	// Allocated is the bytes requested from the device for this run (a new
	// arena, a pool expansion or the run's dynamic allocation; 0 when the
	// arena or pool already sufficed).
	Allocated int64
	// Released is the bytes returned to the device before the run (an arena
	// released to be reallocated larger).
	Released int64
	// Held is the device memory held by the session while the graph ran.
	Held int64
}

// SessionResult is the device memory a session holds under a policy.
type SessionResult struct {
	// Policy is the effective policy (1 is reported as 2).
	Policy config.StaticPolicy
	// Concurrent repeats the PlanSession argument.
	Concurrent bool
	// Peak is the most device memory held at any time.
	Peak int64
	// Final is the memory still held at the end of the session (the arena
	// and the pool; dynamic allocations are released after each run).
	Final int64
	// Arena and Pool are the final sizes of the static arena and the
	// expanding pool (0 when the policy has none).
	Arena, Pool int64
	// DeviceAllocs counts device allocations (per-run dynamic allocations,
	// arena (re)allocations, pool expansions); DeviceBytes sums their sizes.
	DeviceAllocs int
	DeviceBytes  int64
	// Reallocations counts arena reallocations: a larger graph releasing the
	// arena to allocate a bigger one (the first allocation is not counted).
	Reallocations int
	// Expansions counts pool expansions, the first one included.
	Expansions int
	// Runs has one entry per graph, in order.
	Runs []SessionRun
}

// PlanSession computes the device memory held over a session that runs
// graphs (in order, or all at the same time when concurrent) under a GE
// static memory policy (GE_USE_STATIC_MEMORY's values, config.StaticPolicy:
// 0 dynamic, 2 one reused arena, 3 an expanding pool, 4 both; 1 behaves as 2).
//
// Sequentially, a dynamic allocation is held only while its graph runs; the
// arena and the pool are held from their first use to the end of the
// session. Concurrently, every graph holds its memory at once: policy 0 holds
// the sum of the peaks and policy 3's pool grows to the sum of the
// dynamic-shape graphs' peaks. Policies 1, 2 and 4 are rejected when
// concurrent, as GE does not support them for graphs running concurrently.
func PlanSession(graphs []SessionGraph, policy config.StaticPolicy, concurrent bool) (SessionResult, error) {
	if policy < config.StaticDynamic || policy > config.StaticArenaExpand {
		return SessionResult{}, fmt.Errorf("session: static memory policy %d: expected 0, 1, 2, 3 or 4", policy)
	}
	if eff := policy.Effective(); concurrent && (eff == config.StaticArena || eff == config.StaticArenaExpand) {
		return SessionResult{}, fmt.Errorf("session: static memory policy %d: not supported when graphs run concurrently (expected 0 or 3)", policy)
	}
	policy = policy.Effective()
	for i, g := range graphs {
		if g.Peak < 0 {
			return SessionResult{}, fmt.Errorf("session: graph %d (%q) Peak %d: expected >= 0", i, g.Name, g.Peak)
		}
	}
	useArena := policy == config.StaticArena || policy == config.StaticArenaExpand
	usePool := policy == config.StaticExpand || policy == config.StaticArenaExpand
	res := SessionResult{Policy: policy, Concurrent: concurrent, Runs: make([]SessionRun, len(graphs))}
	var dynHeld int64 // concurrent dynamic allocations held so far
	for i, g := range graphs {
		run := SessionRun{Name: g.Name, Peak: g.Peak}
		switch {
		case usePool && g.Dynamic:
			run.Source = SourcePool
			need := g.Peak
			if concurrent {
				// every pool user holds its part at once
				need = res.Pool + g.Peak
			}
			if need > res.Pool {
				run.Allocated = need - res.Pool
				res.Pool = need
				res.Expansions++
				res.DeviceAllocs++
				res.DeviceBytes += run.Allocated
			}
			run.Memory = res.Pool
		case useArena && !g.Dynamic:
			run.Source = SourceArena
			if g.Peak > res.Arena {
				if res.Arena > 0 {
					run.Released = res.Arena
					res.Reallocations++
				}
				run.Allocated = g.Peak
				res.Arena = g.Peak
				res.DeviceAllocs++
				res.DeviceBytes += g.Peak
			}
			run.Memory = res.Arena
		default:
			run.Source = SourceDynamic
			run.Allocated = g.Peak
			run.Memory = g.Peak
			res.DeviceAllocs++
			res.DeviceBytes += g.Peak
			if concurrent {
				dynHeld += g.Peak
			}
		}
		run.Held = res.Arena + res.Pool + dynHeld
		if run.Source == SourceDynamic && !concurrent {
			run.Held += g.Peak
		}
		if run.Held > res.Peak {
			res.Peak = run.Held
		}
		res.Runs[i] = run
	}
	res.Final = res.Arena + res.Pool
	return res, nil
}
