package chain

import (
	"context"
	"fmt"
	"math"

	"github.com/remat-dev/remat/sim"
)

// Rotor: optimal persistent checkpointing of a heterogeneous chain.
//
// Source: O. Beaumont, L. Eyraud-Dubois, J. Herrmann, A. Joly, A. Shilova,
// "Optimal checkpointing for heterogeneous chains: how to train deep neural
// networks with limited memory", 2019 (arXiv:1911.13214), the "rotor"
// library. The recurrence is theirs; the memory accounting below is this
// package's, matched to how the plans are emitted (see docs/optimal.md).
//
// Subproblem S(i, l, m): run the forward and backward of stages i..l within
// m memory slots, given the input of stage i (held by the caller, not
// counted) and the gradient entering stage l's backward (counted in m); it
// ends holding the gradient passed to stage i-1 plus the held gradients of
// stages i..l. With din(l) the gradient entering stage l's backward and
// PG(a..b) the held gradients of stages a..b:
//
//	leaf (i = l):  F_all(i), B(i)
//	    needs m >= din(i) + FwdAll_i and m >= din(i) + XBarBwd_i + BwdPeak_i
//	chain:         F_all(i), S(i+1, l, m - XBar_i), B(i)
//	    needs m >= din(l) + FwdAll_i and m >= PG(i+1..l) + din(i) + XBarBwd_i + BwdPeak_i
//	checkpoint j:  F_none(i..j-1), S(j, l, m - In_j), S(i, j-1, m - PG(j..l))
//	    needs m >= din(l) + max over k in i..j-1 of ([k > i] In_k + FwdNone_k)
//
// Holding a stage's output for the whole of S(i+1, l) is pessimistic when no
// backward reads it: if S(i+1, l) runs stage i+1's forward only once (it
// starts with F_all(i+1)), the input can go right after that forward. A
// second table covers this: S1(i, l, m) counts its input inside m, starts
// with F_all(i) and then holds only InBwd_i of the input (what B(i) reads):
//
//	S1 leaf:   needs m >= din(i) + In_i + FwdAll_i, m >= din(i) + InBwd_i + XBarBwd_i + BwdPeak_i
//	S1 chain:  F_all(i), then S(i+1, l, m - InBwd_i - XBar_i)
//	           or S1(i+1, l, m - InBwd_i - XBarRest_i), B(i)
//	    needs m >= din(l) + In_i + FwdAll_i, m >= PG(i+1..l) + din(i) + InBwd_i + XBarBwd_i + BwdPeak_i
//
// where XBarRest_i is x-bar without the output unless B(i) reads it; the S1
// continuations of a chain are allowed only when B(i) does not read the
// output (S1(i+1) then owns it). S may continue its chain with
// S1(i+1, l, m - XBarRest_i) and its checkpoint choice with S1(j, l, m) (the
// checkpoint dies once stage j has run).
//
// Opt[i][l][m] and Opt1[i][l][m] are the minimal times; O(M L^3) time and
// O(M L^2) memory in flat slices indexed pair(i, l)*(M+1) + m over i <= l.

// RotorStage holds one stage's figures for the solver, memory in slots.
type RotorStage struct {
	// Fwd and Bwd are the forward and backward times.
	Fwd, Bwd int64
	// In is the size of the stage's input (the checkpoint kept to restart
	// the stage) and InBwd the part of it the stage's backward reads (In or
	// 0). XBar is the output plus the activations its backward reads;
	// XBarBwd the part of XBar alive during its own backward; XBarRest
	// XBar without the output unless the stage's backward reads it.
	In, InBwd, XBar, XBarBwd, XBarRest int64
	// FwdNone and FwdAll are the forward peaks above the held input, keeping
	// only the output, respectively x-bar.
	FwdNone, FwdAll int64
	// BwdPeak is the backward peak above XBarBwd plus the incoming gradient.
	BwdPeak int64
	// GradOut is the gradient passed to the previous stage's backward;
	// HeldGrad the gradients kept until the end of the backward pass.
	GradOut, HeldGrad int64
	// LeafSet reports that FwdLeaf and FwdLeafPeak are set: the time and
	// the peak above the held input of the forward ops the stage's own
	// backward needs. A leaf of the recurrence (the last stage of a
	// subchain, but not of the whole chain) runs only those: the next
	// stage is done. Unset, a leaf runs the whole forward (FwdAll).
	LeafSet              bool
	FwdLeaf, FwdLeafPeak int64
	// Release is the pinned memory the stage's backward frees for good
	// (activations kept from the first forward, such as dropout outputs,
	// whose last reader is this backward): the caller counts it as held
	// until then, and the stages before get it back.
	Release int64
}

