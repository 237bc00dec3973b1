package sim

import (
	"fmt"
	"testing"

	"github.com/remat-dev/remat/sim/alloc"

	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// resnetLike builds a training graph of residual MLP blocks with a backward
// pass and SGD updates: per block 5 forward ops (linear, relu, linear, add,
// relu), 7 backward ops and 2 updates, so blocks*14+2 ops.
func resnetLike(t testing.TB, blocks int, width int64) *graph.Graph {
	const batch = 32
	b := graph.NewBuilder(fmt.Sprintf("resnet-like-%d", blocks))
	act := func(o *graph.OpBuilder, name string, flops int64) graph.TensorID {
		return o.Out(name, graph.F32, batch, width).FLOPs(flops).BytesAccessed(3 * batch * width * 4).T()
	}
	mm := 2 * batch * width * width
	ew := batch * width
	x := b.Input("x", graph.F32, batch, width)
	type blk struct{ in, w1, y1, r1, w2, out graph.TensorID }
	bs := make([]blk, blocks)
	h := x
	for i := range bs {
		p := fmt.Sprintf("b%d.", i)
		w1 := b.Parameter(p+"w1", graph.F32, width, width)
		w2 := b.Parameter(p+"w2", graph.F32, width, width)
		y1 := act(b.Op("linear", p+"fc1", h, w1), p+"y1", mm)
		r1 := act(b.Op("relu", p+"relu1", y1), p+"r1", ew)
		y2 := act(b.Op("linear", p+"fc2", r1, w2), p+"y2", mm)
		s := act(b.Op("add", p+"add", y2, h), p+"s", ew)
		out := act(b.Op("relu", p+"relu2", s), p+"out", ew)
		bs[i] = blk{h, w1, y1, r1, w2, out}
		h = out
	}
	loss := b.Op("mean", "loss", h).Out("loss", graph.F32).FLOPs(ew).T()
	b.SetLoss(loss)
	b.SetPhase(graph.Backward)
	gh := act(b.Op("mean_grad", "loss_grad", loss), "g.out", ew)
	grads := make([][2]graph.TensorID, blocks)
	for i := blocks - 1; i >= 0; i-- {
		k := bs[i]
		p := fmt.Sprintf("b%d.", i)
		gs := act(b.Op("relu_grad", p+"relu2_grad", gh, k.out), p+"g.s", ew)
		gw2 := b.Op("linear_grad_w", p+"fc2_grad_w", gs, k.r1).Out(p+"g.w2", graph.F32, width, width).FLOPs(mm).T()
		gr1 := act(b.Op("linear_grad_x", p+"fc2_grad_x", gs, k.w2), p+"g.r1", mm)
		gy1 := act(b.Op("relu_grad", p+"relu1_grad", gr1, k.r1), p+"g.y1", ew)
		gw1 := b.Op("linear_grad_w", p+"fc1_grad_w", gy1, k.in).Out(p+"g.w1", graph.F32, width, width).FLOPs(mm).T()
		gin := act(b.Op("linear_grad_x", p+"fc1_grad_x", gy1, k.w1), p+"g.in_a", mm)
		gh = act(b.Op("add", p+"res_grad", gin, gs), p+"g.in", ew)
		grads[i] = [2]graph.TensorID{gw1, gw2}
	}
	b.SetPhase(graph.Update)
	for i, k := range bs {
		p := fmt.Sprintf("b%d.", i)
		b.Op("sgd", p+"sgd_w1", k.w1, grads[i][0]).Out(p+"w1'", graph.F32, width, width).BytesAccessed(3 * width * width * 4)
		b.Op("sgd", p+"sgd_w2", k.w2, grads[i][1]).Out(p+"w2'", graph.F32, width, width).BytesAccessed(3 * width * width * 4)
	}
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func benchReplay(b *testing.B, newAlloc func() alloc.Allocator, inPlace ...bool) {
	g := resnetLike(b, 100000/14, 64) // 100,002 ops
	p := DefaultPlan(g)
	m, err := NewMachine(g, Options{Allocator: newAlloc(), InPlace: len(inPlace) > 0 && inPlace[0]})
	require.NoError(b, err)
	require.NoError(b, m.Replay(p)) // grow the tables once
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := m.Reset(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := m.Replay(p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(p.Steps))*float64(b.N)/b.Elapsed().Seconds(), "steps/s")
}

// BenchmarkReplayIdeal replays the default plan of a 100k-op graph
// (about 200k steps) with the ideal allocator.
func BenchmarkReplayIdeal(b *testing.B) {
	benchReplay(b, func() alloc.Allocator { return nil })
}

// BenchmarkReplayCaching is the same with the caching allocator model.
func BenchmarkReplayCaching(b *testing.B) {
	benchReplay(b, func() alloc.Allocator { return alloc.NewCaching(0) })
}

// BenchmarkReplayStaticInPlace is the same with the static (MXNet) planner
// and in-place reuse on: relu and add write over inputs freed right after.
func BenchmarkReplayStaticInPlace(b *testing.B) {
	benchReplay(b, func() alloc.Allocator { return alloc.NewStatic(alloc.DefaultStaticOptions()) }, true)
}
