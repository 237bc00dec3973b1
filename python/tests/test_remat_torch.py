"""Tests of remat_torch: trace, apply, and the plan check. They ask sim for
plans: $REMAT_SIM, `sim` on PATH, or a sim built once with `go build`."""

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - the runner skips
    torch = None

if torch is not None:
    import remat_torch
    from remat_torch import measure

SIM = None
TMP = None


def setUpModule():
    global SIM, TMP
    if torch is None:
        raise unittest.SkipTest("torch is not installed")
    if not (os.environ.get("REMAT_SIM") or shutil.which("sim") or shutil.which("go")):
        raise unittest.SkipTest("no sim binary and no go to build one")
    SIM = measure.Sim()
    TMP = tempfile.mkdtemp(prefix="remat-torch-test-")


def tearDownModule():
    if SIM is not None:
        SIM.close()
    if TMP is not None:
        shutil.rmtree(TMP, ignore_errors=True)


if torch is not None:

    class Block(nn.Module):
        """conv-BN-ReLU(inplace) twice with a residual add_ (torchvision's
        BasicBlock pattern)."""

        def __init__(self, c):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            y = self.relu(self.b1(self.c1(x)))
            y = self.b2(self.c2(y))
            y += x
            return self.relu(y)

    class TinyCNN(nn.Module):
        def __init__(self, c=8, classes=10):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(inplace=True))
            self.blocks = nn.Sequential(Block(c), Block(c), Block(c))
            self.drop = nn.Dropout(0.2)
            self.fc = nn.Linear(c, classes)

        def forward(self, x):
            x = self.blocks(self.stem(x))
            x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
            return self.fc(self.drop(x))

    class TinyEncoder(nn.Module):
        """A one-layer transformer encoder (dropout, layer norm, attention)."""

        def __init__(self, vocab=50, seq=8, d=16, classes=5):
            super().__init__()
            self.seq = seq
            self.embed = nn.Embedding(vocab, d)
            self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 2, 32, dropout=0.1, batch_first=True), 1,
                                             enable_nested_tensor=False)
            self.head = nn.Linear(d, classes)

        def forward(self, ids):
            return self.head(self.enc(self.embed(ids)).mean(dim=1))

    class TinyGPT(nn.Module):
        """Causal self-attention written out (views of recomputed bases, a
        mean whose node saves its input only for its shape)."""

        def __init__(self, vocab=40, d=16, seq=8, layers=2):
            super().__init__()
            self.seq = seq
            self.emb, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(1, seq, d))
            self.blocks = nn.ModuleList([nn.ModuleDict(dict(
                ln1=nn.LayerNorm(d), qkv=nn.Linear(d, 3 * d), proj=nn.Linear(d, d), ln2=nn.LayerNorm(d),
                fc=nn.Linear(d, 4 * d), out=nn.Linear(4 * d, d), drop=nn.Dropout(0.1))) for _ in range(layers)])
            self.head = nn.Linear(d, vocab)

        def forward(self, ids):
            x = self.emb(ids) + self.pos
            t = x.shape[1]
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
            for b in self.blocks:
                q, k, v = b["qkv"](b["ln1"](x)).chunk(3, -1)
                a = ((q @ k.transpose(1, 2)) / x.shape[2] ** 0.5).masked_fill(mask, float("-inf")).softmax(-1)
                x = x + b["drop"](b["proj"](a @ v))
                x = x + b["drop"](b["out"](F.gelu(b["fc"](b["ln2"](x)))))
            return self.head(x.mean(1))

    class TinyConvNeXt(nn.Module):
        """ConvNeXt in miniature: a 4x4 stride-4 stem, a block (7x7
        depthwise convolution, layer norm and MLP on the channels-last view
        its permute gives, residual add) and a 2x2 stride-2 downsampling
        whose input is channels-last even when the model is not."""

        def __init__(self, c=32, classes=10):
            super().__init__()
            self.stem = nn.Conv2d(3, c, 4, stride=4)
            self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
            self.norm = nn.LayerNorm(c)
            self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
            self.down = nn.Conv2d(c, 2 * c, 2, stride=2)
            self.head = nn.Linear(2 * c, classes)

        def forward(self, x):
            x = self.stem(x)
            y = self.norm(self.dw(x).permute(0, 2, 3, 1))
            y = self.fc2(F.gelu(self.fc1(y))).permute(0, 3, 1, 2)
            return self.head(self.down(y + x).mean((2, 3)))

    class TinyDilated(nn.Module):
        """Dilated convolutions on an image smaller than their dilated
        kernels, dense and depthwise (DeepLab's pattern): oneDNN's
        GEMM-based weight gradients."""

        def __init__(self, c=32, classes=10):
            super().__init__()
            self.stem = nn.Conv2d(3, c, 3, stride=2, padding=1)
            self.dil = nn.Conv2d(c, c, 3, padding=2, dilation=2)
            self.dw = nn.Conv2d(c, c, 3, padding=2, dilation=2, groups=c)
            self.head = nn.Linear(c, classes)

        def forward(self, x):
            x = F.relu(self.stem(x))
            x = F.relu(self.dw(F.relu(self.dil(x))))
            return self.head(x.mean((2, 3)))

    class RandomMask(nn.Module):
        """Multiplies by a mask drawn with rand_like (an out-of-place random
        op a plan may recompute)."""

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 6)

        def forward(self, x):
            h = self.lin(x)
            mask = torch.rand_like(h) > 0.5
            return self.lin(h * mask)


def cnn_case(batch=2, image=8):
    torch.manual_seed(0)
    return TinyCNN(), torch.randn(batch, 3, image, image), torch.randint(0, 10, (batch,))


def plan_for(model, x, y, strategy, budget=None):
    g = remat_torch.trace(copy.deepcopy(model), x, y)
    path = os.path.join(TMP, "g.json")
    remat_torch.write_graph(g, path)
    return g, path, SIM.plan(path, strategy, budget, ("--device", "cpu", "--allocator", "ideal"))


def check_step(test, model, x, y, plan, seed=7):
    """Gradients and buffers of the applied step equal the plain step's."""
    ref = copy.deepcopy(model)
    m = copy.deepcopy(model)
    applied = remat_torch.apply(m, plan, (x,))
    gok, bok, worst = measure.grads_match(ref, m, (x,), y, F.cross_entropy, applied, seed=seed)
    test.assertTrue(gok, "gradients differ (max relative difference %g)" % worst)
    test.assertTrue(bok, "buffers (batch-norm statistics) differ")
    return applied


def check_plans(test, model, x, y, strategies, also=None):
    """Each strategy's plan for model, applied in a subtest: check_step
    (gradients and buffers match the plain step), nothing recomputed on
    demand (the plan's own recomputes gave every tensor a backward read),
    then also(applied) when given."""
    for s in strategies:
        with test.subTest(strategy=s):
            _, _, plan = plan_for(model, x, y, s)
            applied = check_step(test, model, x, y, plan)
            if also is not None:
                also(applied)
            test.assertEqual(applied.stats["on_demand"], 0, applied.stats)


