package onnx

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/remat-dev/remat/graph"
)

// Fusions: torch.onnx decomposes some aten ops whose autograd saves far less
// than the decomposition's element-wise ops would. Converted node by node,
// every intermediate of the decomposition becomes a tensor some backward
// reads (a Div saves both operands, an Erf its input, a Mul both operands),
// where PyTorch's autograd saves only what the one aten op saves. The
// importer recognises the exact node patterns torch.onnx's symbolic
// functions emit and converts each as the one op:
//
//   - GELU (opset < 20, torch's symbolic gelu): Div(x, sqrt 2) -> Erf ->
//     Add(., 1) -> Mul(x, .) -> Mul(., 0.5) becomes gelu(x), which saves x
//     (derivatives.yaml: gelu_backward(grad, self)).
//   - GELU with approximate="tanh": Mul(x, x) -> Mul(x, .) -> Mul(., kappa)
//     -> Add(x, .) -> Mul(., beta) -> Tanh -> Add(., 1) -> Mul(x, .) ->
//     Mul(., 0.5) becomes gelu(x, approximate=tanh) (a hand-written
//     0.5*x*(1+tanh(...)) with Pow(x, 3), as GPT-2's NewGELUActivation, is
//     not this pattern: PyTorch saves its intermediates).
//   - LayerNorm (opset < 17, torch's symbolic native_layer_norm):
//     ReduceMean(x) -> Sub(x, mean) -> Pow(., 2) -> ReduceMean -> Add(., eps)
//     -> Sqrt -> Div(diff, .) [-> Mul(., weight) -> Add(., bias)] becomes
//     layernorm(x[, weight, bias]) -> (y, mean, rstd), which saves x, mean,
//     rstd, weight and bias (native_layer_norm_backward); node by node the
//     normalization without the affine part would save the difference, the
//     square root and the quotient.
//   - SiLU (torch's symbolic silu): Sigmoid(x) -> Mul(x, .) becomes silu(x),
//     which saves x; node by node the Mul would save the sigmoid's output
//     too.
//   - chunk (torch's symbolic prim_constant_chunk, opset >= 11): Slice(x,
//     start, end_1, axis), Slice(x, end_1, end_2, axis), ... where each
//     Slice starts at the very value the one before ends at, the first at
//     0, and the last ends at the axis's size, becomes one split of x,
//     whose backward (SplitBackward) makes x's gradient at once; node by
//     node each Slice's backward would make a gradient of x's size, summed
//     pairwise. Python slicing (x[..., :h], x[..., h:]) exports Slices with
//     constants of their own (and a steps input), which stay Slices, as
//     PyTorch runs them (one SliceBackward each).
//   - rsqrt (torch's symbolic rsqrt): Sqrt(x) -> Div(1, .) becomes
//     rsqrt(x), which saves its result (RMSNorm's x * rsqrt(mean(x^2) +
//     eps)); node by node the Sqrt's output and the quotient would both be
//     saved.
//   - binary_cross_entropy_with_logits (torch's symbolic, no weight and no
//     pos_weight): Sigmoid(x) -> Log, Sub(1, .) -> Log; Sub(1, t);
//     Mul(t, log sigmoid) and Mul(1 - t, log(1 - sigmoid)) -> Add -> Neg
//     [-> ReduceMean or ReduceSum over every axis] becomes
//     binary_cross_entropy_with_logits(x, t), which saves x and t; its
//     forward kernel's temporaries are sim's (autogradWorkspace); node by
//     node the sigmoid, both logarithms and both products would be saved.
//   - cosine_similarity (torch's symbolic): ReduceSum(Mul(x1, x2)),
//     ReduceSum(Mul(x1, x1)) and ReduceSum(Mul(x2, x2)) over one axis, the
//     last two -> Mul -> Sqrt -> Max(., eps), Div(the first, .) becomes
//     what ATen's cosine_similarity runs: pow and sum of each operand, the
//     square root of each, each operand divided by its norm, the product of
//     the quotients and its sum. The product's backward reads both
//     quotients (of the operands' size), which node by node never exist.
//   - GroupNorm (torch's symbolic group_norm): Reshape(x, [N, G, -1]) ->
//     InstanceNormalization(., ones(G), zeros(G)) -> Reshape(., shape of x)
//     [-> Mul(., weight unsqueezed to [C, 1, ...]) -> Add(., bias unsqueezed)]
//     becomes group_norm(x, weight, bias) -> (y, mean, rstd), which saves
//     x, weight, mean and rstd (native_group_norm_backward); node by node
//     the Mul would also save the normalized tensor.
//
// A pattern is matched on structure first (op types, operands, and every
// intermediate read by exactly the next node of the pattern and by nothing
// else, graph outputs included); its nodes except the last are deferred and
// the fused op is emitted where the last one stands, once every constant it
// needs is known. If a constant does not match (an exponent other than 2, a
// divisor other than sqrt 2, reduction axes that are not the trailing
// normalized dimensions), the deferred nodes are converted one by one as
// usual. A hand-written formula with the same nodes in the same order is
// indistinguishable in ONNX and is fused too; other associations (0.5 * x
// first, say) are not.

// fusion is a group of nodes converted as one op.
type fusion struct {
	// emit converts the group at its last node: (true, nil) once the fused
	// op is emitted, false when a constant does not match (the nodes are
	// then converted one by one).
	emit  func(*importer, *fusion) (bool, error)
	nodes []int // node indices, increasing; the last is the anchor
	// Roles (node indices) for the checks made at the anchor.
	role map[string]int
}

// readerIndex maps each value name to the nodes reading it (a node reading
// a value twice appears twice).
func (imp *importer) readerIndex() map[string][]int {
	r := map[string][]int{}
	for i, n := range imp.nodes {
		for _, in := range n.GetInput() {
			if in != "" {
				r[in] = append(r[in], i)
			}
		}
	}
	return r
}

