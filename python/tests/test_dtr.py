"""Tests of remat_torch.dtr (runtime DTR). Skipped when torch is absent."""

import copy
import unittest

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

if torch is not None:
    from remat_torch import dtr as dtr_fn
    from remat_torch.dtr import HEURISTICS, BudgetExceeded

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.enc = nn.TransformerEncoder(
                nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.1, batch_first=True), 2)
            self.head = nn.Linear(16, 5)

        def forward(self, x):
            return self.head(self.enc(self.emb(x)).mean(1))


def cnn():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
        nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.Dropout(0.3),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))


ACT = 4 * 8 * 16 * 16 * 4  # bytes of one CNN activation (batch 4, 8 channels, 16x16, f32)


@unittest.skipIf(torch is None, "torch not installed: remat_torch.dtr tests skipped (install python3-torch)")
class TestDTR(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        torch.set_num_threads(1)

    def cnn_case(self):
        x = torch.randn(4, 3, 16, 16)
        y = torch.randint(0, 5, (4,))
        return cnn(), x, y

    def enc_case(self):
        x = torch.randint(0, 50, (4, 12))
        y = torch.randint(0, 5, (4,))
        return Encoder(), x, y

    def step_both(self, ref, x, y, budget, heuristic="eq-class", **kw):
        """One forward/backward of ref and of dtr over a copy, same seed;
        returns (copy, dtr module)."""
        m = copy.deepcopy(ref)
        d = dtr_fn(m, budget, heuristic=heuristic, **kw)
        torch.manual_seed(7)
        F.cross_entropy(ref(x), y).backward()
        torch.manual_seed(7)
        F.cross_entropy(d(x), y).backward()
        return m, d

    def assert_same(self, ref, m, what):
        for (n, p), q in zip(ref.named_parameters(), m.parameters()):
            self.assertIsNotNone(q.grad, "%s: %s has no gradient" % (what, n))
            self.assertTrue(torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-8),
                            "%s: gradient of %s differs (max %g)" % (what, n, (p.grad - q.grad).abs().max()))
        for (n, a), b in zip(ref.named_buffers(), m.buffers()):
            self.assertTrue(torch.equal(a, b), "%s: buffer %s differs (running stats updated twice?)" % (what, n))

    def test_gradients_match_cnn(self):
        ref, x, y = self.cnn_case()
        for budget in (10**9, 3 * ACT, ACT, 0):
            m, d = self.step_both(ref, x, y, budget)
            self.assert_same(ref, m, "cnn budget %d" % budget)
            for p in ref.parameters():
                p.grad = None
            if budget <= ACT:
                self.assertGreater(d.stats["evictions"], 0, "budget %d" % budget)
                self.assertGreater(d.stats["recomputes"], 0, "budget %d" % budget)

    def test_gradients_match_encoder(self):
        ref, x, y = self.enc_case()
        for budget in (10**9, 20000, 0):
            m, d = self.step_both(ref, x, y, budget)
            self.assert_same(ref, m, "encoder budget %d" % budget)
            for p in ref.parameters():
                p.grad = None
            if budget < 10**9:
                self.assertGreater(d.stats["evictions"], 0, "budget %d" % budget)

    def test_peak_within_budget(self):
        ref, x, y = self.cnn_case()
        _, free = self.step_both(ref, x, y, 10**9)
        unbounded = free.stats["peak_bytes"]
        self.assertEqual(free.stats["evictions"], 0)
        self.assertGreaterEqual(unbounded, 6 * ACT)  # the CNN saves at least six activations
        for p in ref.parameters():
            p.grad = None
        budget = 2 * ACT
        _, d = self.step_both(ref, x, y, budget)
        st = d.stats
        self.assertGreater(st["evictions"], 0)
        # The budget plus one op's working set: the tensors the running
        # autograd node unpacked and the recomputed op's input and output.
        self.assertLessEqual(st["peak_bytes"], budget + 3 * ACT)
        self.assertLess(st["peak_bytes"], unbounded)

    def test_heuristics_all_run(self):
        ref, x, y = self.cnn_case()
        for h in HEURISTICS + ("dtr-eqclass", "dtr-local"):
            m, d = self.step_both(ref, x, y, ACT, heuristic=h)
            self.assert_same(ref, m, "heuristic %s" % h)
            self.assertGreater(d.stats["evictions"], 0, h)
            for p in ref.parameters():
                p.grad = None

    def test_training_steps_match(self):
        ref, x, y = self.cnn_case()
        m = copy.deepcopy(ref)
        d = dtr_fn(m, ACT, heuristic="lru")
        o1 = torch.optim.SGD(ref.parameters(), lr=0.1)
        o2 = torch.optim.SGD(m.parameters(), lr=0.1)
        for i in range(3):
            for mod, opt in ((ref, o1), (d, o2)):
                opt.zero_grad(set_to_none=True)
                torch.manual_seed(100 + i)
                F.cross_entropy(mod(x), y).backward()
                opt.step()
        for (n, p), q in zip(ref.named_parameters(), m.parameters()):
            self.assertTrue(torch.allclose(p, q, rtol=1e-5, atol=1e-7), "after 3 steps %s differs" % n)
        self.assertIs(d.model, m)
        self.assertTrue(all(a is b for a, b in zip(m.parameters(), d.parameters())), "parameters not shared")

    def test_eval_and_no_grad_pass_through(self):
        ref, x, y = self.cnn_case()
        d = dtr_fn(ref, 0)
        ref.eval()
        with torch.no_grad():
            a = ref(x)
            b = d(x)
        self.assertTrue(torch.equal(a, b))
        self.assertEqual(d.stats["forward_ops"], 0)

    def test_strict_raises_when_nothing_evictable(self):
        ref, x, y = self.cnn_case()
        d = dtr_fn(copy.deepcopy(ref), 0, strict=True)
        # raised in autograd's unpack hook: the engine rethrows it as a
        # RuntimeError carrying the message (BudgetExceeded is one).
        with self.assertRaises(RuntimeError) as cm:
            F.cross_entropy(d(x), y).backward()
        self.assertIn("budget_bytes is 0", str(cm.exception))
        self.assertTrue(issubclass(BudgetExceeded, RuntimeError))
        # not strict: proceeds and counts
        _, d2 = self.step_both(ref, x, y, 0)
        self.assertGreater(d2.stats["over_budget"], 0)

    def test_bad_arguments(self):
        m = cnn()
        with self.assertRaises(ValueError) as cm:
            dtr_fn(m, 100, heuristic="lookahead")
        self.assertIn("lookahead", str(cm.exception))
        self.assertIn("eq-class", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            dtr_fn(m, -1)
        self.assertIn("budget_bytes -1", str(cm.exception))
        with self.assertRaises(ValueError):
            dtr_fn(m, 100, min_size=-5)
        with self.assertRaises(TypeError):
            dtr_fn("model", 100)

    def test_gradients_match_inplace_activations(self):
        """nn.SiLU(inplace=True) and nn.Hardswish(inplace=True) after batch
        norm: autograd saves a clone of the activation's input, and may see
        it evicted, before the activation overwrites that input. The
        runtime rebuilds the clone before the write and keeps it: rebuilt
        after the write it was the activation's output, and the gradients
        were off by a factor of two or more."""
        def block(act):
            return nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), act)

        for act in (nn.SiLU, nn.Hardswish):
            for budget in (20_000, 80_000):
                torch.manual_seed(0)
                net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), block(act(inplace=True)), block(act(inplace=True)),
                                    block(act(inplace=True)), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
                x = torch.randn(4, 3, 16, 16)
                y = torch.randint(0, 5, (4,))
                m, d = self.step_both(net, x, y, budget)
                self.assertGreater(d.stats["recomputes"], 0)
                self.assert_same(net, m, "%s budget %d" % (act.__name__, budget))

    def test_gradients_match_storage_filled_in_place(self):
        """A tensor made by new_zeros, filled through slices in place and
        then read (Swin Transformer's attention mask): rematerialized by
        rerunning new_zeros alone it was zeros; the runtime replays the
        fills the forward made before the read."""
        class Masked(nn.Module):
            def __init__(self):
                super().__init__()
                self.c1 = nn.Conv2d(3, 8, 3, padding=1)
                self.c2 = nn.Conv2d(8, 8, 3, padding=1)
                self.head = nn.Linear(8, 5)

            def forward(self, x):
                h = torch.relu(self.c1(x))
                mask = h.new_zeros((16, 16))
                for i, (a, b) in enumerate(((0, 5), (5, 11), (11, 16))):
                    mask[a:b, :] = i + 1
                    mask[:, a:b] += i
                h = torch.relu(self.c2(h * mask.view(1, 1, 16, 16)))
                return self.head(h.mean((2, 3)))

        torch.manual_seed(0)
        net = Masked()
        x = torch.randn(4, 3, 16, 16)
        y = torch.randint(0, 5, (4,))
        for budget in (ACT // 2, ACT, 2 * ACT):
            m, d = self.step_both(net, x, y, budget, heuristic="lru")
            self.assertGreater(d.stats["recomputes"], 0)
            self.assert_same(net, m, "budget %d" % budget)
            net.zero_grad(set_to_none=True)

    def test_gradients_match_torchvision(self):
        """Two torchvision models with in-place activations, squeeze-excite
        blocks, layer scale and stochastic depth, under budgets that make
        the runtime evict and recompute: the gradients equal the plain
        step's."""
        try:
            import torchvision
        except ImportError:
            self.skipTest("torchvision not installed")
        for name, budget in (("mobilenet_v3_small", 2 << 20), ("convnext_tiny", 4 << 20)):
            torch.manual_seed(0)
            net = getattr(torchvision.models, name)(num_classes=5)
            x = torch.randn(2, 3, 64, 64)
            y = torch.randint(0, 5, (2,))
            m, d = self.step_both(net, x, y, budget)
            self.assertGreater(d.stats["recomputes"], 0, name)
            self.assert_same(net, m, name)

    def test_node_saved_tensors_acquired_together(self):
        """Before a backward node runs, all its saved tensors are resident
        at once (the resident ones locked while the evicted ones are
        rematerialized), also where rematerializing one (a max-pool's
        input) would evict another (its indices, old for lru): the node
        then unpacks nothing missing, and the gradients are the plain
        step's."""
        from remat_torch.dtr import Runtime

        net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1),
                            nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 5))
        x = torch.randn(4, 3, 16, 16)
        y = torch.randint(0, 5, (4,))
        checked, missing = [0], []
        orig = Runtime._acquire_node

        def spy(rt, node, saved):
            orig(rt, node, saved)
            rt.peek = (set(), [])
            try:
                for name in saved:
                    getattr(node, name)
            finally:
                missing.extend(rt.peek[1])
                rt.peek = None
            checked[0] += 1

        Runtime._acquire_node = spy
        try:
            m, d = self.step_both(net, x, y, 2 * ACT, heuristic="lru")
        finally:
            Runtime._acquire_node = orig
        self.assertGreater(d.stats["recomputes"], 0)
        self.assertGreater(checked[0], 0)
        self.assertEqual(missing, [])
        self.assert_same(net, m, "lru")

    def test_min_size_leaves_small_tensors(self):
        ref, x, y = self.cnn_case()
        m, d = self.step_both(ref, x, y, 0, min_size=10**9)
        self.assert_same(ref, m, "min_size above every tensor")
        self.assertEqual(d.stats["managed"], 0)
        self.assertEqual(d.stats["evictions"], 0)


