"""Matrix builders and products written as compositions of existing ops.

``cross`` (``narrow`` + elementwise), ``cdist`` (PyTorch's two algorithms: the matrix-product form of the
Euclidean distance for more than 25 rows, the direct difference otherwise), ``vander`` (a ``cumprod``),
``block_diag`` and ``cartesian_prod`` (``cat`` / ``meshgrid``), ``tril_indices`` / ``triu_indices``
(constants), ``unique_consecutive`` (a comparison with the shifted tensor, then ``nonzero``: its length depends
on the data, so it does not trace) and ``Tensor.trace`` (``nee.trace`` names the tracing package, so the
function form is ``nee.diagonal(x).sum()``).
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor
from .registry import EXPORTS, export
from .shape_rules import broadcast_shapes, wrap_dim

__all__ = [
    "block_diag",
    "cartesian_prod",
    "cdist",
    "cross",
    "linalg_cross",
    "trace",
    "tril_indices",
    "triu_indices",
    "unique_consecutive",
    "vander",
]


def _E(name):
    return EXPORTS[name][0]


def _check(x, op, name="input"):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(x).__name__}")


# ------------------------------------------------------------------ cross
def _cross(op, input, other, d):
    if input._dtype is not other._dtype:
        raise RuntimeError(f"{op}: expected both inputs to have the same dtype, got {input._dtype.name} and "
                           f"{other._dtype.name}")
    if input._dtype is _dt.bool_:
        raise _dt.DTypeNotImplementedError(f"{op}: not implemented for bool tensors")
    a = [input.narrow(d, i, 1) for i in range(3)]
    b = [other.narrow(d, i, 1) for i in range(3)]
    return _E("cat")([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]], d)


def _cross_args(op, input, other, dim):
    _check(input, op)
    _check(other, op, "other")
    if input.ndim != other.ndim:
        raise RuntimeError(f"{op}: inputs must have the same number of dimensions (got {tuple(input.shape)} and "
                           f"{tuple(other.shape)}).")
    d = wrap_dim(dim, input.ndim, op)
    if input.shape[d] != 3 or other.shape[d] != 3:
        raise RuntimeError(f"{op}: inputs dimension {dim} must have length 3. Got {input.shape[d]} and "
                           f"{other.shape[d]}")
    broadcast_shapes(tuple(input.shape), tuple(other.shape), op=op)
    return d


@export
def cross(input, other, dim=None):
    """``torch.cross``: the 3-vector cross product along ``dim`` (default: the first dim of size 3, PyTorch's
    deprecated rule); the other dims broadcast; both operands must have the same dtype."""
    _check(input, "cross")
    if dim is None:
        dim = next((j for j, n in enumerate(input.shape) if n == 3), None)
        if dim is None:
            raise RuntimeError(f"cross: no dimension of size 3 in input (shape {tuple(input.shape)})")
    return _cross("cross", input, other, _cross_args("linalg.cross", input, other, dim))


def linalg_cross(input, other, *, dim=-1):
    """``torch.linalg.cross``: :func:`cross` with ``dim=-1`` by default."""
    return _cross("linalg.cross", input, other, _cross_args("linalg.cross", input, other, dim))


# ------------------------------------------------------------------ cdist
_CDIST_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


@export(method=False)
def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """``torch.cdist``: p-norm distances between the rows of ``x1`` (*, P, M) and ``x2`` (*, R, M) -> (*, P, R),
    batch dims broadcast.  ``p=2`` with more than 25 rows on either side (or ``compute_mode=
    'use_mm_for_euclid_dist'``) uses PyTorch's matrix-product form ``|a|^2 + |b|^2 - 2ab``, clamped at 0."""
    _check(x1, "cdist", "x1")
    _check(x2, "cdist", "x2")
    for nm, t in (("X1", x1), ("X2", x2)):
        if t._dtype not in (_dt.float32, _dt.float64):
            # (torch: an integer operand is a RuntimeError, float16 / bfloat16 have no kernel: NotImplementedError)
            raise (NotImplementedError if t._dtype.category == 2 else RuntimeError)(
                f"cdist only supports floating-point dtypes (float32, float64), {nm} got: "
                f"{t._dtype.name}")
        if t.ndim < 2:
            raise RuntimeError(f"cdist only supports at least 2D tensors, {nm} got: {t.ndim}D")
    if x1._dtype is not x2._dtype:
        raise RuntimeError(f"cdist: expected both inputs to have the same dtype, got {x1._dtype.name} and "
                           f"{x2._dtype.name}")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    p = float(p)
    if not p >= 0:
        raise RuntimeError(f"cdist only supports non-negative p values (got {p})")
    if compute_mode not in _CDIST_MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    batch = broadcast_shapes(tuple(x1.shape[:-2]), tuple(x2.shape[:-2]), op="cdist")
    P, R, M = x1.shape[-2], x2.shape[-2], x1.shape[-1]
    a = x1.expand(*batch, P, M) if tuple(x1.shape[:-2]) != batch else x1
    b = x2.expand(*batch, R, M) if tuple(x2.shape[:-2]) != batch else x2
    from ..tensor.creation import zeros
    if P == 0 or R == 0 or M == 0:
        return zeros(batch + (P, R), dtype=x1._dtype, device=x1.device)
    use_mm = p == 2 and (compute_mode == "use_mm_for_euclid_dist" or
                         (compute_mode == _CDIST_MODES[0] and (P > 25 or R > 25)))
    if use_mm:
        from ..tensor.creation import ones_like
        an = (a * a).sum(-1, keepdim=True)
        bn = (b * b).sum(-1, keepdim=True)
        cat = _E("cat")
        a_ = cat([a * -2.0, an, ones_like(an)], -1)
        b_ = cat([b, ones_like(bn), bn], -1)
        return _E("matmul")(a_, b_.transpose(-1, -2)).clamp_min(0.0).sqrt()
    # the pairwise differences are (*, P, R, M): taken over blocks of columns so that the temporary stays
    # within _CDIST_BLOCK elements (the result is (*, P, R) anyway)
    rows = P * R
    for n in batch:
        rows *= n
    step = builtins.max(1, builtins.min(M, _CDIST_BLOCK // builtins.max(rows, 1)))
    acc = None
    for c0 in range(0, M, step):
        w = builtins.min(step, M - c0)
        d = (a.narrow(-1, c0, w).unsqueeze(-2) - b.narrow(-1, c0, w).unsqueeze(-3)).abs()
        if p == 0:
            part = (d != 0).sum(-1).to(x1._dtype)
        elif p == 1:
            part = d.sum(-1)
        elif p == 2:
            part = (d * d).sum(-1)
        elif math.isinf(p):
            part = d.amax(-1)
        else:
            part = (d ** p).sum(-1)
        acc = part if acc is None else (_E("maximum")(acc, part) if math.isinf(p) else acc + part)
    if p == 2:
        return acc.sqrt()
    if p in (0, 1) or math.isinf(p):
        return acc
    return acc ** (1.0 / p)


_CDIST_BLOCK = 1 << 23


# ------------------------------------------------------------------ vander
@export(method=False)
def vander(x, N=None, increasing=False):
    """``torch.vander``: the Vandermonde matrix of 1-D ``x`` with ``N`` columns (default ``len(x)``), powers
    decreasing left to right unless ``increasing``; bool and integer inputs give int64."""
    _check(x, "vander", "x")
    if x.ndim != 1:
        raise RuntimeError(f"vander: x must be a one-dimensional tensor (got shape {tuple(x.shape)}).")
    n = x.shape[0] if N is None else int(N)
    if n < 0:
        raise RuntimeError(f"vander: N must be non-negative (got {n}).")
    odt = _dt.promote_types(x._dtype, _dt.int64)
    from ..tensor.creation import ones
    L = x.shape[0]
    first = ones((L, 1 if n else 0), dtype=odt, device=x.device)
    if n > 1:
        powers = x.to(odt).unsqueeze(1).expand(L, n - 1).cumprod(1)
        r = _E("cat")([first, powers], 1)
    else:
        r = first
    return r if increasing or n == 0 else r.flip(1)


# ------------------------------------------------------------------ block_diag / cartesian_prod
@export(method=False)
def block_diag(*tensors):
    """``torch.block_diag``: the tensors (0-, 1- or 2-D; a 1-D one is a row) on the diagonal of one matrix,
    zeros elsewhere; the dtype is their promoted dtype."""
    from ..tensor.creation import zeros
    mats = []
    for i, t in enumerate(tensors):
        _check(t, "block_diag", f"tensors[{i}]")
        if t.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} has "
                               f"{t.ndim} dimensions")
        mats.append(t.reshape(1, -1) if t.ndim < 2 else t)
    if not mats:
        return zeros((1, 0), dtype=_dt.get_default_dtype())
    dt = _dt.result_type(*tensors)   # torch's rule: 0-d tensors do not raise the category's dtype
    dev = mats[0].device
    cols = sum(m.shape[1] for m in mats)
    rows, left = [], 0
    cat = _E("cat")
    for m in mats:
        r, c = m.shape
        parts = []
        if left:
            parts.append(zeros((r, left), dtype=dt, device=dev))
        parts.append(m.to(dt))
        if cols - left - c:
            parts.append(zeros((r, cols - left - c), dtype=dt, device=dev))
        rows.append(cat(parts, 1) if len(parts) > 1 else parts[0])
        left += c
    return cat(rows, 0) if len(rows) > 1 else rows[0].clone()


