"""Winograd convolution F(m x m, 3 x 3) for 3x3 stride-1 undilated ungrouped convolutions (m = 2 or 4).

out = A^T [ (G g G^T) (.) (B^T d B) ] A per m x m output tile (Lavin & Gray, "Fast Algorithms for
Convolutional Neural Networks"): each (m+2) x (m+2) input tile d of every channel is transformed
(B^T d B), the (m+2)^2 transformed positions xi become (m+2)^2 independent GEMMs over channels
(U[xi] (O x C) @ V[xi] (C x tiles): (m+2)^2 / (9 m^2) of the direct multiply-adds, 1/2.25 for F(2,2)
and 1/4 for F(4,4)), and the products are transformed back (A^T M A) into the output, bias added.

* weights: U = G g G^T, computed in float64 once per weight tensor and cached (``weights``): keyed by
  the array's buffer address, shape, dtype and m, reused only while the weights are unchanged (the
  cache keeps a copy and compares it bitwise on every call: a pass over 2x the 3x3 weights, against
  the GEMMs' reads of U, 16/9 or 4x them); an entry goes when the memory of its weights is freed, or
  least recently used past _CACHE_BYTES; weights found changed on two calls in a row (being trained)
  are marked and left to the GEMM paths (``weights`` returns None).
* input tiles: each input plane (or band of tile rows of it) is zero-padded into a scratch plane
  holding every tile whole, then per tile row the rows are transformed (B^T along the width, over the
  tiles of the row) and then the columns, all tiles of the plane at once, written to V[xi, c, tile]
  (contiguous over tiles: the GEMM's operand).
* output: per (image, output channel) the inverse transform of M[xi, o, tiles] along the height for
  all tiles at once, then along the width into the output rows, clipped at the last tile row /
  column, bias added.

Kernels take plane ranges; the caller (conv.py) splits them over threads and runs the GEMMs.
float32 F(4,4) loses a few bits against the direct sum (entries up to 8 in A and 5 in B): max |err| /
max |out| ~1e-6 to 7e-6 on random data (F(2,2): ~1e-7 to 6e-7, as the direct sum);
tests/test_conv_perf_paths.py checks both against torch in float64.
"""
from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict

import numpy as np
from numba import carray, njit

_NOGIL = dict(cache=True, nogil=True)

# G (alpha x 3) of each tile size m: U = G g G^T
_G = {
    2: np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float64),
    4: np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                 [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64),
}
# B^T and A^T (the kernels below spell them out; the tests check the three matrices)
BT = {
    2: np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
    4: np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                 [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
}
AT = {
    2: np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64),
    4: np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64),
}
G = _G


# ---------------------------------------------------------------- weights
# cached weights + U of a whole network stay resident (VGG-19: ~400 MB): least recently used entries go
# past this many bytes (NEE_WINOGRAD_CACHE_MB)
_CACHE_BYTES = int(float(os.environ.get("NEE_WINOGRAD_CACHE_MB", "1024")) * (1 << 20))
_cache: OrderedDict = OrderedDict()     # key -> [copy of the weights, U, calls in a row that found them changed]
_cache_bytes = [0]
_cache_lock = threading.Lock()


def transform_weights(w: np.ndarray, m: int) -> np.ndarray:
    """U (alpha^2, O, C) = G g G^T of w (O, C, 3, 3), in float64, returned in w's dtype (C-contiguous)."""
    g = _G[m]
    a = m + 2
    O, C = w.shape[0], w.shape[1]
    n = O * C
    # two GEMMs with K = 3 (an einsum took ~20x as long: 1.2 s for 512x512 filters)
    t = (g @ w.reshape(n, 3, 3).astype(np.float64).transpose(1, 0, 2).reshape(3, n * 3)).reshape(a * n, 3)
    u = (t @ g.T).reshape(a, n, a)                           # u[i, filter, l]
    return np.ascontiguousarray(u.transpose(0, 2, 1).reshape(a * a, O, C), dtype=w.dtype)


@njit(**_NOGIL)
def _same(a, b):
    """a == b bitwise (int views of the same size); stops at the first difference."""
    n = a.size
    step = 4096
    for s in range(0, n, step):
        e = min(n, s + step)
        av = a[s:e]
        bv = b[s:e]
        d = av[0] ^ av[0]
        for i in range(e - s):                 # 0-based over views: vectorized
            d |= av[i] ^ bv[i]
        if d != 0:
            return False
    return True


