"""Depthwise 2-D convolution (one output channel per input channel) of NCHW planes as LLVM IR kernels run on
gemm_driver's native workers (conv.py's ``conv2d_into`` hands it float32 / float64 depthwise convs with
column stride 1-4 and windows of up to 49 taps).

* One machine-code function per (dtype, KH, KW, column stride, relu): sizes, row stride, padding and dilation
  are runtime parameters (``_P_*``); compiled once (~0.1 s), cached on disk by llvm_render.
* Straight from the input, no padded copy: per output row and vector of V outputs (16 float32 / 8 float64)
  the accumulator starts at the channel's bias and takes every tap (the plane's KH x KW weights broadcast in
  registers once per unit): rows outside the input are skipped, a tap's V inputs (column stride s: s vector
  loads, the lanes s apart gathered by shuffles) are plain loads where the vector's whole span lies inside the
  row, masked loads (zeros outside the row) at the borders.  Sums in the (ki, kj) tap order after the bias.
* relu (torch's: x < 0 -> 0, NaN kept) in the stores; the last vector of a row a masked store.
* Threads: units of (plane, band of output rows) claimed in runs from an atomic counter (pool_native's scheme);
  large calls through ``gemm_driver.call_plan``.
* Bounds: loads stay inside their input row (the unmasked ones checked by the span test, the rest masked),
  stores inside their output row.
"""
from __future__ import annotations

import os

import numpy as np

from .. import threads
from .conv_direct import builtin, claim_ir, gather_lanes_ir, plane_band_ir, source_key

VERSION = "1"
STRIDES = (1, 2, 3, 4)
MAX_TAPS = 49

(_P_H, _P_W, _P_OH, _P_OW, _P_SH, _P_PT, _P_PL, _P_DH, _P_DW, _P_C, _P_NB, _P_RB, _P_G, _P_T1, _P_CTR,
 _P_N) = range(16)
_NAMES = ("H", "W", "OH", "OW", "SH", "PT", "PL", "DH", "DW", "C", "NB", "RB", "G", "T1")

_kernels: dict = {}


