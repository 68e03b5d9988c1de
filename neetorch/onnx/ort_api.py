"""onnxruntime's everyday Python API over neetorch: ``import neetorch.onnx as ort`` for ``import onnxruntime as ort``.

What is here, with onnxruntime 1.32's behaviour (``tests/test_onnx_ort_api.py`` runs the same script bodies on
both modules and compares results, types and error classes):

* the error classes of ``onnxruntime.capi.onnxruntime_pybind11_state`` (``InvalidArgument``, ``Fail``,
  ``NoSuchFile``, ``InvalidProtobuf``, ``InvalidGraph``, ``NotImplemented``, ...), each a subclass of neetorch's
  :class:`~neetorch.onnx.OnnxError` family (``InvalidArgument`` is an :class:`InvalidInputError`, ``NoSuchFile`` /
  ``InvalidProtobuf`` / ``InvalidGraph`` are :class:`ModelLoadError` s, ``NotImplemented`` an
  :class:`UnsupportedModelError`), so code catching either family keeps working;
* :class:`SessionOptions`, :class:`RunOptions`, :class:`GraphOptimizationLevel`, :class:`ExecutionMode`,
  :class:`ExecutionOrder`, :class:`ModelMetadata`;
* :class:`OrtValue` (a numpy array on the host, a neetorch tensor on a device, or a sequence / map value),
  :class:`IOBinding`;
* ``get_available_providers()`` / ``get_all_providers()`` / ``get_device()`` / ``get_version_string()``;
  provider names map to neetorch devices: ``CPUExecutionProvider`` -> cpu, ``CUDAExecutionProvider`` -> cuda,
  ``OpenCLExecutionProvider`` -> opencl, ``Nee<Type>ExecutionProvider`` -> any other neetorch device type
  (a plugin's, e.g. ``NeeSimnpuExecutionProvider``); options ``{"device_id": N}`` pick the device index;
* :class:`OrtSessionAPI`, the session methods beyond ``run`` (``run_with_ort_values``, ``io_binding`` /
  ``run_with_iobinding``, ``run_async``, profiling, providers, fallback switches) that
  :class:`~neetorch.onnx.InferenceSession` inherits.
"""
from __future__ import annotations

import collections.abc
import ctypes
import datetime
import enum
import json
import os
import sys
import threading
import time
import warnings
from types import MappingProxyType

import numpy as np

from .loader import ONNX_TO_NP, InvalidInputError, ModelLoadError, OnnxError, UnsupportedModelError

__all__ = [
    "ORT_API_VERSION",
    "DeviceReset",
    "EPFail",
    "EngineError",
    "ExecutionMode",
    "ExecutionOrder",
    "Fail",
    "GraphOptimizationLevel",
    "IOBinding",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidProtobuf",
    "ModelLoadCanceled",
    "ModelLoaded",
    "ModelMetadata",
    "ModelRequiresCompilation",
    "NoModel",
    "NoSuchFile",
    "NotFound",
    "NotImplemented",
    "OrtValue",
    "RunOptions",
    "RuntimeException",
    "SessionOptions",
    "get_all_providers",
    "get_available_providers",
    "get_device",
    "get_version_string",
]

#: the onnxruntime Python API version this module mirrors
ORT_API_VERSION = "1.32"


# ---------------------------------------------------------------- errors (onnxruntime_pybind11_state's names)
class Fail(OnnxError):
    """onnxruntime's FAIL status: a run or load failed for a reason no finer class names."""


class InvalidArgument(InvalidInputError):
    """onnxruntime's INVALID_ARGUMENT: an input / output name, dtype, rank or dim that does not match the model."""


class NoSuchFile(ModelLoadError):
    """onnxruntime's NO_SUCHFILE: the model path does not exist."""


class NoModel(ModelLoadError):
    """onnxruntime's NO_MODEL."""


class InvalidProtobuf(ModelLoadError):
    """onnxruntime's INVALID_PROTOBUF: the bytes are not a (complete) ONNX protobuf."""


class InvalidGraph(ModelLoadError):
    """onnxruntime's INVALID_GRAPH: the ONNX checker or shape inference rejected the graph."""


class _NotImplemented(UnsupportedModelError):
    """onnxruntime's NOT_IMPLEMENTED: ops, opsets, types or features neetorch does not run."""


_NotImplemented.__name__ = _NotImplemented.__qualname__ = "NotImplemented"
# onnxruntime's class shadows the builtin of that name; it is exported as ``NotImplemented`` (module __getattr__
# below and ``__all__``) but never bound here under that name
_EXTRA = {"NotImplemented": _NotImplemented}


class EngineError(OnnxError):
    """onnxruntime's ENGINE_ERROR."""


class RuntimeException(OnnxError):
    """onnxruntime's RUNTIME_EXCEPTION."""


class ModelLoaded(OnnxError):
    """onnxruntime's MODEL_LOADED."""


class EPFail(OnnxError):
    """onnxruntime's EP_FAIL (neetorch never raises it: no run-time provider fallback)."""


class NotFound(OnnxError):
    """onnxruntime's NOT_FOUND."""


class ModelRequiresCompilation(OnnxError):
    """onnxruntime's MODEL_REQUIRES_COMPILATION."""


class ModelLoadCanceled(OnnxError):
    """onnxruntime's MODEL_LOAD_CANCELED."""


class DeviceReset(OnnxError):
    """onnxruntime's DEVICE_RESET."""


