package mirror

import (
	"fmt"
	"slices"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/internal/dedup"
	"github.com/remat-dev/remat/sim"
)

// peakModel answers "what is the simulated peak if these groups are
// mirrored?" in O(k log n) per group switched on or off, where k is the
// number of storage events the group's ops touch, instead of replaying the
// whole schedule (O(n) per question, O(n^2) for the cost-aware pass).
//
// It lays out one super-sequence that contains every step any state of the
// groups can produce: the graph's ops in order and, before each backward or
// update op, the clone runs Schedule would emit for each of its inputs, once
// with the whole group of the input's producer mirrored ("all" variant) and
// once with only the group's force-mirrored ops ("forced" variant). A group
// is either on (all its ops mirrored) or off (its forced ops only), so the
// schedule of any state is the super-sequence restricted to the active
// steps, in the same order (a clone run only reaches ops of its own group,
// and Schedule visits a backward op's inputs in order). Memory follows
// sim.PlanFromSchedule and the Machine with the ideal allocator: a storage
// lives from each (re)creation to its last read before the next creation;
// storages without a producer, persistent ones and the atomic-clean arena
// are resident throughout; a step's workspace counts while it runs. A lazy
// segment tree over the positions holds the bytes live at each step; the
// peak is its maximum plus the resident bytes. Positions of inactive steps
// never exceed the previous active step, so they never set the peak.
//
// The model is exact for one live workspace (sim.TempSlots == 1, the
// default); with more, workspaces kept across steps are not counted, and the
// caller checks its final plan with the simulator.
type peakModel struct {
	g      *graph.Graph
	on     []bool  // per group
	stGrp  []int32 // per step: group of a clone step, -1 for the graph's ops
	stAll  []bool  // per step: clone of the "all" variant
	stOp   []int32 // per step: the op
	ws     []int64 // per op: workspace bytes
	size   []int64 // per tensor: bytes of a storage the model tracks (0 otherwise)
	const0 int64   // bytes resident throughout (inputs, parameters, arena)

	// Events of each tracked storage in CSR form, in step order:
	// evPos[evStart[r]:evStart[r+1]] with evCreate telling creations from
	// reads.
	evStart  []int32
	evPos    []int32
	evCreate []bool

	// Per group: its clone steps and the storages its ops touch (CSR).
	gStepStart []int32
	gSteps     []int32
	gRootStart []int32
	gRoots     []int32

	tree segTree

	// Scratch.
	oldIv, newIv []int32
	bounds       []int32
}

// active reports whether step s runs in the current state.
func (m *peakModel) active(s int32) bool {
	gr := m.stGrp[s]
	return gr < 0 || m.on[gr] == m.stAll[s]
}

