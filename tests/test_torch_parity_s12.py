"""Torch parity leftovers of the round-7 fuzzing (session 12), differential against PyTorch (``tests/torch_check.py``).

1. complex ``index_fill`` / ``index_add`` / ``index_copy`` / ``scatter`` / ``scatter_add`` / ``scatter_reduce`` /
   ``index_reduce`` (sum/prod/mean; amax/amin and index_reduce(include_self=False) refused with
   NotImplementedError, as torch does); ``gather`` / ``scatter`` of complex128 (16-byte elements) crashed in the
   bit-moving fast path.
2. ``einsum`` of mixed dtypes: torch's left-to-right steps (a contraction is a one-dtype bmm, a product without one
   a promoting ``mul``, integer sums widen to int64), so results, dtypes and refusals match torch's.
3. addmm / addmv / addbmm / baddbmm convert alpha / beta to the matrices' dtype (float truncated for integers,
   overflow refused); addr refuses float scalars for integer results and bool ones for non-bool results.
4. ``sum`` / ``mean`` / ``prod`` / ``median`` / ``nanmedian`` with ``keepdim`` but no ``dim``: TypeError;
   ``arange`` / ``range`` / ``linspace`` / ``logspace`` of bool (range: complex too): NotImplementedError.
5. complex ``linalg.ldl_factor`` / ``ldl_solve`` (symmetric, or Hermitian with ``hermitian=True``).
6. this session's fuzz findings (see the last test).
"""
# ruff: noqa: B023  (the lambdas built in loops are called by check() before the loop moves on)
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch_check import make_check, split_special

import neetorch as nee

_RTOLS = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 2e-6, "complex64": 2e-6, "other": 1e-12}
check = make_check(torch, _RTOLS, same_error="subclass", post=lambda r: split_special(r, True))
# non-contiguous inputs stay non-contiguous (a transposed view on the neetorch side)
check_nc = make_check(torch, _RTOLS, same_error="subclass", keep_layout=True, complex_tol=True)

_CDT = (np.complex64, np.complex128)


def _crand(rng, shape, dt):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)


# ---------------------------------------------------------------- 1. complex index_* / scatter family
@pytest.mark.parametrize("dt", _CDT)
def test_complex_index_fill_add_copy(dt):
    rng = np.random.default_rng(0)
    x = _crand(rng, (5, 3, 4), dt)
    for d, idx in ((0, [4, 0, 0, 2]), (1, [2, -1]), (2, [3, 1, 1]), (-1, [0])):
        i = np.array(idx, np.int64)
        for v in (1.5 - 2j, 2, -0.5, True, 3j):
            check(lambda L, a, i: a.index_fill(d, i, v), x, i)
            check(lambda L, a, i: a.clone().index_fill_(d, i, v), x, i)
        check(lambda L, a, i: a.index_fill(d, i, L.tensor(0.25 + 1j, dtype=a.dtype)), x, i)
        check(lambda L, a, i: a.index_fill(d, i, L.tensor(2.5)), x, i)   # a real 0-d value tensor
        if min(idx) < 0:
            continue
        sh = list(x.shape)
        sh[d] = len(idx)
        src = _crand(rng, sh, dt)
        for alpha in (1, 2.5, -1j, 0.5 + 0.25j):
            check(lambda L, a, i, s: a.index_add(d, i, s, alpha=alpha), x, i, src, tol=1e-5)
            check(lambda L, a, i, s: L.index_add(a, d, i.int(), s, alpha=alpha), x, i, src, tol=1e-5)
        check(lambda L, a, i, s: a.clone().index_add_(d, i, s), x, i, src, tol=1e-5)
        uniq = np.array(sorted(set(idx)), np.int64)
        sh[d] = len(uniq)
        src2 = _crand(rng, sh, dt)
        check(lambda L, a, i, s: a.index_copy(d, i, s), x, uniq, src2)
    # a non-contiguous input and source (transposed views)
    xt = np.swapaxes(_crand(rng, (4, 6), dt), 0, 1)
    st = np.swapaxes(_crand(rng, (4, 3), dt), 0, 1)
    i = np.array([5, 0, 5], np.int64)
    check_nc(lambda L, a, i, s: a.index_add(0, i, s, alpha=2), xt, i, st, tol=1e-5)
    check_nc(lambda L, a, i: a.index_fill(1, i[:2] - 5, 1j), xt, i)


