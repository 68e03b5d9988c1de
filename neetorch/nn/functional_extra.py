"""More of ``torch.nn.functional``, composed from existing ops (so each traces, compiles under ``@nee.jit`` and runs
on every device that runs its parts).  Exported into ``neetorch.nn.functional``.

3-D convolution and pooling reuse the 2-D ops:

* ``conv3d``: the depth taps are folded into the channels: the depth-padded input is viewed as sliding depth
  windows (``Tensor.unfold``), copied once to (N*OD, C*KD, H, W), and one ``conv2d`` with the weight reshaped to
  (O, C/groups*KD, KH, KW) computes every output depth slice (KD times the input's memory for the copy).
* ``conv_transpose3d``: one ``conv_transpose2d`` over (H, W) whose output channels carry the depth taps, then the
  depth taps are summed into place by ``fold`` (col2im along depth), cropped by the depth padding.
* max / average / adaptive pooling are separable (a 3-D window's max is the max over depth of the (H, W) maxima;
  PyTorch's average divisor is a product of per-dimension factors), so each is a 2-D pool over (H, W) followed by a
  2-D pool with a (KD, 1) window over (depth, H*W); indices are recombined into PyTorch's flat D*H*W indices.
"""
from __future__ import annotations

import math

from ..ops import conv as _c
from ..ops import nn as _nn
from ..ops.linalg import _CAP
from ..ops.memory_format import lay_out, permuted, suggest, unpermute
from ..tensor import creation as _cr
from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor

__all__ = ["conv3d", "conv_transpose3d", "max_pool3d", "max_pool3d_with_indices", "avg_pool3d",
           "adaptive_avg_pool3d", "adaptive_max_pool3d", "adaptive_max_pool3d_with_indices",
           "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices", "lp_pool3d",
           "local_response_norm", "max_unpool1d", "max_unpool2d", "max_unpool3d", "affine_grid", "grid_sample",
           "embedding_bag", "pdist", "multi_margin_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss",
           "triplet_margin_with_distance_loss", "multi_head_attention_forward", "linear_cross_entropy"]


def _lst(shape) -> str:
    return str(list(shape))


def _t3(v, name, op):
    return _c._tuple(v, 3, name, op)


def _check_float(x, op):
    if x._dtype.category != 2:
        raise NotImplementedError(f"\"{op}\" not implemented for '{_CAP[x._dtype.name]}'")


