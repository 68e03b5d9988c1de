"""Small LLVM IR kernels replacing Numba ones on the CNN inference path, so that a session whose other kernels
are IR kernels never initializes Numba's target (~1 s on the first call of any Numba dispatcher in a process).

* :func:`pool_global`: one max / average per contiguous plane (global pooling), conv._pool_global's arithmetic
  exactly: four interleaved chains (a <4 x T> accumulator lane k taking elements 4i + k), the tail into chain
  0, combined ((a0 + a1) + (a2 + a3)) (max: torch's NaN propagation, ``a > b or a is NaN ? a : b``), then
  divided by dv[0]: the same bits as the Numba kernel.
* :func:`row_reduce`: sum / mean of contiguous rows (reduction.py's row mode with no inner dim), float32 or
  float64, accumulated in float64 in blocks of 2048 (the block's sum reassociated and vectorized, blocks added
  in order), mean divided in float64, then stored in the input dtype: reduction.py's generated kernel's
  arithmetic; the order inside a block is LLVM's choice in both, so float64 results may differ in the last
  bits (float32 ones only where the float64 sum rounds differently, which is rare).
* :func:`bias_act`: conv._bias_act's in-place (r + bias[channel]) (+ e), then torch's relu (a select:
  ``v < 0 ? 0 : v``, NaN and -0.0 kept): elementwise, the same bits.

Machine code is cached on disk by llvm_render (keyed by this file's hash); calls go through llvm_call's
builtins (arrays only: the callers here check dtypes, contiguity and sizes before a call).
"""
from __future__ import annotations

import hashlib
import os

import numpy as np

VERSION = "1"
BLOCK = 2048            # reduction.py's BLOCK (float sums in blocks of this many elements)

_kernels: dict = {}
_prms: dict = {}        # params tuple -> its int64 array (read-only to the kernels; cleared past 4096)
# NEE_IR_SMALL=0 (or MODE[0] = "0": tests, benchmarks) keeps these ops on their Numba kernels
MODE = [os.environ.get("NEE_IR_SMALL", "1")]


def _source_key() -> str:
    with open(__file__, "rb") as fh:
        return hashlib.sha1(fh.read()).hexdigest()[:12]


_SRC = _source_key()


def available() -> bool:
    """llvmlite with a native target (pool_native's test) and MODE not "0"."""
    from . import pool_native
    return MODE[0] != "0" and pool_native.available()


def _get(k, name: str, render, nargs: int, interleave: bool = False):
    """The kernel of key ``k``: conv_direct.builtin (compiled once per process, cached on disk)."""
    from . import conv_direct
    return conv_direct.builtin(_kernels, k, name, f"ir_small|{VERSION}|{_SRC}|{k!r}", render, nargs, interleave)


def _tn(dt) -> str:
    dt = np.dtype(dt)
    if dt == np.float32:
        return "float"
    if dt == np.float64:
        return "double"
    raise NotImplementedError(f"ir_small: dtype {dt}")


