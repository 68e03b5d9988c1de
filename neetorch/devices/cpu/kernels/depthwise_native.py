"""Depthwise 2-D convolution (one output channel per input channel) of NCHW planes as LLVM IR kernels run on
gemm_driver's native workers (conv.py's ``conv2d_into`` hands it float32 / float64 depthwise convs with
column stride 1-4 and windows of up to 49 taps).

Three kernels, all over units of (plane, band of output rows) with the plane's KH x KW weights broadcast in
registers once per unit and the sums in the (ki, kj) tap order after the bias (row ki > 0's taps summed on their
own, then added), so all give the same float32 bits (finite weights; but the sign of an exact-zero sum: the
generic kernel skips the rows outside the input, the other two add their zeros):

* The direct kernel (float32, column stride 2, column dilation 1; ``_render_dir``; ``NEE_DEPTHWISE_DIRECT=0``
  leaves these to the padded-rows kernel): no copy of the input; per pair of output rows (their common input
  rows loaded once; rows outside the input read a zero row on the stack) and vector of 8 outputs, each row's
  taps from two 8-lane loads per pair of taps split into their even / odd columns in registers (one in-lane
  shuffle each, x86's shufps: the sums in its lane order, put back in order by one permute before the store);
  plain loads for the vectors whose columns lie inside the row, masked loads (zeros outside: the padding; masks
  from a table after the params) for the few at the row's ends, each kind its own loop.  Stores as the
  padded-rows kernel's.  ShuffleNet's stride-2 3x3s (1 thread, one-thread CPU time, bench/depthwise_vs_ort.py):
  0.7-0.8x the padded-rows kernel's time, whose stride-2 row split copy was half of it.  (Stride 1 on it: up to
  1.3x slower than the padded-rows kernel on rows under ~32 wide, where most loads are masked.)
* The padded-rows kernel (float32, column stride 1 (and 2 where the direct kernel does not take it), column
  dilation 1; ``_render_pad``): the unit's padded input rows copied into a per-thread scratch on the stack (each
  row at its left padding, zeros around it; rows outside the input zero rows; stride 2: each row split into its
  even and odd padded columns, half a row each),
  then per pair of output rows and vector of 8 outputs every tap a plain unaligned load of the scratch (the pair's
  common input rows loaded once), no masks: a row's last vector ends at its last column (overlapping the one
  before), rows under 8 wide run over into the next row of the unit (overwritten by it), the unit's last rows
  masked stores.  One machine-code function per (KH, KW, row / column stride, row dilation, relu).  ShuffleNet's
  3x3s (1 thread, conv2d_into, bench/depthwise_vs_ort.py): 2.0-2.5x the generic kernel's speed (rows of 7-28:
  its every load / store masked, 16 lanes on AVX2); 0.7-0.96x onnxruntime's Conv with its NCHWc reorders (which
  it runs around each of them in light_shufflenet), 1.3x (stride 1) - 2.5x (stride 2) its Conv node alone.
  Padded taps multiply zeros (as torch: an inf weight gives NaN at the borders).
* The generic kernel (``_render``: float64, column strides 3 / 4, column dilation, rows whose scratch would not
  fit): one machine-code function per (dtype, KH, KW, column stride, relu): sizes, row stride, padding and
  dilation are runtime parameters (``_P_*``); compiled once (~0.1 s), cached on disk by llvm_render.  Straight
  from the input, no padded copy: per output row and vector of V outputs (16 float32 / 8 float64) the accumulator
  starts at the channel's bias and takes every tap: rows outside the input are skipped, a tap's V inputs (column
  stride s: s vector loads, the lanes s apart gathered by shuffles) are plain loads where the vector's whole span
  lies inside the row, masked loads (zeros outside the row) at the borders.  The last vector of a row a masked
  store.
* relu (torch's: x < 0 -> 0, NaN kept), or another activation's steps (kernels/conv_act.py), in the stores.
* Threads: units claimed in runs from an atomic counter (pool_native's scheme); large calls through
  ``gemm_driver.call_plan``.
* Bounds: the generic kernel's loads stay inside their input row (the unmasked ones checked by the span test,
  the rest masked), stores inside their output row; the padded-rows kernel's fills, reads and rows are checked
  against its scratch in ``pad_params``, its stores stay inside the unit's rows; the direct kernel's plain loads
  only in the vectors ``dir_params`` finds inside the row (the zero row: as wide as a row), the rest masked to the
  row, its stores as the padded-rows kernel's.
"""
from __future__ import annotations

import os

import numpy as np

from .. import native_chain, threads
from . import conv_act
from .conv_direct import builtin, claim_ir, gather_lanes_ir, plane_band_ir, source_key

VERSION = "1"
STRIDES = (1, 2, 3, 4)
MAX_TAPS = 49

(_P_H, _P_W, _P_OH, _P_OW, _P_SH, _P_PT, _P_PL, _P_DH, _P_DW, _P_C, _P_NB, _P_RB, _P_G, _P_T1, _P_CTR,
 _P_N) = range(16)
_NAMES = ("H", "W", "OH", "OW", "SH", "PT", "PL", "DH", "DW", "C", "NB", "RB", "G", "T1")

_kernels: dict = {}
_src: list = []


def _source() -> str:
    """The disk-cache key of this module's renderers: its source and conv_act's (the activation steps' IR)."""
    if not _src:
        _src.append(source_key(__file__) + source_key(conv_act.__file__))
    return _src[0]


def _head(a, tname: str, V: int) -> None:
    """The kernels' declarations (masked load / store, fma of V-lane vectors of ``tname``), the signature
    ``kernel(x, w, bias, out, p)`` and the entry block's loads of the params named in _NAMES (shared by
    :func:`_render` and :func:`_render_pad`)."""
    sfx = f"v{V}f{32 if tname == 'float' else 64}"
    v = f"<{V} x {tname}>"
    vp = f"{v}*"
    a(f'declare {v} @llvm.masked.load.{sfx}.p0{sfx}({vp}, i32, <{V} x i1>, {v})')
    a(f'declare void @llvm.masked.store.{sfx}.p0{sfx}({v}, {vp}, i32, <{V} x i1>)')
    a(f'declare {v} @llvm.fma.{sfx}({v}, {v}, {v})')
    a(f'define void @"kernel"({tname}* noalias %x, {tname}* noalias %w, {tname}* noalias %bias, '
      f'{tname}* noalias %out, i64* noalias %p) {{')
    a('entry:')
    a('  %ua.slot = alloca i64')        # (_unit_act: where the pending run of outputs starts; unused without)
    for i, nm in enumerate(_NAMES):
        a(f'  %{nm}.p = getelementptr i64, i64* %p, i64 {i}')
        a(f'  %{nm} = load i64, i64* %{nm}.p')


