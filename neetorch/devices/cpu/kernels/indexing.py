"""CPU kernels for the indexing ops (``neetorch/ops/indexing.py``).

Indices arrive validated (the frontends check every range), so kernels may use
numpy's non-checking modes.  numpy's fancy indexing, ``np.take`` (with ``out=``) and
``ufunc.at`` (fast since numpy 1.25) are the fast paths here; gather and the
scatter family use one small Numba loop over a flattened (outer, dim, inner) view
for the common case of a contiguous index.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .. import kernel, threads

# ---------------------------------------------------------------- helpers


def _key(ndim, dims, ncons, idx):
    """numpy index tuple: ``idx[k]`` at dim ``dims[k]`` (consuming ``ncons[k]`` dims), ``:`` elsewhere."""
    starts = {d: k for k, d in enumerate(dims)}
    key, d = [], 0
    while d < ndim:
        k = starts.get(d)
        if k is None:
            key.append(slice(None))
            d += 1
        else:
            key.append(idx[k])
            d += ncons[k]
    return tuple(key)


def _along_key(index: np.ndarray, d: int):
    """Fancy-index tuple addressing ``a[..., index[i,j,k], ...]`` positions for gather/scatter along ``d``."""
    nd = index.ndim
    key = []
    for k in range(nd):
        if k == d:
            key.append(index)
        else:
            sh = [1] * nd
            sh[k] = index.shape[k]
            key.append(np.arange(index.shape[k]).reshape(sh))
    return tuple(key)


# ---------------------------------------------------------------- index / index_put
@kernel("index")
def index_kernel(backend, outs, ins, attrs):
    x, idx = ins[0], ins[1:]
    out = outs[0]
    dims, ncons = attrs["dims"], attrs["ncons"]
    if out.size == 0:
        return
    if len(idx) == 1 and out.flags.c_contiguous:
        d, m = dims[0], idx[0]
        if m.dtype == np.bool_:
            # one mask over dims d..d+k: np.compress on the merged dims (much faster than a[mask])
            x2 = x.reshape(x.shape[:d] + (-1,) + x.shape[d + m.ndim:])
            np.compress(m.reshape(-1), x2, axis=d, out=out)
        elif m.ndim >= 1:
            np.take(x, m, axis=d, out=out, mode="wrap")  # validated: wrap == negative indexing
        else:
            out[...] = x[_key(x.ndim, dims, ncons, idx)]
        return
    out[...] = x[_key(x.ndim, dims, ncons, idx)]


@kernel("index_put")
def index_put_kernel(backend, outs, ins, attrs):
    o = outs[0]
    val, idx = ins[1], ins[2:]
    key = _key(o.ndim, attrs["dims"], attrs["ncons"], idx)
    if attrs["accumulate"]:
        np.add.at(o, key, val)
    else:
        o[key] = val


# ---------------------------------------------------------------- gather / scatter
@njit(cache=True, nogil=True)
def _gather3(x, xs0, xs1, idx, out, a0, a1):
    # x: flat C-contiguous buffer (outer stride xs0, dim stride xs1, inner stride 1);
    # idx/out: C-contiguous (outer, k, inner); rows a0..a1 of the outer dim
    no, nk, ni = idx.shape
    if ni == 1:
        for a in range(a0, a1):
            base = a * xs0
            for b in range(nk):
                out[a, b, 0] = x[base + idx[a, b, 0] * xs1]
    else:
        for a in range(a0, a1):
            base = a * xs0
            for b in range(nk):
                for c in range(ni):
                    out[a, b, c] = x[base + idx[a, b, c] * xs1 + c]


@njit(cache=True, nogil=True)
def _scatter3(out, os0, os1, idx, src, add):
    # out[a, idx[a, b, c], c] = / += src[a, b, c] on a flat C-contiguous out; serial (duplicates accumulate)
    no, nk, ni = idx.shape
    for a in range(no):
        base = a * os0
        for b in range(nk):
            for c in range(ni):
                p = base + idx[a, b, c] * os1 + c
                if add:
                    out[p] += src[a, b, c]
                else:
                    out[p] = src[a, b, c]


@njit(cache=True, nogil=True)
def _index_add3(out, idx, src, alpha):
    # out[a, idx[b], c] += alpha * src[a, b, c]; out/src C-contiguous (outer, n|k, inner); serial
    no, nk, ni = src.shape
    for a in range(no):
        for b in range(nk):
            j = idx[b]
            for c in range(ni):
                out[a, j, c] += alpha * src[a, b, c]


_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_ADD_OK = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.int32))


def _as3(shape, d):
    o = 1
    for s in shape[:d]:
        o *= s
    i = 1
    for s in shape[d + 1:]:
        i *= s
    return o, shape[d], i


def _covers(idx, x, d):
    return all(idx.shape[k] == x.shape[k] for k in range(x.ndim) if k != d)


@kernel("gather")
def gather_kernel(backend, outs, ins, attrs):
    x, idx = ins
    out = outs[0]
    d = attrs["dim"]
    if out.size == 0:
        return
    if idx.dtype == np.int64 and x.dtype.itemsize in _BITS and _covers(idx, x, d):
        # pure data movement: move the bits as unsigned ints (4 specializations serve every dtype)
        x = np.ascontiguousarray(x)
        idx = np.ascontiguousarray(idx)
        bits = _BITS[x.dtype.itemsize]
        o, n, i = _as3(x.shape, d)
        _, k, _ = _as3(idx.shape, d)
        xf, i3, o3 = x.reshape(-1).view(bits), idx.reshape(o, k, i), out.reshape(o, k, i).view(bits)
        nt = threads.NUM_THREADS
        if out.size >= threads.PARALLEL_THRESHOLD and nt > 1 and o >= 2 * nt:
            threads.run_parallel(lambda r: _gather3(xf, n * i, i, i3, o3, r[0], r[1]), threads.split(o, nt))
        else:
            _gather3(xf, n * i, i, i3, o3, 0, o)
        return
    xs = x[tuple(slice(0, n) if k != d else slice(None) for k, n in enumerate(idx.shape))]
    out[...] = np.take_along_axis(xs, idx.astype(np.intp, copy=False), axis=d)


@kernel("scatter")
def scatter_kernel(backend, outs, ins, attrs):
    x, idx, src = ins
    out = outs[0]
    np.copyto(out, x)
    d, red, inc = attrs["dim"], attrs["reduce"], attrs["include_self"]
    if (red is None or (red == "sum" and inc and out.dtype in _ADD_OK)) and idx.dtype == np.int64 \
            and out.dtype.itemsize in _BITS and _covers(idx, out, d):
        o, n, i = _as3(out.shape, d)
        _, k, _ = _as3(idx.shape, d)
        i3 = np.ascontiguousarray(idx).reshape(o, k, i)
        s3 = np.ascontiguousarray(src, dtype=out.dtype).reshape(o, k, i) if src.strides.count(0) != src.ndim \
            else np.broadcast_to(src.reshape(-1)[:1].astype(out.dtype), src.shape).copy().reshape(o, k, i)
        of = out.reshape(-1)
        if red is None:  # assignment moves bits: 4 specializations serve every dtype
            bits = _BITS[out.dtype.itemsize]
            _scatter3(of.view(bits), n * i, i, i3, s3.view(bits), False)
        else:
            _scatter3(of, n * i, i, i3, s3, True)
        return
    key = _along_key(idx, d)
    if red is None:
        out[key] = src
        return
    if red == "sum":
        if not inc:
            out[key] = 0
        np.add.at(out, key, src)
    elif red == "prod":
        if not inc:
            out[key] = 1
        np.multiply.at(out, key, src)
    elif red in ("amax", "amin"):
        if not inc:
            out[key] = src  # some element of the group; the reduction below fixes the rest
        (np.maximum if red == "amax" else np.minimum).at(out, key, src)
    elif red == "mean":
        acc_dt = {"f": np.float64, "c": np.complex128}.get(out.dtype.kind, np.int64)
        acc = out.astype(acc_dt)
        cnt = np.ones(out.shape, np.int64) if inc else np.zeros(out.shape, np.int64)
        if not inc:
            acc[key] = 0
        np.add.at(acc, key, src.astype(acc_dt))
        np.add.at(cnt, key, 1)
        touched = np.zeros(out.shape, bool)
        touched[key] = True
        cnt = np.maximum(cnt, 1)
        if out.dtype.kind in "fc":
            res = acc / cnt
        elif out.dtype.kind == "b":
            res = acc // cnt
        else:
            res = np.floor_divide(acc, cnt)
        np.copyto(out, res, where=touched, casting="unsafe")
    else:
        raise RuntimeError(f"scatter: unknown reduce {red!r}")


# ---------------------------------------------------------------- index_select / index_add / copy / fill
@njit(cache=True, nogil=True)
def _gather_last(x, idx, out, r0, r1):
    """out[r, j] = x[r, idx[j]] for rows [r0, r1) (idx inside [0, x.shape[1]): the caller's)."""
    m = idx.shape[0]
    for r in range(r0, r1):
        for j in range(m):
            out[r, j] = x[r, idx[j]]


# a last-dim index_select of at least this many elements runs _gather_last (numpy's take copies element by element
# through its generic loop: a bilinear Resize's 21 x 224 x 28 -> 224 columns, 1 thread, 530 -> ~110 us); split over
# the threads from _GATHER_PAR elements
_GATHER_MIN = 1 << 14
_GATHER_PAR = 1 << 18
_GATHER_AS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _index_select_last(x, idx, out) -> bool:
    """index_select along x's last dim by the row kernel (C-contiguous operands of a numeric dtype); False: not
    taken."""
    u = _GATHER_AS.get(x.dtype.itemsize)
    if x.ndim == 0 or out.size < _GATHER_MIN or not (x.flags.c_contiguous and out.flags.c_contiguous) or \
            x.dtype != out.dtype or x.dtype.kind not in "fiub" or x.shape[-1] == 0 or u is None:
        return False
    n = x.shape[-1]
    i = np.remainder(idx, n).astype(np.int64, copy=False).reshape(-1)     # (np.take's mode="wrap")
    # moved as unsigned words of the element's size (one kernel per size: float16, bool and the rest alike)
    x2, o2 = x.reshape(-1, n).view(u), out.reshape(-1, i.shape[0]).view(u)
    R = x2.shape[0]
    if out.size >= _GATHER_PAR and threads.NUM_THREADS > 1 and R > 1:
        threads.run_parallel(lambda c: _gather_last(x2, i, o2, c[0], c[1]), threads.split(R, threads.NUM_THREADS))
    else:
        _gather_last(x2, i, o2, 0, R)
    return True


@kernel("index_select")
def index_select_kernel(backend, outs, ins, attrs):
    x, idx = ins
    out = outs[0]
    if out.size == 0:
        return
    if attrs["dim"] % max(x.ndim, 1) == x.ndim - 1 and _index_select_last(x, idx, out):
        return
    if out.flags.c_contiguous:
        np.take(x, idx, axis=attrs["dim"], out=out, mode="wrap")
    else:
        out[...] = np.take(x, idx, axis=attrs["dim"])


@kernel("index_reduce_dim")
def index_reduce_dim_kernel(backend, outs, ins, attrs):
    x, idx, src = ins
    out = outs[0]
    np.copyto(out, x)
    key = (slice(None),) * attrs["dim"] + (idx,)
    mode = attrs["mode"]
    if mode == "add":
        alpha = attrs["alpha"]
        if out.dtype.kind == "u" and isinstance(alpha, (int, np.integer)) and alpha < 0:
            alpha = int(alpha) % (1 << (8 * out.dtype.itemsize))    # uint8 alpha=-1: 255 (wrapping, as torch)
        if out.dtype in _ADD_OK and idx.dtype == np.int64:
            d = attrs["dim"]
            o, n, i = _as3(out.shape, d)
            k = idx.shape[0]
            a = out.dtype.type(alpha)
            _index_add3(out.reshape(o, n, i), np.ascontiguousarray(idx),
                        np.ascontiguousarray(src, dtype=out.dtype).reshape(o, k, i), a)
            return
        if alpha != 1:
            src = (src * alpha).astype(out.dtype)
        np.add.at(out, key, src)
    else:  # copy / fill
        out[key] = src


# ---------------------------------------------------------------- take / masked / nonzero
@kernel("take")
def take_kernel(backend, outs, ins, attrs):
    x, idx = ins
    out = outs[0]
    if out.size == 0:
        return
    flat = x.reshape(-1)
    if out.flags.c_contiguous:
        np.take(flat, idx, out=out, mode="wrap")
    else:
        out[...] = np.take(flat, idx, mode="wrap")


@kernel("masked_select")
def masked_select_kernel(backend, outs, ins, attrs):
    x, m = ins
    if outs[0].size:
        np.compress(m.reshape(-1), x.reshape(-1), out=outs[0])


@kernel("masked_scatter")
def masked_scatter_kernel(backend, outs, ins, attrs):
    x, m, src = ins
    out = outs[0]
    np.copyto(out, x)
    n = attrs["count"]
    if n:
        out[m] = src.reshape(-1)[:n]


@kernel("nonzero")
def nonzero_kernel(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    out[...] = np.argwhere(ins[0])


# ---------------------------------------------------------------- sort / topk
def _argsort(x, d, descending):
    if not descending:
        return np.argsort(x, axis=d, kind="stable")
    # stable descending: sort the reversed array ascending, reverse the order back (NaN first, ties in order)
    idx = np.argsort(np.flip(x, d), axis=d, kind="stable")
    idx = np.flip(idx, d)
    return (x.shape[d] - 1) - idx


# torch's CPU order among equal values (ops/_stl_order.py): sort(stable=False) is std::sort's (except the 1-D
# ascending integer sorts from GRAIN_SIZE elements, fbgemm's stable radix sort), topk std::partial_sort's or
# std::nth_element's (+ std::sort of the first k - 1), kthvalue TH's quickselect's, mode std::sort's.  Rows without
# ties have one order whatever the algorithm: small sorts and topk check numpy's result for ties and run the
# emulation on tied rows only (its plain Python form compiles nothing); large sorts, kthvalue and mode run it on
# every row (compiled: faster than numpy's stable argsort).
_RADIX_KINDS = frozenset(np.dtype(t) for t in (np.uint8, np.int8, np.int16, np.int32, np.int64))
_GRAIN = 32768


def _tied(sv):
    """Rows (2-D, sorted along the last axis) with two neighbours equal under torch's comparators (NaN == NaN)."""
    eq = sv[:, 1:] == sv[:, :-1]
    if sv.dtype.kind == "f" or sv.dtype.name == "bfloat16":
        nan = np.isnan(sv)
        eq |= nan[:, 1:] & nan[:, :-1]
    return eq.any(axis=1)


def _rows2(a, d):
    """``a`` with axis ``d`` last, as 2-D rows (a view where it can)."""
    if d != a.ndim - 1 and d != -1:
        a = np.moveaxis(a, d, -1)
    return a.reshape(-1, a.shape[-1])


def _torch_rows(x, d, idx, tied, op, k, descending):
    """``idx`` (rows with ``d`` last, 2-D) with its ``tied`` rows replaced by torch's order (ops/_stl_order)."""
    from ....ops import _stl_order as S
    rows = np.flatnonzero(tied)
    if rows.size:
        idx = np.array(idx, copy=True)
        x2 = _rows2(x, d)
        keys = S.keys_of(x2 if rows.size == x2.shape[0] else x2[rows], descending)
        idx[rows] = S.run_rows(keys, op, k)
    return idx


def _from_rows(idx2, shape, d):
    """The inverse of :func:`_rows2` (``shape``: the result's shape with ``d`` in place)."""
    if d == len(shape) - 1 or d == -1:
        return idx2.reshape(shape)
    sh = list(shape)
    sh.append(sh.pop(d))
    return np.moveaxis(idx2.reshape(sh), -1, d)


@kernel("sort")
def sort_kernel(backend, outs, ins, attrs):
    x = ins[0]
    if x.size == 0:
        return
    d, desc = attrs["dim"], attrs["descending"]
    if (attrs.get("stable", True) or x.shape[d] < 2 or x.strides[d] == 0
            or (x.ndim == 1 and x.dtype in _RADIX_KINDS and x.size >= _GRAIN and not desc)):
        # (torch: an expanded dim (stride 0) keeps 0, 1, 2, ...; the radix sort is stable)
        idx = _argsort(x, d, desc)
    else:
        from ....ops import _stl_order as S
        x2 = _rows2(x, d)
        if not S.small(*x2.shape):     # (the compiled emulation: faster than numpy's stable sort)
            idx = _from_rows(S.run_rows(S.keys_of(x2, desc), S.SORT), x.shape, d)
        else:
            idx = _argsort(x, d, desc)
            i2 = _rows2(idx, d)
            tied = _tied(np.take_along_axis(x2, i2, 1))
            if tied.any():
                idx = _from_rows(_torch_rows(x, d, i2, tied, S.SORT, 0, desc), x.shape, d)
    outs[1][...] = idx
    outs[0][...] = np.take_along_axis(x, idx, d)


def _topk_np(x, k, d, largest):
    """Indices of the ``k`` first along ``d`` (numpy's selection: the right values, equal ones in no set order)."""
    n = x.shape[d]
    if 4 * k < n and x.dtype != np.bool_:
        # partial selection first, then a stable sort of the k survivors
        part = np.argpartition(x, n - k if largest else k - 1, axis=d)
        sel = part.take(np.arange(n - k, n) if largest else np.arange(k), axis=d)
        sel = np.sort(sel, axis=d)
        vals = np.take_along_axis(x, sel, d)
        o = _argsort(vals, d, largest)
        return np.take_along_axis(sel, o, d)
    return _argsort(x, d, largest).take(np.arange(k), axis=d)


@njit(cache=True, nogil=True)
def _topk_scan(x2, k, largest, out):
    """out[r, :k] = indices of the ``k`` first of row r of ``x2`` in (value, index) order: equal values by index,
    NaN largest (all NaNs equal), -0.0 == +0.0 (``v != v``: False for integers).  One pass per row keeping the k
    best in order: a value enters only when strictly better than the k-th (an equal one, met later, is after it)."""
    R, n = x2.shape
    bv = np.empty(k, x2.dtype)
    bn = np.empty(k, np.bool_)
    bi = np.empty(k, np.int64)
    for r in range(R):
        cnt = 0
        for i in range(n):
            v = x2[r, i]
            vn = v != v
            # the position among the cnt kept where v goes: after every kept one it is not strictly better than
            pos = cnt
            while pos > 0:
                w = x2.dtype.type(bv[pos - 1])
                wn = bn[pos - 1]
                if largest:
                    better = (vn and not wn) or (not vn and not wn and v > w)
                else:
                    better = (not vn and wn) or (not vn and not wn and v < w)
                if not better:
                    break
                pos -= 1
            if pos >= k:
                continue
            last = cnt if cnt < k else k - 1
            j = last
            while j > pos:
                bv[j] = bv[j - 1]
                bn[j] = bn[j - 1]
                bi[j] = bi[j - 1]
                j -= 1
            bv[pos] = v
            bn[pos] = vn
            bi[pos] = i
            if cnt < k:
                cnt += 1
        for j in range(k):
            out[r, j] = bi[j]


# a selection this small keeps its k best in one pass (_topk_scan; insertions cost up to k moves each) rather than
# numpy's partition and sorts (~15 calls: 76 us for 5 of 2000 values)
TOPK_SCAN_MAX_K = 64
_SCAN_KINDS = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                                              np.uint8, np.uint16, np.uint32))


