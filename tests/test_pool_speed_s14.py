"""Session 14 (pool speed): kernels/pool_native.py's fixed-window kernels (windows up to 3x3, dilation 1: the
vertical pass unrolled per count of valid rows, the horizontal taps unrolled with each group of sw taps sharing
its loads, stride 2 combined in the in-lane shuffle order and put back in order once, the max as max + NaN fix-up,
the row tail as a whole vector where no output reads past the row, one-register vectors for output rows of at
most half a vector), differential against torch: the light ONNX
models' pools (SqueezeNet's 3x3 s2 max pools, ShuffleNet's padded max / average pools and its 7x7 average), odd
shapes, column strides 1-4, row strides, padding, ceil_mode, count_include_pad both ways, divisor_override, NaN /
-inf / signed zeros, float32 / float64, non-contiguous inputs, 1 and 2 threads, the session's bound step
(bind_pool); the fixed-window kernels against the generic kernel bit for bit (max: NaN payloads included); the
one-thread / two-thread split rule."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import pool_native as P
from neetorch.ops import conv as C

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.skipif(not P.available(), reason="no llvmlite native target")

# the light models' pools: (is_max, (C, H, W), kernel, stride, pad)
MODEL_POOLS = [(True, (64, 111, 111), 3, 2, 0), (True, (128, 55, 55), 3, 2, 0), (True, (256, 27, 27), 3, 2, 0),
               (True, (24, 112, 112), 3, 2, 1), (False, (24, 56, 56), 3, 2, 1), (False, (136, 28, 28), 3, 2, 1),
               (False, (272, 14, 14), 3, 2, 1), (False, (544, 7, 7), 7, 1, 0)]


@pytest.fixture(params=[1, 2])
def nthreads(request):
    old = nee.get_num_threads()
    nee.set_num_threads(request.param)
    yield request.param
    nee.set_num_threads(old)


def _x(rng, shape, dt, special=True):
    x = rng.standard_normal(shape).astype(dt)
    if special:
        u = rng.random(x.shape)
        x[u < 0.01] = np.nan
        x[(u >= 0.01) & (u < 0.03)] = -np.inf
        x[(u >= 0.03) & (u < 0.04)] = -0.0
    return x


def _torch_pool(x, is_max, k, s, p, ceil=False, cip=True, div=None):
    t = torch.from_numpy(np.ascontiguousarray(x))
    if is_max:
        return F.max_pool2d(t, k, s, p, ceil_mode=ceil).numpy()
    return F.avg_pool2d(t, k, s, p, ceil_mode=ceil, count_include_pad=cip, divisor_override=div).numpy()


def _check(got, ref, is_max, dt):
    assert got.shape == ref.shape and got.dtype == ref.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    if is_max:
        np.testing.assert_array_equal(got, ref)
    else:
        tol = {"rtol": 2e-6, "atol": 1e-6} if dt == np.float32 else {"rtol": 1e-13, "atol": 1e-13}
        np.testing.assert_allclose(got, ref, equal_nan=True, **tol)


def test_model_pools_bound_and_eager(nthreads):
    """Every pool of the light models through the session's bound step and through the eager op: torch's values
    (max exactly, NaN where a window holds one, -inf where all of it is -inf)."""
    rng = np.random.default_rng(10)
    for is_max, (c, h, w), k, s, p in MODEL_POOLS:
        x = _x(rng, (1, c, h, w), np.float32)
        ref = _torch_pool(x, is_max, k, s, p, cip=False)
        attrs = {"kernel_size": (k, k), "stride": (s, s), "padding": (p, p), "dilation": (1, 1),
                 "count_include_pad": False, "divisor_override": None}
        out = np.full(ref.shape, 7.0, np.float32)
        f = P.bind_pool(is_max, attrs, out, [x])
        assert f is not None and f([out], [x])
        _check(out, ref, is_max, np.float32)
        t = nee.from_numpy(x)
        got = (C.max_pool2d(t, k, s, p) if is_max else C.avg_pool2d(t, k, s, p, count_include_pad=False)).numpy()
        _check(got, ref, is_max, np.float32)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_fixed_windows_odd_shapes(dt, nthreads):
    """Windows 1-3 x 1-3 at column strides 1-4, row strides 1-3, padding, ceil_mode, count_include_pad both ways,
    divisor_override, on odd planes (row tails of every length, the last plane's masked tail, outputs reading the
    right padding or not)."""
    rng = np.random.default_rng(11 + (dt == np.float64))
    wins = [(3, 3), (2, 2), (1, 3), (3, 2)] if dt == np.float32 else [(3, 3), (2, 2)]
    sws = (1, 2, 3, 4) if dt == np.float32 else (1, 2)
    shapes = [(1, 3, 13, 17), (2, 2, 5, 40), (1, 1, 1, 9), (1, 2, 33, 16), (1, 3, 7, 35), (1, 2, 14, 14),
              (1, 1, 27, 27), (1, 3, 9, 9)]
    checked = 0
    for kh, kw in wins:
        assert P.fixed_window(kh, kw, 1, 1) == (kh, kw)
        for sw in sws:
            for is_max in (True, False):
                for shape in shapes:
                    sh = int(rng.integers(1, 4))
                    ph, pw = int(rng.integers(0, kh // 2 + 1)), int(rng.integers(0, kw // 2 + 1))
                    ceil, cip = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
                    div = int(rng.integers(1, 6)) if (not is_max and rng.random() < 0.2) else None
                    x = _x(rng, shape, dt)
                    try:
                        ref = _torch_pool(x, is_max, (kh, kw), (sh, sw), (ph, pw), ceil, cip, div)
                    except RuntimeError:
                        continue
                    t = nee.from_numpy(x)
                    got = (C.max_pool2d(t, (kh, kw), (sh, sw), (ph, pw), ceil_mode=ceil) if is_max else
                           C.avg_pool2d(t, (kh, kw), (sh, sw), (ph, pw), ceil_mode=ceil, count_include_pad=cip,
                                        divisor_override=div)).numpy()
                    _check(got, ref, is_max, dt)
                    checked += 1
    assert checked > 0.9 * len(wins) * len(sws) * 2 * len(shapes)
    # (outputs rows up to half a vector ran on the one-register kernels)
    assert any(k[0] == np.dtype(dt).char and k[4] == P.vector(np.dtype(dt), True) for k in P._kernels)


def _fresh(monkeypatch, fixed_max):
    monkeypatch.setattr(P, "FIXED_MAX", fixed_max)
    monkeypatch.setattr(P, "_runners", {})
    monkeypatch.setattr(P, "_plans", {})


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_fixed_kernels_match_generic_bits(dt, monkeypatch, nthreads):
    """The fixed-window kernels give the generic kernel's bits: max exactly (which NaN of a window, its payload
    and sign, which zero of a tie), average the same values (NaN where the generic one has NaN)."""
    rng = np.random.default_rng(12)
    ut = np.uint32 if dt == np.float32 else np.uint64
    qnan = 0x7FC00000 if dt == np.float32 else 0x7FF8000000000000
    sign = 1 << (31 if dt == np.float32 else 63)
    cases = [((3, 3), (2, 2), (0, 0), (1, 64, 27, 27)), ((3, 3), (2, 2), (1, 1), (1, 5, 28, 28)),
             ((3, 3), (1, 1), (1, 1), (2, 3, 19, 33)), ((2, 2), (2, 2), (0, 0), (1, 4, 16, 50)),
             ((3, 2), (2, 3), (1, 1), (1, 3, 23, 41)), ((1, 3), (3, 4), (0, 1), (1, 2, 12, 70)),
             ((3, 3), (2, 2), (1, 1), (1, 7, 14, 14)), ((3, 3), (2, 2), (1, 1), (1, 5, 6, 7))]
    for k, s, p, shape in cases:
        x = _x(rng, shape, dt)
        xi = x.view(ut).reshape(-1)
        idx = np.nonzero(rng.random(x.size) < 0.03)[0]
        xi[idx] = (qnan + rng.integers(1, 1 << 20, idx.size)).astype(ut) | np.where(
            rng.random(idx.size) < 0.5, ut(sign), ut(0)).astype(ut)
        for is_max in (True, False):
            oh = (shape[2] + 2 * p[0] - k[0]) // s[0] + 1
            ow = (shape[3] + 2 * p[1] - k[1]) // s[1] + 1
            outs = []
            for fixed_max in (3, 0):
                _fresh(monkeypatch, fixed_max)
                r = np.full((shape[0], shape[1], oh, ow), 7.0, dt)
                assert P.pool2d(x, r, k[0], k[1], s[0], s[1], p[0], p[1], 1, 1, is_max, False, 0)
                outs.append(r)
            if is_max:
                assert outs[0].tobytes() == outs[1].tobytes(), (k, s, p, shape)
            else:
                np.testing.assert_array_equal(outs[0], outs[1])       # (NaN == NaN; payloads may differ)
            assert any((kk[3] == k) for kk in P._kernels if kk[1] == is_max)


def test_non_contiguous_inputs(nthreads):
    rng = np.random.default_rng(13)
    base = _x(rng, (2, 40, 30, 9), np.float32)
    xt = nee.from_numpy(base).permute(0, 3, 1, 2)[:, :, 1:, ::2]        # (2, 9, 29, 20), strided
    xn = base.transpose(0, 3, 1, 2)[:, :, 1:, ::2]
    for is_max in (True, False):
        for k, s, p in [(3, 2, 1), (3, 2, 0), (2, 2, 0), (3, 1, 1)]:
            ref = _torch_pool(xn, is_max, k, s, p, cip=False)
            got = (C.max_pool2d(xt, k, s, p) if is_max else
                   C.avg_pool2d(xt, k, s, p, count_include_pad=False)).numpy()
            _check(got, ref, is_max, np.float32)


def test_all_nan_and_all_inf_windows(nthreads):
    """A window of -inf only gives -inf, a NaN anywhere in a window (first, middle, last tap; edge windows) gives
    NaN, on the model geometries."""
    for c, h, w, k, s, p in [(3, 27, 27, 3, 2, 0), (3, 14, 14, 3, 2, 1), (3, 112, 112, 3, 2, 1)]:
        x = np.full((1, c, h, w), -np.inf, np.float32)
        x[0, 0, 0, 0] = np.nan
        x[0, 1, h - 1, w - 1] = np.nan
        x[0, 1, h // 2, w // 2] = np.nan
        x[0, 2, 3, 5] = 1.0
        ref = _torch_pool(x, True, k, s, p)
        got = C.max_pool2d(nee.from_numpy(x), k, s, p).numpy()
        np.testing.assert_array_equal(got, ref)


def test_split_rule(monkeypatch):
    """Two threads: the large pools are split over the native workers, the small ones stay on the calling thread
    (their hand-off would cost more than it saves); one thread never splits."""
    old = nee.get_num_threads()
    monkeypatch.setattr(P, "_plans", {})
    try:
        for nt in (1, 2):
            nee.set_num_threads(nt)
            for is_max, (c, h, w), k, s, p in MODEL_POOLS[:7]:
                pl = P._plan(c, h, w, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1, k, k, s, s, p, p, 1, 1,
                             is_max, False, 0, np.dtype(np.float32), nt)
                big = (c, h) in ((64, 111), (128, 55), (24, 112))
                small = (c, h) == (24, 56)
                if nt == 1 or small:
                    assert pl.est == 1, (nt, c, h, w)
                elif big:
                    assert pl.est == 2, (nt, c, h, w)
    finally:
        nee.set_num_threads(old)
