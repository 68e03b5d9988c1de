"""Host-side op drivers shared by the CUDA and the OpenCL backends.

The kernels are one dialect-neutral source each (:mod:`.ckernels`); the host side that launches
them is also one: each driver here is written once against a small per-backend :class:`Adapter`
(``cuda/nn.py``: :class:`~neetorch.devices.cuda.nn.CudaAdapter`, ``opencl/nn.py``:
:class:`~neetorch.devices.opencl.nn.CLAdapter`) that wraps one backend instance and provides the
few primitives that really differ:

* :meth:`Adapter.ok`: whether an array may be passed to a kernel as is (CUDA: C-contiguous, a CuPy
  view carries its own offset; OpenCL: C-contiguous AND at offset 0, kernel arguments are whole
  buffers); :meth:`Adapter.contig` / :meth:`Adapter.work` / :meth:`Adapter.done` build on it (one
  copy through the backend's ``copy_``, a temporary output written back);
* :meth:`Adapter.launch` (a grid-stride kernel over ``total`` work items) and
  :meth:`Adapter.launch_rows` (one block / work-group per row; ``block`` / ``grid_cap`` are the CUDA
  launch shape, the OpenCL backend runs every kernel on one fixed work-group size);
* :meth:`Adapter.runs`: how the row-run kernels (im2col, depthwise, max / avg pool) are launched: a
  thread per output on CUDA (``RW = 1``), a work-item per output row on OpenCL (``RW = OW``);
* :meth:`Adapter.matmul_into` (cuBLAS / this backend's matmul kernel), :meth:`Adapter.sort_order`
  (``cupy.argsort`` / the merge-sort kernel);
* ``D`` (the kernel dialect), ``prefix`` (the drivers' ``__name__``), ``render`` (the module of the
  backend's generated elementwise kernels, for :meth:`Adapter.ew`), ``col_budget``.

:func:`bind` turns the drivers into a backend's table functions ``fn(backend, outs, ins, attrs)``
(each backend attaches its own ``claims`` to them); the backends keep the drivers that genuinely
differ (CUDA: ``cupy.einsum``, ``cupy.argsort`` sort / topk, CuPy cumsum / cumprod / nansum /
count_nonzero / nonzero, advanced-index offsets built with CuPy; OpenCL: the scan, row-norm and
merge-sort kernels, einsum as views + sums + batched matmuls, host-built advanced-index offsets,
index_put, embedding_renorm_, unique).  Nothing here imports CuPy or pyopencl.
"""
from __future__ import annotations

import abc
import importlib
import itertools
import weakref

import numpy as np

from ..tensor import dtypes as _dt
from . import ckernels as ck

__all__ = ["CHUNK", "DRIVERS", "Adapter", "bind"]

CHUNK = 4096                     # elements per chunk of the stream-compaction kernels


def _dn(a) -> str:
    return _dt.from_numpy_dtype(a.dtype).name


def _i64(v):
    return np.int64(v)


def _i32(v):
    return np.int32(v)


def _prod(s):
    r = 1
    for v in s:
        r *= int(v)
    return r


def _cstrides(shape):
    st, c = [], 1
    for s in reversed(shape):
        st.append(c)
        c *= max(int(s), 1)
    return tuple(reversed(st))


def _ond(x, d):
    """(O, n, I) of contiguous ``x`` around dim ``d`` (a 0-d tensor: one element)."""
    if x.ndim == 0:
        return 1, 1, 1
    d %= x.ndim
    return _prod(x.shape[:d]), x.shape[d], _prod(x.shape[d + 1:])


_SCRATCH: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Adapter(abc.ABC):
    """One backend instance (``.bk``) plus the primitives the shared drivers need (see the module doc)."""
    __slots__ = ("bk",)
    D: ck.KDialect
    prefix = ""
    render = ""             # the backend's generated-elementwise module (``launch(backend, op, out, ins)``)

    def __init__(self, backend):
        self.bk = backend

    # ---------------------------------------------------------------- what each backend defines
    @abc.abstractmethod
    def ok(self, a) -> bool:
        """Whether a kernel can take array ``a`` as it is."""

    @property
    @abc.abstractmethod
    def col_budget(self) -> int:
        """Bytes of column matrix a conv may build at once."""

    @abc.abstractmethod
    def launch(self, ks, total, args):
        """Run kernel source ``ks`` over ``total`` work items."""

    @abc.abstractmethod
    def launch_rows(self, ks, rows, n, args, block=None, grid_cap=1 << 16):
        """Run row kernel ``ks`` over ``rows`` rows of ``n``."""

    @abc.abstractmethod
    def runs(self, total, OW):
        """(work items, RW, NR) of a row-run kernel over ``total`` outputs in rows of ``OW``."""

    @abc.abstractmethod
    def matmul_into(self, dst, a, b):
        """``dst = a @ b`` on the device."""

    @abc.abstractmethod
    def sort_order(self, x, d):
        """int64 indices (contiguous) of the stable ascending sort of contiguous ``x`` along ``d``."""

    # ---------------------------------------------------------------- built on them
    def ew(self, op, out, ins):
        """``out = op(*ins)`` through the backend's generated elementwise kernel."""
        from ..ops.registry import OPS
        importlib.import_module(self.render).launch(self.bk, OPS[op], out, ins)

    def scratch(self):
        """A per-backend int32 the index kernels may write when the caller already validated the indices."""
        f = _SCRATCH.get(self.bk)
        if f is None:
            f = _SCRATCH[self.bk] = self.bk.empty((1,), _dt.int32)
        return f

    def contig(self, a):
        """``a`` if a kernel may take it as is, else a contiguous copy."""
        if self.ok(a):
            return a
        c = self.bk.empty(a.shape, _dt.from_numpy_dtype(a.dtype))
        self.bk.copy_(c, a)
        return c

    def same_dtype(self, a, npdt):
        """``a`` as a kernel argument of numpy dtype ``npdt`` (a converting copy when it differs)."""
        if a.dtype == npdt:
            return self.contig(a)
        c = self.bk.empty(a.shape, _dt.from_numpy_dtype(npdt))
        self.bk.copy_(c, a)
        return c

    def work(self, out):
        """Where a kernel writes: ``out`` itself when a kernel may take it, else a temporary (:meth:`done`)."""
        return out if self.ok(out) else self.bk.empty(out.shape, _dt.from_numpy_dtype(out.dtype))

    def done(self, out, res):
        if res is not out:
            self.bk.copy_(out, res)

    def view(self, a, shape, offset=0, strides=None):
        return self.bk.as_strided(a, shape, a.estrides if strides is None else strides, offset)

    def flag(self):
        f = self.bk.empty((1,), _dt.int32)
        self.bk.fill_(f, 0)
        return f


