"""Shared test helpers (importable: ``from conftest import assert_close, noncontig``).

* :func:`assert_close` compares a neetorch tensor with a reference (torch tensor,
  numpy array, neetorch tensor or Python value) checking dtype and shape too.
* :func:`noncontig` returns strided variants of a tensor holding the same values
  (transposed, stepped slice, flipped, expanded) to exercise the layout paths.
* :func:`to_np` / :func:`dtype_name` normalise references.
"""
from __future__ import annotations

import numpy as np
import pytest

import neetorch as nee

DTYPE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
FLOAT_NAMES = ("float16", "float32", "float64")
INT_NAMES = ("uint8", "int8", "int16", "int32", "int64")

# default tolerances per dtype (rtol, atol)
TOL = {"float16": (1e-3, 1e-3), "float32": (1e-5, 1e-6), "float64": (1e-12, 1e-14)}


def dtype_name(d) -> str:
    """'float32' for nee.float32, torch.float32, np.float32, np.dtype('float32')."""
    if isinstance(d, nee.dtype):
        return d.name
    s = str(d)
    if s.startswith("torch."):
        return s[len("torch."):]
    return np.dtype(d).name


def to_np(x) -> np.ndarray:
    """numpy copy of a neetorch tensor, torch tensor, numpy array or Python value."""
    if isinstance(x, nee.Tensor):
        return np.array(x.numpy(force=True), copy=True)
    if type(x).__module__.startswith("torch"):
        return x.detach().cpu().numpy().copy()
    return np.asarray(x)


def _ref_dtype(ref):
    if isinstance(ref, nee.Tensor):
        return ref.dtype.name
    if type(ref).__module__.startswith("torch"):
        return dtype_name(ref.dtype)
    if isinstance(ref, np.ndarray):
        return ref.dtype.name
    return None


def assert_close(actual, expected, rtol=None, atol=None, *, check_dtype=True, equal_nan=True, msg=""):
    """``actual`` (a neetorch Tensor) equals ``expected`` within tolerance, with the same shape and dtype.

    NaNs must match positions (``equal_nan``), infinities must match exactly, and
    for non-float dtypes the comparison is exact.
    """
    assert isinstance(actual, nee.Tensor), f"{msg}expected a neetorch Tensor, got {type(actual).__name__}"
    exp_dt = _ref_dtype(expected)
    if check_dtype and exp_dt is not None:
        assert actual.dtype.name == exp_dt, f"{msg}dtype {actual.dtype.name} != expected {exp_dt}"
    a = to_np(actual)
    e = to_np(expected)
    assert tuple(actual.shape) == tuple(e.shape), f"{msg}shape {tuple(actual.shape)} != expected {tuple(e.shape)}"
    assert a.shape == tuple(actual.shape), f"{msg}storage shape {a.shape} != tensor shape {tuple(actual.shape)}"
    if a.dtype.kind == "f" or e.dtype.kind == "f":
        name = actual.dtype.name if actual.dtype.is_floating_point else "float64"
        r0, a0 = TOL.get(name, TOL["float64"])
        rtol = r0 if rtol is None else rtol
        atol = a0 if atol is None else atol
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=equal_nan, err_msg=msg)
    else:
        np.testing.assert_array_equal(a, e, err_msg=msg)


def assert_same_bits_sign(actual, expected, msg=""):
    """Floats equal including the sign of zeros and NaN positions."""
    a, e = to_np(actual).astype(np.float64), to_np(expected).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(e), err_msg=msg)
    m = ~np.isnan(e)
    np.testing.assert_array_equal(np.signbit(a[m]), np.signbit(e[m]), err_msg=msg + " (signs)")


def noncontig(x: nee.Tensor):
    """[(name, tensor)] of layouts holding exactly ``x``'s values (x itself included).

    Built with numpy over fresh buffers and wrapped zero-copy with ``nee.from_numpy``
    (so it does not depend on indexing ops): F-order (transposed strides), a stepped
    slice of a bigger buffer and negative strides (double reversal).
    """
    a = x.numpy(force=True)
    out = [("contig", x)]
    if a.ndim >= 2:
        out.append(("transposed", nee.from_numpy(np.asfortranarray(a))))
    if a.ndim >= 1 and a.size > 0:
        big = np.zeros(a.shape[:-1] + (a.shape[-1] * 2,), a.dtype)
        big[..., ::2] = a
        out.append(("stepped", nee.from_numpy(big[..., ::2])))
        rev = np.ascontiguousarray(a[::-1])
        out.append(("flipped", nee.from_numpy(rev[::-1])))
    return out


@pytest.fixture
def torch_one_thread():
    """torch's reference on one thread (its float64 depthwise conv spun ~10 ms a call on two busy cores)."""
    torch = pytest.importorskip("torch")
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def nthreads(request):
    """The test at 1 and 2 threads of the CPU backend (files with their own ``nthreads`` override this one)."""
    old = nee.get_num_threads()
    nee.set_num_threads(request.param)
    yield request.param
    nee.set_num_threads(old)


@pytest.fixture
def torch_mod():
    return pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _reset_default_dtype():
    yield
    if nee.get_default_dtype() is not nee.float32:
        nee.set_default_dtype(nee.float32)
