package models

import (
	"math"
	"strconv"

	"github.com/remat-dev/remat/graph"
)

// gptMinBlock is GPT-2's positional table size (n_positions).
const gptMinBlock = 1024

func init() {
	register(&Spec{
		Name: "gpt", Family: "transformer",
		Description: "GPT-2 style decoder (nanoGPT layout, pre-LayerNorm, tanh GELU, dropout 0.1, " +
			"embeddings tied with the output layer); defaults are GPT-2 small",
		Defaults: Options{Batch: 8, Seq: 1024, Depth: 12, Width: 768, Heads: 12, Vocab: 50257},
		Uses:     []string{"Batch", "Seq", "Depth", "Width", "Heads", "Vocab"},
		build:    gpt,
		scale:    []scaling{{"Depth", 1, 1}},
	})
	register(&Spec{
		Name: "lstm", Family: "rnn",
		Description: "word-level LSTM language model (PyTorch word_language_model layout, Zaremba medium sizes) " +
			"unrolled over Seq steps with fused LSTM cells",
		Defaults: Options{Batch: 20, Seq: 35, Depth: 2, Width: 650, Vocab: 10000},
		Uses:     []string{"Batch", "Seq", "Depth", "Width", "Vocab"},
		build:    lstm,
		scale:    []scaling{{"Depth", 1, 1}, {"Seq", 1, 1}},
	})
	register(&Spec{
		Name: "mlp", Family: "mlp",
		Description: "multi-layer perceptron on flattened 28x28 images: Depth hidden Linear+ReLU layers of Width units",
		Defaults:    Options{Batch: 64, Depth: 2, Width: 1024, Classes: 10},
		Uses:        []string{"Batch", "Depth", "Width", "Classes"},
		build:       mlp,
		scale:       []scaling{{"Depth", 1, 1}},
	})
}

// gpt follows nanoGPT's model.py (the same parameters as Hugging Face's
// GPT-2, with nn.Linear weights stored [out, in]) and its explicit attention
// path (not flash attention): the causal mask is a boolean constant
// [1, 1, T, T] shared by all layers. The positional table has
// max(Seq, 1024) rows.
func gpt(b *graph.Builder, o Options) graph.TensorID {
	B, T, C, H, V := int64(o.Batch), int64(o.Seq), int64(o.Width), int64(o.Heads), int64(o.Vocab)
	if C%H != 0 {
		b.Errorf("option Width=%d: expected a multiple of Heads=%d", o.Width, o.Heads)
		return graph.NoTensor
	}
	D := C / H
	dt := o.DType
	block := max(T, gptMinBlock)
	idx := b.Input("idx", graph.I64, B, T)
	pos := b.Constant("pos", graph.I64, T)
	mask := b.Constant("causal_mask", graph.Bool, 1, 1, T, T)
	wte := b.Parameter("transformer.wte.weight", dt, V, C)
	wpe := b.Parameter("transformer.wpe.weight", dt, block, C)
	x := b.Add("transformer.emb_add",
		b.EmbeddingWith("transformer.wte", idx, wte),
		b.EmbeddingWith("transformer.wpe", pos, wpe))
	x = b.Dropout("transformer.drop", x, 0.1)
	heads := func(p string, t graph.TensorID) graph.TensorID {
		return b.Transpose(p+".transpose", b.Reshape(p+".view", t, B, T, H, D), 1, 2)
	}
	for l := 0; l < o.Depth; l++ {
		p := "transformer.h." + strconv.Itoa(l)
		h := b.LayerNorm(p+".ln_1", x)
		qkv := b.Split(p+".attn.split", b.Linear(p+".attn.c_attn", h, 3*int(C), true), 2, int(C), int(C), int(C))
		if len(qkv) != 3 {
			return graph.NoTensor
		}
		q := heads(p+".attn.q", qkv[0])
		k := heads(p+".attn.k", qkv[1])
		v := heads(p+".attn.v", qkv[2])
		att := b.MatMul(p+".attn.qk", q, b.Transpose(p+".attn.kT", k, -2, -1))
		att = b.Scale(p+".attn.scale", att, 1/math.Sqrt(float64(D)))
		att = b.MaskedFill(p+".attn.mask", att, mask, math.Inf(-1))
		att = b.Softmax(p+".attn.softmax", att, -1)
		att = b.Dropout(p+".attn.attn_dropout", att, 0.1)
		y := b.MatMul(p+".attn.av", att, v)
		y = b.Contiguous(p+".attn.contiguous", b.Transpose(p+".attn.merge", y, 1, 2))
		y = b.Reshape(p+".attn.view", y, B, T, C)
		y = b.Dropout(p+".attn.resid_dropout", b.Linear(p+".attn.c_proj", y, int(C), true), 0.1)
		x = b.Add(p+".add1", x, y)
		h = b.LayerNorm(p+".ln_2", x)
		h = b.GELUTanh(p+".mlp.gelu", b.Linear(p+".mlp.c_fc", h, 4*int(C), true))
		h = b.Dropout(p+".mlp.dropout", b.Linear(p+".mlp.c_proj", h, int(C), true), 0.1)
		x = b.Add(p+".add2", x, h)
	}
	x = b.LayerNorm("transformer.ln_f", x)
	logits := b.LinearWith("lm_head", x, wte, graph.NoTensor)
	logits = b.Reshape("lm_head.view", logits, B*T, V)
	targets := b.Input("targets", graph.I64, B*T)
	return b.CrossEntropy("loss", logits, targets)
}

