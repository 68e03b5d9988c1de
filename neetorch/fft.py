"""``nee.fft``: discrete Fourier transforms with ``torch.fft``'s signatures, dtype rules and errors.

Computed on the CPU with pocketfft, the library torch's CPU backend uses too: through ``scipy.fft`` when
scipy is installed (its C++ pocketfft vectorizes across rows: ~8x numpy's on a 64x1024 batch), else
``numpy.fft`` (same results to rounding; numpy < 2 computes float32 input in double, then rounds).
``nee.fft.backend()`` names the one in use.  Dtypes, as in torch: float32 -> complex64, float64 ->
complex128; bool and integer inputs are promoted to the default float dtype first; float16 / bfloat16 are
refused (torch's CPU FFT has no half precision).  ``norm`` is ``"backward"`` (default: no scaling forward,
1/n inverse), ``"ortho"`` (1/sqrt(n) both ways) or ``"forward"`` (1/n forward).

Complex values live on the CPU only (see ``neetorch/ops/complex.py``): transforms of a tensor on another
device raise; move it with ``.cpu()`` first.  ``fftfreq`` / ``rfftfreq`` / ``fftshift`` / ``ifftshift``
produce or move real values and work on every device.  Transforms are eager only (no ``nee.jit`` tracing).
"""
from __future__ import annotations

import numpy as np

from .ops.complex import _eager_only
from .tensor import dtypes as _dt
from .tensor.tensor import Tensor

__all__ = [
    "fft",
    "fft2",
    "fftfreq",
    "fftn",
    "fftshift",
    "hfft",
    "hfft2",
    "hfftn",
    "ifft",
    "ifft2",
    "ifftn",
    "ifftshift",
    "ihfft",
    "ihfft2",
    "ihfftn",
    "irfft",
    "irfft2",
    "irfftn",
    "rfft",
    "rfft2",
    "rfftfreq",
    "rfftn",
]

_FFT = None   # the FFT library: chosen on first use (importing scipy.fft costs ~0.2 s: not at import neetorch)


def backend() -> str:
    """The name of the FFT library in use: ``"scipy.fft"`` when scipy is installed, else ``"numpy.fft"``."""
    return _lib().__name__


def _lib():
    global _FFT
    if _FFT is None:
        try:
            import scipy.fft as lib
        except ImportError:   # pragma: no cover - scipy is optional
            lib = np.fft
        _FFT = lib
    return _FFT


def _impl(name: str):
    """The transform ``name`` of the FFT library in use."""
    return getattr(_lib(), name)


_NORMS = {None: "backward", "backward": "backward", "forward": "forward", "ortho": "ortho"}
_TORCH_NAME = {"bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int", "int64": "Long",
               "float16": "Half", "bfloat16": "BFloat16", "float32": "Float", "float64": "Double",
               "complex64": "ComplexFloat", "complex128": "ComplexDouble"}


def _norm(norm) -> str:
    try:
        return _NORMS[norm]
    except (KeyError, TypeError):
        raise RuntimeError(f'Invalid normalization mode: "{norm}"') from None


