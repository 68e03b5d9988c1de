"""More real PyTorch architectures (random weights, small sizes, written here in torch) exported to ONNX the ways
users export them -- the TorchScript exporter (``dynamo=False``) at opsets 13..18, the dynamo exporter,
dynamic batch / sequence / H-W axes run at two or more sizes, ``model.half()``, external data loaded from a
path, onnxruntime's offline optimizer output, ``onnx.version_converter`` to older opsets, ``torch.jit.script``
control flow -- and compared with onnxruntime (and torch) on the same inputs.

Dynamo exports cost seconds each: the default run exports a few; the rest run with NEE_ONNX_MODELS_SLOW=1.
"""
from __future__ import annotations

import io
import math
import os
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

import neetorch.onnx as nx
from tests.test_onnx_torch_models import SLOW, _export, _ort, _randbn, _run_model

nn = torch.nn
F = torch.nn.functional


def _cmp(sess, ref, feeds, rtol=1e-4, atol=1e-4):
    for feed in feeds:
        got, want = sess.run(None, feed), ref.run(None, feed)
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, w.shape, g.dtype, w.dtype)
            if np.issubdtype(w.dtype, np.integer) or w.dtype == np.bool_:
                np.testing.assert_array_equal(g, w, err_msg=f"output {k}")
            else:
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {k}")


