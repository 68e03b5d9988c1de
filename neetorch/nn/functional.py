"""``neetorch.nn.functional``: the ``torch.nn.functional`` namespace (PyTorch names and signatures).

Activations forward to the elementwise ops; softmax/normalization/attention/embedding/
dropout/distances/losses come from ``neetorch.ops.nn``; convolution, pooling, linear,
interpolation, padding and pixel shuffle are looked up lazily (``__getattr__``) in the op
modules that define them.
"""
from __future__ import annotations

import importlib
import math

from ..ops import elementwise as _ew
from ..ops import nn as _nn
from ..ops.registry import EXPORTS as _EXPORTS
from ..tensor import dtypes as _dt

from ..ops.nn import (  # noqa: F401
    layer_norm, rms_norm, group_norm, batch_norm, instance_norm, embedding, scaled_dot_product_attention,
    normalize, cosine_similarity, pairwise_distance, one_hot, cross_entropy, nll_loss, mse_loss, l1_loss,
    binary_cross_entropy, binary_cross_entropy_with_logits, kl_div, smooth_l1_loss, huber_loss, alpha_dropout,
)


def _E(name):
    return _EXPORTS[name][0]


def _inplace(input, r, inplace):
    return input.copy_(r) if inplace else r


def _float_only(input, kernel):
    """torch's CPU kernels of these activations take floating-point tensors only (relu / hardtanh / sigmoid /
    tanh accept integers); ``kernel`` is the name torch's error gives."""
    dt = getattr(input, "_dtype", None)
    if dt is not None and dt.category != 2:
        from ..ops.linalg import _CAP
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{_CAP.get(dt.name, dt.name)}'")


# ---------------------------------------------------------------- activations
def relu(input, inplace=False):
    return _inplace(input, _E("relu")(input), inplace)


def relu_(input):
    return relu(input, inplace=True)


def relu6(input, inplace=False):
    if input.dtype.category != 2:  # torch: relu6 is hardtanh(0, 6), which keeps an integer dtype
        return hardtanh(input, 0.0, 6.0, inplace)
    return _inplace(input, _E("relu6")(input), inplace)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    _float_only(input, "leaky_relu_cpu")
    return _ew.leaky_relu(input, negative_slope, inplace)


def leaky_relu_(input, negative_slope=0.01):
    return leaky_relu(input, negative_slope, True)


def gelu(input, approximate="none"):
    _float_only(input, "GeluKernelImpl")
    return _ew.gelu(input, approximate)


def silu(input, inplace=False):
    _float_only(input, "silu_cpu")
    return _inplace(input, _E("silu")(input), inplace)


def mish(input, inplace=False):
    _float_only(input, "mish_cpu")
    return _inplace(input, _E("mish")(input), inplace)


def elu(input, alpha=1.0, inplace=False):
    _float_only(input, "elu_cpu")
    return _ew.elu(input, alpha, inplace)


def elu_(input, alpha=1.0):
    return elu(input, alpha, True)


def celu(input, alpha=1.0, inplace=False):
    _float_only(input, "elu_cpu")
    return _ew.celu(input, alpha, inplace)


def celu_(input, alpha=1.0):
    return celu(input, alpha, True)


def selu(input, inplace=False):
    _float_only(input, "elu_cpu")
    return _inplace(input, _E("selu")(input), inplace)


def selu_(input):
    return selu(input, True)


def softplus(input, beta=1.0, threshold=20.0):
    _float_only(input, "softplus_cpu")
    return _ew.softplus(input, beta, threshold)


def softsign(input):
    if getattr(input, "_dtype", None) is _dt.bool_:   # torch: input / (1 + abs(input)), and abs refuses bool
        raise NotImplementedError("softsign: \"abs_cpu\" not implemented for 'Bool'")
    dt = getattr(input, "_dtype", None)
    if dt is not None and dt.is_integer:
        # torch's formula in the input's integer dtype, then a true division: abs(x) + 1 wraps (uint8 255 -> 0:
        # inf, as torch), which the float kernel would not
        return input / (input.abs() + 1)
    return _E("softsign")(input)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _ew.hardtanh(input, min_val, max_val, inplace)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return hardtanh(input, min_val, max_val, True)


def hardsigmoid(input, inplace=False):
    _float_only(input, "hardsigmoid_cpu")
    return _inplace(input, _E("hardsigmoid")(input), inplace)


