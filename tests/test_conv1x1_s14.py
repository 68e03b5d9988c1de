"""Unpadded stride-1 1x1 convolutions on linalg's packed GEMM kernel (kernels/conv1x1_packed.py, session 14).

Differential against torch (float64 reference) on odd shapes: groups, batches, planes with and without a partial
last panel, fewer pixels than a panel, output channels off the 6-row tile, K over one K block, both modes (X read in
place / X packed per call), the epilogues the fused kernels use (bias, a second bias, residual, relu), NaN / inf,
non-contiguous inputs through the op, 1 and 2 threads; the routing (conv_direct's cost rule leaves these convs to it;
strided, padded, float64 and per-channel ones not); the bound call; and row symmetry: equal weight rows give
bitwise-equal output channels (what the ONNX light models' constant-weight conformance cases need: OpenBLAS's
sgemm sums the two halves of its 12-row tiles in different orders).
"""
from __future__ import annotations

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv1x1_packed as P
from neetorch.devices.cpu.kernels import conv_direct as D
from neetorch.devices.cpu.kernels import linalg as L
from neetorch.ops import conv as C

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not P.available(), reason="no AVX-512F / AVX2 + FMA packed kernel or no gemm_driver")

RNG = np.random.default_rng(1414)


@pytest.fixture
def mode(request, monkeypatch):
    monkeypatch.setattr(P, "MODE", [request.param])
    return request.param


def _want(x, w, b, groups, e=None, relu=False):
    t = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)),
                                   None if b is None else torch.from_numpy(b.astype(np.float64)), groups=groups)
    if e is not None:
        t = t + torch.from_numpy(e.astype(np.float64))
    if relu:
        t = torch.relu(t)
    return t.numpy()


def _close(got, want, what):
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale, err_msg=str(what))


# (N, C, O, H, W, groups): partial last panels (55x55, 13x13, 3x5), exact ones (4x4, 28x28 = 49 panels), fewer pixels
# than a panel (3x5), output channels off the 6-row tile (7, 17, 1000), K = 1..5, K over one K block (600), groups
SHAPES = [(1, 64, 16, 55, 55, 1), (1, 16, 64, 55, 55, 1), (2, 5, 7, 3, 5, 1), (1, 600, 17, 4, 4, 1),
          (1, 512, 1000, 13, 13, 1), (1, 24, 112, 28, 28, 4), (3, 12, 9, 11, 13, 3), (1, 1, 6, 23, 24, 1),
          (1, 40, 36, 23, 25, 2)]


