package chain

import (
	"fmt"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/internal/dedup"
	"github.com/remat-dev/remat/sim"
)

// Stage decomposition: the forward part of a training graph cut into a chain
// at articulation points, the cuts across which exactly one forward
// activation is live (parameters, inputs and constants ignored), so that
// every path from the input to the loss passes through that tensor. Residual
// blocks, transformer blocks and plain layers of VGG-like chains each become
// one stage. The chain solvers (Chen, Revolve, Rotor) work on these stages.

// StageTimeFunc returns the time of one op (ns or any consistent unit). The
// simulator's cost model can be plugged in here.
type StageTimeFunc func(op graph.OpID) int64

// StagesDefaultTime returns the default time callback: the op's TimeNs when
// measured, else a FLOPs proxy (1 ns per 10^4 FLOPs plus 1 ns per KB
// accessed plus 1 ns), so that every op costs something.
func StagesDefaultTime(g *graph.Graph) StageTimeFunc {
	return func(id graph.OpID) int64 {
		o := &g.Ops[id]
		if o.TimeNs > 0 {
			return o.TimeNs
		}
		return o.FLOPs/10000 + o.BytesAccessed/1000 + 1
	}
}

// Stage is one link of the chain. Byte figures count storage (views add
// nothing) and exclude pinned tensors, which are part of StageChain.Pinned.
type Stage struct {
	// Fwd lists the stage's forward ops in execution order; Bwd its backward
	// ops (those whose Forward op is in Fwd, plus unlinked backward ops such
	// as gradient accumulations, attached to the lowest stage whose backward
	// they read from) in execution order.
	Fwd, Bwd []graph.OpID
	// Input is the activation entering the stage (NoTensor for the first
	// stage or when nothing but inputs/parameters enters); Output is the one
	// leaving it (the last stage's output is the last forward op's first
	// output, usually the loss).
	Input, Output graph.TensorID
	// FwdTime and BwdTime are the stage's forward time (recomputable ops
	// only: pinned ops run once and are counted in StageChain.PinnedTime) and
	// backward time.
	FwdTime, BwdTime int64
	// InputBytes is the size of Input (0 if pinned or absent); OutputBytes
	// that of Output. InputBwdBytes is InputBytes if the stage's backward
	// reads its input, else 0.
	InputBytes, OutputBytes, InputBwdBytes int64
	// XBarBytes is the output plus every stage activation the backward
	// reads ("x-bar" of Beaumont et al.); XBarBwdBytes the part of it still
	// alive when the stage's own backward runs (the output only if that
	// backward reads it: otherwise its last reader was the next stage).
	XBarBytes, XBarBwdBytes int64
	// XBarRestBytes is x-bar without the output unless the stage's backward
	// reads it: what stays once the next stage has consumed the output.
	XBarRestBytes int64
	// FwdPeakNone and FwdPeakAll are the peak bytes, above the held input,
	// of running the forward while keeping only the output, respectively the
	// output and the saved activations (both include workspaces).
	FwdPeakNone, FwdPeakAll int64
	// BwdPeak is the peak bytes of the backward above its starting state
	// (XBarBwdBytes plus GradInBytes held).
	BwdPeak int64
	// Leaf lists the forward ops the stage's own backward needs (those
	// producing, within the stage, what it reads), in order: a forward run
	// right before the stage's backward, once the next stage is done,
	// needs no more. FwdLeafTime is their time (recomputable ones only) and
	// FwdPeakLeaf the peak above the held input of running them keeping
	// what the backward reads.
	Leaf        []graph.OpID
	FwdLeafTime int64
	FwdPeakLeaf int64
	// GradInBytes is the gradient the backward receives from the next stage's
	// backward; GradOutBytes the gradient it passes to the previous stage;
	// HeldGradBytes the other gradients it produces that stay alive past the
	// previous stage (parameter gradients waiting for the update).
	GradInBytes, GradOutBytes, HeldGradBytes int64
	// ReleasedBytes is the part of StageChain.Pinned this stage's backward
	// frees for good: activations kept from their first computation (not
	// recomputable, or read across stages) whose last reader is this
	// backward.
	ReleasedBytes int64
}

