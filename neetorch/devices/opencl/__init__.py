"""The OpenCL backend: ``cl.Buffer`` storage, generated OpenCL C kernels.

Registered under the ``neetorch.devices`` entry-point group as ``opencl``
(``opencl = "neetorch.devices.opencl:OpenCLBackend"``); ``nee.device("opencl:N")``
is the N-th usable device of all OpenCL platforms, in platform order.  Usable: the device
builds a one-line program (checked once per process).  A device whose compiler cannot is left
out and ``nee.devices()`` says why; e.g. PoCL 3.0 (``pocl-binary-distribution``, LLVM 14) on
CPUs its LLVM does not know (AMD Zen 5): "unknown target CPU 'generic'" for every program.
Intel's CPU runtime (``intel-opencl-rt``, in the ``opencl`` extra on x86-64 Linux) is made visible to
pyopencl's ICD loader by :mod:`.drivers` and gives a device there.

* storage: :class:`CLArray` (a ``cl.Buffer`` shared by views + shape, element
  strides, element offset, numpy dtype); bool is stored as ``uchar`` 0/1; float64 on devices with
  ``cl_khr_fp64``, float16 (``half``) on devices with ``cl_khr_fp16``: computed in float, each op's
  result rounded once (torch's CPU semantics), through the same C table as CUDA's float16;
* elementwise ops and JIT-fused groups: rendered from the C expression table in
  :mod:`.exprs` by :mod:`.render` (one kernel per op/group and dtypes, every layout);
* a few other kernels (:mod:`.special`): sum/mean/prod/amax/amin/any/all/nansum/count_nonzero
  over any dims, softmax/log_softmax over any dim, matmul;
* convolution, pooling, resampling, data movement (cat/pad/flip/roll/repeat/tril/triu/diag_embed),
  indexing and scatter, scans, arg reductions, sort/topk, row norms, nonzero/masked_*: :mod:`.nn`,
  running the CUDA backend's kernel sources printed as OpenCL C (:mod:`..ckernels`);
* everything else falls back to the CPU through the dispatcher, visibly.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np

from ...tensor import dtypes as _dt
from ..base import Backend
from ..common import MemberByMember

__all__ = ["CLArray", "OpenCLBackend"]

_BASE_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float32")


def _cl():
    from .drivers import register
    register()       # pip-installed drivers (Intel's CPU runtime) join the ICD loader's list first
    import pyopencl as cl
    return cl


def _all_devices():
    cl = _cl()
    out = []
    for p in cl.get_platforms():
        try:
            out.extend(p.get_devices())
        except cl.Error:  # a platform without devices raises CL_DEVICE_NOT_FOUND
            pass
    return out


_PROBE_SRC = "__kernel void nee_probe(__global float *x) { x[get_global_id(0)] += 1.0f; }"
_usable: list = [None]       # once per process: ([(device, context)], [why each other device is left out])
_usable_lock = threading.Lock()


def _build_error(e) -> str:
    """The compiler's first error line of a failed build (the whole message when it has none)."""
    text = str(e)
    for line in text.splitlines():
        if line.strip().startswith("error:"):
            return line.strip()
    return " ".join(text.split())[:300]


def _usable_devices():
    """The devices that build a one-line program here, each with the context it was built in, and
    the reasons for the devices left out.  Probed once per process (PoCL caches the build on disk)."""
    with _usable_lock:
        if _usable[0] is not None:
            return _usable[0]
        import warnings
        cl = _cl()
        ok, bad = [], []
        for d in _all_devices():
            what = f"{d.name.strip()} ({d.platform.name.strip()}, {d.version.strip()})"
            try:
                ctx = cl.Context([d])
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")    # (build-log warnings)
                    cl.Program(ctx, _PROBE_SRC).build()
            except Exception as e:  # noqa: BLE001 - any failure to build means the device cannot run kernels
                why = _build_error(e)
                if "unknown target CPU" in why:
                    why += " (the OpenCL compiler's LLVM does not know this CPU model)"
                bad.append(f"{what} cannot build OpenCL programs: {why}")
            else:
                ok.append((d, ctx))
        _usable[0] = (ok, bad)
        return _usable[0]


