"""The OpenCL renderer for elementwise ops and fused groups, and the launcher.

Same scheme as the CPU renderer (``devices/cpu/elementwise.py``): one computation per
(op or fused group, dtypes) serves every layout.  Operands are flat buffers; the
iteration space is collapsed to at most 4 dims (``devices/cpu/layout.collapse``) and
passed with each operand's element strides and offset in one small by-value struct
of int64s (``meta``: ``[n0..n3, (s0..s3, off) per operand]``).  One work-item per
output element, two kernels per computation (see ``render_group``): an n-d one (3-D
range, no index division; variants with compile-time innermost strides 0/1, built on
first use) and a flat one (1-D range, 32-bit index math) for short innermost dims.
``prepare`` caches a launch closure per layout for the eager path.
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
          "float": _dt.float32, "double": _dt.float64, "half": _dt.float16}


def _cast(expr: str, frm: str, to: str, to_bool: bool) -> str:
    """C text converting ``expr`` (C type ``frm``) to C type ``to`` (``to_bool``: a 0/1 uchar)."""
    return cexpr.cast(expr, _CT2DT[frm], _dt.bool_ if to_bool else _CT2DT[to], cexpr.OPENCL)


def _meta_decl(nops: int) -> tuple[str, str]:
    k = 4 + 5 * nops
    name = f"nee_meta{k}"
    return name, f"#ifndef NEE_META{k}\n#define NEE_META{k}\ntypedef struct {{ long v[{k}]; }} {name};\n#endif\n"


_RENDERED: dict = {}   # kernel name -> render_group's arguments (to render inner-stride variants later)


def render_group(kname: str, in_dt: list, out_dt: list, body: list, results: list, code: str | None = None) -> str:
    """OpenCL C source of a kernel computing ``results`` (C expressions over ``v0..``
    and the temporaries ``body`` defines), one output per result, elementwise.

    ``in_dt`` / ``out_dt`` are DTypes (storage dtypes of inputs/outputs).  Without ``code``: kernels
    ``kname`` (n-d, every innermost stride 1) and ``kname_flat``; with ``code`` (one of ``0 1 g`` per
    operand, outputs first: its innermost stride is 0, 1 or any), only the n-d kernel ``kname_v<code>``.
    """
    _RENDERED.setdefault(kname, (list(in_dt), list(out_dt), list(body), list(results)))
    nin, nout = len(in_dt), len(out_dt)
    mname, mdecl = _meta_decl(nin + nout)
    args = [f"__global {CTYPE[d.name]}* o{j}" for j, d in enumerate(out_dt)]
    args += [f"__global const {CTYPE[d.name]}* x{i}" for i, d in enumerate(in_dt)]
    ops = [f"o{j}" for j in range(nout)] + [f"x{i}" for i in range(nin)]
    # No bounds check: an early return stops PoCL from vectorizing across work-items (measured 2.5x slower).
    # The launcher (_launch4) covers the elements exactly instead, with one of two kernels:
    # * ``kname`` (n-d; collapsed rank <= 3): a 3-D range (n3, n2, n1), so a work-item's index needs no
    #   division (work-groups of shape (L, 1, 1)); dim 0 is covered by whole work-groups, then one group
    #   over its last L ids (global offset n3 - L);
    # * ``kname_flat`` (a small innermost dim, rank 4, or fewer than L elements): a 1-D range, work-item g
    #   computes element g mod n, index math in 32 bits (the launcher splits larger ranges).
    # Two kernels, not a uniform branch in one: with the branch PoCL stops vectorizing bodies like exp's
    # (measured 7x slower).  Recomputed elements are idempotent when no input aliases an output (see
    # run_strided).
    nd = ["  const long i3 = get_global_id(0), i2 = get_global_id(1), i1 = get_global_id(2), i0 = 0;"]
    flat = ["  const uint g = (uint)get_global_id(0), u3 = (uint)m.v[3], u2 = (uint)m.v[2], u1 = (uint)m.v[1];",
            "  const uint a = g / u3, b = a / u2, c = b / u1;",
            "  const long i3 = g - a * u3, i2 = a - b * u2, i1 = b - c * u1, i0 = c % (uint)m.v[0];"]
    # The innermost stride is a compile-time 1 or 0 where the code says so: with runtime strides, LLVM
    # vectorizes only when ALL of them are 1 (it versions the loop on that), so a broadcast scalar or
    # column (stride 0) made the whole kernel scalar (x * col: 10x slower).
    if code is None:
        idx = {"": (nd, "1" * len(ops)), "_flat": (flat, "g" * len(ops))}
    else:
        idx = {f"_v{code}": (nd, code)}
    L = [mdecl]
    for suffix, (lines, cd) in idx.items():
        L.append(f"__kernel void {kname}{suffix}({', '.join(args)}, const {mname} m) {{")
        L += lines
        for k, v in enumerate(ops):
            b = 4 + 5 * k
            inner = {"1": " + i3", "0": "", "g": f" + i3 * m.v[{b + 3}]"}[cd[k]]
            L.append(f"  const long p{v} = m.v[{b + 4}] + i0 * m.v[{b}] + i1 * m.v[{b + 1}] + i2 * m.v[{b + 2}]"
                     f"{inner};")
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
    arrs = list(outs) + list(ins)
    strides = [list(o.estrides) for o in outs] + [_broadcast(shape, a) for a in ins]
    offs = [a.offset for a in arrs]
    cshape, cstrides = layout.collapse(shape, strides)
    if _overlaps(backend, kern, cshape) and any(a.storage is o.storage for a in ins for o in outs):
        # in place (an input IS an output): some elements are computed twice (see render_group), so
        # compute into fresh outputs and copy back
        tmp = [backend.empty(o.shape, _dt.from_numpy_dtype(o.dtype)) for o in outs]
        run_strided(backend, kern, tmp, ins)
        for o, t in zip(outs, tmp):
            backend.copy_(o, t)
        return
    bufs = [a.storage.buffer for a in arrs]
    if len(cshape) > layout.MAX_RANK:
        lead = len(cshape) - layout.MAX_RANK
        for idx in itertools.product(*[range(n) for n in cshape[:lead]]):
            o2 = [off + sum(i * st[d] for d, i in enumerate(idx)) for off, st in zip(offs, cstrides)]
            _launch4(backend, kern, bufs, cshape[lead:], [st[lead:] for st in cstrides], o2)
        return
    _launch4(backend, kern, bufs, cshape, cstrides, offs)


# innermost (collapsed) dims at least this long run in n-d mode (a work-group per row chunk, no division);
# shorter ones in flat mode (work-groups of L would otherwise be mostly idle)
ND_MIN_INNER = 32
FLAT_MAX = 1 << 31    # flat mode: 32-bit index math
TINY = 32             # at most this many elements: one work-group of this size


def _plan(L, cshape):
    """(n-d mode?, work-group size, whether some element is computed twice) for collapsed shape ``cshape``."""
    n3 = cshape[-1]
    n = 1
    for d in cshape:
        n *= d
    if n >= L and len(cshape) <= 3 and (n3 >= ND_MIN_INNER or len(cshape) == 1):
        L3 = L if n3 >= L else 1 << (n3.bit_length() - 1)
        return True, L3, n3 % L3 != 0
    if n <= TINY:
        # a few elements: one small work-group (a group of L work-items costs PoCL ~3x the round trip;
        # one size only, as PoCL builds a work-group function per kernel and size)
        L = min(L, TINY)
        return False, L, n != L
    return False, L, n < L or n % L != 0


def _overlaps(backend, kern, cshape) -> bool:
    if len(cshape) > layout.MAX_RANK:
        cshape = cshape[len(cshape) - layout.MAX_RANK:]
    nd, _, twice = _plan(backend.local_size(kern), cshape)
    n = 1
    for d in cshape:
        n *= d
    return twice or (not nd and n >= FLAT_MAX)     # split ranges (see _launch4): conservatively yes


def _launch4(backend, kern, bufs, cshape, cstrides, offs):
    L = backend.local_size(kern)
    nd, L3, _ = _plan(L, cshape)
    n = 1
    for d in cshape:
        n *= d
    if not nd and n >= FLAT_MAX:
        # flat mode indexes in 32 bits: run the leading dim from here, one range per index
        for i in range(cshape[0]):
            _launch4(backend, kern, bufs, cshape[1:], [st[1:] for st in cstrides],
                     [o + i * st[0] for o, st in zip(offs, cstrides)])
        return
    shape4, strides4 = layout.pad4(cshape, cstrides)
    _, n1, n2, n3 = shape4
    m = layout.meta(shape4, strides4, offs)
    if nd:
        code = "".join("1" if st[-1] == 1 else ("0" if st[-1] == 0 else "g") for st in cstrides)
        if code.count("1") != len(code):
            kern = _variant(backend, kern, code)
        backend.enqueue_nd(kern, (n3, n2, n1), L3, bufs, m)
    else:
        backend.enqueue_exact(backend.programs.companion(kern, "_flat"), n, bufs, m, L3)


def _variant(backend, kern, code):
    """The n-d kernel of ``kern``'s computation for innermost-stride ``code`` (built on first use)."""
    key = (kern, code)
    k = backend._variants.get(key)
    if k is None:
        base = kern.function_name
        name = f"{base}_v{code}"
        k = backend.programs.kernels.get(name)
        if k is None:
            k = backend.programs.kernel(name, render_group(base, *_RENDERED[base], code=code))
        backend._variants[key] = k
    return k


