"""ONNX shape, data movement, indexing and constant-producing ops."""
from __future__ import annotations

import numpy as np

import neetorch as nee
from .lowering import op, onnx_np, LoweringError
from .loader import tensor_to_numpy


def _i64(ctx, vals):
    return ctx.const(np.asarray(vals, dtype=np.int64))


_CONST_VALUES: dict = {}   # id(TensorProto) -> (proto, its numpy value): a Loop body's Constants, once


@op("Constant")
def _constant(ctx, node):
    a = node.attrs
    if "value" in a:
        v = a["value"]
        e = _CONST_VALUES.get(id(v))
        if e is None or e[0] is not v:   # (ctx.const copies: the cached array is never handed out)
            if len(_CONST_VALUES) > 4096:
                _CONST_VALUES.clear()
            e = _CONST_VALUES[id(v)] = (v, tensor_to_numpy(v))
        return ctx.const(e[1])
    if "value_float" in a:
        return ctx.const(np.float32(a["value_float"]))
    if "value_floats" in a:
        return ctx.const(np.asarray(a["value_floats"], np.float32))
    if "value_int" in a:
        return ctx.const(np.int64(a["value_int"]))
    if "value_ints" in a:
        return ctx.const(np.asarray(a["value_ints"], np.int64))
    raise LoweringError(f"Constant {node.name}: unsupported value attribute {sorted(a)}")


@op("ConstantOfShape")
def _cos(ctx, node, shape):
    v = node.get("value")
    val = tensor_to_numpy(v).reshape(-1) if v is not None else np.zeros(1, np.float32)
    shp = tuple(ctx.ints(shape))
    return ctx.const(np.full(shp, val[0], dtype=val.dtype), own=True)


@op("Shape")
def _shape(ctx, node, x):
    s = list(x.shape)
    start, end = node.get("start", 0), node.get("end", None)
    s = s[start:end] if end is not None else s[start:]
    return _i64(ctx, s)


@op("Size")
def _size(ctx, node, x):
    return _i64(ctx, int(np.prod(tuple(x.shape), dtype=np.int64)))


@op("Reshape")
def _reshape(ctx, node, x, shape):
    shp = ctx.ints(shape)
    allowzero = node.get("allowzero", 0)
    out = []
    for i, s in enumerate(shp):
        if s == 0 and not allowzero:
            out.append(x.shape[i])
        else:
            out.append(s)
    if not out:
        return x.reshape(())
    # leading dims copied from the input (0 entries: batch, seq...) stay out of the recorded op: only the
    # rest is flattened / split (by the model's own constants), so a traced graph does not bake in the
    # sizes of dynamic dims and one trace serves a whole shape bucket
    k = 0
    while not allowzero and k < len(shp) and k < x.ndim - 1 and shp[k] == 0:
        k += 1
    if k and len(shp) > k and all(tuple(x.shape[:k])):
        # (a copied 0-size dim: the rest need not multiply up to the flattened tail; reshape checks the count)
        rest = [s if s == -1 else o for s, o in zip(shp[k:], out[k:])]
        y = x.flatten(k) if x.ndim - k > 1 else x
        if len(rest) == 1 and rest[0] in (-1, y.shape[k]):
            return y
        if rest.count(-1) <= 1 and all(s == -1 or s > 0 for s in rest):
            return y.unflatten(k, tuple(rest))
    return x.reshape(*out)


@op("Flatten")
def _flatten(ctx, node, x):
    axis = node.get("axis", 1)
    axis = axis % x.ndim if axis < 0 else axis
    shp = tuple(x.shape)
    a = int(np.prod(shp[:axis], dtype=np.int64))
    b = int(np.prod(shp[axis:], dtype=np.int64))
    # -1 for the leading part keeps the graph free of the (possibly dynamic) batch size
    return x.reshape(-1, b) if b > 0 and a > 0 else x.reshape(a, b)


@op("Transpose")
def _transpose(ctx, node, x):
    perm = node.get("perm") or list(range(x.ndim))[::-1]
    return x.permute(*perm) if x.ndim else x


def _axes(node, ax, n, repeat=False) -> list:
    """``ax`` normalized into [0, n); an axis out of range, or given twice unless ``repeat`` (Squeeze: once), is
    an error naming the node (as onnxruntime; out of range axes used to wrap around)."""
    out = []
    for a in ax:
        if not -n <= a < n:
            raise LoweringError(f"node {node.name} ({node.op_type}): axis {a} is out of range [{-n}, {n})")
        out.append(a % n)
    if len(set(out)) != len(out):
        if not repeat:
            raise LoweringError(f"node {node.name} ({node.op_type}): axes {list(ax)} name an axis twice")
        out = sorted(set(out))
    return out