@export(method=False)
def cartesian_prod(*tensors):
    """``torch.cartesian_prod``: every combination of the elements of 1-D tensors of one dtype, one per row
    (a single tensor is returned as it is)."""
    if not tensors:
        raise RuntimeError("cartesian_prod: meshgrid expects a non-empty TensorList")
    for i, t in enumerate(tensors):
        _check(t, "cartesian_prod", f"tensors[{i}]")
        if t.ndim != 1:
            raise RuntimeError(f"cartesian_prod: Expect a 1D vector, but got shape {list(t.shape)}")
        if t._dtype is not tensors[0]._dtype:
            raise RuntimeError(f"cartesian_prod: meshgrid expects all tensors to have the same dtype (got "
                               f"{tensors[0]._dtype.name} and {t._dtype.name})")
    if len(tensors) == 1:
        return tensors[0]
    grids = _E("meshgrid")(*tensors, indexing="ij")
    return _E("stack")([g.reshape(-1) for g in grids], 1)


# ------------------------------------------------------------------ tril_indices / triu_indices
def _tri_indices(op, np_fn, row, col, offset, dtype, device):
    row, col, offset = int(row), int(col), int(offset)
    if row < 0:
        raise RuntimeError(f"{op}: row must be non-negative, got {row}")
    if col < 0:
        raise RuntimeError(f"{op}: col must be non-negative, got {col}")
    dt = _dt.int64 if dtype is None else _dt.to_dtype(dtype)
    if dt.category != 1:
        raise NotImplementedError(f"\"{op}\" not implemented for {dt.name} (integer dtypes only)")
    from ..tensor.creation import tensor
    r, c = np_fn(row, offset, col)
    return tensor(np.stack([r, c]).astype(dt.np).reshape(2, -1), dtype=dt, device=device)


