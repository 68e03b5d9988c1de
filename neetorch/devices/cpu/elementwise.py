"""The CPU renderer for elementwise ops, and the launcher that runs them.

One generated kernel per (op, input dtypes, output dtype) covers every layout:
operands arrive as flat buffers with up to 4 collapsed dims of strides; the
innermost loop has specialised copies for the cases that matter for speed
(all unit-stride, and unit-stride with broadcast scalars/rows) so LLVM vectorizes
them, and one general strided loop for the rest.

Two renderers take the same pieces (dtypes, body statements, results): ``render_group``
writes Numba source, ``llvm_render.render_ir`` LLVM IR built with llvmlite directly (20-50x
faster to compile); ``load_group`` uses the IR one for every kernel it covers and Numba for
the rest (``NEE_CPU_RENDERER=numba``: Numba for all).  See docs/JIT.md.

float16 / bfloat16: the IR kernels load and store them themselves (widened to float32 in registers,
the float32 kernel's arithmetic, each result rounded once to nearest even: the bits of the float32
kernel on float32 copies rounded by numpy / ml_dtypes, and of torch's CPU kernels); where the IR
renderer does not cover a kernel, :func:`launch` / :func:`launch_group` compute through float32
copies instead.  In fused groups every low-float member's result is rounded (``_ROUND``), as eager
stores it.
"""
from __future__ import annotations

import hashlib
import itertools
import math
import os
import time

import numpy as np

from ... import profiler
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


def render_group(name: str, in_dt: list, out_dt: list, body: list, results: list) -> str:
    """Source of a kernel computing ``results`` (one expression per output) elementwise.

    Inputs ``x0..`` are loaded into ``v0..`` (in their own dtype); ``body`` holds
    statements that may define temporaries used by ``results``; output ``j`` stores
    ``results[j]`` cast to ``out_dt[j]``.  All outputs share one shape; inputs are
    broadcast to it through their strides.
    """
    nin, nout = len(in_dt), len(out_dt)
    outs = [f"o{j}" for j in range(nout)]
    ins = [f"x{i}" for i in range(nin)]
    sig = "void(" + ", ".join([f"{_NB_TYPE[d]}[::1]" for d in out_dt] + [f"{_NB_TYPE[d]}[::1]" for d in in_dt]
                              + ["int64[::1]"]) + ")"
    L = [f"# neetorch elementwise kernel: {name}({', '.join(in_dt)}) -> ({', '.join(out_dt)}); helpers {_HELPERS}",
         "import math", "import numpy as np", "from numba import njit",
         "from neetorch.devices.cpu.scalar import *", "",
         f'@njit("{sig}", cache=True, nogil=True, error_model="numpy", fastmath={{"contract"}})',
         f"def kernel({', '.join(outs + ins + ['m'])}):",
         "    n0 = m[0]; n1 = m[1]; n2 = m[2]; n3 = m[3]"]
    for k, v in enumerate(outs + ins):
        b = 4 + 5 * k
        L.append(f"    s{v}0 = m[{b}]; s{v}1 = m[{b+1}]; s{v}2 = m[{b+2}]; s{v}3 = m[{b+3}]; p{v}b = m[{b+4}]")
    stores = [f"{_NP_CTOR[d]}({r})" for d, r in zip(out_dt, results)]
    ind = " " * 24
    L += ["    for i0 in range(n0):", "        for i1 in range(n1):", "            for i2 in range(n2):"]
    for v in outs + ins:
        L.append(f"                p{v} = p{v}b + i0 * s{v}0 + i1 * s{v}1 + i2 * s{v}2")
    first = True
    for var in _variants(nin):
        conds = [f"s{o}3 == 1" for o in outs] + [f"sx{i}3 == {0 if i in var else 1}" for i in range(nin)]
        L.append(f"                {'if' if first else 'elif'} {' and '.join(conds)}:")
        first = False
        for i in var:
            L.append(f"                    v{i} = x{i}[px{i}]")
        # slices make the loop index provably non-negative, so no wrap-around
        # check is emitted and LLVM vectorizes the loop
        for o in outs:
            L.append(f"                    {o}v = {o}[p{o}:p{o} + n3]")
        for i in range(nin):
            if i not in var:
                L.append(f"                    xv{i} = x{i}[px{i}:px{i} + n3]")
        L.append("                    for i3 in range(n3):")
        for i in range(nin):
            if i not in var:
                L.append(f"{ind}v{i} = xv{i}[i3]")
        L += [ind + b for b in body]
        for o, st in zip(outs, stores):
            L.append(f"{ind}{o}v[i3] = {st}")
    L.append("                else:")
    L.append("                    for i3 in range(n3):")
    for i in range(nin):
        L.append(f"{ind}v{i} = x{i}[px{i} + i3 * sx{i}3]")
    L += [ind + b for b in body]
    for o, st in zip(outs, stores):
        L.append(f"{ind}{o}[p{o} + i3 * s{o}3] = {st}")
    return "\n".join(L) + "\n"