# ================================================================== CNNs
class HSE(nn.Module):
    def __init__(self, c, r=4):
        super().__init__()
        self.f1, self.f2 = nn.Conv2d(c, c // r, 1), nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        return x * F.hardsigmoid(self.f2(F.relu(self.f1(F.adaptive_avg_pool2d(x, 1)))))


class MBv3Block(nn.Module):
    def __init__(self, cin, exp, cout, k, s, se, act):
        super().__init__()
        a = nn.Hardswish if act == "hs" else nn.ReLU
        self.b = nn.Sequential(nn.Conv2d(cin, exp, 1, bias=False), nn.BatchNorm2d(exp), a(),
                               nn.Conv2d(exp, exp, k, s, k // 2, groups=exp, bias=False), nn.BatchNorm2d(exp), a(),
                               HSE(exp) if se else nn.Identity(),
                               nn.Conv2d(exp, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.res = s == 1 and cin == cout

    def forward(self, x):
        y = self.b(x)
        return x + y if self.res else y


class MobileNetV3(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish())
        self.blocks = nn.Sequential(MBv3Block(16, 16, 16, 3, 2, True, "re"), MBv3Block(16, 48, 24, 3, 2, False, "re"),
                                    MBv3Block(24, 72, 24, 5, 1, True, "hs"), MBv3Block(24, 96, 32, 5, 2, True, "hs"))
        self.head = nn.Sequential(nn.Linear(32, 64), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(64, 10))

    def forward(self, x):
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))


class ResNeXtBlock(nn.Module):
    def __init__(self, cin, cout, groups, stride):
        super().__init__()
        w = cout // 2
        self.c1, self.b1 = nn.Conv2d(cin, w, 1, bias=False), nn.BatchNorm2d(w)
        self.c2, self.b2 = nn.Conv2d(w, w, 3, stride, 1, groups=groups, bias=False), nn.BatchNorm2d(w)
        self.c3, self.b3 = nn.Conv2d(w, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = F.relu(self.b2(self.c2(y)))
        return F.relu(self.b3(self.c3(y)) + self.down(x))


class ResNeXt(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.l = nn.Sequential(ResNeXtBlock(16, 32, 4, 1), ResNeXtBlock(32, 48, 8, 2), ResNeXtBlock(48, 48, 3, 1))
        self.fc = nn.Linear(48, 7)

    def forward(self, x):
        return self.fc(self.l(self.stem(x)).mean((2, 3)))


class DenseLayer(nn.Module):
    def __init__(self, cin, g):
        super().__init__()
        self.n1, self.c1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, 2 * g, 1, bias=False)
        self.n2, self.c2 = nn.BatchNorm2d(2 * g), nn.Conv2d(2 * g, g, 3, padding=1, bias=False)

    def forward(self, feats):
        x = torch.cat(feats, 1)
        return self.c2(F.relu(self.n2(self.c1(F.relu(self.n1(x))))))


class DenseNet(nn.Module):
    def __init__(self, c0=8, g=4, n=3):
        super().__init__()
        self.stem = nn.Conv2d(3, c0, 3, padding=1)
        self.layers = nn.ModuleList(DenseLayer(c0 + i * g, g) for i in range(n))
        c = c0 + n * g
        self.trans = nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1), nn.AvgPool2d(2, 2))
        self.fc = nn.Linear(c // 2, 5)

    def forward(self, x):
        feats = [self.stem(x)]
        for l in self.layers:
            feats.append(l(feats))
        y = self.trans(torch.cat(feats, 1))
        return self.fc(F.adaptive_avg_pool2d(y, (1, 1)).flatten(1))


def _cbr(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    """UNet: max-pool down path, ConvTranspose2d up (and bilinear upsample with align_corners both ways),
    skip concatenations (padded to size with F.pad when odd)."""

    def __init__(self):
        super().__init__()
        self.d1, self.d2, self.d3 = _cbr(3, 8), _cbr(8, 16), _cbr(16, 32)
        self.up1 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.u1 = _cbr(32, 16)
        self.u2 = _cbr(16 + 8, 8)
        self.out = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        c = self.d3(F.max_pool2d(b, 2))
        u = self.up1(c)
        u = F.pad(u, [0, b.shape[3] - u.shape[3], 0, b.shape[2] - u.shape[2]])
        u = self.u1(torch.cat([b, u], 1))
        u = F.interpolate(u, size=a.shape[2:], mode="bilinear", align_corners=True)
        u = self.u2(torch.cat([a, u], 1))
        v = F.interpolate(c, scale_factor=4.0, mode="bilinear", align_corners=False)
        return self.out(u), v


class ASPP(nn.Module):
    def __init__(self, cin=16, c=8, rates=(2, 3)):
        super().__init__()
        self.b0 = nn.Sequential(nn.Conv2d(cin, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.bs = nn.ModuleList(nn.Sequential(nn.Conv2d(cin, c, 3, padding=r, dilation=r, bias=False),
                                              nn.BatchNorm2d(c), nn.ReLU()) for r in rates)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cin, c, 1, bias=False), nn.ReLU())
        self.proj = nn.Sequential(nn.Conv2d(c * (2 + len(rates)), c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU())

    def forward(self, x):
        size = x.shape[-2:]
        p = F.interpolate(self.pool(x), size=size, mode="bilinear", align_corners=False)
        return self.proj(torch.cat([self.b0(x)] + [b(x) for b in self.bs] + [p], 1))


class DeepLab(nn.Module):
    def __init__(self):
        super().__init__()
        self.back = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 16, 3, 1, 2, dilation=2),
                                  nn.ReLU())
        self.aspp, self.cls = ASPP(), nn.Conv2d(8, 3, 1)

    def forward(self, x):
        y = self.cls(self.aspp(self.back(x)))
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


_CNNS = {
    "mobilenetv3": (MobileNetV3, [(2, 3, 32, 32), (1, 3, 48, 40)]),
    "resnext": (ResNeXt, [(2, 3, 24, 24), (1, 3, 20, 28)]),
    "densenet": (DenseNet, [(2, 3, 16, 16), (3, 3, 12, 20)]),
    "unet": (UNet, [(1, 3, 16, 16), (2, 3, 20, 12)]),
    "deeplab": (DeepLab, [(2, 3, 16, 16), (1, 3, 24, 20)]),
}


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("name", list(_CNNS))
def test_cnns_legacy_dynamic(name, opset):
    torch.manual_seed(0)
    cls, sizes = _CNNS[name]
    m = _randbn(cls())
    outs = ["y", "v"] if name == "unet" else ["y"]
    _run_model(m, lambda s: [torch.randn(*s)], sizes, ["x"], outs, {"x": {0: "b", 2: "h", 3: "w"}}, opset=opset)


@SLOW
@pytest.mark.parametrize("name", list(_CNNS))
def test_cnns_dynamo_dynamic(name):
    torch.manual_seed(0)
    cls, sizes = _CNNS[name]
    outs = ["y", "v"] if name == "unet" else ["y"]
    _run_model(_randbn(cls()), lambda s: [torch.randn(*s)], sizes, ["x"], outs, {"x": {0: "b", 2: "h", 3: "w"}},
               dynamo=True)


# ================================================================== transformers
class BertLayer(nn.Module):
    def __init__(self, d, nh, ff):
        super().__init__()
        self.nh = nh
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-12), nn.LayerNorm(d, eps=1e-12)
        self.f1, self.f2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x, ext):
        B, T, D = x.shape
        h = D // self.nh

        def split(t):
            return t.view(B, T, self.nh, h).transpose(1, 2)

        s = torch.matmul(split(self.q(x)), split(self.k(x)).transpose(-1, -2)) / math.sqrt(h) + ext
        a = torch.matmul(s.softmax(-1), split(self.v(x))).transpose(1, 2).contiguous().view(B, T, D)
        x = self.ln1(x + self.o(a))
        return self.ln2(x + self.f2(F.gelu(self.f1(x))))


