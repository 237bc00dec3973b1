#!/usr/bin/python3
"""Fidelity harness: remat's predicted peak memory vs PyTorch's own, through
the path a user takes.

For each model it exports the ONNX file a new user would
(torch.onnx.export(..., training=TrainingMode.TRAINING), torch's default
opset, dynamic batch axis; tools/export_onnx.py) and, for each batch size and
for a training step with SGD and without an optimizer, runs:

  * measured: one step on CPU (gradients set to None, forward,
    F.cross_entropy against random labels, backward, and SGD.step() (lr 0.01,
    no momentum) unless the optimizer is none) under torch.profiler with
    profile_memory=True, after one warm-up step. The step peak is the largest
    running sum of the profiler's [memory] allocation and free events in time
    order: what PyTorch's CPU allocator handed out at its fullest on top of
    what was resident before the step (parameters, buffers, input, labels).
  * ONNX route: exactly the user's command, with no other flag,
        sim report --onnx M.onnx --batch B --device cpu --allocator ideal --strategies none --format json
    and again with --optimizer none. Its peak minus the resident bytes
    (parameters, buffers, input and labels, as PyTorch holds them) is the
    predicted step peak.
  * exporter route: tools/export_torch.py's trace of the same step, through
        sim report --graph step.json --device cpu --allocator ideal --strategies none --format json

Checkpoint rows run torch.utils.checkpoint (use_reentrant=False) around one
or several regions of a model - checkpoint_sequential over vgg11s.features,
and each of resnet18's four stages - against the plan tools/fidelity builds
on the ONNX import through the same options path (-checkpoint REGIONS).

Images are 128x128 by default, sequences 64 tokens (transformer, gpt, lstm);
batch sizes 2 and 4. Runtime on 2 cores: about ten minutes.

    /usr/bin/python3 tools/fidelity.py --out docs/fidelity.md
    /usr/bin/python3 tools/fidelity.py --models resnet18,vit --batches 2 --no-checkpoint --out /tmp/f.md

--models also takes any torchvision.models constructor (convnext_tiny,
mnasnet0_5, ...), and segmentation.NAME and video.NAME for
torchvision.models.segmentation (its per-pixel logits averaged over the
image, so that cross-entropy against one label per image trains it) and
torchvision.models.video (clips of 4 frames of the image size); a model
torch.onnx cannot export, or whose ONNX file sim cannot import, gets
"failed" in the ONNX columns and is left out of the within-5% count.

--channels-last runs every model and input in channels-last memory format
(model.to(memory_format=torch.channels_last)). An ONNX graph does not
record memory formats, so the ONNX route and the checkpoint rows add the
flag that says so, --conv-memory-format channels_last; the exporter's trace
records them. sim is told the thread count and the instruction set oneDNN
uses here (remat_torch.measure.sim_env); run it with ONEDNN_MAX_CPU_ISA=AVX2
to check sim's AVX2 model on an AVX-512 machine.

With --export DIR it only writes, for the Go test of tools/fidelity, each
model's ONNX file DIR/NAME.onnx and the exporter's traces of the steps with
SGD and without an optimizer (DIR/NAME.sgd.json, DIR/NAME.none.json) at the
first batch size.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import export_onnx  # noqa: E402
import export_torch  # noqa: E402  (puts python/ on the path)
from remat_torch.measure import onednn_isa, sim_env  # noqa: E402

# One model per family at least: CNNs (incl. Inception- and SqueezeNet-style
# and a VGG-style), a vision transformer, a transformer encoder, a GPT-style
# language model, an LSTM.
MODELS = ["resnet18", "resnet50", "mobilenet_v2", "densenet121", "vgg11s", "googlenet", "squeezenet1_1",
          "vit", "transformer", "gpt", "lstm"]
FAMILY = {"resnet18": "CNN", "resnet50": "CNN", "mobilenet_v2": "CNN", "densenet121": "CNN",
          "vgg11s": "CNN (VGG-style)", "googlenet": "CNN (Inception)", "squeezenet1_1": "CNN (SqueezeNet)",
          "vit": "vision transformer", "transformer": "transformer encoder", "lstm": "LSTM",
          "gpt": "GPT (causal decoder, loss per token)", "llama": "LLaMA-style decoder (RMSNorm, rotary, SwiGLU)",
          "unet_gn": "CNN (UNet-style: GroupNorm, SiLU, InstanceNorm, PReLU, PixelShuffle)"}
BATCHES = [2, 4]
IMAGE = 128
OPTIMIZERS = ["sgd", "none"]
NOTES_MARKER = "<!-- notes: kept by tools/fidelity.py -->"
# (model, regions for tools/fidelity, description, how to checkpoint the
# PyTorch model)
CHECKPOINTS = [
    ("vgg11s", ["-checkpoint-sequential", "features:21:4"], "checkpoint_sequential(features, 4)", ("sequential", "features", 4)),
    ("resnet18", ["-checkpoint", "layer1;layer2;layer3;layer4"], "checkpoint(layer1) ... checkpoint(layer4)",
     ("modules", ["layer1", "layer2", "layer3", "layer4"])),
]


def make(name, batch, image=IMAGE, channels_last=False):
    """The model (seeded), its input and labels; with channels_last, the
    model and a 4-D input moved to channels-last memory format
    (model.to(memory_format=torch.channels_last))."""
    torch.manual_seed(0)
    model, x, classes = export_onnx.build(name, image, batch)
    # a language model (gpt) has a label per token
    y = torch.randint(0, classes, (batch * getattr(model, "labels_per_sample", 1),), dtype=torch.int64)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        if x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
    return model, x, y


def checkpoint_sequential(functions, segments, x):
    """torch.utils.checkpoint.checkpoint_sequential's own segmentation loop,
    calling checkpoint with use_reentrant=False: torch 1.13's
    checkpoint_sequential only offers the reentrant variant, which computes no
    parameter gradients for the first segment unless the input requires
    grad."""
    from torch.utils.checkpoint import checkpoint

    def run(start, end):
        def forward(inp):
            for j in range(start, end + 1):
                inp = functions[j](inp)
            return inp

        return forward

    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        x = checkpoint(run(start, end), x, use_reentrant=False)
    return run(end + 1, len(functions) - 1)(x)


class Sequential(nn.Module):
    """A Sequential run under checkpoint_sequential with k segments."""

    def __init__(self, seq, k):
        super().__init__()
        self.seq, self.k = seq, k

    def forward(self, x):
        return checkpoint_sequential(self.seq, self.k, x)


class Region(nn.Module):
    """A module run under torch.utils.checkpoint.checkpoint (non-reentrant)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.m, x, use_reentrant=False)


