"""CPU kernels for convolution, pooling and resampling.

Every Numba kernel here works on planes: a C-contiguous (P, H, W) array seen as one
flat buffer, with all sizes and parameters passed as runtime ints, so there is one
compiled specialization per float dtype (float32, float64) and none per shape.
Kernels take a plane range [p0, p1) and are split over threads by the wrappers.

* conv2d: 1x1/stride-1 -> one GEMM (no im2col); depthwise -> direct loop;
  otherwise im2col (Numba, parallel over planes) + one batched GEMM (BLAS).
* conv_transpose2d: GEMM into columns + col2im (the adjoint of im2col).
* float16 inputs are computed in float32 and rounded once at the end.
"""
from __future__ import annotations

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


# ---------------------------------------------------------------- helpers
def _find_blas_threads():
    """(get, set) of the OpenBLAS bundled with numpy, or None (then GEMMs keep BLAS's own threading)."""
    try:
        import ctypes
        import glob
        import os
        d = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
        libs = glob.glob(os.path.join(d, "libscipy_openblas*.so*")) + glob.glob(os.path.join(d, "libopenblas*.so*"))
        for p in sorted(libs):
            lib = ctypes.CDLL(p)
            for pre in ("scipy_openblas", "openblas"):
                for suf in ("64_", ""):
                    g = getattr(lib, f"{pre}_get_num_threads{suf}", None)
                    s = getattr(lib, f"{pre}_set_num_threads{suf}", None)
                    if g is not None and s is not None:
                        return g, s
    except Exception:  # noqa: BLE001 - any failure just disables the optimisation
        pass
    return None


_BLAS = _find_blas_threads()


class _SerialBlas:
    """Within the block, BLAS runs on the calling thread (our threads split the work instead)."""

    def __enter__(self):
        self.n = _BLAS[0]()
        if self.n != 1:
            _BLAS[1](1)
        return self

    def __exit__(self, *a):
        if self.n != 1:
            _BLAS[1](self.n)
        return False


def _c(a: np.ndarray, dt=None) -> np.ndarray:
    """C-contiguous, float16 widened to float32 (or cast to ``dt``)."""
    if dt is None:
        dt = _F32 if a.dtype == _F16 else a.dtype
    return np.ascontiguousarray(a, dtype=dt)


