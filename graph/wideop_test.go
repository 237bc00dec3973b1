package graph

import (
	"math/rand"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWideOpConsumers: the consumer index of wide ops (17 to 116 inputs,
// repeats included) and narrow ones matches the definition, an op listed
// once per tensor it reads however often it reads it.
func TestWideOpConsumers(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	b := NewBuilder("wide")
	var ts []TensorID
	for i := 0; i < 40; i++ {
		ts = append(ts, b.Input("x"+strconv.Itoa(i), F32, 4))
	}
	for i := 0; i < 60; i++ {
		n := 1 + r.Intn(4)
		if i%3 == 0 {
			n = 17 + r.Intn(100) // wide
		}
		ins := make([]TensorID, n)
		for j := range ins {
			ins[j] = ts[r.Intn(len(ts))]
		}
		ts = append(ts, b.Op("sum", "s"+strconv.Itoa(i), ins...).Out("y"+strconv.Itoa(i), F32, 4).T())
	}
	g, err := b.Build()
	require.NoError(t, err)
	for tid := range g.Tensors {
		var want []OpID
		for i := range g.Ops {
			for _, in := range g.Ops[i].Inputs {
				if in == TensorID(tid) {
					want = append(want, OpID(i))
					break
				}
			}
		}
		assert.Equal(t, want, append([]OpID(nil), g.Consumers(TensorID(tid))...), "tensor %d", tid)
	}
}
