"""The OpenCL renderer for elementwise ops and fused groups, and the launcher.

Same scheme as the CPU renderer (``devices/cpu/elementwise.py``): ONE kernel per
(op or fused group, dtypes) serves every layout.  Operands are flat buffers; the
iteration space is collapsed to at most 4 dims (``devices/cpu/layout.collapse``) and
passed with each operand's element strides and offset in one small by-value struct
of int64s (``meta``: ``[n0..n3, (s0..s3, off) per operand]``).  One work-item per
output element; a uniform branch takes the 1-D case (contiguous or broadcast
scalars) without any div/mod.
"""
from __future__ import annotations

import hashlib
import itertools

from ...tensor import dtypes as _dt
from .. import cexpr
from ..cpu import layout
from .exprs import CTYPE

__all__ = ["c_expr", "compile_group", "get_kernel", "launch", "launch_group", "render_group", "run_strided"]


def c_expr(op, dt) -> str | None:
    """The OpenCL C template of elementwise ``op`` computed in DType ``dt``, or None."""
    return cexpr.c_expr(op.name, dt, cexpr.OPENCL)


_kdt = cexpr.kdt
_CT2DT = {"uchar": _dt.uint8, "char": _dt.int8, "short": _dt.int16, "int": _dt.int32, "long": _dt.int64,
          "float": _dt.float32, "double": _dt.float64}


def _cast(expr: str, frm: str, to: str, to_bool: bool) -> str:
    """C text converting ``expr`` (C type ``frm``) to C type ``to`` (``to_bool``: a 0/1 uchar)."""
    return cexpr.cast(expr, _CT2DT[frm], _dt.bool_ if to_bool else _CT2DT[to], cexpr.OPENCL)


def _meta_decl(nops: int) -> tuple[str, str]:
    k = 4 + 5 * nops
    name = f"nee_meta{k}"
    return name, f"#ifndef NEE_META{k}\n#define NEE_META{k}\ntypedef struct {{ long v[{k}]; }} {name};\n#endif\n"


def render_group(kname: str, in_dt: list, out_dt: list, body: list, results: list) -> str:
    """OpenCL C source of a kernel computing ``results`` (C expressions over ``v0..``
    and the temporaries ``body`` defines), one output per result, elementwise.

    ``in_dt`` / ``out_dt`` are DTypes (storage dtypes of inputs/outputs).
    """
    nin, nout = len(in_dt), len(out_dt)
    mname, mdecl = _meta_decl(nin + nout)
    args = [f"__global {CTYPE[d.name]}* o{j}" for j, d in enumerate(out_dt)]
    args += [f"__global const {CTYPE[d.name]}* x{i}" for i, d in enumerate(in_dt)]
    ops = [f"o{j}" for j in range(nout)] + [f"x{i}" for i in range(nin)]
    # No bounds check: an early return stops PoCL from vectorizing across work-items (measured 2.5x slower).
    # The launcher covers n elements exactly instead (see run_strided): whole work-groups, then one group over
    # the last L elements (global offset n - L); fewer than L elements take the general path, where work-item
    # g computes element g mod n.  Recomputed elements are idempotent when no input aliases an output.
    L = [mdecl, f"__kernel void {kname}({', '.join(args)}, const {mname} m) {{",
         "  const long n0 = m.v[0], n1 = m.v[1], n2 = m.v[2], n3 = m.v[3];",
         "  const long g = get_global_id(0);"]
    for v in ops:
        L.append(f"  long p{v};")
    L.append("  if (n0 == 0) {  /* 1-D: n0 = 0 flags it, n3 elements */")
    for k, v in enumerate(ops):
        b = 4 + 5 * k
        L.append(f"    p{v} = m.v[{b + 4}] + g * m.v[{b + 3}];")
    L.append("  } else {")
    L.append("    const long i3 = g % n3; long t = g / n3; const long i2 = t % n2; t /= n2;"
             " const long i1 = t % n1; const long i0 = (t / n1) % n0;")
    for k, v in enumerate(ops):
        b = 4 + 5 * k
        L.append(f"    p{v} = m.v[{b + 4}] + i0 * m.v[{b}] + i1 * m.v[{b + 1}] + i2 * m.v[{b + 2}]"
                 f" + i3 * m.v[{b + 3}];")
    L.append("  }")
    for i, d in enumerate(in_dt):
        L.append(f"  const {CTYPE[d.name]} v{i} = x{i}[px{i}];")
    L += ["  " + b for b in body]
    for j, (d, r) in enumerate(zip(out_dt, results)):
        L.append(f"  o{j}[po{j}] = {r};")
    L.append("}")
    return "\n".join(L) + "\n"


def render_op(kname: str, op, in_dt: list, out_dt) -> str | None:
    """Source of the kernel of one elementwise op, or None when it has no C expression."""
    try:
        res = cexpr.op_result(op, [f"v{i}" for i in range(len(in_dt))], list(in_dt), out_dt, cexpr.OPENCL)
    except NotImplementedError:
        return None
    return render_group(kname, in_dt, [out_dt], [], [res])