# ------------------------------------------------------------------------------------ global pooling
def _render_pool_global(t: str, is_max: bool) -> str:
    v = f"<4 x {t}>"
    L = [f'define void @"kernel"({t}* noalias %x, {t}* noalias %out, {t}* noalias %dv, i64* noalias %prm) {{',
         "entry:",
         "  %n = load i64, i64* %prm",
         "  %pp0 = getelementptr i64, i64* %prm, i64 1", "  %p0 = load i64, i64* %pp0",
         "  %pp1 = getelementptr i64, i64* %prm, i64 2", "  %p1 = load i64, i64* %pp1",
         "  %nr4 = srem i64 %n, 4", "  %m = sub i64 %n, %nr4",
         f"  %d = load {t}, {t}* %dv",
         "  %small = icmp slt i64 %n, 4",
         "  %go = icmp slt i64 %p0, %p1",
         "  br i1 %go, label %plane, label %done",
         "plane:",
         "  %p = phi i64 [ %p0, %entry ], [ %pn, %store ]",
         "  %s = mul i64 %p, %n",
         f"  %xs = getelementptr {t}, {t}* %x, i64 %s",
         f"  %x0 = load {t}, {t}* %xs"]
    if is_max:
        L += [f"  %ins = insertelement {v} undef, {t} %x0, i32 0",
              f"  %acc0 = shufflevector {v} %ins, {v} undef, <4 x i32> zeroinitializer",
              "  %hasv = icmp sgt i64 %m, 0",
              "  br i1 %hasv, label %vloop, label %vend"]
    else:
        # n < 4: one chain from x[s]; else the four chains start at x[s:s+4]
        L += ["  br i1 %small, label %sm, label %big",
              "sm:",
              "  br label %tail_pre",
              "big:",
              f"  %vp0 = bitcast {t}* %xs to {v}*",
              f"  %acc0 = load {v}, {v}* %vp0, align 4",
              "  %hasv = icmp slt i64 4, %m",
              "  br i1 %hasv, label %vloop, label %vend"]
    L += ["vloop:",
          "  %i = phi i64 [ " + ("0" if is_max else "4") + ", %" + ("plane" if is_max else "big") + " ], [ %i4, %vloop ]",
          f"  %acc = phi {v} [ %acc0, %" + ("plane" if is_max else "big") + " ], [ %accn, %vloop ]",
          f"  %xp = getelementptr {t}, {t}* %xs, i64 %i",
          f"  %vp = bitcast {t}* %xp to {v}*",
          f"  %xv = load {v}, {v}* %vp, align 4"]
    if is_max:
        L += [f"  %gt = fcmp ogt {v} %acc, %xv", f"  %nan = fcmp uno {v} %acc, %acc",
              "  %keep = or <4 x i1> %gt, %nan", f"  %accn = select <4 x i1> %keep, {v} %acc, {v} %xv"]
    else:
        L += [f"  %accn = fadd {v} %acc, %xv"]
    L += ["  %i4 = add i64 %i, 4",
          "  %more = icmp slt i64 %i4, %m",
          "  br i1 %more, label %vloop, label %vend",
          "vend:",
          f"  %accf = phi {v} [ %acc0, %" + ("plane" if is_max else "big") + " ], [ %accn, %vloop ]",
          f"  %a0v = extractelement {v} %accf, i32 0",
          "  br label %tail_pre"]
    # the tail into chain 0 (%a0p entering it): elements [t0, n)
    if is_max:
        L += ["tail_pre:",
              f"  %accp = phi {v} [ %accf, %vend ]",
              f"  %a0p = phi {t} [ %a0v, %vend ]",
              "  %t0 = phi i64 [ %m, %vend ]"]
    else:
        L += ["tail_pre:",
              f"  %accp = phi {v} [ zeroinitializer, %sm ], [ %accf, %vend ]",
              f"  %a0p = phi {t} [ %x0, %sm ], [ %a0v, %vend ]",
              "  %t0 = phi i64 [ 1, %sm ], [ %m, %vend ]"]
    L += ["  %ht = icmp slt i64 %t0, %n",
          "  br i1 %ht, label %tloop, label %tend",
          "tloop:",
          "  %j = phi i64 [ %t0, %tail_pre ], [ %j1, %tloop ]",
          f"  %ta = phi {t} [ %a0p, %tail_pre ], [ %tan, %tloop ]",
          f"  %xjp = getelementptr {t}, {t}* %xs, i64 %j",
          f"  %xj = load {t}, {t}* %xjp"]
    if is_max:
        L += [f"  %tgt = fcmp ogt {t} %ta, %xj", f"  %tnan = fcmp uno {t} %ta, %ta", "  %tk = or i1 %tgt, %tnan",
              f"  %tan = select i1 %tk, {t} %ta, {t} %xj"]
    else:
        L += [f"  %tan = fadd {t} %ta, %xj"]
    L += ["  %j1 = add i64 %j, 1",
          "  %tm = icmp slt i64 %j1, %n",
          "  br i1 %tm, label %tloop, label %tend",
          "tend:",
          f"  %a0 = phi {t} [ %a0p, %tail_pre ], [ %tan, %tloop ]"]
    if is_max:
        L += [f"  %a1 = extractelement {v} %accp, i32 1", f"  %a2 = extractelement {v} %accp, i32 2",
              f"  %a3 = extractelement {v} %accp, i32 3"]
        for nm, a, b in (("m01", "%a0", "%a1"), ("m23", "%a2", "%a3"), ("r", "%m01", "%m23")):
            L += [f"  %{nm}.g = fcmp ogt {t} {a}, {b}", f"  %{nm}.n = fcmp uno {t} {a}, {a}",
                  f"  %{nm}.k = or i1 %{nm}.g, %{nm}.n", f"  %{nm} = select i1 %{nm}.k, {t} {a}, {t} {b}"]
        L += ["  br label %store"]
    else:
        L += ["  br i1 %small, label %fin1, label %fin4",
              "fin1:",
              f"  %r1 = fdiv {t} %a0, %d",
              "  br label %store",
              "fin4:",
              f"  %a1 = extractelement {v} %accp, i32 1", f"  %a2 = extractelement {v} %accp, i32 2",
              f"  %a3 = extractelement {v} %accp, i32 3",
              f"  %s01 = fadd {t} %a0, %a1", f"  %s23 = fadd {t} %a2, %a3", f"  %s4 = fadd {t} %s01, %s23",
              f"  %r4 = fdiv {t} %s4, %d",
              "  br label %store"]
    L += ["store:"]
    if is_max:
        res = "%r"
    else:
        L += [f"  %rr = phi {t} [ %r1, %fin1 ], [ %r4, %fin4 ]"]
        res = "%rr"
    L += [f"  %op = getelementptr {t}, {t}* %out, i64 %p",
          f"  store {t} {res}, {t}* %op",
          "  %pn = add i64 %p, 1",
          "  %pm = icmp slt i64 %pn, %p1",
          "  br i1 %pm, label %plane, label %done",
          "done:",
          "  ret void",
          "}"]
    return "\n".join(L) + "\n"


