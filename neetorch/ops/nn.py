"""Neural-network ops: softmax, normalization, embedding, attention, dropout, distances, losses.

Fused kernels (``devices/cpu/kernels/nn.py``) back softmax/log_softmax, the row
normalizations (layer/rms/group/instance), batch-norm statistics, the embedding gather
and the nll/label-smoothing loss terms; everything else is composed from existing ops.
PyTorch semantics and signatures throughout (``torch.nn.functional`` re-exports these
from ``neetorch.nn.functional``).
"""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor
from .memory_format import run_in, suggest
from .registry import EXPORTS, Meta, OpDef, export, register, run
from .shape_rules import broadcast_shapes, wrap_dim, numel
from . import elementwise as _ew

__all__ = ["softmax", "log_softmax", "softmin", "layer_norm", "rms_norm", "group_norm", "batch_norm",
           "instance_norm", "embedding", "scaled_dot_product_attention", "dropout", "normalize",
           "cosine_similarity", "pairwise_distance", "one_hot", "cross_entropy", "nll_loss", "mse_loss", "l1_loss",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "smooth_l1_loss", "huber_loss"]


# ---------------------------------------------------------------- helpers
def _same_meta(metas, attrs):
    return [Meta(tuple(metas[0].shape), metas[0].dtype)]


def _check_float(op, t):
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(t).__name__}")
    if t._dtype.category != 2:
        raise NotImplementedError(f"{op}: expected a floating-point input, but got a tensor of dtype {t._dtype.name}")


def _as_param(op, name, t, like: Tensor, shape=None):
    """Optional weight/bias: None, or a tensor cast to ``like``'s dtype with a checked shape."""
    if t is None:
        return None
    if not isinstance(t, Tensor):
        from ..tensor.creation import tensor
        t = tensor(t, dtype=like._dtype, device=like._device)
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise RuntimeError(f"{op}: expected {name} of shape {list(shape)}, but got {name} of shape {list(t.shape)}")
    if t._dtype is not like._dtype:
        t = t.to(like._dtype)
    return t


def _check_param_dtypes(op, input, *params):
    """torch's CPU normalization kernels do not promote: every tensor parameter has the input's dtype, or (the
    "mixed" case) the input is float16/bfloat16 and every parameter is float32."""
    dts = {p._dtype for p in params if isinstance(p, Tensor)}
    if not dts or dts == {input._dtype}:
        return
    if input._dtype in _dt.LOW_FLOATS and dts == {_dt.float32}:
        return
    bad = sorted(d.name for d in dts if d is not input._dtype)
    why = "expect parameter to have scalar type of Float" if any(d not in (input._dtype, _dt.float32) for d in dts) \
        else "all inputs must share same datatype."
    raise RuntimeError(f"{op}: mixed dtype (CPU): {why} (input {input._dtype.name}, parameters {', '.join(bad)})")


def _scalar(v, like: Tensor):
    return _ew._scalar_tensor(v, like._dtype, like._device)


def _full_like_shape(shape, v, like: Tensor, dtype=None):
    from ..tensor.creation import full
    return full(tuple(shape), v, dtype=dtype or like._dtype, device=like._device)


# ---------------------------------------------------------------- softmax
def _ref_softmax(xs, attrs):
    x = xs[0].astype(np.float64)
    d = attrs["dim"] if xs[0].ndim else None
    m = np.max(x, axis=d, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(axis=d, keepdims=True)
    return [(e / s).astype(xs[0].dtype)]


def _ref_log_softmax(xs, attrs):
    x = xs[0].astype(np.float64)
    d = attrs["dim"] if xs[0].ndim else None
    m = np.max(x, axis=d, keepdims=True)
    return [(x - m - np.log(np.exp(x - m).sum(axis=d, keepdims=True))).astype(xs[0].dtype)]


SOFTMAX = register(OpDef("softmax", infer=_same_meta, reference=_ref_softmax,
                         doc="softmax along attrs['dim']; attrs['safe']: rows of all -inf give 0 (attention)"))
LOG_SOFTMAX = register(OpDef("log_softmax", infer=_same_meta, reference=_ref_log_softmax))


def _softmax_common(op, name, input, dim, dtype, safe=False):
    if dtype is not None:
        input = input.to(dtype)
    _check_float(name, input)
    if dim is None:
        raise TypeError(f"{name}() missing required argument 'dim'")
    d = wrap_dim(dim, input.ndim, name)
    return run(op, [input], {"dim": d, "safe": bool(safe)})[0]


@export
def softmax(input, dim, dtype=None):
    """``exp(x) / sum(exp(x))`` along ``dim`` (``torch.softmax``); ``dtype`` casts the input first."""
    return _softmax_common(SOFTMAX, "softmax", input, dim, dtype)


@export
def log_softmax(input, dim, dtype=None):
    """``x - log(sum(exp(x)))`` along ``dim`` (``torch.log_softmax``)."""
    return _softmax_common(LOG_SOFTMAX, "log_softmax", input, dim, dtype)


def _safe_softmax(input, dim):
    """softmax whose rows of only ``-inf`` give zeros (what torch's attention uses)."""
    return _softmax_common(SOFTMAX, "softmax", input, dim, None, safe=True)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    return softmax(-input, _implicit_dim(input, dim, "softmin"))


def _implicit_dim(input, dim, name):
    if dim is not None:
        return dim
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X "
                  f"as an argument.", UserWarning, stacklevel=3)
    return 0 if input.ndim in (0, 1, 3) else 1


# ---------------------------------------------------------------- row normalizations
LAYER_NORM = register(OpDef("layer_norm", infer=_same_meta))
RMS_NORM = register(OpDef("rms_norm", infer=_same_meta))
GROUP_NORM = register(OpDef("group_norm", infer=_same_meta))


def _norm_shape(op, input, normalized_shape):
    # torch's argument parser: a sequence of ints (a bare int, a Tensor, float or bool elements are refused)
    if not isinstance(normalized_shape, (list, tuple)):
        raise TypeError(f"{op}(): argument 'normalized_shape' (position 2) must be tuple of ints, not "
                        f"{type(normalized_shape).__name__}")
    for s in normalized_shape:
        ok = (isinstance(s, Tensor) and s.ndim == 0 and s._dtype.category == 1) or \
            (isinstance(s, numbers.Integral) and not isinstance(s, (bool, np.bool_)))
        if not ok:
            raise TypeError(f"{op}(): argument 'normalized_shape' (position 2) must be tuple of ints, but found "
                            f"element of type {type(s).__name__}")
    ns = tuple(int(s) for s in normalized_shape)
    k = len(ns)
    if k == 0:
        raise RuntimeError(f"{op}: Expected normalized_shape to be at least 1-dimensional, i.e., containing at "
                           f"least one element, but got normalized_shape = []")
    if input.ndim < k or tuple(input.shape[input.ndim - k:]) != ns:
        raise RuntimeError(f"{op}: Given normalized_shape={list(ns)}, expected input with shape "
                           f"[*, {', '.join(map(str, ns))}], but got input of size{list(input.shape)}")
    return ns


