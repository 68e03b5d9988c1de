"""Reductions and scans: sum, mean, prod, amax/amin, max/min, argmax/argmin, var/std, any/all,
logsumexp, norms, median, cumsum/cumprod/cummax/cummin, with PyTorch's signatures and dtype rules.

Kernel-backed ops take ``attrs = {"dims": tuple of wrapped dims, "keepdim": bool, "odt": output dtype
name or None}``; the CPU kernels live in ``neetorch/devices/cpu/kernels/reduction.py``.  Composite ops
(var/std, logsumexp, norms, nanmean) are written in the frontend from those and elementwise ops.
"""
from __future__ import annotations

import builtins
import math
from collections import namedtuple

import numpy as np

from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor
from .registry import EXPORTS, Meta, OpDef, _trace_hook, export, register
from .registry import run as _registry_run
from .shape_rules import int_arg, numel, wrap_dim, wrap_dims

_bsum, _bmax, _babs = builtins.sum, builtins.max, builtins.abs

# ------------------------------------------------------------------ result types (torch.return_types.*)
_RT = {}


def _rt(name, fields=("values", "indices")):
    if name not in _RT:
        _RT[name] = namedtuple(name, fields)
    return _RT[name]


# ------------------------------------------------------------------ shape / dtype rules
def _red_shape(shape, dims, keepdim):
    if keepdim:
        return tuple(1 if d in dims else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in dims)


def _sum_dtype(dt):
    return _dt.int64 if dt.category < 2 else dt


def _infer(rule):
    def infer(metas, attrs):
        (x,) = metas
        odt = _dt.to_dtype(attrs["odt"]) if attrs.get("odt") else rule(x.dtype)
        return [Meta(_red_shape(x.shape, attrs["dims"], attrs["keepdim"]), odt)]
    return infer


def _np_ref(fn, cast=None):
    def ref(xs, attrs):
        r = fn(xs[0], axis=attrs["dims"], keepdims=attrs["keepdim"])
        return [np.asarray(r if cast is None else np.asarray(r).astype(cast(xs[0])))]
    return ref


def _same(dt):
    return dt


def _anyall_dt(dt):
    return _dt.uint8 if dt is _dt.uint8 else _dt.bool_


SUM = register(OpDef("sum", _infer(_sum_dtype), kind="reduce", reference=_np_ref(np.sum)))
MEAN = register(OpDef("mean", _infer(_same), kind="reduce", reference=_np_ref(np.mean)))
NANSUM = register(OpDef("nansum", _infer(_sum_dtype), kind="reduce", reference=_np_ref(np.nansum)))
PROD = register(OpDef("prod", _infer(_sum_dtype), kind="reduce", reference=_np_ref(np.prod)))
AMAX = register(OpDef("amax", _infer(_same), kind="reduce", reference=_np_ref(np.max)))
AMIN = register(OpDef("amin", _infer(_same), kind="reduce", reference=_np_ref(np.min)))
ANY = register(OpDef("any", _infer(_anyall_dt), kind="reduce", reference=_np_ref(np.any)))
ALL = register(OpDef("all", _infer(_anyall_dt), kind="reduce", reference=_np_ref(np.all)))
COUNT_NONZERO = register(OpDef("count_nonzero", _infer(lambda d: _dt.int64), kind="reduce",
                               reference=_np_ref(lambda x, axis, keepdims: np.count_nonzero(x, axis=axis,
                                                                                             keepdims=keepdims))))


def _infer_maxdim(metas, attrs):
    (x,) = metas
    d = attrs["dim"]
    shape = _red_shape(x.shape, (d,) if x.shape else (), attrs["keepdim"])
    return [Meta(shape, x.dtype), Meta(shape, _dt.int64)]


MAX_DIM = register(OpDef("max_dim", _infer_maxdim, kind="reduce", nout=2))
MIN_DIM = register(OpDef("min_dim", _infer_maxdim, kind="reduce", nout=2))


def _infer_arg(metas, attrs):
    (x,) = metas
    d = attrs["dim"]
    if d is None:
        shape = (1,) * len(x.shape) if attrs["keepdim"] else ()
    else:
        shape = _red_shape(x.shape, (d,) if x.shape else (), attrs["keepdim"])
    return [Meta(shape, _dt.int64)]


ARGMAX = register(OpDef("argmax", _infer_arg, kind="reduce"))
ARGMIN = register(OpDef("argmin", _infer_arg, kind="reduce"))


def _infer_scan(metas, attrs):
    (x,) = metas
    odt = _dt.to_dtype(attrs["odt"]) if attrs.get("odt") else x.dtype
    if attrs["op"] in ("cummax", "cummin"):
        return [Meta(x.shape, odt), Meta(x.shape, _dt.int64)]
    return [Meta(x.shape, odt)]


CUMSUM = register(OpDef("cumsum", _infer_scan, kind="other"))
CUMPROD = register(OpDef("cumprod", _infer_scan, kind="other"))
CUMMAX = register(OpDef("cummax", _infer_scan, kind="other", nout=2))
CUMMIN = register(OpDef("cummin", _infer_scan, kind="other", nout=2))


