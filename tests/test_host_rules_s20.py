"""Session 20 (AMD Zen 5, AVX-512): host-dependent path choices.

* conv1x1_packed's fused path (epilogue in the tile stores) is taken by default only where the packed kernels run
  8 lanes (AVX2 hosts, where it was measured to win); on 16-lane (AVX-512) hosts it lost 1.6-1.9x to the unfused
  tasks and conv_direct's kernel (Zen 5).  NEE_CONV_PK1X1_FUSED=1 / 0 (FUSED[0] True / False) forces it either way.
"""
import numpy as np
import pytest

from neetorch.devices.cpu.kernels import conv as CV
from neetorch.devices.cpu.kernels import conv1x1_packed as P
from neetorch.devices.cpu.kernels import linalg as L


def test_fused_path_default_follows_the_kernel_width(monkeypatch):
    rs = (1, 256, 56, 56)
    monkeypatch.setattr(P, "FUSED", [None])
    assert P._fused_for(rs, (1, 1)) == (P.available() and L.PK_VEC == 8)
    monkeypatch.setattr(L, "PK_VEC", 8)
    assert P._fused_for(rs, (1, 1)) == P.available()
    monkeypatch.setattr(L, "PK_VEC", 16)
    assert not P._fused_for(rs, (1, 1))
    monkeypatch.setattr(P, "FUSED", [True])
    assert P._fused_for(rs, (1, 1)) and not P._fused_for((1, 256, 7, 7), (1, 1))    # (_FUSED_MIN_L: 784 pixels)
    monkeypatch.setattr(P, "FUSED", [False])
    assert not P._fused_for(rs, (1, 1))


@pytest.mark.parametrize("fused", [None, True, False])
def test_resnet_1x1_right_whichever_path(fused, monkeypatch):
    # ResNet-50's 64 -> 256 expand on 56x56 + bias + residual + relu and its stride-2 downsample, each setting
    monkeypatch.setattr(P, "FUSED", [fused])
    monkeypatch.setattr(P, "_pays", {})
    monkeypatch.setattr(P, "_plans", {})
    rng = np.random.default_rng(20)
    for (C, O, H, s) in [(64, 256, 56, 1), (256, 512, 56, 2)]:
        x = rng.standard_normal((1, C, H, H)).astype(np.float32)
        w = (rng.standard_normal((O, C, 1, 1)) / np.sqrt(C)).astype(np.float32)
        b = rng.standard_normal(O).astype(np.float32)
        OH = (H - 1) // s + 1
        e = rng.standard_normal((1, O, OH, OH)).astype(np.float32)
        out = np.full((1, O, OH, OH), np.nan, np.float32)
        CV.conv2d_into(out, [x, w, b], dict(stride=(s, s), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1),
                       e=e, relu=True)
        want = np.einsum("chw,oc->ohw", x[0, :, ::s, ::s].astype(np.float64), w[:, :, 0, 0].astype(np.float64))
        want = np.maximum(want + b[:, None, None] + e[0], 0)
        np.testing.assert_allclose(out[0], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("sub", [True, False])
@pytest.mark.parametrize("N,C,O,H,W,G,st", [(1, 256, 512, 56, 56, 1, (2, 2)), (2, 24, 40, 13, 11, 2, (2, 3)),
                                            (1, 33, 17, 9, 9, 1, (3, 1)), (1, 16, 64, 1, 1, 1, (2, 2))])
def test_strided_1x1_subsampled_matches_torch(sub, N, C, O, H, W, G, st, monkeypatch):
    # strided unpadded 1x1 convs run as the stride-1 conv of the subsampled input (conv._strided_1x1) unless the
    # packed path takes them strided; NEE_CONV_SUB1X1=0 (False): the GEMM path.  Bias, a second bias, residual, relu
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(CV, "_SUB1X1", [sub])
    rng = np.random.default_rng(21)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = (rng.standard_normal((O, C // G, 1, 1)) / np.sqrt(C)).astype(np.float32)
    b, b2 = rng.standard_normal(O).astype(np.float32), rng.standard_normal(O).astype(np.float32)
    OH, OW = (H - 1) // st[0] + 1, (W - 1) // st[1] + 1
    e = rng.standard_normal((N, O, OH, OW)).astype(np.float32)
    t = lambda a: torch.from_numpy(a.astype(np.float64))
    want = torch.relu(torch.nn.functional.conv2d(t(x), t(w), t(b + 0.0) + t(b2), st, groups=G) + t(e)).numpy()
    out = np.full((N, O, OH, OW), np.nan, np.float32)
    CV.conv2d_into(out, [x, w, b], dict(stride=st, padding=(0, 0, 0, 0), dilation=(1, 1), groups=G), b2=b2, e=e,
                   relu=True)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_small_plane_big_k_1x1_goes_direct_on_16_lanes_unless_a_prologue(monkeypatch):
    # conv1x1_packed._PK16_MIN_L / _PK16_MIN_K: on 16 lanes the 14x14 / 7x7 1x1s of 256+ input channels that
    # conv_direct's rule takes run there; with an input prologue (fused only into the packed kernel) they stay packed
    from neetorch.devices.cpu.kernels import conv_direct as D
    if not P.available():
        pytest.skip("no packed 1x1 kernel on this host")
    monkeypatch.setattr(P, "_pays", {})
    monkeypatch.setattr(P, "FUSED", [False])
    xs, ws, rs = (1, 576, 14, 14), (192, 576, 1, 1), (1, 192, 14, 14)     # (Inception v2's)
    args = (xs, ws, rs, 1, 1, 0, 0, 0, 0, 1)
    monkeypatch.setattr(L, "PK_VEC", 8)
    assert P.pays(*args) and P.pays(*args, True)
    monkeypatch.setattr(L, "PK_VEC", 16)
    monkeypatch.setattr(P, "_pays", {})
    assert P.pays(*args) == (not D.takes_1x1(xs, ws, rs, 1, 1, 1))
    assert P.pays(*args, True)
    # under 256 input channels (the direct kernel's small 1x1s are not all chained): packed
    small = ((1, 192, 14, 14), (192, 192, 1, 1), (1, 192, 14, 14), 1, 1, 0, 0, 0, 0, 1)
    assert P.pays(*small)
