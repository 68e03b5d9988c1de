"""Session 28: activations other than relu run inside the depthwise and packed 1x1 conv kernels.

A JIT epilogue after a conv2d (bias / residual add, then an activation) ran its activation as a second pass over
the conv's output unless it was relu.  Now clip / relu6 / hardtanh / hardswish / hardsigmoid, ONNX's forms of
them (Max / Min by constants, ``x * clip(x / 6 + 0.5, 0, 1)``) and short chains of constant add / sub / mul / div
are steps (kernels/conv_act.py) the depthwise and direct kernels apply in their stores and the packed 1x1 kernel
in its per-task epilogue.  LeakyReLU (a 0-d slope) too.  Checked: the same bits as the epilogue's own kernel (the fusion switched off), torch's values,
NaN / inf inputs, constants that change, the kernels actually taking the steps, other convs keeping the generic
run, and MobileNetV2 / V3-style ONNX blocks against onnxruntime.  Also: maximum / minimum / clamp (whose kernels
were rewritten with one compare fewer) against torch on NaN, inf and signed zeros."""
import itertools

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F
from neetorch.devices.cpu.kernels import conv as K
from neetorch.devices.cpu.kernels import conv_act, depthwise_native, fused

torch = pytest.importorskip("torch")
TF = torch.nn.functional
RNG = np.random.default_rng(28)

_SIXTH = np.float32(1 / 6)
ACTS = {
    "relu6": (F.relu6, TF.relu6),
    "hardswish": (F.hardswish, TF.hardswish),
    "hardsigmoid": (F.hardsigmoid, TF.hardsigmoid),
    "hardtanh": (lambda y: F.hardtanh(y, -1.0, 2.0), lambda y: TF.hardtanh(y, -1.0, 2.0)),
    "onnx_hardswish": (lambda y: y * nee.clamp(y * float(_SIXTH) + 0.5, 0.0, 1.0),
                       lambda y: y * torch.clamp(y * float(_SIXTH) + 0.5, 0.0, 1.0)),
    "max_min": (lambda y: nee.minimum(nee.maximum(y, nee.tensor(np.float32(-0.5))), nee.tensor(np.float32(3.0))),
                lambda y: torch.minimum(torch.maximum(y, torch.tensor(-0.5)), torch.tensor(3.0))),
    "affine_relu": (lambda y: F.relu(y * 2.0 - 1.0) / 3.0, lambda y: TF.relu(y * 2.0 - 1.0) / 3.0),
    "relu_then_add": (lambda y: F.relu(y) + 1.0, lambda y: TF.relu(y) + 1.0),
    "clamp_inf": (lambda y: nee.clamp(y, -np.inf, 1.5), lambda y: torch.clamp(y, -np.inf, 1.5)),
    "leaky_relu": (lambda y: F.leaky_relu(y, 0.1), lambda y: TF.leaky_relu(y, 0.1)),
}

CONVS = {   # (C, O, H, kernel, stride, groups)
    "dw3x3": (24, 24, 13, 3, 1, 24), "dw3x3s2": (16, 16, 28, 3, 2, 16), "dw5x5": (20, 20, 14, 5, 1, 20),
    "dw5x5s2": (8, 8, 19, 5, 2, 8), "pw_expand": (16, 96, 28, 1, 1, 1), "pw_squeeze": (96, 24, 14, 1, 1, 1),
    "stem3x3s2": (3, 16, 32, 3, 2, 1), "3x3": (16, 32, 14, 3, 1, 1), "grouped3x3": (16, 32, 10, 3, 1, 4),
}


def _t(a):
    return torch.from_numpy(np.asarray(a))


@pytest.fixture
def took(monkeypatch):
    """The activations the depthwise / packed 1x1 kernels were given (unbound calls and binds)."""
    seen = []

    def spy(pos, orig):
        def f(*a, **k):
            act = a[pos] if len(a) > pos else k.get("relu", False)
            if act is not False and act is not True and not conv_act.is_relu(act):
                seen.append(conv_act.norm(act))
            return orig(*a, **k)
        return f
    monkeypatch.setattr(depthwise_native, "runner", spy(9, depthwise_native.runner))
    from neetorch.devices.cpu.kernels import conv1x1_packed as P
    from neetorch.devices.cpu.kernels import conv_direct as D
    monkeypatch.setattr(P, "conv2d", spy(5, P.conv2d))
    monkeypatch.setattr(P, "bind", spy(5, P.bind))
    monkeypatch.setattr(D, "conv2d", spy(12, D.conv2d))
    monkeypatch.setattr(D, "bind", spy(12, D.bind))
    return seen


