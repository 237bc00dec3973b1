#!/usr/bin/python3
"""Compare `sim sweep --dtr-log LOG --strategies dtr --heuristic H --parity`
with the DTR paper's reference simulator, simrd, on the same machine.

simrd is not part of remat: get it from the DTR artifact (repository
uwsampl/dtr-prototype, directory simrd/) and pass the directory that holds
its `simrd` package with --simrd. For each log and heuristic this runs the
paper's protocol in simrd (baseline with RuntimeV1 and an unlimited budget;
per ratio, RuntimeV2EagerOptimized with budget = int(ratio x baseline peak)
and a rematerialization limit of 1x the baseline compute) and `sim` with
--parity, times both as whole processes (parsing included), and checks that
every cell agrees: status, clock, rematerialization compute and heuristic
evaluations. It prints a Markdown table and exits 1 on a disagreement, or
when a run fails (the other logs and heuristics still run).

simrd stops on an assertion in its region bookkeeping on some logs (h_DTR
and MSPS: a storage a region absorbs is no longer on the frontier simrd
kept for it). Such a budget is an "assert" cell; sim's parity mode counts
those absorptions (reference_asserts in its JSON) and goes on, so an
"assert" cell agrees when sim's cell counts at least one and no other field
is compared (simrd's values are those of the point where it stopped).

  /usr/bin/python3 tools/simrd_compare.py --simrd ~/dtr-prototype/simrd \\
      --sim ./sim LOG [LOG ...]

Standard library only.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

RATIOS = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]
# sim's heuristic name -> simrd's heuristic class
HEURISTICS = {"eq-class": "DTREqClass", "dtr": "DTR", "dtr-local": "DTRLocal",
              "msps": "MSPS", "lru": "LRU", "size": "LargestStorage"}


def simrd_sweep(log, cls, ratios):
    """Run simrd on log with heuristic class cls (in this process: called by
    --worker). Returns one dict per ratio."""
    sys.setrecursionlimit(10 ** 9)  # simrd recurses once per rematerialization level
    from simrd.runtime import RuntimeV1, RuntimeV2EagerOptimized, RematExceededError
    import simrd.heuristic as heur
    from simrd.parse.parse import parse_file
    with open(log) as f:
        run = parse_file(f, start=True).get_closure()
    base = RuntimeV1(math.inf, heur.Heuristic(), stats=False, trace=False)
    run(base)
    peak = base.telemetry.summary["max_memory"]
    compute = base.telemetry.summary["model_compute"]
    h = getattr(heur, cls)()
    out = []
    for r in ratios:
        rt = RuntimeV2EagerOptimized(int(peak * r), h, remat_limit=compute, trace=False, stats=False)
        status = "ok"
        try:
            run(rt)
        except MemoryError:
            status = "oom"
        except RematExceededError:
            status = "thrash"
        except AssertionError as e:
            if not region_assert(e):
                raise
            status = "assert"
        s = rt.telemetry.summary
        out.append({"ratio": r, "status": status, "clock_ns": rt.clock,
                    "remat_compute_ns": s["remat_compute"], "heuristic_evals": s["heuristic_eval_count"]})
    return out


def region_assert(e):
    """Whether AssertionError e is simrd's region frontier assertion (raised
    in optimization/region.py), the one sim's parity mode predicts."""
    tb = e.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return os.path.basename(tb.tb_frame.f_code.co_filename) == "region.py"


def sim_cells(doc):
    """The cells of `sim sweep --format json` output (one heuristic). A cell
    where sim counted absorptions simrd asserts on is an "assert" cell."""
    return [{"ratio": c["ratio"], "status": "assert" if c.get("reference_asserts", 0) > 0 else c["status"],
             "clock_ns": c["clock_ns"], "remat_compute_ns": c["remat_compute_ns"],
             "heuristic_evals": c["heuristic_evals"]}
            for c in doc["runs"][0]["results"]]


