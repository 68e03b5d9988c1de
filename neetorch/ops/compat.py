"""PyTorch's top-level aliases and small compositions: ``arccos``, ``clip``, ``isin``, ``gcd``, ``frexp``,
``trapezoid``, ``cov``, ``histogram``, ``*_scatter``, ``digamma``/``polygamma``/``i0``/``igamma``, windows...

Every function here is a composition of existing ops (``where``, ``pow``, ``cumsum``, ``searchsorted``,
``scatter_add``, views...), so it runs on every device that runs its parts, traces as those parts under
``@nee.jit`` and needs no kernel of its own.  Dtype rules and errors follow PyTorch 2.x.  Special functions
(``digamma``, ``polygamma``, ``i0``, ``igamma``) follow the Cephes algorithms PyTorch's CPU kernels use, with
fixed iteration counts instead of data-dependent loops (so they trace); float16/float32 compute in float64 and
round once.  Window functions build their values on the host (their length is a Python int).

Also here: torch's top-level forms of ``nn.functional`` ops (``torch.batch_norm``, ``torch.kl_div``... with
ATen's argument order and integer reduction enum), ``*_copy`` variants of the view ops, ``torch.<op>_(t)``
in-place forms, and process-wide switches neetorch accepts but does not need (``use_deterministic_algorithms``,
``set_float32_matmul_precision``: recorded and reported back, nothing else).

Known limit: under ``@nee.jit`` a long composition (``digamma`` ~70 ops, ``i0`` ~180, ``gcd`` ~450,
``igamma`` ~2000) fuses into one Numba kernel that takes minutes to compile today; eagerly they cost
milliseconds.
"""
from __future__ import annotations

import builtins
import itertools
import math
import warnings

import numpy as np

from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor
from .registry import EXPORTS, _trace_hook, export
from .shape_rules import broadcast_shapes as _bshapes
from .shape_rules import int_arg, wrap_dim

_bool, _int, _float, _range, _sum, _min, _max, _abs = (builtins.bool, builtins.int, builtins.float, builtins.range,
                                                        builtins.sum, builtins.min, builtins.max, builtins.abs)


def _E(name):
    return EXPORTS[name][0]


def _where(c, a, b):
    return _E("where")(c, a, b)


def _tensor_arg(op, name, pos, x):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}(): argument '{name}' (position {pos}) must be Tensor, not {type(x).__name__}")


def _full(shape, v, like: Tensor, dtype=None):
    from ..tensor.creation import full
    return full(shape, v, dtype=dtype or like._dtype, device=like._device)


def _host(a: np.ndarray, dt, device):
    from ..tensor.creation import _resolve_device, _wrap_host
    return _wrap_host(np.ascontiguousarray(a.astype(dt.np)), dt, _resolve_device(device))


def _opmath(x: Tensor):
    """(x in float64 for its computation, result dtype): ints/bools -> the default float dtype."""
    if x._dtype.category == 3:   # (torch: digamma / i0 / polygamma / mvlgamma refuse complex operands)
        import sys
        raise NotImplementedError(f"{sys._getframe(1).f_code.co_name}: not implemented for complex tensors "
                                  f"(got {x._dtype.name})")
    odt = x._dtype if x._dtype.category == 2 else _dt.get_default_dtype()
    return x.to(_dt.float64), odt


def _zl(x: Tensor) -> Tensor:
    return _E("zeros_like")(x) if "zeros_like" in EXPORTS else x.new_zeros(tuple(x.shape))


def _back(r: Tensor, odt) -> Tensor:
    return r if r._dtype is odt else r.to(odt)


def _tracing() -> bool:
    return _trace_hook[0] is not None


# ================================================================== aliases
def _alias(target, name, *, inplace=False, method=True, function=True):
    def f(*args, **kwargs):
        return _E(target)(*args, **kwargs)
    f.__name__ = name
    f.__doc__ = f"``torch.{name}``: alias of ``{target}``."
    export(f, name=name, inplace=inplace, method=method, function=function)


for _n, _t in (("arccos", "acos"), ("arcsin", "asin"), ("arctan", "atan"), ("arccosh", "acosh"),
               ("arcsinh", "asinh"), ("arctanh", "atanh")):
    _alias(_t, _n, inplace=True)

# re-export with their in-place forms (absolute_, negative_, fix_)
for _n in ("absolute", "negative", "fix"):
    _f = EXPORTS[_n][0]
    export(_f, name=_n, inplace=True)


@export
def positive(input):
    """``torch.positive``: ``input`` itself (bool tensors are refused, like torch)."""
    _tensor_arg("positive", "input", 1, input)
    if input._dtype is _dt.bool_:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input


@export(inplace=True)
def sgn(input):
    """``torch.sgn``: ``sign`` for real tensors."""
    return _E("sign")(input)


@export(method=False)
def clone(input, *, memory_format=None):
    """``torch.clone``."""
    return input.clone(memory_format=memory_format)


@export(method=False)
def detach(input):
    return input.detach()


@export(method=False)
def detach_(input):
    return input.detach_()


@export(method=False)
def broadcast_shapes(*shapes):
    """``torch.broadcast_shapes``: the broadcast of the given shapes (ints count as 1-D shapes)."""
    from .. import Size
    shapes = [(s,) if isinstance(s, (_int, np.integer)) else tuple(s) for s in shapes]
    for s in shapes:
        for d in s:
            if d < 0:
                raise RuntimeError(f"broadcast_shapes: Trying to create tensor with negative dimension {d}: {s}")
    return Size(_bshapes(*shapes, op="broadcast_shapes") if shapes else ())


@export(method=False)
def broadcast_tensors(*tensors):
    """``torch.broadcast_tensors``: views of the tensors expanded to their common shape."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    shape = _bshapes(*[tuple(t.shape) for t in tensors], op="broadcast_tensors")
    return tuple(t.expand(shape) for t in tensors)


@export(method=False)
def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """``torch.isin``: True where an element of ``elements`` is in ``test_elements`` (either may be a scalar);
    a sort of ``test_elements`` and a ``searchsorted``, so it costs O((n + m) log m)."""
    if not isinstance(elements, Tensor) and not isinstance(test_elements, Tensor):
        raise TypeError("isin(): at least one of 'elements' and 'test_elements' must be a Tensor")
    like = elements if isinstance(elements, Tensor) else test_elements
    from ..tensor.creation import tensor
    e = elements if isinstance(elements, Tensor) else tensor(elements, device=like._device)
    t = test_elements if isinstance(test_elements, Tensor) else tensor(test_elements, device=like._device)
    if e._dtype is _dt.bool_ or t._dtype is _dt.bool_:
        raise RuntimeError("Unsupported input type encountered for isin(): Bool")
    rt = _dt.promote_types(e._dtype, t._dtype)
    if rt is _dt.bool_:
        raise RuntimeError("Unsupported input type encountered for isin(): bool")
    e2, t2 = e.to(rt), t.reshape(-1).to(rt)
    if t2.shape[0] == 0:
        r = _full(tuple(e.shape), False, e, _dt.bool_)
    else:
        s = _E("sort")(t2).values
        # searched with its NaNs (sorted last) as +inf: searchsorted follows torch's binary search, whose answers
        # past a NaN depend on the path; the gather below reads the original values (NaN matches nothing)
        key = s.masked_fill(s.isnan(), float("inf")) if s.is_floating_point() else s
        idx = _E("searchsorted")(key, e2.reshape(-1)).clamp_max(t2.shape[0] - 1)
        r = (s.gather(0, idx) == e2.reshape(-1)).reshape(tuple(e.shape))
    return r.logical_not() if invert else r


@export
def isreal(input):
    """``torch.isreal``: all True for real tensors."""
    return _full(tuple(input.shape), True, input, _dt.bool_)


@export(method=False)
def unravel_index(indices, shape):
    """``torch.unravel_index``: a tuple of coordinate tensors (int64) for flat ``indices`` into ``shape``
    (indices wrap modulo ``numel`` like torch's floor-mod arithmetic)."""
    from ..tensor.creation import tensor
    if not isinstance(indices, Tensor):
        indices = tensor(indices)
    if indices._dtype.category != 1:
        raise TypeError(f"unravel_index: expected 'indices' to be integer dtype, but got {indices._dtype.name}")
    shape = (shape,) if isinstance(shape, (_int, np.integer)) else tuple(_int(s) for s in shape)
    for s in shape:
        if s < 0:
            raise ValueError(f"unravel_index: 'shape' cannot have negative values, but got {shape}")
    idx = indices.to(_dt.int64)
    out = []
    for s in reversed(shape):
        out.append(_E("remainder")(idx, s) if s else idx * 0)
        idx = _E("floor_divide")(idx, s) if s else idx
    return tuple(reversed(out))


# ================================================================== integer arithmetic
_EUCLID_STEPS = {"uint8": 13, "int8": 12, "int16": 24, "int32": 47, "int64": 93}  # Fibonacci worst cases


def _gcd_args(name, input, other):
    _tensor_arg(name, "input", 1, input)
    _tensor_arg(name, "other", 2, other)
    rt = _dt.result_type(input, other)
    if rt.category != 1:
        raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{rt.name}' (integer tensors only; got "
                                  f"{getattr(input, 'dtype', type(input).__name__)} and "
                                  f"{getattr(other, 'dtype', type(other).__name__)})")
    return input, other, rt


def _gcd(a, b, rt):
    a = _E("abs")(a)
    b = _E("abs")(b)
    a, b = broadcast_tensors(a, b)
    check_every = 0 if _tracing() else 8
    for i in _range(_EUCLID_STEPS[rt.name]):
        nz = b != 0
        r = _E("fmod")(a, _where(nz, b, 1))   # (C's %, as torch's calc_gcd: abs(INT_MIN) stays negative)
        a, b = _where(nz, b, a), _where(nz, r, b)
        if check_every and i % check_every == check_every - 1 and not _bool(b.any()):
            break
    return a


@export(inplace=True)
def gcd(input, other):
    """``torch.gcd``: the non-negative greatest common divisor (integer tensors); Euclid's algorithm as a
    fixed number of ``where``/``remainder`` steps (the worst case for the dtype), so it traces."""
    input, other, rt = _gcd_args("gcd", input, other)
    return _gcd(input.to(rt), other.to(rt), rt)


@export(inplace=True)
def lcm(input, other):
    """``torch.lcm``: ``|a / gcd(a, b) * b|`` (0 when either is 0), integer tensors."""
    input, other, rt = _gcd_args("lcm", input, other)
    a, b = input.to(rt), other.to(rt)
    g = _gcd(a, b, rt)
    q = _E("div")(a, _where(g == 0, 1, g), rounding_mode="trunc")
    return _where(g == 0, 0, _E("abs")(q * b)).to(rt)