@unittest.skipIf(torch is None, "torch not installed: remat_torch.dtr tests skipped (install python3-torch)")
class TestCompare(unittest.TestCase):
    """python3 -m remat_torch dtr (compare and format_compare) on the small
    CNN: sim is asked for the runtime's policy (its budget_bytes over the
    saved activations, its heuristic and evictee size), its no-recompute
    prediction is the plain step's measured peak (within 0.1%), its DTR
    prediction with lru the runtime's evictions, recomputes and managed
    peak, and the DTR step's measured peak (within 0.5%), and every row of
    the table is there."""

    def test_compare_small_cnn(self):
        import os
        import shutil

        from remat_torch import measure
        from remat_torch.dtr import compare, format_compare

        if not (os.environ.get("REMAT_SIM") or shutil.which("sim") or shutil.which("go")):
            self.skipTest("no sim binary and no go to build one")
        torch.manual_seed(0)
        torch.set_num_threads(1)
        x = torch.randn(16, 3, 32, 32)
        y = torch.randint(0, 5, (16,))
        sim = measure.Sim()
        calls = []
        run = sim._run

        def spy(args):
            calls.append(list(args))
            return run(args)

        sim._run = spy
        try:
            r = compare(cnn(), (x,), y, sim, budget="0.5", heuristic="lru", min_size=4096, runs=1, name="cnn")
        finally:
            sim.close()
        report = [c for c in calls if c and c[0] == "report"]
        self.assertEqual(len(report), 2, calls)  # none at the budget, then dtr at the runtime's budget_bytes
        args = report[1]
        self.assertEqual(args[args.index("--strategies") + 1], "dtr")
        self.assertEqual(args[args.index("--dtr-budget-scope") + 1], "saved")
        self.assertEqual(args[args.index("--budget") + 1], "%dB" % r["managed_budget"])
        self.assertEqual(args[args.index("--dtr-heuristic") + 1], "lru")
        self.assertEqual(args[args.index("--dtr-evictee-min-size") + 1], "4096")
        self.assertAlmostEqual(r["sim_none"]["peak_allocated"] / r["meas_none_peak"], 1, delta=1e-3,
                               msg="sim none vs plain step")
        self.assertEqual(r["sim_dtr"]["status"], "ok", r["sim_dtr"])
        self.assertGreater(r["managed_budget"], 0)
        # sim runs the runtime's policy, and lru's choices do not depend on
        # the measured op times: the same evictions and recomputes, the
        # saved activations' peak is the runtime's managed peak, and the
        # step's peak is the measured one
        sd, st = r["sim_dtr"], r["stats"]
        self.assertGreater(st["evictions"], 0)
        self.assertEqual((sd["evictions"], sd["recomputes"]), (st["evictions"], st["recomputes"]), sd)
        self.assertEqual(sd["saved_peak"], st["peak_bytes"], sd)
        self.assertAlmostEqual(sd["peak_allocated"] / r["meas_dtr_peak"], 1, delta=5e-3, msg=sd)
        self.assertTrue(r["grads"] and r["buffers"], r)
        text = format_compare(r)
        for row in ("sim none (predicted)", "sim dtr (predicted)", "plain step (measured)", "runtime dtr (measured)",
                    "measured dtr peak vs sim dtr prediction"):
            self.assertIn(row, text)


if __name__ == "__main__":
    unittest.main()