def __getattr__(name):
    try:
        return _EXTRA[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def ort_load_error(e: Exception) -> Exception:
    """The onnxruntime class for a load error of :func:`~neetorch.onnx.loader.load_model` (same message)."""
    if isinstance(e, (NoSuchFile, InvalidProtobuf, InvalidGraph, _NotImplemented)):
        return e
    msg = str(e)
    if isinstance(e, UnsupportedModelError):
        cls = _NotImplemented
    elif isinstance(e, ModelLoadError):
        if msg.startswith("ONNX model file not found"):
            cls = NoSuchFile
        elif "not a valid ONNX model" in msg or "empty file" in msg:
            cls = InvalidProtobuf
        elif msg.startswith(("ONNX checker rejected", "ONNX shape inference failed")):
            cls = InvalidGraph
        else:
            return e
    else:
        return e
    out = cls(msg)
    out.__traceback__ = e.__traceback__
    return out


# ---------------------------------------------------------------- enums
class GraphOptimizationLevel(enum.IntEnum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99

    def __str__(self):
        return f"{type(self).__name__}.{self.name}"


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1

    def __str__(self):
        return f"{type(self).__name__}.{self.name}"


class ExecutionOrder(enum.IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2

    def __str__(self):
        return f"{type(self).__name__}.{self.name}"


def _enum(cls, value, what):
    if isinstance(value, cls):
        return value
    name = getattr(value, "name", None)  # onnxruntime's own enum members
    if isinstance(name, str) and name in cls.__members__:
        return cls[name]
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        try:
            return cls(int(value))
        except ValueError:
            pass
    raise TypeError(f"{what} must be a {cls.__name__} ({', '.join(cls.__members__)}), got {value!r}")


# ---------------------------------------------------------------- options
def _field(cls, name, value):
    """``value`` checked for the option ``name`` of ``cls`` (``cls._FIELDS``: its type)."""
    want = cls._FIELDS.get(name)
    if want is None:
        raise AttributeError(f"'{cls.__name__}' object has no attribute '{name}'")
    if want is bool and isinstance(value, (bool, int, np.bool_, np.integer)):
        return bool(value)
    if want is int and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if want is str and isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    raise TypeError(f"{cls.__name__}.{name} must be {want.__name__}, got {type(value).__name__} {value!r}")


class SessionOptions:
    """onnxruntime's ``SessionOptions``; what each setting does in neetorch:

    * ``graph_optimization_level``: ``ORT_DISABLE_ALL`` turns off neetorch's ONNX-level rewrite
      (:func:`~neetorch.onnx.optimize.fold_affine`); other levels keep it (``nee.jit`` always runs its passes);
    * ``intra_op_num_threads`` > 0 sets neetorch's process-wide CPU thread count (``nee.set_num_threads``);
      ``inter_op_num_threads`` and ``execution_mode`` are accepted: neetorch runs one node after another;
    * ``enable_profiling`` / ``profile_file_prefix``: ``end_profiling()`` writes a chrome-trace JSON list (session
      events plus every neetorch kernel launch and compile, from ``nee.profile``) and returns its path;
    * ``optimized_model_filepath``: neetorch writes the ONNX model it lowers (local functions inlined, shapes
      inferred, affine epilogues folded; external data made internal), not a fused / compiled graph; an ``.ort``
      path (onnxruntime's own format) is refused;
    * ``log_severity_level`` <= 1 (INFO / VERBOSE) prints one line per session about how it runs to stderr;
    * ``add_free_dimension_override_by_name`` / ``_by_denotation`` fix a symbolic input dim (runs check it);
    * ``add_initializer(name, OrtValue)`` replaces an initializer's value;
    * ``enable_mem_pattern``, ``enable_mem_reuse``, ``enable_cpu_mem_arena``, ``execution_order``,
      ``use_deterministic_compute``, ``use_per_session_threads``, ``logid``, ``log_verbosity_level`` and the
      session config entries are kept and reported (neetorch's memory plan is always on).
    """

    _FIELDS = MappingProxyType({
        "intra_op_num_threads": int, "inter_op_num_threads": int, "log_severity_level": int,
        "log_verbosity_level": int, "logid": str, "enable_profiling": bool, "profile_file_prefix": str,
        "optimized_model_filepath": str, "enable_mem_pattern": bool, "enable_mem_reuse": bool,
        "enable_cpu_mem_arena": bool, "use_deterministic_compute": bool, "use_per_session_threads": bool})

    def __setattr__(self, name, value):
        # as onnxruntime's (pybind) object: unknown attributes and wrong types are errors, not silently kept
        if not name.startswith("_") and name not in ("graph_optimization_level", "execution_mode",
                                                     "execution_order"):
            value = _field(type(self), name, value)
        object.__setattr__(self, name, value)

    def __init__(self):
        self._graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self._execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self._execution_order = ExecutionOrder.DEFAULT
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.optimized_model_filepath = ""
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.enable_cpu_mem_arena = True
        self.use_deterministic_compute = False
        self.use_per_session_threads = True
        self._config = {}
        self._dim_by_name = {}
        self._dim_by_denotation = {}
        self._initializers = {}
        self._providers = []

    graph_optimization_level = property(
        lambda self: self._graph_optimization_level,
        lambda self, v: setattr(self, "_graph_optimization_level",
                                _enum(GraphOptimizationLevel, v, "graph_optimization_level")))
    execution_mode = property(lambda self: self._execution_mode,
                              lambda self, v: setattr(self, "_execution_mode",
                                                      _enum(ExecutionMode, v, "execution_mode")))
    execution_order = property(lambda self: self._execution_order,
                               lambda self, v: setattr(self, "_execution_order",
                                                       _enum(ExecutionOrder, v, "execution_order")))

    def add_session_config_entry(self, key: str, value: str) -> None:
        _config_check("add_session_config_entry", key, value)
        if key == "session.load_model_format" and value.upper() == "ORT":
            raise _NotImplemented("session.load_model_format=ORT: neetorch loads ONNX models only (not onnxruntime's "
                                  ".ort format)")
        self._config[key] = value

    def get_session_config_entry(self, key: str) -> str:
        return _config_get(self, key)

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        self._dim_by_name[str(dim_name)] = int(dim_value)

    def add_free_dimension_override_by_denotation(self, dim_denotation: str, dim_value: int) -> None:
        self._dim_by_denotation[str(dim_denotation)] = int(dim_value)

    def add_initializer(self, name: str, ortvalue) -> None:
        if not isinstance(ortvalue, OrtValue) or not ortvalue.is_tensor():
            raise TypeError(f"add_initializer({name!r}, ...): expected a tensor OrtValue, got "
                            f"{type(ortvalue).__name__}")
        self._initializers[str(name)] = ortvalue

    def add_provider(self, provider_name: str, provider_options: dict) -> None:
        self._providers.append((str(provider_name), dict(provider_options or {})))

    def has_providers(self) -> bool:
        return bool(self._providers)

    def register_custom_ops_library(self, library_path) -> None:
        raise _NotImplemented(f"register_custom_ops_library({library_path!r}): neetorch cannot load onnxruntime "
                              f"custom-op libraries (native kernels for onnxruntime's C API)")

    def add_external_initializers(self, names, ortvalues) -> None:
        for n, v in zip(names, ortvalues):
            self.add_initializer(n, v)

    def __repr__(self):
        return (f"SessionOptions(graph_optimization_level={self.graph_optimization_level}, intra_op_num_threads="
                f"{self.intra_op_num_threads}, enable_profiling={self.enable_profiling})")

    @classmethod
    def _from(cls, so):
        """A neetorch SessionOptions from ours (a copy), onnxruntime's or any object with its attributes."""
        out = cls()
        if so is None:
            return out
        for k in ("graph_optimization_level", "execution_mode", "execution_order"):
            v = getattr(so, k, None)
            if v is not None:
                setattr(out, k, v)
        for k in ("intra_op_num_threads", "inter_op_num_threads", "log_severity_level", "log_verbosity_level",
                  "logid", "enable_profiling", "profile_file_prefix", "optimized_model_filepath",
                  "enable_mem_pattern", "enable_mem_reuse", "enable_cpu_mem_arena", "use_deterministic_compute",
                  "use_per_session_threads"):
            if hasattr(so, k):
                setattr(out, k, getattr(so, k))
        if isinstance(so, SessionOptions):
            out._config = dict(so._config)
            out._dim_by_name, out._dim_by_denotation = dict(so._dim_by_name), dict(so._dim_by_denotation)
            out._initializers, out._providers = dict(so._initializers), list(so._providers)
        return out


class RunOptions:
    """onnxruntime's ``RunOptions``: ``terminate = True`` makes ``run()`` raise :class:`Fail` ("Exiting due to
    terminate flag being set to true.") before it starts (neetorch checks it when a run starts and between the
    host / compiled segments of a model with string values, not between kernels); ``logid`` names the run in
    the profile; ``only_execute_path_to_fetches`` is accepted (the compiled graph computes every output)."""

    _FIELDS = MappingProxyType({"log_severity_level": int, "log_verbosity_level": int, "logid": str,
                                "terminate": bool, "only_execute_path_to_fetches": bool})

    def __setattr__(self, name, value):
        if not name.startswith("_"):
            value = _field(type(self), name, value)
        object.__setattr__(self, name, value)

    def __init__(self):
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.terminate = False
        self.only_execute_path_to_fetches = False
        self._config = {}

    def add_run_config_entry(self, key: str, value: str) -> None:
        _config_check("add_run_config_entry", key, value)
        self._config[key] = value

    def get_run_config_entry(self, key: str) -> str:
        return _config_get(self, key)

    def add_active_adapter(self, adapter) -> None:
        raise _NotImplemented("LoRA adapters (add_active_adapter) are not supported by neetorch.onnx")


def _config_check(method: str, key, value) -> None:
    if not isinstance(key, str) or not isinstance(value, str):
        raise TypeError(f"{method}(key: str, value: str), got {type(key).__name__}, {type(value).__name__}")


def _config_get(options, key: str) -> str:
    """A SessionOptions / RunOptions config entry, or onnxruntime's Fail naming the class."""
    try:
        return options._config[key]
    except KeyError:
        raise Fail(f"{type(options).__name__} does not have configuration with key: {key}") from None


def check_run_options(run_options) -> None:
    if run_options is None:
        return
    if getattr(run_options, "terminate", False):
        raise Fail("Exiting due to terminate flag being set to true.")


class ModelMetadata:
    """onnxruntime's ``ModelMetadata`` (``get_modelmeta()``)."""

    def __init__(self, model):
        g = model.graph
        self.producer_name = model.producer_name
        self.graph_name = g.name
        self.domain = model.domain
        self.description = model.doc_string
        self.graph_description = g.doc_string
        # onnxruntime reports an unset model_version as INT64_MAX
        self.version = int(model.model_version) if model.model_version else 2 ** 63 - 1
        self.custom_metadata_map = {p.key: p.value for p in model.metadata_props}

    def __repr__(self):
        return f"ModelMetadata(producer_name={self.producer_name!r}, graph_name={self.graph_name!r})"


# ---------------------------------------------------------------- providers
_KNOWN = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "opencl": "OpenCLExecutionProvider"}


def _provider_name(typ: str) -> str:
    return _KNOWN.get(typ) or f"Nee{typ.capitalize()}ExecutionProvider"


def _device_types():
    import neetorch as nee
    return [(d.type, d.available) for d in nee.devices()]


def get_all_providers() -> list:
    """Every provider name neetorch knows (one per registered device type, available or not)."""
    return [_provider_name(t) for t, _ in _device_types() if t != "cpu"] + ["CPUExecutionProvider"]


def get_available_providers() -> list:
    """The providers usable here, in the precedence ``providers=get_available_providers()`` gets: CUDA first
    when a GPU is present, then CPU; OpenCL and plugin devices come after CPU (pick them by naming them first)."""
    avail = [t for t, ok in _device_types() if ok]
    out = ["CUDAExecutionProvider"] if "cuda" in avail else []
    out.append("CPUExecutionProvider")
    out += [_provider_name(t) for t in avail if t not in ("cpu", "cuda")]
    return out


def get_device() -> str:
    """"GPU" when neetorch's CUDA backend is usable, else "CPU" (onnxruntime's build-device string)."""
    return "GPU" if any(t == "cuda" and ok for t, ok in _device_types()) else "CPU"


def get_version_string() -> str:
    """neetorch's version (``neetorch.onnx.__version__``); the onnxruntime API it mirrors is ``ORT_API_VERSION``."""
    import neetorch
    return neetorch.__version__


def _type_of_provider(name: str):
    for typ, _ in _device_types():
        if _provider_name(typ) == name:
            return typ
    return None


def resolve_providers(providers, provider_options, enable_fallback: bool):
    """onnxruntime's provider arguments -> (neetorch device string, provider names, their options).

    As onnxruntime: a name that is not available here warns ("Specified provider ... is not in available
    provider names") and is skipped; a name no build knows fails the session, which falls back to CPU with
    onnxruntime's "EP Error" banner on stdout (``enable_fallback=0``: raises :class:`Fail`)."""
    if providers is None:
        return "cpu", ["CPUExecutionProvider"], {"CPUExecutionProvider": {}}
    try:
        return _resolve(providers, provider_options)
    except (ValueError, Fail) as e:  # onnxruntime: a session that fails to start retries on CPU, loudly
        if not enable_fallback:
            raise
        print("*************** EP Error ***************")
        print(f"EP Error {e} when using {providers}")
        print("Falling back to ['CPUExecutionProvider'] and retrying.")
        print("****************************************")
        return "cpu", ["CPUExecutionProvider"], {"CPUExecutionProvider": {}}


def _resolve(providers, provider_options):
    if not isinstance(providers, collections.abc.Sequence):
        raise ValueError("'providers' should be a sequence.")  # noqa: TRY004  (onnxruntime's class)
    pairs = []
    if provider_options is not None:
        if not isinstance(provider_options, collections.abc.Sequence):
            raise ValueError("'provider_options' should be a sequence.")
        if len(providers) != len(provider_options):
            raise ValueError("'providers' and 'provider_options' should be the same length if both are given.")
        if not all(isinstance(p, str) for p in providers):
            raise ValueError("Only string values for 'providers' are supported if 'provider_options' is given.")
        if not all(isinstance(o, dict) for o in provider_options):
            raise ValueError("'provider_options' values must be dicts.")
        pairs = list(zip(providers, provider_options))
    else:
        for p in providers:
            if isinstance(p, str):
                pairs.append((p, {}))
            elif isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], dict):
                pairs.append(p)
            else:
                raise ValueError("'providers' values must be either strings or (string, dict) tuples.")
    available = get_available_providers()
    known = set(get_all_providers())
    chosen = {}
    unknown = []
    for name, opts in pairs:
        if name not in available:
            warnings.warn(f"Specified provider '{name}' is not in available provider names.Available providers: "
                          f"'{', '.join(available)}'", stacklevel=4)
        if name in chosen:
            warnings.warn(f"Duplicate provider '{name}' encountered, ignoring.", stacklevel=4)
            continue
        if name not in known:
            unknown.append(name)
        if name in available:
            chosen[name] = {str(k): str(v) for k, v in opts.items()}
    if unknown:
        raise Fail(f"Unknown Provider Type: {unknown[0]}")
    chosen.setdefault("CPUExecutionProvider", {})
    first = next(iter(chosen))
    typ = _type_of_provider(first)
    dev = typ
    idx = chosen[first].get("device_id")
    if idx is not None and typ != "cpu":
        try:
            dev = f"{typ}:{int(idx)}"
        except ValueError:
            raise InvalidArgument(f"provider {first}: device_id must be an integer, got {idx!r}") from None
    return dev, list(chosen), chosen


