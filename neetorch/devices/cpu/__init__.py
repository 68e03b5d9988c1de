"""The CPU backend: numpy arrays as storage, generated Numba kernels, BLAS for products.

Registered through the ``neetorch.devices`` entry point like any third-party plugin.
Kernels for non-elementwise ops live in the modules of ``kernels/`` and register
themselves with :func:`kernel`; every elementwise op in the op table gets the
generated elementwise kernel.
"""
from __future__ import annotations

import functools
import importlib
import os
import pkgutil
import sys
import threading

import numpy as np

from ..base import Backend
from ...tensor import _storage
from ...tensor.dtypes import ALL_DTYPES, LOW_NP, is_low_np

__all__ = ["CPUBackend", "kernel"]

_KERNELS: dict = {}


def kernel(*names):
    """Register ``fn(backend, outs, ins, attrs)`` as the CPU kernel of each op in ``names``."""
    def deco(fn):
        for n in names:
            _KERNELS[n] = fn
        return fn
    return deco


# kernels of these modules compute float16 in float32 themselves but do not know bfloat16: their bfloat16
# operands are widened to float32 here and their bfloat16 outputs rounded once at the end (the same
# "storage dtype computed in float32" contract; devices/cpu/elementwise.py, kernels/reduction.py and
# kernels/nn.py handle both dtypes through tensor.dtypes.is_low_np)
_WIDEN_MODULES = frozenset({"conv", "linalg", "lapack"})
# torch's index_add / scatter_add / scatter_reduce accumulate float16/bfloat16 in float32 and round once (numpy's
# ufunc.at would round after every add): these kernels get float32 copies of both dtypes
_WIDEN_KERNELS = frozenset({"scatter", "index_reduce_dim"})
# numpy's sorts and searches on ml_dtypes' bfloat16 compare NaN without a total order (a NaN scrambles the whole
# result): these run on exact float32 copies
_ORDER_KERNELS = frozenset({"sort", "topk", "unique_sorted", "unique_dim", "searchsorted", "median", "cummax",
                            "cummin"})
_BF16 = next((d.np for d in ALL_DTYPES if d.name == "bfloat16"), None)
# kernels whose float16/bfloat16 path is exactly "operands copied to float32, the float32 kernel, each result
# rounded once" (kernels/reduction.py reduce_into, kernels/nn.py softmax_launch / norm_launch): the copies are
# made here by the generated cast kernel (numpy's float16 conversions are element by element, ~10x slower);
# log_softmax is not among them (its last-dim path rounds the row's log-sum-exp, like torch)
_FAST_LOW_KERNELS = frozenset({"sum", "mean", "nansum", "prod", "amax", "amin", "softmax", "layer_norm",
                               "rms_norm"})


def _widened(fn, dtypes):
    dtypes = tuple(d for d in dtypes if d is not None)
    if not dtypes:
        return fn
    ids = frozenset(id(d) for d in dtypes)

    @functools.wraps(fn)   # (keeps the kernel's attributes: claims, bind, ...)
    def widened(backend, outs, ins, attrs):
        # (identity tests: numpy's native float16/bfloat16 dtypes are single instances; this runs on every product)
        for a in ins:
            if id(a.dtype) in ids:
                return _run_widened(fn, dtypes, backend, outs, ins, attrs)
        for o in outs:
            if id(o.dtype) in ids:
                return _run_widened(fn, dtypes, backend, outs, ins, attrs)
        return fn(backend, outs, ins, attrs)
    return widened


def _run_widened(fn, dtypes, backend, outs, ins, attrs):
    tmp = [o.astype(np.float32) if o.dtype in dtypes else o for o in outs]
    r = fn(backend, tmp, [a.astype(np.float32) if a.dtype in dtypes else a for a in ins], attrs)
    for o, t in zip(outs, tmp):
        if t is not o:
            with np.errstate(over="ignore"):
                np.copyto(o, t, casting="unsafe")
    return r


