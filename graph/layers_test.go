package graph_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

func shapeOf(t *testing.T, b *graph.Builder, id graph.TensorID) graph.Shape {
	t.Helper()
	require.NotEqual(t, graph.NoTensor, id, "layer failed: %v", b.Err())
	return b.Shape(id)
}

func TestConvShapesFollowPyTorch(t *testing.T) {
	b := graph.NewBuilder("conv")
	x := b.Input("x", graph.F32, 2, 3, 224, 224)
	// floor((224 + 6 - 6 - 1) / 2) + 1 = 112 (torchvision resnet conv1)
	y := b.Conv2d("conv1", x, 64, 7, 2, 3, graph.ConvNoBias())
	assert.Equal(t, graph.Shape{2, 64, 112, 112}, shapeOf(t, b, y))
	// floor((113 + 0 - 3) / 2) + 1 = 56
	x2 := b.Input("x2", graph.F32, 1, 8, 113, 113)
	assert.Equal(t, graph.Shape{1, 16, 56, 56}, shapeOf(t, b, b.Conv2d("c2", x2, 16, 3, 2, 0)))
	// dilation 2: effective kernel 5: floor((10 + 2 - 4 - 1)/1) + 1 = 8
	x3 := b.Input("x3", graph.F32, 1, 4, 10, 10)
	assert.Equal(t, graph.Shape{1, 4, 8, 8}, shapeOf(t, b, b.Conv2d("c3", x3, 4, 3, 1, 1, graph.ConvDilation(2), graph.ConvGroups(4))))
	// transposed: (28-1)*2 - 0 + 1*(2-1) + 0 + 1 = 56 (U-Net up-conv)
	x4 := b.Input("x4", graph.F32, 1, 1024, 28, 28)
	assert.Equal(t, graph.Shape{1, 512, 56, 56}, shapeOf(t, b, b.ConvTranspose2d("up", x4, 512, 2, 2, 0)))
	g, err := b.Build()
	require.NoError(t, err)

	// Parameters with PyTorch's names and shapes.
	want := map[string]graph.Shape{
		"conv1.weight": {64, 3, 7, 7}, "c2.weight": {16, 8, 3, 3}, "c2.bias": {16},
		"c3.weight": {4, 1, 3, 3}, "c3.bias": {4}, "up.weight": {1024, 512, 2, 2}, "up.bias": {512},
	}
	got := map[string]graph.Shape{}
	for _, tt := range g.Tensors {
		if tt.Kind == graph.Parameter {
			got[tt.Name] = tt.Shape
		}
	}
	assert.Equal(t, want, got)
	op := g.Ops[0]
	assert.Equal(t, graph.OpConv2d, op.Type)
	assert.Equal(t, int64(2*2*64*112*112*3*7*7), op.FLOPs)
	assert.Equal(t, int64((2*3*224*224+64*3*7*7+2*64*112*112)*4), op.BytesAccessed)
	assert.Equal(t, map[string]string{"kernel": "7,7", "stride": "2,2", "padding": "3,3", "dilation": "1,1", "groups": "1"}, op.Attrs)
}

func TestPoolShapes(t *testing.T) {
	b := graph.NewBuilder("pool")
	x := b.Input("x", graph.F32, 2, 64, 112, 112)
	assert.Equal(t, graph.Shape{2, 64, 56, 56}, shapeOf(t, b, b.MaxPool2d("mp", x, 3, 2, 1)))
	// ceil_mode: 5x5, k2 s2: floor gives 2, ceil gives 3 (last window starts at 4 < 5).
	x5 := b.Input("x5", graph.F32, 1, 1, 5, 5)
	assert.Equal(t, graph.Shape{1, 1, 2, 2}, shapeOf(t, b, b.MaxPool2d("f", x5, 2, 2, 0)))
	assert.Equal(t, graph.Shape{1, 1, 3, 3}, shapeOf(t, b, b.MaxPool2d("c", x5, 2, 2, 0, graph.PoolCeilMode())))
	// ceil_mode with padding: 4x4, k3 s2 p1: ceil((4+2-3)/2)+1 = 3, last window starts at 4 >= 4+1? no -> 3.
	x4 := b.Input("x4", graph.F32, 1, 1, 4, 4)
	assert.Equal(t, graph.Shape{1, 1, 3, 3}, shapeOf(t, b, b.AvgPool2d("a", x4, 3, 2, 1, graph.PoolCeilMode())))
	y := b.AdaptiveAvgPool2d("ap", b.Input("x7", graph.F32, 1, 2, 7, 7), 3, 3)
	assert.Equal(t, graph.Shape{1, 2, 3, 3}, shapeOf(t, b, y))
	g, err := b.Build()
	require.NoError(t, err)
	mp := g.Ops[0]
	require.Len(t, mp.Outputs, 2)
	assert.Equal(t, graph.I64, g.Tensors[mp.Outputs[1]].DType)
	// Adaptive windows for 7 -> 3: [0,3) [2,5) [4,7): 3 elements each.
	ap := g.Ops[len(g.Ops)-1]
	assert.Equal(t, int64(1*2*9*9), ap.FLOPs)
}

