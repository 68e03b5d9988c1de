"""``neetorch.onnx.capi``: where onnxruntime keeps its error classes (``capi.onnxruntime_pybind11_state``), so
``from neetorch.onnx.capi.onnxruntime_pybind11_state import InvalidArgument`` works as with onnxruntime."""
from . import onnxruntime_pybind11_state

__all__ = ["onnxruntime_pybind11_state"]
