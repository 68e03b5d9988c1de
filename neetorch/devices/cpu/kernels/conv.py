"""CPU kernels for convolution, pooling and resampling.

Every Numba kernel here works on planes: a C-contiguous (P, H, W) array seen as one
flat buffer, with all sizes and parameters passed as runtime ints, so there is one
compiled specialization per float dtype (float32, float64) and none per shape.
Kernels take a plane range [p0, p1) and are split over threads by the wrappers.

* conv2d: 1x1/stride-1 -> GEMMs on the NCHW buffers (no im2col); depthwise -> direct loop;
  otherwise im2col + GEMM per tile (bands of output rows / groups of images), the threads
  claiming whole tiles, or one tile's im2col split over planes and its GEMM over blocks.
  Every GEMM runs with single-threaded BLAS, split across neetorch's pool (_gemms).
* conv_transpose2d: GEMM into columns + col2im (the adjoint of im2col).
* max/avg pooling: per output row, the interior columns (whole window inside the row) take
  one tap at a time over the row (vector loops); the clamped border columns are scalar.
* float16 inputs are computed in float32 and rounded once at the end.
"""
from __future__ import annotations

import threading

import numpy as np
from numba import njit

from .. import kernel, threads

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
_COL_ALIGN = 16           # column blocks start on 64-byte boundaries (float32)
_BLOCKS_PER_THREAD = 2     # blocks per thread: the claiming pool balances a late or busy worker


_tls = threading.local()


def _buffer(n: int, dt) -> np.ndarray:
    """A per-thread scratch buffer of at least n elements (reused: no page faults on every tile)."""
    key = np.dtype(dt).char
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


