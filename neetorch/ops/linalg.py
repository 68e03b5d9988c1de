"""Matrix products: matmul and its family (mm, bmm, mv, dot, addmm, linear, einsum, ...).

One op, ``matmul``, does the work on every device: inputs ``a[..., n, k]`` and
``b[..., k, m]`` (both at least 2-D, batch dims broadcast) give ``out[..., n, m]``.
The frontends below implement PyTorch's argument rules (1-D promotion and removal,
strict shapes of mm/bmm, dtype checks with PyTorch's messages) with views only, and
compose the scaled forms (addmm, baddbmm, linear's bias) from elementwise ops.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..tensor.tensor import Tensor
from .registry import Meta, OpDef, export, register, run
from . import elementwise as _ew
from ..tensor.dtypes import LOW_FLOATS as _LOW, float32 as _F32
from ..tensor import dtypes as _dt

__all__ = ["matmul", "mm", "bmm", "mv", "dot", "vdot", "inner", "outer", "ger", "addmm", "addmv", "addbmm",
           "baddbmm", "addr", "linear", "bilinear", "einsum", "tensordot", "chain_matmul", "kron"]

# c10's type names (used in PyTorch's messages)
_LOWER = {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
          "int32": "int", "int64": "long",
          "int16": "short", "int8": "signed char", "uint8": "unsigned char", "bool": "bool"}
_CAP = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int32": "Int",
        "int64": "Long",
        "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool", "complex64": "ComplexFloat",
        "complex128": "ComplexDouble"}


def _mul(a, b, out=None):
    return _ew.apply(_ew._BIN["mul"], a, b, out=out)


def _add(a, b, out=None):
    return _ew.apply(_ew._BIN["add"], a, b, out=out)


def _shape_str(shape) -> str:
    return "x".join(str(s) for s in shape)


# ---------------------------------------------------------------- the op
def _infer_matmul(metas, attrs):
    a, b = metas
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise RuntimeError(f"matmul op: operands must be at least 2-D, got {a.shape} and {b.shape}")
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({_shape_str(a.shape[-2:])} and "
                           f"{_shape_str(b.shape[-2:])})")
    batch = _broadcast_batch(a.shape[:-2], b.shape[:-2])
    return [Meta(batch + (a.shape[-2], b.shape[-1]), a.dtype)]


def _broadcast_batch(sa, sb) -> tuple:
    nd = max(len(sa), len(sb))
    sa = (1,) * (nd - len(sa)) + tuple(sa)
    sb = (1,) * (nd - len(sb)) + tuple(sb)
    out = []
    for i, (x, y) in enumerate(zip(sa, sb)):
        if x != y and x != 1 and y != 1:
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b ({y}) at non-singleton "
                               f"dimension {i}")
        out.append(y if x == 1 else x)
    return tuple(out)


MATMUL = register(OpDef("matmul", infer=_infer_matmul, kind="other",
                        reference=lambda xs, attrs: [np.matmul(xs[0], xs[1])],
                        doc="out[..., n, m] = a[..., n, k] @ b[..., k, m] with broadcast batch dims"))


def _einsum_infer(metas, attrs):
    ins, out_sub = _parse_einsum(attrs["equation"], [m.shape for m in metas])
    sizes = {}
    for sub, m in zip(ins, metas):
        for c, n in zip(sub, m.shape):
            if c in sizes and sizes[c] != n:
                if sizes[c] == 1:
                    sizes[c] = n
                elif n != 1:
                    raise RuntimeError(f"einsum(): subscript {c} has size {n} which does not broadcast with "
                                       f"previously seen size {sizes[c]}")
            elif c not in sizes:
                sizes[c] = n
    return [Meta(tuple(sizes[c] for c in out_sub), metas[0].dtype)]


EINSUM = register(OpDef("einsum", infer=_einsum_infer, kind="other",
                        reference=lambda xs, attrs: [np.einsum(attrs["equation"], *xs)]))


def _mm(a: Tensor, b: Tensor) -> Tensor:
    return run(MATMUL, [a, b], {})[0]


# ---------------------------------------------------------------- checks
def _check_tensor(x, name, op):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(x).__name__}")


def _check_mm_dtypes(a: Tensor, b: Tensor, empty: bool = False):
    """``empty``: the product has no element or its inner size is 0 (torch's mm/mv then only zero-fill, so bool
    matrices pass)."""
    if a._dtype is not b._dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {_LOWER[a._dtype.name]} != "
                           f"{_LOWER[b._dtype.name]}")
    if a._dtype.category == 0 and not empty:
        raise _dt.DTypeNotImplementedError("matmul: \"addmm_impl_cpu_\" not implemented for 'Bool' (bool matrices)")


def _zeros(shape, like: Tensor) -> Tensor:
    from ..tensor.creation import zeros
    return zeros(tuple(shape), dtype=like._dtype, device=like._device)


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _out(r: Tensor, out, cast: bool = False):
    """Write the product ``r`` into ``out=``: the dtypes must match (torch's matmul family), or with ``cast``
    (outer, an elementwise product) ``r``'s dtype must be castable to ``out``'s."""
    if out is None:
        return r
    from .elementwise import _can_cast
    if out._dtype is not r._dtype and not (cast and _can_cast(r._dtype, out._dtype)):
        raise RuntimeError(f"Expected out tensor to have dtype {r._dtype.name}, but got {out._dtype.name} instead")
    from .elementwise import resize_out
    resize_out(out, r.shape, "out=")  # an empty out is resized (torch's convention)
    out.copy_(r)
    return out


# ---------------------------------------------------------------- frontends
@export
def matmul(input, other, *, out=None):
    """Matrix product of two tensors (``torch.matmul``): dot, mv, mm, and batched mm with broadcasting."""
    if isinstance(input, Tensor) and isinstance(other, Tensor) and out is None:
        # fast path: plain 2-D x 2-D of one dtype (no views, no re-inference)
        sa, sb = input._data.shape, other._data.shape
        dt = input._dtype
        if len(sa) == 2 and len(sb) == 2 and sa[1] == sb[0] and other._dtype is dt and dt.category:
            return run(MATMUL, [input, other], {}, [Meta((sa[0], sb[1]), dt)])[0]
    _check_tensor(input, "input", "matmul")
    _check_tensor(other, "other", "matmul")
    a, b = input, other
    da, db = a.ndim, b.ndim
    if da == 0 or db == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {da}D and {db}D")
    if da == 1 and db == 1:
        return _out(dot(a, b), out)
    if da == 2 and db == 1:
        return _out(mv(a, b), out)
    if db >= 3:
        return _out(_matmul_batched(a, b), out)
    if da == 1 and db == 2:
        if a.shape[0] != b.shape[0]:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied (1x{a.shape[0]} and "
                               f"{_shape_str(b.shape)})")
        _check_mm_dtypes(a, b, empty=a.shape[0] == 0 or b.shape[1] == 0)
        if a._dtype is _dt.bool_:
            return _out(_zeros((b.shape[1],), b), out)
        return _out(_mm(a.unsqueeze(0), b).squeeze(0), out)
    if da == 2 and db == 2:
        return _out(mm(a, b), out)
    if da >= 3 and db <= 2:
        # torch folds the batch into the rows: one GEMM
        rows = 1
        for s in a.shape[:-1]:
            rows *= s
        k = a.shape[-1]
        if db == 1:
            if k != b.shape[0]:
                raise RuntimeError(f"size mismatch, got input ({rows}), mat ({rows}x{k}), vec ({b.shape[0]})")
            if a._dtype is not b._dtype:   # (torch folds this into an mv)
                raise RuntimeError(f"addmv input tensors must have the same dtype, but got {_CAP[b._dtype.name]}, "
                                   f"{_CAP[a._dtype.name]}, and {_CAP[b._dtype.name]}")
            _check_mm_dtypes(a, b, empty=rows == 0 or k == 0)
            if a._dtype is _dt.bool_:   # (an empty or k == 0 bool product: zeros, like torch's mv)
                return _out(_zeros(a.shape[:-1], b), out)
            return _out(_mm(a, b.unsqueeze(1)).squeeze(-1), out)
        if k != b.shape[0]:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{k} and {_shape_str(b.shape)})")
        _check_mm_dtypes(a, b, empty=rows == 0 or k == 0 or b.shape[1] == 0)
        if a._dtype is _dt.bool_:
            return _out(_zeros(tuple(a.shape[:-1]) + (b.shape[1],), b), out)
        return _out(_mm(a, b), out)
    raise AssertionError("matmul: unreachable")


def _matmul_batched(a: Tensor, b: Tensor) -> Tensor:
    """matmul with a >= 3-D second operand (torch's bmm path): promote 1-D operands, broadcast the batch dims.
    Like torch's bmm, an empty product (or inner size 0) checks no dtype and gives zeros of ``b``'s dtype; a
    non-empty one needs one non-bool dtype.  (A 1-D ``a`` goes through torch's mv when empty: dtypes must
    match.)"""
    da, db = a.ndim, b.ndim
    a2 = a.unsqueeze(0) if da == 1 else a
    b2 = b
    batch = _broadcast_batch(tuple(a2.shape[:-2]), tuple(b2.shape[:-2]))
    if a2.shape[-1] != b2.shape[-2]:
        nb = _prod(batch)
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{nb}, {a2.shape[-1]}] "
                           f"but got: [{nb}, {b2.shape[-2]}].")
    n, k, m = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    if _prod(batch) * n * m == 0 or k == 0:
        if da == 1 and a._dtype is not b._dtype:
            raise RuntimeError(f"addmv input tensors must have the same dtype, but got {_CAP[a._dtype.name]}, "
                               f"{_CAP[b._dtype.name]}, and {_CAP[a._dtype.name]}")
        r = _zeros(batch + (n, m), b)
    else:
        if a._dtype is _dt.bool_:
            raise _dt.DTypeNotImplementedError("\"bmm\" not implemented for 'Bool'")
        if a._dtype is not b._dtype:
            raise RuntimeError(f"expected scalar type {_CAP[a._dtype.name]} but found {_CAP[b._dtype.name]}")
        _check_mm_dtypes(a2, b2)
        r = _mm(a2, b2)
    return r.squeeze(-2) if da == 1 else r


@export
def mm(input, mat2, *, out=None):
    """Matrix product of two 2-D tensors (``torch.mm``)."""
    _check_tensor(input, "input", "mm")
    _check_tensor(mat2, "mat2", "mm")
    if input.ndim != 2:
        raise RuntimeError("self must be a matrix")
    if mat2.ndim != 2:
        raise RuntimeError("mat2 must be a matrix")
    _check_mm_dtypes(input, mat2, empty=input.shape[0] == 0 or input.shape[1] == 0 or mat2.shape[-1] == 0)
    if input.shape[1] != mat2.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({_shape_str(input.shape)} and "
                           f"{_shape_str(mat2.shape)})")
    if input._dtype is _dt.bool_:   # (empty or k == 0: torch's addmm only zero-fills)
        return _out(_zeros((input.shape[0], mat2.shape[1]), mat2), out)
    return _out(_mm(input, mat2), out)


def _check_bmm_shapes(input, mat2):
    _check_tensor(input, "input", "bmm")
    _check_tensor(mat2, "mat2", "bmm")
    if input.ndim != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if mat2.ndim != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    b, n, k = input.shape
    if mat2.shape[0] != b or mat2.shape[1] != k:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{b}, {k}] but got: "
                           f"[{mat2.shape[0]}, {mat2.shape[1]}].")


@export
def bmm(input, mat2, *, out=None):
    """Batched matrix product of two 3-D tensors with equal batch size (``torch.bmm``)."""
    _check_bmm_shapes(input, mat2)
    b, n, k = input.shape
    if b * n * mat2.shape[2] == 0 or k == 0:
        # torch's bmm of an empty product (or inner size 0) checks no dtype: zeros of mat2's dtype (einsum
        # relies on it)
        return _out(_zeros((b, n, mat2.shape[2]), mat2), out)
    if input._dtype is _dt.bool_:
        raise _dt.DTypeNotImplementedError("\"bmm\" not implemented for 'Bool'")
    if input._dtype is not mat2._dtype:
        raise RuntimeError(f"expected scalar type {_CAP[input._dtype.name]} but found {_CAP[mat2._dtype.name]}")
    _check_mm_dtypes(input, mat2)
    return _out(_mm(input, mat2), out)


@export
def mv(input, vec, *, out=None):
    """Matrix-vector product (``torch.mv``)."""
    _check_tensor(input, "input", "mv")
    _check_tensor(vec, "vec", "mv")
    if input.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {input.ndim}, {vec.ndim}")
    if input._dtype is not vec._dtype:
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {_CAP[vec._dtype.name]}, "
                           f"{_CAP[input._dtype.name]}, and {_CAP[vec._dtype.name]}")
    if input.shape[1] != vec.shape[0]:
        raise RuntimeError(f"size mismatch, got input ({input.shape[0]}), mat ({_shape_str(input.shape)}), "
                           f"vec ({vec.shape[0]})")
    if input._dtype.category == 0:
        if input.numel() == 0:   # (torch's addmv of an empty matrix only zero-fills)
            return _out(_zeros((input.shape[0],), vec), out)
        raise _dt.DTypeNotImplementedError("\"addmv_impl_cpu\" not implemented for 'Bool'")
    return _out(_mm(input, vec.unsqueeze(1)).squeeze(1), out)


@export
def dot(input, tensor, *, out=None):
    """Dot product of two 1-D tensors (``torch.dot``)."""
    _check_tensor(input, "input", "dot")
    _check_tensor(tensor, "tensor", "dot")
    if input.ndim != 1 or tensor.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.ndim}D and {tensor.ndim}D tensors")
    if input._dtype is not tensor._dtype:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found {_CAP[input._dtype.name]} "
                           f"and {_CAP[tensor._dtype.name]}")
    if input._dtype.category == 0:
        raise _dt.DTypeNotImplementedError("\"dot\" not implemented for 'Bool'")
    n1, n2 = input.shape[0], tensor.shape[0]
    if n1 != n2:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{n1}] and src [{n2}] to have the same number "
                           f"of elements, but got {n1} and {n2} elements respectively")
    return _out(_mm(input.unsqueeze(0), tensor.unsqueeze(1)).reshape(()), out)


@export
def vdot(input, other, *, out=None):
    """Dot product (``torch.vdot``; real dtypes only, so no conjugation)."""
    return dot(input, other, out=out)


@export
def inner(input, other, *, out=None):
    """Inner product over the last dims (``torch.inner``)."""
    if input.ndim == 0 or other.ndim == 0:
        return _out(_mul(input, other), out)
    if input._dtype is _dt.bool_ or other._dtype is _dt.bool_:
        raise _dt.DTypeNotImplementedError("inner: \"addmm_impl_cpu_\" not implemented for 'Bool'")
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but got shapes "
                           f"{list(input.shape)} and {list(other.shape)}")
    return _out(tensordot(input, other, dims=([input.ndim - 1], [other.ndim - 1])), out)


@export
def outer(input, vec2, *, out=None):
    """Outer product of two 1-D tensors (``torch.outer``)."""
    if input.ndim != 1 or vec2.ndim != 1:
        raise RuntimeError(f"outer: expected 1-D tensors, but got {input.ndim}D and {vec2.ndim}D tensors")
    return _out(_mul(input.unsqueeze(1), vec2.unsqueeze(0)), out, cast=True)


export(outer, name="ger")
ger = outer


#: torch's names of the C types its error messages give
_CTYPE = {"int64": "int64_t", "int32": "int", "int16": "short", "int8": "signed char", "uint8": "uint8_t",
          "float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16", "bool": "bool"}


def _blas_scalar(v, dt):
    """``alpha`` / ``beta`` of addmm / addmv / baddbmm / addbmm as torch's kernels take them (``Scalar.to<T>()``
    with T the matrices' dtype, float for float16/bfloat16): a float truncated towards zero for integer
    matrices, a complex one refused unless its imaginary part is 0, a value out of T's range refused."""
    if dt.category == 3:
        return v
    t = _dt.float32 if dt in _LOW else dt
    bad = RuntimeError(f"value cannot be converted to type {_CTYPE.get(t.name, t.name)} without overflow")
    if isinstance(v, (complex, np.complexfloating)):
        if v.imag != 0:
            raise bad
        v = float(v.real)
    if isinstance(v, (bool, np.bool_)):
        return int(v) if t.category == 1 else (float(v) if t.category == 2 else bool(v))
    if t.category == 1:
        # c10::overflows: a float outside [min, max] before truncation; an int outside [min, max] (for unsigned
        # types, -max..max: a negative int wraps)
        if _dt.scalar_overflows(v, t):
            raise bad
        v = int(v)   # (truncation towards zero)
        return v + (1 << (8 * t.itemsize)) if v < 0 and not t.is_signed else v
    if t.category == 2 and _dt.scalar_overflows(v, t):
        raise bad
    return v


def _scaled_add(prod: Tensor, input: Tensor, beta, alpha, op: str, scalar_dt=None) -> Tensor:
    """beta * input + alpha * prod, in the product's dtype.  The common ``beta == 1`` add goes to a
    fresh buffer rather than into ``prod``: a kernel whose input and output are the same memory
    fails LLVM's runtime alias check and runs its scalar loop (an in-place bias add measured ~5x
    slower than into a fresh buffer).  ``scalar_dt``: the matrices' dtype, that ``beta`` and ``alpha`` are
    converted to (:func:`_blas_scalar`)."""
    from .shape_rules import broadcast_shapes
    if isinstance(input, Tensor) and input._dtype is not prod._dtype:  # torch promotes nothing here
        raise RuntimeError(f"{op}: input tensors must have the same dtype, but got input {input._dtype.name} and "
                           f"matrices {prod._dtype.name}")
    if scalar_dt is not None:
        beta, alpha = _blas_scalar(beta, scalar_dt), _blas_scalar(alpha, scalar_dt)
    shape = tuple(prod.shape)
    if tuple(broadcast_shapes(tuple(input.shape), shape, op=op)) != shape:
        raise RuntimeError(f"The expanded size of the tensor ({shape[-1] if shape else 1}) must match the existing "
                           f"size ({input.shape[-1] if input.ndim else 1}). Target sizes: {list(shape)}. "
                           f"Tensor sizes: {list(input.shape)}")
    if alpha != 1:
        _mul(prod, alpha, out=prod)
    if beta == 0:
        return prod
    if beta == 1:
        if input._dtype is prod._dtype:
            return _add(prod, input)
        return _add(prod, input, out=prod)   # the product's dtype wins, as before
    return _add(prod, _mul(input, beta), out=prod)


def _low_scaled_add(prod, input, mats, beta, alpha, op: str):
    """``_scaled_add(prod(*mats), input, ...)``; float16/bfloat16 operands (all one dtype) are added to the
    float32 product in float32 and rounded once, like torch's addmm/linear (a bias added after rounding the
    product would round twice)."""
    from ..tensor import dtypes as _dt
    low = mats[0]._dtype
    if low in _dt.LOW_FLOATS and isinstance(input, Tensor) and input._dtype is low and \
            all(isinstance(m, Tensor) and m._dtype is low for m in mats):
        f32 = _dt.float32
        return _scaled_add(prod(*[m.to(f32) for m in mats]), input.to(f32), beta, alpha, op, low).to(low)
    return _scaled_add(prod(*mats), input, beta, alpha, op, getattr(mats[0], "_dtype", None))


@export
def addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (mat1 @ mat2) (``torch.addmm``)."""
    return _out(_low_scaled_add(mm, input, (mat1, mat2), beta, alpha, "addmm"), out)


@export
def addmv(input, mat, vec, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (mat @ vec) (``torch.addmv``)."""
    return _out(_low_scaled_add(mv, input, (mat, vec), beta, alpha, "addmv"), out)


@export(name="addmv_", method=False)
def addmv_(input, mat, vec, *, beta=1, alpha=1):
    """In place ``input = beta * input + alpha * (mat @ vec)`` (``torch.addmv_``)."""
    return input.addmv_(mat, vec, beta=beta, alpha=alpha)


@export
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * bmm(batch1, batch2) (``torch.baddbmm``)."""
    if isinstance(input, Tensor) and isinstance(batch1, Tensor) and isinstance(batch2, Tensor):
        if input._dtype is not batch1._dtype:   # (torch's baddbmm meta check: input against batch1 only)
            raise RuntimeError(f"Input dtypes must be the same, got: input {_CNAME[input._dtype.name]}, batch1: "
                               f"{_CNAME[batch1._dtype.name]}, batch2: {_CNAME[batch2._dtype.name]}")
        _check_bmm_shapes(batch1, batch2)
        nb, n, k = batch1.shape
        if nb * n * batch2.shape[2] == 0 or k == 0:
            return _out(_baddbmm_empty(input, batch1, batch2, beta), out)
    if isinstance(batch1, Tensor) and batch1._dtype is _dt.bool_:   # (an empty product of bools is allowed)
        raise _dt.DTypeNotImplementedError("\"baddbmm\" not implemented for 'Bool'")
    if isinstance(batch1, Tensor) and isinstance(batch2, Tensor) and batch1._dtype is not batch2._dtype:
        raise RuntimeError(f"expected scalar type {_CAP[batch1._dtype.name]} but found {_CAP[batch2._dtype.name]}")
    return _out(_low_scaled_add(bmm, input, (batch1, batch2), beta, alpha, "baddbmm"), out)


#: c10's ScalarType names as torch's baddbmm message prints them
_CNAME = dict(_LOWER, int64="long int", int16="short int", complex64="c10::complex<float>",
              complex128="c10::complex<double>")


def _baddbmm_empty(input, batch1, batch2, beta):
    """torch's baddbmm with an empty product or inner size 0: the result has ``batch2``'s dtype and no other
    dtype is checked; an empty result is returned as is, otherwise it is ``input`` (broadcast, cast to
    batch2's dtype) times ``beta`` in place (so torch's in-place cast rule refuses e.g. a float ``beta`` on
    integer matrices), or zeros for ``beta == 0``."""
    from .shape_rules import broadcast_shapes
    shape = (batch1.shape[0], batch1.shape[1], batch2.shape[2])
    if tuple(broadcast_shapes(tuple(input.shape), shape, op="baddbmm")) != shape:
        raise RuntimeError(f"The expanded size of the tensor ({shape[-1]}) must match the existing "
                           f"size ({input.shape[-1] if input.ndim else 1}). Target sizes: {list(shape)}. "
                           f"Tensor sizes: {list(input.shape)}")
    r = _zeros(shape, batch2)
    if r.numel() == 0 or beta == 0:
        return r
    r.copy_(input.expand(*shape))
    return r.mul_(beta)


@export
def addbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * sum_b(batch1[b] @ batch2[b]) (``torch.addbmm``)."""
    if isinstance(batch1, Tensor) and isinstance(batch2, Tensor) and batch1._dtype is not batch2._dtype:
        raise RuntimeError(f"expected scalar type {_CAP[batch1._dtype.name]} but found {_CAP[batch2._dtype.name]}")
    if isinstance(batch1, Tensor) and batch1._dtype is _dt.bool_:
        raise _dt.DTypeNotImplementedError("\"addmm_impl_cpu_\" not implemented for 'Bool'")
    bmm(batch1, batch2)  # argument checks
    b, n, k = batch1.shape
    m = batch2.shape[2]
    # sum over the batch = one GEMM over the concatenated inner dim
    a2 = batch1.permute(1, 0, 2).reshape(n, b * k)
    b2 = batch2.reshape(b * k, m)
    return _out(_scaled_add(_mm(a2, b2), input, beta, alpha, "addbmm", batch1._dtype), out)


@export
def addr(input, vec1, vec2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * outer(vec1, vec2) (``torch.addr``): elementwise, so the dtypes promote (unlike
    addmm/addmv/baddbmm, whose input must have the matrices' dtype)."""
    rt = _ew.result_type(input, vec1, vec2)  # (the product is computed in the promoted dtype)
    for nm, v in (("beta", beta), ("alpha", alpha)):   # torch's check_addr_scalar, then Scalar.to<T>()
        if isinstance(v, (bool, np.bool_)) and rt is not _dt.bool_:
            raise RuntimeError(f"Boolean {nm} only supported for Boolean results.")
        if rt.category < 2 and not isinstance(v, (bool, np.bool_, int, np.integer)):
            raise RuntimeError(f"For integral input tensors, argument {nm} must not be a floating point number.")
        if _dt.scalar_overflows(v, rt):
            raise RuntimeError(f"value cannot be converted to type {_CTYPE.get(rt.name, rt.name)} without overflow")
    if rt.category < 3:   # (a complex scalar got here with a zero imaginary part)
        beta, alpha = (v.real if isinstance(v, (complex, np.complexfloating)) else v for v in (beta, alpha))
    if rt is _dt.bool_:   # beta && input || alpha && outer
        beta, alpha = bool(beta), bool(alpha)
    prod = outer(vec1 if vec1._dtype is rt else vec1.to(rt), vec2 if vec2._dtype is rt else vec2.to(rt))
    return _out(_scaled_add(prod, input if input._dtype is rt else input.to(rt), beta, alpha, "addr"), out,
                cast=True)


@export(method=False)
def linear(input, weight, bias=None):
    """y = input @ weight.T + bias over any leading dims (``torch.nn.functional.linear``)."""
    _check_tensor(input, "input", "linear")
    _check_tensor(weight, "weight", "linear")
    if weight.ndim == 1:
        if bias is not None and (input.ndim == 2 or (input.is_contiguous() and bias.ndim == 1)):
            # torch's fused addmm path (2-D input, or contiguous input flattened to 2-D) needs a matrix weight
            raise RuntimeError(f"linear: mat2 must be a matrix, got 1-D tensor (weight of shape {tuple(weight.shape)} "
                               f"with a bias and input of shape {tuple(input.shape)})")
        r = matmul(input, weight)
    elif weight.ndim == 2:
        if input.ndim == 0:
            raise RuntimeError("both arguments to linear need to be at least 1D, but they are 0D and 2D")
        _check_mm_dtypes(input, weight)
        k = input.shape[-1]
        if k != weight.shape[1]:
            rows = 1
            for s in input.shape[:-1]:
                rows *= s
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{k} and "
                               f"{weight.shape[1]}x{weight.shape[0]})")
        if input.ndim == 1:
            r = _mm(input.unsqueeze(0), weight.t()).squeeze(0)
        else:
            r = _mm(input, weight.t())
    else:
        raise RuntimeError(f"linear: weight must be 1-D or 2-D, got {weight.ndim}-D")
    if bias is not None:
        if bias._dtype is not r._dtype:
            raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {_LOWER[bias._dtype.name]} != "
                               f"{_LOWER[r._dtype.name]}")
        if r._dtype in _LOW and weight.ndim == 2 and bias._device.type == "cpu":
            # float16/bfloat16: the bias is added to the float32 product and the sum rounded once (torch)
            return _scaled_add(_linear_f32(input, weight), bias.to(_F32), 1, 1, "linear").to(r._dtype)
        if weight.ndim == 1 and tuple(bias.shape) != tuple(r.shape):
            # torch adds the bias in place: it must broadcast to the output without growing it
            from .shape_rules import broadcast_shapes
            o = tuple(r.shape)
            if tuple(broadcast_shapes(o, bias.shape)) != o:
                raise RuntimeError(f"linear: the bias of shape {list(bias.shape)} does not broadcast to the output "
                                   f"of shape {list(o)}")
        r = _scaled_add(r, bias, 1, 1, "linear")
    return r


def _linear_f32(input, weight):
    from ..tensor import dtypes as _dt
    x, w = input.to(_dt.float32), weight.to(_dt.float32)
    return _mm(x.unsqueeze(0), w.t()).squeeze(0) if x.ndim == 1 else _mm(x, w.t())


@export(method=False)
def bilinear(input1, input2, weight, bias=None):
    """y[..., o] = sum_ij x1[..., i] W[o, i, j] x2[..., j] + b[o] (``torch.nn.functional.bilinear``)."""
    r = einsum("...i,oij,...j->...o", input1, weight, input2)
    if bias is not None:
        r = _add(r, bias, out=r)
    return r


# ---------------------------------------------------------------- einsum / tensordot
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _parse_einsum(eq: str, shapes):
    """Explicit subscripts per operand and output, ellipses expanded to fresh letters."""
    eq = eq.replace(" ", "")
    if "->" in eq:
        lhs, rhs = eq.split("->")
    else:
        lhs, rhs = eq, None
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum(): more operands were provided than specified in the equation"
                         if len(shapes) > len(terms) else
                         "einsum(): fewer operands were provided than specified in the equation")
    used = set(c for c in eq if c.isalpha())
    free = [c for c in _LETTERS if c not in used]
    ell_n = 0
    for t, s in zip(terms, shapes):
        nlab = len(t.replace("...", ""))
        if "..." in t:
            ell_n = max(ell_n, len(s) - nlab)
        elif nlab != len(s):
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({nlab}) does not match the "
                               f"number of dimensions ({len(s)}) for operand {terms.index(t)} and no ellipsis was "
                               f"given")
    ell = "".join(free[:ell_n])
    ins = []
    for t, s in zip(terms, shapes):
        if "..." in t:
            k = len(s) - len(t.replace("...", ""))
            t = t.replace("...", ell[ell_n - k:] if k else "")
        for c in t:
            if not c.isalpha():
                raise RuntimeError(f"einsum(): invalid subscript given at index {eq.index(c)} in the equation "
                                   f"string, subscripts must be in [a-zA-Z]")
        ins.append(t)
    if rhs is None:
        counts = {}
        for t in ins:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        rhs = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    else:
        rhs = rhs.replace("...", ell)
    return ins, rhs