@op("Squeeze")
def _squeeze(ctx, node, x, axes=None):
    ax = ctx.ints(axes) if axes is not None else node.get("axes")
    if ax is None:
        ax = [i for i, s in enumerate(x.shape) if s == 1]
    ax = _axes(node, ax, x.ndim, repeat=True)
    for a in ax:
        if x.shape[a] != 1:
            raise LoweringError(f"node {node.name} (Squeeze): dim {a} of the input {list(x.shape)} is not 1")
    for a in sorted(ax, reverse=True):
        x = x.squeeze(a)
    return x


@op("Unsqueeze")
def _unsqueeze(ctx, node, x, axes=None):
    ax = ctx.ints(axes) if axes is not None else node.get("axes")
    for a in sorted(_axes(node, ax, x.ndim + len(ax))):
        x = x.unsqueeze(a)
    return x


@op("Concat")
def _concat(ctx, node, *xs):
    xs = [x for x in xs if x is not None]
    axis = node.get("axis") % xs[0].ndim
    if len(xs) == 1:
        return xs[0]
    return nee.cat(xs, axis)


@op("Split")
def _split(ctx, node, x, split=None):
    axis = node.get("axis", 0) % x.ndim
    sizes = ctx.ints(split) if split is not None else node.get("split")
    n = x.shape[axis]
    if not sizes:
        k = node.get("num_outputs", node.nout)
        per = -(-n // k)
        sizes = [per] * (n // per) + ([n % per] if n % per else [])
        if len(sizes) < k:
            sizes += [0] * (k - len(sizes))
    elif sum(sizes) != n or min(sizes) < 0:
        raise LoweringError(f"Split: sizes {list(sizes)} do not add up to the input's dim {axis - x.ndim} of size {n} "
                            f"(input shape {list(x.shape)})")
    outs, start = [], 0
    for s in sizes:
        outs.append(x.narrow(axis, start, s))
        start += s
    return tuple(outs)


def _slice_dim(x, d, start, end, step):
    n = x.shape[d]
    if step > 0:
        start = max(0, min(n, start + n if start < 0 else start))
        end = max(0, min(n, end + n if end < 0 else end))
        if end <= start:
            return x.narrow(d, 0, 0)
        idx = [slice(None)] * x.ndim
        idx[d] = slice(start, end, step)
        return x[tuple(idx)]
    # negative step: reverse, then slice forward; the start clamps into [0, n-1] (ONNX's rule, onnxruntime: a
    # start before the first element starts at it), the end into [-1, n-1] (-1: through the first element)
    if n == 0:
        return x
    start = max(0, min(n - 1, start + n if start < 0 else start))
    end = max(-1, min(n - 1, end + n if end < 0 else end))
    if start <= end:
        return x.narrow(d, 0, 0)
    xf = x.flip(d)
    s2, e2 = n - 1 - start, n - 1 - end
    idx = [slice(None)] * x.ndim
    idx[d] = slice(s2, e2, -step)
    return xf[tuple(idx)]


@op("Slice")
def _slice(ctx, node, x, starts=None, ends=None, axes=None, steps=None):
    if starts is None:  # opset < 10: attributes
        st, en, ax, sp = node.get("starts"), node.get("ends"), node.get("axes"), None
    else:
        st, en, ax, sp = ctx.ints(starts), ctx.ints(ends), ctx.ints(axes), ctx.ints(steps)
    ax = ax or list(range(len(st)))
    sp = sp or [1] * len(st)
    big = 2 ** 62
    for s, e, a, p in zip(st, en, ax, sp):
        s = max(-big, min(big, s))
        e = max(-big, min(big, e))
        x = _slice_dim(x, a % x.ndim, s, e, p)
    return x


def _wrap_idx(idx, n):
    return nee.where(idx < 0, idx + n, idx)


def _check_idx_eager(idx, n):
    """Run eagerly (not traced: a session localizing a jitted run's error runs the graph so), indices are
    checked against ``[-n, n-1]`` before they are wrapped, so the error shows the index as given (a traced
    graph's index_select sees it wrapped: -6 into 5 rows reads as -1)."""
    from ..trace.tracer import is_tracing
    if is_tracing():
        return
    _check_idx_np(np.asarray(idx.numpy(force=True)), n)


def _check_idx_np(a, n):
    bad = (a < -n) | (a >= n)
    if bad.any():
        from ..ops.indexing import IndexOutOfRangeError
        v = int(a[bad].reshape(-1)[0])
        raise IndexOutOfRangeError(f"index {v} is out of bounds for a dim of size {n}: idx={v} must be within the "
                                   f"inclusive range [{-n},{n - 1}]")


def _in_range(c, n):
    """``c`` (wrapped indices into a dim of size ``n``) unchanged, range-checked when the graph runs: a
    GatherND / ScatterND index tuple is linearized, so an index past its own dim would land on another row."""
    return nee.index_select(nee.arange(n, dtype=nee.int64), 0, c.reshape(-1)).reshape(tuple(c.shape))


@op("Gather")
def _gather(ctx, node, x, idx):
    axis = node.get("axis", 0) % x.ndim
    if idx.ndim == 0 and idx.dtype in (nee.int64, nee.int32):
        # a constant scalar index (``logits[:, -1]``, a head's slot): a view of x, no gather step
        from ..trace.tracer import TraceError
        try:
            c = ctx.static(idx)
        except TraceError:
            c = None
        if c is not None:
            _check_idx_np(c, x.shape[axis])
            return x.select(axis, int(c) % x.shape[axis])
    idx = idx.to(nee.int64) if idx.dtype is not nee.int64 else idx
    _check_idx_eager(idx, x.shape[axis])
    idx = _wrap_idx(idx, x.shape[axis])
    flat = idx.reshape(-1)
    r = nee.index_select(x, axis, flat)
    shp = tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1:])
    return r.reshape(*shp) if shp else r.reshape(())


