"""Fractional max pooling (``torch.nn.functional.fractional_max_pool2d`` / ``fractional_max_pool3d``).

Graham's fractional max pooling: per (batch, channel) plane, one sample ``u`` in [0, 1) per spatial dim places
``out`` windows of ``kernel`` elements pseudo-randomly over ``in`` positions, with PyTorch's interval rule
``start[i] = int((i + u) * a) - int(u * a)`` for ``a = (in - kernel) / (out - 1)`` and ``start[out-1] = in - kernel``,
evaluated in the input's floating dtype like PyTorch's kernel, so a given ``_random_samples`` reproduces PyTorch's
windows exactly.  The window starts are host metadata computed from the samples; the pooling itself is one
``gather`` of every window's elements followed by a ``max`` over the window (first maximum wins), so it runs on
any device that has those ops.  ``indices`` are flat positions within each input plane (``h * W + w``), as in
PyTorch (usable with ``max_unpool2d``).
"""
from __future__ import annotations

import numpy as np

from ..tensor import creation
from ..tensor.tensor import Tensor

__all__ = [
    "fractional_max_pool2d",
    "fractional_max_pool2d_with_indices",
    "fractional_max_pool3d",
    "fractional_max_pool3d_with_indices",
]

_DIMS = {2: ("height", "width"), 3: ("time", "height", "width")}


def _tuple(v, n, what, op):
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            v = tuple(v) * n
        if len(v) != n:
            raise ValueError(f"{op}: {what} must be a single value or a tuple of {n}, got {v!r}")
        return tuple(v)
    return (v,) * n


def _intervals(sample, in_size: int, out_size: int, pool: int, npdt) -> np.ndarray:
    """PyTorch's ``generate_intervals`` for every plane at once (``sample``: (P,) in the input's dtype)."""
    seq = np.zeros((sample.shape[0], out_size), dtype=np.int64)
    if out_size > 1:
        alpha = npdt(in_size - pool) / npdt(out_size - 1)
        i = np.arange(out_size - 1, dtype=npdt)[None, :]
        s = sample.astype(npdt)[:, None]
        with np.errstate(invalid="ignore", over="ignore"):
            seq[:, :-1] = ((i + s) * alpha).astype(np.int64) - (s * alpha).astype(np.int64)
    if out_size > 0:
        seq[:, -1] = in_size - pool
    return seq


