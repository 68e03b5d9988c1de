"""Strided-layout helpers for CPU kernels.

Kernels see every operand as a flat 1-D buffer plus element strides and an offset,
so one compiled kernel serves contiguous, transposed, sliced, broadcast and
negatively-strided inputs alike (no hidden copies, no per-layout specializations).
"""
from __future__ import annotations

import numpy as np

MAX_RANK = 4


class _Span:
    __slots__ = ("__array_interface__", "_keep")


def root_array(a: np.ndarray) -> np.ndarray:
    """The array owning ``a``'s memory: numpy views followed to their base, and the ``_Span`` holders that
    ``as_strided`` views keep (their ``_keep`` array); a pooled output's root is its pool block."""
    base = a
    while True:
        b = base.base
        if isinstance(b, np.ndarray):
            base = b
        elif isinstance(getattr(b, "_keep", None), np.ndarray):
            base = b._keep
        else:
            return base


def flat(a: np.ndarray):
    """(writable 1-D view over ``a``'s memory span, offset of ``a[0,...,0]``, element strides)."""
    isz = a.itemsize
    if a.flags.c_contiguous and a.flags.writeable:
        return a.reshape(-1), 0, [s // isz for s in a.strides]
    lo = hi = 0
    for n, s in zip(a.shape, a.strides):
        if n == 0:
            return np.empty(0, a.dtype), 0, [0] * a.ndim
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    ptr = a.__array_interface__["data"][0]
    h = _Span()
    h.__array_interface__ = {"data": (ptr + lo, False), "shape": ((hi - lo) // isz + 1,), "strides": None,
                             "typestr": a.dtype.str, "version": 3}
    h._keep = a
    return np.asarray(h), -lo // isz, [s // isz for s in a.strides]


def broadcast_strides(shape, a: np.ndarray, st) -> list:
    """Element strides of ``a`` broadcast to ``shape`` (0 on broadcast dims)."""
    nd = len(shape)
    off = nd - a.ndim
    out = [0] * nd
    ash = a.shape
    for i in range(a.ndim):
        if ash[i] != 1:
            out[off + i] = st[i]
    return out


def collapse(shape, strides_list):
    """Drop size-1 dims and merge dims that are contiguous for every operand."""
    dims = []
    for i, n in enumerate(shape):
        if n == 1:
            continue
        ss = [st[i] for st in strides_list]
        if dims:
            pn, pss = dims[-1]
            if all(ps == s * n for ps, s in zip(pss, ss)):
                dims[-1] = (pn * n, ss)
                continue
        dims.append((n, ss))
    if not dims:
        dims = [(1, [0] * len(strides_list))]
    return [d[0] for d in dims], [[d[1][k] for d in dims] for k in range(len(strides_list))]


def meta(shape4, strides4, offsets) -> np.ndarray:
    """Pack [n0..n3, (s0..s3, off) per operand] into the int64 array kernels read."""
    m = list(shape4)
    for st, o in zip(strides4, offsets):
        m.extend(st)
        m.append(o)
    return np.array(m, dtype=np.int64)


def pad4(shape, strides_list):
    k = MAX_RANK - len(shape)
    return [1] * k + list(shape), [[0] * k + list(st) for st in strides_list]