// StageChain is the stage decomposition of a training graph.
type StageChain struct {
	Stages []Stage
	// Update lists the update-phase ops, in order; they run after the
	// backward of every stage.
	Update []graph.OpID
	// Pinned is the bytes that the chain solvers treat as resident during
	// the forward and backward passes: tensors without a producer (inputs,
	// parameters, constants, optimizer state), persistent outputs of forward
	// and backward ops, outputs of memset-initialized ops, and the outputs
	// of ops that may not be recomputed (Op.Recomputable false, or whose
	// output storage is written in place by such an op, or read by the
	// backward of another stage).
	Pinned int64
	// UpdatePeak is the peak bytes during the update phase (absolute:
	// Pinned, the held gradients and the update's own outputs, such as the
	// updated parameters, which are not part of Pinned).
	UpdatePeak int64
	// PinnedTime is the time of the pinned forward ops (run once), UpdateTime
	// that of the update ops.
	PinnedTime, UpdateTime int64
	// OpPinned[op] reports whether op is pinned (computed once, never
	// recomputed).
	OpPinned []bool
	// StageOf[op] is the stage of a forward or backward op (-1 for update
	// ops).
	StageOf []int32
	// Ungrouped is the number of stages the cuts give before grouping
	// (StagesOptions.MaxStages); len(Stages) when nothing was grouped.
	Ungrouped int
	// ops is the number of ops of the graph the chain was made for.
	ops int
}

// StagesOptions configures StagesOf.
type StagesOptions struct {
	// Time is the per-op time callback (nil: StagesDefaultTime).
	Time StageTimeFunc
	// Workspace is the per-op workspace callback in bytes (nil: the op's
	// Workspace field). Plug the simulator's algorithm choice in
	// (sim.Machine.OpWorkspace) so that the figures count what it counts.
	Workspace StageTimeFunc
	// MaxStages, when > 0, caps the number of stages: consecutive stages
	// are grouped (balanced by forward time) into at most MaxStages, so
	// that a solver can afford the chain. StageChain.Ungrouped keeps the
	// count before grouping.
	MaxStages int
}