def _topk_rows(x, k, d, largest):
    """Indices (2-D rows, ``d`` last) of the ``k`` first of ``x`` along ``d`` in (value, index) order: equal values
    by index (ONNX TopK's rule, onnxruntime's too), NaN largest."""
    from ....ops import _stl_order as S
    n = x.shape[d]
    if k <= TOPK_SCAN_MAX_K and x.dtype in _SCAN_KINDS:
        x2 = _rows2(x, d)
        out = np.empty((x2.shape[0], k), np.int64)
        _topk_scan(x2, k, bool(largest), out)
        return out
    keys = S.keys_of(_rows2(x, d), largest)     # (smaller key: earlier)
    if not 4 * k < n:
        return np.argsort(keys, axis=1, kind="stable")[:, :k]
    # partial selection first: every key below the k-th, then the first equal ones by index; a stable sort of those
    thr = np.take_along_axis(keys, np.argpartition(keys, k - 1, axis=1)[:, k - 1:k], 1)
    better, eq = keys < thr, keys == thr
    sel = better | (eq & (np.cumsum(eq, axis=1) <= k - better.sum(axis=1, keepdims=True)))
    cols = np.nonzero(sel)[1].reshape(-1, k)
    return np.take_along_axis(cols, np.argsort(np.take_along_axis(keys, cols, 1), axis=1, kind="stable"), 1)


