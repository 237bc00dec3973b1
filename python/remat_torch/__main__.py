"""python3 -m remat_torch: trace, plan, apply and measure.

  python3 -m remat_torch run --model resnet18 --batch 8 --strategies none,mirror,sublinear,chen-sqrt --budget 0.5
  python3 -m remat_torch table --out docs/fidelity-plans.md

run traces one training step of the model (torchvision name, "transformer",
"gpt" or "llama" from tools/export_onnx.py, or module:callable), asks sim
for each strategy's plan (`sim plan`) and prediction (`sim report --graph`,
both with --device cpu --allocator ideal, and --budget when given),
applies the plan with remat_torch.apply, runs the
step and prints per strategy the predicted and measured peak (resident
bytes plus the profiler's largest running sum of allocation events), the
error, the predicted and measured step time and whether gradients and
batch-norm statistics matched the plain step. Progress goes to stderr.

table writes the per-strategy fidelity table (docs/fidelity-plans.md).

sim is --sim PATH, else $REMAT_SIM, else `sim` on PATH, else built once with
`go build` into a temporary directory.
"""

import argparse
import importlib
import os
import sys

import torch

from . import measure


# --model values built from tools/export_onnx.py's classes
TOOL_MODELS = {"transformer": "TinyTransformer", "gpt": "TinyGPT", "llama": "TinyLlama"}


def build_model(spec):
    """An nn.Module for a --model value: a torchvision model name,
    "transformer", "gpt" or "llama" (tools/export_onnx.py's TinyTransformer,
    TinyGPT, TinyLlama) or module:callable."""
    if ":" in spec:
        mod, fn = spec.split(":", 1)
        return getattr(importlib.import_module(mod), fn)()
    if spec in TOOL_MODELS:
        tools = os.path.join(measure.REPO, "tools")
        if not os.path.exists(os.path.join(tools, "export_onnx.py")):
            raise SystemExit("--model %s needs the repository's tools/export_onnx.py (not found at %s)" % (spec, tools))
        sys.path.insert(0, tools)
        import export_onnx

        return getattr(export_onnx, TOOL_MODELS[spec])()
    import torchvision

    if not hasattr(torchvision.models, spec):
        raise SystemExit("--model %r: not a torchvision model, %s or module:callable" % (spec, ", ".join(repr(m) for m in TOOL_MODELS)))
    return getattr(torchvision.models, spec)()


def example(model, spec, batch, image, seq=None):
    """(inputs, labels) for a model: token ids for a transformer (a model
    with an integer .seq; below its .vocab when it has one), images
    otherwise; labels index the output's dim 1, one per row of the output
    (a language model's output has a row per token)."""
    if spec == "transformer" or isinstance(getattr(model, "seq", None), int):
        x = torch.randint(0, getattr(model, "vocab", 1000), (batch, seq or model.seq), dtype=torch.int64)
    else:
        x = torch.randn(batch, 3, image, image)
    with torch.no_grad():
        was = model.training
        model.eval()
        out = model(x)
        model.train(was)
    y = torch.randint(0, out.shape[1], (out.shape[0],), dtype=torch.int64)
    return x, y


def mib(b):
    return "%.1f" % (b / 2**20)


def pct(p, m):
    return "%+.1f%%" % (100.0 * (p - m) / m) if m else "-"


def cmd_run(args):
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    model = build_model(args.model)
    x, y = example(model, args.model, args.batch, args.image)
    sim = measure.Sim(args.sim)
    try:
        rows = measure.measure_strategies(model, (x,), y, args.strategies.split(","), sim, budget=args.budget,
                                          name=args.model, runs=args.runs)
    finally:
        sim.close()
    print("%s, batch %d: predicted (sim report --graph STEP.json --device cpu --allocator ideal) vs measured" % (args.model, args.batch))
    print("%-16s %12s %12s %8s %12s %12s %6s %s" % ("strategy", "pred MiB", "meas MiB", "error", "pred ms", "meas ms", "grads", "note"))
    for r in rows:
        if "error" in r:
            print("%-16s %12s %12s %8s %12s %12s %6s %s" % (r["strategy"], "-", "-", "-", "-", "-", "-", r["error"]))
            continue
        g = "ok" if r["grads"] and r["buffers"] else ("grads!" if not r["grads"] else "bn!")
        print("%-16s %12s %12s %8s %12.2f %12.2f %6s %s" % (
            r["strategy"], mib(r["pred_peak"]), mib(r["meas_peak"]), pct(r["pred_peak"], r["meas_peak"]),
            r["pred_time_ns"] / 1e6, r["meas_time_ns"] / 1e6, g, r["status"] if r["status"] != "ok" else ""))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m remat_torch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="plan, apply and measure strategies on one model")
    r.add_argument("--model", required=True, help="torchvision name, 'transformer', 'gpt', 'llama' (tools/export_onnx.py's) or module:callable")
    r.add_argument("--batch", type=int, default=8)
    r.add_argument("--image", type=int, default=224, help="image size of vision models (default 224)")
    r.add_argument("--strategies", default="none,mirror,sublinear,chen-sqrt")
    r.add_argument("--budget", help="memory budget for sim (a ratio of the baseline such as 0.5, or a size)")
    r.add_argument("--runs", type=int, default=3, help="timed steps per strategy (median)")
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--sim", help="the sim binary (default $REMAT_SIM, sim on PATH, or go build)")
    t = sub.add_parser("table", help="write the per-strategy fidelity table (docs/fidelity-plans.md)")
    t.add_argument("--out", default="docs/fidelity-plans.md")
    t.add_argument("--models", default=None, help="comma-separated (default the table's models)")
    t.add_argument("--strategies", default=",".join(measure.STATIC))
    t.add_argument("--sim", help="the sim binary (default $REMAT_SIM, sim on PATH, or go build)")
    from .dtr import add_parser as add_dtr  # runtime DTR vs sim's DTR prediction

    add_dtr(sub)
    args = ap.parse_args(argv)
    if args.cmd == "dtr":
        return args.func(args)
    if args.cmd == "run":
        return cmd_run(args)
    from . import table

    return table.main(args)


if __name__ == "__main__":
    sys.exit(main())
