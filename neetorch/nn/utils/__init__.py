"""``neetorch.nn.utils`` (``torch.nn.utils``): packed/padded sequences in :mod:`.rnn`, and
``parameters_to_vector`` / ``vector_to_parameters``."""
from __future__ import annotations

from . import rnn
from .rnn import PackedSequence

__all__ = ["PackedSequence", "parameters_to_vector", "rnn", "vector_to_parameters"]


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