def pool_global_kernel(dt, is_max: bool):
    """The builtin ``f(x, out, dv, prm)``: planes [prm[1], prm[2]) of prm[0] elements of x (contiguous) reduced
    into out[p] (see the module doc)."""
    t = _tn(dt)
    return _get(("poolg", t, bool(is_max)), f"poolg{'max' if is_max else 'avg'}{t[0]}",
                lambda: _render_pool_global(t, bool(is_max)), 4)


def pool_global(fallback):
    """conv._pool_global's signature ``g(x, out, n, is_max, dv, p0, p1)`` on the IR kernel for float32 / float64
    C-contiguous 1-D arrays of one dtype with every index in bounds; ``fallback`` (the Numba kernel) otherwise."""
    kerns = {}

    def g(x, out, n, is_max, dv, p0, p1):
        c = x.dtype.char
        if (c in "fd" and out.dtype.char == c and dv.dtype.char == c and MODE[0] != "0" and x.ndim == 1
                and out.ndim == 1 and x.flags.c_contiguous and out.flags.c_contiguous and out.flags.writeable
                and n >= 1 and 0 <= p0 and p1 <= out.shape[0] and p1 * n <= x.shape[0] and dv.shape[0] >= 1):
            k = (c, bool(is_max))
            f = kerns.get(k)
            if f is None:
                if not available():
                    return fallback(x, out, n, is_max, dv, p0, p1)
                f = kerns[k] = pool_global_kernel(x.dtype, is_max)
            if p0 < p1:
                pk = (n, p0, p1)
                prm = _prms.get(pk)
                if prm is None:
                    if len(_prms) > 4096:
                        _prms.clear()
                    prm = _prms[pk] = np.array(pk, np.int64)      # (the kernel only reads it)
                f(x, out, dv, prm)
            return
        fallback(x, out, n, is_max, dv, p0, p1)
    g.fallback = fallback
    return g


# ------------------------------------------------------------------------------------ row sum / mean
def _render_row_reduce(t: str, mean: bool) -> str:
    L = [f'define void @"kernel"({t}* noalias %x, {t}* noalias %out, i64* noalias %prm) {{',
         "entry:"]
    for k, nm in enumerate(("nr", "p0", "p1", "xso", "xoff", "oso", "ooff")):
        L += [f"  %pp{k} = getelementptr i64, i64* %prm, i64 {k}", f"  %{nm} = load i64, i64* %pp{k}"]
    L += ["  %nrf = sitofp i64 %nr to double",
          "  %go = icmp slt i64 %p0, %p1",
          "  br i1 %go, label %row, label %done",
          "row:",
          "  %p = phi i64 [ %p0, %entry ], [ %pn, %rend ]",
          "  %qm = mul i64 %p, %xso", "  %q = add i64 %qm, %xoff",
          f"  %xr = getelementptr {t}, {t}* %x, i64 %q",
          "  %hb = icmp sgt i64 %nr, 0",
          "  br i1 %hb, label %blk, label %rend",
          "blk:",
          "  %r0 = phi i64 [ 0, %row ], [ %e, %bend ]",
          "  %a = phi double [ 0.0, %row ], [ %an, %bend ]",
          f"  %e0 = add i64 %r0, {BLOCK}",
          "  %ec = icmp slt i64 %e0, %nr",
          "  %e = select i1 %ec, i64 %e0, i64 %nr",
          "  br label %in",
          "in:",
          "  %r = phi i64 [ %r0, %blk ], [ %r1, %in ]",
          "  %b = phi double [ 0.0, %blk ], [ %bn, %in ]",
          f"  %xp = getelementptr {t}, {t}* %xr, i64 %r",
          f"  %xv = load {t}, {t}* %xp"]
    if t == "float":
        L += ["  %v = fpext float %xv to double"]
    L += ["  %bn = fadd reassoc contract double %b, " + ("%v" if t == "float" else "%xv"),
          "  %r1 = add i64 %r, 1",
          "  %im = icmp slt i64 %r1, %e",
          "  br i1 %im, label %in, label %bend",
          "bend:",
          "  %an = fadd double %a, %bn",
          "  %bm = icmp slt i64 %e, %nr",
          "  br i1 %bm, label %blk, label %rend",
          "rend:",
          "  %af = phi double [ 0.0, %row ], [ %an, %bend ]"]
    mv = "%af"
    if mean:
        L += ["  %mv = fdiv double %af, %nrf"]
        mv = "%mv"
    sv = mv
    if t == "float":
        L += [f"  %sv = fptrunc double {mv} to float"]
        sv = "%sv"
    L += ["  %om = mul i64 %p, %oso", "  %oo = add i64 %om, %ooff",
          f"  %op = getelementptr {t}, {t}* %out, i64 %oo",
          f"  store {t} {sv}, {t}* %op",
          "  %pn = add i64 %p, 1",
          "  %pm = icmp slt i64 %pn, %p1",
          "  br i1 %pm, label %row, label %done",
          "done:",
          "  ret void",
          "}"]
    return "\n".join(L) + "\n"


