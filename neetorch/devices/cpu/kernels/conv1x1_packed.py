"""Unpadded stride-1 1x1 convolutions (float32) on linalg's packed GEMM kernel, the activation as its B operand.

Per image and group the conv is ``out[Og, HW] = W[Og, Cg] @ X[Cg, HW]``.  linalg's packed kernel (``_pk_ir``: 6 x 16
tiles in 12 ymm accumulators on AVX2, 12 x 32 in 24 zmm on AVX-512F; each row of A broadcast, each row of a panel of
PK_NR columns loaded as two vectors) takes W as its A operand as it is (row-major, row stride Cg), and X:

* "direct" mode (planes of _DIRECT_MIN_L pixels and more): read in place, its rows as the panels' rows (the kernel's
  IR with the panel row stride a runtime value, unaligned loads: _pkx_ir), the output written straight into ``res``;
  the last, partial panel (HW % PK_NR columns) packed zero-padded into a small scratch and computed into another;
* "packed" mode (smaller planes): packed per call into panels (each task packs the panels it computes, row by row
  of X), the products into a scratch of padded rows where HW is not a multiple of PK_NR, else into ``res``.

Each task then runs the conv's epilogue (bias, residual, relu: conv.py's _epi_kernel, an llvm_render elementwise
kernel; from the scratch it also compacts) on its block while it is in cache.  The tasks (column parts of each
group's output, in the direct mode of at most _PART_BYTES on one thread too; blocks of output channels for weights
over _ROWS_MIN_W on 2+ threads) run on gemm_driver's native workers (``call_plan``: no Python pool hand-off), one
driver call per image.

Why: OpenBLAS's Haswell sgemm runs these short-K products (K = 16..128: SqueezeNet's squeeze / expand convs,
ShuffleNet's grouped ones, Inception's 1x1 branches) at 40-60 GF/s on the AVX2 box, conv_direct's kernels at 40-50;
the packed kernel at 70-85 (its time without the packing: 0.6-0.7x OpenBLAS's on these shapes).  Measured figures:
at _DIRECT_MIN_L.  And every output channel is summed in the same order (one FMA chain per output over K in blocks of
PK_KC, whatever tile its row falls in): unlike OpenBLAS's sgemm (its 12-row register tiles sum their two halves of 6
in different orders), equal weight rows give bitwise-equal output channels, which the ONNX light models'
constant-weight conformance cases need (light_squeezenet: logits ~1.4e10 through a softmax, one ulp apart is a
one-hot output; with this path its last 512 -> 1000 conv is symmetric whatever path the other convs take).

Taken from conv_direct.try_conv2d (NEE_CONV_DIRECT unset) where :func:`pays`; NEE_CONV_PK1X1=0 turns it off (the
previous rules then decide: conv_direct's kernels or conv.py's GEMMs).

The "fused" variant (session 15, ``FUSED``: outputs of _FUSED_MIN_L pixels and more, strided 1x1s too) runs the
epilogue in the tiles' last stores instead of a pass (its own IR: ``_etile_ir`` / ``_epk_ir`` / ``_fused_ir``).

An input prologue (session 18, ``pre`` = (steps, S): per-channel mul / add / relu, PRO_STEPS) is applied to X's
values as the packed mode packs them (one group, stride 1: the packed mode then, in both variants); the JIT hands
it DenseNet's BatchNormalization + ReLU before its 1x1 convs (kernels/conv_epilogue.py compile_conv_prologue).
"""
from __future__ import annotations

import hashlib
import os
import re
import threading

import numpy as np

from .. import native_chain, threads
from . import conv_act

ON = [os.environ.get("NEE_CONV_PK1X1", "1") not in ("0", "")]
FORCE = [None]              # tests: True takes every conv the path can, False none (None: the cost rule)
MODE = [None]               # tests / benchmarks: "direct" or "packed" (None: by the plane's size, _DIRECT_MIN_L)

_W = 48                     # int64 words per task row of the packed mode (64-byte multiple; the direct mode: 88)
_PW = 40                    # first of a task's own words (see _task_ir, _direct_ir)

_state = {"ok": None}
_tls = threading.local()
_plans: dict = {}
_pays: dict = {}
_task_addrs: dict = {}


def available() -> bool:
    """The packed kernel (AVX-512F or AVX2 + FMA, LLVM) and gemm_driver's call plans are here."""
    ok = _state["ok"]
    if ok is None:
        ok = False
        try:
            from .. import gemm_driver
            from . import linalg
            ok = bool(linalg._pk_host_ok() and gemm_driver.available())
        except Exception:   # noqa: BLE001 - no LLVM / driver: the path is off
            ok = False
        _state["ok"] = ok
    return ok


def _row_copy_ir(entry: str, pd: str, poff: str, pbase: str, xoff: str, xbase: str, nr: int, pro=()) -> str:
    """IR blocks ``st`` .. ``stend`` (entered from ``%entry``, leaving to ``%kend``): one panel row of nr floats at
    pbase + poff + t, copied from xbase + xoff + t for t < %rem and zero past it (a partial panel's missing
    columns).  Shared by the per-task packing (:func:`_task_ir`) and the direct mode's last panel
    (:func:`_direct_ir`).  ``pro``: the input prologue's steps on each copied value (:func:`_pro_ir`, its
    per-row scalars ``%pss{q}`` defined by the caller)."""
    lines, val = _pro_ir(pro, "%xval", "float", "%pss", "sx")
    return f"""st:
  %t = phi i64 [0, %{entry}], [%t1, %stend]
  %in = icmp ult i64 %t, %rem
  %{pd} = add i64 {poff}, %t
  %pp = getelementptr float, float* {pbase}, i64 %{pd}
  br i1 %in, label %sload, label %szero
sload:
  %xd = add i64 {xoff}, %t
  %xp = getelementptr float, float* {xbase}, i64 %xd
  %xval = load float, float* %xp, align 4
{lines}  store float {val}, float* %pp, align 4
  br label %stend
szero:
  store float 0.0, float* %pp, align 4
  br label %stend
stend:
  %t1 = add i64 %t, 1
  %tm = icmp ult i64 %t1, {nr}
  br i1 %tm, label %st, label %kend
"""


# the input prologue (kernels/conv_epilogue.py's conv_prologue: DenseNet's BatchNormalization + ReLU before its 1x1
# convs): per input channel k, a chain of steps applied to X's values as they are packed, each "mul" / "add" with
# the k-th scalar of its row of S (a (steps with an operand, C) float32 array) or "relu" (x < 0 -> 0: NaN and -0.0
# kept, as conv.py's _bias_act); fmul / fadd rounded one at a time (no contraction), as numpy's ops
PRO_STEPS = ("mul", "add", "relu")


def _pro_ir(pro, src: str, ty: str, sc: str, tag: str):
    """(IR lines, result name): the prologue ``pro`` on ``src`` (type ``ty``: float or a vector of floats), the
    operand of step q in ``{sc}{q}`` (already of type ty)."""
    lines, cur, q = [], src, 0
    zero = "0.0" if ty == "float" else "zeroinitializer"
    for i, st in enumerate(pro):
        nm = f"%{tag}{i}"
        if st == "relu":
            lines.append(f"  {nm}c = fcmp olt {ty} {cur}, {zero}")
            sel = "i1" if ty == "float" else f"<{ty.split()[0][1:]} x i1>"
            lines.append(f"  {nm} = select {sel} {nm}c, {ty} {zero}, {ty} {cur}")
        else:
            lines.append(f"  {nm} = {'fmul' if st == 'mul' else 'fadd'} {ty} {cur}, {sc}{q}")
            q += 1
        cur = nm
    return "".join(ln + "\n" for ln in lines), cur


def _pro_operands(pro) -> int:
    return sum(1 for st in pro if st != "relu")


def _pack_fn_ir(nr: int, pro=()) -> str:
    """``@pack(X, P, L, K, p0, p1[, S])``: panels [p0, p1) of X (K rows of L floats) into P (panel p at + p * K * nr:
    K x nr floats, the last panel's missing columns zero; row by row, each row's part read in one pass); with a
    prologue ``pro`` its steps on each value (row k's operands S[q * K + k])."""
    V = f"<{nr} x float>"
    nq = _pro_operands(pro)
    sarg = ", float* %S" if pro else ""
    scal = ""
    for q in range(nq):
        scal += (f"  %psk{q} = mul i64 %K, {q}\n  %psi{q} = add i64 %psk{q}, %k\n"
                 f"  %psp{q} = getelementptr float, float* %S, i64 %psi{q}\n"
                 f"  %pss{q} = load float, float* %psp{q}, align 4\n"
                 f"  %psv{q}i = insertelement {V} undef, float %pss{q}, i32 0\n"
                 f"  %psv{q} = shufflevector {V} %psv{q}i, {V} undef, <{nr} x i32> zeroinitializer\n")
    vlines, vval = _pro_ir(pro, "%v", V, "%psv", "pv")
    return f"""
define internal void @pack(float* %X, float* %P, i64 %L, i64 %K, i64 %p0, i64 %p1{sarg}) {{
entry:
  %lf = udiv i64 %L, {nr}
  %pf0 = icmp ult i64 %lf, %p1
  %pf = select i1 %pf0, i64 %lf, i64 %p1
  %hasv = icmp ult i64 %p0, %pf
  %hast = icmp ult i64 %pf, %p1
  %pstride = mul i64 %K, {nr}
  br label %krow
krow:
  %k = phi i64 [0, %entry], [%k1, %kend]
  %xo = mul i64 %k, %L
  %xr = getelementptr float, float* %X, i64 %xo
  %po = mul i64 %k, {nr}
  %pr = getelementptr float, float* %P, i64 %po
{scal}  br i1 %hasv, label %vloop, label %vdone
vloop:
  %p = phi i64 [%p0, %krow], [%pn, %vloop]
  %xc = mul i64 %p, {nr}
  %xs = getelementptr float, float* %xr, i64 %xc
  %xv = bitcast float* %xs to {V}*
  %v = load {V}, {V}* %xv, align 4
{vlines}  %pc = mul i64 %p, %pstride
  %ps = getelementptr float, float* %pr, i64 %pc
  %pv = bitcast float* %ps to {V}*
  store {V} {vval}, {V}* %pv, align 32
  %pn = add i64 %p, 1
  %pm = icmp ult i64 %pn, %pf
  br i1 %pm, label %vloop, label %vdone
vdone:
  br i1 %hast, label %tail, label %kend
tail:
  %tc = mul i64 %pf, {nr}
  %rem = sub i64 %L, %tc
  %tpc = mul i64 %pf, %pstride
  br label %st
{_row_copy_ir('tail', 'pd0', '%tpc', '%pr', '%tc', '%xr', nr, pro)}kend:
  %k1 = add i64 %k, 1
  %km = icmp ult i64 %k1, %K
  br i1 %km, label %krow, label %done
done:
  ret void
}}
"""


