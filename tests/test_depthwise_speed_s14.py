"""Session 14: depthwise_native's padded-rows kernel (float32, column stride 1 / 2, column dilation 1) against
torch.nn.functional.conv2d (float64 reference): odd shapes (planes 1-30 wide / high, odd channel counts), row and
column strides 1 / 2, padding 0 / 1 / asymmetric, row dilation, bias or not, relu, NaN / inf inputs and inf
weights, non-contiguous inputs, 1 and 2 threads (calls split over the workers, bands of rows), the same float32
bits as the generic kernel, and the convs it leaves to the generic kernel (column stride 3, column dilation,
float64, rows too wide for its scratch)."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv as K
from neetorch.devices.cpu.kernels import depthwise_native as D
from neetorch.devices.cpu.kernels import pool_native

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.skipif(not pool_native.available(), reason="no llvmlite native target")


@pytest.fixture(autouse=True)
def _torch_one_thread(torch_one_thread):
    pass


@pytest.fixture
def kernels(monkeypatch):
    """Counts of the runs of each kernel: [padded-rows, generic] (runners rebuilt for the test)."""
    n = [0, 0]
    monkeypatch.setattr(D, "_runners", {})
    kp, kg = D.kernel_pad, D.kernel

    def count(i, mk):
        def make(*a, **k):
            f = mk(*a, **k)

            def run(*args):
                n[i] += 1
                return f(*args)
            return run
        return make
    monkeypatch.setattr(D, "kernel_pad", count(0, kp))
    monkeypatch.setattr(D, "kernel", count(1, kg))
    # (the split path looks the builtin up by identity: the wrapped kernels run through the Python pool)
    return n


def _want(x, w, b, s, p, d, relu):
    tx = torch.from_numpy(np.pad(x.astype(np.float64), ((0, 0), (0, 0), p[:2], p[2:])))
    y = F.conv2d(tx, torch.from_numpy(w.astype(np.float64)), None if b is None else torch.from_numpy(
        b.astype(np.float64)), s, 0, d, x.shape[1]).numpy()
    return np.maximum(y, 0) if relu else y


def _got(x, w, b, s, p, d, relu, dt=np.float32):
    C = x.shape[1]
    OH = (x.shape[2] + p[0] + p[1] - d[0] * (w.shape[2] - 1) - 1) // s[0] + 1
    OW = (x.shape[3] + p[2] + p[3] - d[1] * (w.shape[3] - 1) - 1) // s[1] + 1
    out = np.full((x.shape[0], C, OH, OW), np.nan, dt)
    attrs = {"stride": s, "padding": p, "dilation": d, "groups": C}
    K.conv2d_into(out, [x, w] + ([b] if b is not None else []), attrs, None, None, relu)
    return out


def _case(rng, N, C, H, W, k, s, p, d=(1, 1), bias=True, relu=False, dt=np.float32):
    x = rng.standard_normal((N, C, H, W)).astype(dt)
    w = rng.standard_normal((C, 1) + k).astype(dt)
    b = rng.standard_normal(C).astype(dt) if bias else None
    got = _got(x, w, b, s, p, d, relu, dt)
    want = _want(x, w, b, s, p, d, relu)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    return got


def test_odd_shapes_match_torch(nthreads, kernels):
    """Planes 1-30 high / wide (rows under, at and over 8 and 16 outputs), odd channel counts, strides 1 / 2
    (square and not), padding 0 / 1 / asymmetric, bias or not, relu; every one on the padded-rows kernel."""
    rng = np.random.default_rng(0)
    n = 0
    for H, W in [(1, 1), (1, 9), (2, 3), (3, 3), (5, 17), (7, 7), (8, 8), (9, 16), (13, 14), (14, 14), (15, 23),
                 (17, 30), (28, 28), (30, 29), (29, 1)]:
        for s in [(1, 1), (2, 2), (1, 2), (2, 1)]:
            for p in [(1, 1, 1, 1), (0, 0, 0, 0), (0, 1, 2, 0), (2, 1, 1, 2)]:
                OH = (H + p[0] + p[1] - 3) // s[0] + 1
                OW = (W + p[2] + p[3] - 3) // s[1] + 1
                if OH < 1 or OW < 1:
                    continue
                C = (3, 5, 1, 7)[n % 4]
                _case(rng, 1 + (n % 5 == 0), C, H, W, (3, 3), s, p, bias=n % 3 != 0, relu=n % 2 == 1)
                n += 1
    assert n > 150 and kernels[1] == 0 and kernels[0] >= n


@pytest.mark.parametrize("k,s,p,d", [((5, 5), (1, 1), (2, 2, 2, 2), (1, 1)), ((5, 5), (2, 2), (2, 1, 2, 1), (1, 1)),
                                     ((1, 3), (1, 2), (0, 0, 1, 1), (1, 1)), ((3, 1), (2, 1), (1, 1, 0, 0), (1, 1)),
                                     ((7, 7), (1, 1), (3, 3, 3, 3), (1, 1)), ((3, 3), (1, 1), (2, 2, 1, 1), (2, 1)),
                                     ((3, 3), (2, 2), (3, 1, 1, 1), (3, 1)), ((2, 2), (2, 2), (0, 1, 0, 1), (1, 1))])
def test_windows_and_row_dilation(k, s, p, d, nthreads, kernels):
    rng = np.random.default_rng(1)
    for H, W in [(6, 5), (11, 19), (23, 30)]:
        if (H + p[0] + p[1] - d[0] * (k[0] - 1) - 1) < 0 or (W + p[2] + p[3] - d[1] * (k[1] - 1) - 1) < 0:
            continue
        _case(rng, 1, 3, H, W, k, s, p, d, relu=True)
    assert kernels[1] == 0 and kernels[0] > 0


def test_same_bits_as_generic_kernel():
    """Finite inputs: the padded-rows kernel's float32 results are the generic kernel's bit for bit (the same
    (ki, kj) summation order)."""
    rng = np.random.default_rng(2)
    for (H, W), s, p, k, relu in [((14, 14), 1, (1, 1), (3, 3), False), ((28, 28), 2, (1, 1), (3, 3), True),
                                  ((7, 7), 1, (1, 1), (3, 3), True), ((17, 23), 2, (2, 0), (5, 5), False),
                                  ((9, 30), 1, (0, 2), (3, 3), False), ((56, 56), 2, (1, 1), (3, 3), False)]:
        x = rng.standard_normal((1, 9, H, W)).astype(np.float32)
        w = rng.standard_normal((9, 1) + k).astype(np.float32)
        b = rng.standard_normal(9).astype(np.float32)
        OH = (H + 2 * p[0] - k[0]) // s + 1
        OW = (W + 2 * p[1] - k[1]) // s + 1
        outs = []
        for mode in ("1", "0"):
            old = D.PAD[0]
            D.PAD[0] = mode
            try:
                o = np.full((1, 9, OH, OW), np.nan, np.float32)
                assert D.conv2d(x, w, b, o, s, s, p[0], p[1], 1, 1, relu)
                outs.append(o)
            finally:
                D.PAD[0] = old
        np.testing.assert_array_equal(outs[0], outs[1])
        np.testing.assert_allclose(outs[0], _want(x, w, b, (s, s), (p[0], p[0], p[1], p[1]), (1, 1), relu),
                                   rtol=2e-5, atol=2e-5)


def test_nan_inf(kernels):
    """NaN / inf inputs reach only their window's outputs; inf weights give NaN where they meet the zero padding
    (as torch)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, 12, 13)).astype(np.float32)
    x[0, 0, 5, 6] = np.nan
    x[0, 1, 0, 0] = np.inf
    x[0, 2, 11, 12] = -np.inf
    w = rng.standard_normal((3, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    for s in (1, 2):
        for relu in (False, True):
            got = _got(x, w, b, (s, s), (1, 1, 1, 1), (1, 1), relu)
            want = _want(x, w, b, (s, s), (1, 1, 1, 1), (1, 1), relu)
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, equal_nan=True)
            assert np.isnan(got[0, 0]).sum() == np.isnan(want[0, 0]).sum() > 0
    w2 = w.copy()
    w2[1, 0, 0, 1] = np.inf
    x2 = np.abs(rng.standard_normal((1, 3, 12, 13))).astype(np.float32) + 1
    got = _got(x2, w2, b, (1, 1), (1, 1, 1, 1), (1, 1), False)
    want = _want(x2, w2, b, (1, 1), (1, 1, 1, 1), (1, 1), False)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, equal_nan=True)
    assert np.isnan(got[0, 1, 0]).all() and np.isinf(got[0, 1, 1:]).all()
    assert kernels[1] == 0 and kernels[0] > 0


