"""``torch.nn.utils.fusion``: folding an eval-mode BatchNorm into the preceding Conv / Linear (same formulas)."""
from __future__ import annotations

import copy

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights"]


def _ew(name):
    from ...ops.registry import EXPORTS
    return EXPORTS[name][0]


def fuse_conv_bn_eval(conv, bn, transpose: bool = False):
    """A copy of ``conv`` whose weight / bias include ``bn``'s eval-mode affine map (both must be in eval mode)."""
    if conv.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused = copy.deepcopy(conv)
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused.weight, fused.bias = fuse_conv_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                    bn.eps, bn.weight, bn.bias, transpose)
    return fused


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, transpose: bool = False):
    """``(conv_w * (bn_w / sqrt(bn_rv + eps)), (conv_b - bn_rm) / sqrt(bn_rv + eps) * bn_w + bn_b)`` as Parameters
    in the conv's dtypes (output channels on dim 1 with ``transpose``)."""
    from ..parameter import Parameter
    from ...tensor import creation as _cr
    w_dt = conv_w.dtype
    b_dt = conv_b.dtype if conv_b is not None else w_dt
    if conv_b is None:
        conv_b = _cr.zeros_like(bn_rm)
    if bn_w is None:
        bn_w = _cr.ones_like(bn_rm)
    if bn_b is None:
        bn_b = _cr.zeros_like(bn_rm)
    rs = _ew("rsqrt")(bn_rv + bn_eps)
    shape = ([1, -1] if transpose else [-1, 1]) + [1] * (conv_w.ndim - 2)
    fw = (conv_w * (bn_w * rs).reshape(shape)).to(w_dt)
    fb = ((conv_b - bn_rm) * rs * bn_w + bn_b).to(b_dt)
    return Parameter(fw, conv_w.requires_grad), Parameter(fb, conv_b.requires_grad)


def fuse_linear_bn_eval(linear, bn):
    """A copy of ``linear`` whose weight / bias include ``bn``'s eval-mode affine map."""
    if linear.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused = copy.deepcopy(linear)
    if linear.out_features != bn.num_features and bn.num_features != 1:
        raise AssertionError(f"To fuse, linear.out_features == bn.num_features or bn.num_features == 1, got "
                             f"linear.out_features={linear.out_features} and bn.num_features={bn.num_features}")
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused.weight, fused.bias = fuse_linear_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                      bn.eps, bn.weight, bn.bias)
    return fused


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    """``(linear_w * scale[:, None], (linear_b - bn_rm) * scale + bn_b)``, ``scale = bn_w / sqrt(bn_rv + eps)``."""
    from ..parameter import Parameter
    from ...tensor import creation as _cr
    w_dt = linear_w.dtype
    b_dt = linear_b.dtype if linear_b is not None else w_dt
    if linear_b is None:
        linear_b = _cr.zeros_like(bn_rm)
    scale = bn_w * _ew("rsqrt")(bn_rv + bn_eps)
    fw = linear_w * scale.unsqueeze(-1).to(w_dt)
    fb = ((linear_b - bn_rm) * scale + bn_b).to(b_dt)
    return Parameter(fw, linear_w.requires_grad), Parameter(fb, linear_b.requires_grad)