class TraceTest(unittest.TestCase):
    def test_forward_links(self):
        model, x, y = cnn_case()
        g = remat_torch.trace(model, x, y)
        ops = g["ops"]
        linked = [o for o in ops if o["phase"] == "backward" and "forward" in o]
        self.assertTrue(linked, "no backward op carries a forward link")
        for o in linked:
            f = ops[o["forward"]]
            self.assertEqual(f["phase"], "forward", o["name"])
        # Every kernel that reads a saved activation is linked to a forward op.
        acts = {t["id"] for t in g["tensors"] if t["kind"] == "activation"}
        for o in ops:
            # ones_like seeds backward with the loss: it runs in no node.
            if o["phase"] == "backward" and o["type"] != "ones_like" and any(i in acts for i in o["inputs"]):
                self.assertIn("forward", o, "%s reads an activation but has no forward link" % o["name"])
        by_type = {}
        for o in linked:
            by_type.setdefault(o["type"], set()).add(ops[o["forward"]]["type"])
        self.assertEqual(by_type["convolution_backward"], {"convolution"})
        self.assertEqual(by_type["native_batch_norm_backward"], {"native_batch_norm"})

    def test_node_holds_its_inputs_to_the_end(self):
        """A backward node keeps what it was given (its saved tensors, the
        gradients the engine passed it) until it returns: the trace lists
        them as inputs of the node's last kernel. BmmBackward's second
        product still holds the mat2 its first one read, so an attention's
        v lives until both products exist."""
        torch.manual_seed(0)
        model = TinyGPT(d=32, seq=32)
        x, y = torch.randint(0, 40, (4, 32)), torch.randint(0, 40, (4,))
        g = remat_torch.trace(model, x, y)
        ops = g["ops"]
        producer = {t["id"]: t.get("producer", -1) for t in g["tensors"]}
        # a node's kernels: consecutive backward ops with the same forward link
        groups, checked = [], 0
        for o in ops:
            if o["phase"] != "backward" or "forward" not in o:
                continue
            if groups and groups[-1][-1]["forward"] == o["forward"] and groups[-1][-1]["id"] == o["id"] - 1:
                groups[-1].append(o)
            else:
                groups.append([o])
        for grp in groups:
            first = grp[0]["id"]
            held = {i for k in grp for i in k["inputs"] if producer[i] < first}
            missing = held - set(grp[-1]["inputs"])
            self.assertFalse(missing, "node of %s: its last kernel %s does not hold %s"
                             % (ops[grp[0]["forward"]]["name"], grp[-1]["name"], sorted(missing)))
            if len(grp) > 1 and ops[grp[0]["forward"]]["type"] == "bmm":
                checked += 1
        self.assertGreater(checked, 0, "no bmm node with several kernels")
        # and the simulated peak of the trace is PyTorch's
        rows = measure.measure_strategies(model, (x,), y, ["none"], SIM, name="tinygpt", runs=1)
        err = abs(rows[0]["pred_peak"] - rows[0]["meas_peak"]) / rows[0]["meas_peak"]
        self.assertLess(err, 1e-4, "predicted %d, measured %d" % (rows[0]["pred_peak"], rows[0]["meas_peak"]))

    def test_op_costs(self):
        """The ops carry what the cost model prices them by: FLOPs of the
        convolutions and matrix products, bytes read and written of the
        others; views move nothing."""
        model, x, y = cnn_case(batch=2, image=8)
        g = remat_torch.trace(model, x, y)
        ops, tensors = g["ops"], g["tensors"]

        def elems(tid):
            n = 1
            for d in tensors[tid]["shape"]:
                n *= d
            return n

        stem = ops[0]
        self.assertEqual(stem["type"], "convolution")
        # 2 x 8 x 8 x 8 outputs, each 3 input channels x 3 x 3 multiply-adds
        self.assertEqual(stem["flops"], 2 * (2 * 8 * 8 * 8) * (3 * 3 * 3))
        fc = [o for o in ops if o["type"] == "addmm" and o["phase"] == "forward"]
        self.assertEqual(len(fc), 1)
        self.assertEqual(fc[0]["flops"], 2 * 2 * 8 * 10)  # [2, 8] x [8, 10]
        conv_bw = [o for o in ops if o["type"] == "convolution_backward"]
        self.assertTrue(conv_bw)
        for o in conv_bw:
            self.assertGreater(o["flops"], 0, o["name"])
        kinds = set()
        for o in ops:
            views = all("alias_of" in tensors[t] for t in o["outputs"])
            inplace = "inplace" in o.get("flags", [])
            if views and not inplace:
                self.assertNotIn("bytes_accessed", o, o["name"])
                kinds.add("view")
            elif o["type"] == "relu_":
                # reads its argument and writes it back: 4-byte floats
                self.assertEqual(o["bytes_accessed"], 4 * 2 * elems(o["outputs"][0]), o["name"])
                kinds.add("relu_")
            elif o["type"] == "threshold_backward":
                # reads the gradient and the ReLU's output, writes the result
                self.assertEqual(o["bytes_accessed"], 4 * 3 * elems(o["outputs"][0]), o["name"])
                kinds.add("threshold_backward")
            elif o["type"] not in ("empty", "empty_like"):
                self.assertGreater(o.get("bytes_accessed", 0), 0, o["name"])
        self.assertEqual(kinds, {"view", "relu_", "threshold_backward"})

    def test_sim_reads_the_trace(self):
        model, x, y = cnn_case()
        g, path, plan = plan_for(model, x, y, "none")
        self.assertEqual(len(plan["signature"]), len(g["ops"]))
        self.assertTrue(plan["signature"][0].startswith("forward convolution "))


def convnext_case(channels_last, batch=2, image=32):
    torch.manual_seed(0)
    model, x = TinyConvNeXt(), torch.randn(batch, 3, image, image)
    if channels_last:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    return model, x, torch.randint(0, 10, (batch,))


