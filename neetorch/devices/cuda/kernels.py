"""The CUDA kernel table: ``op name -> fn(backend, outs, ins, attrs)``, and its claims.

* elementwise ops: generated CUDA C (:mod:`.render`, from the shared table in
  ``devices/cexpr.py``); claimed per compute dtype where the table has an expression;
* reductions ``sum mean prod amax amin any all`` over any dims: CuPy's reductions (CUB),
  accumulating float32 in float64 and float16 in float32, integers in int64, then cast
  into the output by the generated ``cast`` kernel;
* ``softmax`` / ``log_softmax``: over contiguous rows (last dim), one generated kernel
  (:mod:`.rows`: a block per row); other layouts CuPy (max, exp, sum); float16 in float32;
  ``safe`` rows of only -inf give zeros;
* ``matmul``: ``cupy.matmul`` (cuBLAS) for float16/32/64, broadcast batch, any strides;
* ``cat`` / ``flip``: the generated ``cast`` kernel writing into views (every dtype);
* ``layer_norm`` / ``rms_norm``: one generated row kernel (:mod:`.rows`) when input, weight and
  bias are contiguous, else CuPy; statistics in float64 like the CPU kernel.
* convolution, pooling, resampling, ``pad``, indexing / scatter, scans, arg reductions, sorting,
  ``einsum``, ``group_norm``, ``tril`` / ``triu`` ...: :mod:`.nn` (its docstring lists them).

Each function may carry ``fn.claims(backend, dtypes) -> None | reason`` (``dtypes``: input
dtypes then output dtypes); :func:`static_claims` derives the ``{op: dtype names}``
table from the same rules without a GPU or CuPy (coverage tables, placement).
"""
from __future__ import annotations

import numpy as np

from ...tensor import dtypes as _dt
from .. import cexpr
from .. import gpu_drivers as gd
from . import rows

__all__ = ["STORAGE", "build_table", "static_claims"]

STORAGE = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
FLOATS = ("float16", "float32", "float64")
REDUCTIONS = ("sum", "mean", "prod", "amax", "amin", "any", "all")


# ---------------------------------------------------------------- elementwise
def _ew(op):
    from . import render

    def run(backend, outs, ins, attrs):
        render.launch(backend, op, outs[0], ins)

    def claims(backend, dtypes):
        return cexpr.claims(op, list(dtypes[:len(dtypes) - op.nout]), cexpr.CUDA)
    run.__name__ = f"cuda_ew_{op.name}"
    run.claims = claims
    return run


# ---------------------------------------------------------------- reductions
def _wrap(backend, r, shape):
    from . import CUDAArray
    return CUDAArray(r.reshape(shape))


def _acc(kind, out_dt):
    if kind in ("sum", "mean", "prod"):
        if out_dt == np.float16:
            return np.float32
        if out_dt.kind == "f":
            return np.float64          # like the OpenCL backend: float32 sums accumulate in double
        return np.int64
    return None