def _select(x, d, attrs):
    """topk's kernel's other uses (CPU only, ops/indexing.kthvalue and ops/statistics.mode): ``attrs["select"]``
    ("kth", k): the index of the k-th smallest (TH's quickselect's among equal values); ("mode", 0): the index of
    torch's mode (std::sort by value, the last of the first longest run)."""
    from ....ops import _stl_order as S
    what, k = attrs["select"]
    x2 = _rows2(x, d)
    if what == "kth":
        return S.run_rows(S.keys_of(x2), S.KTH, k)
    if (x.dtype.kind == "f" or x.dtype.name == "bfloat16") and np.isnan(x2).any():
        # (mode's comparator is a plain <: a NaN is equal to everything, unlike in the keys' order)
        return S.run_rows(x2.astype(np.float64), S.MODE)
    return S.run_rows(S.keys_of(x2), S.MODE)


@kernel("topk")
def topk_kernel(backend, outs, ins, attrs):
    x = ins[0]
    k, d, largest = attrs["k"], attrs["dim"], attrs["largest"]
    if outs[0].size == 0:
        return
    if "select" in attrs:
        idx = _from_rows(_select(x, d, attrs), outs[1].shape, d)
    elif attrs.get("ties") != "torch":     # (ONNX TopK: equal values in index order)
        idx = _from_rows(_topk_rows(x, k, d, largest), outs[1].shape, d)
    else:
        from ....ops import _stl_order as S
        n = x.shape[d]
        if k * 64 <= n:
            op = S.TOPK_PARTIAL
        else:
            op = S.TOPK_NTH_SORTED if attrs.get("sorted", True) else S.TOPK_NTH
        if op == S.TOPK_NTH and k > 1:      # (nth_element's arrangement: every row)
            tied = np.ones(x.size // n, bool)
            i2 = np.zeros((tied.size, k), np.int64)
        else:   # one order unless two of the k + 1 first are equal
            k1 = min(k + 1, n)
            i2 = _topk_rows(x, k1, d, largest) if k1 <= TOPK_SCAN_MAX_K and x.dtype in _SCAN_KINDS else \
                _rows2(_topk_np(x, k1, d, largest), d)
            tied = _tied(np.take_along_axis(_rows2(x, d), i2, 1)) if k1 > 1 else np.zeros(i2.shape[0], bool)
            i2 = i2[:, :k]
        if tied.any():
            i2 = _torch_rows(x, d, i2, tied, op, k, largest)
        idx = _from_rows(np.ascontiguousarray(i2), outs[1].shape, d)
    outs[1][...] = idx
    outs[0][...] = np.take_along_axis(x, idx, d)


# ---------------------------------------------------------------- unique
@kernel("unique_sorted")
def unique_sorted_kernel(backend, outs, ins, attrs):
    s, perm = ins
    vals, inv, cnt = outs
    n = s.shape[0]
    if n == 0:
        return
    flags = np.empty(n, bool)
    flags[0] = True
    np.not_equal(s[1:], s[:-1], out=flags[1:])
    vals[...] = s[flags]
    grp = np.cumsum(flags) - 1
    inv[perm] = grp
    starts = np.flatnonzero(flags)
    cnt[...] = np.diff(np.append(starts, n))


@kernel("unique_dim")
def unique_dim_kernel(backend, outs, ins, attrs):
    x = ins[0]
    d = attrs["dim"]
    vals, inv, cnt = outs
    if x.shape[d] == 0:
        return
    m = np.moveaxis(x, d, 0)
    flat = m.reshape(m.shape[0], -1)
    u, first, i, c = np.unique(flat, axis=0, return_index=True, return_inverse=True, return_counts=True)
    vals[...] = np.moveaxis(np.take(m, first, axis=0), 0, d)
    inv[...] = i.reshape(-1)
    cnt[...] = c


# ---------------------------------------------------------------- searchsorted
def _searchsorted_1d(seq, vals, side):
    """np.searchsorted, or PyTorch's own binary search where the sequence holds NaNs: torch steps right while
    ``!(seq[mid] >= v)`` (``>`` for right), so a NaN probed on the way sends it right and the answer depends on
    the search path (numpy orders NaN last instead).  Same answers for a sequence without NaNs."""
    if seq.dtype.kind != "f" or not np.isnan(seq).any():
        return np.searchsorted(seq, vals, side=side)
    v = np.asarray(vals)
    n = seq.shape[0]
    lo = np.zeros(v.shape, np.int64)
    hi = np.full(v.shape, n, np.int64)
    while True:
        act = lo < hi
        if not act.any():
            return lo
        mid = lo + ((hi - lo) >> 1)
        e = seq[np.minimum(mid, n - 1)]
        with np.errstate(invalid="ignore"):
            go = ~(e > v) if side == "right" else ~(e >= v)
        lo = np.where(act & go, mid + 1, lo)
        hi = np.where(act & ~go, mid, hi)


@kernel("searchsorted")
def searchsorted_kernel(backend, outs, ins, attrs):
    seq, vals = ins
    out = outs[0]
    side = "right" if attrs["right"] else "left"
    if out.size == 0:
        return
    if seq.ndim == 1:
        out[...] = _searchsorted_1d(seq, vals, side)
        return
    s2 = seq.reshape(-1, seq.shape[-1])
    v2 = vals.reshape(-1, vals.shape[-1])
    o2 = out.reshape(-1, out.shape[-1])
    for r in range(s2.shape[0]):
        o2[r] = _searchsorted_1d(s2[r], v2[r], side)
