"""The Tensor: a typed, strided view over a device's storage.

A Tensor holds the device's own array object (``_data``: a numpy array on the CPU;
whatever the backend allocates elsewhere), the ``device`` and the ``dtype``.  Shape
and strides live on the device array, so a view is just another device array over
the same storage.  Every computation goes through an op in ``neetorch.ops``; the
operator methods here only forward to those functions.
"""
from __future__ import annotations

import numpy as np

from . import _storage
from . import dtypes as _dt
from .dtypes import DType

__all__ = ["Tensor", "Size"]


class Size(tuple):
    """``torch.Size``: a tuple of ints that prints as ``neetorch.Size([...])``."""

    def __repr__(self):
        return f"neetorch.Size({list(self)})"

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n


# set by the tracer while a trace is running (see neetorch.trace.tracer)
_READ_HOOK: list = [None]
# bumped when a trace starts (trace/tracer.py); every Tensor records it when made (Tensor._born)
TRACE_GEN: list = [0]


def _F():
    from .. import _functional_namespace
    return _functional_namespace()


class Tensor:
    # _sig caches (dtype, device, shape, strides, writeable) for dispatch-plan lookups;
    # replace storage only through _set_storage, which resets the caches
    # _flat caches a 1-D view of a C-contiguous _data for kernel launches
    # _born: TRACE_GEN when made (a trace tells tensors from outside it, captured, from those made inside it)
    __slots__ = ("_data", "_device", "_dtype", "_sig", "_flat", "_born", "requires_grad", "grad", "__weakref__",
                 "__dict__")
    __array_priority__ = 1000  # numpy defers binary operators to Tensor

    @classmethod
    def _make(cls, data, device, dtype: DType) -> "Tensor":
        t = object.__new__(cls)
        t._data = data
        t._device = device
        t._dtype = dtype
        t._sig = None
        t._flat = None
        t._born = TRACE_GEN[0]
        t.requires_grad = False
        t.grad = None
        return t

    def __new__(cls, *args, **kw):
        # Tensor(data) behaves like nee.tensor(data); Tensor(2, 3) like empty(2, 3)
        from . import creation
        if len(args) == 1 and not isinstance(args[0], int):
            return creation.tensor(args[0], **kw)
        return creation.empty(*(args or (0,)), **kw)     # Tensor(): an empty 1-D tensor, like torch

    def __init__(self, *args, **kw):
        pass

    # ------------------------------------------------------------ metadata
    @property
    def shape(self) -> Size:
        return Size(self._data.shape)

    def size(self, dim: int | None = None):
        if dim is None:
            return Size(self._data.shape)
        return self._data.shape[_wrap_dim(dim, self._data.ndim, "size")]

    @property
    def dtype(self) -> DType:
        return self._dtype

    @property
    def device(self):
        return self._device

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def dim(self) -> int:
        return self._data.ndim

    ndimension = dim

    def numel(self) -> int:
        return int(np.prod(self._data.shape, dtype=np.int64))

    nelement = numel

    def element_size(self) -> int:
        return self._dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel() * self._dtype.itemsize

    def stride(self, dim: int | None = None):
        isz = self._dtype.itemsize
        st = tuple(s // isz for s in self._data.strides)
        if not any(st) and st and 0 in self._data.shape:
            # numpy gives an array without elements all-zero strides; torch's are row-major (sizes below 1 as 1)
            from ._layout import contiguous_strides
            st = contiguous_strides(self._data.shape)
        if dim is None:
            return st
        return st[_wrap_dim(dim, self._data.ndim, "stride")]

    def storage_offset(self) -> int:
        return getattr(self._backend(), "storage_offset", lambda a: 0)(self._data)

    def data_ptr(self) -> int:
        return self._backend().data_ptr(self._data)

    def is_contiguous(self, memory_format=None) -> bool:
        if memory_format is None:
            return _is_contiguous(self._data.shape, self.stride())
        if memory_format in (channels_last, channels_last_3d) and self.ndim != (4 if memory_format is channels_last
                                                                               else 5):
            return False   # torch: a tensor of another rank is not channels-last contiguous (no error)
        perm = _channels_last_perm(memory_format, self.ndim, "is_contiguous")
        if perm is None:
            return _is_contiguous(self._data.shape, self.stride())
        shape, st = self._data.shape, self.stride()
        return _is_contiguous(tuple(shape[p] for p in perm), tuple(st[p] for p in perm))

    # torch's storage-kind flags: neetorch tensors are dense, strided, unquantized and never on these devices
    is_sparse = is_sparse_csr = is_quantized = is_meta = is_nested = is_mkldnn = property(lambda self: False)
    is_xpu = is_mps = is_ipu = is_xla = is_vulkan = is_mtia = is_maia = property(lambda self: False)

    @property
    def layout(self) -> Layout:
        """``torch.strided``: the only layout neetorch has."""
        return strided

    @property
    def is_cuda(self) -> bool:
        return self._device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self._device.type == "cpu"

    def is_floating_point(self) -> bool:
        return self._dtype.category == 2

    def is_complex(self) -> bool:
        return self._dtype.category == 3

    @property
    def real(self) -> "Tensor":
        """The real part: a view for complex tensors (``torch.Tensor.real``), the tensor itself otherwise."""
        from ..ops.complex import real
        return real(self)

    @real.setter
    def real(self, value) -> None:
        self.real.copy_(value)

    @property
    def imag(self) -> "Tensor":
        """The imaginary part, a view (complex tensors only, as in torch)."""
        from ..ops.complex import imag
        return imag(self)

    @imag.setter
    def imag(self, value) -> None:
        self.imag.copy_(value)

    @property
    def T(self) -> "Tensor":
        if self.ndim > 2:
            import warnings
            warnings.warn("Tensor.T on a tensor of more than 2 dims reverses all dims; use .mT or permute", UserWarning)
        return self.permute(*range(self.ndim - 1, -1, -1))

    @property
    def mT(self) -> "Tensor":
        if self.ndim == 0:    # (torch: deprecated on 0-d tensors, where it is the identity)
            import warnings
            warnings.warn("Tensor.mT is deprecated on 0-D tensors. This function is the identity in these cases.",
                          UserWarning, stacklevel=2)
            return self.view(())
        if self.ndim < 2:
            raise RuntimeError(f"tensor.mT is only supported on matrices or batches of matrices. Got {self.ndim}-D tensor.")
        return self.transpose(-2, -1)

    @property
    def H(self):
        if self.ndim not in (0, 2):
            raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got {self.ndim}-D tensor. For "
                               f"batches of matrices, consider using tensor.mH")
        return self.T.conj() if self._dtype.category == 3 else self.T

    @property
    def mH(self):
        return self.mT.conj() if self._dtype.category == 3 else self.mT

    def _backend(self):
        from ..devices import get_backend
        return get_backend(self._device)

    # ------------------------------------------------------------ conversion
    def numpy(self, *, force: bool = False) -> np.ndarray:
        """Zero-copy on the CPU (the array shares memory with the tensor)."""
        if _READ_HOOK[0] is not None:  # inside a trace: reading values would freeze data into the graph
            _READ_HOOK[0](self, "numpy()/item()/tolist()/bool()")
        if self._device.type == "cpu":
            # writes through the returned array are not seen by neetorch: caches derived from this storage
            # (the jit's re-laid-out weights) stop trusting its write counter (tensor/_storage.py)
            _storage.mark_exported(self._data)
            return self._data
        if not force:
            raise TypeError(f"can't convert {self._device} tensor to numpy; use .cpu() first (or numpy(force=True))")
        return self._backend().to_host(self._data)

    def _host(self) -> np.ndarray:
        """The values as a host array for reading (``item``/``tolist``/printing): like ``numpy(force=True)``,
        without marking the storage exported (the array does not leave neetorch)."""
        if _READ_HOOK[0] is not None:
            _READ_HOOK[0](self, "numpy()/item()/tolist()/bool()")
        if self._device.type == "cpu":
            return self._data
        return self._backend().to_host(self._data)

    def __array__(self, dtype=None, copy=None):
        a = self._host().copy() if copy else self.numpy(force=True)   # (a copy does not export the storage)
        if dtype is not None:
            a = a.astype(dtype, copy=False)
        return a

    def item(self):
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self._host().reshape(()).item()

    def tolist(self):
        return self._host().tolist()

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError(f"Boolean value of Tensor with more than one value is ambiguous (shape {tuple(self.shape)})")
        return bool(self.item())

    def _scalar_conv(self):
        # torch: int() / float() / complex() of a tensor that is not one element raise ValueError (item(): RuntimeError)
        if self.numel() != 1:
            raise _ScalarConversionError("only one element tensors can be converted to Python scalars "
                                         f"(got {self.numel()} elements, shape {tuple(self.shape)})")
        return self.item()

    def __int__(self):
        return int(self._scalar_conv())

    def __float__(self):
        return float(self._scalar_conv())

    def __complex__(self):
        return complex(self._scalar_conv())

    def __index__(self):
        if self._dtype.category == 2 or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    def __hash__(self):
        return id(self)

    def __reversed__(self):
        return self.flip(0)

    def __dlpack__(self, stream=None, **kw):
        _storage.mark_exported(self._data)
        if self._device.type != "cpu":
            return self._data.__dlpack__(stream=stream, **kw)
        if self._dtype.name == "bfloat16":
            raise BufferError("__dlpack__: a bfloat16 tensor cannot be exported through DLPack here (numpy has no "
                              "DLPack bfloat16); use .numpy() (an ml_dtypes.bfloat16 array) or .float() first")
        return self._data.__dlpack__(**kw) if kw else self._data.__dlpack__()

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    def to(self, *args, **kwargs) -> "Tensor":
        """``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(other)``; ``copy=``."""
        from ..devices import device as _device
        dev = kwargs.pop("device", None)
        dt = kwargs.pop("dtype", None)
        copy = kwargs.pop("copy", False)
        kwargs.pop("non_blocking", None)
        fmt = kwargs.pop("memory_format", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        flags = [a for a in args if isinstance(a, bool)]      # torch's positional non_blocking, copy
        if len(flags) > 2:
            raise TypeError("to() takes at most two bool arguments (non_blocking, copy)")
        if len(flags) == 2:
            copy = flags[1]
        args = [a for a in args if not isinstance(a, bool)]
        for a in args:
            if isinstance(a, Tensor):
                dev, dt = a._device, a._dtype
            elif isinstance(a, DType) or a in (float, int, bool, complex) or isinstance(a, np.dtype) or \
                    (isinstance(a, str) and a in _dt._BY_NAME):
                dt = a
            elif a is None:
                continue
            else:
                dev = a
        dt = self._dtype if dt is None else _dt.to_dtype(dt)
        dev = self._device if dev is None else _device(dev)
        t = self
        if dev != self._device:
            from .creation import _transfer
            t = _transfer(t, dev)
            copy = False
        if dt is not t._dtype:
            from ..ops.elementwise import cast
            src = t
            t = cast(t, dt)
            copy = False
            if (fmt is None or fmt is preserve_format) and t._device.type == "cpu" and _READ_HOOK[0] is None:
                from ._layout import alloc, like_strides
                st = like_strides(src._data.shape, src.stride())   # torch's preserve_format: src's layout
                if st is not None:
                    data = alloc(t._data.shape, st, t._data.dtype)
                    data[...] = t._data
                    t = Tensor._make(data, t._device, t._dtype)
        if copy:
            t = t.clone()
        perm = None if fmt is None else _channels_last_perm(fmt, t.ndim, "to")
        if perm is not None:   # torch: the format's own strides (a copy unless the tensor has them already)
            want, acc = [0] * t.ndim, 1
            for p in reversed(perm):
                want[p], acc = acc, acc * max(t._data.shape[p], 1)
            if tuple(t.stride()) != tuple(want):
                t = t.clone(memory_format=fmt)
        elif fmt is contiguous_format:
            t = t.contiguous()
        return t

    def cpu(self, memory_format=None) -> "Tensor":
        return self.to("cpu", memory_format=memory_format)

    def cuda(self, device=None) -> "Tensor":
        return self.to(f"cuda:{device or 0}")

    def type(self, dtype=None):
        if dtype is None:
            return f"neetorch.{_LEGACY_TYPE[self._dtype.name]}Tensor"
        if isinstance(dtype, str) and dtype.endswith("Tensor") and "." in dtype:   # "torch.IntTensor" names
            legacy = {v: k for k, v in _LEGACY_TYPE.items()}.get(dtype.rsplit(".", 1)[1][:-len("Tensor")])
            if legacy is None:
                raise ValueError(f"invalid type: {dtype!r}")
            dtype = legacy
        return self.to(dtype)

    def __contains__(self, element):
        """``element in t``: ``(t == element).any()`` for a number or a tensor (torch's rule)."""
        import numbers
        if isinstance(element, (Tensor, numbers.Number, np.bool_)):
            return bool((self == element).any().item())
        raise RuntimeError(f"Tensor.__contains__ only supports Tensor or scalar, but you passed in a "
                           f"{type(element).__name__}.")

    def float(self, memory_format=None):
        return self.to(_dt.float32, memory_format=memory_format)

    def double(self, memory_format=None):
        return self.to(_dt.float64, memory_format=memory_format)

    def half(self, memory_format=None):
        return self.to(_dt.float16, memory_format=memory_format)

    def cfloat(self, memory_format=None):
        return self.to(_dt.complex64, memory_format=memory_format)

    def cdouble(self, memory_format=None):
        return self.to(_dt.complex128, memory_format=memory_format)

    def int(self, memory_format=None):
        return self.to(_dt.int32, memory_format=memory_format)

    def long(self, memory_format=None):
        return self.to(_dt.int64, memory_format=memory_format)

    def short(self, memory_format=None):
        return self.to(_dt.int16, memory_format=memory_format)

    def char(self, memory_format=None):
        return self.to(_dt.int8, memory_format=memory_format)

    def byte(self, memory_format=None):
        return self.to(_dt.uint8, memory_format=memory_format)

    def bool(self, memory_format=None):
        return self.to(_dt.bool_, memory_format=memory_format)

    def contiguous(self, memory_format=None) -> "Tensor":
        if self.is_contiguous(memory_format):
            return self
        return self.clone(memory_format=memory_format or contiguous_format)

    def clone(self, memory_format=None) -> "Tensor":
        perm = None if memory_format is None else _channels_last_perm(memory_format, self.ndim, "clone")
        if perm is not None:   # copy in the permuted order, then view it back: NHWC (NDHWC) strides
            inv = tuple(int(i) for i in np.argsort(perm))
            return self.permute(*perm).clone(memory_format=contiguous_format).permute(*inv)
        if _READ_HOOK[0] is not None:  # a trace is running: the copy must be a node, not a constant
            from ..trace.tracer import traced_copy
            r = traced_copy(self, contiguous=memory_format is not None and memory_format is not preserve_format)
            if r is not None:
                return r
        b = self._backend()
        if (memory_format is None or memory_format is preserve_format) and self._device.type == "cpu":
            from ._layout import alloc, like_strides
            st = like_strides(self._data.shape, self.stride())   # torch's preserve_format (its default)
            if st is not None:
                out = Tensor._make(alloc(self._data.shape, st, self._data.dtype), self._device, self._dtype)
                b.copy_(out._data, self._data)
                return out
        try:
            out = Tensor._make(b.empty(self._data.shape, self._dtype), self._device, self._dtype)
        except Exception as e:  # noqa: BLE001 - numpy: MemoryError or ValueError (too big); pyopencl: LogicError
            from .creation import OutOfMemoryError
            raise OutOfMemoryError(f"clone/contiguous: {self._device} cannot allocate a {self._dtype.name} tensor of "
                                   f"shape {list(self.shape)}: {type(e).__name__}: {e}") from None
        b.copy_(out._data, self._data)
        return out

    @property
    def data(self) -> "Tensor":
        """The same storage as a plain tensor (``torch.Tensor.data``)."""
        return self._alias()

    def _alias(self) -> "Tensor":
        """A new tensor object over the same storage; under a trace it stands for the same value."""
        if _READ_HOOK[0] is not None:
            from ..trace.tracer import alias, is_traced_here
            if is_traced_here(self):
                # a traced value: a view of the same shape (a recorded view op), so that an in-place write through
                # the alias is written through to this tensor too, as the shared storage makes it eagerly
                return self.view(tuple(self.shape))
            t = Tensor._make(self._data, self._device, self._dtype)
            alias(self, t)
            return t
        return Tensor._make(self._data, self._device, self._dtype)

    @data.setter
    def data(self, other: "Tensor") -> None:
        self._set_storage(other._data, other._device, other._dtype)

    def _set_storage(self, data, device, dtype) -> None:
        """Point this tensor at other storage (Parameter.data=, Module.to); drops cached layouts."""
        self._data, self._device, self._dtype = data, device, dtype
        self._sig = self._flat = None

    def detach(self) -> "Tensor":
        return self._alias()

    def detach_(self):
        return self

    def requires_grad_(self, requires_grad: bool = True):
        if requires_grad and self._dtype.category not in (2, 3):
            raise RuntimeError(f"only Tensors of floating point and complex dtype can require gradients "
                               f"(got {self._dtype.name})")
        self.requires_grad = bool(requires_grad)
        return self

    def copy_(self, src, non_blocking=False) -> "Tensor":
        """Copy ``src`` (broadcast to this tensor's shape, cast to its dtype) into this tensor."""
        from ..ops.indexing import _check_no_overlap, _check_partial_overlap
        _check_no_overlap(self)  # torch: writing through an expanded (stride-0) view is refused
        _check_partial_overlap(self, src)
        return self._assign(src)

    def _assign(self, src) -> "Tensor":
        if _READ_HOOK[0] is not None:   # a trace is running: the write becomes a rebinding of the value
            from ..trace.tracer import traced_assign
            if traced_assign(self, src):
                return self
        from .creation import as_tensor_like
        src = as_tensor_like(src, self)
        if src._device != self._device:
            src = src.to(self._device)
        src = src.expand(self._data.shape) if src.shape != self.shape else src
        try:
            self._backend().copy_(self._data, src._data)
        finally:
            if _storage.WATCH:
                _storage.bump(self._data)   # (after the write: see tensor/_storage.py)
        return self

    def fill_(self, value) -> "Tensor":
        if isinstance(value, Tensor):
            if value.dim() != 0:
                raise RuntimeError(f"fill_: only supports 0-dimension value tensor but got tensor with {value.dim()} "
                                   f"dimensions (shape {tuple(value.shape)})")
        elif self.numel() != 1:
            # (torch's one-element fast path skips the overflow check, like creation._new)
            _dt.check_scalar(value, self._dtype, "fill_")
        return self._assign(value)   # torch allows fill_/zero_ on expanded views (every element gets value)

    def zero_(self) -> "Tensor":
        return self._assign(0)

    def new_tensor(self, data, dtype=None, device=None):
        from .creation import tensor
        return tensor(data, dtype=dtype or self._dtype, device=device or self._device)

    def new_zeros(self, *size, dtype=None, device=None, **kw):   # (torch's size=, requires_grad=, layout=...)
        from .creation import zeros
        return zeros(*size, dtype=dtype or self._dtype, device=device or self._device, **kw)

    def new_ones(self, *size, dtype=None, device=None, **kw):   # (torch's size=, requires_grad=, layout=...)
        from .creation import ones
        return ones(*size, dtype=dtype or self._dtype, device=device or self._device, **kw)

    def new_full(self, size, fill_value, dtype=None, device=None):
        from .creation import full
        return full(size, fill_value, dtype=dtype or self._dtype, device=device or self._device)

    def new_empty(self, *size, dtype=None, device=None, **kw):   # (torch's size=, requires_grad=, layout=...)
        from .creation import empty
        return empty(*size, dtype=dtype or self._dtype, device=device or self._device, **kw)

    def __repr__(self):
        from ._repr import tensor_repr
        return tensor_repr(self)

    __str__ = __repr__

    def __format__(self, spec):
        if self.ndim == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    def __reduce_ex__(self, proto):
        from .creation import _rebuild
        return (_rebuild, (self._host().copy(), str(self._device)))

    def __deepcopy__(self, memo):
        t = self.clone()
        if type(self) is not Tensor:
            t.__class__ = type(self)
            t.__dict__.update(self.__dict__)
        t.requires_grad = self.requires_grad
        memo[id(self)] = t
        return t


_LEGACY_TYPE = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int64": "Long",
                "int32": "Int",
                "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool", "complex64": "ComplexFloat",
                "complex128": "ComplexDouble"}