def _unit_act(a, act, tname: str) -> None:
    """At ``unit_end``: a heavy activation (kernels/conv_act.py ``heavy``: SiLU, GELU, sigmoid...; the stores took
    none) applied in place to the claim's outputs written since its last pass, now final and in cache: once they
    reach _ACT_RUN, and at the claim's last unit (a claim's units are consecutive bands of consecutive planes, so
    their outputs are one contiguous run; where it starts is kept in %ua.slot, no division per unit)."""
    if not conv_act.heavy(act):
        return
    for line in ("%ua.s0 = mul i64 %pl, %OHW", "%ua.s1 = mul i64 %r0, %OW", "%ua.us = add i64 %ua.s0, %ua.s1",
                 "%ua.e1 = mul i64 %r1, %OW", "%ua.e = add i64 %ua.s0, %ua.e1", "%ua.first = icmp eq i64 %u, %gt0",
                 "%ua.old = load i64, i64* %ua.slot", "%ua.s = select i1 %ua.first, i64 %ua.us, i64 %ua.old",
                 "%ua.n = sub i64 %ua.e, %ua.s", f"%ua.full = icmp sge i64 %ua.n, {_ACT_RUN}",
                 "%ua.u1 = add i64 %u, 1", "%ua.last = icmp sge i64 %ua.u1, %gt1", "%ua.go = or i1 %ua.full, %ua.last",
                 "%ua.new = select i1 %ua.go, i64 %ua.e, i64 %ua.s", "store i64 %ua.new, i64* %ua.slot"):
        a("  " + line)
    conv_act.unit_ir(a, act, tname, "%out", "%ua.s", "%ua.e", "%ua.go")


_ACT_RUN = 4096     # outputs (16 KB of float32) a heavy activation's pass takes at once, in L1 / L2 after the stores


def _render(tname: str, KH: int, KW: int, sw: int, relu: bool) -> str:
    V = 16 if tname == "float" else 8
    sfx = f"v{V}f{32 if tname == 'float' else 64}"
    v = f"<{V} x {tname}>"
    vp = f"{v}*"
    iv = f"<{V} x i32>"
    L = []
    a = L.append
    _head(a, tname, V)
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
        res = conv_act.apply_ir(a, conv_act.in_stores(relu), V, tname, f"%{M}acc", M)
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
    _unit_act(a, relu, tname)
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
    return builtin(_kernels, k, f"dwconv{tname[0]}{KH}x{KW}s{sw}{conv_act.tag(relu)}",
                   f"{_source()}|{tname}|{KH}|{KW}|{sw}|{conv_act.key(relu)}",
                   lambda: _render(tname, KH, KW, sw, relu), 5)


# ---------------------------------------------------------------- float32, column stride 1 / 2: padded rows
# params after _P_CTR (the generic kernel's first 15): scratch row stride, phase width (stride 2: the odd padded
# columns' half row from it), scratch floats, full fill chunks per input row, the tail chunk's valid columns, output
# vectors per row, the last vector's column, the even / odd input columns' destination in a scratch row, the column
# of the row's last (overlapping, unmasked) fill chunk or -1 (a masked tail chunk instead)
(_Q_WR, _Q_WH, _Q_SZ, _Q_NF, _Q_TL, _Q_NV, _Q_JL, _Q_DE, _Q_DO, _Q_OV, _Q_N) = range(_P_N, _P_N + 11)
_QNAMES = ("WR", "WH", "SZ", "NF", "TL", "NV", "JL", "DE", "DO", "OV")
PV = 8          # lanes of the padded-rows kernel's vectors (a ymm)


def _unit_head_ir(a, v: str, iv: str, taps: int) -> None:
    """The padded and the direct kernels' claim loop and unit head: the claimed group's first (plane, band), then
    per unit its output rows [r0, r1), input / output planes, the bias and the ``taps`` weights as vectors."""
    claim_ir(a, 'gstart')
    # the group's first unit: plane and band by division, then counted (no division per unit)
    a('gstart:')
    a('  %pl0 = udiv i64 %gt0, %NB')
    a('  %bdm0 = mul i64 %pl0, %NB')
    a('  %bd0 = sub i64 %gt0, %bdm0')
    a('  %ch0 = urem i64 %pl0, %C')
    a('  br label %unit')
    a('unit:')
    a('  %u = phi i64 [ %gt0, %gstart ], [ %u1, %unit_end ]')
    a('  %pl = phi i64 [ %pl0, %gstart ], [ %pln, %unit_end ]')
    a('  %bd = phi i64 [ %bd0, %gstart ], [ %bdn, %unit_end ]')
    a('  %ch = phi i64 [ %ch0, %gstart ], [ %chn, %unit_end ]')
    a('  %r0 = mul i64 %bd, %RB')
    a('  %r1a = add i64 %r0, %RB')
    a('  %r1s = icmp slt i64 %r1a, %OH')
    a('  %r1 = select i1 %r1s, i64 %r1a, i64 %OH')
    a('  %xbo = mul i64 %pl, %HW')
    a('  %xb = getelementptr float, float* %x, i64 %xbo')
    a('  %obo = mul i64 %pl, %OHW')
    a('  %ob = getelementptr float, float* %out, i64 %obo')
    a('  %bsp = getelementptr float, float* %bias, i64 %ch')
    a('  %bs = load float, float* %bsp')
    a(f'  %bv.0 = insertelement {v} undef, float %bs, i32 0')
    a(f'  %bv = shufflevector {v} %bv.0, {v} undef, {iv} zeroinitializer')
    a(f'  %wo = mul i64 %ch, {taps}')
    for t in range(taps):
        a(f'  %wsp{t} = getelementptr float, float* %w, i64 %wo')
        a(f'  %wsq{t} = getelementptr float, float* %wsp{t}, i64 {t}')
        a(f'  %ws{t} = load float, float* %wsq{t}')
        a(f'  %wv{t}.0 = insertelement {v} undef, float %ws{t}, i32 0')
        a(f'  %wv{t} = shufflevector {v} %wv{t}.0, {v} undef, {iv} zeroinitializer')