// StagesOf splits g's forward ops into stages at articulation points and
// measures each stage. The forward ops must precede every backward op and
// backward ops every update op (the order builders and importers produce);
// the graph must have at least one forward op.
func StagesOf(g *graph.Graph, opts StagesOptions) (*StageChain, error) {
	if g == nil {
		return nil, fmt.Errorf("stages: graph is nil")
	}
	if opts.MaxStages < 0 {
		return nil, fmt.Errorf("stages: MaxStages = %d, expected >= 0 (0: no cap)", opts.MaxStages)
	}
	timeOf := opts.Time
	if timeOf == nil {
		timeOf = StagesDefaultTime(g)
	}
	wsOf := opts.Workspace
	if wsOf == nil {
		wsOf = func(op graph.OpID) int64 { return g.Ops[op].Workspace }
	}
	no, nt := len(g.Ops), len(g.Tensors)
	d := g.Dense()
	nf := 0
	for nf < no && d.Phase[nf] == graph.Forward {
		nf++
	}
	if nf == 0 {
		return nil, fmt.Errorf("stages: graph %q: ops[0] is not a forward op (graph has %d ops), expected forward ops before backward ops", g.Name, no)
	}
	nb := nf
	for nb < no && d.Phase[nb] == graph.Backward {
		nb++
	}
	for i := nb; i < no; i++ {
		if d.Phase[i] != graph.Update {
			return nil, fmt.Errorf("stages: graph %q: op %d %q is in phase %v after the backward part, expected forward ops, then backward ops, then update ops", g.Name, i, g.Ops[i].Name, d.Phase[i])
		}
	}
	root := d.Root
	// Pinned ops: not recomputable, or producing a storage that a
	// non-recomputable op writes in place.
	pinned := make([]bool, no)
	var inPlace []int32 // forward in-place ops left recomputable, see below
	for i := 0; i < no; i++ {
		o := &g.Ops[i]
		if o.Recomputable() {
			continue
		}
		// A deterministic in-place op (ReLU_) may run again right after
		// the op that produced the storage it writes (the simulator allows
		// it when that storage was computed again since): re-running a
		// stage re-runs both, in order. Checked once the stages are known.
		if i < nf && stageInPlaceOnly(g, o, root) {
			inPlace = append(inPlace, int32(i))
			continue
		}
		pinned[i] = true
		for _, t := range o.Outputs {
			if r := root[t]; r != t {
				if p := d.Producer[r]; p != graph.NoOp {
					pinned[p] = true
				}
			}
		}
	}

	// Liveness across forward cuts: storage r produced by forward op p and
	// last read by forward op q > p is live across the cuts after p..q-1.
	lastFwdRead := make([]int32, nt)
	for i := range lastFwdRead {
		lastFwdRead[i] = -1
	}
	for i := 0; i < nf; i++ {
		for _, t := range d.Inputs(graph.OpID(i)) {
			lastFwdRead[root[t]] = int32(i)
		}
	}
	lastInPlaceWrite := make([]int32, nt)
	for i := 0; i < nf; i++ {
		if d.Flags[i].Has(graph.InPlace) {
			for _, t := range d.Outputs(graph.OpID(i)) {
				if r := root[t]; r != t {
					lastInPlaceWrite[r] = int32(i)
				}
			}
		}
	}
	// diff counts the storages live across each cut and xdiff XORs their
	// IDs, so that where one storage is live the running XOR names it.
	diff := make([]int32, nf+1)
	xdiff := make([]graph.TensorID, nf+1)
	for r := 0; r < nt; r++ {
		if root[r] != graph.TensorID(r) {
			continue
		}
		p := d.Producer[r]
		if p == graph.NoOp || int(p) >= nf {
			continue
		}
		if q := lastFwdRead[r]; q > int32(p) {
			diff[p]++
			diff[q]--
			xdiff[p] ^= graph.TensorID(r)
			xdiff[q] ^= graph.TensorID(r)
		}
	}
	// The cut after op i is a stage boundary when at most one activation
	// storage is live across it and that storage is produced in the stage
	// being closed (a storage from an earlier stage crossing the cut would
	// be a second input of the next stage).
	stageOf := make([]int32, no)
	for i := range stageOf {
		stageOf[i] = -1
	}
	var stages []Stage
	// The stages' op lists are slices of shared arrays (capacity capped, so
	// that a caller's append copies): one allocation each instead of
	// several per stage.
	fwdIDs := make([]graph.OpID, nf)
	for k := range fwdIDs {
		fwdIDs[k] = graph.OpID(k)
	}
	live := int32(0)
	liveX := graph.TensorID(0)
	start := 0
	for i := 0; i < nf; i++ {
		live += diff[i]
		liveX ^= xdiff[i]
		out := graph.NoTensor
		cut := i == nf-1 || live == 0
		if !cut && live == 1 {
			// The one storage live across the cut, if the stage being
			// closed produced it.
			if int(d.Producer[liveX]) >= start {
				out = liveX
			}
			// Not between a storage's producer and an in-place op writing
			// it (conv | ReLU_): the next stage could not re-run its
			// in-place op without the producer.
			cut = out != graph.NoTensor && lastInPlaceWrite[out] <= int32(i)
		}
		if !cut {
			continue
		}
		st := Stage{Input: graph.NoTensor, Output: out}
		if len(stages) > 0 {
			st.Input = stages[len(stages)-1].Output
		}
		st.Fwd = fwdIDs[start : i+1 : i+1]
		for k := start; k <= i; k++ {
			stageOf[k] = int32(len(stages))
		}
		stages = append(stages, st)
		start = i + 1
	}
	ungrouped := len(stages)
	if opts.MaxStages > 0 && len(stages) > opts.MaxStages {
		stages = groupStages(d, stages, opts.MaxStages, timeOf, stageOf, fwdIDs)
	}
	L := len(stages)
	if last := &stages[L-1]; g.Loss != graph.NoTensor {
		last.Output = root[g.Loss]
	} else if o := &g.Ops[last.Fwd[len(last.Fwd)-1]]; len(o.Outputs) > 0 {
		last.Output = root[o.Outputs[0]]
	}
	// Backward ops: linked ones go to their forward op's stage; unlinked ones
	// (gradient accumulation, loss seeds) as explained below.
	bwdStart := make([]int32, L+1)
	for i := nf; i < nb; i++ {
		ins := d.Inputs(graph.OpID(i))
		s := int32(-1)
		if f := d.Forward[i]; f != graph.NoOp {
			s = stageOf[f]
		} else {
			// It must run after every backward op it reads from; backward
			// runs stage by stage from the last, so that is the lowest stage
			// among them. Without such inputs, the highest stage among its
			// forward inputs.
			for _, t := range ins {
				if p := d.Producer[t]; p != graph.NoOp && d.Phase[p] == graph.Backward && (s < 0 || stageOf[p] < s) {
					s = stageOf[p]
				}
			}
			if s < 0 {
				for _, t := range ins {
					if p := d.Producer[t]; p != graph.NoOp && stageOf[p] > s {
						s = stageOf[p]
					}
				}
			}
			if s < 0 {
				s = int32(L - 1)
			}
		}
		stageOf[i] = s
		bwdStart[s+1]++
	}
	for s := 0; s < L; s++ {
		bwdStart[s+1] += bwdStart[s]
	}
	bwdIDs := make([]graph.OpID, nb-nf)
	for s := range stages {
		a, b := bwdStart[s], bwdStart[s+1]
		stages[s].Bwd = bwdIDs[a:a:b]
	}
	for i := nf; i < nb; i++ {
		st := &stages[stageOf[i]]
		st.Bwd = append(st.Bwd, graph.OpID(i)) // within its capacity
	}
	// An activation read by the backward of a stage other than its own is
	// pinned (kept from its first computation), except a stage output read by
	// the next stage's backward (it is part of x-bar); so is anything the
	// update phase reads.
	for i := nf; i < no; i++ {
		for _, t := range d.Inputs(graph.OpID(i)) {
			r := root[t]
			p := d.Producer[r]
			if p == graph.NoOp || int(p) >= nf {
				continue
			}
			sp := stageOf[p]
			if i < nb && (stageOf[i] == sp || (stageOf[i] == sp+1 && r == stages[sp].Output)) {
				continue
			}
			pinned[p] = true
		}
	}

	// An in-place op stays recomputable only while the producers of the
	// storages it writes are recomputed with it: in its stage and not
	// pinned. Otherwise it and they are pinned (to a fixed point: pinning
	// one may pin another's producer).
	for changed := true; changed; {
		changed = false
		for _, i := range inPlace {
			if pinned[i] {
				continue
			}
			for _, t := range d.Outputs(graph.OpID(i)) {
				r := root[t]
				if r == t {
					continue
				}
				p := d.Producer[r]
				if pinned[p] || stageOf[p] != stageOf[i] {
					pinned[i], pinned[p], changed = true, true, true
					break
				}
			}
		}
	}
	ch := &StageChain{Stages: stages, OpPinned: pinned, StageOf: stageOf, Ungrouped: ungrouped, ops: no}
	for i := nb; i < no; i++ {
		ch.Update = append(ch.Update, graph.OpID(i))
		ch.UpdateTime += timeOf(graph.OpID(i))
	}
	pinnedSt := make([]bool, nt)
	for r := 0; r < nt; r++ {
		if root[r] != graph.TensorID(r) {
			continue
		}
		t := &g.Tensors[r]
		// Outputs of memset-initialized ops (gradient accumulators) may be
		// allocated at graph start by the simulator's atomic clean policy 0:
		// count them as held throughout.
		if t.Producer == graph.NoOp || (t.Kind.Persistent() && int(t.Producer) < nb) || (int(t.Producer) < nf && pinned[t.Producer]) || sim.IsAtomicClean(&g.Ops[t.Producer]) {
			pinnedSt[r] = true
			ch.Pinned += t.Bytes
		}
	}
	bytesOf := func(t graph.TensorID) int64 {
		if t == graph.NoTensor || pinnedSt[root[t]] {
			return 0
		}
		return g.Tensors[root[t]].Bytes
	}
	// Time rank of the non-forward ops in the order the chain solvers run
	// them: backward stage by stage from the last, then the update. lastUse
	// is the largest rank reading each storage (directly or via a view).
	rank := make([]int32, no)
	n := int32(0)
	for s := L - 1; s >= 0; s-- {
		for _, op := range stages[s].Bwd {
			n++
			rank[op] = n
		}
	}
	for _, op := range ch.Update {
		n++
		rank[op] = n
	}
	lastUse := make([]int32, nt)
	readByOwnBwd := make([]bool, nt)
	for i := nf; i < no; i++ {
		for _, t := range d.Inputs(graph.OpID(i)) {
			r := root[t]
			if rank[i] > lastUse[r] {
				lastUse[r] = rank[i]
			}
			if p := d.Producer[r]; p != graph.NoOp && int(p) < nf && stageOf[p] == stageOf[i] {
				readByOwnBwd[r] = true
			}
		}
	}
	lastRead := make([]int32, nt)
	needR := make([]bool, nt)
	inSeen := dedup.New(nt)           // an op's distinct input storages
	leafIDs := make([]graph.OpID, nf) // the stages' Leaf lists (each within its Fwd)
	for s := range stages {
		st := &stages[s]
		for _, op := range st.Fwd {
			if pinned[op] {
				ch.PinnedTime += timeOf(op)
			} else {
				st.FwdTime += timeOf(op)
			}
		}
		for _, op := range st.Bwd {
			st.BwdTime += timeOf(op)
		}
		st.InputBytes = bytesOf(st.Input)
		st.OutputBytes = bytesOf(st.Output)
		if st.Input != graph.NoTensor {
			for _, op := range st.Bwd {
				if stageDupRoot(root, d.Inputs(op), root[st.Input]) {
					st.InputBwdBytes = st.InputBytes
				}
			}
		}
		stageMeasureFwd(d, wsOf, root, pinnedSt, lastRead, readByOwnBwd, inSeen, st)
		st.Leaf = leafIDs[:0:len(st.Fwd)]
		stageLeaf(d, timeOf, wsOf, root, pinned, pinnedSt, lastRead, needR, readByOwnBwd, inSeen, st)
		st.Leaf = st.Leaf[:len(st.Leaf):len(st.Leaf)]
		leafIDs = leafIDs[len(st.Leaf):]
	}
	rd := newRootReaders(d, root, nf, stageOf)
	opAtRank := make([]graph.OpID, n+1)
	for i := nf; i < no; i++ {
		opAtRank[rank[i]] = graph.OpID(i)
	}
	for r := 0; r < nt; r++ {
		t := &g.Tensors[r]
		if !pinnedSt[r] || t.Producer == graph.NoOp || int(t.Producer) >= nf || t.Kind.Persistent() || sim.IsAtomicClean(&g.Ops[t.Producer]) || lastUse[r] == 0 {
			continue
		}
		if last := opAtRank[lastUse[r]]; int(last) < nb {
			stages[stageOf[last]].ReleasedBytes += t.Bytes
		}
	}
	for s := L - 1; s >= 0; s-- {
		stageMeasureBwd(d, wsOf, root, rd, pinnedSt, stageOf, rank, lastUse, inSeen, int32(s), ch)
	}
	// Update phase: from the held gradients, allocate each update op's
	// outputs and free storages at their last use (updated parameters and
	// other persistent outputs stay).
	cur := ch.Pinned + stages[0].GradOutBytes
	for s := range stages {
		cur += stages[s].HeldGradBytes
	}
	ch.UpdatePeak = cur
	for _, op := range ch.Update {
		ins, outs := d.Inputs(op), d.Outputs(op)
		for _, t := range outs {
			if root[t] == t && !pinnedSt[t] {
				cur += d.StorageBytes[t]
			}
		}
		ch.UpdatePeak = max(ch.UpdatePeak, cur+wsOf(op))
		inSeen.Next()
		for _, t := range ins {
			r := root[t]
			p := d.Producer[r]
			if pinnedSt[r] || d.Kind[r].Persistent() || p == graph.NoOp || int(p) < nf || inSeen.Seen(int32(r)) || isOutputOf(outs, r) {
				continue
			}
			if lastUse[r] == rank[op] {
				cur -= d.StorageBytes[r]
			}
		}
		for _, t := range outs {
			if root[t] == t && !pinnedSt[t] && !d.Kind[t].Persistent() && lastUse[t] == 0 {
				cur -= d.StorageBytes[t]
			}
		}
	}
	return ch, nil
}