@export(inplace=True)
def ldexp(input, other):
    """``torch.ldexp`` as torch 2.13 computes it (ATen BinaryOps.cpp):

    * an integer (or bool) exponent with a floating ``input``: ``std::ldexp(x, int(e))`` in ``input``'s dtype
      (exact up to the final rounding; the exponent wraps to int32 like the C++ cast; a bool exponent is
      refused: ``ldexp_cpu_exp`` has no Bool kernel);
    * otherwise ``mul(input, _pow2(input, other))`` where ``_pow2`` is ``pow(2.0, other)`` for an integer,
      bool or float32 ``input`` and ``full((), 2.0, input.dtype).pow(other)`` for the others (float64, float16,
      bfloat16, complex): regular type promotion of a 0-d ``input``-dtype base with ``other``."""
    _tensor_arg("ldexp", "input", 1, input)
    _tensor_arg("ldexp", "other", 2, other)
    idt, edt = input.dtype, other.dtype
    if edt.category in (0, 1) and idt.category == 2:
        if edt is _dt.bool_:
            raise NotImplementedError('"ldexp_cpu_exp" not implemented for \'Bool\'')
        from ..tensor.creation import full
        e = other.to(_dt.int32) if edt.itemsize > 4 else other   # (the C++ int parameter)
        e = e.to(_dt.float64).clamp(-2200.0, 2200.0)               # (past that: 0 / inf / the input itself)
        a = (e * (1.0 / 3.0)).floor()
        b = ((e - a) * 0.5).floor()
        two = full((), 2.0, dtype=_dt.float64, device=input.device)
        # three exact power-of-two steps in float64 (each |step| <= 734: 2 ** 2200 alone overflows and
        # 0 * inf is NaN), one rounding into input's dtype
        r = input.to(_dt.float64)
        for k in (a, b, e - a - b):
            r = _E("mul")(r, two.pow(k))
        return r.to(idt)
    if idt.category in (0, 1) or idt is _dt.float32:
        p2 = _E("pow")(2.0, other)
    else:
        from ..tensor.creation import full
        p2 = _E("pow")(full((), 2.0, dtype=idt, device=input.device), other)
    return _E("mul")(input, p2)


@export
def frexp(input):
    """``torch.frexp``: ``(mantissa, exponent)`` with ``input = mantissa * 2 ** exponent``, ``0.5 <= |mantissa|
    < 1`` (exponent int32; 0, inf and NaN give exponent 0 and themselves as mantissa)."""
    _tensor_arg("frexp", "input", 1, input)
    if input._dtype.category != 2:
        raise RuntimeError(f"torch.frexp() only supports floating-point dtypes (got {input._dtype.name})")
    from ..tensor.creation import full
    from .reduction import _rt
    x = input.to(_dt.float64)
    ax = x.abs()
    finite = _E("logical_and")(ax.isfinite(), ax != 0)
    safe = _where(finite, ax, 1.0)
    e = safe.log2().floor() + 1.0
    # split the power of two so 2**-e never overflows (float64 subnormals have e down to -1073)
    h = (e * 0.5).floor()
    two = full((), 2.0, dtype=_dt.float64, device=x.device)
    m = x * two.pow(-h) * two.pow(-(e - h))
    # log2 may round across a power of two: one correction step each way
    big = m.abs() >= 1.0
    m, e = _where(big, m * 0.5, m), _where(big, e + 1.0, e)
    small = _E("logical_and")(m.abs() < 0.5, finite)
    m, e = _where(small, m * 2.0, m), _where(small, e - 1.0, e)
    m = _where(finite, m, x)
    e = _where(finite, e, 0.0)
    return _rt("frexp", ("mantissa", "exponent"))(m.to(input._dtype), e.to(_dt.int32))


@export(inplace=True)
def float_power(input, exponent):
    """``torch.float_power``: ``pow`` computed and returned in float64 (complex128 when an operand is complex)."""
    cplx = any(isinstance(v, complex) or (isinstance(v, Tensor) and v._dtype.category == 3)
               for v in (input, exponent))
    wdt = _dt.complex128 if cplx else _dt.float64
    a = input.to(wdt) if isinstance(input, Tensor) else (complex(input) if cplx else _float(input))
    b = exponent.to(wdt) if isinstance(exponent, Tensor) else (complex(exponent) if cplx else _float(exponent))
    return _E("pow")(a, b)


def _float_power_(self, exponent):
    cplx = isinstance(exponent, complex) or (isinstance(exponent, Tensor) and exponent._dtype.category == 3) \
        or self._dtype.category == 3
    want = _dt.complex128 if cplx else _dt.float64
    if self._dtype is not want:
        raise RuntimeError(f"the base given to float_power_ has dtype {self._dtype.name} but the operation's "
                           f"result requires dtype {want.name}")
    return self.copy_(float_power(self, exponent))


# ================================================================== integration, statistics
def _trapz_dx(y, dx, d):
    n = y.shape[d]
    if n == 0:
        return _E("sum")(y, d) * 0
    a, b = y.narrow(d, 0, n - 1), y.narrow(d, 1, n - 1)
    return _E("sum")((a + b), d) * (dx / 2.0)


def _trapz_x(y, x, d):
    n = y.shape[d]
    if x.ndim == 1:
        if x.shape[0] != n:
            raise RuntimeError(f"trapezoid: There must be one `x` value for each sample point (got {x.shape[0]} "
                               f"x values and {n} samples along dim {d})")
        shape = [1] * y.ndim
        shape[d] = n
        x = x.reshape(tuple(shape))
    if n == 0:
        return _E("sum")(y, d) * 0
    xd = _E("diff")(x, dim=d - y.ndim if x.ndim == y.ndim else -1)
    a, b = y.narrow(d, 0, n - 1), y.narrow(d, 1, n - 1)
    return _E("sum")((a + b) * xd, d) / 2.0


def _no_bool_trapz(name, y, x):
    if y._dtype is _dt.bool_ or (isinstance(x, Tensor) and x._dtype is _dt.bool_):
        raise RuntimeError(f"{name}: received a bool input for `x` or `y`, but bool is not supported")


@export(method=False)
def trapezoid(y, x=None, *, dx=None, dim=-1):
    """``torch.trapezoid``: trapezoidal rule along ``dim``, with sample points ``x`` or spacing ``dx``."""
    _tensor_arg("trapezoid", "y", 1, y)
    if x is None and y.ndim and y.shape[wrap_dim(dim, y.ndim, "trapezoid")] == 0:
        # torch: an empty dim integrates to zeros of y's own dtype (before any dtype check)
        d = wrap_dim(dim, y.ndim, "trapezoid")
        return _full(tuple(s for i, s in enumerate(y.shape) if i != d), 0, y, y._dtype)
    _no_bool_trapz("trapezoid", y, x)
    d = wrap_dim(dim, y.ndim, "trapezoid")
    if x is not None and not isinstance(x, Tensor):
        raise TypeError(f"trapezoid(): argument 'x' must be Tensor, not {type(x).__name__} (pass a spacing as "
                        f"dx=)")
    if x is not None:
        if dx is not None:
            raise TypeError("trapezoid(): pass either x or dx, not both")
        return _trapz_x(y, x, d)
    return _trapz_dx(y, 1.0 if dx is None else dx, d)


@export(method=False)
def trapz(y, x=None, *, dx=None, dim=-1):
    """``torch.trapz``: alias of ``trapezoid``."""
    return trapezoid(y, x, dx=dx, dim=dim)


@export(method=False)
def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """``torch.cumulative_trapezoid``: running trapezoidal integral along ``dim`` (one element shorter)."""
    _tensor_arg("cumulative_trapezoid", "y", 1, y)
    _no_bool_trapz("cumulative_trapezoid", y, x)
    d = wrap_dim(dim, y.ndim, "cumulative_trapezoid")
    if x is not None and not isinstance(x, Tensor):
        raise TypeError(f"cumulative_trapezoid(): argument 'x' must be Tensor, not {type(x).__name__} (pass a "
                        f"spacing as dx=)")
    n = y.shape[d]
    m = _max(n - 1, 0)
    a, b = y.narrow(d, 0, m), y.narrow(d, _min(1, n), m)
    if x is None:
        s = (a + b) * ((1.0 if dx is None else dx) / 2.0)
    else:
        if x.ndim == 1:
            if x.shape[0] != n:
                raise RuntimeError(f"cumulative_trapezoid: There must be one `x` value for each sample point (got "
                                   f"{x.shape[0]} x values and {n} samples along dim {d})")
            shape = [1] * y.ndim
            shape[d] = n
            x = x.reshape(tuple(shape))
        xd = _E("diff")(x, dim=d - y.ndim if x.ndim == y.ndim else -1)
        s = (a + b) * xd / 2.0
    return _E("cumsum")(s, d)


def _shape_along(t, d, ndim):
    shape = [1] * ndim
    shape[d] = -1
    return t.reshape(tuple(shape))


def _gradient_dim(f, d, h, edge_order):
    n = f.shape[d]
    sl = lambda a, b: f.narrow(d, a, b - a)
    if isinstance(h, Tensor):   # coordinates: numpy's second-order formulas for uneven spacing
        x = _shape_along(h.to(f._dtype), d, f.ndim)
        xs = lambda a, b: x.narrow(d, a, b - a)
        hl, hr = xs(1, n - 1) - xs(0, n - 2), xs(2, n) - xs(1, n - 1)
        mid = (-hr / (hl * (hl + hr))) * sl(0, n - 2) + ((hr - hl) / (hl * hr)) * sl(1, n - 1) + \
            (hl / (hr * (hl + hr))) * sl(2, n)
        if edge_order == 1:
            first = (sl(1, 2) - sl(0, 1)) / (xs(1, 2) - xs(0, 1))
            last = (sl(n - 1, n) - sl(n - 2, n - 1)) / (xs(n - 1, n) - xs(n - 2, n - 1))
        else:
            a1, a2 = xs(1, 2) - xs(0, 1), xs(2, 3) - xs(1, 2)
            first = (-(2 * a1 + a2) / (a1 * (a1 + a2))) * sl(0, 1) + ((a1 + a2) / (a1 * a2)) * sl(1, 2) + \
                (-a1 / (a2 * (a1 + a2))) * sl(2, 3)
            b1, b2 = xs(n - 2, n - 1) - xs(n - 3, n - 2), xs(n - 1, n) - xs(n - 2, n - 1)
            last = (b2 / (b1 * (b1 + b2))) * sl(n - 3, n - 2) + (-(b1 + b2) / (b1 * b2)) * sl(n - 2, n - 1) + \
                ((2 * b2 + b1) / (b2 * (b1 + b2))) * sl(n - 1, n)
    else:
        h = _float(h)
        mid = (sl(2, n) - sl(0, n - 2)) / (2.0 * h)
        if edge_order == 1:
            first, last = (sl(1, 2) - sl(0, 1)) / h, (sl(n - 1, n) - sl(n - 2, n - 1)) / h
        else:
            first = (-1.5 * sl(0, 1) + 2.0 * sl(1, 2) - 0.5 * sl(2, 3)) / h
            last = (0.5 * sl(n - 3, n - 2) - 2.0 * sl(n - 2, n - 1) + 1.5 * sl(n - 1, n)) / h
    return _E("cat")([first, mid, last], d)


