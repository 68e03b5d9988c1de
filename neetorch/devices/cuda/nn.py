"""CUDA kernels beyond elementwise / reductions / softmax / matmul: convolution, pooling,
resampling, padding, indexing and scatter, scans, arg reductions, sorting, einsum, group_norm.

* ``conv2d``: an im2col kernel (generated, one thread per column element, zeros for the padding)
  then cuBLAS through ``cupy.matmul``: weights ``(G, Og, K)`` times columns ``(n, G, K, L)`` written
  straight into the NCHW output (``(n, G, Og, L)`` is its layout); 1x1 / stride 1 / unpadded
  convolutions skip im2col (the input already is the column matrix); images are processed in
  chunks that keep the column buffer under :data:`COL_BUDGET` bytes; bias added by the generated
  elementwise ``add``.  Depthwise convolutions (one input channel per group, any channel
  multiplier) take a direct kernel instead (no column buffer, the bias included).  float16/32/64.
* ``conv_transpose2d``: cuBLAS ``W^T x`` into columns, then a col2im kernel that GATHERS, for each
  output pixel, the column entries that land on it (no atomics: deterministic), plus the bias.
* ``im2col`` / ``col2im`` (``unfold`` / ``fold``): the same two kernels.
* ``max_pool2d`` (+ ``_with_indices``): one thread per output, torch's rule (the first valid tap
  starts, then ``v > best`` or ``v`` NaN takes over; indices are plane offsets ``ih * W + iw``),
  any dtype; ``avg_pool2d``: the window summed in (row, column) order (float16 and float32 in
  float, float64 in double), divided like the CPU kernel (``count_include_pad``, ``ceil_mode``,
  ``divisor_override``); floating dtypes.
* ``roll``: 2**k block copies between views (k rolled dims).
* ``pad``: no kernel of its own: constant = fill + copy of the input into the interior view;
  reflect / replicate / circular = the same, then per padded dim two copies between views of the
  output (negative strides reflect, 0 strides replicate), each through the generated ``cast``
  kernel; every dtype.
* ``index_select`` / ``gather`` / ``embedding``: one data-movement kernel per item size and index
  dtype (int32/int64) over ``(outer, k, inner)``; it bounds-checks every index (out-of-range
  entries write 0 and raise a flag, never an out-of-bounds read).  ``gather`` / ``index_select``
  indices were already range-checked on the host by the op's ``check`` (``ops/indexing.py``);
  ``embedding`` has no such check, so its flag is read back after the kernel and raises the CPU
  kernel's ``IndexError``.
* ``take``: the same kernel over the flattened input (negative indices wrap).
* ``index_add`` / ``index_copy`` / ``index_fill`` (``index_reduce_dim``): the scatter kernel with the
  vector index spread over the source; ``repeat_interleave``: the gather kernel with the source
  index built on the host from the (small) repeats.
* ``searchsorted``: a binary search per value (torch's comparisons: its answers where the sequence holds NaNs), int64 or int32 results.
* ``index`` (``x[key]`` with index tensors / masks): one flat int64 offset per result entry built
  with CuPy (masks through ``cupy.nonzero``), then the same gather kernel.
* ``scatter`` (``scatter`` / ``scatter_add`` / ``scatter_reduce``): a gather per output element over
  its index column (:func:`scatter_source`): deterministic, the CPU's order; O(k) per output element.
* ``adaptive_avg_pool2d`` / ``adaptive_max_pool2d``: one thread per output, the CPU's windows and rules;
  ``upsample_nearest2d``: two row gathers with the CPU kernel's source indices;
  ``upsample_bilinear2d``: one thread per output with the CPU kernel's indices and weights (float16
  and float32 in float, PyTorch's order of operations).
* ``cumsum`` / ``cumprod``: ``cupy.cumsum`` / ``cupy.cumprod`` accumulating in float64 (floats)
  or int64 (integers, bool) like the CPU kernel, cast into the output.
* ``argmax`` / ``argmin`` / ``max_dim`` / ``min_dim``: a generated kernel (CuPy's argmax does not
  promise the first of several NaNs): the CPU's rule (first occurrence, the first NaN wins) as an
  order-aware comparison of (value, index) pairs; one thread per output, or one block per row
  (tree combine in shared memory) for long contiguous rows.
* ``tril`` / ``triu``: one kernel per item size over contiguous (batch, rows, cols).
* ``sort`` / ``topk``: ``cupy.argsort`` (thrust's stable sort, NaN last); descending = the ascending
  sort of the reversed dim reversed back (the CPU's rule: NaN first, ties in order); topk = the first
  k of that order; values gathered by the index kernel.  ``nonzero``: ``cupy.nonzero`` into the
  columns of the output.  ``einsum``: ``cupy.einsum`` (float16 in float32 like the CPU), no bool.
* ``repeat``: one copy (the ``cast`` kernel) of the input broadcast over the repeat dims into the
  output viewed as (r0, s0, r1, s1, ...).
* ``group_norm`` (and instance_norm through it): one block per (image, group) row, float64 moments
  and the CPU kernel's per-channel affine; ``nansum`` / ``count_nonzero``: CuPy (``nansum``
  accumulates like ``sum``).

Non-contiguous inputs are made contiguous first (one copy through the ``cast`` kernel) where a
kernel wants them so; a non-contiguous output is computed into a temporary and copied.  Nothing
here imports CuPy at import time: sources are plain text (the nvcc test compiles them,
:func:`all_sources`).
"""
from __future__ import annotations

import weakref

import numpy as np

from ...tensor import dtypes as _dt
from .. import ckernels as ck

__all__ = ["COL_BUDGET", "all_sources", "static_claims", "table"]

STORAGE = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
FLOATS = ("float16", "float32", "float64")
COL_BUDGET = 256 << 20           # bytes of im2col buffer per chunk of images
BLOCK = 256
MAX_BLOCKS = 1 << 20
_BITS = {1: "uchar", 2: "ushort", 4: "uint", 8: "ullong"}
_ACC = {"float16": "float", "float32": "float", "float64": "double"}
_IDX = {"int32": "int", "int64": "llong"}


def _dn(a) -> str:
    return _dt.from_numpy_dtype(a.dtype).name


# ---------------------------------------------------------------- sources
# The kernel sources live in ..ckernels (dialect-neutral: the OpenCL backend prints the same kernels
# as OpenCL C); these wrappers print them in the CUDA dialect.
def im2col_source(isz: int) -> tuple[str, str]:
    return ck.im2col_source(ck.CUDA, isz)


def depthwise_source(dn: str) -> tuple[str, str]:
    return ck.depthwise_source(ck.CUDA, dn)


def col2im_source(dn: str) -> tuple[str, str]:
    return ck.col2im_source(ck.CUDA, dn)


def maxpool_source(dn: str) -> tuple[str, str]:
    return ck.maxpool_source(ck.CUDA, dn)


def avgpool_source(dn: str) -> tuple[str, str]:
    return ck.avgpool_source(ck.CUDA, dn)


def adaptive_source(dn: str, is_max: bool) -> tuple[str, str]:
    return ck.adaptive_source(ck.CUDA, dn, is_max)


def argred_source(dn: str, kind: str, rows: bool) -> tuple[str, str]:
    return ck.argred_source(ck.CUDA, dn, kind, rows)