// stageMeasureFwd fills XBarBytes, FwdPeakNone and FwdPeakAll of st.
// lastRead is scratch space of one entry per tensor.
func stageMeasureFwd(d *graph.Dense, wsOf StageTimeFunc, root []graph.TensorID, pinnedSt []bool, lastRead []int32, readByBwd []bool, inSeen *dedup.Stamps, st *Stage) {
	for _, op := range st.Fwd {
		for _, t := range d.Outputs(op) {
			lastRead[root[t]] = -1
		}
	}
	for k, op := range st.Fwd {
		for _, t := range d.Inputs(op) {
			lastRead[root[t]] = int32(k)
		}
	}
	first, last := st.Fwd[0], st.Fwd[len(st.Fwd)-1]
	for _, op := range st.Fwd {
		for _, t := range d.Outputs(op) {
			if root[t] == t && !pinnedSt[t] && (readByBwd[t] || t == st.Output) {
				st.XBarBytes += d.StorageBytes[t]
				if readByBwd[t] {
					st.XBarBwdBytes += d.StorageBytes[t]
					st.XBarRestBytes += d.StorageBytes[t]
				}
			}
		}
	}
	for pass := 0; pass < 2; pass++ {
		keepSaved := pass == 1
		var cur, peak int64
		free := func(r graph.TensorID) {
			if pinnedSt[r] || r == st.Output || (keepSaved && readByBwd[r]) {
				return
			}
			if p := d.Producer[r]; p == graph.NoOp || p < first || p > last {
				return // the stage input or an outside tensor
			}
			cur -= d.StorageBytes[r]
		}
		for k, op := range st.Fwd {
			ins, outs := d.Inputs(op), d.Outputs(op)
			for _, t := range outs {
				if root[t] == t && !pinnedSt[t] {
					cur += d.StorageBytes[t]
				}
			}
			if v := cur + wsOf(op); v > peak {
				peak = v
			}
			inSeen.Next()
			for _, t := range ins {
				r := root[t]
				if lastRead[r] == int32(k) && !inSeen.Seen(int32(r)) && !isOutputOf(outs, r) {
					free(r)
				}
			}
			for _, t := range outs {
				if root[t] == t && lastRead[t] <= int32(k) {
					free(t)
				}
			}
		}
		if keepSaved {
			st.FwdPeakAll = peak
		} else {
			st.FwdPeakNone = peak
		}
	}
}

