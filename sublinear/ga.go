package sublinear

import (
	"math/rand"
	"slices"

	"github.com/MaxHalford/eaopt"
)

// The genetic search follows MegEngine's search_genetic. eaopt drives the
// generations (GA.Minimize with a custom Model, one population); the model
// does MegEngine's selection, mutation and crossover itself and evaluates
// the offspring on the search's own evaluators, so that:
//
//   - every individual is evaluated by an allocation-free evaluator owned by
//     one worker (eaopt's ParallelEval would call Genome.Evaluate from
//     GOMAXPROCS goroutines that share nothing);
//   - results do not depend on the number of workers: each child is made
//     with an RNG derived from the seed, the generation and the child's
//     index, and results are merged in index order;
//   - no fitness goes stale: eaopt v0.4.2's Individual.Crossover lets a
//     genome's Crossover change the mate's genome while the mate keeps its
//     old fitness (the mate is passed by value). mgeGenome.Crossover changes
//     only the receiver, and the model never reuses a fitness of a changed
//     genome.

// mgeRand is MegEngine's RNG (xorshift128+, RNGxorshf) as a
// math/rand Source64.
type mgeRand struct{ s0, s1 uint64 }

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// newMgeRand derives an independent generator from a seed and a path of
// indexes (generation, child, ...).
func newMgeRand(seed uint64, path ...uint64) *mgeRand {
	x := splitmix64(seed)
	for _, p := range path {
		x = splitmix64(x ^ splitmix64(p+0x632be59bd9b4e019))
	}
	r := &mgeRand{s0: splitmix64(x), s1: splitmix64(x + 1)}
	if r.s0 == 0 && r.s1 == 0 {
		r.s1 = 1
	}
	return r
}

func (r *mgeRand) Uint64() uint64 {
	x, y := r.s0, r.s1
	r.s0 = y
	x ^= x << 23
	r.s1 = x ^ y ^ (x >> 17) ^ (y >> 26)
	return r.s1 + y
}

func (r *mgeRand) Int63() int64 { return int64(r.Uint64() >> 1) }

func (r *mgeRand) Seed(seed int64) { *r = *newMgeRand(uint64(seed)) }

// mgeGenome is the eaopt.Genome of the search: split points plus their
// cached evaluation.
type mgeGenome struct {
	s     *mgeSearch
	sp    []int32
	r     mgeResult
	valid bool
}

// Evaluate returns the cached fitness, evaluating first if the genome
// changed.
func (g *mgeGenome) Evaluate() (float64, error) {
	if !g.valid {
		g.r = g.s.evalOne(g.sp)
		g.valid = true
	}
	return g.s.fitness(g.r), nil
}

// Mutate applies one of MegEngine's mutations, chosen uniformly: insert a
// split point in the gap before a random point, remove a random point (not
// the last), move a random point within its gap, or nothing.
func (g *mgeGenome) Mutate(rng *rand.Rand) {
	g.sp = g.s.mutate(g.sp, rng, nil)
	g.valid = false
}

// Crossover replaces the receiver by the one-point crossover of itself and
// mate (cut drawn in the first half of the op sequence). The mate is not
// changed.
func (g *mgeGenome) Crossover(mate eaopt.Genome, rng *rand.Rand) {
	m := mate.(*mgeGenome)
	g.sp = g.s.crossover(g.sp, m.sp, rng, nil)
	g.valid = false
}

// Clone returns an independent copy (with its cached evaluation).
func (g *mgeGenome) Clone() eaopt.Genome {
	c := *g
	c.sp = slices.Clone(g.sp)
	return &c
}

// mutate is MegEngine's mutation on split points s, drawing from rng like
// search_genetic (kind, then position, then the new point). New points are
// drawn among the allowed positions (every op, or the endpoint ops).
func (s *mgeSearch) mutate(sp []int32, rng *rand.Rand, dst []int32) []int32 {
	p := s.p
	dst = dst[:0]
	n := len(sp)
	kind := rng.Uint64() & 3
	at := int(rng.Uint64() % uint64(n))
	for i := 0; i < n; i++ {
		if i != at {
			dst = append(dst, sp[i])
			continue
		}
		st := int32(0)
		if i > 0 {
			st = sp[i-1] + 1
		}
		switch kind {
		case 0: // insert a point in [st, sp[i]-1]
			lo, hi := p.candRange(st, sp[i]-1)
			if hi > lo {
				dst = append(dst, p.cands[lo+int(rng.Uint64()%uint64(hi-lo))])
			}
			dst = append(dst, sp[i])
		case 1: // remove (never the last)
			if i == n-1 {
				dst = append(dst, sp[i])
			}
		case 2: // move within [st, sp[i+1]-1]
			if i == n-1 {
				dst = append(dst, sp[i])
			} else {
				lo, hi := p.candRange(st, sp[i+1]-1)
				if hi > lo {
					dst = append(dst, p.cands[lo+int(rng.Uint64()%uint64(hi-lo))])
				} else {
					dst = append(dst, sp[i])
				}
			}
		default:
			dst = append(dst, sp[i])
		}
	}
	return dst
}