class ChannelsLastTest(unittest.TestCase):
    """Convolutions on channels-last tensors: the trace marks them and sim's
    CPU model predicts their buffers (sim/workspace.go, cpuChannelsLast)."""

    def test_trace_records_conv_attrs(self):
        for cl in (False, True):
            model, x, y = convnext_case(cl)
            g = remat_torch.trace(model, x, y)
            convs = {o["name"]: o.get("attrs", {}) for o in g["ops"] if o["type"] == "convolution"}
            self.assertEqual(len(convs), 3)
            stem, dw, down = (convs[k] for k in sorted(convs, key=lambda n: int(n.split("#")[1])))
            with self.subTest(channels_last=cl):
                self.assertEqual((stem["stride"], stem["padding"], stem["dilation"], stem["groups"]), ("4,4", "0,0", "1,1", "1"))
                self.assertEqual((dw["stride"], dw["padding"], dw["groups"]), ("1,1", "3,3", "32"))
                # the permuted block output makes the downsampling's input
                # channels-last in either case
                self.assertEqual(down.get("memory_format"), "channels_last")
                self.assertEqual(stem.get("memory_format"), "channels_last" if cl else "contiguous")
                self.assertEqual(dw.get("memory_format"), "channels_last" if cl else "contiguous")
                # a model moved to channels-last has channels-last weights
                # (a depthwise weight is both layouts at once: contiguous)
                self.assertEqual(stem.get("weight_format"), "channels_last" if cl else "contiguous")
                self.assertEqual(down.get("weight_format"), "channels_last" if cl else "contiguous")
                self.assertEqual(dw.get("weight_format"), "contiguous")
                self.assertNotIn("transposed", dw)

    def test_prediction_matches(self):
        for cl in (False, True):
            model, x, y = convnext_case(cl)
            rows = measure.measure_strategies(model, (x,), y, ["none"], SIM, name="tinyconvnext", runs=1)
            r = rows[0]
            with self.subTest(channels_last=cl):
                self.assertNotIn("error", r)
                self.assertLess(abs(r["pred_peak"] - r["meas_peak"]) / r["meas_peak"], 1e-3,
                                "predicted %d, measured %d" % (r["pred_peak"], r["meas_peak"]))

    def test_prediction_matches_avx2(self):
        """The same with oneDNN held to AVX2 (ONEDNN_MAX_CPU_ISA, read once
        per process: a child process), which sim_env passes on to sim as
        cpu.isa avx2."""
        if measure.onednn_isa() is None:
            self.skipTest("no /proc/cpuinfo: the instruction set is unknown")
        code = (
            "import json, sys\n"
            "from tests.test_remat_torch import convnext_case\n"
            "from remat_torch import measure\n"
            "sim = measure.Sim()\n"
            "model, x, y = convnext_case(True)\n"
            "r = measure.measure_strategies(model, (x,), y, ['none'], sim, name='avx2', runs=1)[0]\n"
            "print(json.dumps([r.get('pred_peak'), r.get('meas_peak'), r.get('error')]))\n"
        )
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2", REMAT_SIM=SIM.path,
                   PYTHONPATH=os.pathsep.join([here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        pred, meas, err = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertIsNone(err)
        self.assertLess(abs(pred - meas) / meas, 1e-3, "predicted %d, measured %d" % (pred, meas))

    def test_onnx_route_with_the_setting(self):
        """An ONNX graph records no memory format: sim report --onnx with
        --conv-memory-format channels_last predicts the channels-last
        model's step (SGD, as the ONNX import appends by default)."""
        model, x, y = convnext_case(True)
        path = os.path.join(TMP, "tinyconvnext.onnx")
        torch.onnx.export(copy.deepcopy(model).train(), (x,), path, export_params=False,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["input"], output_names=["output"], dynamic_axes={"input": {0: "batch"}})
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        step = measure.make_step(model, model, (x,), y, F.cross_entropy, opt)
        step()  # warm-up, as the measured tables
        opt.zero_grad(set_to_none=True)
        measured = measure.profiled_peak(step)
        resident = measure.resident_bytes(model, (x, y), opt)
        for fmt, want in (("channels_last", True), ("contiguous", False)):
            row = SIM.report(path, "none", common=("--device", "cpu", "--allocator", "ideal", "--batch", str(x.shape[0]),
                                                   "--conv-memory-format", fmt), source="--onnx")
            err = abs(row["peak_allocated"] - resident - measured) / measured
            with self.subTest(conv_memory_format=fmt):
                if want:
                    self.assertLess(err, 1e-3, "predicted %d, measured %d" % (row["peak_allocated"] - resident, measured))
                else:
                    self.assertGreater(err, 0.05, "the contiguous model is not this model's")

    def test_onednn_isa(self):
        d = tempfile.mkdtemp(prefix="remat-isa-")
        try:
            info = os.path.join(d, "cpuinfo")
            with open(info, "w") as f:
                f.write("processor : 0\nflags : fpu sse avx2 avx512f avx512dq avx512bw avx512vl\n")
            self.assertEqual(measure.onednn_isa({}, info), "avx512")
            self.assertEqual(measure.onednn_isa({"ONEDNN_MAX_CPU_ISA": "AVX2"}, info), "avx2")
            self.assertEqual(measure.onednn_isa({"DNNL_MAX_CPU_ISA": "avx512_core_vnni"}, info), "avx512")
            self.assertEqual(measure.onednn_isa({"ONEDNN_MAX_CPU_ISA": "ALL"}, info), "avx512")
            with open(info, "w") as f:
                f.write("flags : fpu sse avx2 avx512f\n")  # no avx512_core
            self.assertEqual(measure.onednn_isa({}, info), "avx2")
            self.assertIsNone(measure.onednn_isa({}, os.path.join(d, "missing")))
        finally:
            shutil.rmtree(d, ignore_errors=True)


class ConvKernelsTest(unittest.TestCase):
    """sim's CPU model of the convolution kernels PyTorch picks: oneDNN's
    GEMM-based weight gradient for dilated convolutions on small images
    and 3-D ones on short clips (sim/workspace.go, gemmWeightGrad), and
    slow_conv_transpose2d's columns for transposed ones (cpuConvTranspose)."""

    def test_transposed_prediction_matches(self):
        for cl in (False, True):
            torch.manual_seed(0)
            model = nn.Sequential(nn.ConvTranspose2d(16, 32, 4, 1, 0), nn.BatchNorm2d(32), nn.ReLU(True),
                                  nn.ConvTranspose2d(32, 16, 4, 2, 1), nn.ReLU(True), nn.ConvTranspose2d(16, 3, 4, 2, 1),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 10))
            x, y = torch.randn(4, 16, 1, 1), torch.randint(0, 10, (4,))
            if cl:
                model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
            r = measure.measure_strategies(model, (x,), y, ["none"], SIM, name="tinygenerator", runs=1)[0]
            with self.subTest(channels_last=cl):
                self.assertNotIn("error", r)
                self.assertLess(abs(r["pred_peak"] - r["meas_peak"]) / r["meas_peak"], 1e-3,
                                "predicted %d, measured %d" % (r["pred_peak"], r["meas_peak"]))

    def test_conv3d_prediction_matches(self):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv3d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv3d(16, 32, 3, stride=2, padding=1),
                              nn.ReLU(), nn.Conv3d(32, 32, 3, padding=1), nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(32, 10))
        x, y = torch.randn(2, 3, 4, 16, 16), torch.randint(0, 10, (2,))
        r = measure.measure_strategies(model, (x,), y, ["none"], SIM, name="tinyvideo", runs=1)[0]
        self.assertNotIn("error", r)
        self.assertLess(abs(r["pred_peak"] - r["meas_peak"]) / r["meas_peak"], 1e-3,
                        "predicted %d, measured %d" % (r["pred_peak"], r["meas_peak"]))

    def test_dilated_prediction_matches(self):
        for cl in (False, True):
            torch.manual_seed(0)
            model, x = TinyDilated(), torch.randn(2, 3, 8, 8)
            if cl:
                model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
            y = torch.randint(0, 10, (2,))
            r = measure.measure_strategies(model, (x,), y, ["none"], SIM, name="tinydilated", runs=1)[0]
            with self.subTest(channels_last=cl):
                self.assertNotIn("error", r)
                self.assertLess(abs(r["pred_peak"] - r["meas_peak"]) / r["meas_peak"], 1e-3,
                                "predicted %d, measured %d" % (r["pred_peak"], r["meas_peak"]))


