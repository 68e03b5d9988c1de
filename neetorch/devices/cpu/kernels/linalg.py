"""CPU kernels for matrix products: BLAS (numpy's OpenBLAS); einsum through ``np.einsum``.

float32/float64 products with at most ``ROWS_MAX`` rows (a decoder step's linears, attention
against a KV cache) or one column run through a small LLVM kernel that streams the matrix in
memory order, every matrix of a batch in one GIL-free call (see "few-row products" below); on
2+ threads, from ``DRV_GEMV_BYTES`` of matrix, as tasks (column blocks, groups of matrices)
claimed by the calling thread and ``gemm_driver``'s native workers (``_rows_threaded``).

float32 products of 5+ rows with a frozen weight (ONNX initializers, ``nee.jit(freeze=...)`` constants;
``winograd.freeze``) run through an LLVM tile kernel on the weight packed once into 32-column panels (16 on AVX2
hosts: ``PK_NR``; a last partial one zero-padded)
(``_pk_caller``, see "products with a frozen
weight" below), on 2+ threads as gemm_driver call-job tasks; compiled graphs' steps take it (kernels/fused.py's
bound callers).

Batches of small float32 products (attention's q @ k^T and p @ v on (B, H, S, dh) views, batch dims that merge
into at most two strides, N a multiple of PK_NR, K within one K block) run through the batched packed kernel
(``_bpk_caller``, see "batches of small products" below): each matrix's ``b`` packed on the stack, the packed
tile kernel on it, all matrices in one native call (2+ threads: gemm_driver call-job tasks).

On 2+ threads, float32/float64 products from ``DRV_MNK`` multiply-adds run through
``gemm_driver``: one GIL-free native call cuts the product into blocks (columns or rows of a
2-D product, whole matrices of a batch) and runs one ``cblas_?gemm`` (``?gemv`` for one row or
column) per block on the calling thread and the driver's native workers.  Its descriptor
depends only on the operands' shapes, strides and dtypes, so it is made once per layout
(``_plans``) and a product costs ~2 us of Python on top of BLAS.  Layouts it does not take
(odd strides, batch dims that do not merge, an output overlapping an input, float16, ints)
and products on one thread take the paths below.

``np.matmul`` calls BLAS (OpenBLAS, single-threaded here) whenever both operands are
"blasable": the last two dims have one unit stride and a non-negative leading
stride (transposed layouts are free).  Anything else (negative or odd strides,
stride-0 broadcast matrices) is copied to a contiguous matrix once here, instead of
letting numpy fall into its slow non-BLAS loop.  A batch of matrices times one
matrix is folded into a single big GEMM when the batch can be merged without a copy.
"""
from __future__ import annotations

import os

import numpy as np

from .. import gemm_driver as _gemm_driver
from .. import kernel, native_chain, threads
from . import gemv as _gemv

# numpy's OpenBLAS runs its Haswell kernels on AMD Zen 4, where they beat the SkylakeX ones it picks for
# float32 products by 5-38%, and its SkylakeX ones on Zen 5, where they beat the Haswell ones it picks by up to
# 2x (gemm_driver.choose_blas_core; NEE_OPENBLAS_CORE=keep: OpenBLAS's own choice; a user's OPENBLAS_CORETYPE kept).
# Here, at the CPU backend's import, before any neetorch thread runs a product
_gemm_driver.choose_blas_core()

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)


def _blasable(a: np.ndarray) -> bool:
    """True when the matrices in the last two dims can go straight to BLAS."""
    isz = a.itemsize
    n0, n1 = a.shape[-2], a.shape[-1]
    s0, s1 = a.strides[-2], a.strides[-1]
    if n0 <= 1 and n1 <= 1:
        return True
    if (s1 == isz or n1 == 1) and s0 % isz == 0 and s0 >= max(n1, 1) * isz:
        return True
    return (s0 == isz or n0 == 1) and s1 % isz == 0 and s1 >= max(n0, 1) * isz


def _prep(a: np.ndarray) -> np.ndarray:
    f = a.flags
    if f.c_contiguous or f.f_contiguous:   # the common layouts (a weight's .T is F-contiguous)
        return a
    if not _blasable(a):
        return np.ascontiguousarray(a)
    # batch dims with negative strides also make numpy fall off the BLAS path
    for s in a.strides[:-2]:
        if s < 0:
            return np.ascontiguousarray(a)
    return a


def _batch_is_broadcast(b: np.ndarray) -> bool:
    return all(s == 0 or n == 1 for n, s in zip(b.shape[:-2], b.strides[:-2]))


# Products the driver does not take (see the module docs) and ones on one thread:
# BLAS runs single-threaded inside every product (threads.serial_blas: its own threads would
# compete with neetorch's pool, and one descheduled BLAS worker stalls the call); a large product
# is cut into blocks instead, one BLAS call per block, across neetorch's pool (nee.set_num_threads):
# a 2-D product by rows of ``a`` or by columns of ``b`` (the larger of the two, so the operand each
# block re-packs is the smaller one: a matrix-vector product splits the weight's columns), a
# batch by its leading dim.  Below PAR_FLOPS a product stays on the calling thread (the hand-off
# costs tens of us); matrix-vector and other skinny products are bound by the weight's memory
# bandwidth, not flops, and are split from PAR_BYTES of weight on.  Measured on the shared, loaded
# 2-core box (in one process, interleaved, min of 8 rounds): the ONNX GPT decoder step (weights of
# 0.6-2.4 MB, 1x384 rows) took 19.8 ms with PAR_BYTES=4 MiB, 25.8 ms with 1 MiB and 26.2 ms with
# 256 KiB (a worker the scheduler runs late, or preempted holding the GIL, stalls the call for
# longer than the split saves); the 8 MFLOP threshold gave the best transformer block (6.2 ms vs
# 7.6 ms at 64 MFLOP and 8.5 ms on one thread) and BERT 83 ms vs 110 ms on one thread.
PAR_FLOPS = float(os.environ.get("NEE_MATMUL_PAR_FLOPS", "8e6"))
PAR_BYTES = int(os.environ.get("NEE_MATMUL_PAR_BYTES", str(4 << 20)))
_COL_ALIGN = 16          # column blocks start on 64-byte boundaries (float32)
# blocks per thread: a worker that the scheduler runs late holds up the call by one block at most
# (unclaimed blocks are run by whoever is free, threads.run_parallel), at the cost of re-packing
# the shared operand once per block
_BLOCKS_PER_THREAD = int(os.environ.get("NEE_MATMUL_BLOCKS_PER_THREAD", "4"))
_MIN_COLS = 64
_MIN_ROWS = 16

_set_threads_local = threads._blas_set   # OpenBLAS's thread-count setter (None: not found)