def _bits(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.int32 if a.itemsize == 4 else np.int64)


# buffers whose owner promised they never change while they live (:func:`freeze`): (address, bytes) -> True
_frozen: dict = {}


def freeze(a: np.ndarray) -> bool:
    """Mark ``a``'s memory as never changing while the object owning it lives (the caller's promise: ONNX
    initializers and the JIT's frozen constants, which nobody else can reach).  The cached transforms of a
    frozen buffer (:func:`weights`: Winograd U, conv_direct's packed weights) are then used without the
    bitwise check against a kept copy (a pass over 2x the weights on every call: ~6 ms of a ResNet-50 run)
    and without keeping that copy.  The mark goes with the owner's memory.  False (nothing marked) when the
    owner cannot be weakly referenced (its end could not be seen) or ``a`` is not a contiguous array (C
    or Fortran order: a column-major weight, kernels/gemv.py)."""
    if not isinstance(a, np.ndarray) or not (a.flags.c_contiguous or a.flags.f_contiguous) or a.size == 0:
        return False
    owner = _owner(a)
    if owner is None:
        return False
    key = (a.__array_interface__["data"][0], a.nbytes)
    if key not in _frozen:
        _frozen[key] = True
        weakref.finalize(owner, _frozen.pop, key, None)
    return True


def is_frozen(a: np.ndarray) -> bool:
    return (a.__array_interface__["data"][0], a.nbytes) in _frozen


def weights(w: np.ndarray, m, transform=None):
    """The cached U of w (C-contiguous (O, C, 3, 3)) for F(m, 3), recomputed when w's contents changed; None
    once they have changed on _VOLATILE calls in a row (weights being trained: each call would transform
    them again; the caller takes the GEMM path for this buffer).  ``transform(w, m)``: another packing of w
    cached the same way (kernels/conv_direct.py; ``m`` then a hashable tag naming it).  Buffers marked by
    :func:`freeze` are not compared (nor copied)."""
    addr = w.__array_interface__["data"][0]
    key = (addr, w.shape, w.dtype.char, m)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
    frozen = (addr, w.nbytes) in _frozen
    misses = 0
    if hit is not None:
        if hit[1] is None:
            return None
        if frozen or (hit[0] is not None and _same(_bits(hit[0]), _bits(w))):
            if hit[2]:
                hit[2] = 0
            return hit[1]
        misses = hit[2] + 1
    if misses >= _VOLATILE:
        ent = [None, None, misses]
        u = None
    else:
        u = (transform or transform_weights)(w, m)
        ent = [None if frozen else w.copy(), u, misses]
    with _cache_lock:
        old = _cache.pop(key, None)
        if old is not None:
            _cache_bytes[0] -= _nbytes(old)
        _cache[key] = ent
        _cache_bytes[0] += _nbytes(ent)
        while _cache_bytes[0] > _CACHE_BYTES and len(_cache) > 1:
            _, old = _cache.popitem(last=False)
            _cache_bytes[0] -= _nbytes(old)
    if hit is None:
        # the entry goes with the memory it describes (weights made anew each step leave no garbage behind)
        owner = _owner(w)
        if owner is not None:
            weakref.finalize(owner, _drop, key)
    return u


def _owner(w: np.ndarray):
    """The object owning w's memory, when it can be weakly referenced (else None: the entry stays until
    the least-recently-used rule drops it)."""
    o = w
    while isinstance(o, np.ndarray) and o.base is not None:
        o = o.base
    try:
        weakref.ref(o)
    except TypeError:
        return None
    return o


def _drop(key) -> None:
    with _cache_lock:
        ent = _cache.pop(key, None)
        if ent is not None:
            _cache_bytes[0] -= _nbytes(ent)


# weights found changed on this many calls in a row are not transformed any more
_VOLATILE = 2


def _nbytes(ent) -> int:
    return 0 if ent[1] is None else (0 if ent[0] is None else ent[0].nbytes) + ent[1].nbytes


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()
        _cache_bytes[0] = 0


