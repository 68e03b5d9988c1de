"""Matrix decompositions and solvers: ``torch.linalg``'s LAPACK family and the old top-level API.

The ops (one definition each, shape/dtype rule here, CPU kernels in
``devices/cpu/kernels/lapack.py``) are the LAPACK-shaped primitives: det, slogdet, inv_ex,
solve_ex, cholesky_ex, qr, svd, svdvals, eigh, eigvalsh, lstsq, lu_factor_ex, lu_unpack,
lu_solve, solve_triangular, matrix_exp, eig, eigvals.  Everything else (pinv, matrix_rank, matrix_power,
cond, cholesky_solve, the old ``torch.svd`` / ``torch.qr`` / ``torch.triangular_solve``, ...)
is composed from them and the elementwise/reduction ops in the frontends below, which also
implement PyTorch's argument rules and messages (vector right-hand sides, ``left=False`` as a
transposed problem, batch broadcasting, the dtype checks).

Other devices have no kernels for these ops: they run on the CPU through the dispatcher's
visible fallback (``nee.fallback_report()``; an error in strict mode).  Errors that depend on
values (a singular matrix, a non-positive-definite one) are raised by the kernels when the op
is asked to (``check_errors``), so eager calls and ``nee.jit`` graphs raise alike.

float32/float64/complex64/complex128 (complex tensors: CPU and eager only, see ``ops/complex.py``), with
torch's conventions: singular values, Hermitian eigenvalues, ``log|det|``, lstsq's residuals and norms
are real; ``eig`` / ``eigvals`` are complex for any input; "transpose" in ``adjoint`` / ``left=False`` /
``pinv`` / the old ``svd``'s V is the conjugate transpose.  ``ldl_factor`` / ``ldl_solve`` of complex matrices
are LAPACK's zsytf2 / zsytrs (complex symmetric) or, with ``hermitian=True``, zhetf2 / zhetrs, ported to Numba
(devices/cpu/kernels/lapack.py).
"""
from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from ..tensor import creation as _creation
from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor
from .registry import EXPORTS, Meta, OpDef, export, register, run
from .shape_rules import broadcast_shapes, wrap_dim

__all__ = [
    "LinAlgError",
    "cholesky",
    "cholesky_inverse",
    "cholesky_solve",
    "det",
    "inverse",
    "logdet",
    "lu_solve",
    "lu_unpack",
    "matrix_exp",
    "matrix_power",
    "pinverse",
    "qr",
    "slogdet",
    "svd",
    "triangular_solve",
]

_CAP = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int32": "Int",
        "int64": "Long",
        "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool"}
_LOWER = {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
          "int32": "int", "int64": "long",
          "int16": "short", "int8": "signed char", "uint8": "unsigned char", "bool": "bool"}


class LinAlgError(RuntimeError):
    """``torch.linalg.LinAlgError``: the input matrix is singular / not positive-definite."""


# ------------------------------------------------------------------ result types (torch.return_types.*)
_RT: dict = {}


def _rt(name, fields):
    if name not in _RT:
        _RT[name] = namedtuple(name, fields)
    return _RT[name]


def _fn(name):
    return EXPORTS[name][0]


# ------------------------------------------------------------------ argument checks (metadata only)
def _tensor(x, op, name="A"):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(x).__name__}")


def _matrix(x, op, name="A"):
    _tensor(x, op, name)
    if x.ndim < 2:
        raise RuntimeError(f"{op}: The input tensor {name} must have at least 2 dimensions.")


def _square(x, op, name="A"):
    _matrix(x, op, name)
    if x.shape[-1] != x.shape[-2]:
        raise RuntimeError(f"{op}: {name} must be batches of square matrices, but they are {x.shape[-2]} by "
                           f"{x.shape[-1]} matrices")


def _floating(x, op, half=None, integer=None):
    """PyTorch's dtype checks: float32/float64 pass; float16 passes when ``half`` is False.  Otherwise
    ``half`` / ``integer`` say which message: None the linalg ones ("Low precision dtypes not
    supported" / "Expected a floating point or complex tensor"), "kernel:<name>" the dispatcher's
    NotImplementedError, any other string that RuntimeError message."""
    name = x._dtype.name
    if name in ("float32", "float64", "complex64", "complex128") or (name in ("float16", "bfloat16")
                                                                     and half is False):
        return
    how = half if name in ("float16", "bfloat16") else integer
    if how is None:
        if name in ("float16", "bfloat16"):
            raise RuntimeError(f"{op}: Low precision dtypes not supported. Got {_CAP[name]}")
        raise RuntimeError(f"{op}: Expected a floating point or complex tensor as input. Got {_CAP[name]}")
    if how.startswith("kernel:"):
        raise NotImplementedError(f"\"{how[7:]}\" not implemented for '{_CAP[name]}'")
    raise RuntimeError(how.format(dtype=_CAP[name], shape=list(x.shape)))


def _rdt(dt):
    """The real dtype of ``dt`` (singular values, eigenvalues of Hermitian matrices, norms, log|det|)."""
    return _dt.to_real(dt) if dt.category == 3 else dt


def _mH(x):
    """The conjugate transpose of the last two dims (the transpose for real dtypes)."""
    x = x.transpose(-2, -1)
    return _fn("conj")(x) if x._dtype.category == 3 else x


def _same_dtype(a, b, op, an="A", bn="B"):
    if a._dtype is not b._dtype:
        raise RuntimeError(f"{op}: Expected {an} and {bn} to have the same dtype, but found {an} of type "
                           f"{_CAP[a._dtype.name]} and {bn} of type {_CAP[b._dtype.name]} instead")


def _is_vector_rhs(a, b) -> bool:
    """torch's linalg_solve_is_vector_rhs: B is a (batch of) vector(s) rather than matrices."""
    return b.ndim == 1 or (b.ndim == a.ndim - 1 and tuple(b.shape) == tuple(a.shape[:-1]))


def _eq(left: bool) -> str:
    return "AX = B" if left else "XA = B"


def _check_rhs(a, b, op, left):
    n = a.shape[-1]
    if (b.shape[-2] if left else b.shape[-1]) != n:
        raise RuntimeError(f"{op}: Incompatible shapes of A and B for the equation {_eq(left)} ({a.shape[-2]}x{n} and "
                           f"{b.shape[-2]}x{b.shape[-1]})")


def _batch(*shapes, op):
    return tuple(broadcast_shapes(*shapes, op=op))


# ------------------------------------------------------------------ the ops
_I32, _I64 = _dt.int32, _dt.int64


def _infer_det(metas, attrs):
    (a,) = metas
    return [Meta(a.shape[:-2], a.dtype)]


def _infer_slogdet(metas, attrs):
    (a,) = metas
    return [Meta(a.shape[:-2], a.dtype), Meta(a.shape[:-2], _rdt(a.dtype))]


def _infer_with_info(metas, attrs):
    (a,) = metas
    return [Meta(a.shape, a.dtype), Meta(a.shape[:-2], _I32)]


def _infer_solve(metas, attrs):
    a, b = metas
    batch = _batch(a.shape[:-2], b.shape[:-2], op="linalg.solve")
    return [Meta(batch + b.shape[-2:], a.dtype), Meta(a.shape[:-2], _I32)]


def _infer_qr(metas, attrs):
    (a,) = metas
    *bt, m, n = a.shape
    bt, k = tuple(bt), min(m, n)
    mode = attrs["mode"]
    if mode == "r":
        return [Meta((0,), a.dtype), Meta(bt + (k, n), a.dtype)]
    if mode == "complete":
        return [Meta(bt + (m, m), a.dtype), Meta(bt + (m, n), a.dtype)]
    return [Meta(bt + (m, k), a.dtype), Meta(bt + (k, n), a.dtype)]