// findFusions marks the nodes of every recognised pattern: imp.deferred for
// all but the last, imp.fusions for the last.
func (imp *importer) findFusions() {
	readers := imp.readerIndex()
	var producers map[string]int // built when a pattern needs it
	imp.deferred = make([]bool, len(imp.nodes))
	imp.fusions = map[int]*fusion{}
	taken := make([]bool, len(imp.nodes))
	for i, n := range imp.nodes {
		if taken[i] || !defaultDomain(n) {
			continue
		}
		var f *fusion
		switch n.GetOpType() {
		case "ReduceMean":
			if f = imp.matchLayerNorm(i, readers); f == nil {
				f = imp.matchVar(i, readers)
			}
		case "Div":
			if f = imp.matchGELU(i, readers); f == nil {
				if producers == nil {
					producers = imp.producerIndex()
				}
				f = imp.matchCosine(i, readers, producers)
			}
		case "Mul":
			f = imp.matchGELUTanh(i, readers)
		case "Sigmoid":
			if f = imp.matchSiLU(i, readers); f == nil {
				if producers == nil {
					producers = imp.producerIndex()
				}
				f = imp.matchBCEWithLogits(i, readers, producers)
			}
		case "Softplus":
			f = imp.matchMish(i, readers)
		case "ScatterElements":
			f = imp.matchScatterAdd(i, readers)
		case "Slice":
			f = imp.matchChunk(i, readers)
		case "Sqrt":
			f = imp.matchRsqrt(i, readers)
		case "InstanceNormalization":
			if producers == nil {
				producers = imp.producerIndex()
			}
			f = imp.matchGroupNorm(i, readers, producers)
		}
		if f == nil {
			continue
		}
		clash := false
		for _, j := range f.nodes {
			clash = clash || taken[j]
		}
		if clash {
			continue
		}
		for _, j := range f.nodes {
			taken[j] = true
		}
		last := f.nodes[len(f.nodes)-1]
		for _, j := range f.nodes[:len(f.nodes)-1] {
			imp.deferred[j] = true
		}
		imp.fusions[last] = f
	}
}

// producerIndex maps each node output's name to its node.
func (imp *importer) producerIndex() map[string]int {
	p := map[string]int{}
	for i, n := range imp.nodes {
		for _, o := range n.GetOutput() {
			if o != "" {
				p[o] = i
			}
		}
	}
	return p
}

func defaultDomain(n *NodeProto) bool {
	d := n.GetDomain()
	return d == "" || d == "ai.onnx"
}

// is reports whether node j has op type typ in the default domain and
// exactly one output.
func (imp *importer) is(j int, typ string, nin int) bool {
	if j < 0 || j >= len(imp.nodes) {
		return false
	}
	n := imp.nodes[j]
	if n.GetOpType() != typ || !defaultDomain(n) || len(n.GetOutput()) < 1 || n.GetOutput()[0] == "" {
		return false
	}
	if nin < 0 {
		return len(n.GetInput()) >= 1 && n.GetInput()[0] != ""
	}
	return len(n.GetInput()) == nin
}

// soleReader returns the one node reading value name when nothing else (no
// other node, no graph output) reads it; -1 otherwise.
func (imp *importer) soleReader(name string, readers map[string][]int) int {
	r := readers[name]
	if len(r) != 1 || imp.users[name] != 1 {
		return -1
	}
	return r[0]
}

func out0(n *NodeProto) string { return n.GetOutput()[0] }

// other returns the operand of a two-input node that is not name ("" if
// neither or both are).
func other(n *NodeProto, name string) string {
	in := n.GetInput()
	if len(in) != 2 {
		return ""
	}
	switch {
	case in[0] == name && in[1] != name:
		return in[1]
	case in[1] == name && in[0] != name:
		return in[0]
	}
	return ""
}

// matchGELU matches torch's GELU decomposition starting at the Div node i.
func (imp *importer) matchGELU(i int, readers map[string][]int) *fusion {
	if !imp.is(i, "Div", 2) {
		return nil
	}
	div := imp.nodes[i]
	x := div.GetInput()[0]
	erf := imp.soleReader(out0(div), readers)
	if !imp.is(erf, "Erf", 1) {
		return nil
	}
	add := imp.soleReader(out0(imp.nodes[erf]), readers)
	if !imp.is(add, "Add", 2) || other(imp.nodes[add], out0(imp.nodes[erf])) == "" {
		return nil
	}
	mul1 := imp.soleReader(out0(imp.nodes[add]), readers)
	if !imp.is(mul1, "Mul", 2) || other(imp.nodes[mul1], out0(imp.nodes[add])) != x {
		return nil
	}
	mul2 := imp.soleReader(out0(imp.nodes[mul1]), readers)
	if !imp.is(mul2, "Mul", 2) || other(imp.nodes[mul2], out0(imp.nodes[mul1])) == "" {
		return nil
	}
	return &fusion{emit: (*importer).fuseGELU, nodes: sortedNodes(i, erf, add, mul1, mul2),
		role: map[string]int{"div": i, "erf": erf, "add": add, "mul1": mul1, "mul2": mul2}}
}

// matchGELUTanh matches torch's decomposition of gelu(x,
// approximate="tanh") starting at Mul(x, x): x*x*x by two Muls, Mul by
// kappa, Add(x, .), Mul by beta, Tanh, Add(1, .), Mul(x, .), Mul by 0.5.
func (imp *importer) matchGELUTanh(i int, readers map[string][]int) *fusion {
	if !imp.is(i, "Mul", 2) || imp.nodes[i].GetInput()[0] != imp.nodes[i].GetInput()[1] {
		return nil
	}
	x := imp.nodes[i].GetInput()[0]
	role := map[string]int{"sq": i}
	cur := i
	// Each step: the sole reader of the previous output, its op type, and
	// the other operand (x, or a constant checked at the anchor).
	for _, st := range []struct {
		role, op string
		withX    bool
	}{
		{"cube", "Mul", true}, {"kappa", "Mul", false}, {"inner", "Add", true}, {"beta", "Mul", false},
		{"tanh", "Tanh", false}, {"one", "Add", false}, {"mul", "Mul", true}, {"half", "Mul", false},
	} {
		next := imp.soleReader(out0(imp.nodes[cur]), readers)
		nin := 2
		if st.op == "Tanh" {
			nin = 1
		}
		if !imp.is(next, st.op, nin) {
			return nil
		}
		if nin == 2 {
			o := other(imp.nodes[next], out0(imp.nodes[cur]))
			if o == "" || (st.withX != (o == x)) {
				return nil
			}
		}
		role[st.role] = next
		cur = next
	}
	nodes := make([]int, 0, len(role))
	for _, j := range role {
		nodes = append(nodes, j)
	}
	return &fusion{emit: (*importer).fuseGELUTanh, nodes: sortedNodes(nodes...), role: role}
}

// meanDiff matches ReduceMean(x) -> Sub(x, mean) at node i whose
// difference two node inputs read (and nothing else): the Sub node, the
// difference's name and its two readers; sub is -1 when it does not match.
func (imp *importer) meanDiff(i int, readers map[string][]int) (sub int, diff string, rd []int) {
	if !imp.is(i, "ReduceMean", -1) {
		return -1, "", nil
	}
	r1 := imp.nodes[i]
	x, mean := r1.GetInput()[0], out0(r1)
	sub = imp.soleReader(mean, readers)
	if !imp.is(sub, "Sub", 2) || imp.nodes[sub].GetInput()[0] != x || imp.nodes[sub].GetInput()[1] != mean {
		return -1, "", nil
	}
	diff = out0(imp.nodes[sub])
	rd = readers[diff]
	if len(rd) != 2 || imp.users[diff] != 2 {
		return -1, "", nil
	}
	return sub, diff, rd
}