@export(method=False)
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Layer normalization over the trailing ``normalized_shape`` dims (``torch.nn.functional.layer_norm``)."""
    _check_float("layer_norm", input)
    ns = _norm_shape("layer_norm", input, normalized_shape)
    _check_param_dtypes("layer_norm", input, weight, bias)
    w = _as_param("layer_norm", "weight", weight, input, ns)
    b = _as_param("layer_norm", "bias", bias, input, ns)
    ins = [input] + [t for t in (w, b) if t is not None]
    return run(LAYER_NORM, ins, {"n": numel(ns), "eps": float(eps), "has_weight": w is not None,
                                 "has_bias": b is not None})[0]


@export(method=False)
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """RMS normalization (``torch.nn.functional.rms_norm``); ``eps=None``: the float32/float64 machine epsilon."""
    _check_float("rms_norm", input)
    ns = _norm_shape("rms_norm", input, normalized_shape)
    w = _as_param("rms_norm", "weight", weight, input, ns)
    if eps is None:
        eps = float(np.finfo(np.float64 if input._dtype is _dt.float64 else np.float32).eps)
    ins = [input] + ([w] if w is not None else [])
    return run(RMS_NORM, ins, {"n": numel(ns), "eps": float(eps), "has_weight": w is not None})[0]


@export(method=False)
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Group normalization of ``(N, C, *)`` (``torch.nn.functional.group_norm``)."""
    _check_float("group_norm", input)
    if input.ndim < 2:
        raise RuntimeError(f"group_norm: Expected at least 2 dimensions for input tensor but received {input.ndim}")
    C = input.shape[1]
    G = int(num_groups)
    if G <= 0 or C % G:
        raise RuntimeError(f"group_norm: Expected number of channels in input to be divisible by num_groups, but got "
                           f"input of shape {list(input.shape)} and num_groups={num_groups}")
    _check_param_dtypes("group_norm", input, weight, bias)
    w = _as_param("group_norm", "weight", weight, input, (C,))
    b = _as_param("group_norm", "bias", bias, input, (C,))
    return _group_norm_run(input, G, w, b, eps, suggest(input))   # (torch: the input's suggested memory format)


def _group_norm_run(input, G, w, b, eps, order=None):
    ins = [input] + [t for t in (w, b) if t is not None]
    return run_in(GROUP_NORM, ins, {"groups": G, "eps": float(eps), "has_weight": w is not None,
                                    "has_bias": b is not None}, order)[0]


def _bn_stats_infer(metas, attrs):
    x = metas[0]
    return [Meta((x.shape[1],), x.dtype), Meta((x.shape[1],), x.dtype)]


BATCH_NORM_STATS = register(OpDef("batch_norm_stats", infer=_bn_stats_infer, nout=2,
                                  doc="per-channel (dim 1) mean and biased variance"))


def _chan_shape(input):
    return (input.shape[1],) + (1,) * (input.ndim - 2)