def checkpointed(model, how):
    """model with its regions checkpointed as CHECKPOINTS says."""
    if how[0] == "sequential":
        setattr(model, how[1], Sequential(getattr(model, how[1]), how[2]))
    else:
        for attr in how[1]:
            setattr(model, attr, Region(getattr(model, attr)))
    return model


def resident_bytes(model, *tensors):
    n = sum(p.numel() * p.element_size() for p in model.parameters())
    n += sum(b.numel() * b.element_size() for b in model.buffers())
    return n + sum(t.numel() * t.element_size() for t in tensors)


class NoOptimizer:
    """The step without an optimizer: gradients are set to None before it
    and stay in .grad after it."""

    def __init__(self, model):
        self.params = list(model.parameters())
        self.state = {}

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def step(self):
        pass


def optimizer(model, name):
    if name == "none":
        return NoOptimizer(model)
    return torch.optim.SGD(model.parameters(), lr=0.01)


def step_events(model, x, y, opt_name="sgd"):
    """Runs the measured step; returns the profiler's [memory] events in time
    order and the profiler's events."""
    model.train()
    opt = optimizer(model, opt_name)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    step()
    opt.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = list(prof.profiler.kineto_results.events())
    mem = [e for e in events if e.name() == "[memory]"]
    mem.sort(key=lambda e: e.start_us())  # stable: ties keep record order
    return mem, events


