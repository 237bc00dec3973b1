package dtr

// Witness groups. In a backward pass, the unrecomputable storages that
// releaseFixed keeps (dropout masks, and the residual sums that became
// unrecomputable with them) are nearly all kept by one shared witness: the
// current gradient, which every later gradient depends on. Each op frees it
// and computes the next one, so with a witness list per storage every kept
// storage was retried after every op, and the work per op grew with the
// layers done: quadratic in the depth.
//
// A kept storage's witnesses are therefore split. The newest one (the
// highest storage ID, in practice the current gradient) is shared: the
// storage joins the group that this witness owns. The others stay private
// (watched as before), and the storage's need is its size less their bytes.
// The group's proof is its owner alone, for every member whose need is below
// the owner's size. When the owner changes, the group is checked once: a
// resident owner (or a referenced evicted one) still holds; a freed one is
// walked from, breadth first, to the first resident dependent larger than
// every member's need, and the whole group moves to it. Only the members
// the new owner cannot hold (their need is not below its size, or it is one
// of their private witnesses) are retried one by one, as are all of them
// when the owner can no longer be passed (pinned or unrecomputable) or no
// dependent is found. Decisions are those of the plain walk: a group only
// ever holds storages whose witnesses prove them kept.

// fixedGroup is a set of pending storages that share one witness.
type fixedGroup struct {
	owner int32   // the shared witness
	heap  []int32 // the members, a max-heap by need
	gen   uint32  // the generation of its watch entry
	live  bool
	dirty bool // listed in dirtyGroups: the owner changed
}

// grpMember is a storage's place in a group.
type grpMember struct {
	grp  int32 // -1: none
	pos  int32 // index in the group's heap
	need int64 // bytes the shared witness must exceed
}

// groupWalkCap bounds a group's walk from its freed owner: past it the
// largest resident dependent found so far is taken, and the members it
// cannot hold are retried one by one.
const groupWalkCap = 256

// keepOn records wit, the witnesses that keep pending storage s (only the
// referenced evicted one when it has one), in place of those it had.
func (r *Runtime) keepOn(s int32, wit []int32) {
	r.clearWitnesses(s)
	r.keepMore(s, wit)
}

// keepMore adds found, witnesses that keep pending storage s besides those
// it has: the newest is shared through the group it owns, with s's need
// what the private ones lack, and the others join the private ones.
func (r *Runtime) keepMore(s int32, found []int32) {
	if len(found) == 0 {
		return
	}
	o := 0
	for i, x := range found {
		if x > found[o] {
			o = i
		}
	}
	y := found[o]
	found[o] = found[len(found)-1]
	r.addWitnesses(s, found[:len(found)-1])
	g := r.ownGrp[y]
	if g < 0 {
		g = r.newGroup(y)
	}
	st := &r.storages[s]
	r.grpInsert(g, s, st.size-st.witBytes)
}

// newGroup returns a new group owned by y, watching y.
func (r *Runtime) newGroup(y int32) int32 {
	g := takeSlot(&r.groups, &r.freeGroups)
	gr := &r.groups[g]
	gr.owner, gr.heap, gr.live, gr.dirty = y, gr.heap[:0], true, false
	r.ownGrp[y] = g
	r.watchGroup(g)
	return g
}

// watchGroup puts group g (its current generation) on its owner's watch
// list.
func (r *Runtime) watchGroup(g int32) {
	gr := &r.groups[g]
	gr.gen++
	r.watchRoom(1)
	r.watchArena = append(r.watchArena, watchEntry{x: gr.owner, s: -2 - g, gen: gr.gen, next: r.watchHead[gr.owner]})
	r.watchHead[gr.owner] = int32(len(r.watchArena) - 1)
}

// freeGroup retires empty group g.
func (r *Runtime) freeGroup(g int32) {
	gr := &r.groups[g]
	if r.ownGrp[gr.owner] == g {
		r.ownGrp[gr.owner] = -1
	}
	gr.live, gr.heap = false, gr.heap[:0]
	gr.gen++ // its watch entries go stale
	r.freeGroups = append(r.freeGroups, g)
}

// groupNotify marks group g dirty (its owner is about to change).
func (r *Runtime) groupNotify(g int32, gen uint32) {
	gr := &r.groups[g]
	if !gr.live || gr.gen != gen || gr.dirty {
		return
	}
	gr.dirty = true
	r.dirtyGroups = append(r.dirtyGroups, g)
}

func (r *Runtime) grpInsert(g, s int32, need int64) {
	gr := &r.groups[g]
	r.grpm[s] = grpMember{grp: g, need: need}
	gr.heap = r.grpH.push(gr.heap, s)
}

// grpRemove takes s out of its group (empty groups are retired).
func (r *Runtime) grpRemove(s int32) {
	m := &r.grpm[s]
	g, i := m.grp, int(m.pos)
	m.grp, m.pos = -1, -1
	gr := &r.groups[g]
	gr.heap = r.grpH.remove(gr.heap, i)
	if len(gr.heap) == 0 && !gr.dirty {
		r.freeGroup(g)
	}
}

