"""The direct conv's launch in a compiled graph (session 18): the padded-input fill copies a row's last < 8
elements as one vector overlapping the previous one (rows shorter than 8: one masked vector), and a bound conv
replays its native calls (fills and kernels, params arrays and views made once) while its arrays are the same.

* The fill equals numpy's padding for row lengths 1 .. 20, strides 1 / 2 / 3, one and two threads.
* A bound conv called again on the same arrays with new contents equals torch (and the unreplayed launch bit for
  bit); other arrays rebuild the calls; a jitted CNN equals eager over calls.
"""
import numpy as np
import pytest

from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv_direct as D

pytestmark = pytest.mark.skipif(not D.available(), reason="no AVX2+FMA / AVX-512F: the direct kernels do not run")

RNG = np.random.default_rng(18)


def _want(x3, xq_shape, fill):
    Hq, Wq, parts = fill
    C = x3.shape[0]
    want = np.zeros(xq_shape, np.float32)
    for pi, part in enumerate(parts):
        if part is None:
            continue
        r0, r1, c0, c1, rs, cs = part
        want[:, pi, :Hq * Wq].reshape(C, Hq, Wq)[:, r0:r1, c0:c1] = x3[:, rs, cs]
    return want


@pytest.mark.parametrize("nt", [1, 2])
@pytest.mark.parametrize("stride", [1, 2, 3])
def test_fill_row_tails(monkeypatch, nt, stride):
    """Rows of 1 .. 20 input elements (one masked vector below 8, an overlapping last vector above) into planes
    over a NaN scratch: numpy's padding exactly, nothing left unwritten."""
    old = threads.get_num_threads()
    threads.set_num_threads(nt)
    monkeypatch.setattr(D, "_FILL_PAR", 0)         # split every fill over the threads
    try:
        for W in range(1, 21):
            for pads in [(1, 1, 1, 1), (0, 2, 3, 0)]:
                xs, ws = (1, 3, 5, W), (8, 3, 3, 3)
                OH = (xs[2] + pads[0] + pads[1] - 3) // stride + 1
                OW = (xs[3] + pads[2] + pads[3] - 3) // stride + 1
                if OW < 1 or OH < 1:
                    continue
                lay = D._Layout(xs, ws, OH, OW, stride, stride, *pads, 1, 1, "pix")
                x = RNG.standard_normal(xs).astype(np.float32)
                shape = (xs[1], lay.nph, lay.S)
                got = np.full(shape, np.nan, np.float32)
                D._fill(x[0], got, lay.fill)
                assert np.array_equal(got, _want(x[0], shape, lay.fill)), (W, stride, pads)
    finally:
        threads.set_num_threads(old)


def _torch_conv(x, w, b, stride, pad):
    torch = pytest.importorskip("torch")
    return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
                                      stride=stride, padding=pad).numpy()


@pytest.mark.parametrize("nt", [1, 2])
def test_bound_launch_replay_follows_the_data(monkeypatch, nt):
    """A bound conv (a compiled graph's step) replays its native calls while its arrays are the same objects: new
    contents written into those arrays between calls are read; other arrays rebuild the calls; the bits equal the
    unreplayed launch's."""
    from neetorch.devices.cpu.kernels import winograd
    old = threads.get_num_threads()
    threads.set_num_threads(nt)
    try:
        # (C, O, H, W, k, stride, pad, residual): padded stride 1 / 2, unpadded (the input read in place), residual
        for C, O, H, W, k, s, p, has_e in [(16, 24, 13, 13, 3, 1, 1, False), (8, 32, 20, 17, 3, 2, 1, False),
                                           (16, 16, 9, 9, 1, 1, 0, True), (24, 40, 11, 11, 3, 1, 1, True)]:
            x = RNG.standard_normal((1, C, H, W)).astype(np.float32)
            w = (RNG.standard_normal((O, C, k, k)) * 0.2).astype(np.float32)
            b = RNG.standard_normal(O).astype(np.float32)
            winograd.freeze(w)
            winograd.freeze(b)
            OH, OW = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
            out = np.empty((1, O, OH, OW), np.float32)
            e = RNG.standard_normal(out.shape).astype(np.float32) if has_e else None
            f = D.bind(x, w, b, out, s, s, p, p, p, p, 1, 1, True, None, e)
            assert f is not None
            for it in range(4):
                x[...] = RNG.standard_normal(x.shape)            # new contents, same array
                if e is not None:
                    e[...] = RNG.standard_normal(e.shape)
                out[...] = np.nan
                assert f(x, w, b, out, None, e)
                want = _torch_conv(x, w, b, s, p) + (0 if e is None else e)
                np.testing.assert_allclose(out, np.maximum(want, 0), rtol=1e-4, atol=1e-4)
                ref = np.empty_like(out)
                monkeypatch.setattr(D, "REPLAY", [False])
                g = D.bind(x, w, b, ref, s, s, p, p, p, p, 1, 1, True, None, e)
                assert g(x, w, b, ref, None, e)
                monkeypatch.setattr(D, "REPLAY", [True])
                assert np.array_equal(out, ref)
            # another input array: the calls are rebuilt for it
            x2 = RNG.standard_normal(x.shape).astype(np.float32)
            assert f(x2, w, b, out, None, e)
            want = _torch_conv(x2, w, b, s, p) + (0 if e is None else e)
            np.testing.assert_allclose(out, np.maximum(want, 0), rtol=1e-4, atol=1e-4)
    finally:
        threads.set_num_threads(old)


def test_jitted_cnn_matches_eager_over_calls():
    import neetorch as nee
    import neetorch.nn as nn
    nee.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1),
                      nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 8, 1)).eval()
    f = nee.jit(m)
    for it in range(4):
        x = nee.tensor(RNG.standard_normal((1, 3, 23, 21)).astype(np.float32))
        np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-4, atol=1e-4)