def test_complex_index_ops_errors():
    rng = np.random.default_rng(1)
    x = _crand(rng, (3, 4), np.complex64)
    f = rng.standard_normal((3, 4)).astype(np.float32)
    i = np.array([0, 2], np.int64)
    check(lambda L, a, i: a.index_fill(0, i, 1j), f, i)                  # complex value into a real tensor
    check(lambda L, a, i: a.index_fill(0, i, L.tensor(1j)), f, i)
    check(lambda L, a, i, s: a.index_add(0, i, s, alpha=1j), f, i, f[:2])
    check(lambda L, a, i, s: a.index_add(0, i, s), x, i, f[:2])          # dtypes differ: refused
    check(lambda L, a, i, s: a.index_add(0, i, s), f, i, x[:2])
    check(lambda L, a, i, s: a.index_copy(0, i, s), x, i, x[:2].astype(np.complex128))
    check(lambda L, a, i: a.index_fill(0, i + 5, 1j), x, i)             # out of range
    check(lambda L, a, i, s: a.index_add(0, i + 5, s), x, i, x[:2])


@pytest.mark.parametrize("dt", _CDT)
def test_complex_scatter_family(dt):
    rng = np.random.default_rng(2)
    x = _crand(rng, (4, 5), dt)
    src = _crand(rng, (3, 5), dt)
    for d in (0, 1, -1):
        n = x.shape[d]
        idx = rng.integers(0, n, (3, 4)).astype(np.int64)          # duplicates, a partial cover
        full = rng.integers(0, n, (4, 5)).astype(np.int64)
        full_src = _crand(rng, (4, 5), dt)
        for i, s in ((idx, src), (full, full_src)):
            check(lambda L, a, i, s: a.scatter(d, i, s), x, i, s)
            check(lambda L, a, i, s: a.clone().scatter_(d, i, s), x, i, s)
            check(lambda L, a, i: a.scatter(d, i, 1.5 - 1j), x, i)
            check(lambda L, a, i: a.scatter(d, i, value=2), x, i)
            check(lambda L, a, i, s: a.scatter_add(d, i, s), x, i, s, tol=1e-5)
            check(lambda L, a, i, s: L.scatter_add(a, d, i, s), x, i, s, tol=1e-5)
            for red in ("add", "multiply"):
                check(lambda L, a, i, s: a.scatter(d, i, s, reduce=red), x, i, s, tol=1e-5)
                check(lambda L, a, i: a.scatter(d, i, 2 - 1j, reduce=red), x, i, tol=1e-5)
            for red in ("sum", "prod", "mean", "amax", "amin"):
                for inc in (True, False):
                    check(lambda L, a, i, s: a.scatter_reduce(d, i, s, red, include_self=inc), x, i, s, tol=1e-5)
                    check(lambda L, a, i, s: a.clone().scatter_reduce_(d, i, s, red, include_self=inc), x, i, s,
                          tol=1e-5)
    # 0-d and 1-d, an empty index
    check(lambda L, a: a.scatter(0, L.tensor(0), L.tensor(1j, dtype=a.dtype)), np.array(2 + 1j, dt))
    check(lambda L, a, s: a.scatter_add(0, L.tensor([1, 1, 0]), s), x[0], src[0, :3], tol=1e-5)
    check(lambda L, a, s: a.scatter(0, L.zeros((0,), dtype=L.int64), s), x[0], src[0])
    # a non-contiguous self / src
    xt = np.swapaxes(_crand(rng, (5, 4), dt), 0, 1)
    st = np.swapaxes(_crand(rng, (5, 4), dt), 0, 1)
    i = rng.integers(0, 4, (4, 5)).astype(np.int64)
    check_nc(lambda L, a, i, s: a.scatter_add(0, i, s), xt, i, st, tol=1e-5)
    check_nc(lambda L, a, i, s: a.scatter_reduce(1, i % 5, s, "mean", include_self=False), xt, i, st, tol=1e-5)


