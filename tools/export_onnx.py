#!/usr/bin/python3
"""Export the ONNX models remat's importer is tested on.

Writes torchvision's resnet18, resnet50, mobilenet_v2, densenet121 and vgg16
and a small transformer encoder classifier to OUT/<name>.onnx (and, on
request, the other fidelity families: googlenet (Inception), squeezenet1_1,
vgg11s (VGG-style with global pooling, exportable at any image size), a small
vision transformer "vit", a 2-layer LSTM classifier "lstm", the UNet-style
"unet_gn", and the language models "gpt" (nanoGPT-style) and "llama"
(LLaMA-style)) with
export_params=False: the weights are not stored, they stay graph inputs with
their shapes, so each file is a few hundred kilobytes however large the
model. The batch axis is dynamic (named "batch"); remat's importer fixes it
with its Batch option.

Models are exported in training mode (torch.onnx.TrainingMode.TRAINING): batch
norms stay BatchNormalization nodes (eval mode would fold them into the
convolutions and change the parameter count) and dropouts stay Dropout nodes.

Usage (from the repository root):

    /usr/bin/python3 tools/export_onnx.py                  # all models, 224x224
    /usr/bin/python3 tools/export_onnx.py --out DIR --image 224 resnet18 transformer
    /usr/bin/python3 tools/export_onnx.py --out DIR --image 32 --opset 0 vit lstm googlenet

Needs torch and torchvision (tested with torch 1.13, torchvision 0.14).
"""

import argparse
import os
import sys

import torch
import torch.nn as nn

OPSET = 17  # LayerNormalization needs 17 (the highest torch 1.13 exports); BatchNormalization training_mode needs >= 14

VISION = ["resnet18", "resnet50", "mobilenet_v2", "densenet121", "vgg16"]
DEFAULT = VISION + ["transformer"]
EXTRA = ["googlenet", "squeezenet1_1", "vgg11s", "vit", "lstm", "unet_gn", "gpt", "llama"]
ALL = DEFAULT + EXTRA


# Clips of the video models: frames (the image size is the spatial size).
FRAMES = 4

# What else build() takes besides ALL, for error messages and help.
OTHER_MODELS = "a torchvision.models constructor, segmentation.NAME or video.NAME"


def _constructor(name):
    """The torchvision constructor of a model name: NAME for
    torchvision.models.NAME (classification), segmentation.NAME and
    video.NAME for those packages; None if there is none."""
    try:
        import torchvision
    except ImportError:
        return None
    pkg, _, base = name.rpartition(".")
    mod = {"": torchvision.models, "segmentation": getattr(torchvision.models, "segmentation", None),
           "video": getattr(torchvision.models, "video", None)}.get(pkg)
    if mod is None or base.startswith("_") or not base.islower():
        return None
    ctor = getattr(mod, base, None)
    return ctor if callable(ctor) else None


def known(name):
    """Whether build() can make name: one of ALL, a torchvision
    classification model constructor (torchvision.models.NAME), or
    segmentation.NAME or video.NAME (torchvision.models.segmentation,
    torchvision.models.video)."""
    return name in ALL or _constructor(name) is not None


