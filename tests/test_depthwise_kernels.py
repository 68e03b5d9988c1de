"""The CPU depthwise conv2d kernels (kernels/conv.py: _depthwise_fused, one pass per plane over its padded
stride phases, wide rows written directly; _depthwise, the direct row loop) against
torch.nn.functional.conv2d: strides 1-3 (mixed), padding (asymmetric too), dilation, 3x3 (the fused 9-tap
loop) and other kernels (one pass per tap), channel multipliers, bias or not, batches, non-contiguous
input, NaN, float64 / float16, planes split over threads."""
import warnings

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv as K
from neetorch.ops import conv as C

torch = pytest.importorskip("torch")
F = torch.nn.functional

RNG = np.random.default_rng(11)

# (x shape, multiplier, kernel, stride, padding, dilation)
CASES = [
    ((1, 5, 7, 7), 1, (3, 3), 1, 1, 1),
    ((2, 3, 14, 13), 1, (3, 3), 2, 1, 1),          # odd width at stride 2: the pair copy's remainder
    ((1, 4, 15, 16), 2, (3, 3), 2, 1, 1),          # channel multiplier
    ((1, 3, 11, 12), 3, (3, 3), 1, 0, 1),
    ((3, 2, 17, 19), 1, (5, 5), 2, 2, 1),          # 25 taps: one pass per tap
    ((1, 4, 16, 15), 1, (3, 3), 3, 1, 1),          # stride 3: the generic phase copy
    ((1, 3, 12, 20), 1, (3, 3), (1, 2), (0, 1), 1),
    ((1, 3, 20, 12), 2, (3, 3), (2, 1), (1, 0), 1),
    ((1, 4, 19, 18), 1, (3, 3), 1, 2, 2),          # dilation
    ((1, 4, 19, 18), 1, (3, 3), 2, 2, 2),          # dilation at stride 2: taps in the same phase
    ((1, 3, 9, 10), 1, (1, 3), 1, (0, 1), 1),
    ((1, 2, 4, 5), 1, (3, 3), 1, 1, 1),            # tiny planes
    ((2, 2, 5, 70), 1, (3, 3), 1, 1, 1),           # wide rows: written straight into the output
    ((1, 2, 7, 131), 2, (3, 3), 2, 1, 1),
    ((1, 2, 3, 3), 1, (3, 3), 2, 0, 1),            # one output
]


@pytest.fixture(autouse=True)
def _numba_kernels(monkeypatch):
    # these are conv.py's kernels: the LLVM ones (kernels/depthwise_native.py) have tests/test_conv_direct_depthwise.py
    from neetorch.devices.cpu.kernels import depthwise_native
    monkeypatch.setattr(depthwise_native, "MODE", ["0"])


@pytest.fixture(params=[1, 2])
def nthreads(request, monkeypatch):
    old = threads.get_num_threads()
    threads.set_num_threads(request.param)
    monkeypatch.setattr(K, "_PLANES_PAR_NS", 0)     # every call split over the pool when 2 threads
    yield request.param
    threads.set_num_threads(old)


def _data(xs, mult, k, dt, bias):
    x = RNG.standard_normal(xs).astype(dt)
    w = (RNG.standard_normal((xs[1] * mult, 1) + k) / 3).astype(dt)
    b = RNG.standard_normal(xs[1] * mult).astype(dt) if bias else None
    return x, w, b


def _check(x, w, b, s, p, d, tol):
    t = [None if a is None else torch.from_numpy(np.ascontiguousarray(a)).double() for a in (x, w, b)]
    want = F.conv2d(*t, s, p, d, x.shape[1]).numpy()
    got = C.conv2d(*[None if a is None else nee.from_numpy(a) for a in (x, w, b)], s, p, d, x.shape[1]).numpy()
    assert got.dtype == x.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.fixture
def fused(monkeypatch):
    calls = []
    orig = K._depthwise_fused
    monkeypatch.setattr(K, "_depthwise_fused", lambda *a: calls.append(1) or orig(*a))
    return calls


@pytest.mark.parametrize("dt,tol", [(np.float32, 2e-5), (np.float64, 1e-12)])
def test_depthwise_cases_match_torch(fused, nthreads, dt, tol):
    for xs, mult, k, s, p, d in CASES:
        for bias in (True, False):
            _check(*_data(xs, mult, k, dt, bias), s, p, d, tol)
    assert len(fused) >= 2 * len(CASES)


def test_depthwise_layouts_nan_float16_and_direct_path(fused, monkeypatch):
    # non-contiguous input (transposed, strided channels)
    x, w, b = _data((2, 6, 16, 12), 1, (3, 3), np.float64, True)
    _check(x.transpose(0, 1, 3, 2), w, b, 1, 1, 1, 1e-12)
    xs = RNG.standard_normal((1, 12, 15, 15))[:, ::2]
    assert not xs.flags.c_contiguous
    _check(xs, w, None, 2, 1, 1, 1e-12)
    # NaN / inf propagate to exactly the outputs whose windows hold them (a plane's padding is reused)
    x, w, b = _data((1, 3, 9, 9), 1, (3, 3), np.float32, True)
    x[0, 1, 0, 0] = np.nan
    x[0, 2, 4, 8] = np.inf
    _check(x, w, b, 1, 1, 1, 2e-5)
    _check(x, w, b, 2, 1, 1, 2e-5)
    # asymmetric padding ('same' with an even kernel)
    x, w, _ = _data((1, 4, 10, 11), 2, (2, 2), np.float32, False)
    with warnings.catch_warnings():                  # torch: "may require a zero-padded copy"
        warnings.simplefilter("ignore", UserWarning)
        want = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), None, 1, "same", 1, 4).numpy()
    got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), None, 1, "same", 1, 4).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    # float16: computed in float32, rounded once
    x, w, b = _data((1, 4, 13, 13), 1, (3, 3), np.float16, True)
    got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), nee.from_numpy(b), 2, 1, 1, 4).numpy()
    assert got.dtype == np.float16
    want = F.conv2d(*[torch.from_numpy(a.astype(np.float32)) for a in (x, w, b)], 2, 1, 1, 4)
    np.testing.assert_allclose(got.astype(np.float32), want.numpy(), rtol=3e-3, atol=3e-3)
    n = len(fused)
    assert n >= 6
    # wide dilation over few outputs: the direct row loop (padded-width rows would waste too much)
    direct = []
    orig = K._depthwise
    monkeypatch.setattr(K, "_depthwise", lambda *a: direct.append(1) or orig(*a))
    _check(*_data((1, 2, 9, 83), 4, (3, 3), np.float32, True), 1, 0, (1, 40), 2e-5)
    assert direct and len(fused) == n
