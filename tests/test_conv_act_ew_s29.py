"""Session 29: SiLU, sigmoid, tanh, GELU (erf and tanh forms), Mish as conv activations.

A JIT epilogue after a conv2d whose activation is a unary elementwise op with a long computation (exp, erf, a
division: kernels/conv_act.py ``ew`` steps, :data:`conv_act.EW_OPS`) ran as a second pass over the conv's output.
Now the packed 1x1 kernel applies it in its per-task epilogue, and the depthwise kernels after each run of units
they write (``depthwise_native._unit_act``: the claim's outputs since the last pass, once they reach _ACT_RUN, and
at the claim's end), through llvm_render's elementwise kernel of the same expression: the same bits as the
epilogue's own kernel.  The direct conv kernels and the GEMM / Winograd paths keep the generic run.

Checked: bitwise equal to the unfused epilogue (the fusion switched off) on every conv kind, close to torch,
NaN / inf inputs, planes with one unit per pass and with many, many planes per claim, float64, the kernels given
the activation, and EfficientNet-style ONNX blocks (Conv, Sigmoid, Mul) against onnxruntime."""
import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F
from neetorch.devices.cpu.kernels import conv_act, depthwise_native
from test_conv_act_s28 import _t, _unfused      # (tests/ is on the path: the s28 file's helpers)

torch = pytest.importorskip("torch")
TF = torch.nn.functional
RNG = np.random.default_rng(29)
_SQRT2 = float(np.float32(np.sqrt(2)))

ACTS = {
    "silu": (F.silu, TF.silu),
    "x_sigmoid_x": (lambda y: y * nee.sigmoid(y), lambda y: y * torch.sigmoid(y)),
    "sigmoid": (nee.sigmoid, torch.sigmoid),
    "tanh": (nee.tanh, torch.tanh),
    "gelu": (F.gelu, TF.gelu),
    "gelu_tanh": (lambda y: F.gelu(y, approximate="tanh"), lambda y: TF.gelu(y, approximate="tanh")),
    # ONNX's Gelu decomposition: Div, Erf, Add, Mul by the input, Mul by 0.5 (one chain: div, ew, add, mulx, mul)
    "erf_gelu": (lambda y: (nee.erf(y / _SQRT2) + 1.0) * y * 0.5, lambda y: (torch.erf(y / _SQRT2) + 1.0) * y * 0.5),
    "mish": (F.mish, TF.mish),
    "bias_then_silu": (lambda y: F.silu(y + 0.25), lambda y: TF.silu(y + 0.25)),
}

CONVS = {   # (C, O, H, kernel, stride, groups)
    "dw3x3": (24, 24, 13, 3, 1, 24), "dw3x3s2": (16, 16, 28, 3, 2, 16), "dw5x5": (20, 20, 14, 5, 1, 20),
    "dw5x5s2": (8, 8, 19, 5, 2, 8), "pw_expand": (16, 96, 28, 1, 1, 1), "pw_squeeze": (96, 24, 14, 1, 1, 1),
    "stem3x3s2": (3, 16, 32, 3, 2, 1), "3x3": (16, 32, 14, 3, 1, 1),
}
TAKES = ("dw3x3", "dw3x3s2", "dw5x5", "dw5x5s2", "pw_expand")     # the kernels that apply the activation
DIRECT = ("stem3x3s2", "3x3")      # conv_direct's kernels: never given one (the generic run)


@pytest.fixture
def took(monkeypatch):
    """The heavy activations the depthwise / packed 1x1 kernels were given."""
    seen = []

    def spy(pos, orig, tag=None):
        def f(*a, **k):
            act = a[pos] if len(a) > pos else k.get("relu", False)
            if conv_act.heavy(act):
                seen.append(tag or conv_act.norm(act))
            return orig(*a, **k)
        return f
    monkeypatch.setattr(depthwise_native, "runner", spy(9, depthwise_native.runner))
    from neetorch.devices.cpu.kernels import conv1x1_packed as P
    monkeypatch.setattr(P, "conv2d", spy(5, P.conv2d))
    monkeypatch.setattr(P, "bind", spy(5, P.bind))
    from neetorch.devices.cpu.kernels import conv_direct as D
    monkeypatch.setattr(D, "conv2d", spy(12, D.conv2d, "direct"))
    monkeypatch.setattr(D, "bind", spy(12, D.bind, "direct"))
    return seen