_kernels: dict = {}
_LOW_NAMES = ("float16", "bfloat16")


# ops whose torch CPU kernel computes float16/bfloat16 in the storage dtype's arithmetic (each step rounded):
# the scalar helper of the float32 kernel -> its low-float form (scalar.py), name + "_f16" / "_bf16"
_LOW_STEPS = ("f_floordiv(", "f_xlogy(")
_LOW_SUFFIX = {"float16": "_f16(", "bfloat16": "_bf16("}


def _low_steps(template: str, low) -> str:
    """``template`` with the helpers of :data:`_LOW_STEPS` in their ``low`` (a dtype name or None) form."""
    if low is None:
        return template
    for h in _LOW_STEPS:
        template = template.replace(h, h[:-1] + _LOW_SUFFIX[low])
    return template


def _low_of(raw, storage) -> str | None:
    """The low float an op computes in when torch rounds its steps: its compute dtype ``raw`` is
    float16/bfloat16 and no operand is stored wider (a float32 opmath scalar, x // 2.5, keeps float32)."""
    if raw.name not in _LOW_SUFFIX or any(d.name in ("float32", "float64") for d in storage):
        return None
    return raw.name


def get_kernel(op, in_np: list, out_np, low=None):
    """The kernel of elementwise ``op`` on arrays of these dtypes.  With a float16/bfloat16 operand or
    result: the LLVM kernel that loads and stores them itself (widened to float32 in registers, the
    float32 kernel's arithmetic, each result rounded once to nearest even), or None where the LLVM
    renderer does not cover the op (or is off): :func:`launch` then computes through float32 copies
    (``low``: the low float those copies hold, for :func:`_low_steps`)."""
    key = (op.name, tuple(in_np), out_np, low)
    k = _kernels.get(key)
    if k is None and key not in _kernels:
        from ...ops.elementwise import ew_dtypes
        in_dt = [_dt.from_numpy_dtype(np.dtype(d)) for d in in_np]
        if any(d.category == 3 for d in in_dt) or np.dtype(out_np).kind == "c":
            # eager complex ops never get here (launch() hands them to numpy): a compiled graph did
            raise NotImplementedError(f"{op.name}: complex values have no generated CPU kernel; nee.jit / "
                                      f"compiled graphs do not support complex64/complex128 (run them eagerly)")
        raw, _ = ew_dtypes(op.ew, in_dt)
        comp = [_dt.compute_dtype(c) for c in raw]   # float16/bfloat16 compute in float32
        first = op.ew.promote[0] if op.ew.promote else 0
        template = _low_steps(op.expr["py"](comp[first]), low or _low_of(raw[first], in_dt))
        args = [_operand(f"v{i}", d.name, c.name, r) for i, (d, c, r) in enumerate(zip(in_dt, comp, raw))]
        out_name = np.dtype(out_np).name
        low = out_name in _LOW_NAMES or any(d.name in _LOW_NAMES for d in in_dt)
        k, _ = load_group(f"ew_{op.name}", op.name, [d.name for d in in_dt], [out_name], [],
                          [template.format(*args)], native_only=low)
        _kernels[key] = k
    return k