def _infer_median(metas, attrs):
    (x,) = metas
    d = attrs["dim"]
    if d is None:
        return [Meta((), x.dtype), Meta((), _dt.int64)]
    shape = _red_shape(x.shape, (d,) if x.shape else (), attrs["keepdim"])
    return [Meta(shape, x.dtype), Meta(shape, _dt.int64)]


MEDIAN = register(OpDef("median", _infer_median, kind="reduce", nout=2))


# ------------------------------------------------------------------ helpers
def _check(x, op):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}(): argument 'input' must be Tensor, not {type(x).__name__}")


def _dims(dim, ndim, op):
    """Wrapped dims; None and () mean every dim (torch's convention for sum/mean/amax...)."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (tuple, list)) and len(dim) == 0:
        return tuple(range(ndim))
    if isinstance(dim, bool):
        raise TypeError(f"{op}(): dim must be an int or a tuple of ints, got bool")
    d = wrap_dims(dim, ndim, op)
    return tuple(x for x in d if x < ndim) if ndim == 0 else d


def _cast(x, dtype):
    if dtype is None:
        return x
    dt = _dt.to_dtype(dtype)
    return x if x._dtype is dt else x.to(dt)


def run(op, inputs, attrs, *args, **kw):
    x = inputs[0]
    if 0 in x.shape and (_trace_hook[0] is None or not _tracing()):
        # (not while this thread traces: the node must read the traced input, its shape may follow a dynamic dim)
        # an empty view (of a stepped slice, ...) can carry strides the CPU kernel cannot plan: a fresh empty
        # tensor holds the same (no) values
        inputs = [x.new_empty(tuple(x.shape))] + list(inputs[1:])
    return _registry_run(op, inputs, attrs, *args, **kw)


def _tracing() -> bool:
    from ..trace.tracer import is_tracing
    return is_tracing()


def _nonempty(x, dims, op):
    for d in dims:
        if x.shape[d] == 0:
            raise IndexError(f"{op}(): Expected reduction dim {d} to have non-zero size.")


def _reduce(op, x, dim, keepdim, odt=None, name=None):
    dims = _dims(dim, x.ndim, name or op.name)
    if x._dtype.category == 3:   # complex: numpy (ops/complex.py); the generated kernels have no complex type
        from .complex import reduce_complex
        return reduce_complex(op.name, x, dims, bool(keepdim), odt)
    return run(op, [x], {"dims": dims, "keepdim": bool(keepdim), "odt": odt})[0]


def _E(name):
    return EXPORTS[name][0]


# ------------------------------------------------------------------ sum / mean / prod
def _out_dtype(name, dim, dtype, out):
    """The computation dtype of a sum/prod/mean written to ``out=``: ``dtype=``, else ``out``'s dtype (torch)."""
    if dim is None:
        raise TypeError(f"{name}(): out= needs dim= (torch's {name}(input, *, dtype) overload has no out)")
    if dtype is not None and _dt.to_dtype(dtype) is not out._dtype:
        raise RuntimeError(f"{name}: Expected out tensor to have dtype {_dt.to_dtype(dtype).name}, but got "
                           f"{out._dtype.name} instead")
    return out._dtype


def _write_out(r, out, name, cast=False):
    """``r`` written into ``out=`` torch's way: a tuple ``out`` takes a tuple result; each ``out`` must have its
    result's dtype (``cast``: a floating ``out`` may be wider or narrower, the value is cast), another shape is
    resized (see ``elementwise.resize_out``)."""
    if isinstance(r, tuple):
        if not isinstance(out, (tuple, list)) or len(out) != len(r):
            raise TypeError(f"{name}(): argument 'out' must be a tuple of {len(r)} Tensors")
        for v, o in zip(r, out):
            _write_out(v, o, name, cast)
        return type(r)(*out) if hasattr(r, "_fields") else tuple(out)
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
    if out._dtype is not r._dtype and not (cast and out._dtype.category == 2 and r._dtype.category == 2):
        raise RuntimeError(f"{name}(): Expected out tensor to have dtype {r._dtype.name}, but got {out._dtype.name} "
                           f"instead")
    return _to_out(r, out, name)


def _to_out(r, out, name):
    from .elementwise import resize_out
    resize_out(out, r.shape, name)
    out.copy_(r)
    return out


class _NoDim:
    """The default ``dim`` of the reductions whose torch signatures have no ``dim=None`` (``prod``, ``max``,
    ``min``, ``median``, ``nanmedian``): the all-elements form; an explicit ``dim=None`` is torch's TypeError."""
    __slots__ = ()

    def __repr__(self):
        return "<all elements>"


_NODIM = _NoDim()


