"""Convolution, pooling and resampling (``torch.nn.functional`` semantics).

Every op here is defined on 4-D (N, C, H, W) tensors; the 1-D forms and unbatched
inputs are views onto the 2-D ops (an extra size-1 dim), so a device implements
each op once.  Frontends validate arguments with PyTorch's messages and resolve
``padding='same'``, ``ceil_mode``, default strides and interpolation scales into
plain ints/floats before the op sees them.
"""
from __future__ import annotations

import math

import numpy as np

from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor
from .linalg import _CAP
from .memory_format import lay_out, permuted, run_in, suggest, unpermute
from .registry import Meta, OpDef, export, register, run

__all__ = ["conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "max_pool1d", "max_pool2d", "avg_pool1d",
           "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d",
           "interpolate", "upsample", "upsample_nearest", "upsample_bilinear", "unfold", "fold", "pixel_shuffle",
           "pixel_unshuffle", "max_pool1d_with_indices", "max_pool2d_with_indices", "channel_shuffle", "lp_pool1d",
           "lp_pool2d"]


# ---------------------------------------------------------------- shape rules
def _conv_out(n, k, s, p0, p1, d):
    return (n + p0 + p1 - d * (k - 1) - 1) // s + 1


def _pool_out(n, k, p, s, d, ceil):
    num = n + 2 * p - d * (k - 1) - 1 + ((s - 1) if ceil else 0)
    o = num // s + 1
    if ceil and (o - 1) * s >= n + p:
        o -= 1
    return o


def _infer_conv2d(metas, attrs):
    x, w = metas[0], metas[1]
    N, _, H, W = x.shape
    O, _, KH, KW = w.shape
    sh, sw = attrs["stride"]
    pt, pb, pl, pr = attrs["padding"]
    dh, dw = attrs["dilation"]
    return [Meta((N, O, _conv_out(H, KH, sh, pt, pb, dh), _conv_out(W, KW, sw, pl, pr, dw)), x.dtype)]


def _infer_convt2d(metas, attrs):
    x, w = metas[0], metas[1]
    N, _, H, W = x.shape
    _, Cog, KH, KW = w.shape
    sh, sw = attrs["stride"]
    ph, pw = attrs["padding"]
    oph, opw = attrs["output_padding"]
    dh, dw = attrs["dilation"]
    OH = (H - 1) * sh - 2 * ph + dh * (KH - 1) + oph + 1
    OW = (W - 1) * sw - 2 * pw + dw * (KW - 1) + opw + 1
    return [Meta((N, Cog * attrs["groups"], OH, OW), x.dtype)]


def _infer_im2col(metas, attrs):
    (x,) = metas
    N, C = x.shape[:2]
    KH, KW = attrs["kernel_size"]
    OH, OW = attrs["blocks"]
    return [Meta((N, C * KH * KW, OH * OW), x.dtype)]


