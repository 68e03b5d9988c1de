"""Winograd on the native workers past the old 2 MB budget (session 18): on two threads convs whose transformed
input V or products M are 2-16 MB (Inception v2's 64 -> 192 on 56x56, 96 -> 128 on 56x56) run the three native jobs
(``conv._wino_native``) instead of the Python pool's bands; their bands, where still used, are of equal height.
Checked against torch in float64 (relative to the outputs' scale, as tests/test_conv_perf_paths.py)."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv as K

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(181)


def _check(x, w, b, relu=False):
    t = [torch.from_numpy(a).double() for a in (x, w, b)]
    want = torch.nn.functional.conv2d(*t, padding=1).numpy()
    if relu:
        want = np.maximum(want, 0)
    out = np.full(want.shape, np.nan, np.float32)
    K.conv2d_into(out, [x, w, b], {"groups": 1, "stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1)},
                  relu=relu)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=2e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("shape", [(1, 96, 56, 56, 128), (2, 24, 60, 57, 48)])
def test_large_winograd_runs_natively_on_two_threads(monkeypatch, shape):
    N, C, H, W, O = shape
    monkeypatch.setattr(K.conv_direct, "MODE", ["0"])
    monkeypatch.setattr(K, "_WINO_FORCE", ["4"])
    x = RNG.standard_normal((N, C, H, W)).astype(np.float32)
    w = (RNG.standard_normal((O, C, 3, 3)) / np.sqrt(9 * C)).astype(np.float32)
    b = RNG.standard_normal(O).astype(np.float32)
    a2, th, tw = 36, -(-H // 4), -(-W // 4)
    assert a2 * max(O, C) * N * th * tw * 4 > 2 << 20                  # over the old budget
    native = []
    orig = K._wino_native
    monkeypatch.setattr(K, "_wino_native", lambda *a: native.append(a[4]) or orig(*a))
    old = threads.get_num_threads()
    try:
        threads.set_num_threads(2)
        for relu in (False, True):
            _check(x, w, b, relu)
        assert native == [4, 4]                                         # both calls took the native jobs
        threads.set_num_threads(1)
        _check(x, w, b)                                                 # (one thread: the blocks / bands)
        assert len(native) == 2
    finally:
        threads.set_num_threads(old)


def test_even_bands(monkeypatch):
    """Over the native budget on two threads: bands of tile rows of equal height (+-1), as many as a multiple of
    the threads."""
    monkeypatch.setattr(K.conv_direct, "MODE", ["0"])
    monkeypatch.setattr(K, "_WINO_FORCE", ["4"])
    monkeypatch.setattr(K, "_WINO_NATIVE_BYTES", 1024)
    monkeypatch.setattr(K, "_WINO_BANDS", [True])
    from neetorch.devices.cpu.kernels import winograd as Wm
    rows = []
    orig = Wm.input_tiles
    monkeypatch.setattr(Wm, "input_tiles", lambda *a: rows.append(a[11]) or orig(*a))
    x = RNG.standard_normal((1, 32, 56, 56)).astype(np.float32)
    w = (RNG.standard_normal((48, 32, 3, 3)) / 17).astype(np.float32)
    b = RNG.standard_normal(48).astype(np.float32)
    old = threads.get_num_threads()
    try:
        threads.set_num_threads(2)
        _check(x, w, b)
    finally:
        threads.set_num_threads(old)
    assert len(rows) % 2 == 0 and len(rows) >= 2 and max(rows) - min(rows) <= 1 and sum(rows) == 14, rows
