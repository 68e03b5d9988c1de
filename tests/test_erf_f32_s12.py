"""erf_f32 (devices/cpu/fastmath.py) as refitted in session 12: 1 - 2^Q(|x| - S0) above 0.8, no
Cody-Waite reduction (the gelu kernel's erf: 24 instead of 30 multiply-type vector ops per element; 26 since session 13, the top terms in two independent pairs).

Accuracy against float64 libm erf on dense sweeps (every float32 was swept when it was made: 0.80 ulp
max, the previous erf_f32 1.19), special values, oddness, and the vectorized kernels (eager erf and
gelu, a jitted gelu(x*w+b)) giving the scalar helper's bits.
"""
import math

import numba
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import fastmath as fm

F = nee.nn.functional


@numba.njit(fastmath={"contract"})   # the elementwise kernels' flags
def _erf_loop(x, out):
    for i in range(x.size):
        out[i] = fm.erf_f32(x[i])


@numba.njit(fastmath={"contract"})
def _gelu_loop(x, out):
    h = np.float32(0.5)
    c = np.float32(0.7071067811865476)
    for i in range(x.size):
        out[i] = h * x[i] * (np.float32(1.0) + fm.erf_f32(x[i] * c))


@numba.njit
def _max_ulp(x, got):
    """max |got - erf(x)| in ulps of float32 at the reference's binade (as tests/test_fastmath.py)."""
    worst, at = 0.0, 0
    for i in range(x.size):
        ref = math.erf(np.float64(x[i]))
        if got[i] == np.float32(ref) or (math.isnan(got[i]) and math.isnan(ref)):
            continue
        if math.isnan(got[i]) or math.isinf(got[i]):
            return math.inf, i
        _, e = math.frexp(abs(ref))
        u = abs(np.float64(got[i]) - ref) / math.ldexp(1.0, max(e, -124) - 24)
        if u > worst:
            worst, at = u, i
    return worst, at


def _erf(x):
    out = np.empty_like(x)
    _erf_loop(x, out)
    return out


def _patterns(lo, hi, step=1):
    return np.arange(int(np.float32(lo).view(np.uint32)), int(np.float32(hi).view(np.uint32)), step,
                     dtype=np.uint32).view(np.float32)


@pytest.mark.parametrize("lo, hi, step", [
    (0.5, 1.25, 1),        # both sides of the split (0.8), every float32: the largest errors
    (1.25, 4.5, 3),        # the exp region up to past the clamp
    (1e-45, 0.5, 37),      # subnormals to 0.5
    (4.5, 3e38, 4001),     # erf == 1
])
def test_erf_f32_max_ulp(lo, hi, step):
    x = _patterns(lo, hi, step)
    got = _erf(x)
    worst, at = _max_ulp(x, got)
    # measured 0.80 over every float32 (the previous fit: 1.19 at 0.907)
    assert worst <= 0.81, (x[at], got[at], math.erf(float(x[at])), worst)
    neg = _erf(-x)
    np.testing.assert_array_equal(neg.view(np.uint32), (-got).view(np.uint32))   # odd, bit for bit


def test_erf_f32_special_values():
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 3.9201, 4.0, 1e30, -1e30], np.float32)
    got = _erf(x)
    assert got[0] == 1.0 and got[1] == -1.0 and np.isnan(got[2])
    assert got[3] == 0.0 and not np.signbit(got[3]) and got[4] == 0.0 and np.signbit(got[4])
    np.testing.assert_array_equal(got[5:], [1.0, 1.0, 1.0, -1.0])
    # subnormals, the split and its neighbours, the last values below 1
    x = np.array([1e-45, -1e-45, 1e-40, 1e-38, np.float32(0.8), np.nextafter(np.float32(0.8), np.float32(0)),
                  np.nextafter(np.float32(0.8), np.float32(1)), 3.9, 3.92, 3.9200547], np.float32)
    got = _erf(x)
    assert _max_ulp(x, got)[0] <= 0.81
    assert got[0] == np.float32(1.401298464324817e-45) and got[1] == -got[0]


def test_kernels_give_the_helpers_bits():
    rng = np.random.default_rng(12)
    x = np.concatenate([rng.uniform(-5, 5, 40_000), rng.uniform(-1, 1, 20_000),
                        np.linspace(0.78, 0.82, 4_001), -np.linspace(0.78, 0.82, 4_001),
                        [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, -1e-40, 6.0, -6.0]]).astype(np.float32)
    want = _erf(x)
    t = nee.tensor(x)
    np.testing.assert_array_equal(nee.erf(t).numpy().view(np.uint32), want.view(np.uint32))
    # a strided view (the any-strides loop)
    xs = np.repeat(x, 2)
    np.testing.assert_array_equal(nee.erf(nee.tensor(xs)[::2]).numpy().view(np.uint32), want.view(np.uint32))
    g = np.empty_like(x)
    _gelu_loop(x, g)
    np.testing.assert_array_equal(F.gelu(t).numpy().view(np.uint32), g.view(np.uint32))
    # the fused kernel of the benchmark: gelu(x*w+b) with w = 1, b = 0 (exact) is gelu(x)
    x2 = x[:64 * 1024].reshape(64, 1024)
    jf = nee.jit(lambda x, w, b: F.gelu(x * w + b))
    got = jf(nee.tensor(x2), nee.ones(1024), nee.zeros(1024)).numpy()
    np.testing.assert_array_equal(got.view(np.uint32), g[:64 * 1024].reshape(64, 1024).view(np.uint32))


def test_gelu_float32_against_float64():
    # (x/2)(1 + erf(x/sqrt2)) in float32 against the same formula in float64: the erf's error scaled by
    # |x|/2 plus the roundings of the formula (relative where 1 + erf does not cancel)
    x = np.linspace(-3, 6, 200_001).astype(np.float32)
    got = F.gelu(nee.tensor(x)).numpy().astype(np.float64)
    xd = x.astype(np.float64)
    ref = 0.5 * xd * (1 + np.array([math.erf(v / math.sqrt(2)) for v in xd]))
    err = np.abs(got - ref) / (np.abs(xd) * 2.0 ** -24 + 1e-45)
    assert err.max() < 4.0, (x[np.argmax(err)], err.max())
