"""A persistent pool that splits kernel work across cores, and the BLAS thread setting.

Kernels are compiled serial and ``nogil``; large launches are cut into chunks here.
One mechanism for every kernel keeps the number of compiled specializations at one per
(op, dtypes) instead of a serial and a parallel copy.

Chunks are *claimed*, not assigned: the calling thread and the pool workers take the
next unclaimed chunk until none is left, and the caller then waits only for chunks a
worker has already started.  On a loaded machine a worker that is not scheduled in
time costs nothing (the caller runs its chunks), and a nested call from inside a
worker cannot deadlock on a busy pool.

BLAS (OpenBLAS, through numpy) runs single-threaded inside neetorch's kernels: its own
worker threads would compete with this pool, and one descheduled BLAS worker stalls
every call (measured: a 2-thread OpenBLAS made ONNX BERT 4.7x slower than 1 thread on
the shared 2-core box).  Large products are split across this pool instead
(``kernels/linalg.py``), or, for float32/float64, across the native workers of
``gemm_driver`` (one GIL-free call per product, ``set_num_threads - 1`` workers), so
``nee.set_num_threads`` governs all CPU parallelism.
"""
from __future__ import annotations

import ctypes
import glob
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from ... import _env

__all__ = ["blas_threads", "get_num_threads", "run_parallel", "serial_blas", "set_num_threads", "split"]

NUM_THREADS = _env.NUM_THREADS
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()

# below this many elements a launch runs on the calling thread: handing work to the pool
# costs ~60 us here (thread wake-up and GIL hand-off), which only pays off for launches
# of ~1M elements and up (measured: 64K-element add 5.6 us serial vs 75 us split)
PARALLEL_THRESHOLD = 1 << 20


def get_num_threads() -> int:
    return NUM_THREADS


def set_num_threads(n: int) -> None:
    """Threads for every CPU kernel (the pool's workers plus the calling thread)."""
    global NUM_THREADS, _pool
    n = int(n)
    if n < 1:
        raise ValueError(f"set_num_threads: expected a thread count >= 1, got {n}")
    with _pool_lock:
        NUM_THREADS = n
        if _pool is not None:
            _pool.shutdown(wait=False)
            _pool = None


# ------------------------------------------------------------------ BLAS threads
def _find_openblas():
    """(set_num_threads_local, get_num_threads) of the OpenBLAS numpy is linked with.
    ``openblas_set_num_threads_local`` (OpenBLAS >= 0.3.27) changes the thread count without
    resizing OpenBLAS's pool and returns the previous count; despite its name it is
    process-wide (measured with 0.3.31: a count set on one thread is seen by all)."""
    try:
        import numpy as np
        here = os.path.dirname(np.__file__)
        for pat in ("libscipy_openblas*.so*", "libopenblas*.so*"):
            for d in (os.path.join(here, "..", "numpy.libs"), os.path.join(here, ".libs")):
                for path in sorted(glob.glob(os.path.join(d, pat))):
                    lib = ctypes.CDLL(path)
                    fn = getattr(lib, "openblas_set_num_threads_local", None)
                    get = None
                    for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads_64_",
                                 "openblas_get_num_threads64_", "openblas_get_num_threads"):
                        get = getattr(lib, name, None)
                        if get is not None:
                            break
                    if fn is not None and get is not None:
                        fn.argtypes = [ctypes.c_int]
                        fn.restype = ctypes.c_int
                        get.restype = ctypes.c_int
                        return fn, get
    except OSError:
        pass
    return None, None


_blas_set, _blas_get = _find_openblas()
_blas_lock = threading.Lock()
_blas_state = [0, 1]   # [threads inside serial_blas blocks, BLAS thread count to restore]


def blas_threads() -> int | None:
    """BLAS threads a product would use now (None: not an OpenBLAS we can control)."""
    return None if _blas_get is None else _blas_get()


class serial_blas:
    """Within the block BLAS runs on the calling thread only (our pool splits the work
    instead).  The setting is process-wide, so nested and concurrent blocks are counted:
    the first one in sets one thread, the last one out restores the user's count."""
    __slots__ = ()

    def __enter__(self):
        if _blas_set is not None:
            with _blas_lock:
                if _blas_state[0] == 0:
                    _blas_state[1] = _blas_set(1)
                _blas_state[0] += 1
        return self

    def __exit__(self, *exc):
        if _blas_set is not None:
            with _blas_lock:
                _blas_state[0] -= 1
                if _blas_state[0] == 0 and _blas_state[1] != 1:
                    _blas_set(_blas_state[1])
        return False


# ------------------------------------------------------------------ the pool
class _Job:
    """Chunks claimed one at a time by whichever thread is free (see the module docs)."""
    __slots__ = ("chunks", "claim", "done", "error", "fn", "left", "lock", "n")

    def __init__(self, fn, chunks):
        self.fn = fn
        self.chunks = chunks
        self.n = len(chunks)
        self.claim = itertools.count().__next__   # atomic under the GIL
        self.left = self.n
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.error = None

    def work(self):
        n, fn, chunks = self.n, self.fn, self.chunks
        while True:
            i = self.claim()
            if i >= n:
                return
            try:
                fn(chunks[i])
            except BaseException as e:  # noqa: BLE001  (re-raised on the calling thread)
                if self.error is None:
                    self.error = e
            with self.lock:
                self.left -= 1
                if self.left == 0:
                    self.done.set()


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    p = _pool
    if p is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=max(NUM_THREADS - 1, 1), thread_name_prefix="neetorch")
            p = _pool
    return p


def run_parallel(fn, chunks) -> None:
    """Call ``fn(chunk)`` once for every chunk, on the calling thread and up to
    ``NUM_THREADS - 1`` pool workers; returns when all are done (re-raising the first error)."""
    n = len(chunks)
    if n == 0:
        return
    if n == 1 or NUM_THREADS <= 1:
        for c in chunks:
            fn(c)
        return
    job = _Job(fn, chunks)
    pool = _get_pool()
    for _ in range(min(NUM_THREADS, n) - 1):
        try:
            pool.submit(job.work)
        except RuntimeError:   # set_num_threads (another thread) shut this pool down: the caller
            break              # claims the remaining chunks itself
    job.work()
    job.done.wait()
    if job.error is not None:
        raise job.error


def split(n: int, parts: int, align: int = 1) -> list[tuple[int, int]]:
    """``[0, n)`` cut into at most ``parts`` near-equal ranges; inner bounds are multiples of
    ``align`` (as far as n allows)."""
    if align > 1:
        blocks = -(-n // align)
        return [(s * align, min(e * align, n)) for s, e in split(blocks, parts)]
    parts = max(1, min(parts, n))
    q, r = divmod(n, parts)
    out, s = [], 0
    for i in range(parts):
        e = s + q + (1 if i < r else 0)
        out.append((s, e))
        s = e
    return out
