"""Tensor creation: ``tensor``, ``zeros``, ``arange``, random tensors, interop."""
from __future__ import annotations

import ctypes
import numbers
from math import prod as _prod
import threading

import numpy as np

from .. import _env
from . import dtypes as _dt
from .dtypes import DType
from ._sampler import sampler
from .tensor import Tensor

__all__ = ["tensor", "as_tensor", "asarray", "from_numpy", "from_dlpack", "zeros", "ones", "full", "empty",
           "zeros_like", "ones_like", "full_like", "empty_like", "arange", "linspace", "logspace", "eye",
           "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "manual_seed",
           "seed", "initial_seed", "Generator", "scalar_tensor"]

_default_dev = [None]
_thread_dev = threading.local()   # a per-thread override (``default_device_scope``)


def _default_device():
    d = getattr(_thread_dev, "dev", None)
    if d is not None:
        return d
    d = _default_dev[0]
    if d is None:
        from ..devices import device
        d = _default_dev[0] = device(_env.DEFAULT_DEVICE)
    return d


class default_device_scope:
    """``with default_device_scope(dev):`` new tensors made in *this thread* default to ``dev``
    (ONNX lowering uses it so an op's constants land on the session's device); other
    threads and the process-wide default are untouched."""

    def __init__(self, dev):
        from ..devices import device
        self.dev = device(dev)

    def __enter__(self):
        self.prev = getattr(_thread_dev, "dev", None)
        _thread_dev.dev = self.dev
        return self.dev

    def __exit__(self, *exc):
        _thread_dev.dev = self.prev
        return False


def set_default_device(dev) -> None:
    from ..devices import device
    _default_dev[0] = device(dev) if dev is not None else None


def get_default_device():
    return _default_device()


def _resolve_device(dev):
    if dev is None:
        return _default_device()
    from ..devices import device
    return device(dev)


def _kw_size(args, size, name):
    """The sizes of a factory given positionally (``zeros(2, 3)``, ``zeros((2, 3))``) or as ``size=`` (torch's keyword)."""
    if size is None:
        return args
    if args:
        raise TypeError(f"{name}() got multiple values for argument 'size'")
    return (size,) if isinstance(size, int) else (tuple(size),)


def _need_size(size, name):
    """torch's size-taking factories refuse a call without any size (``zeros()``; ``zeros(())`` is 0-d)."""
    if not size:
        raise TypeError(f'{name}() missing 1 required positional arguments: "size"')


def _size(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    out = []
    for s in size:
        if isinstance(s, Tensor):
            s = int(s)
        if not isinstance(s, (int, np.integer)):
            raise TypeError(f"size must be a sequence of ints, got {type(s).__name__} in {tuple(size)}")
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(size)}")
        out.append(int(s))
    return tuple(out)


def _wrap_host(a: np.ndarray, dt: DType, dev) -> Tensor:
    """Wrap a host array (already of ``dt``) as a tensor on ``dev``."""
    if dev.type == "cpu":
        return Tensor._make(a, dev, dt)
    if dt.category == 3:
        _refuse_complex(dt, dev, "tensor()")
    from ..devices import get_backend
    return Tensor._make(get_backend(dev).from_host(np.asarray(a, order="C")), dev, dt)


def _infer_np(data, dtype) -> np.ndarray:
    """numpy array for ``data`` (Python scalars/lists, numpy, tensors), with PyTorch's dtype inference."""
    if isinstance(data, Tensor):
        a = data._host()
        return a if dtype is None else _dt.astype_low(a, dtype.np)
    if isinstance(data, np.ndarray):
        if not data.dtype.isnative:
            data = data.astype(data.dtype.newbyteorder("="))
        if dtype is None:
            _dt.from_numpy_dtype(data.dtype)  # refuse unsupported dtypes clearly
            return data
        return _dt.astype_low(data, dtype.np)
    if dtype is None and isinstance(data, (list, tuple)):
        dt = _list_of_scalar_tensors_dtype(data)
        if dt is not None:                 # (each one-element tensor is a scalar: [tensor([1.])] is 1-D)
            def items(d):
                return d.item() if isinstance(d, Tensor) else [items(e) for e in d] \
                    if isinstance(d, (list, tuple)) else d
            return _infer_np(items(data), dt)
    if isinstance(data, (np.generic,)) and dtype is None:
        return np.asarray(data)
    if hasattr(data, "__dlpack__") and not isinstance(data, np.ndarray) and "bfloat16" in str(getattr(data, "dtype", "")):
        a = from_dlpack(data).numpy()        # (a torch bfloat16 tensor has no numpy form: read it through DLPack)
        return a if dtype is None else _dt.astype_low(a, dtype.np)
    try:
        a = np.asarray(data)
    except ValueError as e:
        raise ValueError(f"tensor(): could not build a tensor from the data: {e}") from None
    if a.dtype == object or (a.dtype.kind == "f" and a.size and not isinstance(data, np.generic)
                             and max(-float(a.min()), float(a.max())) >= 2.0 ** 63):
        big = _big_python_int(data)   # numpy keeps ints past int64 as objects (or mixes them into float64)
        if big is not None:
            raise ValueError(f"tensor(): Overflow when unpacking long long (value {big} does not fit in int64)")
    if a.dtype == object:
        raise TypeError(f"tensor(): could not infer dtype of {type(data).__name__} (ragged nested sequence or unsupported element type)")
    if a.dtype.kind == "u" and not isinstance(data, np.generic) and not _contains_np_int(data):
        raise ValueError(f"tensor(): Overflow when unpacking long long (value {int(a.max())} does not fit in int64)")
    if dtype is not None and dtype.category == 1 and a.size and a.dtype.kind in "iuf" and not _contains_np_int(data) \
            and not _contains_np_float(data):
        for v in (a.min(), a.max()):   # torch refuses Python values that overflow an explicit dtype
            _dt.check_scalar(v.item(), dtype, "tensor()")
    if dtype is None:
        if a.dtype.kind == "f":
            hasnp = _contains_np_float(data)
            dtype = _dt.from_numpy_dtype(a.dtype) if hasnp else _dt.get_default_dtype()
        elif a.dtype.kind in "iu":
            dtype = _dt.int64 if not _contains_np_int(data) else _dt.from_numpy_dtype(a.dtype)
        elif a.dtype.kind == "b":
            dtype = _dt.bool_
        elif a.dtype.kind == "c":
            # Python complex values take the default complex dtype (torch.tensor([1j]) is complex64);
            # numpy complex values keep their own
            dtype = _dt.from_numpy_dtype(a.dtype) if _contains_np_complex(data) else _dt.default_complex_dtype()
        else:
            raise TypeError(f"tensor(): unsupported element type {a.dtype}")
    return _dt.astype_low(a, dtype.np)   # (1e100 -> float32 inf, like torch)


