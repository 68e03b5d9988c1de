"""Round 5 of the differential fuzzing against PyTorch (the reference, tests only; ``tests/torch_check.py``): the
leftovers of round 4.  Each test is one finding: where torch raises neetorch raises the same exception type, where
it returns the results match in type, dtype, shape and values.

Findings: ``out=`` dtype rules (``signbit`` / ``isposinf`` / ``isneginf`` take bool outputs only; ``isnan`` /
``isinf`` / ``isfinite`` / ``relu`` have no ``out=`` at all; ``heaviside``'s must have the inputs' dtype, with
torch's two messages; ``polar`` / ``complex``'s the exact complex dtype, resized like every out=; ``igamma`` /
``igammac`` cast into any floating or complex ``out=``); ``median`` / ``nanmedian`` of an empty integer or bool
tensor (torch's NaN converted to the dtype); ``histc`` of float16 / bfloat16 computed in that dtype's arithmetic
(the bin of values next to an edge, overflowing positions, a range whose width overflows, a bin count the dtype
rounds).
"""
# ruff: noqa: B023  (the lambdas built in loops are called by check() before the loop moves on)
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch_check import make_check, split_special

import neetorch as nee

_RTOLS = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-6, "other": 1e-12}
DTYPES = ["bool", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "complex64",
          "complex128"]


# (tests/torch_check.py) bfloat16 results checked as float32, complex ones as their real and imaginary parts
check = make_check(torch, _RTOLS, same_error="exact", post=split_special)


def _d(L, name):
    return getattr(L, name)


# ------------------------------------------------------------------------------------------------ out= dtype rules
@pytest.mark.parametrize("od", DTYPES)
def test_predicate_out_dtypes(od):
    x = np.array([-1.5, 0.0, -0.0, 2.0, np.inf, -np.inf, np.nan], np.float32)
    for name in ("signbit", "isposinf", "isneginf", "isnan", "isinf", "isfinite"):
        check(lambda L, a: getattr(L, name)(a, out=L.empty(7, dtype=_d(L, od))), x)
    check(lambda L, a: L.relu(a, out=L.empty(7, dtype=_d(L, od))), x)
    check(lambda L, a: L.signbit(a.to(L.int64).clamp(-5, 5), out=L.empty(0, dtype=_d(L, od))), x[:4])
    if od == "bool":
        with pytest.raises(TypeError, match="unexpected keyword argument 'out'"):
            nee.isnan(nee.tensor(x), out=nee.empty(7, dtype=nee.bool))


@pytest.mark.parametrize("xd", ["float32", "float64", "int64", "bool", "float16"])
@pytest.mark.parametrize("od", DTYPES)
def test_heaviside_out(xd, od):
    x, v = np.array([-1.0, 0.0, 2.0, np.nan]), np.array([0.5, 0.5, 0.5, 0.5])
    check(lambda L, a, b: L.heaviside(a.to(_d(L, xd)), b.to(_d(L, xd)), out=L.empty(4, dtype=_d(L, od))), x, v)


@pytest.mark.parametrize("ad", ["float32", "float64"])
@pytest.mark.parametrize("od", DTYPES)
def test_polar_complex_out(ad, od):
    a, b = np.array([1.0, 2.0, 0.5]), np.array([0.5, -1.0, 3.0])
    check(lambda L, x, y: L.polar(x.to(_d(L, ad)), y.to(_d(L, ad)), out=L.empty(3, dtype=_d(L, od))), a, b)
    check(lambda L, x, y: L.complex(x.to(_d(L, ad)), y.to(_d(L, ad)), out=L.empty(3, dtype=_d(L, od))), a, b)


def test_polar_out_resized():
    a, b = np.array([1.0, 2.0], np.float32), np.array([0.5, -1.0], np.float32)
    r = check(lambda L, x, y: L.polar(x, y, out=L.empty(5, dtype=L.complex64)), a, b)
    assert r is not None
    with pytest.warns(UserWarning, match="was resized"):
        nee.polar(nee.tensor(a), nee.tensor(b), out=nee.empty(5, dtype=nee.complex64))


@pytest.mark.parametrize("xd", ["float32", "float64"])
@pytest.mark.parametrize("od", DTYPES)
def test_igamma_out(xd, od):
    a, x = np.array([1.0, 2.0, 0.5, 3.0]), np.array([0.5, 1.0, 2.0, 0.0])
    for name in ("igamma", "igammac"):
        check(lambda L, p, q: getattr(L, name)(p.to(_d(L, xd)), q.to(_d(L, xd)), out=L.empty(4, dtype=_d(L, od))),
              a, x, tol=1e-5)


def test_special_round_out_dtype():
    x = np.array([-1.5, 0.5, 2.5], np.float32)
    check(lambda L, a: L.special.round(a, out=L.empty(3, dtype=L.float64)), x)


# ------------------------------------------------------------------------------------------------ median of empty
@pytest.mark.parametrize("dt", ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32"])
def test_median_of_empty(dt):
    check(lambda L: L.median(L.empty(0, dtype=_d(L, dt))))
    check(lambda L: L.nanmedian(L.empty(2, 0, dtype=_d(L, dt))))
    check(lambda L: L.median(L.empty(0, 3, dtype=_d(L, dt)), 1))          # an empty result, no reduction
    check(lambda L: L.median(L.empty(3, 0, dtype=_d(L, dt)), 1))          # refused: empty reduction dim
    check(lambda L: L.median(L.tensor([1, 0], dtype=_d(L, dt))))          # (bool refused when not empty)


# ------------------------------------------------------------------------------------------------ histc
@pytest.mark.parametrize("dt", ["bfloat16", "float16", "float32"])
def test_histc_low_float_arithmetic(dt):
    rng = np.random.default_rng(5)
    cases = [(rng.uniform(0, 1, 40), 33, 0, 0), (rng.integers(0, 300, 40).astype(float), 33, 0, 0),
             (rng.integers(-5, 6, 40) / 3, 7, -1, 1.5), (rng.integers(0, 300, 40).astype(float), 255, 0, 0),
             (np.array([0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0, 0.33, 0.66, 0.999]), 10, 0, 1),
             (np.array([-50000., -20000, 0, 20000, 50000]), 4, -30000, 30000),      # float16 positions overflow
             (np.array([-50000., -20000, 0, 20000, 50000]), 4, -60000, 60000),      # float16 width overflows
             (np.arange(1.0, 11.0), 259, 0, 10),                                    # bfloat16(259) is 260
             (np.arange(1.0, 11.0), 2049, 0, 10)]
    for v, bins, lo, hi in cases:
        check(lambda L, a: L.histc(a.to(_d(L, dt)), bins=bins, min=lo, max=hi), v)
