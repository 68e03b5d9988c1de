"""Max / average pooling of NCHW planes as LLVM IR kernels run on gemm_driver's native workers.

conv.py's ``_pool`` hands float32 / float64 windowed pooling (no indices; column strides 1-4) to
:func:`pool2d`; everything else (return_indices, global windows, other strides, very wide rows) stays on
conv.py's Numba kernels.

* One machine-code function per (dtype, max/avg, column stride): every size, window, row stride, padding,
  dilation and ceil_mode is a runtime parameter (``_P_*`` below), so a handful of functions (compiled once,
  ~0.1 s, cached on disk by llvm_render) serve every model.  Windows up to 3x3 with dilation 1 (the CNNs'
  pools) get their own function per window (``fixed_window``): the vertical pass unrolled for each count of
  valid window rows (a switch per row; the row's count and first row read from a table after the params,
  ``_row_table``), the horizontal taps unrolled, each group of sw taps sharing its sw loads (column stride 2:
  combined in the lane order of one in-lane shuffle per 256 bits and put back in order once), and planes whose
  output rows fit in half a vector on one-register vectors (``narrow``: 7x7 outputs).  Where no output reads
  the row buffer past its row (``_P_RP`` 0), the row's tail vector is a whole one (plain loads, no select).
* Separable, per output row, all in registers and one row buffer on the stack (``alloca``, filled with the
  pad value -inf / 0 once per call; only its interior is ever rewritten, and with ``_P_RP`` 0 the lanes up to
  the row's last whole vector, which no output reads): the window's valid input rows
  combined column-vector by column-vector straight from the input into the buffer (the last vector a masked
  load whose lanes past the row keep the pad value), then each output vector combines its KW taps read from
  the buffer (column stride s: s vector loads, the lanes s apart gathered by s - 1 shuffles), divided by
  the window's count (average: a per-output table of divisors, as torch divides), stored (masked only where
  the vector would end past the output rows of the thread's claimed run of units: the lanes past a row land on
  rows the same thread writes later).  Rows of a window outside the input are skipped; columns outside it read
  the pad value.
* Register kernel (``reg``: fixed windows at column strides 1-2, max and average pools; ``NEE_POOL_REG=max``: max
  pools only, ``NEE_POOL_REG=0``: the row-buffer kernels above): no row buffer.  Per output vector of V
  outputs, the NV column vectors its windows span (``reg_vectors``: 3 for 3x3/2, 2 for 3x3/1 and 2x2/2) are each
  combined over the window's rows straight from the input with masked loads (the lanes outside the row [0, W)
  the pad value: no read outside the row, no per-row tail logic; the masks, one per output vector and column
  vector, in a table after the row table, ``_reg_table``), the taps gathered from them in registers (stride 1:
  lane shifts; stride 2: the even / odd lanes of two vectors, one vpermt2ps each on AVX-512, the third tap the
  even lanes moved down by one with the third vector's first), combined in the row-buffer kernels' order (the
  same values, the same NaN of a window), stored whole (masked at a claimed run's end).  The last column vector
  is the next output vector's first (carried in a register).  Rows are taken in pairs where both windows are
  whole (interior rows) and the second row's stores end inside the run (the input rows the two windows share
  loaded once, one row's overhead for two; output vectors from the last down, the carried vector the next lower
  one's last: the first row's last vector spills onto the second row's first outputs, stored after it), each
  iteration prefetching the next pair's new input rows (from L3: 10-18% on 3 MB inputs); rows of one output
  vector (OW <= V: 27x27/2, 13x13/1, 7x7...) go in groups of ``GR`` whole windows (every input row the group
  reads loaded once, only the column vectors inside the row: one or two); other rows (edges, a run's last rows)
  one by one (the masks, the store checked per output vector).  Pairs and groups serve the kernel's row stride
  (``reg_rsh``: one kernel per row stride 1 or 2, ~0.1-0.17 s to compile; other strides: rows one by one).  Max pairs and groups first run without the NaN fix-up
  (``v > acc ? v : acc``: one maxps per combination instead of three instructions) with every input checked
  (masked ``cmpordps`` per two rows, ANDed), and are redone exactly (pairs) or row by row (groups) where one is
  NaN: NaN-free inputs get the same bits, inputs with NaN the fix-up's.
* Max: ``v > acc or v is NaN`` (torch's NaN propagation; order-free, so the separable order gives torch's
  values), written as a max (``v > acc ? v : acc``: x86's maxps) then the NaN lanes of v (a ``freeze`` between
  keeps instcombine from folding the two selects back into one 4-instruction select).  Average: sums in
  row-then-column order (the rounding of a different summation order).
* Threads: units of (plane, band of output rows) claimed in runs from an atomic counter in the params by
  every thread calling the kernel (conv_direct's scheme: a worker that starts late finds the work taken).
  Large calls go through ``gemm_driver.call_plan`` (no Python pool hand-off), small ones run on the calling
  thread.
* Bounds: every read is checked in Python when a shape's plan is built: input rows are clipped to [0, H) in
  the kernel, column loads stay inside their row (masked tail) or, where the row's tail vectors end inside x
  (checked per row and plane in the kernel: the row table's tail end), inside x; buffer reads stay below its
  length.  The register kernel reads the input only through masked loads whose lanes lie inside the row
  (tests/test_pool_register.py runs it on inputs between unmapped pages); its prefetches (hints: no fault) may
  name lines past the plane.
"""
from __future__ import annotations

import os

import numpy as np

from .. import native_chain, threads
from .conv_direct import builtin, claim_ir, source_key

VERSION = "1"
STRIDES = (1, 2, 3, 4)          # column strides with a kernel (others: conv.py's Numba kernel)
FIXED_MAX = 3                   # windows up to 3x3 (dilation 1) get a kernel with their taps unrolled
MAX_ROW_BYTES = 256 << 10       # the row buffer lives on the stack of the calling / worker threads

# params (int64): input H, W; output OH, OW; window KH, KW; row stride; pads top, left; dilations;
# row bands per plane, rows per band, units per claim, units, row buffer length (a multiple of the
# vector), rows per batch (BR row buffers), input elements (XN: all planes), whether some output reads the
# row buffer past its row (RP: the right padding, or ceil_mode's last window), the claim counter
(_P_H, _P_W, _P_OH, _P_OW, _P_KH, _P_KW, _P_SH, _P_PH, _P_PW, _P_DH, _P_DW, _P_NB, _P_RB, _P_G, _P_T1, _P_TL,
 _P_BR, _P_XN, _P_RP, _P_CTR, _P_N) = range(21)
_NAMES = ("H", "W", "OH", "OW", "KH", "KW", "SH", "PH", "PW", "DH", "DW", "NB", "RB", "G", "T1", "TL", "BR", "XN",
          "RP")

_kernels: dict = {}


