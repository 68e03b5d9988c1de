"""The steps of MobileNetV3 / EfficientNet-style blocks (session 27):

* ``passes.pointwise_convs_as_matmuls``: a 1x1 conv over a 1x1 plane (squeeze-and-excitation's two convs) becomes a
  matmul step whose bias and activation are its GEMM epilogue;
* ``fused._conv_then_epilogue_binder``: a conv with an elementwise epilogue the conv kernels do not run inside
  (hardswish, SiLU, clip) is bound per layout (conv, then the epilogue's launch) instead of dispatched every call;
* ``conv_direct.route``: a "squeeze" 1x1 (few output channels, many inputs) the direct kernel declines goes to the
  packed 1x1 kernel, not the GEMM.

All checked against torch (float64 references) on every call, and an ONNX session against onnxruntime."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv as K
from neetorch.devices.cpu.kernels import conv1x1_packed as PK
from neetorch.devices.cpu.kernels import conv_direct as D

torch = pytest.importorskip("torch")
TF = torch.nn.functional
F = nee.nn.functional
RNG = np.random.default_rng(27)


def _t(a):
    return torch.from_numpy(np.asarray(a, np.float64))


def _stages(fn, *args):
    """{stage name: the graph's text after it} of ``nee.jit(fn).explain(*args)``."""
    text = nee.jit(fn).explain(*args)
    out, name = {}, None
    for line in text.splitlines():
        if line.startswith("== after "):
            name = line[len("== after "):].strip()
            out[name] = []
        elif name is not None:
            out[name].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


# ---------------------------------------------------------------- 1x1 convs over a 1x1 plane as matmuls
@pytest.mark.parametrize("N", [1, 3])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pointwise_conv_on_a_1x1_plane_is_a_matmul_step(N, bias, dtype):
    C, O = 24, 40
    wn = RNG.standard_normal((O, C, 1, 1)).astype(dtype)
    bn = RNG.standard_normal(O).astype(dtype) if bias else None
    w, b = nee.tensor(wn), (nee.tensor(bn) if bias else None)

    def se(x):    # squeeze-and-excitation's gate: pool, conv, relu, conv, hardsigmoid, scale
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(F.conv2d(F.relu(F.conv2d(s, w, b)), w2))

    w2n = RNG.standard_normal((C, O, 1, 1)).astype(dtype)
    w2 = nee.tensor(w2n)
    x0 = RNG.standard_normal((N, C, 5, 5)).astype(dtype)
    st = _stages(se, nee.tensor(x0))
    assert "conv2d" in st["dce"] and "conv2d" not in st["pointwise_convs_as_matmuls"]
    assert st["pointwise_convs_as_matmuls"].count("matmul(") == 2
    f = nee.jit(se)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for k in range(4):
        xn = RNG.standard_normal((N, C, 5, 5)).astype(dtype)
        got = f(nee.tensor(xn))
        s = TF.adaptive_avg_pool2d(_t(xn), 1)
        ref = _t(xn) * TF.hardsigmoid(TF.conv2d(TF.relu(TF.conv2d(s, _t(wn), None if bn is None else _t(bn))),
                                                _t(w2n)))
        assert got.dtype.name == dtype and tuple(got.shape) == (N, C, 5, 5)
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=tol, atol=tol)


def test_pointwise_conv_follows_weights_written_in_place():
    wn = RNG.standard_normal((6, 10, 1, 1)).astype(np.float32)
    w, b = nee.tensor(wn.copy()), nee.tensor(np.zeros(6, np.float32))
    f = nee.jit(lambda x: F.conv2d(x, w, b))
    x = RNG.standard_normal((1, 10, 1, 1)).astype(np.float32)
    np.testing.assert_allclose(f(nee.tensor(x)).numpy().reshape(-1), wn[:, :, 0, 0] @ x.reshape(-1), rtol=1e-5)
    w.mul_(2.0)
    b.add_(1.0)
    np.testing.assert_allclose(f(nee.tensor(x)).numpy().reshape(-1), 2 * wn[:, :, 0, 0] @ x.reshape(-1) + 1,
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", [
    dict(x=(1, 8, 1, 1), w=(4, 8, 1, 1), padding=1),            # padded: a 3x3 output
    dict(x=(1, 8, 1, 1), w=(8, 1, 1, 1), groups=8),             # grouped
    dict(x=(1, 8, 2, 2), w=(4, 8, 1, 1)),                       # a 2x2 plane
    dict(x=(1, 8, 3, 3), w=(4, 8, 3, 3)),                       # a 3x3 kernel to a 1x1 plane
])
def test_other_convs_stay_convs(case):
    wn = RNG.standard_normal(case["w"]).astype(np.float32)
    w = nee.tensor(wn)
    kw = {k: v for k, v in case.items() if k in ("padding", "groups")}
    fn = lambda x: F.conv2d(x, w, **kw)  # noqa: E731
    xn = RNG.standard_normal(case["x"]).astype(np.float32)
    assert "conv2d(" in _stages(fn, nee.tensor(xn))["pointwise_convs_as_matmuls"]
    ref = TF.conv2d(_t(xn), _t(wn), **kw).numpy()
    np.testing.assert_allclose(nee.jit(fn)(nee.tensor(xn)).numpy(), ref, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- conv + an epilogue the conv kernels don't run
@pytest.fixture
def into_calls(monkeypatch):
    c = [0]
    orig = K.conv2d_into

    def into(*a, **k):
        c[0] += 1
        return orig(*a, **k)
    monkeypatch.setattr(K, "conv2d_into", into)
    return c


_ACTS = {"hardswish": (F.hardswish, TF.hardswish), "silu": (F.silu, TF.silu),
         "relu6": (F.relu6, TF.relu6), "hardsigmoid": (F.hardsigmoid, TF.hardsigmoid)}


@pytest.mark.parametrize("act", sorted(_ACTS))
@pytest.mark.parametrize("conv", ["1x1", "dw5x5", "dw3x3s2", "3x3"])
def test_conv_with_activation_bound_and_right(into_calls, act, conv):
    C, H = 40, 14
    if conv == "1x1":
        wn, kw = RNG.standard_normal((96, C, 1, 1)), {}
    elif conv == "3x3":
        wn, kw = RNG.standard_normal((32, C, 3, 3)), {"padding": 1}
    elif conv == "dw5x5":
        wn, kw = RNG.standard_normal((C, 1, 5, 5)), {"padding": 2, "groups": C}
    else:
        wn, kw = RNG.standard_normal((C, 1, 3, 3)), {"padding": 1, "stride": 2, "groups": C}
    wn = (wn * 0.2).astype(np.float32)
    bn = RNG.standard_normal(wn.shape[0]).astype(np.float32)
    w, b = nee.tensor(wn), nee.tensor(bn)
    nf, tf = _ACTS[act]
    f = nee.jit(lambda x: nf(F.conv2d(x, w, b, **kw)))
    for k in range(5):
        xn = RNG.standard_normal((1, C, H, H)).astype(np.float32)
        if k == 3:
            xn[0, 0, 0, :3] = (np.nan, np.inf, -np.inf)
        before = into_calls[0]
        got = f(nee.tensor(xn)).numpy()
        if k >= 2:      # bound after the first calls: no conv2d_into dispatch
            assert into_calls[0] == before, f"call {k} went through conv2d_into"
        ref = tf(TF.conv2d(_t(xn), _t(wn), _t(bn), **kw)).numpy()
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5)
    w.mul_(-1.0)     # weights written in place: the bound step follows them
    xn = RNG.standard_normal((1, C, H, H)).astype(np.float32)
    ref = tf(TF.conv2d(_t(xn), _t(-wn), _t(bn), **kw)).numpy()
    np.testing.assert_allclose(f(nee.tensor(xn)).numpy(), ref, rtol=2e-5, atol=2e-5)