def _einsum_sublists(args):
    """torch.einsum's sublist format -> (equation, operands): subscripts are ints in [0, 52) (a-z, A-Z) and
    Ellipsis."""
    def sub(lst):
        out = []
        for v in lst:
            if v is Ellipsis:
                out.append("...")
            elif isinstance(v, int) and 0 <= v < 52:
                out.append(chr(ord("a") + v) if v < 26 else chr(ord("A") + v - 26))
            else:
                raise ValueError(f"einsum(): expected subscripts to be in the range [0, 52) or Ellipsis, got {v!r}")
        return "".join(out)
    ops, subs = list(args[0::2]), list(args[1::2])
    out = None
    if len(ops) > len(subs):                           # the odd trailing element is the output sublist
        out = ops.pop()
    for o in ops:
        if not isinstance(o, Tensor):
            raise TypeError(f"einsum(): expected operands to be Tensors in the sublist format, got {type(o).__name__}")
    eq = ",".join(sub(s_) for s_ in subs)
    if out is not None:
        eq += "->" + sub(out)
    return eq, tuple(ops)


@export(method=False)
def einsum(equation, *operands):
    """Einstein summation (``torch.einsum``); the CPU kernel is ``np.einsum`` (BLAS-backed contractions)."""
    if isinstance(equation, Tensor) and operands:          # sublist format: op0, sub0, op1, sub1, ..., [out]
        equation, operands = _einsum_sublists((equation,) + tuple(operands))
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str):
        raise TypeError(f"einsum(): the equation must be a string or the sublist format (operand, sublist, "
                        f"...), got {type(equation).__name__}")
    if not operands:
        raise RuntimeError("einsum(): must provide at least one operand")
    for o in operands:
        if not isinstance(o, Tensor):
            raise TypeError(f"einsum(): expected the operands to be Tensors, got {type(o).__name__}")
    ins, rhs = _parse_einsum(equation, [tuple(o.shape) for o in operands])
    # torch broadcasts size-1 dims of labelled subscripts; numpy only broadcasts ellipses
    sizes = {}
    for i, (sub, o) in enumerate(zip(ins, operands)):
        for c, n in zip(sub, o.shape):
            if c in sizes and sizes[c] != n and n != 1 and sizes[c] != 1:
                raise RuntimeError(f"einsum(): subscript {c} has size {n} for operand {i} which does not broadcast "
                                   f"with previously seen size {sizes[c]}")
            if c not in sizes or sizes[c] == 1:
                sizes[c] = n
    # the result dtype (and torch's refusals) follow torch's left-to-right evaluation; one np.einsum call where it
    # keeps the operands' common dtype, torch's steps otherwise (mixed dtypes, integer sums widened to int64)
    dt = operands[0]._dtype
    mixed = any(o._dtype is not dt for o in operands)
    if not mixed and dt.category >= 2:   # one float/complex dtype: torch's steps keep it and refuse nothing
        return _einsum_fast(rhs, operands, ins, sizes)
    metas = [_EinMeta(dict(zip(sub, o.shape)), o._dtype) for sub, o in zip(ins, operands)]
    labels = [_diag_labels(sub) for sub in ins]
    if mixed or _einsum_torch_steps(_MetaSteps, labels, rhs, metas).dtype is not dt:
        xs = []
        for sub, lab, o in zip(ins, labels, operands):
            if lab != sub:  # repeated labels: the diagonal first (one dtype)
                o = _einsum_fast(lab, (o,), [sub], dict(zip(sub, o.shape)))
            xs.append((o, lab))
        steps = _TensorSteps(sizes)
        return steps.finish(_einsum_torch_steps(steps, labels, rhs, xs), rhs)
    return _einsum_fast(rhs, operands, ins, sizes)


