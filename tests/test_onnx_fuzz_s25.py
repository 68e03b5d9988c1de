"""ONNX import: cases the differential fuzzer (single-node graphs against onnxruntime, session 25: /tmp/h3/fuzz.py) found.

* Slice with a negative step and a start before the first element (``start < -dim``, INT64_MIN...): ONNX clamps
  the start into ``[0, dim-1]`` for negative steps, so the slice starts at element 0 (onnxruntime: ``[x[0]]``); the
  lowering clamped it to -1 and returned nothing.
* Reshape copying a leading 0-size dim (``shape=[0, 4]`` on a ``(0, 3, 5)`` input): any tail has zero elements;
  the lowering's "copied leading dims" fast path unflattened the tail and raised.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from neetorch.onnx import InferenceSession  # noqa: E402
from onnx_single_node import model as _model, ort_run as _ort  # noqa: E402


def _same(m, feed):
    got, ref = InferenceSession(m).run(None, feed), _ort(m, feed)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.shape, b.shape)
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("start,end,step,dt", [
    (-2 ** 63, -2 ** 63, -1, np.int64), (-2 ** 31, -2 ** 31, -2, np.int32), (-7, -9, -1, np.int64),
    (-6, -9, -1, np.int64), (-7, -6, -1, np.int64), (-9, 0, -1, np.int64), (-100, -2 ** 63, -2, np.int64),
    (-5, -9, -1, np.int64), (3, -9, -1, np.int64), (-1, -6, -1, np.int64), (4, 2, -1, np.int64)])
def test_slice_negative_step_start_before_the_first_element(start, end, step, dt, const):
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    vals = {"s": [start], "e": [end], "a": [0], "t": [step]}
    node = helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2])]
    feed = {"x": x}
    inits = []
    for k, v in vals.items():
        if const:
            inits.append(numpy_helper.from_array(np.array(v, dt), k))
        else:
            ins.append(helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), [1]))
            feed[k] = np.array(v, dt)
    _same(_model(node, ins, inits), feed)


def test_slice_negative_step_on_an_empty_dim():
    x = np.zeros((1, 0, 1), np.float32)
    node = helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
             {"s": [-3, -5], "e": [-9, 4], "a": [1, 2], "t": [-1, -1]}.items()]
    _same(_model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 0, 1])], inits), {"x": x})


@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("xshape,target", [((0, 3, 5), [0, 4]), ((0, 1, 3, 1, 5), [0, 4]),
                                           ((0, 2, 4, 1, 5), [0, 2, 1]), ((2, 0, 3), [0, 0, 7]),
                                           ((0, 6), [0, 2, 3]), ((3, 4, 5), [0, -1])])
def test_reshape_copying_a_zero_size_leading_dim(xshape, target, const):
    x = np.zeros(xshape, np.float32)
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xshape))]
    t = np.array(target, np.int64)
    if const:
        m = _model(node, ins, [numpy_helper.from_array(t, "shape")])
        feed = {"x": x}
    else:
        m = _model(node, ins + [helper.make_tensor_value_info("shape", TensorProto.INT64, [len(target)])])
        feed = {"x": x, "shape": t}
    _same(m, feed)


@pytest.mark.parametrize("xshape,target", [((1, 2, 1, 1), [1, 2, 0, 1]), ((1, 4, 4, 2), [0, 4, 4, 2]), ((1,), [0]),
                                           ((3, 1), [2, 1, 0]), ((0, 1), [0, 5]), ((2, 1), [2, 3])])
def test_expand_a_one_to_zero(xshape, target):
    """A dim of 1 broadcasts to the target's 0 (numpy's rule): the lowering took max(1, 0) = 1."""
    x = np.arange(int(np.prod(xshape)), dtype=np.float32).reshape(xshape)
    node = helper.make_node("Expand", ["x", "shape"], ["y"])
    m = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xshape))],
               [numpy_helper.from_array(np.array(target, np.int64), "shape")])
    _same(m, {"x": x})


@pytest.mark.parametrize("xshape,ishape,b", [((0, 5, 3, 4), (0, 5, 3, 0, 1), 3), ((0, 0), (1,), 0),
                                             ((0, 3, 0, 4), (2, 2), 0), ((2, 3), (0, 2), 0), ((2, 3, 0), (2, 1, 1), 1),
                                             ((3, 4), (2, 1), 0)])
def test_gather_nd_with_an_empty_result(xshape, ishape, b):
    """An empty batch, index list or gathered slice: the empty result (reshape(-1) of 0 elements raised)."""
    x = np.zeros(xshape, np.float32)
    idx = np.zeros(ishape, np.int64)
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=b)
    m = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xshape))],
               [numpy_helper.from_array(idx, "i")])
    _same(m, {"x": x})


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("axes", [None, []])
@pytest.mark.parametrize("op", ["ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                                "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"])
def test_reduce_of_a_scalar_applies_the_elementwise_term(op, axes, dt):
    """A rank-0 input has nothing to reduce, but ReduceSumSquare / L1 / LogSum still square / abs / log it (the
    lowering returned the input unchanged: ReduceSumSquare(-5) gave -5, onnxruntime 25)."""
    v = np.array(2.5 if op == "ReduceLogSum" else -5, dt) if np.dtype(dt).kind == "i" else \
        np.array(2.5 if op == "ReduceLogSum" else -0.75, dt)
    if op == "ReduceLogSum" and np.dtype(dt).kind == "i":
        v = np.array(3, dt)
    ins = ["x"] + (["a"] if axes is not None else [])
    node = helper.make_node(op, ins, ["y"], keepdims=1)
    inits = [numpy_helper.from_array(np.array(axes, np.int64), "a")] if axes is not None else []
    m = _model(node, [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(np.dtype(dt)), [])],
               inits, opset=18)
    got, ref = InferenceSession(m).run(None, {"x": v})[0], _ort(m, {"x": v})[0]
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-6)


@pytest.mark.parametrize("maxsplit", [None, 0, 1, 2])
def test_string_split_whitespace_remainder_trailing_space(maxsplit):
    """On whitespace (no delimiter) the spec removes leading and trailing whitespace: the remainder a maxsplit
    leaves lost its trailing space too (str.split keeps it)."""
    x = np.array([" lead", "a  b ", "a b", "x  y  z  ", "  "], dtype=object)
    attrs = {} if maxsplit is None else {"maxsplit": maxsplit}
    node = helper.make_node("StringSplit", ["x"], ["y", "n"], **attrs)
    m = _model(node, [helper.make_tensor_value_info("x", TensorProto.STRING, [5])], opset=20)
    got, ref = InferenceSession(m).run(None, {"x": x}), _ort(m, {"x": x})
    assert got[0].shape == ref[0].shape and got[0].tolist() == ref[0].tolist()
    np.testing.assert_array_equal(got[1], ref[1])


@pytest.mark.parametrize("op,xshape,axes", [("Unsqueeze", (), [0, 1, 3]), ("Unsqueeze", (4, 1), [0, 4]),
                                            ("Unsqueeze", (1, 1), [0, 0]), ("Unsqueeze", (2,), [-1, 2]),
                                            ("Squeeze", (1, 3, 1), [3]), ("Squeeze", (1, 3, 1), [1])])
@pytest.mark.parametrize("const", [True, False])
def test_invalid_squeeze_unsqueeze_axes_raise(op, xshape, axes, const):
    """Axes out of range, given twice (Unsqueeze), or (Squeeze) of a dim other than 1: onnxruntime fails; so does
    neetorch, naming the node (the axes wrapped around, or a dim was left alone, before).  Squeeze's repeated axis
    is squeezed once, as onnxruntime does."""
    node = helper.make_node(op, ["x", "a"], ["y"], name="n0")
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xshape))]
    feed = {"x": np.zeros(xshape, np.float32)}
    a = np.array(axes, np.int64)
    if const:
        m = _model(node, ins, [numpy_helper.from_array(a, "a")])
    else:
        m = _model(node, ins + [helper.make_tensor_value_info("a", TensorProto.INT64, [len(axes)])])
        feed["a"] = a
    with pytest.raises(Exception):
        _ort(m, feed)
    with pytest.raises(Exception, match="n0"):
        InferenceSession(m).run(None, feed)


def test_squeeze_repeated_axis_once():
    node = helper.make_node("Squeeze", ["x", "a"], ["y"])
    m = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 1])],
               [numpy_helper.from_array(np.array([0, -3], np.int64), "a")])
    _same(m, {"x": np.arange(3, dtype=np.float32).reshape(1, 3, 1)})


@pytest.mark.parametrize("xshape,ishape,ushape,dt", [((4, 0), (1,), (0,), np.bool_), ((3, 1, 0, 3), (0, 1), (0, 1, 0, 3), np.int8),
                                                     ((2, 4, 4, 0), (1, 2), (1, 4, 0), np.float32),
                                                     ((3, 4), (0, 1), (0, 4), np.float32)])
def test_scatter_nd_nothing_written(xshape, ishape, ushape, dt):
    """An empty index list, slice or data: the data back (the linearization's reshape(-1) raised)."""
    x = (np.arange(int(np.prod(xshape))) % 3).astype(dt).reshape(xshape)
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"])
    tt = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    m = _model(node, [helper.make_tensor_value_info("x", tt, list(xshape)),
                      helper.make_tensor_value_info("u", tt, list(ushape))],
               [numpy_helper.from_array(np.zeros(ishape, np.int64), "i")])
    _same(m, {"x": x, "u": np.zeros(ushape, dt)})


@pytest.mark.parametrize("op,xshape", [("Hardmax", (2, 0)), ("Hardmax", (0, 3)), ("DynamicQuantizeLinear", (0, 3)),
                                       ("DynamicQuantizeLinear", (3,)), ("DynamicQuantizeLinear", (2, 2))])
def test_empty_and_all_zero_inputs(op, xshape):
    """Hardmax along an empty axis and DynamicQuantizeLinear of nothing raised (argmax / amin of 0 elements); an
    all-zero DynamicQuantizeLinear input has scale 1 (onnxruntime), not 0."""
    outs = 3 if op == "DynamicQuantizeLinear" else 1
    node = helper.make_node(op, ["x"], [f"y{i}" for i in range(outs)])
    m = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xshape))], opset=20)
    _same(m, {"x": np.zeros(xshape, np.float32)})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("xshape,attrs", [((1, 2, 2, 2), {"kernel_shape": [3, 3]}),
                                          ((1, 2, 2, 2), {"kernel_shape": [3, 3], "auto_pad": "VALID"}),
                                          ((2, 1, 5), {"kernel_shape": [6]}),
                                          ((1, 1, 4, 2), {"kernel_shape": [2, 3], "strides": [2, 1]}),
                                          ((1, 1, 2, 2, 2), {"kernel_shape": [3, 1, 1]})])
def test_pool_window_larger_than_input(op, xshape, attrs):
    """An output size of 0 (the window one past the input): onnxruntime's empty output (torch's pools raise "Output
    size is too small"); a larger window is an error in both, naming the node."""
    outs = 2 if op == "MaxPool" and len(xshape) < 5 else 1
    node = helper.make_node(op, ["x"], [f"y{i}" for i in range(outs)], **attrs)
    m = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xshape))])
    _same(m, {"x": np.ones(xshape, np.float32)})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_window_far_larger_than_input_raises(op):
    node = helper.make_node(op, ["x"], ["y"], name="p0", kernel_shape=[7])
    m = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 5])])
    with pytest.raises(Exception):
        _ort(m, {"x": np.ones((2, 1, 5), np.float32)})
    with pytest.raises(Exception, match="p0.*larger than the padded input"):
        InferenceSession(m).run(None, {"x": np.ones((2, 1, 5), np.float32)})