def _reduce(kind):
    def run(backend, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        cp = backend.cp
        dims = tuple(sorted(attrs["dims"]))
        acc = _acc(kind, out.dtype)
        with backend.on():
            xa = x.a
            if kind == "sum":
                r = cp.sum(xa, axis=dims, dtype=acc)
            elif kind == "mean":
                r = cp.mean(xa, axis=dims, dtype=acc)
            elif kind == "prod":
                r = cp.prod(xa, axis=dims, dtype=acc)
            elif kind == "amax":
                r = cp.amax(xa, axis=dims)
            elif kind == "amin":
                r = cp.amin(xa, axis=dims)
            elif kind == "any":
                r = cp.any(xa, axis=dims)
            else:
                r = cp.all(xa, axis=dims)
        backend.copy_(out, _wrap(backend, cp.asarray(r), out.shape))

    def claims(backend, dtypes):
        if kind == "mean" and dtypes[0].category != 2:
            return "mean needs a floating input"
        return None
    run.__name__ = f"cuda_{kind}"
    run.claims = claims
    return run


# ---------------------------------------------------------------- softmax
def _softmax(log):
    def run(backend, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        if x.ndim and rows.contiguous_rows(x, attrs["dim"]) and rows.launch_rows(
                backend, "log_softmax" if log else "softmax", out, x, x.shape[-1], attrs):
            return
        cp = backend.cp
        with backend.on():
            xa = x.a
            d = attrs["dim"] if x.ndim else 0
            if x.ndim == 0:
                xa = xa.reshape(1)
            if xa.dtype == np.float16:
                xa = xa.astype(np.float32)
            m = cp.amax(xa, axis=d, keepdims=True)
            dead = cp.isneginf(m) if attrs.get("safe", False) else None
            if dead is not None:
                m = cp.where(dead, cp.zeros_like(m), m)
            z = xa - m
            s = cp.sum(cp.exp(z), axis=d, keepdims=True)
            r = z - cp.log(s) if log else cp.exp(z) / s
            if dead is not None:
                r = cp.where(dead, cp.zeros_like(r), r)
        backend.copy_(out, _wrap(backend, r, out.shape))

    def claims(backend, dtypes):
        return None if dtypes[0].category == 2 else "softmax needs a floating input"
    run.__name__ = "cuda_log_softmax" if log else "cuda_softmax"
    run.claims = claims
    return run


# ---------------------------------------------------------------- matmul
def _matmul(backend, outs, ins, attrs):
    a, b = ins
    out = outs[0]
    if out.size == 0:
        return
    cp = backend.cp
    direct = (out.flags.c_contiguous and out.dtype == a.dtype
              and out.a.data.mem is not a.a.data.mem and out.a.data.mem is not b.a.data.mem)
    with backend.on():
        if direct:
            cp.matmul(a.a, b.a, out=out.a)
            return
        r = cp.matmul(a.a, b.a)
    backend.copy_(out, _wrap(backend, r, out.shape))


def _matmul_claims(backend, dtypes):
    a, b = dtypes[0], dtypes[1]
    if a is not b:
        return f"matmul on {a.name} x {b.name}"
    if a.name not in FLOATS:
        return f"no cuda matmul for {a.name} (cuBLAS: floating dtypes only)"
    return None


_matmul.claims = _matmul_claims


# ---------------------------------------------------------------- row normalizations
def _norm(rms):
    def run(backend, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        n, eps = attrs["n"], attrs["eps"]
        w, b = gd.norm_params(ins, attrs, rms)
        if rows.launch_rows(backend, "rms_norm" if rms else "layer_norm", out, x, n, attrs, w, b):
            return
        cp = backend.cp
        with backend.on():
            xf = x.a.astype(np.float64).reshape(-1, n)      # float64 statistics, like the CPU kernel
            if rms:
                y = xf / cp.sqrt(cp.mean(xf * xf, axis=1, keepdims=True) + eps)
            else:
                dev = xf - cp.mean(xf, axis=1, keepdims=True)
                y = dev / cp.sqrt(cp.mean(dev * dev, axis=1, keepdims=True) + eps)
            k = 1
            if attrs["has_weight"]:
                y = y * ins[k].a.reshape(-1)
                k += 1
            if not rms and attrs["has_bias"]:
                y = y + ins[k].a.reshape(-1)
        backend.copy_(out, _wrap(backend, y, out.shape))

    def claims(backend, dtypes):
        return None if dtypes[0].category == 2 else f"{'rms_norm' if rms else 'layer_norm'} needs a floating input"
    run.__name__ = "cuda_rms_norm" if rms else "cuda_layer_norm"
    run.claims = claims
    return run


# ---------------------------------------------------------------- the table
def _ew_ops():
    from ...ops.registry import OPS
    return {name: op for name, op in OPS.items()
            if op.kind == "elementwise" and hasattr(op, "ew") and name in cexpr.EXPR}


def build_table() -> dict:
    table = {name: _ew(op) for name, op in _ew_ops().items()}
    table.update({k: _reduce(k) for k in REDUCTIONS})
    table["softmax"] = _softmax(False)
    table["log_softmax"] = _softmax(True)
    table["matmul"] = _matmul
    table["layer_norm"] = _norm(False)
    table["rms_norm"] = _norm(True)
    from . import nn as _nn  # conv, pooling, indexing, sorting, cat / flip, ...: see nn.py (+ ../gpu_drivers.py)
    table.update(_nn.table())
    return table


def static_claims() -> dict[str, frozenset[str]]:
    """``{op: dtype names}``: for elementwise ops, every storage dtype ``d`` such that the op
    on inputs of dtype ``d`` renders (and torch allows it), plus the dtype of its result."""
    from ...ops.registry import Meta
    out = {}
    for name, op in _ew_ops().items():
        ok = set()
        for dn in STORAGE:
            d = _dt.to_dtype(dn)
            ins = [d] * op.ew.nin
            if op.ew.allow is not None and op.ew.allow(d):   # torch refuses the op on this dtype
                continue
            if cexpr.claims(op, ins, cexpr.CUDA) is not None:
                continue
            ok.add(dn)
            ok.add(op.infer([Meta((1,), x) for x in ins], {})[0].dtype.name)
        if ok:
            out[name] = frozenset(ok)
    for k in REDUCTIONS:
        out[k] = frozenset(FLOATS) if k == "mean" else frozenset(STORAGE)
    out["softmax"] = out["log_softmax"] = out["matmul"] = frozenset(FLOATS)
    out["layer_norm"] = out["rms_norm"] = frozenset(FLOATS)
    from . import nn as _nn
    out.update(_nn.static_claims())
    return out