def _infer_svd(metas, attrs):
    (a,) = metas
    *bt, m, n = a.shape
    bt, k = tuple(bt), min(m, n)
    if attrs["full_matrices"]:
        return [Meta(bt + (m, m), a.dtype), Meta(bt + (k,), _rdt(a.dtype)), Meta(bt + (n, n), a.dtype)]
    return [Meta(bt + (m, k), a.dtype), Meta(bt + (k,), _rdt(a.dtype)), Meta(bt + (k, n), a.dtype)]


def _infer_svdvals(metas, attrs):
    (a,) = metas
    return [Meta(a.shape[:-2] + (min(a.shape[-2:]),), _rdt(a.dtype))]


def _infer_eigh(metas, attrs):
    (a,) = metas
    return [Meta(a.shape[:-1], _rdt(a.dtype)), Meta(a.shape, a.dtype)]


def _infer_eigvalsh(metas, attrs):
    (a,) = metas
    return [Meta(a.shape[:-1], _rdt(a.dtype))]


def _infer_eig(metas, attrs):
    (a,) = metas
    c = _dt.to_complex(a.dtype)
    return [Meta(a.shape[:-1], c), Meta(a.shape, c)]


def _infer_eigvals(metas, attrs):
    (a,) = metas
    return [Meta(a.shape[:-1], _dt.to_complex(a.dtype))]


def _infer_lstsq(metas, attrs):
    a, b = metas
    m, n = a.shape[-2:]
    k = b.shape[-1]
    batch = _batch(a.shape[:-2], b.shape[:-2], op="linalg.lstsq")
    driver = attrs["driver"]
    res = batch + (k,) if m > n and driver != "gelsy" else (0,)
    rank = batch if driver != "gels" else (0,)
    sv = batch + (min(m, n),) if driver in ("gelsd", "gelss") else (0,)
    return [Meta(batch + (n, k), a.dtype), Meta(res, _rdt(a.dtype)), Meta(rank, _I64), Meta(sv, _rdt(a.dtype))]


def _infer_lu_factor(metas, attrs):
    (a,) = metas
    bt = a.shape[:-2]
    return [Meta(a.shape, a.dtype), Meta(bt + (min(a.shape[-2:]),), _I32), Meta(bt, _I32)]


def _infer_lu_unpack(metas, attrs):
    lu = metas[0]
    *bt, m, n = lu.shape
    bt, k = tuple(bt), min(m, n)
    p = Meta(bt + (m, m), lu.dtype) if attrs["unpack_pivots"] else Meta((0,), lu.dtype)
    if attrs["unpack_data"]:
        return [p, Meta(bt + (m, k), lu.dtype), Meta(bt + (k, n), lu.dtype)]
    return [p, Meta((0,), lu.dtype), Meta((0,), lu.dtype)]


def _check_lu_unpack(inputs, attrs):
    if not attrs["unpack_pivots"] or inputs[1].numel() == 0:
        return
    p = inputs[1].numpy(force=True)
    m = inputs[0].shape[-2]
    if p.min() < 1 or p.max() > m:
        raise RuntimeError("pivots passed to lu_unpack must be between 1 and LU.size(-2) inclusive.Did you "
                           "properly pass the result of lu_factor?")


def _check_lu_solve(inputs, attrs):
    piv = inputs[1]
    if piv.numel() == 0:
        return
    p = piv.numpy(force=True)
    n = inputs[0].shape[-1]
    lo, hi = int(p.min()), int(p.max())
    if lo < 1 or hi > n:
        raise RuntimeError(f"linalg.lu_solve: pivots must be between 1 and LU.size(-1) = {n} inclusive (got values "
                           f"from {lo} to {hi}); pass the pivots returned by linalg.lu_factor")


def _infer_solve3(metas, attrs):
    """X's meta for (A or LU, [pivots,] B): B's matrices over the broadcast batch of all inputs."""
    a, *piv, b = metas
    shapes = [a.shape[:-2], b.shape[:-2]] + [p.shape[:-1] for p in piv]
    return [Meta(_batch(*shapes, op="linalg solve") + b.shape[-2:], b.dtype)]


def _same(metas, attrs):
    return [Meta(metas[0].shape, metas[0].dtype)]


LINALG_DET = register(OpDef("linalg_det", infer=_infer_det, doc="det of every matrix of A[..., n, n]"))
LINALG_SLOGDET = register(OpDef("linalg_slogdet", infer=_infer_slogdet, nout=2, doc="(sign, log|det|)"))
LINALG_INV_EX = register(OpDef("linalg_inv_ex", infer=_infer_with_info, nout=2,
                               doc="(inverse, LAPACK info int32); raises when check_errors"))
LINALG_SOLVE_EX = register(OpDef("linalg_solve_ex", infer=_infer_solve, nout=2,
                                 doc="X[..., n, k] with A X = B (batch dims broadcast), info of A's LU"))
LINALG_CHOLESKY_EX = register(OpDef("linalg_cholesky_ex", infer=_infer_with_info, nout=2,
                                    doc="(L or U, info) of the triangle named by upper"))
LINALG_QR = register(OpDef("linalg_qr", infer=_infer_qr, nout=2, doc="Householder QR, mode reduced/complete/r"))
LINALG_SVD = register(OpDef("linalg_svd", infer=_infer_svd, nout=3, doc="(U, S, Vh), LAPACK gesdd"))
LINALG_SVDVALS = register(OpDef("linalg_svdvals", infer=_infer_svdvals, doc="singular values, descending"))
LINALG_EIGH = register(OpDef("linalg_eigh", infer=_infer_eigh, nout=2, doc="(eigenvalues ascending, eigenvectors)"))
LINALG_EIGVALSH = register(OpDef("linalg_eigvalsh", infer=_infer_eigvalsh, doc="eigenvalues of symmetric A"))
LINALG_EIG = register(OpDef("linalg_eig", infer=_infer_eig, nout=2,
                            doc="(eigenvalues, eigenvectors) of a general matrix, complex (LAPACK geev)"))
LINALG_EIGVALS = register(OpDef("linalg_eigvals", infer=_infer_eigvals, doc="eigenvalues of a general matrix"))
LINALG_LSTSQ = register(OpDef("linalg_lstsq", infer=_infer_lstsq, nout=4,
                              doc="(solution, residuals, rank, singular_values) as torch's drivers give them"))
LINALG_LU_FACTOR_EX = register(OpDef("linalg_lu_factor_ex", infer=_infer_lu_factor, nout=3,
                                     doc="(LU, pivots int32 1-based, info int32), partial pivoting"))
LU_UNPACK = register(OpDef("lu_unpack", infer=_infer_lu_unpack, nout=3, check=_check_lu_unpack,
                           doc="(P, L, U) from lu_factor's (LU, pivots)"))
LINALG_LU_SOLVE = register(OpDef("linalg_lu_solve", infer=_infer_solve3, check=_check_lu_solve,
                                 doc="X with A X = B (A^T X = B when adjoint) from A's LU and pivots"))
LINALG_SOLVE_TRIANGULAR = register(OpDef("linalg_solve_triangular", infer=_infer_solve3,
                                         doc="X with A X = B for the upper/lower triangle of A"))
LINALG_MATRIX_EXP = register(OpDef("linalg_matrix_exp", infer=_same, doc="exp(A), Pade 13 scaling and squaring"))


def _mT(x):
    return x.transpose(-2, -1)


# ------------------------------------------------------------------ torch.linalg frontends
def linalg_det(A, *, out=None):
    _square(A, "linalg.det")
    _floating(A, "linalg.det", half="kernel:lu_cpu")
    return _out(run(LINALG_DET, [A], {})[0], out)