// matchLayerNorm matches torch's layer_norm decomposition starting at the
// first ReduceMean (node i).
func (imp *importer) matchLayerNorm(i int, readers map[string][]int) *fusion {
	sub, diff, rd := imp.meanDiff(i, readers)
	if sub < 0 {
		return nil
	}
	pow, div := rd[0], rd[1]
	if imp.is(div, "Pow", 2) {
		pow, div = div, pow
	}
	if !imp.is(pow, "Pow", 2) || imp.nodes[pow].GetInput()[0] != diff || !imp.is(div, "Div", 2) || imp.nodes[div].GetInput()[0] != diff {
		return nil
	}
	r2 := imp.soleReader(out0(imp.nodes[pow]), readers)
	if !imp.is(r2, "ReduceMean", -1) || imp.nodes[r2].GetInput()[0] != out0(imp.nodes[pow]) {
		return nil
	}
	addEps := imp.soleReader(out0(imp.nodes[r2]), readers)
	if !imp.is(addEps, "Add", 2) || other(imp.nodes[addEps], out0(imp.nodes[r2])) == "" {
		return nil
	}
	sqrt := imp.soleReader(out0(imp.nodes[addEps]), readers)
	if !imp.is(sqrt, "Sqrt", 1) || imp.soleReader(out0(imp.nodes[sqrt]), readers) != div || imp.nodes[div].GetInput()[1] != out0(imp.nodes[sqrt]) {
		return nil
	}
	role := map[string]int{"mean": i, "sub": sub, "pow": pow, "var": r2, "eps": addEps, "sqrt": sqrt, "div": div}
	// The affine part: Mul by a weight, then Add of a bias, each a weight
	// (a graph input or initializer) and each optional, as torch exports
	// F.layer_norm(x, shape, weight, bias) with either left None (nanoGPT's
	// LayerNorm without bias: the Mul alone); without both
	// (elementwise_affine=False) the pattern ends at the Div.
	weight := func(name string) bool {
		v := imp.vals[name]
		return v != nil && v.kind == graph.Parameter
	}
	nodes := []int{i, sub, pow, r2, addEps, sqrt, div}
	last := div
	if mul := imp.soleReader(out0(imp.nodes[last]), readers); imp.is(mul, "Mul", 2) && weight(other(imp.nodes[mul], out0(imp.nodes[last]))) {
		role["mul"], last = mul, mul
		nodes = append(nodes, mul)
	}
	if add := imp.soleReader(out0(imp.nodes[last]), readers); imp.is(add, "Add", 2) && weight(other(imp.nodes[add], out0(imp.nodes[last]))) {
		role["add"] = add
		nodes = append(nodes, add)
	}
	return &fusion{emit: (*importer).fuseLayerNorm, nodes: sortedNodes(nodes...), role: role}
}

// matchChunk matches torch's export of x.chunk(k, dim) at its first Slice
// (node i): Slices of x over the same axes value with no steps input, each
// starting at the value the previous one ends at (read by nothing else).
// No output of a Slice of the chain may be read before the last Slice,
// where the split is emitted; fuseChunk checks the bounds' values.
func (imp *importer) matchChunk(i int, readers map[string][]int) *fusion {
	first := imp.nodes[i]
	in := first.GetInput()
	if !imp.is(i, "Slice", 4) || in[1] == "" || in[2] == "" || in[3] == "" {
		return nil
	}
	nodes := []int{i}
	for cur := i; ; {
		end := imp.nodes[cur].GetInput()[2]
		next := -1
		for _, r := range readers[end] {
			if r != cur && imp.is(r, "Slice", 4) {
				if ni := imp.nodes[r].GetInput(); ni[0] == in[0] && ni[1] == end && ni[3] == in[3] {
					next = r
				}
			}
		}
		// the end is read by this Slice and the next one alone
		if next < 0 || len(readers[end]) != 2 || imp.users[end] != 2 || next <= cur {
			break
		}
		nodes = append(nodes, next)
		cur = next
	}
	if len(nodes) < 2 {
		return nil
	}
	last := nodes[len(nodes)-1]
	for _, j := range nodes {
		for _, r := range readers[out0(imp.nodes[j])] {
			if r < last {
				return nil
			}
		}
	}
	return &fusion{emit: (*importer).fuseChunk, nodes: nodes, role: map[string]int{"first": i, "last": last}}
}

// fuseChunk emits the split of a matched chunk when its bounds are
// constants: one axis, the first start 0, each piece non-empty, the last
// end at or past the axis's size.
func (imp *importer) fuseChunk(f *fusion) (bool, error) {
	first := imp.nodes[f.role["first"]]
	x := imp.vals[first.GetInput()[0]]
	if x == nil || x.isConst || len(x.shape) == 0 {
		return false, nil
	}
	axes, err := constInts(imp.vals[first.GetInput()[3]], "axes")
	if err != nil || len(axes) != 1 {
		return false, nil
	}
	axis, err := normAxis(axes[0], len(x.shape), "axis")
	if err != nil {
		return false, nil
	}
	d := x.shape[axis]
	var sizes []int64
	start := int64(0)
	for k, j := range f.nodes {
		n := imp.nodes[j]
		st, err1 := constInts(imp.vals[n.GetInput()[1]], "starts")
		en, err2 := constInts(imp.vals[n.GetInput()[2]], "ends")
		if err1 != nil || err2 != nil || len(st) != 1 || len(en) != 1 || st[0] != start {
			return false, nil
		}
		end := min(en[0], d)
		if k == len(f.nodes)-1 && en[0] < d || end <= start {
			return false, nil
		}
		sizes = append(sizes, end-start)
		start = end
	}
	outs := make([]string, len(f.nodes))
	for k, j := range f.nodes {
		outs[k] = out0(imp.nodes[j])
	}
	// named after the first Slice: a module's chunks share its prefix
	n := &NodeProto{Name: proto.String(first.GetName()), OpType: proto.String("Split"), Output: outs}
	vs, err := imp.split(n, x, axis, sizes)
	if err != nil {
		return false, err
	}
	return true, imp.bind(n, vs)
}

// matchRsqrt matches Sqrt(x) -> Div(c, .) at the Sqrt node i; fuseRsqrt
// checks that c is 1.
func (imp *importer) matchRsqrt(i int, readers map[string][]int) *fusion {
	if !imp.is(i, "Sqrt", 1) {
		return nil
	}
	s := out0(imp.nodes[i])
	div := imp.soleReader(s, readers)
	if !imp.is(div, "Div", 2) || imp.nodes[div].GetInput()[1] != s || imp.nodes[div].GetInput()[0] == s {
		return nil
	}
	return &fusion{emit: (*importer).fuseRsqrt, nodes: sortedNodes(i, div), role: map[string]int{"sqrt": i, "div": div}}
}

