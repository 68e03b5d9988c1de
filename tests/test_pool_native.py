"""The LLVM IR pooling kernels (kernels/pool_native.py: separable max / average pooling on the native workers)
against torch.nn.functional: odd sizes, column strides 1-4, row strides, padding, ceil_mode, dilation,
count_include_pad, divisor_override, NaN propagation, -inf windows, float32 / float64, 1 / 2 / 3 threads, calls
large enough to be split over threads (planes and row bands), and the shapes that must stay on conv.py's Numba
kernels (column stride 5, indices)."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import pool_native
from neetorch.ops import conv as C

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.skipif(not pool_native.available(), reason="no llvmlite native target")


@pytest.fixture
def taken(monkeypatch):
    """Counts the calls the native kernels ran (pool2d returning True)."""
    n = [0, 0]
    orig = pool_native.pool2d

    def counting(*a, **k):
        r = orig(*a, **k)
        n[0 if r else 1] += 1
        return r
    monkeypatch.setattr(pool_native, "pool2d", counting)
    return n


@pytest.fixture(params=[1, 2, 3])
def nthreads(request):
    old = nee.get_num_threads()
    nee.set_num_threads(request.param)
    yield request.param
    nee.set_num_threads(old)


def _x(rng, shape, dt, nan=0.0):
    x = rng.standard_normal(shape).astype(dt)
    if nan:
        x.reshape(-1)[rng.random(x.size) < nan] = np.nan
    return x


def _tol(dt):
    return {"rtol": 1e-5, "atol": 1e-6} if dt == np.float32 else {"rtol": 1e-12, "atol": 1e-13}


# (kernel, stride, padding, dilation)
MAX_CASES = [((3, 3), 2, 0, 1), ((3, 3), 1, 1, 1), ((3, 3), 2, 1, 1), ((2, 3), (1, 2), (1, 1), 1),
             ((3, 2), (2, 3), (1, 1), (1, 2)), ((3, 3), 3, 1, 2), ((1, 1), 4, 0, 1), ((5, 4), (3, 4), 2, 1),
             ((4, 4), (1, 4), 2, (2, 1)), ((3, 3), 1, 0, 3), ((2, 2), 2, 0, 1)]
AVG_CASES = [((3, 3), 2, 1), ((3, 3), 1, 1), ((3, 3), 2, 0), ((2, 3), (1, 2), (1, 1)), ((3, 2), (2, 3), (1, 0)),
             ((7, 7), 1, 0), ((5, 4), 3, 2), ((1, 1), 4, 0), ((2, 2), 2, 0), ((4, 4), (2, 4), 2)]
SHAPES = [(2, 3, 13, 17), (1, 2, 5, 40), (1, 1, 1, 9), (1, 4, 33, 16)]


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("ceil", [False, True])
def test_max_pool(dt, ceil, nthreads, taken):
    rng = np.random.default_rng(1)
    checked = 0
    for k, s, p, d in MAX_CASES:
        for shape in SHAPES:
            x = _x(rng, shape, dt, nan=0.02)
            try:
                ref = F.max_pool2d(torch.from_numpy(x), k, s, p, d, ceil_mode=ceil).numpy()
            except RuntimeError:
                continue
            got = C.max_pool2d(nee.from_numpy(x), k, s, p, d, ceil_mode=ceil).numpy()
            assert got.shape == ref.shape and got.dtype == ref.dtype, (k, s, p, d, shape)
            np.testing.assert_allclose(got, ref, equal_nan=True, **_tol(dt), err_msg=str((k, s, p, d, shape)))
            checked += 1
    assert checked > 30 and taken[0] == checked and taken[1] == 0


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("ceil,cip,div", [(False, True, None), (True, True, None), (True, False, None),
                                          (False, False, 5)])
def test_avg_pool(dt, ceil, cip, div, nthreads, taken):
    rng = np.random.default_rng(2)
    checked = 0
    for k, s, p in AVG_CASES:
        for shape in SHAPES:
            x = _x(rng, shape, dt)
            try:
                ref = F.avg_pool2d(torch.from_numpy(x), k, s, p, ceil_mode=ceil, count_include_pad=cip,
                                   divisor_override=div).numpy()
            except RuntimeError:
                continue
            got = C.avg_pool2d(nee.from_numpy(x), k, s, p, ceil_mode=ceil, count_include_pad=cip,
                               divisor_override=div).numpy()
            assert got.shape == ref.shape and got.dtype == ref.dtype
            np.testing.assert_allclose(got, ref, **_tol(dt), err_msg=str((k, s, p, shape)))
            checked += 1
    # (windows covering the whole plane go to the global reduction, not this kernel)
    assert checked > 25 and taken[0] >= checked - 3 and taken[1] == 0


def test_nan_and_inf_windows(nthreads):
    """NaN anywhere in a window is its max (whatever its position among the taps); a window of -inf only
    gives -inf; a window with dilation that misses the input entirely gives -inf (torch)."""
    x = np.full((1, 2, 9, 37), -np.inf, np.float32)
    x[0, 0, 4, 20] = np.nan
    x[0, 1, 0, 0] = np.nan
    x[0, 1, 8, 36] = 5.0
    for k, s, p, d in [((3, 3), 2, 1, 1), ((3, 3), 1, 1, 1), ((2, 2), 2, 1, 3), ((3, 3), 3, 1, 4)]:
        ref = F.max_pool2d(torch.from_numpy(x), k, s, p, d, ceil_mode=True).numpy()
        got = C.max_pool2d(nee.from_numpy(x), k, s, p, d, ceil_mode=True).numpy()
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("shape,k,s,p", [((1, 16, 101, 103), 3, 2, 1), ((1, 1, 300, 290), 3, 1, 1),
                                         ((2, 3, 300, 64), (3, 2), (2, 1), 1)])
def test_split_over_threads(shape, k, s, p, nthreads, taken):
    """Calls large enough to go to the native workers (several planes, or row bands of one plane)."""
    rng = np.random.default_rng(3)
    x = _x(rng, shape, np.float32, nan=0.001)
    for _ in range(3):      # claims race differently each time: every run must give the same values
        ref = F.max_pool2d(torch.from_numpy(x), k, s, p, ceil_mode=True).numpy()
        got = C.max_pool2d(nee.from_numpy(x), k, s, p, ceil_mode=True).numpy()
        np.testing.assert_array_equal(got, ref)
        ref = F.avg_pool2d(torch.from_numpy(x), k, s, p, count_include_pad=False).numpy()
        got = C.avg_pool2d(nee.from_numpy(x), k, s, p, count_include_pad=False).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert taken[0] == 6 and taken[1] == 0
    if nthreads > 1:
        plans = [v for k_, v in pool_native._plans.items()
                 if k_[:3] == (shape[0] * shape[1], shape[2], shape[3]) and k_[-1] == nthreads]
        assert plans and all(pl.est == nthreads for pl in plans)      # (the plans split it)


def test_stays_on_numba(taken):
    """Column stride 5 and indices are not the native kernels': pool2d declines (or is not asked), the result
    is still torch's."""
    rng = np.random.default_rng(4)
    x = _x(rng, (1, 2, 12, 31), np.float32)
    ref = F.max_pool2d(torch.from_numpy(x), 3, (2, 5), 1).numpy()
    np.testing.assert_array_equal(C.max_pool2d(nee.from_numpy(x), 3, (2, 5), 1).numpy(), ref)
    assert taken == [0, 1]
    ref, ri = F.max_pool2d(torch.from_numpy(x), 3, 2, 1, return_indices=True)
    got, gi = C.max_pool2d(nee.from_numpy(x), 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(got.numpy(), ref.numpy())
    np.testing.assert_array_equal(gi.numpy(), ri.numpy())
    assert taken == [0, 1]


def test_matches_numba_path():
    """The native kernel and conv.py's Numba kernel give the same values (MODE "0" keeps the old one)."""
    rng = np.random.default_rng(5)
    x = _x(rng, (2, 5, 23, 29), np.float32, nan=0.01)
    outs = []
    for mode in ("1", "0"):
        pool_native.MODE[0] = mode
        try:
            outs.append((C.max_pool2d(nee.from_numpy(x), 3, 2, 1, ceil_mode=True).numpy(),
                         C.avg_pool2d(nee.from_numpy(x), 3, 2, 1, count_include_pad=False).numpy()))
        finally:
            pool_native.MODE[0] = "1"
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-6, atol=1e-7)
