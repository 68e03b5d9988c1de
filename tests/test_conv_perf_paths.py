"""The CPU conv2d "padded rows" path and the separable pooling kernels (kernels/conv.py) against torch.

conv2d over padded rows: the input is zero-padded (and split into stride phases), every (channel, ki, kj)
column row is one contiguous copy, the GEMM runs over padded-width rows and the extra columns are
dropped when each tile is compacted into the output (bias added there).  Checked here: strides 1/2/3
and mixed, dilation, groups, asymmetric pads, bias or not, float32/float64/float16, non-contiguous
inputs, several images, single tiles and bands of rows claimed by 1 or 2 threads; each case asserts
which path ran, so a change of the dispatch rule cannot turn these into tests of another path.
Pooling: the values-only max pooling and the average pooling sum window rows into a row buffer first.
"""
import itertools

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv as K
from neetorch.ops import conv as C

torch = pytest.importorskip("torch")
F = torch.nn.functional

RNG = np.random.default_rng(11)


@pytest.fixture
def spy(monkeypatch):
    """Counts the calls of the padded-rows conv path, forced here for every case (the dispatch rule,
    which keeps small and 1x1 / 3x3-strided convs on im2col, has its own test below)."""
    monkeypatch.setattr(K, "_wide_pays", lambda *a, **k: True)
    monkeypatch.setattr(K, "_WINO_FORCE", ["0"])          # not the Winograd path (3x3 stride 1)
    monkeypatch.setattr(K.conv_direct, "MODE", ["0"])     # nor the direct kernel (tests/test_conv_direct.py)
    calls = []
    orig = K._conv_wide

    def wrapped(*a, **k):
        calls.append(a[-1])
        return orig(*a, **k)
    monkeypatch.setattr(K, "_conv_wide", wrapped)
    return calls


@pytest.fixture(params=[1, 2])
def nthreads(request):
    old = threads.get_num_threads()
    threads.set_num_threads(request.param)
    yield request.param
    threads.set_num_threads(old)


def _data(xs, ws, dt, bias=True):
    x = RNG.standard_normal(xs).astype(dt)
    w = (RNG.standard_normal(ws) / np.sqrt(ws[1] * ws[2] * ws[3])).astype(dt)
    b = RNG.standard_normal(ws[0]).astype(dt) if bias else None
    return x, w, b


def _check(x, w, b, s, p, d, g, tol):
    t = [torch.from_numpy(np.ascontiguousarray(a)) if a is not None else None for a in (x, w, b)]
    want = F.conv2d(*t, s, p, d, g).numpy()
    got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), None if b is None else nee.from_numpy(b), s, p, d, g).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=str((x.shape, w.shape, s, p, d, g)))


# (x shape, w shape, stride, padding, dilation, groups): odd sizes, every stride class of the phase planes
WIDE_CASES = [
    ((1, 5, 17, 23), (6, 5, 3, 3), 1, 1, 1, 1),
    ((2, 6, 9, 8), (4, 3, 3, 3), 1, 1, 1, 2),            # groups, two images
    ((1, 4, 19, 21), (6, 4, 3, 3), 2, 1, 1, 1),          # stride 2: four phase planes
    ((1, 4, 20, 22), (6, 4, 3, 3), 2, 0, 1, 1),          # stride 2, even sizes, no padding (last row unused)
    ((1, 3, 31, 29), (8, 3, 7, 7), 2, 3, 1, 1),          # stem-like 7x7 stride 2
    ((1, 4, 23, 25), (4, 4, 3, 3), 3, 2, 1, 1),          # stride 3
    ((1, 4, 17, 19), (6, 4, 3, 2), (2, 1), (1, 0), 1, 1),  # mixed strides, non-square kernel
    ((1, 4, 21, 21), (6, 4, 3, 3), 2, 2, 2, 1),          # dilation 2 at stride 2: only the even phases
    ((1, 4, 18, 18), (6, 4, 3, 3), 1, 2, 2, 1),          # dilation, stride 1
    ((1, 4, 12, 14), (6, 4, 2, 2), 1, 1, 1, 1),          # even kernel
]


