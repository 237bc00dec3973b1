package main

import (
	"strconv"
	"strings"

	"github.com/remat-dev/remat/graph"
)

// planSignature describes g for sim.Plan.Signature, one entry per op (the
// grammar is in sim/planjson.go and docs/simulator.md, "Plan JSON"):
// "PHASE TYPE [<FORWARD] [ID:DTYPE[DIMS][=ALIAS]]...".
func planSignature(g *graph.Graph) []string {
	sig := make([]string, len(g.Ops))
	var b strings.Builder
	for i := range g.Ops {
		o := &g.Ops[i]
		b.Reset()
		b.WriteString(o.Phase.String())
		b.WriteByte(' ')
		b.WriteString(o.Type)
		if o.Forward != graph.NoOp {
			b.WriteString(" <")
			b.WriteString(strconv.Itoa(int(o.Forward)))
		}
		for _, tid := range o.Outputs {
			t := &g.Tensors[tid]
			b.WriteByte(' ')
			b.WriteString(strconv.Itoa(int(tid)))
			b.WriteByte(':')
			if t.DType.Valid() {
				b.WriteString(t.DType.String())
			} else {
				b.WriteByte('?')
			}
			if t.Shape == nil {
				b.WriteString("[?]")
			} else {
				b.WriteByte('[')
				for j, d := range t.Shape {
					if j > 0 {
						b.WriteByte(',')
					}
					b.WriteString(strconv.FormatInt(d, 10))
				}
				b.WriteByte(']')
			}
			if t.AliasOf != graph.NoTensor {
				b.WriteByte('=')
				b.WriteString(strconv.Itoa(int(t.AliasOf)))
			}
		}
		sig[i] = b.String()
	}
	return sig
}