def linalg_slogdet(A, *, _name="linalg.slogdet", _rtname="linalg_slogdet"):
    _square(A, _name)
    _floating(A, _name)
    sign, logabs = run(LINALG_SLOGDET, [A], {})
    return _rt(_rtname, ("sign", "logabsdet"))(sign, logabs)


def linalg_inv_ex(A, *, check_errors=False):
    _square(A, "linalg.inv")
    _floating(A, "linalg.inv")
    inv, info = run(LINALG_INV_EX, [A], {"check_errors": bool(check_errors)})
    return _rt("linalg_inv_ex", ("inverse", "info"))(inv, info)


def linalg_inv(A, *, out=None):
    return _out(linalg_inv_ex(A, check_errors=True).inverse, out)


def linalg_solve_ex(A, B, *, left=True, check_errors=False):
    _tensor(B, "linalg.solve", "B")
    _square(A, "linalg.solve")
    _floating(A, "linalg.solve", half="kernel:lu_cpu")
    _same_dtype(A, B, "linalg.solve")
    vector = _is_vector_rhs(A, B)
    b = B.unsqueeze(-1) if vector else B
    _check_rhs(A, b, "linalg.solve", left)
    if left:
        x, info = run(LINALG_SOLVE_EX, [A, b], {"check_errors": bool(check_errors)})
    else:
        x, info = run(LINALG_SOLVE_EX, [_mT(A), _mT(b)], {"check_errors": bool(check_errors)})
        x = _mT(x).contiguous()
    if vector:
        x = x.squeeze(-1)
    return _rt("linalg_solve_ex", ("result", "info"))(x, info)


def linalg_solve(A, B, *, left=True, out=None):
    return _out(linalg_solve_ex(A, B, left=left, check_errors=True).result, out)


def linalg_cholesky_ex(A, *, upper=False, check_errors=False, _name="linalg.cholesky"):
    _square(A, _name)
    _floating(A, _name, half="kernel:cholesky_cpu")
    L, info = run(LINALG_CHOLESKY_EX, [A], {"upper": bool(upper), "check_errors": bool(check_errors),
                                             "name": _name})
    return _rt("linalg_cholesky_ex", ("L", "info"))(L, info)


def linalg_cholesky(A, *, upper=False, out=None):
    return _out(linalg_cholesky_ex(A, upper=upper, check_errors=True).L, out)


def linalg_qr(A, mode="reduced", *, _rtname="linalg_qr"):
    _matrix(A, "linalg.qr")
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', or "
                           f"'complete'")
    _floating(A, "linalg.qr", half="kernel:geqrf_cpu")
    q, r = run(LINALG_QR, [A], {"mode": mode})
    return _rt(_rtname, ("Q", "R"))(q, r)


def _svd_checks(A, driver=None):
    _matrix(A, "linalg.svd")
    _floating(A, "linalg.svd", half="kernel:linalg_svd_cpu")
    if driver is not None:
        raise RuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with "
                           "cuSOLVER backend.")


def linalg_svd(A, full_matrices=True, *, driver=None):
    _svd_checks(A, driver)
    u, s, vh = run(LINALG_SVD, [A], {"full_matrices": bool(full_matrices)})
    return _rt("linalg_svd", ("U", "S", "Vh"))(u, s, vh)


def linalg_svdvals(A, *, driver=None, out=None):
    _svd_checks(A, driver)
    return _out(run(LINALG_SVDVALS, [A], {})[0], out)


def _eigh_checks(A, UPLO, op):
    _square(A, op)
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    _floating(A, op, half="kernel:linalg_eigh_cpu", integer="kernel:linalg_eigh_cpu")


def linalg_eigh(A, UPLO="L"):
    _eigh_checks(A, UPLO, "linalg.eigh")
    w, v = run(LINALG_EIGH, [A], {"UPLO": UPLO})
    return _rt("linalg_eigh", ("eigenvalues", "eigenvectors"))(w, v)


def linalg_eigvalsh(A, UPLO="L", *, out=None):
    _eigh_checks(A, UPLO, "linalg.eigh")
    return _out(run(LINALG_EIGVALSH, [A], {"UPLO": UPLO})[0], out)


def _eig_checks(A, op):
    _square(A, op)
    if A._dtype.category < 2:
        raise RuntimeError(f"Unknown Complex ScalarType for {_CAP[A._dtype.name]}")
    _floating(A, op, half="kernel:linalg_eig_out_cpu")
    if A._device.type != "cpu":
        raise RuntimeError(f"{op}: the eigenvalues are complex, and complex tensors live on the CPU only ({A._device} "
                           f"has no complex storage): call {op}(A.cpu())")


def linalg_eig(A, *, out=None):
    """``torch.linalg.eig``: ``(eigenvalues, eigenvectors)``, complex for any input (LAPACK geev: eigenvalues in
    its order, each eigenvector of unit 2-norm with its largest component real); non-finite input raises."""
    _eig_checks(A, "linalg.eig")
    w, v = run(LINALG_EIG, [A], {})
    return _out_pair("linalg_eig", ("eigenvalues", "eigenvectors"), w, v, out)


def linalg_eigvals(A, *, out=None):
    """``torch.linalg.eigvals``: the (complex) eigenvalues of ``linalg.eig``."""
    _eig_checks(A, "linalg.eigvals")
    return _out(run(LINALG_EIGVALS, [A], {})[0], out)


_LSTSQ_DTYPE = "This function doesn't handle types other than float and double"


