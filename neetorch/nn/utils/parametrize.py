"""``torch.nn.utils.parametrize`` (inference subset): a tensor of a module computed on every access from
``module.parametrizations[name]`` (a :class:`ParametrizationList` holding ``original`` or ``original0, original1,
...`` as produced by the first parametrization's ``right_inverse``).  The module's class is swapped for a
``Parametrized<Class>`` subclass with a property, and state-dict keys match torch's
(``parametrizations.weight.original0`` ...), so checkpoints saved from parametrized torch modules load as they are."""
from __future__ import annotations

import contextlib

from ..modules.container import ModuleDict, ModuleList
from ..parameter import Parameter

__all__ = ["register_parametrization", "remove_parametrizations", "is_parametrized", "cached",
           "type_before_parametrizations", "ParametrizationList"]


@contextlib.contextmanager
def cached():
    """torch caches parametrized tensors inside this context; neetorch recomputes them (same values)."""
    yield


def _register(mod, name, t, like):
    from ...tensor.tensor import Tensor
    if isinstance(like, Parameter) or not isinstance(like, Tensor):
        mod.register_parameter(name, Parameter(t.detach(), getattr(like, "requires_grad", True)))
    else:
        mod.register_buffer(name, t)


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order, and the unconstrained ``original`` tensor(s)."""

    def __init__(self, modules, original, unsafe: bool = False) -> None:
        super().__init__(modules)
        self.unsafe = unsafe
        new = original
        for m in reversed(list(self)):
            if hasattr(m, "right_inverse"):
                new = m.right_inverse(new)
        self.is_tensor = not isinstance(new, (tuple, list))
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            _register(self, "original", new, original)
        else:
            for i, t in enumerate(new):
                _register(self, f"original{i}", t, original)

    def right_inverse(self, value) -> None:
        for m in reversed(list(self)):
            if hasattr(m, "right_inverse"):
                value = m.right_inverse(value)
        if self.is_tensor:
            self.original.copy_(value)
        else:
            for i, t in enumerate(value):
                getattr(self, f"original{i}").copy_(t)

    def forward(self):
        if self.is_tensor:
            x = self[0](self.original)
        else:
            x = self[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for m in list(self)[1:]:
            x = m(x)
        return x


def _inject_new_class(module) -> None:
    cls = module.__class__

    def getstate(self):
        raise RuntimeError("Serialization of parametrized modules is only supported through state_dict().")

    def deepcopy(self, memo):
        import copy
        obj = memo.get(id(self))
        if obj is not None:
            return obj
        replica = self.__new__(self.__class__)
        memo[id(self)] = replica
        replica.__dict__ = copy.deepcopy(self.__dict__, memo)
        return replica

    param_cls = type(f"Parametrized{cls.__name__}", (cls,), {"__getstate__": getstate, "__deepcopy__": deepcopy})
    module.__class__ = param_cls


def _inject_property(module, tensor_name: str) -> None:
    def get_parametrized(self):
        return self.parametrizations[tensor_name]()

    def set_original(self, value):
        self.parametrizations[tensor_name].right_inverse(value)

    setattr(module.__class__, tensor_name, property(get_parametrized, set_original))


def is_parametrized(module, tensor_name=None) -> bool:
    """Whether ``module`` has a parametrization (on ``tensor_name`` when given)."""
    p = module.__dict__.get("_modules", {}).get("parametrizations")
    if p is None or not isinstance(p, ModuleDict):
        return False
    return len(p) > 0 if tensor_name is None else tensor_name in p


def type_before_parametrizations(module):
    """The module's class before :func:`register_parametrization` swapped it."""
    return module.__class__.__bases__[0] if is_parametrized(module) else type(module)


def register_parametrization(module, tensor_name: str, parametrization, *, unsafe: bool = False):
    """Parametrize ``module.<tensor_name>`` with the module ``parametrization`` (``torch.nn.utils.parametrize.
    register_parametrization``); a second call appends to the tensor's :class:`ParametrizationList`."""
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        module.parametrizations[tensor_name].append(parametrization)
        return module
    if tensor_name not in module._parameters and tensor_name not in module._buffers:
        raise ValueError(f"Module '{module}' does not have a parameter, a buffer, or a parametrized element with "
                         f"name '{tensor_name}'")
    original = getattr(module, tensor_name)
    plist = ParametrizationList([parametrization], original, unsafe=unsafe)
    delattr(module, tensor_name)
    if not is_parametrized(module):
        _inject_new_class(module)
        module.parametrizations = ModuleDict()
    _inject_property(module, tensor_name)
    module.parametrizations[tensor_name] = plist
    return module


def remove_parametrizations(module, tensor_name: str, leave_parametrized: bool = True):
    """Undo :func:`register_parametrization` on ``tensor_name``: the tensor becomes a plain parameter holding the
    parametrized value (``leave_parametrized=True``) or the original one."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    plist = module.parametrizations[tensor_name]
    if plist.is_tensor:
        original = plist.original
        t = plist() if leave_parametrized else original
        value = Parameter(t.detach(), original.requires_grad) if isinstance(original, Parameter) else t
    else:
        if not leave_parametrized:
            raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor that is "
                             "parametrized in terms of a sequence of tensors.")
        t = plist()
        value = Parameter(t.detach(), plist.original0.requires_grad) \
            if isinstance(plist.original0, Parameter) else t
    delattr(module.__class__, tensor_name)
    del module.parametrizations[tensor_name]
    if isinstance(value, Parameter):
        module.register_parameter(tensor_name, value)
    else:
        module.register_buffer(tensor_name, value)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = module.__class__.__bases__[0]
    return module
