"""Direct (im2col-free) float32 2-D convolution: register-tiled LLVM IR micro-kernels, no column matrix.

* Input: each image zero-padded and split into its stride phases in a scratch ``xq[c][phase][S]`` (the
  padded-rows layout of conv.py's ``_conv_wide``): every (channel, phase) a flat plane of rows ``Wq``
  wide, so tap (kh, kw) of the output pixel at "wide" index ``q = oh * Wq + ow`` reads
  ``xq[c, phase, q + off(kh, kw)]``.  The "chan" kernel (its pixels' positions from a table) reads strided convs
  from the padded input unsplit (one phase, ``q = oh * sh * Wq + ow * sw``): a copy of contiguous rows.  Unpadded
  stride-1 convs on "chan" read the input itself ("pix" reads every input through its padded copy).  The copy
  (``_fill``): one compiled kernel (``_render_fill``), split over the threads for large inputs.
* Weights: packed once per weight buffer as ``[ceil(O / CW)][C * KH * KW][CW]`` (zero rows past O), kept
  in kernels/winograd.py's cache (``winograd.weights(w, tag, transform)``: keyed by the buffer, checked
  bitwise on every call, dropped with the buffer; weights changing on every call are not packed and the
  caller's other paths run).
* Vector width ``VEC`` (fixed by the first ``available()``): 16 lanes (zmm) on AVX-512F hosts, 8 (ymm) on AVX2 + FMA
  hosts (``NEE_CONV_DIRECT_VEC=8``: 8 on an AVX-512 host too).  Below, "16" reads VEC; the tile shapes are per width
  (``_PIX_SHAPES16`` / ``_CHAN_SHAPES16`` for 32 zmm registers, ``_PIX_SHAPES8`` / ``_CHAN_SHAPES8`` for 16 ymm: at
  most 12 accumulators), the "chan" / "dw" stores' in-register transposition has an 8 x 8 ladder of its own
  (``_transpose8_ir``: unpacks, in-lane shuffles, 128-bit halves), and the kernels' cache keys carry the width.
  The 16-lane kernels' IR is unchanged by the 8-lane ones.
* Two kernel families, one loop over the C * KH * KW (channel, tap) pairs with their offsets from a table,
  so one machine-code function per tile shape serves every conv shape (5-6 functions, ~0.1 s each to
  compile, cached on disk by llvm_render):
  - "chan" (NB, R): NB blocks of 16 output channels x R output pixels (compact pixel indices, their wide
    input positions from a table): per pair NB weight vectors and R broadcast input scalars, NB x R zmm
    accumulators started at the bias.  The pairs go in chunks whose weights stay in L2 (partial sums
    parked in a scratch between chunks); the last chunk transposes the tile in registers (three levels of
    shuffles: each channel's R <= 8 pixels one row) and stores the rows (masked past the last pixel) into
    the NCHW output.  No wasted lanes but channel-block and pixel tails; the faster family where its lanes
    are as well used (``plan``).
  - "pix" (R, P): R output channels x P vectors of 16 consecutive wide pixels: per pair P input vector
    loads and R broadcast weights; written as wide rows (masked at the end), compacted into the output
    (or written straight to it when ``Wq == OW``; the 8-lane kernel, ``_render_pix8``, writes the compact rows
    itself and takes its tiles in super-tiles of all channel blocks).  Wastes the ``Wq - OW`` padding columns
    but has no per-tile transposition: output channel counts the "chan" blocks of 16 fit badly (3 -> 24 stems).
  Both take groups (one launch over all of them: each group's channel blocks packed on their own, the
  tile's group from its channel block), a second per-channel bias (a folded BatchNorm's shift: summed into
  the bias the accumulators start from) and relu in their final stores (kernels/conv_epilogue.py).
  ``plan`` picks the family and tile shape with the most useful lanes (``_CHAN_BONUS``, smaller over few (channel,
  tap) pairs where "pix" needs no compaction: ``_CHAN_STORE_K``); strided convs take "chan" (no phase split).
  - "dw" (NB, R): depthwise convs (one output per input channel) through the "chan" kernel with each
    channel its own input: the padded phase planes channel-last (``xq[phase][pixel][C]``, ``_fill_cl``),
    per tap NB weight vectors and NB x R input vectors (a pixel's 16 channels), the same transposed store.
* Threads: each calls the kernel once and claims runs of tiles (channel-block-major) from an atomic counter
  in the params array: a worker that starts late (the machine is shared) finds the tiles taken and returns.
* Every read index is checked in Python when a shape's layout is built (``_Layout``, cached per shape):
  the largest tap offset plus the largest tile extent / pixel-table entry lies inside ``xq``; writes go
  to rows < O and pixels < L only.

Used by conv.py's ``conv2d_into`` for float32, AVX-512F or AVX2 + FMA (``try_conv2d``; not depthwise convs of
several outputs per input channel) where ``pays``: NEE_CONV_DIRECT=0 never, =1 every conv it can take (tests,
benchmarks), unset: the cost rule (on AVX2 the larger one-group 1x1 convs stay on OpenBLAS: ``_AVX2_1X1_FLOPS``).
"""
from __future__ import annotations

import functools
import hashlib
import os
import threading
import weakref

import numpy as np

from .. import native_chain, threads
from . import conv1x1_packed, conv_act, winograd

VERSION = "1"
VEC = 16                      # float32 lanes of one vector: 16 (a zmm, AVX-512F) or 8 (a ymm, AVX2 + FMA)

_lock = threading.Lock()
_kernels: dict = {}
_feat = [None]
# NEE_CONV_DIRECT_VEC=8: the AVX2 kernels (8-lane vectors, tiles for 16 registers) on an AVX-512 host too (tests,
# comparisons); unset: the host's widest
_VEC_ENV = os.environ.get("NEE_CONV_DIRECT_VEC", "")


def available() -> bool:
    """AVX-512F (16-lane vectors, 32 registers) or AVX2 + FMA (8-lane vectors, 16 registers) on this CPU.  The
    first call fixes the width: ``VEC`` and the tile shapes ``PIX_SHAPES`` / ``CHAN_SHAPES`` (the AVX2 ones sized
    to fit 16 registers)."""
    if _feat[0] is None:
        width = 0
        try:
            from .. import llvm_render
            _, llvm = llvm_render._init()
            f = llvm.get_host_cpu_features()
            if f.get("avx512f", False) and _VEC_ENV != "8":
                width = 16
            elif f.get("avx2", False) and f.get("fma", False):
                width = 8
        except Exception:   # noqa: BLE001 - no llvmlite / no native target: not available
            width = 0
        _set_width(width or 16)
        _feat[0] = bool(width)
    return _feat[0]


def _set_width(width: int) -> None:
    """VEC and the tile shapes for vectors of ``width`` lanes (16: the AVX-512 tuning, unchanged)."""
    global VEC, PIX_SHAPES, CHAN_SHAPES
    VEC = width
    PIX_SHAPES, CHAN_SHAPES = (_PIX_SHAPES16, _CHAN_SHAPES16) if width == 16 else (_PIX_SHAPES8, _CHAN_SHAPES8)
    _layouts.clear()
    _pays.clear()


# ---------------------------------------------------------------- IR
# params (int64): 0 K (channel-tap pairs), 1 O (rows stored), 2 out row stride (elements per channel of
# the wide output), 3 Lw (wide pixels stored per row), 4 pixel tiles per channel block, 5 tiles per claim,
# 6 tiles, 7 channel blocks per group, 8 input elements per group (xq), 9 output channels per group (rows
# stored per group: row g * that + i for i below it), 10 the claim counter (atomic: the threads calling the
# kernel at once take runs of tiles from it); then K offsets (elements into xq, tile start excluded)
_P_K, _P_O, _P_OS, _P_LW, _P_NPT, _P_G, _P_T1, _P_NBG, _P_XG, _P_OG, _P_CTR, _P_OFF = range(12)


def _relu_ir(a, name: str, val: str, act=True, V: int = 0) -> str:
    """Emit the activation ``act`` (True: torch's relu, x < 0 -> 0, NaN and -0.0 kept; or kernels/conv_act.py's
    steps) of the V-lane (default VEC) vector ``val``, names starting with ``%name``; returns the value's name."""
    V = V or VEC
    if conv_act.is_relu(act):      # (relu as it was written before the other activations: the same IR)
        a(f'  %{name}.lt = fcmp olt <{V} x float> {val}, zeroinitializer')
        a(f'  %{name} = select <{V} x i1> %{name}.lt, <{V} x float> zeroinitializer, <{V} x float> {val}')
        return f"%{name}"
    return conv_act.apply_ir(a, act, V, "float", val, name)


def _params_and_claim(a, names, ctr_slot: int, off_slot: int, extra: list, body: str) -> None:
    """The entry block both kernel families share (the params array's words as ``%name``, the claim counter
    and the offset table, ``extra`` lines) and the claim of a run of G tiles [%gt0, %gt1) from the atomic
    counter, branching to ``body`` (``%done`` when none is left)."""
    for i, nm in enumerate(names):
        a(f'  %{nm}.p = getelementptr i64, i64* %p, i64 {i}')
        a(f'  %{nm} = load i64, i64* %{nm}.p')
    a(f'  %ctr = getelementptr i64, i64* %p, i64 {ctr_slot}')
    a(f'  %offs = getelementptr i64, i64* %p, i64 {off_slot}')
    for line in extra:
        a(line)
    a('  br label %claim')
    claim_ir(a, body)


def claim_ir(a, body: str) -> None:
    """The claim of a run of G units [%gt0, %gt1) of %T1 from the atomic counter %ctr, branching to ``body``
    (``%done`` when none is left): the head of every self-claiming kernel here and in pool_native /
    depthwise_native."""
    for line in ("claim:", "  %g = atomicrmw add i64* %ctr, i64 1 monotonic", "  %gt0 = mul i64 %g, %G",
                 "  %any = icmp slt i64 %gt0, %T1", "  br i1 %any, label %grp, label %done", "grp:",
                 "  %gt1a = add i64 %gt0, %G", "  %gts = icmp slt i64 %gt1a, %T1",
                 "  %gt1 = select i1 %gts, i64 %gt1a, i64 %T1", f"  br label %{body}"):
        a(line)


def plane_band_ir(a, tname: str) -> None:
    """Block ``unit``: unit %u (from %grp, or %u1 from %unit_end) is band %bd of plane %pl (%NB bands of %RB
    output rows per plane): output rows [%r0, %r1) of %OH, and the plane's input / output bases %xb / %ob (planes
    of %HW / %OHW elements of type ``tname``).  Shared by pool_native and depthwise_native."""
    for line in ("unit:", "  %u = phi i64 [ %gt0, %grp ], [ %u1, %unit_end ]", "  %pl = udiv i64 %u, %NB",
                 "  %bd.m = mul i64 %pl, %NB", "  %bd = sub i64 %u, %bd.m", "  %r0 = mul i64 %bd, %RB",
                 "  %r1a = add i64 %r0, %RB", "  %r1s = icmp slt i64 %r1a, %OH",
                 "  %r1 = select i1 %r1s, i64 %r1a, i64 %OH", "  %xbo = mul i64 %pl, %HW",
                 f"  %xb = getelementptr {tname}, {tname}* %x, i64 %xbo", "  %obo = mul i64 %pl, %OHW",
                 f"  %ob = getelementptr {tname}, {tname}* %out, i64 %obo"):
        a(line)


def _pix_loop(a, R: int, P: int, v: str, vp: str) -> None:
    """The "pix" tile's R x P accumulators started at the bias and its (channel, tap) loop (one offset load, P
    input vectors, R broadcast weights, R x P FMAs per pair), ending in the branch to ``store``: shared by the
    16-lane kernel (:func:`_render`) and the 8-lane one (:func:`_render_pix8`)."""
    for r in range(R):
        a(f'  %bi{r} = add i64 %o0, {r}')
        a(f'  %bp{r} = getelementptr float, float* %bias, i64 %bi{r}')
        a(f'  %bs{r} = load float, float* %bp{r}')
        a(f'  %bv{r}.0 = insertelement {v} undef, float %bs{r}, i32 0')
        a(f'  %bv{r} = shufflevector {v} %bv{r}.0, {v} undef, <{VEC} x i32> zeroinitializer')
    a('  br label %k_loop')
    # ---- (channel, tap) loop
    a('k_loop:')
    a('  %k = phi i64 [ 0, %tile ], [ %k1, %k_loop ]')
    for r in range(R):
        for j in range(P):
            a(f'  %acc{r}_{j} = phi {v} [ %bv{r}, %tile ], [ %nacc{r}_{j}, %k_loop ]')
    a('  %offp = getelementptr i64, i64* %offs, i64 %k')
    a('  %off = load i64, i64* %offp')
    a('  %xk = getelementptr float, float* %xb, i64 %off')
    for j in range(P):
        a(f'  %xp{j}.f = getelementptr float, float* %xk, i64 {j * VEC}')
        a(f'  %xp{j} = bitcast float* %xp{j}.f to {vp}')
        a(f'  %xv{j} = load {v}, {vp} %xp{j}, align 4')
    a(f'  %wk0 = mul i64 %k, {R}')
    a('  %wk = getelementptr float, float* %wb, i64 %wk0')
    for r in range(R):
        a(f'  %wp{r} = getelementptr float, float* %wk, i64 {r}')
        a(f'  %ws{r} = load float, float* %wp{r}')
        a(f'  %wv{r}.0 = insertelement {v} undef, float %ws{r}, i32 0')
        a(f'  %wv{r} = shufflevector {v} %wv{r}.0, {v} undef, <{VEC} x i32> zeroinitializer')
        for j in range(P):
            a(f'  %nacc{r}_{j} = call {v} @llvm.fma.v{VEC}f32({v} %xv{j}, {v} %wv{r}, {v} %acc{r}_{j})')
    a('  %k1 = add i64 %k, 1')
    a('  %kc = icmp slt i64 %k1, %K')
    a('  br i1 %kc, label %k_loop, label %store')


def _render(R: int, P: int, relu: bool = False) -> str:
    v = f"<{VEC} x float>"
    vp = f"<{VEC} x float>*"
    L = []
    a = L.append
    a(f'declare {v} @llvm.fma.v{VEC}f32({v}, {v}, {v})')
    a(f'declare void @llvm.masked.store.v{VEC}f32.p0v{VEC}f32({v}, {vp}, i32, <{VEC} x i1>)')
    a('define void @"kernel"(float* noalias %x, float* noalias %w, float* noalias %out, float* noalias %bias, '
      'i64* noalias %p) {')
    a('entry:')
    _params_and_claim(a, ("K", "O", "OS", "LW", "NPT", "G", "T1", "NBG", "XG", "OGR"), _P_CTR, _P_OFF,
                      [f'  %KR = mul i64 %K, {R}'], "tile")
    # ---- tile loop
    a('tile:')
    a('  %t = phi i64 [ %gt0, %grp ], [ %t1, %tile_end ]')
    a('  %ob = udiv i64 %t, %NPT')
    a('  %pt = urem i64 %t, %NPT')
    a(f'  %p0 = mul i64 %pt, {P * VEC}')
    a(f'  %o0 = mul i64 %ob, {R}')
    a('  %wb0 = mul i64 %ob, %KR')
    a('  %wb = getelementptr float, float* %w, i64 %wb0')
    # the group of this channel block: its input channels at grp * XG, its rows at grp * OGR + lb * R
    a('  %gi = udiv i64 %ob, %NBG')
    a('  %lbm = mul i64 %gi, %NBG')
    a('  %lb = sub i64 %ob, %lbm')
    a(f'  %lo0 = mul i64 %lb, {R}')
    a('  %gro = mul i64 %gi, %OGR')
    a('  %xgo = mul i64 %gi, %XG')
    a('  %xbo = add i64 %xgo, %p0')
    a('  %xb = getelementptr float, float* %x, i64 %xbo')
    _pix_loop(a, R, P, v, vp)
    # ---- stores: rows < O, pixels < LW (the last vector masked)
    a('store:')
    idx = ", ".join(f"i64 {i}" for i in range(VEC))
    for r in range(R):
        a(f'  %oi{r} = add i64 %lo0, {r}')
        a(f'  %ok{r} = icmp slt i64 %oi{r}, %OGR')
        a(f'  br i1 %ok{r}, label %st{r}, label %tile_end')
        a(f'st{r}:')
        a(f'  %og{r} = add i64 %gro, %oi{r}')
        a(f'  %ro{r} = mul i64 %og{r}, %OS')
        a(f'  %orow{r} = getelementptr float, float* %out, i64 %ro{r}')
        for j in range(P):
            lab = f"s{r}_{j}"
            val = _relu_ir(a, f"rl{lab}", f"%nacc{r}_{j}", relu) if relu else f"%nacc{r}_{j}"
            a(f'  %q{lab} = add i64 %p0, {j * VEC}')
            a(f'  %op{lab}.f = getelementptr float, float* %orow{r}, i64 %q{lab}')
            a(f'  %op{lab} = bitcast float* %op{lab}.f to {vp}')
            a(f'  %e{lab} = add i64 %q{lab}, {VEC}')
            a(f'  %full{lab} = icmp sle i64 %e{lab}, %LW')
            a(f'  br i1 %full{lab}, label %f{lab}, label %m{lab}')
            a(f'f{lab}:')
            a(f'  store {v} {val}, {vp} %op{lab}, align 4')
            a(f'  br label %n{lab}')
            a(f'm{lab}:')
            a(f'  %rem{lab} = sub i64 %LW, %q{lab}')
            a(f'  %rb{lab}.0 = insertelement <{VEC} x i64> undef, i64 %rem{lab}, i32 0')
            a(f'  %rb{lab} = shufflevector <{VEC} x i64> %rb{lab}.0, <{VEC} x i64> undef, '
              f'<{VEC} x i32> zeroinitializer')
            a(f'  %mk{lab} = icmp slt <{VEC} x i64> <{idx}>, %rb{lab}')
            a(f'  call void @llvm.masked.store.v{VEC}f32.p0v{VEC}f32({v} {val}, {vp} %op{lab}, i32 4, '
              f'<{VEC} x i1> %mk{lab})')
            a(f'  br label %n{lab}')
            a(f'n{lab}:')
    a('  br label %tile_end')
    a('tile_end:')
    a('  %t1 = add i64 %t, 1')
    a('  %tc = icmp slt i64 %t1, %gt1')
    a('  br i1 %tc, label %tile, label %claim')
    a('done:')
    a('  ret void')
    a('}')
    return "\n".join(L) + "\n"