@export(method=False)
def gradient(input, *, spacing=1, dim=None, edge_order=1):
    """``torch.gradient``: second-order central differences inside, one-sided differences of order
    ``edge_order`` (1 or 2) at the ends, along each of ``dim`` (default: all dims); ``spacing`` a scalar, one
    scalar per dim, or one coordinate tensor per dim.  Returns a tuple (one tensor per dim)."""
    _tensor_arg("gradient", "input", 1, input)
    if edge_order not in (1, 2):
        raise RuntimeError(f"torch.gradient only supports edge_order=1 and edge_order=2 (got {edge_order})")
    dims = list(_range(input.ndim)) if dim is None else ([dim] if isinstance(dim, (_int, np.integer)) else list(dim))
    dims = [wrap_dim(d, input.ndim, "gradient") for d in dims]
    if spacing is None:     # (torch: unspecified, a unit spacing)
        spacing = 1
    if isinstance(spacing, (list, tuple)):
        if len(spacing) != len(dims):
            raise RuntimeError(f"torch.gradient expected spacing to be unspecified, a scalar or a list of length "
                               f"{len(dims)} (one per dim), got {len(spacing)} entries")
        hs = list(spacing)
    else:
        hs = [spacing] * len(dims)
    if input._dtype is _dt.bool_ and input.ndim:
        raise RuntimeError("gradient: Subtraction, the `-` operator, with two bool tensors is not supported "
                           "(torch.gradient of a bool tensor); convert it to a number dtype first")
    if input._dtype is _dt.uint8:   # (checked before the dims, so a 0-d uint8 is refused too; a 0-d bool is not)
        raise RuntimeError("torch.gradient does not support uint8 input.")
    odt = input._dtype if input._dtype.category in (2, 3) else _dt.get_default_dtype()
    f = input.to(odt)
    out = []
    for d, h in zip(dims, hs):
        if f.shape[d] < edge_order + 1:
            raise RuntimeError(f"torch.gradient expected each dimension size to be at least edge_order+1 (got size "
                               f"{f.shape[d]} at dim {d}, edge_order={edge_order})")
        if isinstance(h, Tensor) and (h.ndim != 1 or h.shape[0] != f.shape[d]):
            raise RuntimeError(f"torch.gradient expected each tensor in spacing to be 1-D with the size of its dim "
                               f"({f.shape[d]}), got shape {tuple(h.shape)}")
        out.append(_gradient_dim(f, d, h, edge_order))
    return tuple(out)


@export(method=False)
def frobenius_norm(input, dim=(), keepdim=False):
    """``torch.frobenius_norm`` (deprecated in torch): the 2-norm over ``dim`` (all dims when empty)."""
    dims = None if dim in ((), [], None) else dim
    return _E("vector_norm")(input, 2, dims, keepdim)


@export(method=False)
def norm_except_dim(v, pow=2, dim=0):
    """``torch.norm_except_dim`` (``weight_norm``'s helper): the ``pow``-norm over every dim but ``dim``, kept
    as size-1 dims; ``dim=-1`` gives the norm of the whole tensor (0-d)."""
    if v._dtype.category < 2:
        from .linalg import _CAP
        raise RuntimeError(f"norm_except_dim: norm(): input dtype should be either floating point or complex. Got "
                           f"{_CAP.get(v._dtype.name, v._dtype.name)} instead.")
    if dim == -1:
        return _E("vector_norm")(v, pow)
    if v.ndim == 0:
        raise IndexError(f"norm_except_dim: Dimension specified as {dim} but tensor has no dimensions")
    d = wrap_dim(dim, v.ndim, "norm_except_dim")
    other = tuple(i for i in _range(v.ndim) if i != d)
    return _E("vector_norm")(v, pow, other, True) if other else v.abs()


@export(method=False)
def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None, requires_grad=False,
                   pin_memory=False):
    """``torch.empty_permuted``: uninitialised, with dims laid out in memory in ``physical_layout`` order."""
    from ..tensor.creation import empty
    size, perm = tuple(_int(s) for s in size), tuple(_int(p) for p in physical_layout)
    if sorted(perm) != list(_range(len(size))):
        raise RuntimeError(f"empty_permuted: physical_layout {perm} is not a permutation of the dims of {size}")
    t = empty(tuple(size[p] for p in perm), dtype=dtype, device=device)
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return t.permute(inv)


@export(method=False)
def frombuffer(buffer, *, dtype, count=-1, offset=0, requires_grad=False):
    """``torch.frombuffer``: a 1-D CPU tensor sharing memory with a Python buffer (bytes-like objects that
    are read-only give a read-only tensor)."""
    from ..tensor.creation import from_numpy
    dt = _dt.to_dtype(dtype)
    a = np.frombuffer(buffer, dtype=dt.np, count=count, offset=offset)
    if a.size == 0:
        raise ValueError("frombuffer: both buffer length and count must be greater than 0")
    return from_numpy(a)


@export
def cov(input, *, correction=1, fweights=None, aweights=None):
    """``torch.cov``: covariance of the rows (variables) of a 1-D or 2-D ``input`` over its columns
    (observations), with optional integer frequency and float observation weights."""
    _tensor_arg("cov", "input", 1, input)
    if input.ndim > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an input with "
                           f"{input.ndim} dimensions")
    if input._dtype is _dt.bool_:
        raise RuntimeError("cov(): bool dtype is not supported for input")
    x = input.reshape(1, -1) if input.ndim < 2 else input
    odt = x._dtype if x._dtype.category in (2, 3) else _dt.get_default_dtype()
    if aweights is not None and odt.category == 2 and aweights._dtype.category == 2:
        odt = _dt.promote_types(odt, aweights._dtype)   # float16 observations, float32 weights: float32 (torch)
    cplx = odt.category == 3
    wdt = (_dt.float64 if odt is _dt.complex128 else _dt.float32) if cplx else odt   # weights: real
    n_obs = x.shape[1]
    w = None
    if fweights is not None:
        if fweights._dtype.category != 1:
            raise RuntimeError(f"cov(): expected fweights to have integral dtype but got fweights with "
                               f"{fweights._dtype.name} dtype")
        if fweights.ndim > 1 or fweights.numel() != n_obs:
            raise RuntimeError(f"cov(): expected fweights to have one dimension and the same number of elements "
                               f"as the number of observations ({n_obs}), got shape {tuple(fweights.shape)}")
        w = fweights
    if aweights is not None:
        if aweights._dtype.category != 2:
            raise RuntimeError(f"cov(): expected aweights to have floating point dtype but got aweights with "
                               f"{aweights._dtype.name} dtype")
        if aweights.ndim > 1 or aweights.numel() != n_obs:
            raise RuntimeError(f"cov(): expected aweights to have one dimension and the same number of elements "
                               f"as the number of observations ({n_obs}), got shape {tuple(aweights.shape)}")
        w = aweights if w is None else w * aweights
    xf = x.to(odt)
    if w is None:
        wsum = _full((), n_obs, xf, wdt)
        avg = xf.mean(1)
    else:
        wf = w.to(wdt)
        wsum = wf.sum()
        avg = (xf * wf).sum(1) / wsum
    if w is None:
        norm = wsum - correction
    elif correction == 0:
        norm = wsum
    elif aweights is None:
        norm = wsum - correction
    else:
        wf = w.to(wdt)
        norm = wsum - correction * (wf * aweights.to(wdt)).sum() / wsum
    norm = _where(norm <= 0, 0.0, norm)
    xc = xf - avg.unsqueeze(1)
    xw = xc * w.to(wdt) if w is not None else xc
    xt = _E("conj")(xc).t() if cplx else xc.t()   # complex: X times its conjugate transpose
    return (_E("matmul")(xw, xt) / norm).squeeze()


@export
def corrcoef(input):
    """``torch.corrcoef``: Pearson correlation coefficients of the rows, clipped to [-1, 1]."""
    c = cov(input)
    if c.ndim == 0:
        return c / c
    cplx = c._dtype.category == 3
    s = (_E("real")(c.diagonal()) if cplx else c.diagonal()).sqrt()
    c = c / s.unsqueeze(1)
    c = c / s.unsqueeze(0)
    if cplx:   # torch clips the real and imaginary parts separately
        return _E("complex")(_E("real")(c).clamp(-1, 1), _E("imag")(c).clamp(-1, 1))
    return c.clamp(-1, 1)


def _hist_edges(input, bins, range_, who):
    if isinstance(bins, Tensor):
        if bins.ndim != 1 or bins.numel() < 1:
            raise RuntimeError(f"{who}(): bins tensor should have one dimension and at least 1 element, got "
                               f"shape {tuple(bins.shape)}")
        return bins.to(input._dtype)
    if isinstance(bins, (list, tuple)):
        from ..tensor.creation import tensor
        return tensor(bins, dtype=input._dtype, device=input._device)
    nb = _int(bins)
    if nb <= 0:
        raise RuntimeError(f"{who}(): bins must be > 0, but got {nb}")
    if range_ is not None:
        lo, hi = (_float(v) for v in range_)
    elif input.numel() == 0:
        lo, hi = 0.0, 1.0
    else:
        lo, hi = _float(input.min()), _float(input.max())
    if lo > hi:
        raise ValueError(f"{who}(): max must be larger than min (got range ({lo}, {hi}))")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{who}(): range of [{lo}, {hi}] is not finite")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    from ..tensor.creation import linspace
    return linspace(lo, hi, nb + 1, dtype=input._dtype, device=input._device)


@export
def histogram(input, bins=100, *, range=None, weight=None, density=False):
    """``torch.histogram``: ``(hist, bin_edges)``; ``bins`` an int (equal-width bins over ``range`` or the data's
    min/max) or a 1-D tensor of increasing edges; the last bin includes its right edge; optional ``weight`` and
    ``density`` normalisation.  Floating inputs only."""
    _tensor_arg("histogram", "input", 1, input)
    if input._dtype in (_dt.float16, _dt.bfloat16):
        raise NotImplementedError(f"\"histogramdd\" not implemented for '{'Half' if input._dtype is _dt.float16 else 'BFloat16'}' "
                                  f"(torch.histogram takes float32/float64 input)")
    if input._dtype.category != 2:
        raise RuntimeError(f"torch.histogram: input tensor and bins tensors should have the same dtype, and be "
                           f"floating point (got {input._dtype.name})")
    if weight is not None and tuple(weight.shape) != tuple(input.shape):
        raise RuntimeError(f"histogram(): if weight tensor is provided it should have the same shape as the input "
                           f"tensor, got {tuple(weight.shape)} and {tuple(input.shape)}")
    edges = _hist_edges(input, bins, range, "histogram")
    nb = edges.shape[0] - 1
    x = input.reshape(-1)
    from ..tensor.creation import zeros
    if nb == 0:
        return _rt_hist()(zeros((0,), dtype=input._dtype, device=input._device), edges)
    pos = _E("searchsorted")(edges.contiguous(), x, right=True) - 1
    inside = _E("logical_and")(x >= edges[0], x <= edges[-1])
    pos = _where(x == edges[-1], nb - 1, pos).clamp(0, nb - 1)
    w = weight.reshape(-1).to(input._dtype) if weight is not None else _full((), 1.0, input)
    w = _where(inside, w, 0.0)
    hist = zeros((nb,), dtype=input._dtype, device=input._device).scatter_add(0, pos, w.expand(tuple(x.shape))
                                                                                .contiguous())
    if density:
        widths = edges[1:] - edges[:-1]
        hist = hist / (hist.sum() * widths)
    return _rt_hist()(hist, edges)


