"""onnxruntime's ``com.microsoft`` contrib ops that optimized transformer / CNN models contain.

``onnxruntime.transformers.optimizer`` (BERT / GPT-2 / T5 / ViT / LLaMA exports) and ORT's own graph
optimizations saved with ``SessionOptions.optimized_model_filepath`` rewrite subgraphs into these fused
ops: FusedMatMul, Gelu / FastGelu / BiasGelu / QuickGelu, BiasAdd, SkipLayerNormalization,
SkipSimplifiedLayerNormalization, (Simplified)LayerNormalization, EmbedLayerNormalization, Attention,
MultiHeadAttention, RotaryEmbedding, GroupQueryAttention, FusedConv, FusedGemm, MatMulNBits,
GatherBlockQuantized, MatMulIntegerToFloat, DynamicQuantizeMatMul.  Each is lowered back onto plain nee ops
(matmul, softmax, ``F.layer_norm``, elementwise math) so ``nee.jit`` fuses them like any traced program; the
semantics are
onnxruntime's CPU kernels' (its ``docs/ContribOperators.md``), checked against onnxruntime in
``tests/test_onnx_contrib.py``: attention masks are *additive* ``mask_filter_value`` (-10000 by default, not
-inf) as onnxruntime computes them, causal positions the float's lowest value.

Forms neetorch does not implement are refused up front through ``unsupported_reason`` (``unsupported_nodes``
lists them at session creation), never run with a guessed meaning: Attention's do_rotary and shared
past/present buffer, MultiHeadAttention's cache_indirection / past_sequence_length / qk output,
GroupQueryAttention's qk output, RotaryEmbedding's packed batching, MatMulNBits' g_idx and bits other than
2 / 4 / 8, GatherBlockQuantized other than rows of 2-D uint8 data, unknown FusedConv / FusedGemm
activations.  Forms only visible from the values' shapes (a 4-D
Megatron mask, a 3B+2 packed mask) raise a LoweringError naming the node.  onnxruntime's CPU provider has no
kernel for several of these either (do_rotary, 4-D masks, packed QKV / KV in MultiHeadAttention, BiasAdd):
the packed forms and BiasAdd are implemented from the operator spec and checked against the equivalent
unpacked computation.

MatMulNBits and GatherBlockQuantized dequantize their constant weights once, at lowering (weights that are
graph inputs make the session run eagerly).  GroupQueryAttention reads seqlens_k and
total_sequence_length: the total length shapes the present outputs and must be known when the graph is
traced (onnxruntime-genai models compute it from the attention mask's shape); seqlens_k may be computed from
the mask's values (positions and masks become tensor arithmetic in the compiled graph).
"""
from __future__ import annotations

import math

import numpy as np

import neetorch as nee

from ..nn import functional as F
from .lowering import LoweringError, op

# ops onnxruntime registers in the *default* domain although ONNX has no such op at the model's opset: its
# optimizers write them there (LayerNormalization fused at opset < 17, SimplifiedLayerNormalization for RMS norms)
_ORT_DEFAULT_DOMAIN = {"LayerNormalization": 17, "SimplifiedLayerNormalization": None}


def ort_default_domain_compat(model):
    """A model whose default-domain nodes ONNX's checker would reject only because they are onnxruntime's
    (see ``_ORT_DEFAULT_DOMAIN``: their op is not in ONNX at the model's opset) with those nodes moved to
    ``com.microsoft``, where this module lowers them with the same semantics; ``(model, note or None)``.
    The model is copied first when anything changes (never the caller's ModelProto)."""
    opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        return model, None

    def needs(n):
        if n.domain not in ("", "ai.onnx") or n.op_type not in _ORT_DEFAULT_DOMAIN:
            return False
        since = _ORT_DEFAULT_DOMAIN[n.op_type]
        return since is None or opset < since

    if not any(needs(n) for n in model.graph.node):
        return model, None
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(model)
    moved = set()
    for n in m.graph.node:
        if needs(n):
            n.domain = "com.microsoft"
            moved.add(n.op_type)
    if not any(o.domain == "com.microsoft" for o in m.opset_import):
        m.opset_import.add(domain="com.microsoft", version=1)
    return m, (f"onnxruntime's default-domain {', '.join(sorted(moved))} (not in ONNX at opset {opset}) lowered as "
               f"com.microsoft ops")


def _err(node, msg):
    return LoweringError(f"node {node.name} (com.microsoft.{node.op_type}): {msg}")


def _attrs(proto) -> dict:
    from onnx import helper
    out = {}
    for a in proto.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _present(proto, i) -> bool:
    return len(proto.input) > i and bool(proto.input[i])


def _refuses(check):
    """Attach ``check(proto, attrs) -> reason | None`` as the op function's up-front refusal."""
    def deco(fn):
        fn.unsupported_reason = lambda proto: check(proto, _attrs(proto))
        return fn
    return deco


def _float_of(t):
    return nee.float32 if t.dtype is nee.float16 else t.dtype


# ---------------------------------------------------------------- FusedMatMul / FusedGemm
def _trans_batch(t):
    """transBatch: [d0, d1 .. d(n-2), d(n-1)] -> [d1 .. d(n-2), d0, d(n-1)] (batch dim 0 moved next to the last)."""
    n = t.ndim
    return t if n < 3 else t.permute(*range(1, n - 1), 0, n - 1)


