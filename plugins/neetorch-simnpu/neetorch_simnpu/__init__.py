"""simnpu: a simulated NPU, neetorch's reference device plugin.

Built only from neetorch's public plugin interface (``neetorch.devices.Backend``) and
registered like a vendor's package would be, through the ``neetorch.devices`` entry
point (``simnpu = "neetorch_simnpu:SimNPUBackend"`` in this package's pyproject.toml).
It models the constraints that make real NPUs partition models with the CPU:

* **device memory it owns**: every tensor lives in a :class:`DeviceBuffer` (a private
  byte array standing for device DRAM, ``capacity_bytes`` in all); nothing is shared
  with CPU tensors, so every host <-> device move is a copy (``from_host``/``to_host``);
* **a small claim set**: ``matmul`` (int8, float16), ``conv2d`` (float16), and the
  vector ops ``add``/``sub``/``mul``/``relu`` (int8, float16); no float32, no other op;
* **fixed tiles**: the matrix engine works on 16x16 tiles; operands are padded with
  zeros to whole tiles and the K dimension is accumulated tile by tile;
* **bounded on-chip memory**: a matmul or conv2d whose tile-padded working set (both
  operands plus the accumulator of one matrix product) exceeds ``sram_bytes`` is
  refused, with the sizes in the reason (``supports_call``: a shape-dependent claim);
  grouped and dilated convolutions are refused too (no engine for them);
* **exact arithmetic model**: int8 products accumulate in int32 (wrapping, like the
  hardware) and the result wraps to int8 (PyTorch's int8 matmul semantics); float16
  products accumulate in float32, tile by tile in K order, and round to float16 once
  (bias added in float32 before that single rounding); vector ops compute like numpy's
  float16/int8 ufuncs (float16 rounded once, int8 wrapping).

Environment (read when a device is created): ``NEE_SIMNPU_SRAM`` (on-chip bytes, default
4 MiB), ``NEE_SIMNPU_DRAM`` (device memory bytes, default 1 GiB), ``NEE_SIMNPU_DEVICES``
(how many devices, default 1).
"""
from __future__ import annotations

import os
import threading
import weakref

import numpy as np

from neetorch.devices import Backend

from . import kernels as _kernels

__all__ = ["CLAIMS", "TILE", "DeviceBuffer", "NPUArray", "SimNPUBackend"]

#: op name -> dtype names the device computes it for (every operand and result of a call)
CLAIMS: dict[str, frozenset[str]] = {
    "matmul": frozenset({"int8", "float16"}),
    "conv2d": frozenset({"float16"}),
    "add": frozenset({"int8", "float16"}),
    "sub": frozenset({"int8", "float16"}),
    "mul": frozenset({"int8", "float16"}),
    "relu": frozenset({"int8", "float16"}),
}
#: the matrix engine's tile edge (M, N and K are padded to multiples of it)
TILE = 16
#: accumulator dtype of the matrix engine per operand dtype
ACCUMULATOR = {"int8": np.dtype(np.int32), "float16": np.dtype(np.float32)}  # kernels._ACC by name

# storage is plain bytes: the device can hold any dtype (results of ops that fall back to the
# CPU come back here), it just computes few of them
_STORAGE = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")


def _env_int(name: str, default: int) -> int:
    v = os.environ.get(name, "")
    try:
        return int(v) if v.strip() else default
    except ValueError:
        raise ValueError(f"{name}={v!r}: expected an integer number of bytes/devices") from None


# ---------------------------------------------------------------- device memory
class DeviceBuffer:
    """One allocation in the simulated device memory (a private byte array)."""
    __slots__ = ("mem", "nbytes", "__weakref__")

    def __init__(self, nbytes: int):
        self.mem = np.empty(max(nbytes, 1), np.uint8)
        self.nbytes = nbytes


class _Flags:
    __slots__ = ("c_contiguous", "writeable")

    def __init__(self, c: bool):
        self.c_contiguous = c
        self.writeable = True


def _contig(shape) -> tuple:
    st, c = [], 1
    for s in reversed(shape):
        st.append(c)
        c *= max(s, 1)
    return tuple(reversed(st))