@export(method=False)
def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    """``torch.tril_indices``: the (2, N) row/column indices of the lower triangle of a ``row x col`` matrix
    (``offset`` > 0 takes diagonals above), in row-major order."""
    return _tri_indices("tril_indices", np.tril_indices, row, col, offset, dtype, device)


@export(method=False)
def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    """``torch.triu_indices``: the (2, N) indices of the upper triangle (``offset`` < 0 takes diagonals
    below)."""
    return _tri_indices("triu_indices", np.triu_indices, row, col, offset, dtype, device)


# ------------------------------------------------------------------ unique_consecutive
@export
def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """``torch.unique_consecutive``: drops all but the first of each run of equal consecutive elements (of the
    flattened tensor, or of slices along ``dim``); NaN equals nothing.  Optional inverse indices (input's shape,
    or ``(size(dim),)``) and run lengths."""
    _check(input, "unique_consecutive")
    from ..tensor.creation import ones, tensor, zeros
    cat, nonzero = _E("cat"), _E("nonzero")
    dev = input.device
    if dim is None:
        x = input.reshape(-1)
        d = 0
        inv_shape = tuple(input.shape)
    else:
        if input.ndim == 0:
            raise IndexError(f"unique_consecutive: Dimension specified as {dim} but tensor has no dimensions")
        d = wrap_dim(dim, input.ndim, "unique_consecutive")
        if any(m == 0 for j, m in enumerate(input.shape) if j != d):
            raise RuntimeError(f"unique_consecutive: There are 0 sized dimensions, and they aren't selected, so "
                               f"unique cannot be applied (shape {tuple(input.shape)}, dim {d})")
        x = input
        inv_shape = (input.shape[d],)
    n = x.shape[d] if x.ndim else 1
    if n == 0:
        vals = x.clone()
        inv = zeros(inv_shape, dtype=_dt.int64, device=dev)
        cnt = zeros((0,), dtype=_dt.int64, device=dev)
    else:
        if n > 1:
            ne = x.narrow(d, 1, n - 1) != x.narrow(d, 0, n - 1)
            if x.ndim > 1:
                ne = ne.movedim(d, 0).reshape(n - 1, -1).any(1)
            first = cat([ones((1,), dtype=_dt.bool_, device=dev), ne], 0)
        else:
            first = ones((1,), dtype=_dt.bool_, device=dev)
        starts = nonzero(first).reshape(-1)
        vals = x.index_select(d, starts)
        inv = (first.cumsum(0) - 1).reshape(inv_shape)
        cnt = _E("diff")(starts, append=tensor([n], dtype=_dt.int64, device=dev))
    if not return_inverse and not return_counts:
        return vals
    r = (vals,)
    if return_inverse:
        r += (inv,)
    if return_counts:
        r += (cnt,)
    return r


# ------------------------------------------------------------------ trace
@export(function=False)
def trace(input):
    """``Tensor.trace``: the sum of the main diagonal of a 2-D tensor (integers and bool sum to int64).
    ``nee.trace`` is the tracing package; ``nee.diagonal(x).sum()`` is the function form."""
    _check(input, "trace")
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    if input._dtype is _dt.bool_:
        raise _dt.DTypeNotImplementedError("trace: not implemented for bool tensors")
    return input.diagonal().sum()
