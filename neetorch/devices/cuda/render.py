"""The CUDA C renderer for elementwise ops and fused groups, and the launcher.

The same scheme as the OpenCL renderer (``devices/opencl/render.py``), from the same
shared C expression table (``devices/cexpr.py``, CUDA dialect): ONE kernel per (op or
fused group, dtypes) serves every layout.  The iteration space is collapsed to at most
4 dims (``devices/cpu/layout.collapse``) and each operand's element strides and offset
travel in one by-value struct of int64s (``meta``: ``[n0..n3, (s0..s3, off) per
operand]``).  One thread per output element with a bounds check (a grid-stride loop
past 2^20 blocks); a uniform branch takes the 1-D case (``n0 == 0`` flags it, ``n3``
elements) without any div/mod, and index math is 32-bit when the element count fits.

Nothing here imports CuPy: the sources are plain text, which is what lets the tests
compile every kernel with ``nvcc`` on a machine without a GPU.
"""
from __future__ import annotations

import functools
import hashlib
import itertools

import numpy as np

from ...tensor import dtypes as _dt
from .. import cexpr
from ..cexpr import CUDA
from ..cpu import layout

__all__ = [
    "compile_group",
    "ew_source",
    "get_kernel",
    "group_source",
    "launch",
    "launch_group",
    "meta_struct",
    "preamble",
    "prepare",
    "render_group",
    "run_strided",
]

CTYPE = CUDA.ctype
BLOCK = 256
MAX_BLOCKS = 1 << 20         # past this the kernel loops (grid-stride)


def preamble() -> str:
    """Helpers every CUDA module starts with (float32 and float64 always: every GPU has fp64; float16 always:
    its storage is 16-bit integers converted by cvt)."""
    return CUDA.preamble(fp64=True, fp16=True)


def _meta_decl(nops: int) -> tuple[str, str]:
    k = 4 + 5 * nops
    name = f"nee_meta{k}"
    return name, f"#ifndef NEE_META{k}\n#define NEE_META{k}\ntypedef struct {{ llong v[{k}]; }} {name};\n#endif\n"


@functools.cache
def meta_struct(nops: int):
    """The numpy structured dtype matching ``nee_meta{4 + 5 * nops}`` (passed by value)."""
    return np.dtype({"names": ["v"], "formats": [(np.int64, (4 + 5 * nops,))]})


def render_group(kname: str, in_dt: list, out_dt: list, body: list, results: list) -> str:
    """CUDA C source of a kernel computing ``results`` (C expressions over ``v0..`` and the
    temporaries ``body`` defines), one output per result, elementwise.  ``in_dt`` /
    ``out_dt`` are the storage DTypes of inputs/outputs."""
    nin, nout = len(in_dt), len(out_dt)
    mname, mdecl = _meta_decl(nin + nout)
    args = [f"{CTYPE[d.name]}* __restrict__ o{j}" for j, d in enumerate(out_dt)]
    args += [f"const {CTYPE[d.name]}* __restrict__ x{i}" for i, d in enumerate(in_dt)]
    ops = [f"o{j}" for j in range(nout)] + [f"x{i}" for i in range(nin)]
    L = [mdecl, f'extern "C" __global__ void {kname}({", ".join(args)}, const {mname} m) {{',
         "  const llong n0 = m.v[0], n1 = m.v[1], n2 = m.v[2], n3 = m.v[3];",
         "  const llong n = n0 == 0 ? n3 : n0 * n1 * n2 * n3;",
         "  const llong step = (llong)gridDim.x * blockDim.x;",
         "  for (llong g = (llong)blockIdx.x * blockDim.x + threadIdx.x; g < n; g += step) {"]
    for v in ops:
        L.append(f"    llong p{v};")
    L.append("    if (n0 == 0) {  /* 1-D */")
    for k, v in enumerate(ops):
        b = 4 + 5 * k
        L.append(f"      p{v} = m.v[{b + 4}] + g * m.v[{b + 3}];")
    L.append("    } else {")
    L.append("      llong i0, i1, i2, i3;")
    L.append("      if (n <= 0xffffffffLL) {  /* 32-bit div/mod: 64-bit division is emulated on the GPU */")
    L.append("        const uint u = (uint)g, m3 = (uint)n3, m2 = (uint)n2, m1 = (uint)n1;")
    L.append("        uint t = u / m3; i3 = u - t * m3; uint t2 = t / m2; i2 = t - t2 * m2;"
             " t = t2 / m1; i1 = t2 - t * m1; i0 = t;")
    L.append("      } else {")
    L.append("        i3 = g % n3; llong t = g / n3; i2 = t % n2; t /= n2; i1 = t % n1; i0 = t / n1;")
    L.append("      }")
    for k, v in enumerate(ops):
        b = 4 + 5 * k
        L.append(f"      p{v} = m.v[{b + 4}] + i0 * m.v[{b}] + i1 * m.v[{b + 1}] + i2 * m.v[{b + 2}]"
                 f" + i3 * m.v[{b + 3}];")
    L.append("    }")
    for i, d in enumerate(in_dt):
        L.append(f"    const {CTYPE[d.name]} v{i} = x{i}[px{i}];")
    L += ["    " + b for b in body]
    for j, r in enumerate(results):
        L.append(f"    o{j}[po{j}] = {r};")
    L.append("  }")
    L.append("}")
    return "\n".join(L) + "\n"


