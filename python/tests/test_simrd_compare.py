"""Tests of tools/simrd_compare.py's comparison (simrd itself is not needed)."""

import importlib.util
import os
import sys
import tempfile
import unittest

_path = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "simrd_compare.py")
_spec = importlib.util.spec_from_file_location("simrd_compare", _path)
sc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sc)


def cell(ratio, status="ok", clock=100, remat=0, evals=0):
    return {"ratio": ratio, "status": status, "clock_ns": clock, "remat_compute_ns": remat, "heuristic_evals": evals}


class Compare(unittest.TestCase):
    def test_sim_cells_reads_sweep_json(self):
        doc = {"runs": [{"results": [
            {"ratio": 1, "status": "ok", "clock_ns": 5, "remat_compute_ns": 0, "heuristic_evals": 3, "overhead": 1.0},
            {"ratio": 0.5, "status": "thrash", "clock_ns": 9, "remat_compute_ns": 4, "heuristic_evals": 7, "overhead": 1.8},
        ]}]}
        self.assertEqual(sc.sim_cells(doc), [cell(1, clock=5, evals=3), cell(0.5, "thrash", 9, 4, 7)])

    def test_disagreements(self):
        ref = [cell(1.0), cell(0.5, "oom", 50, 10, 20)]
        self.assertEqual(sc.disagreements(ref, [cell(1), cell(0.5, "oom", 50, 10, 20)]), [])
        self.assertEqual(sc.disagreements(ref, [cell(1.0), cell(0.5, "oom", 51, 10, 21)]),
                         [(0.5, "clock_ns", 50, 51), (0.5, "heuristic_evals", 20, 21)])
        self.assertEqual(sc.disagreements(ref, [cell(1.0)]), [(None, "ratios", 2, 1)])

    def test_table(self):
        t = sc.table([("a.log", "eq-class", 0.5, 0.005, True), ("b.log", "dtr", 1.0, 0.5, False)])
        self.assertIn("| a.log | eq-class | 0.50 s | 5.0 ms | 100x | yes |", t)
        self.assertIn("| b.log | dtr | 1.00 s | 500.0 ms | 2x | NO |", t)

    def test_assert_cells(self):
        # sim marks a cell where it counted absorptions simrd asserts on
        doc = {"runs": [{"results": [
            {"ratio": 1, "status": "ok", "clock_ns": 5, "remat_compute_ns": 0, "heuristic_evals": 3,
             "reference_asserts": 17},
            {"ratio": 0.1, "status": "oom", "clock_ns": 1, "remat_compute_ns": 0, "heuristic_evals": 0},
        ]}]}
        ours = sc.sim_cells(doc)
        self.assertEqual(ours, [cell(1, "assert", 5, 0, 3), cell(0.1, "oom", 1)])
        # simrd stopped early at 1.0: only the status counts there
        ref = [cell(1.0, "assert", 99, 0, 0), cell(0.1, "oom", 1)]
        self.assertEqual(sc.disagreements(ref, ours), [])
        # an assertion sim did not predict, or one sim predicted that simrd
        # did not make, is a disagreement
        self.assertEqual(sc.disagreements([cell(1.0, "assert", 99)], [cell(1.0, "ok", 5)]),
                         [(1.0, "status", "assert", "ok")])
        self.assertEqual(sc.disagreements([cell(1.0, "ok", 5)], [cell(1.0, "assert", 5)]),
                         [(1.0, "status", "ok", "assert")])

    def test_region_assert(self):
        # only an assertion raised in simrd's optimization/region.py counts
        with tempfile.TemporaryDirectory() as d:
            for name in ("region", "other"):
                with open(os.path.join(d, name + ".py"), "w") as f:
                    f.write("def absorb(x):\n    assert x in ()\n")
            sys.path.insert(0, d)
            try:
                import region
                import other
                for mod, want in ((region, True), (other, False)):
                    try:
                        mod.absorb(1)
                    except AssertionError as e:
                        self.assertEqual(sc.region_assert(e), want, mod.__name__)
                    else:
                        self.fail("no assertion")
            finally:
                sys.path.remove(d)
                sys.modules.pop("region", None)
                sys.modules.pop("other", None)

    def test_failed_run_row(self):
        t = sc.table([("a.log", "dtr", None, None, False)])
        self.assertIn("| a.log | dtr | - | - | - | run failed |", t)

    def test_assert_row(self):
        t = sc.table([("a.log", "dtr", 0.4, 0.5, True, 9), ("b.log", "msps", 0.4, 0.5, False, 1)])
        self.assertIn("| a.log | dtr | 0.40 s | 500.0 ms | - | yes (simrd asserts at 9 budgets) |", t)
        self.assertIn("| b.log | msps | 0.40 s | 500.0 ms | - | NO (simrd asserts at 1 budget) |", t)

    def test_heuristics_cover_the_reference_six(self):
        self.assertEqual(sorted(sc.HEURISTICS), sorted(["eq-class", "dtr", "dtr-local", "msps", "lru", "size"]))


if __name__ == "__main__":
    unittest.main()