func (imp *importer) fuseRsqrt(f *fusion) (bool, error) {
	x := imp.vals[imp.nodes[f.role["sqrt"]].GetInput()[0]]
	one, ok := constScalar(imp.vals[imp.nodes[f.role["div"]].GetInput()[0]])
	if x == nil || x.isConst || !isFloatType(x.et) || !ok || one != 1 {
		return false, nil
	}
	return imp.emitFused(f, "Rsqrt", OpRsqrt, []*value{x}, x.shape, 2*numel(x.shape))
}

// matchSiLU matches x * sigmoid(x) at the Sigmoid node i.
func (imp *importer) matchSiLU(i int, readers map[string][]int) *fusion {
	if !imp.is(i, "Sigmoid", 1) {
		return nil
	}
	x, sig := imp.nodes[i].GetInput()[0], out0(imp.nodes[i])
	mul := imp.soleReader(sig, readers)
	if !imp.is(mul, "Mul", 2) || other(imp.nodes[mul], sig) != x {
		return nil
	}
	return &fusion{emit: (*importer).fuseSiLU, nodes: sortedNodes(i, mul), role: map[string]int{"sigmoid": i, "mul": mul}}
}

// matchBCEWithLogits matches torch's export of
// binary_cross_entropy_with_logits(x, t) without weight or pos_weight
// (symbolic opset 9) at its Sigmoid node i:
//
//	s = Sigmoid(x); ls = Log(s); q = Sub(1, s); lq = Log(q); u = Sub(1, t)
//	a = Mul(t, ls); b = Mul(u, lq); c = Add(a, b); y = Neg(c)
//	[loss = ReduceMean(y) or ReduceSum(y), over every axis, keepdims 0]
//
// s read by the Log and the Sub alone, every other intermediate by its one
// consumer in the pattern; the constants (1) are checked at emission.
func (imp *importer) matchBCEWithLogits(i int, readers map[string][]int, producers map[string]int) *fusion {
	if !imp.is(i, "Sigmoid", 1) {
		return nil
	}
	s := out0(imp.nodes[i])
	rs := readers[s]
	if len(rs) != 2 || imp.users[s] != 2 {
		return nil
	}
	logS, subS := rs[0], rs[1]
	if imp.is(logS, "Sub", 2) {
		logS, subS = subS, logS
	}
	if !imp.is(logS, "Log", 1) || !imp.is(subS, "Sub", 2) || imp.nodes[subS].GetInput()[1] != s || imp.nodes[subS].GetInput()[0] == s {
		return nil
	}
	logQ := imp.soleReader(out0(imp.nodes[subS]), readers)
	if !imp.is(logQ, "Log", 1) {
		return nil
	}
	ls, lq := out0(imp.nodes[logS]), out0(imp.nodes[logQ])
	mulA, mulB := imp.soleReader(ls, readers), imp.soleReader(lq, readers)
	if !imp.is(mulA, "Mul", 2) || !imp.is(mulB, "Mul", 2) || mulA == mulB {
		return nil
	}
	t, u := other(imp.nodes[mulA], ls), other(imp.nodes[mulB], lq)
	subT, ok := producers[u]
	if t == "" || u == "" || !ok || !imp.is(subT, "Sub", 2) || imp.nodes[subT].GetInput()[1] != t || imp.soleReader(u, readers) != mulB {
		return nil
	}
	add := imp.soleReader(out0(imp.nodes[mulA]), readers)
	if !imp.is(add, "Add", 2) || imp.soleReader(out0(imp.nodes[mulB]), readers) != add || other(imp.nodes[add], out0(imp.nodes[mulA])) != out0(imp.nodes[mulB]) {
		return nil
	}
	neg := imp.soleReader(out0(imp.nodes[add]), readers)
	if !imp.is(neg, "Neg", 1) {
		return nil
	}
	role := map[string]int{"sigmoid": i, "subS": subS, "subT": subT}
	nodes := []int{i, logS, subS, logQ, subT, mulA, mulB, add, neg}
	// reduction mean or sum: a Reduce over every axis (no axes attribute
	// or input) without keepdims
	if red := imp.soleReader(out0(imp.nodes[neg]), readers); (imp.is(red, "ReduceMean", 1) || imp.is(red, "ReduceSum", 1)) &&
		findAttr(imp.nodes[red], "axes") == nil {
		if k := findAttr(imp.nodes[red], "keepdims"); k != nil && k.GetI() == 0 {
			role["reduce"] = red
			nodes = append(nodes, red)
		}
	}
	return &fusion{emit: (*importer).fuseBCEWithLogits, nodes: sortedNodes(nodes...), role: role}
}

func (imp *importer) fuseBCEWithLogits(f *fusion) (bool, error) {
	sig, subS, subT := imp.nodes[f.role["sigmoid"]], imp.nodes[f.role["subS"]], imp.nodes[f.role["subT"]]
	x, t := imp.vals[sig.GetInput()[0]], imp.vals[subT.GetInput()[1]]
	one1, ok1 := constScalar(imp.vals[subS.GetInput()[0]])
	one2, ok2 := constScalar(imp.vals[subT.GetInput()[0]])
	if x == nil || t == nil || x.isConst || !isFloatType(x.et) || !isFloatType(t.et) || !slices.Equal(x.shape, t.shape) ||
		!ok1 || !ok2 || !near(one1, 1) || !near(one2, 1) {
		return false, nil
	}
	reduction, shape := "none", x.shape
	if red, ok := f.role["reduce"]; ok {
		reduction, shape = "mean", []int64{}
		if imp.nodes[red].GetOpType() == "ReduceSum" {
			reduction = "sum"
		}
	}
	return imp.emitFused(f, "BCEWithLogits", OpBCEWithLogits, []*value{x, t}, shape, 10*numel(x.shape), "reduction", reduction)
}

