package sublinear

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestDbgOpt(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for trial := 0; trial < 5; trial++ {
		L := 2 + trial%4
		sp := optChainSpec{paramBytes: 4 * r.Int64N(3)}
		for k := 0; k < L; k++ {
			sp.act = append(sp.act, 10*(1+r.Int64N(20)))
			if trial%2 == 0 {
				sp.grad = append(sp.grad, sp.act[k])
			} else {
				sp.grad = append(sp.grad, 10*r.Int64N(20))
			}
			sp.fwd = append(sp.fwd, 1+r.Int64N(30))
			sp.bwd = append(sp.bwd, 1+r.Int64N(60))
			sp.saved = append(sp.saved, 10*r.Int64N(20))
		}
		if trial != 4 { continue }
		fmt.Printf("%+v\n", sp)
		g := optChainGraph(t, sp)
		ch, _ := StagesOf(g, StagesOptions{})
		fmt.Println("pinned", ch.Pinned)
		for k, s := range ch.Stages { fmt.Printf("stage %d %+v\n", k, RotorStagesOf(ch, 1)[k]); _ = s }
		for _, s := range optEnumSchedules(0, L-1) {
			p, _, _ := StagesPlan(g, ch, s, "brute")
			res := optSimulate(t, g, p)
			fmt.Println(s, res.PeakAllocated, res.TotalNs, res.PeakAllocatedStep, p.Steps[res.PeakAllocatedStep])
		}
	}
}
