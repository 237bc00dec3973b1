#!/usr/bin/python3
"""Layer-family fidelity: remat's predicted peak against PyTorch's own, on
small networks that each exercise one family of layers.

    /usr/bin/python3 tools/layer_fidelity.py --out docs/fidelity-layers.md
    /usr/bin/python3 tools/layer_fidelity.py --cases gather,topk,std --out /tmp/layers.md

Each case is a tiny network around one layer family: an image case is a 3x3
convolution stem (3 -> 16 channels, 32x32 images), the layer, a mean over
the image and a linear head; a sequence case is an embedding (100 x 64, 32
tokens), the layer, a mean over the tokens and a linear head. Batch 8, SGD,
cross-entropy loss, 2 threads. For each case it measures one training step
on CPU as tools/fidelity.py does (the profiler's largest running sum of
allocations above what is resident before the step), and predicts it by the
ONNX route (torch.onnx.export in training mode, then `sim report --onnx`)
and by the exporter route (tools/export_torch.py's trace, then `sim report
--graph`), both with --device cpu --allocator ideal. An export torch cannot
do is "failed" with torch's reason; a file sim cannot import is "failed"
with sim's.

The table documents where the two routes are exact and where they are not
(the notes under the table say why, for the known gaps). Runtime on 2
cores: a few seconds.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fidelity  # noqa: E402  (puts python/ on the path through export_torch)

BATCH = 8
NOTES_MARKER = "<!-- notes: kept by tools/layer_fidelity.py -->"


class Img(nn.Module):
    def __init__(self, body, ch=16):
        super().__init__()
        self.stem = nn.Conv2d(3, ch, 3, padding=1)
        self.body = body
        self.head = nn.Linear(ch, 5)

    def forward(self, x):
        return self.head(self.body(self.stem(x)).mean((2, 3)))


class Seq(nn.Module):
    def __init__(self, body, d=64):
        super().__init__()
        self.emb = nn.Embedding(100, d)
        self.body = body
        self.head = nn.Linear(d, 5)

    def forward(self, x):
        return self.head(self.body(self.emb(x)).mean(1))


class Lam(nn.Module):
    """f(x, *modules) as a module: the layer under test as one expression
    (a Python local would keep its tensor alive, which ONNX cannot see)."""

    def __init__(self, f, *mods):
        super().__init__()
        self.f = f
        self.m = nn.ModuleList(mods)

    def forward(self, x):
        return self.f(x, *self.m)


class LayerNormNoBias(nn.Module):
    """nanoGPT's LayerNorm with bias=False: F.layer_norm with a weight and
    no bias."""

    def __init__(self, d=64):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)


def swiglu(h):
    """SwiGLU's gate of a fused projection: silu of one half of h times the
    other (the halves are views of h, torch.chunk)."""
    u, g = h.chunk(2, -1)
    return F.silu(u) * g


def setitem(x, a):
    """Index assignment into a clone of a projection: a slice (x[:, 2:5] =)
    and a tensor index (x[:, idx] =), torch's index_put_; ONNX exports both
    as ScatterND."""
    z = a(x).clone()
    z[:, 2:5] = x[:, 0:3] * 2
    z[:, torch.tensor([0, 7])] = x[:, 8:10] * 3
    return z * x


class CausalAttention(nn.Module):
    def __init__(self, d=64, h=4):
        super().__init__()
        self.qkv, self.o, self.h = nn.Linear(d, 3 * d), nn.Linear(d, d), h

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, -1)
        q, k, v = (u.reshape(b, t, self.h, -1).transpose(1, 2) for u in (q, k, v))
        a = (q @ k.transpose(-1, -2) / 4.0).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        return self.o((a.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


def conv():
    return nn.Conv2d(16, 16, 3, padding=1)


def lin(o=64):
    return nn.Linear(64, o)


# name -> (builder, kind, what it exercises)
CASES = {
    "conv": (lambda: Img(nn.Sequential(conv(), nn.ReLU(), conv())), "img", "3x3 convolutions, ReLU"),
    "conv_transpose": (lambda: Img(nn.Sequential(nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU(),
                                                 nn.ConvTranspose2d(16, 16, 4, stride=2, padding=1))), "img", "ConvTranspose2d"),
    "conv1d": (lambda: Seq(Lam(lambda x, a, b: b(F.relu(a(x.transpose(1, 2)))).transpose(1, 2),
                               nn.Conv1d(64, 64, 5, padding=2), nn.Conv1d(64, 64, 3, padding=1))), "seq",
               "Conv1d over a transposed sequence"),
    "pool1d": (lambda: Seq(Lam(lambda x, a: F.interpolate(F.max_pool1d(a(x.transpose(1, 2)), 2), scale_factor=2.0).transpose(1, 2),
                               nn.Conv1d(64, 64, 3, padding=1))), "seq", "MaxPool1d, 1-D nearest upsampling"),
    "adaptive_avgpool1d": (lambda: Seq(Lam(lambda x, a: F.adaptive_avg_pool1d(a(x).transpose(1, 2), 8).repeat(1, 1, 4).transpose(1, 2),
                                           lin())), "seq", "adaptive_avg_pool1d of a transposed sequence"),
    "adaptive_maxpool": (lambda: Img(nn.Sequential(conv(), nn.AdaptiveMaxPool2d(8), conv())), "img", "AdaptiveMaxPool2d"),
    "interpolate": (lambda: Img(Lam(lambda x, a: F.interpolate(a(F.avg_pool2d(x, 2)), scale_factor=2.0, mode="bilinear", align_corners=True),
                                    conv())), "img", "avg_pool2d, bilinear upsampling"),
    "hardtanh": (lambda: Img(nn.Sequential(conv(), nn.Hardtanh(), conv(), nn.ReLU6())), "img", "Hardtanh, ReLU6"),
    "selu_elu": (lambda: Img(nn.Sequential(conv(), nn.SELU(), conv(), nn.ELU(), nn.Hardsigmoid())), "img", "SELU, ELU, Hardsigmoid"),
    "mish": (lambda: Img(nn.Sequential(conv(), nn.Mish(), conv(), nn.Softplus())), "img", "Mish, Softplus"),
    "glu": (lambda: Img(nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.GLU(1))), "img", "GLU"),
    "clamp": (lambda: Img(Lam(lambda x, a: a(x).clamp(-0.5, 0.7) * x, conv())), "img", "clamp, mul"),
    "where": (lambda: Img(Lam(lambda x, a: torch.where(x > 0, a(x), x * 0.1), conv())), "img", "where"),
    "maximum": (lambda: Img(Lam(lambda x, a, b: torch.maximum(a(x), b(x)), conv(), nn.Conv2d(16, 16, 1))), "img", "torch.maximum"),
    "minimum_broadcast": (lambda: Img(Lam(lambda x, a, b: torch.minimum(a(x), b(x).mean((2, 3), keepdim=True)),
                                          conv(), nn.Conv2d(16, 16, 1))), "img", "torch.minimum with a broadcast operand"),
    "pow_tensor": (lambda: Img(Lam(lambda x, a: torch.pow(torch.sigmoid(a(x)) + 0.5, torch.sigmoid(x)), conv())), "img",
                   "pow with a tensor exponent"),
    "pow_constant_exponent": (lambda: Img(Lam(lambda x, a: torch.pow(torch.sigmoid(a(x)) + 0.5, torch.full((1, 16, 1, 1), 1.7)),
                                              conv())), "img", "pow with a constant tensor exponent"),
    "softmax_channels": (lambda: Img(Lam(lambda x, a: a(x).softmax(1) * x, conv())), "img", "softmax over channels"),
    "instance_norm_std": (lambda: Img(Lam(lambda x, a: (a(x) - x.mean((2, 3), keepdim=True)) * torch.rsqrt(x.var((2, 3), keepdim=True) + 1e-5),
                                          conv())), "img", "mean, var, rsqrt"),
    "std": (lambda: Img(Lam(lambda x, a: a(x) / (x.std(1, keepdim=True) + 1e-3), conv())), "img", "torch.std"),
    "std_biased": (lambda: Seq(Lam(lambda x, a: a(x) * x.std(-1, unbiased=False, keepdim=True), lin())), "seq",
                   "std without correction, broadcast mul"),
    "layernorm_no_affine": (lambda: Seq(nn.Sequential(lin(), nn.LayerNorm(64, elementwise_affine=False), nn.Tanh(), lin())), "seq",
                            "LayerNorm without weight and bias"),
    "layernorm_no_bias": (lambda: Seq(nn.Sequential(lin(), LayerNormNoBias(), nn.Tanh(), lin())), "seq", "layer_norm with a weight, no bias"),
    "batchnorm1d_rows": (lambda: Seq(Lam(lambda x, a, b: b(a(x).reshape(-1, 64)).reshape(x.shape), lin(), nn.BatchNorm1d(64))), "seq",
                         "BatchNorm1d on [N, C]"),
    "batchnorm1d_sequence": (lambda: Seq(Lam(lambda x, a, b: b(a(x).transpose(1, 2)).transpose(1, 2), lin(), nn.BatchNorm1d(64))), "seq",
                             "BatchNorm1d over a transposed sequence"),
    "logsoftmax": (lambda: Seq(Lam(lambda x, a: F.log_softmax(a(x), -1) * x, lin())), "seq", "log_softmax"),
    "logsumexp": (lambda: Seq(Lam(lambda x, a: torch.logsumexp(a(x), dim=-1, keepdim=True) * x, lin())), "seq", "logsumexp"),
    "norm": (lambda: Seq(Lam(lambda x, a: x / a(x).norm(dim=-1, keepdim=True), lin())), "seq", "2-norm"),
    "normalize": (lambda: Seq(Lam(lambda x, a: F.normalize(a(x), dim=-1) * x, lin())), "seq", "F.normalize"),
    "cosine_similarity": (lambda: Seq(Lam(lambda x, a: F.cosine_similarity(a(x), x, dim=-1).unsqueeze(-1) * x, lin())), "seq",
                          "F.cosine_similarity"),
    "prod": (lambda: Seq(Lam(lambda x, a: torch.sigmoid(a(x)).prod(dim=-1, keepdim=True) * x, lin())), "seq", "prod"),
    "max_dim": (lambda: Seq(Lam(lambda x, a: a(x).max(dim=1, keepdim=True)[0] * x, lin())), "seq", "max along a dimension"),
    "topk": (lambda: Seq(Lam(lambda x, a: torch.topk(a(x), 16, dim=-1)[0].repeat(1, 1, 4), lin())), "seq", "topk, repeat"),
    "sort": (lambda: Seq(Lam(lambda x, a: a(x).sort(dim=-1)[0], lin())), "seq", "sort"),
    "gather": (lambda: Seq(Lam(lambda x, a: torch.gather(a(x), 2, x.argsort(-1)), lin())), "seq", "gather by a computed index"),
    "scatter": (lambda: Seq(Lam(lambda x, a: torch.zeros_like(x).scatter(2, x.argsort(-1), a(x)), lin())), "seq", "scatter"),
    "scatter_add": (lambda: Seq(Lam(lambda x, a: x.scatter_add(2, x.argsort(-1), a(x)), lin())), "seq", "scatter_add"),
    "setitem": (lambda: Seq(Lam(setitem, lin())), "seq", "index assignment into a clone (ScatterND)"),
    "index_fill": (lambda: Seq(Lam(lambda x, a: a(x).index_fill(2, torch.tensor([1, 3]), 0.0) * x, lin())), "seq", "index_fill"),
    "index_select": (lambda: Seq(Lam(lambda x, a: torch.index_select(a(x), 1, torch.arange(31, -1, -1)), lin())), "seq", "index_select"),
    "advanced_index": (lambda: Seq(Lam(lambda x, a: a(x)[:, torch.arange(31, -1, -1)], lin())), "seq", "advanced indexing"),
    "tril": (lambda: Seq(Lam(lambda x, a: torch.tril(a(x) @ x.transpose(1, 2), -1) @ x, lin())), "seq", "tril of a product"),
    "causal_attention": (lambda: Seq(CausalAttention()), "seq", "attention with a triu mask and chunked q, k, v"),
    "chunk_swiglu": (lambda: Seq(Lam(lambda x, a: swiglu(a(x)).mean(-1, keepdim=True) * x, lin(2048))), "seq", "chunk, SiLU gate (SwiGLU)"),
    "batched_matmul": (lambda: Seq(Lam(lambda x, a, b: (a(x).unsqueeze(1) @ b(x).unsqueeze(1).transpose(-1, -2)).squeeze(1) @ x,
                                       lin(), lin())), "seq", "4-D matmul"),
    "sum_lastdim": (lambda: Seq(Lam(lambda x, a: a(x).sum(-1, keepdim=True) * x, lin())), "seq", "sum over features, broadcast mul"),
    "sum_tokens_ln": (lambda: Seq(Lam(lambda x, a, n: n(a(x)).sum(1, keepdim=True) * x, lin(), nn.LayerNorm(64))), "seq",
                      "sum over tokens of a LayerNorm"),
    "stack": (lambda: Seq(Lam(lambda x, a: torch.stack([a(x), x, x * 2], 1).sum(1), lin())), "seq", "stack, sum"),
    "roll_flip": (lambda: Img(Lam(lambda x, a: torch.roll(a(x), 3, 2).flip(3) * x, conv())), "img", "roll, flip"),
    "pad_reflect": (lambda: Img(Lam(lambda x, a: a(F.pad(x, (1, 1, 1, 1), mode="reflect")), nn.Conv2d(16, 16, 3))), "img",
                    "reflection padding"),
    "pad_replicate": (lambda: Img(Lam(lambda x, a: a(F.pad(x, (1, 1, 1, 1), mode="replicate")), nn.Conv2d(16, 16, 3))), "img",
                      "replication padding"),
    "bce_with_logits": (lambda: Seq(Lam(lambda x, a: F.binary_cross_entropy_with_logits(a(x), torch.sigmoid(x.detach()), reduction="none"),
                                        lin())), "seq", "binary_cross_entropy_with_logits inside the network"),
    "mse": (lambda: Seq(Lam(lambda x, a: F.mse_loss(a(x), x.detach(), reduction="none"), lin())), "seq", "mse_loss inside the network"),
}


def inputs(kind, batch):
    torch.manual_seed(1)
    if kind == "img":
        return torch.randn(batch, 3, 32, 32), torch.randint(0, 5, (batch,))
    return torch.randint(0, 100, (batch, 32)), torch.randint(0, 5, (batch,))


def first_line(e):
    """The line of an error worth a table cell: sim's last stderr line, or
    the first line of an exception."""
    if isinstance(e, subprocess.CalledProcessError):
        s = (e.stderr or "").strip().splitlines()
        return (s[-1] if s else "exit %d" % e.returncode).removeprefix("sim: ")[:120]
    s = str(e).strip().splitlines()
    return (s[0] if s else type(e).__name__)[:120]


def run_case(name, tools, tmp, batch):
    """(measured bytes, ONNX route error or reason, exporter route error or reason)."""
    mk, kind, _ = CASES[name]
    x, y = inputs(kind, batch)
    path = os.path.join(tmp, name + ".onnx")
    torch.manual_seed(0)
    model = mk().train()
    onnx_fail = None
    try:
        torch.onnx.export(model, (x,), path, export_params=False, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    except Exception as e:  # noqa: BLE001 - torch's exporter refuses some ops
        onnx_fail = "torch.onnx: " + first_line(e)
    torch.manual_seed(0)
    resident, measured = fidelity.measure(mk(), x, y, "sgd")
    if onnx_fail is None:
        try:
            onnx = fidelity.rel(tools.report(["--onnx", path, "--batch", str(batch)]) - resident, measured)
        except subprocess.CalledProcessError as e:
            onnx = "sim: " + first_line(e)
    else:
        onnx = onnx_fail
    torch.manual_seed(0)
    jpath = os.path.join(tmp, name + ".json")
    try:
        fidelity.trace(mk(), x, y, "sgd", jpath, name)
        exporter = fidelity.rel(tools.report(["--graph", jpath]) - resident, measured)
    except Exception as e:  # noqa: BLE001 - the row says why
        exporter = "exporter: " + first_line(e)
    return measured, onnx, exporter


def cell(v):
    return "%+.1f%%" % (100 * v) if isinstance(v, float) else "failed (%s)" % v.replace("|", "/")


def write_doc(path, rows, cmdline):
    notes = ""
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
        i = old.find(NOTES_MARKER)
        if i >= 0:
            notes = old[i:]
    lines = [
        "# Layer-family fidelity",
        "",
        "Generated by `/usr/bin/python3 tools/layer_fidelity.py %s` (torch %s, CPU, 2 threads, batch %d). Do not edit the "
        "table by hand; the prose after the notes marker is kept when it is regenerated." % (cmdline, torch.__version__, BATCH),
        "",
        "Each row is a small network around one layer family (tools/layer_fidelity.py says how they are built): "
        "PyTorch's measured step peak, and remat's prediction by the ONNX route and by the exporter route, as the "
        "error against the measurement.",
        "",
        "| case | layers | measured KiB | ONNX import | exporter |",
        "|---|---|---:|---|---|",
    ]
    for name, measured, onnx, exporter in rows:
        lines.append("| %s | %s | %.1f | %s | %s |" % (name, CASES[name][2], measured / 1024, cell(onnx), cell(exporter)))
    exact = sum(1 for _, _, o, e in rows if isinstance(o, float) and abs(o) < 0.001 and isinstance(e, float) and abs(e) < 0.001)
    lines += ["", "Within 0.1%% on both routes: %d of %d cases." % (exact, len(rows)), ""]
    text = "\n".join(lines) + "\n" + (notes if notes else NOTES_MARKER + "\n")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the Markdown file to write")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated case names (default: all)")
    args = ap.parse_args(argv)
    names = [c for c in args.cases.split(",") if c]
    for c in names:
        if c not in CASES:
            ap.error("case %r: expected one of %s" % (c, ", ".join(CASES)))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    tmp = tempfile.mkdtemp(prefix="remat-layers-")
    try:
        tools = fidelity.Tools(tmp)
        rows = []
        for name in names:
            measured, onnx, exporter = run_case(name, tools, tmp, BATCH)
            rows.append((name, measured, onnx, exporter))
            print("%-22s measured %9d  onnx %s  exporter %s" % (name, measured, cell(onnx), cell(exporter)), file=sys.stderr)
        write_doc(args.out, rows, " ".join(sys.argv[1:]) if argv is None else " ".join(argv))
    finally:
        torch.set_num_threads(threads)  # as the caller had it (a test process)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
