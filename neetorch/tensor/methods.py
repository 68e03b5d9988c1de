"""Binds the op table onto ``Tensor`` (methods, operators, in-place variants).

Run once at import: every function published with ``ops.export`` becomes
``Tensor.<name>`` (and ``<name>_`` for elementwise in-place forms), so an op is
written once and never edited into this class by hand.
"""
from __future__ import annotations

from ..ops import EXPORTS, OPS
from ..ops.registry import torch_aliases
from ..ops import elementwise as ew
from . import views
from .tensor import Tensor

_VIEW_METHODS = ["view", "reshape", "permute", "transpose", "squeeze", "unsqueeze", "expand", "narrow", "flatten",
                 "unflatten", "select", "unbind", "movedim", "as_strided", "t", "view_as", "reshape_as", "expand_as",
                 "swapaxes", "swapdims", "moveaxis", "diagonal", "unfold", "split", "chunk", "tensor_split", "ravel",
                 "broadcast_to", "hsplit", "vsplit"]


# in-place ops torch still runs on expanded (stride-0) tensors (deprecated there, with a warning)
_OVERLAP_OK = frozenset({"masked_fill", "index_fill", "index_put"})


# in-place ops whose tensor arguments (source / src / index) torch refuses when they share memory with self
# (assert_no_overlap in index_add_ / index_copy_ / index_reduce_ / scatter*_ / put_): the result would depend
# on the kernel's order
_NO_ARG_OVERLAP = frozenset({"index_add", "index_copy", "index_reduce", "scatter", "scatter_add", "scatter_reduce",
                             "put"})


def _inplace(fn, name):
    def f(self, *args, **kw):
        if name in _NO_ARG_OVERLAP:
            from ..ops.indexing import _check_any_overlap
            for a in (*args, *kw.values()):
                if isinstance(a, Tensor):
                    _check_any_overlap(self, a)
        r = fn(self, *args, **kw)
        if r is self:
            return self
        if tuple(r.shape) != tuple(self.shape):
            raise RuntimeError(f"{name}_: output with shape {tuple(self.shape)} doesn't match the broadcast shape "
                               f"{tuple(r.shape)}")
        if r._dtype is not self._dtype and not ew._can_cast(r._dtype, self._dtype):
            raise RuntimeError(f"{name}_: result type {r._dtype.name.capitalize()} can't be cast to the desired "
                               f"output type {self._dtype.name.capitalize()}")
        if name in _OVERLAP_OK:
            if name != "index_put" and any(st == 0 and n > 1 for n, st in zip(self.shape, self.stride())):
                # an expanded self: torch writes the selected elements only (deprecated there, with a warning), so
                # an element aliased by a selected and an unselected position takes the value; writing all of r
                # would let the last alias win
                import warnings
                warnings.warn(f"Use of {name}_ on expanded tensors is deprecated. Please clone() the tensor before "
                              f"performing this operation.", UserWarning, stacklevel=2)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    changed = r != self
                    if r._dtype.category >= 2:
                        changed = changed & ~(r.isnan() & self.isnan())
                    self[changed] = r[changed]
                return self
            self._assign(r)
        else:
            self.copy_(r)  # refuses an expanded (internally overlapping) self, like torch
        return self
    f.__name__ = name + "_"
    return f


def _ew_inplace(op_fn, name):
    # elementwise in-place: write straight into self (no temporary)
    def f(self, *args, **kw):
        return op_fn(self, *args, out=self, **kw)
    f.__name__ = name + "_"
    return f


