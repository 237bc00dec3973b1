"""Measure plans: ask `sim` for a plan and its prediction, apply it, run the
step, and compare predicted with measured peak memory and step time.

The measured peak is the measure of tools/fidelity.py: the bytes resident
before the step (parameters, buffers, inputs, labels, optimizer state) plus
the largest running sum of torch.profiler's [memory] allocation and free
events of one step (profile_memory=True, CPU), after a warm-up step.
"""

import copy
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from .apply import apply
from .trace import trace, write_graph

STATIC = ["none", "mirror", "mirror-cost", "sublinear", "sublinear-ga", "chen-sqrt", "chen-greedy",
          "sublinear-budget", "optimal-chain"]
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))  # python/remat_torch -> the repository


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def onednn_isa(environ=None, cpuinfo="/proc/cpuinfo"):
    """The instruction set oneDNN runs with here, as sim's setting cpu.isa
    names it: "avx512" (avx512_core: AVX-512 F, BW, VL and DQ) or "avx2";
    None where it cannot tell (no /proc/cpuinfo: sim keeps its default).
    ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) caps it, as it caps oneDNN;
    sets older than AVX2, which sim does not model, count as avx2."""
    environ = os.environ if environ is None else environ
    cap = (environ.get("ONEDNN_MAX_CPU_ISA") or environ.get("DNNL_MAX_CPU_ISA") or "").strip().lower()
    if cap and cap not in ("all", "default") and not cap.startswith("avx512_core"):
        return "avx2"
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return "avx512" if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags else "avx2"
    except OSError:
        pass
    return None


def sim_env():
    """The environment to run sim (or tools/fidelity) in: REMAT_CPU_THREADS
    and REMAT_CPU_ISA (sim's settings cpu.threads and cpu.isa, for oneDNN's
    per-thread buffers and channel blocks) set to the thread count PyTorch
    runs with here and the instruction set oneDNN uses."""
    env = dict(os.environ, REMAT_CPU_THREADS=str(torch.get_num_threads()))
    isa = onednn_isa()
    if isa is not None:
        env["REMAT_CPU_ISA"] = isa
    return env


class Sim:
    """Runs remat's `sim` CLI: the binary given (or $REMAT_SIM), `sim` on
    PATH, or one built once with `go build` into a temporary directory."""

    def __init__(self, path=None):
        path = path or os.environ.get("REMAT_SIM") or shutil.which("sim")
        self.tmp = None
        if not path:
            if not os.path.exists(os.path.join(REPO, "go.mod")):
                raise RuntimeError("sim not found: pass --sim PATH or set REMAT_SIM (no repository at %s to build it from)" % REPO)
            self.tmp = tempfile.mkdtemp(prefix="remat-sim-")
            path = os.path.join(self.tmp, "sim")
            log("building sim into %s" % path)
            subprocess.run(["go", "build", "-o", path, "./cmd/sim"], cwd=REPO, check=True)
        self.path = path

    def close(self):
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def _run(self, args):
        r = subprocess.run([self.path] + args, capture_output=True, text=True, env=sim_env())
        if r.returncode != 0:
            raise RuntimeError((r.stderr.strip() or r.stdout.strip()).splitlines()[-1] if (r.stderr or r.stdout).strip() else "sim exited %d" % r.returncode)
        return r.stdout

    def plan(self, graph_path, strategy, budget=None, common=()):
        args = ["plan", "--graph", graph_path, "--strategy", strategy, "--format", "json"] + list(common)
        if budget:
            args += ["--budget", str(budget)]
        return json.loads(self._run(args))

    def report(self, graph_path, strategy, budget=None, common=(), source="--graph"):
        """sim report's row of strategy for graph_path, read as source says
        (--graph, or --onnx for an ONNX model)."""
        args = ["report", source, graph_path, "--strategies", strategy, "--format", "json"] + list(common)
        if budget:
            args += ["--budget", str(budget)]
        doc = json.loads(self._run(args))
        for row in doc["rows"]:
            if row["strategy"] == strategy:
                return row
        raise RuntimeError("sim report gave no row for %s" % strategy)


def resident_bytes(model, tensors, optimizer=None):
    n = sum(p.numel() * p.element_size() for p in model.parameters())
    n += sum(b.numel() * b.element_size() for b in model.buffers())
    n += sum(t.numel() * t.element_size() for t in tensors)
    if optimizer is not None:
        for st in optimizer.state.values():
            n += sum(v.numel() * v.element_size() for v in st.values() if isinstance(v, torch.Tensor))
    return n


