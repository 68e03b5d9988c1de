"""Max / average pooling of NCHW planes as LLVM IR kernels run on gemm_driver's native workers.

conv.py's ``_pool`` hands float32 / float64 windowed pooling (no indices; column strides 1-4) to
:func:`pool2d`; everything else (return_indices, global windows, other strides, very wide rows) stays on
conv.py's Numba kernels.

* One machine-code function per (dtype, max/avg, column stride): every size, window, row stride, padding,
  dilation and ceil_mode is a runtime parameter (``_P_*`` below), so a handful of functions (compiled once,
  ~0.1 s, cached on disk by llvm_render) serve every model.
* Separable, per output row, all in registers and one row buffer on the stack (``alloca``, filled with the
  pad value -inf / 0 once per call; only its interior is ever rewritten): the window's valid input rows
  combined column-vector by column-vector straight from the input into the buffer (the last vector a masked
  load whose lanes past the row keep the pad value), then each output vector combines its KW taps read from
  the buffer (column stride s: s vector loads, the lanes s apart gathered by s - 1 shuffles), divided by
  the window's count (average: a per-output table of divisors, as torch divides), stored (the last vector
  masked).  Rows of a window outside the input are skipped; columns outside it read the pad value.
* Max: ``v > acc or v is NaN`` (torch's NaN propagation; order-free, so the separable order gives torch's
  values).  Average: sums in row-then-column order (the rounding of a different summation order).
* Threads: units of (plane, band of output rows) claimed in runs from an atomic counter in the params by
  every thread calling the kernel (conv_direct's scheme: a worker that starts late finds the work taken).
  Large calls go through ``gemm_driver.call_plan`` (no Python pool hand-off), small ones run on the calling
  thread.
* Bounds: every read is checked in Python when a shape's plan is built: input rows are clipped to [0, H) in
  the kernel, column loads stay inside their row (masked tail), buffer reads stay below its length.
"""
from __future__ import annotations

import os

import numpy as np

from .. import threads
from .conv_direct import builtin, claim_ir, gather_lanes_ir, plane_band_ir, source_key

VERSION = "1"
STRIDES = (1, 2, 3, 4)          # column strides with a kernel (others: conv.py's Numba kernel)
MAX_ROW_BYTES = 256 << 10       # the row buffer lives on the stack of the calling / worker threads

# params (int64): input H, W; output OH, OW; window KH, KW; row stride; pads top, left; dilations;
# row bands per plane, rows per band, units per claim, units, row buffer length (a multiple of the
# vector), rows per batch (BR row buffers), input elements (XN: all planes), the claim counter
(_P_H, _P_W, _P_OH, _P_OW, _P_KH, _P_KW, _P_SH, _P_PH, _P_PW, _P_DH, _P_DW, _P_NB, _P_RB, _P_G, _P_T1, _P_TL,
 _P_BR, _P_XN, _P_CTR, _P_N) = range(20)
_NAMES = ("H", "W", "OH", "OW", "KH", "KW", "SH", "PH", "PW", "DH", "DW", "NB", "RB", "G", "T1", "TL", "BR", "XN")

_kernels: dict = {}


