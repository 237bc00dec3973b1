package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
)

// The memo gives every op, forward convolution or gradient, the shapes
// convDims reads from the graph, on zoo models with plain, strided,
// grouped and 1x1 convolutions, and on ops whose Forward is not a
// convolution or out of range.
func TestConvMemoMatchesConvDims(t *testing.T) {
	for _, name := range []string{"resnet18", "mobilenet_v2", "unet", "gpt"} {
		g, err := models.Build(name, models.Options{Batch: 2})
		require.NoError(t, err, name)
		var memo convMemo
		convs := 0
		for i := range g.Ops {
			want, wok := convDims(g, &g.Ops[i], false)
			got, ok := memo.of(g, i)
			require.Equal(t, wok, ok, "%s op %d %s", name, i, g.Ops[i].Type)
			require.Equal(t, want, got, "%s op %d %s", name, i, g.Ops[i].Type)
			if ok {
				convs++
			}
		}
		if name != "gpt" {
			assert.Positive(t, convs, name)
		}
	}
	// a convolution gradient whose forward op is not a convolution, or
	// not in the graph
	b := graph.NewBuilder("odd")
	x := b.Input("x", graph.F32, 1, 4, 8, 8)
	y := b.Op("relu", "relu", x).Out("y", graph.F32, 1, 4, 8, 8)
	b.SetPhase(graph.Backward)
	bw := b.Op("conv2d_grad_input", "g", y.T()).Forward(y.ID()).Out("gx", graph.F32, 1, 4, 8, 8)
	g, err := b.Build()
	require.NoError(t, err)
	_, grad := isConvType("conv2d_grad_input")
	require.True(t, grad, "a convolution gradient type")
	var memo convMemo
	_, ok := memo.of(g, int(bw.ID()))
	assert.False(t, ok)
	g.Ops[bw.ID()].Forward = 99
	_, ok = (&convMemo{}).of(g, int(bw.ID()))
	assert.False(t, ok)
}

// Every algorithm a convolution may get has a code, and the code gives the
// name back.
func TestConvAlgoCode(t *testing.T) {
	d := convShapes{n: 2, c: 8, h: 16, w: 16, k: 8, cg: 8, r: 3, s: 3, p: 16, q: 16, elem: 4}
	for _, a := range appendConvAlgos(nil, d) {
		c := convAlgoCode(a.Name)
		assert.NotZero(t, c, a.Name)
		assert.Equal(t, a.Name, convAlgoNames[c])
	}
	assert.Len(t, appendConvAlgos(nil, convShapes{n: 2, c: 8, h: 16, w: 16, k: 8, cg: 8, r: 5, s: 5, p: 16, q: 16, elem: 4}), 4, "5x5: no winograd")
	assert.Zero(t, convAlgoCode("direct"))
	assert.Empty(t, convAlgoNames[0])
}
