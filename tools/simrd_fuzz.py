#!/usr/bin/python3
"""Differential runs of `sim sweep --dtr-log LOG --parity` against the DTR
paper's reference simulator, simrd, on random DTR logs.

The two DTR logs in ../shared/data exercise a part of the log format (no
COPY_FROM, few MUTATEs, no zero-time ops). This writes random logs that use
every instruction (CALL with 0 to 3 arguments and 1 to 3 results, views,
MUTATE, COPY, COPY_FROM, RELEASE of live and unknown names, zero-byte and
zero-time ops, BACKWARD), runs both simulators on each (tools/simrd_compare.py
does the simrd side: the paper's protocol, 10 ratios) and reports every cell
that differs: status, clock, rematerialization compute, heuristic
evaluations. A log on which simrd itself fails (it asserts on some aliasing
patterns in its incremental regions) is counted and skipped.

  /usr/bin/python3 tools/simrd_fuzz.py --simrd DTR_PROTOTYPE/simrd --sim ./sim \\
      --heuristics eq-class,dtr --seeds 1:200 --ops 150 [--keep DIR [--minimize]]

--keep DIR writes each disagreeing log to DIR (with --minimize: cut down to
the instructions the disagreement needs). With --baseline-sim OLD it keeps
instead the logs that OLD gets wrong and --sim gets right (cut down so that
this still holds): regression cases for a fix. Standard library only; simrd is not part of
remat (see tools/simrd_compare.py). Exits 1 on a disagreement.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simrd_compare  # noqa: E402

FEATURES = ("multi", "alias", "copy", "copyfrom", "mutate", "mem0", "time0", "unknown", "noargs")


def random_log(seed, ops, features=FEATURES):
    """A random DTR log (text) of about `ops` steps using the given features.

    Only patterns a recorded log can have: arguments are live names, a
    MUTATE's mutated arguments are distinct tensors, a COPY's destination is
    new, RELEASE drops one reference of a live name (or names an unknown
    one, which the format ignores)."""
    f = set(features)
    rng = random.Random(seed)
    out = []

    def w(**kv):
        out.append(json.dumps({k: (str(v) if isinstance(v, int) else v) for k, v in kv.items()}))

    w(INSTRUCTION="ANNOTATE", ANNOTATION="START")
    tid, tref, tname, used = {}, {}, {}, set()  # name -> tensor; tensor -> refs, base name
    live = []  # names holding a reference, in creation order
    n = [0]

    def new_name():
        n[0] += 1
        return "x%d" % n[0]

    def new_tensor(name, base=None):
        t = len(tref)
        tid[name], tref[t], tname[t] = t, 1, base or name
        used.add(base or name)

    for _ in range(rng.randint(1, 4)):
        nm = new_name()
        w(INSTRUCTION="CONSTANT", NAME=nm)
        w(INSTRUCTION="MEMORY", NAME=nm, MEMORY=rng.choice(([0] if "mem0" in f else []) + [16, 4096, 65536, rng.randint(1, 200000)]))
        new_tensor(nm)
        live.append(nm)
    bwd = int(ops * rng.uniform(0.3, 0.7))
    for step in range(ops):
        if step == bwd:
            w(INSTRUCTION="ANNOTATE", ANNOTATION="BACKWARD")
        k = rng.random()
        if k < 0.5 or len(live) < 2:
            lo = 0 if ("noargs" in f and rng.random() < 0.05) else 1
            args = [rng.choice(live) for _ in range(rng.randint(lo, 3))] if live else []
            res = [new_name() for _ in range(rng.choice([1, 1, 1, 2, 3]) if "multi" in f else 1)]
            op = rng.choice(["conv", "relu", "add", "mm", "view"])
            if step >= bwd:
                op += "_backward"
            w(INSTRUCTION="CALL", RESULT=res, NAME=op, ARGS=args,
              TIME=rng.choice(([0, 1] if "time0" in f else []) + [rng.randint(1, 10 ** 6)]))
            for r in res:
                w(INSTRUCTION="MEMORY", NAME=r, MEMORY=rng.choice(([0] if "mem0" in f else []) + [8, rng.randint(1, 300000), rng.randint(1, 3000000)]))
                al = rng.randrange(len(args)) if "alias" in f and args and rng.random() < 0.2 else -1
                w(INSTRUCTION="ALIAS", NAME=r, ALIAS=al)
                new_tensor(r)
                live.append(r)
        elif k < 0.6 and "mutate" in f:
            args = [rng.choice(live) for _ in range(rng.randint(1, 3))]
            idx = sorted(rng.sample(range(len(args)), rng.randint(1, len(args))))
            names = [args[i] for i in idx]
            # simrd names a mutation's result after the tensor's name + "$":
            # two handles of one tensor mutated apart would collide there
            if len(set(names)) != len(names) or any(tname[tid[a]] + "$" in used for a in names):
                continue
            w(INSTRUCTION="MUTATE", NAME=rng.choice(["add_", "relu_", "mul_"]), ARGS=args, MUTATE=idx, TIME=rng.randint(0 if "time0" in f else 1, 10 ** 6))
            for nm in names:
                old = tid[nm]
                tref[old] -= 1
                new_tensor(nm, tname[old] + "$")
        elif k < 0.72 and "copy" in f:
            src, dst = rng.choice(live), new_name()
            w(INSTRUCTION="COPY", DST=dst, SRC=src)
            tid[dst] = tid[src]
            tref[tid[src]] += 1
            live.append(dst)
        elif k < 0.78 and "copyfrom" in f:
            dst, src = rng.choice(live), rng.choice(live)
            if tid[dst] == tid[src]:
                continue  # simrd releases the old binding first: its last reference would go
            w(INSTRUCTION="COPY_FROM", DST=dst, SRC=src)
            tref[tid[dst]] -= 1
            tid[dst] = tid[src]
            tref[tid[src]] += 1
        elif "unknown" in f and rng.random() < 0.05:
            w(INSTRUCTION="RELEASE", NAME="gone%d" % step)
        else:
            nm = rng.choice(live)
            w(INSTRUCTION="RELEASE", NAME=nm)
            tref[tid[nm]] -= 1
            live.remove(nm)
    return "\n".join(out) + "\n"


def sim_sweep(sim, log, h):
    """sim's cells for log and heuristic h, or None if sim fails."""
    p = subprocess.run([sim, "sweep", "-q", "--dtr-log", log, "--strategies", "dtr", "--heuristic", h,
                        "--parity", "--format", "json"], capture_output=True, text=True)
    if p.returncode != 0:
        return None
    return simrd_compare.sim_cells(json.loads(p.stdout))


