"""Shape rules shared by op definitions."""
from __future__ import annotations

import operator

import numpy as np

__all__ = ["broadcast_shapes", "wrap_dim", "wrap_dims", "numel"]


def broadcast_shapes(*shapes, op: str = "broadcast") -> tuple:
    """NumPy/PyTorch broadcasting; the error names the op and every shape."""
    if len(shapes) == 1:
        return tuple(shapes[0])
    if len(shapes) == 2 and shapes[0] == shapes[1]:
        return tuple(shapes[0])
    nd = max(len(s) for s in shapes)
    out = [1] * nd
    for s in shapes:
        off = nd - len(s)
        for i, d in enumerate(s):
            j = off + i
            if d == 1:
                continue
            if out[j] == 1:
                out[j] = d
            elif out[j] != d:
                raise RuntimeError(
                    f"{op}: shapes {' and '.join(str(tuple(x)) for x in shapes)} cannot be broadcast together "
                    f"(size {out[j]} vs {d} at dimension {j - nd})")
    return tuple(out)


def wrap_dim(dim, ndim: int, op: str = "") -> int:
    n = max(ndim, 1)
    try:
        if isinstance(dim, (bool, np.bool_)):   # torch: a bool (or float) dim is a TypeError, never truncated
            raise TypeError
        dim = operator.index(dim)
    except TypeError:
        raise TypeError(f"{op}: dim must be an int, got {type(dim).__name__}") from None
    if not -n <= dim < n:
        raise IndexError(f"{op}: Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim + n if dim < 0 else dim


def wrap_dims(dims, ndim: int, op: str = "") -> tuple:
    """Normalize an int / tuple of dims (None: all dims); duplicates are an error."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int) or not hasattr(dims, "__iter__") or getattr(dims, "ndim", None) == 0:
        dims = (dims,)   # (a 0-d tensor too: torch takes an integer one as a dim)
    out = tuple(wrap_dim(d, ndim, op) for d in dims)
    if len(set(out)) != len(out):
        raise RuntimeError(f"{op}: dim {out} appears multiple times in the list of dims")
    return out


def numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def int_arg(op: str, name: str, v):
    """torch's ``int`` arguments (a dim, a diagonal, an order): a Python / numpy integer or a 0-d integer tensor,
    as an int; a float, or any other tensor, raises torch's TypeError."""
    import numpy as np
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    if getattr(v, "ndim", None) == 0 and getattr(getattr(v, "_dtype", None), "category", None) in (0, 1):
        return int(v.item())
    raise TypeError(f"{op}(): argument '{name}' must be int, not {type(v).__name__}")