// newPeakModel builds the model for the candidate groups (all off: only
// forced ops mirrored). groupOf maps a candidate op to its group (-1 for
// other ops); forced marks the force-mirrored ops.
func newPeakModel(g *graph.Graph, so sim.Options, groups [][]graph.OpID, groupOf []int32, forced []bool) (*peakModel, int, error) {
	so.Capacity, so.Allocator, so.ReserveAll = -1, nil, false
	so.Timeline, so.Trace = false, false
	mach, err := sim.NewMachine(g, so)
	if err != nil {
		return nil, 0, fmt.Errorf("mirror-cost: memory model: %w", err)
	}
	n, nt := len(g.Ops), len(g.Tensors)
	d := g.Dense()
	m := &peakModel{g: g, on: make([]bool, len(groups))}

	// The super-sequence.
	clonedAll := make([]bool, n)
	clonedForced := make([]bool, n)
	var stack []int32
	addStep := func(op, grp int32, all bool) {
		m.stOp = append(m.stOp, op)
		m.stGrp = append(m.stGrp, grp)
		m.stAll = append(m.stAll, all)
	}
	// run appends the clone run of op p over the ops in: all ops of the
	// group (all) or its forced ops; it is Schedule's ensure.
	run := func(p int32, all bool) {
		cloned := clonedForced
		if all {
			cloned = clonedAll
		}
		in := func(q int32) bool { return groupOf[q] >= 0 && (all || forced[q]) }
		stack = append(stack[:0], p)
		for len(stack) > 0 {
			top := stack[len(stack)-1]
			if cloned[top] {
				stack = stack[:len(stack)-1]
				continue
			}
			pending := false
			for _, u := range d.Inputs(graph.OpID(top)) {
				q := d.Producer[u]
				if q != graph.NoOp && in(int32(q)) && !cloned[q] {
					stack = append(stack, int32(q))
					pending = true
				}
			}
			if pending {
				continue
			}
			cloned[top] = true
			addStep(top, groupOf[top], all)
			stack = stack[:len(stack)-1]
		}
	}
	m.stOp = make([]int32, 0, n+n/2)
	for i := range g.Ops {
		if d.Phase[i] != graph.Forward {
			for _, t := range d.Inputs(graph.OpID(i)) {
				p := d.Producer[t]
				if p == graph.NoOp || groupOf[p] < 0 || d.Phase[p] != graph.Forward {
					continue
				}
				run(int32(p), true)
				if forced[p] {
					run(int32(p), false)
				}
			}
		}
		addStep(int32(i), -1, false)
	}
	ns := len(m.stOp)

	// Storage classes. A storage the default plan never frees (persistent
	// kinds, a parameter's final gradient, whatever sim.PlanFromSchedule
	// keeps) is resident from its creation to the end.
	freed, err := freedStorages(g)
	if err != nil {
		return nil, 0, err
	}
	root := d.Root
	kept := make([]bool, nt) // resident from creation to the end
	m.size = make([]int64, nt)
	arena := so.AtomicCleanPolicy == 0
	for i, r := range root {
		if r != graph.TensorID(i) {
			continue
		}
		switch p := d.Producer[i]; {
		case p == graph.NoOp:
			m.const0 += d.StorageBytes[i]
		case arena && sim.IsAtomicClean(&g.Ops[p]):
			m.const0 += d.StorageBytes[i]
		case !freed[i]:
			kept[i] = true
		default:
			m.size[i] = d.StorageBytes[i]
		}
	}
	m.ws = make([]int64, n)
	for i := range g.Ops {
		m.ws[i] = mach.OpWorkspace(graph.OpID(i))
	}

	// Events per tracked storage, and the constant part of the curve.
	diff := make([]int64, ns+1)
	keptDone := make([]bool, nt)
	// forEvent calls f for the events of step s: creations of its
	// storage-owning outputs, then its distinct input storages.
	inSeen := dedup.New(nt) // a step's distinct input storages
	forEvent := func(s int, f func(r graph.TensorID, create bool)) {
		ins, outs := d.Inputs(graph.OpID(m.stOp[s])), d.Outputs(graph.OpID(m.stOp[s]))
		for _, o := range outs {
			if root[o] == o && m.size[o] > 0 {
				f(o, true)
			}
		}
		inSeen.Next()
		for _, t := range ins {
			r := root[t]
			if m.size[r] == 0 || slices.Contains(outs, r) {
				continue
			}
			if !inSeen.Seen(int32(r)) {
				f(r, false)
			}
		}
	}
	m.evStart = make([]int32, nt+1)
	for s := 0; s < ns; s++ {
		forEvent(s, func(r graph.TensorID, _ bool) { m.evStart[r+1]++ })
		if m.stGrp[s] < 0 {
			for _, o := range d.Outputs(graph.OpID(m.stOp[s])) {
				if kept[o] && !keptDone[o] {
					keptDone[o] = true
					diff[s] += d.StorageBytes[o]
				}
			}
		}
	}
	for i := 0; i < nt; i++ {
		m.evStart[i+1] += m.evStart[i]
	}
	m.evPos = make([]int32, m.evStart[nt])
	m.evCreate = make([]bool, m.evStart[nt])
	fill := make([]int32, nt)
	copy(fill, m.evStart[:nt])
	for s := 0; s < ns; s++ {
		forEvent(s, func(r graph.TensorID, create bool) {
			m.evPos[fill[r]] = int32(s)
			m.evCreate[fill[r]] = create
			fill[r]++
		})
	}
	fill = nil

	// Per group: clone steps and touched storages.
	ng := len(groups)
	m.gStepStart = make([]int32, ng+1)
	for s := 0; s < ns; s++ {
		if gr := m.stGrp[s]; gr >= 0 {
			m.gStepStart[gr+1]++
		}
	}
	for i := 0; i < ng; i++ {
		m.gStepStart[i+1] += m.gStepStart[i]
	}
	m.gSteps = make([]int32, m.gStepStart[ng])
	gf := make([]int32, ng)
	copy(gf, m.gStepStart[:ng])
	for s := 0; s < ns; s++ {
		if gr := m.stGrp[s]; gr >= 0 {
			m.gSteps[gf[gr]] = int32(s)
			gf[gr]++
		}
	}
	stamp := make([]int32, nt)
	m.gRootStart = make([]int32, ng+1)
	for gi, grp := range groups {
		for _, o := range grp {
			for _, t := range d.Outputs(o) {
				if r := root[t]; m.size[r] > 0 && stamp[r] != int32(gi)+1 {
					stamp[r] = int32(gi) + 1
					m.gRoots = append(m.gRoots, int32(r))
				}
			}
			for _, t := range d.Inputs(o) {
				if r := root[t]; m.size[r] > 0 && stamp[r] != int32(gi)+1 {
					stamp[r] = int32(gi) + 1
					m.gRoots = append(m.gRoots, int32(r))
				}
			}
		}
		m.gRootStart[gi+1] = int32(len(m.gRoots))
	}

	// Initial curve: every tracked storage's intervals, the workspaces of
	// the active steps.
	for r := 0; r < nt; r++ {
		if m.size[r] == 0 {
			continue
		}
		m.oldIv = m.intervals(int32(r), m.oldIv[:0])
		for k := 0; k < len(m.oldIv); k += 2 {
			diff[m.oldIv[k]] += m.size[r]
			diff[m.oldIv[k+1]+1] -= m.size[r]
		}
	}
	vals := make([]int64, ns)
	cur := int64(0)
	for s := 0; s < ns; s++ {
		cur += diff[s]
		v := cur
		if m.active(int32(s)) {
			v += m.ws[m.stOp[s]]
		}
		vals[s] = v
	}
	// Kept storages were added at their creation and never removed: diff
	// holds +bytes at creation only, so cur carries them to the end.
	m.tree.init(vals)
	return m, ns, nil
}