// grpDetach takes pending storage s out of its group for a retry of its
// own, listing the group's owner on its chg list, for its next check to
// take again (it is still reached from s: a change on the way would have
// cleared s's witnesses).
func (r *Runtime) grpDetach(s int32) {
	y := r.groups[r.grpm[s].grp].owner
	r.grpRemove(s)
	r.chgPush(s, y)
}

// grpPopDirty retries member s on its own.
func (r *Runtime) grpPopDirty(s int32) {
	r.grpDetach(s)
	r.markDirty(s)
}

// processGroups checks the groups whose owner changed, in the state of the
// moment (retryPending calls it before each retry).
func (r *Runtime) processGroups() {
	for i := 0; i < len(r.dirtyGroups); i++ {
		if g := r.dirtyGroups[i]; r.groups[g].live && r.groups[g].dirty {
			r.checkGroup(g)
		}
	}
	r.dirtyGroups = r.dirtyGroups[:0]
}

// checkGroup finds the witness that keeps group g's members now.
func (r *Runtime) checkGroup(g int32) {
	gr := &r.groups[g]
	gr.dirty = false
	if len(gr.heap) == 0 {
		r.freeGroup(g)
		return
	}
	y := gr.owner
	ys := &r.storages[y]
	z, keep := int32(-1), false
	switch {
	case ys.pinned || ys.fixed:
	case ys.material || ys.swapped:
		z = y
	case ys.refExt > 0:
		z, keep = y, true
	default:
		z, keep = r.groupWalk(y, r.grpm[gr.heap[0]].need)
	}
	if z < 0 {
		for len(r.groups[g].heap) > 0 {
			r.grpPopDirty(r.groups[g].heap[0])
		}
		if r.groups[g].live {
			r.freeGroup(g)
		}
		return
	}
	if !keep {
		// the members the new witness cannot hold alone
		zs := r.storages[z].size
		for len(r.groups[g].heap) > 0 && r.grpm[r.groups[g].heap[0]].need >= zs {
			r.grpPopDirty(r.groups[g].heap[0])
		}
	}
	if z != y {
		// members with z as a private witness cannot count it twice
		for e := r.watchHead[z]; e >= 0; e = r.watchArena[e].next {
			we := r.watchArena[e]
			if we.s >= 0 && r.grpm[we.s].grp == g && r.storages[we.s].witGen == we.gen {
				r.grpPopDirty(we.s)
			}
		}
	}
	if !r.groups[g].live {
		return
	}
	if len(r.groups[g].heap) == 0 {
		r.freeGroup(g)
		return
	}
	r.grpHeld += int64(len(r.groups[g].heap))
	if r.fixedRef != nil {
		for _, s := range r.groups[g].heap {
			r.fixedChecks++
			if !r.fixedRef(s) {
				r.fixedMismatch++
			}
		}
	}
	if z == y {
		r.watchGroup(g)
		return
	}
	if r.ownGrp[y] == g {
		r.ownGrp[y] = -1
	}
	h := r.ownGrp[z]
	if h < 0 {
		r.groups[g].owner = z
		r.ownGrp[z] = g
		r.watchGroup(g)
		return
	}
	// merge the smaller group into the larger
	src, dst := g, h
	if len(r.groups[g].heap) > len(r.groups[h].heap) {
		src, dst = h, g
	}
	for _, s := range r.groups[src].heap {
		r.grpm[s].grp = -1
		r.grpInsert(dst, s, r.grpm[s].need)
	}
	dirty := r.groups[h].dirty
	r.groups[src].heap = r.groups[src].heap[:0]
	r.groups[src].dirty = false
	r.freeGroup(src)
	r.groups[dst].owner = z
	r.ownGrp[z] = dst
	r.watchGroup(dst)
	if dirty && !r.groups[dst].dirty {
		r.groups[dst].dirty = true
		r.dirtyGroups = append(r.dirtyGroups, dst)
	}
}

// groupWalk walks from traversable storage y, breadth first through
// traversable storages (marking them trav, as releaseFixed's walk does),
// to a resident dependent larger than need or a referenced evicted one
// (keep). Past groupWalkCap storages it settles for the largest resident
// one found; it returns -1 when there is none.
func (r *Runtime) groupWalk(y int32, need int64) (z int32, keep bool) {
	g := r.newMark()
	r.walk[y].mark = g
	r.trav[y] = true
	q := append(r.stack[:0], y)
	best, bsz := int32(-1), int64(-1)
	n := 0
	for head := 0; head < len(q); head++ {
		for ns, c := r.neighbours(q[head], kidsList); ; ns, c = r.chunk(c) {
			for _, x := range ns {
				if r.walk[x].mark == g {
					continue
				}
				r.walk[x].mark = g
				n++
				xs := &r.storages[x]
				switch {
				case xs.pinned || xs.fixed:
				case xs.material || xs.swapped:
					if xs.size > bsz {
						best, bsz = x, xs.size
					}
					if bsz > need {
						r.stack = q[:0]
						return best, false
					}
				case xs.refExt > 0:
					r.stack = q[:0]
					return x, true
				case r.deadAt[x] == r.deadEpoch:
				default:
					q = append(q, x)
					r.trav[x] = true
				}
			}
			if c < 0 {
				break
			}
		}
		if n >= groupWalkCap {
			break
		}
	}
	r.stack = q[:0]
	return best, false
}
