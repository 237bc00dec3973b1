package main

import (
	"context"
	"fmt"

	"github.com/remat-dev/remat"
	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/onnx"
	"github.com/remat-dev/remat/internal/gzfile"
)

// loadONNX imports an ONNX model as a training graph through the one import
// path (remat.ImportONNXModel): --batch sets the batch axis, --seq a
// symbolic dimension named "seq", --optimizer the update ops (default sgd),
// --frozen the weights that take no gradient; the settings s (with the
// framework preset for the device applied) decide in-place updates and what
// dropout saves.
func loadONNX(ctx context.Context, path string, in *inputFlags, s *config.Settings) (*graph.Graph, error) {
	build, err := onnxBuilder(ctx, path, in, s)
	if err != nil {
		return nil, err
	}
	return build(in.batch)
}

// onnxBuilder reads and parses the ONNX model at path once and returns a
// function that imports it at a batch size (0: 1) with the other input
// flags, as loadONNX does. Its first import that succeeds writes the
// model's warnings to in.warn.
func onnxBuilder(ctx context.Context, path string, in *inputFlags, s *config.Settings) (func(batch int) (*graph.Graph, error), error) {
	if in.optimizer != "" {
		if _, err := graph.ParseOptimizer(in.optimizer); err != nil {
			return nil, usageError{fmt.Errorf("--optimizer: %w", err)}
		}
	}
	f, err := gzfile.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := onnx.ReadModel(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	warned := false
	return func(batch int) (*graph.Graph, error) {
		ri := remat.ONNXInput{Batch: int64(batch), Optimizer: in.optimizer, Frozen: in.frozen}
		if in.seq > 0 {
			ri.Dims = map[string]int64{"seq": int64(in.seq)}
		}
		g, err := remat.ImportONNXModel(m, s, ri)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if k := g.Attrs[onnx.AttrFoldedConvs]; k != "" && in.warn != nil && !warned {
			convs := k + " convolutions have weights"
			if k == "1" {
				convs = "1 convolution has a weight"
			}
			fmt.Fprintf(in.warn, "sim: warning: %s: %s named onnx::Conv_*, the constants torch.onnx folds batch norms into: "+
				"the model looks exported for inference (torch.onnx.export's default), without its batch norms and dropouts, which its training step runs; "+
				"export it with training=torch.onnx.TrainingMode.TRAINING (docs/onnx.md)\n", path, convs)
		}
		warned = true
		return g, nil
	}, nil
}

// batchAxis checks that the model's inputs grow with the batch (a dynamic
// batch axis): imported at batches 1 and 2, its data inputs must differ in
// size. A model exported with a fixed batch imports the same graph at every
// batch, and maxbatch would report the search's limit.
func batchAxis(path string, build func(batch int) (*graph.Graph, error)) error {
	var in [2]int64
	for i := range in {
		g, err := build(i + 1)
		if err != nil {
			return err
		}
		for j := range g.Tensors {
			if g.Tensors[j].Kind == graph.Input {
				in[i] += g.Tensors[j].Bytes
			}
		}
	}
	if in[0] == in[1] {
		return fmt.Errorf("%s: the data inputs are %d bytes at batch 1 and at batch 2: the model has no dynamic batch axis to vary; "+
			"export it with dynamic_axes={'input': {0: 'batch'}} (docs/onnx.md)", path, in[0])
	}
	return nil
}
