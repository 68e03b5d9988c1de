"""``nee.linalg``: the ``torch.linalg`` names neetorch implements (each is an op of the op table, or
composed from them: see ``ops/lapack.py`` for the decompositions and solvers).

float32/float64 and complex64/complex128 (complex values on the CPU, eager only), with torch's dtype rules:
``eig`` / ``eigvals`` give complex results for any input; singular values, Hermitian eigenvalues and norms are
real.  ``ldl_factor`` / ``ldl_solve`` of complex matrices: complex symmetric, or Hermitian with ``hermitian=True``.
"""
import math

from .ops.lapack import LinAlgError, _floating, _out, _square, _tensor
from .ops.lapack import linalg_cholesky as cholesky
from .ops.lapack import linalg_cholesky_ex as cholesky_ex
from .ops.lapack import linalg_det as det
from .ops.lapack import linalg_diagonal as diagonal
from .ops.lapack import linalg_eig as eig
from .ops.lapack import linalg_eigh as eigh
from .ops.lapack import linalg_eigvals as eigvals
from .ops.lapack import linalg_eigvalsh as eigvalsh
from .ops.lapack import linalg_inv as inv
from .ops.lapack import linalg_inv_ex as inv_ex
from .ops.lapack import linalg_ldl_factor as ldl_factor
from .ops.lapack import linalg_ldl_factor_ex as ldl_factor_ex
from .ops.lapack import linalg_ldl_solve as ldl_solve
from .ops.lapack import linalg_lstsq as lstsq
from .ops.lapack import linalg_lu as lu
from .ops.lapack import linalg_lu_factor as lu_factor
from .ops.lapack import linalg_lu_factor_ex as lu_factor_ex
from .ops.lapack import linalg_lu_solve as lu_solve
from .ops.lapack import linalg_matrix_exp as matrix_exp
from .ops.lapack import linalg_matrix_power as matrix_power
from .ops.lapack import linalg_matrix_rank as matrix_rank
from .ops.lapack import linalg_multi_dot as multi_dot
from .ops.lapack import linalg_pinv as pinv
from .ops.lapack import linalg_qr as qr
from .ops.lapack import linalg_slogdet as slogdet
from .ops.lapack import linalg_solve as solve
from .ops.lapack import linalg_solve_ex as solve_ex
from .ops.lapack import linalg_solve_triangular as solve_triangular
from .ops.lapack import linalg_svd as svd
from .ops.lapack import linalg_svdvals as svdvals
from .ops.lapack import linalg_tensorinv as tensorinv
from .ops.lapack import linalg_tensorsolve as tensorsolve
from .ops.lapack import linalg_vecdot as vecdot
from .ops.linalg import matmul, vdot
from .ops.matrix import linalg_cross as cross
from .ops.reduction import vector_norm

__all__ = ["LinAlgError", "cholesky", "cholesky_ex", "cond", "cross", "det", "diagonal", "eig", "eigh", "eigvals",
           "eigvalsh", "householder_product", "inv", "inv_ex", "ldl_factor", "ldl_factor_ex",
           "ldl_solve", "lstsq", "lu", "lu_factor", "lu_factor_ex", "lu_solve", "matmul",
           "matrix_exp", "matrix_norm", "matrix_power", "matrix_rank", "multi_dot", "norm", "pinv", "qr", "slogdet",
           "solve", "solve_ex", "solve_triangular", "svd", "svdvals", "tensorinv", "tensorsolve", "vander", "vdot",
           "vecdot", "vector_norm"]

_MATRIX_ORDS = ("fro", "nuc", math.inf, -math.inf, 1, -1, 2, -2)


def norm(input, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    """``torch.linalg.norm``: a vector norm (1-D ``dim``, or ``ord=None`` over everything), else a matrix norm
    over 2 dims (``ord`` in 'fro', 'nuc', inf, -inf, 1, -1, 2, -2)."""
    if dim is not None and not isinstance(dim, (tuple, list)):
        dim = (dim,)
    if ord is None:
        return _out(vector_norm(input, 2, dim=dim, keepdim=keepdim, dtype=dtype), out)
    if dim is None:
        if input.ndim not in (1, 2):
            raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got "
                               f"{input.ndim}D.")
        dim = tuple(range(input.ndim))
    if len(dim) == 2:
        return _out(matrix_norm(input, ord, dim, keepdim, dtype=dtype), out)
    if isinstance(ord, str):   # torch: a string order is always a matrix norm (RuntimeError on one dim)
        if input.ndim < 2:
            raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {', '.join(map(str, dim))}")
    return _out(vector_norm(input, ord, dim=dim, keepdim=keepdim, dtype=dtype), out)