def provider_for_device(device) -> str:
    return _provider_name(str(device).partition(":")[0])


# ---------------------------------------------------------------- OrtValue
_NP_TO_ONNX = {v: k for k, v in ONNX_TO_NP.items() if v != np.dtype(object)}


def _onnx_type_name(code: int) -> str:
    from onnx import TensorProto
    return TensorProto.DataType.Name(code).lower()


def _np_dtype(element_type):
    """numpy dtype from a numpy type / dtype or an ONNX element type code."""
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        dt = ONNX_TO_NP.get(int(element_type))
        if dt is None or dt == np.dtype(object):
            raise InvalidArgument(f"ONNX element type {int(element_type)} has no numeric numpy equivalent here")
        return dt
    return np.dtype(element_type)


def _device_of(device_type, device_id=0):
    typ = str(device_type).lower()
    if typ == "cpu":
        return "cpu"
    if typ == "gpu":
        typ = "cuda"
    import neetorch as nee
    info = {d.type: d for d in nee.devices()}
    d = info.get(typ)
    if d is None:
        raise Fail(f"Unsupported device type: {device_type} (neetorch devices: {', '.join(info)})")
    if not d.available or int(device_id) >= d.count:
        raise Fail(f"Can't allocate memory on the device {device_type}:{device_id}: "
                   f"{d.reason or 'no such device index'}")
    return f"{typ}:{int(device_id)}" if int(device_id) else typ


