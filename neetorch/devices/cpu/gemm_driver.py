"""Matrix products split across cores by one native call: BLAS blocks on GIL-free worker threads.

Splitting a product through the Python pool (``threads.run_parallel``) costs tens of µs per call
(futures, locks, GIL hand-offs, thread wake-ups): more than half of a 100 µs product, so 2 cores
gave ~1.4x on the 128-row products of a transformer block.  Here the whole split is one
builtin call (``llvm_call``: the GIL is released for its duration) into a small LLVM-compiled
driver that:

* sets OpenBLAS (the library numpy uses) to one thread for the call and restores the count it
  found after (as ``threads.serial_blas`` does; concurrent calls may see each other's setting:
  only speed, never results, depends on it),
* publishes a job (a descriptor, :func:`plan`: dtype, M, N, K, leading dims, transposes, batch
  count and byte strides, how each matrix is cut into blocks of rows or of columns) in a shared
  state array and wakes the driver's workers when they sleep (native loops, each run by a
  daemon Python thread that called into the driver once and never holds the GIL),
* claims blocks alongside the workers, one ``cblas_?gemm`` per block (``cblas_?gemv`` when the
  product has one row or one column: OpenBLAS's gemm packs the whole matrix for it), then waits
  only for blocks a worker has already started: ``SPIN_PAUSE_US`` spinning, then asleep on a
  futex the worker finishing the last block wakes (a descheduled worker needs a core; a
  caller that kept spinning or yielding would hold its own while the worker waits for one).

Claims are CAS on one 64-bit word (generation : block count : next block), so a worker that is
scheduled late claims nothing of a finished job, and a job never waits for a worker that has
not started (the claiming design of ``threads.run_parallel``).  After a job the workers spin
for ``SPIN_US`` (products come in bursts: the linears of a layer), the first ``SPIN_PAUSE_US``
on ``pause`` and then yielding the core at each check, then sleep on a futex.  One job at a
time: a caller that finds the driver busy (another thread's product, a nested call) runs its
blocks itself, serially, without waiting.

A descriptor can carry an epilogue (:func:`with_epilogue`: an llvm_render elementwise kernel;
:func:`with_row_epilogue`: a row kernel, softmax / norms, where blocks hold whole rows): whoever
runs a block runs the kernel on that block of its operands right after the block's BLAS call,
while the block is in its cache (kernels/fused.py, jit matmul epilogues).  Its operand pointers
come with the call (:func:`epilogue_caller`: an entry point per operand count that puts them in an
array on its stack, published with the job like A, B, C).

:func:`choose_blas_core` (run when the CPU backend's matmul kernels load) switches numpy's OpenBLAS to its
Haswell kernels on AMD Zen 4, faster there for float32 than the SkylakeX ones it picks (see "OpenBLAS's kernel
set on AMD Zen 4" below; NEE_OPENBLAS_CORE=keep leaves OpenBLAS's choice).

Linux x86-64 / aarch64 with the ILP64 ``scipy_openblas64_`` numpy ships only; :func:`available`
is False elsewhere (or when the self-test fails) and callers keep their pool path.  After
``fork`` the child gets a fresh state; its workers start on its first product.
"""
from __future__ import annotations

import atexit
import ctypes
import glob
import hashlib
import os
import sys
import threading
import time

import numpy as np

__all__ = ["SPIN_US", "available", "blas_core", "call_plan", "choose_blas_core", "epilogue_caller", "gemm", "plan",
           "run", "set_blas_core", "with_epilogue", "with_row_epilogue", "workers"]

# worker spin after a job before sleeping on the futex: the products of a layer come tens of µs
# apart, and a futex wake-up costs ~20-60 µs on this box
# 1 ms: between the products of a decoder step run its KV-cache copies and attention (~100-300 µs); workers
# still spinning take the next product's blocks at once, where a futex wake-up costs more than a split
# matrix-vector product saves (alternating processes, quiet 2-core box: GPT step 4.13-4.43 ms with 1 ms and
# 256 KiB matrix-vector splits vs 4.42-5.01 at 100 µs unsplit, 4.50-5.42 split at 100 µs; squeezenet 7.51-7.61 vs
# 7.66-8.16, BERT b1 20.05-20.43 vs 20.22-21.30 ms; the transformer block unchanged).  Past SPIN_PAUSE_US a spinning
# worker yields the core at each check, so runnable threads are not kept waiting
SPIN_US = float(os.environ.get("NEE_MATMUL_SPIN_US", "1000"))
# of which the first SPIN_PAUSE_US on ``pause`` only; then each check yields the core (sched_yield),
# so a worker sharing a core with the caller or another process hands it over at once.  A caller
# waiting for a worker's block spins SPIN_PAUSE_US too, then sleeps
SPIN_PAUSE_US = float(os.environ.get("NEE_MATMUL_SPIN_PAUSE_US", "20"))

# state slots (int64), hot words on their own cache lines
_WORD, _DONE, _SEQ, _SLEEPERS = 0, 8, 16, 17
_JOB_D, _JOB_A, _JOB_B, _JOB_C = 24, 25, 26, 27
_SGEMM, _DGEMM, _SYSCALL, _YIELD, _SPIN, _SHUTDOWN, _ACTIVE, _SPIN_PAUSE = 32, 33, 34, 35, 36, 37, 38, 39
_LOCK = 40
_BLASSET = 41   # openblas_set_num_threads_local (0: none)
_SGEMV, _DGEMV = 42, 43
_WTASKS = 44    # blocks run by workers (a statistic)
_DSEQ, _CWAIT = 48, 49   # futex word a caller waiting for a worker's last block sleeps on; 1 while it does
_JOB_E = 28     # the published job's epilogue operand pointers (i8**; null: none)
_MAIN = 29      # address of the driver's main function (the entry points call it)
_NSTATE = 56

# descriptor slots
D_MODE, D_ARG, D_DTYPE, D_M, D_N, D_K, D_LDA, D_LDB, D_LDC, D_TA, D_TB = range(11)
D_NB, D_SA, D_SB, D_SC, D_SPLIT, D_NCH, D_ALIGN, D_NTASKS, D_NWORK = range(11, 20)
# epilogue (:func:`with_epilogue`): kernel address (0: none), address of its operand table, operand count
D_EPI, D_EMETA, D_ENOPS = 20, 21, 22
# its kind (0: elementwise, 1: row kernel, :func:`with_row_epilogue`; KIND_CALL: no product, a call job of
# :func:`call_plan`) and a row kernel's meta length
D_EKIND, D_EMLEN = 23, 24
KIND_CALL = 2
NDESC = 28
MAX_EPI_OPS = 12
_META_WORDS = max(4 + 5 * MAX_EPI_OPS, 5 + 4 * MAX_EPI_OPS)
NO_TRANS, TRANS = 111, 112
MAX_TASKS = (1 << 20) - 1

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}