class Bert(nn.Module):
    """BERT: word + position + token-type embeddings, extended attention mask ``(1 - mask) * -10000`` (or
    ``* finfo.min``), pooler on the [CLS] token."""

    def __init__(self, v=50, d=16, nh=2, ff=32, n=2, finfo=False, distil=False):
        super().__init__()
        self.finfo, self.distil = finfo, distil
        self.we, self.pe = nn.Embedding(v, d), nn.Embedding(64, d)
        self.te = None if distil else nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(d, nh, ff) for _ in range(n))
        self.pool = nn.Linear(d, d)
        self.register_buffer("position_ids", torch.arange(64).expand((1, -1)), persistent=False)

    def forward(self, ids, mask, tt=None):
        T = ids.shape[1]
        x = self.we(ids) + self.pe(self.position_ids[:, :T])
        if self.te is not None:
            x = x + self.te(tt)
        x = self.ln(x)
        ext = mask[:, None, None, :].to(x.dtype)
        ext = (1.0 - ext) * (torch.finfo(x.dtype).min if self.finfo else -10000.0)
        for l in self.layers:
            x = l(x, ext)
        return x, torch.tanh(self.pool(x[:, 0]))


def _bert_inputs(sz, distil=False):
    b, t = sz
    g = torch.Generator().manual_seed(b * 100 + t)
    ids = torch.randint(0, 50, (b, t), generator=g)
    mask = torch.ones(b, t, dtype=torch.int64)
    mask[0, t - 2:] = 0
    if distil:
        return [ids, mask]
    return [ids, mask, (torch.arange(t) >= t // 2).long().expand(b, t).contiguous()]


_BERT_DYN = {"ids": {0: "b", 1: "t"}, "mask": {0: "b", 1: "t"}, "tt": {0: "b", 1: "t"}}


@pytest.mark.parametrize("finfo,opset", [(False, 14), (True, 17)])
def test_bert_token_types_and_mask_arithmetic_legacy(finfo, opset):
    torch.manual_seed(0)
    _run_model(Bert(finfo=finfo), _bert_inputs, [(2, 7), (3, 4), (1, 9)], ["ids", "mask", "tt"], ["h", "pooled"],
               _BERT_DYN, opset=opset)


def test_distilbert_dynamo():
    torch.manual_seed(0)
    _run_model(Bert(distil=True, finfo=True), lambda s: _bert_inputs(s, True), [(2, 7), (1, 5)], ["ids", "mask"],
               ["h", "pooled"], _BERT_DYN, dynamo=True)


class ViT(nn.Module):
    """ViT: patch conv, class token, position embeddings bicubic-interpolated to the input's patch grid."""

    def __init__(self, d=16, p=4, grid=4, nh=2):
        super().__init__()
        self.p, self.grid = p, grid
        self.patch = nn.Conv2d(3, d, p, p)
        self.cls = nn.Parameter(torch.randn(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, grid * grid + 1, d))
        self.enc = nn.ModuleList(BertLayer(d, nh, 32) for _ in range(2))  # nn.MultiheadAttention bakes shapes
        self.head = nn.Linear(d, 5)

    def forward(self, x):
        B, _, H, W = x.shape
        t = self.patch(x).flatten(2).transpose(1, 2)
        h, w = H // self.p, W // self.p
        pp = self.pos[:, 1:].reshape(1, self.grid, self.grid, -1).permute(0, 3, 1, 2)
        pp = F.interpolate(pp, size=(h, w), mode="bicubic", align_corners=False).permute(0, 2, 3, 1).flatten(1, 2)
        t = torch.cat([self.cls.expand(B, -1, -1), t], 1) + torch.cat([self.pos[:, :1], pp], 1)
        for l in self.enc:
            t = l(t, 0.0)
        return self.head(t[:, 0])


def test_vit_interpolated_positions_legacy():
    torch.manual_seed(0)
    _run_model(ViT(), lambda s: [torch.randn(*s)], [(2, 3, 16, 16), (1, 3, 24, 12)], ["x"], ["y"],
               {"x": {0: "b", 2: "h", 3: "w"}}, opset=17)


@SLOW
def test_vit_interpolated_positions_dynamo():
    torch.manual_seed(0)
    _run_model(ViT(), lambda s: [torch.randn(*s)], [(2, 3, 16, 16), (1, 3, 24, 12)], ["x"], ["y"],
               {"x": {0: "b", 2: "h", 3: "w"}}, dynamo=True)


class T5RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.w, self.eps = nn.Parameter(torch.rand(d) + 0.5), eps

    def forward(self, x):
        return self.w * (x * torch.rsqrt(x.to(torch.float32).pow(2).mean(-1, keepdim=True) + self.eps))


def _rel_bucket(rel, bidirectional, nb=8, maxd=16):
    ret = 0
    if bidirectional:
        nb //= 2
        ret = (rel > 0).to(torch.long) * nb
        rel = torch.abs(rel)
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    exact = nb // 2
    small = rel < exact
    large = exact + (torch.log(rel.float() / exact) / math.log(maxd / exact) * (nb - exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, nb - 1))
    return ret + torch.where(small, rel, large)


class T5Attn(nn.Module):
    def __init__(self, d, nh, rel=False, bidir=True):
        super().__init__()
        self.nh, self.bidir = nh, bidir
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.rel = nn.Embedding(8, nh) if rel else None

    def bias(self, tq, tk):
        ctx = torch.arange(tq, dtype=torch.long)[:, None]
        mem = torch.arange(tk, dtype=torch.long)[None, :]
        return self.rel(_rel_bucket(mem - ctx, self.bidir)).permute(2, 0, 1)[None]

    def forward(self, x, kv, bias=None, mask=None):
        B, T, D = x.shape
        S = kv.shape[1]
        hd = D // self.nh
        q = self.q(x).view(B, T, self.nh, hd).transpose(1, 2)
        k = self.k(kv).view(B, S, self.nh, hd).transpose(1, 2)
        v = self.v(kv).view(B, S, self.nh, hd).transpose(1, 2)
        s = q @ k.transpose(-1, -2)
        if bias is None and self.rel is not None:
            bias = self.bias(T, S)
        if bias is not None:
            s = s + bias
        if mask is not None:
            s = s + mask
        return self.o((s.float().softmax(-1).type_as(s) @ v).transpose(1, 2).reshape(B, T, D)), bias


class T5(nn.Module):
    """T5: shared embedding, RMSNorm, relative position buckets (log / where / min) in the first layer's
    self-attention (bidirectional in the encoder, causal in the decoder), cross-attention, gated-GELU FF."""

    def __init__(self, v=40, d=16, nh=2, n=2):
        super().__init__()
        self.emb = nn.Embedding(v, d)
        self.ea = nn.ModuleList(T5Attn(d, nh, rel=(i == 0)) for i in range(n))
        self.en = nn.ModuleList(T5RMSNorm(d) for _ in range(2 * n + 1))
        self.ef = nn.ModuleList(nn.ModuleDict({"wi0": nn.Linear(d, 32, bias=False), "wi1": nn.Linear(d, 32, bias=False),
                                               "wo": nn.Linear(32, d, bias=False)}) for _ in range(n))
        self.ds = nn.ModuleList(T5Attn(d, nh, rel=(i == 0), bidir=False) for i in range(n))
        self.dc = nn.ModuleList(T5Attn(d, nh) for _ in range(n))
        self.dn = nn.ModuleList(T5RMSNorm(d) for _ in range(3 * n + 1))
        self.df = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(n))
        self.lm = nn.Linear(d, v, bias=False)

    def forward(self, src, src_mask, tgt):
        ext = (1.0 - src_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        x, bias = self.emb(src), None
        for i, (a, f) in enumerate(zip(self.ea, self.ef)):
            y, bias = a(self.en[2 * i](x), self.en[2 * i](x), bias, ext if i == 0 else None)
            if i == 0:
                bias = bias + ext
            x = x + y
            h = self.en[2 * i + 1](x)
            x = x + f["wo"](F.gelu(f["wi0"](h), approximate="tanh") * f["wi1"](h))
        mem = self.en[-1](x)
        T = tgt.shape[1]
        causal = torch.triu(torch.full((T, T), torch.finfo(torch.float32).min), 1)[None, None]
        y, dbias = self.emb(tgt), None
        for i in range(len(self.ds)):
            z, dbias = self.ds[i](self.dn[3 * i](y), self.dn[3 * i](y), dbias, causal if i == 0 else None)
            if i == 0:
                dbias = dbias + causal
            y = y + z
            y = y + self.dc[i](self.dn[3 * i + 1](y), mem, ext)[0]
            y = y + self.df[i](F.relu(self.dn[3 * i + 2](y)))
        return self.lm(self.dn[-1](y) * (16 ** -0.5))


def _t5_inputs(sz):
    b, s, t = sz
    g = torch.Generator().manual_seed(s * 10 + t)
    m = torch.ones(b, s, dtype=torch.int64)
    m[-1, s - 1:] = 0
    return [torch.randint(0, 40, (b, s), generator=g), m, torch.randint(0, 40, (b, t), generator=g)]


_T5_DYN = {"src": {0: "b", 1: "s"}, "src_mask": {0: "b", 1: "s"}, "tgt": {0: "b", 1: "t"}}


@pytest.mark.parametrize("opset", [14, 18])  # aten::triu needs opset 14
def test_t5_relative_buckets_legacy(opset):
    torch.manual_seed(0)
    _run_model(T5(), _t5_inputs, [(2, 6, 4), (1, 20, 9), (3, 3, 1)], ["src", "src_mask", "tgt"], ["logits"], _T5_DYN,
               opset=opset)


@SLOW
def test_t5_relative_buckets_dynamo():
    torch.manual_seed(0)
    _run_model(T5(), _t5_inputs, [(2, 6, 4), (1, 20, 9)], ["src", "src_mask", "tgt"], ["logits"], _T5_DYN,
               dynamo=True)


def _sinusoids(length, ch, max_ts=10000):
    inc = math.log(max_ts) / (ch // 2 - 1)
    inv = torch.exp(-inc * torch.arange(ch // 2))
    t = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], 1)


class WhisperEnc(nn.Module):
    def __init__(self, mels=8, d=16, nh=2, maxlen=64):
        super().__init__()
        self.c1, self.c2 = nn.Conv1d(mels, d, 3, padding=1), nn.Conv1d(d, d, 3, stride=2, padding=1)
        self.register_buffer("pos", _sinusoids(maxlen, d))
        self.layer = BertLayer(d, nh, 32)  # nn.MultiheadAttention's legacy export bakes the sequence length
        self.ln = nn.LayerNorm(d)

    def forward(self, mel):
        x = F.gelu(self.c2(F.gelu(self.c1(mel)))).permute(0, 2, 1)
        x = x + self.pos[: x.shape[1]]
        return self.ln(self.layer(x, 0.0))


class WhisperDecStep(nn.Module):
    """One decoder step with self-attention KV cache (concatenated) and cross-attention on the encoder output."""

    def __init__(self, v=30, d=16, nh=2):
        super().__init__()
        self.nh = nh
        self.emb, self.pos = nn.Embedding(v, d), nn.Parameter(torch.randn(32, d) * 0.1)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.cq, self.ck, self.cv, self.co = (nn.Linear(d, d) for _ in range(4))
        self.l1, self.l2, self.l3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 32), nn.GELU(), nn.Linear(32, d))

    def _h(self, t):
        B, T, D = t.shape
        return t.view(B, T, self.nh, D // self.nh).transpose(1, 2)

    def forward(self, tok, enc, pk, pv):
        P = pk.shape[2]
        x = self.emb(tok) + self.pos[P: P + tok.shape[1]]
        h = self.l1(x)
        k = torch.cat([pk, self._h(self.k(h))], 2)
        v = torch.cat([pv, self._h(self.v(h))], 2)
        a = F.scaled_dot_product_attention(self._h(self.q(h)), k, v)
        x = x + self.o(a.transpose(1, 2).flatten(2))
        h = self.l2(x)
        a = F.scaled_dot_product_attention(self._h(self.cq(h)), self._h(self.ck(enc)), self._h(self.cv(enc)))
        x = x + self.co(a.transpose(1, 2).flatten(2))
        x = x + self.ff(self.l3(x))
        return x @ self.emb.weight.T, k, v


def test_whisper_encoder_legacy_dynamic_frames():
    torch.manual_seed(0)
    _run_model(WhisperEnc(), lambda s: [torch.randn(*s)], [(2, 8, 20), (1, 8, 33)], ["mel"], ["y"],
               {"mel": {0: "b", 2: "t"}}, opset=17)


def _wdec_inputs(s):
    b, t, p, e = s
    return [torch.randint(0, 30, (b, t)), torch.randn(b, e, 16), torch.randn(b, 2, p, 8), torch.randn(b, 2, p, 8)]


_WDEC_DYN = {"tok": {0: "b", 1: "t"}, "enc": {0: "b", 1: "e"}, "pk": {0: "b", 2: "p"}, "pv": {0: "b", 2: "p"}}


def test_whisper_decoder_step_legacy():
    torch.manual_seed(0)
    _run_model(WhisperDecStep(), _wdec_inputs, [(2, 3, 0, 10), (2, 1, 4, 10), (1, 1, 7, 5)],
               ["tok", "enc", "pk", "pv"], ["logits", "k", "v"], _WDEC_DYN, opset=17)


@SLOW
def test_whisper_dynamo():
    torch.manual_seed(0)
    _run_model(WhisperEnc(), lambda s: [torch.randn(*s)], [(2, 8, 20), (1, 8, 33)], ["mel"], ["y"],
               {"mel": {0: "b", 2: "t"}}, dynamo=True)
    _run_model(WhisperDecStep(), _wdec_inputs, [(2, 3, 1, 10), (1, 1, 7, 5)],
               ["tok", "enc", "pk", "pv"], ["logits", "k", "v"], _WDEC_DYN, dynamo=True)


# ================================================================== recurrent, point clouds, graphs
class GRUSeq2Seq(nn.Module):
    def __init__(self, v=20, d=12, cell="GRU"):
        super().__init__()
        R = getattr(nn, cell)
        self.emb = nn.Embedding(v, d)
        self.enc = R(d, d, num_layers=2, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * d, d)
        self.dec = R(d, d, batch_first=True)
        self.out = nn.Linear(2 * d, v)
        self.cell = cell

    def forward(self, src, tgt):
        e, h = self.enc(self.emb(src))
        if self.cell == "LSTM":
            h0 = torch.tanh(self.bridge(torch.cat([h[0][-2], h[0][-1]], -1)))[None]
            hidden = (h0, torch.zeros_like(h0))
        else:
            hidden = torch.tanh(self.bridge(torch.cat([h[-2], h[-1]], -1)))[None]
        d, _ = self.dec(self.emb(tgt), hidden)
        mem = self.bridge(e)
        att = torch.softmax(d @ mem.transpose(1, 2), -1) @ mem
        return self.out(torch.cat([d, att], -1)).log_softmax(-1)


@pytest.mark.parametrize("cell,opset", [("GRU", 13), ("LSTM", 16)])
def test_rnn_seq2seq_dynamic_sequence_legacy(cell, opset):
    torch.manual_seed(0)
    _run_model(GRUSeq2Seq(cell=cell), lambda s: [torch.randint(0, 20, (s[0], s[1])), torch.randint(0, 20, (s[0], s[2]))],
               [(2, 7, 3), (1, 11, 5), (3, 2, 1)], ["src", "tgt"], ["y"],
               {"src": {0: "b", 1: "s"}, "tgt": {0: "b", 1: "t"}}, opset=opset)


class PointNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.tnet = nn.Sequential(nn.Conv1d(3, 16, 1), nn.BatchNorm1d(16), nn.ReLU(), nn.Conv1d(16, 32, 1), nn.ReLU())
        self.tfc = nn.Linear(32, 9)
        self.feat = nn.Sequential(nn.Conv1d(3, 16, 1), nn.BatchNorm1d(16), nn.ReLU(), nn.Conv1d(16, 32, 1))
        self.seg = nn.Conv1d(32 + 16, 4, 1)

    def forward(self, pts):  # (B, 3, N)
        t = torch.max(self.tnet(pts), 2, keepdim=False)[0]
        T = self.tfc(t).view(-1, 3, 3) + torch.eye(3)
        x = torch.bmm(T, pts)
        local = self.feat[:3](x)
        g = self.feat[3](local).max(dim=2, keepdim=True).values
        seg = self.seg(torch.cat([local, g.expand(-1, -1, pts.shape[2])], 1))
        return g.squeeze(-1), seg.argmax(1), seg


def test_pointnet_legacy_dynamic_points():
    torch.manual_seed(0)
    _run_model(_randbn(PointNet()), lambda s: [torch.randn(*s)], [(2, 3, 50), (3, 3, 17)], ["pts"],
               ["g", "lbl", "seg"], {"pts": {0: "b", 2: "n"}}, opset=15)


class GNN(nn.Module):
    """A message-passing GNN: gather node features along edges, scatter_add / scatter_reduce
    (amax, mean) messages back to the nodes, a degree normalisation."""

    def __init__(self, d=8):
        super().__init__()
        self.m1, self.m2, self.up = nn.Linear(2 * d, d), nn.Linear(d, d), nn.Linear(3 * d, d)

    def forward(self, x, src, dst):
        N, D = x.shape
        xs, xd = x.index_select(0, src), torch.gather(x, 0, dst[:, None].expand(-1, D))
        msg = torch.relu(self.m1(torch.cat([xs, xd], 1)))
        agg = torch.zeros(N, D).scatter_add(0, dst[:, None].expand(-1, D), msg)
        # (index_add: the TorchScript exporter writes a ScatterElements without reduction, wrong on repeated
        # indices in onnxruntime too; scatter_add exports with reduction="add")
        deg = torch.zeros(N).scatter_add(0, dst, torch.ones(dst.shape[0]))
        mx = torch.zeros(N, D).scatter_reduce(0, dst[:, None].expand(-1, D), self.m2(msg), "amax")
        mean = agg / deg.clamp(min=1)[:, None]
        return self.up(torch.cat([x, mean, mx], 1)), deg


def _gnn_inputs(s):
    n, e = s
    g = torch.Generator().manual_seed(n * 7 + e)
    return [torch.randn(n, 8), torch.randint(0, n, (e,), generator=g), torch.randint(0, n, (e,), generator=g)]


@pytest.mark.parametrize("opset", [16, 18])
def test_gnn_scatter_gather_legacy(opset):
    torch.manual_seed(0)
    _run_model(GNN(), _gnn_inputs, [(6, 15), (10, 4)], ["x", "src", "dst"], ["y", "deg"],
               {"x": {0: "n"}, "src": {0: "e"}, "dst": {0: "e"}}, opset=opset)


class Detect(nn.Module):
    """Detection post-processing: sigmoid scores, TopK over anchors, score threshold via NonZero, box decode,
    gather of the kept boxes."""

    def forward(self, boxes, logits):  # (N, 4), (N, C)
        scores, labels = logits.sigmoid().max(1)
        k = min(10, boxes.shape[0]) if not torch.onnx.is_in_onnx_export() else 10
        top, idx = scores.topk(k)
        keep = torch.nonzero(top > 0.5).squeeze(1)
        sel = idx[keep]
        b = boxes[sel]
        xyxy = torch.cat([b[:, :2] - b[:, 2:] / 2, b[:, :2] + b[:, 2:] / 2], 1)
        return xyxy, top[keep], labels[sel]


def test_detection_postprocess_topk_nonzero_legacy():
    torch.manual_seed(0)
    m = Detect()
    b = _export(m, [torch.rand(20, 4), torch.randn(20, 3)], ["boxes", "logits"], ["xyxy", "s", "l"],
                {"boxes": {0: "n"}, "logits": {0: "n"}}, opset=17)
    sess, ref = nx.InferenceSession(b), _ort(b)
    feeds = []
    for n in (20, 37, 12):
        g = torch.Generator().manual_seed(n)
        feeds.append({"boxes": torch.rand(n, 4, generator=g).numpy(), "logits": torch.randn(n, 3, generator=g).numpy()})
    _cmp(sess, ref, feeds)


# ================================================================== how the files are saved / rewritten
def _mbv3_bytes(opset=17):
    torch.manual_seed(0)
    return _export(_randbn(MobileNetV3()).eval(), [torch.randn(1, 3, 32, 32)], ["x"], ["y"],
                   {"x": {0: "b", 2: "h", 3: "w"}}, opset=opset)


def _feeds(dt=np.float32):
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal(s).astype(dt)} for s in ((2, 3, 32, 32), (1, 3, 40, 24))]