@export(method=False)
def histogramdd(input, bins=10, *, range=None, weight=None, density=False):
    """``torch.histogramdd``: ``(hist, bin_edges)`` of the points ``input`` (..., D): ``bins`` an int, D ints or
    D 1-D edge tensors; ``range`` a flat [lo_0, hi_0, lo_1, hi_1, ...] (default: each coordinate's min / max);
    each dim bins like ``histogram`` (the last bin includes its right edge), the D bin indices flattened into one
    ``scatter_add``."""
    _tensor_arg("histogramdd", "input", 1, input)
    if input._dtype.category != 2:
        raise RuntimeError(f"torch.histogramdd: input tensor and bins tensors should have the same dtype, and be "
                           f"floating point (got {input._dtype.name})")
    if input.ndim < 2:
        raise RuntimeError(f"torch.histogramdd: input tensor should have at least 2 dimensions, but got "
                           f"{input.ndim}")
    D = input.shape[-1]
    pts = input.reshape(-1, D)
    if isinstance(bins, (list, tuple)):
        if len(bins) != D:
            raise RuntimeError(f"torch.histogramdd: expected {D} sequences of bin edges for each of the {D} "
                               f"dimensions of the input, but got {len(bins)}")
        per = list(bins)
    else:
        per = [bins] * D
    if range is not None:
        rng = [_float(v) for v in range]
        if len(rng) != 2 * D:
            raise RuntimeError(f"torch.histogramdd: for a {D}-dimensional histogram, range should have {2 * D} "
                               f"elements, but got {len(rng)}")
    if weight is not None and tuple(weight.shape) != tuple(input.shape[:-1]):
        raise RuntimeError(f"torch.histogramdd: if weight tensor is provided it should have the same shape as the "
                           f"input tensor excluding its innermost dimension, but got {list(weight.shape)} and "
                           f"{list(input.shape)}")
    from ..tensor.creation import zeros
    edges, flat, inside = [], None, None
    for d in builtins.range(D):
        x = pts.select(1, d)
        e = _hist_edges(x, per[d], None if range is None else rng[2 * d:2 * d + 2], "histogramdd")
        nb = e.shape[0] - 1
        edges.append(e)
        pos = _E("searchsorted")(e.contiguous(), x.contiguous(), right=True) - 1
        pos = _where(x == e[-1], nb - 1, pos).clamp(0, max(nb - 1, 0))
        ok = _E("logical_and")(x >= e[0], x <= e[-1])
        flat = pos if flat is None else flat * nb + pos
        inside = ok if inside is None else _E("logical_and")(inside, ok)
    shape = tuple(e.shape[0] - 1 for e in edges)
    n = math.prod(shape)
    hist = zeros((n,), dtype=input._dtype, device=input._device)
    if n and pts.shape[0]:
        w = weight.reshape(-1).to(input._dtype) if weight is not None else _full((), 1.0, input)
        w = _where(inside, w, 0.0).expand((pts.shape[0],)).contiguous()
        hist = hist.scatter_add(0, flat.clamp(0, n - 1), w)
    hist = hist.reshape(shape)
    if density:
        vol = None
        for d, e in enumerate(edges):
            wd = (e[1:] - e[:-1]).reshape(tuple(-1 if i == d else 1 for i in builtins.range(D)))
            vol = wd if vol is None else vol * wd
        hist = hist / (hist.sum() * vol)
    from .reduction import _rt
    return _rt("histogramdd", ("hist", "bin_edges"))(hist, tuple(edges))


_SEG_REDUCE = {"sum": "sum", "prod": "prod", "mean": "mean", "max": "amax", "amax": "amax", "min": "amin",
               "amin": "amin"}


@export(method=False)
def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None):
    """``torch.segment_reduce``: reduce consecutive segments of ``data`` along ``axis`` (``lengths`` (*, S) or
    ``offsets`` (*, S+1), leading dims those of ``data`` before ``axis``); 'sum' / 'prod' / 'mean' / 'max' ('amax')
    / 'min' ('amin'); ``initial`` joins every segment (the value of an empty one; without it: 0, 1, NaN, -inf,
    inf).  Composed: each position's segment from the cumulative lengths (``searchsorted``), one
    ``scatter_reduce``."""
    from ..tensor.creation import full, zeros
    if reduce not in _SEG_REDUCE:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    if data._dtype.category != 2:
        raise NotImplementedError(f"\"_segment_reduce_cpu\" not implemented for '{data._dtype.name}' (floating "
                                  f"point data only)")
    if indices is not None and lengths is None and offsets is None:
        raise RuntimeError("segment_reduce(): indices based reduction is not supported yet.")
    if lengths is None and offsets is None:
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined.")
    ax = wrap_dim(axis, data.ndim, "segment_reduce")
    if lengths is not None:
        lengths = lengths.to(_dt.int64)
        ends = lengths.cumsum(-1)
        starts = ends - lengths
    else:
        offsets = offsets.to(_dt.int64)
        starts, ends = offsets[..., :-1], offsets[..., 1:]
        lengths = ends - starts
    if lengths.ndim != ax + 1 or tuple(lengths.shape[:-1]) != tuple(data.shape[:ax]):
        raise RuntimeError(f"segment_reduce(): Expected lengths / offsets of shape data.shape[:axis] + (segments,) = "
                           f"{list(data.shape[:ax])} + [S], got {list(lengths.shape)}")
    if lengths.numel() and bool((lengths < 0).any()):
        raise RuntimeError("lengths contains negative value!")
    L = data.shape[ax]
    if not unsafe and lengths.numel() and bool((ends[..., -1] != L).any()):
        raise RuntimeError(f"segment_reduce(): Expected all rows of lengths along axis to sum to "
                           f"data.size(lengths.dim()-1) when !unsafe (data.size({ax}) = {L}, got totals "
                           f"{ends[..., -1].tolist()})")
    S = lengths.shape[-1]
    from ..tensor.creation import arange
    pos = arange(L, device=data.device).expand(tuple(data.shape[:ax]) + (L,)).contiguous()
    seg = _E("searchsorted")(ends.contiguous(), pos, right=True)          # segment of each position (S: none)
    valid = seg < S
    tail = tuple(data.shape[ax + 1:])
    idx = seg.clamp(max=max(S - 1, 0)).reshape(tuple(seg.shape) + (1,) * len(tail)).expand(tuple(data.shape))
    keep = valid.reshape(tuple(valid.shape) + (1,) * len(tail)).expand(tuple(data.shape))
    red = _SEG_REDUCE[reduce]
    neutral = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "amax": float("-inf"), "amin": float("inf")}[red]
    start = neutral if initial is None else float(initial)
    out_shape = tuple(data.shape[:ax]) + (S,) + tail
    if S == 0:
        return zeros(out_shape, dtype=data._dtype, device=data.device)
    vals = _where(keep, data, neutral).contiguous()
    out = full(out_shape, start, dtype=data._dtype, device=data.device)
    out = out.scatter_reduce(ax, idx.contiguous(), vals, "sum" if red == "mean" else red, include_self=True)
    if red == "mean":
        cnt = lengths.to(data._dtype).reshape(tuple(lengths.shape) + (1,) * len(tail))
        empty = cnt == 0
        fill = float("nan") if initial is None else float(initial)
        out = _where(empty, fill, out / _where(empty, 1.0, cnt))
    return out


def _rt_hist():
    from .reduction import _rt
    return _rt("histogram", ("hist", "bin_edges"))


@export(inplace=True)
def renorm(input, p, dim, maxnorm):
    """``torch.renorm``: each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` is scaled to norm
    ``maxnorm`` (factor ``maxnorm / (norm + 1e-7)``, like torch); floating tensors only."""
    _tensor_arg("renorm", "input", 1, input)
    if input._dtype.category != 2:
        raise RuntimeError(f"renorm: expected a floating point tensor as input, got {input._dtype.name}")
    if p <= 0:
        raise RuntimeError(f"renorm: non-positive-norm not supported (p={p})")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    if input.ndim < 2:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {input.ndim} dimensions")
    d = wrap_dim(dim, input.ndim, "renorm")
    other = tuple(i for i in _range(input.ndim) if i != d)
    x = input.to(_dt.float32) if input._dtype in _dt.LOW_FLOATS else input
    norm = _E("vector_norm")(x, p, other, True) if other else x.abs()
    factor = _where(norm > maxnorm, maxnorm / (norm + 1e-7), 1.0)
    return (x * factor).to(input._dtype)


@export
def dist(input, other, p=2):
    """``torch.dist``: the ``p``-norm of ``input - other`` (floating tensors)."""
    _tensor_arg("dist", "input", 1, input)
    _tensor_arg("dist", "other", 2, other)
    diff = input - other
    if diff._dtype.category not in (2, 3):
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                           f"{diff._dtype.name}")
    return _E("vector_norm")(diff, p)


@export(method=False)
def combinations(input, r=2, with_replacement=False):
    """``torch.combinations``: the length-``r`` combinations of a 1-D tensor's elements, as rows
    (``itertools.combinations`` order; ``with_replacement`` like ``combinations_with_replacement``)."""
    _tensor_arg("combinations", "input", 1, input)
    if input.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return _full((0,), 0, input)
    n = input.shape[0]
    gen = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    idx = np.array(list(gen(_range(n), r)), dtype=np.int64).reshape(-1, r)
    if idx.shape[0] == 0:
        return input.new_empty((0, r))
    it = _host(idx.reshape(-1), _dt.int64, input._device)
    return input.index_select(0, it).reshape(idx.shape)


# ================================================================== scatter-style copies
# Written as ``where(mask, src spread to input's shape, input)``: out of place, so they trace and fuse
# (a write into a view of a clone would not trace).
def _along(n, d, ndim, device):
    from ..tensor.creation import arange
    shape = [1] * ndim
    shape[d] = n
    return arange(n, dtype=_dt.int64, device=device).reshape(tuple(shape))


def _check_src(who, input, src, want):
    _tensor_arg(who, "input", 1, input)
    _tensor_arg(who, "src", 2, src)
    if tuple(src.shape) != tuple(want):
        raise RuntimeError(f"{who}(): expected src to have a size equal to the slice of self. src size = "
                           f"{list(src.shape)}, slice size = {list(want)}")
    if src._dtype is not input._dtype:
        src = src.to(input._dtype)
    return src


@export
def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """``torch.diagonal_scatter``: a copy of ``input`` with ``src`` written on the given diagonal."""
    _tensor_arg("diagonal_scatter", "input", 1, input)
    src = _check_src("diagonal_scatter", input, src, tuple(input.diagonal(offset, dim1, dim2).shape))
    a, b = wrap_dim(dim1, input.ndim, "diagonal_scatter"), wrap_dim(dim2, input.ndim, "diagonal_scatter")
    x = input.movedim((a, b), (-2, -1))
    h, w = x.shape[-2], x.shape[-1]
    n = src.shape[-1]
    if n == 0:
        return input.clone()
    i, j = _along(h, 0, 2, input._device), _along(w, 1, 2, input._device)
    k = (i if offset >= 0 else j).expand((h, w)).clamp(0, n - 1).reshape(-1)
    spread = src.index_select(src.ndim - 1, k).reshape(tuple(src.shape[:-1]) + (h, w))
    out = _where((j - i) == offset, spread, x)
    return out.movedim((-2, -1), (a, b)).contiguous()