def install() -> None:
    for name, (fn, method, function, inplace) in EXPORTS.items():
        if method and not hasattr(Tensor, name):
            setattr(Tensor, name, torch_aliases(fn))
        if method and (inplace or (name in OPS and OPS[name].kind == "elementwise")):
            if not hasattr(Tensor, name + "_"):
                try:
                    import inspect
                    # (relu has no out= keyword in torch, so none here: its relu_ takes the generic path)
                    has_out = "out" in inspect.signature(fn).parameters and name not in ew._NO_OUT
                except (TypeError, ValueError):
                    has_out = False
                setattr(Tensor, name + "_", _ew_inplace(fn, name) if has_out else _inplace(fn, name))
    for extra in ("add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow", "clamp",
                  "clamp_min", "clamp_max", "round", "lerp", "addcmul", "addcdiv", "masked_fill", "atan2",
                  "hypot", "copysign", "maximum", "minimum", "logical_and", "logical_or", "logical_xor",
                  "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "xlogy",
                  "subtract", "multiply", "divide", "clip", "eq", "ne", "lt", "le", "gt", "ge"):
        if extra in EXPORTS and not hasattr(Tensor, extra + "_"):
            fn = EXPORTS[extra][0]
            setattr(Tensor, extra + "_", _inplace(fn, extra))
    # torch: ``x.where(condition, y)`` is ``torch.where(condition, x, y)`` (self is the value, not the condition)
    Tensor.where = lambda self, condition, other: ew.where(condition, self, other)
    if not hasattr(Tensor, "type_as"):
        Tensor.type_as = lambda self, other: self.to(other.dtype)
    _compat_methods()
    from ..trace.tracer import _traced_view
    for name in _VIEW_METHODS:
        if not hasattr(Tensor, name):
            setattr(Tensor, name, torch_aliases(_traced_view(name, getattr(views, name))))
    _operators()


def _r(fn):
    return lambda self, other: fn(other, self)


def _operators() -> None:
    E = {k: v[0] for k, v in EXPORTS.items()}
    T = Tensor
    apply, add_op, mul_op, sub_op = ew.apply, OPS["add"], OPS["mul"], OPS["sub"]
    T.__add__ = T.__radd__ = lambda s, o: apply(add_op, s, o)
    T.__iadd__ = lambda s, o: E["add"](s, o, out=s)
    T.__sub__ = lambda s, o: apply(sub_op, s, o)
    T.__rsub__ = lambda s, o: E["sub"](o, s)
    T.__isub__ = lambda s, o: E["sub"](s, o, out=s)
    T.__mul__ = T.__rmul__ = lambda s, o: apply(mul_op, s, o)
    T.__imul__ = lambda s, o: E["mul"](s, o, out=s)
    T.__truediv__ = lambda s, o: E["div"](s, o)
    # torch's Tensor.__rtruediv__ is ``self.reciprocal() * other`` (not a true division: 3 / x differs by an
    # ulp from torch.div(3, x) in about a quarter of float32 elements)
    T.__rtruediv__ = lambda s, o: apply(mul_op, E["reciprocal"](s), o) if ew._is_scalar(o) else E["div"](o, s)
    T.__itruediv__ = lambda s, o: E["div"](s, o, out=s)
    T.__floordiv__ = lambda s, o: E["floor_divide"](s, o)
    T.__rfloordiv__ = lambda s, o: E["floor_divide"](o, s)
    T.__ifloordiv__ = lambda s, o: E["floor_divide"](s, o, out=s)
    T.__mod__ = lambda s, o: E["remainder"](s, o)
    T.__rmod__ = lambda s, o: E["remainder"](o, s)
    T.__imod__ = lambda s, o: E["remainder"](s, o, out=s)
    T.__pow__ = lambda s, o: E["pow"](s, o)
    T.__rpow__ = lambda s, o: E["pow"](o, s)
    T.__ipow__ = lambda s, o: E["pow"](s, o, out=s)
    T.__neg__ = lambda s: E["neg"](s)
    T.__pos__ = lambda s: s
    T.__abs__ = lambda s: E["abs"](s)
    T.__invert__ = lambda s: E["bitwise_not"](s)
    T.__and__ = T.__rand__ = lambda s, o: E["bitwise_and"](s, o)
    T.__or__ = T.__ror__ = lambda s, o: E["bitwise_or"](s, o)
    T.__xor__ = T.__rxor__ = lambda s, o: E["bitwise_xor"](s, o)
    T.__iand__ = lambda s, o: E["bitwise_and"](s, o, out=s)
    T.__ior__ = lambda s, o: E["bitwise_or"](s, o, out=s)
    T.__ixor__ = lambda s, o: E["bitwise_xor"](s, o, out=s)
    T.__lshift__ = lambda s, o: E["bitwise_left_shift"](s, o)
    T.__rshift__ = lambda s, o: E["bitwise_right_shift"](s, o)
    T.__rlshift__ = lambda s, o: E["bitwise_left_shift"](o, s)
    T.__rrshift__ = lambda s, o: E["bitwise_right_shift"](o, s)
    T.__ilshift__ = lambda s, o: E["bitwise_left_shift"](s, o, out=s)
    T.__irshift__ = lambda s, o: E["bitwise_right_shift"](s, o, out=s)
    T.__eq__ = lambda s, o: E["eq"](s, o) if _cmp_ok(o) else NotImplemented
    T.__ne__ = lambda s, o: E["ne"](s, o) if _cmp_ok(o) else NotImplemented
    T.__lt__ = lambda s, o: E["lt"](s, o)
    T.__le__ = lambda s, o: E["le"](s, o)
    T.__gt__ = lambda s, o: E["gt"](s, o)
    T.__ge__ = lambda s, o: E["ge"](s, o)
    T.__hash__ = lambda s: id(s)
    if "matmul" in E:
        T.__matmul__ = lambda s, o: E["matmul"](s, o)
        T.__rmatmul__ = lambda s, o: E["matmul"](o, s)
    from ..trace.tracer import _guard_mutation, _traced_getitem
    if "getitem" in E:
        T.__getitem__ = _traced_getitem(E["getitem"])
        T.__setitem__ = _guard_mutation(E["setitem"], "tensor[...] = value")
    for name in ("copy_", "fill_", "zero_"):
        setattr(T, name, _guard_mutation(getattr(T, name), name))