// RotorActionKind is one kind of stage-level action.
type RotorActionKind uint8

// Stage-level actions of a Rotor schedule.
const (
	// RotorForwardNone runs a stage's forward keeping only its output.
	RotorForwardNone RotorActionKind = iota + 1
	// RotorForwardAll runs a stage's forward keeping x-bar for its backward.
	RotorForwardAll
	// RotorBackward runs a stage's backward.
	RotorBackward
	// RotorForwardLeaf runs the forward ops a stage's own backward needs
	// (Stage.Leaf), right before that backward, once the next stage is
	// done; a stage whose forward never ran runs it whole.
	RotorForwardLeaf
)

var rotorKindNames = [...]string{"", "F_none", "F_all", "B", "F_leaf"}

// String returns the action's short name (F_none, F_all, B).
func (k RotorActionKind) String() string {
	if k == 0 || int(k) >= len(rotorKindNames) {
		return fmt.Sprintf("rotor_action(%d)", uint8(k))
	}
	return rotorKindNames[k]
}

// RotorAction is one action of a schedule, on a 0-based stage index.
type RotorAction struct {
	Kind  RotorActionKind
	Stage int32
}

// String formats the action as F_all(3).
func (a RotorAction) String() string { return fmt.Sprintf("%v(%d)", a.Kind, a.Stage) }

// RotorSolution is the result of RotorSolve.
type RotorSolution struct {
	// Feasible is false when no schedule fits the memory; Time and Actions
	// are then empty.
	Feasible bool
	// Time is the total forward plus backward time of the schedule.
	Time int64
	// Actions is the schedule.
	Actions []RotorAction
	// MinSlots is the smallest memory (in slots, <= the given memory) for
	// which a schedule exists, -1 if none does.
	MinSlots int
	// UsedSlots is the smallest memory at which the optimal time is reached;
	// Actions is the schedule found at that memory (the least memory among
	// the fastest schedules).
	UsedSlots int
}

// rotorInf marks an infeasible entry; three of them still add up without
// overflow.
const rotorInf = math.MaxInt64 / 4

// rotorMaxEntries caps the DP table (entries of 12 bytes).
const rotorMaxEntries = 1 << 27

// RotorSolve computes an optimal schedule for the chain within mem slots.
// Cancelling ctx stops the DP and returns a *sim.CanceledError (the DP has
// no partial answer).
func RotorSolve(ctx context.Context, stages []RotorStage, mem int) (*RotorSolution, error) {
	tab, err := rotorBuild(ctx, stages, mem, nil)
	if err != nil {
		return nil, err
	}
	sol := &RotorSolution{MinSlots: tab.minSlots()}
	if sol.MinSlots > mem {
		sol.MinSlots = -1
	}
	top := tab.top()
	if top[mem] >= rotorInf {
		return sol, nil
	}
	sol.Feasible = true
	sol.Time = top[mem]
	sol.UsedSlots = tab.usedSlots(mem)
	sol.Actions, err = tab.schedule(sol.UsedSlots)
	if err != nil {
		return nil, err
	}
	return sol, nil
}

// rotorTable holds the filled DP tables of one chain for every memory
// level 0..M-1, so that schedules at several levels can be rebuilt without
// solving again.
type rotorTable struct {
	stages      []RotorStage
	L, M        int
	base        []int
	opt, opt1   []int64
	what, what1 []int32
	sumPG       []int64
}

func (t *rotorTable) row(tab []int64, i, l int) []int64 {
	p := (t.base[i] + l - i) * t.M
	return tab[p : p+t.M]
}

func (t *rotorTable) wrow(tab []int32, i, l int) []int32 {
	p := (t.base[i] + l - i) * t.M
	return tab[p : p+t.M]
}

// top is the whole chain's row: the optimal time at each memory level.
func (t *rotorTable) top() []int64 { return t.row(t.opt, 0, t.L-1) }

