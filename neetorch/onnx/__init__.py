"""ONNX import for inference: ``neetorch.onnx.InferenceSession(model)`` mirrors onnxruntime.

``import neetorch.onnx`` (the package is not imported by ``import neetorch``).
* :mod:`.loader`: validated loading (checker, shape inference, opsets, safe external data);
* :mod:`.lowering` + ``ops_*``: the ``{op_type: fn(ctx, node, *inputs)}`` table onto nee ops;
* :mod:`.session`: ``InferenceSession`` (``nee.jit`` with symbolic dims as dynamic dims);
* :mod:`.backend`: the standard ``onnx.backend`` API;
* ``python3 -m neetorch.onnx model.onnx [--input name=file.npy] [--repeat N]``.
"""
from .loader import OnnxError, ModelLoadError, UnsupportedModelError, InvalidInputError, load_model, MIN_OPSET
from .lowering import OPS, LoweringError
from .session import InferenceSession, NodeArg

__all__ = ["InferenceSession", "NodeArg", "OnnxError", "ModelLoadError", "UnsupportedModelError",
           "InvalidInputError", "LoweringError", "load_model", "OPS", "MIN_OPSET", "supported_ops"]


def supported_ops() -> list:
    from .lowering import load_op_modules
    load_op_modules()
    return sorted(OPS)
