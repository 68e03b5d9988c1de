"""Lazy modules (``torch.nn.modules.lazy``): parameters whose shape is inferred from the first input.

``LazyLinear(out_features)``, ``LazyConv{1,2,3}d(out_channels, ...)``, ``LazyConvTranspose{1,2,3}d``,
``LazyBatchNorm{1,2,3}d`` and ``LazyInstanceNorm{1,2,3}d`` hold :class:`UninitializedParameter` /
:class:`UninitializedBuffer` placeholders until the first call: a forward pre-hook reads the input's
feature/channel size, materializes every placeholder with its real shape (the same objects: references held
elsewhere stay valid), runs the module's ``reset_parameters``, removes itself and turns the module into its
regular class (``LazyLinear`` becomes ``Linear``), exactly as PyTorch does.  A ``state_dict`` of an
initialized module loads into a lazy one (the placeholders take the checkpoint's shapes).

Under ``@nee.jit`` the first call may be the materializing one: the hook runs while the function is traced
(only the input's shape is needed, which the tracer knows) and the initialization writes the new parameters
eagerly, outside the traced graph, so they enter the graph as the module's ordinary parameters.
"""
from __future__ import annotations

import itertools

from ...tensor import creation
from ...tensor import dtypes as _dt
from ...tensor.tensor import Tensor
from ..parameter import Parameter
from .conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from .linear import Linear
from .normalization import BatchNorm1d, BatchNorm2d, BatchNorm3d, InstanceNorm1d, InstanceNorm2d
from .volumetric import Conv3d, ConvTranspose3d, InstanceNorm3d

__all__ = [
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
    "LazyConvTranspose1d",
    "LazyConvTranspose2d",
    "LazyConvTranspose3d",
    "LazyInstanceNorm1d",
    "LazyInstanceNorm2d",
    "LazyInstanceNorm3d",
    "LazyLinear",
    "LazyModuleMixin",
    "UninitializedBuffer",
    "UninitializedParameter",
]


# ---------------------------------------------------------------- placeholders
class _UninitializedMixin:
    cls_to_become = Tensor

    def materialize(self, shape, device=None, dtype=None) -> None:
        """Give the placeholder storage of ``shape`` (uninitialized values) and turn it into its regular class,
        in place (``torch.nn.parameter.UninitializedTensorMixin.materialize``)."""
        device = self._device if device is None else device
        dtype = self._dtype if dtype is None else dtype
        t = creation.empty(tuple(int(s) for s in shape), dtype=dtype, device=device)
        self._set_storage(t._data, t._device, t._dtype)
        self.__class__ = self.cls_to_become

    @property
    def shape(self):
        raise RuntimeError("Can't access the shape of an uninitialized parameter or buffer. This error usually "
                           "happens in `load_state_dict` when trying to load an uninitialized parameter into an "
                           "initialized one. Call `forward` to initialize the parameters before accessing their "
                           "attributes.")

    def size(self, dim=None):
        return self.shape

    @property
    def ndim(self):
        return self.shape

    def numel(self):
        return self.shape

    def numpy(self, *a, **k):
        return self.shape

    def to(self, *args, **kwargs):
        """A placeholder of the requested device/dtype (``Module.to`` before the first call)."""
        probe = creation.empty(0, dtype=self._dtype, device=self._device).to(*args, **kwargs)
        if probe._device == self._device and probe._dtype is self._dtype:
            return self
        t = _placeholder(type(self), self.requires_grad, probe._device, probe._dtype)
        if hasattr(self, "persistent"):
            t.persistent = self.persistent
        return t

    def __repr__(self):
        return f"<{type(self).__name__}>"

    __str__ = __repr__

    def __reduce_ex__(self, proto):
        return (type(self), (self.requires_grad, str(self._device), self._dtype.name))


def _placeholder(cls, requires_grad, device, dtype):
    dt = _dt.get_default_dtype() if dtype is None else _dt.to_dtype(dtype)
    t = creation.empty(0, dtype=dt, device=device)
    p = cls._make(t._data, t._device, t._dtype)
    p.requires_grad = bool(requires_grad)
    return p