@op("GatherElements")
def _gather_el(ctx, node, x, idx):
    axis = node.get("axis", 0) % x.ndim
    _check_idx_eager(idx, x.shape[axis])
    idx = _wrap_idx(idx.to(nee.int64), x.shape[axis])
    return nee.gather(x, axis, idx)


@op("GatherND")
def _gather_nd(ctx, node, x, idx):
    b = node.get("batch_dims", 0)
    idx = idx.to(nee.int64)
    k = idx.shape[-1]
    shp = tuple(x.shape)
    bshape = shp[:b]
    nb = int(np.prod(bshape, dtype=np.int64))
    xr = x.reshape(nb, *shp[b:])  # [B, ...]
    inner = shp[b:b + k]
    rest = shp[b + k:]
    oshape = tuple(idx.shape[:-1]) + tuple(rest)
    if not all(oshape):
        # nothing to gather (an empty batch, index list or slice): the empty result, as onnxruntime (the
        # linearization below reshapes by -1, which a 0-size tensor cannot resolve)
        return nee.zeros(*oshape, dtype=x.dtype)
    # linear index into the k indexed dims
    strides = np.cumprod((list(inner[1:]) + [1])[::-1])[::-1].tolist() if k else []
    ir = idx.reshape(nb, -1, k)
    lin = None
    for j in range(k):
        c = _in_range(_wrap_idx(ir.narrow(2, j, 1).squeeze(2), inner[j]), inner[j]) * int(strides[j])
        lin = c if lin is None else lin + c
    xf = xr.reshape(nb, int(np.prod(inner, dtype=np.int64)), *rest)
    if lin is None:
        lin = nee.zeros(nb, ir.shape[1], dtype=nee.int64)
    boff = (nee.arange(nb, dtype=nee.int64) * int(np.prod(inner, dtype=np.int64))).reshape(nb, 1)
    flat = (lin + boff).reshape(-1)
    r = nee.index_select(xf.reshape(-1, *rest), 0, flat)
    return r.reshape(*(tuple(idx.shape[:-1]) + tuple(rest)))


