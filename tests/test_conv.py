"""Convolution, pooling and resampling (neetorch/ops/conv.py) against torch.nn.functional."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.ops import conv as C

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:Using padding=.same.:UserWarning")
F = torch.nn.functional

RNG = np.random.default_rng(1)


def rnd(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def N(a):
    return nee.from_numpy(a)


def T(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def close(got, want, tol=None):
    want = want.numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    got = got.numpy()
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if got.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want)
        return
    rtol, atol = tol or {np.float16: (1e-2, 1e-2), np.float32: (1e-4, 1e-4), np.float64: (1e-10, 1e-10)}[got.dtype.type]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


# ---------------------------------------------------------------- conv
CONV2D = [  # (x shape, w shape, kwargs)
    ((2, 4, 9, 11), (6, 4, 3, 3), dict(padding=1)),
    ((2, 6, 9, 11), (4, 3, 3, 2), dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2)),
    ((1, 6, 8, 7), (12, 1, 3, 4), dict(stride=2, padding=1, groups=6)),          # depthwise, multiplier 2
    ((2, 6, 8, 7), (6, 1, 3, 3), dict(padding=1, groups=6)),                     # depthwise
    ((2, 6, 8, 7), (6, 1, 4, 4), dict(padding="same", groups=6, dilation=2)),    # depthwise, 'same'
    ((2, 5, 7, 7), (3, 5, 1, 1), dict()),                                        # 1x1 -> GEMM
    ((2, 4, 7, 7), (6, 2, 1, 1), dict(groups=2)),                                # grouped 1x1
    ((1, 5, 7, 9), (3, 5, 1, 1), dict(stride=2)),
    ((2, 3, 10, 8), (4, 3, 4, 2), dict(padding="same")),                         # asymmetric 'same' pad
    ((2, 3, 10, 8), (4, 3, 3, 3), dict(padding="valid", stride=3)),
    ((3, 4, 5, 5), (2, 4, 5, 5), dict()),                                        # kernel == input
    ((1, 2, 40, 60), (3, 2, 3, 3), dict(padding=1)),                             # tiled row path
    ((1, 16, 64, 64), (4, 16, 3, 3), dict(padding=1)),                           # bands of output rows
    ((3, 16, 33, 40), (4, 8, 3, 3), dict(padding=(0, 1), stride=(2, 1), groups=2)),
    ((0, 4, 5, 5), (2, 4, 3, 3), dict()),                                        # empty batch
    ((4, 5, 5), (2, 4, 3, 3), dict(padding=1)),                                 # unbatched
]


@pytest.mark.parametrize("xs,ws,kw", CONV2D)
def test_conv2d(xs, ws, kw):
    # weights scaled to unit-variance outputs (as a network's): the tolerances are absolute at 1e-4, and the
    # Winograd F(4x4, 3x3) path (3x3 stride-1 convs with many tiles) is off the direct sum by ~5e-6 of the
    # outputs' scale in float32
    x, w, b = rnd(*xs), rnd(*ws) / float(np.sqrt(np.prod(ws[1:]))), rnd(ws[0])
    close(C.conv2d(N(x), N(w), N(b), **kw), F.conv2d(T(x), T(w), T(b), **kw))
    close(nee.conv2d(N(x), N(w), None, **kw), F.conv2d(T(x), T(w), None, **kw))


def test_conv2d_float64_noncontig_half():
    x, w = rnd(2, 6, 9, 8, dtype=np.float64), rnd(4, 3, 3, 3, dtype=np.float64)
    close(C.conv2d(N(x), N(w), stride=2, padding=1, groups=2), F.conv2d(T(x), T(w), stride=2, padding=1, groups=2))
    xt = rnd(2, 9, 8, 6).transpose(0, 3, 1, 2)           # channels-last memory
    xf = rnd(2, 6, 9, 8)[:, :, ::-1, ::2]                # flipped + stepped
    wt = rnd(3, 3, 6, 4).transpose(3, 2, 0, 1)
    for xx in (xt, xf):
        close(C.conv2d(N(xx), N(wt), padding=1), F.conv2d(T(xx), T(wt), padding=1))
    xh, wh = rnd(1, 4, 6, 6, dtype=np.float16), rnd(2, 4, 3, 3, dtype=np.float16)
    ref = F.conv2d(T(xh).float(), T(wh).float()).half()
    close(C.conv2d(N(xh), N(wh)), ref)


@pytest.mark.parametrize("nthreads", [1, 2])
def test_conv2d_thread_counts(nthreads):
    old = nee.get_num_threads()
    nee.set_num_threads(nthreads)
    try:
        for xs, ws, kw in [((1, 16, 64, 64), (8, 16, 3, 3), dict(padding=1)), ((5, 4, 9, 9), (6, 4, 3, 3), dict()),
                           ((2, 8, 40, 40), (8, 1, 3, 3), dict(groups=8, padding=1))]:
            x, w = rnd(*xs), rnd(*ws) / float(np.sqrt(np.prod(ws[1:])))
            close(C.conv2d(N(x), N(w), **kw), F.conv2d(T(x), T(w), **kw))
    finally:
        nee.set_num_threads(old)


def test_conv1d():
    x, w, b = rnd(3, 4, 17), rnd(6, 2, 3), rnd(6)
    for kw in (dict(stride=2, padding=2, dilation=2, groups=2), dict(padding="same", groups=2),
               dict(groups=2, stride=3)):
        close(C.conv1d(N(x), N(w), N(b), **kw), F.conv1d(T(x), T(w), T(b), **kw))
    close(C.conv1d(N(x[0]), N(w), groups=2), F.conv1d(T(x[0]), T(w), groups=2))
    wd = rnd(4, 1, 5)
    close(C.conv1d(N(x), N(wd), padding=2, groups=4), F.conv1d(T(x), T(wd), padding=2, groups=4))


CONVT = [
    ((2, 4, 5, 6), (4, 3, 3, 3), dict()),
    ((2, 6, 5, 4), (6, 2, 3, 3), dict(stride=2, padding=1, output_padding=1, groups=3)),
    ((1, 4, 5, 6), (4, 2, 3, 2), dict(stride=(1, 3), padding=(0, 1), output_padding=(0, 2), dilation=(2, 1))),
    ((1, 4, 5, 6), (4, 2, 1, 1), dict(stride=2)),
    ((5, 6, 6), (5, 2, 4, 4), dict(stride=2, padding=1)),      # unbatched
]


@pytest.mark.parametrize("xs,ws,kw", CONVT)
def test_conv_transpose2d(xs, ws, kw):
    x, w = rnd(*xs), rnd(*ws)
    b = rnd(ws[1] * kw.get("groups", 1))
    close(C.conv_transpose2d(N(x), N(w), N(b), **kw), F.conv_transpose2d(T(x), T(w), T(b), **kw))


def test_conv_transpose1d():
    x, w = rnd(2, 4, 9, dtype=np.float64), rnd(4, 3, 3, dtype=np.float64)
    for kw in (dict(), dict(stride=3, padding=1, output_padding=2), dict(stride=2, dilation=2, output_padding=1)):
        close(C.conv_transpose1d(N(x), N(w), **kw), F.conv_transpose1d(T(x), T(w), **kw))
    wg = rnd(4, 1, 3, dtype=np.float64)
    close(C.conv_transpose1d(N(x), N(wg), groups=2), F.conv_transpose1d(T(x), T(wg), groups=2))


def test_unfold_fold_pixel_shuffle():
    x = rnd(2, 3, 7, 9)
    for kw in (dict(kernel_size=(2, 3), dilation=2, padding=1, stride=(1, 2)), dict(kernel_size=3),
               dict(kernel_size=2, stride=2)):
        close(C.unfold(N(x), **kw), F.unfold(T(x), **kw))
    close(C.unfold(N(x[0]), 3, padding=1), F.unfold(T(x[0]), 3, padding=1))
    u = rnd(2, 12, 20)
    close(C.fold(N(u), (7, 9), (2, 3), 1, 1, 2), F.fold(T(u), (7, 9), (2, 3), 1, 1, 2))
    u = rnd(8, 9)
    close(C.fold(N(u), 4, 2), F.fold(T(u), 4, 2))
    p = rnd(2, 8, 3, 5)
    close(C.pixel_shuffle(N(p), 2), F.pixel_shuffle(T(p), 2))
    q = rnd(2, 3, 4, 6)
    close(C.pixel_unshuffle(N(q), 2), F.pixel_unshuffle(T(q), 2))


# ---------------------------------------------------------------- pooling
@pytest.mark.parametrize("ceil", [False, True])
def test_max_pool(ceil):
    x = rnd(2, 3, 9, 11)
    x[0, 0, 2, 3] = np.nan
    for kw in (dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(2, 3), stride=(2, 1), dilation=(2, 1)),
               dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1, dilation=2)):
        r, i = C.max_pool2d(N(x), ceil_mode=ceil, return_indices=True, **kw)
        tr, ti = F.max_pool2d(T(x), ceil_mode=ceil, return_indices=True, **kw)
        close(r, tr)
        close(i, ti)
        close(nee.max_pool2d(N(x), ceil_mode=ceil, **kw), F.max_pool2d(T(x), ceil_mode=ceil, **kw))
    y = rnd(3, 5, 14)[:, :, ::-1]
    for kw in (dict(kernel_size=4, stride=3, padding=2, dilation=1), dict(kernel_size=3, dilation=2)):
        r, i = C.max_pool1d(N(y), ceil_mode=ceil, return_indices=True, **kw)
        tr, ti = F.max_pool1d(T(y), ceil_mode=ceil, return_indices=True, **kw)
        close(r, tr)
        close(i, ti)
    close(C.max_pool2d(N(x[0]), 2, ceil_mode=ceil), F.max_pool2d(T(x[0]), 2, ceil_mode=ceil))


@pytest.mark.parametrize("ceil", [False, True])
def test_avg_pool(ceil):
    x = rnd(2, 3, 9, 11, dtype=np.float64)
    for cip in (True, False):
        for kw in (dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(2, 3), stride=(3, 2), padding=(1, 0)),
                   dict(kernel_size=4)):
            close(C.avg_pool2d(N(x), ceil_mode=ceil, count_include_pad=cip, **kw),
                  F.avg_pool2d(T(x), ceil_mode=ceil, count_include_pad=cip, **kw))
        close(C.avg_pool1d(N(x[0]), 3, 2, 1, ceil, cip), F.avg_pool1d(T(x[0]), 3, 2, 1, ceil, cip))
    close(C.avg_pool2d(N(x), 3, 2, 1, ceil, True, 5), F.avg_pool2d(T(x), 3, 2, 1, ceil, True, 5))


def test_adaptive_pools():
    x = rnd(2, 3, 9, 11)
    for osz in ((4, 5), 3, (None, 2), (9, 11), (12, 1), 1):
        close(C.adaptive_avg_pool2d(N(x), osz), F.adaptive_avg_pool2d(T(x), osz))
        r, i = C.adaptive_max_pool2d(N(x), osz, return_indices=True)
        tr, ti = F.adaptive_max_pool2d(T(x), osz, return_indices=True)
        close(r, tr)
        close(i, ti)
    y = rnd(3, 4, 13)
    close(C.adaptive_avg_pool1d(N(y), 5), F.adaptive_avg_pool1d(T(y), 5))
    close(C.adaptive_max_pool1d(N(y), 6), F.adaptive_max_pool1d(T(y), 6))
    close(C.adaptive_avg_pool2d(N(x[0]), 2), F.adaptive_avg_pool2d(T(x[0]), 2))


# ---------------------------------------------------------------- interpolate
SIZES = [dict(size=(5, 17)), dict(scale_factor=1.7), dict(scale_factor=(2, 3)), dict(scale_factor=0.6),
         dict(size=(18, 22)), dict(size=4), dict(scale_factor=2.5, recompute_scale_factor=True),
         dict(scale_factor=(1 / 3, 0.51))]


@pytest.mark.parametrize("kw", SIZES)
def test_interpolate_2d(kw):
    x = rnd(2, 3, 9, 11)
    for mode, acs in (("nearest", [None]), ("nearest-exact", [None]), ("bilinear", [False, True])):
        for ac in acs:
            close(C.interpolate(N(x), mode=mode, align_corners=ac, **kw),
                  F.interpolate(T(x), mode=mode, align_corners=ac, **kw), (1e-5, 1e-5))


def test_interpolate_1d_area_misc():
    y = rnd(2, 3, 13, dtype=np.float64)
    for kw in (dict(scale_factor=1.5), dict(size=5), dict(size=40), dict(scale_factor=0.37)):
        for mode, acs in (("nearest", [None]), ("nearest-exact", [None]), ("linear", [False, True])):
            for ac in acs:
                close(C.interpolate(N(y), mode=mode, align_corners=ac, **kw),
                      F.interpolate(T(y), mode=mode, align_corners=ac, **kw))
        close(C.interpolate(N(y), mode="area", **kw), F.interpolate(T(y), mode="area", **kw))
    x = rnd(1, 2, 8, 6)
    close(C.interpolate(N(x), scale_factor=0.5, mode="area"), F.interpolate(T(x), scale_factor=0.5, mode="area"))
    xi = RNG.integers(0, 255, size=(1, 2, 5, 4)).astype(np.uint8)
    close(C.interpolate(N(xi), scale_factor=2), F.interpolate(T(xi), scale_factor=2))
    xn = rnd(1, 2, 10, 7)[:, :, ::-1, ::2]
    close(C.interpolate(N(xn), size=(6, 9), mode="bilinear"), F.interpolate(T(xn), size=(6, 9), mode="bilinear"))
    close(C.upsample_bilinear(N(x), scale_factor=2), F.interpolate(T(x), scale_factor=2, mode="bilinear",
                                                                  align_corners=True))
    close(C.upsample(N(x), size=(3, 3)), F.interpolate(T(x), size=(3, 3)))


# ---------------------------------------------------------------- errors
def _err(fn, msg, exc=RuntimeError):
    with pytest.raises(exc) as e:
        fn()
    assert msg in str(e.value), str(e.value)


def test_errors_match_torch():
    r = lambda *s: N(rnd(*s))  # noqa: E731
    _err(lambda: C.conv2d(r(1, 4, 8, 8), r(6, 3, 3, 3)),
         "Given groups=1, weight of size [6, 3, 3, 3], expected input[1, 4, 8, 8] to have 3 channels, but got 4 "
         "channels instead")
    _err(lambda: C.conv2d(r(1, 4, 8, 8), r(6, 2, 3, 3), groups=4),
         "Given groups=4, expected weight to be divisible by 4 at dimension 0, but got weight of size [[6, 2, 3, 3]] "
         "instead")
    _err(lambda: C.conv2d(r(1, 4, 8, 8), r(6, 2, 3, 3), groups=3),
         "Given groups=3, weight of size [6, 2, 3, 3], expected input[1, 4, 8, 8] to have 6 channels, but got 4 "
         "channels instead")
    _err(lambda: C.conv2d(r(1, 4, 2, 2), r(6, 4, 3, 3)),
         "Calculated padded input size per channel: (2 x 2). Kernel size: (3 x 3). Kernel size can't be greater than "
         "actual input size")
    _err(lambda: C.conv2d(r(4, 8), r(6, 4, 3, 3)),
         "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [4, 8]")
    _err(lambda: C.conv2d(r(1, 4, 8, 8), r(6, 4, 3, 3), stride=2, padding="same"),
         "padding='same' is not supported for strided convolutions")
    _err(lambda: C.conv2d(r(1, 4, 8, 8), r(6, 4, 3, 3), bias=r(5)),
         "Given weight of size [6, 4, 3, 3], expected bias to be 1-dimensional with 6 elements, but got bias of size "
         "[5] instead")
    _err(lambda: C.conv1d(r(1, 4, 8), r(6, 3, 3)),
         "Given groups=1, weight of size [6, 3, 3], expected input[1, 4, 8] to have 3 channels, but got 4 channels "
         "instead")
    _err(lambda: C.conv2d(N(rnd(1, 4, 8, 8, dtype=np.float64)), r(6, 4, 3, 3)),
         "expected scalar type Double but found Float")
    _err(lambda: C.conv_transpose2d(r(1, 4, 8, 8), r(3, 2, 3, 3)),
         "Given transposed=1, weight of size [3, 2, 3, 3], expected input[1, 4, 8, 8] to have 3 channels, but got 4 "
         "channels instead")
    _err(lambda: C.conv_transpose2d(r(1, 4, 8, 8), r(4, 2, 3, 3), stride=2, output_padding=2),
         "output padding must be smaller than either stride or dilation, but got output_padding_height: 2 "
         "output_padding_width: 2 stride_height: 2 stride_width: 2 dilation_height: 1 dilation_width: 1")
    _err(lambda: C.max_pool2d(r(1, 4, 8, 8), 3, padding=2),
         "pad should be at most half of effective kernel size, but got pad=2, kernel_size=3 and dilation=1")
    _err(lambda: C.max_pool2d(r(1, 4, 2, 2), 3),
         "Given input size: (4x2x2). Calculated output size: (4x0x0). Output size is too small")
    _err(lambda: C.avg_pool2d(r(1, 4, 8, 8), 3, padding=2),
         "pad should be at most half of effective kernel size, but got pad=2, kernel_size=3 and dilation=1")
    _err(lambda: C.max_pool2d(r(4, 8), 3), "non-empty 3D or 4D (batch mode) tensor expected for input")
    _err(lambda: C.interpolate(r(1, 4, 8, 8), size=4, scale_factor=2), "only one of size or scale_factor should be "
         "defined", ValueError)
    _err(lambda: C.interpolate(r(1, 4, 8, 8), mode="bilinear"), "either size or scale_factor should be defined",
         ValueError)
    _err(lambda: C.interpolate(r(1, 4, 8), mode="bilinear", size=3), "Got 3D input, but bilinear mode needs 4D input",
         NotImplementedError)
    _err(lambda: C.interpolate(r(1, 4, 8, 8), size=3, align_corners=True),
         "align_corners option can only be set with the interpolating modes", ValueError)
    _err(lambda: C.unfold(r(1, 2, 2, 2), 3), "calculated shape of the array of sliding blocks as (0, 0)")


def test_lp_pool_channel_shuffle():
    x = np.abs(rnd(2, 3, 9, 8)) + 0.1
    close(C.lp_pool2d(N(x), 2, 3, 2), F.lp_pool2d(T(x), 2, 3, 2))
    close(C.lp_pool2d(N(x), 3.0, (2, 3), ceil_mode=True), F.lp_pool2d(T(x), 3.0, (2, 3), ceil_mode=True))
    close(C.lp_pool1d(N(x[0]), 2, 3), F.lp_pool1d(T(x[0]), 2, 3))
    y = rnd(2, 6, 3, 2)
    close(C.channel_shuffle(N(y), 3), F.channel_shuffle(T(y), 3))