class SegmentationLogits(nn.Module):
    """A torchvision segmentation model whose per-pixel logits are averaged
    over the image, so that the harnesses' F.cross_entropy(model(x),
    labels) trains it (the memory of its forward and backward is the
    model's)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"].mean((2, 3))


class TinyTransformer(nn.Module):
    """Token classifier: embedding, learned positions, a 2-layer
    nn.TransformerEncoder (d_model 128, 4 heads, feed-forward 512), mean
    pooling over the sequence and a linear head."""

    def __init__(self, vocab=1000, seq=64, d_model=128, nhead=4, ff=512, layers=2, classes=10):
        super().__init__()
        self.seq = seq
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, seq, d_model))
        layer = nn.TransformerEncoderLayer(d_model, nhead, ff, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes)

    def forward(self, ids):
        x = self.embed(ids) + self.pos
        x = self.encoder(x)
        x = self.norm(x)
        return self.head(x.mean(dim=1))


class TinyViT(nn.Module):
    """Vision transformer: 8x8 patches embedded by a strided convolution, a
    class token, learned positions, a 2-layer nn.TransformerEncoder (d_model
    64, 4 heads, feed-forward 128, GELU, dropout 0.1), LayerNorm and a linear
    head on the class token."""

    def __init__(self, image=32, patch=8, d_model=64, nhead=4, ff=128, layers=2, classes=10):
        super().__init__()
        self.embed = nn.Conv2d(3, d_model, patch, stride=patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos = nn.Parameter(torch.zeros(1, n + 1, d_model))
        layer = nn.TransformerEncoderLayer(d_model, nhead, ff, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.norm(self.encoder(x))
        return self.head(x[:, 0])


class TinyUNet(nn.Module):
    """UNet-style network with the layers of diffusion, GAN and
    super-resolution models: GroupNorm + SiLU residual blocks, a strided
    downsampling convolution, an InstanceNorm + PReLU block, PixelShuffle
    upsampling, a skip concatenation, a 1x1 output convolution, global
    average pooling and a linear head."""

    def __init__(self, c=32, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.block1 = nn.Sequential(nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, c, 3, padding=1), nn.GroupNorm(8, c), nn.SiLU())
        self.down = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.mid = nn.Sequential(nn.InstanceNorm2d(2 * c, affine=True), nn.PReLU(2 * c), nn.Conv2d(2 * c, 4 * c, 3, padding=1))
        self.up = nn.PixelShuffle(2)
        self.block2 = nn.Sequential(nn.Conv2d(2 * c, c, 3, padding=1), nn.GroupNorm(8, c), nn.SiLU())
        self.out = nn.Conv2d(c, c, 1)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        h = self.stem(x)
        h = h + self.block1(h)
        u = self.up(self.mid(self.down(h)))
        y = self.out(self.block2(torch.cat([u, h], dim=1)))
        return self.head(y.mean((2, 3)))


class TinyLSTM(nn.Module):
    """Token classifier: embedding 64, a 2-layer nn.LSTM (hidden 128,
    batch_first) over 64 tokens, a linear head on the last step."""

    def __init__(self, vocab=1000, seq=64, embed=64, hidden=128, layers=2, classes=10):
        super().__init__()
        self.seq = seq
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, ids):
        out, _ = self.lstm(self.embed(ids))
        return self.head(out[:, -1])


class GPTAttention(nn.Module):
    """nanoGPT's CausalSelfAttention: one projection split into q, k and v,
    heads by view and transpose, a causal mask from a registered tril
    buffer, softmax, dropout, and the output projection."""

    def __init__(self, d_model, nhead, seq, dropout):
        super().__init__()
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.nhead = nhead
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        h = c // self.nhead
        q = q.view(b, t, self.nhead, h).transpose(1, 2)
        k = k.view(b, t, self.nhead, h).transpose(1, 2)
        v = v.view(b, t, self.nhead, h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / h**0.5)
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_dropout(torch.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class GPTBlock(nn.Module):
    """Pre-LayerNorm decoder block: attention and a GELU MLP (4x wide),
    each added to the residual stream."""

    def __init__(self, d_model, nhead, seq, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = GPTAttention(d_model, nhead, seq, dropout)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """Language model in nanoGPT's layout: token and position embeddings,
    dropout, 2 pre-LayerNorm decoder blocks (d_model 128, 4 heads, causal
    mask), a final LayerNorm and a head tied to the token embedding, over
    64 tokens of a 512-word vocabulary. It returns the logits of every token
    flattened to [batch * seq, vocab], so the harnesses' F.cross_entropy
    against one label per token is nanoGPT's loss (labels_per_sample)."""

    def __init__(self, vocab=512, seq=64, d_model=128, nhead=4, layers=2, dropout=0.1):
        super().__init__()
        self.seq, self.vocab, self.labels_per_sample = seq, vocab, seq
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(seq, d_model)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(GPTBlock(d_model, nhead, seq, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, ids):
        pos = torch.arange(0, ids.size(1), dtype=torch.long, device=ids.device)
        x = self.drop(self.wte(ids) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x)).view(-1, self.vocab)


