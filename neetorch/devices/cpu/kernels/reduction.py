"""CPU kernels for reductions and scans.

One generated Numba kernel per (reduce kind, input dtype, output dtype) serves every
layout: the launcher views the input as ``(outer, reduce, inner)`` with arbitrary
element strides (permuting and merging dims with no copy when the reduced dims
collapse into one), and the kernel picks its loop at run time:

* row mode (``reduce`` unit-stride, or no inner dim): one horizontal, vectorized
  loop per output element (float sums in blocks of 2048 for accuracy);
* column mode (``inner`` unit-stride): a row of accumulators, one contiguous input
  row added per reduction step (reducing a leading dim of a contiguous tensor);
* a general strided loop otherwise.

Work is split over ``outer`` (or ``inner``) with ``threads.run_parallel``; a full
reduction of a large tensor is split over ``reduce`` into partial accumulators.
Scans (cumsum/cumprod/cummax/cummin) have their own small kernel over
``(outer, n, inner)``.

For float32 / float64 inputs the kernel behind the plan is reduce_ir's LLVM IR version of the
generated one (the same loops and arithmetic; tens of ms to compile cold instead of 1-2.5 s),
unless NEE_IR_REDUCE=0; integer and bool inputs keep the Numba kernels.
"""
from __future__ import annotations

import math

import numpy as np

from ....tensor.dtypes import compute_np, copy_into, is_low_np, widen

from .. import codegen, kernel, threads
from . import ir_small, reduce_ir

_NB = {"bool": "boolean", "uint8": "uint8", "int8": "int8", "int16": "int16", "int32": "int32",
       "int64": "int64", "float32": "float32", "float64": "float64"}
_CT = {"bool": "np.bool_", "uint8": "np.uint8", "int8": "np.int8", "int16": "np.int16", "int32": "np.int32",
       "int64": "np.int64", "float32": "np.float32", "float64": "np.float64"}

_BLOCKED = {"sum", "mean", "nansum", "cnz"}    # horizontal loop summed in blocks (accuracy)
_ARG = {"argmax", "argmin"}      # order-dependent (first occurrence): reduced dims keep their logical order
BLOCK = 2048
LANES = 64     # interleaved accumulators for compare/select reductions (a runtime value: see m[10])


def _acc_dtype(kind: str, dt: str) -> str:
    if kind in ("sum", "mean", "nansum", "prod"):
        return "float64" if dt.startswith("float") else "int64"
    if kind == "cnz":
        return "int64"
    if kind in ("any", "all"):
        return "bool"
    return dt


def _lowest(dt: str, hi: bool) -> str:
    if dt == "bool":
        return "True" if hi else "False"
    if dt.startswith("float"):
        return f"{_CT[dt]}({'np.inf' if hi else '-np.inf'})"
    info = np.iinfo(np.dtype(dt))
    return f"{_CT[dt]}({info.max if hi else info.min})"


def _spec(kind: str, dt: str, acc: str):
    """(init expr, update statement on `a` with value `v` (and index `r`), final expr of `a`)."""
    isf = dt.startswith("float")
    if kind in ("sum", "mean"):
        upd = "a += v"
    elif kind == "nansum":
        upd = "a += v if v == v else 0.0" if isf else "a += v"
    elif kind == "cnz":
        upd = "a += 1 if v != 0 else 0"
    elif kind == "prod":
        upd = "a *= v"
    elif kind == "amax":
        upd = "a = v if (v > a or v != v) else a" if isf else "a = v if v > a else a"
    elif kind == "amin":
        upd = "a = v if (v < a or v != v) else a" if isf else "a = v if v < a else a"
    elif kind == "any":
        upd = "a = a | (v != 0)"
    elif kind == "all":
        upd = "a = a & (v != 0)"
    elif kind == "argmax":
        upd = ("if v > a or (v != v and a == a):\n    a = v\n    ai = r" if isf else
               "if v > a:\n    a = v\n    ai = r")
    elif kind == "argmin":
        upd = ("if v < a or (v != v and a == a):\n    a = v\n    ai = r" if isf else
               "if v < a:\n    a = v\n    ai = r")
    else:
        raise ValueError(kind)
    if kind in ("sum", "mean", "nansum", "cnz"):
        init = f"{_CT[acc]}(0)"
    elif kind == "prod":
        init = f"{_CT[acc]}(1)"
    elif kind in ("amax", "argmax"):
        init = _lowest(dt, False)
    elif kind in ("amin", "argmin"):
        init = _lowest(dt, True)
    elif kind == "any":
        init = "False"
    else:
        init = "True"
    fin = "a / nr" if kind == "mean" else "a"
    return init, upd, fin


def _ind(block: str, n: int) -> list:
    return [" " * n + ln for ln in block.split("\n")]


