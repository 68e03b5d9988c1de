"""onnxruntime's com.microsoft contrib ops (neetorch/onnx/ops_contrib.py), each run by nee.onnx.InferenceSession
and by onnxruntime on the same one-node model (several attribute combinations, odd sizes), plus a small BERT-like
model optimized by onnxruntime's transformer optimizer (its fused ops) matching onnxruntime end to end."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper

from neetorch.onnx import InferenceSession, UnsupportedModelError

MS = "com.microsoft"


def _model(op, inputs, attrs, outs, consts=(), domain=MS, types=None, opset=17):
    """One node; ``inputs`` [(name, array)] ("" = optional input left out), ``consts`` names of initializers;
    ``types`` [(elem, shape)] per output (from onnxruntime's results) or None (undeclared)."""
    node = helper.make_node(op, [n for n, _ in inputs], outs, domain=domain, **attrs)
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
          for n, a in inputs if n and n not in consts]
    inits = [numpy_helper.from_array(a, n) for n, a in inputs if n in consts]
    if types is None:
        ov = [helper.make_value_info(o, onnx.TypeProto()) for o in outs if o]
    else:
        ov = [helper.make_tensor_value_info(o, e, s) for o, (e, s) in zip([o for o in outs if o], types)]
    g = helper.make_graph([node], op, vi, ov, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])


# onnxruntime's uint8 x int8 integer products on x86-64 without VNNI (AVX2, AVX-512F/BW) use VPMADDUBSW, whose int16
# sums of two adjacent products saturate (255*127*2 > 32767; onnxruntime's quantization docs), so its answer there is
# not the spec's and depends on the host.  Its session option "session.x64quantprecision" (documented in
# onnxruntime_session_options_config_keys.h: "use slower U8U8 matrix multiplication instead") rewrites int8 weights to
# uint8 (a graph transformer, level 2) on such hosts and changes nothing elsewhere: onnxruntime is then exact on every
# host.  It has no kernels for int8 activations with it (those do not use VPMADDUBSW): uint8 activations only.
EXACT_U8S8 = {"session.x64quantprecision": "1"}


def _ort(m, feed, cfg=None):
    so = ort.SessionOptions()
    for k, v in (cfg or {}).items():
        so.add_session_config_entry(k, v)
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)


