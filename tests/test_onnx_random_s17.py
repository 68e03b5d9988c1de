"""ONNX random ops and training-mode Dropout (neetorch/onnx/ops_random.py): every run draws anew (random nodes,
never folded), the draws have the distribution the op specifies (moments and frequencies checked on large
samples, with bounds many standard errors wide), a ``seed`` gives the same sequence in every new session, and
``*Like`` ops follow dynamic dims."""
import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

import neetorch as nee
from neetorch.onnx import InferenceSession


def _model(op, inputs, out_type, out_shape, nout=1, opset=17, **attrs):
    outs = ["y", "mask"][:nout]
    node = h.make_node(op, [i[0] for i in inputs], outs, **attrs)
    vis = [h.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    ovi = [h.make_tensor_value_info("y", out_type, out_shape)]
    if nout > 1:
        ovi.append(h.make_tensor_value_info("mask", TP.BOOL, out_shape))
    return h.make_model(h.make_graph([node], "g", vis, ovi), opset_imports=[h.make_opsetid("", opset)])


def _sess(m):
    return InferenceSession(m.SerializeToString())


@pytest.mark.parametrize("dtype, npdt", [(TP.FLOAT, np.float32), (TP.DOUBLE, np.float64)])
def test_random_normal_and_uniform_moments_and_fresh_draws(dtype, npdt):
    s = _sess(_model("RandomNormal", [], dtype, [200, 300], shape=[200, 300], mean=2.0, scale=3.0, dtype=dtype))
    a, b = s.run(None, {})[0], s.run(None, {})[0]
    assert a.dtype == npdt and a.shape == (200, 300) and not np.array_equal(a, b)
    n = a.size
    assert abs(a.mean() - 2.0) < 6 * 3.0 / np.sqrt(n) and abs(a.std() - 3.0) < 0.05
    s = _sess(_model("RandomUniform", [], dtype, [60000], shape=[60000], low=-1.0, high=3.0, dtype=dtype))
    u = s.run(None, {})[0]
    assert u.dtype == npdt and u.min() >= -1.0 and u.max() < 3.0
    assert abs(u.mean() - 1.0) < 6 * (4 / np.sqrt(12)) / np.sqrt(u.size)
    hist = np.histogram(u, bins=8, range=(-1, 3))[0] / u.size
    assert np.all(np.abs(hist - 1 / 8) < 0.01)


def test_like_ops_follow_the_input_shape_and_dtype_over_dynamic_dims():
    s = _sess(_model("RandomUniformLike", [("x", TP.FLOAT, ["batch", 7])], TP.FLOAT, ["batch", 7]))
    for b in (1, 5, 33, 2):
        y = s.run(None, {"x": np.zeros((b, 7), np.float32)})[0]
        assert y.shape == (b, 7) and y.dtype == np.float32 and 0 <= y.min() and y.max() < 1
        assert b < 5 or len(np.unique(y)) == y.size
    s = _sess(_model("RandomNormalLike", [("x", TP.FLOAT, ["n"])], TP.DOUBLE, ["n"], dtype=TP.DOUBLE, mean=-4.0))
    y = s.run(None, {"x": np.zeros(50000, np.float32)})[0]
    assert y.dtype == np.float64 and abs(y.mean() + 4.0) < 0.03 and abs(y.std() - 1.0) < 0.02


def test_seed_gives_the_same_sequence_in_every_session():
    m = _model("RandomNormal", [], TP.FLOAT, [4, 5], shape=[4, 5], seed=3.0)
    s1, s2 = _sess(m), _sess(m)
    r1 = [s1.run(None, {})[0] for _ in range(3)]
    r2 = [s2.run(None, {})[0] for _ in range(3)]
    for a, b in zip(r1, r2):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(r1[0], r1[1])
    other = _sess(_model("RandomNormal", [], TP.FLOAT, [4, 5], shape=[4, 5], seed=4.0)).run(None, {})[0]
    assert not np.array_equal(other, r1[0])


def test_bernoulli_frequencies_and_dtype():
    p = np.linspace(0.0, 1.0, 11, dtype=np.float32)
    s = _sess(_model("Bernoulli", [("p", TP.FLOAT, [11])], TP.INT64, [11], dtype=TP.INT64))
    draws = np.stack([s.run(None, {"p": p})[0] for _ in range(2000)])
    assert draws.dtype == np.int64 and set(np.unique(draws)) <= {0, 1}
    assert draws[:, 0].sum() == 0 and draws[:, -1].sum() == 2000
    freq = draws.mean(0)
    assert np.all(np.abs(freq - p) < 6 * np.sqrt(p * (1 - p) / 2000) + 1e-9)
    s = _sess(_model("Bernoulli", [("p", TP.DOUBLE, [3])], TP.DOUBLE, [3]))
    assert s.run(None, {"p": np.array([0.0, 1.0, 1.0])})[0].tolist() == [0.0, 1.0, 1.0]


def test_multinomial_follows_the_softmax_of_its_logits():
    logits = np.log(np.array([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]], np.float32) + 1e-30)
    s = _sess(_model("Multinomial", [("x", TP.FLOAT, [2, 3])], TP.INT32, [2, 4000], sample_size=4000))
    y = s.run(None, {"x": logits})[0]
    assert y.dtype == np.int32 and y.shape == (2, 4000)
    f0 = np.bincount(y[0], minlength=3) / 4000
    np.testing.assert_allclose(f0, [0.1, 0.2, 0.7], atol=0.03)
    assert (y[1] == 2).sum() == 0 and abs((y[1] == 0).mean() - 0.5) < 0.04
    s64 = _sess(_model("Multinomial", [("x", TP.FLOAT, [1, 3])], TP.INT64, [1, 2], sample_size=2, dtype=TP.INT64))
    assert s64.run(None, {"x": logits[:1]})[0].dtype == np.int64