def _is_tensor_obj(v):
    from ..tensor.tensor import Tensor
    return isinstance(v, Tensor)


class OrtValue:
    """onnxruntime's ``OrtValue``: a tensor on a device (a numpy array on the host, shared with the caller's
    array like onnxruntime does; a neetorch tensor on any other device), or a sequence / map / empty optional
    (what ``run_with_ort_values`` returns for such outputs)."""

    __slots__ = ("_numpy_obj", "_v")

    def __init__(self, value, numpy_obj=None):
        self._v = value
        self._numpy_obj = numpy_obj

    # constructors
    @classmethod
    def ortvalue_from_numpy(cls, numpy_obj, /, device_type="cpu", device_id=0, vendor_id=-1):
        if not isinstance(numpy_obj, np.ndarray) or numpy_obj.dtype.kind in "OSU":
            raise Fail("Creation of OrtValues is currently only supported from non-string numpy arrays")
        if numpy_obj.dtype not in _NP_TO_ONNX:
            raise Fail(f"numpy dtype {numpy_obj.dtype} has no ONNX element type")
        dev = _device_of(device_type, device_id)
        if dev == "cpu":
            a = numpy_obj if numpy_obj.flags.c_contiguous else np.ascontiguousarray(numpy_obj)
            return cls(a, numpy_obj)
        from ..tensor.creation import from_numpy
        from .lowering import carry_np
        c = carry_np(numpy_obj.dtype)
        if c is None:
            raise Fail(f"numpy dtype {numpy_obj.dtype} cannot be held by neetorch")
        return cls(from_numpy(np.array(numpy_obj, dtype=c, order="C", copy=True)).to(dev))

    @classmethod
    def ortvalue_from_numpy_with_onnx_type(cls, data, /, onnx_element_type: int):
        dt = _np_dtype(onnx_element_type)
        if not isinstance(data, np.ndarray) or data.dtype.itemsize != dt.itemsize:
            raise Fail(f"ortvalue_from_numpy_with_onnx_type: the array's item size must equal "
                       f"{_onnx_type_name(int(onnx_element_type))}'s ({dt.itemsize} bytes)")
        return cls(np.ascontiguousarray(data).view(dt), data)

    @classmethod
    def ortvalue_from_shape_and_type(cls, shape, element_type, device_type="cpu", device_id=0, vendor_id=-1,
                                     memory_info=None):
        dt = _np_dtype(element_type)
        shape = tuple(int(d) for d in shape)
        dev = _device_of(device_type, device_id)
        if dev == "cpu":
            return cls(np.empty(shape, dt))
        return cls.ortvalue_from_numpy(np.zeros(shape, dt), device_type, device_id)

    @classmethod
    def from_dlpack(cls, data, /):
        return cls(np.from_dlpack(data))

    # accessors
    def is_tensor(self) -> bool:
        return isinstance(self._v, np.ndarray) or _is_tensor_obj(self._v)

    def is_tensor_sequence(self) -> bool:
        return isinstance(self._v, list) and not (self._v and isinstance(self._v[0], dict))

    def is_sparse_tensor(self) -> bool:
        return False

    def has_value(self) -> bool:
        return self._v is not None

    def _tensor_check(self, what):
        if not self.is_tensor():
            raise Fail(f"OrtValue.{what}(): the value is not a tensor ({self.data_type()})")

    def _np_dtype(self):
        v = self._v
        return v.dtype if isinstance(v, np.ndarray) else v.dtype.np

    def shape(self) -> list:
        self._tensor_check("shape")
        return [int(d) for d in self._v.shape]

    def element_type(self) -> int:
        self._tensor_check("element_type")
        return _NP_TO_ONNX[self._np_dtype()]

    def data_type(self) -> str:
        v = self._v
        if v is None:
            return "optional(none)"
        if isinstance(v, dict):
            return "map"
        if isinstance(v, list):
            if v and isinstance(v[0], dict):
                return "seq(map)"
            inner = OrtValue(v[0]).data_type() if v else "tensor(undefined)"
            return f"seq({inner})"
        dt = self._np_dtype()
        if dt == np.dtype(object):
            return "tensor(string)"
        return f"tensor({_onnx_type_name(_NP_TO_ONNX[dt])})"

    def device_name(self) -> str:
        if _is_tensor_obj(self._v):
            return self._v.device.type
        return "cpu"

    def tensor_size_in_bytes(self) -> int:
        self._tensor_check("tensor_size_in_bytes")
        v = self._v
        return int(v.nbytes) if isinstance(v, np.ndarray) else int(np.prod(v.shape, dtype=np.int64)) * v.dtype.itemsize

    def data_ptr(self) -> int:
        if not isinstance(self._v, np.ndarray):
            raise Fail(f"OrtValue.data_ptr(): only host (cpu) tensors expose a pointer; this one is on "
                       f"{self.device_name()}")
        return int(self._v.ctypes.data)

    def numpy(self):
        v = self._v
        if isinstance(v, np.ndarray):
            return v
        if _is_tensor_obj(v):
            return v.numpy(force=True)
        raise Fail(f"OrtValue.numpy(): numpy() is only supported for tensors, this value is {self.data_type()}")

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        if dtype is not None and a.dtype != dtype:
            return a.astype(dtype)
        return np.array(a, copy=True) if copy else a

    def __dlpack__(self, *, stream=None):
        return self.numpy().__dlpack__()

    def __dlpack_device__(self):
        return self.numpy().__dlpack_device__()

    def update_inplace(self, data) -> None:
        self._tensor_check("update_inplace")
        data = np.asarray(data)
        v = self._v
        if tuple(data.shape) != tuple(v.shape) or data.dtype != self._np_dtype():
            raise InvalidArgument(f"update_inplace: got {data.dtype} {list(data.shape)}, the OrtValue holds "
                                  f"{self._np_dtype()} {list(v.shape)}")
        if isinstance(v, np.ndarray):
            v[...] = data
        else:
            from ..tensor.creation import from_numpy
            v.copy_(from_numpy(np.ascontiguousarray(data)).to(v.device))

    def as_sparse_tensor(self):
        raise _NotImplemented("sparse tensors are not supported by neetorch.onnx")

    def __repr__(self):
        if self.is_tensor():
            return f"OrtValue({self.data_type()}, shape={self.shape()}, device={self.device_name()})"
        return f"OrtValue({self.data_type()})"

    # neetorch side
    def _host(self):
        """The value for ``run()``: a numpy array, a host list / dict, or None."""
        v = self._v
        if _is_tensor_obj(v):
            return v.numpy(force=True)
        return v