@pytest.mark.parametrize("dt", _CDT)
def test_complex_index_reduce_and_gather(dt):
    rng = np.random.default_rng(3)
    x = _crand(rng, (4, 3), dt)
    s = _crand(rng, (5, 3), dt)
    i = np.array([0, 3, 3, 1, 0], np.int64)
    for red in ("prod", "mean", "amax", "amin"):
        for inc in (True, False):
            check(lambda L, a, i, s: a.index_reduce(0, i, s, red, include_self=inc), x, i, s, tol=1e-5)
    # gather / take_along_dim of 16-byte elements (the bit-moving fast path had no 16-byte case)
    for d in (0, 1):
        g = rng.integers(0, x.shape[d], (4, 3)).astype(np.int64)
        check(lambda L, a, g: a.gather(d, g), x, g)
        check(lambda L, a, g: L.take_along_dim(a, g, d), x, g)
        check(lambda L, a, g: a.gather(d, g[:2, :2]), x, g)


def test_complex_scatter_mixed_errors():
    rng = np.random.default_rng(4)
    x = _crand(rng, (3, 4), np.complex64)
    f = rng.standard_normal((3, 4)).astype(np.float32)
    i = np.array([[0, 1, 2, 0]], np.int64)
    check(lambda L, a, i, s: a.scatter(0, i, s), x, i, f)              # dtypes differ: refused
    check(lambda L, a, i, s: a.scatter_add(0, i, s), f, i, x)
    check(lambda L, a, i: a.scatter(0, i, 1j), f, i)                    # complex value into float
    check(lambda L, a, i: a.scatter(0, i + 3, 1j), x, i)                # out of range


def test_complex_stays_on_cpu():
    """Complex tensors live on the CPU only: moving one to another device raises (so the scatter family's
    complex kernels need no fallback there)."""
    others = [i.type for i in nee.devices() if i.available and i.type != "cpu"]
    if not others:
        pytest.skip("no device other than the CPU here")
    for dev in others:
        with pytest.raises(RuntimeError, match="CPU only"):
            nee.zeros(3, dtype=nee.complex64).to(dev)


# ---------------------------------------------------------------- 2. einsum: dtypes as torch's left-to-right steps
_EDT = ("bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "complex64")


def _edt(L, x, name):
    return x.to(getattr(L, name))


@pytest.mark.parametrize("eq,s1,s2", [
    ("ij,jk->ik", (2, 3), (3, 4)),        # a contraction: one dtype (torch's bmm), bool refused
    ("i,i->i", (3,), (3,)),               # no contraction: a broadcast mul (type promotion)
    ("i,j->ij", (3,), (4,)),
    ("ij,j->j", (2, 3), (3,)),            # i summed out of operand 0 first (int sums widen to int64)
    ("ij,ij->i", (2, 3), (2, 1)),         # j summed out of operand 0, then a mul
    ("ij,jk->ik", (2, 1), (1, 4)),        # size-1 labels squeezed: a mul
    ("ij,jk->ik", (2, 0), (0, 4)),        # an empty contraction: zeros of the second operand's dtype
    ("ii,i->i", (3, 3), (3,)),
])
def test_einsum_mixed_dtypes(eq, s1, s2):
    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, s1).astype(np.float64)
    b = rng.integers(-3, 4, s2).astype(np.float64)
    for d1 in _EDT:
        for d2 in _EDT:
            check(lambda L, x, y: L.einsum(eq, _edt(L, x, d1), _edt(L, y, d2)), a, b, tol=1e-2)


def test_einsum_single_operand_and_chains():
    rng = np.random.default_rng(6)
    a = rng.integers(-3, 4, (2, 3)).astype(np.float64)
    sq = rng.integers(-3, 4, (3, 3)).astype(np.float64)
    for d in _EDT:
        for eq in ("ij->j", "ij->", "ij->ji", "ij->ij"):
            check(lambda L, x: L.einsum(eq, _edt(L, x, d)), a, tol=1e-2)
        check(lambda L, x: L.einsum("ij->j", _edt(L, x, d)), a[:1], tol=1e-2)   # a size-1 sum still widens
        for eq in ("ii->i", "ii->", "ii"):
            check(lambda L, x: L.einsum(eq, _edt(L, x, d)), sq, tol=1e-2)
    u = np.array([200, 100, 7], np.uint8)
    v = np.array([2, 3, 5], np.uint8)
    w = np.array([1, 2, 3], np.int32)
    # uint8 * uint8 wraps before the int32 operand joins (torch's left-to-right mul)
    check(lambda L, x, y, z: L.einsum("i,j,k->ijk", x, y, z), u, v, w)
    check(lambda L, x, y, z: L.einsum("i,i,i->i", x, y, z), u, v, w)
    m = rng.integers(-3, 4, (2, 3)).astype(np.float32)
    n3 = rng.integers(-3, 4, (3, 4)).astype(np.float32)
    for dz in (np.float32, np.float64, np.int32, np.bool_):
        z = rng.integers(0, 2, (4,)).astype(dz)
        check(lambda L, x, y, z: L.einsum("ij,jk,k->i", x, y, z), m, n3, z, tol=1e-5)
        check(lambda L, x, y, z: L.einsum("ij,jk,k->ik", x, y, z), m, n3, z, tol=1e-5)
    # a non-contiguous operand, the sublist form, an ellipsis
    mt = np.swapaxes(rng.standard_normal((4, 3)), 0, 1).astype(np.float32)
    ints = rng.integers(-3, 4, (4, 5)).astype(np.int64)
    check_nc(lambda L, x, y: L.einsum("ij,j->ij", x, y[0, :4].to(L.int32)), mt, ints, tol=1e-5)
    check(lambda L, x, y: L.einsum(x, [0, 1], y, [1], [0]), mt, mt[0], tol=1e-5)
    check(lambda L, x, y: L.einsum("...j,...j->...j", x, y), mt, ints[:3, :4].astype(np.int8), tol=1e-5)


