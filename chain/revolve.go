package chain

import (
	"fmt"
	"math"
	"math/big"
)

// Revolve: binomial checkpointing of a homogeneous chain.
//
// Source: A. Griewank and A. Walther, "Algorithm 799: revolve: an
// implementation of checkpointing for the reverse or adjoint mode of
// computational differentiation", ACM TOMS 26(1), 2000; and Griewank &
// Walther, "Evaluating Derivatives", 2nd ed., SIAM 2008, chapter 12. A chain
// of l steps x_{i} = F_i(x_{i-1}) is reversed with s snapshots (the snapshot
// holding the chain input x_0 counts as one of them). Each step is taped
// exactly once, right before its reverse ("turn"); F(l, s) counts the
// additional untaped forward steps ("advances") of an optimal schedule:
//
//	t = the smallest integer with C(s+t, s) >= l
//	F(l, s) = t*l - C(s+t, s+1)
//
// and, equivalently, the dynamic program
//
//	F(1, s) = 0,  F(l, 1) = l(l-1)/2,
//	F(l, s) = min over 1 <= j < l of [ j + F(l-j, s-1) + F(j, s) ].

// RevolveExtraForwards returns F(l, s), the minimal number of extra forward
// steps needed to reverse a chain of l steps with s snapshots, from the
// closed form of Griewank & Walther. Binomials are evaluated with big
// integers, so any l that fits an int64 is handled; the result is an error
// when l < 1, s < 1, or when F does not fit an int64.
func RevolveExtraForwards(l, s int64) (int64, error) {
	if l < 1 {
		return 0, fmt.Errorf("revolve: steps l = %d, expected >= 1", l)
	}
	if s < 1 {
		return 0, fmt.Errorf("revolve: snapshots s = %d, expected >= 1", s)
	}
	if s == 1 {
		// t = l-1 and F = l(l-1)/2; avoid a loop of l big multiplications.
		bl := big.NewInt(l)
		f := new(big.Int).Mul(bl, big.NewInt(l-1))
		f.Rsh(f, 1)
		if !f.IsInt64() {
			return 0, fmt.Errorf("revolve: F(%d, %d) = %s overflows int64", l, s, f)
		}
		return f.Int64(), nil
	}
	// Grow t until C(s+t, s) >= l, updating C(s+t, s) = C(s+t-1, s)*(s+t)/t.
	bl := big.NewInt(l)
	c := big.NewInt(1) // C(s+0, s)
	var t int64
	tmp := new(big.Int)
	for c.Cmp(bl) < 0 {
		t++
		c.Mul(c, tmp.SetInt64(s+t))
		c.Quo(c, tmp.SetInt64(t))
	}
	// C(s+t, s+1) = C(s+t, s) * t / (s+1).
	c1 := new(big.Int).Mul(c, big.NewInt(t))
	c1.Quo(c1, tmp.SetInt64(s+1))
	f := new(big.Int).Mul(big.NewInt(t), bl)
	f.Sub(f, c1)
	if !f.IsInt64() {
		return 0, fmt.Errorf("revolve: F(%d, %d) = %s overflows int64", l, s, f)
	}
	return f.Int64(), nil
}

// revolveFast is the closed form in int64 arithmetic for the schedule
// generator's inner loop. It is exact while l*(s+t) fits an int64, which
// holds for every l up to 2^31 (C(s+t-1, s) < l before the last update).
// Callers pass 1 <= l and s >= 0; F(l, 0) for l > 1 is infinite.
func revolveFast(l, s int64) int64 {
	if l <= 1 {
		return 0
	}
	if s == 0 {
		return math.MaxInt64 / 4
	}
	if s == 1 {
		return l * (l - 1) / 2
	}
	if s >= l-1 {
		return l - 1
	}
	c, t := int64(1), int64(0)
	for c < l {
		t++
		c = c * (s + t) / t
	}
	return t*l - c*t/(s+1)
}