@pytest.mark.parametrize("dt,tol", [(np.float32, 1e-4), (np.float64, 1e-10)])
def test_conv2d_padded_rows_matches_torch(spy, nthreads, dt, tol):
    for xs, ws, s, p, d, g in WIDE_CASES:
        for bias in (True, False):
            _check(*_data(xs, ws, dt, bias), s, p, d, g, tol)
    assert len(spy) == 2 * len(WIDE_CASES)


@pytest.mark.parametrize("dt,tol", [(np.float32, 1e-4), (np.float64, 1e-10)])
def test_conv2d_strided_1x1_gemm_on_subsampled_input(spy, nthreads, dt, tol):
    # 1x1 at stride > 1: the subsampled input (one strided copy) straight into the 1x1 GEMMs
    for xs, ws, s, g in [((1, 8, 16, 16), (8, 8, 1, 1), 2, 1), ((2, 8, 15, 17), (12, 4, 1, 1), (2, 3), 2),
                         ((3, 6, 9, 9), (10, 6, 1, 1), 3, 1)]:
        _check(*_data(xs, ws, dt), s, 0, 1, g, tol)
    x = RNG.standard_normal((1, 16, 14, 12)).astype(dt).transpose(0, 1, 3, 2)
    _check(x, _data((1, 1, 1, 1), (8, 16, 1, 1), dt)[1], None, 2, 0, 1, 1, tol)
    assert not spy


def test_conv2d_padded_rows_tiles_and_threads(spy, nthreads, monkeypatch):
    # large enough for several bands of output rows (the threads claim whole tiles), then images of a batch
    _check(*_data((1, 16, 96, 90), (24, 16, 3, 3), np.float32), 1, 1, 1, 1, 1e-4)
    _check(*_data((1, 8, 120, 118), (16, 8, 5, 5), np.float32), 2, 2, 1, 1, 1e-4)
    _check(*_data((3, 8, 30, 30), (16, 8, 3, 3), np.float32), 1, 1, 1, 1, 1e-4)
    assert len(spy) == 3
    # a batch over the padding budget goes a few images at a time (2 per chunk here, the last alone)
    monkeypatch.setattr(K, "_PAD_BUDGET", 2 * 8 * 22 * 22 * 4)
    _check(*_data((5, 8, 20, 20), (16, 8, 3, 3), np.float32), 1, 1, 1, 1, 1e-4)
    assert len(spy) == 3 + 1 + 3


def test_conv2d_padded_rows_layouts(spy):
    # non-contiguous inputs (transposed, strided, reversed) and float16 (computed in float32)
    base = RNG.standard_normal((2, 10, 22, 18))
    w = RNG.standard_normal((12, 10, 3, 3)) / 10
    for x in (base.transpose(0, 1, 3, 2), base[:, ::2, 1:, ::2], base[::-1, :, ::-1]):
        assert not x.flags.c_contiguous
        _check(x, w[:, :x.shape[1]], None, 1, 1, 1, 1, 1e-10)
        _check(x, w[:, :x.shape[1]], None, 2, 1, 1, 1, 1e-10)
    x, w, b = _data((1, 6, 15, 17), (8, 6, 3, 3), np.float16)
    got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), nee.from_numpy(b), 1, 1).numpy()
    assert got.dtype == np.float16
    want = F.conv2d(*(torch.from_numpy(a.astype(np.float32)) for a in (x, w, b)), 1, 1)
    np.testing.assert_allclose(got.astype(np.float32), want.numpy(), rtol=1e-2, atol=1e-2)
    assert len(spy) == 7


@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_conv2d_padded_rows_asymmetric_pads(spy):
    # padding='same' with an even kernel pads (0, 1); the kernel's ONNX-style (top, bottom, left, right) pads
    x, w, b = _data((1, 4, 13, 16), (6, 4, 4, 2), np.float64)
    _check(x, w, b, 1, "same", 1, 1, 1e-10)
    for pads in ((0, 2, 1, 0), (2, 0, 0, 1), (1, 1, 0, 2)):
        pt, pb, pl, pr = pads
        for s in (1, 2):
            xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
            want = F.conv2d(torch.from_numpy(xp), torch.from_numpy(w), torch.from_numpy(b), s).numpy()
            out = np.empty(want.shape, np.float64)
            K.conv2d_kernel(None, [out], [x, w, b], {"stride": (s, s), "padding": pads, "dilation": (1, 1),
                                                    "groups": 1})
            np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-10, err_msg=str((pads, s)))
    assert len(spy) == 7


