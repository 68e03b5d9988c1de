"""CPU kernels for convolution, pooling and resampling.

Every Numba kernel here works on planes: a C-contiguous (P, H, W) array seen as one
flat buffer, with all sizes and parameters passed as runtime ints, so there is one
compiled specialization per float dtype (float32, float64) and none per shape.
Kernels take a plane range [p0, p1) and are split over threads by the wrappers.

* conv2d (``conv2d_into``; the JIT's bias / residual / relu epilogue chains come with it, see
  kernels/conv_epilogue.py: the extra bias summed into the conv's, relu and the residual where each path
  writes its output or in one in-place pass, _finish_epilogue).
* conv2d, float32 (AVX-512F or AVX2 + FMA): first the direct kernel (kernels/conv_direct.py: LLVM IR register-tiled
  micro-kernels over the zero-padded phase planes (strided convs: the padded input unsplit, each pixel's
  position from a table), weights packed once per weight buffer, groups in one launch) where its cost rule
  picks it: every conv but most unpadded 1x1 ones, those the Winograd rule
  takes and depthwise ones but on small planes; NEE_CONV_DIRECT=0 turns it off, =1 takes every float32
  conv it can.  Otherwise:
* conv2d: 1x1 -> GEMMs on the NCHW buffers (no im2col; strided: on the subsampled input, one
  strided copy); depthwise -> one fused pass per input plane: padded and split into its stride
  phases in a per-thread buffer, all taps in one vector loop over padded-width rows, compacted
  (_depthwise_fused), else a direct row loop; 3x3 stride 1 where the cost rule (_winograd_rule) picks
  it -> Winograd F(2x2 or 4x4, 3x3) (kernels/winograd.py: transformed weights cached per weight
  buffer, input tiles transformed, alpha^2 GEMMs per block of output channels, each block's output
  transformed at once; a call whose input holds an inf / NaN, found by the input transform, and weights
  whose transform is not finite take the GEMM paths: torch's locality, see _conv_winograd); otherwise,
  where it pays (_wide_pays: stride-1
  kernels of few output channels per padded column, the 7x7 stride-2 stem), "padded rows": the
  input zero-padded (split into its stride phases), each (channel, tap) column row ONE contiguous
  copy, the GEMM over padded-width output rows, compacted (+ bias) per tile (_conv_wide); else
  im2col + GEMM per tile (on output planes up to _GATHER_MAX_OW wide, the columns gathered from the
  zero-padded input, one loop per (channel, tap)).  Tiles are bands of output rows (or groups of
  images), the threads claiming whole tiles, or one tile's im2col split over planes and its GEMM
  over blocks.  Every GEMM runs with single-threaded BLAS, split across the cores by gemm_driver
  or neetorch's pool (_gemms).
* conv_transpose2d: GEMM into columns + col2im (the adjoint of im2col).
* depthwise conv2d (one output per input channel), float32 / float64, column strides 1-4: first the LLVM
  kernels of kernels/depthwise_native.py (straight from the input, masked loads at the borders, on
  gemm_driver's native workers; NEE_DEPTHWISE_NATIVE=0 turns them off); the rest as below.
* max/avg pooling without indices, float32 / float64, column strides 1-4: the LLVM kernels of
  kernels/pool_native.py (separable, one row buffer on the stack, on the native workers; NEE_POOL_NATIVE=0
  turns them off).  Otherwise (and with indices, and global windows):
* max/avg pooling: whole planes in per-thread buffers, padded (-inf / 0) and split into their
  stride phases as the depthwise kernel's, then the window's rows, then its columns, each one
  contiguous vector loop over the plane, then compacted (_pool_planes); windows covering whole
  planes: one reduction per plane (_pool_global); with indices: the same phase planes, one pass per
  tap keeping the winning tap's index offset (exact for windows inside the input), the windows that
  reach into the padding scalar (_maxpool_idx_planes).
* depthwise and pooling loops index with uint64 (no negative-index wraparound checks: without it
  they do not vectorize), keep their arithmetic in the input's float type (a float64 zero or
  literal would widen every sum), and divide under error_model="numpy" (Python's zero-division
  check stops vectorization too).
* float16 inputs are computed in float32 and rounded once at the end.
"""
from __future__ import annotations

import math
import os
import threading

import numpy as np
from numba import njit

from .. import kernel, native_chain, threads
from . import conv1x1_packed, conv_act, conv_direct, depthwise_native, pool_native, winograd

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_NOGIL = dict(cache=True, nogil=True)

# im2col columns are produced in chunks of images of at most this many elements
_COL_BUDGET = 1 << 23
# columns per GEMM in the tiled conv path (elements): about 2 MB of float32
_TILE = 1 << 19
# im2col copies short rows (~0.2-0.4 ns per element measured, 14x14 to 56x56 planes): split over the
# pool from this many column elements on (the hand-off costs tens of us)
_IM2COL_PAR = 1 << 17


# ---------------------------------------------------------------- helpers
# GEMMs run with BLAS single-threaded (threads.serial_blas), cut into blocks across neetorch's pool: an
# OpenBLAS with its own threads competes with the pool, and on a loaded machine one descheduled BLAS
# worker stalls the whole call (measured on the shared 2-core box: 1x1 convs of ResNet-50 shapes with
# OpenBLAS's 2 threads took 5-20 ms min-of-40 in some runs against 0.2-1.2 ms split over the pool).
_PAR_FLOPS = 8e6          # below this a GEMM stays on the calling thread (pool hand-off: tens of us)
# single GEMMs gemm_driver takes split from this many flops (its native workers: a few us to wake; SqueezeNet's
# 64 -> 16 1x1 on 55x55, 6.2 Mflop, 2 threads: 114 -> 80 us).  Not the batches of grouped convs: ShuffleNet's
# (4 x 68 -> 68 on 14x14, 7.3 Mflop) ran 105 us in numpy's loop of GEMMs, 160-180 us batched in the driver
_DRV_PAR_FLOPS = 2e6
_COL_ALIGN = 16           # column blocks start on 64-byte boundaries (float32)
_BLOCKS_PER_THREAD = 2     # blocks per thread: the claiming pool balances a late or busy worker


_tls = threading.local()


# scratch buffers up to this size are kept per thread for reuse; larger ones are allocated per call (a
# large batch's padded input must not stay held by a thread after the call)
_KEEP_BYTES = 64 << 20


def _buffer(n: int, dt, tag: str = "col") -> np.ndarray:
    """A per-thread scratch buffer of at least n elements (reused: no page faults on every tile)."""
    dt = np.dtype(dt)
    if n * dt.itemsize > _KEEP_BYTES:
        return np.empty(n, dt)
    key = (dt.char, tag)
    bufs = getattr(_tls, "bufs", None)
    if bufs is None:
        bufs = _tls.bufs = {}
    buf = bufs.get(key)
    if buf is None or buf.size < n:
        buf = bufs[key] = np.empty(max(n, 1), dt)
    return buf[:n]


def _run_jobs(jobs) -> None:
    for o, a, b in jobs:
        np.matmul(a, b, out=o)


# GEMMs split across cores go through gemm_driver when it is available (as kernels/linalg.py's products):
# one GIL-free native call whose workers claim the blocks, ~2 us of overhead against the pool's tens (on
# the shared 2-core box under load ~3-5 the conv A/B was within its noise; the pool's hand-off cost is what
# this removes on a quiet machine).  Plans are cached per layout.
_drv = [None]            # gemm_driver module, or False (unavailable / NEE_MATMUL_DRIVER=0)
_drv_plans: dict = {}


def _driver():
    if _drv[0] is None:
        ok = False
        if os.environ.get("NEE_MATMUL_DRIVER", "1") not in ("0", ""):
            from .. import gemm_driver
            ok = gemm_driver if gemm_driver.available() else False
        _drv[0] = ok
    return _drv[0]


