"""``repr(tensor)`` formatted the way PyTorch prints (a port of torch/_tensor_str.py's rules)."""
from __future__ import annotations

import math

import numpy as np

PRECISION = 4
THRESHOLD = 1000
EDGEITEMS = 3
LINEWIDTH = 80


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
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


SCI_MODE = None


class _Formatter:
    def __init__(self, a: np.ndarray):
        self.floating = a.dtype.kind == "f"
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        vals = a.reshape(-1)
        if not self.floating:
            for v in vals:
                self.max_width = max(self.max_width, len(str(v.item() if a.dtype.kind != "b" else bool(v))))
            return
        finite = vals[np.isfinite(vals)].astype(np.float64)
        if finite.size == 0:
            for v in vals:
                self.max_width = max(self.max_width, len(_special(v)))
            return
        abs_ = np.abs(finite)
        nonzero = abs_[abs_ != 0]
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        if self.int_mode:
            if nonzero.size and (nonzero.max() / nonzero.min() > 1000.0 or nonzero.max() > 1e8):
                self.sci_mode = True
                for v in finite:
                    self.max_width = max(self.max_width, len(f"{v:.{PRECISION}e}"))
            else:
                for v in finite:
                    self.max_width = max(self.max_width, len(f"{v:.0f}."))
        else:
            if nonzero.size and (nonzero.max() / nonzero.min() > 1000.0 or nonzero.max() > 1e8
                                 or nonzero.min() < 1e-4):
                self.sci_mode = True
                for v in finite:
                    self.max_width = max(self.max_width, len(f"{v:.{PRECISION}e}"))
            else:
                for v in finite:
                    self.max_width = max(self.max_width, len(f"{v:.{PRECISION}f}"))
        if SCI_MODE is not None:
            self.sci_mode = SCI_MODE
        for v in vals[~np.isfinite(vals)]:
            self.max_width = max(self.max_width, len(_special(v)))

    def width(self):
        return self.max_width

    def format(self, v) -> str:
        if self.floating:
            fv = float(v)
            if not math.isfinite(fv):
                ret = _special(fv)
            elif self.sci_mode:
                ret = f"{fv:{self.max_width}.{PRECISION}e}"
            elif self.int_mode:
                ret = f"{fv:.0f}"
                if not (math.isinf(fv) or math.isnan(fv)):
                    ret += "."
            else:
                ret = f"{fv:.{PRECISION}f}"
        else:
            ret = str(bool(v)) if isinstance(v, (bool, np.bool_)) else str(int(v))
        return (self.max_width - len(ret)) * " " + ret


def _special(v) -> str:
    v = float(v)
    return "nan" if v != v else ("inf" if v > 0 else "-inf")


def _summarize(a: np.ndarray) -> np.ndarray:
    if a.ndim == 0:
        return a
    if a.shape[0] > 2 * EDGEITEMS:
        a = np.concatenate([a[:EDGEITEMS], a[-EDGEITEMS:]])
    if a.ndim == 1:
        return a
    return np.stack([_summarize(x) for x in a])


def _tensor_str(a: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    dim = a.ndim
    if dim == 0:
        return fmt.format(a.item())
    if dim == 1:
        elems = [fmt.format(x) for x in a]
        if summarize and a.shape[0] > 2 * EDGEITEMS:
            elems = elems[:EDGEITEMS] + [" ..."] + elems[-EDGEITEMS:]
        per_line = max(math.floor((LINEWIDTH - indent) / (fmt.width() + 2)), 1)
        lines = [", ".join(elems[i:i + per_line]) for i in range(0, len(elems), per_line)]
        return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"
    if summarize and a.shape[0] > 2 * EDGEITEMS:
        slices = ([_tensor_str(a[i], indent + 1, summarize, fmt) for i in range(EDGEITEMS)] + ["..."] +
                  [_tensor_str(a[i], indent + 1, summarize, fmt) for i in range(a.shape[0] - EDGEITEMS, a.shape[0])])
    else:
        slices = [_tensor_str(a[i], indent + 1, summarize, fmt) for i in range(a.shape[0])]
    return "[" + ("," + "\n" * (dim - 1) + " " * (indent + 1)).join(slices) + "]"


def tensor_repr(t) -> str:
    from .dtypes import get_default_dtype, int64, bool_
    a = t.numpy(force=True)
    prefix = "tensor("
    indent = len(prefix)
    suffixes = []
    if t.device.type != "cpu":
        suffixes.append(f"device='{t.device}'")
    summarize = a.size > THRESHOLD
    if a.size == 0 and a.ndim != 1:
        body = "[]"
        suffixes.append(f"size={tuple(a.shape)}")
    elif a.size == 0:
        body = "[]"
    else:
        shown = _summarize(a) if summarize else a
        fmt = _Formatter(shown.astype(np.float64) if a.dtype == np.float16 else shown)
        body = _tensor_str(a, indent, summarize, fmt)
    default = t.dtype in (get_default_dtype(), int64, bool_)
    if not default or (a.size == 0 and t.dtype is not get_default_dtype() and t.dtype is not int64):
        if not (a.size == 0 and t.dtype in (get_default_dtype(), int64)):
            suffixes.append(f"dtype=neetorch.{t.dtype.name}")
    if getattr(t, "requires_grad", False) and type(t).__name__ != "Parameter":
        suffixes.append("requires_grad=True")
    s = prefix + body
    for suf in suffixes:
        s += ", " + suf
    return s + ")"
