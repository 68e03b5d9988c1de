"""Short-time Fourier transforms: ``stft`` / ``istft`` with ``torch.stft`` / ``torch.istft``'s semantics.

Computed on the CPU with numpy and the FFT library of ``nee.fft`` (frames as a strided view, one batched
transform, overlap-add by frame slices); the argument checks, defaults, warnings and error messages follow torch's
``aten/src/ATen/native/SpectralOps.cpp`` and ``torch/functional.py``.  Complex values live on the CPU only,
so inputs on other devices are refused (move them with ``.cpu()``).
"""
from __future__ import annotations

import warnings

import numpy as np

from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor
from .complex import _eager_only
from .registry import export

__all__ = ["istft", "stft"]

_PAD = {"reflect": "reflect", "constant": "constant", "replicate": "edge", "circular": "wrap"}


def _impl(name):
    from ..fft import _impl as impl  # (neetorch.fft imports after the op table)
    return impl(name)


def _cpu(x, name, what):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument '{what}' must be Tensor, not {type(x).__name__}")
    _eager_only(name)
    if x._device.type != "cpu":
        raise RuntimeError(f"{name}: runs on the CPU (complex values live there only); '{what}' is on {x._device}: "
                           f"move it with .cpu() first")
    return x._data


def _window(window, win_length, n_fft, name, dtype):
    """The window zero-padded (centered) to ``n_fft``, or None for a rectangular one."""
    if window is None:
        w = None
    else:
        w = _cpu(window, name, "window")
    if w is None:
        return None
    if win_length < n_fft:
        left = (n_fft - win_length) // 2
        w = np.pad(w, (left, n_fft - win_length - left))
    return w


def _sig(name, x, n_fft, hop, win, window):
    w = "None" if window is None else f"{window._dtype.name}[{', '.join(map(str, window.shape))}]"
    return f"{name}({x._dtype.name}[{', '.join(map(str, x.shape))}], n_fft={n_fft}, hop_length={hop}, " \
           f"win_length={win}, window={w})"


