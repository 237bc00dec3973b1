package dtr

// walkNode is the part of a storage that the walks over evicted storages
// (region, eqNeighbours, eviction's class merges, need, releaseFixed) read:
// its cost, a walk mark, whether it is evicted (neither resident nor
// swapped out) or banished, and its two neighbour lists, kids (the storages
// that consumers of its tensors produce) and pars (the storages its
// tensors' producers read), each in creation order. The first walkInline entries of a list are kept
// in the node, the rest in chunks of the runtime's edges arena. A node is
// 64 bytes without pointers, so a walk reads one cache line per storage it
// reaches (the check that it is evicted and unmarked brings its lists
// along), where the storage, its tensors and their children lists would
// cost several.
type walkNode struct {
	compute int64
	mark    uint32
	n       [2]uint8 // entries in list
	evicted bool
	// banished: freed for good (Config.Banish), evicted but never
	// recomputed
	banished bool
	more     [2]int32 // first overflow chunk in edges (-1: none)
	end      [2]int32 // last overflow chunk
	list     [2][walkInline]int32
}

// The two lists of a node.
const (
	kidsList = 0
	parsList = 1
)

// walkInline is the number of entries of a list kept in its node.
const walkInline = 4

// The edges arena holds the overflow of the lists as chains of chunks of
// edgeChunk int32s: the next chunk (-1: none), the count, then up to
// edgeChunk-2 storage ids.
const edgeChunk = 8

// edgesPerStorage is the room a replay of a known trace reserves in the
// edges arena per storage (most storages' lists fit in their nodes).
const edgesPerStorage = edgeChunk / 2

// newWalkNode is the node of a new storage: not yet computed, so evicted.
func newWalkNode() walkNode {
	return walkNode{more: [2]int32{-1, -1}, end: [2]int32{-1, -1}, evicted: true}
}

// neighbours returns the first part of storage x's list d (kidsList or
// parsList) and the chunk that continues it (-1: none): iterate with
//
//	for ns, c := r.neighbours(x, d); ; ns, c = r.chunk(c) {
//		for _, y := range ns { ... }
//		if c < 0 {
//			break
//		}
//	}
func (r *Runtime) neighbours(x int32, d int) ([]int32, int32) {
	w := &r.walk[x]
	return w.list[d][:w.n[d]], w.more[d]
}

// chunk returns the storages listed in chunk c and the next chunk.
func (r *Runtime) chunk(c int32) ([]int32, int32) {
	e := r.edges[c : c+edgeChunk : c+edgeChunk]
	return e[2 : 2+e[1]], e[0]
}

// link records that an op reading storage p produced (a tensor of) storage
// c. A pair is listed once in a row (a repeat further back only costs a
// walk a look at a marked storage).
func (r *Runtime) link(p, c int32) {
	if p == c {
		return
	}
	if r.storages[p].eqc != 0 || r.storages[c].eqc != 0 {
		r.eqLinked(p, c)
	}
	r.addEdge(p, kidsList, c)
	r.addEdge(c, parsList, p)
}

// addEdge appends y to storage x's list d unless it is the last entry.
func (r *Runtime) addEdge(x int32, d int, y int32) {
	w := &r.walk[x]
	n := int(w.n[d])
	if end := w.end[d]; end >= 0 {
		k := r.edges[end+1]
		if r.edges[end+1+k] == y {
			return
		}
		if k < edgeChunk-2 {
			r.edges[end+2+k] = y
			r.edges[end+1] = k + 1
			return
		}
	} else {
		if n > 0 && w.list[d][n-1] == y {
			return
		}
		if n < walkInline {
			w.list[d][n] = y
			w.n[d]++
			return
		}
	}
	c := int32(len(r.edges))
	r.edges = append(r.edges, -1, 1, y, 0, 0, 0, 0, 0)
	w = &r.walk[x]
	if w.end[d] >= 0 {
		r.edges[w.end[d]] = c
	} else {
		w.more[d] = c
	}
	w.end[d] = c
}