def _epilogue_ir() -> str:
    """The end of ``nee_task``: with an epilogue in the descriptor, its elementwise kernel runs on the
    block just computed (the block's rows, or columns, of every operand), by the thread that computed
    it, while the block is in its cache.

    The kernel is one of llvm_render's elementwise kernels: ``kernel(op0, ..., opK-1, meta)`` with meta
    = 4 dims then (4 strides, offset) per operand, in elements.  The operand table (D_EMETA) gives per
    operand (batch stride, row stride, column stride, offset) in elements over the descriptor's
    (batch, M, N) product; the block's meta is (1, 1, rows, cols) with (0, 0, row stride, column
    stride, offset of the block's first element)."""
    ptr = "i8*"
    calls = []
    for k in range(1, MAX_EPI_OPS + 1):
        loads = "".join(f"  %ep{k}_{i}.p = getelementptr i8*, i8** %E, i64 {i}\n"
                        f"  %ep{k}_{i} = load i8*, i8** %ep{k}_{i}.p\n" for i in range(k))
        sig = ", ".join([ptr] * k + ["i64*"])
        args = ", ".join([f"i8* %ep{k}_{i}" for i in range(k)] + ["i64* %mp"])
        calls.append(f"ec{k}:\n{loads}  %ef{k} = inttoptr i64 %ef to void ({sig})*\n"
                     f"  call void %ef{k}({args})\n  br label %out\n")
    cases = " ".join(f"i64 {k}, label %ec{k}" for k in range(1, MAX_EPI_OPS + 1))
    return f"""epi:
  %efp = getelementptr i64, i64* %d, i64 {D_EPI}
  %ef = load i64, i64* %efp
  %hase = icmp ne i64 %ef, 0
  br i1 %hase, label %epi_go, label %out
epi_go:
  %E = bitcast i8* %Ei to i8**
  %emp = getelementptr i64, i64* %d, i64 {D_EMETA}
  %emi = load i64, i64* %emp
  %em = inttoptr i64 %emi to i64*
  %enp = getelementptr i64, i64* %d, i64 {D_ENOPS}
  %nops = load i64, i64* %enp
  %ekp = getelementptr i64, i64* %d, i64 {D_EKIND}
  %ek = load i64, i64* %ekp
  %isrow = icmp eq i64 %ek, 1
  br i1 %isrow, label %rows_go, label %ew_go
{_row_epilogue_ir()}ew_go:
  %mp = getelementptr [{_META_WORDS} x i64], [{_META_WORDS} x i64]* %meta, i64 0, i64 0
  store i64 1, i64* %mp
  %mp1 = getelementptr i64, i64* %mp, i64 1
  store i64 1, i64* %mp1
  %mp2 = getelementptr i64, i64* %mp, i64 2
  store i64 %M2, i64* %mp2
  %mp3 = getelementptr i64, i64* %mp, i64 3
  store i64 %N2, i64* %mp3
  %ro = select i1 %rows, i64 %s, i64 0
  %co = select i1 %rows, i64 0, i64 %s
  br label %eloop
eloop:
  %k = phi i64 [ 0, %ew_go ], [ %k1, %eloop ]
  %k4 = mul i64 %k, 4
  %esbp = getelementptr i64, i64* %em, i64 %k4
  %esb = load i64, i64* %esbp
  %esmp = getelementptr i64, i64* %esbp, i64 1
  %esm = load i64, i64* %esmp
  %esnp = getelementptr i64, i64* %esbp, i64 2
  %esn = load i64, i64* %esnp
  %eofp = getelementptr i64, i64* %esbp, i64 3
  %eof = load i64, i64* %eofp
  %eo1 = mul i64 %bi, %esb
  %eo2 = mul i64 %ro, %esm
  %eo3 = mul i64 %co, %esn
  %eo4 = add i64 %eof, %eo1
  %eo5 = add i64 %eo4, %eo2
  %eo6 = add i64 %eo5, %eo3
  %k5 = mul i64 %k, 5
  %mb = add i64 %k5, 4
  %mq0 = getelementptr i64, i64* %mp, i64 %mb
  store i64 0, i64* %mq0
  %mq1 = getelementptr i64, i64* %mq0, i64 1
  store i64 0, i64* %mq1
  %mq2 = getelementptr i64, i64* %mq0, i64 2
  store i64 %esm, i64* %mq2
  %mq3 = getelementptr i64, i64* %mq0, i64 3
  store i64 %esn, i64* %mq3
  %mq4 = getelementptr i64, i64* %mq0, i64 4
  store i64 %eo6, i64* %mq4
  %k1 = add i64 %k, 1
  %emore = icmp ult i64 %k1, %nops
  br i1 %emore, label %eloop, label %ecall
ecall:
  switch i64 %nops, label %out [ {cases} ]
{''.join(calls)}"""


def _row_epilogue_ir() -> str:
    """A row kernel (llvm_render.render_rows_ir: ``kernel(ops..., w, b, tmp, meta)``, meta = r0, r1,
    B, N, eps, then (sa, sb, 1, off) per operand: row r = a*B + b of an operand starts at off +
    a*sa + b*sb) on the block's whole rows: the template meta (D_EMETA, D_EMLEN words, B = M) with
    r0, r1 = the block's rows, numbered bi*M + row; tmp, a row scratch of N elements, on the stack."""
    calls = []
    for k in range(1, MAX_EPI_OPS + 1):
        loads = "".join(f"  %rp{k}_{i}.p = getelementptr i8*, i8** %E, i64 {i}\n"
                        f"  %rp{k}_{i} = load i8*, i8** %rp{k}_{i}.p\n" for i in range(k))
        sig = ", ".join(["i8*"] * (k + 1) + ["i64*"])
        args = ", ".join([f"i8* %rp{k}_{i}" for i in range(k)] + ["i8* %rtmp", "i64* %rmp"])
        calls.append(f"rc{k}:\n{loads}  %rf{k} = inttoptr i64 %ef to void ({sig})*\n"
                     f"  call void %rf{k}({args})\n  br label %rdone\n")
    cases = " ".join(f"i64 {k}, label %rc{k}" for k in range(1, MAX_EPI_OPS + 1))
    return f"""rows_go:
  %rmp = getelementptr [{_META_WORDS} x i64], [{_META_WORDS} x i64]* %meta, i64 0, i64 0
  %rlp = getelementptr i64, i64* %d, i64 {D_EMLEN}
  %rlen = load i64, i64* %rlp
  br label %rcopy
rcopy:
  %rj = phi i64 [ 0, %rows_go ], [ %rj1, %rcopy ]
  %rsrc = getelementptr i64, i64* %em, i64 %rj
  %rv = load i64, i64* %rsrc
  %rdst = getelementptr i64, i64* %rmp, i64 %rj
  store i64 %rv, i64* %rdst
  %rj1 = add i64 %rj, 1
  %rmore = icmp ult i64 %rj1, %rlen
  br i1 %rmore, label %rcopy, label %rset
rset:
  %rbase = mul i64 %bi, %M
  %rs = select i1 %rows, i64 %s, i64 0
  %rn = select i1 %rows, i64 %len, i64 %M
  %r0 = add i64 %rbase, %rs
  %r1 = add i64 %r0, %rn
  store i64 %r0, i64* %rmp
  %rmp1 = getelementptr i64, i64* %rmp, i64 1
  store i64 %r1, i64* %rmp1
  %rtb = mul i64 %N, 8
  %rsave = call i8* @llvm.stacksave()
  %rtmp = alloca i8, i64 %rtb, align 64
  switch i64 %nops, label %rdone [ {cases} ]
{''.join(calls)}rdone:
  call void @llvm.stackrestore(i8* %rsave)
  br label %out
"""


def _call_ir() -> str:
    """The start of ``nee_task`` for a call job (:func:`call_plan`): no product, the task calls the kernel at
    D_EPI with the job's D_ENOPS pointers (the E array), whatever block it claimed."""
    calls = []
    for k in range(1, MAX_EPI_OPS + 1):
        loads = "".join(f"  %cp{k}_{i}.p = getelementptr i8*, i8** %CE, i64 {i}\n"
                        f"  %cp{k}_{i} = load i8*, i8** %cp{k}_{i}.p\n" for i in range(k))
        # the last argument advanced by task * D_EMLEN bytes (per-task metas; 0: every task the same)
        loads += f"  %cq{k} = getelementptr i8, i8* %cp{k}_{k - 1}, i64 %coff\n"
        sig = ", ".join(["i8*"] * k)
        args = ", ".join([f"i8* %cp{k}_{i}" for i in range(k - 1)] + [f"i8* %cq{k}"])
        calls.append(f"cc{k}:\n{loads}  %cf{k} = inttoptr i64 %cf to void ({sig})*\n"
                     f"  call void %cf{k}({args})\n  ret void\n")
    cases = " ".join(f"i64 {k}, label %cc{k}" for k in range(1, MAX_EPI_OPS + 1))
    return f"""pcall:
  %cfp = getelementptr i64, i64* %d, i64 {D_EPI}
  %cf = load i64, i64* %cfp
  %cnp = getelementptr i64, i64* %d, i64 {D_ENOPS}
  %cn = load i64, i64* %cnp
  %CE = bitcast i8* %Ei to i8**
  %csp = getelementptr i64, i64* %d, i64 {D_EMLEN}
  %cstride = load i64, i64* %csp
  %coff = mul i64 %t, %cstride
  switch i64 %cn, label %cdone [ {cases} ]
{"".join(calls)}cdone:
  ret void
"""


