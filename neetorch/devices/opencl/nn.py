"""OpenCL kernels beyond elementwise / reductions / softmax / matmul: convolution, pooling,
resampling, data movement, indexing and scatter, scans, arg reductions, sorting, row norms, losses.

The kernels are the CUDA backend's, printed in the OpenCL dialect by :mod:`..ckernels` (one
source per kernel for both backends); so are most host-side drivers (:mod:`..gpu_drivers`, written
once against an adapter): this module keeps :class:`CLAdapter` (kernel arguments are whole buffers,
one work-group size, a work-item per output row of the row-run kernels, this backend's matmul and
sort kernels), the claims, and the drivers only OpenCL has (cumsum / cumprod / layer_norm / rms_norm
kernels, the sort kernel's sort / topk / nonzero, host-built advanced-index offsets, index_put,
einsum, embedding_renorm_, unique).  What each op does:

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
kernel and size at first launch.  float16 (devices with ``cl_khr_fp16``; the backend stores it only
there): the same kernels on ``half`` storage, loaded into float and rounded once per store, as CUDA's
(:meth:`..ckernels.KDialect.io`); kernels that compute in double need ``cl_khr_fp64`` and are not
claimed without it.
"""
from __future__ import annotations

import numpy as np

from ...tensor import dtypes as _dt
from .. import ckernels as ck
from .. import gpu_drivers as gd
from . import CLArray

__all__ = ["COL_BUDGET", "CLAdapter", "all_sources", "table"]

D = ck.OPENCL
COL_BUDGET = 64 << 20            # bytes of im2col buffer per chunk of images
MAX_GROUPS = 4096                # grid-stride kernels: at most this many work-groups
LOCAL = 64                       # the work-group size of every kernel here
_IDX = ck.IDX
INTS = ("bool", "uint8", "int8", "int16", "int32", "int64")
FLOATS = ("float16", "float32", "float64")   # (each only where the device stores it: Backend.supports)
CHUNK = gd.CHUNK
_dn, _i64, _i32, _prod, _cstrides, _ond = gd._dn, gd._i64, gd._i32, gd._prod, gd._cstrides, gd._ond


# ---------------------------------------------------------------- the adapter of the shared drivers
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


