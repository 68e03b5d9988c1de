"""Numba kernels from generated source, cached in memory and on disk.

Numba cannot cache functions compiled from ``exec``'d source, so generated source is
written to a real ``.py`` file under ``$NEE_CACHE_DIR/numba/`` (named by a hash of the
source) and imported; ``@njit(cache=True)`` then stores the machine code beside it and
a second process loads it instead of compiling.  ``stats`` counts what happened.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
import time

from ... import _env

__all__ = ["load_kernel", "stats", "cache_dir"]

_lock = threading.RLock()
_modules: dict[str, object] = {}
stats = {"kernels_loaded": 0, "compiled": 0, "disk_hits": 0, "compile_seconds": 0.0}

# bump when the generated code's conventions change: old files are then never read
CODEGEN_VERSION = "1"


def cache_dir() -> str:
    import numba
    d = os.path.join(_env.CACHE_DIR, f"numba-{numba.__version__}-py{sys.version_info[0]}{sys.version_info[1]}-v{CODEGEN_VERSION}")
    os.makedirs(d, exist_ok=True)
    return d


def load_kernel(name: str, source: str, attr: str = "kernel"):
    """Import ``attr`` from the module made of ``source`` (written once, by hash)."""
    h = hashlib.sha1(source.encode()).hexdigest()[:16]
    key = f"{name}_{h}"
    mod = _modules.get(key)
    if mod is None:
        with _lock:
            mod = _modules.get(key)
            if mod is None:
                t0 = time.perf_counter()
                mod = _import_source(key, source)
                _modules[key] = mod
                stats["kernels_loaded"] += 1
                note_compile(getattr(mod, attr), key, t0)
                if _env.DEBUG >= 4:
                    print(f"[neetorch] generated kernel {key}:\n{source}", file=sys.stderr)
    return getattr(mod, attr)


def _import_source(key: str, source: str):
    d = cache_dir()
    path = os.path.join(d, f"{key}.py")
    try:
        with open(path, encoding="utf-8") as f:
            ok = f.read() == source
    except OSError:
        ok = False
    if not ok:  # absent, or corrupt/stale: rewrite atomically
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(source)
        os.replace(tmp, path)
    modname = f"neetorch._kernels.{key}"
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    # Numba's disk cache re-imports the module by name when it loads a kernel
    sys.modules[modname] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return mod


def note_compile(dispatcher, name: str, t0: float) -> None:
    """Record whether the first call of ``dispatcher`` compiled or hit the disk cache."""
    dt = time.perf_counter() - t0
    st = getattr(dispatcher, "stats", None)
    if st is None:
        return
    hits = sum(st.cache_hits.values())
    from ... import profiler
    if hits:
        stats["disk_hits"] += 1
        what = "loaded from disk cache"
        profiler.record(name, "cache_hit", "cpu", t0, dt, detail="disk")
    else:
        stats["compiled"] += 1
        stats["compile_seconds"] += dt
        what = "compiled"
        profiler.record(name, "compile", "cpu", t0, dt)
    if _env.DEBUG >= 1:
        print(f"[neetorch] kernel {name} {what} in {dt * 1e3:.1f} ms", file=sys.stderr)
