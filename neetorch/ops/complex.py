"""Complex tensors (``complex64`` / ``complex128``): what runs, how, and what is refused.

Complex tensors live on the CPU only (other backends have no complex storage: a transfer or an allocation
there raises).  Their elementwise ops, sums and scans are computed with numpy, which implements complex
arithmetic and the C99 complex functions (the generated Numba/LLVM kernels do not); views, copies,
indexing, concatenation and products take the CPU backend's ordinary paths, which are numpy/BLAS based, and
the matrix decompositions and solvers (``nee.linalg``, ``ops/lapack.py``) run LAPACK's complex routines.

Every op of the op table that is not known to be right for complex operands refuses them before any kernel
runs (:func:`install_guard` wraps each such op's ``check``): a clear ``NotImplementedError`` (a
``RuntimeError``, as in torch) naming the op and the dtype, never a wrong answer or a kernel crash.
Complex values are eager only: ``nee.jit`` / tracing refuses them (the fused renderers have no complex type).

Also here: ``real``, ``imag`` (views, as in torch), ``conj``, ``angle``, ``sgn``, ``view_as_real``,
``view_as_complex`` (views), ``complex``, ``polar``, ``is_complex``.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor
from .registry import OPS, _trace_hook, export

__all__ = [
    "COMPLEX_ELEMENTWISE",
    "COMPLEX_OTHER",
    "angle",
    "complex",
    "conj",
    "imag",
    "install_guard",
    "is_complex",
    "launch_complex",
    "polar",
    "real",
    "sgn",
    "view_as_complex",
    "view_as_real",
]


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _where(c, a, b):
    return np.where(c, a, b)


def _addcmul(a, b, c, v):
    return a + v * b * c


def _addcdiv(a, b, c, v):
    return a + v * b / c


def _log1p(z):
    """torch's CPU complex ``log1p`` (c10's complex_math, after numpy PR 22611): ``log(u) * (z / (u - 1))`` with
    ``u = 1 + z`` (Kahan's trick: the factor undoes the rounding of ``1 + z``), ``z`` where ``u == 1`` and
    ``log(u)`` where ``u - 1 == z``.  numpy's complex ``log1p`` is ``log(|1 + z|)``, which loses the real part for
    ``|z| << 1`` (relative error ~1 at ``|z| = 1e-8`` in complex64).  Where ``u - 1`` is subnormal both operands
    of the ratio are scaled by a power of two first (exact): torch's division overflows there and gives NaN."""
    z = np.asarray(z)
    if z.dtype.kind != "c":
        return np.log1p(z)
    u = np.empty_like(z)
    u.real, u.imag = z.real + 1, z.imag      # (a real 1: the sign of a zero imaginary part is kept, as in c10)
    d = np.empty_like(z)
    d.real, d.imag = u.real - 1, u.imag
    lu = np.log(u)
    tiny = np.maximum(np.abs(d.real), np.abs(d.imag)) < np.finfo(z.dtype).tiny
    zs, ds = z, d
    if tiny.any():
        s = z.dtype.type(2.0 ** (80 if z.dtype == np.complex64 else 600))
        zs, ds = np.where(tiny, z * s, z), np.where(tiny, d * s, d)
    r = lu * (zs / ds)
    r = np.where(d == z, lu, r)
    return np.where(u == 1, z, r)


def _lerp(a, b, w):
    # torch's lerp (LerpKernel.cpp's lerp_vec): from the nearer end, so lerp(a, b, 1) is exactly b; a complex
    # weight is "small" where |w|^2 = re^2 + im^2 < 0.25 in the component dtype (no sqrt, as torch); then
    # base + coeff * (b - a) with (coeff, base) = (w, a) or (w - 1, b)
    # (torch's AVX2 complex64 vector loop reads the mask of the even element of each pair for both: a torch
    # quirk, not followed).  The product is the plain one of torch's vector complex multiply, each component
    # rounded (ac - bd, ad + bc); numpy's complex64 multiply rounds differently.
    a, b, w = np.asarray(a), np.asarray(b), np.asarray(w)
    d = b - a
    if w.dtype.kind != "c":
        small = np.abs(w) < 0.5
        return np.where(small, a + w * d, b + (w - 1) * d)
    re, im = w.real, w.imag
    small = re * re + im * im < re.dtype.type(0.25)
    cr = np.where(small, re, re - re.dtype.type(1))
    base = np.where(small, a, b)
    out = np.empty(np.broadcast_shapes(a.shape, b.shape, w.shape), np.result_type(a, b, w))
    out.real = base.real + (cr * d.real - im * d.imag)
    out.imag = base.imag + (cr * d.imag + im * d.real)
    return out


#: elementwise ops that accept complex operands: op name -> numpy function of the operands (already cast to
#: the op's compute dtype).  The list is torch's (see tests/test_complex_fft.py); the rest refuse complex.
COMPLEX_ELEMENTWISE = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "true_divide": np.true_divide, "pow": np.power,
    "neg": np.negative, "square": np.square, "reciprocal": np.reciprocal, "abs": np.abs,
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10,
    "log1p": _log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "sigmoid": _sigmoid, "silu": lambda x: x * _sigmoid(x),
    "eq": np.equal, "ne": np.not_equal, "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
    "logical_not": np.logical_not, "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor, "where": _where, "cast": lambda x: x,
    "addcmul": _addcmul, "addcdiv": _addcdiv, "lerp": _lerp,
}