def _diag_labels(sub: str) -> str:
    """The labels of an operand once its repeated labels are taken as diagonals (first occurrences, in order)."""
    return "".join(dict.fromkeys(sub))


class _EinMeta(NamedTuple):
    sizes: dict
    dtype: object


def _sum_dtype(dt):
    return _dt.int64 if dt.category < 2 else dt


class _MetaSteps:
    """torch's einsum steps on (label sizes, dtype) only: the result dtype and torch's refusals."""

    @staticmethod
    def size(x, c):
        return x.sizes.get(c, 1)

    @staticmethod
    def sum(x, cs):
        return _EinMeta({c: n for c, n in x.sizes.items() if c not in cs}, _sum_dtype(x.dtype))

    @staticmethod
    def squeeze(x, c):
        return _EinMeta({k: n for k, n in x.sizes.items() if k != c}, x.dtype) if c in x.sizes else x

    @staticmethod
    def mul(a, b):
        sz = dict(a.sizes)
        for c, n in b.sizes.items():
            if sz.get(c, 1) == 1:
                sz[c] = n
        return _EinMeta(sz, _dt.promote_types(a.dtype, b.dtype))

    @staticmethod
    def pair(a, b, sd):
        sz = {c: n for c, n in _MetaSteps.mul(a, b).sizes.items() if c not in sd}
        if 0 in a.sizes.values() or 0 in b.sizes.values():
            return _EinMeta(sz, b.dtype)   # torch's bmm of an empty operand: zeros of the second one's dtype
        if a.dtype is _dt.bool_:
            raise _dt.DTypeNotImplementedError("\"bmm\" not implemented for 'Bool'")
        if a.dtype is not b.dtype:
            raise RuntimeError(f"expected scalar type {_CAP[a.dtype.name]} but found {_CAP[b.dtype.name]}")
        return _EinMeta(sz, a.dtype)