# ---------------------------------------------------------------- storage
class _Storage:
    """One ``cl.Buffer``; every view of it holds this object."""
    __slots__ = ("__weakref__", "buffer", "nbytes")

    def __init__(self, buffer, nbytes):
        self.buffer = buffer
        self.nbytes = nbytes


class _Flags:
    __slots__ = ("c_contiguous", "writeable")

    def __init__(self, c, w=True):
        self.c_contiguous = c
        self.writeable = w


class CLArray:
    """A strided view over an OpenCL buffer: what an opencl Tensor's ``_data`` is.

    ``estrides`` and ``offset`` are in elements; ``strides`` is in bytes like numpy's.
    """
    __slots__ = ("__weakref__", "dtype", "estrides", "offset", "shape", "storage", "writeable")

    def __init__(self, storage, shape, estrides, offset, dtype, writeable=True):
        self.storage = storage
        self.shape = tuple(int(s) for s in shape)
        self.estrides = tuple(int(s) for s in estrides)
        self.offset = int(offset)
        self.dtype = np.dtype(dtype)
        self.writeable = writeable      # False: a cached scalar (ops/elementwise._scalar_tensor); views inherit

    @property
    def buffer(self):
        return self.storage.buffer

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def strides(self):
        isz = self.dtype.itemsize
        return tuple(s * isz for s in self.estrides)

    @property
    def is_contiguous(self):
        expected = 1
        for n, s in zip(reversed(self.shape), reversed(self.estrides)):
            if n == 0:
                return True
            if n != 1 and s != expected:
                return False
            expected *= n
        return True

    @property
    def flags(self):
        # read by neetorch.ops.elementwise.apply for its dispatch-plan key (see DEVICE_PLUGINS.md)
        return _Flags(self.is_contiguous, self.writeable)

    def check_writeable(self, what):
        if not self.writeable:
            raise ValueError(f"{what}: assignment destination is read-only (a cached scalar tensor)")

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self):
        return (f"CLArray(shape={self.shape}, dtype={self.dtype.name}, strides={self.estrides}, "
                f"offset={self.offset})")


def _contig(shape):
    st, c = [], 1
    for s in reversed(shape):
        st.append(c)
        c *= max(s, 1)
    return tuple(reversed(st))