// matchCosine matches torch's export of cosine_similarity(x1, x2, dim, eps)
// at its Div node i:
//
//	cross = ReduceSum(Mul(x1, x2)); n1 = ReduceSum(Mul(x1, x1))
//	n2 = ReduceSum(Mul(x2, x2)); den = Max(Sqrt(Mul(n1, n2)), eps)
//	y = Div(cross, den)
//
// every intermediate read by its one consumer in the pattern; the axes, the
// shapes and eps are checked at emission.
func (imp *importer) matchCosine(i int, readers map[string][]int, producers map[string]int) *fusion {
	if !imp.is(i, "Div", 2) {
		return nil
	}
	// prod returns the node making value name, if it is of type typ and
	// read by nothing but reader.
	prod := func(name, typ string, nin, reader int) int {
		j, ok := producers[name]
		if !ok || !imp.is(j, typ, nin) || imp.soleReader(name, readers) != reader {
			return -1
		}
		return j
	}
	// sumOf returns the ReduceSum making name and the Mul it sums.
	sumOf := func(name string, reader int) (int, int) {
		r := prod(name, "ReduceSum", 2, reader)
		if r < 0 {
			return -1, -1
		}
		return r, prod(imp.nodes[r].GetInput()[0], "Mul", 2, r)
	}
	div := imp.nodes[i]
	rc, mc := sumOf(div.GetInput()[0], i)
	mx := prod(div.GetInput()[1], "Max", 2, i)
	if rc < 0 || mc < 0 || mx < 0 {
		return nil
	}
	sq := prod(imp.nodes[mx].GetInput()[0], "Sqrt", 1, mx)
	if sq < 0 {
		return nil
	}
	mn := prod(imp.nodes[sq].GetInput()[0], "Mul", 2, sq)
	if mn < 0 {
		return nil
	}
	r1, m1 := sumOf(imp.nodes[mn].GetInput()[0], mn)
	r2, m2 := sumOf(imp.nodes[mn].GetInput()[1], mn)
	if r1 < 0 || m1 < 0 || r2 < 0 || m2 < 0 || r1 == r2 {
		return nil
	}
	x1, x2 := imp.nodes[mc].GetInput()[0], imp.nodes[mc].GetInput()[1]
	sqr := func(j int, x string) bool { in := imp.nodes[j].GetInput(); return in[0] == x && in[1] == x }
	if x1 == x2 || !sqr(m1, x1) || !sqr(m2, x2) {
		return nil
	}
	role := map[string]int{"div": i, "max": mx, "cross": rc, "mul": mc, "n1": r1, "n2": r2}
	return &fusion{emit: (*importer).fuseCosine, nodes: sortedNodes(i, rc, mc, mx, sq, mn, r1, m1, r2, m2), role: role}
}

func (imp *importer) fuseCosine(f *fusion) (bool, error) {
	mul := imp.nodes[f.role["mul"]]
	x1, x2 := imp.vals[mul.GetInput()[0]], imp.vals[mul.GetInput()[1]]
	_, okEps := constScalar(imp.vals[imp.nodes[f.role["max"]].GetInput()[1]])
	if x1 == nil || x2 == nil || x1.isConst || x2.isConst || !isFloatType(x1.et) || x1.et != x2.et || !slices.Equal(x1.shape, x2.shape) || !okEps {
		return false, nil
	}
	// one axis, the same for the three sums, not kept
	r := len(x1.shape)
	var dim int64 = -1
	for _, k := range []string{"cross", "n1", "n2"} {
		n := imp.nodes[f.role[k]]
		axes, ok := imp.reductionAxes(n, r)
		if !ok || len(axes) != 1 || (dim >= 0 && axes[0] != dim) {
			return false, nil
		}
		if keep, err := attrInt(n, "keepdims", 1); err != nil || keep != 0 {
			return false, nil
		}
		dim = axes[0]
	}
	kept := slices.Clone(x1.shape)
	kept[dim] = 1
	out := slices.Delete(slices.Clone(x1.shape), int(dim), int(dim)+1)
	base := imp.fusedNode(f, "CosineSimilarity")
	k := numel(x1.shape)
	// step emits one op of the decomposition, named after the fused node.
	step := func(suffix, typ string, ins []*value, shape []int64, flops int64, attrs ...string) (*value, error) {
		n := &NodeProto{Name: proto.String(base.GetName() + "/" + suffix), OpType: proto.String(typ), Output: []string{out0(base) + "#" + suffix}}
		vs, err := imp.emit1(n, typ, ins, imp.newOut(n, 0, x1.et, shape), flops, attrs...)
		if err != nil {
			return nil, err
		}
		return vs[0], nil
	}
	dims := strconv.FormatInt(dim, 10)
	norm := func(x *value, j string) (*value, error) {
		p, err := step("pow"+j, OpPow, []*value{x}, x.shape, 2*k, "exponent", "2")
		if err != nil {
			return nil, err
		}
		s, err := step("sum"+j, OpReduceSum, []*value{p}, kept, k, "dims", dims, "keepdim", "true")
		if err != nil {
			return nil, err
		}
		return step("sqrt"+j, OpSqrt, []*value{s}, kept, numel(kept))
	}
	n1, err := norm(x1, "1")
	if err != nil {
		return false, err
	}
	n2, err := norm(x2, "2")
	if err != nil {
		return false, err
	}
	d1, err := step("div1", OpDiv, []*value{x1, n1}, x1.shape, k)
	if err != nil {
		return false, err
	}
	d2, err := step("div2", OpDiv, []*value{x2, n2}, x1.shape, k)
	if err != nil {
		return false, err
	}
	m, err := step("mul", graph.OpMul, []*value{d1, d2}, x1.shape, k)
	if err != nil {
		return false, err
	}
	last := imp.nodes[f.role["div"]]
	n := &NodeProto{Name: proto.String(base.GetName() + "/sum"), OpType: proto.String(OpReduceSum), Output: []string{out0(last)}}
	y, err := imp.emit1(n, OpReduceSum, []*value{m}, imp.newOut(n, 0, x1.et, out), k, "dims", dims, "keepdim", "false")
	if err != nil {
		return false, err
	}
	return true, imp.bind(n, y)
}

// matchVar matches torch's var and std export (symbolic _var_mean) at the
// first ReduceMean (node i): ReduceMean(x, keepdims) -> Sub(x, mean) ->
// Mul(diff, diff) -> ReduceMean [-> Mul(., N) -> Div(., N - correction)]
// [-> Sqrt].
func (imp *importer) matchVar(i int, readers map[string][]int) *fusion {
	sub, _, rd := imp.meanDiff(i, readers)
	if sub < 0 || rd[0] != rd[1] || !imp.is(rd[0], "Mul", 2) {
		return nil
	}
	sq := rd[0]
	r2 := imp.soleReader(out0(imp.nodes[sq]), readers)
	if !imp.is(r2, "ReduceMean", -1) {
		return nil
	}
	role := map[string]int{"mean": i, "var": r2}
	nodes := []int{i, sub, sq, r2}
	last := r2
	if mul := imp.soleReader(out0(imp.nodes[last]), readers); imp.is(mul, "Mul", 2) {
		div := imp.soleReader(out0(imp.nodes[mul]), readers)
		if !imp.is(div, "Div", 2) || imp.nodes[div].GetInput()[0] != out0(imp.nodes[mul]) {
			return nil
		}
		role["mul"], role["div"] = mul, div
		nodes = append(nodes, mul, div)
		last = div
	}
	if sqrt := imp.soleReader(out0(imp.nodes[last]), readers); imp.is(sqrt, "Sqrt", 1) {
		role["sqrt"] = sqrt
		nodes = append(nodes, sqrt)
	}
	return &fusion{emit: (*importer).fuseVar, nodes: sortedNodes(nodes...), role: role}
}