#: other ops of the op table whose CPU kernels are numpy/BLAS paths that are right for complex (checked
#: against torch in tests/test_complex_fft.py); sum/mean/prod/any/all/count_nonzero/cumsum/cumprod are
#: computed with numpy by their frontends (ops/reduction.py).
COMPLEX_OTHER = frozenset({
    "matmul", "einsum", "cat", "flip", "roll", "repeat", "index", "index_select", "take", "masked_select",
    "tril", "triu", "sum", "mean", "prod", "any", "all", "count_nonzero", "cumsum", "cumprod", "nonzero",
    "diag_embed", "gather", "index_put", "repeat_interleave", "pad", "masked_scatter",
    # the LAPACK family (ops/lapack.py): numpy.linalg's complex LAPACK routines and the complex-aware batched
    # LU / triangular solves of devices/cpu/kernels/lapack.py (checked against torch in
    # tests/test_complex_linalg_s10.py)
    "linalg_det", "linalg_slogdet", "linalg_inv_ex", "linalg_solve_ex", "linalg_cholesky_ex", "linalg_qr",
    "linalg_svd", "linalg_svdvals", "linalg_eigh", "linalg_eigvalsh", "linalg_eig", "linalg_eigvals",
    "linalg_lstsq", "linalg_lu_factor_ex", "lu_unpack", "linalg_lu_solve", "linalg_solve_triangular",
    "linalg_matrix_exp", "geqrf", "linalg_ldl_factor_ex", "linalg_ldl_solve",
    # scatter (+ sum/prod/mean reduce; amax/amin refused in its dtype rule, as torch does) and index_add /
    # index_copy / index_fill: numpy's ufunc.at and fancy assignment (tests/test_torch_parity_s12.py)
    "scatter", "index_reduce_dim",
})


def _eager_only(name: str) -> None:
    if _trace_hook[0] is not None:
        raise NotImplementedError(f"{name}: complex tensors are eager only; nee.jit / tracing does not support "
                                  f"complex64/complex128 values")


def _complex_error(name: str, dt) -> NotImplementedError:
    return NotImplementedError(f"{name}: not implemented for complex tensors (got {dt.name}); the ops that take "
                               f"complex operands are listed in neetorch.ops.complex (COMPLEX_ELEMENTWISE, "
                               f"COMPLEX_OTHER)")


def launch_complex(op, out: np.ndarray, ins: list) -> None:
    """The CPU kernel of elementwise ``op`` when an operand or the result is complex: numpy."""
    _eager_only(op.name)
    fn = COMPLEX_ELEMENTWISE.get(op.name)
    if fn is None:
        raise _complex_error(op.name, _dt.from_numpy_dtype(next(a.dtype for a in [out] + ins if a.dtype.kind == "c")))
    if op.name == "abs" and out.dtype.kind == "c":
        raise RuntimeError("In-place abs is not supported for complex tensors.")
    from .elementwise import ew_dtypes
    comp, _ = ew_dtypes(op.ew, [_dt.from_numpy_dtype(a.dtype) for a in ins])
    args = [a if a.dtype == c.np else a.astype(c.np) for a, c in zip(ins, comp)]
    with np.errstate(all="ignore"):
        r = fn(*args)
    if np.iscomplexobj(r) and out.dtype.kind != "c":
        # torch's copy_/to(): "Casting complex values to real discards the imaginary part"
        warnings.warn("Casting complex values to real discards the imaginary part", UserWarning, stacklevel=5)
        r = np.real(r)
    with np.errstate(all="ignore"):
        np.copyto(out, r, casting="unsafe")


