"""The CUDA backend: CuPy arrays as storage, generated CUDA C kernels, cuBLAS matmul.

Registered under the ``neetorch.devices`` entry-point group as ``cuda``
(``cuda = "neetorch.devices.cuda:CUDABackend"``; ``pip install 'neetorch[cuda]'``
brings CuPy).  ``nee.device("cuda:N")`` is CUDA device N.  Importing this module
does not import CuPy: ``probe()`` and the first instance do.

* storage: :class:`CUDAArray`, a thin wrapper over a ``cupy.ndarray`` (views are
  ``cupy.ndarray`` objects over the same memory with their own strides and a
  ``memptr`` offset); the wrapper adds what neetorch reads and CuPy lacks
  (``flags.writeable``) and hands ``__cuda_array_interface__`` / DLPack through;
* elementwise ops and JIT-fused groups: CUDA C rendered by :mod:`.render` from the
  C expression table shared with OpenCL (``devices/cexpr.py``), compiled by NVRTC
  through ``cupy.RawModule``; modules are cached in memory by kernel name (which
  embeds a hash of what the kernel computes) and CuPy caches the binaries on disk
  (``~/.cupy/kernel_cache``, or ``CUPY_CACHE_DIR``);
* reductions, softmax and matmul: CuPy / cuBLAS (:mod:`.kernels`);
* one non-blocking stream per device: every kernel and CuPy call of this backend runs
  on it, ``synchronize()`` waits for it, host transfers are stream-ordered and blocking;
* everything else falls back to the CPU through the dispatcher, visibly.
"""
from __future__ import annotations

import sys
import threading
import time

import numpy as np

from ...tensor import dtypes as _dt
from ..base import Backend
from ..common import MemberByMember
from .kernels import STORAGE

__all__ = ["CUDAArray", "CUDABackend"]


class _Flags:
    __slots__ = ("c_contiguous", "writeable")

    def __init__(self, c, w=True):
        self.c_contiguous = c
        self.writeable = w