def test_conv2d_wide_rule():
    # (OH, OW, KH, KW, sh, sw, dh, dw, Og, K): the padded-rows path where its extra columns and the phase
    # split cost less than the im2col copies they save
    assert K._wide_pays(56, 56, 3, 3, 1, 1, 1, 1, 64, 576)
    assert K._wide_pays(14, 14, 3, 3, 1, 1, 1, 1, 32, 1152)
    assert K._wide_pays(7, 7, 3, 3, 1, 1, 1, 1, 32, 1152)
    assert K._wide_pays(112, 112, 7, 7, 2, 2, 1, 1, 64, 147)           # 7x7 stride-2 stem
    assert not K._wide_pays(14, 14, 3, 3, 1, 1, 1, 1, 256, 2304)     # extra columns of a wide GEMM
    assert not K._wide_pays(7, 7, 3, 3, 1, 1, 1, 1, 512, 4608)
    assert not K._wide_pays(28, 28, 3, 3, 2, 2, 1, 1, 128, 1152)     # 3x3 stride 2: the phase split
    assert not K._wide_pays(28, 28, 1, 1, 2, 2, 1, 1, 512, 256)      # 1x1: im2col is one strided copy
    assert not K._wide_pays(111, 111, 3, 3, 2, 2, 1, 1, 64, 27)      # short GEMM (3-channel stem)
    assert not K._wide_pays(0, 5, 3, 3, 1, 1, 1, 1, 8, 72)


# ---------------------------------------------------------------- separable pooling
POOL_CASES = [((3, 3), 2, 0, 1), ((3, 3), 2, 1, 1), ((3, 3), 1, 1, 1), ((2, 3), (1, 2), (1, 1), 1),
              ((3, 3), 2, 1, 2), ((5, 4), 3, 2, 1), ((1, 1), 2, 0, 1), ((7, 7), 1, 3, 1)]


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_pool_rows_match_torch(dt):
    n = 0
    for shape, (k, s, p, d), ceil in itertools.product([(1, 3, 27, 31), (2, 2, 9, 8), (1, 2, 112, 111)],
                                                       POOL_CASES, (False, True)):
        x = RNG.standard_normal(shape).astype(dt)
        x.reshape(-1)[RNG.random(x.size) < 0.01] = np.nan
        x.reshape(-1)[RNG.random(x.size) < 0.01] = np.inf
        tx = torch.from_numpy(x)
        got = C.max_pool2d(nee.from_numpy(x), k, s, p, d, ceil_mode=ceil).numpy()
        np.testing.assert_array_equal(got, F.max_pool2d(tx, k, s, p, d, ceil_mode=ceil).numpy())
        if d == 1:
            xf = np.nan_to_num(x, nan=0.0, posinf=1.0)
            for cip in (False, True):
                got = C.avg_pool2d(nee.from_numpy(xf), k, s, p, ceil, cip).numpy()
                want = F.avg_pool2d(torch.from_numpy(xf), k, s, p, ceil, cip).numpy()
                np.testing.assert_allclose(got, want, rtol=1e-5 if dt == np.float32 else 1e-12, atol=1e-6)
        n += 1
    assert n == 48


# ---------------------------------------------------------------- depthwise over padded planes
DEPTHWISE_CASES = [  # (x shape, channel multiplier, kernel, stride, padding, dilation)
    ((1, 6, 14, 15), 1, (3, 3), 1, 1, 1),
    ((2, 4, 17, 13), 2, (3, 3), 2, 1, 1),        # multiplier 2, stride 2 (phase planes)
    ((1, 3, 20, 20), 1, (5, 3), (1, 2), (2, 1), 1),
    ((1, 5, 19, 18), 1, (3, 3), 1, 2, 2),        # dilation
    ((1, 4, 23, 23), 3, (3, 3), 3, 0, 1),        # stride 3, no padding
]