def _big_python_int(d):
    """The first Python int in nested lists / tuples ``d`` outside int64 (torch.tensor refuses it), or None."""
    if isinstance(d, (list, tuple)):
        for e in d:
            v = _big_python_int(e)
            if v is not None:
                return v
        return None
    if isinstance(d, int) and not isinstance(d, bool) and not -2 ** 63 <= d < 2 ** 63:
        return d
    return None


def _list_of_scalar_tensors_dtype(data):
    """torch.tensor([t0, t1, 2.5]) with one-element tensors inside: every element is a scalar of its own dtype
    (a tensor's, int64 / the default float / bool / complex for Python values) and the result is their
    promotion (``[tensor(1.5), tensor(2)]`` is float32, not numpy's float64); numpy scalars and arrays inside count
    with their dtypes the same way.  None when no tensor or numpy value is inside or a tensor holds several
    elements (then numpy's stacking applies)."""
    leaves, found = [], [False]

    def walk(d):
        if isinstance(d, Tensor):
            if d.numel() != 1:
                return False
            found[0] = True
            leaves.append(d._dtype)
        elif isinstance(d, (list, tuple)):
            return all(walk(e) is not False for e in d)
        elif isinstance(d, (bool, np.bool_)):
            leaves.append(_dt.bool_)
        elif isinstance(d, (np.generic, np.ndarray)):
            # numpy values keep their dtype in torch's inference too: [np.float16(1), 2] is float16 (the
            # promotion of float16 and int64), [np.float32(1), 2.5] float32 -- not numpy's float64
            found[0] = True
            leaves.append(_dt.from_numpy_dtype(d.dtype))
        elif isinstance(d, numbers.Integral):
            leaves.append(_dt.int64)
        elif isinstance(d, numbers.Real):
            leaves.append(_dt.get_default_dtype())
        elif isinstance(d, numbers.Complex):
            leaves.append(_dt.default_complex_dtype())
        else:
            return False
        return True
    if not walk(data) or not found[0]:
        return None
    out = leaves[0]
    for d in leaves[1:]:
        out = _dt.promote_types(out, d)
    return out


def _contains_np_float(data) -> bool:
    # Tensors/numpy values inside a list keep their dtype (torch.tensor([t1, t2]))
    if isinstance(data, (Tensor, np.ndarray, np.floating)):
        return True
    if isinstance(data, (list, tuple)) and data:
        return _contains_np_float(data[0])
    return False


def _contains_np_complex(data) -> bool:
    if isinstance(data, (Tensor, np.ndarray, np.complexfloating)):
        return True
    if isinstance(data, (list, tuple)) and data:
        return _contains_np_complex(data[0])
    return False


def _contains_np_int(data) -> bool:
    if isinstance(data, (Tensor, np.ndarray, np.integer)):
        return True
    if isinstance(data, (list, tuple)) and data:
        return _contains_np_int(data[0])
    return False


