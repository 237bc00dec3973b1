package dtr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/sim"
)

func sizedChain(sz []int64) *graph.Graph {
	b := graph.NewBuilder("frag")
	x := b.Input("x", graph.F32, 1<<18) // 1 MiB
	acts := []graph.TensorID{x}
	for i, s := range sz {
		acts = append(acts, b.Op("relu", fmt.Sprintf("f%d", i), acts[len(acts)-1]).OutBytes(fmt.Sprintf("a%d", i), s<<20).TimeNs(1000).T())
	}
	b.SetPhase(graph.Backward)
	g := acts[len(sz)]
	for i := len(sz) - 1; i >= 0; i-- {
		g = b.Op("relu_grad", fmt.Sprintf("b%d", i), g, acts[i]).OutBytes(fmt.Sprintf("g%d", i), sz[max(i-1, 0)]<<20).TimeNs(1000).T()
	}
	gr, err := b.Build()
	if err != nil {
		panic(err)
	}
	return gr
}

func runFrag(g *graph.Graph, capMiB int64, cfg Config) (Stats, error) {
	so := sim.Options{Allocator: sim.NewCaching(capMiB << 20), Capacity: -1}
	m, err := sim.NewMachine(g, so)
	if err != nil {
		return Stats{}, err
	}
	cfg.Budget = capMiB << 20
	_, st, err := RunOnMachine(context.Background(), m, cfg)
	return st, err
}

func TestDbgSearch(t *testing.T) {
	vals := []int64{3, 5, 9, 12, 16}
	for n := 3; n <= 5; n++ {
		idx := make([]int, n)
		for {
			sz := make([]int64, n)
			for i := range idx {
				sz[i] = vals[idx[i]]
			}
			g := sizedChain(sz)
			for c := int64(20); c <= 80; c += 2 {
				p := ParityConfig(HDTREqClass)
				_, e1 := runFrag(g, c, p)
				d := DefaultConfig()
				d.EvicteeMinSize = 0
				d.LazyLock = false
				st, e2 := runFrag(g, c, d)
				if e1 != nil && errors.Is(e1, sim.ErrOutOfMemory) && e2 == nil {
					fmt.Println("FOUND", sz, c, st.HostRetries, e1)
				}
			}
			k := 0
			for k < n {
				idx[k]++
				if idx[k] < len(vals) {
					break
				}
				idx[k] = 0
				k++
			}
			if k == n {
				break
			}
		}
	}
}
