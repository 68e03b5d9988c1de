"""ONNX import for inference, with onnxruntime's Python API: ``import neetorch.onnx as ort`` runs code written for
``import onnxruntime as ort``.

``import neetorch.onnx`` (the package is not imported by ``import neetorch``).
* :mod:`.loader`: validated loading (checker, shape inference, opsets, safe external data);
* :mod:`.lowering` + ``ops_*``: the ``{op_type: fn(ctx, node, *inputs)}`` table onto nee ops;
* :mod:`.session`: ``InferenceSession`` (``nee.jit`` with symbolic dims as dynamic dims): ``run``,
  ``run_with_ort_values``, ``io_binding`` / ``run_with_iobinding``, ``run_async``, profiling, providers;
* :mod:`.ort_api`: the rest of onnxruntime's everyday API: ``SessionOptions``, ``RunOptions``,
  ``GraphOptimizationLevel``, ``ExecutionMode``, ``OrtValue``, ``IOBinding``, ``get_available_providers()``,
  ``get_device()``, ``get_version_string()`` and onnxruntime's error classes (``InvalidArgument``, ``Fail``,
  ``NoSuchFile``, ``InvalidProtobuf``, ``InvalidGraph``, ``NotImplemented``, ...; also importable from
  ``neetorch.onnx.capi.onnxruntime_pybind11_state``), each a subclass of :class:`OnnxError`'s family;
* :mod:`.backend`: the standard ``onnx.backend`` API;
* ``python3 -m neetorch.onnx model.onnx [--input name=file.npy] [--repeat N]``.

``__version__`` / ``get_version_string()`` are neetorch's version; ``ORT_API_VERSION`` is the onnxruntime API
version mirrored.
"""
from . import capi
from .loader import MIN_OPSET, InvalidInputError, ModelLoadError, OnnxError, UnsupportedModelError, load_model
from .lowering import OPS, LoweringError
from .ort_api import (
    ORT_API_VERSION,
    DeviceReset,
    EngineError,
    EPFail,
    ExecutionMode,
    ExecutionOrder,
    Fail,
    GraphOptimizationLevel,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    IOBinding,
    ModelLoadCanceled,
    ModelLoaded,
    ModelMetadata,
    ModelRequiresCompilation,
    NoModel,
    NoSuchFile,
    NotFound,
    OrtValue,
    RunOptions,
    RuntimeException,
    SessionOptions,
    get_all_providers,
    get_available_providers,
    get_device,
    get_version_string,
)
from .ort_api import _NotImplemented as NotImplemented
from .session import InferenceSession, NodeArg

__version__ = get_version_string()

__all__ = ["MIN_OPSET", "OPS", "ORT_API_VERSION", "DeviceReset", "EPFail", "EngineError", "ExecutionMode",
           "ExecutionOrder", "Fail", "GraphOptimizationLevel", "IOBinding", "InferenceSession", "InvalidArgument",
           "InvalidGraph", "InvalidInputError", "InvalidProtobuf", "LoweringError", "ModelLoadCanceled",
           "ModelLoadError", "ModelLoaded", "ModelMetadata", "ModelRequiresCompilation", "NoModel", "NoSuchFile",
           "NodeArg", "NotFound", "NotImplemented", "OnnxError", "OrtValue", "RunOptions", "RuntimeException",
           "SessionOptions", "UnsupportedModelError", "capi", "get_all_providers", "get_available_providers",
           "get_device", "get_version_string", "load_model", "supported_ops"]


def supported_ops() -> list:
    from .lowering import load_op_modules
    load_op_modules()
    return sorted(OPS)