// stageInPlaceOnly reports whether o is not recomputable only because it
// writes in place: deterministic (or with saved RNG state), not impure, and
// every storage it writes produced by a forward op.
func stageInPlaceOnly(g *graph.Graph, o *graph.Op, root []graph.TensorID) bool {
	if o.Flags.Has(graph.Impure) || !o.Flags.Has(graph.InPlace) {
		return false
	}
	if o.Flags.Has(graph.NonDeterministic) {
		if v := o.Attrs[graph.AttrRNGSaved]; v != "1" && v != "true" {
			return false
		}
	}
	wrote := false
	for _, t := range o.Outputs {
		r := root[t]
		if r == t {
			continue
		}
		p := g.Tensors[r].Producer
		if p == graph.NoOp || g.Ops[p].Phase != graph.Forward {
			return false
		}
		wrote = true
	}
	return wrote
}

// groupStages merges consecutive stages into n groups of about equal
// forward time (each group at least one stage) and renumbers stageOf for
// the forward ops. Each boundary is the cut of smallest crossing storage
// (the next group's input, its checkpoint) within a quarter of a group's
// time of the balanced position. A group's input is its first stage's, its
// output its last stage's.
func groupStages(d *graph.Dense, stages []Stage, n int, timeOf StageTimeFunc, stageOf []int32, fwdIDs []graph.OpID) []Stage {
	w := make([]int64, len(stages)+1)
	for k := range stages {
		var t int64
		for _, op := range stages[k].Fwd {
			t += max(timeOf(op), 1)
		}
		w[k+1] = w[k] + t
	}
	total := w[len(stages)]
	cutBytes := func(k int) int64 { // the storage entering stage k
		if in := stages[k].Input; in != graph.NoTensor {
			return d.StorageBytes[d.Root[in]]
		}
		return 0
	}
	out := make([]Stage, 0, n)
	k := 0
	slack := total / int64(n) / 4
	for gi := 0; gi < n; gi++ {
		end := len(stages)
		if gi < n-1 {
			// The balanced end, then the cheapest cut near it, leaving at
			// least one stage per later group.
			hi := len(stages) - (n - 1 - gi)
			target := total / int64(n) * int64(gi+1)
			end = k + 1
			for end < hi && w[end] < target {
				end++
			}
			best := end
			for e := k + 1; e < hi; e++ {
				if w[e] < target-slack {
					continue
				}
				if w[e] > target+slack {
					break
				}
				if cutBytes(e) < cutBytes(best) {
					best = e
				}
			}
			end = best
		}
		grp := Stage{Input: stages[k].Input, Output: stages[end-1].Output}
		lo, hi := stages[k].Fwd[0], stages[end-1].Fwd[len(stages[end-1].Fwd)-1]+1
		grp.Fwd = fwdIDs[lo:hi:hi] // consecutive stages: consecutive ops
		for _, op := range grp.Fwd {
			stageOf[op] = int32(len(out))
		}
		out = append(out, grp)
		k = end
	}
	return out
}

