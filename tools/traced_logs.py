"""Write DTR logs of training steps traced from PyTorch.

  /usr/bin/python3 tools/traced_logs.py --out DIR [--models treelstm,lstm,transformer,densenet-bc,unroll-gan] [--small]

For each model, builds it with a fixed seed, traces one SGD training step
with remat_torch.trace (real autograd: the tensors each op saves, views,
in-place ops), writes the graph as DIR/MODEL.json and converts it with
`sim convert DIR/MODEL.json DIR/MODEL.log` into a DTR log (op TIMEs from
sim's a100-40gb cost model, so the log does not depend on this machine's
speed). The models stand in for the kinds of network of the DTR artifact's
logs that are not in this repository:

  treelstm     child-sum TreeLSTM over a fixed random binary tree of 32
               leaves, batch 64, embedding 300, hidden 150
  lstm         2-layer LSTM language model unrolled over 50 steps
               (LSTMCell), batch 32, embedding 256, hidden 512, vocab 2000
  transformer  4-layer pre-built nn.TransformerEncoder language model,
               batch 16, sequence 128, d 256, 8 heads, vocab 4000
  densenet-bc  DenseNet-BC 100 (growth 12, 3 x 16 bottleneck layers) on
               CIFAR-sized input, batch 32
  unroll-gan   the generator step of an unrolled GAN (Metz et al.): the
               discriminator (MLP 2 -> 1024 -> 1024 -> 1) is unrolled 10
               differentiable Adam steps on real and generated batches (as
               the `higher` package does), the generator (MLP 2048 -> 1024
               -> 1024 -> 2) is trained through the unrolled discriminator;
               batch 256. The DTR artifact's config has hidden 2048, noise
               4096, batch 512 and 60 steps: the same proportions (a
               discriminator weight is four activations), at a quarter of
               the width and a sixth of the depth so tracing takes seconds

  dtr-treelstm the DTR artifact's own TreeLSTM, as its model code
               describes it: a full binary tree of depth 5 (63 nodes), an
               input of in 100 at every node, the artifact's LSTM cell (mem
               300; the children's c summed into iou, one sigmoid gate per
               child added to c in place), the root's c summed as the loss;
               batch 64
  dtr-lstm     the DTR artifact's own LSTM over the same cell: 100 steps
               of inputs 50 x 50, mem 300, the last step's c summed as the
               loss
  dtr-densenet the DTR artifact's DenseNet-BC 100 (growth 12, reduction
               0.5, 16 bottleneck layers per block, each concatenating its
               input with its 12 new channels; a 3 x 3 stem, no pooling
               before the first block), CIFAR-sized input, batch 32

Written only when --models names it (it takes about a minute to trace):

  nn-transformer  PyTorch's encoder-decoder nn.Transformer, 6 + 6 layers,
               d 512, 8 heads, feed-forward 2048, batch 10, sequence 64
               (source and target), vocab 8000: a log of the size of a
               machine-translation Transformer's, for timing replays
  gru-encoder  a 2-layer GRU encoder (GRUCell) over 50 steps, batch 32,
               embedding 256, hidden 512, vocab 2000, classifying the last
               step's state: a recurrent kind the default set does not
               have (the DTR artifact's failure logs include a GRU encoder)

--small shrinks every model (for tests). --measure keeps the op times
measured on this machine (sim convert then writes them instead of the cost
model's), so the logs vary by machine. sim is --sim PATH, else $REMAT_SIM,
else `sim` on PATH, else built once with `go build`. Then, e.g.:

  sim sweep --dtr-log DIR/lstm.log --strategies dtr --heuristic all
"""

import argparse
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

MODELS = ("treelstm", "lstm", "transformer", "densenet-bc", "unroll-gan", "dtr-treelstm", "dtr-lstm", "dtr-densenet")
# EXTRA models are written only when --models names them.
EXTRA = ("nn-transformer", "gru-encoder")


def bce(x, y):
    """Binary cross-entropy of probabilities, written out as the DTR
    artifact's unrolled GAN does."""
    return -(x.log() * y + (1 - x).log() * (1 - y)).mean()


