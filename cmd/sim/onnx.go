package main

import (
	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph"
)

// loadONNX imports an ONNX model as a training graph.
func loadONNX(path string, in *inputFlags, s *config.Settings) (*graph.Graph, error) {
	return nil, usagef("--onnx %s: ONNX import is not available yet", path)
}