def simrd_sweep(simrd, log, h):
    """simrd's cells (tools/simrd_compare.py --worker), or None if it fails
    or stops on its region assertion at some budget."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(simrd))
    p = subprocess.run([sys.executable, simrd_compare.__file__, "--worker", log, simrd_compare.HEURISTICS[h]],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return None
    cells = json.loads(p.stdout)
    if any(c["status"] == "assert" for c in cells):
        return None  # simrd stopped on its region assertion: no reference
    return cells


def units(text):
    """The log's instructions grouped: a CALL with its MEMORY and ALIAS
    lines is one unit (what --minimize removes)."""
    us = []
    for line in text.splitlines(keepends=True):
        if json.loads(line)["INSTRUCTION"] in ("MEMORY", "ALIAS") and us:
            us[-1].append(line)
        else:
            us.append([line])
    return us


def minimize(text, still_bad):
    """Drops instruction units (never the first, START) while still_bad(text)
    holds; returns the smallest text found."""
    us = units(text)
    changed = True
    while changed:
        changed = False
        for i in range(len(us) - 1, 0, -1):
            cand = us[:i] + us[i + 1:]
            if still_bad("".join(sum(cand, []))):
                us, changed = cand, True
    return "".join(sum(us, []))


def parse_seeds(s):
    a, _, b = s.partition(":")
    lo, hi = int(a), int(b or int(a) + 1)
    if hi <= lo:
        raise ValueError("--seeds %r: expected A:B with B > A" % s)
    return range(lo, hi)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--simrd", required=True, help="directory holding the simrd package")
    ap.add_argument("--sim", default="sim", help="the sim binary")
    ap.add_argument("--baseline-sim", help="an older sim: keep (and minimize) the logs this binary gets wrong and --sim gets right")
    ap.add_argument("--heuristics", default="eq-class,dtr,dtr-local,msps,lru,size")
    ap.add_argument("--seeds", default="1:50", help="A:B, the random logs' seeds (B excluded)")
    ap.add_argument("--ops", type=int, default=150, help="steps per log")
    ap.add_argument("--features", default=",".join(FEATURES), help="comma-separated: " + ", ".join(FEATURES))
    ap.add_argument("--keep", help="directory for the disagreeing logs")
    ap.add_argument("--minimize", action="store_true")
    a = ap.parse_args()
    if not os.path.isdir(os.path.join(a.simrd, "simrd")):
        ap.error("--simrd %r: expected a directory holding the simrd package" % a.simrd)
    hs = a.heuristics.split(",")
    for h in hs:
        if h not in simrd_compare.HEURISTICS:
            ap.error("--heuristics: %r: expected one of %s" % (h, ", ".join(simrd_compare.HEURISTICS)))
    feats = [x for x in a.features.split(",") if x]
    for x in feats:
        if x not in FEATURES:
            ap.error("--features: %r: expected some of %s" % (x, ", ".join(FEATURES)))
    if not 1 <= a.ops <= 100000:
        ap.error("--ops %d: expected 1 to 100000" % a.ops)
    try:
        seeds = parse_seeds(a.seeds)
    except ValueError as e:
        ap.error(str(e))
    if a.minimize and not a.keep:
        ap.error("--minimize needs --keep DIR")
    tmp = tempfile.mkdtemp(prefix="simrd-fuzz-")
    counts = {"agree": 0, "disagree": 0, "simrd fails": 0}
    if a.baseline_sim:
        counts["fixed"] = 0  # --sim agrees, --baseline-sim does not
    for seed in seeds:
        text = random_log(seed, a.ops, feats)
        log = os.path.join(tmp, "r%d.log" % seed)
        with open(log, "w") as fh:
            fh.write(text)
        for h in hs:
            ref = simrd_sweep(a.simrd, log, h)
            if ref is None:
                counts["simrd fails"] += 1
                continue
            ours = sim_sweep(a.sim, log, h)
            diff = [(None, "sim failed", "", "")] if ours is None else simrd_compare.disagreements(ref, ours)
            fixed = False
            if not diff:
                counts["agree"] += 1
                if a.baseline_sim:
                    old = sim_sweep(a.baseline_sim, log, h)
                    fixed = old is not None and old != ref
                    if fixed:
                        counts["fixed"] += 1
                        print("seed %d %s: --baseline-sim disagrees, --sim agrees" % (seed, h))
                if not fixed:
                    continue
            else:
                counts["disagree"] += 1
                print("seed %d %s: %s" % (seed, h, "; ".join("ratio %s %s simrd %s sim %s" % d for d in diff[:3])))
            if a.keep and (fixed or not a.baseline_sim):
                os.makedirs(a.keep, exist_ok=True)
                out = text
                if a.minimize:
                    probe = os.path.join(tmp, "probe.log")

                    def still_bad(t, h=h):
                        with open(probe, "w") as fh:
                            fh.write(t)
                        r = simrd_sweep(a.simrd, probe, h)
                        if r is None:
                            return False
                        new = sim_sweep(a.sim, probe, h)
                        if a.baseline_sim:
                            old = sim_sweep(a.baseline_sim, probe, h)
                            return old is not None and old != r and new == r
                        return new is not None and new != r
                    out = minimize(text, still_bad)
                with open(os.path.join(a.keep, "seed%d-%s.log" % (seed, h)), "w") as fh:
                    fh.write(out)
    print(", ".join("%s %d" % kv for kv in counts.items()))
    return 1 if counts["disagree"] else 0


if __name__ == "__main__":
    sys.exit(main())
