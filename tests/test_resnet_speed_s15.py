"""kernels/conv1x1_packed.py's fused path (session 15): the conv's epilogue (bias, residual, relu) in the packed
kernel's tile stores, masked stores past the plane's end (no scratch), W's rows in chunks, and strided 1x1 convs
(ResNet's downsamples) with their panels gathered.

Differential against torch (float64 reference) on odd shapes, 1 and 2 threads, both modes; bitwise against the
unfused tasks (FUSED off: the same sums in the same order); the row chunks and column parts forced small so every
loop's edge runs; the bound call; row symmetry (equal weight rows give bitwise-equal channels) on the fused path.
"""
from __future__ import annotations

import numpy as np
import pytest

from neetorch.devices.cpu.kernels import conv1x1_packed as P

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not P.available(), reason="no AVX-512F / AVX2 + FMA packed kernel or no gemm_driver")

RNG = np.random.default_rng(1515)


@pytest.fixture(autouse=True)
def _fused_on(monkeypatch):
    # the fused path on every plane (its rule: outputs of _FUSED_MIN_L pixels and more)
    monkeypatch.setattr(P, "FUSED", [True])
    monkeypatch.setattr(P, "_FUSED_MIN_L", [0])
    monkeypatch.setattr(P, "MODE", [None])
    monkeypatch.setattr(P, "_plans", {})
    monkeypatch.setattr(P, "_pays", {})


def _want(x, w, b, groups, e=None, relu=False, stride=(1, 1)):
    t = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)),
                                   None if b is None else torch.from_numpy(b.astype(np.float64)), stride=stride,
                                   groups=groups)
    if e is not None:
        t = t + torch.from_numpy(e.astype(np.float64))
    if relu:
        t = torch.relu(t)
    return t.numpy()


def _close(got, want, what):
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale, err_msg=str(what))