def launch(op, out: np.ndarray, ins: list) -> None:
    """Run elementwise ``op``: ``out`` (any layout) = op(*ins broadcast to out.shape)."""
    if out.size == 0:
        return
    if out.dtype.kind == "c" or any(a.dtype.kind == "c" for a in ins):
        # complex operands: numpy computes them (the generated kernels have no complex type)
        from ...ops.complex import launch_complex
        launch_complex(op, out, ins)
        return
    if _dt.is_low_np(out.dtype) or any(_dt.is_low_np(a.dtype) for a in ins):
        kern = get_kernel(op, [a.dtype for a in ins], out.dtype)
        if kern is not None:   # float16/bfloat16 loaded and stored by the kernel itself
            run_strided(kern, out, [_unalias(out, a) for a in ins])
            return
    if any(_dt.is_low_np(a.dtype) for a in ins) and any(a.dtype.kind in "biu" for a in ins):
        ins = _round_int_operands(op, ins)
    if _dt.is_low_np(out.dtype):   # float16/bfloat16: computed in float32, each result rounded once
        tmp = _f32_scratch(out.shape)
        launch(op, tmp, ins)
        with np.errstate(over="ignore"):  # float32 -> float16 overflow is inf, silently (like torch)
            np.copyto(out, tmp, casting="unsafe")
        return
    low = None
    if any(_dt.is_low_np(a.dtype) for a in ins) and getattr(op, "ew", None) is not None:
        from ...ops.elementwise import ew_dtypes
        dts = [_dt.from_numpy_dtype(a.dtype) for a in ins]
        raw, _ = ew_dtypes(op.ew, dts)
        low = _low_of(raw[op.ew.promote[0] if op.ew.promote else 0], dts)
    ins = [_widen(a) for a in ins]
    ins = [_unalias(out, a) for a in ins]
    kern = get_kernel(op, [a.dtype for a in ins], out.dtype, low)
    run_strided(kern, out, ins)


def _round_int_operands(op, ins: list) -> list:
    """The widening path's form of :func:`_operand`: integer / bool operands of an op computed in
    float16/bfloat16, as values of that dtype (through float32: torch's conversion)."""
    from ...ops.elementwise import ew_dtypes
    raw, _ = ew_dtypes(op.ew, [_dt.from_numpy_dtype(a.dtype) for a in ins])
    out = []
    for a, r in zip(ins, raw):
        if r.name in _ROUND and a.dtype.kind in "biu":
            a = a.astype(np.float32).astype(r.np)
        out.append(a)
    return out


def _f32_scratch(shape) -> np.ndarray:
    """A float32 temporary (large ones from the backend's buffer pool: no page faults on first touch)."""
    from . import _POOL_MIN, _pool_take
    n = 1
    for d in shape:
        n *= d
    return _pool_take(4 * n).view(np.float32).reshape(shape) if 4 * n >= _POOL_MIN else np.empty(shape, np.float32)


def _widen(a: np.ndarray) -> np.ndarray:
    """float16/bfloat16 operands as float32 (exact) for the float32 kernels; other dtypes as they are."""
    if not _dt.is_low_np(a.dtype):
        return a
    w = _f32_scratch(a.shape)
    np.copyto(w, a, casting="unsafe")
    return w


def _unalias(out: np.ndarray, a: np.ndarray) -> np.ndarray:
    """An input that overlaps the output in any other layout is read from a copy, so
    in-place ops (``x += x.T``) see the values from before the op, as in numpy."""
    if a.size == 0 or not np.may_share_memory(out, a):
        return a
    if (a.shape == out.shape and a.strides == out.strides and
            a.__array_interface__["data"][0] == out.__array_interface__["data"][0]):
        return a
    return a.copy()


