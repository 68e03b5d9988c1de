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
