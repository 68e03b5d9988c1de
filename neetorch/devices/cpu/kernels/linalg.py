"""CPU kernels for matrix products: BLAS through ``np.matmul``; einsum through ``np.einsum``.

``np.matmul`` calls BLAS (multithreaded OpenBLAS) whenever both operands are
"blasable": the last two dims have one unit stride and a non-negative leading
stride (transposed layouts are free).  Anything else (negative or odd strides,
stride-0 broadcast matrices) is copied to a contiguous matrix once here, instead of
letting numpy fall into its slow non-BLAS loop.  A batch of matrices times one
matrix is folded into a single big GEMM when the batch can be merged without a copy.
"""
from __future__ import annotations

import ctypes
import glob
import os

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


# Products (all matrices of a batch together) below this many flops run on one BLAS thread.
# OpenBLAS splits anything above ~0.5 MFLOP across its threads; for a small product the hand-off
# costs about what the second core saves, and on a loaded machine a descheduled BLAS worker
# stalls every call for a scheduler slice (measured on the shared 2-core box, 128x256x256:
# median 23.6 ms with 2 threads vs 0.61 ms with one; best case 0.29 vs 0.60 ms).  The default
# keeps attention-sized products (4 heads of 128x64x128: 8.4 MFLOP) on one thread and leaves
# projections (>= 16.8 MFLOP) to BLAS.  NEE_BLAS_SINGLE_FLOPS=0 turns this off.
SINGLE_THREAD_FLOPS = float(os.environ.get("NEE_BLAS_SINGLE_FLOPS", 16e6))


def _find_set_threads_local():
    """OpenBLAS's ``openblas_set_num_threads_local`` (per calling thread; OpenBLAS >= 0.3.27) from
    the library numpy is linked with, or None."""
    try:
        here = os.path.dirname(np.__file__)
        for pat in ("libscipy_openblas*.so*", "libopenblas*.so*"):
            for d in (os.path.join(here, "..", "numpy.libs"), os.path.join(here, ".libs")):
                for path in sorted(glob.glob(os.path.join(d, pat))):
                    fn = getattr(ctypes.CDLL(path), "openblas_set_num_threads_local", None)
                    if fn is not None:
                        fn.argtypes = [ctypes.c_int]
                        fn.restype = ctypes.c_int
                        return fn
    except OSError:
        pass
    return None


_set_threads_local = _find_set_threads_local()


def matmul_into(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """out[..., n, m] = a[..., n, k] @ b[..., k, m] (batch dims already broadcast-compatible)."""
    if out.size == 0:
        return
    if a.shape[-1] == 0:
        out.fill(0)
        return
    if _set_threads_local is not None and 2.0 * out.size * a.shape[-1] < SINGLE_THREAD_FLOPS:
        prev = _set_threads_local(1)
        try:
            _matmul_into(out, a, b)
        finally:
            _set_threads_local(prev)
        return
    _matmul_into(out, a, b)


def _matmul_into(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    if out.dtype == _F16:
        tmp = np.empty(out.shape, _F32)
        _matmul_into(tmp, a.astype(_F32), b.astype(_F32))
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