@export
def select_scatter(input, src, dim, index):
    """``torch.select_scatter``: a copy of ``input`` with ``src`` written at ``index`` along ``dim``."""
    _tensor_arg("select_scatter", "input", 1, input)
    src = _check_src("select_scatter", input, src, tuple(input.select(dim, index).shape))
    d = wrap_dim(dim, input.ndim, "select_scatter")
    n = input.shape[d]
    i = _int(index) + (n if _int(index) < 0 else 0)
    return _where(_along(n, d, input.ndim, input._device) == i, src.unsqueeze(d), input)


def _slice(t, dim=0, start=None, end=None, step=1):
    d = wrap_dim(dim, t.ndim, "slice")
    if step is None:
        step = 1
    if step <= 0:
        raise RuntimeError(f"slice step must be positive (got {step})")
    idx = [slice(None)] * t.ndim
    idx[d] = slice(start, end, step)
    return t[tuple(idx)]


@export
def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """``torch.slice_scatter``: a copy of ``input`` with ``src`` written into ``input[..., start:end:step, ...]``."""
    _tensor_arg("slice_scatter", "input", 1, input)
    src = _check_src("slice_scatter", input, src, tuple(_slice(input, dim, start, end, step).shape))
    d = wrap_dim(dim, input.ndim, "slice_scatter")
    n = input.shape[d]
    lo, _, st = slice(start, end, step or 1).indices(n)
    m = src.shape[d]
    if m == 0:
        return input.clone()
    pos = np.arange(n)
    k = np.clip((pos - lo) // st, 0, m - 1)
    mask = (pos >= lo) & ((pos - lo) % st == 0) & ((pos - lo) // st < m)
    spread = src.index_select(d, _host(k, _dt.int64, input._device))
    shape = [1] * input.ndim
    shape[d] = n
    return _where(_host(mask, _dt.bool_, input._device).reshape(tuple(shape)), spread, input)


@export(inplace=True)
def index_reduce(input, dim, index, source, reduce, *, include_self=True):
    """``torch.index_reduce``: reduce ``source`` slices into ``input`` at ``index`` along ``dim`` with
    ``'prod'``, ``'mean'``, ``'amax'`` or ``'amin'`` (a ``scatter_reduce`` with the index expanded)."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    _tensor_arg("index_reduce", "input", 1, input)
    d = wrap_dim(dim, input.ndim, "index_reduce")
    if index.ndim > 1 or index._dtype not in (_dt.int64, _dt.int32):
        raise RuntimeError(f"index_reduce_(): Index is supposed to be a vector of int64 or int32, got "
                           f"{index.ndim}-D {index._dtype.name}")
    if source._dtype is not input._dtype:
        raise RuntimeError(f"index_reduce_(): self ({input._dtype.name}) and source ({source._dtype.name}) must "
                           f"have the same scalar type")
    if input._dtype.category == 3 and (not include_self or reduce in ("amax", "amin")):  # (torch's messages)
        kern = ("index_reduce_func_exclude_input_init" if not include_self else
                "maximum_cpu" if reduce == "amax" else "minimum_cpu")
        cname = "ComplexFloat" if input._dtype.name == "complex64" else "ComplexDouble"
        raise NotImplementedError(f'"{kern}" not implemented for \'{cname}\'')
    if input.ndim == 0:     # a 0-d input is one element along dim 0 (torch)
        return index_reduce(input.reshape(1), 0, index, source.reshape(-1), reduce,
                            include_self=include_self).reshape(())
    n = index.numel()
    src = source.reshape((1,) * input.ndim) if source.ndim == 0 else source
    if src.ndim != input.ndim or src.shape[d] != n or any(src.shape[i] != input.shape[i]
                                                          for i in _range(input.ndim) if i != d):
        raise RuntimeError(f"index_reduce_(): source {tuple(source.shape)} must have input's shape "
                           f"{tuple(input.shape)} with dim {d} of size len(index) = {n}")
    shape = [1] * input.ndim
    shape[d] = n
    from .registry import _trace_hook
    if n and _trace_hook[0] is None:  # torch: IndexError naming index_reduce (scatter_reduce's check: RuntimeError)
        lo, hi = int(index.min()), int(index.max())
        if lo < 0 or hi >= input.shape[d]:
            raise IndexError(f"index_reduce(): index {lo if lo < 0 else hi} is out of bounds for dimension {d} with "
                             f"size {input.shape[d]} (index out of range in self)")
    idx = index.reshape(-1).to(_dt.int64).reshape(tuple(shape)).expand(tuple(src.shape))
    return _E("scatter_reduce")(input, d, idx, src, reduce, include_self=include_self)


@export(inplace=True)
def put(input, index, source, accumulate=False):
    """``torch.put``: a copy of ``input`` with ``source`` written at flat (row-major) ``index`` positions
    (negative indices wrap; ``accumulate`` sums duplicates)."""
    _tensor_arg("put", "input", 1, input)
    if index._dtype is not _dt.int64:
        raise RuntimeError(f"put_(): Expected a long tensor for index, but got {index._dtype.name}")
    if source._dtype is not input._dtype:
        raise RuntimeError(f"put_(): self ({input._dtype.name}) and source ({source._dtype.name}) must have the "
                           f"same scalar type")
    if index.numel() != source.numel():
        raise RuntimeError(f"put_(): Expected source and index to have the same number of elements, but got "
                           f"source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    from .registry import _trace_hook
    n = input.numel()
    if index.numel() and _trace_hook[0] is None:  # (traced: index_put's own check names the flat dim)
        lo, hi = int(index.min()), int(index.max())
        if lo < -n or hi >= n:
            raise IndexError(f"put_(): out of range: tried to access index {lo if lo < -n else hi} on a tensor of "
                             f"{n} elements.")
    flat = input.reshape(-1).index_put((index.reshape(-1),), source.reshape(-1), accumulate)
    return flat.reshape(tuple(input.shape))


@export
def split_with_sizes(input, split_sizes, dim=0):
    """``torch.split_with_sizes``: views of the given sizes along ``dim``."""
    return input.split([_int(s) for s in split_sizes], dim)


@export
def dsplit(input, indices_or_sections):
    """``torch.dsplit``: ``tensor_split`` along dim 2 (an int must divide that dim evenly)."""
    if input.ndim < 3:
        raise RuntimeError(f"torch.dsplit requires a tensor with at least 3 dimension, but got a tensor with "
                           f"{input.ndim} dimensions!")
    if isinstance(indices_or_sections, (_int, np.integer)) and (indices_or_sections == 0 or
                                                                input.shape[2] % indices_or_sections):
        raise RuntimeError(f"torch.dsplit attempted to split along dimension 2, but the size of the dimension "
                           f"{input.shape[2]} is not divisible by the split_size {indices_or_sections}!")
    return input.tensor_split(indices_or_sections, 2)


for _n, _t in (("unsafe_split", "split"), ("unsafe_chunk", "chunk"), ("unsafe_split_with_sizes", "split_with_sizes")):
    def _mk(t):
        def f(input, *args, **kwargs):
            return getattr(input, t)(*args, **kwargs) if t != "split_with_sizes" else split_with_sizes(input, *args,
                                                                                                      **kwargs)
        return f
    export(_mk(_t), name=_n)


@export(method=False)
def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    """``torch.empty_strided``: an uninitialised tensor of ``size`` with element ``stride``."""
    from ..tensor.creation import empty
    size, stride = tuple(_int(s) for s in size), tuple(_int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"empty_strided: mismatch in length of strides and shape ({size} vs {stride})")
    if any(s < 0 for s in stride):
        raise RuntimeError(f"empty_strided: negative strides are not supported (got {stride})")
    n = 1 + _sum((s - 1) * st for s, st in zip(size, stride)) if all(size) else 0
    base = empty(n, dtype=dtype, device=device)
    return base.as_strided(size, stride)


@export(method=False, name="range")
def range_(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    """``torch.range`` (deprecated in torch too): ``[start, end]`` *including* ``end``, default dtype float."""
    warnings.warn("neetorch.range is deprecated (like torch.range) because its behavior is inconsistent with "
                  "Python's range builtin. Instead, use neetorch.arange, which produces values in [start, end).",
                  UserWarning, stacklevel=2)
    from ..tensor.creation import _no_bool_dtype
    _no_bool_dtype(dtype, "range", complex_too=True)
    if end is None:     # (torch.range has no one-argument form)
        raise TypeError('range() missing 1 required positional arguments: "end"')
    dt = _dt.get_default_dtype() if dtype is None else _dt.to_dtype(dtype)
    if dt.category < 2:     # (torch reads start, end and step in the integer dtype: truncated)
        start, end, step = (int(v) for v in (start, end, step))
    if step == 0:
        raise RuntimeError("range: step must be nonzero")
    if (end - start) / step < 0:
        raise RuntimeError(f"range: upper bound and larger bound inconsistent with step sign (start={start}, "
                           f"end={end}, step={step})")
    n = _int(math.floor((end - start) / step)) + 1
    a = start + np.arange(n, dtype=np.float64 if dt.category >= 2 else np.int64) * step
    return _host(a, dt, device)


# ================================================================== activations (top-level torch names)
def _F():
    from ..nn import functional
    return functional


def _fwd(name, fname=None, method=False):
    def f(*args, **kwargs):
        return getattr(_F(), fname or name)(*args, **kwargs)
    f.__name__ = name
    f.__doc__ = f"``torch.{name}``: ``nn.functional.{fname or name}``."
    export(f, name=name, method=method)


for _n in ("threshold", "threshold_", "celu", "celu_", "selu_", "conv3d", "conv_transpose3d", "pdist", "max_pool3d",
           "max_pool1d_with_indices"):
    _fwd(_n)
for _n in ("hardshrink", "prelu"):
    _fwd(_n, method=True)


@export(method=False)
def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    """``torch.rrelu``: in eval mode (the default) ``leaky_relu`` with slope ``(lower + upper) / 2``."""
    return _F().rrelu(input, lower, upper, training)


@export(method=False)
def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    return _F().rrelu(input, lower, upper, training, True)


@export(method=False)
def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True):
    """``torch.batch_norm`` (ATen's argument order; ``nn.functional.batch_norm`` is the usual entry)."""
    return _F().batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


@export(method=False)
def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps,
                  cudnn_enabled=True):
    """``torch.instance_norm`` (ATen's argument order)."""
    return _F().instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)


_REDUCTION = {0: "none", 1: "mean", 2: "sum"}


@export(method=False)
def kl_div(input, target, reduction=0, *, log_target=False):
    """``torch.kl_div``: ``reduction`` is ATen's enum (0 none, the default here as in torch's binding; 1 mean,
    the elementwise mean; 2 sum)."""
    red = _REDUCTION.get(reduction, reduction)
    return _F().kl_div(input, target, reduction=red, log_target=log_target)


def _red(reduction):
    if reduction not in _REDUCTION and reduction not in _REDUCTION.values():
        raise ValueError(f"reduction must be 0 (none), 1 (mean) or 2 (sum), got {reduction!r}")
    return _REDUCTION.get(reduction, reduction)


# torch's top-level loss forms take ATen's reduction enum; their binding defaults to 0 (none)
@export(method=False)
def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction=0):
    return _F().binary_cross_entropy_with_logits(input, target, weight, reduction=_red(reduction),
                                                 pos_weight=pos_weight)