@pytest.mark.parametrize("dt,tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_depthwise_padded_planes_match_torch(monkeypatch, nthreads, dt, tol):
    from neetorch.devices.cpu.kernels import depthwise_native
    monkeypatch.setattr(depthwise_native, "MODE", ["0"])   # conv.py's kernel, not the LLVM one
    calls = []
    orig = K._depthwise_padded
    monkeypatch.setattr(K, "_depthwise_padded", lambda *a: calls.append(1) or orig(*a))
    for xs, mult, k, s, p, d in DEPTHWISE_CASES:
        C_ = xs[1]
        for bias in (True, False):
            x, w, b = _data(xs, (C_ * mult, 1) + k, dt, bias)
            _check(x, w, b, s, p, d, C_, tol)
    assert len(calls) == 2 * len(DEPTHWISE_CASES)
    # a non-contiguous input
    x = RNG.standard_normal((1, 8, 16, 12)).astype(dt).transpose(0, 1, 3, 2)
    _check(x, _data((1, 1, 1, 1), (8, 1, 3, 3), dt)[1], None, 1, 1, 1, 8, tol)


# ---------------------------------------------------------------- Winograd F(m x m, 3 x 3)
@pytest.fixture
def wino(monkeypatch):
    """Counts the Winograd path's calls (their tile size m); the rule is replaced per test."""
    monkeypatch.setattr(K.conv_direct, "MODE", ["0"])     # not the direct kernel (tests/test_conv_direct.py)
    calls = []
    orig = K._conv_winograd

    def wrapped(x, w, b, res, m, pt, pl, relu=False):
        calls.append(m)
        return orig(x, w, b, res, m, pt, pl, relu)
    monkeypatch.setattr(K, "_conv_winograd", wrapped)
    return calls


def _check_scaled(x, w, b, s, p, tol):
    """Against torch in float64, to a tolerance relative to the outputs' scale (Winograd's error is one of
    the transformed sums, not of each output: outputs near zero get the same absolute error)."""
    t = [None if a is None else torch.from_numpy(np.ascontiguousarray(a)).double() for a in (x, w, b)]
    want = F.conv2d(*t, s, p).numpy()
    got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), None if b is None else nee.from_numpy(b), s, p).numpy()
    assert got.dtype == x.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * float(np.abs(want).max()),
                               err_msg=str((x.shape, w.shape, p)))


WINO_CASES = [  # (x shape, output channels, padding): odd sizes (clipped last tiles), several images, no padding
    ((1, 5, 17, 23), 6, 1), ((2, 3, 9, 8), 4, 1), ((3, 7, 7, 7), 5, 1), ((1, 4, 3, 3), 2, 2), ((1, 6, 12, 10), 3, 0),
    ((1, 8, 5, 14), 9, 1), ((2, 16, 14, 14), 24, 1),
]


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("dt,tol", [(np.float32, None), (np.float64, 1e-12)])
def test_conv2d_winograd_matches_torch(wino, monkeypatch, nthreads, m, dt, tol):
    monkeypatch.setattr(K, "_WINO_FORCE", [str(m)])
    # float32: F(2) keeps the direct sum's accuracy, F(4) (points 0, +-1, +-2) loses a few bits
    tol = tol or {2: 2e-6, 4: 2e-5}[m]
    for xs, o, p in WINO_CASES:
        for bias in (True, False):
            x, w, b = _data(xs, (o, xs[1], 3, 3), dt, bias)
            _check_scaled(x, w, b, 1, p, tol)
    assert wino == [m] * (2 * len(WINO_CASES))