def _fractional(nd, input, kernel_size, output_size, output_ratio, return_indices, _random_samples):
    op = f"fractional_max_pool{nd}d"
    if not isinstance(input, Tensor):
        raise TypeError(f"{op}(): argument 'input' must be Tensor, not {type(input).__name__}")
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{op}(): Expected {nd + 1}D or {nd + 2}D tensor, but got: {list(input.shape)}")
    if input.dtype.category != 2:
        raise NotImplementedError(f"{op}(): not implemented for input of dtype {input.dtype} (floating point "
                                  "inputs only)")
    kernel = _tuple(kernel_size, nd, "kernel_size", op)
    spatial = tuple(input.shape[-nd:])
    if output_size is None:
        if output_ratio is None:
            raise ValueError(f"{op} requires specifying either an output_size or an output_ratio")
        if isinstance(output_ratio, (list, tuple)) and len(output_ratio) > nd:
            raise ValueError(f"{op} requires output_ratio to either be a single Int or tuple of Ints.")
        ratio = _tuple(output_ratio, nd, "output_ratio", op)
        out = tuple(int(s * r) for s, r in zip(spatial, ratio))
    else:
        out = tuple(int(o) for o in _tuple(output_size, nd, "output_size", op))
    batched = input.ndim == nd + 2
    x = input if batched else input.unsqueeze(0)
    N, C = x.shape[0], x.shape[1]
    for name, o, k, s in zip(_DIMS[nd], out, kernel, spatial):
        if k <= 0 or o <= 0:
            raise RuntimeError(f"{op}(): kernel_size and output_size must be positive, got kernel_size={kernel}, "
                               f"output_size={out}")
        if o + k - 1 > s:
            raise RuntimeError(f"{op}(): pool {name} {k} too large relative to input {name} {s}")
    if _random_samples is None:
        _random_samples = creation.rand(N, C, nd, dtype=input.dtype, device=input.device)
    if not isinstance(_random_samples, Tensor):
        raise TypeError(f"{op}(): _random_samples must be a Tensor, got {type(_random_samples).__name__}")
    rs = _random_samples
    if rs.dtype != input.dtype:
        raise RuntimeError(f"Expect _random_samples to have the same dtype as input ({op}: {rs.dtype} vs "
                           f"{input.dtype})")
    if rs.ndim != 3:
        raise RuntimeError(f"Expect _random_samples to be 3D (N, C, {nd}); got shape {list(rs.shape)}")
    if rs.shape[2] != nd:
        raise RuntimeError(f"Expect _random_samples.size(2) equals to {nd}; got {rs.shape[2]}.")
    if rs.shape[0] < N:
        raise RuntimeError(f"Expect _random_samples.size(0) no less then input batch size ({rs.shape[0]} < {N}).")
    if rs.shape[1] != C:
        raise RuntimeError(f"Expect _random_samples.size(1) equals to input channel size ({rs.shape[1]} vs {C}).")
    npdt = input.dtype.np.type if input.dtype.name != "float16" else np.float32
    samples = np.asarray(rs.numpy(force=True) if hasattr(rs, "numpy") else rs, dtype=npdt)[:N].reshape(N * C, nd)
    # PyTorch's sample order: 2-D (w, h), 3-D (t, h, w)
    order = (1, 0) if nd == 2 else (0, 1, 2)
    starts = [_intervals(samples[:, order[d]], spatial[d], out[d], kernel[d], npdt) for d in range(nd)]
    strides = [int(np.prod(spatial[d + 1:])) for d in range(nd)]
    P = N * C
    # flat in-plane index of every (plane, output position, window offset)
    idx = np.zeros((P, *out, *kernel), dtype=np.int64)
    for d in range(nd):
        shape = [P] + [1] * (2 * nd)
        shape[1 + d] = out[d]
        pos = starts[d].reshape(shape)
        kshape = [1] * (1 + 2 * nd)
        kshape[1 + nd + d] = kernel[d]
        idx = idx + (pos + np.arange(kernel[d]).reshape(kshape)) * strides[d]
    K = int(np.prod(kernel))
    O = int(np.prod(out))
    idx = idx.reshape(P, O * K)
    plane = x.reshape(P, int(np.prod(spatial)))
    idx_t = creation.tensor(idx, device=input.device)
    win = plane.gather(1, idx_t).reshape(P, O, K)
    values, pos = win.max(-1)
    y = values.reshape(N, C, *out)
    if not batched:
        y = y.squeeze(0)
    if not return_indices:
        return y
    ind = idx_t.reshape(P, O, K).gather(2, pos.unsqueeze(-1)).reshape(N, C, *out)
    return y, (ind if batched else ind.squeeze(0))


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """``torch.nn.functional.fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None,
    return_indices=False, _random_samples=None)``; ``_random_samples``: (N, C, 2) in [0, 1), the input's dtype."""
    return _fractional(2, input, kernel_size, output_size, output_ratio, return_indices, _random_samples)


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """``torch.nn.functional.fractional_max_pool3d`` (``_random_samples``: (N, C, 3))."""
    return _fractional(3, input, kernel_size, output_size, output_ratio, return_indices, _random_samples)


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=True, _random_samples=None):
    return _fractional(2, input, kernel_size, output_size, output_ratio, True, _random_samples)


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=True, _random_samples=None):
    return _fractional(3, input, kernel_size, output_size, output_ratio, True, _random_samples)


