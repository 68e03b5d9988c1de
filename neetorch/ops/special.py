"""Elementwise special functions written as compositions of existing ops, and ``finfo`` / ``iinfo``.

``erfinv``, ``logit``, ``logaddexp``/``logaddexp2``, ``nan_to_num``, ``nextafter``, ``heaviside``, ``sinc``,
``deg2rad``/``rad2deg``: each is a handful of existing elementwise ops (``where``, ``log1p``, ``erf``, a
bit-level ``view``...), so it runs on every device that runs those, traces as those nodes and fuses under
``@nee.jit`` into one kernel; none needs a kernel of its own.  Float16 inputs compute in float32 and round
once at the end (PyTorch's "opmath" for half on the CPU).  Dtype rules and errors follow PyTorch: integer and
bool inputs of the unary functions compute in the default float dtype; ``logaddexp`` takes floating and
complex tensors, ``logaddexp2``/``nextafter`` floating tensors only; ``heaviside`` wants one dtype for both operands.
"""
from __future__ import annotations

import math

import numpy as np

from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor
from .registry import EXPORTS, export

__all__ = [
    "deg2rad",
    "erfinv",
    "finfo",
    "heaviside",
    "iinfo",
    "logaddexp",
    "logaddexp2",
    "logit",
    "nan_to_num",
    "nextafter",
    "rad2deg",
    "sinc",
]


def _E(name):
    return EXPORTS[name][0]


def _tensor_arg(op, name, pos, x):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}(): argument '{name}' (position {pos}) must be Tensor, not {type(x).__name__}")


def _to_float(x: Tensor):
    """(x in its compute dtype, result dtype): ints and bools -> the default float dtype; float16 computes
    in float32 and is rounded back once at the end."""
    if x._dtype.category == 3:   # (torch: erfinv / logit / deg2rad / rad2deg refuse complex operands)
        raise NotImplementedError(f"{_caller()}: not implemented for complex tensors (got {x._dtype.name})")
    odt = x._dtype if x._dtype.category == 2 else _dt.get_default_dtype()
    cdt = _dt.compute_dtype(odt)
    return (x if x._dtype is cdt else x.to(cdt)), odt


def _caller() -> str:
    import sys
    return sys._getframe(2).f_code.co_name


def _back(r: Tensor, odt) -> Tensor:
    return r if r._dtype is odt else r.to(odt)


# ------------------------------------------------------------------ erfinv
# Pavlis's rational approximation (calc_erfinv's), then Newton steps: on erf in the centre, on erfc in the tails
# (float32 computed in float64; torch's MKL erfinv is within a few ulp everywhere).
_EA = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
_EB = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
_EC = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
_ED = (3.543889200, 1.637067800)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


@export(inplace=True)
def erfinv(input):
    """``torch.erfinv``: the inverse error function on (-1, 1); ``±1`` give ``±inf``, ``|x| > 1`` NaN.
    Integer and bool inputs give the default float dtype."""
    _tensor_arg("erfinv", "input", 1, input)
    where, copysign = _E("where"), _E("copysign")
    y, odt = _to_float(input)
    if odt is _dt.float32:
        # torch's float32 erfinv is correctly rounded (within 0.5 ulp of the true value): in float32 the Newton
        # steps below cannot repair the start near +-1 (erf is flat to float32 there), off by up to ~60 ulp
        y = y.to(_dt.float64)
    ya = y.abs()
    z = y * y
    central = y * (((_EA[3] * z + _EA[2]) * z + _EA[1]) * z + _EA[0]) / \
        ((((_EB[3] * z + _EB[2]) * z + _EB[1]) * z + _EB[0]) * z + 1.0)
    # the tail branch is evaluated everywhere: keep its log argument positive where it is not selected
    inner = where(ya <= 0.7, 0.5, (1.0 - ya) / 2.0)
    zt = (-inner.log()).sqrt()
    tail = copysign(((_EC[3] * zt + _EC[2]) * zt + _EC[1]) * zt + _EC[0], y) / ((_ED[1] * zt + _ED[0]) * zt + 1.0)
    for _ in range(2):
        central = central - (central.erf() - y) / (_TWO_OVER_SQRT_PI * (-(central * central)).exp())
    # the tail's Newton steps on erfc(|x|) = 1 - |y| (exact): erf(x) - y loses all digits as |y| -> 1 (torch's
    # MKL erfinv is within a few ulp there; steps on erf were off by up to 1e11 ulp at 1 - 1e-15)
    q = 1.0 - ya
    t = tail.abs()
    for _ in range(3):    # (the rational start is poorer far out: 2 steps leave ~4000 ulp at 1 - 1e-16)
        t = t + (t.erfc() - q) / (_TWO_OVER_SQRT_PI * (-(t * t)).exp())
    x = where(ya <= 0.7, central, copysign(t, y))
    x = where(ya == 1.0, copysign(math.inf, y), x)
    x = where(ya > 1.0, math.nan, x)
    return _back(x, odt)