@op("com.microsoft:FusedMatMul", "com.microsoft:TransposeMatMul")
def _fused_matmul(ctx, node, a, b):
    """Y = alpha * op(A) @ op(B), op = [transBatch then] transpose of the last two dims."""
    if a.ndim < 2 and (node.get("transA", 0) or node.get("transBatchA", 0)):
        raise _err(node, f"transA / transBatchA need A of rank >= 2, got shape {tuple(a.shape)}")
    if b.ndim < 2 and (node.get("transB", 0) or node.get("transBatchB", 0)):
        raise _err(node, f"transB / transBatchB need B of rank >= 2, got shape {tuple(b.shape)}")
    if node.get("transBatchA", 0):
        a = _trans_batch(a)
    if node.get("transA", 0):
        a = a.transpose(-1, -2)
    if node.get("transBatchB", 0):
        b = _trans_batch(b)
    if node.get("transB", 0):
        b = b.transpose(-1, -2)
    y = nee.matmul(a, b)
    alpha = node.get("alpha", 1.0)
    return y * alpha if alpha != 1.0 else y


_ACTS = ("Relu", "Tanh", "Sigmoid", "LeakyRelu", "Clip", "HardSigmoid", "Elu", "Selu", "Softsign", "Softplus",
         "ThresholdedRelu", "ScaledTanh", "ParametricSoftplus", "Identity", "")


def _activation(node, y, name, params):
    """onnxruntime's MLAS fused activations (FusedConv / FusedGemm), parameters as its attributes give them."""
    p = list(params)
    if name in ("", "Identity"):
        return y
    if name == "Relu":
        return nee.relu(y)
    if name == "Tanh":
        return nee.tanh(y)
    if name == "Sigmoid":
        return nee.sigmoid(y)
    if name == "LeakyRelu":
        a = p[0] if p else 0.01
        return nee.where(y >= 0, y, y * a)
    if name == "Clip":
        lo, hi = (p + [-math.inf, math.inf][len(p):])[:2]
        return nee.clamp(y, float(lo), float(hi))
    if name == "HardSigmoid":
        a, b = (p + [0.2, 0.5][len(p):])[:2]
        return nee.clamp(y * a + b, 0.0, 1.0)
    if name == "Elu":
        a = p[0] if p else 1.0
        return nee.where(y > 0, y, (nee.exp(y) - 1.0) * a)
    if name == "Selu":
        a, g = (p + [1.67326319217681884765625, 1.05070102214813232421875][len(p):])[:2]
        return nee.where(y > 0, y * g, (nee.exp(y) - 1.0) * (a * g))
    if name == "Softsign":
        return y / (nee.abs(y) + 1.0)
    if name == "Softplus":
        return nee.log(nee.exp(y) + 1.0)
    if name == "ThresholdedRelu":
        a = p[0] if p else 1.0
        return nee.where(y > a, y, nee.zeros((), dtype=y.dtype))
    if name in ("ScaledTanh", "ParametricSoftplus"):
        a, b = (p + [1.0, 1.0][len(p):])[:2]
        return nee.tanh(y * b) * a if name == "ScaledTanh" else nee.log(nee.exp(y * b) + 1.0) * a
    raise _err(node, f"activation {name!r} is not supported")


def _act_check(proto, at):
    a = at.get("activation", "")
    return None if a in _ACTS else f"activation {a!r} (supported: {', '.join(x for x in _ACTS if x)})"


@_refuses(_act_check)
@op("com.microsoft:FusedConv")
def _fused_conv(ctx, node, x, w, b=None, z=None):
    """Conv (+ Z, the residual sum input) then the ``activation`` attribute's function."""
    from .ops_nn import _conv
    y = _conv(ctx, node, x, w, b)
    if z is not None:
        y = y + z
    return _activation(node, y, node.get("activation", ""), node.get("activation_params") or [])


@_refuses(lambda proto, at: _act_check(proto, {"activation": at.get("activation", "")}))
@op("com.microsoft:FusedGemm")
def _fused_gemm(ctx, node, a, b, c=None):
    from .ops_math import _gemm
    y = _gemm(ctx, node, a, b, c)
    name = node.get("activation", "")
    params = [node.get(k) for k in ("activation_alpha", "activation_beta", "activation_gamma")]
    if name in ("LeakyRelu", "ThresholdedRelu", "Elu", "Selu", "HardSigmoid", "ScaledTanh", "ParametricSoftplus"):
        params = [v for v in params if v is not None]
    else:
        params = []
    return _activation(node, y, name, params)


# ---------------------------------------------------------------- Gelu family, BiasAdd
@op("com.microsoft:Gelu")
def _gelu(ctx, node, x):
    return F.gelu(x)


@op("com.microsoft:BiasGelu")
def _bias_gelu(ctx, node, x, bias):
    return F.gelu(x + bias)


@op("com.microsoft:FastGelu")
def _fast_gelu(ctx, node, x, bias=None):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) of x (+ bias)."""
    if bias is not None:
        x = x + bias
    return F.gelu(x, approximate="tanh")


@op("com.microsoft:QuickGelu")
def _quick_gelu(ctx, node, x):
    alpha = node.get("alpha", 1.702)
    return x * nee.sigmoid(x * alpha) if alpha != 1.0 else x * nee.sigmoid(x)


@op("com.microsoft:BiasAdd")
def _bias_add(ctx, node, x, bias, skip):
    """Stable Diffusion's X + bias + skip (X, skip [N, S, C], bias [C])."""
    return x + bias + skip


# ---------------------------------------------------------------- layer normalizations
def _ln_rows(x, gamma, beta, eps, simplified):
    """(y, mean or None, inv_std_var) over the last axis, statistics in float32 at least (onnxruntime's)."""
    H = x.shape[-1]
    if (not simplified and x.dtype in (nee.float32, nee.float64) and gamma.dtype is x.dtype
            and tuple(gamma.shape) == (H,) and (beta is None or tuple(beta.shape) == (H,))):
        y = F.layer_norm(x, (H,), gamma, beta, float(eps))
        return y, None, None
    xf = x.to(_float_of(x))
    if simplified:
        m = None
        inv = nee.rsqrt(nee.mean(xf * xf, (xf.ndim - 1,), keepdim=True) + eps)
        y = xf * inv
    else:
        m = nee.mean(xf, (xf.ndim - 1,), keepdim=True)
        xc = xf - m
        inv = nee.rsqrt(nee.mean(xc * xc, (xf.ndim - 1,), keepdim=True) + eps)
        y = xc * inv
    y = y.to(x.dtype) * gamma
    if beta is not None:
        y = y + beta
    return y, m, inv