class _TensorSteps:
    """torch's einsum steps on (tensor, labels) pairs, with neetorch's sum / mul and a one-dtype contraction."""

    def __init__(self, sizes):
        self.sizes = sizes

    @staticmethod
    def size(x, c):
        t, lab = x
        return t.shape[lab.index(c)] if c in lab else 1

    @staticmethod
    def sum(x, cs):
        t, lab = x
        dims = tuple(lab.index(c) for c in cs)
        return t.sum(dims), "".join(c for c in lab if c not in cs)

    @staticmethod
    def squeeze(x, c):
        t, lab = x
        if c not in lab:
            return x
        return t.squeeze(lab.index(c)), lab.replace(c, "")

    @staticmethod
    def _aligned(x, labs):
        """``x``'s tensor with its labels in the order of ``labs`` (a superset), size-1 dims for the others."""
        t, lab = x
        present = [c for c in labs if c in lab]
        if present != list(lab):
            t = t.permute(tuple(lab.index(c) for c in present))
        if len(present) == len(labs):
            return t
        it = iter(t.shape)
        return t.reshape(tuple(next(it) if c in lab else 1 for c in labs))

    def mul(self, a, b):
        labs = a[1] + "".join(c for c in b[1] if c not in a[1])
        dt = _dt.promote_types(a[0]._dtype, b[0]._dtype)
        ta, tb = self._aligned(a, labs), self._aligned(b, labs)
        return _mul(ta.to(dt), tb.to(dt)), labs

    def pair(self, a, b, sd):
        r = _MetaSteps.pair(_EinMeta(dict(zip(a[1], a[0].shape)), a[0]._dtype),
                            _EinMeta(dict(zip(b[1], b[0].shape)), b[0]._dtype), sd)
        labs = "".join(c for c in a[1] + "".join(c for c in b[1] if c not in a[1]) if c not in sd)
        if a[0]._dtype is not b[0]._dtype:   # (an empty operand: zeros of the second one's dtype)
            from ..tensor.creation import zeros
            return zeros(tuple(r.sizes[c] for c in labs), dtype=r.dtype, device=b[0]._device), labs
        sz = {c: max(self.size(a, c), self.size(b, c)) if 0 not in (self.size(a, c), self.size(b, c)) else 0
              for c in a[1] + b[1]}
        return _einsum_fast(labs, (a[0], b[0]), [a[1], b[1]], sz), labs

    def finish(self, x, rhs):
        t = self._aligned(x, rhs)
        shp = tuple(self.sizes[c] for c in rhs)
        return t.expand(shp) if tuple(t.shape) != shp else t


