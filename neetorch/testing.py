"""``torch.testing``: :func:`assert_close` (and its old name ``assert_allclose``) for neetorch tensors, Python
numbers and (nested) sequences / mappings of them, with torch's default tolerances per dtype."""
from __future__ import annotations

import collections.abc as _abc

import numpy as np

from .tensor.tensor import Tensor

__all__ = ["assert_close", "assert_allclose"]

# torch.testing._comparison's default (rtol, atol) per dtype; integers and bool compare exactly
_TOL = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7),
        "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7)}


def _fail(msg, path, user_msg):
    where = f" (at {path})" if path else ""
    raise AssertionError(user_msg if isinstance(user_msg, str) else
                         (user_msg(msg) if callable(user_msg) else msg + where))


def _as_tensor(x):
    from .tensor.creation import tensor
    if isinstance(x, Tensor):
        return x
    if isinstance(x, bool):
        return tensor(x)
    if isinstance(x, int):
        return tensor(x)
    if isinstance(x, float):
        return tensor(x, dtype="float64")
    return tensor(complex(x), dtype="complex128")


def _compare(a, e, rtol, atol, equal_nan, check_device, check_dtype, check_stride, path, msg):
    if isinstance(a, (Tensor, bool, int, float, complex, np.number)) or isinstance(e, Tensor):
        if isinstance(a, Tensor) != isinstance(e, Tensor):
            _fail(f"Type mismatch: {type(a).__name__} vs {type(e).__name__}", path, msg)
        if not isinstance(a, Tensor) and type(a) is not type(e) and check_dtype:
            _fail(f"Type mismatch: {type(a).__name__} vs {type(e).__name__}", path, msg)
        ta, te = _as_tensor(a), _as_tensor(e)
        if tuple(ta.shape) != tuple(te.shape):
            _fail(f"The values for attribute 'shape' do not match: {tuple(ta.shape)} != {tuple(te.shape)}.", path,
                  msg)
        if check_device and ta.device != te.device:
            _fail(f"The values for attribute 'device' do not match: {ta.device} != {te.device}.", path, msg)
        if check_dtype and ta.dtype is not te.dtype:
            _fail(f"The values for attribute 'dtype' do not match: {ta.dtype} != {te.dtype}.", path, msg)
        if check_stride and tuple(ta.stride()) != tuple(te.stride()):
            _fail(f"The values for attribute 'stride()' do not match: {ta.stride()} != {te.stride()}.", path, msg)
        if rtol is None:
            ra, aa = _TOL.get(ta.dtype.name, (0.0, 0.0))
            rb, ab = _TOL.get(te.dtype.name, (0.0, 0.0))
            r, t = max(ra, rb), max(aa, ab)
        else:
            r, t = rtol, atol
        x = np.asarray(ta.numpy(force=True))
        y = np.asarray(te.numpy(force=True))
        wide = np.complex128 if (x.dtype.kind == "c" or y.dtype.kind == "c") else np.float64
        if x.dtype.kind in "biu" and y.dtype.kind in "biu" and r == 0 and t == 0:
            bad = x.astype(np.int64) != y.astype(np.int64) if x.dtype.kind != "u" or y.dtype.kind != "u" \
                else x != y
            diff = None
        else:
            x, y = x.astype(wide), y.astype(wide)
            with np.errstate(invalid="ignore", over="ignore"):
                diff = np.abs(x - y)
                ok = (x == y) | (np.isfinite(x) & np.isfinite(y) & (diff <= t + r * np.abs(y)))
            if equal_nan:
                ok |= np.isnan(x) & np.isnan(y)
            bad = ~ok
        if np.any(bad):
            n, tot = int(np.count_nonzero(bad)), bad.size
            lines = ["Tensor-likes are not close!" if ta.ndim else "Scalars are not close!", "",
                     f"Mismatched elements: {n} / {tot} ({100.0 * n / tot:.1f}%)"]
            if diff is not None:
                d = np.where(bad, diff, -np.inf)
                i = np.unravel_index(int(np.nanargmax(np.where(np.isnan(d), np.inf, d))), bad.shape) if bad.ndim \
                    else ()
                lines.append(f"Greatest absolute difference: {diff[i]} at index {tuple(int(v) for v in i)} "
                             f"(up to {t} allowed)")
            _fail("\n".join(lines), path, msg)
        return
    if isinstance(a, _abc.Mapping) and isinstance(e, _abc.Mapping):
        if set(a.keys()) != set(e.keys()):
            _fail(f"The keys of the mappings do not match: {sorted(map(str, a))} != {sorted(map(str, e))}", path,
                  msg)
        for k in a:
            _compare(a[k], e[k], rtol, atol, equal_nan, check_device, check_dtype, check_stride,
                     f"{path}[{k!r}]", msg)
        return
    if isinstance(a, _abc.Sequence) and isinstance(e, _abc.Sequence) and not isinstance(a, str) \
            and not isinstance(e, str):
        if len(a) != len(e):
            _fail(f"The length of the sequences mismatch: {len(a)} != {len(e)}", path, msg)
        for i, (u, v) in enumerate(zip(a, e)):
            _compare(u, v, rtol, atol, equal_nan, check_device, check_dtype, check_stride, f"{path}[{i}]", msg)
        return
    if a is None and e is None:
        return
    raise TypeError(f"assert_close: no comparison pair for inputs of type {type(a).__name__} and "
                    f"{type(e).__name__}")


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None, equal_nan=False,
                 check_device=True, check_dtype=True, check_layout=True, check_stride=False, msg=None):
    """``torch.testing.assert_close``: ``actual`` and ``expected`` (tensors, numbers, or sequences / mappings of
    them) have the same shape, device and dtype (``check_dtype``) and ``|actual - expected| <= atol + rtol *
    |expected|`` elementwise; the default tolerances are torch's per dtype (float32: rtol 1.3e-6, atol 1e-5;
    float64: 1e-7, 1e-7; float16: 1e-3, 1e-5; bfloat16: 1.6e-2, 1e-5; integers and bool: exact).  Give both
    ``rtol`` and ``atol`` or neither.  Raises AssertionError naming the mismatch."""
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got no "
                         f"{'rtol' if rtol is None else 'atol'}.")
    _compare(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, check_stride, "", msg)


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan=True, msg=""):
    """The deprecated ``torch.testing.assert_allclose``: :func:`assert_close` without the dtype check, NaNs
    equal by default."""
    if (rtol is None) != (atol is None):
        raise ValueError("assert_allclose: give both rtol and atol or neither")
    _compare(actual, expected, rtol, atol, equal_nan, True, False, False, "", msg or None)