def _cmp_ok(o) -> bool:
    import numbers

    import numpy as np
    return isinstance(o, (Tensor, numbers.Number, np.generic, np.ndarray, list, tuple))


# ---------------------------------------------------------------- torch.Tensor methods beyond the op table
def _rebind(self, v, what="resize_"):
    """Make ``self`` the view ``v`` (an in-place view op changes this tensor's metadata, not its storage)."""
    from ..ops.registry import _trace_hook
    if _trace_hook[0] is not None:
        from ..trace.tracer import refuse_metadata_write
        refuse_metadata_write(self, what)
    self._set_storage(v._data, v._device, v._dtype)
    from ..trace.tracer import alias
    alias(v, self)
    return self


def _view_inplace(name):
    def f(self, *args, **kwargs):
        return _rebind(self, getattr(Tensor, name)(self, *args, **kwargs), name + "_")  # the traced view method
    f.__name__ = name + "_"
    f.__doc__ = f"In-place ``{name}``: this tensor becomes the view (same storage, new shape/strides)."
    return f


def resize_(self, *sizes, memory_format=None):
    """``Tensor.resize_``: new contiguous shape over this tensor's storage, read in storage order from its
    offset (like torch); growing past the storage it spans allocates new storage, copies the old elements and
    leaves the rest uninitialised (other views keep the old storage)."""
    from .creation import _size, empty
    shape = _size(sizes)
    n = 1
    for s in shape:
        n *= s
    if shape == tuple(self.shape) and self.is_contiguous():
        return self
    st = self.stride()
    extent = 1 + sum((s - 1) * t for s, t in zip(self.shape, st)) if self.numel() else 0
    if n <= extent:
        return _rebind(self, views.make_view(self, shape, views._contig_strides(shape)))
    new = empty(shape, dtype=self._dtype, device=self._device)
    if extent:
        new.reshape(-1)[:extent].copy_(views.make_view(self, (extent,), (1,)))
    return _rebind(self, new)


def resize_as_(self, other, memory_format=None):
    return resize_(self, tuple(other.shape))


