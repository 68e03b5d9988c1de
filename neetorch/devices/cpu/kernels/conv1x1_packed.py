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
"""
from __future__ import annotations

import hashlib
import os
import re
import threading

import numpy as np

from .. import threads

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


def _row_copy_ir(entry: str, pd: str, poff: str, pbase: str, xoff: str, xbase: str, nr: int) -> str:
    """IR blocks ``st`` .. ``stend`` (entered from ``%entry``, leaving to ``%kend``): one panel row of nr floats at
    pbase + poff + t, copied from xbase + xoff + t for t < %rem and zero past it (a partial panel's missing
    columns).  Shared by the per-task packing (:func:`_task_ir`) and the direct mode's last panel
    (:func:`_direct_ir`)."""
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
  store float %xval, float* %pp, align 4
  br label %stend
szero:
  store float 0.0, float* %pp, align 4
  br label %stend
stend:
  %t1 = add i64 %t, 1
  %tm = icmp ult i64 %t1, {nr}
  br i1 %tm, label %st, label %kend
"""


def _task_ir(nr: int, nops: int, ne: int) -> str:
    """``kernel(A, P, op0, ..., op{nops-1}, D)``: one task: panels [D[40], D[41]) of X (op{nops-1} + D[44] floats:
    D[43] rows of D[42] floats) packed into P + D[47] (panel p at + p * K * nr: K x nr floats, the last panel's
    missing columns zero; row by row, each row's part read in one pass), then linalg's packed kernel (address D[8],
    its descriptor D[0:8]: the task's columns and rows) on A + D[45] and those panels into op1 + D[46]; then the
    elementwise epilogue (address D[9], 0: none) on op0 .. op{ne-1} with its meta at D[10:]."""
    V = f"<{nr} x float>"
    ops = ", ".join(f"i8* %o{i}" for i in range(nops))
    esig = ", ".join(["i8*"] * ne + ["i64*"])
    eargs = ", ".join(f"i8* %o{i}" for i in range(ne))
    words = "".join(f"  %wp{i} = getelementptr i64, i64* %D, i64 {_PW + i}\n  %w{i} = load i64, i64* %wp{i}\n"
                    for i in range(8))
    return f"""
define internal void @pack(float* %X, float* %P, i64 %L, i64 %K, i64 %p0, i64 %p1) {{
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
  br i1 %hasv, label %vloop, label %vdone
vloop:
  %p = phi i64 [%p0, %krow], [%pn, %vloop]
  %xc = mul i64 %p, {nr}
  %xs = getelementptr float, float* %xr, i64 %xc
  %xv = bitcast float* %xs to {V}*
  %v = load {V}, {V}* %xv, align 4
  %pc = mul i64 %p, %pstride
  %ps = getelementptr float, float* %pr, i64 %pc
  %pv = bitcast float* %ps to {V}*
  store {V} %v, {V}* %pv, align 32
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
{_row_copy_ir('tail', 'pd0', '%tpc', '%pr', '%tc', '%xr', nr)}kend:
  %k1 = add i64 %k, 1
  %km = icmp ult i64 %k1, %K
  br i1 %km, label %krow, label %done
done:
  ret void
}}

define void @"kernel"(i8* %A, i8* %P, {ops}, i8* %Dr) {{
entry:
  %D = bitcast i8* %Dr to i64*
{words}  %X0 = bitcast i8* %o{nops - 1} to float*
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
  call void @pack(float* %X, float* %Pg, i64 %w2, i64 %w3, i64 %w0, i64 %w1)
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


def _task_addr(kind: str, nr: int, w: int, nops: int, ne: int):
    key = (kind, nr, w, nops, ne)
    a = _task_addrs.get(key)
    if a is None:
        from .. import llvm_render
        text = _task_ir(nr, nops, ne) if kind == "packed" else _direct_ir(nr, w, nops, ne)
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


class _Plan:
    __slots__ = ("call", "d", "ext", "has_e", "kind", "pbuf", "sbuf", "Lp", "nops", "use_b")


def _plan(C: int, H: int, W: int, O: int, G: int, has_b: bool, has_e: bool, relu: bool, nt: int, kind=None):
    from .. import gemm_driver
    from . import conv, linalg
    nr, w = linalg.PK_NR, linalg.PK_VEC
    Cg, Og = C // G, O // G
    L = H * W
    kc = -(-Cg // -(-Cg // linalg.PK_KC))
    if kind is None:
        kind = "direct" if L >= _DIRECT_MIN_L else "packed"
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
    addr = _task_addr(kind, nr, w, nops, ne)
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
            ntasks = G * parts
            ext = np.zeros((ntasks, _W), np.int64)
            t = 0
            for g in range(G):
                for q in range(parts):
                    p0, p1 = q * npan // parts, (q + 1) * npan // parts
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
        if nt > 1:
            parts = max(parts, -(-_TASKS_PER_THREAD * nt // G))
        parts = max(1, min(parts, nfull)) if nfull else 1
        ntasks = G * parts
        ext = np.zeros((ntasks, 88), np.int64)
        t = 0
        for g in range(G):
            for q in range(parts):
                p0, p1 = q * nfull // parts, (q + 1) * nfull // parts
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
    d = gemm_driver.call_plan(addr, 3 + nops, min(nt, ntasks), ntasks, ext.strides[0])
    if d is None:
        return None
    p = _Plan()
    p.call, p.d, p.ext, p.kind = gemm_driver.epilogue_caller(3 + nops), d, ext, kind
    p.pbuf, p.sbuf, p.Lp, p.nops, p.has_e, p.use_b = pbuf, sbuf, Lp, nops, has_e, use_b
    return p


def applies(x, w, res, G) -> bool:
    """The operands the path takes: float32, C-contiguous, an unpadded stride-1 1x1 conv's (checked by the caller)
    of at least one input channel per group, on a host with the kernel."""
    return (x.dtype == np.float32 and w.dtype == np.float32 and res.dtype == np.float32 and x.flags.c_contiguous
            and w.flags.c_contiguous and res.flags.c_contiguous and w.shape[1] >= 1 and ON[0] and available())


def conv2d(x, w, b, res, G: int, relu=False, b2=None, e=None) -> bool:
    """res (N, O, H, W) = conv2d(x (N, C, H, W), w (O, C/G, 1, 1), groups G) + b (+ b2) (+ e: res's shape,
    C-contiguous float32, not sharing res's memory), through relu when ``relu``.  False (nothing written) when the
    path cannot take these operands."""
    N, C, H, W = x.shape
    O = w.shape[0]
    if res.shape != (N, O, H, W) or C % G or O % G or w.shape[1] * G != C or not applies(x, w, res, G) or \
            np.may_share_memory(res, x) or np.may_share_memory(res, w):
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
    key = (C, H, W, O, G, bias is not None, e is not None, bool(relu), nt, MODE[0])
    p = _plans.get(key)
    if p is None:
        p = _plan(C, H, W, O, G, bias is not None, e is not None, bool(relu), nt, MODE[0])
        if len(_plans) > 1024:
            _plans.clear()
        _plans[key] = p = p if p is not None else False
    if p is False:
        return False
    _run(p, x, w, bias, res, e, N)
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


def _run(p, x, w, bias, res, e, N: int) -> None:
    panels = _scratch("panels", p.pbuf)
    acc = _scratch("acc", p.sbuf) if p.sbuf else res
    if p.use_b and bias is None:
        bias = _zeros(res.shape[1])
    call, d, ext = p.call, p.d, p.ext
    if N == 1:
        ops = [res, acc, bias, e, x] if p.use_b and p.has_e else [res, acc, bias, x] if p.use_b else \
            [res, acc, e, x] if p.has_e else [res, acc, x]
        if p.kind == "packed" and not p.sbuf:
            ops[1] = res
        call(d, _DUMMY, _DUMMY, _DUMMY, w, panels, *ops, ext)
        return
    for n in range(N):
        rn = res[n]
        ops = [rn, acc if p.sbuf else rn]
        if p.use_b:
            ops.append(bias)
        if p.has_e:
            ops.append(e[n])
        ops.append(x[n])
        call(d, _DUMMY, _DUMMY, _DUMMY, w, panels, *ops, ext)


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
_SQUEEZE_MAX_O = 48
_SQUEEZE_RATIO = 4


def pays(xs, ws, rs, sh, sw, pt, pb, pl, pr, G: int) -> bool:
    """The cost rule (shapes only; the operands' dtypes and layouts are :func:`applies`'): the unpadded stride-1
    1x1 convs on a host with the kernel, with NEE_CONV_PK1X1 on, whose planes fill at least _MIN_LANE_USE of their
    panels' columns, of _MIN_K input channels per group or more, but the "squeezes" (_SQUEEZE_MAX_O).
    Measured against the paths it replaces (conv_direct's kernels, OpenBLAS with the epilogue in gemm_driver's
    blocks, numpy's batched group GEMMs): see _DIRECT_MIN_L and _MIN_K."""
    key = (rs[2], rs[3], ws[0], ws[1], ws[2], ws[3], sh, sw, pt, pb, pl, pr, G, ON[0], FORCE[0])
    r = _pays.get(key)
    if r is None:
        r = False
        if ON[0] and ws[2] == ws[3] == 1 and sh == sw == 1 and not (pt or pb or pl or pr) and available():
            if FORCE[0] is not None:
                r = bool(FORCE[0])
            else:
                from . import linalg
                L = rs[2] * rs[3]
                Og, Cg = ws[0] // max(G, 1), ws[1]
                r = (L > 0 and L >= _MIN_LANE_USE * (-(-L // linalg.PK_NR) * linalg.PK_NR) and Cg >= _MIN_K
                     and not (Og <= _SQUEEZE_MAX_O and Cg >= _SQUEEZE_RATIO * Og)
                     and not (L >= _BIG_MIN_L and 2.0 * ws[0] * Cg * L >= _BIG_FLOPS))
        if len(_pays) > 4096:
            _pays.clear()
        _pays[key] = r
    return r


def bind(x, w, b, res, G: int, relu=False, b2=None, e=None):
    """``f(x, w, b, res, b2, e) -> bool``: :func:`conv2d` for operands of these layouts at this thread count with
    its plan looked up once (b + b2 summed once where both are the arrays bound); False (nothing written) when the
    thread count or the mode changed or the operands are not the kind bound (the caller runs the unbound path).
    None where conv2d would not take them."""
    N, C, H, W = x.shape
    O = w.shape[0]
    if res.shape != (N, O, H, W) or C % G or O % G or w.shape[1] * G != C or not applies(x, w, res, G):
        return None
    if e is not None and (e.dtype != np.float32 or e.shape != res.shape or not e.flags.c_contiguous):
        return None
    for a in (b, b2):
        if a is not None and (a.dtype != np.float32 or a.shape != (O,) or not a.flags.c_contiguous):
            return None
    has_b = b is not None or b2 is not None
    has_e = e is not None
    nt = threads.NUM_THREADS
    mode = MODE[0]
    p = _plan(C, H, W, O, G, has_b, has_e, bool(relu), nt, mode)
    if p is None:
        return None
    b0, b20 = b, b2
    summed = [None]

    def f(x, w, b, res, b2, e) -> bool:
        if threads.NUM_THREADS != nt or MODE[0] != mode or not ON[0] or (b is None) != (b0 is None) or \
                (b2 is None) != (b20 is None) or (e is not None) != has_e:
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
        if e is not None and np.may_share_memory(e, res):
            return False
        _run(p, x, w, bias, res, e, N)
        return True
    return f


def bind_into(out, ins, attrs, b2=None, e=None, relu=False):
    """conv.bind_into's hook: ``f(out, ins, b2, e) -> bool`` running this path for a compiled graph's conv step
    (``ins`` = x, w[, b]; float32 C-contiguous operands, ``e`` of out's shape) where conv_direct.route picked it,
    the dispatch decided once; ``f`` returns False (nothing written: the caller runs conv2d_into) when
    NEE_CONV_DIRECT, this path's switches or the thread count changed.  None: operands the kernel declines."""
    from . import conv_direct
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    g = bind(x, w, b, out, attrs["groups"], relu, b2, e)
    if g is None:
        return None
    has_b = b is not None
    st0 = (ON[0], FORCE[0], MODE[0])
    cd = conv_direct

    def f(out, ins, b2, e) -> bool:
        if cd.MODE[0] != "" or (ON[0], FORCE[0], MODE[0]) != st0:
            return False
        return g(ins[0], ins[1], ins[2] if has_b else None, out, b2, e)
    return f