def _ir() -> str:
    i64p = "i64*"
    gemm_s = "void (i32, i32, i32, i64, i64, i64, float, i8*, i64, i8*, i64, float, i8*, i64)*"
    gemm_d = "void (i32, i32, i32, i64, i64, i64, double, i8*, i64, i8*, i64, double, i8*, i64)*"
    gemv_s = "void (i32, i32, i64, i64, float, i8*, i64, i8*, i64, float, i8*, i64)*"
    gemv_d = "void (i32, i32, i64, i64, double, i8*, i64, i8*, i64, double, i8*, i64)*"
    futex = _SYS_FUTEX[os.uname().machine]

    def slot(name, base, k):
        return (f"  %{name}.p = getelementptr i64, i64* {base}, i64 {k}\n"
                f"  %{name} = load i64, i64* %{name}.p\n")

    task = f"""
define internal void @nee_task(i64* %st, i64* %d, i8* %A, i8* %B, i8* %C, i8* %Ei, i64 %t) {{
entry:
  %meta = alloca [{_META_WORDS} x i64]
  %ckp = getelementptr i64, i64* %d, i64 {D_EKIND}
  %ck = load i64, i64* %ckp
  %iscall = icmp eq i64 %ck, {KIND_CALL}
  br i1 %iscall, label %pcall, label %task
{_call_ir()}task:
{slot('nch', '%d', D_NCH)}{slot('dt', '%d', D_DTYPE)}{slot('M', '%d', D_M)}{slot('N', '%d', D_N)}\
{slot('K', '%d', D_K)}{slot('lda', '%d', D_LDA)}{slot('ldb', '%d', D_LDB)}{slot('ldc', '%d', D_LDC)}\
{slot('ta', '%d', D_TA)}{slot('tb', '%d', D_TB)}{slot('sA', '%d', D_SA)}{slot('sB', '%d', D_SB)}\
{slot('sC', '%d', D_SC)}{slot('split', '%d', D_SPLIT)}{slot('align', '%d', D_ALIGN)}
  %bi = udiv i64 %t, %nch
  %j = urem i64 %t, %nch
  %isf = icmp eq i64 %dt, 0
  %isz = select i1 %isf, i64 4, i64 8
  %oA = mul i64 %bi, %sA
  %oB = mul i64 %bi, %sB
  %oC = mul i64 %bi, %sC
  %Ab = getelementptr i8, i8* %A, i64 %oA
  %Bb = getelementptr i8, i8* %B, i64 %oB
  %Cb = getelementptr i8, i8* %C, i64 %oC
  %rows = icmp eq i64 %split, 0
  %n = select i1 %rows, i64 %M, i64 %N
  %n1 = add i64 %n, %align
  %n2 = sub i64 %n1, 1
  %blocks = udiv i64 %n2, %align
  %sb0 = mul i64 %j, %blocks
  %sblk = udiv i64 %sb0, %nch
  %j1 = add i64 %j, 1
  %eb0 = mul i64 %j1, %blocks
  %eblk = udiv i64 %eb0, %nch
  %s0 = mul i64 %sblk, %align
  %e0 = mul i64 %eblk, %align
  %sc = icmp ult i64 %s0, %n
  %s = select i1 %sc, i64 %s0, i64 %n
  %ec = icmp ult i64 %e0, %n
  %e = select i1 %ec, i64 %e0, i64 %n
  %len = sub i64 %e, %s
  %empty = icmp sle i64 %len, 0
  br i1 %empty, label %out, label %go
go:
  %sisz = mul i64 %s, %isz
  %taN = icmp eq i64 %ta, {NO_TRANS}
  %sl = mul i64 %sisz, %lda
  %offAr = select i1 %taN, i64 %sl, i64 %sisz
  %offA = select i1 %rows, i64 %offAr, i64 0
  %tbN = icmp eq i64 %tb, {NO_TRANS}
  %slb = mul i64 %sisz, %ldb
  %offBc = select i1 %tbN, i64 %sisz, i64 %slb
  %offB = select i1 %rows, i64 0, i64 %offBc
  %slc = mul i64 %sisz, %ldc
  %offC = select i1 %rows, i64 %slc, i64 %sisz
  %A2 = getelementptr i8, i8* %Ab, i64 %offA
  %B2 = getelementptr i8, i8* %Bb, i64 %offB
  %C2 = getelementptr i8, i8* %Cb, i64 %offC
  %M2 = select i1 %rows, i64 %len, i64 %M
  %N2 = select i1 %rows, i64 %N, i64 %len
  %m1 = icmp eq i64 %M, 1
  %nn1 = icmp eq i64 %N, 1
  %isgv = or i1 %m1, %nn1
  br i1 %isgv, label %gemv, label %gemm
gemv:
  ; one row (M == 1): y = op(B)^T x, the matrix is B's block, x is A's row, y C's row;
  ; one column (N == 1): y = op(A) x, the matrix is A's block, x is B's column, y C's column.
  ; (OpenBLAS's gemm packs the whole matrix for one row: 2-3x slower than its gemv from memory)
  %r_rows = select i1 %tbN, i64 %K, i64 %N2
  %r_cols = select i1 %tbN, i64 %N2, i64 %K
  %r_tr = select i1 %tbN, i32 112, i32 111
  %r_incx = select i1 %taN, i64 1, i64 %lda
  %c_rows = select i1 %taN, i64 %M2, i64 %K
  %c_cols = select i1 %taN, i64 %K, i64 %M2
  %c_tr = select i1 %taN, i32 111, i32 112
  %c_incx = select i1 %tbN, i64 %ldb, i64 1
  %v_rows = select i1 %m1, i64 %r_rows, i64 %c_rows
  %v_cols = select i1 %m1, i64 %r_cols, i64 %c_cols
  %v_tr = select i1 %m1, i32 %r_tr, i32 %c_tr
  %v_mat = select i1 %m1, i8* %B2, i8* %A2
  %v_ld = select i1 %m1, i64 %ldb, i64 %lda
  %v_x = select i1 %m1, i8* %A2, i8* %B2
  %v_incx = select i1 %m1, i64 %r_incx, i64 %c_incx
  %v_incy = select i1 %m1, i64 1, i64 %ldc
  br i1 %isf, label %v32, label %v64
v32:
  %svp = getelementptr i64, i64* %st, i64 {_SGEMV}
  %svi = load i64, i64* %svp
  %sv = inttoptr i64 %svi to {gemv_s}
  call void %sv(i32 101, i32 %v_tr, i64 %v_rows, i64 %v_cols, float 1.0, i8* %v_mat, i64 %v_ld, i8* %v_x, \
i64 %v_incx, float 0.0, i8* %C2, i64 %v_incy)
  br label %epi
v64:
  %dvp = getelementptr i64, i64* %st, i64 {_DGEMV}
  %dvi = load i64, i64* %dvp
  %dv = inttoptr i64 %dvi to {gemv_d}
  call void %dv(i32 101, i32 %v_tr, i64 %v_rows, i64 %v_cols, double 1.0, i8* %v_mat, i64 %v_ld, i8* %v_x, \
i64 %v_incx, double 0.0, i8* %C2, i64 %v_incy)
  br label %epi
gemm:
  %ta32 = trunc i64 %ta to i32
  %tb32 = trunc i64 %tb to i32
  br i1 %isf, label %f32, label %f64
f32:
  %sgp = getelementptr i64, i64* %st, i64 {_SGEMM}
  %sgi = load i64, i64* %sgp
  %sg = inttoptr i64 %sgi to {gemm_s}
  call void %sg(i32 101, i32 %ta32, i32 %tb32, i64 %M2, i64 %N2, i64 %K, float 1.0, i8* %A2, i64 %lda, \
i8* %B2, i64 %ldb, float 0.0, i8* %C2, i64 %ldc)
  br label %epi
f64:
  %dgp = getelementptr i64, i64* %st, i64 {_DGEMM}
  %dgi = load i64, i64* %dgp
  %dg = inttoptr i64 %dgi to {gemm_d}
  call void %dg(i32 101, i32 %ta32, i32 %tb32, i64 %M2, i64 %N2, i64 %K, double 1.0, i8* %A2, i64 %lda, \
i8* %B2, i64 %ldb, double 0.0, i8* %C2, i64 %ldc)
  br label %epi
{_epilogue_ir()}out:
  ret void
}}

; the next unclaimed block of the published job, or -1
define internal i64 @nee_claim(i64* %word) {{
entry:
  br label %loop
loop:
  %w = load atomic i64, i64* %word seq_cst, align 8
  %idx = and i64 %w, 1048575
  %hi = lshr i64 %w, 20
  %nt = and i64 %hi, 1048575
  %has = icmp ult i64 %idx, %nt
  br i1 %has, label %try, label %none
try:
  %w1 = add i64 %w, 1
  %r = cmpxchg i64* %word, i64 %w, i64 %w1 seq_cst seq_cst
  %ok = extractvalue {{ i64, i1 }} %r, 1
  br i1 %ok, label %got, label %loop
got:
  ret i64 %idx
none:
  ret i64 -1
}}

define internal void @nee_pause() {{
  {'call void @llvm.x86.sse2.pause()' if os.uname().machine == 'x86_64' else 'call void asm sideeffect "yield", ""()'}
  ret void
}}

define internal void @nee_futex(i64* %st, i64 %slot, i64 %op, i64 %val) {{
  %fp = getelementptr i64, i64* %st, i64 {_SYSCALL}
  %fi = load i64, i64* %fp
  %f = inttoptr i64 %fi to i64 (i64, ...)*
  %sq = getelementptr i64, i64* %st, i64 %slot
  %a = bitcast i64* %sq to i8*
  %r = call i64 (i64, ...) %f(i64 {futex}, i8* %a, i64 %op, i64 %val, i8* null, i8* null, i64 0)
  ret void
}}

define internal void @nee_yield(i64* %st) {{
  %fp = getelementptr i64, i64* %st, i64 {_YIELD}
  %fi = load i64, i64* %fp
  %f = inttoptr i64 %fi to i32 ()*
  %r = call i32 %f()
  ret void
}}
"""
    seq32 = (f"  %sq64 = getelementptr i64, i64* %st, i64 {_SEQ}\n"
             "  %seq = bitcast i64* %sq64 to i32*\n")
    main = f"""
define void @"kernel"(i8* %sti, i8* %di, i8* %A, i8* %B, i8* %C, i8* %Ei) {{
entry:
  %st = bitcast i8* %sti to {i64p}
  %d = bitcast i8* %di to {i64p}
{seq32}  %wordp = getelementptr i64, i64* %st, i64 {_WORD}
  %donep = getelementptr i64, i64* %st, i64 {_DONE}
  %sleepp = getelementptr i64, i64* %st, i64 {_SLEEPERS}
  %lockp = getelementptr i64, i64* %st, i64 {_LOCK}
{slot('mode', '%d', D_MODE)}{slot('ntasks', '%d', D_NTASKS)}
  switch i64 %mode, label %job [ i64 1, label %worker
                                 i64 2, label %tsc ]
tsc:
  %now = call i64 @llvm.readcyclecounter()
  %tp = getelementptr i64, i64* %d, i64 {D_ARG}
  store i64 %now, i64* %tp
  ret void

job:
  ; BLAS single-threaded for the job (its own threads would fight the workers); restored after
  ; by whoever found it at another count (concurrent jobs: the last one to restore wins, and it
  ; restores the count it found, the user's)
  %bsp = getelementptr i64, i64* %st, i64 {_BLASSET}
  %bsi = load i64, i64* %bsp
  %hasbs = icmp ne i64 %bsi, 0
  %bsf = inttoptr i64 %bsi to i32 (i32)*
  br i1 %hasbs, label %bset, label %job2
bset:
  %prev0 = call i32 %bsf(i32 1)
  br label %job2
job2:
  %prev = phi i32 [ 1, %job ], [ %prev0, %bset ]
{slot('nwork0', '%d', D_NWORK)}  %one = icmp ule i64 %ntasks, 1
  %nowork = icmp eq i64 %nwork0, 0
  %alone = or i1 %one, %nowork
  br i1 %alone, label %serial, label %trylock
trylock:
  %lk = cmpxchg i64* %lockp, i64 0, i64 1 seq_cst seq_cst
  %locked = extractvalue {{ i64, i1 }} %lk, 1
  br i1 %locked, label %publish, label %serial
serial:
  %i = phi i64 [ 0, %job2 ], [ 0, %trylock ], [ %i1, %serial_body ]
  %more = icmp ult i64 %i, %ntasks
  br i1 %more, label %serial_body, label %restore
serial_body:
  call void @nee_task(i64* %st, i64* %d, i8* %A, i8* %B, i8* %C, i8* %Ei, i64 %i)
  %i1 = add i64 %i, 1
  br label %serial

publish:
{slot('nwork', '%d', D_NWORK)}  %actp0 = getelementptr i64, i64* %st, i64 {_ACTIVE}
  store atomic i64 %nwork, i64* %actp0 seq_cst, align 8
  %jd = getelementptr i64, i64* %st, i64 {_JOB_D}
  %jdv = ptrtoint i8* %di to i64
  store i64 %jdv, i64* %jd
  %ja = getelementptr i64, i64* %st, i64 {_JOB_A}
  %jav = ptrtoint i8* %A to i64
  store i64 %jav, i64* %ja
  %jb = getelementptr i64, i64* %st, i64 {_JOB_B}
  %jbv = ptrtoint i8* %B to i64
  store i64 %jbv, i64* %jb
  %jc = getelementptr i64, i64* %st, i64 {_JOB_C}
  %jcv = ptrtoint i8* %C to i64
  store i64 %jcv, i64* %jc
  %je = getelementptr i64, i64* %st, i64 {_JOB_E}
  %jev = ptrtoint i8* %Ei to i64
  store i64 %jev, i64* %je
  store atomic i64 0, i64* %donep seq_cst, align 8
  %w0 = load atomic i64, i64* %wordp seq_cst, align 8
  %g0 = lshr i64 %w0, 40
  %g1 = add i64 %g0, 1
  %g = and i64 %g1, 16777215
  %gs = shl i64 %g, 40
  %ns = shl i64 %ntasks, 20
  %nw = or i64 %gs, %ns
  store atomic i64 %nw, i64* %wordp seq_cst, align 8
  %old = atomicrmw add i32* %seq, i32 1 seq_cst
  %sl = load atomic i64, i64* %sleepp seq_cst, align 8
  %anysl = icmp sgt i64 %sl, 0
  br i1 %anysl, label %wake, label %work
wake:
  call void @nee_futex(i64* %st, i64 {_SEQ}, i64 129, i64 2147483647)
  br label %work
work:
  %t = call i64 @nee_claim(i64* %wordp)
  %got = icmp sge i64 %t, 0
  br i1 %got, label %work_body, label %wait
work_body:
  call void @nee_task(i64* %st, i64* %d, i8* %A, i8* %B, i8* %C, i8* %Ei, i64 %t)
  %x = atomicrmw add i64* %donep, i64 1 seq_cst
  br label %work
wait:
  ; blocks a worker started: spin SPIN_PAUSE_US, then sleep (a descheduled worker needs a core:
  ; a spinning or yielding caller would keep its own, and the worker may wait on the other)
  %cw0 = call i64 @llvm.readcyclecounter()
  %cspp = getelementptr i64, i64* %st, i64 {_SPIN_PAUSE}
  %cspin = load i64, i64* %cspp
  %dseq64 = getelementptr i64, i64* %st, i64 {_DSEQ}
  %dseq = bitcast i64* %dseq64 to i32*
  %cwaitp = getelementptr i64, i64* %st, i64 {_CWAIT}
  br label %wait_spin
wait_spin:
  %dn = load atomic i64, i64* %donep seq_cst, align 8
  %fin = icmp uge i64 %dn, %ntasks
  br i1 %fin, label %unlock, label %wait_more
wait_more:
  %cnow = call i64 @llvm.readcyclecounter()
  %cel = sub i64 %cnow, %cw0
  %clong = icmp sge i64 %cel, %cspin
  br i1 %clong, label %wait_sleep, label %wait_pause
wait_pause:
  call void @nee_pause()
  br label %wait_spin
wait_sleep:
  %dsv = load atomic i32, i32* %dseq seq_cst, align 4
  store atomic i64 1, i64* %cwaitp seq_cst, align 8
  %dn2 = load atomic i64, i64* %donep seq_cst, align 8
  %fin2 = icmp uge i64 %dn2, %ntasks
  br i1 %fin2, label %wait_end, label %wait_futex
wait_futex:
  %dsv64 = zext i32 %dsv to i64
  call void @nee_futex(i64* %st, i64 {_DSEQ}, i64 128, i64 %dsv64)
  br label %wait_sleep
wait_end:
  store atomic i64 0, i64* %cwaitp seq_cst, align 8
  br label %unlock
unlock:
  store atomic i64 0, i64* %lockp seq_cst, align 8
  br label %restore
restore:
  %same = icmp eq i32 %prev, 1
  br i1 %same, label %ret, label %breset
breset:
  %r0 = call i32 %bsf(i32 %prev)
  br label %ret
ret:
  ret void

worker:
{slot('me', '%d', D_ARG)}  %spinp = getelementptr i64, i64* %st, i64 {_SPIN}
  %actp = getelementptr i64, i64* %st, i64 {_ACTIVE}
  %shutp = getelementptr i64, i64* %st, i64 {_SHUTDOWN}
  %t00 = call i64 @llvm.readcyclecounter()
  br label %wloop
wloop:
  %last = phi i64 [ %t00, %worker ], [ %tw, %wdone ], [ %last, %wspin ], [ %tws, %wwoke ]
  %sd = load atomic i64, i64* %shutp seq_cst, align 8
  %stop = icmp ne i64 %sd, 0
  br i1 %stop, label %ret, label %wcheck
wcheck:
  %act = load atomic i64, i64* %actp monotonic, align 8
  %part = icmp slt i64 %me, %act
  br i1 %part, label %wclaim, label %widle
wclaim:
  %wt = call i64 @nee_claim(i64* %wordp)
  %wgot = icmp sge i64 %wt, 0
  br i1 %wgot, label %wrun, label %widle
wrun:
  %jd2 = getelementptr i64, i64* %st, i64 {_JOB_D}
  %jdi = load i64, i64* %jd2
  %jdp = inttoptr i64 %jdi to i64*
  %ja2 = getelementptr i64, i64* %st, i64 {_JOB_A}
  %jai = load i64, i64* %ja2
  %jap = inttoptr i64 %jai to i8*
  %jb2 = getelementptr i64, i64* %st, i64 {_JOB_B}
  %jbi = load i64, i64* %jb2
  %jbp = inttoptr i64 %jbi to i8*
  %jc2 = getelementptr i64, i64* %st, i64 {_JOB_C}
  %jci = load i64, i64* %jc2
  %jcp = inttoptr i64 %jci to i8*
  %je2 = getelementptr i64, i64* %st, i64 {_JOB_E}
  %jei = load i64, i64* %je2
  %jep = inttoptr i64 %jei to i8*
  %jntp = getelementptr i64, i64* %jdp, i64 {D_NTASKS}
  %jnt = load i64, i64* %jntp
  call void @nee_task(i64* %st, i64* %jdp, i8* %jap, i8* %jbp, i8* %jcp, i8* %jep, i64 %wt)
  %wtp = getelementptr i64, i64* %st, i64 {_WTASKS}
  %y2 = atomicrmw add i64* %wtp, i64 1 monotonic
  %y = atomicrmw add i64* %donep, i64 1 seq_cst
  %y1 = add i64 %y, 1
  %islast = icmp eq i64 %y1, %jnt
  br i1 %islast, label %wlast, label %wdone
wlast:
  ; the job's last block: wake the caller if it went to sleep waiting for it
  %dsq64 = getelementptr i64, i64* %st, i64 {_DSEQ}
  %dsq = bitcast i64* %dsq64 to i32*
  %dsold = atomicrmw add i32* %dsq, i32 1 seq_cst
  %cwp2 = getelementptr i64, i64* %st, i64 {_CWAIT}
  %cwv = load atomic i64, i64* %cwp2 seq_cst, align 8
  %cwon = icmp ne i64 %cwv, 0
  br i1 %cwon, label %wwakec, label %wdone
wwakec:
  call void @nee_futex(i64* %st, i64 {_DSEQ}, i64 129, i64 1)
  br label %wdone
wdone:
  %tw = call i64 @llvm.readcyclecounter()
  br label %wloop
widle:
  %now2 = call i64 @llvm.readcyclecounter()
  %el = sub i64 %now2, %last
  %spin = load i64, i64* %spinp
  %keep = icmp slt i64 %el, %spin
  br i1 %keep, label %wspin0, label %wsleep
wspin0:
  %spp = getelementptr i64, i64* %st, i64 {_SPIN_PAUSE}
  %spv = load i64, i64* %spp
  %hot = icmp slt i64 %el, %spv
  br i1 %hot, label %wpause, label %wyield
wpause:
  call void @nee_pause()
  br label %wspin
wyield:
  call void @nee_yield(i64* %st)
  br label %wspin
wspin:
  br label %wloop
wsleep:
  %s = load atomic i32, i32* %seq seq_cst, align 4
  %w2 = load atomic i64, i64* %wordp seq_cst, align 8
  %idx2 = and i64 %w2, 1048575
  %hi2 = lshr i64 %w2, 20
  %nt2 = and i64 %hi2, 1048575
  %has2 = icmp ult i64 %idx2, %nt2
  %sd2 = load atomic i64, i64* %shutp seq_cst, align 8
  %stop2 = icmp ne i64 %sd2, 0
  %act2 = load atomic i64, i64* %actp seq_cst, align 8
  %part2 = icmp slt i64 %me, %act2
  %has3 = and i1 %has2, %part2
  %wakeup = or i1 %has3, %stop2
  br i1 %wakeup, label %wwoke, label %wfutex
wfutex:
  %q = atomicrmw add i64* %sleepp, i64 1 seq_cst
  %s64 = zext i32 %s to i64
  call void @nee_futex(i64* %st, i64 {_SEQ}, i64 128, i64 %s64)
  %q2 = atomicrmw sub i64* %sleepp, i64 1 seq_cst
  br label %wwoke
wwoke:
  %tws = call i64 @llvm.readcyclecounter()
  br label %wloop
}}

declare i64 @llvm.readcyclecounter()
declare i8* @llvm.stacksave()
declare void @llvm.stackrestore(i8*)
{'declare void @llvm.x86.sse2.pause()' if os.uname().machine == 'x86_64' else ''}
"""
    return task + main


