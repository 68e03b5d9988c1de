"""Real PyTorch architectures (random weights, written here compactly) exported to ONNX with both torch
exporters (the TorchScript one, ``dynamo=False``, at several opsets, and ``dynamo=True``), run with
``neetorch.onnx.InferenceSession`` at several input sizes and compared with onnxruntime and torch; models
quantized with ``onnxruntime.quantization`` (dynamic, static QDQ and QOperator) compared with onnxruntime;
the ops those exports need checked node by node (LSTM/GRU/RNN ``sequence_lens`` from packed sequences,
onnxruntime's com.microsoft QLinear* / QGemm ops).

The dynamo exporter costs seconds per model: the default run exports a few models with it; the rest
(``@pytest.mark.slow``) runs with NEE_ONNX_MODELS_SLOW=1.
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
from onnx import TensorProto, helper, numpy_helper

import neetorch.onnx as nx

nn = torch.nn
F = torch.nn.functional

SLOW = pytest.mark.skipif(not os.environ.get("NEE_ONNX_MODELS_SLOW"),
                          reason="dynamo exports of every model: set NEE_ONNX_MODELS_SLOW=1")


def _dynamo_ok():
    try:
        import onnxscript  # noqa: F401
    except ImportError:
        return False
    return True


def _export(m, args, names_in, names_out, dyn_axes, dynamo=False, opset=None):
    kw = {"opset_version": opset} if opset else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            if not _dynamo_ok():
                pytest.skip("the dynamo exporter needs onnxscript")
            from torch.export import Dim
            ds = tuple({ax: Dim.DYNAMIC for ax in dyn_axes.get(n, {})} or None for n in names_in)
            prog = torch.onnx.export(m, tuple(args), input_names=names_in, output_names=names_out,
                                     dynamic_shapes=ds, dynamo=True, verbose=False, **kw)
            return prog.model_proto.SerializeToString()
        f = io.BytesIO()
        torch.onnx.export(m, tuple(args), f, input_names=names_in, output_names=names_out, dynamic_axes=dyn_axes,
                          dynamo=False, **kw)
        return f.getvalue()


def _ort(b, optimize=True, threads=0, exact_u8s8=False):
    """``exact_u8s8``: onnxruntime's uint8 x int8 products on x86-64 without VNNI (AVX2, AVX-512F/BW) sum pairs of
    products in saturating int16 (VPMADDUBSW; onnxruntime's quantization docs), so its answer there is not the
    spec's and depends on the host.  "session.x64quantprecision" (onnxruntime_session_options_config_keys.h: "use
    slower U8U8 matrix multiplication instead") rewrites the int8 weights to uint8 on such hosts, exact there and a
    no-op elsewhere.  It is a level-2 graph transformer (inert with optimize=False) and onnxruntime has no int8
    activation kernels for the rewritten weights: models with uint8 activations only."""
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.intra_op_num_threads = threads
    if not optimize:  # QDQ graphs: onnxruntime's fused integer kernels round differently from the ONNX ops
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if exact_u8s8:
        so.add_session_config_entry("session.x64quantprecision", "1")
    return ort.InferenceSession(b, so, providers=["CPUExecutionProvider"])


def _run_model(m, make_inputs, sizes, names_in, names_out, dyn_axes, dynamo=False, opset=None, rtol=1e-4,
               atol=1e-4, torch_ref=True, mode="jit"):
    m.eval()
    b = _export(m, make_inputs(sizes[0]), names_in, names_out, dyn_axes, dynamo, opset)
    sess, ref = nx.InferenceSession(b), _ort(b)
    for sz in sizes:
        args = make_inputs(sz)
        feed = {i.name: a.numpy() for i, a in zip(ref.get_inputs(), args)}
        got, want = sess.run(None, feed), ref.run(None, feed)
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape and g.dtype == w.dtype, (k, sz, g.shape, w.shape, g.dtype, w.dtype)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {k} at {sz}")
        if torch_ref:
            with torch.no_grad():
                tout = m(*args)
            tout = [tout] if isinstance(tout, torch.Tensor) else list(tout)
            for k, (g, t) in enumerate(zip(got, tout)):
                np.testing.assert_allclose(g, t.numpy(), rtol=rtol, atol=atol, err_msg=f"torch output {k} at {sz}")
    assert sess.info["mode"] == mode, sess.info
    return sess, b


def _randbn(m):
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.5, 0.5)
    return m


# ================================================================== architectures
class DropPath(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        keep = 1 - self.p
        return x * x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep) / keep


class MBConv(nn.Module):
    """EfficientNet's block: expand 1x1, depthwise kxk, squeeze-excitation, project, drop-path residual."""

    def __init__(self, cin, cout, exp, k, stride):
        super().__init__()
        mid = cin * exp
        self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU())
        self.dw = nn.Sequential(nn.Conv2d(mid, mid, k, stride, k // 2, groups=mid, bias=False), nn.BatchNorm2d(mid),
                                nn.SiLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.se1, self.se2 = nn.Conv2d(mid, max(1, cin // 4), 1), nn.Conv2d(max(1, cin // 4), mid, 1)
        self.proj = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.dp, self.res = DropPath(0.2), stride == 1 and cin == cout

    def forward(self, x):
        y = self.dw(self.expand(x))
        y = y * torch.sigmoid(self.se2(F.silu(self.se1(self.pool(y)))))
        y = self.proj(y)
        return x + self.dp(y) if self.res else y


class EffNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.SiLU())
        self.blocks = nn.Sequential(MBConv(8, 8, 1, 3, 1), MBConv(8, 12, 4, 5, 2), MBConv(12, 12, 4, 3, 1))
        self.head = nn.Sequential(nn.Conv2d(12, 32, 1, bias=False), nn.BatchNorm2d(32), nn.SiLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(32, 10))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        return F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias,
                            self.eps).permute(0, 3, 1, 2)


class CNBlock(nn.Module):
    """ConvNeXt: depthwise 7x7, LayerNorm over channels (channels-last permute), MLP with GELU, layer scale."""

    def __init__(self, dim):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1, self.pw2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.rand(dim) + 0.5)
        self.dp = DropPath(0.1)

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.gamma * self.pw2(F.gelu(self.pw1(self.norm(y))))
        return x + self.dp(y.permute(0, 3, 1, 2))


class ConvNeXt(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 4, 4), LayerNorm2d(16, eps=1e-6))
        self.s1, self.s2 = CNBlock(16), CNBlock(24)
        self.down = nn.Sequential(LayerNorm2d(16, eps=1e-6), nn.Conv2d(16, 24, 2, 2))
        self.norm, self.head = nn.LayerNorm(24, eps=1e-6), nn.Linear(24, 10)

    def forward(self, x):
        x = self.s2(self.down(self.s1(self.stem(x))))
        return self.head(self.norm(x.mean([-2, -1])))


