package sim

import (
	"fmt"
	"strings"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim/alloc"
)

// InPlaceRule says which inputs of an op may lend their storage to the op's
// first output under in-place reuse (MXNET_EXEC_ENABLE_INPLACE; MXNet asks
// each op through its FInplaceOption attribute). Only the first output is
// ever written in place, as in MXNet's in-place options for these ops.
type InPlaceRule uint8

// In-place rules.
const (
	// InPlaceNone: the op never writes its output over an input.
	InPlaceNone InPlaceRule = iota
	// InPlaceFirstInput: input 0 may become output 0 (element-wise unary
	// ops, dropout's x -> y, batchnorm's x -> y, masked_fill's x -> y).
	InPlaceFirstInput
	// InPlaceEitherOperand: input 0, else input 1, may become output 0
	// (element-wise add and mul).
	InPlaceEitherOperand
	// InPlaceOutputGrad: an output gradient read by a backward op (an
	// input of kind graph.Gradient) may become its first input gradient
	// (MXNet's backward in-place option out_grad -> in_grad).
	InPlaceOutputGrad
)

var inPlaceRuleNames = [...]string{"none", "first_input", "either_operand", "output_grad"}

// String returns the rule's name.
func (r InPlaceRule) String() string {
	if int(r) < len(inPlaceRuleNames) {
		return inPlaceRuleNames[r]
	}
	return fmt.Sprintf("in_place_rule(%d)", uint8(r))
}

// InPlaceRuleOf returns the in-place rule of an op type: its class in the
// op-type registry (graph.LookupOpType: element-wise types may write over
// their first input, add and mul over either operand), and for the backward
// op of such a type (type + "_backward") InPlaceOutputGrad. Every other type
// (convolutions, matmuls, reductions, softmax, views, grad_accumulate whose
// output is memset-initialized, updates, unknown types) is InPlaceNone.
func InPlaceRuleOf(opType string) InPlaceRule {
	if fwd, ok := strings.CutSuffix(opType, "_backward"); ok {
		if InPlaceRuleOf(fwd) != InPlaceNone {
			return InPlaceOutputGrad
		}
		return InPlaceNone
	}
	e, _ := graph.LookupOpType(opType)
	switch e.InPlace {
	case graph.InPlaceFirstInput:
		return InPlaceFirstInput
	case graph.InPlaceEitherOperand:
		return InPlaceEitherOperand
	}
	return InPlaceNone
}

// inPlaceDonor returns the input of o whose storage block out (o's first
// output) may take, or NoTensor. A donor is an input the rule allows that
//
//   - is resident with a block of its own: not a view, not pinned (inputs,
//     parameters, state, persistent outputs), not in the atomic-clean arena;
//   - has exactly out's byte size;
//   - is not aliased by another input or an output of o (no view of it is
//     read or made by the op);
//   - is freed by the plan right after o: among the steps that follow, up to
//     the next compute, there is a free of it, and no swap of its storage
//     comes before that free.
//
// It allocates nothing; the scan covers only the frees and swaps between
// two computes.
func (m *Machine) inPlaceDonor(op graph.OpID, rule InPlaceRule, out graph.TensorID, next []Step) graph.TensorID {
	for j, in := range m.d.Inputs(op) {
		switch rule {
		case InPlaceFirstInput:
			if j > 0 {
				return graph.NoTensor
			}
		case InPlaceEitherOperand:
			if j > 1 {
				return graph.NoTensor
			}
		case InPlaceOutputGrad:
			if m.d.Kind[in] != graph.Gradient {
				continue
			}
		default:
			return graph.NoTensor
		}
		if m.canDonate(op, in, out, next) {
			return in
		}
	}
	return graph.NoTensor
}

func (m *Machine) canDonate(op graph.OpID, in, out graph.TensorID, next []Step) bool {
	if m.flags[in]&(flPinned|flView|flArena|flDonated) != 0 || m.state[in] != Resident ||
		m.block[in] < 0 || m.bytes[in] != m.bytes[out] {
		return false
	}
	for _, x := range m.d.Inputs(op) {
		if x != in && m.root[x] == in {
			return false
		}
	}
	for _, x := range m.d.Outputs(op) {
		if m.root[x] == in {
			return false
		}
	}
	nt := graph.TensorID(len(m.root))
	for k := range next {
		st := &next[k]
		switch st.Kind {
		case Free:
			if st.Tensor == in {
				return true
			}
		case SwapOut, SwapIn:
			if st.Tensor < 0 || st.Tensor >= nt || m.root[st.Tensor] == in {
				return false
			}
		default:
			return false
		}
	}
	return false
}