class _NoKeepDim:
    """The default ``keepdim`` of the reductions whose torch signatures take ``keepdim`` only with ``dim``
    (``sum``, ``mean``, ``prod``, ``median``, ``nanmedian``): False; passing ``keepdim`` without ``dim`` is torch's
    TypeError (``x.sum(keepdim=True)``; ``x.sum(dim=None, keepdim=True)`` is allowed for sum / mean)."""
    __slots__ = ()

    def __bool__(self):
        return False

    def __repr__(self):
        return "False"


_NOKD = _NoKeepDim()


def _dim_keepdim(name, dim, keepdim):
    """``(dim, keepdim)`` with the sentinels resolved: ``dim`` None when left out, ``keepdim`` a bool."""
    if dim is _NODIM:
        if keepdim is not _NOKD:
            raise TypeError(f"{name}() received an invalid combination of arguments - got keepdim without dim "
                            f"(pass dim, or dim=None where {name} allows it, to use keepdim)")
        return None, False
    return dim, bool(keepdim)


@export
def sum(input, dim=_NODIM, keepdim=_NOKD, *, dtype=None, out=None):
    """``torch.sum``: sum over ``dim`` (int, tuple or None = all); bool/int inputs sum to int64; with ``out=``
    computed in ``out``'s dtype."""
    dim, keepdim = _dim_keepdim("sum", dim, keepdim)
    if out is not None:
        return _to_out(sum(input, dim, keepdim, dtype=_out_dtype("sum", dim, dtype, out)), out, "sum")
    _check(input, "sum")
    x = _cast(input, dtype)
    return _reduce(SUM, x, dim, keepdim, x._dtype.name if dtype is not None else None)


@export
def nansum(input, dim=None, keepdim=False, *, dtype=None):
    """``torch.nansum``: sum treating NaN as zero."""
    _check(input, "nansum")
    x = _cast(input, dtype)
    return _reduce(NANSUM, x, dim, keepdim, x._dtype.name if dtype is not None else None)


@export
def mean(input, dim=_NODIM, keepdim=_NOKD, *, dtype=None, out=None):
    """``torch.mean``: floating-point inputs only (or ``dtype=`` a floating dtype)."""
    dim, keepdim = _dim_keepdim("mean", dim, keepdim)
    if out is not None:
        _check(input, "mean")
        odt = _out_dtype("mean", dim, dtype, out)
        if dtype is None and input._dtype.category < 2:
            raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating point or "
                               f"complex dtype. Got: {_tname(input._dtype)}")
        if odt.category < 2:
            raise RuntimeError(f"mean(): result type Float can't be cast to the desired output type {_tname(odt)}")
        return _to_out(mean(input, dim, keepdim, dtype=odt), out, "mean")
    _check(input, "mean")
    x = _cast(input, dtype)
    if x._dtype.category < 2:
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {_tname(x._dtype)}")
    return _reduce(MEAN, x, dim, keepdim)


@export
def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    """``torch.nanmean``: mean over the non-NaN elements."""
    _check(input, "nanmean")
    if input._dtype.category != 2:   # (the input's own dtype: an integer tensor with dtype=float64 refuses too)
        raise RuntimeError(f"nanmean(): expected input to have floating point or complex dtype but got "
                           f"{_tname(input._dtype)}")
    if dtype is not None and _dt.to_dtype(dtype).category not in (2, 3):
        raise RuntimeError(f"nanmean(): could not infer output dtype. Optional dtype must be either a floating "
                           f"point or complex dtype. Got: {_tname(_dt.to_dtype(dtype))}")
    x = _cast(input, dtype)
    s = nansum(x, dim, keepdim)
    cnt = sum(_E("isnan")(x).logical_not(), dim, keepdim)
    return (s / cnt).to(x._dtype)


def _nodim(name, dim, kind="int"):
    """``dim`` with ``_NODIM`` as None; an explicit None raises like torch's argument parser."""
    if dim is None:
        hint = " (leave dim out to reduce over all elements)" if kind == "int" else ""
        raise TypeError(f"{name}(): argument 'dim' must be {kind}, not NoneType{hint}")
    return None if dim is _NODIM else dim


@export
def prod(input, dim=_NODIM, keepdim=_NOKD, *, dtype=None, out=None):
    """``torch.prod``: product over ``dim`` (or all elements); bool/int inputs give int64; with ``out=``
    computed in ``out``'s dtype."""
    dim = _nodim("prod", dim)
    if dim is None and keepdim is not _NOKD:
        _dim_keepdim("prod", _NODIM, keepdim)
    keepdim = bool(keepdim)
    _int_dim("prod", dim)
    if out is not None:
        return _to_out(prod(input, _NODIM if dim is None else dim, keepdim,
                            dtype=_out_dtype("prod", dim, dtype, out)), out, "prod")
    _check(input, "prod")
    x = _cast(input, dtype)
    if x._dtype in _dt.LOW_FLOATS:
        r = _prod_low(x, dim, keepdim)
        if r is not None:
            return r
    return _reduce(PROD, x, dim, keepdim, x._dtype.name if dtype is not None else None, "prod")