# ------------------------------------------------------------------------------ Python side
_lock = threading.RLock()   # available() holds it while the self-test starts a worker
_drv = [None]            # the builtin calling the driver, once compiled
_ok = [None]             # available() result
_state = [None]          # the state array of this process
_st: dict = {"threads": [], "respawn": 0}


# ---- OpenBLAS's kernel set on AMD Zen 4 and Zen 5
# numpy's OpenBLAS (DYNAMIC_ARCH) picks its SkylakeX (AVX-512) kernels on Zen 4, which runs 512-bit
# operations as two 256-bit halves; its Haswell (AVX2) kernels ("Zen" in OpenBLAS's names) are faster there
# for float32 products.  Measured on this box's Zen 4 (EPYC, family 0x19), one thread, the two kernel sets
# switched in one process (gemm_driver.blas_core), alternating, min of 5-7 rounds: Haswell / SkylakeX time
# 128x256x256 0.92, with a transposed weight 0.78, 128x256x1024^T 0.84, 128x384x1536 0.88, 64x1024x1024^T
# 0.76, 32x1024x1024^T 0.62, 8x768x768 0.80, 1024x384x384 1.00, 1x384x1536 0.95 (gemv); slower only on
# tiny products SkylakeX's small-matrix path takes (128x32x128 1.16, 128x128x32 1.21, 37x111x203 1.21)
# and on float64 (0.89-1.14, mostly 1.03-1.08).  Whole workloads, one thread, the same process
# alternating: the bench_jit transformer block 0.915, ONNX MLP 0.84, ONNX BERT b1 0.93.  So on Zen 4
# (where OpenBLAS chose SkylakeX / Cooperlake / SapphireRapids) neetorch switches numpy's OpenBLAS to
# its Haswell kernels when the CPU backend loads (a process-wide setting: numpy's own products in this
# process use them too; results differ from SkylakeX's only in rounding).
# Zen 5 (family 0x1A: full-width 512-bit units) is the reverse: OpenBLAS 0.3.31 does not know the family and
# picks Haswell, whose kernels run there at about half SkylakeX's speed.  Measured on an EPYC Zen 5 (2 vCPUs),
# one thread, alternating in one process, min of 3 rounds (/tmp/lead20/blascore.py), SkylakeX / Haswell time:
# 128x256x256 0.55, with a transposed weight 0.66, 128x384x1536 0.56, 64x1024x1024^T 0.80, 1024x384x384 0.52,
# 512x512x512 0.53, 128x32x128 0.50, 37x111x203 0.47, 8x768x768 0.91; even or slower only on 32x1024x1024^T
# 1.07 and the gemv 1x384x1536 1.09.  ONNX models, 2 threads, fresh processes (bench/onnx_vs_ort.py --alone):
# ResNet-50 31.5 -> 26.7 ms, Inception v2 15.3 -> 12.3, VGG-19 92.7 -> 68.7, ZFNet-512 21.0 -> 16.7.  So on
# AMD family 0x1A and later with AVX-512F, where OpenBLAS chose a non-AVX-512 core, neetorch switches it to
# SkylakeX.  NEE_OPENBLAS_CORE=keep leaves OpenBLAS as it chose; NEE_OPENBLAS_CORE=<name> (an OpenBLAS core
# name) forces one; an OPENBLAS_CORETYPE set by the user is never overridden.
_AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids")
_KNOWN_CORES = ("haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "sandybridge", "nehalem",
                "prescott")