// freedStorages marks the storages the default plan frees.
func freedStorages(g *graph.Graph) ([]bool, error) {
	order := make([]graph.OpID, len(g.Ops))
	for i := range order {
		order[i] = graph.OpID(i)
	}
	p, err := sim.PlanFromSchedule(g, "none", order)
	if err != nil {
		return nil, fmt.Errorf("mirror-cost: %w", err)
	}
	freed := make([]bool, len(g.Tensors))
	for _, st := range p.Steps {
		if st.Kind == sim.Free && st.Tensor >= 0 && int(st.Tensor) < len(freed) {
			freed[st.Tensor] = true
		}
	}
	return freed, nil
}

// intervals appends the live intervals [start, end] (step positions) of
// storage r in the current state.
func (m *peakModel) intervals(r int32, dst []int32) []int32 {
	open := false
	var start, last int32
	for k := m.evStart[r]; k < m.evStart[r+1]; k++ {
		s := m.evPos[k]
		if !m.active(s) {
			continue
		}
		if m.evCreate[k] {
			if open {
				dst = append(dst, start, last)
			}
			open, start, last = true, s, s
		} else if open {
			last = s
		}
	}
	if open {
		dst = append(dst, start, last)
	}
	return dst
}

// peak returns the peak bytes of the current state.
func (m *peakModel) peak() int64 {
	return m.const0 + max(0, m.tree.max())
}

// set switches group gr on or off and updates the curve.
func (m *peakModel) set(gr int32, on bool) {
	if m.on[gr] == on {
		return
	}
	roots := m.gRoots[m.gRootStart[gr]:m.gRootStart[gr+1]]
	// Old intervals of every touched storage, then the new ones.
	m.oldIv = m.oldIv[:0]
	m.bounds = append(m.bounds[:0], 0)
	for _, r := range roots {
		m.oldIv = m.intervals(r, m.oldIv)
		m.bounds = append(m.bounds, int32(len(m.oldIv)))
	}
	for _, s := range m.gSteps[m.gStepStart[gr]:m.gStepStart[gr+1]] {
		if m.active(s) {
			m.tree.add(s, s, -m.ws[m.stOp[s]])
		}
	}
	m.on[gr] = on
	for _, s := range m.gSteps[m.gStepStart[gr]:m.gStepStart[gr+1]] {
		if m.active(s) {
			m.tree.add(s, s, m.ws[m.stOp[s]])
		}
	}
	for i, r := range roots {
		m.newIv = m.intervals(r, m.newIv[:0])
		old := m.oldIv[m.bounds[i]:m.bounds[i+1]]
		if equalInt32(old, m.newIv) {
			continue
		}
		sz := m.size[r]
		for k := 0; k < len(old); k += 2 {
			m.tree.add(old[k], old[k+1], -sz)
		}
		for k := 0; k < len(m.newIv); k += 2 {
			m.tree.add(m.newIv[k], m.newIv[k+1], sz)
		}
	}
}

func equalInt32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// segTree is a max segment tree over positions with range add: t[i] is the
// maximum over node i's leaves, d[i] the pending add of internal node i.
type segTree struct {
	n int // leaves (a power of two)
	t []int64
	d []int64
}

func (s *segTree) init(vals []int64) {
	n := 1
	for n < len(vals) {
		n <<= 1
	}
	s.n = n
	s.t = make([]int64, 2*n)
	s.d = make([]int64, n)
	copy(s.t[n:], vals)
	for i := n - 1; i >= 1; i-- {
		s.t[i] = max(s.t[2*i], s.t[2*i+1])
	}
}

func (s *segTree) apply(i int, v int64) {
	s.t[i] += v
	if i < s.n {
		s.d[i] += v
	}
}

func (s *segTree) pull(i int) {
	for i > 1 {
		i >>= 1
		s.t[i] = max(s.t[2*i], s.t[2*i+1]) + s.d[i]
	}
}

// add adds v to the positions [from, to].
func (s *segTree) add(from, to int32, v int64) {
	if v == 0 || from > to {
		return
	}
	l, r := int(from)+s.n, int(to)+s.n+1
	l0, r0 := l, r-1
	for l < r {
		if l&1 == 1 {
			s.apply(l, v)
			l++
		}
		if r&1 == 1 {
			r--
			s.apply(r, v)
		}
		l >>= 1
		r >>= 1
	}
	s.pull(l0)
	s.pull(r0)
}

func (s *segTree) max() int64 {
	if len(s.t) < 2 {
		return 0
	}
	return s.t[1]
}
