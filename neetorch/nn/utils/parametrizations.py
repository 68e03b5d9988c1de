"""``torch.nn.utils.parametrizations``: ``weight_norm`` and ``spectral_norm`` as parametrizations (state-dict keys
``parametrizations.weight.original0/1`` and ``parametrizations.weight.original`` + ``...0._u/_v``, as torch)."""
from __future__ import annotations

from ..modules.module import Module
from . import parametrize

__all__ = ["weight_norm", "spectral_norm"]


def _E(name):
    from ...ops.registry import EXPORTS
    return EXPORTS[name][0]


class _WeightNorm(Module):
    def __init__(self, dim=0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return weight_v * (weight_g / _E("norm_except_dim")(weight_v, 2, self.dim))

    def right_inverse(self, weight):
        return _E("norm_except_dim")(weight, 2, self.dim), weight


def weight_norm(module, name: str = "weight", dim=0):
    """``torch.nn.utils.parametrizations.weight_norm``: ``name`` = ``original1 * original0 / ||original1||``
    (norm over every dim but ``dim``)."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module


class _SpectralNorm(Module):
    def __init__(self, weight, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, {ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError(f"Expected n_power_iterations to be positive, but got n_power_iterations="
                             f"{n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            from ...tensor import creation as _cr
            self.n_power_iterations = n_power_iterations
            wm = self._reshape_weight_to_matrix(weight.detach())
            h, w = wm.shape
            F = _nnF()
            u = F.normalize(_cr.randn(h, dtype=weight.dtype, device=weight.device), dim=0, eps=self.eps)
            v = F.normalize(_cr.randn(w, dtype=weight.dtype, device=weight.device), dim=0, eps=self.eps)
            self.register_buffer("_u", u)
            self.register_buffer("_v", v)
            self._power_method(wm, 15)

    def _reshape_weight_to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.ndim) if d != self.dim))
        return weight.flatten(1)

    def _power_method(self, weight_mat, n_power_iterations: int) -> None:
        F = _nnF()
        for _ in range(n_power_iterations):
            self._u.copy_(F.normalize(_E("mv")(weight_mat, self._v), dim=0, eps=self.eps))
            self._v.copy_(F.normalize(_E("mv")(weight_mat.transpose(0, 1), self._u), dim=0, eps=self.eps))

    def forward(self, weight):
        if weight.ndim == 1:
            return _nnF().normalize(weight, dim=0, eps=self.eps)
        wm = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(wm, self.n_power_iterations)
        sigma = (self._u * _E("mv")(wm, self._v)).sum()
        return weight / sigma

    def right_inverse(self, value):
        return value


def _nnF():
    from .. import functional as F
    return F


def spectral_norm(module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim=None):
    """``torch.nn.utils.parametrizations.spectral_norm``: ``name`` divided by its largest singular value, estimated
    by power iteration (one step per training-mode access; eval mode uses the stored ``_u`` / ``_v``)."""
    from ...tensor.tensor import Tensor
    from ..modules.conv import ConvTranspose1d, ConvTranspose2d
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        tr = (ConvTranspose1d, ConvTranspose2d)
        try:
            from ..modules.volumetric import ConvTranspose3d
            tr = tr + (ConvTranspose3d,)
        except ImportError:  # pragma: no cover
            pass
        dim = 1 if isinstance(module, tr) else 0
    parametrize.register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module
