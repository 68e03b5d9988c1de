"""The CPU pooling kernels (kernels/conv.py: _pool_planes, whole padded phase planes, rows then columns;
_pool_global, whole-plane windows; _maxpool_idx_planes, with indices) against torch.nn.functional: odd sizes,
padding, ceil_mode, count_include_pad, divisor_override, strides 1/2/3, dilation, ties and NaNs (exact
indices), -inf, batches, non-contiguous inputs, planes split over threads, float64 / float16."""
import itertools

import numpy as np
import pytest

import neetorch as nee
from neetorch.ops import conv as C

torch = pytest.importorskip("torch")
F = torch.nn.functional

RNG = np.random.default_rng(7)

# (kernel, stride, padding, dilation): every tap position class (border left/right, interior) is hit
MAX_CASES = [((3, 3), 1, 1, 1), ((3, 3), 2, 0, 1), ((3, 3), 2, 1, 1), ((2, 3), (1, 2), (1, 1), 1),
             ((3, 2), (2, 1), (1, 0), (1, 2)), ((3, 3), 3, 1, 2), ((1, 1), 2, 0, 1), ((5, 5), 1, 2, 1),
             ((4, 4), 2, 2, 1), ((3, 3), 1, 0, 3)]
AVG_CASES = [((3, 3), 1, 1), ((3, 3), 2, 0), ((3, 3), 2, 1), ((2, 3), (1, 2), (1, 1)), ((3, 2), (2, 1), (1, 0)),
             ((7, 7), 1, 0), ((5, 4), 3, 2), ((1, 1), 2, 0)]
SHAPES = [(2, 3, 13, 17), (1, 2, 5, 4), (1, 1, 1, 9)]


def _ties(shape, dtype=np.float32):
    """Small integers (many ties inside a window: the first maximum must win) with a few NaNs."""
    x = RNG.integers(-3, 4, shape).astype(dtype)
    x.reshape(-1)[RNG.random(x.size) < 0.02] = np.nan
    return x


def _valid(H, W, k, s, p, d):
    k, s, p, d = (v if isinstance(v, tuple) else (v, v) for v in (k, s, p, d))
    return all(p[i] * 2 <= k[i] and (H, W)[i] + 2 * p[i] >= d[i] * (k[i] - 1) + 1 for i in range(2))


def _check_max(x, k, s, p, d, ceil):
    got, gi = C.max_pool2d(nee.from_numpy(x), k, s, p, d, ceil_mode=ceil, return_indices=True)
    want, wi = F.max_pool2d(torch.from_numpy(np.ascontiguousarray(x)), k, s, p, d, ceil_mode=ceil,
                            return_indices=True)
    np.testing.assert_array_equal(got.numpy(), want.numpy())          # NaN == NaN here
    np.testing.assert_array_equal(gi.numpy(), wi.numpy())
    np.testing.assert_array_equal(C.max_pool2d(nee.from_numpy(x), k, s, p, d, ceil_mode=ceil).numpy(), want.numpy())


def test_max_pool_values_and_indices():
    n = 0
    for shape, (k, s, p, d), ceil in itertools.product(SHAPES, MAX_CASES, (False, True)):
        if not _valid(shape[2], shape[3], k, s, p, d):
            continue
        _check_max(_ties(shape), k, s, p, d, ceil)
        n += 1
    assert n > 30


def test_avg_pool_modes():
    n = 0
    for shape, (k, s, p), ceil, cip, div in itertools.product(SHAPES, AVG_CASES, (False, True), (False, True),
                                                            (None, 5)):
        if not _valid(shape[2], shape[3], k, s, p, 1):
            continue
        x = RNG.standard_normal(shape).astype(np.float32)
        got = C.avg_pool2d(nee.from_numpy(x), k, s, p, ceil, cip, div).numpy()
        want = F.avg_pool2d(torch.from_numpy(x), k, s, p, ceil, cip, div).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        n += 1
    assert n > 60


def test_non_contiguous_and_float64():
    base = _ties((2, 4, 19, 15), np.float64)
    for x in (base.transpose(0, 1, 3, 2), base[:, ::2, 1:, ::2], base[::-1, :, ::-1]):
        assert not x.flags.c_contiguous
        _check_max(x, 3, 2, 1, 1, True)
        _check_max(x, (3, 2), 1, (1, 0), 1, False)
        got = C.avg_pool2d(nee.from_numpy(x), 3, 2, 1, True, False).numpy()
        want = F.avg_pool2d(torch.from_numpy(np.ascontiguousarray(x)), 3, 2, 1, True, False).numpy()
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_threaded_planes_and_float16():
    # larger planes (the ones below: every call split over the pool), a NaN, float16 in and out
    x = RNG.standard_normal((2, 24, 64, 64)).astype(np.float32)
    x[0, 5, 10, 11] = np.nan
    _check_max(x, 3, 2, 1, 1, False)
    _check_max(x, 3, 1, 1, 1, False)
    for s in (1, 2):
        got = C.avg_pool2d(nee.from_numpy(x), 3, s, 1, False, False).numpy()
        want = F.avg_pool2d(torch.from_numpy(x), 3, s, 1, False, False).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    h = x[:, :3, :17, :21].astype(np.float16)
    got = C.max_pool2d(nee.from_numpy(h), 3, 2, 1).numpy()
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, F.max_pool2d(torch.from_numpy(h.astype(np.float32)), 3, 2, 1).numpy()
                                  .astype(np.float16))
    got = C.avg_pool2d(nee.from_numpy(h), 3, 1, 1).numpy()
    assert got.dtype == np.float16
    want = F.avg_pool2d(torch.from_numpy(h.astype(np.float32)), 3, 1, 1).numpy()
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=2e-3)