_core_done = [False]


def _openblas_libs():
    """numpy's ILP64 OpenBLAS libraries (ctypes), each found one that loads, in search order."""
    here = os.path.dirname(np.__file__)
    for d in (os.path.join(here, "..", "numpy.libs"), os.path.join(here, ".libs")):
        for path in sorted(glob.glob(os.path.join(d, "libscipy_openblas64_*.so*"))):
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            yield lib


def _openblas_lib():
    for lib in _openblas_libs():
        if all(hasattr(lib, n) for n in ("gotoblas_dynamic_init", "gotoblas_dynamic_quit", "gotoblas_corename")):
            lib.gotoblas_corename.restype = ctypes.c_char_p
            return lib
    return None


def blas_core() -> str | None:
    """The kernel set numpy's OpenBLAS runs (its core name, e.g. 'Haswell', 'SkylakeX'), or None when it
    is not a DYNAMIC_ARCH OpenBLAS this module can see."""
    lib = _openblas_lib()
    return None if lib is None else lib.gotoblas_corename().decode()


def set_blas_core(name: str) -> str:
    """Switch numpy's OpenBLAS (DYNAMIC_ARCH) to the kernel set ``name`` (an OpenBLAS core name, as
    OPENBLAS_CORETYPE takes) and return the core it runs now.  Process-wide; call it while no thread is
    inside a BLAS call (the switch is OpenBLAS's own start-up selection, run again).  Raises ValueError
    for an unknown name or when OpenBLAS did not take it (then the previous core is restored), RuntimeError
    without a DYNAMIC_ARCH OpenBLAS."""
    if name.lower() not in _KNOWN_CORES:
        raise ValueError(f"gemm_driver.set_blas_core: unknown OpenBLAS core {name!r}; known: {', '.join(_KNOWN_CORES)}")
    lib = _openblas_lib()
    if lib is None:
        raise RuntimeError("gemm_driver.set_blas_core: numpy's OpenBLAS is not a DYNAMIC_ARCH build this module can see")
    with _lock:
        old = lib.gotoblas_corename().decode()
        if old.lower() == name.lower():
            return old
        _select_core(lib, name)
        now = lib.gotoblas_corename().decode()
        want = "haswell" if name.lower() == "zen" else name.lower()   # (Zen is Haswell's kernels in these builds)
        if now.lower() != want:
            _select_core(lib, old)
            raise ValueError(f"gemm_driver.set_blas_core: OpenBLAS did not take core {name!r} (it chose {now!r}); "
                             f"kept {old!r}")
        return now