def measure(model, x, y, opt_name="sgd"):
    """(resident bytes, step peak bytes) of one PyTorch step (see the doc)."""
    mem, _ = step_events(model, x, y, opt_name)
    cur = peak = 0
    for e in mem:
        cur += e.nbytes()
        peak = max(peak, cur)
    return resident_bytes(model, x, y), peak


class Tools:
    """The sim and tools/fidelity binaries, built once from this tree."""

    def __init__(self, tmp):
        self.sim = os.path.join(tmp, "sim")
        self.fidelity = os.path.join(tmp, "fidelity")
        for out, pkg in ((self.sim, "./cmd/sim"), (self.fidelity, "./tools/fidelity")):
            subprocess.run(["go", "build", "-o", out, pkg], cwd=ROOT, check=True)

    def report(self, args):
        """sim report ARGS --device cpu --allocator ideal --strategies none: the peak."""
        cmd = [self.sim, "report"] + args + ["--device", "cpu", "--allocator", "ideal", "--strategies", "none", "--format", "json"]
        out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True, env=sim_env())
        return json.loads(out.stdout)["rows"][0]["peak_allocated"]

    def plan(self, args):
        out = subprocess.run([self.fidelity] + args, cwd=ROOT, check=True, capture_output=True, text=True, env=sim_env())
        return json.loads(out.stdout)["peak_allocated"]


def trace(model, x, y, opt_name, path, name):
    g = export_torch.trace_step(model, x, y, optimizer=optimizer(model, opt_name), name=name)
    export_torch.write_graph(g, path)


def rel(p, m):
    return (p - m) / m


def mb(b):
    return "%.2f" % (b / 2**20)