// minSlots is the least feasible memory level, -1 if none.
func (t *rotorTable) minSlots() int {
	for m, v := range t.top() {
		if v < rotorInf {
			return m
		}
	}
	return -1
}

// usedSlots is the least memory level with the same optimal time as m.
func (t *rotorTable) usedSlots(m int) int {
	top := t.top()
	for m > 0 && top[m-1] == top[m] {
		m--
	}
	return m
}

// rotorTableMax returns the table entries (pairs times memory levels) of L
// stages and mem slots.
func rotorTableEntries(L, mem int) int64 {
	return int64(L) * int64(L+1) / 2 * int64(mem+1)
}

// rotorLeaf reports whether a leaf at stage i runs only the forward its
// backward needs: figures set and not the chain's last stage (whose first
// forward may be its leaf).
func rotorLeaf(stages []RotorStage, i int) bool {
	return stages[i].LeafSet && i+1 < len(stages)
}

// rotorReleased is the memory all stages' backward release in all.
func rotorReleased(stages []RotorStage) int64 {
	var ext int64
	for _, s := range stages {
		ext += max(s.Release, 0)
	}
	return ext
}

// rotorBuild validates the chain and fills the DP tables, telling prog
// (nil: nobody) how many of the L diagonals are done.
func rotorBuild(ctx context.Context, stages []RotorStage, mem int, prog sim.Progress) (*rotorTable, error) {
	L := len(stages)
	if L == 0 {
		return nil, fmt.Errorf("rotor: chain has 0 stages, expected >= 1")
	}
	if mem < 0 {
		return nil, fmt.Errorf("rotor: memory = %d slots, expected >= 0", mem)
	}
	for k, s := range stages {
		if s.Fwd < 0 || s.Bwd < 0 || s.In < 0 || s.InBwd < 0 || s.XBar < 0 || s.XBarBwd < 0 || s.XBarRest < 0 || s.FwdNone < 0 || s.FwdAll < 0 || s.BwdPeak < 0 || s.GradOut < 0 || s.HeldGrad < 0 || s.Release < 0 || s.FwdLeaf < 0 || s.FwdLeafPeak < 0 {
			return nil, fmt.Errorf("rotor: stage %d has a negative figure %+v, expected all >= 0", k, s)
		}
		if s.Fwd > rotorInf/int64(4*L) || s.Bwd > rotorInf/int64(4*L) {
			return nil, fmt.Errorf("rotor: stage %d times fwd %d bwd %d are too large, expected < %d", k, s.Fwd, s.Bwd, rotorInf/int64(4*L))
		}
	}
	// A subchain solved after later stages' backward may get more than mem
	// (they released pinned memory): the table reaches that far.
	ext := rotorReleased(stages)
	if ext > rotorMaxEntries {
		return nil, fmt.Errorf("rotor: stages release %d slots in all, expected at most %d", ext, rotorMaxEntries)
	}
	M := mem + 1 + int(ext)
	pairs := L * (L + 1) / 2
	if n := rotorTableEntries(L, M-1); n > rotorMaxEntries {
		return nil, fmt.Errorf("rotor: %d stages need %d stage pairs x %d memory levels (%d slots + 1 + %d released) = %d table entries, expected at most %d: use fewer slots (--slots) or group stages (OptimalChain does)", L, pairs, M, mem, ext, n, rotorMaxEntries)
	}
	// pair(i, l) = base[i] + l - i.
	base := make([]int, L+1)
	for i := 0; i < L; i++ {
		base[i+1] = base[i] + L - i
	}
	row := func(t []int64, i, l int) []int64 { p := (base[i] + l - i) * M; return t[p : p+M] }
	wrow := func(t []int32, i, l int) []int32 { p := (base[i] + l - i) * M; return t[p : p+M] }
	opt := make([]int64, pairs*M)
	opt1 := make([]int64, pairs*M)
	what := make([]int32, pairs*M)  // -1 none; kind | j<<2 (kinds below)
	what1 := make([]int32, pairs*M) // -1 none; rotorChainGen or rotorChainOnce
	sumF := make([]int64, L+1)
	sumPG := make([]int64, L+1)
	for k, s := range stages {
		sumF[k+1] = sumF[k] + s.Fwd
		sumPG[k+1] = sumPG[k] + s.HeldGrad - s.Release
	}
	din := func(l int) int64 {
		if l+1 < L {
			return stages[l+1].GradOut
		}
		return 0
	}
	clamp := func(v int64) int {
		if v > int64(M) {
			return M
		}
		return int(v)
	}
	// relax sets dst[m] = c + sub[m-off] for m >= lo where that improves it.
	relax := func(dst []int64, w []int32, code int32, lo int, sub []int64, off int64, c int64) {
		if int64(lo) < off {
			lo = int(min(off, int64(M)))
		}
		o := int(off)
		for m := lo; m < M; m++ {
			s := sub[m-o]
			if s >= rotorInf {
				continue
			}
			if v := c + s; v < dst[m] {
				dst[m], w[m] = v, code
			}
		}
	}
	for d := 0; d < L; d++ {
		if err := sim.Canceled(ctx, "rotor"); err != nil {
			return nil, err
		}
		prog.Report(d, L, "optimal-chain: dynamic program")
		for i := 0; i+d < L; i++ {
			l := i + d
			o, w := row(opt, i, l), wrow(what, i, l)
			o1, w1 := row(opt1, i, l), wrow(what1, i, l)
			for m := range o {
				o[m], w[m], o1[m], w1[m] = rotorInf, -1, rotorInf, -1
			}
			si := &stages[i]
			c := si.Fwd + si.Bwd
			if d == 0 {
				fwd, fpeak := si.Fwd, si.FwdAll
				if rotorLeaf(stages, i) {
					fwd, fpeak = si.FwdLeaf, si.FwdLeafPeak
				}
				c := fwd + si.Bwd
				lo := clamp(max(din(i)+fpeak, din(i)+si.XBarBwd+si.BwdPeak))
				for m := lo; m < M; m++ {
					o[m], w[m] = c, rotorChainGen
				}
				lo = clamp(max(din(i)+si.In+fpeak, din(i)+si.InBwd+si.XBarBwd+si.BwdPeak))
				for m := lo; m < M; m++ {
					o1[m], w1[m] = c, rotorChainGen
				}
				continue
			}
			bwdNeed := sumPG[l+1] - sumPG[i+1] + din(i) + si.XBarBwd + si.BwdPeak
			// Chain: F_all(i), S(i+1, l) or S1(i+1, l), B(i).
			lo := clamp(max(din(l)+si.FwdAll, bwdNeed))
			relax(o, w, rotorChainGen, lo, row(opt, i+1, l), si.XBar, c)
			// S1(i+1, l) counts stage i's output as its input: only when
			// XBarRest leaves it out (B(i) does not read it).
			once := si.XBarRest+stages[i+1].In <= si.XBar
			if once {
				relax(o, w, rotorChainOnce, lo, row(opt1, i+1, l), si.XBarRest, c)
			}
			lo1 := clamp(max(din(l)+si.In+si.FwdAll, bwdNeed+si.InBwd))
			relax(o1, w1, rotorChainGen, lo1, row(opt, i+1, l), si.InBwd+si.XBar, c)
			if once {
				relax(o1, w1, rotorChainOnce, lo1, row(opt1, i+1, l), si.InBwd+si.XBarRest, c)
			}
			// Checkpoint the input of stage j.
			ph1 := int64(0) // max over k in i..j-1 of [k>i] In_k + FwdNone_k
			for j := i + 1; j <= l; j++ {
				k := j - 1
				v := stages[k].FwdNone
				if k > i {
					v += stages[k].In
				}
				ph1 = max(ph1, v)
				in := stages[j].In
				pg := sumPG[l+1] - sumPG[j]
				lo := clamp(max(din(l)+ph1, pg))
				t3 := row(opt, i, j-1)
				cf := sumF[j] - sumF[i]
				for _, v := range [2]struct {
					t2   []int64
					off  int64
					kind int32
				}{{row(opt, j, l), in, rotorCkptGen}, {row(opt1, j, l), 0, rotorCkptOnce}} {
					code := v.kind | int32(j)<<2
					lo2 := max(lo, clamp(v.off), clamp(pg))
					if lo2 >= M {
						continue
					}
					// Re-slice so that one index walks all four rows
					// without bounds checks in the loop.
					n := M - lo2
					a := v.t2[lo2-int(v.off):][:n]
					dst := o[lo2:][:n]
					wd := w[lo2:][:n]
					// S(i, j-1) gets m - pg, above the table's top when
					// the backward of j..l released more than it held:
					// the top level's time stands for those (times never
					// increase with memory, so this is safe).
					nb := min(n, M-(lo2-int(pg)))
					b := t3[lo2-int(pg):][:nb]
					// An infinite a or b gives t > rotorInf >= dst[x]: no
					// separate feasibility test is needed.
					for x := range b {
						if t := cf + a[x] + b[x]; t < dst[x] {
							dst[x], wd[x] = t, code
						}
					}
					topB := t3[M-1]
					for x := nb; x < n; x++ {
						if t := cf + a[x] + topB; t < dst[x] {
							dst[x], wd[x] = t, code
						}
					}
				}
			}
		}
	}
	return &rotorTable{stages: stages, L: L, M: M, base: base, opt: opt, opt1: opt1, what: what, what1: what1, sumPG: sumPG}, nil
}

