"""The LLVM IR depthwise conv kernels (kernels/depthwise_native.py, reached through conv.py's conv2d_into) against
torch.nn.functional.conv2d: float32 / float64, windows 1x3 to 7x7, column strides 1-4, row strides, padding
(asymmetric too), dilation, bias or not, relu and a residual (the JIT epilogue chain), NaN, batches, 1 / 2 / 3
threads, calls split over the native workers, and the convs that must stay on the other paths (channel
multipliers, column stride 5)."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv as K
from neetorch.devices.cpu.kernels import depthwise_native, pool_native

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.skipif(not pool_native.available(), reason="no llvmlite native target")


@pytest.fixture
def taken(monkeypatch):
    n = [0, 0]
    orig = depthwise_native.conv2d

    def counting(*a, **k):
        r = orig(*a, **k)
        n[0 if r else 1] += 1
        return r
    monkeypatch.setattr(depthwise_native, "conv2d", counting)
    return n


@pytest.fixture(params=[1, 2, 3])
def nthreads(request):
    old = nee.get_num_threads()
    nee.set_num_threads(request.param)
    yield request.param
    nee.set_num_threads(old)


# (x shape, kernel, stride, padding (t, b, l, r), dilation)
CASES = [((1, 5, 14, 14), (3, 3), 1, (1, 1, 1, 1), 1),
         ((2, 3, 28, 29), (3, 3), 2, (1, 1, 1, 1), 1),
         ((1, 4, 7, 7), (3, 3), 1, (1, 1, 1, 1), 1),
         ((1, 3, 17, 40), (5, 5), 1, (2, 2, 2, 2), 1),
         ((1, 3, 17, 40), (5, 5), 2, (2, 2, 2, 2), 1),
         ((1, 2, 19, 37), (3, 3), (1, 3), (1, 1, 1, 1), 1),
         ((1, 2, 23, 70), (3, 3), (2, 4), (0, 1, 2, 0), 1),
         ((1, 3, 19, 18), (3, 3), 1, (2, 2, 2, 2), 2),
         ((1, 3, 19, 35), (3, 3), 2, (2, 2, 2, 2), (2, 3)),
         ((1, 2, 9, 10), (1, 3), 1, (0, 0, 1, 1), 1),
         ((1, 2, 12, 9), (3, 1), (2, 1), (1, 1, 0, 0), 1),
         ((1, 2, 4, 5), (3, 3), 1, (1, 1, 1, 1), 1),
         ((1, 2, 3, 3), (3, 3), 2, (0, 0, 0, 0), 1),
         ((1, 2, 15, 15), (7, 7), 1, (3, 3, 3, 3), 1),
         ((1, 2, 8, 33), (2, 2), 2, (0, 1, 0, 1), 1)]


def _run(x, w, b, s, p, d, relu=False, e=None, shift=None):
    s = (s, s) if isinstance(s, int) else s
    d = (d, d) if isinstance(d, int) else d
    C = x.shape[1]
    tx = torch.from_numpy(np.pad(x, ((0, 0), (0, 0), p[:2], p[2:]))).double()
    want = F.conv2d(tx, torch.from_numpy(w).double(), None if b is None else torch.from_numpy(b).double(), s, 0, d,
                    C).numpy()
    if shift is not None:
        want = want + shift[None, :, None, None]
    if e is not None:
        want = want + e
    if relu:
        want = np.maximum(want, 0)
    out = np.full(want.shape, np.nan, x.dtype)
    attrs = {"stride": s, "padding": p, "dilation": d, "groups": C}
    K.conv2d_into(out, [x, w] + ([b] if b is not None else []), attrs, shift, e, relu)
    return out, want


@pytest.mark.parametrize("dt,tol", [(np.float32, 2e-5), (np.float64, 1e-12)])
def test_cases_match_torch(dt, tol, nthreads, taken):
    rng = np.random.default_rng(1)
    for i, (xs, k, s, p, d) in enumerate(CASES):
        x = rng.standard_normal(xs).astype(dt)
        w = (rng.standard_normal((xs[1], 1) + k) / 3).astype(dt)
        b = rng.standard_normal(xs[1]).astype(dt) if i % 2 else None
        out, want = _run(x, w, b, s, p, d, relu=i % 3 == 0)
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol, err_msg=str((xs, k, s, p, d)))
    assert taken == [len(CASES), 0]


def test_epilogue_and_nan(taken):
    """The JIT chain (bias shift, residual, relu) and torch's relu: NaN kept, negatives to 0."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 13, 21)).astype(np.float32)
    x[0, 1, 5, 7] = np.nan
    w = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    shift = rng.standard_normal(4).astype(np.float32)
    e = rng.standard_normal((2, 4, 13, 21)).astype(np.float32)
    for relu in (False, True):
        for ee in (None, e):
            out, want = _run(x, w, b, 1, (1, 1, 1, 1), 1, relu, ee, shift)
            np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5, equal_nan=True)
            assert np.isnan(out[0, 1, 4:7, 6:9]).all()
    assert taken == [4, 0]


@pytest.mark.parametrize("shape,s", [((1, 272, 14, 14), 1), ((1, 64, 56, 56), 2), ((1, 2, 300, 200), 1)])
def test_split_over_threads(shape, s, nthreads, taken, monkeypatch):
    """Calls large enough for the native workers (planes, or row bands of few planes): the same values on every
    run whatever the claims' order."""
    from neetorch.devices.cpu.kernels import conv_direct
    split = []
    orig = conv_direct._native_parallel
    monkeypatch.setattr(conv_direct, "_native_parallel", lambda f, n, t: split.append(t) or orig(f, n, t))
    monkeypatch.setattr(depthwise_native, "_PAR_NS", 20000.0)
    monkeypatch.setattr(depthwise_native, "_runners", {})     # (runners built with this threshold: dropped after)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((shape[1], 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    first = None
    for _ in range(3):
        out, want = _run(x, w, b, s, (1, 1, 1, 1), 1, True)
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
        if first is None:
            first = out
        np.testing.assert_array_equal(out, first)
    assert taken == [3, 0] and split == ([nthreads] if nthreads > 1 else [])


def test_other_paths(taken):
    """Channel multipliers and column stride 5 are not this kernel's (it is not asked, or declines); the results
    are torch's either way."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 3, 12, 31)).astype(np.float32)
    w2 = rng.standard_normal((6, 1, 3, 3)).astype(np.float32)
    want = F.conv2d(torch.from_numpy(x), torch.from_numpy(w2), None, 1, 1, 1, 3).numpy()
    got = nee.nn.functional.conv2d(nee.from_numpy(x), nee.from_numpy(w2), None, 1, 1, 1, 3).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert taken == [0, 0]
    w = rng.standard_normal((3, 1, 3, 3)).astype(np.float32)
    want = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), None, (1, 5), 1, 1, 3).numpy()
    got = nee.nn.functional.conv2d(nee.from_numpy(x), nee.from_numpy(w), None, (1, 5), 1, 1, 3).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert taken == [0, 1]


def test_matches_other_path():
    """The native kernel and the paths it replaced (MODE "0") agree."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 24, 23, 29)).astype(np.float32)
    w = rng.standard_normal((24, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    outs = []
    for mode in ("1", "0"):
        depthwise_native.MODE[0] = mode
        try:
            outs.append(_run(x, w, b, 2, (1, 1, 1, 1), 1, True)[0])
        finally:
            depthwise_native.MODE[0] = "1"
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)