def _infer_col2im(metas, attrs):
    (x,) = metas
    KH, KW = attrs["kernel_size"]
    return [Meta((x.shape[0], x.shape[1] // (KH * KW)) + tuple(attrs["output_size"]), x.dtype)]


def _infer_pool(metas, attrs):
    (x,) = metas
    N, C, H, W = x.shape
    KH, KW = attrs["kernel_size"]
    sh, sw = attrs["stride"]
    ph, pw = attrs["padding"]
    dh, dw = attrs.get("dilation", (1, 1))
    ceil = attrs["ceil_mode"]
    shape = (N, C, _pool_out(H, KH, ph, sh, dh, ceil), _pool_out(W, KW, pw, sw, dw, ceil))
    return [Meta(shape, x.dtype)]


def _infer_pool_idx(metas, attrs):
    m = _infer_pool(metas, attrs)[0]
    return [m, Meta(m.shape, _dt.int64)]


def _infer_sized(metas, attrs):
    (x,) = metas
    return [Meta(tuple(x.shape[:2]) + tuple(attrs["size"]), x.dtype)]


def _infer_adaptive(metas, attrs):
    m = _infer_sized(metas, attrs)[0]
    return [m, Meta(m.shape, _dt.int64)] if attrs["mode"] == "max" else [m]


CONV2D = register(OpDef("conv2d", infer=_infer_conv2d, doc="2-D cross-correlation, explicit (t, b, l, r) padding"))
CONV_T2D = register(OpDef("conv_transpose2d", infer=_infer_convt2d))
IM2COL = register(OpDef("im2col", infer=_infer_im2col))
COL2IM = register(OpDef("col2im", infer=_infer_col2im))
MAX_POOL2D = register(OpDef("max_pool2d", infer=_infer_pool))
MAX_POOL2D_IDX = register(OpDef("max_pool2d_with_indices", infer=_infer_pool_idx, nout=2))
AVG_POOL2D = register(OpDef("avg_pool2d", infer=_infer_pool))
ADAPTIVE_AVG2D = register(OpDef("adaptive_avg_pool2d", infer=_infer_adaptive))
ADAPTIVE_MAX2D = register(OpDef("adaptive_max_pool2d", infer=_infer_adaptive, nout=2))
UP_NEAREST2D = register(OpDef("upsample_nearest2d", infer=_infer_sized))
UP_BILINEAR2D = register(OpDef("upsample_bilinear2d", infer=_infer_sized))


# ---------------------------------------------------------------- argument helpers
def _tuple(v, n: int, name: str, op: str) -> tuple:
    if isinstance(v, Tensor):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        v = tuple(int(x) for x in v)
        if len(v) == 1:
            return v * n
        if len(v) != n:
            raise RuntimeError(f"{op}: expected {name} to be a single integer value or a list of {n} values to match "
                               f"the convolution dimensions, but got {name}={list(v)}")
        return v
    return (int(v),) * n


def _float_check(x: Tensor, op: str):
    if x._dtype.category != 2:
        raise NotImplementedError(f"\"{op}\" not implemented for '{_CAP[x._dtype.name]}'")


def _lst(shape) -> str:
    return str(list(shape))


# ---------------------------------------------------------------- integer convolution / pooling
# PyTorch computes integer convolutions (``slow_conv2d``: every integer dtype; dilated and transposed ones: int64
# only) and int64 average / integer max pooling on the CPU.  neetorch defines them once, N-d, as compositions:
# the zero- (or minimum-) padded input viewed as sliding windows (``Tensor.unfold`` per spatial dim, a view),
# then an int64 contraction / sum / max over the window dims.  Wrapping int64 arithmetic cast back to the input
# dtype gives the bits torch's same-dtype accumulation gives (the cast is reduction modulo 2**bits).
def _int_conv_check(x: Tensor, op: str, dilation, transposed: bool) -> bool:
    """True when ``x`` takes the integer path; raises where torch has no kernel for the dtype."""
    dt = x._dtype
    if dt.category == 2:
        return False
    cap = _CAP[dt.name]
    kern = f"slow_conv_transpose{op[-2]}_out_cpu" if transposed else f"slow_conv{op[-2]}_cpu".replace("1", "2")
    if dt.category != 1 or (transposed and dt is not _dt.int64):
        raise NotImplementedError(f"\"{kern}\" not implemented for '{cap}' ({op} of {dt.name} input)")
    if any(int(d) > 1 for d in dilation) and dt is not _dt.int64:
        raise NotImplementedError(f"\"slow_conv_dilated<>\" not implemented for '{cap}' ({op} with dilation "
                                  f"{tuple(dilation)}; dilated integer convolutions take int64 only)")
    return True


def _windows(x: Tensor, ks, st, dil, pads, value=0) -> Tensor:
    """(N, C, *out, *ks) sliding windows of (N, C, *sp) padded by ``pads`` [(lo, hi)] per dim with ``value``."""
    from .shape import pad as _pad
    nd = len(ks)
    flat = []
    for lo, hi in reversed(pads):
        flat += [lo, hi]
    if any(flat):
        x = _pad(x, flat, value=value)
    for i in range(nd):
        x = x.unfold(2 + i, dil[i] * (ks[i] - 1) + 1, st[i])
    if any(d > 1 for d in dil):
        x = x[(Ellipsis,) + tuple(slice(None, None, d) for d in dil)]
    return x


def _conv_int(x: Tensor, w: Tensor, bias, st, pads, dil, groups: int) -> Tensor:
    """Integer N-d cross-correlation of (N, C, *sp) with (O, C/groups, *ks)."""
    from .linalg import einsum
    nd = w.ndim - 2
    dt = x._dtype
    win = _windows(x.to(_dt.int64), tuple(w.shape[2:]), st, dil, pads)
    N, C = win.shape[:2]
    out = tuple(win.shape[2:2 + nd])
    O = w.shape[0]
    letters = "klmn"[:nd]
    sp = "xyz"[:nd]
    win = win.reshape((N, groups, C // groups) + out + tuple(w.shape[2:]))
    wg = w.to(_dt.int64).reshape((groups, O // groups) + tuple(w.shape[1:]))
    y = einsum(f"ngc{sp}{letters},goc{letters}->ngo{sp}", win, wg).reshape((N, O) + out)
    if bias is not None:
        y = y + bias.to(_dt.int64).reshape((1, O) + (1,) * nd)
    return y.to(dt)


def _conv_transpose_int(x: Tensor, w: Tensor, bias, st, pad, opad, dil, groups: int) -> Tensor:
    """Integer N-d transposed convolution: the stride-dilated input cross-correlated with the flipped,
    in/out-swapped weight, padded by ``dil*(k-1) - pad`` (negative: cropped) plus ``output_padding`` at the end."""
    from ..tensor.creation import zeros
    nd = w.ndim - 2
    N, Cin = x.shape[:2]
    ks = tuple(w.shape[2:])
    Cog = w.shape[1]
    xs = zeros((N, Cin) + tuple((n - 1) * s + 1 for n, s in zip(x.shape[2:], st)), dtype=x._dtype,
               device=x.device)
    xs[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in st)] = x
    wt = w.reshape((groups, Cin // groups, Cog) + ks).transpose(1, 2).flip(list(range(3, 3 + nd)))
    wt = wt.reshape((groups * Cog, Cin // groups) + ks)
    pads = [(d * (k - 1) - p, d * (k - 1) - p + o) for k, d, p, o in zip(ks, dil, pad, opad)]
    from .shape import pad as _pad
    flat = []
    for lo, hi in reversed(pads):
        flat += [lo, hi]
    xs = _pad(xs, flat)
    return _conv_int(xs, wt, bias, (1,) * nd, [(0, 0)] * nd, dil, groups)


def _pool_pads(sp, ks, st, pad, dil, ceil):
    """(output sizes, [(lo, hi)] pads) of a pooling window grid (ceil_mode's extra windows padded on the right)."""
    outs = [_pool_out(n, k, p, s, d, ceil) for n, k, p, s, d in zip(sp, ks, pad, st, dil)]
    pads = [(p, max(p, (o - 1) * s + d * (k - 1) + 1 - n - p, 0))
            for n, k, p, s, d, o in zip(sp, ks, pad, st, dil, outs)]
    return outs, pads


def _crop(win: Tensor, outs) -> Tensor:
    for i, o in enumerate(outs):
        if win.shape[2 + i] != o:
            win = win.narrow(2 + i, 0, o)
    return win


def _max_pool_int(x: Tensor, ks, st, pad, dil, ceil, return_indices):
    """Exact N-d max pooling of an integer (N, C, *sp) tensor; indices flat over ``sp`` like torch's (the first
    maximum of the window in scan order, padding never chosen)."""
    from ..tensor.creation import tensor
    nd = len(ks)
    sp = tuple(x.shape[2:])
    outs, pads = _pool_pads(sp, ks, st, pad, dil, ceil)
    win = _crop(_windows(x, ks, st, dil, pads, int(np.iinfo(x._dtype.np).min)), outs)
    K = int(np.prod(ks))
    flat = win.reshape(tuple(win.shape[:2 + nd]) + (K,))
    val = flat.amax(-1)
    if not return_indices:
        return val
    # the flat input index of every window tap; a padding tap maps to its window's first real tap, which can only
    # win (through argmax's first occurrence) when every real tap holds the dtype's minimum
    grids = [np.arange(o)[:, None] * s - p + np.arange(k)[None, :] * d
             for o, s, p, k, d in zip(outs, st, pad, ks, dil)]           # per dim: (out, k) input coordinates
    coord = np.zeros(tuple(outs) + tuple(ks), np.int64)
    valid = np.ones(tuple(outs) + tuple(ks), bool)
    for i, g in enumerate(grids):
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = g.shape
        gi = g.reshape(shape)
        coord = coord * sp[i] + gi
        valid = valid & (gi >= 0) & (gi < sp[i])
    coord = coord.reshape(tuple(outs) + (K,))
    valid = valid.reshape(tuple(outs) + (K,))
    first = np.take_along_axis(coord, valid.argmax(-1)[..., None], -1)
    coord = np.where(valid, coord, first)
    am = flat.argmax(-1)
    idx = tensor(coord, dtype=_dt.int64, device=x.device).expand(tuple(flat.shape))
    return val, idx.gather(-1, am.unsqueeze(-1)).squeeze(-1)


def _avg_pool_int(x: Tensor, ks, st, pad, ceil, count_include_pad, divisor_override):
    """Exact N-d average pooling of an int64 (N, C, *sp) tensor: the window sum divided by torch's divisor,
    truncated toward zero (C++ integer division)."""
    from ..tensor.creation import tensor
    from .elementwise import div
    nd = len(ks)
    sp = tuple(x.shape[2:])
    outs, pads = _pool_pads(sp, ks, st, pad, (1,) * nd, ceil)
    win = _crop(_windows(x, ks, st, (1,) * nd, pads, 0), outs)
    tot = win.sum(tuple(range(2 + nd, 2 + 2 * nd)))
    if divisor_override is not None:
        return div(tot, int(divisor_override), rounding_mode="trunc")
    div_n = np.ones((), np.int64)
    for o, s, p, k, n in zip(outs, st, pad, ks, sp):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        if not count_include_pad:
            end = np.minimum(end, n)
            start = np.maximum(start, 0)
        div_n = np.multiply.outer(div_n, end - start)
    return div(tot, tensor(div_n, dtype=_dt.int64, device=x.device), rounding_mode="trunc")


# ---------------------------------------------------------------- convolution
def _conv(nd, name, input, weight, bias, stride, padding, dilation, groups):
    if not isinstance(input, Tensor) or not isinstance(weight, Tensor):
        raise TypeError(f"{name}(): argument 'input' and 'weight' must be Tensors")
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {name}, but got input of "
                           f"size: {_lst(input.shape)}")
    unbatched = input.ndim == nd + 1
    x = input.unsqueeze(0) if unbatched else input
    if weight.ndim != nd + 2:
        raise RuntimeError(f"Expected {nd + 2}-dimensional weight for {nd + 2}-dimensional input "
                           f"{_lst(x.shape)}, but got {weight.ndim}-dimensional weight of size {_lst(weight.shape)} "
                           f"instead")
    if x._dtype is not weight._dtype:
        raise RuntimeError(f"expected scalar type {_CAP[x._dtype.name]} but found {_CAP[weight._dtype.name]}")
    groups = int(groups)
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    O = weight.shape[0]
    if O == 0:  # (torch: an empty output-channel dim is refused, whatever the batch)
        raise RuntimeError(f"Given groups={groups}, expected weight to be at least 1 at dimension 0, but got weight "
                           f"of size {_lst(weight.shape)} instead ({name})")
    if O % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
                           f"but got weight of size [{_lst(weight.shape)}] instead")
    C = x.shape[1]
    if C != weight.shape[1] * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {_lst(weight.shape)}, expected input{_lst(x.shape)} "
                           f"to have {weight.shape[1] * groups} channels, but got {C} channels instead")
    if bias is not None:
        if bias.ndim != 1 or bias.shape[0] != O:
            raise RuntimeError(f"Given weight of size {_lst(weight.shape)}, expected bias to be 1-dimensional with {O} "
                               f"elements, but got bias of size {_lst(bias.shape)} instead")
        if bias._dtype is not x._dtype:
            raise RuntimeError(f"expected scalar type {_CAP[x._dtype.name]} but found {_CAP[bias._dtype.name]}")
    stride = _tuple(stride, nd, "stride", name)
    dilation = _tuple(dilation, nd, "dilation", name)
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")
    ks = tuple(weight.shape[2:])
    if isinstance(padding, str):
        if padding == "valid":
            pads = [(0, 0)] * nd
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            pads = []
            for k, d in zip(ks, dilation):
                tot = d * (k - 1)
                pads.append((tot // 2, tot - tot // 2))
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    else:
        p = _tuple(padding, nd, "padding", name)
        if any(v < 0 for v in p):
            raise RuntimeError("negative padding is not supported")
        pads = [(v, v) for v in p]
    sp = tuple(x.shape[2:])
    padded = [n + a + b for n, (a, b) in zip(sp, pads)]
    eff = [d * (k - 1) + 1 for k, d in zip(ks, dilation)]
    if any(pn < e for pn, e in zip(padded, eff)):
        raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel size: "
                           f"({' x '.join(map(str, eff))}). Kernel size can't be greater than actual input size")
    if _int_conv_check(x, name, dilation, False):
        r = _conv_int(x, weight, bias, stride, pads, dilation, groups)
        return r.squeeze(0) if unbatched else r
    if nd == 1:
        x4, w4 = x.unsqueeze(2), weight.unsqueeze(2)
        attrs = {"stride": (1, stride[0]), "padding": (0, 0) + pads[0], "dilation": (1, dilation[0]),
                 "groups": groups}
    else:
        x4, w4 = x, weight
        attrs = {"stride": stride, "padding": pads[0] + pads[1], "dilation": dilation, "groups": groups}
    ins = [x4, w4] + ([bias] if bias is not None else [])
    r = run_in(CONV2D, ins, attrs, _conv_order(input, weight, nd, unbatched))[0]
    if nd == 1:
        r = r.squeeze(2)
    return r.squeeze(0) if unbatched else r


@export(method=False)
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation over (N, C, L) or (C, L) input (``torch.nn.functional.conv1d``)."""
    return _conv(1, "conv1d", input, weight, bias, stride, padding, dilation, groups)


@export(method=False)
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation over (N, C, H, W) or (C, H, W) input (``torch.nn.functional.conv2d``)."""
    return _conv(2, "conv2d", input, weight, bias, stride, padding, dilation, groups)


def _conv_order(input, weight, nd, unbatched):
    """torch's 2-D convolutions (mkldnn's and the slow ones: ``thnn_conv_use_channels_last``) give channels-last
    results when the batched input or the weight suggests it."""
    if nd != 2 or unbatched:
        return None
    return suggest(input) or suggest(weight)


def _empty_conv_out(x, cout, outs):
    from ..tensor.creation import zeros
    return zeros((x.shape[0], cout) + tuple(outs), dtype=x._dtype, device=x._device)


def _conv_t(nd, name, input, weight, bias, stride, padding, output_padding, groups, dilation):
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {name}, but got input of "
                           f"size: {_lst(input.shape)}")
    unbatched = input.ndim == nd + 1
    x = input.unsqueeze(0) if unbatched else input
    if weight.ndim != nd + 2:
        raise RuntimeError(f"Expected {nd + 2}-dimensional weight for {name}, but got weight of size "
                           f"{_lst(weight.shape)}")
    if x._dtype is not weight._dtype:
        raise RuntimeError(f"expected scalar type {_CAP[x._dtype.name]} but found {_CAP[weight._dtype.name]}")
    groups = int(groups)
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    Cin = weight.shape[0]
    if Cin % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
                           f"but got weight of size [{_lst(weight.shape)}] instead")
    if x.shape[1] != Cin:
        raise RuntimeError(f"Given transposed=1, weight of size {_lst(weight.shape)}, expected input{_lst(x.shape)} to "
                           f"have {Cin} channels, but got {x.shape[1]} channels instead")
    Cout = weight.shape[1] * groups
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != Cout):
        raise RuntimeError(f"Given transposed=1, weight of size {_lst(weight.shape)}, expected bias to be "
                           f"1-dimensional with {Cout} elements, but got bias of size {_lst(bias.shape)} instead")
    stride = _tuple(stride, nd, "stride", name)
    padding = _tuple(padding, nd, "padding", name)
    opad = _tuple(output_padding, nd, "output_padding", name)
    dilation = _tuple(dilation, nd, "dilation", name)
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    for op_, s, d in zip(opad, stride, dilation):
        if op_ < 0 or (op_ >= s and op_ >= d):
            if nd == 2:
                raise RuntimeError(
                    f"output padding must be smaller than either stride or dilation, but got output_padding_height: "
                    f"{opad[0]} output_padding_width: {opad[1]} stride_height: {stride[0]} stride_width: {stride[1]} "
                    f"dilation_height: {dilation[0]} dilation_width: {dilation[1]}")
            raise RuntimeError(f"output padding must be smaller than either stride or dilation, but got "
                               f"output_padding: {opad[0]} stride: {stride[0]} dilation: {dilation[0]}")
    ks = tuple(weight.shape[2:])
    outs = [(n - 1) * s - 2 * p + d * (k - 1) + o + 1
            for n, s, p, d, k, o in zip(x.shape[2:], stride, padding, dilation, ks, opad)]
    if any(o < 0 for o in outs):
        raise RuntimeError(f"Given input size per channel: ({' x '.join(map(str, x.shape[2:]))}). Calculated output "
                           f"size per channel: ({' x '.join(map(str, outs))}). Output size is too small")
    if any(o == 0 for o in outs):   # torch: an empty output (the padding eats all of it) is not an error
        r = _empty_conv_out(x, Cout, outs)
        return r.squeeze(0) if unbatched else r
    if _int_conv_check(x, name, dilation, True):
        r = _conv_transpose_int(x, weight, bias, stride, padding, opad, dilation, groups)
        return r.squeeze(0) if unbatched else r
    if nd == 1:
        x4, w4 = x.unsqueeze(2), weight.unsqueeze(2)
        attrs = {"stride": (1, stride[0]), "padding": (0, padding[0]), "output_padding": (0, opad[0]),
                 "dilation": (1, dilation[0]), "groups": groups}
    else:
        x4, w4 = x, weight
        attrs = {"stride": stride, "padding": padding, "output_padding": opad, "dilation": dilation,
                 "groups": groups}
    r = run_in(CONV_T2D, [x4, w4] + ([bias] if bias is not None else []), attrs,
               _conv_order(input, weight, nd, unbatched))[0]
    if nd == 1:
        r = r.squeeze(2)
    return r.squeeze(0) if unbatched else r


@export(method=False)
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """1-D transposed convolution (``torch.nn.functional.conv_transpose1d``); weight (Cin, Cout/groups, K)."""
    return _conv_t(1, "conv_transpose1d", input, weight, bias, stride, padding, output_padding, groups, dilation)


@export(method=False)
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """2-D transposed convolution (``torch.nn.functional.conv_transpose2d``); weight (Cin, Cout/groups, KH, KW)."""
    return _conv_t(2, "conv_transpose2d", input, weight, bias, stride, padding, output_padding, groups, dilation)


def _blocks(sp, ks, dil, pad, st):
    return tuple((n + 2 * p - (d * (k - 1) + 1)) // s + 1 for n, k, d, p, s in zip(sp, ks, dil, pad, st))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """im2col: sliding blocks of (N, C, H, W) -> (N, C*KH*KW, L) (``torch.nn.functional.unfold``)."""
    if input.ndim not in (3, 4):
        raise RuntimeError(f"Input Error: Only 3D or 4D input Tensors are supported (got {input.ndim}D)")
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    if x._dtype is _dt.bool_:            # (torch's im2col takes bool: a copy, exact through float32)
        return unfold(input.to(_dt.float32), kernel_size, dilation, padding, stride) != 0
    _float_check(x, "im2col")
    ks = _tuple(kernel_size, 2, "kernel_size", "unfold")
    dil = _tuple(dilation, 2, "dilation", "unfold")
    pad = _tuple(padding, 2, "padding", "unfold")
    st = _tuple(stride, 2, "stride", "unfold")
    if any(v <= 0 for v in ks + dil + st) or any(p < 0 for p in pad):
        raise RuntimeError(f"unfold: kernel_size, dilation and stride must be positive and padding non-negative, got "
                           f"kernel_size={ks}, dilation={dil}, padding={pad}, stride={st}")
    bl = _blocks(x.shape[2:], ks, dil, pad, st)
    if any(b < 1 for b in bl):
        raise RuntimeError(f"Given input with spatial size {tuple(x.shape[2:])}, kernel_size={ks}, dilation={dil}, "
                           f"padding={pad}, calculated shape of the array of sliding blocks as {bl}, but its "
                           f"components must be at least one.")
    r = run(IM2COL, [x], {"kernel_size": ks, "dilation": dil, "padding": pad, "stride": st, "blocks": bl})[0]
    return r.squeeze(0) if unbatched else r


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """col2im: sum sliding blocks (N, C*KH*KW, L) into (N, C, H, W) (``torch.nn.functional.fold``)."""
    if input.ndim not in (2, 3):
        raise RuntimeError(f"Input Error: Only unbatched (2D) or batched (3D) input Tensors are supported (got "
                           f"{input.ndim}D)")
    unbatched = input.ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    if x._dtype is _dt.bool_:            # (torch's col2im takes bool: the sum of overlapping taps, as a bool)
        return fold(input.to(_dt.float32), output_size, kernel_size, dilation, padding, stride) != 0
    _float_check(x, "col2im")
    osz = _tuple(output_size, 2, "output_size", "fold")
    ks = _tuple(kernel_size, 2, "kernel_size", "fold")
    dil = _tuple(dilation, 2, "dilation", "fold")
    pad = _tuple(padding, 2, "padding", "fold")
    st = _tuple(stride, 2, "stride", "fold")
    kk = ks[0] * ks[1]
    if x.shape[1] % kk:
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, but "
                           f"got input.size(1)={x.shape[1]} and kernel_size={ks}")
    bl = _blocks(osz, ks, dil, pad, st)
    if any(b < 1 for b in bl) or bl[0] * bl[1] != x.shape[2]:
        raise RuntimeError(f"Given output_size={osz}, kernel_size={ks}, dilation={dil}, padding={pad}, stride={st}, "
                           f"expected size of input's dimension 2 to match the calculated number of sliding blocks "
                           f"{bl[0]} * {bl[1]} = {bl[0] * bl[1]}, but got input.size(2)={x.shape[2]}.")
    r = run(COL2IM, [x], {"kernel_size": ks, "dilation": dil, "padding": pad, "stride": st, "blocks": bl,
                          "output_size": osz})[0]
    return r.squeeze(0) if unbatched else r


# ---------------------------------------------------------------- pooling
def _as4d(input, nd: int, op: str, msg: str):
    """(N, C, H, W) view of a (N, C, *sp) or (C, *sp) input; returns (x4, unbatched)."""
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(msg)
    unbatched = input.ndim == nd + 1
    x = input.unsqueeze(0) if unbatched else input
    if nd == 1:
        x = x.unsqueeze(2)
    return x, unbatched


def _back(r: Tensor, nd: int, unbatched: bool) -> Tensor:
    if nd == 1:
        r = r.squeeze(2)
    return r.squeeze(0) if unbatched else r


def _pool_args(nd, op, kernel_size, stride, padding, dilation):
    ks = _tuple(kernel_size, nd, "kernel_size", op)
    st = ks if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0) else \
        _tuple(stride, nd, "stride", op)
    pad = _tuple(padding, nd, "padding", op)
    dil = _tuple(dilation, nd, "dilation", op)
    if any(k <= 0 for k in ks):
        raise RuntimeError(f"{op}: kernel_size must be greater than zero, but got {ks}")
    if any(s <= 0 for s in st):
        raise RuntimeError(f"{op}: stride must be greater than zero, but got {st}")
    if any(d <= 0 for d in dil):
        raise RuntimeError(f"{op}: dilation must be greater than zero, but got {dil}")
    for p, k, d in zip(pad, ks, dil):
        if p < 0 or p > ((k - 1) * d + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={p}, kernel_size={k} "
                               f"and dilation={d}")
    if nd == 1:
        ks, st, pad, dil = (1,) + ks, (1,) + st, (0,) + pad, (1,) + dil
    return ks, st, pad, dil


def _check_pool_out(x4, nd, attrs, ceil):
    H, W = x4.shape[2], x4.shape[3]
    OH = _pool_out(H, attrs["kernel_size"][0], attrs["padding"][0], attrs["stride"][0], attrs["dilation"][0], ceil)
    OW = _pool_out(W, attrs["kernel_size"][1], attrs["padding"][1], attrs["stride"][1], attrs["dilation"][1], ceil)
    if OH < 1 or OW < 1:
        C = x4.shape[1]
        if nd == 1:
            raise RuntimeError(f"Given input size: ({C}x{W}). Calculated output size: ({C}x{OW}). Output size is too "
                               f"small")
        raise RuntimeError(f"Given input size: ({C}x{H}x{W}). Calculated output size: ({C}x{OH}x{OW}). Output size is "
                           f"too small")


def _max_pool(nd, op, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    msg = ("non-empty 3D or 4D (batch mode) tensor expected for input" if nd == 2 else
           f"max_pool1d() Expected 2D or 3D input tensor, but got {_lst(input.shape)}")
    x, unb = _as4d(input, nd, op, msg)
    integer = x._dtype.category == 1
    if not integer or (nd == 1 and not return_indices):   # (torch's max_pool1d_impl is floating only)
        _float_check(x, "max_pool1d_impl" if nd == 1 and not return_indices else op)
    ks, st, pad, dil = _pool_args(nd, op, kernel_size, stride, padding, dilation)
    attrs = {"kernel_size": ks, "stride": st, "padding": pad, "dilation": dil, "ceil_mode": bool(ceil_mode)}
    _check_pool_out(x, nd, attrs, ceil_mode)
    order = suggest(input) if nd == 2 else None   # (torch: the input's suggested memory format)
    if integer:
        r = _max_pool_int(x, ks, st, pad, dil, bool(ceil_mode), return_indices)
        if return_indices:
            return _back(lay_out(r[0], order), nd, unb), _back(lay_out(r[1], order), nd, unb)
        return _back(lay_out(r, order), nd, unb)
    if return_indices:
        r, i = run_in(MAX_POOL2D_IDX, [x], attrs, order)
        return _back(r, nd, unb), _back(i, nd, unb)
    return _back(run_in(MAX_POOL2D, [x], attrs, order)[0], nd, unb)


@export(method=False)
def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """1-D max pooling over (N, C, L) or (C, L) (``torch.nn.functional.max_pool1d``)."""
    return _max_pool(1, "max_pool1d", input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@export(method=False)
def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """2-D max pooling over (N, C, H, W) or (C, H, W) (``torch.nn.functional.max_pool2d``)."""
    return _max_pool(2, "max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def _avg_pool(nd, op, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    msg = ("non-empty 3D or 4D (batch mode) tensor expected for input" if nd == 2 else
           f"avg_pool1d() Expected 2D or 3D input tensor, but got {_lst(input.shape)}")
    x, unb = _as4d(input, nd, op, msg)
    if x._dtype is not _dt.int64:       # (torch averages int64, no other integer dtype)
        _float_check(x, "avg_pool2d")
    ks, st, pad, dil = _pool_args(nd, op, kernel_size, stride, padding, 1)
    if divisor_override is not None and int(divisor_override) == 0:
        raise RuntimeError("divisor must be not zero")
    attrs = {"kernel_size": ks, "stride": st, "padding": pad, "dilation": dil, "ceil_mode": bool(ceil_mode),
             "count_include_pad": bool(count_include_pad),
             "divisor_override": None if divisor_override is None else int(divisor_override)}
    _check_pool_out(x, nd, attrs, ceil_mode)
    order = suggest(input) if nd == 2 else None
    if x._dtype is _dt.int64:
        r = _avg_pool_int(x, ks, st, pad, bool(ceil_mode), bool(count_include_pad), attrs["divisor_override"])
        return _back(lay_out(r, order), nd, unb)
    return _back(run_in(AVG_POOL2D, [x], attrs, order)[0], nd, unb)


@export(method=False)
def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """1-D average pooling (``torch.nn.functional.avg_pool1d``)."""
    return _avg_pool(1, "avg_pool1d", input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


@export(method=False)
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """2-D average pooling (``torch.nn.functional.avg_pool2d``)."""
    return _avg_pool(2, "avg_pool2d", input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def _adaptive(nd, op, input, output_size, mode, return_indices=False):
    msg = f"{op}(): Expected {nd + 1}D or {nd + 2}D tensor, but got {_lst(input.shape)}"
    x, unb = _as4d(input, nd, op, msg)
    _float_check(x, op)
    if isinstance(output_size, (list, tuple)):
        osz = tuple(output_size)
        if len(osz) == 1:
            osz = osz * nd
    else:
        osz = (output_size,) * nd
    if len(osz) != nd:
        raise RuntimeError(f"{op}: output_size must be {nd}, but got {len(osz)}")
    insp = tuple(x.shape[2:]) if nd == 2 else (x.shape[3],)
    osz = tuple(int(i) if o is None else int(o) for o, i in zip(osz, insp))
    if any(o < 0 for o in osz):
        raise RuntimeError(f"{op}: elements of output_size must be greater than or equal to 0 but received {osz}")
    for d in range(2, x.ndim):
        if x.shape[d] == 0 and not (nd == 1 and d == 2):
            raise RuntimeError(f"{op}(): Expected input to have non-zero size for non-batch dimensions, but input has "
                               f"sizes {_lst(input.shape)} with dimension {d - 2 + input.ndim - nd} being empty")
    size = osz if nd == 2 else (1,) + osz
    attrs = {"size": size, "mode": mode}
    order = suggest(input) if nd == 2 else None
    if mode == "max":
        r, i = run_in(ADAPTIVE_MAX2D, [x], attrs, order)
        r, i = _back(r, nd, unb), _back(i, nd, unb)
        return (r, i) if return_indices else r
    return _back(run_in(ADAPTIVE_AVG2D, [x], attrs, order)[0], nd, unb)


@export(method=False)
def adaptive_avg_pool1d(input, output_size):
    """Adaptive 1-D average pooling (``torch.nn.functional.adaptive_avg_pool1d``)."""
    return _adaptive(1, "adaptive_avg_pool1d", input, output_size, "avg")


@export(method=False)
def adaptive_avg_pool2d(input, output_size):
    """Adaptive 2-D average pooling (``torch.nn.functional.adaptive_avg_pool2d``); None keeps a size."""
    return _adaptive(2, "adaptive_avg_pool2d", input, output_size, "avg")


@export(method=False)
def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Adaptive 1-D max pooling (``torch.nn.functional.adaptive_max_pool1d``)."""
    return _adaptive(1, "adaptive_max_pool1d", input, output_size, "max", return_indices)


@export(method=False)
def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Adaptive 2-D max pooling (``torch.nn.functional.adaptive_max_pool2d``)."""
    return _adaptive(2, "adaptive_max_pool2d", input, output_size, "max", return_indices)


# ---------------------------------------------------------------- resampling
_NEEDS = {"linear": 3, "bilinear": 4, "bicubic": 4, "trilinear": 5}


@export(method=False)
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resample (N, C, W) / (N, C, H, W) / (N, C, D, H, W) input (``torch.nn.functional.interpolate``).

    Modes: nearest, nearest-exact (3-, 4-, 5-D), linear (3-D), bilinear and bicubic (4-D), trilinear (5-D),
    area (3-, 4-, 5-D; 5-D through nn.functional.adaptive_avg_pool3d).  With ``scale_factor``
    (and no ``recompute_scale_factor``) the source index uses 1/scale_factor, as PyTorch does;
    with ``size`` it uses in/out.  ``antialias=True`` (bilinear / bicubic, 4-D) and uint8 bilinear / bicubic input
    are ``nn.functional_extra._interpolate_antialias`` / ``_interpolate_uint8`` (separable weight matmuls).
    """
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: "
                             "linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    if mode not in ("nearest", "nearest-exact", "area", "linear", "bilinear", "bicubic", "trilinear"):
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) for "
                                  f"the modes: nearest | linear | bilinear | bicubic | trilinear | area | "
                                  f"nearest-exact (got {mode})")
    dim = input.ndim - 2
    if dim < 1:
        raise ValueError(f"interpolate: expected input of at least 3 dims (N, C, ...), got {_lst(input.shape)}")
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    scales = None
    if size is not None:
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError(f"Input and output must have the same number of spatial dimensions, but got input "
                                 f"with spatial dimensions of {list(input.shape[2:])} and output size of {list(size)}. "
                                 f"Please provide input tensor in (N, C, d1, d2, ...,dK) format and output size in "
                                 f"(o1, o2, ...,oK) format.")
            output_size = tuple(int(s) for s in size)
        else:
            output_size = (int(size),) * dim
    elif scale_factor is not None:
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != dim:
                raise ValueError(f"Input and scale_factor must have the same number of spatial dimensions, but got "
                                 f"input with spatial dimensions of {list(input.shape[2:])} and scale_factor of shape "
                                 f"{list(scale_factor)}. Please provide input tensor in (N, C, d1, d2, ...,dK) format "
                                 f"and scale_factor in (s1, s2, ...,sK) format.")
            scales = tuple(float(s) for s in scale_factor)
        else:
            scales = (float(scale_factor),) * dim
        output_size = tuple(int(math.floor(float(n) * s)) for n, s in zip(input.shape[2:], scales))
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor is not None and recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if mode == "area" and size is None:
        recompute_scale_factor = True
    if recompute_scale_factor:
        scales = None
    if antialias and not (mode in ("bilinear", "bicubic") and input.ndim == 4):
        raise ValueError("Anti-alias option is restricted to bilinear and bicubic modes and requires a 4-D tensor as "
                         "input")
    if (any(o <= 0 for o in output_size) and not (mode == "area" and min(output_size) == 0)) or \
            0 in input.shape[2:]:
        # (area is adaptive average pooling, whose empty output torch returns)
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input "
                           f"({', '.join(map(str, input.shape[2:]))}) and output ({', '.join(map(str, output_size))})")
    if mode == "area":
        if 0 in output_size:  # an empty adaptive average: torch returns the empty result
            from ..tensor.creation import empty
            return empty(*input.shape[:2], *output_size, dtype=input._dtype, device=input._device)
        if dim == 1:
            return adaptive_avg_pool1d(input, output_size)
        if dim == 2:
            return adaptive_avg_pool2d(input, output_size)
        # 3-D: the adaptive pooling of nn.functional (defined there, resolved when first used)
        from ..nn import functional as _nnf
        pool3d = getattr(_nnf, "adaptive_avg_pool3d", None)
        if pool3d is None:
            raise NotImplementedError("interpolate: mode 'area' on 5-D input needs adaptive_avg_pool3d, which this "
                                      "build of neetorch.nn.functional does not define")
        return pool3d(input, output_size)
    if mode in _NEEDS and input.ndim != _NEEDS[mode]:
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs {_NEEDS[mode]}D input")
    if scales is not None and mode in ("linear", "bilinear", "trilinear"):
        # PyTorch's linear modes copy a dim whose size does not change, whatever the scale factor says
        scales = tuple(None if o == n else sc for o, n, sc in zip(output_size, input.shape[2:], scales))
    if input._dtype is _dt.uint8 and mode in ("bilinear", "bicubic") and input.ndim == 4:
        from ..nn.functional_extra import _interpolate_uint8
        return _interpolate_uint8(input, output_size, scales, mode, bool(align_corners), bool(antialias))
    if antialias:
        from ..nn.functional_extra import _interpolate_antialias
        return _interpolate_antialias(input, output_size, scales, mode, bool(align_corners))
    if mode in ("nearest", "nearest-exact") and input._dtype.category != 2 and input._dtype is not _dt.uint8:
        raise NotImplementedError(f"\"upsample_{mode}{dim}d\" not implemented for '{_CAP[input._dtype.name]}' "
                                  f"(floating point inputs only and uint8)")
    if mode in ("bicubic", "trilinear") or (dim != 2 and mode in ("nearest", "nearest-exact")):
        # (1-D and 3-D nearest: PyTorch's kernels always use the scale, only its 2-D one copies / halves indices
        # when the output is 1x / 2x the input)
        return _resample_separable(input, output_size, scales, mode, bool(align_corners))
    if dim > 2:
        raise NotImplementedError(f"interpolate: mode {mode!r} on {input.ndim}-D input is not supported yet")
    if mode not in ("nearest", "nearest-exact"):
        _float_check(input, f"upsample_{mode}")
    x = input.unsqueeze(2) if dim == 1 else input
    sz = (1,) + output_size if dim == 1 else output_size
    sc = (None,) + scales if (dim == 1 and scales is not None) else (scales or (None, None))
    order = suggest(input)    # (torch: the input's suggested memory format; None for 3-D input)
    if mode in ("nearest", "nearest-exact"):
        r = run_in(UP_NEAREST2D, [x], {"size": sz, "scales": sc, "exact": mode == "nearest-exact"}, order)[0]
    else:
        r = run_in(UP_BILINEAR2D, [x], {"size": sz, "scales": sc, "align_corners": bool(align_corners)}, order)[0]
    return r.squeeze(2) if dim == 1 else r


# Bicubic, trilinear and 3-D nearest resampling are compositions: one index_select per tap and spatial dim
# (indices and weights are constants computed here, in the compute dtype, with PyTorch's formulas), so they
# run on every device that has index_select and elementwise ops and fuse under @nee.jit.
_CUBIC_A = -0.75


def _src_scale(n_in, n_out, scale, align_corners, f):
    """PyTorch's area_pixel_compute_scale in the compute dtype ``f`` (a numpy scalar type)."""
    if align_corners:
        return f(n_in - 1) / f(n_out - 1) if n_out > 1 else f(0)
    if scale is not None and scale > 0:
        return f(1.0 / scale)
    return f(n_in) / f(n_out)


def _src_index(n_in, n_out, scale, align_corners, cubic, f):
    s = _src_scale(n_in, n_out, scale, align_corners, f)
    d = np.arange(n_out).astype(f)
    if align_corners:
        return s * d
    src = s * (d + f(0.5)) - f(0.5)
    return src if cubic else np.maximum(src, f(0))


def _guard(src, n_in, f):
    """(floor index clamped to the last one, fraction clamped to [0, 1]): guard_index_and_lambda."""
    i = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    lam = np.clip(src - i.astype(f), f(0), f(1)).astype(f)
    return i, lam


def _taps(mode, n_in, n_out, scale, align_corners, f):
    """[(source indices, weights or None)] per tap along one spatial dim."""
    if mode in ("nearest", "nearest-exact"):
        s = f(1.0 / scale) if scale is not None and scale > 0 else f(n_in) / f(n_out)
        d = np.arange(n_out).astype(f)
        src = np.floor((d + f(0.5)) * s) if mode == "nearest-exact" else np.floor(d * s)
        return [(np.minimum(src.astype(np.int64), n_in - 1), None)]
    if mode == "trilinear":
        i0, lam = _guard(_src_index(n_in, n_out, scale, align_corners, False, f), n_in, f)
        i1 = i0 + (i0 < n_in - 1)
        return [(i0, (f(1) - lam).astype(f)), (i1, lam)]
    i, t = _guard(_src_index(n_in, n_out, scale, align_corners, True, f), n_in, f)
    A = f(_CUBIC_A)

    def cc1(x):
        return ((A + f(2)) * x - (A + f(3))) * x * x + f(1)

    def cc2(x):
        return ((A * x - f(5) * A) * x + f(8) * A) * x - f(4) * A
    w = [cc2(t + f(1)), cc1(t), cc1(f(1) - t), cc2((f(1) - t) + f(1))]
    return [(np.clip(i - 1 + k, 0, n_in - 1), w[k].astype(f)) for k in range(4)]


def _resample_separable(input, output_size, scales, mode, align_corners):
    nearest = mode in ("nearest", "nearest-exact")
    if input._dtype.category != 2 and not (nearest and input._dtype is _dt.uint8):
        raise NotImplementedError(f"\"upsample_{mode}\" not implemented for '{_CAP[input._dtype.name]}' (floating "
                                  f"point inputs only{' and uint8' if nearest else ''})")
    from ..tensor.creation import tensor
    odt = input._dtype
    cdt = odt if nearest else _dt.compute_dtype(odt)
    f = np.float32 if nearest else cdt.np.type        # PyTorch's nearest indices are computed in float32
    # a channels-last input is resampled in its (N, *spatial, C) view: the row-major steps' result viewed back is
    # channels-last, as torch's
    order = suggest(input)
    y = permuted(input if odt is cdt else input.to(cdt), order)
    dev, nd = input.device, input.ndim
    # the last spatial dim first: PyTorch blends each row along W, then those rows along H (then D)
    for j in reversed(range(nd - 2)):
        d = 2 + j if order is None else 1 + j
        taps = _taps(mode, input.shape[2 + j], output_size[j], None if scales is None else scales[j], align_corners,
                     f)
        wshape = (output_size[j],) + (1,) * (nd - 1 - d)
        acc = None
        for idx, w in taps:
            v = y.index_select(d, tensor(idx, dtype=_dt.int64, device=dev))
            if w is not None:
                v = v * tensor(w.reshape(wshape), dtype=cdt, device=dev)
            acc = v if acc is None else acc + v
        y = acc
    y = unpermute(y, order)
    return y if odt is cdt else y.to(odt)


@export(method=False)
def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated alias of :func:`interpolate` (``torch.nn.functional.upsample``)."""
    return interpolate(input, size, scale_factor, mode, align_corners)


@export(method=False)
def upsample_nearest(input, size=None, scale_factor=None):
    """``torch.nn.functional.upsample_nearest``."""
    return interpolate(input, size, scale_factor, mode="nearest")


@export(method=False)
def upsample_bilinear(input, size=None, scale_factor=None):
    """``torch.nn.functional.upsample_bilinear`` (align_corners=True)."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


@export(method=False)
def pixel_shuffle(input, upscale_factor):
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r) (``torch.nn.functional.pixel_shuffle``)."""
    r = int(upscale_factor)
    if input.ndim < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    *b, C, H, W = input.shape
    if C % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                           f"upscale_factor, but input.size(-3)={C} is not divisible by {r * r}")
    nb = len(b)
    order = suggest(input) if input.ndim == 4 else None   # (torch: the suggested format, 4-D only)
    if r == 1:   # (a copy, as torch's; the reshapes below would return a view of the input)
        return _copy_in(input, order)
    if order is not None:   # in the (N, H, W, C) view: out[n, h*r+i, w*r+j, c] = in[n, h, w, c*r*r + i*r + j]
        x = permuted(input, order).reshape(b[0], H, W, C // (r * r), r, r).permute(0, 1, 4, 2, 5, 3)
        return unpermute(x.reshape(b[0], H * r, W * r, C // (r * r)), order)
    x = input.reshape(tuple(b) + (C // (r * r), r, r, H, W))
    x = x.permute(*range(nb), nb, nb + 3, nb + 1, nb + 4, nb + 2)
    return x.reshape(tuple(b) + (C // (r * r), H * r, W * r))


@export(method=False)
def pixel_unshuffle(input, downscale_factor):
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W) (``torch.nn.functional.pixel_unshuffle``)."""
    r = int(downscale_factor)
    if input.ndim < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *b, C, H, W = input.shape
    if H % r or W % r:
        raise RuntimeError(f"pixel_unshuffle expects height and width to be divisible by downscale_factor, but input "
                           f"has height {H} and width {W} and downscale_factor {r}")
    nb = len(b)
    order = suggest(input) if input.ndim == 4 else None
    if r == 1:
        return _copy_in(input, order)
    if order is not None:   # in the (N, H, W, C) view: out[n, h, w, c*r*r + i*r + j] = in[n, h*r+i, w*r+j, c]
        x = permuted(input, order).reshape(b[0], H // r, r, W // r, r, C).permute(0, 1, 3, 5, 2, 4)
        return unpermute(x.reshape(b[0], H // r, W // r, C * r * r), order)
    x = input.reshape(tuple(b) + (C, H // r, r, W // r, r))
    x = x.permute(*range(nb), nb, nb + 2, nb + 4, nb + 1, nb + 3)
    return x.reshape(tuple(b) + (C * r * r, H // r, W // r))


def _copy_in(input, order):
    """A copy of ``input`` laid out in ``order`` (None: row-major)."""
    from ..tensor.tensor import contiguous_format
    return lay_out(input.clone(), order) if order is not None else input.clone(memory_format=contiguous_format)


@export(method=False)
def channel_shuffle(input, groups):
    """(N, g*k, *) -> channels interleaved across the g groups (``torch.nn.functional.channel_shuffle``)."""
    g = int(groups)
    if input.ndim < 3:
        raise RuntimeError(f"channel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.ndim} dimension(s)")
    if g <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{g}")
    n, c, *rest = input.shape
    if c % g:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels and {g} groups.")
    order = suggest(input)   # (torch: the input's suggested memory format)
    if g == 1 or g == c:     # (the identity: a copy, as torch's; the reshapes below would return a view)
        return _copy_in(input, order)
    if order is not None:    # the same shuffle of the channels, last in the (N, *spatial, C) view
        x = permuted(input, order)
        sp = tuple(x.shape[1:-1])
        x = x.reshape((n,) + sp + (g, c // g)).transpose(-1, -2)
        return unpermute(x.reshape((n,) + sp + (c,)), order)
    x = input.reshape((n, g, c // g) + tuple(rest)).transpose(1, 2)
    return x.reshape((n, c) + tuple(rest))


def _lp_pool(nd, input, norm_type, kernel_size, stride, ceil_mode):
    from . import elementwise as _ew
    ks = _tuple(kernel_size, nd, "kernel_size", f"lp_pool{nd}d")
    pool = avg_pool1d if nd == 1 else avg_pool2d
    out = pool(_ew.apply(_ew._BIN["pow"], input, norm_type), kernel_size, stride, 0, ceil_mode)
    kk = 1
    for k in ks:
        kk *= k
    from .registry import EXPORTS
    sign = EXPORTS["sign"][0](out)
    mag = EXPORTS["relu"][0](EXPORTS["abs"][0](out))
    r = _ew.apply(_ew._BIN["mul"], _ew.apply(_ew._BIN["mul"], sign, mag), kk)
    return _ew.apply(_ew._BIN["pow"], r, 1.0 / norm_type)


@export(method=False)
def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling (``torch.nn.functional.lp_pool1d``)."""
    return _lp_pool(1, input, norm_type, kernel_size, stride, ceil_mode)


@export(method=False)
def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling (``torch.nn.functional.lp_pool2d``)."""
    return _lp_pool(2, input, norm_type, kernel_size, stride, ceil_mode)
