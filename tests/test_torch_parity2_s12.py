"""Torch parity leftovers of the last parity round (session 12, second list), differential against PyTorch
(``tests/torch_check.py``).

1. ``matmul`` / ``bmm`` / ``baddbmm`` (and ``mm`` / ``mv``) with an empty product or inner size 0: torch checks no
   dtype there (bmm: zeros of mat2's dtype; baddbmm: ``input`` cast to batch2's dtype times ``beta``), bool
   matrices included; the non-empty equivalents raise torch's errors.
2. complex ``logcumsumexp`` (torch's complex log-add-exp; the imaginary part is compared modulo 2*pi),
   complex ``Tensor.normal_`` (real and imaginary parts each N(mean, std**2 / 2)) and ``Tensor.uniform_`` (each
   part U[from, to)), checked by their moments with a fixed seed.
"""
# ruff: noqa: B023  (the lambdas built in loops are called by check() before the loop moves on)
from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch_check import make_check, split_special

import neetorch as nee

_RTOLS = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 2e-6, "complex64": 2e-6, "other": 1e-12}
check = make_check(torch, _RTOLS, same_error="subclass", post=lambda r: split_special(r, True))

_DTS = ["float32", "float64", "int64", "bool", "complex64", "float16"]


def _arr(shape, dt, seed=0):
    a = np.random.default_rng(seed).integers(-3, 4, size=shape)
    return (a > 0) if dt == "bool" else a.astype(dt)


# ------------------------------------------------------------------ 1. empty matrix products
_BMM_SHAPES = [((0, 2, 3), (0, 3, 4)), ((2, 0, 3), (2, 3, 4)), ((2, 2, 0), (2, 0, 4)), ((2, 2, 3), (2, 3, 0)),
               ((2, 2, 3), (2, 3, 4))]   # (the last one is not empty: torch's dtype errors)


@pytest.mark.parametrize("op", ["bmm", "matmul"])
@pytest.mark.parametrize("shapes", _BMM_SHAPES, ids=str)
def test_bmm_matmul_empty_mixed_dtypes(op, shapes):
    for da, db in itertools.product(_DTS, repeat=2):
        r = check(lambda L, a, b: getattr(L, op)(a, b), _arr(shapes[0], da), _arr(shapes[1], db))
        if all(shapes[0]) and all(shapes[1]) and da != db:
            assert isinstance(r, Exception)   # (a check that the non-empty case is refused, as torch does)


_MATMUL_SHAPES = [((2, 3), (0, 3, 4)), ((0, 1, 2, 3), (1, 5, 3, 4)), ((2, 1, 2, 3), (0, 3, 4)),
                  ((1, 2, 3), (0, 3, 4)), ((3,), (0, 3, 4)), ((0,), (2, 0, 4)), ((3,), (2, 3, 4)),
                  ((2, 3), (2, 3, 4)), ((0, 2, 3), (3, 4)), ((2, 2, 0), (0, 4)), ((0, 2, 3), (3,)),
                  ((2, 2, 0), (0,)), ((0, 3), (3, 4)), ((2, 0), (0, 4)), ((2, 3), (3, 0)), ((0,), (0, 4)),
                  ((0, 3), (3,)), ((2, 0), (0,)), ((2, 3), (3, 4))]


@pytest.mark.parametrize("shapes", _MATMUL_SHAPES, ids=str)
def test_matmul_mm_mv_empty_dtypes(shapes):
    for da, db in [("float32", "float64"), ("bool", "bool"), ("bool", "float32"), ("int64", "bool"),
                   ("float64", "float64"), ("complex64", "float32")]:
        check(lambda L, a, b: L.matmul(a, b), _arr(shapes[0], da), _arr(shapes[1], db))
        if len(shapes[0]) == 2 and len(shapes[1]) == 2:
            check(lambda L, a, b: L.mm(a, b), _arr(shapes[0], da), _arr(shapes[1], db))
        if len(shapes[0]) == 2 and len(shapes[1]) == 1:
            check(lambda L, a, b: L.mv(a, b), _arr(shapes[0], da), _arr(shapes[1], db))


