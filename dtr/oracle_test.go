package dtr

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
)

// TestNextUseStorage checks the graph oracle's storage queries against a
// scan of the ops: the next step at or after now of an op that reads a
// tensor on the storage, or creates a view of it from none of its inputs,
// asked for every storage at steps that only increase (as the runtime
// asks), on graphs with many views of one storage (LSTM) and without.
func TestNextUseStorage(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    models.Options
	}{
		{"lstm", models.Options{Seq: 12}},
		{"gpt", models.Options{Depth: 2, Batch: 1, Seq: 16}},
		{"resnet-cifar", models.Options{Depth: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := models.Build(tc.name, tc.o)
			require.NoError(t, err)
			d := g.Dense()
			rec := &recorder{tenMap: make([]graph.TensorID, d.NumTensors())}
			for i := range rec.tenMap {
				rec.tenMap[i] = graph.TensorID(i)
			}
			o := newGraphOracle(g, rec)
			var nc int64
			for _, p := range d.Producer {
				if p == graph.NoOp {
					nc++
				}
			}
			reads := func(i int, r graph.TensorID) bool {
				for _, in := range d.Inputs(graph.OpID(i)) {
					if d.Root[in] == r {
						return true
					}
				}
				for _, out := range d.Outputs(graph.OpID(i)) {
					if d.Root[out] == r && out != r && d.Producer[r] != graph.OpID(i) {
						return true
					}
				}
				return false
			}
			views := 0
			for tt := range d.Root {
				if d.Root[tt] != graph.TensorID(tt) {
					views++
				}
			}
			require.Positive(t, views, "the graph has views")
			checked := 0
			for now := int64(0); now <= nc+int64(d.NumOps()); now += 1 + now/7 {
				for tt := range d.Root {
					r := d.Root[tt]
					if r != graph.TensorID(tt) {
						continue
					}
					want := int64(math.MaxInt64)
					for i := 0; i < d.NumOps(); i++ {
						if nc+int64(i) >= now && reads(i, r) {
							want = nc + int64(i)
							break
						}
					}
					// ask through a view of the storage when it has one: the
					// answer is the storage's
					ask := TensorID(tt)
					for v := range d.Root {
						if d.Root[v] == r && v != tt {
							ask = TensorID(v)
							break
						}
					}
					require.Equal(t, want, o.NextUseStorage(ask, now), "storage %d at step %d", r, now)
					checked++
				}
			}
			require.Greater(t, checked, 100)
		})
	}
}