def _select_core(lib, name: str) -> None:
    saved = os.environ.get("OPENBLAS_CORETYPE")
    os.environ["OPENBLAS_CORETYPE"] = name
    try:
        lib.gotoblas_dynamic_quit()     # (gotoblas = NULL: dynamic_init selects again)
        lib.gotoblas_dynamic_init()
    finally:
        if saved is None:
            del os.environ["OPENBLAS_CORETYPE"]
        else:
            os.environ["OPENBLAS_CORETYPE"] = saved


def _amd_avx512_family() -> int:
    """The CPU family of an AMD CPU with AVX-512F (25: Zen 4, 26: Zen 5, ...) from /proc/cpuinfo, else 0."""
    try:
        with open("/proc/cpuinfo") as f:
            head = f.read(1 << 14)
    except OSError:
        return 0
    info = {}
    for line in head.split("\n\n")[0].splitlines():
        k, _, v = line.partition(":")
        info[k.strip()] = v.strip()
    if info.get("vendor_id") != "AuthenticAMD" or "avx512f" not in info.get("flags", "").split():
        return 0
    try:
        return int(info.get("cpu family", "0"))
    except ValueError:
        return 0


def _zen4() -> bool:
    """AMD family 0x19 (Zen 3 / Zen 4) with AVX-512 (Zen 4), from /proc/cpuinfo."""
    return _amd_avx512_family() == 25


def preferred_core(core: str) -> str | None:
    """The kernel set neetorch prefers on this CPU over OpenBLAS's choice ``core`` (see above), or None to keep it."""
    fam = _amd_avx512_family()
    avx512 = core.lower() in _AVX512_CORES
    if fam == 25 and avx512:
        return "Haswell"
    if fam >= 26 and not avx512 and core.lower() in ("haswell", "zen"):
        return "SkylakeX"
    return None


def choose_blas_core() -> str | None:
    """Once per process (the CPU backend's import): the OpenBLAS kernel set neetorch prefers (see above).
    Returns the core switched to, or None when nothing changed."""
    if _core_done[0]:
        return None
    _core_done[0] = True
    want = os.environ.get("NEE_OPENBLAS_CORE", "").strip()
    if want.lower() in ("keep", "0", "off") or (not want and os.environ.get("OPENBLAS_CORETYPE")):
        return None
    if not want:
        if sys.platform != "linux" or os.uname().machine != "x86_64":
            return None
        core = blas_core()
        want = None if core is None else preferred_core(core)
        if want is None:
            return None
    elif _openblas_lib() is None:
        return None
    cur = blas_core()
    if cur is not None and cur.lower() == want.lower():
        return None
    return set_blas_core(want)


def _blas_fns():
    """(sgemm, dgemm, openblas_set_num_threads_local or 0, sgemv, dgemv) addresses in numpy's ILP64
    OpenBLAS, or None."""
    from . import threads
    for lib in _openblas_libs():
        fns = [getattr(lib, f"scipy_cblas_{n}64_", None) for n in ("sgemm", "dgemm", "sgemv", "dgemv")]
        if all(f is not None for f in fns):
            bs = threads._blas_set
            bs = ctypes.cast(bs, ctypes.c_void_p).value if bs is not None else 0
            s, dd, sv, dv = (ctypes.cast(f, ctypes.c_void_p).value for f in fns)
            return s, dd, bs, sv, dv
    return None


def _compile():
    """Compile the driver; returns the address of its main function (``kernel(st, d, A, B, C, E)``)."""
    from . import llvm_render
    text = _ir()
    key = "gemmdrv_" + hashlib.sha1(text.encode()).hexdigest()[:16]
    return llvm_render.compile_ir(key, lambda: text)


def _entry_ir(nops: int) -> str:
    """An entry point taking the product's arrays and ``nops`` epilogue operands (the builtin passes
    each array's data pointer): it puts the operands' pointers in an array on its stack (the job's
    E, read by the workers while the caller waits in the main function for the job's blocks) and
    calls the driver's main function, whose address is in the state."""
    eargs = "".join(f", i8* %e{i}" for i in range(nops))
    lines = [f'define void @"kernel"(i8* %st, i8* %d, i8* %A, i8* %B, i8* %C{eargs}) {{']
    if nops:
        lines.append(f"  %arr = alloca [{nops} x i8*]")
        for i in range(nops):
            lines += [f"  %p{i} = getelementptr [{nops} x i8*], [{nops} x i8*]* %arr, i64 0, i64 {i}",
                      f"  store i8* %e{i}, i8** %p{i}"]
        lines.append(f"  %E = bitcast [{nops} x i8*]* %arr to i8*")
        ev = "%E"
    else:
        ev = "null"
    lines += ["  %sti = bitcast i8* %st to i64*",
              f"  %mp = getelementptr i64, i64* %sti, i64 {_MAIN}",
              "  %m = load i64, i64* %mp",
              "  %f = inttoptr i64 %m to void (i8*, i8*, i8*, i8*, i8*, i8*)*",
              f"  call void %f(i8* %st, i8* %d, i8* %A, i8* %B, i8* %C, i8* {ev})",
              "  ret void", "}"]
    return "\n".join(lines) + "\n"


_entries: dict = {}     # nops -> builtin f(state, desc, A, B, C, *epilogue operands)


def _entry(nops: int):
    f = _entries.get(nops)
    if f is None:
        from . import llvm_call, llvm_render
        text = _entry_ir(nops)
        key = f"gemmdrv_entry{nops}_" + hashlib.sha1(text.encode()).hexdigest()[:16]
        f = _entries[nops] = llvm_call.make(llvm_render.compile_ir(key, lambda: text), 5 + nops)
    return f


def _new_state(fns, tpu):
    buf = np.zeros(_NSTATE + 8, np.int64)
    off = (-buf.ctypes.data % 64) // 8
    st = buf[off:off + _NSTATE]
    libc = ctypes.CDLL(None)
    st[_SGEMM], st[_DGEMM], st[_BLASSET], st[_SGEMV], st[_DGEMV] = fns
    st[_SYSCALL] = ctypes.cast(libc.syscall, ctypes.c_void_p).value
    st[_YIELD] = ctypes.cast(libc.sched_yield, ctypes.c_void_p).value
    st[_SPIN] = int(SPIN_US * tpu)
    st[_SPIN_PAUSE] = int(min(SPIN_PAUSE_US, SPIN_US) * tpu)
    old = _state[0]
    if old is not None:
        st[_MAIN] = old[_MAIN]
    _st.update(buf=buf, fns=fns, tpu=tpu)
    _state[0] = st
    _CELL[0] = st.ctypes.data
    return st


# the current state's address, in a cell never reallocated (a fork's child makes a new state): native code
# that publishes call jobs itself (kernels/linalg.py's threaded few-row products: ``main(state, desc, A, B, C,
# E)``, the driver's main function at word MAIN_SLOT of the state) reads the state from it
_CELL = np.zeros(8, np.int64)
MAIN_SLOT = _MAIN


def state_cell() -> int:
    """Address of the int64 holding the current state's address (see _CELL)."""
    return _CELL.ctypes.data


