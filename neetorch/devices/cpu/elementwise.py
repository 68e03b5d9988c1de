"""The CPU renderer for elementwise ops, and the launcher that runs them.

One generated kernel per (op, input dtypes, output dtype) covers every layout:
operands arrive as flat buffers with up to 4 collapsed dims of strides; the
innermost loop has specialised copies for the cases that matter for speed
(all unit-stride, and unit-stride with broadcast scalars/rows) so LLVM vectorizes
them, and one general strided loop for the rest.
"""
from __future__ import annotations

import hashlib
import itertools
import os

import numpy as np

from ...tensor import dtypes as _dt
from . import codegen, layout, threads

_NB_TYPE = {"bool": "boolean", "uint8": "uint8", "int8": "int8", "int16": "int16", "int32": "int32",
            "int64": "int64", "float32": "float32", "float64": "float64"}
_NP_CTOR = {"bool": "np.bool_", "uint8": "np.uint8", "int8": "np.int8", "int16": "np.int16", "int32": "np.int32",
            "int64": "np.int64", "float32": "np.float32", "float64": "np.float64"}


def _helpers_hash() -> str:
    # generated files embed this so that editing the helpers invalidates cached kernels
    here = os.path.dirname(__file__)
    h = hashlib.sha1()
    for f in ("scalar.py", "fastmath.py"):
        p = os.path.join(here, f)
        if os.path.exists(p):
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()[:12]


_HELPERS = _helpers_hash()


def _variants(nin: int):
    """Sets of inputs that are broadcast (stride 0) in the innermost dim, each gets a vector loop."""
    vs = [()]
    vs += [(i,) for i in range(nin)]
    if nin >= 2:
        vs.append(tuple(range(1, nin)))
    if nin == 2:
        vs.append((0, 1))
    out = []
    for v in vs:
        if v not in out:
            out.append(v)
    return out


def render(name: str, template: str, in_dt: list, comp_dt: list, out_dt) -> str:
    nin = len(in_dt)
    args = ", ".join(["o"] + [f"x{i}" for i in range(nin)] + ["m"])
    sig = "void(" + ", ".join([f"{_NB_TYPE[out_dt]}[::1]"] + [f"{_NB_TYPE[d]}[::1]" for d in in_dt] + ["int64[::1]"]) + ")"
    L = [f"# neetorch elementwise kernel: {name}({', '.join(in_dt)}) -> {out_dt}; helpers {_HELPERS}",
         "import math", "import numpy as np", "from numba import njit",
         "from neetorch.devices.cpu.scalar import *", "",
         f'@njit("{sig}", cache=True, nogil=True, error_model="numpy", fastmath={{"contract"}})',
         f"def kernel({args}):",
         "    n0 = m[0]; n1 = m[1]; n2 = m[2]; n3 = m[3]"]
    ops = ["o"] + [f"x{i}" for i in range(nin)]
    for k, v in enumerate(ops):
        b = 4 + 5 * k
        L.append(f"    s{v}0 = m[{b}]; s{v}1 = m[{b+1}]; s{v}2 = m[{b+2}]; s{v}3 = m[{b+3}]; p{v}b = m[{b+4}]")

    def load(i, idx):
        e = f"x{i}[{idx}]"
        if comp_dt[i] != in_dt[i]:
            e = f"{_NP_CTOR[comp_dt[i]]}({e})"
        return e

    expr = template.format(*[f"v{i}" for i in range(nin)])
    store = f"{_NP_CTOR[out_dt]}({expr})"
    L += ["    for i0 in range(n0):", "        for i1 in range(n1):", "            for i2 in range(n2):"]
    for v in ops:
        L.append(f"                p{v} = p{v}b + i0 * s{v}0 + i1 * s{v}1 + i2 * s{v}2")
    first = True
    for var in _variants(nin):
        conds = ["so3 == 1"] + [f"sx{i}3 == {0 if i in var else 1}" for i in range(nin)]
        L.append(f"                {'if' if first else 'elif'} {' and '.join(conds)}:")
        first = False
        for i in var:
            L.append(f"                    v{i} = {load(i, f'px{i}')}")
        # slices make the loop index provably non-negative, so no wrap-around
        # check is emitted and LLVM vectorizes the loop
        L.append("                    ov = o[po:po + n3]")
        for i in range(nin):
            if i not in var:
                L.append(f"                    xv{i} = x{i}[px{i}:px{i} + n3]")
        L.append("                    for i3 in range(n3):")
        for i in range(nin):
            if i not in var:
                e = f"xv{i}[i3]"
                if comp_dt[i] != in_dt[i]:
                    e = f"{_NP_CTOR[comp_dt[i]]}({e})"
                L.append(f"                        v{i} = {e}")
        L.append(f"                        ov[i3] = {store}")
    L.append("                else:")
    L.append("                    for i3 in range(n3):")
    for i in range(nin):
        L.append(f"                        v{i} = {load(i, f'px{i} + i3 * sx{i}3')}")
    L.append(f"                        o[po + i3 * so3] = {store}")
    return "\n".join(L) + "\n"


