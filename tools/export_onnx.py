#!/usr/bin/python3
"""Export the ONNX models remat's importer is tested on.

Writes torchvision's resnet18, resnet50, mobilenet_v2, densenet121 and vgg16
and a small transformer encoder classifier to OUT/<name>.onnx with
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

Needs torch and torchvision (tested with torch 1.13, torchvision 0.14).
"""

import argparse
import os
import sys

import torch
import torch.nn as nn

OPSET = 17  # LayerNormalization needs 17 (the highest torch 1.13 exports); BatchNormalization training_mode needs >= 14

VISION = ["resnet18", "resnet50", "mobilenet_v2", "densenet121", "vgg16"]
ALL = VISION + ["transformer"]


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


def build(name):
    """Return (model, example input) for a model name."""
    if name == "transformer":
        m = TinyTransformer()
        return m, torch.randint(0, 1000, (2, m.seq), dtype=torch.int64)
    import torchvision

    return getattr(torchvision.models, name)(), None


def export(name, out_dir, image):
    model, example = build(name)
    if example is None:
        example = torch.randn(2, 3, image, image)
    model.train()
    path = os.path.join(out_dir, name + ".onnx")
    torch.onnx.export(
        model,
        (example,),
        path,
        export_params=False,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        opset_version=OPSET,
        input_names=["input"],
        output_names=["output"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
    )
    params = sum(p.numel() for p in model.parameters())
    print(f"{path}: {os.path.getsize(path)} bytes, {params} parameters", file=sys.stderr)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="testdata/onnx", help="output directory (default testdata/onnx)")
    ap.add_argument("--image", type=int, default=224, help="image height and width of the vision models (default 224)")
    ap.add_argument("models", nargs="*", default=ALL, help="models to export (default: all of %s)" % ", ".join(ALL))
    args = ap.parse_args(argv)
    for m in args.models:
        if m not in ALL:
            ap.error(f"model {m!r}: expected one of {', '.join(ALL)}")
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    for m in args.models:
        export(m, args.out, args.image)


if __name__ == "__main__":
    main()