def bind(adapter_cls, own=None) -> dict:
    """``{op: fn(backend, outs, ins, attrs)}``: every driver of :data:`DRIVERS` plus the backend's ``own``
    (``{op: driver(A, outs, ins, attrs)}``, same signature), run with ``adapter_cls(backend)``; one new
    function per op, to which the backend attaches its own ``claims``."""
    return {name: _bound(adapter_cls, drv, name) for name, drv in {**DRIVERS, **(own or {})}.items()}


def _bound(adapter_cls, driver, name):
    def run(backend, outs, ins, attrs):
        return driver(adapter_cls(backend), outs, ins, attrs)
    run.__name__ = run.__qualname__ = f"{adapter_cls.prefix}_{name}"
    return run


# ---------------------------------------------------------------- convolution
def _add_bias(A, res, b):
    bv = A.bk.as_strided(b, res.shape, (0, b.estrides[0]) + (0,) * (res.ndim - 2), 0)
    A.ew("add", res, [res, bv])


def conv2d(A, outs, ins, attrs):
    """im2col kernel + the backend's matmul writing straight into the NCHW output viewed as
    ``(n, G, Og, L)``; 1x1 / stride 1 / unpadded: no im2col; depthwise: a direct kernel; the column
    buffer chunked under the backend's column budget; bias by the generated ``add``."""
    out = outs[0]
    if out.size == 0:
        return
    bk = A.bk
    x, w = A.contig(ins[0]), A.contig(ins[1])
    b = ins[2] if len(ins) > 2 else None
    N, C, H, W = x.shape
    O, Cg, KH, KW = w.shape
    OH, OW = out.shape[2], out.shape[3]
    sh, sw = attrs["stride"]
    pt, pb, pl, pr = attrs["padding"]
    dh, dw = attrs["dilation"]
    G = attrs["groups"]
    Og, K, L = O // G, Cg * KH * KW, OH * OW
    res = A.work(out)
    dt = _dt.from_numpy_dtype(x.dtype)
    if K == 0:
        bk.fill_(res, 0)
    elif Cg == 1 and G == C and KH * KW > 1:
        # depthwise (channel multiplier O // C): a direct kernel, no column buffer, bias included
        items, RW, NR = A.runs(res.size, OW)
        bb = A.contig(b) if b is not None else None
        A.launch(ck.depthwise_source(A.D, dt.name), items,
                 (x, w, bb if bb is not None else w, res, _i64(items), _i64(C), _i64(O), _i64(H), _i64(W),
                  _i32(KH), _i32(KW), _i32(sh), _i32(sw), _i32(pt), _i32(pl), _i32(dh), _i32(dw), _i64(OH),
                  _i64(OW), _i32(bb is not None), _i64(RW), _i64(NR)))
        A.done(out, res)
        return
    else:
        wg = A.view(w, (G, Og, K), 0, _cstrides((G, Og, K)))
        direct = KH == 1 and KW == 1 and sh == 1 and sw == 1 and pt == pb == pl == pr == 0
        per = C * KH * KW * L * x.itemsize
        nb = N if direct else max(1, min(N, A.col_budget // max(per, 1)))
        col = None if direct else bk.empty((nb, C * KH * KW, L), dt)
        for n0 in range(0, N, nb):
            n = min(nb, N - n0)
            if direct:
                cols = A.view(x, (n, G, K, L), n0 * C * H * W, _cstrides((n, G, K, L)))
            else:
                items, RW, NR = A.runs(n * C * KH * KW * L, OW)
                xs = A.contig(A.view(x, (n, C, H, W), n0 * C * H * W))
                A.launch(ck.im2col_source(A.D, x.itemsize), items,
                         (xs, col, _i64(items), _i64(H), _i64(W), _i32(KH), _i32(KW), _i32(sh), _i32(sw),
                          _i32(pt), _i32(pl), _i32(dh), _i32(dw), _i64(OH), _i64(OW), _i64(RW), _i64(NR)))
                cols = A.view(col, (n, G, K, L), 0, _cstrides((n, G, K, L)))
            A.matmul_into(A.view(res, (n, G, Og, L), n0 * O * L, _cstrides((n, G, Og, L))), wg, cols)
    if b is not None:
        _add_bias(A, res, b)
    A.done(out, res)


def conv_transpose2d(A, outs, ins, attrs):
    """The backend's matmul ``W^T x`` into columns, then the col2im kernel that GATHERS, for each
    output pixel, the column entries that land on it (no atomics: deterministic), plus the bias."""
    out = outs[0]
    if out.size == 0:
        return
    bk = A.bk
    x, w = A.contig(ins[0]), A.contig(ins[1])
    b = A.contig(ins[2]) if len(ins) > 2 else None
    N, Cin, H, W = x.shape
    _, Cog, KH, KW = w.shape
    G = attrs["groups"]
    Cout, Cig = Cog * G, Cin // G
    OH, OW = out.shape[2], out.shape[3]
    sh, sw = attrs["stride"]
    ph, pw = attrs["padding"]
    dh, dw = attrs["dilation"]
    L, M = H * W, Cog * KH * KW
    res = A.work(out)
    dt = _dt.from_numpy_dtype(x.dtype)
    if Cig == 0:
        bk.fill_(res, 0)
        if b is not None:
            _add_bias(A, res, b)
        A.done(out, res)
        return
    wt = A.view(w, (G, M, Cig), 0, (Cig * M, 1, M))       # (G, M, Cig): W^T per group
    per = G * M * L * x.itemsize
    nb = max(1, min(N, A.col_budget // max(per, 1)))
    col = bk.empty((nb, G, M, L), dt)
    for n0 in range(0, N, nb):
        n = min(nb, N - n0)
        xg = A.view(x, (n, G, Cig, L), n0 * Cin * L, _cstrides((n, G, Cig, L)))
        cv = A.view(col, (n, G, M, L), 0, _cstrides((n, G, M, L)))
        A.matmul_into(cv, wt, xg)
        total = n * Cout * OH * OW
        dst = A.view(res, (n, Cout, OH, OW), n0 * Cout * OH * OW)
        tgt = A.work(dst)
        A.launch(ck.col2im_source(A.D, dt.name), total,
                 (cv, b if b is not None else x, tgt, _i64(total), _i64(H), _i64(W), _i32(KH), _i32(KW),
                  _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw), _i64(OH), _i64(OW), _i64(Cout),
                  _i32(b is not None)))
        A.done(dst, tgt)
    A.done(out, res)


def im2col(A, outs, ins, attrs):
    """``unfold``: the conv2d column kernel into (N, C*KH*KW, L)."""
    out = outs[0]
    if out.size == 0:
        return
    x = A.contig(ins[0])
    H, W = x.shape[2], x.shape[3]
    KH, KW = attrs["kernel_size"]
    dh, dw = attrs["dilation"]
    ph, pw = attrs["padding"]
    sh, sw = attrs["stride"]
    OH, OW = attrs["blocks"]
    res = A.work(out)
    items, RW, NR = A.runs(res.size, OW)
    A.launch(ck.im2col_source(A.D, x.itemsize), items,
             (x, res, _i64(items), _i64(H), _i64(W), _i32(KH), _i32(KW), _i32(sh), _i32(sw), _i32(ph), _i32(pw),
              _i32(dh), _i32(dw), _i64(OH), _i64(OW), _i64(RW), _i64(NR)))
    A.done(out, res)


def col2im(A, outs, ins, attrs):
    """``fold``: the transposed convolution's gathering col2im kernel (overlapping blocks summed)."""
    out = outs[0]
    if out.size == 0:
        return
    x = A.contig(ins[0])
    KH, KW = attrs["kernel_size"]
    dh, dw = attrs["dilation"]
    ph, pw = attrs["padding"]
    sh, sw = attrs["stride"]
    BH, BW = attrs["blocks"]
    OH, OW = out.shape[2], out.shape[3]
    res = A.work(out)
    total = res.size
    A.launch(ck.col2im_source(A.D, _dn(x)), total,
             (x, x, res, _i64(total), _i64(BH), _i64(BW), _i32(KH), _i32(KW), _i32(sh), _i32(sw), _i32(ph),
              _i32(pw), _i32(dh), _i32(dw), _i64(OH), _i64(OW), _i64(1), _i32(0)))
    A.done(out, res)


# ---------------------------------------------------------------- pooling and resampling
def _pool_attrs(x, out, attrs):
    return (x.shape[2], x.shape[3], out.shape[2], out.shape[3]) + tuple(attrs["kernel_size"]) + \
        tuple(attrs["stride"]) + tuple(attrs["padding"])


def max_pool(A, outs, ins, attrs):
    """One output per thread (row of outputs per OpenCL work-item), torch's rule (the first valid tap
    starts, then ``v > best`` or ``v`` NaN takes over; indices are plane offsets ``ih * W + iw``)."""
    out = outs[0]
    if out.size == 0:
        return
    x = A.contig(ins[0])
    H, W, OH, OW, KH, KW, sh, sw, ph, pw = _pool_attrs(x, out, attrs)
    dh, dw = attrs["dilation"]
    res = A.work(out)
    ires = A.work(outs[1]) if len(outs) > 1 else None
    items, RW, NR = A.runs(out.size, OW)
    A.launch(ck.maxpool_source(A.D, _dn(x)), items,
             (x, res, ires if ires is not None else res, _i64(items), _i64(H), _i64(W), _i64(OH), _i64(OW),
              _i32(KH), _i32(KW), _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw),
              _i32(ires is not None), _i64(RW), _i64(NR)))
    A.done(out, res)
    if ires is not None:
        A.done(outs[1], ires)


def avg_pool(A, outs, ins, attrs):
    """The window summed in (row, column) order, divided like the CPU kernel (``count_include_pad``,
    ``ceil_mode``, ``divisor_override``)."""
    out = outs[0]
    if out.size == 0:
        return
    x = A.contig(ins[0])
    H, W, OH, OW, KH, KW, sh, sw, ph, pw = _pool_attrs(x, out, attrs)
    res = A.work(out)
    items, RW, NR = A.runs(out.size, OW)
    A.launch(ck.avgpool_source(A.D, _dn(x)), items,
             (x, res, _i64(items), _i64(H), _i64(W), _i64(OH), _i64(OW), _i32(KH), _i32(KW), _i32(sh),
              _i32(sw), _i32(ph), _i32(pw), _i32(bool(attrs["count_include_pad"])),
              _i64(int(attrs.get("divisor_override") or 0)), _i64(RW), _i64(NR)))
    A.done(out, res)


def adaptive(A, outs, ins, attrs):
    """adaptive_avg_pool2d / adaptive_max_pool2d: one thread per output, the CPU's windows and rules."""
    out = outs[0]
    if out.size == 0:
        return
    x = A.contig(ins[0])
    H, W = x.shape[2], x.shape[3]
    OH, OW = out.shape[2], out.shape[3]
    res = A.work(out)
    ires = A.work(outs[1]) if len(outs) > 1 else None
    total = out.size
    A.launch(ck.adaptive_source(A.D, _dn(x), attrs["mode"] == "max"), total,
             (x, res, ires if ires is not None else res, _i64(total), _i64(H), _i64(W), _i64(OH), _i64(OW),
              _i32(ires is not None)))
    A.done(out, res)
    if ires is not None:
        A.done(outs[1], ires)


def upsample_nearest(A, outs, ins, attrs):
    """Two row gathers (``take3``) with the CPU kernel's source indices (PyTorch's float32 rules)."""
    from .cpu.kernels.conv import nearest_index
    out = outs[0]
    if out.size == 0:
        return
    bk = A.bk
    x = A.contig(ins[0])
    N, C, H, W = x.shape
    OH, OW = out.shape[2], out.shape[3]
    sh, sw = attrs["scales"]
    hi = bk.from_host(nearest_index(H, OH, sh, attrs["exact"]).astype(np.int64))
    wi = bk.from_host(nearest_index(W, OW, sw, attrs["exact"]).astype(np.int64))
    tmp = bk.empty((N, C, OH, W), _dt.from_numpy_dtype(x.dtype))
    take3(A, x, hi, tmp, H, OH, W, 0)
    res = A.work(out)
    take3(A, tmp, wi, res, W, OW, 1, 0)
    A.done(out, res)


def upsample_bilinear(A, outs, ins, attrs):
    """One thread per output with the CPU kernel's indices and weights (PyTorch's order of operations)."""
    from .cpu.kernels.conv import linear_weights
    out = outs[0]
    if out.size == 0:
        return
    bk = A.bk
    x = A.contig(ins[0])
    H, W = x.shape[2], x.shape[3]
    OH, OW = out.shape[2], out.shape[3]
    sh, sw = attrs["scales"]
    ac = attrs["align_corners"]
    cdt = np.dtype(np.float64 if x.dtype == np.float64 else np.float32)
    h0, h1, lh0, lh1 = linear_weights(H, OH, sh, ac, cdt)
    w0, w1, lw0, lw1 = linear_weights(W, OW, sw, ac, cdt)
    ii = bk.from_host(np.concatenate([h0, h1, w0, w1]).astype(np.int64))
    ll = bk.from_host(np.concatenate([lh0, lh1, lw0, lw1]).astype(cdt))
    res = A.work(out)
    total = res.size
    A.launch(ck.bilinear_source(A.D, _dn(x)), total,
             (x, res, ii, ll, _i64(total), _i64(H), _i64(W), _i64(OH), _i64(OW)))
    A.done(out, res)


# ---------------------------------------------------------------- data movement: copies between views
def cat(A, outs, ins, attrs):
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
        A.bk.copy_(A.bk.as_strided(out, shape, out.estrides, pos * out.estrides[d]), a)
        pos += k


def flip(A, outs, ins, attrs):
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
    A.bk.copy_(out, A.bk.as_strided(x, x.shape, st, off))


def pad(A, outs, ins, attrs):
    """constant = fill + copy of the input into the interior view; reflect / replicate / circular = the
    same, then per padded dim two copies between views of the output (negative strides reflect, 0
    strides replicate), each through the generated ``cast`` kernel."""
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    bk = A.bk
    widths, mode = attrs["widths"], attrs["mode"]
    st = out.estrides
    off = sum(lo * s for (lo, _), s in zip(widths, st))
    if mode == "constant" or x.size == 0:
        bk.fill_(out, attrs.get("value", 0))
    if x.size:
        bk.copy_(A.view(out, x.shape, off), x)
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
            return A.view(out, shape, start * st[d], s)
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
                bk.copy_(dst, src)


def roll(A, outs, ins, attrs):
    """Each rolled dim splits into two blocks: 2**k block copies (the ``cast`` kernel between views)
    straight from the input into place; shifts of a repeated dim add up (torch)."""
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
        src = A.bk.as_strided(x, shape, x.estrides, sum(c[0] * st for c, st in zip(combo, x.estrides)))
        dst = A.bk.as_strided(out, shape, out.estrides, sum(c[1] * st for c, st in zip(combo, out.estrides)))
        A.bk.copy_(dst, src)


def repeat(A, outs, ins, attrs):
    """``out`` viewed as (r0, s0, r1, s1, ...) = the input broadcast over the r dims: one copy."""
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    reps = attrs["repeats"]
    xs = (1,) * (len(reps) - x.ndim) + tuple(x.shape)
    xst = (0,) * (len(reps) - x.ndim) + tuple(x.estrides)
    res = out if out.flags.c_contiguous else A.bk.empty(out.shape, _dt.from_numpy_dtype(out.dtype))
    inter, ost, sst = [], [], []
    for r, n, s, os_ in zip(reps, xs, xst, _cstrides(out.shape)):
        inter += [r, n]
        ost += [os_ * n, os_]
        sst += [0, s]
    A.bk.copy_(A.view(res, inter, 0, ost), A.view(x, inter, 0, sst))
    A.done(out, res)


def diag_embed(A, outs, ins, attrs):
    """Zeros, then the input copied into the (dim1, dim2) diagonal of the output: a strided view."""
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    A.bk.fill_(out, 0)
    if x.size == 0:
        return
    off, d1, d2 = attrs["offset"], attrs["dim1"], attrs["dim2"]
    st = out.estrides
    rest = [q for q in range(out.ndim) if q not in (d1, d2)]
    strides = [st[q] for q in rest] + [st[d1] + st[d2]]
    start = off * st[d2] if off >= 0 else -off * st[d1]
    A.bk.copy_(A.bk.as_strided(out, x.shape, strides, start), x)


def _tri(lower):
    def run(A, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        x = A.contig(x)
        res = A.work(out)
        R, C = x.shape[-2], x.shape[-1]
        total = x.size
        A.launch(ck.tri_source(A.D, x.itemsize), total,
                 (x, res, _i64(total), _i64(R), _i64(C), _i64(int(attrs["diagonal"])), _i32(lower)))
        A.done(out, res)
    return run


# ---------------------------------------------------------------- indexing: the bounds-checked gather
def take3(A, x, idx, res, n, k, inner, per_elem, wrap=0, read=False):
    """x (outer, n, inner), idx, res (outer, k, inner): kernel arguments as they are (``A.ok``).
    ``read``: the error flag is zeroed first and returned (else a shared scratch flag nobody reads)."""
    flag = A.flag() if read else A.scratch()
    total = res.size
    A.launch(ck.take_source(A.D, x.itemsize, _dn(idx)), total,
             (x, idx, res, flag, _i64(total), _i64(n), _i64(k), _i64(inner), _i32(per_elem), _i32(wrap)))
    return flag


def index_select(A, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x, idx = A.contig(ins[0]), A.contig(ins[1])
    d = attrs["dim"]
    res = A.work(out)
    take3(A, x, idx, res, x.shape[d], idx.size, _prod(x.shape[d + 1:]), 0)   # indices checked by op.check
    A.done(out, res)


def gather(A, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x, idx = ins
    d = attrs["dim"]
    if any(idx.shape[k] != x.shape[k] for k in range(x.ndim) if k != d):
        shape = tuple(idx.shape[k] if k != d else x.shape[k] for k in range(x.ndim))
        x = A.view(x, shape)                 # the part of x the index covers
    x, idx = A.contig(x), A.contig(idx)
    res = A.work(out)
    take3(A, x, idx, res, x.shape[d], idx.shape[d], _prod(x.shape[d + 1:]), 1)   # checked by op.check
    A.done(out, res)


def _embedding_range_error(v, V):
    return IndexError(f"index out of range in self: embedding index {v} is out of range for a weight table "
                      f"with {V} rows (valid indices are 0..{V - 1})")


def _check_embedding(A, idx, V):
    ii = A.bk.to_host(idx).reshape(-1).astype(np.int64)
    bad = np.flatnonzero((ii < 0) | (ii >= V))
    if bad.size:
        raise _embedding_range_error(int(ii[bad[0]]), V)


def embedding(A, outs, ins, attrs):
    """The gather kernel; no host check of the indices before it: its flag is read back and an
    out-of-range index raises the CPU kernel's ``IndexError``."""
    wt, idx = ins
    out = outs[0]
    V, Dm = wt.shape
    if idx.size == 0:
        return
    if out.size == 0:                                # nothing to copy, but the indices must still be valid
        _check_embedding(A, idx, V)
        return
    wt, idx = A.contig(wt), A.contig(idx)
    res = A.work(out)
    flag = take3(A, wt, idx, res, V, idx.size, Dm, 0, read=True)
    if int(A.bk.to_host(flag)[0]):
        _check_embedding(A, idx, V)
    A.done(out, res)


def take(A, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    x, idx = A.contig(ins[0]), A.contig(ins[1])
    res = A.work(out)
    take3(A, x, idx, res, x.size, idx.size, 1, 1, wrap=1)     # indices checked by op.check
    A.done(out, res)


def repeat_interleave(A, outs, ins, attrs):
    """The source index of every output slice (``np.repeat`` of the repeats, read back: small) and the
    gather kernel."""
    x, r = ins
    out = outs[0]
    if out.size == 0:
        return
    d = attrs["dim"]
    src = np.repeat(np.arange(x.shape[d], dtype=np.int64), A.bk.to_host(r).astype(np.int64))
    xs = A.contig(x)
    res = A.work(out)
    take3(A, xs, A.bk.from_host(src), res, x.shape[d], src.size, _prod(x.shape[d + 1:]), 0)
    A.done(out, res)


def index_gather(A, x, parts, out, offsets):
    """The second half of advanced indexing ``x[key]`` (``parts``: per covered dim, its coordinate
    array, host or device): x viewed as (before, covered, after) -- or, for covered dims that are not
    adjacent, a copy of x with them moved to the front (numpy's rule: the index dims lead the result)
    -- then ONE gather with the flat int64 offsets ``offsets(parts, covered strides)`` builds."""
    covered = sorted(p[0] for p in parts)
    adjacent = covered == list(range(covered[0], covered[0] + len(covered)))
    if adjacent:
        xs = A.contig(x)
        first, last = covered[0], covered[-1]
    else:                                        # covered dims first, the rest after (a copy)
        perm = covered + [q for q in range(x.ndim) if q not in covered]
        xv = A.bk.as_strided(x, tuple(x.shape[q] for q in perm), tuple(x.estrides[q] for q in perm), 0)
        xs = A.contig(xv)
        first, last = 0, len(covered) - 1
        parts = [(covered.index(d), a) for d, a in parts]
    sizes = xs.shape[first:last + 1]
    cst = _cstrides(sizes)
    fi = offsets([(d - first, a) for d, a in parts], cst)
    res = A.work(out)
    take3(A, xs, fi, res, _prod(sizes), fi.size, _prod(xs.shape[last + 1:]), 0)
    A.done(out, res)


# ---------------------------------------------------------------- scatter, searchsorted
def scatter(A, outs, ins, attrs):
    """``scatter`` / ``scatter_add`` / ``scatter_reduce``: a gather per output element over its index
    column: deterministic, the CPU's order; O(k) per output element."""
    x, idx, src = ins
    out = outs[0]
    if out.size == 0:
        return
    A.bk.copy_(out, x)
    if idx.size == 0:
        return
    d = attrs["dim"]
    region = out
    if any(idx.shape[q] != out.shape[q] for q in range(out.ndim) if q != d):
        region = A.view(out, tuple(idx.shape[q] if q != d else out.shape[q] for q in range(out.ndim)))
    res = A.contig(region)
    idx, src = A.contig(idx), A.contig(src)
    total = res.size
    A.launch(ck.scatter_source(A.D, _dn(res), _dn(idx)), total,
             (res, idx, src, _i64(total), _i64(res.shape[d]), _i64(idx.shape[d]), _i64(_prod(res.shape[d + 1:])),
              _i32(ck.SCATTER_KINDS[attrs["reduce"]]), _i32(bool(attrs.get("include_self", True)))))
    A.done(region, res)


def index_reduce_dim(A, outs, ins, attrs):
    """index_add / index_copy / index_fill: the scatter kernel with the 1-D index spread over the
    (outer, k, inner) source (add: sum with self, ``alpha`` applied first in the output dtype like the
    CPU; copy / fill: the last write wins)."""
    bk = A.bk
    x, idx, src = ins
    out = outs[0]
    if out.size == 0:
        return
    d = attrs["dim"]
    O, n, Ii = _prod(out.shape[:d]), out.shape[d], _prod(out.shape[d + 1:])
    k = idx.shape[0]
    dt = _dt.from_numpy_dtype(out.dtype)
    i3 = A.contig(bk.as_strided(idx, (O, k, Ii), (0, idx.estrides[0], 0), 0))
    if src.ndim == 0:
        s3 = bk.as_strided(src, (O, k, Ii), (0, 0, 0), 0)
    else:
        s3 = A.view(A.contig(src), (O, k, Ii), 0, _cstrides((O, k, Ii)))
    if attrs["mode"] == "add" and attrs.get("alpha", 1) != 1:
        scaled = bk.empty((O, k, Ii), dt)
        A.ew("mul", scaled, [s3, bk.from_host(np.array(attrs["alpha"]).astype(out.dtype))])
        s3 = scaled
    s3 = A.contig(s3)
    bk.copy_(out, x)
    res = A.contig(out)
    total = res.size
    A.launch(ck.scatter_source(A.D, dt.name, _dn(i3)), total,
             (res, i3, s3, _i64(total), _i64(n), _i64(k), _i64(Ii), _i32(1 if attrs["mode"] == "add" else 0),
              _i32(1)))
    A.done(out, res)


def searchsorted(A, outs, ins, attrs):
    """A binary search per value (torch's comparisons: its answers where the sequence holds NaNs)."""
    seq, vals = A.contig(ins[0]), A.contig(ins[1])
    out = outs[0]
    if out.size == 0:
        return
    n = seq.shape[-1]
    m = vals.shape[-1] if vals.ndim else 1
    res = A.work(out)
    total = res.size
    A.launch(ck.searchsorted_source(A.D, _dn(seq), _dn(out)), total,
             (seq, vals, res, _i64(total), _i64(n), _i64(m), _i32(seq.ndim > 1), _i32(bool(attrs["right"]))))
    A.done(out, res)


# ---------------------------------------------------------------- arg reductions, scans with indices, median
def _argred(A, kind, x, d, vals, inds):
    """indices (and values) of the max/min of ``x`` along ``d`` into ``inds`` / ``vals``: the CPU's rule
    (first occurrence, the first NaN wins); one thread per output, or one block per long contiguous row
    (tree combine in shared / local memory)."""
    xc = A.contig(x)
    if d is None or xc.ndim == 0:
        O, n, I = 1, xc.size, 1
    else:
        O, n, I = _prod(xc.shape[:d]), xc.shape[d], _prod(xc.shape[d + 1:])
    rows = I == 1 and n >= 64
    ires = A.work(inds)
    vres = A.work(vals) if vals is not None else None
    args = (xc, vres if vres is not None else xc, ires, _i64(O), _i64(n), _i64(I), _i32(vres is not None))
    ks = ck.argred_source(A.D, _dn(xc), kind, rows)
    if rows:
        A.launch_rows(ks, O, n, args, block=256)     # (the kernel's shared tree holds 256 entries)
    else:
        A.launch(ks, O * I, args)
    A.done(inds, ires)
    if vres is not None:
        A.done(vals, vres)


def _arg(kind, values):
    """argmax / argmin (``values`` False: outs = indices) and max_dim / min_dim (outs = values, indices)."""
    def run(A, outs, ins, attrs):
        x = ins[0]
        if outs[0].size == 0:
            return
        _argred(A, kind, x, attrs["dim"] if x.ndim else None, outs[0] if values else None, outs[-1])
    return run


def _scanarg(kind):
    """cummax / cummin: one thread per (outer, inner) column, the CPU kernel's rule."""
    def run(A, outs, ins, attrs):
        x, vals, inds = ins[0], outs[0], outs[1]
        if vals.size == 0:
            return
        xc = A.contig(x)
        O, n, I = _ond(xc, attrs["dim"])
        vres, ires = A.work(vals), A.work(inds)
        A.launch(ck.scanarg_source(A.D, _dn(xc), kind), O * I, (xc, vres, ires, _i64(O), _i64(n), _i64(I)))
        A.done(vals, vres)
        A.done(inds, ires)
    return run


def median(A, outs, ins, attrs):
    """The stable sort of the dim (:meth:`Adapter.sort_order`), then the lower median, or the first NaN
    (one kernel)."""
    x, vals, inds = ins[0], outs[0], outs[1]
    if vals.size == 0:
        return
    d = attrs["dim"]
    xc = A.contig(x)
    if d is None or xc.ndim == 0:
        xc = A.bk.as_strided(xc, (xc.size,), (1,), 0)
        d = 0
    O, n, I = _ond(xc, d)
    order = A.sort_order(xc, d)
    vres, ires = A.work(vals), A.work(inds)
    A.launch(ck.median_pick_source(A.D, _dn(xc)), O * I, (xc, order, vres, ires, _i64(O), _i64(n), _i64(I)))
    A.done(vals, vres)
    A.done(inds, ires)


# ---------------------------------------------------------------- norms and losses
def norm_params(ins, attrs, rms):
    """(weight, bias) of layer_norm / rms_norm (None where absent; rms_norm has no bias)."""
    w = ins[1] if attrs["has_weight"] else None
    b = ins[1 + (w is not None)] if (not rms and attrs["has_bias"]) else None
    return w, b


def group_norm(A, outs, ins, attrs):
    """One block per (image, group) row, float64 moments and the CPU kernel's per-channel affine."""
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    N, C = x.shape[0], x.shape[1]
    G = attrs["groups"]
    HW = x.size // (N * C)
    it = iter(ins[1:])
    w = A.same_dtype(next(it), x.dtype) if attrs["has_weight"] else None
    b = A.same_dtype(next(it), x.dtype) if attrs["has_bias"] else None
    x = A.contig(x)
    res = A.work(out)
    rows, n = N * G, (C // G) * HW
    A.launch_rows(ck.group_norm_source(A.D, _dn(x)), rows, n,
                  (x, w if w is not None else x, b if b is not None else x, res, _i64(rows), _i64(G),
                   _i64(C // G), _i64(HW), np.float64(attrs["eps"]), _i32(w is not None), _i32(b is not None)),
                  grid_cap=1 << 20)
    A.done(out, res)


def batch_norm_stats(A, outs, ins, attrs):
    """Per-channel mean / biased variance in float64: one block per channel."""
    x = ins[0]
    mean, var = outs
    if mean.size == 0:
        return
    N, C = x.shape[0], x.shape[1]
    B = x.size // (N * C) if N * C else 0
    xc = A.contig(x)
    mres, vres = A.work(mean), A.work(var)
    A.launch_rows(ck.channel_moments_source(A.D, _dn(xc)), C, N * B, (xc, mres, vres, _i64(N), _i64(C), _i64(B)))
    A.done(mean, mres)
    A.done(var, vres)


def nll_loss_terms(A, outs, ins, attrs):
    """Per-(n, k) terms in parallel, the totals by one thread in order (the CPU's float64 sums exactly);
    out-of-range targets flagged by the kernel and reported with the CPU kernel's error."""
    bk = A.bk
    lp = ins[0]
    nll, sm, tot = outs
    N, C = lp.shape[0], lp.shape[1]
    K = lp.size // (N * C) if N * C else (_prod(lp.shape[2:]) if lp.ndim > 2 else 1)
    if N * C * K == 0:
        for o in outs:
            bk.fill_(o, 0)
        return
    lpc = A.contig(lp)                      # contiguous: (N, C, K) in memory order
    tgt = A.same_dtype(ins[1], np.dtype(np.int64))
    w = bk.empty((C,), _dt.float64)
    if attrs["has_weight"]:
        bk.copy_(w, ins[2])
    else:
        bk.fill_(w, 1.0)
    m = N * K
    nres, sres = A.work(nll), A.work(sm)
    part = bk.empty((3 * m,), _dt.float64)
    flag = A.flag()
    A.launch(ck.nll_terms_source(A.D, _dn(lpc)), m,
             (lpc, tgt, w, nres, sres, part, flag, _i64(N), _i64(C), _i64(K), _i64(attrs["ignore_index"]),
              _i32(bool(attrs["smooth"]))))
    if int(bk.to_host(flag)[0]):
        t = bk.to_host(tgt).reshape(-1)
        bad = t[(t != attrs["ignore_index"]) & ((t < 0) | (t >= C))]
        raise IndexError(f"nll_loss: target {int(bad[0])} is out of bounds (expected a class index in [0, {C}) or "
                         f"ignore_index={attrs['ignore_index']})")
    tres = A.work(tot)
    A.launch(ck.nll_totals_source(A.D), 1, (part, tres, _i64(m)))
    A.done(nll, nres)
    A.done(sm, sres)
    A.done(tot, tres)


# ---------------------------------------------------------------- stream compaction
def chunk_offsets(A, m):
    """Per chunk of CHUNK elements of contiguous ``m``: where its entries start (exclusive scan of the
    per-chunk nonzero counts), and the number of chunks."""
    n = m.size
    nch = -(-n // CHUNK)
    cnt = A.bk.empty((nch,), _dt.int64)
    A.launch(ck.count_chunks_source(A.D, _dn(m)), nch, (m, cnt, _i64(n), _i64(CHUNK)))
    A.launch(ck.scan_chunks_source(A.D), 1, (cnt, _i64(nch)))
    return cnt, nch


def _masked(scatter):
    """masked_select / masked_scatter: per-chunk counts, their scan, ordered writes."""
    def run(A, outs, ins, attrs):
        out = outs[0]
        if out.size == 0:
            return
        if scatter:
            x, m, src = ins
            A.bk.copy_(out, x)
            if not attrs["count"]:
                return
            mc, vc = A.contig(m), A.contig(src)
            res = A.contig(out)
        else:
            x, m = ins
            mc, vc = A.contig(m), A.contig(x)
            res = A.work(out)
        cnt, nch = chunk_offsets(A, mc)
        A.launch(ck.masked_source(A.D, vc.itemsize, scatter), nch, (mc, vc, res, cnt, _i64(mc.size), _i64(CHUNK)))
        A.done(out, res)
    return run


DRIVERS = {
    "conv2d": conv2d, "conv_transpose2d": conv_transpose2d, "im2col": im2col, "col2im": col2im,
    "max_pool2d": max_pool, "max_pool2d_with_indices": max_pool, "avg_pool2d": avg_pool,
    "adaptive_avg_pool2d": adaptive, "adaptive_max_pool2d": adaptive,
    "upsample_nearest2d": upsample_nearest, "upsample_bilinear2d": upsample_bilinear,
    "cat": cat, "flip": flip, "pad": pad, "roll": roll, "repeat": repeat, "diag_embed": diag_embed,
    "tril": _tri(1), "triu": _tri(0),
    "index_select": index_select, "gather": gather, "embedding": embedding, "take": take,
    "repeat_interleave": repeat_interleave, "scatter": scatter, "index_reduce_dim": index_reduce_dim,
    "searchsorted": searchsorted,
    "argmax": _arg("argmax", False), "argmin": _arg("argmin", False), "max_dim": _arg("argmax", True),
    "min_dim": _arg("argmin", True),
    "cummax": _scanarg("cummax"), "cummin": _scanarg("cummin"), "median": median,
    "group_norm": group_norm, "batch_norm_stats": batch_norm_stats, "nll_loss_terms": nll_loss_terms,
    "masked_select": _masked(False), "masked_scatter": _masked(True),
}