def _gemms(jobs) -> None:
    """o = a @ b for every (o, a, b): 2-D views (``o`` BLAS-compatible: unit inner stride) or C-contiguous
    batches.  Serial BLAS; across the pool when large: a few 2-D products are cut into row or column
    blocks (whichever re-packs the smaller operand) for about _BLOCKS_PER_THREAD blocks per thread, many
    products are dealt out in runs of consecutive ones."""
    nt = threads.NUM_THREADS
    flops = 0.0
    for o, a, _ in jobs:
        flops += 2.0 * o.size * a.shape[-1]
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
                for oh in range(oh0, oh1):
                    ih = oh * sh - ph + ki * dh
                    o = base + (oh - oh0) * OW
                    if ih < 0 or ih >= H:
                        col[o:o + OW] = 0
                        continue
                    xr = xb + ih * W + off
                    # slices (not indexed loops): Numba vectorizes these copies
                    col[o:o + lo] = 0
                    if hi <= lo:
                        pass
                    elif sw == 1:
                        col[o + lo:o + hi] = x[xr + lo:xr + hi]
                    else:
                        col[o + lo:o + hi] = x[xr + lo * sw:xr + (hi - 1) * sw + 1:sw]
                    col[o + hi:o + OW] = 0


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
        bv = b[o] if has_bias else 0.0
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
    out = outs[0]
    if out.size == 0:
        return
    x = _c(ins[0])
    w = _c(ins[1], x.dtype)
    b = _c(ins[2], x.dtype) if len(ins) > 2 else None
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
    if Cg == 0:
        res[...] = 0
    elif KH == 1 and KW == 1 and sh == 1 and sw == 1 and pt == pb == pl == pr == 0:
        # 1x1 convolution: one GEMM per (image, group) on the NCHW buffers, no im2col
        wg, xg, og = w.reshape(G, Og, Cg), x.reshape(N, G, Cg, L), res.reshape(N, G, Og, L)
        if N == 1 or G == 1:
            _gemms([(og[n, g], wg[g], xg[n, g]) for n in range(N) for g in range(G)])
        else:
            _gemms([(og[n], wg, xg[n]) for n in range(N)])          # (G, Og, L) batches
    elif Cg == 1 and G == C and KH * KW > 1:
        # depthwise: direct loop, one output plane at a time
        xf = x.reshape(-1)
        wf = w.reshape(-1)
        bf = b if b is not None else np.zeros(1, x.dtype)
        of = res.reshape(-1)
        _par(lambda q0, q1: _depthwise(xf, wf, bf, of, C, O, H, W, KH, KW, sh, sw, pt, pl, dh, dw, OH, OW,
                                       b is not None, q0, q1), N * O, res.size * KH * KW)
        _finish(out, res)
        return
    else:
        # asymmetric pads ('same' with an even kernel): the top/left pad and the output size say it all
        K = Cg * KH * KW
        _conv_tiles(x, w.reshape(G, Og, K), res, G, Og, K, (KH, KW, sh, sw, pt, pl, dh, dw, OH, OW))
    if b is not None:
        res += b.reshape(1, O, 1, 1)
    _finish(out, res)


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

    def tile(t):
        n0, n1, r0, r1 = tiles[t[0]]
        col = _buffer((n1 - n0) * C * KH * KW * (r1 - r0) * OW, x.dtype)
        _im2col(xf[n0 * C * plane:n1 * C * plane], col, H, W, KH, KW, sh, sw, pt, pl, dh, dw, r0, r1, OW,
                0, (n1 - n0) * C)
        _run_jobs(gemm_jobs(n0, n1, r0, r1, col))

    if whole:
        with threads.serial_blas():
            threads.run_parallel(tile, [(i, i + 1) for i in range(len(tiles))])
        return
    for n0, n1, r0, r1 in tiles:
        col = im2col(x[n0:n1].reshape(-1, H, W), KH, KW, sh, sw, pt, pl, dh, dw, OH, OW, r0, r1,
                     col=_buffer((n1 - n0) * C * KH * KW * (r1 - r0) * OW, x.dtype))
        _gemms(gemm_jobs(n0, n1, r0, r1, col.reshape(-1)))


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
def _inner(pad, s, d, K, W, OW):
    """[lo, hi): the output columns whose whole window (K taps, dilation d) lies inside [0, W)."""
    lo = (pad + s - 1) // s
    t = W - 1 - (K - 1) * d + pad
    hi = min(t // s + 1 if t >= 0 else 0, OW)
    lo = min(lo, OW)
    if hi - lo < 4:          # too few for the vector loops to pay off (e.g. global pooling): all scalar
        lo = hi = OW
    return lo, hi


@njit(inline="always", **_NOGIL)
def _max_at(x, xb, W, KW, dw, hs, dh, k0, k1, ws):
    """Max (and its plane index) of one clamped window: the border columns' scalar path."""
    j0 = 0 if ws >= 0 else (-ws + dw - 1) // dw
    j1 = min(KW, (W - ws + dw - 1) // dw)
    bi = (hs + k0 * dh) * W + ws + j0 * dw
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


@njit(**_NOGIL)
def _maxpool(x, out, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, p0, p1):
    # PyTorch's rule: the first valid element starts, then (v > best or v is NaN) takes over.  Taps are
    # visited in the same (ki, kj) order for every output, so the vector loops below (one tap at a time over
    # a whole row of interior outputs) pick exactly the element the scalar rule picks.  Values only: with
    # indices, _maxpool_idx (two functions: the common case compiles only this one, cold)
    lo, hi = _inner(pw, sw, dw, KW, W, OW)
    n = hi - lo
    for p in range(p0, p1):
        xb = p * H * W
        ob = p * OH * OW
        for oh in range(OH):
            hs = oh * sh - ph
            k0 = 0 if hs >= 0 else (-hs + dh - 1) // dh
            k1 = min(KH, (H - hs + dh - 1) // dh)
            o = ob + oh * OW
            for ow in range(OW - n):                       # border columns: clamped windows, scalar
                c = ow if ow < lo else ow + n
                out[o + c] = _max_at(x, xb, W, KW, dw, hs, dh, k0, k1, c * sw - pw)[0]
            if n <= 0:
                continue
            orow = out[o + lo:o + hi]
            for ki in range(k0, k1):
                r = xb + (hs + ki * dh) * W + lo * sw - pw   # tap (ki, 0) of column lo
                for kj in range(KW):
                    xs = x[r + kj * dw:r + kj * dw + (n - 1) * sw + 1]
                    if ki == k0 and kj == 0:
                        for j in range(n):
                            orow[j] = xs[j * sw]
                    elif sw == 1:
                        for j in range(n):
                            v = xs[j]
                            b = orow[j]
                            orow[j] = v if (v > b) | (v != v) else b
                    else:
                        for j in range(n):
                            v = xs[j * sw]
                            b = orow[j]
                            orow[j] = v if (v > b) | (v != v) else b


@njit(**_NOGIL)
def _maxpool_idx(x, out, idx, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, p0, p1):
    """_maxpool with the plane index of every maximum (same visiting order, same rule)."""
    lo, hi = _inner(pw, sw, dw, KW, W, OW)
    n = hi - lo
    for p in range(p0, p1):
        xb = p * H * W
        ob = p * OH * OW
        for oh in range(OH):
            hs = oh * sh - ph
            k0 = 0 if hs >= 0 else (-hs + dh - 1) // dh
            k1 = min(KH, (H - hs + dh - 1) // dh)
            o = ob + oh * OW
            for ow in range(OW - n):
                c = ow if ow < lo else ow + n
                best, bi = _max_at(x, xb, W, KW, dw, hs, dh, k0, k1, c * sw - pw)
                out[o + c] = best
                idx[o + c] = bi
            if n <= 0:
                continue
            orow = out[o + lo:o + hi]
            irow = idx[o + lo:o + hi]
            for ki in range(k0, k1):
                r = (hs + ki * dh) * W + lo * sw - pw       # plane index of tap (ki, 0) for column lo
                for kj in range(KW):
                    s0 = r + kj * dw
                    xs = x[xb + s0:xb + s0 + (n - 1) * sw + 1]
                    if ki == k0 and kj == 0:
                        for j in range(n):
                            orow[j] = xs[j * sw]
                            irow[j] = s0 + j * sw
                    else:
                        for j in range(n):
                            v = xs[j * sw]
                            if (v > orow[j]) | (v != v):
                                orow[j] = v
                                irow[j] = s0 + j * sw


@njit(**_NOGIL)
def _avgpool(x, out, H, W, KH, KW, sh, sw, ph, pw, OH, OW, count_include_pad, divisor, p0, p1):
    # sums run over the window in (row, column) order in x's dtype, for the border columns (scalar) as for
    # the interior ones (whole window inside [0, W)), summed one tap at a time over a row of outputs (vector loops)
    lo, hi = _inner(pw, sw, 1, KW, W, OW)
    n = hi - lo
    for p in range(p0, p1):
        xb = p * H * W
        ob = p * OH * OW
        for oh in range(OH):
            hs = oh * sh - ph
            he = min(hs + KH, H + ph)
            h0 = max(hs, 0)
            h1 = min(he, H)
            o = ob + oh * OW
            for ow in range(OW - n):                       # border columns: clamped windows, scalar
                c = ow if ow < lo else ow + n
                ws = c * sw - pw
                we = min(ws + KW, W + pw)
                w0 = max(ws, 0)
                w1 = min(we, W)
                acc = x[xb + h0 * W + w0]                  # in x's dtype (float32 stays float32, as torch)
                for ih in range(h0, h1):
                    r = xb + ih * W
                    for iw in range(w0, w1):
                        if ih != h0 or iw != w0:
                            acc += x[r + iw]
                if divisor != 0:
                    d = divisor
                elif count_include_pad:
                    d = (he - hs) * (we - ws)
                else:
                    d = (h1 - h0) * (w1 - w0)
                out[o + c] = acc / d
            if n <= 0:
                continue
            orow = out[o + lo:o + hi]
            for ih in range(h0, h1):
                r = xb + ih * W + lo * sw - pw
                for kj in range(KW):
                    xs = x[r + kj:r + kj + (n - 1) * sw + 1]
                    if ih == h0 and kj == 0:
                        for j in range(n):
                            orow[j] = xs[j * sw]
                    elif sw == 1:
                        for j in range(n):
                            orow[j] += xs[j]
                    else:
                        for j in range(n):
                            orow[j] += xs[j * sw]
            if divisor != 0:
                d = divisor
            elif count_include_pad:
                d = (he - hs) * KW
            else:
                d = (h1 - h0) * KW
            for j in range(n):
                orow[j] = orow[j] / d


@njit(**_NOGIL)
def _adaptive(x, out, idx, H, W, OH, OW, is_max, want_idx, p0, p1):
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
                    acc = x[0] * 0
                    for ih in range(h0, h1):
                        for iw in range(w0, w1):
                            acc += x[xb + ih * W + iw]
                    out[ob + oh * OW + ow] = acc / ((h1 - h0) * (w1 - w0))


_DUMMY_IDX = np.zeros(1, np.int64)


def _planes(x: np.ndarray):
    N, C, H, W = x.shape
    return N * C, H, W


@kernel("max_pool2d", "max_pool2d_with_indices")
def max_pool2d_kernel(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _c(ins[0])
    P, H, W = _planes(x)
    OH, OW = out.shape[2], out.shape[3]
    KH, KW = attrs["kernel_size"]
    sh, sw = attrs["stride"]
    ph, pw = attrs["padding"]
    dh, dw = attrs["dilation"]
    res = _work_out(out)
    xf, of = x.reshape(-1), res.reshape(-1)
    if len(outs) > 1:
        idx = outs[1].reshape(-1)
        _par(lambda p0, p1: _maxpool_idx(xf, of, idx, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, p0, p1),
             P, res.size * KH * KW)
    else:
        _par(lambda p0, p1: _maxpool(xf, of, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, p0, p1),
             P, res.size * KH * KW)
    _finish(out, res)


@kernel("avg_pool2d")
def avg_pool2d_kernel(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _c(ins[0])
    P, H, W = _planes(x)
    OH, OW = out.shape[2], out.shape[3]
    KH, KW = attrs["kernel_size"]
    sh, sw = attrs["stride"]
    ph, pw = attrs["padding"]
    res = _work_out(out)
    xf, of = x.reshape(-1), res.reshape(-1)
    cip = bool(attrs["count_include_pad"])
    div = int(attrs["divisor_override"] or 0)
    _par(lambda p0, p1: _avgpool(xf, of, H, W, KH, KW, sh, sw, ph, pw, OH, OW, cip, div, p0, p1),
         P, res.size * KH * KW)
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
    idx = outs[1].reshape(-1) if want else _DUMMY_IDX
    res = _work_out(out)
    xf, of = x.reshape(-1), res.reshape(-1)
    _par(lambda p0, p1: _adaptive(xf, of, idx, H, W, OH, OW, is_max, want, p0, p1), P, x.size)
    _finish(out, res)


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