// stageLeaf fills Leaf, FwdLeafTime and FwdPeakLeaf of st: the forward ops
// whose outputs' storages the stage's backward reads, transitively within
// the stage, and the peak of running them keeping what the backward reads.
// needR is scratch space of one false entry per tensor, left false.
func stageLeaf(d *graph.Dense, timeOf, wsOf StageTimeFunc, root []graph.TensorID, pinned, pinnedSt []bool, lastRead []int32, needR, readByBwd []bool, inSeen *dedup.Stamps, st *Stage) {
	var touched []graph.TensorID
	mark := func(r graph.TensorID) {
		if !needR[r] {
			needR[r] = true
			touched = append(touched, r)
		}
	}
	for _, op := range st.Bwd {
		for _, t := range d.Inputs(op) {
			mark(root[t])
		}
	}
	need := make([]bool, len(st.Fwd))
	for k := len(st.Fwd) - 1; k >= 0; k-- {
		ins, outs := d.Inputs(st.Fwd[k]), d.Outputs(st.Fwd[k])
		for _, t := range outs {
			if needR[root[t]] {
				need[k] = true
			}
		}
		if need[k] {
			for _, t := range ins {
				mark(root[t])
			}
		}
	}
	for _, r := range touched {
		needR[r] = false
	}
	st.Leaf = st.Leaf[:0]
	for k, op := range st.Fwd {
		if need[k] {
			st.Leaf = append(st.Leaf, op)
			if !pinned[op] {
				st.FwdLeafTime += timeOf(op)
			}
		}
	}
	if len(st.Leaf) == 0 {
		return
	}
	for _, op := range st.Leaf {
		for _, t := range d.Outputs(op) {
			lastRead[root[t]] = -1
		}
	}
	for k, op := range st.Leaf {
		for _, t := range d.Inputs(op) {
			lastRead[root[t]] = int32(k)
		}
	}
	first, last := st.Fwd[0], st.Fwd[len(st.Fwd)-1]
	var cur, peak int64
	free := func(r graph.TensorID) {
		if pinnedSt[r] || readByBwd[r] {
			return
		}
		if p := d.Producer[r]; p == graph.NoOp || p < first || p > last {
			return // the stage input or an outside tensor
		}
		cur -= d.StorageBytes[r]
	}
	for k, op := range st.Leaf {
		ins, outs := d.Inputs(op), d.Outputs(op)
		if pinned[op] {
			continue // ran once, its outputs are pinned
		}
		for _, t := range outs {
			if root[t] == t && !pinnedSt[t] {
				cur += d.StorageBytes[t]
			}
		}
		peak = max(peak, cur+wsOf(op))
		inSeen.Next()
		for _, t := range ins {
			r := root[t]
			if lastRead[r] == int32(k) && !inSeen.Seen(int32(r)) && !isOutputOf(outs, r) {
				free(r)
			}
		}
		for _, t := range outs {
			if root[t] == t && lastRead[t] <= int32(k) {
				free(t)
			}
		}
	}
	st.FwdPeakLeaf = peak
}