@export(method=False)
def hinge_embedding_loss(input, target, margin=1.0, reduction=0):
    return _F().hinge_embedding_loss(input, target, margin, reduction=_red(reduction))


@export(method=False)
def margin_ranking_loss(input1, input2, target, margin=0.0, reduction=0):
    return _F().margin_ranking_loss(input1, input2, target, margin, reduction=_red(reduction))


@export(method=False)
def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=0):
    return _F().cosine_embedding_loss(input1, input2, target, margin, reduction=_red(reduction))


@export(method=False)
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, reduction=0):
    return _F().triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap, reduction=_red(reduction))


@export(method=False)
def poisson_nll_loss(input, target, log_input, full, eps, reduction):
    return _F().poisson_nll_loss(input, target, log_input, full, eps=eps, reduction=_red(reduction))


@export(method=False)
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=0, zero_infinity=False):
    """``torch.ctc_loss``: ``nn.functional.ctc_loss`` with ATen's reduction enum (default 0: per-sample losses)."""
    return _F().ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction=_red(reduction),
                         zero_infinity=zero_infinity)


@export(method=False)
def alpha_dropout(input, p, train):
    return _F().alpha_dropout(input, p, train)


@export(method=False)
def alpha_dropout_(input, p, train):
    return _F().alpha_dropout(input, p, train, True)


@export(method=False)
def feature_alpha_dropout(input, p, train):
    return _F().feature_alpha_dropout(input, p, train)


@export(method=False)
def dropout_(input, p, train):
    return _F().dropout(input, p, train, True)


@export(method=False)
def constant_pad_nd(input, pad, value=0):
    """``torch.constant_pad_nd``: ``nn.functional.pad`` in constant mode."""
    return _F().pad(input, list(pad), mode="constant", value=value)


# ================================================================== real-tensor complex helpers
@export
def angle(input):
    """``torch.angle`` for real tensors: ``pi`` where negative, 0 elsewhere, NaN kept (ints -> default float)."""
    _tensor_arg("angle", "input", 1, input)
    odt = input._dtype if input._dtype.category == 2 else _dt.get_default_dtype()
    x = input.to(odt)
    r = _where(x < 0, _full((), math.pi, x), _zl(x))
    return _where(x.isnan(), x, r)


for _n in ("conj", "conj_physical", "resolve_conj", "resolve_neg", "real"):
    def _mk_id(n):
        def f(input):
            _tensor_arg(n, "input", 1, input)
            return input
        f.__name__ = n
        f.__doc__ = f"``torch.{n}``: the tensor itself (neetorch tensors are real)."
        return f
    export(_mk_id(_n), name=_n, method=_n != "real")


@export
def adjoint(input):
    """``torch.adjoint``: the last two dims swapped (real tensors)."""
    if input.ndim == 0:   # (torch: deprecated for 0-d tensors, which it returns unchanged)
        return input
    if input.ndim < 2:
        raise RuntimeError(f"tensor.adjoint() is only supported on matrices or batches of matrices. Got "
                           f"{input.ndim}-D tensor.")
    return input.transpose(-2, -1)


@export(method=False)
def imag(input):
    raise RuntimeError("imag is not implemented for tensors with non-complex dtypes (neetorch has no complex "
                       "dtypes).")


@export(method=False)
def is_complex(input) -> bool:
    return False


for _n in ("is_conj", "is_neg", "is_inference"):
    export(lambda input: False, name=_n)


@export
def is_nonzero(input) -> bool:
    """``torch.is_nonzero``: the truth value of a one-element tensor."""
    n = input.numel()
    if n == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if n > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return _bool(input.item())


@export
def is_same_size(input, other) -> bool:
    return tuple(input.shape) == tuple(other.shape)


@export
def is_signed(input) -> bool:
    return input._dtype.is_signed


@export(method=False)
def is_grad_enabled() -> bool:
    """Always False: neetorch records no gradients (``no_grad``/``enable_grad`` are accepted and do nothing)."""
    return False


class _SetGradEnabled:
    """``torch.set_grad_enabled(mode)``: a function call or a context manager; neetorch records no gradients, so
    either use only checks ``mode`` and changes nothing."""

    def __init__(self, mode):
        if not isinstance(mode, (bool, np.bool_)):
            raise TypeError(f"set_grad_enabled(): argument 'mode' must be bool, not {type(mode).__name__}")
        self.mode = bool(mode)

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):  # as a decorator
        return fn


export(_SetGradEnabled, name="set_grad_enabled", method=False)


_DETERMINISTIC = [False, False]
_MATMUL_PRECISION = ["highest"]


@export(method=False)
def use_deterministic_algorithms(mode, *, warn_only=False):
    """Recorded only: neetorch's CPU kernels are deterministic already."""
    _DETERMINISTIC[:] = [bool(mode), bool(warn_only)]


@export(method=False)
def are_deterministic_algorithms_enabled() -> bool:
    return _DETERMINISTIC[0]


@export(method=False)
def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return _DETERMINISTIC[1]


@export(method=False)
def set_float32_matmul_precision(precision):
    """Recorded only (``'highest'``, ``'high'``, ``'medium'``): neetorch's float32 matmul is always full precision."""
    if precision not in ("highest", "high", "medium"):
        raise RuntimeError(f"Invalid precision {precision!r}; expected 'highest', 'high' or 'medium'")
    _MATMUL_PRECISION[0] = precision


@export(method=False)
def get_float32_matmul_precision() -> str:
    return _MATMUL_PRECISION[0]


@export(method=False)
def typename(obj) -> str:
    """``torch.typename``: ``'neetorch.FloatTensor'`` style names for tensors, the qualified type name otherwise."""
    if isinstance(obj, Tensor):
        return obj.type()
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}" if t.__module__ not in ("builtins", None) else t.__qualname__


@export(method=False)
def is_storage(obj) -> bool:
    return False


@export(method=False)
def is_inference_mode_enabled() -> bool:
    return False


@export(method=False)
def is_anomaly_enabled() -> bool:
    return False


_WARN_ALWAYS = [False]


@export(method=False)
def set_warn_always(b):
    _WARN_ALWAYS[0] = bool(b)


@export(method=False)
def is_warn_always_enabled() -> bool:
    return _WARN_ALWAYS[0]


@export(method=False)
def get_rng_state():
    """The default generator's state (an opaque object here, not a ByteTensor): pass it to ``set_rng_state``."""
    from ..tensor.creation import default_generator
    return default_generator.get_state()


@export(method=False)
def set_rng_state(new_state):
    from ..tensor.creation import default_generator
    default_generator.set_state(new_state)


@export
def nonzero_static(input, *, size, fill_value=-1):
    """``torch.nonzero_static``: ``nonzero(input)`` truncated or padded with ``fill_value`` to ``size`` rows."""
    size = _int(size)
    if size < 0:
        raise RuntimeError(f"nonzero_static: 'size' must be an non-negative integer, got {size}")
    nz = _E("nonzero")(input)
    k = nz.shape[0]
    if k >= size:
        return nz[:size].contiguous()
    pad = _full((size - k, nz.shape[1]), fill_value, nz, _dt.int64)
    return _E("cat")([nz, pad], 0)


@export
def as_strided_scatter(input, src, size, stride, storage_offset=None):
    """``torch.as_strided_scatter``: a copy of ``input`` with ``src`` written into ``input.as_strided(size,
    stride, storage_offset)`` (strides over ``input``'s elements in row-major order)."""
    _tensor_arg("as_strided_scatter", "input", 1, input)
    size, stride = tuple(_int(v) for v in size), tuple(_int(v) for v in stride)
    if tuple(src.shape) != size:
        raise RuntimeError(f"as_strided_scatter: expected src to have a size equal to the slice of self. src size = "
                           f"{list(src.shape)}, slice size = {list(size)}")
    off = _int(storage_offset or 0)
    idx = np.full(size, off, dtype=np.int64)
    for d, (n, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        idx = idx + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    if idx.size and (idx.min() < 0 or idx.max() >= input.numel()):
        raise RuntimeError(f"as_strided_scatter: size {list(size)}, stride {list(stride)}, offset {off} reach "
                           f"outside the input's {input.numel()} elements")
    flat = input.reshape(-1).index_put((_host(idx.reshape(-1), _dt.int64, input._device),),
                                       src.to(input._dtype).reshape(-1))
    return flat.reshape(tuple(input.shape))


@export(method=False)
def feature_dropout(input, p, train):
    """``torch.feature_dropout``: whole channels (dim 1) zeroed with probability ``p`` in training, the rest
    scaled by ``1 / (1 - p)``; the input itself otherwise."""
    if not train or p == 0:
        return input
    if input.ndim < 2:
        raise RuntimeError(f"feature_dropout: expected a tensor with a channel dim (got {input.ndim}-D)")
    if p == 1:
        return input * 0
    from ..tensor.creation import empty
    mask = empty((input.shape[0], input.shape[1]) + (1,) * (input.ndim - 2), dtype=input._dtype,
                 device=input._device).bernoulli_(1 - p)
    return input * mask / (1 - p)


@export(method=False)
def feature_dropout_(input, p, train):
    return input.copy_(feature_dropout(input, p, train))


@export(method=False)
def feature_alpha_dropout_(input, p, train):
    return input.copy_(_F().feature_alpha_dropout(input, p, train))


@export(method=False)
def get_num_interop_threads() -> int:
    return 1


@export(method=False)
def set_num_interop_threads(n):
    """Accepted for compatibility: neetorch runs no inter-op thread pool."""
    if _int(n) < 1:
        raise RuntimeError(f"Expected positive number of threads, got {n}")


@export
def dim_order(input, *, ambiguity_check=False):
    """``Tensor.dim_order``: the dims from outermost to innermost in memory (by stride, ties in dim order)."""
    st = input.stride()
    return tuple(sorted(_range(input.ndim), key=lambda i: (-st[i], i)))


@export
def const_data_ptr(input) -> int:
    return input.data_ptr()


@export
def is_distributed(input) -> bool:
    return False


@export(method=False)
def fill(input, value):
    """``torch.fill``: a new tensor of ``input``'s shape and dtype filled with ``value``."""
    return input.clone().fill_(value)


# ================================================================== special functions
@export(inplace=True)
def digamma(input):
    """``torch.digamma``: ``d/dx lgamma(x)``; 0 gives ``-inf`` (``+inf`` for -0.0), negative integers NaN;
    reflection for ``x < 0``, then ten recurrence steps and the asymptotic series."""
    _tensor_arg("digamma", "input", 1, input)
    x, odt = _opmath(input)
    neg = x < 0
    frac = x - x.trunc()
    xr = _where(neg, 1.0 - x, x)
    r = _digamma_pos(xr)
    safe_frac = _where(frac == 0, 0.5, frac)
    r = _where(neg, r - math.pi / (safe_frac * math.pi).tan(), r)
    r = _where(_E("logical_and")(neg, frac == 0), math.nan, r)
    r = _where(x == 0, _E("copysign")(_full((), math.inf, x), -x), r)
    return _back(r, odt)


def _digamma_pos(x):
    # x >= 0 (x == 0 is patched by the caller)
    xs = _where(x == 0, 1.0, x)
    acc = _zl(xs)
    for k in _range(10):
        acc = acc + 1.0 / (xs + k)
    z = xs + 10.0
    iz2 = 1.0 / (z * z)
    series = iz2 * (1.0 / 12 - iz2 * (1.0 / 120 - iz2 * (1.0 / 252 - iz2 * (1.0 / 240 - iz2 * (1.0 / 132)))))
    r = z.log() - 0.5 / z - series - acc
    return _where(x.isinf(), x, r)


_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
           1.8152105401943546773e17, -7.1661652561756670113e18)