class CLAdapter(gd.Adapter):
    """Kernel arguments are whole buffers (an array is one when contiguous at offset 0), every launch on
    LOCAL work-items per group, a work-item per output row of the row-run kernels, this backend's matmul
    (:mod:`.special`) and merge-sort kernels."""
    __slots__ = ()
    D = ck.OPENCL
    prefix = "cl"
    render = "neetorch.devices.opencl.render"

    def ok(self, a):
        return a.offset == 0 and a.is_contiguous

    @property
    def col_budget(self):
        return COL_BUDGET

    def launch(self, ks, total, args):
        """A grid-stride kernel over ``total`` items: work-groups of LOCAL, at most MAX_GROUPS of them (the
        kernel loops).  One fixed work-group size: PoCL generates (and caches) its work-group function per
        kernel AND size at first launch (0.1-0.3 s cold), so sizes that vary with the call would recompile."""
        if total <= 0:
            return
        kern = self.bk.programs.kernel(*ks)
        _enqueue(self.bk, kern, min(-(-total // LOCAL), MAX_GROUPS) * LOCAL, LOCAL, args)

    def launch_rows(self, ks, rows, n, args, block=None, grid_cap=1 << 16):
        """One work-group of LOCAL work-items per row (the kernel loops over rows by the number of groups;
        the local-memory trees need a power of two <= 256); ``block`` / ``grid_cap``: CUDA's launch shape."""
        if rows <= 0:
            return
        kern = self.bk.programs.kernel(*ks)
        _enqueue(self.bk, kern, min(rows, 1 << 16) * LOCAL, LOCAL, args)

    def runs(self, total, OW):
        """A work-item per whole output row (RW = OW, NR = 1; ``total // OW`` items): on CPU devices the
        per-output index arithmetic would cost more than the work."""
        return total // OW, OW, 1

    def matmul_into(self, dst, a, b):
        from .special import _matmul
        _matmul(self.bk, [dst], [a, b], {})

    def sort_order(self, x, d):
        return _sorted(self, x, d, False)[1]



# ---------------------------------------------------------------- scans, row norms
def _scan(kind):
    """cumsum / cumprod: a serial scan per (outer, inner) column."""
    def run(A, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        xc = A.contig(x)
        O, n, I = _ond(xc, attrs["dim"])
        res = A.work(out)
        A.launch(ck.scan_source(D, _dn(xc), _dn(out), kind), O * I, (xc, res, _i64(O), _i64(n), _i64(I)))
        A.done(out, res)
    return run


def norm_source(op, dn):
    name = f"neecl_row_{op}_{dn}"
    return name, D.prelude + D.block_helpers + ck.norm_rows_source(D, op, dn, name)


def _norm(rms):
    op = "rms_norm" if rms else "layer_norm"

    def run(A, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        n, eps = attrs["n"], attrs["eps"]
        w, b = gd.norm_params(ins, attrs, rms)
        xc = A.contig(x)
        w = A.same_dtype(w, x.dtype) if w is not None else None
        b = A.same_dtype(b, x.dtype) if b is not None else None
        res = A.work(out) if out.dtype == x.dtype else A.bk.empty(out.shape, _dt.from_numpy_dtype(x.dtype))
        rows = xc.size // n if n else 0
        A.launch_rows(norm_source(op, _dn(xc)), rows, n,
                      (xc, w if w is not None else xc, b if b is not None else xc, res, _i64(rows), _i64(n),
                       np.float64(eps), _i32(w is not None), _i32(b is not None)))
        A.done(out, res)
    return run


# ---------------------------------------------------------------- sorting, nonzero
def _sorted(A, x, d, desc):
    """(values, int64 indices) of ``x`` stably sorted along ``d`` (the CPU's order), contiguous."""
    xc = A.contig(x)
    O, n, I = _ond(xc, d)
    vals = A.bk.empty(xc.shape, _dt.from_numpy_dtype(xc.dtype))
    idx = A.bk.empty(xc.shape, _dt.int64)
    tmp = A.bk.empty(xc.shape, _dt.int64)
    A.launch(ck.sort_source(D, _dn(xc)), O * I, (xc, vals, idx, tmp, _i64(O), _i64(n), _i64(I), _i32(bool(desc))))
    return vals, idx


def _sort(A, outs, ins, attrs):
    x = ins[0]
    if x.size == 0:
        return
    v, i = _sorted(A, x, attrs["dim"], attrs["descending"])
    A.bk.copy_(outs[0], v)
    A.bk.copy_(outs[1], i)


def _topk(A, outs, ins, attrs):
    """The first ``k`` of the stable sort (descending for ``largest``)."""
    x, vals, inds = ins[0], outs[0], outs[1]
    if vals.size == 0:
        return
    d = attrs["dim"] % max(x.ndim, 1)
    v, i = _sorted(A, x, d, attrs["largest"])
    shape = tuple(vals.shape)
    A.bk.copy_(vals, A.bk.as_strided(v, shape, v.estrides, 0))
    A.bk.copy_(inds, A.bk.as_strided(i, shape, i.estrides, 0))


def _nonzero(A, outs, ins, attrs):
    """Stream compaction (:func:`..gpu_drivers.chunk_offsets`), the coordinates of each entry."""
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    xc = A.contig(x)
    cnt, nch = gd.chunk_offsets(A, xc)
    shape = A.bk.from_host(np.array(xc.shape, np.int64))
    res = A.work(out)
    A.launch(ck.nonzero_source(D, _dn(xc)), nch, (xc, res, cnt, shape, _i64(xc.size), _i64(CHUNK), _i32(xc.ndim)))
    A.done(out, res)


# ---------------------------------------------------------------- advanced indexing, index_put
def _index(A, outs, ins, attrs):
    """Advanced indexing ``x[key]``: the index tensors are read back and turned into ONE flat int64
    offset per result entry on the host (index tensors wrapped mod the dim size: the frontend
    range-checked them; masks through ``np.nonzero``), then one gather on the device
    (:func:`..gpu_drivers.index_gather`)."""
    x, idx = ins[0], ins[1:]
    out = outs[0]
    if out.size == 0:
        return
    parts = []
    for d, c, t in zip(attrs["dims"], attrs["ncons"], idx):
        h = A.bk.to_host(t)
        if h.dtype == np.bool_:
            coords = np.nonzero(h)
            parts += [(d + q, coords[q]) for q in range(c)]
        else:
            parts.append((d, np.remainder(h.astype(np.int64), x.shape[d])))

    def offsets(parts, cst):
        f = None
        for d, a in parts:
            term = a * int(cst[d])
            f = term if f is None else f + term
        return A.bk.from_host(np.ascontiguousarray(np.asarray(f, dtype=np.int64)))
    gd.index_gather(A, x, parts, out, offsets)


def _index_put(A, outs, ins, attrs):
    """``target[key] = value`` (``+=`` with accumulate) in place: the element offsets of ``target[key]``
    are worked out on the host from the (read back) index tensors (numpy's advanced-indexing rules,
    O(target size) host memory), then ONE device thread writes them in order (the CPU's semantics for
    duplicate positions: the last wins, accumulation adds all) straight into the target's storage."""
    from ..cpu.kernels.indexing import _key
    bk = A.bk
    o = outs[0]
    val, idx = ins[1], ins[2:]
    if o.size == 0:
        return
    o.check_writeable("index_put_")
    key = _key(o.ndim, attrs["dims"], attrs["ncons"], [bk.to_host(t) for t in idx])
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
    v = A.contig(bk.as_strided(val, pos.shape, vst, 0))
    whole = CLArray(o.storage, (1,), (1,), 0, o.dtype, o.writeable)     # positions are storage offsets
    A.launch(ck.index_put_source(D, _dn(o), bool(attrs["accumulate"])), 1,
             (whole, bk.from_host(pos.reshape(-1)), v, _i64(pos.size)))


# ---------------------------------------------------------------- embedding_renorm_, unique
def _embedding_renorm(A, outs, ins, attrs):
    """In place: the unique indices (read back: small) range-checked like the CPU kernel, then one
    thread per row computes its float64 norm and scales it when above ``max_norm``."""
    w = outs[0]
    ii = np.unique(A.bk.to_host(ins[1]).astype(np.int64).reshape(-1))
    V = w.shape[0]
    if ii.size and (ii[0] < 0 or ii[-1] >= V):
        raise gd._embedding_range_error(int(ii[0] if ii[0] < 0 else ii[-1]), V)
    if ii.size == 0 or w.size == 0:
        return
    p = float(attrs["norm_type"])
    kind = 0 if p == 2.0 else 1 if p == float("inf") else 2 if p == float("-inf") else 3 if p == 0 else 4
    res = A.contig(w)
    A.launch(ck.renorm_rows_source(D, _dn(res)), ii.size,
             (res, A.bk.from_host(ii), _i64(ii.size), _i64(w.shape[1]), np.float64(attrs["max_norm"]),
              np.float64(p), _i32(kind)))
    A.done(w, res)


def _groups(A, flags, perm, inv, cnt, u):
    """From group-start ``flags`` (n bools) and the sort permutation ``perm``: the running group number
    (the scan kernel), the starts by stream compaction, then inverse indices and counts (one kernel);
    returns (starts, chunk offsets, chunks)."""
    n = flags.size
    cum = A.bk.empty((n,), _dt.int64)
    A.launch(ck.scan_source(D, "bool", "int64", "cumsum"), n, (flags, cum, _i64(1), _i64(n), _i64(1)))
    cnt0, nch = gd.chunk_offsets(A, flags)
    starts = A.bk.empty((u, 1), _dt.int64)
    A.launch(ck.nonzero_source(D, "bool"), nch,
             (flags, starts, cnt0, A.bk.from_host(np.array([n], np.int64)), _i64(n), _i64(CHUNK), _i32(1)))
    ires, cres = A.work(inv), A.work(cnt)
    A.launch(ck.unique_finish_source(D), n, (perm, cum, starts, ires, cres, _i64(n), _i64(u)))
    A.done(inv, ires)
    A.done(cnt, cres)
    return starts, cnt0, nch


def _unique_sorted(A, outs, ins, attrs):
    """From the sorted values (this backend's sort) and their permutation: group-start flags (the
    generated ``ne`` of neighbours), then :func:`_groups`, the unique values by stream compaction."""
    bk = A.bk
    s, perm = ins
    vals, inv, cnt = outs
    n = s.shape[0]
    if n == 0:
        return
    sc = A.contig(s)
    flags = bk.empty((n,), _dt.bool_)
    bk.fill_(bk.as_strided(flags, (1,), (1,), 0), 1)
    if n > 1:
        A.ew("ne", bk.as_strided(flags, (n - 1,), (1,), 1),
             [bk.as_strided(sc, (n - 1,), (1,), 1), bk.as_strided(sc, (n - 1,), (1,), 0)])
    _starts, cnt0, nch = _groups(A, flags, A.same_dtype(perm, np.dtype(np.int64)), inv, cnt, vals.shape[0])
    vres = A.work(vals)
    A.launch(ck.masked_source(D, sc.itemsize, False), nch, (flags, sc, vres, cnt0, _i64(n), _i64(CHUNK)))
    A.done(vals, vres)


def _unique_dim(A, outs, ins, attrs):
    """unique slices along ``dim``: x as contiguous rows (n, m) with the dim first; one thread sorts
    the rows (stable lexicographic merge sort) and flags group starts; then :func:`_groups` and one
    gather of each group's first row."""
    bk = A.bk
    x = ins[0]
    vals, inv, cnt = outs
    d = attrs["dim"]
    n = x.shape[d]
    if n == 0:
        return
    perm = [d] + [q for q in range(x.ndim) if q != d]
    xm = A.contig(bk.as_strided(x, tuple(x.shape[q] for q in perm), tuple(x.estrides[q] for q in perm), 0))
    m = xm.size // n
    u = vals.shape[d]
    order, tmp = bk.empty((n,), _dt.int64), bk.empty((n,), _dt.int64)
    flags = bk.empty((n,), _dt.bool_)
    A.launch(ck.unique_rows_source(D, _dn(xm)), 1, (xm, order, tmp, flags, _i64(n), _i64(m)))
    starts, _cnt0, _nch = _groups(A, flags, order, inv, cnt, u)
    first = bk.empty((u,), _dt.int64)
    A.launch(ck.take_first_source(D), u, (order, starts, first, _i64(u)))
    rows = bk.empty((u,) + tuple(xm.shape[1:]), _dt.from_numpy_dtype(xm.dtype))
    gd.take3(A, xm, first, rows, n, u, m, 0)
    # rows is (u, other dims in order): write it through a permuted view of vals
    vv = bk.as_strided(vals, tuple(vals.shape[q] for q in perm), tuple(vals.estrides[q] for q in perm), 0)
    bk.copy_(vv, rows)


# ---------------------------------------------------------------- einsum: views, sums and matmuls
def _perm(A, labels, a, order):
    """``a`` (one dim per label) viewed with its dims in ``order``."""
    return A.bk.as_strided(a, tuple(a.shape[labels.index(c)] for c in order),
                           tuple(a.estrides[labels.index(c)] for c in order), 0)


def _unique_labels(A, sub, a):
    """A repeated label (``ii``) is the diagonal: one dim whose stride is the sum of the repeats'."""
    labels, shape, strides = "", [], []
    for c, n, st in zip(sub, a.shape, a.estrides):
        if c in labels:
            strides[labels.index(c)] += st
        else:
            labels += c
            shape.append(n)
            strides.append(st)
    return labels, A.bk.as_strided(a, tuple(shape), tuple(strides), 0)


def _sum_out(A, labels, a, keep):
    """Sum over the labels not in ``keep`` (this backend's reduction kernel, accumulating in float64 /
    int64, stored in ``a``'s dtype)."""
    from .special import _reduce
    dims = [d for d, c in enumerate(labels) if c not in keep]
    if not dims:
        return labels, a
    kept = "".join(c for c in labels if c in keep)
    r = A.bk.empty(tuple(a.shape[labels.index(c)] for c in kept), _dt.from_numpy_dtype(a.dtype))
    _reduce("sum")(A.bk, [r], [a], {"dims": tuple(dims), "keepdim": False})
    return kept, r


def _contract(A, la, a, lb, b, rest):
    """Two operands into one: labels only one side needs summed first, then ONE batched matmul
    (batch labels, a's kept labels x contracted, contracted x b's kept labels)."""
    la, a = _sum_out(A, la, a, set(lb) | set(rest))
    lb, b = _sum_out(A, lb, b, set(la) | set(rest))
    batch = [c for c in la if c in lb and c in rest]
    con = [c for c in la if c in lb and c not in rest]
    ka = [c for c in la if c not in lb]
    kb = [c for c in lb if c not in la]
    size = {c: a.shape[la.index(c)] for c in la}
    size.update({c: b.shape[lb.index(c)] for c in lb})
    Bt, I, K, J = (_prod(size[c] for c in g) for g in (batch, ka, con, kb))
    am = A.contig(_perm(A, la, a, batch + ka + con))
    bm = A.contig(_perm(A, lb, b, batch + con + kb))
    r = A.bk.empty((Bt, I, J), _dt.from_numpy_dtype(a.dtype))
    A.matmul_into(r, A.bk.as_strided(am, (Bt, I, K), (I * K, K, 1), 0),
                  A.bk.as_strided(bm, (Bt, K, J), (K * J, J, 1), 0))
    labels = "".join(batch + ka + kb)
    shape = tuple(size[c] for c in labels)
    return labels, A.bk.as_strided(r, shape, _cstrides(shape), 0)


def _einsum(A, outs, ins, attrs):
    """An explicit equation (``ab,bc->ac``; the frontend expanded ellipses and broadcast sizes): each
    operand's repeated labels become diagonal views, operands are contracted left to right (sums, then
    a batched matmul on this backend's kernel), the result permuted into ``out``."""
    out = outs[0]
    if out.size == 0:
        return
    lhs, rhs = attrs["equation"].split("->")
    terms = [_unique_labels(A, sub, a) for sub, a in zip(lhs.split(","), ins)]
    while len(terms) > 1:
        (la, a), (lb, b) = terms[0], terms[1]
        rest = "".join(lab for lab, _ in terms[2:]) + rhs
        terms = [_contract(A, la, a, lb, b, rest)] + terms[2:]
    labels, a = _sum_out(A, *terms[0], set(rhs))
    A.bk.copy_(out, _perm(A, labels, a, rhs))


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


def _einsum_claims(backend, dtypes):
    if dtypes[0].name not in ("float16", "float32", "float64", "int32", "int64"):
        return f"opencl einsum runs on the matmul kernel: float16/32/64, int32/int64, not {dtypes[0].name}"
    return None


_CLAIM_FNS = {
    "conv2d": _floats_same("conv2d"), "conv_transpose2d": _floats_same("conv_transpose2d", True),
    "col2im": _floats("col2im", True), "avg_pool2d": _floats("avg_pool2d", True),
    "adaptive_avg_pool2d": _floats("adaptive_avg_pool2d", True),
    "upsample_bilinear2d": _floats("upsample_bilinear2d"), "group_norm": _floats("group_norm", True),
    "index_select": _index_claims("index_select"), "gather": _index_claims("gather"),
    "embedding": _index_claims("embedding"), "take": _index_claims("take"),
    "repeat_interleave": _index_claims("repeat_interleave"), "index_reduce_dim": _scatter_claims,
    "scatter": _scatter_claims, "index": _adv_claims, "searchsorted": _searchsorted_claims,
    "masked_select": _mask_claims("masked_select"), "masked_scatter": _mask_claims("masked_scatter"),
    "index_put": _index_put_claims, "batch_norm_stats": _floats("batch_norm_stats", True),
    "nll_loss_terms": _floats("nll_loss_terms", True), "einsum": _einsum_claims,
    "embedding_renorm_": _floats("embedding_renorm_", True),
    "cumsum": _scan_claims, "cumprod": _scan_claims,
    "layer_norm": _floats("layer_norm", True), "rms_norm": _floats("rms_norm", True),
}


def table() -> dict:
    """``{op: fn(backend, outs, ins, attrs)}``: the shared drivers (:mod:`..gpu_drivers`) and OpenCL's own."""
    t = gd.bind(CLAdapter, {
        "cumsum": _scan("cumsum"), "cumprod": _scan("cumprod"), "layer_norm": _norm(False), "rms_norm": _norm(True),
        "sort": _sort, "topk": _topk, "nonzero": _nonzero, "index": _index, "index_put": _index_put,
        "einsum": _einsum, "embedding_renorm_": _embedding_renorm, "unique_sorted": _unique_sorted,
        "unique_dim": _unique_dim})
    for k, c in _CLAIM_FNS.items():
        t[k].claims = c
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