# ---------------------------------------------------------------- input transform
@njit(**_NOGIL)
def _input4(xp, V, Wp, th, tw, CNT, base, tmp):
    """Transformed tiles of one zero-padded plane xp (flat, rows of Wp): V[xi * CNT + base + tile] (tile =
    ti * tw + tj).  tmp: 36 * th * tw.  (All loops are 0-based over views: no negative-index checks, so
    LLVM vectorizes them.)"""
    T = th * tw
    for ti in range(th):
        # B^T along the width of the tile row's 6 input rows, all its tiles at once -> tmp[r, k, tile]
        for r in range(6):
            row = xp[(ti * 4 + r) * Wp:(ti * 4 + r + 1) * Wp]
            s0 = row[0:4 * tw:4]
            s1 = row[1:1 + 4 * tw:4]
            s2 = row[2:2 + 4 * tw:4]
            s3 = row[3:3 + 4 * tw:4]
            s4 = row[4:4 + 4 * tw:4]
            s5 = row[5:5 + 4 * tw:4]
            o = (r * 6) * T + ti * tw
            o0 = tmp[o:o + tw]
            o1 = tmp[o + T:o + T + tw]
            o2 = tmp[o + 2 * T:o + 2 * T + tw]
            o3 = tmp[o + 3 * T:o + 3 * T + tw]
            o4 = tmp[o + 4 * T:o + 4 * T + tw]
            o5 = tmp[o + 5 * T:o + 5 * T + tw]
            for tj in range(tw):
                d1 = s1[tj]
                d2 = s2[tj]
                d3 = s3[tj]
                d4 = s4[tj]
                a = d4 - 4 * d2
                b = d3 - 4 * d1
                c = d4 - d2
                e = 2 * (d3 - d1)
                o0[tj] = 4 * s0[tj] - 5 * d2 + d4
                o1[tj] = a + b
                o2[tj] = a - b
                o3[tj] = c + e
                o4[tj] = c - e
                o5[tj] = 4 * d1 - 5 * d3 + s5[tj]
    # B^T along the height, every tile of the plane at once -> V[(k1 * 6 + k2), c, tile]
    for k in range(6):
        i0 = tmp[k * T:(k + 1) * T]
        i1 = tmp[(6 + k) * T:(7 + k) * T]
        i2 = tmp[(12 + k) * T:(13 + k) * T]
        i3 = tmp[(18 + k) * T:(19 + k) * T]
        i4 = tmp[(24 + k) * T:(25 + k) * T]
        i5 = tmp[(30 + k) * T:(31 + k) * T]
        v0 = V[k * CNT + base:k * CNT + base + T]
        v1 = V[(6 + k) * CNT + base:(6 + k) * CNT + base + T]
        v2 = V[(12 + k) * CNT + base:(12 + k) * CNT + base + T]
        v3 = V[(18 + k) * CNT + base:(18 + k) * CNT + base + T]
        v4 = V[(24 + k) * CNT + base:(24 + k) * CNT + base + T]
        v5 = V[(30 + k) * CNT + base:(30 + k) * CNT + base + T]
        for t in range(T):
            d1 = i1[t]
            d2 = i2[t]
            d3 = i3[t]
            d4 = i4[t]
            a = d4 - 4 * d2
            b = d3 - 4 * d1
            c = d4 - d2
            e = 2 * (d3 - d1)
            v0[t] = 4 * i0[t] - 5 * d2 + d4
            v1[t] = a + b
            v2[t] = a - b
            v3[t] = c + e
            v4[t] = c - e
            v5[t] = 4 * d1 - 5 * d3 + i5[t]


