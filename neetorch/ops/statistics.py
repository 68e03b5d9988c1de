"""Order statistics, counting and scans written as compositions of existing ops.

``nanmedian`` (CPU: median's kernel), ``quantile``/``nanquantile``, ``mode`` (CPU: topk's kernel's torch-order
selection; other devices: a stable ``sort``, then ``gather`` at computed ranks),
``logcumsumexp`` (a log-space doubling scan of ``logaddexp``), ``diff``, ``histc`` and ``bincount``
(``scatter_add`` of a computed bin index).  Being compositions they run on every device that runs their parts
and trace as those parts; ``bincount`` (its length is ``max(input) + 1``) and ``histc`` without an explicit range
read values to size their result, so under ``@nee.jit`` they raise ``TraceError`` like any data-dependent shape.

Tie rules are PyTorch's: ``median``/``nanmedian`` return the lower median and the index of the element a stable
sort puts there (on the CPU torch's CPU kernel's: the same but for nanmedian's all-NaN rows, kernels/reduction.py);
``mode`` returns the smallest of the most frequent values and, on the CPU, the index torch's CPU kernel returns
(the last occurrence in its std::sort's order: kernels/indexing.py, ops/_stl_order.py; other devices: the last
occurrence).
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor
from . import reduction as _red
from .registry import EXPORTS, _trace_hook, export
from .shape_rules import int_arg, wrap_dim

__all__ = ["bincount", "diff", "histc", "logcumsumexp", "mode", "nanmedian", "nanquantile", "quantile"]


def _E(name):
    return EXPORTS[name][0]


def _check(x, op):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}(): argument 'input' must be Tensor, not {type(x).__name__}")


def _rt(name, fields=("values", "indices")):
    from .reduction import _rt as rt
    return rt(name, fields)


def _arange_along(n, d, ndim, device):
    """``arange(n)`` shaped to broadcast along dim ``d`` of an ``ndim``-D tensor."""
    from ..tensor.creation import arange
    shape = [1] * ndim
    shape[d] = n
    return arange(n, dtype=_dt.int64, device=device).reshape(tuple(shape))


# ------------------------------------------------------------------ nanmedian
@export
def nanmedian(input, dim=_red._NODIM, keepdim=_red._NOKD):
    """``torch.nanmedian``: the lower median of the non-NaN values (NaN when a row has none); with ``dim`` a
    ``(values, indices)`` namedtuple."""
    dim = _red._nodim("nanmedian", dim)
    if dim is None and keepdim is not _red._NOKD:
        _red._dim_keepdim("nanmedian", _red._NODIM, keepdim)
    _check(input, "nanmedian")
    if dim is None and input.numel() == 0:
        return _red.empty_median(input)       # (torch's NaN in the input's dtype)
    if dim is not None and input.ndim and input.shape[wrap_dim(dim, input.ndim, "nanmedian")] == 0:
        raise IndexError(f"median(): Expected reduction dim {wrap_dim(dim, input.ndim, 'nanmedian')} to have "
                         f"non-zero size.")     # (torch checks this before the dtype, with median's name)
    if input._dtype is _dt.bool_:
        raise NotImplementedError("nanmedian: not implemented for bool tensors")
    if input._device.type == "cpu" and (dim is None or input.ndim):
        # median's CPU kernel (kernels/reduction.py): torch's CPU index (std::nth_element's) for all-NaN rows,
        # and without a dim the zero sign / NaN torch's nth_element on the values leaves at the median
        from .registry import run
        if dim is None:
            return run(_red.MEDIAN, [input], {"dim": None, "keepdim": False, "ignore_nan": True})[0]
        d = wrap_dim(dim, input.ndim, "nanmedian")
        return _rt("nanmedian")(*run(_red.MEDIAN, [input], {"dim": d, "keepdim": bool(keepdim),
                                                            "ignore_nan": True}))
    sort = _E("sort")
    if dim is None:
        s = sort(input.reshape(-1), stable=True).values
        k = input.isnan().logical_not().sum().reshape(1)
        pos = ((k - 1) // 2).clamp_min(0)
        return s.gather(0, pos).reshape(())
    d = wrap_dim(dim, input.ndim, "nanmedian")
    if input.ndim == 0:
        from ..tensor.creation import zeros
        return _rt("nanmedian")(input.clone(), zeros((), dtype=_dt.int64, device=input.device))
    if input.shape[d] == 0:
        raise IndexError(f"nanmedian(): Expected reduction dim {d} to have non-zero size.")
    s, idx = sort(input, dim=d, stable=True)
    k = input.isnan().logical_not().sum(d, keepdim=True)
    pos = ((k - 1) // 2).clamp_min(0)
    v, i = s.gather(d, pos), idx.gather(d, pos)
    if not keepdim:
        v, i = v.squeeze(d), i.squeeze(d)
    return _rt("nanmedian")(v, i)


# ------------------------------------------------------------------ quantile / nanquantile
_INTERP = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(name, input, q, dim, keepdim, interpolation, ignore_nan):
    _check(input, name)
    if input._dtype not in (_dt.float32, _dt.float64):
        raise RuntimeError(f"{name}() input tensor must be either float or double dtype (got {input._dtype.name})")
    if interpolation not in _INTERP:
        raise RuntimeError(f"{name}() interpolation must be one of linear, lower, higher, midpoint or nearest, "
                           f"but got {interpolation}")
    from ..tensor.creation import full
    if isinstance(q, Tensor):
        if q.ndim > 1:
            raise RuntimeError(f"{name}() q must be a scalar or 1D tensor (got shape {tuple(q.shape)})")
        if q._dtype is not input._dtype:
            raise RuntimeError(f"{name}() q tensor must be same dtype as the input tensor (got {q._dtype.name} and "
                               f"{input._dtype.name})")
        if _trace_hook[0] is None and q.numel():
            # eager calls check the values like torch; a traced q is not read (its value is data): there an
            # out-of-range q gets an out-of-range row index, which gather's value check refuses on every call
            a = q.numpy(force=True)
            if not np.all((a >= 0) & (a <= 1)):
                raise RuntimeError(f"{name}() q values must be in the range [0, 1]")
        qt = q
    else:
        qf = float(q)
        if not 0 <= qf <= 1:
            raise RuntimeError(f"{name}() q must be in the range [0, 1] but got {qf}")
        qt = full((), qf, dtype=input._dtype, device=input.device)
    if input.numel() == 0:
        raise RuntimeError(f"{name}() input tensor must be non-empty (got shape {tuple(input.shape)})")
    sort = _E("sort")
    if dim is not None and input.ndim > 0:
        d = wrap_dim(dim, input.ndim, name)
        s = sort(input.movedim(d, -1), -1).values
        out_shape = tuple(1 if j == d else m for j, m in enumerate(input.shape) if keepdim or j != d)
    else:
        if dim is not None:
            wrap_dim(dim, input.ndim, name)
        s = sort(input.reshape(-1)).values
        out_shape = (1,) * input.ndim if keepdim else ()
    n = s.shape[-1]
    qv = qt.reshape(-1)
    nan_rows = s.isnan()
    if ignore_nan:
        k = nan_rows.logical_not().sum(-1, keepdim=True)
        ranks = qv * (k - 1)
        ranks = _E("where")(ranks < 0, 0.0, ranks)
    else:
        ranks = _E("where")(nan_rows.any(-1, keepdim=True), float(n - 1), qv * (n - 1))
    if interpolation == "lower":
        ranks = ranks.floor()
    elif interpolation == "higher":
        ranks = ranks.ceil()
    elif interpolation == "nearest":
        ranks = ranks.round()
    below = ranks.to(_dt.int64)
    valid = None
    if isinstance(q, Tensor):
        valid = _E("logical_and")(qv >= 0, qv <= 1)   # NaN too: index n, refused by gather's check
        below = _E("where")(valid, below, n)
    lead = tuple(s.shape[:-1])
    if tuple(ranks.shape[:-1]) != lead:
        ranks = ranks.expand(*lead, ranks.shape[-1])
        below = below.expand(*lead, below.shape[-1])
    r = s.gather(-1, below)
    if interpolation in ("linear", "midpoint"):
        above = ranks.ceil().to(_dt.int64)
        if valid is not None:
            above = _E("where")(valid, above, n)
        va = s.gather(-1, above)
        w = 0.5 if interpolation == "midpoint" else ranks - below.to(ranks._dtype)
        diff_ = va - r
        # torch's lerp: the form that is exact at the endpoint its weight is closer to
        if isinstance(w, float):
            r = va - diff_ * (1.0 - w)
        else:
            r = _E("where")(w < 0.5, r + w * diff_, va - diff_ * (1.0 - w))
    # r: (*reduced, Q); torch puts the quantiles first
    if not isinstance(q, Tensor) or q.ndim == 0:
        return r.reshape(out_shape)
    return r.movedim(-1, 0).reshape((qv.shape[0],) + out_shape)


@export
def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """``torch.quantile``: the ``q``-th quantiles (float or 0-/1-D tensor of the input's dtype) of float32/
    float64 ``input`` over ``dim`` (``None``: flattened); a row with a NaN gives NaN.  ``interpolation``:
    linear, lower, higher, midpoint or nearest (half to even).  A 1-D ``q`` adds a leading dimension."""
    return _quantile("quantile", input, q, dim, keepdim, interpolation, False)


@export
def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """``torch.nanquantile``: :func:`quantile` of the non-NaN values (NaN for a row of NaNs only)."""
    return _quantile("nanquantile", input, q, dim, keepdim, interpolation, True)


# ------------------------------------------------------------------ mode
@export
def mode(input, dim=-1, keepdim=False):
    """``torch.mode``: the most frequent value along ``dim`` (the smallest one on ties) and the index of an
    occurrence of it (on the CPU the one torch's CPU kernel returns: kernels/indexing.py); a ``(values, indices)``
    namedtuple."""
    _check(input, "mode")
    d = wrap_dim(dim, input.ndim, "mode")
    if input.ndim == 0:
        from ..tensor.creation import zeros
        return _rt("mode")(input.clone(), zeros((), dtype=_dt.int64, device=input.device))
    n = input.shape[d]
    if n == 0:
        raise IndexError(f"mode(): Expected reduction dim {d} to have non-zero size.")
    if input._dtype.category == 3:
        raise NotImplementedError(f"mode(): not implemented for complex tensors (got {input._dtype.name})")
    if input._device.type == "cpu":
        # the index torch's CPU std::sort of (value, index) pairs leaves last in the first longest run (topk's
        # kernel, kernels/indexing.py; with NaNs the value can differ from the stable sort's too)
        from .indexing import TOPK
        from .registry import run
        v, i = run(TOPK, [input], {"k": 1, "dim": d, "largest": False, "select": ("mode", 0)})
        if not keepdim:
            v, i = v.squeeze(d), i.squeeze(d)
        return _rt("mode")(v.contiguous(), i.contiguous())
    from ..tensor.creation import ones_like
    s, idx = _E("sort")(input, dim=d, stable=True)
    pos = _arange_along(n, d, input.ndim, input.device)
    if n > 1:
        change = s.narrow(d, 1, n - 1) != s.narrow(d, 0, n - 1)
        first = _E("cat")([ones_like(change.narrow(d, 0, 1)), change], d)
    else:
        first = ones_like(s, dtype=_dt.bool_)
    start = _E("cummax")(_E("where")(first, pos, 0), d).values     # where each element's run begins
    best = _E("argmax")(pos - start, d, keepdim=True)              # end of the first longest run
    v, i = s.gather(d, best), idx.gather(d, best)
    if not keepdim:
        v, i = v.squeeze(d), i.squeeze(d)
    return _rt("mode")(v, i)


# ------------------------------------------------------------------ logcumsumexp
@export
def logcumsumexp(input, dim):
    """``torch.logcumsumexp``: ``log(cumsum(exp(input)))`` along ``dim`` without overflow or underflow
    (floating tensors): ``ceil(log2(n))`` steps of ``logaddexp`` with the sequence shifted by 1, 2, 4, ..."""
    _check(input, "logcumsumexp")
    if input._dtype.category not in (2, 3):
        raise _dt.DTypeNotImplementedError(f"logcumsumexp(): not implemented for {input._dtype.name} (floating point and complex tensors only)")
    d = wrap_dim(dim, input.ndim, "logcumsumexp")
    if input.ndim == 0 or input.numel() == 0:
        return input.clone()
    odt = input._dtype
    y = input.to(_dt.float32) if odt in _dt.LOW_FLOATS else input
    n = y.shape[d]
    from ..tensor.creation import full
    logaddexp, cat = (_E("logaddexp") if odt.category == 2 else _complex_logaddexp), _E("cat")
    s = 1
    while s < n or (s == 1 and odt.category == 3):   # (complex: torch folds even one term with -inf+0j)
        pad_shape = list(y.shape)
        pad_shape[d] = s
        shifted = cat([full(tuple(pad_shape), -math.inf, dtype=y._dtype, device=y.device), y.narrow(d, 0, n - s)], d)
        y = logaddexp(y, shifted)
        s *= 2
    return y.to(odt) if y._dtype is not odt else (y if y is not input else input.clone())


def _complex_logaddexp(x, y):
    """torch's complex ``_log_add_exp_helper(x, y)`` of logcumsumexp (``x`` the later term, ``y`` the earlier
    partial sum): ``log1p(exp(min - max)) + max`` with min/max by real part (a tie makes ``y`` the min); a NaN
    anywhere gives NaN+NaNj; two -inf real parts give the min, two +inf ones ``log(exp(min) + exp(max))``.
    The imaginary part is not wrapped to (-pi, pi] (a log is defined up to 2*pi*i)."""
    from ..tensor.creation import full
    where, isnan = _E("where"), _E("isnan")
    xr, yr = x.real, y.real
    x_min = xr < yr
    mn, mx = where(x_min, x, y), where(x_min, y, x)
    r = _E("log1p")(_E("exp")(mn - mx)) + mx
    mnr, mxr = mn.real, mx.real
    tie_inf = _E("isinf")(mnr) & (mnr == mxr)
    pos = _E("log")(_E("exp")(mn) + _E("exp")(mx))
    r = where(tie_inf, where(mnr < 0, mn, pos), r)
    bad = isnan(xr) | isnan(x.imag) | isnan(yr) | isnan(y.imag)
    return where(bad, full((), complex(math.nan, math.nan), dtype=x._dtype, device=x.device), r)


# ------------------------------------------------------------------ diff
@export
def diff(input, n=1, dim=-1, prepend=None, append=None):
    """``torch.diff``: the ``n``-th forward difference along ``dim`` (``!=`` for bool), after concatenating
    ``prepend`` / ``append`` (same number of dims, same sizes except along ``dim``)."""
    _check(input, "diff")
    if input.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    n = int_arg("diff", "n", n)
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    d = wrap_dim(dim, input.ndim, "diff")
    parts = []
    for t in (prepend, input, append):
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"diff(): prepend/append must be Tensors, not {type(t).__name__}")
        if t is not input:
            if t.ndim != input.ndim:
                raise RuntimeError(f"diff expects prepend or append to be the same dimension as input (input has "
                                   f"{input.ndim} dims, got {t.ndim})")
            for j in range(input.ndim):
                if j != d and t.shape[j] != input.shape[j]:
                    raise RuntimeError(f"diff expects the shape of tensor to prepend or append to match that of "
                                       f"input except along the differencing dimension; input.size({j}) = "
                                       f"{input.shape[j]}, but got tensor.size({j}) = {t.shape[j]}")
        parts.append(t)
    if n == 0:      # the input itself: prepend / append checked, not added (torch, numpy)
        return input.clone()
    x = _E("cat")(parts, d) if len(parts) > 1 else input
    for _ in range(n):
        L = x.shape[d]
        if L == 0:
            break
        a, b = x.narrow(d, 1, L - 1), x.narrow(d, 0, L - 1)
        x = _E("logical_xor")(a, b) if x._dtype is _dt.bool_ else a - b
    return x


# ------------------------------------------------------------------ histc / bincount
@export
def histc(input, bins=100, min=0, max=0):
    """``torch.histc``: counts of ``input`` in ``bins`` equal-width bins over ``[min, max]`` (both 0/equal: the
    data's range, widened by 1 each way when it is a single value); values outside the range and NaN are
    ignored, the last bin includes ``max``.  Floating tensors; the result has the input's dtype."""
    _check(input, "histc")
    if input._dtype.category != 2:
        raise _dt.DTypeNotImplementedError(f"histc(): not implemented for {input._dtype.name} (floating point tensors only)")
    bins = int_arg("histc", "bins", bins)
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    lo, hi = float(min), float(max)
    if lo == hi and input.numel() > 0:
        # the data's range: a value read back (under @nee.jit: a TraceError, the result's bins depend on data)
        mm = _E("aminmax")(input)
        lo, hi = float(mm.min.item()), float(mm.max.item())
    if lo == hi:
        lo, hi = lo - 1.0, hi + 1.0
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"torch.histc: range of [{lo:g}, {hi:g}] is not finite")
    if not lo < hi:
        raise RuntimeError(f"torch.histc: max must be larger than min (got min={lo:g}, max={hi:g})")
    odt = input._dtype
    npdt = odt.np
    # torch maps in the input dtype (float16: in float, its Half arithmetic widens): the edges are dtype values
    lo_t, hi_t = npdt.type(lo), npdt.type(hi)
    cdt = _dt.compute_dtype(odt)
    cnp = cdt.np.type
    width = float(cnp(hi_t) - cnp(lo_t))
    from ..tensor.creation import zeros
    with np.errstate(over="ignore"):
        width_dt, bins_dt = float(npdt.type(width)), float(npdt.type(bins))
    if not math.isfinite(width_dt):
        # torch's bin edges are linspace(lo, hi) in the input dtype, whose step overflows there: NaN edges, so
        # no value is inside (float16 histc(min=-60000, max=60000) counts nothing)
        return zeros((bins,), dtype=odt, device=input.device)
    x = input.reshape(-1)
    xc = x.to(cdt) if cdt is not odt else x
    where = _E("where")
    inside = _E("logical_and")(x >= float(lo_t), x <= float(hi_t))
    if odt in _dt.LOW_FLOATS:
        # torch's kernel computes (x - lo) * bins / (hi - lo) in c10::Half / BFloat16 arithmetic: every step
        # (and the int64 bins and the width themselves) rounded to the input dtype
        t = where(inside, (x - float(lo_t)) * bins_dt / width_dt, 0.0)
    else:
        t = where(inside, (xc - float(lo_t)) * float(bins) / width, 0.0)
    # an overflowed position (float16's (x - lo) * bins past 65504): torch's int64 cast of inf / NaN is INT64_MIN,
    # which its kernel's index arithmetic (times the 2- or 4-byte element size) wraps to bin 0
    t = where(t.isfinite(), t, 0.0)
    pos = t.to(_dt.int64)
    pos = where(pos == bins, bins - 1, pos)
    # past the last bin (a bin count that the low float rounds up: bfloat16(259) is 260): torch's kernel writes
    # past its thread's histogram row into the next thread's, which the final sum adds as bin pos - bins
    pos = where(pos >= bins, pos - bins, pos)
    # counted in int64 and rounded once: a float16 histogram does not stop at 2048 per bin (torch's float16
    # accumulation does, per thread)
    counts = zeros((bins,), dtype=_dt.int64, device=input.device).scatter_add(0, pos, inside.to(_dt.int64))
    return counts.to(odt)


@export
def bincount(input, weights=None, minlength=0):
    """``torch.bincount``: occurrences of each value of a 1-D non-negative integer tensor (length
    ``max(max(input) + 1, minlength)``); with ``weights`` the sum of the weights instead (float32/float64
    weights keep their dtype, others give float64).  The length depends on the data: not traceable."""
    _check(input, "bincount")
    minlength = int(minlength)
    if minlength < 0:
        raise RuntimeError(f"bincount: minlength should be >= 0 (got {minlength})")
    if input.ndim != 1 or input._dtype.category != 1:
        # (torch: a floating / bool input is a dtype the kernel is not implemented for: NotImplementedError)
        raise (RuntimeError if input._dtype.category == 1 else NotImplementedError)(
            f"bincount only supports 1-d non-negative integral inputs (got a {input.ndim}-D "
            f"{input._dtype.name} tensor)")
    if weights is not None and (not isinstance(weights, Tensor) or weights.ndim != 1
                                or weights.shape[0] != input.shape[0]):
        raise RuntimeError(f"bincount: weights should be 1-d and have the same length as input (input "
                           f"{tuple(input.shape)}, weights {tuple(getattr(weights, 'shape', ()))})")
    size = minlength
    if input.numel():
        mm = _E("aminmax")(input)
        lo, hi = int(mm.min.item()), int(mm.max.item())
        if lo < 0:
            raise RuntimeError(f"bincount only supports 1-d non-negative integral inputs (got the value {lo})")
        size = builtins.max(size, hi + 1)
    from ..tensor.creation import ones, zeros
    if weights is None or not input.numel():    # (torch: an empty input counts in int64, weights or not)
        odt = _dt.int64
        src = ones((input.shape[0],), dtype=odt, device=input.device)
    else:
        odt = weights._dtype if weights._dtype in (_dt.float32, _dt.float64) else _dt.float64
        src = weights.to(odt)
    return zeros((size,), dtype=odt, device=input.device).scatter_add(0, input.to(_dt.int64), src)

