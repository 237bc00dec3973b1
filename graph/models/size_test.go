package models

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The size estimate is exact on the zoo's models, whose op counts are
// affine in their depth (bilinear in layers x steps for the LSTM).
func TestEstimateMatchesTheBuild(t *testing.T) {
	for _, c := range []struct {
		model string
		o     Options
	}{
		{"chain", Options{Depth: 37}},
		{"mlp", Options{Depth: 9, Width: 16, Batch: 2}},
		{"mlp", Options{Depth: 4, Optimizer: "adam"}},
		{"gpt", Options{Depth: 5, Seq: 8, Width: 16, Heads: 2, Vocab: 32, Batch: 1}},
		{"lstm", Options{Depth: 3, Seq: 11, Width: 8, Vocab: 16, Batch: 1}},
		{"lstm", Options{Depth: 1, Seq: 1, Width: 8, Vocab: 16, Batch: 1, Optimizer: "momentum"}},
		{"resnet-cifar", Options{Depth: 32, Batch: 2}},
		{"resnet-cifar", Options{Depth: 8}},
	} {
		s := registry[c.model]
		r, err := resolve(s, c.o)
		require.NoError(t, err)
		ops, tensors, err := estimate(s, r)
		require.NoError(t, err)
		g, err := Build(c.model, c.o)
		require.NoError(t, err)
		assert.Equal(t, int64(len(g.Ops)), ops, "%s %+v ops", c.model, c.o)
		assert.Equal(t, int64(len(g.Tensors)), tensors, "%s %+v tensors", c.model, c.o)
	}
}

// Sizes are checked before anything is allocated: a depth of 1e8 is an
// error naming the estimate and the limit, not an out-of-memory crash.
func TestHugeModelsAreRefused(t *testing.T) {
	for _, c := range []struct {
		model string
		o     Options
	}{
		{"chain", Options{Depth: 100_000_000}},
		{"mlp", Options{Depth: 100_000_000}},
		{"gpt", Options{Depth: 1_000_000}},
		{"lstm", Options{Seq: 10_000_000}},
		{"lstm", Options{Depth: 100_000, Seq: 1000}},
		{"resnet-cifar", Options{Depth: 6*10_000_000 + 2}},
	} {
		_, err := Build(c.model, c.o)
		require.Error(t, err, c.model)
		assert.Contains(t, err.Error(), "more than the limit of 8388608 ops", c.model)
		assert.Contains(t, err.Error(), "about", c.model)
	}
}