def _prod_low(x, dim, keepdim):
    """torch's float16 / bfloat16 prod multiplies in the input dtype, rounding every product; its order: along a
    strided dim one element after another; along a unit-stride dim (or a contiguous tensor's all-reduce) 64 lanes
    (4 AVX2 vectors of 16) over the blocks of 64, the lanes combined (a0*a1)*(a2*a3) then one after another, then
    the tail one at a time.  None (the float32 kernel, rounded once) for what this does not model: traced or
    non-CPU tensors, empty or large (torch splits > 32768 elements over threads) inputs, non-contiguous all-reduces."""
    from .compat import _tracing
    n_all = x.numel()
    if _tracing() or x._device.type != "cpu" or n_all == 0 or n_all > 32768 or x.ndim == 0:
        return None
    chain = False
    if dim is None:
        shape = (1,) * x.ndim if keepdim else ()
        x = x.permute(sorted(range(x.ndim), key=lambda i: -x.stride(i)))   # (torch walks memory order)
        if x.is_contiguous():
            rows, vec = x.numpy().reshape(1, -1), True
        else:
            st = [x.stride(i) for i in range(x.ndim) if x.shape[i] > 1]
            if [1 for a, b in zip(st, st[1:]) if a < b]:   # (this module shadows any)
                return None      # (torch walks the dims in stride order)
            # a row-major view: one inner reduction per row, each multiplied into the running product
            rows, vec, chain = x.numpy().reshape(-1, x.shape[-1]), x.stride(-1) == 1, True
    else:
        d = dim + x.ndim if dim < 0 else dim
        if not 0 <= d < x.ndim:
            return None
        n = x.shape[d]
        vec = x.stride(d) == 1
        a = np.moveaxis(x.numpy(), d, -1)
        shape = tuple(a.shape[:-1])
        rows = a.reshape(-1, n)
        if keepdim:
            shape = tuple(x.shape[:d]) + (1,) + tuple(x.shape[d + 1:])
    npdt = x._dtype.np
    rows = rows.astype(np.float32)

    def rnd(v):
        return v.astype(npdt).astype(np.float32)
    if chain:
        out = np.ones(1, np.float32)
        for r in rows:
            out = _prod_low_rows(r.reshape(1, -1), vec, rnd, out)
    else:
        out = _prod_low_rows(rows, vec, rnd, np.ones(rows.shape[0], np.float32))
    from ..tensor.creation import tensor
    return tensor(out.astype(npdt).reshape(shape), dtype=x._dtype, device=x._device)


def _prod_low_rows(rows, vec, rnd, out):
    n = rows.shape[1]
    lanes = 64 if vec else 1 << 62
    cnt = n // lanes
    if cnt:
        acc = rows[:, :lanes].copy()
        for i in range(1, cnt):
            acc = rnd(acc * rows[:, i * lanes:(i + 1) * lanes])
        q = lanes // 4
        acc = rnd(rnd(acc[:, :q] * acc[:, q:2 * q]) * rnd(acc[:, 2 * q:3 * q] * acc[:, 3 * q:]))
        b = acc[:, 0]
        for j in range(1, q):
            b = rnd(b * acc[:, j])
        out = rnd(out * b)
    for j in range(cnt * lanes, n):
        out = rnd(out * rows[:, j])
    return out


def _int_dim(op, dim):
    """torch's ``int? dim`` arguments (prod, aminmax, ...): one dim, never a tuple or list."""
    if dim is not None and not isinstance(dim, (int, np.integer)):
        raise TypeError(f"{op}(): argument 'dim' must be int, not {type(dim).__name__}")


def _widen(input, out):
    """A floating reduction's input for ``out=``: in ``out``'s dtype when that is a wider float (torch computes
    var(float32, out=float64) in float64)."""
    if isinstance(out, Tensor) and out._dtype.category == 2 and input._dtype.category == 2 and \
            out._dtype.itemsize > input._dtype.itemsize:
        return input.to(out._dtype)
    return input


def _scan_out_dtype(op, dtype, out):
    if out._dtype is _dt.bool_:
        raise RuntimeError(f"{op}(): the out= dtype Bool is not supported (torch's scans have no bool kernel)")
    return out._dtype if dtype is None else dtype


def _tname(dt):
    return {"bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int", "int64": "Long",
            "float16": "Half", "bfloat16": "BFloat16", "float32": "Float", "float64": "Double"}.get(dt.name, dt.name)


# ------------------------------------------------------------------ amax / amin / max / min
def _minmax_all(op, x, dim, keepdim, name):
    dims = _dims(dim, x.ndim, name)
    if x.numel() == 0:
        if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        _nonempty(x, dims, name)
    return run(op, [x], {"dims": dims, "keepdim": bool(keepdim), "odt": None})[0]


@export
def amax(input, dim=(), keepdim=False, *, out=None):
    """``torch.amax``: maximum over ``dim`` (all dims when empty); NaN propagates."""
    if out is not None:
        return _write_out(amax(input, dim, keepdim), out, "amax")
    _check(input, "amax")
    return _minmax_all(AMAX, input, dim, keepdim, "amax")