class InplaceTwinTest(unittest.TestCase):
    """Backward formulas that fill a fresh zero tensor in place (gather,
    index_select, advanced indexing, topk) run their out-of-place twin under a
    dispatch mode; the tracer and the applier run the in-place op the step
    runs without one (trace.InplaceTwins). Without that, the trace predicted
    23% above a plain step's peak, and an applied plan measured that much
    above the plain step too."""

    def test_index_backward_prediction_matches(self):
        class Net(nn.Module):
            def __init__(self, how):
                super().__init__()
                self.how, self.emb, self.fc, self.out = how, nn.Embedding(100, 64), nn.Linear(64, 64), nn.Linear(64, 5)

            def forward(self, ids):
                h = self.fc(self.emb(ids))
                rev = torch.arange(h.shape[1] - 1, -1, -1)
                if self.how == "gather":
                    h = torch.gather(h, 2, torch.arange(63, -1, -1).expand(h.shape[0], h.shape[1], 64))
                elif self.how == "index_select":
                    h = torch.index_select(h, 1, rev)
                elif self.how == "topk":
                    h = torch.topk(h, 16, dim=-1)[0].repeat(1, 1, 4)
                else:
                    h = h[:, rev]
                return self.out(h.mean(1))

        twins = {"gather": "scatter_add_", "index_select": "index_add_", "index": "index_put_", "topk": "scatter_"}
        for how, kernel in twins.items():
            torch.manual_seed(0)
            x, y = torch.randint(0, 100, (8, 32)), torch.randint(0, 5, (8,))
            g = remat_torch.trace(Net(how), x, y)
            ops = [o for o in g["ops"] if o["type"] == kernel and o["phase"] == "backward"]
            with self.subTest(how=how):
                self.assertEqual(len(ops), 1, [o["type"] for o in g["ops"]])
                self.assertIn("inplace", ops[0].get("flags", []))
                out = g["tensors"][ops[0]["outputs"][0]]
                self.assertEqual(out.get("alias_of"), g["tensors"][ops[0]["inputs"][0]]["id"])
            # the plain step, no mode anywhere
            m = Net(how)
            opt = torch.optim.SGD(m.parameters(), lr=0.01)
            step = measure.make_step(m, m, (x,), y, F.cross_entropy, opt)
            step()
            opt.zero_grad(set_to_none=True)
            plain = measure.resident_bytes(m, (x, y), opt) + measure.profiled_peak(step)
            for r in measure.measure_strategies(Net(how), (x,), y, ["none", "chen-sqrt"], SIM, name=how, runs=1):
                with self.subTest(how=how, strategy=r["strategy"]):
                    self.assertNotIn("error", r)
                    self.assertTrue(r["grads"])
                    self.assertLess(abs(r["pred_peak"] - r["meas_peak"]) / r["meas_peak"], 1e-3,
                                    "predicted %d, measured %d" % (r["pred_peak"], r["meas_peak"]))
                    if r["strategy"] == "none":
                        self.assertLess(abs(r["meas_peak"] - plain) / plain, 1e-3,
                                        "applied plan without recomputes %d, plain step %d" % (r["meas_peak"], plain))


    def test_bce_with_logits_loss(self):
        """A per-pixel nn.BCEWithLogitsLoss: its forward kernel holds five
        tensors of the logits' size below what the trace sees (sim counts
        them), and its backward input.sigmoid().sub_(target).mul_(grad) is
        out of place under a mode (the tracer and the applier run it in
        place). Without both the prediction was 55% low."""
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1))  # the loss's temporaries make the peak
        x, y = torch.randn(4, 3, 32, 32), torch.rand(4, 16, 32, 32)
        loss = nn.BCEWithLogitsLoss()
        g = remat_torch.trace(copy.deepcopy(model), x, y, loss_fn=loss)
        kinds = [(o["type"], "inplace" in o.get("flags", [])) for o in g["ops"]
                 if o["phase"] == "backward" and o.get("forward") is not None
                 and g["ops"][o["forward"]]["type"] == "binary_cross_entropy_with_logits"]
        self.assertIn(("sub_", True), kinds)
        self.assertIn(("mul_", True), kinds)
        m = copy.deepcopy(model)
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        step = measure.make_step(m, m, (x,), y, loss, opt)
        step()
        opt.zero_grad(set_to_none=True)
        plain = measure.resident_bytes(m, (x, y), opt) + measure.profiled_peak(step)
        for r in measure.measure_strategies(copy.deepcopy(model), (x,), y, ["none", "chen-sqrt"], SIM, loss_fn=loss, name="bce", runs=1):
            with self.subTest(strategy=r["strategy"]):
                self.assertNotIn("error", r)
                self.assertLess(abs(r["pred_peak"] - r["meas_peak"]) / r["meas_peak"], 1e-3,
                                "predicted %d, measured %d" % (r["pred_peak"], r["meas_peak"]))
                if r["strategy"] == "none":
                    self.assertLess(abs(r["meas_peak"] - plain) / plain, 1e-3, "applied %d, plain %d" % (r["meas_peak"], plain))


class LayerFidelityTest(unittest.TestCase):
    """tools/layer_fidelity.py: the layer families without a convolution
    (whose oneDNN buffers depend on the machine) are exact on both routes,
    and the tool writes its table."""

    def test_layer_families(self):
        import importlib.util
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        spec = importlib.util.spec_from_file_location("layer_fidelity", os.path.join(root, "tools", "layer_fidelity.py"))
        lf = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(lf)
        exact = ["conv1d", "pool1d", "maximum", "minimum_broadcast", "pow_tensor", "pow_constant_exponent", "std",
                 "std_biased", "layernorm_no_affine", "layernorm_no_bias", "batchnorm1d_rows", "batchnorm1d_sequence", "logsoftmax",
                 "logsumexp", "norm", "normalize", "max_dim", "topk", "sort", "gather", "scatter", "scatter_add", "tril", "bce_with_logits",
                 "chunk_swiglu", "batched_matmul", "stack"]
        # within 0.5% on the ONNX route: the import runs ATen's
        # decomposition of cosine_similarity and saves the same tensors
        # (tools/fidelity -compare), but sim's model of the division's
        # backward has one norm-sized gradient (1 KiB of 580) live at
        # another point than ATen's formula; setitem's index tensors are
        # constants of the import, resident from the start
        close = ["cosine_similarity", "setitem"]
        out = os.path.join(TMP, "layers.md")
        lf.main(["--cases", ",".join(exact + close + ["mse"]), "--out", out])
        with open(out) as f:
            rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in f if line.startswith("| ") and " | " in line}
        for name in exact + close:
            with self.subTest(case=name):
                onnx, exporter = rows[name][3].strip(), rows[name][4].strip(" |\n")
                if name in close:
                    self.assertLess(abs(float(onnx.rstrip("%"))), 0.5, rows[name])
                else:
                    self.assertIn(onnx, ("-0.0%", "+0.0%"), rows[name])
                self.assertIn(exporter, ("-0.0%", "+0.0%"), rows[name])
        self.assertIn("failed (torch.onnx:", rows["mse"][3])