func stageDupRoot(root []graph.TensorID, ins []graph.TensorID, r graph.TensorID) bool {
	for _, t := range ins {
		if root[t] == r {
			return true
		}
	}
	return false
}

// stageMeasureBwd fills the backward figures of stage s: replaying its
// backward from x-bar plus the incoming gradient, freeing each storage at its
// last use in the solvers' order (rank), and classifying the surviving
// outputs as the gradient passed to the previous stage or held gradients.
func stageMeasureBwd(d *graph.Dense, wsOf StageTimeFunc, root []graph.TensorID, rd *rootReaders, pinnedSt []bool, stageOf []int32, rank, lastUse []int32, inSeen *dedup.Stamps, s int32, ch *StageChain) {
	st := &ch.Stages[s]
	if int(s)+1 < len(ch.Stages) {
		st.GradInBytes = ch.Stages[s+1].GradOutBytes
	}
	base := st.XBarBwdBytes + st.GradInBytes
	cur, peak := base, base
	for _, op := range st.Bwd {
		ins, outs := d.Inputs(op), d.Outputs(op)
		for _, t := range outs {
			if root[t] == t && !pinnedSt[t] {
				cur += d.StorageBytes[t]
			}
		}
		if v := cur + wsOf(op); v > peak {
			peak = v
		}
		inSeen.Next()
		for _, t := range ins {
			r := root[t]
			if pinnedSt[r] || inSeen.Seen(int32(r)) || isOutputOf(outs, r) {
				continue
			}
			// Only storages counted here: this stage's activations (x-bar),
			// the incoming gradient and this backward's own outputs. Others
			// (the stage input, held gradients) belong to the caller.
			p := d.Producer[r]
			if p == graph.NoOp || !(stageOf[p] == s || (stageOf[p] == s+1 && d.Phase[p] == graph.Backward && stageOnlyReadBy(rd, r, s))) {
				continue
			}
			if lastUse[r] == rank[op] {
				cur -= d.StorageBytes[r]
			}
		}
		for _, t := range outs {
			if root[t] == t && !pinnedSt[t] && lastUse[t] == 0 {
				cur -= d.StorageBytes[t]
			}
		}
	}
	st.BwdPeak = peak - base
	for _, op := range st.Bwd {
		for _, t := range d.Outputs(op) {
			if root[t] != t || pinnedSt[t] || lastUse[t] == 0 {
				continue
			}
			outside, onlyPrev := false, true
			for _, c := range rd.of(t) {
				if stageOf[c] == s && d.Phase[c] == graph.Backward {
					continue
				}
				outside = true
				if !(stageOf[c] == s-1 && d.Phase[c] == graph.Backward) {
					onlyPrev = false
				}
			}
			if !outside {
				continue
			}
			if onlyPrev {
				st.GradOutBytes += d.StorageBytes[t]
			} else {
				st.HeldGradBytes += d.StorageBytes[t]
			}
		}
	}
}