@export
def amin(input, dim=(), keepdim=False, *, out=None):
    """``torch.amin``: minimum over ``dim`` (all dims when empty); NaN propagates."""
    if out is not None:
        return _write_out(amin(input, dim, keepdim), out, "amin")
    _check(input, "amin")
    return _minmax_all(AMIN, input, dim, keepdim, "amin")


def _max_like(name, full_op, dim_op, input, dim, keepdim, other):
    _check(input, name)
    if isinstance(dim, Tensor):
        other, dim = dim, None
    if other is not None:
        return _E("maximum" if name == "max" else "minimum")(input, other)
    if dim is None:
        if keepdim:
            raise TypeError(f"{name}(): keepdim requires dim")
        return _minmax_all(full_op, input, None, False, name)
    d = wrap_dim(dim, input.ndim, name)
    if input.ndim:
        _nonempty(input, (d,), name)
    v, i = run(dim_op, [input], {"dim": d, "keepdim": bool(keepdim), "op": name})
    return _rt(name)(v, i)


@export
def max(input, dim=_NODIM, keepdim=False, *, other=None, out=None):
    """``torch.max``: full maximum; with ``dim`` a ``(values, indices)`` namedtuple (first occurrence,
    NaN wins); with a tensor second argument the elementwise ``maximum``."""
    if out is not None:
        return _write_out(max(input, dim, keepdim, other=other), out, "max")
    dim = _nodim("max", dim)
    return _max_like("max", AMAX, MAX_DIM, input, dim, keepdim, other)


@export
def min(input, dim=_NODIM, keepdim=False, *, other=None, out=None):
    """``torch.min``: full minimum; with ``dim`` a ``(values, indices)`` namedtuple."""
    if out is not None:
        return _write_out(min(input, dim, keepdim, other=other), out, "min")
    dim = _nodim("min", dim)
    return _max_like("min", AMIN, MIN_DIM, input, dim, keepdim, other)


def _arg(name, op, input, dim, keepdim):
    _check(input, name)
    if input._dtype is _dt.bool_:
        raise RuntimeError(f"{name}(): does not support bool input")
    if input._dtype.category == 3:     # (torch checks the dtype before the sizes)
        raise RuntimeError(f"{name}(): does not support complex input")
    if dim is None:
        if input.numel() == 0:
            raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
        d = None
    else:
        d = wrap_dim(dim, input.ndim, name)
        if input.ndim:
            _nonempty(input, (d,), name)
    return run(op, [input], {"dim": d, "keepdim": bool(keepdim), "op": name})[0]


@export
def argmax(input, dim=None, keepdim=False, *, out=None):
    """``torch.argmax``: index of the first maximum (``dim=None``: of the flattened tensor)."""
    if out is not None:
        return _write_out(argmax(input, dim, keepdim), out, "argmax")
    return _arg("argmax", ARGMAX, input, dim, keepdim)


@export
def argmin(input, dim=None, keepdim=False, *, out=None):
    """``torch.argmin``: index of the first minimum (``dim=None``: of the flattened tensor)."""
    if out is not None:
        return _write_out(argmin(input, dim, keepdim), out, "argmin")
    return _arg("argmin", ARGMIN, input, dim, keepdim)


@export
def aminmax(input, *, dim=None, keepdim=False):
    """``torch.aminmax``: ``(min, max)`` namedtuple."""
    _int_dim("aminmax", dim)
    _check(input, "aminmax")
    if dim is None:
        if input.numel() == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
                               "identity.")
        dims = tuple(range(input.ndim))
    else:
        dims = (wrap_dim(dim, input.ndim, "aminmax"),) if input.ndim else ()
        for d in dims:
            if input.shape[d] == 0:
                raise IndexError(f"aminmax: Expected reduction dim {d} to have non-zero size.")
    a = {"dims": dims, "keepdim": bool(keepdim), "odt": None}
    lo = run(AMIN, [input], a)[0]
    hi = run(AMAX, [input], a)[0]
    return _rt("aminmax", ("min", "max"))(lo, hi)


# ------------------------------------------------------------------ any / all / count_nonzero
def _no_dim_truth(input):
    # torch.any/all with dim=() reduce nothing: the truth value of each element, in the result dtype
    r = input != 0
    return r.to(_dt.uint8) if input._dtype is _dt.uint8 else r


@export
def any(input, dim=None, keepdim=False):
    """``torch.any``: bool result (uint8 for uint8 input, like torch)."""
    _check(input, "any")
    if isinstance(dim, (tuple, list)) and len(dim) == 0:
        return _no_dim_truth(input)
    return _reduce(ANY, input, dim, keepdim)


@export
def all(input, dim=None, keepdim=False):
    """``torch.all``: bool result (uint8 for uint8 input, like torch)."""
    _check(input, "all")
    if isinstance(dim, (tuple, list)) and len(dim) == 0:
        return _no_dim_truth(input)
    return _reduce(ALL, input, dim, keepdim)