@njit(**_NOGIL)
def _input2(xp, V, Wp, th, tw, CNT, base, tmp):
    """As _input4 for F(2, 3) (4 x 4 input tiles at a step of 2); tmp: 16 * th * tw."""
    T = th * tw
    for ti in range(th):
        for r in range(4):
            row = xp[(ti * 2 + r) * Wp:(ti * 2 + r + 1) * Wp]
            s0 = row[0:2 * tw:2]
            s1 = row[1:1 + 2 * tw:2]
            s2 = row[2:2 + 2 * tw:2]
            s3 = row[3:3 + 2 * tw:2]
            o = (r * 4) * T + ti * tw
            o0 = tmp[o:o + tw]
            o1 = tmp[o + T:o + T + tw]
            o2 = tmp[o + 2 * T:o + 2 * T + tw]
            o3 = tmp[o + 3 * T:o + 3 * T + tw]
            for tj in range(tw):
                d1 = s1[tj]
                d2 = s2[tj]
                o0[tj] = s0[tj] - d2
                o1[tj] = d1 + d2
                o2[tj] = d2 - d1
                o3[tj] = d1 - s3[tj]
    for k in range(4):
        i0 = tmp[k * T:(k + 1) * T]
        i1 = tmp[(4 + k) * T:(5 + k) * T]
        i2 = tmp[(8 + k) * T:(9 + k) * T]
        i3 = tmp[(12 + k) * T:(13 + k) * T]
        v0 = V[k * CNT + base:k * CNT + base + T]
        v1 = V[(4 + k) * CNT + base:(4 + k) * CNT + base + T]
        v2 = V[(8 + k) * CNT + base:(8 + k) * CNT + base + T]
        v3 = V[(12 + k) * CNT + base:(12 + k) * CNT + base + T]
        for t in range(T):
            d1 = i1[t]
            d2 = i2[t]
            v0[t] = i0[t] - d2
            v1[t] = d1 + d2
            v2[t] = d2 - d1
            v3[t] = d1 - i3[t]


@njit(**_NOGIL)
def input_tiles(x, V, xp, tmp, m, C, H, W, ph, pw, ti0, th, tw, NT, tstride, p0, p1):
    """V (alpha^2, C, NT) flat: the transformed tiles of tile rows [ti0, ti0 + th) of planes [p0, p1) of x
    (N*C, H, W) flat (plane p = image p // C, channel p % C; image n's tiles at columns n*tstride ...).
    xp: a scratch plane of (th*m + 2) * (tw*m + 2) elements, tmp: alpha^2 * th * tw."""
    Hp = th * m + 2
    Wp = tw * m + 2
    r0 = ti0 * m - ph                  # the input row of the scratch plane's first row
    for p in range(p0, p1):
        n = p // C
        c = p - n * C
        # the zero-padded rows: input rows r0.., columns from -pw (cropped to the tiles' extent)
        h0 = max(0, -r0)               # first scratch row holding an input row
        h1 = max(h0, min(Hp, H - r0))  # and one past the last
        ww = min(W, Wp - pw)
        top = xp[:h0 * Wp]
        for i in range(h0 * Wp):
            top[i] = 0
        bot = xp[h1 * Wp:]
        for i in range((Hp - h1) * Wp):
            bot[i] = 0
        for i in range(h0, h1):
            ih = r0 + i
            src = x[p * H * W + ih * W:p * H * W + ih * W + ww]
            drow = xp[i * Wp:(i + 1) * Wp]
            for j in range(pw):
                drow[j] = 0
            dst = drow[pw:pw + ww]
            for j in range(ww):
                dst[j] = src[j]
            rest = drow[pw + ww:]
            for j in range(Wp - pw - ww):
                rest[j] = 0
        if m == 4:
            _input4(xp, V, Wp, th, tw, C * NT, c * NT + n * tstride, tmp)
        else:
            _input2(xp, V, Wp, th, tw, C * NT, c * NT + n * tstride, tmp)