_BADDBMM_SHAPES = [((0, 2, 4), (0, 2, 3), (0, 3, 4)), ((2, 2, 4), (2, 2, 0), (2, 0, 4)),
                   ((1, 4), (2, 2, 0), (2, 0, 4)), ((2, 0, 4), (2, 0, 3), (2, 3, 4)),
                   ((3, 4), (2, 2, 0), (2, 0, 4)), ((2, 2, 4), (2, 2, 3), (2, 3, 4))]


@pytest.mark.parametrize("shapes", _BADDBMM_SHAPES, ids=str)
def test_baddbmm_empty_mixed_dtypes(shapes):
    dts = ["float32", "float64", "int64", "bool"]
    for di, d1, d2 in itertools.product(dts, repeat=3):
        for kw in ({}, {"beta": 0}, {"beta": 2}, {"beta": 0.5}):
            check(lambda L, x, a, b: L.baddbmm(x, a, b, **kw), _arr(shapes[0], di), _arr(shapes[1], d1),
                  _arr(shapes[2], d2))


def test_baddbmm_k0_complex_and_beta():
    x, a, b = _arr((2, 2, 4), "complex64"), _arr((2, 2, 0), "complex64"), _arr((2, 0, 4), "float32")
    check(lambda L, x, a, b: L.baddbmm(x, a, b), x, a, b)             # complex input cast to float32
    check(lambda L, x, a, b: L.baddbmm(x, a, b, beta=2j), x, a, b)    # complex beta on a float result: refused
    x, a, b = _arr((2, 2, 4), "bool"), _arr((2, 2, 0), "bool"), _arr((2, 0, 4), "bool")
    check(lambda L, x, a, b: L.baddbmm(x, a, b, beta=True), x, a, b)


def test_bmm_empty_out():
    a, b = _arr((0, 2, 3), "float32"), _arr((0, 3, 4), "float64")
    for odt in ("float32", "float64"):
        check(lambda L, a, b: L.bmm(a, b, out=L.empty(0, dtype=getattr(L, odt))), a, b)


# ------------------------------------------------------------------ 2. complex logcumsumexp
def _lcse_compare(a, dim, rtol):
    t = torch.logcumsumexp(torch.from_numpy(a.copy()), dim).numpy()
    n = nee.logcumsumexp(nee.tensor(a.copy()), dim)
    assert n.dtype.name == str(a.dtype) and tuple(n.shape) == t.shape
    n = n.numpy()
    np.testing.assert_array_equal(np.isnan(n.real), np.isnan(t.real))
    np.testing.assert_array_equal(np.isnan(n.imag), np.isnan(t.imag))
    fin = np.isfinite(t.real)
    np.testing.assert_array_equal(n.real[~fin & ~np.isnan(t.real)], t.real[~fin & ~np.isnan(t.real)])
    scale = max(1.0, float(np.abs(t.real[fin]).max(initial=0)))
    np.testing.assert_allclose(n.real[fin], t.real[fin], rtol=rtol, atol=rtol * scale)
    ok = np.isfinite(t.imag)
    # a logarithm is defined up to 2*pi*i: compare the imaginary parts modulo 2*pi
    d = np.angle(np.exp(1j * (n.imag[ok].astype(np.float64) - t.imag[ok])))
    assert np.abs(d).max(initial=0) <= rtol * max(scale, float(np.abs(t.imag[ok]).max(initial=1))) * 4


@pytest.mark.parametrize("dt,rtol", [("complex64", 2e-6), ("complex128", 1e-12)])
def test_logcumsumexp_complex(dt, rtol):
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((5, 33)) * 3 + 1j * rng.standard_normal((5, 33)) * 5).astype(dt)
    for dim in (0, 1, -1):
        _lcse_compare(a, dim, rtol)
    _lcse_compare(a[:, ::3], 1, rtol)                        # a strided input
    _lcse_compare((a * 30).astype(dt), 1, rtol)              # large magnitudes (no overflow)
    _lcse_compare(a.reshape(5, 3, 11), 2, rtol)
    _lcse_compare(a[:, :1], 1, rtol)                         # one term
    specials = [[1 + 4j, 1 - 4j, -np.inf + 1j, np.inf + 1j, 2 + 0j, np.nan + 1j, 3], [-np.inf + 1j],
                [complex(1, np.nan)], [-np.inf + 2j, -np.inf + 1j, 5], [np.inf + 1j, np.inf + 2j],
                [np.inf, np.inf], [np.inf + 0j, 1], [1e-30 + 1j, 0j], [-np.inf + 0j, 1 + 1j, -np.inf + 3j]]
    for s in specials:
        _lcse_compare(np.array(s, dtype=dt), 0, rtol)
    # the dtypes and errors as torch
    check(lambda L, x: L.logcumsumexp(x, 0), np.zeros((0, 3), dtype=dt))
    check(lambda L, x: L.logcumsumexp(x, 2), a)
    check(lambda L, x: L.logcumsumexp(x, 0), np.arange(4))   # int64: refused by both


