"""The differential harness of the torch-parity test files: run ``f(L, *args)`` with ``L = torch`` and
``L = neetorch`` on the same numpy inputs (each side gets its own copy); where torch raises neetorch must raise,
where it returns the results must match in type, dtype, shape and values (NaN positions included)."""
from __future__ import annotations

import warnings

import numpy as np

import neetorch as nee


def conv(torch, L, a):
    if isinstance(a, np.ndarray):
        return torch.from_numpy(a.copy()) if L is torch else nee.tensor(a.copy())
    return a


def run(torch, L, f, args):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return True, f(L, *[conv(torch, L, a) for a in args])
    except Exception as e:  # noqa: BLE001 - comparing raising behaviour is the point
        return False, e


def compare(torch, t, n, tol, rtols, path="out"):
    """``rtols``: the default relative (and absolute) tolerance per float dtype name (``"other"``: float64)."""
    if isinstance(t, (tuple, list)):
        assert isinstance(n, (tuple, list)), f"{path}: torch gives a {type(t).__name__}, neetorch {type(n).__name__}"
        assert len(t) == len(n), f"{path}: {len(t)} results vs {len(n)}"
        for i, (a, b) in enumerate(zip(t, n)):
            compare(torch, a, b, tol, rtols, f"{path}[{i}]")
        return
    if not isinstance(t, torch.Tensor):
        assert t == n, f"{path}: torch={t!r} neetorch={n!r}"
        return
    assert isinstance(n, nee.Tensor), f"{path}: expected a Tensor, got {type(n).__name__}"
    assert str(t.dtype).split(".")[-1] == n.dtype.name, f"{path}: dtype torch={t.dtype} neetorch={n.dtype}"
    assert tuple(t.shape) == tuple(n.shape), f"{path}: shape torch={tuple(t.shape)} neetorch={tuple(n.shape)}"
    a, b = t.numpy(), np.array(n.numpy())
    if a.dtype.kind == "f":
        rtol = tol if tol is not None else rtols.get(n.dtype.name, rtols["other"])
        np.testing.assert_allclose(b.astype(np.float64), a.astype(np.float64), rtol=rtol, atol=rtol, equal_nan=True,
                                   err_msg=path)
    else:
        np.testing.assert_array_equal(b, a, err_msg=path)


def make_check(torch, rtols):
    """``check(f, *args, tol=None)`` comparing torch and neetorch with the default tolerances ``rtols``."""
    def check(f, *args, tol=None):
        ok_t, t = run(torch, torch, f, args)
        ok_n, n = run(torch, nee, f, args)
        if not ok_t:
            assert not ok_n, f"torch raises {type(t).__name__}: {t}; neetorch returned {n!r}"
            return
        if not ok_n:
            raise AssertionError(f"torch returns, neetorch raises {type(n).__name__}: {n}") from n
        compare(torch, t, n, tol, rtols)
    return check