def _einsum_torch_steps(ex, ins, rhs, xs):
    """torch's einsum (aten/native/Linear.cpp, without an opt_einsum path) on operands whose repeated labels are
    already diagonals: operands are taken left to right; a contraction label is summed out of the running result as
    soon as no later operand has it with a size other than 1 (squeezed where it has size 1); a pair with labels to
    contract is one batched product (torch's bmm: the same dtype, not bool), one without is a broadcast ``mul``
    (type promotion).  ``ex``: :class:`_MetaSteps` or :class:`_TensorSteps`."""
    n = len(xs)
    contract = sorted(set("".join(ins)) - set(rhs))
    if n == 1:
        cs = [c for c in contract if c in ins[0]]
        return ex.sum(xs[0], cs) if cs else xs[0]
    last = {c: max([k for k in range(n) if ex.size(xs[k], c) != 1], default=0) for c in contract}
    r = xs[0]
    for c in contract:
        if last[c] == 0:
            r = ex.squeeze(r, c) if ex.size(r, c) == 1 else ex.sum(r, [c])
    for i in range(1, n):
        op, sd = xs[i], []
        for c in contract:
            if last[c] < i:
                op = ex.squeeze(op, c)
            elif last[c] == i:
                if ex.size(r, c) == 1:
                    op = ex.sum(op, [c])
                    r = ex.squeeze(r, c)
                elif ex.size(op, c) == 1:
                    r = ex.sum(r, [c])
                    op = ex.squeeze(op, c)
                else:
                    sd.append(c)
        r = ex.pair(r, op, sd) if sd else ex.mul(r, op)
    return r


