"""The differential harness of the torch-parity test files: run ``f(L, *args)`` with ``L = torch`` and
``L = neetorch`` on the same numpy inputs (each side gets its own copy); where torch raises neetorch must raise,
where it returns the results must match in type, dtype, shape and values (NaN positions included).  Options (of
:func:`make_check`) for the files that need more: non-contiguous inputs kept non-contiguous (``keep_layout``),
neetorch's exception type checked against torch's (``same_error``), a transform of each side's result before the
comparison (``post``), complex results compared within the tolerance (``complex_tol``, ``scale_atol``)."""
from __future__ import annotations

import warnings

import numpy as np

import neetorch as nee


def conv(torch, L, a, keep_layout=False):
    """``a`` as ``L``'s tensor (a numpy array; anything else as it is), a copy each side.  ``keep_layout``: a
    non-C-contiguous array becomes neetorch's transposed view of the last two dims (the same values)."""
    if isinstance(a, np.ndarray):
        if L is torch:
            return torch.from_numpy(a.copy())
        if keep_layout and not a.flags.c_contiguous:
            return nee.tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2))).transpose(-2, -1)
        return nee.tensor(np.ascontiguousarray(a) if keep_layout else a.copy())
    return a


def run(torch, L, f, args, keep_layout=False):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return True, f(L, *[conv(torch, L, a, keep_layout) for a in args])
    except Exception as e:  # noqa: BLE001 - comparing raising behaviour is the point
        return False, e


def compare(torch, t, n, tol, rtols, path="out", complex_tol=False, scale_atol=False):
    """``rtols``: the default relative (and absolute) tolerance per float dtype name (``"other"``: float64).
    Float values are compared in float64, complex ones exactly; with ``complex_tol`` float and complex values
    are compared within the tolerance in their own dtypes (torch's conjugate views resolved), and with
    ``scale_atol`` the absolute tolerance is scaled by the largest finite magnitude of torch's result (from 1)."""
    if isinstance(t, (tuple, list)):
        assert isinstance(n, (tuple, list)), f"{path}: torch gives a {type(t).__name__}, neetorch {type(n).__name__}"
        assert len(t) == len(n), f"{path}: {len(t)} results vs {len(n)}"
        for i, (a, b) in enumerate(zip(t, n)):
            compare(torch, a, b, tol, rtols, f"{path}[{i}]", complex_tol, scale_atol)
        return
    if not isinstance(t, torch.Tensor):
        assert t == n, f"{path}: torch={t!r} neetorch={n!r}"
        return
    assert isinstance(n, nee.Tensor), f"{path}: expected a Tensor, got {type(n).__name__}"
    assert str(t.dtype).split(".")[-1] == n.dtype.name, f"{path}: dtype torch={t.dtype} neetorch={n.dtype}"
    assert tuple(t.shape) == tuple(n.shape), f"{path}: shape torch={tuple(t.shape)} neetorch={tuple(n.shape)}"
    a, b = (t.resolve_conj() if complex_tol else t).numpy(), np.array(n.numpy())
    if a.dtype.kind in ("fc" if complex_tol else "f"):
        rtol = tol if tol is not None else rtols.get(n.dtype.name, rtols["other"])
        if complex_tol:
            scale = 1.0
            if scale_atol and np.isfinite(a).any():
                scale = max(1.0, float(np.nanmax(np.abs(a[np.isfinite(a)]))))
            np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol * scale, equal_nan=True, err_msg=path)
        else:
            np.testing.assert_allclose(b.astype(np.float64), a.astype(np.float64), rtol=rtol, atol=rtol,
                                       equal_nan=True, err_msg=path)
    else:
        np.testing.assert_array_equal(b, a, err_msg=path)


def split_special(r, nested=False):
    """A result as compare can check it: a bfloat16 tensor as ``(its float32 values, "bfloat16")``, a complex one
    as ``(real part, imaginary part)`` (compared within the tolerance); ``nested``: the same inside tuples and
    lists (returned as tuples)."""
    if nested and isinstance(r, (tuple, list)):
        return tuple(split_special(x, True) for x in r)
    if hasattr(r, "dtype") and str(r.dtype).endswith("bfloat16"):
        return r.float(), "bfloat16"
    if hasattr(r, "dtype") and r.is_complex():
        return r.real.clone(), r.imag.clone()
    return r


def make_check(torch, rtols, *, keep_layout=False, same_error=None, post=None, **compare_kw):
    """``check(f, *args, tol=None)`` comparing torch and neetorch with the default tolerances ``rtols``; it returns
    neetorch's result (its exception where both raise).  ``same_error``: where torch raises, neetorch's exception
    must be of torch's type (``"exact"``) or an instance of it (``"subclass"``), or both RuntimeErrors (None: any
    exception).  ``post``: applied to each side's result before the comparison.  ``keep_layout``: see conv;
    ``compare_kw``: compare's ``complex_tol`` / ``scale_atol``."""
    g = (lambda f: f) if post is None else (lambda f: lambda L, *a: post(f(L, *a)))

    def check(f, *args, tol=None):
        ok_t, t = run(torch, torch, g(f), args, keep_layout)
        ok_n, n = run(torch, nee, g(f), args, keep_layout)
        if not ok_t:
            assert not ok_n, f"torch raises {type(t).__name__}: {t}; neetorch returned {n!r}"
            if same_error is not None:
                same = type(n) is type(t) if same_error == "exact" else isinstance(n, type(t))
                assert same or (isinstance(t, RuntimeError) and isinstance(n, RuntimeError)), (t, n)
            return n
        if not ok_n:
            raise AssertionError(f"torch returns, neetorch raises {type(n).__name__}: {n}") from n
        compare(torch, t, n, tol, rtols, **compare_kw)
        return n
    return check