def check(op, inputs, attrs=None, nout=1, consts=(), outs=None, rtol=1e-4, atol=1e-5, jit=False, domain=MS,
          ort_cfg=None):
    """neetorch vs onnxruntime (session config entries ``ort_cfg``) on every output; returns neetorch's outputs."""
    attrs = attrs or {}
    outs = outs or [f"y{i}" for i in range(nout)]
    feed = {n: a for n, a in inputs if n and n not in consts}
    want = _ort(_model(op, inputs, attrs, outs, consts, domain), feed, ort_cfg)
    types = [(helper.np_dtype_to_tensor_dtype(w.dtype), w.shape) for w in want]
    m = _model(op, inputs, attrs, outs, consts, domain, types)
    got = InferenceSession(m, jit=jit).run(None, feed)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (op, i, g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{op} output {i} vs onnxruntime")
    return got


R = np.random.default_rng(0)


def f32(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(np.float32)


# ---------------------------------------------------------------- FusedMatMul, FusedConv, FusedGemm
@pytest.mark.parametrize("ta,tb,tba,tbb", [(0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 0, 0), (1, 1, 0, 0),
                                           (0, 0, 1, 0), (0, 0, 0, 1), (1, 0, 1, 0), (0, 1, 0, 1), (1, 1, 1, 1)])
def test_fused_matmul(ta, tb, tba, tbb):
    B, M, K, N = 3, 5, 7, 4

    def arr(rows, cols, t, tb):
        s = (B, rows, cols)
        if t:
            s = (B, cols, rows)
        if tb:  # stored with the batch dim where transBatch moves it from
            s = (s[1], B, s[2])
        return f32(*s)
    a, b = arr(M, K, ta, tba), arr(K, N, tb, tbb)
    check("FusedMatMul", [("a", a), ("b", b)], {"alpha": 0.37, "transA": ta, "transB": tb, "transBatchA": tba,
                                                    "transBatchB": tbb})


def test_fused_matmul_2d_and_broadcast():
    check("FusedMatMul", [("a", f32(5, 7)), ("b", f32(3, 7))], {"transB": 1, "alpha": 2.0})
    check("FusedMatMul", [("a", f32(2, 3, 5, 7)), ("b", f32(6, 7))], {"transB": 1}, consts=("b",))
    check("FusedMatMul", [("a", f32(2, 3, 7, 5)), ("b", f32(3, 7, 6))], {"transA": 1})


@pytest.mark.parametrize("act,params", [("Relu", None), ("Tanh", None), ("Sigmoid", None), ("LeakyRelu", [0.13]),
                                        ("Clip", [-0.5, 0.7]), ("HardSigmoid", [0.3, 0.4])])
def test_fused_conv(act, params):
    attrs = {"activation": act, "pads": [1, 0, 1, 0], "strides": [1, 2]}
    if params:
        attrs["activation_params"] = params
    x, w, b = f32(2, 3, 7, 9), f32(5, 3, 3, 2), f32(5)
    check("FusedConv", [("x", x), ("w", w), ("b", b)], attrs, consts=("w", "b"))


def test_fused_conv_sum_input():
    x, w, b = f32(1, 4, 6, 5), f32(6, 2, 3, 3), f32(6)
    z = f32(1, 6, 6, 5)
    check("FusedConv", [("x", x), ("w", w), ("b", b), ("z", z)],
          {"activation": "Relu", "group": 2, "pads": [1, 1, 1, 1]})


def test_fused_gemm():
    a, b, c = f32(5, 7), f32(4, 7), f32(4)
    # onnxruntime's CPU FusedGemm (Gemm + activation, written by its Gemm-activation fusion)
    check("FusedGemm", [("a", a), ("b", b), ("c", c)], {"transB": 1, "alpha": 0.5, "beta": 2.0, "activation": "Relu"})
    check("FusedGemm", [("a", a), ("b", b), ("c", c)], {"transB": 1, "activation": "LeakyRelu",
                                                          "activation_alpha": 0.2})


# ---------------------------------------------------------------- Gelu family, BiasAdd
def test_gelu_family():
    x, b = f32(2, 5, 13, scale=2.0), f32(13)
    check("Gelu", [("x", x)])
    check("FastGelu", [("x", x)])
    check("FastGelu", [("x", x), ("b", b)], consts=("b",))
    check("BiasGelu", [("x", x), ("b", b)])
    check("QuickGelu", [("x", x)])
    check("QuickGelu", [("x", x)], {"alpha": 1.3})


def test_bias_add_vs_numpy():
    # onnxruntime implements BiasAdd only on CUDA: checked against its definition
    x, b, s = f32(2, 9, 6), f32(6), f32(2, 9, 6)
    m = _model("BiasAdd", [("x", x), ("b", b), ("s", s)], {}, ["y"], types=[(1, x.shape)])
    got = InferenceSession(m, jit=False).run(None, {"x": x, "b": b, "s": s})[0]
    np.testing.assert_allclose(got, x + b + s, rtol=1e-6)


# ---------------------------------------------------------------- layer normalizations
@pytest.mark.parametrize("simplified", [False, True])
@pytest.mark.parametrize("with_bias,with_beta,nout,skip_shape", [
    (False, False, 1, "full"), (True, True, 1, "full"), (True, True, 4, "full"), (False, True, 4, "1sh"),
    (True, False, 4, "sh")])
def test_skip_layer_norm(simplified, with_bias, with_beta, nout, skip_shape):
    B, S, H = 2, 5, 11
    x = f32(B, S, H)
    skip = {"full": f32(B, S, H), "1sh": f32(1, S, H), "sh": f32(S, H)}[skip_shape]
    g, beta, bias = f32(H), f32(H), f32(H)
    ins = [("x", x), ("s", skip), ("g", g)]
    if simplified:
        op = "SkipSimplifiedLayerNormalization"
        ins += [("bias", bias)] if with_bias else []
    else:
        op = "SkipLayerNormalization"
        ins += [("beta", beta) if with_beta else ("", None)] + ([("bias", bias)] if with_bias else [])
    # SkipSimplifiedLayerNormalization's mean output is not computed (onnxruntime leaves it unwritten)
    outs = (["y", "", "inv", "sum"] if simplified else ["y", "", "", "sum"]) if nout == 4 else None
    check(op, ins, {"epsilon": 1e-5}, nout=nout, outs=outs, consts=("g", "beta", "bias"), atol=3e-5)


def test_skip_layer_norm_2d_and_bad_skip():
    check("SkipLayerNormalization", [("x", f32(6, 9)), ("s", f32(6, 9)), ("g", f32(9)), ("b", f32(9))],
          {"epsilon": 1e-5}, nout=4, atol=3e-5)
    m = _model("SkipLayerNormalization", [("x", f32(2, 3, 8)), ("s", f32(1, 1, 8)), ("g", f32(8))],
               {"epsilon": 1e-5}, ["y"], types=[(1, (2, 3, 8))])
    with pytest.raises(Exception, match=r"skip shape \(1, 1, 8\) does not fit input \(2, 3, 8\)"):
        InferenceSession(m, jit=False).run(None, {"x": f32(2, 3, 8), "s": f32(1, 1, 8), "g": f32(8)})


def test_skip_layer_norm_stats_outputs():
    # mean and inv_std_var outputs (onnxruntime fills them for SkipLayerNormalization)
    x, s, g, b = f32(3, 4, 7), f32(3, 4, 7), f32(7), f32(7)
    check("SkipLayerNormalization", [("x", x), ("s", s), ("g", g), ("b", b)], {"epsilon": 1e-6}, nout=4,
          atol=3e-5)


def test_simplified_layer_norm_default_domain():
    # onnxruntime registers SimplifiedLayerNormalization in the default domain (its optimizer writes it there
    # for LLaMA models); ONNX's checker does not know it: the loader moves it to com.microsoft first
    x, g = f32(2, 3, 10), f32(10)
    for domain in ("", MS):
        m0 = _model("SimplifiedLayerNormalization", [("x", x), ("g", g)], {"epsilon": 1e-6}, ["y", "r"],
                    consts=("g",), domain="")
        want = _ort(m0, {"x": x})
        m = _model("SimplifiedLayerNormalization", [("x", x), ("g", g)], {"epsilon": 1e-6}, ["y", "r"],
                   consts=("g",), domain=domain, types=[(1, w.shape) for w in want])
        got = InferenceSession(m, jit=False).run(None, {"x": x})
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_ms_layer_norm_matches_default_domain():
    x, g, b = f32(2, 3, 10), f32(10), f32(10)
    ref = _model("LayerNormalization", [("x", x), ("g", g), ("b", b)], {"epsilon": 1e-5}, ["y"], domain="",
                 consts=("g", "b"), types=[(1, x.shape)])
    want = _ort(ref, {"x": x})[0]
    m = _model("LayerNormalization", [("x", x), ("g", g), ("b", b)], {"epsilon": 1e-5}, ["y"],
               consts=("g", "b"), types=[(1, x.shape)])
    got = InferenceSession(m, jit=False).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- EmbedLayerNormalization
@pytest.mark.parametrize("segments,mask,pos_ids", [(True, True, False), (False, False, False), (True, False, True),
                                                   (False, True, True)])
def test_embed_layer_norm(segments, mask, pos_ids):
    B, S, H, V = 3, 7, 12, 21
    ids = R.integers(0, V, (B, S)).astype(np.int32)
    ins = [("ids", ids), ("seg", R.integers(0, 2, (B, S)).astype(np.int32)) if segments else ("", None),
           ("we", f32(V, H)), ("pe", f32(16, H)), ("se", f32(2, H)) if segments else ("", None),
           ("g", f32(H)), ("b", f32(H))]
    m = np.ones((B, S), np.int32)
    m[1, 4:] = 0
    m[2, 1:] = 0
    m[0, 2] = 2  # onnxruntime counts the entries equal to 1
    ins += [("mask", m) if mask else ("", None)]
    if pos_ids:
        ins += [("pos", R.integers(0, 16, (B if mask else 1, S)).astype(np.int32))]  # [B, S] or [1, S]
    check("EmbedLayerNormalization", ins, {"epsilon": 1e-6, "mask_index_type": int(segments)}, nout=3,
          consts=("we", "pe", "se", "g", "b"), atol=3e-5)


# ---------------------------------------------------------------- Attention
def _attn_inputs(B, S, D, sizes=None, bias=True):
    dq, dk, dv = sizes or (D, D, D)
    x, w = f32(B, S, D), f32(D, dq + dk + dv, scale=D ** -0.5)
    return [("x", x), ("w", w), ("bias", f32(dq + dk + dv)) if bias else ("", None)]


def _masks(B, S, T):
    lens = np.array([T, max(1, T - 2), 1][:B], np.int32)
    raw = (np.arange(T)[None] < lens[:, None]).astype(np.int32)
    m3 = (R.random((B, S, T)) > 0.3).astype(np.int32)
    m3[0, 0] = 0  # a fully masked row
    m3[-1, 1, :T - S + 2] = 0  # only future keys left: fully masked once causal
    return {"1d": lens, "1d_start": np.concatenate([lens, np.array([0, 1, 2][:B], np.int32)]),
            "2d": raw, "3d": m3}


@pytest.mark.parametrize("mask", [None, "1d", "1d_start", "2d", "3d"])
@pytest.mark.parametrize("uni", [0, 1])
def test_attention_masks(mask, uni):
    B, S, D, N = 3, 5, 12, 3
    ins = _attn_inputs(B, S, D)
    ins += [("mask", _masks(B, S, S)[mask]) if mask else ("", None)]
    check("Attention", ins, {"num_heads": N, "unidirectional": uni}, consts=("w", "bias"), atol=2e-5)


def test_attention_qkv_sizes_scale_bias_filter():
    B, S, D, N = 2, 6, 8, 2
    ins = _attn_inputs(B, S, D, sizes=(8, 8, 12))
    ins += [("mask", _masks(B, S, S)["2d"]), ("", None), ("ab", f32(1, N, S, S))]
    check("Attention", ins, {"num_heads": N, "qkv_hidden_sizes": [8, 8, 12], "scale": 0.3, "mask_filter_value": -500.0},
          consts=("w",), atol=2e-5)


@pytest.mark.parametrize("uni,mask", [(1, None), (1, "2d"), (0, "1d")])
def test_attention_past_present(uni, mask):
    B, S, D, N, P = 2, 3, 8, 2, 4
    ins = _attn_inputs(B, S, D)
    ins += [("mask", _masks(B, S, P + S)[mask]) if mask else ("", None), ("past", f32(2, B, N, P, D // N))]
    check("Attention", ins, {"num_heads": N, "unidirectional": uni}, nout=2, consts=("w", "bias"), atol=2e-5)


def test_attention_refusals():
    ins = _attn_inputs(1, 3, 4)
    m = _model("Attention", ins, {"num_heads": 2, "do_rotary": 1}, ["y"], consts=("w", "bias"),
               types=[(1, (1, 3, 4))])
    with pytest.raises(UnsupportedModelError, match="Attention with do_rotary=1"):
        InferenceSession(m)
    m = _model("Attention", ins + [("mask", np.ones((1, 1, 3, 3), np.int32))], {"num_heads": 2}, ["y"],
               consts=("w", "bias"), types=[(1, (1, 3, 4))])
    with pytest.raises(Exception, match="mask_index of rank 4"):
        InferenceSession(m, jit=False).run(None, {"x": ins[0][1], "mask": np.ones((1, 1, 3, 3), np.int32)})


# ---------------------------------------------------------------- MultiHeadAttention
@pytest.mark.parametrize("form", ["sep", "sep_bias", "cross_L", "bnsh"])
def test_mha_forms(form):
    B, S, L, N, h = 2, 5, 7, 3, 4
    D = N * h
    bias = f32(3 * D)
    if form in ("sep", "sep_bias"):
        ins = [("q", f32(B, S, D)), ("k", f32(B, S, D)), ("v", f32(B, S, D))]
        ins += [("bias", bias)] if form == "sep_bias" else []
    elif form == "cross_L":
        ins = [("q", f32(B, S, D)), ("k", f32(B, L, D)), ("v", f32(B, L, D)), ("bias", bias)]
    else:
        ins = [("q", f32(B, S, D)), ("k", f32(B, N, L, h)), ("v", f32(B, N, L, h))]
    check("MultiHeadAttention", ins, {"num_heads": N}, atol=2e-5)


@pytest.mark.parametrize("packed", ["kv", "qkv"])
def test_mha_packed_vs_separate(packed):
    # onnxruntime's CPU provider has no packed forms (CUDA only): checked against its separate-input result
    B, S, N, h = 2, 5, 3, 4
    D = N * h
    q, k, v, bias = f32(B, S, N, h), f32(B, S, N, h), f32(B, S, N, h), f32(3 * D)
    want = _ort(_model("MultiHeadAttention", [("q", q.reshape(B, S, D)), ("k", k.reshape(B, S, D)),
                                              ("v", v.reshape(B, S, D)), ("bias", bias)], {"num_heads": N}, ["y"]),
                {"q": q.reshape(B, S, D), "k": k.reshape(B, S, D), "v": v.reshape(B, S, D), "bias": bias})[0]
    if packed == "kv":
        ins = [("q", q.reshape(B, S, D)), ("kv", np.stack([k, v], 3)), ("", None), ("bias", bias)]
    else:
        ins = [("qkv", np.stack([q, k, v], 3)), ("", None), ("", None), ("bias", bias)]
    m = _model("MultiHeadAttention", ins, {"num_heads": N}, ["y"], types=[(1, want.shape)])
    got = InferenceSession(m, jit=False).run(None, {n: a for n, a in ins if n})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("kpm", [None, "1d", "2d", "3d"])
@pytest.mark.parametrize("uni", [0, 1])
def test_mha_masks_bias_past(kpm, uni):
    B, S, N, h, P = 3, 4, 2, 5, 3
    D, T = N * h, P + S
    ins = [("q", f32(B, S, D)), ("k", f32(B, S, D)), ("v", f32(B, S, D)), ("bias", f32(3 * D)),
           ("kpm", _masks(B, S, T)[kpm]) if kpm else ("", None), ("ab", f32(B, 1, S, T)),
           ("pk", f32(B, N, P, h)), ("pv", f32(B, N, P, h))]
    # a fully masked row's scores are all near mask_filter_value (-10000): float32 keeps ~1e-3 of them
    check("MultiHeadAttention", ins, {"num_heads": N, "unidirectional": uni, "scale": 0.21}, nout=3,
          atol=1e-3 if kpm == "3d" else 2e-5)


# ---------------------------------------------------------------- RotaryEmbedding
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout,pos", [("bsd", "bs"), ("bsd", "offset"), ("bnsh", "bs"), ("bsd_nh", "bs"),
                                        ("partial", "bs")])
def test_rotary_embedding(interleaved, layout, pos):
    B, S, N, h, maxp = 2, 5, 3, 8, 20
    rd = 4 if layout == "partial" else h
    ang = np.arange(maxp)[:, None] * (10000.0 ** (-np.arange(rd // 2) / (rd // 2)))[None]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    x = f32(B, N, S, h) if layout == "bnsh" else f32(B, S, N * h)
    p = R.integers(0, maxp - S, (B, S)).astype(np.int64) if pos == "bs" else np.array([3], np.int64)
    attrs = {"interleaved": interleaved}
    if layout in ("bsd_nh", "partial"):
        attrs["num_heads"] = N
    if layout == "partial":
        attrs["rotary_embedding_dim"] = rd
    check("RotaryEmbedding", [("x", x), ("p", p), ("c", cos), ("s", sin)], attrs, consts=("c", "s"), atol=2e-5)


# ---------------------------------------------------------------- GroupQueryAttention
@pytest.mark.parametrize("B,S,past,rotary,interleaved", [(2, 3, 0, 0, 0), (1, 3, 4, 0, 0), (1, 3, 4, 1, 0),
                                                        (2, 3, 0, 1, 1), (3, 1, 5, 1, 0), (2, 1, 0, 0, 0)])
def test_group_query_attention(B, S, past, rotary, interleaved):
    Nq, Nk, h = 4, 2, 16
    maxp = 16
    ins = [("q", f32(B, S, Nq * h)), ("k", f32(B, S, Nk * h)), ("v", f32(B, S, Nk * h))]
    if past:
        ins += [("pk", f32(B, Nk, past, h)), ("pv", f32(B, Nk, past, h))]
    else:
        ins += [("", None), ("", None)]
    ins += [("sk", np.full((B,), past + S - 1, np.int32)), ("tl", np.array(past + S, np.int32))]
    attrs = {"num_heads": Nq, "kv_num_heads": Nk}
    if rotary:
        ang = np.arange(maxp)[:, None] * (10000.0 ** (-np.arange(h // 2) / (h // 2)))[None]
        ins += [("c", np.cos(ang).astype(np.float32)), ("s", np.sin(ang).astype(np.float32))]
        attrs.update(do_rotary=1, rotary_interleaved=interleaved)
    check("GroupQueryAttention", ins, attrs, nout=3, consts=("c", "s"), atol=3e-5)


@pytest.mark.parametrize("lens", [[5, 3], [2, 5], [4, 4]])
def test_group_query_attention_ragged_decode(lens):
    # one new token per entry, entries at different lengths of a 5-long past buffer (seqlens_k = length - 1)
    B, Nq, Nk, h, P = 2, 4, 2, 16, 5
    ins = [("q", f32(B, 1, Nq * h)), ("k", f32(B, 1, Nk * h)), ("v", f32(B, 1, Nk * h)), ("pk", f32(B, Nk, P, h)),
           ("pv", f32(B, Nk, P, h)), ("sk", np.array(lens, np.int32)), ("tl", np.array(max(lens) + 1, np.int32))]
    check("GroupQueryAttention", ins, {"num_heads": Nq, "kv_num_heads": Nk}, nout=3, atol=3e-5)


@pytest.mark.parametrize("extra", ["softcap", "window", "smooth", "sink", "bias", "pos_ids"])
def test_group_query_attention_options(extra):
    B, S, Nq, Nk, h, P = 1, 4, 4, 2, 16, 3
    ins = [("q", f32(B, S, Nq * h, scale=2.0)), ("k", f32(B, S, Nk * h)), ("v", f32(B, S, Nk * h)),
           ("pk", f32(B, Nk, P, h)), ("pv", f32(B, Nk, P, h)), ("sk", np.array([P + S - 1], np.int32)),
           ("tl", np.array(P + S, np.int32))]
    attrs = {"num_heads": Nq, "kv_num_heads": Nk}
    ang = np.arange(16)[:, None] * (10000.0 ** (-np.arange(h // 2) / (h // 2)))[None]
    rope = [("c", np.cos(ang).astype(np.float32)), ("s", np.sin(ang).astype(np.float32))]
    none2 = [("", None), ("", None)]
    if extra == "softcap":
        attrs["softcap"] = 1.5
    elif extra == "window":
        attrs["local_window_size"] = 2
    elif extra == "smooth":
        attrs["smooth_softmax"] = 1
    elif extra == "sink":
        ins += none2 + [("", None), ("", None), ("sink", f32(Nq))]
    elif extra == "bias":
        ins += none2 + [("", None), ("ab", f32(B, 1, S, P + S))]
    else:
        attrs["do_rotary"] = 1
        ins += rope + [("pos", np.array([[7, 2, 9, 4]], np.int64))]
    check("GroupQueryAttention", ins, attrs, nout=3, consts=("c", "s"), atol=3e-5)


def test_group_query_attention_lengths_from_mask_compiled():
    # onnxruntime-genai's decoder graphs: seqlens_k = ReduceSum(attention_mask) - 1, total_sequence_length =
    # Shape(attention_mask)[1]; the session compiles (lengths are tensor arithmetic) and replays new masks
    from onnx import TensorProto as TP
    B, Nq, Nk, h, P = 2, 4, 2, 16, 5
    ang = np.arange(16)[:, None] * (10000.0 ** (-np.arange(h // 2) / (h // 2)))[None]
    nodes = [helper.make_node("ReduceSum", ["mask", "ax"], ["msum"], keepdims=0),
             helper.make_node("Sub", ["msum", "one"], ["sk64"]),
             helper.make_node("Cast", ["sk64"], ["sk"], to=TP.INT32),
             helper.make_node("Shape", ["mask"], ["mshape"]),
             helper.make_node("Gather", ["mshape", "one"], ["tl64"], axis=0),
             helper.make_node("Cast", ["tl64"], ["tl"], to=TP.INT32),
             helper.make_node("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "sk", "tl", "c", "s"],
                              ["y", "pk2", "pv2"], domain=MS, num_heads=Nq, kv_num_heads=Nk, do_rotary=1)]
    ins = [helper.make_tensor_value_info(n, TP.FLOAT, sh) for n, sh in
           (("q", ["b", 1, Nq * h]), ("k", ["b", 1, Nk * h]), ("v", ["b", 1, Nk * h]), ("pk", ["b", Nk, P, h]),
            ("pv", ["b", Nk, P, h]))] + [helper.make_tensor_value_info("mask", TP.INT64, ["b", P + 1])]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "ax"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.cos(ang).astype(np.float32), "c"),
             numpy_helper.from_array(np.sin(ang).astype(np.float32), "s")]
    outs = [helper.make_tensor_value_info("y", TP.FLOAT, ["b", 1, Nq * h])] + [
        helper.make_tensor_value_info(n, TP.FLOAT, ["b", Nk, P + 1, h]) for n in ("pk2", "pv2")]
    m = helper.make_model(helper.make_graph(nodes, "gqa", ins, outs, inits),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    sess = InferenceSession(m)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for lens in ([6, 4], [3, 6], [6, 6]):
        feed = {"q": f32(B, 1, Nq * h), "k": f32(B, 1, Nk * h), "v": f32(B, 1, Nk * h), "pk": f32(B, Nk, P, h),
                "pv": f32(B, Nk, P, h), "mask": (np.arange(P + 1)[None] < np.array(lens)[:, None]).astype(np.int64)}
        for g, w in zip(sess.run(None, feed), ref.run(None, feed)):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=3e-5)
    assert sess.info["mode"] == "jit", sess.info["fallback_reason"]


# ---------------------------------------------------------------- quantized matmuls
def _quantize_nbits(w, bits, bs, zp_kind):
    """[N, K] float -> (B uint8 [N, blocks, bs*bits/8], scales, zero points) in MatMulNBits' layout."""
    N, K = w.shape
    nb = -(-K // bs)
    wp = np.zeros((N, nb * bs), np.float32)
    wp[:, :K] = w
    wb = wp.reshape(N, nb, bs)
    lo, hi = wb.min(-1), wb.max(-1)
    qmax = (1 << bits) - 1
    scale = np.maximum((hi - lo) / qmax, 1e-6).astype(np.float32)
    if zp_kind is None:
        zp = np.full((N, nb), 1 << (bits - 1))
        scale = (np.maximum(np.abs(lo), np.abs(hi)) / (1 << (bits - 1))).astype(np.float32)
    else:
        zp = np.clip(np.round(-lo / scale), 0, qmax).astype(np.int64)
    q = np.clip(np.round(wb / scale[..., None]) + zp[..., None], 0, qmax).astype(np.uint8)
    per = 8 // bits
    qr = q.reshape(N, nb, bs // per, per)
    packed = np.zeros(qr.shape[:3], np.uint8)
    for i in range(per):
        packed |= (qr[..., i] << (bits * i)).astype(np.uint8)
    z = None
    if zp_kind == "packed":
        nzb = -(-nb * bits // 8)
        zz = np.zeros((N, nzb * per), np.uint8)
        zz[:, :nb] = zp
        zr = zz.reshape(N, nzb, per)
        z = np.zeros((N, nzb), np.uint8)
        for i in range(per):
            z |= (zr[..., i] << (bits * i)).astype(np.uint8)
        z = z.reshape(-1)
    elif zp_kind == "float":
        z = zp.astype(np.float32).reshape(-1)
    return packed, scale.reshape(-1), z


@pytest.mark.parametrize("bits,bs,K,zp,bias", [(4, 32, 64, None, False), (4, 16, 45, "packed", True),
                                               (4, 32, 100, "float", False), (8, 16, 40, "packed", False),
                                               (2, 16, 33, "packed", False)])
def test_matmul_nbits(bits, bs, K, zp, bias):
    N = 9
    w = f32(N, K)
    b, s, z = _quantize_nbits(w, bits, bs, zp)
    ins = [("a", f32(3, 2, K)), ("B", b), ("sc", s), ("zp", z) if z is not None else ("", None)]
    if bias:
        ins += [("", None), ("bias", f32(N))]
    check("MatMulNBits", ins, {"K": K, "N": N, "bits": bits, "block_size": bs}, consts=("B", "sc", "zp", "bias"),
          rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bits,K,bs,zp", [(4, 64, 16, False), (4, 64, 16, True), (4, 32, 32, True),
                                          (8, 48, 16, True)])
def test_gather_block_quantized(bits, K, bs, zp):
    V = 9
    data = R.integers(0, 256, (V, K * bits // 8)).astype(np.uint8)
    ins = [("d", data), ("i", np.array([[0, 3, 8], [2, -1, 1]], np.int64)), ("s", np.abs(f32(V, K // bs)))]
    if zp:
        ins += [("z", R.integers(0, 256, (V, -(-(K // bs) * bits // 8))).astype(np.uint8))]
    check("GatherBlockQuantized", ins, {"block_size": bs, "bits": bits}, consts=("d", "s", "z"))


def _int_matmul(a, az, b, bz):
    """(a - az) @ (b - bz) exactly (int64; the spec's int32 accumulation cannot overflow at these sizes)."""
    return (a.astype(np.int64) - np.asarray(az, np.int64)) @ (b.astype(np.int64) - np.asarray(bz, np.int64))


def _dynamic_quantize(x):
    """ONNX DynamicQuantizeLinear in float32: uint8, scale (max(0, max x) - min(0, min x)) / 255, zero point
    round(-min / scale), half to even."""
    lo, hi = np.minimum(np.float32(0), x.min()), np.maximum(np.float32(0), x.max())
    s = (hi - lo) / np.float32(255)
    zp = np.clip(np.rint(-lo / s), 0, 255)
    return np.clip(np.rint(x / s) + zp, 0, 255).astype(np.uint8), s, np.uint8(zp)


def test_matmul_integer_to_float_and_dynamic_quantize_matmul():
    # neetorch vs the spec computed exactly (integer products, then the scales) and vs onnxruntime made exact
    # (EXACT_U8S8: these products saturate in its x86 kernels without VNNI)
    a = R.integers(0, 255, (4, 6)).astype(np.uint8)
    b = R.integers(-128, 127, (6, 5)).astype(np.int8)
    bs, bias = np.abs(f32(5)) * 0.01, f32(5)
    got = check("MatMulIntegerToFloat", [("a", a), ("b", b), ("as", np.array(0.02, np.float32)), ("bs", bs),
                                         ("az", np.array(128, np.uint8)), ("bz", np.zeros(5, np.int8)),
                                         ("bias", bias)], consts=("b", "bs", "bz"), ort_cfg=EXACT_U8S8)[0]
    want = _int_matmul(a, 128, b, 0) * (0.02 * bs.astype(np.float64)) + bias
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg="MatMulIntegerToFloat vs the spec")
    x, bias = f32(3, 4, 6), f32(5)
    got = check("DynamicQuantizeMatMul", [("x", x), ("b", b), ("bs", np.array(0.01, np.float32)),
                                          ("bz", np.array(0, np.int8)), ("bias", bias)],
                consts=("b", "bs", "bz", "bias"), atol=1e-4, ort_cfg=EXACT_U8S8)[0]
    q, s, zp = _dynamic_quantize(x)
    want = _int_matmul(q, zp, b, 0) * (float(s) * 0.01) + bias
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg="DynamicQuantizeMatMul vs the spec")


def test_float16_forms():
    # onnxruntime's CPU kernels in float16 (statistics in float32): normalization, Gelu, attention, 4-bit matmul
    def h(*s):
        return f32(*s).astype(np.float16)
    tol = {"rtol": 1e-2, "atol": 2e-2}
    check("SkipLayerNormalization", [("x", h(2, 3, 8)), ("s", h(2, 3, 8)), ("g", h(8)), ("b", h(8))],
          {"epsilon": 1e-5}, nout=4, **tol)
    check("SkipSimplifiedLayerNormalization", [("x", h(2, 3, 8)), ("s", h(2, 3, 8)), ("g", h(8))],
          {"epsilon": 1e-5}, outs=["y", "", "inv", "sum"], **tol)
    check("FastGelu", [("x", h(2, 3, 8)), ("b", h(8))], **tol)
    check("MultiHeadAttention", [("q", h(2, 3, 8)), ("k", h(2, 3, 8)), ("v", h(2, 3, 8))], {"num_heads": 2}, **tol)
    check("GroupQueryAttention", [("q", h(1, 3, 64)), ("k", h(1, 3, 32)), ("v", h(1, 3, 32)), ("", None),
                                  ("", None), ("sk", np.array([2], np.int32)), ("tl", np.array(3, np.int32))],
          {"num_heads": 4, "kv_num_heads": 2}, nout=3, **tol)
    b, s, z = _quantize_nbits(f32(5, 32), 4, 16, "packed")
    check("MatMulNBits", [("a", h(3, 32)), ("B", b), ("sc", s.astype(np.float16)), ("zp", z)],
          {"K": 32, "N": 5, "bits": 4, "block_size": 16}, consts=("B", "sc", "zp"), **tol)


@pytest.mark.parametrize("op,ins,attrs,why", [
    ("MatMulNBits", [("a", np.zeros((2, 32), np.float32)), ("B", np.zeros((4, 1, 12), np.uint8)),
                     ("sc", np.ones(4, np.float32))], {"K": 32, "N": 4, "bits": 3, "block_size": 32}, "bits=3"),
    ("MatMulNBits", [("a", np.zeros((2, 32), np.float32)), ("B", np.zeros((4, 1, 16), np.uint8)),
                     ("sc", np.ones(4, np.float32)), ("", None), ("gi", np.zeros(32, np.int32))],
     {"K": 32, "N": 4, "block_size": 32}, "g_idx"),
    ("FusedConv", [("x", np.zeros((1, 1, 3, 3), np.float32)), ("w", np.zeros((1, 1, 1, 1), np.float32))],
     {"activation": "Swish"}, "activation 'Swish'"),
    ("MultiHeadAttention", [("q", np.zeros((1, 2, 4), np.float32)), ("k", np.zeros((1, 2, 4), np.float32)),
                            ("v", np.zeros((1, 2, 4), np.float32))] + [("", None)] * 6
     + [("ci", np.zeros((1, 1, 2), np.int32))], {"num_heads": 2}, "cache_indirection"),
    ("RotaryEmbedding", [("x", np.zeros((1, 2, 4), np.float32)), ("p", np.zeros((1, 2), np.int64)),
                         ("c", np.ones((4, 2), np.float32)), ("s", np.ones((4, 2), np.float32))],
     {"is_packed_batching": 1}, "is_packed_batching=1"),
    ("Attention", [("x", np.zeros((1, 2, 4), np.float32)), ("w", np.zeros((4, 12), np.float32))],
     {"num_heads": 2, "past_present_share_buffer": 1}, "past_present_share_buffer=1"),
    ("BeamSearch", [("x", np.zeros((1, 2), np.int32))], {}, "com.microsoft.BeamSearch"),
])
def test_refused_up_front(op, ins, attrs, why):
    # forms neetorch does not implement are named when the session is created, never run with a guess
    m = _model(op, ins, attrs, ["y"], consts=("B", "sc", "w", "c", "s"), types=[(1, [1])])
    with pytest.raises(UnsupportedModelError, match=f"com\\.microsoft\\.{op}.*{why}|{why}"):
        InferenceSession(m)


# ---------------------------------------------------------------- an optimized BERT-like model end to end
@pytest.fixture(scope="module")
def bert_path(tmp_path_factory):
    return _bert_onnx(tmp_path_factory.mktemp("bert"))


def _bert_onnx(tmp_path):
    """A 2-layer BERT-like encoder (HF BertModel's structure: embeddings + LayerNorm, self-attention with the
    additive -10000 padding mask, erf GELU, post-LayerNorm residuals) exported by torch's TorchScript exporter."""
    torch = pytest.importorskip("torch")
    import math

    class Layer(torch.nn.Module):
        def __init__(self, H, N, I):
            super().__init__()
            self.N, self.h = N, H // N
            self.q, self.k, self.v, self.o = (torch.nn.Linear(H, H) for _ in range(4))
            self.ln1, self.ln2 = torch.nn.LayerNorm(H, eps=1e-12), torch.nn.LayerNorm(H, eps=1e-12)
            self.f1, self.f2 = torch.nn.Linear(H, I), torch.nn.Linear(I, H)

        def heads(self, x):
            return x.view(x.shape[0], x.shape[1], self.N, self.h).permute(0, 2, 1, 3)

        def forward(self, x, ext):
            q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
            p = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.h) + ext, -1)
            c = torch.matmul(p, v).permute(0, 2, 1, 3).contiguous()
            x = self.ln1(self.o(c.view(c.shape[0], c.shape[1], -1)) + x)
            return self.ln2(self.f2(torch.nn.functional.gelu(self.f1(x))) + x)

    class Bert(torch.nn.Module):
        def __init__(self, V=100, H=32, N=4, I=64, L=2, P=64):
            super().__init__()
            self.we, self.pe, self.te = torch.nn.Embedding(V, H), torch.nn.Embedding(P, H), torch.nn.Embedding(2, H)
            self.ln = torch.nn.LayerNorm(H, eps=1e-12)
            self.layers = torch.nn.ModuleList([Layer(H, N, I) for _ in range(L)])

        def forward(self, ids, mask, tt):
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            x = self.ln(self.we(ids) + self.pe(pos) + self.te(tt))
            ext = (1.0 - mask[:, None, None, :].to(torch.float32)) * -10000.0
            for layer in self.layers:
                x = layer(x, ext)
            return x

    torch.manual_seed(0)
    ids = torch.zeros(2, 7, dtype=torch.int64)
    path = str(tmp_path / "bert.onnx")
    dyn = {n: {0: "batch", 1: "seq"} for n in ("input_ids", "attention_mask", "token_type_ids")}
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Bert().eval(), (ids, ids + 1, ids), path, input_names=list(dyn), output_names=["out"],
                          dynamic_axes=dyn, opset_version=14, dynamo=False)
    return path


def _bert_feed(model, B, S, seed):
    r = np.random.default_rng(seed)
    mask = np.ones((B, S), np.int64)
    mask[-1, S - 2:] = 0  # right padding
    feed = {"input_ids": r.integers(0, 100, (B, S)), "attention_mask": mask,
            "token_type_ids": (np.arange(S)[None] >= S // 2).astype(np.int64).repeat(B, 0)}
    names = {i.name for i in model.graph.input}
    return {k: v for k, v in feed.items() if k in names}


def _contrib_ops(model):
    return sorted({n.op_type for n in model.graph.node if n.domain == MS})


@pytest.mark.parametrize("variant,expect", [
    ("default", {"Attention", "EmbedLayerNormalization", "SkipLayerNormalization", "BiasGelu"}),
    ("mha_raw_mask_fast_gelu", {"MultiHeadAttention", "EmbedLayerNormalization", "SkipLayerNormalization",
                                "FastGelu"}),
    ("raw_mask", {"Attention", "EmbedLayerNormalization", "SkipLayerNormalization", "BiasGelu"})])
def test_optimized_bert_end_to_end(tmp_path, bert_path, variant, expect):
    path = bert_path
    from onnxruntime.transformers.fusion_options import AttentionMaskFormat, FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model
    opts = FusionOptions("bert")
    if variant != "default":  # the 2-D 0/1 mask instead of the 1-D key lengths
        opts.attention_mask_format = AttentionMaskFormat.AttentionMask
    if variant == "mha_raw_mask_fast_gelu":
        opts.use_multi_head_attention = True
        opts.enable_gelu_approximation = True
    om = optimize_model(path, model_type="bert", num_heads=4, hidden_size=32, opt_level=0,
                        optimization_options=opts)
    used = _contrib_ops(om.model)
    assert expect <= set(used), used
    opt = str(tmp_path / "bert_opt.onnx")
    om.save_model_to_file(opt)
    sess, ref = InferenceSession(opt), ort.InferenceSession(opt, providers=["CPUExecutionProvider"])
    assert sess.info["mode"] == "jit"
    for B, S, seed in ((2, 7, 1), (3, 5, 2)):  # two shapes through the same compiled session
        feed = _bert_feed(om.model, B, S, seed)
        np.testing.assert_allclose(sess.run(None, feed)[0], ref.run(None, feed)[0], rtol=1e-4, atol=2e-5)


def test_ort_extended_optimized_bert(tmp_path, bert_path):
    # what SessionOptions.optimized_model_filepath saves at ORT_ENABLE_EXTENDED: FusedMatMul, BiasGelu and
    # onnxruntime's default-domain LayerNormalization at opset 14 (moved to com.microsoft by the loader)
    path = bert_path
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = opt = str(tmp_path / "bert_ext.onnx")
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    m = onnx.load(opt)
    assert {"FusedMatMul", "BiasGelu"} <= set(_contrib_ops(m)), _contrib_ops(m)
    assert any(n.op_type == "LayerNormalization" and n.domain == "" for n in m.graph.node)
    sess, ref = InferenceSession(opt), ort.InferenceSession(opt, providers=["CPUExecutionProvider"])
    assert sess.info["mode"] == "jit"
    feed = _bert_feed(m, 2, 6, 3)
    np.testing.assert_allclose(sess.run(None, feed)[0], ref.run(None, feed)[0], rtol=1e-4, atol=2e-5)


def test_optimized_llama_like_rms_norms(tmp_path):
    # RMSNorm blocks: onnxruntime's optimizer writes SkipSimplifiedLayerNormalization (com.microsoft) and
    # SimplifiedLayerNormalization in the *default* domain (not an ONNX op: the loader moves it)
    torch = pytest.importorskip("torch")
    import math
    import warnings

    class RMS(torch.nn.Module):
        def __init__(self, H):
            super().__init__()
            self.w = torch.nn.Parameter(torch.rand(H) + 0.5)

        def forward(self, x):
            return self.w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    class Block(torch.nn.Module):
        def __init__(self, H, N, I):
            super().__init__()
            self.N, self.h = N, H // N
            self.n1, self.n2 = RMS(H), RMS(H)
            self.q, self.k, self.v, self.o = (torch.nn.Linear(H, H, bias=False) for _ in range(4))
            self.g, self.u = torch.nn.Linear(H, I, bias=False), torch.nn.Linear(H, I, bias=False)
            self.d = torch.nn.Linear(I, H, bias=False)

        def forward(self, x):
            B, S, H = x.shape
            y = self.n1(x)
            q, k, v = (f(y).view(B, S, self.N, self.h).transpose(1, 2) for f in (self.q, self.k, self.v))
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.h), -1) @ v
            x = x + self.o(a.transpose(1, 2).reshape(B, S, H))
            y = self.n2(x)
            return x + self.d(torch.nn.functional.silu(self.g(y)) * self.u(y))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.e = torch.nn.Embedding(64, 32)
            self.blocks = torch.nn.ModuleList([Block(32, 4, 48) for _ in range(2)])
            self.n = RMS(32)

        def forward(self, ids):
            x = self.e(ids)
            for b in self.blocks:
                x = b(x)
            return self.n(x)

    torch.manual_seed(0)
    path = str(tmp_path / "llama.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Model().eval(), (torch.zeros(1, 3, dtype=torch.int64),), path, input_names=["ids"],
                          output_names=["out"], dynamic_axes={"ids": {0: "b", 1: "s"}}, opset_version=17,
                          dynamo=False)
    from onnxruntime.transformers.optimizer import optimize_model
    om = optimize_model(path, model_type="gpt2", num_heads=4, hidden_size=32, opt_level=0)
    assert "SkipSimplifiedLayerNormalization" in _contrib_ops(om.model)
    assert any(n.op_type == "SimplifiedLayerNormalization" and n.domain == "" for n in om.model.graph.node)
    opt = str(tmp_path / "llama_opt.onnx")
    om.save_model_to_file(opt)
    sess = InferenceSession(opt)
    assert sess.info["mode"] == "jit" and any("SimplifiedLayerNormalization" in n for n in sess.info["notes"])
    feed = {"ids": np.random.default_rng(4).integers(0, 64, (2, 5))}
    want = ort.InferenceSession(opt, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(sess.run(None, feed)[0], want, rtol=1e-4, atol=2e-5)


def test_ort_extended_optimized_cnn(tmp_path):
    # Conv + BatchNormalization + Relu / Sigmoid -> FusedConv, Gemm + LeakyRelu -> FusedGemm
    torch = pytest.importorskip("torch")
    import warnings

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.bn = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
            self.c2, self.c3 = torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Conv2d(8, 4, 1)
            self.fc, self.fc2 = torch.nn.Linear(4 * 5 * 6, 10), torch.nn.Linear(10, 3)

        def forward(self, x):
            y = torch.relu(self.bn(self.c1(x)))
            y = torch.sigmoid(self.c3(torch.relu(self.c2(y) + y)))
            y = torch.nn.functional.leaky_relu(self.fc(y.flatten(1)), 0.1)
            return torch.clamp(self.fc2(torch.tanh(y)), -0.5, 0.5)

    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-1, 1)
        net.bn.running_var.uniform_(0.5, 2)
    path = str(tmp_path / "cnn.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.zeros(2, 3, 5, 6),), path, input_names=["x"], output_names=["y"],
                          opset_version=17, dynamo=False)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = opt = str(tmp_path / "cnn_ext.onnx")
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    assert {"FusedConv", "FusedGemm"} <= set(_contrib_ops(onnx.load(opt)))
    x = f32(2, 3, 5, 6)
    want = ort.InferenceSession(opt, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(InferenceSession(opt).run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)


def test_quantized_matmul_forms():
    # per-column uint8 weights with zero points, int8 without, int8 activations
    # each vs the spec computed exactly and vs onnxruntime (made exact for uint8 x int8: EXACT_U8S8; its int8
    # activation kernels have no such option and need none)
    x = f32(3, 4, 6)
    q, s, zp = _dynamic_quantize(x)
    bu, bi = R.integers(0, 255, (6, 5)).astype(np.uint8), R.integers(-128, 127, (6, 5)).astype(np.int8)
    bs, bz = np.abs(f32(5)) * 0.01, R.integers(100, 150, 5).astype(np.uint8)
    got = check("DynamicQuantizeMatMul", [("x", x), ("b", bu), ("bs", bs), ("bz", bz)], consts=("b", "bs", "bz"),
                atol=1e-4)[0]
    np.testing.assert_allclose(got, _int_matmul(q, zp, bu, bz) * (float(s) * bs.astype(np.float64)), rtol=1e-5,
                               atol=1e-5, err_msg="DynamicQuantizeMatMul uint8 weights vs the spec")
    bs = np.abs(f32(5)) * 0.01
    got = check("DynamicQuantizeMatMul", [("x", x), ("b", bi), ("bs", bs)], consts=("b", "bs"), atol=1e-4,
                ort_cfg=EXACT_U8S8)[0]
    np.testing.assert_allclose(got, _int_matmul(q, zp, bi, 0) * (float(s) * bs.astype(np.float64)), rtol=1e-5,
                               atol=1e-5, err_msg="DynamicQuantizeMatMul int8 weights vs the spec")
    a = R.integers(-128, 127, (2, 3, 6)).astype(np.int8)
    got = check("MatMulIntegerToFloat", [("a", a), ("b", bi), ("as", np.array(0.02, np.float32)),
                                         ("bs", np.array(0.03, np.float32))], consts=("b",))[0]
    np.testing.assert_allclose(got, _int_matmul(a, 0, bi, 0) * (0.02 * 0.03), rtol=1e-5, atol=1e-5,
                               err_msg="MatMulIntegerToFloat int8 x int8 vs the spec")


def test_optimized_vit_pre_layer_norm(tmp_path):
    # pre-LayerNorm blocks (ViT / GPT-2 style): SkipLayerNormalization's input_skip_bias_sum output carries
    # the residual stream; Conv patch embedding, class token, Attention without a mask
    torch = pytest.importorskip("torch")
    import math
    import warnings

    class Layer(torch.nn.Module):
        def __init__(self, H, N, I):
            super().__init__()
            self.N, self.h = N, H // N
            self.ln1, self.ln2 = torch.nn.LayerNorm(H, eps=1e-6), torch.nn.LayerNorm(H, eps=1e-6)
            self.q, self.k, self.v, self.o = (torch.nn.Linear(H, H) for _ in range(4))
            self.f1, self.f2 = torch.nn.Linear(H, I), torch.nn.Linear(I, H)

        def heads(self, x):
            return x.view(x.shape[0], x.shape[1], self.N, self.h).permute(0, 2, 1, 3)

        def forward(self, x):
            y = self.ln1(x)
            q, k, v = self.heads(self.q(y)), self.heads(self.k(y)), self.heads(self.v(y))
            p = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.h), -1)
            c = torch.matmul(p, v).permute(0, 2, 1, 3).contiguous()
            x = x + self.o(c.view(c.shape[0], c.shape[1], -1))
            return x + self.f2(torch.nn.functional.gelu(self.f1(self.ln2(x))))

    class ViT(torch.nn.Module):
        def __init__(self, H=32):
            super().__init__()
            self.pe = torch.nn.Conv2d(3, H, 4, 4)
            self.cls, self.pos = torch.nn.Parameter(torch.randn(1, 1, H)), torch.nn.Parameter(torch.randn(1, 17, H))
            self.layers = torch.nn.ModuleList([Layer(H, 4, 64) for _ in range(2)])
            self.ln = torch.nn.LayerNorm(H, eps=1e-6)

        def forward(self, img):
            x = self.pe(img).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
            for layer in self.layers:
                x = layer(x)
            return self.ln(x)[:, 0]

    torch.manual_seed(0)
    path = str(tmp_path / "vit.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(ViT().eval(), (torch.zeros(2, 3, 16, 16),), path, input_names=["img"], output_names=["y"],
                          dynamic_axes={"img": {0: "b"}}, opset_version=17, dynamo=False)
    from onnxruntime.transformers.optimizer import optimize_model
    om = optimize_model(path, model_type="vit", num_heads=4, hidden_size=32, opt_level=0)
    assert {"Attention", "SkipLayerNormalization"} <= set(_contrib_ops(om.model))
    assert any(n.op_type == "SkipLayerNormalization" and len(n.output) == 4 and n.output[3]
               for n in om.model.graph.node)
    opt = str(tmp_path / "vit_opt.onnx")
    om.save_model_to_file(opt)
    x = f32(3, 3, 16, 16)
    want = ort.InferenceSession(opt, providers=["CPUExecutionProvider"]).run(None, {"img": x})[0]
    sess = InferenceSession(opt)
    np.testing.assert_allclose(sess.run(None, {"img": x})[0], want, rtol=1e-4, atol=2e-5)
    assert sess.info["mode"] == "jit"