def run_strided(kern, out, ins: list) -> None:
    """Launch ``kern`` with output(s) ``out`` (an array or a list of same-shape arrays)."""
    outs = out if isinstance(out, list) else [out]
    shape = outs[0].shape
    # the chunk metas depend only on the operands' shapes and strides: cached, so repeated
    # launches (compiled graphs, in-place ops) skip the collapse and meta building
    # (and the thread count: its chunks are one per thread)
    key = (kern, shape, tuple(o.strides for o in outs), tuple((a.shape, a.strides) for a in ins),
           threads.NUM_THREADS)
    metas = _launch_cache.get(key)
    if metas is _DENSE:
        _dense_launch(kern, outs, ins, shape)
        return
    if metas is not None:
        bufs = [layout.flat(a)[0] for a in outs] + [layout.flat(a)[0] for a in ins]
        if len(metas) == 1:
            kern(*bufs, metas[0])
        else:
            _run_chunks(kern, bufs, metas, key)
        return
    bufs, offs, strides = [], [], []
    for o in outs:
        fo, oo, so = layout.flat(o)
        bufs.append(fo)
        offs.append(oo)
        strides.append(so)
    for a in ins:
        fa, oa, sa = layout.flat(a)
        bufs.append(fa)
        offs.append(oa)
        strides.append(layout.broadcast_strides(shape, a, sa) if a.shape != shape else sa)
    cshape, cstrides = layout.collapse(shape, strides)
    if len(cshape) > layout.MAX_RANK and _dense_launch(kern, outs, ins, shape):
        if len(_launch_cache) < 16384:
            _launch_cache[key] = _DENSE     # (the layouts decide it: later launches skip the collapse)
        return
    if len(cshape) > layout.MAX_RANK:
        # more than 4 non-mergeable dims left (_dense_launch declined): loop over the leading ones here
        lead = len(cshape) - layout.MAX_RANK
        for idx in itertools.product(*[range(n) for n in cshape[:lead]]):
            o2 = [off + sum(i * st[d] for d, i in enumerate(idx)) for off, st in zip(offs, cstrides)]
            _launch4(kern, bufs, cshape[lead:], [st[lead:] for st in cstrides], o2)
        return
    metas = chunk_metas(cshape, cstrides, offs, split_weight(kern))
    if len(_launch_cache) < 16384:
        _launch_cache[key] = metas
    if len(metas) == 1:
        kern(*bufs, metas[0])
    else:
        _run_chunks(kern, bufs, metas, key)


def _dense_launch(kern, outs, ins, shape) -> bool:
    """A launch whose operands leave more than MAX_RANK dims after collapsing (a window partition's 6-D permute:
    MaxViT's (1, 256, 7, 2, 7, 2) copies) with its strided operands made C-contiguous first by numpy's copy (any
    rank in one pass) and C-contiguous temporaries for strided outputs, copied back: one kernel launch over flat
    buffers instead of a Python loop over the leading dims (512 launches: 3.7 ms -> ~0.3 ms).  False where that
    would not collapse either (no operand to make dense)."""
    ins2 = [a if a.flags.c_contiguous and a.shape == shape else np.ascontiguousarray(np.broadcast_to(a, shape))
            for a in ins]
    outs2 = [o if o.flags.c_contiguous else np.empty(shape, o.dtype) for o in outs]
    if all(a is b for a, b in zip(ins2 + outs2, ins + outs)):
        return False
    run_strided(kern, outs2 if len(outs2) > 1 else outs2[0], ins2)
    for o, t in zip(outs, outs2):
        if t is not o:
            np.copyto(o, t)
    return True


_launch_cache: dict = {}
_DENSE = object()            # _launch_cache's mark of a launch _dense_launch takes
_natives: dict = {}          # launch key -> (descriptor, caller, stacked metas, dummy) or False
NATIVE_CHUNKS = [os.environ.get("NEE_CPU_NATIVE_CHUNKS", "1") not in ("0", "")]


def _native_chunks(kern, metas):
    """The launch's chunks as one job of gemm_driver's native workers (``call_plan``: chunk t's meta is
    row t of one stacked array), for an LLVM kernel whose chunks all take one machine-code layout; False
    otherwise (Numba kernels, no driver, the ctypes caller): the Python pool runs them."""
    from . import llvm_render
    if not NATIVE_CHUNKS[0] or not isinstance(kern, llvm_render.LLVMKernel):
        return False
    fs = {id(kern._specialize(m)) for m in metas}
    if len(fs) != 1:
        return False
    return native_calls(kern._specialize(metas[0]), kern.nout + kern.nin + 1, metas)


