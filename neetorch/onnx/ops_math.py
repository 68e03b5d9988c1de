"""ONNX elementwise math, activations, comparisons/logic, reductions and matrix products."""
from __future__ import annotations

import functools
import math

import numpy as np

import neetorch as nee
from ..nn import functional as F
from .lowering import op, onnx_np, nee_dtype, carry_np, LoweringError


def _isfloat(t):
    return t.dtype.is_floating_point


# ---------------------------------------------------------------- unary
_UNARY = {
    "Abs": "abs", "Neg": "neg", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
    "Floor": "floor", "Ceil": "ceil", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos",
    "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
    "Erf": "erf", "Sigmoid": "sigmoid", "Tanh": "tanh", "Not": "logical_not", "IsNaN": "isnan",
    "BitwiseNot": "bitwise_not", "Softsign": "softsign",
}


def _unary(name):
    def f(ctx, node, x):
        if name in ("floor", "ceil") and not _isfloat(x):
            return x
        return getattr(nee, name)(x)
    return f


for _k, _v in _UNARY.items():
    op(_k)(_unary(_v))


@op("Sign")
def _sign(ctx, node, x):
    # NaN stays NaN (ONNX's reference, onnxruntime); torch.sign, which nee.sign follows, gives 0 there
    s = nee.sign(x)
    return nee.where(nee.isnan(x), x, s) if _isfloat(x) else s


@op("Relu")
def _relu(ctx, node, x):
    return nee.relu(x) if _isfloat(x) else nee.where(x > 0, x, nee.zeros((), dtype=x.dtype))


@op("Round")
def _round(ctx, node, x):
    return nee.round(x)


@op("IsInf")
def _isinf(ctx, node, x):
    pos, neg = node.get("detect_positive", 1), node.get("detect_negative", 1)
    if pos and neg:
        return nee.isinf(x)
    if pos:
        return nee.isposinf(x)
    if neg:
        return nee.isneginf(x)
    return nee.zeros(tuple(x.shape), dtype=nee.bool)


@op("Identity")
def _identity(ctx, node, x):
    return x


@op("LeakyRelu")
def _leaky(ctx, node, x):
    return F.leaky_relu(x, node.get("alpha", 0.01))


@op("Elu")
def _elu(ctx, node, x):
    return F.elu(x, node.get("alpha", 1.0))


@op("Celu")
def _celu(ctx, node, x):
    alpha = node.get("alpha", 1.0)
    if alpha == 0:  # the spec's max(0, x) + min(0, 0 * (exp(x / 0) - 1)): 0 where x < 0, NaN elsewhere (0 / 0, 0 * inf)
        return nee.where(x < 0, nee.zeros((), dtype=x.dtype), nee.full((), float("nan"), dtype=x.dtype))
    return F.celu(x, alpha)


@op("Selu")
def _selu(ctx, node, x):
    a = node.get("alpha", 1.67326319217681884765625)
    g = node.get("gamma", 1.05070102214813232421875)
    return nee.where(x > 0, x * g, (nee.exp(x) - 1.0) * (a * g))


@op("HardSigmoid")
def _hsig(ctx, node, x):
    return nee.clamp(x * node.get("alpha", 0.2) + node.get("beta", 0.5), 0.0, 1.0)


@op("HardSwish")
def _hswish(ctx, node, x):
    return x * nee.clamp(x * (1.0 / 6.0) + 0.5, 0.0, 1.0)


@op("ThresholdedRelu")
def _trelu(ctx, node, x):
    return nee.where(x > node.get("alpha", 1.0), x, nee.zeros((), dtype=x.dtype))


@op("Softplus")
def _softplus(ctx, node, x):
    return F.softplus(x)


@op("Mish")
def _mish(ctx, node, x):
    return x * nee.tanh(F.softplus(x))


@op("Gelu")
def _gelu(ctx, node, x):
    return F.gelu(x, approximate=node.get("approximate", "none"))


@op("Shrink")
def _shrink(ctx, node, x):
    b, lam = node.get("bias", 0.0), node.get("lambd", 0.5)
    z = nee.zeros((), dtype=x.dtype)
    if _isfloat(x):
        return nee.where(x < -lam, x + b, nee.where(x > lam, x - b, z))
    xf = x.to(nee.float64)
    return nee.where(xf < -lam, xf + b, nee.where(xf > lam, xf - b, z.to(nee.float64))).to(x.dtype)


@op("PRelu")
def _prelu(ctx, node, x, slope):
    if slope.ndim == 1 and x.ndim >= 2 and slope.shape[0] == x.shape[1] and slope.shape[0] != x.shape[-1]:
        slope = slope.reshape(-1, *([1] * (x.ndim - 2)))  # opset < 7 per-channel slope
    return nee.where(x < 0, x * slope, x)


