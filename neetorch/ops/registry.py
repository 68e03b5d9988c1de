"""One definition per op, and the eager dispatcher every op goes through.

An :class:`OpDef` carries what is true of an op on every device:

* ``infer(metas, attrs) -> [Meta]``: the shape and dtype rule;
* ``reference(np_inputs, attrs) -> [np.ndarray]``: reference semantics in numpy
  (used by tests, and by the CPU backend for ops it has no faster kernel for);
* ``expr``: for elementwise ops, a scalar expression per renderer (``"py"`` for the
  Numba renderer), so one kernel generator serves every elementwise op.
* ``decompose(*tensors, **attrs)``: optional; an op with a decomposition runs as
  its parts on a device that has no kernel for it instead of falling back.

:func:`run` is the one eager entry point: it picks the device, checks what the
device claims, falls back to the CPU visibly when it must, allocates the outputs
and calls the device's kernel.  The tracer (``trace/``) hooks in here too.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from .. import _env
from .. import profiler as _profiler
from ..tensor import _storage
from ..tensor.dtypes import DType

_TIMED = _env.DEBUG >= 2

__all__ = ["Meta", "OpDef", "OPS", "register", "run", "get", "export", "EXPORTS"]

#: name -> (function, is_method, is_function): what ``nee.<name>`` / ``Tensor.<name>`` become
EXPORTS: dict = {}


def export(fn=None, *, name=None, method=True, function=True, inplace=False):
    """Publish ``fn`` as ``nee.<name>`` and (if ``method``) ``Tensor.<name>``.

    ``inplace=True`` also creates ``Tensor.<name>_`` writing the result into self.
    """
    def deco(f):
        n = name or f.__name__
        EXPORTS[n] = (f, method, function, inplace)
        return f
    return deco(fn) if fn is not None else deco


class Meta(NamedTuple):
    shape: tuple
    dtype: DType


@dataclass(eq=False)
class OpDef:
    name: str
    infer: Callable
    kind: str = "other"            # "elementwise" | "reduce" | "view" | "other"
    reference: Callable | None = None
    expr: dict = field(default_factory=dict)
    decompose: Callable | None = None
    # value checks (index ranges, zero divisors...): ``check(inputs, attrs)`` raises a
    # clear error; run() calls it before any kernel, so eager calls and compiled graphs
    # are checked alike and no kernel ever sees an invalid index
    check: Callable | None = None
    nout: int = 1
    doc: str = ""

    def __repr__(self):
        return f"OpDef({self.name})"


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} defined twice")
    OPS[op.name] = op
    return op


def get(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"no op named {name!r}") from None


# The tracer installs a hook here: called as hook(op, inputs, attrs, metas, outputs, out)
# after each top-level op has run (ops that run inside another op's frontend,
# decomposition or fallback are part of that op and are not reported).
_trace_hook: list = [None]
# A metadata-only trace also installs ``meta_run(op, inputs, attrs, metas, out)``: it returns
# placeholder outputs for an op that reads traced values (no kernel runs), or None to run it.
_meta_run: list = [None]


class _ThreadDepth(threading.local):
    """``_depth[0]``: how deep in op frontends this thread is (per thread, so one thread's
    ops never hide another thread's top-level ops from a trace)."""

    def __init__(self):
        self.value = 0

    def __getitem__(self, i):
        return self.value

    def __setitem__(self, i, v):
        self.value = v


_depth = _ThreadDepth()


def run(op: OpDef, inputs: list, attrs: dict, metas: list[Meta] | None = None, out: list | None = None) -> list:
    """Run ``op`` eagerly on ``inputs`` (Tensors) and return a list of output Tensors.

    ``metas`` may be passed when the caller already computed the output shapes and
    dtypes; ``out`` may hold preallocated output tensors (in-place ops).
    """
    if metas is None:
        metas = op.infer([Meta(t._data.shape, t._dtype) for t in inputs], attrs)
    hook = _trace_hook[0]
    if hook is None:
        if out is None:
            return _run(op, inputs, attrs, metas, out)
        try:
            return _run(op, inputs, attrs, metas, out)
        finally:
            # an in-place op / out= wrote into caller's tensors: count the write (after it) in their
            # storages' counters (tensor/_storage.py; a no-op when no cache watches any storage)
            if _storage.WATCH:
                _storage.bump_all([o._data for o in out])
    _depth[0] += 1
    try:
        mr = _meta_run[0]
        res = mr(op, inputs, attrs, metas, out) if mr is not None else None
        if res is None:
            res = _run(op, inputs, attrs, metas, out)
    finally:
        _depth[0] -= 1
        if out is not None and _storage.WATCH:
            _storage.bump_all([o._data for o in out])
    if _depth[0] == 0:
        hook(op, inputs, attrs, metas, res, out)
    return res


_claims: dict = {}   # (backend, op name, dtypes) -> None, the reason the backend gives, or _PER_CALL
_PER_CALL = object()  # claimed for these dtypes, but backend.supports_call decides per call (shapes, attrs)


def _claim(backend, name: str, dtypes):
    r = backend.supports(name, dtypes)
    if r is None and getattr(backend, "has_call_claims", None) is not None and backend.has_call_claims():
        return _PER_CALL
    return r


def _run(op: OpDef, inputs: list, attrs: dict, metas: list, out: list | None) -> list:
    if op.check is not None:
        _depth[0] += 1  # the check reads values: that is part of the op, not of a traced program
        try:
            op.check(inputs, attrs)
        finally:
            _depth[0] -= 1

    dev = inputs[0]._device if inputs else (out[0]._device if out else _default_device())
    for t in inputs:
        if t._device is not dev and t._device != dev:
            raise RuntimeError(f"{op.name}: expected all tensors on the same device, got {dev} and {t._device}")
    backend = _backends.get(dev)
    if backend is None:
        backend = _backends[dev] = _get_backend(dev)
    dtypes = tuple([t._dtype for t in inputs] + [m.dtype for m in metas])
    key = (backend, op.name, dtypes)
    reason = _claims.get(key, _claims)
    if reason is _claims:
        reason = _claims[key] = _claim(backend, op.name, dtypes)
    if reason is _PER_CALL:  # the backend's claim depends on shapes/attributes: asked every call
        reason = backend.supports_call(op.name, [Meta(t._data.shape, t._dtype) for t in inputs], metas, attrs)
    if reason is None:
        if out is None:
            make = _Tensor._make
            try:
                out = [make(backend.empty(m.shape, m.dtype), dev, m.dtype) for m in metas]
            except Exception as e:  # noqa: BLE001 - numpy: MemoryError or ValueError (too big); pyopencl: LogicError
                from ..tensor.creation import OutOfMemoryError
                raise OutOfMemoryError(f"{op.name}: {dev} cannot allocate outputs of shapes "
                                       f"{[list(m.shape) for m in metas]} ({', '.join(m.dtype.name for m in metas)}): "
                                       f"{type(e).__name__}: {e}") from None
        kern = backend.kernels[op.name]
        if _profiler._active[0] is None and not _TIMED:
            kern(backend, [o._data for o in out], [t._data for t in inputs], attrs)
        else:
            t0 = time.perf_counter()
            kern(backend, [o._data for o in out], [t._data for t in inputs], attrs)
            backend.synchronize()
            nbytes = sum(t.nbytes for t in inputs) + sum(o.nbytes for o in out)
            _profiler.record(op.name, "kernel", dev, t0, time.perf_counter() - t0, nbytes,
                             _profiler.op_flops(op.name, [t.shape for t in inputs], out[0].shape) if out else 0,
                             detail=str(tuple(out[0].shape)) if out else "")
        return out
    if op.decompose is not None:
        res = op.decompose(*inputs, **attrs)
        res = list(res) if isinstance(res, (tuple, list)) else [res]
        if out is not None:
            for o, r in zip(out, res):
                o.copy_(r)
            return out
        return res
    # visible fallback to the CPU
    from ..devices import device, record_fallback
    cpu = device("cpu")
    nbytes = sum(t.nbytes for t in inputs) + sum(_nbytes(m) for m in metas)
    record_fallback(op.name, dev, dtypes, reason, nbytes)
    cpu_in = [t.to(cpu) for t in inputs]
    cpu_out = _run(op, cpu_in, attrs, metas, None)
    if out is not None:
        for o, r in zip(out, cpu_out):
            o.copy_(r.to(dev))
        return out
    return [r.to(dev) for r in cpu_out]


_backends: dict = {}   # device -> backend instance (devices are interned)


def _get_backend(dev):
    from ..devices import get_backend
    return get_backend(dev)


def _bind_late() -> None:
    """Names from modules that import this one (bound once the package is loaded)."""
    global _Tensor
    from ..tensor.tensor import Tensor as _T
    _Tensor = _T


_Tensor = None


def _nbytes(m: Meta) -> int:
    n = m.dtype.itemsize
    for s in m.shape:
        n *= s
    return n


def _default_device():
    from ..tensor.creation import _default_device as d
    return d()


def with_out(fn):
    """``fn`` as a ``nee.<name>`` function taking torch's ``out=`` keyword where it does not itself: the result
    is written into ``out`` (a tuple result into a tuple ``out``) if its dtype can be cast there (torch's
    ``result type X can't be cast to the desired output type Y`` otherwise), ``out`` resized to the result's
    shape.  Functions with their own ``out`` (or ``**kwargs``) are returned unchanged."""
    import functools
    import inspect
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn
    if "out" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return torch_aliases(fn)
    aliases = _aliases_of(params)

    @functools.wraps(fn)
    def f(*args, out=None, **kw):
        if kw and aliases:
            kw = _renamed(kw, aliases, fn.__name__)
        r = fn(*args, **kw)
        if out is None:
            return r
        return _write_result(r, out, fn.__name__)
    return f


#: torch's numpy-compatible keyword aliases, accepted by every function and method its argument parser
#: binds (python_arg_parser.cpp ``numpy_compatibility_arg_names``): ``x.sum(axis=0, keepdims=True)``
_KW_ALIASES = {"axis": "dim", "keepdims": "keepdim"}


def _aliases_of(params) -> dict:
    return {a: c for a, c in _KW_ALIASES.items() if c in params and a not in params}


def _renamed(kw: dict, aliases: dict, name: str) -> dict:
    for a, c in aliases.items():
        if a in kw:
            if c in kw:
                raise TypeError(f"{name}() got multiple values for argument '{c}'")
            kw = dict(kw)
            kw[c] = kw.pop(a)
    return kw


def torch_aliases(fn):
    """``fn`` accepting torch's numpy-style keyword aliases (``axis`` for ``dim``, ``keepdims`` for ``keepdim``)
    where it has the torch name and not the alias; ``fn`` itself otherwise."""
    import functools
    import inspect
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn
    aliases = _aliases_of(params)
    if not aliases or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return fn

    @functools.wraps(fn)
    def f(*args, **kw):
        if kw:
            kw = _renamed(kw, aliases, fn.__name__)
        return fn(*args, **kw)
    return f


#: the pointwise ops whose out= may have another dtype the result casts to (torch's structured kernels); every
#: other op's out= must have the result's dtype exactly (measured on torch 2.13)
_CASTING_OUT = frozenset({"digamma", "i0", "nansum", "nanmean", "erfinv", "logit", "sinc", "deg2rad", "rad2deg",
                          "diff", "polygamma", "mvlgamma", "xlogy", "ldexp", "hypot", "nextafter",
                          "logaddexp", "logaddexp2", "igamma", "igammac", "angle"})


def _write_result(r, out, name):
    from .elementwise import _can_cast, resize_out
    if isinstance(r, tuple):
        if not isinstance(out, (tuple, list)) or len(out) != len(r):
            raise TypeError(f"{name}(): argument 'out' must be a tuple of {len(r)} Tensors")
        for v, o in zip(r, out):
            _write_result(v, o, name)
        return type(r)(*out) if hasattr(r, "_fields") else tuple(out)
    if not isinstance(out, _Tensor) or not isinstance(r, _Tensor):
        raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
    if out._dtype is not r._dtype and name == "heaviside":     # (torch's own messages)
        raise RuntimeError("heaviside is not yet implemented for complex tensors." if out._dtype.category == 3 else
                           "heaviside is not yet implemented for tensors with different dtypes.")
    if out._dtype is not r._dtype and name not in _CASTING_OUT:
        raise RuntimeError(f"{name}(): Expected out tensor to have dtype {r._dtype.name}, but got "
                           f"{out._dtype.name} instead")
    if out._dtype is not r._dtype and not _can_cast(r._dtype, out._dtype):
        raise RuntimeError(f"{name}: result type {r._dtype.name} can't be cast to the desired output type "
                           f"{out._dtype.name}")
    resize_out(out, r.shape, name)
    out.copy_(r)
    return out
