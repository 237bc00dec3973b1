package dtr

import (
	"context"
	"fmt"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// graphDriver runs a graph's default schedule on a runtime.
type graphDriver struct {
	g      *graph.Graph
	rt     *Runtime
	rec    *recorder
	toRT   []TensorID // graph tensor -> runtime tensor (-1 before creation)
	opOfRT []graph.OpID
}

// drive runs every op of g in order. cost gives each op's time in ns. Tensors
// from outside the step are constants (pinned); an op's inputs are released
// after their last consumer; tensors nobody consumes stay referenced.
func newDriver(g *graph.Graph, rt *Runtime) *graphDriver {
	d := &graphDriver{g: g, rt: rt, rec: &recorder{}, toRT: make([]TensorID, len(g.Tensors))}
	rt.rec = d.rec
	for i := range d.toRT {
		d.toRT[i] = -1
	}
	return d
}

func drive(ctx context.Context, d *graphDriver, cost func(graph.OpID) int64) (*graphDriver, error) {
	g, rt := d.g, d.rt
	last := make([]int32, len(g.Tensors))
	for i := range last {
		last[i] = -1
	}
	for i := range g.Ops {
		for _, in := range g.Ops[i].Inputs {
			last[in] = int32(i)
		}
	}
	ensureExt := func(t graph.TensorID) error {
		if d.toRT[t] >= 0 {
			return nil
		}
		tt := &g.Tensors[t]
		if tt.Producer != graph.NoOp {
			return fmt.Errorf("dtr static: tensor %d %q read before its producer ran", t, tt.Name)
		}
		d.rec.opMap = append(d.rec.opMap, graph.NoOp)
		d.rec.tenMap = append(d.rec.tenMap, t)
		id, err := rt.Constant(tt.StorageBytes())
		if err != nil {
			return err
		}
		d.toRT[t] = id
		return nil
	}
	var ins []TensorID
	var outs []Output
	for i := range g.Ops {
		if i&63 == 0 {
			if err := ctx.Err(); err != nil {
				return d, err
			}
		}
		o := &g.Ops[i]
		ins = ins[:0]
		for _, in := range o.Inputs {
			if err := ensureExt(in); err != nil {
				return d, err
			}
			ins = append(ins, d.toRT[in])
		}
		outs = outs[:0]
		for _, out := range o.Outputs {
			t := &g.Tensors[out]
			al := -1
			if t.AliasOf != graph.NoTensor {
				for j, in := range o.Inputs {
					if in == t.AliasOf {
						al = j
						break
					}
				}
			}
			b := t.Bytes
			if al >= 0 {
				b = 0
			}
			outs = append(outs, Output{Bytes: b, AliasOf: al})
		}
		d.rec.opMap = append(d.rec.opMap, graph.OpID(i))
		d.rec.tenMap = append(d.rec.tenMap, o.Outputs...)
		_, res, err := rt.Compute(ins, cost(graph.OpID(i)), outs)
		if err != nil {
			return d, fmt.Errorf("dtr static: op %d %q: %w", i, o.Name, err)
		}
		for j, out := range o.Outputs {
			d.toRT[out] = res[j]
		}
		for j, in := range o.Inputs {
			if last[in] == int32(i) && !dupIn(o.Inputs, j) && g.Tensors[in].Producer != graph.NoOp {
				if err := rt.Release(d.toRT[in]); err != nil {
					return d, err
				}
			}
		}
	}
	return d, nil
}

func dupIn(ins []graph.TensorID, j int) bool {
	for _, u := range ins[:j] {
		if u == ins[j] {
			return true
		}
	}
	return false
}

// Static runs DTR once on g's default schedule (op times from TimeNs, or 1 ns
// when unset) and exports what it did as a sim.Plan: every compute (first
// or again), free (evictions and eager frees) and swap, in order.
func Static(ctx context.Context, g *graph.Graph, cfg Config) (*sim.Plan, Stats, error) {
	rt, err := New(cfg, nil)
	if err != nil {
		return nil, Stats{}, err
	}
	d, err := drive(ctx, newDriver(g, rt), func(op graph.OpID) int64 {
		if t := g.Ops[op].TimeNs; t > 0 {
			return t
		}
		return 1
	})
	if err != nil {
		return nil, rt.Stats(), err
	}
	return &sim.Plan{Strategy: "dtr-static/" + cfg.Heuristic.String(), Steps: d.rec.steps}, rt.Stats(), nil
}