@op("Clip")
def _clip(ctx, node, x, lo=None, hi=None):
    if ctx.opset < 11 or "min" in node.attrs or "max" in node.attrs:
        lo_v, hi_v = node.get("min"), node.get("max")
        return nee.clamp(x, lo_v, hi_v)
    if lo is not None:
        x = nee.maximum(x, lo.reshape(()) if lo.ndim else lo)
    if hi is not None:
        x = nee.minimum(x, hi.reshape(()) if hi.ndim else hi)
    return x


# ---------------------------------------------------------------- binary / variadic
def _same(a, b):
    if a.dtype is not b.dtype:
        b = b.to(a.dtype)
    return a, b


@op("Add")
def _add(ctx, node, a, b):
    return nee.add(*_same(a, b))


@op("Sub")
def _sub(ctx, node, a, b):
    return nee.sub(*_same(a, b))


@op("Mul")
def _mul(ctx, node, a, b):
    a, b = _same(a, b)
    if a.dtype is nee.bool:
        return nee.logical_and(a, b)
    return nee.mul(a, b)


@op("Div")
def _div(ctx, node, a, b):
    a, b = _same(a, b)
    if _isfloat(a):
        return nee.div(a, b)
    return nee.div(a, b, rounding_mode="trunc")


@op("Pow")
def _pow(ctx, node, a, b):
    if _isfloat(a):
        return nee.pow(a, b.to(a.dtype) if b.dtype is not a.dtype else b)
    r = nee.pow(a.to(nee.float64), b.to(nee.float64))
    return r.to(a.dtype)


@op("Mod")
def _mod(ctx, node, a, b):
    a, b = _same(a, b)
    if node.get("fmod", 0):
        return nee.fmod(a, b)
    return nee.remainder(a, b)