def export_all(models, out, image, batch):
    """--export: ONNX files and exporter traces for the Go test."""
    os.makedirs(out, exist_ok=True)
    for name in models:
        export_onnx.export(name, out, image, None)
        for opt in OPTIMIZERS:
            model, x, y = make(name, batch, image)
            trace(model, x, y, opt, os.path.join(out, "%s.%s.json" % (name, opt)), name)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="docs/fidelity.md")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("--image", type=int, default=IMAGE, help="image size of the vision models (default %d)" % IMAGE)
    ap.add_argument("--no-checkpoint", action="store_true")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads for the measured steps, passed to sim as REMAT_CPU_THREADS (default 2)")
    ap.add_argument("--channels-last", action="store_true", help="models and inputs in channels-last memory format (see above)")
    ap.add_argument("--frozen", default="", help="weights the ONNX route's import freezes (sim --frozen PATTERNS; glob patterns separated by ','), "
                    "for every model of the run: registered buffers an ONNX file does not tell from parameters")
    ap.add_argument("--export", metavar="DIR", help="only write ONNX files and exporter traces to DIR (see above)")
    args = ap.parse_args(argv)
    if not 1 <= args.threads <= 1024:
        ap.error("--threads %d: expected 1..1024" % args.threads)
    torch.set_num_threads(args.threads)
    models = args.models.split(",")
    for m in models:
        if not export_onnx.known(m):
            ap.error("model %r: expected one of %s, %s" % (m, ", ".join(export_onnx.ALL), export_onnx.OTHER_MODELS))
    batches = [int(b) for b in args.batches.split(",")]
    if args.export:
        export_all(models, args.export, args.image, batches[0])
        return
    tmp = tempfile.mkdtemp()
    tools = Tools(tmp)
    rows, ck_rows = [], []
    cl = args.channels_last
    mf = ["--conv-memory-format", "channels_last"] if cl else []
    fz = ["--frozen", args.frozen] if args.frozen else []
    for name in models:
        try:
            export_onnx.export(name, tmp, args.image, None)
            onnx_path = os.path.join(tmp, name + ".onnx")
        except Exception as e:  # torch.onnx cannot export some models (bernoulli_ of stochastic depth)
            print("%s: torch.onnx.export failed: %s" % (name, str(e).splitlines()[0] if str(e) else type(e).__name__), file=sys.stderr)
            onnx_path = None
        for batch in batches:
            for opt in OPTIMIZERS:
                model, x, y = make(name, batch, args.image, cl)
                resident, measured = measure(model, x, y, opt)
                flags = ["--onnx", onnx_path, "--batch", str(batch)] + (["--optimizer", "none"] if opt == "none" else []) + mf + fz
                p_onnx = None
                if onnx_path is not None:
                    try:
                        p_onnx = tools.report(flags) - resident
                    except subprocess.CalledProcessError as e:  # the row says "failed"
                        print("%s b=%d %s: sim report --onnx failed: %s" % (name, batch, opt, (e.stderr or "").strip().splitlines()[-1:]), file=sys.stderr)
                model, x, y = make(name, batch, args.image, cl)
                jpath = os.path.join(tmp, "%s_%d_%s.json" % (name, batch, opt))
                try:
                    trace(model, x, y, opt, jpath, name)
                    p_exp = tools.report(["--graph", jpath]) - resident
                except Exception as e:  # the row still shows the ONNX route; the table says "failed"
                    print("%s b=%d %s: the exporter failed: %s" % (name, batch, opt, e), file=sys.stderr)
                    p_exp = None
                rows.append((name, batch, opt, measured, p_onnx, p_exp))
                print("%-13s b=%d %-4s measured %s MiB onnx %s exporter %s" % (
                    name, batch, opt, mb(measured),
                    "failed" if p_onnx is None else "%s (%+.1f%%)" % (mb(p_onnx), 100 * rel(p_onnx, measured)),
                    "failed" if p_exp is None else "%s (%+.1f%%)" % (mb(p_exp), 100 * rel(p_exp, measured))), file=sys.stderr)
    if not args.no_checkpoint:
        for name, spec, desc, how in CHECKPOINTS:
            if name not in models:
                export_onnx.export(name, tmp, args.image, None)
            onnx_path = os.path.join(tmp, name + ".onnx")
            for batch in batches:
                model, x, y = make(name, batch, args.image, cl)
                resident, measured = measure(checkpointed(model, how), x, y)
                p = tools.plan(["-onnx", onnx_path, "-batch", str(batch), "-device", "cpu"] + (["-conv-memory-format", "channels_last"] if cl else []) +
                               (["-frozen", args.frozen] if args.frozen else []) + spec) - resident
                ck_rows.append((name, desc, " ".join(spec), batch, measured, p))
                print("%-13s %s b=%d measured %s MiB plan %s (%+.1f%%)" % (
                    name, desc, batch, mb(measured), mb(p), 100 * rel(p, measured)), file=sys.stderr)
    write_doc(args.out, rows, ck_rows, args.image, shlex.join(sys.argv[1:] if argv is None else argv), cl, args.frozen)


