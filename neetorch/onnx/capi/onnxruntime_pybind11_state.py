"""onnxruntime's exception classes (and the option / value classes it also exposes here), from :mod:`..ort_api`."""
from ..ort_api import (
    DeviceReset,
    EngineError,
    EPFail,
    ExecutionMode,
    Fail,
    GraphOptimizationLevel,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    ModelLoaded,
    ModelRequiresCompilation,
    NoModel,
    NoSuchFile,
    NotFound,
    RunOptions,
    RuntimeException,
    SessionOptions,
)
from ..ort_api import _NotImplemented as NotImplemented

__all__ = ["DeviceReset", "EPFail", "EngineError", "ExecutionMode", "Fail", "GraphOptimizationLevel",
           "InvalidArgument", "InvalidGraph", "InvalidProtobuf", "ModelLoadCanceled", "ModelLoaded",
           "ModelRequiresCompilation", "NoModel", "NoSuchFile", "NotFound", "NotImplemented", "RunOptions",
           "RuntimeException", "SessionOptions"]