def linalg_lstsq(A, B, rcond=None, *, driver=None):
    op = "torch.linalg.lstsq"
    _tensor(A, "linalg.lstsq", "input")
    _tensor(B, "linalg.lstsq", "other")
    if A.ndim < 2:
        raise RuntimeError(f"{op}: input must have at least 2 dimensions.")
    _floating(A, op, half=_LSTSQ_DTYPE, integer=_LSTSQ_DTYPE)
    if A._dtype is not B._dtype:
        raise RuntimeError(f"{op}: Expected input and other to have the same dtype, but got input's dtype "
                           f"{_CAP[A._dtype.name]} and other's dtype {_CAP[B._dtype.name]}")
    if B.ndim < 1:
        raise RuntimeError(f"{op}: other must have at least 1 dimension.")
    driver = "gelsy" if driver is None else driver
    if driver not in ("gels", "gelsy", "gelsd", "gelss"):
        raise RuntimeError(f"{op}: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    vector = B.ndim == A.ndim - 1
    if vector and A.shape[-2] != B.shape[-1]:
        raise RuntimeError(f"{op}: input.size(-2) should match other.size(-1)")
    b = B.unsqueeze(-1) if vector else B
    if not vector and A.shape[-2] != b.shape[-2]:
        raise RuntimeError(f"{op}: input.size(-2) should match other.size(-2)")
    attrs = {"driver": driver, "rcond": None if rcond is None else float(rcond)}
    sol, res, rank, sv = run(LINALG_LSTSQ, [A, b], attrs)
    m, n = A.shape[-2:]
    # torch reports residuals only when every matrix has full rank (a host read, as nonzero's size)
    if driver in ("gelsd", "gelss") and m > n and res.numel() and not bool((rank == n).all().item()):
        res = _creation.zeros(0, dtype=res.dtype, device=res.device)
    if vector:
        sol = sol.squeeze(-1)
    return _rt("linalg_lstsq", ("solution", "residuals", "rank", "singular_values"))(sol, res, rank, sv)


def linalg_lu_factor_ex(A, *, pivot=True, check_errors=False):
    _tensor(A, "linalg.lu_factor")
    if A.ndim < 2:
        raise RuntimeError(f"torch.lu_factor: Expected tensor with 2 or more dimensions. Got size: {list(A.shape)} "
                           f"instead")
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    _floating(A, "linalg.lu_factor", half="kernel:lu_cpu", integer="kernel:lu_cpu")
    lu, piv, info = run(LINALG_LU_FACTOR_EX, [A], {"check_errors": bool(check_errors)})
    return _rt("linalg_lu_factor_ex", ("LU", "pivots", "info"))(lu, piv, info)


def linalg_lu_factor(A, *, pivot=True):
    r = linalg_lu_factor_ex(A, pivot=pivot, check_errors=True)
    return _rt("linalg_lu_factor", ("LU", "pivots"))(r.LU, r.pivots)


def _lu_unpack(LU, pivots, unpack_data=True, unpack_pivots=True, rtname="lu_unpack"):
    _tensor(LU, "lu_unpack", "LU_data")
    _tensor(pivots, "lu_unpack", "LU_pivots")
    if LU.ndim < 2:
        raise RuntimeError(f"torch.lu_unpack: Expected tensor with 2 or more dimensions. Got size: {list(LU.shape)} "
                           f"instead")
    if pivots._dtype is not _I32:
        raise RuntimeError("torch.lu_unpack: LU_pivots is expected to be a contiguous tensor of torch.int32 dtype.\n"
                           "Note: this function is intended to be used with the output produced by "
                           "torch.linalg.lu_factor")
    k = min(LU.shape[-2:])
    if tuple(pivots.shape) != tuple(LU.shape[:-2]) + (k,):
        raise RuntimeError(f"torch.lu_unpack: Expected LU_pivots.size(-1) == min(LU.size(-2), LU.size(-1)) and "
                           f"batch shapes to match, got LU {list(LU.shape)} and LU_pivots {list(pivots.shape)}")
    p, l, u = run(LU_UNPACK, [LU, pivots], {"unpack_data": bool(unpack_data), "unpack_pivots": bool(unpack_pivots)})
    return _rt(rtname, ("P", "L", "U"))(p, l, u)


def linalg_lu(A, *, pivot=True):
    r = linalg_lu_factor_ex(A, pivot=pivot)
    return _lu_unpack(r.LU, r.pivots, rtname="linalg_lu")


def linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False, out=None):
    op = "linalg.lu_solve"
    _tensor(B, op, "B")
    _square(LU, op, "LU")
    if B.ndim < 2:
        raise RuntimeError(f"{op}: The input tensor B must have at least 2 dimensions.")
    _floating(LU, "torch.linalg.lu_solve", half="kernel:linalg.lu_solve_cpu")
    _same_dtype(LU, B, op, "LU", "B")
    if pivots._dtype is not _I32:
        raise RuntimeError(f"{op}: Expected pivots to be int32, got {_CAP[pivots._dtype.name]}")
    if pivots.ndim != LU.ndim - 1 or pivots.shape[-1] != LU.shape[-1]:
        raise RuntimeError(f"{op}: Expected LU and pivots of shapes [*, n, n] and [*, n], got {list(LU.shape)} and "
                           f"{list(pivots.shape)}")
    _check_rhs(LU, B, op, left)
    if left:
        return _out(run(LINALG_LU_SOLVE, [LU, pivots, B], {"adjoint": bool(adjoint)})[0], out)
    # X A = B  <=>  A^H X^H = B^H (adjoint: the conjugate transpose, as in the kernel)
    x = run(LINALG_LU_SOLVE, [LU, pivots, _mH(B)], {"adjoint": not adjoint})[0]
    return _out(_mH(x).contiguous(), out)


def linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False, out=None):
    op = "linalg.solve_triangular"
    _tensor(B, op, "B")
    _matrix(A, op)
    if B.ndim < 2:
        raise RuntimeError(f"{op}: The input tensor B must have at least 2 dimensions.")
    _square(A, op)
    _floating(A, op, half="kernel:triangular_solve_cpu", integer="kernel:triangular_solve_cpu")
    if B._dtype is not A._dtype:     # (torch: the result has A's dtype, B is cast to it)
        B = B.to(A._dtype)
    _check_rhs(A, B, op, left)
    if left:
        return _out(run(LINALG_SOLVE_TRIANGULAR, [A, B], {"upper": bool(upper), "unitriangular": bool(unitriangular)})
                    [0], out)
    x = run(LINALG_SOLVE_TRIANGULAR, [_mT(A), _mT(B)], {"upper": not upper, "unitriangular": bool(unitriangular)})[0]
    return _out(_mT(x).contiguous(), out)


def linalg_matrix_exp(A):
    _square(A, "linalg.matrix_exp")
    _floating(A, "linalg.matrix_exp", half=False)
    return run(LINALG_MATRIX_EXP, [A], {})[0]


def linalg_matrix_power(A, n, *, out=None):
    _square(A, "linalg.matrix_power")
    n = int(n)
    if n == 0:
        eye = _creation.eye(A.shape[-1], dtype=A.dtype, device=A.device)
        return _out(eye.expand(tuple(A.shape)).contiguous(), out)
    a = A
    if n < 0:
        a = linalg_inv(A)
        n = -n
    if n == 1:
        return _out(a.clone(), out)
    mm = _fn("matmul")
    if n == 2:
        return _out(mm(a, a), out)
    if n == 3:
        return _out(mm(mm(a, a), a), out)
    z = result = None     # torch's binary decomposition (same order of products, same rounding)
    while n > 0:
        bit = n % 2
        n //= 2
        z = a if z is None else mm(z, z)
        if bit:
            result = z if result is None else mm(result, z)
    return _out(result, out)


def _tols(S_max, m, n, dtype, atol, rtol, op):
    """torch's tolerance max(atol, rtol * S_max), with its defaults for rtol."""
    eps = {"float32": 1.1920928955078125e-07, "float64": 2.220446049250313e-16}[_rdt(dtype).name]
    atol_zero = atol is None or (not isinstance(atol, Tensor) and atol == 0)
    if rtol is None:
        rtol = eps * max(m, n) if atol_zero else 0.0
    tol = S_max * (rtol if not isinstance(rtol, Tensor) else rtol.unsqueeze(-1))
    if atol is not None:
        at = atol.unsqueeze(-1) if isinstance(atol, Tensor) else atol
        tol = _fn("maximum")(tol, at if isinstance(at, Tensor) else _creation.full_like(tol, float(at)))
    return tol


def _spectrum(A, hermitian, op):
    """|eigenvalues| (hermitian) or singular values, with the largest (keepdim)."""
    if hermitian:
        S = run(LINALG_EIGVALSH, [A], {"UPLO": "L"})[0].abs()
    else:
        S = run(LINALG_SVDVALS, [A], {})[0]
    if S.shape[-1] == 0:
        smax = _creation.zeros(tuple(S.shape[:-1]) + (1,), dtype=S.dtype, device=S.device)
    else:
        smax = S.amax(-1, keepdim=True)
    return S, smax


def linalg_matrix_rank(A, tol=None, hermitian=False, *, atol=None, rtol=None, out=None):
    """``torch.linalg.matrix_rank``; the old ``tol`` is ``atol`` with ``rtol=0``."""
    _tensor(A, "linalg.matrix_rank")
    if tol is not None:
        atol, rtol = tol, 0.0
    if A.ndim < 2:
        raise RuntimeError("torch.linalg.matrix_rank: The input tensor input must have at least 2 dimensions.")
    _floating(A, "linalg.matrix_rank", half=_LSTSQ_DTYPE, integer=_LSTSQ_DTYPE)
    if hermitian:
        _square(A, "linalg.matrix_rank")
    S, smax = _spectrum(A, hermitian, "linalg.matrix_rank")
    tol = _tols(smax, A.shape[-2], A.shape[-1], A._dtype, atol, rtol, "linalg.matrix_rank")
    return _out((S > tol).sum(-1), out)


