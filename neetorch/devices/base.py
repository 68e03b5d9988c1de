"""The device plugin contract.

A backend is a class that subclasses :class:`Backend` and is registered under the
``neetorch.devices`` entry-point group (the CPU backend is registered the same way,
in neetorch's own ``pyproject.toml``).  It owns:

* identity: ``type`` (``"cpu"``, ``"opencl"``, ...) and the device indices it exposes;
* an allocator: ``empty`` / ``from_host`` / ``to_host`` / ``copy_`` / ``free`` and
  ``memory_stats``;
* layout: ``as_strided`` to build views over its storage;
* what it claims: ``supports(op, dtypes)`` returns ``None`` when it can run the op,
  or a short reason string when it cannot (the dispatcher then falls back, visibly).
  The answer must depend only on its arguments: the dispatcher caches it per
  (backend, op, dtypes);
* fused kernels (optional): ``compile_group(group) -> (kernel, source)`` renders a
  ``jit.fusion.FusedElementwise`` group (or raises ``NotImplementedError``: the
  members then run one by one) and ``launch_group(kernel, outs, ins)`` runs it;
* dispatch: ``kernels`` maps op names to ``fn(backend, outs, ins, attrs)``;
* ``synchronize``.

Device arrays are whatever the backend likes as long as they expose ``shape``,
``strides`` (bytes), ``dtype`` (numpy dtype), ``ndim``, ``size``, ``nbytes``,
``itemsize`` and ``flags.c_contiguous`` / ``flags.writeable``; the CPU backend uses
numpy arrays, a CUDA backend CuPy arrays.
"""
from __future__ import annotations

from typing import Any, Callable


class Backend:
    #: device type name used in ``nee.device("<type>:<index>")``
    type: str = "abstract"
    #: op name -> kernel ``fn(backend, outs: list, ins: list, attrs: dict) -> None``
    kernels: dict[str, Callable] = {}
    #: dtypes (names) the device can store at all
    dtypes: frozenset[str] = frozenset()

    # -- discovery -------------------------------------------------------
    @classmethod
    def probe(cls) -> tuple[int, str | None]:
        """Return (number of devices, reason when 0)."""
        return 1, None

    def __init__(self, index: int = 0):
        self.index = index

    # -- allocator -------------------------------------------------------
    def empty(self, shape: tuple[int, ...], dtype) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.empty")

    def from_host(self, array) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.from_host")

    def to_host(self, array):
        raise NotImplementedError(f"{type(self).__name__}.to_host")

    def copy_(self, dst, src) -> None:
        """Copy ``src`` into ``dst`` (same device, same shape, any layouts/dtypes)."""
        raise NotImplementedError(f"{type(self).__name__}.copy_")

    def free(self, array) -> None:  # reference counted storage: nothing to do
        pass

    def memory_stats(self) -> dict:
        return {}

    # -- layout ------------------------------------------------------------
    def as_strided(self, array, shape, strides, offset: int = 0):
        """A view of ``array``'s storage; strides and offset in elements, offset
        relative to ``array``'s first element."""
        raise NotImplementedError(f"{type(self).__name__}.as_strided")

    # -- capability ------------------------------------------------------
    @classmethod
    def static_claims(cls) -> dict[str, frozenset[str]] | None:
        """What the backend claims without a device being present: ``{op name: dtype
        names}`` (an op is claimed for a call when every input/output dtype is in its
        set).  Used for coverage tables and for planning on hardware that is absent
        (a CUDA backend on a machine without a GPU).  ``None`` (the default) means
        the claims are only known from an instance (``supports``)."""
        return None

    def supports(self, op: str, dtypes) -> str | None:
        """None when ``op`` runs here for these input/output dtypes, else a reason."""
        if op not in self.kernels:
            return f"no {self.type} kernel for {op}"
        for d in dtypes:
            if d.name not in self.dtypes:
                return f"{self.type} has no {d.name} storage"
        return None

    # -- execution ---------------------------------------------------------
    def synchronize(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.type}:{self.index}>"