# ------------------------------------------------------------------ logit
@export(inplace=True)
def logit(input, eps=None):
    """``torch.logit``: ``log(z / (1 - z))`` with ``z`` clamped to ``[eps, 1 - eps]`` when ``eps`` is given
    (NaN passes through); integer and bool inputs give the default float dtype."""
    _tensor_arg("logit", "input", 1, input)
    x, odt = _to_float(input)
    if odt in _dt.LOW_FLOATS:
        # torch's float16/bfloat16 logit rounds each step to the input dtype (eps, 1 - eps, 1 - x, x / (1 - x))
        x = x.to(odt)
    if eps is not None:
        lo = float(eps)
        hi = 1.0 - lo
        if odt in _dt.LOW_FLOATS:
            lo = float(np.asarray(lo, dtype=np.float32).astype(odt.np))
            hi = float(np.asarray(1.0 - lo, dtype=np.float32).astype(odt.np))
        where = _E("where")
        x = where(x < lo, lo, where(x > hi, hi, x))
    return _back((x / (1.0 - x)).log(), odt)


# ------------------------------------------------------------------ logaddexp / logaddexp2
def _logaddexp(name, input, other, base2):
    _tensor_arg(name, "input", 1, input)
    _tensor_arg(name, "other", 2, other)
    rt = _dt.result_type(input, other)
    if rt.category == 3 and not base2:
        # torch's complex logaddexp (_log_add_exp_helper, shared with logcumsumexp); torch has no complex
        # logaddexp2 ('"logaddexp2_cpu" not implemented for 'ComplexFloat'')
        from .shape_rules import broadcast_shapes
        from .statistics import _complex_logaddexp
        broadcast_shapes(input.shape, other.shape, op=name)   # (the error names logaddexp, not an inner op)
        return _complex_logaddexp(input.to(rt), other.to(rt))
    if rt.category != 2:
        raise _dt.DTypeNotImplementedError(f"{name}(): not implemented for {rt.name} inputs (got {input._dtype.name} and "
                        f"{other._dtype.name}); floating point {'' if base2 else 'and complex '}tensors only")
    cdt = _dt.compute_dtype(rt)
    a, b = input.to(cdt), other.to(cdt)
    m = _E("maximum")(a, b)
    d = -(a - b).abs()
    r = m + (d.exp2().log1p() * (1.0 / math.log(2.0)) if base2 else d.exp().log1p())
    # equal infinities: a - b is NaN, the answer is that infinity
    r = _E("where")(_E("logical_and")(a.isinf(), a == b), a, r)
    return _back(r, rt)


@export
def logaddexp(input, other):
    """``torch.logaddexp``: ``log(exp(input) + exp(other))`` without overflow (floating and complex tensors;
    complex as torch: ``log1p(exp(min - max)) + max`` with min/max by real part, NaN+NaNj if any part is NaN, equal
    infinite real parts give ``min`` (-inf) or ``log(exp(min) + exp(max))`` (+inf))."""
    return _logaddexp("logaddexp", input, other, False)