@export
def count_nonzero(input, dim=None):
    """``torch.count_nonzero``: int64 count of non-zero elements over ``dim``."""
    _check(input, "count_nonzero")
    return _reduce(COUNT_NONZERO, input, dim, False)


# ------------------------------------------------------------------ var / std
def _var_args(input, dim, unbiased, keepdim, correction, name):
    _check(input, name)
    if isinstance(dim, bool):           # legacy var(input, unbiased)
        unbiased, dim = dim, None
    if correction is not None and unbiased is not None:
        raise RuntimeError(f"{name}(): can't specify both correction and unbiased arguments")
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    if input._dtype.category < 2:
        raise RuntimeError("std and var only support floating point and complex dtypes")
    dims = _dims(dim, input.ndim, name)
    return dims, correction, bool(keepdim)


def _var_mean(x, dims, correction, keepdim):
    if x._dtype.category == 3:   # |x - mean|^2 splits into the parts: var = var(real) + var(imag) (a real result)
        from .complex import complex as _complex
        vr, mr = _var_mean(x.real, dims, correction, keepdim)
        vi, mi = _var_mean(x.imag, dims, correction, keepdim)
        return vr + vi, _complex(mr, mi)
    odt = x._dtype
    if odt in _dt.LOW_FLOATS:
        x = x.to(_dt.float32)
    n = numel([x.shape[d] for d in dims]) if x.ndim else 1
    mu = run(MEAN, [x], {"dims": dims, "keepdim": True, "odt": None})[0]
    dev = x - mu
    ss = run(SUM, [dev * dev], {"dims": dims, "keepdim": keepdim, "odt": None})[0]
    denom = _bmax(0, n - correction)
    var = ss / float(denom)      # denom 0: inf where sum_sq > 0, nan where 0 (like torch)
    if not keepdim:
        mu = run(MEAN, [x], {"dims": dims, "keepdim": False, "odt": None})[0] if n == 0 else _squeeze(mu, dims)
    return var.to(odt), mu.to(odt)


def _squeeze(t, dims):
    if not dims or t.ndim == 0:
        return t
    shape = tuple(n for d, n in enumerate(t.shape) if d not in dims)
    return t.reshape(shape)


@export
def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None, out=None):
    """``torch.var`` (``correction=1`` by default; legacy ``unbiased=`` accepted)."""
    if out is not None:
        return _write_out(var(_widen(input, out), dim, unbiased, keepdim, correction=correction), out, "var", cast=True)
    dims, c, kd = _var_args(input, dim, unbiased, keepdim, correction, "var")
    return _var_mean(input, dims, c, kd)[0]


@export
def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None, out=None):
    """``torch.std``: square root of :func:`var`."""
    if out is not None:
        return _write_out(std(_widen(input, out), dim, unbiased, keepdim, correction=correction), out, "std", cast=True)
    dims, c, kd = _var_args(input, dim, unbiased, keepdim, correction, "std")
    if input._dtype in _dt.LOW_FLOATS:   # torch: the float32 variance's square root, rounded once
        return _var_mean(input.to(_dt.float32), dims, c, kd)[0].sqrt().to(input._dtype)
    return _var_mean(input, dims, c, kd)[0].sqrt()


@export(method=False)
def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``torch.var_mean``: ``(var, mean)``."""
    dims, c, kd = _var_args(input, dim, unbiased, keepdim, correction, "var_mean")
    return _var_mean(input, dims, c, kd)


@export(method=False)
def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``torch.std_mean``: ``(std, mean)``."""
    dims, c, kd = _var_args(input, dim, unbiased, keepdim, correction, "std_mean")
    if input._dtype in _dt.LOW_FLOATS:   # torch: the float32 variance's square root, rounded once
        v, m = _var_mean(input.to(_dt.float32), dims, c, kd)
        return v.sqrt().to(input._dtype), m.to(input._dtype)
    v, m = _var_mean(input, dims, c, kd)
    return v.sqrt(), m


# ------------------------------------------------------------------ logsumexp / norms
@export
def logsumexp(input, dim, keepdim=False, *, out=None):
    """``torch.logsumexp``: ``log(sum(exp(x)))`` computed stably; all ``-inf`` rows give ``-inf``."""
    if out is not None:
        return _write_out(logsumexp(input, dim, keepdim), out, "logsumexp", cast=True)
    _nodim("logsumexp", dim, "tuple of ints")
    _check(input, "logsumexp")
    x = input if input._dtype.category >= 2 else input.to(_dt.get_default_dtype())
    dims = _dims(dim, x.ndim, "logsumexp")
    odt = x._dtype
    # (float16/bfloat16: torch composes amax, sub, exp, sum, log and add, each rounded to the input dtype)
    if x.numel() == 0:
        from ..tensor.creation import full
        return full(_red_shape(x.shape, dims, keepdim), float("-inf"), dtype=odt, device=x.device)
    if x._dtype.category == 3:   # torch: shifted by the largest real part (numpy's complex exp / sum / log)
        m = run(AMAX, [_E("real")(x)], {"dims": dims, "keepdim": True, "odt": None})[0]
        m = _E("where")(_E("isinf")(m), 0.0, m)
        s = (x - m).exp().sum(dims, keepdim=keepdim)
        return s.log() + (m if keepdim else _squeeze(m, dims))
    m = run(AMAX, [x], {"dims": dims, "keepdim": True, "odt": None})[0]
    m = _E("where")(_E("isinf")(m), 0.0, m)
    s = run(SUM, [(x - m).exp()], {"dims": dims, "keepdim": keepdim, "odt": None})[0]
    r = s.log() + (m if keepdim else _squeeze(m, dims))
    return r.to(odt)


