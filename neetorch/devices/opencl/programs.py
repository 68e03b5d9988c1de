"""Building OpenCL programs, with an in-memory and an on-disk cache.

Every kernel source is built once per process (memory cache keyed by kernel name,
which embeds a hash of what it computes) and its binary is cached on disk by
pyopencl's own cache (``Program.build(cache_dir=...)``, keyed by source, options
and device), under ``$NEE_CACHE_DIR/opencl``.  PoCL additionally keeps the
work-group functions it generates at first launch in its own kernel cache
(``$POCL_CACHE_DIR``, default ``~/.cache/pocl``).

``precompile`` builds many kernels as ONE program: the cold cost of a build is
mostly per program, so warming a set of kernels together is much cheaper.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import warnings

from ... import _env

__all__ = ["ProgramCache"]


class ProgramCache:
    def __init__(self, ctx, device, preamble: str):
        self.ctx = ctx
        self.device = device
        self.preamble = preamble
        self.kernels: dict = {}      # kernel name -> cl.Kernel
        self.sources: dict = {}      # kernel name -> source (explain / debugging)
        self.stats = {"programs_built": 0, "kernels": 0, "build_seconds": 0.0}
        self._program_of: dict = {}  # cl.Kernel -> its cl.Program
        self._companions: dict = {}
        self._lock = threading.RLock()
        self.cache_dir = os.path.join(_env.CACHE_DIR, "opencl")
        try:
            os.makedirs(self.cache_dir, exist_ok=True)
        except OSError:
            self.cache_dir = None

    def _build(self, sources: list[tuple[str, str]]):
        import pyopencl as cl
        src = self.preamble + "\n" + "\n".join(s for _, s in sources)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # PoCL prints harmless warnings (unused helpers...)
            try:
                prg = cl.Program(self.ctx, src).build(options=["-cl-std=CL1.2"], cache_dir=self.cache_dir)
            except cl.RuntimeError as e:
                raise RuntimeError(f"opencl: program build failed: {e}\n--- source ---\n{src}") from None
        dt = time.perf_counter() - t0
        self.stats["programs_built"] += 1
        self.stats["build_seconds"] += dt
        if _env.DEBUG >= 1:
            print(f"[neetorch] opencl build: {len(sources)} kernel(s) in {dt * 1e3:.0f} ms", file=sys.stderr)
        if _env.DEBUG >= 4:
            print(src, file=sys.stderr)
        for name, s in sources:
            self.kernels[name] = getattr(prg, name)
            self.sources[name] = s
            self.stats["kernels"] += 1
        for name, _ in sources:
            self._program_of[self.kernels[name]] = prg

    def companion(self, kern, suffix: str):
        """Kernel ``<kern's name><suffix>`` of the program ``kern`` came from (a source may define
        variants of one kernel, e.g. the elementwise ``_flat`` one); built once, cached."""
        key = (kern, suffix)
        k = self._companions.get(key)
        if k is None:
            k = getattr(self._program_of[kern], kern.function_name + suffix)
            self._companions[key] = k
        return k

    def kernel(self, name: str, source: str):
        k = self.kernels.get(name)
        if k is None:
            with self._lock:
                if name not in self.kernels:
                    self._build([(name, source)])
                k = self.kernels[name]
        return k

    def precompile(self, sources: list[tuple[str, str]]) -> int:
        """Build every (name, source) not built yet as one program; returns how many."""
        with self._lock:
            seen, todo = set(), []
            for n, s in sources:
                if n not in self.kernels and n not in seen:
                    seen.add(n)
                    todo.append((n, s))
            if todo:
                self._build(todo)
            return len(todo)
