"""``neetorch.nn.utils`` (``torch.nn.utils``): packed/padded sequences in :mod:`.rnn`,
``parameters_to_vector`` / ``vector_to_parameters``, conv/linear + batch-norm fusion (:mod:`.fusion`), the
hook forms of ``weight_norm`` / ``spectral_norm``, parametrizations (:mod:`.parametrize`, :mod:`.parametrizations`:
``weight_norm`` / ``spectral_norm``), ``skip_init`` and ``get_total_norm``."""
from __future__ import annotations

from . import rnn
from .rnn import PackedSequence
from . import fusion
from .fusion import fuse_conv_bn_eval, fuse_conv_bn_weights, fuse_linear_bn_eval, fuse_linear_bn_weights
from .weight_norm import weight_norm, remove_weight_norm
from .spectral_norm import spectral_norm, remove_spectral_norm
from . import parametrize, parametrizations

__all__ = ["PackedSequence", "parameters_to_vector", "rnn", "vector_to_parameters", "fuse_conv_bn_eval",
           "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights", "weight_norm",
           "remove_weight_norm", "spectral_norm", "remove_spectral_norm", "skip_init", "get_total_norm", "parametrize",
           "parametrizations"]


def skip_init(module_cls, *args, **kwargs):
    """``torch.nn.utils.skip_init``: the module built without running its initializers' meaning (its parameter
    values are unspecified); neetorch builds it directly (it has no meta device)."""
    if "device" not in __import__("inspect").signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    return module_cls(*args, **kwargs)


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite: bool = False, foreach=None):
    """``torch.nn.utils.get_total_norm``: the ``norm_type``-norm of the per-tensor norms (= the norm of all
    elements together)."""
    from ...ops.registry import EXPORTS
    from ...tensor.tensor import Tensor
    from ...tensor import creation as _cr
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    tensors = [t for t in tensors if t is not None]
    if not tensors:
        return _cr.tensor(0.0)
    vn = EXPORTS["vector_norm"][0]
    total = vn(EXPORTS["stack"][0]([vn(t, norm_type) for t in tensors]), norm_type)
    if error_if_nonfinite and not bool(EXPORTS["isfinite"][0](total)):
        raise RuntimeError(f"The total norm of order {float(norm_type)} for gradients from `parameters` is "
                           f"non-finite, so it cannot be clipped. To disable this error and scale the gradients by "
                           f"the non-finite norm anyway, set `error_if_nonfinite=False`")
    return total


def parameters_to_vector(parameters):
    """``torch.nn.utils.parameters_to_vector(parameters)``: the parameters flattened and concatenated."""
    from ...ops.registry import EXPORTS
    return EXPORTS["cat"][0]([p.reshape(-1) for p in parameters], 0)


def vector_to_parameters(vec, parameters) -> None:
    """``torch.nn.utils.vector_to_parameters(vec, parameters)``: copies consecutive slices of the 1-D ``vec``
    into each parameter (in place)."""
    from ...tensor.tensor import Tensor
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    params = list(parameters)
    n = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.shape[0] != n:
        raise RuntimeError(f"vector_to_parameters: vec has shape {list(vec.shape)}, expected [{n}] (the total "
                           f"number of elements of the parameters)")
    off = 0
    for p in params:
        k = p.numel()
        p.copy_(vec.narrow(0, off, k).view(*p.shape))
        off += k