def _kname(prefix: str, sig: str) -> str:
    return f"{prefix}_{hashlib.sha1(sig.encode()).hexdigest()[:16]}"


def ew_source(op, in_dt: list, out_dt):
    """(kernel name, source) for one elementwise op, or None when not claimed."""
    try:
        res = cexpr.op_result(op, [f"v{i}" for i in range(len(in_dt))], list(in_dt), out_dt, CUDA)
    except NotImplementedError:
        return None
    kname = _kname(f"ew_{op.name}", f"{op.name}|{','.join(d.name for d in in_dt)}|{out_dt.name}")
    return kname, render_group(kname, list(in_dt), [out_dt], [], [res])


def group_source(group):
    """(kernel name, source) of a fused elementwise group; NotImplementedError when a member
    has no CUDA C expression."""
    body, results, in_dt, out_dt, sig = cexpr.group_body(group, CUDA)
    kname = _kname("fused", sig)
    return kname, render_group(kname, in_dt, out_dt, body, results)


# ---------------------------------------------------------------- kernels (needs CuPy)
def get_kernel(backend, op, in_dt: list, out_dt):
    key = (op.name, tuple(in_dt), out_dt)
    k = backend._ew_kernels.get(key)
    if k is None:
        ks = ew_source(op, list(in_dt), out_dt)
        if ks is None:
            raise NotImplementedError(f"cuda: no C expression for {op.name} on {[d.name for d in in_dt]}")
        k = backend.modules.kernel(*ks)
        backend._ew_kernels[key] = k
    return k


def _same_storage(a, b) -> bool:
    return a.a.data.mem is b.a.data.mem


def _unalias(backend, outs, a):
    """An input sharing storage with an output in another layout is read from a copy
    (threads run in parallel: ``x += x.T`` must see the values from before)."""
    for o in outs:
        if a.size and _same_storage(a, o):
            if (a.shape == o.shape and a.strides == o.strides and a.a.data.ptr == o.a.data.ptr
                    and len(outs) == 1):
                continue
            c = backend.empty(a.shape, _dt.from_numpy_dtype(a.dtype))
            backend.copy_(c, a)
            return c
    return a


def _broadcast(shape, a):
    st = a.estrides
    if a.shape == tuple(shape):
        return list(st)
    nd = len(shape)
    off = nd - a.ndim
    out = [0] * nd
    for i in range(a.ndim):
        if a.shape[i] != 1:
            out[off + i] = st[i]
    return out


def run_strided(backend, kern, outs: list, ins: list) -> None:
    """Launch ``kern`` over ``outs`` (same shape, any layout) reading broadcast ``ins``.  The launch
    metadata depends only on the shapes, byte strides and item sizes (CuPy views point at their first
    element): it is worked out once per layout and kept (``backend.layouts``)."""
    shape = outs[0].shape
    arrs = list(outs) + list(ins)
    key = (shape, tuple((a.a.shape, a.a.strides, a.a.itemsize) for a in arrs))
    hit = backend.layouts.get(key)
    if hit is not None:
        backend.launch(kern, hit[0], [a.a for a in arrs], hit[1])
        return
    strides = [list(o.estrides) for o in outs] + [_broadcast(shape, a) for a in ins]
    cshape, cstrides = layout.collapse(shape, strides)
    ptrs = [a.a for a in arrs]          # each view's first element; offsets below are relative to it
    offs = [0] * len(arrs)
    if len(cshape) > layout.MAX_RANK:
        lead = len(cshape) - layout.MAX_RANK
        for idx in itertools.product(*[range(n) for n in cshape[:lead]]):
            o2 = [sum(i * st[d] for d, i in enumerate(idx)) for st in cstrides]
            _launch4(backend, kern, ptrs, cshape[lead:], [st[lead:] for st in cstrides], o2)
        return
    n, mv = _launch4(backend, kern, ptrs, cshape, cstrides, offs)
    if len(backend.layouts) >= 4096:
        backend.layouts.clear()
    backend.layouts[key] = (n, mv)