# ---------------------------------------------------------------- 3-D convolution
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D cross-correlation over (N, C, D, H, W) or (C, D, H, W) input (``torch.nn.functional.conv3d``)."""
    name = "conv3d"
    if not isinstance(input, Tensor) or not isinstance(weight, Tensor):
        raise TypeError(f"{name}(): argument 'input' and 'weight' must be Tensors")
    if input.ndim not in (4, 5):
        raise RuntimeError(f"Expected 4D (unbatched) or 5D (batched) input to {name}, but got input of size: "
                           f"{_lst(input.shape)}")
    unbatched = input.ndim == 4
    x = input.unsqueeze(0) if unbatched else input
    if weight.ndim != 5:
        raise RuntimeError(f"Expected 5-dimensional weight for 5-dimensional input {_lst(x.shape)}, but got "
                           f"{weight.ndim}-dimensional weight of size {_lst(weight.shape)} instead")
    if x._dtype is not weight._dtype:
        raise RuntimeError(f"expected scalar type {_CAP[x._dtype.name]} but found {_CAP[weight._dtype.name]}")
    groups = int(groups)
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    Co, Cg, KD, KH, KW = weight.shape
    if Co % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but "
                           f"got weight of size [{_lst(weight.shape)}] instead")
    N, C, D, H, W = x.shape
    if C != Cg * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {_lst(weight.shape)}, expected input{_lst(x.shape)} "
                           f"to have {Cg * groups} channels, but got {C} channels instead")
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != Co):
        raise RuntimeError(f"Given weight of size {_lst(weight.shape)}, expected bias to be 1-dimensional with {Co} "
                           f"elements, but got bias of size {_lst(bias.shape)} instead")
    st = _t3(stride, "stride", name)
    dil = _t3(dilation, "dilation", name)
    if any(s <= 0 for s in st):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dil):
        raise RuntimeError("dilation should be greater than zero")
    ks = (KD, KH, KW)
    if isinstance(padding, str):
        if padding == "valid":
            pads = [(0, 0)] * 3
        elif padding == "same":
            if any(s != 1 for s in st):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            pads = [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(ks, dil)]
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    else:
        p = _t3(padding, "padding", name)
        if any(v < 0 for v in p):
            raise RuntimeError("negative padding is not supported")
        pads = [(v, v) for v in p]
    padded = [n + a + b for n, (a, b) in zip((D, H, W), pads)]
    eff = [d * (k - 1) + 1 for k, d in zip(ks, dil)]
    if any(pn < e for pn, e in zip(padded, eff)):
        raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel size: "
                           f"({' x '.join(map(str, eff))}). Kernel size can't be greater than actual input size")
    if _c._int_conv_check(x, name, dil, False):
        y = _c._conv_int(x, weight, bias, st, pads, dil, groups)
        return y.squeeze(0) if unbatched else y
    from . import functional as F
    (pd0, pd1), (ph0, ph1), (pw0, pw1) = pads
    sym_hw = ph0 == ph1 and pw0 == pw1
    if pd0 or pd1 or not sym_hw:
        hw = (0, 0, 0, 0) if sym_hw else (pw0, pw1, ph0, ph1)
        x = F.pad(x, hw + (pd0, pd1))
    pad2 = (ph0, pw0) if sym_hw else (0, 0)
    OD = (x.shape[2] - eff[0]) // st[0] + 1
    win = x.unfold(2, eff[0], st[0])                       # (N, C, OD, H', W', effKD)
    if dil[0] > 1:
        win = win[..., ::dil[0]]                           # (N, C, OD, H', W', KD)
    cols = win.permute(0, 2, 1, 5, 3, 4).reshape(N * OD, C * KD, x.shape[3], x.shape[4])
    y = F.conv2d(cols, weight.reshape(Co, Cg * KD, KH, KW), bias, st[1:], pad2, dil[1:], groups)
    y = y.reshape(N, OD, Co, y.shape[2], y.shape[3]).permute(0, 2, 1, 3, 4)
    order = _conv3d_order(input, weight, groups, ks)
    y = y.contiguous() if order is None else lay_out(y, order)
    return y.squeeze(0) if unbatched else y


def _conv3d_order(input, weight, groups, ks):
    """torch's float32 3-D convolutions (direct and transposed) run on mkldnn, channels-last-3d when the batched
    input or the weight suggests it, where ``ConvParams::use_mkldnn`` picks it (a batch above 1, groups, a kernel above
    3x3 in (H, W), or a large input); its slow kernels (float64, small single-image float32) give row-major
    results."""
    if input.ndim != 5 or input._dtype is not _dt.float32:
        return None
    order = suggest(input) or suggest(weight)
    if order is None:
        return None
    N, C, D, H = input.shape[:4]
    if groups > 1 or (ks[2] > 3 and ks[1] > 3) or N > 1 or N * C * D * H > 20480:
        return order
    return None


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """3-D transposed convolution (``torch.nn.functional.conv_transpose3d``); weight (Cin, Cout/groups, KD, KH, KW)."""
    name = "conv_transpose3d"
    if input.ndim not in (4, 5):
        raise RuntimeError(f"Expected 4D (unbatched) or 5D (batched) input to {name}, but got input of size: "
                           f"{_lst(input.shape)}")
    unbatched = input.ndim == 4
    x = input.unsqueeze(0) if unbatched else input
    if weight.ndim != 5:
        raise RuntimeError(f"Expected 5-dimensional weight for {name}, but got weight of size {_lst(weight.shape)}")
    if x._dtype is not weight._dtype:
        raise RuntimeError(f"expected scalar type {_CAP[x._dtype.name]} but found {_CAP[weight._dtype.name]}")
    groups = int(groups)
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    Cin, Cog, KD, KH, KW = weight.shape
    if Cin % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but "
                           f"got weight of size [{_lst(weight.shape)}] instead")
    if x.shape[1] != Cin:
        raise RuntimeError(f"Given transposed=1, weight of size {_lst(weight.shape)}, expected input{_lst(x.shape)} to "
                           f"have {Cin} channels, but got {x.shape[1]} channels instead")
    Cout = Cog * groups
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != Cout):
        raise RuntimeError(f"Given transposed=1, weight of size {_lst(weight.shape)}, expected bias to be "
                           f"1-dimensional with {Cout} elements, but got bias of size {_lst(bias.shape)} instead")
    st = _t3(stride, "stride", name)
    pad = _t3(padding, "padding", name)
    opad = _t3(output_padding, "output_padding", name)
    dil = _t3(dilation, "dilation", name)
    if any(s <= 0 for s in st):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dil):
        raise RuntimeError("dilation should be greater than zero")
    if any(p < 0 for p in pad):
        raise RuntimeError("negative padding is not supported")
    for o, s, d in zip(opad, st, dil):
        if o < 0 or (o >= s and o >= d):
            raise RuntimeError(f"output padding must be smaller than either stride or dilation, but got "
                               f"output_padding={list(opad)} stride={list(st)} dilation={list(dil)}")
    N, _, D, H, W = x.shape
    outs = [(n - 1) * s - 2 * p + d * (k - 1) + o + 1
            for n, s, p, d, k, o in zip((D, H, W), st, pad, dil, (KD, KH, KW), opad)]
    if any(o < 0 for o in outs):
        raise RuntimeError(f"Given input size per channel: ({D} x {H} x {W}). Calculated output size per channel: "
                           f"({' x '.join(map(str, outs))}). Output size is too small")
    if any(o == 0 for o in outs):   # torch: an empty output (the padding eats all of it) is not an error
        y = _c._empty_conv_out(x, Cout, outs)
        return y.squeeze(0) if unbatched else y
    if _c._int_conv_check(x, name, dil, True):
        y = _c._conv_transpose_int(x, weight, bias, st, pad, opad, dil, groups)
        return y.squeeze(0) if unbatched else y
    from . import functional as F
    # (H, W): one 2-D transposed conv per input depth slice, the depth taps riding in the output channels
    x2 = x.permute(0, 2, 1, 3, 4).reshape(N * D, Cin, H, W)
    y = F.conv_transpose2d(x2, weight.reshape(Cin, Cog * KD, KH, KW), None, st[1:], pad[1:], opad[1:], groups,
                           dil[1:])
    OH, OW = y.shape[2], y.shape[3]
    # depth: out[j] = sum over (d, kd) with j = d*sd + kd*dd of y[d, kd]  -> col2im along depth (fold)
    cols = y.reshape(N, D, Cout, KD, OH, OW).permute(0, 2, 4, 5, 3, 1).reshape(N, Cout * OH * OW * KD, D)
    full = (D - 1) * st[0] + dil[0] * (KD - 1) + 1
    z = F.fold(cols, (full, 1), (KD, 1), (dil[0], 1), 0, (st[0], 1))   # (N, Cout*OH*OW, full, 1)
    z = z.reshape(N, Cout, OH, OW, full).permute(0, 1, 4, 2, 3)
    OD = outs[0]
    take = min(OD, full - pad[0])
    z = z.narrow(2, pad[0], take)
    if take < OD:  # output_padding beyond the full extent: positions no input reaches
        z = F.pad(z, (0, 0, 0, 0, 0, OD - take))
    order = _conv3d_order(input, weight, groups, (KD, KH, KW))
    if order is not None:
        z = lay_out(z, order)
        if bias is not None:
            z = z + bias.reshape(1, Cout, 1, 1, 1)
    elif bias is not None:   # (one pass into a row-major result)
        from ..ops import elementwise as _ew
        z = _ew.apply(_ew._BIN["add"], z, bias.reshape(1, Cout, 1, 1, 1), _layout=False)
    else:
        z = z.contiguous()
    return z.squeeze(0) if unbatched else z


# ---------------------------------------------------------------- 3-D pooling (separable over 2-D pools)
def _as5d(input, op, msg, integer=False):
    """``integer``: the integer dtypes pass too (True: all of them; a dtype: that one)."""
    if input.ndim not in (4, 5):
        raise RuntimeError(msg)
    unbatched = input.ndim == 4
    x = input.unsqueeze(0) if unbatched else input
    if not (integer is True and x._dtype.category == 1) and x._dtype is not integer:
        _check_float(x, op)
    return x, unbatched


def _check_pool3d_out(op, x, ks, st, pad, dil, ceil):
    osz = [_c._pool_out(n, k, p, s, d, ceil) for n, k, p, s, d in zip(x.shape[2:], ks, pad, st, dil)]
    if any(o < 1 for o in osz):
        C = x.shape[1]
        raise RuntimeError(f"{op}: Given input size: ({C}x{'x'.join(map(str, x.shape[2:]))}). Calculated output "
                           f"size: ({C}x{'x'.join(map(str, osz))}). Output size is too small")
    return osz


def _combine_indices(i_hw, i_d, N, C, D, H, W, OHW):
    """Flat D*H*W indices from the (H, W) stage's indices ``i_hw`` (N, C*D, OH, OW) and the depth stage's
    indices ``i_d`` (N, C, OD, OH*OW), which index the (D, OH*OW) plane."""
    d = i_d // OHW
    hw = i_hw.reshape(N, C, D, OHW).take_along_dim(d, 2)
    return d * (H * W) + hw


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """3-D max pooling over (N, C, D, H, W) or (C, D, H, W) (``torch.nn.functional.max_pool3d``)."""
    op = "max_pool3d"
    x, unb = _as5d(input, op, f"{op}: non-empty 4D or 5D (batch mode) tensor expected for input, but got "
                              f"{_lst(input.shape)}", integer=True)
    ks, st, pad, dil = _c._pool_args(3, op, kernel_size, stride, padding, dilation)
    _check_pool3d_out(op, x, ks, st, pad, dil, ceil_mode)
    if x._dtype.category == 1:
        r = _c._max_pool_int(x, ks, st, pad, dil, bool(ceil_mode), return_indices)
        if unb:
            return (r[0].squeeze(0), r[1].squeeze(0)) if return_indices else r.squeeze(0)
        order = suggest(input)
        return (lay_out(r[0], order), lay_out(r[1], order)) if return_indices else lay_out(r, order)
    N, C, D, H, W = x.shape
    r = _c.max_pool2d(x.reshape(N, C * D, H, W), ks[1:], st[1:], pad[1:], dil[1:], ceil_mode, return_indices)
    r, i_hw = r if return_indices else (r, None)
    OH, OW = r.shape[2], r.shape[3]
    r2 = _c.max_pool2d(r.reshape(N, C, D, OH * OW), (ks[0], 1), (st[0], 1), (pad[0], 0), (dil[0], 1), ceil_mode,
                       return_indices)
    r2, i_d = r2 if return_indices else (r2, None)
    OD = r2.shape[2]
    order = suggest(input)      # (torch: channels-last-3d kept; computed row-major here, then laid out)
    out = lay_out(r2.reshape(N, C, OD, OH, OW), order if not unb else None)
    if not return_indices:
        return out.squeeze(0) if unb else out
    idx = lay_out(_combine_indices(i_hw, i_d, N, C, D, H, W, OH * OW).reshape(N, C, OD, OH, OW),
                  order if not unb else None)
    return (out.squeeze(0), idx.squeeze(0)) if unb else (out, idx)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    return max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """3-D average pooling (``torch.nn.functional.avg_pool3d``)."""
    op = "avg_pool3d"
    x, unb = _as5d(input, op, f"{op}: non-empty 4D or 5D (batch mode) tensor expected for input, but got "
                              f"{_lst(input.shape)}", integer=_dt.int64)
    ks, st, pad, _ = _c._pool_args(3, op, kernel_size, stride, padding, 1)
    if divisor_override is not None and int(divisor_override) == 0:
        raise RuntimeError("divisor must be not zero")
    _check_pool3d_out(op, x, ks, st, pad, (1, 1, 1), ceil_mode)
    N, C, D, H, W = x.shape
    if D < ks[0] or H < ks[1] or W < ks[2]:            # PyTorch checks the unpadded input (3-D only)
        raise RuntimeError(f"input image (T: {D} H: {H} W: {W}) smaller than kernel size (kT: {ks[0]} kH: {ks[1]} "
                           f"kW: {ks[2]})")
    if x._dtype is _dt.int64:
        r = _c._avg_pool_int(x, ks, st, pad, bool(ceil_mode), bool(count_include_pad),
                             None if divisor_override is None else int(divisor_override))
        return r.squeeze(0) if unb else r
    dv = None if divisor_override is None else 1   # sums in both stages, one division at the end
    r = _c.avg_pool2d(x.reshape(N, C * D, H, W), ks[1:], st[1:], pad[1:], ceil_mode, count_include_pad, dv)
    OH, OW = r.shape[2], r.shape[3]
    r = _c.avg_pool2d(r.reshape(N, C, D, OH * OW), (ks[0], 1), (st[0], 1), (pad[0], 0), ceil_mode,
                      count_include_pad, dv)
    r = r.reshape(N, C, r.shape[2], OH, OW)
    if divisor_override is not None:
        r = r / float(int(divisor_override))
    return r.squeeze(0) if unb else r


def _adaptive3d(op, input, output_size, mode, return_indices=False):
    x, unb = _as5d(input, op, f"{op}(): Expected 4D or 5D tensor, but got {_lst(input.shape)}")
    osz = tuple(output_size) if isinstance(output_size, (list, tuple)) else (output_size,) * 3
    if len(osz) == 1:
        osz = osz * 3
    if len(osz) != 3:
        raise RuntimeError(f"{op}: output_size must be 3, but got {len(osz)}")
    osz = tuple(int(i) if o is None else int(o) for o, i in zip(osz, x.shape[2:]))
    if any(o < 0 for o in osz):
        raise RuntimeError(f"{op}: elements of output_size must be greater than or equal to 0 but received {osz}")
    for d in range(2, 5):
        if x.shape[d] == 0:
            raise RuntimeError(f"{op}(): Expected input to have non-zero size for non-batch dimensions, but input has "
                               f"sizes {_lst(input.shape)} with dimension {d - 1 + input.ndim - 4} being empty")
    N, C, D, H, W = x.shape
    OD, OH, OW = osz
    if mode == "avg":
        r = _c.adaptive_avg_pool2d(x.reshape(N, C * D, H, W), (OH, OW))
        r = _c.adaptive_avg_pool2d(r.reshape(N, C, D, OH * OW), (OD, OH * OW)).reshape(N, C, OD, OH, OW)
        return r.squeeze(0) if unb else r
    r, i_hw = _c.adaptive_max_pool2d(x.reshape(N, C * D, H, W), (OH, OW), True)
    r, i_d = _c.adaptive_max_pool2d(r.reshape(N, C, D, OH * OW), (OD, OH * OW), True)
    r = r.reshape(N, C, OD, OH, OW)
    if not return_indices:
        return r.squeeze(0) if unb else r
    idx = _combine_indices(i_hw, i_d, N, C, D, H, W, OH * OW).reshape(N, C, OD, OH, OW)
    return (r.squeeze(0), idx.squeeze(0)) if unb else (r, idx)


def adaptive_avg_pool3d(input, output_size):
    """Adaptive 3-D average pooling (``torch.nn.functional.adaptive_avg_pool3d``); None keeps a size."""
    return _adaptive3d("adaptive_avg_pool3d", input, output_size, "avg")


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """Adaptive 3-D max pooling (``torch.nn.functional.adaptive_max_pool3d``)."""
    return _adaptive3d("adaptive_max_pool3d", input, output_size, "max", return_indices)


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=True):
    return adaptive_max_pool3d(input, output_size, True)


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=True):
    return _c.adaptive_max_pool1d(input, output_size, True)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=True):
    return _c.adaptive_max_pool2d(input, output_size, True)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """3-D power-average pooling (``torch.nn.functional.lp_pool3d``): ``(sum x^p)^(1/p)`` over each window."""
    from . import functional as F
    kd, kh, kw = _t3(kernel_size, "kernel_size", "lp_pool3d")
    p = float(norm_type)
    out = avg_pool3d(input.pow(p), (kd, kh, kw), stride, 0, ceil_mode)
    return (out.sign() * F.relu(out.abs())).mul(kd * kh * kw).pow(1.0 / p)


# ---------------------------------------------------------------- normalization
def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """Local response normalization across channels (``torch.nn.functional.local_response_norm``):
    ``x / (k + alpha * mean over the size-channel window of x^2)^beta``."""
    from . import functional as F
    if input.ndim < 3:
        raise ValueError(f"local_response_norm: Expected 3D or higher dimensionality input (got {input.ndim} "
                         f"dimensions)")
    size = int(size)
    if size <= 0:
        raise ValueError(f"local_response_norm: size must be positive, got {size}")
    if input.numel() == 0:
        return input
    N, C = input.shape[0], input.shape[1]
    div = (input * input).reshape(N, 1, C, -1)
    div = F.pad(div, (0, 0, size // 2, (size - 1) // 2))
    div = _c.avg_pool2d(div, (size, 1), 1).reshape(input.shape)
    return input / (div * alpha + k).pow(beta)


# ---------------------------------------------------------------- unpooling
def _max_unpool(nd, op, input, indices, kernel_size, stride, padding, output_size):
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{op}: Expected {nd + 1}D or {nd + 2}D input, but got input of size {_lst(input.shape)}")
    if tuple(indices.shape) != tuple(input.shape):
        raise RuntimeError(f"{op}: Expected shape of indices to be same as that of the input tensor "
                           f"({_lst(input.shape)}) but got indices tensor with shape: {_lst(indices.shape)}")
    if indices._dtype is not _dt.int64:
        raise RuntimeError(f"{op}: Expected indices to be of type Long, got {indices._dtype}")
    ks = _c._tuple(kernel_size, nd, "kernel_size", op)
    st = ks if stride is None else _c._tuple(stride, nd, "stride", op)
    pad = _c._tuple(padding, nd, "padding", op)
    sp = tuple(input.shape[-nd:])
    default = [(n - 1) * s + k - 2 * p for n, s, k, p in zip(sp, st, ks, pad)]
    if output_size is None:
        osz = default
    else:
        osz = [int(v) for v in (output_size.tolist() if isinstance(output_size, Tensor) else output_size)]
        if len(osz) == nd + 2 or (len(osz) == nd + 1 and input.ndim == nd + 1):
            osz = osz[len(osz) - nd:]
        if len(osz) != nd:
            raise ValueError(f"{op}: output_size should be a sequence containing {nd} or {nd + 2} elements, but it "
                             f"has a length of '{len(osz)}'")
        for d in range(nd):
            lo, hi = default[d] - st[d], default[d] + st[d]
            if not lo < osz[d] < hi:
                raise ValueError(f'{op}: invalid output_size "{osz}" (dim {d} must be between {lo} and {hi})')
    unb = input.ndim == nd + 1
    x = input.unsqueeze(0) if unb else input
    ix = indices.unsqueeze(0) if unb else indices
    N, C = x.shape[0], x.shape[1]
    total = math.prod(osz)
    out = _cr.zeros(N, C, total, dtype=x._dtype, device=x._device)
    out = out.scatter(2, ix.reshape(N, C, -1), x.reshape(N, C, -1)).reshape(N, C, *osz)
    if unb:
        return out.squeeze(0)
    return lay_out(out, suggest(input)) if nd == 2 else out   # (torch: max_unpool2d keeps channels-last)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Partial inverse of max_pool1d (``torch.nn.functional.max_unpool1d``): values placed at ``indices``, zeros
    elsewhere."""
    return _max_unpool(1, "max_unpool1d", input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Partial inverse of max_pool2d (``torch.nn.functional.max_unpool2d``)."""
    return _max_unpool(2, "max_unpool2d", input, indices, kernel_size, stride, padding, output_size)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Partial inverse of max_pool3d (``torch.nn.functional.max_unpool3d``)."""
    return _max_unpool(3, "max_unpool3d", input, indices, kernel_size, stride, padding, output_size)


# ---------------------------------------------------------------- spatial transformers
def _base_coords(n, align_corners, dtype, device):
    if n <= 1:
        return _cr.zeros(max(n, 0), dtype=dtype, device=device)
    r = _cr.linspace(-1.0, 1.0, n, dtype=dtype, device=device)
    return r if align_corners else r * ((n - 1) / n)


def affine_grid(theta, size, align_corners=None):
    """Sampling grid for :func:`grid_sample` from a batch of affine matrices (``torch.nn.functional.affine_grid``):
    theta (N, 2, 3) with size (N, C, H, W) -> (N, H, W, 2); theta (N, 3, 4) with size (N, C, D, H, W) ->
    (N, D, H, W, 3)."""
    align_corners = bool(align_corners) if align_corners is not None else False
    if not isinstance(theta, Tensor) or theta._dtype.category != 2:
        raise ValueError(f"Expected theta to have floating point type, but got {getattr(theta, 'dtype', theta)}")
    size = [int(s) for s in size]
    if len(size) == 4:
        if theta.ndim != 3 or tuple(theta.shape[1:]) != (2, 3):
            raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {size}. Got "
                             f"{_lst(theta.shape)}.")
        spatial = size[2:]
    elif len(size) == 5:
        if theta.ndim != 3 or tuple(theta.shape[1:]) != (3, 4):
            raise ValueError(f"Expected a batch of 3D affine matrices of shape Nx3x4 for size {size}. Got "
                             f"{_lst(theta.shape)}.")
        spatial = size[2:]
    else:
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                                  f"respectively. Got size {size}.")
    if min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    if theta.shape[0] != size[0]:
        raise ValueError(f"affine_grid: theta has batch size {theta.shape[0]} but size[0] is {size[0]}")
    dt, dev = theta._dtype, theta._device
    nd = len(spatial)
    # base[..., :] = (x, y[, z], 1), x varying along the last spatial dim
    comps = []
    for i in range(nd):
        n = spatial[nd - 1 - i]
        c = _base_coords(n, align_corners, dt, dev)
        shape = [1] * nd
        shape[nd - 1 - i] = n
        comps.append(c.reshape(shape).expand(*spatial))
    comps.append(_cr.ones(tuple(spatial), dtype=dt, device=dev))
    from ..ops.shape import stack
    base = stack(comps, -1).reshape(1, -1, nd + 1)
    grid = base.matmul(theta.transpose(1, 2))          # (N, prod(spatial), nd)
    return grid.reshape(size[0], *spatial, nd)