def tensor(data, dtype=None, device=None, requires_grad: bool = False, pin_memory: bool = False) -> Tensor:
    """Copy ``data`` into a new tensor (``torch.tensor``)."""
    dt = None if dtype is None else _dt.to_dtype(dtype)
    a = _infer_np(data, dt)
    dev = _resolve_device(device if device is not None else (data._device if isinstance(data, Tensor) else None))
    dt = _dt.from_numpy_dtype(a.dtype)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    t = _wrap_host(np.array(a, copy=True, order="C"), dt, dev)
    if requires_grad:
        t.requires_grad_(True)
    return t


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """Share memory with ``data`` when it is already a tensor or numpy array of the same dtype/device."""
    dt = None if dtype is None else _dt.to_dtype(dtype)
    if isinstance(data, Tensor):
        return data.to(device=device, dtype=dt) if (device is not None or dt is not None) else data
    if isinstance(data, np.ndarray) and (dt is None or data.dtype == dt.np):
        t = from_numpy(data)
        return t if device is None else t.to(device)
    a = _infer_np(data, dt)
    return _wrap_host(np.asarray(a, order="C"), _dt.from_numpy_dtype(a.dtype), _resolve_device(device))


def asarray(obj, dtype=None, device=None, copy=None) -> Tensor:
    if copy:
        return tensor(obj, dtype=dtype, device=device)
    return as_tensor(obj, dtype=dtype, device=device)


def from_numpy(a: np.ndarray) -> Tensor:
    """Zero-copy: the tensor and the array share memory (``torch.from_numpy``)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray (got {type(a).__name__})")
    dt = _dt.from_numpy_dtype(a.dtype if a.dtype.isnative else a.dtype.newbyteorder("="))
    if not a.dtype.isnative:
        raise ValueError("from_numpy: given numpy array has byte order different from the native byte order; "
                         "convert it first with a.astype(a.dtype.newbyteorder('='))")
    if any(s % a.itemsize for s in a.strides):
        raise ValueError(f"from_numpy: strides {a.strides} are not a multiple of the element size {a.itemsize}")
    from ..devices import device
    from . import _storage
    _storage.mark_exported(a)   # the caller's array writes where neetorch does not see (tensor/_storage.py)
    return Tensor._make(a, device("cpu"), dt)


def from_dlpack(ext) -> Tensor:
    """Zero-copy import of any object exporting ``__dlpack__`` (numpy, torch, CuPy...)."""
    if isinstance(ext, Tensor):
        return ext
    if type(ext).__name__ == "PyCapsule":      # a bare capsule (torch.to_dlpack's), CPU memory
        return _from_dlpack_capsule(ext)
    dev_type, _ = ext.__dlpack_device__() if hasattr(ext, "__dlpack_device__") else (1, 0)
    if dev_type != 1:  # kDLCPU
        from ..devices import get_backend, device
        if dev_type == 2:
            b = get_backend(device("cuda"))
            arr = b.from_dlpack(ext)
            return Tensor._make(arr, device("cuda"), _dt.from_numpy_dtype(np.dtype(arr.dtype)))
        raise RuntimeError(f"from_dlpack: unsupported DLPack device type {dev_type}")
    try:
        return from_numpy(np.from_dlpack(ext))
    except (RuntimeError, BufferError, TypeError) as e:
        if "dtype" not in str(e).lower():
            raise
        return _from_dlpack_capsule(ext)          # (numpy has no bfloat16: read the DLTensor ourselves)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor)))]


class _DLOwner:
    """Keeps a consumed DLPack capsule's producer memory alive; calls its deleter when the arrays are gone."""

    def __init__(self, ptr):
        self._ptr = ptr

    def __del__(self):
        m = self._ptr.contents
        if m.deleter:
            m.deleter(self._ptr)


# DLPack type codes (kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLComplex, kDLBool) -> numpy kind
_DL_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}


