"""Review s29 (helper h3): adversarial checks of the session's conv activations, packed / tiny products, topk
scan, constant Gather, native step chain and register pools, with tests for the bugs found.

Bug 1 (conv_epilogue._act_node): hardswish's steps end in ``("mulx", None)`` -- conv_act's ``x * v`` where x
is the chain's value before its FIRST activation step -- but hardswish(t) = t * relu6(t + 3) / 6 multiplies by
its own input t.  When any step came before it (``hardswish(conv(x) + 0.5)``, ``hardswish(relu(conv))``,
``hardswish(silu(conv))``: a heavy 'ew' step then hardswish), the fused kernel multiplied by the conv's
output instead of t: off by up to ~0.5 from the unfused run and torch.  Now such a hardswish is not fused into
the conv (the generic epilogue runs it)."""
import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F
from neetorch.devices.cpu.kernels import fused

torch = pytest.importorskip("torch")
TF = torch.nn.functional
RNG = np.random.default_rng(2903)


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _unfused(f, *xs):
    fused.CONV_EPILOGUE[0] = False
    try:
        return nee.jit(f)(*xs).numpy()
    finally:
        fused.CONV_EPILOGUE[0] = True


# ---- bug 1: hardswish after another activation step in a conv epilogue
HS_CHAINS = {
    "add_hs": (lambda y: F.hardswish(y + 0.5), lambda y: TF.hardswish(y + 0.5)),
    "mul_hs": (lambda y: F.hardswish(y * 0.5), lambda y: TF.hardswish(y * 0.5)),
    "relu_hs": (lambda y: F.hardswish(nee.relu(y)), lambda y: TF.hardswish(torch.relu(y))),
    "silu_hs": (lambda y: F.hardswish(F.silu(y)), lambda y: TF.hardswish(TF.silu(y))),
    "hs_hs": (lambda y: F.hardswish(F.hardswish(y)), lambda y: TF.hardswish(TF.hardswish(y))),
    "hs": (F.hardswish, TF.hardswish),
}
HS_CONVS = {    # (C, O, H, kernel, stride, groups)
    "dw3x3": (8, 8, 13, 3, 1, 8), "dw7x7s2": (8, 8, 13, 7, 2, 8), "dw7x7_1x1": (8, 8, 1, 7, 1, 8),
    "pw": (16, 48, 14, 1, 1, 1), "3x3": (16, 32, 14, 3, 1, 1),
}


@pytest.mark.parametrize("chain", sorted(HS_CHAINS))
@pytest.mark.parametrize("conv", sorted(HS_CONVS))
def test_hardswish_after_another_step_in_a_conv_epilogue(conv, chain):
    C, O, H, k, s, g = HS_CONVS[conv]
    wn = (RNG.standard_normal((O, C // g, k, k)) * 0.3).astype(np.float32)
    bn = RNG.standard_normal(O).astype(np.float32)
    w, b = nee.tensor(wn), nee.tensor(bn)
    nf, tf = HS_CHAINS[chain]

    def f(x):
        return nf(F.conv2d(x, w, b, stride=s, padding=k // 2, groups=g))

    j = nee.jit(f)
    for _ in range(2):
        xn = (RNG.standard_normal((1, C, H, H)) * 2).astype(np.float32)
        x = nee.tensor(xn)
        got = j(x).numpy()
        ref = tf(TF.conv2d(_t(xn), _t(wn), _t(bn), stride=s, padding=k // 2, groups=g)).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got, _unfused(f, x))