def _reflect(coord, twice_low, twice_high):
    if twice_low == twice_high:
        return coord * 0.0
    lo = twice_low / 2.0
    span = (twice_high - twice_low) / 2.0
    c = (coord - lo).abs()
    extra = c.fmod(span)
    flips = (c / span).floor()
    even = flips.fmod(2.0) == 0
    from ..ops.elementwise import where
    return where(even, extra + lo, span - extra + lo)


def _source_coord(coord, size, padding_mode, align_corners):
    if align_corners:
        c = (coord + 1.0) / 2.0 * (size - 1)
    else:
        c = ((coord + 1.0) * size - 1.0) / 2.0
    return _pad_coord(c, size, padding_mode, align_corners)


def _pad_coord(c, size, padding_mode, align_corners):
    """PyTorch's ``compute_coordinates``: border clamps, reflection reflects then clamps (a NaN clamps to 0, as
    PyTorch's vectorised clip does), zeros leaves the coordinate alone."""
    from ..ops.elementwise import where
    if padding_mode == "border":
        c = c.clamp(0.0, size - 1)
    elif padding_mode == "reflection":
        c = _reflect(c, 0, 2 * (size - 1)) if align_corners else _reflect(c, -1, 2 * size - 1)
        c = c.clamp(0.0, size - 1)
    else:
        return c
    return where(c == c, c, 0.0)