@export
def stft(input, n_fft: int, hop_length=None, win_length=None, window=None, center: bool = True,
         pad_mode: str = "reflect", normalized: bool = False, onesided=None, return_complex=None) -> Tensor:
    """``torch.stft``: the short-time Fourier transform of a 1-D ``(L)`` or 2-D ``(B, L)`` signal.

    Returns ``(B?, n_fft // 2 + 1 or n_fft, n_frames)`` complex values (``return_complex=True``, required for
    real input as in torch), or their ``view_as_real`` form (``return_complex=False``, deprecated in torch).
    """
    a = _cpu(input, "stft", "input")
    cplx_in = input._dtype.category == 3
    cplx_win = window is not None and isinstance(window, Tensor) and window._dtype.category == 3
    if return_complex is None:
        if not (cplx_in or cplx_win):
            raise RuntimeError("stft requires the return_complex parameter be given for real inputs, and will "
                               "further require that return_complex=True in a future PyTorch release.")
        return_complex = True
    if not return_complex:
        warnings.warn("stft with return_complex=False is deprecated. In a future pytorch release, stft will return "
                      "complex tensors for all inputs, and return_complex=False will raise an error.\nNote: you can "
                      "still call torch.view_as_real on the complex output to recover the old return format.",
                      UserWarning, stacklevel=2)
    if input.ndim not in (1, 2):
        raise RuntimeError(f"stft: expected a 1D or 2D tensor, but got a {input.ndim}D tensor of shape "
                           f"{tuple(input.shape)}")
    if center:
        if pad_mode not in _PAD:
            raise NotImplementedError(f"stft: pad_mode {pad_mode!r} is not one of {sorted(_PAD)}")
        pad = n_fft // 2
        length = a.shape[-1]
        if pad_mode == "reflect" and pad >= length:
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input dimension, "
                               f"but got: padding ({pad}, {pad}) at dimension {input.ndim} of input "
                               f"{[1] * (3 - input.ndim) + list(input.shape)}")
        if pad_mode == "circular" and pad > length:
            raise RuntimeError("Padding value causes wrapping around more than once.")
        widths = [(0, 0)] * (a.ndim - 1) + [(pad, pad)]
        a = np.pad(a, widths, mode=_PAD[pad_mode])
    x2 = a[None] if a.ndim == 1 else a
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    length = x2.shape[1]
    sig = _sig("stft", input, n_fft, hop, win, window)
    if n_fft <= 0 or n_fft > length:
        raise RuntimeError(f"{sig}: expected 0 < n_fft < {length}, but got n_fft={n_fft}")
    if hop <= 0:
        raise RuntimeError(f"{sig}: expected hop_length > 0, but got hop_length={hop}")
    if win <= 0 or win > n_fft:
        raise RuntimeError(f"{sig}: expected 0 < win_length <= n_fft, but got win_length={win}")
    if window is not None and (not isinstance(window, Tensor) or window.ndim != 1 or window.shape[0] != win):
        raise RuntimeError(f"{sig}: expected a 1D window tensor of size equal to win_length={win}, but got window "
                           f"with size {list(getattr(window, 'shape', ()))}")
    if window is None:
        warnings.warn("A window was not provided. A rectangular window will be applied,which is known to cause "
                      "spectral leakage. Other windows such as torch.hann_window or torch.hamming_window are "
                      "recommended to reduce spectral leakage.To suppress this warning and use a rectangular window, "
                      "explicitly set `window=torch.ones(n_fft, device=<device>)`.", UserWarning, stacklevel=2)
    w = _window(window, win, n_fft, "stft", input._dtype)
    if w is None and win < n_fft:
        left = (n_fft - win) // 2
        w = np.zeros(n_fft, x2.dtype if x2.dtype.kind in "fc" else np.float32)
        w[left:left + win] = 1
    dt = input._dtype if input._dtype.category >= 2 else _dt.get_default_dtype()
    if dt in _dt.LOW_FLOATS:
        raise RuntimeError(f"stft: Unsupported dtype {dt.name}; cast the input to float32 first")
    if window is not None:
        dt = _dt.promote_types(dt, window._dtype)
    n_frames = 1 + (length - n_fft) // hop
    frames = np.lib.stride_tricks.as_strided(
        x2, (x2.shape[0], n_frames, n_fft), (x2.strides[0], hop * x2.strides[1], x2.strides[1]), writeable=False)
    frames = frames.astype(dt.np)
    if w is not None:
        frames = frames * w.astype(dt.np)
    complex_fft = np.iscomplexobj(frames)
    if onesided is None:
        onesided = not complex_fft
    if complex_fft and onesided:
        raise RuntimeError("Cannot have onesided output if window or input is complex")
    norm = "ortho" if normalized else "backward"
    spec = _impl("rfft")(frames, axis=-1, norm=norm) if onesided else _impl("fft")(frames, axis=-1, norm=norm)
    spec = spec.astype(_dt.to_complex(dt, "stft").np).transpose(0, 2, 1)
    if input.ndim == 1:
        spec = spec[0]
    from ..devices import device
    out = Tensor._make(np.ascontiguousarray(spec), device("cpu"), _dt.from_numpy_dtype(spec.dtype))
    if not return_complex:
        from .complex import view_as_real
        return view_as_real(out)
    return out


