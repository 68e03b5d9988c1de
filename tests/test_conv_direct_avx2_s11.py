"""The direct float32 conv kernels at 8 lanes (kernels/conv_direct.py on AVX2 + FMA: ymm vectors, register tiles for
16 registers, the 8 x 8 in-register transposition of the "chan" / "dw" stores) against torch (float64 reference).

On an AVX-512 host the module's width is switched to 8 for these tests (the 8-lane kernels run there too) and back
afterwards.  Every AVX2 tile shape of both families forced, plus "chan" tiles of 1 to 8 pixels (every row length of
the transposition); odd channel counts (tails), strides, asymmetric pads, dilation, non-square kernels, batches,
groups, depthwise ("dw"), bias / a second bias, relu and a residual in the stores, 1 and 2 threads, non-contiguous
inputs through the op, bitwise-equal channels under equal weights (every output summed in the same order: the
property ONNX's constant-weight light models need), the kernel cache keys carrying the width, and the AVX2 cost rule.
"""
import functools
import re

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import llvm_render
from neetorch.devices.cpu.kernels import conv as K
from neetorch.devices.cpu.kernels import conv_direct as D
from neetorch.ops import conv as C
# the float64 torch reference, the data and the comparison, the thread and tile-forcing fixtures: test_conv_direct's
from test_conv_direct import (  # noqa: F401,F811
    _check_cases, _check_groups, _close, _data, _last_layout, _want, force, nthreads,
)

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.skipif(not D.available(), reason="no AVX2+FMA / AVX-512F")

RNG = np.random.default_rng(11)


@pytest.fixture(scope="module", autouse=True)
def lanes8():
    old = D.VEC
    if old != 8:
        D._set_width(8)
    yield
    if old != 8:
        D._set_width(old)