_kernels: dict = {}


def get_kernel(op, in_np: list, out_np):
    key = (op.name, tuple(in_np), out_np)
    k = _kernels.get(key)
    if k is None:
        from ...ops.elementwise import ew_dtypes
        in_dt = [_dt.from_numpy_dtype(np.dtype(d)) for d in in_np]
        comp, _ = ew_dtypes(op.ew, in_dt)
        comp = [_dt.float32 if c is _dt.float16 else c for c in comp]
        first = op.ew.promote[0] if op.ew.promote else 0
        template = op.expr["py"](comp[first])
        src = render(op.name, template, [d.name for d in in_dt], [c.name for c in comp], np.dtype(out_np).name)
        k = codegen.load_kernel(f"ew_{op.name}", src)
        _kernels[key] = k
    return k


def launch(op, out: np.ndarray, ins: list) -> None:
    """Run elementwise ``op``: ``out`` (any layout) = op(*ins broadcast to out.shape)."""
    if out.size == 0:
        return
    if out.dtype == np.float16:
        tmp = np.empty(out.shape, np.float32)
        launch(op, tmp, ins)
        np.copyto(out, tmp, casting="unsafe")
        return
    ins = [a.astype(np.float32) if a.dtype == np.float16 else a for a in ins]
    ins = [_unalias(out, a) for a in ins]
    kern = get_kernel(op, [a.dtype for a in ins], out.dtype)
    run_strided(kern, out, ins)


def _unalias(out: np.ndarray, a: np.ndarray) -> np.ndarray:
    """An input that overlaps the output in any other layout is read from a copy, so
    in-place ops (``x += x.T``) see the values from before the op, as in numpy."""
    if a.size == 0 or not np.may_share_memory(out, a):
        return a
    if (a.shape == out.shape and a.strides == out.strides and
            a.__array_interface__["data"][0] == out.__array_interface__["data"][0]):
        return a
    return a.copy()


def run_strided(kern, out: np.ndarray, ins: list) -> None:
    shape = out.shape
    fo, oo, so = layout.flat(out)
    bufs, offs, strides = [fo], [oo], [so]
    for a in ins:
        fa, oa, sa = layout.flat(a)
        bufs.append(fa)
        offs.append(oa)
        strides.append(layout.broadcast_strides(shape, a, sa) if a.shape != shape else sa)
    cshape, cstrides = layout.collapse(shape, strides)
    if len(cshape) > layout.MAX_RANK:
        # rare: more than 4 non-mergeable dims; loop over the leading ones here
        lead = len(cshape) - layout.MAX_RANK
        for idx in itertools.product(*[range(n) for n in cshape[:lead]]):
            o2 = [off + sum(i * st[d] for d, i in enumerate(idx)) for off, st in zip(offs, cstrides)]
            _launch4(kern, bufs, cshape[lead:], [st[lead:] for st in cstrides], o2)
        return
    _launch4(kern, bufs, cshape, cstrides, offs)


