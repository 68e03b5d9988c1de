"""OpenCL kernels beyond elementwise / reductions / softmax / matmul: convolution, pooling,
resampling, data movement, indexing and scatter, scans, arg reductions, sorting, row norms, losses.

The kernels are the CUDA backend's, printed in the OpenCL dialect by :mod:`..ckernels` (one
source per kernel for both backends); this module is the host side, which follows the CUDA
backend's (``devices/cuda/nn.py``) op by op:

* ``conv2d``: im2col kernel + this backend's matmul (:mod:`.special`) writing straight into the
  NCHW output viewed as ``(n, G, Og, L)``; 1x1 / stride 1 / unpadded: no im2col; depthwise: a
  direct kernel; column buffer chunked under :data:`COL_BUDGET`; bias by the generated ``add``.
  ``conv_transpose2d``: matmul into columns + the gathering col2im kernel (deterministic).
* pools (max with indices, avg, adaptive avg / max), ``im2col`` / ``col2im``, ``upsample_nearest2d``
  (two row gathers), ``upsample_bilinear2d``; conv / pool kernels give a work-item a whole output
  row (``RW = OW``: the 64-bit index arithmetic once per row; GPUs run them one thread per output).
* ``cat`` / ``flip`` / ``pad`` / ``roll`` / ``repeat`` / ``diag_embed``: copies between views (the
  generated ``cast`` kernel handles any strides, negative and zero ones included); ``tril`` / ``triu``.
* ``index_select`` / ``gather`` / ``embedding`` / ``take`` / ``repeat_interleave``: the bounds-checked
  gather kernel (``take3``: an out-of-range index writes 0 and raises a flag, never reads out of
  bounds); host checks of ``ops/indexing.py`` stay; ``embedding`` reads the flag back and raises.
  ``index`` (``x[key]``) and ``index_put`` work out element offsets on the host from the (read back)
  index tensors, then one gather / one serial in-order write on the device.  ``embedding_renorm_``
  (``max_norm``): the unique indices on the host, a float64 norm and scale per row on the device.
* ``scatter`` (+ reduce) / ``index_reduce_dim``: the gather-formulated scatter kernel (no atomics).
* ``nonzero`` / ``masked_select`` / ``masked_scatter`` / ``unique`` (sorted): stream compaction
  (per-chunk counts, a scan of them, ordered writes).
* ``argmax`` / ``argmin`` / ``max_dim`` / ``min_dim``: one work-item per output, or one work-group per
  long contiguous row (tree combine in local memory); ``sort`` / ``topk``: a stable merge sort per
  column (the CPU's order: NaN last ascending, first descending); ``median``: the sort, then the
  lower median or the first NaN.
* ``layer_norm`` / ``rms_norm`` / ``group_norm`` / ``batch_norm_stats``: one work-group per row
  (float64 statistics); ``nll_loss_terms`` (cross_entropy / nll_loss): per-element terms, the
  totals summed by one work-item in order (the CPU's float64 sums exactly).
* ``cumsum`` / ``cumprod`` / ``cummax`` / ``cummin``: a serial scan per (outer, inner) column.
* ``searchsorted``: a binary search per value; ``einsum``: diagonals as views, sums by the
  reduction kernel, contractions as batched matmuls.

Kernel arguments are whole buffers: an input that is not contiguous or starts at an offset is
copied first (``_c0``), an output that is not is computed into a temporary and copied back.
Every launch uses one work-group size (:data:`LOCAL`): PoCL builds a work-group function per
kernel and size at first launch.  float16: not claimed (no ``cl_khr_fp16`` kernels); kernels that
compute in double need ``cl_khr_fp64`` and are not claimed without it.
"""
from __future__ import annotations

import numpy as np

from ...tensor import dtypes as _dt
from .. import ckernels as ck
from . import CLArray

__all__ = ["COL_BUDGET", "all_sources", "table"]

D = ck.OPENCL
COL_BUDGET = 64 << 20            # bytes of im2col buffer per chunk of images
MAX_GROUPS = 4096                # grid-stride kernels: at most this many work-groups
LOCAL = 64                       # the work-group size of every kernel here
_IDX = ck.IDX
INTS = ("bool", "uint8", "int8", "int16", "int32", "int64")
FLOATS = ("float32", "float64")


def _dn(a) -> str:
    return _dt.from_numpy_dtype(a.dtype).name


def _ok(a) -> bool:
    return a.offset == 0 and a.is_contiguous


def _c0(backend, a):
    """``a`` if contiguous at offset 0 (kernel arguments are whole buffers), else a copy."""
    if _ok(a):
        return a
    c = backend.empty(a.shape, _dt.from_numpy_dtype(a.dtype))
    backend.copy_(c, a)
    return c


def _work(backend, out):
    return out if _ok(out) else backend.empty(out.shape, _dt.from_numpy_dtype(out.dtype))


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


def _prod(s):
    r = 1
    for v in s:
        r *= int(v)
    return r


def _i64(v):
    return np.int64(v)


def _i32(v):
    return np.int32(v)


def _args(args):
    out = []
    for a in args:
        if isinstance(a, CLArray):
            if a.offset:
                raise AssertionError(f"opencl kernel argument at offset {a.offset}")
            out.append(a.storage.buffer)
        else:
            out.append(a)
    return out


def _enqueue(backend, kern, gsize, lsize, args):
    cl = backend.cl
    with backend._lock:
        backend._last_args.pop(kern, None)
        kern.set_args(*_args(args))
        cl.enqueue_nd_range_kernel(backend.queue, kern, (gsize,), (lsize,))
        backend.launches += 1