def _par(fn, nplanes: int, work: int) -> None:
    """Run fn(p0, p1) over [0, nplanes), split across threads when the work is large."""
    if nplanes <= 0:
        return
    if work < threads.PARALLEL_THRESHOLD or threads.NUM_THREADS <= 1 or nplanes == 1:
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
    _par(lambda p0, p1: _im2col(xf, col, H, W, KH, KW, sh, sw, ph, pw, dh, dw, oh0, oh1, OW, p0, p1), P, n)
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
        # 1x1 convolution: a plain (batched) GEMM, no im2col
        np.matmul(w.reshape(G, Og, Cg), x.reshape(N, G, Cg, H * W), out=res.reshape(N, G, Og, L))
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
    image (large images), sized so the columns stay in cache.  With several threads each thread owns
    whole tiles (its own column buffer, BLAS on the calling thread): the only sync is the final join."""
    KH, KW, sh, sw, pt, pl, dh, dw, OH, OW = geo
    N, C, H, W = x.shape
    L = OH * OW
    row = C * KH * KW * OW               # column elements per output row of one image
    nt = threads.NUM_THREADS if _BLAS is not None else 1
    if row * OH <= _TILE:
        nb = max(1, _TILE // (row * OH))
        if nt > 1:
            nb = max(1, min(nb, -(-N // nt)))
        tiles = [(n, min(N, n + nb), 0, OH) for n in range(0, N, nb)]
        size = nb * row * OH
    else:
        bands = -(-(OH * row) // _TILE)          # bands of rows per image
        if nt > 1 and N < nt:
            bands = -(-bands // nt) * nt          # a whole number of bands per thread (balance)
        rows = max(1, -(-OH // bands))
        tiles = [(n, n + 1, r0, min(OH, r0 + rows)) for n in range(N) for r0 in range(0, OH, rows)]
        size = rows * row
    xf = x.reshape(-1)
    plane = H * W
    serial = nt > 1 and len(tiles) > 1

    def work(chunk):
        buf = np.empty(size, x.dtype)
        for n0, n1, r0, r1 in tiles[chunk[0]:chunk[1]]:
            lt = (r1 - r0) * OW
            col = buf[:(n1 - n0) * C * KH * KW * lt]
            if serial:
                _im2col(xf[n0 * C * plane:n1 * C * plane], col, H, W, KH, KW, sh, sw, pt, pl, dh, dw, r0, r1, OW,
                        0, (n1 - n0) * C)
            else:
                im2col(x[n0:n1].reshape(-1, H, W), KH, KW, sh, sw, pt, pl, dh, dw, OH, OW, r0, r1, col=buf)
            if n1 - n0 == 1:
                # drop the size-1 batch dim: numpy's matmul leaves BLAS for a strided 4-D `out` (~100x slower)
                o = res[n0].reshape(G, Og, L)
                if lt != L:
                    o = o[:, :, r0 * OW:r1 * OW]
                if G == 1:
                    np.matmul(wg[0], col.reshape(K, lt), out=o[0])
                else:
                    np.matmul(wg, col.reshape(G, K, lt), out=o)
            else:
                np.matmul(wg, col.reshape(n1 - n0, G, K, lt), out=res[n0:n1].reshape(n1 - n0, G, Og, L))

    if serial:
        with _SerialBlas():
            threads.run_parallel(work, threads.split(len(tiles), nt))
    else:
        work((0, len(tiles)))


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
            col = np.matmul(wt, x[n0:n1].reshape(n1 - n0, G, Cig, L))   # (nb, G, M, L)
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
@njit(**_NOGIL)
def _maxpool(x, out, idx, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, want_idx, p0, p1):
    # PyTorch's rule: the first valid element starts, then (v > best or v is NaN) takes over
    for p in range(p0, p1):
        xb = p * H * W
        ob = p * OH * OW
        for oh in range(OH):
            hs = oh * sh - ph
            k0 = 0 if hs >= 0 else (-hs + dh - 1) // dh
            k1 = min(KH, (H - hs + dh - 1) // dh)
            for ow in range(OW):
                ws = ow * sw - pw
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
                out[ob + oh * OW + ow] = best
                if want_idx:
                    idx[ob + oh * OW + ow] = bi


@njit(**_NOGIL)
def _avgpool(x, out, H, W, KH, KW, sh, sw, ph, pw, OH, OW, count_include_pad, divisor, p0, p1):
    for p in range(p0, p1):
        xb = p * H * W
        ob = p * OH * OW
        for oh in range(OH):
            hs = oh * sh - ph
            he = min(hs + KH, H + ph)
            for ow in range(OW):
                ws = ow * sw - pw
                we = min(ws + KW, W + pw)
                size = (he - hs) * (we - ws)
                h0 = max(hs, 0)
                h1 = min(he, H)
                w0 = max(ws, 0)
                w1 = min(we, W)
                acc = x[0] * 0
                for ih in range(h0, h1):
                    r = xb + ih * W
                    for iw in range(w0, w1):
                        acc += x[r + iw]
                if divisor != 0:
                    d = divisor
                elif count_include_pad:
                    d = size
                else:
                    d = (h1 - h0) * (w1 - w0)
                out[ob + oh * OW + ow] = acc / d


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
    want = len(outs) > 1
    idx = outs[1].reshape(-1) if want else _DUMMY_IDX
    xf, of = x.reshape(-1), res.reshape(-1)
    _par(lambda p0, p1: _maxpool(xf, of, idx, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, want, p0, p1),
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