class CUDAArray:
    """What a cuda Tensor's ``_data`` is: a ``cupy.ndarray`` (``.a``) plus the attributes
    neetorch reads from device arrays.  Views share ``.a.data.mem``."""
    __slots__ = ("__weakref__", "a", "writeable")

    def __init__(self, a, writeable=True):
        self.a = a
        self.writeable = writeable     # False: a cached scalar operand (ops.elementwise._freeze)

    shape = property(lambda self: self.a.shape)
    strides = property(lambda self: self.a.strides)
    dtype = property(lambda self: self.a.dtype)
    ndim = property(lambda self: self.a.ndim)
    size = property(lambda self: self.a.size)
    itemsize = property(lambda self: self.a.itemsize)

    @property
    def nbytes(self):
        return self.a.size * self.a.itemsize

    @property
    def estrides(self):
        isz = self.a.itemsize
        return tuple(s // isz for s in self.a.strides)

    @property
    def flags(self):
        return _Flags(self.a.flags.c_contiguous, self.writeable)

    @property
    def __cuda_array_interface__(self):
        return self.a.__cuda_array_interface__

    def __dlpack__(self, *args, **kw):
        return self.a.__dlpack__(*args, **kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __len__(self):
        if not self.a.shape:
            raise TypeError("len() of a 0-d array")
        return self.a.shape[0]

    def __repr__(self):
        return f"CUDAArray(shape={self.shape}, dtype={self.dtype.name}, strides={self.estrides})"


class _On(threading.local):
    """Make this backend's device and stream current (CuPy reads both from thread-local state).
    Re-entrant and per thread: a ``cupy.cuda.Device`` keeps its saved-device stack on the object,
    so each thread enters its own."""

    def __init__(self, index, stream):
        import cupy
        self.dev = cupy.cuda.Device(index)
        self.stream = stream

    def __enter__(self):
        self.dev.__enter__()
        self.stream.__enter__()
        return self

    def __exit__(self, *exc):
        self.stream.__exit__(*exc)
        self.dev.__exit__(*exc)
        return False


class ModuleCache:
    """CUDA modules built with NVRTC through ``cupy.RawModule``, cached in memory by kernel
    name; ``precompile`` builds many kernels as ONE module (NVRTC's cost is mostly per
    module and per preamble).  CuPy keeps the binaries on disk, keyed by source, options
    and architecture."""

    def __init__(self, backend):
        from .render import preamble
        self.backend = backend
        self.preamble = preamble()
        self.kernels: dict = {}
        self.sources: dict = {}
        self.stats = {"modules_built": 0, "kernels": 0, "build_seconds": 0.0}
        self._lock = threading.RLock()

    def _build(self, sources):
        from ... import _env
        cp = self.backend.cp
        src = self.preamble + "\n" + "\n".join(s for _, s in sources)
        t0 = time.perf_counter()
        with self.backend.on():
            try:
                mod = cp.RawModule(code=src, options=("--std=c++17",))
                funcs = [(n, s, mod.get_function(n)) for n, s in sources]
            except cp.cuda.compiler.CompileException as e:
                raise RuntimeError(f"cuda: module build failed: {e}\n--- source ---\n{src}") from None
        dt = time.perf_counter() - t0
        self.stats["modules_built"] += 1
        self.stats["build_seconds"] += dt
        if _env.DEBUG >= 1:
            print(f"[neetorch] cuda build: {len(sources)} kernel(s) in {dt * 1e3:.0f} ms", file=sys.stderr)
        if _env.DEBUG >= 4:
            print(src, file=sys.stderr)
        for n, s, f in funcs:
            self.kernels[n] = f
            self.sources[n] = s
            self.stats["kernels"] += 1

    def kernel(self, name, source):
        k = self.kernels.get(name)
        if k is None:
            with self._lock:
                if name not in self.kernels:
                    self._build([(name, source)])
                k = self.kernels[name]
        return k

    def precompile(self, sources) -> int:
        with self._lock:
            seen, todo = set(), []
            for n, s in sources:
                if n not in self.kernels and n not in seen:
                    seen.add(n)
                    todo.append((n, s))
            if todo:
                self._build(todo)
            return len(todo)


class CUDABackend(Backend):
    type = "cuda"
    dtypes = frozenset(STORAGE)
    _probed = None

    @classmethod
    def probe(cls):
        if cls._probed is not None:
            return cls._probed
        try:
            import cupy
        except Exception as e:  # noqa: BLE001 - probe must not raise: a broken CuPy install is a reason
            return 0, (f"cupy is not installed ({type(e).__name__}: {e}); "
                       f"pip install 'neetorch[cuda]' (cupy-cuda12x)")
        try:
            n = cupy.cuda.runtime.getDeviceCount()
        except Exception as e:  # noqa: BLE001 - no driver / no device / driver too old: all mean 0 devices
            r = (0, f"CuPy finds no CUDA device ({type(e).__name__}: {e})")
        else:
            r = (n, None) if n > 0 else (0, "CuPy finds no CUDA device")
        cls._probed = r
        return r

    @classmethod
    def static_claims(cls):
        from .kernels import static_claims
        return static_claims()

    def __init__(self, index: int = 0):
        super().__init__(index)
        import cupy
        self.cp = cupy
        self.emulated = bool(getattr(cupy, "__neetorch_emulation__", False))   # tests without a GPU
        self.cp_device = cupy.cuda.Device(index)
        with self.cp_device:
            self.stream = cupy.cuda.Stream(non_blocking=True)
            props = cupy.cuda.runtime.getDeviceProperties(index)
            self.pool = cupy.get_default_memory_pool()
        name = props["name"]
        self.name = name.decode() if isinstance(name, bytes) else str(name)
        self.arch = f"sm_{props['major']}{props['minor']}"
        self._on = _On(index, self.stream)
        self.modules = ModuleCache(self)
        self._ew_kernels: dict = {}
        self.layouts: dict = {}        # elementwise launch layout -> (threads, meta struct): render.run_strided
        self.peak = 0
        self.num_allocs = 0
        self.launches = 0
        from . import kernels as _k
        self.kernels = _k.build_table()

    def on(self):
        """Context: this device and its stream are current (for CuPy calls)."""
        return self._on

    # ---------------------------------------------------------------- allocator
    def _check_dtype(self, npdt, what):
        try:
            name = _dt.from_numpy_dtype(np.dtype(npdt)).name
        except (TypeError, KeyError, ValueError):
            name = np.dtype(npdt).name
        if name not in self.dtypes:
            raise TypeError(f"{what}: {self.type}:{self.index} ({self.name}) has no {name} storage "
                            f"(cuda stores {', '.join(STORAGE)})")

    def _track(self):
        self.num_allocs += 1
        u = self.pool.used_bytes()
        self.peak = max(self.peak, u)

    def empty(self, shape, dtype):
        npdt = dtype.np if isinstance(dtype, _dt.DType) else np.dtype(dtype)
        self._check_dtype(npdt, "empty")
        with self._on:
            a = self.cp.empty(tuple(int(s) for s in shape), npdt)
            self._track()
        return CUDAArray(a)

    def from_host(self, array):
        h = np.asarray(array, order="C")
        self._check_dtype(h.dtype, "to(cuda)")
        with self._on:
            a = self.cp.empty(h.shape, h.dtype)
            if h.nbytes:
                a.set(h)
            self._track()
        return CUDAArray(a)

    def to_host(self, a):
        if a.size == 0:
            return np.empty(a.shape, a.dtype)
        with self._on:
            return a.a.get(stream=self.stream)

    def copy_(self, dst, src):
        """``dst`` = ``src`` (same shape, or ``src`` broadcast through 0 strides; any layouts, any dtypes)."""
        if dst.size == 0:
            return
        if (dst.dtype == src.dtype and dst.shape == src.shape and dst.a.flags.c_contiguous
                and src.a.flags.c_contiguous and dst.a.data.mem is not src.a.data.mem):
            with self._on:
                dst.a.data.copy_from_device_async(src.a.data, dst.nbytes, self.stream)
            return
        from ...ops.registry import OPS
        from .render import launch
        launch(self, OPS["cast"], dst, [src])

    def fill_(self, dst, value):
        if dst.size == 0:
            return
        with np.errstate(over="ignore", invalid="ignore"):
            try:
                v = np.array(value, dtype=dst.dtype)
            except OverflowError:
                v = np.array(value).astype(dst.dtype)
        with self._on:
            dst.a.fill(v[()])

    def free(self, array):
        """Storage is reference counted: CuPy's pool takes the memory back when its last view
        goes (``empty_cache()`` returns the pool's free blocks to the driver)."""

    def empty_cache(self):
        with self._on:
            self.pool.free_all_blocks()

    def memory_stats(self):
        with self._on:            # CuPy's default pool answers for the current device
            used, total = self.pool.used_bytes(), self.pool.total_bytes()
        return {"allocated_bytes": used, "reserved_bytes": total,
                "peak_bytes": max(self.peak, used), "num_allocs": self.num_allocs,
                "device": f"{self.name} ({self.arch})", "kernels_built": self.modules.stats["kernels"],
                "modules_built": self.modules.stats["modules_built"], "launches": self.launches}

    def reset_peak_memory_stats(self):
        self.peak = self.pool.used_bytes()

    def data_ptr(self, a):
        return int(a.a.data.ptr)

    def storage_offset(self, a):
        return (a.a.data.ptr - a.a.data.mem.ptr) // a.itemsize

    # ---------------------------------------------------------------- layout
    def as_strided(self, a, shape, strides, offset=0):
        isz = a.itemsize
        shape = tuple(int(s) for s in shape)
        n = 1
        for s in shape:
            n *= s
        mp = a.a.data + int(offset) * isz if (n and offset) else a.a.data
        v = self.cp.ndarray(shape, a.dtype, memptr=mp, strides=tuple(int(s) * isz for s in strides))
        return CUDAArray(v, a.writeable)       # views of a frozen scalar stay frozen

    def view_dtype(self, a, dtype):
        """``a``'s storage reinterpreted as ``dtype`` (same itemsize): ``Tensor.view(dtype)``."""
        return CUDAArray(self.cp.ndarray(a.shape, dtype, memptr=a.a.data, strides=a.strides), a.writeable)

    # ---------------------------------------------------------------- execution
    def launch(self, kern, n, arrays, meta):
        """Launch an elementwise kernel over ``n`` threads: ``kern(*arrays, meta)`` (``meta``: the
        struct view of the int64 metadata, ``render.meta_struct``, passed by value)."""
        if n <= 0:
            return
        from .render import BLOCK, MAX_BLOCKS
        blocks = min((n + BLOCK - 1) // BLOCK, MAX_BLOCKS)
        with self._on:
            kern((blocks,), (BLOCK,), (*arrays, meta))
        self.launches += 1

    def synchronize(self):
        self.stream.synchronize()

    def prepare_elementwise(self, op, args, ins, meta):
        """A cached launch closure for eager elementwise ops (``render.prepare``)."""
        from .render import prepare
        return prepare(self, op, args, ins, meta)

    # fused groups from the JIT (jit/fusion.py decides, this backend renders)
    def compile_group(self, group):
        from .render import compile_group
        try:
            return compile_group(self, group)
        except NotImplementedError as e:
            return MemberByMember(group, str(e)), f"// {group.name}: run member by member ({e})"

    def launch_group(self, kernel, outs, ins):
        if isinstance(kernel, MemberByMember):
            kernel(self, outs, ins)
            return
        from .render import launch_group
        launch_group(self, kernel, outs, ins)

    def precompile(self, ops_dtypes) -> int:
        """Build the elementwise kernels of ``[(op name, [input DTypes], output DType)]`` as one module."""
        from ...ops.registry import OPS
        from .render import ew_source
        todo, keys = [], []
        for name, ins, out in ops_dtypes:
            key = (name, tuple(ins), out)
            if key in self._ew_kernels:
                continue
            ks = ew_source(OPS[name], list(ins), out)
            if ks is not None:
                todo.append(ks)
                keys.append((key, ks[0]))
        n = self.modules.precompile(todo)
        for key, kname in keys:
            self._ew_kernels[key] = self.modules.kernels[kname]
        return n