// schedule rebuilds the optimal schedule of the whole chain at memory
// level mem (which must be feasible).
func (t *rotorTable) schedule(mem int) ([]RotorAction, error) {
	L, stages, sumPG := t.L, t.stages, t.sumPG
	if mem < 0 || mem >= t.M || t.top()[mem] >= rotorInf {
		return nil, fmt.Errorf("rotor: internal error: memory level %d is not feasible", mem)
	}
	var acts []RotorAction
	// Reconstruct with an explicit stack of pending subproblems (once: the
	// S1 table) and deferred backward steps.
	type frame struct {
		i, l, m int32
		once    bool
		bwd     bool // a deferred B(i)
	}
	stack := []frame{{i: 0, l: int32(L - 1), m: int32(mem)}}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if f.bwd {
			acts = append(acts, RotorAction{RotorBackward, f.i})
			continue
		}
		i, l, m := int(f.i), int(f.l), int(f.m)
		var wv int32
		if f.once {
			wv = t.wrow(t.what1, i, l)[m]
		} else {
			wv = t.wrow(t.what, i, l)[m]
		}
		if wv < 0 {
			return nil, fmt.Errorf("rotor: internal error: no choice for stages %d..%d at %d slots", i, l, m)
		}
		si := &stages[i]
		var keepIn int64
		if f.once {
			keepIn = si.InBwd
		}
		kind, j := wv&3, int(wv>>2)
		switch {
		case i == l:
			k := RotorForwardAll
			if rotorLeaf(stages, i) {
				k = RotorForwardLeaf
			}
			acts = append(acts, RotorAction{k, int32(i)}, RotorAction{RotorBackward, int32(i)})
		case kind == rotorChainGen:
			acts = append(acts, RotorAction{RotorForwardAll, int32(i)})
			stack = append(stack, frame{i: int32(i), bwd: true},
				frame{i: int32(i + 1), l: int32(l), m: int32(int64(m) - keepIn - si.XBar)})
		case kind == rotorChainOnce:
			acts = append(acts, RotorAction{RotorForwardAll, int32(i)})
			stack = append(stack, frame{i: int32(i), bwd: true},
				frame{i: int32(i + 1), l: int32(l), m: int32(int64(m) - keepIn - si.XBarRest), once: true})
		default:
			for k := i; k < j; k++ {
				acts = append(acts, RotorAction{RotorForwardNone, int32(k)})
			}
			pg := sumPG[l+1] - sumPG[j]
			sub := frame{i: int32(j), l: int32(l), m: int32(int64(m) - stages[j].In)}
			if kind == rotorCkptOnce {
				sub = frame{i: int32(j), l: int32(l), m: int32(m), once: true}
			}
			stack = append(stack, frame{i: int32(i), l: int32(j - 1), m: int32(min(int64(m)-pg, int64(t.M-1)))}, sub)
		}
	}
	return acts, nil
}

// Choice codes of the DP tables (low two bits; checkpoints carry j << 2).
const (
	rotorChainGen  int32 = 0 // leaf, or F_all(i) + S(i+1, l) + B(i)
	rotorChainOnce int32 = 1 // F_all(i) + S1(i+1, l) + B(i)
	rotorCkptGen   int32 = 2 // F_none(i..j-1) + S(j, l) + S(i, j-1)
	rotorCkptOnce  int32 = 3 // F_none(i..j-1) + S1(j, l) + S(i, j-1)
)