def _render(tname: str, KH: int, KW: int, sw: int, relu: bool) -> str:
    V = 16 if tname == "float" else 8
    sfx = f"v{V}f{32 if tname == 'float' else 64}"
    v = f"<{V} x {tname}>"
    vp = f"{v}*"
    iv = f"<{V} x i32>"
    L = []
    a = L.append
    a(f'declare {v} @llvm.masked.load.{sfx}.p0{sfx}({vp}, i32, <{V} x i1>, {v})')
    a(f'declare void @llvm.masked.store.{sfx}.p0{sfx}({v}, {vp}, i32, <{V} x i1>)')
    a(f'declare {v} @llvm.fma.{sfx}({v}, {v}, {v})')
    a(f'define void @"kernel"({tname}* noalias %x, {tname}* noalias %w, {tname}* noalias %bias, '
      f'{tname}* noalias %out, i64* noalias %p) {{')
    a('entry:')
    for i, nm in enumerate(_NAMES):
        a(f'  %{nm}.p = getelementptr i64, i64* %p, i64 {i}')
        a(f'  %{nm} = load i64, i64* %{nm}.p')
    a(f'  %ctr = getelementptr i64, i64* %p, i64 {_P_CTR}')
    a(f'  %lanes = add {iv} <{", ".join(f"i32 {i}" for i in range(V))}>, zeroinitializer')
    a('  %W32 = trunc i64 %W to i32')
    a(f'  %Wv.0 = insertelement {iv} undef, i32 %W32, i32 0')
    a(f'  %Wv = shufflevector {iv} %Wv.0, {iv} undef, {iv} zeroinitializer')
    a('  %HW = mul i64 %H, %W')
    a('  %OHW = mul i64 %OH, %OW')
    a(f'  %OWf = and i64 %OW, {-V}')
    # the span of input columns an output vector reads, relative to its first output's column * sw
    a(f'  %span0 = mul i64 %DW, {KW - 1}')
    a(f'  %span = add i64 %span0, {sw * V}')
    a('  br label %claim')
    claim_ir(a, 'unit')
    plane_band_ir(a, tname)
    a('  %ch = urem i64 %pl, %C')
    a(f'  %bsp = getelementptr {tname}, {tname}* %bias, i64 %ch')
    a(f'  %bs = load {tname}, {tname}* %bsp')
    a(f'  %bv.0 = insertelement {v} undef, {tname} %bs, i32 0')
    a(f'  %bv = shufflevector {v} %bv.0, {v} undef, {iv} zeroinitializer')
    a(f'  %wo = mul i64 %ch, {KH * KW}')
    for t in range(KH * KW):
        a(f'  %wsp{t} = getelementptr {tname}, {tname}* %w, i64 %wo')
        a(f'  %wsq{t} = getelementptr {tname}, {tname}* %wsp{t}, i64 {t}')
        a(f'  %ws{t} = load {tname}, {tname}* %wsq{t}')
        a(f'  %wv{t}.0 = insertelement {v} undef, {tname} %ws{t}, i32 0')
        a(f'  %wv{t} = shufflevector {v} %wv{t}.0, {v} undef, {iv} zeroinitializer')
    a('  %rany = icmp slt i64 %r0, %r1')
    a('  br i1 %rany, label %vec, label %unit_end')
    # ---- one output vector column j (outputs j .. j + V - 1 of rows [r0, r1)): the rows loop inside, plain
    # loads where its input span lies inside the rows, else masked loads (masks: the same for every row)
    a('vec:')
    a('  %j = phi i64 [ 0, %unit ], [ %j1, %vec_end ]')
    a(f'  %c0a = mul i64 %j, {sw}')
    a('  %c0 = sub i64 %c0a, %PL')                   # input column of the vector's first output, tap 0
    a('  %c0ok = icmp sge i64 %c0, 0')
    a('  %cend = add i64 %c0, %span')
    a('  %ceok = icmp sle i64 %cend, %W')
    a('  %inner = and i1 %c0ok, %ceok')
    a('  %jfull = icmp slt i64 %j, %OWf')
    a('  %orl = sub i64 %OW, %j')
    a('  %orl32 = trunc i64 %orl to i32')
    a(f'  %orb.0 = insertelement {iv} undef, i32 %orl32, i32 0')
    a(f'  %orb = shufflevector {iv} %orb.0, {iv} undef, {iv} zeroinitializer')
    a(f'  %omk = icmp slt {iv} %lanes, %orb')
    a(f'  %obj = getelementptr {tname}, {tname}* %ob, i64 %j')
    a('  br i1 %inner, label %fast_pre, label %slow_pre')
    a('slow_pre:')
    for kj in range(KW):
        for m in range(sw):
            nm = f"mk{kj}_{m}"
            a(f'  %{nm}.o0 = mul i64 %DW, {kj}')
            a(f'  %{nm}.o = add i64 %c0, %{nm}.o0')
            a(f'  %{nm}.c = add i64 %{nm}.o, {m * V}')
            a(f'  %{nm}.ci = trunc i64 %{nm}.c to i32')
            a(f'  %{nm}.cb.0 = insertelement {iv} undef, i32 %{nm}.ci, i32 0')
            a(f'  %{nm}.cb = shufflevector {iv} %{nm}.cb.0, {iv} undef, {iv} zeroinitializer')
            a(f'  %{nm}.cl = add {iv} %{nm}.cb, %lanes')
            a(f'  %{nm} = icmp ult {iv} %{nm}.cl, %Wv')
    a('  br label %slow_row')
    a('fast_pre:')
    a('  br label %fast_row')

    def rows(mode):
        """The rows loop of one vector column; ``mode`` "fast" (plain loads) or "slow" (masked loads)."""
        M = mode
        a(f'{M}_row:')
        a(f'  %{M}r = phi i64 [ %r0, %{M}_pre ], [ %{M}rn, %{M}_row_end ]')
        a(f'  %{M}hs0 = mul i64 %{M}r, %SH')
        a(f'  %{M}hs = sub i64 %{M}hs0, %PT')
        for ki in range(KH):
            a(f'  %{M}ih{ki}.d = mul i64 %DH, {ki}')
            a(f'  %{M}ih{ki} = add i64 %{M}hs, %{M}ih{ki}.d')
            a(f'  %{M}rv{ki} = icmp ult i64 %{M}ih{ki}, %H')
            a(f'  %{M}ihc{ki} = select i1 %{M}rv{ki}, i64 %{M}ih{ki}, i64 0')
            a(f'  %{M}xro{ki} = mul i64 %{M}ihc{ki}, %W')
            a(f'  %{M}xro{ki}c = add i64 %{M}xro{ki}, %c0')
            a(f'  %{M}xr{ki} = getelementptr {tname}, {tname}* %xb, i64 %{M}xro{ki}c')
        acc = "%bv"
        acc_in = acc
        prev = f"{M}_row"
        for ki in range(KH):
            nxt = f"{M}_{ki + 1}"
            if ki > 0:
                a(f'{M}_{ki}:')
                a(f'  %{M}a{ki} = phi {v} [ {acc}, %{M}_t{ki - 1} ], [ {acc_in}, %{prev} ]')
                acc = f"%{M}a{ki}"
                prev = f"{M}_{ki}"
            acc_in = acc
            a(f'  br i1 %{M}rv{ki}, label %{M}_t{ki}, label %{nxt}')
            a(f'{M}_t{ki}:')
            part = acc
            for kj in range(KW):
                t = ki * KW + kj
                nm = f"{M}{t}"
                a(f'  %{nm}.o = mul i64 %DW, {kj}')
                vals = []
                for m in range(sw):
                    a(f'  %{nm}.c{m} = add i64 %{nm}.o, {m * V}')
                    a(f'  %{nm}.p{m}.f = getelementptr {tname}, {tname}* %{M}xr{ki}, i64 %{nm}.c{m}')
                    a(f'  %{nm}.p{m} = bitcast {tname}* %{nm}.p{m}.f to {vp}')
                    if M == "fast":
                        a(f'  %{nm}.l{m} = load {v}, {vp} %{nm}.p{m}, align 4')
                    else:
                        a(f'  %{nm}.l{m} = call {v} @llvm.masked.load.{sfx}.p0{sfx}({vp} %{nm}.p{m}, i32 4, '
                          f'<{V} x i1> %mk{kj}_{m}, {v} zeroinitializer)')
                    vals.append(f"%{nm}.l{m}")
                xv = gather_lanes_ir(a, vals, sw, V, v, nm)
                # each row tap its own partial sum (short dependency chains), added to the total after it
                if kj == 0 and ki > 0:
                    a(f'  %{nm}.acc = fmul {v} {xv}, %wv{t}')
                else:
                    a(f'  %{nm}.acc = call {v} @llvm.fma.{sfx}({v} {xv}, {v} %wv{t}, {v} {part})')
                part = f"%{nm}.acc"
            if ki > 0:
                a(f'  %{M}sum{ki} = fadd {v} {acc}, {part}')
                acc = f"%{M}sum{ki}"
            else:
                acc = part
            a(f'  br label %{nxt}')
        a(f'{M}_{KH}:')
        a(f'  %{M}acc = phi {v} [ {acc}, %{M}_t{KH - 1} ], [ {acc_in}, %{prev} ]')
        if relu:
            a(f'  %{M}lt = fcmp olt {v} %{M}acc, zeroinitializer')
            a(f'  %{M}res = select <{V} x i1> %{M}lt, {v} zeroinitializer, {v} %{M}acc')
        res = f"%{M}res" if relu else f"%{M}acc"
        a(f'  %{M}oo = mul i64 %{M}r, %OW')
        a(f'  %{M}op.f = getelementptr {tname}, {tname}* %obj, i64 %{M}oo')
        a(f'  %{M}op = bitcast {tname}* %{M}op.f to {vp}')
        a(f'  br i1 %jfull, label %{M}_sf, label %{M}_sm')
        a(f'{M}_sf:')
        a(f'  store {v} {res}, {vp} %{M}op, align 4')
        a(f'  br label %{M}_row_end')
        a(f'{M}_sm:')
        a(f'  call void @llvm.masked.store.{sfx}.p0{sfx}({v} {res}, {vp} %{M}op, i32 4, <{V} x i1> %omk)')
        a(f'  br label %{M}_row_end')
        a(f'{M}_row_end:')
        a(f'  %{M}rn = add i64 %{M}r, 1')
        a(f'  %{M}rc = icmp slt i64 %{M}rn, %r1')
        a(f'  br i1 %{M}rc, label %{M}_row, label %vec_end')

    rows("fast")
    rows("slow")
    a('vec_end:')
    a(f'  %j1 = add i64 %j, {V}')
    a('  %jc = icmp slt i64 %j1, %OW')
    a('  br i1 %jc, label %vec, label %unit_end')
    a('unit_end:')
    a('  %u1 = add i64 %u, 1')
    a('  %uc = icmp slt i64 %u1, %gt1')
    a('  br i1 %uc, label %unit, label %claim')
    a('done:')
    a('  ret void')
    a('}')
    return "\n".join(L) + "\n"