def _render_pad(KH: int, KW: int, sh: int, sw: int, dh: int, relu: bool) -> str:
    """The padded-rows kernel (float32, column stride sw 1 or 2): per unit (plane, band of output rows) the band's
    padded input rows copied into a per-thread scratch at their left padding (stride 2: split into even / odd
    padded columns, each its own half row; rows outside the input zero rows), then every output vector of 8 from
    plain loads of the scratch, the taps summed in the generic kernel's order; full stores (a row's last vector
    ends at its last column; rows under 8 wide run over into the next row of the unit, which overwrites them),
    masked where a vector would leave the unit's rows."""
    V = PV
    v = f"<{V} x float>"
    vp = f"{v}*"
    iv = f"<{V} x i32>"
    m = f"<{V} x i1>"
    L = []
    a = L.append
    _head(a, "float", V)
    for i, nm in enumerate(_QNAMES):
        a(f'  %{nm}.p = getelementptr i64, i64* %p, i64 {_P_N + i}')
        a(f'  %{nm} = load i64, i64* %{nm}.p')
    a(f'  %ctr = getelementptr i64, i64* %p, i64 {_P_CTR}')
    a(f'  %lanes = add {iv} <{", ".join(f"i32 {i}" for i in range(V))}>, zeroinitializer')
    a('  %HW = mul i64 %H, %W')
    a('  %OHW = mul i64 %OH, %OW')
    a('  %sbf = alloca float, i64 %SZ, align 32')
    # the fill's tail masks: lanes below TL (and TL - 8: stride 2's second vector)
    for k in range(sw):
        a(f'  %tl{k} = sub i64 %TL, {k * V}')
        a(f'  %tl{k}t = trunc i64 %tl{k} to i32')
        a(f'  %tl{k}b.0 = insertelement {iv} undef, i32 %tl{k}t, i32 0')
        a(f'  %tl{k}b = shufflevector {iv} %tl{k}b.0, {iv} undef, {iv} zeroinitializer')
        a(f'  %tm{k} = icmp slt {iv} %lanes, %tl{k}b')
    # the output vectors' mask (rows narrower than V: lanes below OW)
    a('  %OW32 = trunc i64 %OW to i32')
    a(f'  %owb.0 = insertelement {iv} undef, i32 %OW32, i32 0')
    a(f'  %owb = shufflevector {iv} %owb.0, {iv} undef, {iv} zeroinitializer')
    a(f'  %omk = icmp slt {iv} %lanes, %owb')
    a('  %hasTL = icmp sgt i64 %TL, 0')
    a('  %hasOV = icmp sge i64 %OV, 0')
    a('  %fany = icmp sgt i64 %NF, 0')
    a(f'  %khr = mul i64 %DH, {KH - 1}')
    a('  br label %zero')
    # the scratch zeroed once (the fills write only the padded rows' input columns, zeros past them, zero rows)
    a('zero:')
    a('  %zi = phi i64 [ 0, %entry ], [ %zi1, %zero ]')
    a('  %zp.f = getelementptr float, float* %sbf, i64 %zi')
    a(f'  %zp = bitcast float* %zp.f to {vp}')
    a(f'  store {v} zeroinitializer, {vp} %zp, align 32')
    a(f'  %zi1 = add i64 %zi, {V}')
    a('  %zc = icmp slt i64 %zi1, %SZ')
    a('  br i1 %zc, label %zero, label %claim')
    _unit_head_ir(a, v, iv, KH * KW)
    # the band's padded input rows [hb0, hb1): scratch rows from 0 (zero rows outside the input)
    a('  %hbs = mul i64 %r0, %SH')
    a('  %hb0 = sub i64 %hbs, %PT')
    a('  %rl = sub i64 %r1, 1')
    a('  %hbl0 = mul i64 %rl, %SH')
    a('  %hbl1 = sub i64 %hbl0, %PT')
    a('  %hbl2 = add i64 %hbl1, %khr')
    a('  %hb1 = add i64 %hbl2, 1')
    a('  %o1 = mul i64 %r1, %OW')
    # ---- fill: padded input rows [hb0, hb1) -> scratch rows from 0: zero rows above / below the input, data rows
    # [d0, d1) between
    a('  %d0n = icmp slt i64 %hb0, 0')
    a('  %d0a = select i1 %d0n, i64 0, i64 %hb0')
    a('  %d0c = icmp slt i64 %d0a, %hb1')
    a('  %d0 = select i1 %d0c, i64 %d0a, i64 %hb1')
    a('  %d1c = icmp slt i64 %hb1, %H')
    a('  %d1a = select i1 %d1c, i64 %hb1, i64 %H')
    a('  %d1d = icmp slt i64 %d1a, %d0')
    a('  %d1 = select i1 %d1d, i64 %d0, i64 %d1a')

    def zero_rows(pfx, lo, hi, nxt):
        """Zero scratch rows for padded rows [lo, hi), then to block ``nxt``."""
        a(f'  %{pfx}any = icmp slt i64 {lo}, {hi}')
        a(f'  br i1 %{pfx}any, label %{pfx}row, label %{nxt}')
        a(f'{pfx}row:')
        a(f'  %{pfx}i = phi i64 [ {lo}, %{pfx}pre ], [ %{pfx}i1, %{pfx}row_end ]')
        a(f'  %{pfx}r = sub i64 %{pfx}i, %hb0')
        a(f'  %{pfx}o = mul i64 %{pfx}r, %WR')
        a(f'  %{pfx}d = getelementptr float, float* %sbf, i64 %{pfx}o')
        a(f'  br label %{pfx}v')
        a(f'{pfx}v:')
        a(f'  %{pfx}k = phi i64 [ 0, %{pfx}row ], [ %{pfx}k1, %{pfx}v ]')
        a(f'  %{pfx}p.f = getelementptr float, float* %{pfx}d, i64 %{pfx}k')
        a(f'  %{pfx}p = bitcast float* %{pfx}p.f to {vp}')
        a(f'  store volatile {v} zeroinitializer, {vp} %{pfx}p, align 32')
        a(f'  %{pfx}k1 = add i64 %{pfx}k, {V}')
        a(f'  %{pfx}kc = icmp slt i64 %{pfx}k1, %WR')
        a(f'  br i1 %{pfx}kc, label %{pfx}v, label %{pfx}row_end')
        a(f'{pfx}row_end:')
        a(f'  %{pfx}i1 = add i64 %{pfx}i, 1')
        a(f'  %{pfx}c = icmp slt i64 %{pfx}i1, {hi}')
        a(f'  br i1 %{pfx}c, label %{pfx}row, label %{nxt}')

    a('  br label %ztpre')
    a('ztpre:')
    zero_rows('zt', '%hb0', '%d0', 'dpre')
    a('dpre:')
    a('  %dany = icmp slt i64 %d0, %d1')
    a('  br i1 %dany, label %frow, label %zbpre')
    a('frow:')
    a('  %fi = phi i64 [ %d0, %dpre ], [ %fi1, %frow_end ]')
    a('  %fdr = sub i64 %fi, %hb0')
    a('  %fdo = mul i64 %fdr, %WR')
    a('  %fd = getelementptr float, float* %sbf, i64 %fdo')
    a('  %fso = mul i64 %fi, %W')
    a('  %fs = getelementptr float, float* %xb, i64 %fso')
    a('  %fde = getelementptr float, float* %fd, i64 %DE')
    a('  %fdd = getelementptr float, float* %fd, i64 %DO')
    a('  br i1 %fany, label %fvec, label %ftail_q')

    def fill_chunk(pfx, c, d, masked):
        """One chunk of V * sw input columns from column ``c`` to scratch column ``d`` of each phase: sw loads,
        the stride-2 split, sw stores."""
        loads = []
        for q in range(sw):
            a(f'  %{pfx}cq{q} = add i64 {c}, {q * V}')
            a(f'  %{pfx}sp{q}.f = getelementptr float, float* %fs, i64 %{pfx}cq{q}')
            a(f'  %{pfx}sp{q} = bitcast float* %{pfx}sp{q}.f to {vp}')
            if masked:
                a(f'  %{pfx}l{q} = call {v} @llvm.masked.load.v8f32.p0v8f32({vp} %{pfx}sp{q}, i32 4, {m} %tm{q}, '
                  f'{v} zeroinitializer)')
            else:
                a(f'  %{pfx}l{q} = load {v}, {vp} %{pfx}sp{q}, align 4')
            loads.append(f'%{pfx}l{q}')
        if sw == 1:
            outs = [(loads[0], '%fde')]
        else:
            ev = ", ".join(f"i32 {2 * i}" for i in range(V))
            od = ", ".join(f"i32 {2 * i + 1}" for i in range(V))
            a(f'  %{pfx}ev = shufflevector {v} {loads[0]}, {v} {loads[1]}, {iv} <{ev}>')
            a(f'  %{pfx}od = shufflevector {v} {loads[0]}, {v} {loads[1]}, {iv} <{od}>')
            outs = [(f'%{pfx}ev', '%fde'), (f'%{pfx}od', '%fdd')]
        for q, (val, base) in enumerate(outs):
            a(f'  %{pfx}dp{q}.f = getelementptr float, float* {base}, i64 {d}')
            a(f'  %{pfx}dp{q} = bitcast float* %{pfx}dp{q}.f to {vp}')
            # (volatile: LLVM would turn the stride-1 copy loop into a memcpy call per row)
            a(f'  store volatile {v} {val}, {vp} %{pfx}dp{q}, align 4')

    a('fvec:')
    a('  %fk = phi i64 [ 0, %frow ], [ %fk1, %fvec ]')
    a(f'  %fvc = mul i64 %fk, {V * sw}')
    a(f'  %fvd = mul i64 %fk, {V}')
    fill_chunk('fv', '%fvc', '%fvd', False)
    a('  %fk1 = add i64 %fk, 1')
    a('  %fkc = icmp slt i64 %fk1, %NF')
    a('  br i1 %fkc, label %fvec, label %ftail_q')
    # the row's last columns: a plain chunk ending at its end (overlapping the one before: the columns past the row
    # stay the zeros they are), else (rows under a chunk, stride 2 of odd width) a masked one, zeros past the row
    a('ftail_q:')
    a('  br i1 %hasOV, label %fovl, label %ftail_m')
    a('fovl:')
    a(f'  %fod = udiv i64 %OV, {sw}')
    fill_chunk('fo', '%OV', '%fod', False)
    a('  br label %frow_end')
    a('ftail_m:')
    a('  br i1 %hasTL, label %ftail, label %frow_end')
    a('ftail:')
    a(f'  %ftc = mul i64 %NF, {V * sw}')
    a(f'  %ftd = mul i64 %NF, {V}')
    fill_chunk('ft', '%ftc', '%ftd', True)
    a('  br label %frow_end')
    a('frow_end:')
    a('  %fi1 = add i64 %fi, 1')
    a('  %fic = icmp slt i64 %fi1, %d1')
    a('  br i1 %fic, label %frow, label %zbpre')
    a('zbpre:')
    zero_rows('zb', '%d1', '%hb1', 'row')
    # ---- output rows [r0, r1), two at a time (their common input rows loaded once): scratch rows (r - r0) * sh
    # + ki * dh
    a('row:')
    a('  %r = phi i64 [ %r0, %zbpre ], [ %r0, %zbrow_end ], [ %rn, %row_end ]')
    a('  %rr = sub i64 %r, %r0')
    a('  %rso = mul i64 %rr, %WR')
    a(f'  %rsw = mul i64 %rso, {sh}')
    a('  %xr = getelementptr float, float* %sbf, i64 %rsw')
    a('  %oro = mul i64 %r, %OW')
    a('  %r2 = add i64 %r, 2')
    a('  %pair = icmp sle i64 %r2, %r1')
    a('  br i1 %pair, label %row2, label %row1')

    def body(NR: int, pfx: str, head: str, tail: str):
        """The vector loop over one row's NR (1 or 2) output rows from head block ``head`` to ``tail``."""
        srows = sorted({q * sh + ki * dh for q in range(NR) for ki in range(KH)})
        a(f'{head}:')
        for sr in srows:
            a(f'  %{pfx}so{sr} = mul i64 %WR, {sr}')
            for ph in range(sw):
                a(f'  %{pfx}sp{sr}_{ph}.a = add i64 %{pfx}so{sr}, {"%WH" if ph else 0}')
                a(f'  %{pfx}xr{sr}_{ph} = getelementptr float, float* %xr, i64 %{pfx}sp{sr}_{ph}.a')
        a(f'  br label %{pfx}vec')
        a(f'{pfx}vec:')
        a(f'  %{pfx}jv = phi i64 [ 0, %{head} ], [ %{pfx}jv1, %{pfx}vec_end ]')
        a(f'  %{pfx}ja = mul i64 %{pfx}jv, {V}')
        a(f'  %{pfx}jl = icmp slt i64 %{pfx}ja, %JL')
        a(f'  %{pfx}j = select i1 %{pfx}jl, i64 %{pfx}ja, i64 %JL')
        loaded = {}

        def load(sr, kj):
            ph, col = (0, kj) if sw == 1 else (kj & 1, kj >> 1)
            key = (sr, ph, col)
            if key not in loaded:
                nm = f"%{pfx}l{sr}_{ph}_{col}"
                a(f'  {nm}.j = add i64 %{pfx}j, {col}')
                a(f'  {nm}.f = getelementptr float, float* %{pfx}xr{sr}_{ph}, i64 {nm}.j')
                a(f'  {nm}.p = bitcast float* {nm}.f to {vp}')
                a(f'  {nm} = load {v}, {vp} {nm}.p, align 4')
                loaded[key] = nm
            return loaded[key]

        results = []
        for q in range(NR):
            acc = "%bv"
            for ki in range(KH):
                part = acc if ki == 0 else None
                for kj in range(KW):
                    t = ki * KW + kj
                    lv = load(q * sh + ki * dh, kj)
                    nm = f"%{pfx}c{q}_{t}"
                    if part is None:
                        a(f'  {nm} = fmul {v} {lv}, %wv{t}')
                    else:
                        a(f'  {nm} = call {v} @llvm.fma.v8f32({v} {lv}, {v} %wv{t}, {v} {part})')
                    part = nm
                if ki > 0:
                    a(f'  %{pfx}sum{q}_{ki} = fadd {v} {acc}, {part}')
                    acc = f"%{pfx}sum{q}_{ki}"
                else:
                    acc = part
            acc = conv_act.apply_ir(a, conv_act.in_stores(relu), 8, "float", acc, f"{pfx}{q}")
            results.append(acc)
        for q, res in enumerate(results):
            a(f'  %{pfx}oo{q}.r = mul i64 %OW, {q}')
            a(f'  %{pfx}oo{q}.s = add i64 %oro, %{pfx}oo{q}.r')
            a(f'  %{pfx}oo{q} = add i64 %{pfx}oo{q}.s, %{pfx}j')
            a(f'  %{pfx}op{q}.f = getelementptr float, float* %ob, i64 %{pfx}oo{q}')
            a(f'  %{pfx}op{q} = bitcast float* %{pfx}op{q}.f to {vp}')
            a(f'  %{pfx}oe{q} = add i64 %{pfx}oo{q}, {V}')
            a(f'  %{pfx}ofull{q} = icmp sle i64 %{pfx}oe{q}, %o1')
            nxt = f"{pfx}st{q + 1}" if q + 1 < NR else f"{pfx}vec_end"
            a(f'  br i1 %{pfx}ofull{q}, label %{pfx}sf{q}, label %{pfx}sm{q}')
            a(f'{pfx}sf{q}:')
            a(f'  store {v} {res}, {vp} %{pfx}op{q}, align 4')
            a(f'  br label %{nxt}')
            a(f'{pfx}sm{q}:')
            a(f'  call void @llvm.masked.store.v8f32.p0v8f32({v} {res}, {vp} %{pfx}op{q}, i32 4, {m} %omk)')
            a(f'  br label %{nxt}')
            if q + 1 < NR:
                a(f'{nxt}:')
        a(f'{pfx}vec_end:')
        a(f'  %{pfx}jv1 = add i64 %{pfx}jv, 1')
        a(f'  %{pfx}jvc = icmp slt i64 %{pfx}jv1, %NV')
        a(f'  br i1 %{pfx}jvc, label %{pfx}vec, label %{tail}')

    body(2, "b", "row2", "row_end2")
    body(1, "a", "row1", "row_end1")
    a('row_end2:')
    a('  br label %row_end')
    a('row_end1:')
    a('  br label %row_end')
    a('row_end:')
    a('  %rstep = phi i64 [ 2, %row_end2 ], [ 1, %row_end1 ]')
    a('  %rn = add i64 %r, %rstep')
    a('  %rc = icmp slt i64 %rn, %r1')
    a('  br i1 %rc, label %row, label %unit_end')
    a('unit_end:')
    _unit_act(a, relu, 'float')
    a('  %u1 = add i64 %u, 1')
    a('  %bd1 = add i64 %bd, 1')
    a('  %bdw = icmp eq i64 %bd1, %NB')
    a('  %bdn = select i1 %bdw, i64 0, i64 %bd1')
    a('  %plw = zext i1 %bdw to i64')
    a('  %pln = add i64 %pl, %plw')
    a('  %ch1 = add i64 %ch, %plw')
    a('  %chw = icmp eq i64 %ch1, %C')
    a('  %chn = select i1 %chw, i64 0, i64 %ch1')
    a('  %uc = icmp slt i64 %u1, %gt1')
    a('  br i1 %uc, label %unit, label %claim')
    a('done:')
    a('  ret void')
    a('}')
    return "\n".join(L) + "\n"