@export
def istft(input, n_fft: int, hop_length=None, win_length=None, window=None, center: bool = True,
          normalized: bool = False, onesided=None, length=None, return_complex: bool = False) -> Tensor:
    """``torch.istft``: the inverse of ``stft`` by overlap-add, ``(B?, freq, n_frames)`` complex -> ``(B?, L)``."""
    a = _cpu(input, "istft", "input")
    if input._dtype.category != 3:
        raise RuntimeError("istft requires a complex-valued input tensor matching the output from stft with "
                           "return_complex=True.")
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    sig = _sig("istft", input, n_fft, hop, win, window)
    if input.ndim not in (2, 3) or input.numel() == 0:
        raise RuntimeError(f"{sig}: expected a tensor with a 3rd (batch, optional) dimension and a non-zero number "
                           f"of elements, but got a {input.ndim}D tensor of shape {tuple(input.shape)}")
    if window is None:
        warnings.warn("A window was not provided. A rectangular window will be applied.Please provide the same "
                      "window used by stft to make the inversion lossless.To suppress this warning and use a "
                      "rectangular window, explicitly set `window=torch.ones(n_fft, device=<device>)`.",
                      UserWarning, stacklevel=2)
    n_frames = a.shape[-1]
    fft_size = a.shape[-2]
    expected_len = n_fft + hop * (n_frames - 1)
    if onesided is None:
        onesided = fft_size != n_fft
    if onesided:
        if n_fft // 2 + 1 != fft_size:
            raise RuntimeError(f"{sig}: expected the frequency dimension (3rd to the last) of the input tensor to "
                               f"match n_fft / 2 + 1 when onesided=True, but got {fft_size}")
    elif n_fft != fft_size:
        raise RuntimeError(f"{sig}: expected the frequency dimension (3rd to the last) of the input tensor to match "
                           f"n_fft when onesided=False, but got {fft_size}")
    if not 0 < hop <= win:
        raise RuntimeError(f"{sig}: expected 0 < hop_length <= win_length")
    if not 0 < win <= n_fft:
        raise RuntimeError(f"{sig}: expected 0 < win_length <= n_fft")
    if window is not None and (not isinstance(window, Tensor) or window.ndim != 1 or window.shape[0] != win):
        raise RuntimeError(f"{sig}: Invalid window shape. window has to be 1D and length of `win_length`")
    rdt = _dt.to_real(input._dtype)
    if window is not None:
        w = _window(window, win, n_fft, "istft", input._dtype)
        if window._dtype.category == 3 and not return_complex:
            raise RuntimeError(f"{sig}: Complex windows are incompatible with return_complex=False")
    else:
        w = np.ones(win, rdt.np)
        if win < n_fft:
            left = (n_fft - win) // 2
            w = np.pad(w, (left, n_fft - win - left))
    if return_complex and onesided:
        raise RuntimeError("Cannot have onesided output if window or input is complex")
    x = a[None] if a.ndim == 2 else a
    x = x.transpose(0, 2, 1)   # (B, n_frames, fft_size)
    norm = "ortho" if normalized else "backward"
    if return_complex:
        y = _impl("ifft")(x, axis=-1, norm=norm)
        odt = input._dtype
    else:
        if not onesided:
            x = x[..., :n_fft // 2 + 1]
        y = _impl("irfft")(x, n=n_fft, axis=-1, norm=norm)
        odt = rdt
    if window is not None and window._dtype.category == 3:
        odt = _dt.promote_types(odt, window._dtype)
    y = y * w
    batch = y.shape[0]
    # overlap-add of the frames and of the squared window (torch squares the window itself: window.pow(2), a
    # complex envelope for a complex window), one slice per frame
    w2 = w.astype(np.complex128 if np.iscomplexobj(w) else np.float64) ** 2
    sig_out = np.zeros((batch, expected_len), y.dtype)
    env = np.zeros(expected_len, w2.dtype)
    for f in range(n_frames):
        sig_out[:, f * hop:f * hop + n_fft] += y[:, f]
        env[f * hop:f * hop + n_fft] += w2
    start = n_fft // 2 if center else 0
    if length is not None:
        end = start + length
    elif center:
        end = -(n_fft // 2)
    else:
        end = expected_len
    y = sig_out[:, start:end]
    env = env[start:end]
    if env.size and np.abs(env).min() < 1e-11:
        raise RuntimeError(f"{sig}: window overlap add min: {np.abs(env).min():g} (the window's squares summed over "
                           f"the frames vanish somewhere: the inverse is not defined there; check window and "
                           f"hop_length)")
    y = y / env
    if end > expected_len:
        warnings.warn("The length of signal is shorter than the length parameter. Result is being padded with zeros "
                      "in the tail. Please check your center and hop_length settings.", UserWarning, stacklevel=2)
        y = np.pad(y, ((0, 0), (0, end - expected_len)))
    if input.ndim == 2:
        y = y[0]
    from ..devices import device
    y = np.ascontiguousarray(y.astype(odt.np))
    return Tensor._make(y, device("cpu"), odt)