def _stats(x, eps, simplified):
    xf = x.to(_float_of(x))
    d = (xf.ndim - 1,)
    if simplified:
        return None, nee.rsqrt(nee.mean(xf * xf, d, keepdim=True) + eps)
    m = nee.mean(xf, d, keepdim=True)
    xc = xf - m
    return m, nee.rsqrt(nee.mean(xc * xc, d, keepdim=True) + eps)


def _skip_ln(ctx, node, x, skip, gamma, beta, bias, simplified):
    if x.ndim not in (2, 3):
        raise _err(node, f"input must be [batch, sequence, hidden] or [rows, hidden], got shape {tuple(x.shape)}")
    if (skip.ndim not in (2, 3) or skip.ndim > x.ndim or tuple(skip.shape[-2:]) != tuple(x.shape[-2:])
            or (skip.ndim == 3 and skip.shape[0] not in (1, x.shape[0]))):
        raise _err(node, f"skip shape {tuple(skip.shape)} does not fit input {tuple(x.shape)} (the same, or "
                         f"[1, sequence, hidden] / [sequence, hidden] for a 3-D input)")
    s = x + skip
    if bias is not None:
        s = s + bias
    eps = node.get("epsilon", 1e-12)
    y, m, inv = _ln_rows(s, gamma, beta, eps, simplified)
    outs = [y]
    if node.nout > 1:
        if m is None and inv is None:
            m, inv = _stats(s, eps, simplified)
        outs += [m if m is not None else nee.zeros((*s.shape[:-1], 1), dtype=_float_of(s)), inv, s]
    return tuple(outs[:node.nout])


@op("com.microsoft:SkipLayerNormalization")
def _skip_layer_norm(ctx, node, x, skip, gamma, beta=None, bias=None):
    """output = LayerNorm(input + skip (+ bias)) * gamma (+ beta); optional outputs mean, inv_std_var,
    input_skip_bias_sum."""
    return _skip_ln(ctx, node, x, skip, gamma, beta, bias, False)


@op("com.microsoft:SkipSimplifiedLayerNormalization")
def _skip_simplified_layer_norm(ctx, node, x, skip, gamma, bias=None):
    """output = RMSNorm(input + skip (+ bias)) * gamma; optional outputs mean (unused), inv_std_var, sum."""
    return _skip_ln(ctx, node, x, skip, gamma, None, bias, True)


@op("com.microsoft:LayerNormalization")
def _ms_layer_norm(ctx, node, x, scale, bias=None):
    """onnxruntime's LayerNormalization before ONNX opset 17 had one: the same op."""
    from .ops_nn import _ln
    return _ln(ctx, node, x, scale, bias)


@op("SimplifiedLayerNormalization", "com.microsoft:SimplifiedLayerNormalization")
def _simplified_layer_norm(ctx, node, x, scale):
    """RMS normalization over axes [axis, rank): Y = X / sqrt(mean(X^2) + eps) * scale; outputs Y, inv_std_var.
    onnxruntime registers it in the default domain (what its optimizer writes for LLaMA-style models)."""
    axis = node.get("axis", -1) % x.ndim
    eps = node.get("epsilon", 1e-5)
    dims = tuple(range(axis, x.ndim))
    xf = x.to(nee.float32) if node.get("stash_type", 1) == 1 and x.dtype is nee.float16 else x
    inv = nee.rsqrt(nee.mean(xf * xf, dims, keepdim=True) + eps)
    y = (xf * inv).to(x.dtype) * scale
    return (y, inv)[:node.nout] if node.nout > 1 else y


# ---------------------------------------------------------------- EmbedLayerNormalization
@op("com.microsoft:EmbedLayerNormalization")
def _embed_layer_norm(ctx, node, ids, seg_ids, word, pos_emb, seg_emb, gamma, beta, mask=None, pos_ids=None):
    """LayerNorm(word[ids] + position[pos_ids or 0..S-1] + segment[seg_ids]) -> output, mask_index (int32 [B]:
    the count of mask entries equal to 1 per row, zeros without a mask), embedding_sum (the sum before the
    normalization)."""
    if ids.ndim != 2:
        raise _err(node, f"input_ids must be 2-D [batch, sequence], got shape {tuple(ids.shape)}")
    B, S = ids.shape
    if (seg_ids is None) != (seg_emb is None):
        raise _err(node, "segment_ids and segment_embedding must be given together")
    e = F.embedding(ids.to(nee.int64), word)
    if pos_ids is not None:
        p = pos_ids.to(nee.int64)
        pe = F.embedding(p, pos_emb)
        if pe.ndim == 2:
            pe = pe.unsqueeze(0)
    else:
        pe = pos_emb.narrow(0, 0, S).unsqueeze(0)
    e = e + pe
    if seg_ids is not None:
        e = e + F.embedding(seg_ids.to(nee.int64), seg_emb)
    y, _, _ = _ln_rows(e, gamma, beta, node.get("epsilon", 1e-12), False)
    outs = [y]
    if node.nout > 1:
        if mask is not None:
            mi = nee.sum((mask == 1).to(nee.int32), (1,)).to(nee.int32)  # onnxruntime counts the 1s
        else:
            mi = nee.zeros((B,), dtype=nee.int32)
        outs += [mi, e]
    return tuple(outs[:node.nout]) if node.nout > 1 else y