def publish_ir(thr: str, cell: str, drv: str, tasks: str, yp: str = "%yp", xp: str = "%xp", wp: str = "%wp") -> str:
    """LLVM IR starting the body of a kernel ``kernel(y, x, w, desc)`` that publishes its own call job
    (kernels/linalg.py's threaded few-row products, kernels/gemv.py's packed one-row products): with the
    value ``thr`` (i64) nonzero the descriptor is a threaded product's top one and the kernel hands its tasks
    to this driver as one call job (the driver's main function, at word MAIN_SLOT of the state whose address
    is in the cell at ``cell``, on the call-job descriptor ``drv``, E = y, x, w, the tasks' descriptors
    ``tasks``: the driver runs the kernel on each task's descriptor, ``thr`` 0 there) and returns; else it
    branches to the block ``compute`` the text ends by opening.  The arguments are IR value names."""
    return f"""  %thron = icmp ne i64 {thr}, 0
  br i1 %thron, label %publish, label %compute
publish:
  %cellp = inttoptr i64 {cell} to i64*
  %sti = load atomic i64, i64* %cellp acquire, align 8
  %stp = inttoptr i64 %sti to i64*
  %mainp = getelementptr i64, i64* %stp, i64 {MAIN_SLOT}
  %maini = load i64, i64* %mainp
  %mainf = inttoptr i64 %maini to void (i8*, i8*, i8*, i8*, i8*, i8*)*
  %E = alloca [4 x i8*]
  %e0 = getelementptr [4 x i8*], [4 x i8*]* %E, i64 0, i64 0
  store i8* {yp}, i8** %e0
  %e1 = getelementptr [4 x i8*], [4 x i8*]* %E, i64 0, i64 1
  store i8* {xp}, i8** %e1
  %e2 = getelementptr [4 x i8*], [4 x i8*]* %E, i64 0, i64 2
  store i8* {wp}, i8** %e2
  %e3 = getelementptr [4 x i8*], [4 x i8*]* %E, i64 0, i64 3
  %tasksp = inttoptr i64 {tasks} to i8*
  store i8* %tasksp, i8** %e3
  %Ei = bitcast i8** %e0 to i8*
  %stv = inttoptr i64 %sti to i8*
  %drvp = inttoptr i64 {drv} to i8*
  call void %mainf(i8* %stv, i8* %drvp, i8* null, i8* null, i8* null, i8* %Ei)
  ret void
compute:
"""


def published_job(desc: np.ndarray, parts, words: int, part_col: int, thr_col: int, kernel_addr: int,
                  nthreads: int):
    """``(top, tasks)``: the descriptors of a product that a kernel written with :func:`publish_ir` runs as one
    call job of ``len(parts)`` tasks claimed by ``nthreads`` threads, in one int64 buffer (read-only, kept
    alive by its views): the top descriptor (``desc`` with words ``thr_col`` to ``thr_col + 3`` = 1, the
    address of the state cell, of the driver's call-job descriptor, of the tasks'), the driver's
    (:func:`call_plan` of ``kernel_addr``), and one of ``words`` words per task (``desc`` with its part,
    a row of ``parts``, from word ``part_col``).  None when the driver is not available."""
    n = len(parts)
    # one buffer: the top descriptor, the driver's, the tasks'
    buf = np.zeros(words * (n + 1) + NDESC, np.int64)
    top, drv = buf[:words], buf[words:words + NDESC]
    tasks = buf[words + NDESC:].reshape(n, words)
    tasks[:] = desc
    tasks[:, part_col:part_col + len(parts[0])] = parts
    d = call_plan(kernel_addr, 4, min(nthreads, n), n, tasks.strides[0])
    if d is None:
        return None
    drv[:] = d
    top[:] = desc
    top[thr_col:thr_col + 4] = (1, state_cell(), drv.ctypes.data, tasks.ctypes.data)
    buf.flags.writeable = False
    return top, tasks


def _tsc_per_us() -> float:
    """Cycle-counter ticks per µs (the workers time their spin with it)."""
    d = np.zeros(NDESC, np.int64)
    d[D_MODE] = 2
    z = np.zeros(1)
    best = None
    for _ in range(3):
        _drv[0](_state[0], d, z, z, z)
        c0, t0 = int(d[D_ARG]), time.perf_counter()
        time.sleep(0.002)
        _drv[0](_state[0], d, z, z, z)
        c1, t1 = int(d[D_ARG]), time.perf_counter()
        r = (c1 - c0) / ((t1 - t0) * 1e6)
        best = r if best is None else min(best, r)
    return max(best, 1.0)


def available() -> bool:
    """True when the driver compiled and its self-test passed in this process."""
    if _ok[0] is None:
        with _lock:
            if _ok[0] is None:
                _ok[0] = _init()
    return _ok[0]


def _init() -> bool:
    if sys.platform != "linux" or os.uname().machine not in _SYS_FUTEX or ctypes.sizeof(ctypes.c_void_p) != 8:
        return False
    fns = _blas_fns()
    if fns is None:
        return False
    try:
        main = _compile()
        _drv[0] = _entry(0)
        st = _new_state(fns, 1.0)
        st[_MAIN] = main
        _new_state(fns, _tsc_per_us())[_MAIN] = main
        # self-test: a product cut in uneven row blocks (published to a worker), against numpy
        rng = np.random.default_rng(0)
        a = rng.standard_normal((37, 19)).astype(np.float32)
        b = rng.standard_normal((19, 45)).astype(np.float32)
        out = np.full((37, 45), np.nan, np.float32)
        d = _plan_2d(out, a, b, 2, 4, 0, 1, 1)
        if d is None:
            return False
        run(d, a, b, out)
        return bool(np.allclose(out, a @ b, rtol=1e-4, atol=1e-4))
    except Exception:   # noqa: BLE001 - no driver: callers keep the pool path (always correct)
        return False


def _ensure_workers(n: int) -> None:
    ths = _st["threads"]
    if len(ths) >= n:
        return
    with _lock:
        st = _state[0]
        while len(ths) < n:
            d = np.zeros(NDESC, np.int64)
            d[D_MODE] = 1
            d[D_ARG] = len(ths)
            z = np.zeros(1)
            th = threading.Thread(target=_drv[0], args=(st, d, z, z, z), daemon=True,
                                  name=f"neetorch-gemm-{len(ths)}")
            th.start()
            ths.append(th)


def _after_fork() -> None:
    # the child has none of the parent's workers, and its state may have been copied mid-job
    if _ok[0]:
        n = len(_st["threads"])
        _st["threads"] = []
        _new_state(_st["fns"], _st["tpu"])
        _st["respawn"] = n


os.register_at_fork(after_in_child=_after_fork)


def workers() -> int:
    """Worker threads started in this process."""
    return len(_st["threads"])