_ZETA_TERMS = 12


def _zeta(s: _float, q):
    """Hurwitz zeta(s, q) for a Python float ``s > 1`` (Cephes' Euler-Maclaurin summation, fixed terms)."""
    qs = q
    acc = _zl(q)
    for i in _range(_ZETA_TERMS + 1):
        acc = acc + (qs + i).pow(-s)
    a = qs + _ZETA_TERMS
    b = a.pow(-s)
    acc = acc + b * a / (s - 1.0) - 0.5 * b
    fac = 1.0
    k = 0.0
    w = a
    bb = b
    for i in _range(12):
        fac *= s + k
        bb = bb / w
        acc = acc + fac * bb / _ZETA_A[i]
        k += 1.0
        fac *= s + k
        bb = bb / w
        k += 1.0
    pole = _E("logical_and")(q <= 0, q == q.floor())
    return _where(pole, math.inf, acc)


def _trigamma(x):
    neg = x < 0.5
    s = (math.pi * x).sin()
    refl = _where(neg, -(math.pi * math.pi) / (s * s), _zl(x))
    y = _where(neg, 1.0 - x, x)
    acc = _zl(y)
    for _ in _range(6):
        acc = acc + 1.0 / (y * y)
        y = y + 1.0
    ixx = 1.0 / (y * y)
    acc = acc + (1.0 + 1.0 / (2.0 * y) + ixx * (1.0 / 6 - ixx * (1.0 / 30 - ixx * (1.0 / 42)))) / y
    return _where(neg, -(refl + acc), acc)


@export(method=False)
def polygamma(n, input):
    """``torch.polygamma(n, x)``: the n-th derivative of digamma (``n >= 0``); n = 1 is the trigamma series,
    n >= 2 ``(-1)**(n+1) n! zeta(n+1, x)`` with Cephes' Hurwitz zeta (accurate for x > -3 at fixed terms)."""
    _tensor_arg("polygamma", "input", 2, input)
    n = int_arg("polygamma", "n", n)
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    if n == 0:
        return digamma(input)
    x, odt = _opmath(input)
    if n == 1:
        return _back(_trigamma(x), odt)
    sign = 1.0 if n % 2 else -1.0
    return _back(_zeta(_float(n + 1), x) * (sign * math.exp(math.lgamma(n + 1.0))), odt)


def _polygamma_method(self, n):
    return polygamma(n, self)


def _polygamma_(self, n):
    r = polygamma(n, self)
    if self._dtype.category != 2:
        raise RuntimeError(f"result type {r._dtype.name} can't be cast to the desired output type "
                           f"{self._dtype.name}")
    return self.copy_(r)


@export(inplace=True)
def mvlgamma(input, p):
    """``torch.mvlgamma``: the multivariate log-gamma of dimension ``p`` (``sum_i lgamma(x - i/2)`` plus a
    constant; like torch 2.x, elements ``<= (p - 1) / 2`` are not refused)."""
    _tensor_arg("mvlgamma", "input", 1, input)
    p = int_arg("mvlgamma", "p", p)
    if input._dtype is _dt.bool_:
        raise RuntimeError("mvlgamma: The input tensor may not be a boolean tensor.")
    if p < 1:
        raise RuntimeError(f"p has to be greater than or equal to 1 (got {p})")
    x, odt = _opmath(input)
    r = _zl(x) + p * (p - 1) / 4.0 * math.log(math.pi)
    for i in _range(p):
        r = r + (x - i / 2.0).lgamma()
    return _back(r, odt)


_I0A = (-4.4153416464793395e-18, 3.3307945188222384e-17, -2.431279846547955e-16, 1.715391285555133e-15,
        -1.1685332877993451e-14, 7.676185498604936e-14, -4.856446783111929e-13, 2.95505266312964e-12,
        -1.726826291441556e-11, 9.675809035373237e-11, -5.189795601635263e-10, 2.6598237246823866e-09,
        -1.300025009986248e-08, 6.046995022541919e-08, -2.670793853940612e-07, 1.1173875391201037e-06,
        -4.4167383584587505e-06, 1.6448448070728896e-05, -5.754195010082104e-05, 0.00018850288509584165,
        -0.0005763755745385824, 0.0016394756169413357, -0.004324309995050576, 0.010546460394594998,
        -0.02373741480589947, 0.04930528423967071, -0.09490109704804764, 0.17162090152220877, -0.3046826723431984,
        0.6767952744094761)
_I0B = (-7.233180487874754e-18, -4.830504485944182e-18, 4.46562142029676e-17, 3.461222867697461e-17,
        -2.8276239805165836e-16, -3.425485619677219e-16, 1.7725601330565263e-15, 3.8116806693526224e-15,
        -9.554846698828307e-15, -4.150569347287222e-14, 1.54008621752141e-14, 3.8527783827421426e-13,
        7.180124451383666e-13, -1.7941785315068062e-12, -1.3215811840447713e-11, -3.1499165279632416e-11,
        1.1889147107846439e-11, 4.94060238822497e-10, 3.3962320257083865e-09, 2.266668990498178e-08,
        2.0489185894690638e-07, 2.8913705208347567e-06, 6.889758346916825e-05, 0.0033691164782556943,
        0.8044904110141088)


def _chbevl(x, coef):
    b0 = _zl(x) + coef[0]
    b1 = _zl(x)
    b2 = b1
    for c in coef[1:]:
        b2 = b1
        b1 = b0
        b0 = x * b1 - b2 + c
    return 0.5 * (b0 - b2)


@export(inplace=True)
def i0(input):
    """``torch.i0``: the modified Bessel function of the first kind of order 0 (Cephes' Chebyshev series)."""
    _tensor_arg("i0", "input", 1, input)
    x, odt = _opmath(input)
    ax = x.abs()
    small = ax <= 8.0
    a = _chbevl(_where(small, ax, 8.0) * 0.5 - 2.0, _I0A)
    big = _where(small, 32.0, ax)
    b = _chbevl(32.0 / big - 2.0, _I0B) / big.sqrt()
    return _back(ax.exp() * _where(small, a, b), odt)


_IGAMMA_ITERS = 100


def _igamma_args(name, input, other):
    _tensor_arg(name, "input", 1, input)
    _tensor_arg(name, "other", 2, other)
    rt = _dt.result_type(input, other)
    if rt.category != 2:
        raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{rt.name}' (floating tensors only)")
    a, x = broadcast_tensors(input.to(_dt.float64), other.to(_dt.float64))
    return a, x, rt


def _igamma_core(a, x):
    """(P, Q) regularized incomplete gammas for a > 0, x > 0 (finite): the series where x < a + 1, else the
    continued fraction (Lentz), each with a fixed number of steps."""
    use_series = x < a + 1.0
    aa = _where(a > 0, a, 1.0)
    xx = _where(x > 0, x, 1.0)
    logpre = aa * xx.log() - xx - aa.lgamma()
    # series: P = exp(logpre) * sum x^n / (a (a+1) ... (a+n))
    term = 1.0 / aa
    s = term
    ap = aa
    for _ in _range(_IGAMMA_ITERS):
        ap = ap + 1.0
        term = term * xx / ap
        s = s + term
    p_series = (logpre.exp() * s).clamp(0.0, 1.0)
    # continued fraction for Q (modified Lentz)
    tiny = 1e-300
    b = xx + 1.0 - aa
    c = _zl(b) + 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in _range(1, _IGAMMA_ITERS + 1):
        an = -i * (i - aa)
        b = b + 2.0
        d = an * d + b
        d = _where(d.abs() < tiny, tiny, d)
        c = b + an / c
        c = _where(c.abs() < tiny, tiny, c)
        d = 1.0 / d
        h = h * d * c
    q_cf = (logpre.exp() * h).clamp(0.0, 1.0)
    p = _where(use_series, p_series, 1.0 - q_cf)
    q = _where(use_series, 1.0 - p_series, q_cf)
    return p, q


def _igamma_edges(a, x, r, upper):
    nan = _E("logical_or")(_E("logical_or")(a < 0, x < 0), _E("logical_or")(a.isnan(), x.isnan()))
    both0 = _E("logical_and")(a == 0, x == 0)
    # torch: a == 0 (x > 0) gives P = 1; x == 0 (a > 0) gives P = 0; x == inf gives P = 1; a == inf gives P = 0
    lower_val = _where(x == 0, 0.0, r)
    lower_val = _where(a == 0, 1.0, lower_val)
    lower_val = _where(x.isinf(), 1.0, lower_val)
    lower_val = _where(_E("logical_and")(a.isinf(), x.isfinite()), 0.0, lower_val)
    v = (1.0 - lower_val) if upper else lower_val
    if upper:
        v = _where(_E("logical_and")(_E("logical_and")(x > 0, a > 0), _E("logical_and")(x.isfinite(), a.isfinite())),
                   r, v)
    return _where(_E("logical_or")(nan, both0), math.nan, v)


@export(inplace=True)
def igamma(input, other):
    """``torch.igamma``: the regularized lower incomplete gamma ``P(a, x)`` (floating tensors; series or
    continued fraction at a fixed 100 steps: accurate to ~1e-10 for ``a`` up to ~500; larger ``a`` near ``x``
    converges too slowly for that step count)."""
    a, x, rt = _igamma_args("igamma", input, other)
    p, _ = _igamma_core(a, x)
    return _back(_igamma_edges(a, x, p, False), rt)


@export(inplace=True)
def igammac(input, other):
    """``torch.igammac``: the regularized upper incomplete gamma ``Q(a, x) = 1 - P(a, x)``."""
    a, x, rt = _igamma_args("igammac", input, other)
    _, q = _igamma_core(a, x)
    return _back(_igamma_edges(a, x, q, True), rt)


# ================================================================== window functions
def _window_args(name, n, dtype):
    n = _int(n)
    if n < 0:
        raise RuntimeError(f"{name} requires non-negative window_length, got window_length={n}")
    dt = _dt.get_default_dtype() if dtype is None else _dt.to_dtype(dtype)
    if dt.category != 2:
        raise RuntimeError(f"{name} expects floating point dtypes, got: {dt.name}")
    return n, dt


def _cosine_window(name, window_length, periodic, coeffs, dtype, device):
    n, dt = _window_args(name, window_length, dtype)
    if n <= 1:
        return _host(np.ones(n), dt, device)
    m = n if periodic else n - 1
    k = np.arange(n, dtype=np.float64)
    w = np.zeros(n)
    for j, c in enumerate(coeffs):
        w = w + c * np.cos(2.0 * math.pi * j * k / m)
    return _host(w, dt, device)


@export(method=False)
def hann_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False):
    """``torch.hann_window``: ``0.5 - 0.5 cos(2 pi k / N)`` (``N = L`` if periodic else ``L - 1``)."""
    return _cosine_window("hann_window", window_length, periodic, (0.5, -0.5), dtype, device)