// matchMish matches x * tanh(softplus(x)) at the Softplus node i.
func (imp *importer) matchMish(i int, readers map[string][]int) *fusion {
	if !imp.is(i, "Softplus", 1) {
		return nil
	}
	x, sp := imp.nodes[i].GetInput()[0], out0(imp.nodes[i])
	tanh := imp.soleReader(sp, readers)
	if !imp.is(tanh, "Tanh", 1) {
		return nil
	}
	mul := imp.soleReader(out0(imp.nodes[tanh]), readers)
	if !imp.is(mul, "Mul", 2) || other(imp.nodes[mul], out0(imp.nodes[tanh])) != x {
		return nil
	}
	return &fusion{emit: (*importer).fuseMish, nodes: sortedNodes(i, tanh, mul), role: map[string]int{"softplus": i, "mul": mul}}
}

// matchScatterAdd matches torch's scatter_add export (opset < 16, which has
// no reduction): ScatterElements(zeros, index, src) -> Add(self, .), at the
// ScatterElements node i. The zeros are checked at the anchor.
func (imp *importer) matchScatterAdd(i int, readers map[string][]int) *fusion {
	if !imp.is(i, "ScatterElements", 3) {
		return nil
	}
	add := imp.soleReader(out0(imp.nodes[i]), readers)
	if !imp.is(add, "Add", 2) || other(imp.nodes[add], out0(imp.nodes[i])) == "" {
		return nil
	}
	return &fusion{emit: (*importer).fuseScatterAdd, nodes: sortedNodes(i, add), role: map[string]int{"scatter": i, "add": add}}
}

// matchGroupNorm matches torch's group_norm decomposition around the
// InstanceNormalization node i.
func (imp *importer) matchGroupNorm(i int, readers map[string][]int, producers map[string]int) *fusion {
	if !imp.is(i, "InstanceNormalization", 3) {
		return nil
	}
	in := imp.nodes[i].GetInput()
	r1, ok := producers[in[0]]
	if !ok || !imp.is(r1, "Reshape", 2) || imp.soleReader(in[0], readers) != i {
		return nil
	}
	r2 := imp.soleReader(out0(imp.nodes[i]), readers)
	if !imp.is(r2, "Reshape", 2) || imp.nodes[r2].GetInput()[0] != out0(imp.nodes[i]) {
		return nil
	}
	role := map[string]int{"r1": r1, "norm": i, "r2": r2}
	nodes := []int{r1, i, r2}
	// The affine part: Mul by the weight, then Add of the bias, each a
	// parameter or an Unsqueeze of one. Without it group_norm has none.
	param := func(name string) bool {
		if v := imp.vals[name]; v != nil {
			return v.kind == graph.Parameter
		}
		j, ok := producers[name]
		return ok && imp.is(j, "Unsqueeze", -1) && imp.vals[imp.nodes[j].GetInput()[0]] != nil &&
			imp.vals[imp.nodes[j].GetInput()[0]].kind == graph.Parameter
	}
	y := out0(imp.nodes[r2])
	if mul := imp.soleReader(y, readers); imp.is(mul, "Mul", 2) && param(other(imp.nodes[mul], y)) {
		if add := imp.soleReader(out0(imp.nodes[mul]), readers); imp.is(add, "Add", 2) && param(other(imp.nodes[add], out0(imp.nodes[mul]))) {
			role["mul"], role["add"] = mul, add
			nodes = append(nodes, mul, add)
		}
	}
	return &fusion{emit: (*importer).fuseGroupNorm, nodes: sortedNodes(nodes...), role: role}
}

func sortedNodes(idx ...int) []int {
	for i := 1; i < len(idx); i++ {
		for j := i; j > 0 && idx[j] < idx[j-1]; j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	return idx
}

// emitFusion converts a matched pattern at its last node: the fused op when
// its constants check out, else every node of the pattern in order.
func (imp *importer) emitFusion(f *fusion) error {
	ok, err := f.emit(imp, f)
	if err != nil || ok {
		return err
	}
	anchor := imp.cur
	for _, j := range f.nodes {
		imp.cur = j
		n := imp.nodes[j]
		if err := imp.node(n); err != nil {
			if j == anchor {
				return err
			}
			return fmt.Errorf("node %d %q (%s): %w", j, n.GetName(), n.GetOpType(), err)
		}
	}
	imp.cur = anchor
	return nil
}

// operand returns the value of the operand of node j that is not name.
func (imp *importer) operand(j int, name string) *value {
	return imp.vals[other(imp.nodes[j], name)]
}

// near reports whether a equals b to within a relative 1e-6 (constants
// exported in double and read back in float).
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Abs(b) }

// fusedNode returns a node standing for the fused op: named after the
// pattern's module (the common prefix of its node names) and producing the
// last node's output.
func (imp *importer) fusedNode(f *fusion, opType string) *NodeProto {
	last := imp.nodes[f.nodes[len(f.nodes)-1]]
	prefix := last.GetName()
	for _, j := range f.nodes {
		name := imp.nodes[j].GetName()
		k := 0
		for k < len(prefix) && k < len(name) && prefix[k] == name[k] {
			k++
		}
		prefix = prefix[:k]
	}
	name := ""
	if k := strings.LastIndexByte(prefix, '/'); k >= 0 {
		name = prefix[:k+1] + opType
	}
	return &NodeProto{Name: proto.String(name), OpType: proto.String(opType), Output: []string{out0(last)}}
}

// reductionAxes returns the axes a Reduce node n over a value of rank r
// reduces, normalized, sorted and distinct; false when they are not
// constant, not given, out of range or repeated.
func (imp *importer) reductionAxes(n *NodeProto, r int) ([]int64, bool) {
	ins := make([]*value, len(n.GetInput()))
	for k, name := range n.GetInput() {
		ins[k] = imp.vals[name]
	}
	since := int64(18) // the opset that moved axes to an input
	if n.GetOpType() == "ReduceSum" {
		since = 13
	}
	axes, ok, err := imp.axesOf(n, ins, since)
	if err != nil || !ok || len(axes) == 0 {
		return nil, false
	}
	norm := make([]int64, len(axes))
	for k, a := range axes {
		ax, err := normAxis(a, r, "axis")
		if err != nil {
			return nil, false
		}
		norm[k] = int64(ax)
	}
	slices.Sort(norm)
	if len(slices.Compact(slices.Clone(norm))) != len(norm) {
		return nil, false
	}
	return norm, true
}

