#!/usr/bin/python3
"""Test models for graph/onnx's TestTorchExportsMatchTrace.

Builds a ViT-style classifier (pre-norm blocks, timm-style attention written
out with matmul/softmax, GELU MLP, mean over tokens into the head), a
GPT-style causal encoder with dropout everywhere, and a 2-layer batch-first
nn.LSTM. For each it writes OUT/<name>.onnx (torch.onnx.export at the
exporter's default opset, 14 in torch 1.13, training mode, weights as inputs)
and OUT/<name>.json, tools/export_torch.py's trace of one training step
(F.cross_entropy, SGD) at batch BATCH.

    /usr/bin/python3 graph/onnx/testdata/torch_models.py OUT BATCH
"""

import math
import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools"))
import export_torch  # noqa: E402


class Attention(nn.Module):
    def __init__(self, d, heads, p):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.attn_drop = nn.Dropout(p)
        self.proj_drop = nn.Dropout(p)

    def forward(self, x, mask=None):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        a = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        if mask is not None:
            a = a.masked_fill(mask, float("-inf"))
        a = self.attn_drop(a.softmax(dim=-1))
        x = (a @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj_drop(self.proj(x))


class Block(nn.Module):
    def __init__(self, d, heads, mlp, p):
        super().__init__()
        self.n1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads, p)
        self.n2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, mlp)
        self.fc2 = nn.Linear(mlp, d)
        self.drop = nn.Dropout(p)

    def forward(self, x, mask=None):
        x = x + self.attn(self.n1(x), mask)
        return x + self.drop(self.fc2(self.drop(F.gelu(self.fc1(self.n2(x))))))


class ViT(nn.Module):
    def __init__(self, image=32, patch=8, d=64, depth=2, heads=4, mlp=128, classes=10):
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.zeros(1, n + 1, d))
        self.blocks = nn.ModuleList([Block(d, heads, mlp, 0.0) for _ in range(depth)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x).mean(1))


class GPT(nn.Module):
    def __init__(self, vocab=100, seq=16, d=64, depth=2, heads=4, p=0.1, classes=10):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq, d))
        self.drop = nn.Dropout(p)
        self.blocks = nn.ModuleList([Block(d, heads, 4 * d, p) for _ in range(depth)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

    def forward(self, ids):
        x = self.drop(self.tok(ids) + self.pos)
        for b in self.blocks:
            x = b(x, self.mask)
        return self.head(self.norm(x).mean(1))


class LSTMNet(nn.Module):
    def __init__(self, vocab=100, d=32, hidden=48, layers=2, classes=10):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, ids):
        y, _ = self.lstm(self.embed(ids))
        return self.head(y[:, -1])


def make(name, batch):
    torch.manual_seed(0)
    if name == "vit":
        return ViT(), torch.randn(batch, 3, 32, 32)
    if name == "gpt":
        return GPT(), torch.randint(0, 100, (batch, 16))
    return LSTMNet(), torch.randint(0, 100, (batch, 12))


def main():
    out, batch = sys.argv[1], int(sys.argv[2])
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    for name in ["vit", "gpt", "lstm"]:
        model, x = make(name, batch)
        model.train()
        torch.onnx.export(model, (x,), os.path.join(out, name + ".onnx"), export_params=False,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        model, x = make(name, batch)
        y = torch.randint(0, 10, (batch,))
        export_torch.write_graph(export_torch.trace_step(model, x, y, name=name), os.path.join(out, name + ".json"))


if __name__ == "__main__":
    main()