@pytest.mark.parametrize("mode", ["direct", "packed"], indirect=True)
def test_against_torch(nthreads, mode):
    for N, C_, O, H, W, g in SHAPES:
        x = RNG.standard_normal((N, C_, H, W), dtype=np.float32)
        w = (RNG.standard_normal((O, C_ // g, 1, 1)) / np.sqrt(C_ // g)).astype(np.float32)
        for has_b, b2, has_e, relu in [(False, False, False, False), (True, False, False, True),
                                       (True, True, True, True), (False, False, True, False), (False, True, False, True)]:
            b = RNG.standard_normal(O, dtype=np.float32) if has_b else None
            bb = RNG.standard_normal(O, dtype=np.float32) if b2 else None
            e = RNG.standard_normal((N, O, H, W), dtype=np.float32) if has_e else None
            res = np.full((N, O, H, W), np.nan, np.float32)
            assert P.conv2d(x, w, b, res, g, relu, bb, e)
            bsum = None if b is None and bb is None else (0 if b is None else b.astype(np.float64)) + \
                (0 if bb is None else bb.astype(np.float64))
            _close(res, _want(x, w, bsum, g, e, relu), (N, C_, O, H, W, g, has_b, b2, has_e, relu, mode, nthreads))


@pytest.mark.parametrize("mode", ["direct", "packed"], indirect=True)
def test_nan_inf(nthreads, mode):
    # NaN and inf go through the sums and the epilogue as torch's: relu keeps NaN, inf - inf is NaN
    x = RNG.standard_normal((1, 20, 9, 11), dtype=np.float32)
    x[0, 3, 2, 4] = np.nan
    x[0, 5, 7, 1] = np.inf
    x[0, 6, 7, 1] = -np.inf       # same pixel: inf - inf where both weights have one sign
    x[0, 2, 8, 10] = np.inf       # the partial last panel's last pixel
    w = RNG.standard_normal((13, 20, 1, 1)).astype(np.float32)
    b = RNG.standard_normal(13, dtype=np.float32)
    for relu in (False, True):
        res = np.zeros((1, 13, 9, 11), np.float32)
        assert P.conv2d(x, w, b, res, 1, relu)
        want = _want(x, w, b, 1, relu=relu).astype(np.float32)
        np.testing.assert_array_equal(np.isnan(res), np.isnan(want))
        fin = np.isfinite(want)
        np.testing.assert_array_equal(res[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
        _close(res[fin], want[fin], relu)


@pytest.mark.parametrize("mode", ["direct", "packed"], indirect=True)
def test_equal_weight_rows_give_equal_channels(nthreads, mode):
    # every output channel summed in one order: equal weight rows, bitwise-equal channels (any row tile, any task)
    for C_, O, H in [(512, 1000, 13), (64, 16, 55), (16, 64, 27), (37, 23, 7)]:
        x = (RNG.random((1, C_, H, H), dtype=np.float32) * 1e3).astype(np.float32)
        w = np.full((O, C_, 1, 1), 0.02, np.float32)
        b = np.full(O, 0.5, np.float32)
        res = np.empty((1, O, H, H), np.float32)
        assert P.conv2d(x, w, b, res, 1, True)
        assert (res[0] == res[0, :1]).all(), (C_, O, H, mode, nthreads)


def test_op_routes_unpadded_stride1_1x1(nthreads, monkeypatch):
    monkeypatch.setattr(D, "MODE", [""])
    ran = []
    real = P._run
    monkeypatch.setattr(P, "_run", lambda p, *a: (ran.append(p.kind), real(p, *a)))
    cases = [((1, 48, 55, 55), (32, 48, 1, 1), 1, 0, 1, True), ((1, 136, 14, 14), (136, 34, 1, 1), 1, 0, 4, True),
             ((2, 48, 13, 13), (192, 48, 1, 1), 1, 0, 1, True),
             # a "squeeze" (16 outputs from 64 inputs): conv_direct's "chan" kernel with the 8-lane kernels, the
             # packed tasks with the 16-lane ones on planes of 729+ pixels (session 20), the chan kernel below
             ((1, 64, 55, 55), (16, 64, 1, 1), 1, 0, 1, P.available() and L.PK_VEC == 16),
             # below 729 pixels the direct kernel's when its rule takes it, else (session 27) the packed kernel, not
             # the GEMM (3x faster bound: /tmp/lead/c5.py, 64 -> 16 on 13x13 5 vs 15 us)
             ((1, 64, 13, 13), (16, 64, 1, 1), 1, 0, 1,
              P.available() and not D.pays((1, 64, 13, 13), (16, 64, 1, 1), (1, 16, 13, 13), 1, 1, 0, 0, 0, 0, 1, 1, 1)),
             # fewer than _MIN_K inputs per group (ShuffleNet's first grouped 1x1): conv_direct's "pix" kernel
             ((1, 24, 28, 28), (112, 6, 1, 1), 1, 0, 4, False),
             # strided (session 20: the stride-1 conv of the subsampled 7x7 input, conv._strided_1x1: taken as that
             # conv is), padded, a 2x2 plane (4 of 16 columns used), per-channel: not taken
             ((1, 32, 14, 14), (64, 32, 1, 1), 2, 0, 1,
              P.pays((1, 32, 7, 7), (64, 32, 1, 1), (1, 64, 7, 7), 1, 1, 0, 0, 0, 0, 1)),
             ((1, 32, 9, 9), (64, 32, 1, 1), 1, 1, 1, False),
             ((1, 64, 2, 2), (64, 64, 1, 1), 1, 0, 1, False), ((1, 32, 9, 9), (32, 1, 1, 1), 1, 0, 32, False)]
    for xs, ws, s, p, g, taken in cases:
        x = RNG.standard_normal(xs).astype(np.float32)
        w = (RNG.standard_normal(ws) / np.sqrt(ws[1])).astype(np.float32)
        b = RNG.standard_normal(ws[0]).astype(np.float32)
        ran.clear()
        got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), nee.from_numpy(b), s, p, 1, g).numpy()
        want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), s, p, 1,
                                          g).numpy()
        _close(got, want, xs)
        assert bool(ran) == taken, (xs, ws, ran)
        OH, OW = want.shape[2:]
        if taken:
            # conv_direct's rule leaves them (conv.bind_into binds the direct kernel where it says yes)
            assert s != 1 or not D.pays(xs, ws, want.shape, s, s, p, p, p, p, 1, 1, g), xs
            assert ran[0] == ("direct" if OH * OW >= P._DIRECT_MIN_L else "packed")


def test_off_switch_and_forced_modes(monkeypatch):
    monkeypatch.setattr(D, "MODE", [""])
    xs, ws = (1, 64, 27, 27), (128, 64, 1, 1)
    assert P.pays(xs, ws, (1, 128, 27, 27), 1, 1, 0, 0, 0, 0, 1)
    monkeypatch.setattr(P, "ON", [False])
    assert not P.pays(xs, ws, (1, 128, 27, 27), 1, 1, 0, 0, 0, 0, 1)
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    assert not P.conv2d(x, w, None, np.empty((1, 128, 27, 27), np.float32), 1)
    monkeypatch.setattr(P, "ON", [True])
    # NEE_CONV_DIRECT=1 (every conv direct) and =0: not this path
    ran = []
    real = P._run
    monkeypatch.setattr(P, "_run", lambda p, *a: (ran.append(1), real(p, *a)))
    for m in ("0", "1"):
        monkeypatch.setattr(D, "MODE", [m])
        got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), None, 1, 0, 1, 1).numpy()
        _close(got, _want(x, w, None, 1), m)
    assert not ran