// crossover is MegEngine's one-point crossover: the points of a below a cut
// drawn in [0, n/2), then those of b at or above it.
func (s *mgeSearch) crossover(a, b []int32, rng *rand.Rand, dst []int32) []int32 {
	dst = dst[:0]
	half := uint64(s.p.n / 2)
	if half == 0 {
		return append(dst, b...)
	}
	cut := int32(rng.Uint64() % half)
	for _, x := range a {
		if x < cut {
			dst = append(dst, x)
		}
	}
	for _, x := range b {
		if x >= cut {
			dst = append(dst, x)
		}
	}
	return dst
}

// selKey is the value MegEngine's selection weighs: the peak in peak mode;
// in budget mode 1 + recompute time when feasible, else twice the time of
// all ops plus 2 (worse than any feasible record).
func (s *mgeSearch) selKey(r mgeResult) uint64 {
	if s.budget > 0 {
		if s.feasible(r) {
			return uint64(r.time) + 1
		}
		return 2*uint64(s.p.totalTimeN) + 2
	}
	return uint64(max(r.peak, 0))
}

// genomeMemo remembers the results of the genomes the genetic search
// evaluated, keyed by a hash of the split points (collisions are told apart
// by comparing the genomes). It holds at most limit split points in all
// (budget-mode genomes can be as long as the graph): once full it stops
// remembering, in the search's deterministic order.
type genomeMemo struct {
	m     map[uint64][]mgeRecord
	held  int
	limit int
}

func hashGenome(sp []int32) uint64 {
	h := uint64(14695981039346656037)
	for _, x := range sp {
		h ^= uint64(uint32(x))
		h *= 1099511628211
	}
	return h
}

func (g *genomeMemo) get(sp []int32) (mgeResult, bool) {
	for _, rec := range g.m[hashGenome(sp)] {
		if slices.Equal(rec.s, sp) {
			return rec.r, true
		}
	}
	return mgeResult{}, false
}

func (g *genomeMemo) put(sp []int32, r mgeResult) {
	if g.held+len(sp) > g.limit {
		return
	}
	g.held += len(sp)
	if g.m == nil {
		g.m = map[uint64][]mgeRecord{}
	}
	h := hashGenome(sp)
	g.m[h] = append(g.m[h], mgeRecord{s: sp, r: r})
}

// mgeModel is the eaopt.Model of one genetic search.
type mgeModel struct {
	s   *mgeSearch
	gen uint64
}

// Validate implements eaopt.Model.
func (m *mgeModel) Validate() error { return nil }

