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
    "complex64", "complex128", "COMPLEX_DTYPES",
]


class DTypeNotImplementedError(TypeError, NotImplementedError):
    """An op refusing a dtype: torch raises NotImplementedError (a RuntimeError: '"bitwise_and_cpu" not implemented
    for 'Float''); neetorch's earlier TypeError is kept as a base, so ``except`` on any of the three catches it."""


class DType:
    __slots__ = ("name", "np", "itemsize", "category", "is_signed", "_rank")

    def __init__(self, name: str, np_dtype, category: int, rank: int):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.category = category  # 0 bool, 1 integer, 2 floating, 3 complex
        self.is_signed = category >= 2 or (category == 1 and self.np.kind == "i")
        self._rank = rank

    @property
    def is_floating_point(self) -> bool:
        return self.category == 2

    @property
    def is_complex(self) -> bool:
        return self.category == 3

    @property
    def is_integer(self) -> bool:
        return self.category == 1

    @property
    def is_bool(self) -> bool:
        return self.category == 0

    def to_complex(self) -> "DType":
        """torch.dtype.to_complex: the complex dtype with this float dtype's components (float16's complex32 does
        not exist in neetorch)."""
        if self.category == 3:
            return self
        to = {"float32": "complex64", "bfloat16": "complex64", "float64": "complex128"}.get(self.name)
        if to is None:
            if self.name == "float16":
                raise DTypeNotImplementedError("to_complex: float16's complex dtype is complex32, which neetorch "
                                               "does not support")
            raise RuntimeError(f"Unknown Complex ScalarType for {self.name}")
        return _BY_NAME[to]

    def to_real(self) -> "DType":
        """torch.dtype.to_real: a complex dtype's component dtype; any other dtype itself."""
        return {"complex64": float32, "complex128": float64}.get(self.name, self)

    def __repr__(self) -> str:
        return f"neetorch.{self.name}"

    def __reduce__(self):
        return (to_dtype, (self.name,))

    # finfo/iinfo-like helpers used by reductions and clamps
    @property
    def min(self):
        return finfo_np(self.np).min if self.category == 2 else (np.iinfo(self.np).min if self.category == 1 else False)

    @property
    def max(self):
        return finfo_np(self.np).max if self.category == 2 else (np.iinfo(self.np).max if self.category == 1 else True)


bool_ = DType("bool", np.bool_, 0, 0)
uint8 = DType("uint8", np.uint8, 1, 1)
int8 = DType("int8", np.int8, 1, 2)
int16 = DType("int16", np.int16, 1, 3)
int32 = DType("int32", np.int32, 1, 4)
int64 = DType("int64", np.int64, 1, 5)
float16 = DType("float16", np.float16, 2, 6)
float32 = DType("float32", np.float32, 2, 7)
float64 = DType("float64", np.float64, 2, 8)

# bfloat16 (torch.bfloat16): stored in numpy arrays of ``ml_dtypes.bfloat16`` (numpy casts them to and from
# float32 rounding to nearest even, like torch).  Without the ml_dtypes package there is no bfloat16:
# ``nee.bfloat16`` / ``to_dtype("bfloat16")`` then raise BFLOAT16_MISSING.
try:
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    _ml_dtypes = None
BFLOAT16_MISSING = "neetorch.bfloat16 needs the ml_dtypes package (pip install ml_dtypes)"
bfloat16 = DType("bfloat16", _ml_dtypes.bfloat16, 2, 6) if _ml_dtypes is not None else None

# complex: category 3; stored as numpy complex64/complex128 (interleaved real, imag)
complex64 = DType("complex64", np.complex64, 3, 9)
complex128 = DType("complex128", np.complex128, 3, 10)
COMPLEX_DTYPES = (complex64, complex128)

ALL_DTYPES = (bool_, uint8, int8, int16, int32, int64, float16, float32, float64, complex64, complex128)
FLOAT_DTYPES = (float16, float32, float64)
INT_DTYPES = (uint8, int8, int16, int32, int64)
if bfloat16 is not None:
    ALL_DTYPES += (bfloat16,)
    FLOAT_DTYPES += (bfloat16,)