// RevolveTable returns F(l, s) for 1 <= l <= lmax and 1 <= s <= smax computed
// by the dynamic program (not the closed form), as a flat slice indexed
// [l*(smax+1)+s]; entries with l = 0 or s = 0 are unused (0 and "infinite").
// Time O(lmax^2 * smax): use it up to a few thousand steps.
func RevolveTable(lmax, smax int) ([]int64, error) {
	if lmax < 1 {
		return nil, fmt.Errorf("revolve table: lmax = %d, expected >= 1", lmax)
	}
	if smax < 1 {
		return nil, fmt.Errorf("revolve table: smax = %d, expected >= 1", smax)
	}
	if int64(lmax+1)*int64(smax+1) > 1<<28 {
		return nil, fmt.Errorf("revolve table: lmax = %d, smax = %d gives %d entries, expected at most 2^28", lmax, smax, int64(lmax+1)*int64(smax+1))
	}
	w := smax + 1
	const inf = math.MaxInt64 / 4
	f := make([]int64, (lmax+1)*w)
	for l := 2; l <= lmax; l++ {
		f[l*w] = inf // no snapshot: a chain of more than one step cannot be reversed
	}
	for s := 1; s <= smax; s++ {
		f[1*w+s] = 0
	}
	for l := 2; l <= lmax; l++ {
		f[l*w+1] = int64(l) * int64(l-1) / 2
		for s := 2; s <= smax; s++ {
			best := int64(inf)
			for j := 1; j < l; j++ {
				v := int64(j) + f[(l-j)*w+s-1] + f[j*w+s]
				if v < best {
					best = v
				}
			}
			f[l*w+s] = best
		}
	}
	return f, nil
}

// RevolveActionKind is one kind of action of a Revolve schedule.
type RevolveActionKind uint8

// Revolve actions, named as in Griewank & Walther's revolve routine.
const (
	// RevolveAdvance runs N untaped forward steps from the current state.
	RevolveAdvance RevolveActionKind = iota + 1
	// RevolveTakeshot stores the current state x_Step in a snapshot.
	RevolveTakeshot
	// RevolveRestore makes the snapshot of x_Step the current state.
	RevolveRestore
	// RevolveFirstTurn tapes the last step (Step) and reverses it.
	RevolveFirstTurn
	// RevolveYouTurn tapes step Step and reverses it.
	RevolveYouTurn
	// RevolveRelease drops the snapshot of x_Step (implicit in the original
	// routine, which overwrites snapshot slots; explicit here so snapshot
	// counts can be checked).
	RevolveRelease
)

var revolveKindNames = [...]string{"", "advance", "takeshot", "restore", "firsturn", "youturn", "release"}

// String returns the action's name.
func (k RevolveActionKind) String() string {
	if k == 0 || int(k) >= len(revolveKindNames) {
		return fmt.Sprintf("revolve_action(%d)", uint8(k))
	}
	return revolveKindNames[k]
}

// RevolveAction is one action of a Revolve schedule. Steps are numbered
// 1..l; state x_i is the output of step i (x_0 is the chain input). For
// advance, Step is the state reached and N the number of steps run; for
// takeshot, restore and release, Step is the state; for turns, Step is the
// step taped and reversed.
type RevolveAction struct {
	Kind RevolveActionKind
	Step int64
	N    int64
}