def _cubic_weights(t):
    """The 4 cubic-convolution weights (A = -0.75, PyTorch's ``get_cubic_upsample_coefficients``) of the taps at
    floor(x) - 1 .. floor(x) + 2 for the fraction ``t = x - floor(x)``."""
    A = -0.75

    def near(x):                                       # |x| <= 1
        return ((x * (A + 2.0)) - (A + 3.0)) * x * x + 1.0

    def far(x):                                        # 1 < |x| < 2
        return ((x * A - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
    return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]


def _bicubic_taps(coords, sizes, padding_mode, align_corners, tap):
    """Bicubic grid_sample (2-D): like PyTorch, the 4x4 taps around the unpadded source point each get the padding
    mode applied to their own coordinates (border: clamped, reflection: reflected then clamped, zeros: 0 outside);
    interpolated along x for each of the 4 rows, then along y."""
    def pad(c, n):
        return _pad_coord(c, n, padding_mode, align_corners)
    (cy, cx), (H, W) = coords, sizes
    y0, x0 = cy.floor(), cx.floor()
    wy, wx = _cubic_weights(cy - y0), _cubic_weights(cx - x0)
    xs = [pad(x0 + (j - 1.0), W) for j in range(4)]
    out = None
    for i in range(4):
        yi = pad(y0 + (i - 1.0), H)
        row = None
        for j in range(4):
            term = tap([yi, xs[j]]) * wx[j].unsqueeze(1)
            row = term if row is None else row + term
        term = row * wy[i].unsqueeze(1)
        out = term if out is None else out + term
    return out


def _aa_weights(n_in, n_out, scale, align_corners, mode, f, antialias=True):
    """(n_out, n_in) anti-aliasing resampling matrix of one spatial dim, PyTorch's ``_compute_weights_aa`` in the
    compute dtype ``f``: the filter (triangle for bilinear, Keys cubic with a = -0.5 for bicubic) is stretched by the
    downscale factor, taps are the input pixels within its support around the output pixel's centre, and the
    weights of each output pixel are normalised to sum to 1.  ``antialias=False`` (torch's uint8 bilinear): the
    filter is not stretched and align_corners shifts the centres by half a pixel."""
    import numpy as np
    if align_corners:
        sc = f(n_in - 1) / f(n_out - 1) if n_out > 1 else f(0)
    elif scale is not None and scale > 0:
        sc = f(1.0 / scale)
    else:
        sc = f(n_in) / f(n_out)
    interp = 2 if mode == "bilinear" else 4
    stretch = antialias and sc >= 1.0
    support = f(interp * 0.5) * sc if stretch else f(interp * 0.5)
    invscale = f(1.0) / sc if stretch else f(1.0)
    delta = f(0.5) if (align_corners and not antialias) else f(0.0)
    max_size = int(math.ceil(support)) * 2 + 1

    def filt(x):
        x = abs(x)
        if mode == "bilinear":
            return f(1.0) - x if x < 1.0 else f(0.0)
        a = f(-0.5)
        if x < 1.0:
            return ((a + f(2.0)) * x - (a + f(3.0))) * x * x + f(1.0)
        if x < 2.0:
            return ((a * x - f(5.0) * a) * x + f(8.0) * a) * x - f(4.0) * a
        return f(0.0)
    m = np.zeros((n_out, n_in), dtype=f)
    for i in range(n_out):
        center = sc * (f(i + 0.5) - delta)
        xmin = max(int(center - support + f(0.5) + delta), 0)
        xsize = min(max(min(int(center + support + f(0.5) + delta), n_in) - xmin, 0), max_size)
        w = np.array([filt((f(j + xmin) - center + f(0.5) - delta) * invscale) for j in range(xsize)], dtype=f)
        total = w.sum(dtype=f)
        m[i, xmin:xmin + xsize] = w / total if total != 0 else w
    return m


def _interpolate_uint8(input, output_size, scales, mode, align_corners, antialias):
    """uint8 bilinear / bicubic ``interpolate`` (4-D), bit-exact with PyTorch's (PIL-like) uint8 kernels: per dim
    (width first, a dim whose size does not change is skipped) float64 weights - the anti-aliasing framework's for
    bilinear and antialiased bicubic, the float bicubic taps (clamped at the border, a = -0.75) otherwise - become
    int16 fixed point with the most precision bits the largest weight allows; each pass is an int64 matmul, rounded
    half up, shifted back and clamped to [0, 255]."""
    import numpy as np
    from ..ops.conv import _taps
    order = suggest(input)
    y = permuted(input.to(_dt.int64), order)
    for j in (1, 0):
        d = 2 + j
        n_in, n_out = input.shape[d], output_size[j]
        if n_in == n_out:
            continue
        sc = None if scales is None else scales[j]
        if mode == "bicubic" and not antialias:
            m = np.zeros((n_out, n_in))
            rows = np.arange(n_out)
            for idx, w in _taps("bicubic", n_in, n_out, sc, align_corners, np.float64):
                np.add.at(m, (rows, idx), w)
        else:
            m = _aa_weights(n_in, n_out, sc, align_corners, mode, np.float64, antialias)
        wmax = float(m.max())
        prec = 0
        while prec < 22 and int(0.5 + wmax * (1 << (prec + 1))) < (1 << 15):
            prec += 1
        v = m * (1 << prec)
        mi = np.trunc(np.where(v < 0, v - 0.5, v + 0.5)).astype(np.int64)
        z = _resample_dim(y, d if order is None else d - 1, mi, _dt.int64)
        if prec:
            z = (z + (1 << (prec - 1))) // (1 << prec)
        y = z.clamp(0, 255)
    return unpermute(y, order).to(_dt.uint8)


def _resample_dim(y, d, m, dt):
    """``y`` resampled along dim ``d`` by the (n_out, n_in) numpy matrix ``m``, as one matmul whose result is
    row-major in ``y``'s dim order (``y @ m.T`` along the last dim, else ``m @ y`` over the dims after ``d`` merged)."""
    if d == y.ndim - 1:
        return y.matmul(_cr.tensor(m.T.copy(), dtype=dt, device=y._device))
    shp = tuple(y.shape)
    z = _cr.tensor(m, dtype=dt, device=y._device).matmul(y.reshape(shp[:d + 1] + (-1,)))
    return z.reshape(shp[:d] + (m.shape[0],) + shp[d + 1:])


def _interpolate_antialias(input, output_size, scales, mode, align_corners):
    """``interpolate(..., antialias=True)`` for 4-D bilinear / bicubic input: separable, the width first then the
    height (a dim whose size does not change is copied), each a matmul with the dim's (n_out, n_in) weights."""
    if input._dtype not in (_dt.float32, _dt.float64):
        raise NotImplementedError(f"\"compute_index_ranges_weights\" not implemented for '{_CAP[input._dtype.name]}' "
                                  f"(interpolate with antialias=True takes float32 / float64 input)")
    cdt = input._dtype
    f = cdt.np.type
    order = suggest(input)   # (torch: the input's suggested memory format; computed in the (N, H, W, C) view)
    y = permuted(input, order)
    for j in (1, 0):
        d = 2 + j
        n_in, n_out = input.shape[d], output_size[j]
        if n_in == n_out:
            continue
        m = _aa_weights(n_in, n_out, None if scales is None else scales[j], align_corners, mode, f)
        y = _resample_dim(y, d if order is None else d - 1, m, cdt)
    if all(input.shape[2 + j] == output_size[j] for j in (0, 1)):
        return _c._copy_in(input, order)      # (a copy, as torch's)
    return unpermute(y, order)


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """Sample ``input`` (N, C, H, W) at ``grid`` (N, Ho, Wo, 2) locations in [-1, 1] (x, y), or (N, C, D, H, W) at
    (N, Do, Ho, Wo, 3) locations (x, y, z) (``torch.nn.functional.grid_sample``); modes 'bilinear' (trilinear for
    5-D), 'nearest' and 'bicubic' (4-D only), padding 'zeros', 'border' and 'reflection'.  Built from ``gather``:
    one gather per tap (4 for bilinear, 8 for trilinear, 16 for bicubic, 1 for nearest)."""
    from ..ops.elementwise import where
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', but "
                         f"got: '{mode}'")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                         f"'reflection', but got: '{padding_mode}'")
    align_corners = bool(align_corners) if align_corners is not None else False
    if input.ndim not in (4, 5):
        raise RuntimeError(f"grid_sample(): expected 4D or 5D input and grid with same number of dimensions, but got "
                           f"input with sizes {_lst(input.shape)} and grid with sizes {_lst(grid.shape)}")
    nd = input.ndim - 2
    if grid.ndim != input.ndim or grid.shape[-1] != nd or grid.shape[0] != input.shape[0]:
        want = ", ".join([str(input.shape[0])] + ["D_out", "H_out", "W_out"][3 - nd:] + [str(nd)])
        raise RuntimeError(f"grid_sample(): expected grid of shape [{want}] for input {_lst(input.shape)}, but got "
                           f"grid of size {_lst(grid.shape)}")
    if input._dtype is not grid._dtype:
        raise RuntimeError(f"grid_sample(): expected input and grid to have the same dtype, but input has "
                           f"{input._dtype} and grid has {grid._dtype}")
    _check_float(input, "grid_sample")
    if mode == "bicubic" and nd != 2:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    N, C = input.shape[0], input.shape[1]
    sizes = tuple(input.shape[2:])                      # (H, W) or (D, H, W)
    out_sp = tuple(grid.shape[1:-1])
    L = math.prod(out_sp)
    # source coordinates per spatial dim, in the input's dim order; grid's last axis is (x, y[, z])
    if mode == "bicubic":       # padding applies to each tap's coordinate, not to the sample point
        coords = [_source_coord(grid.select(-1, nd - 1 - k), sizes[k], "zeros", align_corners) for k in range(nd)]
    else:
        coords = [_source_coord(grid.select(-1, nd - 1 - k), sizes[k], padding_mode, align_corners)
                  for k in range(nd)]
    flat = input.reshape(N, C, math.prod(sizes))
    zero = _cr.zeros((), dtype=input._dtype, device=input._device)

    def tap(idx):
        """Values at integer coordinates (float tensors holding ints, one per dim), zero outside the input."""
        inb = None
        lin = None
        for c, n in zip(idx, sizes):
            ok = (c >= 0) & (c <= n - 1)                # False for NaN too
            inb = ok if inb is None else inb & ok
            cc = where(ok, c, 0.0).to(_dt.int64)       # (in int64: float16 holds whole numbers to 2048 only)
            lin = cc if lin is None else lin * n + cc
        lin = lin.reshape(N, 1, L)
        v = flat.gather(2, lin.expand(N, C, L)).reshape(N, C, *out_sp)
        return where(inb.unsqueeze(1), v, zero)

    if mode == "nearest":
        return tap([c.round() for c in coords])        # round half to even, like PyTorch's nearbyint
    if mode == "bicubic":
        return _bicubic_taps(coords, sizes, padding_mode, align_corners, tap)
    lo = [c.floor() for c in coords]
    out = None
    for corner in range(2 ** nd):
        idx, w = [], None
        for k in range(nd):
            hi = (corner >> (nd - 1 - k)) & 1
            idx.append(lo[k] + 1.0 if hi else lo[k])
            wk = coords[k] - lo[k] if hi else lo[k] + 1.0 - coords[k]
            w = wk if w is None else w * wk
        term = tap(idx) * w.unsqueeze(1)
        out = term if out is None else out + term
    return out


