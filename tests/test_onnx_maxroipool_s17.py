"""ONNX MaxRoiPool (Caffe's RoI max pooling; the last default-domain op neetorch lacked) against onnxruntime's
RoiPool kernel: bit-equal over pooled shapes, spatial scales, half-way coordinates (C's round), inverted and
out-of-map RoIs (empty bins give 0), RoI counts as a dynamic dim, and in blocks of RoIs."""
import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from neetorch.onnx import InferenceSession
from neetorch.onnx import ops_vision

ort = pytest.importorskip("onnxruntime")


def _model(ps, scale, shape=(2, 3, 9, 11)):
    n = h.make_node("MaxRoiPool", ["x", "r"], ["y"], pooled_shape=ps, spatial_scale=scale)
    g = h.make_graph([n], "g", [h.make_tensor_value_info("x", TP.FLOAT, list(shape)),
                                h.make_tensor_value_info("r", TP.FLOAT, ["R", 5])],
                     [h.make_tensor_value_info("y", TP.FLOAT, ["R", shape[1]] + list(ps))])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 13)]).SerializeToString()


def _rois(rng, R, n_batch, hi):
    r = np.zeros((R, 5), np.float32)
    r[:, 0] = rng.integers(0, n_batch, R)
    r[:, 1:] = rng.uniform(-4, hi, (R, 4)).round(1)
    r[: R // 2, 1:3] = np.minimum(r[: R // 2, 1:3], r[: R // 2, 3:5])   # the rest may be inverted
    r[0, 1:] = [2.5, 1.5, 5.5, 4.5]                                    # halves: round away from zero
    return r


@pytest.mark.parametrize("ps, scale", [([2, 2], 1.0), ([3, 4], 0.5), ([1, 1], 1.0), ([5, 3], 0.25), ([4, 4], 2.0)])
def test_max_roi_pool_matches_onnxruntime(ps, scale):
    m = _model(ps, scale)
    s, o = InferenceSession(m), ort.InferenceSession(m, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(sum(ps))
    for R in (1, 6, 13):
        x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
        r = _rois(rng, R, 2, 26)
        np.testing.assert_array_equal(s.run(None, {"x": x, "r": r})[0], o.run(None, {"x": x, "r": r})[0])


def test_max_roi_pool_in_blocks_of_rois(monkeypatch):
    monkeypatch.setattr(ops_vision, "_GATHER_BUDGET", 600)    # a few RoIs per block
    m = _model([2, 3], 0.5, (1, 4, 8, 8))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    r = _rois(rng, 11, 1, 20)
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x, "r": r})[0]
    np.testing.assert_array_equal(InferenceSession(m).run(None, {"x": x, "r": r})[0], want)


def test_max_roi_pool_bad_batch_index_is_an_error_not_a_crash():
    m = _model([2, 2], 1.0)
    r = np.array([[5, 0, 0, 3, 3]], np.float32)
    with pytest.raises(Exception, match="index|out of range|bounds"):
        InferenceSession(m).run(None, {"x": np.zeros((2, 3, 9, 11), np.float32), "r": r})