@pytest.mark.parametrize("m", [2, 4])
def test_conv2d_winograd_bands(wino, monkeypatch, nthreads, m):
    # images whose transformed tiles exceed the budget go in bands of tile rows (here 1-3 per band)
    from neetorch.devices.cpu.kernels import winograd as W
    monkeypatch.setattr(K, "_WINO_FORCE", [str(m)])
    monkeypatch.setattr(K, "_WINO_BANDS", [True])
    first_rows = []
    orig = W.input_tiles
    monkeypatch.setattr(W, "input_tiles", lambda *a: first_rows.append(a[10]) or orig(*a))
    for budget in (1, 3 * 36 * 6 * 8 * 8):
        monkeypatch.setattr(K, "_WINO_BAND_BYTES", budget)
        for xs, o, p in [((2, 6, 23, 29), 5, 1), ((1, 3, 17, 9), 4, 0), ((1, 4, 30, 26), 7, 1)]:
            for bias in (True, False):
                _check_scaled(*_data(xs, (o, xs[1], 3, 3), np.float64, bias), 1, p, 1e-12)
    assert wino == [m] * 12
    assert max(first_rows) > 0 and len(first_rows) > 12           # bands of tile rows ran


@pytest.mark.parametrize("m", [2, 4])
def test_conv2d_winograd_pads_layouts_half(wino, monkeypatch, m):
    monkeypatch.setattr(K, "_WINO_FORCE", [str(m)])
    # asymmetric ONNX-style (top, bottom, left, right) pads
    x, w, b = _data((1, 4, 13, 16), (6, 4, 3, 3), np.float64)
    for pads in ((0, 2, 1, 0), (2, 0, 0, 1), (1, 1, 0, 2), (0, 0, 2, 2)):
        pt, pb, pl, pr = pads
        xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
        want = F.conv2d(torch.from_numpy(xp), torch.from_numpy(w), torch.from_numpy(b)).numpy()
        out = np.empty(want.shape, np.float64)
        K.conv2d_kernel(None, [out], [x, w, b], {"stride": (1, 1), "padding": pads, "dilation": (1, 1),
                                                "groups": 1})
        np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12, err_msg=str(pads))
    # non-contiguous inputs and weights
    base = RNG.standard_normal((2, 10, 22, 18))
    wt = RNG.standard_normal((3, 3, 10, 12)).transpose(3, 2, 0, 1) / 10
    for xx in (base.transpose(0, 1, 3, 2), base[:, ::2, 1:, ::2], base[::-1, :, ::-1]):
        _check_scaled(xx, wt[:, :xx.shape[1]], None, 1, 1, 1e-12)
    # float16: computed in float32, rounded once
    x, w, b = _data((1, 6, 15, 17), (8, 6, 3, 3), np.float16)
    got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), nee.from_numpy(b), 1, 1).numpy()
    assert got.dtype == np.float16
    want = F.conv2d(*(torch.from_numpy(a.astype(np.float32)) for a in (x, w, b)), 1, 1)
    np.testing.assert_allclose(got.astype(np.float32), want.numpy(), rtol=1e-2, atol=1e-2)
    assert wino == [m] * 8


def test_conv2d_winograd_weight_cache(wino, monkeypatch):
    # the transformed weights are cached per weight buffer and recomputed when its contents change in place
    from neetorch.devices.cpu.kernels import winograd as W
    monkeypatch.setattr(K, "_WINO_FORCE", ["4"])
    W.clear_cache()
    x, w, b = _data((1, 8, 12, 12), (8, 8, 3, 3), np.float64)
    _check_scaled(x, w, b, 1, 1, 1e-12)
    assert len(W._cache) == 1
    w[3, 2, 1, 0] += 1.0                       # in place: same buffer, new contents
    w[7] *= -2
    _check_scaled(x, w, b, 1, 1, 1e-12)
    assert len(W._cache) == 1
    u = W.weights(w, 4)
    np.testing.assert_allclose(u, W.transform_weights(w, 4), rtol=0, atol=0)
    assert W.weights(w, 4) is u                # unchanged: the cached U
    # weights changed on two calls in a row (being trained) go to the GEMM paths for good
    w[0, 0, 0, 0] += 1.0
    _check_scaled(x, w, b, 1, 1, 1e-12)        # changed once: transformed again
    w[0, 0, 0, 0] += 1.0
    _check_scaled(x, w, b, 1, 1, 1e-12)        # twice: direct
    assert W.weights(w, 4) is None
    W.clear_cache()
    # least recently used entries go past the byte budget
    monkeypatch.setattr(W, "_CACHE_BYTES", 3 * (w.nbytes + u.nbytes))
    ws = [w.copy() for _ in range(5)]
    for ww in ws:
        W.weights(ww, 4)
    assert len(W._cache) == 3 and W._cache_bytes[0] == 3 * (w.nbytes + u.nbytes)
    # an entry goes when the memory of its weights is freed
    del ws[-1], ww
    assert len(W._cache) == 2 and W._cache_bytes[0] == 2 * (w.nbytes + u.nbytes)
    W.clear_cache()
    assert wino == [4, 4, 4]