# ------------------------------------------------------------------ 2. complex normal_ / uniform_
@pytest.mark.parametrize("dt", ["complex64", "complex128"])
def test_normal_uniform_complex_moments(dt):
    n = 200_000
    g = nee.Generator().manual_seed(1234)
    a = nee.empty(n, dtype=getattr(nee, dt)).normal_(1.5, 2.0, generator=g)
    assert a.dtype.name == dt
    x = a.numpy()
    # torch: view_as_real(self).normal_(mean, std / sqrt(2)): each part N(mean, std**2 / 2), independent
    se = np.sqrt(2.0 / n)
    for p in (x.real, x.imag):
        assert abs(p.mean() - 1.5) < 5 * se
        assert abs(p.var() - 2.0) < 5 * 2.0 * np.sqrt(2.0 / n)
        assert abs(((p - 1.5) ** 3).mean()) < 5 * np.sqrt(15 * 8 / n)    # symmetric
    assert abs(np.corrcoef(x.real, x.imag)[0, 1]) < 5 / np.sqrt(n)
    assert abs(np.mean(np.abs(x - (1.5 + 1.5j)) ** 2) - 4.0) < 0.1   # complex variance std**2
    u = nee.empty(n, dtype=getattr(nee, dt)).uniform_(-1.0, 3.0, generator=g).numpy()
    for p in (u.real, u.imag):   # each part U[-1, 3): mean 1, variance 16/12
        assert p.min() >= -1.0 and p.max() < 3.0
        assert abs(p.mean() - 1.0) < 5 * np.sqrt(16 / 12 / n)
        assert abs(p.var() - 16 / 12) < 0.02
        assert np.histogram(p, bins=4, range=(-1, 3))[0].min() > n / 4 * 0.97
    assert abs(np.corrcoef(u.real, u.imag)[0, 1]) < 5 / np.sqrt(n)
    # a strided view is filled in place, the rest untouched
    z = nee.zeros(3, 8, dtype=getattr(nee, dt))
    z[:, 1::2].uniform_(5.0, 6.0)
    zz = z.numpy()
    assert np.all(zz[:, ::2] == 0) and np.all((zz[:, 1::2].real >= 5) & (zz[:, 1::2].imag >= 5))
    # a fixed seed repeats its draws
    r1 = nee.empty(5, dtype=getattr(nee, dt)).normal_(generator=nee.Generator().manual_seed(7)).numpy()
    r2 = nee.empty(5, dtype=getattr(nee, dt)).normal_(generator=nee.Generator().manual_seed(7)).numpy()
    np.testing.assert_array_equal(r1, r2)


@pytest.mark.parametrize("dt", ["complex64", "complex128", "float32", "int64"])
def test_normal_uniform_complex_errors(dt):
    z = np.zeros((2, 3), dtype=dt)
    for f in (lambda L, x: x.normal_(1 + 1j, 2.0), lambda L, x: x.normal_(0.0, 1j),
              lambda L, x: x.normal_(1.0, -2.0), lambda L, x: x.uniform_(3.0, 1.0),
              lambda L, x: x.uniform_(1 + 1j, 3.0), lambda L, x: x.uniform_(0.0, 2j)):
        check(f, z)
    check(lambda L, x: tuple(x.normal_().shape), np.zeros((0, 3), dtype=dt))   # (empty: no dtype check)
    check(lambda L, x: tuple(x.normal_(0.0, -1.0).shape), np.zeros((0, 3), dtype=dt))
    check(lambda L, x: str(x.uniform_().dtype).split(".")[-1], z)
    check(lambda L, x: str(x.normal_().dtype).split(".")[-1], z)
    check(lambda L, x: str(x.normal_(0.0, -1.0).dtype).split(".")[-1], z)
