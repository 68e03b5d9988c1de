"""Packed and padded variable-length sequences (``torch.nn.utils.rnn``).

A :class:`PackedSequence` stores the time steps of a batch of sequences sorted by decreasing length, step
after step: ``data[offset[t] : offset[t] + batch_sizes[t]]`` holds step ``t`` of the ``batch_sizes[t]``
sequences still running at ``t``.  ``batch_sizes`` is a host (CPU) int64 tensor, as in PyTorch; the lengths
are host data here too, so packing and unpacking are each a single ``index_select`` whose index is computed
on the host from the lengths (the data stays on its device and traces as one gather).  Under ``@nee.jit``
the lengths must therefore be Python ints or tensors that are not traced inputs (PyTorch's tracer bakes
them in as constants as well).  The recurrent modules (``nn.RNN``/``LSTM``/``GRU``) accept a
:class:`PackedSequence` and return one.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...ops.registry import EXPORTS as _EXPORTS
from ...tensor import creation
from ...tensor.tensor import Tensor

__all__ = [
    "PackedSequence",
    "invert_permutation",
    "pack_padded_sequence",
    "pack_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpack_sequence",
    "unpad_sequence",
]


def _E(name):
    return _EXPORTS[name][0]


def _host_ints(x, what: str, op: str) -> np.ndarray:
    """Lengths / batch sizes / permutations as a host int64 array (they are metadata, not data)."""
    if isinstance(x, Tensor):
        if x.dtype.category == 2 or x.dtype.name == "bool":
            raise TypeError(f"{op}: {what} must be an integer tensor, got dtype {x.dtype}")
        a = np.asarray(x.tolist(), dtype=np.int64)
    else:
        if hasattr(x, "detach") and hasattr(x, "numpy"):  # a torch tensor passed by mistake: still readable
            x = x.detach().cpu().numpy()
        try:
            a = np.asarray(x, dtype=np.int64)
        except (TypeError, ValueError):
            raise TypeError(f"{op}: {what} must be a 1-D int64 tensor or a list of ints, got "
                            f"{type(x).__name__}") from None
    if a.ndim != 1:
        raise ValueError(f"{op}: {what} must be 1-D, got shape {list(a.shape)}")
    return a


def _i64(a: np.ndarray, device=None) -> Tensor:
    return creation.tensor(np.ascontiguousarray(a, dtype=np.int64), device=device)


class _PackedSequenceBase(NamedTuple):
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None
    unsorted_indices: Tensor | None


class PackedSequence(_PackedSequenceBase):
    """``torch.nn.utils.rnn.PackedSequence(data, batch_sizes=None, sorted_indices=None, unsorted_indices=None)``.

    A named tuple ``(data, batch_sizes, sorted_indices, unsorted_indices)``; build it with
    :func:`pack_padded_sequence` or :func:`pack_sequence`.  ``unsorted_indices`` defaults to the inverse of
    ``sorted_indices``; ``PackedSequence((data, batch_sizes))`` is accepted too."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise AssertionError("Expected data to be a list or tuple of length 2")
            data, batch_sizes = data
        if isinstance(batch_sizes, Tensor) and batch_sizes.device.type != "cpu":
            raise ValueError("batch_sizes should always be on CPU. Instances of PackedSequence should never be "
                             "created manually. They should be instantiated by functions like pack_sequence and "
                             "pack_padded_sequences in nn.utils.rnn.")
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs) -> PackedSequence:
        """Converts ``data`` like ``Tensor.to``; the indices follow ``data``'s device, ``batch_sizes`` stays on
        the CPU.  Returns ``self`` when nothing changes."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        mv = (lambda t: None if t is None else t.to(data.device))
        return type(self)(data, self.batch_sizes, mv(self.sorted_indices), mv(self.unsorted_indices))

    def cpu(self) -> PackedSequence:
        return self.to("cpu")

    def double(self):
        return self.to(dtype=_dt("float64"))

    def float(self):
        return self.to(dtype=_dt("float32"))

    def half(self):
        return self.to(dtype=_dt("float16"))

    def long(self):
        return self.to(dtype=_dt("int64"))

    def int(self):
        return self.to(dtype=_dt("int32"))

    def short(self):
        return self.to(dtype=_dt("int16"))

    def char(self):
        return self.to(dtype=_dt("int8"))

    def byte(self):
        return self.to(dtype=_dt("uint8"))

    @property
    def is_cuda(self) -> bool:
        return self.data.device.type == "cuda"

    def is_pinned(self) -> bool:
        return False


def _dt(name):
    from ...tensor import dtypes
    return getattr(dtypes, name)


def invert_permutation(permutation):
    """``torch.nn.utils.rnn.invert_permutation``: the inverse of a 1-D permutation (``None`` stays ``None``)."""
    if permutation is None:
        return None
    p = _host_ints(permutation, "permutation", "invert_permutation")
    inv = np.empty_like(p)
    inv[p] = np.arange(p.size, dtype=np.int64)
    return _i64(inv, permutation.device if isinstance(permutation, Tensor) else None)


def _check_lengths(lengths: np.ndarray, B: int, T: int, op: str) -> None:
    if lengths.size != B:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got {lengths.size} "
                           f"(batch_size={B})")
    if lengths.size and lengths.min() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' "
                           f"that is <= 0 ({op}: lengths={lengths.tolist()})")
    if lengths.size and lengths.max() > T:
        raise RuntimeError(f"{op}: a length ({int(lengths.max())}) exceeds the sequence length of the input "
                           f"({T}); lengths={lengths.tolist()}")


def pack_padded_sequence(input: Tensor, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """``torch.nn.utils.rnn.pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True)``.

    ``input`` is ``T x B x *`` (``B x T x *`` with ``batch_first``); ``lengths`` a list or 1-D tensor of the
    ``B`` lengths, decreasing unless ``enforce_sorted=False`` (then the batch is sorted and the permutation is
    kept in ``sorted_indices``/``unsorted_indices``)."""
    op = "pack_padded_sequence"
    if not isinstance(input, Tensor):
        raise TypeError(f"{op}: expected input to be a Tensor, got {type(input).__name__}")
    if input.ndim < 2:
        raise ValueError(f"{op}: expected input of at least 2 dims (T x B x *), got shape {list(input.shape)}")
    L = _host_ints(lengths, "lengths", op)
    x = input.transpose(0, 1) if batch_first else input  # (T, B, *)
    T, B = x.shape[0], x.shape[1]
    _check_lengths(L, B, T, op)
    if enforce_sorted:
        if np.any(L[1:] > L[:-1]):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
                               "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence "
                               "to sidestep this requirement if you do not need ONNX exportability.")
        order = None
    else:
        order = np.argsort(-L, kind="stable")
        L = L[order]
    Tm = int(L[0]) if L.size else 0
    batch_sizes = (L[None, :] > np.arange(Tm)[:, None]).sum(1).astype(np.int64)
    # step t of sorted sequence j lives at row t*B + order[j] of the (T*B, *) view of the input
    cols = order if order is not None else np.arange(B)
    rows = np.concatenate([t * B + cols[:b] for t, b in enumerate(batch_sizes)]) if Tm else np.zeros(0, np.int64)
    flat = x.reshape(T * B, *x.shape[2:])
    data = flat.index_select(0, _i64(rows, input.device))
    sorted_indices = None if order is None else _i64(order, input.device)
    return PackedSequence(data, _i64(batch_sizes), sorted_indices, None)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: int | None = None):
    """``torch.nn.utils.rnn.pad_packed_sequence(sequence, batch_first=False, padding_value=0.0,
    total_length=None) -> (padded, lengths)``: the inverse of :func:`pack_padded_sequence`; the batch comes
    back in its original order and ``lengths`` is a CPU int64 tensor."""
    op = "pad_packed_sequence"
    if not isinstance(sequence, PackedSequence):
        raise TypeError(f"{op}: expected a PackedSequence, got {type(sequence).__name__}")
    data = sequence.data
    bs = _host_ints(sequence.batch_sizes, "batch_sizes", op)
    T = bs.size
    if total_length is not None:
        if total_length < T:
            raise ValueError("Expected total_length to be at least the length of the longest sequence in input, "
                             f"but got total_length={total_length} and max sequence length being {T}")
        T = int(total_length)
    B = int(bs[0]) if bs.size else 0
    N = int(bs.sum())
    if data.shape[0] != N:
        raise RuntimeError(f"{op}: data has {data.shape[0]} rows but batch_sizes {bs.tolist()} sum to {N}")
    offsets = np.concatenate([[0], np.cumsum(bs)[:-1]]).astype(np.int64)
    lengths = (bs[None, :] > np.arange(B)[:, None]).sum(1).astype(np.int64)  # per sorted sequence
    # index into [data; padding row]: (t, j) -> offsets[t] + j while sequence j runs at step t, else N
    j = np.arange(B)[None, :]
    idx = np.where(j < np.concatenate([bs, np.zeros(T - bs.size, np.int64)])[:, None],
                   np.concatenate([offsets, np.zeros(T - bs.size, np.int64)])[:, None] + j, N)  # (T, B)
    if sequence.unsorted_indices is not None:
        unsorted = _host_ints(sequence.unsorted_indices, "unsorted_indices", op)
        idx = idx[:, unsorted]
        lengths = lengths[unsorted]
    if batch_first:
        idx = idx.T
    pad = creation.full((1, *data.shape[1:]), padding_value, dtype=data.dtype, device=data.device)
    ext = _E("cat")([data, pad], 0)
    out = ext.index_select(0, _i64(idx.reshape(-1), data.device)).reshape(*idx.shape, *data.shape[1:])
    return out, _i64(lengths)


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """``torch.nn.utils.rnn.pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side='right')``:
    stacks ``L_i x *`` tensors into ``T x B x *`` (``B x T x *``), padding each to the longest with
    ``padding_value`` on ``padding_side``.  The result has the first sequence's dtype."""
    op = "pad_sequence"
    if isinstance(sequences, Tensor):
        sequences = sequences.unbind(0)
    try:
        sequences = tuple(sequences)
    except TypeError:
        raise RuntimeError(f"pad_sequence: Expected iterable for input sequences, but got arg of type: "
                           f"{type(sequences)}") from None
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    for i, s in enumerate(sequences):
        if not isinstance(s, Tensor):
            raise TypeError(f"{op}: sequence {i} is a {type(s).__name__}, expected a Tensor")
        if s.ndim < 1:
            raise RuntimeError(f"{op}: sequence {i} is 0-d; every sequence must be L x * (at least 1-D)")
    trailing = tuple(sequences[0].shape[1:])
    for i, s in enumerate(sequences):
        if tuple(s.shape[1:]) != trailing:
            raise RuntimeError(f"{op}: every sequence must have the trailing shape of the first, "
                               f"{list(trailing)}, but sequence {i} has shape {list(s.shape)}")
    dt, dev = sequences[0].dtype, sequences[0].device
    T = max(s.shape[0] for s in sequences)
    rows = []
    for s in sequences:
        s = s if s.dtype == dt else s.to(dt)
        n = T - s.shape[0]
        if n:
            fill = creation.full((n, *trailing), padding_value, dtype=dt, device=dev)
            s = _E("cat")([s, fill] if padding_side == "right" else [fill, s], 0)
        rows.append(s)
    return _E("stack")(rows, 0 if batch_first else 1)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list:
    """``torch.nn.utils.rnn.unpad_sequence(padded_sequences, lengths, batch_first=False)``: the list of
    ``padded[:lengths[i], i]`` (``padded[i, :lengths[i]]`` with ``batch_first``).  (PyTorch also transposes
    its input in place when ``batch_first=False``; this does not modify its input.)"""
    op = "unpad_sequence"
    L = _host_ints(lengths, "lengths", op)
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)  # (B, T, *)
    if L.size != x.shape[0]:
        raise ValueError(f"{op}: got {L.size} lengths for a batch of {x.shape[0]} sequences (padded shape "
                         f"{list(padded_sequences.shape)}, batch_first={batch_first})")
    if L.size and (L.min() < 0 or L.max() > x.shape[1]):
        raise RuntimeError(f"{op}: lengths {L.tolist()} must lie in [0, {x.shape[1]}] (padded shape "
                           f"{list(padded_sequences.shape)})")
    return [x.select(0, i).narrow(0, 0, int(n)) for i, n in enumerate(L)]


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """``torch.nn.utils.rnn.pack_sequence(sequences, enforce_sorted=True)``: ``pad_sequence`` then
    ``pack_padded_sequence``."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list:
    """``torch.nn.utils.rnn.unpack_sequence(packed_sequences)``: the list of the original sequences."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
