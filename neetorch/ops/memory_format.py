"""Result layouts of the copying ops: torch's memory-format rules for channels-last inputs, in one place.

torch's CPU kernels for pooling, resampling, padding, pixel / channel shuffle, group norm and convolution allocate
their result in the input's *suggested* memory format (``Tensor.suggest_memory_format``): channels_last (4-D) or
channels_last_3d (5-D) when the input's strides are ordered like it (c10's ``is_channels_last_strides_2d_s4`` /
``_3d_s5``: the order, not exact contiguity, so a sliced NHWC tensor counts), row-major otherwise.  The helpers:

* :func:`suggest` - that format of a tensor as the dim order of its strides (outermost first: ``(0, 2, 3, 1)`` /
  ``(0, 2, 3, 4, 1)``), or None (row-major).  None on other devices and while a trace runs: traced programs and
  other devices keep row-major results (jit values are the same).
* :func:`run_in` - ``run(op, ...)`` with the outputs allocated dense in that order (the kernel writes them there;
  CPU kernels that compute planes write a row-major work buffer and copy it in, as they do for any strided ``out``).
* :func:`lay_out` - a result laid out in that order (a copy only where it is not already): for compositions that
  cannot run in the order cheaply.
* :func:`permuted` / :func:`unpermute` - compositions run on the input viewed in that order (NHWC), whose
  row-major intermediate results are then viewed back: channels-last results without a copy.

``shape.py`` (cat / stack / flip / roll) uses the same strides (``_phys_strides``, ``_laid``).
"""
from __future__ import annotations

from ..tensor._layout import _dense_in_order, alloc
from ..tensor.tensor import Tensor, _channels_last_perm, channels_last, channels_last_3d
from .registry import Meta, _trace_hook, run

__all__ = ["suggest", "run_in", "lay_out", "permuted", "unpermute", "strides_like_cl"]

_ORDER = {4: (1, 3, 2, 0), 5: (1, 4, 3, 2, 0)}     # c10's check order (innermost first)


def strides_like_cl(shape, st) -> bool:
    """c10's ``is_channels_last_strides_2d_s4`` / ``_3d_s5`` for a 4-D / 5-D ``shape`` (element or byte strides: the
    test only compares them); an empty tensor is never channels-last."""
    if st[1] == 0:
        return False
    mn = 0
    for d in _ORDER[len(shape)]:
        n = shape[d]
        if n == 0 or st[d] < mn or (d == 0 and mn == st[1]):
            return False
        mn = st[d] * n if n > 1 else st[d]
    return True


def _cl_order(nd):
    return _channels_last_perm(channels_last if nd == 4 else channels_last_3d, nd, "channels-last layout")


_PERM = {4: _cl_order(4), 5: _cl_order(5)}


def _cl_like(t: Tensor) -> bool:
    """c10's ``suggest_memory_format`` is channels_last(_3d) for ``t`` (any device, traced or not)."""
    return t.ndim in (4, 5) and strides_like_cl(t.shape, t.stride())


def suggest(t: Tensor):
    """The channels-last dim order that ``t`` suggests for a CPU eager result, or None (row-major)."""
    if _trace_hook[0] is not None or t._device.type != "cpu":
        return None
    a = t._data
    nd = a.ndim
    if nd != 4 and nd != 5:
        return None
    st = a.strides      # (bytes: the test only compares them)
    if st[1] > st[-1]:
        return None     # (row-major strides fail here: C's stride above W's)
    return _PERM[nd] if strides_like_cl(a.shape, st) else None


def _phys_strides(shape, phys):
    """Dense strides of ``shape`` laid out in ``phys`` order (outermost first); None: row-major."""
    if phys is None or list(phys) == list(range(len(shape))):
        return None
    return _dense_in_order(shape, list(reversed(phys)), False)


def _run_strided(op, ins, attrs, strides):
    """``run(op, ins, attrs)`` with output ``i`` allocated at element ``strides[i]`` (None: the backend's row-major
    one) on the CPU outside a trace."""
    if ins[0]._device.type != "cpu" or _trace_hook[0] is not None or all(s is None for s in strides):
        return run(op, ins, attrs)
    metas = op.infer([Meta(tuple(t.shape), t._dtype) for t in ins], attrs)
    if any(0 in m.shape for m, s in zip(metas, strides) if s is not None):
        return run(op, ins, attrs, metas)
    from ..devices import get_backend
    b = get_backend(ins[0]._device)
    outs = [Tensor._make(alloc(m.shape, s, m.dtype.np) if s is not None else b.empty(m.shape, m.dtype),
                         ins[0]._device, m.dtype) for m, s in zip(metas, strides)]
    return run(op, ins, attrs, metas, out=outs)


def _laid(op, ins, attrs, strides):
    """``run(op, ins, attrs)`` with the (single) result allocated at element ``strides`` (None: row-major) on the CPU
    (other devices and traced programs keep their row-major results)."""
    if strides is None:
        return run(op, ins, attrs)[0]
    return _run_strided(op, ins, attrs, [strides])[0]


def run_in(op, ins, attrs, order):
    """``run(op, ins, attrs)`` with every output of ``len(order)`` dims dense in ``order`` (from :func:`suggest`;
    None: a plain run)."""
    if order is None:
        return run(op, ins, attrs)
    metas = op.infer([Meta(tuple(t.shape), t._dtype) for t in ins], attrs)
    return _run_strided(op, ins, attrs, [_phys_strides(m.shape, order) if len(m.shape) == len(order) else None
                                         for m in metas])


def lay_out(r: Tensor, order) -> Tensor:
    """``r`` dense in ``order`` (torch's ``resize_(size, memory_format)`` strides): itself when it already is, else a
    copy; None: ``r``."""
    if order is None or r.ndim != len(order):
        return r
    st = _phys_strides(tuple(r.shape), order)
    if tuple(r.stride()) == st or 0 in r.shape:
        return r
    return Tensor._make(alloc(tuple(r.shape), st, r._data.dtype), r._device, r._dtype).copy_(r)


def permuted(x: Tensor, order):
    """``x`` viewed in ``order`` (channels last: (N, H, W, C)); None: ``x``."""
    return x if order is None else x.permute(*order)


def unpermute(r: Tensor, order):
    """The inverse of :func:`permuted` on a result computed in the permuted view."""
    if order is None:
        return r
    inv = [0] * len(order)
    for j, d in enumerate(order):
        inv[d] = j
    return r.permute(*inv)