def _from_pointer(ptr: int, dtype, shape):
    """A numpy array over ``nbytes`` of host memory at ``ptr`` (what onnxruntime binds for raw pointers)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if n == 0:
        return np.empty(shape, dtype)
    buf = (ctypes.c_char * n).from_address(int(ptr))
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


# ---------------------------------------------------------------- IOBinding
class IOBinding:
    """onnxruntime's ``IOBinding``: inputs bound to host arrays, raw host pointers or OrtValues (kept on their
    device), outputs to a device (the result stays there as an OrtValue) or to preallocated OrtValues / host
    pointers (the result is written into them; dtype and shape must match).  Raw device pointers (``bind_input``
    / ``bind_output`` with ``device_type != "cpu"`` and a ``buffer_ptr``) are refused: neetorch's device buffers
    are cupy / OpenCL objects, not addresses."""

    def __init__(self, session):
        self._session = session
        self._inputs = {}
        self._outputs = {}    # name -> ("device", device) | ("value", OrtValue)
        self._results = None

    def _check_name(self, name, outputs=False):
        names = [a.name for a in (self._session.get_outputs() if outputs else self._session._bindable_inputs())]
        if name not in names:
            raise InvalidArgument(f"Failed to find NodeArg with name: {name} in the def list (the model's "
                                  f"{'outputs' if outputs else 'inputs'} are {names})")

    def bind_cpu_input(self, name, arr_on_cpu):
        self._check_name(name)
        self._inputs[name] = arr_on_cpu

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        self._check_name(name)
        if str(device_type).lower() != "cpu":
            raise _NotImplemented(f"bind_input({name!r}): raw {device_type} pointers are not supported by neetorch; "
                                  f"bind an OrtValue made with OrtValue.ortvalue_from_numpy(arr, {device_type!r})")
        self._inputs[name] = _from_pointer(buffer_ptr, _np_dtype(element_type), shape)

    def bind_ortvalue_input(self, name, ortvalue):
        self._check_name(name)
        if not isinstance(ortvalue, OrtValue):
            raise TypeError(f"bind_ortvalue_input({name!r}, ...): expected an OrtValue, got {type(ortvalue).__name__}")
        self._inputs[name] = ortvalue

    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None, buffer_ptr=None):
        self._check_name(name, outputs=True)
        if buffer_ptr is None:
            self._outputs[name] = ("device", _device_of(device_type, device_id))
            return
        if element_type is None or shape is None:
            raise ValueError("`element_type` and `shape` are to be provided if pre-allocated memory is provided")
        if str(device_type).lower() != "cpu":
            raise _NotImplemented(f"bind_output({name!r}): raw {device_type} pointers are not supported by neetorch; "
                                  f"bind an OrtValue made with OrtValue.ortvalue_from_shape_and_type(..., "
                                  f"{device_type!r})")
        self._outputs[name] = ("value", OrtValue(_from_pointer(buffer_ptr, _np_dtype(element_type), shape)))

    def bind_ortvalue_output(self, name, ortvalue):
        self._check_name(name, outputs=True)
        if not isinstance(ortvalue, OrtValue):
            raise TypeError(f"bind_ortvalue_output({name!r}, ...): expected an OrtValue, got {type(ortvalue).__name__}")
        self._outputs[name] = ("value", ortvalue)

    def synchronize_inputs(self) -> None:
        pass  # neetorch copies are synchronous for the host; device queues are ordered

    def synchronize_outputs(self) -> None:
        pass  # outputs are complete when run_with_iobinding returns

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()

    def get_outputs(self) -> list:
        return list(self._results or [])

    get_outputs_as_ortvaluevector = get_outputs

    def copy_outputs_to_cpu(self) -> list:
        return [v.numpy() if v.is_tensor() else v._v for v in (self._results or [])]

    def _run(self, run_options):
        if not self._outputs:
            raise Fail("Error in execution: At least one output should be requested.")
        names = list(self._outputs)
        vals = self._session._run_values(names, dict(self._inputs), run_options)
        results = []
        for name, v in zip(names, vals):
            kind, target = self._outputs[name]
            if kind == "device":
                results.append(_place(v, target))
                continue
            _write_into(name, target, v)
            results.append(target)
        self._results = results


def _place(v, device):
    """An output value (numpy array / nee tensor / host object) as an OrtValue on ``device``."""
    if isinstance(v, np.ndarray):
        if device == "cpu" or v.dtype == np.dtype(object):
            return OrtValue(v)
        return OrtValue.ortvalue_from_numpy(v, *_split(device))
    if _is_tensor_obj(v):
        if device == "cpu":
            return OrtValue(v.numpy(force=True))
        return OrtValue(v if str(v.device) == device else v.to(device))
    return OrtValue(v)


def _split(device):
    typ, _, idx = device.partition(":")
    return typ, int(idx or 0)


def _write_into(name, target, v):
    """Copy an output into a preallocated OrtValue (onnxruntime's checks: rank, dims, dtype)."""
    got = v.numpy(force=True) if _is_tensor_obj(v) else np.asarray(v)
    if not target.is_tensor():
        raise InvalidArgument(f"output {name!r}: the bound OrtValue is not a tensor")
    want_dt, want_shape = target._np_dtype(), target.shape()
    if got.dtype != want_dt:
        raise InvalidArgument(f"Unexpected output data type for output {name!r}. Actual: (tensor({want_dt})), "
                              f"expected: (tensor({got.dtype}))")
    if got.ndim != len(want_shape):
        raise InvalidArgument(f"Invalid rank for output: {name} Got: {len(want_shape)} Expected: {got.ndim} "
                              f"(the bound OrtValue has shape {want_shape}, the result {list(got.shape)})")
    if list(got.shape) != want_shape:
        raise InvalidArgument(f"Invalid dims for output: {name}: the bound OrtValue has shape {want_shape}, the "
                              f"result is {list(got.shape)}")
    if isinstance(target._v, np.ndarray):
        target._v[...] = got
    else:
        target.update_inplace(got)


# ---------------------------------------------------------------- profiling
class SessionProfiler:
    """One session's profile: session events (load, initialization, each run) plus every neetorch event
    (kernel launches, compiles, cache hits: :class:`neetorch.profile`) of its runs, written by :meth:`end` as
    onnxruntime writes its profile: a chrome-trace JSON list of complete ("X") events, ts/dur in microseconds
    from the profiling start, to ``<profile_file_prefix>_<date>_<time>.json``."""

    def __init__(self, prefix: str):
        from ..profiler import profile
        self.prof = profile()
        self.start_ns = time.time_ns()
        self.t0 = time.perf_counter()
        now = datetime.datetime.now()
        self.path = f"{prefix}_{now:%Y-%m-%d_%H-%M-%S}_{now.microsecond // 1000:03d}.json"
        self.events = []

    def add(self, name, start, dur, args=None):
        self.events.append({"cat": "Session", "pid": os.getpid(), "tid": threading.get_ident(),
                            "dur": round(dur * 1e6, 3), "ts": round((start - self.t0) * 1e6, 3), "ph": "X",
                            "name": name, "args": args or {}})

    def run(self, logid=""):
        return _ProfiledRun(self, logid)

    def end(self) -> str:
        evs = list(self.events)
        for e in self.prof.events:
            args = {"device": e.device}
            if e.nbytes:
                args["bytes"] = e.nbytes
            if e.flops:
                args["flops"] = e.flops
            if e.detail:
                args["detail"] = e.detail
            evs.append({"cat": "Node" if e.kind == "kernel" else e.kind, "pid": os.getpid(), "tid": e.tid,
                        "dur": round(e.dur * 1e6, 3), "ts": round((e.start - self.t0) * 1e6, 3), "ph": "X",
                        "name": e.name, "args": args})
        evs.sort(key=lambda e: e["ts"])
        with open(self.path, "w") as f:
            json.dump(evs, f)
        return self.path


class _ProfiledRun:
    def __init__(self, p, logid):
        self.p, self.logid = p, logid

    def __enter__(self):
        self.t = time.perf_counter()
        self.p.prof.__enter__()

    def __exit__(self, *exc):
        self.p.prof.__exit__(*exc)
        self.p.add("model_run", self.t, time.perf_counter() - self.t, {"logid": self.logid} if self.logid else None)
        return False


# ---------------------------------------------------------------- the session's onnxruntime methods
class OrtSessionAPI:
    """onnxruntime ``InferenceSession`` methods beyond ``run`` (mixed into :class:`~neetorch.onnx.InferenceSession`)."""

    def get_session_options(self) -> SessionOptions:
        return self._ort_options

    def get_providers(self) -> list:
        return list(self._ort_providers)

    def get_provider_options(self) -> dict:
        return {k: dict(v) for k, v in self._ort_provider_options.items()}

    def get_overridable_initializers(self) -> list:
        return list(self._overridable_args)

    def get_modelmeta(self) -> ModelMetadata:
        return ModelMetadata(self._model)

    def set_providers(self, providers=None, provider_options=None) -> None:
        """Re-create the session on the named providers (onnxruntime re-creates its session too)."""
        a = self._ort_init_args
        self.__init__(a["model"], a["sess_options"], providers, provider_options, jit=a["jit"],
                      buckets=a["buckets"], check=a["check"], enable_fallback=int(self._ort_fallback))

    def disable_fallback(self) -> None:
        """Stored like onnxruntime's flag; neetorch raises no EPFail, so ``run()`` never falls back."""
        self._ort_fallback = False

    def enable_fallback(self) -> None:
        self._ort_fallback = True

    # profiling
    def end_profiling(self) -> str:
        """Write the profile (``enable_profiling``) and return its path; '' when profiling is off or ended."""
        p = self._profiler
        if p is None:
            return ""
        self._profiler = None
        self._profiling_ended_ns = p.start_ns
        return p.end()

    def get_profiling_start_time_ns(self) -> int:
        p = getattr(self, "_profiler", None)
        return p.start_ns if p is not None else getattr(self, "_profiling_ended_ns", 0)

    # OrtValue runs
    def _bindable_inputs(self):
        return list(self._inputs) + list(self._overridable_args)

    def _run_values(self, output_names, feed, run_options=None):
        """Run on a feed of OrtValues / arrays; returns the outputs as numpy arrays (host session) or neetorch
        tensors kept on the session's device (outputs copied on the device, never aliasing a model constant)."""
        check_run_options(run_options)
        device_vals = [v for v in feed.values() if isinstance(v, OrtValue) and _is_tensor_obj(v._v)]
        if not device_vals or self._on_cpu or self._segments is not None or \
                not self._overridable.isdisjoint(feed) or any(p[5] for p in self._plan):
            host = {k: (v._host() if isinstance(v, OrtValue) else v) for k, v in feed.items()}
            return self.run(output_names, host, run_options)
        self._check_feed_names(feed)
        tensors = [self._device_input(p, feed[p[0].name]) for p in self._plan]
        if self._profiler is None:
            outs = self._call(tensors)
        else:
            with self._profiler.run(getattr(run_options, "logid", "")):
                outs = self._call(tensors)
        names = self._output_names
        idx = [names.index(n) for n in (output_names or names)]
        return [outs[i].clone() if _is_tensor_obj(outs[i]) else self._to_numpy(outs[i], self._outputs[i])
                for i in idx]

    def _check_feed_names(self, feed):
        names = self._input_names
        missing = [k for k in names if k not in feed]
        if missing:
            raise InvalidInputError(f"missing input(s) {missing}: required inputs are missing from the input feed "
                                    f"{list(feed)}; the model's inputs are {names}")
        unknown = [k for k in feed if k not in names]
        if unknown:
            raise InvalidArgument(f"unknown input name(s) {unknown}; the model's inputs are {names}")

    def _device_input(self, plan, v):
        """One tensor input of a device session: an OrtValue already on a device is used there (moved to the
        session's device if elsewhere), a host value is copied to the device; run()'s checks and messages."""
        a, want, carry, rank, fixed, _kind = plan
        t = v._v if isinstance(v, OrtValue) else v
        if not _is_tensor_obj(t):
            t = np.asarray(t)
        got = t.dtype.np if _is_tensor_obj(t) else t.dtype
        if want is not None and got != want and not (_is_tensor_obj(t) and got == carry):
            raise InvalidArgument(f"input {a.name!r}: expected {a.type} (numpy {want.name}), got numpy {got.name}")
        shape = list(t.shape)
        if rank is not None:
            if len(shape) != rank:
                raise InvalidArgument(f"input {a.name!r}: expected rank {rank} (shape {a.shape}), got rank "
                                      f"{len(shape)} (shape {shape})")
            for k, d in fixed:
                if shape[k] != d:
                    raise InvalidArgument(f"input {a.name!r}: dim {k} must be {d}, got shape {shape} "
                                          f"(expected {a.shape})")
        if not _is_tensor_obj(t):
            return self._to_tensor(a, t)
        return t if str(t.device) == str(self.device) else t.to(self.device)

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None) -> list:
        """``run()`` on OrtValues, returning OrtValues; on a device session, inputs already on the device and the
        outputs stay there (no host round trip)."""
        self._require_inputs(input_dict_ort_values)
        for k, v in input_dict_ort_values.items():
            if not isinstance(v, OrtValue):
                raise TypeError(f"run_with_ort_values: input {k!r} must be an OrtValue, got {type(v).__name__} "
                                f"(use OrtValue.ortvalue_from_numpy)")
        return [OrtValue(v) for v in self._run_values(output_names, input_dict_ort_values, run_options)]

    def _require_inputs(self, feed):
        """onnxruntime's Python-side check: every non-optional input is in the feed (ValueError otherwise)."""
        if not isinstance(feed, dict):
            raise InvalidInputError(f"input_feed must be a dict {{name: value}}, got {type(feed).__name__}")
        missing = [a.name for a in self._inputs if a.name not in feed and not a.type.startswith("optional")]
        if missing:
            raise InvalidInputError(f"Required inputs ({missing}) are missing from input feed ({list(feed)}).")

    def io_binding(self) -> IOBinding:
        return IOBinding(self)

    def run_with_iobinding(self, iobinding, run_options=None) -> None:
        if not isinstance(iobinding, IOBinding) or iobinding._session is not self:
            raise ValueError("IOBinding must be used with the session that created it.")
        iobinding._run(run_options)

    def run_async(self, output_names, input_feed, callback, user_data, run_options=None) -> None:
        """Run on a worker thread and call ``callback(results, user_data, err)``: ``results`` the list of
        outputs and ``err`` '' on success, ``[]`` and the error message on failure (as onnxruntime).  Missing
        inputs raise here, before the thread starts.  Runs of one session are serialized (a lock): do not mix
        ``run_async`` with concurrent ``run()`` calls of the same session from other threads."""
        self._require_inputs(input_feed)
        lock = self.__dict__.setdefault("_async_lock", threading.Lock())

        def work():
            try:
                with lock:
                    res = self.run(output_names, input_feed, run_options)
                err = ""
            except Exception as e:  # noqa: BLE001  (reported to the callback, as onnxruntime does)
                res, err = [], str(e)
            callback(res, user_data, err)

        threading.Thread(target=work, name="neetorch-onnx-run_async", daemon=True).start()

    def _log(self, msg):
        so = self._ort_options
        if 0 <= so.log_severity_level <= 1:
            print(f"[neetorch.onnx{(' ' + so.logid) if so.logid else ''}] {msg}", file=sys.stderr)