def kernel(dt: np.dtype, KH: int, KW: int, sw: int, relu: bool):
    """The builtin ``f(x, w, bias, out, params)``; compiled once per process (machine code cached on disk)."""
    k = (dt.char, KH, KW, sw, relu)
    f = _kernels.get(k)
    if f is not None:
        return f
    tname = "float" if dt == np.float32 else "double"
    return builtin(_kernels, k, f"dwconv{tname[0]}{KH}x{KW}s{sw}{'r' if relu else ''}",
                   f"{source_key(__file__)}|{tname}|{KH}|{KW}|{sw}|{relu}", lambda: _render(tname, KH, KW, sw, relu), 5)


# NEE_DEPTHWISE_NATIVE=0 (or MODE[0] = "0": tests, benchmarks) keeps every depthwise conv on conv.py's other paths
MODE = [os.environ.get("NEE_DEPTHWISE_NATIVE", "1")]
_PAR_NS = 25000.0   # estimated single-thread ns from which a call goes to the native workers
_UNITS_PER_THREAD = 8
_BAND_BYTES = 16 << 10
# float64 rows wider than this stay on conv.py's kernel (1 thread, 3x3: 32 x 112 x 112 406 us there, 466 here;
# 272 x 14 x 14 83 vs 49 us, 136 x 28 x 28 stride 2 87 vs 47 us)
_F64_MAX_OW = 64
_runners: dict = {}


