"""Device registry: discovery through the ``neetorch.devices`` entry-point group,
``nee.device`` objects, ``nee.devices()`` and the fallback report."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from importlib.metadata import entry_points

from .. import _env
from .base import Backend

__all__ = ["Backend", "device", "devices", "get_backend", "fallback_report", "reset_fallbacks",
           "set_strict", "is_strict", "FallbackError", "DeviceInfo", "claim"]


class FallbackError(RuntimeError):
    """Raised in strict mode when an op would fall back to another device."""


class device:
    """``nee.device("cpu")``, ``nee.device("opencl:0")``, ``nee.device("cuda", 1)``."""
    __slots__ = ("type", "index", "_hash")

    def __new__(cls, type_or_str, index=None):
        if isinstance(type_or_str, device):
            return type_or_str
        key = (type_or_str, index)
        cached = _DEVICE_CACHE.get(key)
        if cached is not None:
            return cached
        s = str(type_or_str)
        if ":" in s:
            if index is not None:
                raise ValueError(f"device string {s!r} already has an index")
            t, _, i = s.partition(":")
            try:
                idx = int(i)
            except ValueError:
                raise ValueError(f"invalid device string {s!r}: index must be an integer") from None
        else:
            t, idx = s, (0 if index is None else int(index))
        self = object.__new__(cls)
        object.__setattr__(self, "type", t)
        object.__setattr__(self, "index", idx)
        object.__setattr__(self, "_hash", hash((t, idx)))
        _DEVICE_CACHE[key] = self
        return self

    def __setattr__(self, k, v):
        raise AttributeError("device is immutable")

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and other.type == self.type and other.index == self.index

    def __hash__(self):
        return self._hash

    def __reduce__(self):
        return (device, (self.type, self.index))

    def __str__(self):
        return self.type if (self.index == 0 and self.type == "cpu") else f"{self.type}:{self.index}"

    def __repr__(self):
        return f"device(type='{self.type}', index={self.index})" if self.type != "cpu" else "device(type='cpu')"


_DEVICE_CACHE: dict = {}


@dataclass
class DeviceInfo:
    type: str
    count: int
    available: bool
    reason: str | None
    plugin: str

    def __str__(self):
        state = f"{self.count} device(s)" if self.available else f"unavailable: {self.reason}"
        return f"{self.type:<8} {state}  [{self.plugin}]"


_lock = threading.RLock()
_backend_classes: dict[str, tuple[type[Backend] | None, str, str | None]] = {}
_instances: dict[tuple[str, int], Backend] = {}
_discovered = False


def _discover():
    global _discovered
    with _lock:
        if _discovered:
            return
        eps = entry_points(group="neetorch.devices")
        names = {ep.name for ep in eps}
        found = list(eps)
        if "cpu" not in names:  # running from a source tree that was never installed
            from .cpu import CPUBackend
            _backend_classes["cpu"] = (CPUBackend, "neetorch.devices.cpu:CPUBackend", None)
        for ep in found:
            try:
                cls = ep.load()
                _backend_classes[ep.name] = (cls, ep.value, None)
            except Exception as e:  # a broken plugin must not break neetorch
                _backend_classes[ep.name] = (None, ep.value, f"plugin failed to load: {type(e).__name__}: {e}")
        _discovered = True


def register_backend(cls: type[Backend], name: str | None = None) -> None:
    """Register a backend class by hand (tests, or a plugin not installed as a package)."""
    _discover()
    with _lock:
        _backend_classes[name or cls.type] = (cls, f"{cls.__module__}:{cls.__qualname__}", None)
        for k in [k for k in _instances if k[0] == (name or cls.type)]:
            del _instances[k]
    from ..ops import elementwise, registry  # the dispatcher caches backends, their claims and
    registry._backends.clear()                # prepared launches (closures over a backend instance)
    registry._claims.clear()
    elementwise._plans.clear()
    elementwise._scalar_cache.clear()


def devices() -> list[DeviceInfo]:
    """Every known backend, whether it has devices here, and why not when it does not."""
    _discover()
    out = []
    for name, (cls, where, err) in sorted(_backend_classes.items(), key=lambda kv: kv[0] != "cpu"):
        if cls is None:
            out.append(DeviceInfo(name, 0, False, err, where))
            continue
        try:
            n, reason = cls.probe()
        except Exception as e:
            n, reason = 0, f"probe failed: {type(e).__name__}: {e}"
        out.append(DeviceInfo(name, n, n > 0, reason, where))
    return out


def get_backend(dev: device) -> Backend:
    inst = _instances.get((dev.type, dev.index))
    if inst is not None:
        return inst
    _discover()
    with _lock:
        inst = _instances.get((dev.type, dev.index))
        if inst is not None:
            return inst
        entry = _backend_classes.get(dev.type)
        if entry is None:
            known = ", ".join(sorted(_backend_classes))
            raise RuntimeError(f"unknown device type {dev.type!r}; known backends: {known} (see nee.devices())")
        cls, where, err = entry
        if cls is None:
            raise RuntimeError(f"device {dev} unavailable: {err}")
        n, reason = cls.probe()
        if dev.index >= n:
            raise RuntimeError(f"device {dev} unavailable: " + (reason or f"only {n} {dev.type} device(s)"))
        inst = cls(dev.index)
        inst.device = dev
        _instances[(dev.type, dev.index)] = inst
        return inst


def claim(backend: Backend, op: str, ins: list, outs: list, attrs: dict) -> str | None:
    """The whole claim for one call of ``op``: ``None`` when ``backend`` runs it, else the reason.

    ``ins`` / ``outs`` are ``Meta(shape, dtype)`` lists (graph values work too: anything with
    ``shape`` and ``dtype``).  Asks ``supports`` (dtypes), then ``supports_call`` (shapes and
    attributes) when the backend overrides it: the same two questions the eager dispatcher
    asks, so placement and eager dispatch agree."""
    dtypes = tuple([m.dtype for m in ins] + [m.dtype for m in outs])
    reason = backend.supports(op, dtypes)
    if reason is None and getattr(backend, "has_call_claims", None) is not None and backend.has_call_claims():
        from ..ops.registry import Meta
        reason = backend.supports_call(op, [Meta(tuple(m.shape), m.dtype) for m in ins],
                                       [Meta(tuple(m.shape), m.dtype) for m in outs], attrs)
    return reason


# ---------------------------------------------------------------- fallbacks
@dataclass
class FallbackRecord:
    op: str
    device: str
    dtypes: tuple
    reason: str
    count: int = 0
    bytes_moved: int = 0


@dataclass
class FallbackReport:
    records: dict = field(default_factory=dict)

    def __len__(self):
        return sum(r.count for r in self.records.values())

    def __str__(self):
        if not self.records:
            return "no fallbacks"
        lines = [f"{'op':<24}{'device':<10}{'dtypes':<28}{'count':>7}{'bytes moved':>14}  reason"]
        for r in self.records.values():
            lines.append(f"{r.op:<24}{r.device:<10}{','.join(r.dtypes):<28}{r.count:>7}{r.bytes_moved:>14}  {r.reason}")
        return "\n".join(lines)

    __repr__ = __str__


_fallbacks = FallbackReport()
_strict = [_env.STRICT]


def set_strict(flag: bool = True) -> None:
    """Strict mode: any fallback to another device raises :class:`FallbackError`."""
    _strict[0] = bool(flag)


def is_strict() -> bool:
    return _strict[0]


def fallback_report() -> FallbackReport:
    return _fallbacks


def reset_fallbacks() -> None:
    _fallbacks.records.clear()


def record_fallback(op: str, dev: device, dtypes, reason: str, nbytes: int, where: str = "") -> None:
    """Count one fallback of ``op`` from ``dev`` to the CPU (or raise in strict mode).

    Eager ops that fall back while ``nee.jit`` traces a function are not counted: the graph
    is placed after tracing, and its placement reports (and, in strict mode, refuses) the
    fallback with the node it concerns, once per run of the compiled graph."""
    names = tuple(d.name for d in dtypes)
    from ..trace.tracer import is_tracing
    if is_tracing():
        return
    if _strict[0]:
        raise FallbackError(f"{op}{where} on {dev} with dtypes ({', '.join(names)}) would fall back to cpu: "
                            f"{reason} (strict mode; unset NEE_STRICT or call nee.set_strict(False) to allow "
                            f"fallbacks)")
    key = (op, str(dev), names, reason)
    with _lock:
        r = _fallbacks.records.get(key)
        if r is None:
            r = _fallbacks.records[key] = FallbackRecord(op, str(dev), names, reason)
        r.count += 1
        r.bytes_moved += nbytes
    if _env.DEBUG >= 1:
        import sys
        print(f"[neetorch] fallback: {op} {dev} ({', '.join(names)}) -> cpu: {reason}", file=sys.stderr)


# ``nee.devices`` is this package (``import neetorch.devices.cpu.kernels.conv as m`` walks attributes through it);
# calling it, ``nee.devices()``, is :func:`devices`
from .._callable_package import make_callable  # noqa: E402

make_callable(__name__, devices)
