"""``torch.nn.utils.weight_norm`` / ``remove_weight_norm`` (the forward-pre-hook form): ``weight`` becomes
``weight_g`` (norm over every dim but ``dim``) and ``weight_v`` (direction); each forward recomputes
``weight = weight_v * weight_g / norm_except_dim(weight_v, 2, dim)``.  State-dict keys match torch's, so
checkpoints saved with weight norm load as they are."""
from __future__ import annotations

import warnings

__all__ = ["WeightNorm", "weight_norm", "remove_weight_norm"]


def _norm_except_dim(v, dim):
    from ...ops.registry import EXPORTS
    return EXPORTS["norm_except_dim"][0](v, 2, dim)


class WeightNorm:
    def __init__(self, name: str, dim: int) -> None:
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module):
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return v * (g / _norm_except_dim(v, self.dim))

    @staticmethod
    def apply(module, name: str, dim: int) -> "WeightNorm":
        from ..parameter import Parameter
        warnings.warn("`torch.nn.utils.weight_norm` is deprecated in favor of "
                      "`torch.nn.utils.parametrizations.weight_norm`.", FutureWarning, stacklevel=3)
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter {name}")
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        del module._parameters[name]
        module.register_parameter(name + "_g", Parameter(_norm_except_dim(weight, fn.dim).detach()))
        module.register_parameter(name + "_v", Parameter(weight.detach()))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module) -> None:
        from ..parameter import Parameter
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.detach()))

    def __call__(self, module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module, name: str = "weight", dim: int = 0):
    """Weight normalization of ``module.<name>`` (``torch.nn.utils.weight_norm``); returns ``module``."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module, name: str = "weight"):
    """Folds ``<name>_g`` / ``<name>_v`` back into a plain ``<name>`` parameter
    (``torch.nn.utils.remove_weight_norm``)."""
    return remove_norm_hook(module, WeightNorm, name, "weight_norm")


def remove_norm_hook(module, hook_type, name: str, what: str):
    """Removes ``module``'s forward pre-hook of type ``hook_type`` on ``name`` (folding the parameter back, by the
    hook's ``remove``); shared by :func:`remove_weight_norm` and ``remove_spectral_norm``."""
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, hook_type) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"{what} of '{name}' not found in {module}")
