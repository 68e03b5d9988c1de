"""``@nee.jit``: trace once per input signature, optimize, fuse, run the executable.

A call's *guard key* is the (shape, dtype, device) of every tensor argument plus the
value of every other argument.  A new key traces the function (running it once
eagerly), runs the pass pipeline and fusion, and builds an :class:`Executable`; its
generated kernels are cached in memory and on disk by their source, and are
shape-generic (sizes are runtime arguments), so new shapes of the same program
re-trace cheaply and compile nothing.  ``stats`` counts traces, cache hits and kernels
compiled; ``NEE_DEBUG>=1`` prints each specialization.
"""
from __future__ import annotations

import functools
import sys
import threading
import time

from .. import _env, profiler
from ..devices.cpu import codegen
from ..tensor.tensor import Tensor
from ..trace import tracer
from . import passes
from .executable import Executable
from .fusion import fuse_elementwise

__all__ = ["jit", "JitFunction", "set_enabled"]

_enabled = [True]


def set_enabled(flag: bool) -> None:
    """Globally run every ``@nee.jit`` function eagerly (debugging switch)."""
    _enabled[0] = bool(flag)


def _key_of(x):
    if isinstance(x, Tensor):
        return ("T", tuple(x.shape), x.dtype, x.device)
    if isinstance(x, (list, tuple)):
        return (type(x).__name__,) + tuple(_key_of(v) for v in x)
    if isinstance(x, dict):
        return ("dict",) + tuple((k, _key_of(v)) for k, v in sorted(x.items()))
    try:
        hash(x)
        return ("V", type(x).__name__, x)
    except TypeError:
        return ("id", id(x))


class JitFunction:
    def __init__(self, fn, dynamic=None, name=None):
        self.fn = fn
        self.dynamic = dynamic
        self.name = name or getattr(fn, "__name__", "fn")
        self._cache: dict = {}
        self._lock = threading.Lock()
        self.stats = {"calls": 0, "traces": 0, "cache_hits": 0, "kernels_compiled": 0, "trace_seconds": 0.0}
        functools.update_wrapper(self, fn, updated=())

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)

    def eager(self, *args, **kwargs):
        """Run the original function, uncompiled."""
        return self.fn(*args, **kwargs)

    def _specialize(self, args, kwargs, on_stage=None):
        c0 = codegen.stats["compiled"]
        t0 = time.perf_counter()
        g = tracer.trace(self.fn, *args, name=self.name, **kwargs)
        if on_stage:
            on_stage("traced", g)
        g = passes.run_pipeline(g, on_stage)
        g = fuse_elementwise(g)
        if on_stage:
            on_stage("fused", g)
        devs = {t.device for t in tracer._tensors((args, kwargs))} or {None}
        from ..devices import device
        dev = next(iter(devs)) or device(_env.DEFAULT_DEVICE)
        exe = Executable(g, dev)
        self.stats["traces"] += 1
        self.stats["trace_seconds"] += time.perf_counter() - t0
        self.stats["kernels_compiled"] += codegen.stats["compiled"] - c0
        if _env.DEBUG >= 1:
            print(f"[neetorch] jit {self.name}: specialized for {[tuple(t.shape) for t in tracer._tensors(args)]} "
                  f"-> {exe.num_kernels} kernels ({len(exe.kernels)} fused), {exe.plan}", file=sys.stderr)
        if _env.DEBUG >= 3:
            for name, _ in exe.kernels:
                print(f"[neetorch]   fused group {name}", file=sys.stderr)
        return exe, g

    def _executable(self, args, kwargs):
        key = (_key_of(args), _key_of(kwargs))
        entry = self._cache.get(key)
        if entry is not None:
            self.stats["cache_hits"] += 1
            if profiler._active[0] is not None:
                profiler.record(self.name, "cache_hit", str(entry[0].device), time.perf_counter(), 0.0, detail="jit")
            return entry
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                entry = self._specialize(args, kwargs)
                self._cache[key] = entry
        return entry

    def __call__(self, *args, **kwargs):
        if not _enabled[0] or tracer.is_tracing():
            return self.fn(*args, **kwargs)
        self.stats["calls"] += 1
        exe, g = self._executable(args, kwargs)
        outs = exe(*tracer._tensors((args, kwargs)))
        return outs[0] if getattr(g, "_single", False) and len(outs) == 1 else tuple(outs)

    def graph(self, *args, **kwargs):
        """The optimized, fused graph for these arguments."""
        return self._executable(args, kwargs)[1]

    def explain(self, *args, **kwargs) -> str:
        """The graph after tracing, after each pass and after fusion, the kernels and the memory plan."""
        parts = []
        exe, g = self._specialize(args, kwargs, on_stage=lambda name, g: parts.append(f"== after {name}\n{g}"))
        parts.append(f"== {exe.num_kernels} kernel launches, {len(exe.kernels)} fused kernels")
        for name, src in exe.kernels:
            parts.append(f"-- {name}\n{src}")
        parts.append(f"== {exe.plan}")
        return "\n".join(parts)

    def __repr__(self):
        return f"<neetorch.jit {self.name}: {len(self._cache)} specialization(s)>"


def jit(fn=None, *, dynamic=None, name=None):
    """Compile a tensor function (``@nee.jit`` or ``@nee.jit(dynamic=...)``); see module docs."""
    if fn is None:
        return lambda f: JitFunction(f, dynamic=dynamic, name=name)
    return JitFunction(fn, dynamic=dynamic, name=name)
