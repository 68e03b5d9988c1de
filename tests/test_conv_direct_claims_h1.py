"""conv_direct's claim runs on 2+ threads (``_claim_run`` / ``_CLAIM_BALANCE``): the run length whose claims,
taken in turn by equally fast threads, end together, where the uniform ceil(tiles / (threads * 6)) run leaves one
thread a run more (13x13 planes: 87 tiles in runs of 8 -> 11, 116 in runs of 10 -> 29).

The run never finishes later than the uniform one by the simulated claim, keeps at least two claims a thread, and
the results are bitwise those of the uniform runs (a tile's sums do not depend on the thread computing it) and match
torch, for the "chan", "pix" and depthwise kernels on odd shapes.
"""
from __future__ import annotations

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv, conv_direct as D, winograd

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not D.available(), reason="no AVX-512F / AVX2 + FMA direct conv kernels")

RNG = np.random.default_rng(3107)


@pytest.mark.parametrize("nthr", [2, 3, 4])
def test_runs_never_finish_later(nthr):
    for n in list(range(1, 300)) + [464, 505, 2061, 4999]:
        r0 = -(-n // (nthr * D._CHUNKS_PER_THREAD))
        r = D._claim_run(n, nthr)
        assert r >= 1
        assert D._claim_makespan(n, r, nthr) <= D._claim_makespan(n, r0, nthr)
        if r != r0:
            assert D._claim_makespan(n, r, nthr) < D._claim_makespan(n, r0, nthr)
            assert -(-n // r) >= 2 * nthr
        # every tile claimed once: the runs cover the tiles
        assert sum(min(r, n - k) for k in range(0, n, r)) == n


def test_the_13x13_runs():
    assert D._claim_run(87, 2) == 11 and D._claim_makespan(87, 11, 2) == 44 < D._claim_makespan(87, 8, 2)
    assert D._claim_run(116, 2) == 29 and D._claim_makespan(116, 29, 2) == 58 < D._claim_makespan(116, 10, 2)


# (C, H, W, O, k, stride, pad, groups): 3x3s of SqueezeNet's 13x13 / 27x27, a strided stem, odd planes and channel
# counts, a grouped and a depthwise one, a 1x1 on the direct kernel
SHAPES = [(48, 13, 13, 192, 3, 1, 1, 1), (64, 13, 13, 256, 3, 1, 1, 1), (32, 27, 27, 128, 3, 1, 1, 1),
          (3, 61, 67, 24, 3, 2, 0, 1), (13, 17, 11, 37, 3, 1, 1, 1), (24, 19, 23, 40, 5, 2, 2, 1),
          (16, 15, 15, 32, 3, 1, 1, 4), (32, 14, 14, 32, 3, 1, 1, 32), (256, 13, 13, 48, 1, 1, 0, 1)]


@pytest.mark.parametrize("force", [None, "pix", "chan"])
def test_balanced_runs_bitwise_and_against_torch(force, monkeypatch):
    old = nee.get_num_threads()
    nee.set_num_threads(2)
    try:
        monkeypatch.setattr(D, "FORCE", [force])
        for C, H, W, O, k, s, p, g in SHAPES:
            x = RNG.standard_normal((1, C, H, W), dtype=np.float32)
            w = (RNG.standard_normal((O, C // g, k, k)) / np.sqrt(C // g * k * k)).astype(np.float32)
            b = RNG.standard_normal(O, dtype=np.float32)
            winograd.freeze(w)
            attrs = dict(groups=g, stride=(s, s), padding=(p, p, p, p), dilation=(1, 1))
            OH, OW = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
            outs = []
            for bal in (False, True):
                monkeypatch.setattr(D, "_CLAIM_BALANCE", [bal])
                D._layouts.clear()
                res = np.full((1, O, OH, OW), np.nan, np.float32)
                ok = D.conv2d(x, w, b, res, s, s, p, p, p, p, 1, 1, True)
                if not ok:
                    conv.conv2d_into(res, [x, w, b], attrs, relu=True)
                outs.append(res)
            D._layouts.clear()
            assert np.array_equal(outs[0], outs[1]), (C, H, W, O, k, s, p, g, force)
            want = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)),
                                                         torch.from_numpy(w.astype(np.float64)),
                                                         torch.from_numpy(b.astype(np.float64)), stride=s, padding=p,
                                                         groups=g)).numpy()
            np.testing.assert_allclose(outs[1], want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())),
                                       err_msg=str((C, H, W, O, k, s, p, g, force)))
    finally:
        nee.set_num_threads(old)


# ---------------------------------------------------------------- whole 8-pixel rows below _SHORT_K (_CHAN_FULL_ROWS)
def test_full_rows_plan():
    if D.VEC != 16:
        pytest.skip("the 16-lane tiles only")
    assert D.plan(64, 111, 111, 113, 27, "chan")[1:3] == (2, 8)          # SqueezeNet's stem
    assert D.plan(64, 112, 112, 114, 27)[1:3] == (2, 8)
    assert D.plan(64, 55, 55, 57, 144)[1:3] == (4, 6)                    # K = 144: the 4 x 6 tile stays
    assert D.plan(48, 13, 13, 15, 16)[1:3] == (3, 7)                     # lane use decides first


@pytest.mark.parametrize("nthreads_", [1, 2])
def test_full_rows_bitwise_and_against_torch(nthreads_, monkeypatch):
    old = nee.get_num_threads()
    nee.set_num_threads(nthreads_)
    try:
        for C, H, W, O, k, s, p in [(3, 45, 39, 64, 3, 2, 0), (3, 31, 33, 64, 3, 1, 1), (2, 23, 29, 128, 3, 1, 1),
                                    (3, 57, 61, 96, 3, 2, 1), (1, 17, 19, 64, 5, 1, 2)]:
            x = RNG.standard_normal((1, C, H, W), dtype=np.float32)
            w = (RNG.standard_normal((O, C, k, k)) / np.sqrt(C * k * k)).astype(np.float32)
            b = RNG.standard_normal(O, dtype=np.float32)
            winograd.freeze(w)
            OH, OW = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
            outs = []
            for full in (False, True):
                monkeypatch.setattr(D, "_CHAN_FULL_ROWS", [full])
                monkeypatch.setattr(D, "FORCE", ["chan"])
                D._layouts.clear()
                res = np.full((1, O, OH, OW), np.nan, np.float32)
                assert D.conv2d(x, w, b, res, s, s, p, p, p, p, 1, 1, True)
                outs.append(res)
            D._layouts.clear()
            assert np.array_equal(outs[0], outs[1]), (C, H, W, O, k, s, p)
            want = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)),
                                                         torch.from_numpy(w.astype(np.float64)),
                                                         torch.from_numpy(b.astype(np.float64)), stride=s,
                                                         padding=p)).numpy()
            np.testing.assert_allclose(outs[1], want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    finally:
        nee.set_num_threads(old)