class UninitializedParameter(_UninitializedMixin, Parameter):
    """``torch.nn.UninitializedParameter(requires_grad=True, device=None, dtype=None)``: a parameter without a
    shape yet; ``materialize(shape)`` turns it into a :class:`~neetorch.nn.Parameter`."""

    cls_to_become = Parameter

    def __new__(cls, requires_grad: bool = True, device=None, dtype=None):
        return _placeholder(cls, requires_grad, device, dtype)

    def __init__(self, requires_grad: bool = True, device=None, dtype=None):
        pass


class UninitializedBuffer(_UninitializedMixin, Tensor):
    """``torch.nn.UninitializedBuffer(requires_grad=False, device=None, dtype=None, persistent=True)``: a
    buffer without a shape yet; ``materialize(shape)`` turns it into a plain tensor."""

    cls_to_become = Tensor

    def __new__(cls, requires_grad: bool = False, device=None, dtype=None, persistent: bool = True):
        b = _placeholder(cls, requires_grad, device, dtype)
        b.persistent = persistent
        return b

    def __init__(self, requires_grad: bool = False, device=None, dtype=None, persistent: bool = True):
        pass


def is_lazy(t) -> bool:
    return isinstance(t, _UninitializedMixin)


# ---------------------------------------------------------------- the mixin
class LazyModuleMixin:
    """``torch.nn.modules.lazy.LazyModuleMixin``: infers parameter shapes from the first input
    (``initialize_parameters``), then becomes ``cls_to_become``."""

    cls_to_become = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._register_lazy_hook()

    def _register_lazy_hook(self) -> None:
        # the handle is not kept: a RemovableHandle holds weak references, which would make the module
        # unpicklable (copy.deepcopy / pickle of a lazy model); the hook is found again by its function
        self.register_forward_pre_hook(self._infer_parameters, with_kwargs=True)

    def _remove_lazy_hook(self) -> None:
        d = self.__dict__
        for hid, hook in list(d["_forward_pre_hooks"].items()):
            if getattr(hook, "__func__", None) is LazyModuleMixin._infer_parameters:
                del d["_forward_pre_hooks"][hid]
                d["_forward_pre_hooks_with_kwargs"].pop(hid, None)

    def has_uninitialized_params(self) -> bool:
        """Whether a parameter or buffer of this module is still a placeholder."""
        return any(is_lazy(t) for t in itertools.chain(self._parameters.values(), self._buffers.values()))

    def initialize_parameters(self, *args, **kwargs) -> None:
        raise NotImplementedError(f"initialize_parameters is not implemented for {type(self).__name__}")

    def _infer_parameters(self, module, args, kwargs=None):
        kwargs = kwargs or {}
        with _eager_init():
            module.initialize_parameters(*args, **kwargs)
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {module._get_name()} has not been fully initialized")
        module._remove_lazy_hook()
        if module.cls_to_become is not None:
            module.__class__ = module.cls_to_become

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if (is_lazy(param) or keep_vars) else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if (is_lazy(buf) or keep_vars) else buf.detach()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs, assign=False):
        # an initialized checkpoint gives the placeholders their shapes; then the regular copy applies
        for name, t in itertools.chain(self._parameters.items(), self._buffers.items()):
            key = prefix + name
            if t is not None and is_lazy(t) and key in state_dict and not is_lazy(state_dict[key]):
                t.materialize(tuple(state_dict[key].shape))
        lazy = {k: t for k, t in itertools.chain(self._parameters.items(), self._buffers.items())
                if t is not None and is_lazy(t)}
        # placeholders the checkpoint leaves uninitialized are skipped (they have no shape to compare)
        saved = {}
        for k in lazy:
            store = self._parameters if k in self._parameters else self._buffers
            saved[k] = (store, store[k])
            store[k] = None
            if prefix + k in state_dict and is_lazy(state_dict[prefix + k]):
                state_dict = {kk: v for kk, v in state_dict.items() if kk != prefix + k}
        try:
            super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                          unexpected_keys, error_msgs, assign)
        finally:
            for k, (store, t) in saved.items():
                store[k] = t
        self._after_load()

    def _after_load(self) -> None:
        """Sets the inferred size attribute once every placeholder got a shape from a checkpoint."""