@export
def logaddexp2(input, other):
    """``torch.logaddexp2``: ``log2(2**input + 2**other)`` without overflow (floating tensors)."""
    return _logaddexp("logaddexp2", input, other, True)


# ------------------------------------------------------------------ nan_to_num
def _fit(v: float, dt) -> float:
    # the replacement is cast to the tensor's dtype like torch does (1e10 in float16 is inf)
    with np.errstate(over="ignore"):
        return float(np.array(v, dtype=np.float64).astype(dt.np))


@export(inplace=True)
def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """``torch.nan_to_num``: NaN -> ``nan``, +inf -> ``posinf`` (default: the dtype's largest finite value),
    -inf -> ``neginf`` (default: the most negative finite value).  Integer and bool tensors are returned as a
    copy."""
    _tensor_arg("nan_to_num", "input", 1, input)
    dt = input._dtype
    if dt.category == 3:   # torch: the real and imaginary parts each (the bounds of the component dtype)
        from .complex import complex as _complex, imag as _imag, real as _real
        return _complex(nan_to_num(_real(input), nan, posinf, neginf), nan_to_num(_imag(input), nan, posinf, neginf))
    if dt.category != 2:
        return input.clone()
    fi = _dt.finfo_np(dt.np)
    nan = _fit(0.0 if nan is None else nan, dt)
    posinf = float(fi.max) if posinf is None else _fit(posinf, dt)
    neginf = float(fi.min) if neginf is None else _fit(neginf, dt)
    where = _E("where")
    r = where(input == math.inf, posinf, input)
    r = where(input == -math.inf, neginf, r)
    return where(input.isnan(), nan, r)


# ------------------------------------------------------------------ nextafter
_BITS = {"float16": "int16", "bfloat16": "int16", "float32": "int32", "float64": "int64"}


@export(inplace=True)
def nextafter(input, other):
    """``torch.nextafter``: the next representable value after ``input`` towards ``other`` (floating
    tensors; the step is taken on the bit pattern, so subnormals and ``±inf`` come out exactly)."""
    _tensor_arg("nextafter", "input", 1, input)
    _tensor_arg("nextafter", "other", 2, other)
    rt = _dt.result_type(input, other)
    if rt.category != 2:
        raise _dt.DTypeNotImplementedError(f"nextafter(): not implemented for {rt.name} inputs (got {input._dtype.name} and "
                        f"{other._dtype.name}); floating point tensors only")
    where = _E("where")
    a, b = input.to(rt), other.to(rt)
    bits = a.view(_dt.to_dtype(_BITS[rt.name]))
    step = where((a < b) == (a > 0), 1, -1).to(bits._dtype)
    r = (bits + step).view(rt)
    # from 0 the step is the smallest subnormal with other's sign (0-d tensors: a Python float would round
    # through the default dtype and flush a float64 subnormal to zero)
    from ..tensor.creation import full
    tiny = float(np.array(1, dtype=_BITS[rt.name]).view(rt.np))
    pos, neg = full((), tiny, dtype=rt, device=a.device), full((), -tiny, dtype=rt, device=a.device)
    r = where(a == 0, where(b > 0, pos, neg), r)
    r = where(a == b, b, r)
    return where(_E("logical_or")(a.isnan(), b.isnan()), math.nan, r)


# ------------------------------------------------------------------ heaviside
@export(inplace=True)
def heaviside(input, values):
    """``torch.heaviside``: 0 where ``input < 0``, ``values`` where ``input == 0``, 1 where ``input > 0``
    (NaN gives 0); both tensors must have the same dtype."""
    _tensor_arg("heaviside", "input", 1, input)
    _tensor_arg("heaviside", "values", 2, values)
    if input._dtype is not values._dtype:
        raise RuntimeError(f"heaviside is not yet implemented for tensors with different dtypes (got "
                           f"{input._dtype.name} and {values._dtype.name})")
    return _E("where")(input == 0, values, (input > 0).to(input._dtype))