class HoldTest(unittest.TestCase):
    """A storage PyTorch frees later than its last reader (inside a
    composite op, or held by a module's Python frame) is held to its death
    in the trace (_Recorder.hold_to_death)."""

    def test_bidirectional_rnn_prediction_matches(self):
        class Net(nn.Module):
            def __init__(self, cls):
                super().__init__()
                self.emb = nn.Embedding(50, 16)
                self.rnn = cls(16, 64, batch_first=True, bidirectional=True)
                self.fc = nn.Linear(128, 10)

            def forward(self, ids):
                return self.fc(self.rnn(self.emb(ids))[0][:, -1])

        # Before: measured above the prediction (aten::gru holds each
        # direction's input projection and final state until it returns);
        # these by 4.4% (GRU) and 2.0% (LSTM).
        for cls in (nn.GRU, nn.LSTM):
            torch.manual_seed(0)
            x, y = torch.randint(0, 50, (8, 16)), torch.randint(0, 10, (8,))
            rows = measure.measure_strategies(Net(cls), (x,), y, ["none", "chen-sqrt"], SIM, name="birnn", runs=1)
            for r in rows:
                with self.subTest(layer=cls.__name__, strategy=r["strategy"]):
                    self.assertNotIn("error", r)
                    self.assertTrue(r["grads"])
                    self.assertLess(abs(r["pred_peak"] - r["meas_peak"]) / r["meas_peak"], 1e-3,
                                    "predicted %d, measured %d" % (r["pred_peak"], r["meas_peak"]))

    def test_python_frame_holds(self):
        """An attention written with torch.einsum keeps q, k and v (views
        of the projection) as locals until its forward returns, past their
        last reader: measured 3.4% above the prediction before the holds."""
        class Attn(nn.Module):
            def __init__(self, d=64, h=4):
                super().__init__()
                self.h, self.qkv, self.o, self.fc = h, nn.Linear(d, 3 * d), nn.Linear(d, d), nn.Linear(d, 10)

            def forward(self, x):
                b, t, d = x.shape
                q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
                a = torch.einsum("bhqd,bhkd->bhqk", q, k).mul(d ** -0.5).softmax(-1)
                y = torch.einsum("bhqk,bhkd->bqhd", a, v).reshape(b, t, d)
                return self.fc(self.o(y).mean(1))

        torch.manual_seed(0)
        x, y = torch.randn(4, 32, 64), torch.randint(0, 10, (4,))
        for r in measure.measure_strategies(Attn(), (x,), y, ["none", "chen-sqrt"], SIM, name="einsum", runs=1):
            with self.subTest(strategy=r["strategy"]):
                self.assertNotIn("error", r)
                self.assertTrue(r["grads"])
                self.assertLess(abs(r["pred_peak"] - r["meas_peak"]) / r["meas_peak"], 1e-3,
                                "predicted %d, measured %d" % (r["pred_peak"], r["meas_peak"]))

    def test_backward_formula_temporaries(self):
        """DivBackward's -grad * self / (other * other) keeps its C++
        temporaries to the end of the expression: held in the backward too
        (nn.LocalResponseNorm divides by a function of its input; 10.5% low
        without)."""
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.LocalResponseNorm(5), nn.AdaptiveAvgPool2d(1),
                              nn.Flatten(), nn.Linear(16, 10))
        x, y = torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,))
        r = measure.measure_strategies(model, (x,), y, ["none"], SIM, name="lrn", runs=1)[0]
        self.assertNotIn("error", r)
        self.assertLess(abs(r["pred_peak"] - r["meas_peak"]) / r["meas_peak"], 1e-3,
                        "predicted %d, measured %d" % (r["pred_peak"], r["meas_peak"]))

    def test_holds_are_recorded(self):
        """The first direction's projection is held (attribute holds) by the
        op recorded just before PyTorch freed it, after its last reader."""
        torch.manual_seed(0)
        model = nn.GRU(8, 16, bidirectional=True)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn, self.fc = model, nn.Linear(32, 4)

            def forward(self, x):
                return self.fc(self.rnn(x)[0][-1])

        g = remat_torch.trace(Net(), torch.randn(5, 2, 8), torch.randint(0, 4, (2,)))
        shape = {t["id"]: t.get("shape") for t in g["tensors"]}
        # each direction's input projection: addmm over all 5 x 2 steps
        projs = [o for o in g["ops"] if o["phase"] == "forward" and o["type"] == "addmm" and shape[o["outputs"][0]] == [10, 48]]
        self.assertEqual(len(projs), 2, [o["type"] for o in g["ops"] if o["phase"] == "forward"])
        proj = projs[0]["outputs"][0]
        holders = [o["id"] for o in g["ops"] if str(proj) in o.get("attrs", {}).get("holds", "").split(",")]
        self.assertEqual(len(holders), 1)
        self.assertGreaterEqual(holders[0], projs[1]["id"], "held until the second direction's projection exists")
        self.assertLess(max(o["id"] for o in g["ops"] if proj in o["inputs"]), holders[0], "a hold, not a reader")