def native_calls(f, nargs: int, metas):
    """``(descriptor, caller, stacked metas, dummy)`` running machine-code kernel ``f`` (an llvm_call
    builtin: its ``__self__`` is the kernel's address) once per meta, the meta its last of ``nargs``
    arguments, as one gemm_driver call job; False when ``f`` is not such a builtin, the metas differ in
    size, or there is no driver."""
    addr = getattr(f, "__self__", None)
    if not NATIVE_CHUNKS[0] or not isinstance(addr, int) or len({m.size for m in metas}) != 1 or \
            any(m.dtype != np.int64 for m in metas):
        return False
    from . import gemm_driver
    stacked = np.ascontiguousarray(np.stack(metas))
    desc = gemm_driver.call_plan(addr, nargs, min(threads.NUM_THREADS, len(metas)), len(metas), stacked.strides[0])
    if desc is None:
        return False
    return desc, gemm_driver.epilogue_caller(nargs), stacked, np.zeros(1, np.int64)


def _run_chunks(kern, bufs, metas, key) -> None:
    """Chunks of one launch on every thread: gemm_driver's native workers when the kernel allows
    (:func:`_native_chunks`), else the Python pool (``threads.run_parallel``, ~60 µs of hand-off)."""
    nat = _natives.get(key)
    if nat is None:
        nat = _native_chunks(kern, metas)
        if len(_natives) < 16384:
            _natives[key] = nat
    if nat:
        desc, caller, stacked, dummy = nat
        caller(desc, dummy, dummy, dummy, *bufs, stacked)
    else:
        threads.run_parallel(lambda m: kern(*bufs, m), metas)


def split_weight(kern) -> int:
    """Elements of a plain launch one element of ``kern`` is worth for the parallel split
    (llvm_render.split_weight: 1 for cheap kernels and the Numba ones)."""
    w = _weights.get(kern)
    if w is None:
        w = 1
        pieces = getattr(kern, "pieces", None)
        if pieces is not None:
            from . import llvm_render
            try:
                w = llvm_render.split_weight(*pieces)
            except Exception:       # (a body the cost emitter cannot translate: as a plain launch)
                w = 1
        if len(_weights) < 4096:
            _weights[kern] = w
    return w


_weights: dict = {}


def chunk_metas(cshape, cstrides, offs, weight: int = 1) -> list:
    """Kernel meta arrays for a collapsed layout: one, or one per thread for large launches (from
    threads.PARALLEL_THRESHOLD elements, each counted ``weight`` times: :func:`split_weight`), split along
    the outermost dim that has enough work, else the innermost."""
    shape4, strides4 = layout.pad4(cshape, cstrides)
    total = shape4[0] * shape4[1] * shape4[2] * shape4[3]
    nt = threads.NUM_THREADS
    if total * weight < threads.PARALLEL_THRESHOLD or nt == 1:
        return [layout.meta(shape4, strides4, offs)]
    d = next((i for i in range(4) if shape4[i] >= 2 * nt), 3)
    metas = []
    for s, e in threads.split(shape4[d], nt):
        sh = list(shape4)
        sh[d] = e - s
        metas.append(layout.meta(sh, strides4, [o + s * st[d] for o, st in zip(offs, strides4)]))
    return metas


def _launch4(kern, bufs, cshape, cstrides, offs):
    metas = chunk_metas(cshape, cstrides, offs, split_weight(kern))
    if len(metas) == 1:
        kern(*bufs, metas[0])
    else:
        threads.run_parallel(lambda m: kern(*bufs, m), metas)


_scalar_bufs: dict = {}


def _scalar_buf(v, npdt):
    # -0.0 == 0.0 (same hash): the sign is part of the key (x / -0.0 is -inf)
    key = (type(v), v, npdt, isinstance(v, float) and math.copysign(1.0, v) < 0)
    b = _scalar_bufs.get(key)
    if b is None:
        try:
            b = np.array([v], dtype=npdt)
        except OverflowError:  # int scalar outside an integer compute dtype: wraps like torch
            b = np.array([v]).astype(npdt)
        if len(_scalar_bufs) < 4096 and v == v:
            _scalar_bufs[key] = b
    return b


