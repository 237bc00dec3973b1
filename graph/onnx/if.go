package onnx

import "fmt"

// maxIfDepth bounds the nesting of If nodes the importer follows.
const maxIfDepth = 16

// opIf converts an If whose condition is known at import time into the
// nodes of the branch it takes. torch.onnx emits If for a Python branch on
// shapes (F.local_response_norm tests its input's rank), and the importer's
// constant folding resolves such a condition; a condition known only when
// the model runs is data-dependent control flow, unsupported. The branch's
// nodes read the enclosing graph's values by name, as ONNX scoping says.
func opIf(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	c, err := input(in, 0, "cond")
	if err != nil {
		return nil, err
	}
	cv, ok := constScalar(c)
	if !ok {
		return nil, fmt.Errorf("condition %q is not known at import time: data-dependent control flow is %w", c.name, ErrUnsupported)
	}
	branch := "else_branch"
	if cv != 0 {
		branch = "then_branch"
	}
	a := findAttr(n, branch)
	if a == nil || a.GetG() == nil {
		return nil, fmt.Errorf("attribute %s (a graph) is missing", branch)
	}
	if imp.ifDepth >= maxIfDepth {
		return nil, fmt.Errorf("If nodes nested deeper than %d", maxIfDepth)
	}
	g := a.GetG()
	nodes, cur, fused, deferred := imp.nodes, imp.cur, imp.fused, imp.deferred
	imp.nodes, imp.fused, imp.deferred = g.GetNode(), make([]bool, len(g.GetNode())), make([]bool, len(g.GetNode()))
	imp.ifDepth++
	defer func() {
		imp.nodes, imp.cur, imp.fused, imp.deferred = nodes, cur, fused, deferred
		imp.ifDepth--
	}()
	for i, bn := range imp.nodes {
		if imp.fused[i] {
			continue
		}
		imp.cur = i
		if !defaultDomain(bn) || !supported(bn.GetOpType()) {
			op := bn.GetOpType()
			if !defaultDomain(bn) {
				op = bn.GetDomain() + "::" + op // as checkSupported names it
			}
			return nil, fmt.Errorf("%s node %d %q: op type %s is %w", branch, i, bn.GetName(), op, ErrUnsupported)
		}
		if err := imp.node(bn); err != nil {
			return nil, fmt.Errorf("%s node %d %q (%s): %w", branch, i, bn.GetName(), bn.GetOpType(), err)
		}
	}
	outs := make([]*value, len(g.GetOutput()))
	for i, o := range g.GetOutput() {
		if outs[i] = imp.vals[o.GetName()]; outs[i] == nil {
			return nil, fmt.Errorf("%s output %q is not produced by the branch or the enclosing graph", branch, o.GetName())
		}
	}
	if len(outs) < len(n.GetOutput()) {
		return nil, fmt.Errorf("%s has %d outputs, the node %d", branch, len(outs), len(n.GetOutput()))
	}
	return outs, nil
}

// countUses adds one use per input of nodes, and of the nodes of their
// graph attributes (If branches), to users.
func countUses(nodes []*NodeProto, users map[string]int, depth int) {
	for _, n := range nodes {
		for _, in := range n.GetInput() {
			if in != "" {
				users[in]++
			}
		}
		if depth >= maxIfDepth {
			continue
		}
		for _, a := range n.GetAttribute() {
			if g := a.GetG(); g != nil {
				countUses(g.GetNode(), users, depth+1)
				for _, o := range g.GetOutput() {
					users[o.GetName()]++
				}
			}
		}
	}
}