def test_non_contiguous_and_module_path(nthreads):
    """Strided / transposed views through nee.nn.functional.conv2d (made contiguous on the way)."""
    rng = np.random.default_rng(4)
    base = rng.standard_normal((2, 11, 31, 40)).astype(np.float32)
    xs = base[:, ::2, 1::2, ::3]                       # (2, 6, 15, 14), strided
    xt = np.swapaxes(base[:1, :5, :17, :17], 2, 3)     # transposed plane
    for x in (xs, xt):
        C = x.shape[1]
        w = rng.standard_normal((C, 1, 3, 3)).astype(np.float32)
        b = rng.standard_normal(C).astype(np.float32)
        for s in (1, 2):
            got = nee.nn.functional.conv2d(nee.from_numpy(x), nee.from_numpy(w), nee.from_numpy(b), s, 1, 1,
                                           C).numpy()
            want = F.conv2d(torch.from_numpy(np.ascontiguousarray(x)).double(), torch.from_numpy(w).double(),
                            torch.from_numpy(b).double(), s, 1, 1, C).numpy()
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("shape,s", [((1, 272, 14, 14), 1), ((1, 112, 56, 56), 2), ((1, 3, 300, 200), 1),
                                     ((2, 5, 7, 7), 1)])
def test_split_over_threads(shape, s, nthreads, monkeypatch):
    """Calls split over the native workers (planes, or bands of rows of few planes: each band refills its halo
    rows): the same values on every run, equal to one thread's bit for bit."""
    monkeypatch.setattr(D, "_PAR_NS", 0.0)
    monkeypatch.setattr(D, "_runners", {})
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((shape[1], 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    first = None
    for _ in range(3):
        out = _got(x, w, b, (s, s), (1, 1, 1, 1), (1, 1), True)
        if first is None:
            np.testing.assert_allclose(out, _want(x, w, b, (s, s), (1, 1, 1, 1), (1, 1), True), rtol=2e-5,
                                       atol=2e-5)
            first = out
        np.testing.assert_array_equal(out, first)
    old = nee.get_num_threads()
    nee.set_num_threads(1)
    try:
        one = _got(x, w, b, (s, s), (1, 1, 1, 1), (1, 1), True)
    finally:
        nee.set_num_threads(old)
    np.testing.assert_array_equal(first, one)


def test_bands_of_tall_planes(kernels, monkeypatch):
    """Planes whose padded rows do not fit one band: units of bands, each its own zero / halo rows."""
    monkeypatch.setattr(D, "_PAD_BAND_BYTES", 2048)
    rng = np.random.default_rng(6)
    for s, p in [(1, (1, 1, 1, 1)), (2, (1, 1, 1, 1)), (1, (2, 0, 0, 2)), (2, (0, 2, 2, 0))]:
        _case(rng, 1, 3, 61, 45, (3, 3), (s, s), p, relu=True)
        _case(rng, 1, 2, 40, 33, (5, 5), (s, s), (2, 2, 2, 2), d=(2, 1))
    assert kernels[1] == 0 and kernels[0] > 0


def test_left_to_generic_kernel(kernels):
    """Column stride 3, column dilation 2, float64 and rows too wide for the scratch take the generic kernel;
    torch's results either way."""
    rng = np.random.default_rng(7)
    _case(rng, 1, 3, 12, 31, (3, 3), (1, 3), (1, 1, 1, 1))
    _case(rng, 1, 3, 12, 31, (3, 3), (1, 1), (1, 1, 2, 2), d=(1, 2))
    assert kernels == [0, 2]
    x = rng.standard_normal((1, 2, 3, 20000)).astype(np.float32)     # 3 rows of 80 KB: over _PAD_MAX_BYTES
    w = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(_got(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), False),
                               _want(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), False), rtol=2e-5, atol=2e-5)
    assert kernels[0] == 0 and kernels[1] >= 3          # (one run per thread where the call is split)
    n = kernels[1]
    _case(rng, 1, 3, 9, 10, (3, 3), (2, 2), (1, 1, 1, 1), dt=np.float64)
    assert kernels == [0, n + 1]