def _low_plan(op, args, ins, meta, device):
    """The launch closure of an op with float16/bfloat16 operands or result: :func:`launch` (operands widened
    to float32, the float32 kernel, the result rounded once), with the dispatch decided once."""
    from ...tensor.tensor import Tensor
    odt, shape = meta.dtype, tuple(meta.shape)
    kinds = [(isinstance(a, Tensor), t._data.dtype) for a, t in zip(args, ins)]
    prof_active = profiler._active
    make = Tensor._make

    def plan(args):
        arrs = [a._data if is_t else _scalar_buf(a, sdt).reshape(()) for a, (is_t, sdt) in zip(args, kinds)]
        out = np.empty(shape, odt.np)
        if prof_active[0] is not None or profiler.timing_enabled():
            t0 = time.perf_counter()
            launch(op, out, arrs)
            profiler.record(op.name, "kernel", device, t0, time.perf_counter() - t0,
                            out.nbytes + sum(x.nbytes for x in arrs), detail=str(shape))
        else:
            launch(op, out, arrs)
        return make(out, device, odt)
    return plan


def prepare(op, args, ins, meta, device):
    """A launch closure for ``op`` on arguments with these dtypes/shapes/strides.

    Everything that depends only on the layout (kernel, collapsed dims, thread chunks)
    is computed here once; the closure only allocates the output, takes the flat
    buffers and calls the kernel.  Returns None for cases left to the general path.
    """
    from ...tensor.tensor import Tensor
    odt = meta.dtype
    if odt.category == 3 or any(t._dtype.category == 3 for t in ins):
        return None   # complex: launch() hands it to numpy (ops/complex.py)
    shape = tuple(meta.shape)
    out_np = odt.np
    kern = get_kernel(op, [t._data.dtype for t in ins], out_np)
    if kern is None:   # float16/bfloat16 the LLVM renderer does not cover: through float32 copies
        return _low_plan(op, args, ins, meta, device)
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
    nt0 = threads.NUM_THREADS
    chunks = chunk_metas(cshape, cstrides, offs, split_weight(kern))
    single = chunks[0] if len(chunks) == 1 else None
    prof_active, timed = profiler._active, profiler.timing_enabled() and profiler._active[0] is None
    nbytes = n * odt.itemsize + sum(t._data.nbytes for t in ins)
    make = Tensor._make
    flat = layout.flat
    empty = np.empty

    from ...ops.elementwise import _layout_ids
    out_key = (odt, device, shape, tuple(s * odt.itemsize for s in st[::-1]), True)
    out_sig = _layout_ids.setdefault(out_key, len(_layout_ids)) if n else None
    from . import _POOL_MIN, _pool_take as take
    nb = n * odt.itemsize
    big = nb >= _POOL_MIN

    def other_threads(args):
        # set_num_threads since the plan was made (its chunks are per thread): the launch for this count
        out = np.empty(shape, out_np)
        launch(op, out, [a._data if k != 2 else _scalar_buf(a, sdt).reshape(()) for a, (k, sdt) in zip(args, kinds)])
        return make(out, device, odt)

    def plan(args):
        if threads.NUM_THREADS != nt0:
            return other_threads(args)
        out1 = take(nb).view(out_np) if big else empty(n, out_np)
        out = out1.reshape(shape)
        if n == 0:
            return make(out, device, odt)
        bufs = [out1]
        for a, (k, sdt) in zip(args, kinds):
            if k == 0:
                f = a._flat
                if f is None:
                    f = a._flat = a._data.reshape(-1)
                bufs.append(f)
            elif k == 1:
                bufs.append(flat(a._data)[0])
            else:
                bufs.append(_scalar_buf(a, sdt))
        if prof_active[0] is not None or timed:
            t0 = time.perf_counter()
            _go(bufs)
            profiler.record(op.name, "kernel", device, t0, time.perf_counter() - t0, nbytes, detail=str(shape))
        else:
            _go(bufs)
        t = make(out, device, odt)
        t._sig = out_sig
        t._flat = out1
        return t

    nat_box = [None]

    def _go(bufs):
        if single is not None:
            kern(*bufs, single)
            return
        nat = nat_box[0]
        if nat is None:
            nat = nat_box[0] = _native_chunks(kern, chunks)
        if nat:
            desc, caller, stacked, dummy = nat
            caller(desc, dummy, dummy, dummy, *bufs, stacked)
        else:
            threads.run_parallel(lambda m: kern(*bufs, m), chunks)

    if single is not None and n and [k for k, _ in kinds] in ([0], [0, 0]):
        # the common small case (one or two contiguous tensors, one chunk): no loops, no
        # indirection — this is what per-op overhead on tiny tensors is made of
        def plan_fast(args):
            if prof_active[0] is not None or timed or threads.NUM_THREADS != nt0:
                return plan(args)
            out1 = take(nb).view(out_np) if big else empty(n, out_np)
            a = args[0]
            fa = a._flat
            if fa is None:
                fa = a._flat = a._data.reshape(-1)
            if len(args) == 1:
                kern(out1, fa, single)
            else:
                b = args[1]
                fb = b._flat
                if fb is None:
                    fb = b._flat = b._data.reshape(-1)
                kern(out1, fa, fb, single)
            t = make(out1.reshape(shape), device, odt)
            t._sig = out_sig
            t._flat = out1
            return t
        return plan_fast
    return plan


