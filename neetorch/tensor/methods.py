"""Binds the op table onto ``Tensor`` (methods, operators, in-place variants).

Run once at import: every function published with ``ops.export`` becomes
``Tensor.<name>`` (and ``<name>_`` for elementwise in-place forms), so an op is
written once and never edited into this class by hand.
"""
from __future__ import annotations

from ..ops import EXPORTS, OPS
from ..ops import elementwise as ew
from . import views
from .tensor import Tensor

_VIEW_METHODS = ["view", "reshape", "permute", "transpose", "squeeze", "unsqueeze", "expand", "narrow", "flatten",
                 "unflatten", "select", "unbind", "movedim", "as_strided", "t", "view_as", "reshape_as", "expand_as",
                 "swapaxes", "swapdims", "moveaxis", "diagonal", "unfold", "split", "chunk", "tensor_split", "ravel",
                 "broadcast_to", "hsplit", "vsplit"]


# in-place ops torch still runs on expanded (stride-0) tensors (deprecated there, with a warning)
_OVERLAP_OK = frozenset({"masked_fill", "index_fill", "index_put"})


def _inplace(fn, name):
    def f(self, *args, **kw):
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
            setattr(Tensor, name, fn)
        if method and (inplace or (name in OPS and OPS[name].kind == "elementwise")):
            if not hasattr(Tensor, name + "_"):
                try:
                    import inspect
                    has_out = "out" in inspect.signature(fn).parameters
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
    Tensor.where = lambda self, condition, y: ew.where(condition, self, y)
    if not hasattr(Tensor, "type_as"):
        Tensor.type_as = lambda self, other: self.to(other.dtype)
    from ..trace.tracer import _traced_view
    for name in _VIEW_METHODS:
        if not hasattr(Tensor, name):
            setattr(Tensor, name, _traced_view(name, getattr(views, name)))
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
    T.__rtruediv__ = lambda s, o: E["div"](o, s)
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
