package onnx

import (
	"fmt"
	"sort"
	"strings"
)

// opEinsum maps an Einsum of one or two operands (torch.einsum: attention
// written as "bhqd,bhkd->bhqk", bilinear forms, transposes and traces) onto
// einsum, whose backward reads both operands (each operand's gradient is
// an einsum of the output gradient with the other). PyTorch runs a
// two-operand einsum as a bmm of permuted views of its operands, saving
// those views; ops of more operands are unsupported (PyTorch contracts
// them pairwise, saving the intermediates).
func opEinsum(imp *importer, n *NodeProto, in []*value) ([]*value, error) {
	eq, err := attrString(n, "equation", "")
	if err != nil {
		return nil, err
	}
	var xs []*value
	for _, v := range in {
		if v != nil {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 || len(xs) > 2 {
		return nil, fmt.Errorf("%d operands: einsum of one or two operands is supported: %w", len(xs), ErrUnsupported)
	}
	shape, flops, err := einsumShape(eq, xs)
	if err != nil {
		return nil, err
	}
	if err := checkShape(shape, "output shape"); err != nil {
		return nil, err
	}
	if len(xs) == 1 && xs[0].isConst {
		return nil, fmt.Errorf("constant operand: %w", ErrUnsupported)
	}
	return imp.emit1(n, OpEinsum, xs, imp.newOut(n, 0, xs[0].et, shape), flops, "equation", eq)
}

// einsumShape returns the output shape of equation eq over the operands'
// shapes and the op's FLOPs (a multiply-add per point of the index space
// for two operands, one op per input element for one). Letters name
// dimensions; "..." stands for the leading dimensions not named, broadcast
// across operands; without "->" the output is the letters used once, in
// alphabetical order, after the broadcast dimensions.
func einsumShape(eq string, xs []*value) ([]int64, int64, error) {
	eq = strings.ReplaceAll(eq, " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if len(terms) != len(xs) {
		return nil, 0, fmt.Errorf("equation %q has %d operand terms, the node %d inputs", eq, len(terms), len(xs))
	}
	size := map[byte]int64{}
	count := map[byte]int{}
	var ell []int64 // the broadcast "..." dimensions
	for i, term := range terms {
		letters, hasEll, err := einsumTerm(term, eq)
		if err != nil {
			return nil, 0, err
		}
		r := len(xs[i].shape)
		if len(letters) > r || (!hasEll && len(letters) != r) {
			return nil, 0, fmt.Errorf("equation %q: term %q names %d dimensions, operand %d has shape %v", eq, term, len(letters), i, xs[i].shape)
		}
		k := 0
		var e []int64
		for j := 0; j < len(term); j++ {
			c := term[j]
			if c == '.' {
				e = xs[i].shape[k : k+r-len(letters)]
				k += r - len(letters)
				j += 2
				continue
			}
			d := xs[i].shape[k]
			k++
			switch old, ok := size[c]; {
			case !ok || old == 1:
				size[c] = d
			case d != old && d != 1:
				return nil, 0, fmt.Errorf("equation %q: index %c is %d in one operand and %d in another", eq, c, old, d)
			}
			count[c]++
		}
		var err2 error
		if ell, err2 = broadcast(ell, e); err2 != nil {
			return nil, 0, fmt.Errorf("equation %q: the dimensions of ...: %w", eq, err2)
		}
	}
	var out []byte
	if explicit {
		letters, hasEll, err := einsumTerm(rhs, eq)
		if err != nil {
			return nil, 0, err
		}
		for _, c := range letters {
			if _, ok := size[c]; !ok {
				return nil, 0, fmt.Errorf("equation %q: output index %c is in no operand", eq, c)
			}
		}
		out = letters
		if !hasEll && len(ell) > 0 {
			return nil, 0, fmt.Errorf("equation %q: the output drops the operands' ... dimensions", eq)
		}
	} else {
		for c, k := range count {
			if k == 1 {
				out = append(out, c)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	}
	shape := append([]int64(nil), ell...) // the output keeps the ... dimensions first
	for _, c := range out {
		shape = append(shape, size[c])
	}
	space := numel(ell)
	for _, d := range size {
		space = mulSat(space, max(d, 1))
	}
	flops := numel(xs[0].shape)
	if len(xs) == 2 {
		flops = mulSat(2, space)
	}
	return shape, flops, nil
}

// einsumTerm returns the letters of one term of an einsum equation and
// whether it has "...". A letter may not repeat within a term (a diagonal,
// "ii", is unsupported).
func einsumTerm(term, eq string) ([]byte, bool, error) {
	var letters []byte
	ell := false
	seen := map[byte]bool{}
	for j := 0; j < len(term); j++ {
		c := term[j]
		switch {
		case c == '.':
			if ell || !strings.HasPrefix(term[j:], "...") {
				return nil, false, fmt.Errorf("equation %q: term %q: expected at most one \"...\"", eq, term)
			}
			ell = true
			j += 2
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			if seen[c] {
				return nil, false, fmt.Errorf("equation %q: term %q repeats index %c (a diagonal): %w", eq, term, c, ErrUnsupported)
			}
			seen[c] = true
			letters = append(letters, c)
		default:
			return nil, false, fmt.Errorf("equation %q: term %q: character %q, expected letters and \"...\"", eq, term, c)
		}
	}
	return letters, ell, nil
}