def run(desc: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """Run a planned product on these arrays (the layout :func:`plan` saw; only their data
    pointers are read)."""
    if _st["respawn"]:
        n, _st["respawn"] = _st["respawn"], 0
        _ensure_workers(n)
    _drv[0](_state[0], desc, a, b, out)


def with_epilogue(desc: np.ndarray, kernel_addr: int, table: np.ndarray) -> np.ndarray:
    """A copy of ``desc`` whose blocks each run an elementwise kernel (llvm_render's calling
    convention: ``kernel(op0, ..., opK-1, meta)``) right after their product, on the thread that
    computed them.  ``table`` (int64, K x 4, C-contiguous) gives each operand's (batch stride, row stride, column stride, offset) in
    its own elements over the descriptor's (batch, M, N) product: the block's part of operand k
    is what the kernel sees; it is copied into the descriptor's own buffer (:func:`_owning`).  Run it
    with :func:`epilogue_caller` (K operand arrays, in order)."""
    table = np.asarray(table)
    k = table.shape[0]
    if not 1 <= k <= MAX_EPI_OPS or table.dtype != np.int64 or table.shape != (k, 4) or \
            not table.flags.c_contiguous:
        raise ValueError(f"gemm_driver.with_epilogue: operand table must be int64 (K, 4), 1 <= K <= "
                         f"{MAX_EPI_OPS}, C-contiguous; got {table.dtype} {table.shape}")
    d, at = _owning(desc, table)
    d[D_EPI], d[D_EMETA], d[D_ENOPS] = int(kernel_addr), at, k
    d.flags.writeable = False
    return d


def _owning(desc: np.ndarray, words: np.ndarray):
    """(a writable copy of ``desc``, the address of a copy of ``words`` right after it in the same buffer): the
    descriptor is a view of that buffer, so whatever holds the descriptor (a call's arguments, a chain of calls)
    holds the words its pointer field reads.  A descriptor pointing into an array its plan kept read freed memory
    when another thread replaced or cleared the plan (a plans dict, a last-call memo) during the call: wrong
    values (a row kernel's operand offsets from a reused block: its input one element off), heap corruption."""
    buf = np.empty(NDESC + words.size, np.int64)
    buf[NDESC:] = words.reshape(-1)
    d = buf[:NDESC]
    d[:] = desc[:NDESC]
    return d, buf[NDESC:].ctypes.data


# the row epilogue's scratch row lives on the running thread's stack (64 KiB: any thread's stack holds it)
MAX_ROW_BYTES = 1 << 16


def with_row_epilogue(desc: np.ndarray, kernel_addr: int, meta: np.ndarray, nops: int) -> np.ndarray:
    """A copy of ``desc`` whose blocks each run a row kernel (llvm_render.render_rows_ir's calling
    convention, ``kernel(op0, ..., opK-1, tmp, meta)``: the operands, the weight and bias last) on
    the block's rows right after their product.  ``meta`` (int64, C-contiguous; copied into the
    descriptor's own buffer, :func:`_owning`) is the launch's meta (llvm_render.row_meta) with B = the descriptor's M: the driver
    sets r0, r1 to the block's rows, numbered ``batch * M + row``.  The blocks must hold whole
    rows (row blocks or whole matrices); ``tmp`` is N elements of 8 bytes on the stack.  Run it with
    :func:`epilogue_caller` (``nops`` operand arrays, in order)."""
    meta = np.asarray(meta)
    if not 1 <= nops <= MAX_EPI_OPS or meta.dtype != np.int64 or meta.ndim != 1 or \
            not 5 <= meta.size <= _META_WORDS or not meta.flags.c_contiguous:
        raise ValueError(f"gemm_driver.with_row_epilogue: meta must be int64, 1-D, 5..{_META_WORDS} words, "
                         f"1 <= nops <= {MAX_EPI_OPS}; got {meta.dtype} {meta.shape}, nops={nops}")
    if desc[D_SPLIT] != 0 and desc[D_NCH] != 1:
        raise ValueError("gemm_driver.with_row_epilogue: the product is cut into column blocks (rows not whole)")
    if meta[2] != desc[D_M] or meta[3] != desc[D_N] or desc[D_N] * 8 > MAX_ROW_BYTES:
        raise ValueError(f"gemm_driver.with_row_epilogue: meta B, N = {int(meta[2])}, {int(meta[3])}; the "
                         f"product's M, N = {int(desc[D_M])}, {int(desc[D_N])} (N at most {MAX_ROW_BYTES // 8})")
    d, at = _owning(desc, meta)
    d[D_EPI], d[D_EMETA], d[D_ENOPS], d[D_EKIND], d[D_EMLEN] = int(kernel_addr), at, nops, 1, meta.size
    d.flags.writeable = False
    return d


def epilogue_caller(nops: int):
    """``f(desc, a, b, out, *operands)``: :func:`run` for a descriptor of :func:`with_epilogue`
    with ``nops`` operands (numpy arrays; their data pointers are what the table's offsets are
    relative to)."""
    entry = _entry(nops)

    def call(desc, a, b, out, *ops):
        if _st["respawn"]:
            n, _st["respawn"] = _st["respawn"], 0
            _ensure_workers(n)
        entry(_state[0], desc, a, b, out, *ops)
    call.entry = entry      # (native_chain.driver: the call without this frame)
    return call


def call_plan(kernel_addr: int, nargs: int, nthreads: int, ntasks: int | None = None, last_stride: int = 0):
    """A descriptor running a native kernel ``kernel(p0, ..., p{nargs-1})`` (pointer arguments: the data of
    the arrays given to :func:`epilogue_caller` ``(nargs)``'s ``call(desc, d, d, d, *arrays)``) as ``ntasks``
    tasks (default ``nthreads``) claimed by ``nthreads`` threads: the caller and the driver's native workers,
    woken as for a product (no Python pool hand-off).  Task ``t`` gets the last pointer advanced by
    ``t * last_stride`` bytes (a row of per-task metas: elementwise chunks); with ``last_stride`` 0 every task
    makes the same call, and the kernel must itself share out its work (claim tiles from an atomic counter,
    so that a thread that starts late, or the caller running a late worker's call after its own, finds
    nothing left).  None when the driver is not available."""
    if not available() or not 1 <= nargs <= MAX_EPI_OPS:
        return None
    d = np.zeros(NDESC, np.int64)
    n = max(int(nthreads), 1)
    d[D_M] = d[D_N] = d[D_K] = d[D_NB] = 1
    d[D_NCH] = d[D_NTASKS] = int(ntasks or n)
    d[D_NWORK] = n - 1
    d[D_EPI], d[D_ENOPS], d[D_EKIND], d[D_EMLEN] = int(kernel_addr), nargs, KIND_CALL, int(last_stride)
    d.flags.writeable = False
    if n > 1:
        _ensure_workers(n - 1)
    return d


def _shutdown():
    st = _state[0]
    if st is not None:
        st[_SHUTDOWN] = 1
        # bump the futex word and wake the sleepers so the loops see the flag and return
        seq = st[_SEQ:_SEQ + 1].view(np.int32)
        seq[0] += 1
        try:
            libc = ctypes.CDLL(None)
            libc.syscall(ctypes.c_long(_SYS_FUTEX[os.uname().machine]), ctypes.c_void_p(seq.ctypes.data),
                         ctypes.c_long(129), ctypes.c_long(2147483647), None, None, ctypes.c_long(0))
        except (OSError, KeyError):
            pass


atexit.register(_shutdown)


def _layout(x: np.ndarray, rows: int, cols: int):
    """(CBLAS transpose, leading dim) of a row-major ``rows x cols`` matrix view, or None."""
    isz = x.itemsize
    s0, s1 = x.strides[-2], x.strides[-1]
    if (s1 == isz or cols <= 1) and s0 % isz == 0 and (s0 >= cols * isz or rows <= 1):
        return NO_TRANS, max(s0 // isz if rows > 1 else cols, cols, 1)
    if (s0 == isz or rows <= 1) and s1 % isz == 0 and (s1 >= rows * isz or cols <= 1):
        return TRANS, max(s1 // isz if cols > 1 else rows, rows, 1)
    return None


_DT = {np.dtype(np.float32): 0, np.dtype(np.float64): 1}


def plan(out: np.ndarray, a: np.ndarray, b: np.ndarray, nthreads: int, blocks: int, split: int | None = None,
         align: int = 16, min_block: int = 16):
    """The descriptor of ``out[...] = a @ b`` (float32 or float64, all one dtype; 2-D, or 3-D with
    one batch dim of any byte stride, 0 for a shared matrix) with each matrix cut into at most
    ``blocks`` blocks of rows (``split=0``) or of columns (1; None: the larger of M, N), none
    under ``min_block``, run by ``nthreads`` threads; None when the layout is not one CBLAS
    takes.  The descriptor depends only on shapes, strides and dtypes: reuse it for arrays
    laid out the same (:func:`run`)."""
    if not available():
        return None
    dt = _DT.get(out.dtype)
    if dt is None or a.dtype != out.dtype or b.dtype != out.dtype:
        return None
    return _plan_2d(out, a, b, nthreads, blocks, split, align, min_block)


def _plan_2d(out, a, b, nthreads, blocks, split, align, min_block):
    M, K = a.shape[-2], a.shape[-1]
    N = b.shape[-1]
    # the blocks read and write where these shapes say: a batch of ``a`` shorter than ``out``'s would
    # be read past its end, a 4-D product computed as its first matrix
    nb = out.shape[0] if out.ndim == 3 else 1
    if not (2 <= out.ndim <= 3 and 2 <= a.ndim <= out.ndim and 2 <= b.ndim <= out.ndim) or \
            b.shape[-2] != K or out.shape[-2:] != (M, N) or \
            any(x.ndim == 3 and x.shape[0] not in (1, nb) for x in (a, b)):
        raise ValueError(f"gemm_driver.plan: out{tuple(out.shape)} = a{tuple(a.shape)} @ b{tuple(b.shape)}: "
                         f"expected 2-D matrices, or 3-D with one batch dim (out's, or 1 in an operand)")
    if out.ndim == 3 and nb > 1 and out.strides[0] == 0:
        raise ValueError("gemm_driver.plan: out has a stride-0 batch dim (every block would write the same matrix)")
    if out.strides[-1] != out.itemsize and N > 1:
        return None
    la = _layout(a, M, K)
    lb = _layout(b, K, N)
    if la is None or lb is None:
        return None
    s0 = out.strides[-2]
    if M > 1 and (s0 % out.itemsize or s0 < N * out.itemsize):
        return None
    ldc = max(s0 // out.itemsize if M > 1 else N, N, 1)
    if out.ndim == 3:
        nb = out.shape[0]
        strides = (a.strides[0] if a.ndim == 3 and a.shape[0] != 1 else 0,
                   b.strides[0] if b.ndim == 3 and b.shape[0] != 1 else 0, out.strides[0])
        if min(strides) < 0:
            return None
    else:
        nb, strides = 1, (0, 0, 0)
    if split is None:
        split = 1 if N > M else 0
    n = N if split else M
    al = align if split else 1
    nch = max(1, min(blocks, n // max(min_block, 1)))
    nch = min(nch, -(-n // al))
    ntasks = nb * nch
    if ntasks > MAX_TASKS or M * N * K == 0:
        return None
    d = np.zeros(NDESC, np.int64)
    d[D_DTYPE:D_NWORK + 1] = (_DT[out.dtype], M, N, K, la[1], lb[1], ldc, la[0], lb[0], nb, strides[0], strides[1],
                              strides[2], split, nch, al, ntasks, max(nthreads - 1, 0))
    d.flags.writeable = False      # shared by every call (and thread) with this layout
    if nthreads > 1:
        _ensure_workers(nthreads - 1)
    return d


def gemm(out: np.ndarray, a: np.ndarray, b: np.ndarray, nthreads: int, blocks: int, split: int | None = None,
         align: int = 16, min_block: int = 16) -> bool:
    """:func:`plan` then :func:`run`; False (nothing written) when there is no plan."""
    d = plan(out, a, b, nthreads, blocks, split, align, min_block)
    if d is None:
        return False
    run(d, a, b, out)
    return True