def _launch(backend, ks, total, args):
    """A grid-stride kernel over ``total`` items: work-groups of LOCAL, at most MAX_GROUPS of them (the
    kernel loops).  One fixed work-group size: PoCL generates (and caches) its work-group function per
    kernel AND size at first launch (0.1-0.3 s cold), so sizes that vary with the call would recompile."""
    if total <= 0:
        return
    name, src = ks
    kern = backend.programs.kernel(name, src)
    _enqueue(backend, kern, min(-(-total // LOCAL), MAX_GROUPS) * LOCAL, LOCAL, args)


def _launch_rows(backend, ks, rows, n, args):
    """One work-group of LOCAL work-items per row (the kernel loops over rows by the number of groups;
    the local-memory trees need a power of two <= 256)."""
    if rows <= 0:
        return
    name, src = ks
    kern = backend.programs.kernel(name, src)
    _enqueue(backend, kern, min(rows, 1 << 16) * LOCAL, LOCAL, args)


def _runs(total, OW):
    """(RW, NR) of the row-run kernels (ckernels: conv / pool): on this backend a thread per whole
    output row (RW = OW, NR = 1; launched over ``total // OW`` rows): on CPU devices the per-output
    index arithmetic would cost more than the work."""
    return _i64(OW), _i64(1)


def _flag(backend):
    f = backend.empty((1,), _dt.int32)
    backend.fill_(f, 0)
    return f


def _scratch(backend):
    f = getattr(backend, "_nn_scratch", None)
    if f is None:
        f = backend._nn_scratch = backend.empty((1,), _dt.int32)
    return f


# ---------------------------------------------------------------- convolution
def _add_bias(backend, res, b):
    from ...ops.registry import OPS
    from .render import launch
    bv = backend.as_strided(b, res.shape, (0, b.estrides[0]) + (0,) * (res.ndim - 2), 0)
    launch(backend, OPS["add"], res, [res, bv])


def _matmul_into(backend, dst, a, b):
    from .special import _matmul
    _matmul(backend, [dst], [a, b], {})


def _conv2d(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x, w = _c0(backend, ins[0]), _c0(backend, ins[1])
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
        bb = _c0(backend, b) if b is not None else None
        _launch(backend, ck.depthwise_source(D, dt.name), total // OW,
                (x, w, bb if bb is not None else w, res, _i64(total // OW), _i64(C), _i64(O), _i64(H), _i64(W),
                 _i32(KH), _i32(KW), _i32(sh), _i32(sw), _i32(pt), _i32(pl), _i32(dh), _i32(dw), _i64(OH),
                 _i64(OW), _i32(bb is not None)) + _runs(total, OW))
        _done(backend, out, res)
        return
    else:
        wg = _view(backend, w, (G, Og, K), 0, _cstrides((G, Og, K)))
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
                xs = _c0(backend, _view(backend, x, (n, C, H, W), n0 * C * H * W))
                _launch(backend, ck.im2col_source(D, x.itemsize), total // OW,
                        (xs, col, _i64(total // OW), _i64(H), _i64(W), _i32(KH), _i32(KW), _i32(sh), _i32(sw),
                         _i32(pt), _i32(pl), _i32(dh), _i32(dw), _i64(OH), _i64(OW)) + _runs(total, OW))
                cols = _view(backend, col, (n, G, K, L), 0, _cstrides((n, G, K, L)))
            dst = _view(backend, res, (n, G, Og, L), n0 * O * L, _cstrides((n, G, Og, L)))
            _matmul_into(backend, dst, wg, cols)
    if b is not None:
        _add_bias(backend, res, b)
    _done(backend, out, res)


def _conv_transpose2d(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x, w = _c0(backend, ins[0]), _c0(backend, ins[1])
    b = _c0(backend, ins[2]) if len(ins) > 2 else None
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
    wt = _view(backend, w, (G, M, Cig), 0, (Cig * M, 1, M))       # (G, M, Cig): W^T per group
    per = G * M * L * x.itemsize
    nb = max(1, min(N, COL_BUDGET // max(per, 1)))
    col = backend.empty((nb, G, M, L), dt)
    for n0 in range(0, N, nb):
        n = min(nb, N - n0)
        xg = _view(backend, x, (n, G, Cig, L), n0 * Cin * L, _cstrides((n, G, Cig, L)))
        cv = _view(backend, col, (n, G, M, L), 0, _cstrides((n, G, M, L)))
        _matmul_into(backend, cv, wt, xg)
        total = n * Cout * OH * OW
        dst = _view(backend, res, (n, Cout, OH, OW), n0 * Cout * OH * OW)
        tgt = dst if n0 == 0 else backend.empty(dst.shape, dt)
        _launch(backend, ck.col2im_source(D, dt.name), total,
                (col, b if b is not None else x, tgt, _i64(total), _i64(H), _i64(W), _i32(KH), _i32(KW),
                 _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw), _i64(OH), _i64(OW), _i64(Cout),
                 _i32(b is not None)))
        if tgt is not dst:
            backend.copy_(dst, tgt)
    _done(backend, out, res)


def _im2col(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _c0(backend, ins[0])
    H, W = x.shape[2], x.shape[3]
    KH, KW = attrs["kernel_size"]
    dh, dw = attrs["dilation"]
    ph, pw = attrs["padding"]
    sh, sw = attrs["stride"]
    OH, OW = attrs["blocks"]
    res = _work(backend, out)
    total = res.size
    _launch(backend, ck.im2col_source(D, x.itemsize), total // OW,
            (x, res, _i64(total // OW), _i64(H), _i64(W), _i32(KH), _i32(KW), _i32(sh), _i32(sw), _i32(ph), _i32(pw),
             _i32(dh), _i32(dw), _i64(OH), _i64(OW)) + _runs(total, OW))
    _done(backend, out, res)


def _col2im(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _c0(backend, ins[0])
    KH, KW = attrs["kernel_size"]
    dh, dw = attrs["dilation"]
    ph, pw = attrs["padding"]
    sh, sw = attrs["stride"]
    BH, BW = attrs["blocks"]
    OH, OW = out.shape[2], out.shape[3]
    res = _work(backend, out)
    total = res.size
    _launch(backend, ck.col2im_source(D, _dn(x)), total,
            (x, x, res, _i64(total), _i64(BH), _i64(BW), _i32(KH), _i32(KW), _i32(sh), _i32(sw), _i32(ph),
             _i32(pw), _i32(dh), _i32(dw), _i64(OH), _i64(OW), _i64(1), _i32(0)))
    _done(backend, out, res)


# ---------------------------------------------------------------- pooling and resampling
def _max_pool(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _c0(backend, ins[0])
    H, W = x.shape[2], x.shape[3]
    OH, OW = out.shape[2], out.shape[3]
    KH, KW = attrs["kernel_size"]
    sh, sw = attrs["stride"]
    ph, pw = attrs["padding"]
    dh, dw = attrs["dilation"]
    res = _work(backend, out)
    ires = _work(backend, outs[1]) if len(outs) > 1 else None
    total = out.size
    _launch(backend, ck.maxpool_source(D, _dn(x)), total // OW,
            (x, res, ires if ires is not None else res, _i64(total // OW), _i64(H), _i64(W), _i64(OH), _i64(OW),
             _i32(KH), _i32(KW), _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw),
             _i32(ires is not None)) + _runs(total, OW))
    _done(backend, out, res)
    if ires is not None:
        _done(backend, outs[1], ires)


def _avg_pool(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _c0(backend, ins[0])
    H, W = x.shape[2], x.shape[3]
    OH, OW = out.shape[2], out.shape[3]
    KH, KW = attrs["kernel_size"]
    sh, sw = attrs["stride"]
    ph, pw = attrs["padding"]
    res = _work(backend, out)
    total = out.size
    _launch(backend, ck.avgpool_source(D, _dn(x)), total // OW,
            (x, res, _i64(total // OW), _i64(H), _i64(W), _i64(OH), _i64(OW), _i32(KH), _i32(KW), _i32(sh),
             _i32(sw), _i32(ph), _i32(pw), _i32(bool(attrs["count_include_pad"])),
             _i64(int(attrs.get("divisor_override") or 0))) + _runs(total, OW))
    _done(backend, out, res)


def _adaptive(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x = _c0(backend, ins[0])
    H, W = x.shape[2], x.shape[3]
    OH, OW = out.shape[2], out.shape[3]
    is_max = attrs["mode"] == "max"
    res = _work(backend, out)
    ires = _work(backend, outs[1]) if len(outs) > 1 else None
    total = out.size
    _launch(backend, ck.adaptive_source(D, _dn(x), is_max), total,
            (x, res, ires if ires is not None else res, _i64(total), _i64(H), _i64(W), _i64(OH), _i64(OW),
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
    x = _c0(backend, ins[0])
    N, C, H, W = x.shape
    OH, OW = out.shape[2], out.shape[3]
    sh, sw = attrs["scales"]
    hi = backend.from_host(nearest_index(H, OH, sh, attrs["exact"]).astype(np.int64))
    wi = backend.from_host(nearest_index(W, OW, sw, attrs["exact"]).astype(np.int64))
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
    x = _c0(backend, ins[0])
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
    _launch(backend, ck.bilinear_source(D, _dn(x)), total,
            (x, res, ii, ll, _i64(total), _i64(H), _i64(W), _i64(OH), _i64(OW)))
    _done(backend, out, res)


# ---------------------------------------------------------------- data movement: copies between views
def _cat(backend, outs, ins, attrs):
    """Each input copied (and cast, like torch.cat) into its slot of the output: a view of it."""
    out = outs[0]
    if out.size == 0:
        return
    d = attrs["dim"]
    pos = 0
    for a in ins:
        if a.size == 0:            # includes torch's legacy empty 1-D operands
            continue
        k = a.shape[d]
        shape = list(out.shape)
        shape[d] = k
        backend.copy_(backend.as_strided(out, shape, out.estrides, pos * out.estrides[d]), a)
        pos += k


def _flip(backend, outs, ins, attrs):
    """``out`` = a negatively strided view of the input (no kernel of its own)."""
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    st, off = list(x.estrides), 0
    for d in attrs["dims"]:
        d %= x.ndim
        if x.shape[d] > 1:
            off += (x.shape[d] - 1) * st[d]
            st[d] = -st[d]
    backend.copy_(out, backend.as_strided(x, x.shape, st, off))


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


def _roll(backend, outs, ins, attrs):
    import itertools
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    sh = {}
    for d, s in zip(attrs["dims"], attrs["shifts"]):
        sh[d] = (sh.get(d, 0) + s) % x.shape[d]
    segs = []
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


def _repeat(backend, outs, ins, attrs):
    """``out`` viewed as (r0, s0, r1, s1, ...) = the input broadcast over the r dims: one copy."""
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    reps = attrs["repeats"]
    xs = (1,) * (len(reps) - x.ndim) + tuple(x.shape)
    xst = (0,) * (len(reps) - x.ndim) + tuple(x.estrides)
    res = out if out.is_contiguous else backend.empty(out.shape, _dt.from_numpy_dtype(out.dtype))
    inter, ost, sst = [], [], []
    for r, n, s, os_ in zip(reps, xs, xst, _cstrides(out.shape)):
        inter += [r, n]
        ost += [os_ * n, os_]
        sst += [0, s]
    backend.copy_(_view(backend, res, inter, 0, ost), _view(backend, x, inter, 0, sst))
    _done(backend, out, res)


def _tri(lower):
    def run(backend, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        x = _c0(backend, x)
        res = _work(backend, out)
        R, C = x.shape[-2], x.shape[-1]
        total = x.size
        _launch(backend, ck.tri_source(D, x.itemsize), total,
                (x, res, _i64(total), _i64(R), _i64(C), _i64(int(attrs["diagonal"])), _i32(lower)))
        _done(backend, out, res)
    run.__name__ = "cl_tril" if lower else "cl_triu"
    return run


# ---------------------------------------------------------------- indexing
def _take3(backend, x, idx, res, n, k, inner, per_elem, wrap=0, read=False):
    """x (outer, n, inner), idx, res (outer, k, inner): contiguous at offset 0.  ``read``: the error
    flag is zeroed first and returned (else a shared scratch flag nobody reads is passed)."""
    flag = _flag(backend) if read else _scratch(backend)
    total = res.size
    _launch(backend, ck.take_source(D, x.itemsize, _dn(idx)), total,
            (x, idx, res, flag, _i64(total), _i64(n), _i64(k), _i64(inner), _i32(per_elem), _i32(wrap)))
    return flag


def _index_select(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x, idx = _c0(backend, ins[0]), _c0(backend, ins[1])
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
    x, idx = _c0(backend, x), _c0(backend, idx)
    res = _work(backend, out)
    _take3(backend, x, idx, res, x.shape[d], idx.shape[d], _prod(x.shape[d + 1:]), 1)   # checked by op.check
    _done(backend, out, res)


def _check_embedding(backend, idx, V):
    ii = backend.to_host(idx).reshape(-1).astype(np.int64)
    bad = np.flatnonzero((ii < 0) | (ii >= V))
    if bad.size:
        v = int(ii[bad[0]])
        raise IndexError(f"index out of range in self: embedding index {v} is out of range for a weight table "
                         f"with {V} rows (valid indices are 0..{V - 1})")


def _embedding(backend, outs, ins, attrs):
    wt, idx = ins
    out = outs[0]
    V, Dm = wt.shape
    if idx.size == 0:
        return
    if out.size == 0:                                # nothing to copy, but the indices must still be valid
        _check_embedding(backend, idx, V)
        return
    wt, idx = _c0(backend, wt), _c0(backend, idx)
    res = _work(backend, out)
    flag = _take3(backend, wt, idx, res, V, idx.size, Dm, 0, read=True)
    if int(backend.to_host(flag)[0]):
        _check_embedding(backend, idx, V)
    _done(backend, out, res)


def _take(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x, idx = _c0(backend, ins[0]), _c0(backend, ins[1])
    res = _work(backend, out)
    _take3(backend, x, idx, res, x.size, idx.size, 1, 1, wrap=1)     # indices checked by op.check
    _done(backend, out, res)


def _repeat_interleave(backend, outs, ins, attrs):
    x, r = ins
    out = outs[0]
    if out.size == 0:
        return
    d = attrs["dim"]
    src = np.repeat(np.arange(x.shape[d], dtype=np.int64), backend.to_host(r).astype(np.int64))
    xs = _c0(backend, x)
    res = _work(backend, out)
    _take3(backend, xs, backend.from_host(src), res, x.shape[d], src.size, _prod(x.shape[d + 1:]), 0)
    _done(backend, out, res)


def _index(backend, outs, ins, attrs):
    """Advanced indexing ``x[key]``: the index tensors are read back and turned into ONE flat int64
    offset per result entry on the host (index tensors wrapped mod the dim size: the frontend
    range-checked them; masks through ``np.nonzero``), then one gather (``take3``) on the device over
    x viewed as (before, covered, after) -- or, for covered dims that are not adjacent, over a copy
    of x with them moved to the front (numpy's rule: the index dims lead the result)."""
    x, idx = ins[0], ins[1:]
    out = outs[0]
    if out.size == 0:
        return
    dims, ncons = attrs["dims"], attrs["ncons"]
    parts = []
    for d, c, t in zip(dims, ncons, idx):
        h = backend.to_host(t)
        if h.dtype == np.bool_:
            coords = np.nonzero(h)
            parts += [(d + q, coords[q]) for q in range(c)]
        else:
            parts.append((d, np.remainder(h.astype(np.int64), x.shape[d])))
    covered = sorted(p[0] for p in parts)
    adjacent = covered == list(range(covered[0], covered[0] + len(covered)))
    if adjacent:
        xs = _c0(backend, x)
        first, last = covered[0], covered[-1]
    else:
        perm = covered + [q for q in range(x.ndim) if q not in covered]
        xv = backend.as_strided(x, tuple(x.shape[q] for q in perm), tuple(x.estrides[q] for q in perm), 0)
        xs = _c0(backend, xv)
        first, last = 0, len(covered) - 1
        parts = [(covered.index(d), a) for d, a in parts]
    sizes = xs.shape[first:last + 1]
    cst = _cstrides(sizes)
    f = None
    for d, a in parts:
        term = a * int(cst[d - first])
        f = term if f is None else f + term
    fi = backend.from_host(np.ascontiguousarray(np.asarray(f, dtype=np.int64)))
    res = _work(backend, out)
    _take3(backend, xs, fi, res, _prod(sizes), fi.size, _prod(xs.shape[last + 1:]), 0)
    _done(backend, out, res)


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
    res = _c0(backend, region)
    idx, src = _c0(backend, idx), _c0(backend, src)
    total = res.size
    _launch(backend, ck.scatter_source(D, _dn(res), _dn(idx)), total,
            (res, idx, src, _i64(total), _i64(res.shape[d]), _i64(idx.shape[d]), _i64(_prod(res.shape[d + 1:])),
             _i32(ck.SCATTER_KINDS[attrs["reduce"]]), _i32(bool(attrs.get("include_self", True)))))
    if res is not region:
        backend.copy_(region, res)


def _index_reduce_dim(backend, outs, ins, attrs):
    """index_add / index_copy / index_fill: the scatter kernel with the 1-D index spread over the
    (outer, k, inner) source (add: sum with self, ``alpha`` applied first in the output dtype)."""
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
    i3 = _c0(backend, backend.as_strided(idx, (O, k, Ii), (0, idx.estrides[0], 0), 0))
    if src.ndim == 0:
        s3 = backend.as_strided(src, (O, k, Ii), (0, 0, 0), 0)
    else:
        s3 = _view(backend, _c0(backend, src), (O, k, Ii), 0, _cstrides((O, k, Ii)))
    if attrs["mode"] == "add" and attrs.get("alpha", 1) != 1:
        scaled = backend.empty((O, k, Ii), dt)
        launch(backend, OPS["mul"], scaled, [s3, backend.from_host(np.array(attrs["alpha"]).astype(out.dtype))])
        s3 = scaled
    s3 = _c0(backend, s3)
    backend.copy_(out, x)
    res = _c0(backend, out)
    total = res.size
    _launch(backend, ck.scatter_source(D, dt.name, _dn(i3)), total,
            (res, i3, s3, _i64(total), _i64(n), _i64(k), _i64(Ii),
             _i32(1 if attrs["mode"] == "add" else 0), _i32(1)))
    _done(backend, out, res)


def _searchsorted(backend, outs, ins, attrs):
    seq, vals = _c0(backend, ins[0]), _c0(backend, ins[1])
    out = outs[0]
    if out.size == 0:
        return
    n = seq.shape[-1]
    m = vals.shape[-1] if vals.ndim else 1
    res = _work(backend, out)
    total = res.size
    _launch(backend, ck.searchsorted_source(D, _dn(seq), _dn(out)), total,
            (seq, vals, res, _i64(total), _i64(n), _i64(m), _i32(seq.ndim > 1), _i32(bool(attrs["right"]))))
    _done(backend, out, res)


# ---------------------------------------------------------------- arg reductions, scans, norms
def _argred(backend, kind, x, d, vals, inds):
    xc = _c0(backend, x)
    if d is None or xc.ndim == 0:
        O, n, I = 1, xc.size, 1
    else:
        O, n, I = _prod(xc.shape[:d]), xc.shape[d], _prod(xc.shape[d + 1:])
    rows = I == 1 and n >= 64
    ires = _work(backend, inds)
    vres = _work(backend, vals) if vals is not None else None
    args = (xc, vres if vres is not None else xc, ires, _i64(O), _i64(n), _i64(I), _i32(vres is not None))
    ks = ck.argred_source(D, _dn(xc), kind, rows)
    if rows:
        _launch_rows(backend, ks, O, n, args)
    else:
        _launch(backend, ks, O * I, args)
    _done(backend, inds, ires)
    if vres is not None:
        _done(backend, vals, vres)


def _arg(kind):
    def run(backend, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        _argred(backend, kind, x, attrs["dim"] if x.ndim else None, None, out)
    run.__name__ = f"cl_{kind}"
    return run


def _max_dim(kind):
    def run(backend, outs, ins, attrs):
        x, vals, inds = ins[0], outs[0], outs[1]
        if vals.size == 0:
            return
        _argred(backend, kind, x, attrs["dim"] if x.ndim else None, vals, inds)
    run.__name__ = f"cl_{kind}_dim"
    return run



def _ond(x, d):
    """(O, n, I) of contiguous ``x`` around dim ``d`` (a 0-d tensor: one element)."""
    if x.ndim == 0:
        return 1, 1, 1
    d %= x.ndim
    return _prod(x.shape[:d]), x.shape[d], _prod(x.shape[d + 1:])


def _scanarg(kind):
    def run(backend, outs, ins, attrs):
        x, vals, inds = ins[0], outs[0], outs[1]
        if vals.size == 0:
            return
        xc = _c0(backend, x)
        O, n, I = _ond(xc, attrs["dim"])
        vres, ires = _work(backend, vals), _work(backend, inds)
        _launch(backend, ck.scanarg_source(D, _dn(xc), kind), O * I,
                (xc, vres, ires, _i64(O), _i64(n), _i64(I)))
        _done(backend, vals, vres)
        _done(backend, inds, ires)
    run.__name__ = f"cl_{kind}"
    return run


def _sorted(backend, x, d, desc):
    """(values, int64 indices) of ``x`` stably sorted along ``d`` (the CPU's order), contiguous."""
    xc = _c0(backend, x)
    O, n, I = _ond(xc, d)
    vals = backend.empty(xc.shape, _dt.from_numpy_dtype(xc.dtype))
    idx = backend.empty(xc.shape, _dt.int64)
    tmp = backend.empty(xc.shape, _dt.int64)
    _launch(backend, ck.sort_source(D, _dn(xc)), O * I,
            (xc, vals, idx, tmp, _i64(O), _i64(n), _i64(I), _i32(bool(desc))))
    return vals, idx


def _sort(backend, outs, ins, attrs):
    x = ins[0]
    if x.size == 0:
        return
    v, i = _sorted(backend, x, attrs["dim"], attrs["descending"])
    backend.copy_(outs[0], v)
    backend.copy_(outs[1], i)


def _topk(backend, outs, ins, attrs):
    """The first ``k`` of the stable sort (descending for ``largest``)."""
    x, vals, inds = ins[0], outs[0], outs[1]
    if vals.size == 0:
        return
    d = attrs["dim"] % max(x.ndim, 1)
    v, i = _sorted(backend, x, d, attrs["largest"])
    shape = tuple(vals.shape)
    backend.copy_(vals, backend.as_strided(v, shape, v.estrides, 0))
    backend.copy_(inds, backend.as_strided(i, shape, i.estrides, 0))



def _median(backend, outs, ins, attrs):
    """The stable sort of the dim (``_sorted``), then the lower median, or the first NaN (one kernel)."""
    x, vals, inds = ins[0], outs[0], outs[1]
    if vals.size == 0:
        return
    d = attrs["dim"]
    xc = _c0(backend, x)
    if d is None or xc.ndim == 0:
        xc = backend.as_strided(xc, (xc.size,), (1,), 0)
        d = 0
    O, n, I = _ond(xc, d)
    _v, order = _sorted(backend, xc, d, False)
    vres, ires = _work(backend, vals), _work(backend, inds)
    _launch(backend, ck.median_pick_source(D, _dn(xc)), O * I, (xc, order, vres, ires, _i64(O), _i64(n), _i64(I)))
    _done(backend, vals, vres)
    _done(backend, inds, ires)


def _batch_norm_stats(backend, outs, ins, attrs):
    x = ins[0]
    mean, var = outs
    if mean.size == 0:
        return
    N, C = x.shape[0], x.shape[1]
    B = x.size // (N * C) if N * C else 0
    xc = _c0(backend, x)
    mres, vres = _work(backend, mean), _work(backend, var)
    _launch_rows(backend, ck.channel_moments_source(D, _dn(xc)), C, N * B,
                 (xc, mres, vres, _i64(N), _i64(C), _i64(B)))
    _done(backend, mean, mres)
    _done(backend, var, vres)



def _nll_loss_terms(backend, outs, ins, attrs):
    """Per-(n, k) terms in parallel, the totals by one thread in order (the CPU's float64 sums exactly);
    out-of-range targets flagged by the kernel and reported with the CPU kernel's error."""
    lp = ins[0]
    nll, sm, tot = outs
    N, C = lp.shape[0], lp.shape[1]
    K = lp.size // (N * C) if N * C else (_prod(lp.shape[2:]) if lp.ndim > 2 else 1)
    if N * C * K == 0:
        for o in outs:
            backend.fill_(o, 0)
        return
    lpc = _c0(backend, lp)                      # contiguous: (N, C, K) in memory order
    tgt = _same_dtype(backend, ins[1], np.dtype(np.int64))
    w = backend.empty((C,), _dt.float64)
    if attrs["has_weight"]:
        backend.copy_(w, ins[2])
    else:
        backend.fill_(w, 1.0)
    m = N * K
    nres, sres = _work(backend, nll), _work(backend, sm)
    part = backend.empty((3 * m,), _dt.float64)
    flag = _flag(backend)
    _launch(backend, ck.nll_terms_source(D, _dn(lpc)), m,
            (lpc, tgt, w, nres, sres, part, flag, _i64(N), _i64(C), _i64(K), _i64(attrs["ignore_index"]),
             _i32(bool(attrs["smooth"]))))
    if int(backend.to_host(flag)[0]):
        t = backend.to_host(tgt).reshape(-1)
        bad = t[(t != attrs["ignore_index"]) & ((t < 0) | (t >= C))]
        raise IndexError(f"nll_loss: target {int(bad[0])} is out of bounds (expected a class index in [0, {C}) or "
                         f"ignore_index={attrs['ignore_index']})")
    tres = _work(backend, tot)
    _launch(backend, ck.nll_totals_source(D), 1, (part, tres, _i64(m)))
    _done(backend, nll, nres)
    _done(backend, sm, sres)
    _done(backend, tot, tres)



def _embedding_renorm(backend, outs, ins, attrs):
    """In place: the unique indices (read back: small) range-checked like the CPU kernel, then one
    thread per row computes its float64 norm and scales it when above ``max_norm``."""
    w = outs[0]
    ii = np.unique(backend.to_host(ins[1]).astype(np.int64).reshape(-1))
    V = w.shape[0]
    if ii.size and (ii[0] < 0 or ii[-1] >= V):
        v = int(ii[0] if ii[0] < 0 else ii[-1])
        raise IndexError(f"index out of range in self: embedding index {v} is out of range for a weight table "
                         f"with {V} rows (valid indices are 0..{V - 1})")
    if ii.size == 0 or w.size == 0:
        return
    p = float(attrs["norm_type"])
    kind = 0 if p == 2.0 else 1 if p == float("inf") else 2 if p == float("-inf") else 3 if p == 0 else 4
    res = _c0(backend, w)
    _launch(backend, ck.renorm_rows_source(D, _dn(res)), ii.size,
            (res, backend.from_host(ii), _i64(ii.size), _i64(w.shape[1]), np.float64(attrs["max_norm"]),
             np.float64(p), _i32(kind)))
    _done(backend, w, res)



def _unique_sorted(backend, outs, ins, attrs):
    """From the sorted values (this backend's sort) and their permutation: group-start flags (the
    generated ``ne`` of neighbours), their running count (the scan kernel), the starts and the unique
    values by stream compaction, then inverse indices and counts (one kernel)."""
    from ...ops.registry import OPS
    from .render import launch
    s, perm = ins
    vals, inv, cnt = outs
    n = s.shape[0]
    if n == 0:
        return
    sc = _c0(backend, s)
    flags = backend.empty((n,), _dt.bool_)
    backend.fill_(backend.as_strided(flags, (1,), (1,), 0), 1)
    if n > 1:
        launch(backend, OPS["ne"], backend.as_strided(flags, (n - 1,), (1,), 1),
               [backend.as_strided(sc, (n - 1,), (1,), 1), backend.as_strided(sc, (n - 1,), (1,), 0)])
    u = vals.shape[0]
    cum = backend.empty((n,), _dt.int64)
    _launch(backend, ck.scan_source(D, "bool", "int64", "cumsum"), n, (flags, cum, _i64(1), _i64(n), _i64(1)))
    cnt0, nch = _chunk_offsets(backend, flags)
    starts = backend.empty((u, 1), _dt.int64)
    _launch(backend, ck.nonzero_source(D, "bool"), nch,
            (flags, starts, cnt0, backend.from_host(np.array([n], np.int64)), _i64(n), _i64(CHUNK), _i32(1)))
    vres = _work(backend, vals)
    _launch(backend, ck.masked_source(D, sc.itemsize, False), nch, (flags, sc, vres, cnt0, _i64(n), _i64(CHUNK)))
    _done(backend, vals, vres)
    ires, cres = _work(backend, inv), _work(backend, cnt)
    _launch(backend, ck.unique_finish_source(D), n,
            (_same_dtype(backend, perm, np.dtype(np.int64)), cum, starts, ires, cres, _i64(n), _i64(u)))
    _done(backend, inv, ires)
    _done(backend, cnt, cres)



def _unique_dim(backend, outs, ins, attrs):
    """unique slices along ``dim``: x as contiguous rows (n, m) with the dim first; one thread sorts
    the rows (stable lexicographic merge sort) and flags group starts; then the unique_sorted steps
    (scan, compaction, inverse and counts) and one gather of each group's first row."""
    x = ins[0]
    vals, inv, cnt = outs
    d = attrs["dim"]
    n = x.shape[d]
    if n == 0:
        return
    perm = [d] + [q for q in range(x.ndim) if q != d]
    xm = _c0(backend, backend.as_strided(x, tuple(x.shape[q] for q in perm), tuple(x.estrides[q] for q in perm), 0))
    m = xm.size // n
    u = vals.shape[d]
    order, tmp = backend.empty((n,), _dt.int64), backend.empty((n,), _dt.int64)
    flags = backend.empty((n,), _dt.bool_)
    _launch(backend, ck.unique_rows_source(D, _dn(xm)), 1, (xm, order, tmp, flags, _i64(n), _i64(m)))
    cum = backend.empty((n,), _dt.int64)
    _launch(backend, ck.scan_source(D, "bool", "int64", "cumsum"), n, (flags, cum, _i64(1), _i64(n), _i64(1)))
    cnt0, nch = _chunk_offsets(backend, flags)
    starts = backend.empty((u, 1), _dt.int64)
    _launch(backend, ck.nonzero_source(D, "bool"), nch,
            (flags, starts, cnt0, backend.from_host(np.array([n], np.int64)), _i64(n), _i64(CHUNK), _i32(1)))
    ires, cres = _work(backend, inv), _work(backend, cnt)
    _launch(backend, ck.unique_finish_source(D), n, (order, cum, starts, ires, cres, _i64(n), _i64(u)))
    _done(backend, inv, ires)
    _done(backend, cnt, cres)
    first = backend.empty((u,), _dt.int64)
    _launch(backend, ck.take_first_source(D), u, (order, starts, first, _i64(u)))
    rows = backend.empty((u,) + tuple(xm.shape[1:]), _dt.from_numpy_dtype(xm.dtype))
    _take3(backend, xm, first, rows, n, u, m, 0)
    # rows is (u, other dims in order): write it through a permuted view of vals
    vv = backend.as_strided(vals, tuple(vals.shape[q] for q in perm), tuple(vals.estrides[q] for q in perm), 0)
    backend.copy_(vv, rows)


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


def _scan(kind):
    def run(backend, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        xc = _c0(backend, x)
        if xc.ndim == 0:
            O, n, I = 1, 1, 1
        else:
            d = attrs["dim"] % xc.ndim
            O, n, I = _prod(xc.shape[:d]), xc.shape[d], _prod(xc.shape[d + 1:])
        res = _work(backend, out)
        _launch(backend, ck.scan_source(D, _dn(xc), _dn(out), kind), O * I,
                (xc, res, _i64(O), _i64(n), _i64(I)))
        _done(backend, out, res)
    run.__name__ = f"cl_{kind}"
    return run


def norm_source(op, dn):
    name = f"neecl_row_{op}_{dn}"
    return name, D.prelude + D.block_helpers + ck.norm_rows_source(D, op, dn, name)


def _same_dtype(backend, a, npdt):
    if a.dtype == npdt:
        return _c0(backend, a)
    c = backend.empty(a.shape, _dt.from_numpy_dtype(npdt))
    backend.copy_(c, a)
    return c


def _norm(rms):
    op = "rms_norm" if rms else "layer_norm"

    def run(backend, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        n, eps = attrs["n"], attrs["eps"]
        w = ins[1] if attrs["has_weight"] else None
        b = ins[1 + (w is not None)] if (not rms and attrs["has_bias"]) else None
        xc = _c0(backend, x)
        w = _same_dtype(backend, w, x.dtype) if w is not None else None
        b = _same_dtype(backend, b, x.dtype) if b is not None else None
        res = _work(backend, out) if out.dtype == x.dtype else backend.empty(out.shape, _dt.from_numpy_dtype(x.dtype))
        rows = xc.size // n if n else 0
        _launch_rows(backend, norm_source(op, _dn(xc)), rows, n,
                     (xc, w if w is not None else xc, b if b is not None else xc, res, _i64(rows), _i64(n),
                      np.float64(eps), _i32(w is not None), _i32(b is not None)))
        _done(backend, out, res)
    run.__name__ = f"cl_{op}"
    return run


def _group_norm(backend, outs, ins, attrs):
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    N, C = x.shape[0], x.shape[1]
    G = attrs["groups"]
    HW = x.size // (N * C)
    it = iter(ins[1:])
    w = _same_dtype(backend, next(it), x.dtype) if attrs["has_weight"] else None
    b = _same_dtype(backend, next(it), x.dtype) if attrs["has_bias"] else None
    x = _c0(backend, x)
    res = _work(backend, out)
    rows, n = N * G, (C // G) * HW
    _launch_rows(backend, ck.group_norm_source(D, _dn(x)), rows, n,
                 (x, w if w is not None else x, b if b is not None else x, res, _i64(rows), _i64(G),
                  _i64(C // G), _i64(HW), np.float64(attrs["eps"]), _i32(w is not None), _i32(b is not None)))
    _done(backend, out, res)



# ---------------------------------------------------------------- stream compaction, index_put
CHUNK = 4096                     # elements per chunk of the compaction kernels


def _chunk_offsets(backend, m):
    """Per chunk of CHUNK elements of contiguous ``m``: where its entries start (exclusive scan of the
    per-chunk nonzero counts), and the number of chunks."""
    n = m.size
    nch = -(-n // CHUNK)
    cnt = backend.empty((nch,), _dt.int64)
    _launch(backend, ck.count_chunks_source(D, _dn(m)), nch, (m, cnt, _i64(n), _i64(CHUNK)))
    _launch(backend, ck.scan_chunks_source(D), 1, (cnt, _i64(nch)))
    return cnt, nch


def _nonzero(backend, outs, ins, attrs):
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    xc = _c0(backend, x)
    cnt, nch = _chunk_offsets(backend, xc)
    shape = backend.from_host(np.array(xc.shape, np.int64))
    res = _work(backend, out)
    _launch(backend, ck.nonzero_source(D, _dn(xc)), nch,
            (xc, res, cnt, shape, _i64(xc.size), _i64(CHUNK), _i32(xc.ndim)))
    _done(backend, out, res)


def _masked_select(backend, outs, ins, attrs):
    x, m = ins
    out = outs[0]
    if out.size == 0:
        return
    xc, mc = _c0(backend, x), _c0(backend, m)
    cnt, nch = _chunk_offsets(backend, mc)
    res = _work(backend, out)
    _launch(backend, ck.masked_source(D, xc.itemsize, False), nch, (mc, xc, res, cnt, _i64(mc.size), _i64(CHUNK)))
    _done(backend, out, res)


def _masked_scatter(backend, outs, ins, attrs):
    x, m, src = ins
    out = outs[0]
    if out.size == 0:
        return
    backend.copy_(out, x)
    if not attrs["count"]:
        return
    mc, sc = _c0(backend, m), _c0(backend, src)
    res = _c0(backend, out)
    cnt, nch = _chunk_offsets(backend, mc)
    _launch(backend, ck.masked_source(D, sc.itemsize, True), nch, (mc, sc, res, cnt, _i64(mc.size), _i64(CHUNK)))
    _done(backend, out, res)


def _index_put(backend, outs, ins, attrs):
    """``target[key] = value`` (``+=`` with accumulate) in place: the element offsets of ``target[key]``
    are worked out on the host from the (read back) index tensors (numpy's advanced-indexing rules,
    O(target size) host memory), then ONE device thread writes them in order (the CPU's semantics for
    duplicate positions: the last wins, accumulation adds all) straight into the target's storage."""
    from ..cpu.kernels.indexing import _key
    o = outs[0]
    val, idx = ins[1], ins[2:]
    if o.size == 0:
        return
    o.check_writeable("index_put_")
    key = _key(o.ndim, attrs["dims"], attrs["ncons"], [backend.to_host(t) for t in idx])
    offs = np.full(o.shape, o.offset, np.int64)
    for d, (n, st) in enumerate(zip(o.shape, o.estrides)):
        sh = [1] * o.ndim
        sh[d] = n
        offs += np.arange(n, dtype=np.int64).reshape(sh) * st
    pos = np.ascontiguousarray(offs[key])
    if pos.size == 0:
        return
    vst = [0] * pos.ndim
    for k in range(1, val.ndim + 1):
        if val.shape[-k] != 1:
            vst[-k] = val.estrides[-k]
    v = _c0(backend, backend.as_strided(val, pos.shape, vst, 0))
    whole = CLArray(o.storage, (1,), (1,), 0, o.dtype, o.writeable)     # positions are storage offsets
    _launch(backend, ck.index_put_source(D, _dn(o), bool(attrs["accumulate"])), 1,
            (whole, backend.from_host(pos.reshape(-1)), v, _i64(pos.size)))



# ---------------------------------------------------------------- einsum: views, sums and matmuls
def _perm(backend, labels, a, order):
    """``a`` (one dim per label) viewed with its dims in ``order``."""
    return backend.as_strided(a, tuple(a.shape[labels.index(c)] for c in order),
                              tuple(a.estrides[labels.index(c)] for c in order), 0)


def _unique_labels(backend, sub, a):
    """A repeated label (``ii``) is the diagonal: one dim whose stride is the sum of the repeats'."""
    labels, shape, strides = "", [], []
    for c, n, st in zip(sub, a.shape, a.estrides):
        if c in labels:
            strides[labels.index(c)] += st
        else:
            labels += c
            shape.append(n)
            strides.append(st)
    return labels, backend.as_strided(a, tuple(shape), tuple(strides), 0)


def _sum_out(backend, labels, a, keep):
    """Sum over the labels not in ``keep`` (this backend's reduction kernel, accumulating in float64 /
    int64, stored in ``a``'s dtype)."""
    from .special import _reduce
    dims = [d for d, c in enumerate(labels) if c not in keep]
    if not dims:
        return labels, a
    kept = "".join(c for c in labels if c in keep)
    r = backend.empty(tuple(a.shape[labels.index(c)] for c in kept), _dt.from_numpy_dtype(a.dtype))
    _reduce("sum")(backend, [r], [a], {"dims": tuple(dims), "keepdim": False})
    return kept, r


def _contract(backend, la, a, lb, b, rest):
    """Two operands into one: labels only one side needs summed first, then ONE batched matmul
    (batch labels, a's kept labels x contracted, contracted x b's kept labels)."""
    la, a = _sum_out(backend, la, a, set(lb) | set(rest))
    lb, b = _sum_out(backend, lb, b, set(la) | set(rest))
    batch = [c for c in la if c in lb and c in rest]
    con = [c for c in la if c in lb and c not in rest]
    ka = [c for c in la if c not in lb]
    kb = [c for c in lb if c not in la]
    size = {c: a.shape[la.index(c)] for c in la}
    size.update({c: b.shape[lb.index(c)] for c in lb})
    Bt, I, K, J = (_prod(size[c] for c in g) for g in (batch, ka, con, kb))
    am = _c0(backend, _perm(backend, la, a, batch + ka + con))
    bm = _c0(backend, _perm(backend, lb, b, batch + con + kb))
    r = backend.empty((Bt, I, J), _dt.from_numpy_dtype(a.dtype))
    _matmul_into(backend, r, backend.as_strided(am, (Bt, I, K), (I * K, K, 1), 0),
                 backend.as_strided(bm, (Bt, K, J), (K * J, J, 1), 0))
    labels = "".join(batch + ka + kb)
    shape = tuple(size[c] for c in labels)
    return labels, backend.as_strided(r, shape, _cstrides(shape), 0)


def _einsum(backend, outs, ins, attrs):
    """An explicit equation (``ab,bc->ac``; the frontend expanded ellipses and broadcast sizes): each
    operand's repeated labels become diagonal views, operands are contracted left to right (sums, then
    a batched matmul on this backend's kernel), the result permuted into ``out``."""
    out = outs[0]
    if out.size == 0:
        return
    lhs, rhs = attrs["equation"].split("->")
    terms = [_unique_labels(backend, sub, a) for sub, a in zip(lhs.split(","), ins)]
    while len(terms) > 1:
        (la, a), (lb, b) = terms[0], terms[1]
        rest = "".join(lab for lab, _ in terms[2:]) + rhs
        terms = [_contract(backend, la, a, lb, b, rest)] + terms[2:]
    labels, a = _sum_out(backend, *terms[0], set(rhs))
    backend.copy_(out, _perm(backend, labels, a, rhs))


# ---------------------------------------------------------------- claims and the table
def _fp64(backend, op):
    return None if backend.fp64 else f"opencl {op} computes in double (device lacks cl_khr_fp64)"


def _floats_same(op, need_fp64=False):
    def claims(backend, dtypes):
        d = dtypes[0]
        if d.name not in FLOATS:
            return f"no opencl {op} for {d.name} (floating dtypes only)"
        if any(x is not d for x in dtypes):
            return f"opencl {op} needs one dtype, got {', '.join(x.name for x in dtypes)}"
        return _fp64(backend, op) if need_fp64 else None
    return claims


def _floats(op, need_fp64=False):
    def claims(backend, dtypes):
        if dtypes[0].name not in FLOATS:
            return f"opencl {op} needs a floating input, got {dtypes[0].name}"
        return _fp64(backend, op) if need_fp64 else None
    return claims


def _index_claims(op):
    def claims(backend, dtypes):
        # (x, index, ...) on calls
        if len(dtypes) >= 3 and dtypes[1].name not in _IDX:
            return f"opencl {op} takes int32/int64 indices, not {dtypes[1].name}"
        return None
    return claims


def _adv_claims(backend, dtypes):
    bad = [d.name for d in dtypes[1:-1] if d.name not in ("bool", "int32", "int64")]
    return f"opencl index takes int32/int64/bool index tensors, not {bad[0]}" if bad else None


def _scan_claims(backend, dtypes):
    if (dtypes[0].category == 2 or dtypes[-1].category == 2) and not backend.fp64:
        return _fp64(backend, "cumsum/cumprod")
    return None


def _searchsorted_claims(backend, dtypes):
    if dtypes[0] is not dtypes[1]:
        return f"opencl searchsorted needs one dtype for sequence and values, got {dtypes[0].name}, {dtypes[1].name}"
    if dtypes[-1].name not in _IDX:
        return f"opencl searchsorted writes int32/int64, not {dtypes[-1].name}"
    return None


def _scatter_claims(backend, dtypes):
    r = _index_claims("scatter")(backend, dtypes)
    if r is None and dtypes[0].category == 2 and not backend.fp64:
        return _fp64(backend, "scatter")
    return r


def _adaptive_avg(backend, outs, ins, attrs):
    _adaptive(backend, outs, ins, attrs)


_conv2d.claims = _floats_same("conv2d")
_conv_transpose2d.claims = _floats_same("conv_transpose2d", True)
_col2im.claims = _floats("col2im", True)
_avg_pool.claims = _floats("avg_pool2d", True)
_adaptive_avg.claims = _floats("adaptive_avg_pool2d", True)
_upsample_bilinear.claims = _floats("upsample_bilinear2d")
_group_norm.claims = _floats("group_norm", True)
_index_select.claims = _index_claims("index_select")
_gather.claims = _index_claims("gather")
_embedding.claims = _index_claims("embedding")
_take.claims = _index_claims("take")
_repeat_interleave.claims = _index_claims("repeat_interleave")
_index_reduce_dim.claims = _scatter_claims
_scatter.claims = _scatter_claims
_index.claims = _adv_claims
_searchsorted.claims = _searchsorted_claims


def _mask_claims(op):
    def claims(backend, dtypes):
        if len(dtypes) >= 3 and dtypes[1].name != "bool":
            return f"opencl {op} takes a bool mask, not {dtypes[1].name}"
        return None
    return claims


def _index_put_claims(backend, dtypes):
    # (target, value, *indices, out)
    if len(dtypes) >= 3 and dtypes[1] is not dtypes[0]:
        return f"opencl index_put needs the value in the target's dtype, got {dtypes[1].name} for {dtypes[0].name}"
    bad = [d.name for d in dtypes[2:-1] if d.name not in ("bool", "int32", "int64")]
    return f"opencl index_put takes int32/int64/bool index tensors, not {bad[0]}" if bad else None


_masked_select.claims = _mask_claims("masked_select")
_masked_scatter.claims = _mask_claims("masked_scatter")
_index_put.claims = _index_put_claims
_batch_norm_stats.claims = _floats("batch_norm_stats", True)
_nll_loss_terms.claims = _floats("nll_loss_terms", True)


def _einsum_claims(backend, dtypes):
    if dtypes[0].name not in ("float32", "float64", "int32", "int64"):
        return f"opencl einsum runs on the matmul kernel: float32/float64/int32/int64, not {dtypes[0].name}"
    return None


_einsum.claims = _einsum_claims
_embedding_renorm.claims = _floats("embedding_renorm_", True)


def table() -> dict:
    t = {"conv2d": _conv2d, "conv_transpose2d": _conv_transpose2d, "im2col": _im2col, "col2im": _col2im,
         "max_pool2d": _max_pool, "max_pool2d_with_indices": _max_pool, "avg_pool2d": _avg_pool,
         "adaptive_avg_pool2d": _adaptive_avg, "adaptive_max_pool2d": _adaptive,
         "upsample_nearest2d": _upsample_nearest, "upsample_bilinear2d": _upsample_bilinear,
         "cat": _cat, "flip": _flip, "pad": _pad, "roll": _roll, "repeat": _repeat,
         "tril": _tri(1), "triu": _tri(0),
         "index_select": _index_select, "gather": _gather, "embedding": _embedding, "take": _take,
         "repeat_interleave": _repeat_interleave, "index": _index, "scatter": _scatter,
         "index_reduce_dim": _index_reduce_dim, "searchsorted": _searchsorted,
         "argmax": _arg("argmax"), "argmin": _arg("argmin"), "max_dim": _max_dim("argmax"),
         "min_dim": _max_dim("argmin"), "cumsum": _scan("cumsum"), "cumprod": _scan("cumprod"),
         "layer_norm": _norm(False), "rms_norm": _norm(True), "group_norm": _group_norm,
         "cummax": _scanarg("cummax"), "cummin": _scanarg("cummin"), "sort": _sort, "topk": _topk,
         "diag_embed": _diag_embed, "nonzero": _nonzero, "masked_select": _masked_select,
         "masked_scatter": _masked_scatter, "index_put": _index_put, "median": _median,
         "batch_norm_stats": _batch_norm_stats, "nll_loss_terms": _nll_loss_terms, "einsum": _einsum,
         "embedding_renorm_": _embedding_renorm, "unique_sorted": _unique_sorted,
         "unique_dim": _unique_dim}
    for k in ("cumsum", "cumprod"):
        t[k].claims = _scan_claims
    for k in ("layer_norm", "rms_norm"):
        t[k].claims = _floats(k, True)
    return t


def all_sources(dtypes=("bool", "uint8", "int8", "int16", "int32", "int64", "float32", "float64")) -> list:
    """Every kernel of this module for ``dtypes`` (``precompile`` them as one program)."""
    out = []
    sizes = sorted({np.dtype(_dt.to_dtype(dn).np).itemsize for dn in dtypes})
    for isz in sizes:
        out += [ck.im2col_source(D, isz), ck.tri_source(D, isz)] + [ck.take_source(D, isz, i) for i in _IDX]
        out += [ck.masked_source(D, isz, False), ck.masked_source(D, isz, True)]
    out += [ck.scan_chunks_source(D), ck.nll_totals_source(D), ck.unique_finish_source(D), ck.take_first_source(D)]
    for dn in dtypes:
        out += [ck.maxpool_source(D, dn), ck.adaptive_source(D, dn, True), ck.sort_source(D, dn),
                ck.median_pick_source(D, dn), ck.unique_rows_source(D, dn)]
        out += [ck.scanarg_source(D, dn, k) for k in ("cummax", "cummin")]
        out += [ck.count_chunks_source(D, dn), ck.nonzero_source(D, dn), ck.index_put_source(D, dn, False),
                ck.index_put_source(D, dn, True)]
        acc = dn if dn in FLOATS else "int64"
        out += [ck.scan_source(D, dn, acc, k) for k in ("cumsum", "cumprod")]
        out += [ck.argred_source(D, dn, k, r) for k in ("argmax", "argmin") for r in (False, True)]
        out += [ck.scatter_source(D, dn, i) for i in _IDX] + [ck.searchsorted_source(D, dn, o) for o in _IDX]
        if dn in FLOATS:
            out += [ck.avgpool_source(D, dn), ck.col2im_source(D, dn), ck.depthwise_source(D, dn),
                    ck.channel_moments_source(D, dn), ck.nll_terms_source(D, dn), ck.renorm_rows_source(D, dn),
                    ck.bilinear_source(D, dn), ck.group_norm_source(D, dn), ck.adaptive_source(D, dn, False),
                    norm_source("layer_norm", dn), norm_source("rms_norm", dn)]
    return out


def _bench():  # pragma: no cover - `python3 -m neetorch.devices.opencl.nn`
    """This module's kernels vs the CPU device vs the OpenCL device falling back to the CPU for them
    (this table removed), same process, interleaved, min of 5 wall times after 2 warm-ups."""
    import time

    import neetorch as nee

    from ...devices import get_backend
    from ...ops import registry
    F = nee.nn.functional
    bk = get_backend(nee.device("opencl"))
    rng = np.random.default_rng(0)

    def t(*s):
        return nee.tensor(rng.standard_normal(s).astype(np.float32))
    cpu = {"x": t(8, 32, 56, 56), "w": t(64, 32, 3, 3), "b": t(64), "wd": t(32, 1, 3, 3), "h": t(64, 768),
           "lw": t(768), "lb": t(768), "emb": t(30000, 256), "ids": nee.tensor(rng.integers(0, 30000, (32, 128))),
           "s": t(256, 1024), "gi": nee.tensor(rng.integers(0, 1024, (256, 1024)))}
    ocl = {k: v.to("opencl") for k, v in cpu.items()}
    cases = {
        "conv2d 8x32x56x56 * 64x32x3x3 pad 1": lambda d: F.conv2d(d["x"], d["w"], d["b"], padding=1),
        "depthwise conv2d 8x32x56x56 3x3": lambda d: F.conv2d(d["x"], d["wd"], padding=1, groups=32),
        "max_pool2d 3/2/1 8x32x56x56": lambda d: F.max_pool2d(d["x"], 3, 2, 1),
        "avg_pool2d 2 8x32x56x56": lambda d: F.avg_pool2d(d["x"], 2),
        "layer_norm 64x768": lambda d: F.layer_norm(d["h"], (768,), d["lw"], d["lb"]),
        "embedding 32x128 of 30000x256": lambda d: F.embedding(d["ids"], d["emb"]),
        "gather 256x1024 dim 1": lambda d: nee.gather(d["s"], 1, d["gi"]),
        "cat 3 x 8x32x56x56 dim 1": lambda d: nee.cat([d["x"], d["x"], d["x"]], 1),
        "pad reflect 8x32x56x56": lambda d: F.pad(d["x"], (2, 2, 2, 2), mode="reflect"),
        "cumsum 256x1024 dim 1": lambda d: nee.cumsum(d["s"], 1),
        "argmax 256x1024 dim 1": lambda d: nee.argmax(d["s"], 1),
        "sort 256x1024 dim 1": lambda d: nee.sort(d["s"], 1)[0],
    }
    full, mine = dict(bk.kernels), set(table())

    def use(native):
        bk.kernels = full if native else {k: v for k, v in full.items() if k not in mine}
        registry._claims.clear()

    def run(f, d, sync):
        t0 = time.perf_counter()
        f(d)
        if sync:
            bk.synchronize()
        return time.perf_counter() - t0
    print(f"{bk.name}\n{'case':38s} {'cpu ms':>8s} {'opencl ms':>9s} {'fallback ms':>11s} {'cpu/ocl':>7s} "
          f"{'fallback/ocl':>12s}")
    try:
        for name, f in cases.items():
            ts = {"cpu": [], "ocl": [], "fb": []}
            for i in range(7):
                ts["cpu"].append(run(f, cpu, False))
                use(True)
                ts["ocl"].append(run(f, ocl, True))
                use(False)
                ts["fb"].append(run(f, ocl, True))
                use(True)
            c, o, b = (min(ts[k][2:]) * 1e3 for k in ("cpu", "ocl", "fb"))
            print(f"{name:38s} {c:8.2f} {o:9.2f} {b:11.2f} {c / o:7.2f} {b / o:12.2f}")
    finally:
        use(True)


if __name__ == "__main__":  # pragma: no cover
    _bench()
