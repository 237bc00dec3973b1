package sim

import "github.com/remat-dev/remat/graph"

// StaleRead is a recompute that would read other data than the op's first
// run read: the storage of one of its inputs was written in place (by an op
// flagged graph.InPlace) between the two runs and not made again. PyTorch's
// autograd clones a tensor before an in-place op that destroys what a
// backward formula needs (the input of nn.Hardswish(inplace=True)); a plan
// that re-runs that clone in the backward pass from the kept, overwritten
// storage copies the in-place op's result instead, and remat_torch.apply
// refuses it.
type StaleRead struct {
	// Step is the index in Plan.Steps of the recompute.
	Step int
	// Op is the recomputed op, Tensor the input it reads.
	Op     graph.OpID
	Tensor graph.TensorID
	// Wrote is the op that last wrote Tensor's storage before Step
	// (FirstWrote before the first run's read).
	Wrote, FirstWrote graph.OpID
}

// StaleReads lists the stale reads of p on g (see StaleRead), in step
// order; nil when there are none. The last writer of a storage is the op
// that made it or an in-place op that wrote it since; a recompute reads
// fresh data when every input's storage has the same last writer as at the
// op's first run (a storage made again by a recompute of its producer,
// then rewritten by recomputes of its in-place ops, has). Steps that are
// not valid for g are skipped: Simulate reports them.
func StaleReads(g *graph.Graph, p *Plan) []StaleRead {
	if g == nil || p == nil {
		return nil
	}
	d := g.Dense()
	nt, no := d.NumTensors(), d.NumOps()
	root := d.Root
	writer := make([]graph.OpID, nt) // by storage: the op that last wrote it
	for i := range writer {
		writer[i] = graph.NoOp
	}
	// first[k]: the last writer of input k's storage at the op's first run
	// (inputs of op o at start[o]..start[o+1]).
	start := make([]int32, no+1)
	for i := 0; i < no; i++ {
		start[i+1] = start[i] + int32(len(d.Inputs(graph.OpID(i))))
	}
	first := make([]graph.OpID, start[no])
	ran := make([]bool, no)
	var out []StaleRead
	for si, s := range p.Steps {
		if s.Kind != Compute || s.Op < 0 || int(s.Op) >= no {
			continue
		}
		for k, in := range d.Inputs(s.Op) {
			if in < 0 || int(in) >= nt {
				continue
			}
			w, j := writer[root[in]], start[s.Op]+int32(k)
			if !ran[s.Op] {
				first[j] = w
			} else if w != first[j] {
				out = append(out, StaleRead{Step: si, Op: s.Op, Tensor: in, Wrote: w, FirstWrote: first[j]})
			}
		}
		ran[s.Op] = true
		inPlace := d.Flags[s.Op].Has(graph.InPlace)
		for _, t := range d.Outputs(s.Op) {
			if t < 0 || int(t) >= nt {
				continue
			}
			if r := root[t]; r == t || inPlace {
				writer[r] = s.Op
			}
		}
	}
	return out
}