// RevolveSchedule returns an optimal schedule for reversing a chain of l
// steps with s snapshots, the input snapshot included (x_0 is stored by an
// initial takeshot). Its number of advanced steps equals
// RevolveExtraForwards(l, s), and at most s snapshots are held at any time.
// Choosing each split scans all candidates with the closed form, so the cost
// is about O(l^2) closed-form evaluations in the worst case (s = 2): meant
// for l up to ~10^4.
func RevolveSchedule(l, s int64) ([]RevolveAction, error) {
	if l < 1 {
		return nil, fmt.Errorf("revolve schedule: steps l = %d, expected >= 1", l)
	}
	if s < 1 {
		return nil, fmt.Errorf("revolve schedule: snapshots s = %d, expected >= 1", s)
	}
	if l > 1<<24 {
		return nil, fmt.Errorf("revolve schedule: steps l = %d, expected <= 2^24", l)
	}
	acts := []RevolveAction{{Kind: RevolveTakeshot, Step: 0}}
	first := true
	// rec reverses steps a+1..a+n with the current state x_a (stored in a
	// snapshot unless n == 1) and k snapshots counting that one.
	var rec func(a, n, k int64)
	rec = func(a, n, k int64) {
		for n > 1 {
			j := revolveSplit(n, k)
			acts = append(acts, RevolveAction{Kind: RevolveAdvance, Step: a + j, N: j})
			if n-j > 1 {
				acts = append(acts, RevolveAction{Kind: RevolveTakeshot, Step: a + j})
				rec(a+j, n-j, k-1)
				acts = append(acts, RevolveAction{Kind: RevolveRelease, Step: a + j})
			} else {
				rec(a+j, 1, k-1)
			}
			acts = append(acts, RevolveAction{Kind: RevolveRestore, Step: a})
			n = j
		}
		kind := RevolveYouTurn
		if first {
			kind, first = RevolveFirstTurn, false
		}
		acts = append(acts, RevolveAction{Kind: kind, Step: a + 1})
	}
	rec(0, l, s)
	acts = append(acts, RevolveAction{Kind: RevolveRelease, Step: 0})
	return acts, nil
}

// revolveSplit returns the j (1 <= j < n) minimizing j + F(n-j, k-1) + F(j,
// k), the largest such j on ties (fewer snapshots in flight).
func revolveSplit(n, k int64) int64 {
	best, bj := int64(math.MaxInt64), int64(1)
	for j := n - 1; j >= 1; j-- {
		v := j + revolveFast(n-j, k-1) + revolveFast(j, k)
		if v < best {
			best, bj = v, j
		}
	}
	return bj
}

// RevolveCounts summarizes a schedule: the number of advanced (extra)
// forward steps, taped steps, and the largest number of snapshots held at
// once. It returns an error if the schedule is inconsistent (a restore or
// release of a state without a snapshot, an advance or turn from a state
// other than the current one).
func RevolveCounts(acts []RevolveAction) (extra, taped, maxSnaps int64, err error) {
	held := map[int64]bool{}
	cur := int64(0)
	for i, a := range acts {
		switch a.Kind {
		case RevolveAdvance:
			if a.Step-a.N != cur || a.N < 1 {
				return 0, 0, 0, fmt.Errorf("action %d: advance %d steps to x_%d from current x_%d", i, a.N, a.Step, cur)
			}
			extra += a.N
			cur = a.Step
		case RevolveTakeshot:
			if a.Step != cur || held[a.Step] {
				return 0, 0, 0, fmt.Errorf("action %d: takeshot of x_%d, current x_%d, already held %v", i, a.Step, cur, held[a.Step])
			}
			held[a.Step] = true
			if n := int64(len(held)); n > maxSnaps {
				maxSnaps = n
			}
		case RevolveRestore:
			if !held[a.Step] {
				return 0, 0, 0, fmt.Errorf("action %d: restore of x_%d without a snapshot", i, a.Step)
			}
			cur = a.Step
		case RevolveRelease:
			if !held[a.Step] {
				return 0, 0, 0, fmt.Errorf("action %d: release of x_%d without a snapshot", i, a.Step)
			}
			delete(held, a.Step)
		case RevolveFirstTurn, RevolveYouTurn:
			if a.Step-1 != cur {
				return 0, 0, 0, fmt.Errorf("action %d: turn of step %d from current x_%d", i, a.Step, cur)
			}
			taped++
		default:
			return 0, 0, 0, fmt.Errorf("action %d: kind %d, expected a revolve action", i, a.Kind)
		}
	}
	return extra, taped, maxSnaps, nil
}