def test_bound_conv_epilogue_from_two_threads():
    from concurrent.futures import ThreadPoolExecutor
    wn = (RNG.standard_normal((64, 24, 1, 1)) * 0.2).astype(np.float32)
    w = nee.tensor(wn)
    f = nee.jit(lambda x: F.hardswish(F.conv2d(x, w)))
    xs = [RNG.standard_normal((1, 24, 14, 14)).astype(np.float32) for _ in range(6)]
    refs = [TF.hardswish(TF.conv2d(_t(x), _t(wn))).numpy() for x in xs]

    def job(i):
        for _ in range(20):
            np.testing.assert_allclose(f(nee.tensor(xs[i])).numpy(), refs[i], rtol=2e-5, atol=2e-5)
    with ThreadPoolExecutor(3) as ex:
        list(ex.map(job, range(6)))


# ---------------------------------------------------------------- squeezes the direct kernel declines
@pytest.mark.parametrize("shape", [(240, 40, 14), (576, 24, 14), (960, 40, 7), (384, 16, 13)])
@pytest.mark.parametrize("epi", ["res", "relu", "none"])
def test_squeeze_the_direct_kernel_declines_takes_the_packed_kernel(shape, epi):
    if not PK.available():
        pytest.skip("no packed 1x1 kernel on this host")
    Ci, O, H = shape
    x = RNG.standard_normal((1, Ci, H, H)).astype(np.float32)
    w = (RNG.standard_normal((O, Ci, 1, 1)) * 0.1).astype(np.float32)
    b = RNG.standard_normal(O).astype(np.float32)
    out = np.empty((1, O, H, H), np.float32)
    e = RNG.standard_normal(out.shape).astype(np.float32) if epi == "res" else None
    attrs = dict(stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)
    assert not PK.pays(x.shape, w.shape, out.shape, 1, 1, 0, 0, 0, 0, 1)      # a squeeze to the packed rule
    assert D.route(x, w, out, attrs, True) == "pk1x1"
    K.conv2d_into(out, [x, w, b], attrs, None, e, epi == "relu")
    ref = TF.conv2d(_t(x), _t(w), _t(b))
    if e is not None:
        ref = ref + _t(e)
    if epi == "relu":
        ref = TF.relu(ref)
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- a MobileNetV3 block through ONNX
def test_mobilenet_v3_block_session_matches_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    nn = torch.nn

    class SE(nn.Module):
        def __init__(self, c, s):
            super().__init__()
            self.f1, self.f2 = nn.Conv2d(c, s, 1), nn.Conv2d(s, c, 1)

        def forward(self, x):
            return x * TF.hardsigmoid(self.f2(TF.relu(self.f1(TF.adaptive_avg_pool2d(x, 1)))))

    torch.manual_seed(27)
    m = nn.Sequential(nn.Conv2d(40, 240, 1), nn.BatchNorm2d(240), nn.Hardswish(),
                      nn.Conv2d(240, 240, 5, 1, 2, groups=240), nn.BatchNorm2d(240), nn.Hardswish(),
                      SE(240, 64), nn.Conv2d(240, 40, 1), nn.BatchNorm2d(40)).eval()
    path = str(tmp_path / "block.onnx")
    torch.onnx.export(m, torch.randn(1, 40, 14, 14), path, dynamo=False, opset_version=17, input_names=["x"])
    s = nee.onnx.InferenceSession(path)
    o = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for k in range(4):
        x = RNG.standard_normal((1, 40, 14, 14)).astype(np.float32)
        np.testing.assert_allclose(s.run(None, {"x": x})[0], o.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