def hardswish(input, inplace=False):
    _float_only(input, "hardswish_cpu")
    return _inplace(input, _E("hardswish")(input), inplace)


def sigmoid(input):
    return _E("sigmoid")(input)


def tanh(input):
    return _E("tanh")(input)


def logsigmoid(input):
    _float_only(input, "log_sigmoid_cpu")
    return _ew.apply(_ew.OPS_["logsigmoid"], input, _layout=False)   # (torch's log_sigmoid: a row-major result)


def tanhshrink(input):
    if getattr(input, "_dtype", None) is _dt.bool_:   # torch: input - tanh(input), and bool refuses subtraction
        raise RuntimeError("tanhshrink: Subtraction, the `-` operator, with a bool tensor is not supported")
    return _E("tanhshrink")(input)


def hardshrink(input, lambd=0.5):
    _float_only(input, "hardshrink_cpu")
    return _ew.where(input.abs() > lambd, input, 0.0 * input)


def softshrink(input, lambd=0.5):
    _float_only(input, "softshrink_check")
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    return _ew.where(input > lambd, input - lambd, _ew.where(input < -lambd, input + lambd, 0.0 * input))


def threshold(input, threshold, value, inplace=False):
    if getattr(input, "_dtype", None) is _dt.bool_:
        raise NotImplementedError("\"threshold_cpu\" not implemented for 'Bool'")
    # (torch: x <= threshold ? value : x, so NaN is kept)
    return _inplace(input, _ew.where(input <= threshold, _ew._scalar_tensor(value, input._dtype, input._device),
                                     input), inplace)


def threshold_(input, threshold, value):
    return globals()["threshold"](input, threshold, value, True)