def _launch4(backend, kern, ptrs, cshape, cstrides, offs):
    shape4, strides4 = layout.pad4(cshape, cstrides)
    n = shape4[0] * shape4[1] * shape4[2] * shape4[3]
    m = layout.meta(shape4, strides4, offs)
    if shape4[0] == shape4[1] == shape4[2] == 1:
        m[0] = 0      # the 1-D path
    mv = m.view(meta_struct(len(ptrs)))
    backend.launch(kern, n, ptrs, mv)
    return n, mv


def launch(backend, op, out, ins: list) -> None:
    """Elementwise ``op``: ``out`` (any layout) = op(*ins broadcast to out.shape)."""
    if out.size == 0:
        return
    ins = [_unalias(backend, [out], a) for a in ins]
    kern = get_kernel(backend, op, [_dt.from_numpy_dtype(a.dtype) for a in ins], _dt.from_numpy_dtype(out.dtype))
    run_strided(backend, kern, [out], ins)


def prepare(backend, op, args, ins, meta):
    """A launch closure for eager ``op`` on arguments with these dtypes/shapes/strides (what
    ``ops.elementwise.apply`` caches per layout: ``Backend.prepare_elementwise``).  The kernel, the
    collapsed layout, the by-value meta struct and the grid are worked out once (CuPy views point at
    their first element, so the meta holds no offsets and is the same for every call); the closure
    allocates the output and launches.  None for cases left to the general path."""
    from ...ops import registry
    from ...ops.elementwise import _scalar_tensor
    from ...tensor.tensor import Tensor
    from ..common import prepared_layout
    from . import CUDAArray
    odt = meta.dtype
    p = prepared_layout(backend.device, args, ins, meta, _broadcast)
    if p is None:
        return None
    try:
        kern = get_kernel(backend, op, [_dt.from_numpy_dtype(a.dtype) for a in p.datas], odt)
    except NotImplementedError:
        return None
    backend._check_dtype(odt.np, op.name)
    shape4, strides4 = layout.pad4(p.cshape, p.cstrides)
    m = layout.meta(shape4, strides4, [0] * (1 + len(p.datas)))
    if shape4[0] == shape4[1] == shape4[2] == 1:
        m[0] = 0      # the 1-D path
    mv = m.view(meta_struct(1 + len(p.datas)))
    grid, block = (min((p.n + BLOCK - 1) // BLOCK, MAX_BLOCKS),), (BLOCK,)
    shape, kinds, out_sig = p.shape, p.kinds, p.out_sig
    device, make, on, cp_empty, onp = backend.device, Tensor._make, backend.on(), backend.cp.empty, odt.np
    prof_active = registry._profiler._active

    def plan(args):
        ts = [a if k is None else _scalar_tensor(a, k, device) for a, k in zip(args, kinds)]
        if prof_active[0] is not None or registry._TIMED:    # the general path records the kernel
            return registry.run(op, ts, {}, [meta])[0]
        with on:
            o = cp_empty(shape, onp)
            kern(grid, block, (o, *[t._data.a for t in ts], mv))
        backend.launches += 1
        backend._track()
        t = make(CUDAArray(o), device, odt)
        t._sig = out_sig
        return t
    return plan


def compile_group(backend, group):
    """Render and build the kernel of a fused elementwise group: ``(kernel, source)``."""
    kname, src = group_source(group)
    return backend.modules.kernel(kname, src), src


def launch_group(backend, kern, outs: list, ins: list) -> None:
    if outs[0].size == 0:
        return
    ins = [_unalias(backend, outs, a) for a in ins]
    run_strided(backend, kern, outs, ins)