def _render(tname: str, is_max: bool, sw: int) -> str:
    V = 16 if tname == "float" else 8
    sfx = f"v{V}f{32 if tname == 'float' else 64}"
    v = f"<{V} x {tname}>"
    vp = f"{v}*"
    fill = "0xFFF0000000000000" if is_max else "0.0"     # -inf (LLVM writes float constants as doubles)
    L = []
    a = L.append
    a(f'declare {v} @llvm.masked.load.{sfx}.p0{sfx}({vp}, i32, <{V} x i1>, {v})')
    a(f'declare void @llvm.masked.store.{sfx}.p0{sfx}({v}, {vp}, i32, <{V} x i1>)')
    a(f'define void @"kernel"({tname}* noalias %x, {tname}* noalias %out, {tname}* noalias %dv, i64* noalias %p) {{')
    a('entry:')
    for i, nm in enumerate(_NAMES):
        a(f'  %{nm}.p = getelementptr i64, i64* %p, i64 {i}')
        a(f'  %{nm} = load i64, i64* %{nm}.p')
    a(f'  %ctr = getelementptr i64, i64* %p, i64 {_P_CTR}')
    a(f'  %fs.0 = insertelement {v} undef, {tname} {fill}, i32 0')
    a(f'  %fillv = shufflevector {v} %fs.0, {v} undef, <{V} x i32> zeroinitializer')
    lanes = ", ".join(f"i64 {i}" for i in range(V))
    a(f'  %lanes = add <{V} x i64> <{lanes}>, zeroinitializer')
    a('  %TLB = mul i64 %TL, %BR')
    a(f'  %tmp = alloca {tname}, i64 %TLB, align 64')
    a('  %HW = mul i64 %H, %W')
    a('  %OHW = mul i64 %OH, %OW')
    a('  %DHW = mul i64 %DH, %W')
    a('  %dh1 = icmp eq i64 %DH, 1')
    a(f'  %Wf = and i64 %W, {-V}')              # columns in whole vectors
    a(f'  %OWf = and i64 %OW, {-V}')
    a('  br label %fill')
    # the row buffer: pad value everywhere (TL a multiple of V)
    a('fill:')
    a('  %fi = phi i64 [ 0, %entry ], [ %fi1, %fill ]')
    a(f'  %fp.f = getelementptr {tname}, {tname}* %tmp, i64 %fi')
    a(f'  %fp = bitcast {tname}* %fp.f to {vp}')
    a(f'  store {v} %fillv, {vp} %fp, align 4')
    a(f'  %fi1 = add i64 %fi, {V}')
    a('  %fc = icmp slt i64 %fi1, %TLB')
    a('  br i1 %fc, label %fill, label %claim')
    # ---- claim a run of units [gt0, gt1)
    claim_ir(a, 'unit')
    plane_band_ir(a, tname)
    a('  %rany = icmp slt i64 %r0, %r1')
    a('  br i1 %rany, label %batch, label %unit_end')
    # ---- a batch of output rows [b0, b1): their vertical passes, then their horizontal ones (a load right
    # after the stores it overlaps, unaligned, would wait for them: store forwarding fails)
    a('batch:')
    a('  %b0 = phi i64 [ %r0, %unit ], [ %b1, %hrow_end ]')
    a('  %b1a = add i64 %b0, %BR')
    a('  %b1s = icmp slt i64 %b1a, %r1')
    a('  %b1 = select i1 %b1s, i64 %b1a, i64 %r1')
    a('  br label %row')
    # ---- one output row's vertical pass
    a('row:')
    a('  %r = phi i64 [ %b0, %batch ], [ %rn, %row_end ]')
    a('  %rb = sub i64 %r, %b0')
    a('  %tro = mul i64 %rb, %TL')
    a('  %tri = add i64 %tro, %PW')
    a(f'  %tmpi = getelementptr {tname}, {tname}* %tmp, i64 %tri')
    a('  %hs0 = mul i64 %r, %SH')
    a('  %hs = sub i64 %hs0, %PH')
    # valid taps [k0, k1): hs + k * DH in [0, H)
    a('  %hneg = icmp slt i64 %hs, 0')
    a('  %nh = sub i64 0, %hs')
    a('  %hr = sub i64 %H, %hs')             # rows left from hs (> 0 when any is valid)
    a('  %hrp = icmp sgt i64 %hr, 0')
    a('  br i1 %dh1, label %kd_one, label %kd_div')
    a('kd_div:')                              # dilation > 1: ceil divisions (a 64-bit udiv: ~40 cycles)
    a('  %k0n = add i64 %nh, %DH')
    a('  %k0m = sub i64 %k0n, 1')
    a('  %k0d = udiv i64 %k0m, %DH')
    a('  %k1n = add i64 %hr, %DH')
    a('  %k1m = sub i64 %k1n, 1')
    a('  %k1dd = udiv i64 %k1m, %DH')
    a('  br label %kd_one')
    a('kd_one:')
    a('  %k0v = phi i64 [ %nh, %row ], [ %k0d, %kd_div ]')
    a('  %k1d = phi i64 [ %hr, %row ], [ %k1dd, %kd_div ]')
    a('  %k0 = select i1 %hneg, i64 %k0v, i64 0')
    a('  %k1c = icmp slt i64 %k1d, %KH')
    a('  %k1e = select i1 %k1c, i64 %k1d, i64 %KH')
    a('  %k1 = select i1 %hrp, i64 %k1e, i64 0')
    a('  %nk = sub i64 %k1, %k0')
    a('  %kv = icmp sgt i64 %nk, 0')
    a('  %ih0a = mul i64 %k0, %DH')
    a('  %ih0 = add i64 %hs, %ih0a')
    a('  %ih0c = select i1 %kv, i64 %ih0, i64 0')
    a('  %xro = mul i64 %ih0c, %W')
    a(f'  %xr = getelementptr {tname}, {tname}* %xb, i64 %xro')
    a('  %colf = icmp slt i64 0, %Wf')
    a('  br i1 %colf, label %vc, label %vt_pre')

    def comb(acc, val, nm):
        if is_max:
            a(f'  %{nm}.gt = fcmp ogt {v} {val}, {acc}')
            a(f'  %{nm}.nan = fcmp uno {v} {val}, zeroinitializer')
            a(f'  %{nm}.c = or <{V} x i1> %{nm}.gt, %{nm}.nan')
            a(f'  %{nm} = select <{V} x i1> %{nm}.c, {v} {val}, {v} {acc}')
        else:
            a(f'  %{nm} = fadd {v} {acc}, {val}')
        return f"%{nm}"

    # vertical pass, whole vectors: tmp[PW + c ..] = comb over valid rows of x[row][c ..]
    a('vc:')
    a('  %c = phi i64 [ 0, %kd_one ], [ %c1, %vc_end ]')
    a(f'  %xc = getelementptr {tname}, {tname}* %xr, i64 %c')
    a('  br i1 %kv, label %vk, label %vc_end')
    a('vk:')
    a('  %ki = phi i64 [ 0, %vc ], [ %ki1, %vk ]')
    a(f'  %vacc = phi {v} [ %fillv, %vc ], [ %vnew, %vk ]')
    a('  %kio = mul i64 %ki, %DHW')
    a(f'  %xk.f = getelementptr {tname}, {tname}* %xc, i64 %kio')
    a(f'  %xk = bitcast {tname}* %xk.f to {vp}')
    a(f'  %xv = load {v}, {vp} %xk, align 4')
    comb("%vacc", "%xv", "vnew")
    a('  %ki1 = add i64 %ki, 1')
    a('  %kic = icmp slt i64 %ki1, %nk')
    a('  br i1 %kic, label %vk, label %vc_end')
    a('vc_end:')
    a(f'  %vres = phi {v} [ %fillv, %vc ], [ %vnew, %vk ]')
    a(f'  %tc.f = getelementptr {tname}, {tname}* %tmpi, i64 %c')
    a(f'  %tc = bitcast {tname}* %tc.f to {vp}')
    a(f'  store {v} %vres, {vp} %tc, align 4')
    a(f'  %c1 = add i64 %c, {V}')
    a('  %cc = icmp slt i64 %c1, %Wf')
    a('  br i1 %cc, label %vc, label %vt_pre')
    # the tail vector (W % V columns): masked loads, the lanes past the row the pad value
    a('vt_pre:')
    a('  %tl = sub i64 %W, %Wf')
    a('  %tany = icmp sgt i64 %tl, 0')
    a('  br i1 %tany, label %vt, label %row_end')
    a('vt:')
    a(f'  %tlb.0 = insertelement <{V} x i64> undef, i64 %tl, i32 0')
    a(f'  %tlb = shufflevector <{V} x i64> %tlb.0, <{V} x i64> undef, <{V} x i32> zeroinitializer')
    a(f'  %tmk = icmp slt <{V} x i64> %lanes, %tlb')
    a(f'  %xtc = getelementptr {tname}, {tname}* %xr, i64 %Wf')
    # the tail's whole vectors lie inside x (the next row's or plane's elements in the lanes past the row): plain
    # loads and a select rather than masked loads (the last rows of the last plane: masked)
    a('  %tx0 = add i64 %xbo, %xro')
    a('  %tx1 = add i64 %tx0, %Wf')
    a('  %tkn = sub i64 %nk, 1')
    a('  %tkl = mul i64 %tkn, %DHW')
    a('  %tx2 = add i64 %tx1, %tkl')
    a(f'  %tx3 = add i64 %tx2, {V}')
    a('  %tin = icmp sle i64 %tx3, %XN')
    a('  br i1 %kv, label %tk, label %vt_end')
    a('tk:')
    a('  %tki = phi i64 [ 0, %vt ], [ %tki1, %tkj ]')
    a(f'  %tacc = phi {v} [ %fillv, %vt ], [ %tnew, %tkj ]')
    a('  %tkio = mul i64 %tki, %DHW')
    a(f'  %txk.f = getelementptr {tname}, {tname}* %xtc, i64 %tkio')
    a(f'  %txk = bitcast {tname}* %txk.f to {vp}')
    a('  br i1 %tin, label %tkp, label %tkm')
    a('tkp:')
    a(f'  %txf = load {v}, {vp} %txk, align 4')
    a(f'  %txs = select <{V} x i1> %tmk, {v} %txf, {v} %fillv')
    a('  br label %tkj')
    a('tkm:')
    a(f'  %txm = call {v} @llvm.masked.load.{sfx}.p0{sfx}({vp} %txk, i32 4, <{V} x i1> %tmk, {v} %fillv)')
    a('  br label %tkj')
    a('tkj:')
    a(f'  %txv = phi {v} [ %txs, %tkp ], [ %txm, %tkm ]')
    comb("%tacc", "%txv", "tnew")
    a('  %tki1 = add i64 %tki, 1')
    a('  %tkic = icmp slt i64 %tki1, %nk')
    a('  br i1 %tkic, label %tk, label %vt_end')
    a('vt_end:')
    a(f'  %tres = phi {v} [ %fillv, %vt ], [ %tnew, %tkj ]')
    a(f'  %ttc.f = getelementptr {tname}, {tname}* %tmpi, i64 %Wf')
    a(f'  %ttc = bitcast {tname}* %ttc.f to {vp}')
    a(f'  store {v} %tres, {vp} %ttc, align 4')
    a('  br label %row_end')
    a('row_end:')
    a('  %rn = add i64 %r, 1')
    a('  %rc = icmp slt i64 %rn, %b1')
    a('  br i1 %rc, label %row, label %hz_pre')
    # horizontal passes: out[r][j ..] = comb over kj of tmp[(j + lane) * sw + kj * DW]
    a('hz_pre:')
    a('  %hr0 = phi i64 [ %b0, %row_end ], [ %hrn, %hrow_end0 ]')
    a('  %hrb = sub i64 %hr0, %b0')
    a('  %htro = mul i64 %hrb, %TL')
    a(f'  %trow = getelementptr {tname}, {tname}* %tmp, i64 %htro')
    a('  %orow = mul i64 %hr0, %OW')
    a(f'  %orp = getelementptr {tname}, {tname}* %ob, i64 %orow')
    a(f'  %dvr = getelementptr {tname}, {tname}* %dv, i64 %orow')
    a('  br label %hj')

    def strided(base, nm):
        """value: lanes tmp[base + i * sw], i < V."""
        loads = []
        for m in range(sw):
            a(f'  %{nm}.o{m} = add i64 {base}, {m * V}')
            a(f'  %{nm}.p{m}.f = getelementptr {tname}, {tname}* %trow, i64 %{nm}.o{m}')
            a(f'  %{nm}.p{m} = bitcast {tname}* %{nm}.p{m}.f to {vp}')
            a(f'  %{nm}.l{m} = load {v}, {vp} %{nm}.p{m}, align 4')
            loads.append(f"%{nm}.l{m}")
        return gather_lanes_ir(a, loads, sw, V, v, nm)

    a('hj:')
    a('  %j = phi i64 [ 0, %hz_pre ], [ %j1, %hj_end ]')
    a(f'  %jb = mul i64 %j, {sw}')
    h0 = strided("%jb", "h0")
    a('  %hmore = icmp sgt i64 %KW, 1')
    a('  br i1 %hmore, label %hk, label %hk_end')
    a('hk:')
    a('  %kj = phi i64 [ 1, %hj ], [ %kj1, %hk ]')
    a(f'  %hacc = phi {v} [ {h0}, %hj ], [ %hnew, %hk ]')
    a('  %kjo = mul i64 %kj, %DW')
    a('  %hbase = add i64 %jb, %kjo')
    hv = strided("%hbase", "hv")
    comb("%hacc", hv, "hnew")
    a('  %kj1 = add i64 %kj, 1')
    a('  %kjc = icmp slt i64 %kj1, %KW')
    a('  br i1 %kjc, label %hk, label %hk_end')
    a('hk_end:')
    a(f'  %hres = phi {v} [ {h0}, %hj ], [ %hnew, %hk ]')
    a(f'  %op.f = getelementptr {tname}, {tname}* %orp, i64 %j')
    a(f'  %op = bitcast {tname}* %op.f to {vp}')
    a(f'  %dvp.f = getelementptr {tname}, {tname}* %dvr, i64 %j')
    a(f'  %dvp = bitcast {tname}* %dvp.f to {vp}')
    # a whole-vector store where the vector ends inside this band's output rows (lanes past the row land on the
    # next rows' outputs, which this thread writes later): masked stores (slow on AMD cores) only at a band's end
    a('  %jend0 = add i64 %orow, %j')
    a(f'  %jend = add i64 %jend0, {V}')
    a('  %bend = mul i64 %r1, %OW')
    a('  %jfull = icmp sle i64 %jend, %bend')
    a('  br i1 %jfull, label %hst, label %hmask')
    a('hst:')
    if is_max:
        a(f'  store {v} %hres, {vp} %op, align 4')
    else:
        a(f'  %dvv = load {v}, {vp} %dvp, align 4')
        a(f'  %hq = fdiv {v} %hres, %dvv')
        a(f'  store {v} %hq, {vp} %op, align 4')
    a('  br label %hj_end')
    a('hmask:')
    a('  %orl = sub i64 %OW, %j')
    a(f'  %orb.0 = insertelement <{V} x i64> undef, i64 %orl, i32 0')
    a(f'  %orb = shufflevector <{V} x i64> %orb.0, <{V} x i64> undef, <{V} x i32> zeroinitializer')
    a(f'  %omk = icmp slt <{V} x i64> %lanes, %orb')
    if is_max:
        val = "%hres"
    else:
        one = "1.0"
        a(f'  %on.0 = insertelement {v} undef, {tname} {one}, i32 0')
        a(f'  %onev = shufflevector {v} %on.0, {v} undef, <{V} x i32> zeroinitializer')
        a(f'  %dvm = call {v} @llvm.masked.load.{sfx}.p0{sfx}({vp} %dvp, i32 4, <{V} x i1> %omk, {v} %onev)')
        a(f'  %hqm = fdiv {v} %hres, %dvm')
        val = "%hqm"
    a(f'  call void @llvm.masked.store.{sfx}.p0{sfx}({v} {val}, {vp} %op, i32 4, <{V} x i1> %omk)')
    a('  br label %hj_end')
    a('hj_end:')
    a(f'  %j1 = add i64 %j, {V}')
    a('  %jc = icmp slt i64 %j1, %OW')
    a('  br i1 %jc, label %hj, label %hrow_end0')
    a('hrow_end0:')
    a('  %hrn = add i64 %hr0, 1')
    a('  %hrc = icmp slt i64 %hrn, %b1')
    a('  br i1 %hrc, label %hz_pre, label %hrow_end')
    a('hrow_end:')
    a('  %bc = icmp slt i64 %b1, %r1')
    a('  br i1 %bc, label %batch, label %unit_end')
    a('unit_end:')
    a('  %u1 = add i64 %u, 1')
    a('  %uc = icmp slt i64 %u1, %gt1')
    a('  br i1 %uc, label %unit, label %claim')
    a('done:')
    a('  ret void')
    a('}')
    return "\n".join(L) + "\n"