def matrix_norm(input, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    """``torch.linalg.matrix_norm``: 'fro', 'nuc', inf, -inf, 1, -1, 2, -2 over the two dims ``dim``."""
    _tensor(input, "linalg.matrix_norm")
    if input.ndim < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    if ord not in _MATRIX_ORDS:
        _floating(input, "linalg.matrix_norm")
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    # float16 / bfloat16: 'fro', 1, -1, inf, -inf (sums of entries, as torch); the singular-value norms refuse them
    _floating(input, "linalg.matrix_norm", half=None if ord in ("nuc", 2, -2) else False)
    if dtype is not None:
        from .ops.lapack import _CAP
        from .tensor import dtypes as _dt
        want = _dt.to_dtype(dtype)
        if (want.category == 3) != (input._dtype.category == 3):
            kind = "complex for complex" if input._dtype.category == 3 else "real for real"
            raise RuntimeError(f"linalg.matrix_norm: dtype should be {kind} inputs, but got "
                               f"{_CAP.get(want.name, want.name)}")
        input = input.to(want)
    dim = (dim,) if isinstance(dim, int) else tuple(dim)
    if len(dim) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dim))}")
    for d in dim:
        if not -input.ndim <= d < input.ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-input.ndim}, {input.ndim - 1}], "
                             f"but got {d})")
    d0, d1 = (d % input.ndim for d in dim)
    if d0 == d1:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({dim[0]}, {dim[1]})")
    if ord == "fro":
        return _out(vector_norm(input, 2, dim=(d0, d1), keepdim=keepdim), out)
    if ord in ("nuc", 2, -2):
        # the two dims last, then the singular values
        rest = [d for d in range(input.ndim) if d not in (d0, d1)]
        s = svdvals(input.permute(rest + [d0, d1]))
        if ord == "nuc":
            r = s.sum(-1)
        elif ord == 2:
            r = s.amax(-1) if s.shape[-1] else s.sum(-1)      # (torch: the max-norms of an empty matrix are 0)
        else:
            r = s.amin(-1)
        if keepdim:
            r = r.unsqueeze(min(d0, d1)).unsqueeze(max(d0, d1))
        return _out(r, out)
    # 1 / inf: the largest (smallest for -1 / -inf) column / row sum of |A|
    if abs(ord) == math.inf:
        d0, d1 = d1, d0
    if not keepdim and d0 < d1:
        d1 -= 1
    s = vector_norm(input, 1, dim=(d0,), keepdim=keepdim)
    if ord > 0:
        return _out(s.amax(d1, keepdim=keepdim) if s.shape[d1] else s.sum(d1, keepdim=keepdim), out)
    return _out(s.amin(d1, keepdim=keepdim), out)


def cond(A, p=None, *, out=None):
    """``torch.linalg.cond``: the condition number; p in None/2/-2 (from the singular values, any shape), or
    'fro', 'nuc', inf, -inf, 1, -1 (square matrices; singular ones give inf)."""
    _tensor(A, "linalg.cond")
    if p not in (None,) + _MATRIX_ORDS:
        raise RuntimeError(f"linalg.cond got an invalid norm type: {p}")
    if A.ndim < 2:
        raise RuntimeError("linalg.cond: The input tensor A must have at least 2 dimensions.")
    if p in (None, 2, -2):
        if A.numel() == 0:
            return _out(vector_norm(A, 2, dim=(-2, -1)), out)
        s = svdvals(A)
        big, small = s.narrow(-1, 0, 1).squeeze(-1), s.narrow(-1, s.shape[-1] - 1, 1).squeeze(-1)
        return _out(small / big if p == -2 else big / small, out)
    _square(A, f"linalg.cond(ord={p})")
    _floating(A, "linalg.inv")
    if A.numel() == 0:
        return _out(vector_norm(A, 2, dim=(-2, -1)), out)
    if p == "nuc":
        # torch's definition (matrix_norm would see the infinities of a singular matrix's inverse)
        s = svdvals(A)
        return _out(s.sum(-1) * s.reciprocal().sum(-1), out)
    from .ops.registry import EXPORTS
    inverse, info = inv_ex(A)
    inverse = EXPORTS["where"][0]((info > 0).unsqueeze(-1).unsqueeze(-1), math.inf, inverse)
    return _out(matrix_norm(A, p) * matrix_norm(inverse, p), out)


