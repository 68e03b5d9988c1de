"""A persistent pool that splits kernel work across cores.

Kernels are compiled serial and ``nogil``; large launches are cut into one chunk per
thread here.  One mechanism for every kernel keeps the number of compiled
specializations at one per (op, dtypes) instead of a serial and a parallel copy.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ... import _env

NUM_THREADS = _env.NUM_THREADS
_pool: ThreadPoolExecutor | None = None

# below this many elements a launch runs on the calling thread: handing work to the pool
# costs ~60 us here (thread wake-up and GIL hand-off), which only pays off for launches
# of ~1M elements and up (measured: 64K-element add 5.6 us serial vs 75 us split)
PARALLEL_THRESHOLD = 1 << 20


def get_num_threads() -> int:
    return NUM_THREADS


def set_num_threads(n: int) -> None:
    global NUM_THREADS, _pool
    NUM_THREADS = max(1, int(n))
    if _pool is not None:
        _pool.shutdown(wait=False)
        _pool = None


def run_parallel(fn, chunks) -> None:
    """Call ``fn(chunk)`` for every chunk; all but the first on the pool."""
    global _pool
    if len(chunks) == 1:
        fn(chunks[0])
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=NUM_THREADS, thread_name_prefix="neetorch")
    futs = [_pool.submit(fn, c) for c in chunks[1:]]
    fn(chunks[0])
    for f in futs:
        f.result()


def split(n: int, parts: int) -> list[tuple[int, int]]:
    parts = max(1, min(parts, n))
    q, r = divmod(n, parts)
    out, s = [], 0
    for i in range(parts):
        e = s + q + (1 if i < r else 0)
        out.append((s, e))
        s = e
    return out