def _affine_apply(input, mean, var, weight, bias, eps):
    """(x - mean) / sqrt(var + eps) * w + b per channel, as one fused multiply-add pass (float16/bfloat16: the
    per-channel factors and the pass in float32, rounded once, as torch's CPU kernel)."""
    low = input._dtype if input._dtype in _dt.LOW_FLOATS else None
    if low is not None:
        mean, var = mean.to(_dt.float32), var.to(_dt.float32)
        weight = weight.to(_dt.float32) if weight is not None else None
        bias = bias.to(_dt.float32) if bias is not None else None
        return _affine_apply(input.to(_dt.float32), mean, var, weight, bias, eps).to(low)
    scale = (var + float(eps)).rsqrt()
    if weight is not None:
        scale = scale * weight
    shift = -mean * scale
    if bias is not None:
        shift = shift + bias
    cs = _chan_shape(input)
    return _ew.apply(_ew._addcmul, shift.reshape(cs), input, scale.reshape(cs), 1)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Batch normalization (``torch.nn.functional.batch_norm``): running statistics when not training; batch
    statistics (and an in-place running-stat update) when training."""
    _check_float("batch_norm", input)
    _check_momentum("batch_norm", momentum)
    if input.ndim < 2:
        raise ValueError(f"batch_norm: expected 2D or more input (got {input.ndim}D input)")
    C = input.shape[1]
    _check_param_dtypes("batch_norm", input, weight, bias, running_mean, running_var)
    w = _as_param("batch_norm", "weight", weight, input, (C,))
    b = _as_param("batch_norm", "bias", bias, input, (C,))
    if not training:
        if running_mean is None or running_var is None:
            raise RuntimeError("batch_norm: running_mean and running_var must be defined in evaluation mode")
        rm = _as_param("batch_norm", "running_mean", running_mean, input, (C,))
        rv = _as_param("batch_norm", "running_var", running_var, input, (C,))
        return _affine_apply(input, rm, rv, w, b, eps)
    cnt = input.numel() // C if C else 0
    if cnt == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                         f"{list(input.shape)}")
    if input.numel() == 0:              # torch: an empty batch gives an empty result, running stats untouched
        return input * 1
    # (float16/bfloat16: the statistics in float32, as torch's CPU kernel; they are not rounded to the input's
    # dtype before the running-stat update or the normalization)
    stats_in = input.to(_dt.float32) if input._dtype in _dt.LOW_FLOATS else input
    mean, var = run(BATCH_NORM_STATS, [stats_in], {})
    _update_running(running_mean, running_var, mean, var, cnt, momentum)
    return _affine_apply(input, mean, var, w, b, eps)


def _check_momentum(op, momentum):
    # the functional form takes a float; the modules' momentum=None (a cumulative moving average) is resolved by
    # the module into a per-step factor before it calls here
    if not isinstance(momentum, numbers.Real) or isinstance(momentum, (bool, np.bool_)):
        raise TypeError(f"{op}(): argument 'momentum' (position 7) must be float, not {type(momentum).__name__}")


def _update_running(running_mean, running_var, mean, var, cnt, momentum):
    m = float(momentum)

    def upd(run_stat, batch_stat):
        # (float16/bfloat16 running stats: updated in float32 and rounded once, as torch's CPU kernel)
        low = run_stat._dtype if run_stat._dtype in _dt.LOW_FLOATS else None
        cdt = _dt.float32 if low is not None else run_stat._dtype
        r = run_stat.to(cdt) * (1.0 - m) + batch_stat.to(cdt) * m
        run_stat.copy_(r if low is None else r.to(low))
    if running_mean is not None:
        upd(running_mean, mean)
    if running_var is not None:
        upd(running_var, var * (cnt / (cnt - 1)) if cnt > 1 else var)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """Instance normalization of ``(N, C, *)`` (``torch.nn.functional.instance_norm``)."""
    _check_float("instance_norm", input)
    _check_momentum("instance_norm", momentum)
    if input.ndim < 2:
        raise ValueError(f"instance_norm: expected 2D or more input (got {input.ndim}D input)")
    N, C = input.shape[0], input.shape[1]
    _check_param_dtypes("instance_norm", input, weight, bias)
    w = _as_param("instance_norm", "weight", weight, input, (C,))
    b = _as_param("instance_norm", "bias", bias, input, (C,))
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise RuntimeError("instance_norm: Expected running_mean and running_var to be defined when "
                               "use_input_stats is false")
        rm = _as_param("instance_norm", "running_mean", running_mean, input, (C,))
        rv = _as_param("instance_norm", "running_var", running_var, input, (C,))
        return _affine_apply(input.contiguous(), rm, rv, w, b, eps)   # (torch: a row-major result)
    HW = input.numel() // (N * C) if N * C else 0
    if HW <= 1 and input.numel():
        raise ValueError(f"Expected more than 1 spatial element when training, got input size {list(input.shape)}")
    if running_mean is not None or running_var is not None:
        x3 = input.reshape(1, N * C, HW)
        mean, var = run(BATCH_NORM_STATS, [x3], {})
        mean_c = _mean0(mean.reshape(N, C))
        var_c = _mean0(var.reshape(N, C))
        _update_running(running_mean, running_var, mean_c, var_c, HW, momentum)
    return _group_norm_run(input, C, w, b, eps)


def _mean0(t):
    acc = t.select(0, 0)
    for i in range(1, t.shape[0]):
        acc = acc + t.select(0, i)
    return acc / t.shape[0]


# ---------------------------------------------------------------- embedding
def _embedding_infer(metas, attrs):
    w, idx = metas
    return [Meta(tuple(idx.shape) + (w.shape[1],), w.dtype)]


EMBEDDING = register(OpDef("embedding", infer=_embedding_infer,
                           reference=lambda xs, attrs: [xs[0][xs[1]]]))
EMBEDDING_RENORM = register(OpDef("embedding_renorm_", infer=lambda metas, attrs: [metas[0]]))


def _embedding_impl(input, weight, padding_idx=None, max_norm=None, norm_type=2.0):
    if not isinstance(input, Tensor):
        from ..tensor.creation import tensor
        input = tensor(input, device=weight._device)
    if input._dtype not in (_dt.int64, _dt.int32):
        raise RuntimeError(f"embedding: Expected tensor for argument #1 'indices' to have one of the following scalar "
                           f"types: Long, Int; but got {input._dtype.name} instead")
    if weight.ndim != 2:
        raise RuntimeError(f"embedding: 'weight' must be 2-D, got shape {list(weight.shape)}")
    V = weight.shape[0]
    if padding_idx is not None:
        if padding_idx > 0 and padding_idx >= V:
            raise AssertionError(f"Padding_idx must be within num_embeddings (padding_idx={padding_idx}, "
                                 f"num_embeddings={V})")
        if padding_idx < 0 and padding_idx < -V:
            raise AssertionError(f"Padding_idx must be within num_embeddings (padding_idx={padding_idx}, "
                                 f"num_embeddings={V})")
    if max_norm is not None:
        run(EMBEDDING_RENORM, [weight, input], {"max_norm": float(max_norm), "norm_type": float(norm_type)},
            out=[weight])
    return run(EMBEDDING, [weight, input], {})[0]


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """Rows of ``weight`` picked by integer ``input`` (``torch.nn.functional.embedding``); indices outside
    ``[0, num_embeddings)`` raise ``IndexError``. ``padding_idx`` only matters for gradients."""
    return _embedding_impl(input, weight, padding_idx, max_norm, norm_type)


@export(name="embedding", method=False)
def _torch_embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """``torch.embedding(weight, indices, ...)`` (note torch's argument order)."""
    return _embedding_impl(indices, weight)


# ---------------------------------------------------------------- dropout
def _check_p(p):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _keep_mask(input, p, shape):
    """Float mask of ``shape``: 1/(1-p) with probability 1-p, else 0 (the default generator)."""
    from ..tensor.creation import rand, rand_like
    dt = input._dtype if input._dtype is _dt.float64 else _dt.float32
    # (the input's own shape: rand_like, so that a traced dropout's mask follows a dynamic dim; same draws)
    u = rand_like(input, dtype=dt) if tuple(shape) == tuple(input.shape) else \
        rand(tuple(shape), dtype=dt, device=input._device)
    return _ew.apply(_ew._where, u < (1.0 - p), 1.0 / (1.0 - p), 0.0)


def _dropout_impl(input, p, training, inplace, mask_shape=None):
    _check_p(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:
        r = input * 0
    else:
        if input._dtype.category < 2:   # torch scales by 1 / (1 - p) in float: not castable back to an integer
            from .linalg import _CAP
            raise RuntimeError(f"result type Float can't be cast to the desired output type "
                               f"{_CAP.get(input._dtype.name, input._dtype.name)} (dropout of an integer tensor)")
        mask = _keep_mask(input, p, tuple(input.shape) if mask_shape is None else mask_shape)
        r = input * mask.to(input._dtype)
    if inplace:
        return input.copy_(r)
    return r


@export(method=False)
def dropout(input, p, train):
    """``torch.dropout(input, p, train)``."""
    return _dropout_impl(input, float(p), bool(train), False)


def _feature_dropout(name, input, p, training, inplace, batched_ndim):
    """torch's channel-wise dropouts: ``dropout1d`` takes 2-D / 3-D input only; ``dropout2d`` / ``dropout3d`` warn
    on other ranks and go on; ``dropout1d`` / ``dropout3d`` treat a rank other than the batched one as unbatched
    (one mask entry per channel = dim 0) while ``dropout2d`` never does (a 3-D input is (N, C, L), as in torch).
    One keep / drop draw per (N, C) slice."""
    _check_p(p)
    nd = input.ndim
    if nd not in (batched_ndim - 1, batched_ndim):
        if name == "dropout1d":
            raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {nd}D input. Note that dropout1d "
                               f"exists to provide channel-wise dropout on inputs with 1 spatial dimension, a channel "
                               f"dimension, and an optional batch dimension (i.e. 2D or 3D inputs).")
        warnings.warn(f"{name}: Received a {nd}-D input to {name}, which is deprecated and will result in an error "
                      f"in a future release.", stacklevel=3)
    unbatched = name != "dropout2d" and nd != batched_ndim
    full = ((1,) if unbatched else ()) + tuple(input.shape)
    if training and len(full) < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    shape = full[:2] + (1,) * (len(full) - 2)
    return _dropout_impl(input, p, training, inplace, shape[1:] if unbatched else shape)


_ALPHA = 1.7580993408473766


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Alpha dropout (keeps SELU's self-normalization) (``torch.nn.functional.alpha_dropout``)."""
    _check_p(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:
        r = input * 0
    else:
        from ..tensor.creation import rand
        u = rand(tuple(input.shape), dtype=_dt.float64 if input._dtype is _dt.float64 else _dt.float32,
                 device=input._device)
        keep = (u < (1.0 - p)).to(input._dtype)
        a = 1.0 / math.sqrt((_ALPHA * _ALPHA * p + 1) * (1 - p))
        r = input * keep * a + (keep - 1.0) * (_ALPHA * a) + _ALPHA * a * p
    return input.copy_(r) if inplace else r


# ---------------------------------------------------------------- attention
def _matmul(a, b):
    mm = EXPORTS.get("matmul")
    if mm is None:
        raise RuntimeError("scaled_dot_product_attention needs nee.matmul (neetorch.ops.linalg)")
    return mm[0](a, b)


def _causal_mask(L, S, dev):
    from ..tensor.creation import arange
    i = arange(L, device=dev).reshape(L, 1)
    j = arange(S, device=dev).reshape(1, S)
    return j <= i


def _repeat_heads(t, rep):
    # (..., H, S, E) -> (..., H*rep, S, E) with each head repeated ``rep`` times (repeat_interleave on dim -3)
    sh = tuple(t.shape)
    e = t.unsqueeze(-3).expand(*sh[:-2], rep, *sh[-2:])
    return e.reshape(*sh[:-3], sh[-3] * rep, *sh[-2:])


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, _flash_low=None):
    """``softmax(q @ k^T * scale + mask) @ v`` (``torch.nn.functional.scaled_dot_product_attention``).

    Boolean masks: True means attend; float masks are added.  ``is_causal`` uses the top-left aligned
    lower-triangular mask.  Rows with every position masked give zeros (like torch).
    """
    for n, t in (("query", query), ("key", key), ("value", value)):
        _check_float("scaled_dot_product_attention", t)
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise RuntimeError("scaled_dot_product_attention: expected query, key and value of at least 2 dims")
    if is_causal and attn_mask is not None:
        # documented by PyTorch ("An error is thrown if both attn_mask and is_causal are set"), though some torch
        # builds' CPU kernel combines the two
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    if isinstance(attn_mask, Tensor) and attn_mask._dtype not in (_dt.bool_, _dt.float32, query._dtype):
        raise RuntimeError(f"scaled_dot_product_attention: Expected attn_mask dtype to be bool or float or to match "
                           f"query dtype, but got attn_mask.dtype: {attn_mask._dtype.name} and query.dtype: "
                           f"{query._dtype.name}")
    E = query.shape[-1]
    if key.shape[-1] != E:
        raise RuntimeError(f"scaled_dot_product_attention: query and key must have the same embedding size, got "
                           f"{E} and {key.shape[-1]}")
    if key.shape[-2] != value.shape[-2]:
        raise RuntimeError(f"scaled_dot_product_attention: key and value must have the same sequence length, got "
                           f"{key.shape[-2]} and {value.shape[-2]}")
    if query._dtype in _dt.LOW_FLOATS and key._dtype is query._dtype and value._dtype is query._dtype:
        # torch's CPU kernel for float16 / bfloat16 works in float32 and rounds the output once
        f32 = _dt.float32
        # (4-D inputs that its flash kernel takes: the unnormalised probabilities are rounded to the input dtype
        # before the product with value, then divided by their float32 sum)
        m = attn_mask.to(f32) if isinstance(attn_mask, Tensor) and attn_mask._dtype is query._dtype else attn_mask
        flash = query.ndim == key.ndim == value.ndim == 4 and dropout_p == 0.0 and \
            query.shape[-1] == key.shape[-1] == value.shape[-1] and query.shape[0] == key.shape[0] == value.shape[0] \
            and (enable_gqa or query.shape[1] == key.shape[1] == value.shape[1]) and query.stride(-1) == 1 \
            and key.stride(-1) == 1 and value.stride(-1) == 1
        return scaled_dot_product_attention(query.to(f32), key.to(f32), value.to(f32), m, dropout_p, is_causal,
                                            scale, enable_gqa, _flash_low=query._dtype if flash else None
                                            ).to(query._dtype)
    L, S = query.shape[-2], key.shape[-2]
    sc = 1.0 / math.sqrt(E) if scale is None else float(scale)
    if enable_gqa and query.ndim >= 3 and key.ndim >= 3:
        Hq, Hk, Hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if Hq % Hk or Hq % Hv:
            raise RuntimeError(f"scaled_dot_product_attention: number of heads in key/value ({Hk}/{Hv}) must "
                               f"divide the number of heads in query ({Hq})")
        if Hk != Hq:
            key = _repeat_heads(key, Hq // Hk)
        if Hv != Hq:
            value = _repeat_heads(value, Hq // Hv)
    q = query * sc if sc != 1.0 else query
    attn = _matmul(q, key.transpose(-2, -1))
    if is_causal:
        attn = _ew.masked_fill(attn, _causal_mask(L, S, query._device).logical_not(), -math.inf)
    if attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            from ..tensor.creation import tensor
            attn_mask = tensor(attn_mask, device=query._device)
        if attn_mask._dtype is _dt.bool_:
            keep = attn_mask
            if tuple(broadcast_shapes(tuple(attn.shape), tuple(keep.shape), op="scaled_dot_product_attention")) \
                    != tuple(attn.shape):
                attn = attn.expand(*broadcast_shapes(tuple(attn.shape), tuple(keep.shape)))
            attn = _ew.apply(_ew._where, keep, attn, -math.inf)
        else:
            attn = attn + attn_mask.to(attn._dtype)
    if _flash_low is not None:
        mx = attn.amax(-1, keepdim=True)
        mx = _ew.apply(_ew._where, mx == -math.inf, 0.0, mx)
        p = (attn - mx).exp()
        den = p.sum(-1, keepdim=True)
        out = _matmul(p.to(_flash_low).to(attn._dtype), value)
        return _ew.apply(_ew._where, den == 0, 0.0, out / den)
    w = _safe_softmax(attn, -1)
    if dropout_p > 0.0:
        w = _dropout_impl(w, float(dropout_p), True, False)
    return _matmul(w, value)


# ---------------------------------------------------------------- private reductions
# (a weighted class-sum kernel; independent of the general reduction ops)
def _nll_terms_infer(metas, attrs):
    lp, tgt = metas[0], metas[1]
    return [Meta(tuple(tgt.shape), lp.dtype), Meta(tuple(tgt.shape), lp.dtype), Meta((3,), _dt.float64)]


NLL_TERMS = register(OpDef("nll_loss_terms", infer=_nll_terms_infer, nout=3,
                           doc="per-element -w[t]*lp[t], -sum_c w[c]*lp[c] and their totals"))


def _nll_terms(lp3, tgt2, weight, ignore_index, smooth):
    """lp3 (N, C, K), tgt2 (N, K) int64 -> (nll (N, K), smooth (N, K), totals (3,) float64)."""
    ins = [lp3, tgt2] + ([weight] if weight is not None else [])
    return run(NLL_TERMS, ins, {"ignore_index": int(ignore_index), "smooth": bool(smooth),
                                "has_weight": weight is not None})


def _zeros_idx(shape, dev):
    from ..tensor.creation import zeros
    return zeros(tuple(shape), dtype=_dt.int64, device=dev)


def _sum_dim(x, dim, keepdim=False, weight=None):
    """sum over ``dim`` (optionally weighted along it), accumulated in float64."""
    x = x if x._dtype.category == 2 else x.to(_dt.get_default_dtype())
    if x.ndim == 0:
        return x.clone()
    d = wrap_dim(dim, x.ndim, "sum")
    sh = tuple(x.shape)
    N, C, K = numel(sh[:d]), sh[d], numel(sh[d + 1:])
    x3 = x.reshape(N, C, K)
    _, s, _ = _nll_terms(-x3, _zeros_idx((N, K), x._device), weight, -1, True)
    out = s.reshape(*sh[:d], *sh[d + 1:])
    return out.unsqueeze(d) if keepdim else out


def _sum_all(x):
    x = x if x._dtype.category == 2 else x.to(_dt.get_default_dtype())
    n = x.numel()
    _, _, tot = _nll_terms(-x.reshape(1, n, 1), _zeros_idx((1, 1), x._device), None, -1, True)
    return tot.select(0, 1).to(x._dtype)


def _mean_all(x):
    x = x if x._dtype.category == 2 else x.to(_dt.get_default_dtype())
    n = x.numel()
    _, _, tot = _nll_terms(-x.reshape(1, n, 1), _zeros_idx((1, 1), x._device), None, -1, True)
    return (tot.select(0, 1) / n if n else tot.select(0, 1) * math.nan).to(x._dtype)


def _max_dim_abs(x, dim, keepdim):
    amax = EXPORTS.get("amax")
    if amax is not None:
        return amax[0](x.abs(), dim, keepdim)
    from ..tensor.creation import from_numpy
    a = np.abs(x.numpy(force=True)).max(axis=dim, keepdims=keepdim)
    return from_numpy(np.ascontiguousarray(a)).to(x._device)


def _vector_norm(x, p, dim, keepdim):
    if x._dtype.category == 3:   # a norm of complex values is that norm of their moduli
        x = x.abs()
    if x._dtype in _dt.LOW_FLOATS:
        # torch.linalg.vector_norm: float16 / bfloat16 squares and sums in float32, rounded once
        return EXPORTS["vector_norm"][0](x, p, dim, keepdim)
    if p == 2:
        return _sum_dim(x * x, dim, keepdim).sqrt()
    if p == 1:
        return _sum_dim(x.abs(), dim, keepdim)
    if p == math.inf:
        return _max_dim_abs(x, dim, keepdim)
    if p == 0:
        return _sum_dim((x != 0).to(x._dtype), dim, keepdim)
    return _sum_dim(x.abs() ** p, dim, keepdim) ** (1.0 / p)


# ---------------------------------------------------------------- distances
def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """``input / max(||input||_p, eps)`` along ``dim`` (``torch.nn.functional.normalize``)."""
    _check_float("normalize", input)
    d = wrap_dim(dim, input.ndim, "normalize")
    denom = _ew.clamp_min(_vector_norm(input, float(p), d, True), eps)
    r = input / denom
    return out.copy_(r) if out is not None else r


@export(method=False)
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """Cosine similarity along ``dim`` after broadcasting (``torch.nn.functional.cosine_similarity``)."""
    shape = broadcast_shapes(tuple(x1.shape), tuple(x2.shape), op="cosine_similarity")
    if x1._dtype.category != 2 and x2._dtype.category != 2:
        raise RuntimeError(f"cosine_similarity: expected common dtype to be floating point, yet common dtype is "
                           f"{_dt.promote_types(x1._dtype, x2._dtype).name}")
    # like torch: an integer / bool operand is cast to the common dtype, a floating one keeps its own
    common = _dt.promote_types(x1._dtype, x2._dtype)
    x1 = x1 if x1._dtype.category == 2 else x1.to(common)
    x2 = x2 if x2._dtype.category == 2 else x2.to(common)
    x1 = x1.expand(*shape) if tuple(x1.shape) != shape else x1
    x2 = x2.expand(*shape) if tuple(x2.shape) != shape else x2
    d = wrap_dim(dim, len(shape), "cosine_similarity")
    n1 = _ew.clamp_min(_vector_norm(x1, 2, d, True), eps)
    n2 = _ew.clamp_min(_vector_norm(x2, 2, d, True), eps)
    return _sum_dim((x1 / n1) * (x2 / n2), d)


@export(method=False)
def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``||x1 - x2 + eps||_p`` over the last dim (``torch.nn.functional.pairwise_distance``)."""
    nd = max(x1.ndim, x2.ndim)
    diff = x1 - x2 + eps
    if nd == 0:
        return diff.abs()
    return _vector_norm(diff, float(p), nd - 1, keepdim)


def one_hot(tensor, num_classes=-1):
    """int64 one-hot encoding with a new last dim (``torch.nn.functional.one_hot``)."""
    if tensor._dtype is not _dt.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    a = tensor.numpy(force=True)
    if num_classes == -1:
        if a.size == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(a.max()) + 1
    if a.size:
        if int(a.min()) < 0:
            raise RuntimeError("Class values must be non-negative.")
        if int(a.max()) >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    from ..tensor.creation import arange
    cls = arange(int(num_classes), device=tensor._device)
    return (tensor.unsqueeze(-1) == cls).to(_dt.int64)


# ---------------------------------------------------------------- losses
def _legacy_reduction(size_average, reduce, reduction):
    if size_average is None and reduce is None:
        return reduction
    warnings.warn("size_average and reduce args will be deprecated, please use reduction='none' instead.",
                  UserWarning, stacklevel=3)
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    if reduction == "mean":
        return _mean_all(loss)
    if reduction == "sum":
        # (an integer loss - l1_loss of integers - sums to int64 like torch's sum)
        return _sum_all(loss) if loss._dtype.category == 2 else loss.sum()
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _check_reduction(reduction, extra=()):
    if reduction not in ("none", "mean", "sum") + tuple(extra):
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _nd_view(input, target, op):
    """input (N, C, *) / (C,) and target (N, *) / () -> (lp3 (N, C, K), tgt2 (N, K), out shape)."""
    if input.ndim == 0:
        raise ValueError(f"{op}: input tensor should be 1D or more, got 0-d")
    if input.ndim == 1:
        # torch: a 0-d target, or a 1-D target of one element (both give a 0-d result)
        if target.ndim > 1:
            raise RuntimeError(f"{op}: expected a 0-d target for a 1-D input, got target of shape "
                               f"{list(target.shape)}")
        if target.ndim == 1 and target.shape[0] != 1:
            raise RuntimeError(f"{op}: For 1D input, 1D target must have size 1, but got target size: "
                               f"{target.shape[0]}")
        return input.reshape(1, input.shape[0], 1), target.reshape(1, 1), ()
    N, C = input.shape[0], input.shape[1]
    if target.ndim == 0 or target.shape[0] != N:
        raise ValueError(f"Expected input batch_size ({N}) to match target batch_size "
                         f"({target.shape[0] if target.ndim else 0}).")
    if tuple(target.shape[1:]) != tuple(input.shape[2:]):
        raise RuntimeError(f"{op}: expected target of shape {[N] + list(input.shape[2:])}, got "
                           f"{list(target.shape)}")
    K = numel(input.shape[2:])
    return input.reshape(N, C, K), target.reshape(N, K), tuple(target.shape)


def _class_weight(weight, input, C, op):
    if weight is None:
        return None
    w = _as_param(op, "weight", weight, input)
    if w.numel() != C:
        raise RuntimeError(f"{op}: weight tensor should be defined either for all {C} classes or no classes but "
                           f"got weight tensor of shape: {list(w.shape)}")
    return w.reshape(C)


def _check_weight_dtype(weight, input):
    """torch's nll_loss kernels read ``weight`` as the input's scalar type: any other dtype is refused."""
    if isinstance(weight, Tensor) and weight._dtype is not input._dtype:
        from .indexing import _TNAME
        raise RuntimeError(f"expected scalar type {_TNAME.get(input._dtype.name, input._dtype.name)} but found "
                           f"{_TNAME.get(weight._dtype.name, weight._dtype.name)}")


def _index_target(target, op):
    if target._dtype not in (_dt.int64, _dt.uint8):     # torch: "expected target dtype to be Long or Byte"
        raise RuntimeError(f"{op}: expected target dtype to be Long or Byte (class indices), but got "
                           f"{target._dtype.name}")
    return target if target._dtype is _dt.int64 else target.to(_dt.int64)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """Negative log likelihood over class dim 1 (``torch.nn.functional.nll_loss``)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    _check_float("nll_loss", input)
    target = _index_target(target, "nll_loss")
    _check_weight_dtype(weight, input)
    lp3, t2, oshape = _nd_view(input, target, "nll_loss")
    w = _class_weight(weight, input, lp3.shape[1], "nll_loss")
    nll, _, tot = _nll_terms(lp3, t2, w, ignore_index, False)
    return _finish_nll(nll, tot, oshape, reduction, input._dtype)


def _finish_nll(nll, tot, oshape, reduction, dt, col=0):
    if reduction == "none":
        return nll.reshape(*oshape) if oshape else nll.reshape(())
    s = tot.select(0, col)
    if reduction == "sum":
        return s.to(dt)
    return (s / tot.select(0, 2)).to(dt)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    """Cross entropy over class dim 1 with class indices or class probabilities
    (``torch.nn.functional.cross_entropy``)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    _check_float("cross_entropy", input)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    cdim = 0 if input.ndim == 1 else 1
    C = input.shape[cdim]
    lp = log_softmax(input, cdim)
    if target._dtype.category == 2:
        # class probabilities
        if tuple(target.shape) != tuple(input.shape):
            if input.ndim >= 2 and target.ndim >= 1 and target.shape[0] != input.shape[0]:  # (torch: ValueError)
                raise ValueError(f"cross_entropy: Expected input batch_size ({input.shape[0]}) to match target "
                                 f"batch_size ({target.shape[0]}).")
            raise RuntimeError(f"cross_entropy: expected target of shape {list(input.shape)} (class probabilities), "
                               f"got {list(target.shape)}")
        if ignore_index >= 0:  # (torch's check: any non-negative index, the -100 default excepted)
            raise RuntimeError("cross_entropy: ignore_index is not supported for floating point target (class "
                               "probabilities)")
        t = target                                      # (torch promotes: float64 target -> float64 loss)
        if label_smoothing > 0:
            t = t * (1.0 - label_smoothing) + label_smoothing / C
        x = -(lp * t)
        if isinstance(weight, Tensor) and weight._dtype is not x._dtype:
            # (torch: -(input * target * weight) with type promotion: a float32 weight of a float16 input gives a
            # float32 loss)
            x = x.to(_dt.promote_types(x._dtype, weight._dtype))
        w = _class_weight(weight, x, C, "cross_entropy")
        loss = _sum_dim(x, cdim, weight=w)
        if reduction == "none":
            return loss
        if reduction == "sum":
            return _sum_all(loss)
        return _sum_all(loss) / (input.numel() // C if C else 0)
    target = _index_target(target, "cross_entropy")
    _check_weight_dtype(weight, input)
    lp3, t2, oshape = _nd_view(lp, target, "cross_entropy")
    w = _class_weight(weight, input, C, "cross_entropy")
    smooth = label_smoothing > 0
    nll, sm, tot = _nll_terms(lp3, t2, w, ignore_index, smooth)
    r = _finish_nll(nll, tot, oshape, reduction, input._dtype)
    if not smooth:
        return r
    s = _finish_nll(sm, tot, oshape, reduction, input._dtype, col=1)
    return r * (1.0 - label_smoothing) + s * (label_smoothing / C)


def _pointwise_loss(name, input, target, fn, reduction, weight=None, mean_by_weight=False):
    if tuple(target.shape) != tuple(input.shape):
        warnings.warn(f"Using a target size ({tuple(target.shape)}) that is different to the input size "
                      f"({tuple(input.shape)}). This will likely lead to incorrect results due to broadcasting. "
                      f"Please ensure they have the same size.", UserWarning, stacklevel=3)
    _check_reduction(reduction)
    if weight is not None and tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    loss = fn(input, target)
    if weight is not None:
        loss = loss * weight
        if mean_by_weight and reduction == "mean":
            return _sum_all(loss) / _sum_all(weight)
    return _reduce(loss, reduction)


def _float_loss(op, input, target):
    """torch's mse / smooth_l1 / huber kernels take floating-point operands only (after promotion)."""
    if isinstance(input, Tensor) and isinstance(target, Tensor) and input._dtype.category != 2 and \
            target._dtype.category != 2:
        raise NotImplementedError(f"{op}: not implemented for integer / bool operands ({input._dtype.name}, "
                                  f"{target._dtype.name}): expected a floating-point input or target")


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean squared error (``torch.nn.functional.mse_loss``)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _float_loss("mse_loss", input, target)
    return _pointwise_loss("mse_loss", input, target, lambda a, b: (a - b) * (a - b), reduction, weight, True)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean absolute error (``torch.nn.functional.l1_loss``)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if reduction == "mean":
        _float_loss("l1_loss (reduction='mean')", input, target)
    return _pointwise_loss("l1_loss", input, target, lambda a, b: (a - b).abs(), reduction, weight, True)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """Smooth L1 (``torch.nn.functional.smooth_l1_loss``)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    _float_loss("smooth_l1_loss", input, target)

    def f(a, b):
        d = (a - b).abs()
        if beta == 0.0:
            return d
        return _ew.where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta)
    return _pointwise_loss("smooth_l1_loss", input, target, f, reduction)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """Huber loss (``torch.nn.functional.huber_loss``)."""
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    if isinstance(input, Tensor) and input._dtype.category != 2:
        raise NotImplementedError(f"huber_loss: expected a floating-point input, got {input._dtype.name}")

    def f(a, b):
        d = (a - b).abs()
        return _ew.where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta)
    if isinstance(target, Tensor) and input._dtype.category == 2 and target._dtype.category == 2:
        target = target.to(input._dtype)  # torch: huber_loss keeps the input's dtype
    return _pointwise_loss("huber_loss", input, target, f, reduction, weight)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """Binary cross entropy on probabilities (``torch.nn.functional.binary_cross_entropy``)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({tuple(target.shape)}) that is different to the input size "
                         f"({tuple(input.shape)}) is deprecated. Please ensure they have the same size.")
    _check_float("binary_cross_entropy", input)
    if target._dtype is not input._dtype:
        raise RuntimeError(f"binary_cross_entropy: Found dtype {target._dtype.name} for the target but expected "
                           f"{input._dtype.name} (the input's dtype)")
    a = input.numpy(force=True)
    if a.size and not bool(((a >= 0) & (a <= 1)).all()):
        raise RuntimeError("all elements of input should be between 0 and 1")
    t = target.to(input._dtype)
    lx = _ew.clamp_min(input.log(), -100.0)
    l1x = _ew.clamp_min((1.0 - input).log(), -100.0)
    loss = -(t * lx + (1.0 - t) * l1x)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """Sigmoid + binary cross entropy, numerically stable
    (``torch.nn.functional.binary_cross_entropy_with_logits``)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({tuple(target.shape)}) must be the same as input size "
                         f"({tuple(input.shape)})")
    _check_float("binary_cross_entropy_with_logits", input)
    if target._dtype.category != 2:
        raise RuntimeError(f"binary_cross_entropy_with_logits: result type {input._dtype.name} can't be cast to the "
                           f"desired output type {target._dtype.name} (the target's dtype)")
    t = target
    sp = -EXPORTS["logsigmoid"][0](input)  # softplus(-x)
    if pos_weight is not None:
        lw = (pos_weight - 1.0) * t + 1.0
        loss = (1.0 - t) * input + lw * sp
    else:
        loss = (1.0 - t) * input + sp
    if weight is not None:
        loss = loss * weight
    if loss._dtype is not target._dtype:
        loss = loss.to(target._dtype)  # torch computes into the target's dtype
    return _reduce(loss, reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Kullback-Leibler divergence, ``input`` in log space (``torch.nn.functional.kl_div``)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction, ("batchmean",))
    for nm, v in (("input", input), ("target", target)):
        if not isinstance(v, Tensor):
            raise TypeError(f"kl_div(): argument '{nm}' must be Tensor, not {type(v).__name__}")
    if input._dtype.category == 3 or target._dtype.category == 3:
        raise RuntimeError(f"kl_div: Complex inputs not supported (got {input._dtype.name} and "
                           f"{target._dtype.name})")
    if input._dtype.category < 2 or target._dtype.category < 2:
        raise RuntimeError(f"kl_div: Integral inputs not supported (got {input._dtype.name} and "
                           f"{target._dtype.name})")
    if reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                      UserWarning, stacklevel=2)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        loss = EXPORTS["xlogy"][0](target, target) - target * input
    if reduction == "batchmean":
        if input.ndim == 0:
            return _sum_all(loss)
        return _sum_all(loss) / input.shape[0]
    return _reduce(loss, reduction)


# ---------------------------------------------------------------- the native_* forms (output and saved statistics)
def _stats(input, dims):
    """(mean, 1/sqrt(var + eps) without eps: the biased variance) over ``dims`` in the compute dtype, keepdim."""
    x = input.to(_dt.compute_dtype(input._dtype))
    mean = x.mean(dims, keepdim=True)
    var = ((x - mean) * (x - mean)).mean(dims, keepdim=True)
    return mean, var


@export(method=False)
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    """``torch.native_layer_norm``: ``(output, mean, rstd)``, the statistics of each normalized row with the
    normalized dims kept as size 1, in the input's dtype."""
    out = layer_norm(input, tuple(normalized_shape), weight, bias, eps)
    k = len(tuple(normalized_shape))
    mean, var = _stats(input, tuple(range(input.ndim - k, input.ndim)))
    return out, mean.to(input._dtype), (var + float(eps)).rsqrt().to(input._dtype)


@export(method=False)
def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """``torch.native_batch_norm``: ``(output, save_mean, save_invstd)``; training: the batch statistics per
    channel (and the running ones updated in place); evaluation: two empty tensors."""
    from ..tensor.creation import empty
    out = batch_norm(input, running_mean, running_var, weight, bias, bool(training), momentum, eps)
    if not training:
        e = empty(0, dtype=input._dtype, device=input.device)
        return out, e, e.clone()
    dims = (0,) + tuple(range(2, input.ndim))
    mean, var = _stats(input, dims)
    return out, mean.reshape(-1).to(input._dtype), (var + float(eps)).rsqrt().reshape(-1).to(input._dtype)


@export(method=False)
def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    """``torch.native_group_norm``: ``(output, mean, rstd)``, the statistics (N, group) of each group."""
    N, C, HxW, group = int(N), int(C), int(HxW), int(group)
    if input.numel() != N * C * HxW:
        raise RuntimeError(f"native_group_norm: Expected input with {N} * {C} * {HxW} = {N * C * HxW} elements, "
                           f"but got input of size {list(input.shape)}")
    out = group_norm(input, group, weight, bias, eps)
    mean, var = _stats(input.reshape(N, group, -1), (2,))
    return out, mean.reshape(N, group).to(input._dtype), (var + float(eps)).rsqrt().reshape(N, group).to(input._dtype)


@export(method=False)
def conv_tbc(input, weight, bias, pad=0):
    """``torch.conv_tbc``: 1-D convolution of a (time, batch, channels) sequence with a (kernel, in, out) weight,
    ``pad`` zeros on both ends of time; (time', batch, out)."""
    from .conv import conv1d
    if input.ndim != 3:
        raise RuntimeError(f"conv_tbc: Input must have 3 dims: time, batch, in_channel (got {list(input.shape)})")
    if weight.ndim != 3:
        raise RuntimeError(f"conv_tbc: Weight tensor must have 3 dims: kernel_width, in_channels, out_channels "
                           f"(got {list(weight.shape)})")
    if bias.ndim != 1:
        raise RuntimeError(f"conv_tbc: Bias must be 1-D (got {list(bias.shape)})")
    if input.shape[2] != weight.shape[1]:
        raise RuntimeError(f"conv_tbc: Input dim 2 (input channels) is not == dim 1 in the weight tensor "
                           f"({input.shape[2]} vs {weight.shape[1]})")
    if weight.shape[2] != bias.shape[0]:
        raise RuntimeError(f"conv_tbc: Bias size must equal dim 2 in the weight tensor (output channels) "
                           f"({bias.shape[0]} vs {weight.shape[2]})")
    y = conv1d(input.permute(1, 2, 0), weight.permute(2, 1, 0), bias, padding=int(pad))
    return y.permute(2, 0, 1).contiguous()


_BAG_MODES = {0: "sum", 1: "mean", 2: "max"}


@export(method=False)
def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """``torch.embedding_bag`` (the ATen form, mode 0/1/2 = sum/mean/max): ``(output, offset2bag, bag_size,
    max_indices)`` as PyTorch's CPU kernel gives them: offset2bag the bag of each index (empty for 'sum' without
    ``padding_idx``), bag_size the non-padding count per bag (zeros for 'sum'), max_indices the row of each
    maximum for 'max' (bag_size for 'mean', zeros for 'sum')."""
    from ..nn.functional_extra import embedding_bag as _bag
    from ..tensor.creation import tensor
    if int(mode) not in _BAG_MODES:
        raise RuntimeError(f"embedding_bag: mode has to be 0 (sum), 1 (mean) or 2 (max), got {mode}")
    if not isinstance(offsets, Tensor):
        raise TypeError(f"embedding_bag(): argument 'offsets' (position 3) must be Tensor, not "
                        f"{type(offsets).__name__}")
    if indices.ndim != 1:
        raise RuntimeError(f"embedding_bag: input has to be a 1D Tensor, but got Tensor of dimension {indices.ndim}")
    m = _BAG_MODES[int(mode)]
    out = _bag(indices, weight, offsets, None, 2, scale_grad_by_freq, m, sparse, per_sample_weights,
               include_last_offset, padding_idx)
    B = out.shape[0]
    dev = weight.device
    idx = indices.numpy(force=True).astype(np.int64)
    off = offsets.numpy(force=True).astype(np.int64)
    bag = np.clip(np.searchsorted(off[:B], np.arange(idx.size), side="right") - 1, 0, max(B - 1, 0))
    pad = None if padding_idx is None else int(padding_idx) % weight.shape[0]
    keep = np.ones(idx.size, bool) if pad is None else idx != pad
    o2b = bag if (m != "sum" or pad is not None) else np.zeros(0, np.int64)
    # (the 'sum' kernel sizes its zeros by the offsets, include_last_offset's extra one too)
    size = np.bincount(bag[keep], minlength=B)[:B].astype(np.int64) if m != "sum" else np.zeros(off.size, np.int64)
    if m == "max":
        w = weight.numpy(force=True)
        mi = np.zeros((B, weight.shape[1]), np.int64)
        for b in range(B):
            rows = idx[(bag == b) & keep]
            if rows.size:
                mi[b] = rows[np.argmax(w[rows], axis=0)]
    elif m == "mean":
        mi = size.copy()
    else:
        mi = np.zeros(off.size, np.int64)
    return (out, tensor(o2b, dtype=_dt.int64, device=dev), tensor(size, dtype=_dt.int64, device=dev),
            tensor(mi, dtype=_dt.int64, device=dev))


# ---------------------------------------------------------------- ATen-level entry points torch exposes as torch.*
def _cell_linear(x, h, w_ih, w_hh, b_ih, b_hh):
    from .linalg import matmul
    g = matmul(x, w_ih.transpose(0, 1)) + matmul(h, w_hh.transpose(0, 1))
    if b_ih is not None:
        g = g + b_ih
    if b_hh is not None:
        g = g + b_hh
    return g


@export(method=False)
def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """``torch.rnn_tanh_cell``: ``tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)``."""
    return _cell_linear(input, hx, w_ih, w_hh, b_ih, b_hh).tanh()


@export(method=False)
def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """``torch.rnn_relu_cell``: ``relu(x W_ih^T + b_ih + h W_hh^T + b_hh)``."""
    return _cell_linear(input, hx, w_ih, w_hh, b_ih, b_hh).relu()


@export(method=False)
def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """``torch.lstm_cell``: ``(h', c')`` of one LSTM step, gates (i, f, g, o) in PyTorch's order."""
    h, c = hx
    i, f, g, o = _cell_linear(input, h, w_ih, w_hh, b_ih, b_hh).chunk(4, 1)
    c2 = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c2.tanh(), c2


@export(method=False)
def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """``torch.gru_cell``: one GRU step, gates (r, z, n) in PyTorch's order, ``r`` applied to ``h W_hn^T + b_hn``."""
    from .linalg import matmul
    gi = matmul(input, w_ih.transpose(0, 1)) + (b_ih if b_ih is not None else 0)
    gh = matmul(hx, w_hh.transpose(0, 1)) + (b_hh if b_hh is not None else 0)
    ir, iz, in_ = gi.chunk(3, 1)
    hr, hz, hn = gh.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    return n + z * (hx - n)


@export(method=False)
def native_dropout(input, p, train):
    """``torch.native_dropout``: ``(output, mask)``; not training (``train`` False or None): the input and an
    all-True mask."""
    from ..tensor.creation import ones
    if not train:
        return input.clone(), ones(tuple(input.shape), dtype=_dt.bool_, device=input.device)
    from ..tensor.creation import rand
    keep = rand(tuple(input.shape), device=input.device) >= float(p)
    scale = 0.0 if p >= 1 else 1.0 / (1.0 - float(p))
    return input * keep.to(input._dtype) * scale, keep


@export(method=False)
def native_channel_shuffle(input, groups):
    """``torch.native_channel_shuffle``: ``nn.functional.channel_shuffle``."""
    from .conv import channel_shuffle
    return channel_shuffle(input, groups)


@export(method=False)
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """``torch.convolution``: the 1-, 2- or 3-D (transposed) convolution the weight's rank names."""
    from ..nn import functional as F
    nd = weight.ndim - 2
    if nd not in (1, 2, 3):
        raise RuntimeError(f"convolution: expected a 3-D, 4-D or 5-D weight, got {list(weight.shape)}")
    if transposed:
        f = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[nd]
        return f(input, weight, bias, stride, padding, output_padding, groups, dilation)
    f = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    return f(input, weight, bias, stride, padding, dilation, groups)


@export(method=False)
def to_dlpack(tensor):
    """``torch.to_dlpack``: the tensor's DLPack capsule (``tensor.__dlpack__()``)."""
    return tensor.__dlpack__()


_GRID_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_GRID_PADS = {0: "zeros", 1: "border", 2: "reflection"}


def _grid_sampler(name, nd, input, grid, interpolation_mode, padding_mode, align_corners):
    from ..nn import functional as F
    if int(interpolation_mode) not in _GRID_MODES or int(padding_mode) not in _GRID_PADS:
        raise RuntimeError(f"{name}: interpolation_mode must be 0 (bilinear), 1 (nearest) or 2 (bicubic) and "
                           f"padding_mode 0 (zeros), 1 (border) or 2 (reflection), got {interpolation_mode} and "
                           f"{padding_mode}")
    if nd and input.ndim != nd:
        raise RuntimeError(f"{name}: expected a {nd}-D input, got {list(input.shape)}")
    return F.grid_sample(input, grid, _GRID_MODES[int(interpolation_mode)], _GRID_PADS[int(padding_mode)],
                         bool(align_corners))


@export(method=False)
def grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
    """``torch.grid_sampler``: ``nn.functional.grid_sample`` with ATen's integer modes (0/1/2: bilinear / nearest /
    bicubic; padding 0/1/2: zeros / border / reflection)."""
    return _grid_sampler("grid_sampler", 0, input, grid, interpolation_mode, padding_mode, align_corners)


@export(method=False)
def grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners):
    """``torch.grid_sampler_2d``: ``grid_sampler`` of a 4-D input."""
    return _grid_sampler("grid_sampler_2d", 4, input, grid, interpolation_mode, padding_mode, align_corners)


@export(method=False)
def grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners):
    """``torch.grid_sampler_3d``: ``grid_sampler`` of a 5-D input."""
    return _grid_sampler("grid_sampler_3d", 5, input, grid, interpolation_mode, padding_mode, align_corners)


@export(method=False)
def affine_grid_generator(theta, size, align_corners):
    """``torch.affine_grid_generator``: ``nn.functional.affine_grid``."""
    from ..nn import functional as F
    return F.affine_grid(theta, list(size), bool(align_corners))


@export(method=False)
def embedding_renorm_(input, indices, max_norm, norm_type):
    """``torch.embedding_renorm_``: in place, each row of ``input`` that ``indices`` names (once, however often
    named) whose ``norm_type``-norm exceeds ``max_norm`` is scaled by ``max_norm / (norm + 1e-7)``."""
    from ..tensor.creation import tensor
    if input.ndim != 2:
        raise RuntimeError(f"embedding_renorm_: input must be 2-D, got {list(input.shape)}")
    if indices._dtype not in (_dt.int64, _dt.int32):
        raise RuntimeError(f"embedding_renorm_: Expected tensor for argument #2 'indices' to have one of the following "
                           f"scalar types: Long, Int; but got {indices._dtype.name} instead")
    rows = np.unique(indices.numpy(force=True).reshape(-1))
    if rows.size == 0:
        return input
    idx = tensor(rows, dtype=_dt.int64, device=input.device)
    sel = input.index_select(0, idx)
    norms = sel.norm(float(norm_type), dim=1, keepdim=True)
    scale = EXPORTS["where"][0](norms > float(max_norm), float(max_norm) / (norms + 1e-7), 1.0)
    input.index_copy_(0, idx, sel * scale.to(input._dtype))
    return input