def _kname(prefix: str, sig: str) -> str:
    return f"{prefix}_{hashlib.sha1(sig.encode()).hexdigest()[:16]}"


def ew_source(op, in_dt: list, out_dt):
    """(kernel name, source) for one elementwise op, or None when not claimed."""
    kname = _kname(f"ew_{op.name}", f"{op.name}|{','.join(d.name for d in in_dt)}|{out_dt.name}")
    src = render_op(kname, op, in_dt, out_dt)
    return None if src is None else (kname, src)


def get_kernel(backend, op, in_dt: list, out_dt):
    key = (op.name, tuple(in_dt), out_dt)
    k = backend._ew_kernels.get(key)
    if k is None:
        ks = ew_source(op, list(in_dt), out_dt)
        if ks is None:
            raise NotImplementedError(f"opencl: no C expression for {op.name} on {[d.name for d in in_dt]}")
        k = backend.programs.kernel(*ks)
        backend._ew_kernels[key] = k
    return k


# ---------------------------------------------------------------- launching
def _unalias(backend, outs, a):
    """An input sharing storage with an output in another layout is read from a copy
    (work-items run in parallel: ``x += x.T`` must see the values from before)."""
    for o in outs:
        if a.storage is o.storage and a.size:
            if a.shape == o.shape and a.estrides == o.estrides and a.offset == o.offset and len(outs) == 1:
                continue
            c = backend.empty(a.shape, _dt.from_numpy_dtype(a.dtype))
            backend.copy_(c, a)
            return c
    return a


def _broadcast(shape, a):
    if a.shape == tuple(shape):
        return list(a.estrides)
    nd = len(shape)
    off = nd - a.ndim
    out = [0] * nd
    for i in range(a.ndim):
        if a.shape[i] != 1:
            out[off + i] = a.estrides[i]
    return out


def run_strided(backend, kern, outs: list, ins: list) -> None:
    """Launch ``kern`` over ``outs`` (same shape, any layout) reading broadcast ``ins``."""
    shape = outs[0].shape
    n = outs[0].size
    L = backend.local_size(kern)
    if (n < L or n % L) and any(a.storage is o.storage for a in ins for o in outs):
        # in place (an input IS an output): some elements are computed twice (see render_group), so
        # compute into fresh outputs and copy back
        tmp = [backend.empty(o.shape, _dt.from_numpy_dtype(o.dtype)) for o in outs]
        run_strided(backend, kern, tmp, ins)
        for o, t in zip(outs, tmp):
            backend.copy_(o, t)
        return
    arrs = list(outs) + list(ins)
    strides = [list(o.estrides) for o in outs] + [_broadcast(shape, a) for a in ins]
    offs = [a.offset for a in arrs]
    cshape, cstrides = layout.collapse(shape, strides)
    bufs = [a.storage.buffer for a in arrs]
    if len(cshape) > layout.MAX_RANK:
        lead = len(cshape) - layout.MAX_RANK
        for idx in itertools.product(*[range(n) for n in cshape[:lead]]):
            o2 = [off + sum(i * st[d] for d, i in enumerate(idx)) for off, st in zip(offs, cstrides)]
            _launch4(backend, kern, bufs, cshape[lead:], [st[lead:] for st in cstrides], o2)
        return
    _launch4(backend, kern, bufs, cshape, cstrides, offs)


def _launch4(backend, kern, bufs, cshape, cstrides, offs):
    shape4, strides4 = layout.pad4(cshape, cstrides)
    n = shape4[0] * shape4[1] * shape4[2] * shape4[3]
    L = backend.local_size(kern)
    m = layout.meta(shape4, strides4, offs)
    if n >= L and shape4[0] == shape4[1] == shape4[2] == 1:
        m[0] = 0      # the 1-D path
    backend.enqueue_exact(kern, n, bufs, m)


def launch(backend, op, out, ins: list) -> None:
    """Elementwise ``op``: ``out`` (any layout) = op(*ins broadcast to out.shape)."""
    if out.size == 0:
        return
    ins = [_unalias(backend, [out], a) for a in ins]
    kern = get_kernel(backend, op, [_dt.from_numpy_dtype(a.dtype) for a in ins], _dt.from_numpy_dtype(out.dtype))
    run_strided(backend, kern, [out], ins)


# ---------------------------------------------------------------- fused groups (jit)
def compile_group(backend, group):
    """Render and build the kernel of a fused elementwise group (``jit/fusion.py``).

    Returns ``(kernel, source)``; raises NotImplementedError when a member op has no
    C expression for its dtypes (the caller then runs the members one by one)."""
    body, results, in_dt, out_dt, sig = cexpr.group_body(group, cexpr.OPENCL)
    kname = _kname("fused", sig)
    src = render_group(kname, in_dt, out_dt, body, results)
    return backend.programs.kernel(kname, src), src


def launch_group(backend, kern, outs: list, ins: list) -> None:
    if outs[0].size == 0:
        return
    ins = [_unalias(backend, outs, a) for a in ins]
    run_strided(backend, kern, outs, ins)
