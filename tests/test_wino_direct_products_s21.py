"""Winograd's alpha^2 products on conv_direct's kernel (conv._wino_products_direct, session 21).

On the native-workers path (conv._wino_native, 2+ threads) and on one thread (conv._wino_serial_direct) float32
Winograd runs its products U[xi] (O x C) @ V[xi] (C x tiles)
as one grouped 1x1 convolution (alpha^2 groups on a 1 x tiles plane) through conv_direct's kernel, not OpenBLAS.
Checked against torch in float64 (odd channel counts, batches, asymmetric pads, bias / residual / relu), against
the OpenBLAS products (NEE_WINOGRAD_GEMM=blas), that the kernel really ran (a spy), and that weights changed in place
between calls give the new weights' result (U is a new array then; its packed copy goes with the old one).
"""
import numpy as np
import pytest

from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv as K
from neetorch.devices.cpu.kernels import conv_direct, winograd

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.skipif(not conv_direct.available(), reason="conv_direct's kernel needs AVX-512F or AVX2+FMA")

RNG = np.random.default_rng(21)


@pytest.fixture(params=[2, 1])
def native2(monkeypatch, request):
    """Two threads, Winograd on the native workers for these small convs (_wino_native), or one thread
    (_wino_serial_direct); the products' kernel calls recorded."""
    old = threads.NUM_THREADS
    threads.set_num_threads(request.param)
    monkeypatch.setattr(K, "_PAR_FLOPS", 0)
    monkeypatch.setattr(K.conv_direct, "MODE", ["0"])      # the 3x3s not on the direct kernel themselves
    seen = []
    real = conv_direct.conv2d

    def spy(x, w, *a, **k):
        r = real(x, w, *a, **k)
        seen.append((x.shape, w.shape, r))
        return r
    monkeypatch.setattr(conv_direct, "conv2d", spy)
    yield seen
    threads.set_num_threads(old)


def _want(x, w, b, pads, e=None, relu=False):
    pt, pb, pl, pr = pads
    t = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    y = F.conv2d(t(xp), t(w), None if b is None else t(b)).numpy()
    if e is not None:
        y = y + e
    return np.maximum(y, 0) if relu else y


def _run(x, w, b, pads, e=None, relu=False):
    OH = x.shape[2] + pads[0] + pads[1] - 2
    OW = x.shape[3] + pads[2] + pads[3] - 2
    out = np.full((x.shape[0], w.shape[0], OH, OW), np.nan, np.float32)
    K.conv2d_into(out, [x, w] + ([] if b is None else [b]),
                  {"stride": (1, 1), "padding": pads, "dilation": (1, 1), "groups": 1}, None, e, relu)
    return out


CASES = [  # (x shape, output channels, pads)
    ((1, 5, 17, 23), 6, (1, 1, 1, 1)), ((2, 3, 9, 8), 4, (1, 1, 1, 1)), ((3, 7, 7, 7), 19, (0, 0, 0, 0)),
    ((1, 33, 12, 10), 70, (0, 2, 1, 0)), ((2, 16, 14, 14), 24, (1, 1, 1, 1)), ((1, 64, 28, 28), 64, (1, 1, 1, 1)),
    ((1, 130, 6, 9), 17, (1, 1, 1, 1)),
]


@pytest.mark.parametrize("m", [2, 4])
def test_products_on_direct_kernel_match_torch(native2, monkeypatch, m):
    monkeypatch.setattr(K, "_WINO_FORCE", [str(m)])
    tol = {2: 3e-6, 4: 3e-5}[m]
    a2 = (m + 2) ** 2
    for i, (xs, o, pads) in enumerate(CASES):
        x = RNG.standard_normal(xs).astype(np.float32)
        w = (RNG.standard_normal((o, xs[1], 3, 3)) / np.sqrt(9 * xs[1])).astype(np.float32)
        b = RNG.standard_normal(o).astype(np.float32) if i % 2 == 0 else None
        relu = i % 3 != 1
        e = None
        if i % 2:
            e = RNG.standard_normal(_want(x, w, b, pads).shape).astype(np.float32)
        want = _want(x, w, b, pads, e, relu)
        del native2[:]
        got = _run(x, w, b, pads, e, relu)
        scale = max(1.0, np.abs(want).max())
        np.testing.assert_allclose(got / scale, want / scale, rtol=0, atol=tol, err_msg=str((xs, o, pads, m)))
        # the products ran on the kernel: one grouped 1x1 of alpha^2 groups over the images' tiles
        th = -(-want.shape[2] // m)
        tw = -(-want.shape[3] // m)
        # (16-lane kernels only: on the 8-lane ones OpenBLAS's products, see conv._WINO_GEMM)
        want = [((1, a2 * xs[1], 1, xs[0] * th * tw), (a2 * o, xs[1], 1, 1), True)] if conv_direct.VEC == 16 else []
        assert native2 == want, (xs, o, native2)
        # OpenBLAS's products: the same conv within the transforms' rounding
        monkeypatch.setattr(K, "_WINO_GEMM", ["blas"])
        del native2[:]
        blas = _run(x, w, b, pads, e, relu)
        assert native2 == []
        np.testing.assert_allclose(blas / scale, got / scale, rtol=0, atol=tol)
        monkeypatch.setattr(K, "_WINO_GEMM", [""])


def test_weights_changed_in_place(native2, monkeypatch):
    """A weight buffer written between calls (not frozen): each call the current weights' conv; the products'
    packed copy of the old U is not reused."""
    monkeypatch.setattr(K, "_WINO_FORCE", ["4"])
    x = RNG.standard_normal((1, 32, 16, 16)).astype(np.float32)
    w = (RNG.standard_normal((48, 32, 3, 3)) / 17).astype(np.float32)
    for step in range(4):
        if step:
            w *= np.float32(-1.5) if step % 2 else np.float32(0.5)
            w[step, step] += np.float32(step)
        want = _want(x, w, None, (1, 1, 1, 1))
        got = _run(x, w, None, (1, 1, 1, 1))
        scale = max(1.0, np.abs(want).max())
        np.testing.assert_allclose(got / scale, want / scale, rtol=0, atol=3e-5, err_msg=f"step {step}")


def test_frozen_u_released_with_weights(native2, monkeypatch):
    """U's frozen mark and its packed copy go when the weights (and so their cache entry and U) go."""
    monkeypatch.setattr(K, "_WINO_FORCE", ["2"])
    x = RNG.standard_normal((1, 16, 10, 10)).astype(np.float32)
    w = (RNG.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32)
    winograd.freeze(w)
    _run(x, w, None, (1, 1, 1, 1))
    U = winograd.weights(w, 2)
    key = (U.__array_interface__["data"][0], U.nbytes)
    assert winograd.is_frozen(U) == (conv_direct.VEC == 16)
    del U, w
    import gc
    gc.collect()
    assert key not in winograd._frozen