// Apply runs one generation of MegEngine's search_genetic on pop: sort the
// records; select up to PoolSize of them, visiting them cyclically in order
// and taking record r with probability ~ min(1, 7 r / (8 best)); each
// selected record yields mutation(mutation(r)) and a crossover with a
// random partner (a shuffled permutation of the selected). The new
// population is the selected records followed by their evaluated children.
func (m *mgeModel) Apply(pop *eaopt.Population) error {
	s := m.s
	gen := m.gen
	m.gen++
	if s.ctx.Err() != nil {
		return nil
	}
	recs := make([]*mgeGenome, len(pop.Individuals))
	for i := range pop.Individuals {
		g := pop.Individuals[i].Genome.(*mgeGenome)
		if !g.valid {
			g.Evaluate()
		}
		recs[i] = g
	}
	slices.SortStableFunc(recs, func(a, b *mgeGenome) int {
		return s.cmp(&mgeRecord{s: a.sp, r: a.r}, &mgeRecord{s: b.sp, r: b.r})
	})
	if s.budget > 0 {
		// Budget mode drops duplicate genomes before selecting, so that
		// copies of one record do not crowd the pool out.
		recs = slices.CompactFunc(recs, func(a, b *mgeGenome) bool { return slices.Equal(a.sp, b.sp) })
	}
	rng := rand.New(newMgeRand(s.opts.Seed, gen, 1<<40))
	length := min(s.opts.PoolSize, len(recs))
	best := s.selKey(recs[0].r)
	selected := make([]*mgeGenome, 0, length)
	it := 0
	for len(selected) < length {
		if it >= len(recs) {
			it = 0
		}
		take := best == 0
		if !take {
			k := s.selKey(recs[it].r)
			x := rng.Uint64() % best
			if k > (1<<61)/7 || x > (1<<60)/8 {
				take = 8*float64(x) < 7*float64(k)
			} else {
				take = 8*x < 7*k
			}
		}
		if take {
			selected = append(selected, recs[it])
			recs = slices.Delete(recs, it, it+1)
		} else {
			it++
		}
	}
	perm := make([]int, length)
	for i := range perm {
		perm[i] = i
	}
	for i := 1; i < length; i++ { // std::random_shuffle
		j := int(rng.Uint64() % uint64(i+1))
		perm[i], perm[j] = perm[j], perm[i]
	}

	// Make the children (each with its own RNG), then evaluate only the
	// genomes not seen before: a converging population breeds many copies
	// of its records, and a genome's fitness is a pure function of it. The
	// choice of what to evaluate is made in child order, so the evaluation
	// count does not depend on the workers either.
	children := make([]*mgeGenome, 2*length)
	for i := range children {
		crng := rand.New(newMgeRand(s.opts.Seed, gen, uint64(i)))
		parent := selected[i/2]
		c := &mgeGenome{s: s}
		if i%2 == 0 {
			c.sp = s.mutate(parent.sp, crng, nil)
			c.sp = s.mutate(c.sp, crng, nil)
		} else {
			c.sp = s.crossover(parent.sp, selected[perm[i/2]].sp, crng, nil)
		}
		children[i] = c
	}
	var todo []int // children to evaluate
	same := make([]int, len(children))
	for i, c := range children {
		same[i] = -1
		if r, ok := s.memo.get(c.sp); ok {
			c.r, c.valid = r, true
			continue
		}
		for _, j := range todo {
			if slices.Equal(children[j].sp, c.sp) {
				same[i] = j
				break
			}
		}
		if same[i] < 0 {
			todo = append(todo, i)
		}
	}
	done := make([]bool, len(todo))
	s.parallel(len(todo), func(w, k int) {
		c := children[todo[k]]
		c.r = s.evals[w].score(c.sp, &s.plans)
		c.valid = true
		s.nEval.Add(1)
	}, done)
	for k, i := range todo {
		if done[k] {
			s.memo.put(children[i].sp, children[i].r)
		}
	}
	for i, c := range children {
		if j := same[i]; j >= 0 && children[j].valid {
			c.r, c.valid = children[j].r, true
		}
	}

	next := make(eaopt.Individuals, 0, 3*length)
	for _, g := range selected {
		next = append(next, mgeIndividual(g, pop.RNG))
	}
	for _, c := range children {
		if !c.valid {
			s.cancelled = true
			continue
		}
		s.offer(mgeRecord{s: c.sp, r: c.r})
		next = append(next, mgeIndividual(c, pop.RNG))
	}
	pop.Individuals = next
	return nil
}

func mgeIndividual(g *mgeGenome, rng *rand.Rand) eaopt.Individual {
	ind := eaopt.NewIndividual(g, rng)
	ind.Fitness = g.s.fitness(g.r)
	ind.Evaluated = true
	return ind
}

// searchGenetic runs the genetic search seeded with every record of the
// presets, for opts.GeneticIters generations.
func (s *mgeSearch) searchGenetic() {
	if s.p.n < 2 || len(s.records) == 0 {
		return
	}
	initial := s.records
	s.memo.limit = 16*s.p.n + 1<<20 // split points: a few MB, proportional to the graph
	for _, rec := range initial {
		if _, ok := s.memo.get(rec.s); !ok {
			s.memo.put(rec.s, rec.r)
		}
	}
	k := 0
	model := &mgeModel{s: s}
	ga, err := eaopt.GAConfig{
		NPops:        1,
		PopSize:      uint(len(initial)),
		NGenerations: uint(s.opts.GeneticIters),
		HofSize:      1,
		Model:        model,
		RNG:          rand.New(newMgeRand(s.opts.Seed, 1<<41)),
		EarlyStop:    func(*eaopt.GA) bool { return s.ctx.Err() != nil },
	}.NewGA()
	if err != nil {
		return // cannot happen: the config above is valid
	}
	s.lastGA = ga
	_ = ga.Minimize(func(*rand.Rand) eaopt.Genome {
		rec := initial[k%len(initial)]
		k++
		return &mgeGenome{s: s, sp: slices.Clone(rec.s), r: rec.r, valid: true}
	})
	if s.ctx.Err() != nil {
		s.cancelled = true
	}
	// Keep the final population as the records (budget mode reports the
	// smallest peak among them).
	pop := ga.Populations[0].Individuals
	s.records = s.records[:0]
	for i := range pop {
		g := pop[i].Genome.(*mgeGenome)
		s.records = append(s.records, mgeRecord{s: g.sp, r: g.r})
	}
}
