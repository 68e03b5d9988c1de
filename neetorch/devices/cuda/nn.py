"""CUDA kernels beyond elementwise / reductions / softmax / matmul: convolution, pooling,
resampling, padding, indexing and scatter, scans, arg reductions, sorting, einsum, group_norm.

The drivers shared with the OpenCL backend live in :mod:`..gpu_drivers`, written once against an
adapter (:class:`CudaAdapter` here: CuPy views as kernel arguments, cuBLAS matmuls through
``cupy.matmul``, ``cupy.argsort``, a thread per output of the row-run kernels, CUDA launch shapes);
this module keeps that adapter, the claims, and the drivers only CUDA has (CuPy's cumsum / cumprod /
nansum / count_nonzero / nonzero / einsum, the ``cupy.argsort`` sort / topk, advanced-index offsets
built with CuPy).  What each op does:

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

import numpy as np

from ...tensor import dtypes as _dt
from .. import ckernels as ck
from .. import gpu_drivers as gd
from . import CUDAArray

__all__ = ["COL_BUDGET", "CudaAdapter", "all_sources", "static_claims", "table"]

STORAGE = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
FLOATS = ("float16", "float32", "float64")
COL_BUDGET = 256 << 20           # bytes of im2col buffer per chunk of images
BLOCK = 256
MAX_BLOCKS = 1 << 20
_IDX = ck.IDX
_dn, _i64, _prod, _cstrides = gd._dn, gd._i64, gd._prod, gd._cstrides


def all_sources() -> list[tuple[str, str]]:
    """Every kernel of this module (for the nvcc test): the shared kernels of devices/ckernels.py in the
    CUDA dialect, those launched here and those only the OpenCL backend launches so far (sort, nonzero,
    index_put, embedding_renorm_, unique): nvcc (tests/test_cuda.py) and the g++ emulation check that all
    of them stay valid CUDA C."""
    C = ck.CUDA
    out = []
    for isz in ck.BITS:
        out += [ck.im2col_source(C, isz), ck.tri_source(C, isz)] + [ck.take_source(C, isz, i) for i in _IDX]
    out += [ck.maxpool_source(C, dn) for dn in STORAGE]
    out += [ck.avgpool_source(C, dn) for dn in FLOATS] + [ck.col2im_source(C, dn) for dn in FLOATS]
    out += [ck.depthwise_source(C, dn) for dn in FLOATS] + [ck.bilinear_source(C, dn) for dn in FLOATS]
    out += [ck.group_norm_source(C, dn) for dn in FLOATS]
    out += [ck.scatter_source(C, dn, i) for dn in STORAGE for i in _IDX]
    out += [ck.searchsorted_source(C, dn, o) for dn in STORAGE for o in _IDX]
    out += [ck.adaptive_source(C, dn, True) for dn in STORAGE] + [ck.adaptive_source(C, dn, False) for dn in FLOATS]
    out += [ck.argred_source(C, dn, k, r) for dn in STORAGE for k in ("argmax", "argmin") for r in (False, True)]
    for dn in STORAGE:
        out += [ck.sort_source(C, dn), ck.count_chunks_source(C, dn), ck.nonzero_source(C, dn),
                ck.index_put_source(C, dn, False), ck.index_put_source(C, dn, True), ck.median_pick_source(C, dn),
                ck.nll_terms_source(C, dn), ck.unique_rows_source(C, dn)]
        if dn in FLOATS:
            out += [ck.channel_moments_source(C, dn), ck.renorm_rows_source(C, dn)]
        out += [ck.scanarg_source(C, dn, k) for k in ("cummax", "cummin")]
        out += [ck.scan_source(C, dn, dn if dn in FLOATS else "int64", k) for k in ("cumsum", "cumprod")]
    out += [ck.masked_source(C, isz, s) for isz in ck.BITS for s in (False, True)]
    out += [ck.scan_chunks_source(C), ck.nll_totals_source(C), ck.unique_finish_source(C), ck.take_first_source(C)]
    return out


# ---------------------------------------------------------------- the adapter of the shared drivers
def _args(args):
    return tuple(a.a if isinstance(a, CUDAArray) else a for a in args)


class CudaAdapter(gd.Adapter):
    """CuPy arrays (views carry their offset: any C-contiguous array is a kernel argument), grid-stride
    launches of BLOCK threads, cuBLAS through ``cupy.matmul``, ``cupy.argsort``."""
    __slots__ = ()
    D = ck.CUDA
    prefix = "cuda"
    render = "neetorch.devices.cuda.render"

    def ok(self, a):
        return a.a.flags.c_contiguous

    @property
    def col_budget(self):
        return COL_BUDGET

    def launch(self, ks, total, args):
        bk = self.bk
        kern = bk.modules.kernel(*ks)
        blocks = max(1, min((total + BLOCK - 1) // BLOCK, MAX_BLOCKS))
        with bk.on():
            kern((blocks,), (BLOCK,), _args(args))
        bk.launches += 1

    def launch_rows(self, ks, rows, n, args, block=None, grid_cap=1 << 16):
        from .rows import _block
        bk = self.bk
        kern = bk.modules.kernel(*ks)
        blk = 1 if bk.emulated else (block or _block(bk, n))   # the emulation runs a block's threads in turn
        with bk.on():
            kern((min(rows, grid_cap),), (blk,), _args(args))
        bk.launches += 1

    def runs(self, total, OW):
        """One thread per output (RW = 1, NR = OW runs per row: ``total`` threads)."""
        return total, 1, OW

    def matmul_into(self, dst, a, b):
        with self.bk.on():
            self.bk.cp.matmul(a.a, b.a, out=dst.a)
        self.bk.launches += 1

    def sort_order(self, x, d):
        return _argsort(self, x, d, False)



# ---------------------------------------------------------------- drivers only CUDA has (CuPy)
def _scan(kind):
    def run(A, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        cp = A.bk.cp
        acc = np.float64 if (x.dtype.kind == "f" or out.dtype.kind == "f") else np.int64
        xa = x.a.reshape(1) if x.ndim == 0 else x.a
        d = attrs["dim"] if x.ndim else 0
        with A.bk.on():
            r = (cp.cumsum if kind == "cumsum" else cp.cumprod)(xa, axis=d, dtype=acc)
        A.bk.copy_(out, CUDAArray(r.reshape(out.shape)))
    return run


def _reduce_np(kind):
    """``nansum`` (accumulating like ``sum``) and ``count_nonzero`` through CuPy."""
    def run(A, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        cp = A.bk.cp
        dims = tuple(sorted(attrs["dims"]))
        xa = x.a.reshape(1) if x.ndim == 0 else x.a
        if x.ndim == 0:
            dims = (0,)
        with A.bk.on():
            if kind == "nansum":
                acc = np.float32 if x.dtype == np.float16 else (np.float64 if x.dtype.kind == "f" else np.int64)
                r = cp.nansum(xa, axis=dims, dtype=acc)
            else:
                r = cp.count_nonzero(xa, axis=dims)
        A.bk.copy_(out, CUDAArray(cp.asarray(r).reshape(out.shape)))
    return run


def _argsort(A, x, d, descending, k=None):
    """int64 indices that stably sort ``x`` along ``d`` (CPU rule: ascending NaN last; descending =
    the ascending sort of the reversed dim, reversed back: NaN first, ties in order), cut to the
    first ``k`` along ``d``; ``cupy.argsort`` (thrust stable sort) does the sorting."""
    bk = A.bk
    n = x.shape[d]
    xs = x
    if descending and n > 1:
        st = list(x.estrides)
        st[d] = -st[d]
        xs = bk.as_strided(x, x.shape, st, (n - 1) * x.estrides[d])
    with bk.on():
        # cupy sorts along the last axis and hands back a moved-axis *view* for any other d: the
        # gather kernel and the strided views below read the indices as contiguous, so copy.
        j = CUDAArray(bk.cp.argsort(xs.a, axis=d))
    j = A.contig(j)
    if descending and n > 1:
        st = list(_cstrides(x.shape))
        off = (n - 1) * st[d]
        st[d] = -st[d]
        jf = bk.as_strided(j, x.shape, st, off)
        r = bk.empty(x.shape, _dt.int64)
        A.ew("sub", r, [bk.from_host(np.array(n - 1, np.int64)), jf])
        j = r
    if k is not None and k < n:
        shape = list(x.shape)
        shape[d] = k
        jk = bk.empty(tuple(shape), _dt.int64)
        bk.copy_(jk, bk.as_strided(j, shape, j.estrides, 0))
        j = jk
    return j


def _sorted_out(A, x, d, j, vals, inds):
    """vals = x gathered along d at j (``take3``), inds = j."""
    xc = A.contig(x)
    res = A.work(vals)
    gd.take3(A, xc, j, res, xc.shape[d], j.shape[d], _prod(xc.shape[d + 1:]), 1)
    A.done(vals, res)
    A.bk.copy_(inds, j)


def _sort(topk):
    """sort (every entry) / topk (the first ``k`` of the descending-for-``largest`` order)."""
    def run(A, outs, ins, attrs):
        x, vals, inds = ins[0], outs[0], outs[1]
        if (vals if topk else x).size == 0:
            return
        d = attrs["dim"]
        j = _argsort(A, x, d, attrs["largest"], attrs["k"]) if topk else _argsort(A, x, d, attrs["descending"])
        _sorted_out(A, x, d, j, vals, inds)
    return run


def _nonzero(A, outs, ins, attrs):
    """``cupy.nonzero`` (row-major order, like ``np.argwhere``) copied into the columns of ``out``."""
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    bk = A.bk
    with bk.on():
        cols = bk.cp.nonzero(x.a)
    for c, a in enumerate(cols):
        bk.copy_(bk.as_strided(out, (out.shape[0],), (out.estrides[0],), c * out.estrides[1]), CUDAArray(a))


def _einsum(A, outs, ins, attrs):
    """``cupy.einsum`` (cuBLAS / cuTENSOR contractions); float16 operands computed in float32 like the CPU."""
    out = outs[0]
    if out.size == 0:
        return
    cp = A.bk.cp
    with A.bk.on():
        ops = [a.a.astype(np.float32) if a.dtype == np.float16 else a.a for a in ins]
        r = cp.einsum(attrs["equation"], *ops)
    A.bk.copy_(out, CUDAArray(cp.asarray(r).reshape(out.shape)))


def _index(A, outs, ins, attrs):
    """Advanced indexing ``x[key]``: every index entry becomes per-dim coordinates on the device (index
    tensors wrapped mod the dim size, they were range-checked by the frontend; masks through
    ``cupy.nonzero``), combined by CuPy into one flat int64 offset over the covered dims, then ONE gather
    (:func:`..gpu_drivers.index_gather`)."""
    x, idx = ins[0], ins[1:]
    out = outs[0]
    if out.size == 0:
        return
    bk = A.bk
    cp = bk.cp
    parts = []                                   # (dim, coordinate array)
    with bk.on():
        for d, c, t in zip(attrs["dims"], attrs["ncons"], idx):
            if t.dtype == np.bool_:
                coords = cp.nonzero(t.a)
                parts += [(d + q, coords[q]) for q in range(c)]
            else:
                parts.append((d, cp.remainder(t.a.astype(np.int64), x.shape[d])))

    def offsets(parts, cst):
        with bk.on():
            f = None
            for d, a in parts:
                term = a * int(cst[d]) if cst[d] != 1 else a
                f = term if f is None else f + term
            f = CUDAArray(cp.asarray(f).astype(np.int64))
        return A.contig(f)
    gd.index_gather(A, x, parts, out, offsets)


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


def _index_claims(backend, dtypes):
    # (x, index, out) on calls; the static-claims check asks with (x, out) only
    if len(dtypes) >= 3 and dtypes[1].name not in _IDX:
        return f"cuda index kernels take int32/int64 indices, not {dtypes[1].name}"
    return None


def _embedding_claims(backend, dtypes):
    if len(dtypes) >= 3 and dtypes[1].name not in _IDX:
        return f"cuda embedding takes int32/int64 indices, not {dtypes[1].name}"
    return None


def _adv_claims(backend, dtypes):
    # (x, *index tensors, out) on calls: int32/int64 indices or bool masks
    bad = [d.name for d in dtypes[1:-1] if d.name not in ("bool", "int32", "int64")]
    return f"cuda index takes int32/int64/bool index tensors, not {bad[0]}" if bad else None


def _einsum_claims(backend, dtypes):
    if any(d.name == "bool" for d in dtypes):
        return "no cuda einsum for bool"
    return None


def _mask_claims(backend, dtypes):
    if len(dtypes) >= 3 and dtypes[1].name != "bool":
        return f"cuda masked_select / masked_scatter take a bool mask, not {dtypes[1].name}"
    return None


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
    "cat": STORAGE, "flip": STORAGE,
}

_CLAIM_FNS = {
    "conv2d": _floats_same("conv2d"), "conv_transpose2d": _floats_same("conv_transpose2d"),
    "avg_pool2d": _floats("avg_pool2d"), "adaptive_avg_pool2d": _floats("adaptive_avg_pool2d"),
    "upsample_bilinear2d": _floats("upsample_bilinear2d"), "col2im": _floats("col2im"),
    "group_norm": _floats("group_norm"), "batch_norm_stats": _floats("batch_norm_stats"),
    "index_select": _index_claims, "gather": _index_claims, "take": _index_claims, "scatter": _index_claims,
    "index_reduce_dim": _index_claims, "embedding": _embedding_claims, "einsum": _einsum_claims,
    "index": _adv_claims, "masked_select": _mask_claims, "masked_scatter": _mask_claims,
}


def table() -> dict:
    """``{op: fn(backend, outs, ins, attrs)}``: the shared drivers (:mod:`..gpu_drivers`) and CUDA's own."""
    t = gd.bind(CudaAdapter, {
        "cumsum": _scan("cumsum"), "cumprod": _scan("cumprod"), "sort": _sort(False), "topk": _sort(True),
        "nonzero": _nonzero, "einsum": _einsum, "nansum": _reduce_np("nansum"),
        "count_nonzero": _reduce_np("count_nonzero"), "index": _index})
    for k, c in _CLAIM_FNS.items():
        t[k].claims = c
    assert set(t) == set(_CLAIMS)
    return t


def static_claims() -> dict[str, frozenset[str]]:
    """``{op: dtype names}`` of this module's ops (the same rules as the ``claims`` functions)."""
    return {k: frozenset(v) for k, v in _CLAIMS.items()}