def _vector_norm(x, ord, dims, keepdim, name):
    if x._dtype.category == 3:   # every vector norm of complex values is that norm of their moduli
        x = x.abs()
    if x._dtype.category != 2:
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                           f"{_tname(x._dtype)}")
    odt = x._dtype
    if odt in _dt.LOW_FLOATS:
        x = x.to(_dt.float32)
    a = {"dims": dims, "keepdim": keepdim, "odt": None}
    if ord == 2:
        r = run(SUM, [x * x], a)[0].sqrt()
    elif ord == 1:
        r = run(SUM, [x.abs()], a)[0]
    elif ord == math.inf or ord == -math.inf:
        _check_norm_identity(x, ord, dims, name)
        r = run(AMAX if ord > 0 else AMIN, [x.abs()], a)[0]
    elif ord == 0:
        r = run(COUNT_NONZERO, [x], a)[0].to(x._dtype)
    else:
        p = float(ord)
        if p < 0:    # (torch: a negative order has no identity either: 0 ** -p is inf)
            _check_norm_identity(x, ord, dims, name)
        r = run(SUM, [x.abs() ** p], a)[0] ** (1.0 / p)
    return r.to(odt)


def _check_norm_identity(x, ord, dims, name):
    """torch refuses the inf and negative-order norms over an empty reduced dim (they have no identity)."""
    red = range(x.ndim) if dims is None or (not dims and dims != 0) else (
        [dims] if isinstance(dims, int) else dims)
    if x.numel() == 0 and (x.ndim == 0 or 0 in [x.shape[d] for d in red]):  # an empty reduced dim
        raise RuntimeError(f"{name}: Expected a non-empty tensor for ord={ord}: the {ord} norm has no identity "
                           f"on an empty dimension (input shape {tuple(x.shape)})")


def _norm_dtype(x, dtype, op):
    """``dtype=`` of a vector norm checked as torch checks it (on the input's own dtype, before any cast): a
    floating or complex input, a floating or complex ``dtype`` of the same kind, no narrowing."""
    if dtype is None:
        return None
    dt = _dt.to_dtype(dtype)
    if x._dtype.category not in (2, 3):
        raise RuntimeError(f"{op}: Expected a floating point or complex tensor as input. Got {_tname(x._dtype)}")
    if dt.category not in (2, 3):
        raise RuntimeError(f"{op}: dtype should be floating point or complex, but got {_tname(dt)}")
    if (dt.category == 3) != (x._dtype.category == 3):
        raise RuntimeError(f"{op}: dtype should be {'complex' if x._dtype.category == 3 else 'real'} for "
                           f"{'complex' if x._dtype.category == 3 else 'real'} inputs, but got {_tname(dt)}")
    if _dt.promote_types(x._dtype, dt) is not dt:
        raise RuntimeError(f"{op}: the dtype of the input ({_tname(x._dtype)}) should be convertible without "
                           f"narrowing to the specified dtype ({_tname(dt)})")
    return dt


@export(method=False)
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    """``torch.linalg.vector_norm``."""
    if out is not None:
        return _write_out(vector_norm(x, ord, dim, keepdim, dtype=dtype), out, "linalg.vector_norm")
    _check(x, "linalg.vector_norm")
    x = _cast(x, _norm_dtype(x, dtype, "linalg.vector_norm"))
    dims = _dims(dim, x.ndim, "linalg.vector_norm")
    return _vector_norm(x, ord, dims, bool(keepdim), "linalg.vector_norm")


@export
def norm(input, p="fro", dim=None, keepdim=False, dtype=None, *, out=None):
    """``torch.norm``: vector norms (``p`` in ``'fro'``, numbers, ``inf``/``-inf``) and ``'nuc'`` (a matrix norm
    over ``dim``)."""
    if out is not None:
        return _write_out(norm(input, p, dim, keepdim, dtype), out, "norm")
    _check(input, "norm")
    if isinstance(p, str) and not (p == "fro" and (dim is None or isinstance(dim, int) or len(dim) <= 2)):
        # 'nuc' (or 'fro' over more than 2 dims, which raises there): torch.linalg.matrix_norm, like torch.norm
        from ..linalg import matrix_norm
        return matrix_norm(input, p, tuple(range(input.ndim)) if dim is None else dim, keepdim, dtype=dtype)
    if p is None or p == "fro":
        p = 2
    x = _cast(input, _norm_dtype(input, dtype, "linalg.vector_norm"))
    dims = _dims(dim, x.ndim, "norm")
    return _vector_norm(x, p, dims, bool(keepdim), "norm")


