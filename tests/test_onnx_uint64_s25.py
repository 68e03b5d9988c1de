"""Session 25: uint64 values from 2**63 (carried in int64 bits) in the ops whose result depends on reading the
bits as unsigned (neetorch/onnx/ops_uint64.py), each against onnxruntime (or numpy where onnxruntime has no uint64
kernel), through InferenceSession (traced and compiled)."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402

import neetorch as nee  # noqa: E402

RNG = np.random.default_rng(20251203)
EDGE = np.array([0, 1, 2, 3, 7, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**63 + 1, 2**63 + 5, 2**64 - 2, 2**64 - 1],
                np.uint64)


def _vals(n):
    return np.concatenate([EDGE, RNG.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)])


def _model(op, in_types, out_types, attrs=None, n_out=1, opset=18):
    node = h.make_node(op, [f"x{i}" for i in range(len(in_types))], [f"y{i}" for i in range(n_out)], **(attrs or {}))
    g = h.make_graph([node], "g", [h.make_tensor_value_info(f"x{i}", t, None) for i, t in enumerate(in_types)],
                     [h.make_tensor_value_info(f"y{i}", t, None) for i, t in enumerate(out_types)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)]).SerializeToString()


def _both(m, feeds):
    names = [f"x{i}" for i in range(len(feeds))]
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, dict(zip(names, feeds)))
    got = nee.onnx.InferenceSession(m).run(None, dict(zip(names, feeds)))
    return want, got


def _same(want, got):
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("op", ["Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Equal"])
def test_compare(op):
    a = _vals(50)
    b = np.concatenate([a[1:], a[:1]])
    _same(*_both(_model(op, [T.UINT64] * 2, [T.BOOL]), [a, b]))


@pytest.mark.parametrize("op", ["Max", "Min", "Div", "Mod", "Add", "Sub", "Mul"])
def test_binary(op):
    a = _vals(50)
    b = np.concatenate([a[3:], a[:3]])
    if op in ("Div", "Mod"):
        b = np.where(b == 0, np.uint64(3), b)
    _same(*_both(_model(op, [T.UINT64] * 2, [T.UINT64]), [a, b]))


def test_div_broadcast_and_zero_divisor():
    a = _vals(10).reshape(-1, 1)
    b = np.array([1, 3, 2**63, 2**64 - 1, 10**18], np.uint64)
    _same(*_both(_model("Div", [T.UINT64] * 2, [T.UINT64]), [a, b]))
    with pytest.raises(Exception, match="division by zero"):
        nee.onnx.InferenceSession(_model("Div", [T.UINT64] * 2, [T.UINT64])).run(
            None, {"x0": a, "x1": np.zeros(5, np.uint64)})


def test_clip_and_bitshift():
    x = _vals(40)
    lo, hi = np.array(2**40, np.uint64), np.array(2**63 + 7, np.uint64)
    _same(*_both(_model("Clip", [T.UINT64] * 3, [T.UINT64], opset=13), [x, lo, hi]))
    s = (np.arange(x.size) % 64).astype(np.uint64)
    _same(*_both(_model("BitShift", [T.UINT64] * 2, [T.UINT64], {"direction": "RIGHT"}), [x, s]))
    _same(*_both(_model("BitShift", [T.UINT64] * 2, [T.UINT64], {"direction": "LEFT"}), [x, s]))


@pytest.mark.parametrize("to,np_to", [(T.FLOAT, np.float32), (T.DOUBLE, np.float64), (T.FLOAT16, np.float16),
                                      (T.INT64, np.int64), (T.UINT32, np.uint32), (T.INT8, np.int8)])
def test_cast_from_uint64(to, np_to):
    x = _vals(60)
    _same(*_both(_model("Cast", [T.UINT64], [to], {"to": to}), [x]))


@pytest.mark.parametrize("src,np_src", [(T.FLOAT, np.float32), (T.DOUBLE, np.float64)])
def test_cast_to_uint64(src, np_src):
    x = np.array([0, 1.5, 2.0**52 + 1, 2.0**63, 2.0**63 + 2.0**40, 1.8e19, 2.0**64 - 2.0**12, 12345.75], np_src)
    _same(*_both(_model("Cast", [src], [T.UINT64], {"to": T.UINT64}), [x]))


def test_abs_sign_topk_against_numpy():
    x = _vals(30)
    got = nee.onnx.InferenceSession(_model("Abs", [T.UINT64], [T.UINT64])).run(None, {"x0": x})[0]
    np.testing.assert_array_equal(got, x)
    got = nee.onnx.InferenceSession(_model("Sign", [T.UINT64], [T.UINT64])).run(None, {"x0": x})[0]
    np.testing.assert_array_equal(got, (x != 0).astype(np.uint64))
    k = np.array([5], np.int64)
    vals, idx = nee.onnx.InferenceSession(_model("TopK", [T.UINT64, T.INT64], [T.UINT64, T.INT64], n_out=2)).run(
        None, {"x0": x, "x1": k})
    np.testing.assert_array_equal(vals, np.sort(x)[::-1][:5])
    np.testing.assert_array_equal(x[idx], vals)
    for op, ref in (("ReduceMax", x.max()), ("ReduceMin", x.min()), ("ArgMax", x.argmax()), ("ArgMin", x.argmin())):
        out = T.INT64 if op.startswith("Arg") else T.UINT64
        got = nee.onnx.InferenceSession(_model(op, [T.UINT64], [out], {"keepdims": 0})).run(None, {"x0": x})[0]
        assert got == ref, op
