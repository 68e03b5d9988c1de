"""``torch.nn.utils.spectral_norm`` / ``remove_spectral_norm`` (the forward-pre-hook form): ``weight`` becomes
``weight_orig`` (parameter) + ``weight_u`` / ``weight_v`` (buffers, the power-iteration vectors); each forward sets
``weight = weight_orig / (u . (W_mat @ v))``, with one power step per forward in training mode.  State-dict keys
match torch's, so GAN checkpoints saved with spectral norm load as they are."""
from __future__ import annotations

__all__ = ["SpectralNorm", "spectral_norm", "remove_spectral_norm"]


def _E(name):
    from ...ops.registry import EXPORTS
    return EXPORTS[name][0]


def _normalize(x, eps):
    from .. import functional as F
    return F.normalize(x, dim=0, eps=eps)


class SpectralNorm:
    _version = 1

    def __init__(self, name: str = "weight", n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12):
        self.name = name
        self.dim = dim
        if n_power_iterations <= 0:
            raise ValueError(f"Expected n_power_iterations to be positive, but got n_power_iterations="
                             f"{n_power_iterations}")
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    def reshape_weight_to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute(self.dim, *[d for d in range(weight.ndim) if d != self.dim])
        return weight.reshape(weight.shape[0], -1)

    def compute_weight(self, module, do_power_iteration: bool):
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        wm = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            for _ in range(self.n_power_iterations):
                v.copy_(_normalize(_E("mv")(wm.transpose(0, 1), u), self.eps))
                u.copy_(_normalize(_E("mv")(wm, v), self.eps))
            u, v = u.clone(), v.clone()
        sigma = (u * _E("mv")(wm, v)).sum()
        return weight / sigma

    def remove(self, module) -> None:
        from ..parameter import Parameter
        weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        delattr(module, self.name + "_u")
        delattr(module, self.name + "_v")
        delattr(module, self.name + "_orig")
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module, do_power_iteration=module.training))

    @staticmethod
    def apply(module, name: str, n_power_iterations: int, dim: int, eps: float) -> "SpectralNorm":
        from ...tensor import creation as _cr
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two spectral_norm hooks on the same parameter {name}")
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters[name]
        wm = fn.reshape_weight_to_matrix(weight.detach())
        h, w = wm.shape
        u = _normalize(_cr.randn(h, dtype=weight.dtype, device=weight.device), fn.eps)
        v = _normalize(_cr.randn(w, dtype=weight.dtype, device=weight.device), fn.eps)
        delattr(module, fn.name)
        module.register_parameter(fn.name + "_orig", weight)
        setattr(module, fn.name, weight.detach())
        module.register_buffer(fn.name + "_u", u)
        module.register_buffer(fn.name + "_v", v)
        module.register_forward_pre_hook(fn)
        return fn


def spectral_norm(module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim=None):
    """Spectral normalization of ``module.<name>`` (``torch.nn.utils.spectral_norm``); returns ``module``."""
    if dim is None:
        from ..modules.conv import ConvTranspose1d, ConvTranspose2d
        from ..modules.volumetric import ConvTranspose3d
        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0
    SpectralNorm.apply(module, name, n_power_iterations, dim, eps)
    return module


def remove_spectral_norm(module, name: str = "weight"):
    """Folds ``<name>_orig`` / ``_u`` / ``_v`` back into a plain ``<name>`` parameter."""
    from .weight_norm import remove_norm_hook
    return remove_norm_hook(module, SpectralNorm, name, "spectral_norm")
