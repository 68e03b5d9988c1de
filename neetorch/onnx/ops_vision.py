"""ONNX detection / vision ops: RoiAlign, MaxRoiPool, DeformConv, QLinearConv (a quantized Conv), onnxruntime's
com.microsoft quantized ops (QLinearAdd/Mul/Sigmoid/LeakyRelu/Softmax/Concat/Where/AveragePool/
GlobalAveragePool/ReduceMean, QGemm: the QOperator format of onnxruntime.quantization), ImageDecoder.

Each lowers to gathers, elementwise math and matmul/conv on nee tensors, vectorized over
ROIs, channels and output positions.  Semantics follow ONNX's reference implementations
(``onnx/reference/ops/op_roi_align.py``, ``op_deform_conv.py``, ``op_qlinear_conv.py``),
including their quirks (RoiAlign's max mode takes the max of the four *weighted* corners).
ImageDecoder (encoded bytes -> an HWC uint8 image whose shape only the bytes know) is a host node
decoded with Pillow, as ONNX's reference does.
"""
from __future__ import annotations

import numpy as np

import neetorch as nee

from .lowering import LoweringError, op
from .ops_nn import _auto_pads, _conv, _Fake, _pad_spatial


def _work_dtype(dt):
    """The float dtype coordinates and accumulations are computed in (float32 below float64)."""
    return nee.float64 if dt == nee.float64 else nee.float32


# ---------------------------------------------------------------- RoiAlign
_GATHER_BUDGET = 1 << 22  # gathered values per corner and block of sample rows (memory bound)


def _roi_axis(start, bin_size, grid, n_bins, n_grid, size, dt, ctx):
    """Sample coordinates along one axis, per ROI: indices, weights and masks of the two taps.

    start, bin_size, grid: [R] tensors (grid: samples per bin, as float).  Returns tensors of
    shape [R, n_bins, n_grid]: (low index, high index, low weight, high weight) and the
    [R, 1, n_grid] in-grid mask.  Weights are 0 for samples outside [-1, size] (the reference
    zeroes them) and for samples past the ROI's own grid count (the count varies per ROI when
    sampling_ratio is 0; such samples are padding).
    """
    R = start.shape[0]
    b = ctx.const(np.arange(n_bins, dtype=np.float32)).to(dt).reshape(1, n_bins, 1)
    g = ctx.const(np.arange(n_grid, dtype=np.float32) + 0.5).to(dt).reshape(1, 1, n_grid)
    s, bs, gr = start.reshape(R, 1, 1), bin_size.reshape(R, 1, 1), grid.reshape(R, 1, 1)
    in_grid = g < gr
    # same association as the reference: start + p*bin + (i+.5)*bin/grid (grid 0: an empty bin, no samples)
    c = s + b * bs + g * bs / nee.clamp_min(gr, 1.0)
    valid = ((c >= -1.0) & (c <= float(size))).to(dt) * in_grid.to(dt)
    c = nee.clamp_min(c, 0.0)
    lo = nee.floor(c)
    top = lo >= float(size - 1)
    lo = nee.where(top, nee.full_like(lo, float(size - 1)), lo)
    c = nee.where(top, lo, c)
    hi = nee.where(top, lo, lo + 1.0)
    frac = c - lo
    return lo.to(nee.int64), hi.to(nee.int64), (1.0 - frac) * valid, frac * valid, in_grid