def _task_ir(nr: int, nops: int, ne: int, pro=()) -> str:
    """``kernel(A, P, op0, ..., op{nops-1}[, S], D)``: one task: panels [D[40], D[41]) of X (op{nops-1} + D[44]
    floats: D[43] rows of D[42] floats) packed into P + D[47] (panel p at + p * K * nr: K x nr floats, the last
    panel's missing columns zero; row by row, each row's part read in one pass; with the prologue ``pro`` on its
    values, its operands S), then linalg's packed kernel (address D[8], its descriptor D[0:8]: the task's columns
    and rows) on A + D[45] and those panels into op1 + D[46]; then the elementwise epilogue (address D[9], 0: none)
    on op0 .. op{ne-1} with its meta at D[10:]."""
    V = f"<{nr} x float>"
    ops = ", ".join(f"i8* %o{i}" for i in range(nops)) + (", i8* %So" if pro else "")
    sload = "  %S = bitcast i8* %So to float*\n" if pro else ""
    sarg = ", float* %S" if pro else ""
    esig = ", ".join(["i8*"] * ne + ["i64*"])
    eargs = ", ".join(f"i8* %o{i}" for i in range(ne))
    words = "".join(f"  %wp{i} = getelementptr i64, i64* %D, i64 {_PW + i}\n  %w{i} = load i64, i64* %wp{i}\n"
                    for i in range(8))
    return _pack_fn_ir(nr, pro) + f"""
define void @"kernel"(i8* %A, i8* %P, {ops}, i8* %Dr) {{
entry:
  %D = bitcast i8* %Dr to i64*
{words}{sload}  %X0 = bitcast i8* %o{nops - 1} to float*
  %X = getelementptr float, float* %X0, i64 %w4
  %A0 = bitcast i8* %A to float*
  %Ag = getelementptr float, float* %A0, i64 %w5
  %Ai = bitcast float* %Ag to i8*
  %C0 = bitcast i8* %o1 to float*
  %Cg = getelementptr float, float* %C0, i64 %w6
  %Ci = bitcast float* %Cg to i8*
  %P0 = bitcast i8* %P to float*
  %Pg = getelementptr float, float* %P0, i64 %w7
  %Pgi = bitcast float* %Pg to i8*
  %pkp = getelementptr i64, i64* %D, i64 8
  %pka = load i64, i64* %pkp
  %pk = inttoptr i64 %pka to void (i8*, i8*, i8*, i8*)*
  %none = icmp uge i64 %w0, %w1
  br i1 %none, label %epi, label %work
work:
  call void @pack(float* %X, float* %Pg, i64 %w2, i64 %w3, i64 %w0, i64 %w1{sarg})
  call void %pk(i8* %Ai, i8* %Pgi, i8* %Ci, i8* %Dr)
  br label %epi
epi:
  %efp = getelementptr i64, i64* %D, i64 9
  %efa = load i64, i64* %efp
  %has = icmp ne i64 %efa, 0
  br i1 %has, label %run, label %out
run:
  %ef = inttoptr i64 %efa to void ({esig})*
  %mp = getelementptr i64, i64* %D, i64 10
  call void %ef({eargs}, i64* %mp)
  br label %out
out:
  ret void
}}
"""


def _pkx_ir(w: int) -> str | None:
    """linalg's packed kernel (``_pk_ir(w)``) turned into ``@pkx(A, B, C, D)`` reading its "panels" straight from a
    row-major B of row stride D[8] floats (columns [D[5], D[1]) at B + j; unaligned loads) instead of packed panels;
    internal, its tiles renamed.  The same tiles and FMA order (row-symmetric as the packed one).  None when the
    text does not have the expected shape (linalg's emitter changed: the caller uses the packed mode)."""
    from . import linalg
    nr = 2 * w
    t = linalg._pk_ir(w)
    n_tiles = t.count("define internal void @tile")
    reps = [
        (f"align {4 * w}", "align 4", None),
        ("%pko = mul i64 %k0, " + str(nr), "%pko = mul i64 %k0, %ldb", 1),
        ("%po0 = mul i64 %j, %K", "%po0 = add i64 %j, 0", 1),
        ("  %ldc = add i64 %d4, 0\n", "  %ldc = add i64 %d4, 0\n  %dp8 = getelementptr i64, i64* %D, i64 8\n"
                                      "  %ldb = load i64, i64* %dp8\n", 1),
        ("i64 %K, i1 %acc) {", "i64 %K, i1 %acc, i64 %ldb) {", n_tiles),
        ("i64 %kc, i1 %later)", "i64 %kc, i1 %later, i64 %ldb)", n_tiles),
        ('define void @"kernel"(', "define internal void @pkx(", 1),
    ]
    for old, new, count in reps:
        c = t.count(old)
        if c == 0 or (count is not None and c != count):
            return None
        t = t.replace(old, new)
    t2, n = re.subn(r"= mul i64 (%ku\d+|%k), " + str(nr) + "\n", r"= mul i64 \1, %ldb" + "\n", t)
    if n == 0:
        return None
    t2 = t2.replace("@tile", "@xtile")
    # the declarations of intrinsics stay; the renamed kernel is the module's only user of its tiles
    return t2


def _direct_ir(nr: int, w: int, nops: int, ne: int) -> str | None:
    """``kernel(A, P, op0, ..., op{nops-1}, D)``, one task of the direct mode: ``@pkx`` (its descriptor D[0:9]: all
    rows, the task's full panels, B row stride D[8]) on A + D[45], X + D[44] (X = op{nops-1}) into op0 + D[46];
    the epilogue (address D[9], 0: none) on op0, op0, op2 .. op{ne-1} with its meta at D[10:]; then, where D[40]
    != 0, the last (partial) panel: packed from X's columns [D[41], D[42]) (D[43] rows) into P + D[47] (zero
    padded), @pkx with descriptor D[74:83] into op1 + D[48], and the epilogue (address D[83]) on op0, op1, op2 ..
    with its meta at D[50:]."""
    body = _pkx_ir(w)
    if body is None:
        return None
    ops = ", ".join(f"i8* %o{i}" for i in range(nops))
    esig = ", ".join(["i8*"] * ne + ["i64*"])
    rest = "".join(f", i8* %o{i}" for i in range(2, ne))
    words = "".join(f"  %wp{i} = getelementptr i64, i64* %D, i64 {_PW + i}\n  %w{i} = load i64, i64* %wp{i}\n"
                    for i in range(9))
    return body + f"""
define void @"kernel"(i8* %A, i8* %P, {ops}, i8* %Dr) {{
entry:
  %D = bitcast i8* %Dr to i64*
{words}  %X0 = bitcast i8* %o{nops - 1} to float*
  %X = getelementptr float, float* %X0, i64 %w4
  %Xi = bitcast float* %X to i8*
  %A0 = bitcast i8* %A to float*
  %Ag = getelementptr float, float* %A0, i64 %w5
  %Ai = bitcast float* %Ag to i8*
  %R0 = bitcast i8* %o0 to float*
  %Rg = getelementptr float, float* %R0, i64 %w6
  %Ri = bitcast float* %Rg to i8*
  call void @pkx(i8* %Ai, i8* %Xi, i8* %Ri, i8* %Dr)
  %efp = getelementptr i64, i64* %D, i64 9
  %efa = load i64, i64* %efp
  %has = icmp ne i64 %efa, 0
  br i1 %has, label %run, label %tail0
run:
  %ef = inttoptr i64 %efa to void ({esig})*
  %mp = getelementptr i64, i64* %D, i64 10
  call void %ef(i8* %o0, i8* %o0{rest}, i64* %mp)
  br label %tail0
tail0:
  %ht = icmp ne i64 %w0, 0
  br i1 %ht, label %pk0, label %out
pk0:
  %rem = sub i64 %w2, %w1
  %P0 = bitcast i8* %P to float*
  %Pt = getelementptr float, float* %P0, i64 %w7
  %Xt = getelementptr float, float* %X, i64 %w1
  br label %krow
krow:
  %k = phi i64 [0, %pk0], [%k1, %kend]
  %xo = mul i64 %k, %w2
  %po = mul i64 %k, {nr}
  br label %st
{_row_copy_ir('krow', 'pd', '%po', '%Pt', '%xo', '%Xt', nr)}kend:
  %k1 = add i64 %k, 1
  %km = icmp ult i64 %k1, %w3
  br i1 %km, label %krow, label %tmul
tmul:
  %Pti = bitcast float* %Pt to i8*
  %S0 = bitcast i8* %o1 to float*
  %St = getelementptr float, float* %S0, i64 %w8
  %Sti = bitcast float* %St to i8*
  %tdp = getelementptr i64, i64* %D, i64 74
  %tdr = bitcast i64* %tdp to i8*
  call void @pkx(i8* %Ai, i8* %Pti, i8* %Sti, i8* %tdr)
  %tefp = getelementptr i64, i64* %D, i64 83
  %tefa = load i64, i64* %tefp
  %tef = inttoptr i64 %tefa to void ({esig})*
  %tmp = getelementptr i64, i64* %D, i64 50
  call void %tef(i8* %o0, i8* %o1{rest}, i64* %tmp)
  br label %out
out:
  ret void
}}
"""


def _task_addr(kind: str, nr: int, w: int, nops: int, ne: int, pro=()):
    key = (kind, nr, w, nops, ne, pro)
    if pro and kind != "packed":
        return None
    a = _task_addrs.get(key)
    if a is None:
        from .. import llvm_render
        text = _task_ir(nr, nops, ne, pro) if kind == "packed" else _direct_ir(nr, w, nops, ne)
        a = _task_addrs[key] = False if text is None else llvm_render.compile_ir(
            f"conv_pk1x1_{kind}_" + hashlib.sha1(text.encode()).hexdigest()[:16], lambda: text)
    return a or None


# tasks per thread on 2+ threads (column parts of each group's output, claimed by whoever is free: a descheduled
# worker leaves its parts to the others)
_TASKS_PER_THREAD = int(os.environ.get("NEE_CONV_PK1X1_TASKS", "2"))
# direct mode: column parts of at most this many bytes of output (and of input) each, on one thread too: the
# epilogue then runs on a block still in L2
_PART_BYTES = 128 << 10
# the direct mode (X read in place) on planes of at least _DIRECT_MIN_L pixels: there packing X costs more than the
# direct mode's unaligned strided loads.  1 thread, conv + bias + relu, process CPU time, min of 20-300 interleaved
# calls, load ~6, us direct / packed: 64 -> 16 on 55x55 104 / 135, 16 -> 64 114 / 133, 128 -> 16 199 / 253, 128 -> 32
# on 27x27 93 / 99, 32 -> 128 127 / 120, 320 -> 128 on 28x28 826 / 1093, 256 -> 64 368 / 498, 136 -> 136 in 4 groups
# on 28x28 109 / 125; 14x14 even (576 -> 128 408 / 392, 272 -> 272 in 4 groups 105 / 110); on 13x13 and 7x7 the packed
# mode (384 -> 64 166 / 146, 512 -> 64 215 / 186, 1024 -> 352 on 7x7 772 / 556, SqueezeNet's 512 -> 1000 2725 / 2208)
_DIRECT_MIN_L = 512
# packed mode on 2+ threads: weights of more than this many bytes (one group) are split by output channels, not
# columns (SqueezeNet's 512 -> 1000 on 13x13, 2 MB: column parts each streamed all of W per panel, 2 threads ~1.2x
# OpenBLAS's time)
_ROWS_MIN_W = 1 << 20
# one group on 2+ threads (the unfused plan): the number of column parts is the one whose panels the threads, claiming
# parts in order, finish soonest (_balanced_parts: a greedy claim simulated in panel units), from the cache rule's
# count up to _BALANCE_MAX_PER_THREAD parts a thread; among equal finishes the one nearest _TASKS_PER_THREAD a thread
# (then the more parts).  The count that rule gave alone could split unevenly: 13x13 planes (6 panels of 32 columns) in
# 4 parts of 1, 2, 1, 2 panels, the last part claimed after the others finish, 4 panels' time against 3 (SqueezeNet's
# 48 -> 192 and 64 -> 256 expands); 27x27 (22 full panels and a partial one computed by the last part) 5, 6, 5, 6 + 1:
# 12 against 11.5.  The partial panel counts as a whole one and the boundaries share the panels out evenly with it.
# Which columns a task computes never changes a column's sums (one FMA chain per output over K): the same bits
_BALANCE = [os.environ.get("NEE_CONV_PK1X1_BALANCE", "1") not in ("0", "")]
_BALANCE_MAX_PER_THREAD = 4