def bilinear_source(dn: str) -> tuple[str, str]:
    return ck.bilinear_source(ck.CUDA, dn)


def group_norm_source(dn: str) -> tuple[str, str]:
    return ck.group_norm_source(ck.CUDA, dn)


_SCATTER_KINDS = ck.SCATTER_KINDS


def scatter_source(dn: str, idn: str) -> tuple[str, str]:
    return ck.scatter_source(ck.CUDA, dn, idn)


def searchsorted_source(dn: str, odn: str) -> tuple[str, str]:
    return ck.searchsorted_source(ck.CUDA, dn, odn)


def take_source(isz: int, idn: str) -> tuple[str, str]:
    return ck.take_source(ck.CUDA, isz, idn)


def tri_source(isz: int) -> tuple[str, str]:
    return ck.tri_source(ck.CUDA, isz)


def all_sources() -> list[tuple[str, str]]:
    """Every kernel of this module (for the nvcc test)."""
    out = []
    for isz in _BITS:
        out += [im2col_source(isz), tri_source(isz)] + [take_source(isz, i) for i in _IDX]
    out += [maxpool_source(dn) for dn in STORAGE]
    out += [avgpool_source(dn) for dn in FLOATS] + [col2im_source(dn) for dn in FLOATS]
    out += [depthwise_source(dn) for dn in FLOATS] + [bilinear_source(dn) for dn in FLOATS]
    out += [group_norm_source(dn) for dn in FLOATS]
    out += [scatter_source(dn, i) for dn in STORAGE for i in _IDX]
    out += [searchsorted_source(dn, o) for dn in STORAGE for o in _IDX]
    out += [adaptive_source(dn, True) for dn in STORAGE] + [adaptive_source(dn, False) for dn in FLOATS]
    out += [argred_source(dn, k, r) for dn in STORAGE for k in ("argmax", "argmin") for r in (False, True)]
    # the rest of the shared kernels (devices/ckernels.py): those launched here (cummax / cummin, median,
    # masked_*, batch_norm_stats, nll_loss_terms) and those only the OpenCL backend launches so far (sort,
    # nonzero, index_put, embedding_renorm_, unique): nvcc (tests/test_cuda.py) and the g++ emulation check that
    # all of them stay valid CUDA C
    C = ck.CUDA
    for dn in STORAGE:
        out += [ck.sort_source(C, dn), ck.count_chunks_source(C, dn), ck.nonzero_source(C, dn),
                ck.index_put_source(C, dn, False), ck.index_put_source(C, dn, True), ck.median_pick_source(C, dn),
                ck.nll_terms_source(C, dn), ck.unique_rows_source(C, dn)]
        if dn in FLOATS:
            out += [ck.channel_moments_source(C, dn), ck.renorm_rows_source(C, dn)]
        out += [ck.scanarg_source(C, dn, k) for k in ("cummax", "cummin")]
        out += [ck.scan_source(C, dn, dn if dn in FLOATS else "int64", k) for k in ("cumsum", "cumprod")]
    out += [ck.masked_source(C, isz, s) for isz in _BITS for s in (False, True)]
    out += [ck.scan_chunks_source(C), ck.nll_totals_source(C), ck.unique_finish_source(C), ck.take_first_source(C)]
    return out


