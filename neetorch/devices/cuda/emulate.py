"""A CPU stand-in for the part of CuPy the CUDA backend uses, to test the backend without a GPU.

``install()`` puts a module named ``cupy`` into ``sys.modules`` whose arrays live in host
memory (numpy views over byte buffers, with CuPy's ``memptr``/``strides`` view model) and
whose ``RawModule`` compiles the generated CUDA C **as C++ with g++** (a small shim maps
``__global__``/``blockIdx``…; the float16 ``cvt`` asm becomes ``_Float16``) and runs each
launch as a loop over blocks and threads.  So the backend's host code (views, transfers,
launch metadata, dtype casts, CuPy-based reductions/softmax/matmul) and the semantics of
the kernels it renders run for real on a machine that has no GPU; what it cannot check
(NVRTC itself, the asm, real parallelism, speed) is left to ``nvcc`` and a GPU run.

Test tooling, not a device: ``nee.devices()`` never lists it.  Compiled kernels are cached
under ``$NEE_CACHE_DIR/cuda-emulate`` by source hash.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import sys
import threading
import types

import numpy as np

__all__ = ["available", "install", "uninstall"]

_SHIM = r"""
#include <cmath>
#include <cstring>
#include <cstdint>
using std::isnan; using std::isinf; using std::isfinite; using std::signbit;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
struct nee_dim3 { unsigned x, y, z; };
static nee_dim3 blockIdx, blockDim, threadIdx, gridDim;
#define __shared__ static
static inline void __syncthreads() {}
/* row kernels (rows.py) are launched with blocks of ONE thread here: they never shuffle then */
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int) { return v; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
"""
_H2F = ("static inline float nee_h2f(unsigned short h) { _Float16 v; std::memcpy(&v, &h, 2); return (float)v; }\n"
        "static inline unsigned short nee_f2h(float f) { _Float16 v = (_Float16)f; unsigned short h; "
        "std::memcpy(&h, &v, 2); return h; }\n")


def available() -> str | None:
    """None when g++ is here, else why not."""
    from shutil import which
    return None if which("g++") else "g++ is not installed"


# ---------------------------------------------------------------- memory and arrays
class Memory:
    def __init__(self, nbytes):
        self.buf = np.empty(max(int(nbytes), 1) + 64, np.uint8)
        self.ptr = (self.buf.ctypes.data + 63) // 64 * 64
        self.size = int(nbytes)
        _POOL.used += self.size
        _POOL.total += self.size

    def __del__(self):
        if _POOL is None:          # interpreter shutdown
            return
        _POOL.used -= self.size
        _POOL.total -= self.size


class MemoryPointer:
    def __init__(self, mem, offset=0):
        self.mem = mem
        self.ptr = mem.ptr + offset

    def __add__(self, off):
        return MemoryPointer(self.mem, self.ptr - self.mem.ptr + int(off))

    def copy_from_device_async(self, src, size, stream=None):
        ctypes.memmove(self.ptr, src.ptr, size)


class _Pool:
    used = 0
    total = 0

    def used_bytes(self):
        return self.used

    def total_bytes(self):
        return self.total

    def free_all_blocks(self):
        pass


_POOL = _Pool()


class _Flags:
    def __init__(self, c):
        self.c_contiguous = c


class ndarray:
    """memptr + shape + byte strides + dtype, like ``cupy.ndarray``; ``.h`` is the numpy view."""

    def __init__(self, shape, dtype, memptr=None, strides=None):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        isz = self.dtype.itemsize
        if strides is None:
            st, c = [], isz
            for s in reversed(self.shape):
                st.append(c)
                c *= max(s, 1)
            strides = tuple(reversed(st))
        self.strides = tuple(int(s) for s in strides)
        if memptr is None:
            n = isz
            for s in self.shape:
                n *= s
            memptr = MemoryPointer(Memory(n))
        self.data = memptr
        holder = types.SimpleNamespace(__array_interface__={
            "data": (memptr.ptr, False), "shape": self.shape, "strides": self.strides,
            "typestr": self.dtype.str, "version": 3})
        self.h = np.asarray(holder)
        self._keep = memptr

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self.size * self.dtype.itemsize)
    flags = property(lambda self: _Flags(self.h.flags.c_contiguous))

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.data.ptr, False), "shape": self.shape, "strides": self.strides,
                "typestr": self.dtype.str, "version": 3}

    def set(self, h, stream=None):
        self.h[...] = h

    def get(self, stream=None):
        return np.array(self.h, copy=True, order="C")

    def fill(self, v):
        self.h[...] = v

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        shape = np.broadcast_to(np.zeros((), bool), self.shape).reshape(shape).shape   # resolves -1
        if self.h.flags.c_contiguous:
            return ndarray(shape, self.dtype, self.data)
        return _new(self.h.reshape(shape))

    def astype(self, dt):
        return _new(self.h.astype(dt))

    def __sub__(self, o):
        return _new(self.h - _h(o))

    def __truediv__(self, o):
        return _new(self.h / _h(o))

    def __add__(self, o):
        return _new(self.h + _h(o))

    def __mul__(self, o):
        return _new(self.h * _h(o))

    __rmul__ = __mul__
    __radd__ = __add__

    def __matmul__(self, o):
        return _new(self.h @ _h(o))


def _h(x):
    return x.h if isinstance(x, ndarray) else x


def _new(h):
    h = np.asarray(h)
    a = ndarray(h.shape, h.dtype)
    a.h[...] = h
    return a


def _red(fn):
    def f(a, axis=None, dtype=None, keepdims=False, out=None):
        with np.errstate(all="ignore"):
            kw = {"dtype": dtype} if dtype is not None else {}
            return _new(fn(_h(a), axis=axis, keepdims=keepdims, **kw))
    return f


def _matmul(a, b, out=None):
    r = np.matmul(_h(a), _h(b))
    if out is not None:
        out.h[...] = r
        return out
    return _new(r)


# ---------------------------------------------------------------- kernels: CUDA C as C++
class CompileException(Exception):
    pass


_KERNEL_RE = re.compile(r'extern "C" __global__ void (\w+)\((.*?)\) \{')
_lock = threading.Lock()
_libs: dict = {}


def _cache_dir():
    from ... import _env
    d = os.path.join(_env.CACHE_DIR, "cuda-emulate")
    os.makedirs(d, exist_ok=True)
    return d


def _launcher(name, params):
    ps = [p.strip() for p in params.split(",")]
    args = []
    for i, p in enumerate(ps):
        typ = p.rsplit(" ", 1)[0].replace("__restrict__", "").strip()
        args.append(f"({typ})args[{i}]" if "*" in typ else f"*({typ}*)args[{i}]")
    return (f'extern "C" void launch_{name}(unsigned grid, unsigned block, void** args) {{\n'
            f"  gridDim.x = grid; blockDim.x = block;\n"
            f"  for (unsigned b = 0; b < grid; b++) for (unsigned t = 0; t < block; t++) {{\n"
            f"    blockIdx.x = b; threadIdx.x = t; {name}({', '.join(args)}); }}\n}}\n")


def _host_source(code):
    lines = []
    for ln in code.splitlines():
        if "nee_h2f(nhalf h)" in ln or "nee_f2h(float f)" in ln:
            continue
        lines.append(ln)
    src = "\n".join(lines).replace("typedef unsigned short nhalf;", "typedef unsigned short nhalf;\n" + _H2F)
    kernels = _KERNEL_RE.findall(src)
    return _SHIM + src + "\n" + "\n".join(_launcher(n, p) for n, p in kernels), [n for n, _ in kernels]


def _build(code):
    src, names = _host_source(code)
    key = hashlib.sha1(src.encode()).hexdigest()[:20]
    with _lock:
        lib = _libs.get(key)
        if lib is None:
            d = _cache_dir()
            so = os.path.join(d, f"m_{key}.so")
            if not os.path.exists(so):
                cpp = os.path.join(d, f"m_{key}.cpp")
                with open(cpp, "w") as fh:
                    fh.write(src)
                tmp = f"{so}.{os.getpid()}.tmp"
                r = subprocess.run(["g++", "-O0", "-shared", "-fPIC", "-w", "-std=c++17", cpp, "-o", tmp],
                                   capture_output=True, text=True, check=False)
                if r.returncode != 0:
                    raise CompileException(r.stderr[:4000])
                os.replace(tmp, so)
            lib = _libs[key] = ctypes.CDLL(so)
    return lib, names


class RawKernel:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, grid, block, args, **kw):
        ptrs, keep = [], []
        for a in args:
            if isinstance(a, ndarray):
                ptrs.append(a.data.ptr)
            else:
                b = np.ascontiguousarray(a)
                keep.append(b)
                ptrs.append(b.ctypes.data)
        arr = (ctypes.c_void_p * len(ptrs))(*ptrs)
        self.fn(ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]), arr)


class RawModule:
    def __init__(self, code, options=(), **kw):
        self.lib, self.names = _build(code)

    def get_function(self, name):
        if name not in self.names:
            raise CompileException(f"no kernel {name} in the module")
        return RawKernel(getattr(self.lib, f"launch_{name}"))


# ---------------------------------------------------------------- the module
class _Ctx:
    def __init__(self, *a, **k):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *e):
        return False

    def synchronize(self):
        pass

    ptr = 0


def _module():
    m = types.ModuleType("cupy")
    m.__version__ = "emulated"
    m.__neetorch_emulation__ = True
    m.ndarray = ndarray
    m.RawModule = RawModule
    m.empty = lambda shape, dtype=np.float32: ndarray(shape, dtype)
    m.asarray = lambda a: a if isinstance(a, ndarray) else _new(a)
    m.sum, m.mean, m.prod = _red(np.sum), _red(np.mean), _red(np.prod)
    m.amax, m.amin, m.any, m.all = _red(np.amax), _red(np.amin), _red(np.any), _red(np.all)
    m.exp = lambda a: _new(np.exp(_h(a)))
    m.log = lambda a: _new(np.log(_h(a)))
    m.isneginf = lambda a: _new(np.isneginf(_h(a)))
    m.where = lambda c, a, b: _new(np.where(_h(c), _h(a), _h(b)))
    m.zeros_like = lambda a: _new(np.zeros_like(_h(a)))
    m.matmul = _matmul
    m.tanh = lambda a: _new(np.tanh(_h(a)))
    m.sqrt = lambda a: _new(np.sqrt(_h(a)))
    m.cumsum = lambda a, axis=None, dtype=None: _new(np.cumsum(_h(a), axis=axis, dtype=dtype))
    m.cumprod = lambda a, axis=None, dtype=None: _new(np.cumprod(_h(a), axis=axis, dtype=dtype))
    m.argsort = lambda a, axis=-1: _new(np.argsort(_h(a), axis=axis, kind="stable").astype(np.int64))
    m.nonzero = lambda a: tuple(_new(i.astype(np.int64)) for i in np.nonzero(_h(a)))
    m.einsum = lambda eq, *ops: _new(np.einsum(eq, *[_h(o) for o in ops]))
    m.nansum = _red(np.nansum)
    m.remainder = lambda a, b: _new(np.remainder(_h(a), _h(b)))
    m.count_nonzero = lambda a, axis=None: _new(np.asarray(np.count_nonzero(_h(a), axis=axis), np.int64))
    m.float32 = np.float32
    m.empty_like = lambda a: ndarray(a.shape, a.dtype)
    m.copyto = lambda dst, src: dst.set(_h(src))
    m.random = types.SimpleNamespace(
        standard_normal=lambda n, dtype=np.float64: _new(np.random.default_rng(0).standard_normal(n).astype(dtype)))
    m.get_default_memory_pool = lambda: _POOL
    cuda = types.SimpleNamespace(
        Device=_Ctx, Stream=_Ctx, MemoryPointer=MemoryPointer,
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1, runtimeGetVersion=lambda: 0,
                                      driverGetVersion=lambda: 0,
                                      getDeviceProperties=lambda i: {"name": b"emulated by g++ on the CPU",
                                                                     "major": 9, "minor": 0}),
        compiler=types.SimpleNamespace(CompileException=CompileException))
    m.cuda = cuda
    return m


_saved: dict = {}


def install():
    """Replace ``cupy`` by the emulation (until :func:`uninstall`); resets the backend's probe."""
    from . import CUDABackend
    _saved["cupy"] = sys.modules.get("cupy")
    sys.modules["cupy"] = _module()
    CUDABackend._probed = None


def uninstall():
    from . import CUDABackend
    prev = _saved.pop("cupy", None)
    if prev is None:
        sys.modules.pop("cupy", None)
    else:
        sys.modules["cupy"] = prev
    CUDABackend._probed = None