@op("RoiAlign")
def _roi_align(ctx, node, x, rois, batch_indices):
    if x.ndim != 4:
        raise LoweringError(f"RoiAlign expects X of rank 4 (N, C, H, W), got shape {tuple(x.shape)}")
    if rois.ndim != 2 or rois.shape[1] != 4:
        raise LoweringError(f"RoiAlign expects rois of shape (num_rois, 4), got {tuple(rois.shape)}")
    if batch_indices.ndim != 1 or batch_indices.shape[0] != rois.shape[0]:
        raise LoweringError(f"RoiAlign: batch_indices shape {tuple(batch_indices.shape)} does not match "
                            f"rois shape {tuple(rois.shape)}")
    mode = node.get("mode", "avg").lower()
    if mode not in ("avg", "max"):
        raise LoweringError(f"RoiAlign mode {mode!r} is not supported (avg or max)")
    PH, PW = node.get("output_height", 1), node.get("output_width", 1)
    sr = node.get("sampling_ratio", 0)
    scale = float(node.get("spatial_scale", 1.0))
    ctm = node.get("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise LoweringError(f"RoiAlign coordinate_transformation_mode {ctm!r} is not supported")
    half = ctm == "half_pixel"
    N, C, H, W = x.shape
    R = rois.shape[0]
    dt = _work_dtype(x.dtype)
    if R == 0:
        return nee.zeros(0, C, PH, PW, dtype=x.dtype, device=x.device)
    off = 0.5 if half else 0.0
    r = rois.to(dt)
    x0, y0, x1, y1 = (r.narrow(1, i, 1).squeeze(1) * scale - off for i in range(4))
    rw, rh = x1 - x0, y1 - y0
    if not half:  # malformed ROIs become 1x1
        rw, rh = nee.clamp_min(rw, 1.0), nee.clamp_min(rh, 1.0)
    bh, bw = rh / float(PH), rw / float(PW)
    if sr > 0:
        gh = gw = nee.full((R,), float(sr), dtype=dt, device=x.device)
        GH = GW = int(sr)
    else:  # adaptive: ceil(roi size / bins) samples per bin, per ROI (the largest count is needed statically)
        gh, gw = nee.ceil(rh / float(PH)), nee.ceil(rw / float(PW))
        GH = max(int(ctx.static(nee.amax(gh, 0), "RoiAlign sampling grid")), 0)
        GW = max(int(ctx.static(nee.amax(gw, 0), "RoiAlign sampling grid")), 0)
    count = nee.clamp_min(gh * gw, 1.0).reshape(R, 1, 1, 1)
    if GH == 0 or GW == 0:  # no ROI has a sample: the reference's initial value, 0
        return nee.zeros(R, C, PH, PW, dtype=x.dtype, device=x.device)
    ylo, yhi, wyl, wyh, gy = _roi_axis(y0, bh, gh, PH, GH, H, dt, ctx)
    xlo, xhi, wxl, wxh, gx = _roi_axis(x0, bw, gw, PW, GW, W, dt, ctx)
    # features as rows of [N*H*W, C]: one index_select per corner gathers every channel
    feat = x.permute(0, 2, 3, 1).reshape(N * H * W, C).to(dt)
    base = (batch_indices.to(nee.int64) * (H * W)).reshape(R, 1, 1)
    # bounded gathers: rows of samples in blocks of at most _GATHER_BUDGET values per corner
    per_row = R * PH * PW * GW * C
    step = max(1, min(GH, _GATHER_BUDGET // max(per_row, 1)))
    acc = None
    for i0 in range(0, GH, step):
        n = min(step, GH - i0)
        rows = []
        for ry, ay in ((ylo, wyl), (yhi, wyh)):
            ry, ay = ry.narrow(2, i0, n), ay.narrow(2, i0, n)  # [R, PH, n]
            for rx, ax in ((xlo, wxl), (xhi, wxh)):
                idx = (base + ry * W).reshape(R, PH, n, 1, 1) + rx.reshape(R, 1, 1, PW, GW)
                w = ay.reshape(R, PH, n, 1, 1) * ax.reshape(R, 1, 1, PW, GW)
                v = nee.index_select(feat, 0, idx.reshape(-1)).reshape(R, PH, n, PW, GW, C)
                rows.append(v * w.reshape(R, PH, n, PW, GW, 1))
        if mode == "avg":
            blk = nee.sum(rows[0] + rows[1] + rows[2] + rows[3], (2, 4))  # [R, PH, PW, C]
            acc = blk if acc is None else acc + blk
        else:
            m = nee.maximum(nee.maximum(rows[0], rows[1]), nee.maximum(rows[2], rows[3]))
            # samples outside the map count as 0 (zero weights); samples past the ROI's grid are skipped
            keep = gy.narrow(2, i0, n).reshape(R, 1, n, 1, 1, 1) & gx.reshape(R, 1, 1, 1, GW, 1)
            m = nee.where(keep, m, nee.full_like(m, float("-inf")))
            blk = nee.amax(m, (2, 4))
            acc = blk if acc is None else nee.maximum(acc, blk)
    y = acc.permute(0, 3, 1, 2)
    if mode == "avg":
        y = y / count
    elif sr <= 0:  # a ROI with an empty grid keeps the reference's initial value, 0
        y = nee.where((gh * gw == 0).reshape(R, 1, 1, 1), nee.zeros_like(y), y)
    return y.to(x.dtype)


# ---------------------------------------------------------------- MaxRoiPool
def _round_half_away(v):
    """C's ``round`` (halves away from zero, as onnxruntime's RoiPool; nee.round rounds halves to even)."""
    return nee.sign(v) * nee.floor(nee.abs(v) + 0.5)


def _roi_bins(start, end, n_bins, size, dt):
    """[R, n_bins] int64 (low, high) bounds of Caffe's RoI pooling bins along one axis, clipped to [0, size]."""
    extent = nee.clamp_min(end - start + 1.0, 1.0)               # the RoI's size in cells (at least 1)
    bin_size = (extent / float(n_bins)).reshape(-1, 1)
    p = nee.arange(n_bins, dtype=dt, device=start.device).reshape(1, n_bins)
    s0 = start.reshape(-1, 1)
    lo = nee.clamp(nee.floor(p * bin_size) + s0, 0.0, float(size))
    hi = nee.clamp(nee.ceil((p + 1.0) * bin_size) + s0, 0.0, float(size))
    return lo.to(nee.int64), hi.to(nee.int64)


@op("MaxRoiPool")
def _max_roi_pool(ctx, node, x, rois):
    """Caffe's RoI max pooling (onnxruntime's RoiPool kernel): each RoI ``(batch, x1, y1, x2, y2)`` is scaled by
    ``spatial_scale`` and rounded, cut into ``pooled_shape`` bins (floor / ceil bounds), and each bin's maximum
    taken (0 for an empty bin).  Vectorized over RoIs, channels and bins: the maximum over a bin's columns, then over
    its rows, as masked reductions, in blocks of RoIs that bound the intermediate's size."""
    if x.ndim != 4:
        raise LoweringError(f"{node.name}: X must be 4-D (N, C, H, W), got shape {tuple(x.shape)}")
    if rois.ndim != 2 or rois.shape[1] != 5:
        raise LoweringError(f"{node.name}: rois must be (num_rois, 5) [batch, x1, y1, x2, y2], got shape "
                            f"{tuple(rois.shape)}")
    ps = node.get("pooled_shape")
    if ps is None or len(ps) != 2 or min(ps) < 1:
        raise LoweringError(f"{node.name}: pooled_shape must be two positive ints, got {ps}")
    PH, PW = int(ps[0]), int(ps[1])
    scale = float(node.get("spatial_scale", 1.0))
    N, C, H, W = x.shape
    R = rois.shape[0]
    if R == 0:
        return nee.zeros(0, C, PH, PW, dtype=x.dtype, device=x.device)
    dt = _work_dtype(x.dtype)
    r = rois.to(dt)
    b = r.select(1, 0).to(nee.int64)
    x0, y0, x1, y1 = (_round_half_away(r.select(1, i) * scale) for i in range(1, 5))
    hlo, hhi = _roi_bins(y0, y1, PH, H, dt)
    wlo, whi = _roi_bins(x0, x1, PW, W, dt)
    hs = nee.arange(H, device=x.device).reshape(1, 1, H)
    ws = nee.arange(W, device=x.device).reshape(1, 1, W)
    mh = (hs >= hlo.unsqueeze(2)) & (hs < hhi.unsqueeze(2))       # [R, PH, H]
    mw = (ws >= wlo.unsqueeze(2)) & (ws < whi.unsqueeze(2))       # [R, PW, W]
    empty = ((hhi <= hlo).reshape(R, 1, PH, 1) | (whi <= wlo).reshape(R, 1, 1, PW))
    neg = nee.full((), float("-inf"), dtype=x.dtype, device=x.device)
    per = C * H * max(PW * W, PH * PW)
    step = max(1, min(R, _GATHER_BUDGET // max(per, 1)))
    outs = []
    for i0 in range(0, R, step):
        n = min(step, R - i0)
        xb = nee.index_select(x, 0, b.narrow(0, i0, n))                                  # [n, C, H, W]
        cols = nee.where(mw.narrow(0, i0, n).reshape(n, 1, 1, PW, W), xb.unsqueeze(3), neg)
        t = nee.amax(cols, -1)                                                              # [n, C, H, PW]
        rows = nee.where(mh.narrow(0, i0, n).reshape(n, 1, PH, H, 1), t.unsqueeze(2), neg)
        outs.append(nee.amax(rows, 3))                                                      # [n, C, PH, PW]
    y = outs[0] if len(outs) == 1 else nee.cat(outs, 0)
    return nee.where(empty, nee.zeros((), dtype=x.dtype, device=x.device), y)


# ---------------------------------------------------------------- DeformConv
@op("DeformConv")
def _deform_conv(ctx, node, x, w, offset, b=None, mask=None):
    """2-D deformable convolution: bilinear samples (zero outside) at offset taps, then a grouped matmul."""
    if x.ndim != 4:
        raise LoweringError(f"DeformConv with {x.ndim - 2} spatial dims is not supported (2-D only, as in "
                            f"ONNX's reference); X shape {tuple(x.shape)}")
    N, C, H, W_ = x.shape
    OC = w.shape[0]
    g = node.get("group", 1)
    og = node.get("offset_group", 1)
    kh, kw = node.get("kernel_shape") or list(w.shape[2:])
    sh, sw = node.get("strides") or [1, 1]
    dh, dw = node.get("dilations") or [1, 1]
    pads = node.get("pads") or [0, 0, 0, 0]
    if C != w.shape[1] * g or OC % g:
        raise LoweringError(f"DeformConv: X shape {tuple(x.shape)} and W shape {tuple(w.shape)} do not match "
                            f"group={g}")
    if C % og:
        raise LoweringError(f"DeformConv: {C} input channels are not divisible by offset_group={og}")
    K = kh * kw
    OH = (H + pads[0] + pads[2] - ((kh - 1) * dh + 1)) // sh + 1
    OW = (W_ + pads[1] + pads[3] - ((kw - 1) * dw + 1)) // sw + 1
    if tuple(offset.shape) != (N, og * K * 2, OH, OW):
        raise LoweringError(f"DeformConv: offset shape {tuple(offset.shape)} should be {(N, og * K * 2, OH, OW)} "
                            f"(offset_group={og}, kernel {kh}x{kw}, output {OH}x{OW})")
    if mask is not None and tuple(mask.shape) != (N, og * K, OH, OW):
        raise LoweringError(f"DeformConv: mask shape {tuple(mask.shape)} should be {(N, og * K, OH, OW)}")
    dt = _work_dtype(x.dtype)
    P = OH * OW
    off = offset.to(dt).reshape(N, og, K, 2, P)
    # undeformed tap positions [K, P]: top-left of the window + the tap's dilated position
    ki, kj = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
    oi, oj = np.meshgrid(np.arange(OH), np.arange(OW), indexing="ij")
    py = (ki.reshape(K, 1) * dh + oi.reshape(1, P) * sh - pads[0]).astype(np.float32)
    px = (kj.reshape(K, 1) * dw + oj.reshape(1, P) * sw - pads[1]).astype(np.float32)
    cy = ctx.const(py).to(dt) + off.narrow(3, 0, 1).squeeze(3)  # [N, og, K, P]
    cx = ctx.const(px).to(dt) + off.narrow(3, 1, 1).squeeze(3)
    y0, x0 = nee.floor(cy), nee.floor(cx)
    fy, fx = cy - y0, cx - x0
    y0, x0 = y0.to(nee.int64), x0.to(nee.int64)
    cpg = C // og
    xg = x.to(dt).reshape(N, og, cpg, H * W_)
    cols = None
    for yi, wy in ((y0, 1.0 - fy), (y0 + 1, fy)):
        for xi, wx in ((x0, 1.0 - fx), (x0 + 1, fx)):
            inside = ((yi >= 0) & (yi <= H - 1) & (xi >= 0) & (xi <= W_ - 1)).to(dt)
            lin = nee.clamp(yi, 0, H - 1) * W_ + nee.clamp(xi, 0, W_ - 1)  # [N, og, K, P]
            v = nee.gather(xg, 3, lin.reshape(N, og, 1, K * P).expand(N, og, cpg, K * P))
            t = v * (wy * wx * inside).reshape(N, og, 1, K * P)
            cols = t if cols is None else cols + t
    if mask is not None:
        cols = cols * mask.to(dt).reshape(N, og, 1, K * P)
    # [N, C, K, P] -> per conv group [N, g, C/g*K, P]; weights [g, OC/g, C/g*K]
    cols = cols.reshape(N, g, (C // g) * K, P)
    wm = w.to(dt).reshape(g, OC // g, (C // g) * K)
    y = nee.matmul(wm.unsqueeze(0), cols).reshape(N, OC, OH, OW)
    if b is not None:
        y = y + b.to(dt).reshape(1, OC, 1, 1)
    return y.to(x.dtype)


# ---------------------------------------------------------------- QLinearConv
@op("QLinearConv")
def _qlinear_conv(ctx, node, x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, b=None):
    """Integer conv (exact in float64) of zero-point-shifted inputs, rescaled and saturated to y's type."""
    for name, t in (("x", x), ("w", w)):
        if t.dtype not in (nee.int8, nee.uint8):
            raise LoweringError(f"QLinearConv: {name} must be int8 or uint8, got {t.dtype}")
    nsp = x.ndim - 2
    xf = x.to(nee.float64)
    if x_zp is not None:
        xf = xf - x_zp.to(nee.float64).reshape(())
    wf = w.to(nee.float64)
    if w_zp is not None:
        wz = w_zp.to(nee.float64)
        if wz.ndim == 1 and wz.shape[0] == w.shape[0] and wz.shape[0] > 1:
            wz = wz.reshape(-1, *([1] * (w.ndim - 1)))
        else:
            wz = wz.reshape(())
        wf = wf - wz
    pads = _auto_pads(node, list(x.shape[2:]), node.get("kernel_shape") or list(w.shape[2:]),
                      node.get("strides") or [1] * nsp, node.get("dilations") or [1] * nsp)
    if any(pads):  # pad the shifted input with 0 (= the zero point before the shift)
        xf = _pad_spatial(xf, pads, 0.0)
    n2 = _Fake("Conv", {k: v for k, v in node.attrs.items() if k not in ("pads", "auto_pad")})
    res = _conv(ctx, n2, xf, wf, b.to(nee.float64) if b is not None else None)
    # scale in float32 as the reference does (x_scale * w_scale / y_scale), applied to the exact sum
    ws = w_s.to(nee.float32)
    if ws.numel() > 1:
        if ws.ndim != 1 or ws.shape[0] != w.shape[0]:
            raise LoweringError(f"QLinearConv: w_scale shape {tuple(w_s.shape)} must be a scalar or "
                                f"({w.shape[0]},) (one per output channel)")
        ws = ws.reshape(1, -1, *([1] * nsp))
    else:
        ws = ws.reshape(())
    scale = (x_s.to(nee.float32).reshape(()) * ws / y_s.to(nee.float32).reshape(())).to(nee.float64)
    r = res * scale
    out_dt = y_zp.dtype if y_zp is not None else x.dtype
    if y_zp is not None:
        r = r + y_zp.to(nee.float64).reshape(())
    info = np.iinfo(out_dt.np)
    return nee.round(nee.clamp(r, float(info.min), float(info.max))).to(out_dt)


# ---------------------------------------------------------------- com.microsoft QOperator ops
# What onnxruntime.quantization.quantize_static(quant_format=QOperator) writes around QLinearConv /
# QLinearMatMul: uint8 / int8 tensors with a (scale, zero point) each.  Each op dequantizes to float32,
# computes, and requantizes (round half to even, saturate) to the output's type, in onnxruntime's
# formulas (float32 scale ratios applied to the integer sums) so results match it to the integer.
def _q_check(node, name, t):
    if t.dtype not in (nee.int8, nee.uint8):
        raise LoweringError(f"node {node.name} ({node.op_type}): {name} must be int8 or uint8, got {t.dtype}")


def _zp(zp, like):
    """A zero point as float32 (0 when absent); per-tensor only (onnxruntime's contrib ops)."""
    if zp is None:
        return nee.zeros((), dtype=nee.float32)
    return zp.to(nee.float32).reshape(())


def _sc(s):
    return s.to(nee.float32).reshape(())


def _requant(node, y, y_s, y_zp, out_dt):
    """float32 ``y`` (already divided by the output scale when ``y_s`` is None) to ``out_dt``."""
    if y_s is not None:
        y = y / _sc(y_s)
    y = nee.round(y)
    if y_zp is not None:
        y = y + _zp(y_zp, None)
    info = np.iinfo(out_dt.np)
    return nee.clamp(y, float(info.min), float(info.max)).to(out_dt)


def _deq(x, s, zp):
    return (x.to(nee.float32) - _zp(zp, x)) * _sc(s)


def _out_dt(node, y_zp, x):
    return y_zp.dtype if y_zp is not None else x.dtype


@op("com.microsoft:QLinearAdd")
def _ql_add(ctx, node, a, a_s, a_zp, b, b_s, b_zp, c_s, c_zp=None):
    _q_check(node, "A", a)
    _q_check(node, "B", b)
    cs = _sc(c_s)
    y = (a.to(nee.float32) - _zp(a_zp, a)) * (_sc(a_s) / cs) + (b.to(nee.float32) - _zp(b_zp, b)) * (_sc(b_s) / cs)
    return _requant(node, y, None, c_zp, _out_dt(node, c_zp, a))


@op("com.microsoft:QLinearMul")
def _ql_mul(ctx, node, a, a_s, a_zp, b, b_s, b_zp, c_s, c_zp=None):
    _q_check(node, "A", a)
    _q_check(node, "B", b)
    ratio = _sc(a_s) * _sc(b_s) / _sc(c_s)
    y = (a.to(nee.float32) - _zp(a_zp, a)) * (b.to(nee.float32) - _zp(b_zp, b)) * ratio
    return _requant(node, y, None, c_zp, _out_dt(node, c_zp, a))


def _ql_unary(fn):
    def f(ctx, node, x, x_s, x_zp, y_s, y_zp=None):
        _q_check(node, "X", x)
        return _requant(node, fn(node, _deq(x, x_s, x_zp)), y_s, y_zp, _out_dt(node, y_zp, x))
    return f


op("com.microsoft:QLinearSigmoid")(_ql_unary(lambda node, t: nee.sigmoid(t)))
op("com.microsoft:QLinearLeakyRelu")(_ql_unary(
    lambda node, t: nee.where(t >= 0, t, t * float(node.get("alpha", 0.01)))))


def _channels_last(node, x):
    if node.get("channels_last", 0):
        return x.movedim(-1, 1)
    return x


def _back(node, y):
    return y.movedim(1, -1) if node.get("channels_last", 0) else y


@op("com.microsoft:QLinearGlobalAveragePool")
def _ql_gap(ctx, node, x, x_s, x_zp, y_s, y_zp=None):
    _q_check(node, "X", x)
    xc = _channels_last(node, x)
    axes = tuple(range(2, xc.ndim))
    n = 1
    for a in axes:
        n *= xc.shape[a]
    # onnxruntime: the exact integer sum less n * zero point, times x_scale / (y_scale * n)
    acc = nee.sum(xc.to(nee.float64), axes, keepdim=True) - _zp(x_zp, x).to(nee.float64) * float(n)
    scale = _sc(x_s) / (_sc(y_s) * float(n))
    y = acc.to(nee.float32) * scale
    return _back(node, _requant(node, y, None, y_zp, _out_dt(node, y_zp, x)))


@op("com.microsoft:QLinearAveragePool")
def _ql_avgpool(ctx, node, x, x_s, x_zp, y_s, y_zp=None):
    from .ops_nn import _pool_taps
    _q_check(node, "X", x)
    xf = _channels_last(node, _deq(x, x_s, x_zp))
    nsp = xf.ndim - 2
    k = node.get("kernel_shape")
    s = node.get("strides") or [1] * nsp
    d = node.get("dilations") or [1] * nsp
    pads = _auto_pads(node, list(xf.shape[2:]), k, s, d)
    # the window's taps summed in row-major order, then / count: onnxruntime's float sum, to the bit (a
    # value halfway between two quanta rounds on it)
    y = _pool_taps(ctx, xf, k, s, d, pads, bool(node.get("ceil_mode", 0)), "avg",
                   bool(node.get("count_include_pad", 0)))
    # onnxruntime rounds y / y_scale + y_zero_point (the zero point added before rounding half to even)
    y = y / _sc(y_s) + _zp(y_zp, x)
    return _back(node, _requant(node, y, None, None, _out_dt(node, y_zp, x)))


@op("com.microsoft:QLinearConcat")
def _ql_concat(ctx, node, y_s, y_zp, *xs):
    if len(xs) % 3 or not xs:
        raise LoweringError(f"node {node.name} (QLinearConcat): inputs after Y_scale, Y_zero_point must be "
                            f"(X, X_scale, X_zero_point) triples, got {len(xs)}")
    out_dt = y_zp.dtype if y_zp is not None else xs[0].dtype
    parts = []
    for k in range(0, len(xs), 3):
        x, s, zp = xs[k:k + 3]
        _q_check(node, f"input {k // 3}", x)
        parts.append(_requant(node, _deq(x, s, zp), y_s, y_zp, out_dt))
    return nee.cat(parts, node.get("axis") % parts[0].ndim)


@op("com.microsoft:QLinearSoftmax")
def _ql_softmax(ctx, node, x, x_s, x_zp, y_s, y_zp=None):
    from .ops_math import _softmax
    _q_check(node, "X", x)
    # the attribute ``opset`` says which Softmax's axis rule applies (< 13: flatten from axis)
    sub = type(ctx)(ctx.device, int(node.get("opset", 13)), ctx.program)
    n2 = _Fake("Softmax", {"axis": node.get("axis", -1 if sub.opset >= 13 else 1)})
    y = _softmax(sub, n2, _deq(x, x_s, x_zp))
    return _requant(node, y, y_s, y_zp, _out_dt(node, y_zp, x))


@op("com.microsoft:QLinearReduceMean")
def _ql_reduce_mean(ctx, node, x, x_s, x_zp, y_s, y_zp=None):
    _q_check(node, "data", x)
    axes = node.get("axes")
    axes = tuple(a % x.ndim for a in axes) if axes else tuple(range(x.ndim))
    y = nee.mean(_deq(x, x_s, x_zp), axes, keepdim=bool(node.get("keepdims", 1)))
    return _requant(node, y, y_s, y_zp, _out_dt(node, y_zp, x))


@op("com.microsoft:QLinearWhere")
def _ql_where(ctx, node, cond, x, x_s, x_zp, y, y_s, y_zp, z_s, z_zp=None):
    _q_check(node, "X", x)
    _q_check(node, "Y", y)
    out_dt = _out_dt(node, z_zp, x)
    xq = _requant(node, _deq(x, x_s, x_zp), z_s, z_zp, out_dt)
    yq = _requant(node, _deq(y, y_s, y_zp), z_s, z_zp, out_dt)
    return nee.where(cond.to(nee.bool), xq, yq)


@op("com.microsoft:QGemm")
def _qgemm(ctx, node, a, a_s, a_zp, b, b_s, b_zp, c=None, y_s=None, y_zp=None):
    """alpha * a_scale * b_scale * ((A - a_zp) @ (B - b_zp) + C): C is int32 at that scale; float32 out
    without y_scale, else requantized.  b_scale / b_zp per tensor or per output column."""
    _q_check(node, "A", a)
    _q_check(node, "B", b)
    af = a.to(nee.float64) - _zp(a_zp, a).to(nee.float64)
    if node.get("transA", 0):
        af = af.transpose(0, 1)
    tb = node.get("transB", 0)
    bf = b.to(nee.float64)
    n_out = b.shape[0] if tb else b.shape[1]

    def per_col(t, what):
        if t.numel() == 1:
            return t.reshape(())
        if t.ndim != 1 or t.shape[0] != n_out:
            raise LoweringError(f"node {node.name} (QGemm): {what} shape {list(t.shape)} must be a scalar or "
                                f"[{n_out}] (one per output column)")
        return t.reshape(-1, 1) if tb else t

    if b_zp is not None:
        bf = bf - per_col(b_zp.to(nee.float64), "B_zero_point")
    acc = nee.matmul(af, bf.transpose(0, 1) if tb else bf)  # exact: integer sums in float64
    if c is not None:
        acc = acc + c.to(nee.float64)
    bs = b_s.to(nee.float32)
    bs = bs.reshape(()) if bs.numel() == 1 else per_col(bs, "B_scale").reshape(-1)
    scale = _sc(a_s) * bs * float(node.get("alpha", 1.0))
    if y_s is None:
        return acc.to(nee.float32) * scale
    return _requant(node, acc.to(nee.float32) * (scale / _sc(y_s)), None, y_zp, _out_dt(node, y_zp, a))


# ---------------------------------------------------------------- ImageDecoder (a host node)
_PIXEL_FORMATS = ("RGB", "BGR", "Grayscale")


def _image_decoder(ctx, node, encoded):
    """``encoded``: a 1-D uint8 tensor holding one image file (any format Pillow reads: JPEG, PNG, BMP,
    TIFF, WebP, PNM, JPEG 2000 where Pillow was built with it); the output is [H, W, 3] uint8 in RGB or
    BGR order, or [H, W, 1] for Grayscale (Pillow's ``convert("L")``, ITU-R 601-2 luma, like the
    reference).  Images that are not RGB (palette, RGBA, CMYK, 16-bit) are converted to RGB first."""
    import io

    from .ops_string import _np
    fmt = node.get("pixel_format", "RGB")
    fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
    if fmt not in _PIXEL_FORMATS:
        raise LoweringError(f"node {node.name} (ImageDecoder): pixel_format {fmt!r} is not one of "
                            f"{', '.join(_PIXEL_FORMATS)}")
    data = _np(encoded)
    if data is None or data.dtype != np.uint8 or data.ndim != 1:
        got = "nothing" if data is None else f"a {data.dtype} tensor of shape {list(data.shape)}"
        raise LoweringError(f"node {node.name} (ImageDecoder): encoded_stream must be a 1-D uint8 tensor, got {got}")
    try:
        import PIL.Image
    except ImportError:
        raise LoweringError(f"node {node.name} (ImageDecoder): decoding images needs Pillow "
                            "(python3 -m pip install pillow, or neetorch's [onnx] extra)") from None
    try:
        img = PIL.Image.open(io.BytesIO(data.tobytes()))
        img.load()
        if fmt == "Grayscale":
            out = np.asarray(img.convert("L"), dtype=np.uint8)[:, :, None]
        else:
            out = np.asarray(img if img.mode == "RGB" else img.convert("RGB"), dtype=np.uint8)
            if fmt == "BGR":
                out = out[:, :, ::-1]
    except (OSError, ValueError, SyntaxError, PIL.Image.DecompressionBombError) as e:
        raise LoweringError(f"node {node.name} (ImageDecoder): cannot decode the {data.size}-byte stream as an "
                            f"image: {e}") from None
    return ctx.const(np.ascontiguousarray(out))


def _register_host_ops():
    from .ops_string import host_op
    host_op("ImageDecoder")(_image_decoder)


_register_host_ops()
