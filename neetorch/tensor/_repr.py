"""``repr(tensor)`` formatted the way PyTorch prints (a port of torch/_tensor_str.py's rules).

The formatter looks only at the nonzero finite values (like torch): they decide
integer mode, scientific mode and the column width; ``nan``/``inf``/zeros are then
padded to that width.  Suffixes (``dtype=``, ``size=``, ``device=``) wrap onto a new
line when they would overflow the line width, as in torch.
"""
from __future__ import annotations

import math

import numpy as np

PRECISION = 4
THRESHOLD = 1000
EDGEITEMS = 3
LINEWIDTH = 80
SCI_MODE = None


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
    """``torch.set_printoptions``: ``sci_mode`` is always set (None = automatic)."""
    global PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH, SCI_MODE
    if profile == "default":
        PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH = 4, 1000, 3, 80
    elif profile == "short":
        PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH = 2, 1000, 2, 80
    elif profile == "full":
        PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH = 4, math.inf, 3, 80
    if precision is not None:
        PRECISION = precision
    if threshold is not None:
        THRESHOLD = threshold
    if edgeitems is not None:
        EDGEITEMS = edgeitems
    if linewidth is not None:
        LINEWIDTH = linewidth
    SCI_MODE = sci_mode


class _Formatter:
    def __init__(self, a: np.ndarray):
        self.floating = a.dtype.kind == "f"
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        vals = a.reshape(-1)
        if not self.floating:
            for v in vals.tolist():
                self.max_width = max(self.max_width, len(f"{v}"))
            return
        nz = vals[np.isfinite(vals) & (vals != 0)]
        if nz.size == 0:
            return
        nz64 = nz.astype(np.float64)
        abs_ = np.abs(nz64)
        mn, mx = abs_.min(), abs_.max()
        self.int_mode = bool(np.all(nz == np.ceil(nz)))
        self.sci_mode = (mx / mn > 1000.0 or mx > 1.0e8 or mn < 1.0e-4) if SCI_MODE is None else SCI_MODE
        values = nz64.tolist()
        if self.sci_mode:
            w = max(len(f"{v:.{PRECISION}e}") for v in values)
        elif self.int_mode:
            w = max(len(f"{v:.0f}") + 1 for v in values)
        else:
            w = max(len(f"{v:.{PRECISION}f}") for v in values)
        self.max_width = max(self.max_width, w)

    def width(self):
        return self.max_width

    def format(self, v) -> str:
        if self.floating:
            v = float(v)
            if self.sci_mode:
                ret = f"{v:{self.max_width}.{PRECISION}e}"
            elif self.int_mode:
                ret = f"{v:.0f}"
                if not (math.isinf(v) or math.isnan(v)):
                    ret += "."
            else:
                ret = f"{v:.{PRECISION}f}"
        else:
            ret = f"{v}"
        return (self.max_width - len(ret)) * " " + ret


class _ComplexFormatter:
    """torch's pair of formatters for complex values: real and imaginary parts each get their own."""

    def __init__(self, a: np.ndarray):
        self.re, self.im = _Formatter(np.ascontiguousarray(a.real)), _Formatter(np.ascontiguousarray(a.imag))

    def width(self):
        return self.re.width() + self.im.width() + 1

    def format(self, v) -> str:
        v = complex(v)
        real_str = self.re.format(v.real)
        imag_str = (self.im.format(v.imag) + "j").lstrip()
        return real_str + imag_str if imag_str[0] in "+-" else real_str + "+" + imag_str


def _widen(a: np.ndarray) -> np.ndarray:
    from .dtypes import widen
    return widen(a) if a.dtype.kind == "V" else a


def _make_fmt(a: np.ndarray):
    return _ComplexFormatter(a) if a.dtype.kind == "c" else _Formatter(a)


def _summarize(a: np.ndarray) -> np.ndarray:
    """torch's get_summarized_data: the edge items of every dim."""
    if a.ndim == 0:
        return a
    if a.shape[0] > 2 * EDGEITEMS:
        a = np.concatenate([a[:EDGEITEMS], a[a.shape[0] - EDGEITEMS:]]) if EDGEITEMS else a[:0]
    if a.ndim == 1:
        return a
    if a.shape[0] == 0:
        return a
    return np.stack([_summarize(x) for x in a])


def _vector_str(a: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    element_length = fmt.width() + 2
    per_line = max(1, math.floor((LINEWIDTH - indent) / element_length))
    if summarize and not EDGEITEMS:
        data = ["..."]
    elif summarize and a.shape[0] > 2 * EDGEITEMS:
        data = ([fmt.format(v) for v in a[:EDGEITEMS].tolist()] + [" ..."] +
                [fmt.format(v) for v in a[a.shape[0] - EDGEITEMS:].tolist()])
    else:
        data = [fmt.format(v) for v in a.tolist()]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"


def _tensor_str(a: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    dim = a.ndim
    if dim == 0:
        return fmt.format(a.item())
    if dim == 1:
        return _vector_str(a, indent, summarize, fmt)
    n = a.shape[0]
    if summarize and n > 2 * EDGEITEMS:
        slices = ([_tensor_str(a[i], indent + 1, summarize, fmt) for i in range(EDGEITEMS)] + ["..."] +
                  [_tensor_str(a[i], indent + 1, summarize, fmt) for i in range(n - EDGEITEMS, n)])
    else:
        slices = [_tensor_str(a[i], indent + 1, summarize, fmt) for i in range(n)]
    return "[" + ("," + "\n" * (dim - 1) + " " * (indent + 1)).join(slices) + "]"


def _add_suffixes(tensor_str: str, suffixes, indent: int) -> str:
    out = [tensor_str]
    last_line_len = len(tensor_str) - tensor_str.rfind("\n") + 1
    for suffix in suffixes:
        if last_line_len + len(suffix) + 2 > LINEWIDTH:
            out.append(",\n" + " " * indent + suffix)
            last_line_len = indent + len(suffix)
        else:
            out.append(", " + suffix)
            last_line_len += len(suffix) + 2
    out.append(")")
    return "".join(out)


def tensor_str(t) -> str:
    """The bracketed body only (no ``tensor(`` prefix or suffixes)."""
    a = _widen(t._host())   # (bfloat16 prints through float32, like float16 values)
    if a.size == 0:
        return "[]"
    summarize = a.size > THRESHOLD
    fmt = _make_fmt(_summarize(a) if summarize else a)
    return _tensor_str(a, 7, summarize, fmt)


def tensor_repr(t) -> str:
    from .dtypes import get_default_dtype, int64, bool_, default_complex_dtype
    from .creation import get_default_device
    a = _widen(t._host())   # (bfloat16 prints through float32, like float16 values)
    prefix = "tensor("
    indent = len(prefix)
    suffixes = []
    if t.device.type != get_default_device().type:
        suffixes.append(f"device='{t.device}'")
    if a.size == 0:
        if a.ndim != 1:
            suffixes.append(f"size={tuple(a.shape)}")
        if t.dtype is not get_default_dtype():
            suffixes.append(f"dtype=neetorch.{t.dtype.name}")
        body = "[]"
    else:
        if t.dtype not in (get_default_dtype(), int64, bool_, default_complex_dtype()):
            suffixes.append(f"dtype=neetorch.{t.dtype.name}")
        summarize = a.size > THRESHOLD
        fmt = _make_fmt(_summarize(a) if summarize else a)
        body = _tensor_str(a, indent, summarize, fmt)
    if getattr(t, "requires_grad", False):
        suffixes.append("requires_grad=True")
    return _add_suffixes(prefix + body, suffixes, indent)