def _split_panels(n: int, extra: int, parts: int) -> list:
    """Boundaries [p0, p1) of ``parts`` runs of ``n`` panels, the last run also computing ``extra`` (0 / 1) more
    panel: each run at least one panel, the (n + extra) panels shared out as evenly as whole panels allow."""
    tot = n + extra
    b = [0]
    for q in range(1, parts):
        v = (q * tot + parts // 2) // parts
        b.append(min(max(v, b[-1] + 1), n - (parts - q)))
    b.append(n)
    return list(zip(b[:-1], b[1:]))


def _makespan(sizes, nt: int) -> float:
    """When ``nt`` equally fast threads finish tasks of ``sizes`` claimed in order, each by the first thread free."""
    free = [0.0] * nt
    for s in sizes:
        i = free.index(min(free))
        free[i] += s
    return max(free)


def _runs_makespan(runs, extra: int, nt: int) -> float:
    sizes = [p1 - p0 for p0, p1 in runs]
    sizes[-1] += extra
    return _makespan(sizes, nt)


def _balanced_runs(n: int, extra: int, lo: int, nt: int, runs: list) -> list:
    """The runs of ``n`` panels (+ ``extra`` on the last run) for ``nt`` threads claiming them in order: ``runs`` (the
    cache rule's split) unless another count of runs (from ``lo``, at most n), shared out by _split_panels, finishes
    sooner: see _BALANCE."""
    lo = max(1, min(lo, n))
    hi = max(lo, min(n, _BALANCE_MAX_PER_THREAD * nt))
    want = _TASKS_PER_THREAD * nt
    base = _runs_makespan(runs, extra, nt)
    best, pick = None, runs
    for parts in range(lo, hi + 1):
        r = _split_panels(n, extra, parts)
        key = (_runs_makespan(r, extra, nt), abs(parts - want), -parts)
        if key[0] < base and (best is None or key < best):
            best, pick = key, r
    return pick


class _Plan:
    __slots__ = ("call", "d", "ext", "has_e", "kind", "pbuf", "sbuf", "Lp", "nops", "use_b", "fused", "pro")


def _plan(C: int, H: int, W: int, O: int, G: int, has_b: bool, has_e: bool, relu: bool, nt: int, kind=None,
          pro=()):
    """The unfused path's plan (:class:`_Plan`), or None; ``pro``: an input prologue (its panels packed: the
    packed mode, one group)."""
    from .. import gemm_driver
    from . import conv, linalg
    nr, w = linalg.PK_NR, linalg.PK_VEC
    Cg, Og = C // G, O // G
    L = H * W
    kc = -(-Cg // -(-Cg // linalg.PK_KC))
    if kind is None:
        kind = "direct" if L >= _DIRECT_MIN_L else "packed"
    if pro:
        if G != 1:
            return None
        kind = "packed"
    npan = -(-L // nr)
    Lp = npan * nr
    if kind == "packed":
        scratch = Lp != L
    else:
        scratch = L % nr != 0
    any_epi = has_b or has_e or relu
    # out = relu((acc + bias) + e), the parts present; a copy (a zero bias) where there is none but a scratch
    use_b = has_b or (scratch and not any_epi)
    kern = conv._epi_kernel("float32", use_b, has_e, relu) if (any_epi or scratch) else None
    if (any_epi or scratch) and kern is None:
        return None
    epi = conv._epi_addr(kern, [1, 1] + ([0] if use_b else []) + ([1] if has_e else []), 1) if kern else 0
    ne = 2 + use_b + has_e
    nops = ne + 1                                   # + X
    addr = _task_addr(kind, nr, w, nops, ne, pro)
    if addr is None:
        return None

    def meta(row, k0, c0, c1, acc_ld, acc_off, r0=0, r1=Og):
        """The epilogue meta (at ext[row, k0:]) of columns [c0, c1) of rows [r0, r1) of group g: out (res), acc (its
        offset ``acc_off`` at row r0), bias, e."""
        row[k0:k0 + 4] = (1, 1, r1 - r0, max(c1 - c0, 0))
        q = k0 + 4
        row[q:q + 5] = (0, 0, L, 1, (g * Og + r0) * L + c0)
        row[q + 5:q + 10] = (0, 0, acc_ld, 1, acc_off)
        q += 10
        if use_b:
            row[q:q + 5] = (0, 0, 1, 0, g * Og + r0)
            q += 5
        if has_e:
            row[q:q + 5] = (0, 0, L, 1, (g * Og + r0) * L + c0)

    if kind == "packed":
        fn_addr = linalg._pk_kernel()[1]
        if nt > 1 and G == 1 and Og * Cg * 4 > _ROWS_MIN_W:
            # large weights: blocks of output channels (multiples of the 6-row tile), each task packing all of X
            # into its own panels: every task streams only its rows of W past the panels
            nb = max(1, min(nt, Og // (2 * linalg.PK_MR)))
            step = -(-Og // (nb * linalg.PK_MR)) * linalg.PK_MR
            blocks = [(r, min(r + step, Og)) for r in range(0, Og, step)]
            ext = np.zeros((len(blocks), _W), np.int64)
            g = 0
            for t, (r0, r1) in enumerate(blocks):
                ext[t, :8] = (r1, Lp, Cg, Cg, Lp, 0, kc, r0)
                ext[t, 8] = fn_addr
                if kern is not None:
                    ext[t, 9] = epi
                    meta(ext[t], 10, 0, L, Lp, r0 * Lp, r0, r1)
                ext[t, _PW:_PW + 8] = (0, npan, L, Cg, 0, 0, 0, t * Cg * Lp)
            ntasks = len(blocks)
            pbuf, sbuf = ntasks * Cg * Lp, (O * Lp if scratch else 0)
        else:
            parts = 1 if nt <= 1 else max(1, min(npan, -(-_TASKS_PER_THREAD * nt // G)))
            runs = [(q * npan // parts, (q + 1) * npan // parts) for q in range(parts)]
            if nt > 1 and G == 1 and _BALANCE[0]:
                runs = _balanced_runs(npan, 0, 1, nt, runs)
                parts = len(runs)
            ntasks = G * parts
            ext = np.zeros((ntasks, _W), np.int64)
            t = 0
            for g in range(G):
                for p0, p1 in runs:
                    c0, c1 = p0 * nr, min(p1 * nr, L)
                    ext[t, :8] = (Og, p1 * nr, Cg, Cg, Lp, p0 * nr, kc, 0)
                    ext[t, 8] = fn_addr
                    if kern is not None:
                        ext[t, 9] = epi
                        meta(ext[t], 10, c0, c1, Lp, g * Og * Lp + c0)
                    ext[t, _PW:_PW + 8] = (p0, p1, L, Cg, g * Cg * L, g * Og * Cg, g * Og * Lp, g * Cg * Lp)
                    t += 1
            pbuf, sbuf = C * Lp, (O * Lp if scratch else 0)
    else:
        nfull = L // nr
        tail = L % nr != 0
        per = max(1, (_PART_BYTES // (4 * nr)) // max(Og, Cg, 1))         # panels per part (cache)
        parts = max(1, -(-nfull // per))
        lo = parts
        if nt > 1:
            parts = max(parts, -(-_TASKS_PER_THREAD * nt // G))
        parts = max(1, min(parts, nfull)) if nfull else 1
        runs = [(q * nfull // parts, (q + 1) * nfull // parts) for q in range(parts)]
        if nt > 1 and G == 1 and _BALANCE[0] and nfull > 0:
            runs = _balanced_runs(nfull, 1 if tail else 0, lo, nt, runs)
            parts = len(runs)
        ntasks = G * parts
        ext = np.zeros((ntasks, 88), np.int64)
        t = 0
        for g in range(G):
            for q, (p0, p1) in enumerate(runs):
                c0, c1 = p0 * nr, p1 * nr
                ext[t, :9] = (Og, c1, Cg, Cg, L, c0, kc, 0, L)
                if kern is not None and any_epi and c1 > c0:
                    ext[t, 9] = epi
                    meta(ext[t], 10, c0, c1, L, g * Og * L + c0)
                last = tail and q == parts - 1
                ext[t, _PW:_PW + 9] = (1 if last else 0, nfull * nr, L, Cg, g * Cg * L, g * Og * Cg, g * Og * L,
                                       g * Cg * nr, g * Og * nr)
                if last:
                    meta(ext[t], 50, nfull * nr, L, nr, g * Og * nr)
                    ext[t, 74:83] = (Og, nr, Cg, Cg, nr, 0, kc, 0, nr)     # the tail panel: B row stride nr
                    ext[t, 83] = epi
                t += 1
        pbuf, sbuf = (G * Cg * nr, O * nr) if tail else (16, 16)
    ext.flags.writeable = False
    nargs = 3 + nops + (1 if pro else 0)
    d = gemm_driver.call_plan(addr, nargs, min(nt, ntasks), ntasks, ext.strides[0])
    if d is None:
        return None
    p = _Plan()
    p.call, p.d, p.ext, p.kind, p.fused = gemm_driver.epilogue_caller(nargs), d, ext, kind, False
    p.pbuf, p.sbuf, p.Lp, p.nops, p.has_e, p.use_b, p.pro = pbuf, sbuf, Lp, nops, has_e, use_b, bool(pro)
    return p


def applies(x, w, res, G) -> bool:
    """The operands the path takes: float32, C-contiguous, an unpadded stride-1 1x1 conv's (checked by the caller)
    of at least one input channel per group, on a host with the kernel."""
    return (x.dtype == np.float32 and w.dtype == np.float32 and res.dtype == np.float32 and x.flags.c_contiguous
            and w.flags.c_contiguous and res.flags.c_contiguous and w.shape[1] >= 1 and ON[0] and available())


def _takes(x, w, res, G: int, stride):
    """``(fused, (sh, sw))`` where this path takes a conv of these operands' shapes, groups and stride (the
    layouts :func:`applies` checks; strided ones only where the fused variant runs), else None."""
    N, C, H, W = x.shape
    O = w.shape[0]
    sh, sw = stride = (int(stride[0]), int(stride[1]))
    if res.ndim != 4:
        return None
    fused = _fused_for(res.shape, stride)
    if sh < 1 or sw < 1 or ((sh, sw) != (1, 1) and not fused):
        return None
    if res.shape != (N, O, (H - 1) // sh + 1, (W - 1) // sw + 1) or C % G or O % G or w.shape[1] * G != C or \
            not applies(x, w, res, G):
        return None
    return fused, stride


def _pre_ok(pre, G: int, stride, C: int):
    """``(pro, S)`` for an input prologue this path takes (see PRO_STEPS; one group, stride 1, S a C-contiguous
    float32 (operand steps, C) array), () for none, None when it cannot take it."""
    if pre is None:
        return ()
    pro, S = pre
    pro = tuple(pro)
    if not pro or any(st not in PRO_STEPS for st in pro) or G != 1 or tuple(stride) != (1, 1):
        return None
    if not isinstance(S, np.ndarray) or S.dtype != np.float32 or not S.flags.c_contiguous or \
            S.shape != (_pro_operands(pro), C):
        return None
    return pro


def conv2d(x, w, b, res, G: int, relu=False, b2=None, e=None, stride=(1, 1), pre=None) -> bool:
    """res (N, O, OH, OW) = conv2d(x (N, C, H, W), w (O, C/G, 1, 1), groups G, ``stride``) + b (+ b2) (+ e: res's
    shape, C-contiguous float32, not sharing res's memory), through relu when ``relu``.  False (nothing written) when
    the path cannot take these operands (strided convs: only where the fused path runs, :func:`_fused_for`).
    ``pre`` = (steps, S): an input prologue applied to x's values as they are packed (see PRO_STEPS): the conv of
    that prologue's result (one group, stride 1; x itself is not written)."""
    N, C, H, W = x.shape
    O = w.shape[0]
    g = _takes(x, w, res, G, stride)
    if g is None or np.may_share_memory(res, x) or np.may_share_memory(res, w):
        return False
    fused, stride = g
    pro = _pre_ok(pre, G, stride, C)
    if pro is None or (pro and np.may_share_memory(res, pre[1])):
        return False
    if e is not None and (e.dtype != np.float32 or e.shape != res.shape or not e.flags.c_contiguous
                          or np.may_share_memory(e, res)):
        return False
    bias = b
    if b2 is not None:
        bias = b2 if bias is None else bias + b2
    if bias is not None:
        if bias.dtype != np.float32 or bias.shape != (O,):
            return False
        bias = np.ascontiguousarray(bias)
    nt = threads.NUM_THREADS
    act = conv_act.norm(relu)
    key = (C, H, W, O, G, bias is not None, e is not None, act, nt, MODE[0], fused, stride, pro)
    p = _plans.get(key)
    if p is None:
        p = _fplan(C, H, W, O, G, bias is not None, e is not None, act, nt, MODE[0], stride, pro) if fused \
            else _plan(C, H, W, O, G, bias is not None, e is not None, act, nt, MODE[0], pro)
        if len(_plans) > 1024:
            _plans.clear()
        _plans[key] = p = p if p is not None else False
    if p is False:
        return False
    _run(p, x, w, bias, res, e, N, pre[1] if pro else None)
    return True


def _scratch(tag: str, n: int) -> np.ndarray:
    """A per-thread float32 scratch of n elements starting on a 64-byte boundary (kept and reused up to conv.py's
    _KEEP_BYTES; larger ones per call)."""
    bufs = getattr(_tls, "bufs", None)
    if bufs is None:
        bufs = _tls.bufs = {}
    v = bufs.get(tag)
    if v is None or v.size < n:
        raw = np.empty(n + 16, np.float32)
        off = (-raw.ctypes.data % 64) // 4
        v = raw[off:off + n]
        if 4 * n <= _KEEP_BYTES:
            bufs[tag] = v
    return v


_KEEP_BYTES = 64 << 20


def _run(p, x, w, bias, res, e, N: int, S=None, into=None) -> None:
    """One call of plan ``p`` (``S``: the input prologue's operands where ``p`` has one); with a list ``into``, its
    calls ``(caller, args)`` are appended there instead of made (native_chain)."""
    if p.fused:
        _frun(p, x, w, bias, res, e, N, S, into)
        return
    panels = _scratch("panels", p.pbuf)
    acc = _scratch("acc", p.sbuf) if p.sbuf else res
    if p.use_b and bias is None:
        bias = _zeros(res.shape[1])
    if N == 1:
        ops = [res, acc, bias, e, x] if p.use_b and p.has_e else [res, acc, bias, x] if p.use_b else \
            [res, acc, e, x] if p.has_e else [res, acc, x]
        if p.kind == "packed" and not p.sbuf:
            ops[1] = res
        if p.pro:
            ops.append(S)
        _issue(p, w, panels, ops, into)
        return
    for n in range(N):
        rn = res[n]
        _issue(p, w, panels, [rn, acc if p.sbuf else rn] + _image_ops(p, bias, e, x, S, n), into)


def _image_ops(p, bias, e, x, S, n: int) -> list:
    """Image ``n``'s operands after its output (and accumulator): bias, residual, input, prologue operands."""
    ops = [bias] if p.use_b else []
    if p.has_e:
        ops.append(e[n])
    ops.append(x[n])
    if p.pro:
        ops.append(S)
    return ops


def _issue(p, w, panels, ops, into) -> None:
    """Plan ``p``'s driver call on these operands, or its ``(caller, args)`` appended to the list ``into``."""
    args = (p.d, _DUMMY, _DUMMY, _DUMMY, w, panels, *ops, p.ext)
    if into is None:
        p.call(*args)
    else:
        into.append((p.call, args))


_DUMMY = np.zeros(1, np.int64)
_zero_bias: dict = {}


def _zeros(n: int) -> np.ndarray:
    z = _zero_bias.get(n)
    if z is None:
        z = _zero_bias[n] = np.zeros(n, np.float32)
    return z


# planes whose last panel would leave most of its columns unused are not taken (a 2x2 plane: 4 of 16 columns)
_MIN_LANE_USE = 0.75
# nor fewer than _MIN_K input channels per group: the output's traffic dominates, and conv_direct's "pix" kernel
# stores its tiles with the bias and relu in registers (ShuffleNet's 24 -> 112 in 4 groups on 56x56, K = 6, in the
# ONNX session, 1 thread, per-node min of 30 runs: 189 us "pix" vs 317 us here), nor "squeezes" of at most
# _SQUEEZE_MAX_O output channels from _SQUEEZE_RATIO times as many inputs: conv_direct's "chan" kernel (their outputs
# in its vector lanes) runs them as fast or faster in the session, X hot from the previous op (1 thread: SqueezeNet's
# 64 -> 16 on 55x55 136 vs 155 us, 128 -> 16 222 vs 238, 256 -> 48 on 13x13 72 vs 82, 384 -> 48 107 vs 113; 128 -> 32
# and 256 -> 32 on 27x27 even; Inception's 192 -> 32 on 28x28 181 vs 194; 2 threads, load ~6: 64 -> 16 138 vs 159,
# 128 -> 16 214 vs 232, 256 -> 48 70 vs 87, 384 -> 48 103 vs 116)
_MIN_K = 16
# nor the large products on large planes: ResNet-50's 1x1s (~103 MFLOP each on 56x56 .. 14x14 planes) ran 1.06-1.29x
# slower here than on OpenBLAS with the epilogue in gemm_driver's blocks at 2 threads (in-session per-step minima,
# `nee.profile()`, the two paths' sessions alternating in one process, load ~3), and the whole model 1.18x; on 7x7
# planes, and SqueezeNet's 512 -> 1000 on 13x13 (173 MFLOP), this path is faster (0.78-0.91x; 2610 -> 2010 us)
_BIG_MIN_L = 196
_BIG_FLOPS = 50e6
# ... but the fused path's (outputs of _FUSED_MIN_L pixels and more: ResNet-50's 56x56 and 28x28 1x1s, the stride-2
# one into 28x28 included; see FUSED below)
# ... on the 16-lane kernels (where the fused path is off: FUSED) only from more than _BIG16_MAX_K input channels per
# group: ResNet-50's 64 -> 256 1x1s on 56x56 (K = 64: the direct kernel's tiles then spend as long in their
# transposed stores as in their 64 FMA steps) ran faster here on an AMD Zen 5 (2 threads, in-process alternating, min
# of 7 rounds, /tmp/lead21/paths_e.py, us packed / direct: + bias + residual + relu 341 / 430, + bias + relu 330 /
# 382); from K = 128 even or the direct kernel ahead (128 -> 512 on 28x28 290 / 251, 256 -> 64 on 56x56 258 / 254)
_BIG16_MAX_K = 64
# ... nor (16 lanes) with an input prologue: DenseNet's bn-relu-conv 1x1s of 128 outputs on 56x56 and 28x28 (77-205
# MFLOP) then ran the GEMM path after a separate bn-relu pass over the concatenated features (70-139 us each at 2
# threads); fused here DenseNet-121 ran 0.92x (2 threads, both rules' sessions in one process alternating,
# /tmp/lead21/abset.py, whole-run median and min, two runs) and 0.96x on one thread.  Not measured on the 8-lane
# kernels, where these products ran 1.06-1.29x slower here than on OpenBLAS without a prologue
_SQUEEZE_MAX_O = 48
_SQUEEZE_RATIO = 4
# ... on the 8-lane (AVX2) kernels; on the 16-lane (AVX-512) ones only on planes under _SQUEEZE16_MIN_L pixels: on an
# AMD Zen 5 the packed tasks ran the large-plane squeezes twice as fast as the path they went to (conv2d_into + bias
# + relu, in-process alternating, min of 7 rounds, /tmp/lead20/paths.py, us packed / before): 2 threads 96 -> 16 on
# 55x55 31 / 64, 128 -> 16 39 / 93, 256 -> 32 on 27x27 36 / 40; 1 thread 51 / 114, 68 / 174; on 13x13 the direct
# kernel stayed ahead (384 -> 48: 24 vs 30)
_SQUEEZE16_MIN_L = 729
# ... nor, on the 16-lane kernels, planes under _PK16_MIN_L pixels (14x14 and smaller) that conv_direct's rule takes
# (conv_direct.takes_1x1; else the GEMM would run them), but for convs with an input prologue (DenseNet's
# bn-relu-conv: fused only into this kernel): there conv_direct's kernel ran every 1x1 of the models faster on the
# Zen 5 (conv2d_into + bias + relu, in-process alternating, min of 7 rounds, /tmp/lead20/paths.py, us packed /
# direct): 2 threads 576 -> 192 on 14x14 150 / 115, 576 -> 128 95 / 78, 576 -> 64 51 / 41, 1024 -> 256 359 / 264,
# 256 -> 1024 366 / 253, 1024 -> 192 on 7x7 65 / 56, 1024 -> 128 44 / 38, 2048 -> 512 611 / 510, 512 -> 2048 299 /
# 250; 1 thread 1024 -> 256 on 14x14 496 / 457, 2048 -> 512 on 7x7 553 / 455; on 28x28 even (256 -> 64: 70 / 71),
# on 27x27 this kernel ahead (256 -> 32: 36 / 41).  Without the prologue exception DenseNet-121 lost (min of 4 fresh
# processes 18.8 -> 21.8 ms): its prologues then ran as separate passes.  Only from _PK16_MIN_K input channels
# (the measured convs; the direct kernel's small 1x1s are not all bound into the step chain: a jitted CNN's
# 16 -> 24 on 8x8 lost its chained call).
_PK16_MIN_L = 400
_PK16_MIN_K = 256


def _direct_takes(xs, ws, rs, sh, sw, G) -> bool:
    from . import conv_direct
    return conv_direct.takes_1x1(xs, ws, rs, sh, sw, G)


def pays(xs, ws, rs, sh, sw, pt, pb, pl, pr, G: int, pre: bool = False, squeezes: bool = False) -> bool:
    """The cost rule (shapes only; the operands' dtypes and layouts are :func:`applies`'): the unpadded stride-1
    1x1 convs on a host with the kernel, with NEE_CONV_PK1X1 on, whose planes fill at least _MIN_LANE_USE of their
    panels' columns, of _MIN_K input channels per group or more, but the "squeezes" (_SQUEEZE_MAX_O) and the big
    products (_BIG_FLOPS on _BIG_MIN_L pixels) the fused variant does not take (:func:`_fused_for`: strided 1x1s
    only there too).
    Measured against the paths it replaces (conv_direct's kernels, OpenBLAS with the epilogue in gemm_driver's
    blocks, numpy's batched group GEMMs): see _DIRECT_MIN_L and _MIN_K.  ``squeezes``: the squeezes too (asked
    where the direct kernel declines one: conv_direct.route)."""
    key = (rs[2], rs[3], ws[0], ws[1], ws[2], ws[3], sh, sw, pt, pb, pl, pr, G, ON[0], FORCE[0], FUSED[0],
           _FUSED_MIN_L[0], bool(pre), threads.NUM_THREADS, squeezes)
    r = _pays.get(key)
    if r is None:
        r = False
        if ON[0] and ws[2] == ws[3] == 1 and (sh == sw == 1 or _fused_for(rs, (sh, sw))) and \
                not (pt or pb or pl or pr) and available():
            if FORCE[0] is not None:
                r = bool(FORCE[0])
            else:
                from . import linalg
                L = rs[2] * rs[3]
                Og, Cg = ws[0] // max(G, 1), ws[1]
                squeeze = not squeezes and Og <= _SQUEEZE_MAX_O and Cg >= _SQUEEZE_RATIO * Og and \
                    (linalg.PK_VEC == 8 or L < _SQUEEZE16_MIN_L)
                r = (L > 0 and L >= _MIN_LANE_USE * (-(-L // linalg.PK_NR) * linalg.PK_NR) and Cg >= _MIN_K
                     and not squeeze and (linalg.PK_VEC == 8 or L >= _PK16_MIN_L or pre or _fused_for(rs, (sh, sw))
                                          or Cg < _PK16_MIN_K or not _direct_takes(xs, ws, rs, sh, sw, G))
                     and not (L >= _BIG_MIN_L and 2.0 * ws[0] * Cg * L >= _BIG_FLOPS
                              and not _fused_for(rs, (sh, sw)) and not (linalg.PK_VEC == 16 and Cg <= _BIG16_MAX_K)
                              and not (pre and linalg.PK_VEC == 16)))
        if len(_pays) > 4096:
            _pays.clear()
        _pays[key] = r
    return r


def bind(x, w, b, res, G: int, relu=False, b2=None, e=None, stride=(1, 1), pre=None):
    """``f(x, w, b, res, b2, e[, S]) -> bool``: :func:`conv2d` for operands of these layouts at this thread count
    with its plan looked up once (b + b2 summed once where both are the arrays bound; ``pre``'s steps bound, its
    operands ``S`` passed per call); False (nothing written) when the thread count or the mode changed or the
    operands are not the kind bound (the caller runs the unbound path).  None where conv2d would not take them."""
    N, C, H, W = x.shape
    O = w.shape[0]
    g = _takes(x, w, res, G, stride)
    if g is None:
        return None
    fused, stride = g
    pro = _pre_ok(pre, G, stride, C)
    if pro is None:
        return None
    sshape = pre[1].shape if pro else None
    if e is not None and (e.dtype != np.float32 or e.shape != res.shape or not e.flags.c_contiguous):
        return None
    for a in (b, b2):
        if a is not None and (a.dtype != np.float32 or a.shape != (O,) or not a.flags.c_contiguous):
            return None
    has_b = b is not None or b2 is not None
    has_e = e is not None
    nt = threads.NUM_THREADS
    mode = MODE[0]
    p = _fplan(C, H, W, O, G, has_b, has_e, conv_act.norm(relu), nt, mode, stride, pro) if fused else \
        _plan(C, H, W, O, G, has_b, has_e, conv_act.norm(relu), nt, mode, pro)
    if p is None:
        return None
    b0, b20 = b, b2
    summed = [None]

    def takes(b, res, b2, e, S) -> bool:
        if threads.NUM_THREADS != nt or MODE[0] != mode or _fused_for(res.shape, stride) != fused or not ON[0] or \
                (b is None) != (b0 is None) or \
                (b2 is None) != (b20 is None) or (e is not None) != has_e:
            return False
        if pro and (S is None or S.shape != sshape or S.dtype != np.float32 or not S.flags.c_contiguous or
                    np.may_share_memory(S, res)):
            return False
        return e is None or not np.may_share_memory(e, res)

    def f(x, w, b, res, b2, e, S=None) -> bool:
        if not takes(b, res, b2, e, S):
            return False
        if b2 is None:
            bias = b
        elif b is None:
            bias = b2
        elif b is b0 and b2 is b20 and summed[0] is not None:
            bias = summed[0]
        else:
            bias = b + b2
            if b is b0 and b2 is b20:
                from . import winograd
                if winograd.is_frozen(b) and winograd.is_frozen(b2):
                    summed[0] = bias
        _run(p, x, w, bias, res, e, N, S)
        return True

    def calls(x, w, b, res, b2, e, S=None):
        # (native_chain) f's calls where its bias is an operand or the kept sum of frozen ones
        bias = b if b2 is None else b2 if b is None else \
            summed[0] if b is b0 and b2 is b20 and summed[0] is not None else None
        if not takes(b, res, b2, e, S) or (bias is None and (b is not None or b2 is not None)):
            return None
        into = []
        _run(p, x, w, bias, res, e, N, S, into)
        return [native_chain.lower(c, a) for c, a in into]
    f.calls = calls
    return f


def bind_into(out, ins, attrs, b2=None, e=None, relu=False, pre=None):
    """conv.bind_into's hook: ``f(out, ins, b2, e[, S]) -> bool`` running this path for a compiled graph's conv
    step (``ins`` = x, w[, b]; float32 C-contiguous operands, ``e`` of out's shape; ``pre``: an input prologue,
    its operands S per call) where conv_direct.route picked it, the dispatch decided once; ``f`` returns False
    (nothing written: the caller runs conv2d_into) when NEE_CONV_DIRECT, this path's switches or the thread count
    changed.  None: operands the kernel declines."""
    from . import conv_direct
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    g = bind(x, w, b, out, attrs["groups"], relu, b2, e, stride=attrs["stride"], pre=pre)
    if g is None:
        return None
    has_b = b is not None
    st0 = (ON[0], FORCE[0], MODE[0])
    cd = conv_direct

    def f(out, ins, b2, e, S=None) -> bool:
        if cd.MODE[0] != "" or (ON[0], FORCE[0], MODE[0]) != st0:
            return False
        return g(ins[0], ins[1], ins[2] if has_b else None, out, b2, e, S)

    def calls(out, ins, b2, e, S=None):
        if cd.MODE[0] != "" or (ON[0], FORCE[0], MODE[0]) != st0:
            return None
        return native_chain.calls_of(g, ins[0], ins[1], ins[2] if has_b else None, out, b2, e, S)
    f.calls = calls
    return f


# ---------------------------------------------------------------- the epilogue in the tiles' stores ("fused")
# The tasks above run the conv's epilogue (bias, residual, relu) as a pass over their block after its product, and
# the planes whose size is not a multiple of the panel go through a scratch (compacted by that pass).  Here the
# tile's last store does it instead: its 6 x 16 accumulators (plus C's earlier K blocks) + bias (broadcast per row)
# + e (loaded, masked past the plane's end), relu, stored straight into res (masked past the end: no scratch);
# the same sums in the same order as the pass's (relu((acc + bias) + e)), so the output is bitwise the unfused one.
# Strided 1x1s (ResNet's downsamples) take it too, their panels gathered (@packs).  Taken on outputs of _FUSED_MIN_L
# pixels and more, on hosts running the 8-lane (AVX2) kernels, where it was measured (NEE_CONV_PK1X1_FUSED=1: on
# every host, 0: never; smaller outputs: the tasks above).
# Measured (session 15, AVX2 EPYC, load 8-11 from other sessions: ratios only).  Alone, 1 thread, process CPU time,
# min of 30-40 alternating calls, conv + bias (+ residual) + relu, us fused / unfused packed / unfused direct: 64 ->
# 256 on 56x56 + residual 1373 / 1577 / 1868 (without the prefetches of C and e below 2121-4526: the panel loop
# stores into every output row at once, too many streams for the hardware prefetchers), 256 -> 64 on 56x56 1410 /
# 1487 / 1562, 128 -> 512 on 28x28 + residual 1285 / 1257 / 1424, 512 -> 128 1252 / 1317 / 1404, 64 -> 64 on 56x56
# 339 / 360 / 363; 14x14 and 7x7 even (256 -> 1024 + residual 1352 / 1395, 2048 -> 512 1697 / 1671; DenseNet's
# 640 -> 128 on 14x14 434 / 420, 1024 -> 128 on 7x7 215 / 212).  In ResNet-50, 1 thread, each step's min over 4
# fresh processes per side alternating (12 runs each), fused / HEAD (OpenBLAS + the epilogue pass for the big ones):
# the 56x56 expands + residual 0.75-0.92, the stride-2 256 -> 512 into 28x28 0.91, the 28x28 ones 0.82-0.91, all 36
# 1x1 steps -3.2 ms of 70.5; whole model not resolvable under the load (step sums 0.97).  In the models the fused
# path lost on small planes (DenseNet's 1x1s on 14x14 / 7x7 1.04-1.19, in one session with the switch toggled),
# ResNet's 14x14 1x1s against OpenBLAS 1.04-1.09: hence _FUSED_MIN_L.  SqueezeNet's squeezes (64 -> 16 on 55x55)
# on it lost to conv_direct's "chan" kernel in the model (175 / 151 us, 223 / 185): the squeeze rule stays.
# Not on the 16-lane (AVX-512) kernels: on an AMD Zen 5 (EPYC, 2 vCPUs, 1 MiB L2 each) it lost to the unfused
# tasks and to conv_direct's kernel on every ResNet-50 1x1 of 784+ pixels (conv2d_into + bias + relu, in-process
# alternating, min of 7 rounds, /tmp/lead20/paths.py; us fused / unfused tasks / direct): one thread 256 -> 64 on
# 56x56 775 / 449 / 464, 64 -> 256 768 / 475 / 540, 512 -> 128 on 28x28 728 / 429 / 443, 128 -> 512 740 / 448 /
# 471; two threads 470 / 251 / 260, 532 / 277 / 307, 505 / 275 / 249, 632 / 399 / 271; the whole model (ONNX, 2
# threads, fresh processes, bench/onnx_vs_ort.py --alone) 39.8 / 39.5 -> 28.2 / 26.0 ms with it off.  The big
# products it would take then fall to the rule's other paths (conv_direct's kernel there).
_FUSED_ENV = os.environ.get("NEE_CONV_PK1X1_FUSED", "")
FUSED = [None if _FUSED_ENV == "" else _FUSED_ENV != "0"]    # None: by the host (8-lane kernels only)
_U8 = 4                     # the 8-lane tile's K loop unrolled (linalg.PK_UNROLL8's)
# (the 16-lane tile's not: 4 steps' loads hoisted above 96 FMAs spilled ~70 zmm stores / reloads a loop iteration; 2
# steps 12; 1 none.  With it unrolled the fused path had lost to the unfused tasks by ~1.7x on the Zen 5 (below);
# not unrolled it runs even with them on one thread (AMD Zen 5, conv + bias + relu, min of 25 alternating calls, us
# unfused / fused, hot: 64 -> 256 on 56x56 517 / 515, + residual 605 / 610, 128 -> 512 on 28x28 515 / 471, 256 -> 64
# on 56x56 506 / 528, 64 -> 64 136 / 163) and behind on two on the reducing ones (256 -> 64 261 / 297, 512 -> 256 on
# 28x28 506 / 616; /tmp/lead23/fab.py): FUSED stays off there.  The same sums in the same order: the same bits)
_FW = 24                    # int64 words per fused task row
# the fused path on outputs of at least this many pixels (smaller planes: the unfused tasks above; see FUSED)
_FUSED_MIN_L = [int(os.environ.get("NEE_PK1X1_FUSED_MIN_L", "784"))]


def _fused_for(rs, stride) -> bool:
    """Whether a conv with output shape ``rs`` (N, O, OH, OW) and ``stride`` runs the fused path (strided ones only
    there)."""
    f = FUSED[0]
    if f is None:
        from . import linalg
        f = available() and linalg.PK_VEC == 8
    return bool(f) and rs[2] * rs[3] >= _FUSED_MIN_L[0]


_SMALL_SCRATCH = [os.environ.get("NEE_PK1X1_SMALL", "1") != "0"]
_FUSED_DIRECT_MAX_O = 32    # X read in place (no packing) only for few output channels per group on large planes
_FUSED_B_BYTES = int(os.environ.get("NEE_PK1X1_BB", str(192 << 10)))   # a part's panels (one K block)
_FUSED_A_BYTES = int(os.environ.get("NEE_PK1X1_AB", str(192 << 10)))   # a chunk of W's rows (one K block)
# the tiles' prefetch of C's (and e's) rows: panels on (0: none), locality hint
_PF = [int(os.environ.get("NEE_PK1X1_PF", "2")), int(os.environ.get("NEE_PK1X1_PFL", "2"))]


def _etile_ir(mr: int, w: int, U: int, has_b: bool, has_e: bool, relu: bool) -> str:
    """``etile{mr}(A, lda, B, ldb, C, ldc, K, acc, fin, Bs, E, nc)``: the mr x 2w tile ``A[0:mr, 0:K] @ B`` (B's
    row k at B + k * ldb: a packed panel (ldb 2w) or X's rows in place), one FMA chain per output over k as
    linalg's packed kernel; C = it (``acc``: C + it); where ``fin``: + Bs[r] (has_b), + E[r * ldc + j] (has_e),
    relu; stored, of columns j < nc (nc < 2w: masked loads / stores)."""
    V = f"<{w} x float>"
    VP = f"{V}*"
    sfx = f"v{w}f32"
    L = [f"define internal void @etile{mr}(float* %A, i64 %lda, float* %B, i64 %ldb, float* %C, i64 %ldc, i64 %K, "
         f"i1 %acc, i1 %fin, float* %Bs, float* %E, i64 %nc) {{", "entry:"]
    for r in range(mr):
        L.append(f"  %ao{r} = mul i64 %lda, {r}")
    if _PF[0]:
        # the tile's rows of C (and e) _PF[0] panels on (where the next panels' tiles of these rows store): the
        # panel loop's stores walk every output row at once, too many streams for the hardware prefetchers
        for r in range(mr):
            L.append(f"  %pfo{r} = mul i64 %ldc, {r}")
            L.append(f"  %pfq{r} = add i64 %pfo{r}, {2 * w * _PF[0]}")
            for nm, ptr, rw in (("c", "%C", 1), ("e", "%E", 0)):
                if nm == "e" and not has_e:
                    continue
                L += [f"  %pf{nm}{r} = getelementptr float, float* {ptr}, i64 %pfq{r}",
                      f"  %pf{nm}i{r} = bitcast float* %pf{nm}{r} to i8*",
                      f"  call void @llvm.prefetch.p0i8(i8* %pf{nm}i{r}, i32 {rw}, i32 {_PF[1]}, i32 1)"]
    for u in range(1, U):
        L.append(f"  %lb{u} = mul i64 %ldb, {u}")
    L += [f"  %lbU = mul i64 %ldb, {U}", f"  %KU = and i64 %K, {-U}", "  %hasu = icmp ne i64 %KU, 0",
          "  br i1 %hasu, label %uloop, label %mid", "uloop:", "  %ku = phi i64 [0, %entry], [%kun, %uloop]",
          "  %bu = phi float* [%B, %entry], [%bun, %uloop]"]

    def step(kv: str, brow: str, acc, out, s: str) -> None:
        for v in range(2):
            L.extend([f"  %bp{s}{v} = getelementptr float, float* {brow}, i64 {w * v}",
                      f"  %bq{s}{v} = bitcast float* %bp{s}{v} to {VP}",
                      f"  %b{s}{v} = load {V}, {VP} %bq{s}{v}, align 4"])
        for r in range(mr):
            L.extend([f"  %aq{s}{r} = add i64 %ao{r}, {kv}",
                      f"  %ap{s}{r} = getelementptr float, float* %A, i64 %aq{s}{r}",
                      f"  %a{s}{r} = load float, float* %ap{s}{r}",
                      f"  %ai{s}{r} = insertelement {V} undef, float %a{s}{r}, i32 0",
                      f"  %as{s}{r} = shufflevector {V} %ai{s}{r}, {V} undef, <{w} x i32> zeroinitializer"])
            for v in range(2):
                L.append(f"  {out(r, v)} = call {V} @llvm.fma.{sfx}({V} %as{s}{r}, {V} %b{s}{v}, {V} {acc(r, v)})")

    for r in range(mr):
        for v in range(2):
            L.append(f"  %uacc{r}_{v} = phi {V} [zeroinitializer, %entry], [%u{U - 1}n{r}_{v}, %uloop]")
    for u in range(U):
        L.append(f"  %ku{u} = add i64 %ku, {u}")
        brow = "%bu" if u == 0 else f"%bu{u}"
        if u:
            L.append(f"  %bu{u} = getelementptr float, float* %bu, i64 %lb{u}")
        step(f"%ku{u}", brow, (lambda r, v: f"%uacc{r}_{v}") if u == 0 else (lambda r, v, u=u: f"%u{u - 1}n{r}_{v}"),
             lambda r, v, u=u: f"%u{u}n{r}_{v}", f"u{u}_")
    L += [f"  %kun = add i64 %ku, {U}", "  %bun = getelementptr float, float* %bu, i64 %lbU",
          "  %umore = icmp ult i64 %kun, %KU", "  br i1 %umore, label %uloop, label %mid", "mid:",
          "  %bm = phi float* [%B, %entry], [%bun, %uloop]"]
    for r in range(mr):
        for v in range(2):
            L.append(f"  %macc{r}_{v} = phi {V} [zeroinitializer, %entry], [%u{U - 1}n{r}_{v}, %uloop]")
    L += ["  %hasrem = icmp ult i64 %KU, %K", "  br i1 %hasrem, label %loop, label %done", "loop:",
          "  %k = phi i64 [%KU, %mid], [%k1, %loop]", "  %bl = phi float* [%bm, %mid], [%bl1, %loop]"]
    for r in range(mr):
        for v in range(2):
            L.append(f"  %acc{r}_{v} = phi {V} [%macc{r}_{v}, %mid], [%nacc{r}_{v}, %loop]")
    step("%k", "%bl", lambda r, v: f"%acc{r}_{v}", lambda r, v: f"%nacc{r}_{v}", "r_")
    L += ["  %k1 = add i64 %k, 1", "  %bl1 = getelementptr float, float* %bl, i64 %ldb",
          "  %more = icmp ult i64 %k1, %K", "  br i1 %more, label %loop, label %done", "done:"]
    for r in range(mr):
        for v in range(2):
            L.append(f"  %fin{r}_{v} = phi {V} [%macc{r}_{v}, %mid], [%nacc{r}_{v}, %loop]")
    # pointers, the partial tile's masks
    for r in range(mr):
        L.append(f"  %co{r} = mul i64 %ldc, {r}")
        for v in range(2):
            L += [f"  %cq{r}_{v} = add i64 %co{r}, {w * v}",
                  f"  %cp{r}_{v} = getelementptr float, float* %C, i64 %cq{r}_{v}",
                  f"  %cv{r}_{v} = bitcast float* %cp{r}_{v} to {VP}"]
            if has_e:
                L += [f"  %ep{r}_{v} = getelementptr float, float* %E, i64 %cq{r}_{v}",
                      f"  %ev{r}_{v} = bitcast float* %ep{r}_{v} to {VP}"]
    lanes = ", ".join(f"i32 {i}" for i in range(w))
    L += ["  %nc32 = trunc i64 %nc to i32", f"  %nci = insertelement <{w} x i32> undef, i32 %nc32, i32 0",
          f"  %ncs = shufflevector <{w} x i32> %nci, <{w} x i32> undef, <{w} x i32> zeroinitializer"]
    for v in range(2):
        L += [f"  %lane{v} = add <{w} x i32> <{lanes}>, <{', '.join([f'i32 {w * v}'] * w)}>",
              f"  %m{v} = icmp slt <{w} x i32> %lane{v}, %ncs"]
    L += [f"  %full = icmp sge i64 %nc, {2 * w}", "  br i1 %full, label %f_0, label %p_0"]

    def ld(part: str, ptr: str, v: int, nm: str) -> None:
        if part == "f":
            L.append(f"  {nm} = load {V}, {VP} {ptr}, align 4")
        else:
            L.append(f"  {nm} = call {V} @llvm.masked.load.{sfx}.p0{sfx}({VP} {ptr}, i32 4, <{w} x i1> %m{v}, "
                     f"{V} zeroinitializer)")

    for part in ("f", "p"):
        L += [f"{part}_0:", f"  br i1 %acc, label %{part}_a, label %{part}_b", f"{part}_a:"]
        for r in range(mr):
            for v in range(2):
                ld(part, f"%cv{r}_{v}", v, f"%{part}old{r}_{v}")
                L.append(f"  %{part}s{r}_{v} = fadd {V} %fin{r}_{v}, %{part}old{r}_{v}")
        L += [f"  br label %{part}_b", f"{part}_b:"]
        for r in range(mr):
            for v in range(2):
                L.append(f"  %{part}v{r}_{v} = phi {V} [%fin{r}_{v}, %{part}_0], [%{part}s{r}_{v}, %{part}_a]")
        L += [f"  br i1 %fin, label %{part}_e, label %{part}_s", f"{part}_e:"]
        for r in range(mr):
            cur = f"%{part}v{r}_0"
            if has_b:
                L += [f"  %{part}bp{r} = getelementptr float, float* %Bs, i64 {r}",
                      f"  %{part}bs{r} = load float, float* %{part}bp{r}",
                      f"  %{part}bi{r} = insertelement {V} undef, float %{part}bs{r}, i32 0",
                      f"  %{part}bb{r} = shufflevector {V} %{part}bi{r}, {V} undef, <{w} x i32> zeroinitializer"]
            for v in range(2):
                cur = f"%{part}v{r}_{v}"
                if has_b:
                    L.append(f"  %{part}xb{r}_{v} = fadd {V} {cur}, %{part}bb{r}")
                    cur = f"%{part}xb{r}_{v}"
                if has_e:
                    ld(part, f"%ev{r}_{v}", v, f"%{part}el{r}_{v}")
                    L.append(f"  %{part}xe{r}_{v} = fadd {V} {cur}, %{part}el{r}_{v}")
                    cur = f"%{part}xe{r}_{v}"
                if relu:
                    L += [f"  %{part}lt{r}_{v} = fcmp olt {V} {cur}, zeroinitializer",
                          f"  %{part}xr{r}_{v} = select <{w} x i1> %{part}lt{r}_{v}, {V} zeroinitializer, {V} {cur}"]
                    cur = f"%{part}xr{r}_{v}"
                L.append(f"  %{part}y{r}_{v} = select i1 true, {V} {cur}, {V} {cur}")
        L += [f"  br label %{part}_s", f"{part}_s:"]
        for r in range(mr):
            for v in range(2):
                L.append(f"  %{part}z{r}_{v} = phi {V} [%{part}v{r}_{v}, %{part}_b], [%{part}y{r}_{v}, %{part}_e]")
        for r in range(mr):
            for v in range(2):
                if part == "f":
                    L.append(f"  store {V} %{part}z{r}_{v}, {VP} %cv{r}_{v}, align 4")
                else:
                    L.append(f"  call void @llvm.masked.store.{sfx}.p0{sfx}({V} %{part}z{r}_{v}, {VP} %cv{r}_{v}, "
                             f"i32 4, <{w} x i1> %m{v})")
        L.append("  ret void")
    L.append("}")
    return "\n".join(L)


def _epk_ir(w: int, mr_max: int, U: int, has_b: bool, has_e: bool, relu: bool) -> str:
    """``@epk(A, B, C, Bs, E, r0, M, n, K, lda, ldc, kc, ldb, pstride)``: rows [r0, M) and columns [0, n) of C (row
    stride ldc) = A (row stride lda) @ B (panel p, of 2w columns, at B + p * pstride, its row k + ldb floats on),
    in K blocks of kc (the first stores, the later add), the last block's stores with the epilogue (Bs[i], E as
    C); the loops of linalg's packed kernel (K blocks, panels, row tiles)."""
    nr = 2 * w
    tiles = "\n".join(_etile_ir(mr, w, U, has_b, has_e, relu) for mr in range(1, mr_max + 1))
    cases = " ".join(f"i64 {mr}, label %t{mr}" for mr in range(1, mr_max + 1))
    calls = "".join(f"t{mr}:\n  call void @etile{mr}(float* %Ai, i64 %lda, float* %Bj, i64 %ldb, float* %Ci, i64 %ldc, "
                    f"i64 %kcc, i1 %later, i1 %fin, float* %Bsi, float* %Ei, i64 %nc)\n  br label %inext\n"
                    for mr in range(1, mr_max + 1))
    sfx = f"v{w}f32"
    V = f"<{w} x float>"
    return tiles + f"""
define internal void @epk(float* %A, float* %B, float* %C, float* %Bs, float* %E, i64 %r0, i64 %M, i64 %n, i64 %K,
                          i64 %lda, i64 %ldc, i64 %kc, i64 %ldb, i64 %pstride, i64 %mc) {{
entry:
  %non = icmp sle i64 %n, 0
  %nor = icmp sge i64 %r0, %M
  %skip = or i1 %non, %nor
  br i1 %skip, label %out, label %kloop
kloop:
  %k0 = phi i64 [0, %entry], [%k0n, %cnext]
  %later = icmp ne i64 %k0, 0
  %krem = sub i64 %K, %k0
  %kbig = icmp ugt i64 %krem, %kc
  %kcc = select i1 %kbig, i64 %kc, i64 %krem
  %k0n = add i64 %k0, %kcc
  %fin = icmp uge i64 %k0n, %K
  %bko = mul i64 %k0, %ldb
  %Bk = getelementptr float, float* %B, i64 %bko
  br label %cloop
cloop:
  %i0 = phi i64 [%r0, %kloop], [%i0n, %pnext]
  %i0e = add i64 %i0, %mc
  %cbig = icmp ult i64 %i0e, %M
  %Mc = select i1 %cbig, i64 %i0e, i64 %M
  br label %ploop
ploop:
  %jj = phi i64 [0, %cloop], [%jj1, %jnext]
  %pi = udiv i64 %jj, {nr}
  %bo = mul i64 %pi, %pstride
  %Bj = getelementptr float, float* %Bk, i64 %bo
  %nc = sub i64 %n, %jj
  %Cj = getelementptr float, float* %C, i64 %jj
  %Ej = getelementptr float, float* %E, i64 %jj
  br label %iloop
iloop:
  %i = phi i64 [%i0, %ploop], [%i1, %inext]
  %rem = sub i64 %Mc, %i
  %big = icmp ugt i64 %rem, {mr_max}
  %mr = select i1 %big, i64 {mr_max}, i64 %rem
  %aoff0 = mul i64 %i, %lda
  %aoff = add i64 %aoff0, %k0
  %Ai = getelementptr float, float* %A, i64 %aoff
  %coff = mul i64 %i, %ldc
  %Ci = getelementptr float, float* %Cj, i64 %coff
  %Ei = getelementptr float, float* %Ej, i64 %coff
  %Bsi = getelementptr float, float* %Bs, i64 %i
  switch i64 %mr, label %inext [ {cases} ]
{calls}inext:
  %i1 = add i64 %i, %mr
  %imore = icmp ult i64 %i1, %Mc
  br i1 %imore, label %iloop, label %jnext
jnext:
  %jj1 = add i64 %jj, {nr}
  %jmore = icmp slt i64 %jj1, %n
  br i1 %jmore, label %ploop, label %pnext
pnext:
  %i0n = add i64 %i0, %mc
  %cmore = icmp ult i64 %i0n, %M
  br i1 %cmore, label %cloop, label %cnext
cnext:
  %kmore = icmp ult i64 %k0n, %K
  br i1 %kmore, label %kloop, label %out
out:
  ret void
}}
declare {V} @llvm.fma.{sfx}({V}, {V}, {V})
declare {V} @llvm.masked.load.{sfx}.p0{sfx}({V}*, i32, <{w} x i1>, {V})
declare void @llvm.masked.store.{sfx}.p0{sfx}({V}, {V}*, i32, <{w} x i1>)
declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)
"""


def _packs_ir(nr: int, w: int) -> str:
    """``@packs(X, P, HWi, K, p0, p1, L, OW, Wi, sh, sw)``: panels [p0, p1) of a strided 1x1 conv's input columns
    (output pixel c = oh * OW + ow reads X[k * HWi + oh * sh * Wi + ow * sw]; K planes of HWi floats) into P
    (panel p at + p * K * nr), gathered (masked past the L output pixels: zeros)."""
    V = f"<{w} x float>"
    I = f"<{w} x i64>"

    def splat(nm: str, val: str) -> str:
        return (f"  %{nm}i = insertelement {I} undef, i64 {val}, i32 0\n"
                f"  %{nm} = shufflevector {I} %{nm}i, {I} undef, <{w} x i32> zeroinitializer\n")
    lanes = [", ".join(f"i64 {v * w + i}" for i in range(w)) for v in range(2)]
    body = "".join(f"""  %cv{v} = add {I} %c0s, <{lanes[v]}>
  %oh{v} = udiv {I} %cv{v}, %ows
  %ohw{v} = mul {I} %oh{v}, %ows
  %ow{v} = sub {I} %cv{v}, %ohw{v}
  %ro{v} = mul {I} %oh{v}, %shws
  %co{v} = mul {I} %ow{v}, %sws
  %off{v} = add {I} %ro{v}, %co{v}
  %m{v} = icmp ult {I} %cv{v}, %Ls
""" for v in range(2))
    gat = "".join(f"""  %ptr{v} = getelementptr float, float* %xk, {I} %off{v}
  %g{v} = call {V} @llvm.masked.gather.v{w}f32.v{w}p0f32(<{w} x float*> %ptr{v}, i32 4, <{w} x i1> %m{v},
                                                          {V} zeroinitializer)
  %q{v} = getelementptr float, float* %pk, i64 {v * w}
  %qv{v} = bitcast float* %q{v} to {V}*
  store {V} %g{v}, {V}* %qv{v}, align 4
""" for v in range(2))
    return f"""
declare {V} @llvm.masked.gather.v{w}f32.v{w}p0f32(<{w} x float*>, i32, <{w} x i1>, {V})
define internal void @packs(float* %X, float* %P, i64 %HWi, i64 %K, i64 %p0, i64 %p1, i64 %L, i64 %OW, i64 %Wi,
                            i64 %sh, i64 %sw) {{
entry:
  %shw = mul i64 %sh, %Wi
{splat('ows', '%OW')}{splat('shws', '%shw')}{splat('sws', '%sw')}{splat('Ls', '%L')}  %any = icmp ult i64 %p0, %p1
  %pst = mul i64 %K, {nr}
  br i1 %any, label %ploop, label %out
ploop:
  %p = phi i64 [%p0, %entry], [%pn, %pend]
  %c0 = mul i64 %p, {nr}
{splat('c0s', '%c0')}{body}  %pbo = mul i64 %p, %pst
  %pb = getelementptr float, float* %P, i64 %pbo
  br label %krow
krow:
  %k = phi i64 [0, %ploop], [%k1, %krow]
  %xo = mul i64 %k, %HWi
  %xk = getelementptr float, float* %X, i64 %xo
  %po = mul i64 %k, {nr}
  %pk = getelementptr float, float* %pb, i64 %po
{gat}  %k1 = add i64 %k, 1
  %km = icmp ult i64 %k1, %K
  br i1 %km, label %krow, label %pend
pend:
  %pn = add i64 %p, 1
  %pm = icmp ult i64 %pn, %p1
  br i1 %pm, label %ploop, label %out
out:
  ret void
}}
"""


def _fused_ir(nr: int, w: int, mr: int, has_b: bool, has_e: bool, relu: bool, pro=()) -> str:
    """``kernel(A, P, res, [bias], [e], x, D)``: one task of the fused path, D its row of _FW words: 0 end row M,
    1 first row r0, 2 / 3 the columns [c0, c1) of its main part, 4 K (= lda), 5 K block, 6 L (the plane: X's and
    res's row stride), 7 / 8 / 9 / 10 the group's offsets into X, W, res (and e), bias; 11 packed: panels [D[12],
    D[13]) of X packed (_task_ir's @pack) into P + D[14] (panel p at + p * K * nr), the product on them, else on X's
    rows in place; 15 a tail: columns [c1, L) packed zero-padded into P + D[16], its own product; 17 the rows'
    chunk (@epk's mc); 18 strided (packed mode only): X's panels gathered (@packs) from planes of D[19] floats, the
    output D[20] wide, the input D[21] wide, strides D[22], D[23].  With the prologue ``pro`` (the packed mode,
    stride 1): an operand S after x, the steps applied as X is packed (_pack_fn_ir)."""
    ops = ["res"] + (["bias"] if has_b else []) + (["e"] if has_e else []) + ["x"] + (["S"] if pro else [])
    sig = ", ".join(f"i8* %{o}r" for o in ops)
    words = "".join(f"  %wp{i} = getelementptr i64, i64* %D, i64 {i}\n  %w{i} = load i64, i64* %wp{i}\n"
                    for i in range(24))
    bsp = "%bias0" if has_b else "%Ag"
    ep = "%e0" if has_e else "%Cg"
    casts = "  %res0 = bitcast i8* %resr to float*\n  %x0 = bitcast i8* %xr to float*\n"
    if has_b:
        casts += "  %bias00 = bitcast i8* %biasr to float*\n  %bias0 = getelementptr float, float* %bias00, i64 %w10\n"
    if has_e:
        casts += "  %e00 = bitcast i8* %er to float*\n  %e0 = getelementptr float, float* %e00, i64 %w9\n"
    sarg = ""
    if pro:
        casts += "  %S = bitcast i8* %Sr to float*\n"
        sarg = ", float* %S"
    return _pack_fn_ir(nr, pro) + _packs_ir(nr, w) + _epk_ir(w, mr, _U8 if w == 8 else 1, has_b, has_e, relu) + f"""
define internal void @packt(float* %X, i64 %ldx, float* %P, i64 %ncol, i64 %K) {{
entry:
  br label %krow
krow:
  %k = phi i64 [0, %entry], [%k1, %kend]
  %xo = mul i64 %k, %ldx
  %po = mul i64 %k, {nr}
  br label %st
{_row_copy_ir('krow', 'pd', '%po', '%P', '%xo', '%X', nr).replace('%rem', '%ncol')}kend:
  %k1 = add i64 %k, 1
  %km = icmp ult i64 %k1, %K
  br i1 %km, label %krow, label %done
done:
  ret void
}}

define void @"kernel"(i8* %Ar, i8* %Pr, {sig}, i8* %Dr) {{
entry:
  %D = bitcast i8* %Dr to i64*
{words}{casts}  %A0 = bitcast i8* %Ar to float*
  %Ag = getelementptr float, float* %A0, i64 %w8
  %P0 = bitcast i8* %Pr to float*
  %X = getelementptr float, float* %x0, i64 %w7
  %Cg = getelementptr float, float* %res0, i64 %w9
  %Bsg = bitcast float* {bsp} to float*
  %Eg = bitcast float* {ep} to float*
  %n = sub i64 %w3, %w2
  %Cc = getelementptr float, float* %Cg, i64 %w2
  %Ec = getelementptr float, float* %Eg, i64 %w2
  %pk = icmp ne i64 %w11, 0
  br i1 %pk, label %packed, label %inplace
packed:
  %Pg = getelementptr float, float* %P0, i64 %w14
  %strided = icmp ne i64 %w18, 0
  br i1 %strided, label %pks, label %pkd
pks:
  call void @packs(float* %X, float* %Pg, i64 %w19, i64 %w4, i64 %w12, i64 %w13, i64 %w6, i64 %w20, i64 %w21,
                   i64 %w22, i64 %w23)
  br label %pkdone
pkd:
  call void @pack(float* %X, float* %Pg, i64 %w6, i64 %w4, i64 %w12, i64 %w13{sarg})
  br label %pkdone
pkdone:
  %pst = mul i64 %w4, {nr}
  %p0o = mul i64 %w12, %pst
  %Bp = getelementptr float, float* %Pg, i64 %p0o
  call void @epk(float* %Ag, float* %Bp, float* %Cc, float* %Bsg, float* %Ec, i64 %w1, i64 %w0, i64 %n, i64 %w4,
                 i64 %w4, i64 %w6, i64 %w5, i64 {nr}, i64 %pst, i64 %w17)
  ret void
inplace:
  %Xc = getelementptr float, float* %X, i64 %w2
  call void @epk(float* %Ag, float* %Xc, float* %Cc, float* %Bsg, float* %Ec, i64 %w1, i64 %w0, i64 %n, i64 %w4,
                 i64 %w4, i64 %w6, i64 %w5, i64 %w6, i64 {nr}, i64 %w17)
  %ht = icmp ne i64 %w15, 0
  br i1 %ht, label %tail, label %out
tail:
  %Pt = getelementptr float, float* %P0, i64 %w16
  %Xt = getelementptr float, float* %X, i64 %w3
  %ntc = sub i64 %w6, %w3
  call void @packt(float* %Xt, i64 %w6, float* %Pt, i64 %ntc, i64 %w4)
  %Ct = getelementptr float, float* %Cg, i64 %w3
  %Et = getelementptr float, float* %Eg, i64 %w3
  %pst2 = mul i64 %w4, {nr}
  call void @epk(float* %Ag, float* %Pt, float* %Ct, float* %Bsg, float* %Et, i64 %w1, i64 %w0, i64 %ntc, i64 %w4,
                 i64 %w4, i64 %w6, i64 %w5, i64 {nr}, i64 %pst2, i64 %w17)
  br label %out
out:
  ret void
}}
"""


_fused_addrs: dict = {}


def _fused_addr(nr: int, w: int, mr: int, has_b: bool, has_e: bool, relu: bool, pro=()):
    key = (nr, w, mr, has_b, has_e, relu, tuple(_PF), pro)
    a = _fused_addrs.get(key)
    if a is None:
        from .. import llvm_render
        text = _fused_ir(nr, w, mr, has_b, has_e, relu, pro)
        a = _fused_addrs[key] = llvm_render.compile_ir(
            "conv_pk1x1_fused_" + hashlib.sha1(text.encode()).hexdigest()[:16], lambda: text)
    return a


def _fplan(C: int, H: int, W: int, O: int, G: int, has_b: bool, has_e: bool, relu: bool, nt: int, kind=None,
           stride=(1, 1), pro=()):
    """The fused path's plan (:class:`_Plan` with ``fused``), or None.  H x W: the input plane; ``stride``: the
    conv's (strided: the packed mode, its panels gathered); ``pro``: an input prologue (stride 1, one group: the
    packed mode).  The tiles' stores take relu only: None for another activation (kernels/conv_act.py)."""
    from .. import gemm_driver
    from . import linalg
    if relu and not conv_act.is_relu(relu):
        return None
    nr, w, mr = linalg.PK_NR, linalg.PK_VEC, linalg.PK_MR
    Cg, Og = C // G, O // G
    sh, sw = stride
    strided = (sh, sw) != (1, 1)
    OH, OW = (H - 1) // sh + 1, (W - 1) // sw + 1
    L = OH * OW
    HWi = H * W
    kc = -(-Cg // -(-Cg // linalg.PK_KC))
    if strided:
        kind = "packed"
    if pro:
        if strided or G != 1:
            return None
        kind = "packed"
    if kind is None:
        kind = "direct" if L >= _DIRECT_MIN_L and Og <= _FUSED_DIRECT_MAX_O else "packed"
    addr = _fused_addr(nr, w, mr, has_b, has_e, relu, pro)
    if not addr:
        return None
    npan = -(-L // nr)
    Lp = npan * nr
    # panels per part: a K block of them (kc x nr floats each) in L2 while the rows' tiles pass; the rows in chunks
    # of mc (multiples of the tile) whose K block of W stays in L2 while the part's panels pass
    per = max(1, _FUSED_B_BYTES // (4 * kc * nr))
    mc = Og if Og * kc * 4 <= _FUSED_A_BYTES else max(mr, _FUSED_A_BYTES // (4 * kc) // mr * mr)
    rows = []
    if kind == "packed":
        if nt > 1 and G == 1 and Og * Cg * 4 > _ROWS_MIN_W:
            nb = max(1, min(nt, Og // (2 * mr)))
            step = -(-Og // (nb * mr)) * mr
            for t, r0 in enumerate(range(0, Og, step)):
                rows.append((min(r0 + step, Og), r0, 0, L, Cg, kc, L, 0, 0, 0, 0, 1, 0, npan, t * Cg * Lp, 0, 0))
            pbuf = len(rows) * Cg * Lp
        else:
            parts = max(1, -(-npan // per))
            if nt > 1:
                parts = max(parts, -(-_TASKS_PER_THREAD * nt // G))
                parts = -(-parts // nt) * nt if G == 1 else parts      # whole rounds of the threads
            parts = max(1, min(parts, npan))
            # one thread: every part packs its panels at the scratch's start (a part's worth of scratch, not the
            # plane's: the plane's packed copy, as large as X, no longer passes through the caches); more threads:
            # each part its own place (parts run at once)
            small = nt == 1 and _SMALL_SCRATCH[0]
            most = 0
            for g in range(G):
                for q in range(parts):
                    p0, p1 = q * npan // parts, (q + 1) * npan // parts
                    most = max(most, p1 - p0)
                    rows.append((Og, 0, p0 * nr, min(p1 * nr, L), Cg, kc, L, g * Cg * HWi, g * Og * Cg, g * Og * L,
                                 g * Og, 1, p0, p1, -p0 * Cg * nr if small else g * Cg * Lp, 0, 0))
            pbuf = most * Cg * nr if small else C * Lp
    else:
        nfull = L // nr
        tail = L % nr != 0
        parts = max(1, -(-nfull // per))
        if nt > 1:
            parts = max(parts, -(-_TASKS_PER_THREAD * nt // G))
            parts = -(-parts // nt) * nt if G == 1 else parts
        parts = max(1, min(parts, nfull)) if nfull else 1
        for g in range(G):
            for q in range(parts):
                p0, p1 = q * nfull // parts, (q + 1) * nfull // parts
                last = tail and q == parts - 1
                rows.append((Og, 0, p0 * nr, p1 * nr, Cg, kc, L, g * Cg * L, g * Og * Cg, g * Og * L, g * Og, 0, 0,
                             0, 0, 1 if last else 0, g * Cg * nr))
        pbuf = G * Cg * nr if tail else 16
    ext = np.zeros((len(rows), _FW), np.int64)
    ext[:, :17] = np.array(rows, np.int64)
    ext[:, 17] = mc
    if strided:
        ext[:, 18:24] = (1, HWi, OW, W, sh, sw)
    ext.flags.writeable = False
    nops = 2 + has_b + has_e + (1 if pro else 0)
    d = gemm_driver.call_plan(addr, 3 + nops, min(nt, len(rows)), len(rows), ext.strides[0])
    if d is None:
        return None
    p = _Plan()
    p.call, p.d, p.ext, p.kind, p.fused = gemm_driver.epilogue_caller(3 + nops), d, ext, kind, True
    p.pbuf, p.sbuf, p.Lp, p.nops, p.has_e, p.use_b, p.pro = pbuf, 0, Lp, nops, has_e, has_b, bool(pro)
    return p


def _frun(p, x, w, bias, res, e, N: int, S=None, into=None) -> None:
    panels = _scratch("panels", p.pbuf)
    for n in range(N):
        _issue(p, w, panels, [res[n]] + _image_ops(p, bias, e, x, S, n), into)