def _refusing_infer(op):
    # the refusal belongs to the op's dtype rule: eager dispatch, tracing and compiled graphs all ask it, and an
    # elementwise op on real tensors with a prepared launch plan never calls it (no cost on the fast path)
    inner, name = op.infer, op.name

    def infer(metas, attrs):
        for m in metas:
            if m.dtype.category == 3:
                raise _complex_error(name, m.dtype)
        return inner(metas, attrs)
    infer.refuses_complex = True
    infer.__wrapped__ = inner
    return infer


def install_guard() -> None:
    """Make every op not listed in COMPLEX_ELEMENTWISE / COMPLEX_OTHER refuse complex operands in its dtype rule
    (idempotent: called once the op table is complete; call again after registering more ops)."""
    for name, op in OPS.items():
        if name in COMPLEX_ELEMENTWISE or name in COMPLEX_OTHER:
            continue
        if getattr(op.infer, "refuses_complex", False):
            continue
        op.infer = _refusing_infer(op)


# ------------------------------------------------------------------ the user functions
def _as_tensor(x, name):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(x).__name__}")
    return x


def _cpu_array(t: Tensor, name: str) -> np.ndarray:
    _eager_only(name)
    if t._device.type != "cpu":
        raise RuntimeError(f"{name}: complex tensors live on the CPU only; got a tensor on {t._device}")
    return t._data


def _wrap(a: np.ndarray, like: Tensor) -> Tensor:
    return Tensor._make(a, like._device, _dt.from_numpy_dtype(a.dtype))


@export
def real(input) -> Tensor:
    """``torch.real``: the real part, a view sharing storage (the tensor itself for real dtypes)."""
    _as_tensor(input, "real")
    if input._dtype.category != 3:
        return input
    return _wrap(_cpu_array(input, "real").real, input)


@export
def imag(input) -> Tensor:
    """``torch.imag``: the imaginary part, a view sharing storage (complex tensors only, as in torch)."""
    _as_tensor(input, "imag")
    if input._dtype.category != 3:
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return _wrap(_cpu_array(input, "imag").imag, input)


@export
def conj(input) -> Tensor:
    """``torch.conj``: the complex conjugate (the tensor itself for real dtypes).  torch returns a lazy view
    with a conjugate bit; neetorch returns a new tensor (writes to it do not reach ``input``)."""
    _as_tensor(input, "conj")
    if input._dtype.category != 3:
        return input
    return _wrap(np.conj(_cpu_array(input, "conj")), input)


@export
def conj_physical(input) -> Tensor:
    """``torch.conj_physical``: the complex conjugate, materialized (the tensor itself for real dtypes)."""
    _as_tensor(input, "conj_physical")
    if input._dtype.category != 3:
        return input
    return conj(input)


@export
def resolve_conj(input) -> Tensor:
    """``torch.resolve_conj``: neetorch has no lazy conjugation, so the tensor itself."""
    return _as_tensor(input, "resolve_conj")


@export
def resolve_neg(input) -> Tensor:
    return _as_tensor(input, "resolve_neg")


@export
def is_conj(input) -> bool:
    """Always False: neetorch's ``conj`` materializes."""
    _as_tensor(input, "is_conj")
    return False


@export
def is_complex(input) -> bool:
    return _as_tensor(input, "is_complex")._dtype.category == 3


@export
def angle(input, *, out=None) -> Tensor:
    """``torch.angle``: the argument of complex values (real result); for real input 0 or pi (NaN kept),
    integers promoted to the default float dtype."""
    _as_tensor(input, "angle")
    dt = input._dtype
    if dt.category == 3:
        r = _wrap(np.angle(_cpu_array(input, "angle")), input)
    else:
        from .elementwise import _BIN, apply, where
        x = input if dt.category == 2 else input.to(_dt.get_default_dtype())
        if dt is _dt.bool_:
            x = input.to(_dt.get_default_dtype())
        r = apply(_BIN["mul"], apply(_BIN["lt"], x, 0).to(x._dtype), math.pi)
        r = where(x.isnan(), x, r)
    if out is not None:
        from .registry import _write_result       # (resized, and cast where torch casts)
        return _write_result(r, out, "angle")
    return r


@export(inplace=True)
def sgn(input) -> Tensor:
    """``torch.sgn``: ``x / |x|`` for complex values (0 at 0), ``sign`` for real ones."""
    _as_tensor(input, "sgn")
    if input._dtype.category != 3:
        return input.sign()
    a = _cpu_array(input, "sgn")
    with np.errstate(all="ignore"):
        m = np.abs(a)
        r = np.where(m == 0, 0, a / np.where(m == 0, 1, m)).astype(a.dtype)
    return _wrap(r, input)