# ---------------------------------------------------------------- output transform
@njit(**_NOGIL)
def output_tiles(M, out, tmp, bias, has_bias, m, O, Oall, o0, OH, OW, ti0, th, tw, NT, tstride, q0, q1,
                 relu=False):
    """Output channels [o0, o0 + O) of out (N, Oall, OH, OW) flat from the products M (alpha^2, O, NT) of
    those channels for tile rows [ti0, ti0 + th) (image n's tiles at columns n*tstride ...): planes
    [q0, q1) of them (image q // O, channel o0 + q % O) = A^T M[:, o, tiles] A (+ bias), the last tile row
    / column clipped; ``relu``: then torch's relu over the rows written (while in cache).
    tmp: m * (m + 2) * th * tw."""
    a = m + 2
    T = th * tw
    ON = O * NT
    fw = OW // m                       # whole tiles per output row
    for q in range(q0, q1):
        n = q // O
        o = q - n * O
        p = n * Oall + o0 + o          # the output plane
        bv = bias[o0 + o] if has_bias else M[0] * 0
        base = o * NT + n * tstride
        # A^T along the height, every tile at once: tmp[i, k2, tile] = sum_k1 A^T[i, k1] M[k1 * a + k2, o, tile]
        for k in range(a):
            if m == 4:
                i0 = M[k * ON + base:k * ON + base + T]
                i1 = M[(6 + k) * ON + base:(6 + k) * ON + base + T]
                i2 = M[(12 + k) * ON + base:(12 + k) * ON + base + T]
                i3 = M[(18 + k) * ON + base:(18 + k) * ON + base + T]
                i4 = M[(24 + k) * ON + base:(24 + k) * ON + base + T]
                i5 = M[(30 + k) * ON + base:(30 + k) * ON + base + T]
                t0 = tmp[k * T:(k + 1) * T]
                t1 = tmp[(6 + k) * T:(7 + k) * T]
                t2 = tmp[(12 + k) * T:(13 + k) * T]
                t3 = tmp[(18 + k) * T:(19 + k) * T]
                for t in range(T):
                    m1 = i1[t]
                    m2 = i2[t]
                    m3 = i3[t]
                    m4 = i4[t]
                    s1 = m1 + m2
                    s2 = m3 + m4
                    d1 = m1 - m2
                    d2 = m3 - m4
                    t0[t] = i0[t] + s1 + s2
                    t1[t] = d1 + 2 * d2
                    t2[t] = s1 + 4 * s2
                    t3[t] = d1 + 8 * d2 + i5[t]
            else:
                i0 = M[k * ON + base:k * ON + base + T]
                i1 = M[(4 + k) * ON + base:(4 + k) * ON + base + T]
                i2 = M[(8 + k) * ON + base:(8 + k) * ON + base + T]
                i3 = M[(12 + k) * ON + base:(12 + k) * ON + base + T]
                t0 = tmp[k * T:(k + 1) * T]
                t1 = tmp[(4 + k) * T:(5 + k) * T]
                for t in range(T):
                    m1 = i1[t]
                    m2 = i2[t]
                    t0[t] = i0[t] + m1 + m2
                    t1[t] = m1 - m2 - i3[t]
        # A^T along the width, into the output rows (whole tiles vectorized, the last one clipped)
        for ti in range(th):
            for i in range(m):
                oh = (ti0 + ti) * m + i
                if oh >= OH:
                    break
                orow = out[(p * OH + oh) * OW:(p * OH + oh + 1) * OW]
                r = i * a * T + ti * tw
                if m == 4:
                    j0 = tmp[r:r + tw]
                    j1 = tmp[r + T:r + T + tw]
                    j2 = tmp[r + 2 * T:r + 2 * T + tw]
                    j3 = tmp[r + 3 * T:r + 3 * T + tw]
                    j4 = tmp[r + 4 * T:r + 4 * T + tw]
                    j5 = tmp[r + 5 * T:r + 5 * T + tw]
                    y0 = orow[0:4 * fw:4]
                    y1 = orow[1:4 * fw:4]
                    y2 = orow[2:4 * fw:4]
                    y3 = orow[3:4 * fw:4]
                    for tj in range(fw):
                        m1 = j1[tj]
                        m2 = j2[tj]
                        m3 = j3[tj]
                        m4 = j4[tj]
                        s1 = m1 + m2
                        s2 = m3 + m4
                        d1 = m1 - m2
                        d2 = m3 - m4
                        y0[tj] = j0[tj] + s1 + s2 + bv
                        y1[tj] = d1 + 2 * d2 + bv
                        y2[tj] = s1 + 4 * s2 + bv
                        y3[tj] = d1 + 8 * d2 + j5[tj] + bv
                    if fw < tw:
                        tj = fw
                        m1 = j1[tj]
                        m2 = j2[tj]
                        m3 = j3[tj]
                        m4 = j4[tj]
                        s1 = m1 + m2
                        s2 = m3 + m4
                        d1 = m1 - m2
                        d2 = m3 - m4
                        j = 4 * fw
                        orow[j] = j0[tj] + s1 + s2 + bv
                        if j + 1 < OW:
                            orow[j + 1] = d1 + 2 * d2 + bv
                        if j + 2 < OW:
                            orow[j + 2] = s1 + 4 * s2 + bv
                else:
                    j0 = tmp[r:r + tw]
                    j1 = tmp[r + T:r + T + tw]
                    j2 = tmp[r + 2 * T:r + 2 * T + tw]
                    j3 = tmp[r + 3 * T:r + 3 * T + tw]
                    y0 = orow[0:2 * fw:2]
                    y1 = orow[1:2 * fw:2]
                    for tj in range(fw):
                        m1 = j1[tj]
                        m2 = j2[tj]
                        y0[tj] = j0[tj] + m1 + m2 + bv
                        y1[tj] = m1 - m2 - j3[tj] + bv
                    if fw < tw:
                        orow[2 * fw] = j0[fw] + j1[fw] + j2[fw] + bv
        if relu:
            r1 = min(OH, (ti0 + th) * m)
            if r1 > ti0 * m:
                ys = out[(p * OH + ti0 * m) * OW:(p * OH + r1) * OW]
                for j in range(ys.size):   # a select, not a conditional store: vectorizes (conv._bias_act)
                    v = ys[j]
                    ys[j] = 0.0 if v < 0 else v


