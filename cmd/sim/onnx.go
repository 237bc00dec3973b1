package main

import (
	"fmt"
	"os"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/onnx"
)

// loadONNX imports an ONNX model as a training graph: --batch sets the batch
// axis, --seq a symbolic dimension named "seq", --optimizer the update ops.
func loadONNX(path string, in *inputFlags, s *config.Settings) (*graph.Graph, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	o := onnx.Options{Batch: int64(in.batch), InPlaceUpdate: s.Bool(config.InplaceUpdate)}
	if in.seq > 0 {
		o.Dims = map[string]int64{"seq": int64(in.seq)}
	}
	if in.optimizer != "" {
		opt, err := graph.ParseOptimizer(in.optimizer)
		if err != nil {
			return nil, usageError{fmt.Errorf("--optimizer: %w", err)}
		}
		o.Optimizer = opt
	}
	g, err := onnx.Import(f, o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}