@export(method=False)
def view_as_real(input) -> Tensor:
    """``torch.view_as_real``: a complex tensor as a real one with a trailing dim of 2 (real, imag); a view."""
    _as_tensor(input, "view_as_real")
    if input._dtype.category != 3:
        raise RuntimeError(f"view_as_real is only supported for complex tensors (got {input._dtype.name})")
    a = _cpu_array(input, "view_as_real")
    r = a.real   # a view with a's strides (bytes)
    v = np.lib.stride_tricks.as_strided(r, a.shape + (2,), a.strides + (r.itemsize,),
                                        writeable=a.flags.writeable)
    return _wrap(v, input)


@export(method=False)
def view_as_complex(input) -> Tensor:
    """``torch.view_as_complex``: a float32/float64 tensor whose last dim is 2 (stride 1) as a complex tensor
    over the same storage."""
    _as_tensor(input, "view_as_complex")
    dt = input._dtype
    if dt not in (_dt.float32, _dt.float64):
        raise RuntimeError(f"view_as_complex is only supported for float and double tensors, but got a tensor of "
                           f"scalar type: {dt.name}")
    if input.ndim == 0 or input.shape[-1] != 2:
        raise RuntimeError(f"Tensor must have a last dimension of size 2 (got shape {tuple(input.shape)})")
    st = input.stride()
    if st[-1] != 1:
        raise RuntimeError(f"Tensor must have a last dimension with stride 1 (got strides {st})")
    if any(s % 2 for s in st[:-1]):
        raise RuntimeError(f"Tensor must have a stride divisible by 2 for all but last dimension (got strides {st})")
    if input.storage_offset() % 2:
        raise RuntimeError("Tensor must have a storage_offset divisible by 2")
    a = _cpu_array(input, "view_as_complex")
    cdt = np.dtype(np.complex64 if dt is _dt.float32 else np.complex128)

    class _Span:
        __slots__ = ("__array_interface__", "_keep")
    h = _Span()
    h.__array_interface__ = {"data": (a.__array_interface__["data"][0], not a.flags.writeable),
                             "shape": a.shape[:-1], "strides": a.strides[:-1], "typestr": cdt.str, "version": 3}
    h._keep = a
    return _wrap(np.asarray(h), input)


