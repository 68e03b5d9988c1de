"""neetorch.onnx.optimize.fold_affine: Conv/Gemm/MatMul + per-channel BatchNormalization/Mul/Add by constants
folded into the weights.  Each case runs the original and the folded model on onnxruntime with its own graph
optimizations off (so it executes exactly the graph it is given) and compares; the cases that must not fold
check the graph is left as it was.  A few go through ``InferenceSession`` (folding on and off) too."""
from __future__ import annotations

import copy

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper

from neetorch.onnx import InferenceSession
from neetorch.onnx.loader import load_model
from neetorch.onnx.optimize import fold_affine, fold_enabled

RNG = np.random.default_rng(0)
F = TensorProto.FLOAT


def _arr(*shape, lo=None):
    a = RNG.standard_normal(shape).astype(np.float32)
    return np.exp(0.3 * a).astype(np.float32) if lo == "pos" else a


def _model(nodes, inits, x_shape, outs, opset=17, ir=8, extra_inputs=()):
    inputs = [helper.make_tensor_value_info("x", F, list(x_shape))] + list(extra_inputs)
    outputs = [helper.make_tensor_value_info(o, F, None) for o in outs]
    g = helper.make_graph(nodes, "g", inputs, outputs,
                          initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    return onnx.shape_inference.infer_shapes(m)   # the outputs' shapes (the checker wants them)


def _ort_run(m, feed):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)


def _fold(m, shift_as_add=True):
    """(folded model, count): what the session does, on a loaded copy."""
    lm, base, _ = load_model(copy.deepcopy(m))
    return lm, fold_affine(lm, base, shift_as_add=shift_as_add)


def _check(m, x, expect, rtol=1e-5, atol=1e-5, shift_as_add=True):
    fm, n = _fold(m, shift_as_add)
    assert n == expect, f"folded {n} node(s), expected {expect}"
    ref = _ort_run(m, {"x": x})
    got = _ort_run(fm, {"x": x})
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    return fm


def _bn(prefix, c, inits):
    names = [f"{prefix}_{k}" for k in ("s", "b", "m", "v")]
    inits.update(zip(names, (_arr(c, lo="pos"), _arr(c), _arr(c), _arr(c, lo="pos"))))
    return names


def _ops(m):
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("shift_as_add", [True, False])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_bn_folds(bias, shift_as_add):
    inits = {"w": _arr(6, 3, 3, 3)}
    if bias:
        inits["cb"] = _arr(6)
    nodes = [helper.make_node("Conv", ["x", "w"] + (["cb"] if bias else []), ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["y"] + _bn("bn", 6, inits), ["z"], epsilon=1e-3),
             helper.make_node("Relu", ["z"], ["out"])]
    fm = _check(_model(nodes, inits, [2, 3, 8, 8], ["out"]), _arr(2, 3, 8, 8), 1, shift_as_add=shift_as_add)
    # the shift: one per-channel Add after a bias-less conv, or the conv's bias (onnxruntime's form)
    assert _ops(fm) == (["Conv", "Add", "Relu"] if shift_as_add else ["Conv", "Relu"])
    assert len(fm.graph.node[0].input) == (2 if shift_as_add else 3)
    names = {t.name for t in fm.graph.initializer}
    assert not names & {"bn_s", "bn_b", "bn_m", "bn_v", "w", "cb"}, "unused initializers are dropped"