def linalg_pinv(A, rcond=None, hermitian=False, *, atol=None, rtol=None, out=None):
    """``torch.linalg.pinv``; the old ``rcond`` is ``rtol``."""
    _tensor(A, "linalg.pinv")
    if rcond is not None:
        rtol = rcond
    msg = ("linalg.pinv({dtype}{{" + str(list(A.shape)).replace("{", "{{").replace("}", "}}") + "}}): expected a "
           "tensor with 2 or more dimensions of float, double, cfloat or cdouble types")
    if A.ndim < 2:
        raise RuntimeError(msg.format(dtype=_CAP[A._dtype.name]))
    _floating(A, "linalg.pinv", half=msg, integer=msg)
    m, n = A.shape[-2:]
    if A.numel() == 0:
        return _out(_creation.zeros(tuple(A.shape[:-2]) + (n, m), dtype=A.dtype, device=A.device), out)
    where = _fn("where")
    if hermitian:
        _square(A, "linalg.pinv")
        w, U = run(LINALG_EIGH, [A], {"UPLO": "L"})
        smax = w.abs().amax(-1, keepdim=True)
        tol = _tols(smax, m, n, A._dtype, atol, rtol, "linalg.pinv")
        sinv = where(w.abs() > tol, w.reciprocal(), 0.0)
        return _out(_fn("matmul")(U * sinv.unsqueeze(-2), _mH(U)), out)
    U, S, Vh = run(LINALG_SVD, [A], {"full_matrices": False})
    smax = S.narrow(-1, 0, 1)
    tol = _tols(smax, m, n, A._dtype, atol, rtol, "linalg.pinv")
    sinv = where(S > tol, S.reciprocal(), 0.0)
    return _out(_fn("matmul")(_mH(Vh) * sinv.unsqueeze(-2), _mH(U)), out)


def linalg_multi_dot(tensors, *, out=None):
    ts = list(tensors)
    n = len(ts)
    if n < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {n}")
    for i, t in enumerate(ts):
        _tensor(t, "multi_dot", f"tensors[{i}]")
    if ts[0].ndim not in (1, 2):
        raise RuntimeError(f"multi_dot(): the first tensor must be 1D or 2D but got {ts[0].ndim}D")
    if ts[-1].ndim not in (1, 2):
        raise RuntimeError(f"multi_dot(): the last tensor must be 1D or 2D but got {ts[-1].ndim}D")
    for i in range(1, n - 1):
        if ts[i].ndim != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {ts[i].ndim}D")
    for i in range(1, n):
        if ts[i]._dtype is not ts[0]._dtype:
            raise RuntimeError(f"multi_dot(): all tensors must have be the same dtype but tensor 0 is "
                               f"{_LOWER[ts[0]._dtype.name]} and tensor {i} {_LOWER[ts[i]._dtype.name]}")
    first_1d, last_1d = ts[0].ndim == 1, ts[-1].ndim == 1
    mats = [ts[0].unsqueeze(0) if first_1d else ts[0]] + ts[1:-1] + [ts[-1].unsqueeze(-1) if last_1d else ts[-1]]
    for i in range(n - 1):
        if mats[i].shape[1] != mats[i + 1].shape[0]:
            raise RuntimeError(f"multi_dot(): tensors {i} and {i + 1} with shapes {list(ts[i].shape)} and "
                               f"{list(ts[i + 1].shape)} cannot be multiplied")
    mm = _fn("matmul")
    # the cheapest parenthesization (the classic chain-order dynamic program)
    dims = [mats[0].shape[0]] + [m.shape[1] for m in mats]
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for ln in range(1, n):
        for i in range(n - ln):
            j = i + ln
            cost[i][j] = math.inf
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k

    def prod(i, j):
        if i == j:
            return mats[i]
        k = split[i][j]
        return mm(prod(i, k), prod(k + 1, j))
    r = prod(0, n - 1)
    if first_1d:
        r = r.squeeze(0)
    if last_1d:
        r = r.squeeze(-1)
    return _out(r, out)


def linalg_vecdot(x, y, *, dim=-1, out=None):
    _tensor(x, "linalg.vecdot", "x")
    _tensor(y, "linalg.vecdot", "y")
    if x._dtype.category != 3:
        _floating(x, "linalg.vecdot", half=False)
    if x._dtype is not y._dtype:
        raise RuntimeError(f"linalg.vecdot: Expected x and y to have the same dtype, but found x of type "
                           f"{_CAP[x._dtype.name]} and y of type {_CAP[y._dtype.name]} instead")
    if x._dtype.category == 3:   # sum(conj(x) * y)
        from .registry import EXPORTS
        x = EXPORTS["conj"][0](x)
    return _out((x * y).sum(dim), out)


def linalg_diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    return A.diagonal(offset, dim1, dim2)


def linalg_tensorinv(A, ind=2, *, out=None):
    _tensor(A, "linalg.tensorinv")
    if ind <= 0:
        raise RuntimeError(f"Expected a strictly positive integer for 'ind', but got {ind}")
    out_shape = tuple(A.shape[ind:]) + tuple(A.shape[:ind])
    p, q = math.prod(A.shape[:ind]), math.prod(A.shape[ind:])
    if p != q:
        raise RuntimeError(f"Expected self to satisfy the requirement prod(self.shape[ind:]) == "
                           f"prod(self.shape[:ind]), but got {q} != {p}")
    return _out(linalg_inv(A.reshape(p, q)).reshape(out_shape), out)


def linalg_tensorsolve(A, B, dims=None, *, out=None):
    _tensor(A, "linalg.tensorsolve")
    _tensor(B, "linalg.tensorsolve", "B")
    if dims is not None:
        dims = [wrap_dim(d, A.ndim, "linalg.tensorsolve") for d in dims]
        A = A.movedim(dims, list(range(A.ndim - len(dims), A.ndim)))
    res_shape = tuple(A.shape[B.ndim:])
    p, q = B.numel(), math.prod(res_shape)
    if p != q or tuple(A.shape[:B.ndim]) != tuple(B.shape):
        raise RuntimeError(f"Expected self to satisfy the requirement prod(self.shape[other.ndim:]) == "
                           f"prod(self.shape[:other.ndim]), but got {q} != {p}")
    return _out(linalg_solve(A.reshape(p, q), B.reshape(p)).reshape(res_shape), out)


def _out(r, out):
    """``out=`` of the linalg functions: torch's rules (the result's dtype; another shape resized, with the
    deprecation warning when ``out`` holds elements)."""
    if out is None:
        return r
    if out._dtype is not r._dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {r._dtype.name}, but got {out._dtype.name} instead")
    from .elementwise import resize_out
    resize_out(out, r.shape, "out=")
    out.copy_(r)
    return out


def _out_pair(name, fields, a, b, out):
    """The named pair ``(a, b)`` of a function with two results, or with ``out=`` (a pair of tensors,
    torch's rules each, see _out) that pair, written."""
    if out is not None:
        _out(a, out[0])
        _out(b, out[1])
        a, b = out
    return _rt(name, fields)(a, b)


# ------------------------------------------------------------------ the top-level (old) API and Tensor methods
@export
def det(input):
    """Determinant (``torch.det``, ``torch.linalg.det``)."""
    return linalg_det(input)


@export
def slogdet(input):
    """``(sign, logabsdet)`` (``torch.slogdet``)."""
    return linalg_slogdet(input, _rtname="slogdet")