def resize(self, *sizes):
    """Deprecated ``Tensor.resize`` (out of place): a reshape to a shape with the same number of elements."""
    import warnings
    warnings.warn("non-inplace resize is deprecated", UserWarning, stacklevel=2)
    from .creation import _size
    shape = _size(sizes)
    n = 1
    for s in shape:
        n *= s
    if n != self.numel():
        raise RuntimeError(f"resize: shape {list(shape)} has {n} elements, this tensor {self.numel()}; the "
                           f"out-of-place resize keeps the element count (use resize_)")
    return self.reshape(shape)


def resize_as(self, tensor):
    return resize(self, tuple(tensor.shape))


def fill_diagonal_(self, fill_value, wrap=False):
    """``Tensor.fill_diagonal_``: write ``fill_value`` on the main diagonal (all dims of a >2-D tensor must be
    equal); ``wrap`` continues the diagonal of a tall matrix every ``ncols + 1`` rows, like torch."""
    nd = self.ndim
    if nd < 2:
        raise RuntimeError(f"fill_diagonal_: dimensions must larger than 1 (got {nd}-D)")
    h, w = self.shape[0], self.shape[1]
    if nd > 2 and any(s != h for s in self.shape):
        raise RuntimeError(f"fill_diagonal_: all dimensions of input must be of equal length (got "
                           f"{tuple(self.shape)})")
    st = self.stride()
    size, stride = min(h, w), sum(st)
    views.make_view(self, (size,), (stride,)).fill_(fill_value)
    if wrap and nd == 2 and h > w + 1:
        step = w + 1
        wrap_size = (self.numel() + step - 1) // step - size
        views.make_view(self, (wrap_size,), (stride,), st[0] * (w + 1)).fill_(fill_value)
    return self


def sum_to_size(self, *size):
    """``Tensor.sum_to_size``: sum the broadcast dims away so the result has ``size`` (which must expand to
    this tensor's shape)."""
    from .creation import _size
    size = _size(size)
    sh = tuple(self.shape)
    if len(size) > len(sh) or any(s != 1 and s != d for s, d in zip(size[::-1], sh[::-1])):
        raise RuntimeError(f"size {{{list(size)}}} is not expandable to size {{{list(sh)}}}.")
    lead = len(sh) - len(size)
    r = self
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(size) if s == 1 and sh[lead + i] != 1)
    if dims:
        r = EXPORTS["sum"][0](self, dims, keepdim=True)
        if lead:
            r = r.reshape(size)
    return r


def new(self, *args, device=None):
    """Legacy ``Tensor.new``: ``new()`` -> empty 1-D, ``new(2, 3)``/``new(Size)`` -> uninitialised of that
    shape, ``new(data)`` -> a tensor of ``data`` with this tensor's dtype and device."""
    from .creation import empty, tensor
    from .tensor import Size
    dev = device or self._device
    if not args:
        return empty(0, dtype=self._dtype, device=dev)
    if len(args) == 1 and isinstance(args[0], Tensor):
        return args[0]._alias()
    if len(args) == 1 and not isinstance(args[0], (int, Size)):
        return tensor(args[0], dtype=self._dtype, device=dev)
    return empty(*args, dtype=self._dtype, device=dev)


def new_empty_strided(self, size, stride, dtype=None, device=None, requires_grad=False, **kw):
    return EXPORTS["empty_strided"][0](size, stride, dtype=dtype or self._dtype, device=device or self._device)


def is_set_to(self, tensor) -> bool:
    """True when both tensors view the same memory with the same shape and strides."""
    return (self._device == tensor._device and self._dtype is tensor._dtype and self.shape == tensor.shape
            and self.stride() == tensor.stride() and (self.numel() == 0 or self.data_ptr() == tensor.data_ptr()))


def as_subclass(self, cls):
    """``Tensor.as_subclass``: the same storage as an instance of ``cls`` (a Tensor subclass)."""
    if not (isinstance(cls, type) and issubclass(cls, Tensor)):
        raise TypeError(f"as_subclass: cls must be a subclass of Tensor (got {cls!r})")
    r = self._alias()
    r.__class__ = cls
    return r