def _input(x, name: str, kind: str):
    """(numpy array in the compute dtype, result dtype) for a transform of ``kind`` "c2c" | "r2c" | "c2r"."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type(x).__name__}")
    _eager_only(name)
    dt = x._dtype
    if dt in _dt.LOW_FLOATS:
        raise RuntimeError(f"{name}: Unsupported dtype {_TORCH_NAME.get(dt.name, dt.name)} (torch's CPU FFT has no "
                           f"half precision); cast the input to float32 first")
    if kind == "r2c" and dt.category == 3:
        raise RuntimeError(f"{name} expects a real input tensor, but got {_TORCH_NAME[dt.name]}")
    if x._device.type != "cpu":
        raise RuntimeError(f"{name}: FFTs run on the CPU (complex values live there only); the input is on "
                           f"{x._device}: move it with .cpu() first")
    if dt.category < 2:
        dt = _dt.get_default_dtype()
    a = x._data
    if kind == "c2r":
        cdt = _dt.to_complex(dt, name)
        return (a if a.dtype == cdt.np else a.astype(cdt.np)), _dt.to_real(cdt)
    if a.dtype != dt.np:
        a = a.astype(dt.np)
    return a, _dt.to_complex(dt, name)


def _wrap(dim: int, ndim: int) -> int:
    if ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    if not -ndim <= dim < ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {dim})")
    return dim + ndim if dim < 0 else dim


def _check_n(n) -> None:
    if n is not None and n < 1:
        raise RuntimeError(f"Invalid number of data points ({n}) specified")


def _result(r: np.ndarray, dt, out, name: str) -> Tensor:
    from .devices import device
    r = np.asarray(r)
    if r.dtype != dt.np:
        r = r.astype(dt.np)
    t = Tensor._make(r if r.flags.c_contiguous else r.copy(order="C"), device("cpu"), dt)
    if out is None:
        return t
    from .ops.elementwise import _can_cast, resize_out
    if not _can_cast(dt, out._dtype) or out._dtype.category < 2:
        raise RuntimeError(f"{name}: the result type {dt.name} can't be cast to the out tensor's dtype "
                           f"{out._dtype.name}")
    resize_out(out, t.shape, name)
    return out.copy_(t)


def _one(fn_name, name, kind, input, n, dim, norm, out):
    a, dt = _input(input, name, kind)
    d = _wrap(dim, a.ndim)
    _check_n(n)
    nm = _norm(norm)
    if kind == "c2r" and n is None and 2 * (a.shape[d] - 1) < 1:
        raise RuntimeError(f"Invalid number of data points ({2 * (a.shape[d] - 1)}) specified")
    return _result(_impl(fn_name)(a, n=n, axis=d, norm=nm), dt, out, name)


def fft(input, n=None, dim=-1, norm=None, *, out=None) -> Tensor:
    """``torch.fft.fft``: 1-D discrete Fourier transform along ``dim`` (``n``: pad with zeros / trim)."""
    return _one("fft", "fft", "c2c", input, n, dim, norm, out)


def ifft(input, n=None, dim=-1, norm=None, *, out=None) -> Tensor:
    """``torch.fft.ifft``: 1-D inverse transform."""
    return _one("ifft", "ifft", "c2c", input, n, dim, norm, out)


def rfft(input, n=None, dim=-1, norm=None, *, out=None) -> Tensor:
    """``torch.fft.rfft``: transform of a real signal, the ``n // 2 + 1`` non-negative frequencies."""
    return _one("rfft", "rfft", "r2c", input, n, dim, norm, out)


def irfft(input, n=None, dim=-1, norm=None, *, out=None) -> Tensor:
    """``torch.fft.irfft``: inverse of ``rfft``; real output of length ``n`` (default ``2 * (m - 1)``)."""
    return _one("irfft", "irfft", "c2r", input, n, dim, norm, out)


def hfft(input, n=None, dim=-1, norm=None, *, out=None) -> Tensor:
    """``torch.fft.hfft``: transform of a Hermitian-symmetric signal given by its first half (real output)."""
    return _one("hfft", "hfft", "c2r", input, n, dim, norm, out)


def ihfft(input, n=None, dim=-1, norm=None, *, out=None) -> Tensor:
    """``torch.fft.ihfft``: inverse of ``hfft`` for a real signal (the ``n // 2 + 1`` first outputs)."""
    return _one("ihfft", "ihfft", "r2c", input, n, dim, norm, out)


