"""conv2d paths on gemm_driver's native workers and the frozen-weights cache (kernels/conv.py, winograd.py,
conv_direct.py) against torch in float64.

* Winograd on native workers (conv._wino_native): the input transform and the output transform as Numba
  cfunc tasks of gemm_driver call jobs, the alpha^2 GEMMs as one batched driver product; F(2) / F(4),
  float32 / float64, odd sizes (clipped last tiles), several images, no padding / asymmetric pads, bias or
  not, relu and a residual through the JIT epilogue's entry (conv2d_into); each case asserts that the native
  path ran (and at one thread, or with NEE_WINOGRAD_NATIVE=0, that it did not, with the same values).
* grouped 1x1 convs on two threads: the direct kernel (split over the native workers) where the per-group
  GEMMs would stay on the calling thread.
* winograd.freeze: transforms of frozen buffers served without the bitwise check or the kept copy; the mark
  goes with the owner's memory.
"""
import gc

import numpy as np
import pytest

from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv as K
from neetorch.devices.cpu.kernels import conv_direct as D
from neetorch.devices.cpu.kernels import winograd as W

torch = pytest.importorskip("torch")
F = torch.nn.functional

RNG = np.random.default_rng(23)


@pytest.fixture
def two_threads():
    old = threads.get_num_threads()
    threads.set_num_threads(2)
    yield
    threads.set_num_threads(old)


@pytest.fixture
def native_spy(monkeypatch):
    ran = []
    orig = K._wino_native

    def wrapped(*a):
        r = orig(*a)
        ran.append(r)
        return r
    monkeypatch.setattr(K, "_wino_native", wrapped)
    monkeypatch.setattr(K, "_PAR_FLOPS", 0)                # these small convs split over the threads too
    monkeypatch.setattr(K.conv_direct, "MODE", ["0"])      # not the direct kernel
    return ran


def _want(x, w, b, pads, e=None, relu=False, groups=1):
    pt, pb, pl, pr = pads
    t = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    y = F.conv2d(t(xp), t(w), None if b is None else t(b), 1, 0, 1, groups).numpy()
    if e is not None:
        y = y + e
    return np.maximum(y, 0) if relu else y


def _run(x, w, b, pads, e=None, relu=False, groups=1):
    OH = x.shape[2] + pads[0] + pads[1] - w.shape[2] + 1
    OW = x.shape[3] + pads[2] + pads[3] - w.shape[3] + 1
    out = np.full((x.shape[0], w.shape[0], OH, OW), np.nan, x.dtype)
    attrs = {"stride": (1, 1), "padding": pads, "dilation": (1, 1), "groups": groups}
    K.conv2d_into(out, [x, w] + ([] if b is None else [b]), attrs, None, e, relu)
    return out


WINO_CASES = [  # (x shape, output channels, (top, bottom, left, right) pads)
    ((1, 5, 17, 23), 6, (1, 1, 1, 1)), ((2, 3, 9, 8), 4, (1, 1, 1, 1)), ((3, 7, 7, 7), 5, (0, 0, 0, 0)),
    ((1, 6, 12, 10), 19, (0, 2, 1, 0)), ((2, 16, 14, 14), 24, (1, 1, 1, 1)),
]


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("dt,tol", [(np.float32, None), (np.float64, 1e-12)])
def test_winograd_native_matches_torch(two_threads, native_spy, monkeypatch, m, dt, tol):
    monkeypatch.setattr(K, "_WINO_FORCE", [str(m)])
    tol = tol or {2: 2e-6, 4: 2e-5}[m]
    for i, (xs, o, pads) in enumerate(WINO_CASES):
        x = RNG.standard_normal(xs).astype(dt)
        w = (RNG.standard_normal((o, xs[1], 3, 3)) / np.sqrt(9 * xs[1])).astype(dt)
        b = RNG.standard_normal(o).astype(dt) if i % 2 == 0 else None
        relu = i % 3 != 1
        want = _want(x, w, b, pads, relu=relu)
        e = RNG.standard_normal(want.shape).astype(dt) if i % 2 == 1 else None
        if e is not None:
            want = _want(x, w, b, pads, e, relu)
        got = _run(x, w, b, pads, e, relu)
        scale = max(1.0, np.abs(want).max())
        np.testing.assert_allclose(got / scale, want / scale, rtol=0, atol=tol, err_msg=str((xs, o, pads, m)))
        # the same values through the pool's path (the switch off), both with OpenBLAS's products (float32's
        # default products on the native path, conv_direct's kernel, sum in another order: checked against torch
        # above)
        monkeypatch.setattr(K, "_WINO_GEMM", ["blas"])
        got = _run(x, w, b, pads, e, relu)
        monkeypatch.setattr(K, "_WINO_NATIVE", [False])
        np.testing.assert_allclose(_run(x, w, b, pads, e, relu), got, rtol=1e-6 if dt == np.float32 else 1e-13,
                                   atol=1e-6 if dt == np.float32 else 1e-13)
        monkeypatch.setattr(K, "_WINO_NATIVE", [True])
        monkeypatch.setattr(K, "_WINO_GEMM", [""])
    assert native_spy == [True] * 2 * len(WINO_CASES)


