"""Dilated convs on small maps (DeepLabV3's ASPP): taps that only read the zero padding.

* jit/passes.py ``trim_dead_conv_taps``: in graphs whose constants never change, kernel rows / columns no output
  reads real input through are cut from the weight and the padding (dilation 24 / 36 over 14 x 14: a 1x1 conv);
* devices/cpu/kernels/conv.py ``_conv_live_taps``: a conv whose live (output, tap) pairs are few runs one product
  per tap over its box of outputs.

Both checked against torch and against the paths they replace, on odd sizes, strides, groups, batches, float64,
non-finite weights (kept as they are: ``0 * inf`` is NaN), bias / relu / residual epilogues and ONNX sessions
(against onnxruntime)."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv as C
from neetorch.jit import passes

torch = pytest.importorskip("torch")
F = nee.nn.functional


def _t(rng, *s, dt=np.float32):
    return rng.standard_normal(s).astype(dt)


def _ref(x, w, b, stride, pad, dil, groups):
    return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), None if b is None else
                                      torch.from_numpy(b), stride=stride, padding=pad, dilation=dil,
                                      groups=groups).numpy()


@pytest.fixture
def spy(monkeypatch):
    hits = []
    orig = C._conv_live_taps

    def f(*a):
        r = orig(*a)
        hits.append(r)
        return r
    monkeypatch.setattr(C, "_conv_live_taps", f)
    return hits


CASES = [
    # (N, C, H, W), O, k, stride, pad, dil, groups
    ((1, 64, 14, 14), 48, 3, 1, 12, 12, 1),
    ((2, 32, 13, 11), 40, 3, 1, 9, 9, 1),
    ((1, 48, 15, 17), 32, 3, 2, 10, 10, 2),
    ((1, 64, 9, 9), 64, 5, 1, 8, 4, 1),
    ((1, 96, 28, 28), 64, 3, 1, 24, 24, 1),
]


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_live_taps_path_matches_torch_and_the_full_conv(monkeypatch, spy, case, dt):
    shape, O, k, s, p, d, g = case
    rng = np.random.default_rng(sum(shape) + k + d)
    x, w, b = _t(rng, *shape, dt=dt), _t(rng, O, shape[1] // g, k, k, dt=dt) * 0.1, _t(rng, O, dt=dt)
    monkeypatch.setattr(C, "LIVE_TAPS_MIN_SAVED", 0)
    got = F.conv2d(nee.from_numpy(x), nee.from_numpy(w), nee.from_numpy(b), stride=s, padding=p, dilation=d,
                   groups=g).numpy()
    assert spy and spy[-1] is True
    tol = 1e-4 if dt == np.float32 else 1e-10
    np.testing.assert_allclose(got, _ref(x, w, b, s, p, d, g), rtol=tol, atol=tol)
    monkeypatch.setattr(C, "LIVE_TAPS", [False])
    full = F.conv2d(nee.from_numpy(x), nee.from_numpy(w), nee.from_numpy(b), stride=s, padding=p, dilation=d,
                    groups=g).numpy()
    np.testing.assert_allclose(got, full, rtol=tol, atol=tol)


def test_live_taps_rule():
    x = np.zeros((1, 960, 14, 14), np.float32)
    w = np.zeros((256, 960, 3, 3), np.float32)
    at = lambda p, d: {"stride": (1, 1), "padding": (p,) * 4, "dilation": (d, d), "groups": 1}  # noqa: E731
    assert C._live_taps_pay(x, w, 1, at(12, 12), 14, 14)          # 18% of the pairs live
    assert not C._live_taps_pay(x, w, 1, at(1, 1), 14, 14)        # a plain 3x3: 86% live
    assert not C._live_taps_pay(x[:, :4], w[:, :4], 1, at(12, 12), 14, 14)   # too few channels
    small = np.zeros((1, 16, 14, 14), np.float32)
    assert not C._live_taps_pay(small, np.zeros((16, 16, 3, 3), np.float32), 1, at(12, 12), 14, 14)  # saves little
    # the boxes: every output whose input position is inside, and no other
    boxes = C._live_boxes(14, 14, 14, 14, 3, 3, 1, 1, 12, 12, 12, 12)
    assert sorted((r1 - r0) * (c1 - c0) for *_, r0, r1, c0, c1 in boxes) == [4, 4, 4, 4, 28, 28, 28, 28, 196]


def test_live_taps_epilogues_in_a_jit_graph(spy, monkeypatch):
    monkeypatch.setattr(C, "LIVE_TAPS_MIN_SAVED", 0)
    rng = np.random.default_rng(7)
    x, w, b = _t(rng, 1, 64, 14, 14), _t(rng, 64, 64, 3, 3) * 0.1, _t(rng, 64)
    r = _t(rng, 1, 64, 14, 14)
    W, B, R = nee.from_numpy(w), nee.from_numpy(b), nee.from_numpy(r)

    def fn(x):
        return F.relu(F.conv2d(x, W, B, padding=12, dilation=12) + R)
    f = nee.jit(fn)
    for _ in range(4):
        got = f(nee.from_numpy(x)).numpy()
    assert True in spy
    want = np.maximum(_ref(x, w, b, 1, 12, 12, 1) + r, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_nonfinite_weights_take_the_full_conv(spy, monkeypatch):
    monkeypatch.setattr(C, "LIVE_TAPS_MIN_SAVED", 0)
    rng = np.random.default_rng(8)
    x, w = _t(rng, 1, 32, 14, 14), _t(rng, 32, 32, 3, 3) * 0.1
    w[3, 5, 0, 0] = np.inf
    got = F.conv2d(nee.from_numpy(x), nee.from_numpy(w), None, padding=12, dilation=12).numpy()
    assert spy == [False]
    monkeypatch.setattr(C, "LIVE_TAPS", [False])
    full = F.conv2d(nee.from_numpy(x), nee.from_numpy(w), None, padding=12, dilation=12).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(full))
    np.testing.assert_allclose(got, full, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- the pass
@pytest.mark.parametrize("shape,k,s,p,d,want_k", [
    ((1, 32, 14, 14), 3, 1, 24, 24, (1, 1)),
    ((1, 32, 14, 14), 3, 1, 36, 36, (1, 1)),
    ((1, 16, 10, 30), 3, 1, 12, 12, (1, 3)),       # rows dead, columns live
    ((1, 16, 11, 11), 5, 2, 12, 6, (3, 3)),        # outer taps dead at stride 2
])
def test_trim_pass_cuts_dead_taps(shape, k, s, p, d, want_k):
    rng = np.random.default_rng(k * d)
    O = 24
    x, w, b = _t(rng, *shape), _t(rng, O, shape[1], k, k) * 0.1, _t(rng, O)
    W, B = nee.from_numpy(w), nee.from_numpy(b)
    f = nee.jit(lambda x: F.conv2d(x, W, B, stride=s, padding=p, dilation=d), freeze=True)
    X = nee.from_numpy(x)
    got = f(X).numpy()
    g = f.graph(X)
    convs = [n for n in g.nodes if n.name.startswith("conv2d")]
    assert len(convs) == 1 and tuple(convs[0].inputs[1].shape[2:]) == want_k
    np.testing.assert_allclose(got, _ref(x, w, b, s, p, d, 1), rtol=1e-4, atol=1e-4)
    # default mode (captured tensors may be written later): the graph keeps its taps
    f2 = nee.jit(lambda x: F.conv2d(x, W, B, stride=s, padding=p, dilation=d))
    np.testing.assert_allclose(f2(X).numpy(), got, rtol=1e-5, atol=1e-5)
    assert [tuple(n.inputs[1].shape[2:]) for n in f2.graph(X).nodes if n.name.startswith("conv2d")] == [(k, k)]


def test_trim_pass_keeps_nonfinite_dead_taps():
    rng = np.random.default_rng(3)
    x, w = _t(rng, 1, 8, 14, 14), _t(rng, 8, 8, 3, 3)
    w[0, 0, 0, 0] = np.nan
    W = nee.from_numpy(w)
    f = nee.jit(lambda x: F.conv2d(x, W, None, padding=24, dilation=24), freeze=True)
    X = nee.from_numpy(x)
    got = f(X).numpy()
    assert [tuple(n.inputs[1].shape[2:]) for n in f.graph(X).nodes if n.name.startswith("conv2d")] == [(3, 3)]
    eager = F.conv2d(X, W, None, padding=24, dilation=24).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(eager))


def test_live_taps_helper():
    assert passes._live_taps(14, 14, 3, 1, 24, 24) == (1, 1)
    assert passes._live_taps(14, 14, 3, 1, 12, 12) == (0, 2)
    assert passes._live_taps(1, 1, 3, 1, 1, 1) == (1, 1)
    assert passes._live_taps(4, 1, 3, 1, 10, 1) is None


@pytest.mark.parametrize("rate", [6, 12, 24, 36])
def test_onnx_aspp_block_vs_onnxruntime(rate):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto as TP, helper as h, numpy_helper as nh
    rng = np.random.default_rng(rate)
    w, b = _t(rng, 64, 96, 3, 3) * 0.1, _t(rng, 64)
    w1 = _t(rng, 64, 96, 1, 1) * 0.1
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], dilations=[rate, rate], pads=[rate] * 4),
             h.make_node("Relu", ["c"], ["r"]),
             h.make_node("Conv", ["x", "w1"], ["c1"]),
             h.make_node("Add", ["r", "c1"], ["y"])]
    g = h.make_graph(nodes, "aspp", [h.make_tensor_value_info("x", TP.FLOAT, [1, 96, 14, 14])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, 64, 14, 14])],
                     [nh.from_array(w, "w"), nh.from_array(b, "b"), nh.from_array(w1, "w1")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
    feed = {"x": _t(rng, 1, 96, 14, 14)}
    s = nee.onnx.InferenceSession(m)
    for _ in range(3):
        got = s.run(None, feed)[0]
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
