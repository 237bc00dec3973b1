package dtr

import (
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// recorder logs what the runtime did as plan steps, for Static.
type recorder struct {
	top bool
	// noSteps: keep no steps (a run on a Machine, which measures itself)
	noSteps bool
	opMap   []graph.OpID     // runtime op -> graph op (NoOp for constants)
	tenMap  []graph.TensorID // runtime tensor -> graph tensor
	steps   []sim.Step
}

func (r *recorder) tensor(t int32) graph.TensorID {
	if int(t) < len(r.tenMap) {
		return r.tenMap[t]
	}
	return graph.NoTensor
}

func (r *recorder) free(t int32) {
	if g := r.tensor(t); !r.noSteps && g != graph.NoTensor {
		r.steps = append(r.steps, sim.FreeStep(g))
	}
}
func (r *recorder) swapIn(t int32) {
	if g := r.tensor(t); !r.noSteps && g != graph.NoTensor {
		r.steps = append(r.steps, sim.SwapInStep(g))
	}
}
func (r *recorder) swapOut(t int32) {
	if g := r.tensor(t); !r.noSteps && g != graph.NoTensor {
		r.steps = append(r.steps, sim.SwapOutStep(g))
	}
}
func (r *recorder) compute(op int32) {
	if !r.noSteps && int(op) < len(r.opMap) && r.opMap[op] != graph.NoOp {
		r.steps = append(r.steps, sim.ComputeStep(r.opMap[op]))
	}
}