def test_external_data_loaded_from_a_path(tmp_path):
    m = onnx.load_from_string(_mbv3_bytes())
    p = str(tmp_path / "m.onnx")
    onnx.save_model(m, p, save_as_external_data=True, all_tensors_to_one_file=True, location="m.data",
                    size_threshold=0)
    assert os.path.exists(tmp_path / "m.data")
    _cmp(nx.InferenceSession(p), _ort(p), _feeds())


def test_half_model_export():
    torch.manual_seed(0)
    b = _export(_randbn(ResNeXt()).eval().half(), [torch.randn(1, 3, 24, 24).half()], ["x"], ["y"],
                {"x": {0: "b", 2: "h", 3: "w"}}, opset=17)
    _cmp(nx.InferenceSession(b), _ort(b), _feeds(np.float16)[:1], rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("level", ["ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED"])
def test_onnxruntime_offline_optimized_model(tmp_path, level):
    p = str(tmp_path / "opt.onnx")
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    so.optimized_model_filepath = p
    ort.InferenceSession(_mbv3_bytes(), so, providers=["CPUExecutionProvider"])
    _cmp(nx.InferenceSession(p), _ort(p), _feeds())


@pytest.mark.parametrize("opset", [11, 12])
def test_older_opset_models_are_converted_up(opset):
    # (onnx.version_converter has no down-adapters from 13 for Mul & co: opset 11/12 files come from exporters)
    b = _mbv3_bytes(opset)
    sess = nx.InferenceSession(b)
    assert sess.opset >= 13, sess.opset  # the loader converted the model up to its minimum opset
    _cmp(sess, _ort(b), _feeds())


class ScriptedLoop(nn.Module):
    """torch.jit.script control flow (TorchScript exporter): a data-dependent If and a Loop over a dynamic
    trip count with a carried state."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x, n: int):
        h = x
        for _ in range(n):
            h = torch.tanh(self.l(h))
        if bool(h.sum() > 0):
            h = h * 2.0
        else:
            h = h - 1.0
        return h


def test_jit_script_if_loop_legacy():
    torch.manual_seed(0)
    m = torch.jit.script(ScriptedLoop().eval())
    b = _export(m, [torch.randn(2, 4), torch.tensor(3)], ["x", "n"], ["y"], {"x": {0: "b"}}, opset=17)
    assert {"Loop", "If"} <= {n.op_type for n in onnx.load_from_string(b).graph.node}
    sess, ref = nx.InferenceSession(b), _ort(b)
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((b_, 4)).astype(np.float32) + off, "n": np.array(n, np.int64)}
             for b_, n, off in ((2, 3, 0.0), (3, 0, 5.0), (1, 5, -5.0))]
    _cmp(sess, ref, feeds)