# ---------------------------------------------------------------- embeddings
def _bag_rows(input, weight, max_norm, norm_type):
    """embedding rows for embedding_bag: an index out of range raises what both of torch's exception types catch
    (torch's embedding raises IndexError, its embedding_bag RuntimeError)."""
    from ..ops.indexing import IndexOutOfRangeError
    from . import functional as F
    try:
        return F.embedding(input, weight, max_norm=max_norm, norm_type=norm_type)
    except IndexError as e:
        raise IndexOutOfRangeError(f"embedding_bag: {e}") from None


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """Sums, means or maxes of bags of embeddings (``torch.nn.functional.embedding_bag``).

    2-D ``input`` (B, L): each row is a bag.  1-D ``input`` with ``offsets`` (B or B+1 with ``include_last_offset``):
    bag b is ``input[offsets[b]:offsets[b+1]]``.  Bag membership is computed from the offsets as tensors (no value is
    read on the host), so the function traces; the reduction adds each gathered embedding into its bag's row
    (index_add; max: a masked max over (B, n, D)).  Empty bags give zeros, ``padding_idx`` entries are skipped."""
    from ..ops.elementwise import where
    from . import functional as F
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"embedding_bag: mode has to be one of sum, mean or max, got '{mode}'")
    if weight.ndim != 2:
        raise ValueError(f"embedding_bag: weight has to be a 2D Tensor, but got Tensor of dimension {weight.ndim}")
    if input._dtype not in (_dt.int64, _dt.int32):
        raise ValueError(f"embedding_bag: expected input to be an integer tensor (Long or Int), got {input._dtype}")
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                      f"supported for mode='sum' (got mode='{mode}'). Please open a feature request "
                                      f"on GitHub.")
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ValueError(f"embedding_bag: embedding_bag: If per_sample_weights ({_lst(per_sample_weights.shape)})"
                             f" is not None, then it must have the same shape as the input ({_lst(input.shape)})")
    num_w = weight.shape[0]
    if padding_idx is not None:
        padding_idx = int(padding_idx)
        if not -num_w <= padding_idx < num_w:
            raise AssertionError(f"embedding_bag: padding_idx must be within the number of embeddings, got "
                                 f"{padding_idx} for {num_w} embeddings")
        if padding_idx < 0:
            padding_idx += num_w
    dt, dev = weight._dtype, weight._device
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             "fixed length sequences. However, found offsets of type Tensor")
        B, L = input.shape
        emb = _bag_rows(input, weight, max_norm, norm_type)                              # (B, L, D)
        keep = None if padding_idx is None else (input != padding_idx)
        if per_sample_weights is not None:
            emb = emb * per_sample_weights.unsqueeze(-1).to(dt)
        if mode == "max":
            if keep is None:
                return emb.amax(1) if L > 0 else _cr.zeros(B, weight.shape[1], dtype=dt, device=dev)
            neg = _cr.full((), float("-inf"), dtype=dt, device=dev)
            if L == 0:
                return _cr.zeros(B, weight.shape[1], dtype=dt, device=dev)
            m = where(keep.unsqueeze(-1), emb, neg).amax(1)
            return where(keep.any(1).unsqueeze(-1), m, _cr.zeros((), dtype=dt, device=dev))
        if keep is not None:     # (where, not a multiply: a NaN / inf padding row must not leak into the sum)
            emb = where(keep.unsqueeze(-1), emb, _cr.zeros((), dtype=dt, device=dev))
        s = emb.sum(1)
        if mode == "sum":
            return s
        cnt = keep.sum(1).to(dt) if keep is not None else _cr.full((), float(L), dtype=dt, device=dev)
        return s / cnt.clamp(min=1.0).unsqueeze(-1) if keep is not None else (s / max(L, 1))
    if input.ndim != 1:
        raise ValueError(f"embedding_bag: input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    if offsets is None:
        raise ValueError("offsets has to be a 1D Tensor but got None")
    if offsets.ndim != 1:
        raise ValueError(f"offsets has to be a 1D Tensor, but got Tensor of dimension {offsets.ndim}")
    n = input.shape[0]
    B = offsets.shape[0] - (1 if include_last_offset else 0)
    if B < 0:
        raise ValueError("embedding_bag: include_last_offset=True needs at least one offset")
    from ..ops.registry import _trace_hook
    if offsets.shape[0] and _trace_hook[0] is None:  # (traced offsets are not read: the graph must not depend on them)
        o = offsets.numpy(force=True).astype("int64")
        if int(o[0]) != 0:
            raise RuntimeError(f"embedding_bag: offsets[0] has to be 0, i.e., the first sequence in the mini-batch "
                               f"has to start from position 0. However, got {int(o[0])}")
        if int(o[-1]) > n:
            raise RuntimeError(f"embedding_bag: offsets[-1] can not be greater than input's length {n} but got "
                               f"offsets[-1] of {int(o[-1])}")
        if (o[1:] < o[:-1]).any():
            raise RuntimeError(f"embedding_bag: offsets must be non-decreasing, got {o.tolist()}")
    pos = _cr.arange(n, device=dev)
    # bag of each position: (number of offsets <= pos) - 1; positions past the last offset (include_last_offset)
    # get bag B and belong to no bag
    seg = (pos.unsqueeze(1) >= offsets.to(_dt.int64).unsqueeze(0)).sum(1) - 1                   # (n,)
    member = seg.unsqueeze(0) == _cr.arange(B, device=dev).unsqueeze(1)                           # (B, n)
    if padding_idx is not None:
        member = member & (input != padding_idx).unsqueeze(0)
    emb = _bag_rows(input, weight, max_norm, norm_type)                                           # (n, D)
    if per_sample_weights is not None:
        emb = emb * per_sample_weights.unsqueeze(-1).to(dt)
    if mode == "max":
        neg = _cr.full((), float("-inf"), dtype=dt, device=dev)
        if n == 0:
            return _cr.zeros(B, weight.shape[1], dtype=dt, device=dev)
        m = where(member.unsqueeze(-1), emb.unsqueeze(0), neg).amax(1)                         # (B, D)
        return where(member.any(1).unsqueeze(-1), m, _cr.zeros((), dtype=dt, device=dev))
    # each position's row added into its bag (a position in no bag, past the last offset or padding, into a
    # spare row B): a membership-matrix matmul would spread a NaN / inf row into every bag through 0 * inf
    tgt = where(member.any(0), seg, _cr.full((), B, dtype=_dt.int64, device=dev))
    s = _cr.zeros(B + 1, emb.shape[1], dtype=dt, device=dev).index_add(0, tgt, emb)[:B]
    if mode == "sum":
        return s
    return s / member.sum(1).to(dt).clamp(min=1.0).unsqueeze(-1)


# ---------------------------------------------------------------- distances
def pdist(input, p=2):
    """Pairwise p-norm distances between the rows of (N, M) ``input``, the upper triangle row by row
    (``torch.nn.functional.pdist``): N*(N-1)/2 values."""
    from .. import linalg
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    _check_float(input, "pdist")
    if input._dtype.name in ("float16", "bfloat16"):
        raise NotImplementedError(f"\"pdist\" not implemented for '{_CAP[input._dtype.name]}'")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    n = input.shape[0]
    if n < 2:
        return _cr.zeros(0, dtype=input._dtype, device=input._device)
    import numpy as np
    rows, cols = np.triu_indices(n, 1)   # from the shape only: a constant under tracing
    a = input.index_select(0, _cr.tensor(rows.astype(np.int64), device=input._device))
    b = input.index_select(0, _cr.tensor(cols.astype(np.int64), device=input._device))
    return linalg.vector_norm(a - b, float(p), -1)


# ---------------------------------------------------------------- losses
def _reduction(size_average, reduce, reduction):
    return _nn._legacy_reduction(size_average, reduce, reduction)


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                      reduction="mean"):
    """Multi-class hinge loss (``torch.nn.functional.multi_margin_loss``):
    ``sum_{j != y} max(0, margin - x[y] + x[j])^p * w[y] / C`` per sample."""
    reduction = _reduction(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    if input.ndim not in (1, 2) or input.numel() == 0:
        raise RuntimeError(f"multi_margin_loss: Expected non-empty vector or matrix with optional 0-dim batch size, "
                           f"but got: {_lst(input.shape)}")
    x = input if input.ndim == 2 else input.unsqueeze(0)
    t = target.reshape(-1)
    N, C = x.shape
    if t.shape[0] != N:
        raise RuntimeError(f"multi_margin_loss: inconsistent target size: {_lst(target.shape)} for input of size: "
                           f"{_lst(input.shape)}")
    if weight is not None and (weight.ndim != 1 or weight.shape[0] != C):
        raise RuntimeError(f"multi_margin_loss: inconsistent weight size, expected {[C]} but got "
                           f"{_lst(weight.shape)}")
    t = t.to(_dt.int64)
    xy = x.gather(1, t.unsqueeze(1))
    z = (x - xy + margin).clamp(min=0.0)
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * weight.index_select(0, t).unsqueeze(1)
    not_y = _cr.arange(C, device=x._device).unsqueeze(0) != t.unsqueeze(1)
    loss = (z * not_y.to(z._dtype)).sum(1) / C
    if input.ndim == 1:
        loss = loss.reshape(())
    return _nn._reduce(loss, reduction)


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Multi-label hinge loss (``torch.nn.functional.multilabel_margin_loss``): ``target`` holds class indices,
    ended by the first -1; per sample ``sum_{j in targets, k not in targets} max(0, 1 - (x[j] - x[k])) / C``."""
    reduction = _reduction(size_average, reduce, reduction)
    if input.ndim not in (1, 2) or tuple(target.shape) != tuple(input.shape):
        raise RuntimeError(f"multilabel_margin_loss: inconsistent target size: {_lst(target.shape)} for input of "
                           f"size: {_lst(input.shape)}")
    x = input if input.ndim == 2 else input.unsqueeze(0)
    t = (target if target.ndim == 2 else target.unsqueeze(0)).to(_dt.int64)
    C = x.shape[1]
    valid = (t >= 0).to(_dt.int64).cumprod(1) > 0                               # before the first -1
    tc = t.clamp(min=0)
    classes = _cr.arange(C, device=x._device)
    is_target = ((tc.unsqueeze(2) == classes.reshape(1, 1, C)) & valid.unsqueeze(2)).any(1)    # (N, C)
    xy = x.gather(1, tc)                                                          # (N, C): x[target[j]]
    terms = (1.0 - xy.unsqueeze(2) + x.unsqueeze(1)).clamp(min=0.0)               # (N, j, k)
    mask = valid.unsqueeze(2) & (~is_target).unsqueeze(1)
    loss = (terms * mask.to(x._dtype)).sum((1, 2)) / C
    if input.ndim == 1:
        loss = loss.reshape(())
    return _nn._reduce(loss, reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """``-mean_c(y log sigmoid(x) + (1 - y) log sigmoid(-x))`` per sample
    (``torch.nn.functional.multilabel_soft_margin_loss``)."""
    from . import functional as F
    reduction = _reduction(size_average, reduce, reduction)
    loss = -(target * F.logsigmoid(input) + (1 - target) * F.logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    C = input.shape[-1] if input.ndim > 0 else 1
    loss = loss.sum(dim=input.ndim - 1) / C if input.ndim > 0 else loss
    return _nn._reduce(loss, reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None, margin=1.0,
                                      swap=False, reduction="mean"):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with any distance (``torch.nn.functional.
    triplet_margin_with_distance_loss``); default distance: ``pairwise_distance``."""
    from . import functional as F
    if margin <= 0:
        raise ValueError(f"triplet_margin_with_distance_loss: expected margin to be greater than 0, got {margin} "
                         f"instead")
    if not (anchor.ndim == positive.ndim == negative.ndim):
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the same number of "
                           f"dimensions, but got: anchor {anchor.ndim}D, positive {positive.ndim}D, and negative "
                           f"{negative.ndim}D inputs")
    dist = distance_function if distance_function is not None else F.pairwise_distance
    dp = dist(anchor, positive)
    dn = dist(anchor, negative)
    if swap:
        dn = _nn_minimum(dn, dist(positive, negative))
    return _nn._reduce((dp - dn + margin).clamp(min=0.0), reduction)


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None, reduction="mean",
                         ignore_index=None, label_smoothing=0.0, options=None):
    """``cross_entropy(linear(input, linear_weight, linear_bias), target, ...)`` (``torch.nn.functional.
    linear_cross_entropy``): ``linear_weight`` (C, *out_features, in_features) gives K-dimensional logits
    (N, C, *out_features).  ``options`` (torch's chunking choices) changes no value and is accepted as it is."""
    from . import functional as F
    if input.ndim < 1 or input.ndim > 2:
        raise RuntimeError(f"linear_cross_entropy: expected input with dimensionality 1 or 2, got {input.ndim}")
    if linear_weight.ndim < 2:
        raise RuntimeError(f"linear_cross_entropy: expected linear_weight with dimensionality at least 2, got "
                           f"{linear_weight.ndim}")
    nb, in_features = tuple(input.shape[:-1]), input.shape[-1]
    if in_features != linear_weight.shape[-1]:
        raise RuntimeError(f"linear_cross_entropy: expected equal input and linear_weight last dimensions "
                           f"(in_features), got {in_features} and {linear_weight.shape[-1]}, respectively")
    C, out_f = linear_weight.shape[0], tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (C, *out_f):
        raise RuntimeError(f"linear_cross_entropy: expected linear_bias shape {(C, *out_f)}, got "
                           f"{tuple(linear_bias.shape)}")
    if out_f and not nb:
        raise RuntimeError(f"linear_cross_entropy: K-dimensional loss defined by linear_weight shape "
                           f"{tuple(linear_weight.shape)} requires batched input, (N, {in_features}), got unbatched "
                           f"input with shape {tuple(input.shape)}")
    logits_shape = (*nb, C, *out_f)
    if tuple(target.shape) == logits_shape and ignore_index is not None:
        raise RuntimeError("linear_cross_entropy: ignore_index cannot be specified when target contains probabilities")
    n_out = math.prod(out_f) * C
    w2 = linear_weight.reshape(n_out, in_features) if out_f else linear_weight
    b2 = linear_bias.reshape(n_out) if (out_f and linear_bias is not None) else linear_bias
    logits = F.linear(input, w2, b2).reshape(logits_shape)
    return F.cross_entropy(logits, target, weight=weight, reduction=reduction,
                           ignore_index=-100 if ignore_index is None else ignore_index, label_smoothing=label_smoothing)