def row_reduce_kernel(dt, mean: bool):
    """The builtin ``f(x, out, prm)``: for rows p in [prm[1], prm[2]): out[prm[6] + p * prm[5]] = sum (mean) of
    x[q : q + prm[0]], q = prm[4] + p * prm[3]."""
    t = _tn(dt)
    return _get(("rowred", t, bool(mean)), f"rowred{'mean' if mean else 'sum'}{t[0]}",
                lambda: _render_row_reduce(t, bool(mean)), 3, interleave=True)


def bind_rows(kind: str, xbuf, obuf, m):
    """``f(xb, ob)`` running reduction.py's kernel for plan ``m`` (a row-mode plan: unit-stride reduced run, no
    inner dim) of a sum / mean of float32 / float64 into the same dtype, on the IR kernel, split over outer
    rows as reduce_into splits them (one call below reduction._PAR_MIN elements or on one thread, else ranges
    of rows); None where the plan is another one (the caller runs its Numba kernel).  Every index is checked
    against the buffers' sizes here."""
    if kind not in ("sum", "mean") or not available():
        return None
    dt = xbuf.dtype
    if dt not in (np.float32, np.float64) or obuf.dtype != dt or xbuf.ndim != 1 or obuf.ndim != 1 \
            or not xbuf.flags.c_contiguous or not obuf.flags.c_contiguous:
        return None
    no, nr, ni, xso, xsr, xsi, xoff, oso, osi, ooff = (int(v) for v in m[:10])
    if ni != 1 or xsr != 1 or no < 1 or nr < 0 or xso < 0 or oso < 0 or xoff < 0 or ooff < 0:
        return None
    if nr > 0 and xoff + (no - 1) * xso + nr > xbuf.shape[0]:
        return None
    if ooff + (no - 1) * oso >= obuf.shape[0]:
        return None
    from .. import threads
    from . import reduction
    kern = row_reduce_kernel(dt, kind == "mean")
    nt = threads.NUM_THREADS
    if no * nr < reduction._PAR_MIN or nt == 1:
        prm = np.array((nr, 0, no, xso, xoff, oso, ooff), np.int64)
        f = lambda xb, ob: kern(xb, ob, prm)  # noqa: E731
        f.calls = lambda xb, ob: [(kern, (xb, ob, prm), None)]      # (native_chain)
        return f
    if no < nt:
        return None
    prms = [np.array((nr, a, b, xso, xoff, oso, ooff), np.int64) for a, b in threads.split(no, nt)]
    return lambda xb, ob: threads.run_parallel(lambda pm: kern(xb, ob, pm), prms)