_CMP = {"Equal": "eq", "Less": "lt", "LessOrEqual": "le", "Greater": "gt", "GreaterOrEqual": "ge",
        "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor", "BitwiseAnd": "bitwise_and",
        "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}


def _binary(name):
    def f(ctx, node, a, b):
        return getattr(nee, name)(*_same(a, b))
    return f


for _k, _v in _CMP.items():
    op(_k)(_binary(_v))


@op("BitShift")
def _bitshift(ctx, node, a, b):
    a, b = _same(a, b)
    if node.get("direction") == "LEFT":
        return nee.bitwise_left_shift(a, b)
    return nee.bitwise_right_shift(a, b)


def _variadic(fn):
    def f(ctx, node, *xs):
        xs = [x for x in xs if x is not None]
        r = xs[0]
        for x in xs[1:]:
            r = fn(*_same(r, x))
        return r
    return f


op("Sum")(_variadic(nee.add))
op("Max")(_variadic(nee.maximum))
op("Min")(_variadic(nee.minimum))


@op("Mean")
def _mean(ctx, node, *xs):
    xs = [x for x in xs if x is not None]
    r = xs[0]
    for x in xs[1:]:
        r = r + x
    return r / float(len(xs)) if len(xs) > 1 else r


@op("Where")
def _where(ctx, node, c, a, b):
    a, b = _same(a, b)
    return nee.where(c, a, b)


# ---------------------------------------------------------------- cast
@op("Cast")
def _cast(ctx, node, x):
    to = onnx_np(node.get("to"))
    if to.name == "float8_e8m0fnu":
        return _to_e8m0(x, node.get("saturate", 1), node.get("round_mode", "up"))
    return _cast_to(x, to, node.get("saturate", 1))


def _to_e8m0(x, saturate, round_mode):
    """Cast to float8_e8m0fnu (a power of two 2**(e - 127), or NaN), held in float32: the float32
    exponent, rounded by the mantissa as ``onnx.numpy_helper.to_float8e8m0`` does; the sign is dropped."""
    i32 = lambda v: nee.full((), v, dtype=nee.int32)  # noqa: E731
    bits = (x if x.dtype is nee.float32 else x.to(nee.float32)).contiguous().view(nee.int32)
    e = nee.bitwise_and(nee.bitwise_right_shift(bits, i32(23)), i32(0xFF))
    special = e == 0xFF
    if round_mode == "nearest":
        g = nee.bitwise_and(bits, i32(0x400000)) != 0
        r = nee.bitwise_and(bits, i32(0x200000)) != 0
        s = nee.bitwise_and(bits, i32(0x1FFFFF)) != 0
        up = g & (r | s | (e > 0))
    elif round_mode == "up":
        up = nee.bitwise_and(bits, i32(0x7FFFFF)) != 0
    elif round_mode == "down":
        up = None
    else:
        raise LoweringError(f"Cast round_mode {round_mode!r} is not supported (up, down, nearest)")
    if up is not None:
        up = up & ~special
        if saturate:
            up = up & (e != 0xFE)
        e = e + up.to(nee.int32)
    # e in 0..255: 255 is NaN, 0 is 2**-127 (a float32 subnormal), else the float32 with that exponent
    val = nee.bitwise_left_shift(e, i32(23)).view(nee.float32)
    val = nee.where(e == 0, nee.full((), 2.0 ** -127, dtype=nee.float32), val)
    return nee.where(special | (e == 0xFF), nee.full((), float("nan"), dtype=nee.float32), val)


@op("BitCast")
def _bitcast(ctx, node, x):
    to = onnx_np(node.get("to"))
    d = nee_dtype(to)
    src = (ctx.program.declared_np(node.inputs[0]) if ctx.program is not None else None) or x.dtype.np
    if x.ndim == 0:
        return _bitcast(ctx, node, x.reshape(1)).reshape(())
    if carry_np(to) == to and carry_np(src) == src:
        if d.itemsize != x.dtype.itemsize:
            raise LoweringError(f"BitCast {src.name} -> {to.name}: the types' sizes differ")
        return x.contiguous().view(d)
    # a type carried in a wider one (uint16/uint32 in int32/int64): through the signed int of its size
    n = np.dtype(src).itemsize
    if n != np.dtype(to).itemsize or n not in (2, 4, 8) or src.kind not in "iuf" or to.kind not in "iuf":
        raise LoweringError(f"BitCast {src.name} -> {to.name} is not supported")
    sint = {2: nee.int16, 4: nee.int32, 8: nee.int64}[n]
    if x.dtype.itemsize == n:
        bits = x.contiguous().view(sint)
    else:  # unsigned values held wider: wrap the top half to negative
        top = float(1 << (8 * n))
        bits = nee.where(x >= (1 << (8 * n - 1)), x - int(top), x).to(sint)
    if d.itemsize == n:
        return bits.view(d)
    y = bits.to(d)
    return nee.where(y < 0, y + (1 << (8 * n)), y)


@op("CastLike")
def _castlike(ctx, node, x, like):
    to = ctx.program.declared_np(node.inputs[1]) if ctx.program is not None else None
    if to is not None:
        return _cast_to(x, to, node.get("saturate", 1))
    return x.to(like.dtype) if x.dtype is not like.dtype else x


# (mantissa bits, min normal exponent, max finite, finite-only "fn", unsigned-zero "uz")
_F8 = {"float8_e4m3fn": (3, -6, 448.0, True, False), "float8_e4m3fnuz": (3, -7, 240.0, True, True),
       "float8_e5m2": (2, -14, 57344.0, False, False), "float8_e5m2fnuz": (2, -15, 57344.0, True, True),
       "float4_e2m1fn": (1, 0, 6.0, True, False),
       "bfloat16": (7, -126, float(np.finfo(np.float32).max), False, False)}
_SMALL_INT = {"int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3)}


@functools.cache
def _float_oor_zero() -> bool:
    """Whether the installed ml_dtypes casts an out-of-range float to 0 in its 4-bit / 2-bit integer types."""
    import ml_dtypes
    with np.errstate(all="ignore"):
        return int(np.array([9.0], np.float32).astype(ml_dtypes.int4)[0]) == 0


def _pow2(e):
    """2**e for an int32 tensor of exponents in the normal float32 range, exactly (built from bits)."""
    return ((e + 127) * (1 << 23)).to(nee.int32).view(nee.float32)


def _round_float(x, name, saturate=1):
    """Round float values to the float format ``name`` (nearest even), held in float32."""
    m, emin, fmax, fn, uz = _F8[name]
    x = x.to(nee.float32) if x.dtype is not nee.float32 else x
    bits = x.view(nee.int32)
    e = nee.bitwise_and(nee.bitwise_right_shift(bits, nee.full((), 23, dtype=nee.int32)),
                        nee.full((), 255, dtype=nee.int32)) - 127
    e = nee.maximum(e, nee.full((), emin, dtype=nee.int32))
    q = _pow2(e - m)
    y = nee.round(x / q) * q
    finite = nee.isfinite(x)
    y = nee.where(finite, y, x)
    big = nee.abs(y) > fmax
    if name == "bfloat16":
        return y
    if saturate:
        y = nee.where(big & finite, nee.sign(y) * fmax, y)
        if fn or name == "float8_e5m2":
            y = nee.where(nee.isinf(x), nee.sign(x) * fmax, y)
    else:
        over = nee.full((), float("nan") if fn else float("inf"), dtype=nee.float32)
        y = nee.where(big, over * nee.sign(y) if not fn else over, y)
        if fn:
            y = nee.where(nee.isinf(x), over, y)
    if uz:
        y = y + 0.0  # no negative zero
        y = nee.where(y == 0, nee.zeros((), dtype=nee.float32), y)
    return y


def _cast_to(x, to, saturate=1):
    c = carry_np(to)
    if c is None:
        raise LoweringError(f"Cast to {np.dtype(to).name} is not supported")
    d = nee_dtype(to)
    if to.name in _F8:
        if not x.dtype.is_floating_point:
            x = x.to(nee.float32)
        return _round_float(x, to.name, saturate)
    if to.name in _SMALL_INT:
        # ONNX: integers keep their low bits (wrap); floats are truncated, and out of range they are undefined by
        # the spec: as ml_dtypes (these dtypes' numpy types, and the source of ONNX's expected outputs) casts
        # them: 0 (NaN and infinities included) from ml_dtypes 0.5 on, the low bits before
        lo, hi = _SMALL_INT[to.name]
        if x.dtype.is_floating_point:
            t = nee.trunc(x.to(nee.float32))
            if _float_oor_zero():
                inside = (t >= float(lo)) & (t <= float(hi))       # (False for NaN)
                return nee.where(inside, t, nee.zeros((), dtype=nee.float32)).to(d)
            y = nee.where(nee.isfinite(t), t, nee.zeros((), dtype=nee.float32)).to(nee.int64)
        else:
            y = x.to(nee.int64)
        span = hi - lo + 1
        return (nee.remainder(y - lo, span) + lo).to(d)
    if to.name.startswith(("float8", "float4")):
        raise LoweringError(f"Cast to {to.name} is not supported (neetorch has no {to.name} dtype to round to)")
    if x.dtype.is_floating_point and not d.is_floating_point and d is not nee.bool:
        x = nee.trunc(x)
    return x.to(d) if x.dtype is not d else x


# ---------------------------------------------------------------- softmax family
def _axis_flat(ctx, node, x, fn):
    axis = node.get("axis", -1 if ctx.opset >= 13 else 1)
    if ctx.opset >= 13:
        return fn(x, axis % max(x.ndim, 1) if x.ndim else 0)
    # opset < 13: coerce to 2-D at axis
    axis = axis % max(x.ndim, 1)
    shp = tuple(x.shape)
    n = int(np.prod(shp[:axis], dtype=np.int64))
    return fn(x.reshape(n, -1), 1).reshape(*shp)


@op("Softmax")
def _softmax(ctx, node, x):
    return _axis_flat(ctx, node, x, lambda t, d: nee.softmax(t, d))


@op("LogSoftmax")
def _logsoftmax(ctx, node, x):
    return _axis_flat(ctx, node, x, lambda t, d: nee.log_softmax(t, d))


@op("Hardmax")
def _hardmax(ctx, node, x):
    def hm(t, d):
        if t.shape[d] == 0:     # nothing to pick along an empty axis: the empty result, as onnxruntime
            return nee.zeros(*t.shape, dtype=t.dtype)
        idx = nee.argmax(t, d, keepdim=True)
        ar = nee.arange(t.shape[d], device=t.device).reshape(*([-1] + [1] * (t.ndim - 1 - d)))
        return (ar == idx).to(t.dtype)
    return _axis_flat(ctx, node, x, hm)


# ---------------------------------------------------------------- reductions
def _axes(ctx, node, x, axes_in, input_since):
    if axes_in is not None and ctx.opset >= input_since:
        axes = ctx.ints(axes_in)
    else:
        axes = node.get("axes")
    if not axes:
        if node.get("noop_with_empty_axes", 0):
            return None
        return tuple(range(x.ndim))
    return tuple(sorted(a % x.ndim for a in axes))


def _reduce(kind, input_since=18):
    def f(ctx, node, x, axes_in=None):
        since = 13 if kind == "sum" else input_since
        dims = _axes(ctx, node, x, axes_in, since)
        keep = bool(node.get("keepdims", 1))
        if dims is None:
            if kind in ("l1",):
                return nee.abs(x)
            if kind in ("sumsq",):
                return x * x
            if kind == "l2":
                return nee.abs(x)
            if kind == "logsum":
                return nee.log(x)
            return x
        if x.ndim == 0:
            dims = ()
        if x.numel() == 0 and kind in ("max", "min", "logsumexp", "sum", "prod", "mean", "l1", "l2", "sumsq",
                                         "logsum"):
            shp = [1 if i in dims else s for i, s in enumerate(x.shape)] if keep else \
                [s for i, s in enumerate(x.shape) if i not in dims]
            # the mean of nothing: 0, as onnxruntime (the spec leaves it undefined; PyTorch's embedding_bag "mean"
            # of an empty bag, exported as a Loop of ReduceMean, is 0)
            val = {"max": -math.inf, "min": math.inf, "logsumexp": -math.inf, "logsum": -math.inf,
                   "prod": 1}.get(kind, 0)
            if x.dtype is nee.bool and kind in ("max", "min"):
                val = kind == "min"
            elif not _isfloat(x) and kind in ("max", "min"):
                info = np.iinfo(x.dtype.np)
                val = info.min if kind == "max" else info.max
            return nee.full(tuple(shp), val, dtype=x.dtype, device=x.device)
        if not dims:
            # nothing to reduce over (a scalar input): each element's own term, as onnxruntime
            # (ReduceSumSquare(-5) = 25, ReduceL1(-0.25) = 0.25, ReduceLogSum(x) = log(x))
            r = {"l1": nee.abs, "l2": nee.abs, "sumsq": lambda t: t * t, "logsum": nee.log}.get(kind, lambda t: t)(x)
        elif kind == "sum":
            r = nee.sum(x, dims, keepdim=keep)
        elif kind == "mean" and not _isfloat(x):
            # integer ReduceMean (opset 18's int32 / int64 ...): the sum divided in the type, truncated as
            # onnxruntime's (13 / 4 -> 3, -13 / 4 -> -3)
            cnt = int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
            r = nee.div(nee.sum(x, dims, keepdim=keep), cnt, rounding_mode="trunc")
        elif kind == "mean":
            r = nee.mean(x, dims, keepdim=keep)
        elif kind == "max":
            r = nee.amax(x, dims, keepdim=keep) if x.dtype is not nee.bool else \
                nee.amax(x.to(nee.uint8), dims, keepdim=keep).to(nee.bool)
        elif kind == "min":
            r = nee.amin(x, dims, keepdim=keep) if x.dtype is not nee.bool else \
                nee.amin(x.to(nee.uint8), dims, keepdim=keep).to(nee.bool)
        elif kind == "prod":
            r = x
            for d in sorted(dims, reverse=True):
                r = nee.prod(r, d, keepdim=keep)
        elif kind == "l1":
            r = nee.sum(nee.abs(x), dims, keepdim=keep)
        elif kind == "l2":
            r = nee.sqrt(nee.sum(x * x, dims, keepdim=keep).to(nee.float64 if not _isfloat(x) else x.dtype))
        elif kind == "sumsq":
            r = nee.sum(x * x, dims, keepdim=keep)
        elif kind == "logsum":
            r = nee.log(nee.sum(x, dims, keepdim=keep))
        elif kind == "logsumexp":
            m = nee.amax(x, dims, keepdim=True)
            m = nee.where(nee.isinf(m), nee.zeros((), dtype=x.dtype), m)
            r = nee.log(nee.sum(nee.exp(x - m), dims, keepdim=True)) + m
            if not keep:
                for d in sorted(dims, reverse=True):
                    r = r.squeeze(d)
        else:
            raise LoweringError(kind)
        if r.dtype is not x.dtype:
            r = r.to(x.dtype)
        return r
    return f


for _k, _v in {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
               "ReduceProd": "prod", "ReduceL1": "l1", "ReduceL2": "l2", "ReduceSumSquare": "sumsq",
               "ReduceLogSum": "logsum", "ReduceLogSumExp": "logsumexp"}.items():
    op(_k)(_reduce(_v))


def _arg(fn_name):
    def f(ctx, node, x):
        axis = node.get("axis", 0) % max(x.ndim, 1)
        keep = bool(node.get("keepdims", 1))
        if node.get("select_last_index", 0):
            xf = x.flip(axis)
            r = getattr(nee, fn_name)(xf, axis, keepdim=keep)
            r = (x.shape[axis] - 1) - r
        else:
            r = getattr(nee, fn_name)(x, axis, keepdim=keep)
        return r.to(nee.int64) if r.dtype is not nee.int64 else r
    return f


op("ArgMax")(_arg("argmax"))
op("ArgMin")(_arg("argmin"))


@op("CumSum")
def _cumsum(ctx, node, x, axis):
    d = int(ctx.scalar(axis)) % max(x.ndim, 1)
    if node.get("reverse", 0):
        x = x.flip(d)
    r = nee.cumsum(x, d)
    if r.dtype is not x.dtype:
        r = r.to(x.dtype)
    if node.get("exclusive", 0):
        r = r - x
    if node.get("reverse", 0):
        r = r.flip(d)
    return r


# ---------------------------------------------------------------- matrix products
@op("MatMul")
def _matmul(ctx, node, a, b):
    if a.ndim == 0 or b.ndim == 0:
        raise LoweringError("MatMul of a 0-d tensor")
    return nee.matmul(a, b)


@op("MatMulInteger")
def _matmulint(ctx, node, a, b, az=None, bz=None):
    a32 = a.to(nee.int32)
    b32 = b.to(nee.int32)
    if az is not None:
        a32 = a32 - (az.to(nee.int32).reshape(-1, 1) if az.ndim == 1 and az.shape[0] > 1 else az.to(nee.int32))
    if bz is not None:
        b32 = b32 - bz.to(nee.int32)
    return nee.matmul(a32.to(nee.float64), b32.to(nee.float64)).to(nee.int32)


@op("Gemm")
def _gemm(ctx, node, a, b, c=None):
    if node.get("transA", 0):
        a = a.transpose(0, 1)
    if node.get("transB", 0):
        b = b.transpose(0, 1)
    alpha, beta = node.get("alpha", 1.0), node.get("beta", 1.0)
    r = nee.matmul(a, b)
    if alpha != 1.0:
        r = r * alpha
    if c is not None:
        r = r + (c * beta if beta != 1.0 else c)
    return r


@op("Einsum")
def _einsum(ctx, node, *xs):
    return nee.einsum(node.get("equation").replace(" ", ""), *xs)




@op("CumProd")
def _cumprod(ctx, node, x, axis):
    d = int(ctx.scalar(axis)) % max(x.ndim, 1)
    rev, exc = node.get("reverse", 0), node.get("exclusive", 0)
    if rev:
        x = x.flip(d)
    if exc:
        one = nee.ones([1 if i == d else s for i, s in enumerate(x.shape)], dtype=x.dtype)
        x = nee.cat([one, x.narrow(d, 0, x.shape[d] - 1)], d) if x.shape[d] else x
    r = nee.cumprod(x, d)
    if r.dtype is not x.dtype:
        r = r.to(x.dtype)
    return r.flip(d) if rev else r


@op("Swish")
def _swish(ctx, node, x):
    return x * nee.sigmoid(x * node.get("alpha", 1.0))


def _window(kind):
    def f(ctx, node, size):
        n = int(ctx.scalar(size))
        periodic = node.get("periodic", 1)
        N = n if periodic else n - 1
        i = np.arange(n, dtype=np.float64)
        if kind == "hann":
            w = np.sin(np.pi * i / N) ** 2 if N else np.ones(n)
        elif kind == "hamming":
            a0 = 25.0 / 46.0
            w = a0 - (1 - a0) * np.cos(2 * np.pi * i / N) if N else np.ones(n)
        else:
            w = 0.42 - 0.5 * np.cos(2 * np.pi * i / N) + 0.08 * np.cos(4 * np.pi * i / N) if N else np.ones(n)
        return ctx.const(w.astype(onnx_np(node.get("output_datatype", 1))))
    return f


op("HannWindow")(_window("hann"))
op("HammingWindow")(_window("hamming"))
op("BlackmanWindow")(_window("blackman"))


def _q_axis(x, s, axis, block):
    """Broadcast a per-axis / per-block scale or zero point against x."""
    if s.ndim == 0 or s.numel() == 1 and s.ndim <= 1:
        return s.reshape(())
    axis %= x.ndim
    if block:
        s = nee.repeat_interleave(s, block, dim=axis).narrow(axis, 0, x.shape[axis])
        return s
    return s.reshape(*([-1] + [1] * (x.ndim - 1 - axis)))


@op("QuantizeLinear", "com.microsoft:QuantizeLinear")  # onnxruntime's contrib copy (16-bit / 4-bit QDQ)
def _quantize(ctx, node, x, scale, zp=None):
    axis, block = node.get("axis", 1), node.get("block_size", 0)
    if zp is None:
        out_np = onnx_np(node.get("output_dtype", 2)) if node.get("output_dtype") else np.dtype(np.uint8)
        lo_hi_dt = out_np
        zf = None
    else:
        lo_hi_dt = zp.dtype.np
        zf = _q_axis(x, zp, axis, block).to(nee.float32)
    if zp is not None and node.get("output_dtype"):
        lo_hi_dt = onnx_np(node.get("output_dtype"))
    elif zp is not None and ctx.program is not None:
        lo_hi_dt = ctx.program.declared_np(node.inputs[2]) or lo_hi_dt
    # x / y_scale: from opset 23 in ``precision``, else y_scale's type, both operands cast to it (the spec, ONNX's
    # reference with ``precision`` and onnxruntime: a float16 scale divides in float16, -1.3082559 / 0.007812 =
    # -167.5, not -167.45676); before, onnxruntime divides in float32 (ONNX's reference: in x's type)
    pname = "float32"
    if ctx.opset >= 23 and node.key == "QuantizeLinear":
        if node.get("precision"):
            pname = onnx_np(node.get("precision")).name
        else:
            pname = ((ctx.program.declared_np(node.inputs[1]) if ctx.program is not None else None)
                     or scale.dtype.np).name
    s = _q_axis(x, scale, axis, block)
    if pname == "bfloat16":  # carried in float32: the operands and the quotient rounded to bfloat16
        q = _round_float(_round_float(x, pname) / _round_float(s, pname), pname)
    else:
        pdt = getattr(nee, pname) if pname in ("float16", "float64") else nee.float32
        q = x.to(pdt) / s.to(pdt)
    if lo_hi_dt.name in _F8:
        return _round_float(q.to(nee.float32), lo_hi_dt.name, node.get("saturate", 1))
    if not (lo_hi_dt.kind in "iu" or lo_hi_dt.name in ("int4", "uint4", "int2", "uint2")):
        raise LoweringError(f"QuantizeLinear to {lo_hi_dt.name} is not supported")
    info = ml_iinfo(lo_hi_dt)
    y = nee.round(q).to(nee.float32)
    if zf is not None:
        y = y + zf
    y = nee.clamp(y, float(info.min), float(info.max))
    return y.to(nee_dtype(lo_hi_dt))


@op("QLinearMatMul")
def _qlmm(ctx, node, a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp):
    af = (a.to(nee.float32) - a_zp.to(nee.float32).reshape(-1, 1) if a_zp.numel() > 1 else
          a.to(nee.float32) - a_zp.to(nee.float32)) * (a_s.to(nee.float32).reshape(-1, 1) if a_s.numel() > 1
                                                         else a_s.to(nee.float32))
    bf = (b.to(nee.float32) - b_zp.to(nee.float32)) * b_s.to(nee.float32)
    y = nee.matmul(af, bf) / y_s.to(nee.float32)
    y = nee.round(y) + y_zp.to(nee.float32)
    info = np.iinfo(y_zp.dtype.np)
    return nee.clamp(y, float(info.min), float(info.max)).to(y_zp.dtype)


def ml_iinfo(dt):
    try:
        return np.iinfo(dt)
    except ValueError:
        import ml_dtypes
        return ml_dtypes.iinfo(dt)


@op("DequantizeLinear", "com.microsoft:DequantizeLinear")
def _dequantize(ctx, node, x, scale, zp=None):
    axis, block = node.get("axis", 1), node.get("block_size", 0)
    xf = x.to(nee.float32)
    if zp is not None:
        xf = xf - _q_axis(x, zp, axis, block).to(nee.float32)
    s = _q_axis(x, scale, axis, block)
    y = xf * s.to(nee.float32)
    if node.get("output_dtype"):  # opset 23+: the output type, not the scale's (computed in float32 all the same)
        return _cast_to(y, onnx_np(node.get("output_dtype")))
    return y.to(scale.dtype)


def dynamic_quant(x):
    """DynamicQuantizeLinear's rule (onnxruntime's): (the uint8 values as floats, scale, zero point as a float) over
    the range of ``x`` widened to hold 0; an empty range (all zeros, or no elements) has scale 1 (ONNX's reference:
    1 / 255; the spec: 0)."""
    zero = nee.zeros((), dtype=x.dtype)
    if x.numel() == 0:
        lo = hi = zero
    else:
        lo = nee.minimum(nee.amin(x, tuple(range(x.ndim))), zero)
        hi = nee.maximum(nee.amax(x, tuple(range(x.ndim))), zero)
    scale = nee.where(hi == lo, nee.ones((), dtype=x.dtype), (hi - lo) / 255.0)
    zp = nee.round(nee.clamp(0.0 - lo / scale, 0.0, 255.0))
    return nee.clamp(nee.round(x / scale) + zp, 0.0, 255.0), scale, zp


@op("DynamicQuantizeLinear")
def _dql(ctx, node, x):
    y, scale, zp = dynamic_quant(x)
    return y.to(nee.uint8), scale, zp.to(nee.uint8)


@op("DFT")
def _dft(ctx, node, x, dft_length=None, axis=None):
    if ctx.opset >= 20:
        ax = int(ctx.scalar(axis, -2))
    else:
        ax = node.get("axis", 1)
    inverse, onesided = node.get("inverse", 0), node.get("onesided", 0)
    nd = x.ndim
    ax %= nd
    if ax == nd - 1:
        raise LoweringError("DFT axis cannot be the complex (last) axis")
    xr = x.narrow(nd - 1, 0, 1).squeeze(nd - 1)
    xi = x.narrow(nd - 1, 1, 1).squeeze(nd - 1) if x.shape[-1] == 2 else None
    xr = xr.movedim(ax, -1)
    xi = xi.movedim(ax, -1) if xi is not None else None
    out_dt = xr.dtype
    xr = xr.to(nee.float64)  # accumulate in float64: ONNX's rule has atol 1e-7
    xi = xi.to(nee.float64) if xi is not None else None
    N = xr.shape[-1]
    if inverse and onesided:  # irfft: rebuild the full spectrum by Hermitian symmetry
        n = int(ctx.scalar(dft_length)) if dft_length is not None else 2 * (N - 1)
        m = n - N
        if m > 0:
            idx = ctx.const(np.arange(N - 1 - (1 if n % 2 == 0 else 0), 0, -1)[:m].astype(np.int64))
            tail_r = nee.index_select(xr, xr.ndim - 1, idx)
            tail_i = -nee.index_select(xi, xi.ndim - 1, idx) if xi is not None else None
            xr = nee.cat([xr, tail_r], -1)
            xi = nee.cat([xi, tail_i], -1) if xi is not None else None
        else:
            xr = xr.narrow(xr.ndim - 1, 0, n)
            xi = xi.narrow(xi.ndim - 1, 0, n) if xi is not None else None
        N = n
        dft_length = None
        onesided = 0
        real_out = True
    else:
        real_out = False
    n = int(ctx.scalar(dft_length)) if dft_length is not None else N
    if n != N:
        if n < N:
            xr = xr.narrow(xr.ndim - 1, 0, n)
            xi = xi.narrow(xi.ndim - 1, 0, n) if xi is not None else None
        else:
            xr = nee.pad(xr, (0, n - N), mode="constant", value=0.0)
            xi = nee.pad(xi, (0, n - N), mode="constant", value=0.0) if xi is not None else None
    k = np.arange(n)
    ang = 2 * np.pi * np.outer(k, k) / n  # [j, k]
    dt = np.float64
    C, S = ctx.const(np.cos(ang).astype(dt)), ctx.const(np.sin(ang).astype(dt))
    if inverse:
        re = nee.matmul(xr, C) - (nee.matmul(xi, S) if xi is not None else 0.0)
        im = nee.matmul(xr, S) + (nee.matmul(xi, C) if xi is not None else 0.0)
        re, im = re / float(n), im / float(n)
    else:
        re = nee.matmul(xr, C) + (nee.matmul(xi, S) if xi is not None else 0.0)
        im = (nee.matmul(xi, C) if xi is not None else 0.0) - nee.matmul(xr, S)
    if not isinstance(im, nee.Tensor):
        im = -nee.matmul(xr, S)
    if onesided:
        m = n // 2 + 1
        re, im = re.narrow(re.ndim - 1, 0, m), im.narrow(im.ndim - 1, 0, m)
    re, im = re.movedim(-1, ax).to(out_dt), im.movedim(-1, ax).to(out_dt)
    if real_out:
        return re.unsqueeze(-1)
    return nee.stack([re, im], -1)


@op("Det")
def _det(ctx, node, x):
    """Leibniz expansion over static permutations (all nee ops; small matrices only)."""
    import itertools
    n = x.shape[-1]
    if n > 6:
        raise LoweringError(f"Det of {n}x{n} matrices is not supported (Leibniz expansion limited to n <= 6)")
    if n == 0:
        return nee.ones(tuple(x.shape[:-2]), dtype=x.dtype)
    cols = [x.narrow(x.ndim - 2, i, 1).squeeze(x.ndim - 2) for i in range(n)]  # rows: [..., n]
    acc = None
    for perm in itertools.permutations(range(n)):
        inv = sum(1 for i in range(n) for j in range(i + 1, n) if perm[i] > perm[j])
        term = None
        for i, p in enumerate(perm):
            v = cols[i].narrow(cols[i].ndim - 1, p, 1).squeeze(cols[i].ndim - 1)
            term = v if term is None else term * v
        term = -term if inv % 2 else term
        acc = term if acc is None else acc + term
    return acc