@export(method=False)
def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None, layout=None, device=None,
                   requires_grad=False):
    """``torch.hamming_window``: ``alpha - beta cos(2 pi k / N)``."""
    return _cosine_window("hamming_window", window_length, periodic, (alpha, -beta), dtype, device)


@export(method=False)
def blackman_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False):
    """``torch.blackman_window``: ``0.42 - 0.5 cos(2 pi k / N) + 0.08 cos(4 pi k / N)``."""
    return _cosine_window("blackman_window", window_length, periodic, (0.42, -0.5, 0.08), dtype, device)


@export(method=False)
def bartlett_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False):
    """``torch.bartlett_window``: the triangular window ``1 - |2k / N - 1|``."""
    n, dt = _window_args("bartlett_window", window_length, dtype)
    if n <= 1:
        return _host(np.ones(n), dt, device)
    m = n if periodic else n - 1
    k = np.arange(n, dtype=np.float64)
    return _host(1.0 - np.abs(2.0 * k / m - 1.0), dt, device)


@export(method=False)
def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, layout=None, device=None,
                  requires_grad=False):
    """``torch.kaiser_window``: ``I0(beta sqrt(1 - (2k/N - 1)^2)) / I0(beta)``."""
    n, dt = _window_args("kaiser_window", window_length, dtype)
    if n <= 1:
        return _host(np.ones(n), dt, device)
    m = n if periodic else n - 1
    k = np.arange(n, dtype=np.float64)
    r = np.sqrt(np.clip(1.0 - (2.0 * k / m - 1.0) ** 2, 0.0, None))
    return _host(np.i0(beta * r) / np.i0(beta), dt, device)


# ================================================================== *_copy variants and top-level in-place forms
_COPY_OF = ("view", "permute", "transpose", "t", "squeeze", "unsqueeze", "expand", "select", "diagonal", "detach",
            "unfold", "unbind", "split", "split_with_sizes", "as_strided", "narrow", "alias", "slice",
            "indices", "values")


def _copy_variant(view_name):
    def f(input, *args, out=None, **kwargs):
        if out is not None:   # torch: the copy into out= keeps the input's dtype exactly
            r = f(input, *args, **kwargs)
            from .reduction import _write_out
            return _write_out(r, out, view_name + "_copy")
        if view_name == "alias":
            v = input._alias()
        elif view_name == "slice":
            v = _slice(input, *args, **kwargs)
        elif view_name == "split_with_sizes":
            v = split_with_sizes(input, *args, **kwargs)
        else:
            v = getattr(input, view_name)(*args, **kwargs)
        if isinstance(v, (tuple, list)):
            return type(v)(x.clone() for x in v)
        return v.clone()
    f.__name__ = view_name + "_copy"
    f.__doc__ = f"``torch.{view_name}_copy``: ``{view_name}`` as a new tensor (no storage shared)."
    return f


for _n in _COPY_OF:
    if _n not in ("indices", "values", "narrow"):   # sparse-only / already defined (narrow_copy)
        export(_copy_variant(_n), name=_n + "_copy", method=False)

# torch.<op>_(t, ...) for the in-place methods (torch.abs_(x) is x.abs_())
_TOPLEVEL_INPLACE = ("abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "arccos", "arccosh", "arcsin",
                     "arcsinh", "arctan", "arctanh", "ceil", "clamp", "clamp_max", "clamp_min", "clip", "cos",
                     "cosh", "deg2rad", "erf", "erfc", "exp", "exp2", "expm1", "fix", "floor", "frac", "gcd", "i0",
                     "lcm", "ldexp", "log", "log10", "log1p", "log2", "logit", "nan_to_num", "neg", "negative",
                     "rad2deg", "reciprocal", "relu", "round", "rsqrt", "sigmoid", "sin", "sinc", "sinh", "sqrt",
                     "square", "tan", "tanh", "trunc", "xlogy", "zero", "fill", "index_put")


def _toplevel_inplace(name):
    def f(input, *args, **kwargs):
        return getattr(input, name)(*args, **kwargs)
    f.__name__ = name
    f.__doc__ = f"``torch.{name}(t, ...)``: ``t.{name}(...)``."
    return f


for _n in _TOPLEVEL_INPLACE:
    if _n + "_" not in EXPORTS:
        export(_toplevel_inplace(_n + "_"), name=_n + "_", method=False)
for _n in ("get_device", "resize_as_", "as_strided_"):
    export(_toplevel_inplace(_n), name=_n, method=False)


@export
def conj_physical_(input):
    """``Tensor.conj_physical_``: nothing to do for real tensors."""
    return input


def _elu_float_only(name):
    """torch.selu / torch.selu_ run the float-only ``elu_cpu`` kernel (F.selu checks the same)."""
    fn, method, function, inplace = EXPORTS[name]

    def f(input, *args, **kw):
        if isinstance(input, Tensor) and input._dtype.category != 2:
            from .linalg import _CAP
            raise NotImplementedError(f"{name}: \"elu_cpu\" not implemented for "
                                      f"'{_CAP.get(input._dtype.name, input._dtype.name)}'")
        return fn(input, *args, **kw)
    f.__name__, f.__doc__ = fn.__name__, fn.__doc__
    EXPORTS[name] = (f, method, function, inplace)


for _n in ("selu", "selu_"):
    if _n in EXPORTS:
        _elu_float_only(_n)


# ------------------------------------------------------------------ torch.vmap, torch.sym_*
def _vmap_tree(a, d, leaf):
    """``leaf(tensor, dim)`` over ``a`` (a tensor, or tuples / lists / dicts of them) with ``d`` its in_dims
    (an int / None for the whole subtree, or the same structure); non-tensor leaves pass through when unmapped."""
    if isinstance(a, (tuple, list)):
        ds = d if isinstance(d, (tuple, list)) else [d] * len(a)
        if len(ds) != len(a):
            raise ValueError(f"vmap: in_dims {d!r} does not match the structure of an input of length {len(a)}")
        return type(a)(_vmap_tree(x, dd, leaf) for x, dd in zip(a, ds))
    if isinstance(a, dict):
        return {k: _vmap_tree(v, d[k] if isinstance(d, dict) else d, leaf) for k, v in a.items()}
    if d is None:
        return a
    if not isinstance(a, Tensor):
        raise ValueError(f"vmap: Got in_dim={d} for an input but the input is of type {type(a).__name__}; only "
                         f"Tensors can be mapped over (use in_dims=None for it)")
    if isinstance(d, _bool) or not isinstance(d, (_int, np.integer)) or not -a.ndim <= d < a.ndim:
        raise ValueError(f"vmap: Got in_dim={d!r} for an input that is a Tensor of dimensionality {a.ndim}, so "
                         f"expected an int in_dim satisfying {-a.ndim} <= in_dim < {a.ndim}")
    return leaf(a, _int(d))


def _vmap_stack(rs, od, empty=False):
    """The per-entry results ``rs`` stacked along ``od``; ``empty``: ``rs`` holds the result of one dummy entry and
    the batch is empty (outputs of size 0 along ``od``, the dummy's shapes and dtypes otherwise)."""
    r0 = rs[0]
    if isinstance(r0, (tuple, list)):
        ods = od if isinstance(od, (tuple, list)) else [od] * len(r0)
        if len(ods) != len(r0):
            raise ValueError(f"vmap: out_dims {od!r} does not match the structure of the {len(r0)} outputs")
        return type(r0)(_vmap_stack([r[j] for r in rs], ods[j], empty) for j in _range(len(r0)))
    if isinstance(r0, dict):
        return {k: _vmap_stack([r[k] for r in rs], od[k] if isinstance(od, dict) else od, empty) for k in r0}
    if not isinstance(r0, Tensor):
        raise ValueError(f"vmap: the function must return Tensors (or tuples / lists / dicts of them), got "
                         f"{type(r0).__name__}")
    if od is None:
        return r0
    d = wrap_dim(od, r0.ndim + 1, "vmap")
    if empty:
        return _E("stack")(rs, d).narrow(d, 0, 0).contiguous()
    return _E("stack")(rs, d)


@export(method=False)
def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """``torch.vmap``: ``func`` mapped over dim ``in_dims`` of its inputs (an int for all, or a tuple with an int /
    None per argument, nested like the arguments), its outputs stacked along ``out_dims``.  neetorch runs
    ``func`` once per batch entry and stacks the results (the values torch's batched rules give for a pure
    function); ``randomness`` and ``chunk_size`` are accepted, random ops draw independently per entry.  An empty
    batch runs ``func`` once on a zero-filled entry to learn its outputs' shapes and dtypes."""
    if not (isinstance(in_dims, (_int, tuple)) and not isinstance(in_dims, _bool)):
        raise ValueError(f"vmap({getattr(func, '__name__', func)}, in_dims={in_dims!r}): expected `in_dims` to be "
                         f"int or a (potentially nested) tuple matching the structure of inputs, got "
                         f"{type(in_dims)}.")

    def wrapped(*args, **kwargs):
        dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
        if len(dims) != len(args):
            raise ValueError(f"vmap({getattr(func, '__name__', func)}, in_dims={in_dims!r}): in_dims is not "
                             f"compatible with the structure of `inputs` ({len(args)} positional arguments)")
        sizes = []
        _vmap_tree(tuple(args), dims, lambda t, d: sizes.append(t.shape[d]))
        if not sizes:
            raise ValueError("vmap: at least one input must be a Tensor mapped over (all in_dims are None)")
        if len(set(sizes)) != 1:
            raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
                             f"{sizes} for the mapped dimension")
        if sizes[0] == 0:
            # an empty batch: ``func`` runs once on a zero-filled entry (the mapped inputs' per-entry shapes and
            # dtypes) to learn its outputs' shapes and dtypes; the results are those with a batch of 0 elements
            def dummy(t, d):
                sh = tuple(t.shape[:d]) + tuple(t.shape[d + 1:])
                from ..tensor.creation import zeros
                return zeros(sh, dtype=t.dtype, device=t.device)
            r = func(*_vmap_tree(tuple(args), dims, dummy), **kwargs)
            return _vmap_stack([r], out_dims, empty=True)
        outs = [func(*_vmap_tree(tuple(args), dims, lambda t, d: t.select(d, i)), **kwargs)
                for i in _range(sizes[0])]
        return _vmap_stack(outs, out_dims)
    wrapped.__name__ = getattr(func, "__name__", "vmapped")
    wrapped.__doc__ = getattr(func, "__doc__", None)
    return wrapped


# torch.sym_*: the symbolic-shape helpers, on plain Python numbers (neetorch shapes are always concrete)
@export(method=False)
def sym_float(a):
    return _float(a)


@export(method=False)
def sym_int(a):
    """``torch.sym_int``: an int (a float is truncated toward zero, like ``int``)."""
    return _int(a)


@export(method=False)
def sym_max(a, b):
    return _max(a, b)


@export(method=False)
def sym_min(a, b):
    return _min(a, b)


@export(method=False)
def sym_not(a):
    return not a


@export(method=False)
def sym_ite(b, t, f):
    return t if b else f


@export(method=False)
def sym_sum(args):
    return _sum(args)


@export(method=False)
def sym_sqrt(a):
    return math.sqrt(a)
