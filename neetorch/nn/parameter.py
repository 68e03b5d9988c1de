"""``nn.Parameter`` and ``nn.Buffer``: tensors a :class:`~neetorch.nn.Module` registers by assignment."""
from __future__ import annotations

from ..tensor.tensor import Tensor

__all__ = ["Parameter", "Buffer", "is_parameter"]


def _as_tensor(data) -> Tensor:
    from ..tensor import creation
    if data is None:
        return creation.empty(0)
    if isinstance(data, Tensor):
        return data
    return creation.tensor(data)


class Parameter(Tensor):
    """A tensor that is a module parameter (``torch.nn.Parameter``).

    ``Parameter(tensor)`` shares ``tensor``'s storage (no copy), like PyTorch.
    """

    def __new__(cls, data=None, requires_grad: bool = True):
        t = _as_tensor(data)
        p = cls._make(t._data, t._device, t._dtype)
        p.requires_grad = bool(requires_grad)
        return p

    def __init__(self, data=None, requires_grad: bool = True):
        pass

    @property
    def data(self) -> Tensor:
        """The parameter's values as a plain tensor sharing its storage."""
        return self._alias()

    @data.setter
    def data(self, value) -> None:
        value = _as_tensor(value)
        self._set_storage(value._data, value._device, value._dtype)

    def __repr__(self):
        from ..tensor._repr import tensor_repr
        s = tensor_repr(self)
        if self.requires_grad and "requires_grad=" not in s:
            s = s[:-1] + ", requires_grad=True)"
        return "Parameter containing:\n" + s

    __str__ = __repr__

    def __reduce_ex__(self, proto):
        return (_rebuild_parameter, (self.numpy(force=True).copy(), str(self._device), self.requires_grad))


def _rebuild_parameter(arr, dev, requires_grad):
    from ..tensor import creation
    return Parameter(creation.tensor(arr, device=dev), requires_grad)


class Buffer(Tensor):
    """Marks a tensor to be registered as a module buffer on assignment (``torch.nn.Buffer``).

    ``Buffer(tensor, persistent=True)``; the module stores the plain tensor.
    """

    def __new__(cls, data=None, *, persistent: bool = True):
        t = _as_tensor(data)
        b = cls._make(t._data, t._device, t._dtype)
        b.persistent = persistent
        return b

    def __init__(self, data=None, *, persistent: bool = True):
        pass


def is_parameter(obj) -> bool:
    return isinstance(obj, Parameter)