def profiled_peak(step):
    """The largest running sum of the profiler's [memory] events during step().
    Python's cycle collector runs before, not during, the step: freeing an
    earlier model's tensors inside the window would count as negative events
    and hide part of the peak."""
    gc.collect()
    gc.disable()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step()
    finally:
        gc.enable()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_us())  # stable: ties keep record order
    cur = peak = 0
    for e in events:
        cur += e.nbytes()
        peak = max(peak, cur)
    return peak


def make_step(module, params_of, inputs, labels, loss_fn, optimizer):
    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn(module(*inputs), labels).backward()
        optimizer.step()

    return step


def grads_match(ref, model, inputs, labels, loss_fn, applied, seed=1234):
    """Run one forward/backward of the plain model ref and of applied (over
    model, a copy of ref) with the same RNG seed; return (gradients equal,
    buffers equal, max relative difference)."""
    ref.train()
    model.train()
    for m in (ref, model):
        for p in m.parameters():
            p.grad = None
    torch.manual_seed(seed)
    loss_fn(ref(*inputs), labels).backward()
    torch.manual_seed(seed)
    loss_fn(applied(*inputs), labels).backward()
    ok, worst = True, 0.0
    for (n, p), q in zip(ref.named_parameters(), model.parameters()):
        if p.grad is None or q.grad is None:
            if (p.grad is None) != (q.grad is None):
                ok = False
            continue
        if not torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-8):
            ok = False
        d = ((p.grad - q.grad).abs() / (p.grad.abs() + 1e-12)).max().item() if p.grad.numel() else 0.0
        worst = max(worst, d)
    bufs = all(torch.allclose(a.float(), b.float(), rtol=1e-5, atol=1e-8) for a, b in zip(ref.buffers(), model.buffers()))
    return ok, bufs, worst


def min_time(step, runs):
    """The fastest of runs steps' wall times (ns): the least disturbed by
    other processes on a shared machine."""
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        step()
        ts.append(time.perf_counter_ns() - t0)
    return min(ts)


def measure_strategies(model, inputs, labels, strategies, sim, budget=None, budgeted=None, loss_fn=None,
                       name="model", runs=3, common=("--device", "cpu", "--allocator", "ideal"), workdir=None):
    """For each strategy: plan, predict, apply, measure. Returns a list of
    dicts (one per strategy) with the predicted and measured numbers or the
    error. budgeted: the strategies that get --budget (default all)."""
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    inputs = tuple(inputs)
    loss_fn = loss_fn or F.cross_entropy
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="remat-run-")
    gpath = os.path.join(workdir, "%s.json" % name.replace("/", "_").replace(":", "_"))
    try:
        base = copy.deepcopy(model.state_dict())
        log("%s: tracing one step (op times measured)" % name)
        tm = copy.deepcopy(model)
        write_graph(trace(tm, inputs, labels, loss_fn=loss_fn, measure=True, name=name), gpath)
        del tm
        rows = []
        for s in strategies:
            b = budget if (budget and (budgeted is None or s in budgeted)) else None
            row = {"strategy": s, "budget": b}
            rows.append(row)
            try:
                plan = sim.plan(gpath, s, b, common)
                pred = sim.report(gpath, s, b, common)
            except (RuntimeError, ValueError) as e:
                row["error"] = "plan: %s" % e
                log("%s %s: %s" % (name, s, row["error"]))
                continue
            row["pred_peak"] = pred["peak_allocated"]
            row["pred_time_ns"] = pred["time_ns"]
            row["status"] = pred["status"]
            row["recomputes"] = pred.get("recomputes", 0)
            m = copy.deepcopy(model)
            m.load_state_dict(base)
            ref = copy.deepcopy(m)
            try:
                applied = apply(m, plan, inputs)
                gok, bok, worst = grads_match(ref, m, inputs, labels, loss_fn, applied)  # also the warm-up
                del ref
                m.load_state_dict(base)
                opt = torch.optim.SGD(m.parameters(), lr=0.01)
                step = make_step(applied, m, inputs, labels, loss_fn, opt)
                opt.zero_grad(set_to_none=True)
                peak = profiled_peak(step)
                row["meas_peak"] = resident_bytes(m, inputs + (labels,), opt) + peak
                row["meas_time_ns"] = min_time(step, runs)
                row["grads"] = gok
                row["buffers"] = bok
                row["grad_rel_diff"] = worst
                row["stats"] = dict(applied.stats)
            except Exception as e:  # noqa: BLE001 - reported per strategy
                row["error"] = "apply: %s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
                log("%s %s: %s" % (name, s, row["error"]))
                continue
            log("%s %-16s predicted %8.1f MiB measured %8.1f MiB (%+.1f%%) grads %s" % (
                name, s, row["pred_peak"] / 2**20, row["meas_peak"] / 2**20,
                100 * (row["pred_peak"] - row["meas_peak"]) / row["meas_peak"], "ok" if gok and bok else "MISMATCH"))
        return rows
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