def matmul_into(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """out[..., n, m] = a[..., n, k] @ b[..., k, m] (batch dims already broadcast-compatible)."""
    if out.size == 0:
        return
    k = a.shape[-1]
    if k == 0:
        out.fill(0)
        return
    if (out.shape[-2] <= ROWS_MAX or out.shape[-1] == 1) and _rows_product(out, a, b):
        return
    if b.ndim == 2 and out.dtype == _F32 and _gemv_frozen(b) and not np.may_share_memory(out, a) and \
            not np.may_share_memory(out, b):
        # a frozen weight: the packed kernel where a bound step takes it (fused._product_caller's order), so a
        # compiled graph's first call (its steps not bound yet) sums as its later calls do: the same bits
        g = _pk_caller(out, a, b)
        if g is not None:
            g(out, a, b)
            return
    if out.ndim >= 3 and out.dtype == _F32 and BPK_ON[0]:
        g = _bpk_caller(out, a, b)       # a batch of small products: the batched packed kernel
        if g is not None and not np.may_share_memory(out, a) and not np.may_share_memory(out, b):
            g(out, a, b)
            return
    mnk = out.size * k
    desc = _drv_desc(out, a, b)
    # an output over an input: BLAS writes as it reads, numpy's path copies
    if desc is not None and not np.may_share_memory(out, a) and not np.may_share_memory(out, b):
        _drv_run(desc, a, b, out)
        return
    if b.ndim == 2 and out.dtype != _F16:
        # the common product, (..., n, k) activations @ a (k, m) weight, all contiguous and below
        # the split thresholds: straight to one BLAS call, without _matmul_into's general layout
        # checks (the same call _gemm2d would make)
        fa, fo, fb = a.flags, out.flags, b.flags
        if fa.c_contiguous and fo.c_contiguous and (fb.c_contiguous or fb.f_contiguous):
            m = b.shape[1]
            R = out.size // m
            if threads.NUM_THREADS <= 1 or not (2.0 * mnk >= PAR_FLOPS or
                                                (k * m * b.itemsize >= PAR_BYTES and max(R, m) > 1)):
                a2 = a if a.ndim == 2 else a.reshape(R, k)
                o2 = out if out.ndim == 2 else out.reshape(R, m)
                if mnk < _GEMV_NEVER_THREADS or (mnk <= _GEMM_NEVER_THREADS and m > 1 and R > 1):
                    _gemm(o2, a2, b)
                else:
                    with threads.serial_blas():
                        _gemm(o2, a2, b)
                return
    if mnk < _GEMV_NEVER_THREADS or (mnk <= _GEMM_NEVER_THREADS and out.shape[-1] > 1 and out.shape[-2] > 1):
        _matmul_into(out, a, b)
        return
    with threads.serial_blas():
        _matmul_into(out, a, b)


# ------------------------------------------------------------------ few-row products (memory order)
# A product with a few rows (a decoder's one-token step: x (1, K) @ W (K, N); attention's
# q (B, H, 1, dh) @ k^T and p @ v) does ROWS_MAX multiply-adds or fewer per matrix element it
# reads: it is bound by how fast the matrix streams in from memory, not by flops.  OpenBLAS's gemv
# reads four or more rows of the matrix at once (one stream per row); with rows of ~1.5 KB those
# streams are too short for the hardware prefetcher: a (1536, 384) float32 weight streamed at
# ~9.5 GB/s where a (384, 1536) one of the same size reached ~14.  The kernel here reads the
# matrix in memory order, one row at a time: for ``b`` row-major (unit stride along N) it adds
# x[r, k] * b[k, :] into the output rows (kept in L1), for ``b`` column-major (a weight's ``.T``,
# unit stride along K) it takes one dot product per row of b^T.  All matrices of a batch run in the
# same native call (broadcast batches by stride 0, transposed operands by their strides: nothing
# is copied).  A product with one output column, (n, k) @ (k, 1), is the same loop on the
# transposed problem.  The kernel is LLVM IR (_rows_ir, compiled once per dtype into llvm_render's
# disk cache) called through llvm_call's builtin trampoline (GIL released); its descriptor
# (sizes, element strides, the part of the product to compute) depends only on the layout and is
# made once per layout (_rows_plans).  On 2+ threads large products are cut into tasks, see
# _rows_threaded.
# Measured on the shared 2-core box (same process, interleaved, median of 15 rounds through the
# ONNX GPT step's 24 one-row products, 42.5 MB of weights, so they come from memory; load ~5):
# 1.95 ms (21.8 GB/s) vs 2.91 for BLAS with row-major weights, 2.08 vs 3.45 with transposed ones;
# the whole step 0.81-0.92x of the BLAS path's time (bench/onnx_vs_ort.py --models gpt_step).
ROWS_MAX = int(os.environ.get("NEE_MATMUL_ROWS_MAX", "4"))
_ROWS_ON = os.environ.get("NEE_MATMUL_ROWS", "1") not in ("0", "")
# matrices with shorter contiguous runs stay with BLAS, whose gemv does several short row updates
# at once: rows of a row-major b under ROWS_MIN_N elements (p @ v with 16-wide heads, 12 x 2049:
# 69 vs 32 us; 32-wide 16-21 vs 18-19 at 513, mixed at 2049; from 64 as fast or faster: 230 vs 364
# us at 12 x 2049 x 64), dot products (column-major b) under ROWS_MIN_K (four at a time here, q @ k^T
# with 32-wide heads 16 vs 23 us at 12 x 513, 16-wide 20 vs 34; 8-wide 36 vs 23 at 2049)
ROWS_MIN_N = 64
ROWS_MIN_K = 16
# ... except one-row / one-column products of a matrix this small (a squeeze-excite block's 16 x 8 weight): there
# BLAS's call and numpy's dispatch (~1 us, and ~3 us of the generic step's Python around them) outweigh any loop,
# and the kernel's bound call joins a compiled graph's native step chain (2-4 rows keep ROWS_MULTI_MIN_BYTES)
ROWS_TINY_BYTES = 16 << 10
# batches split across threads: from rows of this many elements (attention's p @ v with 32-wide heads,
# 12 x 513 x 32 float32: 21 vs 24 us for BLAS hot, 45 vs 49 cold, on the loaded 2-core box, its worker
# rarely joining; 16-wide rows stay with BLAS, see ROWS_MIN_N)
ROWS_MIN_N_PAR = int(os.environ.get("NEE_MATMUL_ROWS_MIN_N_PAR", "32"))
# 2-4 rows only from this many bytes of matrix: this loop re-reads the output rows (from L1) for
# every row of b where BLAS's gemm keeps a tile of them in registers, so on a matrix already in
# cache it is 1.5-3x slower (4 x 384 x 384: 41 vs 14 us); a matrix of an L2 and up is more likely
# streamed from memory, where it is 1.7-2.5x faster (the GPT step's weights with 2 rows: 3.1 vs
# 5.4 ms, 4 rows 4.6 vs 6.3 ms)
ROWS_MULTI_MIN_BYTES = 1 << 20
# row-major b with rows of this many elements and up: four rows per pass (one load and store of
# the output row per four; long rows are long enough streams for the prefetcher): 4096 x 4096
# float32 19-20 GB/s vs 15.5 one row at a time, while 1536 x 384 fell from 15.5 to 10 GB/s
ROWS_PASS4_FROM = 4096
_ROWS_DT = {_F32: 0, np.dtype(np.float64): 1}
_rows_fns: list = [None, None]
_rows_addrs: list = [None, None]     # their machine code's addresses (the driver's call jobs run them)
_rows_plans: dict = {}
# descriptor words (int64): the layout (_rows_plan), then the part of the product a call computes:
# matrices [b0, b1) of the batch, output columns [n0, n1) (the whole product, or one task's block)
_RD_B0, _RD_B1, _RD_N0, _RD_N1 = 15, 16, 17, 18
# (words 19-20 unused) words 21-24: a threaded product's (_rows_threaded): 1, the address of gemm_driver's state cell, of the
# driver's call-job descriptor, of the tasks' descriptors
_RD_THR, _RD_TASKS = 21, 24
_RD_WORDS = 32           # 256 bytes: the stacked task descriptors stay 64-byte aligned


def _rows_ir(t: str) -> str:
    """LLVM IR of the few-row kernel for element type ``t`` (float or double):
    ``kernel(y, x, w, desc)``, the pointers as llvm_call passes them (the arrays' data; the
    descriptor last, the argument gemm_driver's call jobs advance per task)."""
    fm = "reassoc nsz arcp contract"   # not nnan/ninf: NaN and inf propagate as in BLAS
    hdr = "define internal void"
    # the inner loops take noalias pointers (the caller checked that out overlaps no input; x
    # and w are only read), so they vectorize without runtime overlap checks
    inner = f"""
{hdr} @zero({t}* noalias %y, i64 %n) noinline {{
entry:
  br label %c
c:
  %i = phi i64 [ 0, %entry ], [ %i1, %b ]
  %m = icmp slt i64 %i, %n
  br i1 %m, label %b, label %e
b:
  %p = getelementptr inbounds {t}, {t}* %y, i64 %i
  store {t} 0.0, {t}* %p
  %i1 = add nsw i64 %i, 1
  br label %c
e:
  ret void
}}

; y[0:n] += a * w[0:n]
{hdr} @axpy({t}* noalias %y, {t}* noalias readonly %w, {t} %a, i64 %n) noinline {{
entry:
  br label %c
c:
  %i = phi i64 [ 0, %entry ], [ %i1, %b ]
  %m = icmp slt i64 %i, %n
  br i1 %m, label %b, label %e
b:
  %wp = getelementptr inbounds {t}, {t}* %w, i64 %i
  %wv = load {t}, {t}* %wp
  %yp = getelementptr inbounds {t}, {t}* %y, i64 %i
  %yv = load {t}, {t}* %yp
  %pr = fmul {fm} {t} %a, %wv
  %s = fadd {fm} {t} %yv, %pr
  store {t} %s, {t}* %yp
  %i1 = add nsw i64 %i, 1
  br label %c
e:
  ret void
}}

; y[0:n] += (a0 w0 + a1 w1) + (a2 w2 + a3 w3): four rows w0..w3 = w + k * ld
{hdr} @axpy4({t}* noalias %y, {t}* noalias readonly %w, i64 %ld, {t} %a0, {t} %a1, {t} %a2, {t} %a3,
              i64 %n) noinline {{
entry:
  %w1 = getelementptr inbounds {t}, {t}* %w, i64 %ld
  %w2 = getelementptr inbounds {t}, {t}* %w1, i64 %ld
  %w3 = getelementptr inbounds {t}, {t}* %w2, i64 %ld
  br label %c
c:
  %i = phi i64 [ 0, %entry ], [ %i1, %b ]
  %m = icmp slt i64 %i, %n
  br i1 %m, label %b, label %e
b:
  %p0 = getelementptr inbounds {t}, {t}* %w, i64 %i
  %v0 = load {t}, {t}* %p0
  %p1 = getelementptr inbounds {t}, {t}* %w1, i64 %i
  %v1 = load {t}, {t}* %p1
  %p2 = getelementptr inbounds {t}, {t}* %w2, i64 %i
  %v2 = load {t}, {t}* %p2
  %p3 = getelementptr inbounds {t}, {t}* %w3, i64 %i
  %v3 = load {t}, {t}* %p3
  %q0 = fmul {fm} {t} %a0, %v0
  %q1 = fmul {fm} {t} %a1, %v1
  %q2 = fmul {fm} {t} %a2, %v2
  %q3 = fmul {fm} {t} %a3, %v3
  %s01 = fadd {fm} {t} %q0, %q1
  %s23 = fadd {fm} {t} %q2, %q3
  %s = fadd {fm} {t} %s01, %s23
  %yp = getelementptr inbounds {t}, {t}* %y, i64 %i
  %yv = load {t}, {t}* %yp
  %r = fadd {fm} {t} %yv, %s
  store {t} %r, {t}* %yp
  %i1 = add nsw i64 %i, 1
  br label %c, !llvm.loop !0
e:
  ret void
}}

"""
    dot = f"""
; sum x[0:n] * w[0:n]
define internal {t} @NAME({t}* noalias readonly %x, {t}* noalias readonly %w, i64 %n) noinline {{
entry:
  br label %c
c:
  %i = phi i64 [ 0, %entry ], [ %i1, %b ]
  %acc = phi {t} [ 0.0, %entry ], [ %acc1, %b ]
  %m = icmp slt i64 %i, %n
  br i1 %m, label %b, label %e
b:
  %xp = getelementptr inbounds {t}, {t}* %x, i64 %i
  %xv = load {t}, {t}* %xp
  %wp = getelementptr inbounds {t}, {t}* %w, i64 %i
  %wv = load {t}, {t}* %wp
  %pr = fmul {fm} {t} %xv, %wv
  %acc1 = fadd {fm} {t} %acc, %pr
  %i1 = add nsw i64 %i, 1
  br label %cMD
e:
  ret {t} %acc
}}
"""
    # the long rows' loops are interleaved (4 vectors per step: more loads in flight, 1.4x on the
    # GPT step's weights); short ones (attention's 32-element rows) are not, or they would run in
    # the remainder loops: axpy4 (used for rows of up to 64) and dots (dot products of up to 64)
    inner += dot.replace("NAME", "dot").replace("MD", "") + dot.replace("NAME", "dots").replace("MD", ", !llvm.loop !0")
    inner += '!0 = distinct !{!0, !1}\n!1 = !{!"llvm.loop.interleave.count", i32 1}\n'
    inner += f"""
; y[0], y[yn], y[2 yn], y[3 yn] = the dot products of x[0:n] with w, w + ld, w + 2 ld, w + 3 ld
{hdr} @dot4({t}* noalias readonly %x, {t}* noalias readonly %w, i64 %ld, i64 %n, {t}* noalias %y,
            i64 %yn) noinline {{
entry:
  %w1 = getelementptr inbounds {t}, {t}* %w, i64 %ld
  %w2 = getelementptr inbounds {t}, {t}* %w1, i64 %ld
  %w3 = getelementptr inbounds {t}, {t}* %w2, i64 %ld
  br label %c
c:
  %i = phi i64 [ 0, %entry ], [ %i1, %b ]
  %a0 = phi {t} [ 0.0, %entry ], [ %b0, %b ]
  %a1 = phi {t} [ 0.0, %entry ], [ %b1, %b ]
  %a2 = phi {t} [ 0.0, %entry ], [ %b2, %b ]
  %a3 = phi {t} [ 0.0, %entry ], [ %b3, %b ]
  %m = icmp slt i64 %i, %n
  br i1 %m, label %b, label %e
b:
  %xp = getelementptr inbounds {t}, {t}* %x, i64 %i
  %xv = load {t}, {t}* %xp
  %p0 = getelementptr inbounds {t}, {t}* %w, i64 %i
  %v0 = load {t}, {t}* %p0
  %p1 = getelementptr inbounds {t}, {t}* %w1, i64 %i
  %v1 = load {t}, {t}* %p1
  %p2 = getelementptr inbounds {t}, {t}* %w2, i64 %i
  %v2 = load {t}, {t}* %p2
  %p3 = getelementptr inbounds {t}, {t}* %w3, i64 %i
  %v3 = load {t}, {t}* %p3
  %q0 = fmul {fm} {t} %xv, %v0
  %b0 = fadd {fm} {t} %a0, %q0
  %q1 = fmul {fm} {t} %xv, %v1
  %b1 = fadd {fm} {t} %a1, %q1
  %q2 = fmul {fm} {t} %xv, %v2
  %b2 = fadd {fm} {t} %a2, %q2
  %q3 = fmul {fm} {t} %xv, %v3
  %b3 = fadd {fm} {t} %a3, %q3
  %i1 = add nsw i64 %i, 1
  br label %c, !llvm.loop !0
e:
  %y1 = getelementptr inbounds {t}, {t}* %y, i64 %yn
  %y2 = getelementptr inbounds {t}, {t}* %y1, i64 %yn
  %y3 = getelementptr inbounds {t}, {t}* %y2, i64 %yn
  store {t} %a0, {t}* %y
  store {t} %a1, {t}* %y1
  store {t} %a2, {t}* %y2
  store {t} %a3, {t}* %y3
  ret void
}}
"""
    # the outer loops: counters in allocas (promoted to registers by the optimizer)
    ctr: list = []
    body: list = []
    uid = [0]

    def fresh(p):
        uid[0] += 1
        return f"{p}{uid[0]}"

    def loop(n, emit, step=1, start="0"):
        i = fresh("i")
        ctr.append(f"  %{i}.a = alloca i64")
        body.append(f"  store i64 {start}, i64* %{i}.a\n  br label %{i}.c\n{i}.c:\n  %{i} = load i64, i64* %{i}.a")
        if step == 1:
            body.append(f"  %{i}.m = icmp slt i64 %{i}, {n}")
        else:
            body.append(f"  %{i}.l = add nsw i64 %{i}, {step}\n  %{i}.m = icmp sle i64 %{i}.l, {n}")
        body.append(f"  br i1 %{i}.m, label %{i}.b, label %{i}.e\n{i}.b:")
        emit(f"%{i}")
        body.append(f"  %{i}.n = add nsw i64 %{i}, {step}\n  store i64 %{i}.n, i64* %{i}.a\n  br label %{i}.c\n{i}.e:")
        return i

    def gep(base, *terms):
        """&base[sum of products]: terms are (a, b) pairs multiplied, or single values."""
        acc = None
        for tm in terms:
            if isinstance(tm, tuple):
                v = fresh("m")
                body.append(f"  %{v} = mul nsw i64 {tm[0]}, {tm[1]}")
                tm = f"%{v}"
            if acc is None:
                acc = tm
            else:
                v = fresh("o")
                body.append(f"  %{v} = add nsw i64 {acc}, {tm}")
                acc = f"%{v}"
        v = fresh("p")
        body.append(f"  %{v} = getelementptr inbounds {t}, {t}* %{base}, i64 {acc or 0}")
        return f"%{v}"

    def load(ptr):
        v = fresh("v")
        body.append(f"  %{v} = load {t}, {t}* {ptr}")
        return f"%{v}"

    names = ["mode", "nb", "R", "K", "N", "yb", "yr", "yn", "xb", "xr", "xk", "wb", "wk", "wn", "pass4",
             "tb0", "tb1", "tn0", "tn1", "", "", "thr", "cell", "drv", "tasks"]
    # mode 0: w row-major; out rows zeroed, then x[r, k] * w[k, :] added one row of w at a time, or
    # four when the descriptor says so (rows of up to 64 elements: adjacent in memory, still one
    # stream; rows from ROWS_PASS4_FROM: long streams each, the output row loaded once per four)
    def m0_batch(bi):
        loop("%R", lambda r: body.append(f"  call void @zero({t}* {gep('y', (bi, '%yb'), (r, '%yr'), '%tn0')}, "
                                         f"i64 %tnl)"))
        k4 = fresh("k4")
        body.append(f"  %{k4}.s = icmp eq i64 %pass4, 1\n  br i1 %{k4}.s, label %{k4}.t, label %{k4}.f\n{k4}.t:")

        def four(k):
            wrow = gep("w", (bi, "%wb"), (k, "%wk"), "%tn0")

            def one(r):
                xo = gep("x", (bi, "%xb"), (r, "%xr"), (k, "%xk"))
                xs = [load(xo)]
                for q in (1, 2, 3):
                    xs.append(load(gep("x", (bi, "%xb"), (r, "%xr"), (k, "%xk"), (q, "%xk"))))
                yo = gep("y", (bi, "%yb"), (r, "%yr"), "%tn0")
                body.append(f"  call void @axpy4({t}* {yo}, {t}* {wrow}, i64 %wk, {t} {xs[0]}, {t} {xs[1]}, "
                            f"{t} {xs[2]}, {t} {xs[3]}, i64 %tnl)")
            loop("%R", one)
        ki = loop("%K", four, step=4)
        body.append(f"  br label %{k4}.j\n{k4}.f:\n  br label %{k4}.j\n{k4}.j:")
        body.append(f"  %{k4}.k0 = phi i64 [ %{ki}, %{ki}.e ], [ 0, %{k4}.f ]")

        def single(k):
            wrow = gep("w", (bi, "%wb"), (k, "%wk"), "%tn0")

            def one(r):
                xv = load(gep("x", (bi, "%xb"), (r, "%xr"), (k, "%xk")))
                yo = gep("y", (bi, "%yb"), (r, "%yr"), "%tn0")
                body.append(f"  call void @axpy({t}* {yo}, {t}* {wrow}, {t} {xv}, i64 %tnl)")
            loop("%R", one)
        loop("%K", single, start=f"%{k4}.k0")

    # mode 1: w column-major (x unit-stride along k): one dot product per (n, r), the row of w^T
    # read once from memory and reused from cache for the other rows of x
    def m1_batch(bi):
        # short dot products (K <= 64): four rows of w^T per call, sharing x's loads and the call
        q4 = fresh("q4")
        body.append(f"  br i1 %shortk, label %{q4}.t, label %{q4}.f\n{q4}.t:")

        def four(n):
            wrow = gep("w", (bi, "%wb"), (n, "%wn"))

            def one(r):
                xo = gep("x", (bi, "%xb"), (r, "%xr"))
                yo = gep("y", (bi, "%yb"), (r, "%yr"), (n, "%yn"))
                body.append(f"  call void @dot4({t}* {xo}, {t}* {wrow}, i64 %wn, i64 %K, {t}* {yo}, i64 %yn)")
            loop("%R", one)
        ni = loop("%tn1", four, step=4, start="%tn0")
        body.append(f"  br label %{q4}.j\n{q4}.f:\n  br label %{q4}.j\n{q4}.j:")
        body.append(f"  %{q4}.n0 = phi i64 [ %{ni}, %{ni}.e ], [ %tn0, %{q4}.f ]")

        def col(n):
            wrow = gep("w", (bi, "%wb"), (n, "%wn"))

            def one(r):
                xo = gep("x", (bi, "%xb"), (r, "%xr"))
                v = fresh("d")
                body.append(f"  %{v} = call {t} %dotf({t}* {xo}, {t}* {wrow}, i64 %K)")
                yo = gep("y", (bi, "%yb"), (r, "%yr"), (n, "%yn"))
                body.append(f"  store {t} %{v}, {t}* {yo}")
            loop("%R", one)
        loop("%tn1", col, start=f"%{q4}.n0")

    ft = f"{t} ({t}*, {t}*, i64)*"
    body.append(f"  %shortk = icmp sle i64 %K, 64\n  %dotf = select i1 %shortk, {ft} @dots, {ft} @dot")

    body.append("  %is0 = icmp eq i64 %mode, 0\n  br i1 %is0, label %mode0, label %mode1\nmode0:")
    loop("%tb1", m0_batch, start="%tb0")
    body.append("  br label %done\nmode1:")
    loop("%tb1", m1_batch, start="%tb0")
    body.append("  br label %done\ndone:\n  ret void")
    loads = "".join(f"  %{nm}.p = getelementptr i64, i64* %d, i64 {q}\n  %{nm} = load i64, i64* %{nm}.p\n"
                    for q, nm in enumerate(names) if nm)
    main = ('define void @"kernel"(i8* %yp, i8* %xp, i8* %wp, i8* %dp) {\nentry:\n'
            + "\n".join(ctr) + "\n"
            + f"  %d = bitcast i8* %dp to i64*\n  %y = bitcast i8* %yp to {t}*\n  %x = bitcast i8* %xp to {t}*\n"
            + f"  %w = bitcast i8* %wp to {t}*\n" + loads + "  %tnl = sub nsw i64 %tn1, %tn0\n"
            + _publish_ir() + "\n".join(body) + "\n}\n")
    return inner + main


def _publish_ir() -> str:
    """The start of the kernel's body: with ``thr`` set, the descriptor is a threaded product's
    (_rows_threaded) and the kernel hands its tasks to gemm_driver as one call job
    (gemm_driver.publish_ir, shared with kernels/gemv.py) instead of computing."""
    from .. import gemm_driver
    return gemm_driver.publish_ir("%thr", "%cell", "%drv", "%tasks")


def _rows_kernel(dt_index: int):
    """The llvm_call caller of the few-row kernel for float32 (0) or float64 (1), compiled on
    first use (llvm_render's disk cache keeps the machine code across processes)."""
    fn = _rows_fns[dt_index]
    if fn is None:
        import hashlib

        from .. import llvm_call, llvm_render
        text = _rows_ir(("float", "double")[dt_index])
        key = "rowsmm_" + hashlib.sha1(f"{text}|interleave".encode()).hexdigest()[:16]
        addr = llvm_render.compile_ir(key, lambda: text, True)
        _rows_addrs[dt_index] = addr
        fn = _rows_fns[dt_index] = llvm_call.make(addr, 4)
    return fn


def _rows_product(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
    """out = a @ b through the few-row kernel when the layout suits it; False: not taken.  A one-row product
    with a frozen weight runs gemv.py's kernel, as its bound step does (:func:`_rows_caller`): a compiled graph's
    first call (its steps not bound yet) then sums as its later calls do, the same bits."""
    if b.ndim == 2 and out.size == b.shape[1] and _gemv_frozen(b):
        g = _gemv.caller(out, a, b, count=False)
        if g is not None:
            g(out, a, b)
            return True
    if not _ROWS_ON:
        return False
    key = (out.shape, out.strides, a.shape, a.strides, b.shape, b.strides, out.dtype, a.dtype, b.dtype,
           threads.NUM_THREADS)
    plan = _rows_plans.get(key)
    if plan is None:
        plan = _rows_plan(out, a, b)
        if len(_rows_plans) > 4096:
            _rows_plans.clear()
        _rows_plans[key] = plan
    if plan is False:
        return False
    # an output over an input: the kernel writes as it reads (numpy's path copies)
    if np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return False
    run = plan[4]
    if run is None:
        return False
    run(out, a, b)
    return True


def _gemv_frozen(b: np.ndarray) -> bool:
    """Whether ``b``'s memory is frozen (winograd.freeze: a compiled graph's / an ONNX session's weight); the
    eager products of a process that froze nothing pay one dict test."""
    w = _wino_mod[0]
    if w is None:
        from . import winograd as w
        _wino_mod[0] = w
    return bool(w._frozen) and w.is_frozen(b)


_wino_mod = [None]


def _rows_caller(out: np.ndarray, a: np.ndarray, b: np.ndarray):
    """``g(out, a, b)``: the few-row kernel's run for arrays of these layouts and this thread count
    (what _rows_product would do, its checks made once), or None when _rows_product would not take
    the product.  For callers whose ``out`` never overlaps ``a`` or ``b`` (a compiled graph's steps).
    A one-row product with a frozen weight runs gemv.py's packed-panel kernel instead."""
    g = _gemv.caller(out, a, b)
    if g is not None:
        return g
    if not _ROWS_ON or out.size == 0 or a.shape[-1] == 0 or not (out.shape[-2] <= ROWS_MAX or out.shape[-1] == 1) \
            or np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return None
    key = (out.shape, out.strides, a.shape, a.strides, b.shape, b.strides, out.dtype, a.dtype, b.dtype,
           threads.NUM_THREADS)
    plan = _rows_plans.get(key)
    if plan is None:
        plan = _rows_plan(out, a, b)
    return plan[4] if plan else None


def _distinct_elements(x: np.ndarray) -> bool:
    """True when no two elements of x share memory (an output the kernel may write in any order)."""
    dims = sorted((abs(s), n) for n, s in zip(x.shape, x.strides) if n > 1)
    span = x.itemsize
    for s, n in dims:
        if s < span:
            return False
        span = s * n
    return True


def _elem_strides(x: np.ndarray, bst, isz: int):
    """(batch, row, col) element strides of x's matrices (batch byte stride ``bst``), or None
    when one is negative or not a whole number of elements."""
    st = (bst, x.strides[-2], x.strides[-1])
    if any(s < 0 or s % isz for s in st):
        return None
    return tuple(s // isz for s in st)


def _rows_plan(out: np.ndarray, a: np.ndarray, b: np.ndarray):
    """(kernel, descriptor, swap, bytes of the matrix when there is one, else 0) for
    ``out = a @ b``, or False (the other paths)."""
    dti = _ROWS_DT.get(out.dtype)
    if dti is None or a.dtype != out.dtype or b.dtype != out.dtype or a.ndim < 2 or b.ndim < 2:
        return False
    isz = out.itemsize
    R, N = out.shape[-2], out.shape[-1]
    K = a.shape[-1]
    if a.shape[-2] != R or b.shape[-2] != K or b.shape[-1] != N:
        return False
    bshape = out.shape[:-2]
    if np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) != bshape:
        return False
    nb = 1
    for n in bshape:
        nb *= n
    so, sa, sb = _batch_stride(out, bshape), _batch_stride(a, bshape), _batch_stride(b, bshape)
    if so is None or sa is None or sb is None or not _distinct_elements(out):
        return False
    eo, ea, eb = _elem_strides(out, so, isz), _elem_strides(a, sa, isz), _elem_strides(b, sb, isz)
    if eo is None or ea is None or eb is None:
        return False
    swap = False
    if R > ROWS_MAX:
        # (n, k) @ (k, 1): out^T = b^T @ a^T, one row
        if N != 1:
            return False
        swap = True
        R, N = 1, R
        eo = (eo[0], eo[2], eo[1])
        ea, eb = (eb[0], eb[2], eb[1]), (ea[0], ea[2], ea[1])
    # x = a (batch, R, K), w = b (batch, K, N), y = out (batch, R, N)
    yb, yr, yn = eo
    xb, xr, xk = ea
    wb, wk, wn = eb
    rowmajor = (wn == 1 or N == 1) and (yn == 1 or N == 1)
    colmajor = (wk == 1 or K == 1) and (xk == 1 or K == 1)
    if colmajor and (N == 1 or not rowmajor):
        mode = 1        # (one output column: a dot product along K, not K one-element updates)
    elif rowmajor:
        mode = 0
    else:
        return False
    # batches split across threads (see _rows_threaded) take shorter rows of a row-major matrix
    min_n = ROWS_MIN_N_PAR if (nb > 1 and threads.NUM_THREADS > 1 and ROWS_PAR[0] and
                               nb * K * N * isz >= min(DRV_GEMV_BYTES, PAR_BYTES)) else ROWS_MIN_N
    tiny = nb * K * N * isz <= ROWS_TINY_BYTES
    if (not tiny and (N < min(min_n, ROWS_MIN_N) if mode == 0 else K < ROWS_MIN_K)) or \
            (R > 1 and K * N * isz < ROWS_MULTI_MIN_BYTES):
        return False
    desc = np.zeros(_RD_WORDS, np.int64)
    desc[:_RD_N1 + 1] = (mode, nb, R, K, N, yb, yr, yn, xb, xr, xk, wb, wk, wn, int(N <= 64 or N >= ROWS_PASS4_FROM),
                         0, nb, 0, N)
    desc.flags.writeable = False      # shared by every call with this layout
    fn = _rows_kernel(dti)
    nbytes = K * N * isz if nb == 1 else 0
    nt = threads.NUM_THREADS
    run = None
    par_bytes = min(DRV_GEMV_BYTES, PAR_BYTES)
    if nt > 1 and ROWS_PAR[0] and nb * K * N * isz >= par_bytes:
        run = _rows_threaded(dti, desc, nt, swap)
    if run is None and (N < ROWS_MIN_N and mode == 0) and not tiny:
        return False     # rows this short only split across threads (min_n above), else BLAS
    if run is None and not (nbytes and nt > 1 and nbytes >= par_bytes):
        # (one matrix of the size split across threads that this kernel does not split: gemm_driver's
        # gemv blocks from DRV_GEMV_BYTES, the pool's from PAR_BYTES)
        run = _rows_run(fn, desc, swap)
    return fn, desc, swap, nbytes, run


def _rows_run(fn, d, swap: bool):
    """``run(out, a, b)``: the few-row kernel ``fn`` on descriptor ``d`` (``swap``: the operands exchanged),
    with its ``calls`` (native_chain)."""
    if swap:
        def run(out, a, b):
            fn(out, b, a, d)
        run.calls = lambda out, a, b: [(fn, (out, b, a, d), None)]
    else:
        def run(out, a, b):
            fn(out, a, b, d)
        run.calls = lambda out, a, b: [(fn, (out, a, b, d), None)]
    return run


# ---- the few-row kernel on several threads
# From DRV_GEMV_BYTES of matrix (every matrix of a batch together) on 2+ threads, the product is cut
# into tasks (blocks of output columns, _COL_ALIGN-aligned so that no two tasks write one cache line,
# or groups of matrices of a batch) that the calling thread and gemm_driver's native workers claim:
# one call job (gemm_driver.call_plan) running the same kernel on each task's descriptor (its
# column / matrix range), no Python hand-off: the kernel itself, given the plan's top descriptor,
# publishes the job (_publish_ir), so a threaded product is one builtin call like a serial one.
# Each thread streams its own part of the matrix (a column-major weight's block is one contiguous
# run: one stream per thread).  Measured on the shared 2-core box (same process, interleaved, min
# of 12 rounds of the ONNX GPT step's 24 one-row products with column-major weights, 42.5 MB): at load
# ~0.8 1.32 ms (32 GB/s) vs 2.59 for gemm_driver's gemv blocks and 2.34 on one thread; at load ~1.2
# 1.76 ms (24 GB/s) vs 2.68 and 2.77.
# A worker the scheduler does not run costs nothing: the caller claims every task itself (under a
# load of 3-4 from other processes the worker ran ~5% of the tasks and this was one thread's speed).
ROWS_PAR = [os.environ.get("NEE_MATMUL_ROWS_PAR", "1") not in ("0", "")]
# tasks per thread: more lets a thread that runs late (preempted on the shared cores) hold up less
# of the product, at the cost of shorter streams per task (the 24 weights above, load ~0.8, min / median
# of 12 rounds: 1 per thread 1.50 / 1.97 ms, 2 1.35 / 1.83, 4 1.32 / 1.64; at load ~1.2 2: 1.83 / 2.17,
# 4: 1.76 / 2.14)
ROWS_TASKS_PER_THREAD = int(os.environ.get("NEE_MATMUL_ROWS_TASKS", "4"))


def _rows_tasks(nb: int, N: int, ntasks: int):
    """[(b0, b1, n0, n1)]: at most ``ntasks`` parts of an (nb matrices, N columns) product: groups of
    whole matrices when there are enough of them, else column blocks of _COL_ALIGN columns (the last
    one shorter) within each group."""
    nbg = min(nb, ntasks)
    ncb = max(1, min(-(-ntasks // nbg), -(-N // _COL_ALIGN)))
    out = []
    for b0, b1 in threads.split(nb, nbg):
        for n0, n1 in threads.split(N, ncb, _COL_ALIGN):
            out.append((b0, b1, n0, n1))
    return out


def _rows_threaded(dti: int, desc: np.ndarray, nt: int, swap: bool):
    """``run(out, a, b)`` computing the product of ``desc`` as tasks claimed by ``nt`` threads (the
    caller and gemm_driver's workers), or None: no driver, or a product not cut.  The kernel is
    called as on one thread, with a descriptor saying so (_publish_ir)."""
    from .. import gemm_driver
    fn = _rows_kernel(dti)
    if not gemm_driver.available() or _rows_addrs[dti] is None:
        return None
    nb, N = int(desc[1]), int(desc[4])
    if desc[0] == 0:
        # a row-major matrix is cut only into groups of whole matrices: column blocks of its rows are
        # short runs that the prefetcher streams badly (the GPT step's 24 weights row-major: 3.3-3.7 ms
        # in column blocks on 2 threads vs 1.9 for gemm_driver's gemv blocks, 2.3 on one thread)
        N = 1
    parts = _rows_tasks(nb, N, nt * max(ROWS_TASKS_PER_THREAD, 1))
    if desc[0] == 0:
        parts = [(b0, b1, 0, int(desc[4])) for b0, b1, _, _ in parts]
    if len(parts) < 2:
        return None
    job = gemm_driver.published_job(desc, parts, _RD_WORDS, _RD_B0, _RD_THR, _rows_addrs[dti], nt)
    if job is None:
        return None
    top, tasks = job
    run = _rows_run(fn, top, swap)
    run.tasks = tasks        # (tests read the split)
    return run


# ------------------------------------------------------------------ the native split (gemm_driver)
# float32/float64 products from DRV_MNK multiply-adds are cut into blocks run by gemm_driver: one
# GIL-free call, BLAS blocks on the calling thread and the driver's native workers, ~2 us of
# overhead instead of the pool's tens.  Measured on the shared 2-core box (same process,
# interleaved, min of repeats; load ~1.3): 128x256x256 148 us vs 241 through the pool (np.matmul on
# one thread 195, torch on 2 threads 127), the batched attention products 4x(128x128x64) 55 vs 95,
# 1024x384x384 1.95 vs 3.99 ms.  Matrix-vector products are bound by memory bandwidth: with the
# weights not in cache (the ONNX GPT step reads 43 MB of them) one core already reads ~15 GB/s and
# two were no faster (1x384x1536: 128 us on one thread, 149 split in 2), so one-row / one-column
# products split only from DRV_GEMV_BYTES of matrix (the pool's old PAR_BYTES).
DRV_MNK = int(os.environ.get("NEE_MATMUL_DRV_MNK", str(1 << 18)))
# with the driver's workers spinning through the gaps between a decoder's products (gemm_driver.SPIN_US) two
# cores do read faster: 20 back-to-back 1x544 @ 544x1000 products with cold weights 110 vs 145 µs each
DRV_GEMV_BYTES = int(os.environ.get("NEE_MATMUL_DRV_GEMV_BYTES", str(256 << 10)))
_DRV_DT = (_F32, np.dtype(np.float64))
_drv_ok = [None]         # None: not tried yet; False: off (NEE_MATMUL_DRIVER=0) or unavailable
_plans: dict = {}        # layout key -> the driver's descriptor, or False (not driven)
_drv_run = None


def _drv_desc(out: np.ndarray, a: np.ndarray, b: np.ndarray):
    """matmul_into's gemm_driver descriptor for these layouts (2+ threads, products large enough to split), or
    None: another path."""
    mnk = out.size * a.shape[-1]
    if mnk < DRV_MNK or threads.NUM_THREADS <= 1 or _drv_ok[0] is False or \
            not (out.shape[-1] > 1 and out.shape[-2] > 1 or mnk * out.itemsize >= DRV_GEMV_BYTES):
        return None
    key = (out.shape, out.strides, a.shape, a.strides, b.shape, b.strides, out.dtype, a.dtype, b.dtype,
           threads.NUM_THREADS)
    desc = _plans.get(key)
    if desc is None:
        desc = _plan(out, a, b, key)
    return None if desc is False else desc


def _drv_caller(out: np.ndarray, a: np.ndarray, b: np.ndarray):
    """``g(out, a, b)``: matmul_into's gemm_driver run for arrays of these layouts and this thread count (the
    descriptor looked up once; ``g.calls``: the driver's entry call, chainable), or None where matmul_into would take
    another path first or not the driver's.  For callers whose ``out`` overlaps neither input and for which the
    few-row and batched kernels were asked first (fused.py's _product_caller: matmul_into's order)."""
    if out.size == 0 or a.shape[-1] == 0 or np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return None
    desc = _drv_desc(out, a, b)
    if desc is None:
        return None
    from .. import gemm_driver

    def g(out, a, b):
        _drv_run(desc, a, b, out)
    # (gemm_driver.run without its frame: the chain checks the driver's state, native_chain.current)
    g.calls = lambda out, a, b: [(gemm_driver._drv[0], (gemm_driver._state[0], desc, a, b, out), None)]
    return g


def _plan(out: np.ndarray, a: np.ndarray, b: np.ndarray, key) -> object:
    """The driver's descriptor for this layout (cached under ``key``), or False: numpy's path."""
    global _drv_run
    if _drv_ok[0] is None:
        ok = os.environ.get("NEE_MATMUL_DRIVER", "1") not in ("0", "")
        if ok:
            from .. import gemm_driver
            ok = gemm_driver.available()
            _drv_run = gemm_driver.run
        _drv_ok[0] = ok
    desc = _make_plan(out, a, b) if _drv_ok[0] else None
    if desc is None:
        desc = False
    if len(_plans) > 4096:
        _plans.clear()
    _plans[key] = desc
    return desc


def _batch_stride(x: np.ndarray, bshape: tuple):
    """The one byte stride stepping through x's matrices broadcast to batch shape ``bshape``
    (0: one matrix for the whole batch), or None when the batch dims do not merge."""
    nd = len(bshape)
    xb = x.shape[:-2]
    if len(xb) < nd:
        xb = (1,) * (nd - len(xb)) + xb
        xs = (0,) * (nd - x.ndim + 2) + x.strides[:-2]
    else:
        xs = x.strides[:-2]
    st = None
    for n, xn, s in zip(reversed(bshape), reversed(xb), reversed(xs)):
        if n == 1:
            continue
        s = 0 if xn == 1 else s
        if st is None:
            st, nxt = s, s * n
        elif s == nxt:
            nxt = s * n
        else:
            return None
    return st or 0


def _make_plan(out: np.ndarray, a: np.ndarray, b: np.ndarray):
    """The descriptor of ``out = a @ b`` for gemm_driver, or None.  The views built here have the
    operands' own data pointers (reshapes and restrides without copies), so the descriptor runs
    on the original arrays."""
    from .. import gemm_driver
    if out.dtype not in _DRV_DT or a.dtype != out.dtype or b.dtype != out.dtype:
        return None
    nt = threads.NUM_THREADS
    m = out.shape[-1]
    n = out.shape[-2]
    k = a.shape[-1]
    if (n == 1 or m == 1) and k * max(n, m) * out.itemsize < DRV_GEMV_BYTES:
        return None      # matrix-vector: memory-bound; split only from DRV_GEMV_BYTES of matrix
    if _prep(a) is not a or _prep(b) is not b:
        return None      # layouts BLAS cannot take: numpy's path (which copies them once)
    if out.ndim == 2 and a.ndim == 2 and b.ndim == 2:
        return _plan2d(gemm_driver, out, a, b, nt)
    bshape = out.shape[:-2]
    if _batch_is_broadcast(b) and a.ndim > 2 and out.flags.c_contiguous:
        # (B, n, k) @ (k, m): one (B*n, k) GEMM when the batch merges without a copy
        try:
            a2 = np.reshape(a, (-1, k), copy=False)
        except ValueError:
            a2 = None
        if a2 is not None and a2.shape[0] * m == out.size and _blasable(a2):
            return _plan2d(gemm_driver, out.reshape(-1, m), a2, b[(0,) * (b.ndim - 2)], nt)
    nb = int(np.prod(bshape)) if bshape else 1
    so = _batch_stride(out, bshape)
    sa = _batch_stride(a, bshape)
    sb = _batch_stride(b, bshape)
    if so is None or sa is None or sb is None or (so == 0 and nb > 1) or min(so, sa, sb) < 0:
        return None
    o3 = np.lib.stride_tricks.as_strided(out, (nb, n, m), (so,) + out.strides[-2:])
    a3 = np.lib.stride_tricks.as_strided(a, (nb, n, k), (sa,) + a.strides[-2:])
    b3 = np.lib.stride_tricks.as_strided(b, (nb, k, m), (sb,) + b.strides[-2:])
    # enough matrices to share out whole, else each cut too (into blocks of _DRV_MIN_COLS and up)
    blocks = 1 if nb >= 2 * nt else -(-_DRV_BLOCKS * nt // nb)
    return gemm_driver.plan(o3, a3, b3, nt, blocks, None, _COL_ALIGN, _DRV_MIN_COLS)


# blocks per thread of a split 2-D product: measured on the 2-core box (same process, interleaved,
# min of repeats), 128x256x256 took 123 us in 2 column blocks, 129 in 4, 138 in 8, 143 in 2 row
# blocks (each block re-packs the operand it shares); more blocks only pay when a worker is
# descheduled (a worker that never comes costs nothing: the caller claims every block)
_DRV_BLOCKS = int(os.environ.get("NEE_MATMUL_DRV_BLOCKS", "1"))
# products from this many multiply-adds (ms of work) are cut finer, _DRV_BIG_BLOCKS per thread: a
# worker descheduled for a few ms then holds up a quarter of the split, and the extra packing is
# noise next to the blocks' flops.  Not below ~3 ms of work: BERT's 128x1536x384 / 128x384x1536
# products (75M multiply-adds, 0.8 ms) ran at 195 GFLOP/s in one block per thread, 189 in two,
# 180 in four (2 threads, min of 6 alternating rounds, machine shared); 256x1024x4096: 186-189 each
_DRV_BIG_MNK = int(os.environ.get("NEE_MATMUL_DRV_BIG_MNK", str(1 << 28)))
_DRV_BIG_BLOCKS = 4
_DRV_MIN_COLS = 16
_DRV_MIN_ROWS = 16


# row blocks, not column blocks, for wide products of a short K (K <= _DRV_ROWS_K) with _DRV_ROWS_MIN_R rows or
# more (ResNet's 1x1 shapes): there the output side dominates, and column blocks leave each core writing parts of
# every row of C (the other core's neighbouring lines are pulled in by the prefetchers); the row blocks' extra
# packing of B (K x M) is cheap at that K.  2 threads, per-call round robin, 200 rounds, min / p25 / median ms (load
# ~9, others niced): 256x64x3136 0.81/0.94/1.01 -> 0.74/0.90/0.96, 512x128x784 0.75/0.81/0.87 -> 0.65/0.69/0.74,
# 256x128x784 0.39/0.53/0.57 -> 0.34/0.49/0.52, 128x64x3136 0.47/0.61/0.63 -> 0.40/0.56/0.58; 64 rows no gain
# (64x64x3136 equal, 64x128x3136 0.39 -> 0.48 min), K = 256 columns as good or better (one thread: the same)
_DRV_ROWS_K = int(os.environ.get("NEE_MATMUL_DRV_ROWS_K", "128"))
_DRV_ROWS_MIN_R = 128


def _plan2d(gemm_driver, out, a, b, nt):
    n, m = out.shape
    big = n * m * a.shape[1] >= _DRV_BIG_MNK
    blocks = nt * (max(_DRV_BLOCKS, _DRV_BIG_BLOCKS) if big else _DRV_BLOCKS)
    if m >= n and not (a.shape[1] <= _DRV_ROWS_K and n >= _DRV_ROWS_MIN_R):
        return gemm_driver.plan(out, a, b, nt, blocks, 1, _COL_ALIGN, _DRV_MIN_COLS)
    return gemm_driver.plan(out, a, b, nt, blocks, 0, 1, _DRV_MIN_ROWS)


# OpenBLAS runs a product on the calling thread anyway below this many multiply-adds (interface/
# gemv.c: m*n < 2304 * GEMM_MULTITHREAD_THRESHOLD(4); interface/gemm.c: m*n*k <= 65536 * 4; numpy
# calls gemv when the product has one row or one column); skipping the thread setting there
# saves ~3 us per small product.  The whole call's count bounds each matrix's of a batch.
_GEMV_NEVER_THREADS = 2304 * 4
_GEMM_NEVER_THREADS = 65536 * 4


def _matmul_into(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    if out.dtype == _F16:
        tmp = np.empty(out.shape, _F32)
        _matmul_into(tmp, a.astype(_F32), b.astype(_F32))
        np.copyto(out, tmp, casting="unsafe")
        return
    a = _prep(a)
    b = _prep(b)
    if out.ndim == 2:
        _gemm2d(out, a, b)
        return
    k = a.shape[-1]
    m = b.shape[-1]
    if a.ndim > 2 and out.flags.c_contiguous and _batch_is_broadcast(b):
        # one big GEMM: (B*n, k) @ (k, m)
        try:
            a2 = np.reshape(a, (-1, k), copy=False)
        except ValueError:
            a2 = None
        if a2 is not None and _blasable(a2) and a2.shape[0] * m == out.size:
            b2 = b[(0,) * (b.ndim - 2)]
            _gemm2d(out.reshape(-1, m), a2, b2)
            return
    nt = threads.NUM_THREADS
    nb = out.shape[0]
    if nt > 1 and nb > 1 and 2.0 * out.size * k >= PAR_FLOPS:
        nd = out.ndim

        def part(c):
            s, e = c
            _gemm(out[s:e], _rows0(a, nd, s, e), _rows0(b, nd, s, e))
        threads.run_parallel(part, threads.split(nb, nt))
        return
    _gemm(out, a, b)


def _rows0(x: np.ndarray, nd: int, s: int, e: int) -> np.ndarray:
    """x's part for out[s:e] (x broadcast against an out of ``nd`` dims)."""
    return x[s:e] if x.ndim == nd and x.shape[0] != 1 else x


def _gemm(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    if out.flags.c_contiguous or (out.ndim == 2 and _blasable(out) and min(out.strides) >= 0):
        np.matmul(a, b, out=out)
    else:
        out[...] = np.matmul(a, b)


def _gemm2d(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """out (R, M) = a (R, K) @ b (K, M), split across the pool when large (see PAR_FLOPS)."""
    nt = threads.NUM_THREADS
    if nt > 1:
        R, K = a.shape
        M = b.shape[1]
        if 2.0 * R * K * M >= PAR_FLOPS or (K * M * b.itemsize >= PAR_BYTES and max(R, M) > 1):
            parts = nt * _BLOCKS_PER_THREAD
            if M >= R:
                chunks = threads.split(M, min(parts, max(M // _MIN_COLS, 1)), _COL_ALIGN)
                if len(chunks) > 1:
                    threads.run_parallel(lambda c: _gemm(out[:, c[0]:c[1]], a, b[:, c[0]:c[1]]), chunks)
                    return
            else:
                chunks = threads.split(R, min(parts, max(R // _MIN_ROWS, 1)))
                if len(chunks) > 1:
                    threads.run_parallel(lambda c: _gemm(out[c[0]:c[1]], a[c[0]:c[1]], b), chunks)
                    return
    _gemm(out, a, b)


# ------------------------------------------------------------------ products with a frozen weight (packed)
# ``out (R, N) = a (R, K) @ b (K, N)`` in float32 where ``b`` is a frozen weight (winograd.freeze: ONNX
# initializers, ``nee.jit(freeze=...)`` constants, promised never to change): ``b`` is packed once (cached with
# it, winograd.weights) into panels of PK_NR = 32 columns, panel[p, k, :] = b[k, 32p:32p+32], and an LLVM
# kernel (_pk_ir) computes 12 x 32 tiles of ``out``, each over all of K in 24 16-wide accumulators (a row's
# value broadcast, the panel's row loaded as two vectors: 24 FMAs per 14 loads), streaming the panel, which
# OpenBLAS repacks at every call.  On 2+ threads the panels are shared out as gemm_driver call-job tasks
# (with a matmul epilogue, pk_with_epilogue: each task runs it on its block right after computing it; a row
# epilogue, softmax / norms, pk_with_row_epilogue: the tasks are then blocks of whole rows, rows_only).
# Measured on this box's Zen 4 (one thread, thread CPU time, same process alternating, min of 5 rounds)
# against OpenBLAS's Haswell kernels (gemm_driver.choose_blas_core): 64x784x1024 0.84x the time, 128x384x384
# 0.93, 128x384x1536 0.88, 128x1536x384 0.85, 128x256x256 0.85, 128x256x1024 0.82; 64x1024x1024 1.06 and
# 128x1024x256 1.01 before rows 2 KiB apart were copied to a padded stride (then 0.90, 0.95; 16x1024x1024
# 0.71, 1024x384x384 0.88).  Taken from PK_MIN_ROWS rows (fewer: the few-row kernel / gemv.py, or BLAS)
# for N a multiple of the panel (PK_NR), on hosts with AVX-512F or AVX2 + FMA; NEE_MATMUL_PACKED=0 turns it off.
# On AVX2 hosts (no AVX-512: PK_VEC = 8) the same kernel has 8-lane vectors: 6 x 16 tiles in 12 ymm accumulators
# (2 ymm for the panel's row, 1 for the broadcast: 15 of the 16 registers) on panels of PK_NR = 16 columns, its K
# loop unrolled 4 times (PK_UNROLL8: constant offsets instead of 6 address adds per k), the same descriptors,
# tasks and epilogues.  Measured on this AVX2 EPYC (512 KiB L2 per core; one thread, process CPU time, min over
# rounds of fresh processes alternating with numpy's OpenBLAS Haswell sgemm, 4-6 rounds, load 7-11 from other
# sessions: ratios only, +-8% between runs), the time vs BLAS: 128x384x384 0.86-0.91, 128x384x1152 0.78-0.95,
# 128x384x1536 0.95-1.02, 128x1536x384 0.85-1.02, 64x784x1024 0.89-0.93, 64x1024x1024 0.81-0.95, 49x512x2048 0.81,
# 49x2048x512 0.81, 196x256x1024 0.95, 196x1024x256 1.01, 784x128x512 0.78-0.93, 3136x64x256 0.56-1.02; but with
# rows in chunks (2 PK_MC rows and up) and a longer K no better or worse: 1024x384x384 0.93-1.10, 1024x384x1152
# 0.95-1.04, 1024x384x1536 0.84-1.10, 1024x1536x384 1.02-1.31, 784x512x128 1.0-1.17, 3136x256x64 0.70-1.12 (a
# 256-row chunk of a 512-float K block fills the L2; 96- or 144-row chunks did not help).  Hence PK_AVX2_RULE.
PK_ON = [os.environ.get("NEE_MATMUL_PACKED", "1") not in ("0", "")]
PK_NR = 32
PK_MR = 12
PK_VEC = 16                # float32 lanes of the kernel's vectors: 16 (zmm, AVX-512F) or 8 (ymm, AVX2 + FMA)
# NEE_MATMUL_PACKED_VEC=8: the AVX2 kernel on an AVX-512 host too (tests, comparisons); unset: the host's widest
_PK_VEC_ENV = os.environ.get("NEE_MATMUL_PACKED_VEC", "")
# from 5 rows (up to 4: the few-row kernel, gemv.py): hot 768x768 weight, one thread, 5 rows 0.31x BLAS's time,
# 8 rows 0.58, 12 rows 0.70
PK_MIN_ROWS = 5
# (an output width that is not a multiple of PK_NR: the last, partial panel computed into a scratch tile, _pk_ir;
# one thread, min of 300, fresh jit steps: 128x256x48 23 vs 42 us on BLAS, 16x256x48 7.1 vs 14.5, 128x768x100 118
# vs 205, 512x256x72 117 vs 185; 16x1024x24 and 128x64x20 alike)
_PK_KC0 = int(os.environ.get("NEE_MATMUL_PACKED_KC", "512"))
PK_KC = _PK_KC0
PK_UNROLL8 = int(os.environ.get("NEE_MATMUL_PACKED_UNROLL", "4"))  # the 8-lane tile's K loop unrolled (see below)
_PK_DW = 8                 # descriptor words per task: end row, end column, K, lda, ldc, first column, K block, first row
# rows in chunks of PK_MC (from 2 PK_MC rows): a chunk's rows of a K block (256 x 512 floats) stay in L2 while
# every panel streams past them, where all the rows of a long activation would be re-read from L3 per panel
PK_MC = 256
# column parts per thread on 2+ threads (the panels are packed once: more parts cost only re-reads of a's rows
# from L2, and a worker descheduled mid-part holds the call up by a smaller part)
PK_TASKS = int(os.environ.get("NEE_MATMUL_PACKED_TASKS", "1"))
_pk_fns: dict = {}           # vector width -> (builtin, address) of the kernel
# the AVX2 kernel only where it measured faster than OpenBLAS: a product in row chunks (2 PK_MC rows and up) runs
# packed only with K <= PK_AVX2_LONG_K (see "on AVX2 hosts" above); False (tests): every product it can take
PK_AVX2_RULE = [True]
PK_AVX2_LONG_K = 128
# PK_AVX2_RULE's long products with an elementwise epilogue (fused.py's compile_matmul_epilogue bind: FF1 + bias +
# GELU, the projections + bias) run packed after all, on any thread count, in tasks of about PK_EPI_TILE_BYTES of
# output (at most PK_EPI_TILE_ROWS rows), each task's epilogue right after its tiles while they are in L2
# (pk_with_epilogue): with BLAS the epilogue of a 1024x1536 product read blocks of 1.5 MB (one thread: 4 column
# blocks) after they had left L2.  One thread, process CPU time, fresh processes alternating, load 7-12 (ratios to
# onnxruntime in the same process): 1024x384x1536 + bias + GELU 0.93-0.97x onnxruntime vs 1.04-1.19x through BLAS,
# 1024x384x384 + bias 0.92-1.00x vs 1.04-1.07x; tiles of 64 / 128 / 256 KB alike.  NEE_PK_EPI_TILES=0 turns it off
PK_EPI_TILES = [os.environ.get("NEE_PK_EPI_TILES", "1") not in ("0", "")]
PK_EPI_TILE_BYTES = int(os.environ.get("NEE_PK_EPI_TILE_KB", "128")) << 10
PK_EPI_TILE_ROWS = 128
_pk_cpu = [None]             # whether the host has AVX-512F or AVX2 + FMA (then PK_VEC is fixed)


def _pk_shape(width: int):
    """(tile rows, panel columns, K block) of the kernel with ``width``-lane vectors: 12 x 32 tiles in 24 zmm
    accumulators on AVX-512F (32 registers), 6 x 16 tiles in 12 ymm ones on AVX2 (16 registers: + 2 for the
    panel's row, 1 for the broadcast value, as OpenBLAS's / MLAS's Haswell kernels), K blocks of 512 both."""
    return (12, 32, _PK_KC0) if width == 16 else (6, 16, _PK_KC0)


def _pk_set_width(width: int) -> None:
    """PK_VEC, PK_MR, PK_NR, PK_KC for ``width``-lane vectors (16: the AVX-512 tuning, unchanged)."""
    global PK_VEC, PK_MR, PK_NR, PK_KC
    PK_VEC = width
    PK_MR, PK_NR, PK_KC = _pk_shape(width)


def _pk_host_ok() -> bool:
    """AVX-512F (16-lane kernel) or AVX2 + FMA (8-lane) on this CPU; the first call fixes the width."""
    if _pk_cpu[0] is None:
        width = 0
        try:
            from .. import llvm_render
            _, llvm = llvm_render._init()
            feats = llvm.get_host_cpu_features().flatten().split(",")
            if "+avx512f" in feats and _PK_VEC_ENV != "8":
                width = 16
            elif "+avx2" in feats and "+fma" in feats:
                width = 8
        except Exception:   # noqa: BLE001 - no LLVM: the path is off (BLAS runs every product)
            width = 0
        _pk_set_width(width or 16)
        _pk_cpu[0] = bool(width)
    return _pk_cpu[0]


def _pk_k_step(L: list, mr: int, w: int, kv: str, acc, out, pre: str = "", s0: str = "", sv: str = "") -> None:
    """One k of a tile: the panel's row ``kv`` (2 vectors), each of the ``mr`` rows' A element broadcast, 2 FMAs per
    row from ``acc(r, v)`` into ``out(r, v)``; value names prefixed ``pre`` and suffixed ``s0`` / ``sv`` (the
    unrolled tile's copies of the step)."""
    V = f"<{w} x float>"
    L.append(f"  %{pre}bo{s0} = mul i64 {kv}, {2 * w}")
    for v in range(2):
        L += [f"  %{pre}bo{sv}{v} = add i64 %{pre}bo{s0}, {w * v}",
              f"  %{pre}bp{sv}{v} = getelementptr float, float* %B, i64 %{pre}bo{sv}{v}",
              f"  %{pre}bq{sv}{v} = bitcast float* %{pre}bp{sv}{v} to {V}*",
              f"  %{pre}b{sv}{v} = load {V}, {V}* %{pre}bq{sv}{v}, align {4 * w}"]
    for r in range(mr):
        L += [f"  %{pre}aq{sv}{r} = add i64 %ao{r}, {kv}",
              f"  %{pre}ap{sv}{r} = getelementptr float, float* %A, i64 %{pre}aq{sv}{r}",
              f"  %{pre}a{sv}{r} = load float, float* %{pre}ap{sv}{r}",
              f"  %{pre}ai{sv}{r} = insertelement {V} undef, float %{pre}a{sv}{r}, i32 0",
              f"  %{pre}as{sv}{r} = shufflevector {V} %{pre}ai{sv}{r}, {V} undef, <{w} x i32> zeroinitializer"]
        for v in range(2):
            L.append(f"  {out(r, v)} = call {V} @llvm.fma.v{w}f32({V} %{pre}as{sv}{r}, {V} %{pre}b{sv}{v}, "
                     f"{V} {acc(r, v)})")


def _pk_tile_out(L: list, mr: int, w: int, fin: str) -> None:
    """A tile's end: C's rows = the accumulators ``%{fin}{r}_{v}`` (the first K block) or += them (later ones)."""
    V = f"<{w} x float>"
    for r in range(mr):
        L.append(f"  %co{r} = mul i64 %ldc, {r}")
        for v in range(2):
            L += [f"  %cq{r}_{v} = add i64 %co{r}, {w * v}",
                  f"  %cp{r}_{v} = getelementptr float, float* %C, i64 %cq{r}_{v}",
                  f"  %cv{r}_{v} = bitcast float* %cp{r}_{v} to {V}*"]
    L.append("  br i1 %acc, label %add, label %store")
    L.append("add:")      # a later block of K: C += the block's part
    for r in range(mr):
        for v in range(2):
            L += [f"  %old{r}_{v} = load {V}, {V}* %cv{r}_{v}, align 4",
                  f"  %sum{r}_{v} = fadd {V} %old{r}_{v}, %{fin}{r}_{v}",
                  f"  store {V} %sum{r}_{v}, {V}* %cv{r}_{v}, align 4"]
    L += ["  ret void", "store:"]
    for r in range(mr):
        for v in range(2):
            L.append(f"  store {V} %{fin}{r}_{v}, {V}* %cv{r}_{v}, align 4")
    L += ["  ret void", "}"]


def _pk_tile_ir(mr: int, w: int = 16) -> str:
    """``tile{mr}(A, lda, panel, C, ldc, K)``: C[0:mr, 0:2w] = A[0:mr, 0:K] @ panel (K x 2w), ``w``-lane vectors."""
    L = [f"define internal void @tile{mr}(float* %A, i64 %lda, float* %B, float* %C, i64 %ldc, i64 %K, i1 %acc) {{",
         "entry:"]
    for r in range(mr):
        L.append(f"  %ao{r} = mul i64 %lda, {r}")
    L += ["  br label %loop", "loop:", "  %k = phi i64 [0, %entry], [%k1, %loop]"]
    for r in range(mr):
        for v in range(2):
            L.append(f"  %acc{r}_{v} = phi <{w} x float> [zeroinitializer, %entry], [%nacc{r}_{v}, %loop]")
    _pk_k_step(L, mr, w, "%k", lambda r, v: f"%acc{r}_{v}", lambda r, v: f"%nacc{r}_{v}")
    L += ["  %k1 = add i64 %k, 1", "  %more = icmp ult i64 %k1, %K", "  br i1 %more, label %loop, label %done",
          "done:"]
    _pk_tile_out(L, mr, w, "nacc")
    return "\n".join(L)


def _pk_tile_ir_unrolled(mr: int, w: int, U: int) -> str:
    """_pk_tile_ir's tile with its K loop unrolled ``U`` times (then a loop over the K % U rest)."""
    V = f"<{w} x float>"
    L = [f"define internal void @tile{mr}(float* %A, i64 %lda, float* %B, float* %C, i64 %ldc, i64 %K, i1 %acc) {{",
         "entry:"]
    for r in range(mr):
        L.append(f"  %ao{r} = mul i64 %lda, {r}")
    L += [f"  %KU = and i64 %K, {-U}", "  %hasu = icmp ne i64 %KU, 0", "  br i1 %hasu, label %uloop, label %mid",
          "uloop:", "  %ku = phi i64 [0, %entry], [%kun, %uloop]"]
    for r in range(mr):
        for v in range(2):
            L.append(f"  %uacc{r}_{v} = phi {V} [zeroinitializer, %entry], [%u{U-1}n{r}_{v}, %uloop]")
    for u in range(U):
        L.append(f"  %ku{u} = add i64 %ku, {u}")
        _pk_k_step(L, mr, w, f"%ku{u}",
                   (lambda r, v: f"%uacc{r}_{v}") if u == 0 else (lambda r, v, u=u: f"%u{u-1}n{r}_{v}"),
                   lambda r, v, u=u: f"%u{u}n{r}_{v}", pre="u", s0=f"{u}", sv=f"{u}_")
    L += [f"  %kun = add i64 %ku, {U}", "  %umore = icmp ult i64 %kun, %KU", "  br i1 %umore, label %uloop, label %mid",
          "mid:"]
    for r in range(mr):
        for v in range(2):
            L.append(f"  %macc{r}_{v} = phi {V} [zeroinitializer, %entry], [%u{U-1}n{r}_{v}, %uloop]")
    L += ["  %hasrem = icmp ult i64 %KU, %K", "  br i1 %hasrem, label %loop, label %done",
          "loop:", "  %k = phi i64 [%KU, %mid], [%k1, %loop]"]
    for r in range(mr):
        for v in range(2):
            L.append(f"  %acc{r}_{v} = phi {V} [%macc{r}_{v}, %mid], [%nacc{r}_{v}, %loop]")
    _pk_k_step(L, mr, w, "%k", lambda r, v: f"%acc{r}_{v}", lambda r, v: f"%nacc{r}_{v}")
    L += ["  %k1 = add i64 %k, 1", "  %more = icmp ult i64 %k1, %K", "  br i1 %more, label %loop, label %done",
          "done:"]
    for r in range(mr):
        for v in range(2):
            L.append(f"  %fin{r}_{v} = phi {V} [%macc{r}_{v}, %mid], [%nacc{r}_{v}, %loop]")
    _pk_tile_out(L, mr, w, "fin")
    return "\n".join(L)


def _pk_ir(w: int = 16) -> str:
    """``kernel(A, P, C, D)``: rows [D[7], D[0]) and columns [D[5], D[1]) of C (row stride D[4]) = A (row stride
    D[3]) @ the packed panels P, in blocks of D[6] of K (the first stores, the later ones add); D = (end row, end
    column, K, lda, ldc, first column, K block, first row); the first column a multiple of the panel's (2 ``w``),
    the end column any: a last panel narrower than that (its packed columns zero-padded) computes its tiles into
    a scratch tile on the stack (its columns of C copied in first for a later K block) and copies its columns out."""
    PK_MR, PK_NR, _ = _pk_shape(w)
    cases = " ".join(f"i64 {mr}, label %t{mr}" for mr in range(1, PK_MR + 1))
    calls = "".join(f"t{mr}:\n  call void @tile{mr}(float* %Ai, i64 %lda, float* %Pj, float* %Ct, i64 %ldct, i64 %kc, "
                    f"i1 %later)\n  br label %post\n" for mr in range(1, PK_MR + 1))
    st = PK_MR * PK_NR

    def copy(name, src, sld, dst, dld, nxt):
        # rows [0, %mr), columns [0, %jleft) of src (row stride sld) to dst (row stride dld), then nxt
        return f"""{name}:
  br label %{name}.r
{name}.r:
  %{name}r = phi i64 [0, %{name}], [%{name}r1, %{name}.re]
  %{name}so = mul i64 %{name}r, {sld}
  %{name}do = mul i64 %{name}r, {dld}
  br label %{name}.c
{name}.c:
  %{name}c = phi i64 [0, %{name}.r], [%{name}c1, %{name}.c]
  %{name}s1 = add i64 %{name}so, %{name}c
  %{name}sp = getelementptr float, float* {src}, i64 %{name}s1
  %{name}v = load float, float* %{name}sp
  %{name}d1 = add i64 %{name}do, %{name}c
  %{name}dp = getelementptr float, float* {dst}, i64 %{name}d1
  store float %{name}v, float* %{name}dp
  %{name}c1 = add i64 %{name}c, 1
  %{name}cm = icmp ult i64 %{name}c1, %jleft
  br i1 %{name}cm, label %{name}.c, label %{name}.re
{name}.re:
  %{name}r1 = add i64 %{name}r, 1
  %{name}rm = icmp ult i64 %{name}r1, %mr
  br i1 %{name}rm, label %{name}.r, label %{nxt}
"""
    cpin = copy("cpin", "%Ci", "%ldc", "%Sp", str(PK_NR), "tsw")
    cpout = copy("cpout", "%Sp", str(PK_NR), "%Ci", "%ldc", "inext")
    words = "".join(f"  %dp{i} = getelementptr i64, i64* %D, i64 {i}\n  %d{i} = load i64, i64* %dp{i}\n"
                    for i in range(8))
    main = f"""
define void @"kernel"(i8* %Ar, i8* %Pr, i8* %Cr, i8* %Dr) {{
entry:
  %A = bitcast i8* %Ar to float*
  %P = bitcast i8* %Pr to float*
  %C = bitcast i8* %Cr to float*
  %D = bitcast i8* %Dr to i64*
  %Sa = alloca [{st} x float], align {4 * w}
  %Sp = bitcast [{st} x float]* %Sa to float*
  %S8 = bitcast [{st} x float]* %Sa to i8*
  call void @llvm.memset.p0i8.i64(i8* align {4 * w} %S8, i8 0, i64 {4 * st}, i1 false)
{words}  %M = add i64 %d0, 0
  %N = add i64 %d1, 0
  %K = add i64 %d2, 0
  %lda = add i64 %d3, 0
  %ldc = add i64 %d4, 0
  %nothing = icmp uge i64 %d5, %N
  %norows = icmp uge i64 %d7, %M
  %skip = or i1 %nothing, %norows
  br i1 %skip, label %out, label %kloop
kloop:
  %k0 = phi i64 [0, %entry], [%k0n, %pnext]
  %later = icmp ne i64 %k0, 0
  %krem = sub i64 %K, %k0
  %kbig = icmp ugt i64 %krem, %d6
  %kc = select i1 %kbig, i64 %d6, i64 %krem
  %pko = mul i64 %k0, {PK_NR}
  br label %ploop
ploop:
  %j = phi i64 [%d5, %kloop], [%j1, %jnext]
  %po0 = mul i64 %j, %K
  %po = add i64 %po0, %pko
  %Pj = getelementptr float, float* %P, i64 %po
  %jleft = sub i64 %N, %j
  %ragged = icmp ult i64 %jleft, {PK_NR}
  br label %iloop
iloop:
  %i = phi i64 [%d7, %ploop], [%i1, %inext]
  %rem = sub i64 %M, %i
  %big = icmp ugt i64 %rem, {PK_MR}
  %mr = select i1 %big, i64 {PK_MR}, i64 %rem
  %aoff0 = mul i64 %i, %lda
  %aoff = add i64 %aoff0, %k0
  %Ai = getelementptr float, float* %A, i64 %aoff
  %coff0 = mul i64 %i, %ldc
  %coff = add i64 %coff0, %j
  %Ci = getelementptr float, float* %C, i64 %coff
  %Ct = select i1 %ragged, float* %Sp, float* %Ci
  %ldct = select i1 %ragged, i64 {PK_NR}, i64 %ldc
  %cin = and i1 %ragged, %later
  br i1 %cin, label %cpin, label %tsw
{cpin}tsw:
  switch i64 %mr, label %post [ {cases} ]
{calls}post:
  br i1 %ragged, label %cpout, label %inext
{cpout}inext:
  %i1 = add i64 %i, %mr
  %imore = icmp ult i64 %i1, %M
  br i1 %imore, label %iloop, label %jnext
jnext:
  %j1 = add i64 %j, {PK_NR}
  %jmore = icmp ult i64 %j1, %N
  br i1 %jmore, label %ploop, label %pnext
pnext:
  %k0n = add i64 %k0, %kc
  %kmore = icmp ult i64 %k0n, %K
  br i1 %kmore, label %kloop, label %out
out:
  ret void
}}
declare <{w} x float> @llvm.fma.v{w}f32(<{w} x float>, <{w} x float>, <{w} x float>)
declare void @llvm.memset.p0i8.i64(i8*, i8, i64, i1)
"""
    if w == 16:
        return "\n".join(_pk_tile_ir(mr, w) for mr in range(1, PK_MR + 1)) + main
    return "\n".join(_pk_tile_ir_unrolled(mr, w, PK_UNROLL8) for mr in range(1, PK_MR + 1)) + main


def _pk_kernel(w: int = 0):
    """(builtin, address) of the kernel with ``w``-lane vectors (0: PK_VEC's)."""
    w = w or PK_VEC
    fn = _pk_fns.get(w)
    if fn is None:
        import hashlib

        from .. import llvm_call, llvm_render
        text = _pk_ir(w)
        addr = llvm_render.compile_ir(f"gemm_packed_v{w}_" + hashlib.sha1(text.encode()).hexdigest()[:16],
                                      lambda: text)
        fn = _pk_fns[w] = (llvm_call.make(addr, 4), addr)
    return fn


# packed copies live as long as their weights; past PK_MAX_BYTES of them a weight is not packed (None: its
# products stay with BLAS) rather than evicting others from winograd's cache (each eviction a repack per call)
PK_MAX_BYTES = int(float(os.environ.get("NEE_MATMUL_PACKED_MB", "512")) * (1 << 20))
_pk_live = [0]


def pk_pack(w: np.ndarray, tag=None):
    """``w`` (K, N) as panels (ceil(N / PK_NR), K, PK_NR) float32, 64-byte aligned, a last partial panel's
    columns past N zero (``tag``: winograd.weights' cache tag, unused); None past PK_MAX_BYTES of packed
    weights."""
    import weakref
    K, N = w.shape
    nr = PK_NR
    full, rem = divmod(N, nr)
    npan = full + (rem > 0)
    if _pk_live[0] + 4 * K * npan * nr > PK_MAX_BYTES:
        return None
    raw = np.empty(K * npan * nr + 16, np.float32)
    _pk_live[0] += raw.nbytes
    weakref.finalize(raw, _pk_release, raw.nbytes)
    off = (-raw.ctypes.data % 64) // 4
    p = raw[off:off + K * npan * nr].reshape(npan, K, nr)
    p[:full] = w[:, :full * nr].reshape(K, full, nr).transpose(1, 0, 2)
    if rem:
        p[full, :, :rem] = w[:, full * nr:]
        p[full, :, rem:] = 0
    return p


def _pk_release(n: int) -> None:
    _pk_live[0] -= n


def _pk_caller(out: np.ndarray, a: np.ndarray, b: np.ndarray, rows_only: bool = False, tiles: bool = False):
    """``g(out, a, b)`` computing ``out = a @ b`` with the packed kernel for arrays of these layouts and
    this thread count, ``b`` this frozen weight (another ``b`` of the same layout goes to matmul_into); None
    when the product is not one it takes (see above).  For callers whose ``out`` overlaps neither input (a
    compiled graph's steps).  ``rows_only``: on 2+ threads the tasks are blocks of whole rows (a row
    epilogue follows, :func:`pk_with_row_epilogue`), never column parts.  ``tiles``: an elementwise epilogue
    follows (:func:`pk_with_epilogue`): the product is cut into tasks of PK_EPI_TILE_BYTES of output on any
    thread count (see PK_EPI_TILES), None where that gives one task."""
    g0 = _pk_caller0(out, a, b, rows_only, tiles)
    if g0 is None:
        return None
    wb = b
    g = _gemv.weight_guard(g0, wb, matmul_into)
    c0 = getattr(g0, "calls", None)
    if c0 is not None:
        g.calls = lambda out, a, b: c0(out, a, b) if b is wb else None
    g.tasks = g0.tasks
    g.pk = getattr(g0, "pk", None)
    g.wb = wb
    return g


def _pk_task_ir(nops: int, cpos: int, row_tmp: bool = False) -> str:
    """``kernel(A, P, op0, ..., op{nops-1}, D)``: one task of a packed product with a fused epilogue: the
    packed kernel (address D[8]) on A, P and C = op{cpos} (the product's scratch) with D's first 8 words, then
    the epilogue's kernel (address D[9]) with its meta at D[10:], while the task's block is in its cache.
    The epilogue is an elementwise kernel (llvm_render's ``kernel(op0, ..., meta)``) or, with ``row_tmp``, a
    row kernel (``kernel(ops..., tmp, meta)``, tmp a row scratch on the stack: gemm_driver.MAX_ROW_BYTES, as
    the driver's row epilogues)."""
    ops = ", ".join(f"i8* %o{i}" for i in range(nops))
    sig = ", ".join(["i8*"] * (nops + row_tmp) + ["i64*"])
    tmp = tmp_arg = ""
    if row_tmp:
        from .. import gemm_driver
        nrow = gemm_driver.MAX_ROW_BYTES // 8
        tmp = f"  %tmpa = alloca [{nrow} x double], align 64\n  %tmp = bitcast [{nrow} x double]* %tmpa to i8*\n"
        tmp_arg = ", i8* %tmp"
    return f"""
define void @"kernel"(i8* %A, i8* %P, {ops}, i8* %Dr) {{
entry:
{tmp}  %D = bitcast i8* %Dr to i64*
  %pkp = getelementptr i64, i64* %D, i64 8
  %pka = load i64, i64* %pkp
  %pk = inttoptr i64 %pka to void (i8*, i8*, i8*, i8*)*
  call void %pk(i8* %A, i8* %P, i8* %o{cpos}, i8* %Dr)
  %efp = getelementptr i64, i64* %D, i64 9
  %efa = load i64, i64* %efp
  %ef = inttoptr i64 %efa to void ({sig})*
  %mp = getelementptr i64, i64* %D, i64 10
  call void %ef({ops}{tmp_arg}, i64* %mp)
  ret void
}}
"""


def _pk_epi_ir(nops: int, apos: int) -> str:
    """One task of a packed product with an elementwise epilogue (meta at D[10:]: the task's rows and columns
    of every operand); see _pk_task_ir."""
    return _pk_task_ir(nops, apos)


def pk_with_epilogue(g, epi_addr: int, table: np.ndarray, apos: int):
    """``h(a, ops)``: the packed product of ``g`` (a :func:`_pk_caller` cut into 2+ tasks on 2+ threads;
    its ``out`` is ``ops[apos]``) with an elementwise epilogue run by each task on its block right after
    computing it (as gemm_driver.with_epilogue does for BLAS blocks), in one driver call.  ``table`` (int64,
    nops x 3: row stride, column stride, offset, in each operand's elements over the (R, N) product) places
    each operand.  ``h`` returns False (nothing done) for another weight
    than ``g``'s (the caller runs its unfused path).  None where ``g`` has no tasks or too many operands."""
    pk = getattr(g, "pk", None)
    nops = int(table.shape[0])
    if pk is None or not 1 <= nops <= 9:
        return None
    import hashlib

    from .. import llvm_render
    desc = pk[1]
    ntasks = desc.shape[0]
    text = _pk_epi_ir(nops, apos)
    addr = llvm_render.compile_ir("gemm_packed_epi_" + hashlib.sha1(text.encode()).hexdigest()[:16], lambda: text)
    width = 8 + 2 + 4 + 5 * nops
    width += -width % 8          # rows 64 bytes apart
    ext = np.zeros((ntasks, width), np.int64)
    ext[:, :8] = desc
    ext[:, 8] = _pk_kernel(pk[0].shape[-1] // 2)[1]     # the product's kernel: its panels' width
    ext[:, 9] = int(epi_addr)
    for t in range(ntasks):
        r1, j1, _, _, _, j0, _, r0 = (int(v) for v in desc[t])
        ext[t, 10:14] = (1, 1, r1 - r0, j1 - j0)
        for k in range(nops):
            sm, sn, off = (int(v) for v in table[k, :3])
            ext[t, 14 + 5 * k:19 + 5 * k] = (0, 0, sm, sn, off + r0 * sm + j0 * sn)
    ext.flags.writeable = False
    return _pk_epi_call(g, addr, ext, nops)


def _pk_row_epi_ir(nops: int, cpos: int, mlen: int) -> str:
    """One task (whole rows) of a packed product then a row kernel (llvm_render.render_rows_ir's) on the task's
    rows, its meta (``mlen`` words, r0 / r1 the task's rows) at D[10:]; see _pk_task_ir."""
    return _pk_task_ir(nops, cpos, True) + f"; meta words: {mlen}\n"


def pk_with_row_epilogue(g, row_addr: int, meta: np.ndarray, nops: int, cpos: int):
    """``h(a, b, ops)``: the packed product of ``g`` (a :func:`_pk_caller` with ``rows_only``, cut into 2+
    blocks of whole rows on 2+ threads; its ``out`` is ``ops[cpos]``) with a row kernel (softmax / norms,
    gemm_driver.with_row_epilogue's convention; ``meta`` its launch meta over all rows) run by each task on
    its rows right after computing them.  ``h`` returns False for another weight than ``g``'s; None where
    ``g`` has no tasks, cuts columns, or takes too many operands."""
    pk = getattr(g, "pk", None)
    if pk is None or not 1 <= nops <= 9:
        return None
    desc = pk[1]
    N = int(desc[0, 1])
    if any(int(desc[t, 5]) != 0 or int(desc[t, 1]) != N for t in range(desc.shape[0])):
        return None     # column parts: rows not whole
    import hashlib

    from .. import gemm_driver, llvm_render
    if N * 8 > gemm_driver.MAX_ROW_BYTES:
        return None
    ntasks = desc.shape[0]
    mlen = int(meta.size)
    text = _pk_row_epi_ir(nops, cpos, mlen)
    addr = llvm_render.compile_ir("gemm_packed_rows_" + hashlib.sha1(text.encode()).hexdigest()[:16], lambda: text)
    width = 10 + mlen
    width += -width % 8
    ext = np.zeros((ntasks, width), np.int64)
    ext[:, :8] = desc
    ext[:, 8] = _pk_kernel(pk[0].shape[-1] // 2)[1]
    ext[:, 9] = int(row_addr)
    ext[:, 10:10 + mlen] = meta
    ext[:, 10] = desc[:, 7]      # r0: the task's first row
    ext[:, 11] = desc[:, 0]      # r1: its end row
    ext.flags.writeable = False
    return _pk_epi_call(g, addr, ext, nops)


def _pad_calls(pad, padk, a, R, K) -> list:
    """(native_chain) the copy of a's rows into the padded-stride scratch a packed product reads (rows 2 KiB apart:
    see _pk_caller0) as a call of the chain (numpy's copy, as the unchained call makes it), or none."""
    return [] if pad is None else [(np.copyto, (padk, a.reshape(R, K)), None)]


def _pk_epi_call(g, addr, ext, nops):
    from .. import gemm_driver
    panels, _, pad, padk, R, K, nt = g.pk
    ntasks = ext.shape[0]
    d = gemm_driver.call_plan(addr, 3 + nops, min(nt, ntasks), ntasks, ext.strides[0])
    if d is None:
        return None
    call = gemm_driver.epilogue_caller(3 + nops)
    dummy = np.zeros(1, np.int64)
    wb = g.wb
    wkey = (wb.__array_interface__["data"][0], wb.shape, wb.strides)

    def h(a, b, ops):
        if b is not wb and (b.__array_interface__["data"][0], b.shape, b.strides) != wkey:
            return False
        if pad is not None:
            np.copyto(padk, a.reshape(R, K))
            a = pad
        call(d, dummy, dummy, dummy, a, panels, *ops, ext)
        return True
    h.calls = lambda a, b, ops: _pad_calls(pad, padk, a, R, K) + [native_chain.driver(
        call, d, dummy, dummy, dummy, a if pad is None else pad, panels, *ops, ext)] if b is wb else None
    h.keep = ext
    h.tasks = ntasks
    return h


def _pk_caller0(out: np.ndarray, a: np.ndarray, b: np.ndarray, rows_only: bool = False, tiles: bool = False):
    if not PK_ON[0] or out.dtype != _F32 or a.dtype != _F32 or b.dtype != _F32 or b.ndim != 2 or a.ndim < 2 \
            or out.ndim != a.ndim or not _pk_host_ok():
        return None
    K, N = b.shape
    R = out.size // N if N else 0
    if N == 0 or K < 16 or R < PK_MIN_ROWS or a.shape[-1] != K or \
            out.shape[:-1] != a.shape[:-1] or out.shape[-1] != N:
        return None
    if tiles and (rows_only or not PK_EPI_TILES[0]):
        return None
    if PK_VEC == 8 and PK_AVX2_RULE[0] and R >= 2 * PK_MC and K > PK_AVX2_LONG_K and not tiles:
        return None         # the AVX2 kernel: see PK_AVX2_RULE (an epilogue in its tiles: PK_EPI_TILES)
    try:
        a2 = np.reshape(a, (R, K), copy=False)
        o2 = np.reshape(out, (R, N), copy=False)
    except ValueError:
        return None
    isz = 4
    if a2.strides[1] != isz or o2.strides[1] != isz or a2.strides[0] % isz or o2.strides[0] % isz or \
            a2.strides[0] < K * isz or o2.strides[0] < N * isz or np.may_share_memory(out, a) or \
            np.may_share_memory(out, b):
        return None
    from . import winograd
    if not winograd.is_frozen(b):
        return None
    panels = winograd.weights(b, ("gemm_pk", PK_NR, PK_VEC, b.strides), pk_pack)
    if panels is None:
        return None
    fn, fn_addr = _pk_kernel()
    nt = threads.NUM_THREADS
    lda = a2.strides[0] // isz
    pad = padk = None
    if (lda * isz) % 2048 == 0 and R >= PK_MR:
        # rows 2 KiB apart (K = 512, 1024, ...) fall in a few L1 sets, and a tile reads 12 of them at once:
        # such rows are copied to a scratch with a padded stride (64x1024x1024: 0.98x BLAS's time -> see above)
        lda = K + 16
        pad = np.empty((R, lda), np.float32)
        padk = pad[:, :K]
    npan = -(-N // PK_NR)       # (a last partial panel: the kernel's scratch tile, see _pk_ir)
    nkb = -(-K // PK_KC)
    kc = -(-K // nkb)          # K in blocks of at most PK_KC (a tile's 12 rows of a block stay in L1)
    rows = [(0, R)] if R < 2 * PK_MC else [(i, min(i + PK_MC, R)) for i in range(0, R, PK_MC)]
    # on 2+ threads the columns are cut too while there are few row chunks (tasks of even sizes, claimed by
    # whoever is free: 3 chunks on 2 threads would leave one thread a chunk behind)
    ncols = min(nt * PK_TASKS, npan) if nt > 1 and R * K * N >= DRV_MNK and len(rows) < 4 * nt else 1
    if rows_only and ncols > 1:
        # blocks of whole rows instead, multiples of the 12-row tile (each task streams all of the panels)
        step = -(-R // (ncols * PK_MR)) * PK_MR if len(rows) == 1 else PK_MC
        rows = [(i, min(i + step, R)) for i in range(0, R, step)]
        ncols = 1
    if tiles:
        # tasks of about PK_EPI_TILE_BYTES of output (rows a multiple of the tile's, the columns of a row chunk
        # in turn: its rows of a stay in L2 from one task to the next), whose epilogue reads them from L2
        rstep = min(-(-R // PK_MR), -(-PK_EPI_TILE_ROWS // PK_MR)) * PK_MR
        rows = [(i, min(i + rstep, R)) for i in range(0, R, rstep)]
        ncols = max(1, min(npan, -(-(min(rstep, R) * N * isz) // PK_EPI_TILE_BYTES)))
        if len(rows) * ncols < 2:
            return None
    parts = [(r0, r1, t * npan // ncols * PK_NR, min(N, (t + 1) * npan // ncols * PK_NR))
             for r0, r1 in rows for t in range(ncols)]
    ntasks = len(parts)
    desc = np.zeros((ntasks, _PK_DW), np.int64)
    for t, (r0, r1, j0, j1) in enumerate(parts):
        desc[t] = (r1, j1, K, lda, o2.strides[0] // isz, j0, kc, r0)
    desc.flags.writeable = False
    if ntasks > 1 and ((nt > 1 and R * K * N >= DRV_MNK) or tiles):
        from .. import gemm_driver
        d = gemm_driver.call_plan(fn_addr, 4, min(nt, ntasks) if R * K * N >= DRV_MNK else 1, ntasks,
                                  desc.strides[0])
        if d is not None:
            call = gemm_driver.epilogue_caller(4)
            dummy = np.zeros(1, np.int64)

            if pad is not None:
                def g(out, a, b):
                    np.copyto(padk, a.reshape(R, K))
                    call(d, dummy, dummy, dummy, pad, panels, out, desc)
            else:
                def g(out, a, b):
                    call(d, dummy, dummy, dummy, a, panels, out, desc)
            g.calls = lambda out, a, b: _pad_calls(pad, padk, a, R, K) + [native_chain.driver(
                call, d, dummy, dummy, dummy, a if pad is None else pad, panels, out, desc)]
            g.tasks = ntasks
            g.pk = (panels, desc, pad, padk, R, K,
                    min(nt, ntasks) if R * K * N >= DRV_MNK else 1)
            return g
    if tiles:
        return None
    # one thread: the row chunks in turn, every column in each
    ds = [np.array((r1, N, K, lda, o2.strides[0] // isz, 0, kc, r0), np.int64) for r0, r1 in rows]
    d0 = ds[0]
    if len(ds) > 1:
        def g(out, a, b):
            x = a
            if pad is not None:
                np.copyto(padk, a.reshape(R, K))
                x = pad
            for d in ds:
                fn(x, panels, out, d)
    elif pad is not None:
        def g(out, a, b):
            np.copyto(padk, a.reshape(R, K))
            fn(pad, panels, out, d0)
    else:
        def g(out, a, b):
            fn(a, panels, out, d0)
    g.calls = lambda out, a, b: _pad_calls(pad, padk, a, R, K) + \
        [(fn, (a if pad is None else pad, panels, out, d), None) for d in ds]
    g.tasks = 1
    return g


@kernel("matmul")
def matmul_kernel(backend, outs, ins, attrs):
    matmul_into(outs[0], ins[0], ins[1])


@kernel("einsum")
def einsum_kernel(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    ins = [x.astype(_F32) if x.dtype == _F16 else x for x in ins]
    r = np.einsum(attrs["equation"], *ins, optimize=len(ins) > 1)
    np.copyto(out, r, casting="unsafe")


# ------------------------------------------------------------------ batches of small products (packed per matrix)
# ``out[i] = a[i] @ b[i]`` over a batch of small float32 matrices (attention's scores q @ k^T and context p @ v:
# (B, H, S, dh) views of one (B, S, H * dh) activation, whose batch dims (B, H) do not merge into one stride, so
# neither gemm_driver nor one strided BLAS batch takes them; numpy then loops OpenBLAS over 96 128x128x32
# products, each paying OpenBLAS's packing and dispatch: ~27 GFLOP/s on this AVX2 EPYC).  Here one native call
# (_bpk_ir) walks the matrices (the batch dims merged into at most two strides), packs each ``b[i]`` (any
# strides: k^T's gather included) into the packed kernel's panels in a stack buffer, and runs the packed tile
# kernel (_pk_ir's) on ``a[i]`` (unit stride along K) and those panels.  On 2+ threads the matrices are shared
# out as gemm_driver call-job tasks (ranges of the batch).  Taken for N a multiple of the panel (PK_NR), K up to
# one K block (PK_KC), a panel buffer of at most BPK_MAX_PANEL floats and ``a[i]`` of at most BPK_MAX_A floats
# (it is re-read per panel); NEE_MATMUL_BATCHED_PACKED=0 turns it off.
BPK_ON = [os.environ.get("NEE_MATMUL_BATCHED_PACKED", "1") not in ("0", "")]
BPK_MAX_PANEL = 8192         # floats of one matrix's packed b: 32 KiB on the kernel's stack
BPK_MAX_A = 1 << 16          # floats of one matrix of a (256 KiB: within L2)
BPK_TASKS_PER_THREAD = 4
_BPK_DW = 20                 # descriptor words per task (see _bpk_ir)
_bpk_fns: dict = {}
_bpk_plans: dict = {}


def _bpk_ir(w: int, nops: int = 0, cpos: int = 0, mlen: int = 0) -> str:
    """``kernel(A, B, C, D)``: for matrices i in [D[0], D[1]) (i = o * D[2] + n: outer index o, inner n), with
    A_i = A + o*D[10] + n*D[11], B_i = B + o*D[12] + n*D[13], C_i = C + o*D[14] + n*D[15] (elements), pack
    B_i (K x N, element strides D[8] along K, D[9] along N) into panels (N / PK_NR, K, PK_NR) on the stack, then
    C_i (M x N, row stride D[7]) = A_i (M x K, row stride D[6], unit along K) @ B_i in the packed kernel's
    tiles (one K block: K <= PK_KC).  D[3:6] = M, N, K.  While the first panel's tiles run, the rows of the
    next matrix's A are prefetched (rows of a batch that streams from memory, read 6 at a time by the tiles,
    left the core waiting: 96 x 128x128 @ 128x32 ran at half the speed of the same products on one cached A).

    With ``nops``: ``kernel(A, B, op0, ..., op{nops-1}, D)``, C = op{cpos}, and after each matrix a row kernel
    (llvm_render.render_rows_ir's ``kernel(ops..., tmp, meta)``, address D[16]) runs on that matrix's rows while
    they are in cache: its meta (``mlen`` words at D[20:]) with r0, r1 = i * M, (i + 1) * M (rows numbered
    i * M + row, as gemm_driver's row epilogues on a batch), tmp a row scratch of gemm_driver.MAX_ROW_BYTES."""
    mr_max, nr, _ = _pk_shape(w)
    if w == 16:
        tiles = "\n".join(_pk_tile_ir(mr, w) for mr in range(1, mr_max + 1))
    else:
        tiles = "\n".join(_pk_tile_ir_unrolled(mr, w, PK_UNROLL8) for mr in range(1, mr_max + 1))
    words = "".join(f"  %dp{i} = getelementptr i64, i64* %D, i64 {i}\n  %d{i} = load i64, i64* %dp{i}\n"
                    for i in range(16))
    lanes = "".join(f"  %sl{ln} = mul i64 %d9, {ln}\n"
                    f"  %so{ln} = add i64 %bk, %sl{ln}\n"
                    f"  %sp{ln} = getelementptr float, float* %Bi, i64 %so{ln}\n"
                    f"  %sv{ln} = load float, float* %sp{ln}, align 4\n"
                    f"  %dq{ln} = add i64 %pk, {ln}\n"
                    f"  %dpp{ln} = getelementptr float, float* %P, i64 %dq{ln}\n"
                    f"  store float %sv{ln}, float* %dpp{ln}, align 4\n" for ln in range(nr))
    cases = " ".join(f"i64 {mr}, label %t{mr}" for mr in range(1, mr_max + 1))
    calls = "".join(f"t{mr}:\n  call void @tile{mr}(float* %At, i64 %d6, float* %Pj, float* %Ct, i64 %d7, i64 %d5, "
                    f"i1 false)\n  br label %inext\n" for mr in range(1, mr_max + 1))
    vec = f"<{nr} x float>"
    head = "i8* %Cr"
    rows = rows_init = ""
    if nops:
        from .. import gemm_driver
        head = ", ".join(f"i8* %o{i}" for i in range(nops))
        nrow = gemm_driver.MAX_ROW_BYTES // 8
        sig = ", ".join(["i8*"] * (nops + 1) + ["i64*"])
        args = ", ".join([f"i8* %o{i}" for i in range(nops)] + ["i8* %tmp", "i64* %MT"])
        rows_init = (f"  %Cr = bitcast i8* %o{cpos} to i8*\n"
                     f"  %tmpa = alloca [{nrow} x double], align 64\n"
                     f"  %tmp = bitcast [{nrow} x double]* %tmpa to i8*\n"
                     f"  %MTa = alloca [{mlen} x i64], align 64\n"
                     f"  %MT = getelementptr [{mlen} x i64], [{mlen} x i64]* %MTa, i64 0, i64 0\n"
                     "  %rfp = getelementptr i64, i64* %D, i64 16\n  %rfa = load i64, i64* %rfp\n"
                     f"  %rf = inttoptr i64 %rfa to void ({sig})*\n"
                     + "".join(f"  %mts{i} = getelementptr i64, i64* %D, i64 {20 + i}\n"
                               f"  %mtv{i} = load i64, i64* %mts{i}\n"
                               f"  %mtd{i} = getelementptr i64, i64* %MT, i64 {i}\n"
                               f"  store i64 %mtv{i}, i64* %mtd{i}\n" for i in range(mlen)))
        rows = ("  %rr0 = mul i64 %bi, %d3\n  %rr1 = add i64 %rr0, %d3\n"
                "  store i64 %rr0, i64* %MT\n  %MT1 = getelementptr i64, i64* %MT, i64 1\n"
                f"  store i64 %rr1, i64* %MT1\n  call void %rf({args})\n")
    return tiles + f"""
define void @"kernel"(i8* %Ar, i8* %Br, {head}, i8* %Dr) {{
entry:
  %A = bitcast i8* %Ar to float*
  %B = bitcast i8* %Br to float*
  %D = bitcast i8* %Dr to i64*
{rows_init}  %C = bitcast i8* %Cr to float*
{words}  %nk = mul i64 %d4, %d5
  %P = alloca float, i64 %nk, align 64
  %unitn = icmp eq i64 %d9, 1
  %none = icmp uge i64 %d0, %d1
  br i1 %none, label %out, label %bloop
bloop:
  %bi = phi i64 [%d0, %entry], [%bi1, %bend]
  %o = udiv i64 %bi, %d2
  %n = urem i64 %bi, %d2
  %ao0 = mul i64 %o, %d10
  %ao1 = mul i64 %n, %d11
  %ao = add i64 %ao0, %ao1
  %Ai = getelementptr float, float* %A, i64 %ao
  %bo0 = mul i64 %o, %d12
  %bo1 = mul i64 %n, %d13
  %bo = add i64 %bo0, %bo1
  %Bi = getelementptr float, float* %B, i64 %bo
  %co0 = mul i64 %o, %d14
  %co1 = mul i64 %n, %d15
  %co = add i64 %co0, %co1
  %Ci = getelementptr float, float* %C, i64 %co
  %bi1 = add i64 %bi, 1
  %hasnext = icmp ult i64 %bi1, %d1
  %on = udiv i64 %bi1, %d2
  %nn = urem i64 %bi1, %d2
  %an0 = mul i64 %on, %d10
  %an1 = mul i64 %nn, %d11
  %an = add i64 %an0, %an1
  %An = getelementptr float, float* %A, i64 %an
  br label %jloop
jloop:
  %j = phi i64 [0, %bloop], [%j1, %jnext]
  %pj = mul i64 %j, %d5
  %bn0 = mul i64 %j, %d9
  br label %kloop
kloop:
  %k = phi i64 [0, %jloop], [%k1, %kdone]
  %pk0 = mul i64 %k, {nr}
  %pk = add i64 %pj, %pk0
  %bk0 = mul i64 %k, %d8
  %bk = add i64 %bk0, %bn0
  br i1 %unitn, label %kvec, label %kscalar
kvec:
  %vsp = getelementptr float, float* %Bi, i64 %bk
  %vsq = bitcast float* %vsp to {vec}*
  %vv = load {vec}, {vec}* %vsq, align 4
  %vdp = getelementptr float, float* %P, i64 %pk
  %vdq = bitcast float* %vdp to {vec}*
  store {vec} %vv, {vec}* %vdq, align 64
  br label %kdone
kscalar:
{lanes}  br label %kdone
kdone:
  %k1 = add i64 %k, 1
  %kmore = icmp ult i64 %k1, %d5
  br i1 %kmore, label %kloop, label %jnext
jnext:
  %j1 = add i64 %j, {nr}
  %jmore = icmp ult i64 %j1, %d4
  br i1 %jmore, label %jloop, label %ploop
ploop:
  %jc = phi i64 [0, %jnext], [%jc1, %pnext]
  %po = mul i64 %jc, %d5
  %Pj = getelementptr float, float* %P, i64 %po
  %first = icmp eq i64 %jc, 0
  %dopf = and i1 %first, %hasnext
  br label %iloop
iloop:
  %i = phi i64 [0, %ploop], [%i1, %inext]
  %rem = sub i64 %d3, %i
  %big = icmp ugt i64 %rem, {mr_max}
  %mr = select i1 %big, i64 {mr_max}, i64 %rem
  %at0 = mul i64 %i, %d6
  %At = getelementptr float, float* %Ai, i64 %at0
  %ct0 = mul i64 %i, %d7
  %ct1 = add i64 %ct0, %jc
  %Ct = getelementptr float, float* %Ci, i64 %ct1
  br i1 %dopf, label %pfrow, label %tile
pfrow:
  %r = phi i64 [0, %iloop], [%r1, %pfrend]
  %ri = add i64 %i, %r
  %rof = mul i64 %ri, %d6
  br label %pfl
pfl:
  %l = phi i64 [0, %pfrow], [%l1, %pfl]
  %lo = add i64 %rof, %l
  %lp = getelementptr float, float* %An, i64 %lo
  %lq = bitcast float* %lp to i8*
  call void @llvm.prefetch.p0i8(i8* %lq, i32 0, i32 3, i32 1)
  %l1 = add i64 %l, 16
  %lmore = icmp ult i64 %l1, %d5
  br i1 %lmore, label %pfl, label %pfrend
pfrend:
  %le = add i64 %rof, %d5
  %le1 = sub i64 %le, 1
  %lep = getelementptr float, float* %An, i64 %le1
  %leq = bitcast float* %lep to i8*
  call void @llvm.prefetch.p0i8(i8* %leq, i32 0, i32 3, i32 1)
  %r1 = add i64 %r, 1
  %rmore = icmp ult i64 %r1, %mr
  br i1 %rmore, label %pfrow, label %tile
tile:
  switch i64 %mr, label %inext [ {cases} ]
{calls}inext:
  %i1 = add i64 %i, %mr
  %imore = icmp ult i64 %i1, %d3
  br i1 %imore, label %iloop, label %pnext
pnext:
  %jc1 = add i64 %jc, {nr}
  %jcmore = icmp ult i64 %jc1, %d4
  br i1 %jcmore, label %ploop, label %bend
bend:
{rows}  br i1 %hasnext, label %bloop, label %out
out:
  ret void
}}
declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)
declare <{w} x float> @llvm.fma.v{w}f32(<{w} x float>, <{w} x float>, <{w} x float>)
"""


def _bpk_kernel(nops: int = 0, cpos: int = 0, mlen: int = 0):
    """(builtin, address) of the batched kernel (``nops``: with a row epilogue, see _bpk_ir) for the host's
    vector width."""
    w = PK_VEC
    fn = _bpk_fns.get((w, nops, cpos, mlen))
    if fn is None:
        import hashlib

        from .. import llvm_call, llvm_render
        text = _bpk_ir(w, nops, cpos, mlen)
        addr = llvm_render.compile_ir(f"gemm_bpacked_v{w}_" + hashlib.sha1(text.encode()).hexdigest()[:16],
                                      lambda: text)
        fn = _bpk_fns[w, nops, cpos, mlen] = (llvm_call.make(addr, 3 + (nops or 1)), addr)
    return fn


def _bpk_batch(bshape: tuple, xs: list):
    """The batch dims ``bshape`` merged into at most two (outer, inner) for every array of ``xs`` at once:
    ``(n_outer, n_inner, [(outer stride, inner stride) in elements per array])``, or None.  Each x's batch dims
    are right-aligned to ``bshape`` (missing or size-1 dims: stride 0)."""
    nd = len(bshape)
    per = []
    for x in xs:
        xb = x.shape[:-2]
        lead = nd - len(xb)
        st = []
        for i in range(nd):
            j = i - lead
            if j < 0 or xb[j] == 1:
                st.append(0)
            else:
                s = x.strides[j]
                if s < 0 or s % 4:
                    return None
                st.append(s // 4)
        per.append(st)
    groups = []          # [count, [stride per array]] from the innermost dim out
    for i in reversed(range(nd)):
        n = bshape[i]
        if n == 1:
            continue
        ss = [p[i] for p in per]
        if groups:
            cnt, gs = groups[-1]
            if all(s == g * cnt for s, g in zip(ss, gs)):
                groups[-1][0] = cnt * n
                continue
        groups.append([n, ss])
    if len(groups) > 2:
        return None
    if not groups:
        return 1, 1, [(0, 0) for _ in xs]
    if len(groups) == 1:
        return 1, groups[0][0], [(0, s) for s in groups[0][1]]
    (ni, si), (no, so) = groups
    return no, ni, list(zip(so, si))


def _bpk_desc(out: np.ndarray, a: np.ndarray, b: np.ndarray):
    """(matrices, task descriptors (ntasks, _BPK_DW) int64: the first 16 words of _bpk_ir's D, batch range
    per task) of ``out = a @ b`` for the batched kernel at this thread count, or None (not a product it
    takes: see above)."""
    if not (PK_ON[0] and BPK_ON[0]) or out.dtype != _F32 or a.dtype != _F32 or b.dtype != _F32 or \
            out.ndim < 3 or a.ndim < 2 or b.ndim < 2 or not out.flags.c_contiguous or not _pk_host_ok():
        return None
    M, N = out.shape[-2:]
    K = a.shape[-1]
    if a.shape[-2] != M or b.shape[-2] != K or b.shape[-1] != N or N % PK_NR or M < PK_MIN_ROWS or \
            K > PK_KC or N * K > BPK_MAX_PANEL or M * K > BPK_MAX_A or K == 0:
        return None
    bshape = out.shape[:-2]
    nb = out.size // (M * N)
    if nb < 2:
        return None
    for x in (a, b):
        if len(x.shape) - 2 > len(bshape) or \
                any(xn not in (1, n) for xn, n in zip(reversed(x.shape[:-2]), reversed(bshape))):
            return None
    if (a.strides[-1] != 4 and K > 1) or a.strides[-2] < 0 or a.strides[-2] % 4 or \
            min(b.strides[-2:]) < 0 or b.strides[-2] % 4 or b.strides[-1] % 4:
        return None
    merged = _bpk_batch(bshape, [a, b, out])
    if merged is None:
        return None
    no, ni, ((sao, sai), (sbo, sbi), (sco, sci)) = merged
    nt = threads.NUM_THREADS
    if nt > 1 and nb * M * N * K >= DRV_MNK and os.environ.get("NEE_MATMUL_DRIVER", "1") not in ("0", "") and \
            _make_plan(out, a, b) is not None:
        # on 2+ threads a batch gemm_driver splits (one batch stride: BERT b1's (1, H) heads) stays there: not
        # measured better here on the loaded 2-core box (one thread: 0.95 vs 1.12 ms for BERT b1's scores +
        # softmax + p @ v)
        return None
    row = [0, nb, ni, M, N, K, a.strides[-2] // 4, out.strides[-2] // 4, b.strides[-2] // 4, b.strides[-1] // 4,
           sao, sai, sbo, sbi, sco, sci]
    ntasks = min(nb, nt * BPK_TASKS_PER_THREAD) if nt > 1 and nb * M * N * K >= DRV_MNK else 1
    desc = np.zeros((ntasks, _BPK_DW), np.int64)
    for t in range(ntasks):
        desc[t, :16] = row
        desc[t, 0], desc[t, 1] = t * nb // ntasks, (t + 1) * nb // ntasks
    return nb, desc


def _bpk_call(fn, addr, desc, nargs):
    """``h(*arrays)`` running the batched kernel (``fn`` / ``addr``) on ``arrays`` then the descriptor: as
    gemm_driver call-job tasks on 2+ threads (one per row of ``desc``), else one call over the whole batch."""
    ntasks = desc.shape[0]
    desc.flags.writeable = False
    if ntasks > 1:
        from .. import gemm_driver
        d = gemm_driver.call_plan(addr, nargs, min(threads.NUM_THREADS, ntasks), ntasks, desc.strides[0])
        if d is not None:
            call = gemm_driver.epilogue_caller(nargs)
            dummy = np.zeros(1, np.int64)

            def h(*arrays):
                call(d, dummy, dummy, dummy, *arrays, desc)
            h.calls = lambda *arrays: [native_chain.driver(call, d, dummy, dummy, dummy, *arrays, desc)]
            return h
        end = desc[-1, 1]
        desc = desc[:1].copy()
        desc[0, 1] = end          # the driver unavailable: the whole batch in one call
    d0 = desc[0]

    def h(*arrays):
        fn(*arrays, d0)
    h.calls = lambda *arrays: [(fn, (*arrays, d0), None)]
    return h


def _bpk_plan(out: np.ndarray, a: np.ndarray, b: np.ndarray):
    """``g(out, a, b)`` for arrays of these layouts and this thread count, or False (see above)."""
    r = _bpk_desc(out, a, b)
    if r is None:
        return False
    fn, addr = _bpk_kernel()
    desc = r[1]
    h = _bpk_call(fn, addr, desc, 4)

    def g(out, a, b):
        h(a, b, out)
    g.calls = lambda out, a, b: h.calls(a, b, out)
    return g


def bpk_with_row_epilogue(out: np.ndarray, a: np.ndarray, b: np.ndarray, row_addr: int, meta: np.ndarray,
                          nops: int, cpos: int):
    """``h(a, b, ops)``: the batched kernel's ``out = a @ b`` (``out`` is ``ops[cpos]``: the product's
    scratch) with a row kernel (softmax / norms, gemm_driver.with_row_epilogue's convention; ``meta`` its
    launch meta over the (matrices x M) rows) run on each matrix's rows right after computing them, on
    whichever thread computed the matrix; None where the batched kernel does not take the product."""
    from .. import gemm_driver
    r = _bpk_desc(out, a, b)
    if r is None or not 1 <= nops <= gemm_driver.MAX_EPI_OPS - 3 or out.shape[-1] * 8 > gemm_driver.MAX_ROW_BYTES:
        return None
    desc = r[1]
    mlen = int(meta.size)
    width = 20 + mlen
    width += -width % 8
    ext = np.zeros((desc.shape[0], width), np.int64)
    ext[:, :16] = desc[:, :16]
    fn, addr = _bpk_kernel(nops, cpos, mlen)
    ext[:, 16] = int(row_addr)
    ext[:, 17] = mlen
    ext[:, 20:20 + mlen] = meta
    h0 = _bpk_call(fn, addr, ext, 3 + nops)

    def h(a, b, ops):
        h0(a, b, *ops)
        return True
    h.calls = lambda a, b, ops: h0.calls(a, b, *ops)
    h.keep = ext
    return h


def _bpk_caller(out: np.ndarray, a: np.ndarray, b: np.ndarray):
    """The batched kernel's ``g(out, a, b)`` for arrays of these layouts and this thread count, or None; for
    callers whose ``out`` overlaps neither input."""
    key = (out.shape, out.strides, a.shape, a.strides, b.shape, b.strides, out.dtype, a.dtype, b.dtype,
           threads.NUM_THREADS)
    g = _bpk_plans.get(key)
    if g is None:
        if len(_bpk_plans) > 4096:
            _bpk_plans.clear()
        g = _bpk_plans[key] = _bpk_plan(out, a, b)
    return g or None
