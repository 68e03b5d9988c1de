"""CPU kernels for normalization, softmax, embedding and the nll loss.

* softmax / log_softmax: one fused kernel per dtype.  The reduced dim becomes ``n`` of an
  ``(A, n, B)`` strided view (no copy for any layout whose outer/inner dims merge); rows
  with a unit-stride ``n`` run the row kernel (max, exp+sum, scale: 3 passes over a row
  that stays in L1), others the column kernel (vectorized across ``B``).
* layer_norm / rms_norm / group_norm / instance_norm: one row kernel (float64 moments,
  two-pass variance, then the affine write).
* batch_norm statistics, embedding gather (dtype-agnostic bit copy, validated indices) and
  the nll/label-smoothing loss kernel.

float16 computes in float32 and rounds once at the end.

Unit-stride rows of softmax / log_softmax / layer_norm / rms_norm (float32/float64) run the same
passes rendered as LLVM IR (``ir_rows``/``run_rows``, ``llvm_render.render_rows_ir``: ~0.1 s cold
instead of Numba's ~1 s and its start-up in every process); the Numba kernels below cover the rest.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

from .. import kernel, threads, layout
from ....tensor import dtypes as _dtypes
from ..scalar import f_exp32, f_exp64, f_log32, f_log64

_opts = dict(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "nsz", "arcp"})


# ---------------------------------------------------------------- dtype-generic scalar helpers
def _exp(x):  # pragma: no cover - replaced by the overload inside Numba
    raise NotImplementedError


def _log(x):  # pragma: no cover
    raise NotImplementedError


@overload(_exp)
def _ov_exp(x):
    if x == types.float32:
        return lambda x: f_exp32(x)
    return lambda x: f_exp64(x)


def _exp_ftz(x):  # pragma: no cover
    raise NotImplementedError


_LO32 = np.float32(-87.33)     # exp below this is subnormal in float32: flushed to 0
_Z32 = np.float32(0.0)
_LO64 = -708.39
_Z64 = 0.0


@overload(_exp_ftz)
def _ov_exp_ftz(x):
    # softmax outputs below the smallest normal float are flushed to zero: they change no sum and
    # subnormals make every later product (attention's weights @ value) run many times slower
    if x == types.float32:
        return lambda x: _Z32 if x < _LO32 else f_exp32(x)
    return lambda x: _Z64 if x < _LO64 else f_exp64(x)


def _ftz(x):  # pragma: no cover
    raise NotImplementedError


_TINY32 = np.float32(np.finfo(np.float32).tiny)
_TINY64 = float(np.finfo(np.float64).tiny)


@overload(_ftz)
def _ov_ftz(x):
    if x == types.float32:
        return lambda x: _Z32 if x < _TINY32 else x
    return lambda x: _Z64 if x < _TINY64 else x


@overload(_log)
def _ov_log(x):
    if x == types.float32:
        return lambda x: f_log32(x)
    return lambda x: f_log64(x)


# ---------------------------------------------------------------- row kernels as LLVM IR
# softmax / log_softmax / layer_norm / rms_norm over unit-stride rows of float32/float64 are
# rendered as LLVM IR (llvm_render.render_rows_ir: the same passes as the Numba kernels below,
# ~0.1 s cold instead of ~0.5-1.5 s of Numba, and no Numba start-up in a warm process); the
# Numba kernels remain for strided rows, group/instance norm and NEE_CPU_RENDERER=numba.
_ir_rows: dict = {}
_DUMMY = {}


def ir_rows(mode: str, dt: str, safe: bool, pro=None):
    """The IR row kernel for (mode, dtype, safe[, prologue]), or None where the Numba kernels run."""
    from .. import elementwise
    if elementwise.RENDERER != "llvm":     # NEE_CPU_RENDERER=numba: Numba kernels only
        return None
    key = (mode, dt, bool(safe), pro)
    k = _ir_rows.get(key, False)
    if k is not False:
        return k
    k = None
    if dt in ("float32", "float64"):
        from .. import llvm_render
        try:
            k = llvm_render.row_kernel(mode, dt, safe, pro)
        except NotImplementedError:
            k = None
    _ir_rows[key] = k
    return k


def _dummy(dt) -> np.ndarray:
    a = _DUMMY.get(dt)
    if a is None:
        a = _DUMMY[dt] = np.zeros(1, dt)
    return a


def run_rows(k, arrays, R, B, N, eps, lays, nt, w=None, b=None, tmp_dtype=None):
    """Launch IR row kernel ``k`` over rows [0, R): ``arrays`` = flat operands (prologue outputs,
    inputs, dst), ``lays`` their (stride of a, stride of b, offset); parallel over row blocks."""
    from .. import llvm_render
    dt = arrays[-1].dtype
    w = _dummy(dt) if w is None else w
    b = _dummy(dt) if b is None else b
    chunks = threads.split(R, nt) if nt > 1 and R > 1 else [(0, R)]

    def one(c):
        tmp = np.empty(N, dt) if tmp_dtype is not None else _dummy(dt)
        k(*arrays, w, b, tmp, llvm_render.row_meta(c[0], c[1], B, N, eps, lays))
    if len(chunks) == 1:
        one(chunks[0])
    else:
        threads.run_parallel(one, chunks)


# ---------------------------------------------------------------- softmax
@njit(**_opts)
def _row_max32(xr):
    """max of a float32 row via order-preserving integer keys: integer max reductions vectorize
    (float ones do not without fast-math NaN assumptions).  A positive NaN wins (the row becomes
    NaN, like torch); any NaN also surfaces in the exp/sum pass."""
    xi = xr.view(np.int32)
    m = np.int32(-2147483648)
    for i in range(xi.shape[0]):
        v = xi[i]
        k = v ^ ((v >> 31) & np.int32(0x7fffffff))
        m = k if k > m else m
    buf = np.empty(1, np.int32)
    buf[0] = m ^ ((m >> 31) & np.int32(0x7fffffff))
    return buf.view(np.float32)[0]


@njit(**_opts)
def _row_max64(xr):
    xi = xr.view(np.int64)
    m = np.int64(-9223372036854775808)
    for i in range(xi.shape[0]):
        v = xi[i]
        k = v ^ ((v >> 63) & np.int64(0x7fffffffffffffff))
        m = k if k > m else m
    buf = np.empty(1, np.int64)
    buf[0] = m ^ ((m >> 63) & np.int64(0x7fffffffffffffff))
    return buf.view(np.float64)[0]


def _row_max(xr):  # pragma: no cover - replaced by the overload inside Numba
    raise NotImplementedError


@overload(_row_max)
def _ov_row_max(xr):
    if xr.dtype == types.float32:
        return lambda xr: _row_max32(xr)
    return lambda xr: _row_max64(xr)


@njit(**_opts)
def _softmax_row1(xr, orow, log, safe, zero, one):
    """One unit-stride row (slices: indices from 0 so LLVM sees consecutive accesses)."""
    n = xr.shape[0]
    m = _row_max(xr)
    if safe and m == -np.inf:
        for i in range(n):
            orow[i] = zero
        return
    s = zero
    if log:
        for i in range(n):
            s += _exp(xr[i] - m)
        ls = _log(s)
        # (x - max) - log(sum) in two passes through memory: Numba gives callees the caller's fast-math
        # flags, and with 'reassoc' one expression becomes x - (max + log(sum)), which loses the result's
        # digits at large |x| (logits ~1e4: 5e-4); LLVM does not fuse the two loops
        for i in range(n):
            orow[i] = xr[i] - m
        for i in range(n):
            orow[i] = orow[i] - ls
    else:
        for i in range(n):
            e = _exp_ftz(xr[i] - m)
            orow[i] = e
            s += e
        inv = one / s
        for i in range(n):
            orow[i] = _ftz(orow[i] * inv)


@njit(**_opts)
def _softmax_rows(x, o, r0, r1, n, B, xoff, xsa, xsb, xsn, ooff, osa, osb, osn, log, safe):
    zb = np.zeros(2, x.dtype)
    zb[1] = 1
    zero = zb[0]
    one = zb[1]
    for r in range(r0, r1):
        a = r // B
        b = r - a * B
        px = xoff + a * xsa + b * xsb
        po = ooff + a * osa + b * osb
        if xsn == 1 and osn == 1:
            _softmax_row1(x[px:px + n], o[po:po + n], log, safe, zero, one)
        else:
            m = x[px]
            for i in range(1, n):
                v = x[px + i * xsn]
                m = v if v > m else m
            if safe and m == -np.inf:
                for i in range(n):
                    o[po + i * osn] = zero
                continue
            s = zero
            if log:
                for i in range(n):
                    s += _exp(x[px + i * xsn] - m)
                ls = _log(s)
                for i in range(n):     # two passes: see _softmax_row1
                    o[po + i * osn] = x[px + i * xsn] - m
                for i in range(n):
                    o[po + i * osn] = o[po + i * osn] - ls
            else:
                for i in range(n):
                    e = _exp_ftz(x[px + i * xsn] - m)
                    o[po + i * osn] = e
                    s += e
                inv = one / s
                for i in range(n):
                    o[po + i * osn] = _ftz(o[po + i * osn] * inv)


@njit(**_opts)
def _softmax_cols(x, o, a0, a1, b0, b1, n, xoff, xsa, xsb, xsn, ooff, osa, osb, osn, log, safe):
    nb = b1 - b0
    mx = np.empty(nb, x.dtype)
    sm = np.empty(nb, x.dtype)
    zb = np.zeros(2, x.dtype)
    zb[1] = 1
    zero = zb[0]
    one = zb[1]
    for a in range(a0, a1):
        pxa = xoff + a * xsa + b0 * xsb
        poa = ooff + a * osa + b0 * osb
        if xsb == 1 and osb == 1:
            xr = x[pxa:pxa + nb]
            for b in range(nb):
                mx[b] = xr[b]
                sm[b] = zero
            for j in range(1, n):
                xr = x[pxa + j * xsn:pxa + j * xsn + nb]
                for b in range(nb):
                    v = xr[b]
                    mx[b] = v if v > mx[b] else mx[b]
            for j in range(n):
                xr = x[pxa + j * xsn:pxa + j * xsn + nb]
                orow = o[poa + j * osn:poa + j * osn + nb]
                if log:
                    for b in range(nb):
                        sm[b] += _exp(xr[b] - mx[b])
                else:
                    for b in range(nb):
                        e = _exp_ftz(xr[b] - mx[b])
                        orow[b] = e
                        sm[b] += e
            for b in range(nb):
                if safe and mx[b] == -np.inf:
                    sm[b] = np.nan
                elif log:
                    sm[b] = _log(sm[b])
                else:
                    sm[b] = one / sm[b]
            for j in range(n):
                xr = x[pxa + j * xsn:pxa + j * xsn + nb]
                orow = o[poa + j * osn:poa + j * osn + nb]
                if log:                 # two passes: see _softmax_row1
                    for b in range(nb):
                        orow[b] = xr[b] - mx[b]
                    for b in range(nb):
                        orow[b] = orow[b] - sm[b]
                else:
                    for b in range(nb):
                        orow[b] = _ftz(orow[b] * sm[b])
                if safe:
                    for b in range(nb):
                        if mx[b] == -np.inf:
                            orow[b] = zero
        else:
            for b in range(nb):
                mx[b] = x[pxa + b * xsb]
                sm[b] = zero
            for j in range(1, n):
                px = pxa + j * xsn
                for b in range(nb):
                    v = x[px + b * xsb]
                    mx[b] = v if v > mx[b] else mx[b]
            for j in range(n):
                px = pxa + j * xsn
                po = poa + j * osn
                for b in range(nb):
                    e = _exp_ftz(x[px + b * xsb] - mx[b])
                    if not log:
                        o[po + b * osb] = e
                    sm[b] += e
            for b in range(nb):
                sm[b] = _log(sm[b]) if log else one / sm[b]
            for j in range(n):
                px = pxa + j * xsn
                po = poa + j * osn
                for b in range(nb):
                    if safe and mx[b] == -np.inf:
                        o[po + b * osb] = zero
                    elif log:           # (the second pass below: see _softmax_row1)
                        o[po + b * osb] = x[px + b * xsb] - mx[b]
                    else:
                        o[po + b * osb] = _ftz(o[po + b * osb] * sm[b])
                if log:
                    for b in range(nb):
                        if not (safe and mx[b] == -np.inf):
                            o[po + b * osb] = o[po + b * osb] - sm[b]


def _merge(dims):
    """(size, stride) of dims merged into one, or None when they do not merge."""
    dims = [(n, s) for n, s in dims if n != 1]
    if not dims:
        return 1, 0
    for (n0, s0), (n1, s1) in zip(dims, dims[1:]):
        if s0 != n1 * s1:
            return None
    tot = 1
    for n, _ in dims:
        tot *= n
    return tot, dims[-1][1]


def _abn(st, shape, d):
    a = _merge(list(zip(shape[:d], st[:d])))
    b = _merge(list(zip(shape[d + 1:], st[d + 1:])))
    if a is None or b is None:
        return None
    return a, (shape[d], st[d]), b


def _f32(a):
    return _dtypes.widen(a)   # float16/bfloat16 -> float32


def _log_softmax_low_lastdim(x: np.ndarray, out: np.ndarray) -> None:
    """float16/bfloat16 log_softmax over the last dim as torch's CPU kernel computes it: in float32, except
    that the row's sum of exponentials and its log are rounded to the storage dtype before the subtraction
    (ATen's vectorized last-dim kernel keeps them in scalar_t); other dims round once, like every op."""
    low = out.dtype
    xf = _f32(x) if _dtypes.is_low_np(x.dtype) else x
    d = xf.astype(np.float32, copy=xf is x)   # (order "K" as astype: the row sums keep their order)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        np.subtract(d, d.max(axis=-1, keepdims=True), out=d)
        s = np.exp(d).sum(axis=-1, keepdims=True, dtype=np.float32)
        lse = np.log(s.astype(low).astype(np.float32)).astype(low).astype(np.float32)
        np.subtract(d, lse, out=d)
    _dtypes.copy_into(out, d)


def softmax_launch(x: np.ndarray, out: np.ndarray, dim: int, log: bool, safe: bool = False) -> None:
    nd = max(x.ndim, 1)
    if not -nd <= dim < nd or x.shape != out.shape:
        raise ValueError(f"{'log_softmax' if log else 'softmax'}: dim {dim} out of range for input {x.shape} "
                         f"{x.dtype}, or output {out.shape} {out.dtype} of another shape")
    dim %= nd       # (a negative dim read the groups' strides past the shape: a wrong answer and a heap overrun)
    if out.size == 0:
        return
    if log and _dtypes.is_low_np(out.dtype) and x.ndim and dim in (-1, x.ndim - 1):
        _log_softmax_low_lastdim(x, out)
        return
    if _dtypes.is_low_np(out.dtype) or x.dtype != out.dtype:
        tmp = np.empty(out.shape, _dtypes.compute_np(out.dtype))
        softmax_launch(_f32(x).astype(tmp.dtype, copy=False), tmp, dim, log, safe)
        _dtypes.copy_into(out, tmp)
        return
    if x.ndim == 0:
        x, out, dim = x.reshape(1), out.reshape(1), 0
    fx, xoff, xst = layout.flat(x)
    g = _abn(xst, x.shape, dim)
    if g is None:
        x = np.ascontiguousarray(x)
        fx, xoff, xst = layout.flat(x)
        g = _abn(xst, x.shape, dim)
    fo, ooff, ost = layout.flat(out)
    go = _abn(ost, out.shape, dim)
    if go is None:      # an output whose dims around ``dim`` do not merge into one stride each: through a copy
        tmp = np.empty(out.shape, out.dtype)
        softmax_launch(x, tmp, dim, log, safe)
        np.copyto(out, tmp)
        return
    A, B, n, xsa, xsb, xsn, osa, osb, osn, nt = _softmax_loops(g, go)
    if xsn == 1 and osn == 1:
        k = ir_rows("log_softmax" if log else "softmax", x.dtype.name, safe)
        if k is not None:
            run_rows(k, [fx, fo], A * B, B, n, 0.0, [(xsa, xsb, xoff), (osa, osb, ooff)], nt)
            return
    if B == 1 or abs(xsn) == 1:
        R = A * B
        chunks = threads.split(R, nt)
        threads.run_parallel(lambda c: _softmax_rows(fx, fo, c[0], c[1], n, B, xoff, xsa, xsb, xsn, ooff,
                                                     osa, osb, osn, log, safe), chunks)
    else:
        # parallel over A only: blocks of a row at a large stride defeat the prefetchers and thrash the
        # caches (measured: splitting B across 2 threads ran ~5x slower than one thread over full rows)
        nt = min(nt, A)
        chunks = [[(s, e, 0, B)] for s, e in threads.split(A, nt)]

        def work(bl):
            for c in bl:
                _softmax_cols(fx, fo, c[0], c[1], c[2], c[3], n, xoff, xsa, xsb, xsn, ooff, osa, osb, osn, log, safe)
        threads.run_parallel(work, chunks)


def _softmax_loops(g, go):
    """softmax_launch's loops from the (A, n, B) groups of the input ``g`` and output ``go``: (A, B, n, the
    input's strides of A, B, n, the output's, the thread count)."""
    (A, xsa), (n, xsn), (B, xsb) = g
    (_, osa), (_, osn), (_, osb) = go
    # make B the index dim with the smaller input stride
    if B == 1 or (A > 1 and abs(xsa) < abs(xsb)):
        A, B, xsa, xsb, osa, osb = B, A, xsb, xsa, osb, osa
    if A == 1:
        xsa = osa = 0
    nt = threads.NUM_THREADS if A * B * n >= threads.PARALLEL_THRESHOLD else 1
    return A, B, n, xsa, xsb, xsn, osa, osb, osn, nt


def bind_softmax(log, attrs, out, x):
    """``f(outs, ins)`` doing softmax_launch's IR row-kernel path for C-contiguous float32/float64 arrays of
    these layouts (the row metas made once; False: the thread count changed), or None (not that path)."""
    dt = out.dtype
    if dt not in (np.float32, np.float64) or x.dtype != dt or x.shape != out.shape or x.ndim == 0 \
            or not x.flags.c_contiguous or not out.flags.c_contiguous or not out.flags.writeable \
            or np.may_share_memory(out, x):
        return None
    dim = attrs["dim"]
    if not isinstance(dim, int) or not -x.ndim <= dim < x.ndim:
        return None
    dim %= x.ndim
    st = [s // x.itemsize for s in x.strides]
    g = _abn(st, x.shape, dim)
    if g is None:
        return None
    A, B, n, xsa, xsb, xsn, osa, osb, _, nt = _softmax_loops(g, g)
    k = ir_rows("log_softmax" if log else "softmax", dt.name, attrs.get("safe", False))
    if xsn != 1 or k is None:
        return None
    from .. import llvm_render
    R = A * B
    lays = [(xsa, xsb, 0), (osa, osb, 0)]
    metas = [llvm_render.row_meta(c0, c1, B, n, 0.0, lays)
             for c0, c1 in (threads.split(R, nt) if nt > 1 and R > 1 else [(0, R)])]
    d = _dummy(dt)
    nt0 = threads.NUM_THREADS
    if len(metas) == 1:
        m0 = metas[0]

        def f(outs, ins):
            if threads.NUM_THREADS != nt0:
                return False
            k(ins[0], outs[0], d, d, d, m0)
            return True
        # (native_chain: a classifier's closing softmax replays with the convs before it)
        f.calls = lambda outs, ins: [(k, (ins[0], outs[0], d, d, d, m0), None)]
        return f

    def f(outs, ins):
        if threads.NUM_THREADS != nt0:
            return False
        xa, oa = ins[0], outs[0]
        threads.run_parallel(lambda m: k(xa, oa, d, d, d, m), metas)
        return True
    return f


def bind_step(name, attrs, outs, ins):
    """A compiled graph's CPU kernel step of op ``name`` bound to arrays of these layouts (jit/executable.py
    _bound_runner: ``f(outs, ins)``, False when the thread count changed), or None (the kernel runs):
    softmax / log_softmax (bind_softmax), reductions (reduction.bind_reduce), max / average pooling
    (pool_native.bind_pool)."""
    if len(outs) != 1 or not all(isinstance(a, np.ndarray) for a in list(outs) + list(ins)) or outs[0].size == 0:
        return None
    if name in ("softmax", "log_softmax"):
        return bind_softmax(name == "log_softmax", attrs, outs[0], ins[0]) if len(ins) == 1 else None
    if name in ("max_pool2d", "avg_pool2d"):
        from .pool_native import bind_pool
        return bind_pool(name == "max_pool2d", attrs, outs[0], ins)
    from .reduction import bind_reduce
    return bind_reduce(name, attrs, outs[0], ins)


@kernel("softmax")
def softmax_kernel(backend, outs, ins, attrs):
    softmax_launch(ins[0], outs[0], attrs["dim"], False, attrs.get("safe", False))


@kernel("log_softmax")
def log_softmax_kernel(backend, outs, ins, attrs):
    softmax_launch(ins[0], outs[0], attrs["dim"], True, attrs.get("safe", False))


# ---------------------------------------------------------------- row normalization
@njit(**_opts)
def _moments(xr, rms):
    n = xr.shape[0]
    s = 0.0
    if rms:
        for i in range(n):
            v = np.float64(xr[i])
            s += v * v
        return 0.0, s / n
    for i in range(n):
        s += xr[i]
    mean = s / n
    q = 0.0
    for i in range(n):
        d = xr[i] - mean
        q += d * d
    return mean, q / n


@njit(**_opts)
def _affine_elem(xr, orow, wr, br, m, r):
    for i in range(xr.shape[0]):
        orow[i] = (xr[i] - m) * r * wr[i] + br[i]


@njit(**_opts)
def _affine_const(xr, orow, m, sc, sh):
    # (x - mean) * scale + shift, not x * scale + (shift - mean * scale): the folded form leaves rounding noise
    # of |x| * rstd where x == mean (a one-element group, a constant group: 7e-3 off torch's exact 0 at |x| ~ 100)
    for i in range(xr.shape[0]):
        orow[i] = (xr[i] - m) * sc + sh


@njit(**_opts)
def _norm_rows(x, o, w, bias, r0, r1, xoff, xsr, G, cpg, HW, wsc, wss, eps, rms, mean_out, rstd_out):
    """Normalize rows ``r`` (length cpg*HW, unit stride, at xoff + r*xsr) into contiguous ``o``.

    Affine index of element (c, s) of row r: ((r % G)*cpg + c)*wsc + s*wss.
    """
    n = cpg * HW
    cb = np.zeros(4, x.dtype)
    for r in range(r0, r1):
        px = xoff + r * xsr
        po = r * n
        mean, var = _moments(x[px:px + n], rms)
        rstd = 1.0 / np.sqrt(var + eps)
        if mean_out.size > 0:
            mean_out[r] = mean
            rstd_out[r] = rstd
        g = r % G
        for c in range(cpg):
            wb = (g * cpg + c) * wsc
            xr = x[px + c * HW:px + (c + 1) * HW]
            orow = o[po + c * HW:po + (c + 1) * HW]
            if wss == 1:
                cb[0] = mean
                cb[1] = rstd
                _affine_elem(xr, orow, w[wb:wb + HW], bias[wb:wb + HW], cb[0], cb[1])
            else:
                cb[0] = mean
                cb[2] = rstd * w[wb]
                cb[3] = bias[wb]
                _affine_const(xr, orow, cb[0], cb[2], cb[3])


def norm_launch(x, out, w, b, R, G, cpg, HW, per_elem, eps, rms, stats=None):
    """Rows: x viewed as (R, cpg*HW); w/b: None or 1-D arrays (per element or per channel)."""
    if out.size == 0:
        return
    cdt = _dtypes.compute_np(out.dtype)
    n = cpg * HW
    x = _f32(x).astype(cdt, copy=False)
    xs = None
    if x.ndim and x.flags.c_contiguous:
        xs = n
    else:
        # rows of unit stride at a uniform row stride: no copy
        st = [s // x.itemsize for s in x.strides]
        sh = list(x.shape)
        k = len(sh)
        tot = 1
        while k > 0 and tot < n:
            k -= 1
            tot *= sh[k]
        inner = _merge(list(zip(sh[k:], st[k:])))
        outer = _merge(list(zip(sh[:k], st[:k])))
        if tot == n and inner is not None and outer is not None and (inner[1] == 1 or inner[0] == 1) \
                and G == 1 and cpg == 1:
            xs = outer[1] if outer[0] > 1 else n
        else:
            x = np.ascontiguousarray(x)
            xs = n
    fx, xoff, _ = layout.flat(x)
    direct = out.dtype == cdt and out.flags.c_contiguous
    o = out.reshape(-1) if direct else np.empty(out.size, cdt)
    nw = (G * cpg) if not per_elem else n
    w = np.ones(nw, cdt) if w is None else np.ascontiguousarray(w, dtype=cdt).reshape(-1)
    b = np.zeros(nw, cdt) if b is None else np.ascontiguousarray(b, dtype=cdt).reshape(-1)
    wsc, wss = (0, 1) if per_elem else (1, 0)
    if stats is None:
        mo = ro = np.empty(0, np.float64)
    else:
        mo, ro = stats
    nt = threads.NUM_THREADS if R * n >= threads.PARALLEL_THRESHOLD else 1
    k = ir_rows("rms_norm" if rms else "layer_norm", np.dtype(cdt).name, False) \
        if stats is None and G == 1 and cpg == 1 and per_elem else None
    if k is not None:
        run_rows(k, [fx, o], R, 1, n, float(eps), [(xs, 0, xoff), (n, 0, 0)], nt, w, b)
    else:
        threads.run_parallel(lambda c: _norm_rows(fx, o, w, b, c[0], c[1], xoff, xs, G, cpg, HW, wsc, wss,
                                                  float(eps), rms, mo, ro), threads.split(R, nt))
    if not direct:
        _dtypes.copy_into(out, o.reshape(out.shape))


@kernel("layer_norm")
def layer_norm_kernel(backend, outs, ins, attrs):
    x = ins[0]
    n = attrs["n"]
    R = x.size // n if n else 0
    it = iter(ins[1:])
    w = next(it) if attrs["has_weight"] else None
    b = next(it) if attrs["has_bias"] else None
    norm_launch(x, outs[0], w, b, R, 1, 1, n, True, attrs["eps"], False)


@kernel("rms_norm")
def rms_norm_kernel(backend, outs, ins, attrs):
    x = ins[0]
    n = attrs["n"]
    R = x.size // n if n else 0
    w = ins[1] if attrs["has_weight"] else None
    norm_launch(x, outs[0], w, None, R, 1, 1, n, True, attrs["eps"], True)


@kernel("group_norm")
def group_norm_kernel(backend, outs, ins, attrs):
    x = ins[0]
    N, C = x.shape[0], x.shape[1]
    G = attrs["groups"]
    HW = x.size // (N * C) if N * C else 0
    it = iter(ins[1:])
    w = next(it) if attrs["has_weight"] else None
    b = next(it) if attrs["has_bias"] else None
    norm_launch(x, outs[0], w, b, N * G, G, C // G, HW, False, attrs["eps"], False)


# ---------------------------------------------------------------- batch-norm statistics
@njit(**_opts)
def _channel_moments(x, c0, c1, A, C, B, mean, var):
    for c in range(c0, c1):
        s = 0.0
        for a in range(A):
            p = (a * C + c) * B
            for i in range(B):
                s += x[p + i]
        cnt = A * B
        m = s / cnt
        q = 0.0
        for a in range(A):
            p = (a * C + c) * B
            for i in range(B):
                d = x[p + i] - m
                q += d * d
        mean[c] = m
        var[c] = q / cnt


@kernel("batch_norm_stats")
def batch_norm_stats_kernel(backend, outs, ins, attrs):
    x = ins[0]
    N, C = x.shape[0], x.shape[1]
    B = x.size // (N * C) if N * C else 0
    xc = np.ascontiguousarray(_f32(x)).reshape(-1)
    mean = np.empty(C, np.float64)
    var = np.empty(C, np.float64)
    nt = threads.NUM_THREADS if x.size >= threads.PARALLEL_THRESHOLD else 1
    threads.run_parallel(lambda c: _channel_moments(xc, c[0], c[1], N, C, B, mean, var), threads.split(C, nt))
    np.copyto(outs[0], mean, casting="unsafe")
    np.copyto(outs[1], var, casting="unsafe")


# ---------------------------------------------------------------- embedding
@njit(cache=True, nogil=True)
def _gather_rows(w, woff, wsr, wsc, V, D, idx, o, k0, k1):
    """o[k, :] = w[idx[k], :]; returns the position of the first out-of-range index or -1."""
    for k in range(k0, k1):
        t = idx[k]
        if t < 0 or t >= V:
            return k
        p = woff + t * wsr
        q = k * D
        if wsc == 1:
            for j in range(D):
                o[q + j] = w[p + j]
        else:
            for j in range(D):
                o[q + j] = w[p + j * wsc]
    return -1


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def embedding_gather(weight: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
    V, D = weight.shape
    ii = np.ascontiguousarray(idx, dtype=np.int64).reshape(-1)
    K = ii.size
    if K == 0:
        return
    u = _UINT[weight.itemsize]
    fw, woff, (wsr, wsc) = layout.flat(weight)
    fw = fw.view(u)
    o = out.reshape(-1).view(u) if out.flags.c_contiguous else np.empty(out.size, u)
    if D == 0 or V == 0:  # nothing to copy, but the indices must still be valid
        bad = np.flatnonzero((ii < 0) | (ii >= V))
        if bad.size:
            _index_error(int(ii[bad[0]]), V)
        return
    nt = threads.NUM_THREADS if K * D >= threads.PARALLEL_THRESHOLD else 1
    res = []
    threads.run_parallel(lambda c: res.append(_gather_rows(fw, woff, wsr, wsc, V, D, ii, o, c[0], c[1])),
                         threads.split(K, nt))
    bad = [r for r in res if r >= 0]
    if bad:
        _index_error(int(ii[min(bad)]), V)
    if not out.flags.c_contiguous:
        np.copyto(out, o.view(out.dtype).reshape(out.shape))


def _index_error(v, V):
    raise IndexError(f"index out of range in self: embedding index {v} is out of range for a weight table with "
                     f"{V} rows (valid indices are 0..{V - 1})")


@kernel("embedding")
def embedding_kernel(backend, outs, ins, attrs):
    embedding_gather(ins[0], ins[1], outs[0])


@kernel("embedding_renorm_")
def embedding_renorm_kernel(backend, outs, ins, attrs):
    w = outs[0]
    idx = np.unique(np.asarray(ins[1], dtype=np.int64).reshape(-1))
    V = w.shape[0]
    if idx.size and (idx[0] < 0 or idx[-1] >= V):
        _index_error(int(idx[0] if idx[0] < 0 else idx[-1]), V)
    rows = w[idx].astype(np.float64)
    p = attrs["norm_type"]
    norms = np.linalg.norm(rows, ord=p, axis=1) if p != 2.0 else np.sqrt((rows * rows).sum(1))
    sel = norms > attrs["max_norm"]
    if sel.any():
        scale = attrs["max_norm"] / (norms[sel] + 1e-7)
        w[idx[sel]] = (rows[sel] * scale[:, None]).astype(w.dtype)


# ---------------------------------------------------------------- nll loss
@njit(**_opts)
def _nll(lp, loff, sn, sc, sk, N, C, K, tgt, w, ignore, smooth, nll, sm, tot):
    """Per (n, k): nll = -w[t]*lp[n,t,k], smooth = -sum_c w[c]*lp[n,c,k] (0 when ignored).

    tot = [sum nll, sum smooth, sum w[t] over non-ignored]; returns the flat position of
    the first invalid target or -1.
    """
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    for n in range(N):
        for k in range(K):
            q = n * K + k
            t = tgt[q]
            if t == ignore:
                nll[q] = 0
                sm[q] = 0
                continue
            if t < 0 or t >= C:
                return q
            p = loff + n * sn + k * sk
            wt = w[t]
            v = -wt * lp[p + t * sc]
            nll[q] = v
            s0 += v
            s2 += wt
            if smooth:
                a = 0.0
                for c in range(C):
                    a += w[c] * lp[p + c * sc]
                sm[q] = -a
                s1 -= a
    tot[0] = s0
    tot[1] = s1
    tot[2] = s2
    return -1


@kernel("nll_loss_terms")
def nll_loss_terms_kernel(backend, outs, ins, attrs):
    lp = ins[0]
    N, C = lp.shape[0], lp.shape[1]
    K = lp.size // (N * C) if N * C else (int(np.prod(lp.shape[2:])) if lp.ndim > 2 else 1)
    cdt = _dtypes.compute_np(lp.dtype)
    if N * C * K == 0:
        outs[0].fill(0)
        outs[1].fill(0)
        outs[2].fill(0)
        return
    fl, loff, (sn, sc, sk) = layout.flat(np.reshape(_f32(lp), (N, C, K)))
    tgt = np.ascontiguousarray(ins[1], dtype=np.int64).reshape(-1)
    w = np.ascontiguousarray(ins[2], dtype=np.float64).reshape(-1) if attrs["has_weight"] else np.ones(C, np.float64)
    nll = np.empty(N * K, cdt)
    sm = np.zeros(N * K, cdt)
    tot = np.zeros(3, np.float64)
    bad = _nll(fl, loff, sn, sc, sk, N, C, K, tgt, w, attrs["ignore_index"], attrs["smooth"], nll, sm, tot)
    if bad >= 0:
        v = int(tgt[bad])
        raise IndexError(f"nll_loss: target {v} is out of bounds (expected a class index in [0, {C}) or "
                         f"ignore_index={attrs['ignore_index']})")
    _dtypes.copy_into(outs[0], nll.reshape(outs[0].shape))
    _dtypes.copy_into(outs[1], sm.reshape(outs[1].shape))
    np.copyto(outs[2], tot, casting="unsafe")
