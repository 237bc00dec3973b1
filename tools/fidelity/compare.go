package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// sizeKey groups tensors by element type and bytes: the two graphs name and
// shape their tensors differently (ONNX node outputs vs aten kernels, [2 64
// 128] vs its [128 128] view), but a saved tensor is the same allocation in
// both.
type sizeKey struct {
	dt    graph.DType
	bytes int64
}

// savedStorages returns the storages of forward-phase tensors that some
// backward op reads: what autograd keeps from the forward to the backward
// pass. Sorted by tensor id.
func savedStorages(g *graph.Graph) []graph.TensorID {
	seen := make([]bool, len(g.Tensors))
	var out []graph.TensorID
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Phase != graph.Backward {
			continue
		}
		for _, in := range op.Inputs {
			r := g.StorageOf(in)
			rt := &g.Tensors[r]
			if seen[r] || rt.Producer == graph.NoOp || g.Ops[rt.Producer].Phase != graph.Forward {
				continue
			}
			seen[r] = true
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// bySize groups tensors by sizeKey, each with "producer_type name shape"
// descriptions in id order.
func bySize(g *graph.Graph, ids []graph.TensorID) map[sizeKey][]string {
	m := map[sizeKey][]string{}
	for _, id := range ids {
		t := &g.Tensors[id]
		typ := "-"
		if t.Producer != graph.NoOp {
			typ = g.Ops[t.Producer].Type
		}
		k := sizeKey{t.DType, t.Bytes}
		m[k] = append(m[k], fmt.Sprintf("%s %s %v", typ, t.Name, []int64(t.Shape)))
	}
	return m
}

// writeSizeDiff prints one line per (type, bytes) with the count in each
// graph, largest first; for counts that differ, up to three examples of
// each side. It returns the total bytes of a and b.
func writeSizeDiff(w io.Writer, a, b map[sizeKey][]string) (ta, tb int64) {
	var keys []sizeKey
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].bytes != keys[j].bytes {
			return keys[i].bytes > keys[j].bytes
		}
		return keys[i].dt < keys[j].dt
	})
	examples := func(l []string) string {
		if len(l) > 3 {
			return strings.Join(l[:3], "; ") + fmt.Sprintf("; ... (%d more)", len(l)-3)
		}
		return strings.Join(l, "; ")
	}
	for _, k := range keys {
		na, nb := len(a[k]), len(b[k])
		ta += int64(na) * k.bytes
		tb += int64(nb) * k.bytes
		mark := ""
		if na != nb {
			mark = "  differs"
		}
		fmt.Fprintf(w, "  %-5v %10d B  onnx %3d  trace %3d%s\n", k.dt, k.bytes, na, nb, mark)
		if na != nb {
			fmt.Fprintf(w, "      onnx:  %s\n      trace: %s\n", examples(a[k]), examples(b[k]))
		}
	}
	return ta, tb
}

// liveByKind sums the blocks live at the peak by kind, in sorted kind order.
func liveByKind(live []sim.LiveTensor) string {
	m := map[string]int64{}
	for _, l := range live {
		m[l.Kind] += l.Bytes
	}
	kinds := make([]string, 0, len(m))
	for k := range m {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// compare writes a tensor-by-tensor comparison of an imported graph with
// the trace of the same step (tools/export_torch.py): the saved tensors of
// each, by type and size; each graph's simulated peak (ideal allocator, no
// strategy), the op it is reached at and what is live then; and the forward
// tensors live at each peak, by type and size.
func compare(w io.Writer, imported, trace *graph.Graph) error {
	fmt.Fprintln(w, "saved forward tensors (storages a backward op reads), by type and bytes:")
	ta, tb := writeSizeDiff(w, bySize(imported, savedStorages(imported)), bySize(trace, savedStorages(trace)))
	fmt.Fprintf(w, "  total: onnx %d B, trace %d B, difference %+d B\n", ta, tb, ta-tb)
	var live [2]map[sizeKey][]string
	var peaks [2]int64
	for i, g := range []*graph.Graph{imported, trace} {
		res, err := sim.Simulate(g, sim.DefaultPlan(g), sim.Options{LiveAtPeak: true})
		if err != nil {
			return fmt.Errorf("simulating the %s graph: %w", []string{"onnx", "trace"}[i], err)
		}
		peaks[i] = res.PeakAllocated
		at := "before the first op"
		if res.PeakAllocatedOp >= 0 {
			op := &g.Ops[res.PeakAllocatedOp]
			at = fmt.Sprintf("op %d %q (%s, %v)", op.ID, op.Name, op.Type, op.Phase)
		}
		all := res.TopTensorsAtPeak(len(g.Tensors) + len(g.Ops) + 1)
		fmt.Fprintf(w, "%s peak %d B (%.3f MiB) at %s\n  live: %s\n", []string{"onnx", "trace"}[i],
			res.PeakAllocated, float64(res.PeakAllocated)/(1<<20), at, liveByKind(all))
		var ids []graph.TensorID
		for _, l := range all {
			if l.Tensor >= 0 && g.Tensors[l.Tensor].Kind == graph.Activation {
				ids = append(ids, l.Tensor)
			}
		}
		sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
		live[i] = bySize(g, ids)
	}
	fmt.Fprintf(w, "peak difference: %+d B (%+.2f%% of the trace's)\n", peaks[0]-peaks[1], 100*float64(peaks[0]-peaks[1])/float64(peaks[1]))
	fmt.Fprintln(w, "activations live at each peak, by type and bytes:")
	ta, tb = writeSizeDiff(w, live[0], live[1])
	fmt.Fprintf(w, "  total: onnx %d B, trace %d B, difference %+d B\n", ta, tb, ta-tb)
	return nil
}