def _gather_phase(a, loads, sw, m, V, v, nm):
    """Lanes i * sw + m (i < V) of the concatenated vector loads ``loads`` (sw of them, m < sw): sw - 1
    two-source shuffles named ``%nm.s<t>``; returns the value holding them."""
    if sw == 1:
        return loads[0]
    src = [((i * sw + m) // V, (i * sw + m) % V) for i in range(V)]
    cur = loads[0]
    have = set()
    for t in range(1, sw):
        idx = []
        for i in range(V):
            s, lane = src[i]
            if s == t:
                idx.append(f"i32 {V + lane}")
            elif t == 1 and s == 0:
                idx.append(f"i32 {lane}")
            elif i in have:
                idx.append(f"i32 {i}")
            else:
                idx.append("i32 undef")
        a(f'  %{nm}.s{t} = shufflevector {v} {cur}, {v} {loads[t]}, <{V} x i32> <{", ".join(idx)}>')
        cur = f"%{nm}.s{t}"
        have |= {i for i in range(V) if src[i][0] <= t}
    return cur


def _render(tname: str, is_max: bool, sw: int, ks=None, V: int = 0, reg: bool = False) -> str:
    """The kernel's IR: column stride ``sw``; ``ks``: None (every window size and dilation a runtime parameter)
    or (KH, KW) fixed with dilations 1 (the vertical pass unrolled for each count of valid rows 1..KH, the
    horizontal taps unrolled, each group of sw taps sharing its sw loads)."""
    V = V or (16 if tname == "float" else 8)
    sfx = f"v{V}f{32 if tname == 'float' else 64}"
    v = f"<{V} x {tname}>"
    vp = f"{v}*"
    fill = "0xFFF0000000000000" if is_max else "0.0"     # -inf (LLVM writes float constants as doubles)
    L = []
    a = L.append
    a(f'declare {v} @llvm.masked.load.{sfx}.p0{sfx}({vp}, i32, <{V} x i1>, {v})')
    a(f'declare void @llvm.masked.store.{sfx}.p0{sfx}({v}, {vp}, i32, <{V} x i1>)')
    if reg:
        a('declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)')
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
    if not reg:
        a('  %TLB = mul i64 %TL, %BR')
        a(f'  %tmp = alloca {tname}, i64 %TLB, align 64')
    a('  %HW = mul i64 %H, %W')
    a('  %OHW = mul i64 %OH, %OW')
    a('  %DHW = mul i64 %DH, %W')
    a('  %dh1 = icmp eq i64 %DH, 1')
    a(f'  %Wf = and i64 %W, {-V}')              # columns in whole vectors
    a('  %colf = icmp slt i64 0, %Wf')
    a('  %nb1 = icmp eq i64 %NB, 1')
    a(f'  %Wc0 = add i64 %W, {V - 1}')
    a(f'  %Wc = and i64 %Wc0, {-V}')            # columns in vectors, the tail's one whole
    a('  %norp = icmp eq i64 %RP, 0')
    # the tail vector's lanes inside the row (W % V of them)
    a('  %tl = sub i64 %W, %Wf')
    a('  %tany = icmp sgt i64 %tl, 0')
    a(f'  %tlb.0 = insertelement <{V} x i64> undef, i64 %tl, i32 0')
    a(f'  %tlb = shufflevector <{V} x i64> %tlb.0, <{V} x i64> undef, <{V} x i32> zeroinitializer')
    a(f'  %tmk = icmp slt <{V} x i64> %lanes, %tlb')
    KHc = ks[0] if ks else 0
    # (the register kernel: row pairs' KH + 2 rows and the next pair's 4 prefetched, groups' (GR - 1) * 2 + KH)
    for k in range(1, KHc + (max(6, 2 * GR - 1) if reg else 0)):
        a(f'  %DHW{k} = mul i64 %DHW, {k}')
    if reg:
        _reg_entry(a, V, reg_vectors(sw, ks[1], V)[1], sw, ks[1], reg_rsh(reg))
    a(f'  br label %{"claim" if reg else "fill"}')
    # the row buffer: pad value everywhere (TL a multiple of V)
    if not reg:
        _fill(a, tname, v, vp, V)
    # ---- claim a run of units [gt0, gt1)
    claim_ir(a, 'unit')
    _unit(a, tname)
    if reg:
        a('  br i1 %rany, label %row, label %unit_end')
        _reg_rows(a, tname, is_max, sw, ks, V, v, vp, sfx, reg_rsh(reg))
        return "\n".join(L) + "\n"
    _buffer_rows(a, L, tname, is_max, sw, ks, V, v, vp, sfx, KHc)
    return "\n".join(L) + "\n"


def _fill(a, tname, v, vp, V):
    """The row buffer: the pad value everywhere (TL a multiple of V)."""
    a('fill:')
    a('  %fi = phi i64 [ 0, %entry ], [ %fi1, %fill ]')
    a(f'  %fp.f = getelementptr {tname}, {tname}* %tmp, i64 %fi')
    a(f'  %fp = bitcast {tname}* %fp.f to {vp}')
    a(f'  store {v} %fillv, {vp} %fp, align 4')
    a(f'  %fi1 = add i64 %fi, {V}')
    a('  %fc = icmp slt i64 %fi1, %TLB')
    a('  br i1 %fc, label %fill, label %claim')


def _unit(a, tname):
    """Unit u of the claimed run (one plane, or a band of its output rows): rows [r0, r1), bases xb / ob,
    %runend: the end of the run's output; ends in %rany (any row)."""
    # unit u: band bd of plane pl (NB bands of RB output rows per plane: one band, the plane u, without the
    # 64-bit division); output rows [r0, r1), the plane's input / output bases xb / ob
    # runend: the end of the claimed run's output (its units' rows are consecutive output rows)
    a('unit:')
    a('  %u = phi i64 [ %gt0, %grp ], [ %u1, %unit_end ]')
    a('  %rend1 = mul i64 %gt1, %OHW')
    a('  br i1 %nb1, label %unit_p, label %unit_d')
    a('unit_d:')
    a('  %pld = udiv i64 %u, %NB')
    a('  %gl = sub i64 %gt1, 1')
    a('  %pll = udiv i64 %gl, %NB')
    a('  %bdl.m = mul i64 %pll, %NB')
    a('  %bdl = sub i64 %gl, %bdl.m')
    a('  %bdl1 = add i64 %bdl, 1')
    a('  %r1la = mul i64 %bdl1, %RB')
    a('  %r1ls = icmp slt i64 %r1la, %OH')
    a('  %r1l = select i1 %r1ls, i64 %r1la, i64 %OH')
    a('  %rendp = mul i64 %pll, %OHW')
    a('  %rendr = mul i64 %r1l, %OW')
    a('  %rendd = add i64 %rendp, %rendr')
    a('  br label %unit_p')
    a('unit_p:')
    a('  %pl = phi i64 [ %u, %unit ], [ %pld, %unit_d ]')
    a('  %runend = phi i64 [ %rend1, %unit ], [ %rendd, %unit_d ]')
    for line in ("  %bd.m = mul i64 %pl, %NB", "  %bd = sub i64 %u, %bd.m", "  %r0 = mul i64 %bd, %RB",
                 "  %r1a = add i64 %r0, %RB", "  %r1s = icmp slt i64 %r1a, %OH",
                 "  %r1 = select i1 %r1s, i64 %r1a, i64 %OH", "  %xbo = mul i64 %pl, %HW",
                 f"  %xb = getelementptr {tname}, {tname}* %x, i64 %xbo", "  %obo = mul i64 %pl, %OHW",
                 f"  %ob = getelementptr {tname}, {tname}* %out, i64 %obo"):
        a(line)
    a('  %rany = icmp slt i64 %r0, %r1')


def _buffer_rows(a, L, tname, is_max, sw, ks, V, v, vp, sfx, KHc):
    """The row-buffer kernels' rows: batches of vertical passes into the buffer, then their horizontal passes."""
    a('  br i1 %rany, label %batch, label %unit_end')
    # ---- a batch of output rows [b0, b1): their vertical passes, then their horizontal ones (a load right
    # after the stores it overlaps, unaligned, would wait for them: store forwarding fails)
    a('batch:')
    a('  %b0 = phi i64 [ %r0, %unit_p ], [ %b1, %hrow_end ]')
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
    if ks:
        # the row's count of valid window rows and the offset of the first one (the table after the params,
        # _row_table), and the end of its tail vectors' reads (the next OH words)
        a(f'  %rti = add i64 %r, {_P_N}')
        a('  %rtp = getelementptr i64, i64* %p, i64 %rti')
        a('  %rt = load i64, i64* %rtp')
        a('  %nk = and i64 %rt, 255')
        a('  %xro = ashr i64 %rt, 8')
        a('  %kv = icmp sgt i64 %nk, 0')
        a(f'  %xr = getelementptr {tname}, {tname}* %xb, i64 %xro')
        a('  %tei = add i64 %rti, %OH')
        a('  %tep = getelementptr i64, i64* %p, i64 %tei')
        a('  %te = load i64, i64* %tep')
        a('  %tx3 = add i64 %xbo, %te')
        a('  %tin = icmp sle i64 %tx3, %XN')
    else:
        _row_geometry(a, tname, V)
    if KHc:
        cases = " ".join(f"i64 {n}, label %f{n}_pre" for n in range(1, KHc + 1))
        a(f'  switch i64 %nk, label %g_pre [ {cases} ]')
    else:
        a('  br label %g_pre')
    _passes(a, tname, is_max, sw, ks, V, v, vp, sfx, KHc)


def _row_geometry(a, tname, V):
    """The generic kernel's row: its valid window rows (count %nk, %kv: any) from the first (%xr), whether its
    tail vectors' plain loads stay inside x (%tin)."""
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
    # the tail's whole vectors lie inside x (the next row's or plane's elements in the lanes past the row): plain
    # loads and a select rather than masked loads (the last rows of the last plane: masked)
    a('  %tx0 = add i64 %xbo, %xro')
    a('  %tx1 = add i64 %tx0, %Wf')
    a('  %tkn = sub i64 %nk, 1')
    a('  %tkl = mul i64 %tkn, %DHW')
    a('  %tx2 = add i64 %tx1, %tkl')
    a(f'  %tx3 = add i64 %tx2, {V}')
    a('  %tin = icmp sle i64 %tx3, %XN')


def reg_vectors(sw, KW, V):
    """(NV, carried) of the register kernel: column vectors an output vector's windows span, of which the first
    ``carried`` (0 or 1) are the previous output vector's last."""
    NV = ((V - 1) * sw + KW - 1) // V + 1
    return NV, NV - sw


def _reg_entry(a, V, car, sw, KW, rsh):
    """The register kernel's row-invariant values: lanes as i32, W as an i32 splat, the first column vector's mask
    (columns -PW + lane inside [0, W)), the mask table's start (after the row table)."""
    lanes = ", ".join(f"i32 {i}" for i in range(V))
    a(f'  %lanes32 = add <{V} x i32> <{lanes}>, zeroinitializer')
    a('  %W32 = trunc i64 %W to i32')
    a(f'  %W32b.0 = insertelement <{V} x i32> undef, i32 %W32, i32 0')
    a(f'  %W32b = shufflevector <{V} x i32> %W32b.0, <{V} x i32> undef, <{V} x i32> zeroinitializer')
    a('  %mPW = sub i64 0, %PW')
    _col_mask(a, V, '%mPW', 'm0')
    a(f'  %mt0 = add i64 %OH, {_P_N}')
    a('  %mtb = getelementptr i64, i64* %p, i64 %mt0')
    # the last output vector's end past its column: (OW - 1) // V * V + V
    a('  %OWm1 = sub i64 %OW, 1')
    a(f'  %JLV0 = and i64 %OWm1, {-V}')
    a(f'  %JLV = add i64 %JLV0, {V}')
    a(f'  %JLI = lshr i64 %JLV0, {V.bit_length() - 1}')
    a('  %nit1 = icmp eq i64 %JLI, 0')
    NV = reg_vectors(sw, KW, V)[0]
    a('  %nvi0 = add i64 %W, %PW')
    a(f'  %nvi1 = add i64 %nvi0, {V - 1}')
    a(f'  %nvi2 = lshr i64 %nvi1, {V.bit_length() - 1}')
    a(f'  %nvi3 = icmp ult i64 %nvi2, {NV}')
    a(f'  %nvi = select i1 %nvi3, i64 %nvi2, i64 {NV}')
    # (groups take rows of at most two column vectors inside the row: three only for 33-column rows at stride 2)
    a(f'  %nvok = icmp ule i64 %nvi, {min(NV, 2)}')
    a('  %nit1g = and i1 %nit1, %nvok')
    for m in range(NV):
        a(f'  %gm{m}.p = getelementptr i64, i64* %mtb, i64 {m}')
        a(f'  %gm{m}.w = load i64, i64* %gm{m}.p')
        a(f'  %gm{m}.t = trunc i64 %gm{m}.w to i{V}')
        a(f'  %gm{m} = bitcast i{V} %gm{m}.t to <{V} x i1>')
    # row pairs and groups: the kernel's row stride (rsh: 1 or 2; 0: none)
    a(f'  %shp = icmp eq i64 %SH, {rsh if rsh else -1}')


def _col_mask(a, V, c, nm):
    """%nm: the lanes of the column vector at column ``c`` (i64, may be negative) inside the row [0, W)."""
    a(f'  %{nm}.c = trunc i64 {c} to i32')
    a(f'  %{nm}.b0 = insertelement <{V} x i32> undef, i32 %{nm}.c, i32 0')
    a(f'  %{nm}.b = shufflevector <{V} x i32> %{nm}.b0, <{V} x i32> undef, <{V} x i32> zeroinitializer')
    a(f'  %{nm}.l = add <{V} x i32> %{nm}.b, %lanes32')
    a(f'  %{nm} = icmp ult <{V} x i32> %{nm}.l, %W32b')


def reg_pair_rows(KH, sh):
    """The input rows (offsets from the first) a pair of output rows' windows read: their union, in order."""
    return sorted(set(range(KH)) | set(range(sh, sh + KH)))


def _reg_rows(a, tname, is_max, sw, ks, V, v, vp, sfx, rsh):
    """The register kernel's rows (fixed windows, column strides 1-2): per output vector, the column vectors its
    windows span combined over the row's valid window rows straight from the input (masked loads: the lanes
    outside the row [0, W) the pad value, their masks from the table after the row table, one per output vector
    and new column vector), the taps gathered from them in registers (stride 2: even / odd lanes of two vectors,
    the third tap the even lanes moved by one), combined in order, stored; the last column vector is the next
    output vector's first.  Two output rows whose windows are whole (interior rows) and whose stores all end inside
    the claimed run go together (pair: the input rows they share loaded once, one row's overhead)."""
    KH, KW = ks
    comb, first = _ops(a, is_max, V, v)
    NV, car = reg_vectors(sw, KW, V)
    NN = NV - car
    ity = f"i{V}"
    a('row:')
    a('  %r = phi i64 [ %r0, %unit_p ], [ %rn, %row_end ]')
    a(f'  %rti = add i64 %r, {_P_N}')
    a('  %rtp = getelementptr i64, i64* %p, i64 %rti')
    a('  %rt = load i64, i64* %rtp')
    a('  %nk = and i64 %rt, 255')
    a('  %xro = ashr i64 %rt, 8')
    a(f'  %xr = getelementptr {tname}, {tname}* %xb, i64 %xro')
    a('  %orow = mul i64 %r, %OW')
    a(f'  %orp = getelementptr {tname}, {tname}* %ob, i64 %orow')
    a(f'  %dvr = getelementptr {tname}, {tname}* %dv, i64 %orow')
    a('  %rend0 = add i64 %orow, %obo')
    # a pair: the next row in the unit, both rows' windows whole, the next row's last store inside the run
    a('  %pr1 = add i64 %r, 1')
    a('  %pra = icmp slt i64 %pr1, %r1')
    a('  %prt.p = getelementptr i64, i64* %rtp, i64 1')
    a('  %prt = load i64, i64* %prt.p')         # (read only where %pra: the row table has OH words)
    a(f'  %prk0 = icmp eq i64 %nk, {KH}')
    a('  %prk1 = and i64 %prt, 255')
    a(f'  %prk = icmp eq i64 %prk1, {KH}')
    a('  %pre0 = add i64 %rend0, %OW')
    a('  %pre1 = add i64 %pre0, %JLV')
    a('  %pre = icmp sle i64 %pre1, %runend')
    a('  %prb = and i1 %prk0, %prk')
    a('  %prc0 = and i1 %prb, %pre')
    a('  %prc = and i1 %prc0, %shp')
    a(f'  %orp2 = getelementptr {tname}, {tname}* %orp, i64 %OW')
    a(f'  %dvr2 = getelementptr {tname}, {tname}* %dvr, i64 %OW')
    # a group of GR rows (one output vector per row): the rows in the unit, the first and last windows whole, the
    # last row's store inside the run (the row table has spare words past its OH: read only where %gra)
    a(f'  %gr3 = add i64 %r, {GR - 1}')
    a('  %gra = icmp slt i64 %gr3, %r1')
    a(f'  %grt.p = getelementptr i64, i64* %rtp, i64 {GR - 1}')
    a('  %grt = load i64, i64* %grt.p')
    a('  %grk1 = and i64 %grt, 255')
    a(f'  %grk = icmp eq i64 %grk1, {KH}')
    a(f'  %gre0 = mul i64 %OW, {GR - 1}')
    a('  %gre1 = add i64 %rend0, %gre0')
    a(f'  %gre2 = add i64 %gre1, {V}')
    a('  %gre = icmp sle i64 %gre2, %runend')
    a('  %grb0 = and i1 %gra, %grk')
    a('  %grb1 = and i1 %grb0, %gre')
    a('  %grb2 = and i1 %grb1, %prk0')
    a('  %grb3 = and i1 %grb2, %shp')
    a('  %grok = and i1 %grb3, %nit1g')
    a('  br i1 %grok, label %grp_pre, label %row_p0')
    a('row_p0:')
    a('  br i1 %pra, label %row_pq, label %row_s')
    a('row_pq:')
    a('  br i1 %prc, label %pair_pre, label %row_s')
    a('row_s:')
    cases = " ".join(f"i64 {n}, label %f{n}_pre" for n in range(1, KH + 1))
    a(f'  switch i64 %nk, label %f0_pre [ {cases} ]')

    def mask_at(f, it, m):
        """the mask of column vector m of output vector it (the table's word it * NV + m)."""
        a(f'  %{f}.mi{m}.0 = mul i64 {it}, {NV}')
        a(f'  %{f}.mi{m} = add i64 %{f}.mi{m}.0, {m}')
        a(f'  %{f}.mp{m} = getelementptr i64, i64* %mtb, i64 %{f}.mi{m}')
        a(f'  %{f}.mw{m} = load i64, i64* %{f}.mp{m}')
        a(f'  %{f}.mt{m} = trunc i64 %{f}.mw{m} to {ity}')
        a(f'  %{f}.mk{m} = bitcast {ity} %{f}.mt{m} to <{V} x i1>')
        return f'%{f}.mk{m}'

    def load_row(f, k, c, mask, nm):
        """row k's vector at column c (mask: its lanes inside the row)."""
        a(f'  %{nm}.o{k} = add i64 {c}, {"%DHW" + str(k) if k else "0"}')
        a(f'  %{nm}.p{k}.f = getelementptr {tname}, {tname}* %xr, i64 %{nm}.o{k}')
        a(f'  %{nm}.p{k} = bitcast {tname}* %{nm}.p{k}.f to {vp}')
        a(f'  %{nm}.l{k} = call {v} @llvm.masked.load.{sfx}.p0{sfx}({vp} %{nm}.p{k}, i32 4, '
          f'<{V} x i1> {mask}, {v} %fillv)')
        return f'%{nm}.l{k}'

    # max without the NaN fix-up (the row pairs' first pass, redone with comb where an input is NaN)
    combp, _ = _ops(a, is_max, V, v, True)

    def vert(rows, nm, cm=comb):
        """the rows' values combined in order (the pad value first)."""
        acc = None
        for i, val in enumerate(rows):
            acc = first(val, f"{nm}.a{i}") if i == 0 else cm(acc, val, f"{nm}.a{i}")
        return acc if rows else "%fillv"

    even = ", ".join(f"i32 {2 * i}" for i in range(V))
    odd = ", ".join(f"i32 {2 * i + 1}" for i in range(V))

    def taps_comb(f, cv, cm=comb):
        """the output vector from its column vectors cv: its taps in order, combined in order (the buffer kernels'
        order: the same NaN of a window)."""
        taps = []
        for kj in range(KW):
            if sw == 1:
                if kj == 0:
                    t = cv[0]
                else:
                    idx = ", ".join(f"i32 {kj + i}" for i in range(V))
                    a(f'  %{f}.t{kj} = shufflevector {v} {cv[0]}, {v} {cv[1]}, <{V} x i32> <{idx}>')
                    t = f'%{f}.t{kj}'
            else:
                if kj < 2:
                    a(f'  %{f}.t{kj} = shufflevector {v} {cv[0]}, {v} {cv[1]}, <{V} x i32> <{even if kj == 0 else odd}>')
                else:
                    # lanes 2i + kj: tap kj - 2's lanes moved down by one, the last from the third vector
                    idx = ", ".join([f"i32 {i}" for i in range(1, V)] + [f"i32 {V + kj - 2}"])
                    a(f'  %{f}.t{kj} = shufflevector {v} {taps[kj - 2]}, {v} {cv[2]}, <{V} x i32> <{idx}>')
                t = f'%{f}.t{kj}'
            taps.append(t)
        acc = taps[0]
        for kj in range(1, KW):
            acc = cm(acc, taps[kj], f'{f}.h{kj}')
        return acc

    def out_ptrs(f, orp, dvr, j):
        _out_ptrs_ir(a, tname, vp, f + ".", orp, dvr, j, is_max)

    def store_full(f, acc):
        _store_full_ir(a, v, vp, f + ".", acc, is_max)

    def store_checked(f, acc, j, nxt):
        # a whole-vector store where it ends inside the output rows of the claimed run (the lanes past the row
        # land on rows this thread writes later), else a masked one
        a(f'  %{f}.jend0 = add i64 %rend0, {j}')
        a(f'  %{f}.jend = add i64 %{f}.jend0, {V}')
        a(f'  %{f}.jfull = icmp sle i64 %{f}.jend, %runend')
        a(f'  br i1 %{f}.jfull, label %{f}_st, label %{f}_sm')
        a(f'{f}_st:')
        store_full(f, acc)
        a(f'  br label %{nxt}')
        a(f'{f}_sm:')
        a(f'  %{f}.orl = sub i64 %OW, {j}')
        a(f'  %{f}.orb.0 = insertelement <{V} x i64> undef, i64 %{f}.orl, i32 0')
        a(f'  %{f}.orb = shufflevector <{V} x i64> %{f}.orb.0, <{V} x i64> undef, <{V} x i32> zeroinitializer')
        a(f'  %{f}.omk = icmp slt <{V} x i64> %lanes, %{f}.orb')
        val = acc
        if not is_max:
            a(f'  %{f}.on.0 = insertelement {v} undef, {tname} 1.0, i32 0')
            a(f'  %{f}.onev = shufflevector {v} %{f}.on.0, {v} undef, <{V} x i32> zeroinitializer')
            a(f'  %{f}.dvm = call {v} @llvm.masked.load.{sfx}.p0{sfx}({vp} %{f}.dvp, i32 4, <{V} x i1> %{f}.omk, '
              f'{v} %{f}.onev)')
            a(f'  %{f}.qm = fdiv {v} {acc}, %{f}.dvm')
            val = f'%{f}.qm'
        a(f'  call void @llvm.masked.store.{sfx}.p0{sfx}({v} {val}, {vp} %{f}.op, i32 4, <{V} x i1> %{f}.omk)')
        a(f'  br label %{nxt}')

    # ---- one output row with n valid window rows
    for n in range(KH + 1):
        f = f"f{n}"
        a(f'{f}_pre:')
        c0 = vert([load_row(f, k, '%mPW', '%m0', f'{f}.c0') for k in range(n)], f'{f}.c0v') if car else None
        a(f'  br label %{f}_j')
        a(f'{f}_j:')
        a(f'  %{f}.j = phi i64 [ 0, %{f}_pre ], [ %{f}.j1, %{f}_next ]')
        a(f'  %{f}.it = phi i64 [ 0, %{f}_pre ], [ %{f}.it1, %{f}_next ]')
        if car:
            a(f'  %{f}.A = phi {v} [ {c0}, %{f}_pre ], [ %{f}.v{NV - 1}, %{f}_next ]')
        a(f'  %{f}.cb0 = mul i64 %{f}.j, {sw}')
        a(f'  %{f}.cb = sub i64 %{f}.cb0, %PW')
        cv = [f'%{f}.A'] if car else []
        for m in range(car, NV):
            a(f'  %{f}.c{m} = add i64 %{f}.cb, {m * V}')
            mk = mask_at(f, f'%{f}.it', m) if n else None
            val = vert([load_row(f, k, f'%{f}.c{m}', mk, f'{f}.x{m}') for k in range(n)], f'{f}.x{m}v')
            a(f'  %{f}.v{m} = bitcast {v} {val} to {v}')
            cv.append(f'%{f}.v{m}')
        acc = taps_comb(f, cv)
        out_ptrs(f, '%orp', '%dvr', f'%{f}.j')
        store_checked(f, acc, f'%{f}.j', f'{f}_next')
        a(f'{f}_next:')
        a(f'  %{f}.j1 = add i64 %{f}.j, {V}')
        a(f'  %{f}.it1 = add i64 %{f}.it, 1')
        a(f'  %{f}.jc = icmp slt i64 %{f}.j1, %OW')
        a(f'  br i1 %{f}.jc, label %{f}_j, label %row_end1')
    # ---- a pair of interior output rows (KH valid rows each; the second's first input row SH rows down)
    a('pair_pre:')
    pq = "d" if is_max else "q"
    a(f'  br label %{pq}{rsh}_pre' if rsh else '  br label %row_s')
    # (output vectors from the last down: the first row's last vector's lanes past the row land on the second
    # row's first outputs, stored after them; the carried column vector is the next lower one's last)
    def pair(shv, det):
        """the pair loop for row stride shv; det: max without the NaN fix-up, every input checked for NaN (all
        lanes ordered: masked compares), the pair redone by the exact loop where one is."""
        f = f"{'d' if det else 'q'}{shv}"
        cm = combp if det else comb
        rows = reg_pair_rows(KH, shv)
        groups = [rows[i:i + 2] for i in range(0, len(rows), 2)]
        ords = []

        def ordered(ld, nm):
            for gi, g in enumerate(groups):
                a(f'  %{nm}.ord{gi} = fcmp ord {v} {ld[g[0]]}, {ld[g[-1]]}')
                ords.append(f'%{nm}.ord{gi}')
        a(f'{f}_pre:')
        T = "<" + ", ".join(["i1 true"] * V) + ">"
        pre = f'{f}_pre'
        init = []
        if car:
            # the carried column vector of the last output vector: the pad value where it lies past the row
            a(f'  %{f}.pc0 = mul i64 %JLV0, {sw}')
            a(f'  %{f}.pc1 = sub i64 %{f}.pc0, %PW')
            a(f'  %{f}.pc = add i64 %{f}.pc1, {(NV - 1) * V}')
            a(f'  %{f}.pout = icmp sge i64 %{f}.pc, %W')
            a(f'  br i1 %{f}.pout, label %{f}_pj, label %{f}_pl')
            a(f'{f}_pl:')
            mk = mask_at(f + "p", '%JLI', NV - 1)
            ld = {k: load_row(f, k, f'%{f}.pc', mk, f'{f}.c0') for k in rows}
            c0a = vert([ld[k] for k in range(KH)], f'{f}.c0a', cm)
            c0b = vert([ld[k] for k in range(shv, shv + KH)], f'{f}.c0b', cm)
            if det:
                ordered(ld, f'{f}.c0')
            a(f'  br label %{f}_pj')
            a(f'{f}_pj:')
            a(f'  %{f}.c0av = phi {v} [ %fillv, %{f}_pre ], [ {c0a}, %{f}_pl ]')
            a(f'  %{f}.c0bv = phi {v} [ %fillv, %{f}_pre ], [ {c0b}, %{f}_pl ]')
            c0a, c0b = f'%{f}.c0av', f'%{f}.c0bv'
            for gi, o in enumerate(ords):
                a(f'  %{f}.in{gi} = phi <{V} x i1> [ {T}, %{f}_pre ], [ {o}, %{f}_pl ]')
                init.append(f'%{f}.in{gi}')
            pre = f'{f}_pj'
        ords.clear()
        a(f'  br label %{f}_j')
        a(f'{f}_j:')
        a(f'  %{f}.j = phi i64 [ %JLV0, %{pre} ], [ %{f}.j1, %{f}_j ]')
        a(f'  %{f}.it = phi i64 [ %JLI, %{pre} ], [ %{f}.it1, %{f}_j ]')
        if car:
            a(f'  %{f}.A = phi {v} [ {c0a}, %{pre} ], [ %{f}.va0, %{f}_j ]')
            a(f'  %{f}.B = phi {v} [ {c0b}, %{pre} ], [ %{f}.vb0, %{f}_j ]')
        nacc = (NV - car) * len(groups) if det else 0
        for i in range(nacc):
            a(f'  %{f}.ok{i} = phi <{V} x i1> [ {init[i] if i < len(init) else T}, %{pre} ], [ %{f}.ok{i}n, %{f}_j ]')
        a(f'  %{f}.cb0 = mul i64 %{f}.j, {sw}')
        a(f'  %{f}.cb = sub i64 %{f}.cb0, %PW')
        cva, cvb = [], []
        for m in range(NV - car):
            a(f'  %{f}.c{m} = add i64 %{f}.cb, {m * V}')
            mk = mask_at(f, f'%{f}.it', m)
            ld = {k: load_row(f, k, f'%{f}.c{m}', mk, f'{f}.x{m}') for k in rows}
            if det:
                ordered(ld, f'{f}.x{m}')
            if PF[0]:
                # the next pair's new input rows, this column vector's line (from L3 the loads waited on them)
                for k in range(rows[-1] + 1, rows[-1] + 1 + 2 * shv):
                    a(f'  %{f}.pf{m}.{k}.o = add i64 %{f}.c{m}, %DHW{k}')
                    a(f'  %{f}.pf{m}.{k}.p = getelementptr {tname}, {tname}* %xr, i64 %{f}.pf{m}.{k}.o')
                    a(f'  %{f}.pf{m}.{k}.b = bitcast {tname}* %{f}.pf{m}.{k}.p to i8*')
                    a(f'  call void @llvm.prefetch.p0i8(i8* %{f}.pf{m}.{k}.b, i32 0, i32 3, i32 1)')
            va = vert([ld[k] for k in range(KH)], f'{f}.x{m}a', cm)
            vb = vert([ld[k] for k in range(shv, shv + KH)], f'{f}.x{m}b', cm)
            a(f'  %{f}.va{m} = bitcast {v} {va} to {v}')
            a(f'  %{f}.vb{m} = bitcast {v} {vb} to {v}')
            cva.append(f'%{f}.va{m}')
            cvb.append(f'%{f}.vb{m}')
        for i in range(nacc):
            a(f'  %{f}.ok{i}n = and <{V} x i1> %{f}.ok{i}, {ords[i]}')
        if car:
            cva.append(f'%{f}.A')
            cvb.append(f'%{f}.B')
        acc = taps_comb(f + "a", cva, cm)
        out_ptrs(f + "a", '%orp', '%dvr', f'%{f}.j')
        store_full(f + "a", acc)
        acc = taps_comb(f + "b", cvb, cm)
        out_ptrs(f + "b", '%orp2', '%dvr2', f'%{f}.j')
        store_full(f + "b", acc)
        a(f'  %{f}.j1 = sub i64 %{f}.j, {V}')
        a(f'  %{f}.it1 = sub i64 %{f}.it, 1')
        a(f'  %{f}.jc = icmp sge i64 %{f}.j1, 0')
        if not det:
            a(f'  br i1 %{f}.jc, label %{f}_j, label %row_end2')
            return
        a(f'  br i1 %{f}.jc, label %{f}_j, label %{f}_x')
        a(f'{f}_x:')
        cur = f'%{f}.ok0n'
        for i in range(1, nacc):
            a(f'  %{f}.all{i} = and <{V} x i1> {cur}, %{f}.ok{i}n')
            cur = f'%{f}.all{i}'
        a(f'  %{f}.allb = bitcast <{V} x i1> {cur} to i{V}')
        a(f'  %{f}.nonan = icmp eq i{V} %{f}.allb, -1')
        a(f'  br i1 %{f}.nonan, label %row_end2, label %q{shv}_pre')

    for shv in ((rsh,) if rsh else ()):
        pair(shv, False)
        if is_max:
            pair(shv, True)

    # ---- GR rows of one output vector each (OW <= V): the column vectors inside the row (nvi of NV, masks of
    # output vector 0, loaded at entry), every input row the group's windows read loaded once
    a('grp_pre:')
    a(f'  br label %g{rsh}_pre' if rsh else '  br label %row_s')
    for shv in ((rsh,) if rsh else ()):
        rows = list(range((GR - 1) * shv + KH))
        a(f'g{shv}_pre:')
        GNV = min(NV, 2)
        cases = " ".join(f"i64 {n}, label %g{shv}n{n}" for n in range(1, GNV))
        a(f'  switch i64 %nvi, label %g{shv}n{GNV} [ {cases} ]')
        for nvi in range(1, GNV + 1):
            f = f"g{shv}n{nvi}"
            a(f'{f}:')
            cm = combp if is_max else comb
            cvs = []
            ords = []
            for m in range(NV):
                if m >= nvi:
                    cvs.append(["%fillv"] * GR)
                    continue
                a(f'  %{f}.c{m} = add i64 %mPW, {m * V}')
                ld = {k: load_row(f, k, f'%{f}.c{m}', f'%gm{m}', f'{f}.x{m}') for k in rows}
                if is_max:
                    for gi in range(0, len(rows), 2):
                        g = rows[gi:gi + 2]
                        a(f'  %{f}.x{m}.ord{gi} = fcmp ord {v} {ld[g[0]]}, {ld[g[-1]]}')
                        ords.append(f'%{f}.x{m}.ord{gi}')
                cvs.append([vert([ld[k] for k in range(i * shv, i * shv + KH)], f'{f}.x{m}r{i}', cm)
                            for i in range(GR)])
            for i in range(GR):
                acc = taps_comb(f"{f}r{i}", [cvs[m][i] for m in range(NV)], cm)
                a(f'  %{f}.or{i} = mul i64 %OW, {i}')
                out_ptrs(f"{f}r{i}", '%orp', '%dvr', f'%{f}.or{i}')
                store_full(f"{f}r{i}", acc)
            if not is_max:
                a('  br label %row_end4')
                continue
            cur = ords[0]
            for i in range(1, len(ords)):
                a(f'  %{f}.all{i} = and <{V} x i1> {cur}, {ords[i]}')
                cur = f'%{f}.all{i}'
            a(f'  %{f}.allb = bitcast <{V} x i1> {cur} to i{V}')
            a(f'  %{f}.nonan = icmp eq i{V} %{f}.allb, -1')
            # (an input NaN: the first two rows redone exactly)
            a(f'  br i1 %{f}.nonan, label %row_end4, label %q{shv}_pre')
    a('row_end1:')
    a('  br label %row_end')
    a('row_end2:')
    a('  br label %row_end')
    a('row_end4:')
    a('  br label %row_end')
    a('row_end:')
    a(f'  %rstep = phi i64 [ 1, %row_end1 ], [ 2, %row_end2 ], [ {GR}, %row_end4 ]')
    a('  %rn = add i64 %r, %rstep')
    a('  %rc = icmp slt i64 %rn, %r1')
    a('  br i1 %rc, label %row, label %unit_end')
    _unit_end_ir(a)


def _out_ptrs_ir(a, tname, vp, p, orp, dvr, j, is_max) -> None:
    """The register kernels' output vector pointer ``%{p}op`` at column ``j`` of output row ``orp`` and, for an
    average, the divisors' ``%{p}dvp`` in divisor row ``dvr`` (names prefixed ``p``)."""
    a(f'  %{p}op.f = getelementptr {tname}, {tname}* {orp}, i64 {j}')
    a(f'  %{p}op = bitcast {tname}* %{p}op.f to {vp}')
    if not is_max:
        a(f'  %{p}dvp.f = getelementptr {tname}, {tname}* {dvr}, i64 {j}')
        a(f'  %{p}dvp = bitcast {tname}* %{p}dvp.f to {vp}')


def _store_full_ir(a, v, vp, p, acc, is_max) -> None:
    """The whole-vector store of ``acc`` at ``%{p}op``: a max as it is, an average divided by its divisors."""
    if is_max:
        a(f'  store {v} {acc}, {vp} %{p}op, align 4')
    else:
        a(f'  %{p}dvv = load {v}, {vp} %{p}dvp, align 4')
        a(f'  %{p}q = fdiv {v} {acc}, %{p}dvv')
        a(f'  store {v} %{p}q, {vp} %{p}op, align 4')


def _unit_end_ir(a) -> None:
    """The kernels' last blocks: the next unit of the claim (block ``unit``) or the next claim, and ``done``."""
    for line in ("unit_end:", "  %u1 = add i64 %u, 1", "  %uc = icmp slt i64 %u1, %gt1",
                 "  br i1 %uc, label %unit, label %claim", "done:", "  ret void", "}"):
        a(line)


def _ops(a, is_max, V, v, plain=False):
    """(comb, first): the emitters of one combination of a vector into an accumulator and of the pad value combined
    with a first vector."""
    def comb(acc, val, nm):
        if is_max and plain:
            a(f'  %{nm}.gt = fcmp ogt {v} {val}, {acc}')
            a(f'  %{nm} = select <{V} x i1> %{nm}.gt, {v} {val}, {v} {acc}')
        elif is_max:
            # v where v > acc or v is NaN, else acc (torch's NaN propagation): a max, then the NaN lanes of v
            a(f'  %{nm}.gt = fcmp ogt {v} {val}, {acc}')
            a(f'  %{nm}.m = select <{V} x i1> %{nm}.gt, {v} {val}, {v} {acc}')
            a(f'  %{nm}.mf = freeze {v} %{nm}.m')
            a(f'  %{nm}.nan = fcmp uno {v} {val}, zeroinitializer')
            a(f'  %{nm} = select <{V} x i1> %{nm}.nan, {v} {val}, {v} %{nm}.mf')
        else:
            a(f'  %{nm} = fadd {v} {acc}, {val}')
        return f"%{nm}"

    def first(val, nm):
        """the pad value combined with val (max: val itself, -inf where val is -inf; average: 0 + val)."""
        if is_max:
            return val
        a(f'  %{nm} = fadd {v} %fillv, {val}')
        return f"%{nm}"

    return comb, first


def _passes(a, tname, is_max, sw, ks, V, v, vp, sfx, KHc):
    """The row's vertical pass (generic, or unrolled per count of valid rows), the batch's horizontal passes,
    the loops' ends."""
    comb, first = _ops(a, is_max, V, v)

    # -- the generic vertical pass (every count of valid rows, runtime dilation)
    a('g_pre:')
    a('  br i1 %colf, label %vc, label %vt_pre')
    # vertical pass, whole vectors: tmp[PW + c ..] = comb over valid rows of x[row][c ..]
    a('vc:')
    a('  %c = phi i64 [ 0, %g_pre ], [ %c1, %vc_end ]')
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
    # the tail vector (W % V columns): the lanes past the row the pad value
    a('vt_pre:')
    a('  br i1 %tany, label %vt, label %row_end')
    a('vt:')
    a(f'  %xtc = getelementptr {tname}, {tname}* %xr, i64 %Wf')
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

    # -- the vertical pass for n valid rows (fixed windows, dilation 1): straight-line combinations
    def rows_at(n, base, nm, tail):
        """the combination of the n row vectors at base + k * W (k < n); tail: lanes past the row the pad."""
        acc = None
        for k in range(n):
            if k:
                a(f'  %{nm}.p{k}.f = getelementptr {tname}, {tname}* {base}, i64 %DHW{k}')
            else:
                a(f'  %{nm}.p{k}.f = getelementptr {tname}, {tname}* {base}, i64 0')
            a(f'  %{nm}.p{k} = bitcast {tname}* %{nm}.p{k}.f to {vp}')
            if tail == "plain":
                a(f'  %{nm}.r{k} = load {v}, {vp} %{nm}.p{k}, align 4')
                a(f'  %{nm}.l{k} = select <{V} x i1> %tmk, {v} %{nm}.r{k}, {v} %fillv')
            elif tail == "masked":
                a(f'  %{nm}.l{k} = call {v} @llvm.masked.load.{sfx}.p0{sfx}({vp} %{nm}.p{k}, i32 4, '
                  f'<{V} x i1> %tmk, {v} %fillv)')
            else:
                a(f'  %{nm}.l{k} = load {v}, {vp} %{nm}.p{k}, align 4')
            acc = first(f"%{nm}.l{k}", f"{nm}.a{k}") if k == 0 else comb(acc, f"%{nm}.l{k}", f"{nm}.a{k}")
        return acc

    for n in range(1, KHc + 1):
        f = f"f{n}"
        a(f'{f}_pre:')
        a(f'  %{f}.ext = and i1 %tin, %norp')
        a(f'  %{f}.Wl = select i1 %{f}.ext, i64 %Wc, i64 %Wf')
        a(f'  %{f}.any = icmp slt i64 0, %{f}.Wl')
        a(f'  br i1 %{f}.any, label %{f}_vc, label %{f}_vt')
        a(f'{f}_vc:')
        a(f'  %{f}.c = phi i64 [ 0, %{f}_pre ], [ %{f}.c1, %{f}_vc ]')
        a(f'  %{f}.xc = getelementptr {tname}, {tname}* %xr, i64 %{f}.c')
        res = rows_at(n, f"%{f}.xc", f"{f}.v", None)
        a(f'  %{f}.tc.f = getelementptr {tname}, {tname}* %tmpi, i64 %{f}.c')
        a(f'  %{f}.tc = bitcast {tname}* %{f}.tc.f to {vp}')
        a(f'  store {v} {res}, {vp} %{f}.tc, align 4')
        a(f'  %{f}.c1 = add i64 %{f}.c, {V}')
        a(f'  %{f}.cc = icmp slt i64 %{f}.c1, %{f}.Wl')
        a(f'  br i1 %{f}.cc, label %{f}_vc, label %{f}_vt')
        a(f'{f}_vt:')
        a(f'  %{f}.xt = getelementptr {tname}, {tname}* %xr, i64 %Wf')
        a(f'  %{f}.tn = icmp slt i64 %{f}.Wl, %W')     # a tail left: lanes past the row the pad value
        a(f'  br i1 %{f}.tn, label %{f}_vt1, label %row_end')
        a(f'{f}_vt1:')
        a(f'  br i1 %tin, label %{f}_tp, label %{f}_tm')
        a(f'{f}_tp:')
        rp = rows_at(n, f"%{f}.xt", f"{f}.tp", "plain")
        a(f'  br label %{f}_tj')
        a(f'{f}_tm:')
        rm = rows_at(n, f"%{f}.xt", f"{f}.tm", "masked")
        a(f'  br label %{f}_tj')
        a(f'{f}_tj:')
        a(f'  %{f}.t = phi {v} [ {rp}, %{f}_tp ], [ {rm}, %{f}_tm ]')
        a(f'  %{f}.ttc.f = getelementptr {tname}, {tname}* %tmpi, i64 %Wf')
        a(f'  %{f}.ttc = bitcast {tname}* %{f}.ttc.f to {vp}')
        a(f'  store {v} %{f}.t, {vp} %{f}.ttc, align 4')
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

    def loads_at(base, nm):
        """the sw vectors tmp[base + m * V ..], m < sw."""
        loads = []
        for m in range(sw):
            a(f'  %{nm}.o{m} = add i64 {base}, {m * V}')
            a(f'  %{nm}.p{m}.f = getelementptr {tname}, {tname}* %trow, i64 %{nm}.o{m}')
            a(f'  %{nm}.p{m} = bitcast {tname}* %{nm}.p{m}.f to {vp}')
            a(f'  %{nm}.l{m} = load {v}, {vp} %{nm}.p{m}, align 4')
            loads.append(f"%{nm}.l{m}")
        return loads

    a('hj:')
    a('  %j = phi i64 [ 0, %hz_pre ], [ %j1, %hj_end ]')
    a(f'  %jb = mul i64 %j, {sw}')
    if ks:
        # taps q * sw + m (m < sw) of group q: lanes i * sw + m of the sw loads at jb + q * sw
        KWc = ks[1]
        acc = None
        # lane order of the in-lane even / odd shuffles: per 256 bits, lanes (0 1 4 5 2 3 6 7) of 32-bit
        # elements, (0 2 1 3) of 64-bit ones
        blk = (0, 1, 4, 5, 2, 3, 6, 7) if tname == "float" else (0, 2, 1, 3)
        sig = [h * len(blk) + o for h in range(V // len(blk)) for o in blk]
        for q in range(-(-KWc // sw)):
            if q:
                a(f'  %hg{q}.b = add i64 %jb, {q * sw}')
            ld = loads_at("%jb" if q == 0 else f"%hg{q}.b", f"hg{q}")
            for m in range(sw):
                kj = q * sw + m
                if kj >= KWc:
                    break
                if sw == 2:
                    # lanes in the order one in-lane shuffle per 256 bits gives (AVX2's shufps / shufpd), put
                    # back in order once, after the combinations (elementwise: any common lane order serves)
                    idx = ", ".join(f"i32 {2 * o + m}" for o in sig)
                    a(f'  %hg{q}.{m} = shufflevector {v} {ld[0]}, {v} {ld[1]}, <{V} x i32> <{idx}>')
                    t = f"%hg{q}.{m}"
                else:
                    t = _gather_phase(a, ld, sw, m, V, v, f"hg{q}.{m}")
                acc = t if kj == 0 else comb(acc, t, f"hc{kj}")
        hres = acc
        if sw == 2:
            idx = ", ".join(f"i32 {o}" for o in sig)      # (sig is its own inverse)
            a(f'  %hres.o = shufflevector {v} {acc}, {v} undef, <{V} x i32> <{idx}>')
            hres = "%hres.o"
    else:
        h0 = _gather_phase(a, loads_at("%jb", "h0"), sw, 0, V, v, "h0")
        a('  %hmore = icmp sgt i64 %KW, 1')
        a('  br i1 %hmore, label %hk, label %hk_end')
        a('hk:')
        a('  %kj = phi i64 [ 1, %hj ], [ %kj1, %hk ]')
        a(f'  %hacc = phi {v} [ {h0}, %hj ], [ %hnew, %hk ]')
        a('  %kjo = mul i64 %kj, %DW')
        a('  %hbase = add i64 %jb, %kjo')
        hv = _gather_phase(a, loads_at("%hbase", "hv"), sw, 0, V, v, "hv")
        comb("%hacc", hv, "hnew")
        a('  %kj1 = add i64 %kj, 1')
        a('  %kjc = icmp slt i64 %kj1, %KW')
        a('  br i1 %kjc, label %hk, label %hk_end')
        a('hk_end:')
        a(f'  %hres = phi {v} [ {h0}, %hj ], [ %hnew, %hk ]')
        hres = "%hres"
    _out_ptrs_ir(a, tname, vp, "", "%orp", "%dvr", "%j", is_max)
    # a whole-vector store where the vector ends inside the output rows of this claimed run of units (lanes past
    # the row land on the next rows' outputs, which this thread writes later): masked stores (slow on AMD cores)
    # only at a run's end
    a('  %jend0 = add i64 %orow, %j')
    a('  %jend1 = add i64 %jend0, %obo')
    a(f'  %jend = add i64 %jend1, {V}')
    a('  %jfull = icmp sle i64 %jend, %runend')
    a('  br i1 %jfull, label %hst, label %hmask')
    a('hst:')
    _store_full_ir(a, v, vp, "", hres, is_max)
    a('  br label %hj_end')
    a('hmask:')
    a('  %orl = sub i64 %OW, %j')
    a(f'  %orb.0 = insertelement <{V} x i64> undef, i64 %orl, i32 0')
    a(f'  %orb = shufflevector <{V} x i64> %orb.0, <{V} x i64> undef, <{V} x i32> zeroinitializer')
    a(f'  %omk = icmp slt <{V} x i64> %lanes, %orb')
    if is_max:
        val = hres
    else:
        one = "1.0"
        a(f'  %on.0 = insertelement {v} undef, {tname} {one}, i32 0')
        a(f'  %onev = shufflevector {v} %on.0, {v} undef, <{V} x i32> zeroinitializer')
        a(f'  %dvm = call {v} @llvm.masked.load.{sfx}.p0{sfx}({vp} %dvp, i32 4, <{V} x i1> %omk, {v} %onev)')
        a(f'  %hqm = fdiv {v} {hres}, %dvm')
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
    _unit_end_ir(a)


def kernel(dt: np.dtype, is_max: bool, sw: int, ks=None, V: int = 0, reg: int = 0):
    """The builtin ``f(x, out, dv, params)`` for (dtype, max / average, column stride sw, fixed window ks =
    (KH, KW) with dilations 1, or None: any window; reg: 0, or the register kernel for row stride reg (its row
    pairs and groups: row strides 1-2; others: rows one by one)); compiled once per process (machine code
    cached on disk by llvm_render)."""
    V = V or vector(dt, False)
    reg = reg and (reg_rsh(reg) or 3)
    k = (dt.char, is_max, sw, ks, V) + (("reg", reg) if reg else ())
    f = _kernels.get(k)
    if f is not None:
        return f
    tname = "float" if dt == np.float32 else "double"
    kn = (f"k{ks[0]}x{ks[1]}" if ks else "") + (f"v{V}" if V != vector(dt, False) else "") + (f"r{reg}" if reg else "")
    return builtin(_kernels, k, f"pool{'max' if is_max else 'avg'}{tname[0]}{sw}{kn}",
                   f"{source_key(__file__)}|{tname}|{is_max}|{sw}|{ks}|{V}|{reg}|{PF[0]}",
                   lambda: _render(tname, is_max, sw, ks, V, reg), 4)


def reg_rsh(reg) -> int:
    """The row stride a register kernel's row pairs and groups serve (1 or 2), 0: none (rows one by one)."""
    return reg if reg in (1, 2) else 0


def use_reg(KH, KW, sw, dh, dw, is_max) -> bool:
    """Whether the register kernel (no row buffer) takes this window: fixed windows at column strides 1-2."""
    return REG[0] != "0" and sw in REG_STRIDES and fixed_window(KH, KW, dh, dw) is not None and (
        is_max or REG[0] != "max")


def vector(dt, narrow: bool) -> int:
    """Lanes of the kernels' vectors: two 256-bit registers' worth, or one (``narrow``: planes whose output rows
    fit in one, the horizontal pass then half the work)."""
    n = 16 if dt == np.float32 else 8
    return n // 2 if narrow else n


def narrow(OW, dt, KH, KW, dh, dw) -> bool:
    """Output rows of at most half a (two-register) vector, fixed windows: the one-register kernel."""
    return fixed_window(KH, KW, dh, dw) is not None and OW <= vector(dt, True)


def fixed_window(KH, KW, dh, dw):
    """The (KH, KW) of the kernel specialized for this window (unrolled taps), or None (the generic one)."""
    return (KH, KW) if dh == dw == 1 and KH <= FIXED_MAX and KW <= FIXED_MAX else None


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
_PAR_NS = 22000.0
_UNITS_PER_THREAD = 8
_BATCH_MIN = 2
_BATCH_ELEMS = 512
_plans: dict = {}
# NEE_POOL_REG=0 keeps the row-buffer kernels for every window ("max": the register kernel for max pools only)
REG = [os.environ.get("NEE_POOL_REG", "1")]
REG_STRIDES = (1, 2)
GR = 4                          # output rows of a group (rows of one output vector)
PF = [os.environ.get("NEE_POOL_PF", "1") != "0"]     # NEE_POOL_PF=0: the register kernel without its prefetches (A/B)


class _Plan:
    __slots__ = ("OH", "OW", "P", "base", "dv", "est")


def _plan(P, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip, div, dt, nt):
    key = (P, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip, div, dt.char, REG[0], nt)
    pl = _plans.get(key)
    if pl is not None:
        return pl
    V = vector(dt, narrow(OW, dt, KH, KW, dh, dw))
    nov = -(-OW // V)
    TL = max(pw + -(-W // V) * V, nov * V * sw + (KW - 1) * dw)
    TL = -(-TL // V) * V
    # every buffer read: vertical stores at PW + c < PW + ceil(W / V) * V; horizontal loads below
    # (nov - 1) * V * sw + (KW - 1) * dw + sw * V
    if pw + -(-W // V) * V > TL or (nov - 1) * V * sw + (KW - 1) * dw + sw * V > TL:
        raise AssertionError("pool_native: row buffer too short")
    reg = use_reg(KH, KW, sw, dh, dw, is_max)
    if (TL * dt.itemsize * _BATCH_MIN > MAX_ROW_BYTES and not reg) or W >= 1 << 30:
        pl = None
    else:
        # work (one thread, float32): the fixed-window kernels (fit to 15-127 us on the light models' 3x3 pools
        # before the one-register kernels):
        # ~0.032 ns per input element read per window row, ~0.14 ns per output tap, ~1.8 ns per output row,
        # ~50 ns per plane; the generic kernel (measured 22-153 us on them): ~0.06 ns per input element read per
        # window row, ~0.08 ns per output tap, ~8 ns per output row
        if fixed_window(KH, KW, dh, dw):
            est = P * (0.032 * OH * W * min(KH, H) + 0.14 * OH * OW * KW + 1.8 * OH + 50.0)
            if V < vector(dt, False):
                est *= 0.6      # (one-register vectors: 272 7x7 outputs from 14x14, 25 -> 14.5 us)
        else:
            est = P * (0.06 * OH * W * min(KH, H) + 0.08 * OH * OW * KW + 8.0 * OH)
        est *= 2 if dt == np.float64 else 1
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
        fixed = fixed_window(KH, KW, dh, dw)
        base = np.zeros(_P_N + (2 * OH if fixed else 0), np.int64)
        if reg:
            # (spare words: the kernel reads the row table's word GR - 1 past a row before checking it exists)
            base = np.zeros(_P_N + OH + -(-OW // V) * reg_vectors(sw, KW, V)[0] + GR, np.int64)
        # RP: the last output's window reaches past the row into the buffer's right padding
        rp = int((OW - 1) * sw + (KW - 1) * dw >= pw + W)
        base[:_P_CTR] = (H, W, OH, OW, KH, KW, sh, ph, pw, dh, dw, NB, RB, G, T1, TL, BR, P * H * W, rp)
        if reg:
            tab = _reg_table(H, W, OH, OW, KH, KW, sh, sw, ph, pw, V)
            base[_P_N:_P_N + len(tab)] = tab
        elif fixed:
            base[_P_N:] = _row_table(H, W, OH, KH, sh, ph, V)
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


def _row_table(H, W, OH, KH, sh, ph, V):
    """The fixed-window kernels' per-output-row words (dilation 1): (offset of the first valid window row in the
    plane) << 8 | (count of valid window rows, 0..KH), then the plane offset past the last element the row's tail
    vectors read with plain loads (row offset + whole-vector columns + (count - 1) rows + one vector)."""
    xro, nk = _window_rows(H, W, OH, KH, sh, ph)
    te = xro + (W // V) * V + (nk - 1) * W + V
    return np.concatenate([(xro << 8) | nk, te])


def _window_rows(H, W, OH, KH, sh, ph):
    """(plane offset of each output row's first valid window row, count of valid window rows 0..KH): dilation 1."""
    hs = np.arange(OH, dtype=np.int64) * sh - ph
    k0 = np.maximum(-hs, 0)
    k1 = np.where(H - hs > 0, np.minimum(H - hs, KH), 0)
    nk = np.maximum(k1 - k0, 0)
    if nk.max(initial=0) > 255 or KH > 255:
        raise AssertionError("pool_native: window too tall for the row table")
    return np.where(nk > 0, hs + k0, 0) * W, nk


def _reg_table(H, W, OH, OW, KH, KW, sh, sw, ph, pw, V):
    """The register kernel's words after the params: _row_table's first OH (first valid window row, count), then
    per output vector of a row (ceil(OW / V)) and column vector m < NV, the mask of its lanes inside the row (column
    j * sw - PW + m * V + lane in [0, W))."""
    xro, nk = _window_rows(H, W, OH, KH, sh, ph)
    NV, car = reg_vectors(sw, KW, V)
    nit = -(-OW // V)
    c = (np.arange(nit, dtype=np.int64)[:, None, None] * V * sw - pw + np.arange(NV)[None, :, None] * V
         + np.arange(V)[None, None, :])
    bits = ((c >= 0) & (c < W)).astype(np.int64) << np.arange(V, dtype=np.int64)
    return np.concatenate([(xro << 8) | nk, bits.sum(axis=2).reshape(-1)])


def pool2d(x, res, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip=False, div=0) -> bool:
    """res (N, C, OH, OW) = max / average pooling of x (N, C, H, W) (C-contiguous, float32 / float64, same
    dtype); ``cip``: count_include_pad, ``div``: divisor_override (0: none).  False (nothing written) where
    no kernel takes it (other dtypes or column strides, rows too wide for the stack buffer)."""
    key = (x.shape, res.shape, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip, div, x.dtype.char, res.dtype.char,
           threads.NUM_THREADS, MODE[0], REG[0])
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
    f = kernel(dt, is_max, sw, fixed_window(KH, KW, dh, dw), vector(dt, narrow(OW, dt, KH, KW, dh, dw)),
               sh if use_reg(KH, KW, sw, dh, dw, is_max) else 0)
    base, dv = pl.base, pl.dv
    if pl.est > 1:
        from . import conv_direct
        g = conv_direct._native_parallel(f, 4, pl.est)
        if g is not None:
            run = lambda x, res: g(x, res, dv, base.copy())  # noqa: E731
            run.calls = lambda x, res: _calls(g.direct[0], g.direct[1] + (x, res, dv), base)
            return run
        n = pl.est

        def pooled(x, res):
            p = base.copy()
            threads.run_parallel(lambda _: f(x, res, dv, p), [None] * n)
        return pooled
    run = lambda x, res: f(x, res, dv, base.copy())  # noqa: E731
    run.calls = lambda x, res: _calls(f, (x, res, dv), base)
    return run


def _calls(fn, args, base):
    """(native_chain) a runner's call ``fn(*args, params)`` on a params copy of its own, its claim counter reset
    before each replay (the kernel writes no other word of it)."""
    p = base.copy()
    return [native_chain.lower(fn, args + (p,), (p, _P_CTR))]


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
            f.calls = lambda outs, ins: [(g, (ins[0].reshape(-1), outs[0].reshape(-1), n, is_max, dv, 0, P), None)]
            return f
        chunks = threads.split(P, 2 * nt0)

        def f(outs, ins):
            if threads.NUM_THREADS != nt0:
                return False
            xf, of = ins[0].reshape(-1), outs[0].reshape(-1)
            threads.run_parallel(lambda c: g(xf, of, n, is_max, dv, c[0], c[1]), chunks)
            return True
        return f
    key = (x.shape, out.shape, KH, KW, sh, sw, ph, pw, dh, dw, is_max, cip, div, dt.char, dt.char, nt0, mode0, REG[0])
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
    rc = getattr(run, "calls", None)
    if rc is not None:
        f.calls = lambda outs, ins: rc(ins[0], outs[0]) if MODE[0] == mode0 else None
    return f