def test_efficientnet_blocks_legacy_opset13():
    torch.manual_seed(0)
    _run_model(_randbn(EffNet()), lambda b: [torch.randn(b, 3, 32, 32)], [2, 3, 1], ["x"], ["y"],
               {"x": {0: "batch"}, "y": {0: "batch"}}, opset=13)


def test_efficientnet_blocks_dynamo_dynamic_hw():
    torch.manual_seed(0)
    _run_model(_randbn(EffNet()), lambda s: [torch.randn(2, 3, s, s + 8)], [32, 48], ["x"], ["y"],
               {"x": {0: "batch", 2: "h", 3: "w"}}, dynamo=True)


def test_convnext_legacy_dynamic_hw():
    torch.manual_seed(0)
    _run_model(ConvNeXt(), lambda s: [torch.randn(2, 3, s, s)], [32, 48], ["x"], ["y"],
               {"x": {0: "batch", 2: "h", 3: "w"}, "y": {0: "batch"}}, opset=18)


# ------------------------------------------------------------------ GPT-2 with past key/values
class Conv1D(nn.Module):
    def __init__(self, nf, nin):
        super().__init__()
        self.weight, self.bias, self.nf = nn.Parameter(torch.randn(nin, nf) * 0.1), nn.Parameter(torch.randn(nf) * 0.1), nf

    def forward(self, x):
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(x.size()[:-1] + (self.nf,))


class GPT2(nn.Module):
    """GPT-2 (2 layers): Conv1D projections, gelu_new, causal mask from shapes (triu/where), position ids via
    arange from the past length, attention-mask padding, tied embedding head, presents out."""
    D, H, V = 16, 2, 50

    def __init__(self):
        super().__init__()
        D = self.D
        self.wte, self.wpe = nn.Embedding(self.V, D), nn.Embedding(64, D)
        self.ln1, self.ln2 = nn.ModuleList(nn.LayerNorm(D) for _ in range(2)), nn.ModuleList(nn.LayerNorm(D) for _ in range(2))
        self.attn, self.proj = nn.ModuleList(Conv1D(3 * D, D) for _ in range(2)), nn.ModuleList(Conv1D(D, D) for _ in range(2))
        self.fc, self.fc2 = nn.ModuleList(Conv1D(4 * D, D) for _ in range(2)), nn.ModuleList(Conv1D(D, 4 * D) for _ in range(2))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, self.V, bias=False)
        self.lm_head.weight = self.wte.weight

    def _split(self, x):
        return x.view(x.size()[:-1] + (self.H, self.D // self.H)).permute(0, 2, 1, 3)

    def forward(self, input_ids, attention_mask, p0k, p0v, p1k, p1v):
        past = (p0k, p0v, p1k, p1v)
        T, P = input_ids.shape[1], p0k.shape[-2]
        x = self.wte(input_ids) + self.wpe(torch.arange(P, P + T, dtype=torch.long).unsqueeze(0))
        am = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        presents = []
        for i in range(2):
            q, k, v = self.attn[i](self.ln1[i](x)).split(self.D, dim=2)
            q, k, v = self._split(q), self._split(k), self._split(v)
            k, v = torch.cat((past[2 * i], k), -2), torch.cat((past[2 * i + 1], v), -2)
            w = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5, dtype=q.dtype)
            S = k.size(-2)
            causal = torch.ones(T, S, dtype=torch.bool).triu(S - T + 1)
            w = torch.where(causal, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype), w) + am
            o = torch.matmul(F.softmax(w, dim=-1), v).permute(0, 2, 1, 3).contiguous()
            x = x + self.proj[i](o.view(o.size()[:-2] + (self.D,)))
            h = self.fc[i](self.ln2[i](x))
            h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
            x = x + self.fc2[i](h)
            presents += [k, v]
        return (self.lm_head(self.ln_f(x)), *presents)


_GPT_IN = ["input_ids", "attention_mask", "past_0_k", "past_0_v", "past_1_k", "past_1_v"]
_GPT_OUT = ["logits", "present_0_k", "present_0_v", "present_1_k", "present_1_v"]
_GPT_DYN = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
            **{n: {0: "batch", 2: "past"} for n in _GPT_IN[2:]}}