def kernel_pad(KH: int, KW: int, sh: int, sw: int, dh: int, relu: bool, direct: bool = False):
    """The padded-rows builtin ``f(x, w, bias, out, params)`` (float32, column stride 1 / 2, column dilation 1),
    or with ``direct`` the direct kernel's (:func:`_render_dir`, params :func:`dir_params`)."""
    k = ("dir" if direct else "pad", KH, KW, sh, sw, dh, relu)
    f = _kernels.get(k)
    if f is not None:
        return f
    if direct:
        return builtin(_kernels, k, f"dwdirf{KH}x{KW}s{sh}{sw}d{dh}{conv_act.tag(relu)}",
                       f"{_source()}|dir|{KH}|{KW}|{sh}|{sw}|{dh}|{conv_act.key(relu)}",
                       lambda: _render_dir(KH, KW, sh, sw, dh, relu), 5)
    return builtin(_kernels, k, f"dwpadf{KH}x{KW}s{sh}{sw}d{dh}{conv_act.tag(relu)}",
                   f"{_source()}|pad|{KH}|{KW}|{sh}|{sw}|{dh}|{conv_act.key(relu)}",
                   lambda: _render_pad(KH, KW, sh, sw, dh, relu), 5)


def _r8(n: int) -> int:
    return -(-n // PV) * PV


def pad_params(H, W, OH, OW, sh, sw, pt, pl, dh, KH, KW, RB):
    """The padded-rows kernel's params past _P_CTR (``_Q_*``) and its scratch size (floats) for bands of RB output
    rows; every scratch read and write checked in bounds.  Column dilation 1."""
    NF, TL = divmod(W, PV * sw)
    nch = NF + (TL > 0)                     # fill chunks per input row: columns [0, nch * PV * sw) (zeros past W)
    # the row's last columns: one unmasked chunk ending at the row's end (stride 2: from an even column)
    OV = W - PV * sw if TL and W >= PV * sw and (W - PV * sw) % sw == 0 else -1
    NV = -(-OW // PV)
    JL = max(OW - PV, 0)
    # the last vector's lanes: columns [JL, JL + PV) (OW < PV: lanes past OW are stored over the next row or masked);
    # tap kj reads phase kj % sw from column kj // sw on
    if sw == 1:
        WH = _r8(max(pl + nch * PV, JL + PV + KW - 1))
        WR = WH
        DE = DO = pl
        fill_end = [(pl, pl + nch * PV)]
    else:
        WH = _r8(max((pl + 1) // 2 + nch * PV, JL + PV + (KW - 1) // 2))
        WR = 2 * WH
        DE = (pl & 1) * WH + (pl >> 1)
        DO = ((pl + 1) & 1) * WH + ((pl + 1) >> 1)
        fill_end = [(DE, DE + nch * PV), (DO, DO + nch * PV)]
    rows = (RB - 1) * sh + (KH - 1) * dh + 1        # the band's padded input rows
    SZ = _r8(rows * WR)
    # bounds: fills inside their phase of the scratch row, reads (the last vector's lanes, every tap) inside their
    # phase of the row, the rows inside the scratch
    for s0, s1 in fill_end:
        if s0 < 0 or s1 > (s0 // WH + 1) * WH:
            raise AssertionError("depthwise_native: fill would leave its scratch row")
    if (KW - 1) // sw + JL + PV > WH or rows * WR > SZ or SZ % PV:
        raise AssertionError("depthwise_native: tap reads would leave the scratch")
    return [WR, WH, SZ, NF, TL, NV, JL, DE, DO, OV], SZ


# ---------------------------------------------------------------- float32, column stride 2: direct rows
# params after _P_CTR (the generic kernel's first 15): output vectors per row, the last vector's column, the zero
# row's floats, the first fast vector and the first slow one after the fast ones; then the slow vectors' load masks
(_R_NV, _R_JL, _R_ZW, _R_FA, _R_FB, _R_N) = range(_P_N, _P_N + 6)
_RNAMES = ("NV", "JL", "ZW", "FA", "FB")
_DIR_MAX_SLOW = 64      # slow vectors per row (mask table entries) from which a conv takes another kernel
# column stride 2: the even / odd lanes of two vectors of 8 in the order of one in-lane shuffle per 256 bits
# (x86's shufps), the outputs put back in order once (``_UNP``: the permutation is its own inverse)
_EVEN = (0, 2, 8, 10, 4, 6, 12, 14)
_ODD = (1, 3, 9, 11, 5, 7, 13, 15)
_UNP = (0, 1, 4, 5, 2, 3, 6, 7)


def tap_loads(KW: int, sw: int) -> list:
    """Per tap kj of a row, (o, ph): the tap's 8 inputs (columns c + kj + sw * i, c the vector's first output's
    column of tap 0) are, column stride 1, the 8-lane load at column c + o (o = kj); column stride 2, the even
    (ph 0) or odd (ph 1) lanes of the two 8-lane loads at c + o, c + o + 8 (taps 2s, 2s + 1 share theirs; a last
    even tap the odd lanes of the loads at c + kj - 1): a row's loads span exactly columns [c, c + span(KW, sw))."""
    if sw == 1:
        return [(kj, 0) for kj in range(KW)]
    return [(kj - 1, 1) if kj % 2 or (kj == KW - 1 and kj > 0) else (kj, 0) for kj in range(KW)]


def span(KW: int, sw: int) -> int:
    """The columns a row's loads of one output vector cover (from its column c of tap 0)."""
    return max(o for o, _ in tap_loads(KW, sw)) + PV * sw


def load_offsets(KW: int, sw: int) -> list:
    """The columns (past the vector's c) of a row's 8-lane loads."""
    return sorted({o + PV * h for o, _ in tap_loads(KW, sw) for h in range(sw)})


def _render_dir(KH: int, KW: int, sh: int, sw: int, dh: int, relu: bool) -> str:
    """The direct kernel (float32, column stride sw 2 (1 works too, slower than the padded-rows kernel where
    masked loads are many: rows under ~32 wide), column dilation 1): per unit (plane, band of output
    rows), two output rows at a time (their common input rows loaded once), every output vector of 8 straight
    from the input rows (rows outside the input: a zero row on the stack), plain loads where the vector's span
    lies inside the row (the vectors [FA, FB)), else masked loads (zeros outside the row: the padding; masks from
    the table after the params); stride 2's even / odd columns split in registers (:func:`tap_loads`), the sums
    in shufps' lane order, put back in order before the store; the taps summed in the generic kernel's order;
    full stores (a row's last vector ends at its last column; rows under 8 wide run over into the next row of the
    unit, which overwrites them), masked where a vector would leave the unit's rows."""
    V = PV
    v = f"<{V} x float>"
    vp = f"{v}*"
    iv = f"<{V} x i32>"
    m = f"<{V} x i1>"
    plan = tap_loads(KW, sw)
    offs = load_offsets(KW, sw)
    L = []
    a = L.append
    _head(a, "float", V)
    for i, nm in enumerate(_RNAMES):
        a(f'  %{nm}.p = getelementptr i64, i64* %p, i64 {_P_N + i}')
        a(f'  %{nm} = load i64, i64* %{nm}.p')
    a(f'  %ctr = getelementptr i64, i64* %p, i64 {_P_CTR}')
    a(f'  %lanes = add {iv} <{", ".join(f"i32 {i}" for i in range(V))}>, zeroinitializer')
    a('  %HW = mul i64 %H, %W')
    a('  %OHW = mul i64 %OH, %OW')
    # the output vectors' mask (rows narrower than V: lanes below OW)
    a('  %OW32 = trunc i64 %OW to i32')
    a(f'  %owb.0 = insertelement {iv} undef, i32 %OW32, i32 0')
    a(f'  %owb = shufflevector {iv} %owb.0, {iv} undef, {iv} zeroinitializer')
    a(f'  %omk = icmp slt {iv} %lanes, %owb')
    # the slow vectors' load masks (int32 lanes, sign bit set where the lane's column lies inside the row; the
    # same for every row): a table after the params, len(offs) vectors of 8 per slow vector
    a(f'  %tab.p = getelementptr i64, i64* %p, i64 {_R_N}')
    a('  %tab = bitcast i64* %tab.p to i32*')
    a('  %NFV = sub i64 %FB, %FA')
    # the zero row (read for the rows outside the input): ZW >= W floats, zeroed once per call
    a('  %zb = alloca float, i64 %ZW, align 32')
    a('  br label %zero')
    a('zero:')
    a('  %zi = phi i64 [ 0, %entry ], [ %zi1, %zero ]')
    a('  %zp.f = getelementptr float, float* %zb, i64 %zi')
    a(f'  %zp = bitcast float* %zp.f to {vp}')
    a(f'  store volatile {v} zeroinitializer, {vp} %zp, align 32')
    a(f'  %zi1 = add i64 %zi, {V}')
    a('  %zc = icmp slt i64 %zi1, %ZW')
    a('  br i1 %zc, label %zero, label %claim')
    _unit_head_ir(a, v, iv, KH * KW)
    a('  %o1 = mul i64 %r1, %OW')
    a('  br label %row')
    # ---- output rows [r0, r1), two at a time: input rows r * sh - pt + (q * sh + ki * dh)
    a('row:')
    a('  %r = phi i64 [ %r0, %unit ], [ %rn, %row_end ]')
    a('  %hs0 = mul i64 %r, %SH')
    a('  %hs = sub i64 %hs0, %PT')
    a('  %oro = mul i64 %r, %OW')
    a('  %r2 = add i64 %r, 2')
    a('  %pair = icmp sle i64 %r2, %r1')
    a('  br i1 %pair, label %row2, label %row1')

    def vloop(NR: int, pfx: str, slow: bool, lo: str, hi: str, pre: str, nxt: str):
        """Output vectors jv in [lo, hi) of NR rows (from block ``pre``, then to ``nxt``): plain loads, or
        (``slow``) masked loads, the masks of slow vector s (jv, less the fast ones before it) from the table."""
        a(f'{pre}:')
        a(f'  %{pfx}any = icmp slt i64 {lo}, {hi}')
        a(f'  br i1 %{pfx}any, label %{pfx}vec, label %{nxt}')
        a(f'{pfx}vec:')
        a(f'  %{pfx}jv = phi i64 [ {lo}, %{pre} ], [ %{pfx}jv1, %{pfx}vec_end ]')
        a(f'  %{pfx}ja = mul i64 %{pfx}jv, {V}')
        a(f'  %{pfx}jl = icmp slt i64 %{pfx}ja, %JL')
        a(f'  %{pfx}j = select i1 %{pfx}jl, i64 %{pfx}ja, i64 %JL')
        a(f'  %{pfx}cs = mul i64 %{pfx}j, {sw}')
        a(f'  %{pfx}c = sub i64 %{pfx}cs, %PL')
        if slow:
            a(f'  %{pfx}sl = icmp slt i64 %{pfx}jv, %FB')
            a(f'  %{pfx}sd = select i1 %{pfx}sl, i64 0, i64 %NFV')
            a(f'  %{pfx}si = sub i64 %{pfx}jv, %{pfx}sd')
            a(f'  %{pfx}so = mul i64 %{pfx}si, {V * len(offs)}')
            a(f'  %{pfx}mp = getelementptr i32, i32* %tab, i64 %{pfx}so')
            for n, o in enumerate(offs):
                a(f'  %{pfx}k{o}.q = getelementptr i32, i32* %{pfx}mp, i64 {V * n}')
                a(f'  %{pfx}k{o}.p = bitcast i32* %{pfx}k{o}.q to {iv}*')
                a(f'  %{pfx}k{o}.i = load {iv}, {iv}* %{pfx}k{o}.p, align 4')
                a(f'  %{pfx}k{o} = icmp slt {iv} %{pfx}k{o}.i, zeroinitializer')
        raw = {}

        def raw_load(sr, o):
            key = (sr, o)
            if key not in raw:
                nm = f"%{pfx}l{sr}_{o}"
                a(f'  {nm}.j = add i64 %{pfx}c, {o}')
                a(f'  {nm}.f = getelementptr float, float* %{pfx[0]}xr{sr}, i64 {nm}.j')
                a(f'  {nm}.p = bitcast float* {nm}.f to {vp}')
                if not slow:
                    a(f'  {nm} = load {v}, {vp} {nm}.p, align 4')
                else:
                    a(f'  {nm} = call {v} @llvm.masked.load.v8f32.p0v8f32({vp} {nm}.p, i32 4, {m} %{pfx}k{o}, '
                      f'{v} zeroinitializer)')
                raw[key] = nm
            return raw[key]

        taps = {}

        def tap(sr, kj):
            o, ph = plan[kj]
            key = (sr, o, ph)
            if key not in taps:
                if sw == 1:
                    taps[key] = raw_load(sr, o)
                else:
                    lo_, hi_ = raw_load(sr, o), raw_load(sr, o + V)
                    nm = f"%{pfx}t{sr}_{o}_{ph}"
                    idx = ", ".join(f"i32 {i}" for i in (_ODD if ph else _EVEN))
                    a(f'  {nm} = shufflevector {v} {lo_}, {v} {hi_}, {iv} <{idx}>')
                    taps[key] = nm
            return taps[key]

        for q in range(NR):
            acc = "%bv"
            for ki in range(KH):
                part = acc if ki == 0 else None
                for kj in range(KW):
                    t = ki * KW + kj
                    lv = tap(q * sh + ki * dh, kj)
                    nm = f"%{pfx}c{q}_{t}"
                    if part is None:
                        a(f'  {nm} = fmul {v} {lv}, %wv{t}')
                    else:
                        a(f'  {nm} = call {v} @llvm.fma.v8f32({v} {lv}, {v} %wv{t}, {v} {part})')
                    part = nm
                if ki > 0:
                    a(f'  %{pfx}sum{q}_{ki} = fadd {v} {acc}, {part}')
                    acc = f"%{pfx}sum{q}_{ki}"
                else:
                    acc = part
            acc = conv_act.apply_ir(a, conv_act.in_stores(relu), 8, "float", acc, f"{pfx}{q}")
            if sw == 2:
                a(f'  %{pfx}un{q} = shufflevector {v} {acc}, {v} undef, {iv} '
                  f'<{", ".join(f"i32 {i}" for i in _UNP)}>')
                acc = f"%{pfx}un{q}"
            a(f'  %{pfx}oo{q}.r = mul i64 %OW, {q}')
            a(f'  %{pfx}oo{q}.s = add i64 %oro, %{pfx}oo{q}.r')
            a(f'  %{pfx}oo{q} = add i64 %{pfx}oo{q}.s, %{pfx}j')
            a(f'  %{pfx}op{q}.f = getelementptr float, float* %ob, i64 %{pfx}oo{q}')
            a(f'  %{pfx}op{q} = bitcast float* %{pfx}op{q}.f to {vp}')
            a(f'  %{pfx}oe{q} = add i64 %{pfx}oo{q}, {V}')
            a(f'  %{pfx}ofull{q} = icmp sle i64 %{pfx}oe{q}, %o1')
            nx = f"{pfx}st{q + 1}" if q + 1 < NR else f"{pfx}vec_end"
            a(f'  br i1 %{pfx}ofull{q}, label %{pfx}sf{q}, label %{pfx}sm{q}')
            a(f'{pfx}sf{q}:')
            a(f'  store {v} {acc}, {vp} %{pfx}op{q}, align 4')
            a(f'  br label %{nx}')
            a(f'{pfx}sm{q}:')
            a(f'  call void @llvm.masked.store.v8f32.p0v8f32({v} {acc}, {vp} %{pfx}op{q}, i32 4, {m} %omk)')
            a(f'  br label %{nx}')
            if q + 1 < NR:
                a(f'{nx}:')
        a(f'{pfx}vec_end:')
        a(f'  %{pfx}jv1 = add i64 %{pfx}jv, 1')
        a(f'  %{pfx}jvc = icmp slt i64 %{pfx}jv1, {hi}')
        a(f'  br i1 %{pfx}jvc, label %{pfx}vec, label %{nxt}')

    def body(NR: int, pfx: str, head: str, tail: str):
        """NR (1 or 2) output rows from head block ``head`` to ``tail``: their input rows' bases (the zero row
        outside the input), then the slow vectors [0, FA), the fast ones [FA, FB), the slow ones [FB, NV)."""
        srows = sorted({q * sh + ki * dh for q in range(NR) for ki in range(KH)})
        a(f'{head}:')
        for sr in srows:
            a(f'  %{pfx}ih{sr} = add i64 %hs, {sr}')
            a(f'  %{pfx}iv{sr} = icmp ult i64 %{pfx}ih{sr}, %H')
            a(f'  %{pfx}io{sr} = mul i64 %{pfx}ih{sr}, %W')
            a(f'  %{pfx}ip{sr} = getelementptr float, float* %xb, i64 %{pfx}io{sr}')
            a(f'  %{pfx}xr{sr} = select i1 %{pfx}iv{sr}, float* %{pfx}ip{sr}, float* %zb')
        a(f'  br label %{pfx}Lpre')
        vloop(NR, pfx + "L", True, "0", "%FA", f"{pfx}Lpre", f"{pfx}Fpre")
        vloop(NR, pfx + "F", False, "%FA", "%FB", f"{pfx}Fpre", f"{pfx}Rpre")
        vloop(NR, pfx + "R", True, "%FB", "%NV", f"{pfx}Rpre", tail)

    body(2, "b", "row2", "row_end2")
    body(1, "a", "row1", "row_end1")
    a('row_end2:')
    a('  br label %row_end')
    a('row_end1:')
    a('  br label %row_end')
    a('row_end:')
    a('  %rstep = phi i64 [ 2, %row_end2 ], [ 1, %row_end1 ]')
    a('  %rn = add i64 %r, %rstep')
    a('  %rc = icmp slt i64 %rn, %r1')
    a('  br i1 %rc, label %row, label %unit_end')
    a('unit_end:')
    _unit_act(a, relu, 'float')
    a('  %u1 = add i64 %u, 1')
    a('  %bd1 = add i64 %bd, 1')
    a('  %bdw = icmp eq i64 %bd1, %NB')
    a('  %bdn = select i1 %bdw, i64 0, i64 %bd1')
    a('  %plw = zext i1 %bdw to i64')
    a('  %pln = add i64 %pl, %plw')
    a('  %ch1 = add i64 %ch, %plw')
    a('  %chw = icmp eq i64 %ch1, %C')
    a('  %chn = select i1 %chw, i64 0, i64 %ch1')
    a('  %uc = icmp slt i64 %u1, %gt1')
    a('  br i1 %uc, label %unit, label %claim')
    a('done:')
    a('  ret void')
    a('}')
    return "\n".join(L) + "\n"


def dir_params(H, W, OH, OW, sh, sw, pt, pl, dh, KH, KW) -> np.ndarray:
    """The direct kernel's params past _P_CTR (``_R_*``, then the slow vectors' load masks), every read checked
    in bounds: the vectors' columns j in [0, JL] (JL + 8 <= OW, or 0 where OW < 8), their loads'
    columns [j * sw - pl, + span) plain only inside [0, W) (the kernel's test), else masked to the lanes inside
    [0, W); the zero row ZW >= W floats.  Column dilation 1."""
    NV = -(-OW // PV)
    JL = max(OW - PV, 0)
    ZW = _r8(W)
    if (NV - 1) * PV < JL or JL + PV > max(OW, PV) or ZW < W:
        raise AssertionError("depthwise_native: direct kernel's params out of range")
    offs = load_offsets(KW, sw)
    SP = span(KW, sw)
    cs = [min(PV * jv, JL) * sw - pl for jv in range(NV)]
    fast = [c >= 0 and c + SP <= W for c in cs]
    FA = next((jv for jv in range(NV) if fast[jv]), NV)
    FB = next((jv for jv in range(NV - 1, -1, -1) if fast[jv]), FA - 1) + 1
    if any(fast[:FA]) or not all(fast[FA:FB]) or any(fast[FB:]) or FB < FA:
        raise AssertionError("depthwise_native: the fast vectors are not one run")
    slow = list(range(FA)) + list(range(FB, NV))
    lanes = np.arange(PV)
    tab = np.zeros((max(1, len(slow)), len(offs), PV), np.int32)
    for n, jv in enumerate(slow):
        for i, o in enumerate(offs):
            col = cs[jv] + o + lanes
            tab[n, i] = np.where((col >= 0) & (col < W), -1, 0)
    return np.concatenate([np.array([NV, JL, ZW, FA, FB], np.int64), tab.reshape(-1).view(np.int64)])
# NEE_DEPTHWISE_NATIVE=0 (or MODE[0] = "0": tests, benchmarks) keeps every depthwise conv on conv.py's other paths
MODE = [os.environ.get("NEE_DEPTHWISE_NATIVE", "1")]
# NEE_DEPTHWISE_PAD=0 (or PAD[0] = "0") keeps float32 column strides 1 / 2 on the generic kernel (comparisons)
PAD = [os.environ.get("NEE_DEPTHWISE_PAD", "1")]
# NEE_DEPTHWISE_DIRECT=0 (or DIRECT[0] = "0") keeps float32 column stride 2 on the padded-rows kernel (comparisons)
DIRECT = [os.environ.get("NEE_DEPTHWISE_DIRECT", "1")]
# the padded-rows kernel's scratch (on the running thread's stack, as gemm_driver's row epilogue's): bands of
# output rows whose input rows fit _PAD_BAND_BYTES (L1); convs whose KH input rows need more than _PAD_MAX_BYTES
# take the generic kernel
_PAD_BAND_BYTES = 24 << 10
_PAD_MAX_BYTES = 64 << 10
# one thread, ns per (output vector of 8, tap) of the padded-rows kernel (+ its fill per input vector)
_PAD_NS_TAP = 0.3
_PAD_NS_FILL = 0.5
# the direct kernel's (column stride 2: 112 x 56 x 56 -> 28 x 28 3x3 ~65 us)
_DIR_NS_TAP = 0.6
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
    ``relu`` (True, or an activation's steps: kernels/conv_act.py); top / left padding pt, pl (the bottom / right
    ones are what res's size leaves).  False (nothing written) where no kernel takes it (dtype, column stride,
    window size, layout)."""
    run = runner(x, w, res, sh, sw, pt, pl, dh, dw, relu)
    if run is None or (b is not None and (b.dtype != x.dtype or b.shape != (x.shape[1],))):
        return False
    run(x, w, b, res)
    return True


def settings() -> tuple:
    """What the launches :func:`runner` returns depend on besides the operands' layouts (thread count, switches)."""
    return threads.NUM_THREADS, MODE[0], PAD[0], DIRECT[0]


def runner(x, w, res, sh, sw, pt, pl, dh, dw, relu=False):
    """``run(x, w, b, res)``: the launch :func:`conv2d` makes for operands of these layouts (cached per layout and
    :func:`settings`), or None where conv2d would return False (no kernel, or not C-contiguous operands)."""
    relu = conv_act.norm(relu)
    key = (x.shape, w.shape, res.shape, sh, sw, pt, pl, dh, dw, relu, x.dtype.char, w.dtype.char,
           res.dtype.char) + settings()
    run = _runners.get(key)
    if run is None:
        if len(_runners) > 1024:
            _runners.clear()
        run = _runners[key] = _runner(x.shape, w.shape, res.shape, sh, sw, pt, pl, dh, dw, relu, x.dtype,
                                      w.dtype, res.dtype)
    if not run or not (x.flags.c_contiguous and w.flags.c_contiguous and res.flags.c_contiguous):
        return None
    return run


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
    P = N * C
    nt = threads.NUM_THREADS
    if dt == np.float32 and sw in (1, 2) and dw == 1 and PAD[0] != "0":
        r = _pad_runner(N, C, H, W, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw, relu, P, nt)
        if r is not None:
            return r
    V = 16 if dt == np.float32 else 8
    if dt == np.float64 and OW > _F64_MAX_OW:
        return False
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
    return _launch(kernel(dt, KH, KW, sw, relu), base, C, dt, par, nt)


def _dir_runner(C, H, W, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw, relu, P, nt):
    """The direct kernel's runner (float32, column stride 2, column dilation 1), or None where its zero row would
    not fit _PAD_MAX_BYTES or its mask table _DIR_MAX_SLOW: units of bands of a plane's output rows (whose input
    rows fit _PAD_BAND_BYTES), split over the threads as the generic kernel's."""
    if 4 * _r8(W) > _PAD_MAX_BYTES:
        return None
    q = dir_params(H, W, OH, OW, sh, sw, pt, pl, dh, KH, KW)
    NV, FA, FB = q[0], q[3], q[4]
    if FA + NV - FB > _DIR_MAX_SLOW:
        return None
    RB = max(1, min(OH, (_PAD_BAND_BYTES // (4 * W) - (KH - 1) * dh - 1) // sh + 1))
    est = P * OH * NV * KH * KW * _DIR_NS_TAP
    par = nt > 1 and est >= _PAR_NS
    if par:
        units = nt * _UNITS_PER_THREAD
        RB = min(RB, -(-OH // max(1, min(OH, -(-units // P)))))
    NB = -(-OH // RB)
    T1 = P * NB
    G = max(1, T1 // (nt * _UNITS_PER_THREAD)) if par else T1
    base = np.zeros(_P_N + len(q), np.int64)
    base[:_P_CTR] = (H, W, OH, OW, sh, pt, pl, dh, dw, C, NB, RB, G, T1)
    base[_P_N:] = q
    f = kernel_pad(KH, KW, sh, sw, dh, relu, direct=True)
    return _launch(f, base, C, np.float32, par, nt)


def _pad_runner(N, C, H, W, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw, relu, P, nt):
    """The padded-rows kernel's runner (float32, column stride 1 / 2, column dilation 1; column stride 2: the
    direct kernel's first, :func:`_dir_runner`), or None where its scratch would not fit: bands of output rows
    whose padded input rows fit _PAD_BAND_BYTES, split over the threads as the generic kernel's."""
    if sw == 2 and DIRECT[0] != "0":
        r = _dir_runner(C, H, W, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw, relu, P, nt)
        if r is not None:
            return r
    q, _ = pad_params(H, W, OH, OW, sh, sw, pt, pl, dh, KH, KW, 1)
    WR = q[0]
    RB = max(1, min(OH, (_PAD_BAND_BYTES // (4 * WR) - (KH - 1) * dh - 1) // sh + 1))
    est = P * (OH * -(-OW // PV) * KH * KW * _PAD_NS_TAP + H * -(-W // PV) * _PAD_NS_FILL)
    par = nt > 1 and est >= _PAR_NS
    if par:
        units = nt * _UNITS_PER_THREAD
        RB = min(RB, -(-OH // max(1, min(OH, -(-units // P)))))
    q, SZ = pad_params(H, W, OH, OW, sh, sw, pt, pl, dh, KH, KW, RB)
    if SZ * 4 > _PAD_MAX_BYTES:
        return None
    NB = -(-OH // RB)
    T1 = P * NB
    G = max(1, T1 // (nt * _UNITS_PER_THREAD)) if par else T1
    base = np.zeros(_Q_N, np.int64)
    base[:_P_CTR] = (H, W, OH, OW, sh, pt, pl, dh, dw, C, NB, RB, G, T1)
    base[_P_N:] = q
    f = kernel_pad(KH, KW, sh, sw, dh, relu)
    return _launch(f, base, C, np.float32, par, nt)


def _launch(f, base, C, dt, par, nt):
    """``run(x, w, b, res)``: kernel ``f`` with a fresh copy of params ``base`` (its claim counter), on the native
    workers when ``par``.  ``run.calls(x, w, b, res)`` (not on the Python pool): the launch as native_chain's list
    of one call, on a params copy of its own whose claim counter the replay resets (the kernel writes nothing
    else of its params)."""
    zero = np.zeros(C, dt)
    if par:
        from . import conv_direct
        g = conv_direct._native_parallel(f, 5, nt)
        if g is None:
            def pooled(x, w, b, res):
                p = base.copy()
                bb = zero if b is None else b
                threads.run_parallel(lambda _: f(x, w, bb, res, p), [None] * nt)
            return pooled
        caller, pre = g.direct

        def run(x, w, b, res):
            g(x, w, zero if b is None else b, res, base.copy())

        def calls(x, w, b, res):
            p = base.copy()
            fn, args, _ = native_chain.lower(caller, (*pre, x, w, zero if b is None else b, res, p))
            return [(fn, args, (p, _P_CTR))]
    else:
        def run(x, w, b, res):
            f(x, w, zero if b is None else b, res, base.copy())

        def calls(x, w, b, res):
            p = base.copy()
            return [(f, (x, w, zero if b is None else b, res, p), (p, _P_CTR))]
    run.calls = calls
    return run