def _wrap_dim(dim: int, ndim: int, op: str = "") -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"{op}: dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim + n if dim < 0 else dim


class Layout:
    """``torch.layout``: neetorch has the dense strided layout only (``nee.strided``)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"neetorch.{self.name}"


strided = Layout("strided")


class _ScalarConversionError(ValueError, RuntimeError):
    """torch raises ValueError (recent) or RuntimeError (older) converting a many-element tensor to a scalar."""


class MemoryFormat:
    """``torch.memory_format``: ``contiguous_format`` (row-major), ``channels_last`` (4-d NHWC strides),
    ``channels_last_3d`` (5-d NDHWC strides), ``preserve_format``."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"neetorch.{self.name}"


contiguous_format = MemoryFormat("contiguous_format")
channels_last = MemoryFormat("channels_last")
channels_last_3d = MemoryFormat("channels_last_3d")
preserve_format = MemoryFormat("preserve_format")


def _channels_last_perm(fmt, ndim, op):
    """The dim order (outermost first) of ``fmt``'s strides for an ``ndim``-d tensor; None: row-major."""
    if fmt is None or fmt is contiguous_format or fmt is preserve_format:
        return None
    if fmt is channels_last or fmt is channels_last_3d:
        want = 4 if fmt is channels_last else 5
        if ndim != want:
            raise RuntimeError(f"{op}: required rank {want} tensor to use {fmt.name} format (got a {ndim}-d tensor)")
        return (0,) + tuple(range(2, ndim)) + (1,)
    raise TypeError(f"{op}: memory_format must be a neetorch memory format (nee.contiguous_format, "
                    f"nee.channels_last, ...), got {fmt!r}")


def _is_contiguous(shape, strides) -> bool:
    if 0 in shape:   # torch: a tensor without elements is contiguous whatever its strides
        return True
    expected = 1
    for s, st in zip(reversed(shape), reversed(strides)):
        if s == 0:
            return True
        if s != 1 and st != expected:
            return False
        expected *= s
    return True