# ---------------------------------------------------------------- model edits the options ask for
def override_free_dims(graph, by_name: dict, by_denotation: dict) -> None:
    """``add_free_dimension_override_by_name`` / ``_by_denotation``: symbolic dims of the graph inputs fixed (a
    dim name everywhere it appears: inputs, outputs, value_info, as onnxruntime's re-run of shape inference)."""
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        if vi.type.WhichOneof("value") != "tensor_type":
            continue
        for d in vi.type.tensor_type.shape.dim:
            v = by_name.get(d.dim_param) if d.HasField("dim_param") else None
            if v is None and d.denotation:
                v = by_denotation.get(d.denotation)
            if v is not None:
                d.dim_value = int(v)


def replace_initializers(graph, values: dict) -> None:
    """``SessionOptions.add_initializer``: the named initializers (or graph inputs) take the OrtValues' data."""
    from onnx import numpy_helper
    by = {t.name: t for t in graph.initializer}
    inputs = {vi.name for vi in graph.input}
    for name, ov in values.items():
        t = numpy_helper.from_array(np.ascontiguousarray(ov.numpy()), name)
        if name in by:
            old = by[name]
            if list(old.dims) != list(t.dims) or old.data_type != t.data_type:
                raise InvalidArgument(f"add_initializer({name!r}): the model's initializer is "
                                      f"{_onnx_type_name(old.data_type)} {list(old.dims)}, the OrtValue "
                                      f"{ov.data_type()} {ov.shape()}")
            old.CopyFrom(t)
        elif name in inputs:
            graph.initializer.append(t)
        else:
            raise InvalidArgument(f"add_initializer({name!r}): the model has no initializer or input of that name")


def write_optimized_model(model, base_dir, path) -> None:
    """``SessionOptions.optimized_model_filepath``: the ONNX model neetorch lowers, external data made internal."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    from .loader import tensor_to_numpy
    path = os.fspath(path)
    if path.lower().endswith(".ort"):
        raise _NotImplemented(f"optimized_model_filepath {path!r}: neetorch writes ONNX models only, not "
                              f"onnxruntime's .ort format")
    if any(uses_external_data(t) for t in model.graph.initializer):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        for t in m.graph.initializer:
            if uses_external_data(t):
                t.CopyFrom(onnx.numpy_helper.from_array(tensor_to_numpy(t, base_dir), t.name))
        model = m
    try:
        onnx.save_model(model, path)
    except (OSError, ValueError) as e:
        raise Fail(f"cannot write optimized_model_filepath {path!r}: {e}") from None