// donate ends in's life at the current step after an output took its block
// in place: its record closes at the previous step (the block's bytes now
// belong to the output's record), it is freed, and the plan's later free of
// it releases nothing.
func (m *Machine) donate(in graph.TensorID) {
	if r := m.rec[in]; r >= 0 {
		m.records[r].end = int32(m.step) - 1
	}
	m.block[in], m.rec[in] = -1, -1
	m.state[in] = Freed
	m.flags[in] |= flDonated
	m.evict[in] = true
	m.inPlaceN++
}

// InPlaceReuses returns how many outputs took an input's storage in place
// since the Machine was created or reset.
func (m *Machine) InPlaceReuses() int {
	if m == nil {
		return 0
	}
	return m.inPlaceN
}

// FreeNeighbours calls visit with every resident storage (a tensor that
// owns its block) whose AdjacentFree is positive, in the allocator's order,
// and reports true, when the allocator can list them
// (alloc.NeighbourAllocator, as alloc.NewCaching's) or has no addresses
// (AdjacentFree is always 0: there is nothing to list); otherwise it
// visits nothing and reports false. Its work grows with the allocator's
// free blocks, not with the resident tensors. A nil visit visits nothing.
func (m *Machine) FreeNeighbours(visit func(t graph.TensorID)) bool {
	if m.missing() {
		return false
	}
	if m.addr == nil {
		return true
	}
	if m.nbr == nil {
		return false
	}
	if visit == nil {
		return true
	}
	m.nbr.FreeNeighbours(func(b alloc.Block) {
		if t, ok := m.storageIn(b); ok {
			visit(t)
		}
	})
	return true
}

// storageIn returns the resident storage whose own block is b (not the
// atomic-clean arena's), if any.
func (m *Machine) storageIn(b alloc.Block) (graph.TensorID, bool) {
	if b < 0 || int(b) >= len(m.owner) {
		return graph.NoTensor, false
	}
	t := m.owner[b]
	if t < 0 || m.block[t] != b || m.state[t] != Resident || m.flags[t]&flArena != 0 {
		return graph.NoTensor, false
	}
	return graph.TensorID(t), true
}

// WatchAdjacentFree makes the Machine call grew with every resident storage
// (a tensor that owns its block, as FreeNeighbours lists them) whose
// AdjacentFree has just grown, and reports true, when the allocator can
// report such changes (alloc.GrowthNotifier, as alloc.NewCaching's) or has
// no addresses (AdjacentFree is always 0: it never grows); otherwise it
// reports false and calls nothing. Only a free makes the bytes next to a
// block grow, so grew is called from the Machine's frees, at most twice per
// freed block, and must not call back into the Machine. It replaces any
// earlier function; nil stops the calls.
func (m *Machine) WatchAdjacentFree(grew func(t graph.TensorID)) bool {
	if m.missing() {
		return false
	}
	if m.addr == nil {
		return true
	}
	gn, ok := m.alloc.(alloc.GrowthNotifier)
	if !ok || m.nbr == nil {
		return false
	}
	if grew == nil {
		gn.NotifyFreeGrowth(nil)
		return true
	}
	gn.NotifyFreeGrowth(func(b alloc.Block) {
		if t, ok := m.storageIn(b); ok {
			grew(t)
		}
	})
	return true
}

// AdjacentFree returns the free bytes physically adjacent to t's storage
// block (what releasing it would merge with, AddressAllocator.AdjacentFree)
// when the allocator is an AddressAllocator and t's storage is resident
// with a block of its own; otherwise 0 (other allocators, a storage that is
// not resident, the atomic-clean arena, an ID out of range). For a view it
// is its storage's block. Fragmentation-aware eviction (DTR's MegEngine
// heuristic) adds it to a candidate's size.
func (m *Machine) AdjacentFree(t graph.TensorID) int64 {
	if !m.hasTensor(t) || m.addr == nil {
		return 0
	}
	r := m.root[t]
	if m.state[r] != Resident || m.block[r] < 0 || m.flags[r]&flArena != 0 {
		return 0
	}
	return m.addr.AdjacentFree(m.block[r])
}