// emitFused emits the fused op typ of f with one output of the first
// input's element type and the given shape, named as fusedNode names it
// after onnxType, and binds it to the pattern's last output: (true, nil)
// once emitted.
func (imp *importer) emitFused(f *fusion, onnxType, typ string, ins []*value, shape []int64, flops int64, attrs ...string) (bool, error) {
	n := imp.fusedNode(f, onnxType)
	outs, err := imp.emit1(n, typ, ins, imp.newOut(n, 0, ins[0].et, shape), flops, attrs...)
	if err != nil {
		return false, err
	}
	return true, imp.bind(n, outs)
}

func (imp *importer) fuseGELU(f *fusion) (bool, error) {
	div, erf, add, mul1, mul2 := f.role["div"], f.role["erf"], f.role["add"], f.role["mul1"], f.role["mul2"]
	x := imp.vals[imp.nodes[div].GetInput()[0]]
	c, ok1 := constScalar(imp.vals[imp.nodes[div].GetInput()[1]])
	one, ok2 := constScalar(imp.operand(add, out0(imp.nodes[erf])))
	half, ok3 := constScalar(imp.operand(mul2, out0(imp.nodes[mul1])))
	if x == nil || x.isConst || !isFloatType(x.et) || !ok1 || !ok2 || !ok3 ||
		!near(c, math.Sqrt2) || !near(one, 1) || !near(half, 0.5) {
		return false, nil
	}
	return imp.emitFused(f, "Gelu", graph.OpGELU, []*value{x}, x.shape, 8*numel(x.shape), "approximate", "none")
}

func (imp *importer) fuseGELUTanh(f *fusion) (bool, error) {
	x := imp.vals[imp.nodes[f.role["sq"]].GetInput()[0]]
	if x == nil || x.isConst || !isFloatType(x.et) {
		return false, nil
	}
	for role, want := range map[string]float64{"kappa": 0.044715, "beta": math.Sqrt(2 / math.Pi), "one": 1, "half": 0.5} {
		j := f.role[role]
		prev := f.role[map[string]string{"kappa": "cube", "beta": "inner", "one": "tanh", "half": "mul"}[role]]
		c, ok := constScalar(imp.operand(j, out0(imp.nodes[prev])))
		if !ok || !near(c, want) {
			return false, nil
		}
	}
	return imp.emitFused(f, "Gelu", graph.OpGELU, []*value{x}, x.shape, 8*numel(x.shape), "approximate", "tanh")
}

func (imp *importer) fuseLayerNorm(f *fusion) (bool, error) {
	r1, pow, r2, eps, div := f.role["mean"], f.role["pow"], f.role["var"], f.role["eps"], f.role["div"]
	mul, hasW := f.role["mul"]
	add, hasB := f.role["add"]
	x := imp.vals[imp.nodes[r1].GetInput()[0]]
	if x == nil || x.isConst || !isFloatType(x.et) || len(x.shape) == 0 {
		return false, nil
	}
	e, ok1 := constScalar(imp.vals[imp.nodes[pow].GetInput()[1]])
	epsV, ok2 := constScalar(imp.operand(eps, out0(imp.nodes[r2])))
	if !ok1 || !ok2 || e != 2 || !(epsV >= 0) {
		return false, nil
	}
	// Both reductions over the same trailing axes, keeping dimensions.
	a1, ok1 := imp.reductionAxes(imp.nodes[r1], len(x.shape))
	a2, ok2 := imp.reductionAxes(imp.nodes[r2], len(x.shape))
	if !ok1 || !ok2 || !slices.Equal(a1, a2) || a1[0]+int64(len(a1)) != int64(len(x.shape)) {
		return false, nil // not exactly the same trailing axes
	}
	for _, j := range []int{r1, r2} {
		if keep, err := attrInt(imp.nodes[j], "keepdims", 1); err != nil || keep == 0 {
			return false, nil
		}
	}
	axis := int(a1[0])
	norm := x.shape[axis:]
	var w, b *value // nil where torch's layer_norm had None
	last := div
	if hasW {
		w = imp.operand(mul, out0(imp.nodes[div]))
		last = mul
	}
	if hasB {
		b = imp.operand(add, out0(imp.nodes[last]))
	}
	for _, p := range []*value{w, b} {
		if p != nil && !equalShape(trimOnes(p.shape), trimOnes(norm)) {
			return false, nil
		}
	}
	if (hasW && w == nil) || (hasB && b == nil) {
		return false, nil
	}
	n := imp.fusedNode(f, "LayerNormalization")
	st := append([]int64(nil), x.shape...)
	for i := axis; i < len(st); i++ {
		st[i] = 1
	}
	f32 := int32(TensorProto_FLOAT)
	y := imp.newOut(n, 0, x.et, x.shape)
	mean := &value{name: out0(imp.nodes[r1]), et: f32, shape: st, tensor: graph.NoTensor}
	rstd := &value{name: n.GetName() + ":rstd", et: f32, shape: st, tensor: graph.NoTensor}
	if n.GetName() == "" {
		rstd.name = y.name + ":rstd"
	}
	if _, err := imp.emit(n, graph.OpLayerNorm, []*value{x, w, b}, []*value{y, mean, rstd}, 8*numel(x.shape),
		"eps", strconv.FormatFloat(epsV, 'g', -1, 32), "axis", strconv.Itoa(axis)); err != nil {
		return false, err
	}
	return true, imp.bind(n, []*value{y})
}

// trimOnes drops leading 1s (a weight [1, 1, C] broadcasts like [C]).
func trimOnes(s []int64) []int64 {
	for len(s) > 0 && s[0] == 1 {
		s = s[1:]
	}
	return s
}

// fuseGroupNorm emits group_norm when the constants are torch's: the first
// Reshape to [N or 0, G, -1] with G dividing the channels, the instance
// norm's scale all ones and bias all zeros (G of each), the second Reshape
// back to x's shape, and a weight and bias of C elements.
func (imp *importer) fuseGroupNorm(f *fusion) (bool, error) {
	r1, norm, r2 := imp.nodes[f.role["r1"]], imp.nodes[f.role["norm"]], imp.nodes[f.role["r2"]]
	x := imp.vals[r1.GetInput()[0]]
	if x == nil || x.isConst || !isFloatType(x.et) || len(x.shape) < 3 {
		return false, nil
	}
	nb, c := x.shape[0], x.shape[1]
	s1, err := constInts(imp.vals[r1.GetInput()[1]], "shape")
	if err != nil || len(s1) != 3 || (s1[0] != 0 && s1[0] != nb) || s1[1] <= 0 || c%s1[1] != 0 || (s1[2] != -1 && s1[2] != numel(x.shape)/nb/s1[1]) {
		return false, nil
	}
	groups := s1[1]
	for k, want := range []float64{1, 0} {
		v := imp.vals[norm.GetInput()[1+k]]
		if v == nil || !v.isConst || len(v.shape) != 1 || v.shape[0] != groups {
			return false, nil
		}
		for _, e := range v.flts {
			if e != want {
				return false, nil
			}
		}
		for _, e := range v.ints {
			if float64(e) != want {
				return false, nil
			}
		}
	}
	s2, err := constInts(imp.vals[r2.GetInput()[1]], "shape")
	if err != nil || !equalShape(s2, x.shape) {
		return false, nil
	}
	eps, err := attrFloat(norm, "epsilon", 1e-5)
	if err != nil {
		return false, nil
	}
	var w, b *value
	if mul, ok := f.role["mul"]; ok {
		add := f.role["add"]
		w = soleParam(imp.operand(mul, out0(r2)))
		b = soleParam(imp.operand(add, out0(imp.nodes[mul])))
		if w == nil || b == nil || numel(w.shape) != c || numel(b.shape) != c {
			return false, nil
		}
	}
	n := imp.fusedNode(f, "GroupNormalization") // producing the last node's output: r2's or the Add's
	outs, err := imp.groupNorm(n, x, w, b, groups, eps)
	if err != nil {
		return false, err
	}
	return true, imp.bind(n, outs)
}

