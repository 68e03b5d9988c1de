"""The OpenCL kernel table: ``op name -> fn(backend, outs, ins, attrs)``.

Each function may carry ``fn.claims(backend, dtypes) -> None | reason`` (``dtypes``:
input dtypes then output dtypes, as the dispatcher passes them); the backend's
``supports`` calls it after checking that every dtype has storage.
"""
from __future__ import annotations

from . import render

__all__ = ["build_table"]


def _ew(op):
    def run(backend, outs, ins, attrs):
        render.launch(backend, op, outs[0], ins)

    def claims(backend, dtypes):
        from ...ops.elementwise import ew_dtypes
        ins = list(dtypes[:len(dtypes) - op.nout])
        comp, _ = ew_dtypes(op.ew, ins)
        first = op.ew.promote[0] if op.ew.promote else 0
        if render.c_expr(op, render._kdt(comp[first])) is None:
            return f"no OpenCL C expression for {op.name} on {comp[first].name}"
        return None
    run.__name__ = f"cl_ew_{op.name}"
    run.claims = claims
    return run


def build_table(backend) -> dict:
    from ...ops.registry import OPS
    from .exprs import EXPR
    table = {}
    for name, op in OPS.items():
        if op.kind == "elementwise" and hasattr(op, "ew") and name in EXPR:
            table[name] = _ew(op)
    from . import special
    table.update(special.table())
    from . import nn  # conv, pooling, data movement, indexing, scans, norms: kernels shared with CUDA (ckernels)
    table.update(nn.table())
    return table