class _eager_init:
    """Runs the initialization outside any trace in progress on this thread: the new parameters are module
    state, not values of the traced function (their random initialization must not become graph nodes)."""

    def __enter__(self):
        from ...trace import tracer
        self._tracer = tracer
        self._saved = getattr(tracer._active, "tracer", None)
        tracer._active.tracer = None
        return self

    def __exit__(self, *exc):
        self._tracer._active.tracer = self._saved
        return False


# ---------------------------------------------------------------- Linear
class LazyLinear(LazyModuleMixin, Linear):
    """``torch.nn.LazyLinear(out_features, bias=True, device=None, dtype=None)``: ``in_features`` is
    ``input.shape[-1]`` of the first call."""

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__(0, 0, False)
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_features = out_features
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        if self.has_uninitialized_params():
            if not isinstance(input, Tensor) or input.ndim < 1:
                raise RuntimeError(f"LazyLinear: expected a Tensor input of at least 1 dim to infer in_features, "
                                   f"got {type(input).__name__ if not isinstance(input, Tensor) else '0-d tensor'}")
            self.in_features = int(input.shape[-1])
            self.weight.materialize((self.out_features, self.in_features))
            if self.bias is not None:
                self.bias.materialize((self.out_features,))
            self.reset_parameters()
        self._after_load()

    def _after_load(self) -> None:
        if self.in_features == 0 and not is_lazy(self.weight):
            self.in_features = int(self.weight.shape[-1])


