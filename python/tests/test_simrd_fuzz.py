"""Tests of tools/simrd_fuzz.py's log generator and minimizer (simrd itself
is not needed)."""

import importlib.util
import json
import os
import sys
import unittest

_tools = os.path.join(os.path.dirname(__file__), "..", "..", "tools")
sys.path.insert(0, _tools)
_spec = importlib.util.spec_from_file_location("simrd_fuzz", os.path.join(_tools, "simrd_fuzz.py"))
sf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sf)


def replay(text):
    """Checks a log the way simrd's parser would fail on it: every argument
    and source names a live binding, results and COPY destinations are new,
    a CALL is followed by one MEMORY and one ALIAS per result. Returns the
    instruction kinds seen."""
    lines = [json.loads(l) for l in text.splitlines()]
    assert lines[0] == {"INSTRUCTION": "ANNOTATE", "ANNOTATION": "START"}
    bound, kinds, i = set(), set(), 1
    while i < len(lines):
        ins = lines[i]
        k = ins["INSTRUCTION"]
        kinds.add(k)
        if k == "CONSTANT":
            assert lines[i + 1] == {"INSTRUCTION": "MEMORY", "NAME": ins["NAME"], "MEMORY": lines[i + 1]["MEMORY"]}
            bound.add(ins["NAME"])
            i += 2
            continue
        if k == "CALL":
            for a in ins["ARGS"]:
                assert a in bound, a
            for j, r in enumerate(ins["RESULT"]):
                assert r not in bound
                mem, al = lines[i + 1 + 2 * j], lines[i + 2 + 2 * j]
                assert (mem["INSTRUCTION"], mem["NAME"], al["INSTRUCTION"], al["NAME"]) == ("MEMORY", r, "ALIAS", r)
                assert -1 <= int(al["ALIAS"]) < len(ins["ARGS"])
                bound.add(r)
            i += 1 + 2 * len(ins["RESULT"])
            continue
        if k == "MUTATE":
            for a in ins["ARGS"]:
                assert a in bound, a
            assert all(0 <= int(m) < len(ins["ARGS"]) for m in ins["MUTATE"])
        elif k == "COPY":
            assert ins["SRC"] in bound and ins["DST"] not in bound
            bound.add(ins["DST"])
        elif k == "COPY_FROM":
            assert ins["SRC"] in bound and ins["DST"] in bound
        elif k == "RELEASE":
            bound.discard(ins["NAME"])
        i += 1
    return kinds


class RandomLog(unittest.TestCase):
    def test_every_instruction_and_valid(self):
        kinds = set()
        for seed in range(1, 30):
            kinds |= replay(sf.random_log(seed, 120))
        self.assertEqual(kinds, {"CONSTANT", "CALL", "MUTATE", "COPY", "COPY_FROM", "RELEASE", "ANNOTATE"})

    def test_deterministic(self):
        self.assertEqual(sf.random_log(7, 80), sf.random_log(7, 80))
        self.assertNotEqual(sf.random_log(7, 80), sf.random_log(8, 80))

    def test_features_off(self):
        text = sf.random_log(3, 200, ["multi"])
        kinds = replay(text)
        self.assertEqual(kinds, {"CONSTANT", "CALL", "RELEASE", "ANNOTATE"})
        self.assertNotIn('"TIME": "0"', text)

    def test_minimize_keeps_what_the_predicate_needs(self):
        text = sf.random_log(5, 60, ["multi"])
        target = [u for u in sf.units(text) if json.loads(u[0])["INSTRUCTION"] == "CALL"][3][0]
        small = sf.minimize(text, lambda t: target in t)
        self.assertIn(target, small)
        self.assertEqual(len(sf.units(small)), 2)  # START and the unit with the target line

    def test_parse_seeds(self):
        self.assertEqual(list(sf.parse_seeds("3:6")), [3, 4, 5])
        self.assertEqual(list(sf.parse_seeds("4")), [4])
        with self.assertRaises(ValueError):
            sf.parse_seeds("5:5")


if __name__ == "__main__":
    unittest.main()