# Storage dtypes computed in float32: Numba (and numpy's own loops) have no float16/bfloat16 arithmetic,
# so CPU kernels widen these to float32, compute, and round each op's result back (like torch's CPU
# kernels, whose "opmath" type for Half/BFloat16 is float).  The one test for "widen to float32" is
# ``compute_dtype`` / ``compute_np`` / ``is_low_np``, not a per-dtype check.
LOW_FLOATS = (float16,) + ((bfloat16,) if bfloat16 is not None else ())
LOW_NP = tuple(d.np for d in LOW_FLOATS)
_F32_NP = np.dtype(np.float32)


def compute_dtype(d: DType) -> DType:
    """The dtype kernels compute ``d`` in: float32 for the storage-only floats (float16, bfloat16)."""
    return float32 if d in LOW_FLOATS else d


def is_low_np(npdt) -> bool:
    """True for a numpy dtype that kernels widen to float32 (float16, bfloat16)."""
    return npdt in LOW_NP


def compute_np(npdt):
    """The numpy dtype kernels compute an array of ``npdt`` in (float32 for float16/bfloat16)."""
    return _F32_NP if npdt in LOW_NP else npdt


# set by the CPU backend (devices/cpu/elementwise.py): ``convert(dst, src)`` writes numpy array ``src`` into
# ``dst`` (same shape) converted by a generated kernel, float16/bfloat16 widened / rounded to nearest even in
# vector registers (numpy's own float16 conversions go element by element: ~10x slower); None: numpy
_CONVERT = [None]
_CONVERT_MIN = 4096   # elements from which the kernel is worth its launch


def widen(a):
    """``a`` as an array kernels can compute on: float16/bfloat16 widened to a float32 copy, others as is."""
    if a.dtype not in LOW_NP:
        return a
    f = _CONVERT[0]
    if f is not None and a.size >= _CONVERT_MIN and type(a) is np.ndarray:
        out = np.empty_like(a, dtype=np.float32)   # (astype's layout: order "K")
        f(out, a)
        return out
    return a.astype(np.float32)


def via_f32(src_np, dst_np) -> bool:
    """Whether converting ``src_np`` values to ``dst_np`` goes through float32 first: torch narrows every
    wider value (float64, int64, ...) to float16/bfloat16 as ``Half(float(x))`` -- two roundings
    (1 + 2**-11 + 2**-40 becomes 1.0, not numpy's single-rounded 1 + 2**-10)."""
    return dst_np in LOW_NP and src_np not in LOW_NP and src_np != _F32_NP and src_np.kind in "fiub"


def astype_low(a, dst_np):
    """``a.astype(dst_np)`` with torch's narrowing to float16/bfloat16 (through float32, :func:`via_f32`)."""
    dst_np = np.dtype(dst_np)
    with np.errstate(over="ignore", invalid="ignore"):
        if via_f32(a.dtype, dst_np):
            a = a.astype(np.float32)
        return a.astype(dst_np, copy=False)


def scalar_low(v, dt):
    """Python / numpy real scalar ``v`` as torch stores it into ``dt``: through float32 for float16/bfloat16."""
    if dt.np in LOW_NP and isinstance(v, (float, int, np.floating, np.integer)) and not isinstance(v, bool):
        with np.errstate(over="ignore", invalid="ignore"):
            return float(np.float32(v))
    return v


def copy_into(dst, src) -> None:
    """``np.copyto(dst, src, casting="unsafe")`` (overflow to inf silently, as torch), with conversions to and
    from float16/bfloat16 through the CPU backend's kernels (see ``_CONVERT``); wider values narrow to
    float16/bfloat16 through float32 as torch's do (:func:`via_f32`)."""
    if isinstance(src, np.ndarray) and via_f32(src.dtype, dst.dtype):
        src = astype_low(src, np.float32)
    f = _CONVERT[0]
    if f is not None and dst.size >= _CONVERT_MIN and dst.dtype != src.dtype and \
            (dst.dtype in LOW_NP or src.dtype in LOW_NP) and type(dst) is np.ndarray and type(src) is np.ndarray:
        f(dst, src)
        return
    with np.errstate(over="ignore", invalid="ignore"):
        np.copyto(dst, src, casting="unsafe")