# the 8-lane "pix" kernel: its output rows' lines this many floats ahead of a tile's stores prefetched for writing
# (0: none).  SqueezeNet's 3 -> 64 stem (3.2 MB out), caches evicted before each call (bench/conv_vs_ort.py --cold,
# 1 thread): 1184 -> 1089 us; warm: 717 -> 712
_PIX_PF8 = 64
# the 8-lane "pix" kernel's tiles go in super-tiles of this many pixel tiles: all channel blocks of one (its input
# lines read from L1 by each block), then the next; block by block over all pixels (the 16-lane kernel's order)
# streamed the input from L2 / L3 once per block.  1 thread, "pix" forced, relu, 3x3 stride 2 on 112x112 -> 64 (us,
# block by block / super-tiles of 1, 4, 8, 16): 24 inputs 2192 / 1651 / 1320 / 1381 / 1340, 6 inputs 575 / 406 /
# 331 / 328 / 383; the 224x224 stems alike (3 -> 64 717 / 1228 / 740 / 717 / 727, 3 -> 24 297 / 358 / 314 / 294
# / 299)
_PIX_SPT8 = 8
# the 8-lane "pix" kernel's params after the K offsets: WQ, OWC, OHC (_pix_store8), SPT (pixel tiles per super-tile)
_PIX_PARAMS8 = ['  %px8 = getelementptr i64, i64* %offs, i64 %K'] + [
    line for i, nm in enumerate(("WQ", "OWC", "OHC", "SPT"))
    for line in (f'  %{nm}.p = getelementptr i64, i64* %px8, i64 {i}', f'  %{nm} = load i64, i64* %{nm}.p')]


def _pix_store8(a, R: int, P: int, relu: bool) -> None:
    """The 8-lane "pix" kernel's stores (block ``store`` on, to ``tile_end``; the tile's first wide pixel at row
    %ohb, column %colb): each vector of 8 wide pixels straight into the compact NCHW output, the padding columns
    skipped (no wide rows, no compaction pass: 118 us of SqueezeNet's 3 -> 64 stem on one thread).  Params after
    the K offsets: WQ (wide row length), OWC, OHC (output row length and rows; a shape without padding columns
    passes one row of L pixels: WQ = OWC = L, OHC = 1); the output row stride (OS) is L.  A vector inside one
    row's OWC columns: one plain store per channel; one crossing a row end (or past the last pixel): per row it
    touches, the lanes in that row's columns, masked (none past row OHC).  Rows < O only."""
    v, vp = "<8 x float>", "<8 x float>*"
    acted = {}
    a('store:')
    for r in range(R):
        a(f'  %oi{r} = add i64 %lo0, {r}')
        a(f'  %ok{r} = icmp slt i64 %oi{r}, %OGR')
        a(f'  %og{r} = add i64 %gro, %oi{r}')
        a(f'  %ro{r} = mul i64 %og{r}, %OS')
        a(f'  %orow{r} = getelementptr float, float* %out, i64 %ro{r}')
        for j in range(P):
            if relu:
                acted[r, j] = _relu_ir(a, f"rl{r}_{j}", f"%nacc{r}_{j}", relu, 8)
    val = (lambda r, j: acted[r, j]) if relu else (lambda r, j: f"%nacc{r}_{j}")
    if _PIX_PF8:
        # the rows' lines _PIX_PF8 floats past the tile's first pixel prefetched for writing (no faults)
        a('  %pfq0 = mul i64 %ohb, %OWC')
        a('  %pfq1 = add i64 %pfq0, %colb')
        a(f'  %pfq = add i64 %pfq1, {_PIX_PF8}')
        for r in range(R):
            a(f'  %pf{r}.f = getelementptr float, float* %orow{r}, i64 %pfq')
            a(f'  %pf{r} = bitcast float* %pf{r}.f to i8*')
            a(f'  call void @llvm.prefetch.p0i8(i8* %pf{r}, i32 1, i32 3, i32 1)')
    a('  br label %v0')

    def rows(lab: str, store, end: str) -> None:
        # store(r) for the rows r < R while %ok<r> (rows past O: none), then to ``end``
        for r in range(R):
            if r:
                a(f'  br i1 %ok{r}, label %{lab}r{r}, label %{end}')
                a(f'{lab}r{r}:')
            store(r)
        a(f'  br label %{end}')

    for j in range(P):
        nxt = f"v{j + 1}" if j + 1 < P else "tile_end"
        # the vector's first pixel: row %oh<j>, column %col<j> (wide)
        a(f'v{j}:')
        a(f'  %cj{j} = add i64 %colb, {8 * j}')
        a(f'  %cge{j} = icmp uge i64 %cj{j}, %WQ')
        a(f'  br i1 %cge{j}, label %dv{j}, label %cx{j}')
        a(f'dv{j}:')
        a(f'  %qd{j} = udiv i64 %cj{j}, %WQ')
        a(f'  %qm{j} = mul i64 %qd{j}, %WQ')
        a(f'  %cr{j} = sub i64 %cj{j}, %qm{j}')
        a(f'  %ohd{j} = add i64 %ohb, %qd{j}')
        a(f'  br label %cx{j}')
        a(f'cx{j}:')
        a(f'  %vh{j} = phi i64 [ %ohb, %v{j} ], [ %ohd{j}, %dv{j} ]')
        a(f'  %vc{j} = phi i64 [ %cj{j}, %v{j} ], [ %cr{j}, %dv{j} ]')
        a(f'  %ce{j} = add i64 %vc{j}, 8')
        a(f'  %fin{j} = icmp ule i64 %ce{j}, %OWC')
        a(f'  %rin{j} = icmp ult i64 %vh{j}, %OHC')
        a(f'  %fast{j} = and i1 %fin{j}, %rin{j}')
        a(f'  %pr{j} = mul i64 %vh{j}, %OWC')
        a(f'  %pos{j} = add i64 %pr{j}, %vc{j}')
        a(f'  br i1 %fast{j}, label %f{j}, label %sl{j}')
        a(f'f{j}:')

        def fast(r, j=j):
            a(f'  %fp{r}_{j}.f = getelementptr float, float* %orow{r}, i64 %pos{j}')
            a(f'  %fp{r}_{j} = bitcast float* %fp{r}_{j}.f to {vp}')
            a(f'  store {v} {val(r, j)}, {vp} %fp{r}_{j}, align 4')
        rows(f"f{j}", fast, nxt)
        # crossing a row end: row oh + k takes lanes [k * WQ - col, + OWC) of the vector
        a(f'sl{j}:')
        a(f'  %sk{j} = phi i64 [ 0, %cx{j} ], [ %sk1{j}, %sb{j}end ]')
        a(f'  %skw{j} = mul i64 %sk{j}, %WQ')
        a(f'  %s{j} = sub i64 %skw{j}, %vc{j}')
        a(f'  %row{j} = add i64 %vh{j}, %sk{j}')
        a(f'  %sin{j} = icmp slt i64 %s{j}, 8')
        a(f'  %rw{j} = icmp ult i64 %row{j}, %OHC')
        a(f'  %more{j} = and i1 %sin{j}, %rw{j}')
        a(f'  br i1 %more{j}, label %sb{j}, label %{nxt}')
        a(f'sb{j}:')
        a(f'  %sv{j}.0 = insertelement <8 x i64> undef, i64 %s{j}, i32 0')
        a(f'  %sv{j} = shufflevector <8 x i64> %sv{j}.0, <8 x i64> undef, <8 x i32> zeroinitializer')
        a(f'  %se{j} = add i64 %s{j}, %OWC')
        a(f'  %sev{j}.0 = insertelement <8 x i64> undef, i64 %se{j}, i32 0')
        a(f'  %sev{j} = shufflevector <8 x i64> %sev{j}.0, <8 x i64> undef, <8 x i32> zeroinitializer')
        lanes = "<i64 0, i64 1, i64 2, i64 3, i64 4, i64 5, i64 6, i64 7>"
        a(f'  %mlo{j} = icmp sge <8 x i64> {lanes}, %sv{j}')
        a(f'  %mhi{j} = icmp slt <8 x i64> {lanes}, %sev{j}')
        a(f'  %mk{j} = and <8 x i1> %mlo{j}, %mhi{j}')
        a(f'  %br{j} = mul i64 %row{j}, %OWC')
        a(f'  %sbase{j} = sub i64 %br{j}, %s{j}')

        def slow(r, j=j):
            a(f'  %sp{r}_{j}.f = getelementptr float, float* %orow{r}, i64 %sbase{j}')
            a(f'  %sp{r}_{j} = bitcast float* %sp{r}_{j}.f to {vp}')
            a(f'  call void @llvm.masked.store.v8f32.p0v8f32({v} {val(r, j)}, {vp} %sp{r}_{j}, i32 4, <8 x i1> '
              f'%mk{j})')
        rows(f"sb{j}", slow, f"sb{j}end")
        a(f'sb{j}end:')
        a(f'  %sk1{j} = add i64 %sk{j}, 1')
        a(f'  br label %sl{j}')


def _render_pix8(R: int, P: int, relu: bool = False) -> str:
    """The 8-lane "pix" kernel (R output channels x P vectors of 8 wide pixels; AVX2): as ``_render``'s, but the
    tile's channel block, pixel tile, group and first pixel's (row, column) carried from tile to tile (the claim's
    first tile divided out once: no divisions per tile, whose K can be as short as a stem's 27), the compact
    output stored directly (``_pix_store8``) and its lines prefetched for writing (``_PIX_PF8``)."""
    v, vp = "<8 x float>", "<8 x float>*"
    L = []
    a = L.append
    a(f'declare {v} @llvm.fma.v8f32({v}, {v}, {v})')
    a(f'declare void @llvm.masked.store.v8f32.p0v8f32({v}, {vp}, i32, <8 x i1>)')
    a('declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)')
    a('define void @"kernel"(float* noalias %x, float* noalias %w, float* noalias %out, float* noalias %bias, '
      'i64* noalias %p) {')
    a('entry:')
    _params_and_claim(a, ("K", "O", "OS", "LW", "NPT", "G", "T1", "NBG", "XG", "OGR"), _P_CTR, _P_OFF,
                      [f'  %KR = mul i64 %K, {R}'] + _PIX_PARAMS8, "first")
    a('first:')
    a('  %NOBT = udiv i64 %T1, %NPT')
    # the tiles in super-tiles of SPT pixel tiles (the last one: the rest): all channel blocks of a super-tile's
    # pixel tiles (its input lines stay in L1 across them), block by block.  A tile's counters from its index
    # (block ``dec``: at the claim's start and each block's first tile of a super-tile), else carried on
    a('  %SBS = mul i64 %NOBT, %SPT')
    a('  br label %dec')
    a('dec:')
    a('  %td = phi i64 [ %gt0, %first ], [ %t1, %tnx ]')
    a('  %st = udiv i64 %td, %SBS')
    a('  %stm = mul i64 %st, %SBS')
    a('  %rem = sub i64 %td, %stm')
    a('  %ptb = mul i64 %st, %SPT')
    a('  %ptr = sub i64 %NPT, %ptb')
    a('  %spl = icmp ult i64 %ptr, %SPT')
    a('  %sp.0 = select i1 %spl, i64 %ptr, i64 %SPT')
    a('  %ob.0 = udiv i64 %rem, %sp.0')
    a('  %obm.0 = mul i64 %ob.0, %sp.0')
    a('  %ptl.0 = sub i64 %rem, %obm.0')
    a('  %pt.0 = add i64 %ptb, %ptl.0')
    a('  %gi.0 = udiv i64 %ob.0, %NBG')
    a('  %gim.0 = mul i64 %gi.0, %NBG')
    a('  %lb.0 = sub i64 %ob.0, %gim.0')
    a(f'  %p0.0 = mul i64 %pt.0, {P * 8}')
    a('  %ohb.0 = udiv i64 %p0.0, %WQ')
    a('  %ohbm.0 = mul i64 %ohb.0, %WQ')
    a('  %colb.0 = sub i64 %p0.0, %ohbm.0')
    a('  br label %tile')
    cnt = ("ob", "pt", "ptl", "sp", "gi", "lb", "ohb", "colb")
    a('tile:')
    a('  %t = phi i64 [ %td, %dec ], [ %t1, %tnp ], [ %t1, %tnd ]')
    # from tnp / tnd: the block's next pixel tile (its first pixel's column on, row on past the row's end)
    nxt = {"pt": ("%pt1", "%pt1"), "ptl": ("%ptl1", "%ptl1"), "ohb": ("%ohb", "%ohb2"), "colb": ("%cb1", "%cb2")}
    for nm in cnt:
        p_, d_ = nxt.get(nm, (f"%{nm}", f"%{nm}"))
        a(f'  %{nm} = phi i64 [ %{nm}.0, %dec ], [ {p_}, %tnp ], [ {d_}, %tnd ]')
    a(f'  %p0 = mul i64 %pt, {P * 8}')
    a(f'  %o0 = mul i64 %ob, {R}')
    a('  %wb0 = mul i64 %ob, %KR')
    a('  %wb = getelementptr float, float* %w, i64 %wb0')
    a(f'  %lo0 = mul i64 %lb, {R}')
    a('  %gro = mul i64 %gi, %OGR')
    a('  %xgo = mul i64 %gi, %XG')
    a('  %xbo = add i64 %xgo, %p0')
    a('  %xb = getelementptr float, float* %x, i64 %xbo')
    _pix_loop(a, R, P, v, vp)
    _pix_store8(a, R, P, relu)
    # the next tile: the block's next pixel tile of the super-tile (its first pixel P * 8 wide pixels on), or
    # (its last done) the next block's first of the super-tile, or the next super-tile's first (``dec``)
    a('tile_end:')
    a('  %t1 = add i64 %t, 1')
    a('  %tc = icmp slt i64 %t1, %gt1')
    a('  br i1 %tc, label %tnx, label %claim')
    a('tnx:')
    a('  %ptl1 = add i64 %ptl, 1')
    a('  %ptw = icmp eq i64 %ptl1, %sp')
    a('  br i1 %ptw, label %dec, label %tnp')
    a('tnp:')
    a('  %pt1 = add i64 %pt, 1')
    a(f'  %cb1 = add i64 %colb, {P * 8}')
    a('  %cbw = icmp uge i64 %cb1, %WQ')
    a('  br i1 %cbw, label %tnd, label %tile')
    a('tnd:')
    a('  %cbq = udiv i64 %cb1, %WQ')
    a('  %cbm = mul i64 %cbq, %WQ')
    a('  %cb2 = sub i64 %cb1, %cbm')
    a('  %ohb2 = add i64 %ohb, %cbq')
    a('  br label %tile')
    a('done:')
    a('  ret void')
    a('}')
    return "\n".join(L) + "\n"


def _shuffler(a, pre: str, lanes: int):
    """The two-source shuffle both transpose ladders build from: ``shuf(s1, s2, target)`` of two sources
    ``(name, content)`` (content: the (pixel, channel) each of their ``lanes`` lanes holds) emits
    ``%<pre><n> = shufflevector`` (n counts up from 0) of the lanes ``target`` lists, and returns the result as a
    source."""
    k = [0]

    def shuf(s1, s2, target):
        pos = {rc: i for i, rc in enumerate(s1[1] + s2[1])}
        idx = ", ".join(f"i32 {pos[t]}" for t in target)
        nm = f"%{pre}{k[0]}"
        k[0] += 1
        a(f'  {nm} = shufflevector <{lanes} x float> {s1[0]}, <{lanes} x float> {s2[0]}, <{lanes} x i32> <{idx}>')
        return nm, target
    return shuf