def _launch4(kern, bufs, cshape, cstrides, offs):
    shape4, strides4 = layout.pad4(cshape, cstrides)
    total = shape4[0] * shape4[1] * shape4[2] * shape4[3]
    nt = threads.NUM_THREADS
    if total < threads.PARALLEL_THRESHOLD or nt == 1:
        kern(*bufs, layout.meta(shape4, strides4, offs))
        return
    # split the outermost dim that has enough work; else the innermost
    d = next((i for i in range(4) if shape4[i] >= 2 * nt), 3)
    metas = []
    for s, e in threads.split(shape4[d], nt):
        sh = list(shape4)
        sh[d] = e - s
        metas.append(layout.meta(sh, strides4, [o + s * st[d] for o, st in zip(offs, strides4)]))
    threads.run_parallel(lambda m: kern(*bufs, m), metas)


_scalar_bufs: dict = {}


def _scalar_buf(v, npdt):
    key = (type(v), v, npdt)
    b = _scalar_bufs.get(key)
    if b is None:
        b = np.array([v], dtype=npdt)
        if len(_scalar_bufs) < 4096 and v == v:
            _scalar_bufs[key] = b
    return b


def prepare(op, args, ins, meta, device):
    """A launch closure for ``op`` on arguments with these dtypes/shapes/strides.

    Everything that depends only on the layout (kernel, collapsed dims, thread chunks)
    is computed here once; the closure only allocates the output, takes the flat
    buffers and calls the kernel.  Returns None for cases left to the general path.
    """
    from ...tensor.tensor import Tensor
    odt = meta.dtype
    if odt.np == np.float16 or any(t._data.dtype == np.float16 for t in ins):
        return None
    shape = tuple(meta.shape)
    out_np = odt.np
    kern = get_kernel(op, [t._data.dtype for t in ins], out_np)
    n = 1
    for s in shape:
        n *= s
    st, strides, offs, kinds = [], [], [0], []
    c = 1
    for s in reversed(shape):
        st.append(c)
        c *= s
    strides.append(st[::-1])
    for a, t in zip(args, ins):
        arr = t._data
        fa, oa, sa = layout.flat(arr)
        strides.append(layout.broadcast_strides(shape, arr, sa) if arr.shape != shape else sa)
        offs.append(oa)
        if not isinstance(a, Tensor):
            kinds.append((2, arr.dtype))
        elif arr.flags.c_contiguous and arr.flags.writeable:
            kinds.append((0, None))
        else:
            kinds.append((1, None))
    cshape, cstrides = layout.collapse(shape, strides)
    if len(cshape) > layout.MAX_RANK:
        return None
    shape4, strides4 = layout.pad4(cshape, cstrides)
    nt = threads.NUM_THREADS
    if n < threads.PARALLEL_THRESHOLD or nt == 1:
        chunks = [layout.meta(shape4, strides4, offs)]
    else:
        d = next((i for i in range(4) if shape4[i] >= 2 * nt), 3)
        chunks = []
        for s, e in threads.split(shape4[d], nt):
            sh = list(shape4)
            sh[d] = e - s
            chunks.append(layout.meta(sh, strides4, [o + s * st_[d] for o, st_ in zip(offs, strides4)]))
    single = chunks[0] if len(chunks) == 1 else None
    make = Tensor._make
    flat = layout.flat
    empty = np.empty

    def plan(args):
        out = empty(shape, out_np)
        if n == 0:
            return make(out, device, odt)
        bufs = [out.reshape(-1)]
        for a, (k, sdt) in zip(args, kinds):
            if k == 0:
                bufs.append(a._data.reshape(-1))
            elif k == 1:
                bufs.append(flat(a._data)[0])
            else:
                bufs.append(_scalar_buf(a, sdt))
        if single is not None:
            kern(*bufs, single)
        else:
            threads.run_parallel(lambda m: kern(*bufs, m), chunks)
        return make(out, device, odt)
    return plan
