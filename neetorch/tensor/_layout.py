"""Output strides of copies and elementwise results: torch's ``preserve_format`` rules, in one place.

* :func:`like_strides` - ``empty_like`` / ``clone`` / ``*_like`` / ``to`` with ``preserve_format`` (torch's
  default): a non-overlapping and dense input's strides exactly; otherwise dense strides in the order of the
  input's strides (c10's ``infer_dense_strides``: a transposed slice gives a transposed dense copy).
* :func:`iter_strides` - a TensorIterator output (elementwise ops): inputs of one shape that are all
  non-overlapping and dense with equal strides give those strides (its fast setup); otherwise the dims are
  ordered by the operands' strides (``reorder_dimensions``: an insertion sort where a broadcast (stride 0)
  dim has no say and equal strides put the smaller size inner) and the output is dense in that order.
* :func:`alloc` - a CPU array of a shape with given element strides.

Each returns ``None`` where the answer is the row-major layout, so callers keep their plain allocation (and
prepared fast paths) there.  Strides are in elements; TensorIterator compares byte strides (operands of
different dtypes), so :func:`iter_strides` takes each operand's item size.
"""
from __future__ import annotations

import numpy as np


def contiguous_strides(shape) -> tuple:
    st, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        st[i] = acc
        acc *= max(int(shape[i]), 1)
    return tuple(st)


def _row_major(shape, strides) -> bool:
    """``strides`` are what a fresh row-major array of ``shape`` has (numpy's and torch's: size-1 dims too)."""
    return tuple(strides) == contiguous_strides(shape)


def non_overlapping_and_dense(shape, strides) -> bool:
    """c10's ``compute_non_overlapping_and_dense``."""
    nd = len(shape)
    if nd == 0:
        return True
    if nd == 1:
        return shape[0] < 2 or strides[0] == 1
    perm = sorted(range(nd), key=lambda a: (shape[a] < 2, strides[a] if shape[a] >= 2 else 0))
    need = 1
    for p in perm:
        if shape[p] < 2:
            return True
        if strides[p] != need:
            return False
        need *= shape[p]
    return True


def _dense_in_order(shape, perm, skip_small: bool) -> tuple:
    """Dense strides with ``perm[0]`` innermost.  ``skip_small``: sizes 0 and 1 do not multiply (c10's
    infer_dense_strides); else every size does (TensorIterator's compatible_stride)."""
    out, acc = [0] * len(shape), 1
    for p in perm:
        out[p] = acc
        if not skip_small or shape[p] > 1:
            acc *= shape[p]
    return tuple(out)


def _insertion_order(nd, should_swap) -> list:
    """TensorIterator / infer_dense_strides' insertion sort with ambiguous comparisons (innermost first)."""
    perm = list(range(nd - 1, -1, -1))
    for i in range(1, nd):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    return perm


def like_strides(shape, strides):
    """torch's ``empty_like(x, memory_format=preserve_format)`` strides for ``x`` of ``shape`` / ``strides``;
    None: row-major."""
    shape, strides = tuple(int(s) for s in shape), tuple(int(s) for s in strides)
    if len(shape) < 2 or 0 in shape or _row_major(shape, strides) or any(s < 0 for s in strides):
        return None       # (no elements: row-major, as torch's copies of them are)
    if non_overlapping_and_dense(shape, strides):
        return strides

    def should_swap(a, b):
        s0, s1 = strides[a], strides[b]
        if s0 == 0 or s1 == 0:
            return 0
        if s0 != s1:
            return -1 if s0 < s1 else 1
        return 1 if shape[a] > shape[b] else 0
    out = _dense_in_order(shape, _insertion_order(len(shape), should_swap), True)
    return None if _row_major(shape, out) else out


def iter_strides(shape, operands):
    """torch's TensorIterator output strides for an output of ``shape`` (the broadcast shape) computed from
    ``operands``: ``(shape, strides, itemsize)`` of each input tensor, in argument order.  None: row-major."""
    shape = tuple(int(s) for s in shape)
    nd = len(shape)
    if nd < 2 or not operands or 0 in shape:
        return None
    ops = [(tuple(int(v) for v in s), tuple(int(v) for v in st), int(isz)) for s, st, isz in operands]
    if any(v < 0 for _, st, _ in ops for v in st):
        return None
    same = all(s == shape for s, _, _ in ops)
    if same:      # the fast setups: all contiguous / all channels-last / all dense with equal strides
        if all(_row_major(s, st) or _contig(s, st) for s, st, _ in ops):
            return None
        if nd == 4 and all(_contig(tuple(s[p] for p in (0, 2, 3, 1)), tuple(st[p] for p in (0, 2, 3, 1)))
                           for s, st, _ in ops):
            return _dense_in_order(shape, (1, 3, 2, 0), False)
        if nd == 5 and all(_contig(tuple(s[p] for p in (0, 2, 3, 4, 1)), tuple(st[p] for p in (0, 2, 3, 4, 1)))
                           for s, st, _ in ops):
            return _dense_in_order(shape, (1, 4, 3, 2, 0), False)
        if all(non_overlapping_and_dense(s, st) for s, st, _ in ops) and len({st for _, st, _ in ops}) == 1:
            st = ops[0][1]
            return None if _row_major(shape, st) else st
    # broadcast byte strides (TensorIterator::compute_strides: a size-1 dim that broadcasts has stride 0)
    bstr = []
    for s, st, isz in ops:
        off = nd - len(s)
        b = [0] * nd
        for i, (n, v) in enumerate(zip(s, st)):
            b[off + i] = 0 if (n == 1 and shape[off + i] != 1) else v * isz
        bstr.append(b)

    def should_swap(a, b):
        for st in bstr:
            s0, s1 = st[a], st[b]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[a] > shape[b]:
                return 1
        return 0
    perm = _insertion_order(nd, should_swap)
    if perm == list(range(nd - 1, -1, -1)):
        return None
    return _dense_in_order(shape, perm, False)


def _contig(shape, strides) -> bool:
    if 0 in shape:
        return True
    need = 1
    for n, st in zip(reversed(shape), reversed(strides)):
        if n != 1 and st != need:
            return False
        need *= n
    return True


def dense_order(shape, strides):
    """The dim order (outermost first) in which ``strides`` are row-major strides of the permuted ``shape``
    (a transpose of a fresh array has them), or None."""
    nd = len(shape)
    order = sorted(range(nd), key=lambda d: -strides[d])
    cs = contiguous_strides(tuple(shape[d] for d in order))
    for j, d in enumerate(order):
        if cs[j] != strides[d]:
            return None
    return order


def alloc(shape, strides, np_dtype) -> np.ndarray:
    """An uninitialized CPU array of ``shape`` with element ``strides`` (non-overlapping: its own buffer)."""
    shape = tuple(int(s) for s in shape)
    order = dense_order(shape, strides)
    if order is not None:      # (a transposed fresh array: cheaper than as_strided, and owns its data)
        inv = [0] * len(order)
        for j, d in enumerate(order):
            inv[d] = j
        return np.empty(tuple(shape[d] for d in order), np_dtype).transpose(inv)
    isz = np.dtype(np_dtype).itemsize
    n = 1 + sum((s - 1) * st for s, st in zip(shape, strides)) if all(shape) else 0
    buf = np.empty(max(n, 0), np_dtype)
    return np.lib.stride_tricks.as_strided(buf, shape, tuple(st * isz for st in strides), writeable=True)