# ---------------------------------------------------------------- the backend
class OpenCLBackend(Backend):
    type = "opencl"
    LOCAL_SIZE = 256

    @classmethod
    def probe(cls):
        try:
            import pyopencl  # noqa: F401
        except Exception as e:
            return 0, (f"pyopencl is not installed ({type(e).__name__}: {e}); pip install 'neetorch[opencl]' "
                       "(pyopencl with PoCL, and Intel's CPU runtime on x86-64 Linux)")
        try:
            devs = _all_devices()
        except Exception as e:
            return 0, f"no OpenCL platform ({type(e).__name__}: {e})"
        if not devs:
            return 0, "no OpenCL device on any platform"
        ok, bad = _usable_devices()
        if not ok:
            return 0, "; ".join(bad)
        return len(ok), None

    def __init__(self, index: int = 0):
        super().__init__(index)
        cl = _cl()
        self.cl = cl
        self.cl_device, self.ctx = _usable_devices()[0][index]
        d = self.cl_device
        self.queue = cl.CommandQueue(self.ctx)     # in-order
        ext = d.extensions.split()
        self.fp64 = "cl_khr_fp64" in ext
        self.fp16 = "cl_khr_fp16" in ext
        # float16: ``half`` storage under cl_khr_fp16, loaded into float, stored rounded (devices/cexpr.py)
        names = list(_BASE_DTYPES) + (["float64"] if self.fp64 else []) + (["float16"] if self.fp16 else [])
        self.dtypes = frozenset(names)
        self.name = f"{d.platform.name.strip()} / {d.name.strip()} ({d.driver_version.strip()})"
        from .exprs import preamble
        from .programs import ProgramCache
        self.programs = ProgramCache(self.ctx, d, preamble(self.fp64, self.fp16))
        self._ew_kernels: dict = {}
        self._variants: dict = {}              # (kernel, innermost-stride code) -> kernel (render._variant)
        self._wg: dict = {}
        self._last_args: dict = {}
        self._lock = threading.RLock()   # (re-entrant: a storage finalizer (_release) can run from a GC inside a locked section)
        self.allocated = 0
        self.peak = 0
        self.reserved = 0                      # bytes of cached free buffers
        self._pool: dict = {}                  # size class -> [cl.Buffer]
        self.pool_limit = min(1 << 31, d.global_mem_size // 4)
        self.num_allocs = 0
        self.launches = 0
        from . import kernels as _k
        self.kernels = _k.build_table(self)

    # ---------------------------------------------------------------- allocator
    def _check_dtype(self, npdt, what):
        name = _dt.from_numpy_dtype(np.dtype(npdt)).name
        if name not in self.dtypes:
            why = "cl_khr_fp64" if name == "float64" else ("cl_khr_fp16" if name == "float16" else "support")
            raise TypeError(f"{what}: {self.type}:{self.index} ({self.cl_device.name.strip()}) has no {name} "
                            f"storage (device lacks {why})")

    @staticmethod
    def _size_class(nbytes):
        # buffers are reused by size class: 256 B steps up to 1 MiB, then 64 KiB steps
        step = 256 if nbytes <= (1 << 20) else (1 << 16)
        return max(step, (nbytes + step - 1) // step * step)

    def _alloc(self, nbytes):
        """A storage of ``nbytes``, reusing a cached buffer of the same size class when there is one
        (a fresh cl.Buffer costs an allocation and, on CPU devices, page faults on first touch).
        Reuse is safe: the queue is in-order, so work still queued on an old buffer runs first."""
        cls = self._size_class(nbytes)
        with self._lock:
            free = self._pool.get(cls)
            buf = free.pop() if free else None
            if buf is not None:
                self.reserved -= cls
            self.allocated += nbytes
            self.num_allocs += 1
            self.peak = max(self.peak, self.allocated)
        if buf is None:
            cl = self.cl
            try:
                buf = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, size=cls)
            except cl.Error:
                self.empty_cache()
                buf = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, size=cls)
        st = _Storage(buf, nbytes)
        weakref.finalize(st, self._release, nbytes, cls, buf)
        return st

    def _release(self, nbytes, cls, buf):
        with self._lock:
            self.allocated -= nbytes
            if self.reserved + cls <= self.pool_limit:
                self._pool.setdefault(cls, []).append(buf)
                self.reserved += cls
                return
        buf.release()

    def empty_cache(self):
        """Release the cached (unused) buffers."""
        with self._lock:
            pool, self._pool, self.reserved = self._pool, {}, 0
        for bufs in pool.values():
            for b in bufs:
                b.release()

    def empty(self, shape, dtype):
        npdt = dtype.np if isinstance(dtype, _dt.DType) else np.dtype(dtype)
        self._check_dtype(npdt, "empty")
        shape = tuple(int(s) for s in shape)
        n = 1
        for s in shape:
            n *= s
        return CLArray(self._alloc(n * npdt.itemsize), shape, _contig(shape), 0, npdt)

    def from_host(self, array):
        a = np.asarray(array, order="C")  # keeps 0-d (ascontiguousarray makes it 1-d)
        self._check_dtype(a.dtype, "to(opencl)")
        out = CLArray(self._alloc(a.nbytes), a.shape, _contig(a.shape), 0, a.dtype)
        if a.nbytes:
            self.cl.enqueue_copy(self.queue, out.storage.buffer, a, is_blocking=True)
        return out

    def to_host(self, a):
        if a.size == 0:
            return np.empty(a.shape, a.dtype)
        lo = hi = 0
        for n, s in zip(a.shape, a.estrides):
            if s < 0:
                lo += (n - 1) * s
            else:
                hi += (n - 1) * s
        host = np.empty(hi - lo + 1, a.dtype)
        self.cl.enqueue_copy(self.queue, host, a.storage.buffer, src_offset=(a.offset + lo) * a.itemsize,
                             is_blocking=True)
        if a.is_contiguous:
            return host.reshape(a.shape)
        isz = a.itemsize
        v = np.lib.stride_tricks.as_strided(host[-lo:], a.shape, [s * isz for s in a.estrides])
        return np.array(v, copy=True, order="C")

    def copy_(self, dst, src):
        """``dst`` = ``src`` (same shape, or ``src`` broadcast through 0 strides; any layouts, any dtypes)."""
        if dst.size == 0:
            return
        dst.check_writeable("copy_")
        if (dst.dtype == src.dtype and dst.shape == src.shape and dst.is_contiguous and src.is_contiguous
                and dst.storage is not src.storage):
            isz = dst.itemsize
            self.cl.enqueue_copy(self.queue, dst.storage.buffer, src.storage.buffer, byte_count=dst.nbytes,
                                 src_offset=src.offset * isz, dst_offset=dst.offset * isz)
            return
        from ...ops.registry import OPS
        from .render import launch
        launch(self, OPS["cast"], dst, [src])

    def fill_(self, dst, value):
        if dst.size == 0:
            return
        dst.check_writeable("fill_")
        with np.errstate(over="ignore", invalid="ignore"):
            try:
                v = np.array(value, dtype=dst.dtype)
            except OverflowError:
                v = np.array(value).astype(dst.dtype)
        if dst.is_contiguous:
            isz = dst.itemsize
            self.cl.enqueue_fill_buffer(self.queue, dst.storage.buffer, v.reshape(1), dst.offset * isz, dst.nbytes)
            return
        self.copy_(dst, self.from_host(v.reshape(())))

    def free(self, array):
        """Storage is reference counted: the buffer goes back to the cache when its last view does
        (``empty_cache()`` releases the cache)."""

    def memory_stats(self):
        return {"allocated_bytes": self.allocated, "peak_bytes": self.peak, "num_allocs": self.num_allocs,
                "reserved_bytes": self.reserved,
                "device": self.name, "kernels_built": self.programs.stats["kernels"],
                "programs_built": self.programs.stats["programs_built"], "launches": self.launches}

    def reset_peak_memory_stats(self):
        self.peak = self.allocated

    def data_ptr(self, a):
        return int(a.storage.buffer.int_ptr) + a.offset * a.itemsize

    def storage_offset(self, a):
        return a.offset

    # ---------------------------------------------------------------- layout
    def as_strided(self, a, shape, strides, offset=0):
        return CLArray(a.storage, shape, strides, a.offset + offset, a.dtype, a.writeable)

    def view_dtype(self, a, dtype):
        """``a``'s storage reinterpreted as ``dtype`` (same itemsize): ``Tensor.view(dtype)``."""
        return CLArray(a.storage, a.shape, a.estrides, a.offset, dtype, a.writeable)

    # ---------------------------------------------------------------- capability
    def storage_reason(self, name):
        ext = {"float64": " (device lacks cl_khr_fp64)", "float16": " (device lacks cl_khr_fp16)"}
        return f"opencl has no {name} support{ext.get(name, '')}"

    # ---------------------------------------------------------------- execution
    def local_size(self, kern) -> int:
        L = self._wg.get(kern)
        if L is None:
            cl = self.cl
            L = min(self.LOCAL_SIZE, kern.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE,
                                                                self.cl_device))
            L = 1 << (max(L, 1).bit_length() - 1)
            self._wg[kern] = L
        return L

    def _set_args(self, kern, bufs, meta):
        """clSetKernelArg only for the arguments that changed since this kernel's last launch
        (set_arg costs ~10 us each through pyopencl; loops relaunch with the same buffers)."""
        last = self._last_args.get(kern)
        mb = meta.tobytes()
        if last is None or len(last) != len(bufs) + 1:
            last = [None] * (len(bufs) + 1)
            self._last_args[kern] = last
        for i, b in enumerate(bufs):
            if last[i] is not b:
                kern.set_arg(i, b)
                last[i] = b
        if last[-1] != mb:
            kern.set_arg(len(bufs), meta)
            last[-1] = mb

    def enqueue_exact(self, kern, n, bufs, meta, local=None):
        """Launch an elementwise kernel (no bounds check inside) so that ids cover [0, n) exactly once or
        more: whole work-groups, then one group over the last L ids; n < L: one group (ids wrap).
        ``local``: the work-group size L (default: the kernel's)."""
        if n <= 0:
            return
        L = self.local_size(kern) if local is None else local
        cl = self.cl
        with self._lock:
            self._set_args(kern, bufs, meta)
            G = n // L * L
            if G:
                cl.enqueue_nd_range_kernel(self.queue, kern, (G,), (L,))
            if G != n:
                cl.enqueue_nd_range_kernel(self.queue, kern, (L,), (L,), (max(n - L, 0),) if G else None)
            self.launches += 1

    def enqueue_nd(self, kern, gsize, L3, bufs, meta):
        """Launch an elementwise kernel in n-d mode over the 3-D range ``gsize`` (no bounds check inside):
        work-groups of (L3, 1, 1); dim 0 by whole groups, then one group over its last L3 ids."""
        n3, n2, n1 = gsize
        cl = self.cl
        G = n3 // L3 * L3
        with self._lock:
            self._set_args(kern, bufs, meta)
            cl.enqueue_nd_range_kernel(self.queue, kern, (G, n2, n1), (L3, 1, 1))
            if G != n3:
                cl.enqueue_nd_range_kernel(self.queue, kern, (L3, n2, n1), (L3, 1, 1), (n3 - L3, 0, 0))
            self.launches += 1

    def enqueue(self, kern, n, bufs, meta, local=None):
        """Launch ``kern(*bufs, meta)`` over ``n`` work-items (rounded up to the work-group size,
        ``local`` or the kernel's; 32 for at most 32 work-items: a group of 256 mostly idle work-items
        costs PoCL several times the round trip of a small one)."""
        if n <= 0:
            return
        L = self.local_size(kern) if local is None else min(local, self.local_size(kern))
        if n <= 32:
            L = min(L, 32)
        G = (n + L - 1) // L * L
        with self._lock:
            self._set_args(kern, bufs, meta)
            self.cl.enqueue_nd_range_kernel(self.queue, kern, (G,), (L,))
            self.launches += 1

    def synchronize(self):
        self.queue.finish()

    # fused groups from the JIT (jit/fusion.py decides, this backend renders)
    def compile_group(self, group):
        from .render import compile_group
        try:
            return compile_group(self, group)
        except NotImplementedError as e:
            return MemberByMember(group, str(e)), f"// {group.name}: run member by member ({e})"

    def prepare_elementwise(self, op, args, ins, meta):
        """A cached launch closure for eager elementwise ops (see ``render.prepare``)."""
        from .render import prepare
        return prepare(self, op, args, ins, meta)

    def launch_group(self, kernel, outs, ins):
        if isinstance(kernel, MemberByMember):
            kernel(self, outs, ins)
            return
        from .render import launch_group
        launch_group(self, kernel, outs, ins)

    def precompile(self, ops_dtypes) -> int:
        """Build the elementwise kernels of ``[(op name, [input DTypes], output DType)]`` as one
        program (warming a set of kernels together is much cheaper than one by one)."""
        from ...ops.registry import OPS
        from .render import ew_source
        todo = []
        keys = []
        for name, ins, out in ops_dtypes:
            op = OPS[name]
            key = (name, tuple(ins), out)
            if key in self._ew_kernels:
                continue
            ks = ew_source(op, list(ins), out)
            if ks is not None:
                todo.append(ks)
                keys.append((key, ks[0]))
        n = self.programs.precompile(todo)
        for key, kname in keys:
            self._ew_kernels[key] = self.programs.kernels[kname]
        return n