# ------------------------------------------------------------------ median
#: torch's median of an empty tensor is NaN in its dtype: for integers the x86 conversion of NaN (the "integer
#: indefinite" INT_MIN for 32/64 bits, which the narrower types truncate to 0), True for bool (measured, torch 2.13)
_EMPTY_MEDIAN = {"int64": -2 ** 63, "int32": -2 ** 31, "int16": 0, "int8": 0, "uint8": 0, "bool": True}


def empty_median(input):
    from ..tensor.creation import full
    return full((), _EMPTY_MEDIAN.get(input._dtype.name, float("nan")), dtype=input._dtype, device=input.device)


@export
def median(input, dim=_NODIM, keepdim=_NOKD):
    """``torch.median``: the lower median; with ``dim`` a ``(values, indices)`` namedtuple.
    NaN propagates (the index is the first NaN's)."""
    dim = _nodim("median", dim)
    if dim is None and keepdim is not _NOKD:
        _dim_keepdim("median", _NODIM, keepdim)
    _check(input, "median")
    if dim is None and input.numel() == 0:
        return empty_median(input)
    d = None if dim is None else wrap_dim(dim, input.ndim, "median")
    if d is not None and input.ndim:
        _nonempty(input, (d,), "median")     # (torch checks this before the dtype)
    if input._dtype is _dt.bool_:
        raise NotImplementedError("median: not implemented for bool tensors")
    if dim is None:
        return run(MEDIAN, [input], {"dim": None, "keepdim": False})[0]
    v, i = run(MEDIAN, [input], {"dim": d, "keepdim": bool(keepdim)})
    return _rt("median")(v, i)


# ------------------------------------------------------------------ scans
def _scan(op, name, input, dim, dtype):
    _check(input, name)
    d = wrap_dim(dim, input.ndim, name)
    x = _cast(input, dtype)
    if dtype is not None and x._dtype is _dt.bool_ and name in ("cumsum", "cumprod") and x.ndim and x.numel():
        # (torch refuses the bool kernel; a 0-d or empty input never reaches it)
        raise NotImplementedError(f"{name}: not implemented for dtype=bool")
    odt = x._dtype.name if dtype is not None else (
        "int64" if x._dtype.category < 2 and name in ("cumsum", "cumprod") else None)
    if x._dtype.category == 3 and name in ("cumsum", "cumprod"):
        from .complex import scan_complex
        return [scan_complex(name, x, d, odt)]
    return run(op, [x], {"dim": d, "op": name, "odt": odt})


@export
def cumsum(input, dim, *, dtype=None, out=None):
    """``torch.cumsum``: running sum along ``dim`` (bool/int give int64); ``out=`` computes in its dtype."""
    if out is not None:
        return _write_out(cumsum(input, dim, dtype=_scan_out_dtype("cumsum", dtype, out)), out, "cumsum")
    return _scan(CUMSUM, "cumsum", input, int_arg("cumsum", "dim", dim), dtype)[0]


@export
def cumprod(input, dim, *, dtype=None, out=None):
    """``torch.cumprod``: running product along ``dim`` (bool/int give int64); ``out=`` computes in its dtype."""
    if out is not None:
        return _write_out(cumprod(input, dim, dtype=_scan_out_dtype("cumprod", dtype, out)), out, "cumprod")
    return _scan(CUMPROD, "cumprod", input, int_arg("cumprod", "dim", dim), dtype)[0]


@export
def cummax(input, dim):
    """``torch.cummax``: running maximum and the index where it was reached (last of ties)."""
    if isinstance(input, Tensor) and input.numel() == 0:   # (torch: no range check of dim for an empty input)
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"cummax(): argument 'dim' must be int, not {type(dim).__name__}")
        from ..tensor.creation import empty
        return _rt("cummax")(input.clone(), empty(tuple(input.shape), dtype=_dt.int64, device=input.device))
    v, i = _scan(CUMMAX, "cummax", input, dim, None)
    return _rt("cummax")(v, i)


@export
def cummin(input, dim):
    """``torch.cummin``: running minimum and its index."""
    if isinstance(input, Tensor) and input.numel() == 0:   # (torch: no range check of dim for an empty input)
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"cummin(): argument 'dim' must be int, not {type(dim).__name__}")
        from ..tensor.creation import empty
        return _rt("cummin")(input.clone(), empty(tuple(input.shape), dtype=_dt.int64, device=input.device))
    v, i = _scan(CUMMIN, "cummin", input, dim, None)
    return _rt("cummin")(v, i)