class RMSNorm(nn.Module):
    """LLaMA's RMSNorm: x * rsqrt(mean(x^2) + eps) * weight."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaAttention(nn.Module):
    """Attention with rotary position embeddings (the half rotation of
    LLaMA's Hugging Face port: q * cos + rotate_half(q) * sin), whose cos and
    sin tables and causal mask are registered buffers, and no biases."""

    def __init__(self, d_model, nhead, seq):
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))
        self.nhead = nhead
        h = d_model // nhead
        freqs = torch.outer(torch.arange(seq).float(), 1.0 / (10000 ** (torch.arange(0, h, 2).float() / h)))
        emb = torch.cat([freqs, freqs], -1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1))

    @staticmethod
    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, x):
        b, t, c = x.shape
        h = c // self.nhead
        q, k, v = (w(x).view(b, t, self.nhead, h).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        q = q * self.cos + self.rotate_half(q) * self.sin
        k = k * self.cos + self.rotate_half(k) * self.sin
        att = torch.softmax(q @ k.transpose(2, 3) / h**0.5 + self.mask, dim=-1)
        return self.wo((att @ v).transpose(1, 2).contiguous().view(b, t, c))


class LlamaBlock(nn.Module):
    """Pre-RMSNorm decoder block: attention and a SwiGLU MLP
    (w2(silu(w1(x)) * w3(x)))."""

    def __init__(self, d_model, nhead, seq, hidden):
        super().__init__()
        self.attention_norm = RMSNorm(d_model)
        self.attention = LlamaAttention(d_model, nhead, seq)
        self.ffn_norm = RMSNorm(d_model)
        self.w1 = nn.Linear(d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d_model, bias=False)
        self.w3 = nn.Linear(d_model, hidden, bias=False)

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        h = self.ffn_norm(x)
        return x + self.w2(torch.nn.functional.silu(self.w1(h)) * self.w3(h))


class TinyLlama(nn.Module):
    """Language model in LLaMA's layout: token embedding, 2 decoder blocks
    (d_model 128, 4 heads, SwiGLU hidden 344), a final RMSNorm and an untied
    head, over 64 tokens of a 512-word vocabulary; logits of every token
    flattened to [batch * seq, vocab], as TinyGPT. Its rotary tables and mask
    are registered buffers, which an ONNX file does not tell from
    parameters (sim --frozen, docs/onnx.md)."""

    def __init__(self, vocab=512, seq=64, d_model=128, nhead=4, layers=2, hidden=344):
        super().__init__()
        self.seq, self.vocab, self.labels_per_sample = seq, vocab, seq
        self.tok_embeddings = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList(LlamaBlock(d_model, nhead, seq, hidden) for _ in range(layers))
        self.norm = RMSNorm(d_model)
        self.output = nn.Linear(d_model, vocab, bias=False)

    def forward(self, ids):
        x = self.tok_embeddings(ids)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x)).view(-1, self.vocab)


def vgg11s():
    """VGG-style: torchvision's vgg11 convolutions, global average pooling
    and one linear layer (vgg16's 7x7 adaptive pooling exports only at
    multiples of 224 pixels)."""
    import torchvision

    m = torchvision.models.vgg11()
    m.avgpool = nn.AdaptiveAvgPool2d((1, 1))
    m.classifier = nn.Linear(512, 1000)
    return m


def build(name, image=224, batch=2):
    """Return (model, example input, number of classes) for a model name."""
    if name in ("transformer", "lstm"):
        m = TinyTransformer() if name == "transformer" else TinyLSTM()
        return m, torch.randint(0, 1000, (batch, m.seq), dtype=torch.int64), 10
    if name in ("gpt", "llama"):
        m = TinyGPT() if name == "gpt" else TinyLlama()
        return m, torch.randint(0, m.vocab, (batch, m.seq), dtype=torch.int64), m.vocab
    x = torch.randn(batch, 3, image, image)
    if name == "vit":
        return TinyViT(image=image), x, 10
    if name == "vgg11s":
        return vgg11s(), x, 1000
    if name == "unet_gn":
        return TinyUNet(), x, 10
    ctor = _constructor(name)
    if ctor is None:
        raise ValueError("model %r: expected one of %s, %s" % (name, ", ".join(ALL), OTHER_MODELS))
    if name.startswith("segmentation."):
        return SegmentationLogits(ctor(weights=None, weights_backbone=None, num_classes=21, aux_loss=False)), x, 21
    if name.startswith("video."):
        return ctor(weights=None, num_classes=400), torch.randn(batch, 3, FRAMES, image, image), 400
    kw = {}
    if name == "googlenet":
        kw = {"aux_logits": False, "init_weights": False}
    return ctor(**kw), x, 1000


def export(name, out_dir, image, opset=OPSET):
    """Export a model in training mode to OUT_DIR/NAME.onnx with a dynamic
    batch axis; opset None uses torch.onnx.export's default, as a user who
    does not pass opset_version gets."""
    model, example, _ = build(name, image)
    model.train()
    path = os.path.join(out_dir, name + ".onnx")
    kw = {} if opset is None else {"opset_version": opset}
    torch.onnx.export(
        model,
        (example,),
        path,
        export_params=False,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        input_names=["input"],
        output_names=["output"],
        # a language model's output has a row per token
        dynamic_axes={"input": {0: "batch"}, "output": {0: "tokens" if hasattr(model, "labels_per_sample") else "batch"}},
        **kw,
    )
    params = sum(p.numel() for p in model.parameters())
    print(f"{path}: {os.path.getsize(path)} bytes, {params} parameters", file=sys.stderr)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="testdata/onnx", help="output directory (default testdata/onnx)")
    ap.add_argument("--image", type=int, default=224, help="image height and width of the vision models (default 224)")
    ap.add_argument("--opset", type=int, default=OPSET, help="ONNX opset (default %d; 0: torch.onnx.export's default)" % OPSET)
    ap.add_argument("models", nargs="*", default=DEFAULT, help="models to export (default: %s; also %s)" % (", ".join(DEFAULT), ", ".join(EXTRA)))
    args = ap.parse_args(argv)
    for m in args.models:
        if not known(m):
            ap.error(f"model {m!r}: expected one of {', '.join(ALL)}, {OTHER_MODELS}")
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    for m in args.models:
        export(m, args.out, args.image, args.opset or None)


if __name__ == "__main__":
    main()
