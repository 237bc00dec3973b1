"""Tests of tools/simrd_compare.py's comparison (simrd itself is not needed)."""

import importlib.util
import os
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

    def test_heuristics_cover_the_reference_six(self):
        self.assertEqual(sorted(sc.HEURISTICS), sorted(["eq-class", "dtr", "dtr-local", "msps", "lru", "size"]))


if __name__ == "__main__":
    unittest.main()