@pytest.mark.parametrize("shift_as_add", [True, False])
def test_conv_bn_mul_add_chain_with_unsqueezed_constants(shift_as_add):
    """What inception_v2 / densenet121 carry: BN, then Mul and Add by Unsqueeze'd per-channel vectors."""
    inits = {"w": _arr(4, 3, 1, 3), "sc": _arr(4, lo="pos"), "sh": _arr(4), "ax": np.array([1, 2], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"]),
             helper.make_node("BatchNormalization", ["y"] + _bn("bn", 4, inits), ["z"]),
             helper.make_node("Unsqueeze", ["sc", "ax"], ["sc3"]),
             helper.make_node("Mul", ["z", "sc3"], ["z2"]),
             helper.make_node("Constant", [], ["shc"], value=numpy_helper.from_array(inits.pop("sh")[:, None, None])),
             helper.make_node("Add", ["shc", "z2"], ["out"])]
    fm = _check(_model(nodes, inits, [1, 3, 5, 7], ["out"]), _arr(1, 3, 5, 7), 3, shift_as_add=shift_as_add)
    assert _ops(fm) == (["Conv", "Add"] if shift_as_add else ["Conv"]) and fm.graph.node[-1].output[0] == "out"
    assert not any(n.op_type in ("Constant", "Unsqueeze") for n in fm.graph.node), "dead constant nodes dropped"


@pytest.mark.parametrize("shift_as_add", [True, False])
@pytest.mark.parametrize("group,cin,cout", [(2, 4, 6), (4, 4, 4)])   # grouped, depthwise
def test_grouped_and_depthwise_conv_fold(group, cin, cout, shift_as_add):
    inits = {"w": _arr(cout, cin // group, 3, 3), "cb": _arr(cout)}
    nodes = [helper.make_node("Conv", ["x", "w", "cb"], ["y"], group=group),
             helper.make_node("BatchNormalization", ["y"] + _bn("bn", cout, inits), ["out"])]
    _check(_model(nodes, inits, [2, cin, 6, 6], ["out"]), _arr(2, cin, 6, 6), 1, shift_as_add=shift_as_add)


def test_conv1d_and_conv3d_fold():
    for shape, x in (((5, 2, 3), (1, 2, 9)), ((3, 2, 2, 2, 2), (1, 2, 4, 4, 4))):
        inits = {"w": _arr(*shape), "c": _arr(shape[0], *([1] * (len(shape) - 2)))}
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"]), helper.make_node("Mul", ["y", "c"], ["out"])]
        _check(_model(nodes, inits, list(x), ["out"]), _arr(*x), 1)


def test_adds_after_a_biasless_conv():
    inits = {"w": _arr(4, 3, 3, 3), "d": _arr(1, 4, 1, 1), "e": _arr(4, 1, 1)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"]), helper.make_node("Add", ["y", "d"], ["out"])]
    m = _model(nodes, dict(inits), [1, 3, 6, 6], ["out"])
    _check(m, _arr(1, 3, 6, 6), 0)                                  # would only be rewritten as itself
    fm = _check(m, _arr(1, 3, 6, 6), 1, shift_as_add=False)         # the conv's bias
    assert _ops(fm) == ["Conv"]
    nodes.append(helper.make_node("Add", ["e", "out"], ["out2"]))
    fm = _check(_model(nodes, dict(inits), [1, 3, 6, 6], ["out2"]), _arr(1, 3, 6, 6), 2)
    assert _ops(fm) == ["Conv", "Add"]


def test_scalar_mul_folds_but_rank_growing_one_does_not():
    inits = {"w": _arr(4, 3, 3, 3), "s": np.array(1.5, np.float32), "s5": np.full((1, 1, 1, 1, 1), 2.0, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"]), helper.make_node("Mul", ["y", "s"], ["out"])]
    _check(_model(nodes, dict(inits), [1, 3, 6, 6], ["out"]), _arr(1, 3, 6, 6), 1)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"]), helper.make_node("Mul", ["y", "s5"], ["out"])]
    _check(_model(nodes, dict(inits), [1, 3, 6, 6], ["out"]), _arr(1, 3, 6, 6), 0)


@pytest.mark.parametrize("shape", [(1, 1, 4, 4), (4,), (1, 4, 4, 1), (2, 4, 1, 1), (2, 1, 1, 1)])
def test_mul_add_not_per_channel_do_not_fold(shape):
    """Per-position, per-batch, or a [4] vector that aligns with the last (spatial) axis: not per-channel."""
    inits = {"w": _arr(4, 3, 3, 3), "c": _arr(*shape)}
    for op in ("Mul", "Add"):
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"]), helper.make_node(op, ["y", "c"], ["out"])]
        fm = _check(_model(nodes, dict(inits), [2, 3, 6, 6], ["out"]), _arr(2, 3, 6, 6), 0)
        assert _ops(fm) == ["Conv", op]


def test_other_consumers_graph_outputs_and_non_constants_do_not_fold():
    inits = {"w": _arr(4, 3, 3, 3)}
    bn = _bn("bn", 4, inits)
    x = _arr(1, 3, 6, 6)
    # the conv output is also read by another node
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"]), helper.make_node("BatchNormalization", ["y"] + bn, ["z"]),
             helper.make_node("Relu", ["y"], ["r"]), helper.make_node("Add", ["z", "r"], ["out"])]
    _check(_model(nodes, dict(inits), [1, 3, 6, 6], ["out"]), x, 0)
    # the conv output is a graph output
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"]), helper.make_node("BatchNormalization", ["y"] + bn, ["out"])]
    _check(_model(nodes, dict(inits), [1, 3, 6, 6], ["out", "y"]), x, 0)
    # a BN statistic that is a graph input (not a constant)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"]),
             helper.make_node("BatchNormalization", ["y", bn[0], bn[1], "mean_in", bn[3]], ["out"])]
    mean_in = helper.make_tensor_value_info("mean_in", F, [4])
    m = _model(nodes, {k: v for k, v in inits.items() if k != bn[2]}, [1, 3, 6, 6], ["out"], extra_inputs=[mean_in])
    assert _fold(m)[1] == 0
    # an initializer that is also a graph input can be fed (IR >= 4): not a constant
    m = _model(nodes[:1] + [helper.make_node("BatchNormalization", ["y"] + bn, ["out"])], dict(inits), [1, 3, 6, 6],
               ["out"], extra_inputs=[helper.make_tensor_value_info(bn[0], F, [4])])
    assert _fold(m)[1] == 0
    # the conv output is read inside a subgraph
    then = helper.make_graph([helper.make_node("Identity", ["y"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", F, None)])
    other = helper.make_graph([helper.make_node("Identity", ["z"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", F, None)])
    cond = numpy_helper.from_array(np.array(True), "cond")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"]), helper.make_node("BatchNormalization", ["y"] + bn, ["z"]),
             helper.make_node("Constant", [], ["c"], value=cond),
             helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other)]
    _check(_model(nodes, dict(inits), [1, 3, 6, 6], ["out"]), x, 0)


def test_batchnorm_with_mismatched_statistics_does_not_fold():
    inits = {"w": _arr(4, 3, 3, 3)}
    bn = _bn("bn", 4, inits)
    inits[bn[3]] = _arr(1, lo="pos")   # one variance broadcast over channels: not a [C] vector
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"]), helper.make_node("BatchNormalization", ["y"] + bn, ["out"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("out", F, [1, 4, 4, 4])],
                          initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    before = m.SerializeToString()
    assert fold_affine(m) == 0 and m.SerializeToString() == before
    # a negative variance: 1 / sqrt(var + eps) is not finite, the chain is left alone
    inits[bn[3]] = -np.ones(4, np.float32)
    m = _model(nodes, inits, [1, 3, 6, 6], ["out"])
    assert _fold(m)[1] == 0


def test_weights_made_by_constant_of_shape_fold():
    """The shipped light models make every weight with ConstantOfShape (one value per tensor)."""
    inits = {"wshape": np.array([4, 3, 3, 3], np.int64)}
    nodes = [helper.make_node("ConstantOfShape", ["wshape"], ["w"],
                              value=numpy_helper.from_array(np.array([0.02], np.float32))),
             helper.make_node("Conv", ["x", "w"], ["y"]),
             helper.make_node("BatchNormalization", ["y"] + _bn("bn", 4, inits), ["out"])]
    fm = _check(_model(nodes, inits, [1, 3, 6, 6], ["out"]), _arr(1, 3, 6, 6), 1)
    assert _ops(fm) == ["Conv", "Add"] and "wshape" not in {t.name for t in fm.graph.initializer}


@pytest.mark.parametrize("trans_b,with_c,beta", [(1, True, 1.0), (0, True, 0.5), (1, False, 1.0)])
def test_gemm_mul_add_fold(trans_b, with_c, beta):
    inits = {"b": _arr(5, 7) if trans_b else _arr(7, 5), "c": _arr(1, 5), "sc": _arr(5, lo="pos"),
             "sh": _arr(1, 5)}
    nodes = [helper.make_node("Gemm", ["x", "b"] + (["c"] if with_c else []), ["y"], transB=trans_b, beta=beta,
                              alpha=0.7),
             helper.make_node("Mul", ["y", "sc"], ["y2"]), helper.make_node("Add", ["sh", "y2"], ["out"])]
    if not with_c:
        del inits["c"]
    fm = _check(_model(nodes, inits, [3, 7], ["out"]), _arr(3, 7), 2)
    assert _ops(fm) == ["Gemm"]


def test_gemm_with_matrix_c_and_batchnorm():
    inits = {"b": _arr(7, 5), "c": _arr(3, 1)}
    nodes = [helper.make_node("Gemm", ["x", "b", "c"], ["y"]),
             helper.make_node("BatchNormalization", ["y"] + _bn("bn", 5, inits), ["out"])]
    _check(_model(nodes, inits, [3, 7], ["out"]), _arr(3, 7), 1)


def test_matmul_add_mul_add_fold():
    inits = {"w": _arr(8, 6), "b": _arr(6), "sc": _arr(1, 1, 6, lo="pos"), "sh": _arr(6)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Add", ["y", "b"], ["y1"]),
             helper.make_node("Mul", ["y1", "sc"], ["y2"]), helper.make_node("Add", ["y2", "sh"], ["out"])]
    fm = _check(_model(nodes, inits, [2, 3, 8], ["out"]), _arr(2, 3, 8), 2)
    assert _ops(fm) == ["MatMul", "Add"]
    # no bias: a Mul folds into W, the Add after it is the bias and stays
    inits = {"w": _arr(8, 6), "sc": _arr(6, lo="pos"), "sh": _arr(6)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Mul", ["sc", "y"], ["y2"]),
             helper.make_node("Add", ["y2", "sh"], ["out"])]
    fm = _check(_model(nodes, inits, [3, 8], ["out"]), _arr(3, 8), 1)
    assert _ops(fm) == ["MatMul", "Add"]


def test_matmul_rank_growing_or_per_row_operands_do_not_fold():
    # x is 1-D: MatMul's output is [6]; a [1, 6] factor would make it [1, 6]
    inits = {"w": _arr(8, 6), "sc": _arr(1, 6)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Mul", ["y", "sc"], ["out"])]
    _check(_model(nodes, inits, [8], ["out"]), _arr(8), 0)
    # a per-row factor ([3, 1]) is not per output column
    inits = {"w": _arr(8, 6), "sc": _arr(3, 1)}
    _check(_model(nodes, inits, [3, 8], ["out"]), _arr(3, 8), 0)


def _cnn():
    inits = {"w": _arr(8, 3, 3, 3), "w2": _arr(4, 8, 1, 1), "cb2": _arr(4), "sc": _arr(1, 4, 1, 1, lo="pos")}
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["y"] + _bn("bn", 8, inits), ["z"]),
             helper.make_node("Relu", ["z"], ["r"]),
             helper.make_node("Conv", ["r", "w2", "cb2"], ["y2"]), helper.make_node("Mul", ["y2", "sc"], ["out"])]
    return _model(nodes, inits, ["batch", 3, 8, 8], ["out"])


def test_session_folds_by_default_and_can_be_switched_off(monkeypatch):
    m = _cnn()
    before = m.SerializeToString()
    x = _arr(2, 3, 8, 8)
    ref = _ort_run(m, {"x": x})[0]
    on = InferenceSession(m)
    assert on.info["folded"] == 2
    np.testing.assert_allclose(on.run(None, {"x": x})[0], ref, rtol=1e-4, atol=1e-5)
    assert m.SerializeToString() == before, "the caller's model is not modified"
    monkeypatch.setenv("NEE_ONNX_FOLD", "0")
    off = InferenceSession(m)
    assert off.info["folded"] is None
    np.testing.assert_allclose(off.run(None, {"x": x})[0], ref, rtol=1e-4, atol=1e-5)
    monkeypatch.delenv("NEE_ONNX_FOLD")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert not fold_enabled(so)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert fold_enabled(so) and fold_enabled(None)


def test_light_model_with_random_weights():
    """A real exported CNN (shufflenet: Conv+BN, grouped convs, IR version 3 with initializers as inputs)."""
    M = pytest.importorskip("asv_benchmarks._onnx_models")
    try:
        spec = M.spec("light_shufflenet", random_weights=True)
    except NotImplementedError as e:
        pytest.skip(str(e))
    fm, n = _fold(spec.model)
    assert n == 49 and "BatchNormalization" not in _ops(fm)
    onnx.checker.check_model(fm)
    assert spec.close(_ort_run(fm, spec.feed), _ort_run(spec.model, spec.feed))
