"""Row kernels for the CUDA backend: softmax, log_softmax, layer_norm, rms_norm as ONE kernel
each, one thread block per row (grid-stride over rows), for rows that are contiguous (the
reduced dim is the last one and the input is C-contiguous, the common case); other layouts
keep the CuPy path in :mod:`.kernels`.

A block reduces its row with warp shuffles and a 32-slot shared array, then reads the row
again (L1/L2-resident) to write the result: 2 passes over memory for softmax, 3 for layer_norm,
instead of the 5-8 kernels and temporaries of the CuPy composition.  Accumulation: float16 in
float32; float32 softmax in float32 (like torch); layer_norm / rms_norm statistics in float64 for
every dtype (like the CPU kernel, so devices agree to rounding).

The block reduction works for any block size that is a multiple of 32 — and for a block of ONE
thread (no shuffle then), which is what the g++ emulation (:mod:`.emulate`, threads run one after another, so no
barrier can work) launches: the same source is then checked for its semantics without a GPU.

Nothing here imports CuPy: sources are plain text (the nvcc test compiles them).
"""
from __future__ import annotations

import numpy as np

from ...tensor import dtypes as _dt
from .. import ckernels as ck
from ..cexpr import CUDA

__all__ = ["ROW_OPS", "contiguous_rows", "launch_rows", "row_source"]

ROW_OPS = ("softmax", "log_softmax", "layer_norm", "rms_norm")
_ACC = {"float16": "float", "float32": "float", "float64": "double"}
_BLOCK_HELPERS = ck.CUDA_BLOCK_HELPERS      # shared with the OpenCL dialect's kernels (devices/ckernels.py)


def _io(dn: str):
    """(storage C type, load(expr) -> acc, store(expr) -> storage) for dtype name ``dn``."""
    if dn == "float16":
        return "nhalf", (lambda e: f"nee_h2f({e})"), (lambda e: f"nee_f2h((float)({e}))")
    ct = CUDA.ctype[dn]
    return ct, (lambda e: f"({_ACC[dn]})({e})"), (lambda e: f"({ct})({e})")


def kernel_name(op: str, dn: str) -> str:
    return f"nee_row_{op}_{dn}"


def row_source(op: str, dn: str) -> str:
    """CUDA C of the row kernel ``op`` on storage dtype ``dn`` (float16/32/64).

    softmax/log_softmax: ``(const T* x, T* y, llong rows, llong n, int safe)``;
    layer_norm/rms_norm: ``(const T* x, const T* w, const T* b, T* y, llong rows, llong n,
    double eps, int has_w, int has_b)`` (``w``/``b`` contiguous, length ``n``; ignored when absent).
    """
    if op not in ROW_OPS or dn not in _ACC:
        raise ValueError(f"cuda rows: no {op} kernel for {dn}")
    T, ld, st = _io(dn)
    A = _ACC[dn]
    ex, lg = ("expf", "logf") if A == "float" else ("exp", "log")
    name = kernel_name(op, dn)
    L = [_BLOCK_HELPERS]
    if op in ("softmax", "log_softmax"):
        L += [f'extern "C" __global__ void {name}(const {T}* __restrict__ x, {T}* __restrict__ y, '
              f"const llong rows, const llong n, const int safe) {{",
              f"  __shared__ {A} sh[32];",
              "  for (llong r = blockIdx.x; r < rows; r += gridDim.x) {",
              f"    const {T}* xr = x + r * n; {T}* yr = y + r * n;",
              f"    {A} m = ({A})(-INFINITY);",
              f"    for (llong i = threadIdx.x; i < n; i += blockDim.x) m = fmax(m, {ld('xr[i]')});",
              "    m = nee_bmax(m, sh);",
              "    if (safe && isinf(m) && m < 0) {   /* a row of only -inf (masked out): zeros */",
              f"      for (llong i = threadIdx.x; i < n; i += blockDim.x) yr[i] = {st('0')};",
              "      continue;",
              "    }",
              f"    {A} s = 0;",
              f"    for (llong i = threadIdx.x; i < n; i += blockDim.x) s += {ex}({ld('xr[i]')} - m);",
              "    s = nee_bsum(s, sh);"]
        if op == "log_softmax":
            L += [f"    const {A} ls = m + {lg}(s);",
                  f"    for (llong i = threadIdx.x; i < n; i += blockDim.x) yr[i] = {st(ld('xr[i]') + ' - ls')};"]
        else:
            L += [f"    const {A} inv = ({A})1 / s;",
                  f"    for (llong i = threadIdx.x; i < n; i += blockDim.x) "
                  f"yr[i] = {st(ex + '(' + ld('xr[i]') + ' - m) * inv')};"]
        L += ["  }", "}"]
    else:
        # layer_norm / rms_norm: the dialect-neutral source (the OpenCL backend runs the same kernel)
        return _BLOCK_HELPERS + ck.norm_rows_source(ck.CUDA, op, dn, name)
    return "\n".join(L) + "\n"


def all_sources() -> list[tuple[str, str]]:
    """Every row kernel (for the nvcc test and ``precompile``)."""
    return [(kernel_name(op, dn), row_source(op, dn)) for op in ROW_OPS for dn in _ACC]


def contiguous_rows(x, dim) -> bool:
    """True when ``x``'s reduced dim is its last and its rows are contiguous in memory."""
    return (x.ndim >= 1 and dim % x.ndim == x.ndim - 1 and x.a.flags.c_contiguous)


def _block(backend, n: int) -> int:
    if backend.emulated:
        return 1                   # the emulation runs threads one after another: no barrier can work
    b = 32
    while b < n and b < 1024:
        b *= 2
    return min(b, 256 if n <= 4096 else 512)


def launch_rows(backend, op: str, out, x, n: int, attrs: dict, weight=None, bias=None) -> bool:
    """Run row kernel ``op`` on contiguous rows of length ``n``; False (nothing done) when the
    arrays do not fit this kernel (the caller then takes the general path)."""
    dn = _dt.from_numpy_dtype(x.dtype).name
    if (dn not in _ACC or out.dtype != x.dtype or not x.a.flags.c_contiguous or not out.a.flags.c_contiguous
            or n <= 0 or x.size % n):
        return False
    for p in (weight, bias):
        if p is not None and (p.dtype != x.dtype or not p.a.flags.c_contiguous or p.size != n):
            return False
    rows = x.size // n
    if rows == 0:
        return True
    name = kernel_name(op, dn)
    kern = backend.modules.kernel(name, row_source(op, dn))
    grid = (min(rows, 1 << 20),)
    blk = (_block(backend, n),)
    with backend.on():
        if op in ("softmax", "log_softmax"):
            kern(grid, blk, (x.a, out.a, np.int64(rows), np.int64(n), np.int32(bool(attrs.get("safe", False)))))
        else:
            w = weight.a if weight is not None else x.a
            b = bias.a if bias is not None else x.a
            kern(grid, blk, (x.a, w, b, out.a, np.int64(rows), np.int64(n), np.float64(attrs["eps"]),
                             np.int32(weight is not None), np.int32(bias is not None)))
    backend.launches += 1
    return True
