"""CPU kernels for matrix products: BLAS through ``np.matmul``; einsum through ``np.einsum``.

``np.matmul`` calls BLAS (multithreaded OpenBLAS) whenever both operands are
"blasable": the last two dims have one unit stride and a non-negative leading
stride (transposed layouts are free).  Anything else (negative or odd strides,
stride-0 broadcast matrices) is copied to a contiguous matrix once here, instead of
letting numpy fall into its slow non-BLAS loop.  A batch of matrices times one
matrix is folded into a single big GEMM when the batch can be merged without a copy.
"""
from __future__ import annotations

import numpy as np

from .. import kernel

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)


def _blasable(a: np.ndarray) -> bool:
    """True when the matrices in the last two dims can go straight to BLAS."""
    isz = a.itemsize
    n0, n1 = a.shape[-2], a.shape[-1]
    s0, s1 = a.strides[-2], a.strides[-1]
    if n0 <= 1 and n1 <= 1:
        return True
    if (s1 == isz or n1 == 1) and s0 % isz == 0 and s0 >= max(n1, 1) * isz:
        return True
    if (s0 == isz or n0 == 1) and s1 % isz == 0 and s1 >= max(n0, 1) * isz:
        return True
    return False


def _prep(a: np.ndarray) -> np.ndarray:
    if not _blasable(a):
        return np.ascontiguousarray(a)
    # batch dims with negative strides also make numpy fall off the BLAS path
    for s in a.strides[:-2]:
        if s < 0:
            return np.ascontiguousarray(a)
    return a


def _batch_is_broadcast(b: np.ndarray) -> bool:
    return all(s == 0 or n == 1 for n, s in zip(b.shape[:-2], b.strides[:-2]))


def matmul_into(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """out[..., n, m] = a[..., n, k] @ b[..., k, m] (batch dims already broadcast-compatible)."""
    if out.size == 0:
        return
    if a.shape[-1] == 0:
        out.fill(0)
        return
    if out.dtype == _F16:
        tmp = np.empty(out.shape, _F32)
        matmul_into(tmp, a.astype(_F32), b.astype(_F32))
        np.copyto(out, tmp, casting="unsafe")
        return
    a = _prep(a)
    b = _prep(b)
    k = a.shape[-1]
    m = b.shape[-1]
    if a.ndim > 2 and out.flags.c_contiguous and _batch_is_broadcast(b):
        # one big GEMM: (B*n, k) @ (k, m)
        try:
            a2 = np.reshape(a, (-1, k), copy=False)
        except ValueError:
            a2 = None
        if a2 is not None and _blasable(a2) and a2.shape[0] * m == out.size:
            b2 = b[(0,) * (b.ndim - 2)]
            np.matmul(a2, b2, out=out.reshape(-1, m))
            return
    if out.flags.c_contiguous:
        np.matmul(a, b, out=out)
    else:
        out[...] = np.matmul(a, b)


@kernel("matmul")
def matmul_kernel(backend, outs, ins, attrs):
    matmul_into(outs[0], ins[0], ins[1])


@kernel("einsum")
def einsum_kernel(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    ins = [x.astype(_F32) if x.dtype == _F16 else x for x in ins]
    r = np.einsum(attrs["equation"], *ins, optimize=len(ins) > 1)
    np.copyto(out, r, casting="unsafe")