class NPUArray:
    """A strided view of a :class:`DeviceBuffer`: what a simnpu Tensor's ``_data`` is.

    ``estrides`` and ``offset`` are in elements; ``strides`` is in bytes, like numpy's.
    Views share the buffer; the host never sees the bytes except through a copy."""
    __slots__ = ("buffer", "shape", "estrides", "offset", "dtype", "__weakref__")

    def __init__(self, buffer: DeviceBuffer, shape, estrides, offset: int, dtype):
        self.buffer = buffer
        self.shape = tuple(int(s) for s in shape)
        self.estrides = tuple(int(s) for s in estrides)
        self.offset = int(offset)
        self.dtype = np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def strides(self) -> tuple:
        isz = self.dtype.itemsize
        return tuple(s * isz for s in self.estrides)

    @property
    def flags(self) -> _Flags:
        expected, c = 1, True
        for n, s in zip(reversed(self.shape), reversed(self.estrides)):
            if n == 0:
                c = True
                break
            if n != 1 and s != expected:
                c = False
            expected *= n
        return _Flags(c)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self):
        return f"NPUArray(shape={self.shape}, dtype={self.dtype.name}, strides={self.estrides}, offset={self.offset})"


# ---------------------------------------------------------------- the backend
class SimNPUBackend(Backend):
    type = "simnpu"
    dtypes = frozenset(_STORAGE)
    kernels = _kernels.KERNELS

    @classmethod
    def probe(cls):
        n = _env_int("NEE_SIMNPU_DEVICES", 1)
        return (n, None) if n > 0 else (0, "NEE_SIMNPU_DEVICES=0")

    @classmethod
    def static_claims(cls):
        return dict(CLAIMS)

    def __init__(self, index: int = 0):
        super().__init__(index)
        self.sram_bytes = _env_int("NEE_SIMNPU_SRAM", 4 << 20)
        self.capacity_bytes = _env_int("NEE_SIMNPU_DRAM", 1 << 30)
        self.tile = TILE
        self._lock = threading.RLock()     # (re-entrant: a buffer's finalizer can run from a GC inside a locked section)
        self.allocated = 0
        self.peak = 0
        self.num_allocs = 0
        self.launches: dict[str, int] = {}
        self.macs = 0                      # multiply-accumulates done by the matrix engine (padded)

    # ---------------------------------------------------------------- allocator
    def _alloc(self, nbytes: int) -> DeviceBuffer:
        with self._lock:
            if self.allocated + nbytes > self.capacity_bytes:
                raise MemoryError(f"simnpu:{self.index} out of device memory: {nbytes} B requested, "
                                  f"{self.allocated} of {self.capacity_bytes} B in use (NEE_SIMNPU_DRAM)")
            self.allocated += nbytes
            self.num_allocs += 1
            self.peak = max(self.peak, self.allocated)
        buf = DeviceBuffer(nbytes)
        weakref.finalize(buf, self._release, nbytes)
        return buf

    def _release(self, nbytes: int) -> None:
        with self._lock:
            self.allocated -= nbytes

    def _check_storage(self, dt: np.dtype, what: str) -> None:
        if dt.name not in self.dtypes:
            raise TypeError(f"{what}: simnpu:{self.index} cannot store {dt.name} "
                            f"(storage dtypes: {', '.join(sorted(self.dtypes))})")

    def empty(self, shape, dtype):
        dt = dtype.np if hasattr(dtype, "np") else np.dtype(dtype)
        self._check_storage(dt, "empty")
        shape = tuple(int(s) for s in shape)
        n = 1
        for s in shape:
            n *= s
        return NPUArray(self._alloc(n * dt.itemsize), shape, _contig(shape), 0, dt)

    def from_host(self, array):
        a = np.asarray(array, order="C")
        self._check_storage(a.dtype, "to(simnpu)")
        out = NPUArray(self._alloc(a.nbytes), a.shape, _contig(a.shape), 0, a.dtype)
        out.buffer.mem[:a.nbytes] = a.reshape(-1).view(np.uint8)
        return out

    def to_host(self, array):
        return np.array(self.host_view(array), copy=True, order="C")

    def copy_(self, dst, src):
        np.copyto(self.host_view(dst), self.host_view(src), casting="unsafe")

    def fill_(self, dst, value):
        with np.errstate(over="ignore", invalid="ignore"):
            self.host_view(dst)[...] = np.array(value).astype(dst.dtype)

    def memory_stats(self):
        return {"allocated_bytes": self.allocated, "peak_bytes": self.peak, "num_allocs": self.num_allocs,
                "capacity_bytes": self.capacity_bytes, "sram_bytes": self.sram_bytes, "tile": self.tile,
                "launches": dict(self.launches), "macs": self.macs}

    def data_ptr(self, a):
        return int(a.buffer.mem.ctypes.data) + a.offset * a.itemsize

    def storage_offset(self, a):
        return a.offset

    # ---------------------------------------------------------------- layout
    def as_strided(self, a, shape, strides, offset=0):
        return NPUArray(a.buffer, shape, strides, a.offset + offset, a.dtype)

    def view_dtype(self, a, dtype):
        """``a``'s storage reinterpreted as ``dtype`` (same itemsize): ``Tensor.view(dtype)``."""
        return NPUArray(a.buffer, a.shape, a.estrides, a.offset, dtype)

    def host_view(self, a: NPUArray) -> np.ndarray:
        """The simulator's window onto device memory (numpy view of the buffer), for kernels.
        Not a host transfer: only this backend's kernels and copies use it."""
        base = a.buffer.mem[:a.buffer.nbytes].view(a.dtype) if a.buffer.nbytes else np.empty(0, a.dtype)
        if a.size == 0:
            return np.empty(a.shape, a.dtype)
        return np.lib.stride_tricks.as_strided(base[a.offset:], a.shape, a.strides)

    # ---------------------------------------------------------------- claims
    def supports(self, op, dtypes):
        allowed = CLAIMS.get(op)
        if allowed is None:
            return f"simnpu has no {op} engine (it runs {', '.join(sorted(CLAIMS))})"
        names = [d.name for d in dtypes]
        if len(set(names)) > 1:
            return f"simnpu runs {op} on one dtype, got mixed ({', '.join(names)})"
        if names and names[0] not in allowed:
            return f"simnpu runs {op} only in {'/'.join(sorted(allowed))}, not {names[0]}"
        return None

    def supports_call(self, op, ins, outs, attrs):
        if op == "matmul":
            (M, K), N = ins[0].shape[-2:], ins[1].shape[-1]
            return self._fits(op, M, K, N, ins[0].dtype.name)
        if op == "conv2d":
            if attrs.get("groups", 1) != 1:
                return (f"simnpu's conv engine has no grouped/depthwise convolution "
                        f"(groups={attrs['groups']})")
            if tuple(attrs.get("dilation", (1, 1))) != (1, 1):
                return f"simnpu's conv engine has no dilated convolution (dilation={tuple(attrs['dilation'])})"
            O, C, KH, KW = ins[1].shape
            OH, OW = outs[0].shape[2:]
            # lowered to one matrix product per image: (O x C*KH*KW) @ (C*KH*KW x OH*OW)
            return self._fits(op, O, C * KH * KW, OH * OW, ins[0].dtype.name)
        return None  # vector ops stream through the vector unit: any shape

    def working_set(self, M: int, K: int, N: int, dtype: str) -> int:
        """Bytes of on-chip memory one (M x K) @ (K x N) product needs once padded to tiles:
        both operands plus the accumulator."""
        t = self.tile
        Mp, Kp, Np = (-(-M // t) * t, -(-K // t) * t, -(-N // t) * t)
        isz = np.dtype(dtype).itemsize
        return (Mp * Kp + Kp * Np) * isz + Mp * Np * ACCUMULATOR[dtype].itemsize

    def _fits(self, op, M, K, N, dtype):
        need = self.working_set(M, K, N, dtype)
        if need > self.sram_bytes:
            return (f"{op} working set {need} B (a {M}x{K}, b {K}x{N} padded to {self.tile}x{self.tile} tiles, "
                    f"{ACCUMULATOR[dtype].name} accumulator) exceeds the {self.sram_bytes} B on-chip memory")
        return None

    def __repr__(self):
        return f"<SimNPUBackend simnpu:{self.index} sram={self.sram_bytes} B tile={self.tile}>"