def _einsum_fast(rhs, operands, ins, sizes):
    """One np.einsum call (the EINSUM op) on operands of one dtype, size-1 labels expanded to ``sizes``."""
    ops = []
    for sub, o in zip(ins, operands):
        shp = tuple(sizes[c] for c in sub)
        ops.append(o.expand(shp) if tuple(o.shape) != shp else o)
    eq = ",".join(ins) + "->" + rhs
    return run(EINSUM, ops, {"equation": eq})[0]


@export(method=False)
def tensordot(a, b, dims=2, out=None):
    """Contract ``dims`` dims of ``a`` with those of ``b`` (``torch.tensordot``) as one matmul."""
    if a._dtype is _dt.bool_ or b._dtype is _dt.bool_:
        raise NotImplementedError("tensordot: \"dot\" not implemented for 'Bool'")
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        da = list(range(a.ndim - dims, a.ndim))
        db = list(range(dims))
    elif isinstance(dims, Tensor):
        return tensordot(a, b, dims.tolist(), out=out)
    else:
        da, db = dims
        da = [da] if isinstance(da, int) else list(da)
        db = [db] if isinstance(db, int) else list(db)
    if len(da) != len(db):
        raise RuntimeError("both dimension lists should have same length")
    da = [d % a.ndim for d in da] if a.ndim else da
    db = [d % b.ndim for d in db] if b.ndim else db
    for x, y in zip(da, db):
        if a.shape[x] != b.shape[y]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size {a.shape[x]} in dim {x} "
                               f"and second has size {b.shape[y]} in dim {y}")
    if a._dtype is not b._dtype:
        raise RuntimeError(f"expected scalar type {_CAP[a._dtype.name]} but found {_CAP[b._dtype.name]}")
    fa = [d for d in range(a.ndim) if d not in da]
    fb = [d for d in range(b.ndim) if d not in db]
    k = 1
    for d in da:
        k *= a.shape[d]
    ra = 1
    for d in fa:
        ra *= a.shape[d]
    rb = 1
    for d in fb:
        rb *= b.shape[d]
    am = a.permute(*(fa + da)).reshape(ra, k)
    bm = b.permute(*(db + fb)).reshape(k, rb)
    r = _mm(am, bm).reshape(tuple(a.shape[d] for d in fa) + tuple(b.shape[d] for d in fb))
    return _out(r, out)


@export(method=False)
def chain_matmul(*matrices, out=None):
    """Product of a chain of 2-D matrices (``torch.chain_matmul``)."""
    if len(matrices) == 1 and isinstance(matrices[0], (list, tuple)):
        matrices = matrices[0]
    for m in matrices:
        if m.ndim != 2:
            raise RuntimeError(f"chain_matmul: Tensor dimension is {m.ndim}, expected 2 instead (shape "
                               f"{tuple(m.shape)})")
    r = matrices[0]
    for m in matrices[1:]:
        r = mm(r, m)
    return _out(r, out)


@export
def kron(input, other, *, out=None):
    """Kronecker product (``torch.kron``)."""
    nd = max(input.ndim, other.ndim)
    a = input.reshape((1,) * (nd - input.ndim) + tuple(input.shape))
    b = other.reshape((1,) * (nd - other.ndim) + tuple(other.shape))
    sa = []
    sb = []
    for i in range(nd):
        sa += [a.shape[i], 1]
        sb += [1, b.shape[i]]
    r = _mul(a.reshape(sa), b.reshape(sb))
    return _out(r.reshape(tuple(a.shape[i] * b.shape[i] for i in range(nd))), out)