def disagreements(ref, ours):
    """Cells where simrd and sim differ: a list of (ratio, field, simrd, sim),
    every field compared, for failed runs (oom, thrash) too; of an "assert"
    cell only the ratio and the status."""
    if len(ref) != len(ours):
        return [(None, "ratios", len(ref), len(ours))]
    diff = []
    for a, b in zip(ref, ours):
        fields = ("ratio", "status", "clock_ns", "remat_compute_ns", "heuristic_evals")
        if "assert" in (a["status"], b["status"]):
            fields = fields[:2]
        for k in fields:
            if a[k] != b[k]:
                diff.append((a["ratio"], k, a[k], b[k]))
    return diff


class RunFailed(Exception):
    """A run exited non-zero."""


def timed(cmd, env=None):
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise RunFailed("%s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stderr))
    return dt, p.stdout


def table(rows):
    """Markdown table of (log, heuristic, simrd s, sim s, agree[, assert
    cells]) rows; a row whose times are None is a failed run. Where simrd
    stopped on its assertion at some budgets the times do not compare."""
    lines = ["| log | heuristic | simrd | sim | factor | cells agree |", "|---|---|---|---|---|---|"]
    for row in rows:
        log, h, a, b, ok = row[:5]
        asserts = row[5] if len(row) > 5 else 0
        if a is None or b is None:
            lines.append("| %s | %s | - | - | - | run failed |" % (log, h))
            continue
        agree = "yes" if ok else "NO"
        factor = "%.0fx" % (a / b)
        if asserts:
            agree += " (simrd asserts at %d budget%s)" % (asserts, "s" if asserts > 1 else "")
            factor = "-"
        lines.append("| %s | %s | %.2f s | %.1f ms | %s | %s |" % (log, h, a, b * 1000, factor, agree))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--simrd", help="directory holding the simrd package")
    ap.add_argument("--sim", default="sim", help="the sim binary (go build -o sim ./cmd/sim)")
    ap.add_argument("--heuristics", default="eq-class,dtr", help="comma-separated: " + ", ".join(HEURISTICS))
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each (the median is shown)")
    ap.add_argument("--worker", nargs=2, metavar=("LOG", "CLASS"), help=argparse.SUPPRESS)
    ap.add_argument("logs", nargs="*")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(simrd_sweep(a.worker[0], a.worker[1], RATIOS)))
        return 0
    if not a.simrd or not os.path.isdir(os.path.join(a.simrd, "simrd")):
        ap.error("--simrd %r: expected a directory holding the simrd package (DTR artifact, simrd/)" % a.simrd)
    if not a.logs:
        ap.error("expected at least one DTR log")
    if a.repeat < 1:
        ap.error("--repeat %d: expected >= 1" % a.repeat)
    hs = a.heuristics.split(",")
    for h in hs:
        if h not in HEURISTICS:
            ap.error("--heuristics: %r: expected one of %s" % (h, ", ".join(HEURISTICS)))
    env = dict(os.environ, PYTHONPATH=os.path.abspath(a.simrd))
    rows, bad = [], False
    for log in a.logs:
        for h in hs:
            ref_t, ours_t = [], []
            try:
                for _ in range(a.repeat):
                    dt, out = timed([sys.executable, os.path.abspath(__file__), "--worker", log, HEURISTICS[h]], env)
                    ref_t.append(dt)
                    dt2, out2 = timed([a.sim, "sweep", "-q", "--dtr-log", log, "--strategies", "dtr",
                                       "--heuristic", h, "--parity", "--format", "json"])
                    ours_t.append(dt2)
            except RunFailed as e:
                print(e, file=sys.stderr)
                bad = True
                rows.append((os.path.basename(log), h, None, None, False))
                continue
            ref = json.loads(out)
            diff = disagreements(ref, sim_cells(json.loads(out2)))
            for d in diff:
                print("%s %s ratio %s: %s simrd %s, sim %s" % (log, h, d[0], d[1], d[2], d[3]), file=sys.stderr)
            bad = bad or bool(diff)
            rows.append((os.path.basename(log), h, sorted(ref_t)[len(ref_t) // 2], sorted(ours_t)[len(ours_t) // 2], not diff,
                         sum(c["status"] == "assert" for c in ref)))
    print(table(rows))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