// soleParam returns the parameter v is, or is a view of (an Unsqueeze of a
// weight); nil otherwise.
func soleParam(v *value) *value {
	ps := paramSources(v)
	if len(ps) != 1 {
		return nil
	}
	return ps[0]
}

// fuseVar emits var(x) or, with the Sqrt, std(x) over the reduced axes
// when both reductions agree and the correction factor is a constant
// N / (N - c): var saves x (var_backward(grad, self, ...)), std x and its
// result. Node by node the Sub, Mul and Sqrt would save the difference,
// twice, and more.
func (imp *importer) fuseVar(f *fusion) (bool, error) {
	r1, r2 := imp.nodes[f.role["mean"]], imp.nodes[f.role["var"]]
	x := imp.vals[r1.GetInput()[0]]
	if x == nil || x.isConst || !isFloatType(x.et) || len(x.shape) == 0 {
		return false, nil
	}
	a1, ok1 := imp.reductionAxes(r1, len(x.shape))
	a2, ok2 := imp.reductionAxes(r2, len(x.shape))
	if !ok1 || !ok2 || !slices.Equal(a1, a2) {
		return false, nil
	}
	if k, err := attrInt(r1, "keepdims", 1); err != nil || k == 0 {
		return false, nil
	}
	keep, err := attrInt(r2, "keepdims", 1)
	if err != nil {
		return false, nil
	}
	n := int64(1)
	for _, a := range a1 {
		n *= x.shape[a]
	}
	correction := int64(0)
	if mul, ok := f.role["mul"]; ok {
		cm, ok1 := constScalar(imp.operand(mul, out0(r2)))
		cd, ok2 := constScalar(imp.vals[imp.nodes[f.role["div"]].GetInput()[1]])
		if !ok1 || !ok2 || cm != float64(n) || cd >= cm || cd != math.Trunc(cd) {
			return false, nil
		}
		correction = n - int64(cd)
	}
	shape := []int64{}
	for d, s := range x.shape {
		if slices.Contains(a1, int64(d)) {
			if keep == 0 {
				continue
			}
			s = 1
		}
		shape = append(shape, s)
	}
	typ, opType := OpVar, "ReduceVar"
	if _, ok := f.role["sqrt"]; ok {
		typ, opType = OpStd, "ReduceStd"
	}
	return imp.emitFused(f, opType, typ, []*value{x}, shape, 3*numel(x.shape),
		"dims", joinInts(a1), "keepdim", strconv.FormatBool(keep != 0), "correction", strconv.FormatInt(correction, 10))
}

// fuseMish emits mish(x), which saves x (mish_backward(grad, self)); node
// by node the Tanh and Mul would keep softplus's and tanh's outputs too.
func (imp *importer) fuseMish(f *fusion) (bool, error) {
	x := imp.vals[imp.nodes[f.role["softplus"]].GetInput()[0]]
	if x == nil || x.isConst || !isFloatType(x.et) {
		return false, nil
	}
	return imp.emitFused(f, "Mish", OpMish, []*value{x}, x.shape, 8*numel(x.shape))
}

// fuseScatterAdd emits scatter_add(self, index, src) when the
// scattered data are zeros of self's shape: torch's self.scatter_add(dim,
// index, src), one output, where node by node the zeros and the scattered
// copy would be tensors of their own.
func (imp *importer) fuseScatterAdd(f *fusion) (bool, error) {
	sc, add := imp.nodes[f.role["scatter"]], imp.nodes[f.role["add"]]
	zeros := imp.vals[sc.GetInput()[0]]
	self := imp.vals[other(add, out0(sc))]
	if zeros == nil || self == nil || self.isConst || !equalShape(zeros.shape, self.shape) || !imp.allZero(zeros) {
		return false, nil
	}
	in := []*value{self, imp.vals[sc.GetInput()[1]], imp.vals[sc.GetInput()[2]]}
	if in[1] == nil || in[2] == nil {
		return false, nil
	}
	x, idx, axis, err := elementsOperands(sc, in)
	if err != nil || x.et != in[2].et || !equalShape(in[2].shape, idx.shape) {
		return false, nil
	}
	return imp.emitFused(f, "ScatterElements", OpScatterAdd, in, x.shape, numel(idx.shape), "dim", strconv.Itoa(axis))
}

// allZero reports whether v is a constant of zeros: folded data that are
// all 0, or the output of a ConstantOfShape (too large to fold) whose value
// is 0.
func (imp *importer) allZero(v *value) bool {
	if v.isConst {
		for _, x := range v.flts {
			if x != 0 {
				return false
			}
		}
		for _, x := range v.ints {
			if x != 0 {
				return false
			}
		}
		return true
	}
	for _, n := range imp.nodes {
		if len(n.GetOutput()) == 0 || out0(n) != v.name {
			continue
		}
		if n.GetOpType() != "ConstantOfShape" || !defaultDomain(n) {
			return false
		}
		a := findAttr(n, "value")
		if a == nil || a.GetT() == nil {
			return true // the default value is a float 0
		}
		ints, flts, ok, err := tensorData(a.GetT(), []int64{1})
		return err == nil && ok && (len(flts) == 0 || flts[0] == 0) && (len(ints) == 0 || ints[0] == 0)
	}
	return false
}

func (imp *importer) fuseSiLU(f *fusion) (bool, error) {
	x := imp.vals[imp.nodes[f.role["sigmoid"]].GetInput()[0]]
	if x == nil || x.isConst || !isFloatType(x.et) {
		return false, nil
	}
	return imp.emitFused(f, "SiLU", graph.OpSiLU, []*value{x}, x.shape, 5*numel(x.shape))
}