def render_reduce(kind: str, dt: str, out: str) -> str:
    acc = _acc_dtype(kind, dt)
    init, upd, fin = _spec(kind, dt, acc)
    isarg = kind in _ARG
    cast = acc != dt and kind in ("sum", "mean", "nansum", "prod")
    load = (lambda e: f"{_CT[acc]}({e})") if cast else (lambda e: e)
    store = (lambda e: f"{_CT[out]}({e})") if out != "bool" else (lambda e: e)
    fm = '{"reassoc", "contract"}' if (kind in _BLOCKED or kind == "prod") and acc.startswith("float") else "False"
    sig = f"void({_NB[dt]}[::1], {_NB[out]}[::1], int64[::1], int64[::1])"
    L = [f"# neetorch reduction kernel: {kind}({dt}) -> {out}, acc {acc}",
         "import numpy as np", "from numba import njit", "",
         f'@njit("{sig}", cache=True, nogil=True, error_model="numpy", fastmath={fm})',
         "def kernel(x, o, oi, m):",
         "    no = m[0]; nr = m[1]; ni = m[2]; xso = m[3]; xsr = m[4]; xsi = m[5]; xoff = m[6]",
         "    oso = m[7]; osi = m[8]; ooff = m[9]",
         "    W = m[10]",
         f"    lv = np.empty(W, np.{acc if acc != 'bool' else 'bool_'})",
         "    li = np.zeros(W, np.int64)",
         "    if xsi == 1 and ni > 1 and xsr != 1:",
         "        # column mode: a row of accumulators",
         f"        buf = np.empty(min(ni, {BLOCK}), np.{acc if acc != 'bool' else 'bool_'})",
         "        ibuf = np.zeros(buf.shape[0], np.int64)" if isarg else "        ibuf = np.zeros(0, np.int64)",
         "        for io in range(no):",
         f"            for i0 in range(0, ni, {BLOCK}):",
         f"                nb = min(ni - i0, {BLOCK})",
         "                for i in range(nb):",
         f"                    buf[i] = {init}"]
    if isarg:
        L.append("                    ibuf[i] = 0")
    L += ["                for r in range(nr):",
          "                    q = xoff + io * xso + i0 + r * xsr",
          "                    y = x[q:q + nb]",
          "                    for i in range(nb):",
          "                        a = buf[i]"]
    if isarg:
        L.append("                        ai = ibuf[i]")
    L.append(f"                        v = {load('y[i]')}")
    L += _ind(upd, 24)
    L.append("                        buf[i] = a")
    if isarg:
        L.append("                        ibuf[i] = ai")
    L += ["                p = ooff + io * oso + i0 * osi",
          "                for i in range(nb):",
          "                    a = buf[i]",
          f"                    o[p + i * osi] = {store(fin)}"]
    if isarg:
        L.append("                    oi[p + i * osi] = ibuf[i]")
    L += ["        return",
          "    for io in range(no):",
          "        for ii in range(ni):",
          "            q = xoff + io * xso + ii * xsi",
          f"            a = {init}"]
    if isarg:
        L.append("            ai = 0")
    L.append("            if xsr == 1:")
    if kind in _BLOCKED:
        L += [f"                for r0 in range(0, nr, {BLOCK}):",
              f"                    b = {init}",
              f"                    y = x[q + r0:q + min(nr, r0 + {BLOCK})]",
              f"                    for r in range(y.shape[0]):",
              f"                        v = {load('y[r]')}"]
        L += [ln.replace("a +=", "b +=", 1) for ln in _ind(upd, 24)]
        L.append("                    a += b")
    else:
        # LANES interleaved accumulators (a column reduction over a (nr/LANES, LANES) view) vectorize
        # compare/select updates that a single scalar accumulator does not; then combine lanes, then the tail
        L += ["                nf = (nr // W) * W if nr >= 4 * W else 0",
              "                if nf:",
              "                    for j in range(W):",
              f"                        lv[j] = {init}",
              "                        li[j] = j" if isarg else "                        pass",
              "                    for r0 in range(0, nf, W):",
              "                        y = x[q + r0:q + r0 + W]",
              "                        for j in range(W):",
              "                            a = lv[j]",
              f"                            v = {load('y[j]')}"]
        if isarg:
            L += ["                            ai = li[j]", "                            r = r0 + j"]
        L += _ind(upd, 28)
        L.append("                            lv[j] = a")
        if isarg:
            L.append("                            li[j] = ai")
        L.append(f"                    a = {init}")
        if isarg:
            L.append("                    ai = 0")
        L.append("                    for j in range(W):")
        if isarg:
            # first occurrence among equal lane winners; the first NaN wins
            cmp = ">" if kind == "argmax" else "<"
            L += ["                        v = lv[j]", "                        r = li[j]",
                  f"                        if v {cmp} a or (v != v and a == a) or ((v == a or (v != v and a != a)) "
                  "and r < ai):",
                  "                            a = v", "                            ai = r"]
        else:
            # tree-combine the lanes (each halving step is an elementwise, vectorizable loop)
            L[-1] = "                    h = W // 2"
            L += ["                    while h >= 1:",
                  "                        for j in range(h):",
                  "                            a = lv[j]",
                  "                            v = lv[j + h]"]
            L += _ind(upd, 28)
            L += ["                            lv[j] = a",
                  "                        h //= 2",
                  "                    a = lv[0]"]
        L += ["                y = x[q:q + nr]", "                for r in range(nf, nr):", f"                    v = {load('y[r]')}"]
        L += _ind(upd, 20)
    L += ["            else:",
          "                for r in range(nr):",
          f"                    v = {load('x[q + r * xsr]')}"]
    L += _ind(upd, 20)
    L += ["            p = ooff + io * oso + ii * osi",
          f"            o[p] = {store(fin)}"]
    if isarg:
        L.append("            oi[p] = ai")
    L.append("")
    # raw partial accumulator over one strided run (parallel full sums; compiled lazily)
    if kind in _BLOCKED:
        L += ["@njit(cache=True, nogil=True, error_model='numpy', fastmath=" + fm + ")",
              "def partial(x, q, nr, xsr, res, k):",
              f"    a = {init}",
              "    if xsr == 1:"]
        if kind in _BLOCKED:
            L += [f"        for r0 in range(0, nr, {BLOCK}):",
                  f"            b = {init}",
                  f"            y = x[q + r0:q + min(nr, r0 + {BLOCK})]",
                  f"            for r in range(y.shape[0]):",
                  f"                v = {load('y[r]')}"]
            L += [ln.replace("a +=", "b +=", 1) for ln in _ind(upd, 16)]
            L.append("            a += b")
        else:
            L += ["        y = x[q:q + nr]", "        for r in range(nr):", f"            v = {load('y[r]')}"]
            L += _ind(upd, 12)
        L += ["    else:", "        for r in range(nr):", f"            v = {load('x[q + r * xsr]')}"]
        L += _ind(upd, 12)
        L += ["    res[k] = a", ""]
    return "\n".join(L) + "\n"