class OnnxRouteTest(unittest.TestCase):
    """sim report --onnx on torch.onnx's export of layers the ONNX import
    maps since it reads GRU, RNN, InstanceNormalization, PRelu and
    DepthToSpace, and fuses nn.GroupNorm's and nn.SiLU's exports: the
    prediction against the measured step (SGD, as the import appends)."""

    def onnx_error(self, model, x, y, name, flags=()):
        path = os.path.join(TMP, name + ".onnx")
        torch.onnx.export(copy.deepcopy(model).train(), (x,), path, export_params=False,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["input"], output_names=["output"], dynamic_axes={"input": {0: "batch"}})
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        step = measure.make_step(model, model, (x,), y, F.cross_entropy, opt)
        step()
        opt.zero_grad(set_to_none=True)
        measured = measure.profiled_peak(step)
        resident = measure.resident_bytes(model, (x, y), opt)
        row = SIM.report(path, "none", common=("--device", "cpu", "--allocator", "ideal", "--batch", str(x.shape[0])) + tuple(flags),
                         source="--onnx")
        return (row["peak_allocated"] - resident - measured) / measured, row["peak_allocated"] - resident, measured

    def test_frozen_buffers_and_chunk(self):
        """Rotary position embeddings multiply q and k by cos and sin
        tables that are registered buffers, and rotate halves made by
        torch.chunk. An ONNX file does not tell buffers from parameters, so
        each Mul kept q (or k) for the tables' gradient (+83%); with
        --frozen naming them the import keeps what PyTorch keeps. torch's
        export of chunk (Slices sharing their bounds) is one split whose
        backward makes one gradient, as SplitBackward does; converted
        Slice by Slice it was +10.9% (one zero-padded gradient per half,
        summed)."""
        def rotate_half(x):
            a, b = x.chunk(2, dim=-1)
            return torch.cat((-b, a), dim=-1)

        class Rotary(nn.Module):
            def __init__(self, d=64, t=16):
                super().__init__()
                self.q, self.k, self.fc = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, 10)
                f = torch.outer(torch.arange(t).float(), torch.arange(d // 2).float() / d)
                self.register_buffer("cos", torch.cat([f, f], -1).cos())
                self.register_buffer("sin", torch.cat([f, f], -1).sin())

            def forward(self, x):
                # one expression: a Python local would hold its tensor to
                # the end of the call, which no ONNX graph records
                att = torch.softmax((self.q(x) * self.cos + rotate_half(self.q(x)) * self.sin) @
                                    (self.k(x) * self.cos + rotate_half(self.k(x)) * self.sin).transpose(1, 2), -1)
                return self.fc((att @ x).mean(1))

        torch.manual_seed(0)
        x, y = torch.randn(8, 16, 64), torch.randint(0, 10, (8,))
        err, pred, meas = self.onnx_error(Rotary(), x, y, "rotary", ("--frozen", "cos,sin"))
        self.assertLess(abs(err), 1e-3, "predicted %d, measured %d" % (pred, meas))
        err, _, _ = self.onnx_error(Rotary(), x, y, "rotary")
        self.assertGreater(err, 0.5, "the tables as parameters keep q and k")

    def test_recurrent(self):
        class Net(nn.Module):
            def __init__(self, cls, **kw):
                super().__init__()
                self.emb = nn.Embedding(50, 16)
                self.rnn = cls(16, 32, batch_first=True, **kw)
                self.fc = nn.Linear(32 * (2 if kw.get("bidirectional") else 1), 10)

            def forward(self, ids):
                return self.fc(self.rnn(self.emb(ids))[0][:, -1])

        # Before: GRU and RNN unsupported, and bidirectional layers low
        # until the import held what the layer keeps to its end (its input,
        # projections and final states; docs/onnx.md).
        for name, cls, kw in (("gru", nn.GRU, {}), ("gru_bi", nn.GRU, {"bidirectional": True}),
                              ("rnn", nn.RNN, {"nonlinearity": "relu"}), ("lstm_bi", nn.LSTM, {"bidirectional": True})):
            torch.manual_seed(0)
            err, pred, meas = self.onnx_error(Net(cls, **kw), torch.randint(0, 50, (8, 12)), torch.randint(0, 10, (8,)), name)
            with self.subTest(layer=name):
                self.assertLess(abs(err), 0.01, "predicted %d, measured %d" % (pred, meas))

    def test_normalization_and_upsampling(self):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU(), nn.Conv2d(16, 32, 3, padding=1),
                              nn.InstanceNorm2d(32, affine=True), nn.PReLU(32), nn.PixelShuffle(2), nn.Conv2d(8, 8, 3, padding=1),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
        # Before: InstanceNormalization, PRelu and DepthToSpace unsupported.
        err, pred, meas = self.onnx_error(model, torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,)), "norms")
        self.assertLess(abs(err), 1e-3, "predicted %d, measured %d" % (pred, meas))

    def test_elementwise_formulas(self):
        """Element-wise ops whose backward formula computes a function of
        the input first (a hand-written tanh GELU's pow, erf, sqrt, abs,
        sin, reciprocal, rsqrt) hold those temporaries (15% low without);
        rsqrt is exported as Sqrt then Div(1, .) and imported as the one op
        (RMSNorm's normalizer)."""
        class Net(nn.Module):
            def __init__(self, d=32):
                super().__init__()
                self.l1, self.l2, self.fc = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, 10)

            def forward(self, x):
                h = self.l1(x)
                h = 0.5 * h * (1 + torch.tanh(0.79788456 * (h + 0.044715 * torch.pow(h, 3.0))))
                h = self.l2(h)
                h = torch.erf(h) + torch.sqrt(h.abs() + 1) + torch.sin(h) + torch.cos(h) + torch.reciprocal(h * h + 1) + torch.rsqrt(h * h + 1)
                return self.fc(h.mean(1))

        torch.manual_seed(0)
        err, pred, meas = self.onnx_error(Net(), torch.randn(4, 16, 32), torch.randint(0, 10, (4,)), "elementwise")
        self.assertLess(abs(err), 1e-3, "predicted %d, measured %d" % (pred, meas))

    def test_binary_formulas(self):
        """torch.maximum and torch.minimum (each input's gradient a where
        and a masked_fill at the output's size, also for a broadcast
        operand), pow by a tensor exponent (which saves its result too)
        with the base, the exponent or both needing gradients, and
        nn.LayerNorm without affine parameters (fused as layer_norm). Before,
        in this order: 23%, 38%, 47%, 50%, 52% low and 48% high."""
        class Net(nn.Module):
            def __init__(self, how):
                super().__init__()
                self.how = how
                self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(3, 8, 1)
                self.ln = nn.LayerNorm(16, elementwise_affine=False)
                self.fc = nn.Linear(8, 10)

            def forward(self, x):
                a, b = self.c1(x), self.c2(x)
                k = torch.full((1, 8, 1, 1), 1.7)
                h = {"maximum": lambda: torch.maximum(a, b),
                     "minimum_broadcast": lambda: torch.minimum(a, b.mean((2, 3), keepdim=True)),
                     "pow_both": lambda: torch.pow(torch.sigmoid(a) + 0.5, torch.sigmoid(b)),
                     "pow_base": lambda: torch.pow(torch.sigmoid(a) + 0.5, k),
                     "pow_exponent": lambda: torch.pow(k, torch.sigmoid(a)),
                     "layernorm": lambda: torch.tanh(self.ln(a)) * b}[self.how]()
                return self.fc(h.mean((2, 3)))

        for how in ("maximum", "minimum_broadcast", "pow_both", "pow_base", "pow_exponent", "layernorm"):
            torch.manual_seed(0)
            err, pred, meas = self.onnx_error(Net(how), torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)), how)
            with self.subTest(how=how):
                self.assertLess(abs(err), 1e-3, "predicted %d, measured %d" % (pred, meas))

    def test_index_and_reduction_ops(self):
        """Ops the import maps since it reads Trilu, GatherElements,
        ScatterElements (and torch's scatter_add pattern), TopK, and fuses
        nn.Mish's and torch.var's/std's exports: each saves what PyTorch
        saves and holds its backward formula's temporaries (std's and
        logsumexp's; a broadcast mul's full-size product); a reflection
        pad saves its input; x.max(dim) saves its indices, not its input."""
        class Net(nn.Module):
            def __init__(self, how):
                super().__init__()
                self.how, self.emb, self.fc, self.out = how, nn.Embedding(100, 64), nn.Linear(64, 64), nn.Linear(64, 5)
                self.act = nn.Mish()

            def body(self, x):  # one expression: ONNX cannot see what a Python local keeps alive
                return {"tril": lambda: torch.tril(self.fc(x) @ x.transpose(1, 2), -1) @ x,
                        "gather": lambda: torch.gather(self.fc(x), 2, x.argsort(-1)),
                        "scatter_add": lambda: x.scatter_add(2, x.argsort(-1), self.fc(x)),
                        "topk": lambda: torch.topk(self.fc(x), 16, dim=-1)[0].repeat(1, 1, 4),
                        "mish": lambda: self.act(self.fc(x)),
                        "std": lambda: self.fc(x) * x.std(-1, keepdim=True),
                        "var": lambda: self.fc(x) / (x.var(1, keepdim=True) + 1),
                        "logsumexp": lambda: torch.logsumexp(self.fc(x), dim=-1, keepdim=True) * x,
                        "pad_reflect": lambda: F.pad(self.fc(x), (2, 2), mode="reflect")[..., 2:-2] * x,
                        "max_dim": lambda: self.fc(x).max(dim=1, keepdim=True)[0] * x}[self.how]()

            def forward(self, ids):
                return self.out(self.body(self.emb(ids)).mean(1))

        for how in ("tril", "gather", "scatter_add", "topk", "mish", "std", "var", "logsumexp", "pad_reflect", "max_dim"):
            torch.manual_seed(0)
            err, pred, meas = self.onnx_error(Net(how), torch.randint(0, 100, (8, 32)), torch.randint(0, 5, (8,)), how)
            with self.subTest(how=how):
                self.assertLess(abs(err), 1e-3, "predicted %d, measured %d" % (pred, meas))

    def test_sequence_convolutions(self):
        """A Conv1d over a [N, T, C] sequence transposed to [N, C, T] (and a
        MaxPool1d, a 1-D nearest upsampling): the convolution copies its
        strided input in the forward and the backward (the first model 3%
        low without)."""
        class Net(nn.Module):
            def __init__(self, pool):
                super().__init__()
                self.pool, self.emb, self.c1, self.c2, self.out = pool, nn.Embedding(100, 64), nn.Conv1d(64, 64, 5, padding=2), nn.Conv1d(64, 64, 3, padding=1), nn.Linear(64, 5)

            def forward(self, ids):
                h = self.c1(self.emb(ids).transpose(1, 2))
                if self.pool:
                    h = F.interpolate(F.max_pool1d(h, 2), scale_factor=2.0)
                return self.out(self.c2(F.relu(h)).transpose(1, 2).mean(1))

        for pool in (False, True):
            torch.manual_seed(0)
            err, pred, meas = self.onnx_error(Net(pool), torch.randint(0, 100, (8, 32)), torch.randint(0, 5, (8,)), "conv1d%d" % pool)
            with self.subTest(pool=pool):
                self.assertLess(abs(err), 1e-3, "predicted %d, measured %d" % (pred, meas))

    def test_batchnorm_layouts(self):
        """nn.BatchNorm1d on [N, C] rows and over a transposed [N, L, C]
        sequence: PyTorch's CPU backward allocates an input-sized temporary
        for a contiguous input (the ONNX route missed it: 19% low) and not
        for a strided one (a trace counted it: 20% high). Both routes."""
        class Net(nn.Module):
            def __init__(self, flat):
                super().__init__()
                self.flat, self.emb, self.fc, self.bn, self.out = flat, nn.Embedding(100, 64), nn.Linear(64, 64), nn.BatchNorm1d(64), nn.Linear(64, 5)

            def forward(self, ids):
                x = self.emb(ids)
                if self.flat:
                    return self.out(self.bn(self.fc(x).reshape(-1, 64)).reshape(x.shape).mean(1))
                return self.out(self.bn(self.fc(x).transpose(1, 2)).transpose(1, 2).mean(1))

        for flat in (True, False):
            torch.manual_seed(0)
            x, y = torch.randint(0, 100, (8, 32)), torch.randint(0, 5, (8,))
            err, pred, meas = self.onnx_error(Net(flat), x, y, "bn%d" % flat)
            with self.subTest(route="onnx", flat=flat):
                self.assertLess(abs(err), 1e-3, "predicted %d, measured %d" % (pred, meas))
            torch.manual_seed(0)
            r = measure.measure_strategies(Net(flat), (x,), y, ["none"], SIM, name="bn", runs=1)[0]
            with self.subTest(route="trace", flat=flat):
                self.assertLess(abs(r["pred_peak"] - r["meas_peak"]) / r["meas_peak"], 1e-3,
                                "predicted %d, measured %d" % (r["pred_peak"], r["meas_peak"]))

    def test_local_response_norm(self):
        """Exported through an If on the input's rank; its division's
        backward holds the formula's intermediates (10.8% low without)."""
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.LocalResponseNorm(5), nn.AdaptiveAvgPool2d(1),
                              nn.Flatten(), nn.Linear(16, 10))
        err, pred, meas = self.onnx_error(model, torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,)), "lrn")
        self.assertLess(abs(err), 1e-3, "predicted %d, measured %d" % (pred, meas))