# ---------------------------------------------------------------- 3. addmm & co: integer matrices, float alpha/beta
_SCALARS = (2.5, -1.5, 0.5, 0.0, 2, -1, True, False, 1j, 2 + 0j, float("nan"), float("inf"), 1e30, 300)


@pytest.mark.parametrize("dt", ["int64", "int32", "int16", "uint8", "bool", "float32", "float64", "float16",
                                "complex64"])
def test_addmm_family_scalar_conversion(dt):
    rng = np.random.default_rng(7)
    M = rng.integers(0, 4, (2, 3)).astype(np.float64)
    a = rng.integers(0, 4, (2, 4)).astype(np.float64)
    b = rng.integers(0, 4, (4, 3)).astype(np.float64)
    v = rng.integers(0, 4, (4,)).astype(np.float64)
    w = rng.integers(0, 4, (2,)).astype(np.float64)
    B1 = rng.integers(0, 4, (3, 2, 4)).astype(np.float64)
    B2 = rng.integers(0, 4, (3, 4, 3)).astype(np.float64)
    c = lambda L, x: x.to(getattr(L, dt))   # noqa: E731
    tol = 1e-2 if dt == "float16" else 1e-5
    for s in _SCALARS:
        if s == float("inf") and dt.startswith(("float", "complex")):
            continue   # (torch's BLAS scales an operand by alpha = inf: 0 * inf NaNs; an implementation detail)
        for kw in ({"alpha": s}, {"beta": s}):
            check(lambda L, m, x, y: L.addmm(c(L, m), c(L, x), c(L, y), **kw), M, a, b, tol=tol)
            check(lambda L, m, x, y: c(L, m).addmm_(c(L, x), c(L, y), **kw), M, a, b, tol=tol)
            check(lambda L, m, x, y: L.addmv(c(L, m)[0], c(L, x), c(L, y), **kw), M, a, v, tol=tol)
            check(lambda L, m, x, y: L.addbmm(c(L, m), c(L, x), c(L, y), **kw), M[:, :3], B1, B2, tol=tol)
            check(lambda L, m, x, y: L.baddbmm(c(L, m), c(L, x), c(L, y), **kw), M[None, :, :3].repeat(3, 0),
                  B1, B2, tol=tol)
            check(lambda L, m, x, y: L.addr(c(L, m), c(L, x), c(L, y), **kw), M, w, M[0], tol=tol)
    # addr promotes: an integer input with float vectors is a float result (float alpha allowed)
    check(lambda L, m, x, y: L.addr(m.long(), x.float(), y.float(), alpha=2.5, beta=0.5), M, w, M[0])
    check(lambda L, m, x, y: L.addr(m.long(), x.long(), y.long(), alpha=2.5, beta=True), M, w, M[0])
    # a non-contiguous integer matrix
    at = np.swapaxes(a, 0, 1).copy()
    check_nc(lambda L, m, x, y: L.addmm(m.long(), x.long().t(), y.long(), alpha=2.7, beta=-1.2), M, at, b)


