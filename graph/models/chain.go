package models

import (
	"fmt"
	"strconv"

	"github.com/remat-dev/remat/graph"
)

// Unit cost and size of the chain benchmark: every tensor holds exactly
// ChainTensorBytes and every op takes ChainOpTimeNs (and ChainOpTimeNs FLOPs).
const (
	ChainTensorBytes = 1 << 20
	ChainOpTimeNs    = 1_000_000
)

func init() {
	register(&Spec{
		Name:   "chain",
		Family: "chain",
		Description: "Checkmate's linear(n) benchmark: 2n+1 unit ops (n forward, the loss, n backward); " +
			"chain edges i-1 -> i and forward i -> backward 2n-i; every tensor 1 MiB, every op 1 ms",
		Defaults: Options{Depth: 16},
		Uses:     []string{"Depth"},
		direct:   buildChain,
		scale:    []scaling{{"Depth", 1, 1}},
	})
}

// buildChain builds linear(n) directly, without gradient rules.
func buildChain(o Options) (*graph.Graph, graph.TensorID, error) {
	n := o.Depth
	elems := int64(ChainTensorBytes) / o.DType.Size()
	b := graph.NewBuilder("chain")
	b.SetAttr("model", "chain")
	b.SetAttr("depth", strconv.Itoa(n))
	b.SetAttr("dtype", o.DType.String())
	out := make([]graph.TensorID, 2*n+1)
	prev := graph.NoTensor
	for i := 0; i <= 2*n; i++ {
		var ins []graph.TensorID
		if prev != graph.NoTensor {
			ins = append(ins, prev)
		}
		typ, name := "chain_forward", "f"+strconv.Itoa(i)
		switch {
		case i == n:
			typ, name = "chain_loss", "loss"
		case i > n:
			b.SetPhase(graph.Backward)
			typ, name = "chain_backward", "b"+strconv.Itoa(2*n-i)
			ins = append(ins, out[2*n-i])
		}
		ob := b.Op(typ, name, ins...).Out(name, o.DType, elems).
			TimeNs(ChainOpTimeNs).FLOPs(ChainOpTimeNs).
			BytesAccessed(int64(len(ins)+1) * ChainTensorBytes)
		if i > n {
			ob.Forward(graph.OpID(2*n - i))
		}
		out[i] = ob.T()
		prev = out[i]
	}
	b.SetLoss(out[n])
	g, err := b.Build()
	if err != nil {
		return nil, graph.NoTensor, fmt.Errorf("model chain: %w", err)
	}
	return g, out[n], nil
}