# ---------------------------------------------------------------- convolutions
class _LazyConvXdMixin(LazyModuleMixin):
    _spatial = 0

    def _lazy_init(self, out_channels, bias, device, dtype):
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_channels = out_channels
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_channels != 0:
            super().reset_parameters()

    def _get_in_channels(self, input) -> int:
        nb = self._spatial + 1
        if not isinstance(input, Tensor) or input.ndim not in (nb, nb + 1):
            got = list(input.shape) if isinstance(input, Tensor) else type(input).__name__
            raise RuntimeError(f"Expected {nb}D (unbatched) or {nb + 1}D (batched) input to {type(self).__name__}, "
                               f"but got input of size: {got}")
        return int(input.shape[1] if input.ndim == nb + 1 else input.shape[0])

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        if self.has_uninitialized_params():
            self.in_channels = self._get_in_channels(input)
            if self.in_channels % self.groups != 0:
                raise ValueError(f"in_channels must be divisible by groups ({type(self).__name__}: input has "
                                 f"{self.in_channels} channels, groups={self.groups})")
            if self.transposed:
                self.weight.materialize((self.in_channels, self.out_channels // self.groups, *self.kernel_size))
            else:
                self.weight.materialize((self.out_channels, self.in_channels // self.groups, *self.kernel_size))
            if self.bias is not None:
                self.bias.materialize((self.out_channels,))
            self.reset_parameters()

    def _after_load(self) -> None:
        if self.in_channels == 0 and not is_lazy(self.weight):
            w = self.weight.shape
            self.in_channels = int(w[0] if self.transposed else w[1] * self.groups)


def _lazy_conv(name, base, spatial, transposed):
    if transposed:
        def __init__(self, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1, bias=True,
                     dilation=1, padding_mode="zeros", device=None, dtype=None):
            base.__init__(self, 0, 0, kernel_size, stride, padding, output_padding, groups, False, dilation,
                          padding_mode, device, dtype)
            self._register_lazy_hook()
            self._lazy_init(out_channels, bias, device, dtype)
        sig = ("out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1, bias=True, dilation=1, "
               "padding_mode='zeros', device=None, dtype=None")
    else:
        def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                     padding_mode="zeros", device=None, dtype=None):
            base.__init__(self, 0, 0, kernel_size, stride, padding, dilation, groups, False, padding_mode, device,
                          dtype)
            self._register_lazy_hook()
            self._lazy_init(out_channels, bias, device, dtype)
        sig = ("out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True, "
               "padding_mode='zeros', device=None, dtype=None")
    doc = (f"``torch.nn.{name}({sig})``: a :class:`{base.__name__}` whose ``in_channels`` is the channel size of "
           "the first input.")
    return type(name, (_LazyConvXdMixin, base), {"__init__": __init__, "cls_to_become": base, "_spatial": spatial,
                                                   "__doc__": doc, "__module__": __name__})


LazyConv1d = _lazy_conv("LazyConv1d", Conv1d, 1, False)
LazyConv2d = _lazy_conv("LazyConv2d", Conv2d, 2, False)
LazyConv3d = _lazy_conv("LazyConv3d", Conv3d, 3, False)
LazyConvTranspose1d = _lazy_conv("LazyConvTranspose1d", ConvTranspose1d, 1, True)
LazyConvTranspose2d = _lazy_conv("LazyConvTranspose2d", ConvTranspose2d, 2, True)
LazyConvTranspose3d = _lazy_conv("LazyConvTranspose3d", ConvTranspose3d, 3, True)


# ---------------------------------------------------------------- normalization
class _LazyNormBase(LazyModuleMixin):
    def _lazy_norm_init(self, eps, momentum, affine, track_running_stats, device, dtype, bias):
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = UninitializedParameter(device=device, dtype=dtype)
            if bias:
                self.bias = UninitializedParameter(device=device, dtype=dtype)
        if track_running_stats:
            # buffers registered directly: Module.__setattr__ turns Buffer values into plain tensors
            self._buffers["running_mean"] = UninitializedBuffer(device=device, dtype=dtype)
            self._buffers["running_var"] = UninitializedBuffer(device=device, dtype=dtype)
            self._buffers["num_batches_tracked"] = creation.tensor(0, dtype=_dt.int64, device=device)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.num_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        if self.has_uninitialized_params():
            if not isinstance(input, Tensor) or input.ndim < 2:
                got = list(input.shape) if isinstance(input, Tensor) else type(input).__name__
                raise ValueError(f"{type(self).__name__}: expected an input of at least 2 dims to infer "
                                 f"num_features from input.size(1), got {got}")
            self.num_features = int(input.shape[1])
            for name in ("weight", "bias", "running_mean", "running_var"):
                t = getattr(self, name, None)
                if t is not None and is_lazy(t):
                    t.materialize((self.num_features,))
            self.reset_parameters()

    def _after_load(self) -> None:
        if self.num_features == 0:
            for name in ("weight", "running_mean"):
                t = getattr(self, name, None)
                if t is not None and not is_lazy(t):
                    self.num_features = int(t.shape[0])
                    return


def _lazy_norm(name, base, instance):
    # PyTorch's lazy instance norms inherit _LazyNormBase's defaults (affine=True, track_running_stats=True),
    # unlike InstanceNorm*d itself: kept for parity
    def __init__(self, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None, dtype=None, *,
                 bias=True):
        base.__init__(self, 0, eps, momentum, False, False, device, dtype, bias=False)
        self._register_lazy_hook()
        self._lazy_norm_init(eps, momentum, affine, track_running_stats, device, dtype, bias)
    doc = (f"``torch.nn.{name}(eps=1e-05, momentum=0.1, affine=True, track_running_stats=True, device=None, "
           f"dtype=None)``: a "
           f":class:`{base.__name__}` whose ``num_features`` is ``input.size(1)`` of the first call.")
    return type(name, (_LazyNormBase, base), {"__init__": __init__, "cls_to_become": base, "__doc__": doc,
                                              "__module__": __name__})


LazyBatchNorm1d = _lazy_norm("LazyBatchNorm1d", BatchNorm1d, False)
LazyBatchNorm2d = _lazy_norm("LazyBatchNorm2d", BatchNorm2d, False)
LazyBatchNorm3d = _lazy_norm("LazyBatchNorm3d", BatchNorm3d, False)
LazyInstanceNorm1d = _lazy_norm("LazyInstanceNorm1d", InstanceNorm1d, True)
LazyInstanceNorm2d = _lazy_norm("LazyInstanceNorm2d", InstanceNorm2d, True)
LazyInstanceNorm3d = _lazy_norm("LazyInstanceNorm3d", InstanceNorm3d, True)