def _dropout_model(ratio_input):
    ins = [("x", TP.FLOAT, ["n", 8])]
    node_ins = ["x", "ratio", "training"]
    inits = []
    if ratio_input:
        ins += [("ratio", TP.FLOAT, []), ("training", TP.BOOL, [])]
    else:
        inits = [h.make_tensor("ratio", TP.FLOAT, [], [0.25]), h.make_tensor("training", TP.BOOL, [], [True])]
    node = h.make_node("Dropout", node_ins, ["y", "mask"])
    g = h.make_graph([node], "g", [h.make_tensor_value_info(*i) for i in ins],
                     [h.make_tensor_value_info("y", TP.FLOAT, ["n", 8]), h.make_tensor_value_info("mask", TP.BOOL, ["n", 8])],
                     initializer=inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def test_training_dropout_scales_what_it_keeps_and_draws_each_run():
    s = _sess(_dropout_model(False))
    x = np.random.default_rng(0).standard_normal((4000, 8)).astype(np.float32) + 3
    y, mask = s.run(None, {"x": x})
    assert mask.dtype == np.bool_ and abs(mask.mean() - 0.75) < 0.01
    np.testing.assert_allclose(y, np.where(mask, x / 0.75, 0), rtol=1e-6)
    y2, mask2 = s.run(None, {"x": x[:100]})
    assert y2.shape == (100, 8) and not np.array_equal(mask2, mask[:100])


def test_dropout_training_mode_and_ratio_as_graph_inputs():
    s = _sess(_dropout_model(True))
    x = np.ones((1000, 8), np.float32)
    y, mask = s.run(None, {"x": x, "ratio": np.float32(0.5), "training": np.bool_(False)})
    np.testing.assert_array_equal(y, x)
    assert mask.all()
    y, mask = s.run(None, {"x": x, "ratio": np.float32(0.5), "training": np.bool_(True)})
    assert abs(mask.mean() - 0.5) < 0.03
    np.testing.assert_allclose(y, np.where(mask, 2.0, 0.0))


def test_bad_random_attributes_are_refused_clearly():
    with pytest.raises(Exception, match="RandomNormal.*floating|dtype"):
        _sess(_model("RandomNormal", [], TP.INT32, [2], shape=[2], dtype=TP.INT32)).run(None, {})
    with pytest.raises(Exception, match="Multinomial.*2-D"):
        _sess(_model("Multinomial", [("x", TP.FLOAT, [3])], TP.INT32, [3, 1])).run(None, {"x": np.zeros(3, np.float32)})
