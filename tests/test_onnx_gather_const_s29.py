"""Session 29: ONNX Gather with a constant scalar index (``logits[:, -1]`` as exporters write it, a head's slot)
lowers to a view of its input (``select``), not an index_select step.  Checked against onnxruntime on every axis,
negative indices, int32 indices, the index as a graph input (the gather step stays), an out-of-range constant
(a clear error naming the index and the dim), and that the compiled graph holds no index_select."""
import numpy as np
import pytest

import neetorch as nee

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(29)


def _model(axis, idx, as_input=False, idx_type=np.int64):
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=axis), helper.make_node("Relu", ["g"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 7])]
    inits = []
    if as_input:
        inputs.append(helper.make_tensor_value_info("i", TensorProto.INT64, []))
    else:
        inits.append(numpy_helper.from_array(np.array(idx, idx_type), "i"))
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.mark.parametrize("axis,idx", [(0, 1), (1, -1), (1, 0), (2, 3), (2, -7), (-1, 6)])
@pytest.mark.parametrize("idx_type", [np.int64, np.int32])
def test_constant_scalar_index(axis, idx, idx_type):
    m = _model(axis, idx, idx_type=idx_type)
    s, o = nee.onnx.InferenceSession(m), ort.InferenceSession(m, providers=["CPUExecutionProvider"])
    for _ in range(3):
        x = RNG.standard_normal((2, 5, 7)).astype(np.float32)
        np.testing.assert_array_equal(s.run(None, {"x": x})[0], o.run(None, {"x": x})[0])
    ops = {n.op.name for n in s._jit.graph(nee.tensor(x)).nodes}
    assert "relu" in ops and "index_select" not in ops, ops


def test_index_from_a_graph_input():
    m = _model(1, 0, as_input=True)
    s, o = nee.onnx.InferenceSession(m), ort.InferenceSession(m, providers=["CPUExecutionProvider"])
    x = RNG.standard_normal((2, 5, 7)).astype(np.float32)
    for i in (0, 4, -2):
        feed = {"x": x, "i": np.array(i, np.int64)}
        np.testing.assert_array_equal(s.run(None, feed)[0], o.run(None, feed)[0])
    assert "index_select" in {n.op.name for n in s._jit.graph(nee.tensor(x), nee.tensor(np.array(0))).nodes}


def test_constant_index_out_of_range():
    m = _model(1, 5)
    x = RNG.standard_normal((2, 5, 7)).astype(np.float32)
    with pytest.raises(Exception, match=r"index 5 is out of bounds for a dim of size 5"):
        nee.onnx.InferenceSession(m).run(None, {"x": x})