# ---------------------------------------------------------------- 4. leniencies where torch raises
def test_keepdim_without_dim_and_bool_ranges():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for kw in ({"keepdim": True}, {"keepdim": False}, {"keepdim": True, "dtype": "float64"}):
        for op in ("sum", "mean", "prod", "median", "nanmedian"):
            k = dict(kw)

            def f(L, a, op=op, k=k):
                if "dtype" in k:
                    k = dict(k, dtype=getattr(L, k["dtype"]))
                return getattr(a, op)(**k)
            check(f, x)
            check(lambda L, a: getattr(L, op)(a, keepdim=True), x)
    for op in ("sum", "mean", "nansum", "nanmean", "amax", "amin", "any", "all", "std", "var", "norm", "argmax",
               "argmin", "logsumexp"):
        check(lambda L, a: getattr(a, op)(dim=None, keepdim=True), x)
        check(lambda L, a: getattr(a, op)(keepdim=True), x)
    check(lambda L, a: a.sum(None, True), x)
    check(lambda L, a: a.sum((), keepdim=True), x)
    check(lambda L, a: a.sum(dim=[], keepdim=True, dtype=L.float64), x)
    check(lambda L, a: L.sum(a, keepdims=True, axis=1), x)
    for args in ((5,), (0, 5), (0, 2), (True,), (0, 1, 0.5), (0,), (0, 1, 0)):
        check(lambda L: L.arange(*args, dtype=L.bool))
        check(lambda L: L.arange(*args, dtype=L.complex64))
        check(lambda L: L.arange(*args, dtype=L.uint8))
    check(lambda L: L.range(0, 1, dtype=L.bool))
    check(lambda L: L.range(0, 1, 0, dtype=L.bool))
    check(lambda L: L.range(0, 1, dtype=L.complex64))
    for steps in (0, 1, 3):
        check(lambda L: L.linspace(0, 1, steps, dtype=L.bool))
        check(lambda L: L.logspace(0, 1, steps, dtype=L.bool))
    check(lambda L: L.linspace(0, 1, -1, dtype=L.bool))
    check(lambda L: L.arange(3, out=L.empty(3, dtype=L.bool)))


# ---------------------------------------------------------------- 5. complex ldl_factor / ldl_solve
def _sym(rng, n, dt, herm, batch=()):
    a = _crand(rng, batch + (n, n), dt)
    a = a + np.swapaxes(a.conj() if herm else a, -1, -2)
    return a


@pytest.mark.parametrize("dt", _CDT)
@pytest.mark.parametrize("herm", [False, True])
def test_complex_ldl_factor_solve(dt, herm):
    rng = np.random.default_rng(8)
    tol = 1e-4 if dt == np.complex64 else 1e-10
    chk = make_check(torch, _RTOLS, same_error="subclass", complex_tol=True, scale_atol=True)
    for n, batch in ((1, ()), (2, ()), (3, ()), (5, ()), (6, (2,)), (4, (2, 3)), (0, ()), (3, (0,))):
        a = _sym(rng, n, dt, herm, batch)
        # the upper triangle is never read (garbage there must not matter)
        a_g = a + np.triu(_crand(rng, a.shape, dt), 1)
        if herm and n:
            a_g = a_g + 1j * np.eye(n, dtype=dt) * 0.5     # nor the imaginary part of a Hermitian diagonal
        chk(lambda L, x: tuple(L.linalg.ldl_factor(x, hermitian=herm)), a_g, tol=tol)
        chk(lambda L, x: tuple(L.linalg.ldl_factor_ex(x, hermitian=herm)), a_g, tol=tol)
        b = _crand(rng, batch + (n, 3), dt)
        chk(lambda L, x, y: L.linalg.ldl_solve(*L.linalg.ldl_factor(x, hermitian=herm), y, hermitian=herm),
            a_g, b, tol=tol * 10)
    # 2x2 pivot blocks: a zero diagonal forces them (both hermitian forms and symmetric)
    a = _sym(rng, 6, dt, herm)
    a[np.arange(6), np.arange(6)] = 0
    chk(lambda L, x: tuple(L.linalg.ldl_factor(x, hermitian=herm)), a, tol=tol)
    b = _crand(rng, (6, 2), dt)
    chk(lambda L, x, y: L.linalg.ldl_solve(*L.linalg.ldl_factor(x, hermitian=herm), y, hermitian=herm), a, b,
        tol=tol * 10)
    # singular: ldl_factor raises, ldl_factor_ex reports info
    z = np.zeros((3, 3), dt)
    chk(lambda L, x: L.linalg.ldl_factor(x, hermitian=herm), z)
    chk(lambda L, x: tuple(L.linalg.ldl_factor_ex(x, hermitian=herm)), z)
    # the solution solves the system
    a = _sym(rng, 7, dt, herm)
    b = _crand(rng, (7, 2), dt)
    ld, piv = nee.linalg.ldl_factor(nee.tensor(a), hermitian=herm)
    x = nee.linalg.ldl_solve(ld, piv, nee.tensor(b), hermitian=herm).numpy()
    np.testing.assert_allclose(a @ x, b, atol=tol * 100)


