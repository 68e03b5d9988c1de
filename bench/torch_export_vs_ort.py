#!/usr/bin/env python3
"""A LLaMA-style decoder exported from PyTorch (both exporters) through neetorch.onnx.InferenceSession against
onnxruntime: what a user's own export looks like, with the small ops exporters write (cumsum positions, triu /
where masks, RoPE's cat / neg / sin / cos, GQA's repeat, a TopK / ArgMax / LogSoftmax sampling head) that the
benchmarks built with onnx.helper (asv_benchmarks/_onnx_models.py) do not have.

    python3 bench/torch_export_vs_ort.py                       # 1 thread, seq 16 and 128, both exporters
    python3 bench/torch_export_vs_ort.py --threads 2 --seq 16 --rounds 5

Each engine in this process, the runs alternating round by round; per round min over ``--calls`` calls (wall time);
prints the min over rounds and the ratio neetorch / onnxruntime (lower is better), with the outputs' max abs
difference.  Needs torch (and onnxscript for the dynamo exporter); random weights, no download.
"""
from __future__ import annotations

import argparse
import io
import math
import os
import sys
import time
import warnings


def build(vocab, d, layers, heads, kv_heads, ff):
    import torch
    nn, F = torch.nn, torch.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.rand(d) + 0.5)

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w

    def rope(x, pos):
        h = x.shape[-1]
        inv = 1.0 / (10000.0 ** (torch.arange(0, h, 2, dtype=torch.float32) / h))
        fr = pos[:, :, None].float() * inv[None, None, :]
        emb = torch.cat([fr, fr], -1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        return x * cos + torch.cat([-x[..., h // 2:], x[..., :h // 2]], -1) * sin

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.hd = d // heads
            self.q = nn.Linear(d, d, bias=False)
            self.k = nn.Linear(d, kv_heads * self.hd, bias=False)
            self.v = nn.Linear(d, kv_heads * self.hd, bias=False)
            self.o = nn.Linear(d, d, bias=False)
            self.g, self.u, self.dn = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False), nn.Linear(ff, d,
                                                                                                             bias=False)
            self.n1, self.n2 = RMSNorm(), RMSNorm()

        def forward(self, x, pos, mask):
            B, S, _ = x.shape
            y = self.n1(x)
            q = rope(self.q(y).view(B, S, heads, self.hd).transpose(1, 2), pos)
            k = rope(self.k(y).view(B, S, kv_heads, self.hd).transpose(1, 2), pos)
            v = self.v(y).view(B, S, kv_heads, self.hd).transpose(1, 2)
            k, v = k.repeat_interleave(heads // kv_heads, 1), v.repeat_interleave(heads // kv_heads, 1)
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.hd) + mask, -1)
            x = x + self.o((a @ v).transpose(1, 2).reshape(B, S, -1))
            y = self.n2(x)
            return x + self.dn(F.silu(self.g(y)) * self.u(y))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.norm, self.lm = RMSNorm(), nn.Linear(d, vocab, bias=False)

        def forward(self, ids, attn):
            B, S = ids.shape
            pos = (attn.cumsum(-1) - 1).clamp(min=0)
            causal = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)
            keep = (~causal)[None, None] & attn[:, None, None, :].bool()
            mask = torch.zeros(B, 1, S, S).masked_fill(~keep, float("-inf"))
            x = self.emb(ids)
            for layer in self.layers:
                x = layer(x, pos, mask)
            logits = self.lm(self.norm(x))
            tv, ti = logits[:, -1].topk(5, -1)
            return logits, ti, logits[:, -1].argmax(-1), torch.log_softmax(tv, -1)

    torch.manual_seed(0)
    return LM().eval()


def export(model, seq, dynamo):
    import torch
    ids = torch.randint(0, model.emb.num_embeddings, (1, seq))
    attn = torch.ones(1, seq, dtype=torch.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            prog = torch.onnx.export(model, (ids, attn), input_names=["ids", "attn"], dynamo=True, verbose=False)
            data = prog.model_proto.SerializeToString()
        else:
            f = io.BytesIO()
            torch.onnx.export(model, (ids, attn), f, input_names=["ids", "attn"], dynamo=False, opset_version=17)
            data = f.getvalue()
    return data, {"ids": ids.numpy(), "attn": attn.numpy()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seq", default="16,128")
    ap.add_argument("--exporters", default="legacy,dynamo")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--vocab", type=int, default=2000)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    a = ap.parse_args(argv)
    os.environ["NEE_NUM_THREADS"] = str(a.threads)
    import numpy as np
    import onnxruntime as ort
    import torch
    torch.set_num_threads(a.threads)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import neetorch as nee
    model = build(a.vocab, a.d, a.layers, heads=8, kv_heads=2, ff=4 * a.d)
    print(f"LLaMA-style decoder: vocab {a.vocab}, d {a.d}, {a.layers} layers, 8 heads (2 kv), threads {a.threads}")
    print(f"{'export':8s} {'seq':>4s} {'neetorch ms':>12s} {'onnxrt ms':>10s} {'ratio':>6s} {'max|diff|':>10s}")
    for exp in a.exporters.split(","):
        for seq in (int(s) for s in a.seq.split(",")):
            try:
                data, feed = export(model, seq, exp == "dynamo")
            except Exception as e:     # noqa: BLE001 - (no onnxscript: the dynamo exporter is skipped)
                print(f"{exp:8s} {seq:4d} export failed: {type(e).__name__}: {e}"[:120])
                continue
            so = ort.SessionOptions()
            so.intra_op_num_threads = a.threads
            o = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
            s = nee.onnx.InferenceSession(data)
            diff = max(float(np.max(np.abs(x.astype(np.float64) - y))) for x, y in zip(s.run(None, feed),
                                                                                  o.run(None, feed)))
            best = {"nee": math.inf, "ort": math.inf}
            for _ in range(a.rounds):
                for name, sess in (("nee", s), ("ort", o)):
                    for _ in range(3):
                        sess.run(None, feed)
                    for _ in range(a.calls):
                        t = time.perf_counter()
                        sess.run(None, feed)
                        best[name] = min(best[name], time.perf_counter() - t)
            print(f"{exp:8s} {seq:4d} {best['nee'] * 1e3:12.3f} {best['ort'] * 1e3:10.3f} "
                  f"{best['nee'] / best['ort']:6.2f} {diff:10.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