def _shape_dims(a: np.ndarray, s, dim, name: str):
    """torch's canonicalize_fft_shape_and_dim_args: (sizes, dims) of an n-D transform."""
    nd = a.ndim
    if dim is not None:
        dims = [dim] if isinstance(dim, int) else list(dim)
        dims = [_wrap(d, nd) for d in dims]
        if len(set(dims)) != len(dims):
            raise RuntimeError("FFT dims must be unique")
    else:
        dims = None
    if s is not None:
        s = [s] if isinstance(s, int) else list(s)
        if dims is not None:
            if len(s) != len(dims):
                raise RuntimeError("When given, dim and shape arguments must have the same length")
        else:
            if len(s) > nd:
                raise RuntimeError(f"Got shape with {len(s)} values but input tensor only has {nd} dimensions.")
            dims = list(range(nd - len(s), nd))
        sizes = []
        for n, d in zip(s, dims):
            n = int(n)
            if n == -1:
                n = a.shape[d]
            _check_n(n)
            sizes.append(n)
    else:
        if dims is None:
            dims = list(range(nd))
        sizes = [a.shape[d] for d in dims]
    return sizes, dims


def _many(fn_name, name, kind, input, s, dim, norm, out):
    a, dt = _input(input, name, kind)
    sizes, dims = _shape_dims(a, s, dim, name)
    nm = _norm(norm)
    if not dims:
        if kind != "c2c":
            raise RuntimeError(f"{name} must transform at least one axis")
        return _result(a.astype(dt.np), dt, out, name)   # (a copy: the result never aliases the input)
    if kind == "c2r":
        if s is None:
            sizes[-1] = 2 * (a.shape[dims[-1]] - 1)
        _check_n(sizes[-1])
    return _result(_impl(fn_name)(a, s=sizes, axes=dims, norm=nm), dt, out, name)


def fftn(input, s=None, dim=None, norm=None, *, out=None) -> Tensor:
    """``torch.fft.fftn``: n-D transform over ``dim`` (default: all dims, or the last ``len(s)``)."""
    return _many("fftn", "fftn", "c2c", input, s, dim, norm, out)


def ifftn(input, s=None, dim=None, norm=None, *, out=None) -> Tensor:
    """``torch.fft.ifftn``: n-D inverse transform."""
    return _many("ifftn", "ifftn", "c2c", input, s, dim, norm, out)


def rfftn(input, s=None, dim=None, norm=None, *, out=None) -> Tensor:
    """``torch.fft.rfftn``: n-D transform of a real signal (half spectrum along the last of ``dim``)."""
    return _many("rfftn", "rfftn", "r2c", input, s, dim, norm, out)


def irfftn(input, s=None, dim=None, norm=None, *, out=None) -> Tensor:
    """``torch.fft.irfftn``: inverse of ``rfftn`` (the last size defaults to ``2 * (m - 1)``)."""
    return _many("irfftn", "irfftn", "c2r", input, s, dim, norm, out)


def fft2(input, s=None, dim=(-2, -1), norm=None, *, out=None) -> Tensor:
    """``torch.fft.fft2``: 2-D transform (``fftn`` over the last two dims by default)."""
    return _many("fftn", "fft2", "c2c", input, s, dim, norm, out)


def ifft2(input, s=None, dim=(-2, -1), norm=None, *, out=None) -> Tensor:
    return _many("ifftn", "ifft2", "c2c", input, s, dim, norm, out)


def rfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None) -> Tensor:
    return _many("rfftn", "rfft2", "r2c", input, s, dim, norm, out)


def irfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None) -> Tensor:
    return _many("irfftn", "irfft2", "c2r", input, s, dim, norm, out)


_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _hfftn(a, s, axes, norm):
    lib = _lib()
    if hasattr(lib, "hfftn"):
        return lib.hfftn(a, s=s, axes=axes, norm=norm)
    return lib.irfftn(np.conj(a), s=s, axes=axes, norm=_SWAP[norm])   # numpy.fft has no hfftn


def _ihfftn(a, s, axes, norm):
    lib = _lib()
    if hasattr(lib, "ihfftn"):
        return lib.ihfftn(a, s=s, axes=axes, norm=norm)
    return np.conj(lib.rfftn(a, s=s, axes=axes, norm=_SWAP[norm]))


