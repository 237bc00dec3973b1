package sublinear

import (
	"context"
	"fmt"
	"math"
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
// Opt[i][l][m] is the minimal time over these choices; O(M L^3) time and
// O(M L^2) memory, in flat slices indexed (i*L + l)*(M+1) + m.

// RotorStage holds one stage's figures for the solver, memory in slots.
type RotorStage struct {
	// Fwd and Bwd are the forward and backward times.
	Fwd, Bwd int64
	// In is the size of the stage's input (the checkpoint kept to restart
	// the stage); XBar the output plus the activations its backward reads;
	// XBarBwd the part of XBar alive during its own backward.
	In, XBar, XBarBwd int64
	// FwdNone and FwdAll are the forward peaks above the held input, keeping
	// only the output, respectively x-bar.
	FwdNone, FwdAll int64
	// BwdPeak is the backward peak above XBarBwd plus the incoming gradient.
	BwdPeak int64
	// GradOut is the gradient passed to the previous stage's backward;
	// HeldGrad the gradients kept until the end of the backward pass.
	GradOut, HeldGrad int64
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
)

var rotorKindNames = [...]string{"", "F_none", "F_all", "B"}

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
// Cancelling ctx stops the DP and returns ctx's error (the DP has no partial
// answer).
func RotorSolve(ctx context.Context, stages []RotorStage, mem int) (*RotorSolution, error) {
	L := len(stages)
	if L == 0 {
		return nil, fmt.Errorf("rotor: chain has 0 stages, expected >= 1")
	}
	if mem < 0 {
		return nil, fmt.Errorf("rotor: memory = %d slots, expected >= 0", mem)
	}
	for k, s := range stages {
		if s.Fwd < 0 || s.Bwd < 0 || s.In < 0 || s.XBar < 0 || s.XBarBwd < 0 || s.FwdNone < 0 || s.FwdAll < 0 || s.BwdPeak < 0 || s.GradOut < 0 || s.HeldGrad < 0 {
			return nil, fmt.Errorf("rotor: stage %d has a negative figure %+v, expected all >= 0", k, s)
		}
		if s.Fwd > rotorInf/int64(4*L) || s.Bwd > rotorInf/int64(4*L) {
			return nil, fmt.Errorf("rotor: stage %d times fwd %d bwd %d are too large, expected < %d", k, s.Fwd, s.Bwd, rotorInf/int64(4*L))
		}
	}
	M := mem + 1
	if int64(L)*int64(L)*int64(M) > rotorMaxEntries {
		return nil, fmt.Errorf("rotor: %d stages x %d memory slots = %d table entries, expected at most %d (use fewer slots)", L, M, int64(L)*int64(L)*int64(M), rotorMaxEntries)
	}
	opt := make([]int64, L*L*M)
	what := make([]int32, L*L*M)
	// Prefix sums of forward times and held gradients.
	sumF := make([]int64, L+1)
	sumPG := make([]int64, L+1)
	for k, s := range stages {
		sumF[k+1] = sumF[k] + s.Fwd
		sumPG[k+1] = sumPG[k] + s.HeldGrad
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
	for d := 0; d < L; d++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("rotor: %w", err)
		}
		for i := 0; i+d < L; i++ {
			l := i + d
			row := opt[(i*L+l)*M : (i*L+l+1)*M]
			wrow := what[(i*L+l)*M : (i*L+l+1)*M]
			for m := range row {
				row[m], wrow[m] = rotorInf, -1
			}
			si := &stages[i]
			if d == 0 {
				lo := clamp(max(din(i)+si.FwdAll, din(i)+si.XBarBwd+si.BwdPeak))
				for m := lo; m < M; m++ {
					row[m], wrow[m] = si.Fwd+si.Bwd, 0
				}
				continue
			}
			// Chain: F_all(i), S(i+1, l), B(i).
			{
				lo := clamp(max(din(l)+si.FwdAll, sumPG[l+1]-sumPG[i+1]+din(i)+si.XBarBwd+si.BwdPeak, si.XBar))
				sub := opt[((i+1)*L+l)*M : ((i+1)*L+l+1)*M]
				x := int(si.XBar)
				c := si.Fwd + si.Bwd
				for m := lo; m < M; m++ {
					if v := c + sub[m-x]; v < row[m] && sub[m-x] < rotorInf {
						row[m], wrow[m] = v, 0
					}
				}
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
				lo := clamp(max(din(l)+ph1, in, pg))
				t2 := opt[(j*L+l)*M : (j*L+l+1)*M]
				t3 := opt[(i*L+j-1)*M : (i*L+j)*M]
				c := sumF[j] - sumF[i]
				xi, pi := int(in), int(pg)
				for m := lo; m < M; m++ {
					a, b := t2[m-xi], t3[m-pi]
					if a >= rotorInf || b >= rotorInf {
						continue
					}
					if v := c + a + b; v < row[m] {
						row[m], wrow[m] = v, int32(j)
					}
				}
			}
		}
	}
	top := opt[(L-1)*M : L*M] // i = 0, l = L-1
	sol := &RotorSolution{MinSlots: -1}
	for m := 0; m < M; m++ {
		if top[m] < rotorInf {
			sol.MinSlots = m
			break
		}
	}
	if top[mem] >= rotorInf {
		return sol, nil
	}
	sol.Feasible = true
	sol.Time = top[mem]
	sol.UsedSlots = mem
	for sol.UsedSlots > 0 && top[sol.UsedSlots-1] == sol.Time {
		sol.UsedSlots--
	}
	// Reconstruct with an explicit stack of pending subproblems and
	// backward steps.
	type frame struct {
		i, l, m int32
		bwd     bool // a deferred B(i)
	}
	stack := []frame{{0, int32(L - 1), int32(sol.UsedSlots), false}}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if f.bwd {
			sol.Actions = append(sol.Actions, RotorAction{RotorBackward, f.i})
			continue
		}
		i, l, m := int(f.i), int(f.l), int(f.m)
		w := what[(i*L+l)*M+m]
		switch {
		case w < 0:
			return nil, fmt.Errorf("rotor: internal error: no choice for stages %d..%d at %d slots", i, l, m)
		case i == l:
			sol.Actions = append(sol.Actions, RotorAction{RotorForwardAll, int32(i)}, RotorAction{RotorBackward, int32(i)})
		case w == 0:
			sol.Actions = append(sol.Actions, RotorAction{RotorForwardAll, int32(i)})
			stack = append(stack, frame{int32(i), 0, 0, true},
				frame{int32(i + 1), int32(l), int32(m - int(stages[i].XBar)), false})
		default:
			j := int(w)
			for k := i; k < j; k++ {
				sol.Actions = append(sol.Actions, RotorAction{RotorForwardNone, int32(k)})
			}
			pg := sumPG[l+1] - sumPG[j]
			stack = append(stack, frame{int32(i), int32(j - 1), int32(m - int(pg)), false},
				frame{int32(j), int32(l), int32(m - int(stages[j].In)), false})
		}
	}
	return sol, nil
}
