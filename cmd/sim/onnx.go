package main

import (
	"fmt"
	"os"

	"github.com/remat-dev/remat"
	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/onnx"
)

// loadONNX imports an ONNX model as a training graph through the one import
// path (remat.ImportONNX): --batch sets the batch axis, --seq a symbolic
// dimension named "seq", --optimizer the update ops (default sgd), --frozen
// the weights that take no gradient; the
// settings s (with the framework preset for the device applied) decide
// in-place updates and what dropout saves.
func loadONNX(path string, in *inputFlags, s *config.Settings) (*graph.Graph, error) {
	if in.optimizer != "" {
		if _, err := graph.ParseOptimizer(in.optimizer); err != nil {
			return nil, usageError{fmt.Errorf("--optimizer: %w", err)}
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ri := remat.ONNXInput{Batch: int64(in.batch), Optimizer: in.optimizer, Frozen: in.frozen}
	if in.seq > 0 {
		ri.Dims = map[string]int64{"seq": int64(in.seq)}
	}
	g, err := remat.ImportONNX(f, s, ri)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if k := g.Attrs[onnx.AttrFoldedConvs]; k != "" && in.warn != nil {
		convs := k + " convolutions have weights"
		if k == "1" {
			convs = "1 convolution has a weight"
		}
		fmt.Fprintf(in.warn, "sim: warning: %s: %s named onnx::Conv_*, the constants torch.onnx folds batch norms into: "+
			"the model looks exported for inference (torch.onnx.export's default), without its batch norms and dropouts, which its training step runs; "+
			"export it with training=torch.onnx.TrainingMode.TRAINING (docs/onnx.md)\n", path, convs)
	}
	return g, nil
}
