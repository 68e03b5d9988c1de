"""CPU kernels for matrix products: BLAS (numpy's OpenBLAS); einsum through ``np.einsum``.

On 2+ threads, float32/float64 products from ``DRV_MNK`` multiply-adds run through
``gemm_driver``: one GIL-free native call cuts the product into blocks (columns or rows of a
2-D product, whole matrices of a batch) and runs one ``cblas_?gemm`` (``?gemv`` for one row or
column) per block on the calling thread and the driver's native workers.  Its descriptor
depends only on the operands' shapes, strides and dtypes, so it is made once per layout
(``_plans``) and a product costs ~2 us of Python on top of BLAS.  Layouts it does not take
(odd strides, batch dims that do not merge, an output overlapping an input, float16, ints)
and products on one thread take the paths below.

``np.matmul`` calls BLAS (OpenBLAS, single-threaded here) whenever both operands are
"blasable": the last two dims have one unit stride and a non-negative leading
stride (transposed layouts are free).  Anything else (negative or odd strides,
stride-0 broadcast matrices) is copied to a contiguous matrix once here, instead of
letting numpy fall into its slow non-BLAS loop.  A batch of matrices times one
matrix is folded into a single big GEMM when the batch can be merged without a copy.
"""
from __future__ import annotations

import os

import numpy as np

from .. import kernel, threads

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
    f = a.flags
    if f.c_contiguous or f.f_contiguous:   # the common layouts (a weight's .T is F-contiguous)
        return a
    if not _blasable(a):
        return np.ascontiguousarray(a)
    # batch dims with negative strides also make numpy fall off the BLAS path
    for s in a.strides[:-2]:
        if s < 0:
            return np.ascontiguousarray(a)
    return a


def _batch_is_broadcast(b: np.ndarray) -> bool:
    return all(s == 0 or n == 1 for n, s in zip(b.shape[:-2], b.strides[:-2]))


# Products the driver does not take (see the module docs) and ones on one thread:
# BLAS runs single-threaded inside every product (threads.serial_blas: its own threads would
# compete with neetorch's pool, and one descheduled BLAS worker stalls the call); a large product
# is cut into blocks instead, one BLAS call per block, across neetorch's pool (nee.set_num_threads):
# a 2-D product by rows of ``a`` or by columns of ``b`` (the larger of the two, so the operand each
# block re-packs is the smaller one: a matrix-vector product splits the weight's columns), a
# batch by its leading dim.  Below PAR_FLOPS a product stays on the calling thread (the hand-off
# costs tens of us); matrix-vector and other skinny products are bound by the weight's memory
# bandwidth, not flops, and are split from PAR_BYTES of weight on.  Measured on the shared, loaded
# 2-core box (in one process, interleaved, min of 8 rounds): the ONNX GPT decoder step (weights of
# 0.6-2.4 MB, 1x384 rows) took 19.8 ms with PAR_BYTES=4 MiB, 25.8 ms with 1 MiB and 26.2 ms with
# 256 KiB (a worker the scheduler runs late, or preempted holding the GIL, stalls the call for
# longer than the split saves); the 8 MFLOP threshold gave the best transformer block (6.2 ms vs
# 7.6 ms at 64 MFLOP and 8.5 ms on one thread) and BERT 83 ms vs 110 ms on one thread.
PAR_FLOPS = float(os.environ.get("NEE_MATMUL_PAR_FLOPS", "8e6"))
PAR_BYTES = int(os.environ.get("NEE_MATMUL_PAR_BYTES", str(4 << 20)))
_COL_ALIGN = 16          # column blocks start on 64-byte boundaries (float32)
# blocks per thread: a worker that the scheduler runs late holds up the call by one block at most
# (unclaimed blocks are run by whoever is free, threads.run_parallel), at the cost of re-packing
# the shared operand once per block
_BLOCKS_PER_THREAD = int(os.environ.get("NEE_MATMUL_BLOCKS_PER_THREAD", "4"))
_MIN_COLS = 64
_MIN_ROWS = 16

_set_threads_local = threads._blas_set   # OpenBLAS's thread-count setter (None: not found)


