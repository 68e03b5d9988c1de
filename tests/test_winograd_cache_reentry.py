"""kernels/winograd.py's weights cache releases the entries it evicts or replaces after its lock: an entry's last
reference can be an array that is itself a cached transform's weight (Winograd U, which conv_direct packs), whose
owner's finalizer (_drop) takes the lock.  Dropped inside the lock, that eviction deadlocked the process (a big
conv after a small one with NEE_WINOGRAD_CACHE_MB=2 on an AVX-512 host: conv_direct packs U there)."""
import threading
from collections import OrderedDict

import numpy as np

from neetorch.devices.cpu.kernels import winograd


class _NoReentry:
    """A lock that records (instead of deadlocking on) an acquire by the thread already holding it."""

    def __init__(self):
        self._l = threading.RLock()
        self.depth = 0
        self.reentered = 0

    def __enter__(self):
        self._l.acquire()
        self.depth += 1
        if self.depth > 1:
            self.reentered += 1
        return self

    def __exit__(self, *exc):
        self.depth -= 1
        self._l.release()
        return False


def _run(monkeypatch, evict):
    lock = _NoReentry()
    monkeypatch.setattr(winograd, "_cache_lock", lock)
    monkeypatch.setattr(winograd, "_cache", OrderedDict())
    monkeypatch.setattr(winograd, "_cache_bytes", [0])
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    # the entry of w holds U (its only reference once this test lets go of it) ...
    u = winograd.weights(w, "u", lambda a, m: np.ones(4096, np.float32))
    # ... and U is a weight of its own cached transform: weakref.finalize(U's owner, _drop, key) (conv_direct's
    # packed_weights of a Winograd U)
    assert winograd.weights(u, "packed", lambda a, m: a.copy()) is not None
    del u
    evict(w)
    return lock


def test_eviction_drops_entries_after_the_lock(monkeypatch):
    def evict(w):
        # a big entry: every older entry is evicted in one loop (the entry holding U first, then U's own)
        monkeypatch.setattr(winograd, "_CACHE_BYTES", 1)
        w2 = np.zeros((8, 8, 3, 3), np.float32)
        winograd.weights(w2, "big", lambda a, m: np.ones(1 << 16, np.float32))
    lock = _run(monkeypatch, evict)
    assert lock.reentered == 0, "an evicted entry was released inside _cache_lock (its finalizer re-took the lock)"
    assert len(winograd._cache) <= 1     # (the older entries evicted)


def test_clear_and_release_drop_entries_after_the_lock(monkeypatch):
    lock = _run(monkeypatch, lambda w: winograd.clear_cache())
    assert lock.reentered == 0 and len(winograd._cache) == 0
    lock = _run(monkeypatch, lambda w: winograd.release(w.reshape(-1).view(np.uint8)))
    assert lock.reentered == 0