def _gpt_inputs(sz):
    b, t, p = sz
    am = torch.ones(b, p + t, dtype=torch.long)
    am[0, 0] = 0
    return [torch.randint(0, GPT2.V, (b, t)), am] + [torch.randn(b, GPT2.H, p, GPT2.D // GPT2.H) for _ in range(4)]


def _gpt_generate(b):
    """A 5-token prompt with empty past, then 3 greedy steps feeding the presents back as past."""
    sess, ref = nx.InferenceSession(b), _ort(b)
    ids = np.random.default_rng(0).integers(0, GPT2.V, (2, 5)).astype(np.int64)
    past = [np.zeros((2, GPT2.H, 0, GPT2.D // GPT2.H), np.float32) for _ in range(4)]
    past_r, cur, am = list(past), ids, np.ones((2, 5), np.int64)
    for _ in range(4):
        out = sess.run(None, dict(zip(_GPT_IN, [cur, am] + past)))
        out_r = ref.run(None, dict(zip(_GPT_IN, [cur, am] + past_r)))
        for g, w in zip(out, out_r):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
        past, past_r = out[1:], out_r[1:]
        cur = out[0][:, -1:].argmax(-1).astype(np.int64)
        am = np.ones((2, am.shape[1] + 1), np.int64)
    assert past[0].shape == (2, GPT2.H, 8, GPT2.D // GPT2.H)
    assert sess.info["mode"] == "jit", sess.info


def test_gpt2_past_key_values_and_generation_legacy():
    torch.manual_seed(0)
    _, b = _run_model(GPT2(), _gpt_inputs, [(2, 4, 3), (1, 1, 7), (3, 2, 5)], _GPT_IN, _GPT_OUT, _GPT_DYN)
    _gpt_generate(b)


@SLOW
def test_gpt2_past_key_values_and_generation_dynamo():
    torch.manual_seed(0)
    _, b = _run_model(GPT2(), _gpt_inputs, [(2, 4, 3), (1, 1, 7)], _GPT_IN, _GPT_OUT, _GPT_DYN, dynamo=True)
    _gpt_generate(b)


# ------------------------------------------------------------------ LLaMA attention with a KV cache (dynamo)
class LlamaBlock(nn.Module):
    def __init__(self, d=32, h=4, kvh=2):
        super().__init__()
        self.h, self.kvh, self.hd = h, kvh, d // h
        self.q, self.o = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.k, self.v = nn.Linear(d, kvh * self.hd, bias=False), nn.Linear(d, kvh * self.hd, bias=False)
        self.n1, self.n2 = nn.RMSNorm(d, eps=1e-6), nn.RMSNorm(d, eps=1e-6)
        self.g, self.u, self.dn = nn.Linear(d, 64, bias=False), nn.Linear(d, 64, bias=False), nn.Linear(64, d, bias=False)
        self.register_buffer("inv", 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd)))

    def _rope(self, x, cos, sin):
        x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return x * cos + torch.cat((-x2, x1), -1) * sin

    def forward(self, x, pk, pv):
        B, T, D = x.shape
        P = pk.shape[2]
        fr = torch.arange(P, P + T, dtype=torch.float32)[:, None] * self.inv[None]
        emb = torch.cat((fr, fr), -1)
        cos, sin = emb.cos(), emb.sin()
        hx = self.n1(x)
        q = self._rope(self.q(hx).view(B, T, self.h, self.hd).transpose(1, 2), cos, sin)
        k = self._rope(self.k(hx).view(B, T, self.kvh, self.hd).transpose(1, 2), cos, sin)
        k, v = torch.cat([pk, k], 2), torch.cat([pv, self.v(hx).view(B, T, self.kvh, self.hd).transpose(1, 2)], 2)
        mask = torch.full((T, P + T), float("-inf")).triu(P + 1)
        o = F.scaled_dot_product_attention(q, k.repeat_interleave(self.h // self.kvh, 1),
                                           v.repeat_interleave(self.h // self.kvh, 1), attn_mask=mask)
        x = x + self.o(o.transpose(1, 2).reshape(B, T, D))
        hx = self.n2(x)
        return x + self.dn(F.silu(self.g(hx)) * self.u(hx)), k, v


def test_llama_kv_cache_dynamo():
    torch.manual_seed(0)
    _run_model(LlamaBlock(), lambda s: [torch.randn(s[0], s[1], 32)] + [torch.randn(s[0], 2, s[2], 8) for _ in range(2)],
               [(2, 5, 3), (1, 1, 8)], ["x", "pk", "pv"], ["y", "k", "v"],
               {"x": {0: "b", 1: "t"}, "pk": {0: "b", 2: "p"}, "pv": {0: "b", 2: "p"}}, dynamo=True)


# ------------------------------------------------------------------ encoder-decoder, windows, detection
class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.t = nn.Transformer(16, 2, 2, 2, 32, dropout=0.0, batch_first=True)

    def forward(self, src, tgt, src_pad):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], dtype=src.dtype)
        return self.t(src, tgt, tgt_mask=mask, src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad,
                      tgt_is_causal=False)


def _s2s_inputs(sz):
    b, s, t = sz
    pad = torch.zeros(b, s, dtype=torch.bool)
    pad[0, -1] = True
    return [torch.randn(b, s, 16), torch.randn(b, t, 16), pad]


_S2S_DYN = {"src": {0: "b", 1: "s"}, "tgt": {0: "b", 1: "t"}, "src_pad": {0: "b", 1: "s"}}


def test_nn_transformer_masks_legacy():
    # the TorchScript exporter bakes batch * heads into nn.MultiheadAttention's reshapes: one size
    torch.manual_seed(0)
    _run_model(Seq2Seq(), _s2s_inputs, [(2, 5, 4), (2, 5, 4)], ["src", "tgt", "src_pad"], ["y"], _S2S_DYN)


@SLOW
def test_nn_transformer_masks_dynamo():
    torch.manual_seed(0)
    _run_model(Seq2Seq(), _s2s_inputs, [(2, 5, 4), (3, 7, 2), (1, 3, 6)], ["src", "tgt", "src_pad"], ["y"], _S2S_DYN,
               dynamo=True)


def _window_partition(x, ws):
    B, H, W, C = x.shape
    return x.view(B, H // ws, ws, W // ws, ws, C).permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws, ws, C)


class SwinBlock(nn.Module):
    """Swin: (shifted) windows via roll + partition reshapes/permutes, relative position bias gathered from
    a table, the shifted-window attention mask."""

    def __init__(self, dim=16, res=8, nh=2, ws=4, shift=0):
        super().__init__()
        self.ws, self.shift, self.res, self.nh = ws, shift, res, nh
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.rpb = nn.Parameter(torch.randn((2 * ws - 1) ** 2, nh) * 0.1)
        c = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
        r = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0).contiguous()
        r[:, :, 0] += ws - 1
        r[:, :, 1] += ws - 1
        r[:, :, 0] *= 2 * ws - 1
        self.register_buffer("rpi", r.sum(-1))
        am = None
        if shift:
            img, cnt = torch.zeros(1, res, res, 1), 0
            for h in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                for w in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                    img[:, h, w, :] = cnt
                    cnt += 1
            mw = _window_partition(img, ws).view(-1, ws * ws)
            am = mw.unsqueeze(1) - mw.unsqueeze(2)
            am = am.masked_fill(am != 0, -100.0).masked_fill(am == 0, 0.0)
        self.register_buffer("am", am)

    def forward(self, x):
        H = W = self.res
        B, _, C = x.shape
        ws, N = self.ws, self.ws * self.ws
        y = self.n1(x).view(B, H, W, C)
        if self.shift:
            y = torch.roll(y, shifts=(-self.shift, -self.shift), dims=(1, 2))
        xw = _window_partition(y, ws).view(-1, N, C)
        qkv = self.qkv(xw).reshape(xw.shape[0], N, 3, self.nh, C // self.nh).permute(2, 0, 3, 1, 4)
        a = (qkv[0] * (C // self.nh) ** -0.5) @ qkv[1].transpose(-2, -1)
        a = a + self.rpb[self.rpi.view(-1)].view(N, N, -1).permute(2, 0, 1).contiguous().unsqueeze(0)
        if self.am is not None:
            nW = self.am.shape[0]
            a = (a.view(-1, nW, self.nh, N, N) + self.am.unsqueeze(1).unsqueeze(0)).view(-1, self.nh, N, N)
        o = self.proj((a.softmax(-1) @ qkv[2]).transpose(1, 2).reshape(-1, N, C)).view(-1, ws, ws, C)
        y = o.view(-1, H // ws, W // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, H, W, C)
        if self.shift:
            y = torch.roll(y, shifts=(self.shift, self.shift), dims=(1, 2))
        x = x + y.view(B, H * W, C)
        return x + self.mlp(self.n2(x))


class Swin(nn.Module):
    def __init__(self):
        super().__init__()
        self.pe, self.norm = nn.Conv2d(3, 16, 4, 4), nn.LayerNorm(16)
        self.b1, self.b2, self.head = SwinBlock(shift=0), SwinBlock(shift=2), nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.b2(self.b1(self.norm(self.pe(x).flatten(2).transpose(1, 2)))).mean(1))


def test_swin_window_attention_legacy():
    torch.manual_seed(0)
    _run_model(Swin(), lambda b: [torch.randn(b, 3, 32, 32)], [2, 3], ["x"], ["y"], {"x": {0: "b"}}, opset=14)


class Wav2Vec(nn.Module):
    """wav2vec2 feature encoder (Conv1d, GroupNorm, GELU), grouped positional conv, conformer conv module
    (pointwise Conv1d, GLU, depthwise Conv1d, BatchNorm1d, SiLU)."""

    def __init__(self):
        super().__init__()
        self.c0, self.gn = nn.Conv1d(1, 16, 10, 5, bias=False), nn.GroupNorm(16, 16)
        self.c1, self.c2 = nn.Conv1d(16, 16, 3, 2, bias=False), nn.Conv1d(16, 16, 2, 2, bias=False)
        self.ln, self.fp = nn.LayerNorm(16), nn.Linear(16, 24)
        self.pos = nn.Conv1d(24, 24, 8, padding=4, groups=4)
        self.cln, self.pw1, self.dw = nn.LayerNorm(24), nn.Conv1d(24, 48, 1), nn.Conv1d(24, 24, 7, padding=3, groups=24)
        self.bn, self.pw2 = nn.BatchNorm1d(24), nn.Conv1d(24, 24, 1)

    def forward(self, wav):
        x = F.gelu(self.gn(self.c0(wav[:, None])))
        x = F.gelu(self.c2(F.gelu(self.c1(x))))
        x = self.fp(self.ln(x.transpose(1, 2)))
        x = x + F.gelu(self.pos(x.transpose(1, 2))[:, :, :-1]).transpose(1, 2)
        y = F.glu(self.pw1(self.cln(x).transpose(1, 2)), dim=1)
        return x + self.pw2(F.silu(self.bn(self.dw(y)))).transpose(1, 2)


def test_wav2vec_conformer_conv_stack_legacy():
    torch.manual_seed(0)
    _run_model(_randbn(Wav2Vec()), lambda s: [torch.randn(*s)], [(2, 400), (1, 640), (3, 333)], ["wav"], ["y"],
               {"wav": {0: "b", 1: "t"}}, opset=13)


class CLIPText(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(60, 16), nn.Parameter(torch.randn(12, 16) * 0.1)
        self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation="gelu",
                                                               batch_first=True, norm_first=True) for _ in range(2))
        self.ln, self.proj = nn.LayerNorm(16), nn.Parameter(torch.randn(16, 8) * 0.2)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.tok(ids) + self.pos[:T]
        mask = torch.empty(T, T).fill_(float("-inf")).triu_(1)
        for b in self.blocks:
            x = b(x, src_mask=mask)
        x = self.ln(x)
        return x[torch.arange(x.shape[0]), ids.argmax(dim=-1)] @ self.proj  # the EOT token's features


def test_clip_text_argmax_pooling_legacy():
    torch.manual_seed(0)  # the TorchScript exporter bakes the sizes into MultiheadAttention: one size
    _run_model(CLIPText(), lambda s: [torch.randint(0, 60, s)], [(2, 7), (2, 7)], ["ids"], ["y"], {"ids": {0: "b", 1: "t"}})


@SLOW
def test_clip_text_argmax_pooling_dynamo():
    torch.manual_seed(0)
    _run_model(CLIPText(), lambda s: [torch.randint(0, 60, s)], [(2, 7), (3, 12), (1, 4)], ["ids"], ["y"],
               {"ids": {0: "b", 1: "t"}}, dynamo=True)


class DETR(nn.Module):
    """DETR: sine positional encoding from a padding mask (cumsum), decoder layers with nn.MultiheadAttention
    (query positions, memory key_padding_mask), class and sigmoid box heads."""

    def __init__(self, d=16, nq=5):
        super().__init__()
        self.backbone, self.qe = nn.Conv2d(3, d, 4, 4), nn.Embedding(nq, d)
        self.sa = nn.ModuleList(nn.MultiheadAttention(d, 2) for _ in range(2))
        self.ca = nn.ModuleList(nn.MultiheadAttention(d, 2) for _ in range(2))
        self.ff = nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d)) for _ in range(2))
        self.ns = nn.ModuleList(nn.LayerNorm(d) for _ in range(7))
        self.cls, self.box = nn.Linear(d, 4), nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 4))

    def forward(self, img, mask):
        f = self.backbone(img)
        B, C = f.shape[:2]
        m = F.interpolate(mask[None].float(), size=f.shape[-2:]).to(torch.bool)[0]
        nm = ~m
        y, x = nm.cumsum(1, dtype=torch.float32), nm.cumsum(2, dtype=torch.float32)
        dim_t = torch.arange(C // 2, dtype=torch.float32)
        dim_t = 10000 ** (2 * (dim_t // 2) / (C // 2))
        px, py = x[:, :, :, None] / dim_t, y[:, :, :, None] / dim_t
        px = torch.stack((px[:, :, :, 0::2].sin(), px[:, :, :, 1::2].cos()), dim=4).flatten(3)
        py = torch.stack((py[:, :, :, 0::2].sin(), py[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos = torch.cat((py, px), dim=3).permute(0, 3, 1, 2).flatten(2).permute(2, 0, 1)
        mem, mpad = f.flatten(2).permute(2, 0, 1), m.flatten(1)
        qpos = self.qe.weight.unsqueeze(1).repeat(1, B, 1)
        tgt = torch.zeros_like(qpos)
        for i in range(2):
            q = tgt + qpos
            tgt = self.ns[3 * i](tgt + self.sa[i](q, q, value=tgt)[0])
            tgt = self.ns[3 * i + 1](tgt + self.ca[i](tgt + qpos, mem + pos, mem, key_padding_mask=mpad)[0])
            tgt = self.ns[3 * i + 2](tgt + self.ff[i](tgt))
        h = self.ns[6](tgt).transpose(0, 1)
        return self.cls(h), self.box(h).sigmoid()


def _detr_inputs(s):
    b, h, w = s
    m = torch.zeros(b, h, w, dtype=torch.bool)
    m[0, :, w // 2:] = True
    return [torch.randn(b, 3, h, w), m]


def test_detr_decoder_legacy():
    torch.manual_seed(0)
    _run_model(DETR().eval(), _detr_inputs, [(2, 16, 24), (1, 32, 16)], ["img", "mask"], ["logits", "boxes"],
               {"img": {0: "b", 2: "h", 3: "w"}, "mask": {0: "b", 1: "h", 2: "w"}}, opset=14)


class YOLO(nn.Module):
    """YOLOv5-style: SiLU convs, SPPF max pools, nearest upsample + concat, Detect head decoding boxes with a
    meshgrid, sigmoid and anchor arithmetic."""

    def __init__(self, nc=3, na=2):
        super().__init__()
        self.b1 = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.SiLU(), nn.Conv2d(8, 8, 3, 2, 1),
                                nn.SiLU(), nn.Conv2d(8, 8, 3, 2, 1), nn.SiLU())
        self.b2, self.pool = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.SiLU()), nn.MaxPool2d(5, 1, 2)
        self.up, self.c = nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(72, 8, 1)
        self.no, self.na, self.stride = nc + 5, na, (8.0, 16.0)
        self.register_buffer("anchors", torch.tensor([[10.0, 13, 16, 30], [30, 61, 62, 45]]).view(2, na, 2))
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * na, 1) for c in (8, 16))

    def forward(self, x):
        p3 = self.b1(x)
        p4 = self.b2(p3)
        y1 = self.pool(p4)
        y2 = self.pool(y1)
        p4 = torch.cat([p4, y1, y2, self.pool(y2)], 1)
        p3 = F.silu(self.c(torch.cat([self.up(p4), p3], 1)))
        z = []
        for i, feat in enumerate((p3, p4[:, :16])):
            t = self.m[i](feat)
            bs, _, ny, nx = t.shape
            t = t.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            yv, xv = torch.meshgrid(torch.arange(ny, dtype=torch.float32), torch.arange(nx, dtype=torch.float32),
                                    indexing="ij")
            grid = torch.stack((xv, yv), 2).expand(1, self.na, ny, nx, 2) - 0.5
            ag = (self.anchors[i] * self.stride[i]).view(1, self.na, 1, 1, 2).expand(1, self.na, ny, nx, 2)
            xy, wh, conf = t.sigmoid().split((2, 2, self.no - 4), 4)
            xy, wh = (xy * 2 + grid) * self.stride[i], (wh * 2) ** 2 * ag
            z.append(torch.cat((xy, wh, conf), 4).view(bs, self.na * nx * ny, self.no))
        return torch.cat(z, 1)


def test_yolo_head_legacy_dynamic_hw():
    torch.manual_seed(0)
    _run_model(_randbn(YOLO()), lambda s: [torch.randn(*s)], [(2, 3, 64, 64), (1, 3, 32, 96)], ["x"], ["y"],
               {"x": {0: "b", 2: "h", 3: "w"}, "y": {0: "b", 1: "n"}})


@SLOW
@pytest.mark.parametrize("name", ["effnet", "convnext", "swin", "wav2vec", "detr", "yolo"])
def test_models_dynamo(name):
    torch.manual_seed(0)
    if name == "effnet":
        _run_model(_randbn(EffNet()), lambda b: [torch.randn(b, 3, 32, 32)], [2, 1], ["x"], ["y"], {"x": {0: "b"}},
                   dynamo=True)
    elif name == "convnext":
        _run_model(ConvNeXt(), lambda s: [torch.randn(2, 3, s, s)], [32, 48], ["x"], ["y"],
                   {"x": {0: "b", 2: "h", 3: "w"}}, dynamo=True)
    elif name == "swin":
        _run_model(Swin(), lambda b: [torch.randn(b, 3, 32, 32)], [2, 3], ["x"], ["y"], {"x": {0: "b"}}, dynamo=True)
    elif name == "wav2vec":
        _run_model(_randbn(Wav2Vec()), lambda s: [torch.randn(*s)], [(2, 400), (3, 333)], ["wav"], ["y"],
                   {"wav": {0: "b", 1: "t"}}, dynamo=True)
    elif name == "detr":
        _run_model(DETR().eval(), _detr_inputs, [(2, 16, 24), (1, 32, 16)], ["img", "mask"], ["logits", "boxes"],
                   {"img": {0: "b", 2: "h", 3: "w"}, "mask": {0: "b", 1: "h", 2: "w"}}, dynamo=True)
    else:
        _run_model(_randbn(YOLO()), lambda s: [torch.randn(*s)], [(2, 3, 64, 64), (1, 3, 32, 96)], ["x"], ["y"],
                   {"x": {0: "b", 2: "h", 3: "w"}}, dynamo=True)


# ------------------------------------------------------------------ packed sequences: LSTM sequence_lens
class RNNT(nn.Module):
    """RNN-T: a bidirectional 2-layer LSTM encoder over packed (variable-length) sequences, an LSTM
    prediction network, a joint network."""

    def __init__(self):
        super().__init__()
        self.enc = nn.LSTM(8, 12, num_layers=2, batch_first=True, bidirectional=True)
        self.emb, self.pred = nn.Embedding(20, 8), nn.LSTM(8, 12, batch_first=True)
        self.je, self.jp, self.out = nn.Linear(24, 16), nn.Linear(12, 16), nn.Linear(16, 20)

    def forward(self, x, lens, y):
        pk = nn.utils.rnn.pack_padded_sequence(x, lens, batch_first=True, enforce_sorted=False)
        e, _ = self.enc(pk)
        e, _ = nn.utils.rnn.pad_packed_sequence(e, batch_first=True, total_length=x.shape[1])
        p, (h, c) = self.pred(self.emb(y))
        return self.out(torch.tanh(self.je(e)[:, :, None] + self.jp(p)[:, None])).log_softmax(-1), h, c


def test_rnnt_packed_sequences_legacy():
    torch.manual_seed(0)

    def mk(s):
        b, t, u = s
        lens = torch.randint(1, t + 1, (b,))
        lens[0] = t
        return [torch.randn(b, t, 8), lens, torch.randint(0, 20, (b, u))]
    _run_model(RNNT(), mk, [(3, 6, 4), (2, 9, 2), (1, 5, 3)], ["x", "lens", "y"], ["logp", "h", "c"],
               {"x": {0: "b", 1: "t"}, "lens": {0: "b"}, "y": {0: "b", 1: "u"}})


def _node_model(nodes, inputs, outputs, inits=(), opset=17, ms=False):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 8
    return m.SerializeToString()


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_sequence_lens_shorter_than_the_sequence(kind, direction):
    """Rows shorter than T hold their state past their length (reverse: start at their last step) and
    output 0 there; the lengths are an input (under jit: masks, no data-dependent shapes)."""
    rng = np.random.default_rng(0)
    T, B, I, H = 5, 3, 4, 6
    G = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    D = 2 if direction == "bidirectional" else 1
    W = numpy_helper.from_array((rng.standard_normal((D, G * H, I)) * 0.5).astype(np.float32), "W")
    R = numpy_helper.from_array((rng.standard_normal((D, G * H, H)) * 0.5).astype(np.float32), "R")
    Bi = numpy_helper.from_array((rng.standard_normal((D, 2 * G * H)) * 0.1).astype(np.float32), "B")
    outs = ["Y", "Yh"] + (["Yc"] if kind == "LSTM" else [])
    ins = ["x", "W", "R", "B", "lens", "h0"] + (["c0"] if kind == "LSTM" else [])
    node = helper.make_node(kind, ins, outs, hidden_size=H, direction=direction)
    f = TensorProto.FLOAT
    vin = [helper.make_tensor_value_info("x", f, [T, "b", I]), helper.make_tensor_value_info("lens", TensorProto.INT32, ["b"]),
           helper.make_tensor_value_info("h0", f, [D, "b", H])]
    if kind == "LSTM":
        vin.append(helper.make_tensor_value_info("c0", f, [D, "b", H]))
    vout = [helper.make_tensor_value_info(o, f, [None] * (4 if o == "Y" else 3)) for o in outs]
    b = _node_model([node], vin, vout, [W, R, Bi])
    sess, ref = nx.InferenceSession(b), _ort(b)
    for lens in ([5, 2, 3], [1, 5, 4], [5, 5, 5], [0, 3, 5]):
        feed = {"x": rng.standard_normal((T, B, I)).astype(np.float32), "lens": np.array(lens, np.int32),
                "h0": rng.standard_normal((D, B, H)).astype(np.float32)}
        if kind == "LSTM":
            feed["c0"] = rng.standard_normal((D, B, H)).astype(np.float32)
        for g, w in zip(sess.run(None, feed), ref.run(None, feed)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=str(lens))
    assert sess.info["mode"] == "jit", sess.info


# ================================================================== quantized models (onnxruntime.quantization)
class QNet(nn.Module):
    """What the QOperator format turns into QLinearConv, QLinearSigmoid/Mul (SiLU), QLinearLeakyRelu,
    QLinearConcat, QLinearAveragePool, QLinearAdd, QLinearGlobalAveragePool, QGemm, QLinearSoftmax."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.c3, self.fc = nn.Conv2d(16, 8, 1), nn.Linear(8, 6)

    def forward(self, x):
        a = self.c1(x)
        a = a * torch.sigmoid(a)
        b = F.leaky_relu(self.c2(a), 0.1)
        c = F.avg_pool2d(torch.cat([a, b], 1), 2)
        c = self.c3(c) + F.max_pool2d(a, 2)
        return torch.softmax(self.fc(F.adaptive_avg_pool2d(c, 1).flatten(1)), -1)


def _quantize_static(tmp_path, fmt, act, wt, per_channel):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    torch.manual_seed(0)
    fp, q = tmp_path / "f.onnx", tmp_path / "q.onnx"
    fp.write_bytes(_export(QNet().eval(), [torch.randn(2, 3, 16, 16)], ["x"], ["y"], {"x": {0: "b"}}))
    rng = np.random.default_rng(0)
    calib = iter([{"x": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)} for _ in range(4)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(calib, None)
    T = {"u8": QuantType.QUInt8, "s8": QuantType.QInt8}
    quantize_static(str(fp), str(q), Reader(), quant_format=getattr(QuantFormat, fmt), activation_type=T[act],
                    weight_type=T[wt], per_channel=per_channel)
    return q.read_bytes()


@pytest.mark.parametrize("act,wt,per_channel", [("u8", "s8", False), ("s8", "s8", True), ("u8", "u8", True)])
def test_quantize_static_qoperator_matches_onnxruntime_exactly(tmp_path, act, wt, per_channel):
    b = _quantize_static(tmp_path, "QOperator", act, wt, per_channel)
    ops = {n.op_type for n in onnx.load_from_string(b).graph.node}
    assert {"QLinearConv", "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearConcat", "QGemm",
            "QLinearAveragePool", "QLinearLeakyRelu"} <= ops, ops
    # uint8 activations: convolutions with int8 weights (per-channel QLinearConv weights are int8 even for wt=u8)
    sess, ref = nx.InferenceSession(b), _ort(b, exact_u8s8=act == "u8")
    rng = np.random.default_rng(1)
    for n in (2, 3):
        x = rng.standard_normal((n, 3, 16, 16)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-6, atol=1e-7)
    assert sess.info["mode"] == "jit"


def test_quantize_static_qdq_matches_the_onnx_ops(tmp_path):
    """QDQ: what the ONNX ops compute (onnxruntime unoptimized, and its fused integer kernels).  A float
    between two quanta rounds either way on a 1-ulp difference (AveragePool's window sum order; onnxruntime's
    fused kernels round their own intermediates): the softmax output (scale 1/255) may differ by one quantum
    in a few places, never more."""
    b = _quantize_static(tmp_path, "QDQ", "u8", "s8", True)
    sess, plain, fused = nx.InferenceSession(b), _ort(b, optimize=False), _ort(b, exact_u8s8=True)
    rng = np.random.default_rng(1)
    for n in (2, 3):
        x = rng.standard_normal((n, 3, 16, 16)).astype(np.float32)
        got = sess.run(None, {"x": x})[0]
        for ref in (plain, fused):
            want = ref.run(None, {"x": x})[0]
            np.testing.assert_allclose(got, want, rtol=0, atol=1.01 / 255)
            assert np.mean(np.abs(got - want) > 1e-6) <= 0.25


class EncHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.enc(x))


@pytest.mark.parametrize("fmt,act,wt,extra", [
    ("QOperator", "QUInt8", "QInt8", {}),  # QLinearMatMul, QGemm, QLinearAdd/Mul/Softmax
    ("QDQ", "QUInt16", "QUInt8", {"UseQDQContribOps": True}),  # com.microsoft Q/DQ with 16-bit activations
    ("QDQ", "QInt8", "QInt4", {}),  # 4-bit weights: com.microsoft Q/DQ
])
def test_quantize_static_transformer(tmp_path, fmt, act, wt, extra):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    torch.manual_seed(0)
    fp, q = tmp_path / "t.onnx", tmp_path / "tq.onnx"
    fp.write_bytes(_export(EncHead().eval(), [torch.randn(2, 6, 16)], ["x"], ["y"], {"x": {0: "b"}}))
    rng = np.random.default_rng(0)
    calib = iter([{"x": rng.standard_normal((2, 6, 16)).astype(np.float32)} for _ in range(4)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(calib, None)
    quantize_static(str(fp), str(q), Reader(), quant_format=getattr(QuantFormat, fmt),
                    activation_type=getattr(QuantType, act), weight_type=getattr(QuantType, wt), per_channel=True,
                    extra_options=extra)
    b = q.read_bytes()
    domains = {n.domain for n in onnx.load_from_string(b).graph.node}
    assert "com.microsoft" in domains, domains
    # QOperator (uint8 x int8 QLinearMatMul/QGemm): optimized, for exact_u8s8's graph transformer to run; the QDQ
    # forms unoptimized (onnxruntime's fused integer kernels round differently from the ONNX ops)
    sess, ref = nx.InferenceSession(b), _ort(b, optimize=fmt == "QOperator", exact_u8s8=fmt == "QOperator")
    for n in (2, 3):
        x = rng.standard_normal((n, 6, 16)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)
    assert sess.info["mode"] == "jit"


@pytest.mark.parametrize("weight_type", ["QInt8", "QUInt8"])
def test_quantize_dynamic_transformer_and_cnn(tmp_path, weight_type):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    torch.manual_seed(0)
    rng = np.random.default_rng(2)
    for name, m, x, dyn in (
            ("enc", nn.Sequential(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)).eval(),
             torch.randn(2, 6, 16), {"x": {0: "b"}}),
            ("cnn", QNet().eval(), torch.randn(2, 3, 16, 16), {"x": {0: "b"}})):
        fp, q = tmp_path / f"{name}.onnx", tmp_path / f"{name}_q.onnx"
        fp.write_bytes(_export(m, [x], ["x"], ["y"], dyn))
        quantize_dynamic(str(fp), str(q), weight_type=getattr(QuantType, weight_type), per_channel=name == "cnn")
        b = q.read_bytes()
        ops = {n.op_type for n in onnx.load_from_string(b).graph.node}
        assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops, ops
        sess, ref = nx.InferenceSession(b), _ort(b, exact_u8s8=True)  # DynamicQuantizeLinear: uint8 activations
        for n in (2, 3):
            xi = rng.standard_normal((n,) + tuple(x.shape[1:])).astype(np.float32)
            np.testing.assert_allclose(sess.run(None, {"x": xi})[0], ref.run(None, {"x": xi})[0], rtol=1e-4, atol=1e-4)


class LSTMTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 8)
        self.lstm = nn.LSTM(8, 12, num_layers=2, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(24, 5)

    def forward(self, ids):
        return self.fc(self.lstm(self.emb(ids))[0])


@pytest.mark.parametrize("weight_type,per_channel", [("QInt8", False), ("QUInt8", False), ("QInt8", True)])
def test_quantize_dynamic_lstm(tmp_path, weight_type, per_channel):
    """quantize_dynamic turns LSTM into com.microsoft DynamicQuantizeLSTM: the input and each step's hidden
    state quantized to uint8 on the fly.  onnxruntime quantizes the hidden state per chunk of batch rows, one
    chunk per thread: compared with its single-thread run (one chunk: the whole batch), to the rounding."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    torch.manual_seed(0)
    fp, q = tmp_path / "lstm.onnx", tmp_path / "lstm_q.onnx"
    fp.write_bytes(_export(LSTMTagger().eval(), [torch.randint(0, 30, (2, 6))], ["ids"], ["y"],
                           {"ids": {0: "b", 1: "t"}}))
    quantize_dynamic(str(fp), str(q), weight_type=getattr(QuantType, weight_type), per_channel=per_channel)
    b = q.read_bytes()
    assert "DynamicQuantizeLSTM" in {n.op_type for n in onnx.load_from_string(b).graph.node}
    sess, ref = nx.InferenceSession(b), _ort(b, threads=1, exact_u8s8=True)  # uint8 activations
    rng = np.random.default_rng(3)
    for shape in ((2, 6), (3, 9), (1, 1)):
        ids = rng.integers(0, 30, shape).astype(np.int64)
        np.testing.assert_allclose(sess.run(None, {"ids": ids})[0], ref.run(None, {"ids": ids})[0], rtol=1e-5,
                                   atol=1e-6)
    assert sess.info["mode"] == "jit"


# ------------------------------------------------------------------ com.microsoft quantized ops, node by node
def _q(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def _ms_check(node, feeds, inits, out=None, opset=17, exact_u8s8=False):
    vin = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
           for k, v in feeds.items()]
    x = next(v for v in feeds.values() if v.dtype != bool)
    elem, rank = out or (helper.np_dtype_to_tensor_dtype(x.dtype), x.ndim)
    vout = [helper.make_tensor_value_info("y", elem, [None] * rank)]
    b = _node_model([node], vin, vout, inits, opset=opset, ms=True)
    got, want = nx.InferenceSession(b).run(None, feeds), _ort(b, exact_u8s8=exact_u8s8).run(None, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_array_equal(g, w) if g.dtype != np.float32 else np.testing.assert_allclose(g, w, 1e-6, 1e-6)
    return got


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_com_microsoft_qlinear_elementwise(dt):
    rng = np.random.default_rng(0)
    lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
    a = rng.integers(lo, hi + 1, (2, 3, 4, 5)).astype(dt)
    b = rng.integers(lo, hi + 1, (3, 1, 5)).astype(dt)  # broadcasts
    zp = [_q("az", dt(3)), _q("bz", dt(-5 if dt == np.int8 else 200)), _q("cz", dt(7))]
    sc = [_q("as", np.float32(0.02)), _q("bs", np.float32(0.05)), _q("cs", np.float32(0.07))]
    for op in ("QLinearAdd", "QLinearMul"):
        n = helper.make_node(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y"], domain="com.microsoft")
        _ms_check(n, {"a": a, "b": b}, sc + zp)
    for op, kw in (("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.13})):
        n = helper.make_node(op, ["a", "as", "az", "cs", "cz"], ["y"], domain="com.microsoft", **kw)
        _ms_check(n, {"a": a}, sc + zp)
    n = helper.make_node("QLinearSoftmax", ["a", "as", "az", "cs", "cz"], ["y"], domain="com.microsoft", axis=-1,
                         opset=13)
    _ms_check(n, {"a": a}, [sc[0], zp[0], _q("cs", np.float32(1 / 256)), _q("cz", dt(lo))])
    cond = rng.random((4, 5)) > 0.5
    n = helper.make_node("QLinearWhere", ["c", "a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y"],
                         domain="com.microsoft")
    _ms_check(n, {"c": cond, "a": a, "b": b}, sc + zp)
    n = helper.make_node("QLinearConcat", ["cs", "cz", "a", "as", "az", "a2", "bs", "bz"], ["y"],
                         domain="com.microsoft", axis=1)
    _ms_check(n, {"a": a, "a2": a[:, :2] + 1}, sc + zp)
    # onnxruntime has no CPU kernel for QLinearReduceMean: numpy's dequantize / mean / requantize
    n = helper.make_node("QLinearReduceMean", ["a", "as", "az", "cs", "cz"], ["y"], domain="com.microsoft",
                         axes=[1, 3], keepdims=1)
    vin = [helper.make_tensor_value_info("a", helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))]
    b_ = _node_model([n], vin, [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(a.dtype), [None] * 4)],
                     sc + zp, ms=True)
    got = nx.InferenceSession(b_).run(None, {"a": a})[0]
    mean = ((a.astype(np.float32) - np.float32(3)) * np.float32(0.02)).mean((1, 3), keepdims=True, dtype=np.float32)
    want = np.clip(np.round(mean / np.float32(0.07)) + 7, lo, hi).astype(dt)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_com_microsoft_qlinear_pools(channels_last):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (2, 3, 7, 6)).astype(np.uint8)
    if channels_last:
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    inits = [_q("xs", np.float32(0.03)), _q("xz", np.uint8(100)), _q("ys", np.float32(0.02)), _q("yz", np.uint8(90))]
    n = helper.make_node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                         channels_last=channels_last)
    _ms_check(n, {"x": x}, inits)
    n = helper.make_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                         kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 0], count_include_pad=0,
                         channels_last=channels_last)
    _ms_check(n, {"x": x}, inits)


@pytest.mark.parametrize("trans_b,per_col,out_q", [(0, False, True), (1, True, True), (1, True, False)])
def test_com_microsoft_qgemm(trans_b, per_col, out_q):
    rng = np.random.default_rng(0)
    M, K, N = 4, 9, 5
    a = rng.integers(0, 256, (M, K)).astype(np.uint8)
    w = rng.integers(-128, 128, (N, K) if trans_b else (K, N)).astype(np.int8)
    bs = (rng.random(N) * 0.05 + 0.01).astype(np.float32) if per_col else np.float32(0.03)
    c = rng.integers(-500, 500, N).astype(np.int32)
    inits = [_q("as", np.float32(0.02)), _q("az", np.uint8(128)), _q("w", w), _q("bs", bs),
             _q("bz", np.zeros(N, np.int8) if per_col else np.int8(0)), _q("c", c)]
    ins = ["a", "as", "az", "w", "bs", "bz", "c"]
    if out_q:
        inits += [_q("ys", np.float32(0.5)), _q("yz", np.uint8(120))]
        ins += ["ys", "yz"]
    n = helper.make_node("QGemm", ins, ["y"], domain="com.microsoft", transB=trans_b, alpha=1.0)
    got = _ms_check(n, {"a": a}, inits, out=(TensorProto.UINT8 if out_q else TensorProto.FLOAT, 2),
                    exact_u8s8=True)[0]
    # and vs the spec computed exactly: C is int32 at scale alpha * as * bs, zero point 0
    acc = (a.astype(np.int64) - 128) @ (w.T if trans_b else w).astype(np.int64) + c
    y = acc * (np.float64(np.float32(0.02)) * np.asarray(bs, np.float64))
    if not out_q:
        np.testing.assert_allclose(got, y, rtol=1e-6, atol=1e-6)
        return
    v = y / 0.5 + 120
    want = np.clip(np.rint(v), 0, 255)
    tie = np.abs(np.abs(v - np.floor(v)) - 0.5) < 1e-4  # float32 requantization may round a near-tie either way
    assert np.all(np.abs(got.astype(np.int64) - want) <= tie), (got, want)