def _scatter_reduce_name(node):
    red = node.get("reduction", "none")
    return {"none": None, "add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[red]


@op("ScatterElements", "Scatter")
def _scatter_el(ctx, node, x, idx, upd):
    axis = node.get("axis", 0) % x.ndim
    idx = _wrap_idx(idx.to(nee.int64), x.shape[axis])
    red = _scatter_reduce_name(node)
    if red is None:
        return nee.scatter(x, axis, idx, upd)
    return nee.scatter_reduce(x, axis, idx, upd, red, include_self=True)


@op("ScatterND")
def _scatter_nd(ctx, node, x, idx, upd):
    idx = idx.to(nee.int64)
    k = idx.shape[-1]
    shp = tuple(x.shape)
    if x.numel() == 0 or upd.numel() == 0:
        return x.clone()    # nothing written (an empty index list, slice or data): the data, as onnxruntime
    inner, rest = shp[:k], shp[k:]
    strides = np.cumprod((list(inner[1:]) + [1])[::-1])[::-1].tolist()
    ir = idx.reshape(-1, k)
    lin = None
    for j in range(k):
        c = _in_range(_wrap_idx(ir.narrow(1, j, 1).squeeze(1), inner[j]), inner[j]) * int(strides[j])
        lin = c if lin is None else lin + c
    xf = x.reshape(int(np.prod(inner, dtype=np.int64)), *rest)
    u = upd.reshape(-1, *rest)
    red = _scatter_reduce_name(node)
    m = int(np.prod(rest, dtype=np.int64))
    xf2 = xf.reshape(xf.shape[0], m) if rest else xf.reshape(-1, 1)
    u2 = u.reshape(u.shape[0], m) if rest else u.reshape(-1, 1)
    ix = lin.reshape(-1, 1).expand(lin.shape[0], xf2.shape[1])
    if red is None:
        r = nee.scatter(xf2, 0, ix, u2)
    else:
        r = nee.scatter_reduce(xf2, 0, ix, u2, red, include_self=True)
    return r.reshape(*shp)


@op("Expand")
def _expand(ctx, node, x, shape):
    shp = ctx.ints(shape)
    n = max(len(shp), x.ndim)
    xs = [1] * (n - x.ndim) + list(x.shape)
    ss = [1] * (n - len(shp)) + list(shp)
    bad = [i for i, (a, b) in enumerate(zip(xs, ss)) if a != b and 1 not in (a, b)]
    if bad:
        raise LoweringError(f"Expand: input shape {list(x.shape)} does not broadcast to shape {list(shp)} "
                            f"(dim {bad[0] - n}: {xs[bad[0]]} vs {ss[bad[0]]})")
    out = [b if a == 1 else a for a, b in zip(xs, ss)]  # a 1 broadcasts to the other side, 0 included
    x = x.reshape(*xs) if xs else x
    return x.expand(*out).contiguous() if out else x


@op("Tile")
def _tile(ctx, node, x, reps):
    return nee.tile(x, *ctx.ints(reps))


@op("Range")
def _range(ctx, node, start, limit, delta):
    s, l, d = ctx.scalar(start), ctx.scalar(limit), ctx.scalar(delta)
    n = max(int(np.ceil((l - s) / d)), 0)
    return ctx.const((s + np.arange(n) * d).astype(ctx.static(start).dtype))


@op("Pad")
def _pad(ctx, node, x, pads=None, value=None, axes=None):
    mode = node.get("mode", "constant")
    p = ctx.ints(pads) if pads is not None else node.get("pads")
    ax = ctx.ints(axes) if axes is not None else list(range(x.ndim))
    ax = [a % x.ndim for a in ax]
    k = len(ax)
    full = [(0, 0)] * x.ndim
    for i, a in enumerate(ax):
        full[a] = (p[i], p[i + k])
    v = ctx.scalar(value, 0) if value is not None else node.get("value", 0.0)
    tmode = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}[mode]
    if tmode == "constant":
        tp = []
        for lo, hi in reversed(full):
            tp += [lo, hi]
        while len(tp) > 2 and tp[-1] == 0 and tp[-2] == 0:
            tp = tp[:-2]
        return nee.pad(x, tuple(tp), mode="constant", value=v)
    # reflect/edge/wrap: compose per dim with index_select (any rank, any dim)
    for d, (lo, hi) in enumerate(full):
        if lo == 0 and hi == 0:
            continue
        n = x.shape[d]
        i = np.arange(-lo, n + hi)
        if tmode == "reflect":
            period = 2 * (n - 1) if n > 1 else 1
            i = np.abs(i) % period
            i = np.where(i >= n, period - i, i)
        elif tmode == "replicate":
            i = np.clip(i, 0, n - 1)
        else:
            i = i % n
        x = nee.index_select(x, d, _i64(ctx, i))
    return x


@op("NonZero")
def _nonzero(ctx, node, x):
    r = nee.nonzero(x)  # [n, ndim]
    return r.transpose(0, 1).contiguous() if r.ndim == 2 else r