def test_other_dtypes_and_layouts_through_the_op(nthreads):
    # float64: not this path (float32 only); non-contiguous float32 views: made contiguous by the op, then taken
    x = RNG.standard_normal((1, 24, 17, 19))
    w = RNG.standard_normal((40, 24, 1, 1))
    b = RNG.standard_normal(40)
    assert not P.applies(x, w, np.empty((1, 40, 17, 19)), 1)
    got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), nee.from_numpy(b), 1, 0, 1, 1).numpy()
    _close(got, _want(x, w, b, 1), "float64")
    xb = RNG.standard_normal((2, 19, 24, 34), dtype=np.float32)
    xv = xb.transpose(0, 2, 1, 3)[:1, :, :, ::2]            # (1, 24, 19, 17), strided
    wv = RNG.standard_normal((40, 48, 1, 1), dtype=np.float32)[:, ::2]        # (40, 24, 1, 1), strided
    assert not xv.flags.c_contiguous and not wv.flags.c_contiguous
    got = C.conv2d(nee.from_numpy(xv), nee.from_numpy(wv), nee.from_numpy(b.astype(np.float32)), 1, 0, 1, 1).numpy()
    _close(got, _want(np.ascontiguousarray(xv), np.ascontiguousarray(wv), b, 1), "views")


def test_fused_epilogue_in_a_jitted_model(nthreads, monkeypatch):
    # conv + bias + residual + relu as the JIT fuses it (kernels/conv_epilogue.py -> conv2d_into): this path runs it
    import neetorch.nn.functional as F
    monkeypatch.setattr(D, "MODE", [""])
    ran = []
    real = P._run
    monkeypatch.setattr(P, "_run", lambda p, *a: (ran.append(a[4] is not None), real(p, *a)))
    x = RNG.standard_normal((1, 48, 27, 27), dtype=np.float32)
    w = (RNG.standard_normal((40, 48, 1, 1)) / 7).astype(np.float32)
    b = RNG.standard_normal(40, dtype=np.float32)
    r = RNG.standard_normal((1, 40, 27, 27), dtype=np.float32)
    wn, bn = nee.from_numpy(w), nee.from_numpy(b)
    jf = nee.jit(lambda xx, rr: F.relu(F.conv2d(xx, wn, bn) + rr))
    for _ in range(2):
        got = jf(nee.from_numpy(x), nee.from_numpy(r)).numpy()
        _close(got, np.maximum(_want(x, w, b, 1) + r, 0), "jit")
    assert ran and all(ran), ran        # with the residual inside


def test_bind(nthreads, monkeypatch):
    x = RNG.standard_normal((1, 32, 15, 15), dtype=np.float32)
    w = RNG.standard_normal((20, 32, 1, 1), dtype=np.float32)
    b = RNG.standard_normal(20, dtype=np.float32)
    b2 = RNG.standard_normal(20, dtype=np.float32)
    e = RNG.standard_normal((1, 20, 15, 15), dtype=np.float32)
    res = np.empty((1, 20, 15, 15), np.float32)
    f = P.bind(x, w, b, res, 1, True, b2, e)
    assert f is not None
    for _ in range(2):
        res[...] = np.nan
        assert f(x, w, b, res, b2, e)
        _close(res, _want(x, w, b.astype(np.float64) + b2, 1, e, True), "bound")
    assert not f(x, w, b, res, b2, None)            # other operands than bound: the caller's unbound path
    threads.set_num_threads(3 - nthreads)
    try:
        assert not f(x, w, b, res, b2, e)
    finally:
        threads.set_num_threads(nthreads)
    assert P.bind(x.astype(np.float64), w, b, res, 1) is None


def test_bad_operands_are_refused():
    x = RNG.standard_normal((1, 8, 5, 5), dtype=np.float32)
    w = RNG.standard_normal((6, 8, 1, 1), dtype=np.float32)
    res = np.empty((1, 6, 5, 5), np.float32)
    assert not P.conv2d(x, w, None, np.empty((1, 7, 5, 5), np.float32), 1)       # wrong output shape
    assert not P.conv2d(x, w, None, res, 3)                                        # groups do not divide
    assert not P.conv2d(x, w, np.zeros(5, np.float32), res, 1)                     # bias of the wrong size
    assert not P.conv2d(x, w, None, res, 1, e=res)                                 # residual is the output
    assert not P.conv2d(x, w, None, res, 1, e=np.zeros((1, 6, 5, 5)))              # float64 residual
    assert not P.conv2d(x[:, :, :, ::-1], w, None, res, 1)                         # non-contiguous input
    xo = np.zeros((1, 8, 5, 5), np.float32)
    assert not P.conv2d(xo, np.zeros((8, 8, 1, 1), np.float32), None, xo, 1)      # in place: the input overwritten