// lstm follows PyTorch's examples/word_language_model (encoder, rnn,
// decoder, dropout 0.5 after the encoder and before the decoder), with the
// recurrent layers unrolled layer by layer into fused LSTM cells (the
// between-layer dropout of nn.LSTM is omitted).
func lstm(b *graph.Builder, o Options) graph.TensorID {
	S, B, W := o.Seq, int64(o.Batch), o.Width
	data := b.Input("input", graph.I64, int64(S), B)
	enc := b.Parameter("encoder.weight", o.DType, int64(o.Vocab), int64(W))
	emb := b.EmbeddingWith("encoder", data, enc)
	emb = b.Dropout("drop.in", emb, 0.5)
	sizes := make([]int, S)
	for i := range sizes {
		sizes[i] = 1
	}
	steps := b.Split("steps", emb, 0, sizes...)
	if len(steps) != S {
		return graph.NoTensor
	}
	xs := make([]graph.TensorID, S)
	for t := range xs {
		xs[t] = b.Reshape("steps."+strconv.Itoa(t)+".view", steps[t], B, int64(W))
	}
	for l := 0; l < o.Depth; l++ {
		ls := strconv.Itoa(l)
		p := b.LSTMLayerParams("rnn", l, W, W, o.DType)
		h := b.Input("h0.l"+ls, o.DType, B, int64(W))
		c := b.Input("c0.l"+ls, o.DType, B, int64(W))
		for t := 0; t < S; t++ {
			h, c = b.LSTMCell("rnn.l"+ls+".t"+strconv.Itoa(t), xs[t], h, c, p)
			xs[t] = h
		}
	}
	outs := make([]graph.TensorID, S)
	for t := range outs {
		outs[t] = b.Reshape("out."+strconv.Itoa(t)+".view", xs[t], 1, B, int64(W))
	}
	y := b.Concat("out.cat", 0, outs...)
	y = b.Dropout("drop.out", y, 0.5)
	y = b.Linear("decoder", y, o.Vocab, true)
	y = b.Reshape("decoder.view", y, int64(S)*B, int64(o.Vocab))
	targets := b.Input("targets", graph.I64, int64(S)*B)
	return b.CrossEntropy("loss", y, targets)
}

// mlp is a plain classifier on flattened MNIST-sized images.
func mlp(b *graph.Builder, o Options) graph.TensorID {
	x := b.Input("input", o.DType, int64(o.Batch), 28*28)
	for i := 0; i < o.Depth; i++ {
		p := "fc" + strconv.Itoa(i+1)
		x = b.ReLU(p+".relu", b.Linear(p, x, o.Width, true))
	}
	x = b.Linear("fc"+strconv.Itoa(o.Depth+1), x, o.Classes, true)
	return classLoss(b, x, o.Batch)
}