# ---------------------------------------------------------------- the phases as native tasks
# conv.py runs the input and output transforms of small convolutions as gemm_driver call jobs (the GEMMs in
# between as one batched driver product): the driver's native workers, woken in a few us, where the Python
# pool's two hand-offs per convolution (~60 us each) cost 15-30% of a 14x14 layer on 2 threads.  Each task is
# a Numba cfunc ``task(x, y, scratch, meta)`` over one row of per-task metas (``META`` int64 words): the plane
# range it transforms and the offset of its own scratch; sizes are runtime values (one machine-code function
# per phase and dtype, compiled once, cached on disk by Numba).
META = 16
(_M_M, _M_C, _M_H, _M_W, _M_PH, _M_PW, _M_TH, _M_TW, _M_NT, _M_XLEN, _M_YLEN, _M_SLEN, _M_P0, _M_P1, _M_SOFF,
 _M_FLAGS) = range(META)


def _in_task_py(x, V, s, meta):
    """Input transform of planes [p0, p1): V (alpha^2, C, NT) from x (N*C, H, W); meta words as ``_M_*``
    (output: C = input channels)."""
    mt = carray(meta, (META,))
    m, C, H, W, ph, pw, th, tw, NT = mt[0], mt[1], mt[2], mt[3], mt[4], mt[5], mt[6], mt[7], mt[8]
    xa = carray(x, (mt[9],))
    Va = carray(V, (mt[10],))
    sa = carray(s, (mt[11],))
    plane = (th * m + 2) * (tw * m + 2)
    so = mt[14]
    input_tiles(xa, Va, sa[so:so + plane], sa[so + plane:so + plane + (m + 2) * (m + 2) * th * tw], m, C, H, W,
                ph, pw, 0, th, tw, NT, th * tw, mt[12], mt[13])


def _out_task_py(M, out, s, meta):
    """Output transform of output planes [q0, q1) from M (alpha^2, O, NT); meta words as ``_M_*`` (C = output
    channels, H, W = OH, OW; flags bit 0: a bias, bit 1: relu); the bias is the scratch's first O elements."""
    mt = carray(meta, (META,))
    m, O, OH, OW, th, tw, NT = mt[0], mt[1], mt[2], mt[3], mt[6], mt[7], mt[8]
    Ma = carray(M, (mt[9],))
    oa = carray(out, (mt[10],))
    sa = carray(s, (mt[11],))
    so = mt[14]
    output_tiles(Ma, oa, sa[so:so + m * (m + 2) * th * tw], sa[:O], (mt[15] & 1) != 0, m, O, O, 0, OH, OW, 0, th,
                 tw, NT, th * tw, mt[12], mt[13], (mt[15] & 2) != 0)


_tasks: dict = {}            # (phase, dtype char) -> address of the compiled cfunc
_task_fns: list = []         # the cfunc objects (kept alive: their machine code stays mapped)
_tasks_lock = threading.Lock()


def task_addr(phase: str, dt) -> int:
    """Address of the cfunc ``task(x, y, scratch, meta)`` of ``phase`` ("in" / "out") for float dtype ``dt``
    (compiled on first use)."""
    key = (phase, np.dtype(dt).char)
    a = _tasks.get(key)
    if a is None:
        with _tasks_lock:
            a = _tasks.get(key)
            if a is None:
                from numba import cfunc, types
                fp = types.CPointer(types.float32 if key[1] == "f" else types.float64)
                sig = types.void(fp, fp, fp, types.CPointer(types.int64))
                fn = cfunc(sig, cache=True)(_in_task_py if phase == "in" else _out_task_py)
                _task_fns.append(fn)
                a = _tasks[key] = fn.address
    return a