@export
def logdet(input):
    """log(det(A)): nan for a negative determinant, -inf for a zero one (``torch.logdet``)."""
    _square(input, "logdet")
    _floating(input, "logdet")
    sign, logabs = run(LINALG_SLOGDET, [input], {})
    if input._dtype.category == 3:
        # torch's log(sign) + logabsdet, the real term added as (logabsdet + 0i): arg(det) + 0 * logabsdet is
        # nan when log|det| is infinite (a singular matrix gives -inf + nan i, as in torch)
        return _fn("complex")(logabs, _fn("angle")(sign) + logabs * 0)
    return _fn("where")(sign < 0, math.nan, logabs)


@export
def inverse(input, *, out=None):
    """``torch.inverse`` (``torch.linalg.inv``)."""
    return linalg_inv(input, out=out)


@export
def pinverse(input, rcond=1e-15):
    """``torch.pinverse``: ``linalg.pinv(input, rtol=rcond)``."""
    return linalg_pinv(input, rtol=rcond)


@export
def matrix_power(input, n):
    """``torch.matrix_power`` (``torch.linalg.matrix_power``)."""
    return linalg_matrix_power(input, n)


@export
def matrix_exp(input):
    """``torch.matrix_exp`` (``torch.linalg.matrix_exp``)."""
    return linalg_matrix_exp(input)


@export
def cholesky(input, upper=False, *, out=None):
    """``torch.cholesky`` (deprecated in torch for ``linalg.cholesky``; same factor)."""
    return _out(linalg_cholesky_ex(input, upper=upper, check_errors=True, _name="cholesky").L, out)


@export
def cholesky_solve(input, input2, upper=False, *, out=None):
    """X with A X = B given A's Cholesky factor ``input2`` (``torch.cholesky_solve(B, L, upper)``)."""
    B, L = input, input2
    _tensor(B, "cholesky_solve", "input")
    _tensor(L, "cholesky_solve", "input2")
    if B.ndim < 2:
        raise RuntimeError(f"b should have at least 2 dimensions, but has {B.ndim} dimensions instead")
    if L.ndim < 2:
        raise RuntimeError(f"u should have at least 2 dimensions, but has {L.ndim} dimensions instead")
    _floating(L, "cholesky_solve", half="kernel:cholesky_solve_cpu", integer="kernel:cholesky_solve_cpu")
    _floating(B, "cholesky_solve", half="kernel:cholesky_solve_cpu", integer="kernel:cholesky_solve_cpu")
    if L.shape[-1] != L.shape[-2] or L.shape[-1] != B.shape[-2]:
        raise RuntimeError(f"Incompatible matrix sizes for cholesky_solve: each A matrix is {L.shape[-2]} by "
                           f"{L.shape[-1]} but each b matrix is {B.shape[-2]} by {B.shape[-1]}")
    if B._dtype is not L._dtype:
        raise RuntimeError(f"Expected b and A to have the same dtype, but found b of type {_CAP[B._dtype.name]} and A "
                           f"of type {_CAP[L._dtype.name]} instead.")
    # A = L L^H (or U^H U): solve with the factor, then with its conjugate transpose
    y = run(LINALG_SOLVE_TRIANGULAR, [_mH(L) if upper else L, B], {"upper": False, "unitriangular": False})[0]
    x = run(LINALG_SOLVE_TRIANGULAR, [L if upper else _mH(L), y], {"upper": True, "unitriangular": False})[0]
    return _out(x, out)


@export
def cholesky_inverse(input, upper=False, *, out=None):
    """(L L^T)^-1 from the Cholesky factor L (``torch.cholesky_inverse``)."""
    _tensor(input, "cholesky_inverse")
    if input.ndim < 2:
        raise RuntimeError("cholesky_inverse: The input tensor input must have at least 2 dimensions.")
    _floating(input, "cholesky_inverse", half="kernel:cholesky_inverse_out_cpu",
              integer="kernel:cholesky_inverse_out_cpu")
    _square(input, "cholesky_inverse", "input")
    eye = _creation.eye(input.shape[-1], dtype=input.dtype, device=input.device)
    return _out(cholesky_solve(eye.expand(tuple(input.shape)), input, upper), out)


@export
def qr(input, some=True):
    """``torch.qr`` (old API): ``some=True`` is mode 'reduced', ``False`` 'complete'."""
    return linalg_qr(input, "reduced" if some else "complete", _rtname="qr")


@export
def svd(input, some=True, compute_uv=True):
    """``torch.svd`` (old API): ``(U, S, V)`` with V (not Vh); ``compute_uv=False`` gives zero-filled
    U (m, m) and V (n, n)."""
    _tensor(input, "svd", "input")
    if input.ndim < 2:
        raise RuntimeError(f"linalg.svd: input should have at least 2 dimensions, but has {input.ndim} dimensions "
                           f"instead")
    _svd_checks(input)
    R = _rt("svd", ("U", "S", "V"))
    if not compute_uv:
        s = run(LINALG_SVDVALS, [input], {})[0]
        bt, (m, n) = tuple(input.shape[:-2]), input.shape[-2:]
        zeros = _creation.zeros
        return R(zeros(bt + (m, m), dtype=input.dtype, device=input.device), s,
                 zeros(bt + (n, n), dtype=input.dtype, device=input.device))
    u, s, vh = run(LINALG_SVD, [input], {"full_matrices": not some})
    return R(u, s, _mH(vh))


@export
def lu_solve(input, LU_data, LU_pivots, *, out=None):
    """``torch.lu_solve(b, LU_data, LU_pivots)``: ``linalg.lu_solve(LU, pivots, b)``."""
    return linalg_lu_solve(LU_data, LU_pivots, input, out=out)


@export(method=False)
def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """``(P, L, U)`` from ``linalg.lu_factor``'s ``(LU, pivots)`` (``torch.lu_unpack``)."""
    return _lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)


@export
def triangular_solve(input, A, upper=True, transpose=False, unitriangular=False):
    """``torch.triangular_solve(b, A)`` (old API): ``(solution, cloned_coefficient)``, op(A) X = b with op(A)
    = A^T when ``transpose``."""
    b = input
    _tensor(b, "triangular_solve", "input")
    _tensor(A, "triangular_solve", "A")
    if b.ndim < 2 or A.ndim < 2:
        raise RuntimeError(f"torch.triangular_solve: Expected b to have at least 2 dimensions, but it has {b.ndim} "
                           f"dimensions instead" if b.ndim < 2 else
                           f"torch.triangular_solve: Expected A to have at least 2 dimensions, but it has {A.ndim} "
                           f"dimensions instead")
    _square(A, "triangular_solve")
    _floating(A, "triangular_solve", half="kernel:triangular_solve_cpu", integer="kernel:triangular_solve_cpu")
    if b._dtype is not A._dtype:
        raise RuntimeError(f"Expected b and A to have the same dtype, but found b of type {_CAP[b._dtype.name]} and A "
                           f"of type {_CAP[A._dtype.name]} instead.")
    if A.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"Incompatible matrix sizes for triangular_solve: each A matrix is {A.shape[-2]} by "
                           f"{A.shape[-1]} but each b matrix is {b.shape[-2]} by {b.shape[-1]}")
    a = _mT(A) if transpose else A
    x = run(LINALG_SOLVE_TRIANGULAR, [a, b], {"upper": bool(upper) != bool(transpose),
                                              "unitriangular": bool(unitriangular)})[0]
    batch = tuple(x.shape[:-2])
    coef = A.expand(batch + tuple(A.shape[-2:])).contiguous() if tuple(A.shape[:-2]) != batch else A.clone()
    return _rt("triangular_solve", ("solution", "cloned_coefficient"))(x, coef)


# ------------------------------------------------------------------ Householder QR in LAPACK's compact form
def _infer_geqrf(metas, attrs):
    a = metas[0]
    return [Meta(a.shape, a.dtype), Meta(a.shape[:-2] + (min(a.shape[-2:]),), a.dtype)]