def _real_pair(name, a, b, what):
    for n, x in (("real", a), ("imag", b)) if what == "complex" else (("abs", a), ("angle", b)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{name}(): argument '{n}' must be Tensor, not {type(x).__name__}")
    if a._dtype is not b._dtype:
        raise RuntimeError(f"{name}: Expected object of scalar type {a._dtype.name} but got scalar type "
                           f"{b._dtype.name} for second argument")
    if a._dtype is _dt.float16:
        _dt.to_complex(a._dtype, name)   # raises: torch would make complex32
    if a._dtype not in (_dt.float32, _dt.float64):
        raise RuntimeError(f"{name}: expected both inputs to be float or double tensors but got {a._dtype.name} "
                           f"and {b._dtype.name}")
    from .shape_rules import broadcast_shapes
    shape = broadcast_shapes(tuple(a.shape), tuple(b.shape), op=name)
    return _cpu_array(a, name), _cpu_array(b, name), shape


def _pair_out(t: Tensor, out):
    """out= of complex / polar: torch's rule (the result's complex dtype exactly; another shape resized)."""
    if out is None:
        return t
    if not isinstance(out, Tensor):
        raise TypeError(f"argument 'out' must be Tensor, not {type(out).__name__}")
    if out._dtype is not t._dtype:
        from ..tensor.tensor import _LEGACY_TYPE
        raise RuntimeError(f"Expected object of scalar type {_LEGACY_TYPE[t._dtype.name]} but got scalar type "
                           f"{_LEGACY_TYPE.get(out._dtype.name, out._dtype.name)} for argument 'out'")
    from .elementwise import resize_out
    resize_out(out, t.shape, "out=")
    return out.copy_(t)


@export(method=False)
def complex(real, imag, *, out=None) -> Tensor:   # (shadows the builtin: torch's name)
    """``torch.complex(real, imag)``: float32 -> complex64, float64 -> complex128 (same dtype required)."""
    ra, ia, shape = _real_pair("complex", real, imag, "complex")
    cdt = _dt.to_complex(real._dtype)
    r = np.empty(shape, cdt.np)
    r.real = ra
    r.imag = ia
    return _pair_out(_wrap(r, real), out)


@export(method=False)
def polar(abs, angle, *, out=None) -> Tensor:   # (torch's argument names)
    """``torch.polar(abs, angle)``: ``abs * (cos(angle) + i sin(angle))``."""
    ra, aa, shape = _real_pair("polar", abs, angle, "polar")
    cdt = _dt.to_complex(abs._dtype)
    r = np.empty(shape, cdt.np)
    r.real = ra * np.cos(aa)
    r.imag = ra * np.sin(aa)
    return _pair_out(_wrap(r, abs), out)


# ------------------------------------------------------------------ reductions and scans (ops/reduction.py)
def reduce_complex(name: str, x: Tensor, dims: tuple, keepdim: bool, odt) -> Tensor:
    """sum / mean / prod / any / all / count_nonzero of a complex tensor, with numpy."""
    a = _cpu_array(x, name)
    with np.errstate(all="ignore"):
        if name in ("sum", "mean", "prod"):
            fn = {"sum": np.sum, "mean": np.mean, "prod": np.prod}[name]
            r = fn(a, axis=dims, keepdims=keepdim)
            if odt is not None:
                r = np.real(r) if _dt.to_dtype(odt).category != 3 else r
                r = np.asarray(r).astype(_dt.to_dtype(odt).np)
        elif name == "count_nonzero":
            r = np.count_nonzero(a, axis=dims, keepdims=keepdim).astype(np.int64)
        elif name in ("any", "all"):
            r = (np.any if name == "any" else np.all)(a, axis=dims, keepdims=keepdim)
        else:
            raise _complex_error(name, x._dtype)
    return _wrap(np.array(r, order="C"), x)


def scan_complex(name: str, x: Tensor, dim: int, odt) -> Tensor:
    a = _cpu_array(x, name)
    if name not in ("cumsum", "cumprod"):
        raise _complex_error(name, x._dtype)
    with np.errstate(all="ignore"):
        r = (np.cumsum if name == "cumsum" else np.cumprod)(a, axis=dim) if a.ndim else a.copy()
    if odt is not None:
        r = r.astype(_dt.to_dtype(odt).np)
    return _wrap(np.array(r, order="C"), x)


# ------------------------------------------------------------------ frontends written for real dtypes
# A few frontends of other modules compose ops in ways that are only right for real values (vdot does not
# conjugate, adjoint does not conjugate, cov casts to a real dtype).  Their complex forms are given here, in
# the export table, so ``nee.<name>`` and ``Tensor.<name>`` pick them up.
from . import compat
from . import indexing as _indexing
from . import lapack as _lapack
from . import linalg as _linalg
from .registry import EXPORTS

assert compat   # (imported for its exports, which the overrides below wrap)

# torch's names of the complex dtypes in the message tables of those modules (their errors name dtypes)
for _tbl, _names in ((_linalg._CAP, ("ComplexFloat", "ComplexDouble")), (_lapack._CAP, ("ComplexFloat", "ComplexDouble")),
                     (_indexing._TNAME, ("ComplexFloat", "ComplexDouble")),
                     (_linalg._LOWER, ("c10::complex<float>", "c10::complex<double>")),
                     (_lapack._LOWER, ("c10::complex<float>", "c10::complex<double>"))):
    _tbl.setdefault("complex64", _names[0])
    _tbl.setdefault("complex128", _names[1])


def _override(name, complex_fn):
    fn, method, function, inplace = EXPORTS[name]

    def f(input, *args, **kw):
        if isinstance(input, Tensor) and input._dtype.category == 3:
            return complex_fn(fn, input, *args, **kw)
        return fn(input, *args, **kw)
    f.__name__, f.__doc__ = fn.__name__, fn.__doc__
    EXPORTS[name] = (f, method, function, inplace)


def _refuse(fn, input, *args, **kw):
    raise _complex_error(fn.__name__, input._dtype)


_override("vdot", lambda fn, input, other, **kw: fn(conj(input), other, **kw))   # sum(conj(a) * b)
_override("adjoint", lambda fn, input: conj(fn(input)))                           # conjugate transpose
_override("isreal", lambda fn, input: imag(input) == 0)                            # real where imag is 0


def _conj_physical_(fn, input):
    input._assign(conj(input))   # in place: the conjugate written back (views see it, as in torch)
    return input


_override("conj_physical_", _conj_physical_)