def kernel(dt: np.dtype, is_max: bool, sw: int):
    """The builtin ``f(x, out, dv, params)`` for (dtype, max / average, column stride sw); compiled once per
    process (machine code cached on disk by llvm_render)."""
    k = (dt.char, is_max, sw)
    f = _kernels.get(k)
    if f is not None:
        return f
    tname = "float" if dt == np.float32 else "double"
    return builtin(_kernels, k, f"pool{'max' if is_max else 'avg'}{tname[0]}{sw}",
                   f"{source_key(__file__)}|{tname}|{is_max}|{sw}", lambda: _render(tname, is_max, sw), 4)


_avail = [None]


def available() -> bool:
    """llvmlite with a native target (the kernels are plain LLVM vectors: any x86-64 / AArch64 host)."""
    if _avail[0] is None:
        try:
            from .. import llvm_render
            llvm_render._init()
            _avail[0] = True
        except Exception:   # noqa: BLE001 - no llvmlite / no native target: the Numba kernels run
            _avail[0] = False
    return _avail[0]


# NEE_POOL_NATIVE=0 (or MODE[0] = "0": tests, benchmarks) keeps every pool on conv.py's Numba kernels
MODE = [os.environ.get("NEE_POOL_NATIVE", "1")]
# estimated single-thread ns from which a call is split over the native workers (a wake-up costs a few us)
_PAR_NS = 25000.0
_UNITS_PER_THREAD = 8
_BATCH_MIN = 2
_BATCH_ELEMS = 512
_plans: dict = {}


