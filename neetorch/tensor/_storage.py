"""Write counters of CPU storages, for caches derived from a tensor's values (``torch``'s ``_version``).

A cache of something computed from a captured tensor (the jit's re-laid-out copy of a product weight:
``jit/passes.py`` ``memo_product_weights``) must see every later write to that tensor's memory.  The
storage of a CPU tensor is the array owning its memory (:func:`root`: numpy views and ``as_strided``
spans followed to it), so every view of a tensor shares one counter.  Only *watched* storages have a
counter (:class:`Watch`, held by the cache): with nothing watched, :func:`bump` is one dict test, so eager
code pays nothing.  neetorch's write paths call :func:`bump` after writing:

* ``ops.registry.run`` with ``out=`` (every in-place op: ``add_``, ``sub_``, ``x -= y``, ``clamp_``,
  ``index_put_``, ``masked_fill_``, the ``out=`` of the elementwise ops, ``embedding``'s ``max_norm`` renorm);
* ``Tensor._assign`` (``copy_``, ``fill_``, ``zero_``, the generic in-place methods, ``out=`` results of other
  functions, ``load_state_dict``, the random fills ``uniform_``/``normal_``);
* ``ops.indexing.setitem``'s direct write (its other paths write through ``copy_`` / ``index_put_``).

``.data =``, ``set_``, ``resize_`` and the in-place view methods give the tensor other storage: a cache
compares the tensor's ``_data`` object itself.  Memory neetorch cannot see written is *exported*: arrays
handed out by ``Tensor.numpy()``/``__array__``/``__dlpack__``, tensors made over a caller's array by
``from_numpy``/``as_tensor``/``from_dlpack``, and storages neetorch does not own (an array over foreign
memory).  The mark is sticky for the storage's life (a pool block's is cleared when the pool hands the
block out again: nothing of its previous tensor is alive then); a cache must not trust the counter of an
exported storage (the jit's weight memo then reads the tensor's own memory).
"""
from __future__ import annotations

import threading
import weakref

import numpy as np

__all__ = ["root", "same", "bump", "mark_exported", "is_exported", "Watch", "WATCH"]

# id(root) -> [version, root (kept alive: its id cannot be reused while watched), watchers, exported]
WATCH: dict = {}
# id(root) -> weak reference to an exported root that is not watched (removed when it dies)
EXPORTED: dict = {}
_lock = threading.RLock()   # (re-entrant: a Watch may be collected while the lock is held)


def root(a):
    """The object owning ``a``'s memory (numpy views and ``as_strided`` spans followed)."""
    while True:
        b = a.base
        if b is None:
            return a
        if type(b) is np.ndarray or isinstance(b, np.ndarray):
            a = b
            continue
        k = getattr(b, "_keep", None)
        if k is None:
            return b      # memory owned by something else (a buffer, a DLPack holder): foreign
        a = k


def same(a, b) -> bool:
    """Whether device arrays ``a`` and ``b`` share one storage (one a view of the other's memory): CPU arrays by
    their :func:`root`, OpenCL / plugin arrays by their ``storage`` (or ``buffer``) object, CUDA (CuPy) arrays by
    their memory block; False when it cannot be told."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and root(a) is root(b)
    for attr in ("storage", "buffer"):     # OpenCL arrays (storage), device plugins (buffer)
        sa = getattr(a, attr, None)
        if sa is not None:
            return sa is getattr(b, attr, None)
    ma, mb = getattr(getattr(a, "a", None), "data", None), getattr(getattr(b, "a", None), "data", None)
    if ma is not None and mb is not None:                                # CUDA (cupy) arrays
        return getattr(ma, "mem", None) is not None and ma.mem is getattr(mb, "mem", None)
    return False


def bump(a) -> None:
    """Count a write into the storage of array ``a`` (after the write: a reader that revalidates then sees
    the new values).  Cheap when nothing is watched."""
    if WATCH and isinstance(a, np.ndarray):
        e = WATCH.get(id(root(a)))
        if e is not None:
            e[0] += 1


def bump_all(arrays) -> None:
    if WATCH:
        for a in arrays:
            bump(a)


def _forget(key, ref) -> None:
    if EXPORTED.get(key) is ref:
        del EXPORTED[key]


def mark_exported(a) -> None:
    """``a``'s storage is reachable by code neetorch does not see (a numpy array handed out, a caller's
    array wrapped): caches stop trusting its counter (a watched one's counter moves, so they notice)."""
    if not isinstance(a, np.ndarray):
        return
    r = root(a)
    k = id(r)
    e = WATCH.get(k)
    if e is not None and not e[3]:
        e[3] = True
        e[0] += 1          # the cache's next check sees the change of mode
    ref = EXPORTED.get(k)
    if ref is not None and ref() is r:
        return
    try:
        ref = weakref.ref(r, lambda _r, k=k: _forget(k, _r))
    except TypeError:
        return             # not weakly referenceable: foreign memory, compared anyway (is_exported)
    EXPORTED[k] = ref


def unexport(r) -> None:
    """Drop the export mark of root ``r`` (a pool block handed out again: no array of its previous tensor
    is alive)."""
    if EXPORTED:
        EXPORTED.pop(id(r), None)


def is_exported(r) -> bool:
    """Whether root ``r`` is exported or not memory neetorch owns (an array over another object's buffer)."""
    if not isinstance(r, np.ndarray) or not r.flags.owndata:
        return True
    ref = EXPORTED.get(id(r))
    return ref is not None and ref() is r


class Watch:
    """A counter of writes into the storage of array ``a`` (held by a cache, dropped with it).
    ``cell``: ``[version, root, watchers, exported]``."""
    __slots__ = ("key", "cell", "__weakref__")

    def __init__(self, a):
        r = root(a)
        k = id(r)
        with _lock:
            e = WATCH.get(k)
            if e is None or e[1] is not r:
                e = WATCH[k] = [0, r, 0, is_exported(r)]
            e[2] += 1
        self.key, self.cell = k, e

    def release(self) -> None:
        e = self.cell
        if e is None:
            return
        self.cell = None
        with _lock:
            e[2] -= 1
            if e[2] <= 0 and WATCH.get(self.key) is e:
                del WATCH[self.key]

    def __del__(self):
        try:
            self.release()
        except Exception:   # noqa: BLE001 - interpreter shutdown
            pass