def _many_h(fn, name, kind, input, s, dim, norm, out):
    a, dt = _input(input, name, kind)
    sizes, dims = _shape_dims(a, s, dim, name)
    nm = _norm(norm)
    if not dims:
        raise RuntimeError(f"{name} must transform at least one axis")
    if kind == "c2r":
        if s is None:
            sizes[-1] = 2 * (a.shape[dims[-1]] - 1)
        _check_n(sizes[-1])
    return _result(fn(a, sizes, dims, nm), dt, out, name)


def hfftn(input, s=None, dim=None, norm=None, *, out=None) -> Tensor:
    """``torch.fft.hfftn``: n-D transform of a Hermitian-symmetric signal given by its half (real output)."""
    return _many_h(_hfftn, "hfftn", "c2r", input, s, dim, norm, out)


def ihfftn(input, s=None, dim=None, norm=None, *, out=None) -> Tensor:
    """``torch.fft.ihfftn``: inverse of ``hfftn`` for a real signal (half spectrum along the last of ``dim``)."""
    return _many_h(_ihfftn, "ihfftn", "r2c", input, s, dim, norm, out)


def hfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None) -> Tensor:
    return _many_h(_hfftn, "hfft2", "c2r", input, s, dim, norm, out)


def ihfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None) -> Tensor:
    return _many_h(_ihfftn, "ihfft2", "r2c", input, s, dim, norm, out)


# ------------------------------------------------------------------ frequencies and shifts (real values)
def _freq_tensor(k: np.ndarray, n: int, d, dtype, device, name: str) -> Tensor:
    dt = _dt.get_default_dtype() if dtype is None else _dt.to_dtype(dtype)
    if dt.category < 2:
        raise RuntimeError(f"{name} requires a floating point or complex dtype")
    if dt in _dt.LOW_FLOATS:
        r = (k.astype(np.float32) * np.float32(1.0 / (n * d))).astype(dt.np)
    else:
        # torch: arange in the dtype, times 1 / (n * d) rounded to that dtype
        r = k.astype(dt.np) * dt.np.type(1.0 / (n * d))
    from .devices import device as _device
    t = Tensor._make(np.ascontiguousarray(r.astype(dt.np)), _device("cpu"), dt)
    return t if device is None else t.to(device)


def fftfreq(n: int, d: float = 1.0, *, dtype=None, device=None, layout=None, requires_grad=False,
            out=None) -> Tensor:
    """``torch.fft.fftfreq``: the sample frequencies ``[0, 1, ..., -(n // 2), ..., -1] / (n * d)``."""
    k = np.concatenate([np.arange((n + 1) // 2), np.arange(-(n // 2), 0)]).astype(np.int64)
    t = _freq_tensor(k, n, d, dtype, device, "fftfreq")
    return t if out is None else out.copy_(t)


def rfftfreq(n: int, d: float = 1.0, *, dtype=None, device=None, layout=None, requires_grad=False,
             out=None) -> Tensor:
    """``torch.fft.rfftfreq``: the non-negative sample frequencies ``[0, 1, ..., n // 2] / (n * d)``."""
    t = _freq_tensor(np.arange(n // 2 + 1), n, d, dtype, device, "rfftfreq")
    return t if out is None else out.copy_(t)


def _shift(input, dim, name, inverse):
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
    nd = input.ndim
    if dim is None:
        dims = list(range(nd))
    else:
        dims = [_wrap(d, nd) for d in ([dim] if isinstance(dim, int) else list(dim))]
    if not dims:
        return input.clone()
    sizes = [input.shape[d] for d in dims]
    shifts = [(s + 1) // 2 if inverse else s // 2 for s in sizes]
    return input.roll(shifts, dims)


def fftshift(input, dim=None) -> Tensor:
    """``torch.fft.fftshift``: move the zero frequency to the center (roll by ``size // 2`` along ``dim``)."""
    return _shift(input, dim, "fftshift", False)


def ifftshift(input, dim=None) -> Tensor:
    """``torch.fft.ifftshift``: the inverse of ``fftshift``."""
    return _shift(input, dim, "ifftshift", True)