GEQRF = register(OpDef("geqrf", infer=_infer_geqrf, nout=2,
                       doc="(a, tau): R on and above the diagonal, the Householder vectors below (LAPACK geqrf)"))


@export
def geqrf(input, *, out=None):
    """``torch.geqrf``: ``(a, tau)``, LAPACK's compact QR: R in the upper triangle, the Householder reflectors
    H_i = I - tau_i v_i v_i^T (v_i = (0, .., 1, a[i+1:, i])) below it; ``linalg.householder_product(a, tau)``
    gives Q's first columns, ``ormqr`` applies Q."""
    if not isinstance(input, Tensor):
        raise TypeError(f"geqrf(): argument 'input' must be Tensor, not {type(input).__name__}")
    if input.ndim < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    _floating(input, "geqrf", half="kernel:geqrf_cpu", integer="kernel:geqrf_cpu")
    a, tau = run(GEQRF, [input], {})
    return _out_pair("geqrf", ("a", "tau"), a, tau, out)


@export
def orgqr(input, tau):
    """``torch.orgqr``: ``linalg.householder_product(input, tau)``."""
    from ..linalg import householder_product
    return householder_product(input, tau)


@export
def ormqr(input, tau, other, left=True, transpose=False, *, out=None):
    """``torch.ormqr``: ``op(Q) @ other`` (``left``) or ``other @ op(Q)``, Q = H_1 ... H_k the (mn, mn) product of
    ``geqrf``'s reflectors (input (*, mn, k), tau (*, min(mn, k))), op(Q) = Q^T when ``transpose``.  Composed: the
    full Q from ``linalg.householder_product`` on the reflector columns padded to a square, then one matmul."""
    from ..linalg import householder_product
    from .shape import pad
    op = "torch.ormqr"
    for name, t in (("input", input), ("tau", tau), ("other", other)):
        _tensor(t, "ormqr", name)
    if input.ndim < 2:
        raise RuntimeError(f"{op}: input must have at least 2 dimensions.")
    if other.ndim < 2:
        raise RuntimeError(f"{op}: other must have at least 2 dimensions.")
    mn = other.shape[-2] if left else other.shape[-1]
    if left and other.shape[-2] != input.shape[-2]:
        raise RuntimeError(f"{op}: other.shape[-2] must be equal to input.shape[-2]")
    if not left and other.shape[-1] != input.shape[-2]:
        raise RuntimeError(f"{op}: other.shape[-1] must be equal to input.shape[-2]")
    k = tau.shape[-1] if tau.ndim else 1
    if k > min(mn, input.shape[-1]):
        raise RuntimeError(f"{op}: tau.shape[-1] must be equal to min(other.shape[{-2 if left else -1}], "
                           f"input.shape[-1])")
    if tau.ndim != input.ndim - 1 or tuple(tau.shape[:-1]) != tuple(input.shape[:-2]):
        raise RuntimeError(f"{op}: Expected batch dimensions of tau to be equal to input.shape[:-2], but got "
                           f"{list(tau.shape[:-1])}")
    if tuple(other.shape[:-2]) != tuple(input.shape[:-2]):
        raise RuntimeError(f"{op}: Expected batch dimensions of other to be equal to input.shape[:-2], but got "
                           f"{list(other.shape[:-2])}")
    if other._dtype is not input._dtype or tau._dtype is not input._dtype:
        bad, bn = (other, "other") if other._dtype is not input._dtype else (tau, "tau")
        raise RuntimeError(f"{op}: Expected input and {bn} to have the same dtype, but input has dtype"
                           f"{_CAP[input._dtype.name]} and {bn} has dtype {_CAP[bad._dtype.name]}")
    _floating(input, "ormqr", half="kernel:ormqr_cpu", integer="kernel:ormqr_cpu")
    refl = input.narrow(-1, 0, k)
    q = householder_product(pad(refl, (0, mn - k)), tau)          # (*, mn, mn)
    if transpose:      # (the conjugate transpose for complex values, as in torch)
        q = _mH(q)
    return _out(q.matmul(other) if left else other.matmul(q), out)


# ------------------------------------------------------------------ LDL^T (Bunch-Kaufman) factor and solve
def _infer_ldl(metas, attrs):
    a = metas[0]
    return [Meta(a.shape, a.dtype), Meta(a.shape[:-1], _I32), Meta(a.shape[:-2], _I32)]


LINALG_LDL_FACTOR_EX = register(OpDef("linalg_ldl_factor_ex", infer=_infer_ldl, nout=3,
                                      doc="(LD, pivots int32 LAPACK-style, info int32): sytrf, lower triangle"))
LINALG_LDL_SOLVE = register(OpDef("linalg_ldl_solve", infer=_infer_solve3,
                                  doc="X with A X = B from ldl_factor's (LD, pivots) (LAPACK sytrs)"))


def linalg_ldl_factor_ex(A, *, hermitian=False, check_errors=False, out=None):
    """``torch.linalg.ldl_factor_ex``: ``(LD, pivots, info)`` of the symmetric matrices whose lower triangle is
    ``A``'s (LAPACK's sytrf with Bunch-Kaufman pivoting: a 2x2 block of D has both pivots -p)."""
    op = "torch.linalg.ldl_factor_ex"
    _square(A, op)
    _floating(A, op, half="kernel:ldl_factor_kernel_cpu")
    r = run(LINALG_LDL_FACTOR_EX, [A], {"check_errors": bool(check_errors), "hermitian": bool(hermitian)})
    if out is not None:
        for o, v in zip(out, r):
            _out(v, o)
        r = list(out)
    return _rt("linalg_ldl_factor_ex", ("LD", "pivots", "info"))(*r)


def linalg_ldl_factor(A, *, hermitian=False, out=None):
    """``torch.linalg.ldl_factor``: ``(LD, pivots)``; a singular ``A`` raises."""
    r = linalg_ldl_factor_ex(A, hermitian=hermitian, check_errors=True)
    if out is not None:
        _out(r.LD, out[0])
        _out(r.pivots, out[1])
        return _rt("linalg_ldl_factor", ("LD", "pivots"))(*out)
    return _rt("linalg_ldl_factor", ("LD", "pivots"))(r.LD, r.pivots)


def linalg_ldl_solve(LD, pivots, B, *, hermitian=False, out=None):
    """``torch.linalg.ldl_solve``: X with A X = B from ``ldl_factor``'s ``(LD, pivots)`` (batch dims broadcast)."""
    op = "torch.linalg.ldl_solve"
    _tensor(B, op, "B")
    _square(LD, op, "LD")
    if B.ndim < 2:
        raise RuntimeError(f"{op}: The input tensor B must have at least 2 dimensions.")
    _floating(LD, op, half="kernel:ldl_solve_cpu")
    if B._dtype is not LD._dtype:
        raise RuntimeError(f"Expected b and A to have the same dtype, but found b of type {_CAP[B._dtype.name]} and "
                           f"A of type {_CAP[LD._dtype.name]} instead.")
    if pivots._dtype is not _I32:
        raise RuntimeError(f"{op}: Expected pivots to be integers. Got {_CAP[pivots._dtype.name]}"
                           if pivots._dtype.category != 1 else
                           f"{op}: Expected pivots to be int32, got {_CAP[pivots._dtype.name]}")
    if pivots.ndim != LD.ndim - 1 or pivots.shape[-1] != LD.shape[-1]:
        raise RuntimeError(f"{op}: Expected LD.shape[:-1] and pivots.shape to be the same, but got pivots with "
                           f"shape {list(pivots.shape)} instead")
    _check_rhs(LD, B, op, True)
    p = pivots.numpy(force=True)
    n = LD.shape[-1]
    if p.size and (np.abs(p).min() < 1 or np.abs(p).max() > n):
        raise RuntimeError(f"{op}: pivots must be in [-{n}, -1] or [1, {n}] (LAPACK's 1-based form), got values "
                           f"from {int(p.min())} to {int(p.max())}; pass the pivots returned by linalg.ldl_factor")
    return _out(run(LINALG_LDL_SOLVE, [LD, pivots, B], {"hermitian": bool(hermitian)})[0], out)


