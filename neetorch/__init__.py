"""neetorch: a Python-native neural execution engine with a PyTorch-like API.

``import neetorch as nee``; tensors run eagerly on device backends (Numba kernels on
the CPU); see README.md for the architecture.
"""
from __future__ import annotations

__version__ = "0.1.0"

from . import _env  # noqa: F401
from .tensor import dtypes as _dtypes
from .tensor.dtypes import (  # noqa: F401
    DType as dtype, bool_ as bool, uint8, int8, int16, int32, int64, float16, float32, float64,
    get_default_dtype, set_default_dtype, promote_types,
)
from .tensor.tensor import Size, Tensor  # noqa: F401
from .tensor.creation import *  # noqa: F401,F403
from .tensor.creation import set_default_device, get_default_device, default_generator  # noqa: F401
from .tensor.creation import OutOfMemoryError  # noqa: F401,E402  (torch.OutOfMemoryError)
from .tensor.views import *  # noqa: F401,F403
from .tensor._repr import set_printoptions  # noqa: F401
from .devices import (  # noqa: F401  (nee.devices: the package, callable: nee.devices() lists the backends)
    device, fallback_report, reset_fallbacks, set_strict, is_strict, FallbackError,
)
from . import ops as _ops
from .tensor import methods as _methods
from . import trace  # noqa: F401
from .trace import trace as trace_graph  # noqa: F401
from . import jit  # noqa: F401  (the package, callable as @nee.jit: see the end of this file)
from .profiler import profile  # noqa: F401

half = float16
complex64 = cfloat = _dtypes.complex64
complex128 = cdouble = _dtypes.complex128
if _dtypes.bfloat16 is not None:   # (without ml_dtypes, nee.bfloat16 raises BFLOAT16_MISSING: see __getattr__)
    bfloat16 = _dtypes.bfloat16
float = float32  # noqa: A001
double = float64
long = int64
int = int32  # noqa: A001
short = int16
uint8 = uint8

_methods.install()
_ops.registry._bind_late()
for _name in _methods._VIEW_METHODS:  # nee.reshape(x, ...) is Tensor.reshape (so traces see views)
    if _name in globals():
        globals()[_name] = getattr(Tensor, _name)
for _name, (_fn, _method, _function, _inplace) in _ops.EXPORTS.items():
    if _function and _name not in globals():
        globals()[_name] = _ops.registry.with_out(_fn)   # (torch's out= on every function)
del _name, _fn, _method, _function, _inplace


def result_type(*args):
    """``torch.result_type`` over tensors and Python scalars."""
    return _dtypes.result_type(*args)


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def numel(input) -> int:
    return input.numel()


def is_floating_point(input) -> bool:
    return input.is_floating_point()


def can_cast(from_, to) -> bool:
    from .ops.elementwise import _can_cast
    return _can_cast(_dtypes.to_dtype(from_), _dtypes.to_dtype(to))


class no_grad:
    """Accepted for compatibility: neetorch is an inference engine and records no gradients."""

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def __call__(self, fn):
        return fn


inference_mode = enable_grad = no_grad


def _functional_namespace():
    from .nn import functional
    return functional


def get_num_threads() -> int:
    from .devices.cpu import threads
    return threads.get_num_threads()


def set_num_threads(n: int) -> None:
    from .devices.cpu import threads
    threads.set_num_threads(n)


from . import nn  # noqa: E402,F401  (after the op table is bound: nn uses it)
from .serialization import load_safetensors, save_safetensors, save, load  # noqa: E402,F401
from . import linalg  # noqa: E402,F401
from . import special  # noqa: E402,F401
from . import fft  # noqa: E402,F401
from . import testing  # noqa: E402,F401  (torch.testing.assert_close)
_ops.complex.install_guard()   # (once the op table is complete) ops not known right for complex refuse it
from .compare import compare  # noqa: E402,F401

# nee.jit / nee.tensor are the subpackages, callable as the functions (so ``import neetorch.jit.passes as p`` works)
from ._callable_package import make_callable as _make_callable  # noqa: E402
jit = _make_callable(__name__ + ".jit", jit.api.jit)
from .jit.compile import compile  # noqa: E402,A001  (torch.compile's API over nee.jit)
from . import amp  # noqa: E402  (torch.autocast: wraps the listed ops' functions once everything is bound)
from .amp import autocast, is_autocast_enabled, get_autocast_dtype  # noqa: E402,F401
amp.install()
tensor = _make_callable(__name__ + ".tensor", tensor)
del _make_callable

# torch's math constants (torch.pi, torch.e, torch.inf, torch.nan) and numpy's indexing alias torch.newaxis
import math as _math  # noqa: E402
pi, e, inf, nan, newaxis = _math.pi, _math.e, _math.inf, _math.nan, None
from .tensor.tensor import Layout as layout, strided  # noqa: E402,F401  (torch.layout / torch.strided)
from .tensor.tensor import (MemoryFormat as memory_format, contiguous_format, channels_last,  # noqa: E402,F401
                            channels_last_3d, preserve_format)


def __getattr__(name):
    # optional subsystems load on first use: nee.onnx needs the onnx package
    if name == "onnx":
        import importlib
        return importlib.import_module(".onnx", __name__)
    if name == "bfloat16":
        raise AttributeError(_dtypes.BFLOAT16_MISSING)
    raise AttributeError(f"module 'neetorch' has no attribute {name!r}")