def _operand(name: str, kd: str, c: str, raw, storage=None) -> str:
    """The expression of an operand held as ``kd`` (its kernel dtype) that an op computes in ``c`` (``raw``:
    the dtype before float16/bfloat16 widen to float32).  An integer or bool operand of a float16/bfloat16
    op is rounded to that dtype first, as torch casts it to the common dtype (int32 299 + bfloat16 is
    300 + x): converted to float32, then rounded (torch's int -> float -> low conversion)."""
    e = name if kd == c else f"{_NP_CTOR[c]}({name})"
    st = _dt.to_dtype(kd) if storage is None else storage
    if raw.name in _ROUND and st.category <= 1:
        e = f"{_ROUND[raw.name]}({e})"
    return e


def _kdt(dtype) -> str:
    """The dtype a value has inside CPU kernels (Numba has no float16/bfloat16: computed in float32)."""
    return _dt.compute_dtype(dtype).name


def compile_group(group):
    """Render and load the kernel of a fused elementwise group (see jit/fusion.py).  float16/bfloat16
    inputs and outputs are loaded and stored by the LLVM kernel itself (the Numba one, where the LLVM
    renderer does not cover the group, takes float32 copies: :func:`launch_group`)."""
    if any(v.dtype.category == 3 for v in list(group.inputs) + list(group.outputs)):
        raise NotImplementedError("complex values have no fused CPU kernel")
    return load_group("fused", group.name, *_group_pieces(group, storage=True))


def native_low(kern) -> bool:
    """Whether ``kern`` takes float16/bfloat16 arrays as they are (an LLVM kernel: its pieces name the
    storage dtypes); a Numba kernel takes float32 copies of them."""
    from . import llvm_render
    return isinstance(kern, llvm_render.LLVMKernel)


def group_source(group, outputs=None):
    """Source of a fused group's kernel (``kernel``); ``outputs``: the values it stores (default:
    the group's outputs).  Fused patterns (devices/cpu/kernels/fused.py) append a driver to it."""
    return render_group(group.name, *_group_pieces(group, outputs))


# a member whose result is float16/bfloat16 rounds it (and widens it again) in the fused kernel, as the
# eager op stores it: a fused chain gives eager's bits (scalar.f_round_f16 / f_round_bf16)
_ROUND = {"float16": "f_round_f16", "bfloat16": "f_round_bf16"}


