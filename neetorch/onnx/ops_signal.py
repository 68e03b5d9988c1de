"""ONNX signal-processing ops: STFT and MelWeightMatrix (DFT and the window ops live in ops_math).

Semantics follow ONNX's reference implementations (``onnx/reference/ops/op_stft.py``,
``op_mel_weight_matrix.py``).
"""
from __future__ import annotations

import numpy as np

import neetorch as nee

from .lowering import LoweringError, onnx_np, op


def _dft_basis(n_in: int, n: int, bins: int):
    """cos / sin of 2*pi*j*k/n for j < n_in, k < bins (the angle reduced mod n first, for accuracy)."""
    jk = np.outer(np.arange(n_in, dtype=np.int64), np.arange(bins, dtype=np.int64)) % n
    ang = 2 * np.pi * jk / n
    return np.cos(ang), np.sin(ang)


@op("STFT")
def _stft(ctx, node, x, frame_step, window=None, frame_length=None):
    """Frames gathered by one index_select, windowed, and transformed by a matmul with the DFT basis."""
    if x.ndim == 2:  # (batch, length): a real signal, as onnxruntime takes it (torch.stft's TorchScript export)
        x = x.unsqueeze(2)
    if x.ndim != 3 or x.shape[2] not in (1, 2):
        raise LoweringError(f"STFT expects a signal of shape (batch, length[, 1 or 2]), got {tuple(x.shape)}")
    onesided = node.get("onesided", 1)
    step = ctx.scalar(frame_step)
    if step is None or int(step) <= 0:
        raise LoweringError(f"STFT frame_step must be a positive integer, got {step}")
    step = int(step)
    B, L, cplx = x.shape[0], x.shape[1], x.shape[2] == 2
    if window is not None and window.ndim != 1:
        raise LoweringError(f"STFT window must be 1-D, got shape {tuple(window.shape)}")
    wlen = window.shape[0] if window is not None else None
    n = ctx.scalar(frame_length)
    n = int(n) if n is not None else (wlen if wlen is not None else L)
    if n <= 0:
        raise LoweringError(f"STFT frame_length must be positive, got {n}")
    wlen = n if wlen is None else wlen
    frames = 1 + (L - n) // step
    if frames <= 0:
        raise LoweringError(f"STFT: signal length {L} is shorter than frame_length {n}")
    bins = n // 2 + 1 if onesided else n
    # a frame holds wlen samples (zero past the signal's end); the DFT of length n pads or truncates it
    used = min(wlen, n)
    need = (frames - 1) * step + used
    dt = nee.float64  # accumulate in float64, as DFT does: ONNX's rule has atol 1e-7
    sig = x.to(dt)
    if need > L:
        sig = nee.pad(sig, (0, 0, 0, need - L), mode="constant", value=0.0)
    idx = (np.arange(frames)[:, None] * step + np.arange(used)[None, :]).reshape(-1)
    fr = nee.index_select(sig, 1, ctx.const(idx.astype(np.int64))).reshape(B, frames, used, x.shape[2])
    if window is not None:
        fr = fr * window.to(dt).narrow(0, 0, used).reshape(1, 1, used, 1)
    cos, sin = _dft_basis(used, n, bins)
    C, S = ctx.const(cos), ctx.const(sin)
    xr = fr.narrow(3, 0, 1).squeeze(3)
    re = nee.matmul(xr, C)
    im = -nee.matmul(xr, S)
    if cplx:
        xi = fr.narrow(3, 1, 1).squeeze(3)
        re = re + nee.matmul(xi, S)
        im = im + nee.matmul(xi, C)
    return nee.stack([re, im], -1).to(x.dtype)


@op("MelWeightMatrix")
def _mel_weight_matrix(ctx, node, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
    """A constant of the static scalar inputs, computed with the reference's arithmetic (dtypes included)."""
    M = int(ctx.scalar(num_mel_bins))
    n_fft = ctx.static(dft_length).reshape(())
    sr = ctx.static(sample_rate).reshape(())
    lo, hi = ctx.static(lower_edge_hertz).reshape(()), ctx.static(upper_edge_hertz).reshape(())
    if M <= 0 or int(n_fft) <= 0 or int(sr) <= 0:
        raise LoweringError(f"MelWeightMatrix: num_mel_bins ({M}), dft_length ({int(n_fft)}) and sample_rate "
                            f"({int(sr)}) must be positive")
    nbins = int(n_fft) // 2 + 1
    fb = np.arange(0, M + 2)
    lo_mel = 2595 * np.log1p(lo / 700) / np.log(10)
    hi_mel = 2595 * np.log1p(hi / 700) / np.log(10)
    step = (hi_mel - lo_mel) / fb.shape[0]
    f = fb * step + lo_mel
    f = 700 * np.expm1(f / 2595 * np.log(10))
    f = (((n_fft + 1) * f) // sr).astype(int)
    left, center, right = f[:-2], f[1:-1], f[2:]  # per mel bin
    j = np.arange(nbins)[:, None]
    rise = center - left
    fall = right - center
    up = np.where(rise == 0, j == center, (j >= left) & (j <= center))
    down = (fall > 0) & (j >= center) & (j < right)
    # the bins the reference writes: [left, center] where rise >= 0, [center, right) where fall > 0
    ends = np.concatenate([left[rise >= 0], center[rise >= 0], center[fall > 0], right[fall > 0] - 1])
    if ends.size and (ends.min() < 0 or ends.max() >= nbins):
        raise LoweringError(f"MelWeightMatrix: the mel filters span frequency bins "
                            f"{int(ends.min())}..{int(ends.max())}, outside the {nbins} bins of dft_length {int(n_fft)}; check lower/upper_edge_hertz "
                            f"({float(lo)}, {float(hi)}) against sample_rate {int(sr)}")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(up, np.where(rise == 0, 1.0, (j - left) / rise.astype(np.float64)), 0.0)
        out = np.where(down, (right - j) / fall.astype(np.float64), out)
    return ctx.const(out.astype(onnx_np(node.get("output_datatype", 1))))