# ------------------------------------------------------------------------------------ conv bias / relu pass
def _render_bias_act(t: str, has_bias: bool, has_e: bool, relu: bool) -> str:
    L = [f'define void @"kernel"({t}* %r, {t}* noalias %bias, {t}* %e, i64* noalias %prm) {{',
         "entry:"]
    for k, nm in enumerate(("L", "O", "q0", "q1")):
        L += [f"  %pp{k} = getelementptr i64, i64* %prm, i64 {k}", f"  %{nm} = load i64, i64* %pp{k}"]
    L += ["  %go0 = icmp slt i64 %q0, %q1", "  %go1 = icmp sgt i64 %L, 0", "  %go = and i1 %go0, %go1",
          "  br i1 %go, label %plane, label %done",
          "plane:",
          "  %q = phi i64 [ %q0, %entry ], [ %qn, %pend ]",
          "  %s = mul i64 %q, %L",
          f"  %rs = getelementptr {t}, {t}* %r, i64 %s",
          f"  %es = getelementptr {t}, {t}* %e, i64 %s"]
    if has_bias:
        L += ["  %c = srem i64 %q, %O", f"  %bp = getelementptr {t}, {t}* %bias, i64 %c"]
    else:
        L += [f"  %bp = getelementptr {t}, {t}* %bias, i64 0"]
    L += [f"  %bv = load {t}, {t}* %bp",
          "  br label %loop",
          "loop:",
          "  %i = phi i64 [ 0, %plane ], [ %i1, %loop ]",
          f"  %rp = getelementptr {t}, {t}* %rs, i64 %i",
          f"  %v0 = load {t}, {t}* %rp"]
    cur = "%v0"
    if has_e or has_bias:
        L += [f"  %v1 = fadd {t} {cur}, %bv"]
        cur = "%v1"
    if has_e:
        L += [f"  %ep = getelementptr {t}, {t}* %es, i64 %i", f"  %ev = load {t}, {t}* %ep",
              f"  %v2 = fadd {t} {cur}, %ev"]
        cur = "%v2"
    if relu:
        L += [f"  %neg = fcmp olt {t} {cur}, 0.0", f"  %v3 = select i1 %neg, {t} 0.0, {t} {cur}"]
        cur = "%v3"
    L += [f"  store {t} {cur}, {t}* %rp",
          "  %i1 = add i64 %i, 1",
          "  %im = icmp slt i64 %i1, %L",
          "  br i1 %im, label %loop, label %pend",
          "pend:",
          "  %qn = add i64 %q, 1",
          "  %qm = icmp slt i64 %qn, %q1",
          "  br i1 %qm, label %plane, label %done",
          "done:",
          "  ret void",
          "}"]
    return "\n".join(L) + "\n"


def bias_act_kernel(dt, has_bias: bool, has_e: bool, relu: bool):
    """The builtin ``f(r, bias, e, prm)``: planes [prm[2], prm[3]) of prm[0] elements of r, in place (see the
    module doc; the bias of plane q is bias[q % prm[1]], or bias[0] without ``has_bias``)."""
    t = _tn(dt)
    k = ("biasact", t, bool(has_bias), bool(has_e), bool(relu))
    return _get(k, f"biasact{t[0]}{int(has_bias)}{int(has_e)}{int(relu)}",
                lambda: _render_bias_act(t, bool(has_bias), bool(has_e), bool(relu)), 4, interleave=True)


_ba: dict = {}          # (dtype char, has_bias, has_e, relu) -> builtin (per-call lookups kept cheap)


def bias_act(r, bias, has_bias, e, has_e, relu, L, O, fallback):
    """``fn(q0, q1)`` doing conv._bias_act(r, bias, has_bias, e, has_e, relu, L, O, q0, q1) on the IR kernel
    (float32 / float64 C-contiguous 1-D arrays of one dtype, every index in bounds), else on ``fallback``."""
    c = r.dtype.char
    if (c in "fd" and bias.dtype.char == c and e.dtype.char == c and MODE[0] != "0" and r.ndim == 1
            and bias.ndim == 1 and e.ndim == 1 and r.flags.c_contiguous and bias.flags.c_contiguous
            and e.flags.c_contiguous and r.flags.writeable and L >= 0 and O >= 1
            and bias.shape[0] >= (O if has_bias else 1) and (not has_e or e.shape[0] >= r.shape[0])):
        k = (c, has_bias, has_e, relu)
        f = _ba.get(k)
        if f is None:
            if not available():
                return lambda q0, q1: fallback(r, bias, has_bias, e, has_e, relu, L, O, q0, q1)
            f = _ba[k] = bias_act_kernel(r.dtype, has_bias, has_e, relu)
        n = r.shape[0]

        def run(q0, q1):
            if 0 <= q0 and q1 * L <= n:
                pk = (L, O, q0, q1)
                prm = _prms.get(pk)
                if prm is None:
                    if len(_prms) > 4096:
                        _prms.clear()
                    prm = _prms[pk] = np.array(pk, np.int64)      # (the kernel only reads it)
                f(r, bias, e, prm)
            else:
                raise IndexError(f"conv bias/relu pass: planes [{q0}, {q1}) of {L} past {n} elements")
        return run
    return lambda q0, q1: fallback(r, bias, has_bias, e, has_e, relu, L, O, q0, q1)