# (x shape, w shape, stride, (top, bottom, left, right) pads, dilation)
CASES = [
    ((1, 5, 9, 11), (7, 5, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 17, 11, 13), (37, 17, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),      # batch, stride 2, odd channels
    ((1, 3, 23, 21), (20, 3, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),        # 7x7 stem-like
    ((1, 6, 12, 10), (50, 6, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),        # 5x5
    ((1, 9, 14, 14), (33, 9, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),        # dilation 2
    ((1, 4, 13, 16), (6, 4, 4, 2), (1, 1), (1, 2, 0, 1), (1, 1)),         # asymmetric pads, even kernel
    ((1, 8, 15, 17), (70, 8, 3, 2), (2, 1), (0, 2, 1, 0), (1, 2)),        # mixed strides / dilations
    ((2, 40, 7, 7), (25, 40, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),        # 1x1 (the "chan" kernel reads x)
    ((1, 12, 9, 9), (9, 12, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),         # strided 1x1
    ((1, 7, 6, 5), (9, 7, 1, 1), (1, 1), (1, 0, 0, 1), (1, 1)),           # padded 1x1
    ((1, 3, 2, 3), (5, 3, 3, 3), (3, 3), (1, 1, 1, 1), (1, 1)),           # one output pixel per row
    ((1, 2, 1, 1), (3, 2, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),           # a single pixel
]

GROUP_CASES = [
    ((1, 12, 9, 11), (20, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),        # 4 groups of 5 outputs (block tails)
    ((2, 16, 7, 7), (24, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),         # 2 groups, 1x1, batch
    ((1, 24, 13, 13), (36, 8, 3, 3), (2, 2), (1, 0, 1, 2), (1, 1)),       # 3 groups, stride 2, asymmetric pads
    ((1, 10, 12, 12), (40, 2, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),       # 5 groups of 2 inputs, dilation 2
    ((1, 68, 6, 6), (68, 17, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),        # 4 groups of 17
    # depthwise ("dw": the input channel-last, a pixel's 8 channels one vector)
    ((1, 37, 9, 8), (37, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),         # channel-block tail
    ((2, 20, 11, 11), (20, 1, 5, 5), (2, 2), (2, 1, 2, 0), (1, 1)),       # 5x5, stride 2, asymmetric pads, batch
    ((1, 13, 10, 10), (13, 1, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),       # dilation 2
]


_data = functools.partial(_data, rng=RNG)     # this file's own stream (seed 11)


@pytest.mark.parametrize("kind,shapes", [("pix", ((6, 2),)), ("pix", ((12, 1),)), ("pix", ((4, 3),)),
                                         ("chan", ((2, 6),)), ("chan", ((3, 4),)), ("chan", ((1, 8),))])
def test_avx2_tiles_match_torch(nthreads, force, kind, shapes):
    assert D.VEC == 8
    force(kind, shapes)
    _check_cases(kind, shapes, CASES, rng=RNG)


@pytest.mark.parametrize("R", range(1, 9))
def test_chan_transposition_every_row_length(force, R):
    # the 8 x 8 ladder with R pixels a tile (lanes from R on undefined, masked in the stores); channel tails of the
    # 2 x 8 block (O = 13) and pixel tails (L = 7 * 9 = 63), relu in the stores
    force("chan", ((2, R),))
    x, w, b = _data((1, 11, 7, 9), (13, 11, 3, 3))
    want = np.maximum(_want(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1)), 0)
    got = np.full(want.shape, np.nan, np.float32)
    assert D.conv2d(x, w, b, got, 1, 1, 1, 1, 1, 1, 1, 1, True)
    assert (_last_layout().kind, _last_layout().B) == ("chan", R)
    _close(got, want, R)


@pytest.mark.parametrize("kind,shapes", [("pix", ((6, 2),)), ("pix", ((4, 3),)), ("chan", ((2, 6),)),
                                         ("chan", ((3, 4),))])
def test_avx2_groups_shift_relu_residual(nthreads, force, kind, shapes):
    # groups and depthwise, a second per-channel bias, relu and a residual (in the "chan" / "dw" stores before relu;
    # after the "pix" kernel in a pass)
    force(kind, shapes)
    _check_groups(kind, shapes, GROUP_CASES, res=True, rng=RNG)


@pytest.mark.parametrize("kind,shapes", [("pix", ((6, 2),)), ("pix", ((12, 1),)), ("chan", ((2, 6),)),
                                         ("chan", ((3, 4),)), ("chan", ((1, 8),))])
@pytest.mark.parametrize("geo", [((1, 64, 13, 13), (100, 64, 1, 1), 0), ((1, 19, 11, 12), (37, 19, 3, 3), 1)])
def test_equal_weights_give_equal_channels(force, kind, shapes, geo):
    # every output channel summed in the same order, whatever its place in a tile: equal weights and bias give
    # bitwise-equal channels (OpenBLAS's AVX2 sgemm does not: ONNX's light SqueezeNet turned that into a one-hot
    # softmax); large inputs so that a different order would show
    xs, ws, p = geo
    force(kind, shapes)
    x = (RNG.random(xs) * 1e4).astype(np.float32)
    w = np.full(ws, 0.37, np.float32)
    b = np.full(ws[0], 0.02, np.float32)
    got = np.empty((1, ws[0], xs[2] + 2 * p - ws[2] + 1, xs[3] + 2 * p - ws[3] + 1), np.float32)
    assert D.conv2d(x, w, b, got, 1, 1, p, p, p, p, 1, 1, True)
    assert (got == got[:, :1]).all()
    _close(got, np.maximum(_want(x, w, b, (1, 1), (p,) * 4, (1, 1)), 0), (kind, shapes))


def test_op_noncontiguous_inputs(monkeypatch):
    # through the op with NEE_CONV_DIRECT=1: non-contiguous views, groups, the 8-lane kernels taking them
    ran = []
    orig = D.conv2d

    def spy(x, w, b, res, *geo):
        r = orig(x, w, b, res, *geo)
        ran.append((D.VEC, r))
        return r
    monkeypatch.setattr(D, "conv2d", spy)
    monkeypatch.setattr(D, "MODE", ["1"])
    base = RNG.standard_normal((2, 10, 22, 18)).astype(np.float32)
    w = (RNG.standard_normal((19, 10, 3, 3)) / 10).astype(np.float32)
    b = RNG.standard_normal(19).astype(np.float32)
    t = torch.from_numpy
    for x in (base.transpose(0, 1, 3, 2), base[:, ::2, 1:, ::2], base[::-1, :, ::-1]):
        assert not x.flags.c_contiguous
        for s in (1, 2):
            wx = np.ascontiguousarray(w[:, :x.shape[1]])
            got = C.conv2d(nee.from_numpy(x), nee.from_numpy(wx), nee.from_numpy(b), s, 1).numpy()
            _close(got, _want(np.ascontiguousarray(x), wx, b, (s, s), (1, 1, 1, 1), (1, 1)), (x.strides, s))
    wg = np.ascontiguousarray(w[:18, :5])
    xg = base[:, :, ::2]
    got = C.conv2d(nee.from_numpy(xg), nee.from_numpy(wg), None, 1, 1, 1, 2).numpy()
    want = F.conv2d(t(np.ascontiguousarray(xg)).double(), t(wg).double(), None, 1, 1, 1, 2).numpy()
    _close(got, want, "groups")
    assert len(ran) == 7 and all(r == (8, True) for r in ran), ran


def test_kernel_cache_keys_carry_the_width():
    # the in-process table and llvm_render's disk cache keys name the width: an AVX-512 kernel is never handed to
    # an 8-lane caller (nor the reverse); the rendered IR is 8-lane
    f = D.kernel("chan", 2, 6, True)
    assert ("chan", 2, 6, True, False, 8) in D._kernels and D._kernels[("chan", 2, 6, True, False, 8)] is f
    names = {k.rsplit("_", 1)[0] for k in llvm_render._addresses if k.startswith("convdirect")}
    assert "convdirectchan2x6rv8" in names
    # (on an AVX-512 host the process may also hold the 16-lane kernels other tests compiled: named v16)
    assert all(re.search(r"v(8|16)$", n) for n in names), names
    ir = D._render_c(2, 6, True)
    assert "<8 x float>" in ir and "<16 x float>" not in ir
    ir = D._render(6, 2)
    assert "@llvm.fma.v8f32" in ir and "<16 x float>" not in ir


def test_avx2_cost_rule(monkeypatch):
    # the larger one-group unpadded 1x1 convs go to the GEMM (from _AVX2_1X1_FLOPS), the smaller ones direct
    # where the "chan" kernel uses its lanes; other convs as on AVX-512 (the Winograd rule's leftovers direct)
    # (with kernels/conv1x1_packed.py off, NEE_CONV_PK1X1=0: it takes the unpadded stride-1 1x1s, session 14)
    from neetorch.devices.cpu.kernels import conv1x1_packed
    monkeypatch.setattr(conv1x1_packed, "ON", [False])
    assert not D.pays((1, 512, 13, 13), (1000, 512, 1, 1), (1, 1000, 13, 13), 1, 1, 0, 0, 0, 0, 1, 1)
    assert not D.pays((1, 1024, 14, 14), (256, 1024, 1, 1), (1, 256, 14, 14), 1, 1, 0, 0, 0, 0, 1, 1)
    assert D.pays((1, 512, 13, 13), (64, 512, 1, 1), (1, 64, 13, 13), 1, 1, 0, 0, 0, 0, 1, 1)
    assert D.pays((1, 16, 55, 55), (64, 16, 1, 1), (1, 64, 55, 55), 1, 1, 0, 0, 0, 0, 1, 1)
    assert D.pays((1, 3, 224, 224), (64, 3, 3, 3), (1, 64, 111, 111), 2, 2, 0, 0, 0, 0, 1, 1)
    f32 = np.dtype(np.float32)
    for C_, H in ((128, 14), (64, 56), (512, 7)):
        wino = K._winograd_m(1, C_, H, H, C_, 1, 3, 3, 1, 1, 1, 1, H, H, f32)
        assert D.pays((1, C_, H, H), (C_, C_, 3, 3), (1, C_, H, H), 1, 1, 1, 1, 1, 1, 1, 1) == (not wino)
    assert D.plan(1000, 13, 13, 13, 512)[:3] == ("chan", 2, 6)
