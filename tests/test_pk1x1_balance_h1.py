"""The packed 1x1 path's column parts on 2+ threads (kernels/conv1x1_packed.py ``_BALANCE``): the split the threads
finish soonest claiming parts in order, where it beats the cache rule's (13x13 planes: 6 panels in 4 parts of 1, 2,
1, 2 -> 2, 1, 2, 1).

The runs cover every panel once, in order, each at least one panel; the split is never slower than the old one by
the simulated claim; the results are bitwise those of the old split (a column's sums do not depend on the task
computing it) and match torch, on odd planes in both modes (X read in place / packed), with and without a partial
last panel.
"""
from __future__ import annotations

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv1x1_packed as P

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not P.available(), reason="no AVX-512F / AVX2 + FMA packed kernel or no gemm_driver")

RNG = np.random.default_rng(2901)


def _old(n, parts):
    return [(q * n // parts, (q + 1) * n // parts) for q in range(parts)]


@pytest.mark.parametrize("nt", [2, 3, 4])
def test_runs_cover_the_panels_and_finish_no_later(nt):
    for n in range(1, 120):
        for extra in (0, 1):
            for parts in sorted({1, 2, 3, 4, 6, 12, min(n, 2 * nt)}):
                if parts > n:
                    continue
                old = _old(n, parts)
                for lo in (1, parts):
                    runs = P._balanced_runs(n, extra, lo, nt, old)
                    assert runs[0][0] == 0 and runs[-1][1] == n
                    assert all(a[1] == b[0] for a, b in zip(runs, runs[1:]))
                    assert all(p1 > p0 for p0, p1 in runs)
                    assert len(runs) <= max(parts, P._BALANCE_MAX_PER_THREAD * nt)
                    assert P._runs_makespan(runs, extra, nt) <= P._runs_makespan(old, extra, nt)
                    if runs is not old:
                        assert P._runs_makespan(runs, extra, nt) < P._runs_makespan(old, extra, nt)


def test_the_13x13_split():
    # 6 panels, 2 threads: the old 4 parts of 1, 2, 1, 2 finish after 4 panels' time, the new ones after 3
    runs = P._balanced_runs(6, 0, 1, 2, _old(6, 4))
    assert P._runs_makespan(runs, 0, 2) == 3.0
    assert P._runs_makespan(_old(6, 4), 0, 2) == 4.0


# (C, O, H, W): 13x13 (6 panels, partial), 27x27 (22 full + partial), 55x55, an exact 16x16 (8 panels), odd small ones
SHAPES = [(48, 192, 13, 13), (64, 256, 13, 13), (32, 128, 27, 27), (16, 64, 55, 55), (24, 40, 16, 16),
          (7, 13, 9, 21), (33, 5, 31, 29), (20, 70, 5, 7)]


@pytest.mark.parametrize("mode", ["direct", "packed", None])
def test_balanced_bitwise_and_against_torch(mode, monkeypatch):
    old_nt = nee.get_num_threads()
    nee.set_num_threads(2)
    try:
        monkeypatch.setattr(P, "MODE", [mode])
        for C, O, H, W in SHAPES:
            x = RNG.standard_normal((1, C, H, W), dtype=np.float32)
            w = (RNG.standard_normal((O, C, 1, 1)) / np.sqrt(C)).astype(np.float32)
            b = RNG.standard_normal(O, dtype=np.float32)
            outs = []
            for bal in (False, True):
                monkeypatch.setattr(P, "_BALANCE", [bal])
                P._plans.clear()
                res = np.full((1, O, H, W), np.nan, np.float32)
                assert P.conv2d(x, w, b, res, 1, True)
                outs.append(res)
            P._plans.clear()
            assert np.array_equal(outs[0], outs[1]), (C, O, H, W, mode)
            want = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)),
                                                         torch.from_numpy(w.astype(np.float64)),
                                                         torch.from_numpy(b.astype(np.float64)))).numpy()
            np.testing.assert_allclose(outs[1], want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())),
                                       err_msg=str((C, O, H, W, mode)))
    finally:
        nee.set_num_threads(old_nt)