# ------------------------------------------------------------------ randomized low-rank SVD / PCA (Halko et al.)
def _approximate_basis(A, q, niter, M):
    """torch._lowrank.get_approximate_basis: an orthonormal (*, m, q) basis of A's (minus M's) range from a
    Gaussian sketch and ``niter`` subspace (power) iterations, each step re-orthonormalized by QR."""
    from ..tensor.creation import randn
    dt = _rdt(A._dtype) if A._dtype.category >= 2 else _dt.float32
    R = randn(A.shape[-1], q, dtype=dt, device=A.device)
    if A._dtype.category == 3:
        R = R.to(A._dtype)
    X = A.matmul(R) if M is None else A.matmul(R) - M.matmul(R)
    Q = linalg_qr(X).Q
    for _ in range(niter):
        X = _mH(A).matmul(Q) if M is None else _mH(A).matmul(Q) - _mH(M).matmul(Q)
        Q = linalg_qr(X).Q
        X = A.matmul(Q) if M is None else A.matmul(Q) - M.matmul(Q)
        Q = linalg_qr(X).Q
    return Q


def _svd_lowrank(A, q, niter, M):
    q = 6 if q is None else int(q)
    niter = 2 if niter is None else int(niter)
    m, n = A.shape[-2:]
    if M is not None:
        M = M.broadcast_to(tuple(A.shape))
    if m < n:                            # (the basis of the transpose: the smaller side)
        A = _mH(A)
        M = None if M is None else _mH(M)
    Q = _approximate_basis(A, q, niter, M)
    B = _mH(Q).matmul(A)
    if M is not None:
        B = B - _mH(Q).matmul(M)
    U, S, Vh = linalg_svd(B, full_matrices=False)
    V = _mH(Vh)
    U = Q.matmul(U)
    if m < n:
        U, V = V, U
    return U, S, V


@export(method=False)
def svd_lowrank(A, q=6, niter=2, M=None):
    """``torch.svd_lowrank``: ``(U, S, V)`` with ``U diag(S) V^T`` approximating ``A - M`` at rank ``q`` (Halko,
    Martinsson and Tropp's randomized range finder with ``niter`` power iterations, PyTorch's algorithm step for
    step; the sketch comes from the global generator, so ``nee.manual_seed`` makes it reproducible)."""
    _matrix(A, "svd_lowrank")
    if A._dtype.category < 2:
        A = A.to(_dt.float32)
    return _svd_lowrank(A, q, niter, M)


@export(method=False)
def pca_lowrank(A, q=None, center=True, niter=2):
    """``torch.pca_lowrank``: ``svd_lowrank`` of ``A`` minus its column means (``center``), ``q`` defaulting to
    min(6, m, n)."""
    _matrix(A, "pca_lowrank")
    m, n = A.shape[-2:]
    if q is None:
        q = min(6, m, n)
    elif not 0 <= q <= min(m, n):
        raise ValueError(f"q(={q}) must be non-negative integer and not greater than min(m, n)={min(m, n)}")
    if not niter >= 0:
        raise ValueError(f"niter(={niter}) must be non-negative integer")
    if A._dtype.category < 2:
        A = A.to(_dt.float32)
    if not center:
        return _svd_lowrank(A, q, niter, None)
    return _svd_lowrank(A - A.mean(-2, keepdim=True), q, niter, None)


# ------------------------------------------------------------------ the old (torch < 1.9 / deprecated) entry points
_REMOVED = {
    "eig": "`torch.linalg.eig` returns complex tensors of dtype `cfloat` or `cdouble` rather than real tensors "
           "mimicking complex tensors.\n\nL, _ = torch.eig(A) should be replaced with:\nL_complex = "
           "torch.linalg.eigvals(A)\n\nand\n\nL, V = torch.eig(A, eigenvectors=True) should be replaced with:\n"
           "L_complex, V_complex = torch.linalg.eig(A)",
    "lstsq": "`torch.lstsq` is deprecated in favor of `torch.linalg.lstsq`.\n`torch.linalg.lstsq` has reversed "
             "arguments and does not return the QR decomposition in the returned tuple (although it returns other "
             "information about the problem).\n\nTo get the QR decomposition consider using `torch.linalg.qr`.\n\n"
             "The returned solution in `torch.lstsq` stored the residuals of the solution in the last m - n columns "
             "of the returned value whenever m > n. In torch.linalg.lstsq, the residuals are in the field "
             "'residuals' of the returned named tuple.\n\nThe unpacking of the solution, as in\nX, _ = "
             "torch.lstsq(B, A).solution[:A.size(1)]\nshould be replaced with:\nX = torch.linalg.lstsq(A, B).solution",
    "solve": "`torch.solve` is deprecated in favor of `torch.linalg.solve`. `torch.linalg.solve` has its arguments "
             "reversed and does not return the LU factorization.\n\nTo get the LU factorization see `torch.lu`, which "
             "can be used with `torch.lu_solve` or `torch.lu_unpack`.\nX = torch.solve(B, A).solution should be "
             "replaced with:\nX = torch.linalg.solve(A, B)",
    "symeig": "The default behavior has changed from using the upper triangular portion of the matrix by default to "
              "using the lower triangular portion.\n\nL, _ = torch.symeig(A, upper=upper) should be replaced with:\n"
              "L = torch.linalg.eigvalsh(A, UPLO='U' if upper else 'L')\n\nand\n\nL, V = torch.symeig(A, "
              "eigenvectors=True) should be replaced with:\nL, V = torch.linalg.eigh(A, UPLO='U' if upper else 'L')",
    "matrix_rank": "\nPlease use the `torch.linalg.matrix_rank` function instead. The parameter 'symmetric' was "
                   "renamed in `torch.linalg.matrix_rank()` to 'hermitian'.",
}


def _removed(name, method):
    def f(*args, **kwargs):
        sep = "" if _REMOVED[name].startswith("\n") else " "
        raise RuntimeError(f"This function was deprecated since version 1.9 and is now removed.{sep}{_REMOVED[name]}")
    f.__name__ = name
    f.__doc__ = f"``torch.{name}``: removed in PyTorch 1.9; raises its RuntimeError (what to call instead)."
    export(f, name=name, method=method)


for _n in _REMOVED:
    _removed(_n, _n != "matrix_rank")


@export
def lu(A, pivot=True, get_infos=False, out=None):
    """``torch.lu`` (deprecated): ``(LU, pivots)`` of ``linalg.lu_factor_ex``, ``(LU, pivots, infos)`` with
    ``get_infos`` (which also leaves singular matrices unchecked)."""
    r = linalg_lu_factor_ex(A, pivot=pivot, check_errors=not get_infos)
    return (r.LU, r.pivots, r.info) if get_infos else (r.LU, r.pivots)


@export(method=False)
def nuclear_norm(input, dim=None, keepdim=False, *, out=None):
    """``torch.nuclear_norm`` (deprecated): the sum of singular values over ``dim`` (default: the last two)."""
    from ..linalg import matrix_norm
    if isinstance(dim, bool) and keepdim is False:       # (the old overload nuclear_norm(input, keepdim))
        dim, keepdim = None, dim
    if dim is None:
        dim = (-2, -1)
    return _out(matrix_norm(input, "nuc", tuple(dim), keepdim), out)
