"""``nee.autocast``: torch's automatic mixed precision (``torch.autocast``), with torch's CPU op lists.

Inside ``with nee.autocast("cpu", dtype=nee.bfloat16):`` (bfloat16 is the CPU default; float16 too), the ops torch
runs in lower precision (matmul / mm / bmm / addmm / baddbmm / addbmm / linear, the convolutions and transposed
convolutions, prelu, scaled_dot_product_attention, linalg.vecdot) cast their float32 tensor arguments to that dtype,
and the ops torch keeps in float32 (the losses, prod, quantile, cdist, trace, inverse, pinverse, grid_sample...)
cast bfloat16 / float16 arguments up to float32; other ops run in the dtypes they are given, as torch.  float64
tensors are never cast (torch's rule), nor tensors of another device type than the context's.  ``enabled=False``
(nested) turns it off.  It works as a decorator too, and under ``nee.jit`` / ``nee.compile``: the casts are traced,
and the autocast state is part of a compiled function's key (a function compiled outside autocast and called inside
it specializes anew).  ``nee.amp.autocast`` and ``nee.cpu.amp.autocast``-style aliases are the same class.

One mechanism: at import, :func:`install` wraps each function object bound to those names (in ``neetorch``,
``neetorch.nn.functional``, the op modules, ``neetorch.linalg``, the op registry's exports and ``Tensor``'s methods)
with a cast of its tensor arguments; with no autocast active the wrapper costs one list read.
"""
from __future__ import annotations

import functools
import threading

from .tensor import dtypes as _dt
from .tensor.tensor import Tensor

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "install"]

# torch's CPU autocast lists (aten/src/ATen/autocast_mode.cpp), as far as neetorch has the ops
LOWER_PRECISION = ("matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "linear", "conv1d", "conv2d", "conv3d",
                   "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu", "scaled_dot_product_attention",
                   "vecdot")
FP32 = ("prod", "quantile", "nanquantile", "cdist", "trace", "inverse", "pinverse", "grid_sample", "polar",
        "cholesky", "cholesky_inverse", "cholesky_solve", "stft", "avg_pool3d", "max_pool3d", "adaptive_avg_pool3d",
        "max_unpool2d", "max_unpool3d", "fractional_max_pool2d", "fractional_max_pool3d", "adaptive_max_pool3d",
        "mse_loss", "nll_loss", "cross_entropy", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div",
        "binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_embedding_loss", "hinge_embedding_loss",
        "poisson_nll_loss", "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
        "multilabel_margin_loss", "ctc_loss")

_DEFAULT = {"cpu": "bfloat16", "cuda": "float16"}
_ACTIVE = [0]                 # enabled autocast contexts open in any thread (0: every wrapper returns at once)
_local = threading.local()    # per thread: the stack of (device type, dtype or None when disabled)


def _stack() -> list:
    s = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = []
    return s


def state():
    """The innermost autocast setting of this thread per device type, as a hashable key (None: none active)."""
    if not _ACTIVE[0]:
        return None
    s = getattr(_local, "stack", None)
    if not s or getattr(_local, "off", 0):
        return None
    cur = {}
    for dev, dt in s:
        cur[dev] = dt
    key = tuple(sorted((d, t.name) for d, t in cur.items() if t is not None))
    return key or None


def _run_without(fn, args, kwargs):
    """``fn`` with autocast off in this thread (torch excludes the autocast key inside an autocast op: the ops it
    calls run in the dtypes it gives them)."""
    _local.off = getattr(_local, "off", 0) + 1
    try:
        return fn(*args, **kwargs)
    finally:
        _local.off -= 1


def is_autocast_enabled(device_type: str = "cpu") -> bool:
    st = state()
    return st is not None and any(d == device_type for d, _ in st)


def get_autocast_dtype(device_type: str = "cpu"):
    for dev, dt in reversed(getattr(_local, "stack", None) or []):
        if dev == device_type and dt is not None:
            return dt
    return getattr(_dt, _DEFAULT.get(device_type, "float16"))


class autocast:
    """``torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``: see the module docs."""

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        from .devices import _backend_classes, _discover
        _discover()
        if device_type not in _backend_classes and device_type not in _DEFAULT:
            raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")
        self.device_type = device_type
        self.fast_dtype = dtype if dtype is not None else getattr(_dt, _DEFAULT.get(device_type, "float16"))
        self._enabled = bool(enabled)
        if self._enabled and self.fast_dtype not in (_dt.bfloat16, _dt.float16):
            import warnings
            warnings.warn(f"In {device_type} autocast, but the target dtype {self.fast_dtype} is not supported "
                          f"(bfloat16 or float16). Disabling autocast.", UserWarning, stacklevel=2)
            self._enabled = False

    def __enter__(self):
        _stack().append((self.device_type, self.fast_dtype if self._enabled else None))
        _ACTIVE[0] += 1
        return self

    def __exit__(self, *exc):
        _stack().pop()
        _ACTIVE[0] -= 1
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with autocast(self.device_type, self.fast_dtype, self._enabled):
                return fn(*args, **kwargs)
        return run


def _cast(a, dts: dict, lower: bool):
    """``a`` cast as the autocast setting ``dts`` ({device type: dtype}) asks of a ``lower`` (or float32) op."""
    if isinstance(a, Tensor):
        dt = dts.get(a._device.type) if a._dtype.is_floating_point else None
        if dt is not None:
            if lower and a._dtype is _dt.float32:
                return a.to(dt)
            if not lower and a._dtype in (_dt.bfloat16, _dt.float16):
                return a.to(_dt.float32)
    elif isinstance(a, (list, tuple)) and a and any(isinstance(x, Tensor) for x in a):
        return type(a)(_cast(x, dts, lower) for x in a)
    return a


def _wrap(fn, lower: bool):
    if getattr(fn, "_autocast", False):
        return fn

    @functools.wraps(fn)
    def run(*args, **kwargs):
        st = state() if _ACTIVE[0] else None
        if st is None:
            return fn(*args, **kwargs)
        dts = {d: getattr(_dt, t) for d, t in st}     # (the setting read once per call)
        return _run_without(fn, [_cast(a, dts, lower) for a in args],
                            {k: _cast(v, dts, lower) for k, v in kwargs.items()})
    run._autocast = True
    return run


def install() -> None:
    """Wrap every function object bound to a listed name (see the module docs); idempotent."""
    import sys
    from .ops.registry import EXPORTS
    mods = [m for n, m in list(sys.modules.items()) if m is not None and (n == "neetorch" or n.startswith(
        ("neetorch.ops.", "neetorch.nn.functional", "neetorch.linalg", "neetorch.special")))]
    for names, lower in ((LOWER_PRECISION, True), (FP32, False)):
        for name in names:
            done: dict = {}
            spaces = [(m, name) for m in mods] + [(Tensor, name)]
            if name == "matmul":    # (the operators call the matmul they were bound to)
                spaces += [(Tensor, "__matmul__"), (Tensor, "__rmatmul__")]
            for space, attr in spaces:
                f = space.__dict__.get(attr) if isinstance(space, type) else getattr(space, attr, None)
                if f is None or not callable(f) or isinstance(f, type) or getattr(f, "_autocast", False):
                    continue
                w = done.get(id(f))
                if w is None:
                    w = done[id(f)] = (f, _wrap(f, lower))
                setattr(space, attr, w[1])
            e = EXPORTS.get(name)
            if e is not None and callable(e[0]) and not getattr(e[0], "_autocast", False):
                w = done.get(id(e[0]))
                EXPORTS[name] = (w[1] if w is not None else _wrap(e[0], lower),) + tuple(e[1:])
