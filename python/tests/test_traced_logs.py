"""Tests of tools/traced_logs.py: small models traced into DTR logs that sim replays."""

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import unittest

_path = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "traced_logs.py")
_spec = importlib.util.spec_from_file_location("traced_logs", _path)
traced_logs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(traced_logs)

try:
    import torch  # noqa: F401
    import torchvision  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


class TracedLogsTest(unittest.TestCase):
    def test_bad_model_is_an_error(self):
        with self.assertRaises(SystemExit) as cm:
            traced_logs.main(["--out", tempfile.gettempdir(), "--models", "nope"])
        self.assertEqual(cm.exception.code, 2)

    @unittest.skipUnless(HAVE_TORCH, "PyTorch and torchvision are not installed (apt-get install python3-torch python3-torchvision)")
    def test_small_logs_replay(self):
        from remat_torch.measure import Sim

        d = tempfile.mkdtemp(prefix="remat-traced-")
        sim = Sim(None)
        try:
            self.assertEqual(traced_logs.main(["--out", d, "--small", "--sim", sim.path]), 0)
            self.assertEqual(traced_logs.main(["--out", d, "--small", "--sim", sim.path, "--models", ",".join(traced_logs.EXTRA)]), 0)
            for m in traced_logs.MODELS + traced_logs.EXTRA:
                log = os.path.join(d, m + ".log")
                out = sim._run(["sweep", "-q", "--dtr-log", log, "--strategies", "dtr", "--heuristic", "lookahead", "--ratios", "1,0.8", "--format", "json"])
                doc = json.loads(out)
                text = json.dumps(doc)
                self.assertIn('"ok"', text, m)
                # the log has CALLs whose tensors sim sized
                with open(log) as f:
                    calls = sum(1 for line in f if '"CALL"' in line)
                self.assertGreater(calls, 10, m)
        finally:
            sim.close()
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
