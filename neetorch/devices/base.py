"""The device plugin contract.

A backend is a class that subclasses :class:`Backend` and is registered under the
``neetorch.devices`` entry-point group (the CPU backend is registered the same way,
in neetorch's own ``pyproject.toml``).  It owns:

* identity: ``type`` (``"cpu"``, ``"opencl"``, ...) and the device indices it exposes;
* an allocator: ``empty`` / ``from_host`` / ``to_host`` / ``copy_`` / ``fill_`` /
  ``free`` and ``memory_stats``;
* layout: ``as_strided`` to build views over its storage;
* what it claims: ``supports(op, dtypes)`` returns ``None`` when it can run the op,
  or a short reason string when it cannot (the dispatcher then falls back, visibly).
  The answer must depend only on its arguments: the dispatcher caches it per
  (backend, op, dtypes);
* claims that depend on shapes or attributes (optional): ``supports_call(op, ins,
  outs, attrs)`` gets the input and output ``Meta(shape, dtype)`` lists and the op's
  attributes, and is asked on every call (never cached) once ``supports`` said yes
  for the dtypes; a backend that does not override it claims by dtype alone;
* ``static_claims()`` (optional classmethod): the dtype-level claims known without a
  device present (coverage tables, planning for absent hardware);
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

    def fill_(self, array, value) -> None:
        """Fill ``array`` with the scalar ``value`` (``nee.zeros`` / ``ones`` / ``full`` on this
        device).  The default copies a host scalar through ``from_host`` + ``copy_``."""
        import numpy as np
        with np.errstate(over="ignore", invalid="ignore"):
            host = np.array(value).astype(array.dtype)
        self.copy_(array, self.from_host(host.reshape(())))

    def mark_immutable(self, array) -> None:
        """A promise from the compiler: ``array`` (a frozen constant of a compiled graph) never changes while
        it lives, so kernels may cache transforms of it (packed / Winograd weights) without re-checking
        them on every call.  Default: nothing to do."""

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
        """None when ``op`` runs here for these input/output dtypes, else a reason.

        The default: a kernel for ``op``, storage for every dtype (:meth:`storage_reason` says
        why not), then the kernel's own ``claims(backend, dtypes) -> None | reason`` attribute
        when it has one (e.g. matmul only on float dtypes).  The dispatcher caches the answer
        per (backend, op, dtypes)."""
        k = self.kernels.get(op)
        if k is None:
            return f"no {self.type} kernel for {op}"
        for d in dtypes:
            if d.name not in self.dtypes:
                return self.storage_reason(d.name)
        claims = getattr(k, "claims", None)
        return claims(self, dtypes) if claims is not None else None

    def storage_reason(self, dtype_name: str) -> str:
        """Why this device cannot hold ``dtype_name`` (used in fallback reasons)."""
        return f"{self.type} has no {dtype_name} storage"

    def supports_call(self, op: str, ins: list, outs: list, attrs: dict) -> str | None:
        """The shape/attribute-dependent part of a claim: ``None`` when this call of ``op``
        runs here, else a reason (``"matmul working set 6 MiB exceeds the 4 MiB on-chip
        memory"``).  ``ins`` / ``outs`` are ``Meta(shape, dtype)`` lists, ``attrs`` the op's
        attributes.  Asked only after :meth:`supports` accepted the dtypes, on every call
        (eager dispatch) and once per graph node (``nee.jit`` placement); keep it cheap.
        The default claims every call, so backends that do not override it are not asked."""
        return None

    @classmethod
    def has_call_claims(cls) -> bool:
        """Whether :meth:`supports_call` is overridden (the dispatcher skips it otherwise)."""
        return getattr(cls, "supports_call", None) is not Backend.supports_call

    # -- execution ---------------------------------------------------------
    def synchronize(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.type}:{self.index}>"
