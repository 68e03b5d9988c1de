"""ONNX random ops (RandomNormal, RandomUniform, their ``*Like`` forms, Bernoulli, Multinomial) and Dropout,
training mode included.

They lower onto neetorch's samplers, which a trace records as ``random`` nodes (``trace.tracer.RandomOp``):
every run of the session draws new values, as onnxruntime's kernels do, and nothing folds them into constants.
A node's ``seed`` attribute gives it its own generator, seeded once per session and kept across runs and shape
buckets (onnxruntime's kernel keeps its generator the same way), so a seeded model gives the same sequence of
outputs in every new session; without a seed the node draws from neetorch's default generator
(``nee.manual_seed``).  The values are not onnxruntime's (each engine has its own generator)."""
from __future__ import annotations

import numpy as np

import neetorch as nee
from .lowering import LoweringError, nee_dtype, onnx_np, op


def _generator(ctx, node):
    """The node's own generator when it has a ``seed`` (created once per session), else None (the default)."""
    seed = node.get("seed")
    if seed is None:
        return None
    gens = ctx.__dict__.setdefault("generators", {})
    key = (node.op_type, tuple(node.outputs))
    g = gens.get(key)
    if g is None:
        # ONNX's seed is a float: its bits (not its rounded value) tell seeds like 0.5 and 0.25 apart
        g = gens[key] = nee.Generator().manual_seed(int(np.float64(seed).view(np.int64)) & ((1 << 63) - 1))
    return g


def _float_dtype(node, default):
    dt = nee_dtype(onnx_np(node.get("dtype"))) if node.get("dtype") is not None else default
    if not dt.is_floating_point:
        raise LoweringError(f"{node.name}: dtype must be a floating type, got {dt}")
    return dt


def _shape(node):
    shape = node.get("shape")
    if shape is None:
        raise LoweringError(f"{node.name}: the 'shape' attribute is required")
    if any(int(s) < 0 for s in shape):
        raise LoweringError(f"{node.name}: negative size in shape {list(shape)}")
    return tuple(int(s) for s in shape)


def _normal(u, node):
    mean, scale = float(node.get("mean", 0.0)), float(node.get("scale", 1.0))
    return u if (mean, scale) == (0.0, 1.0) else u * scale + mean


def _uniform(u, node):
    low, high = float(node.get("low", 0.0)), float(node.get("high", 1.0))
    return u if (low, high) == (0.0, 1.0) else u * (high - low) + low


@op("RandomNormal")
def _random_normal(ctx, node):
    dt = _float_dtype(node, nee.float32)
    return _normal(nee.randn(_shape(node), dtype=dt, generator=_generator(ctx, node)), node)


@op("RandomUniform")
def _random_uniform(ctx, node):
    dt = _float_dtype(node, nee.float32)
    return _uniform(nee.rand(_shape(node), dtype=dt, generator=_generator(ctx, node)), node)


@op("RandomNormalLike")
def _random_normal_like(ctx, node, x):
    dt = _float_dtype(node, x.dtype)
    return _normal(nee.randn_like(x, dtype=dt, generator=_generator(ctx, node)), node)


@op("RandomUniformLike")
def _random_uniform_like(ctx, node, x):
    dt = _float_dtype(node, x.dtype)
    return _uniform(nee.rand_like(x, dtype=dt, generator=_generator(ctx, node)), node)


@op("Bernoulli")
def _bernoulli(ctx, node, p):
    """0/1 draws with probabilities ``p`` (floating, in [0, 1]), in ``dtype`` (default: ``p``'s)."""
    if not p.dtype.is_floating_point:
        raise LoweringError(f"{node.name}: input must be floating, got {p.dtype}")
    y = nee.bernoulli(p, generator=_generator(ctx, node))
    dt = nee_dtype(onnx_np(node.get("dtype"))) if node.get("dtype") is not None else p.dtype
    return y if dt is y.dtype else y.to(dt)


@op("Multinomial")
def _multinomial(ctx, node, x):
    """``sample_size`` class indices per row of unnormalized log-probabilities ``x`` [batch, classes], drawn
    with replacement, as int32 (default) or int64."""
    if x.ndim != 2:
        raise LoweringError(f"{node.name}: input must be 2-D [batch_size, class_size], got "
                            f"shape {tuple(x.shape)}")
    dt = nee_dtype(onnx_np(node.get("dtype"))) if node.get("dtype") is not None else nee.int32
    if dt not in (nee.int32, nee.int64):
        raise LoweringError(f"{node.name}: dtype must be int32 or int64, got {dt}")
    probs = nee.softmax(x.to(nee.float64) if x.dtype is nee.float16 else x, dim=-1)
    y = nee.multinomial(probs, int(node.get("sample_size", 1)), replacement=True,
                        generator=_generator(ctx, node))
    return y if dt is nee.int64 else y.to(dt)


@op("Dropout")
def _dropout(ctx, node, x, ratio=None, training=None):
    """Inference mode (no ``training_mode``, or false): the identity (mask all true).  Training mode: elements
    kept with probability 1 - ratio (a uniform draw >= ratio, as ONNX's reference) and scaled by 1 / (1 - ratio);
    ratio 1 drops everything.  A ``training_mode`` or ``ratio`` given as a graph input (not a constant) is applied
    with tensor arithmetic (the draw is then made at every run)."""
    from ..trace.tracer import TraceError

    def static(t, default):
        if t is None:
            return default
        try:
            return ctx.scalar(t, default)
        except TraceError:
            return None
    train, r = static(training, False), static(ratio, 0.5)
    if train is not None and (not bool(train) or (r is not None and float(r) == 0.0)):
        return (x, nee.ones(tuple(x.shape), dtype=nee.bool)) if node.nout > 1 else x
    if not x.dtype.is_floating_point:
        raise LoweringError(f"{node.name}: training mode needs a floating input, got {x.dtype}")
    u = nee.rand_like(x, generator=_generator(ctx, node))
    if r is not None:
        r = float(r)
        if not 0.0 <= r <= 1.0:
            raise LoweringError(f"{node.name}: ratio must be in [0, 1], got {r}")
        keep = u >= r
        y = nee.zeros_like(x) if r == 1.0 else nee.where(keep, x * (1.0 / (1.0 - r)), nee.zeros((), dtype=x.dtype))
    else:
        rt = ratio.to(x.dtype).reshape(())
        keep = u >= rt
        y = nee.where(keep, x / (1.0 - rt), nee.zeros((), dtype=x.dtype))
    if train is None:   # training_mode a graph input: inference when false
        t = training.to(nee.bool).reshape(())
        y = nee.where(t, y, x)
        keep = keep | ~t
    return (y, keep) if node.nout > 1 else y