def _transpose_ir(a, pre: str, vals: list) -> list:
    """The rows of R <= 8 vectors of 16 lanes (pixel r's 16 channels each): 16 <8 x float> values, row c =
    (vals[0][c], ..., vals[R-1][c], undefined lanes from R on), by three levels of two-source shuffles (pairs,
    quads, octets of pixels; 24 shuffles) and a half of each result."""
    src = [(nm, [(r, c) for c in range(VEC)]) for r, nm in enumerate(list(vals) + ["undef"] * (8 - len(vals)))]
    shuf = _shuffler(a, pre, VEC)
    # level 1: pixels (2k, 2k+1) interleaved, channels 8h .. 8h+7
    lv1 = {(q, h): shuf(src[2 * q], src[2 * q + 1], [(2 * q + i % 2, 8 * h + i // 2) for i in range(VEC)])
           for q in range(4) for h in range(2)}
    # level 2: pixels 4p .. 4p+3 of channels 8h + 4s .. +3
    lv2 = {(p_, h, s_): shuf(lv1[2 * p_, h], lv1[2 * p_ + 1, h],
                             [(4 * p_ + i % 4, 8 * h + 4 * s_ + i // 4) for i in range(VEC)])
           for p_ in range(2) for h in range(2) for s_ in range(2)}
    # level 3: all 8 pixels of channels 8h + 4s + 2t, +1
    rows = [None] * VEC
    for h in range(2):
        for s_ in range(2):
            for t in range(2):
                ch = 8 * h + 4 * s_ + 2 * t
                nm = shuf(lv2[0, h, s_], lv2[1, h, s_], [(i % 8, ch + i // 8) for i in range(VEC)])[0]
                for half in range(2):
                    rn = f"%{pre}r{ch + half}"
                    idx = ", ".join(f"i32 {8 * half + i}" for i in range(8))
                    a(f'  {rn} = shufflevector <{VEC} x float> {nm}, <{VEC} x float> undef, <8 x i32> <{idx}>')
                    rows[ch + half] = rn
    return rows


def _transpose8_ir(a, pre: str, vals: list) -> list:
    """The rows of R <= 8 vectors of 8 lanes (pixel r's 8 channels each): 8 <8 x float> values, row c =
    (vals[0][c], ..., vals[R-1][c], undefined lanes from R on), by AVX2's 8 x 8 ladder of two-source shuffles:
    in-lane unpacks (pairs of pixels), in-lane shuffles (quads), 128-bit halves (octets); 24 shuffles."""
    src = [(nm, [(r, c) for c in range(8)]) for r, nm in enumerate(list(vals) + ["undef"] * (8 - len(vals)))]
    shuf = _shuffler(a, pre, 8)
    # level 1 (unpcklps / unpckhps): pixels (2q, 2q+1) interleaved, channels 2h, 2h+1 | 2h+4, 2h+5
    lv1 = {}
    for q in range(4):
        for h in range(2):
            ch = (2 * h, 2 * h + 1, 2 * h + 4, 2 * h + 5)
            lv1[q, h] = shuf(src[2 * q], src[2 * q + 1], [(2 * q + i % 2, ch[i // 2]) for i in range(8)])
    # level 2 (shufps): pixels 4p .. 4p+3 of channel 2h+s | 2h+s+4
    lv2 = {(p_, h, s_): shuf(lv1[2 * p_, h], lv1[2 * p_ + 1, h],
                             [(4 * p_ + i % 4, 2 * h + s_ + 4 * (i // 4)) for i in range(8)])
           for p_ in range(2) for h in range(2) for s_ in range(2)}
    # level 3 (vperm2f128): all 8 pixels of channel c (low halves) and c + 4 (high halves)
    rows = [None] * 8
    for h in range(2):
        for s_ in range(2):
            c = 2 * h + s_
            for cc in (c, c + 4):
                rows[cc] = shuf(lv2[0, h, s_], lv2[1, h, s_], [(i, cc) for i in range(8)])[0]
    return rows


def _res_relu8(a, sfx: str, row: str, relu: bool) -> str:
    """Emit an 8-lane output row ``row`` + its residual row (``%etp`` at ``%yo<sfx>``, lanes past the last pixel
    (``%pmask``) not read), then torch's relu when ``relu``; returns the value's name (the AVX2 "chan" stores)."""
    a(f'  %eq{sfx}.f = getelementptr float, float* %etp, i64 %yo{sfx}')
    a(f'  %eq{sfx} = bitcast float* %eq{sfx}.f to <8 x float>*')
    a(f'  %ev{sfx} = call <8 x float> @llvm.masked.load.v8f32.p0v8f32(<8 x float>* %eq{sfx}, i32 4, '
      '<8 x i1> %pmask, <8 x float> zeroinitializer)')
    a(f'  %es{sfx} = fadd <8 x float> {row}, %ev{sfx}')
    row = f'%es{sfx}'
    if conv_act.is_relu(relu):
        a(f'  %el{sfx} = fcmp olt <8 x float> {row}, zeroinitializer')
        a(f'  %er{sfx} = select <8 x i1> %el{sfx}, <8 x float> zeroinitializer, <8 x float> {row}')
        row = f'%er{sfx}'
    elif relu:
        row = _relu_ir(a, f"er{sfx}", row, relu, 8)
    return row


def _rows_store8(a, NB: int, R: int, relu: bool, res: bool) -> None:
    """The 8-lane "chan" kernel's final stores (block ``st_go`` on; ends in block ``st_x8``): each
    block's tile transposed (``_transpose8_ir``), then each channel's row of pixels into the NCHW output y[o][i]
    (o < %nc; residual row added, relu).  A full tile (%nr == R) stores its rows with plain stores of 4 / 2 / 1
    lanes (8 when R is 8); a pixel tail through masked stores.  The masked store (vmaskmovps) is microcoded on
    AMD's Zen: with plain stores for the 16 rows of a tile of 2 x 8 channels x 6 pixels, SqueezeNet's 16 -> 64 3x3
    on 55x55 (144 (channel, tap) pairs) ran 829 -> 674 us (1 thread, relu)."""
    rows = []
    for j in range(NB):
        vals = [(_relu_ir(a, f"rl{j}_{r}", f"%nacc{j}_{r}", relu) if relu and not res else f"%nacc{j}_{r}")
                for r in range(R)]
        rows.append(_transpose8_ir(a, f"tr{j}_", vals))
    a(f'  %fullt = icmp eq i64 %nr, {R}')
    a('  br i1 %fullt, label %sf_0, label %sm_0')
    pieces, o = [], 0
    for n in (8, 4, 2, 1):
        while R - o >= n:
            pieces.append((o, n))
            o += n
    for full in (True, False):
        t = "f" if full else "m"
        for ch in range(NB * 8):
            a(f's{t}_{ch}:')
            a(f'  %okc{t}{ch} = icmp slt i64 {ch}, %nc')
            a(f'  br i1 %okc{t}{ch}, label %s{t}g{ch}, label %st_done')
            a(f's{t}g{ch}:')
            a(f'  %yo{t}{ch} = mul i64 {ch}, %L')
            a(f'  %yq{t}{ch}.f = getelementptr float, float* %ytp, i64 %yo{t}{ch}')
            row = rows[ch // 8][ch % 8]
            if res:
                row = _res_relu8(a, f"{t}{ch}", row, relu)
            nxt = f"%s{t}_{ch + 1}" if ch + 1 < NB * 8 else "%st_x8"
            if not full:
                a(f'  %yq{t}{ch} = bitcast float* %yq{t}{ch}.f to <8 x float>*')
                a(f'  call void @llvm.masked.store.v8f32.p0v8f32(<8 x float> {row}, <8 x float>* %yq{t}{ch}, '
                  'i32 4, <8 x i1> %pmask)')
                a(f'  br label {nxt}')
                continue
            for o, n in pieces:
                nm = f"{t}{ch}_{o}"
                a(f'  %pp{nm}.f = getelementptr float, float* %yq{t}{ch}.f, i64 {o}')
                if n == 1:
                    a(f'  %pv{nm} = extractelement <8 x float> {row}, i32 {o}')
                    a(f'  store float %pv{nm}, float* %pp{nm}.f, align 4')
                    continue
                idx = ", ".join(f"i32 {o + i}" for i in range(n))
                a(f'  %pv{nm} = shufflevector <8 x float> {row}, <8 x float> undef, <{n} x i32> <{idx}>')
                a(f'  %pp{nm} = bitcast float* %pp{nm}.f to <{n} x float>*')
                a(f'  store <{n} x float> %pv{nm}, <{n} x float>* %pp{nm}, align 4')
            a(f'  br label {nxt}')
    a('st_x8:')     # (the caller's branch to %st_done ends it)


def _render_c(NB: int, R: int, relu: bool = False, dw: bool = False, res: bool = False, xpf: int = 0) -> str:
    """The channel-vector micro-kernel: a tile of NB blocks of 16 output channels x R output pixels (compact
    pixel indices; their wide input positions from a table), NB x R accumulators; per (channel, tap) NB
    weight vectors and R input scalars broadcast; stored as [channel block][pixel][16].  The (channel, tap)
    pairs go in chunks of KC (all tiles of the range per chunk: the chunk's weights stay in L2), the first
    chunk starting from the bias, the others from the stored partial sums.  ``res``: a 7th argument ``e`` (the
    output's layout: a residual) added to each channel's row of pixels in the final stores, before relu.
    ``xpf`` > 0 (not "dw"): each pair also prefetches its input ``xpf`` floats past the tile's last pixel (a hint:
    it never faults, so no bound applies)."""
    v = f"<{VEC} x float>"
    vp = f"<{VEC} x float>*"
    CW = NB * VEC
    L = []
    a = L.append
    if R > 8:
        raise ValueError(f"conv_direct: the channel-vector kernel stores rows of at most 8 pixels, not {R}")
    a(f'declare {v} @llvm.fma.v{VEC}f32({v}, {v}, {v})')
    a('declare void @llvm.masked.store.v8f32.p0v8f32(<8 x float>, <8 x float>*, i32, <8 x i1>)')
    a('declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)')
    if res:
        a('declare <8 x float> @llvm.masked.load.v8f32.p0v8f32(<8 x float>*, i32, <8 x i1>, <8 x float>)')
    a('define void @"kernel"(float* noalias %x, float* noalias %w, float* noalias %out, float* noalias %bias, '
      'i64* noalias %p, float* noalias %y' + (', float* noalias %e' if res else '') + ') {')
    a('entry:')
    _params_and_claim(a, ("K", "LP", "KC", "NPT", "G", "T1", "O", "L", "NBG", "XG", "OGR"), _C_CTR, _C_OFF,
                      ['  %qtab = getelementptr i64, i64* %offs, i64 %K', f'  %KCW = mul i64 %K, {CW}',
                       f'  %PF.p = getelementptr i64, i64* %p, i64 {_C_PF}', '  %PF = load i64, i64* %PF.p',
                       '  %pfon = icmp ne i64 %PF, 0',
                       f'  %WPF.p = getelementptr i64, i64* %p, i64 {_C_WPF}', '  %WPF = load i64, i64* %WPF.p'],
                      "chunk")
    a('chunk:')
    a('  %kc0 = phi i64 [ 0, %grp ], [ %kc1, %chunk_end ]')
    a('  %kcn = add i64 %kc0, %KC')
    a('  %kfull = icmp slt i64 %kcn, %K')
    a('  %kend = select i1 %kfull, i64 %kcn, i64 %K')
    a('  %first = icmp eq i64 %kc0, 0')
    a('  br label %tile')
    a('tile:')
    a('  %t = phi i64 [ %gt0, %chunk ], [ %t1, %st_done ]')
    a('  %ob = udiv i64 %t, %NPT')
    a('  %pt = urem i64 %t, %NPT')
    a(f'  %i0 = mul i64 %pt, {R}')
    a('  %wb0 = mul i64 %ob, %KCW')
    a('  %wb = getelementptr float, float* %w, i64 %wb0')
    a(f'  %bo = mul i64 %ob, {CW}')
    a(f'  %cb = mul i64 %ob, {NB}')
    # the group of this channel block: its input channels at grp * XG, its channels at grp * OGR + lb * CW
    a('  %gi = udiv i64 %ob, %NBG')
    a('  %lbm = mul i64 %gi, %NBG')
    a('  %lb = sub i64 %ob, %lbm')
    a(f'  %lbo = mul i64 %lb, {CW}')
    a('  %gro = mul i64 %gi, %OGR')
    a('  %obase = add i64 %gro, %lbo')
    a('  %xgo = mul i64 %gi, %XG')
    a('  %xg = getelementptr float, float* %x, i64 %xgo')
    for j in range(NB):
        a(f'  %cj{j} = add i64 %cb, {j}')
        a(f'  %rowj{j} = mul i64 %cj{j}, %LP')
    for r in range(R):
        a(f'  %qi{r} = add i64 %i0, {r}')
        a(f'  %qp{r} = getelementptr i64, i64* %qtab, i64 %qi{r}')
        a(f'  %q{r} = load i64, i64* %qp{r}')
        if dw:      # depthwise: the tile's channels at its pixel, channel-last (xq[pixel][C])
            a(f'  %qc{r} = add i64 %q{r}, %bo')
            a(f'  %xr{r} = getelementptr float, float* %xg, i64 %qc{r}')
        else:
            a(f'  %xr{r} = getelementptr float, float* %xg, i64 %q{r}')
    for j in range(NB):
        for r in range(R):
            a(f'  %pix{j}_{r} = add i64 %rowj{j}, %qi{r}')
            a(f'  %oe{j}_{r} = mul i64 %pix{j}_{r}, {VEC}')
            a(f'  %op{j}_{r}.f = getelementptr float, float* %out, i64 %oe{j}_{r}')
            a(f'  %op{j}_{r} = bitcast float* %op{j}_{r}.f to {vp}')
    a('  br i1 %first, label %init_b, label %init_o')
    a('init_b:')
    for j in range(NB):
        a(f'  %bq{j} = add i64 %bo, {j * VEC}')
        a(f'  %bp{j}.f = getelementptr float, float* %bias, i64 %bq{j}')
        a(f'  %bp{j} = bitcast float* %bp{j}.f to {vp}')
        a(f'  %bv{j} = load {v}, {vp} %bp{j}, align 4')
    a('  br label %k_pre')
    a('init_o:')
    for j in range(NB):
        for r in range(R):
            a(f'  %ov{j}_{r} = load {v}, {vp} %op{j}_{r}, align 4')
    a('  br label %k_pre')
    a('k_pre:')
    for j in range(NB):
        for r in range(R):
            a(f'  %a0{j}_{r} = phi {v} [ %bv{j}, %init_b ], [ %ov{j}_{r}, %init_o ]')
    a('  br label %k_loop')
    a('k_loop:')
    a('  %k = phi i64 [ %kc0, %k_pre ], [ %k1, %k_loop ]')
    for j in range(NB):
        for r in range(R):
            a(f'  %acc{j}_{r} = phi {v} [ %a0{j}_{r}, %k_pre ], [ %nacc{j}_{r}, %k_loop ]')
    a('  %offp = getelementptr i64, i64* %offs, i64 %k')
    a('  %off = load i64, i64* %offp')
    a(f'  %wk0 = mul i64 %k, {CW}')
    a('  %wk = getelementptr float, float* %wb, i64 %wk0')
    for j in range(NB):
        a(f'  %wp{j}.f = getelementptr float, float* %wk, i64 {j * VEC}')
        a(f'  %wp{j} = bitcast float* %wp{j}.f to {vp}')
        a(f'  %wv{j} = load {v}, {vp} %wp{j}, align 4')
    if not dw:
        # the weights' lines %WPF floats ahead (params word _C_WPF; 0: the pair's own lines, a no-op)
        a('  %wpfk = getelementptr float, float* %wk, i64 %WPF')
        for j in range(NB):
            a(f'  %wpf{j}.f = getelementptr float, float* %wpfk, i64 {j * VEC}')
            a(f'  %wpf{j} = bitcast float* %wpf{j}.f to i8*')
            a(f'  call void @llvm.prefetch.p0i8(i8* %wpf{j}, i32 0, i32 3, i32 1)')
    for r in range(R):
        a(f'  %xp{r} = getelementptr float, float* %xr{r}, i64 %off')
        if dw:      # each channel its own input: 16 channels of one pixel, one vector load per block
            for j in range(NB):
                a(f'  %xq{j}_{r}.f = getelementptr float, float* %xp{r}, i64 {j * VEC}')
                a(f'  %xq{j}_{r} = bitcast float* %xq{j}_{r}.f to {vp}')
                a(f'  %xw{j}_{r} = load {v}, {vp} %xq{j}_{r}, align 4')
                a(f'  %nacc{j}_{r} = call {v} @llvm.fma.v{VEC}f32({v} %wv{j}, {v} %xw{j}_{r}, {v} %acc{j}_{r})')
            continue
        if xpf and r == R - 1:
            a(f'  %xpf.f = getelementptr float, float* %xp{r}, i64 {xpf}')
            a('  %xpf = bitcast float* %xpf.f to i8*')
            a('  call void @llvm.prefetch.p0i8(i8* %xpf, i32 0, i32 3, i32 1)')
        a(f'  %xs{r} = load float, float* %xp{r}')
        a(f'  %xv{r}.0 = insertelement {v} undef, float %xs{r}, i32 0')
        a(f'  %xv{r} = shufflevector {v} %xv{r}.0, {v} undef, <{VEC} x i32> zeroinitializer')
        for j in range(NB):
            a(f'  %nacc{j}_{r} = call {v} @llvm.fma.v{VEC}f32({v} %wv{j}, {v} %xv{r}, {v} %acc{j}_{r})')
    a('  %k1 = add i64 %k, 1')
    a('  %kc = icmp slt i64 %k1, %kend')
    a('  br i1 %kc, label %k_loop, label %store')
    a('store:')
    a('  %last = icmp eq i64 %kend, %K')
    a('  br i1 %last, label %st_out, label %st_wide')
    # not the last chunk: the partial sums to the scratch, [channel block][pixel][16]
    a('st_wide:')
    for j in range(NB):
        for r in range(R):
            a(f'  store {v} %nacc{j}_{r}, {vp} %op{j}_{r}, align 4')
    a('  br label %st_done')
    # the last chunk: the tile transposed in registers, each channel's row of pixels one masked store into the
    # NCHW output y[o][i], o < O (channels past nc: not stored), i < L (lanes from nr on: masked)
    a('st_out:')
    a('  %nrl = sub i64 %L, %i0')
    a(f'  %nrs = icmp slt i64 %nrl, {R}')
    a(f'  %nr = select i1 %nrs, i64 %nrl, i64 {R}')
    a('  %orem = sub i64 %OGR, %lbo')
    a(f'  %ncs = icmp slt i64 %orem, {CW}')
    a(f'  %nc = select i1 %ncs, i64 %orem, i64 {CW}')
    # the pixels stored: lanes below nr of each channel's row of 8
    a('  %nrv.0 = insertelement <8 x i64> undef, i64 %nr, i32 0')
    a('  %nrv = shufflevector <8 x i64> %nrv.0, <8 x i64> undef, <8 x i32> zeroinitializer')
    a('  %pmask = icmp slt <8 x i64> <i64 0, i64 1, i64 2, i64 3, i64 4, i64 5, i64 6, i64 7>, %nrv')
    a('  %yt0 = mul i64 %obase, %L')
    a('  %yt = add i64 %yt0, %i0')
    a('  %ytp = getelementptr float, float* %y, i64 %yt')
    if res:
        a('  %etp = getelementptr float, float* %e, i64 %yt')
    # the rows' lines _PF_FLOATS ahead prefetched for writing (params word _C_PF; prefetches do not fault)
    a('  br i1 %pfon, label %st_pf, label %st_go')
    a('st_pf:')
    for ch in range(CW):
        a(f'  %pfr{ch} = mul i64 {ch}, %L')
        a(f'  %pfa{ch} = add i64 %pfr{ch}, {_PF_FLOATS}')
        a(f'  %pfp{ch}.f = getelementptr float, float* %ytp, i64 %pfa{ch}')
        a(f'  %pfp{ch} = bitcast float* %pfp{ch}.f to i8*')
        a(f'  call void @llvm.prefetch.p0i8(i8* %pfp{ch}, i32 1, i32 3, i32 1)')
    a('  br label %st_go')
    a('st_go:')
    if VEC == 8 and not dw:         # (the "dw" kernel's stores as they were)
        _rows_store8(a, NB, R, relu, res)
    for j in range(0 if VEC == 8 and not dw else NB):     # (the 8-lane "chan" kernel: above)
        vals = [(_relu_ir(a, f"rl{j}_{r}", f"%nacc{j}_{r}", relu) if relu and not res else f"%nacc{j}_{r}")
                for r in range(R)]
        rows = (_transpose_ir if VEC == 16 else _transpose8_ir)(a, f"tr{j}_", vals)
        for c in range(VEC):
            ch = j * VEC + c
            nxt = f"sc{j}_{c}"
            a(f'  %okc{ch} = icmp slt i64 {ch}, %nc')
            a(f'  br i1 %okc{ch}, label %{nxt}, label %st_done')
            a(f'{nxt}:')
            a(f'  %yo{ch} = mul i64 {ch}, %L')
            a(f'  %yq{ch}.f = getelementptr float, float* %ytp, i64 %yo{ch}')
            a(f'  %yq{ch} = bitcast float* %yq{ch}.f to <8 x float>*')
            row = rows[c]
            if res:
                row = _res_relu8(a, f"{ch}", row, relu)
            a(f'  call void @llvm.masked.store.v8f32.p0v8f32(<8 x float> {row}, <8 x float>* %yq{ch}, i32 4, '
              '<8 x i1> %pmask)')
    a('  br label %st_done')
    a('st_done:')
    a('  %t1 = add i64 %t, 1')
    a('  %tc = icmp slt i64 %t1, %gt1')
    a('  br i1 %tc, label %tile, label %chunk_end')
    a('chunk_end:')
    a('  %kc1 = add i64 %kc0, %KC')
    a('  %kmore = icmp slt i64 %kc1, %K')
    a('  br i1 %kmore, label %chunk, label %claim')
    a('done:')
    a('  ret void')
    a('}')
    return "\n".join(L) + "\n"


# params of the channel-vector kernel: 0 K, 1 LP (padded pixel count per channel block of the partial sums'
# scratch), 2 KC ((channel, tap) pairs per chunk), 3 pixel tiles per channel block, 4 tiles per claim, 5 tiles,
# 6 O, 7 L (output channels, pixels), 8 channel blocks per group, 9 input elements per group (xq), 10 output
# channels per group, 11 the claim counter, 12 prefetch the output rows ahead (0 / 1); then K offsets, then LP
# wide input positions of the compact pixels (tail entries repeat the last pixel)
_C_G, _C_CTR, _C_PF, _C_WPF, _C_OFF = 4, 11, 12, 13, 14
# the "chan" kernel prefetches each pair's weight lines this many floats ahead (params word _C_WPF; 0: none): a model's
# weights come from memory at every run (ResNet-50's ~100 MB), the first tile of each chunk streaming them.  On an AMD
# Zen 5 (2 threads unless said, both settings in one process, run by run alternating, the replayed launches' params
# switched, /tmp/lead21/wpf.py, whole-run median 512 / 0): ResNet-50 0.96-0.98 (1 thread 0.97), Inception v2 0.97 /
# 0.99 (256: 1.01, 1024: 1.00), SqueezeNet 1.00, ZFNet-512 1.02 (min 0.94)
WPF = [512]
# the output rows' lines this many floats ahead of a tile's stores are prefetched for writing (4 cache lines: ~10
# tiles of 6 pixels) where an image's output is at least _PF_MIN_BYTES: an output that large comes back from memory
# in a model (not in cache from the last run), each store's read-for-ownership a miss on 64 rows at once (1 thread,
# in-process interleaved in the model: SqueezeNet's 3 -> 64 stride-2 stem (3.2 MB out) 856 -> 667 us; alone, warm:
# 599 -> 562, the 7x7 stem 2451 -> 2433; smaller outputs lost to the extra instructions: 3 -> 32 on 112x112
# (1.6 MB) 271 -> 287, 8 -> 64 1x1 on 56x56 72 -> 81)
_PF_FLOATS = 64
_PF_MIN_BYTES = 2 << 20


@functools.cache
def source_key(path: str = __file__) -> str:
    """Hash of a kernel module's file (its renderers and the parameter layouts they read): any edit recompiles.
    Used by this module, pool_native and depthwise_native for their disk-cache keys."""
    with open(path, "rb") as fh:
        return hashlib.sha1(fh.read()).hexdigest()[:12]


def gather_lanes_ir(a, loads, sw, V, v, nm):
    """Lanes i * sw of the concatenated vector loads ``loads`` (column stride sw): sw - 1 two-source shuffles
    named ``%nm.s<m>``; returns the value holding the gathered vector (shared by pool_native and
    depthwise_native)."""
    if sw == 1:
        return loads[0]
    # lane i <- element i * sw: from load (i * sw) // V, lane (i * sw) % V
    src = [((i * sw) // V, (i * sw) % V) for i in range(V)]
    cur = loads[0]
    have = {i for i in range(V) if src[i][0] == 0}
    for m in range(1, sw):
        idx = []
        for i in range(V):
            if src[i][0] == m:
                idx.append(f"i32 {V + src[i][1]}")
            elif i in have:
                idx.append(f"i32 {i if m > 1 else src[i][1]}")
            else:
                idx.append("i32 undef")
        a(f'  %{nm}.s{m} = shufflevector {v} {cur}, {v} {loads[m]}, <{V} x i32> <{", ".join(idx)}>')
        cur = f"%{nm}.s{m}"
        have |= {i for i in range(V) if src[i][0] == m}
    return cur


def builtin(cache: dict, k, name: str, params: str, render, nargs: int, interleave: bool = False):
    """``cache[k]``, else the LLVM kernel ``render()`` compiled once per process (machine code cached on disk by
    llvm_render under ``name`` + a hash of ``params``, VERSION and the calling module's source key) and wrapped
    as a builtin of ``nargs`` pointer arguments, registered for :func:`_native_parallel`.  One path for the direct
    conv's, pool_native's, depthwise_native's and ir_small's kernels (``interleave``: llvm_render's option)."""
    f = cache.get(k)
    if f is not None:
        return f
    with _lock:
        f = cache.get(k)
        if f is None:
            from .. import llvm_call, llvm_render
            key = f"{name}_" + hashlib.sha1(f"{VERSION}|{params}".encode()).hexdigest()[:16]
            addr = llvm_render.compile_ir(key, lambda: conv_act.link(render()), interleave)
            f = llvm_call.make(addr, nargs)
            _addr_of[id(f)] = addr        # f lives in its cache for the process: its id stays its own
            cache[k] = f
    return f


def kernel(kind: str, A: int, B: int, relu: bool = False, res: bool = False, xpf: int = 0):
    """The builtin ``f(xq, wpack, out, bias, params)`` of micro-kernel ``kind`` ("pix": R = A channels x P =
    B pixel vectors; "chan" / "dw": NB = A channel blocks x R = B pixels, two more arguments: the output, and
    with ``res`` a residual added in the stores), ``relu``: its final stores through torch's relu; ``xpf`` ("chan"
    only): each (channel, tap) pair prefetches the input that many floats past its last pixel's (see _XPF_FLOATS);
    compiled once per process (machine code cached on disk by llvm_render)."""
    res = bool(res) and kind != "pix"
    relu = conv_act.norm(relu)
    xpf = int(xpf) if kind == "chan" else 0
    if _feat[0] is None:
        available()
    k = (kind, A, B, relu, res, VEC) + ((xpf,) if xpf else ())
    f = _kernels.get(k)
    if f is not None:
        return f
    render = (lambda: (_render_pix8 if VEC == 8 else _render)(A, B, relu)) if kind == "pix" else (
        lambda: _render_c(A, B, relu, kind == "dw", res, xpf))
    pf = f"p{xpf}" if xpf else ""
    return builtin(_kernels, k, f"convdirect{kind}{A}x{B}{conv_act.tag(relu)}{'e' if res else ''}{pf}v{VEC}",
                   f"{source_key()}{source_key(conv_act.__file__)}|{kind}|{A}|{B}|{conv_act.key(relu)}|{res}|v{VEC}"
                   + (f"|{pf}" if pf else ""), render,
                   5 if kind == "pix" else 6 + res)


_calls: dict = {}
_addr_of: dict = {}


def _native_parallel(f, nargs: int, nthr: int):
    """``g(*arrays)`` running kernel ``f`` once on each of ``nthr`` threads through gemm_driver's native
    workers (woken without the Python pool's hand-off: a launch of a few hundred µs used to lose most
    of its second thread to the pool's wake-up), or None (no driver here: the pool runs it)."""
    addr = _addr_of.get(id(f))
    if addr is None:
        return None
    key = (addr, nargs, nthr)
    g = _calls.get(key)
    if g is None:
        from .. import gemm_driver
        from .. import elementwise
        d = gemm_driver.call_plan(addr, nargs, nthr) if elementwise.NATIVE_CHUNKS[0] else None
        if d is None:
            g = False
        else:
            caller, dummy = gemm_driver.epilogue_caller(nargs), np.zeros(1, np.float32)
            g = lambda *arrays: caller(d, dummy, dummy, dummy, *arrays)  # noqa: E731
            g.direct = (caller, (d, dummy, dummy, dummy))     # (replayed launches call it without the lambda)
        _calls[key] = g
    return g or None


# ---------------------------------------------------------------- weights
def _pack(w: np.ndarray, tag) -> np.ndarray:
    """w (O, C/G, KH, KW) of G groups -> [G * ceil(O/G / CW)][C/G * KH * KW][CW] float32 (CW output channels
    per block: R of the "pix" kernel, 16 NB of the "chan" kernel; each group's blocks on their own, zero rows
    past its O/G)."""
    CW, G = tag[1], tag[2]
    O = w.shape[0]
    Og = O // G
    K = w[0].size
    nb = -(-Og // CW)
    wp = np.zeros((G, nb * CW, K), np.float32)
    wp[:, :Og] = w.reshape(G, Og, K)
    return np.ascontiguousarray(wp.reshape(G * nb, CW, K).transpose(0, 2, 1))


# frozen weights (winograd.freeze: ONNX initializers, the JIT's constants) by the array object passed: (id, CW, G) ->
# (weak reference to it, packed weights).  A model passes the same array on every call: the lookup skips
# winograd.weights' keying (~2 us a call, a tenth of a small conv's Python time)
_wmemo: dict = {}


def packed_weights(w: np.ndarray, CW: int, G: int = 1):
    """The packed weights of w (G groups) for CW channels per block, cached per weight buffer
    (winograd.weights); None when w keeps changing (being trained)."""
    k = (id(w), CW, G)
    m = _wmemo.get(k)
    if m is not None and m[0]() is w:
        return m[1]
    wp = winograd.weights(w, ("direct", CW, G), _pack)
    if wp is not None and winograd.is_frozen(w):
        if len(_wmemo) > 4096:
            _wmemo.clear()
        try:
            # the entry goes with the array (a dead model's packed weights are not kept)
            _wmemo[k] = (weakref.ref(w, lambda _, k=k: _wmemo.pop(k, None)), wp)
        except TypeError:       # (not weakly referenceable: no entry)
            pass
    return wp


# ---------------------------------------------------------------- geometry / cost
def geometry(H, W, KH, KW, sh, sw, pt, pb, pl, pr, dh, dw):
    """(Hq, Wq, phases, taps): phase planes of the padded input (Hq x Wq each), the used phases
    [(a, b)], and per tap (kh, kw) (phase index, row offset, column offset)."""
    Hp, Wp = H + pt + pb, W + pl + pr
    Hq, Wq = -(-Hp // sh), -(-Wp // sw)
    phases = []
    taps = []
    for kh in range(KH):
        for kw in range(KW):
            ph = ((kh * dh) % sh, (kw * dw) % sw)
            if ph not in phases:
                phases.append(ph)
            taps.append((phases.index(ph), (kh * dh) // sh, (kw * dw) // sw))
    return Hq, Wq, phases, taps


_PIX_SHAPES16 = ((6, 4), (12, 2))            # "pix": (R, P)
_CHAN_SHAPES16 = ((4, 6), (2, 8), (3, 7), (2, 7))   # "chan": (NB, R)
# (3, 7), not (3, 8): LLVM's scheduler hoists a K step's R broadcasts above its FMAs, and 3 x 8 accumulators + 3
# weight vectors + 8 broadcasts (35 zmm) spilled in the K loop (stack stores / reloads each step); 3 x 7 needs 31.
# AMD Zen 5, 1 thread, conv + bias + relu, min of 60 calls, us 3x8 / 3x7: SqueezeNet's 256 -> 48 1x1 on 13x13 50 /
# 29, 384 -> 48 71 / 39, 256 -> 48 on 28x28 200 / 109, 64 -> 48 3x3 on 28x28 428 / 214, 96 -> 96 3x3 1262 / 602
# (/tmp/lead23/tile.py).  The sums' order does not depend on the tile: the same bits
# AVX2 (16 ymm registers): "pix" R x P accumulators + P input vectors + a broadcast weight, "chan" NB x R
# accumulators + NB weight vectors + a broadcast input (the 6 x 16 tile of AVX2 sgemm kernels and its kin)
_PIX_SHAPES8 = ((6, 2), (12, 1), (4, 3))
_CHAN_SHAPES8 = ((2, 6), (3, 4), (1, 8))
PIX_SHAPES, CHAN_SHAPES = _PIX_SHAPES16, _CHAN_SHAPES16     # the host's, from available()


# the "chan" kernel (its tile transposed in registers and stored as rows of 8 pixels) runs 6-27% faster than
# the "pix" kernel at the same lane use (1 thread, relu epilogue, e.g. 64 -> 256 3x3 on 13x13 0.49 vs 0.67
# ms, 16 -> 64 3x3 on 55x55 0.55 vs 0.60, the 7x7 stem 2.37 vs 2.53, 192 -> 64 1x1 on 28x28 0.19 vs 0.23):
# "pix" only from _CHAN_BONUS times the other's lane use on (3 -> 24 3x3 stride 2: 0.29 vs 0.32 ms)
_CHAN_BONUS = 1.1
# ... but over few (channel, tap) pairs the "chan" kernel's per-tile transposition and row stores weigh: where the
# "pix" kernel writes its rows straight to the output (Wq == OW: no compaction), the bonus is scaled by
# K / (K + _CHAN_STORE_K) for K below _SHORT_K (1 thread, relu: ShuffleNet's 24 -> 112 1x1 in 4 groups (K = 6) on
# 56x56 pix 98 vs chan 133 us, 8 -> 64 1x1 73 vs 90, 12 -> 64 88 vs 106, 16 -> 64 108 vs 113; from K = 24 on
# even: 24 -> 128 78 vs 78, 32 -> 128 90 vs 89)
_CHAN_STORE_K = 4
# ... and among "chan" shapes of even lane use (within 0.02), below _SHORT_K pairs the 16-lane kernel takes R = 8 (2 x 8):
# its tile's rows are whole 8-pixel rows (one unmasked row store each, the plain 8 x 8 transposition), where the
# stores weigh most.  AMD Zen 5, conv + relu, min of 30-100 interleaved calls, us (4 x 6 / 2 x 8): SqueezeNet's 3 -> 64
# 3x3 stride-2 stem on 224x224 1 thread 287 / 261, 290 / 271, 2 threads (box loaded) 276 / 253, 270 / 251; 3 -> 64
# 3x3 on 112x112 327 / 257.  From K = 32 on the 4 x 6 tile stays (16 -> 64 3x3 on 55x55, 48 -> 192 on 13x13 139 / 153
# us, 512 -> 64 1x1 on 13x13 54 / 61).  The sums' order does not depend on the tile: the same bits.
# NEE_CONV_DIRECT_FULL_ROWS=0: the first shape of even use (4 x 6)
_CHAN_FULL_ROWS = [os.environ.get("NEE_CONV_DIRECT_FULL_ROWS", "1") not in ("0", "")]


def plan(O: int, OH: int, OW: int, Wq: int, K: int = 0, kind=None):
    """(kind, A, B, lane use): the micro-kernel with the most useful lanes (wasted: output rows past O, wide
    pixels past OW, tile tails); ``kind`` forces one family.  K: the (channel, tap) pairs per output (0:
    unknown; the "chan" kernel's bonus shrinks below _SHORT_K where "pix" needs no compaction)."""
    if _feat[0] is None:
        available()             # (fixes VEC and the tile shapes)
    L = OH * OW
    Lw = (OH - 1) * Wq + OW
    best = None
    if kind in (None, "chan"):
        full = VEC == 16 and _CHAN_FULL_ROWS[0] and 0 < K < _SHORT_K
        for NB, R in CHAN_SHAPES:
            cw = NB * VEC
            use = O * L / ((-(-O // cw) * cw) * (-(-L // R) * R))
            if best is None or use > best[3] + 0.02 or \
                    (full and R == 8 and best[2] != 8 and use >= best[3] - 0.02):
                best = ("chan", NB, R, use)
    if kind in (None, "pix"):
        pix = None
        for R, P in PIX_SHAPES:
            use = O * L / ((-(-O // R) * R) * (-(-Lw // (P * VEC)) * P * VEC))
            if pix is None or use > pix[3] + 0.02:
                pix = ("pix", R, P, use)
        bonus = _CHAN_BONUS
        if Wq == OW and 0 < K < _SHORT_K:
            bonus *= K / (K + _CHAN_STORE_K)
        if best is None or pix[3] >= best[3] * bonus:
            best = pix
    return best


# ---------------------------------------------------------------- run
# from this many flops the tiles are split over the pool (as conv.py's GEMMs: the hand-off costs tens of us), over
# gemm_driver's native workers from _NATIVE_PAR_FLOPS (a few us to wake)
_PAR_FLOPS = 8e6
_NATIVE_PAR_FLOPS = 2e6
# runs of tiles per thread: the threads claim them from a counter in the kernel, so a descheduled worker
# (the machine is shared) leaves its share to the others instead of stalling the call
_CHUNKS_PER_THREAD = 6
# ... and the run's length: the one nearest that count whose claims, taken in turn by equally fast threads, end together
# (_claim_run: a greedy claim simulated in tiles), from 2 runs a thread up to 1.5x the count.  A uniform run of
# ceil(tiles / (threads * 6)) tiles left the parity of the last claims to chance: SqueezeNet's 48 -> 192 3x3 on 13x13
# (87 tiles in runs of 8: 11 runs, one thread's 6 of 8 against the other's 5: 48 tiles' time against 43.5; now runs
# of 11), 64 -> 256 (116 in runs of 10: 60 against 58), the 512 -> 1000 1x1 (464 in runs of 39: 234 against 232).
# In-process alternating, 2 threads, us (runs of ceil(tiles / 2) / the uniform 6 a thread): 48 -> 192 66.5 / 72.0,
# 64 -> 256 114.3 / 118.4; this rule / the uniform run (the box partly loaded: the second core part-time), 32 -> 128 on
# 27x27 161.6 / 175.9, 48 -> 192 89.2 / 96.0, 64 -> 256 139.9 / 149.2, the stem, the 55x55 3x3 and the 512 -> 1000
# 1x1 even.  NEE_CONV_DIRECT_CLAIM_BALANCE=0: the uniform run.  Which thread computes a tile never
# changes its sums: the same bits
_CLAIM_BALANCE = [os.environ.get("NEE_CONV_DIRECT_CLAIM_BALANCE", "1") not in ("0", "")]


def _claim_makespan(ntiles: int, run: int, nthr: int) -> int:
    """Tiles' time until ``nthr`` equally fast threads, each taking the next run of ``run`` tiles when free, are
    done (the last run shorter)."""
    free = [0] * nthr
    left = ntiles
    while left > 0:
        i = free.index(min(free))
        free[i] += min(run, left)
        left -= run
    return max(free)


def _claim_run(ntiles: int, nthr: int) -> int:
    """Tiles per claim of a conv of ``ntiles`` tiles split over ``nthr`` threads (see _CLAIM_BALANCE)."""
    run0 = -(-ntiles // (nthr * _CHUNKS_PER_THREAD))
    if not _CLAIM_BALANCE[0] or nthr < 2 or ntiles < 2 * nthr:
        return run0
    base = _claim_makespan(ntiles, run0, nthr)
    want = -(-ntiles // run0)
    best, pick = None, run0
    for claims in range(2 * nthr, max(2 * nthr, (3 * want) // 2) + 1):
        run = -(-ntiles // claims)
        m = _claim_makespan(ntiles, run, nthr)
        key = (m, abs(-(-ntiles // run) - want), -claims)
        if m < base and (best is None or key < best):
            best, pick = key, run
    return pick
FORCE = [None]            # tests / benchmarks: "pix" or "chan"
# a conv split over the threads (from _NATIVE_PAR_FLOPS, more than one thread) runs the "chan" kernel: the "pix"
# kernel (its 12 or 6 output channels a tile, picked on one thread by lane use) gained little from a second
# thread in the models.  In-model, ShuffleNet at 2 threads, per-step min of 30 runs, interleaved in one process
# with the "pix" pick: the 1x1 convs in 4 groups 272 -> 272 on 14x14 104-127 -> 77-83 us, 136 -> 136 on 28x28
# 121-151 -> 78-88, 112 -> 112 89 -> 60 (one thread: 108-155 us either kernel); whole run min 5.51 -> 4.64 and
# 5.64 -> 4.90 ms (two runs); the other light models: one conv switched (SqueezeNet's 16 -> 64 1x1, unchanged,
# 82-87 us).  The gain needs the second core free: on the loaded box some runs show none for either.  Both
# kernels sum each output in the same order: the bits do not depend on the pick
# (tests/test_cnn_two_threads_s10.py).  Not below _SPLIT_CHAN_MIN_K (channel, tap) pairs, where "pix" is
# faster on one thread by more (see _CHAN_STORE_K):
# 24 -> 112 in 4 groups (K = 6) on 56x56, 2 threads, pix 103 vs chan 118 us; K = 28 (112 -> 112) 89 vs 60.
_SPLIT_CHAN = True
_SPLIT_CHAN_MIN_K = 16


def _small_k_strided(sh: int, sw: int, Cg: int, KH: int, KW: int) -> bool:
    """A strided conv (not 1x1) of fewer than _SHORT_K (channel, tap) pairs on the AVX2 kernels (8 lanes): the "pix"
    kernel, on one thread and split, not the "chan" one (its tiles of 8 channels x 4-6 pixels pay a transposition and
    row stores per tile for K FMAs a pair).  Measured on the AVX2 Zen 3 box (1 thread, conv + bias, thread CPU
    time, min of 3 alternating rounds, us chan / pix): ShuffleNet's 3 -> 24 3x3 stride 2 on 224x224 1006 / 657,
    SqueezeNet's unpadded 3 -> 64 3x3 stride 2 2276 / 1492; in the ONNX model (one Conv + Relu, 1 thread) 725-1187
    / 481 us.  From K = 147 (7x7 stems) "chan" ties or wins (3 -> 64 7x7 6006 / 6191, 3 -> 96 11x11 stride 4
    3526 / 3598), and more so for wider inputs (96 -> 96 3x3 stride 2 on 28x28 782 / 1093): those keep "chan"."""
    if _feat[0] is None:
        available()             # (fixes VEC)
    return VEC == 8 and (sh > 1 or sw > 1) and KH * KW > 1 and Cg * KH * KW < _SHORT_K


# grouped (G > 1) unpadded stride-1 1x1 convs of fewer than this many input channels per group, split over the threads
# on the AVX2 kernels: "pix", not _SPLIT_CHAN's "chan" (its AVX2 tiles of 8 or 16 channels x 4-6 pixels, measured
# on the AVX-512 ones).  ShuffleNet's, conv + second bias + relu, us "chan" / "pix": 1 thread (thread CPU time, min
# of 100) 112 -> 112 in 4 groups on 28x28 161 / 107, 136 -> 136 on 28x28 228 / 193, 272 -> 272 on 14x14 226 / 137,
# 544 -> 544 on 7x7 153 / 148; 2 threads, process CPU time per call (both threads; min of 5 x 200 calls, load ~10,
# others niced: wall times there are the scheduler's) 225 / 155, 319 / 210, 259 / 187, 250 / 258
_AVX2_G1X1_PIX_K = 128


def _avx2_grouped_1x1(G: int, Cg: int, KH: int, KW: int, sh: int, sw: int, pt: int, pb: int, pl: int,
                      pr: int) -> bool:
    """A grouped unpadded stride-1 1x1 conv of fewer than _AVX2_G1X1_PIX_K input channels per group on the AVX2
    kernels: split over the threads on the "pix" kernel."""
    if _feat[0] is None:
        available()             # (fixes VEC)
    return (VEC == 8 and G > 1 and Cg < _AVX2_G1X1_PIX_K and KH == KW == sh == sw == 1
            and pt == pb == pl == pr == 0)


# weights of one chunk of (channel, tap) pairs of the "chan" kernel (bytes): kept in L2 across the tiles
_CHUNK_BYTES = 192 << 10
# the "chan" kernel over one channel block (no more than 8 * NB output channels: SqueezeNet's squeezes) of an input of
# _XPF_MIN_BYTES or more (larger than L2: each pair reads a line of another plane, K streams the hardware prefetchers
# do not follow) prefetches each pair's input line _XPF_FLOATS ahead (the tiles 2-3 later read it).  In the model
# (session 16, 1 thread, per-kernel min of 4-5 alternating fresh processes x 25 runs, old and new trees, load 4-7):
# SqueezeNet's 64 -> 16 1x1 on 55x55 (774 KB in) 148 -> 114 us, 128 -> 16 (1.5 MB) 225 -> 178-191.  Not taken with
# two or more channel blocks (each block re-reads the input; 256 -> 32 on 27x27, 746 KB: no gain shown, 189 vs 193 us
# hot in cache, in the model within the noise) or inputs that fit in L2 (128 -> 32 on 27x27: none either)
_XPF_FLOATS = 16
_XPF_MIN_BYTES = 512 << 10
XPF = [True]            # tests / A/B: False never prefetches


class _Layout:
    """Everything about one convolution shape that does not depend on the data (cached per shape): the
    micro-kernel, the scratch layout, the params array (offsets, pixel table) and the fill slices."""
    __slots__ = ("A", "B", "CW", "S", "bare", "base", "direct_out", "fill", "kind", "multi", "nob", "nph", "npt",
                 "oshape", "preps", "t0", "t1", "tail", "xlen", "xpf")

    def __init__(self, xs, ws, OH, OW, sh, sw, pt, pb, pl, pr, dh, dw, force):
        _, C, H, W = xs
        O, Cg, KH, KW = ws
        G = C // Cg                             # groups: each a conv of Cg input to Og output channels
        Og = O // G
        Hq, Wq, phases, taps = geometry(H, W, KH, KW, sh, sw, pt, pb, pl, pr, dh, dw)
        depthwise = G > 1 and Cg == 1 and O == C
        if depthwise:
            # the "chan" kernel with each channel its own input ("dw"): the input channel-last, one group
            kind, A, B, _ = plan(O, OH, OW, Wq, kind="chan")
            kind, G, Og = "dw", 1, O
        else:
            # strided: the "chan" kernel, reading the padded input unsplit (below), ran 1.1-1.2x faster than the
            # "pix" kernel on its phase planes even at 0.75 of its lane use (1 thread, relu: 3 -> 24 3x3 stride 2
            # on 224x224 269 vs 297 us, 16 -> 24 on 112x112 319 vs 346, 24 -> 40 5x5 441 vs 490, 40 -> 80 153
            # vs 184); stride 1 keeps the lane-use rule (3 -> 24 on 112x112: pix 233 vs 252 us).  On AVX2 the
            # strided ones of few (channel, tap) pairs take "pix" (_small_k_strided)
            strided = "pix" if _small_k_strided(sh, sw, Cg, KH, KW) else "chan"
            kind, A, B, _ = plan(Og, OH, OW, Wq, Cg * KH * KW, force or (strided if sh > 1 or sw > 1 else None))
        # the "chan" kernel reads each pixel through its table entry: strided, it reads the padded input unsplit
        # (a copy of contiguous rows).  The phase split (numpy's strided copy) took 150-225 us of a 224x224
        # stride-2 stem's 650-1150 us in the ONNX models (1 thread, in-process interleaved with the phase planes:
        # SqueezeNet's 3 -> 64 stem 917 -> 845 us, ShuffleNet's 3 -> 24 (was "pix") 574 -> 413)
        fsh, fsw = sh, sw
        if kind == "chan" and (sh > 1 or sw > 1):
            fsh = fsw = 1
            Hq, Wq, phases, taps = geometry(H, W, KH, KW, 1, 1, pt, pb, pl, pr, dh, dw)
        L = OH * OW
        Lw = (OH - 1) * Wq + OW                 # wide pixels per output channel
        K = Cg * KH * KW
        nph = len(phases)
        maxoff = max(r * Wq + c for _, r, c in taps)
        bare = False
        if kind == "pix":
            CW = A
            tp = B * VEC
            npt = -(-Lw // tp)
            S = max(Hq * Wq, npt * tp + maxoff)    # every read of the last tile stays in its plane
        else:
            CW = A * VEC
            npt = -(-L // B)
            S = Hq * Wq
            # stride 1 unpadded: the input itself is xq.  Not strided ones: in the models (1 thread, in-process
            # interleaved) SqueezeNet's unpadded 3 -> 64 stride-2 stem ran 934 us copying its input unsplit (a
            # sequential copy of the cold input) against 1043 reading it in place
            bare = nph == 1 and Wq == W and Hq == H and fsh == sh and fsw == sw
        if not bare:
            S = -(-S // VEC) * VEC
        nbg = -(-Og // CW)                      # channel blocks per group
        nob = G * nbg
        XG = Cg * nph * S                       # xq elements per group (its channels' planes)
        offs = (np.arange(Cg, dtype=np.int64)[:, None] * (nph * S)
                + np.array([pi * S + r * Wq + c for pi, r, c in taps], np.int64)[None, :]).reshape(-1)
        xlen = C * nph * S
        gx = (G - 1) * XG                       # the last group's start
        if depthwise:
            # xq[phase][pixel][C]: tap offsets and pixel positions in units of C, the tile's channel block
            # added in the kernel; the last pixel's block reads up to nob * CW - C past the planes
            bare, XG = False, 0
            offs = np.array([(pi * S + r * Wq + c) * C for pi, r, c in taps], np.int64)
            xlen = nph * S * C + nob * CW
        direct_out = False
        # bounds of every read (the kernels index xq with these and nothing else)
        if kind == "pix":
            if gx + int(offs.max()) + npt * tp > xlen or int(offs.min()) < 0:
                raise AssertionError("conv_direct: input plane layout would read out of bounds")
            direct_out = Wq == OW or VEC == 8
            base = np.empty(_P_OFF + K + (4 if VEC == 8 else 0), np.int64)
            base[:_P_OFF] = (K, O, L if direct_out else Lw, Lw, npt, 1, nob * npt, nbg, XG, Og, 0)
            base[_P_OFF:_P_OFF + K] = offs
            if VEC == 8:
                # the 8-lane kernel stores the compact rows itself (_pix_store8): WQ, OWC, OHC.  Even on rows
                # narrower than a vector (most vectors then cross a row end: a masked store per row) faster than
                # wide rows and their compaction (1 thread, relu, 32 -> 64 3x3 on 7x7 44 vs 69 us, 14x14 110 vs 146,
                # 8 -> 24 on 10x10 17 vs 39, 24 -> 36 stride 2 on 12x12 (OW 6) 35 vs 47)
                base[_P_OFF + K:_P_OFF + K + 3] = (Wq, OW, OH) if Wq != OW else (L, L, 1)
                base[_P_OFF + K + 3] = max(1, min(npt, _PIX_SPT8))
            self.t0, self.t1 = _P_G, _P_CTR
            self.multi = False
            self.oshape = (O, Lw)
            self.tail = (OH, Wq, OW)
        else:
            LP = npt * B
            i = np.minimum(np.arange(LP, dtype=np.int64), L - 1)
            q = (i // OW) * (sh // fsh) * Wq + (i % OW) * (sw // fsw)
            if depthwise:
                q = q * C
                gx = nob * CW - 1                # the last lane of the last channel block
            if gx + int(offs.max()) + int(q.max()) >= xlen or int(offs.min()) < 0 or int(q.min()) < 0:
                raise AssertionError("conv_direct: input plane layout would read out of bounds")
            base = np.empty(_C_OFF + K + LP, np.int64)
            KC = K if depthwise else max(1, _CHUNK_BYTES // (4 * CW))
            pf = int(not depthwise and O * L * 4 >= _PF_MIN_BYTES)
            base[:_C_OFF] = (K, LP, KC, npt, 1, nob * npt, O, L, nbg, XG, Og, 0, pf, 0 if depthwise else WPF[0])
            base[_C_OFF:_C_OFF + K] = offs
            base[_C_OFF + K:] = q
            self.t0, self.t1 = _C_G, _C_CTR
            self.multi = K > base[2]
            self.oshape = (nob * A, LP, VEC)
            self.tail = None
        self.kind, self.A, self.B, self.CW, self.nob, self.npt, self.S, self.nph = kind, A, B, CW, nob, npt, S, nph
        self.bare, self.direct_out, self.base, self.xlen = bare, direct_out, base, xlen
        # one channel block over an input larger than L2: the input prefetched (_XPF_FLOATS)
        self.xpf = _XPF_FLOATS if kind == "chan" and nob == 1 and 4 * xlen >= _XPF_MIN_BYTES else 0
        self.preps = {}                         # (relu, threads, thresholds) -> _Prep
        # the fill: per phase, (plane rows [r0, r1), columns [c0, c1) <- input rows i0::sh, columns j0::sw)
        fill = []
        for a, bb in phases:
            r0 = max(0, -(-(pt - a) // fsh))
            r1 = min(Hq, (H - 1 + pt - a) // fsh + 1)
            c0 = max(0, -(-(pl - bb) // fsw))
            c1 = min(Wq, (W - 1 + pl - bb) // fsw + 1)
            if r1 <= r0 or c1 <= c0:
                fill.append(None)
                continue
            i0 = a + fsh * r0 - pt
            j0 = bb + fsw * c0 - pl
            fill.append((r0, r1, c0, c1, slice(i0, i0 + fsh * (r1 - r0 - 1) + 1, fsh),
                         slice(j0, j0 + fsw * (c1 - c0 - 1) + 1, fsw)))
        self.fill = (Hq, Wq, fill)


_layouts: dict = {}
_conv_buffer = [None]       # conv.py's _buffer (imported on first use: conv.py imports this module)
_conv_tls = [None]          # conv.py's _tls (its per-thread buffers)


class _Prep:
    """Everything about one launch that does not depend on the data (per layout, relu, thread count and the
    thresholds; in ``_Layout.preps``): the kernel, the native caller, the params template with the claim run
    length, a zero bias.  A conv's Python work per call is then the operand checks, the packed-weights lookup,
    the bias and the fill (~10 us less per call than rebuilding them)."""
    __slots__ = ("f", "lay", "native", "nthr", "par", "par_copy", "pix", "dwise", "G", "Og", "zero_bias", "base",
                 "res", "post")

    def __init__(self, lay, xs, ws, OH, OW, relu, has_e):
        N, C, H, W = xs
        O, C2, KH, KW = ws
        self.lay = lay
        self.dwise = lay.kind == "dw"
        self.pix = lay.kind == "pix"
        # depthwise: one group of O output channels, each reading its own input
        self.G = 1 if self.dwise else C // C2
        self.Og = O // self.G
        # a residual: added in the "chan" / "dw" kernels' stores; after the "pix" kernel (and its relu) in a pass
        self.res = has_e and not self.pix
        self.post = has_e and self.pix
        self.f = kernel(lay.kind, lay.A, lay.B, False if self.post else conv_act.norm(relu), self.res,
                        lay.xpf if XPF[0] else 0)
        ntiles = lay.nob * lay.npt
        nt = threads.NUM_THREADS
        flops = 2.0 * O * C2 * KH * KW * OH * OW
        par = nt > 1 and flops >= _NATIVE_PAR_FLOPS and ntiles > 1
        self.nthr = min(nt, ntiles)
        self.native = _native_parallel(self.f, 5 if self.pix else 6 + self.res, self.nthr) if par else None
        if self.native is None and flops < _PAR_FLOPS:
            par = False             # (the Python pool's hand-off only pays from _PAR_FLOPS)
        self.par = par
        self.par_copy = par and O > 1 and flops >= _PAR_FLOPS
        # one params array per call (its claim counter): every thread calls the kernel once and claims runs
        # of tiles until none are left (a thread scheduled late finds none and returns)
        base = lay.base.copy()
        base[lay.t0] = _claim_run(ntiles, self.nthr) if par else ntiles
        base[lay.t1] = 0
        base.flags.writeable = False
        self.base = base
        z = np.zeros(lay.nob * lay.CW, np.float32)
        z.flags.writeable = False
        self.zero_bias = z


def conv2d(x, w, b, res, sh, sw, pt, pb, pl, pr, dh, dw, relu=False, b2=None, e=None):
    """res (N, O, OH, OW) = conv2d(x, w) + b (+ b2: a second per-channel bias, both summed into the
    accumulators' start) (+ e: a residual of res's shape, C-contiguous float32, not sharing res's memory), through
    relu when ``relu``; x (N, C, H, W) and w (O, C/G, KH, KW) C-contiguous float32 (G = C / w.shape[1] groups),
    res C-contiguous float32.  Returns False (nothing written) when the weights are being trained (no packed
    copy)."""
    lay, prep = _setup(x, w, b, res, sh, sw, pt, pb, pl, pr, dh, dw, relu, b2, e)
    if prep.post and not _post_takes(relu):
        return False
    wp = packed_weights(w, lay.CW, prep.G)
    if wp is None:
        return False
    if wp.shape != (lay.nob, w[0].size, lay.CW):
        raise AssertionError("conv_direct: packed weights of the wrong shape")
    _launch(lay, prep, x, wp, _bias(lay, prep, b, b2), res, e, relu)
    return True


def bind(x, w, b, res, sh, sw, pt, pb, pl, pr, dh, dw, relu=False, b2=None, e=None):
    """``f(x, w, b, res, b2, e) -> bool``: :func:`conv2d` for operands of these layouts (shapes, dtypes,
    C-contiguous) at this thread count, with what depends only on them looked up once: the layout, the launch
    plan, and, for frozen weights and biases (``winograd.freeze``: ONNX initializers, the JIT's frozen
    constants), the packed weights and the summed bias.  ``f`` returns False (nothing written) when the thread
    count changed, ``w`` / ``b`` / ``b2`` are other arrays than the frozen ones bound, or unfrozen weights are
    being trained; the caller then runs the unbound path.  None: not bindable (the same checks as conv2d's fail,
    or the weights are being trained).  A jitted CNN's conv step is then ~3-5 us of Python instead of ~20."""
    lay, prep = _setup(x, w, b, res, sh, sw, pt, pb, pl, pr, dh, dw, relu, b2, e)
    if prep.post and not _post_takes(relu):
        return None
    CW, G, nt = lay.CW, prep.G, threads.NUM_THREADS
    wp0 = packed_weights(w, CW, G)
    if wp0 is None or wp0.shape != (lay.nob, w[0].size, CW):
        return None
    wfrozen = winograd.is_frozen(w)
    bfrozen = all(a is None or winograd.is_frozen(a) for a in (b, b2))
    w0, b0, b20 = w, b, b2
    bias0 = _bias(lay, prep, b, b2) if bfrozen else None
    if bias0 is not None and bias0 is b:
        bias0 = None        # (the caller's own array: taken from the call)
    # the last call's native calls (_replay), replayed while x, res, e, the bias and the packed weights are the
    # same arrays (a compiled graph's step: arena buffers and frozen constants)
    memo = [None]
    scr = _scratch_tags(lay)

    def f(x, w, b, res, b2, e) -> bool:
        if threads.NUM_THREADS != nt:
            return False
        if wfrozen:
            if w is not w0:
                return False
            wp = wp0
        else:
            wp = packed_weights(w, CW, G)
            if wp is None:
                return False
        if bfrozen and b is b0 and b2 is b20:
            bias = b if bias0 is None else bias0
        else:
            bias = _bias(lay, prep, b, b2)
        m = memo[0]
        if m is None or m[0] is not x or m[1] is not res or m[2] is not e or m[3] is not bias or m[4] is not wp or (
                scr and not _scratch_same(scr, m[6])) or not REPLAY[0]:
            m = memo[0] = None
            if REPLAY[0]:
                steps = _replay(lay, prep, x, wp, bias, res, e)
                if steps is not None:
                    m = memo[0] = (x, res, e, bias, wp, steps, _scratch_base(scr))
            if m is None:
                _launch(lay, prep, x, wp, bias, res, e, relu)
                return True
        for fn, args, p, slot in m[5]:
            p[slot] = 0         # (the claim counter: the rest of the params is never written)
            fn(*args)
        return True

    def calls(x, w, b, res, b2, e):
        # (native_chain) the replayed calls, where f's last call replayed or recorded them for these arrays
        m = memo[0]
        if m is None or threads.NUM_THREADS != nt or not wfrozen or w is not w0 or not bfrozen or b is not b0 or \
                b2 is not b20 or m[0] is not x or m[1] is not res or m[2] is not e or \
                m[3] is not (b if bias0 is None else bias0) or m[4] is not wp0 or \
                (scr and not _scratch_same(scr, m[6])) or not REPLAY[0]:
            return None
        return [native_chain.lower(fn, args, (p, slot)) for fn, args, p, slot in m[5]]
    f.calls = calls
    return f


# NEE_CONV_DIRECT_REPLAY=0: bound launches rebuild their calls every time (_launch)
REPLAY = [os.environ.get("NEE_CONV_DIRECT_REPLAY", "1") not in ("0", "")]


def _scratch_tags(lay) -> tuple:
    """The per-thread scratch buffers (conv.py's ``_buffer`` tags) a launch of layout ``lay`` uses: the padded
    input ("direct_x", unless the kernel reads x itself) and the chan kernel's partial sums ("direct_out", with
    several chunks of (channel, tap) and the output not written directly)."""
    return (() if lay.bare else ("direct_x",)) + (("direct_out",) if lay.multi and not lay.direct_out else ())


def _scratch_base(tags) -> tuple:
    """The calling thread's scratch buffers of ``tags`` (conv.py's ``_buffer``: reallocated when a larger one is
    asked for; None where there is none yet)."""
    bufs = getattr(_conv_tls[0], "bufs", None)
    return tuple(None if bufs is None else bufs.get(("f", t)) for t in tags)


def _scratch_same(tags, ref) -> bool:
    """Whether the calling thread's scratch buffers of ``tags`` are still the arrays ``ref`` (a replay's)."""
    bufs = getattr(_conv_tls[0], "bufs", None)
    if bufs is None:
        return False
    for t, r in zip(tags, ref):
        if bufs.get(("f", t)) is not r:
            return False
    return True


def _replay(lay, prep, x, wp, bias, res, e):
    """_launch's work as native calls ``[(fn, args, params, claim counter slot)]`` to repeat on these arrays (the
    fills and kernels of every image, views and params arrays made once: ~5-10 us of Python less per call of a
    compiled graph's conv), or None where a launch does more (depthwise channel-last fills, the "pix" rows'
    compaction or epilogue pass, the Python pool).  The scratches it writes (conv.py's per-thread "direct_x" and
    "direct_out" buffers: ``_scratch_tags``) are checked to be the same buffers at each replay
    (``_scratch_same``)."""
    if prep.dwise or prep.post or (prep.pix and not lay.direct_out):
        return None
    from . import conv
    if 4 * lay.xlen > conv._KEEP_BYTES:
        return None             # (a scratch this large is not kept: each call allocates its own)
    _conv_tls[0] = conv._tls
    native = prep.native
    if native is None and prep.par:
        return None
    _conv_buffer[0] = conv._buffer
    steps = []
    if not lay.bare:
        xq = _conv_buffer[0](lay.xlen, np.float32, "direct_x").reshape(x.shape[1], lay.nph, lay.S)
    # the chan kernel's partial sums (several chunks of (channel, tap)): as _launch's
    wide = _conv_buffer[0](int(np.prod(lay.oshape)), np.float32, "direct_out").reshape(lay.oshape) \
        if lay.multi and not lay.direct_out else None
    for n in range(x.shape[0]):
        if lay.bare:
            xq = x[n]
        else:
            fn, base = _fill_call(x[n], xq, lay.fill)
            p = base.copy()
            g = getattr(fn, "direct", None)
            steps.append((fn, (x[n], xq, p), p, _F_CTR) if g is None else (g[0], g[1] + (x[n], xq, p), p, _F_CTR))
        y = res[n]
        p = prep.base.copy()
        arrays = _kernel_args(prep, xq, wp, y if wide is None else wide, bias, p, y, e, n)
        g = None if native is None else getattr(native, "direct", None)
        if native is not None and g is None:
            return None
        steps.append((prep.f, arrays, p, lay.t1) if native is None else (g[0], g[1] + arrays, p, lay.t1))
    return steps


def _setup(x, w, b, res, sh, sw, pt, pb, pl, pr, dh, dw, relu, b2, e):
    """(layout, launch plan) of a conv2d call after its operand checks (ValueError naming the shapes)."""
    N, C, H, W = x.shape
    O, C2, KH, KW = w.shape
    OH, OW = res.shape[2], res.shape[3]
    G = C // C2 if C2 else 0
    if (x.dtype != np.float32 or w.dtype != np.float32 or res.dtype != np.float32 or C2 < 1 or G * C2 != C
            or O % G or res.shape[:2] != (N, O)
            or not (x.flags.c_contiguous and w.flags.c_contiguous and res.flags.c_contiguous)
            or (b is not None and (b.dtype != np.float32 or b.shape != (O,)))
            or (b2 is not None and (b2.dtype != np.float32 or b2.shape != (O,)))
            or (e is not None and (e.dtype != np.float32 or e.shape != res.shape or not e.flags.c_contiguous
                                   or np.may_share_memory(e, res)))):
        raise ValueError(f"conv_direct.conv2d: unsupported operands x {x.shape} {x.dtype}, w {w.shape} {w.dtype}, "
                         f"out {res.shape} {res.dtype}" + ("" if e is None else f", residual {e.shape} {e.dtype}"))
    force = FORCE[0]
    if (force is None and _SPLIT_CHAN and threads.NUM_THREADS > 1 and C2 * KH * KW >= _SPLIT_CHAN_MIN_K
            and 2.0 * O * C2 * KH * KW * OH * OW >= _NATIVE_PAR_FLOPS and not _small_k_strided(sh, sw, C2, KH, KW)):
        # split over the threads: the "chan" kernel (see _SPLIT_CHAN); "pix" for the grouped 1x1s on AVX2
        force = "pix" if _avx2_grouped_1x1(C // C2, C2, KH, KW, sh, sw, pt, pb, pl, pr) else "chan"
    key = (x.shape, w.shape, OH, OW, sh, sw, pt, pb, pl, pr, dh, dw, force)
    lay = _layouts.get(key)
    if lay is None:
        if OH != (H + pt + pb - dh * (KH - 1) - 1) // sh + 1 or OW != (W + pl + pr - dw * (KW - 1) - 1) // sw + 1 \
                or min(OH, OW, sh, sw, dh, dw) < 1 or min(pt, pb, pl, pr) < 0 or C < 1:
            raise ValueError(f"conv_direct.conv2d: output {res.shape} does not match input {x.shape}, kernel "
                             f"{w.shape}, stride {(sh, sw)}, padding {(pt, pb, pl, pr)}, dilation {(dh, dw)}")
        lay = _Layout(x.shape, w.shape, OH, OW, sh, sw, pt, pb, pl, pr, dh, dw, force)
        if len(_layouts) > 1024:
            _layouts.clear()
        _layouts[key] = lay
    pkey = (conv_act.norm(relu), e is not None, threads.NUM_THREADS, _PAR_FLOPS, _NATIVE_PAR_FLOPS, XPF[0])
    prep = lay.preps.get(pkey)
    if prep is None:
        prep = lay.preps[pkey] = _Prep(lay, x.shape, w.shape, OH, OW, relu, e is not None)
    return lay, prep


def _post_takes(relu) -> bool:
    """Whether the pass after a "pix" kernel with a residual (conv.py's _finish_epilogue) applies ``relu``: relu
    or none, not another activation (kernels/conv_act.py; the caller then runs the conv and its epilogue apart)."""
    return not relu or conv_act.is_relu(relu)


def _bias(lay, prep, b, b2):
    """The bias by channel block, each group's blocks on their own (as the packed weights)."""
    if b is None and b2 is None:
        return prep.zero_bias
    O = prep.G * prep.Og
    if prep.G == 1 and lay.nob * lay.CW == O and b2 is None and b.flags.c_contiguous:
        return b
    G, Og = prep.G, prep.Og
    bias = np.zeros((G, lay.nob // G * lay.CW), np.float32)
    if b is not None:
        bias[:, :Og] = b.reshape(G, Og)
    if b2 is not None:
        bias[:, :Og] += b2.reshape(G, Og)
    return bias.reshape(-1)


def _launch(lay, prep, x, wp, bias, res, e, relu):
    """The kernel over each image of x (its fill, the threads, the "pix" rows' compaction, the epilogue pass)."""
    N, C = x.shape[0], x.shape[1]
    O = res.shape[1]
    pix, dwise = prep.pix, prep.dwise
    _buffer = _conv_buffer[0]
    if _buffer is None:
        from .conv import _buffer
        _conv_buffer[0] = _buffer
    if dwise:
        xbuf = _buffer(lay.xlen, np.float32, "direct_x")
        xbuf[lay.nph * lay.S * C:] = 0
        xq = xbuf[:lay.nph * lay.S * C].reshape(lay.nph, lay.S, C)
    elif not lay.bare:
        xq = _buffer(lay.xlen, np.float32, "direct_x").reshape(C, lay.nph, lay.S)
    # the pix kernel's wide rows; the chan kernel's partial sums (only with several chunks of (channel, tap))
    wide = None
    if not lay.direct_out and (pix or lay.multi):
        wide = _buffer(int(np.prod(lay.oshape)), np.float32, "direct_out").reshape(lay.oshape)
    f, native, par = prep.f, prep.native, prep.par
    for n in range(N):
        if lay.bare:
            xq = x[n]
        elif dwise:
            _fill_cl(x[n], xq, lay.fill)
        else:
            _fill(x[n], xq, lay.fill)
        y = res[n]
        dst = y if lay.direct_out else (y if wide is None else wide)
        p = prep.base.copy()
        arrays = _kernel_args(prep, xbuf if dwise else xq, wp, dst, bias, p, y, e, n)
        if native is not None:
            native(*arrays)
        elif par:
            threads.run_parallel(lambda _, a=arrays: f(*a), [None] * prep.nthr)
        else:
            f(*arrays)
        if pix and not lay.direct_out:
            # the wide rows compacted into the output (split over the threads with the kernel's)
            OH_, Wq, OW_ = lay.tail
            src = np.lib.stride_tricks.as_strided(wide, (O, OH_, OW_), (wide.strides[0], Wq * 4, 4))
            if prep.par_copy:
                threads.run_parallel(lambda c, y=y, src=src: np.copyto(y[c[0]:c[1]], src[c[0]:c[1]]),
                                     threads.split(O, prep.nthr))
            else:
                np.copyto(y, src)
    if prep.post:
        from .conv import _finish_epilogue
        _finish_epilogue(res, None, e, relu)


def _kernel_args(prep, xq, wp, dst, bias, p, y, e, n) -> tuple:
    """The micro-kernel's arguments for image ``n``: ("pix") its input, weights, output, bias and params; ("chan" /
    "dw") also the output rows' destination ``y`` and with a residual its image of ``e``."""
    if prep.pix:
        return xq, wp, dst, bias, p
    if prep.res:
        return xq, wp, dst, bias, p, y, e[n]
    return xq, wp, dst, bias, p, y


# params of the fill kernel (_render_fill): 0 units (plane rows: C * phases * Hq), 1 Hq, 2 Wq, 3 S (plane
# stride), 4 input channel stride (H * W), 5 input row stride (W), 6 units per claim, 7 the claim counter, 8
# phases; then per phase _FD words: used, plane rows [r0, r1), columns [c0, c1), input rows i0 + sh * k, columns
# j0 + sw * k
_F_T1, _F_HQ, _F_WQ, _F_S, _F_XC, _F_XR, _F_G, _F_CTR, _F_NPH, _F_D = range(10)
_FD = 9


def _render_fill() -> str:
    """The phase-plane fill (see _fill) as a self-claiming kernel ``f(x3, xq, params)``: unit u = plane row r of
    (channel c, phase pi) (u = (c * phases + pi) * Hq + r): zeros outside the phase's rows and columns, its input
    row's elements j0, j0 + sw, ... between (8 at a time for sw 1 and 2: two loads and a shuffle of the even
    lanes; with stride 1 the row's last < 8 as one vector overlapping the previous, or one masked vector for rows
    shorter than 8), and with the plane's last row the plane's tail [Hq * Wq, S) zeroed."""
    v, vp = "<8 x float>", "<8 x float>*"
    L = []
    a = L.append
    a('define void @"kernel"(float* noalias %x, float* noalias %xq, i64* noalias %p) {')
    a('entry:')
    for i, nm in enumerate(("T1", "HQ", "WQ", "S", "XC", "XR", "G")):
        a(f'  %{nm}.p = getelementptr i64, i64* %p, i64 {i}')
        a(f'  %{nm} = load i64, i64* %{nm}.p')
    a(f'  %NPH.p = getelementptr i64, i64* %p, i64 {_F_NPH}')
    a('  %NPH = load i64, i64* %NPH.p')
    a(f'  %ctr = getelementptr i64, i64* %p, i64 {_F_CTR}')
    a(f'  %dsc = getelementptr i64, i64* %p, i64 {_F_D}')
    a('  %HW = mul i64 %HQ, %WQ')
    a('  br label %claim')
    claim_ir(a, "first")
    # the claim's first unit: plane %pl0, row %rr0; then row by row, the plane's words loaded once per plane
    a('first:')
    a('  %pl0 = udiv i64 %gt0, %HQ')
    a('  %pl0m = mul i64 %pl0, %HQ')
    a('  %rr0 = sub i64 %gt0, %pl0m')
    a('  br label %plane')
    a('plane:')
    a('  %pl = phi i64 [ %pl0, %first ], [ %pl1, %next_plane ]')
    a('  %rs = phi i64 [ %rr0, %first ], [ 0, %next_plane ]')
    a('  %us = phi i64 [ %gt0, %first ], [ %u1, %next_plane ]')
    a('  %c = udiv i64 %pl, %NPH')
    a('  %cm = mul i64 %c, %NPH')
    a('  %pi = sub i64 %pl, %cm')
    a('  %plo = mul i64 %pl, %S')
    a('  %pbase = getelementptr float, float* %xq, i64 %plo')
    a(f'  %dpo = mul i64 %pi, {_FD}')
    a('  %dp = getelementptr i64, i64* %dsc, i64 %dpo')
    for i, nm in enumerate(("used", "r0", "r1", "c0", "c1", "i0", "sh", "j0", "sw")):
        a(f'  %{nm}.p = getelementptr i64, i64* %dp, i64 {i}')
        a(f'  %{nm} = load i64, i64* %{nm}.p')
    a('  %xco = mul i64 %c, %XC')
    a('  %xcj = add i64 %xco, %j0')
    a('  %xch = getelementptr float, float* %x, i64 %xcj')
    a('  br label %unit')
    a('unit:')
    a('  %u = phi i64 [ %us, %plane ], [ %u1, %unit_cont ]')
    a('  %r = phi i64 [ %rs, %plane ], [ %rn, %unit_cont ]')
    a('  %rwo = mul i64 %r, %WQ')
    a('  %drow = getelementptr float, float* %pbase, i64 %rwo')
    a('  %u0 = icmp ne i64 %used, 0')
    a('  %ra = icmp sge i64 %r, %r0')
    a('  %rb = icmp slt i64 %r, %r1')
    a('  %rab = and i1 %ra, %rb')
    a('  %inr = and i1 %u0, %rab')
    a('  br i1 %inr, label %copy, label %zrow')

    def zeros(lab, ptr, n, end):
        # ptr[0:n) = 0 (8 at a time, then one at a time), then to ``end``
        a(f'  br label %{lab}v')
        a(f'{lab}v:')
        a(f'  %{lab}i = phi i64 [ 0, %{lab}pre ], [ %{lab}i1, %{lab}vb ]')
        a(f'  %{lab}e = add i64 %{lab}i, 8')
        a(f'  %{lab}c = icmp sle i64 %{lab}e, {n}')
        a(f'  br i1 %{lab}c, label %{lab}vb, label %{lab}s')
        a(f'{lab}vb:')
        a(f'  %{lab}q.f = getelementptr float, float* {ptr}, i64 %{lab}i')
        a(f'  %{lab}q = bitcast float* %{lab}q.f to {vp}')
        a(f'  store {v} zeroinitializer, {vp} %{lab}q, align 4')
        a(f'  %{lab}i1 = add i64 %{lab}i, 8')
        a(f'  br label %{lab}v')
        a(f'{lab}s:')
        a(f'  %{lab}j = phi i64 [ %{lab}i, %{lab}v ], [ %{lab}j1, %{lab}sb ]')
        a(f'  %{lab}sc = icmp slt i64 %{lab}j, {n}')
        a(f'  br i1 %{lab}sc, label %{lab}sb, label %{end}')
        a(f'{lab}sb:')
        a(f'  %{lab}sq = getelementptr float, float* {ptr}, i64 %{lab}j')
        a(f'  store float 0.0, float* %{lab}sq, align 4')
        a(f'  %{lab}j1 = add i64 %{lab}j, 1')
        a(f'  br label %{lab}s')

    # a row outside the phase's rows: all zero
    a('zrow:')
    a('  br label %zrpre')
    a('zrpre:')
    zeros("zr", "%drow", "%WQ", "row_end")
    # a row of the input: zeros [0, c0), the copy [c0, c1), zeros [c1, Wq)
    a('copy:')
    a('  br label %zlpre')
    a('zlpre:')
    zeros("zl", "%drow", "%c0", "cp")
    a('cp:')
    a('  %n = sub i64 %c1, %c0')
    a('  %ri = sub i64 %r, %r0')
    a('  %rih = mul i64 %ri, %sh')
    a('  %xi = add i64 %i0, %rih')
    a('  %xro = mul i64 %xi, %XR')
    a('  %src = getelementptr float, float* %xch, i64 %xro')
    a('  %dst = getelementptr float, float* %drow, i64 %c0')
    a('  %s1 = icmp eq i64 %sw, 1')
    a('  %s2 = icmp eq i64 %sw, 2')
    # vector chunks of 8 outputs: sw 1 one load, sw 2 two loads (their last element, 2 * 8 - 1, read only
    # while the input row has it: n8 chunks while 2 * (8 * k + 8) <= W - j0)
    a('  %wr = sub i64 %XR, %j0')
    a('  %w2 = lshr i64 %wr, 1')
    a('  %n2a = icmp slt i64 %w2, %n')
    a('  %n2 = select i1 %n2a, i64 %w2, i64 %n')
    a('  %nv0 = select i1 %s2, i64 %n2, i64 %n')
    a('  %sv = or i1 %s1, %s2')
    a('  %nv = select i1 %sv, i64 %nv0, i64 0')
    a('  br label %cv')
    a('cv:')
    a('  %ci = phi i64 [ 0, %cp ], [ %ci1, %cvn ]')
    a('  %ce = add i64 %ci, 8')
    a('  %cc = icmp sle i64 %ce, %nv')
    a('  br i1 %cc, label %cvb, label %tail')
    a('cvb:')
    a('  %cdq.f = getelementptr float, float* %dst, i64 %ci')
    a(f'  %cdq = bitcast float* %cdq.f to {vp}')
    a('  %cso = mul i64 %ci, %sw')
    a('  %csq.f = getelementptr float, float* %src, i64 %cso')
    a(f'  %csq = bitcast float* %csq.f to {vp}')
    a(f'  %cl0 = load {v}, {vp} %csq, align 4')
    a('  br i1 %s1, label %cv1, label %cv2')
    a('cv1:')
    a(f'  store {v} %cl0, {vp} %cdq, align 4')
    a('  br label %cvn')
    a('cv2:')
    a('  %csq2.f = getelementptr float, float* %csq.f, i64 8')
    a(f'  %csq2 = bitcast float* %csq2.f to {vp}')
    a(f'  %cl1 = load {v}, {vp} %csq2, align 4')
    ev = ", ".join(f"i32 {2 * i}" for i in range(8))
    a(f'  %cev = shufflevector {v} %cl0, {v} %cl1, <8 x i32> <{ev}>')
    a(f'  store {v} %cev, {vp} %cdq, align 4')
    a('  br label %cvn')
    a('cvn:')
    a('  %ci1 = add i64 %ci, 8')
    a('  br label %cv')
    # stride 1: the last < 8 elements as one vector ending at the row's end (overlapping the previous one), or
    # with rows shorter than a vector one masked load and store; other strides: one at a time
    a('tail:')
    a('  %tl = sub i64 %n, %ci')
    a('  %tpos = icmp sgt i64 %tl, 0')
    a('  %t1 = and i1 %s1, %tpos')
    a('  br i1 %t1, label %tsel, label %cs')
    a('tsel:')
    a('  %tbig = icmp sge i64 %n, 8')
    a('  br i1 %tbig, label %tov, label %tmask')
    a('tov:')
    a('  %to = sub i64 %n, 8')
    a('  %tsq.f = getelementptr float, float* %src, i64 %to')
    a(f'  %tsq = bitcast float* %tsq.f to {vp}')
    a(f'  %tlv = load {v}, {vp} %tsq, align 4')
    a('  %tdq.f = getelementptr float, float* %dst, i64 %to')
    a(f'  %tdq = bitcast float* %tdq.f to {vp}')
    a(f'  store {v} %tlv, {vp} %tdq, align 4')
    a('  br label %zhgo')
    a('tmask:')
    a('  %tn = trunc i64 %n to i32')
    a('  %tni = insertelement <8 x i32> undef, i32 %tn, i32 0')
    a('  %tnv = shufflevector <8 x i32> %tni, <8 x i32> undef, <8 x i32> zeroinitializer')
    a('  %tm = icmp slt <8 x i32> <i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7>, %tnv')
    a(f'  %tms = bitcast float* %src to {vp}')
    a(f'  %tmv = call {v} @llvm.masked.load.v8f32.p0v8f32({vp} %tms, i32 4, <8 x i1> %tm, {v} zeroinitializer)')
    a(f'  %tmd = bitcast float* %dst to {vp}')
    a(f'  call void @llvm.masked.store.v8f32.p0v8f32({v} %tmv, {vp} %tmd, i32 4, <8 x i1> %tm)')
    a('  br label %zhgo')
    a('cs:')
    a('  %cj = phi i64 [ %ci, %tail ], [ %cj1, %csb ]')
    a('  %csc = icmp slt i64 %cj, %n')
    a('  br i1 %csc, label %csb, label %zhgo')
    a('csb:')
    a('  %cjo = mul i64 %cj, %sw')
    a('  %cjs = getelementptr float, float* %src, i64 %cjo')
    a('  %cjv = load float, float* %cjs, align 4')
    a('  %cjd = getelementptr float, float* %dst, i64 %cj')
    a('  store float %cjv, float* %cjd, align 4')
    a('  %cj1 = add i64 %cj, 1')
    a('  br label %cs')
    a('zhgo:')
    a('  br label %zhpre')
    a('zhpre:')
    a('  %zhp = getelementptr float, float* %drow, i64 %c1')
    a('  %zhn = sub i64 %WQ, %c1')
    zeros("zh", "%zhp", "%zhn", "row_end")
    # the plane's last row: its tail [Hq * Wq, S) too
    a('row_end:')
    a('  %rn = add i64 %r, 1')
    a('  %last = icmp eq i64 %rn, %HQ')
    a('  br i1 %last, label %ztpre, label %unit_end')
    a('ztpre:')
    a('  %ztp = getelementptr float, float* %pbase, i64 %HW')
    a('  %ztn = sub i64 %S, %HW')
    zeros("zt", "%ztp", "%ztn", "unit_end")
    a('unit_end:')
    a('  %u1 = add i64 %u, 1')
    a('  %uc = icmp slt i64 %u1, %gt1')
    a('  br i1 %uc, label %wrap, label %claim')
    a('wrap:')
    a('  br i1 %last, label %next_plane, label %unit_cont')
    a('unit_cont:')
    a('  br label %unit')
    a('next_plane:')
    a('  %pl1 = add i64 %pl, 1')
    a('  br label %plane')
    a('done:')
    a('  ret void')
    a('}')
    a(f'declare {v} @llvm.masked.load.v8f32.p0v8f32({vp}, i32, <8 x i1>, {v})')
    a(f'declare void @llvm.masked.store.v8f32.p0v8f32({v}, {vp}, i32, <8 x i1>)')
    return "\n".join(L) + "\n"


# fills of at least this many plane elements (xq) are split over the threads (gemm_driver's native workers)
_FILL_PAR = 1 << 17
_fill_kernels: dict = {}


def _fill_params(parts, C, H, W, Hq, Wq, S) -> np.ndarray:
    """The fill kernel's params template (claim counter 0, one claim of every unit), every read and write
    checked inside x3 (C, H, W) and xq (C, phases, S)."""
    nph = len(parts)
    base = np.zeros(_F_D + _FD * nph, np.int64)
    base[:_F_D] = (C * nph * Hq, Hq, Wq, S, H * W, W, C * nph * Hq, 0, nph)
    if Hq * Wq > S:
        raise AssertionError("conv_direct: fill planes larger than their stride")
    for pi, part in enumerate(parts):
        if part is None:
            continue
        r0, r1, c0, c1, rs, cs = part
        sh, sw = rs.step or 1, cs.step or 1
        if not (0 <= r0 < r1 <= Hq and 0 <= c0 < c1 <= Wq and rs.start >= 0 and cs.start >= 0 and sh >= 1
                and sw >= 1 and rs.start + sh * (r1 - r0 - 1) < H and cs.start + sw * (c1 - c0 - 1) < W):
            raise AssertionError("conv_direct: fill would read or write out of bounds")
        base[_F_D + _FD * pi:_F_D + _FD * (pi + 1)] = (1, r0, r1, c0, c1, rs.start, sh, cs.start, sw)
    return base


def _fill(x3, xq, fill):
    """xq[c, phase, :Hq * Wq] = the zero-padded input's phase planes, the rest of xq zero: one compiled pass
    (_render_fill; numpy's strided copies took 80-120 us of a 224x224 stride-2 stem's phase split and 14-21 us
    of a small padded conv's ~8 slice assignments), split over the threads from _FILL_PAR elements."""
    fn, base = _fill_call(x3, xq, fill)
    fn(x3, xq, base.copy())


def _fill_call(x3, xq, fill):
    """(kernel caller, params template) of ``_fill(x3, xq, fill)`` after its checks."""
    Hq, Wq, parts = fill
    C, H, W = x3.shape
    S = xq.shape[2]
    if (xq.shape[:2] != (C, len(parts)) or x3.dtype != np.float32 or xq.dtype != np.float32
            or not (x3.flags.c_contiguous and xq.flags.c_contiguous)):
        raise AssertionError("conv_direct: fill of the wrong layout")
    nt = threads.NUM_THREADS
    key = (id(parts), C, H, W, S, nt)
    d = _fill_desc.get(key)
    if d is None or d[0] is not parts:
        if len(_fill_desc) > 1024:
            _fill_desc.clear()
        base = _fill_params(parts, C, H, W, Hq, Wq, S)
        f = builtin(_fill_kernels, "fill", "convdirectfillv8", f"{source_key()}|fill", _render_fill, 3)
        nthr = min(nt, base[_F_T1])
        g = None
        if nthr > 1 and xq.size >= _FILL_PAR:
            g = _native_parallel(f, 3, nthr)
            if g is not None:
                base[_F_G] = -(-base[_F_T1] // (nthr * _CHUNKS_PER_THREAD))
        base.flags.writeable = False
        d = _fill_desc[key] = (parts, base, g or f)
    return d[2], d[1]


# _fill's params and caller by the layout's parts list (checked by identity), shape and thread count
_fill_desc: dict = {}


def _fill_cl(x3, xq, fill):
    """xq[phase, :Hq * Wq, c] = the zero-padded input's phase planes channel-last (the "dw" kernel: a pixel's
    channels one vector), the rest of each phase zero."""
    Hq, Wq, parts = fill
    xq[:, Hq * Wq:] = 0
    for pi, part in enumerate(parts):
        plane = xq[pi, :Hq * Wq].reshape(Hq, Wq, -1)
        if part is None:
            plane[...] = 0
            continue
        r0, r1, c0, c1, rs, cs = part
        if r0:
            plane[:r0] = 0
        if r1 < Hq:
            plane[r1:] = 0
        if c0:
            plane[r0:r1, :c0] = 0
        if c1 < Wq:
            plane[r0:r1, c1:] = 0
        np.copyto(plane[r0:r1, c0:c1], x3[:, rs, cs].transpose(1, 2, 0))


# ---------------------------------------------------------------- conv2d_kernel's branch
# NEE_CONV_DIRECT: "" (the cost rule), "0" (never), "1" (every float32 conv it can take)
MODE = [os.environ.get("NEE_CONV_DIRECT", "")]


def applies(x, w, res, G) -> bool:
    """The shapes and dtypes the kernel takes (float32, C-contiguous operands, AVX-512F or AVX2 + FMA; depthwise
    only with one output channel per input channel)."""
    return ((G == 1 or w.shape[1] > 1 or w.shape[0] == x.shape[1]) and x.dtype == np.float32
            and w.dtype == np.float32 and res.dtype == np.float32 and x.flags.c_contiguous and w.flags.c_contiguous
            and res.flags.c_contiguous and w.shape[1] > 0 and available())


def _pk1x1_takes(xs, ws, rs, sh, sw, pt, pb, pl, pr, G, pre=False, squeezes=False) -> bool:
    """Whether kernels/conv1x1_packed.py takes this conv (its cost rule; not the per-channel 1x1s of depthwise
    shape); ``pre``: the conv has an input prologue (fused only into that kernel); ``squeezes``: see its pays."""
    return not (ws[1] == 1 and G > 1) and conv1x1_packed.pays(xs, ws, rs, sh, sw, pt, pb, pl, pr, G, pre, squeezes)


def route(x, w, res, attrs, kept: bool, pre: bool = False):
    """The float32 path conv2d_kernel takes after the depthwise one (``conv.conv2d_into`` and a compiled graph's
    bound step, ``conv.bind_into``, both ask here): "pk1x1" (NEE_CONV_DIRECT unset and the unpadded 1x1 convs
    kernels/conv1x1_packed.py's rule takes), "direct" (this module's kernel: NEE_CONV_DIRECT=1, or the cost
    rule with ``kept`` weights: the caller's array, its packing cached across calls), or None (conv.py's GEMM /
    Winograd paths).  ``pre``: asked for a conv with an input prologue (the packed kernel's rule then differs)."""
    mode = MODE[0]
    sh, sw = attrs["stride"]
    pt, pb, pl, pr = attrs["padding"]
    if mode == "" and w.ndim == 4 and w.shape[2] == w.shape[3] == 1 and _pk1x1_takes(
            x.shape, w.shape, res.shape, sh, sw, pt, pb, pl, pr, attrs["groups"], pre):
        return "pk1x1"
    if mode == "0" or not applies(x, w, res, attrs["groups"]):
        return None
    dh, dw = attrs["dilation"]
    xs = x.shape
    if (sh, sw) != (1, 1) and w.shape[2:] == (1, 1) and not (pt or pb or pl or pr) and not pre and _sub1x1():
        # a strided unpadded 1x1 (ResNet's downsamples): ruled as the stride-1 conv of its subsampled input, which
        # the kernel's fill makes as it fills its phase plane (conv.py's _strided_1x1 copies it otherwise: numpy's
        # strided copy on the calling thread, then the stride-1 conv, the same sums in the same order)
        xs, sh, sw = (xs[0], xs[1], res.shape[2], res.shape[3]), 1, 1
    if mode != "1" and not (kept and pays(xs, w.shape, res.shape, sh, sw, pt, pb, pl, pr, dh, dw, attrs["groups"])):
        # a squeeze the packed kernel's rule leaves to this one, which declines it: the packed kernel, not the GEMM
        # (1 thread, bound step vs conv2d_into's GEMM, + residual, min of 200, us: MobileNetV3's 240 -> 40 on 14x14
        # 23.5 vs 46.5, 576 -> 24 on 14x14 36 vs 65, 960 -> 40 on 7x7 26 vs 49, 384 -> 16 on 13x13 17 vs 33, 640 ->
        # 40 on 56x56 696 vs 1523; /tmp/lead/c4.py, session 27)
        if mode == "" and w.ndim == 4 and w.shape[2] == w.shape[3] == 1 and not pre and _pk1x1_takes(
                x.shape, w.shape, res.shape, attrs["stride"][0], attrs["stride"][1], pt, pb, pl, pr, attrs["groups"],
                squeezes=True):
            return "pk1x1"
        return None
    return "direct"


def _sub1x1() -> bool:
    from . import conv
    return conv._SUB1X1[0]


def try_conv2d(x, w, b, res, attrs, kept: bool, relu=False, b2=None, e=None) -> bool:
    """conv2d_kernel's branch: run the path :func:`route` picks into res (the packed 1x1 kernel or the direct
    one); False when neither ran (nothing written: conv.py's paths follow; the packed kernel may decline operands
    its rule's shapes allow).  ``relu`` / ``b2`` / ``e``: as conv2d's."""
    r = route(x, w, res, attrs, kept)
    if r == "pk1x1":
        # unpadded 1x1: linalg's packed GEMM kernel, the activation as its panels (kernels/conv1x1_packed.py)
        return conv1x1_packed.conv2d(x, w, b, res, attrs["groups"], relu, b2, e, stride=attrs["stride"])
    if r != "direct":
        return False
    sh, sw = attrs["stride"]
    pt, pb, pl, pr = attrs["padding"]
    dh, dw = attrs["dilation"]
    return conv2d(x, w, b, res, sh, sw, pt, pb, pl, pr, dh, dw, relu, b2, e)


# unpadded 1x1 convs with fewer input channels per group than this go direct: OpenBLAS runs GEMMs this short
# in K at a fraction of its speed (1 thread, relu epilogue: 16 -> 64 on 55x55 108 vs 89 us direct, ShuffleNet's
# 24 -> 112 groups 4 on 56x56 (K = 6) 107 vs 79 us; 48 -> 192 on 13x13 48 vs 48 us)
_SHORT_K = 32
# one-group unpadded 1x1 convs go direct where the "chan" kernel is picked with at least this lane use: 0.86-1.0x
# the GEMM's time (its relu in the stores, the GEMM's in a pass; 1 thread: 256 -> 32 on 27x27 128 vs 148 us,
# 512 -> 64 on 13x13 120 vs 132, 256 -> 64 on 56x56 968 vs 1086, 512 -> 1000 on 13x13 1709 vs 1788, 2048 ->
# 512 on 7x7 1135 vs 1163); at 16 output channels (blocks of 32 half used) 1.4x; with groups (68 channels
# each) 1.25-1.3x: the GEMMs
_CHAN_1X1_USE = 0.85
# (0.9 until session 23: the (3, 7) tile that replaced (3, 8) uses 36 of 42 pixel lanes on 6x6 planes, 0.857, where
# (3, 8) used 36 of 40: Inception v1's 832 -> 48 1x1 on 6x6 then went to the GEMM, 42 vs 21 us on the direct
# kernel (1 thread, conv2d_into + bias + relu, min of 300); no other conv of the light models has a lane use
# between the two)
# AVX2 (8 lanes, 16 registers: a tile of 2 x 8 channels x 6 pixels, 9 loads per 12 FMAs): OpenBLAS's Haswell
# GEMMs (packed panels) beat the "chan" kernel on the larger one-group 1x1 convs: direct only below this many
# flops (1 thread, relu, us direct / GEMM: 512 -> 64 on 13x13 (11 MFLOP) 170 / 167, 256 -> 32 on 27x27 198 / 225,
# 576 -> 64 on 14x14 244-251 / 296; 1024 -> 256 on 14x14 (103 MFLOP) 1428 / 1235, 512 -> 1000 on 13x13 2412 /
# 2104, 64 -> 256 on 56x56 2076 / 1739, 1024 -> 352 on 7x7 (35 MFLOP) 1615 / 1362).  Session 13: the GEMM path
# (its epilogue in gemm_driver's blocks) now beats the direct kernel on the small ones too (1 thread, conv + bias +
# relu, thread CPU time, min of 45, in-process alternating, us direct / GEMM: 64 -> 16 on 55x55 153 / 126, 32 -> 128
# on 27x27 183 / 128, 48 -> 192 on 13x13 93 / 62, 64 -> 256 on 13x13 131 / 91, 384 -> 64 on 13x13 157 / 124, 512 ->
# 64 on 13x13 191 / 161, 1024 -> 128 on 7x7 265 / 198, 576 -> 64 on 14x14 248 / 206; 128 -> 16 on 55x55 236 / 250
# the only loss; whole SqueezeNet ~4% less CPU).  Not taken: with 0 here the ONNX conformance case light_squeezenet
# (constant weights: logits ~1.4e10, float32 ulp 1024) fails, its last 512 -> 1000 GEMM's tail rows (OpenBLAS's
# edge kernel) rounding differently on the new inputs and the softmax then one-hot on them instead of uniform.
# Session 14: kernels/conv1x1_packed.py takes most unpadded stride-1 1x1s before this rule (those below only with
# NEE_CONV_PK1X1=0, or its "squeezes" and K < 16), its sums row-symmetric: the case passes whatever path the other
# convs take (OpenBLAS's 12-row tiles sum their two halves of 6 in different orders: that was the trap)
_AVX2_1X1_FLOPS = 16e6
_pays: dict = {}
_conv_mod = [None]      # kernels/conv.py (imported on the first call: it imports this module)


def takes_1x1(xs, ws, rs, sh, sw, G) -> bool:
    """Whether this module's rule takes the unpadded 1x1 conv were the packed 1x1 kernel not asked first (that
    kernel's rule on 16 lanes leaves the small planes to this kernel where it does)."""
    return (G == 1 or ws[1] > 1 or ws[0] == xs[1]) and ws[1] > 0 and available() and \
        _pays_rule(xs, ws, rs, sh, sw, 0, 0, 0, 0, 1, 1, G, threads.NUM_THREADS, pk=False)


def pays(xs, ws, rs, sh, sw, pt, pb, pl, pr, dh, dw, G=1) -> bool:
    """The cost rule (cached per shape): every float32 convolution but the unpadded 1x1 ones of _SHORT_K or more
    input channels per group that the "chan" kernel does not take with _CHAN_1X1_USE of its lanes (one GEMM per
    group on the NCHW buffers: grouped, ShuffleNet's, and strided ones) and the 3x3 ones conv.py's Winograd
    rule takes (F(4x4) at 1.2-1.7x the direct kernel's
    speed).  Measured on the 184 distinct group-1 convs of the ONNX light models squeezenet, inception v1/v2,
    resnet50, densenet121 (1 thread, thread CPU time, min of 5, old and new interleaved): the others (3x3 on
    planes up to 14x14 without Winograd, 3x3 stride 2, 5x5, 7x7 stems) ran 1.0-1.7x faster direct than with
    im2col or padded-rows GEMMs; grouped 3x3 (32 groups, 128 and 256 channels on 28x28 / 14x14) 1.3-2.8x
    faster than im2col + a GEMM per group (one launch over all groups)."""
    nt = threads.NUM_THREADS
    c = _conv_mod[0]
    if c is None:
        from . import conv as c
        _conv_mod[0] = c
    # (conv.py's Winograd settings in the key: the 3x3s' answer is its Winograd rule's)
    key = (xs, ws, rs, sh, sw, pt, pb, pl, pr, dh, dw, G, nt, c._WINO_FORCE[0], c._WINO_DIRECT_MT, c._DIRECT16_RATE,
           c._WINO_GEMM[0], c._WINO_RATE16[0],
           conv1x1_packed.ON[0], conv1x1_packed.FORCE[0], conv1x1_packed.FUSED[0])
    r = _pays.get(key)
    if r is None:
        if len(_pays) > 4096:
            _pays.clear()
        r = _pays[key] = _pays_rule(xs, ws, rs, sh, sw, pt, pb, pl, pr, dh, dw, G, nt)
    return r


# depthwise convs go direct ("dw": the input transposed channel-last, 16 channels a vector) on small planes only
# (the transposition, ~0.5 ns per input element, against conv.py's per-plane kernel; 1 thread): 3x3 on planes up
# to _DW_PLANE_3X3 of at least _DW_MIN_C channels (544 on 7x7 46 vs 56 us, 1024 on 4x4 52 vs 62; 256 on 8x8 38 vs
# 27, 100 on 7x7 23 vs 16, 136 on 28x28 135 vs 73), larger kernels on planes up to _DW_PLANE_BIG (5x5: 480 on
# 14x14 162 vs 307 us, stride 2 169 vs 221, 1152 on 7x7 132 vs 396; 144 on 56x56 stride 2 460 vs 321)
_DW_PLANE_3X3 = 64
_DW_MIN_C = 512
_DW_PLANE_BIG = 196


def _pays_rule(xs, ws, rs, sh, sw, pt, pb, pl, pr, dh, dw, G, nt=1, pk=True) -> bool:
    N, C, H, W = xs
    O, Cg, KH, KW = ws
    if Cg == 1 and G > 1:
        if KH * KW >= 25:
            return H * W <= _DW_PLANE_BIG
        return H * W <= _DW_PLANE_3X3 and C >= _DW_MIN_C
    if KH == 1 and KW == 1 and pt == pb == pl == pr == 0:
        if pk and MODE[0] == "" and _pk1x1_takes(xs, ws, rs, sh, sw, pt, pb, pl, pr, G):
            return False        # kernels/conv1x1_packed.py's (try_conv2d runs it before this rule)
        if Cg < _SHORT_K:
            return True
        if G > 1 and N == 1 and nt > 1:
            # conv.py runs a grouped 1x1 as one GEMM per group, all on the calling thread below its _PAR_FLOPS
            # (the Python pool's hand-off costs more than it saves); the direct kernel (1.2x their time on one
            # thread) splits over gemm_driver's native workers from _NATIVE_PAR_FLOPS
            from . import conv
            return _NATIVE_PAR_FLOPS <= 2.0 * O * Cg * rs[2] * rs[3] < conv._PAR_FLOPS
        if G > 1 or sh != 1 or sw != 1:
            return False
        if VEC != 16 and 2.0 * O * Cg * rs[2] * rs[3] >= _AVX2_1X1_FLOPS:
            return False
        kind, _, _, use = plan(O, rs[2], rs[3], W)
        return kind == "chan" and use >= _CHAN_1X1_USE
    if G > 1:
        return True
    from . import conv
    return not conv._winograd_m(N, C, H, W, O, 1, KH, KW, sh, sw, dh, dw, rs[2], rs[3], np.dtype(np.float32))