def _fast_low(fn):
    """``fn`` with float16/bfloat16 operands widened and results rounded by the cast kernel (see
    _FAST_LOW_KERNELS); other dtypes go straight through."""
    from ...tensor import dtypes as _dtypes
    from .elementwise import _f32_scratch
    low = frozenset(id(d) for d in LOW_NP)

    def wide(a):
        if not isinstance(a, np.ndarray) or id(a.dtype) not in low:
            return a
        if not a.flags.c_contiguous:
            return _dtypes.widen(a)    # (astype's layout, order "K": a reduction's order stays the same)
        w = _f32_scratch(a.shape)      # (large ones from the pool: no page faults on first touch)
        _dtypes.copy_into(w, a)
        return w

    @functools.wraps(fn)
    def fast(backend, outs, ins, attrs):
        if not any(id(a.dtype) in low for a in ins) and not any(id(o.dtype) in low for o in outs):
            return fn(backend, outs, ins, attrs)
        tmp = [_f32_scratch(o.shape) if id(o.dtype) in low else o for o in outs]
        r = fn(backend, tmp, [wide(a) for a in ins], attrs)
        for o, t in zip(outs, tmp):
            if t is not o:
                _dtypes.copy_into(o, t)
        return r
    return fast


class _Span:
    __slots__ = ("__array_interface__", "_keep")


class CPUBackend(Backend):
    type = "cpu"
    dtypes = frozenset(d.name for d in ALL_DTYPES)
    # fused groups round every float16/bfloat16 member's result as the eager op does (elementwise._ROUND):
    # jit/fusion.py lets low-float members join groups on this backend
    rounds_low_float_members = True

    @classmethod
    def probe(cls):
        return 1, None

    def __init__(self, index: int = 0):
        super().__init__(index)
        _load_kernel_modules()
        from ...ops.registry import OPS
        from .elementwise import launch
        k = dict(_KERNELS)
        for name, op in OPS.items():
            if op.kind == "elementwise" and "py" in op.expr and name not in k:
                k[name] = _ew_kernel(op, launch)
        for name, fn in list(k.items()):
            if getattr(fn, "__module__", "").rsplit(".", 1)[-1] in _WIDEN_MODULES:
                k[name] = _widened(fn, (_BF16,))
            elif name in _WIDEN_KERNELS:
                k[name] = _widened(fn, LOW_NP)
            elif name in _ORDER_KERNELS:
                k[name] = _widened(fn, (_BF16,))
            elif name in _FAST_LOW_KERNELS:
                k[name] = _fast_low(fn)
        self.kernels = k
        self.allocated = 0
        # float16/bfloat16 <-> float32 conversions of the kernels that compute low floats through float32
        # copies (dtypes.widen / copy_into) run as the generated cast kernel
        from ...tensor import dtypes as _dtypes
        if _dtypes._CONVERT[0] is None:
            cast = OPS["cast"]
            _dtypes._CONVERT[0] = lambda dst, src: launch(cast, dst, [src])

    # ---------------------------------------------------------------- allocator
    def empty(self, shape, dtype):
        n = dtype.itemsize
        for d in shape:
            n *= d
        if n < _POOL_MIN:
            return np.empty(shape, dtype.np)
        return _pool_take(n).view(dtype.np).reshape(shape)

    def from_host(self, array):
        return np.array(array, copy=True)

    def to_host(self, array):
        return array

    def copy_(self, dst, src):
        low = is_low_np(dst.dtype) or is_low_np(src.dtype)
        if (dst.size >= (1 << 16) and not (low and dst.dtype == src.dtype)) or \
                (low and dst.size >= 64 and dst.dtype != src.dtype):
            # large copies/casts run on every core through the generated "cast" kernel, and so do
            # float16/bfloat16 conversions (numpy's are element by element) from small sizes: the kernel
            # converts in vector registers, rounding to nearest even.  A float16/bfloat16 copy to its own
            # dtype stays a plain copy (through float32 a NaN's payload would not survive)
            from .elementwise import launch
            from ...ops.registry import OPS
            launch(OPS["cast"], dst, [src])
        else:
            from ...tensor.dtypes import copy_into
            copy_into(dst, src)   # (wider values narrow to float16/bfloat16 through float32, as torch's)

    def fill_(self, dst, value):
        dst.fill(value)

    def mark_immutable(self, array):
        # conv weights' cached Winograd / packed forms are then used without the bitwise check against a kept
        # copy (kernels/winograd.py: a pass over 2x the weights per call)
        if array.dtype.kind == "f":
            from .kernels import winograd
            winograd.freeze(array)

    def memory_stats(self):
        with _pool_lock:
            free = sum(b.nbytes for bs in _pool.values() for b in bs if sys.getrefcount(b) == 3)
        return {"pool_bytes": _pool_bytes[0], "pool_free_bytes": free, "pool_hits": _pool_stats["hits"],
                "pool_misses": _pool_stats["misses"], "pool_limit_bytes": _POOL_LIMIT}

    def data_ptr(self, a):
        return a.__array_interface__["data"][0]

    def storage_offset(self, a):
        from .layout import root_array
        return (self.data_ptr(a) - self.data_ptr(root_array(a))) // a.itemsize

    # ---------------------------------------------------------------- layout
    def as_strided(self, a, shape, strides, offset=0):
        isz = a.itemsize
        h = _Span()
        h.__array_interface__ = {"data": (a.__array_interface__["data"][0] + offset * isz, False),
                                 "shape": tuple(shape), "strides": tuple(s * isz for s in strides),
                                 "typestr": a.dtype.str, "version": 3}
        h._keep = a
        r = np.asarray(h)
        # (the typestr of an ml_dtypes type such as bfloat16 reads back as raw bytes, "<V2": view it)
        return r if r.dtype == a.dtype else r.view(a.dtype)

    # fused groups from the JIT (jit/fusion.py decides, this backend renders)
    def compile_group(self, group):
        from .elementwise import compile_group
        return compile_group(group)

    def launch_group(self, kernel, outs, ins):
        from .elementwise import launch_group
        launch_group(kernel, outs, ins)

    def prepare_elementwise(self, op, args, ins, meta):
        from .elementwise import prepare
        return prepare(op, args, ins, meta, self.device)

    def supports(self, op, dtypes):
        return None if op in self.kernels else f"no cpu kernel for {op}"