def _drv_gemm(o, a, b, nt) -> bool:
    """o = a @ b (2-D, or 3-D batches with one byte stride each; a stride-0 batch for a shared matrix)
    split over nt threads by gemm_driver; False (nothing written) when it cannot take the layout."""
    drv = _driver()
    if not drv:
        return False
    key = (o.shape, o.strides, a.shape, a.strides, b.shape, b.strides, o.dtype.char, a.dtype.char, b.dtype.char,
           nt, _EPI_ROWS_K)
    d = _drv_plans.get(key)
    if d is None:
        if o.ndim == 3:
            nb = o.shape[0]
            blocks = 1 if nb >= _BLOCKS_PER_THREAD * nt else -(-_BLOCKS_PER_THREAD * nt // nb)
        else:
            blocks = _BLOCKS_PER_THREAD * nt
        R, M = o.shape[-2], o.shape[-1]
        # short K, many rows: row blocks (as linalg._plan2d: column blocks share every row of C between cores)
        if M >= R and not (a.shape[-1] <= _EPI_ROWS_K and R >= 128):
            d = drv.plan(o, a, b, nt, blocks, 1, _COL_ALIGN, _COL_ALIGN)
        else:
            d = drv.plan(o, a, b, nt, blocks, 0, 1, 16)
        if d is None:
            d = False
        if len(_drv_plans) > 4096:
            _drv_plans.clear()
        _drv_plans[key] = d
    if d is False:
        return False
    drv.run(d, a, b, o)
    return True


def _stacked(jobs):
    """The jobs as one batched (o, a, b) of 3-D strided views when they step through memory uniformly, else
    None."""
    o0, a0, b0 = jobs[0]
    if len(jobs) == 1:
        return o0, a0, b0
    if any(x.ndim != 2 for job in jobs for x in job):
        return None
    out = []
    for k, x0 in enumerate((o0, a0, b0)):
        x1 = jobs[1][k]
        if x1.shape != x0.shape or x1.strides != x0.strides:
            return None
        step = x1.__array_interface__["data"][0] - x0.__array_interface__["data"][0]
        base = x0.__array_interface__["data"][0]
        for i, job in enumerate(jobs):
            x = job[k]
            if x.shape != x0.shape or x.strides != x0.strides or x.__array_interface__["data"][0] != base + i * step:
                return None
        if step < 0 or (step == 0 and k == 0):
            return None
        out.append(np.lib.stride_tricks.as_strided(x0, (len(jobs),) + x0.shape, (step,) + x0.strides))
    return tuple(out)


# The 1x1 GEMM path's bias / residual / relu run inside gemm_driver's blocks (with_epilogue: each block's
# elementwise kernel right after its GEMM, on the thread that computed it, while the block is still in cache), not
# as a pass over the whole output after the product (_finish_epilogue, which does not scale: on the AVX2 Zen 3
# box a pass over ResNet-50's 256 x 56 x 56 output takes ~0.3 ms on 1 or 2 threads).  Measured there (conv +
# bias + residual + relu, min of 4 interleaved rounds, in-process, ms, 1 / 2 threads): 64 -> 256 on 56x56 pass
# 2.46 / 1.87, in the blocks 1.85 / 1.33; 256 -> 64 on 56x56 1.85 / 1.11 -> 1.58 / 0.92; 128 -> 512 on 28x28
# 1.83 / 1.51 -> 1.66 / 1.31; 256 -> 1024 on 14x14 1.40 / 0.88 -> 1.33 / 0.71.  Blocks of at most
# _EPI_BLOCK_BYTES of output, at least _EPI_BLOCKS_PER_THREAD per thread (256 KiB blocks, 13 for the 64 -> 256: 1.82
# ms on 2 threads; OpenBLAS's K = 64 products lose on narrow column blocks).  NEE_CONV_GEMM_EPILOGUE=0: the
# separate pass.  The epilogue's arithmetic is _bias_act's ((acc + bias) + residual, then relu); the GEMM is cut
# into other column blocks than _gemms' (on 1 thread: one call), so float32 outputs can differ from the pass's in
# the last bits (OpenBLAS's kernels for a block's last columns; seen in 28 of 224 test cases, none in float64).
_GEMM_EPI = [os.environ.get("NEE_CONV_GEMM_EPILOGUE", "1") not in ("0", "")]
_EPI_BLOCK_BYTES = int(os.environ.get("NEE_CONV_EPI_BLOCK_KB", "1024")) << 10
# row blocks (whole output channels, contiguous) rather than column blocks for the products of few input channels
# (K <= _EPI_ROWS_K) with _EPI_ROWS_MIN_R output channels or more: there the output side (the block's epilogue
# on rows strided by H*W, OpenBLAS's short-K tiles of C) dominates and the row blocks' re-packing of the (K, H*W)
# input is cheap.  Measured (2 threads, conv + bias + relu, in-process interleaved 25 rounds x 8 calls, min / p25 /
# median ms, shared 2-core AVX2 box, load ~9, others niced): 64 -> 256 on 56x56 1.25/1.64/1.78 -> 0.91/1.04/1.11,
# 64 -> 64 on 56x56 0.40/0.47/0.49 -> 0.24/0.30/0.34, 128 -> 512 on 28x28 1.28/1.37/1.46 -> 0.71/0.87/0.92;
# K >= 256 unchanged or worse in rows (256 -> 64 on 56x56 0.99 -> 1.11), SqueezeNet's (K 16..128, 16..128
# channels) unchanged.  NEE_CONV_EPI_ROWS_K=0: the larger dimension's split everywhere
_EPI_ROWS_K = int(os.environ.get("NEE_CONV_EPI_ROWS_K", "128"))
_EPI_ROWS_MIN_R = 64
# blocks per thread of the epilogue path (at least; _EPI_BLOCK_BYTES may ask more): one block per thread ran
# 4-10% faster than _BLOCKS_PER_THREAD's 2 (fewer re-packs of the shared operand, fewer OpenBLAS calls) on every
# ResNet-50 1x1 shape (2 threads, conv + bias + relu, in-process interleaved 25 x 8 calls, min / p25 ms, load ~7,
# others niced): 256 -> 64 on 56x56 0.86/1.11 -> 0.80/0.98, 1024 -> 256 on 14x14 0.67/0.73 -> 0.64/0.69,
# 256 -> 1024 on 14x14 0.66/0.71 -> 0.64/0.68, 2048 -> 512 on 7x7 0.75/0.80 -> 0.73/0.77, 512 -> 2048 on 7x7
# 0.72/0.87 -> 0.70/0.81, 128 -> 512 on 28x28 0.68/0.74 -> 0.65/0.69 (64 -> 256 on 56x56: 4 blocks of 1 MiB
# either way).  A descheduled worker then leaves the caller a larger share (the claiming still never waits for it)
_EPI_BLOCKS_PER_THREAD = int(os.environ.get("NEE_CONV_EPI_BLOCKS", "1"))
_epi_kernels: dict = {}
_epi_plans: dict = {}


def _epi_kernel(dt: str, has_b: bool, has_e: bool, relu):
    """The LLVM elementwise kernel ``out = relu((acc + bias) + e)`` (the parts present) in dtype ``dt``
    (operands: out, acc[, bias][, e]), or None (no LLVM renderer here).  ``relu`` may be another activation's
    steps (kernels/conv_act.py; finite constants: None otherwise)."""
    relu = conv_act.norm(relu)
    key = (dt, has_b, has_e, relu)
    k = _epi_kernels.get(key)
    if k is None:
        if not all(c is None or isinstance(c, str) or math.isfinite(c) for _, c in conv_act.steps(relu)):
            return None
        from .. import elementwise as ew
        from .. import llvm_render
        ctor = "np.float32" if dt == "float32" else "np.float64"
        body, t, n = [], "v0", 1
        if has_b:
            body.append(f"t{len(body)} = {ctor}({t} + v{n})")
            t, n = f"t{len(body) - 1}", n + 1
        if has_e:
            body.append(f"t{len(body)} = {ctor}({t} + v{n})")
            t, n = f"t{len(body) - 1}", n + 1
        if relu is True:
            body.append(f"t{len(body)} = {ctor}(f_relu{dt[-2:]}({t}))")
            t = f"t{len(body) - 1}"
        elif relu:
            body.append(f"a0 = {t}")
            body += conv_act.expr(relu, "a0", ctor, dt[-2:])
            t = body[-1].split(" = ")[0]
        name = f"convepi_{'b' if has_b else ''}{'e' if has_e else ''}{conv_act.tag(relu)}_{dt}"
        try:
            k, _ = ew.load_group("convepi", name, [dt] * n, [dt], body, [t], native_only=True)
        except Exception:   # noqa: BLE001 - no LLVM renderer: the separate pass
            k = None
        if not isinstance(k, llvm_render.LLVMKernel):
            k = False
        _epi_kernels[key] = k
    return k or None


def _epi_addr(kern, col_strides, nout: int) -> int:
    """Address of ``kern``'s variant for operands of these column strides (elements)."""
    from .. import llvm_render
    if all(s == 1 for s in col_strides[:nout]) and all(s in (0, 1) for s in col_strides[nout:]):
        variant = tuple(i for i, s in enumerate(col_strides[nout:]) if s == 0)
    else:
        variant = None

    def render():
        text = kern._ir.get(variant)
        return text if text is not None else llvm_render.render_ir(kern.name, *kern.pieces, variant=variant)
    return llvm_render.compile_ir(llvm_render.kernel_key(kern.prefix, kern.pieces, variant), render)


def _gemm_epilogue(jobs, res, b, e, relu, G, Og) -> bool:
    """The 1x1 convolution's GEMMs ``jobs`` (views of ``res``, one per (image, group): N == 1 or G == 1) with
    ``res += b`` (per output channel, or None), ``+= e`` (res's shape, or None), relu, run by gemm_driver with
    the epilogue in its blocks (see _GEMM_EPI); False (nothing written) when it cannot take them."""
    if not _GEMM_EPI[0] or res.dtype.name not in ("float32", "float64") or not res.flags.c_contiguous:
        return False
    if e is not None and (e.shape != res.shape or e.dtype != res.dtype or np.may_share_memory(e, res)):
        return False
    drv = _driver()
    if not drv:
        return False
    st = _stacked(jobs)
    if st is None:
        return False
    o, a, bm = st
    nt = threads.NUM_THREADS
    isz = res.itemsize
    key = (o.shape, o.strides, a.shape, a.strides, bm.shape, bm.strides, res.dtype.char, nt, b is not None,
           e is not None, bool(relu), G, Og, _EPI_BLOCK_BYTES, _EPI_ROWS_K, _EPI_BLOCKS_PER_THREAD)
    p = _epi_plans.get(key)
    if p is None:
        p = False
        kern = _epi_kernel(res.dtype.name, b is not None, e is not None, bool(relu))
        R, M = o.shape[-2], o.shape[-1]
        nb = o.shape[0] if o.ndim == 3 else 1
        if kern is not None and R > 0 and M > 0:
            split = 1 if M >= R and not (a.shape[-1] <= _EPI_ROWS_K and R >= _EPI_ROWS_MIN_R) else 0
            n = M if split else R
            # blocks per matrix: _EPI_BLOCKS_PER_THREAD per thread over the batch, and each at most _EPI_BLOCK_BYTES
            per = max(1, -(-_EPI_BLOCKS_PER_THREAD * nt // nb), -(-R * M * isz // _EPI_BLOCK_BYTES))
            per = min(per, max(1, n // (_COL_ALIGN if split else 8)))
            d = drv.plan(o, a, bm, nt, per, split, _COL_ALIGN if split else 1, _COL_ALIGN if split else 8)
            if d is not None:
                # operand tables over the (batch, R, M) product, in elements from res's / e's / b's start
                base = o.__array_interface__["data"][0] - res.__array_interface__["data"][0]
                ot = [o.strides[0] // isz if o.ndim == 3 else 0, o.strides[-2] // isz, o.strides[-1] // isz,
                      base // isz]
                rows = [ot, ot]
                if b is not None:
                    rows.append([Og if G > 1 else 0, 1, 0, 0])
                if e is not None:
                    rows.append(list(ot))
                table = np.array(rows, np.int64)
                addr = _epi_addr(kern, [r[2] for r in rows], 1)
                p = (drv.with_epilogue(d, addr, table), table, drv.epilogue_caller(len(rows)))
        if len(_epi_plans) > 1024:
            _epi_plans.clear()
        _epi_plans[key] = p
    if p is False:
        return False
    d, _, call = p
    rf = res.reshape(-1)
    ops = [rf, rf]
    if b is not None:
        ops.append(b)
    if e is not None:
        ops.append(e.reshape(-1))
    call(d, a, bm, o, *ops)
    return True


def _gemms(jobs) -> None:
    """o = a @ b for every (o, a, b): 2-D views (``o`` BLAS-compatible: unit inner stride) or C-contiguous
    batches.  Serial BLAS; across the cores when large: through gemm_driver (_drv_gemm) when the jobs form
    one (batched) product it takes, else the pool: a few 2-D products are cut into row or column blocks
    (whichever re-packs the smaller operand) for about _BLOCKS_PER_THREAD blocks per thread, many products
    are dealt out in runs of consecutive ones."""
    nt = threads.NUM_THREADS
    flops = 0.0
    for o, a, _ in jobs:
        flops += 2.0 * o.size * a.shape[-1]
    if nt > 1 and flops >= (_DRV_PAR_FLOPS if len(jobs) == 1 else _PAR_FLOPS):
        st = _stacked(jobs)
        if st is not None and _drv_gemm(st[0], st[1], st[2], nt):
            return
    with threads.serial_blas():
        if nt <= 1 or flops < _PAR_FLOPS:
            _run_jobs(jobs)
            return
        want = nt * _BLOCKS_PER_THREAD
        if len(jobs) >= want or any(o.ndim != 2 for o, _, _ in jobs):
            runs = [jobs[j0:j1] for j0, j1 in threads.split(len(jobs), want)]
        else:
            per = -(-want // len(jobs))
            runs = []
            for o, a, b in jobs:
                R, M = o.shape
                if M >= R:
                    nb = -(-M // _COL_ALIGN)
                    for c0, c1 in threads.split(nb, per):
                        c0, c1 = c0 * _COL_ALIGN, min(M, c1 * _COL_ALIGN)
                        runs.append([(o[:, c0:c1], a, b[:, c0:c1])])
                else:
                    runs += [[(o[r0:r1], a[r0:r1], b)] for r0, r1 in threads.split(R, per)]
        threads.run_parallel(_run_jobs, runs)


def _c(a: np.ndarray, dt=None) -> np.ndarray:
    """C-contiguous, float16 widened to float32 (or cast to ``dt``)."""
    if dt is None:
        dt = _F32 if a.dtype == _F16 else a.dtype
    return np.ascontiguousarray(a, dtype=dt)


def _par(fn, nplanes: int, work: int, threshold: int | None = None) -> None:
    """Run fn(p0, p1) over [0, nplanes), split across threads when the work is large."""
    if nplanes <= 0:
        return
    if threshold is None:
        threshold = threads.PARALLEL_THRESHOLD
    if work < threshold or threads.NUM_THREADS <= 1 or nplanes == 1:
        fn(0, nplanes)
        return
    threads.run_parallel(lambda c: fn(c[0], c[1]), threads.split(nplanes, threads.NUM_THREADS))


def _finish(out: np.ndarray, tmp: np.ndarray) -> None:
    if tmp is not out:
        np.copyto(out, tmp, casting="unsafe")


def _work_out(out: np.ndarray) -> np.ndarray:
    """Where a kernel writes: ``out`` itself, or a float32 temporary for float16."""
    if out.dtype == _F16 or not out.flags.c_contiguous:
        return np.empty(out.shape, _F32 if out.dtype == _F16 else out.dtype)
    return out


@njit(**_NOGIL)
def _range(off, sw, W, OW):
    """[lo, hi): the output columns ow with 0 <= ow*sw + off < W."""
    lo = 0 if off >= 0 else (-off + sw - 1) // sw
    hi = (W - off + sw - 1) // sw
    if hi > OW:
        hi = OW
    if lo > OW:
        lo = OW
    if hi < lo:
        hi = lo
    return lo, hi


# ---------------------------------------------------------------- im2col / col2im
@njit(**_NOGIL)
def _im2col(x, col, H, W, KH, KW, sh, sw, ph, pw, dh, dw, oh0, oh1, OW, p0, p1):
    """Columns for output rows [oh0, oh1) of planes [p0, p1): col[(p, ki, kj), (oh - oh0) * OW + ow]."""
    L = (oh1 - oh0) * OW
    for p in range(p0, p1):
        xb = p * H * W
        for ki in range(KH):
            for kj in range(KW):
                base = ((p * KH + ki) * KW + kj) * L
                off = kj * dw - pw
                lo, hi = _range(off, sw, W, OW)
                n = hi - lo
                for oh in range(oh0, oh1):
                    ih = oh * sh - ph + ki * dh
                    # 0-based loops over views (no slice assignments: ~1.5x faster on 7-28 wide rows)
                    cs = col[base + (oh - oh0) * OW:base + (oh - oh0 + 1) * OW]
                    if ih < 0 or ih >= H:
                        for j in range(OW):
                            cs[j] = 0
                        continue
                    for j in range(lo):
                        cs[j] = 0
                    for j in range(hi, OW):
                        cs[j] = 0
                    if n <= 0:
                        continue
                    xr = xb + ih * W + off + lo * sw
                    xs = x[xr:xr + (n - 1) * sw + 1]
                    cd = cs[lo:hi]
                    if sw == 1:
                        for j in range(n):
                            cd[j] = xs[j]
                    elif sw == 2:
                        for j in range(n):
                            cd[j] = xs[2 * j]
                    else:
                        for j in range(n):
                            cd[j] = xs[j * sw]


@njit(**_NOGIL)
def _col2im(col, x, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, p0, p1):
    L = OH * OW
    for p in range(p0, p1):
        xb = p * H * W
        for i in range(H * W):
            x[xb + i] = 0
        for ki in range(KH):
            for kj in range(KW):
                base = ((p * KH + ki) * KW + kj) * L
                off = kj * dw - pw
                lo, hi = _range(off, sw, W, OW)
                for oh in range(OH):
                    ih = oh * sh - ph + ki * dh
                    if ih < 0 or ih >= H:
                        continue
                    o = base + oh * OW
                    xr = xb + ih * W + off
                    n = hi - lo
                    if n <= 0:
                        continue
                    # 0-based loops over views: no negative-index checks, so LLVM vectorizes
                    cs = col[o + lo:o + hi]
                    if sw == 1:
                        xs = x[xr + lo:xr + hi]
                        for j in range(n):
                            xs[j] += cs[j]
                    else:
                        xs = x[xr + lo * sw:xr + (hi - 1) * sw + 1]
                        for j in range(n):
                            xs[j * sw] += cs[j]


@njit(**_NOGIL)
def _gather_cols(xp, col, off, HWp, Wp, KH, KW, dh, dw, L, p0, p1):
    """col[(p, ki, kj), t] = xp[p * HWp + ki*dh * Wp + kj*dw + off[t]] for planes [p0, p1) of the zero-padded
    input xp (off[t]: output t's top-left tap in its plane): one gather loop of L per (plane, tap)."""
    for p in range(p0, p1):
        for ki in range(KH):
            for kj in range(KW):
                d = ((p * KH + ki) * KW + kj) * L
                cs = col[d:d + L]
                xs = xp[p * HWp + ki * dh * Wp + kj * dw:]
                for t in range(L):
                    cs[t] = xs[off[t]]


# im2col's cost is per output row (~20 ns of loop and border handling per row of 7-14): on planes narrower
# than this the columns are gathered from the zero-padded input instead, one loop over the whole output
# plane per (channel, tap)
_GATHER_MAX_OW = 32
_offsets: dict = {}


def _im2col_gathered(x3, col, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, parallel=True) -> None:
    """col (P, KH*KW, OH*OW) flat of x3 (P, H, W) contiguous: the input zero-padded, then gathered."""
    P = x3.shape[0]
    Hp, Wp = (OH - 1) * sh + (KH - 1) * dh + 1, (OW - 1) * sw + (KW - 1) * dw + 1
    key = (OH, OW, sh, sw, Wp)
    off = _offsets.get(key)
    if off is None:
        off = _offsets[key] = ((np.arange(OH) * sh * Wp)[:, None] + np.arange(OW) * sw).reshape(-1)
    xp = _buffer(P * Hp * Wp, x3.dtype, "pad")
    L = OH * OW

    def go(p0, p1):
        _pad_planes(x3[p0:p1], xp[p0 * Hp * Wp:p1 * Hp * Wp].reshape(p1 - p0, Hp, Wp), ph, pw)
        _gather_cols(xp, col, off, Hp * Wp, Wp, KH, KW, dh, dw, L, p0, p1)
    _par(go, P, P * KH * KW * L if parallel else 0, _IM2COL_PAR)


def im2col(x: np.ndarray, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, oh0=0, oh1=None, col=None) -> np.ndarray:
    """x (P, H, W) contiguous -> columns (P, KH*KW, (oh1-oh0)*OW) for output rows [oh0, oh1)."""
    P, H, W = x.shape
    oh1 = OH if oh1 is None else oh1
    n = P * KH * KW * (oh1 - oh0) * OW
    col = np.empty(n, x.dtype) if col is None or col.size < n else col[:n]
    xf = x.reshape(-1)
    _par(lambda p0, p1: _im2col(xf, col, H, W, KH, KW, sh, sw, ph, pw, dh, dw, oh0, oh1, OW, p0, p1), P, n,
         _IM2COL_PAR)
    return col.reshape(P, KH * KW, (oh1 - oh0) * OW)


def col2im(col: np.ndarray, out: np.ndarray, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW) -> None:
    """columns (P, KH*KW, OH*OW) summed into out (P, H, W) (contiguous; overwritten)."""
    P, H, W = out.shape
    cf, of = col.reshape(-1), out.reshape(-1)
    _par(lambda p0, p1: _col2im(cf, of, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, p0, p1), P, col.size)


# ---------------------------------------------------------------- depthwise (direct)
@njit(**_NOGIL)
def _depthwise(x, w, b, out, C, O, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, has_bias, q0, q1):
    mult = O // C
    L = OH * OW
    KK = KH * KW
    for q in range(q0, q1):
        n = q // O
        o = q - n * O
        xb = (n * C + o // mult) * H * W
        ob = q * L
        bv = b[o] if has_bias else b[0]          # b: zeros(1) without a bias (0.0: float64 sums)
        for i in range(L):
            out[ob + i] = bv
        for ki in range(KH):
            for kj in range(KW):
                wv = w[o * KK + ki * KW + kj]
                off = kj * dw - pw
                lo, hi = _range(off, sw, W, OW)
                for oh in range(OH):
                    ih = oh * sh - ph + ki * dh
                    if ih < 0 or ih >= H:
                        continue
                    orow = ob + oh * OW
                    xr = xb + ih * W + off
                    n = hi - lo
                    if n <= 0:
                        continue
                    os_ = out[orow + lo:orow + hi]
                    if sw == 1:
                        xs = x[xr + lo:xr + hi]
                        for j in range(n):
                            os_[j] += wv * xs[j]
                    else:
                        xs = x[xr + lo * sw:xr + (hi - 1) * sw + 1]
                        for j in range(n):
                            os_[j] += wv * xs[j * sw]


# ---------------------------------------------------------------- conv kernels
@kernel("conv2d")
def conv2d_kernel(backend, outs, ins, attrs):
    conv2d_into(outs[0], ins, attrs)


def bind_kernel(outs, ins, attrs):
    """``f(outs, ins) -> bool``: conv2d_kernel for arrays of these layouts (a compiled graph's conv step; see
    :func:`bind_into`), or None."""
    g = bind_into(outs[0], ins, attrs) if len(outs) == 1 else None
    if g is None:
        return None
    f = lambda outs, ins: g(outs[0], ins, None, None)  # noqa: E731
    gc = getattr(g, "calls", None)
    if gc is not None:
        f.calls = lambda outs, ins: gc(outs[0], ins, None, None)
    return f


def bind_into(out, ins, attrs, b2=None, e=None, relu=False, pre=None):
    """``f(out, ins, b2, e) -> bool``: :func:`conv2d_into` for arrays of these layouts, where it would run the
    depthwise, packed 1x1 or direct kernel (the same order and rules: ``_depthwise_shape``, ``conv_direct.route``)
    on operands it takes as they are (float32, C-contiguous, a residual of out's shape): the dispatch decided once
    and the kernel's launch bound (``depthwise_native.runner``, ``conv1x1_packed.bind_into``, ``conv_direct.bind``).
    ``f`` returns False (nothing written; the caller runs conv2d_into) when a setting it depends on changed (thread
    count, NEE_CONV_DIRECT / Winograd / tile forcing, the paths' switches) or the weights are other than the bound
    ones.  None: another path (the GEMM, Winograd ones) or other operands: a compiled graph's step then calls
    conv2d_into.  ``pre`` (an input prologue, see conv2d_into): bound only on the packed 1x1 path, ``f`` then
    ``f(out, ins, b2, e, S)``."""
    general = conv_act.norm(relu) not in (False, True)
    if general and pre is not None:
        return None             # (another activation than relu: the depthwise and packed 1x1 kernels, _act_into)
    if pre is not None:
        x, w = ins[0], ins[1]
        if out.size == 0 or out.dtype != _F32 or not out.flags.c_contiguous or \
                conv_direct.route(x, w, out, attrs, True, True) != "pk1x1":
            return None
        return conv1x1_packed.bind_into(out, ins, attrs, b2, e, relu, pre)
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    if out.size == 0 or out.dtype != _F32 or not out.flags.c_contiguous:
        return None
    for a in (x, w, b, b2, e):
        if a is not None and (not isinstance(a, np.ndarray) or a.dtype != _F32 or not a.flags.c_contiguous):
            return None
    if e is not None and (e.shape != out.shape or np.may_share_memory(e, out)):
        return None
    G = attrs["groups"]
    O, Cg, KH, KW = w.shape
    sh, sw = attrs["stride"]
    pt, pb, pl, pr = attrs["padding"]
    dh, dw = attrs["dilation"]
    # conv2d_into's order: depthwise_native first, the live taps' products, then the path conv_direct.route picks
    if _depthwise_shape(x.shape[1], G, O, Cg, KH, KW):
        # b + b2 as its bias
        return None if e is not None else _bind_depthwise(x, w, b, b2, out, sh, sw, pt, pl, dh, dw, relu)
    if Cg == 0 or _live_taps_pay(x, w, G, attrs, out.shape[2], out.shape[3]):
        return None
    st0 = (conv_direct.MODE[0], conv_direct.FORCE[0], _WINO_FORCE[0])
    r = conv_direct.route(x, w, out, attrs, True)
    if r == "pk1x1":
        return conv1x1_packed.bind_into(out, ins, attrs, b2, e, relu)
    if (r != "direct" and general) or (r == "direct" and conv_act.heavy(relu)):
        return None
    if r != "direct":
        return _bind_winograd(x, w, b, b2, e, out, attrs, relu) if r is None else None
    g = conv_direct.bind(x, w, b, out, sh, sw, pt, pb, pl, pr, dh, dw, relu, b2, e)
    if g is None:
        return None
    has_b = b is not None
    cd = conv_direct

    def f(out, ins, b2, e) -> bool:
        if (cd.MODE[0], cd.FORCE[0], _WINO_FORCE[0]) != st0:
            return False
        return g(ins[0], ins[1], ins[2] if has_b else None, out, b2, e)

    def calls(out, ins, b2, e):
        if (cd.MODE[0], cd.FORCE[0], _WINO_FORCE[0]) != st0:
            return None
        return native_chain.calls_of(g, ins[0], ins[1], ins[2] if has_b else None, out, b2, e)
    f.calls = calls
    return f


@njit(**_NOGIL)
def _bias_act(r, bias, has_bias, e, has_e, relu, L, O, q0, q1):
    """Planes [q0, q1) of r (N*O planes of L, flat, in place): r + bias[channel] (+ e, same layout), then
    torch's relu (x < 0 -> 0; NaN, -0.0 kept) when ``relu``.  The relu is a select in the same loop as the sums
    (vectorized): a separate loop of conditional stores did not vectorize and cost 4-6x the sums (1 thread, bias +
    relu over ShuffleNet's 136 x 28 x 28, signs mixed: 78 -> 12 us; 272 x 14 x 14 42 -> 11; with a residual 81 -> 19
    us)."""
    for q in range(q0, q1):
        s = q * L
        rs = r[s:s + L]
        bv = bias[q % O] if has_bias else bias[0]       # bias: zeros(1) without one (keeps the dtype)
        if has_e:
            es = e[s:s + L]
            if relu:
                for i in range(L):
                    v = rs[i] + bv + es[i]
                    rs[i] = 0.0 if v < 0 else v
            else:
                for i in range(L):
                    rs[i] = rs[i] + bv + es[i]
        elif has_bias:
            if relu:
                for i in range(L):
                    v = rs[i] + bv
                    rs[i] = 0.0 if v < 0 else v
            else:
                for i in range(L):
                    rs[i] = rs[i] + bv
        elif relu:
            for i in range(L):
                v = rs[i]
                rs[i] = 0.0 if v < 0 else v


def _finish_epilogue(res, b, e, relu) -> None:
    """res (N, O, OH, OW) C-contiguous, in place: + b (O,) (or None) + e (res's shape, or None), then relu when
    ``relu``: one pass, split over the pool when large (_bias_act)."""
    if b is None and e is None and not relu:
        return
    N, O = res.shape[0], res.shape[1]
    L = res.size // max(1, N * O)
    rf = res.reshape(-1)
    bf = b if b is not None else _NO_BIAS[res.dtype]
    ef = np.ascontiguousarray(e).reshape(-1) if e is not None else rf
    from . import ir_small      # the same arithmetic as an IR kernel (no Numba on a session's path)
    _par_planes(ir_small.bias_act(rf, bf, b is not None, ef, e is not None, relu, L, O, _bias_act), N * O,
                0.3 * res.size)


def _depthwise_shape(C, G, O, Cg, KH, KW) -> bool:
    """One output channel per input channel, a kernel larger than 1x1: kernels/depthwise_native.py's convs."""
    return Cg == 1 and G == C and O == C and KH * KW > 1


def _bind_depthwise(x, w, b, b2, out, sh, sw, pt, pl, dh, dw, relu):
    """bind_into's depthwise case: depthwise_native's launch for these layouts with the bias conv2d_into would
    give it (b + b2; summed once when both are frozen and the bound arrays), or None."""
    run = depthwise_native.runner(x, w, out, sh, sw, pt, pl, dh, dw, relu)
    if run is None:
        return None
    st0 = depthwise_native.settings()
    has_b = b is not None
    b0, b20 = b, b2
    frozen = all(a is None or winograd.is_frozen(a) for a in (b, b2))
    summed = b if b2 is None else (b2 if b is None else (b + b2 if frozen else None))
    dn = depthwise_native

    def f(out, ins, b2, e) -> bool:
        if e is not None or dn.settings() != st0:
            return False
        b = ins[2] if has_b else None
        if summed is not None and b is b0 and b2 is b20:
            bias = summed
        else:
            bias = b if b2 is None else (b2 if b is None else b + b2)
        run(ins[0], ins[1], bias, out)
        return True

    def calls(out, ins, b2, e):
        # (native_chain) where the bias is one the replay can hold: none, the bound one, or the frozen sum
        rc = getattr(run, "calls", None)
        b = ins[2] if has_b else None
        if rc is None or e is not None or dn.settings() != st0 or b is not b0 or b2 is not b20 or \
                (summed is None and b is not None and b2 is not None):
            return None
        return rc(ins[0], ins[1], summed, out)
    f.calls = calls
    return f


def apply_prologue(x: np.ndarray, pre) -> np.ndarray:
    """A new array: ``pre`` = (steps, S) on x (N, C, H, W): each "mul" / "add" with its row of S per channel,
    "relu" (x < 0 -> 0), in order, in x's dtype (conv1x1_packed's packing prologue, here for the other paths)."""
    steps, S = pre
    C = x.shape[1]
    y = np.array(x, dtype=x.dtype, order="C", copy=True)
    q = 0
    for st in steps:
        if st == "relu":
            np.copyto(y, 0, where=y < 0)
            continue
        v = np.asarray(S[q], dtype=y.dtype).reshape(1, C, 1, 1)
        q += 1
        if st == "mul":
            np.multiply(y, v, out=y)
        elif st == "add":
            np.add(y, v, out=y)
        else:
            raise ValueError(f"conv2d prologue: unknown step {st!r}")
    return y


# Strided unpadded 1x1 convs (ResNet's downsamples) of float32 that the packed 1x1 path does not take strided (its
# fused variant only: conv1x1_packed._fused_for): the subsampled input copied once into a scratch, then the stride-1
# conv through the same dispatch (packed / direct kernels, which take stride-1 1x1s; the GEMM below subsampled the
# same way but ran OpenBLAS).  Measured on AMD Zen 5 (2 threads, conv2d_into + bias + relu, in-process, min of 7
# rounds, /tmp/lead20/paths.py), us before (OpenBLAS, Haswell kernels) -> after (the direct kernel): 256 -> 512
# from 56x56 /2 1004 -> 560, 512 -> 1024 from 28x28 /2 944 -> 517, 1024 -> 2048 from 14x14 /2 1086 -> 613.
# Where the direct kernel takes the subsampled conv (conv_direct.route rules a strided unpadded 1x1 on it), the kernel
# runs the strided conv itself, its fill subsampling into its phase plane on the threads (the same sums: the same
# bits), and a compiled graph binds and chains it; the copy was ~150 us on the calling thread (session 22, 2 threads,
# bound, us copy + conv / direct: 256 -> 512 from 56x56 776 / 685, 512 -> 1024 from 28x28 740 / 676, 1024 -> 2048
# from 14x14 808 / 754).  NEE_CONV_SUB1X1=0: the GEMM path as before.
_SUB1X1 = [os.environ.get("NEE_CONV_SUB1X1", "1") not in ("0", "")]


def _strided_1x1(out, ins, attrs, b2, e, relu, pre) -> bool:
    w = ins[1]
    sh, sw = attrs["stride"]
    if (sh, sw) == (1, 1) or not _SUB1X1[0] or w.ndim != 4 or w.shape[2:] != (1, 1) or any(attrs["padding"]) or \
            out.dtype != _F32 or ins[0].dtype != _F32 or conv1x1_packed._fused_for(out.shape, (sh, sw)):
        return False
    x = ins[0]
    if pre is None and conv_direct.route(x, w, out, attrs, True) == "direct":
        return False            # (the direct kernel subsamples as it fills: conv2d_into's try_conv2d takes it)
    OH, OW = out.shape[2], out.shape[3]
    xs = x[:, :, :(OH - 1) * sh + 1:sh, :(OW - 1) * sw + 1:sw]
    xb = _buffer(xs.size, _F32, "sub1x1").reshape(xs.shape)
    np.copyto(xb, xs)
    conv2d_into(out, [xb] + list(ins[1:]), dict(attrs, stride=(1, 1)), b2, e, relu, pre)
    return True


def _summed_bias(ins, b2, dt):
    """The conv's bias ``ins[2]`` (or None) plus a second per-channel bias ``b2`` (or None), in dtype ``dt``."""
    b = _c(ins[2], dt) if len(ins) > 2 else None
    if b2 is not None:
        b2 = _c(b2, dt).reshape(-1)
        b = b2 if b is None else b + b2
    return b


def _act_into(out, ins, attrs, b2, e, act, pre) -> bool:
    """conv2d_into with an activation other than relu (kernels/conv_act.py steps), applied where the conv's
    output is written: by the depthwise and direct kernels in their stores, by the packed 1x1 kernel's per-task
    epilogue (_epi_kernel, on the task's block while it is in cache).  False (nothing written) for the GEMM and
    Winograd paths and operands the kernels decline; no input prologue, no residual on the depthwise path."""
    if pre is not None:
        return False
    x = _c(ins[0])
    w = _c(ins[1], x.dtype)
    if x.ndim != 4 or w.ndim != 4:
        return False
    G = attrs["groups"]
    if _depthwise_shape(x.shape[1], G, w.shape[0], w.shape[1], w.shape[2], w.shape[3]):
        if e is not None:
            return False
        b = _summed_bias(ins, b2, x.dtype)
        res = _work_out(out)
        sh, sw = attrs["stride"]
        pt, _, pl, _ = attrs["padding"]
        dh, dw = attrs["dilation"]
        if not depthwise_native.conv2d(x, w, b, res, sh, sw, pt, pl, dh, dw, act):
            return False
        _finish(out, res)
        return True
    b = _c(ins[2], x.dtype) if len(ins) > 2 else None
    if out.dtype != _F32 or not out.flags.c_contiguous or x.dtype != _F32 or w.dtype != _F32 or \
            (b is not None and b.dtype != _F32) or (e is not None and e.dtype != _F32):
        return False
    if b2 is not None:
        b2 = _c(b2, x.dtype).reshape(-1)
    route = conv_direct.route(x, w, out, attrs, w is ins[1])
    if route not in ("pk1x1", "direct") or (route == "direct" and conv_act.heavy(act)):
        return False        # (the direct kernels take no heavy activation: see conv_act.heavy)
    try:
        return conv_direct.try_conv2d(x, w, b, out, attrs, w is ins[1], act, b2,
                                      None if e is None else np.ascontiguousarray(e))
    except ValueError:          # (operands conv_direct's checks refuse: the generic run)
        return False


def conv2d_into(out, ins, attrs, b2=None, e=None, relu=False, pre=None):
    """out = conv2d(ins) (+ b2, a second per-output-channel bias (O,)) (+ e, out's shape), through torch's
    relu when ``relu`` (kernels/conv_epilogue.py: a JIT epilogue chain run inside the conv).  b2 is summed
    into the conv's own bias; relu (and e) go where the path writes its output, else one in-place pass.
    ``relu`` may be another activation's steps (kernels/conv_act.py): run by the depthwise, direct and packed 1x1
    kernels (a heavy one: not the direct kernels); then the result is False (nothing written) where they do not
    take the conv (:func:`_act_into`).
    ``pre`` = (steps, S): an input prologue (kernels/conv_epilogue.py's conv_prologue): the conv of
    :func:`apply_prologue` (x, pre), applied as the packed 1x1 kernel packs x where that path runs, else first."""
    if out.size == 0:
        return
    if conv_act.norm(relu) not in (False, True):
        return _act_into(out, ins, attrs, b2, e, relu, pre)
    if _strided_1x1(out, ins, attrs, b2, e, relu, pre):
        return
    if pre is not None:
        x = _c(ins[0])
        if not _prologue_packed(out, x, ins, attrs, b2, e, relu, pre):
            conv2d_into(out, [apply_prologue(x, pre)] + list(ins[1:]), attrs, b2, e, relu)
        return
    x = _c(ins[0])
    w = _c(ins[1], x.dtype)
    b = _summed_bias(ins, b2, x.dtype)
    b2 = None
    if e is not None and e.dtype != x.dtype:
        e = e.astype(x.dtype)
    # relu is done in the path (act[0] cleared) or in the last pass; the residual always goes before it
    act = [relu and e is None]
    res = _work_out(out)
    sh, sw = attrs["stride"]
    pt, pb, pl, pr = attrs["padding"]
    dh, dw = attrs["dilation"]
    G = attrs["groups"]
    N, C, H, W = x.shape
    O, Cg, KH, KW = w.shape
    OH, OW = out.shape[2], out.shape[3]
    Og = O // G
    L = OH * OW
    if _depthwise_shape(C, G, O, Cg, KH, KW) and depthwise_native.conv2d(
            x, w, b, res, sh, sw, pt, pl, dh, dw, act[0]):
        # depthwise, float32 / float64: the LLVM kernels on the native workers (kernels/depthwise_native.py)
        _finish_epilogue(res, None, e, relu and not act[0])
        _finish(out, res)
        return
    if _live_taps_pay(x, w, G, attrs, OH, OW) and _conv_live_taps(x, w, res, G, attrs, OH, OW):
        _finish_epilogue(res, b, e, relu)
        _finish(out, res)
        return
    # the residual goes into the direct kernel's stores where it can be read in place
    ed = e if (e is not None and e.flags.c_contiguous and e.shape == res.shape and e.dtype == res.dtype
               and not np.may_share_memory(e, res)) else None
    if Cg and conv_direct.try_conv2d(x, w, b, res, attrs, w is ins[1], relu if ed is not None else act[0], e=ed):
        # float32 where the cost rule (or NEE_CONV_DIRECT=1) picks the direct kernel (kernels/conv_direct.py)
        if ed is None:
            _finish_epilogue(res, None, e, relu and not act[0])
        _finish(out, res)
        return
    wu = _winograd_u(x, w, G, attrs, OH, OW, w is ins[1]) if Cg else None
    if Cg == 0:
        res[...] = 0
    elif KH == 1 and KW == 1 and pt == pb == pl == pr == 0:
        # 1x1 convolution: one GEMM per (image, group) on the NCHW buffers, no im2col; strided, on the
        # subsampled input (numpy's strided copy: faster than the im2col kernel's rows of OW)
        if sh != 1 or sw != 1:
            xs = x[:, :, :(OH - 1) * sh + 1:sh, :(OW - 1) * sw + 1:sw]
            x = _buffer(xs.size, x.dtype).reshape(xs.shape)
            np.copyto(x, xs)
        wg, xg, og = w.reshape(G, Og, Cg), x.reshape(N, G, Cg, L), res.reshape(N, G, Og, L)
        if ((b is not None or e is not None or relu) and G == 1
                and 2.0 * res.size * Cg >= _DRV_PAR_FLOPS and _gemm_epilogue(
                    [(og[n, g], wg[g], xg[n, g]) for n in range(N) for g in range(G)], res, b,
                    None if e is None else np.ascontiguousarray(e), relu, G, Og)):
            # the bias, residual and relu in gemm_driver's blocks (_gemm_epilogue).  Not grouped: the driver's
            # batch of small group GEMMs ran slower than numpy's loop of them + the pass (ShuffleNet's 272 -> 272 in
            # 4 groups on 14x14, bias + relu, 1 thread: 184 vs 148 us; 544 -> 544 on 7x7 184 vs 140)
            _finish(out, res)
            return
        if N == 1 and G > 1 and (threads.NUM_THREADS <= 1 or 2.0 * res.size * Cg < _PAR_FLOPS):
            # on the calling thread (as _gemms would): one batched matmul, numpy's loop over the groups inside
            # (the same BLAS products, bit for bit; ~1 us less Python a group: ShuffleNet's 4 groups of 68 on
            # 14x14 65.6 vs 70.0 us)
            with threads.serial_blas():
                np.matmul(wg, xg[0], out=og[0])
        elif N == 1 or G == 1:
            _gemms([(og[n, g], wg[g], xg[n, g]) for n in range(N) for g in range(G)])
        else:
            _gemms([(og[n], wg, xg[n]) for n in range(N)])          # (G, Og, L) batches
    elif Cg == 1 and G == C and KH * KW > 1:
        # depthwise: one fused pass per input plane (padded and phase-split in a per-thread buffer, all taps
        # in one loop, _depthwise_padded); the direct row loop where padded-width rows waste too much
        wf = w.reshape(-1)
        bf = b if b is not None else np.zeros(1, x.dtype)
        of = res.reshape(-1)
        if Og * (_wide_geometry(OH, OW, KH, KW, sh, sw, dh, dw)[1] - OW) <= _DEPTHWISE_MAX_EXTRA * OW:
            _depthwise_padded(x, wf, bf, b is not None, of, (KH, KW, sh, sw, pt, pl, dh, dw, OH, OW))
        else:
            xf = x.reshape(-1)
            _par(lambda q0, q1: _depthwise(xf, wf, bf, of, C, O, H, W, KH, KW, sh, sw, pt, pl, dh, dw, OH, OW,
                                           b is not None, q0, q1), N * O, res.size * KH * KW)
        _finish_epilogue(res, None, e, relu)
        _finish(out, res)
        return
    elif wu is not None and _conv_winograd(x, wu[1], b, res, wu[0], pt, pl, act[0]):
        # 3x3 stride 1 where the cost rule picks Winograd F(m x m, 3 x 3) (kernels/winograd.py); an inf / NaN
        # input (found by its input transform) goes on to the GEMM paths below (torch's locality: only the outputs
        # whose window holds it), as do non-finite weights (_winograd_u: None)
        _finish_epilogue(res, None, e, relu and not act[0])
        _finish(out, res)
        return
    elif _wide_pays(OH, OW, KH, KW, sh, sw, dh, dw, Og, Cg * KH * KW):
        # im2col of the zero-padded input (its phase planes at stride > 1) by whole-row copies, GEMM over
        # padded-width rows, the extra columns dropped (and the bias added) as each tile is compacted
        K = Cg * KH * KW
        _conv_wide(x, w.reshape(G, Og, K), b, res, G, Og, K, (KH, KW, sh, sw, pt, pl, dh, dw, OH, OW),
                   relu=act[0])
        _finish_epilogue(res, None, e, relu and not act[0])
        _finish(out, res)
        return
    else:
        # asymmetric pads ('same' with an even kernel): the top/left pad and the output size say it all
        K = Cg * KH * KW
        _conv_tiles(x, w.reshape(G, Og, K), res, G, Og, K, (KH, KW, sh, sw, pt, pl, dh, dw, OH, OW))
    # the GEMM paths: bias, residual and relu in one pass
    _finish_epilogue(res, b, e, relu)
    _finish(out, res)


# ---------------------------------------------------------------- live taps: one product per kernel tap
# A dilated conv on a small map (DeepLabV3's ASPP: 3x3 at dilation 12 / 24 / 36 over a 14 x 14 or 28 x 28 feature
# map) reads the zero padding for most of its (output, tap) pairs: the im2col GEMM and the direct kernels multiply
# all of them.  When the live pairs are at most LIVE_TAPS_MAX of all, each tap is one product over the box of
# outputs whose input it reads, out[:, box] += W[:, :, ki, kj] @ x[:, its input box], with the rest untouched:
# DeepLabV3-MobileNetV3's 960 -> 256 3x3 at dilation 12 on 14 x 14 (18% of its pairs live), 2 threads, 2.4-2.6 ->
# 1.4-1.9 ms: the products of the few-row boxes stream their tap's weights (1 MB each) at well under the memory's
# speed.  (Taps no output reads at all are dropped from the graph first: jit/passes.py trim_dead_conv_taps.)
# Float32 / float64 convs of at least 8 input channels a group with finite weights, where the products skipped
# come to LIVE_TAPS_MIN_SAVED flops (fewer: the per-tap calls cost more than they save); NEE_CONV_LIVE_TAPS=0: never.
LIVE_TAPS = [os.environ.get("NEE_CONV_LIVE_TAPS", "1") not in ("0", "")]
LIVE_TAPS_MAX = 0.5
LIVE_TAPS_MIN_SAVED = 5e7


def _live_boxes(H, W, OH, OW, KH, KW, sh, sw, pt, pl, dh, dw) -> list:
    """[(ki, kj, oh0, oh1, ow0, ow1)]: per kernel tap, the box of outputs whose input position is inside the
    (H, W) input (taps with an empty box left out)."""
    def span(n_in, n_out, s, p0, off):
        lo = max(0, -(-(p0 - off) // s))
        hi = min(n_out, (n_in - 1 + p0 - off) // s + 1)
        return lo, hi
    boxes = []
    for ki in range(KH):
        r0, r1 = span(H, OH, sh, pt, ki * dh)
        if r0 >= r1:
            continue
        for kj in range(KW):
            c0, c1 = span(W, OW, sw, pl, kj * dw)
            if c0 < c1:
                boxes.append((ki, kj, r0, r1, c0, c1))
    return boxes


def _live_taps_pay(x, w, G, attrs, OH, OW) -> bool:
    """Whether :func:`_conv_live_taps` takes this conv (at most LIVE_TAPS_MAX of its (output, tap) pairs live;
    remembered per geometry: conv2d_into asks on every call)."""
    O, Cg, KH, KW = w.shape
    if not LIVE_TAPS[0] or KH * KW < 2 or Cg < 8 or x.dtype not in (_F32, np.float64) or w.dtype != x.dtype or \
            x.ndim != 4 or OH * OW == 0:
        return False
    pad = attrs["padding"]
    if not any(pad):
        return False
    key = (x.shape, w.shape, attrs["stride"], pad, attrs["dilation"], OH, OW, LIVE_TAPS_MAX, LIVE_TAPS_MIN_SAVED)
    r = _live_rule.get(key)
    if r is None:
        (sh, sw), (dh, dw) = attrs["stride"], attrs["dilation"]
        boxes = _live_boxes(x.shape[2], x.shape[3], OH, OW, KH, KW, sh, sw, pad[0], pad[2], dh, dw)
        live = sum((r1 - r0) * (c1 - c0) for _, _, r0, r1, c0, c1 in boxes)
        full = KH * KW * OH * OW
        r = live <= LIVE_TAPS_MAX * full and 2.0 * x.shape[0] * O * Cg * (full - live) >= LIVE_TAPS_MIN_SAVED
        if len(_live_rule) > 4096:
            _live_rule.clear()
        _live_rule[key] = r
    return r


_live_rule: dict = {}


def _tap_weights(w, G):
    """w (O, Cg, KH, KW) of G groups -> (KH, KW, G, Cg, O / G) C-contiguous, each tap's group block frozen (ours,
    replaced with w's contents: the packed product kernels then keep their panels of it, linalg.matmul_into); an
    empty array when w is not all finite (a dropped padding product, 0 * inf, would have been NaN)."""
    if not np.isfinite(w).all():
        return np.empty(0, w.dtype)
    O, Cg, KH, KW = w.shape
    t = np.ascontiguousarray(w.reshape(G, O // G, Cg, KH, KW).transpose(3, 4, 0, 2, 1))
    for blk in t.reshape(KH * KW * G, Cg, O // G):
        winograd.freeze(blk)
    return t


def _conv_live_taps(x, w, res, G, attrs, OH, OW) -> bool:
    """res (N, O, OH, OW) = the conv without its bias, one product per live tap and group over its box of outputs
    (see LIVE_TAPS), channels last: out (box, O/G) = x (box, Cg) @ w_tap (Cg, O/G); False (nothing written) for
    weights that are not all finite."""
    from . import linalg
    wt = winograd.weights(w, ("live_taps", G), lambda a, m: _tap_weights(a, m[1])) if w.flags.c_contiguous else None
    if wt is None:
        wt = _tap_weights(w, G)
    if wt.size == 0:
        return False
    N, C, H, W = x.shape
    O, Cg, KH, KW = w.shape
    Og = O // G
    sh, sw = attrs["stride"]
    pt, pb, pl, pr = attrs["padding"]
    dh, dw = attrs["dilation"]
    boxes = _live_boxes(H, W, OH, OW, KH, KW, sh, sw, pt, pl, dh, dw)
    boxes.sort(key=lambda b: (b[2] != 0 or b[3] != OH or b[4] != 0 or b[5] != OW))   # a whole-output box first
    xt = _buffer(H * W * C, x.dtype, "taps_xt").reshape(H, W, C)       # the image channels last
    acc = _buffer(OH * OW * O, x.dtype, "taps_acc").reshape(OH, OW, G, Og)
    for n in range(N):
        np.copyto(xt, x[n].transpose(1, 2, 0))
        first = True
        for ki, kj, r0, r1, c0, c1 in boxes:
            h, wd = r1 - r0, c1 - c0
            i0, j0 = r0 * sh - pt + ki * dh, c0 * sw - pl + kj * dw
            src = xt[i0:i0 + (h - 1) * sh + 1:sh, j0:j0 + (wd - 1) * sw + 1:sw]
            if src.flags.c_contiguous:
                a = src.reshape(h * wd, G, Cg)
            else:
                a = _buffer(h * wd * C, x.dtype, "taps_x").reshape(h, wd, C)
                np.copyto(a, src)
                a = a.reshape(h * wd, G, Cg)
            whole = first and h == OH and wd == OW
            if not whole and first:
                acc[...] = 0
            first = False
            dst = acc.reshape(OH * OW, G, Og) if whole else \
                _buffer(h * wd * O, x.dtype, "taps_out").reshape(h * wd, G, Og)
            for g in range(G):
                linalg.matmul_into(dst[:, g], a[:, g], wt[ki, kj, g])
            if not whole:
                box = acc[r0:r1, c0:c1]
                np.add(box, dst.reshape(h, wd, G, Og), out=box)
        np.copyto(res[n], acc.reshape(OH, OW, O).transpose(2, 0, 1))
    return True


def _prologue_packed(out, x, ins, attrs, b2, e, relu, pre) -> bool:
    """conv2d_into with an input prologue on the packed 1x1 kernel (where conv_direct.route picks it for these
    shapes and the kernel takes the operands), the epilogue as try_conv2d gives it; False: nothing written."""
    w = _c(ins[1], x.dtype)
    if x.dtype != _F32 or not out.flags.c_contiguous or out.dtype != _F32 or \
            conv_direct.route(x, w, out, attrs, w is ins[1], True) != "pk1x1":
        return False
    b = _summed_bias(ins, b2, x.dtype)
    if e is not None and (e.dtype != _F32 or not e.flags.c_contiguous or e.shape != out.shape or
                          np.may_share_memory(e, out)):
        return False
    return conv1x1_packed.conv2d(x, w, b, out, attrs["groups"], relu, None, e, stride=attrs["stride"], pre=pre)


def _conv_tiles(x, wg, res, G, Og, K, geo):
    """im2col + GEMM per tile: a group of whole images (small images) or a band of output rows of one
    image (large images), sized so the columns stay in cache.  With at least as many tiles as threads,
    the threads claim whole tiles (own column buffer, BLAS on the calling thread, one join at the end);
    with fewer, each tile's im2col is split over planes and its GEMM over row/column blocks (_gemms)."""
    KH, KW, sh, sw, pt, pl, dh, dw, OH, OW = geo
    N, C, H, W = x.shape
    L = OH * OW
    row = C * KH * KW * OW               # column elements per output row of one image
    nt = threads.NUM_THREADS
    if row * OH <= _TILE:
        nb = max(1, _TILE // (row * OH))
        if nt > 1:
            nb = max(1, min(nb, -(-N // nt)))
        tiles = [(n, min(N, n + nb), 0, OH) for n in range(0, N, nb)]
    else:
        bands = -(-(OH * row) // _TILE)          # bands of rows per image
        if nt > 1 and N < nt:
            bands = -(-bands // nt) * nt          # a whole number of bands per thread (balance)
        rows = max(1, -(-OH // bands))
        tiles = [(n, n + 1, r0, min(OH, r0 + rows)) for n in range(N) for r0 in range(0, OH, rows)]
    xf = x.reshape(-1)
    plane = H * W
    whole = nt > 1 and len(tiles) >= nt

    def gemm_jobs(n0, n1, r0, r1, col):
        lt = (r1 - r0) * OW
        if n1 - n0 == 1:
            o = res[n0].reshape(G, Og, L)
            return [(o[g, :, r0 * OW:r1 * OW], wg[g], col.reshape(G, K, lt)[g]) for g in range(G)]
        o = res[n0:n1].reshape(n1 - n0, G, Og, L)
        cg = col.reshape(n1 - n0, G, K, lt)
        if G == 1:
            return [(o[i, 0], wg[0], cg[i, 0]) for i in range(n1 - n0)]
        return [(o[i], wg, cg[i]) for i in range(n1 - n0)]                 # (G, Og, L) batches

    gather = OW <= _GATHER_MAX_OW and all(r0 == 0 and r1 == OH for _, _, r0, r1 in tiles)

    def tile(t):
        n0, n1, r0, r1 = tiles[t[0]]
        col = _buffer((n1 - n0) * C * KH * KW * (r1 - r0) * OW, x.dtype)
        if gather:
            _im2col_gathered(x[n0:n1].reshape(-1, H, W), col, KH, KW, sh, sw, pt, pl, dh, dw, OH, OW, False)
        else:
            _im2col(xf[n0 * C * plane:n1 * C * plane], col, H, W, KH, KW, sh, sw, pt, pl, dh, dw, r0, r1, OW,
                    0, (n1 - n0) * C)
        _run_jobs(gemm_jobs(n0, n1, r0, r1, col))

    if whole:
        with threads.serial_blas():
            threads.run_parallel(tile, [(i, i + 1) for i in range(len(tiles))])
        return
    for n0, n1, r0, r1 in tiles:
        if gather:
            col = _buffer((n1 - n0) * C * KH * KW * L, x.dtype)
            _im2col_gathered(x[n0:n1].reshape(-1, H, W), col, KH, KW, sh, sw, pt, pl, dh, dw, OH, OW)
        else:
            col = im2col(x[n0:n1].reshape(-1, H, W), KH, KW, sh, sw, pt, pl, dh, dw, OH, OW, r0, r1,
                         col=_buffer((n1 - n0) * C * KH * KW * (r1 - r0) * OW, x.dtype))
        _gemms(gemm_jobs(n0, n1, r0, r1, col.reshape(-1)))


# ---------------------------------------------------------------- Winograd (kernels/winograd.py)
_WINO_FORCE = [os.environ.get("NEE_CONV_WINOGRAD", "")]     # "" (cost rule), "0" (off), "2" / "4" (forced)


def _winograd_u(x, w, G, attrs, OH, OW, kept=True):
    """(m, U: the transformed weights) when this convolution takes the Winograd path, else None (also for weights
    whose U is not finite: winograd.weights).  ``kept``:
    w is the caller's array, not a copy made for this call (a copy, e.g. float16 weights widened, would be
    transformed again on every call: the GEMM paths then, unless NEE_CONV_WINOGRAD forces a tile size)."""
    N, C, H, W = x.shape
    O, _, KH, KW = w.shape
    sh, sw = attrs["stride"]
    dh, dw = attrs["dilation"]
    m = _winograd_m(N, C, H, W, O, G, KH, KW, sh, sw, dh, dw, OH, OW, x.dtype)
    if not m or not (kept or _WINO_FORCE[0] in ("2", "4")):
        return None
    U = winograd.weights(w, m)
    return None if U is None else (m, U)


def _winograd_m(N, C, H, W, O, G, KH, KW, sh, sw, dh, dw, OH, OW, dt) -> int:
    """The Winograd tile size (2 or 4) for this convolution, or 0 (the GEMM paths)."""
    if KH != 3 or KW != 3 or sh != 1 or sw != 1 or dh != 1 or dw != 1 or G != 1 or dt not in _NO_BIAS:
        return 0
    f = _WINO_FORCE[0]
    if f in ("2", "4"):
        return int(f)
    if f == "0":
        return 0
    return _winograd_rule(N, C, O, OH, OW, dt.itemsize,
                          dt == np.float32 and conv_direct.available() and conv_direct.MODE[0] != "0"
                          and (threads.NUM_THREADS == 1 or _direct_term_mt()))


# NEE_CONV_WINO_DIRECT_MT: "" (by ISA: on AVX2 hosts), "1" (always), "0" (never): the rule weighs Winograd against
# the direct kernel (no im2col term) on 2+ threads too.  On the AVX2 Zen 3 box the 3x3s this moves to the direct
# kernel (Inception v2's 128 -> 128 / 160 / 192 and 160 / 192 -> 192 on 14x14, SqueezeNet's 32 -> 128 on 27x27)
# gained nothing from the second thread on Winograd's path in the model (Inception v2, 2 threads in-model vs 1
# thread direct, ms: 128 -> 160 0.98 vs 0.95, 128 -> 128 0.79 vs 0.78, 160 -> 160 1.09 vs 1.16): F(4)'s
# transformed weights, 4x the weights' bytes, come from memory at every run, which the second core does not
# speed up.  In the models, 2 threads, each conv's min of 15 runs, F(4) -> direct (ms): 128 -> 128 0.95 -> 0.53,
# 128 -> 160 1.17 -> 0.64, 160 -> 160 1.12 -> 0.76, 128 -> 192 1.18 -> 0.68, 192 -> 192 1.59 -> 1.01, SqueezeNet's
# 32 -> 128 0.83-1.05 -> 0.62-0.75; Inception v2 whole, fresh processes alternated, min 45.6 / 51.0 / 46.4 ->
# 42.9 / 42.8 / 44.0 ms (the box loaded: 5-8).  Warm in isolation (weights in cache) F(4) can still come out
# ahead.  AVX-512 hosts kept the one-thread-only rule (measured on Zen 4 warm, in isolation: F(4) ahead) until an
# AMD Zen 5 (AVX-512, 2 vCPUs) showed the same as the AVX2 box in the models: 2 threads, ONNX sessions in fresh
# processes alternating (bench/onnx_vs_ort.py --alone, two rounds each), one-thread rule / direct term on 2 threads
# too: Inception v2 14.7 / 13.9 -> 11.9 / 13.1 ms, SqueezeNet 2.36 / 2.26 -> 2.08 / 2.14, ResNet-50 26.8 / 27.4 ->
# 29.4 / 23.8, VGG-19 92.9 / 90.2 -> 91.3 / 97.6, DenseNet-121 21.2 / 20.4 -> 20.6 / 18.7 (onnxruntime's ratios
# 1.49 / 1.50 -> 1.25 / 1.31, 1.36 / 1.34 -> 1.25 / 1.23); warm in isolation the direct kernel already won there on
# 256 -> 256 at 14x14 (533 vs F(4) 619 us, /tmp/lead20/paths3.py).  So now every host weighs the direct term.
_WINO_DIRECT_MT = os.environ.get("NEE_CONV_WINO_DIRECT_MT", "")


def _direct_term_mt() -> bool:
    if _WINO_DIRECT_MT in ("0", "1"):
        return _WINO_DIRECT_MT == "1"
    return True


# The cost rule: single-thread time estimates (both paths split over threads alike): the GEMMs' multiply-adds
# at a rate per path, the weights read from memory (a model's weights do not stay in cache from one run to
# the next: the Winograd path reads U, alpha^2/9 times the weights, plus the weights and their cached copy
# for the staleness check), im2col per column element, the Winograd tile transforms per transformed element;
# Winograd only where estimated at least _WINO_MARGIN of the direct time.  The constants were fitted to the
# 120 3x3 stride-1 convs of the nine ONNX light models, each timed in its model (1 thread, CPU time, min of
# 3 runs) direct / F(2) / F(4): the rule's picks sum to 130.9 ms against 127.7 for the best pick of every
# conv, 177.9 all direct.  E.g. (us) 64->192 on 56x56 8055 / 5580 / 3632, 192->256 on 14x14 2131 / 1767 /
# 1879, 512->512 on 12x12 9133 / 7231 / 6176, 192->320 on 7x7 881 / 1216 / 1788.
_GEMM_FLOPS = 100e9          # direct (im2col / padded-rows) GEMMs
_WINO_FLOPS = 80e9           # the alpha^2 Winograd GEMMs (fewer columns)
_MEM_BW = 15e9
_IM2COL_NS = 0.3e-9
_WINO_TR_NS = 1.2e-9
_WINO_MARGIN = 0.95
# ``direct``: the other path is conv_direct's kernel (float32, AVX-512F or AVX2 + FMA, NEE_CONV_DIRECT not 0: it
# takes every 3x3 this rule leaves),
# which has no column matrix: no im2col term.  Measured in the models (1 thread, thread CPU time of each conv in
# its model, min of 8 runs, Winograd vs NEE_CONV_WINOGRAD=0, us): with the term the rule took F(4) for 128->128
# on 14x14 783 vs 592 direct, 128->160 822 vs 726, 160->160 1021 vs 902, 128->192 928 vs 904, 160->192 1191 vs
# 1091 (Inception v2), 32->128 on 27x27 568 vs 518 (SqueezeNet); without it these go direct and F(4) stays
# where it won: 64->192 on 56x56 4519 vs 6728, 96->96 on 28x28 963 vs 1241, 192->256 on 14x14 1693 vs 1758,
# 64->64 on 56x56 1847 vs 2292, 128->128 on 28x28 1589 vs 2311, 256->256 on 14x14 2138 vs 2270 (ResNet-50).
# Whole models, 1 thread, CPU time, fresh processes alternated: Inception v2 0.95x, SqueezeNet 0.93x.  One
# thread only: on two, F(4) on the native workers (_wino_native) beat the direct kernel on these shapes
# (warm, min of 40: 128->128 on 14x14 402 vs 567 us, 160->160 585 vs 790, 32->128 on 27x27 442 vs 540) and
# the machine was too loaded for in-model two-thread figures: the rule there is left as it was.


# The direct kernel's rate against the rule's fit (AVX2 box) where it runs 16 lanes: on an AMD Zen 5 (AVX-512, 2
# threads, warm, in-process alternating, min of 7 rounds, /tmp/lead20/paths3s.py, us F(2) / F(4) / direct) it won
# the 14x14 and smaller planes the fit gave Winograd (256 -> 256 on 14x14 638 / 619 / 533, 192 -> 256 465 / 445 /
# 393, ZFNet's 512 -> 512 on 12x12 1944 / 2570 / 1476) and tied F(4) on 64 -> 64 at 56x56 (624 / 537 / 522) and 96 ->
# 96 at 28x28 (356 / 304 / 302), F(4) ahead on 128 -> 128 at 28x28 (608 / 477 / 536) and 64 -> 192 at 56x56 (1670 /
# 1245 / 1495): a 1.2x rate gives those picks (1.0: F(2) on the 14x14s; 1.4: direct on 96 -> 96 at 28x28 too)
_DIRECT16_RATE = 1.2


def _winograd_rule(N, C, O, OH, OW, isz=4, direct=False) -> int:
    L = N * OH * OW
    w = O * C
    rate = _GEMM_FLOPS * (_DIRECT16_RATE if direct and conv_direct.VEC == 16 else 1.0)
    best = 2.0 * w * 9 * L / rate + 9 * w * isz / _MEM_BW + (0.0 if direct else C * 9 * L * _IM2COL_NS)
    pick = 0
    ts = {}
    for m in (2, 4):
        a2 = (m + 2) * (m + 2)
        nt = N * -(-OH // m) * -(-OW // m)
        gemm = 2.0 * a2 * w * nt / _wino_rate(direct, a2 * max(C, O) * nt * isz)
        t = gemm + (a2 + 18) * w * isz / _MEM_BW + a2 * (C + O) * nt * _WINO_TR_NS
        ts[m] = (t, gemm, nt)
        if t < best * _WINO_MARGIN:
            best, pick = t, m
    if pick == 4 and direct:
        # F(4)'s products on few columns (see _WINO_FEW_COLS): F(2) where it then costs less
        t4, gemm4, nt4 = ts[4]
        if nt4 < _WINO_FEW_COLS and ts[2][0] < t4 + gemm4 * (_wino_col_penalty(nt4) - 1.0):
            pick = 2
    return pick


def _wino_rate(direct: bool, nbytes: float) -> float:
    """The rule's rate of the Winograd products: the direct kernel's (16 lanes) where they run on it
    (_wino_products_direct: the native path on 2+ threads, _wino_serial_direct on one; transformed inputs and
    products of up to _WINO_NATIVE_BYTES), else the OpenBLAS fit."""
    if direct and _WINO_RATE16[0] and _products_direct() and nbytes <= _WINO_NATIVE_BYTES and \
            (threads.NUM_THREADS == 1 or _WINO_NATIVE[0]):
        return _GEMM_FLOPS * _DIRECT16_RATE
    return _WINO_FLOPS


# (tests / A/B: False keeps the OpenBLAS fit).  Moves F(2) onto the 14x14 / 12x12 planes of 256+ channels and F(4) onto
# 64 -> 64 at 56x56 and 64 -> 64 at 28x28 (the light models' picks otherwise unchanged).  Measured on an AMD Zen 5, 2
# threads, both rules' sessions in one process alternating run by run (/tmp/lead21/abset.py, whole-run median / min,
# new / old): ZFNet-512 0.96 / 0.91, VGG-19 0.94 / 0.95, ResNet-50 0.995 / 0.987 (40 rounds; F(2) alone on its
# 14x14s 0.97 / 0.97), Inception v2 1.01 / 0.97
_WINO_RATE16 = [True]


# F(4)'s alpha^2 = 36 products (O x C) @ (C x tiles) on few tile columns (12x12 .. 14x14 planes: 9-16 tiles) stream
# the 4x-the-weights U from memory for a handful of columns each; the rule's flop rate fits larger products.  Below
# _WINO_FEW_COLS columns its GEMM term is scaled by _wino_col_penalty (1 at _WINO_FEW_COLS, ~1.6x at 16 columns,
# ~2.3x at 9), which only moves F(4) picks to F(2) (F(2) against the direct kernel as fitted), and only in the rule
# against conv_direct's kernel (``direct``: float32 where it runs; measured only there).  Measured (session 17,
# AVX2 box, 1 thread, thread CPU time, frozen weights evicted between calls as in a model run, min of 20-40
# interleaved calls, us F(4) / F(2) / direct): 256 -> 256 on 14x14 3813-4513 / 3619-3660 / 3947-4746 (ResNet-50, 5
# convs), 512 -> 512 on 14x14 16628 / 13475 / 17368, 192 -> 256 on 14x14 4575 / 3826 / 3493 (Inception v2), 512 ->
# 512 on 12x12 10111 / 8430 / 10476, 256 -> 512 on 12x12 6906 / 5669 / 5491 (ZFNet-512); 28x28 keeps F(4): 128 ->
# 128 3061 / 4003 / 4296.  In the models (1 thread, per-conv minima of 36 runs in alternating fresh processes):
# ResNet-50's 256 -> 256 on 14x14 F(2) 0.85-0.95x F(4)'s time, Inception v2's 192 -> 256 0.88x.  On 2 threads F(2)
# also reads 16/36 of F(4)'s transformed weights (the part the second core does not speed up).
_WINO_FEW_COLS = 49
_WINO_COL_K = 20.0


def _wino_col_penalty(nt: int) -> float:
    return (nt + _WINO_COL_K) / nt * _WINO_FEW_COLS / (_WINO_FEW_COLS + _WINO_COL_K) if nt < _WINO_FEW_COLS else 1.0


# output channels per block of the Winograd GEMM + output transform: the block's products stay in cache
# for the transform (BLAS runs these (64 x C) @ (C x tiles) products at full speed, ~105 GFLOP/s single-
# threaded, down to ~90 at 16 rows)
_WINO_BLOCK = 64


# transformed input tiles of a band (bytes): an image whose V is larger can go in bands of tile rows, each
# thread taking whole bands (input transform, GEMMs, output transform in cache), where that moves fewer
# bytes than the output-channel blocks (each band reads all of U, each block all of V: VGG-19's 64->64 3x3
# on 224x224 has a 0.6 MB U and a 29 MB V, its 512->512 on 28x28 a 38 MB U and a 3.6 MB V)
_WINO_BAND_BYTES = 1 << 20
_WINO_BANDS = [None]          # None: the fewer bytes; True / False: bands whenever V is over budget / never


def _conv_winograd(x, U, b, res, m, pt, pl, relu=False) -> bool:
    """Convolution by Winograd F(m x m, 3 x 3) with the transformed weights U (alpha^2, O, C).  Images whose
    transformed tiles fit _WINO_BAND_BYTES (all images at once): the input tiles transformed over the
    planes (V: alpha^2, C, tiles), then per block of output channels the alpha^2 GEMMs U[xi, block] @ V[xi]
    and at once the block's output transform (+ bias), both phases split over the pool in chunks the
    threads claim.  Larger images: bands of tile rows, each thread taking whole bands (no join between
    the phases).  Serial BLAS throughout.  True when done; False when the input transform read an inf / NaN
    (winograd.input_tiles' flag; res then partly written, to be overwritten): the transforms would spread it
    over whole output tiles, so the caller computes this call on another path."""
    N, C, H, W = x.shape
    O = U.shape[1]
    OH, OW = res.shape[2], res.shape[3]
    dt = x.dtype
    a2 = (m + 2) * (m + 2)
    th, tw = -(-OH // m), -(-OW // m)
    xf, rf = x.reshape(-1), res.reshape(-1)
    nt = threads.NUM_THREADS
    par = _wino_par(a2, O, C, N * th * tw)
    want = nt * _BLOCKS_PER_THREAD if par else 1
    path = _wino_path(a2, O, C, N * th * tw, dt.itemsize)
    if path:
        done = (_wino_native if path == "native" else _wino_serial_direct)(x, U, b, res, m, pt, pl, relu)
        if done is not None:
            return done
    bias = b if b is not None else _NO_BIAS[dt]
    # blocks of output channels: multiples of 16 rows, enough for every thread to claim a few
    nb = max(-(-O // _WINO_BLOCK), min(want, -(-O // 16)))
    blocks = threads.split(O, nb, 16 if O >= 16 * nb else 1)
    band = max(1, _WINO_BAND_BYTES // (a2 * C * tw * dt.itemsize))
    if par:
        band = min(band, -(-N * th // want))          # a few bands per thread
    # each image's tile rows in k bands of equal height (+-1): with several threads k a multiple of them (14 rows
    # in bands of 4 were 4 + 4 + 4 + 2: one thread's 8 rows against the other's 6)
    k = -(-th // band)
    if par:
        k = min(th, -(-k // nt) * nt)
    bands = [(n, t0, t1) for n in range(N) for t0, t1 in threads.split(th, k)]
    band = max(t1 - t0 for _, t0, t1 in bands)
    # memory passes: every band reads all of U, every block of output channels all of V
    u_bytes, v_bytes = U.nbytes, a2 * C * N * th * tw * dt.itemsize
    fewer = len(bands) * u_bytes + v_bytes < u_bytes + len(blocks) * v_bytes
    bad = []            # an inf / NaN input seen (the input transform's flag)
    if band < th and (fewer if _WINO_BANDS[0] is None else _WINO_BANDS[0]):

        def run_band(c):
            for n, t0, t1 in bands[c[0]:c[1]]:
                if bad:
                    return
                nb = (t1 - t0) * tw
                V = _buffer(a2 * C * nb, dt, "wino_v")
                if winograd.input_tiles(xf, V, _buffer(((t1 - t0) * m + 2) * (tw * m + 2), dt, "wino_xp"),
                                        _buffer(a2 * nb, dt, "wino_t"), m, C, H, W, pt, pl, t0, t1 - t0, tw, nb, 0,
                                        n * C, (n + 1) * C):
                    bad.append(1)
                    return
                Mb = _buffer(a2 * O * nb, dt, "wino_m")
                np.matmul(U, V.reshape(a2, C, nb), out=Mb.reshape(a2, O, nb))
                winograd.output_tiles(Mb, rf[n * O * OH * OW:], _buffer(m * (m + 2) * nb, dt, "wino_t"), bias,
                                      b is not None, m, O, O, 0, OH, OW, t0, t1 - t0, tw, nb, 0, 0, O, relu)
        with threads.serial_blas():
            if par:
                threads.run_parallel(run_band, [(i, i + 1) for i in range(len(bands))])
            else:
                run_band((0, len(bands)))
        return not bad
    NT = N * th * tw
    V = _buffer(a2 * C * NT, dt, "wino_v")
    plane = (th * m + 2) * (tw * m + 2)

    def inp(c):
        if winograd.input_tiles(xf, V, _buffer(plane, dt, "wino_xp"), _buffer(a2 * th * tw, dt, "wino_t"), m, C, H,
                                W, pt, pl, 0, th, tw, NT, th * tw, c[0], c[1]):
            bad.append(1)
    V3 = V.reshape(a2, C, NT)

    def outp(c):
        for o0, o1 in blocks[c[0]:c[1]]:
            ob = o1 - o0
            Mb = _buffer(a2 * ob * NT, dt, "wino_m")
            np.matmul(U[:, o0:o1], V3, out=Mb.reshape(a2, ob, NT))
            winograd.output_tiles(Mb, rf, _buffer(m * (m + 2) * th * tw, dt, "wino_t"), bias, b is not None, m, ob,
                                  O, o0, OH, OW, 0, th, tw, NT, th * tw, 0, N * ob, relu)
    with threads.serial_blas():
        if not par:
            inp((0, N * C))
            if bad:
                return False
            outp((0, len(blocks)))
            return True
        threads.run_parallel(inp, threads.split(N * C, want))
        if bad:
            return False
        threads.run_parallel(outp, [(i, i + 1) for i in range(len(blocks))])
    return True


# Winograd on gemm_driver's native workers (_wino_native) where all the products M (alpha^2, O, tiles) and the
# transformed input V (alpha^2, C, tiles) each fit this many bytes; larger ones keep the bands / blocks of output
# channels below (a block's GEMM and output transform back to back, in cache) on the Python pool.  Was 2 MB (V and
# M in cache between the phases: 14x14 and 28x28 layers); the three native jobs beat the pool's bands on 2 threads
# well past that (session 18, in-process alternating, 2 threads, min / median us, 2 MB vs this limit): 64 -> 192 on
# 56x56 (Inception v2) 5767 / 7722 vs 4471 / 5650, 96 -> 128 on 56x56 6785 / 9259 vs 4418 / 5084, 128 -> 128 on
# 56x56 5501 / 6924 vs 4628 / 5343, 256 -> 256 on 56x56 16052 / 31297 vs 13988 / 15349, 64 -> 64 on 112x112 9425 /
# 14040 vs 5890 / 7240, 128 -> 128 on 112x112 14114 / 21311 vs 12866 / 16757, 512 -> 512 on 28x28 16102 / 18303 vs
# 13887 / 15879; even: 256 -> 256 and 192 -> 256 on 28x28, 64 -> 64 on 224x224 (29 MB: left to the bands).
# NEE_WINOGRAD_NATIVE=0: never
_WINO_NATIVE_BYTES = 16 << 20
_WINO_NATIVE = [os.environ.get("NEE_WINOGRAD_NATIVE", "1") not in ("0", "")]
_wino_jobs: dict = {}
_WINO_TASKS_PER_THREAD = 4


def _wino_par(a2, O, C, NT) -> bool:
    """Whether a Winograd call of NT tiles is split over the threads (enough work for 2+)."""
    return threads.NUM_THREADS > 1 and 2.0 * a2 * O * C * NT >= _PAR_FLOPS


def _wino_path(a2, O, C, NT, isz) -> str:
    """The path _conv_winograd tries first: "native" (_wino_native: split over the threads, the transformed data
    within _WINO_NATIVE_BYTES), "serial" (_wino_serial_direct: on the calling thread, as small), "" (the blocks /
    bands)."""
    if a2 * max(O, C) * NT * isz > _WINO_NATIVE_BYTES:
        return ""
    if _wino_par(a2, O, C, NT):
        return "native" if _WINO_NATIVE[0] else ""
    return "serial"


def _wino_jobs_for(x, U, res, m, pt, pl, relu, has_bias, nt):
    """The input and output transforms of a Winograd F(m, 3) call as gemm_driver jobs on ``nt`` threads, their
    metas filled (copies: the input tasks write their flags there): ((desc, caller, metas, scratch elements) of the
    input transform, the same of the output one: its scratch's first O elements the bias), or None (no driver)."""
    N, C, H, W, O, OH, OW, a2, th, tw, NT = _wino_geometry(x, U, res, m)
    per_in = (th * m + 2) * (tw * m + 2) + a2 * th * tw
    per_out = m * (m + 2) * th * tw
    jin = _wino_job("in", x.dtype, N * C, nt, per_in)
    jout = _wino_job("out", x.dtype, N * O, nt, per_out)
    if not jin or not jout:
        return None
    mi, mo = jin[2].copy(), jout[2].copy()
    mi[:, :winograd._M_P0] = (m, C, H, W, pt, pl, th, tw, NT, x.size, a2 * C * NT, len(mi) * per_in)
    mo[:, :winograd._M_P0] = (m, O, OH, OW, 0, 0, th, tw, NT, a2 * O * NT, res.size, O + len(mo) * per_out)
    mo[:, winograd._M_SOFF] += O
    mo[:, winograd._M_FLAGS] = (1 if has_bias else 0) | (2 if relu else 0)
    return (jin[0], jin[1], mi, len(mi) * per_in), (jout[0], jout[1], mo, O + len(mo) * per_out)


def _wino_job(phase, dt, planes, nt, per_task):
    """(descriptor, caller, metas) running ``phase``'s cfunc (winograd.task_addr) over ``planes`` planes in about
    _WINO_TASKS_PER_THREAD * nt tasks (one meta row each, its plane range and scratch offset filled in; the
    other words left to the caller), or False (no driver)."""
    key = (phase, dt.char, planes, nt, per_task)
    job = _wino_jobs.get(key)
    if job is None:
        drv = _driver()
        job = False
        if drv:
            chunks = threads.split(planes, nt * _WINO_TASKS_PER_THREAD)
            metas = np.zeros((len(chunks), winograd.META), np.int64)
            for i, (c0, c1) in enumerate(chunks):
                metas[i, winograd._M_P0], metas[i, winograd._M_P1] = c0, c1
                metas[i, winograd._M_SOFF] = i * per_task
            d = drv.call_plan(winograd.task_addr(phase, dt), 4, min(nt, len(chunks)), len(chunks), metas.strides[0])
            if d is not None:
                job = (d, drv.epilogue_caller(4), metas)
        if len(_wino_jobs) > 1024:
            _wino_jobs.clear()
        _wino_jobs[key] = job
    return job


# the alpha^2 products of _wino_native: "" (default) conv_direct's kernel where it runs (float32, AVX-512F or AVX2 + FMA):
# the products U[xi] (O x C) @ V[xi] (C x tiles) are a 1x1 convolution of alpha^2 groups on a 1 x tiles plane, one
# launch over the threads (_wino_products_direct); "blas": OpenBLAS through gemm_driver's batched product.  Measured on
# an AMD Zen 5 (AVX-512, 2 threads; OPENBLAS_CORETYPE=Haswell, the machine's setting; in-process alternating, warm,
# min of 7 rounds, /tmp/lead21/wg.py, us OpenBLAS / conv_direct products, whole conv): F(4) 64 -> 64 on 56x56 615 /
# 492, 128 -> 128 on 28x28 620 / 416, 96 -> 96 on 28x28 532 / 390, 64 -> 192 on 56x56 2195 / 1648; F(2) 256 -> 256
# on 14x14 831 / 497, 512 -> 512 on 14x14 2891 / 1506; one thread about even (F(4) 64 -> 64 1031 / 1013, 128 -> 128
# 959 / 966: the transforms' time there).  Whole models, 2 threads, fresh processes alternated (min of 5-6 each):
# VGG-19 0.76x, Inception v2 0.92x, ResNet-50 0.94x, SqueezeNet 1.00x (no Winograd conv there).  The products' packed
# operand is a second copy of U (conv_direct.packed_weights of U's buffer, frozen: U never changes in place).  16-lane
# kernels only: the 8-lane ones (NEE_CONV_DIRECT_VEC=8 on the Zen 5, against OpenBLAS's Haswell kernels) were mixed on
# two threads (F(4) 64 -> 64 on 56x56 902 vs 727 us, 96 -> 96 on 28x28 486 vs 455; 128 -> 128 on 28x28 591 vs 699)
_WINO_GEMM = [os.environ.get("NEE_WINOGRAD_GEMM", "")]


def _products_direct() -> bool:
    """Whether float32 Winograd products go to conv_direct's kernel on this host (its width fixed by
    conv_direct.available(), which the callers ask first): 16 lanes, NEE_WINOGRAD_GEMM not "blas"."""
    return _WINO_GEMM[0] != "blas" and conv_direct.VEC == 16


def _wino_geometry(x, U, res, m):
    """(N, C, H, W, O, OH, OW, alpha^2, tile rows, tile columns, tiles) of a Winograd F(m, 3) call."""
    N, C, H, W = x.shape
    OH, OW = res.shape[2], res.shape[3]
    th, tw = -(-OH // m), -(-OW // m)
    return N, C, H, W, U.shape[1], OH, OW, (m + 2) * (m + 2), th, tw, N * th * tw


def _wino_products_direct(U, V, M, a2, C, O, NT) -> bool:
    """M (alpha^2, O, NT) = U (alpha^2, O, C) @ V (alpha^2, C, NT) (flat buffers) on conv_direct's kernel as a grouped
    1x1 convolution (see _WINO_GEMM); False (nothing written) where it does not run."""
    if U.dtype != _F32 or not U.flags.c_contiguous or not conv_direct.available() or not _products_direct():
        return False
    if not winograd.is_frozen(U) and not winograd.freeze(U):
        return False        # (U is the weights cache's own array: it is replaced, never written, when w changes)
    return conv_direct.conv2d(V.reshape(1, a2 * C, 1, NT), U.reshape(a2 * O, C, 1, 1), None,
                              M.reshape(1, a2 * O, 1, NT), 1, 1, 0, 0, 0, 0, 1, 1)


def _wino_serial_direct(x, U, b, res, m, pt, pl, relu):
    """_conv_winograd on the calling thread with its products on conv_direct's kernel (_wino_products_direct): the
    input transform of every plane, the products, the output transform (one block of all output channels).  True
    done, False an inf / NaN input (res not written), None where the products do not run there (nothing written:
    the blocks path follows).  On one thread OpenBLAS spent a third of its products' time packing their operands
    (AMD Zen 5, F(2) 256 -> 256 on 14x14: sgemm 52%, its packing 29% of the conv's samples).  Warm, in-process
    alternating, min of 7 (/tmp/lead21/wg.py, us blocks path / this): F(4) 64 -> 64 on 56x56 1082 / 751, 128 -> 128
    on 28x28 965 / 578, 64 -> 192 on 56x56 2676 / 1834; F(2) 256 -> 256 on 14x14 1473 / 633 (direct kernel 1025).
    Whole models on one thread with the rule at the kernel's rate (both sessions in one process alternating,
    /tmp/lead21/abset1.py, median / min): VGG-19 0.69 / 0.66, Inception v2 0.89 / 0.95, ResNet-50 0.95 / 0.98."""
    N, C, H, W, O, OH, OW, a2, th, tw, NT = _wino_geometry(x, U, res, m)
    dt = x.dtype
    if dt != _F32 or not conv_direct.available() or not _products_direct():
        return None
    V = _buffer(a2 * C * NT, dt, "wino_v")
    if winograd.input_tiles(x.reshape(-1), V, _buffer((th * m + 2) * (tw * m + 2), dt, "wino_xp"),
                            _buffer(a2 * th * tw, dt, "wino_t"), m, C, H, W, pt, pl, 0, th, tw, NT, th * tw, 0, N * C):
        return False
    M = _buffer(a2 * O * NT, dt, "wino_m")
    if not _wino_products_direct(U, V, M, a2, C, O, NT):
        with threads.serial_blas():
            np.matmul(U, V.reshape(a2, C, NT), out=M.reshape(a2, O, NT))
    bias = b if b is not None else _NO_BIAS[dt]
    winograd.output_tiles(M, res.reshape(-1), _buffer(m * (m + 2) * th * tw, dt, "wino_t"), bias, b is not None, m,
                          O, O, 0, OH, OW, 0, th, tw, NT, th * tw, 0, N * O, relu)
    return True


def _wino_native(x, U, b, res, m, pt, pl, relu):
    """_conv_winograd's blocks path as three native jobs: the input transform (tasks over the input planes), the
    alpha^2 GEMMs as one batched gemm_driver product, the output transform (tasks over the output planes; + bias,
    relu).  True when done; None (nothing written) when the driver cannot run them; False (res not written) when
    the input transform read an inf / NaN (its tasks' _M_FLAGS words: see _conv_winograd)."""
    N, C, H, W, O, OH, OW, a2, th, tw, NT = _wino_geometry(x, U, res, m)
    dt = x.dtype
    nt = threads.NUM_THREADS
    jobs = _wino_jobs_for(x, U, res, m, pt, pl, relu, b is not None, nt)
    if jobs is None:
        return None
    (d, call, mt, nin), (dout, cout, mto, nout) = jobs
    V = _buffer(a2 * C * NT, dt, "wino_v")
    M = _buffer(a2 * O * NT, dt, "wino_m")
    V3, M3 = V.reshape(a2, C, NT), M.reshape(a2, O, NT)
    call(d, mt, mt, mt, x.reshape(-1), V, _buffer(nin, dt, "wino_xp"), mt)
    if mt[:, winograd._M_FLAGS].any():
        return False
    if not _wino_products_direct(U, V, M, a2, C, O, NT):
        # the products in row blocks of at most _WINO_BLOCK output channels (OpenBLAS runs (256 x C) @ (C x 16) at
        # ~60% of the speed of its four (64 x C) blocks: 1 thread, 36 of them 2.5 vs 1.4 ms)
        key = ("gemm", M3.shape, M3.strides, U.shape, U.strides, V3.strides, dt.char, nt)
        gd = _wino_jobs.get(key)
        if gd is None:
            gd = _driver().plan(M3, U, V3, nt, -(-O // _WINO_BLOCK), 0, 1, 16)
            gd = _wino_jobs[key] = False if gd is None else gd
        if gd is False:
            with threads.serial_blas():
                np.matmul(U, V3, out=M3)
        else:
            _driver().run(gd, U, V3, M3)
    sout = _buffer(nout, dt, "wino_t")
    if b is not None:
        sout[:O] = b
    cout(dout, mto, mto, mto, M, res.reshape(-1), sout, mto)
    return True


def _bind_winograd(x, w, b, b2, e, out, attrs, relu):
    """bind_into's Winograd step: ``f(out, ins, b2, e) -> bool`` for a float32 conv that conv2d_into runs by
    _conv_winograd's native path (_wino_native: 2+ threads and enough work) or its serial one with the products on
    conv_direct's kernel (_wino_serial_direct), bound once: the transforms' jobs and their metas, the products as
    conv_direct's bound grouped 1x1 (its native calls replayed while the scratches are the same arrays).  The same
    native calls on the same planes as those paths (the serial one: its input and output transforms as the jobs'
    tasks on the calling thread), the bias (+ b2) summed as conv2d_into sums it: the same bits.  ``f`` returns
    False (nothing written: the caller runs conv2d_into, which takes another path for it) when the input transform
    reads an inf / NaN, a setting changed (thread count, the paths' switches), the weights are not the bound ones
    or b2 / e are given where they were not.  None: weights not frozen (``winograd.freeze``: they could change in
    place, U with them), a residual (conv2d_into's pass), the blocks / bands paths."""
    if e is not None or not winograd.is_frozen(w) or not conv_direct.available() or not _products_direct():
        return None
    G = attrs["groups"]
    OH, OW = out.shape[2], out.shape[3]
    wu = _winograd_u(x, w, G, attrs, OH, OW)
    if wu is None:
        return None
    m, U = wu
    N, C, H, W, O, OH, OW, a2, th, tw, NT = _wino_geometry(x, U, out, m)
    dt = x.dtype
    nt = threads.NUM_THREADS
    path = _wino_path(a2, O, C, NT, dt.itemsize)
    if not path or not (winograd.is_frozen(U) or winograd.freeze(U)):
        return None
    has_b, has_b2 = b is not None, b2 is not None
    # (the serial path's transforms: the jobs' tasks on the calling thread alone)
    jobs = _wino_jobs_for(x, U, out, m, attrs["padding"][0], attrs["padding"][2], relu, has_b or has_b2,
                          nt if path == "native" else 1)
    if jobs is None:
        return None
    (din, cin, mti, nin), (dout, cout, mto, nout) = jobs
    U4 = U.reshape(a2 * O, C, 1, 1)
    st0 = (conv_direct.MODE[0], conv_direct.FORCE[0], _WINO_FORCE[0], _WINO_NATIVE[0], _WINO_GEMM[0], nt)
    w0 = w
    sc = [None]         # (the scratches' arrays, their views, the products' bound launch)

    def scratches():
        V = _buffer(a2 * C * NT, dt, "wino_v")
        M = _buffer(a2 * O * NT, dt, "wino_m")
        si = _buffer(nin, dt, "wino_xp")
        so = _buffer(nout, dt, "wino_t")
        c = sc[0]
        if c is None or c[0] is not V.base or c[1] is not M.base:
            V4, M4 = V.reshape(1, a2 * C, 1, NT), M.reshape(1, a2 * O, 1, NT)
            g = conv_direct.bind(V4, U4, None, M4, 1, 1, 0, 0, 0, 0, 1, 1)
            c = sc[0] = (V.base, M.base, V4, M4, g, V, M)
        return c, si, so

    def f(out, ins, b2, e) -> bool:
        if (conv_direct.MODE[0], conv_direct.FORCE[0], _WINO_FORCE[0], _WINO_NATIVE[0], _WINO_GEMM[0],
                threads.NUM_THREADS) != st0 or ins[1] is not w0 or (b2 is not None) != has_b2 or e is not None:
            return False
        c, si, so = scratches()
        if c[4] is None:
            return False
        cin(din, mti, mti, mti, ins[0].reshape(-1), c[5], si, mti)
        if mti[:, winograd._M_FLAGS].any():
            return False
        if not c[4](c[2], U4, None, c[3], None, None):
            return False
        if has_b:
            so[:O] = ins[2]
            if has_b2:
                so[:O] += b2.reshape(-1)
        elif has_b2:
            so[:O] = b2.reshape(-1)
        cout(dout, mto, mto, mto, c[6], out.reshape(-1), so, mto)
        return True

    def run(out, ins, b2):
        if not f(out, ins, b2, None):
            conv2d_into(out, ins, attrs, b2, None, relu)

    def calls(out, ins, b2, e):
        # (native_chain) the step as one call of the chain: the input transform's inf / NaN flag picks what follows
        if e is not None or (b2 is not None) != has_b2 or ins[1] is not w0:
            return None
        return [(run, (out, ins, b2), None)]
    f.calls = calls
    return f


# ---------------------------------------------------------------- convolution over padded rows
# im2col copies, for every (channel, ki, kj), OH short rows of OW elements with their clamped borders
# (~20 ns per row of 14: the column matrix of a 3x3 conv on a 14x14 plane took twice its GEMM), strided
# at stride 2.  Over the zero-padded input the same columns, with each output row widened to the
# padded width Wq (the extra columns wrap into the next row and are dropped), are ONE contiguous copy
# per (channel, ki, kj): memcpy speed.  At stride s the padded input is first split into its s*s phase
# planes (rows i*s + a, columns j*s + b): tap (ki, kj) of output (oh, ow) is then element
# (oh + ki*dh // s, ow + kj*dw // s) of phase (ki*dh % s, kj*dw % s), and the same holds.  The GEMM does
# Wq/OW times the work, so this path is taken only where that costs less than the copies it saves
# (_wide_pays); the output is compacted (extra columns dropped, bias added) tile by tile.
# Measured (one thread, ResNet-50 / DenseNet-121 / SqueezeNet shapes): im2col ~0.7-1.5 ns per column
# element, the row copies ~0.1, the GEMM ~0.022 ns per multiply-add: the extra columns cost
# Og*extra*0.022 ns per column element, so the wide path pays while Og * extra < ~24 (DenseNet's
# 128->32 3x3 on 14x14: 0.43 -> 0.25 ms; ResNet-50's 256->256 on 14x14, Og*extra = 37: 3.06 -> 3.21 ms).
_WIDE_MAX_EXTRA = 24.0
# depthwise: the direct loop's cost is per row (~6 ns of loop overhead per row of 14), not per element
_DEPTHWISE_MAX_EXTRA = 64.0
# below this many column rows (Cg*KH*KW) the GEMM is short and the output compaction costs more than
# the im2col copies saved (the 3x3 stem on 3 channels, K=27: 1.26 ms vs 1.04 ms, one thread)
_WIDE_MIN_K = 64
# padding copies (~0.1 ns per element): split over the pool from this many elements on
_PAD_PAR = 1 << 19
# padded input held at once (bytes): larger batches go a few images at a time
_PAD_BUDGET = 16 << 20


def _wide_geometry(OH, OW, KH, KW, sh, sw, dh, dw):
    """(Hq, Wq): rows and columns of a phase plane (enough for every tap of every output)."""
    return (OH - 1 + -(-((KH - 1) * dh + 1) // sh), OW - 1 + -(-((KW - 1) * dw + 1) // sw))


def _wide_pays(OH, OW, KH, KW, sh, sw, dh, dw, Og, K=_WIDE_MIN_K) -> bool:
    if OH * OW == 0 or K < _WIDE_MIN_K or KH * KW == 1:
        return False
    if KH * KW < 4 * sh * sw:
        # strided: the phase split (a strided gather, ~0.7 ns per input element) costs about what im2col
        # does for a kernel of under ~4 taps per phase (ResNet-50's 3x3 stride 2: 3.6 ms vs 3.8 ms; the
        # 7x7 stride-2 stem, ~12 taps per phase: 4.0 -> 3.3 ms)
        return False
    Wq = _wide_geometry(OH, OW, KH, KW, sh, sw, dh, dw)[1]
    return Og * (Wq - OW) <= _WIDE_MAX_EXTRA * OW


def _pad_planes(x3, xp3, pt, pl) -> None:
    """xp3 (P, Hp, Wp) = x3 (P, H, W) placed at row pt, column pl (cropped to xp3), zeros around (numpy's
    strided copy: ~2x a Numba loop of row slices on 56-wide rows)."""
    Hp, Wp = xp3.shape[1], xp3.shape[2]
    H, W = max(0, min(x3.shape[1], Hp - pt)), max(0, min(x3.shape[2], Wp - pl))
    xp3[:, :pt] = 0
    xp3[:, pt + H:] = 0
    xp3[:, pt:pt + H, :pl] = 0
    xp3[:, pt:pt + H, pl + W:] = 0
    xp3[:, pt:pt + H, pl:pl + W] = x3[:, :H, :W]


@njit(**_NOGIL)
def _phase_rows(x, xq, H, W, sh, sw, pt, pl, Hq, Wq, used, p0, p1):
    """Phase planes of planes [p0, p1) of x (P, H, W) flat into xq flat (P, sh, sw, Hq, Wq), padding
    included (one strided pass over the input; numpy's 4-D strided copy took ~4x as long)."""
    HW = H * W
    HWq = Hq * Wq
    for p in range(p0, p1):
        for a in range(sh):
            for b in range(sw):
                ph = (p * sh + a) * sw + b
                d0 = ph * HWq
                if not used[a * sw + b]:
                    for j in range(Wq):          # read only into dropped columns: any finite value
                        xq[d0 + j] = 0
                    continue
                # columns j with 0 <= j*sw + b - pl < W
                off = b - pl
                jlo = 0 if off >= 0 else min((-off + sw - 1) // sw, Wq)
                jhi = min(max((W - off + sw - 1) // sw, jlo), Wq)
                n = jhi - jlo
                for i in range(Hq):
                    dr = xq[d0 + i * Wq:d0 + (i + 1) * Wq]
                    ih = i * sh + a - pt
                    if ih < 0 or ih >= H:
                        dr[:] = 0
                        continue
                    dr[:jlo] = 0
                    dr[jhi:] = 0
                    if n <= 0:
                        continue
                    s0 = p * HW + ih * W + jlo * sw + off
                    xs = x[s0:s0 + (n - 1) * sw + 1]
                    dd = dr[jlo:jhi]
                    if sw == 2:
                        for j in range(n):
                            dd[j] = xs[2 * j]
                    else:
                        for j in range(n):
                            dd[j] = xs[j * sw]


def _phase_planes(x3, xq, sh, sw, pt, pl, used) -> None:
    """xq (P, sh, sw, Hq, Wq)[p, a, b, i, j] = padded x3 (P, H, W) at row i*sh + a, column j*sw + b, for
    the phases in ``used`` (the others: their first row zeroed, read only into dropped columns)."""
    P, _, _, Hq, Wq = xq.shape
    if sh == 1 and sw == 1:
        _pad_planes(x3, xq[:, 0, 0], pt, pl)
        return
    H, W = x3.shape[1], x3.shape[2]
    mask = np.array([(a, b) in used for a in range(sh) for b in range(sw)])
    _phase_rows(x3.reshape(-1), xq.reshape(-1), H, W, sh, sw, pt, pl, Hq, Wq, mask, 0, P)


@njit(**_NOGIL)
def _im2col_wide(xq, col, KH, KW, sh, sw, dh, dw, Hq, Wq, r0, r1, P):
    """col[(p, ki, kj), (oh - r0) * Wq + j] = xq[p, ki*dh % sh, kj*dw % sw, oh + ki*dh // sh, j + kj*dw // sw]
    for oh in [r0, r1), j < Wq (the columns j >= OW read into the next row or past the plane: dropped)."""
    L = (r1 - r0) * Wq
    HWq = Hq * Wq
    for p in range(P):
        for ki in range(KH):
            a, i0 = (ki * dh) % sh, (ki * dh) // sh
            for kj in range(KW):
                b, j0 = (kj * dw) % sw, (kj * dw) // sw
                d = ((p * KH + ki) * KW + kj) * L
                s = ((p * sh + a) * sw + b) * HWq + (r0 + i0) * Wq + j0
                cs = col[d:d + L]
                xs = xq[s:s + L]
                for j in range(L):
                    cs[j] = xs[j]


@njit(**_NOGIL)
def _compact(wide, out, O, rows, Wq, OW, ostride, ooff, bias, has_bias, relu):
    """out[o * ostride + ooff + r * OW + j] = wide[o, r * Wq + j] (+ bias[o]) for j < OW, through torch's relu
    when ``relu``."""
    for o in range(O):
        bv = bias[o] if has_bias else bias[0]        # bias: zeros(1) without one
        for r in range(rows):
            ws = wide[(o * rows + r) * Wq:(o * rows + r) * Wq + OW]
            os_ = out[o * ostride + ooff + r * OW:o * ostride + ooff + (r + 1) * OW]
            # (relu as a select in the copy loop: a loop of conditional stores does not vectorize; see _bias_act)
            if has_bias and relu:
                for j in range(OW):
                    v = ws[j] + bv
                    os_[j] = 0.0 if v < 0 else v
            elif has_bias:
                for j in range(OW):
                    os_[j] = ws[j] + bv
            elif relu:
                for j in range(OW):
                    v = ws[j]
                    os_[j] = 0.0 if v < 0 else v
            else:
                for j in range(OW):
                    os_[j] = ws[j]


_NO_BIAS = {np.dtype(np.float32): np.zeros(1, np.float32), np.dtype(np.float64): np.zeros(1, np.float64)}


def _conv_wide(x, wg, b, res, G, Og, K, geo, relu=False):
    """Convolution over padded rows (see above): tiles are bands of output rows of one image; with at
    least as many tiles as threads the threads claim whole tiles (row-copy im2col, GEMMs, compaction),
    else one tile at a time with its GEMM split over the pool (_gemms)."""
    KH, KW, sh, sw, pt, pl, dh, dw, OH, OW = geo
    N, C, H, W = x.shape
    O = G * Og
    Hq, Wq = _wide_geometry(OH, OW, KH, KW, sh, sw, dh, dw)
    plane = sh * sw * Hq * Wq            # the phase planes of one channel
    dt = x.dtype
    per_chunk = max(1, _PAD_BUDGET // (C * plane * dt.itemsize))
    if N > per_chunk:                    # a large batch is padded and convolved a few images at a time
        for n0 in range(0, N, per_chunk):
            _conv_wide(x[n0:n0 + per_chunk], wg, b, res[n0:n0 + per_chunk], G, Og, K, geo, relu)
        return
    # the last band's last row reads up to (KW-1)*dw // sw elements past its plane: a zero tail
    tail = ((KW - 1) * dw) // sw
    P = N * C
    xq = _buffer(P * plane + tail, dt, "pad")
    xq[P * plane:] = 0
    used = {((ki * dh) % sh, (kj * dw) % sw) for ki in range(KH) for kj in range(KW)}
    x3, xq5 = x.reshape(P, H, W), xq[:P * plane].reshape(P, sh, sw, Hq, Wq)
    _par(lambda p0, p1: _phase_planes(x3[p0:p1], xq5[p0:p1], sh, sw, pt, pl, used), P, xq.size, _PAD_PAR)
    row = C * KH * KW * Wq                # column elements per output row of one image
    nt = threads.NUM_THREADS
    bands = max(1, -(-(OH * row) // _TILE))
    flops = 2.0 * N * O * K * OH * OW
    if nt > 1 and N < nt and flops >= _PAR_FLOPS:
        # a tile for every thread (one parallel region, no serial im2col), two when each still gets a few
        # hundred GEMM columns (a late or busy worker then holds up the call by half as much)
        per = -(-nt // N)
        bands = max(bands, per * max(1, min(_BLOCKS_PER_THREAD, (OH * Wq) // (256 * per))))
        bands = -(-bands // nt) * nt if N == 1 else bands        # balance: a whole number per thread
    rows = max(1, -(-OH // min(bands, OH)))
    tiles = [(n, r0, min(OH, r0 + rows)) for n in range(N) for r0 in range(0, OH, rows)]
    L = OH * OW
    rf = res.reshape(-1)
    bias = b if b is not None else _NO_BIAS[dt]
    has_bias = b is not None

    def cols(n, r0, r1):
        col = _buffer(C * KH * KW * (r1 - r0) * Wq, dt)
        _im2col_wide(xq[n * C * plane:], col, KH, KW, sh, sw, dh, dw, Hq, Wq, r0, r1, C)
        return col

    def jobs(col, wide, r0, r1):
        lt = (r1 - r0) * Wq
        cg = col.reshape(G, K, lt)
        wd = wide.reshape(G, Og, lt)
        return [(wd[g], wg[g], cg[g]) for g in range(G)]

    def compact(wide, n, r0, r1):
        _compact(wide, rf, O, r1 - r0, Wq, OW, L, n * O * L + r0 * OW, bias, has_bias, relu)

    if nt > 1 and len(tiles) >= nt:
        def tile(t):
            n, r0, r1 = tiles[t[0]]
            col = cols(n, r0, r1)
            wide = _buffer(O * (r1 - r0) * Wq, dt, "wide")
            _run_jobs(jobs(col, wide, r0, r1))
            compact(wide, n, r0, r1)
        with threads.serial_blas():
            threads.run_parallel(tile, [(i, i + 1) for i in range(len(tiles))])
        return
    for n, r0, r1 in tiles:
        col = cols(n, r0, r1)
        wide = _buffer(O * (r1 - r0) * Wq, dt, "wide")
        _gemms(jobs(col, wide, r0, r1))
        compact(wide, n, r0, r1)


# index type of the depthwise / pooling loops (no negative-index wraparound checks: they vectorize)
_U = np.uint64
# depthwise / pooling planes go to the pool from this much estimated single-thread time (ns): a hand-off
# costs ~12 us at best (measured, 2 threads), each chunk a kernel call (~1-2 us) and its buffers' setup;
# on the shared box under load (~4.5) a split call took 1.3-2.5x the serial one at every size measured
# (60 to 400 us: the other core is busy), so only calls long enough to gain on a quiet machine split
_PLANES_PAR_NS = 100000


def _par_planes(fn, nplanes: int, est_ns: float) -> None:
    """fn(p0, p1) over [0, nplanes): on the calling thread, or, from _PLANES_PAR_NS of estimated work on,
    in two chunks per thread (claimed: a descheduled worker on the loaded shared box then delays the
    call by a quarter of the work, not half)."""
    nt = threads.NUM_THREADS
    if est_ns < _PLANES_PAR_NS or nt <= 1 or nplanes <= 1:
        fn(0, nplanes)
        return
    threads.run_parallel(lambda c: fn(c[0], c[1]), threads.split(nplanes, 2 * nt))


@njit(inline="always", **_NOGIL)
def _phase_fill(x, xb, xq, H, W, sh, sw, pt, pl, Hq, Wq):
    """The plane x[xb:xb + H*W] (H, W) written into its padded stride phases xq (sh, sw, Hq, Wq): padded
    row R = ih + pt, column c = iw + pl goes to phase (R % sh, c % sw) at (R // sh, c // sw), cropped to
    Hq x Wq.  Only the interior is written (the padding around is left as it is).  At stride 2 the
    columns go by pairs (iw, iw + 1), one to each phase: gap-free loads, a vector loop."""
    Q = Hq * Wq
    i = pt // sh                                         # padded row R = ih + pt: phase row i, phase a
    a = pt - i * sh
    for ih in range(H):                                  # (no divisions per row or element: ~4 ns each)
        if i >= Hq:
            break
        rb = (a * sw * Hq + i) * Wq                      # phase (a, 0), row i
        a += 1
        if a == sh:
            a = 0
            i += 1
        xr = xb + ih * W
        if sw == 1:
            n = min(W, Wq - pl)
            d = rb + pl
            for j in range(n):
                xq[_U(d + j)] = x[_U(xr + j)]
        elif sw == 2:
            e0 = pl & 1                                  # column phase of the even input columns
            dA = rb + e0 * Q + (pl >> 1)                 # iw = 2t -> column t + pl // 2
            dB = rb + (1 - e0) * Q + ((pl + 1) >> 1)     # iw = 2t + 1 -> column t + (pl + 1) // 2
            n = max(0, min(W >> 1, Wq - (pl >> 1), Wq - ((pl + 1) >> 1)))
            for t in range(n):
                xq[_U(dA + t)] = x[_U(xr + 2 * t)]
                xq[_U(dB + t)] = x[_U(xr + 2 * t + 1)]
            for iw in range(2 * n, W):
                c = iw + pl
                j = c >> 1
                if j < Wq:
                    xq[rb + (c & 1) * Q + j] = x[xr + iw]
        else:
            j = pl // sw
            b = pl - j * sw
            for iw in range(W):
                if j >= Wq:
                    break
                xq[rb + b * Q + j] = x[xr + iw]
                b += 1
                if b == sw:
                    b = 0
                    j += 1


# 3x3 depthwise output rows from this width on are written directly, row by row (one thread, 112-wide:
# 169 vs 197 us for 32 planes; 56: even; 28 and 14: 10-35% slower, the short rows' scalar remainders),
# narrower ones by one padded-width pass and a compaction
_DW_ROWS_MIN_OW = 64


@njit(**_NOGIL)
def _depthwise_fused(x, w, b, out, xq, acc, toff, C, O, H, W, KK, sh, sw, pt, pl, Hq, Wq, OH, OW, has_bias,
                     p0, p1):
    """Depthwise convolution of input planes [p0, p1) (each to its O/C output channels), one fused pass
    per plane: the plane zero-padded and split into its sh*sw stride phases in ``xq`` (a per-thread
    buffer of one plane: stays in L1/L2; its padding is zeroed once per call, only the interior is
    rewritten), then each tap is a contiguous run of a phase plane: the output over padded-width rows
    (OH x Wq) is ONE vector loop over all taps (3x3: 9 loads, one store per element), then compacted
    into the output plane (3x3 rows from _DW_ROWS_MIN_OW wide: written directly, row by row).
    Summation: the bias, then the taps in (ki, kj) order.  toff[k]: where tap k starts in xq."""
    mult = O // C
    L = OH * Wq
    for i in range(xq.size):
        xq[i] = 0
    for p in range(p0, p1):
        _phase_fill(x, p * H * W, xq, H, W, sh, sw, pt, pl, Hq, Wq)
        n_ = p // C
        c_ = p - n_ * C
        for m in range(mult):
            o = c_ * mult + m
            bv = b[o] if has_bias else b[0]      # b: zeros(1) without a bias (b[0] * 0 would be float64)
            wb = o * KK
            ob = ((n_ * O) + o) * OH * OW
            if KK == 9:
                w0, w1, w2, w3, w4, w5, w6, w7, w8 = (w[wb], w[wb + 1], w[wb + 2], w[wb + 3], w[wb + 4],
                                                      w[wb + 5], w[wb + 6], w[wb + 7], w[wb + 8])
                t0, t1, t2, t3, t4, t5, t6, t7, t8 = (toff[0], toff[1], toff[2], toff[3], toff[4], toff[5],
                                                      toff[6], toff[7], toff[8])
                if OW >= _DW_ROWS_MIN_OW:
                    # wide rows: straight into the output, row by row (no padded-width pass to compact)
                    for r in range(OH):
                        d = ob + r * OW
                        s = r * Wq
                        for j in range(OW):
                            i = s + j
                            out[_U(d + j)] = (bv + w0 * xq[_U(t0 + i)] + w1 * xq[_U(t1 + i)] + w2 * xq[_U(t2 + i)]
                                              + w3 * xq[_U(t3 + i)] + w4 * xq[_U(t4 + i)] + w5 * xq[_U(t5 + i)]
                                              + w6 * xq[_U(t6 + i)] + w7 * xq[_U(t7 + i)] + w8 * xq[_U(t8 + i)])
                    continue
                for i in range(L):
                    acc[_U(i)] = (bv + w0 * xq[_U(t0 + i)] + w1 * xq[_U(t1 + i)] + w2 * xq[_U(t2 + i)]
                                  + w3 * xq[_U(t3 + i)] + w4 * xq[_U(t4 + i)] + w5 * xq[_U(t5 + i)]
                                  + w6 * xq[_U(t6 + i)] + w7 * xq[_U(t7 + i)] + w8 * xq[_U(t8 + i)])
            else:
                for i in range(L):
                    acc[_U(i)] = bv
                for k in range(KK):
                    wv = w[wb + k]
                    t = toff[k]
                    for i in range(L):
                        acc[_U(i)] += wv * xq[_U(t + i)]
            for r in range(OH):
                d = ob + r * OW
                s = r * Wq
                for j in range(OW):
                    out[_U(d + j)] = acc[_U(s + j)]


_tap_offs: dict = {}


def _tap_offsets(KH, KW, sh, sw, dh, dw, Hq, Wq) -> np.ndarray:
    """Where each tap (ki, kj) starts in a plane's phase planes (sh, sw, Hq, Wq): phase
    ((ki*dh) % sh, (kj*dw) % sw), row (ki*dh) // sh, column (kj*dw) // sw (cached per geometry)."""
    key = (KH, KW, sh, sw, dh, dw, Hq, Wq)
    toff = _tap_offs.get(key)
    if toff is None:
        if len(_tap_offs) > 1024:
            _tap_offs.clear()
        toff = _tap_offs[key] = np.array([(((ki * dh) % sh * sw + (kj * dw) % sw) * Hq + (ki * dh) // sh) * Wq
                                          + (kj * dw) // sw for ki in range(KH) for kj in range(KW)], np.int64)
    return toff


def _depthwise_padded(x, wf, bf, has_bias, of, geo):
    KH, KW, sh, sw, pt, pl, dh, dw, OH, OW = geo
    N, C, H, W = x.shape
    O = of.size // (N * OH * OW)
    Hq, Wq = _wide_geometry(OH, OW, KH, KW, sh, sw, dh, dw)
    dt = x.dtype
    # a tap's run ends up to (KW-1)*dw // sw columns past its phase plane: read only into dropped columns
    nq = sh * sw * Hq * Wq + ((KW - 1) * dw) // sw + 1
    toff = _tap_offsets(KH, KW, sh, sw, dh, dw, Hq, Wq)
    xf = x.reshape(-1)

    def go(p0, p1):
        buf = _buffer(nq + OH * Wq, dt, "dw")
        _depthwise_fused(xf, wf, bf, of, buf[:nq], buf[nq:], toff, C, O, H, W, KH * KW, sh, sw, pt, pl, Hq, Wq,
                         OH, OW, has_bias, p0, p1)
    # estimated ns (fit to one thread, 3x3 on 7x7 to 112x112 planes: 43-193 us): ~4 per row filled or
    # compacted (short loops), ~0.03 per tap and padded-width output, ~0.1 per input element read
    _par_planes(go, N * C, N * C * 4 * H + of.size // OW * (4 + 0.03 * Wq * KH * KW) + 0.1 * x.size)


@kernel("conv_transpose2d")
def conv_transpose2d_kernel(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _c(ins[0])
    w = _c(ins[1], x.dtype)
    b = _c(ins[2], x.dtype) if len(ins) > 2 else None
    res = _work_out(out)
    sh, sw = attrs["stride"]
    ph, pw = attrs["padding"]
    dh, dw = attrs["dilation"]
    G = attrs["groups"]
    N, Cin, H, W = x.shape
    _, Cog, KH, KW = w.shape
    Cout = Cog * G
    Cig = Cin // G
    OH, OW = out.shape[2], out.shape[3]
    L = H * W
    if Cig == 0:
        res[...] = 0
    else:
        M = Cog * KH * KW
        wt = w.reshape(G, Cig, M).transpose(0, 2, 1)          # (G, M, Cig): BLAS takes the transpose
        nb = max(1, min(N, _COL_BUDGET // max(1, Cout * KH * KW * L)))
        for n0 in range(0, N, nb):
            n1 = min(N, n0 + nb)
            col = np.empty((n1 - n0, G, M, L), x.dtype)
            xg = x[n0:n1].reshape(n1 - n0, G, Cig, L)
            _gemms([(col[i, g], wt[g], xg[i, g]) for i in range(n1 - n0) for g in range(G)] if G == 1 or n1 - n0 == 1
                   else [(col[i], wt, xg[i]) for i in range(n1 - n0)])
            col2im(col.reshape(-1, KH * KW, L), res[n0:n1].reshape(-1, OH, OW),
                   KH, KW, sh, sw, ph, pw, dh, dw, H, W)
    if b is not None:
        res += b.reshape(1, Cout, 1, 1)
    _finish(out, res)


@kernel("im2col")
def im2col_kernel(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _c(ins[0])
    N, C, H, W = x.shape
    KH, KW = attrs["kernel_size"]
    dh, dw = attrs["dilation"]
    ph, pw = attrs["padding"]
    sh, sw = attrs["stride"]
    OH, OW = attrs["blocks"]
    col = im2col(x.reshape(-1, H, W), KH, KW, sh, sw, ph, pw, dh, dw, OH, OW)
    np.copyto(out, col.reshape(out.shape), casting="unsafe")


@kernel("col2im")
def col2im_kernel(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _c(ins[0])
    N, C, H, W = out.shape
    KH, KW = attrs["kernel_size"]
    dh, dw = attrs["dilation"]
    ph, pw = attrs["padding"]
    sh, sw = attrs["stride"]
    OH, OW = attrs["blocks"]
    res = _work_out(out)
    if x.size == 0:
        res[...] = 0
    else:
        col2im(x.reshape(N * C, KH * KW, OH * OW), res.reshape(-1, H, W), KH, KW, sh, sw, ph, pw, dh, dw, OH, OW)
    _finish(out, res)


# ---------------------------------------------------------------- pooling
@njit(inline="always", **_NOGIL)
def _max_at(x, xb, W, KW, dw, hs, dh, k0, k1, ws):
    """Max (and its plane index) of one clamped window: the border columns' scalar path."""
    j0 = 0 if ws >= 0 else (-ws + dw - 1) // dw
    j1 = min(KW, (W - ws + dw - 1) // dw)
    bi = (hs + k0 * dh) * W + ws + j0 * dw
    if k0 >= k1 or j0 >= j1:     # the window lies in the padding (dilation > 1): -inf, torch's index
        return -np.inf, bi
    best = x[xb + bi]
    for ki in range(k0, k1):
        r = (hs + ki * dh) * W + ws
        for kj in range(j0, j1):
            i = r + kj * dw
            v = x[xb + i]
            if v > best or v != v:
                best = v
                bi = i
    return best, bi


@njit(inline="always", **_NOGIL)
def _taps(start, d, K, n):
    """[k0, k1): the taps k of a window starting at ``start`` (dilation d) with start + k*d in [0, n).
    Without divisions at dilation 1 (Python-semantics integer divisions cost ~20 ns a row here)."""
    if d == 1:
        return (0 if start >= 0 else min(-start, K)), max(0, min(K, n - start))
    return (0 if start >= 0 else (-start + d - 1) // d), min(K, (n - start + d - 1) // d)


@njit(inline="always", **_NOGIL)
def _mx(a, b):
    """max with torch's NaN propagation (a NaN anywhere in a window is the window's max)."""
    return a if (a > b) | (a != a) else b


@njit(error_model="numpy", **_NOGIL)      # numpy's float division: no zero check, so the loops vectorize
def _pool_planes(x, out, xq, v, hw, dv, toffs, H, W, KH, KW, sh, sw, ph, pw, Hq, Wq, OH, OW, is_max, p0, p1):
    """Max or average pooling of planes [p0, p1), separably, every pass one contiguous vector loop over a
    whole plane held in per-thread buffers (L1/L2): the plane padded (-inf / 0) and split into its
    sh*sw stride phases in ``xq`` (as the depthwise kernel: _phase_fill; the padding is written once per
    call, only the interior per plane), then the window's rows combined into ``v`` (one plane of OH x Wq
    per column phase: each tap row a contiguous run of a phase plane), then its columns (contiguous runs
    of v) into ``hw`` over padded-width rows, then compacted into the output.  KH / KW of 2 or 3 taps
    are combined in one loop (one store per element), more one pass per tap.  Averages: over ``dv``, the
    divisor of every output (its window's count in the mode asked, or divisor_override).  Max:
    NaN-propagating and order-free, so any tap order gives torch's values.  Row by row instead, short
    rows (7 to 28 wide) run mostly in the loops' scalar remainders: 2-3 ns per output; the window's rows
    read straight from the input, per output row, into the phases of v (no phase planes): 0.7x the speed
    on 7x7 to 28x28 planes at stride 1, even at stride 2 (one thread, 3x3).
    toffs: the row taps' offsets in xq (phase (a, 0), row r), then the column taps' offsets in v."""
    L = OH * Wq
    Q = Hq * Wq
    fill = -np.inf if is_max else 0.0
    for i in range(xq.size):        # the padding: the planes' interiors are rewritten, never it
        xq[i] = fill
    for i in range(v.size):         # read only into dropped columns
        v[i] = 0
    for p in range(p0, p1):
        _phase_fill(x, p * H * W, xq, H, W, sh, sw, ph, pw, Hq, Wq)
        # rows: v[b*L + i] = comb over ki of phase (a_ki, b) at row r_ki, for each column phase b
        for b in range(sw):
            d = b * L
            s = b * Q
            if KH == 3:
                t0, t1, t2 = s + toffs[0], s + toffs[1], s + toffs[2]
                if is_max:
                    for i in range(L):
                        v[_U(d + i)] = _mx(_mx(xq[_U(t0 + i)], xq[_U(t1 + i)]), xq[_U(t2 + i)])
                else:
                    for i in range(L):
                        v[_U(d + i)] = xq[_U(t0 + i)] + xq[_U(t1 + i)] + xq[_U(t2 + i)]
            elif KH == 2:
                t0, t1 = s + toffs[0], s + toffs[1]
                if is_max:
                    for i in range(L):
                        v[_U(d + i)] = _mx(xq[_U(t0 + i)], xq[_U(t1 + i)])
                else:
                    for i in range(L):
                        v[_U(d + i)] = xq[_U(t0 + i)] + xq[_U(t1 + i)]
            else:
                t0 = s + toffs[0]
                for i in range(L):
                    v[_U(d + i)] = xq[_U(t0 + i)]
                for k in range(1, KH):
                    t = s + toffs[k]
                    if is_max:
                        for i in range(L):
                            v[_U(d + i)] = _mx(v[_U(d + i)], xq[_U(t + i)])
                    else:
                        for i in range(L):
                            v[_U(d + i)] += xq[_U(t + i)]
        # columns: hw[i] = comb over kj of v at (column phase, shift) of tap kj
        if KW == 3:
            t0, t1, t2 = toffs[KH], toffs[KH + 1], toffs[KH + 2]
            if is_max:
                for i in range(L):
                    hw[_U(i)] = _mx(_mx(v[_U(t0 + i)], v[_U(t1 + i)]), v[_U(t2 + i)])
            else:
                for i in range(L):
                    hw[_U(i)] = (v[_U(t0 + i)] + v[_U(t1 + i)] + v[_U(t2 + i)]) / dv[_U(i)]
        elif KW == 2:
            t0, t1 = toffs[KH], toffs[KH + 1]
            if is_max:
                for i in range(L):
                    hw[_U(i)] = _mx(v[_U(t0 + i)], v[_U(t1 + i)])
            else:
                for i in range(L):
                    hw[_U(i)] = (v[_U(t0 + i)] + v[_U(t1 + i)]) / dv[_U(i)]
        else:
            t0 = toffs[KH]
            for i in range(L):
                hw[_U(i)] = v[_U(t0 + i)]
            for k in range(1, KW):
                t = toffs[KH + k]
                if is_max:
                    for i in range(L):
                        hw[_U(i)] = _mx(hw[_U(i)], v[_U(t + i)])
                else:
                    for i in range(L):
                        hw[_U(i)] += v[_U(t + i)]
            if not is_max:
                for i in range(L):
                    hw[_U(i)] = hw[_U(i)] / dv[_U(i)]
        ob = p * OH * OW
        for r in range(OH):
            d = ob + r * OW
            s = r * Wq
            for j in range(OW):
                out[_U(d + j)] = hw[_U(s + j)]


@njit(error_model="numpy", **_NOGIL)
def _pool_global(x, out, n, is_max, dv, p0, p1):
    """Windows covering whole planes (global pooling, no padding): one reduction per contiguous plane, in
    four independent chains (an in-order reduction does not vectorize; one chain waits on each add)."""
    m = n - n % 4
    for p in range(p0, p1):
        s = p * n
        if is_max:
            a0 = a1 = a2 = a3 = x[s]
            for i in range(0, m, 4):
                a0 = _mx(a0, x[_U(s + i)])
                a1 = _mx(a1, x[_U(s + i + 1)])
                a2 = _mx(a2, x[_U(s + i + 2)])
                a3 = _mx(a3, x[_U(s + i + 3)])
            for i in range(m, n):
                a0 = _mx(a0, x[_U(s + i)])
            out[p] = _mx(_mx(a0, a1), _mx(a2, a3))
        elif n < 4:
            a0 = x[s]
            for i in range(1, n):
                a0 += x[_U(s + i)]
            out[p] = a0 / dv[0]
        else:
            a0, a1, a2, a3 = x[s], x[s + 1], x[s + 2], x[s + 3]
            for i in range(4, m, 4):
                a0 += x[_U(s + i)]
                a1 += x[_U(s + i + 1)]
                a2 += x[_U(s + i + 2)]
                a3 += x[_U(s + i + 3)]
            for i in range(m, n):
                a0 += x[_U(s + i)]
            out[p] = ((a0 + a1) + (a2 + a3)) / dv[0]


# callers (_pool, pool_native.bind_pool) run the same arithmetic as an IR kernel (kernels/ir_small.py: the same
# bits, and no Numba on an ONNX session's path); this Numba kernel for other arrays
from . import ir_small as _ir_small     # noqa: E402
_pool_global = _ir_small.pool_global(_pool_global)


# per geometry: the tap offsets and divisors (numpy calls: ~40 us for an average pool's divisors, more than
# small pools take)
_pool_plans: dict = {}


def _pool_plan(H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, is_max, cip, div, dt):
    key = (H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, is_max, cip, div, dt.char)
    plan = _pool_plans.get(key)
    if plan is not None:
        return plan
    Hq, Wq = _wide_geometry(OH, OW, KH, KW, sh, sw, dh, dw)
    L = OH * Wq
    toffs = np.array([((ki * dh) % sh * sw * Hq + (ki * dh) // sh) * Wq for ki in range(KH)]
                     + [(kj * dw) % sw * L + (kj * dw) // sw for kj in range(KW)], np.int64)
    dv = _DUMMY_DIV[dt.char]
    if not is_max:
        # the divisor of every output: the override, or the product of its window's row and column counts
        # (clipped to the padded input with count_include_pad, else to the input)
        def count(n, K, s, pad, On, Wn):
            st = np.arange(On) * s - pad
            en = np.minimum(st + K, n + pad)
            c = (en - st) if cip else (np.minimum(en, n) - np.maximum(st, 0))
            return np.concatenate([c, np.ones(Wn - On, c.dtype)]) if Wn > On else c
        dv = np.full(L, div, dt) if div else np.outer(count(H, KH, sh, ph, OH, OH),
                                                      count(W, KW, sw, pw, OW, Wq)).astype(dt).reshape(-1)
    if len(_pool_plans) > 1024:
        _pool_plans.clear()
    plan = _pool_plans[key] = (Hq, Wq, toffs, dv)
    return plan


def _pool(x, res, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip=False, div=0) -> None:
    """Max (is_max) or average pooling of x (N, C, H, W) into res; see _pool_planes."""
    N, C, H, W = x.shape
    P = N * C
    OH, OW = res.shape[2], res.shape[3]
    xf, of, dt = x.reshape(-1), res.reshape(-1), x.dtype
    if ph == pw == 0 and KH == H and KW == W and (dh == 1 or KH == 1) and (dw == 1 or KW == 1):
        dv = np.full(1, div or H * W, dt)
        _par_planes(lambda p0, p1: _pool_global(xf, of, H * W, is_max, dv, p0, p1), P, 0.3 * x.size + 20 * P)
        return
    if pool_native.pool2d(x, res, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip, div):
        return      # float32 / float64, column strides 1-4: the LLVM kernels on the native workers
    Hq, Wq, toffs, dv = _pool_plan(H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, is_max, cip, div, dt)
    L = OH * Wq
    nq = sh * sw * Hq * Wq
    nv = sw * L + ((KW - 1) * dw) // sw + 1

    def go(p0, p1):
        buf = _buffer(nq + nv + L, dt, "pool")
        _pool_planes(xf, of, buf[:nq], buf[nq:nq + nv], buf[nq + nv:], dv, toffs, H, W, KH, KW, sh, sw, ph, pw,
                     Hq, Wq, OH, OW, is_max, p0, p1)
    # estimated ns (fit to one thread on 7x7 to 112x112 planes, 3x3 windows: 43-216 us): ~30 per plane,
    # ~2.5 per row filled or compacted, ~0.1 per padded element, ~0.05 per output tap
    _par_planes(go, P, P * (30 + 2.5 * (H + OH) + 0.1 * nq) + 0.05 * res.size * (KH + KW))


@njit(**_NOGIL)
def _maxpool_idx_planes(x, out, idx, xq, best, ib, toff, H, W, KH, KW, sh, sw, ph, pw, dh, dw, Hq, Wq, OH, OW,
                        p0, p1):
    """Max pooling with the plane index of every maximum, over whole padded phase planes (as _pool_planes):
    each tap (in torch's (ki, kj) order) one contiguous pass over the plane's padded-width output rows,
    taking the tap where (v > best) or v is NaN, its index offset (ki*dh*W + kj*dw) kept alongside: for
    an output whose window lies inside the input that is PyTorch's rule exactly (the first valid element
    starts, first maximum on ties, the last NaN).  Outputs whose windows reach into the padding take the
    scalar rule over their valid taps only (_max_at: the padding's -inf must never win a tie)."""
    L = OH * Wq
    KK = KH * KW
    dtab = np.empty(KK, np.int64)
    for k in range(KK):
        dtab[k] = (k // KW) * dh * W + (k % KW) * dw
    # outputs whose windows lie inside the input: rows [r0, r1), columns [c0, c1)
    r0 = min((ph + sh - 1) // sh, OH)
    t = H - 1 - (KH - 1) * dh + ph
    r1 = max(min(t // sh + 1 if t >= 0 else 0, OH), r0)
    c0 = min((pw + sw - 1) // sw, OW)
    t = W - 1 - (KW - 1) * dw + pw
    c1 = max(min(t // sw + 1 if t >= 0 else 0, OW), c0)
    for i in range(xq.size):
        xq[i] = -np.inf
    for p in range(p0, p1):
        xb = p * H * W
        ob = p * OH * OW
        if r0 < r1 and c0 < c1:
            _phase_fill(x, xb, xq, H, W, sh, sw, ph, pw, Hq, Wq)
            s0 = toff[0]
            d0 = dtab[0]
            for i in range(L):
                best[_U(i)] = xq[_U(s0 + i)]
                ib[_U(i)] = d0
            for k in range(1, KK):
                s = toff[k]
                d = dtab[k]
                for i in range(L):
                    v = xq[_U(s + i)]
                    if (v > best[_U(i)]) | (v != v):
                        best[_U(i)] = v
                        ib[_U(i)] = d
        for oh in range(OH):
            hs = oh * sh - ph
            o = ob + oh * OW
            k0 = 0 if hs >= 0 else (-hs + dh - 1) // dh
            k1 = min(KH, (H - hs + dh - 1) // dh)
            lo, hi = (c0, c1) if r0 <= oh < r1 else (OW, OW)
            n = hi - lo
            for ow in range(OW - n):                 # windows reaching into the padding: scalar
                c = ow if ow < lo else ow + n
                bv, bi = _max_at(x, xb, W, KW, dw, hs, dh, k0, k1, c * sw - pw)
                out[o + c] = bv
                idx[o + c] = bi
            # the interior: the passes' winner; its index, the window's origin plus the tap's offset
            s = oh * Wq
            base = hs * W - pw
            for j in range(lo, hi):
                out[_U(o + j)] = best[_U(s + j)]
                idx[_U(o + j)] = base + j * sw + ib[_U(s + j)]


def _maxpool_with_indices(x, res, idx, KH, KW, sh, sw, ph, pw, dh, dw) -> None:
    N, C, H, W = x.shape
    P = N * C
    OH, OW = res.shape[2], res.shape[3]
    Hq, Wq = _wide_geometry(OH, OW, KH, KW, sh, sw, dh, dw)
    toff = _tap_offsets(KH, KW, sh, sw, dh, dw, Hq, Wq)
    L = OH * Wq
    nq = sh * sw * Hq * Wq + ((KW - 1) * dw) // sw + 1      # taps' runs end past their planes: as depthwise
    xf, of, ixf, dt = x.reshape(-1), res.reshape(-1), idx.reshape(-1), x.dtype

    def go(p0, p1):
        buf = _buffer(nq + L, dt, "pool")
        _maxpool_idx_planes(xf, of, ixf, buf[:nq], buf[nq:], _buffer(L, np.int64, "pidx"), toff, H, W, KH, KW,
                            sh, sw, ph, pw, dh, dw, Hq, Wq, OH, OW, p0, p1)
    # estimated ns: as _pool's, each tap a pass (value and index)
    _par_planes(go, P, P * (30 + 2.5 * (H + OH) + 0.1 * nq) + 0.1 * P * L * KH * KW)


@njit(**_NOGIL)
def _adaptive(x, out, idx, H, W, OH, OW, is_max, want_idx, p0, p1, zero):
    """Adaptive max / average pooling of planes [p0, p1); ``zero``: a one-element array of x's dtype holding 0 (the
    sums start from it: ``x[0] * 0`` made one NaN / inf anywhere in the input every output's)."""
    for p in range(p0, p1):
        xb = p * H * W
        ob = p * OH * OW
        for oh in range(OH):
            h0 = (oh * H) // OH
            h1 = ((oh + 1) * H + OH - 1) // OH
            for ow in range(OW):
                w0 = (ow * W) // OW
                w1 = ((ow + 1) * W + OW - 1) // OW
                if is_max:
                    best = -np.inf
                    bi = -1
                    for ih in range(h0, h1):
                        for iw in range(w0, w1):
                            v = x[xb + ih * W + iw]
                            if bi < 0:
                                bi = ih * W + iw
                            if v > best or v != v:
                                best = v
                                bi = ih * W + iw
                    out[ob + oh * OW + ow] = best
                    if want_idx:
                        idx[ob + oh * OW + ow] = bi
                else:
                    acc = zero[0]
                    for ih in range(h0, h1):
                        for iw in range(w0, w1):
                            acc += x[xb + ih * W + iw]
                    out[ob + oh * OW + ow] = acc / ((h1 - h0) * (w1 - w0))


_DUMMY_IDX = np.zeros(1, np.int64)
_DUMMY_DIV = {"f": np.ones(1, np.float32), "d": np.ones(1, np.float64)}


def _planes(x: np.ndarray):
    N, C, H, W = x.shape
    return N * C, H, W


@kernel("max_pool2d", "max_pool2d_with_indices")
def max_pool2d_kernel(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _c(ins[0])
    KH, KW = attrs["kernel_size"]
    sh, sw = attrs["stride"]
    ph, pw = attrs["padding"]
    dh, dw = attrs["dilation"]
    res = _work_out(out)
    if len(outs) > 1:
        ires = _work_out(outs[1])     # (a strided index output, e.g. channels-last: written row-major, copied in)
        _maxpool_with_indices(x, res, ires, KH, KW, sh, sw, ph, pw, dh, dw)
        _finish(outs[1], ires)
    else:
        _pool(x, res, KH, KW, sh, sw, ph, pw, dh, dw, True)
    _finish(out, res)


@kernel("avg_pool2d")
def avg_pool2d_kernel(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _c(ins[0])
    KH, KW = attrs["kernel_size"]
    sh, sw = attrs["stride"]
    ph, pw = attrs["padding"]
    res = _work_out(out)
    cip = bool(attrs["count_include_pad"])
    div = int(attrs["divisor_override"] or 0)
    _pool(x, res, KH, KW, sh, sw, ph, pw, 1, 1, False, cip, div)
    _finish(out, res)


@kernel("adaptive_avg_pool2d", "adaptive_max_pool2d")
def adaptive_pool2d_kernel(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _c(ins[0])
    P, H, W = _planes(x)
    OH, OW = out.shape[2], out.shape[3]
    is_max = attrs["mode"] == "max"
    want = len(outs) > 1
    ires = _work_out(outs[1]) if want else None   # (strided index output: written row-major, copied in)
    idx = ires.reshape(-1) if want else _DUMMY_IDX
    res = _work_out(out)
    xf, of = x.reshape(-1), res.reshape(-1)
    zero = np.zeros(1, xf.dtype)
    _par(lambda p0, p1: _adaptive(xf, of, idx, H, W, OH, OW, is_max, want, p0, p1, zero), P, x.size)
    _finish(out, res)
    if want:
        _finish(outs[1], ires)


# ---------------------------------------------------------------- resampling
def _scale(in_size, out_size, scale, align_corners, dt):
    """PyTorch's area_pixel_compute_scale, in the compute dtype."""
    if align_corners:
        return dt.type((in_size - 1) / (out_size - 1)) if out_size > 1 else dt.type(0)
    if scale is not None and scale > 0:
        return dt.type(1.0 / scale)
    return dt.type(in_size) / dt.type(out_size)


def nearest_index(in_size, out_size, scale, exact) -> np.ndarray:
    """Source index of every output position (PyTorch's nearest / nearest-exact rules, in float32)."""
    f = np.float32
    if not exact:
        if out_size == in_size:
            return np.arange(out_size, dtype=np.int64)
        if out_size == 2 * in_size:
            return np.arange(out_size, dtype=np.int64) >> 1
    s = f(1.0 / scale) if scale is not None and scale > 0 else f(in_size) / f(out_size)
    d = np.arange(out_size, dtype=f)
    src = np.floor((d + f(0.5)) * s) if exact else np.floor(d * s)
    return np.minimum(src.astype(np.int64), in_size - 1)


def linear_weights(in_size, out_size, scale, align_corners, dt):
    """(i0, i1, lambda0, lambda1) per output position: PyTorch's linear source indices, in ``dt``."""
    s = _scale(in_size, out_size, scale, align_corners, dt)
    d = np.arange(out_size, dtype=dt)
    if align_corners:
        src = s * d
    else:
        src = s * (d + dt.type(0.5)) - dt.type(0.5)
        src = np.maximum(src, dt.type(0))
    i0 = src.astype(np.int64)
    i0 = np.minimum(i0, in_size - 1)
    i1 = i0 + (i0 < in_size - 1)
    l1 = np.clip(src - i0.astype(dt), dt.type(0), dt.type(1)).astype(dt)
    l0 = (dt.type(1) - l1).astype(dt)
    return i0, i1, l0, l1


@njit(**_NOGIL)
def _bilinear(x, out, tmp, H, W, OH, OW, h0, h1, lh0, lh1, w0, w1, lw0, lw1, separable, p0, p1):
    # same arithmetic as PyTorch: blend along W first, then t0 * lh0 + t1 * lh1
    for p in range(p0, p1):
        xb = p * H * W
        ob = p * OH * OW
        if separable:
            # each input row is blended along W once (tmp: H x OW), then rows are mixed (vectorized)
            for ih in range(H):
                xr = x[xb + ih * W:xb + (ih + 1) * W]
                tr = tmp[ih * OW:(ih + 1) * OW]
                for ow in range(OW):
                    tr[ow] = xr[w0[ow]] * lw0[ow] + xr[w1[ow]] * lw1[ow]
            for oh in range(OH):
                ta = tmp[h0[oh] * OW:(h0[oh] + 1) * OW]
                tb = tmp[h1[oh] * OW:(h1[oh] + 1) * OW]
                a0 = lh0[oh]
                a1 = lh1[oh]
                orow = out[ob + oh * OW:ob + (oh + 1) * OW]
                for ow in range(OW):
                    orow[ow] = ta[ow] * a0 + tb[ow] * a1
        else:
            for oh in range(OH):
                ra = xb + h0[oh] * W
                rb = xb + h1[oh] * W
                a0 = lh0[oh]
                a1 = lh1[oh]
                o = ob + oh * OW
                for ow in range(OW):
                    c0 = w0[ow]
                    c1 = w1[ow]
                    t0 = x[ra + c0] * lw0[ow] + x[ra + c1] * lw1[ow]
                    t1 = x[rb + c0] * lw0[ow] + x[rb + c1] * lw1[ow]
                    out[o + ow] = t0 * a0 + t1 * a1


@kernel("upsample_nearest2d")
def upsample_nearest2d_kernel(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = ins[0]
    H, W = x.shape[2], x.shape[3]
    OH, OW = out.shape[2], out.shape[3]
    sh, sw = attrs["scales"]
    hi = nearest_index(H, OH, sh, attrs["exact"])
    wi = nearest_index(W, OW, sw, attrs["exact"])
    tmp = np.take(x, hi, axis=2)
    np.take(tmp, wi, axis=3, out=out) if out.flags.c_contiguous and tmp.dtype == out.dtype else \
        np.copyto(out, np.take(tmp, wi, axis=3), casting="unsafe")


@kernel("upsample_bilinear2d")
def upsample_bilinear2d_kernel(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _c(ins[0])
    P, H, W = _planes(x)
    OH, OW = out.shape[2], out.shape[3]
    sh, sw = attrs["scales"]
    ac = attrs["align_corners"]
    dt = x.dtype
    h0, h1, lh0, lh1 = linear_weights(H, OH, sh, ac, dt)
    w0, w1, lw0, lw1 = linear_weights(W, OW, sw, ac, dt)
    res = _work_out(out)
    xf, of = x.reshape(-1), res.reshape(-1)
    sep = 2 * OH >= H

    def go(p0, p1):
        tmp = np.empty(H * OW if sep else 1, dt)
        _bilinear(xf, of, tmp, H, W, OH, OW, h0, h1, lh0, lh1, w0, w1, lw0, lw1, sep, p0, p1)
    _par(go, P, res.size)
    _finish(out, res)
