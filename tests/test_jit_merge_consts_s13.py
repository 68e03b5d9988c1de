"""passes.merge_equal_constants: constants of equal bytes become one value in graphs whose constants never change
(nee.jit(freeze=...), ONNX sessions), so CSE merges the nodes reading them; never in default mode, never across
-0.0 / 0.0."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.jit import passes

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402


def _two_convs(w1, w2, b1=None, b2=None):
    inits = [nh.from_array(w1, "w1"), nh.from_array(w2, "w2")]
    ins1, ins2 = ["x", "w1"], ["x", "w2"]
    if b1 is not None:
        inits += [nh.from_array(b1, "b1"), nh.from_array(b2, "b2")]
        ins1, ins2 = ins1 + ["b1"], ins2 + ["b2"]
    c = w1.shape[0]
    nodes = [h.make_node("Conv", ins1, ["a"], pads=[1, 1, 1, 1]), h.make_node("Conv", ins2, ["b"], pads=[1, 1, 1, 1]),
             h.make_node("Concat", ["a", "b"], ["y"], axis=1)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [2, w1.shape[1], 7, 9])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [2, 2 * c, 7, 9])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def _conv_launches(sess, x):
    with nee.profile() as prof:
        y = sess.run(None, {"x": x})[0]
    return y, sum(e.name.startswith("conv2d") for e in prof.kernels())


def _reference(w1, w2, x, b1=None, b2=None):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    t = torch.from_numpy
    a = F.conv2d(t(x), t(w1), None if b1 is None else t(b1), padding=1)
    b = F.conv2d(t(x), t(w2), None if b2 is None else t(b2), padding=1)
    return torch.cat([a, b], 1).numpy()


@pytest.mark.parametrize("with_bias", [False, True])
def test_equal_initializers_merge_and_cse_runs_one_conv(with_bias):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32) if with_bias else None
    x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
    sess = nee.onnx.InferenceSession(_two_convs(w, w.copy(), b, None if b is None else b.copy()))
    y, n = _conv_launches(sess, x)
    np.testing.assert_allclose(y, _reference(w, w, x, b, b), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(y[:, :5], y[:, 5:])
    assert n == 1


@pytest.mark.parametrize("change", ["value", "negative_zero", "bias"])
def test_different_bytes_stay_apart(change):
    rng = np.random.default_rng(2)
    w1 = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    w2 = w1.copy()
    b1 = b2 = None
    if change == "value":
        w2[3, 1, 2, 2] = np.nextafter(w2[3, 1, 2, 2], np.float32(10))
    elif change == "negative_zero":
        w1[:, :, 1, 1] = 0.0
        w2[:, :, 1, 1] = -0.0
    else:
        b1 = rng.standard_normal(4).astype(np.float32)
        b2 = b1.copy()
        b2[0] += 1
    x = rng.standard_normal((2, 2, 7, 9)).astype(np.float32)
    sess = nee.onnx.InferenceSession(_two_convs(w1, w2, b1, b2))
    y, n = _conv_launches(sess, x)
    np.testing.assert_allclose(y, _reference(w1, w2, x, b1, b2), rtol=1e-5, atol=1e-5)
    assert n == 2


def test_freeze_merges_default_mode_does_not():
    w = nee.randn(6, 6)
    w2 = nee.tensor(w.numpy().copy())

    def fn(x):
        return (x @ w).relu() + (x @ w2).relu()

    x = nee.randn(5, 6)
    frozen = nee.jit(fn, freeze=True)
    ng = frozen.graph(x)
    assert sum(n.name.startswith("matmul") for n in ng.nodes) == 1
    np.testing.assert_allclose(frozen(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-5)

    live = nee.jit(fn)
    assert sum(n.name.startswith("matmul") for n in live.graph(x).nodes) == 2
    np.testing.assert_allclose(live(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-5)
    w2.mul_(3)   # the two captured tensors differ now: default mode must see it
    np.testing.assert_allclose(live(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-5)


def test_pass_is_a_no_op_without_frozen_constants_and_keeps_shapes_apart():
    from neetorch.trace import tracer
    a = nee.ones(3, 4)
    b = nee.ones(3, 4)
    c = nee.ones(4, 3)       # same bytes, another shape
    d = nee.ones(3, 4, dtype=nee.float64)
    g = tracer.trace(lambda x: (x + a + b + d) @ c.to(nee.float64), nee.randn(3, 4))
    before = [[v.id for v in n.inputs] for n in g.nodes]
    passes.merge_equal_constants(g)
    assert [[v.id for v in n.inputs] for n in g.nodes] == before
    g.consts_frozen = True
    passes.merge_equal_constants(g)
    used = {v for n in g.nodes for v in n.inputs if v in g.consts}
    kinds = sorted((tuple(v.shape), v.dtype.name) for v in used)
    assert kinds == [((3, 4), "float32"), ((3, 4), "float64"), ((4, 3), "float64")]


def test_nan_constants_with_equal_bytes_merge_and_stay_nan():
    w = np.full((4, 4), np.nan, np.float32)
    w[0, 0] = 1.0
    t1, t2 = nee.tensor(w), nee.tensor(w.copy())
    f = nee.jit(lambda x: x @ t1 + x @ t2, freeze=True)
    x = nee.randn(8, 4)
    assert sum(n.name.startswith("matmul") for n in f.graph(x).nodes) == 1
    np.testing.assert_array_equal(np.isnan(f(x).numpy()), np.isnan((x.numpy() @ w) * 2))
