#!/usr/bin/python3
"""Export the ONNX models remat's importer is tested on.

Writes torchvision's resnet18, resnet50, mobilenet_v2, densenet121 and vgg16
and a small transformer encoder classifier to OUT/<name>.onnx (and, on
request, the other fidelity families: googlenet (Inception), squeezenet1_1,
vgg11s (VGG-style with global pooling, exportable at any image size), a small
vision transformer "vit" and a 2-layer LSTM classifier "lstm") with
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
EXTRA = ["googlenet", "squeezenet1_1", "vgg11s", "vit", "lstm", "unet_gn"]
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
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
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