# ---------------------------------------------------------------- attention
def _lowest(dt):
    return float(np.finfo(dt.np).min)


def _heads(t, n):
    """[B, L, n*h] -> [B, n, L, h]."""
    B, L = t.shape[0], t.shape[1]
    return t.reshape(B, L, n, -1).permute(0, 2, 1, 3)


def _mask_bias(ctx, node, mask, B, S, T, past, causal, mfv, dt):
    """The additive [B or 1, 1, S, T] mask onnxruntime's CPU attention builds (attention_helper PrepareMask):
    masked key positions get ``mask_filter_value``; with ``causal`` future keys (j > past + i) get the dtype's
    lowest value (replacing, not adding to, the padding mask's value).  None if nothing is masked."""
    bias = None
    if mask is not None:
        if mask.ndim == 1:
            if mask.shape[0] not in (B, 2 * B):
                raise _err(node, f"1-D mask_index must have {B} or {2 * B} entries, got {mask.shape[0]}")
            j = nee.arange(T, dtype=nee.int64).reshape(1, T)
            end = mask.narrow(0, 0, B).to(nee.int64).reshape(B, 1)
            ok = j < end
            if mask.shape[0] == 2 * B:
                start = nee.clamp(mask.narrow(0, B, B).to(nee.int64), max=T).reshape(B, 1)
                ok = nee.logical_and(ok, j >= start)
            ok = ok.reshape(B, 1, 1, T)
        elif mask.ndim == 2:
            if tuple(mask.shape) != (B, T):
                raise _err(node, f"2-D mask_index must be [batch, total_sequence] = [{B}, {T}], got "
                                 f"{tuple(mask.shape)}")
            ok = (mask > 0).reshape(B, 1, 1, T)
        elif mask.ndim == 3:
            if tuple(mask.shape) != (B, S, T):
                raise _err(node, f"3-D mask_index must be [batch, sequence, total_sequence] = [{B}, {S}, {T}], "
                                 f"got {tuple(mask.shape)}")
            ok = (mask > 0).reshape(B, 1, S, T)
        else:
            raise _err(node, f"mask_index of rank {mask.ndim} (shape {tuple(mask.shape)}) is not supported: 1-D "
                             f"key lengths, 2-D or 3-D 0/1 masks (onnxruntime's CPU kernels have no 4-D form either)")
        bias = nee.where(ok, nee.zeros((), dtype=dt), nee.full((), float(mfv), dtype=dt))
    if causal:
        fut = np.arange(T).reshape(1, T) > (np.arange(S).reshape(S, 1) + past)
        if fut.any():
            low = _lowest(dt)
            cm = ctx.const(fut.reshape(1, 1, S, T))
            if bias is None:
                bias = ctx.const(np.where(fut, low, 0.0).astype(dt.np).reshape(1, 1, S, T))
            else:
                bias = nee.where(cm, nee.full((), low, dtype=dt), bias)
    return bias