# ------------------------------------------------------------------ large-buffer pool
# A fresh large numpy array costs a page fault per 4 KiB on first touch (a 64 MiB output:
# ~16k faults, about as long as the op itself).  Large outputs are carved from pooled
# buffers instead; a buffer is free again when nothing refers to it any more (every
# tensor and numpy view over it holds a reference), which its reference count tells.
# From 256 KiB: a decoder step's 788 KB KV outputs, malloc'd and freed each step, were handed back to
# the OS by glibc and faulted in again (4.5k faults a step, 8.3 vs 3.1 ms with two sessions in a process).
_POOL_MIN = 1 << 18
_POOL_LIMIT = int(os.environ.get("NEE_CPU_POOL_BYTES", str(1 << 30)))
_pool: dict = {}
_pool_bytes = [0]
_pool_stats = {"hits": 0, "misses": 0}
_pool_next: dict = {}       # size class -> where its next search starts
_pool_lock = threading.Lock()
_WINOGRAD = __name__ + ".kernels.winograd"


def _size_class(n: int) -> int:
    # 8 classes per power of two: at most 12.5% slack
    step = 1 << max(n.bit_length() - 4, 12)
    return (n + step - 1) // step * step


def _pool_take(n: int) -> np.ndarray:
    cap = _size_class(n)
    with _pool_lock:
        bufs = _pool.setdefault(cap, [])
        # the search starts after the class's last hit: a decoder step takes its 12 KV outputs while the caller
        # holds the last step's 12 (its past inputs), which a search from the front checked again for every take
        # (~200 reference counts a step)
        L = len(bufs)
        i = _pool_next.get(cap, 0)
        for _ in range(L):
            if i >= L:
                i = 0
            b = bufs[i]
            i += 1
            # references: the list, this variable, getrefcount's argument
            if sys.getrefcount(b) == 3:
                _pool_stats["hits"] += 1
                _pool_next[cap] = i
                _storage.unexport(b)   # (no array of the block's previous tensor is alive: tensor/_storage.py)
                wg = sys.modules.get(_WINOGRAD)
                if wg is not None and id(b) in wg.marked_owners:
                    wg.release(b)      # (its frozen marks and cached weight transforms were the old arrays')
                return b[:n]
        _pool_stats["misses"] += 1
        b = np.empty(cap, np.uint8)
        if _pool_bytes[0] + cap <= _POOL_LIMIT:
            bufs.append(b)
            _pool_bytes[0] += cap
        return b[:n]


def _ew_kernel(op, launch):
    def run(backend, outs, ins, attrs):
        launch(op, outs[0], ins)
    run.__name__ = f"ew_{op.name}"
    return run


_loaded = [False]


def _load_kernel_modules():
    if _loaded[0]:
        return
    from . import kernels as pkg
    for m in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{pkg.__name__}.{m.name}")
    _loaded[0] = True