def _conv_fn(name, act, resid=None):
    C, O, H, k, s, g = CONVS[name]
    wn = (RNG.standard_normal((O, C // g, k, k)) * (0.3 if k > 1 else 0.25)).astype(np.float32)
    bn = RNG.standard_normal(O).astype(np.float32)
    w, b = nee.tensor(wn), nee.tensor(bn)
    nf, tf = ACTS[act]
    rn = None if resid is None else RNG.standard_normal(resid).astype(np.float32)
    r = None if rn is None else nee.tensor(rn)

    def f(x):
        y = F.conv2d(x, w, b, stride=s, padding=k // 2, groups=g)
        return nf(y if r is None else y + r)

    def ref(xn):
        y = TF.conv2d(_t(xn), _t(wn), _t(bn), stride=s, padding=k // 2, groups=g)
        return tf(y if rn is None else y + _t(rn)).numpy()
    return f, ref, (1, C, H, H)


def _unfused(f, x):
    fused.CONV_EPILOGUE[0] = False
    try:
        return nee.jit(f)(x).numpy()
    finally:
        fused.CONV_EPILOGUE[0] = True


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("conv", sorted(CONVS))
def test_activation_in_the_conv_kernel_is_bitwise_the_epilogue(took, conv, act):
    f, ref, xs = _conv_fn(conv, act)
    j = nee.jit(f)
    for k in range(4):
        xn = (RNG.standard_normal(xs) * 2).astype(np.float32)
        if k == 2:
            xn[0, 0, 0, :3] = (np.nan, np.inf, -np.inf)
        x = nee.tensor(xn)
        got = j(x).numpy()
        np.testing.assert_array_equal(got, _unfused(f, x))       # same bits as the epilogue's own kernel
        np.testing.assert_allclose(got, ref(xn), rtol=2e-5, atol=2e-5)
    if act != "clamp_inf" or conv.startswith("dw"):    # (the packed 1x1 epilogue takes finite constants only)
        assert took, "the conv kernel was not given the activation"
        assert all(a and not conv_act.is_relu(a) for a in took)


@pytest.mark.parametrize("act", ["relu6", "hardswish", "onnx_hardswish"])
def test_residual_then_activation_on_the_packed_1x1_path(took, act):
    f, ref, xs = _conv_fn("pw_expand", act, resid=(1, 96, 28, 28))
    j = nee.jit(f)
    for _ in range(3):
        xn = RNG.standard_normal(xs).astype(np.float32)
        got = j(nee.tensor(xn)).numpy()
        np.testing.assert_array_equal(got, _unfused(f, nee.tensor(xn)))
        np.testing.assert_allclose(got, ref(xn), rtol=2e-5, atol=2e-5)
    assert took


@pytest.mark.parametrize("case", ["float64_3x3", "winograd"])
def test_other_convs_keep_the_generic_run(took, monkeypatch, case):
    """Convs on the GEMM / Winograd paths (float64, forced Winograd) run the conv, then the activation's pass:
    the same values, no kernel given the steps."""
    dt = np.float64 if case == "float64_3x3" else np.float32
    wn = (RNG.standard_normal((8, 4, 3, 3)) * 0.3).astype(dt)
    kw = {"padding": 1}
    if case == "winograd":
        monkeypatch.setattr(K, "_WINO_FORCE", ["2"])
        monkeypatch.setattr(K.conv_direct, "MODE", ["0"])
    w = nee.tensor(wn)
    fn = lambda x: F.hardswish(F.conv2d(x, w, **kw))       # noqa: E731
    f = nee.jit(fn)
    xn = RNG.standard_normal((1, 4, 9, 9)).astype(dt)
    for _ in range(3):
        got = f(nee.tensor(xn)).numpy()
    np.testing.assert_allclose(got, TF.hardswish(TF.conv2d(_t(xn), _t(wn), **kw)).numpy(), rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(got, _unfused(fn, nee.tensor(xn)))
    assert took == []


def test_float64_depthwise(took):
    wn = RNG.standard_normal((6, 1, 3, 3))
    w = nee.tensor(wn)
    f = lambda x: F.hardswish(F.conv2d(x, w, padding=1, groups=6))     # noqa: E731
    xn = RNG.standard_normal((1, 6, 11, 11)) * 3
    got = nee.jit(f)(nee.tensor(xn)).numpy()
    np.testing.assert_array_equal(got, _unfused(f, nee.tensor(xn)))
    np.testing.assert_allclose(got, TF.hardswish(TF.conv2d(_t(xn), _t(wn), padding=1, groups=6)).numpy(),
                               rtol=1e-12, atol=1e-12)
    assert took


def test_changed_constants_are_followed():
    """A 0-d tensor bound as the clamp's bound and written in place: the bound step (its constant in the
    kernel) declines and the run follows the new value, as the unfused graph does."""
    wn = (RNG.standard_normal((8, 1, 3, 3)) * 0.5).astype(np.float32)
    w, hi = nee.tensor(wn), nee.tensor(np.float32(0.5))
    f = lambda x: nee.clamp(F.conv2d(x, w, padding=1, groups=8), nee.tensor(np.float32(0.0)), hi)  # noqa: E731
    j = nee.jit(f)
    xn = RNG.standard_normal((1, 8, 10, 10)).astype(np.float32)
    for _ in range(3):
        a = j(nee.tensor(xn)).numpy()
    np.testing.assert_array_equal(a, _unfused(f, nee.tensor(xn)))
    hi.fill_(2.0)
    for _ in range(2):
        b = j(nee.tensor(xn)).numpy()
    np.testing.assert_array_equal(b, _unfused(f, nee.tensor(xn)))


def test_step_semantics_in_ir_match_the_scalar_functions():
    """conv_act's steps straight through the depthwise kernel (a 1-tap identity conv) against numpy's float32
    evaluation of the same steps on special values (NaN, infs, signed zeros, values at the bounds)."""
    vals = np.array([np.nan, -np.inf, -6.0, -3.0, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, 6.0, 7.0, np.inf], np.float32)
    row = np.tile(vals, 3)[:37]
    x = np.stack([row, np.zeros_like(row)]).reshape(1, 1, 2, -1)
    # a 2x1 window (1, -0.0) over (value, +0) and a -0.0 bias: value * 1 + (+0 * -0.0) + -0.0 = the value, exactly
    # (NaN, infs and both zeros kept)
    w = np.array([1.0, -0.0], np.float32).reshape(1, 1, 2, 1)
    b = np.array([-0.0], np.float32)
    steps = [(("max", 0.0), ("min", 6.0)), (("max", -0.0),), (("min", -1.0), ("max", 1.0)),
             (("add", 3.0), ("max", 0.0), ("min", 6.0), ("mulx", None), ("div", 6.0)),
             (("max", np.nan),), (("sub", 0.5), ("mul", -2.0), ("relu", None)), (("min", np.inf), ("max", -np.inf)),
             (("leaky", 0.1),), (("leaky", -0.0),)]

    def want(v, act):
        x0 = cur = v.copy()
        with np.errstate(all="ignore"):
            for kind, c in act:
                c = np.float32(c) if c is not None else None
                if kind == "relu":
                    cur = np.where(cur < 0, np.float32(0), cur)
                elif kind == "max":
                    cur = np.where(np.isnan(cur) | (c <= cur), cur, c)
                elif kind == "min":
                    cur = np.where(np.isnan(cur) | (c >= cur), cur, c)
                elif kind == "mulx":
                    cur = x0 * cur
                elif kind == "leaky":
                    cur = np.where(cur > 0, cur, cur * c)
                else:
                    cur = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[kind](cur, c)
        return cur.astype(np.float32)
    for act in steps:
        res = np.empty((1, 1, 1, x.shape[3]), np.float32)
        assert depthwise_native.conv2d(x, w, b, res, 1, 1, 0, 0, 1, 1, act)
        exp = want(x[:, :, :1], act)
        np.testing.assert_array_equal(res, exp)
        assert np.array_equal(np.signbit(res[~np.isnan(res)]), np.signbit(exp[~np.isnan(exp)])), act


def test_conv_act_norm_and_tags():
    assert conv_act.norm((("relu", None),)) is True and conv_act.norm(True) is True and conv_act.norm(False) is False
    assert conv_act.steps(True) == (("relu", None),) and conv_act.steps(False) == ()
    assert conv_act.tag(True) == "r" == conv_act.tag((("relu", None),)) and conv_act.tag(None) == ""
    a, b = conv_act.tag((("max", 0.0), ("min", 6.0))), conv_act.tag((("max", 0.0), ("min", 6.5)))
    assert a != b and a.startswith("a")
    with pytest.raises(ValueError, match="unknown step"):
        conv_act.norm((("tanh", None),))


# ---------------------------------------------------------------- maximum / minimum / clamp's kernels
_SPECIAL = np.array([np.nan, -np.inf, -1.5, -0.0, 0.0, 2.0, np.inf], np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_maximum_minimum_special_values(dtype):
    A, B = (np.array(v, dtype) for v in zip(*itertools.product(_SPECIAL, _SPECIAL)))
    for fn in ("maximum", "minimum"):
        want = getattr(torch, fn)(_t(A), _t(B)).numpy()
        for got in (getattr(nee, fn)(nee.tensor(A), nee.tensor(B)).numpy(),
                    nee.jit(lambda a, b, fn=fn: getattr(nee, fn)(a * 1.0, b))(nee.tensor(A), nee.tensor(B)).numpy()):
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            ok = ~np.isnan(want)
            np.testing.assert_array_equal(got[ok], want[ok])       # (== : torch's zero signs vary by path)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lo,hi", [(0.0, 6.0), (-1.0, 1.0), (2.0, 1.0), (-0.0, 0.0), (0.0, -0.0), (-np.inf, 0.0)])
def test_clamp_special_values_and_zero_signs(dtype, lo, hi):
    x = _SPECIAL.astype(dtype)
    want = torch.clamp(_t(x), lo, hi).numpy()
    jitted = nee.jit(lambda t: nee.clamp(t * 1.0, lo, hi))(nee.tensor(x)).numpy()
    for got in (nee.clamp(nee.tensor(x), lo, hi).numpy(), jitted,
                F.hardtanh(nee.tensor(x), lo, hi).numpy() if lo <= hi else want):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(got[ok], want[ok])
        np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))


# ---------------------------------------------------------------- ONNX blocks against onnxruntime
def _mbv2_model(C, E, H, act):
    from onnx import TensorProto, helper, numpy_helper
    r = np.random.default_rng(5)
    init = [numpy_helper.from_array((r.standard_normal((E, C, 1, 1)) * 0.3).astype(np.float32), "w1"),
            numpy_helper.from_array(r.standard_normal(E).astype(np.float32), "b1"),
            numpy_helper.from_array((r.standard_normal((E, 1, 3, 3)) * 0.3).astype(np.float32), "w2"),
            numpy_helper.from_array(r.standard_normal(E).astype(np.float32), "b2"),
            numpy_helper.from_array((r.standard_normal((C, E, 1, 1)) * 0.3).astype(np.float32), "w3"),
            numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
            numpy_helper.from_array(np.array(6.0, np.float32), "hi")]

    def a(inp, out):
        if act == "clip":
            return [helper.make_node("Clip", [inp, "lo", "hi"], [out])]
        if act == "leakyrelu":
            return [helper.make_node("LeakyRelu", [inp], [out], alpha=0.2)]
        return [helper.make_node("HardSwish", [inp], [out])]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"])] + a("c1", "a1") + \
        [helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], group=E, pads=[1, 1, 1, 1])] + a("c2", "a2") + \
        [helper.make_node("Conv", ["a2", "w3"], ["c3"]), helper.make_node("Add", ["c3", "x"], ["y"])]
    g = helper.make_graph(nodes, "blk", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, H, H])], init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("act", ["clip", "hardswish", "leakyrelu"])
def test_mobilenet_block_session_matches_onnxruntime(took, act):
    ort = pytest.importorskip("onnxruntime")
    m = _mbv2_model(16, 96, 28, act)
    s = nee.onnx.InferenceSession(m.SerializeToString())
    o = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for k in range(3):
        xn = RNG.standard_normal((1, 16, 28, 28)).astype(np.float32)
        if k == 1:
            xn[0, 3, 5, 5] = np.nan
        got, = s.run(None, {"x": xn})
        want, = o.run(None, {"x": xn})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(took) >= 2          # the expand 1x1 and the depthwise conv took the activation
