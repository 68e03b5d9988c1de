"""Session 21: on the 16-lane (AVX-512) kernels the big 1x1 products with an input prologue (DenseNet's bn-relu-conv
of 128 outputs on 56x56 / 28x28, 77-205 MFLOP) stay on the packed kernel, their prologue fused (they went to the GEMM
after a separate bn-relu pass); without a prologue the rule is unchanged, and on the 8-lane kernels too."""
import numpy as np
import pytest

from neetorch.devices.cpu.kernels import conv1x1_packed as PK
from neetorch.devices.cpu.kernels import linalg

from test_resnet_s18 import _args, _bn_relu_conv, _run_jit, _torch_ref, pre_calls  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(not PK.available(), reason="no packed 1x1 kernel on this host")

BIG = [(1, 224, 128, 56, 56), (1, 512, 128, 28, 28), (1, 96, 128, 56, 56)]


@pytest.mark.parametrize("shape", BIG)
def test_rule(shape):
    N, C, O, H, W = shape
    xs, ws, rs = (N, C, H, W), (O, C, 1, 1), (N, O, H, W)
    assert 2.0 * O * C * H * W >= PK._BIG_FLOPS and H * W >= PK._BIG_MIN_L
    PK._pays.clear()
    with_pre = PK.pays(xs, ws, rs, 1, 1, 0, 0, 0, 0, 1, True)
    assert with_pre == (linalg.PK_VEC == 16 or PK._fused_for(rs, (1, 1)))
    assert PK.pays(xs, ws, rs, 1, 1, 0, 0, 0, 0, 1, False) == bool(PK._fused_for(rs, (1, 1)))


@pytest.mark.parametrize("shape", BIG[1:])
def test_jit_big_bn_relu_conv1x1(pre_calls, shape):  # noqa: F811 - the fixture
    args = _args(*shape)
    out = _run_jit(_bn_relu_conv, args, epi=True)
    ref, _ = _torch_ref(args, True)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    N, C, O, H, W = shape
    if PK.pays((N, C, H, W), (O, C, 1, 1), (N, O, H, W), 1, 1, 0, 0, 0, 0, 1, True):
        assert pre_calls and all(c == ("mul", "add", "mul", "add", "relu") for c in pre_calls)
    else:
        assert not pre_calls
