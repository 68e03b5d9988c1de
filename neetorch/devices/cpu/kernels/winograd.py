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
  are marked and left to the GEMM paths (``weights`` returns None).  So are weights whose U is not all finite
  (an inf / NaN weight: checked once per transform, kept in the entry), see below.
* non-finite values: the transforms mix every value of a tile into every output of it (inf - inf = NaN), where
  the direct sum (torch) spreads an inf / NaN input only to the outputs whose 3x3 window holds it.  The input
  transform therefore reports whether an input value it read is inf / NaN (``input_tiles``' result; the tasks'
  meta word _M_FLAGS; integer tests on the exponent bits of each zero-padded plane while it is in cache, _EXP:
  ~2-6% of the input transform's time, ~0.5% of a conv's), and conv.py then runs that call on a GEMM path;
  weights whose U is not finite are never taken (``weights``).
* input tiles: each input plane (or band of tile rows of it) is zero-padded into a scratch plane
  holding every tile whole, then per tile row the rows are transformed (B^T along the width, over the
  tiles of the row) and then the columns, all tiles of the plane at once, written to V[xi, c, tile]
  (contiguous over tiles: the GEMM's operand).
* output: per (image, output channel) the inverse transform of M[xi, o, tiles] along the height for
  all tiles at once, then along the width into the output rows, clipped at the last tile row /
  column, bias added.

Kernels take plane ranges; the caller (conv.py) splits them over threads and runs the GEMMs.  The transforms
(input_tiles, output_tiles, the native tasks of task_addr) and the weights' bitwise check (_same) are LLVM IR
kernels with the Numba kernels' arithmetic bit for bit (the end of this file; NEE_WINO_IR=0: the Numba ones), so
that a session never initializes Numba for them (~1 s of a first run).
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
# Entries leave the cache under _cache_lock but are released after it: an entry's last reference can be an
# array that is itself a cached transform's weight (Winograd U, which conv_direct packs: its owner carries
# weakref.finalize(_drop)), and _drop, run when that array dies, takes the lock (not reentrant): dropped inside it,
# the eviction of such an entry deadlocked the process
_cache_lock = threading.Lock()


def transform_weights(w: np.ndarray, m: int) -> np.ndarray:
    """U (alpha^2, O, C) = G g G^T of w (O, C, 3, 3), in float64, returned in w's dtype (C-contiguous)."""
    g = _G[m]
    a = m + 2
    O, C = w.shape[0], w.shape[1]
    n = O * C
    # two GEMMs with K = 3 (an einsum took ~20x as long: 1.2 s for 512x512 filters); an inf / NaN weight gives a U
    # that is not finite (weights() then keeps it off Winograd): no warning for it
    with np.errstate(invalid="ignore", over="ignore"):
        t = (g @ w.reshape(n, 3, 3).astype(np.float64).transpose(1, 0, 2).reshape(3, n * 3)).reshape(a * n, 3)
        u = (t @ g.T).reshape(a, n, a)                           # u[i, filter, l]
        return np.ascontiguousarray(u.transpose(0, 2, 1).reshape(a * a, O, C), dtype=w.dtype)


@njit(**_NOGIL)
def _same_nb(a, b):
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
# id() of the objects owning memory that has a frozen mark or a cached transform: a block of devices/cpu's buffer
# pool lives on after the arrays carved from it die and is handed out again, so for its memory the marks and entries
# go when it is (:func:`release`), not with the object (a jit graph's frozen copy made again in the same block, at the
# same address and shape, found its predecessor's packed weights: wrong products)
marked_owners: set = set()


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
        marked_owners.add(id(owner))
        weakref.finalize(owner, _frozen.pop, key, None)
    return True


def release(block: np.ndarray) -> None:
    """Forget the frozen marks and cached transforms of memory inside ``block`` (a pooled buffer handed out again:
    the arrays they were made for are gone, though the block that owned their memory lives on)."""
    lo = block.__array_interface__["data"][0]
    hi = lo + block.nbytes
    marked_owners.discard(id(block))
    for k in [k for k in list(_frozen) if lo <= k[0] < hi]:
        _frozen.pop(k, None)
    dropped = []        # (released after the lock: see _cache_lock)
    with _cache_lock:
        for k in [k for k in _cache if lo <= k[0] < hi]:
            ent = _cache.pop(k)
            _cache_bytes[0] -= _nbytes(ent)
            dropped.append(ent)
    del dropped


def is_frozen(a: np.ndarray) -> bool:
    return (a.__array_interface__["data"][0], a.nbytes) in _frozen


def weights(w: np.ndarray, m, transform=None):
    """The cached U of w (C-contiguous (O, C, 3, 3)) for F(m, 3), recomputed when w's contents changed; None
    once they have changed on _VOLATILE calls in a row (weights being trained: each call would transform
    them again; the caller takes the GEMM path for this buffer), and None while U is not all finite (an inf /
    NaN weight, or one overflowing in G g G^T: the transforms would spread it over whole output tiles; checked
    once per transform).  ``transform(w, m)``: another packing of w cached the same way (kernels/conv_direct.py;
    ``m`` then a hashable tag naming it; not checked for finiteness).  Buffers marked by :func:`freeze` are not
    compared (nor copied)."""
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
            u = hit[1]
            return None if u is _NONFINITE else u
        misses = hit[2] + 1
    if misses >= _VOLATILE:
        ent = [None, None, misses]
        u = None
    else:
        u = (transform or transform_weights)(w, m)
        if transform is None and not _all_finite(u):
            u = _NONFINITE
        ent = [None if frozen else w.copy(), u, misses]
    dropped = []        # the entries replaced or evicted, released after the lock (see _cache_lock)
    with _cache_lock:
        old = _cache.pop(key, None)
        if old is not None:
            _cache_bytes[0] -= _nbytes(old)
            dropped.append(old)
        _cache[key] = ent
        _cache_bytes[0] += _nbytes(ent)
        while _cache_bytes[0] > _CACHE_BYTES and len(_cache) > 1:
            _, old = _cache.popitem(last=False)
            _cache_bytes[0] -= _nbytes(old)
            dropped.append(old)
    old = None
    del dropped
    if hit is None:
        # the entry goes with the memory it describes (weights made anew each step leave no garbage behind)
        owner = _owner(w)
        if owner is not None:
            marked_owners.add(id(owner))
            weakref.finalize(owner, _drop, key)
    return None if u is _NONFINITE else u


# an entry's U when the weights' U is not all finite (kept, compared as any: the weights may be mended in place)
_NONFINITE = np.empty(0, np.float32)


def _all_finite(u: np.ndarray) -> bool:
    """No inf / NaN in u (in slices: no temporary the size of u)."""
    f = u.reshape(-1)
    step = 1 << 16
    for s in range(0, f.size, step):
        if not np.isfinite(f[s:s + step]).all():
            return False
    return True


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
    del ent             # (after the lock: see _cache_lock)


# weights found changed on this many calls in a row are not transformed any more
_VOLATILE = 2


def _nbytes(ent) -> int:
    return 0 if ent[1] is None else (0 if ent[0] is None else ent[0].nbytes) + ent[1].nbytes


def clear_cache() -> None:
    with _cache_lock:
        ents = list(_cache.values())
        _cache.clear()
        _cache_bytes[0] = 0
    del ents            # (after the lock: see _cache_lock)


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
def input_tiles_nb(x, V, xp, tmp, m, C, H, W, ph, pw, ti0, th, tw, NT, tstride, p0, p1):
    """V (alpha^2, C, NT) flat: the transformed tiles of tile rows [ti0, ti0 + th) of planes [p0, p1) of x
    (N*C, H, W) flat (plane p = image p // C, channel p % C; image n's tiles at columns n*tstride ...).
    xp: a scratch plane of (th*m + 2) * (tw*m + 2) elements, tmp: alpha^2 * th * tw.  Returns True when an
    input value read (copied into xp) is inf or NaN; xp[0] is left 1 then, else 0 (the IR kernels' flag)."""
    bad = False
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
                v = src[j]
                dst[j] = v
                bad = bad | ((v - v) != 0)      # inf - inf, NaN - NaN: NaN
            rest = drow[pw + ww:]
            for j in range(Wp - pw - ww):
                rest[j] = 0
        if m == 4:
            _input4(xp, V, Wp, th, tw, C * NT, c * NT + n * tstride, tmp)
        else:
            _input2(xp, V, Wp, th, tw, C * NT, c * NT + n * tstride, tmp)
    xp[0] = 1 if bad else 0
    return bad


# ---------------------------------------------------------------- output transform
@njit(**_NOGIL)
def output_tiles_nb(M, out, tmp, bias, has_bias, m, O, Oall, o0, OH, OW, ti0, th, tw, NT, tstride, q0, q1,
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
    (output: C = input channels); sets the meta word _M_FLAGS to 1 when an input value read is inf / NaN, else
    0."""
    mt = carray(meta, (META,))
    m, C, H, W, ph, pw, th, tw, NT = mt[0], mt[1], mt[2], mt[3], mt[4], mt[5], mt[6], mt[7], mt[8]
    xa = carray(x, (mt[9],))
    Va = carray(V, (mt[10],))
    sa = carray(s, (mt[11],))
    plane = (th * m + 2) * (tw * m + 2)
    so = mt[14]
    bad = input_tiles_nb(xa, Va, sa[so:so + plane], sa[so + plane:so + plane + (m + 2) * (m + 2) * th * tw], m, C,
                         H, W, ph, pw, 0, th, tw, NT, th * tw, mt[12], mt[13])
    mt[_M_FLAGS] = 1 if bad else 0


def _out_task_py(M, out, s, meta):
    """Output transform of output planes [q0, q1) from M (alpha^2, O, NT); meta words as ``_M_*`` (C = output
    channels, H, W = OH, OW; flags bit 0: a bias, bit 1: relu); the bias is the scratch's first O elements."""
    mt = carray(meta, (META,))
    m, O, OH, OW, th, tw, NT = mt[0], mt[1], mt[2], mt[3], mt[6], mt[7], mt[8]
    Ma = carray(M, (mt[9],))
    oa = carray(out, (mt[10],))
    sa = carray(s, (mt[11],))
    so = mt[14]
    output_tiles_nb(Ma, oa, sa[so:so + m * (m + 2) * th * tw], sa[:O], (mt[15] & 1) != 0, m, O, O, 0, OH, OW, 0,
                    th, tw, NT, th * tw, mt[12], mt[13], (mt[15] & 2) != 0)


_tasks: dict = {}            # (phase, dtype char, IR kernel?) -> address of the compiled task
_task_fns: list = []         # the cfunc objects (kept alive: their machine code stays mapped)
_tasks_lock = threading.Lock()


def task_addr(phase: str, dt) -> int:
    """Address of the native task ``task(x, y, scratch, meta)`` of ``phase`` ("in" / "out") for float dtype ``dt``
    (compiled on first use): the IR kernel (below), or with NEE_WINO_IR=0 (or no llvmlite target) the Numba
    cfunc."""
    ir = ir_available()
    key = (phase, np.dtype(dt).char, ir)
    a = _tasks.get(key)
    if a is None:
        with _tasks_lock:
            a = _tasks.get(key)
            if a is None and ir and key[1] in _IRT:
                a = _tasks[key] = _task_ir_addr(phase, _IRT[key[1]])
            if a is None:
                from numba import cfunc, types
                fp = types.CPointer(types.float32 if key[1] == "f" else types.float64)
                sig = types.void(fp, fp, fp, types.CPointer(types.int64))
                fn = cfunc(sig, cache=True)(_in_task_py if phase == "in" else _out_task_py)
                _task_fns.append(fn)
                a = _tasks[key] = fn.address
    return a


# ---------------------------------------------------------------- the kernels as LLVM IR
# input_tiles / output_tiles, the native tasks behind task_addr and _same as LLVM IR kernels (compiled through
# conv_direct.builtin / llvm_render, machine code cached on disk, keyed by this file's hash): a session whose
# other kernels are IR kernels then never initializes Numba's target (~1 s of the first run of a ResNet-50).  The
# arithmetic is the Numba kernels' exactly, operation for operation in their order and their types: Numba types
# ``int literal * float32`` as float64, so e.g. ``a = d4 - 4 * d2`` is a float64 expression rounded to float32
# only where it is stored; the IR below promotes alike (_Ir.f / _Ir.k), so both give the same bits (checked
# bitwise against the Numba kernels: tests/test_winograd_ir_s15.py).  m (2 or 4) is a compile-time constant of
# each loop nest (the tile strides constant); one kernel per phase and dtype holds both.
# NEE_WINO_IR=0 (or MODE[0] = "0": tests, benchmarks) keeps the Numba kernels.
VERSION = "2"
MODE = [os.environ.get("NEE_WINO_IR", "1")]


def _source_key() -> str:
    import hashlib
    with open(__file__, "rb") as fh:
        return hashlib.sha1(fh.read()).hexdigest()[:12]


_SRC = _source_key()
_ir_ok = [None]


def ir_available() -> bool:
    """llvmlite with a native target (pool_native's test) and MODE not "0"."""
    if MODE[0] == "0":
        return False
    if _ir_ok[0] is None:
        from . import pool_native
        _ir_ok[0] = bool(pool_native.available())
    return _ir_ok[0]


# the transforms' loops along the tile rows (input: B^T along the width; output: A^T along the width) vectorized 4
# tiles wide (loop metadata): LLVM's own pick, 8, left tile rows of 7 or 14 tiles mostly to its scalar remainder loop
# (the hottest code of the input transform).  Same arithmetic, same bits.  AMD Zen 5, whole convs with the products on
# conv_direct's kernel (warm, in-process alternating, min of 7, /tmp/lead21/wg.py, us LLVM's pick / 4): 1 thread F(4)
# 64 -> 64 on 56x56 715 / 643, 128 -> 128 on 28x28 573 / 504, F(2) 256 -> 256 on 14x14 616 / 589; 2 threads 428 / 371,
# 308 / 277, 332 / 342 (width 2: about as 4)
_WVF = 4
_WMD = "!900" if _WVF else ""


class _Ir:
    """A small LLVM IR text builder: SSA names, blocks, counted loops, and float values typed as Numba types
    them ("F": the element type, "D": float64)."""

    def __init__(self, t: str):
        self.t = t
        self.L: list = []
        self.n = 0
        self.cur = "entry"

    def name(self, p: str) -> str:
        self.n += 1
        return f"{p}{self.n}"

    def op(self, text: str) -> str:
        r = "%" + self.name("v")
        self.L.append(f"  {r} = {text}")
        return r

    def ins(self, text: str) -> None:
        self.L.append("  " + text)

    def block(self, lab: str) -> None:
        self.L.append(f"{lab}:")
        self.cur = lab

    # i64 arithmetic
    def add(self, a, b):
        return self.op(f"add i64 {a}, {b}")

    def sub(self, a, b):
        return self.op(f"sub i64 {a}, {b}")

    def mul(self, a, b):
        return self.op(f"mul i64 {a}, {b}")

    def sdiv(self, a, b):
        return self.op(f"sdiv i64 {a}, {b}")

    def smin(self, a, b):
        c = self.op(f"icmp slt i64 {a}, {b}")
        return self.op(f"select i1 {c}, i64 {a}, i64 {b}")

    def smax(self, a, b):
        c = self.op(f"icmp sgt i64 {a}, {b}")
        return self.op(f"select i1 {c}, i64 {a}, i64 {b}")

    def lt(self, a, b):
        return self.op(f"icmp slt i64 {a}, {b}")

    def arg(self, prm: str, k: int) -> str:
        p = self.op(f"getelementptr i64, i64* {prm}, i64 {k}")
        return self.op(f"load i64, i64* {p}")

    # memory (element type t)
    def ptr(self, base, idx):
        t = self.t
        return self.op(f"getelementptr {t}, {t}* {base}, i64 {idx}")

    def load(self, base, idx):
        t = self.t
        return (self.op(f"load {t}, {t}* {self.ptr(base, idx)}"), "F")

    def store(self, v, base, idx) -> None:
        t = self.t
        self.ins(f"store {t} {self.narrow(v)}, {t}* {self.ptr(base, idx)}")

    def zero(self, base, idx) -> None:
        self.store(("0.0", "F"), base, idx)

    # floats: Numba's promotion (float32 op float32 -> float32; with a float64 or an int literal -> float64)
    def ext(self, v) -> str:
        if v[1] == "D" or self.t == "double":
            return v[0]
        return self.op(f"fpext float {v[0]} to double")

    def narrow(self, v) -> str:
        if v[1] == "F" or self.t == "double":
            return v[0]
        return self.op(f"fptrunc double {v[0]} to float")

    def f(self, opn: str, a, b):
        if a[1] == "F" and b[1] == "F":
            return (self.op(f"{opn} {self.t} {a[0]}, {b[0]}"), "F")
        return (self.op(f"{opn} double {self.ext(a)}, {self.ext(b)}"), "D")

    def k(self, c: int, v):
        """``c * v`` for an int literal c (float64)."""
        return (self.op(f"fmul double {float(c)!r}, {self.ext(v)}"), "D")

    # control flow
    def loop(self, lo, hi, body, md: str = "") -> None:
        """for i in range(lo, hi): body(i)  (i64 values or literals); ``md``: loop metadata on the latch."""
        pre = self.cur
        head, latch, end = self.name("L"), self.name("N"), self.name("E")
        go = self.lt(lo, hi)
        self.ins(f"br i1 {go}, label %{head}, label %{end}")
        self.block(head)
        i = "%" + self.name("i")
        at = len(self.L)
        self.L.append("")
        body(i)
        self.ins(f"br label %{latch}")
        self.block(latch)
        nx = self.add(i, 1)
        more = self.lt(nx, hi)
        self.ins(f"br i1 {more}, label %{head}, label %{end}" + (f", !llvm.loop {md}" if md else ""))
        self.L[at] = f"  {i} = phi i64 [ {lo}, %{pre} ], [ {nx}, %{latch} ]"
        self.block(end)

    def if_(self, cond, body) -> None:
        then, end = self.name("T"), self.name("F")
        self.ins(f"br i1 {cond}, label %{then}, label %{end}")
        self.block(then)
        body()
        self.ins(f"br label %{end}")
        self.block(end)


# The input transform's B^T along the width (the row pass: each tile's m + 2 inputs m apart, the hottest loop of the
# transform) on _RVL[0] tiles at once (rows of fewer: _RVL[1]; fewer still: the scalar loop): one vector load of m *
# VL inputs, each tap's lanes gathered by a shuffle (the last tile's two taps past it read as scalars: nothing past
# the row's last input is read), the taps' arithmetic as the scalar loop's per lane (the same float64 steps: the
# same bits), stored as vectors into tmp; the last group of a row moved back to end at its last tile (its overlap
# recomputed, the same values).  LLVM had vectorized the scalar loop 4 tiles wide with gathers (see _WVF).  F(4)
# only (F(2)'s loop as LLVM vectorized it ran as fast).  The output transform's A^T along the width the same way
# (_VOps.store_interleaved: each tile's m outputs interleaved back into the row).  AMD Zen 5, 1 thread, process CPU
# time, min of 40 calls alternating with the previous kernels in one process (/tmp/lead23/wab.py, wabo.py), us
# before / after, the same bits: input F(4) 64 planes of 56x56 263 / 171, 128 of 28x28 168 / 122, 96 of 28x28 150 /
# 117, 64 of 224x224 4467 / 3382; output 105 / 87, 64 / 57, 49 / 43 (224x224: even, memory-bound); F(2) unchanged.
# Whole conv (bound step, conv + bias + relu, fresh processes alternating, min of 100): 64 -> 64 on 56x56 683-808 ->
# 564-695 us, 128 -> 128 on 28x28 528-614 -> 482-595
_RVL = (8, 4)


class _VOps:
    """_Ir's float arithmetic (f, k, narrow) on vectors of ``VL`` lanes of its element type (float64 where _Ir's
    scalars are float64), lane by lane the same IEEE operations."""

    def __init__(self, b: _Ir, VL: int):
        self.b, self.VL = b, VL
        self.vt = f"<{VL} x {b.t}>"
        self.vd = f"<{VL} x double>"

    def ext(self, v) -> str:
        if v[1] == "D" or self.b.t == "double":
            return v[0]
        return self.b.op(f"fpext {self.vt} {v[0]} to {self.vd}")

    def narrow(self, v) -> str:
        if v[1] == "F" or self.b.t == "double":
            return v[0]
        return self.b.op(f"fptrunc {self.vd} {v[0]} to {self.vt}")

    def f(self, opn: str, a, c):
        if a[1] == "F" and c[1] == "F":
            return (self.b.op(f"{opn} {self.vt} {a[0]}, {c[0]}"), "F")
        return (self.b.op(f"{opn} {self.vd} {self.ext(a)}, {self.ext(c)}"), "D")

    def k(self, c: int, v):
        sp = "<" + ", ".join([f"double {float(c)!r}"] * self.VL) + ">"
        return (self.b.op(f"fmul {self.vd} {sp}, {self.ext(v)}"), "D")

    def store(self, v, base, idx) -> None:
        b = self.b
        p = b.op(f"bitcast {b.t}* {b.ptr(base, idx)} to {self.vt}*")
        b.ins(f"store {self.vt} {self.narrow(v)}, {self.vt}* {p}, align 4")

    def load(self, base, idx) -> str:
        b = self.b
        p = b.op(f"bitcast {b.t}* {b.ptr(base, idx)} to {self.vt}*")
        return b.op(f"load {self.vt}, {self.vt}* {p}, align 4")

    def splat_d(self, v):
        """A float64 scalar ``v`` in every lane."""
        b = self.b
        i = b.op(f"insertelement {self.vd} undef, double {v[0]}, i32 0")
        return (b.op(f"shufflevector {self.vd} {i}, {self.vd} undef, <{self.VL} x i32> zeroinitializer"), "D")

    def store_interleaved(self, vals: list, base, idx) -> None:
        """Store len(vals) (2 or 4) vectors interleaved, element i of vals[c] at base[idx + len(vals) * i + c]."""
        b, VL, t = self.b, self.VL, self.b.t

        def zip2(x, y, n):
            mask = ", ".join(f"i32 {(i // 2) + (n if i % 2 else 0)}" for i in range(2 * n))
            return b.op(f"shufflevector <{n} x {t}> {x}, <{n} x {t}> {y}, <{2 * n} x i32> <{mask}>")
        if len(vals) == 2:
            w, n = zip2(vals[0], vals[1], VL), 2 * VL
        else:
            ab, cd = zip2(vals[0], vals[1], VL), zip2(vals[2], vals[3], VL)
            # lane 4i + c: ab[2i + c] (c < 2), cd[2i + c - 2]
            mask = ", ".join(f"i32 {2 * (j // 4) + (j % 4) + (0 if j % 4 < 2 else 2 * VL - 2)}" for j in range(4 * VL))
            w, n = b.op(f"shufflevector <{2 * VL} x {t}> {ab}, <{2 * VL} x {t}> {cd}, <{4 * VL} x i32> <{mask}>"), 4 * VL
        p = b.op(f"bitcast {t}* {b.ptr(base, idx)} to <{n} x {t}>*")
        b.ins(f"store <{n} x {t}> {w}, <{n} x {t}>* {p}, align 4")


def _tile_lanes(b: _Ir, m: int, VL: int, base: str, at: str) -> list:
    """The m + 2 taps of VL consecutive tiles (tile i's tap c: ``base[at + m * i + c]``) as vectors (lane i): one
    load of m * VL elements, a shuffle per tap; the last lane of taps m and m + 1 (past that load) loaded as
    scalars."""
    t = b.t
    wt = f"<{m * VL} x {t}>"
    vt = f"<{VL} x {t}>"
    p = b.op(f"bitcast {t}* {b.ptr(base, at)} to {wt}*")
    w = b.op(f"load {wt}, {wt}* {p}, align 4")
    out = []
    for c in range(m + 2):
        idx = [m * i + c for i in range(VL)]
        past = idx[-1] >= m * VL
        mask = ", ".join("i32 undef" if (past and i == VL - 1) else f"i32 {j}" for i, j in enumerate(idx))
        v = b.op(f"shufflevector {wt} {w}, {wt} undef, <{VL} x i32> <{mask}>")
        if past:
            e = b.load(base, b.add(at, idx[-1]))[0]
            v = b.op(f"insertelement {vt} {v}, {t} {e}, i32 {VL - 1}")
        out.append((v, "F"))
    return out


def _widest(b: _Ir, m: int, n: str, vec, scalar) -> None:
    """A row pass over ``n`` tiles: F(4) on the widest of _RVL's vectors the row fills (``vec(VL)``: its loop's
    emitter), else (and F(2)) the scalar loop ``scalar(tile)``."""
    if m != 4:
        b.loop(0, n, scalar, _WMD)
        return
    rest = "true"
    for VL in _RVL:
        fits = b.op(f"icmp sge i64 {n}, {VL}")
        b.if_(b.op(f"and i1 {rest}, {fits}"), vec(VL))
        rest = b.op(f"and i1 {rest}, {b.op(f'xor i1 {fits}, true')}")
    b.if_(rest, lambda: b.loop(0, n, scalar, _WMD))


def _bt(b: _Ir, m: int, s):
    """B^T d of one column (s: the m + 2 inputs), as _input4 / _input2 spell it."""
    if m == 4:
        d1, d2, d3, d4 = s[1], s[2], s[3], s[4]
        a = b.f("fsub", d4, b.k(4, d2))
        bb = b.f("fsub", d3, b.k(4, d1))
        c = b.f("fsub", d4, d2)
        e = b.k(2, b.f("fsub", d3, d1))
        return [b.f("fadd", b.f("fsub", b.k(4, s[0]), b.k(5, d2)), d4), b.f("fadd", a, bb), b.f("fsub", a, bb),
                b.f("fadd", c, e), b.f("fsub", c, e), b.f("fadd", b.f("fsub", b.k(4, d1), b.k(5, d3)), s[5])]
    d1, d2 = s[1], s[2]
    return [b.f("fsub", s[0], d2), b.f("fadd", d1, d2), b.f("fsub", d2, d1), b.f("fsub", d1, s[3])]


def _at(b: _Ir, m: int, s, bv=None):
    """A^T M of one column (s: the m + 2 products), + bv (float64) when given, as output_tiles spells it."""
    def pl(v):
        return v if bv is None else b.f("fadd", v, bv)
    if m == 4:
        m1, m2, m3, m4 = s[1], s[2], s[3], s[4]
        s1 = b.f("fadd", m1, m2)
        s2 = b.f("fadd", m3, m4)
        d1 = b.f("fsub", m1, m2)
        d2 = b.f("fsub", m3, m4)
        return [pl(b.f("fadd", b.f("fadd", s[0], s1), s2)), pl(b.f("fadd", d1, b.k(2, d2))),
                pl(b.f("fadd", s1, b.k(4, s2))), pl(b.f("fadd", b.f("fadd", d1, b.k(8, d2)), s[5]))]
    m1, m2 = s[1], s[2]
    return [pl(b.f("fadd", b.f("fadd", s[0], m1), m2)), pl(b.f("fsub", b.f("fsub", m1, m2), s[3]))]


_IN_ARGS = ("C", "H", "W", "ph", "pw", "ti0", "th", "tw", "NT", "tstride", "p0", "p1")
_OUT_ARGS = ("O", "Oall", "o0", "OH", "OW", "ti0", "th", "tw", "NT", "tstride", "q0", "q1")


# The input transform's check for inf / NaN (its result, input_tiles_nb's): after each plane's zero-padded copy is
# made, one pass over it (in L1 / L2 cache, contiguous: explicit 256-bit vectors, four accumulators) of integer ops
# on the bits.  float: the max of |bits| (and, umax), >= the all-ones exponent 0x7F800000 iff inf / NaN; double (no
# 64-bit umax on AVX2): the or of (bits & EXP) + LOW, whose sign bit is set iff the exponent is all ones (the scalar
# tail does this for both).  Folding the test into the row copies instead cost the short rows most (14 wide: the
# copies' vector loop plus a scalar tail and a reduction per row, +15-20% of the transform vs ~5% for this pass).
_EXP = {"float": ("i32", 0x7F800000, 0x00800000), "double": ("i64", 0x7FF0000000000000, 0x0010000000000000)}


def _render_in_body(t: str, m: int) -> list:
    """input_tiles for tile size m: internal function i1 @"kernel.in<m>"(x, V, xp, tmp, <_IN_ARGS>): true when an
    input value read is inf / NaN; xp[0] is left 1 then, else 0 (as input_tiles_nb)."""
    b = _Ir(t)
    a = m + 2
    it, em, el = _EXP[t]
    VL = 8 if it == "i32" else 4
    vt = f"<{VL} x {it}>"
    C, H, W, ph, pw, ti0, th, tw, NT, tstride, p0, p1 = (f"%{n}" for n in _IN_ARGS)
    b.L.append(f'define internal i1 @"kernel.in{m}"({t}* noalias %x, {t}* noalias %V, {t}* noalias %xp, '
               f'{t}* noalias %tmp, ' + ", ".join(f"i64 %{n}" for n in _IN_ARGS) + ") {")
    b.block("entry")
    # the check's accumulators (allocas: promoted to registers)
    b.ins(f"%acc = alloca {it}")
    b.ins(f"store {it} 0, {it}* %acc")
    for u in range(4):
        b.ins(f"%vacc{u} = alloca {vt}")
        b.ins(f"store {vt} zeroinitializer, {vt}* %vacc{u}")

    def splat(c):
        return "<" + ", ".join([f"{it} {c}"] * VL) + ">"
    Hp = b.add(b.mul(th, m), 2)
    Wp = b.add(b.mul(tw, m), 2)
    r0 = b.sub(b.mul(ti0, m), ph)
    T = b.mul(th, tw)
    CNT = b.mul(C, NT)
    HW = b.mul(H, W)
    h0 = b.smax(0, b.sub(0, r0))                       # first scratch row holding an input row
    h1 = b.smax(h0, b.smin(Hp, b.sub(H, r0)))          # and one past the last
    ww = b.smin(W, b.sub(Wp, pw))
    top = b.mul(h0, Wp)
    bot0 = b.mul(h1, Wp)
    nbot = b.mul(b.sub(Hp, h1), Wp)
    nrest = b.sub(b.sub(Wp, pw), ww)
    HpWp = b.mul(Hp, Wp)
    nv = b.sdiv(HpWp, 4 * VL)                          # the check's vector iterations (4 vectors each)

    def plane(p):
        n = b.sdiv(p, C)
        c = b.sub(p, b.mul(n, C))
        b.loop(0, top, lambda i: b.zero("%xp", i))
        b.loop(0, nbot, lambda i: b.zero("%xp", b.add(bot0, i)))
        pb = b.mul(p, HW)

        def row(i):
            src = b.add(pb, b.mul(b.add(r0, i), W))
            d0 = b.mul(i, Wp)
            b.loop(0, pw, lambda j: b.zero("%xp", b.add(d0, j)))
            dp = b.add(d0, pw)
            b.loop(0, ww, lambda j: b.store(b.load("%x", b.add(src, j)), "%xp", b.add(dp, j)))
            dr = b.add(dp, ww)
            b.loop(0, nrest, lambda j: b.zero("%xp", b.add(dr, j)))
        b.loop(h0, h1, row)

        # inf / NaN in the padded plane (see _EXP)
        def vchk(k):
            i0 = b.mul(k, 4 * VL)
            for u in range(4):
                pv = b.op(f"bitcast {t}* {b.ptr('%xp', b.add(i0, u * VL) if u else i0)} to {vt}*")
                v = b.op(f"load {vt}, {vt}* {pv}, align 4")
                old = b.op(f"load {vt}, {vt}* %vacc{u}")
                if it == "i32":
                    e = b.op(f"and {vt} {v}, {splat(0x7FFFFFFF)}")
                    new = b.op(f"select <{VL} x i1> {b.op(f'icmp ugt {vt} {e}, {old}')}, {vt} {e}, {vt} {old}")
                else:
                    e = b.op(f"add {vt} {b.op(f'and {vt} {v}, {splat(em)}')}, {splat(el)}")
                    new = b.op(f"or {vt} {e}, {old}")
                b.ins(f"store {vt} {new}, {vt}* %vacc{u}")
        b.loop(0, nv, vchk)

        def chk(j):
            v = b.load("%xp", j)
            e = b.op(f"and {it} {b.op(f'bitcast {t} {v[0]} to {it}')}, {em}")
            acc = b.op(f"or {it} {b.op(f'load {it}, {it}* %acc')}, {b.op(f'add {it} {e}, {el}')}")
            b.ins(f"store {it} {acc}, {it}* %acc")
        b.loop(b.mul(nv, 4 * VL), HpWp, chk)
        base = b.add(b.mul(c, NT), b.mul(n, tstride))

        # B^T along the width of each tile row's input rows, all its tiles at once -> tmp[r, k, tile]
        def tilerow(ti):
            def rr(r):
                rowb = b.mul(b.add(b.mul(ti, m), r), Wp)
                o = b.add(b.mul(b.mul(r, a), T), b.mul(ti, tw))
                offs = [o] + [b.add(o, b.mul(k, T)) for k in range(1, a)]

                def tj_(tj):
                    col = b.add(rowb, b.mul(tj, m))
                    s = [b.load("%xp", b.add(col, k) if k else col) for k in range(a)]
                    for k, v in enumerate(_bt(b, m, s)):
                        b.store(v, "%tmp", b.add(offs[k], tj))

                def vec(VL):
                    def body(g):
                        # VL tiles at once from t0 (the last group moved back to end at tw: its overlap recomputed)
                        t0 = b.smin(b.mul(g, VL), b.sub(tw, VL))
                        s = _tile_lanes(b, m, VL, "%xp", b.add(rowb, b.mul(t0, m)))
                        vo = _VOps(b, VL)
                        for k, v in enumerate(_bt(vo, m, s)):
                            vo.store(v, "%tmp", b.add(offs[k], t0))
                    return lambda: b.loop(0, b.sdiv(b.add(tw, VL - 1), VL), body)
                _widest(b, m, tw, vec, tj_)
            b.loop(0, a, rr)
        b.loop(0, th, tilerow)

        # B^T along the height, every tile of the plane at once -> V[(k1 * a + k2), c, tile]
        def kk(k):
            ti_ = [b.mul(b.add(k, j * a), T) for j in range(a)]
            vo = [b.add(b.mul(b.add(k, j * a), CNT), base) for j in range(a)]

            def tt(t_):
                s = [b.load("%tmp", b.add(ti_[j], t_)) for j in range(a)]
                for j, v in enumerate(_bt(b, m, s)):
                    b.store(v, "%V", b.add(vo[j], t_))
            b.loop(0, T, tt)
        b.loop(0, a, kk)
    b.loop(p0, p1, plane)
    bads = [b.op(f"icmp slt {it} {b.op(f'load {it}, {it}* %acc')}, 0")]
    for u in range(4):
        va = b.op(f"load {vt}, {vt}* %vacc{u}")
        cm = b.op(f"icmp uge {vt} {va}, {splat(em)}" if it == "i32" else f"icmp slt {vt} {va}, zeroinitializer")
        bads.append(b.op(f"icmp ne i{VL} {b.op(f'bitcast <{VL} x i1> {cm} to i{VL}')}, 0"))
    bad = bads[0]
    for o in bads[1:]:
        bad = b.op(f"or i1 {bad}, {o}")
    b.store((b.op(f"select i1 {bad}, {t} 1.0, {t} 0.0"), "F"), "%xp", 0)
    b.ins(f"ret i1 {bad}")
    b.L.append("}")
    return b.L


def _render_out_body(t: str, m: int) -> list:
    """output_tiles for tile size m: internal function @"kernel.out<m>"(M, out, tmp, bias, <_OUT_ARGS>, i1 hb,
    i1 relu)."""
    b = _Ir(t)
    a = m + 2
    O, Oall, o0, OH, OW, ti0, th, tw, NT, tstride, q0, q1 = (f"%{n}" for n in _OUT_ARGS)
    b.L.append(f'define internal void @"kernel.out{m}"({t}* noalias %M, {t}* noalias %out, {t}* noalias %tmp, '
               f'{t}* noalias %bias, ' + ", ".join(f"i64 %{n}" for n in _OUT_ARGS) + ", i1 %hb, i1 %relu) {")
    b.block("entry")
    T = b.mul(th, tw)
    ON = b.mul(O, NT)
    fw = b.sdiv(OW, m)                 # whole tiles per output row
    hastail = b.lt(fw, tw)
    rlo = b.mul(ti0, m)
    r1 = b.smin(OH, b.mul(b.add(ti0, th), m))

    def plane(q):
        n = b.sdiv(q, O)
        o = b.sub(q, b.mul(n, O))
        p = b.add(b.add(b.mul(n, Oall), o0), o)
        # bv = bias[o0 + o] if has_bias else M[0] * 0   (float64, as Numba types it)
        yb, nb, jb = b.name("BY"), b.name("BN"), b.name("BJ")
        b.ins(f"br i1 %hb, label %{yb}, label %{nb}")
        b.block(yb)
        bx = b.ext(b.load("%bias", b.add(o0, o)))
        b.ins(f"br label %{jb}")
        b.block(nb)
        mz = b.k(0, b.load("%M", 0))[0]
        b.ins(f"br label %{jb}")
        b.block(jb)
        bv = (b.op(f"phi double [ {bx}, %{yb} ], [ {mz}, %{nb} ]"), "D")
        base = b.add(b.mul(o, NT), b.mul(n, tstride))

        # A^T along the height, every tile at once: tmp[i, k2, tile] = sum_k1 A^T[i, k1] M[k1 * a + k2, o, tile]
        def kk(k):
            mi = [b.add(b.mul(b.add(k, j * a), ON), base) for j in range(a)]
            to = [b.mul(b.add(k, i * a), T) for i in range(m)]

            def tt(t_):
                s = [b.load("%M", b.add(mi[j], t_)) for j in range(a)]
                for i, v in enumerate(_at(b, m, s)):
                    b.store(v, "%tmp", b.add(to[i], t_))
            b.loop(0, T, tt)
        b.loop(0, a, kk)

        # A^T along the width, into the output rows (whole tiles, the last one clipped)
        def tilerow(ti):
            rowt = b.mul(b.add(ti0, ti), m)
            ni = b.smin(m, b.sub(OH, rowt))

            def orow(i):
                ob = b.mul(b.add(b.mul(p, OH), b.add(rowt, i)), OW)
                r = b.add(b.mul(b.mul(i, a), T), b.mul(ti, tw))
                jo = [r] + [b.add(r, b.mul(k, T)) for k in range(1, a)]

                def tj_(tj):
                    s = [b.load("%tmp", b.add(jo[k], tj)) for k in range(a)]
                    col = b.add(ob, b.mul(tj, m))
                    for c, v in enumerate(_at(b, m, s, bv)):
                        b.store(v, "%out", b.add(col, c) if c else col)

                def vec(VL):
                    def body(g):
                        # VL whole tiles at once from t0 (the last group moved back to end at fw)
                        t0 = b.smin(b.mul(g, VL), b.sub(fw, VL))
                        vo = _VOps(b, VL)
                        s = [(vo.load("%tmp", b.add(jo[k], t0)), "F") for k in range(a)]
                        vo.store_interleaved([vo.narrow(v) for v in _at(vo, m, s, vo.splat_d(bv))], "%out",
                                             b.add(ob, b.mul(t0, m)))
                    return lambda: b.loop(0, b.sdiv(b.add(fw, VL - 1), VL), body)
                _widest(b, m, fw, vec, tj_)

                def tail():
                    if m == 4:
                        s = [b.load("%tmp", b.add(jo[k], fw)) for k in range(5)]
                        m1, m2, m3, m4 = s[1], s[2], s[3], s[4]
                        s1 = b.f("fadd", m1, m2)
                        s2 = b.f("fadd", m3, m4)
                        d1 = b.f("fsub", m1, m2)
                        d2 = b.f("fsub", m3, m4)
                        j = b.mul(fw, 4)
                        b.store(b.f("fadd", b.f("fadd", b.f("fadd", s[0], s1), s2), bv), "%out", b.add(ob, j))
                        j1 = b.add(j, 1)
                        b.if_(b.lt(j1, OW), lambda: b.store(b.f("fadd", b.f("fadd", d1, b.k(2, d2)), bv), "%out",
                                                            b.add(ob, j1)))
                        j2 = b.add(j, 2)
                        b.if_(b.lt(j2, OW), lambda: b.store(b.f("fadd", b.f("fadd", s1, b.k(4, s2)), bv), "%out",
                                                            b.add(ob, j2)))
                    else:
                        s = [b.load("%tmp", b.add(jo[k], fw)) for k in range(3)]
                        v = b.f("fadd", b.f("fadd", b.f("fadd", s[0], s[1]), s[2]), bv)
                        b.store(v, "%out", b.add(ob, b.mul(fw, 2)))
                b.if_(hastail, tail)
            b.loop(0, ni, orow)
        b.loop(0, th, tilerow)

        def relu():
            pO = b.mul(p, OH)
            lo = b.mul(b.add(pO, rlo), OW)
            hi = b.mul(b.add(pO, r1), OW)

            def rl(j):
                v = b.load("%out", j)[0]
                neg = b.op(f"fcmp olt {t} {v}, 0.0")
                b.store((b.op(f"select i1 {neg}, {t} 0.0, {t} {v}"), "F"), "%out", j)
            b.loop(lo, hi, rl)
        b.if_("%relu", relu)
    b.loop(q0, q1, plane)
    b.ins("ret void")
    b.L.append("}")
    return b.L


def _render(phase: str, t: str, task: bool) -> str:
    """One kernel of ``phase`` ("in" / "out") for element type t, both tile sizes inside.  ``task``: the native
    task ``kernel(x, y, scratch, meta)`` (_in_task_py / _out_task_py's meta words); else the direct kernel
    ``kernel(x, y, scratch1, scratch2, prm)``: input_tiles' (m, <_IN_ARGS>) or output_tiles' (m, <_OUT_ARGS>,
    has_bias, relu) as int64 words."""
    L = _render_in_body(t, 2) + _render_in_body(t, 4) if phase == "in" else \
        _render_out_body(t, 2) + _render_out_body(t, 4)
    b = _Ir(t)
    if task:
        b.L.append(f'define void @"kernel"({t}* %x, {t}* %y, {t}* %s, i64* %mt) {{')
    else:
        b.L.append(f'define void @"kernel"({t}* %x, {t}* %y, {t}* %s1, {t}* %s2, i64* %mt) {{')
    b.block("entry")
    m = b.arg("%mt", 0)
    if phase == "in":
        if task:
            C, H, W, ph, pw, th, tw, NT, p0, p1, so = (b.arg("%mt", k) for k in (1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 14))
            T = b.mul(th, tw)
            plane = b.mul(b.add(b.mul(th, m), 2), b.add(b.mul(tw, m), 2))
            xp = b.ptr("%s", so)
            tmp = b.ptr("%s", b.add(so, plane))
            vals = (C, H, W, ph, pw, 0, th, tw, NT, T, p0, p1)
        else:
            xp, tmp = "%s1", "%s2"
            vals = tuple(b.arg("%mt", k) for k in range(1, 13))
        ptrs = f"{t}* %x, {t}* %y, {t}* {xp}, {t}* {tmp}"
        rest = ", ".join(f"i64 {v}" for v in vals)
    else:
        if task:
            O, OH, OW, th, tw, NT, q0, q1, so, fl = (b.arg("%mt", k) for k in (1, 2, 3, 6, 7, 8, 12, 13, 14, 15))
            T = b.mul(th, tw)
            tmp = b.ptr("%s", so)
            hb = b.op(f"icmp ne i64 {b.op(f'and i64 {fl}, 1')}, 0")
            rl = b.op(f"icmp ne i64 {b.op(f'and i64 {fl}, 2')}, 0")
            vals = (O, O, 0, OH, OW, 0, th, tw, NT, T, q0, q1)
            ptrs = f"{t}* %x, {t}* %y, {t}* {tmp}, {t}* %s"
        else:
            vals = tuple(b.arg("%mt", k) for k in range(1, 13))
            hb = b.op(f"icmp ne i64 {b.arg('%mt', 13)}, 0")
            rl = b.op(f"icmp ne i64 {b.arg('%mt', 14)}, 0")
            ptrs = f"{t}* %x, {t}* %y, {t}* %s1, {t}* %s2"
        rest = ", ".join(f"i64 {v}" for v in vals) + f", i1 {hb}, i1 {rl}"
    is4 = b.op(f"icmp eq i64 {m}, 4")
    b.ins(f"br i1 {is4}, label %m4, label %m2")
    for mm in (4, 2):
        b.block(f"m{mm}")
        if phase == "in":
            # the input transform's flag (inf / NaN read): the task's meta word _M_FLAGS (the direct kernel's is
            # xp[0], left by the body)
            bad = b.op(f'call i1 @"kernel.in{mm}"({ptrs}, {rest})')
            if task:
                fp = b.op(f"getelementptr i64, i64* %mt, i64 {_M_FLAGS}")
                b.ins(f"store i64 {b.op(f'zext i1 {bad} to i64')}, i64* {fp}")
        else:
            b.ins(f'call void @"kernel.{phase}{mm}"({ptrs}, {rest})')
        b.ins("ret void")
    b.L.append("}")
    md = ['!900 = distinct !{!900, !901}', f'!901 = !{{!"llvm.loop.vectorize.width", i32 {_WVF}}}'] if _WVF else []
    return "\n".join(L + b.L + md) + "\n"


def _render_same(it: str) -> str:
    """``kernel(a, b, prm)``: prm[1] = 1 when a[:prm[0]] == b[:prm[0]] bitwise (ints ``it``), else 0; blocks of
    4096 elements, stopping after the first block that differs (as _same_nb)."""
    return "\n".join([
        f'define void @"kernel"({it}* noalias %a, {it}* noalias %b, i64* noalias %prm) {{',
        "entry:",
        "  %n = load i64, i64* %prm",
        "  %rp = getelementptr i64, i64* %prm, i64 1",
        "  %go = icmp sgt i64 %n, 0",
        "  br i1 %go, label %blk, label %same",
        "blk:",
        "  %s = phi i64 [ 0, %entry ], [ %e, %next ]",
        "  %e0 = add i64 %s, 4096",
        "  %ec = icmp slt i64 %e0, %n",
        "  %e = select i1 %ec, i64 %e0, i64 %n",
        "  br label %in",
        "in:",
        "  %i = phi i64 [ %s, %blk ], [ %i1, %in ]",
        f"  %d = phi {it} [ 0, %blk ], [ %dn, %in ]",
        f"  %ap = getelementptr {it}, {it}* %a, i64 %i",
        f"  %av = load {it}, {it}* %ap",
        f"  %bp = getelementptr {it}, {it}* %b, i64 %i",
        f"  %bw = load {it}, {it}* %bp",
        f"  %x = xor {it} %av, %bw",
        f"  %dn = or {it} %d, %x",
        "  %i1 = add i64 %i, 1",
        "  %im = icmp slt i64 %i1, %e",
        "  br i1 %im, label %in, label %bend",
        "bend:",
        f"  %nz = icmp ne {it} %dn, 0",
        "  br i1 %nz, label %diff, label %next",
        "next:",
        "  %more = icmp slt i64 %e, %n",
        "  br i1 %more, label %blk, label %same",
        "same:",
        "  store i64 1, i64* %rp",
        "  ret void",
        "diff:",
        "  store i64 0, i64* %rp",
        "  ret void",
        "}"]) + "\n"


_kernels: dict = {}


def _kernel(kind: str, t: str):
    """The builtin of ``kind`` ("in" / "out": the direct kernels, 5 arguments; "same": 3) for IR type t."""
    k = (kind, t)
    f = _kernels.get(k)
    if f is None:
        from . import conv_direct
        if kind == "same":
            render, nargs, il = (lambda: _render_same(t)), 3, True
        else:
            render, nargs, il = (lambda: _render(kind, t, False)), 5, False
        f = conv_direct.builtin(_kernels, k, f"wino{kind}{t[0]}", f"winograd|{VERSION}|{_SRC}|{k!r}", render, nargs,
                                il)
    return f


def _task_ir_addr(phase: str, t: str) -> int:
    """Address of the IR task ``kernel(x, y, scratch, meta)`` of ``phase`` for IR type t (llvm_render: compiled once,
    cached on disk)."""
    import hashlib
    from .. import llvm_render
    key = f"wino{phase}task{t[0]}_" + hashlib.sha1(f"winograd|{VERSION}|{_SRC}|{phase}|{t}".encode()).hexdigest()[:16]
    return llvm_render.compile_ir(key, lambda: _render(phase, t, True), False)


_IRT = {"f": "float", "d": "double"}
_prms: dict = {}        # params tuple -> its int64 array (read-only to the kernels; cleared past 4096)
_direct: dict = {}      # (phase, dtype) -> the direct builtin, or False (no IR kernel: the Numba one)


def _prm(k: tuple) -> np.ndarray:
    p = _prms.get(k)
    if p is None:
        if len(_prms) > 4096:
            _prms.clear()
        p = _prms[k] = np.array(k, np.int64)
    return p


def _direct_kernel(phase: str, dt):
    """The direct builtin of ``phase`` for arrays of dtype ``dt`` (exactly np.float32 / np.float64's: other byte
    orders go to Numba), or False."""
    k = (phase, dt)
    f = _direct.get(k)
    if f is None:
        t = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}.get(dt)
        f = False if t is None or dt is not np.dtype(dt.char) or not ir_available() else _kernel(phase, t)
        _direct[k] = f
    return f


def input_tiles(x, V, xp, tmp, m, C, H, W, ph, pw, ti0, th, tw, NT, tstride, p0, p1) -> bool:
    """input_tiles_nb (see there) on the IR kernel (float32 / float64 1-D C-contiguous arrays of one dtype, every
    index checked against the arrays' sizes first: IndexError where one is past them); the Numba kernel for other
    arrays or with NEE_WINO_IR=0.  True when an input value read is inf / NaN (V then unfit for the products: the
    caller takes another path)."""
    dt = x.dtype
    f = (_direct.get(("in", dt)) or _direct_kernel("in", dt)) if MODE[0] != "0" else False
    if (f and (m == 4 or m == 2) and V.dtype is dt and xp.dtype is dt and tmp.dtype is dt and x.ndim == 1
            and V.ndim == 1 and xp.ndim == 1 and tmp.ndim == 1 and x.flags.c_contiguous and V.flags.c_contiguous
            and xp.flags.c_contiguous and tmp.flags.c_contiguous):
        if p0 >= p1:
            return False
        if (C | H | W | ph | pw | ti0 | th | tw | NT | tstride | p0) < 0 or C == 0:
            raise ValueError(f"winograd input_tiles: bad sizes {(m, C, H, W, ph, pw, ti0, th, tw, NT, tstride)}, "
                             f"planes [{p0}, {p1})")
        a2 = (m + 2) * (m + 2)
        T = th * tw
        if (p1 * H * W > x.shape[0] or (th * m + 2) * (tw * m + 2) > xp.shape[0] or a2 * T > tmp.shape[0]
                or (a2 * C - 1) * NT + (p1 - 1) // C * tstride + T > V.shape[0]
                or not (V.flags.writeable and xp.flags.writeable and tmp.flags.writeable)):
            raise IndexError(f"winograd input_tiles: planes [{p0}, {p1}) of {C} x {H} x {W}, {th} x {tw} tiles of "
                             f"{m} (NT {NT}, stride {tstride}) past x {x.shape[0]}, V {V.shape[0]}, scratch "
                             f"{xp.shape[0]} / {tmp.shape[0]} elements (or not writeable)")
        f(x, V, xp, tmp, _prm((m, C, H, W, ph, pw, ti0, th, tw, NT, tstride, p0, p1)))
        return xp[0] != 0
    return bool(input_tiles_nb(x, V, xp, tmp, m, C, H, W, ph, pw, ti0, th, tw, NT, tstride, p0, p1))


def output_tiles(M, out, tmp, bias, has_bias, m, O, Oall, o0, OH, OW, ti0, th, tw, NT, tstride, q0, q1, relu=False):
    """output_tiles_nb (see there) on the IR kernel (float32 / float64 1-D C-contiguous arrays of one dtype, every
    index checked against the arrays' sizes first: IndexError where one is past them); the Numba kernel for other
    arrays or with NEE_WINO_IR=0."""
    dt = M.dtype
    f = (_direct.get(("out", dt)) or _direct_kernel("out", dt)) if MODE[0] != "0" else False
    if (f and (m == 4 or m == 2) and out.dtype is dt and tmp.dtype is dt and bias.dtype is dt and M.ndim == 1
            and out.ndim == 1 and tmp.ndim == 1 and bias.ndim == 1 and M.flags.c_contiguous
            and out.flags.c_contiguous and tmp.flags.c_contiguous and bias.flags.c_contiguous):
        if q0 >= q1:
            return
        if (O | Oall | o0 | OH | OW | ti0 | th | tw | NT | tstride | q0) < 0 or O == 0 or o0 + O > Oall:
            raise ValueError(f"winograd output_tiles: bad sizes {(m, O, Oall, o0, OH, OW, ti0, th, tw, NT, tstride)}, "
                             f"planes [{q0}, {q1})")
        a = m + 2
        T = th * tw
        nmax = (q1 - 1) // O
        if ((a * a * O - 1) * NT + nmax * tstride + T > M.shape[0] or M.shape[0] == 0
                or (nmax * Oall + o0 + O) * OH * OW > out.shape[0] or m * a * T > tmp.shape[0]
                or (has_bias and o0 + O > bias.shape[0])
                or not (out.flags.writeable and tmp.flags.writeable)):
            raise IndexError(f"winograd output_tiles: planes [{q0}, {q1}) of {O} (of {Oall} from {o0}) x {OH} x "
                             f"{OW}, {th} x {tw} tiles of {m} (NT {NT}, stride {tstride}) past M {M.shape[0]}, out "
                             f"{out.shape[0]}, scratch {tmp.shape[0]}, bias {bias.shape[0]} elements (or not "
                             f"writeable)")
        f(M, out, tmp, bias, _prm((m, O, Oall, o0, OH, OW, ti0, th, tw, NT, tstride, q0, q1, 1 if has_bias else 0,
                                   1 if relu else 0)))
        return
    output_tiles_nb(M, out, tmp, bias, has_bias, m, O, Oall, o0, OH, OW, ti0, th, tw, NT, tstride, q0, q1, relu)


_I32, _I64 = np.dtype(np.int32), np.dtype(np.int64)


def _same(a, b) -> bool:
    """a == b bitwise (int views of the same size; _bits): the IR kernel, or _same_nb."""
    if (MODE[0] != "0" and a.dtype is b.dtype and (a.dtype is _I32 or a.dtype is _I64) and a.ndim == 1
            and a.shape == b.shape and a.flags.c_contiguous and b.flags.c_contiguous and ir_available()):
        prm = np.array((a.shape[0], 0), np.int64)
        _kernel("same", "i32" if a.dtype.itemsize == 4 else "i64")(a, b, prm)
        return bool(prm[1])
    return _same_nb(a, b)