class ApplyTest(unittest.TestCase):
    def test_strategies_cnn(self):
        model, x, y = cnn_case()
        done = 0
        for s in ["none", "mirror", "sublinear", "chen-sqrt", "chen-greedy", "optimal-chain"]:
            with self.subTest(strategy=s):
                try:
                    _, _, plan = plan_for(model, x, y, s, "0.5" if s == "optimal-chain" else None)
                except RuntimeError as e:
                    self.skipTest("sim gave no plan for %s: %s" % (s, e))
                applied = check_step(self, model, x, y, plan)
                done += 1
                if s != "none":
                    self.assertEqual(applied.stats["on_demand"], 0, applied.stats)

    def test_mirror_keeps_clones_before_inplace_ops(self):
        """Autograd clones a tensor before an in-place op whose backward
        formula needs the original (nn.SiLU(inplace=True) in a
        squeeze-excitation block, as in efficientnet). A plan that
        recomputed that clone after the SiLU would copy the SiLU's output:
        the applier refused mirror's plan for efficientnet_b0. mirror no
        longer recomputes an op whose input a later forward op overwrites."""
        class SE(nn.Module):
            def __init__(self, c=16):
                super().__init__()
                self.stem, self.body = nn.Conv2d(3, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)
                self.fc1, self.fc2, self.act = nn.Conv2d(c, 4, 1), nn.Conv2d(4, c, 1), nn.SiLU(inplace=True)
                self.head = nn.Linear(c, 5)

            def forward(self, x):
                h = self.body(torch.relu(self.stem(x)))
                s = torch.sigmoid(self.fc2(self.act(self.fc1(h.mean((2, 3), keepdim=True)))))
                return self.head((h * s).mean((2, 3)))

        torch.manual_seed(0)
        model = SE()
        x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 5, (4,))
        check_plans(self, model, x, y, ["mirror", "mirror-cost"])

    def test_recomputed_mask_filled_in_place(self):
        """A mask made by new_zeros and filled in place through slices, one
        fill_ after another (Swin Transformer's shifted-window attention
        mask), then viewed and cloned for the backward. A plan that
        recomputes the chain re-runs the fills on the recomputed zeros; the
        applier held the zeros at the version they were made with and
        treated the first fill as a foreign write, recomputing the zeros
        again and losing the earlier fills: chen-sqrt's gradients on
        swin_t were off by a factor of 4e7."""
        class Masked(nn.Module):
            def __init__(self, d=32, n=8):
                super().__init__()
                self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(n))
                self.head = nn.Linear(d, 5)

            def forward(self, x):
                for i, layer in enumerate(self.layers):
                    m = x.new_zeros(x.shape[1])
                    for j, v in enumerate((1.0, 2.0, 3.0)):
                        m[j * 8:(j + 1) * 8] = v + i
                    x = torch.tanh(layer(x)) * m.view(1, -1).clone()
                return self.head(x)

        torch.manual_seed(0)
        model = Masked()
        x, y = torch.randn(4, 32), torch.randint(0, 5, (4,))
        check_plans(self, model, x, y, ["chen-sqrt", "chen-greedy", "mirror"])

    def test_chain_keeps_clones_of_kept_checkpoints(self):
        """mobilenet_v3_small's classifier: Linear, Hardswish(inplace=True)
        (autograd clones the Linear's output first), Dropout(inplace=True).
        chen-greedy kept the Linear's output as a checkpoint and re-ran the
        clone from it after the in-place ops had overwritten it; the applier
        refused the plan. The chain planners now keep such a clone."""
        try:
            import torchvision
        except ImportError:
            self.skipTest("torchvision is not installed (apt-get install python3-torchvision)")
        torch.manual_seed(0)
        model = torchvision.models.mobilenet_v3_small()
        x, y = torch.randn(4, 3, 64, 64), torch.randint(0, 1000, (4,))
        check_plans(self, model, x, y, ["chen-greedy", "chen-sqrt"],
                    also=lambda a: self.assertGreater(a.stats["recomputes"], 0, a.stats))

    def test_recomputes_happen(self):
        model, x, y = cnn_case()
        _, _, plan = plan_for(model, x, y, "chen-sqrt")
        recomputes = sum(1 for s in plan["steps"] if "compute" in s) - len({s["compute"] for s in plan["steps"] if "compute" in s})
        applied = check_step(self, model, x, y, plan)
        self.assertGreater(recomputes, 0, "chen-sqrt recomputes nothing on the tiny CNN")
        self.assertEqual(applied.stats["recomputes"], recomputes)

    def test_transformer(self):
        torch.manual_seed(0)
        model = TinyEncoder()
        x, y = torch.randint(0, 50, (2, 8)), torch.randint(0, 5, (2,))
        for s in ["none", "mirror", "chen-sqrt"]:
            with self.subTest(strategy=s):
                _, _, plan = plan_for(model, x, y, s)
                check_step(self, model, x, y, plan)

    def test_gpt(self):
        torch.manual_seed(0)
        model = TinyGPT()
        x, y = torch.randint(0, 40, (2, 8)), torch.randint(0, 40, (2,))
        seen = {"stand_ins": 0, "view_rebuilds": 0}
        for s in ["mirror", "sublinear", "chen-sqrt"]:
            with self.subTest(strategy=s):
                _, _, plan = plan_for(model, x, y, s)
                st = check_step(self, model, x, y, plan).stats
                self.assertEqual(st["on_demand"], 0, st)
                for k in seen:
                    seen[k] += st[k]
        # Both mechanisms are exercised: a saved tensor read only for its
        # shape after the plan freed it, and views of recomputed bases.
        self.assertGreater(seen["stand_ins"], 0)
        self.assertGreater(seen["view_rebuilds"], 0)

    def test_random_op_recompute_draws_the_same_numbers(self):
        torch.manual_seed(0)
        model = RandomMask()
        x, y = torch.randn(4, 6), torch.randint(0, 6, (4,))
        g, _, plan = plan_for(model, x, y, "none")
        ops, steps = g["ops"], [next(iter(s.items())) for s in plan["steps"]]
        rand = next(o for o in ops if o["type"] == "rand_like")
        gt = next(o for o in ops if o["type"] == "gt")
        chain = [o["id"] for o in ops if rand["id"] <= o["id"] <= gt["id"]]  # rand_like, detach, gt
        mask, noise = gt["outputs"][0], rand["outputs"][0]
        mine = {t for i in chain for t in ops[i]["outputs"]}
        acts = {t["id"] for t in g["tensors"] if t["kind"] == "activation"}
        keep = {t for i in chain for t in ops[i]["inputs"] if t in acts and t not in mine}  # h: freed after the recompute
        readers = [o["id"] for o in ops if mask in o["inputs"]]
        fwd = [r for r in readers if ops[r]["phase"] == "forward"]
        bwd = [r for r in readers if ops[r]["phase"] == "backward"]
        self.assertTrue(fwd and bwd, "the mask is not saved for backward")
        # Drop the mask after its last forward reader; recompute the chain
        # before its first backward reader.
        out = []
        for k, v in steps:
            if k == "free" and (v in mine or v in keep):
                continue
            if k == "compute" and v == bwd[0]:
                out += [("compute", i) for i in chain] + [("free", noise)] + [("free", t) for t in sorted(keep)]
            out.append((k, v))
            if k == "compute" and v == gt["id"]:
                out.append(("free", noise))
            if k == "compute" and v == max(fwd):
                out.append(("free", mask))
        out.append(("free", mask))
        plan = dict(plan, steps=[{k: v} for k, v in out])
        applied = check_step(self, model, x, y, plan)
        self.assertEqual(applied.stats["recomputes"], len(chain))

    def test_different_graph_is_refused(self):
        model, x, y = cnn_case(batch=2)
        _, _, plan = plan_for(model, x, y, "mirror")
        with self.assertRaises(remat_torch.PlanMismatch) as cm:
            remat_torch.apply(copy.deepcopy(model), plan, (torch.randn(3, 3, 8, 8),))
        msg = str(cm.exception)
        # docs/exporter.md quotes this message.
        self.assertEqual(msg, "plan 'mirror' does not match this model: op #0 convolution: the plan expects "
                              "'forward convolution 47:f32[2,8,8,8]', the model's outputs are f32[3,8,8,8] "
                              "(trace the step with the same input shapes and plan again)")
        self.assertIn("op #0", msg)
        self.assertIn("f32[2,8,8,8]", msg)  # what the plan expects
        self.assertIn("f32[3,8,8,8]", msg)  # what the model gives
        with self.assertRaises(remat_torch.PlanMismatch) as cm:
            remat_torch.apply(TinyEncoder(), plan, (torch.randint(0, 50, (2, 8)),))
        self.assertIn("op #0", str(cm.exception))
        self.assertIn("embedding", str(cm.exception))

    def test_malformed_plans(self):
        model, x, _ = cnn_case()
        cases = [
            ({"format": "x", "version": 1, "steps": []}, "field format"),
            ({"format": "remat.plan", "version": 2, "steps": []}, "field version is 2"),
            ({"format": "remat.plan", "version": 1, "steps": []}, "field signature is missing"),
            ({"format": "remat.plan", "version": 1, "steps": [{"compute": 5}], "signature": ["forward convolution 0:f32[1]"]},
             "steps[0].compute is op 5"),
            ({"format": "remat.plan", "version": 1, "steps": [], "signature": ["sideways x"]}, "signature[0]"),
        ]
        for plan, want in cases:
            with self.subTest(want=want):
                with self.assertRaises(remat_torch.PlanError) as cm:
                    remat_torch.apply(model, plan, (x,))
                self.assertIn(want, str(cm.exception))

    def test_peak_matches_prediction(self):
        torch.manual_seed(0)
        model = TinyCNN(c=16)
        x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
        rows = measure.measure_strategies(model, (x,), y, ["none", "chen-sqrt"], SIM, name="tiny", runs=1)
        for r in rows:
            with self.subTest(strategy=r["strategy"]):
                self.assertNotIn("error", r)
                self.assertTrue(r["grads"] and r["buffers"])
                err = abs(r["pred_peak"] - r["meas_peak"]) / r["meas_peak"]
                self.assertLess(err, 0.05, "predicted %d, measured %d" % (r["pred_peak"], r["meas_peak"]))

    def test_recomputed_dropout_prediction_matches(self):
        """Each random op a plan recomputes keeps its RNG state until the
        backward ends (5056 bytes on the CPU); sim counts it through the
        pytorch preset's recompute.rng_state_bytes. Without it the chen-sqrt
        and chen-greedy plans of this tiny GPT measured 96936 bytes for a
        76576-byte prediction (-21%); now 96800 (-0.14%, 136 bytes this
        test leaves unexplained)."""
        torch.manual_seed(0)
        model = TinyGPT()
        x, y = torch.randint(0, 40, (2, 8)), torch.randint(0, 40, (2,))
        g = remat_torch.trace(model, x, y)
        random = [o for o in g["ops"] if o["type"] in ("bernoulli_", "native_dropout")]
        self.assertTrue(random)
        for o in random:
            self.assertIn("nondeterministic", o.get("flags", []))
            self.assertEqual(o["attrs"].get("rng_saved"), "1")
        rows = measure.measure_strategies(model, (x,), y, ["none", "chen-sqrt", "chen-greedy"], SIM, name="tinygpt", runs=1)
        for r in rows:
            with self.subTest(strategy=r["strategy"]):
                self.assertNotIn("error", r)
                self.assertTrue(r["grads"] and r["buffers"])
                err = abs(r["pred_peak"] - r["meas_peak"]) / r["meas_peak"]
                self.assertLess(err, 0.005, "predicted %d, measured %d" % (r["pred_peak"], r["meas_peak"]))


