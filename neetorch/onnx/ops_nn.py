"""ONNX convolution, pooling, normalization and resize ops."""
from __future__ import annotations

import math

import numpy as np

import neetorch as nee
from ..nn import functional as F
from .lowering import op, LoweringError, nee_dtype
from .loader import ONNX_TO_NP


# ---------------------------------------------------------------- padding helpers
def _auto_pads(node, in_sp, k, s, d, transpose=False):
    """Explicit ONNX pads [b1..bn, e1..en] for the spatial dims."""
    n = len(in_sp)
    ap = node.get("auto_pad", "NOTSET")
    if ap in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * n)
        for i in range(n):
            out = -(-in_sp[i] // s[i])
            total = max(0, (out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_sp[i])
            lo = total // 2 if ap == "SAME_UPPER" else total - total // 2
            pads[i], pads[i + n] = lo, total - lo
        return pads
    if ap == "VALID":
        return [0] * (2 * n)
    return list(node.get("pads") or [0] * (2 * n))


def _pad_spatial(x, pads, value=0.0):
    n = len(pads) // 2
    tp = []
    for i in reversed(range(n)):
        tp += [pads[i], pads[i + n]]
    if not any(tp):
        return x
    return nee.pad(x, tuple(tp), mode="constant", value=value)


def _to2d(x):
    """1-D spatial (N, C, L) -> (N, C, 1, L)."""
    return x.unsqueeze(2)


# ---------------------------------------------------------------- conv
@op("Conv")
def _conv(ctx, node, x, w, b=None):
    nsp = x.ndim - 2
    if nsp not in (1, 2, 3):
        raise LoweringError(f"Conv with {nsp} spatial dims is not supported")
    k = node.get("kernel_shape") or list(w.shape[2:])
    s = node.get("strides") or [1] * nsp
    d = node.get("dilations") or [1] * nsp
    g = node.get("group", 1)
    pads = _auto_pads(node, list(x.shape[2:]), k, s, d)
    sym = all(pads[i] == pads[i + nsp] for i in range(nsp))
    if not sym:
        x = _pad_spatial(x, pads)
        p = [0] * nsp
    else:
        p = pads[:nsp]
    if nsp == 1:
        return F.conv1d(x, w, b, stride=s[0], padding=p[0], dilation=d[0], groups=g)
    if nsp == 3:
        # (its depth taps side by side as channels of one 2-D conv over the output frames)
        return F.conv3d(x, w, b, stride=tuple(s), padding=tuple(p), dilation=tuple(d), groups=g)
    return F.conv2d(x, w, b, stride=tuple(s), padding=tuple(p), dilation=tuple(d), groups=g)


class _Fake:
    """A node stand-in with given attributes (to reuse 2-D pooling for 3-D)."""

    def __init__(self, op_type, attrs, nout=1):
        self.op_type, self.attrs, self.nout, self.name = op_type, attrs, nout, op_type

    def get(self, k, default=None):
        return self.attrs.get(k, default)


def _pool3d(ctx, node, x, fn):
    if node.nout > 1:
        raise LoweringError(f"{node.op_type} with 3 spatial dims does not return indices")
    k = node.get("kernel_shape")
    s = node.get("strides") or [1] * 3
    d = node.get("dilations") or [1] * 3
    pads = _auto_pads(node, list(x.shape[2:]), k, s, d)
    common = {kk: node.get(kk) for kk in ("ceil_mode", "count_include_pad") if kk in node.attrs}
    N, C, D, H, W = x.shape
    n1 = _Fake(node.op_type, dict(common, kernel_shape=k[1:], strides=s[1:], dilations=d[1:],
                                  pads=[pads[1], pads[2], pads[4], pads[5]]))
    y = fn(ctx, n1, x.reshape(N, C * D, H, W))
    OH, OW = y.shape[2], y.shape[3]
    n2 = _Fake(node.op_type, dict(common, kernel_shape=[k[0], 1], strides=[s[0], 1], dilations=[d[0], 1],
                                  pads=[pads[0], 0, pads[3], 0]))
    z = fn(ctx, n2, y.reshape(N * C, 1, D, OH * OW))
    return z.reshape(N, C, z.shape[2], OH, OW)


@op("ConvTranspose")
def _convt(ctx, node, x, w, b=None):
    nsp = x.ndim - 2
    if nsp not in (1, 2, 3):
        raise LoweringError(f"ConvTranspose with {nsp} spatial dims is not supported")
    k = node.get("kernel_shape") or list(w.shape[2:])
    s = node.get("strides") or [1] * nsp
    d = node.get("dilations") or [1] * nsp
    g = node.get("group", 1)
    op_ = list(node.get("output_padding") or [0] * nsp)
    in_sp = list(x.shape[2:])
    full = [(in_sp[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 for i in range(nsp)]
    out_shape = node.get("output_shape")
    ap = node.get("auto_pad", "NOTSET")
    if out_shape:
        out_shape = list(out_shape)[-nsp:]
        pads = [0] * (2 * nsp)
        for i in range(nsp):
            total = full[i] + op_[i] - out_shape[i]
            if total < 0:
                # an output_shape past the full result: zeros after it (onnxruntime clamps the total padding at
                # 0; ONNX's reference places the result at the start too)
                pads[i], pads[i + nsp] = 0, total
            elif ap == "SAME_UPPER":
                pads[i], pads[i + nsp] = total // 2, total - total // 2
            else:
                pads[i], pads[i + nsp] = total - total // 2, total // 2
    elif ap in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nsp)
        for i in range(nsp):
            target = in_sp[i] * s[i]
            total = max(full[i] + op_[i] - target, 0)
            if ap == "SAME_UPPER":
                pads[i], pads[i + nsp] = total // 2, total - total // 2
            else:
                pads[i], pads[i + nsp] = total - total // 2, total // 2
    else:
        pads = list(node.get("pads") or [0] * (2 * nsp))
    # compute with no padding, then crop begin/end (handles asymmetric pads and output_padding)
    if nsp == 3:
        y = _convt3d_full(ctx, x, w, s, d, g)
    else:
        conv = F.conv_transpose1d if nsp == 1 else F.conv_transpose2d
        y = conv(x, w, None, stride=tuple(s) if nsp == 2 else s[0], padding=0,
                 output_padding=0, groups=g, dilation=tuple(d) if nsp == 2 else d[0])
    for i in range(nsp):
        ax = 2 + i
        n = y.shape[ax]
        lo, hi = pads[i], pads[i + nsp]
        extra = op_[i]
        if extra:
            y = nee.pad(y, tuple([0, 0] * (nsp - 1 - i) + [0, extra]), mode="constant", value=0.0)
            n += extra
        if lo < 0 or hi < 0:  # output_shape larger than the full result: zeros beyond it
            y = nee.pad(y, tuple([0, 0] * (nsp - 1 - i) + [max(0, -lo), max(0, -hi)]), mode="constant", value=0.0)
            n += max(0, -lo) + max(0, -hi)
            lo, hi = max(lo, 0), max(hi, 0)
        y = y.narrow(ax, lo, n - lo - hi)
    if b is not None:
        y = y + b.reshape(-1, *([1] * nsp))
    return y


def _convt3d_full(ctx, x, w, s, d, g):
    """Unpadded 3-D transposed conv: per depth tap, a 2-D one (depth folded into the batch) added at its depths."""
    N, C, D, H, W = x.shape
    kd = w.shape[2]
    xs = x.permute(0, 2, 1, 3, 4).reshape(N * D, C, H, W)
    acc = None
    for j in range(kd):
        y = F.conv_transpose2d(xs, w.select(2, j), None, stride=tuple(s[1:]), padding=0, output_padding=0,
                               groups=g, dilation=tuple(d[1:]))
        y = y.reshape(N, D, y.shape[1], y.shape[2], y.shape[3])
        if acc is None:
            acc = nee.zeros(N, (D - 1) * s[0] + (kd - 1) * d[0] + 1, y.shape[2], y.shape[3], y.shape[4],
                            dtype=y.dtype, device=y.device)
        acc = nee.index_add(acc, 1, ctx.const(np.arange(D, dtype=np.int64) * s[0] + j * d[0]), y)
    return acc.permute(0, 2, 1, 3, 4)


# ---------------------------------------------------------------- pooling
def _pool_out(n, k, s, d, lo, hi, ceil):
    eff = (k - 1) * d + 1
    v = (n + lo + hi - eff) / s + 1
    return int(math.ceil(v) if ceil else math.floor(v))


def _empty_pool(node, x, k, s, d, pads, ceil):
    """A pool whose window does not fit: an output size of 0 (the kernel one past the padded input) is onnxruntime's
    empty result (torch's pools raise "Output size is too small"), a negative one its error, naming the node; None
    when every output dim has a window."""
    nsp = x.ndim - 2
    outs = [_pool_out(x.shape[2 + i], k[i], s[i], d[i], pads[i], pads[i + nsp], ceil) for i in range(nsp)]
    if min(outs) > 0:
        return None
    if min(outs) < 0:
        raise LoweringError(f"node {node.name} ({node.op_type}): the window (kernel {list(k)}, dilations {list(d)}) "
                            f"is larger than the padded input {list(x.shape[2:])} (pads {list(pads)})")
    y = nee.zeros(x.shape[0], x.shape[1], *outs, dtype=x.dtype)
    return (y, nee.zeros(*y.shape, dtype=nee.int64)) if node.nout > 1 else y


@op("MaxPool")
def _maxpool(ctx, node, x):
    nsp = x.ndim - 2
    k = node.get("kernel_shape")
    s = node.get("strides") or [1] * nsp
    d = node.get("dilations") or [1] * nsp
    ceil = bool(node.get("ceil_mode", 0))
    pads = _auto_pads(node, list(x.shape[2:]), k, s, d)
    e = _empty_pool(node, x, k, s, d, pads, ceil)
    if e is not None:
        return e
    if nsp == 3:
        return _pool3d(ctx, node, x, _maxpool)
    if nsp not in (1, 2):
        raise LoweringError(f"MaxPool with {nsp} spatial dims is not supported")
    x2 = _to2d(x) if nsp == 1 else x
    k2, s2, d2 = ([1] + k, [1] + s, [1] + d) if nsp == 1 else (k, s, d)
    p2 = ([0] + pads[:1] + [0] + pads[1:]) if nsp == 1 else pads
    H = [x2.shape[2], x2.shape[3]]
    sym = p2[0] == p2[2] and p2[1] == p2[3] and all(p2[i] * 2 <= k2[i] for i in range(2))
    want_idx = node.nout > 1
    if not sym and not ceil and all(p2[i] <= p2[i + 2] and p2[i] * 2 <= k2[i] for i in range(2)):
        # extra padding at the end only (caffe2 exports' [0, 0, 1, 1]): ceil mode over the symmetric pads takes
        # the same windows when the output sizes agree (a window clipped at the end = -inf padding), without
        # the padded copy (Inception v2's 3x3/2 pools: 2.2x faster, bit-identical)
        want = [_pool_out(H[i], k2[i], s2[i], d2[i], p2[i], p2[i + 2], False) for i in range(2)]
        got = [_pool_out(H[i], k2[i], s2[i], d2[i], p2[i], p2[i], True) for i in range(2)]
        got = [o - 1 if (o - 1) * s2[i] >= H[i] + p2[i] else o for i, o in enumerate(got)]   # torch's last-window rule
        if want == got:
            sym = ceil = True
    if sym:
        xp, pp = x2, (p2[0], p2[1])
        off = (0, 0)
    else:
        lo = -math.inf if x.dtype.is_floating_point else int(np.iinfo(x.dtype.np).min)
        # ceil mode windows must start inside the (left-padded) input: pad the end enough
        outs = [_pool_out(H[i], k2[i], s2[i], d2[i], p2[i], p2[i + 2], ceil) for i in range(2)]
        need = [max(0, (outs[i] - 1) * s2[i] + (k2[i] - 1) * d2[i] + 1 - H[i] - p2[i]) for i in range(2)]
        xp = _pad_spatial(x2, [p2[0], p2[1], min(need[0], p2[2]) if not ceil else need[0],
                               min(need[1], p2[3]) if not ceil else need[1]], lo)
        pp, off = (0, 0), (p2[0], p2[1])
        ceil = False
    if x.dtype.is_floating_point:
        r = F.max_pool2d(xp, tuple(k2), tuple(s2), pp, tuple(d2), ceil_mode=ceil, return_indices=want_idx)
    else:
        r = F.max_pool2d(xp.to(nee.float64), tuple(k2), tuple(s2), pp, tuple(d2), ceil_mode=ceil,
                         return_indices=want_idx)
        r = (r[0].to(x.dtype), r[1]) if want_idx else r.to(x.dtype)
    if not want_idx:
        return r.squeeze(2) if nsp == 1 else r
    y, idx = r
    if off != (0, 0):
        Wp = xp.shape[3]
        hh = idx // Wp - off[0]
        ww = idx % Wp - off[1]
        idx = hh * H[1] + ww
    if node.get("storage_order", 0):  # column-major offsets within the (H, W) plane: w * H + h
        idx = (idx % H[1]) * H[0] + idx // H[1]
    N, C = x.shape[0], x.shape[1]
    base = (nee.arange(N * C, dtype=nee.int64) * (H[0] * H[1])).reshape(N, C, 1, 1)
    idx = idx.to(nee.int64) + base
    if nsp == 1:
        y, idx = y.squeeze(2), idx.squeeze(2)
    return y, idx


def _pool_taps(ctx, x, k, s, d, pads, ceil, kind, cip=False, p=2.0):
    """Average / Lp pooling over any number of spatial dims as a sum of strided slices (one per tap)."""
    nsp = len(k)
    sp = list(x.shape[2:])
    outs, ends = [], []
    for i in range(nsp):
        lo, hi = pads[i], pads[i + nsp]
        o = _pool_out(sp[i], k[i], s[i], d[i], lo, hi, ceil)
        if ceil and (o - 1) * s[i] >= sp[i] + lo:
            o -= 1
        outs.append(o)
        ends.append(max(0, (o - 1) * s[i] + (k[i] - 1) * d[i] + 1 - sp[i] - lo))
    src = nee.pow(nee.abs(x), p) if kind == "lp" else x
    padspec = []
    for i in reversed(range(nsp)):
        padspec += [pads[i], ends[i]]
    xp = nee.pad(src, tuple(padspec), mode="constant", value=0.0) if any(padspec) else src
    m = np.zeros([sp[i] + pads[i] + ends[i] for i in range(nsp)], dtype=np.float64)
    region = tuple(slice(0, sp[i] + pads[i] + pads[i + nsp]) if cip else slice(pads[i], pads[i] + sp[i])
                   for i in range(nsp))
    m[region] = 1
    acc = None
    cnt = np.zeros(outs, dtype=np.float64)
    for tap in np.ndindex(*k):
        idx = [slice(None), slice(None)]
        sl = []
        for i in range(nsp):
            st = tap[i] * d[i]
            sl.append(slice(st, st + (outs[i] - 1) * s[i] + 1, s[i]))
        v = xp[tuple(idx + sl)]
        acc = v if acc is None else acc + v
        cnt += m[tuple(sl)]
    if kind == "lp":
        return nee.pow(acc, 1.0 / p)
    return acc / ctx.const(np.maximum(cnt, 1).astype(x.dtype.np))


@op("AveragePool")
def _avgpool(ctx, node, x):
    nsp = x.ndim - 2
    k = node.get("kernel_shape")
    s = node.get("strides") or [1] * nsp
    d = node.get("dilations") or [1] * nsp
    ceil = bool(node.get("ceil_mode", 0))
    cip = bool(node.get("count_include_pad", 0))
    pads = _auto_pads(node, list(x.shape[2:]), k, s, d)
    e = _empty_pool(node, x, k, s, d, pads, ceil)
    if e is not None:
        return e
    if nsp not in (1, 2) or any(v != 1 for v in d) or ceil:
        return _pool_taps(ctx, x, k, s, d, pads, ceil, "avg", cip)
    x2 = _to2d(x) if nsp == 1 else x
    k2, s2 = ([1] + k, [1] + s) if nsp == 1 else (k, s)
    p2 = ([0] + pads[:1] + [0] + pads[1:]) if nsp == 1 else pads
    H = [x2.shape[2], x2.shape[3]]
    sym = p2[0] == p2[2] and p2[1] == p2[3] and all(p2[i] * 2 <= k2[i] for i in range(2))
    if sym and not ceil:
        r = F.avg_pool2d(x2, tuple(k2), tuple(s2), (p2[0], p2[1]), ceil_mode=False, count_include_pad=cip)
    else:
        # general: sum over windows of the zero-padded input / count of the counted cells
        outs = [_pool_out(H[i], k2[i], s2[i], 1, p2[i], p2[i + 2], ceil) for i in range(2)]
        need = [max(0, (outs[i] - 1) * s2[i] + k2[i] - H[i] - p2[i]) for i in range(2)]
        xp = _pad_spatial(x2, [p2[0], p2[1], need[0], need[1]], 0.0)
        ksz = float(k2[0] * k2[1])
        sums = F.avg_pool2d(xp, tuple(k2), tuple(s2), 0, count_include_pad=True) * ksz
        m = np.zeros((1, 1, H[0] + p2[0] + need[0], H[1] + p2[1] + need[1]), dtype=x.dtype.np)
        if cip:  # the declared padding counts, the ceil-mode overhang does not
            m[..., :H[0] + p2[0] + p2[2], :H[1] + p2[1] + p2[3]] = 1
        else:
            m[..., p2[0]:p2[0] + H[0], p2[1]:p2[1] + H[1]] = 1
        cnt = F.avg_pool2d(ctx.const(m), tuple(k2), tuple(s2), 0, count_include_pad=True) * ksz
        r = sums / cnt
    return r.squeeze(2) if nsp == 1 else r


@op("GlobalAveragePool")
def _gap(ctx, node, x):
    return nee.mean(x, tuple(range(2, x.ndim)), keepdim=True)


@op("GlobalMaxPool")
def _gmp(ctx, node, x):
    return nee.amax(x, tuple(range(2, x.ndim)), keepdim=True)


@op("GlobalLpPool")
def _glp(ctx, node, x):
    p = float(node.get("p", 2))
    return nee.pow(nee.sum(nee.pow(nee.abs(x), p), tuple(range(2, x.ndim)), keepdim=True), 1.0 / p)


@op("LpPool")
def _lppool(ctx, node, x):
    nsp = x.ndim - 2
    p = float(node.get("p", 2))
    k = node.get("kernel_shape")
    s = node.get("strides") or [1] * nsp
    d = node.get("dilations") or [1] * nsp
    pads = _auto_pads(node, list(x.shape[2:]), k, s, d)
    if nsp not in (1, 2) or any(v != 1 for v in d) or node.get("ceil_mode", 0):
        return _pool_taps(ctx, x, k, s, d, pads, bool(node.get("ceil_mode", 0)), "lp", p=p)
    x2 = _to2d(x) if nsp == 1 else x
    k2, s2 = ([1] + k, [1] + s) if nsp == 1 else (k, s)
    p2 = ([0] + pads[:1] + [0] + pads[1:]) if nsp == 1 else pads
    xp = _pad_spatial(nee.pow(nee.abs(x2), p), p2, 0.0)
    r = F.avg_pool2d(xp, tuple(k2), tuple(s2), 0) * float(k2[0] * k2[1])
    r = nee.pow(r, 1.0 / p)
    return r.squeeze(2) if nsp == 1 else r


# ---------------------------------------------------------------- normalization
def _chan(t, nd):
    return t.reshape(-1, *([1] * (nd - 2)))


@op("BatchNormalization")
def _bn(ctx, node, x, scale, bias, mean, var):
    eps = node.get("epsilon", 1e-5)
    if node.get("training_mode", 0) or node.nout > 1:
        # normalize with the batch statistics; also return the running statistics updated by momentum
        mom = node.get("momentum", 0.9)
        dims = tuple(i for i in range(x.ndim) if i != 1)
        m = nee.mean(x, dims)
        v = nee.var(x, dims, correction=0)
        a = scale / nee.sqrt(v + eps)
        y = x * _chan(a, x.ndim) + _chan(bias - m * a, x.ndim)
        return y, mean * mom + m * (1 - mom), var * mom + v * (1 - mom)
    a = scale / nee.sqrt(var + eps)
    b = bias - mean * a
    if x.ndim == 1:
        return x * a + b
    return x * _chan(a, x.ndim) + _chan(b, x.ndim)


@op("InstanceNormalization")
def _in(ctx, node, x, scale, bias):
    eps = node.get("epsilon", 1e-5)
    dims = tuple(range(2, x.ndim))
    m = nee.mean(x, dims, keepdim=True)
    xc = x - m
    v = nee.mean(xc * xc, dims, keepdim=True)
    return xc / nee.sqrt(v + eps) * _chan(scale, x.ndim) + _chan(bias, x.ndim)


@op("LayerNormalization")
def _ln(ctx, node, x, scale, bias=None):
    axis = node.get("axis", -1) % x.ndim
    eps = node.get("epsilon", 1e-5)
    dims = tuple(range(axis, x.ndim))
    ns = tuple(x.shape[axis:])
    if (node.nout == 1 and x.dtype in (nee.float32, nee.float64) and scale.dtype is x.dtype
            and tuple(scale.shape) == ns and (bias is None or (bias.dtype is x.dtype and tuple(bias.shape) == ns))):
        # the common case: one row-normalization kernel instead of mean/sub/mean/sqrt/div/mul/add
        return F.layer_norm(x, ns, scale, bias, float(eps))
    xf = x if x.dtype is not nee.float16 else x.to(nee.float32)
    if node.get("stash_type", 1) == 1 and xf.dtype is not nee.float32 and xf.dtype is not nee.float64:
        xf = xf.to(nee.float32)
    m = nee.mean(xf, dims, keepdim=True)
    xc = xf - m
    v = nee.mean(xc * xc, dims, keepdim=True)
    inv = 1.0 / nee.sqrt(v + eps)
    y = (xc * inv).to(x.dtype)
    y = y * scale
    if bias is not None:
        y = y + bias
    if node.nout == 1:
        return y
    return y, m, inv


@op("GroupNormalization")
def _gn(ctx, node, x, scale, bias):
    eps = node.get("epsilon", 1e-5)
    G = node.get("num_groups")
    N, C = x.shape[0], x.shape[1]
    xs = x.reshape(N, G, -1)
    m = nee.mean(xs, 2, keepdim=True)
    xc = xs - m
    v = nee.mean(xc * xc, 2, keepdim=True)
    y = (xc / nee.sqrt(v + eps)).reshape(*x.shape)
    if scale.shape[0] == G and G != C:  # opset 18: per-group scale/bias
        scale = scale.reshape(G, 1).expand(G, C // G).reshape(C)
        bias = bias.reshape(G, 1).expand(G, C // G).reshape(C)
    return y * _chan(scale, x.ndim) + _chan(bias, x.ndim)


@op("LRN")
def _lrn(ctx, node, x):
    size = node.get("size")
    alpha, beta, bias = node.get("alpha", 1e-4), node.get("beta", 0.75), node.get("bias", 1.0)
    C = x.shape[1]
    sq = x * x
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    pads = [0, 0] * (x.ndim - 2) + [lo, hi]
    sp = nee.pad(sq, tuple(pads), mode="constant", value=0.0)
    acc = None
    for i in range(size):
        t = sp.narrow(1, i, C)
        acc = t if acc is None else acc + t
    return x / nee.pow(acc * (alpha / size) + bias, beta)


@op("MeanVarianceNormalization")
def _mvn(ctx, node, x):
    axes = tuple(a % x.ndim for a in (node.get("axes") or [0, 2, 3]))
    m = nee.mean(x, axes, keepdim=True)
    xc = x - m
    v = nee.mean(xc * xc, axes, keepdim=True)
    return xc / (nee.sqrt(v) + 1e-9)


@op("LpNormalization")
def _lpn(ctx, node, x):
    axis = node.get("axis", -1) % x.ndim
    p = node.get("p", 2)
    if p == 1:
        n = nee.sum(nee.abs(x), axis, keepdim=True)
    else:
        n = nee.sqrt(nee.sum(x * x, axis, keepdim=True))
    return nee.where(n == 0, nee.zeros((), dtype=x.dtype), x / n)


# ---------------------------------------------------------------- resize
def _coords(mode, out_n, in_n, scale, roi_lo=0.0, roi_hi=1.0, f32=False):
    """The input coordinate of each output index along one axis.  ``f32``: in float32 arithmetic, as onnxruntime
    and PyTorch compute the nearest mode's (a coordinate within rounding of an integer, 3 / 0.6 = 4.9999998 in
    float64 and 5.0 in float32, picks another input; ONNX's reference computes in float64 and agrees with
    both where its cases test)."""
    if f32:
        scale, roi_lo, roi_hi = np.float32(scale), np.float32(roi_lo), np.float32(roi_hi)
    o = np.arange(out_n, dtype=np.float32 if f32 else np.float64)
    if mode == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        if f32:  # onnxruntime's: the offset in float32, the rest in float64 ((x + 0.5) / scale - 0.5), then float32
            adj = np.float32(out_n) / (scale * np.float32(in_n))
            offset = np.float32(in_n) / np.float32(2) * (np.float32(1) - adj)
            return (np.float64(offset) + (o.astype(np.float64) + 0.5) / np.float64(scale) - 0.5).astype(np.float32)
        adj = out_n / (scale * in_n)
        center = in_n / 2
        offset = center * (1 - adj)
        return offset + (o + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if out_n > 1 else np.zeros(out_n)
    if mode == "tf_half_pixel_for_nn":     # opsets 11-12 (tf2onnx's nearest with half-pixel centers)
        return (o + 0.5) / scale
    # the spec's length_resized is scale * length_original: fractional when it comes from scales
    w = scale * in_n
    if abs(w - out_n) <= (1e-6 if f32 else 1e-9) * max(w, 1.0):
        w = float(out_n)
    if mode == "align_corners":
        return o * (in_n - 1) / (w - 1) if w != 1 else np.zeros(out_n)
    if mode == "asymmetric":
        return o / scale
    if mode == "tf_crop_and_resize":
        if w != 1:
            return roi_lo * (in_n - 1) + o * (roi_hi - roi_lo) * (in_n - 1) / (w - 1)
        return np.full(out_n, 0.5 * (roi_lo + roi_hi) * (in_n - 1))
    raise LoweringError(f"Resize coordinate_transformation_mode {mode!r} is not supported")


def _nearest(c, mode, in_n):
    if mode == "round_prefer_floor":
        i = np.where(c - np.floor(c) == 0.5, np.floor(c), np.round(c))
    elif mode == "round_prefer_ceil":
        i = np.where(c - np.floor(c) == 0.5, np.ceil(c), np.round(c))
    elif mode == "floor":
        i = np.floor(c)
    elif mode == "ceil":
        i = np.ceil(c)
    else:
        raise LoweringError(f"Resize nearest_mode {mode!r} is not supported")
    return np.clip(i, 0, in_n - 1).astype(np.int64)


def _cubic_w(t, A):
    t = np.abs(t)
    return np.where(t <= 1, ((A + 2) * t - (A + 3)) * t * t + 1,
                    np.where(t < 2, ((A * t - 5 * A) * t + 8 * A) * t - 4 * A, 0.0))


def _antialias_taps(c, n_in, scale, mode, A, excl):
    """Antialiased linear/cubic taps along one axis, as ONNX's reference computes them: the filter
    is stretched by 1/scale when downscaling.  Returns ([n_out] index arrays, [n_out] weights) per tap."""
    s = min(scale, 1.0)
    f = np.floor(c)
    ratio = np.where(c == f, 1.0, c - f)[:, None]
    if mode == "linear":
        start = int(np.floor(-1 / s) + 1)
        k = np.arange(start, start + 2 - 2 * start)
        w = np.clip(1 - np.abs((k[None, :] - ratio) * s), 0, 1)
    else:
        start = int(np.floor(-2 / s) + 1)
        w = _cubic_w(s * (np.arange(start, 2 - start)[None, :] - ratio), A)
    w = w / w.sum(axis=1, keepdims=True)
    n = w.shape[1]
    # the n inputs nearest to c (ties to the smaller index), as the reference's neighbour search
    pad = -(-n // 2)
    xp = c + pad
    p = np.floor(xp)
    fr = xp - p
    if n % 2 == 0:
        off = np.where(fr == 0, -(n // 2), -(n // 2) + 1)
    else:
        off = np.where(fr <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (p.astype(np.int64) + off)[:, None] + np.arange(n)[None, :] - pad
    if excl:
        w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
        tot = w.sum(axis=1, keepdims=True)
        w = w / np.where(tot == 0, 1.0, tot)
    idx = np.clip(idx, 0, n_in - 1)
    return [idx[:, j] for j in range(n)], [w[:, j] for j in range(n)]


@op("Resize", "Upsample")
def _resize(ctx, node, x, roi=None, scales=None, sizes=None):
    aa = node.get("antialias", 0)
    if node.op_type == "Upsample":
        mode = node.get("mode", "nearest")
        scales = roi
        roi = None
        ctm, nm = "asymmetric", "floor"
    else:
        mode = node.get("mode", "nearest")
        ctm = node.get("coordinate_transformation_mode", "half_pixel")
        nm = node.get("nearest_mode", "round_prefer_floor")
    nd = x.ndim
    axes = [a % nd for a in (node.get("axes") or list(range(nd)))]
    sc = ctx.static(scales) if scales is not None else None
    sz = ctx.ints(sizes) if sizes is not None else None
    if sc is not None and sc.size == 0:
        sc = None
    if sz is not None and len(sz) == 0:
        sz = None
    roi_v = ctx.static(roi).astype(np.float64) if roi is not None and roi.numel() else None
    in_shape = list(x.shape)
    scale_full = [1.0] * nd
    out_full = list(in_shape)
    if sz is not None:
        policy = node.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            rs = [sz[i] / in_shape[a] for i, a in enumerate(axes)]
            r = min(rs) if policy == "not_larger" else max(rs)
            for a in axes:
                scale_full[a] = r
                out_full[a] = int(math.floor(r * in_shape[a] + 0.5))
        else:
            for i, a in enumerate(axes):
                out_full[a] = sz[i]
                scale_full[a] = sz[i] / in_shape[a]
    elif sc is not None:
        for i, a in enumerate(axes):
            scale_full[a] = float(sc[i])
            # in float32, as onnxruntime and PyTorch (10 x 0.7f: 7, where float64 gives 6.99999988 and ONNX's shape
            # inference 6)
            out_full[a] = int(math.floor(np.float32(in_shape[a]) * np.float32(sc[i])))
    else:
        raise LoweringError("Resize needs scales or sizes")
    A = node.get("cubic_coeff_a", -0.75)
    excl = node.get("exclude_outside", 0)
    ext = node.get("extrapolation_value", 0.0)
    y = x
    dt = x.dtype if x.dtype.is_floating_point else nee.float32
    for a in range(nd):
        if out_full[a] == in_shape[a] and scale_full[a] == 1.0 and ctm != "tf_crop_and_resize":
            continue
        n_in, n_out = in_shape[a], out_full[a]
        if roi_v is not None and ctm == "tf_crop_and_resize":
            k = axes.index(a) if a in axes else None
            nr = len(roi_v) // 2
            lo, hi = (roi_v[k], roi_v[k + nr]) if k is not None else (0.0, 1.0)
            c = _coords(ctm, n_out, n_in, scale_full[a], lo, hi, f32=mode == "nearest")
        else:
            c = _coords(ctm, n_out, n_in, scale_full[a], f32=mode == "nearest")
        outside = (c < 0) | (c > n_in - 1) if ctm == "tf_crop_and_resize" else None
        shape_w = [1] * nd
        shape_w[a] = n_out
        if aa and mode in ("linear", "cubic"):
            yf = y if y.dtype.is_floating_point else y.to(dt)
            acc = None
            for ij, wj in zip(*_antialias_taps(c, n_in, scale_full[a], mode, A, excl)):
                term = nee.index_select(yf, a, ctx.const(ij)) * ctx.const(wj.reshape(shape_w).astype(yf.dtype.np))
                acc = term if acc is None else acc + term
            y = acc
        elif mode == "nearest":
            idx = _nearest(c, nm, n_in)
            y = nee.index_select(y, a, ctx.const(idx))
        elif mode == "linear":
            cc = np.clip(c, 0, n_in - 1)
            i0 = np.floor(cc).astype(np.int64)
            i1 = np.minimum(i0 + 1, n_in - 1)
            w = (cc - i0).reshape(shape_w)
            yf = y if y.dtype.is_floating_point else y.to(dt)
            y0 = nee.index_select(yf, a, ctx.const(i0))
            y1 = nee.index_select(yf, a, ctx.const(i1))
            wt = ctx.const(w.astype(yf.dtype.np))
            y = y0 + (y1 - y0) * wt
        elif mode == "cubic":
            f = np.floor(c)
            t = c - f
            taps = []
            ws = []
            for j in (-1, 0, 1, 2):
                ij = f.astype(np.int64) + j
                wj = _cubic_w(t - j, A)
                if excl:
                    wj = np.where((ij < 0) | (ij >= n_in), 0.0, wj)
                taps.append(np.clip(ij, 0, n_in - 1))
                ws.append(wj)
            if excl:
                tot = sum(ws)
                ws = [w_ / tot for w_ in ws]
            yf = y if y.dtype.is_floating_point else y.to(dt)
            acc = None
            for ij, wj in zip(taps, ws):
                term = nee.index_select(yf, a, ctx.const(ij)) * ctx.const(wj.reshape(shape_w).astype(yf.dtype.np))
                acc = term if acc is None else acc + term
            y = acc
        else:
            raise LoweringError(f"Resize mode {mode!r} is not supported")
        if outside is not None and outside.any():
            y = nee.where(ctx.const(outside.reshape(shape_w)), nee.full((), ext, dtype=y.dtype), y)
    if y.dtype is not x.dtype:
        y = nee.round(y).to(x.dtype) if not x.dtype.is_floating_point else y.to(x.dtype)
    return y


# ---------------------------------------------------------------- newer normalization / activation ops
@op("RMSNormalization")
def _rms(ctx, node, x, scale):
    axis = node.get("axis", -1) % x.ndim
    eps = node.get("epsilon", 1e-5)
    dims = tuple(range(axis, x.ndim))
    xf = x.to(nee.float32) if x.dtype is nee.float16 else x
    r = 1.0 / nee.sqrt(nee.mean(xf * xf, dims, keepdim=True) + eps)
    return (xf * r).to(x.dtype) * scale


# ---------------------------------------------------------------- losses
def _reduce_loss(loss, w, reduction):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return nee.sum(loss)
    if w is None:
        return nee.mean(loss)
    return nee.sum(loss) / nee.sum(w)


def _nll(ctx, node, logp, target, weight):
    """logp [N, C, d...], target [N, d...] -> (loss, per-element weight or None)."""
    ignore = node.get("ignore_index")
    C = logp.shape[1]
    t = target.to(nee.int64)
    valid = None
    if ignore is not None:
        valid = t != ignore
        t = nee.where(valid, t, nee.zeros((), dtype=nee.int64))
    picked = nee.gather(logp, 1, t.unsqueeze(1)).squeeze(1)
    loss = -picked
    w = None
    if weight is not None:
        w = nee.index_select(weight, 0, t.reshape(-1)).reshape(*t.shape)
    if valid is not None:
        vm = valid.to(logp.dtype)
        w = vm if w is None else w * vm
    if w is not None:
        loss = loss * w
    del C
    return loss, w


@op("NegativeLogLikelihoodLoss")
def _nll_loss(ctx, node, x, target, weight=None):
    loss, w = _nll(ctx, node, x, target, weight)
    return _reduce_loss(loss, w, node.get("reduction", "mean"))


@op("SoftmaxCrossEntropyLoss")
def _sce(ctx, node, x, target, weight=None):
    logp = nee.log_softmax(x, 1)
    loss, w = _nll(ctx, node, logp, target, weight)
    r = _reduce_loss(loss, w, node.get("reduction", "mean"))
    return (r, logp) if node.nout > 1 else r


# ---------------------------------------------------------------- attention (opset 23)
@op("Attention")
def _attention(ctx, node, q, k, v, mask=None, past_k=None, past_v=None, nonpad=None):
    three_d = q.ndim == 3
    if three_d:
        qh, kvh = node.get("q_num_heads"), node.get("kv_num_heads")
        B = q.shape[0]
        q = q.reshape(B, q.shape[1], qh, -1).permute(0, 2, 1, 3)
        k = k.reshape(B, k.shape[1], kvh, -1).permute(0, 2, 1, 3)
        v = v.reshape(B, v.shape[1], kvh, -1).permute(0, 2, 1, 3)
    if past_k is not None:
        k = nee.cat([past_k, k], 2)
    if past_v is not None:
        v = nee.cat([past_v, v], 2)
    present_k, present_v = k, v
    Hq, Hk = q.shape[1], k.shape[1]
    if Hq != Hk:  # grouped-query attention: repeat kv heads
        rep = Hq // Hk
        k = k.unsqueeze(2).expand(k.shape[0], Hk, rep, k.shape[2], k.shape[3]).reshape(k.shape[0], Hq, k.shape[2], -1)
        v = v.unsqueeze(2).expand(v.shape[0], Hk, rep, v.shape[2], v.shape[3]).reshape(v.shape[0], Hq, v.shape[2], -1)
    E = q.shape[-1]
    scale = node.get("scale", 1.0 / math.sqrt(E))
    dt = q.dtype
    s = nee.matmul(q * math.sqrt(scale), k.transpose(-1, -2) * math.sqrt(scale))  # as ONNX: sqrt(scale) each
    L, S = s.shape[-2], s.shape[-1]
    softcap = node.get("softcap", 0.0)
    if softcap and softcap > 0:
        s = nee.tanh(s / softcap) * softcap
    qk0 = s
    lw, rw = node.get("left_window_size", -1), node.get("right_window_size", -1)
    bias = None
    if mask is not None:
        if mask.dtype is nee.bool:
            bias = nee.where(mask, nee.zeros((), dtype=dt), nee.full((), -math.inf, dtype=dt))
        else:
            bias = mask.to(dt)
        if bias.shape[-1] < S:  # mask shorter than total kv length: pad with -inf
            bias = nee.pad(bias, (0, S - bias.shape[-1]), mode="constant", value=-math.inf)
    i_idx = np.arange(L).reshape(1, L, 1)
    j_idx = np.arange(S).reshape(1, 1, S)
    if nonpad is not None:
        npv = np.asarray(ctx.ints(nonpad)).reshape(-1, 1, 1)
        off = npv - L
    else:
        npv = None
        off = np.full((1, 1, 1), past_k.shape[2] if past_k is not None else 0)
    allowed = np.ones((off.shape[0], L, S), dtype=bool)
    if node.get("is_causal", 0):
        allowed &= j_idx <= i_idx + off
    if lw >= 0 or rw >= 0:
        diff = (i_idx + off) - j_idx
        if lw >= 0:
            allowed &= diff <= lw
        if rw >= 0:
            allowed &= -diff <= rw
    if npv is not None:
        allowed &= j_idx < npv
    if not allowed.all():
        cb = np.where(allowed, 0.0, -np.inf).astype(dt.np)
        cb = cb.reshape(cb.shape[0], 1, L, S) if npv is not None else cb.reshape(L, S)
        cb = ctx.const(cb)
        bias = cb if bias is None else bias + cb
    s = s + bias if bias is not None else s
    qk1 = s
    sp = node.get("softmax_precision")
    if sp is not None and sp in (1, 11) and dt is not nee.float32 and dt is not nee.float64:
        p = nee.softmax(s.to(nee.float32), -1).to(dt)
    else:
        p = nee.softmax(s, -1)
    if bias is not None:
        dead = nee.isneginf(nee.amax(bias, (bias.ndim - 1,), keepdim=True))
        p = nee.where(dead, nee.zeros((), dtype=dt), p)
    qk2 = qk0
    y = nee.matmul(p, v)
    if three_d:
        y = y.permute(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    mode = node.get("qk_matmul_output_mode", 0)
    qk = {0: qk0, 1: qk2, 2: qk1, 3: p}.get(mode, qk0)
    outs = [y, present_k, present_v, qk]
    return tuple(outs[:node.nout])


@op("RotaryEmbedding")
def _rope(ctx, node, x, cos, sin, pos=None):
    shp = tuple(x.shape)
    if x.ndim == 4:
        x = x.permute(0, 2, 1, 3)  # B, S, H, D
    B, S = x.shape[0], x.shape[1]
    if x.ndim == 3:
        nh = node.get("num_heads")
        x = x.reshape(B, S, nh, -1)
    D = x.shape[3]
    rd = node.get("rotary_embedding_dim", 0) or D
    xr, xn = x.narrow(3, 0, rd), x.narrow(3, rd, D - rd)
    if pos is not None:
        p = pos.to(nee.int64)
        cos = nee.index_select(cos, 0, p.reshape(-1)).reshape(*p.shape, -1)
        sin = nee.index_select(sin, 0, p.reshape(-1)).reshape(*p.shape, -1)
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    h = rd // 2
    if node.get("interleaved", 0):
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
    else:
        x1, x2 = xr.narrow(3, 0, h), xr.narrow(3, h, h)
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if node.get("interleaved", 0):
        xr = nee.stack([real, imag], -1).reshape(*xr.shape)
    else:
        xr = nee.cat([real, imag], -1)
    y = nee.cat([xr, xn], -1) if D > rd else xr
    if len(shp) == 3:
        return y.reshape(*shp)
    return y.permute(0, 2, 1, 3)


@op("CenterCropPad")
def _ccp(ctx, node, x, shape):
    sh = ctx.ints(shape)
    axes = [a % x.ndim for a in (node.get("axes") or range(x.ndim))]
    for a, s in zip(axes, sh):
        n = x.shape[a]
        if s < n:
            d = n - s
            x = x.narrow(a, d // 2, s)
        elif s > n:
            d = s - n
            lo = d // 2
            pads = [0, 0] * (x.ndim - 1 - a) + [lo, d - lo]
            x = nee.pad(x, tuple(pads), mode="constant", value=0)
    return x


@op("GridSample")
def _grid_sample(ctx, node, x, grid):
    """N-d GridSample (linear / nearest / cubic; zeros / border / reflection padding) as gathers of taps."""
    mode = node.get("mode", "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    pad = node.get("padding_mode", "zeros")
    ac = node.get("align_corners", 0)
    if mode not in ("linear", "nearest", "cubic"):
        raise LoweringError(f"GridSample mode {mode!r} is not supported")
    nsp = x.ndim - 2
    N, C = x.shape[0], x.shape[1]
    sp = list(x.shape[2:])
    out = list(grid.shape[1:-1])
    P = int(np.prod(out, dtype=np.int64))
    xf = x.reshape(N, C, int(np.prod(sp, dtype=np.int64)))
    dt = x.dtype

    def reflect(c, n):
        lo, hi = (0.0, float(n - 1)) if ac else (-0.5, n - 0.5)
        span = hi - lo
        if span <= 0:
            return c * 0.0
        c = nee.abs(c - lo)
        flips = nee.floor(c / span)
        extra = c - flips * span
        return nee.where(nee.remainder(flips, 2.0) == 0, extra + lo, span - extra + lo)

    # grid's last dim is (x, y[, z]): reversed spatial order
    coords = []
    for i in range(nsp):
        g = grid.narrow(grid.ndim - 1, nsp - 1 - i, 1).squeeze(grid.ndim - 1).reshape(N, P)
        n = sp[i]
        c = ((g + 1) / 2) * (n - 1) if ac else ((g + 1) * n - 1) / 2
        # linear / nearest: the coordinate itself is clamped / reflected (PyTorch's grid_sampler_compute_source_index);
        # cubic: the coordinate is kept and each of its taps is clamped / reflected (fix below), as PyTorch's and
        # onnxruntime's bicubic (a point past the border keeps its fractional weights)
        if mode != "cubic":
            if pad == "border":
                c = nee.clamp(c, 0.0, float(n - 1))
            elif pad == "reflection":
                c = reflect(c, n)
        coords.append(c)

    def fix(i, n):
        """(index tensor usable for gathering, validity mask or None) for a tap index."""
        if pad == "zeros":
            return nee.clamp(i, 0, n - 1), (i >= 0) & (i <= n - 1)
        if pad == "border":
            return nee.clamp(i, 0, n - 1), None
        r = reflect(i.to(dt), n).to(nee.int64)
        return nee.clamp(r, 0, n - 1), None

    def gather(idxs):
        lin, valid = None, None
        stride = 1
        for i in reversed(range(nsp)):
            ii, v = fix(idxs[i], sp[i])
            lin = ii * stride if lin is None else lin + ii * stride
            stride *= sp[i]
            if v is not None:
                valid = v if valid is None else valid & v
        g = nee.gather(xf, 2, lin.reshape(N, 1, P).expand(N, C, P))
        if valid is not None:
            g = g * valid.reshape(N, 1, P).to(dt)
        return g

    if mode == "nearest":
        r = gather([nee.round(c).to(nee.int64) for c in coords])
    else:
        taps = (0, 1) if mode == "linear" else (-1, 0, 1, 2)
        base = [nee.floor(c) for c in coords]
        frac = [c - b_ for c, b_ in zip(coords, base)]
        basei = [b_.to(nee.int64) for b_ in base]
        ws = []
        for i in range(nsp):
            t = frac[i]
            if mode == "linear":
                ws.append([1 - t, t])
            else:
                A = -0.75
                ws.append([((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A,
                           ((A + 2) * t - (A + 3)) * t * t + 1,
                           ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1,
                           ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A])
        r = None
        for combo in np.ndindex(*([len(taps)] * nsp)):
            w = None
            for i, k in enumerate(combo):
                w = ws[i][k] if w is None else w * ws[i][k]
            v = gather([basei[i] + taps[k] for i, k in enumerate(combo)]) * w.reshape(N, 1, P)
            r = v if r is None else r + v
    return r.reshape(N, C, *out)


# ---------------------------------------------------------------- recurrent layers (unrolled)
def _act(name, alpha=None, beta=None):
    n = name.lower()
    if n == "sigmoid":
        return nee.sigmoid
    if n == "tanh":
        return nee.tanh
    if n == "relu":
        return nee.relu
    if n == "leakyrelu":
        return lambda t: F.leaky_relu(t, 0.01 if alpha is None else alpha)
    if n == "hardsigmoid":
        return lambda t: nee.clamp(t * (0.2 if alpha is None else alpha) + (0.5 if beta is None else beta), 0.0, 1.0)
    if n == "scaledtanh":
        return lambda t: nee.tanh(t * (1.0 if beta is None else beta)) * (1.0 if alpha is None else alpha)
    if n == "affine":
        return lambda t: t * (1.0 if alpha is None else alpha) + (0.0 if beta is None else beta)
    if n == "softsign":
        return nee.softsign
    if n == "softplus":
        return F.softplus
    if n == "elu":
        return lambda t: F.elu(t, 1.0 if alpha is None else alpha)
    if n == "thresholdedrelu":
        return lambda t: nee.where(t > (1.0 if alpha is None else alpha), t, nee.zeros((), dtype=t.dtype))
    raise LoweringError(f"recurrent activation {name!r} is not supported")


def _acts(node, defaults, ndir):
    names = node.get("activations") or defaults * ndir
    al = node.get("activation_alpha") or []
    be = node.get("activation_beta") or []
    return [_act(n, al[i] if i < len(al) else None, be[i] if i < len(be) else None) for i, n in enumerate(names)]


def _rnn_common(ctx, node, kind, x, W, R, B, seq_lens, h0, c0=None, P=None, qmm=None):
    """``qmm``: per direction, (x -> x @ W^T, h -> h @ R^T) replacing the float products (DynamicQuantizeLSTM)."""
    layout = node.get("layout", 0)
    if layout:
        x = x.transpose(0, 1)
        h0 = h0.transpose(0, 1) if h0 is not None else None
        c0 = c0.transpose(0, 1) if c0 is not None else None
    T, Bn = x.shape[0], x.shape[1]
    valid = None  # (T, B, 1) bool: step t of batch row b is within sequence_lens[b]
    if seq_lens is not None:
        from ..trace.tracer import TraceError
        try:
            full = all(v == T for v in ctx.ints(seq_lens))
        except TraceError:  # lengths computed from the inputs (pack_padded_sequence): masked steps
            full = False
        if not full:
            if tuple(seq_lens.shape) != (Bn,):
                raise LoweringError(f"{kind} node {node.name}: sequence_lens has shape {list(seq_lens.shape)}, "
                                    f"expected [{Bn}] (one length per batch row)")
            steps_t = nee.arange(T, dtype=nee.int64).reshape(T, 1, 1)
            valid = steps_t < seq_lens.to(nee.int64).reshape(1, Bn, 1)
    direction = node.get("direction", "forward")
    ndir = 2 if direction == "bidirectional" else 1
    Hs = node.get("hidden_size") or R.shape[-1]
    G = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    defaults = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[kind]
    acts = _acts(node, defaults, ndir)
    na = len(defaults)
    clip = node.get("clip")
    ys, hs, cs = [], [], []
    for d in range(ndir):
        f = acts[d * na:(d + 1) * na]
        w, r = W.select(0, d), R.select(0, d)
        wt, rt = w.transpose(0, 1), r.transpose(0, 1)
        if B is not None:
            b = B.select(0, d)
            wb, rb = b.narrow(0, 0, G * Hs), b.narrow(0, G * Hs, G * Hs)
        else:
            wb = rb = None
        h = h0.select(0, d) if h0 is not None else nee.zeros(Bn, Hs, dtype=x.dtype)
        c = c0.select(0, d) if c0 is not None else (nee.zeros(Bn, Hs, dtype=x.dtype) if kind == "LSTM" else None)
        p = P.select(0, d) if P is not None else None
        xw = nee.matmul(x, wt) if qmm is None else qmm[d][0](x)  # T, B, G*H
        if wb is not None:
            xw = xw + wb
        reverse = direction == "reverse" or d == 1
        if kind == "GRU":
            lbr = node.get("linear_before_reset", 0)
            if not lbr:
                rzr, rh = rt.narrow(1, 0, 2 * Hs).contiguous(), rt.narrow(1, 2 * Hs, Hs).contiguous()
        steps = range(T - 1, -1, -1) if reverse else range(T)
        out = [None] * T
        for t in steps:
            gx = xw.select(0, t)
            h_prev, c_prev = h, c
            if kind == "GRU":
                # one product of the state per step for the z and r gates (and, linear_before_reset=1 as torch
                # exports, for the candidate too), then narrowed: 3 separate products over narrowed weight views
                # per step made the unrolled trace ~10x slower to compile
                if lbr:
                    hh = nee.matmul(h, rt)
                    if rb is not None:
                        hh = hh + rb
                    hzr = hh
                else:
                    hzr = nee.matmul(h, rzr)
                    if rb is not None:
                        hzr = hzr + rb.narrow(0, 0, 2 * Hs)
                gz = gx.narrow(1, 0, Hs) + hzr.narrow(1, 0, Hs)
                gr = gx.narrow(1, Hs, Hs) + hzr.narrow(1, Hs, Hs)
                if clip:
                    gz, gr = nee.clamp(gz, -clip, clip), nee.clamp(gr, -clip, clip)
                z, rg = f[0](gz), f[0](gr)
                if lbr:
                    gh = gx.narrow(1, 2 * Hs, Hs) + rg * hh.narrow(1, 2 * Hs, Hs)
                else:
                    gh = gx.narrow(1, 2 * Hs, Hs) + nee.matmul(rg * h, rh)
                    if rb is not None:
                        gh = gh + rb.narrow(0, 2 * Hs, Hs)
                if clip:
                    gh = nee.clamp(gh, -clip, clip)
                hn = f[1](gh)
                h = (1 - z) * hn + z * h
            else:
                g = gx + (nee.matmul(h, rt) if qmm is None else qmm[d][1](h))
                if rb is not None:
                    g = g + rb
                if kind == "RNN":
                    if clip:
                        g = nee.clamp(g, -clip, clip)
                    h = f[0](g)
                else:
                    gi, go, gf, gc = (g.narrow(1, k * Hs, Hs) for k in range(4))
                    if p is not None:
                        gi = gi + p.narrow(0, 0, Hs) * c
                        gf = gf + p.narrow(0, 2 * Hs, Hs) * c
                    if clip:
                        gi, gf, gc = (nee.clamp(v, -clip, clip) for v in (gi, gf, gc))
                    i_, f_ = f[0](gi), f[0](gf)
                    if node.get("input_forget", 0):
                        f_ = 1 - i_
                    c = f_ * c + i_ * f[1](gc)
                    if p is not None:
                        go = go + p.narrow(0, Hs, Hs) * c
                    if clip:
                        go = nee.clamp(go, -clip, clip)
                    h = f[0](go) * f[2](c)
            if valid is not None:
                # past a row's length: the state holds (reverse: it starts at the row's last valid step) and
                # Y is 0, as onnxruntime
                m = valid.select(0, t)
                h = nee.where(m, h, h_prev)
                if kind == "LSTM":
                    c = nee.where(m, c, c_prev)
                out[t] = nee.where(m, h, nee.zeros((), dtype=h.dtype))
            else:
                out[t] = h
        ys.append(nee.stack(out, 0))  # T, B, H
        if valid is not None:  # a row of length 0: its final states are 0, as onnxruntime's
            started = valid.select(0, 0)
            h = nee.where(started, h, nee.zeros((), dtype=h.dtype))
            c = nee.where(started, c, nee.zeros((), dtype=c.dtype)) if kind == "LSTM" else c
        hs.append(h)
        cs.append(c)
    Y = nee.stack(ys, 1)  # T, D, B, H
    Yh = nee.stack(hs, 0)
    Yc = nee.stack(cs, 0) if kind == "LSTM" else None
    if layout:
        Y = Y.permute(2, 0, 1, 3)
        Yh = Yh.transpose(0, 1)
        Yc = Yc.transpose(0, 1) if Yc is not None else None
    res = [Y, Yh] + ([Yc] if kind == "LSTM" else [])
    return tuple(res[:node.nout])


@op("RNN")
def _rnn(ctx, node, x, W, R, B=None, seq_lens=None, h0=None):
    return _rnn_common(ctx, node, "RNN", x, W, R, B, seq_lens, h0)


@op("GRU")
def _gru(ctx, node, x, W, R, B=None, seq_lens=None, h0=None):
    return _rnn_common(ctx, node, "GRU", x, W, R, B, seq_lens, h0)


@op("LSTM")
def _lstm(ctx, node, x, W, R, B=None, seq_lens=None, h0=None, c0=None, P=None):
    return _rnn_common(ctx, node, "LSTM", x, W, R, B, seq_lens, h0, c0, P)


def _dyn_qmm(a, wq, w_s, w_zp):
    """onnxruntime's quantized GEMM of DynamicQuantizeLSTM: ``a`` (any leading dims, K last) quantized to uint8
    with one scale / zero point over all of it (DynamicQuantizeLinear's rule), times the int8/uint8 [K, N]
    weights less their zero point, exactly, then scaled by a_scale * w_scale (per tensor or per column)."""
    from .ops_math import dynamic_quant
    qa, scale, zp = dynamic_quant(a)
    qa = qa - zp
    wf = wq.to(nee.float64) - w_zp.to(nee.float64)
    acc = nee.matmul(qa.to(nee.float64), wf)  # integer sums: exact
    return acc.to(a.dtype) * (scale * w_s.to(a.dtype))


@op("com.microsoft:DynamicQuantizeLSTM")
def _dq_lstm(ctx, node, x, W, R, B=None, seq_lens=None, h0=None, c0=None, P=None, w_s=None, w_zp=None, r_s=None,
             r_zp=None):
    """onnxruntime.quantization.quantize_dynamic's LSTM: W [D, I, 4H] and R [D, H, 4H] int8/uint8 with per
    direction (shape [D]) or per column ([D, 4H]) scales / zero points; the input and, at each step, the
    hidden state are quantized dynamically (uint8) before their products, as onnxruntime does."""
    for name, t in (("W", W), ("R", R)):
        if t.dtype not in (nee.int8, nee.uint8):
            raise LoweringError(f"node {node.name} (DynamicQuantizeLSTM): {name} must be int8 or uint8, got {t.dtype}")
    if any(t is None for t in (w_s, w_zp, r_s, r_zp)):
        raise LoweringError(f"node {node.name} (DynamicQuantizeLSTM): W_scale, W_zero_point, R_scale and "
                            f"R_zero_point are required")
    D = W.shape[0]

    def per_dir(t, d):
        return t.select(0, d).reshape(-1) if t.ndim == 2 else t.select(0, d).reshape(())

    qmm = [((lambda a, d=d: _dyn_qmm(a, W.select(0, d), per_dir(w_s, d), per_dir(w_zp, d))),
            (lambda h, d=d: _dyn_qmm(h, R.select(0, d), per_dir(r_s, d), per_dir(r_zp, d)))) for d in range(D)]
    n2 = _Fake("LSTM", dict(node.attrs), nout=node.nout)
    n2.name = node.name
    return _rnn_common(ctx, n2, "LSTM", x, W, R.transpose(1, 2), B, seq_lens, h0, c0, P, qmm=qmm)


@op("ConvInteger")
def _convint(ctx, node, x, w, xz=None, wz=None):
    xf = x.to(nee.float64)
    wf = w.to(nee.float64)
    if xz is not None:
        xf = xf - xz.to(nee.float64)
    if wz is not None:
        wf = wf - (wz.to(nee.float64).reshape(-1, *([1] * (w.ndim - 1))) if wz.numel() > 1 else wz.to(nee.float64))
    pads = _auto_pads(node, list(x.shape[2:]), node.get("kernel_shape") or list(w.shape[2:]),
                      node.get("strides") or [1] * (x.ndim - 2), node.get("dilations") or [1] * (x.ndim - 2))
    if any(pads):  # pad with the zero point (zero after the shift)
        xf = _pad_spatial(xf, pads, 0.0)
    n2 = _Fake("Conv", {k: v for k, v in node.attrs.items() if k not in ("pads", "auto_pad")})
    return _conv(ctx, n2, xf, wf).to(nee.int32)


@op("MaxUnpool")
def _maxunpool(ctx, node, x, idx, out_shape=None):
    nsp = x.ndim - 2
    k = node.get("kernel_shape")
    s = node.get("strides") or [1] * nsp
    pads = node.get("pads") or [0] * (2 * nsp)
    if out_shape is not None:
        shp = ctx.ints(out_shape)
    else:
        shp = list(x.shape[:2]) + [(x.shape[2 + i] - 1) * s[i] - pads[i] - pads[i + nsp] + k[i] for i in range(nsp)]
    total = int(np.prod(shp, dtype=np.int64))
    z = nee.zeros(total, dtype=x.dtype)
    r = nee.scatter(z, 0, idx.reshape(-1).to(nee.int64), x.reshape(-1))
    return r.reshape(*shp)


@op("SwiGLU")
def _swiglu(ctx, node, a, b):
    return a * nee.sigmoid(a * node.get("alpha", 1.0)) * b


@op("TensorScatter")
def _tensor_scatter(ctx, node, past, upd, widx=None):
    axis = node.get("axis", -2) % past.ndim
    B, S, M = past.shape[0], upd.shape[axis], past.shape[axis]
    w = widx.to(nee.int64) if widx is not None else nee.zeros(B, dtype=nee.int64)
    shp = [1] * past.ndim
    shp[0] = B
    ar_shape = [1] * past.ndim
    ar_shape[axis] = S
    idx = w.reshape(*shp) + nee.arange(S, dtype=nee.int64).reshape(*ar_shape)
    if node.get("mode", "linear") == "circular":
        idx = nee.remainder(idx, M)
    idx = idx.expand(*upd.shape).contiguous()
    return nee.scatter(past, axis, idx, upd)


@op("AffineGrid")
def _affine_grid(ctx, node, theta, size):
    sz = ctx.ints(size)
    ac = node.get("align_corners", 0)

    def lin(n):
        if ac:
            return np.linspace(-1, 1, n) if n > 1 else np.zeros(n)
        return (np.arange(n) * 2 + 1) / n - 1

    if len(sz) == 4:
        N, _, H, W = sz
        ys, xs = np.meshgrid(lin(H), lin(W), indexing="ij")
        base = np.stack([xs.ravel(), ys.ravel(), np.ones(H * W)], 1)
        out = (N, H, W, 2)
    else:
        N, _, D, H, W = sz
        zs, ys, xs = np.meshgrid(lin(D), lin(H), lin(W), indexing="ij")
        base = np.stack([xs.ravel(), ys.ravel(), zs.ravel(), np.ones(D * H * W)], 1)
        out = (N, D, H, W, 3)
    b = ctx.const(base.astype(theta.dtype.np))
    return nee.matmul(b, theta.transpose(1, 2)).reshape(*out)


@op("CausalConvWithState")
def _causal_conv(ctx, node, x, w, b=None, state=None):
    act = node.get("activation", "none")
    if act not in ("none", "silu", "swish"):
        raise LoweringError(f"CausalConvWithState activation {act!r} is not supported")
    B, C, _ = x.shape
    k = w.shape[2]
    pad = state if state is not None else nee.zeros(B, C, k - 1, dtype=x.dtype)
    xp = nee.cat([pad, x], 2) if k > 1 else x
    y = F.conv1d(xp, w, b, stride=1, padding=0, dilation=1, groups=C)
    if act != "none":
        y = (y.to(nee.float32) * nee.sigmoid(y.to(nee.float32))).to(x.dtype)
    present = xp.narrow(2, xp.shape[2] - (k - 1), k - 1)
    return (y, present)[:node.nout] if node.nout > 1 else y


@op("LinearAttention")
def _linear_attention(ctx, node, q, k, v, past=None, decay=None, beta=None):
    """Recurrent linear attention (linear / gated / delta / gated_delta), unrolled over time."""
    rule = node.get("update_rule", "gated_delta")
    hq, hk = node.get("q_num_heads"), node.get("kv_num_heads")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    f32 = nee.float32
    B, T = q.shape[0], q.shape[1]
    dk, dv = q.shape[-1] // hq, v.shape[-1] // hk
    grp = hq // hk

    def u4(x, h):
        return x.reshape(B, T, h, -1).permute(0, 2, 1, 3).to(f32)

    q4, k4, v4 = u4(q, hq), u4(k, hk), u4(v, hk)
    if gating:
        d4 = decay.reshape(B, T, hk, 1).permute(0, 2, 1, 3) if decay.shape[-1] == hk else u4(decay, hk)
        d4 = nee.exp(d4.to(f32))
    if delta:
        b4 = beta.reshape(B, T, beta.shape[-1], 1).permute(0, 2, 1, 3).to(f32)
    state = past.to(f32) if past is not None else nee.zeros(B, hk, dk, dv, dtype=f32)
    sc = node.get("scale", 0.0) or 1.0 / math.sqrt(dk)
    outs = []
    for i in range(T):
        qt, kt, vt = q4.select(2, i), k4.select(2, i), v4.select(2, i)
        if gating:
            state = state * d4.select(2, i).unsqueeze(-1)
        if delta:
            retrieved = nee.matmul(kt.unsqueeze(2), state).squeeze(2)  # B, H, dv
            vt = b4.select(2, i) * (vt - retrieved)
        state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
        sr = state
        if grp > 1:
            sr = state.unsqueeze(2).expand(B, hk, grp, dk, dv).reshape(B, hq, dk, dv)
        outs.append(nee.matmul(qt.unsqueeze(2), sr).squeeze(2) * sc)  # B, Hq, dv
    y = nee.stack(outs, 2).permute(0, 2, 1, 3).reshape(B, T, hq * dv).to(q.dtype)
    st = state.to(past.dtype if past is not None else q.dtype)
    return (y, st) if node.nout > 1 else y


@op("Col2Im")
def _col2im(ctx, node, x, image_shape, block_shape):
    """Scatter-add columns back into the (padded) image with static indices, then crop."""
    img, blk = ctx.ints(image_shape), ctx.ints(block_shape)
    n = len(img)
    d = node.get("dilations") or [1] * n
    s = node.get("strides") or [1] * n
    pads = node.get("pads") or [0] * (2 * n)
    padded = [img[i] + pads[i] + pads[i + n] for i in range(n)]
    outs = [(padded[i] - d[i] * (blk[i] - 1) - 1) // s[i] + 1 for i in range(n)]
    N, CB, L = x.shape
    nb = int(np.prod(blk))
    C = CB // nb
    # position in the padded image of (block offset b, sliding location l)
    bo = np.array(list(np.ndindex(*blk)))              # nb x n
    lo = np.array(list(np.ndindex(*outs)))             # L x n
    pos = bo[:, None, :] * np.array(d) + lo[None, :, :] * np.array(s)   # nb x L x n
    strides = np.cumprod([1] + padded[::-1])[:-1][::-1]
    lin = (pos * strides).sum(-1).reshape(-1)          # nb*L
    P = int(np.prod(padded))
    src = x.reshape(N * C, nb * L)
    z = nee.zeros(N * C, P, dtype=x.dtype)
    idx = ctx.const(np.broadcast_to(lin, (N * C, nb * L)).astype(np.int64).copy())
    y = nee.scatter_add(z, 1, idx, src).reshape(N, C, *padded)
    for i in range(n):
        y = y.narrow(2 + i, pads[i], img[i])
    return y


@op("NonMaxSuppression")
def _nms(ctx, node, boxes, scores, max_out=None, iou_thr=None, score_thr=None):
    """Box corners, areas and the score order on nee; the greedy selection (data-dependent output size: a graph
    break) on the host, one Numba pass (:func:`.host_kernels.nms_greedy`)."""
    from .host_kernels import nms_greedy
    mo = max(int(ctx.scalar(max_out, 0)), 0)
    it = float(ctx.scalar(iou_thr, 0.0))
    st = ctx.scalar(score_thr, None)
    if node.get("center_point_box", 0):
        xc, yc, w, h = (boxes.narrow(2, i, 1).squeeze(2) for i in range(4))
        x1, x2, y1, y2 = xc - w / 2, xc + w / 2, yc - h / 2, yc + h / 2
    else:
        a, b_, c, d = (boxes.narrow(2, i, 1).squeeze(2) for i in range(4))
        y1, y2 = nee.minimum(a, c), nee.maximum(a, c)
        x1, x2 = nee.minimum(b_, d), nee.maximum(b_, d)
    area = (x2 - x1) * (y2 - y1)
    _, order = nee.sort(scores, dim=-1, descending=True, stable=True)
    sel = nms_greedy(*(ctx.static(t) for t in (x1, y1, x2, y2, area, scores, order)), mo, it, st)
    return ctx.const(sel, own=True)


@op("ai.onnx.preview:FlexAttention")
def _flex_attention(ctx, node, q, k, v):
    from .ops_control import run_subgraph
    E = q.shape[-1]
    scale = node.get("scale", 1.0 / math.sqrt(E))
    Hq, Hk = q.shape[1], k.shape[1]
    if Hq != Hk:
        rep = Hq // Hk
        k = k.unsqueeze(2).expand(k.shape[0], Hk, rep, k.shape[2], k.shape[3]).reshape(k.shape[0], Hq, k.shape[2], -1)
        v = v.unsqueeze(2).expand(v.shape[0], Hk, rep, v.shape[2], v.shape[3]).reshape(v.shape[0], Hq, v.shape[2], -1)
    sq = float(np.sqrt(np.float32(scale)))
    s = nee.matmul(q * sq, k.transpose(-1, -2) * sq)
    sp = node.get("softmax_precision")
    if sp is not None:
        cd = nee_dtype(ONNX_TO_NP[sp])
    else:
        cd = nee.float32 if q.dtype.itemsize < 4 else q.dtype
    s = s.to(cd)
    if node.get("score_mod") is not None:
        s = run_subgraph(ctx, node.get("score_mod"), ctx.scope, [s])[0].to(cd)
    p = nee.softmax(s, -1)
    if node.get("prob_mod") is not None:
        p = run_subgraph(ctx, node.get("prob_mod"), ctx.scope, [p])[0].to(cd)
    return nee.matmul(p, v.to(cd)).to(v.dtype)