def launch(backend, op, out, ins: list) -> None:
    """Elementwise ``op``: ``out`` (any layout) = op(*ins broadcast to out.shape)."""
    if out.size == 0:
        return
    out.check_writeable(op.name)
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
    for o in outs:
        o.check_writeable("fused group")
    ins = [_unalias(backend, outs, a) for a in ins]
    run_strided(backend, kern, outs, ins)


# ---------------------------------------------------------------- prepared launches (eager fast path)
def prepare(backend, op, args, ins, meta):
    """A launch closure for ``op`` on arguments with these dtypes/shapes/strides (what
    ``ops.elementwise.apply`` caches per layout; see ``Backend.prepare_elementwise``).

    The kernel, its mode and variant, the collapsed layout and the meta array are worked out here once;
    the closure allocates the output, patches the operands' element offsets (not part of the layout key)
    into the meta and enqueues.  Returns None for cases left to the general path."""
    from ...ops import registry
    from ...ops.elementwise import _scalar_tensor
    from ...tensor.tensor import Tensor
    from ..common import prepared_layout
    from . import CLArray
    odt = meta.dtype
    p = prepared_layout(backend.device, args, ins, meta, _broadcast)
    if p is None:
        return None
    shape, n, datas, cshape, cstrides = p.shape, p.n, p.datas, p.cshape, p.cstrides
    try:
        kern = get_kernel(backend, op, [_dt.from_numpy_dtype(a.dtype) for a in datas], odt)
    except NotImplementedError:
        return None
    L = backend.local_size(kern)
    nd, L3, _ = _plan(L, cshape)
    if not nd and n >= FLAT_MAX:
        return None
    shape4, strides4 = layout.pad4(cshape, cstrides)
    _, n1, n2, n3 = shape4
    m0 = layout.meta(shape4, strides4, [0] * (1 + len(datas)))
    if nd:
        code = "".join("1" if st[-1] == 1 else ("0" if st[-1] == 0 else "g") for st in cstrides)
        if code.count("1") != len(code):
            kern = _variant(backend, kern, code)
        gsize = (n3, n2, n1)

        def go(bufs, m):
            backend.enqueue_nd(kern, gsize, L3, bufs, m)
    else:
        fk = backend.programs.companion(kern, "_flat")

        def go(bufs, m):
            backend.enqueue_exact(fk, n, bufs, m, L3)
    # per argument: None for a tensor, else the dtype of the cached 0-d tensor a Python scalar becomes
    kinds = p.kinds
    offpos = [4 + 5 * (k + 1) + 4 for k in range(len(ins))]
    device = backend.device
    make = Tensor._make
    alloc = backend._alloc
    backend._check_dtype(odt.np, op.name)
    onp, ost, nbytes = odt.np, p.contig, n * odt.itemsize
    out_sig = p.out_sig
    prof_active = registry._profiler._active

    def plan(args):
        ts = [a if k is None else _scalar_tensor(a, k, device) for a, k in zip(args, kinds)]
        if prof_active[0] is not None or registry._TIMED:    # the general path records the kernel
            return registry.run(op, ts, {}, [meta])[0]
        ds = [t._data for t in ts]
        out = CLArray(alloc(nbytes), shape, ost, 0, onp)
        m = m0
        for p, d in zip(offpos, ds):
            if d.offset:
                if m is m0:
                    m = m0.copy()
                m[p] = d.offset
        go([out.storage.buffer] + [d.storage.buffer for d in ds], m)
        t = make(out, device, odt)
        t._sig = out_sig
        return t
    return plan