def _from_dlpack_capsule(ext) -> Tensor:
    """Zero-copy import of a CPU DLPack capsule read directly (``ext``'s ``__dlpack__()``, or a bare capsule):
    for the dtypes numpy's own importer lacks (bfloat16: DLPack code 4, 16 bits) and for capsules."""
    api = ctypes.pythonapi
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
    cap = ext if type(ext).__name__ == "PyCapsule" else ext.__dlpack__()
    ptr = ctypes.cast(api.PyCapsule_GetPointer(cap, b"dltensor"), ctypes.POINTER(_DLManagedTensor))
    t = ptr.contents.dl_tensor
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    if (code, bits, lanes) == (4, 16, 1) and _dt.bfloat16 is not None:
        npdt = np.dtype(_dt.bfloat16.np)
    elif code in _DL_KINDS and lanes == 1 and bits % 8 == 0:
        npdt = np.dtype(f"{_DL_KINDS[code]}{bits // 8}")
    else:
        raise RuntimeError(f"from_dlpack: unsupported DLPack dtype (code {code}, {bits} bits, {lanes} lanes)")
    if t.device.device_type != 1:
        raise RuntimeError(f"from_dlpack: a capsule on DLPack device type {t.device.device_type} (CPU only here)")
    api.PyCapsule_SetName(cap, b"used_dltensor")          # consumed: the deleter is ours to call now
    owner = _DLOwner(ptr)
    item = npdt.itemsize
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] * item for i in range(t.ndim)) if t.strides else None
    if strides is None:
        n = int(np.prod(shape))
    else:                                    # (DLPack producers export non-negative strides)
        n = 1 + sum((d - 1) * s // item for d, s in zip(shape, strides)) if all(shape) else 0
    addr = (t.data or 0) + t.byte_offset
    buf = (ctypes.c_uint8 * max(n * item, 1)).from_address(addr) if addr else (ctypes.c_uint8 * 1)()
    flat = np.frombuffer(buf, np.uint8, count=n * item).view(npdt)
    a = np.lib.stride_tricks.as_strided(flat, shape, strides) if strides is not None else flat.reshape(shape)
    buf._dl_owner = owner                    # the array's base chain keeps buf, buf keeps the producer's memory
    return from_numpy(a)


def scalar_tensor(s, dtype=None, device=None) -> Tensor:
    return full((), s, dtype=dtype if dtype is not None else _dt.get_default_dtype(), device=device)


def _refuse_complex(dt, dev, op):
    raise RuntimeError(f"{op}: {dt.name} tensors live on the CPU only (ops/complex.py); {dev} has no complex "
                       f"storage: keep complex values on the CPU")


class OutOfMemoryError(MemoryError, RuntimeError):
    """An allocation the device cannot serve: torch raises RuntimeError (CPU) / ``torch.OutOfMemoryError``
    (a RuntimeError); numpy a MemoryError: both catch this one."""


def _new(shape, dtype, device, fill) -> Tensor:
    dev = _resolve_device(device)
    dt = _dt.get_default_dtype() if dtype is None else _dt.to_dtype(dtype)
    if dt.category == 3 and dev.type != "cpu":
        _refuse_complex(dt, dev, "empty/zeros/full")
    from ..devices import get_backend
    b = get_backend(dev)
    nbytes = _prod(shape) * dt.itemsize
    if nbytes >= 2 ** 63:  # (numpy's own refusal, "Maximum allowed dimension exceeded", names no op or size)
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(shape)} ({dt.name}: {nbytes} "
                           f"bytes)")
    try:
        data = b.empty(shape, dt)
    except Exception as e:  # noqa: BLE001 - numpy: MemoryError; pyopencl: LogicError (INVALID_BUFFER_SIZE)
        raise OutOfMemoryError(f"{dev}: cannot allocate a {dt.name} tensor of shape {list(shape)} ({nbytes} bytes): "
                               f"{type(e).__name__}: {e}") from None
    t = Tensor._make(data, dev, dt)
    if fill is not None:
        if dt in (_dt.float16, _dt.bfloat16) and data.size == 1 and isinstance(fill, (int, float, np.floating)) \
                and not isinstance(fill, bool) and not (isinstance(fill, int) and abs(fill) >= 2 ** 64):
            with np.errstate(over="ignore"):
                fill = float(_dt.astype_low(np.asarray(float(fill)), dt.np))
            # (torch's one-element fast path converts without the overflow check: 1e6 -> inf in float16)
        elif not isinstance(fill, (int, float)) or fill not in (0, 1):
            fill = _dt.fit_scalar(fill, dt, "full")   # torch refuses values that overflow dt
            if isinstance(fill, (complex, np.complexfloating)) and dt.category != 3:
                fill = fill.real        # (its imaginary part is 0: fit_scalar refuses any other)
        b.fill_(data, fill)
    return t


def empty(*size_args, size=None, dtype=None, device=None, requires_grad=False, memory_format=None,
          pin_memory=False) -> Tensor:
    size = _kw_size(size_args, size, "empty")
    _need_size(size, "empty")
    return _new(_size(size), dtype, device, None)