@pytest.mark.parametrize("nthreads", [1, 2])
def test_planes_split_batches_and_global_windows(monkeypatch, nthreads):
    """Every call split over the pool (small ones too), batches of images, -inf and NaN inputs, and windows
    covering whole planes (global pooling: one reduction per plane, _pool_global)."""
    from neetorch.devices.cpu import threads
    from neetorch.devices.cpu.kernels import conv as K
    monkeypatch.setattr(K, "_PLANES_PAR_NS", 0)
    glob = []
    orig = K._pool_global
    monkeypatch.setattr(K, "_pool_global", lambda *a: glob.append(1) or orig(*a))
    old = threads.get_num_threads()
    threads.set_num_threads(nthreads)
    try:
        x = RNG.standard_normal((3, 5, 9, 11)).astype(np.float32)
        x[1, 2, 4, 5] = np.nan
        x[2, 0] = -np.inf
        for k, s, p, d, ceil in [(3, 2, 1, 1, True), (3, 1, 1, 1, False), (2, 3, 0, 2, True),
                                 ((4, 2), 2, (2, 1), 1, True)]:
            _check_max(x, k, s, p, d, ceil)
        for k, s, p, ceil, cip, div in [(3, 2, 1, True, False, None), (3, 1, 1, False, True, None),
                                        (2, 3, 1, True, True, 7), ((5, 3), (3, 1), (2, 0), True, False, None)]:
            got = C.avg_pool2d(nee.from_numpy(x), k, s, p, ceil, cip, div).numpy()
            want = F.avg_pool2d(torch.from_numpy(x), k, s, p, ceil, cip, div).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert not glob
        for shape, dt in [((2, 3, 7, 7), np.float32), ((1, 2, 1, 3), np.float32), ((1, 4, 13, 5), np.float64),
                          ((2, 2, 2, 1), np.float64)]:
            g = RNG.standard_normal(shape).astype(dt)
            g[0, 0, 0, -1] = np.nan
            _check_max(g, shape[2:], 1, 0, 1, False)
            for div in (None, 3):
                got = C.avg_pool2d(nee.from_numpy(g), shape[2:], 1, 0, False, True, div).numpy()
                assert got.dtype == dt
                want = F.avg_pool2d(torch.from_numpy(g), shape[2:], 1, 0, False, True, div).numpy()
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        assert len(glob) >= 4 * 3                   # one call per chunk of planes
    finally:
        threads.set_num_threads(old)

# ---------------------------------------------------------------- conv2d GEMM paths (kernels/conv.py)
CONV_CASES = [  # (x shape, w shape, stride, padding, dilation, groups): the path each one takes
    ((2, 64, 32, 32), (128, 32, 1, 1), 1, 0, 1, 2),     # 1x1: (groups, Og, L) batches per image
    ((1, 128, 40, 40), (128, 32, 1, 1), 1, 0, 1, 4),    # 1x1, one image: one GEMM per group, in blocks
    ((6, 32, 20, 20), (64, 32, 1, 1), 1, 0, 1, 1),      # 1x1, many images: runs of whole GEMMs
    ((1, 96, 17, 19), (160, 96, 1, 1), 1, 0, 1, 1),     # 1x1, odd sizes: column blocks
    ((1, 512, 7, 9), (384, 512, 1, 1), 1, 0, 1, 1),     # 1x1, more rows than columns: row blocks
    ((1, 128, 14, 14), (128, 128, 3, 3), 1, 1, 1, 1),   # one small-image tile: im2col + blocked GEMM
    ((1, 16, 81, 79), (32, 16, 3, 3), 1, 1, 1, 1),      # bands of output rows claimed by the threads
    ((1, 3, 131, 131), (8, 3, 7, 7), 2, 3, 1, 1),       # stem-like 7x7 stride 2, bands
    ((5, 8, 12, 13), (16, 4, 3, 3), 2, 1, 1, 2),        # groups of whole images per tile, groups
    ((3, 6, 40, 40), (12, 6, 3, 2), (2, 1), (1, 0), (2, 1), 1),
    ((2, 256, 14, 14), (64, 256, 1, 1), 2, 0, 1, 1),    # 1x1 stride 2: im2col (a strided copy)
]


@pytest.mark.parametrize("nthreads", [1, 2])
def test_conv2d_gemm_paths(nthreads):
    from neetorch.devices.cpu import threads
    old = threads.get_num_threads()
    threads.set_num_threads(nthreads)
    try:
        for xs, ws, s, p, d, g in CONV_CASES:
            x = RNG.standard_normal(xs).astype(np.float32)
            w = (RNG.standard_normal(ws) / np.sqrt(ws[1] * ws[2] * ws[3])).astype(np.float32)
            b = RNG.standard_normal(ws[0]).astype(np.float32)
            want = F.conv2d(*map(torch.from_numpy, (x, w, b)), s, p, d, g).numpy()
            got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), nee.from_numpy(b), s, p, d, g).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str((xs, ws, s, p, d, g)))
        # non-contiguous input, float64
        x = RNG.standard_normal((2, 40, 24, 10)).transpose(0, 1, 3, 2)
        w = RNG.standard_normal((48, 40, 3, 3)) / 20
        want = F.conv2d(torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(w), None, 1, 1).numpy()
        got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), None, 1, 1).numpy()
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
        # transposed conv: GEMM into columns (per image and group) + col2im
        x = RNG.standard_normal((3, 32, 15, 15)).astype(np.float32)
        w = (RNG.standard_normal((32, 24, 3, 3)) / 10).astype(np.float32)
        for g in (1, 2):
            want = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), None, 2, 1, 1, g).numpy()
            got = C.conv_transpose2d(nee.from_numpy(x), nee.from_numpy(w), None, 2, 1, 1, g).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    finally:
        threads.set_num_threads(old)
