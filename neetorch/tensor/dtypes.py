"""Dtypes and PyTorch's type-promotion rules.

A :class:`DType` is a singleton per element type; ``nee.float32 is nee.float32``.
Promotion follows ``torch.result_type`` exactly: tensors with ``dim > 0`` outrank
0-d tensors, which outrank Python scalars, *within a category* (bool < integer <
floating); a participant of a higher category always lifts the result into its
category.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "DType", "bool_", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
    "float64", "promote_types", "result_type", "get_default_dtype", "set_default_dtype",
    "to_dtype", "ALL_DTYPES", "FLOAT_DTYPES", "INT_DTYPES",
]


class DType:
    __slots__ = ("name", "np", "itemsize", "category", "is_signed", "_rank")

    def __init__(self, name: str, np_dtype, category: int, rank: int):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.category = category  # 0 bool, 1 integer, 2 floating
        self.is_signed = category == 2 or (category == 1 and self.np.kind == "i")
        self._rank = rank

    @property
    def is_floating_point(self) -> bool:
        return self.category == 2

    @property
    def is_complex(self) -> bool:
        return False

    @property
    def is_integer(self) -> bool:
        return self.category == 1

    @property
    def is_bool(self) -> bool:
        return self.category == 0

    def __repr__(self) -> str:
        return f"neetorch.{self.name}"

    def __reduce__(self):
        return (to_dtype, (self.name,))

    # finfo/iinfo-like helpers used by reductions and clamps
    @property
    def min(self):
        return np.finfo(self.np).min if self.category == 2 else (np.iinfo(self.np).min if self.category == 1 else False)

    @property
    def max(self):
        return np.finfo(self.np).max if self.category == 2 else (np.iinfo(self.np).max if self.category == 1 else True)


bool_ = DType("bool", np.bool_, 0, 0)
uint8 = DType("uint8", np.uint8, 1, 1)
int8 = DType("int8", np.int8, 1, 2)
int16 = DType("int16", np.int16, 1, 3)
int32 = DType("int32", np.int32, 1, 4)
int64 = DType("int64", np.int64, 1, 5)
float16 = DType("float16", np.float16, 2, 6)
float32 = DType("float32", np.float32, 2, 7)
float64 = DType("float64", np.float64, 2, 8)

ALL_DTYPES = (bool_, uint8, int8, int16, int32, int64, float16, float32, float64)
FLOAT_DTYPES = (float16, float32, float64)
INT_DTYPES = (uint8, int8, int16, int32, int64)

_BY_NP = {d.np: d for d in ALL_DTYPES}
_BY_NAME = {d.name: d for d in ALL_DTYPES}
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "long": int64, "int": int32,
                 "short": int16, "bool_": bool_})

_default_float = float32


def get_default_dtype() -> DType:
    return _default_float


def set_default_dtype(d) -> None:
    global _default_float
    d = to_dtype(d)
    if not d.is_floating_point:
        raise TypeError(f"set_default_dtype: only floating-point dtypes are allowed, got {d}")
    _default_float = d


def to_dtype(d) -> DType:
    """Accept a DType, a numpy dtype/type, a python type or a name."""
    if type(d) is DType:
        return d
    if isinstance(d, str):
        try:
            return _BY_NAME[d]
        except KeyError:
            raise TypeError(f"unknown dtype name {d!r}; known: {sorted(_BY_NAME)}") from None
    if d is float:
        return _default_float
    if d is int:
        return int64
    if d is bool:
        return bool_
    try:
        nd = np.dtype(d)
    except TypeError:
        raise TypeError(f"cannot interpret {d!r} as a neetorch dtype") from None
    try:
        return _BY_NP[nd]
    except KeyError:
        raise TypeError(f"numpy dtype {nd} has no neetorch equivalent; supported: "
                        f"{', '.join(x.name for x in ALL_DTYPES)}") from None


def _promote_pair(a: DType, b: DType) -> DType:
    if a is b:
        return a
    if a.category == 0:
        return b
    if b.category == 0:
        return a
    if a.category == 2 or b.category == 2:
        if a.category == 2 and b.category == 2:
            return a if a._rank > b._rank else b
        return a if a.category == 2 else b
    # both integers
    if a is uint8 or b is uint8:
        other = b if a is uint8 else a
        return int16 if other is int8 else other
    return a if a._rank > b._rank else b


_PROMOTE = {(a, b): _promote_pair(a, b) for a in ALL_DTYPES for b in ALL_DTYPES}


def promote_types(a, b) -> DType:
    return _PROMOTE[to_dtype(a), to_dtype(b)]


def _combine(higher: DType | None, lower: DType | None) -> DType | None:
    if higher is None:
        return lower
    if higher.category == 2:
        return higher
    if lower is not None and (higher.category == 0 or lower.category == 2):
        return _PROMOTE[higher, lower]
    return higher


def scalar_dtype(v) -> DType:
    """The dtype a Python scalar takes when it stands alone (wrapped number)."""
    if isinstance(v, (bool, np.bool_)):
        return bool_
    if isinstance(v, (int, np.integer)):
        return int64
    if isinstance(v, (float, np.floating)):
        return _default_float
    raise TypeError(f"unsupported scalar type {type(v).__name__}")


def result_type(*operands) -> DType:
    """torch.result_type over tensors and Python scalars."""
    dim_r = zero_r = wrap_r = None
    for x in operands:
        dt = getattr(x, "_dtype", None)
        if dt is None:
            if x is None:
                continue
            d = scalar_dtype(x)
            wrap_r = d if wrap_r is None else _PROMOTE[wrap_r, d]
        elif x._data.ndim == 0:
            zero_r = dt if zero_r is None else _PROMOTE[zero_r, dt]
        else:
            dim_r = dt if dim_r is None else _PROMOTE[dim_r, dt]
    r = _combine(dim_r, _combine(zero_r, wrap_r))
    if r is None:
        raise TypeError("result_type: no operands")
    return r


def from_numpy_dtype(nd) -> DType:
    try:
        return _BY_NP[nd]
    except KeyError:
        raise TypeError(f"numpy dtype {nd} has no neetorch equivalent; supported: "
                        f"{', '.join(x.name for x in ALL_DTYPES)}") from None


def scalar_overflows(v, dt: DType) -> bool:
    """True when torch refuses to convert the Python scalar ``v`` to ``dt`` (``c10::overflows``): fill values,
    masked_fill/index_fill/setitem values, clamp bounds. Arithmetic with a scalar wraps instead."""
    if dt.category == 0 or isinstance(v, (bool, np.bool_)) or dt.name == "float16":
        return False   # torch.full(..., 1e6, dtype=float16) gives inf rather than an error
    if isinstance(v, (int, np.integer)):
        v = int(v)
        hi = int(np.iinfo(dt.np).max) if dt.category == 1 else float(np.finfo(dt.np).max)
        if dt.category == 1 and not dt.is_signed:
            return v > hi or (v < 0 and -v > hi)   # unsigned: negatives wrap (two's complement) when -v <= max
        lo = int(np.iinfo(dt.np).min) if dt.category == 1 else -hi
        return v < lo or v > hi
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if dt.category == 2 and (v != v or v in (float("inf"), float("-inf"))):
            return False
        if v != v:
            return True
        info = np.iinfo(dt.np) if dt.category == 1 else np.finfo(dt.np)
        return v < float(info.min) or v > float(info.max)
    return False


def check_scalar(v, dt: DType, op: str):
    """Raise torch's error when the scalar ``v`` cannot be converted to ``dt`` without overflow."""
    if scalar_overflows(v, dt):
        raise RuntimeError(f"{op}: value {v!r} cannot be converted to type {dt.name} without overflow")
    return v


def fit_scalar(v, dt: DType, op: str):
    """``v`` checked like :func:`check_scalar`, with negative ints wrapped for unsigned ``dt`` (torch: uint8 -1 -> 255)."""
    check_scalar(v, dt, op)
    if dt.category == 1 and not dt.is_signed and isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v < 0:
        return int(v) + (1 << (8 * dt.itemsize))
    return v