class _Plan:
    __slots__ = ("OH", "OW", "P", "base", "dv", "est")


def _plan(P, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip, div, dt, nt):
    key = (P, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip, div, dt.char, nt)
    pl = _plans.get(key)
    if pl is not None:
        return pl
    V = 16 if dt == np.float32 else 8
    nov = -(-OW // V)
    TL = max(pw + -(-W // V) * V, nov * V * sw + (KW - 1) * dw)
    TL = -(-TL // V) * V
    # every buffer read: vertical stores at PW + c < PW + ceil(W / V) * V; horizontal loads below
    # (nov - 1) * V * sw + (KW - 1) * dw + sw * V
    if pw + -(-W // V) * V > TL or (nov - 1) * V * sw + (KW - 1) * dw + sw * V > TL:
        raise AssertionError("pool_native: row buffer too short")
    if TL * dt.itemsize * _BATCH_MIN > MAX_ROW_BYTES:
        pl = None
    else:
        # work (one thread, float32; measured 22-153 us on the light models' pools): ~0.06 ns per input element
        # read per window row, ~0.08 ns per output tap, ~8 ns per output row
        est = P * (0.06 * OH * W * min(KH, H) + 0.08 * OH * OW * KW + 8.0 * OH) * (2 if dt == np.float64 else 1)
        par = nt > 1 and est >= _PAR_NS
        if par:
            units = nt * _UNITS_PER_THREAD
            NB = max(1, min(OH, -(-units // P)))      # row bands per plane when there are few planes
            RB = -(-OH // NB)
            NB = -(-OH // RB)
            T1 = P * NB
            G = max(1, T1 // units)
        else:
            NB, RB, T1 = 1, OH, P
            G = T1
        # rows per batch: enough row buffers that the first one's stores are done when it is read
        BR = max(1, min(RB, max(_BATCH_MIN, -(-_BATCH_ELEMS // TL)), MAX_ROW_BYTES // (TL * dt.itemsize)))
        base = np.zeros(_P_N, np.int64)
        base[:_P_CTR] = (H, W, OH, OW, KH, KW, sh, ph, pw, dh, dw, NB, RB, G, T1, TL, BR, P * H * W)
        pl = _Plan()
        pl.base, pl.est, pl.OH, pl.OW, pl.P = base, (nt if par else 1), OH, OW, P
        if is_max:
            pl.dv = np.ones(1, dt)
        elif div:
            pl.dv = np.full(OH * OW, div, dt)
        else:
            def count(n, K, s, pad, On):
                st = np.arange(On) * s - pad
                en = np.minimum(st + K, n + pad)
                return (en - st) if cip else (np.minimum(en, n) - np.maximum(st, 0))
            pl.dv = np.outer(count(H, KH, sh, ph, OH), count(W, KW, sw, pw, OW)).astype(dt).reshape(-1)
    if len(_plans) > 1024:
        _plans.clear()
    _plans[key] = pl
    return pl


def pool2d(x, res, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip=False, div=0) -> bool:
    """res (N, C, OH, OW) = max / average pooling of x (N, C, H, W) (C-contiguous, float32 / float64, same
    dtype); ``cip``: count_include_pad, ``div``: divisor_override (0: none).  False (nothing written) where
    no kernel takes it (other dtypes or column strides, rows too wide for the stack buffer)."""
    key = (x.shape, res.shape, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip, div, x.dtype.char, res.dtype.char,
           threads.NUM_THREADS, MODE[0])
    run = _runners.get(key)
    if run is None:
        if len(_runners) > 1024:
            _runners.clear()
        run = _runners[key] = _runner(x.shape, res.shape, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip, div,
                                      x.dtype, res.dtype)
    if not run or not (x.flags.c_contiguous and res.flags.c_contiguous):
        return False
    run(x, res)
    return True


_runners: dict = {}


def _runner(xs, rs, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip, div, dt, rdt):
    """``run(x, res)`` for one pooling shape, or False where no kernel takes it."""
    if (MODE[0] == "0" or dt not in (np.float32, np.float64) or rdt != dt or sw not in STRIDES
            or not available() or min(KH, KW, sh, sw, dh, dw) < 1 or min(ph, pw) < 0 or len(xs) != 4
            or len(rs) != 4):
        return False
    N, C, H, W = xs
    OH, OW = rs[2], rs[3]
    if rs[:2] != (N, C) or min(H, W, OH, OW) < 1 or (OH - 1) * sh - ph >= H or (OW - 1) * sw - pw >= W:
        return False
    nt = threads.NUM_THREADS
    pl = _plan(N * C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip, div, dt, nt)
    if pl is None:
        return False
    f = kernel(dt, is_max, sw)
    base, dv = pl.base, pl.dv
    if pl.est > 1:
        from . import conv_direct
        g = conv_direct._native_parallel(f, 4, pl.est)
        if g is not None:
            return lambda x, res: g(x, res, dv, base.copy())
        n = pl.est

        def pooled(x, res):
            p = base.copy()
            threads.run_parallel(lambda _: f(x, res, dv, p), [None] * n)
        return pooled
    return lambda x, res: f(x, res, dv, base.copy())


def bind_pool(is_max, attrs, out, ins):
    """``f(outs, ins)`` doing conv.py's max_pool2d / avg_pool2d kernel (no indices) for C-contiguous float32 /
    float64 arrays of these layouts, looked up once (a compiled graph's step: jit/executable.py through
    nn.bind_step; False: the thread count or MODE changed), or None where the kernel takes another path (its
    Numba kernels, copies): global windows run conv._pool_global over the planes, the rest this module's
    runner."""
    if len(ins) != 1:
        return None
    x = ins[0]
    dt = x.dtype
    if dt not in (np.float32, np.float64) or out.dtype != dt or x.ndim != 4 or out.ndim != 4 \
            or not x.flags.c_contiguous or not out.flags.c_contiguous or not out.flags.writeable \
            or np.may_share_memory(out, x):
        return None
    try:
        KH, KW = attrs["kernel_size"]
        sh, sw = attrs["stride"]
        ph, pw = attrs["padding"]
        dh, dw = attrs["dilation"] if is_max else (1, 1)
        cip = False if is_max else bool(attrs["count_include_pad"])
        div = 0 if is_max else int(attrs["divisor_override"] or 0)
    except (KeyError, TypeError, ValueError):
        return None
    N, C, H, W = x.shape
    nt0, mode0 = threads.NUM_THREADS, MODE[0]
    if ph == pw == 0 and KH == H and KW == W and (dh == 1 or KH == 1) and (dw == 1 or KW == 1):
        # conv._pool's global windows: one reduction per plane
        from . import conv
        P, n = N * C, H * W
        if P < 1 or out.size != P:
            return None
        dv = np.full(1, div or n, dt)
        g = conv._pool_global
        if 0.3 * x.size + 20 * P < conv._PLANES_PAR_NS or nt0 <= 1 or P <= 1:
            def f(outs, ins):
                if threads.NUM_THREADS != nt0:
                    return False
                g(ins[0].reshape(-1), outs[0].reshape(-1), n, is_max, dv, 0, P)
                return True
            return f
        chunks = threads.split(P, 2 * nt0)

        def f(outs, ins):
            if threads.NUM_THREADS != nt0:
                return False
            xf, of = ins[0].reshape(-1), outs[0].reshape(-1)
            threads.run_parallel(lambda c: g(xf, of, n, is_max, dv, c[0], c[1]), chunks)
            return True
        return f
    key = (x.shape, out.shape, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip, div, dt.char, dt.char, nt0, mode0)
    run = _runners.get(key)
    if run is None:
        run = _runner(x.shape, out.shape, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip, div, dt, dt)
    if not run:
        return None

    def f(outs, ins):
        if threads.NUM_THREADS != nt0 or MODE[0] != mode0:
            return False
        run(ins[0], outs[0])
        return True
    return f