def test_complex_ldl_solve_errors():
    rng = np.random.default_rng(9)
    a = _sym(rng, 3, np.complex64, False)
    chk = make_check(torch, _RTOLS, same_error="subclass", complex_tol=True)
    chk(lambda L, x, y: L.linalg.ldl_solve(*L.linalg.ldl_factor(x), y), a, _crand(rng, (3, 2), np.complex128))
    chk(lambda L, x, y: L.linalg.ldl_solve(*L.linalg.ldl_factor(x), y), a,
        rng.standard_normal((3, 2)).astype(np.float32))
    chk(lambda L, x, y: L.linalg.ldl_solve(*L.linalg.ldl_factor(x), y), a, _crand(rng, (4, 2), np.complex64))


# ---------------------------------------------------------------- 6. this session's own fuzz findings
def test_fuzz_findings_s12():
    f32, c64 = np.ones((2, 3), np.float32), np.ones((3, 2), np.complex64)
    # a complex / real mismatch named the dtypes through a table without complex names (KeyError)
    check(lambda L, a, b: L.matmul(a, b), f32, c64)
    check(lambda L, a, b: L.bmm(a[None], b[None]), f32, c64)
    check(lambda L, a, b: L.einsum("ij,jk->ik", a, b), f32, c64)
    # torch's bmm of an empty operand checks no dtype: zeros of the second operand's dtype
    check(lambda L, a, b: L.bmm(a, b), np.ones((1, 2, 0), np.float32), np.ones((1, 0, 4), np.uint8))
    check(lambda L, a, b: L.bmm(a, b), np.ones((0, 2, 3), np.int32), np.ones((0, 3, 4)))
    check(lambda L, a, b: L.bmm(a, b), np.ones((1, 2, 3), bool), np.ones((1, 3, 0)))
    check(lambda L, a, b: L.bmm(a, b), np.ones((1, 2, 0), bool), np.ones((1, 0, 4), bool))
    check(lambda L, a, b: L.bmm(a, b), np.ones((1, 2, 0), np.float32), np.ones((1, 3, 4), np.uint8))
    check(lambda L, a, b: L.bmm(a, b), np.ones((1, 2, 3), np.float32), np.ones((1, 3, 4), np.uint8))
    check(lambda L, m, a, b: L.baddbmm(m, a, b), np.ones((1, 2, 4), bool), np.ones((1, 2, 0), bool),
          np.ones((1, 0, 4), bool))
    check(lambda L, m, a, b: L.addbmm(m, a, b), np.ones((2, 4), np.float32), np.ones((1, 2, 0), np.float32),
          np.ones((1, 0, 4), np.float64))
    # scatter_reduce(mean) of bools: torch refuses (sum / prod / amax / amin take them)
    x, i = np.ones((2, 3)), np.zeros((2, 3), np.int64)
    for red in ("sum", "prod", "mean", "amax", "amin"):
        for inc in (True, False):
            check(lambda L, a, i: a.bool().scatter_reduce(0, i, a.bool(), red, include_self=inc), x, i)
        check(lambda L, a, i: a.bool().index_reduce(0, i[0, :2], a.bool(), red), x, i)
    # index_add's alpha is converted to a float self's dtype with torch's overflow check
    j = np.zeros(2, np.int64)
    check(lambda L, a, i: a.half().index_add(0, i, a.half(), alpha=70000), x, j)
    check(lambda L, a, i: a.bfloat16().index_add(0, i, a.bfloat16(), alpha=1e30), x, j)
    check(lambda L, a, i: a.float().index_add(0, i, a.float(), alpha=1e300), x, j)
    check(lambda L, a, i: a.double().index_add(0, i, a.double(), alpha=1e300), x, j)
