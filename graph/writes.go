package graph

// Writes indexes the in-place writes of a graph's forward pass: what a
// planner that recomputes forward ops needs to know so that a recompute
// reads what the op's first run read. An op writes a storage in place when
// it is flagged InPlace and one of its outputs aliases that storage (relu_,
// fill_ through a slice); the producer of a storage makes it.
type Writes struct {
	// Root[t] is the storage of tensor t (StorageOf; the graph's Dense
	// index, read-only).
	Root []TensorID
	// Last[r] is the last forward op that writes storage r in place, -1
	// if none does.
	Last []int32
	// Any reports whether some forward op writes in place.
	Any bool

	in0    []int32 // per op: index of its first input in before (the Dense index's, read-only)
	before []OpID
}

// ForwardWrites indexes g's forward in-place writes (see Writes). Tensor
// IDs out of range are skipped; a nil graph gives an empty index.
func ForwardWrites(g *Graph) *Writes {
	w := &Writes{}
	if g == nil {
		return w
	}
	d := g.Dense()
	nt, no := d.NumTensors(), d.NumOps()
	w.Root, w.Last = d.Root, make([]int32, nt)
	writer := make([]OpID, nt) // by storage: the op that last made or wrote it
	for i := range w.Last {
		w.Last[i], writer[i] = -1, NoOp
	}
	w.in0 = d.inStart
	w.before = make([]OpID, len(d.ins))
	for i := range w.before {
		w.before[i] = NoOp
	}
	for i := 0; i < no; i++ {
		if d.Phase[i] != Forward {
			continue
		}
		for k, t := range d.Inputs(OpID(i)) {
			if t >= 0 && int(t) < nt {
				w.before[w.in0[i]+int32(k)] = writer[w.Root[t]]
			}
		}
		for _, t := range d.Outputs(OpID(i)) {
			if t < 0 || int(t) >= nt {
				continue
			}
			switch r := w.Root[t]; {
			case r == t:
				writer[r] = OpID(i)
			case d.Flags[i].Has(InPlace):
				writer[r], w.Last[r], w.Any = OpID(i), int32(i), true
			}
		}
	}
	return w
}

// Before returns the op that last made or wrote in place the storage of
// op's input k when op ran in the forward pass: the storage's producer, an
// in-place op after it, or NoOp (a storage resident from the start and not
// written yet, an op outside the forward pass, or an index out of range).
func (w *Writes) Before(op OpID, k int) OpID {
	if w == nil || op < 0 || int(op)+1 >= len(w.in0) {
		return NoOp
	}
	j := w.in0[op] + int32(k)
	if k < 0 || j >= w.in0[op+1] {
		return NoOp
	}
	return w.before[j]
}