def _group_pieces(group, outputs=None, storage=False):
    """(input dtypes, output dtypes, body statements, result names) of a fused group's kernel.  Dtypes are
    those the kernel computes in (float32 for float16/bfloat16), or with ``storage`` the operands' own
    (the LLVM renderer loads/stores low floats itself)."""
    from ...ops.elementwise import ew_dtypes
    outputs = group.outputs if outputs is None else outputs
    names = {}
    kdt = {}
    for i, v in enumerate(group.inputs):
        names[v] = f"v{i}"
        kdt[v] = _kdt(v.dtype)
    body = []
    for k, n in enumerate(group.nodes):
        raw, _ = ew_dtypes(n.op.ew, [v.dtype for v in n.inputs])
        comp = [_kdt(c) for c in raw]
        args = [_operand(names[v], kdt[v], c, r, v.dtype) for v, c, r in zip(n.inputs, comp, raw)]
        first = n.op.ew.promote[0] if n.op.ew.promote else 0
        cdt = _dt.to_dtype(comp[first])
        od = _kdt(n.outputs[0].dtype)
        tmpl = _low_steps(n.op.expr['py'](cdt), _low_of(raw[first], [v.dtype for v in n.inputs]))
        e = f"{_NP_CTOR[od]}({tmpl.format(*args)})"
        rnd = _ROUND.get(n.outputs[0].dtype.name)
        body.append(f"t{k} = {rnd}({e})" if rnd else f"t{k} = {e}")
        names[n.outputs[0]] = f"t{k}"
        kdt[n.outputs[0]] = od
    if storage:
        return ([v.dtype.name for v in group.inputs], [o.dtype.name for o in outputs], body,
                [names[o] for o in outputs])
    return [kdt[v] for v in group.inputs], [kdt[o] for o in outputs], body, [names[o] for o in outputs]


# NEE_CPU_RENDERER=numba renders every elementwise kernel as Numba source (the reference
# renderer); by default kernels the LLVM IR renderer covers are built with llvmlite directly
RENDERER = os.environ.get("NEE_CPU_RENDERER", "llvm")


def load_group(prefix: str, name: str, in_dt: list, out_dt: list, body: list, results: list,
               native_only: bool = False):
    """(kernel, source) of an elementwise kernel: LLVM IR through llvmlite when the
    renderer covers every expression (~25 ms cold), else generated Numba source (~0.5 s).

    ``in_dt`` / ``out_dt`` name the operands' storage dtypes: the LLVM kernel loads and stores
    float16/bfloat16 itself; the Numba kernel takes them as float32 copies (:func:`native_low` tells
    which).  ``native_only``: (None, source) instead of a Numba kernel."""
    cin = [_dt.compute_dtype(_dt.to_dtype(d)).name if d in _LOW_NAMES else d for d in in_dt]
    cout = [_dt.compute_dtype(_dt.to_dtype(d)).name if d in _LOW_NAMES else d for d in out_dt]
    src = render_group(name, cin, cout, body, results)
    if RENDERER == "llvm":
        from . import llvm_render
        try:
            return llvm_render.load(prefix, name, in_dt, out_dt, body, results, src)
        except NotImplementedError:
            pass
    if native_only:
        return None, src
    return codegen.load_kernel(prefix, src), src


def launch_group(kern, outs: list, ins: list) -> None:
    """Run a fused group's kernel: ``outs`` (same shape, any layout) from broadcast ``ins``."""
    if outs[0].size == 0:
        return
    if native_low(kern):   # float16/bfloat16 operands as they are (compile_group)
        if len(outs) == 1:
            ins = [_unalias(outs[0], a) for a in ins]
        else:
            ins = [a.copy() if any(np.may_share_memory(o, a) for o in outs) else a for a in ins]
        run_strided(kern, outs, ins)
        return
    tmp = [_f32_scratch(o.shape) if _dt.is_low_np(o.dtype) else o for o in outs]
    ins = [_widen(a) for a in ins]
    if len(outs) == 1:
        ins = [_unalias(outs[0], a) for a in ins]
    else:
        ins = [a.copy() if any(np.may_share_memory(o, a) for o in outs) else a for a in ins]
    run_strided(kern, tmp, ins)
    for o, t in zip(outs, tmp):
        if t is not o:
            np.copyto(o, t, casting="unsafe")
