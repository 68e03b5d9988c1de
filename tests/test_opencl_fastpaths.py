"""OpenCL fast paths (issue 5), differential against numpy / torch: the n-d / flat elementwise kernels
and their innermost-stride variants, the prepared eager launches, the float32 exp polynomial (ULP),
float8 softmax and the 4x8-tile float32 matmul, and the read-only cached scalar tensors."""
from __future__ import annotations

import numpy as np
import pytest

import neetorch as nee

pytest.importorskip("pyopencl", reason="pyopencl is not installed")

from neetorch.devices import get_backend
from neetorch.devices.opencl import (
    OpenCLBackend,
    render,
)
from neetorch.ops.elementwise import _scalar_cache

_n, _why = OpenCLBackend.probe()
if _n == 0:
    pytest.skip(f"no OpenCL device: {_why}", allow_module_level=True)


def _bk():
    # looked up when used: tests/test_opencl.py re-registers the backend at collection (a new instance)
    return get_backend(nee.device("opencl"))
RNG = np.random.default_rng(5)


def dev(a):
    return nee.tensor(np.asarray(a)).to("opencl")


def host(t):
    assert t.device.type == "opencl"
    return t.cpu().numpy()


def _f32(shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("sa,sb", [
    ((300, 260), (260,)),        # n-d, inner 260 = 256 + an overlapping group, row stride 1
    ((300, 260), (300, 1)),      # column: innermost stride 0 (variant "100"-like)
    ((40, 7), (7,)),             # short inner dim: flat kernel with 32-bit index math
    ((2, 3, 4, 50), (3, 1, 50)),  # rank 4 after collapsing: flat
    ((5,), (5,)),                # tiny: one small work-group
    ((3, 1, 70), (1, 9, 1)),     # both broadcast
])
def test_broadcast_layouts(sa, sb):
    a, b = _f32(sa), _f32(sb)
    x, y = dev(a), dev(b)
    for _ in range(2):   # second round: the prepared launch
        np.testing.assert_allclose(host(x * y + 1.0), a * b + np.float32(1.0), rtol=1e-6)
        np.testing.assert_allclose(host(y - x), b - a, rtol=1e-6)
    rev = tuple(range(a.ndim))[::-1]
    xt = dev(np.ascontiguousarray(a.transpose(rev))).permute(*rev)   # a general innermost stride
    np.testing.assert_allclose(host(xt * y), a * b, rtol=1e-6)
    if a.ndim == 2 and a.shape[0] > 2:
        np.testing.assert_allclose(host(x[1:, 1:] + x[:-1, :-1]), a[1:, 1:] + a[:-1, :-1], rtol=1e-6)


def test_inplace_with_overlapping_groups():
    for shape in [(300, 260), (7,), (40, 7)]:
        a = _f32(shape)
        x = dev(a)
        x += x               # in place and recomputed elements: must not double twice
        np.testing.assert_allclose(host(x), a + a, rtol=1e-6)
        x = dev(a)
        x.mul_(2.0)
        np.testing.assert_allclose(host(x), a * 2, rtol=1e-6)


def test_plan_picks_modes():
    L = 256
    assert render._plan(L, [1 << 20]) == (True, 256, False)
    assert render._plan(L, [300, 260]) == (True, 256, True)
    assert render._plan(L, [3000, 100]) == (True, 64, True)
    assert render._plan(L, [4000, 7])[0] is False
    assert render._plan(L, [2, 3, 4, 50])[0] is False
    assert render._plan(L, [8]) == (False, render.TINY, True)


def _ulp(got, x):
    ref = np.exp(x.astype(np.float64))
    with np.errstate(over="ignore"):
        r32 = ref.astype(np.float32)
    ok = np.isfinite(r32) & (r32 > 0)
    assert np.array_equal(np.isnan(got), np.isnan(x))
    assert np.array_equal(got[~ok & ~np.isnan(x)], r32[~ok & ~np.isnan(x)])   # inf and 0 exactly
    return float(np.max(np.abs(got[ok].astype(np.float64) - ref[ok]) / np.spacing(r32[ok]).astype(np.float64)))


def test_exp_float32_ulp():
    x = np.concatenate([RNG.uniform(-105, 90, 1 << 18), RNG.uniform(-3, 3, 1 << 16),
                        [np.inf, -np.inf, np.nan, 0.0, -0.0, 88.72, 88.73, -87.4, -103.9, -104.5, 1e-30]])
    x = x.astype(np.float32)
    assert _ulp(host(dev(x).exp()), x) <= 1.0
    # the fused (jit) rendering and the float8 softmax use the same helper
    f = nee.jit(lambda t: (t * 1.0).exp())
    assert _ulp(host(f(dev(x))), x) <= 1.0


def test_softmax_rows_against_torch():
    torch = pytest.importorskip("torch")
    for shape, d in [((64, 1000), -1), ((6, 13), -1), ((5, 40), 0), ((3, 9, 16), 1)]:
        a = _f32(shape) * 4
        a.flat[2] = -np.inf
        for log in (False, True):
            got = host((nee.log_softmax if log else nee.softmax)(dev(a), d))
            want = (torch.log_softmax if log else torch.softmax)(torch.tensor(a), d).numpy()
            np.testing.assert_allclose(got, want, rtol=3e-6, atol=1e-6)


def test_matmul_tiles_against_numpy():
    # b larger than a (conv's weights @ im2col columns): the tiles walk rows fastest; M >= 32: 8 x 8 tiles
    for sa, sb in [((130, 70), (70, 48)), ((3, 5, 7), (7, 16)), ((6, 9), (9, 8)), ((2, 1, 5, 4), (3, 4, 8)),
                   ((7, 13), (3, 13, 40)), ((9, 30), (30, 1024)), ((37, 20), (2, 20, 64)), ((45, 3), (3, 16))]:
        a, b = _f32(sa), _f32(sb)
        got = host(dev(a) @ dev(b))
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    assert any(k.startswith("matmul_v8") for k in _bk().programs.kernels)


def test_scalar_cache_is_device_aware_and_read_only():
    x = dev(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(host(x + 2.5), np.arange(4) + 2.5)
    cached = [t for k, t in _scalar_cache.items() if k[1] == 2.5 and k[3].type == "opencl"]
    assert len(cached) == 1
    s = cached[0]
    with pytest.raises(ValueError, match="read-only"):
        s.add_(1.0)
    with pytest.raises(ValueError, match="read-only"):
        s.fill_(0.0)
    np.testing.assert_array_equal(host(x + 2.5), np.arange(4) + 2.5)