func isOutputOf(outs []graph.TensorID, t graph.TensorID) bool {
	for _, x := range outs {
		if x == t {
			return true
		}
	}
	return false
}

// stageOnlyReadBy reports whether every reader of storage r is a backward op
// of stage s (r is then a gradient passed into s, counted in its base).
func stageOnlyReadBy(rd *rootReaders, r graph.TensorID, s int32) bool {
	b := rd.bwdStage[r]
	return b == s || b == readByNone
}

// Values of rootReaders.bwdStage besides a stage index.
const (
	readByNone  = -1 // no non-forward op reads the storage
	readByMixed = -2 // read by an update op or by backward ops of several stages
)

// rootReaders lists, per storage, the non-forward ops reading it directly
// or through a view (flat CSR arrays), and the one stage whose backward ops
// are all of them, if there is one (bwdStage: computed once, so that a
// storage read by every stage, such as a weight gradient accumulated in
// place, costs its readers once rather than once per stage).
type rootReaders struct {
	start    []int32
	ops      []graph.OpID
	bwdStage []int32
}

func newRootReaders(d *graph.Dense, root []graph.TensorID, nf int, stageOf []int32) *rootReaders {
	nt := d.NumTensors()
	rd := &rootReaders{start: make([]int32, nt+1), bwdStage: make([]int32, nt)}
	for i := nf; i < d.NumOps(); i++ {
		for _, t := range d.Inputs(graph.OpID(i)) {
			rd.start[root[t]+1]++
		}
	}
	for r := 0; r < nt; r++ {
		rd.start[r+1] += rd.start[r]
	}
	rd.ops = make([]graph.OpID, rd.start[nt])
	fill := append([]int32(nil), rd.start[:nt]...)
	for i := nf; i < d.NumOps(); i++ {
		for _, t := range d.Inputs(graph.OpID(i)) {
			r := root[t]
			rd.ops[fill[r]] = graph.OpID(i)
			fill[r]++
		}
	}
	for r := range rd.bwdStage {
		b := int32(readByNone)
		for _, c := range rd.of(graph.TensorID(r)) {
			if d.Phase[c] != graph.Backward || (b != readByNone && stageOf[c] != b) {
				b = readByMixed
				break
			}
			b = stageOf[c]
		}
		rd.bwdStage[r] = b
	}
	return rd
}

// of returns the readers of storage r.
func (rd *rootReaders) of(r graph.TensorID) []graph.OpID { return rd.ops[rd.start[r]:rd.start[r+1]] }