def test_winograd_transforms_are_correlation():
    # A^T [(G g G^T) * (B^T d B)] A is the (m x m) valid correlation of the (m + 2)^2 tile d with g
    from neetorch.devices.cpu.kernels import winograd as W
    for m in (2, 4):
        d = RNG.standard_normal((m + 2, m + 2))
        g = RNG.standard_normal((3, 3))
        got = W.AT[m] @ ((W.G[m] @ g @ W.G[m].T) * (W.BT[m] @ d @ W.BT[m].T)) @ W.AT[m].T
        want = np.array([[np.sum(d[i:i + 3, j:j + 3] * g) for j in range(m)] for i in range(m)])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_conv2d_winograd_rule():
    # only 3x3 stride-1 undilated ungrouped float32/float64 convolutions
    f32 = np.dtype(np.float32)
    ok = (1, 64, 56, 56, 192, 1, 3, 3, 1, 1, 1, 1, 56, 56, f32)
    assert K._winograd_m(*ok) == 4
    for i, v in ((5, 2), (6, 5), (8, 2), (10, 2)):              # groups, a 5x3 kernel, stride 2, dilation 2
        args = list(ok)
        args[i] = v
        if i == 6:
            args[7] = 3
        assert K._winograd_m(*args) == 0, i
    assert K._winograd_m(*ok[:-1], np.dtype(np.int32)) == 0
    # the cost rule (N, C, O, OH, OW): F(4) on large planes, Winograd on 12x12-14x14 with a few hundred
    # channels (F(2) and F(4) within ~6% of each other there), the direct GEMM where the transformed weights
    # (16/9 or 4x the weights, read from memory) cost more than the multiply-adds they save (7x7 planes) and
    # for a few channels
    assert K._winograd_rule(1, 64, 192, 56, 56) == 4
    assert K._winograd_rule(1, 128, 128, 28, 28) == 4
    assert K._winograd_rule(1, 192, 256, 14, 14) in (2, 4)
    assert K._winograd_rule(1, 512, 512, 12, 12) == 4
    assert K._winograd_rule(1, 512, 512, 7, 7) == 0
    assert K._winograd_rule(1, 192, 320, 7, 7) == 0
    assert K._winograd_rule(1, 3, 64, 224, 224) == 0
    assert K._winograd_rule(8, 512, 512, 7, 7) == 4            # a batch: the reads of U amortized over its tiles


def test_im2col_gathered_equals_im2col():
    # small planes: the columns gathered from the zero-padded input are im2col's, element for element
    for (P, H, W), (KH, KW), (sh, sw), (ph, pw), (dh, dw) in [
            ((3, 7, 7), (3, 3), (1, 1), (1, 1), (1, 1)), ((2, 14, 13), (3, 3), (2, 2), (1, 1), (1, 1)),
            ((2, 9, 11), (3, 2), (2, 1), (1, 2), (2, 1)), ((1, 5, 6), (5, 5), (1, 1), (2, 2), (1, 1)),
            ((4, 8, 8), (1, 3), (3, 2), (0, 1), (1, 2)), ((1, 3, 4), (3, 3), (1, 1), (2, 0), (1, 1))]:
        x = RNG.standard_normal((P, H, W)).astype(np.float32)
        OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
        OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
        want = K.im2col(x, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW).reshape(-1)
        got = np.full(want.size, np.nan, np.float32)
        K._im2col_gathered(x, got, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW)
        np.testing.assert_array_equal(got, want)
