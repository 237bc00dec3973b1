package graph_test

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/remat-dev/remat/graph"
)

// Build a two-layer perceptron op by op and read back its sizes.
func ExampleBuilder() {
	b := graph.NewBuilder("mlp")
	x := b.Input("x", graph.F32, 32, 784)
	w1 := b.Parameter("fc1.weight", graph.F32, 256, 784)
	w2 := b.Parameter("fc2.weight", graph.F32, 10, 256)
	h := b.Op("linear", "fc1", x, w1).Out("h", graph.F32, 32, 256).FLOPs(2 * 32 * 784 * 256).T()
	a := b.Op("relu", "act", h).Out("a", graph.F32, 32, 256).T()
	y := b.Op("linear", "fc2", a, w2).Out("y", graph.F32, 32, 10).FLOPs(2 * 32 * 256 * 10).T()
	b.SetLoss(y)
	g, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(g.NumOps(), "ops,", g.NumTensors(), "tensors,", g.ParamCount(), "parameters")
	fmt.Println("x:", g.Tensor(x).Bytes, "bytes; consumers of h:", g.Consumers(h))
	// Output:
	// 3 ops, 6 tensors, 203264 parameters
	// x: 100352 bytes; consumers of h: [1]
}

// Validate names the op, the tensor and the location of a problem.
func ExampleGraph_Validate() {
	b := graph.NewBuilder("broken")
	x := b.Input("x", graph.F32, 4)
	b.Op("relu", "act", x).Out("y", graph.F32, 4)
	g, _ := b.Build()

	g.Ops[0].Inputs[0] = 7 // corrupt it
	err := g.Validate()
	fmt.Println(err)
	var ve *graph.ValidationError
	fmt.Println(errors.As(err, &ve), ve.Path, errors.Is(err, graph.ErrInvalid))
	// Output:
	// ops[0].inputs[0]: op #0 "act" (relu): input tensor 7 is not defined (graph has 2 tensors)
	// true ops[0].inputs[0] true
}

// Encode writes the native JSON format; Decode reads and validates it.
func ExampleEncode() {
	b := graph.NewBuilder("tiny")
	x := b.Input("x", graph.F16, 2, 3)
	b.Op("dropout", "drop", x).Out("y", graph.F16, 2, 3).Flags(graph.NonDeterministic).Attr(graph.AttrRNGSaved, "1")
	g, _ := b.Build()

	var buf bytes.Buffer
	if err := graph.Encode(&buf, g); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(buf.String())

	g2, err := graph.Decode(&buf)
	fmt.Println(err, g2.Ops[0].Recomputable())
	// Output:
	// {
	//   "format": "remat.graph",
	//   "version": 1,
	//   "name": "tiny",
	//   "tensors": [
	//     {"id": 0, "name": "x", "dtype": "f16", "shape": [2, 3], "bytes": 12, "kind": "input"},
	//     {"id": 1, "name": "y", "dtype": "f16", "shape": [2, 3], "bytes": 12, "kind": "activation", "producer": 0}
	//   ],
	//   "ops": [
	//     {"id": 0, "name": "drop", "type": "dropout", "phase": "forward", "inputs": [0], "outputs": [1], "flags": ["nondeterministic"], "attrs": {"rng_saved": "1"}}
	//   ]
	// }
	// <nil> true
}

// Decode reports where a file is wrong.
func ExampleDecode() {
	in := `{"format": "remat.graph", "version": 1,
  "tensors": [{"id": 0, "kind": "input", "dtype": "f32", "shape": [4]}],
  "ops": [{"id": 0, "type": "relu", "phase": "forwards", "inputs": [0]}]}`
	_, err := graph.Decode(bytes.NewReader([]byte(in)))
	fmt.Println(err)
	// Output:
	// ops[0].phase: line 3, byte 158: phase "forwards", expected one of forward, backward, update
}