def matmul_into(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """out[..., n, m] = a[..., n, k] @ b[..., k, m] (batch dims already broadcast-compatible)."""
    if out.size == 0:
        return
    k = a.shape[-1]
    if k == 0:
        out.fill(0)
        return
    mnk = out.size * k
    if mnk >= DRV_MNK and threads.NUM_THREADS > 1 and _drv_ok[0] is not False and \
            (out.shape[-1] > 1 and out.shape[-2] > 1 or mnk * out.itemsize >= DRV_GEMV_BYTES):
        key = (out.shape, out.strides, a.shape, a.strides, b.shape, b.strides, out.dtype, a.dtype, b.dtype,
               threads.NUM_THREADS)
        desc = _plans.get(key)
        if desc is None:
            desc = _plan(out, a, b, key)
        # an output over an input: BLAS writes as it reads, numpy's path copies
        if desc is not False and not np.may_share_memory(out, a) and not np.may_share_memory(out, b):
            _drv_run(desc, a, b, out)
            return
    if b.ndim == 2 and out.dtype != _F16:
        # the common product, (..., n, k) activations @ a (k, m) weight, all contiguous and below
        # the split thresholds: straight to one BLAS call, without _matmul_into's general layout
        # checks (the same call _gemm2d would make)
        fa, fo, fb = a.flags, out.flags, b.flags
        if fa.c_contiguous and fo.c_contiguous and (fb.c_contiguous or fb.f_contiguous):
            m = b.shape[1]
            R = out.size // m
            if threads.NUM_THREADS <= 1 or not (2.0 * mnk >= PAR_FLOPS or
                                                (k * m * b.itemsize >= PAR_BYTES and max(R, m) > 1)):
                a2 = a if a.ndim == 2 else a.reshape(R, k)
                o2 = out if out.ndim == 2 else out.reshape(R, m)
                if mnk < _GEMV_NEVER_THREADS or (mnk <= _GEMM_NEVER_THREADS and m > 1 and R > 1):
                    _gemm(o2, a2, b)
                else:
                    with threads.serial_blas():
                        _gemm(o2, a2, b)
                return
    if mnk < _GEMV_NEVER_THREADS or (mnk <= _GEMM_NEVER_THREADS and out.shape[-1] > 1 and out.shape[-2] > 1):
        _matmul_into(out, a, b)
        return
    with threads.serial_blas():
        _matmul_into(out, a, b)


# ------------------------------------------------------------------ the native split (gemm_driver)
# float32/float64 products from DRV_MNK multiply-adds are cut into blocks run by gemm_driver: one
# GIL-free call, BLAS blocks on the calling thread and the driver's native workers, ~2 us of
# overhead instead of the pool's tens.  Measured on the shared 2-core box (same process,
# interleaved, min of repeats; load ~1.3): 128x256x256 148 us vs 241 through the pool (np.matmul on
# one thread 195, torch on 2 threads 127), the batched attention products 4x(128x128x64) 55 vs 95,
# 1024x384x384 1.95 vs 3.99 ms.  Matrix-vector products are bound by memory bandwidth: with the
# weights not in cache (the ONNX GPT step reads 43 MB of them) one core already reads ~15 GB/s and
# two were no faster (1x384x1536: 128 us on one thread, 149 split in 2), so one-row / one-column
# products split only from DRV_GEMV_BYTES of matrix (the pool's old PAR_BYTES).
DRV_MNK = int(os.environ.get("NEE_MATMUL_DRV_MNK", str(1 << 18)))
DRV_GEMV_BYTES = int(os.environ.get("NEE_MATMUL_DRV_GEMV_BYTES", str(4 << 20)))
_DRV_DT = (_F32, np.dtype(np.float64))
_drv_ok = [None]         # None: not tried yet; False: off (NEE_MATMUL_DRIVER=0) or unavailable
_plans: dict = {}        # layout key -> the driver's descriptor, or False (not driven)
_drv_run = None


def _plan(out: np.ndarray, a: np.ndarray, b: np.ndarray, key) -> object:
    """The driver's descriptor for this layout (cached under ``key``), or False: numpy's path."""
    global _drv_run
    if _drv_ok[0] is None:
        ok = os.environ.get("NEE_MATMUL_DRIVER", "1") not in ("0", "")
        if ok:
            from .. import gemm_driver
            ok = gemm_driver.available()
            _drv_run = gemm_driver.run
        _drv_ok[0] = ok
    desc = _make_plan(out, a, b) if _drv_ok[0] else None
    if desc is None:
        desc = False
    if len(_plans) > 4096:
        _plans.clear()
    _plans[key] = desc
    return desc


def _batch_stride(x: np.ndarray, bshape: tuple):
    """The one byte stride stepping through x's matrices broadcast to batch shape ``bshape``
    (0: one matrix for the whole batch), or None when the batch dims do not merge."""
    nd = len(bshape)
    xb = x.shape[:-2]
    if len(xb) < nd:
        xb = (1,) * (nd - len(xb)) + xb
        xs = (0,) * (nd - x.ndim + 2) + x.strides[:-2]
    else:
        xs = x.strides[:-2]
    st = None
    for n, xn, s in zip(reversed(bshape), reversed(xb), reversed(xs)):
        if n == 1:
            continue
        s = 0 if xn == 1 else s
        if st is None:
            st, nxt = s, s * n
        elif s == nxt:
            nxt = s * n
        else:
            return None
    return st or 0


def _make_plan(out: np.ndarray, a: np.ndarray, b: np.ndarray):
    """The descriptor of ``out = a @ b`` for gemm_driver, or None.  The views built here have the
    operands' own data pointers (reshapes and restrides without copies), so the descriptor runs
    on the original arrays."""
    from .. import gemm_driver
    if out.dtype not in _DRV_DT or a.dtype != out.dtype or b.dtype != out.dtype:
        return None
    nt = threads.NUM_THREADS
    m = out.shape[-1]
    n = out.shape[-2]
    k = a.shape[-1]
    if (n == 1 or m == 1) and k * max(n, m) * out.itemsize < DRV_GEMV_BYTES:
        return None      # matrix-vector: memory-bound; split only from DRV_GEMV_BYTES of matrix
    if _prep(a) is not a or _prep(b) is not b:
        return None      # layouts BLAS cannot take: numpy's path (which copies them once)
    if out.ndim == 2 and a.ndim == 2 and b.ndim == 2:
        return _plan2d(gemm_driver, out, a, b, nt)
    bshape = out.shape[:-2]
    if _batch_is_broadcast(b) and a.ndim > 2 and out.flags.c_contiguous:
        # (B, n, k) @ (k, m): one (B*n, k) GEMM when the batch merges without a copy
        try:
            a2 = np.reshape(a, (-1, k), copy=False)
        except ValueError:
            a2 = None
        if a2 is not None and a2.shape[0] * m == out.size and _blasable(a2):
            return _plan2d(gemm_driver, out.reshape(-1, m), a2, b[(0,) * (b.ndim - 2)], nt)
    nb = int(np.prod(bshape)) if bshape else 1
    so = _batch_stride(out, bshape)
    sa = _batch_stride(a, bshape)
    sb = _batch_stride(b, bshape)
    if so is None or sa is None or sb is None or (so == 0 and nb > 1) or min(so, sa, sb) < 0:
        return None
    o3 = np.lib.stride_tricks.as_strided(out, (nb, n, m), (so,) + out.strides[-2:])
    a3 = np.lib.stride_tricks.as_strided(a, (nb, n, k), (sa,) + a.strides[-2:])
    b3 = np.lib.stride_tricks.as_strided(b, (nb, k, m), (sb,) + b.strides[-2:])
    # enough matrices to share out whole, else each cut too (into blocks of _DRV_MIN_COLS and up)
    blocks = 1 if nb >= 2 * nt else -(-_DRV_BLOCKS * nt // nb)
    return gemm_driver.plan(o3, a3, b3, nt, blocks, None, _COL_ALIGN, _DRV_MIN_COLS)


# blocks per thread of a split 2-D product: measured on the 2-core box (same process, interleaved,
# min of repeats), 128x256x256 took 123 us in 2 column blocks, 129 in 4, 138 in 8, 143 in 2 row
# blocks (each block re-packs the operand it shares); more blocks only pay when a worker is
# descheduled (a worker that never comes costs nothing: the caller claims every block)
_DRV_BLOCKS = int(os.environ.get("NEE_MATMUL_DRV_BLOCKS", "1"))
# products from this many multiply-adds (ms of work) are cut finer, _DRV_BIG_BLOCKS per thread: a
# worker descheduled for a few ms then holds up a quarter of the split, and the extra packing is
# noise next to the blocks' flops
_DRV_BIG_MNK = int(os.environ.get("NEE_MATMUL_DRV_BIG_MNK", str(1 << 26)))
_DRV_BIG_BLOCKS = 4
_DRV_MIN_COLS = 16
_DRV_MIN_ROWS = 16


def _plan2d(gemm_driver, out, a, b, nt):
    n, m = out.shape
    big = n * m * a.shape[1] >= _DRV_BIG_MNK
    blocks = nt * (max(_DRV_BLOCKS, _DRV_BIG_BLOCKS) if big else _DRV_BLOCKS)
    if m >= n:
        return gemm_driver.plan(out, a, b, nt, blocks, 1, _COL_ALIGN, _DRV_MIN_COLS)
    return gemm_driver.plan(out, a, b, nt, blocks, 0, 1, _DRV_MIN_ROWS)


# OpenBLAS runs a product on the calling thread anyway below this many multiply-adds (interface/
# gemv.c: m*n < 2304 * GEMM_MULTITHREAD_THRESHOLD(4); interface/gemm.c: m*n*k <= 65536 * 4; numpy
# calls gemv when the product has one row or one column); skipping the thread setting there
# saves ~3 us per small product.  The whole call's count bounds each matrix's of a batch.
_GEMV_NEVER_THREADS = 2304 * 4
_GEMM_NEVER_THREADS = 65536 * 4


def _matmul_into(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    if out.dtype == _F16:
        tmp = np.empty(out.shape, _F32)
        _matmul_into(tmp, a.astype(_F32), b.astype(_F32))
        np.copyto(out, tmp, casting="unsafe")
        return
    a = _prep(a)
    b = _prep(b)
    if out.ndim == 2:
        _gemm2d(out, a, b)
        return
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
            _gemm2d(out.reshape(-1, m), a2, b2)
            return
    nt = threads.NUM_THREADS
    nb = out.shape[0]
    if nt > 1 and nb > 1 and 2.0 * out.size * k >= PAR_FLOPS:
        nd = out.ndim

        def part(c):
            s, e = c
            _gemm(out[s:e], _rows0(a, nd, s, e), _rows0(b, nd, s, e))
        threads.run_parallel(part, threads.split(nb, nt))
        return
    _gemm(out, a, b)


def _rows0(x: np.ndarray, nd: int, s: int, e: int) -> np.ndarray:
    """x's part for out[s:e] (x broadcast against an out of ``nd`` dims)."""
    return x[s:e] if x.ndim == nd and x.shape[0] != 1 else x


def _gemm(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    if out.flags.c_contiguous or (out.ndim == 2 and _blasable(out) and min(out.strides) >= 0):
        np.matmul(a, b, out=out)
    else:
        out[...] = np.matmul(a, b)


def _gemm2d(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """out (R, M) = a (R, K) @ b (K, M), split across the pool when large (see PAR_FLOPS)."""
    nt = threads.NUM_THREADS
    if nt > 1:
        R, K = a.shape
        M = b.shape[1]
        if 2.0 * R * K * M >= PAR_FLOPS or (K * M * b.itemsize >= PAR_BYTES and max(R, M) > 1):
            parts = nt * _BLOCKS_PER_THREAD
            if M >= R:
                chunks = threads.split(M, min(parts, max(M // _MIN_COLS, 1)), _COL_ALIGN)
                if len(chunks) > 1:
                    threads.run_parallel(lambda c: _gemm(out[:, c[0]:c[1]], a, b[:, c[0]:c[1]]), chunks)
                    return
            else:
                chunks = threads.split(R, min(parts, max(R // _MIN_ROWS, 1)))
                if len(chunks) > 1:
                    threads.run_parallel(lambda c: _gemm(out[c[0]:c[1]], a[c[0]:c[1]], b), chunks)
                    return
    _gemm(out, a, b)


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