def build(name, small):
    """Return (model, inputs, labels, trace keyword arguments) for one model,
    seeded."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torchvision

    torch.manual_seed(0)
    rng = random.Random(0)

    class TreeLSTM(nn.Module):
        def __init__(self, vocab, d, h, leaves, classes=5):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.ioux, self.iouh = nn.Linear(d, 3 * h), nn.Linear(h, 3 * h)
            self.fx, self.fh = nn.Linear(d, h), nn.Linear(h, h)
            self.out, self.h = nn.Linear(h, classes), h
            nodes, self.merges, nid = list(range(leaves)), [], leaves
            while len(nodes) > 1:  # merge random neighbours up to the root
                i = rng.randrange(len(nodes) - 1)
                self.merges.append((nodes[i], nodes[i + 1], nid))
                nodes[i:i + 2] = [nid]
                nid += 1

        def cell(self, x, c, h):
            i, o, u = (self.ioux(x) + self.iouh(h.sum(0))).chunk(3, -1)
            i, o, u = torch.sigmoid(i), torch.sigmoid(o), torch.tanh(u)
            f = torch.sigmoid(self.fh(h) + self.fx(x).unsqueeze(0))
            c = i * u + (f * c).sum(0)
            return c, o * torch.tanh(c)

        def forward(self, tok):
            b = tok.shape[0]
            z = self.emb.weight.new_zeros(1, b, self.h)
            st = {l: self.cell(self.emb(tok[:, l]), z, z) for l in range(tok.shape[1])}
            x0 = self.emb.weight.new_zeros(b, self.emb.weight.shape[1])
            for a, c, n in self.merges:
                st[n] = self.cell(x0, torch.stack([st[a][0], st[c][0]]), torch.stack([st[a][1], st[c][1]]))
            return self.out(st[self.merges[-1][2]][1])

    def unroll(cells, x, state0, top):
        """Runs stacked recurrent cells over x's steps (dimension 1) from
        the states state0(cell); returns each step's output of the last
        cell (top(state))."""
        hs = [state0(c) for c in cells]
        outs = []
        for s in range(x.shape[1]):
            inp = x[:, s]
            for i, c in enumerate(cells):
                hs[i] = c(inp, hs[i])
                inp = top(hs[i])
            outs.append(inp)
        return outs

    class LSTMLM(nn.Module):
        def __init__(self, vocab, d, h, layers):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.cells = nn.ModuleList([nn.LSTMCell(d if i == 0 else h, h) for i in range(layers)])
            self.dec = nn.Linear(h, vocab)

        def forward(self, tok):
            b, t = tok.shape
            x = self.emb(tok)
            outs = unroll(self.cells, x, lambda c: (x.new_zeros(b, c.hidden_size), x.new_zeros(b, c.hidden_size)), lambda st: st[0])
            return self.dec(torch.stack(outs, 1)).reshape(b * t, -1)

    class GRUEncoder(nn.Module):
        def __init__(self, vocab, d, h, layers, classes=10):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.cells = nn.ModuleList([nn.GRUCell(d if i == 0 else h, h) for i in range(layers)])
            self.out = nn.Linear(h, classes)

        def forward(self, tok):
            b = tok.shape[0]
            x = self.emb(tok)
            return self.out(unroll(self.cells, x, lambda c: x.new_zeros(b, c.hidden_size), lambda st: st)[-1])

    class TransformerLM(nn.Module):
        def __init__(self, vocab, d, heads, layers, t):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.zeros(t, d))
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, layers)
            self.dec = nn.Linear(d, vocab)

        def forward(self, tok):
            b, t = tok.shape
            return self.dec(self.enc(self.emb(tok) + self.pos[:t])).reshape(b * t, -1)

    class Seq2Seq(nn.Module):
        def __init__(self, vocab, d, heads, layers):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.tr = nn.Transformer(d, heads, layers, layers, 4 * d, dropout=0.1, batch_first=True)
            self.out = nn.Linear(d, vocab)

        def forward(self, tok):
            s = self.emb(tok)
            return self.out(self.tr(s, s)).reshape(-1, self.out.out_features)

    class UnrolledGAN(nn.Module):
        """forward(z) unrolls the discriminator k differentiable Adam steps
        (torch.autograd.grad with create_graph) and returns its decision on
        G(z): the generator's loss is taken through every unrolled step."""

        def __init__(self, z, h, b, k, lr=1e-4, betas=(0.5, 0.999), eps=1e-8):
            super().__init__()
            self.g = nn.Sequential(nn.Linear(z, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 2))
            d = nn.Sequential(nn.Linear(2, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1))
            self.d0 = [p.detach().clone() for p in d.parameters()]  # not trained by this step
            self.real, self.noise = torch.randn(k, b, 2), torch.randn(k, b, z)
            self.k, self.lr, self.betas, self.eps = k, lr, betas, eps

        @staticmethod
        def d(x, p):
            x = torch.relu(F.linear(x, p[0], p[1]))
            return torch.sigmoid(F.linear(torch.relu(F.linear(x, p[2], p[3])), p[4], p[5]))

        def forward(self, z):
            p = [q.clone().requires_grad_() for q in self.d0]
            m, v = [torch.zeros_like(q) for q in p], [torch.zeros_like(q) for q in p]
            (b1, b2) = self.betas
            for t in range(1, self.k + 1):
                dr, df = self.d(self.real[t - 1], p), self.d(self.g(self.noise[t - 1]), p)
                loss = bce(dr, torch.ones_like(dr)) + bce(df, torch.zeros_like(df))
                gs = torch.autograd.grad(loss, p, create_graph=True)
                for i, g in enumerate(gs):
                    m[i] = b1 * m[i] + (1 - b1) * g
                    v[i] = b2 * v[i] + (1 - b2) * g * g
                    p[i] = p[i] - self.lr * (m[i] / (1 - b1 ** t)) / ((v[i] / (1 - b2 ** t)).sqrt() + self.eps)
            return self.d(self.g(z), p)

    class ArtifactCell(nn.Module):
        """The DTR artifact's LSTM cell: iou from the input and the sum of
        the children's c, c = i * u plus one sigmoid(fx * fh(h_k)) per
        child (added in place), h = o * tanh(c)."""

        def __init__(self, d, h):
            super().__init__()
            self.ioux, self.iouh = nn.Linear(d, 3 * h), nn.Linear(h, 3 * h, bias=False)
            self.fx, self.fh = nn.Linear(d, h), nn.Linear(h, h, bias=False)

        def forward(self, x, children):
            iou = self.ioux(x)
            if children:
                s = children[0][0]
                for ch in children[1:]:
                    s = s + ch[0]
                iou = iou + self.iouh(s)
            i, o, u = iou.chunk(3, -1)
            c = torch.sigmoid(i) * torch.tanh(u)
            fx = self.fx(x)
            for _, hk in children:
                c += torch.sigmoid(fx * self.fh(hk))
            return c, torch.sigmoid(o) * torch.tanh(c)

    class ArtifactTreeLSTM(nn.Module):
        """A full binary tree of the cell; forward takes the nodes' inputs
        in post-order and returns the root's c."""

        def __init__(self, d, h, depth):
            super().__init__()
            self.cell, self.depth = ArtifactCell(d, h), depth

        def forward(self, *xs):
            it = iter(xs)

            def node(depth):
                kids = [node(depth - 1) for _ in range(2)] if depth > 0 else []
                return self.cell(next(it), kids)
            return node(self.depth)[0]

    class ArtifactLSTM(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.cell, self.h = ArtifactCell(d, h), h

        def forward(self, *xs):
            c = h = xs[0].new_zeros(1, self.h)
            for x in xs:
                c, h = self.cell(x, [(c, h)])
            return c

    class ArtifactDenseNet(nn.Module):
        """DenseNet-BC as the artifact's model code builds it: each
        bottleneck layer (BN, ReLU, 1 x 1 conv to 4 x growth, BN, ReLU,
        3 x 3 conv to growth) returns cat(input, new); transitions halve
        the channels (1 x 1 conv) and the resolution (2 x 2 average)."""

        def __init__(self, growth, depth, classes):
            super().__init__()
            n, ch = (depth - 4) // 6, 2 * growth
            self.stem = nn.Conv2d(3, ch, 3, padding=1, bias=False)
            stages = []
            for blk in range(3):
                layers = []
                for _ in range(n):
                    layers.append(nn.ModuleList([nn.BatchNorm2d(ch), nn.Conv2d(ch, 4 * growth, 1, bias=False),
                                                 nn.BatchNorm2d(4 * growth), nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False)]))
                    ch += growth
                trans = None
                if blk < 2:
                    trans = nn.ModuleList([nn.BatchNorm2d(ch), nn.Conv2d(ch, ch // 2, 1, bias=False)])
                    ch //= 2
                stages.append(nn.ModuleList([nn.ModuleList(layers), trans if trans is not None else nn.ModuleList()]))
            self.stages = nn.ModuleList(stages)
            self.bn, self.fc = nn.BatchNorm2d(ch), nn.Linear(ch, classes)

        def forward(self, x):
            out = self.stem(x)
            for layers, trans in self.stages:
                for bn1, c1, bn2, c2 in layers:
                    new = c2(F.relu(bn2(c1(F.relu(bn1(out))))))
                    out = torch.cat((out, new), 1)
                if len(trans):
                    out = F.avg_pool2d(trans[1](F.relu(trans[0](out))), 2)
            out = F.avg_pool2d(F.relu(self.bn(out)), out.shape[-1]).flatten(1)
            return F.log_softmax(self.fc(out), dim=1)

    def total(out, _):
        return out.sum()

    if name == "dtr-treelstm":
        depth, b, d, h = (2, 4, 8, 16) if small else (5, 64, 100, 300)
        m = ArtifactTreeLSTM(d, h, depth)
        xs = tuple(torch.zeros(b, d) for _ in range(2 ** (depth + 1) - 1))
        return m, xs, torch.zeros(1), {"loss_fn": total}
    if name == "dtr-lstm":
        t, b, d, h = (6, 4, 8, 16) if small else (100, 50, 50, 300)
        m = ArtifactLSTM(d, h)
        return m, tuple(torch.zeros(b, d) for _ in range(t)), torch.zeros(1), {"loss_fn": total}
    if name == "dtr-densenet":
        depth, b = (10, 2) if small else (100, 32)
        return ArtifactDenseNet(12, depth, 10), torch.randn(b, 3, 32, 32), torch.randint(0, 10, (b,)), {"loss_fn": F.nll_loss}
    if name == "treelstm":
        b, leaves = (4, 6) if small else (64, 32)
        m = TreeLSTM(2000, 32 if small else 300, 16 if small else 150, leaves)
        return m, torch.randint(0, 2000, (b, leaves)), torch.randint(0, 5, (b,)), {}
    if name == "lstm":
        b, t, v = (4, 6, 50) if small else (32, 50, 2000)
        m = LSTMLM(v, 16 if small else 256, 32 if small else 512, 2)
        return m, torch.randint(0, v, (b, t)), torch.randint(0, v, (b * t,)), {}
    if name == "gru-encoder":
        b, t, v = (4, 6, 50) if small else (32, 50, 2000)
        m = GRUEncoder(v, 16 if small else 256, 32 if small else 512, 2)
        return m, torch.randint(0, v, (b, t)), torch.randint(0, 10, (b,)), {}
    if name == "transformer":
        b, t, v = (2, 16, 100) if small else (16, 128, 4000)
        m = TransformerLM(v, 32 if small else 256, 4 if small else 8, 2 if small else 4, t)
        return m, torch.randint(0, v, (b, t)), torch.randint(0, v, (b * t,)), {}
    if name == "nn-transformer":
        b, t, v = (2, 8, 100) if small else (10, 64, 8000)
        m = Seq2Seq(v, 32 if small else 512, 4 if small else 8, 1 if small else 6)
        return m, torch.randint(0, v, (b, t)), torch.randint(0, v, (b * t,)), {}
    if name == "densenet-bc":
        blocks = (2, 2, 2) if small else (16, 16, 16)
        m = torchvision.models.DenseNet(growth_rate=12, block_config=blocks, num_init_features=24, bn_size=4, num_classes=10)
        b = 2 if small else 32
        return m, torch.randn(b, 3, 32, 32), torch.randint(0, 10, (b,)), {}
    if name == "unroll-gan":
        z, h, b, k = (16, 32, 8, 3) if small else (2048, 1024, 256, 10)
        m = UnrolledGAN(z, h, b, k)
        adam = torch.optim.Adam(m.parameters(), lr=1e-3, betas=(0.5, 0.999))
        return m, torch.randn(b, z), torch.ones(b, 1), {"loss_fn": bce, "optimizer": adam}
    raise ValueError("model %r: expected one of %s" % (name, ", ".join(MODELS + EXTRA)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for MODEL.json and MODEL.log")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS + EXTRA) + " (default: all but " + ", ".join(EXTRA) + ")")
    p.add_argument("--small", action="store_true", help="tiny sizes (tests)")
    p.add_argument("--measure", action="store_true", help="op times measured on this machine (median of 3 traced steps) instead of the cost model's; the logs then vary by machine")
    p.add_argument("--sim", default=None, help="sim binary")
    a = p.parse_args(argv)
    names = [n for n in a.models.split(",") if n]
    for n in names:
        if n not in MODELS + EXTRA:
            p.error("--models: %r: expected one of %s" % (n, ", ".join(MODELS + EXTRA)))
    try:
        import torch  # noqa: F401
    except ImportError:
        print("traced_logs: PyTorch is not installed (apt-get install python3-torch python3-torchvision)", file=sys.stderr)
        return 2
    from remat_torch.measure import Sim
    from remat_torch.trace import trace, write_graph

    sim = Sim(a.sim)
    try:
        os.makedirs(a.out, exist_ok=True)
        for n in names:
            model, x, y, kw = build(n, a.small)
            # A DTR log records what kernels access: in the DTR prototype a
            # reference a backward node holds does not pin an evicted
            # tensor, so the node's held inputs are not listed.
            g = trace(model, x, y, measure=a.measure, name=n, hold_node_inputs=False, **kw)
            gj, lg = os.path.join(a.out, n + ".json"), os.path.join(a.out, n + ".log")
            write_graph(g, gj)
            sim._run(["convert", "-q", gj, lg])
            print("%s: %d ops -> %s" % (n, len(g["ops"]), lg))
    finally:
        sim.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