def x_isz(dt) -> int:
    return np.dtype(dt).itemsize


def conv2d(x, w, b, res, sh, sw, pt, pl, dh, dw, relu=False) -> bool:
    """res (N, C, OH, OW) = depthwise conv2d(x (N, C, H, W), w (C, 1, KH, KW)) + b (C,) or None, through relu when
    ``relu``; top / left padding pt, pl (the bottom / right ones are what res's size leaves).  False (nothing
    written) where no kernel takes it (dtype, column stride, window size, layout)."""
    key = (x.shape, w.shape, res.shape, sh, sw, pt, pl, dh, dw, bool(relu), x.dtype.char, w.dtype.char,
           res.dtype.char, threads.NUM_THREADS, MODE[0])
    run = _runners.get(key)
    if run is None:
        if len(_runners) > 1024:
            _runners.clear()
        run = _runners[key] = _runner(x.shape, w.shape, res.shape, sh, sw, pt, pl, dh, dw, bool(relu), x.dtype,
                                      w.dtype, res.dtype)
    if not run or not (x.flags.c_contiguous and w.flags.c_contiguous and res.flags.c_contiguous) or (
            b is not None and (b.dtype != x.dtype or b.shape != (x.shape[1],))):
        return False
    run(x, w, b, res)
    return True


def _runner(xs, ws, rs, sh, sw, pt, pl, dh, dw, relu, dt, wdt, rdt):
    from . import pool_native
    if (MODE[0] == "0" or dt not in (np.float32, np.float64) or wdt != dt or rdt != dt or sw not in STRIDES
            or not pool_native.available() or len(xs) != 4 or len(ws) != 4 or len(rs) != 4):
        return False
    N, C, H, W = xs
    O, Cg, KH, KW = ws
    OH, OW = rs[2], rs[3]
    if (O != C or Cg != 1 or rs[:2] != (N, C) or KH * KW > MAX_TAPS or min(H, W, OH, OW, sh, sw, dh, dw) < 1
            or min(pt, pl) < 0 or max(W, OW * sw + (KW - 1) * dw + sw * 16) >= 1 << 30):
        return False
    V = 16 if dt == np.float32 else 8
    if dt == np.float64 and OW > _F64_MAX_OW:
        return False
    P = N * C
    nt = threads.NUM_THREADS
    # one thread, float32: ~0.7 ns per (output vector, tap) (ShuffleNet's 3x3: 23-25 us for 272 x 14 x 14)
    est = P * OH * -(-OW // V) * KH * KW * sw * 0.7 * (2 if dt == np.float64 else 1)
    par = nt > 1 and est >= _PAR_NS
    # bands of output rows whose input rows stay in L1 while the vector columns go over them
    RB = max(1, min(OH, _BAND_BYTES // max(1, sh * W * x_isz(dt))))
    if par:
        units = nt * _UNITS_PER_THREAD
        RB = min(RB, -(-OH // max(1, min(OH, -(-units // P)))))
    NB = -(-OH // RB)
    T1 = P * NB
    G = max(1, T1 // (nt * _UNITS_PER_THREAD)) if par else T1
    base = np.zeros(_P_N, np.int64)
    base[:_P_CTR] = (H, W, OH, OW, sh, pt, pl, dh, dw, C, NB, RB, G, T1)
    f = kernel(dt, KH, KW, sw, relu)
    zero = np.zeros(C, dt)
    if par:
        from . import conv_direct
        g = conv_direct._native_parallel(f, 5, nt)
        if g is not None:
            return lambda x, w, b, res: g(x, w, zero if b is None else b, res, base.copy())

        def pooled(x, w, b, res):
            p = base.copy()
            bb = zero if b is None else b
            threads.run_parallel(lambda _: f(x, w, bb, res, p), [None] * nt)
        return pooled
    return lambda x, w, b, res: f(x, w, zero if b is None else b, res, base.copy())
