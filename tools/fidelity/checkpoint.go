package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

// region is one checkpointed part of the model: the forward ops of module
// Module (lo < 0), or of its children Module.lo .. Module.hi.
type region struct {
	Module string
	lo, hi int
}

func (r region) String() string {
	if r.lo < 0 {
		return r.Module
	}
	return fmt.Sprintf("%s.%d-%d", r.Module, r.lo, r.hi)
}

// parseRegions reads "MODULE;MODULE.A-B;...".
func parseRegions(spec string) ([]region, error) {
	var out []region
	for _, p := range strings.Split(spec, ";") {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("%q: empty region; expected MODULE or MODULE.A-B separated by ';'", spec)
		}
		r := region{Module: p, lo: -1, hi: -1}
		if i := strings.LastIndexByte(p, '.'); i > 0 {
			if a, b, ok := strings.Cut(p[i+1:], "-"); ok {
				lo, err1 := strconv.Atoi(a)
				hi, err2 := strconv.Atoi(b)
				if err1 != nil || err2 != nil || lo < 0 || hi < lo {
					return nil, fmt.Errorf("region %q: expected MODULE.A-B with 0 <= A <= B", p)
				}
				r = region{Module: p[:i], lo: lo, hi: hi}
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// sequentialRegions gives the regions of
// torch.utils.checkpoint.checkpoint_sequential(MODULE, K) over a Sequential
// of N children: segments of N/K children (torch: segment_size =
// len(functions) // segments), all but the last checkpointed.
func sequentialRegions(spec string) ([]region, error) {
	parts := strings.Split(spec, ":")
	if len(parts) != 3 {
		return nil, fmt.Errorf("%q: expected MODULE:N:K", spec)
	}
	n, err1 := strconv.Atoi(parts[1])
	k, err2 := strconv.Atoi(parts[2])
	if parts[0] == "" || err1 != nil || err2 != nil || n <= 0 || k <= 0 || k > n {
		return nil, fmt.Errorf("%q: expected MODULE:N:K with N > 0 and 0 < K <= N", spec)
	}
	size := n / k
	var out []region
	for s := 0; s < k-1; s++ {
		out = append(out, region{Module: parts[0], lo: s * size, hi: s*size + size - 1})
	}
	return out, nil
}

// inRegion reports whether an ONNX node name (torch.onnx scopes:
// "/features/features.3/Conv", "/layer1/layer1.0/conv1/Conv") lies in r.
func inRegion(name string, r region) bool {
	comps := strings.Split(name, "/")
	if len(comps) > 0 {
		comps = comps[:len(comps)-1] // the op's own name
	}
	for _, c := range comps {
		if r.lo < 0 {
			if c == r.Module {
				return true
			}
			continue
		}
		rest, ok := strings.CutPrefix(c, r.Module+".")
		if !ok {
			continue
		}
		if i, err := strconv.Atoi(rest); err == nil && i >= r.lo && i <= r.hi {
			return true
		}
	}
	return false
}

// checkpointPlan builds the plan of torch.utils.checkpoint
// (use_reentrant=False) around each region: the forward ops of a region run
// once in the forward pass, keeping only what ops outside the region read,
// and again, all of them in order, right before the first backward op that
// differentiates one of them (when autograd first unpacks a tensor the
// region saved); PlanFromSchedule frees every tensor after its last read
// before it is re-created, so the first run keeps only the region's output
// and inputs.
func checkpointPlan(g *graph.Graph, regions []region) (*sim.Plan, error) {
	regOf := make([]int, len(g.Ops))
	count := make([]int, len(regions))
	for i := range g.Ops {
		regOf[i] = -1
		op := &g.Ops[i]
		if op.Phase != graph.Forward {
			continue
		}
		for j, r := range regions {
			if inRegion(op.Name, r) {
				if regOf[i] >= 0 {
					return nil, fmt.Errorf("op %q lies in regions %s and %s: regions must not overlap", op.Name, regions[regOf[i]], r)
				}
				regOf[i] = j
				count[j]++
			}
		}
	}
	for j, r := range regions {
		if count[j] == 0 {
			return nil, fmt.Errorf("region %s: no forward op of the graph lies in it (ONNX scopes look like /MODULE/MODULE.0/...)", r)
		}
	}
	var order []graph.OpID
	done := make([]bool, len(regions))
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Phase == graph.Backward && op.Forward != graph.NoOp {
			if s := regOf[op.Forward]; s >= 0 && !done[s] {
				done[s] = true
				for j := range g.Ops {
					if regOf[j] == s {
						order = append(order, graph.OpID(j))
					}
				}
			}
		}
		order = append(order, graph.OpID(i))
	}
	names := make([]string, len(regions))
	for i, r := range regions {
		names[i] = r.String()
	}
	return sim.PlanFromSchedule(g, "checkpoint "+strings.Join(names, ";"), order)
}