def vander(x, *, N=None):
    """``torch.linalg.vander``: (*, n) -> (*, n, N), the powers ``x**0 .. x**(N-1)`` (increasing, unlike
    ``torch.vander``) along a new last dim, as a ``cumprod`` like PyTorch; integer inputs give int64."""
    from .ops.registry import EXPORTS
    from .tensor import dtypes as _dt
    _tensor(x, "linalg.vander", "x")
    if x._dtype.category not in (1, 3) and x._dtype not in (_dt.float32, _dt.float64) or x._dtype is _dt.bool_:
        raise RuntimeError(f"linalg.vander supports floating point, complex, and integer tensors, but got "
                           f"{x._dtype.name}")
    x = x.unsqueeze(-1) if x.ndim == 0 else x
    n = x.shape[-1] if N is None else int(N)
    if n <= 1:
        raise RuntimeError("N must be greater than 1.")
    shape = tuple(x.shape) + (n - 1,)
    powers = x.unsqueeze(-1).expand(*shape).cumprod(-1)
    from .tensor.creation import ones
    first = ones(*shape[:-1], 1, dtype=powers._dtype, device=powers.device)
    return EXPORTS["cat"][0]([first, powers], -1)


def householder_product(A, tau, *, out=None):
    """``torch.linalg.householder_product``: the first n columns of H_1 ... H_k, H_i = I - tau_i v_i v_i^H with
    v_i = (0, .., 0, 1, A[i+1:, i]) (LAPACK's orgqr / ungqr, e.g. Q from ``geqrf``); A (*, m, n), tau (*, k),
    m >= n >= k.  Composed: k rank-1 updates of the (m, n) identity, applied from H_k back to H_1."""
    from .ops.registry import EXPORTS
    from .tensor import dtypes as _dt
    from .tensor.creation import arange, eye
    _tensor(A, "linalg.householder_product")
    _tensor(tau, "linalg.householder_product", "tau")
    op = "torch.linalg.householder_product"
    if A.ndim < 2:
        raise RuntimeError(f"{op}: input must have at least 2 dimensions.")
    m, n = A.shape[-2], A.shape[-1]
    if m < n:
        raise RuntimeError(f"{op}: input.shape[-2] must be greater than or equal to input.shape[-1]")
    k = tau.shape[-1] if tau.ndim else 1
    if n < k:
        raise RuntimeError(f"{op}: input.shape[-1] must be greater than or equal to tau.shape[-1]")
    if tau.ndim != A.ndim - 1 or tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise RuntimeError(f"{op}: Expected batch dimensions of tau to be equal to input.shape[:-2], but got "
                           f"{list(tau.shape[:-1])}")
    from .ops.lapack import _CAP, _mH
    if A._dtype.category < 2 or A._dtype in _dt.LOW_FLOATS:
        raise NotImplementedError(f"\"orgqr_cpu\" not implemented for '{_CAP.get(A._dtype.name, A._dtype.name)}'")
    if tau._dtype is not A._dtype:
        raise RuntimeError(f"{op}: tau dtype {_CAP.get(tau._dtype.name, tau._dtype.name)} does not match input dtype "
                           f"{_CAP.get(A._dtype.name, A._dtype.name)}")
    where = EXPORTS["where"][0]
    q = eye(m, n, dtype=A._dtype, device=A.device).expand(*A.shape)
    rows = arange(m, device=A.device).unsqueeze(-1)                  # (m, 1)
    for i in reversed(range(k)):
        col = A.narrow(-1, i, 1)                                       # (*, m, 1)
        v = where(rows < i, 0.0, where(rows == i, 1.0, col))
        t = tau.narrow(-1, i, 1).unsqueeze(-1)                         # (*, 1, 1)
        q = q - (v * t).matmul(_mH(v).matmul(q))       # H_i = I - tau_i v_i v_i^H
    return _out(q, out)