func TestViewsAliasAndCostNothing(t *testing.T) {
	b := graph.NewBuilder("views")
	x := b.Input("x", graph.F32, 2, 3, 4, 5)
	f := b.Flatten("flat", x, 1)
	r := b.Reshape("r", x, 6, -1)
	tr := b.Transpose("t", x, 1, -1)
	sl := b.Slice("s", x, 2, 0, 4, 2)
	parts := b.Split("sp", x, 1, 1, 2)
	assert.Equal(t, graph.Shape{2, 60}, shapeOf(t, b, f))
	assert.Equal(t, graph.Shape{6, 20}, shapeOf(t, b, r))
	assert.Equal(t, graph.Shape{2, 5, 4, 3}, shapeOf(t, b, tr))
	assert.Equal(t, graph.Shape{2, 3, 2, 5}, shapeOf(t, b, sl))
	require.Len(t, parts, 2)
	assert.Equal(t, graph.Shape{2, 2, 4, 5}, shapeOf(t, b, parts[1]))
	g, err := b.Build()
	require.NoError(t, err)
	for _, op := range g.Ops {
		assert.Zero(t, op.FLOPs, op.Name)
		assert.Zero(t, op.BytesAccessed, op.Name)
		for _, o := range op.Outputs {
			assert.Equal(t, x, g.StorageOf(o), op.Name)
			assert.Zero(t, g.Tensors[o].StorageBytes(), op.Name)
		}
	}
}

func TestElementwiseAndMisc(t *testing.T) {
	b := graph.NewBuilder("misc")
	x := b.Input("x", graph.F32, 4, 8)
	p := b.Parameter("p", graph.F32, 8)
	a := b.Add("add", x, p) // broadcast
	assert.Equal(t, graph.Shape{4, 8}, shapeOf(t, b, a))
	d := b.Dropout("drop", a, 0.1)
	c := b.Concat("cat", 1, x, d, x)
	assert.Equal(t, graph.Shape{4, 24}, shapeOf(t, b, c))
	pd := b.Pad("pad", b.Reshape("r4", x, 1, 4, 2, 4), 0, 0, 0, 0, 2, 2)
	assert.Equal(t, graph.Shape{1, 8, 2, 4}, shapeOf(t, b, pd))
	m := b.MatMul("mm", b.Input("q", graph.F32, 2, 3, 5, 7), b.Input("k", graph.F32, 3, 7, 9))
	assert.Equal(t, graph.Shape{2, 3, 5, 9}, shapeOf(t, b, m))
	ln := b.LayerNorm("ln", b.Input("h", graph.F32, 2, 5, 16))
	assert.Equal(t, graph.Shape{2, 5, 16}, shapeOf(t, b, ln))
	e := b.Embedding("emb", b.Input("ids", graph.I64, 2, 5), 100, 16)
	assert.Equal(t, graph.Shape{2, 5, 16}, shapeOf(t, b, e))
	up := b.Upsample("up", b.Input("img", graph.F32, 1, 3, 4, 4), 2)
	assert.Equal(t, graph.Shape{1, 3, 8, 8}, shapeOf(t, b, up))
	loss := b.CrossEntropy("ce", b.Linear("fc", x, 3, false), b.Input("y", graph.I64, 4))
	assert.Empty(t, shapeOf(t, b, loss))
	g, err := b.Build()
	require.NoError(t, err)
	for _, op := range g.Ops {
		if op.Type == graph.OpDropout {
			assert.True(t, op.Flags.Has(graph.NonDeterministic))
			assert.Equal(t, graph.U8, g.Tensors[op.Outputs[1]].DType)
		}
		if op.Type == graph.OpLayerNorm {
			assert.Equal(t, graph.Shape{2, 5, 1}, g.Tensors[op.Outputs[1]].Shape)
		}
		if op.Type == graph.OpMatMul {
			assert.Equal(t, int64(2*2*3*5*7*9), op.FLOPs)
		}
	}
}

func TestLayerErrorsAreRecordedNotPanics(t *testing.T) {
	cases := map[string]func(b *graph.Builder, x graph.TensorID){
		"kernel larger than input": func(b *graph.Builder, x graph.TensorID) { b.Conv2d("c", x, 4, 9, 1, 0) },
		"bad groups":               func(b *graph.Builder, x graph.TensorID) { b.Conv2d("c", x, 4, 3, 1, 1, graph.ConvGroups(2)) },
		"zero stride":              func(b *graph.Builder, x graph.TensorID) { b.MaxPool2d("p", x, 2, 0, 0) },
		"pad too big":              func(b *graph.Builder, x graph.TensorID) { b.MaxPool2d("p", x, 2, 2, 2) },
		"bad view":                 func(b *graph.Builder, x graph.TensorID) { b.Reshape("r", x, 7, -1) },
		"bad dim":                  func(b *graph.Builder, x graph.TensorID) { b.Softmax("s", x, 4) },
		"bad concat":               func(b *graph.Builder, x graph.TensorID) { b.Concat("c", 1, x, b.Input("z", graph.F32, 1, 3, 5, 6)) },
		"bad split":                func(b *graph.Builder, x graph.TensorID) { b.Split("s", x, 1, 1, 1) },
		"undefined input":          func(b *graph.Builder, x graph.TensorID) { b.ReLU("r", 99) },
		"dropout p":                func(b *graph.Builder, x graph.TensorID) { b.Dropout("d", x, 1.5) },
		"matmul inner":             func(b *graph.Builder, x graph.TensorID) { b.MatMul("m", x, b.Input("w", graph.F32, 4, 2)) },
		"float ids":                func(b *graph.Builder, x graph.TensorID) { b.Embedding("e", x, 10, 4) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			b := graph.NewBuilder("bad")
			x := b.Input("x", graph.F32, 1, 3, 5, 5)
			require.NotPanics(t, func() { f(b, x) })
			_, err := b.Build()
			require.Error(t, err)
		})
	}
	// One mistake gives one error, not a cascade.
	b := graph.NewBuilder("cascade")
	x := b.Input("x", graph.F32, 1, 3, 5, 5)
	y := b.Conv2d("c", x, 4, 9, 1, 0)
	y = b.ReLU("r", y)
	b.BatchNorm2d("bn", y)
	_, err := b.Build()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `layer "c"`)
	assert.NotContains(t, err.Error(), `"bn"`)
}