@op("TopK")
def _topk(ctx, node, x, k):
    axis = node.get("axis", -1) % x.ndim
    kk = int(ctx.scalar(k))
    largest = bool(node.get("largest", 1))
    from ..ops.indexing import _topk     # (ONNX: equal values in index order, not torch's)
    v, i = _topk(x, kk, axis, largest, True, "index")
    return v, i.to(nee.int64)


@op("OneHot")
def _onehot(ctx, node, idx, depth, values):
    d = int(ctx.scalar(depth))
    axis = node.get("axis", -1)
    idx = idx.to(nee.int64)
    idx = nee.where(idx < 0, idx + d, idx)
    n = idx.ndim + 1
    axis = axis % n
    ar = nee.arange(d, dtype=nee.int64).reshape(*([d] + [1] * (n - 1 - axis)))
    hot = idx.unsqueeze(axis) == ar
    off = values.narrow(0, 0, 1).reshape(())
    on = values.narrow(0, 1, 1).reshape(())
    return nee.where(hot, on, off)


@op("Trilu")
def _trilu(ctx, node, x, k=None):
    kk = int(ctx.scalar(k, 0))
    return nee.triu(x, kk) if node.get("upper", 1) else nee.tril(x, kk)


@op("DepthToSpace")
def _d2s(ctx, node, x):
    b = node.get("blocksize")
    n, c, h, w = x.shape
    if node.get("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@op("SpaceToDepth")
def _s2d(ctx, node, x):
    b = node.get("blocksize")
    n, c, h, w = x.shape
    if node.get("mode", "DCR") == "CRD":
        y = x.reshape(n, c, h // b, b, w // b, b).permute(0, 1, 3, 5, 2, 4)
        return y.reshape(n, c * b * b, h // b, w // b)
    y = x.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


@op("EyeLike")
def _eyelike(ctx, node, x):
    k = node.get("k", 0)
    dt = onnx_np(node.get("dtype")) if "dtype" in node.attrs else None
    r, c = x.shape
    e = np.eye(r, c, k=k)
    return ctx.const(e.astype(dt if dt is not None else x.dtype.np))


@op("Compress")
def _compress(ctx, node, x, cond):
    axis = node.get("axis")
    c = cond.to(nee.bool)
    if axis is None:
        x = x.reshape(-1)
        axis = 0
    axis %= x.ndim
    n = min(c.shape[0], x.shape[axis])
    c = c.narrow(0, 0, n)
    idx = nee.nonzero(c).reshape(-1)
    return nee.index_select(x, axis, idx)


@op("ReverseSequence")
def _revseq(ctx, node, x, lens):
    ba, ta = node.get("batch_axis", 1), node.get("time_axis", 0)
    T, B = x.shape[ta], x.shape[ba]
    t = nee.arange(T, dtype=nee.int64)
    L = lens.to(nee.int64)
    # index[t, b] = L[b]-1-t if t < L[b] else t
    tt = t.reshape(T, 1)
    ll = L.reshape(1, B)
    idx = nee.where(tt < ll, ll - 1 - tt, tt.expand(T, B))  # [T, B]
    shp = [1] * x.ndim
    shp[ta], shp[ba] = T, B
    if ta > ba:
        idx = idx.transpose(0, 1)
    idx = idx.reshape(*shp).expand(*x.shape).contiguous()
    return nee.gather(x, ta, idx)




@op("Unique")
def _unique(ctx, node, x):
    """nee.unique (sorted, inverse, counts) plus first-occurrence indices; unsorted order by first occurrence."""
    axis = node.get("axis")
    if axis is None:
        flat = x.reshape(-1)
        y, inv, cnt = nee.unique(flat, sorted=True, return_inverse=True, return_counts=True)
        n = flat.shape[0]
        ax = 0
    else:
        ax = axis % x.ndim
        y, inv, cnt = nee.unique(x, sorted=True, return_inverse=True, return_counts=True, dim=ax)
        n = x.shape[ax]
    inv = inv.reshape(-1).to(nee.int64)
    k = cnt.shape[0]
    big = nee.full((k,), n, dtype=nee.int64)
    first = nee.scatter_reduce(big, 0, inv, nee.arange(n, dtype=nee.int64), "amin", include_self=True)
    if not node.get("sorted", 1):
        order = nee.argsort(first)
        rank = nee.argsort(order)
        y = nee.index_select(y, ax, order)
        first = nee.index_select(first, 0, order)
        cnt = nee.index_select(cnt, 0, order)
        inv = nee.index_select(rank, 0, inv)
    return y, first, inv, cnt.to(nee.int64)