def test_winograd_native_not_on_one_thread_nor_large(native_spy, monkeypatch):
    monkeypatch.setattr(K, "_WINO_FORCE", ["4"])
    x = RNG.standard_normal((1, 8, 20, 20)).astype(np.float32)
    w = (RNG.standard_normal((16, 8, 3, 3)) / 9).astype(np.float32)
    old = threads.get_num_threads()
    try:
        threads.set_num_threads(1)
        np.testing.assert_allclose(_run(x, w, None, (1, 1, 1, 1)), _want(x, w, None, (1, 1, 1, 1)), atol=2e-5)
        assert native_spy == []
        threads.set_num_threads(2)
        monkeypatch.setattr(K, "_WINO_NATIVE_BYTES", 1024)     # M over the budget: the blocks path
        np.testing.assert_allclose(_run(x, w, None, (1, 1, 1, 1)), _want(x, w, None, (1, 1, 1, 1)), atol=2e-5)
        assert native_spy == []
    finally:
        threads.set_num_threads(old)


@pytest.mark.skipif(not D.available(), reason="no AVX-512F or AVX2+FMA")
def test_grouped_1x1_direct_on_two_threads(two_threads, monkeypatch):
    # ShuffleNet-like grouped 1x1 (68 inputs per group): direct on two threads where the GEMMs stay serial
    ran = []
    orig = D.conv2d
    monkeypatch.setattr(D, "conv2d", lambda *a, **k: ran.append(a[1].shape) or orig(*a, **k))
    monkeypatch.setattr(D, "MODE", [""])
    from neetorch.devices.cpu.kernels import conv1x1_packed
    monkeypatch.setattr(conv1x1_packed, "ON", [False])      # (it takes these: session 14)
    for xs, ws, g in (((1, 272, 14, 14), (272, 68, 1, 1), 4), ((1, 102, 21, 19), (153, 34, 1, 1), 3)):
        x = RNG.standard_normal(xs).astype(np.float32)
        w = (RNG.standard_normal(ws) / np.sqrt(ws[1])).astype(np.float32)
        b = RNG.standard_normal(ws[0]).astype(np.float32)
        want = _want(x, w, b, (0, 0, 0, 0), groups=g)
        e = RNG.standard_normal(want.shape).astype(np.float32)
        got = _run(x, w, b, (0, 0, 0, 0), e, True, groups=g)
        np.testing.assert_allclose(got, np.maximum(want + e, 0), rtol=2e-5, atol=2e-5)
        assert D.pays(xs, ws, got.shape, 1, 1, 0, 0, 0, 0, 1, 1, g)
    assert ran == [(272, 68, 1, 1), (153, 34, 1, 1)]


def test_frozen_weights_skip_the_check():
    W.clear_cache()
    w = RNG.standard_normal((8, 5, 3, 3))
    assert W.freeze(w) and W.is_frozen(w)
    u = W.weights(w, 4)
    np.testing.assert_allclose(u, W.transform_weights(w, 4), rtol=0, atol=0)
    ent = next(iter(W._cache.values()))
    assert ent[0] is None and W._cache_bytes[0] == u.nbytes      # no copy kept
    compared = []
    orig = W._same
    try:
        W._same = lambda a, b: compared.append(1) or orig(a, b)
        assert W.weights(w, 4) is u and not compared              # served without the check
        v = RNG.standard_normal((8, 5, 3, 3))                      # an unfrozen buffer is checked
        W.weights(v, 4)
        assert W.weights(v, 4) is not None and compared
    finally:
        W._same = orig
    # the mark (and the cache entry) go with the owner's memory
    key = (w.__array_interface__["data"][0], w.nbytes)
    view = w[:4]
    assert W.freeze(view)            # a view: marked by its own region, released with the owner
    del w, ent, view
    gc.collect()
    assert key not in W._frozen and all(k[0] != key[0] for k in W._cache)
    assert not W.freeze(np.zeros((4, 4))[:, ::2]) and not W.freeze(np.zeros(0))
    W.clear_cache()