_kcache: dict = {}


def _get(kind, dt, out):
    """(kernel, partial) of this reduction: the LLVM IR ones (reduce_ir: float32 / float64 inputs, same loops
    and arithmetic, checked arguments) unless NEE_IR_REDUCE=0, else the generated Numba ones."""
    key = (kind, dt, out, reduce_ir.MODE[0])
    k = _kcache.get(key)
    if k is None:
        dt, out = np.dtype(dt).name, np.dtype(out).name
        k = reduce_ir.kernels(kind, dt, out, BLOCK, LANES)
        if k is not None:
            _kcache[key] = k
            return k
        mod_k = codegen.load_kernel(f"red_{kind}_{dt}", render_reduce(kind, dt, out))
        part = None
        if kind in _BLOCKED:
            part = codegen.load_kernel(f"red_{kind}_{dt}", render_reduce(kind, dt, out), attr="partial")
        k = (mod_k, part)
        _kcache[key] = k
    return k


# ------------------------------------------------------------------ layout planning
def _merge(dims, nstr):
    """Merge consecutive (n, strides...) entries where every stride list is contiguous."""
    out = []
    for d in dims:
        if out:
            p = out[-1]
            if all(p[1 + k] == d[1 + k] * d[0] for k in range(nstr)):
                out[-1] = (p[0] * d[0],) + tuple(d[1:])
                continue
        out.append(tuple(d))
    return out