def zeros(*size_args, size=None, out=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    size = _kw_size(size_args, size, "zeros")
    _need_size(size, "zeros")
    if out is not None:
        return _into(zeros(*size, dtype=out._dtype, device=out._device), out, dtype, "zeros")
    return _new(_size(size), dtype, device, 0)


def ones(*size_args, size=None, out=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    size = _kw_size(size_args, size, "ones")
    _need_size(size, "ones")
    if out is not None:
        return _into(ones(*size, dtype=out._dtype, device=out._device), out, dtype, "ones")
    return _new(_size(size), dtype, device, 1)


def full(size, fill_value, dtype=None, device=None, requires_grad=False, *, out=None) -> Tensor:
    if out is not None:
        return _into(full(size, fill_value, dtype=out._dtype, device=out._device), out, dtype, "full")
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    if dtype is None:
        dtype = _dt.scalar_dtype(fill_value)
    return _new(_size((size,) if not isinstance(size, int) else (size,)), dtype, device, fill_value)


def _into(r: Tensor, out: Tensor, dtype, op: str) -> Tensor:
    """A factory's ``out=``: the values made in ``out``'s dtype (an explicit ``dtype`` must agree), ``out``
    resized to them (without the deprecation warning the ops give: torch's factories resize silently)."""
    if dtype is not None and _dt.to_dtype(dtype) is not out._dtype:
        raise RuntimeError(f"{op}: dtype {_dt.to_dtype(dtype).name} does not match the out= tensor's dtype "
                           f"{out._dtype.name}")
    if op == "arange":                      # (torch's arange resizes like the ops, with the warning)
        from ..ops.elementwise import resize_out
        resize_out(out, r.shape, op)
    elif tuple(out.shape) != tuple(r.shape):
        out.resize_(tuple(r.shape))        # (the other factories resize out= silently)
    return out.copy_(r)


def _no_bool_out(out, op):
    if out is not None and out._dtype is _dt.bool_:
        raise NotImplementedError(f"\"{op}_cpu\" not implemented for 'Bool' (out= of dtype bool)")


def _no_bool_dtype(dtype, op, complex_too=False):
    """torch's range kernels dispatch over the numeric dtypes only: ``dtype=bool`` (and for ``range`` a complex
    dtype) is refused before any argument check."""
    dt = None if dtype is None else _dt.to_dtype(dtype)
    if dt is _dt.bool_ or (complex_too and dt is not None and dt.category == 3):
        name = {"bool": "Bool", "complex64": "ComplexFloat", "complex128": "ComplexDouble"}[dt.name]
        raise _dt.DTypeNotImplementedError(f"\"{op}_cpu\" not implemented for '{name}'")


def _like(t, dtype, device):
    return (t._dtype if dtype is None else dtype), (t._device if device is None else device)


def _new_like(t, dt, dev, fill, memory_format=None) -> Tensor:
    """``_new`` for a ``*_like`` factory: torch's ``preserve_format`` (the default) keeps a dense permuted
    ``t``'s strides (tensor/_layout.py's like_strides) on the CPU."""
    r = _new(tuple(t.shape), dt, dev, fill)
    from .tensor import preserve_format
    return _restride_like(t, r) if memory_format is None or memory_format is preserve_format else r


def empty_like(t, dtype=None, device=None, memory_format=None) -> Tensor:
    dt, dev = _like(t, dtype, device)
    return _new_like(t, dt, dev, None, memory_format)


def zeros_like(t, dtype=None, device=None, memory_format=None) -> Tensor:
    dt, dev = _like(t, dtype, device)
    return _new_like(t, dt, dev, 0, memory_format)


def ones_like(t, dtype=None, device=None, memory_format=None) -> Tensor:
    dt, dev = _like(t, dtype, device)
    return _new_like(t, dt, dev, 1, memory_format)


def full_like(t, fill_value, dtype=None, device=None, memory_format=None) -> Tensor:
    dt, dev = _like(t, dtype, device)
    return _new_like(t, dt, dev, fill_value, memory_format)


class _ArangeStepError(ValueError, RuntimeError):
    """torch: ValueError for a float step that casts to 0 under an int64 dtype (RuntimeError for a 0 step)."""


def arange(start, end=None, step=1, *, out=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    _no_bool_out(out, "arange")
    if out is not None:
        return _into(arange(start, end, step, dtype=out._dtype, device=out._device), out, dtype, "arange")
    _no_bool_dtype(dtype, "arange")
    if end is None:
        start, end = 0, start
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    start, end, step = vals
    for v in (start, end):
        if isinstance(v, (float, np.floating)) and not np.isfinite(v):
            raise RuntimeError(f"arange: unsupported range: {start} -> {end}")
    n_float = None
    if dtype is not None and _dt.to_dtype(dtype).category == 3:
        raise NotImplementedError(f"arange: not implemented for complex dtypes (got {_dt.to_dtype(dtype).name}), "
                                  f"as in torch")
    if dtype is not None and _dt.to_dtype(dtype).category != 2:
        # torch casts start, end and step to the integer type first (arange(0, 1, 0.25, dtype=int): step 0);
        # the length is computed from the cast values for int64, from the original ones for other integer types
        if _dt.to_dtype(dtype) is not _dt.int64:
            if step != 0 and (end - start) / step >= 0:
                n_float = int(np.ceil((end - start) / step))
        else:
            start, end, step = int(start), int(end), int(step)
            if step == 0 and vals[2] != 0:   # torch: a float step that the int64 cast makes 0 is a ValueError
                raise _ArangeStepError(f"arange: step must be nonzero (step {vals[2]!r} is 0 as int64)")
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    if (end - start) / step < 0:
        raise RuntimeError(f"arange: upper bound and larger bound inconsistent with step sign "
                           f"(start={start}, end={end}, step={step})")
    if dtype is None:
        # (bools count as integers: torch.arange(True, 5) is int64)
        dtype = _dt.int64 if all(isinstance(v, (int, np.integer, np.bool_)) for v in vals) else _dt.get_default_dtype()
    dt = _dt.to_dtype(dtype)
    n = -((start - end) // step) if dt.category != 2 else int(np.ceil((end - start) / step))
    if n_float is not None:
        n = n_float
    if n * dt.itemsize >= 2 ** 63:
        raise RuntimeError(f"arange: invalid size, possible overflow? ({n} elements of {dt.name} from start={start}, "
                           f"end={end}, step={step})")
    if dt.category == 2:
        # computed in float64 like torch's CPU kernel, then rounded to dt
        a = (start + np.arange(n, dtype=np.float64) * step).astype(dt.np)
    else:
        a = (int(start) + np.arange(n, dtype=np.int64) * int(step)).astype(dt.np)
    return _wrap_host(a, dt, _resolve_device(device))


def linspace(start, end, steps, *, out=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    _no_bool_out(out, "linspace")
    if out is not None:
        return _into(linspace(start, end, steps, dtype=out._dtype, device=out._device), out, dtype, "linspace")
    steps = _steps_arg(steps, "linspace")
    if steps < 0:
        raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
    if steps > 1:
        _no_bool_dtype(dtype, "linspace")
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    cplx = any(isinstance(v, (complex, np.complexfloating)) for v in (start, end))
    dt = (_dt.default_complex_dtype() if cplx else _dt.get_default_dtype()) if dtype is None else _dt.to_dtype(dtype)
    if dt.category == 3 or cplx:
        if dt.category != 3:
            raise TypeError(f"linspace: complex bounds ({start}, {end}) need a complex dtype, got {dt.name}")
        start, end = complex(start), complex(end)
        i = np.arange(steps)
        step = (end - start) / (steps - 1) if steps > 1 else 0
        # torch's symmetric formulation: the second half counted back from the end
        a = np.where(i < steps // 2, start + step * i, end - step * (steps - 1 - i)) if steps > 1 else \
            np.full(steps, start)
        return _wrap_host(a.astype(dt.np), dt, _resolve_device(device))
    return _wrap_host(_linspace_real(start, end, steps, dt), dt, _resolve_device(device))


def _steps_arg(steps, op):
    """torch's ``steps`` is an int (a float such as 3.0 is refused by its argument parser)."""
    if isinstance(steps, Tensor) and steps.ndim == 0 and steps._dtype.category == 1:
        return int(steps.item())
    if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)):
        raise TypeError(f"{op}(): argument 'steps' must be int, not {type(steps).__name__}")
    return int(steps)


def _fma(a, b, c):
    """``a * b + c`` rounded once, float64 arrays (error-free product and sum): the contracted multiply-add the
    compilers emit for torch's CPU range kernels (float32/float64/integer ``start + step * i``)."""
    with np.errstate(over="ignore", invalid="ignore"):
        a, b, c = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64), np.asarray(c, np.float64))
        p = a * b
        sp = 134217729.0  # 2**27 + 1: Veltkamp's split into 26-bit halves
        ta, tb = sp * a, sp * b
        ah, bh = ta - (ta - a), tb - (tb - b)
        al, bl = a - ah, b - bh
        ep = ((ah * bh - p) + ah * bl + al * bh) + al * bl
        sm = p + c
        bb = sm - p
        es = (p - (sm - bb)) + (c - bb)
        r = sm + (ep + es)
        # non-finite or overflowing parts: the plain expression
        return np.where(np.isfinite(r), r, p + c)


def _linspace_real(start, end, steps, dt):
    """torch's CPU ``linspace`` values for real ``dt``, rounded as its kernel rounds them: the bounds converted to
    ``dt`` first (integers wrapped), ``step = (end - start) / (steps - 1)`` in ``dt``'s arithmetic (float64 for
    integers), the first half ``start + step * i`` and the second ``end - step * (steps - 1 - i)``, as one
    multiply-add for float32/float64/integers and as separately rounded float16/bfloat16 operations."""
    if steps == 0:
        return np.empty(0, dt.np)
    low = dt.np in _dt.LOW_NP
    s0, e0 = _range_bounds(start, end, dt, "linspace")
    if steps == 1:
        return np.asarray(s0).reshape(1).astype(dt.np)
    i = np.arange(steps)
    half = steps // 2
    first = i < half
    if low:  # c10::Half / BFloat16 arithmetic: every operation rounded to the dtype (numpy's float16/ml_dtypes)
        T = dt.np
        step = (e0 - s0) / _dt.astype_low(np.asarray(steps - 1), T)
        k = _dt.astype_low(np.where(first, i, steps - 1 - i), T)
        prod = step * k
        return np.where(first, s0 + prod, e0 - prod).astype(T)
    ct = np.float32 if dt.np == np.float32 else np.float64
    with np.errstate(over="ignore", invalid="ignore"):
        step = ct((ct(e0) - ct(s0)) / ct(steps - 1))
        a = np.where(first, _fma(step, i.astype(ct), ct(s0)), _fma(-step, (steps - 1 - i).astype(ct), ct(e0)))
        if dt.category == 2:
            return a.astype(dt.np)
        return np.trunc(a).astype(dt.np)


def logspace(start, end, steps, base=10.0, *, out=None, dtype=None, device=None) -> Tensor:
    _no_bool_out(out, "logspace")
    steps = _steps_arg(steps, "logspace")
    if out is not None:
        return _into(logspace(start, end, steps, base, dtype=out._dtype, device=out._device), out, dtype, "logspace")
    if steps > 1:
        _no_bool_dtype(dtype, "logspace")
    dt = _dt.get_default_dtype() if dtype is None else _dt.to_dtype(dtype)
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    if dt.category in (1, 2) and not any(isinstance(v, (complex, np.complexfloating)) for v in (start, end)):
        if steps < 0:
            raise RuntimeError(f"logspace: number of steps must be non-negative, got {steps}")
        return _wrap_host(_logspace_real(start, end, steps, float(base), dt), dt, _resolve_device(device))
    a = np.power(base, linspace(start, end, steps, dtype=_dt.float64).numpy())
    return _wrap_host(a.astype(dt.np), dt, _resolve_device(device))


def _range_bounds(start, end, dt, op):
    """``start`` / ``end`` as torch's range kernels hold them: checked (``c10::checked_convert``) and converted to
    ``dt`` (0-d arrays; float16/bfloat16 through float32, integers wrapped like a C cast)."""
    for v in (start, end):
        _dt.check_scalar(v, dt, op)
    if dt.category == 2:
        return tuple(_dt.astype_low(np.asarray(float(v)), dt.np) for v in (start, end))
    with np.errstate(over="ignore", invalid="ignore"):
        return tuple(np.asarray(int(v)).astype(dt.np) for v in (start, end))


def _logspace_real(start, end, steps, base, dt):
    """torch's CPU ``logspace`` for real ``dt``, as its kernel computes it: the bounds converted to ``dt``,
    ``step = double(end - start) / (steps - 1)`` (the difference in ``dt``'s arithmetic), exponents
    ``start + step * i`` / ``end - step * (steps - i - 1)`` in float64, ``pow(base, exponent)`` in float64
    converted to ``dt`` (one step: ``pow(base, start)``)."""
    if steps == 0:
        return np.empty(0, dt.np)
    s0, e0 = _range_bounds(start, end, dt, "logspace")
    T = dt.np
    diff = float(e0 - s0) if dt.category == 2 else float(int(e0) - int(s0))
    step = diff / (steps - 1) if steps > 1 else 0.0
    i = np.arange(steps)
    cnt, k = i.astype(np.float64), (steps - 1 - i).astype(np.float64)
    first = (i < steps // 2) | (steps == 1)
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.where(first, float(s0) + step * cnt, float(e0) - step * k)
        r = _libm_pow(base, x)
        if dt.category == 1:
            r = np.trunc(r)
        return _dt.astype_low(r, T)


def _libm_pow(base: float, x: np.ndarray) -> np.ndarray:
    """``base ** x`` for a float64 array as C's ``pow`` gives it (torch's CPU kernels call libm): through the CPU
    backend's pow kernel, which calls libm.  Not ``np.power``: on AVX-512 hosts numpy runs SVML's pow, which
    differs from libm's in the last bit for some inputs (seen on AMD Zen 5: 1 of 13 of a logspace)."""
    from ..ops.elementwise import pow as _pow
    return _pow(float(base), from_numpy(np.ascontiguousarray(x, np.float64))).numpy()


def eye(n, m=None, *, out=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    if out is not None:
        return _into(eye(n, m, dtype=out._dtype, device=out._device), out, dtype, "eye")
    dt = _dt.get_default_dtype() if dtype is None else _dt.to_dtype(dtype)
    if n < 0 or (m is not None and m < 0):
        raise RuntimeError(f"eye(): {'n' if n < 0 else 'm'} must be greater or equal to 0, got {n if n < 0 else m}")
    return _wrap_host(np.eye(n, n if m is None else m, dtype=dt.np), dt, _resolve_device(device))


# ------------------------------------------------------------------ random
class Generator:
    """A random number generator (numpy's PCG64 underneath)."""

    def __init__(self, device="cpu"):
        self._seed = 67280421310721
        self._rng = np.random.Generator(np.random.PCG64(self._seed))
        self.device = device

    def manual_seed(self, seed: int) -> "Generator":
        self._seed = int(seed)
        self._rng = np.random.Generator(np.random.PCG64(self._seed))
        return self

    def initial_seed(self) -> int:
        return self._seed

    def seed(self) -> int:
        import secrets
        s = secrets.randbits(63)
        self.manual_seed(s)
        return s

    def get_state(self):
        return self._rng.bit_generator.state

    def set_state(self, state):
        self._rng.bit_generator.state = state


default_generator = Generator()
_rng_lock = threading.Lock()


def manual_seed(seed: int) -> Generator:
    """Seed the default generator; ``rand``/``randn``/``randint`` become reproducible."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def _rand_impl(fn, size, dtype, device, generator):
    g = generator or default_generator
    dt = _dt.get_default_dtype() if dtype is None else _dt.to_dtype(dtype)
    if dt.category == 3:
        # torch: real and imaginary parts drawn independently; randn scales each by 1/sqrt(2) (unit variance)
        part = _dt.to_real(dt)
        re, im = (_rand_impl(fn, size, part, "cpu", generator).numpy() for _ in range(2))
        a = (re + 1j * im) * (np.sqrt(0.5) if fn == "randn" else 1.0)
        return _wrap_host(a.astype(dt.np), dt, _resolve_device(device))
    if dt.category != 2:
        raise TypeError(f"{fn}: expected a floating-point dtype, got {dt}")
    with _rng_lock:
        if fn == "rand":
            a = g._rng.random(size, dtype=np.float64 if dt is _dt.float64 else np.float32)
        else:
            a = g._rng.standard_normal(size, dtype=np.float64 if dt is _dt.float64 else np.float32)
    return _wrap_host(a.astype(dt.np, copy=False), dt, _resolve_device(device))


@sampler()
def rand(*size_args, size=None, generator=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    size = _kw_size(size_args, size, "rand")
    _need_size(size, "rand")
    return _rand_impl("rand", _size(size), dtype, device, generator)


@sampler()
def randn(*size_args, size=None, generator=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    size = _kw_size(size_args, size, "randn")
    _need_size(size, "randn")
    return _rand_impl("randn", _size(size), dtype, device, generator)


@sampler(like=0)
def rand_like(t, dtype=None, device=None, *, generator=None) -> Tensor:
    """``torch.rand_like``; ``generator=`` (not in torch) draws from that generator (ONNX RandomUniformLike's seed)."""
    dt, dev = _like(t, dtype, device)
    return _restride_like(t, rand(tuple(t.shape), dtype=dt, device=dev, generator=generator))


@sampler(like=0)
def randn_like(t, dtype=None, device=None, *, generator=None) -> Tensor:
    """``torch.randn_like``; ``generator=`` as for :func:`rand_like`."""
    dt, dev = _like(t, dtype, device)
    return _restride_like(t, randn(tuple(t.shape), dtype=dt, device=dev, generator=generator))


@sampler()
def randint(low, high=None, size=None, *, generator=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    if size is None:  # randint(high, size)
        if high is None:
            raise TypeError("randint() missing required argument 'size'")
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    if high <= low:
        raise RuntimeError(f"randint: expected low < high, got low={low}, high={high}")
    g = generator or default_generator
    dt = _dt.int64 if dtype is None else _dt.to_dtype(dtype)
    with _rng_lock:
        a = g._rng.integers(low, high, size=_size((size,) if isinstance(size, int) else tuple(size)), dtype=np.int64)
    return _wrap_host(a.astype(dt.np), dt, _resolve_device(device))


@sampler(like=0)
def randint_like(t, low, high=None, dtype=None, device=None) -> Tensor:
    dt, dev = _like(t, dtype, device)
    return _restride_like(t, randint(low, high, tuple(t.shape), dtype=dt, device=dev))


def _restride_like(t, r):
    """``r`` (a fresh row-major tensor of ``t``'s shape) laid out with torch's preserve_format strides for ``t``."""
    if r._device.type != "cpu" or t._device.type != "cpu":
        return r
    from ._layout import alloc, like_strides
    st = like_strides(t._data.shape, t.stride())
    if st is None:
        return r
    data = alloc(r._data.shape, st, r._data.dtype)
    data[...] = r._data
    return Tensor._make(data, r._device, r._dtype)


@sampler()
def randperm(n, *, generator=None, dtype=None, device=None) -> Tensor:
    g = generator or default_generator
    dt = _dt.int64 if dtype is None else _dt.to_dtype(dtype)
    with _rng_lock:
        a = g._rng.permutation(n)
    return _wrap_host(a.astype(dt.np), dt, _resolve_device(device))


# ------------------------------------------------------------------ internals
def _transfer(t: Tensor, dev) -> Tensor:
    from ..devices import get_backend
    if t._device == dev:
        return t
    from .tensor import _READ_HOOK
    if _READ_HOOK[0] is not None:
        from ..trace.tracer import refuse_transfer
        refuse_transfer(t, dev)
    if t._dtype.category == 3 and dev.type != "cpu":
        _refuse_complex(t._dtype, dev, "to()")
    host = t._host()
    if dev.type == "cpu":
        return Tensor._make(np.array(host, copy=True, order="C") if t._device.type == "cpu" else host, dev, t._dtype)
    return Tensor._make(get_backend(dev).from_host(np.asarray(host, order="C")), dev, t._dtype)


def as_tensor_like(v, like: Tensor) -> Tensor:
    """``v`` as a tensor of ``like``'s dtype and device (scalars, lists, tensors)."""
    if isinstance(v, Tensor):
        return v
    if isinstance(v, (numbers.Number, np.generic)):
        return full((), v, dtype=like._dtype, device=like._device)
    return tensor(v, dtype=like._dtype, device=like._device)


def _rebuild(arr, dev):
    return tensor(arr, device=dev)


def _accepts_layout(fn):
    """torch's factories take ``layout=`` (and ``pin_memory=``): ``torch.strided`` (the only layout neetorch
    has) or None are accepted, a sparse layout is refused by name."""
    import functools
    import inspect
    params = inspect.signature(fn).parameters

    from .tensor import strided

    @functools.wraps(fn)
    def f(*args, layout=None, **kw):
        if layout is not None and layout is not strided:
            raise RuntimeError(f"{fn.__name__}: layout {layout!r} is not supported; neetorch tensors are dense "
                               f"(layout=neetorch.strided)")
        if "pin_memory" in kw and "pin_memory" not in params:
            kw.pop("pin_memory")   # (a CPU tensor is already host memory)
        if "memory_format" in kw and "memory_format" not in params:   # (dense results)
            kw.pop("memory_format")
        rg = kw.pop("requires_grad", False) if "requires_grad" not in params else False
        if not args and "input" in kw and "input" not in params:   # torch.zeros_like(input=x)
            args = (kw.pop("input"),)
        r = fn(*args, **kw)
        if rg:   # (the flag only, like nee.tensor(..., requires_grad=True): neetorch has no autograd)
            r.requires_grad_(True)
        return r
    return f


for _n in ("empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "arange",
           "linspace", "logspace", "eye", "rand", "randn", "rand_like", "randn_like", "randint", "randint_like",
           "randperm", "scalar_tensor"):
    globals()[_n] = _accepts_layout(globals()[_n])