def finfo_np(npdt):
    """``np.finfo`` that also knows bfloat16 (numpy's finfo refuses ml_dtypes types)."""
    if bfloat16 is not None and npdt == bfloat16.np:
        return _ml_dtypes.finfo(npdt)
    return np.finfo(npdt)

_BY_NP = {d.np: d for d in ALL_DTYPES}
_BY_NAME = {d.name: d for d in ALL_DTYPES}
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "long": int64, "int": int32,
                 "short": int16, "bool_": bool_})
_BY_NAME.update({"cfloat": complex64, "cdouble": complex128})

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
            if d == "bfloat16":
                raise TypeError(BFLOAT16_MISSING) from None
            raise TypeError(f"unknown dtype name {d!r}; known: {sorted(_BY_NAME)}") from None
    if d is float:
        return _default_float
    if d is int:
        return int64
    if d is bool:
        return bool_
    if d is complex:
        return default_complex_dtype()
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
    if a in LOW_FLOATS and b in LOW_FLOATS:
        return float32   # float16 + bfloat16: neither holds the other (torch: float32)
    if a.category == 3 or b.category == 3:
        # complex wins; its component width is the wider of the two (float64 + complex64 -> complex128)
        if a.category == 3 and b.category == 3:
            return a if a._rank > b._rank else b
        c, o = (a, b) if a.category == 3 else (b, a)
        return complex128 if c is complex128 or o is float64 else c
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


def promote_types(type1, type2) -> DType:
    return _PROMOTE[to_dtype(type1), to_dtype(type2)]


def _combine(higher: DType | None, lower: DType | None) -> DType | None:
    if higher is None:
        return lower
    if lower is not None and lower.category == 3 and higher.category == 2:
        # torch's combine_categories keeps the floating operand's width: toComplexType(higher)
        return to_complex(higher, "result_type")
    if higher.category >= 2:
        return higher
    if lower is not None and (higher.category == 0 or lower.category >= 2):
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
    if isinstance(v, (complex, np.complexfloating)):
        return default_complex_dtype()
    raise TypeError(f"unsupported scalar type {type(v).__name__}")


def default_complex_dtype() -> DType:
    """torch's default complex dtype follows the default float dtype (float64 -> complex128)."""
    return complex128 if _default_float is float64 else complex64


def to_complex(d: DType, op: str = "") -> DType:
    """torch's toComplexType: the complex dtype whose components have ``d``'s width."""
    if d.category == 3:
        return d
    if d is float64:
        return complex128
    if d is float16:
        raise DTypeNotImplementedError(f"{op}: the result would be complex32 (float16 components), which neetorch does not "
                        f"support; cast the float16 operand to float32 first")
    return complex64


def to_real(d: DType) -> DType:
    """The dtype of a complex dtype's components (complex64 -> float32); other dtypes unchanged."""
    return {"complex64": float32, "complex128": float64}.get(d.name, d)


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
    if isinstance(v, (complex, np.complexfloating)):
        # torch: a complex value with a nonzero imaginary part does not convert to a real dtype
        return dt.category not in (0, 3) and v.imag != 0   # (to bool: nonzero, like torch's full_like)
    if dt.category == 0 or isinstance(v, (bool, np.bool_)) or dt.category == 3:
        return False   # (torch's one-element full/fill_ of float16/bfloat16 skips the check: creation._new, fill_)
    if isinstance(v, (int, np.integer)):
        v = int(v)
        hi = int(np.iinfo(dt.np).max) if dt.category == 1 else float(finfo_np(dt.np).max)
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
        info = np.iinfo(dt.np) if dt.category == 1 else finfo_np(dt.np)
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
    v = scalar_low(v, dt)
    if dt.category == 1 and not dt.is_signed and isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v < 0:
        return int(v) + (1 << (8 * dt.itemsize))
    return v