# ---------------------------------------------------------------- host helpers
def _launch(backend, ks, total, args):
    name, src = ks
    kern = backend.modules.kernel(name, src)
    blocks = max(1, min((total + BLOCK - 1) // BLOCK, MAX_BLOCKS))
    with backend.on():
        kern((blocks,), (BLOCK,), tuple(args))
    backend.launches += 1


def _i64(v):
    return np.int64(v)


def _i32(v):
    return np.int32(v)


def _contig(backend, a):
    if a.a.flags.c_contiguous:
        return a
    c = backend.empty(a.shape, _dt.from_numpy_dtype(a.dtype))
    backend.copy_(c, a)
    return c


def _work(backend, out):
    """Where a kernel writes: ``out`` itself when contiguous, else a temporary (see :func:`_done`)."""
    if out.a.flags.c_contiguous:
        return out
    return backend.empty(out.shape, _dt.from_numpy_dtype(out.dtype))


def _done(backend, out, res):
    if res is not out:
        backend.copy_(out, res)


def _view(backend, a, shape, offset=0, strides=None):
    return backend.as_strided(a, shape, a.estrides if strides is None else strides, offset)


def _cstrides(shape):
    st, c = [], 1
    for s in reversed(shape):
        st.append(c)
        c *= max(int(s), 1)
    return tuple(reversed(st))


def _runs(total, OW):
    """(RW, NR) of the row-run kernels (ckernels: conv / pool): one thread per output here (RW = 1,
    NR = OW runs per row: ``total`` threads, as before); the OpenCL backend runs whole rows."""
    return _i64(1), _i64(OW)


def _flag(backend):
    f = backend.empty((1,), _dt.int32)
    backend.fill_(f, 0)
    return f


_SCRATCH: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _scratch(backend):
    """A per-backend int32 the index kernels may write when the caller already validated the indices."""
    f = _SCRATCH.get(backend)
    if f is None:
        f = _SCRATCH[backend] = backend.empty((1,), _dt.int32)
    return f


# ---------------------------------------------------------------- convolution
def _conv2d(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    cp = backend.cp
    x, w = _contig(backend, ins[0]), _contig(backend, ins[1])
    b = ins[2] if len(ins) > 2 else None
    N, C, H, W = x.shape
    O, Cg, KH, KW = w.shape
    OH, OW = out.shape[2], out.shape[3]
    sh, sw = attrs["stride"]
    pt, pb, pl, pr = attrs["padding"]
    dh, dw = attrs["dilation"]
    G = attrs["groups"]
    Og, K, L = O // G, Cg * KH * KW, OH * OW
    res = _work(backend, out)
    dt = _dt.from_numpy_dtype(x.dtype)
    if K == 0:
        backend.fill_(res, 0)
    elif Cg == 1 and G == C and KH * KW > 1:
        # depthwise (channel multiplier O // C): a direct kernel, no column buffer, bias included
        total = res.size
        bb = _contig(backend, b) if b is not None else None
        _launch(backend, depthwise_source(dt.name), total,
                (x.a, w.a, (bb if bb is not None else w).a, res.a, _i64(total), _i64(C), _i64(O), _i64(H), _i64(W),
                 _i32(KH), _i32(KW), _i32(sh), _i32(sw), _i32(pt), _i32(pl), _i32(dh), _i32(dw), _i64(OH),
                 _i64(OW), _i32(bb is not None)) + _runs(total, OW))
        _done(backend, out, res)
        return
    else:
        wg = w.a.reshape(G, Og, K)
        direct = KH == 1 and KW == 1 and sh == 1 and sw == 1 and pt == pb == pl == pr == 0
        per = C * KH * KW * L * x.itemsize
        nb = N if direct else max(1, min(N, COL_BUDGET // max(per, 1)))
        col = None if direct else backend.empty((nb, C * KH * KW, L), dt)
        for n0 in range(0, N, nb):
            n = min(nb, N - n0)
            if direct:
                cols = _view(backend, x, (n, G, K, L), n0 * C * H * W, _cstrides((n, G, K, L)))
            else:
                total = n * C * KH * KW * L
                _launch(backend, im2col_source(x.itemsize), total,
                        (_view(backend, x, (n, C, H, W), n0 * C * H * W).a, col.a, _i64(total), _i64(H), _i64(W),
                         _i32(KH), _i32(KW), _i32(sh), _i32(sw), _i32(pt), _i32(pl), _i32(dh), _i32(dw),
                         _i64(OH), _i64(OW)) + _runs(total, OW))
                cols = _view(backend, col, (n, G, K, L), 0, _cstrides((n, G, K, L)))
            dst = _view(backend, res, (n, G, Og, L), n0 * O * L, _cstrides((n, G, Og, L)))
            with backend.on():
                cp.matmul(wg, cols.a, out=dst.a)
            backend.launches += 1
    if b is not None:
        _add_bias(backend, res, b)
    _done(backend, out, res)


def _add_bias(backend, res, b):
    from ...ops.registry import OPS
    from .render import launch
    _N, _O = res.shape[0], res.shape[1]
    bv = backend.as_strided(b, res.shape, (0, b.estrides[0]) + (0,) * (res.ndim - 2), 0)
    launch(backend, OPS["add"], res, [res, bv])


def _conv_transpose2d(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    cp = backend.cp
    x, w = _contig(backend, ins[0]), _contig(backend, ins[1])
    b = _contig(backend, ins[2]) if len(ins) > 2 else None
    N, Cin, H, W = x.shape
    _, Cog, KH, KW = w.shape
    G = attrs["groups"]
    Cout, Cig = Cog * G, Cin // G
    OH, OW = out.shape[2], out.shape[3]
    sh, sw = attrs["stride"]
    ph, pw = attrs["padding"]
    dh, dw = attrs["dilation"]
    L, M = H * W, Cog * KH * KW
    res = _work(backend, out)
    dt = _dt.from_numpy_dtype(x.dtype)
    if Cig == 0:
        backend.fill_(res, 0)
        if b is not None:
            _add_bias(backend, res, b)
        _done(backend, out, res)
        return
    wt = _view(backend, w, (G, M, Cig), 0, (Cig * M, 1, M)).a       # (G, M, Cig): W^T per group
    per = G * M * L * x.itemsize
    nb = max(1, min(N, COL_BUDGET // max(per, 1)))
    col = backend.empty((nb, G, M, L), dt)
    for n0 in range(0, N, nb):
        n = min(nb, N - n0)
        xg = _view(backend, x, (n, G, Cig, L), n0 * Cin * L, _cstrides((n, G, Cig, L)))
        cv = _view(backend, col, (n, G, M, L), 0, _cstrides((n, G, M, L)))
        with backend.on():
            cp.matmul(wt, xg.a, out=cv.a)
        backend.launches += 1
        total = n * Cout * OH * OW
        _launch(backend, col2im_source(dt.name), total,
                (cv.a, (b if b is not None else x).a, _view(backend, res, (n, Cout, OH, OW), n0 * Cout * OH * OW).a,
                 _i64(total), _i64(H), _i64(W), _i32(KH), _i32(KW), _i32(sh), _i32(sw), _i32(ph), _i32(pw),
                 _i32(dh), _i32(dw), _i64(OH), _i64(OW), _i64(Cout), _i32(b is not None)))
    _done(backend, out, res)


def _im2col(backend, outs, ins, attrs):
    """``unfold``: the conv2d column kernel into (N, C*KH*KW, L)."""
    out = outs[0]
    if out.size == 0:
        return
    x = _contig(backend, ins[0])
    H, W = x.shape[2], x.shape[3]
    KH, KW = attrs["kernel_size"]
    dh, dw = attrs["dilation"]
    ph, pw = attrs["padding"]
    sh, sw = attrs["stride"]
    OH, OW = attrs["blocks"]
    res = _work(backend, out)
    total = res.size
    _launch(backend, im2col_source(x.itemsize), total,
            (x.a, res.a, _i64(total), _i64(H), _i64(W), _i32(KH), _i32(KW), _i32(sh), _i32(sw), _i32(ph), _i32(pw),
             _i32(dh), _i32(dw), _i64(OH), _i64(OW)) + _runs(total, OW))
    _done(backend, out, res)


def _col2im(backend, outs, ins, attrs):
    """``fold``: the transposed convolution's gathering col2im kernel (overlapping blocks summed)."""
    out = outs[0]
    if out.size == 0:
        return
    x = _contig(backend, ins[0])
    KH, KW = attrs["kernel_size"]
    dh, dw = attrs["dilation"]
    ph, pw = attrs["padding"]
    sh, sw = attrs["stride"]
    BH, BW = attrs["blocks"]
    OH, OW = out.shape[2], out.shape[3]
    res = _work(backend, out)
    total = res.size
    _launch(backend, col2im_source(_dn(x)), total,
            (x.a, x.a, res.a, _i64(total), _i64(BH), _i64(BW), _i32(KH), _i32(KW), _i32(sh), _i32(sw), _i32(ph),
             _i32(pw), _i32(dh), _i32(dw), _i64(OH), _i64(OW), _i64(1), _i32(0)))
    _done(backend, out, res)


# ---------------------------------------------------------------- pooling
def _max_pool(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _contig(backend, ins[0])
    _N, _C, H, W = x.shape
    OH, OW = out.shape[2], out.shape[3]
    KH, KW = attrs["kernel_size"]
    sh, sw = attrs["stride"]
    ph, pw = attrs["padding"]
    dh, dw = attrs["dilation"]
    res = _work(backend, out)
    ires = _work(backend, outs[1]) if len(outs) > 1 else None
    total = out.size
    _launch(backend, maxpool_source(_dn(x)), total,
            (x.a, res.a, (ires if ires is not None else res).a, _i64(total), _i64(H), _i64(W), _i64(OH), _i64(OW),
             _i32(KH), _i32(KW), _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw),
             _i32(ires is not None)) + _runs(total, OW))
    _done(backend, out, res)
    if ires is not None:
        _done(backend, outs[1], ires)


def _avg_pool(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _contig(backend, ins[0])
    _N, _C, H, W = x.shape
    OH, OW = out.shape[2], out.shape[3]
    KH, KW = attrs["kernel_size"]
    sh, sw = attrs["stride"]
    ph, pw = attrs["padding"]
    res = _work(backend, out)
    total = out.size
    _launch(backend, avgpool_source(_dn(x)), total,
            (x.a, res.a, _i64(total), _i64(H), _i64(W), _i64(OH), _i64(OW), _i32(KH), _i32(KW), _i32(sh),
             _i32(sw), _i32(ph), _i32(pw), _i32(bool(attrs["count_include_pad"])),
             _i64(int(attrs.get("divisor_override") or 0))) + _runs(total, OW))
    _done(backend, out, res)


def _adaptive(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _contig(backend, ins[0])
    H, W = x.shape[2], x.shape[3]
    OH, OW = out.shape[2], out.shape[3]
    is_max = attrs["mode"] == "max"
    res = _work(backend, out)
    ires = _work(backend, outs[1]) if len(outs) > 1 else None
    total = out.size
    _launch(backend, adaptive_source(_dn(x), is_max), total,
            (x.a, res.a, (ires if ires is not None else res).a, _i64(total), _i64(H), _i64(W), _i64(OH), _i64(OW),
             _i32(ires is not None)))
    _done(backend, out, res)
    if ires is not None:
        _done(backend, outs[1], ires)


def _upsample_nearest(backend, outs, ins, attrs):
    """Two row gathers (``take3``) with the CPU kernel's source indices (PyTorch's float32 rules)."""
    from ..cpu.kernels.conv import nearest_index
    out = outs[0]
    if out.size == 0:
        return
    x = _contig(backend, ins[0])
    N, C, H, W = x.shape
    OH, OW = out.shape[2], out.shape[3]
    sh, sw = attrs["scales"]
    hi = backend.from_host(nearest_index(H, OH, sh, attrs["exact"]))
    wi = backend.from_host(nearest_index(W, OW, sw, attrs["exact"]))
    tmp = backend.empty((N, C, OH, W), _dt.from_numpy_dtype(x.dtype))
    _take3(backend, x, hi, tmp, H, OH, W, 0)
    res = _work(backend, out)
    _take3(backend, tmp, wi, res, W, OW, 1, 0)
    _done(backend, out, res)


def _upsample_bilinear(backend, outs, ins, attrs):
    from ..cpu.kernels.conv import linear_weights
    out = outs[0]
    if out.size == 0:
        return
    x = _contig(backend, ins[0])
    H, W = x.shape[2], x.shape[3]
    OH, OW = out.shape[2], out.shape[3]
    sh, sw = attrs["scales"]
    ac = attrs["align_corners"]
    cdt = np.dtype(np.float64 if x.dtype == np.float64 else np.float32)
    h0, h1, lh0, lh1 = linear_weights(H, OH, sh, ac, cdt)
    w0, w1, lw0, lw1 = linear_weights(W, OW, sw, ac, cdt)
    ii = backend.from_host(np.concatenate([h0, h1, w0, w1]).astype(np.int64))
    ll = backend.from_host(np.concatenate([lh0, lh1, lw0, lw1]).astype(cdt))
    res = _work(backend, out)
    total = res.size
    _launch(backend, bilinear_source(_dn(x)), total,
            (x.a, res.a, ii.a, ll.a, _i64(total), _i64(H), _i64(W), _i64(OH), _i64(OW)))
    _done(backend, out, res)


def _group_norm(backend, outs, ins, attrs):
    from .rows import _block
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    N, C = x.shape[0], x.shape[1]
    G = attrs["groups"]
    HW = x.size // (N * C)
    it = iter(ins[1:])
    w = _contig(backend, next(it)) if attrs["has_weight"] else None
    b = _contig(backend, next(it)) if attrs["has_bias"] else None
    x = _contig(backend, x)
    res = _work(backend, out)
    rows, n = N * G, (C // G) * HW
    name, src = group_norm_source(_dn(x))
    kern = backend.modules.kernel(name, src)
    with backend.on():
        kern((min(rows, 1 << 20),), (_block(backend, n),),
             (x.a, (w if w is not None else x).a, (b if b is not None else x).a, res.a, _i64(rows), _i64(G),
              _i64(C // G), _i64(HW), np.float64(attrs["eps"]), _i32(w is not None), _i32(b is not None)))
    backend.launches += 1
    _done(backend, out, res)


def _reduce_np(kind):
    """``nansum`` (accumulating like ``sum``) and ``count_nonzero`` through CuPy."""
    def run(backend, outs, ins, attrs):
        from . import CUDAArray
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        cp = backend.cp
        dims = tuple(sorted(attrs["dims"]))
        xa = x.a.reshape(1) if x.ndim == 0 else x.a
        if x.ndim == 0:
            dims = (0,)
        with backend.on():
            if kind == "nansum":
                acc = np.float32 if x.dtype == np.float16 else (np.float64 if x.dtype.kind == "f" else np.int64)
                r = cp.nansum(xa, axis=dims, dtype=acc)
            else:
                r = cp.count_nonzero(xa, axis=dims)
        backend.copy_(out, CUDAArray(cp.asarray(r).reshape(out.shape)))
    run.__name__ = f"cuda_{kind}"
    return run


# ---------------------------------------------------------------- pad: copies between views
def _pad(backend, outs, ins, attrs):
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    widths, mode = attrs["widths"], attrs["mode"]
    st = out.estrides
    off = sum(lo * s for (lo, _), s in zip(widths, st))
    if mode == "constant" or x.size == 0:
        backend.fill_(out, attrs.get("value", 0))
    if x.size:
        backend.copy_(_view(backend, out, x.shape, off), x)
    if mode == "constant" or x.size == 0:
        return
    for d, (lo, hi) in enumerate(widths):
        if not (lo or hi):
            continue
        n = x.shape[d]

        def region(start, length, step=1, d=d):
            shape = list(out.shape)
            shape[d] = length
            s = list(st)
            s[d] = st[d] * step
            return _view(backend, out, shape, start * st[d], s)
        if mode == "reflect":
            pairs = [(region(0, lo), region(2 * lo, lo, -1)), (region(lo + n, hi), region(lo + n - 2, hi, -1))]
        elif mode == "replicate":
            pairs = [(region(0, lo), region(lo, lo, 0)), (region(lo + n, hi), region(lo + n - 1, hi, 0))]
        elif mode == "circular":
            pairs = [(region(0, lo), region(n, lo)), (region(lo + n, hi), region(lo, hi))]
        else:
            raise ValueError(f"pad: unknown mode {mode!r} (constant, reflect, replicate, circular)")
        for dst, src in pairs:
            if dst.size:
                backend.copy_(dst, src)


# ---------------------------------------------------------------- indexing
def _take3(backend, x, idx, res, n, k, inner, per_elem, wrap=0, read=False):
    """x (outer, n, inner) contiguous, idx contiguous, res contiguous (outer, k, inner).  ``read``: the
    error flag is zeroed first and returned (else a shared scratch flag nobody reads is passed)."""
    flag = _flag(backend) if read else _scratch(backend)
    total = res.size
    _launch(backend, take_source(x.itemsize, _dn(idx)), total,
            (x.a, idx.a, res.a, flag.a, _i64(total), _i64(n), _i64(k), _i64(inner), _i32(per_elem), _i32(wrap)))
    return flag


def _prod(s):
    r = 1
    for v in s:
        r *= int(v)
    return r


def _index_select(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x, idx = _contig(backend, ins[0]), _contig(backend, ins[1])
    d = attrs["dim"]
    res = _work(backend, out)
    _take3(backend, x, idx, res, x.shape[d], idx.size, _prod(x.shape[d + 1:]), 0)   # indices checked by op.check
    _done(backend, out, res)


def _gather(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x, idx = ins
    d = attrs["dim"]
    if any(idx.shape[k] != x.shape[k] for k in range(x.ndim) if k != d):
        shape = tuple(idx.shape[k] if k != d else x.shape[k] for k in range(x.ndim))
        x = _view(backend, x, shape)                 # the part of x the index covers
    x, idx = _contig(backend, x), _contig(backend, idx)
    res = _work(backend, out)
    _take3(backend, x, idx, res, x.shape[d], idx.shape[d], _prod(x.shape[d + 1:]), 1)   # checked by op.check
    _done(backend, out, res)


def _embedding(backend, outs, ins, attrs):
    wt, idx = ins
    out = outs[0]
    V, D = wt.shape
    if idx.size == 0:
        return
    if out.size == 0:                                # nothing to copy, but the indices must still be valid
        _check_embedding(backend, idx, V)
        return
    wt, idx = _contig(backend, wt), _contig(backend, idx)
    res = _work(backend, out)
    flag = _take3(backend, wt, idx, res, V, idx.size, D, 0, read=True)
    if int(backend.to_host(flag)[0]):
        _check_embedding(backend, idx, V)
    _done(backend, out, res)


def _check_embedding(backend, idx, V):
    ii = backend.to_host(idx).reshape(-1).astype(np.int64)
    bad = np.flatnonzero((ii < 0) | (ii >= V))
    if bad.size:
        v = int(ii[bad[0]])
        raise IndexError(f"index out of range in self: embedding index {v} is out of range for a weight table "
                         f"with {V} rows (valid indices are 0..{V - 1})")


def _take(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x, idx = _contig(backend, ins[0]), _contig(backend, ins[1])
    res = _work(backend, out)
    _take3(backend, x, idx, res, x.size, idx.size, 1, 1, wrap=1)     # indices checked by op.check
    _done(backend, out, res)


def _repeat(backend, outs, ins, attrs):
    """``out`` viewed as (r0, s0, r1, s1, ...) = the input broadcast over the r dims: one copy."""
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    reps = attrs["repeats"]
    xs = (1,) * (len(reps) - x.ndim) + tuple(x.shape)
    xst = (0,) * (len(reps) - x.ndim) + tuple(x.estrides)
    res = _work(backend, out)
    inter, ost, sst = [], [], []
    for r, n, s, os_ in zip(reps, xs, xst, _cstrides(out.shape)):
        inter += [r, n]
        ost += [os_ * n, os_]
        sst += [0, s]
    backend.copy_(_view(backend, res, inter, 0, ost), _view(backend, x, inter, 0, sst))
    _done(backend, out, res)


def _argsort(backend, x, d, descending, k=None):
    """int64 indices that stably sort ``x`` along ``d`` (CPU rule: ascending NaN last; descending =
    the ascending sort of the reversed dim, reversed back: NaN first, ties in order), cut to the
    first ``k`` along ``d``; ``cupy.argsort`` (thrust stable sort) does the sorting."""
    from ...ops.registry import OPS
    from . import CUDAArray
    from .render import launch
    cp = backend.cp
    n = x.shape[d]
    xs = x
    if descending and n > 1:
        st = list(x.estrides)
        st[d] = -st[d]
        xs = backend.as_strided(x, x.shape, st, (n - 1) * x.estrides[d])
    with backend.on():
        # cupy sorts along the last axis and hands back a moved-axis *view* for any other d: the
        # gather kernel and the strided views below read the indices as contiguous, so copy.
        j = CUDAArray(cp.argsort(xs.a, axis=d))
    j = _contig(backend, j)
    if descending and n > 1:
        st = list(_cstrides(x.shape))
        off = (n - 1) * st[d]
        st[d] = -st[d]
        jf = backend.as_strided(j, x.shape, st, off)
        r = backend.empty(x.shape, _dt.int64)
        launch(backend, OPS["sub"], r, [backend.from_host(np.array(n - 1, np.int64)), jf])
        j = r
    if k is not None and k < n:
        shape = list(x.shape)
        shape[d] = k
        jk = backend.empty(tuple(shape), _dt.int64)
        backend.copy_(jk, backend.as_strided(j, shape, j.estrides, 0))
        j = jk
    return j


def _sort(backend, outs, ins, attrs):
    x, vals, inds = ins[0], outs[0], outs[1]
    if x.size == 0:
        return
    d = attrs["dim"]
    _sorted_out(backend, x, d, _argsort(backend, x, d, attrs["descending"]), vals, inds)


def _topk(backend, outs, ins, attrs):
    x, vals, inds = ins[0], outs[0], outs[1]
    if vals.size == 0:
        return
    d = attrs["dim"]
    _sorted_out(backend, x, d, _argsort(backend, x, d, attrs["largest"], attrs["k"]), vals, inds)


def _sorted_out(backend, x, d, j, vals, inds):
    """vals = x gathered along d at j (``take3``), inds = j."""
    xc = _contig(backend, x)
    res = _work(backend, vals)
    _take3(backend, xc, j, res, xc.shape[d], j.shape[d], _prod(xc.shape[d + 1:]), 1)
    _done(backend, vals, res)
    backend.copy_(inds, j)


def _nonzero(backend, outs, ins, attrs):
    """``cupy.nonzero`` (row-major order, like ``np.argwhere``) copied into the columns of ``out``."""
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    from . import CUDAArray
    cp = backend.cp
    with backend.on():
        cols = cp.nonzero(x.a)
    for c, a in enumerate(cols):
        backend.copy_(backend.as_strided(out, (out.shape[0],), (out.estrides[0],), c * out.estrides[1]),
                      CUDAArray(a))


def _einsum(backend, outs, ins, attrs):
    """``cupy.einsum`` (cuBLAS / cuTENSOR contractions); float16 operands computed in float32 like the CPU."""
    out = outs[0]
    if out.size == 0:
        return
    from . import CUDAArray
    cp = backend.cp
    with backend.on():
        ops = [a.a.astype(np.float32) if a.dtype == np.float16 else a.a for a in ins]
        r = cp.einsum(attrs["equation"], *ops)
    backend.copy_(out, CUDAArray(cp.asarray(r).reshape(out.shape)))


def _einsum_claims(backend, dtypes):
    if any(d.name == "bool" for d in dtypes):
        return "no cuda einsum for bool"
    return None


def _scatter(backend, outs, ins, attrs):
    x, idx, src = ins
    out = outs[0]
    if out.size == 0:
        return
    backend.copy_(out, x)
    if idx.size == 0:
        return
    d = attrs["dim"]
    region = out
    if any(idx.shape[q] != out.shape[q] for q in range(out.ndim) if q != d):
        region = _view(backend, out, tuple(idx.shape[q] if q != d else out.shape[q] for q in range(out.ndim)))
    res = _contig(backend, region)
    idx, src = _contig(backend, idx), _contig(backend, src)
    total = res.size
    _launch(backend, scatter_source(_dn(res), _dn(idx)), total,
            (res.a, idx.a, src.a, _i64(total), _i64(res.shape[d]), _i64(idx.shape[d]), _i64(_prod(res.shape[d + 1:])),
             _i32(_SCATTER_KINDS[attrs["reduce"]]), _i32(bool(attrs.get("include_self", True)))))
    if res is not region:
        backend.copy_(region, res)


def _index(backend, outs, ins, attrs):
    """Advanced indexing ``x[key]``: every index entry becomes per-dim coordinates (index tensors
    wrapped mod the dim size, they were range-checked by the frontend; masks through ``cupy.nonzero``),
    combined by CuPy into one flat int64 offset over the covered dims (broadcast to the result's
    index shape), then ONE gather (``take3``) over x viewed as (before, covered, after) -- or, for
    covered dims that are not adjacent, over a copy of x with them moved to the front (numpy's rule:
    the index dims lead the result)."""
    from . import CUDAArray
    x, idx = ins[0], ins[1:]
    out = outs[0]
    if out.size == 0:
        return
    cp = backend.cp
    dims, ncons = attrs["dims"], attrs["ncons"]
    parts = []                                   # (dim, coordinate array)
    with backend.on():
        for d, c, t in zip(dims, ncons, idx):
            if t.dtype == np.bool_:
                coords = cp.nonzero(t.a)
                parts += [(d + q, coords[q]) for q in range(c)]
            else:
                parts.append((d, cp.remainder(t.a.astype(np.int64), x.shape[d])))
    covered = sorted(p[0] for p in parts)
    adjacent = covered == list(range(covered[0], covered[0] + len(covered)))
    if adjacent:
        xs = _contig(backend, x)
        first, last = covered[0], covered[-1]
    else:                                        # covered dims first, the rest after (a copy)
        perm = covered + [q for q in range(x.ndim) if q not in covered]
        xv = backend.as_strided(x, tuple(x.shape[q] for q in perm), tuple(x.estrides[q] for q in perm),
                                0)
        xs = _contig(backend, xv)
        first, last = 0, len(covered) - 1
        parts = [(covered.index(d), a) for d, a in parts]
    sizes = xs.shape[first:last + 1]
    cst = _cstrides(sizes)
    with backend.on():
        f = None
        for d, a in parts:
            term = a * int(cst[d - first]) if cst[d - first] != 1 else a
            f = term if f is None else f + term
        f = CUDAArray(cp.asarray(f).astype(np.int64))
    fi = _contig(backend, f)
    res = _work(backend, out)
    _take3(backend, xs, fi, res, _prod(sizes), fi.size, _prod(xs.shape[last + 1:]), 0)
    _done(backend, out, res)


def _adv_claims(backend, dtypes):
    # (x, *index tensors, out) on calls: int32/int64 indices or bool masks
    bad = [d.name for d in dtypes[1:-1] if d.name not in ("bool", "int32", "int64")]
    return f"cuda index takes int32/int64/bool index tensors, not {bad[0]}" if bad else None


def _index_reduce_dim(backend, outs, ins, attrs):
    """index_add / index_copy / index_fill: the scatter kernel with the 1-D index spread over the
    (outer, k, inner) source (add: sum with self, ``alpha`` applied first in the output dtype like the
    CPU; copy / fill: the last write wins)."""
    from ...ops.registry import OPS
    from .render import launch
    x, idx, src = ins
    out = outs[0]
    if out.size == 0:
        return
    d = attrs["dim"]
    O, n, Ii = _prod(out.shape[:d]), out.shape[d], _prod(out.shape[d + 1:])
    k = idx.shape[0]
    dt = _dt.from_numpy_dtype(out.dtype)
    i3 = _contig(backend, backend.as_strided(idx, (O, k, Ii), (0, idx.estrides[0], 0), 0))
    if src.ndim == 0:
        s3 = backend.as_strided(src, (O, k, Ii), (0, 0, 0), 0)
    else:
        s3 = _view(backend, _contig(backend, src), (O, k, Ii), 0, _cstrides((O, k, Ii)))
    if attrs["mode"] == "add" and attrs.get("alpha", 1) != 1:
        scaled = backend.empty((O, k, Ii), dt)
        launch(backend, OPS["mul"], scaled, [s3, backend.from_host(np.array(attrs["alpha"]).astype(out.dtype))])
        s3 = scaled
    s3 = _contig(backend, s3)
    backend.copy_(out, x)
    res = _contig(backend, out)
    total = res.size
    _launch(backend, scatter_source(dt.name, _dn(i3)), total,
            (res.a, i3.a, s3.a, _i64(total), _i64(n), _i64(k), _i64(Ii),
             _i32(1 if attrs["mode"] == "add" else 0), _i32(1)))
    _done(backend, out, res)


def _repeat_interleave(backend, outs, ins, attrs):
    """The source index of every output slice (``np.repeat`` of the repeats, read back: small) and the
    gather kernel."""
    x, r = ins
    out = outs[0]
    if out.size == 0:
        return
    d = attrs["dim"]
    src = np.repeat(np.arange(x.shape[d], dtype=np.int64), backend.to_host(r).astype(np.int64))
    xs = _contig(backend, x)
    res = _work(backend, out)
    _take3(backend, xs, backend.from_host(src), res, x.shape[d], src.size, _prod(x.shape[d + 1:]), 0)
    _done(backend, out, res)


def _searchsorted(backend, outs, ins, attrs):
    seq, vals = _contig(backend, ins[0]), _contig(backend, ins[1])
    out = outs[0]
    if out.size == 0:
        return
    n = seq.shape[-1]
    m = vals.shape[-1] if vals.ndim else 1
    res = _work(backend, out)
    total = res.size
    _launch(backend, searchsorted_source(_dn(seq), _dn(out)), total,
            (seq.a, vals.a, res.a, _i64(total), _i64(n), _i64(m), _i32(seq.ndim > 1), _i32(bool(attrs["right"]))))
    _done(backend, out, res)


def _roll(backend, outs, ins, attrs):
    """Each rolled dim splits into two blocks: 2**k block copies (the ``cast`` kernel between views)
    straight from the input into place; shifts of a repeated dim add up (torch)."""
    import itertools
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    sh = {}
    for d, s in zip(attrs["dims"], attrs["shifts"]):
        sh[d] = (sh.get(d, 0) + s) % x.shape[d]
    segs = []                                    # per dim: [(src start, dst start, length)]
    for d in range(x.ndim):
        n, s = x.shape[d], sh.get(d, 0)
        segs.append([(0, 0, n)] if s == 0 else [(0, s, n - s), (n - s, 0, s)])
    for combo in itertools.product(*segs):
        shape = tuple(c[2] for c in combo)
        if not all(shape):
            continue
        src = backend.as_strided(x, shape, x.estrides, sum(c[0] * st for c, st in zip(combo, x.estrides)))
        dst = backend.as_strided(out, shape, out.estrides, sum(c[1] * st for c, st in zip(combo, out.estrides)))
        backend.copy_(dst, src)


def _index_claims(backend, dtypes):
    # (x, index, out) on calls; the static-claims check asks with (x, out) only
    if len(dtypes) >= 3 and dtypes[1].name not in _IDX:
        return f"cuda index kernels take int32/int64 indices, not {dtypes[1].name}"
    return None


def _embedding_claims(backend, dtypes):
    if len(dtypes) >= 3 and dtypes[1].name not in _IDX:
        return f"cuda embedding takes int32/int64 indices, not {dtypes[1].name}"
    return None


# ---------------------------------------------------------------- scans, arg reductions, triangles
def _scan(kind):
    def run(backend, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        cp = backend.cp
        acc = np.float64 if (x.dtype.kind == "f" or out.dtype.kind == "f") else np.int64
        xa = x.a.reshape(1) if x.ndim == 0 else x.a
        d = attrs["dim"] if x.ndim else 0
        with backend.on():
            r = (cp.cumsum if kind == "cumsum" else cp.cumprod)(xa, axis=d, dtype=acc)
        from . import CUDAArray
        backend.copy_(out, CUDAArray(r.reshape(out.shape)))
    run.__name__ = f"cuda_{kind}"
    return run


def _argred(backend, kind, x, d, vals, inds):
    """indices (and values) of the max/min of contiguous-made ``x`` along ``d`` into ``inds`` / ``vals``."""
    xc = _contig(backend, x)
    if d is None or xc.ndim == 0:
        O, n, I = 1, xc.size, 1
    else:
        O, n, I = _prod(xc.shape[:d]), xc.shape[d], _prod(xc.shape[d + 1:])
    rows = I == 1 and n >= 64
    ires = _work(backend, inds)
    vres = _work(backend, vals) if vals is not None else None
    name, src = argred_source(_dn(xc), kind, rows)
    kern = backend.modules.kernel(name, src)
    args = (xc.a, (vres if vres is not None else xc).a, ires.a, _i64(O), _i64(n), _i64(I), _i32(vres is not None))
    if rows:
        blk = 1 if backend.emulated else 256       # the emulation runs a block's threads one after another
        grid = min(O, 1 << 16)
    else:
        blk, grid = BLOCK, max(1, min((O * I + BLOCK - 1) // BLOCK, MAX_BLOCKS))
    with backend.on():
        kern((grid,), (blk,), args)
    backend.launches += 1
    _done(backend, inds, ires)
    if vres is not None:
        _done(backend, vals, vres)


def _arg(kind):
    def run(backend, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        d = attrs["dim"]
        _argred(backend, kind, x, d if x.ndim else None, None, out)
    run.__name__ = f"cuda_{kind}"
    return run


def _max_dim(kind):
    def run(backend, outs, ins, attrs):
        x, vals, inds = ins[0], outs[0], outs[1]
        if vals.size == 0:
            return
        _argred(backend, kind, x, attrs["dim"] if x.ndim else None, vals, inds)
    run.__name__ = f"cuda_{kind}_dim"
    return run


def _tri(lower):
    def run(backend, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        x = _contig(backend, x)
        res = _work(backend, out)
        R, C = x.shape[-2], x.shape[-1]
        total = x.size
        _launch(backend, tri_source(x.itemsize), total,
                (x.a, res.a, _i64(total), _i64(R), _i64(C), _i64(int(attrs["diagonal"])), _i32(lower)))
        _done(backend, out, res)
    run.__name__ = "cuda_tril" if lower else "cuda_triu"
    return run



# ---------------------------------------------------------------- shared with the OpenCL backend (ckernels)
def _ond(x, d):
    if x.ndim == 0:
        return 1, 1, 1
    d %= x.ndim
    return _prod(x.shape[:d]), x.shape[d], _prod(x.shape[d + 1:])


def _scanarg(kind):
    """cummax / cummin: one thread per (outer, inner) column, the CPU kernel's rule (ckernels.scanarg_source)."""
    def run(backend, outs, ins, attrs):
        x, vals, inds = ins[0], outs[0], outs[1]
        if vals.size == 0:
            return
        xc = _contig(backend, x)
        O, n, I = _ond(xc, attrs["dim"])
        vres, ires = _work(backend, vals), _work(backend, inds)
        _launch(backend, ck.scanarg_source(ck.CUDA, _dn(xc), kind), O * I,
                (xc.a, vres.a, ires.a, _i64(O), _i64(n), _i64(I)))
        _done(backend, vals, vres)
        _done(backend, inds, ires)
    run.__name__ = f"cuda_{kind}"
    return run


def _diag_embed(backend, outs, ins, attrs):
    """Zeros, then the input copied into the (dim1, dim2) diagonal of the output: a strided view."""
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    backend.fill_(out, 0)
    if x.size == 0:
        return
    off, d1, d2 = attrs["offset"], attrs["dim1"], attrs["dim2"]
    st = out.estrides
    rest = [q for q in range(out.ndim) if q not in (d1, d2)]
    strides = [st[q] for q in rest] + [st[d1] + st[d2]]
    start = off * st[d2] if off >= 0 else -off * st[d1]
    backend.copy_(backend.as_strided(out, x.shape, strides, start), x)


def _median(backend, outs, ins, attrs):
    """The stable sort of the dim (``cupy.argsort``), then the lower median or the first NaN
    (ckernels.median_pick_source): the OpenCL backend's kernel."""
    x, vals, inds = ins[0], outs[0], outs[1]
    if vals.size == 0:
        return
    d = attrs["dim"]
    xc = _contig(backend, x)
    if d is None or xc.ndim == 0:
        xc = backend.as_strided(xc, (xc.size,), (1,), 0)
        d = 0
    O, n, I = _ond(xc, d)
    order = _argsort(backend, xc, d, False)
    vres, ires = _work(backend, vals), _work(backend, inds)
    _launch(backend, ck.median_pick_source(ck.CUDA, _dn(xc)), O * I,
            (xc.a, order.a, vres.a, ires.a, _i64(O), _i64(n), _i64(I)))
    _done(backend, vals, vres)
    _done(backend, inds, ires)


def _batch_norm_stats(backend, outs, ins, attrs):
    """Per-channel mean / biased variance in float64: one block per channel (ckernels.channel_moments_source)."""
    from .rows import _block
    x = ins[0]
    mean, var = outs
    if mean.size == 0:
        return
    N, C = x.shape[0], x.shape[1]
    B = x.size // (N * C) if N * C else 0
    xc = _contig(backend, x)
    mres, vres = _work(backend, mean), _work(backend, var)
    name, src = ck.channel_moments_source(ck.CUDA, _dn(xc))
    kern = backend.modules.kernel(name, src)
    with backend.on():
        kern((min(C, 1 << 16),), (_block(backend, N * B),), (xc.a, mres.a, vres.a, _i64(N), _i64(C), _i64(B)))
    backend.launches += 1
    _done(backend, mean, mres)
    _done(backend, var, vres)


_CHUNK = 4096


def _chunk_offsets(backend, m):
    n = m.size
    nch = -(-n // _CHUNK)
    cnt = backend.empty((nch,), _dt.int64)
    _launch(backend, ck.count_chunks_source(ck.CUDA, _dn(m)), nch, (m.a, cnt.a, _i64(n), _i64(_CHUNK)))
    _launch(backend, ck.scan_chunks_source(ck.CUDA), 1, (cnt.a, _i64(nch)))
    return cnt, nch


def _masked(scatter):
    """masked_select / masked_scatter: per-chunk counts, their scan, ordered writes (ckernels)."""
    def run(backend, outs, ins, attrs):
        out = outs[0]
        if out.size == 0:
            return
        if scatter:
            x, m, src = ins
            backend.copy_(out, x)
            if not attrs["count"]:
                return
            mc, vc = _contig(backend, m), _contig(backend, src)
            res = _contig(backend, out)
        else:
            x, m = ins
            mc, vc = _contig(backend, m), _contig(backend, x)
            res = _work(backend, out)
        cnt, nch = _chunk_offsets(backend, mc)
        _launch(backend, ck.masked_source(ck.CUDA, vc.itemsize, scatter), nch,
                (mc.a, vc.a, res.a, cnt.a, _i64(mc.size), _i64(_CHUNK)))
        _done(backend, out, res)
    run.__name__ = "cuda_masked_scatter" if scatter else "cuda_masked_select"
    return run


def _mask_claims(backend, dtypes):
    if len(dtypes) >= 3 and dtypes[1].name != "bool":
        return f"cuda masked_select / masked_scatter take a bool mask, not {dtypes[1].name}"
    return None


def _nll_loss_terms(backend, outs, ins, attrs):
    """Per-(n, k) terms in parallel, the totals by one thread in order (the CPU's float64 sums exactly);
    out-of-range targets flagged by the kernel and reported with the CPU kernel's error (ckernels)."""
    lp = ins[0]
    nll, sm, tot = outs
    N, C = lp.shape[0], lp.shape[1]
    K = lp.size // (N * C) if N * C else (_prod(lp.shape[2:]) if lp.ndim > 2 else 1)
    if N * C * K == 0:
        for o in outs:
            backend.fill_(o, 0)
        return
    lpc = _contig(backend, lp)
    tgt = ins[1]
    if tgt.dtype != np.int64 or not tgt.a.flags.c_contiguous:
        t64 = backend.empty(tgt.shape, _dt.int64)
        backend.copy_(t64, tgt)
        tgt = t64
    w = backend.empty((C,), _dt.float64)
    if attrs["has_weight"]:
        backend.copy_(w, ins[2])
    else:
        backend.fill_(w, 1.0)
    m = N * K
    nres, sres = _work(backend, nll), _work(backend, sm)
    part = backend.empty((3 * m,), _dt.float64)
    flag = _flag(backend)
    _launch(backend, ck.nll_terms_source(ck.CUDA, _dn(lpc)), m,
            (lpc.a, tgt.a, w.a, nres.a, sres.a, part.a, flag.a, _i64(N), _i64(C), _i64(K),
             _i64(attrs["ignore_index"]), _i32(bool(attrs["smooth"]))))
    if int(backend.to_host(flag)[0]):
        t = backend.to_host(tgt).reshape(-1)
        bad = t[(t != attrs["ignore_index"]) & ((t < 0) | (t >= C))]
        raise IndexError(f"nll_loss: target {int(bad[0])} is out of bounds (expected a class index in [0, {C}) or "
                         f"ignore_index={attrs['ignore_index']})")
    tres = _work(backend, tot)
    _launch(backend, ck.nll_totals_source(ck.CUDA), 1, (part.a, tres.a, _i64(m)))
    _done(backend, nll, nres)
    _done(backend, sm, sres)
    _done(backend, tot, tres)


# ---------------------------------------------------------------- claims and the table
def _floats_same(op):
    def claims(backend, dtypes):
        d = dtypes[0]
        if d.name not in FLOATS:
            return f"no cuda {op} for {d.name} (cuBLAS: floating dtypes only)"
        if any(x is not d for x in dtypes):
            return f"cuda {op} needs one dtype, got {', '.join(x.name for x in dtypes)}"
        return None
    return claims


def _floats(op):
    def claims(backend, dtypes):
        return None if dtypes[0].name in FLOATS else f"cuda {op} needs a floating input, got {dtypes[0].name}"
    return claims


_CLAIMS = {
    "conv2d": FLOATS, "conv_transpose2d": FLOATS,
    "max_pool2d": STORAGE, "max_pool2d_with_indices": STORAGE, "avg_pool2d": FLOATS,
    "pad": STORAGE, "index_select": STORAGE, "gather": STORAGE, "embedding": STORAGE,
    "cumsum": STORAGE, "cumprod": STORAGE, "argmax": STORAGE, "argmin": STORAGE,
    "tril": STORAGE, "triu": STORAGE,
    "adaptive_avg_pool2d": FLOATS, "adaptive_max_pool2d": STORAGE, "upsample_nearest2d": STORAGE,
    "take": STORAGE, "repeat": STORAGE, "max_dim": STORAGE, "min_dim": STORAGE,
    "sort": STORAGE, "topk": STORAGE, "nonzero": STORAGE,
    "einsum": tuple(d for d in STORAGE if d != "bool"), "upsample_bilinear2d": FLOATS,
    "im2col": STORAGE, "col2im": FLOATS, "group_norm": FLOATS, "nansum": STORAGE, "count_nonzero": STORAGE,
    "scatter": STORAGE, "index": STORAGE, "index_reduce_dim": STORAGE, "repeat_interleave": STORAGE,
    "searchsorted": STORAGE, "roll": STORAGE,
    "cummax": STORAGE, "cummin": STORAGE, "diag_embed": STORAGE, "batch_norm_stats": FLOATS,
    "masked_select": STORAGE, "masked_scatter": STORAGE,
    "nll_loss_terms": STORAGE,   # (the frontends pass floats; the kernel computes in double for any dtype)
    "median": STORAGE,   # (the frontend refuses bool, as torch)
}


def table() -> dict:
    t = {"conv2d": _conv2d, "conv_transpose2d": _conv_transpose2d,
         "max_pool2d": _max_pool, "max_pool2d_with_indices": _max_pool, "avg_pool2d": _avg_pool,
         "pad": _pad, "index_select": _index_select, "gather": _gather, "embedding": _embedding,
         "cumsum": _scan("cumsum"), "cumprod": _scan("cumprod"), "argmax": _arg("argmax"), "argmin": _arg("argmin"),
         "tril": _tri(1), "triu": _tri(0),
         "adaptive_avg_pool2d": _adaptive_avg, "adaptive_max_pool2d": _adaptive, "upsample_nearest2d": _upsample_nearest,
         "take": _take, "repeat": _repeat, "max_dim": _max_dim("argmax"), "min_dim": _max_dim("argmin"),
         "sort": _sort, "topk": _topk, "nonzero": _nonzero, "einsum": _einsum,
         "upsample_bilinear2d": _upsample_bilinear, "im2col": _im2col, "col2im": _col2im,
         "group_norm": _group_norm, "nansum": _reduce_np("nansum"), "count_nonzero": _reduce_np("count_nonzero"),
         "scatter": _scatter, "index": _index, "index_reduce_dim": _index_reduce_dim,
         "repeat_interleave": _repeat_interleave, "searchsorted": _searchsorted, "roll": _roll,
         "cummax": _scanarg("cummax"), "cummin": _scanarg("cummin"), "diag_embed": _diag_embed,
         "batch_norm_stats": _batch_norm_stats, "masked_select": _masked(False), "masked_scatter": _masked(True),
         "nll_loss_terms": _nll_loss_terms, "median": _median}
    t["masked_select"].claims = t["masked_scatter"].claims = _mask_claims
    assert set(t) == set(_CLAIMS)
    return t


_conv2d.claims = _floats_same("conv2d")
_conv_transpose2d.claims = _floats_same("conv_transpose2d")
_avg_pool.claims = _floats("avg_pool2d")
_index_select.claims = _gather.claims = _index_claims
_embedding.claims = _embedding_claims
_take.claims = _scatter.claims = _index_claims
_einsum.claims = _einsum_claims
_index.claims = _adv_claims
_index_reduce_dim.claims = _index_claims
_upsample_bilinear.claims = _floats("upsample_bilinear2d")
_col2im.claims = _floats("col2im")
_group_norm.claims = _floats("group_norm")
_batch_norm_stats.claims = _floats("batch_norm_stats")


def _adaptive_avg(backend, outs, ins, attrs):
    _adaptive(backend, outs, ins, attrs)


_adaptive_avg.claims = _floats("adaptive_avg_pool2d")


def static_claims() -> dict[str, frozenset[str]]:
    """``{op: dtype names}`` of this module's ops (the same rules as the ``claims`` functions)."""
    return {k: frozenset(v) for k, v in _CLAIMS.items()}