def set_(self, source=None, storage_offset=None, size=None, stride=None):
    """``Tensor.set_``: share ``source``'s storage (with ``size``/``stride``/``storage_offset`` a view of it);
    ``set_()`` makes this an empty tensor."""
    if source is None:
        from .creation import empty
        return _rebind(self, empty(0, dtype=self._dtype, device=self._device), "set_")
    if not isinstance(source, Tensor):
        raise TypeError(f"set_: source must be a Tensor (storages are not modelled), got {type(source).__name__}")
    if source._dtype is not self._dtype:
        raise RuntimeError(f"set_: expected source of dtype {self._dtype.name}, got {source._dtype.name}")
    v = source._alias() if size is None else source.as_strided(size, stride if stride is not None else
                                                                 views._contig_strides(tuple(size)),
                                                                 storage_offset)
    return _rebind(self, v, "set_")


def get_device(self) -> int:
    """``-1`` on the CPU, else the device index."""
    if self._device.type == "cpu":
        return -1
    idx = getattr(self._device, "index", None)
    return 0 if idx is None else idx


def bfloat16(self, memory_format=None):
    """``Tensor.bfloat16()``: ``self.to(nee.bfloat16)`` (needs the ml_dtypes package)."""
    from . import dtypes as _dts
    if _dts.bfloat16 is None:
        raise TypeError(f"bfloat16(): {_dts.BFLOAT16_MISSING}")
    return self.to(_dts.bfloat16)


def _host_map(self, fn, *others, who):
    if self._device.type != "cpu":
        raise TypeError(f"{who} is only implemented on CPU tensors (got {self._device})")
    import numpy as np
    a = self.numpy()
    bs = [np.broadcast_to(o.to(self._device).numpy(), a.shape) for o in others]
    for idx in np.ndindex(a.shape):
        a[idx] = fn(a[idx].item(), *[b[idx].item() for b in bs])
    return self


def map_(self, tensor, callable):
    """``Tensor.map_``: ``self[i] = callable(self[i], tensor[i])`` elementwise (CPU, Python callable)."""
    return _host_map(self, callable, tensor, who="map_")


def map2_(self, x, y, callable):
    return _host_map(self, callable, x, y, who="map2_")


def apply_(self, callable):
    """``Tensor.apply_``: ``self[i] = callable(self[i])`` (CPU, Python callable)."""
    return _host_map(self, callable, who="apply_")


def _compat_methods() -> None:
    T = Tensor
    for name in ("squeeze", "unsqueeze", "t", "transpose", "swapaxes", "swapdims", "as_strided"):
        setattr(T, name + "_", _view_inplace(name))
    for name, fn in (("resize_", resize_), ("resize_as_", resize_as_), ("resize", resize), ("resize_as", resize_as), ("fill_diagonal_", fill_diagonal_),
                     ("sum_to_size", sum_to_size), ("new", new), ("new_empty_strided", new_empty_strided),
                     ("get_device", get_device), ("bfloat16", bfloat16), ("map_", map_), ("map2_", map2_),
                     ("apply_", apply_)):
        setattr(T, name, fn)
    for alias, op in (("greater", "gt"), ("greater_equal", "ge"), ("less", "lt"), ("less_equal", "le"),
                      ("not_equal", "ne"), ("arctan2", "atan2"), ("cumsum", "cumsum"), ("cumprod", "cumprod")):
        if not hasattr(T, alias + "_"):
            setattr(T, alias + "_", _inplace(EXPORTS[op][0], alias))
    for alias, op in (("addmm", "addmm"), ("addbmm", "addbmm"), ("addmv", "addmv"), ("addr", "addr"),
                      ("baddbmm", "baddbmm")):
        if op in EXPORTS and not hasattr(T, alias + "_"):
            setattr(T, alias + "_", _inplace(EXPORTS[op][0], alias))
    T.is_pinned = lambda self, device=None: False
    T.pin_memory = lambda self, device=None: self
    T.is_shared = lambda self: False
    T.is_set_to = is_set_to
    T.as_subclass = as_subclass
    T.set_ = set_
    from ..ops import compat
    T.float_power_ = compat._float_power_
    T.polygamma = compat._polygamma_method
    T.polygamma_ = compat._polygamma_
