"""ONNX 3-D Conv lowered onto nn.functional.conv3d (its depth taps side by side as the channels of one 2-D conv over
the output frames), against onnxruntime: kernel depths 1 / 3 / 5, strides, dilations, symmetric and asymmetric
pads, groups, biases, batches, odd sizes."""
import numpy as np
import pytest

import neetorch as nee

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402

CASES = [
    # (N, C, D, H, W), O, kernel, strides, dilations, pads (6), group, bias
    ((1, 16, 8, 14, 14), 24, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1, 1, 1, 1), 1, True),
    ((2, 3, 9, 20, 18), 8, (3, 7, 7), (1, 2, 2), (1, 1, 1), (1, 3, 3, 1, 3, 3), 1, False),
    ((1, 8, 7, 9, 11), 12, (5, 3, 3), (2, 1, 2), (1, 2, 1), (2, 1, 0, 1, 2, 1), 1, True),
    ((1, 12, 6, 10, 10), 12, (3, 3, 3), (1, 1, 1), (2, 1, 1), (2, 1, 1, 2, 1, 1), 4, True),
    ((1, 8, 5, 6, 7), 16, (1, 3, 3), (1, 1, 1), (1, 1, 1), (0, 1, 1, 0, 1, 1), 2, False),
    ((1, 6, 4, 5, 5), 6, (3, 1, 1), (1, 1, 1), (1, 1, 1), (1, 0, 0, 1, 0, 0), 6, True),
]


@pytest.mark.parametrize("case", CASES)
def test_conv3d_vs_onnxruntime(case):
    shape, O, k, s, d, p, g, bias = case
    rng = np.random.default_rng(sum(shape) + O)
    w = (rng.standard_normal((O, shape[1] // g) + k) * 0.2).astype(np.float32)
    inits = [nh.from_array(w, "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(nh.from_array(rng.standard_normal(O).astype(np.float32), "b"))
        ins.append("b")
    node = h.make_node("Conv", ins, ["y"], kernel_shape=list(k), strides=list(s), dilations=list(d), pads=list(p),
                       group=g)
    gr = h.make_graph([node], "c3d", [h.make_tensor_value_info("x", TP.FLOAT, list(shape))],
                      [h.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    m = h.make_model(gr, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
    feed = {"x": rng.standard_normal(shape).astype(np.float32)}
    s_nee = nee.onnx.InferenceSession(m)
    for _ in range(3):
        got = s_nee.run(None, feed)[0]
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