class CLITest(unittest.TestCase):
    def test_run(self):
        """The command docs/exporter.md shows, on a tiny model."""
        import subprocess
        import sys

        env = dict(os.environ, REMAT_SIM=SIM.path, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        r = subprocess.run([sys.executable, "-m", "remat_torch", "run", "--model", "tests.test_remat_torch:TinyCNN",
                            "--batch", "2", "--image", "8", "--strategies", "none,chen-sqrt", "--budget", "0.5", "--runs", "1"],
                           capture_output=True, text=True, env=env, cwd=TMP)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertIn("tests.test_remat_torch:TinyCNN, batch 2", lines[0])
        rows = {l.split()[0]: l.split() for l in lines[2:]}
        self.assertEqual(set(rows), {"none", "chen-sqrt"})
        for name, f in rows.items():
            self.assertEqual(f[6], "ok", r.stdout)  # gradients and BN statistics
        self.assertIn("chen-sqrt", r.stderr)  # progress on stderr

    def test_unknown_model(self):
        import subprocess
        import sys

        env = dict(os.environ, REMAT_SIM=SIM.path, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        r = subprocess.run([sys.executable, "-m", "remat_torch", "run", "--model", "nosuchnet"],
                           capture_output=True, text=True, env=env, cwd=TMP)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("'nosuchnet': not a torchvision model", r.stderr)


if __name__ == "__main__":
    unittest.main()