def write_doc(path, rows, ck_rows, image, cmdline, channels_last=False, frozen=""):
    notes = NOTES_MARKER + "\n"
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
        if NOTES_MARKER in old:
            notes = old[old.index(NOTES_MARKER):]
    imported = [r for r in rows if r[4] is not None]
    # the instruction-set cap the run had, shown with the command that reproduces it
    isa_env = "".join("%s=%s " % (k, os.environ[k]) for k in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA") if os.environ.get(k))
    within5 = sum(1 for r in imported if abs(rel(r[4], r[3])) <= 0.05)
    within10 = sum(1 for r in imported if abs(rel(r[4], r[3])) <= 0.10)
    lines = [
        "# Fidelity: predicted vs measured peak memory" + (", channels-last models" if channels_last else ""),
        "",
        "Generated by `%s/usr/bin/python3 tools/fidelity.py %s` (torch %s, CPU, %d threads, oneDNN on %s, %dx%d images, "
        "64-token sequences). Do not edit the tables by hand; the prose "
        "after them (after the notes marker) is kept when the file is regenerated. "
        "The per-strategy table is [docs/fidelity-plans.md](fidelity-plans.md)." % (
            isa_env, cmdline.strip(), torch.__version__, torch.get_num_threads(), onednn_isa() or "an unknown instruction set", image, image),
        "",
        "Measured: the step peak of one PyTorch training step on CPU (torch.profiler, profile_memory=True: the "
        "largest running sum of allocation and free events; parameters, buffers, input and labels, resident "
        "before the step, are not part of it). Optimizer sgd: `SGD(lr=0.01).step()` ends the step; none: "
        "forward and backward only, the gradients stay in `.grad`.",
        "",
        "Predicted, ONNX route: the user's command on the model exported with "
        "`torch.onnx.export(..., training=TrainingMode.TRAINING)` (torch's default opset), with no other flag: "
        "`sim report --onnx M.onnx --batch B --device cpu --allocator ideal --strategies none` "
        "(and `--optimizer none`), minus the resident bytes. Exporter route: "
        "the same command with `--graph` in place of `--onnx`, on tools/export_torch.py's trace of the same step. "
        "MiB = 2^20 bytes; error = (predicted - measured) / measured.",
        "",
    ]
    if frozen:
        lines += [
            "Frozen weights: the ONNX route%s also passes `--frozen '%s'`, the weights (registered buffers) "
            "that take no gradient; an ONNX file does not tell them from parameters (docs/onnx.md)." % (
                " and the checkpoint plans" if ck_rows else "", frozen),
            "",
        ]
    if channels_last:
        lines += [
            "Channels-last: every model and input was moved to channels-last memory format "
            "(`model.to(memory_format=torch.channels_last)`). An ONNX graph records no memory format, so the "
            "ONNX route and the checkpoint plans add `--conv-memory-format channels_last`.",
            "",
        ]
    lines += [
        "ONNX route within 5%%: %d of %d rows; within 10%%: %d of %d%s." % (
            within5, len(imported), within10, len(imported),
            "" if len(imported) == len(rows) else " (%d rows without an ONNX file: torch.onnx.export failed)" % (len(rows) - len(imported))),
        "",
        "| model | family | batch | optimizer | measured MiB | ONNX import MiB | error | exporter MiB | error |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, batch, opt, m, po, pe in rows:
        imp = "failed | -" if po is None else "%s | %+.1f%%" % (mb(po), 100 * rel(po, m))
        exp = "failed | -" if pe is None else "%s | %+.1f%%" % (mb(pe), 100 * rel(pe, m))
        lines.append("| %s | %s | %d | %s | %s | %s | %s |" % (
            name, FAMILY.get(name, "-"), batch, opt, mb(m), imp, exp))
    if ck_rows:
        lines += [
            "",
            "## Checkpointed regions",
            "",
            "torch.utils.checkpoint.checkpoint (use_reentrant=False) around each region (checkpoint_sequential's "
            "segmentation loop for a Sequential, see tools/fidelity.py), optimizer sgd, measured as above, against "
            "the plan tools/fidelity builds on the ONNX import through the CLI's options path (`go run ./tools/fidelity "
            "-onnx M.onnx -batch B -device cpu REGIONS`: each region keeps only its inputs and output and is "
            "recomputed as a whole before the first backward op that differentiates one of its ops).",
            "",
            "| model | PyTorch | tools/fidelity | batch | measured MiB | plan MiB | error |",
            "|---|---|---|---:|---:|---:|---:|",
        ]
        for name, desc, spec, batch, m, p in ck_rows:
            lines.append("| %s | %s | `%s` | %d | %s | %s | %+.1f%% |" % (name, desc, spec, batch, mb(m), mb(p), 100 * rel(p, m)))
    lines += ["", notes.rstrip(), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