def _conv_fn(C, O, H, k, s, g, act, dt=np.float32):
    wn = (RNG.standard_normal((O, C // g, k, k)) * (0.3 if k > 1 else 0.25)).astype(dt)
    bn = RNG.standard_normal(O).astype(dt)
    w, b = nee.tensor(wn), nee.tensor(bn)
    nf, tf = ACTS[act]

    def f(x):
        return nf(F.conv2d(x, w, b, stride=s, padding=k // 2, groups=g))

    def ref(xn):
        return tf(TF.conv2d(_t(xn), _t(wn), _t(bn), stride=s, padding=k // 2, groups=g)).numpy()
    return f, ref, (1, C, H, H)


def _check(f, ref, xs, dt=np.float32, runs=3, tol=3e-5):
    j = nee.jit(f)
    for k in range(runs):
        xn = (RNG.standard_normal(xs) * 2).astype(dt)
        if k == 1:
            xn.reshape(-1)[:4] = (np.nan, np.inf, -np.inf, 40.0)
        x = nee.tensor(xn)
        got = j(x).numpy()
        np.testing.assert_array_equal(got, _unfused(f, x))       # same bits as the epilogue's own kernel
        if k != 1:      # (torch's own values at inf differ by op: its vectorized gelu(inf) is NaN)
            np.testing.assert_allclose(got, ref(xn), rtol=tol, atol=tol)


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("conv", sorted(CONVS))
def test_heavy_activation_is_bitwise_the_epilogue(took, conv, act):
    f, ref, xs = _conv_fn(*CONVS[conv], act)
    _check(f, ref, xs)
    assert "direct" not in took
    if conv in TAKES:
        assert took, "the conv kernel was not given the activation"
    if conv in DIRECT:
        assert not took


@pytest.mark.parametrize("shape", [
    (32, 112, 3, 1),    # 112-wide rows: bands of several rows, a pass every few units
    (96, 112, 3, 2),    # the padded stride-2 kernel
    (144, 56, 3, 1),
    (672, 14, 5, 1),    # one small plane a unit: many units a pass, many planes a claim
    (1152, 7, 3, 1),
    (40, 9, 3, 1),
])
def test_depthwise_runs_of_units(took, nthreads, shape):
    """Planes whose units are larger and smaller than a pass's run, one claim or several per thread: every
    output gets the activation exactly once."""
    C, H, k, s = shape
    f, ref, xs = _conv_fn(C, C, H, k, s, C, "silu")
    _check(f, ref, xs, runs=2)
    assert took


def test_float64_depthwise(took):
    f, ref, xs = _conv_fn(6, 6, 11, 3, 1, 6, "silu", np.float64)
    _check(f, ref, xs, np.float64, tol=1e-12)
    assert took


def test_eager_is_unchanged():
    """Outside jit nothing is fused: eager conv then silu equals the jitted graph's values."""
    f, ref, xs = _conv_fn(16, 16, 20, 3, 1, 16, "silu")
    xn = RNG.standard_normal(xs).astype(np.float32)
    np.testing.assert_array_equal(f(nee.tensor(xn)).numpy(), nee.jit(f)(nee.tensor(xn)).numpy())


def test_link_adds_one_definition_per_activation():
    """conv_act.link appends the activation pass the kernel calls, once, with its own metadata numbers and no
    declaration the kernel already has."""
    lines = []
    act = (("ew", "f_sigmoid32({0})"), ("mulx", None))
    conv_act.unit_ir(lines.append, act, "float", "%out", "%s", "%e", "%go")
    conv_act.unit_ir(lines.append, act, "float", "%out", "%s2", "%e2", "%go")
    text = "\n".join(["declare float @llvm.fabs.f32(float)", "define void @\"kernel\"(float* %out, i64 %s, i64 %e, "
                      "i64 %s2, i64 %e2, i1 %go) {", "entry:"] + lines + ["  ret void", "}", "!0 = !{}"])
    out = conv_act.link(text)
    import re
    assert len(re.findall(r'define internal void @"nee_ewrow_[0-9a-f]+"\(', out)) == 1       # the wrapper
    assert len(re.findall(r'define internal void @"nee_ewrow_[0-9a-f]+\.k"\(', out)) == 1    # its kernel
    assert out.count("@llvm.fabs.f32(") + out.count("@\"llvm.fabs.f32\"(") >= 2     # (declared once, used)
    assert sum(1 for ln in out.splitlines() if ln.startswith("declare") and "fabs" in ln) == 1
    assert "!0 = !{}" in out and "\n!0 = distinct" not in out
    from neetorch.devices.cpu import llvm_render
    llvm_render._optimized(out, False)          # parses, verifies, optimizes
    assert conv_act.link("define void @f() {\n  ret void\n}\n") == "define void @f() {\n  ret void\n}\n"


def test_direct_kernels_refuse_a_heavy_activation_in_their_stores():
    with pytest.raises(ValueError, match="unit"):
        conv_act.apply_ir(lambda s: None, (("ew", "f_tanh32({0})"),), 16, "float", "%v", "x")


def _onnx_block(C, O, k, s, g, H):
    from onnx import TensorProto, helper, numpy_helper
    w = (RNG.standard_normal((O, C // g, k, k)) * 0.3).astype(np.float32)
    b = RNG.standard_normal(O).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[s, s],
                              pads=[k // 2] * 4, group=g),
             helper.make_node("Sigmoid", ["y"], ["sg"]), helper.make_node("Mul", ["y", "sg"], ["z"])]
    g_ = helper.make_graph(nodes, "blk", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
                           [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                           [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g_, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("blk", [(16, 96, 1, 1, 1, 28), (96, 96, 3, 2, 96, 28), (120, 120, 5, 1, 120, 14)])
def test_efficientnet_blocks_against_onnxruntime(took, blk):
    ort = pytest.importorskip("onnxruntime")
    model = _onnx_block(*blk)
    s = nee.onnx.InferenceSession(model)
    o = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for _ in range(3):
        xn = RNG.standard_normal((1, blk[0], blk[5], blk[5])).astype(np.float32)
        got = s.run(None, {"x": xn})[0]
        np.testing.assert_allclose(got, o.run(None, {"x": xn})[0], rtol=1e-4, atol=1e-5)
    assert took
