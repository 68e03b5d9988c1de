"""conv_direct's "chan" kernel prefetches its weights ahead (params word _C_WPF, conv_direct.WPF; session 21): the
word is set in the "chan" layouts (0 in the depthwise ones), and a prefetch never changes a result (same bits with
it off, on and at another distance, against torch to float32 accuracy)."""
import numpy as np
import pytest

from neetorch.devices.cpu.kernels import conv_direct as D

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not D.available(), reason="conv_direct's kernel needs AVX-512F or AVX2+FMA")

RNG = np.random.default_rng(2121)


def _conv(x, w, b, pads, groups=1):
    OH = x.shape[2] + pads[0] + pads[1] - w.shape[2] + 1
    OW = x.shape[3] + pads[2] + pads[3] - w.shape[3] + 1
    out = np.full((x.shape[0], w.shape[0], OH, OW), np.nan, np.float32)
    assert D.conv2d(x, w, b, out, 1, 1, *pads, 1, 1, True)
    return out


@pytest.mark.parametrize("shape", [((1, 40, 9, 11), 70, 3), ((2, 256, 7, 7), 96, 3), ((1, 300, 5, 6), 33, 1)])
def test_prefetch_distance_never_changes_bits(monkeypatch, shape):
    xs, o, k = shape
    x = RNG.standard_normal(xs).astype(np.float32)
    w = (RNG.standard_normal((o, xs[1], k, k)) / np.sqrt(xs[1] * k * k)).astype(np.float32)
    b = RNG.standard_normal(o).astype(np.float32)
    p = (k // 2,) * 4
    outs = []
    monkeypatch.setattr(D, "FORCE", ["chan"])
    for dist in (0, 512, 48):
        monkeypatch.setattr(D, "WPF", [dist])
        D._layouts.clear()
        outs.append(_conv(x, w, b, p))
        lay = next(iter(D._layouts.values()))
        assert lay.kind == "chan" and lay.base[D._C_WPF] == dist
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    t = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)),
                                   torch.from_numpy(b.astype(np.float64)), padding=k // 2).relu().numpy()
    np.testing.assert_allclose(outs[0], t, rtol=2e-5, atol=2e-5)
    D._layouts.clear()


def test_depthwise_layout_has_no_weight_prefetch():
    x = RNG.standard_normal((1, 64, 6, 6)).astype(np.float32)
    w = RNG.standard_normal((64, 1, 3, 3)).astype(np.float32)
    D._layouts.clear()
    out = np.empty((1, 64, 6, 6), np.float32)
    assert D.conv2d(x, w, None, out, 1, 1, 1, 1, 1, 1, 1, 1)
    lay = next(iter(D._layouts.values()))
    assert lay.kind == "dw" and lay.base[D._C_WPF] == 0
    D._layouts.clear()
