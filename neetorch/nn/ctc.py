"""Connectionist Temporal Classification loss (``torch.nn.functional.ctc_loss``, ``torch.nn.CTCLoss``).

The forward (alpha) recursion of Graves et al. (2006) in log space, written with existing ops so it runs on
every device and traces under ``@nee.jit``: the targets are extended with blanks (``l'`` of length
``2 * S + 1``), the emission scores ``log_probs[t, n, l'[n, s]]`` come from one ``gather``, and each time step
is a ``logsumexp`` over the three predecessors (same state, previous state, and the state two back when it is
a different non-blank label).  Sequences shorter than ``T`` stop updating after their ``input_lengths[n]``
steps (a ``where``).  Lengths are host metadata (lists, tuples or tensors that are not traced values), like the
index computations of PyTorch's kernel; the targets are read on the host too, to build ``l'`` and validate the
labels.  Impossible alignments give ``inf`` (``zero_infinity=True`` turns them into 0).
"""
from __future__ import annotations

import math

import numpy as np

from ..ops.registry import EXPORTS as _EXPORTS
from ..tensor import creation
from ..tensor.tensor import Tensor

__all__ = ["ctc_loss"]


def _E(name):
    return _EXPORTS[name][0]


def _lengths(x, name: str, N: int) -> np.ndarray:
    if isinstance(x, Tensor):
        if x.dtype.category == 2 or x.dtype.name == "bool":
            raise TypeError(f"ctc_loss: {name} must be an integer tensor or a tuple of ints, got dtype {x.dtype}")
        a = np.asarray(x.tolist(), dtype=np.int64).reshape(-1)
    elif isinstance(x, (list, tuple)):
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in x):
            raise TypeError(f"ctc_loss: {name} must be a tuple of ints or an integer tensor, got {x!r}")
        a = np.asarray(x, dtype=np.int64).reshape(-1)
    else:
        raise TypeError(f"ctc_loss: {name} must be a tuple of ints or an integer tensor, got {type(x).__name__}")
    if a.size != N:
        raise RuntimeError(f"ctc_loss: {name} must be of size batch_size ({N}), got {a.size} values")
    return a


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank: int = 0, reduction: str = "mean",
             zero_infinity: bool = False):
    """``torch.nn.functional.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0,
    reduction='mean', zero_infinity=False)``.

    ``log_probs``: ``(T, N, C)`` (or ``(T, C)`` unbatched) log-probabilities; ``targets``: ``(N, S)`` padded or
    1-D concatenated (``sum(target_lengths)``); lengths as tensors or tuples of ints.  ``'mean'`` divides each
    loss by its target length (at least 1) and averages over the batch."""
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if not isinstance(log_probs, Tensor) or not isinstance(targets, Tensor):
        raise TypeError("ctc_loss: log_probs and targets must be Tensors, got "
                        f"{type(log_probs).__name__} and {type(targets).__name__}")
    if log_probs.dtype.category != 2:
        raise NotImplementedError(f"ctc_loss: not implemented for log_probs of dtype {log_probs.dtype} "
                                  "(floating point log-probabilities expected)")
    if log_probs.ndim not in (2, 3):
        raise ValueError(f"ctc_loss: log_probs must be (T, N, C) or (T, C), got shape {list(log_probs.shape)}")
    if log_probs.numel() == 0:
        raise RuntimeError(f"ctc_loss: log_probs tensor must not be empty (got shape {list(log_probs.shape)})")
    unbatched = log_probs.ndim == 2
    lp = log_probs.unsqueeze(1) if unbatched else log_probs
    T, N, C = lp.shape
    if not 0 <= blank < C:
        raise RuntimeError(f"blank must be in label range (blank={blank}, {C} classes)")
    if unbatched and isinstance(input_lengths, int):
        input_lengths = (input_lengths,)
    if unbatched and isinstance(target_lengths, int):
        target_lengths = (target_lengths,)
    il = _lengths(input_lengths, "input_lengths", N)
    tl = _lengths(target_lengths, "target_lengths", N)
    if il.size and (il.min() < 0 or il.max() > T):
        bad = int(il.max()) if il.max() > T else int(il.min())
        raise RuntimeError(f"ctc_loss: Expected input_lengths to have values in [0, {T}] (the time dimension of "
                           f"log_probs of shape {list(log_probs.shape)}), but got value {bad}")
    if tl.size and tl.min() < 0:
        raise RuntimeError(f"ctc_loss: Expected target_lengths to have value at least 0, but got {int(tl.min())}")

    tg = np.asarray(targets.tolist()).astype(np.int64) if targets.numel() else np.zeros(targets.shape, np.int64)
    S = int(tl.max()) if tl.size else 0
    labels = np.full((N, max(S, 1)), blank, dtype=np.int64)
    if tg.ndim == 2 and not unbatched:
        if tg.shape[0] != N or tg.shape[1] < S:
            raise RuntimeError(f"ctc_loss: padded targets of shape {list(tg.shape)} need {N} rows of at least "
                               f"max(target_lengths) = {S} labels")
        for n in range(N):
            labels[n, :tl[n]] = tg[n, :tl[n]]
    elif tg.ndim == 1:
        if tg.shape[0] < int(tl.sum()):
            raise RuntimeError(f"ctc_loss: concatenated targets have {tg.shape[0]} labels but target_lengths "
                               f"{tl.tolist()} sum to {int(tl.sum())}")
        off = np.concatenate([[0], np.cumsum(tl)[:-1]]).astype(np.int64)
        for n in range(N):
            labels[n, :tl[n]] = tg[off[n]:off[n] + tl[n]]
    else:
        raise RuntimeError(f"ctc_loss: targets must be (N, S) padded or 1-D concatenated, got shape "
                           f"{list(tg.shape)} for log_probs of shape {list(log_probs.shape)}")
    for n in range(N):
        row = labels[n, :tl[n]]
        if row.size and (row.min() < 0 or row.max() >= C):
            raise RuntimeError(f"ctc_loss: target labels must lie in [0, {C}) ({C} classes), got "
                               f"{row.tolist()} for batch element {n}")

    # extended labels l' = (blank, y1, blank, y2, ..., blank) and where a skip from s-2 is allowed
    Sx = 2 * max(S, 1) + 1
    ext = np.full((N, Sx), blank, dtype=np.int64)
    ext[:, 1::2] = labels
    skip = np.zeros((N, Sx), dtype=bool)
    skip[:, 3::2] = labels[:, 1:] != labels[:, :-1]
    dt, dev = lp.dtype, lp.device
    emit = lp.gather(2, creation.tensor(ext, device=dev).unsqueeze(0).expand(T, N, Sx))  # (T, N, Sx)
    ninf = -math.inf
    where = _E("where")
    skip_t = creation.tensor(skip, device=dev)
    col1 = creation.full((N, 1), ninf, dtype=dt, device=dev)
    col2 = creation.full((N, 2), ninf, dtype=dt, device=dev)
    # alpha before the first step: all mass on a virtual state feeding s = 0 and s = 1 (same as a leading blank)
    a0 = np.full((N, Sx), ninf)
    a0[:, 0] = 0.0
    alpha = creation.tensor(a0, dtype=dt, device=dev)
    for t in range(T):
        active = il > t
        if not active.any():
            break
        prev1 = _E("cat")([col1, alpha.narrow(1, 0, Sx - 1)], 1)
        prev2 = where(skip_t, _E("cat")([col2, alpha.narrow(1, 0, Sx - 2)], 1), ninf)
        new = _E("stack")([alpha, prev1, prev2], 0).logsumexp(0) + emit.select(0, t)
        if active.all():
            alpha = new
        else:
            alpha = where(creation.tensor(active, device=dev).unsqueeze(1), new, alpha)
    # the path ends on the last label (s = 2*tl - 1) or the trailing blank (s = 2*tl)
    ends = np.stack([2 * tl, np.maximum(2 * tl - 1, 0)], 1)
    end_ok = np.stack([np.ones(N, bool), tl > 0], 1)
    fin = alpha.gather(1, creation.tensor(ends, device=dev))
    fin = where(creation.tensor(end_ok, device=dev), fin, ninf)
    loss = -fin.logsumexp(1)  # (N,)
    if zero_infinity:
        loss = where(loss.isinf(), 0.0, loss)
    if reduction == "none":
        return loss.squeeze(0) if unbatched else loss
    if reduction == "sum":
        return loss.sum()
    denom = creation.tensor(np.maximum(tl, 1).astype(dt.np), device=dev)
    return (loss / denom).mean()