def _nn_minimum(a, b):
    from ..ops.registry import EXPORTS
    return EXPORTS["minimum"][0](a, b)


# ---------------------------------------------------------------- attention
def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                                 training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False):
    """``torch.nn.functional.multi_head_attention_forward``: ``nn.MultiheadAttention``'s forward on explicit
    weights ((L, N, E) or unbatched (L, E) inputs); runs the module's own forward on a parameter namespace, so the
    two cannot drift apart.  ``static_k`` / ``static_v`` ((N*num_heads, S, head_dim)) replace the projected keys /
    values."""
    import types
    from . import functional as F
    from .modules.activation import MultiheadAttention
    E = query.shape[-1]
    if E != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but got {E}")
    head_dim = E // num_heads
    if head_dim * num_heads != E:
        raise AssertionError(f"embed_dim {E} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight and (q_proj_weight is None or k_proj_weight is None or v_proj_weight is None):
        raise AssertionError("use_separate_proj_weight is True but q_proj_weight, k_proj_weight or v_proj_weight "
                             "is None")
    if not use_separate_proj_weight and in_proj_weight is None:
        raise AssertionError("use_separate_proj_weight is False but in_proj_weight is None")
    ns = types.SimpleNamespace(
        embed_dim=E, num_heads=num_heads, head_dim=head_dim, batch_first=False,
        _qkv_same_embed_dim=not use_separate_proj_weight, in_proj_weight=in_proj_weight, in_proj_bias=in_proj_bias,
        q_proj_weight=q_proj_weight, k_proj_weight=k_proj_weight, v_proj_weight=v_proj_weight, bias_k=bias_k,
        bias_v=bias_v, add_zero_attn=bool(add_zero_attn), dropout=float(dropout_p), training=bool(training),
        out_proj=lambda x: F.linear(x, out_proj_weight, out_proj_bias), _static_kv=(static_k, static_v))
    ns._projections = lambda q, k, v: MultiheadAttention._projections(ns, q, k, v)
    return MultiheadAttention.forward(ns, query, key, value, key_padding_mask, need_weights, attn_mask,
                                      average_attn_weights, is_causal)
