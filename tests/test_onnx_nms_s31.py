"""NonMaxSuppression's greedy selection (``onnx/host_kernels.py``: one Numba pass, IoUs against the kept boxes
only) against onnxruntime: batches and classes, both box formats, score thresholds, output limits, IoU
thresholds not exact in float32, ties in score, degenerate and overlapping boxes, and a detector-sized case
(thousands of candidates kept: torchvision's batched NMS, classes offset apart)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import neetorch as nee  # noqa: E402


def _nms_model(max_out, iou, score=None, center=0):
    ins = ["b", "s", "mo", "it"] + (["st"] if score is not None else [])
    inits = [nh.from_array(np.array([max_out], np.int64), "mo"), nh.from_array(np.array([iou], np.float32), "it")]
    if score is not None:
        inits.append(nh.from_array(np.array([score], np.float32), "st"))
    g = h.make_graph([h.make_node("NonMaxSuppression", ins, ["y"], center_point_box=center)], "g",
                     [h.make_tensor_value_info("b", T.FLOAT, None), h.make_tensor_value_info("s", T.FLOAT, None)],
                     [h.make_tensor_value_info("y", T.INT64, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def _boxes(rng, B, n, center, spread=10.0, size=3.0):
    p = rng.uniform(0, spread, (B, n, 2)).astype(np.float32)
    wh = rng.uniform(0.2, size, (B, n, 2)).astype(np.float32)
    if center:
        return np.concatenate([p, wh], -1)
    flip = rng.random((B, n, 1)) < 0.3      # some boxes given with corners swapped (the op takes either)
    b = np.concatenate([p, p + wh], -1)
    return np.where(flip, np.concatenate([p + wh, p], -1), b).astype(np.float32)


def _check(m, boxes, scores):
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"b": boxes, "s": scores})[0]
    for jit in (False, True):
        got = nee.onnx.InferenceSession(m, jit=jit).run(None, {"b": boxes, "s": scores})[0]
        assert got.dtype == np.int64 and got.shape == want.shape, (got.shape, want.shape)
        np.testing.assert_array_equal(got, want)
    return want


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("B,C,n", [(1, 1, 1), (1, 1, 37), (2, 3, 50), (3, 2, 200)])
@pytest.mark.parametrize("max_out,iou,score", [(1000, 0.5, None), (3, 0.45, None), (10, 0.3, 0.4), (0, 0.5, None),
                                               (1000, 0.0, 0.95), (1000, 1.0, None)])
def test_nms_matches_onnxruntime(center, B, C, n, max_out, iou, score):
    rng = np.random.default_rng(B * 100 + C * 10 + n + center)
    boxes = _boxes(rng, B, n, center)
    scores = rng.random((B, C, n)).astype(np.float32)
    _check(_nms_model(max_out, iou, score, center), boxes, scores)


@pytest.mark.parametrize("iou", [0.5, 1.0])
def test_ties_degenerate_and_identical_boxes(iou):
    rng = np.random.default_rng(7)
    boxes = _boxes(rng, 1, 60, 0, spread=4.0)
    boxes[0, 10] = boxes[0, 11] = boxes[0, 12] = [100, 100, 102, 103]   # identical boxes, apart from the rest
    boxes[0, 20, 2:] = boxes[0, 20, :2]                    # zero area
    boxes[0, 21, 2] = boxes[0, 21, 0]                      # zero height
    boxes[0, 30] = [0, 0, 2, 2]                             # IoU with the next one exactly 0.5: not suppressed
    boxes[0, 31] = [0, 0, 2, 1]                             # (the test is IoU > threshold, strictly)
    scores = np.round(rng.random((1, 2, 60)), 1).astype(np.float32)   # many equal scores: index order decides
    scores[0, :, 30:32] = [1.5, 1.25]
    scores[0, :, 10:13] = [0.7, 0.9, 0.7]
    out = _check(_nms_model(100, iou), boxes, scores).tolist()
    # 31 overlaps 30 at IoU 0.5 exactly: kept at both thresholds; of the identical boxes (IoU 1) the best (11) is
    # kept, the others only when the threshold is 1
    assert len(out) > 5 and [0, 0, 31] in out and [0, 0, 11] in out
    assert ([0, 0, 10] in out) == ([0, 0, 12] in out) == (iou == 1.0)


def test_detector_sized_batched_nms():
    # torchvision's batched_nms: boxes of class k offset by k * (max coordinate + 1), one NMS over all of them:
    # most pairs do not overlap, and most of the 6,000 boxes are kept
    rng = np.random.default_rng(3)
    n, classes = 6000, 60
    boxes = _boxes(rng, 1, n, 0, spread=300.0, size=60.0)
    label = rng.integers(0, classes, n)
    boxes = boxes + (label * 400.0).astype(np.float32)[None, :, None]
    scores = rng.random((1, 1, n)).astype(np.float32)
    out = _check(_nms_model(2 ** 62, 0.55), boxes, scores)
    assert 1000 < len(out) < n