def _operands(N, C, O, H, W, g, has_b, has_e, stride=(1, 1)):
    OH, OW = (H - 1) // stride[0] + 1, (W - 1) // stride[1] + 1
    x = RNG.standard_normal((N, C, H, W), dtype=np.float32)
    w = (RNG.standard_normal((O, C // g, 1, 1)) / np.sqrt(C // g)).astype(np.float32)
    b = RNG.standard_normal(O, dtype=np.float32) if has_b else None
    e = RNG.standard_normal((N, O, OH, OW), dtype=np.float32) if has_e else None
    return x, w, b, e, (N, O, OH, OW)


def _run(x, w, b, e, shape, g, relu, stride=(1, 1), b2=None):
    res = np.full(shape, np.nan, np.float32)
    assert P.conv2d(x, w, b, res, g, relu, b2, e, stride=stride)
    return res


EPIS = [(False, False, False), (True, False, True), (True, True, True), (False, True, False), (True, False, False),
        (False, False, True)]
# (N, C, O, H, W, groups): partial last panels (55x55: 3025 = 189 * 16 + 1, 7x7, 3x5), exact ones (28x28), fewer
# pixels than a panel, output channels off the 6-row tile, K over one K block (600, 1030), groups, a batch
SHAPES = [(1, 64, 256, 14, 14, 1), (1, 37, 29, 7, 9, 1), (2, 48, 96, 13, 13, 2), (1, 1030, 20, 5, 5, 1),
          (1, 16, 100, 23, 31, 1), (1, 600, 70, 3, 3, 1), (1, 96, 48, 16, 32, 3), (1, 64, 16, 55, 55, 1),
          (1, 20, 7, 28, 28, 1), (1, 512, 64, 7, 7, 1)]


@pytest.mark.parametrize("mode", ["direct", "packed"])
def test_fused_against_torch_and_bitwise_unfused(nthreads, mode, monkeypatch):
    monkeypatch.setattr(P, "MODE", [mode])
    for N, C_, O, H, W, g in SHAPES:
        for has_b, has_e, relu in EPIS:
            x, w, b, e, shape = _operands(N, C_, O, H, W, g, has_b, has_e)
            got = _run(x, w, b, e, shape, g, relu)
            _close(got, _want(x, w, b, g, e, relu), (N, C_, O, H, W, g, has_b, has_e, relu, mode, nthreads))
            P.FUSED[0] = False
            old = _run(x, w, b, e, shape, g, relu)
            P.FUSED[0] = True
            assert np.array_equal(got, old, equal_nan=True), (N, C_, O, H, W, g, has_b, has_e, relu, mode)


def test_fused_small_chunks_and_parts(nthreads, monkeypatch):
    # W's rows in chunks of one 6-row tile, one panel per part: every loop edge (the chunk's last tile partial, the
    # K blocks accumulating into res before the last one's epilogue) runs
    monkeypatch.setattr(P, "_FUSED_A_BYTES", 1)
    monkeypatch.setattr(P, "_FUSED_B_BYTES", 1)
    for mode in ("direct", "packed"):
        monkeypatch.setattr(P, "MODE", [mode])
        for N, C_, O, H, W, g in [(1, 1030, 20, 5, 5, 1), (1, 40, 50, 9, 11, 2), (2, 600, 13, 17, 17, 1)]:
            for has_b, has_e, relu in [(True, True, True), (False, False, False)]:
                x, w, b, e, shape = _operands(N, C_, O, H, W, g, has_b, has_e)
                got = _run(x, w, b, e, shape, g, relu)
                _close(got, _want(x, w, b, g, e, relu), (N, C_, O, H, W, g, mode, nthreads))


# strided 1x1s: ResNet's downsamples (stride 2, even and odd planes), stride 3, unequal strides, groups, a batch
STRIDED = [((1, 64, 128, 14, 14, 1), (2, 2)), ((1, 40, 36, 15, 13, 1), (2, 2)), ((2, 24, 30, 11, 10, 2), (3, 2)),
           ((1, 600, 40, 9, 9, 1), (2, 3)), ((1, 16, 12, 1, 7, 1), (2, 2))]


def test_strided_against_torch(nthreads):
    for (N, C_, O, H, W, g), st in STRIDED:
        for has_b, has_e, relu in EPIS:
            x, w, b, e, shape = _operands(N, C_, O, H, W, g, has_b, has_e, st)
            got = _run(x, w, b, e, shape, g, relu, st)
            _close(got, _want(x, w, b, g, e, relu, st), (N, C_, O, H, W, g, st, has_b, has_e, relu, nthreads))
            # bitwise the stride-1 conv of the subsampled input
            xs = np.ascontiguousarray(x[:, :, ::st[0], ::st[1]])
            assert np.array_equal(got, _run(xs, w, b, e, shape, g, relu), equal_nan=True)


def test_strided_needs_the_fused_path_and_matching_shapes(monkeypatch):
    x, w, b, e, shape = _operands(1, 16, 24, 9, 9, 1, True, False, (2, 2))
    res = np.zeros(shape, np.float32)
    monkeypatch.setattr(P, "FUSED", [False])
    assert not P.conv2d(x, w, b, res, 1, False, None, None, stride=(2, 2))
    assert P.bind(x, w, b, res, 1, False, None, None, stride=(2, 2)) is None
    assert not res.any()
    monkeypatch.setattr(P, "FUSED", [True])
    bad = np.zeros((1, 24, 9, 9), np.float32)               # the stride-1 output's shape
    assert not P.conv2d(x, w, b, bad, 1, False, None, None, stride=(2, 2))
    assert not P.conv2d(x, w, b, res, 1, False, None, None, stride=(0, 2))
    assert not P.conv2d(x, w, b, np.zeros((24, 5, 5), np.float32), 1, False, None, None, stride=(2, 2))
    assert P.bind(x, w, b, np.zeros((24, 5, 5), np.float32), 1, False, None, None, stride=(2, 2)) is None
    assert not bad.any()


def test_fused_bind(nthreads):
    for (N, C_, O, H, W, g), st in [((1, 64, 70, 14, 14, 1), (1, 1)), ((1, 64, 70, 14, 14, 1), (2, 2)),
                                    ((2, 30, 18, 8, 9, 3), (1, 1))]:
        x, w, b, e, shape = _operands(N, C_, O, H, W, g, True, True, st)
        res = np.full(shape, np.nan, np.float32)
        f = P.bind(x, w, b, res, g, True, None, e, stride=st)
        assert f is not None
        for _ in range(2):
            x2 = RNG.standard_normal(x.shape, dtype=np.float32)
            assert f(x2, w, b, res, None, e)
            _close(res, _want(x2, w, b, g, e, True, st), (N, C_, O, H, W, g, st))
        # the switch turned off since binding: the caller runs its other path
        P.FUSED[0] = False
        assert not f(x, w, b, res, None, e)
        P.FUSED[0] = True


def test_fused_equal_weight_rows_give_equal_channels(nthreads):
    for C_, O, H, st in [(512, 40, 13, (1, 1)), (64, 25, 56, (1, 1)), (96, 31, 14, (2, 2))]:
        x = RNG.standard_normal((1, C_, H, H), dtype=np.float32) * 1e3
        w = np.repeat(RNG.standard_normal((1, C_, 1, 1)).astype(np.float32), O, axis=0)
        OH = (H - 1) // st[0] + 1
        res = np.empty((1, O, OH, OH), np.float32)
        assert P.conv2d(x, w, None, res, 1, False, None, None, stride=st)
        assert (res[0] == res[0, :1]).all(), (C_, O, H, st, nthreads)


def test_fused_nan_inf_and_relu_signs(nthreads):
    x, w, b, e, shape = _operands(1, 24, 30, 9, 9, 1, True, True)
    x[0, 3, 2, 2] = np.nan
    x[0, 5, 4, 4] = np.inf
    e[0, 7, 1, 1] = -np.inf
    got = _run(x, w, b, e, shape, 1, True)
    want = _want(x, w, b, 1, e, True)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    _close(got[fin], want[fin], "finite part")


def test_fused_rule_by_plane_size(monkeypatch):
    # the fused path on outputs of _FUSED_MIN_L pixels and more; smaller ones: the unfused tasks (stride 1) or
    # declined (strided); the cost rule then takes the big products on those planes and the strided 1x1s
    monkeypatch.setattr(P, "_FUSED_MIN_L", [784])
    kinds = []
    real = P._frun
    monkeypatch.setattr(P, "_frun", lambda p, *a: (kinds.append("fused"), real(p, *a)))
    for (C_, O, H, st), fused in [((64, 40, 28, 1), True), ((64, 40, 27, 1), False), ((64, 40, 56, 2), True),
                                  ((64, 40, 54, 2), False)]:
        x, w, b, e, shape = _operands(1, C_, O, H, H, 1, True, True, (st, st))
        res = np.full(shape, np.nan, np.float32)
        kinds.clear()
        assert P.conv2d(x, w, b, res, 1, True, None, e, stride=(st, st)) == (fused or st == 1)
        assert bool(kinds) == fused, (C_, O, H, st)
        if fused or st == 1:
            _close(res, _want(x, w, b, 1, e, True, (st, st)), (C_, O, H, st))
        OH = (H - 1) // st + 1
        assert P.pays((1, C_, H, H), (O, C_, 1, 1), (1, O, OH, OH), st, st, 0, 0, 0, 0, 1) == (fused or st == 1)
    # ResNet-50's 64 -> 256 on 56x56 (103 MFLOP): the fused path's; on 14x14 (256 -> 1024) the GEMM's
    assert P.pays((1, 64, 56, 56), (256, 64, 1, 1), (1, 256, 56, 56), 1, 1, 0, 0, 0, 0, 1)
    assert not P.pays((1, 256, 14, 14), (1024, 256, 1, 1), (1, 1024, 14, 14), 1, 1, 0, 0, 0, 0, 1)
    monkeypatch.setattr(P, "FUSED", [False])
    # unfused: the GEMM's on the 8-lane kernels; the packed tasks' on the 16-lane ones, where K <= _BIG16_MAX_K
    from neetorch.devices.cpu.kernels import linalg
    assert P.pays((1, 64, 56, 56), (256, 64, 1, 1), (1, 256, 56, 56), 1, 1, 0, 0, 0, 0, 1) == (linalg.PK_VEC == 16)
    assert not P.pays((1, 128, 56, 56), (256, 128, 1, 1), (1, 256, 56, 56), 1, 1, 0, 0, 0, 0, 1)
    assert not P.pays((1, 64, 56, 56), (40, 64, 1, 1), (1, 40, 28, 28), 2, 2, 0, 0, 0, 0, 1)