# ------------------------------------------------------------------ sinc / angle conversions
@export(inplace=True)
def sinc(input):
    """``torch.sinc``: ``sin(pi x) / (pi x)``, 1 at 0; integer and bool inputs give the default float dtype."""
    _tensor_arg("sinc", "input", 1, input)
    if input._dtype.category == 3:   # complex: the same formula in complex arithmetic (torch supports it)
        p = input * math.pi
        return _E("where")(input == 0, Tensor.new_ones(input, tuple(input.shape)), p.sin() / p)
    x, odt = _to_float(input)
    p = x * math.pi
    return _back(_E("where")(x == 0, 1.0, p.sin() / p), odt)


@export(inplace=True)
def deg2rad(input):
    """``torch.deg2rad``: ``input * pi / 180``; integer and bool inputs give the default float dtype."""
    _tensor_arg("deg2rad", "input", 1, input)
    x, odt = _to_float(input)
    return _back(x * 0.017453292519943295, odt)


@export(inplace=True)
def rad2deg(input):
    """``torch.rad2deg``: ``input * 180 / pi``; integer and bool inputs give the default float dtype."""
    _tensor_arg("rad2deg", "input", 1, input)
    x, odt = _to_float(input)
    return _back(x * 57.29577951308232, odt)


# ------------------------------------------------------------------ finfo / iinfo
def _dtype_arg(type_, who):
    if type_ is None:
        return _dt.get_default_dtype()
    if isinstance(type_, Tensor):
        raise TypeError(f"{who}(): expected a dtype, got a Tensor (use {who}(t.dtype))")
    try:
        return _dt.to_dtype(type_)
    except Exception:  # noqa: BLE001 - re-raised with the op's name
        raise TypeError(f"{who}(): expected a dtype, got {type_!r}") from None


class finfo:
    """``torch.finfo``: machine limits of a floating dtype (``bits``, ``eps``, ``max``, ``min``, ``tiny`` =
    ``smallest_normal``, ``resolution``, ``dtype``); ``nee.finfo()`` describes the default dtype."""

    __slots__ = ("bits", "dtype", "eps", "max", "min", "resolution", "smallest_normal", "tiny")

    def __init__(self, type=None):
        dt = _dtype_arg(type, "finfo")
        if dt.category == 3:   # torch: a complex dtype describes its real components (complex64: float32)
            dt = _dt.to_dtype(np.dtype(dt.np).type(0).real.dtype)
        if dt.category != 2:
            raise TypeError(f"finfo() requires a floating point input type (got {dt.name}). Use nee.iinfo to "
                            f"handle {dt.name}")
        fi = _dt.finfo_np(dt.np)
        self.bits = int(fi.bits)
        self.eps = float(fi.eps)
        self.max = float(fi.max)
        self.min = float(fi.min)
        self.tiny = self.smallest_normal = float(fi.smallest_normal)
        self.resolution = 10.0 ** -int(fi.precision)
        self.dtype = dt.name

    def __eq__(self, other):
        return isinstance(other, finfo) and self.dtype == other.dtype

    def __hash__(self):
        return hash(("finfo", self.dtype))

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """``torch.iinfo``: limits of an integer dtype (``bits``, ``min``, ``max``, ``dtype``); bool is refused."""

    __slots__ = ("bits", "dtype", "max", "min")

    def __init__(self, type):
        dt = _dtype_arg(type, "iinfo")
        if dt.category == 0:
            raise TypeError("iinfo(): bool is not supported by iinfo")
        if dt.category != 1:
            raise TypeError(f"iinfo() requires an integer input type (got {dt.name}). Use nee.finfo to handle "
                            f"{dt.name}")
        ii = np.iinfo(dt.np)
        self.bits, self.min, self.max, self.dtype = int(ii.bits), int(ii.min), int(ii.max), dt.name

    def __eq__(self, other):
        return isinstance(other, iinfo) and self.dtype == other.dtype

    def __hash__(self):
        return hash(("iinfo", self.dtype))

    def __repr__(self):
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


export(finfo, name="finfo", method=False)
export(iinfo, name="iinfo", method=False)
