"""Single-node ONNX models for the differential fuzzer's regression tests (tests/test_onnx_fuzz_s*.py): the model
of one node, and onnxruntime's outputs for it."""
from __future__ import annotations

import onnx
import onnxruntime as ort
from onnx import helper


def model(node, inputs, inits=(), opset=17):
    """A model of ``node`` alone (its outputs untyped: shape inference or the run tells them)."""
    g = helper.make_graph([node], "g", inputs, [helper.make_value_info(o, onnx.TypeProto()) for o in node.output],
                          initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def ort_run(m, feed):
    """onnxruntime's outputs of model ``m`` on ``feed`` (CPU provider, its log silenced)."""
    so = ort.SessionOptions()
    so.log_severity_level = 4
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)
