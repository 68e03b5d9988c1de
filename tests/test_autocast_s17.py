"""nee.autocast against torch.autocast on the CPU: which ops run in the lower precision, which are kept in float32,
which follow their inputs; float64 untouched, nesting, decorator form, and jit / compile keyed on the state."""
import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

rng = np.random.default_rng(0)
A, B = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((6, 5)).astype(np.float32)
A3, B3 = rng.standard_normal((2, 4, 6)).astype(np.float32), rng.standard_normal((2, 6, 5)).astype(np.float32)
X4, W4 = rng.standard_normal((1, 3, 7, 7)).astype(np.float32), rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
BIAS = rng.standard_normal(5).astype(np.float32)

CASES = {
    "matmul_op": lambda m, f, a, b: a @ b,
    "mm": lambda m, f, a, b: m.mm(a, b),
    "method_mm": lambda m, f, a, b: a.mm(b),
    "addmm": lambda m, f, a, b: m.addmm(m.ones(4, 5), a, b),
    "linear": lambda m, f, a, b: f.linear(a, b.t(), m.ones(5)),
    "relu_of_matmul": lambda m, f, a, b: (a @ b).relu() + 1,
    "add_mixed": lambda m, f, a, b: (a @ b) + m.ones(4, 5),        # promote: bf16 + f32 -> f32
    "softmax_after": lambda m, f, a, b: (a @ b).softmax(-1),
    "cross_entropy": lambda m, f, a, b: f.cross_entropy(a @ b, m.tensor([0, 1, 2, 3])),
    "mse_loss": lambda m, f, a, b: f.mse_loss(a @ b, m.zeros(4, 5)),
    "prod": lambda m, f, a, b: m.prod((a @ b) * 0.1 + 1, 1),
    "double": lambda m, f, a, b: a.double() @ b.double(),
}


@pytest.mark.parametrize("name, dtype", [(n, "bfloat16") for n in CASES] +
                         [(n, "float16") for n in ("linear", "add_mixed", "cross_entropy", "double")])
def test_op_dtypes_and_values_follow_torch(name, dtype):
    fn = CASES[name]
    with torch.autocast("cpu", dtype=getattr(torch, dtype)):
        want = fn(torch, TF, torch.from_numpy(A), torch.from_numpy(B))
    with nee.autocast("cpu", dtype=getattr(nee, dtype)):
        got = fn(nee, F, nee.from_numpy(A), nee.from_numpy(B))
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], (name, got.dtype, want.dtype)
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=2e-2, atol=3e-2)


def _batched_and_conv(m, f):
    t = m.from_numpy
    return [m.bmm(t(A3), t(B3)), m.baddbmm(m.zeros(2, 4, 5), t(A3), t(B3)), f.conv2d(t(X4), t(W4)),
            f.conv_transpose2d(t(X4), t(W4).transpose(0, 1)), f.prelu(t(X4), m.full((3,), 0.25)),
            f.scaled_dot_product_attention(t(A3), t(A3), t(A3))]


def test_bmm_baddbmm_conv_prelu_sdpa():
    with torch.autocast("cpu"):
        w = _batched_and_conv(torch, TF)
    with nee.autocast("cpu"):
        g = _batched_and_conv(nee, F)
    for a, b in zip(g, w):
        assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1]
        np.testing.assert_allclose(a.float().numpy(), b.float().numpy(), rtol=3e-2, atol=5e-2)


def test_nesting_decorator_state_and_bad_dtype():
    a, b = nee.from_numpy(A), nee.from_numpy(B)
    assert not nee.is_autocast_enabled("cpu")
    with nee.autocast("cpu"):
        assert nee.is_autocast_enabled("cpu") and nee.get_autocast_dtype("cpu") is nee.bfloat16
        with nee.autocast("cpu", enabled=False):
            assert (a @ b).dtype is nee.float32
        assert (a @ b).dtype is nee.bfloat16
    assert (a @ b).dtype is nee.float32

    @nee.autocast("cpu", dtype=nee.float16)
    def f(x, y):
        return x @ y
    assert f(a, b).dtype is nee.float16 and (a @ b).dtype is nee.float32
    with pytest.warns(UserWarning, match="not supported"):
        with nee.autocast("cpu", dtype=nee.float32):
            assert (a @ b).dtype is nee.float32
    with pytest.raises(RuntimeError, match="unsupported autocast device_type"):
        nee.autocast("tpu9")


def test_compiled_functions_specialize_on_the_autocast_state():
    a, b = nee.from_numpy(A), nee.from_numpy(B)
    f = nee.jit(lambda x, y: (x @ y).relu())
    assert f(a, b).dtype is nee.float32
    with nee.autocast("cpu"):
        assert f(a, b).dtype is nee.bfloat16
        assert f(a, b).dtype is nee.bfloat16
    assert f(a, b).dtype is nee.float32
    assert f.stats["specializations"] == 2