def glu(input, dim=-1):
    _float_only(input, "glu_cpu")
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    d = dim + input.ndim if dim < 0 else dim
    n = input.shape[d]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {n}")
    a = input.narrow(d, 0, n // 2)
    b = input.narrow(d, n // 2, n // 2)
    return a * _E("sigmoid")(b)


def prelu(input, weight):
    _float_only(input, "prelu_cpu")
    wdt = getattr(weight, "_dtype", None)
    if wdt is not None and wdt is not input._dtype:   # torch: prelu does not promote
        from ..ops.linalg import _CAP
        raise RuntimeError(f"prelu: Type promoting not supported. Got {_CAP.get(input._dtype.name, input._dtype.name)} "
                           f"and {_CAP.get(wdt.name, wdt.name)}")
    if weight.numel() != 1:
        C = input.shape[1] if input.ndim >= 2 else 1  # torch: below 2-D there is no channel dim (1 channel)
        if weight.numel() != C:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                               f"{weight.numel()} and channel size = {C}.")
        weight = weight.reshape((C,) + (1,) * (input.ndim - 2))
    elif input.ndim == 0:
        weight = weight.reshape(())
    return _ew.where(input > 0, input, input * weight)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    _float_only(input, "leaky_relu_cpu")
    if lower > upper:
        raise RuntimeError(f"rrelu: Lower bound should be less than or equal to the upper bound (lower={lower}, "
                           f"upper={upper})")
    if not training:   # (torch: leaky_relu into a row-major result)
        return _inplace(input, _ew.apply(_ew._BIN["leaky_relu"], input, (lower + upper) / 2, _layout=False), inplace)
    from ..tensor.creation import rand
    a = rand(tuple(input.shape), dtype=input._dtype, device=input._device) * (upper - lower) + lower
    return _inplace(input, _ew.where(input >= 0, input, input * a), inplace)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    return rrelu(input, lower, upper, training, True)


# ---------------------------------------------------------------- softmax family
def softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    return _nn.softmax(input, _nn._implicit_dim(input, dim, "softmax"))


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    return _nn.log_softmax(input, _nn._implicit_dim(input, dim, "log_softmax"))


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    return _nn.softmin(input, dim, _stacklevel, dtype)


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    from ..tensor.creation import rand
    u = rand(tuple(logits.shape), dtype=logits._dtype, device=logits._device)
    g = -(-(u.clamp(min=1e-20)).log()).log()
    y = _nn.softmax((logits + g) / tau, dim)
    if not hard:
        return y
    am = _E("argmax")(y, dim, True)
    n = logits.shape[dim]
    d = dim + logits.ndim if dim < 0 else dim
    from ..tensor.creation import arange
    idx = arange(n, device=logits._device).reshape(*([n if i == d else 1 for i in range(logits.ndim)]))
    return (idx == am).to(logits._dtype)


# ---------------------------------------------------------------- dropout
def dropout(input, p=0.5, training=True, inplace=False):
    return _nn._dropout_impl(input, float(p), bool(training), inplace)


def dropout1d(input, p=0.5, training=True, inplace=False):
    return _nn._feature_dropout("dropout1d", input, float(p), training, inplace, 3)


def dropout2d(input, p=0.5, training=True, inplace=False):
    return _nn._feature_dropout("dropout2d", input, float(p), training, inplace, 4)


def dropout3d(input, p=0.5, training=True, inplace=False):
    return _nn._feature_dropout("dropout3d", input, float(p), training, inplace, 5)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Alpha dropout of whole channels: one keep / drop draw per (N, C) slice (torch's make_feature_noise)."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if input.ndim < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    if p == 1.0:
        r = input * 0
    else:
        from ..tensor.creation import rand
        from ..tensor import dtypes as _dt
        shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
        u = rand(tuple(shape), dtype=_dt.float64 if input._dtype is _dt.float64 else _dt.float32, device=input._device)
        keep = (u < (1.0 - p)).to(input._dtype)
        a = 1.0 / math.sqrt((_nn._ALPHA * _nn._ALPHA * p + 1) * (1 - p))
        r = input * (keep * a) + ((keep - 1.0) * (_nn._ALPHA * a) + _nn._ALPHA * a * p)
    return input.copy_(r) if inplace else r


# ---------------------------------------------------------------- more losses (composed)
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    reduction = _nn._legacy_reduction(size_average, reduce, reduction)
    if input.dtype.category != 2:   # torch writes the float loss into a tensor of the input's dtype
        raise RuntimeError(f"soft_margin_loss: result type Float can't be cast to the desired output type "
                           f"{input.dtype.name} (the input's dtype); pass a floating-point input")
    if target.dtype.category == 2:
        target = target.to(input.dtype)  # torch: the loss keeps the input's dtype
    # torch's formula log1p(exp(-target * input)) in the input's dtype: a float16 margin beyond ~11 gives inf
    return _nn._reduce((-target * input).exp().log1p(), reduction)


def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    reduction = _nn._legacy_reduction(size_average, reduce, reduction)
    return _nn._reduce(_ew.clamp_min(-target * (input1 - input2) + margin, 0.0), reduction)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    reduction = _nn._legacy_reduction(size_average, reduce, reduction)
    # torch's composition (aten hinge_embedding_loss): the margin term where target != 1 plus the input where
    # target != -1, in the input's dtype (an integer input truncates the margin; target never promotes)
    if input._dtype.category == 0:
        raise RuntimeError("hinge_embedding_loss: Subtraction, the `-` operator, with two bool tensors is not "
                           "supported (bool input); convert it to a number dtype first")
    m = int(margin) if input._dtype.category == 1 else margin
    zeros = input - input
    neg = _ew.where(target != 1, _ew.clamp_min(m - input, 0), zeros)
    pos = _ew.where(target != -1, input, zeros)
    if reduction == "mean" and input._dtype.category != 2:
        raise RuntimeError(f"hinge_embedding_loss: mean(): could not infer output dtype. Input dtype must be either "
                           f"a floating point or complex dtype. Got: {input._dtype.name} (use reduction='sum')")
    return _nn._reduce(neg + pos, reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean"):
    reduction = _nn._legacy_reduction(size_average, reduce, reduction)
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        st = target * target.log() - target + 0.5 * (2 * math.pi * target).log()
        loss = loss + st.masked_fill(target <= 1, 0.0)   # not 0 * st: that is NaN at target 0
    return _nn._reduce(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """``torch.nn.functional.gaussian_nll_loss``: ``var`` may lack input's last dim or have it as 1."""
    from ..tensor import creation as _creation
    from ..tensor.tensor import Tensor
    if not isinstance(var, Tensor):
        var = _creation.full(tuple(input.shape), float(var), dtype=input.dtype, device=input.device)
    ishape, vshape = tuple(input.shape), tuple(var.shape)
    if vshape != ishape:
        if ishape[:-1] == vshape:
            var = var.unsqueeze(-1)
        elif not (ishape[:-1] == vshape[:-1] and vshape[-1:] == (1,)):
            raise ValueError(f"gaussian_nll_loss: var is of incorrect size {list(vshape)} for input of size "
                             f"{list(ishape)}")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"gaussian_nll_loss: {reduction} is not a valid value for reduction")
    from ..trace import tracer as _tracer
    if not _tracer.is_tracing() and bool((var < 0).any()):
        raise ValueError("gaussian_nll_loss: var has negative entry/entries")
    v = _ew.clamp_min(var, eps)
    loss = 0.5 * (v.log() + (input - target) * (input - target) / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _nn._reduce(loss, reduction)


def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    reduction = _nn._legacy_reduction(size_average, reduce, reduction)
    cos = cosine_similarity(input1, input2, dim=-1, eps=1e-12) if input1.ndim > 1 else \
        cosine_similarity(input1, input2, dim=0, eps=1e-12)
    loss = _ew.where(target == 1, 1.0 - cos, _ew.clamp_min(cos - margin, 0.0))
    return _nn._reduce(loss, reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    reduction = _nn._legacy_reduction(size_average, reduce, reduction)
    dp = pairwise_distance(anchor, positive, p, eps)
    dn = pairwise_distance(anchor, negative, p, eps)
    if swap:
        ds = pairwise_distance(positive, negative, p, eps)
        dn = _E("minimum")(dn, ds)
    return _nn._reduce(_ew.clamp_min(dp - dn + margin, 0.0), reduction)


# ---------------------------------------------------------------- lazy re-exports from other op modules
_LAZY = {
    "linear": ("linalg",), "bilinear": ("linalg",),
    "conv1d": ("conv",), "conv2d": ("conv",), "conv3d": ("conv",),
    "conv_transpose1d": ("conv",), "conv_transpose2d": ("conv",), "conv_transpose3d": ("conv",),
    "max_pool1d": ("conv", "pool", "pooling"), "max_pool2d": ("conv", "pool", "pooling"),
    "max_pool1d_with_indices": ("conv", "pool", "pooling"), "max_pool2d_with_indices": ("conv", "pool", "pooling"),
    "avg_pool1d": ("conv", "pool", "pooling"), "avg_pool2d": ("conv", "pool", "pooling"),
    "adaptive_avg_pool1d": ("conv", "pool", "pooling"), "adaptive_avg_pool2d": ("conv", "pool", "pooling"),
    "adaptive_max_pool1d": ("conv", "pool", "pooling"), "adaptive_max_pool2d": ("conv", "pool", "pooling"),
    "lp_pool1d": ("conv", "pool", "pooling"), "lp_pool2d": ("conv", "pool", "pooling"),
    "interpolate": ("conv", "interpolate", "shape"), "upsample": ("conv", "interpolate", "shape"),
    "upsample_nearest": ("conv", "interpolate", "shape"), "upsample_bilinear": ("conv", "interpolate", "shape"),
    "grid_sample": ("conv", "interpolate", "shape"), "affine_grid": ("conv", "interpolate", "shape"),
    "unfold": ("conv",), "fold": ("conv",),
    "pad": ("shape",),
    "pixel_shuffle": ("conv", "shape"), "pixel_unshuffle": ("conv", "shape"),
    "channel_shuffle": ("conv", "shape"),
    "native_channel_shuffle": ("nn",), "conv_tbc": ("nn",),
}


def __getattr__(name):
    mods = _LAZY.get(name)
    if mods is None:
        raise AttributeError(f"module 'neetorch.nn.functional' has no attribute {name!r}")
    for m in mods:
        try:
            mod = importlib.import_module(f"neetorch.ops.{m}")
        except ImportError:
            continue
        fn = getattr(mod, name, None)
        if callable(fn):
            globals()[name] = fn
            return fn
    raise AttributeError(f"neetorch.nn.functional.{name} is not available: no op module defines it yet")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


from .functional_extra import *  # noqa: E402,F401,F403  (3-D conv/pool, grid_sample, embedding_bag, more losses)
from .ctc import ctc_loss  # noqa: E402,F401
from .fractional import (  # noqa: E402,F401
    fractional_max_pool2d, fractional_max_pool3d, fractional_max_pool2d_with_indices,
    fractional_max_pool3d_with_indices,
)

__all__ = [n for n in list(globals()) if not n.startswith("_") and callable(globals()[n])
           and n not in ("annotations", "importlib", "math", "Tensor")]