def _estrides(a):
    isz = a.itemsize
    return [s // isz for s in a.strides]


def _base(a):
    """(1-D buffer spanning ``a``, element offset of a[0,...,0]) without copying."""
    if a.flags.c_contiguous:
        return a.reshape(-1), 0
    from .. import layout
    buf, off, _ = layout.flat(a)
    return buf, off


def plan(x, o, red, ordered):
    """Describe reducing dims ``red`` of ``x`` into ``o`` (same ndim, size 1 on ``red``) as 3-D strided loops.

    Returns (xbuf, obuf, meta list) or None when the reduced or kept dims cannot be collapsed.
    """
    xs = _estrides(x)
    os_ = _estrides(o)
    xbuf, xoff = _base(x)
    obuf, ooff = _base(o)
    rl, kl = [], []
    for d, n in enumerate(x.shape):
        if n == 1:
            continue
        sx, so = xs[d], os_[d]
        if d in red:
            if not ordered and sx < 0:
                xoff += (n - 1) * sx
                sx = -sx
            rl.append((n, sx))
        else:
            if not ordered and sx < 0:
                xoff += (n - 1) * sx
                ooff += (n - 1) * so
                sx, so = -sx, -so
            kl.append((n, sx, so))
    if not ordered:
        rl.sort(key=lambda t: -abs(t[1]))
        kl.sort(key=lambda t: -abs(t[1]))
    rl = _merge(rl, 1)
    kl = _merge(kl, 2)
    if len(rl) > 1 or len(kl) > 2:
        return None
    nr, sr = rl[0] if rl else (1, 1)
    if not kl:
        ko, ki = (1, 0, 0), (1, 0, 0)
    elif len(kl) == 1:
        if rl and abs(kl[0][1]) < abs(sr):
            ko, ki = (1, 0, 0), kl[0]
        else:
            ko, ki = kl[0], (1, 0, 0)
    else:
        ko, ki = kl
    return xbuf, obuf, [ko[0], nr, ki[0], ko[1], sr, ki[1], xoff, ko[2], ki[2], ooff, LANES]


_COMBINE = {
    "sum": lambda p: p.sum(), "mean": lambda p: p.sum(), "nansum": lambda p: p.sum(), "cnz": lambda p: p.sum(),
    "prod": lambda p: p.prod(), "amax": lambda p: p.max(), "amin": lambda p: p.min(),
    "any": lambda p: p.any(), "all": lambda p: p.all(),
}


def reduce_into(kind: str, x: np.ndarray, out: np.ndarray, red, idx: np.ndarray | None = None) -> None:
    """out (C-contiguous, reduced or keepdim shape) = reduce ``kind`` of ``x`` over dims ``red``."""
    red = tuple(red)
    if out.size == 0:
        return
    if is_low_np(x.dtype):   # float16/bfloat16: computed in float32 (widened by the cast kernel, order "K")
        x = widen(x)
    if is_low_np(out.dtype):
        tmp = np.empty(out.shape, np.float32)
        reduce_into(kind, x, tmp, red, idx)
        copy_into(out, tmp)   # (float32 -> float16 overflow is inf, as in torch, without a warning)
        return
    kshape = tuple(1 if d in red else n for d, n in enumerate(x.shape))
    o = out.reshape(kshape)
    oi = idx.reshape(kshape) if idx is not None else None
    ordered = kind in _ARG
    p = plan(x, o, red, ordered)
    if p is None:
        kept = [d for d in range(x.ndim) if d not in red]
        perm = kept + list(red)
        x = np.ascontiguousarray(x.transpose(perm))
        o = o.transpose(perm)
        oi = oi.transpose(perm) if oi is not None else None
        p = plan(x, o, tuple(range(len(kept), x.ndim)), ordered)
    xbuf, obuf, m = p
    if oi is None and (kind == "mean" or kind == "sum"):
        g = ir_small.bind_rows(kind, xbuf, obuf, m)     # row sums / means: an IR kernel (no Numba)
        if g is not None:
            g(xbuf, obuf)
            return
    ibuf = _base(oi)[0] if oi is not None else _EMPTY_I64
    kern, part = _get(kind, x.dtype, out.dtype)   # keyed by dtype objects: .name is slow
    no, nr, ni = m[0], m[1], m[2]
    total = no * nr * ni
    nt = threads.NUM_THREADS
    if total < _PAR_MIN or nt == 1:
        kern(xbuf, obuf, ibuf, np.array(m, np.int64))
        return
    if no >= nt:
        d, s_x, s_o = 0, m[3], m[7]
    elif m[5] == 1 and ni > 1 and m[4] != 1 and nr >= 2 * nt and (kind in _COMBINE or kind == "mean"):
        _parallel_bands(kind, kern, xbuf, obuf, m, nt)
        return
    elif ni >= 16 * nt:
        d, s_x, s_o = 2, m[5], m[8]
    elif no * ni == 1 and part is not None and nr >= 4 * nt:
        _parallel_full(kind, part, xbuf, m, obuf, nr)
        return
    elif no * ni == 1 and kind in _COMBINE and nr >= 4 * nt:
        # split the one long run; partial results in the output dtype, combined here
        chunks = threads.split(nr, nt)
        tmp = np.empty(len(chunks), obuf.dtype)

        def f(c):
            k, (s, e) = c
            mm = list(m)
            mm[1] = e - s
            mm[6] += s * m[4]
            mm[9] = k
            kern(xbuf, tmp, ibuf, np.array(mm, np.int64))
        threads.run_parallel(f, list(enumerate(chunks)))
        obuf[m[9]] = _COMBINE[kind](tmp)
        return
    elif no >= 2:
        d, s_x, s_o = 0, m[3], m[7]
    else:
        kern(xbuf, obuf, ibuf, np.array(m, np.int64))
        return
    metas = _split_metas(m, d, s_x, s_o, nt)
    threads.run_parallel(lambda mm: kern(xbuf, obuf, ibuf, mm), metas)


def _split_metas(m, d, s_x, s_o, nt):
    """The metas of ``m``'s launch cut into ``nt`` parts along its dim ``d`` (0: outer, 2: inner), the input's
    and the output's offsets advanced by ``s_x`` / ``s_o`` elements a step of that dim."""
    metas = []
    for s, e in threads.split(m[d], nt):
        mm = list(m)
        mm[d] = e - s
        mm[6] += s * s_x
        mm[9] += s * s_o
        metas.append(np.array(mm, np.int64))
    return metas


_EMPTY_I64 = np.zeros(0, np.int64)
_BOUND_KINDS = {"sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin"}


def bind_reduce(name, attrs, out, ins):
    """``f(outs, ins)`` doing reduce_into for C-contiguous float32/float64 arrays of these layouts (the plan and
    the per-thread metas made once; False: the thread count changed), or None where reduce_into takes one of
    its other paths (bands, one long run split, copies) or the op is not a plain reduction."""
    kind = _BOUND_KINDS.get(name)
    if kind is None or len(ins) != 1:
        return None
    x = ins[0]
    if x.ndim == 0 or x.dtype not in (np.float32, np.float64) or out.dtype != x.dtype or not x.flags.c_contiguous \
            or not out.flags.c_contiguous or not out.flags.writeable or np.may_share_memory(out, x):
        return None
    red = attrs.get("dims")
    if not isinstance(red, (tuple, list)) or not all(isinstance(d, int) and 0 <= d < x.ndim for d in red):
        return None
    red = tuple(red)
    kshape = tuple(1 if d in red else n for d, n in enumerate(x.shape))
    if out.size != int(np.prod(kshape)):
        return None
    p = plan(x, out.reshape(kshape), red, False)
    if p is None:
        return None
    m = p[2]
    nt0 = threads.NUM_THREADS
    g = ir_small.bind_rows(kind, p[0], p[1], m) if kind in ("sum", "mean") else None
    if g is not None:       # row sums / means: an IR kernel (no Numba)
        def f(outs, ins):
            if threads.NUM_THREADS != nt0:
                return False
            g(ins[0].reshape(-1), outs[0].reshape(-1))
            return True
        if getattr(g, "calls", None) is not None:
            f.calls = lambda outs, ins: g.calls(ins[0].reshape(-1), outs[0].reshape(-1))
        return f
    kern = _get(kind, x.dtype, out.dtype)[0]
    no, nr, ni = m[0], m[1], m[2]
    nt = threads.NUM_THREADS
    # reduce_into's choice of split: the plain ones only
    if no * nr * ni < _PAR_MIN or nt == 1:
        d = None
    elif no >= nt:
        d, s_x, s_o = 0, m[3], m[7]
    elif m[5] == 1 and ni > 1 and m[4] != 1 and nr >= 2 * nt:
        return None
    elif ni >= 16 * nt:
        d, s_x, s_o = 2, m[5], m[8]
    elif no * ni == 1 and nr >= 4 * nt:
        return None
    elif no >= 2:
        d, s_x, s_o = 0, m[3], m[7]
    else:
        d = None
    if d is None:
        metas = [np.array(m, np.int64)]
    else:
        metas = _split_metas(m, d, s_x, s_o, nt)
    nt0 = threads.NUM_THREADS
    ib = _EMPTY_I64
    if len(metas) == 1:
        m0 = metas[0]

        def f(outs, ins):
            if threads.NUM_THREADS != nt0:
                return False
            kern(ins[0].reshape(-1), outs[0].reshape(-1), ib, m0)
            return True
        return f

    def f(outs, ins):
        if threads.NUM_THREADS != nt0:
            return False
        xb, ob = ins[0].reshape(-1), outs[0].reshape(-1)
        threads.run_parallel(lambda mm: kern(xb, ob, ib, mm), metas)
        return True
    return f
# a reduction reads each element once (~0.1 ns each): below this a pool hand-off costs more than it saves
_PAR_MIN = max(threads.PARALLEL_THRESHOLD, 1 << 18)


def _parallel_bands(kind, kern, xbuf, obuf, m, nt):
    """Column mode with few outer rows: each thread reduces a band of the reduced dim into its own
    partial row (contiguous streams; splitting the inner dim instead makes threads read interleaved
    half-rows, which measured 5-10x slower), then the partial rows are combined here."""
    no, nr, ni = m[0], m[1], m[2]
    bands = threads.split(nr, nt)
    tmp = np.empty((len(bands), no, ni), obuf.dtype)
    tb = tmp.reshape(-1)

    def f(c):
        k, (s, e) = c
        mm = list(m)
        mm[1] = e - s
        mm[6] += s * m[4]
        mm[7], mm[8], mm[9] = ni, 1, k * no * ni
        kern(xbuf, tb, _EMPTY_I64, np.array(mm, np.int64))
    threads.run_parallel(f, list(enumerate(bands)))
    if kind == "mean":
        w = np.array([e - s for s, e in bands], np.float64).reshape(-1, 1, 1)
        res = (tmp * w).sum(0) / nr
    else:
        res = _COMBINE_AX[kind](tmp)
    isz = obuf.itemsize
    view = np.lib.stride_tricks.as_strided(obuf[m[9]:], shape=(no, ni), strides=(m[7] * isz, m[8] * isz))
    np.copyto(view, res, casting="unsafe")


_COMBINE_AX = {
    "sum": lambda p: p.sum(0), "nansum": lambda p: p.sum(0), "cnz": lambda p: p.sum(0),
    "prod": lambda p: p.prod(0), "amax": lambda p: p.max(0), "amin": lambda p: p.min(0),
    "any": lambda p: p.any(0), "all": lambda p: p.all(0),
}


def _parallel_full(kind, part, xbuf, m, obuf, nr):
    acc = _acc_dtype(kind, np.dtype(xbuf.dtype).name)
    nt = threads.NUM_THREADS
    chunks = threads.split(nr, nt * 2)
    res = np.empty(len(chunks), np.bool_ if acc == "bool" else np.dtype(acc))
    xoff, sr = m[6], m[4]
    threads.run_parallel(lambda c: part(xbuf, xoff + c[1][0] * sr, c[1][1] - c[1][0], sr, res, c[0]),
                         list(enumerate(chunks)))
    if kind in ("sum", "mean", "nansum") and res.dtype.kind == "f":
        v = math.fsum(res.tolist())
    else:
        v = _COMBINE[kind](res)
    if kind == "mean":
        v = v / nr
    obuf[m[9]] = v


# ------------------------------------------------------------------ op kernels
def _red(kind):
    def k(backend, outs, ins, attrs):
        x = ins[0]
        dims = attrs["dims"]
        if x.ndim == 0:
            dims = ()
        reduce_into(kind, x, outs[0], dims)
    k.__name__ = f"reduce_{kind}"
    return k


for _n, _k in (("sum", "sum"), ("mean", "mean"), ("nansum", "nansum"), ("prod", "prod"), ("amax", "amax"),
               ("amin", "amin"), ("any", "any"), ("all", "all"), ("count_nonzero", "cnz")):
    kernel(_n)(_red(_k))


@kernel("max_dim", "min_dim")
def _max_dim(backend, outs, ins, attrs):
    x = ins[0]
    kind = "argmax" if attrs["op"] == "max" else "argmin"
    dims = (attrs["dim"],) if x.ndim else ()
    reduce_into(kind, x, outs[0], dims, idx=outs[1])


@kernel("argmax", "argmin")
def _argmax(backend, outs, ins, attrs):
    x = ins[0]
    kind = "argmax" if attrs["op"] == "argmax" else "argmin"
    dim = attrs["dim"]
    if dim is None or x.ndim == 0:
        x = np.ascontiguousarray(x).reshape(-1)
        dims = (0,)
        shp = (1,)
    else:
        dims = (dim,)
        shp = tuple(1 if d == dim else n for d, n in enumerate(x.shape))
    vals = np.empty(shp, compute_np(x.dtype))
    reduce_into(kind, x, vals, dims, idx=outs[0].reshape(shp))


# ------------------------------------------------------------------ scans
def render_scan(kind: str, dt: str, out: str) -> str:
    acc = out if kind in ("cummax", "cummin") else ("float64" if dt.startswith("float") else "int64")
    if out.startswith("float") and not dt.startswith("float"):
        acc = "float64"
    isf = dt.startswith("float") or acc.startswith("float")
    load = (lambda e: f"{_CT[acc]}({e})") if acc != dt else (lambda e: e)
    op = {"cumsum": "a += v", "cumprod": "a *= v",
          "cummax": ("if v >= a or v != v:\n    a = v\n    ai = r" if isf else "if v >= a:\n    a = v\n    ai = r"),
          "cummin": ("if v <= a or v != v:\n    a = v\n    ai = r" if isf else "if v <= a:\n    a = v\n    ai = r")}[kind]
    init = {"cumsum": f"{_CT[acc]}(0)", "cumprod": f"{_CT[acc]}(1)",
            "cummax": _lowest(acc, False), "cummin": _lowest(acc, True)}[kind]
    isarg = kind in ("cummax", "cummin")
    store = (lambda e: f"{_CT[out]}({e})") if out != "bool" else (lambda e: e)
    sig = f"void({_NB[dt]}[::1], {_NB[out]}[::1], int64[::1], int64[::1])"
    L = [f"# neetorch scan kernel: {kind}({dt}) -> {out}",
         "import numpy as np", "from numba import njit", "",
         f'@njit("{sig}", cache=True, nogil=True, error_model="numpy")',
         "def kernel(x, o, oi, m):",
         "    no = m[0]; n = m[1]; ni = m[2]",
         "    if ni == 1:",
         "        for io in range(no):",
         "            q = io * n",
         f"            a = {init}",
         "            ai = 0",
         "            for r in range(n):",
         f"                v = {load('x[q + r]')}"]
    L += _ind(op, 16)
    L.append(f"                o[q + r] = {store('a')}")
    if isarg:
        L.append("                oi[q + r] = ai")
    L += ["        return",
          f"    buf = np.empty(ni, np.{acc})",
          "    ibuf = np.zeros(ni, np.int64)",
          "    for io in range(no):",
          "        for i in range(ni):",
          f"            buf[i] = {init}",
          "            ibuf[i] = 0",
          "        for r in range(n):",
          "            q = (io * n + r) * ni",
          "            for i in range(ni):",
          "                a = buf[i]",
          "                ai = ibuf[i]",
          f"                v = {load('x[q + i]')}"]
    L += _ind(op, 16)
    L += ["                buf[i] = a", "                ibuf[i] = ai", f"                o[q + i] = {store('a')}"]
    if isarg:
        L.append("                oi[q + i] = ai")
    return "\n".join(L) + "\n"


_scache: dict = {}


@kernel("cumsum", "cumprod", "cummax", "cummin")
def _scan(backend, outs, ins, attrs):
    kind = attrs["op"]
    x = ins[0]
    out = outs[0]
    if out.size == 0:
        return
    if is_low_np(x.dtype):   # float16/bfloat16: computed in float32
        x = widen(x)
    if is_low_np(out.dtype):
        tmp = np.empty(out.shape, np.float32)
        _scan(backend, [tmp] + list(outs[1:]), [x], attrs)
        copy_into(out, tmp)
        return
    x = np.ascontiguousarray(x)
    d = attrs["dim"]
    shp = x.shape
    if x.ndim == 0:
        no, n, ni = 1, 1, 1
    else:
        no = math.prod(shp[:d])       # (math.prod: np.prod costs ~2 us a call on a tuple)
        n = shp[d]
        ni = math.prod(shp[d + 1:])
    key = (kind, x.dtype, out.dtype)
    k = _scache.get(key)
    if k is None:
        k = codegen.load_kernel(f"scan_{kind}", render_scan(kind, x.dtype.name, out.dtype.name))
        _scache[key] = k
    idx = outs[1].reshape(-1) if len(outs) > 1 else _EMPTY_I64
    xb, ob = x.reshape(-1), out.reshape(-1)
    nt = threads.NUM_THREADS
    if no * n * ni >= threads.PARALLEL_THRESHOLD and nt > 1 and no >= nt:
        metas = []
        for s, e in threads.split(no, nt):
            metas.append((s, e))

        def f(c):
            s, e = c
            a, b = s * n * ni, e * n * ni
            k(xb[a:b], ob[a:b], idx[a:b] if idx.size else idx, np.array([e - s, n, ni], np.int64))
        threads.run_parallel(f, metas)
        return
    k(xb, ob, idx, np.array([no, n, ni], np.int64))


# ------------------------------------------------------------------ median / nanmedian
# torch's CPU kernels (ATen/native/Sorting.cpp).  With a dim, median_with_indices_impl runs std::nth_element on each
# row's indices 0..n-1 under ``ip[i] < ip[j] || (ip[i] == ip[j] && i < j)`` (nanmedian: ``|| (isnan(ip[j]) &&
# !isnan(ip[i]))`` too), a total order wherever the median is a number: the stable sort's element, ties and
# -0.0 == +0.0 included (numpy's stable argsort here); a row with a NaN gives median its first NaN.  Only
# nanmedian's all-NaN rows reach a tie: NaNs are equivalent there, and the index is the one nth_element(0, 0, n)
# leaves in front among n equal elements (a function of n: :func:`_nth_of_equal`; 2 of 5, 8 of 10, ...).
# Without a dim, median_impl runs std::nth_element on the VALUES of ``input.clone()`` (plain ``<``; nanmedian: NaN
# largest) and median returns quiet_NaN() for any NaN: the median is the number the stable sort gives, but its zero
# sign (-0.0 == +0.0) and an all-NaN nanmedian's NaN bits are those of the element nth_element leaves there, in the
# clone's memory order.  That runs here as the emulation itself (ops/_stl_order.py: keys_of + the compiled
# nth_element, one pass, faster than the stable argsort it replaces; 2**20 random normal float32, min of 5:
# keys_of 6 ms + run_rows(TOPK_NTH) 8 ms vs np.argsort(kind="stable") 124 ms; nee.median(x) 102 -> 17 ms,
# nee.nanmedian(x) 104 -> 16 ms, 2**20 int64 in [-1000, 1000) 66 -> 9 ms: min of 5, 2-core host at load ~2).
# Everything measured against torch 2.13 (tests/test_median_ties_s20.py).
def _nth_of_equal(n: int) -> int:
    """The index std::nth_element(first, first, first + n) leaves at ``first`` among n equivalent elements."""
    j = _NTH_EQ.get(n)
    if j is None:
        from ....ops import _stl_order as S
        j = _NTH_EQ[n] = int(S.run_rows(np.zeros((1, n), np.int64), S.TOPK_NTH, 1)[0, 0])
    return j


_NTH_EQ: dict = {}


def _clone_axes(x):
    """The axes (slowest first) of torch's ``x.clone()`` memory order: empty_like's preserve_format strides
    (tensor/_layout.like_strides: a dense input's own, else infer_dense_strides'); size-1 dims' places do not
    change the order."""
    from ....tensor import _layout
    st = _layout.like_strides(x.shape, [s // x.itemsize for s in x.strides])
    if st is None:
        return list(range(x.ndim))
    return sorted(range(x.ndim), key=lambda d: -st[d])


def _median_all(x, a, ignore_nan):
    """median() / nanmedian() of every element: (value, index into ``a``, row-major)."""
    n = a.size
    nan = np.isnan(a) if a.dtype.kind == "f" else None
    if nan is not None and not ignore_nan and nan.any():
        j = int(np.argmax(nan))
        return np.array(np.nan, a.dtype), j       # (quiet_NaN(), whatever the input's NaNs)
    k = max((n - (0 if nan is None else int(nan.sum())) - 1) // 2, 0)
    from ....ops import _stl_order as S
    axes = _clone_axes(x)
    xt = np.transpose(x, axes)
    flat = xt.reshape(-1)
    j = int(S.run_rows(S.keys_of(flat.reshape(1, -1)), S.TOPK_NTH, k + 1)[0, k])
    if x.ndim:
        c = np.unravel_index(j, xt.shape)
        logical = [0] * x.ndim
        for ax, cc in zip(axes, c):
            logical[ax] = cc
        i = int(np.ravel_multi_index(logical, x.shape))
    else:
        i = 0
    return flat[j], i


@kernel("median")
def _median(backend, outs, ins, attrs):
    x = ins[0]
    d = attrs["dim"]
    ignore_nan = attrs.get("ignore_nan", False)      # (nanmedian: the CPU frontend only, ops/statistics.py)
    if d is None or x.ndim == 0:
        if x.size:
            v, i = _median_all(x, np.ascontiguousarray(x).reshape(-1), ignore_nan)
            np.copyto(outs[0], v, casting="unsafe")
            outs[1][...] = i
        return
    a = np.ascontiguousarray(np.moveaxis(x, d, -1))
    a = a.reshape(-1, a.shape[-1]) if a.size else a.reshape(-1, x.shape[d])
    rows, n = a.shape
    if rows == 0:
        return
    fl = a.dtype.kind == "f"        # (bfloat16 arrives as float32: devices/cpu/__init__.py _ORDER_KERNELS)
    order = np.argsort(a, axis=-1, kind="stable")       # NaN sort last
    if fl:
        nan = np.isnan(a)
    if ignore_nan and fl:
        cnt = n - nan.sum(axis=-1)          # the non-NaN values of each row
        idx = order[np.arange(rows), np.maximum((cnt - 1) // 2, 0)]
        if not cnt.all():
            idx[cnt == 0] = _nth_of_equal(n)
    else:
        idx = order[:, (n - 1) // 2].copy()
        if fl and not ignore_nan:
            has = nan.any(axis=-1)
            if has.any():
                idx[has] = np.argmax(nan[has], axis=-1)
    vals = a[np.arange(rows), idx]
    np.copyto(outs[0], vals.reshape(outs[0].shape), casting="unsafe")
    np.copyto(outs[1], idx.reshape(outs[1].shape))


def _bench():  # pragma: no cover - `python3 -m neetorch.devices.cpu.kernels.reduction`
    import time

    import neetorch as nee

    def bt(f, n=30):
        f()
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        return min(ts)

    rng = np.random.default_rng(0)
    a = rng.standard_normal(1 << 24).astype(np.float32)
    c = rng.standard_normal(1 << 24)
    b = rng.standard_normal((4096, 1024)).astype(np.float32)
    ta, tc, tb = nee.from_numpy(a), nee.from_numpy(c), nee.from_numpy(b)
    print(f"threads: {threads.NUM_THREADS}")
    for name, fn, ft in [
            ("sum 16M f32", a.sum, ta.sum), ("mean 16M f32", a.mean, ta.mean), ("sum 16M f64", c.sum, tc.sum),
            ("sum (4096,1024) f32 dim=-1", lambda: b.sum(-1), lambda: tb.sum(-1)),
            ("sum (4096,1024) f32 dim=0", lambda: b.sum(0), lambda: tb.sum(0)),
            ("mean (4096,1024) f32 dim=0", lambda: b.mean(0), lambda: tb.mean(0)),
            ("sum (1024,4096).T dim=0", lambda: b.T.sum(0), lambda: tb.t().sum(0)),
            ("amax (4096,1024) dim=-1", lambda: b.max(-1), lambda: tb.amax(-1)),
            ("amax (4096,1024) dim=0", lambda: b.max(0), lambda: tb.amax(0)),
            ("argmax (4096,1024) dim=-1", lambda: b.argmax(-1), lambda: tb.argmax(-1)),
            ("max 16M f32", a.max, ta.max),
            ("var (4096,1024) dim=-1", lambda: b.var(-1, ddof=1), lambda: tb.var(-1)),
            ("cumsum (4096,1024) dim=1", lambda: b.cumsum(1), lambda: tb.cumsum(1))]:
        tn, tt = bt(fn), bt(ft)
        print(f"{name:28s} numpy {tn * 1e3:7.3f} ms  neetorch {tt * 1e3:7.3f} ms  numpy/neetorch {tn / tt:5.2f}")


if __name__ == "__main__":  # pragma: no cover
    _bench()
