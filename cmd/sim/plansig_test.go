package main

import (
	"strings"
	"testing"

	"github.com/remat-dev/remat/graph"
)

func TestPlanSignature(t *testing.T) {
	const doc = `{"format": "remat.graph", "version": 1, "name": "sig", "loss": 2,
"tensors": [
{"id": 0, "name": "x", "dtype": "f32", "shape": [2, 3], "kind": "input"},
{"id": 1, "name": "y", "dtype": "f32", "shape": [2, 3], "kind": "activation", "producer": 0},
{"id": 2, "name": "l", "dtype": "f32", "shape": [], "kind": "activation", "producer": 1},
{"id": 3, "name": "gy", "bytes": 24, "kind": "gradient", "producer": 2},
{"id": 4, "name": "v", "dtype": "f32", "shape": [6], "kind": "gradient", "producer": 2, "alias_of": 3}
],
"ops": [
{"id": 0, "name": "a", "type": "relu", "phase": "forward", "inputs": [0], "outputs": [1]},
{"id": 1, "name": "b", "type": "sum", "phase": "forward", "inputs": [1], "outputs": [2]},
{"id": 2, "name": "c", "type": "sum_backward", "phase": "backward", "inputs": [2], "outputs": [3, 4], "forward": 1}
]}`
	g, err := graph.Decode(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(planSignature(g), "|")
	want := "forward relu 1:f32[2,3]|forward sum 2:f32[]|backward sum_backward <1 3:?[?] 4:f32[6]=3"
	if got != want {
		t.Errorf("planSignature = %q, want %q", got, want)
	}
}