def _sdpa(q, k, v, scale, bias, attn_bias):
    """softmax(q k^T * scale + bias + attn_bias) v for [B, N, S, h] heads."""
    s = nee.matmul(q, k.transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias
    if attn_bias is not None:
        s = s + attn_bias
    return nee.matmul(nee.softmax(s, -1), v)


def _merge_heads(y):
    B, N, S, h = y.shape
    return y.permute(0, 2, 1, 3).reshape(B, S, N * h)


def _attention_check(proto, at):
    if at.get("do_rotary", 0):
        return "do_rotary=1 (apply RotaryEmbedding before the Attention node instead)"
    if at.get("past_present_share_buffer", 0):
        return "past_present_share_buffer=1 (a preallocated shared KV buffer)"
    if _present(proto, 6):
        return "a past_sequence_length input (only meaningful with a shared past/present buffer)"
    return None


@_refuses(_attention_check)
@op("com.microsoft:Attention")
def _ms_attention(ctx, node, x, w, bias=None, mask=None, past=None, attn_bias=None, past_len=None):
    """BERT / GPT-2 self-attention with packed Q/K/V weights: qkv = input @ weights + bias, split by
    ``qkv_hidden_sizes`` (default three equal parts), ``num_heads`` heads, optional past ([2, B, N, P, h]:
    keys then values) concatenated before the new keys; outputs [B, S, Dv] and present [2, B, N, P+S, h]."""
    N = node.get("num_heads")
    if not N:
        raise _err(node, "num_heads attribute is required")
    if x.ndim != 3:
        raise _err(node, f"input must be [batch, sequence, input_hidden], got shape {tuple(x.shape)}")
    B, S = x.shape[0], x.shape[1]
    sizes = node.get("qkv_hidden_sizes") or [w.shape[1] // 3] * 3
    if len(sizes) != 3 or sum(sizes) != w.shape[1] or sizes[0] != sizes[1] or any(d % N for d in sizes):
        raise _err(node, f"qkv_hidden_sizes {list(sizes)} do not fit weights {tuple(w.shape)} with {N} heads "
                         f"(Q and K sizes equal, each divisible by num_heads)")
    qkv = nee.matmul(x, w)
    if bias is not None:
        qkv = qkv + bias
    dq, dk, dv = sizes
    q = _heads(qkv.narrow(2, 0, dq), N)
    k = _heads(qkv.narrow(2, dq, dk), N)
    v = _heads(qkv.narrow(2, dq + dk, dv), N)
    P = 0
    if past is not None:
        if past.ndim != 5 or past.shape[0] != 2 or dk != dv:
            raise _err(node, f"past must be [2, batch, num_heads, past_sequence, head_size], got "
                             f"{tuple(past.shape)} (and K / V sizes equal)")
        P = past.shape[3]
        k = nee.cat([past.select(0, 0), k], 2)
        v = nee.cat([past.select(0, 1), v], 2)
    T = P + S
    scale = node.get("scale", 0.0) or 1.0 / math.sqrt(dq // N)
    mb = _mask_bias(ctx, node, mask, B, S, T, P, node.get("unidirectional", 0), node.get("mask_filter_value", -10000.0),
                    x.dtype)
    y = _merge_heads(_sdpa(q, k, v, scale, mb, attn_bias))
    if node.nout > 1:
        if dk != dv:
            raise _err(node, "the present output needs equal K and V hidden sizes")
        return y, nee.stack([k, v], 0)
    return y


def _mha_check(proto, at):
    if _present(proto, 8):
        return "a past_sequence_length input (shared past/present buffers)"
    if _present(proto, 9):
        return "a cache_indirection input (beam search)"
    if len(proto.output) > 3 and proto.output[3]:
        return "the qk output"
    return None


@_refuses(_mha_check)
@op("com.microsoft:MultiHeadAttention")
def _mha(ctx, node, q, k=None, v=None, bias=None, kpm=None, attn_bias=None, past_k=None, past_v=None,
         past_len=None, cache_ind=None):
    """Multi-head attention with separate Q / K / V ([B, S, D]), packed QKV (query [B, S, N, 3, h]), packed KV
    (key [B, L, N, 2, h]) or cross-attention keys / values already split into heads (key, value [B, N, L, h]);
    ``bias`` [Dq + Dk + Dv] added to the projections (not to split-head keys / values); key_padding_mask
    [B] (lengths), [B, T] or [B, S, T] (0/1); attention_bias [B or 1, N or 1, S, T]; past_key / past_value
    [B, N, P, h] concatenated before the new keys; outputs [B, S, Dv], present_key, present_value."""
    N = node.get("num_heads")
    if not N:
        raise _err(node, "num_heads attribute is required")
    B, S = q.shape[0], q.shape[1]
    bq = bk = bv = None
    if q.ndim == 5:  # packed QKV [B, S, N, 3, h]
        if k is not None or v is not None or q.shape[3] != 3:
            raise _err(node, f"packed QKV query {tuple(q.shape)} must be [B, S, N, 3, h] without key / value")
        h = q.shape[4]
        if bias is not None:
            q = q + bias.reshape(3, N, h).permute(1, 0, 2)
        qh, kh, vh = (q.select(3, i).permute(0, 2, 1, 3) for i in range(3))
    else:
        if q.ndim != 3 or k is None:
            raise _err(node, f"query must be [B, S, D] (or packed [B, S, N, 3, h]) with a key, got {tuple(q.shape)}")
        D = q.shape[2]
        if bias is not None:
            bq = bias.narrow(0, 0, D)
        qh = _heads(q + bq if bq is not None else q, N)
        if k.ndim == 5:  # packed KV [B, L, N, 2, h]
            if v is not None or k.shape[3] != 2:
                raise _err(node, f"packed KV key {tuple(k.shape)} must be [B, L, N, 2, h] without value")
            h = k.shape[4]
            if bias is not None:
                k = k + bias.narrow(0, D, 2 * N * h).reshape(2, N, h).permute(1, 0, 2)
            kh, vh = (k.select(3, i).permute(0, 2, 1, 3) for i in range(2))
        elif k.ndim == 4:  # cross attention: key / value already [B, N, L, h]
            if v is None or v.ndim != 4:
                raise _err(node, "a 4-D key [B, N, L, h] needs a 4-D value")
            kh, vh = k, v
        else:
            if v is None or k.ndim != 3 or v.ndim != 3:
                raise _err(node, f"key {tuple(k.shape)} / value need to be [B, L, D]")
            Dk, Dv = k.shape[2], v.shape[2]
            if bias is not None:
                bk, bv = bias.narrow(0, D, Dk), bias.narrow(0, D + Dk, Dv)
            kh = _heads(k + bk if bk is not None else k, N)
            vh = _heads(v + bv if bv is not None else v, N)
    P = 0
    if past_k is not None or past_v is not None:
        if past_k is None or past_v is None or past_k.ndim != 4:
            raise _err(node, "past_key and past_value must be given together, each [B, N, P, h]")
        P = past_k.shape[2]
        kh = nee.cat([past_k, kh], 2)
        vh = nee.cat([past_v, vh], 2)
    T = kh.shape[2]
    scale = node.get("scale", 0.0) or 1.0 / math.sqrt(qh.shape[-1])
    mb = _mask_bias(ctx, node, kpm, B, S, T, P, node.get("unidirectional", 0),
                    node.get("mask_filter_value", -10000.0), qh.dtype)
    y = _merge_heads(_sdpa(qh, kh, vh, scale, mb, attn_bias))
    return (y, kh, vh)[:node.nout] if node.nout > 1 else y


# ---------------------------------------------------------------- rotary embedding
def _rotate(x, cos, sin, rd, interleaved):
    """Rotate the first ``rd`` features of x [B, S, N, h] by cos / sin [B or 1, S, 1, rd/2]."""
    D = x.shape[-1]
    xr = x.narrow(3, 0, rd) if rd < D else x
    h = rd // 2
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
    else:
        x1, x2 = xr.narrow(3, 0, h), xr.narrow(3, h, h)
    re = x1 * cos - x2 * sin
    im = x1 * sin + x2 * cos
    out = nee.stack([re, im], -1).reshape(*xr.shape) if interleaved else nee.cat([re, im], -1)
    return nee.cat([out, x.narrow(3, rd, D - rd)], -1) if rd < D else out


def _rope_tables(ctx, node, pos, cos, sin, B, S, offset=0):
    """cos / sin rows for positions [B or 1, S] -> [B or 1, S, 1, rd/2]."""
    if pos is None:
        p = nee.arange(S, dtype=nee.int64).reshape(1, S) + offset
    elif pos.ndim == 1 and pos.shape[0] == 1:  # one start offset for every batch entry
        p = pos.to(nee.int64).reshape(1, 1) + nee.arange(S, dtype=nee.int64).reshape(1, S)
    elif pos.ndim == 2:
        p = pos.to(nee.int64)
    else:
        raise _err(node, f"position_ids must be [batch, sequence] or [1], got shape {tuple(pos.shape)}")
    c = F.embedding(p, cos).unsqueeze(2)
    s = F.embedding(p, sin).unsqueeze(2)
    return c, s


@_refuses(lambda proto, at: "is_packed_batching=1" if at.get("is_packed_batching", 0) else None)
@op("com.microsoft:RotaryEmbedding")
def _ms_rope(ctx, node, x, pos, cos, sin):
    """input [B, S, D] (heads from ``num_heads`` or the cache width) or [B, N, S, h]; position_ids [B, S] or
    [1] (a start offset); cos / sin caches [max_positions, rotary_dim / 2]; ``interleaved`` pairs (2i, 2i+1)
    instead of halves; features past ``rotary_embedding_dim`` pass through."""
    shp = tuple(x.shape)
    rd = node.get("rotary_embedding_dim", 0) or 2 * cos.shape[-1]
    if x.ndim == 4:
        xs = x.permute(0, 2, 1, 3)
    elif x.ndim == 3:
        nh = node.get("num_heads", 0)
        if nh:
            hs = shp[2] // nh
        else:
            if node.get("rotary_embedding_dim", 0):
                raise _err(node, "rotary_embedding_dim needs num_heads on a 3-D input")
            hs = 2 * cos.shape[-1]
        xs = x.reshape(shp[0], shp[1], shp[2] // hs, hs)
    else:
        raise _err(node, f"input must be 3-D or 4-D, got shape {shp}")
    B, S, _, h = xs.shape
    if rd > h or 2 * cos.shape[-1] < rd:
        raise _err(node, f"rotary dim {rd} does not fit head size {h} / cache {tuple(cos.shape)}")
    c, s = _rope_tables(ctx, node, pos, cos.narrow(1, 0, rd // 2), sin.narrow(1, 0, rd // 2), B, S)
    y = _rotate(xs, c, s, rd, node.get("interleaved", 0))
    return y.permute(0, 2, 1, 3) if x.ndim == 4 else y.reshape(*shp)


# ---------------------------------------------------------------- GroupQueryAttention
def _gqa_check(proto, at):
    if at.get("qk_output", 0):
        return "qk_output (the attention scores output)"
    return None


def _softmax_sink(s, sink):
    """softmax over the keys with one more logit ``sink`` (0 for smooth_softmax, or per head) in the
    denominator only: exp(s) / (sum exp(s) + exp(sink)), computed stably."""
    m = nee.maximum(nee.amax(s, (s.ndim - 1,), keepdim=True), sink)
    e = nee.exp(s - m)
    return e / (nee.sum(e, (s.ndim - 1,), keepdim=True) + nee.exp(sink - m))


@_refuses(_gqa_check)
@op("com.microsoft:GroupQueryAttention")
def _gqa(ctx, node, q, k, v, past_k, past_v, seqlens_k, total_len, cos=None, sin=None, pos_ids=None,
         attn_bias=None, head_sink=None):
    """Grouped-query attention (LLaMA / Phi / Mistral exports): query [B, S, Nq*h] (or packed QKV with key /
    value absent), key / value [B, S, Nkv*h], past_key / past_value [B, Nkv, P, h] (the cache, its first
    ``seqlens_k[b] + 1 - S`` positions valid), seqlens_k [B] (total length - 1 per batch entry), causal;
    optional rotary (``do_rotary``, positions past + i or ``position_ids``) on Q and K, ``softcap``
    (c * tanh(s / c)), ``local_window_size`` (only the last that many keys up to the query's own position), an
    additive attention_bias, ``smooth_softmax`` / head_sink (an extra 0 / per-head logit in the softmax
    denominator).  present_key / present_value are the past buffers with the new keys written at each entry's
    position (length max(P, total), zeros past each entry's length)."""
    Nq, Nk = node.get("num_heads"), node.get("kv_num_heads")
    if not Nq or not Nk or Nq % Nk:
        raise _err(node, f"num_heads {Nq} must be a multiple of kv_num_heads {Nk}")
    B, S = q.shape[0], q.shape[1]
    if k is None:  # packed QKV
        h = q.shape[2] // (Nq + 2 * Nk)
        q, k, v = q.narrow(2, 0, Nq * h), q.narrow(2, Nq * h, Nk * h), q.narrow(2, (Nq + Nk) * h, Nk * h)
    h = q.shape[2] // Nq
    from ..trace.tracer import TraceError
    total = int(ctx.scalar(total_len))  # shapes the present outputs: must be known (Shape arithmetic usually)
    P = past_k.shape[2] if past_k is not None else 0
    L = max(P, total)
    try:
        sk = np.asarray(ctx.ints(seqlens_k), dtype=np.int64).reshape(-1)
    except TraceError:  # lengths computed from the attention mask: per-entry positions as tensor arithmetic
        sk = None
    if sk is not None:
        past_valid = sk + 1 - S  # each entry's valid past length
        if sk.shape != (B,) or (past_valid < 0).any() or (past_valid > P).any():
            raise _err(node, f"seqlens_k {sk.tolist()} inconsistent with batch {B}, sequence {S} and past length "
                             f"{P} (a first prompt with padding, seqlens_k < sequence - 1, is not supported)")
        pv = ctx.const(past_valid.reshape(B, 1))
        uniform = len(set(past_valid.tolist())) == 1 and past_valid[0] == P and P + S == L
    else:
        if tuple(seqlens_k.shape) != (B,):
            raise _err(node, f"seqlens_k must be [batch] = [{B}], got shape {tuple(seqlens_k.shape)}")
        # out-of-range lengths are clamped (no value check inside a compiled graph): gathers stay in bounds
        pv = nee.clamp(seqlens_k.to(nee.int64).reshape(B, 1) + (1 - S), 0, P)
        uniform = False
    qs = q.reshape(B, S, Nq, h)
    ks = k.reshape(B, S, Nk, h)
    ar_s = nee.arange(S, dtype=nee.int64).reshape(1, S)
    if node.get("do_rotary", 0):
        if cos is None or sin is None:
            raise _err(node, "do_rotary=1 needs cos_cache and sin_cache")
        rd = 2 * cos.shape[-1]
        pos = pos_ids if pos_ids is not None else pv + ar_s
        c, s = _rope_tables(ctx, node, pos, cos, sin, B, S)
        il = node.get("rotary_interleaved", 0)
        qs, ks = _rotate(qs, c, s, rd, il), _rotate(ks, c, s, rd, il)
    qh = qs.permute(0, 2, 1, 3)
    kh = ks.permute(0, 2, 1, 3)
    vh = v.reshape(B, S, Nk, h).permute(0, 2, 1, 3)
    if uniform:
        # the common case: every entry's valid past is the whole past buffer
        kt = nee.cat([past_k, kh], 2) if P else kh
        vt = nee.cat([past_v, vh], 2) if P else vh
    else:
        # per-entry lengths: entry b's valid past (its first pv[b] positions), then its new keys, then zeros
        # (as onnxruntime leaves the rest of the L-long present buffer)
        j = nee.arange(L, dtype=nee.int64).reshape(1, L)
        src = nee.logical_and(j >= pv, j < pv + S).reshape(B, 1, L, 1)  # from the new keys
        new_i = nee.clamp(j - pv, 0, S - 1).reshape(B, 1, L, 1).expand(B, Nk, L, h)
        zero = nee.zeros((), dtype=kh.dtype)
        kn, vn = nee.gather(kh, 2, new_i), nee.gather(vh, 2, new_i)
        if P:
            old = (j < pv).reshape(B, 1, L, 1)  # from the past
            kp = nee.pad(past_k, (0, 0, 0, L - P)) if P < L else past_k.narrow(2, 0, L)
            vp = nee.pad(past_v, (0, 0, 0, L - P)) if P < L else past_v.narrow(2, 0, L)
            kp, vp = nee.where(old, kp, zero), nee.where(old, vp, zero)
        else:
            kp = vp = zero
        kt, vt = nee.where(src, kn, kp), nee.where(src, vn, vp)
    T = kt.shape[2]
    lws = node.get("local_window_size", -1)
    if sk is not None:
        qpos = past_valid.reshape(B, 1, 1) + np.arange(S).reshape(1, S, 1)
        jj = np.arange(T).reshape(1, 1, T)
        allowed = jj <= qpos
        if lws is not None and lws >= 0:
            allowed &= jj > qpos - lws
        allowed = None if allowed.all() else ctx.const(allowed.reshape(B, 1, S, T))
    else:
        qpos = (pv + ar_s).reshape(B, 1, S, 1)
        jj = nee.arange(T, dtype=nee.int64).reshape(1, 1, 1, T)
        allowed = jj <= qpos
        if lws is not None and lws >= 0:
            allowed = nee.logical_and(allowed, jj > qpos - lws)
    rep = Nq // Nk
    ke = kt.unsqueeze(2).expand(B, Nk, rep, T, h).reshape(B, Nq, T, h) if rep > 1 else kt
    ve = vt.unsqueeze(2).expand(B, Nk, rep, T, h).reshape(B, Nq, T, h) if rep > 1 else vt
    scale = node.get("scale", 0.0) or 1.0 / math.sqrt(h)
    sc = nee.matmul(qh, ke.transpose(-1, -2)) * scale
    cap = node.get("softcap", 0.0)
    if cap and cap > 0:
        sc = nee.tanh(sc / cap) * cap
    if attn_bias is not None:
        sc = sc + attn_bias
    if allowed is not None:
        sc = nee.where(allowed, sc, nee.full((), -math.inf, dtype=sc.dtype))
    if head_sink is not None:
        p = _softmax_sink(sc, head_sink.to(sc.dtype).reshape(1, Nq, 1, 1))
    elif node.get("smooth_softmax", 0):
        p = _softmax_sink(sc, nee.zeros((), dtype=sc.dtype))
    else:
        p = nee.softmax(sc, -1)
    y = _merge_heads(nee.matmul(p, ve))
    return (y, kt, vt)[:node.nout] if node.nout > 1 else y


# ---------------------------------------------------------------- quantized matmuls
def _nbits_check(proto, at):
    bits = at.get("bits", 4)
    if bits not in (2, 4, 8):
        return f"bits={bits} (supported: 2, 4, 8)"
    bs = at.get("block_size", 0)
    if bs < 16 or bs & (bs - 1):
        return f"block_size={bs} (a power of two >= 16)"
    if _present(proto, 4):
        return "a g_idx input (act-order GPTQ)"
    return None


def dequantize_nbits(b, scales, zp, K, N, bits, block_size) -> np.ndarray:
    """MatMulNBits' weights as a float [N, K] numpy array: B uint8 [N, blocks, block_size * bits / 8] packed
    little-end first, scales [N * blocks], zero points packed uint8 ([N * ceil(blocks * bits / 8)]) or of the
    scales' type ([N * blocks]); the default zero point is 2^(bits-1)."""
    nb = (K + block_size - 1) // block_size
    per = 8 // bits
    b = np.asarray(b, dtype=np.uint8).reshape(N, nb, -1)
    q = np.stack([(b >> (bits * i)) & ((1 << bits) - 1) for i in range(per)], -1).reshape(N, nb, -1)
    if q.shape[2] != block_size:
        raise ValueError(f"B's blob of {b.shape[2]} bytes does not hold block_size={block_size} {bits}-bit values")
    sc = np.asarray(scales).reshape(N, nb).astype(np.float32)
    if zp is None:
        z = np.full((N, nb), float(1 << (bits - 1)), dtype=np.float32)
    elif zp.dtype == np.uint8:
        zb = zp.reshape(N, -1)
        z = np.stack([(zb >> (bits * i)) & ((1 << bits) - 1) for i in range(per)], -1).reshape(N, -1)[:, :nb]
        z = z.astype(np.float32)
    else:
        z = np.asarray(zp, dtype=np.float32).reshape(N, nb)
    w = (q.astype(np.float32) - z[:, :, None]) * sc[:, :, None]
    return w.reshape(N, nb * block_size)[:, :K]


@_refuses(_nbits_check)
@op("com.microsoft:MatMulNBits")
def _matmul_nbits(ctx, node, a, b, scales, zp=None, g_idx=None, bias=None):
    """Y = A @ dequantized(B)^T (+ bias): the block-quantized weights are dequantized once, at lowering
    (a constant of the compiled program), in float32 and then the scales' dtype."""
    K, N = node.get("K"), node.get("N")
    if K is None or N is None:
        raise _err(node, "attributes K and N are required")
    if a.shape[-1] != K:
        raise _err(node, f"A's last dim {a.shape[-1]} is not K={K}")
    zpn = ctx.static(zp) if zp is not None else None
    try:
        w = dequantize_nbits(ctx.static(b), ctx.static(scales), zpn, K, N, node.get("bits", 4),
                             node.get("block_size"))
    except ValueError as e:
        raise _err(node, str(e)) from None
    wt = ctx.const(np.ascontiguousarray(w.T).astype(scales.dtype.np))
    y = nee.matmul(a, wt)
    return y + bias if bias is not None else y


def _gbq_check(proto, at):
    bits = at.get("bits", 4)
    if bits not in (4, 8):
        return f"bits={bits} (supported: 4, 8)"
    if at.get("gather_axis", 0) != 0:
        return f"gather_axis={at.get('gather_axis')} (supported: 0)"
    if at.get("quantize_axis", 1) not in (1, -1):
        return f"quantize_axis={at.get('quantize_axis')} (supported: the last of 2-D data)"
    return None


@_refuses(_gbq_check)
@op("com.microsoft:GatherBlockQuantized")
def _gather_block_quantized(ctx, node, data, idx, scales, zp=None):
    """Rows of block-quantized 2-D uint8 data ([V, K * bits / 8], MatMulNBits' packing and default zero point
    2^(bits-1), scales [V, K / block_size]) gathered by ``indices`` and dequantized: the 4-bit embedding
    tables of onnxruntime-genai int4 models.  The table is dequantized once, at lowering."""
    if data.dtype is not nee.uint8 or data.ndim != 2:
        raise _err(node, f"data must be 2-D uint8 (packed), got {data.dtype} {tuple(data.shape)}")
    bits, bs = node.get("bits", 4), node.get("block_size", 128)
    V, K = data.shape[0], data.shape[1] * 8 // bits
    if bs < 16 or bs & (bs - 1) or K % bs or tuple(scales.shape) != (V, K // bs):
        raise _err(node, f"block_size {bs} and scales {tuple(scales.shape)} do not fit data {tuple(data.shape)} "
                         f"({K} {bits}-bit values per row)")
    w = dequantize_nbits(ctx.static(data), ctx.static(scales), ctx.static(zp) if zp is not None else None, K, V,
                         bits, bs)
    table = ctx.const(w.astype(scales.dtype.np))
    i = idx.to(nee.int64)
    i = nee.where(i < 0, i + V, i)
    return nee.index_select(table, 0, i.reshape(-1)).reshape(*idx.shape, K)


@op("com.microsoft:MatMulIntegerToFloat")
def _mm_int_to_float(ctx, node, a, b, a_s, b_s, a_zp=None, b_zp=None, bias=None):
    """(A - a_zero_point) @ (B - b_zero_point) * a_scale * b_scale (+ bias): integer sums exact (float64)."""
    af = a.to(nee.float64) - (a_zp.to(nee.float64) if a_zp is not None else 0.0)
    bf = b.to(nee.float64) - (b_zp.to(nee.float64) if b_zp is not None else 0.0)
    y = nee.matmul(af, bf).to(a_s.dtype) * (a_s * b_s)
    return y + bias if bias is not None else y


@op("com.microsoft:DynamicQuantizeMatMul")
def _dq_matmul(ctx, node, a, b, b_s, b_zp=None, bias=None):
    """A quantized dynamically to uint8 (DynamicQuantizeLinear's rule), times int8/uint8 B less its zero point."""
    from .ops_nn import _dyn_qmm
    if b.dtype not in (nee.int8, nee.uint8):
        raise _err(node, f"B must be int8 or uint8, got {b.dtype}")
    zp = b_zp if b_zp is not None else nee.zeros((), dtype=b.dtype)
    y = _dyn_qmm(a, b, b_s.reshape(-1) if b_s.ndim else b_s, zp.reshape(-1) if zp.ndim else zp)
    return y + bias if bias is not None else y
