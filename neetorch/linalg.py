"""``nee.linalg``: the ``torch.linalg`` names neetorch implements (each is an op from the op table)."""
from .ops.linalg import matmul, vdot  # noqa: F401
from .ops.matrix import linalg_cross as cross  # noqa: F401
from .ops.reduction import vector_norm  # noqa: F401


def norm(input, ord=None, dim=None, keepdim=False, *, dtype=None):
    """Vector norm (``ord`` a number or inf) or Frobenius norm (``ord=None``/``'fro'`` over 2 dims)."""
    if ord in (None, "fro") or isinstance(ord, (int, float)):
        return vector_norm(input, 2 if ord in (None, "fro") else ord, dim=dim, keepdim=keepdim, dtype=dtype)
    raise NotImplementedError(f"linalg.norm: ord={ord!r} (matrix norms other than 'fro') is not implemented")


def matrix_norm(input, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    if ord != "fro":
        raise NotImplementedError(f"linalg.matrix_norm: ord={ord!r} is not implemented (only 'fro')")
    return vector_norm(input, 2, dim=dim, keepdim=keepdim, dtype=dtype)
