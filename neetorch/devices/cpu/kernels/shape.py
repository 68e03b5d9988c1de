"""CPU kernels for the shape / data-movement ops (``neetorch/ops/shape.py``).

Pure data movement: numpy's copy machinery (``np.concatenate(out=)``, strided
assignment into a reshaped output) is the fast path; no temporaries where an
``out=`` or a view of the output can be written directly.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform

import numpy as np

from .. import kernel, native_chain, threads


@kernel("cat")
def cat_kernel(backend, outs, ins, attrs):
    out = outs[0]
    if out.size == 0:
        return
    d = attrs["dim"]
    if threads.NUM_THREADS > 1 and CAT_PAR[0] and out.nbytes >= CAT_PAR_BYTES and _cat_native(out, ins, d):
        return
    pos = 0
    # numpy's copy of each piece runs at memcpy speed (its iterator merges the contiguous inner
    # dims into one run per outer index): measured on the shared 2-core box, a decoder's KV-cache
    # append (12 x 512 x 32 + 12 x 1 x 32 float32, both cold) 88 us vs 89 for one memcpy of the same
    # bytes.  Large ones are split across threads (_cat_native).
    for a in ins:  # one strided copy per input, straight into its slot (casting like torch.cat)
        n = a.shape[d]
        if n:
            sl = (slice(None),) * d + (slice(pos, pos + n),)
            np.copyto(out[sl], a, casting="unsafe")
            pos += n


# ---- cat on several threads
# From CAT_PAR_BYTES of output on 2+ threads, a cat whose pieces are runs of whole rows (the dims
# from the cat dim on contiguous in every piece and in the output, the dims before it merging into
# one stride: a KV cache's append along the sequence) copies its pieces as memcpy calls cut into
# tasks (blocks of rows, or of 64-byte-aligned bytes within the rows) that the calling thread and
# gemm_driver's native workers claim: one call job (gemm_driver.call_plan) of a small LLVM kernel
# ``kernel(out, piece_0, ..., piece_{P-1}, task)``, task = (piece, row0, row1, byte0, byte1,
# offset of the piece's rows in the output's, output row stride, piece row stride, memcpy's address).
# The copy is bound by memory bandwidth: measured on the shared 2-core box (12 KV-cache appends of
# 12 x 512 x 32 + 12 x 1 x 32 float32 from cold memory, 15 interleaved rounds, load ~2.4) 63-81 us per
# cat (min; medians 80-89) in 2 tasks per thread vs 83-112 (medians 94-133) for numpy's copies; in
# the whole GPT step no difference stood out of the noise (the worker is often not scheduled there).
CAT_PAR = [os.environ.get("NEE_CAT_PAR", "1") not in ("0", "")]
CAT_PAR_BYTES = int(os.environ.get("NEE_CAT_PAR_BYTES", str(256 << 10)))
CAT_TASKS_PER_THREAD = int(os.environ.get("NEE_CAT_TASKS", "2"))
_TASK_WORDS = 16
_cat_plans: dict = {}
_cat_kernels: dict = {}


def _cat_ir(npieces: int) -> str:
    args = ", ".join(["i8* %dst"] + [f"i8* %s{i}" for i in range(npieces)] + ["i8* %mp"])
    sel = ["  %src0 = bitcast i8* %s0 to i8*"]
    for i in range(1, npieces):
        sel.append(f"  %c{i} = icmp eq i64 %piece, {i}\n  %src{i} = select i1 %c{i}, i8* %s{i}, i8* %src{i - 1}")
    words = ["piece", "r0", "r1", "b0", "b1", "doff", "ds", "ss", "mc"]
    loads = "".join(f"  %{w}.p = getelementptr i64, i64* %m, i64 {i}\n  %{w} = load i64, i64* %{w}.p\n"
                    for i, w in enumerate(words))
    return f"""define void @"kernel"({args}) {{
entry:
  %m = bitcast i8* %mp to i64*
{loads}{chr(10).join(sel)}
  %f = inttoptr i64 %mc to i8* (i8*, i8*, i64)*
  %len = sub i64 %b1, %b0
  %dbase = add i64 %doff, %b0
  br label %c
c:
  %r = phi i64 [ %r0, %entry ], [ %r1n, %b ]
  %more = icmp slt i64 %r, %r1
  br i1 %more, label %b, label %e
b:
  %dro = mul i64 %r, %ds
  %do = add i64 %dro, %dbase
  %sro = mul i64 %r, %ss
  %so = add i64 %sro, %b0
  %dp = getelementptr i8, i8* %dst, i64 %do
  %sp = getelementptr i8, i8* %src{npieces - 1}, i64 %so
  %x = call i8* %f(i8* %dp, i8* %sp, i64 %len)
  %r1n = add i64 %r, 1
  br label %c
e:
  ret void
}}
"""


# NEE_CAT_NT=1 (x86-64 only: the kernel's fence is SSE's): from CAT_NT_BYTES of output the threaded cat's
# copies write with non-temporal stores (no read of the destination's lines before writing them, no eviction
# of the cache's contents by the output).  Off by default: on the ONNX GPT step (12 KV-cache appends of 1.6 MB
# per step) it measured 0.89x of the step's time with memcpy under a load of ~4 from other processes (in-process
# A/B, 25 alternations, min and median) but 0.99-1.00x at load ~1.6 (median of 60-100 paired alternations):
# not a clear win, and an output read soon after (from the cache with memcpy) would come from memory.
_X86 = platform.machine().lower() in ("x86_64", "amd64")
CAT_NT = [os.environ.get("NEE_CAT_NT", "0") not in ("0", "") and _X86]
CAT_NT_BYTES = int(os.environ.get("NEE_CAT_NT_BYTES", str(1 << 20)))
_NT_IR = """declare void @llvm.memcpy.p0i8.p0i8.i64(i8* noalias nocapture writeonly, i8* noalias nocapture readonly, i64, i1)
declare void @llvm.x86.sse.sfence()

define i8* @"kernel"(i8* %dst, i8* %src, i64 %len) {
entry:
  %d = ptrtoint i8* %dst to i64
  %mis = and i64 %d, 63
  %h0 = sub i64 64, %mis
  %head = and i64 %h0, 63
  %need = add i64 %head, 256
  %small = icmp ult i64 %len, %need
  br i1 %small, label %plain, label %go
plain:
  call void @llvm.memcpy.p0i8.p0i8.i64(i8* %dst, i8* %src, i64 %len, i1 false)
  ret i8* %dst
go:
  call void @llvm.memcpy.p0i8.p0i8.i64(i8* %dst, i8* %src, i64 %head, i1 false)
  %body = sub i64 %len, %head
  %nblk = lshr i64 %body, 6
  %db = getelementptr i8, i8* %dst, i64 %head
  %sb = getelementptr i8, i8* %src, i64 %head
  %dv = bitcast i8* %db to <8 x i64>*
  %sv = bitcast i8* %sb to <8 x i64>*
  br label %c
c:
  %i = phi i64 [ 0, %go ], [ %i1, %b ]
  %more = icmp ult i64 %i, %nblk
  br i1 %more, label %b, label %e
b:
  %sp = getelementptr <8 x i64>, <8 x i64>* %sv, i64 %i
  %v = load <8 x i64>, <8 x i64>* %sp, align 1
  %dp = getelementptr <8 x i64>, <8 x i64>* %dv, i64 %i
  store <8 x i64> %v, <8 x i64>* %dp, align 64, !nontemporal !0
  %i1 = add i64 %i, 1
  br label %c
e:
  %done = shl i64 %nblk, 6
  %toff = add i64 %head, %done
  %tail = sub i64 %len, %toff
  %dt = getelementptr i8, i8* %dst, i64 %toff
  %st = getelementptr i8, i8* %src, i64 %toff
  call void @llvm.memcpy.p0i8.p0i8.i64(i8* %dt, i8* %st, i64 %tail, i1 false)
  call void @llvm.x86.sse.sfence()
  ret i8* %dst
}

!0 = !{i32 1}
"""


def _nt_copy() -> int:
    """Address of a memcpy(dst, src, n) whose 64-byte-aligned body is written with non-temporal stores."""
    from .. import llvm_render
    return llvm_render.compile_ir("catnt_" + hashlib.sha1(_NT_IR.encode()).hexdigest()[:16], lambda: _NT_IR)


def _rows_view(x: np.ndarray, d: int):
    """(rows, bytes per row, row byte stride) of x seen as rows of its dims from ``d`` on (those
    C-contiguous), the dims before ``d`` merging into one non-negative stride; None otherwise."""
    isz = x.itemsize
    inner = isz
    for n, st in zip(reversed(x.shape[d:]), reversed(x.strides[d:])):
        if n != 1 and st != inner:
            return None
        inner *= n
    rows, stride = 1, None
    for n, st in zip(reversed(x.shape[:d]), reversed(x.strides[:d])):
        if n == 1:
            continue
        if stride is None:
            stride, nxt = st, st * n
        elif st != nxt:
            return None
        else:
            nxt = st * n
        rows *= n
    if stride is None:
        stride = inner
    if stride < 0:
        return None
    return rows, inner, stride


def _cat_make(out: np.ndarray, ins, d: int):
    from .. import gemm_driver, llvm_render
    pieces = [a for a in ins if a.shape[d]]
    if not 1 <= len(pieces) <= gemm_driver.MAX_EPI_OPS - 2 or any(a.dtype != out.dtype for a in pieces):
        return False
    ov = _rows_view(out, d)
    if ov is None:
        return False
    rows, orow, ds = ov
    views = []
    for a in pieces:
        v = _rows_view(a, d)
        if v is None or v[0] != rows:
            return False
        views.append(v)
    if not gemm_driver.available():
        return False
    total = out.nbytes
    nt = threads.NUM_THREADS
    want = nt * max(CAT_TASKS_PER_THREAD, 1)
    memcpy = _nt_copy() if CAT_NT[0] and total >= CAT_NT_BYTES else \
        ctypes.cast(ctypes.CDLL(None).memcpy, ctypes.c_void_p).value
    tasks, off = [], 0
    for i, (_, rb, ss) in enumerate(views):
        parts = max(1, round(want * rows * rb / total))
        if rows >= parts:
            for r0, r1 in threads.split(rows, parts):
                tasks.append((i, r0, r1, 0, rb, off, ds, ss, memcpy))
        else:
            per = -(-parts // rows)
            for r in range(rows):
                for b0, b1 in threads.split(rb, per, 64):
                    tasks.append((i, r, r + 1, b0, b1, off, ds, ss, memcpy))
        off += rb
    if off != orow or len(tasks) < 2:
        return False
    meta = np.zeros((len(tasks), _TASK_WORDS), np.int64)
    meta[:, :9] = tasks
    meta.flags.writeable = False
    np_ = len(pieces)
    addr = _cat_kernels.get(np_)
    if addr is None:
        text = _cat_ir(np_)
        addr = _cat_kernels[np_] = llvm_render.compile_ir("catcopy_" + hashlib.sha1(text.encode()).hexdigest()[:16],
                                                          lambda: text)
    desc = gemm_driver.call_plan(addr, np_ + 2, min(nt, len(tasks)), len(tasks), meta.strides[0])
    if desc is None:
        return False
    return desc, gemm_driver.epilogue_caller(np_ + 2), meta, [i for i, a in enumerate(ins) if a.shape[d]]


def _cat_native(out: np.ndarray, ins, d: int) -> bool:
    """The cat as one native call job on the driver's threads (see CAT_PAR); False: not taken."""
    if len(ins) == 2:        # (the KV cache's append: its key without a generator)
        a, b = ins
        key = (out.shape, out.strides, out.dtype, d, threads.NUM_THREADS, a.shape, a.strides, a.dtype, b.shape,
               b.strides, b.dtype)
    else:
        key = (out.shape, out.strides, out.dtype, d, threads.NUM_THREADS) + tuple((a.shape, a.strides, a.dtype)
                                                                                 for a in ins)
    plan = _cat_plans.get(key)
    if plan is None:
        plan = _cat_make(out, ins, d)
        if len(_cat_plans) > 1024:
            _cat_plans.clear()
        _cat_plans[key] = plan
    if plan is False:
        return False
    desc, call, meta, idx = plan
    ps = [ins[i] for i in idx]
    # a piece over the output: numpy's copy handles the overlap
    if any(np.may_share_memory(out, a) for a in ps):
        return False
    call(desc, out, out, out, out, *ps, meta)
    return True


def bind_cat(out: np.ndarray, ins, d: int):
    """``f(outs, ins)`` doing what cat_kernel does for arrays of these layouts (shapes, strides, dtypes)
    and this thread count, its native plan looked up once (False: the thread count changed); None where
    cat_kernel would not take the native path.  For a compiled graph's steps, whose output never
    overlaps an input (an arena buffer or a fresh one)."""
    if not isinstance(out, np.ndarray) or out.size == 0 or threads.NUM_THREADS <= 1 or not CAT_PAR[0] or \
            out.nbytes < CAT_PAR_BYTES or not all(isinstance(a, np.ndarray) for a in ins) or \
            any(np.may_share_memory(out, a) for a in ins):
        return None
    plan = _cat_make(out, ins, d)
    if plan is False:
        return None
    desc, call, meta, idx = plan
    nt = threads.NUM_THREADS
    if len(idx) == 2:
        i0, i1 = idx

        def f(outs, ins):
            if threads.NUM_THREADS != nt:
                return False
            o = outs[0]
            call(desc, o, o, o, o, ins[i0], ins[i1], meta)
            return True
        return f

    def f(outs, ins):
        if threads.NUM_THREADS != nt:
            return False
        o = outs[0]
        call(desc, o, o, o, o, *[ins[i] for i in idx], meta)
        return True
    return f


@kernel("flip")
def flip_kernel(backend, outs, ins, attrs):
    np.copyto(outs[0], np.flip(ins[0], attrs["dims"]))


@kernel("roll")
def roll_kernel(backend, outs, ins, attrs):
    # each rolled dim splits into two blocks: copy the 2**k block pairs straight into place
    x, out = ins[0], outs[0]
    nd = x.ndim
    shifts = dict(zip(attrs["dims"], attrs["shifts"]))
    keys = [([], [])]
    for d in range(nd):
        n = x.shape[d]
        s = shifts.get(d, 0)
        new = []
        for ks, kd in keys:
            if s == 0:
                new.append((ks + [slice(None)], kd + [slice(None)]))
            else:
                new.append((ks + [slice(0, n - s)], kd + [slice(s, n)]))
                new.append((ks + [slice(n - s, n)], kd + [slice(0, s)]))
        keys = new
    for ks, kd in keys:
        out[tuple(kd)] = x[tuple(ks)]


@kernel("repeat")
def repeat_kernel(backend, outs, ins, attrs):
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    reps = attrs["repeats"]
    xs = (1,) * (len(reps) - x.ndim) + tuple(x.shape)
    xv = x.reshape(xs) if x.ndim != len(xs) else x
    inter, src_key = [], []
    for r, s in zip(reps, xs):
        inter += [r, s]
        src_key += [None, slice(None)]
    np.copyto(out.reshape(inter), xv[tuple(src_key)])


@kernel("repeat_interleave")
def repeat_interleave_kernel(backend, outs, ins, attrs):
    x, r = ins
    out = outs[0]
    if out.size == 0:
        return
    out[...] = np.repeat(x, r, axis=attrs["dim"])


def _tri_kernel(upper):
    def k(backend, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        r, c = x.shape[-2:]
        m = np.tri(r, c, attrs["diagonal"] - (1 if upper else 0), dtype=bool)
        if upper:
            m = ~m
        out.fill(0)
        np.copyto(out, x, where=m)
    return k


kernel("tril")(_tri_kernel(False))
kernel("triu")(_tri_kernel(True))


@kernel("diag_embed")
def diag_embed_kernel(backend, outs, ins, attrs):
    x, out = ins[0], outs[0]
    out.fill(0)
    n = x.shape[-1]
    if out.size == 0 or n == 0:
        return
    off = attrs["offset"]
    v = np.moveaxis(out, (attrs["dim1"], attrs["dim2"]), (-2, -1))
    rows = np.arange(n) + max(-off, 0)
    cols = np.arange(n) + max(off, 0)
    v[..., rows, cols] = x


_NP_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@kernel("pad")
def pad_kernel(backend, outs, ins, attrs):
    x, out = ins[0], outs[0]
    if out.size == 0:
        return
    w = attrs["widths"]
    mode = attrs["mode"]
    if mode == "constant":
        out.fill(attrs["value"])
        if x.size:
            out[tuple(slice(a, a + n) for (a, _), n in zip(w, x.shape))] = x
        return
    np.copyto(out, np.pad(x, w, mode=_NP_MODE[mode]))


# ---- a KV cache's append fused with the attention product that reads it
# ``present = cat([past, new], -2); ctx = p @ present`` with one query row (a decoder step's
# ``softmax(q k^T) @ v``): the cat's copy of ``past`` and the product run in one pass over it, one
# head per task on the driver's threads (gemm_driver.call_plan): each row of ``past`` is loaded
# once, stored into ``present`` and multiply-added into the head's ``ctx`` row (in L1), instead of
# a copy of the cache and then a second read of ``present`` by the product.  The ``new`` rows are
# copied into ``present`` first (the executor does it where the cat was: they may live in a buffer
# that the memory plan reuses before the product runs); the kernel reads them back from
# ``present``.  float32, rows of a multiple of 8 elements (NEE_JIT_FUSE_KV=0 in jit/executable.py
# turns the fusion off).  The key side (bind_cat_dot) writes the scores ``q . row`` instead, and the
# product's epilogue (scale, softmax) runs on them.  Measured on the ONNX GPT step (bench/onnx_vs_ort.py's
# gpt_step, 12 appends of 12 x 512 x 32 float32; same process, the three variants interleaved, 40 rounds
# of 20 steps, load 3.9-4.6 from other processes): one thread's CPU time 5.25 ms (min) unfused, 4.50
# fused with ordinary stores, 4.36 with non-temporal ones (paired medians 0.92x, 0.86x); two threads'
# wall time 6.59 / 6.05 / 5.62 ms (paired medians 0.98x, 0.83x).
_CATMM_WORDS = 8     # h, P, T, D/8, present head stride, past head stride, x head stride, y head stride
# NEE_KV_NT=0: the fused kernels store ``present`` with ordinary stores (else non-temporal ones on x86-64,
# where ``present`` is 16-byte aligned: no read of its lines before writing them, as nothing reads it again
# in the step; read when a step is bound)
KV_NT = [os.environ.get("NEE_KV_NT", "1") not in ("0", "") and _X86]
# NEE_KV_PREFETCH: the fused KV kernels (_kv_ir, _attn_ir below) prefetch (prefetcht0) the caches' rows this
# many bytes ahead of their loads, one prefetch per 32 bytes read (0: none).  A caller's KV cache is an ordinary
# allocation in 4 KiB pages (numpy asks for huge pages from 4 MiB only; the GPT step's is 64 KiB a head, 786 KB
# a layer): the hardware prefetcher stops at every page boundary, as it did for the packed weights before
# gemv.py's slabs.  Measured (the kernel
# alone on six layers of the GPT step's caches, 12 x 512 x 32 float32, from memory (evicted by a 128 MB copy
# before each call), the variants interleaved, 60 rounds, one thread, load 7.7-9.4 from other processes):
# process CPU time min / median 1.55-1.66 / 2.00-2.24 ms with none, 1.17-1.29 / 1.57-1.67 ms at 4096 (2048
# to 16384 alike, 256-1024 between); two threads 1.58 / 2.44 vs 1.34 / 1.79 ms (CPU time of both).
KV_PREFETCH = [int(os.environ.get("NEE_KV_PREFETCH", "4096"))]


def _row_parts(sx, kind, nts, v8, w, acc, q):
    """The per-row IR pieces shared by the KV-append kernels (_kv_ir) and the one-step attention (_attn_ir): the row
    ``%v{sx}`` stored into present (``nts``: non-temporal halves), and its use: ``kind == "mm"`` adds it times the
    weight ``w[j]`` into the accumulator rows at ``acc`` (the context product), else it is dotted with the query
    rows at ``q`` into ``%acc{sx}`` (a score).  Returns (store, pre, accphi, use)."""
    if nts:
        store = f"""  %lo{sx} = shufflevector {v8} %v{sx}, {v8} undef, <4 x i32> <i32 0, i32 1, i32 2, i32 3>
  %hi{sx} = shufflevector {v8} %v{sx}, {v8} undef, <4 x i32> <i32 4, i32 5, i32 6, i32 7>
  %o4{sx} = bitcast {v8}* %op{sx} to <4 x float>*
  store <4 x float> %lo{sx}, <4 x float>* %o4{sx}, align 16, !nontemporal !0
  %o4h{sx} = getelementptr <4 x float>, <4 x float>* %o4{sx}, i64 1
  store <4 x float> %hi{sx}, <4 x float>* %o4h{sx}, align 16, !nontemporal !0
"""
    else:
        store = f"  store {v8} %v{sx}, {v8}* %op{sx}, align 4\n"
    if kind == "mm":
        pre = f"""  %wp{sx} = getelementptr float, float* {w}, i64 %jj{sx}
  %w{sx} = load float, float* %wp{sx}, align 4
  %w0{sx} = insertelement {v8} undef, float %w{sx}, i32 0
  %ws{sx} = shufflevector {v8} %w0{sx}, {v8} undef, <8 x i32> zeroinitializer
"""
        use = f"""  %ap{sx} = getelementptr {v8}, {v8}* {acc}, i64 %cc{sx}
  %a{sx} = load {v8}, {v8}* %ap{sx}, align 4
  %a1{sx} = call {v8} @llvm.fmuladd.v8f32({v8} %ws{sx}, {v8} %v{sx}, {v8} %a{sx})
  store {v8} %a1{sx}, {v8}* %ap{sx}, align 4
"""
        return store, pre, "", use
    accphi = f"  %acc{sx} = phi {v8} [ zeroinitializer, %jb{sx} ], [ %a1{sx}, %cb{sx} ]\n"
    use = f"""  %qp{sx} = getelementptr {v8}, {v8}* {q}, i64 %cc{sx}
  %qq{sx} = load {v8}, {v8}* %qp{sx}, align 4
  %a1{sx} = call {v8} @llvm.fmuladd.v8f32({v8} %qq{sx}, {v8} %v{sx}, {v8} %acc{sx})
"""
    return store, "", accphi, use


def _kv_ir(kind: str, nt: bool, pf: int = 0) -> str:
    """``kernel(present, past, x, y, task)`` for one head ``h`` (task: _CATMM_WORDS words): each row j of
    ``present[h]`` (``past[h, j]`` for j < P, else the row already in ``present``) is loaded once, stored
    into ``present`` (with ``nt``, non-temporal stores where ``present`` is 16-byte aligned: nothing in the
    step reads it again) and used: ``kind`` "mm": ``y[h] += x[h, j] * row`` (``y`` zeroed first, the
    context of ``p @ v``); "dot": ``y[h, j] = x[h] . row`` (the scores of ``q @ k^T``)."""
    words = ["h", "P", "T", "D8", "ohs", "phs", "xhs", "yhs"]
    loads = "".join(f"  %{w}.p = getelementptr i64, i64* %m, i64 {i}\n  %{w} = load i64, i64* %{w}.p\n"
                    for i, w in enumerate(words))
    v8 = "<8 x float>"
    head = f"""declare {v8} @llvm.fmuladd.v8f32({v8}, {v8}, {v8})
declare float @llvm.vector.reduce.fadd.v8f32(float, {v8})
{"declare void @llvm.x86.sse.sfence()" if nt else ""}
{"declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)" if pf else ""}

define void @"kernel"(i8* %out, i8* %past, i8* %x, i8* %y, i8* %mp) {{
entry:
  %m = bitcast i8* %mp to i64*
{loads}  %rs = shl i64 %D8, 5
  %oo = mul i64 %h, %ohs
  %ob = getelementptr i8, i8* %out, i64 %oo
  %po = mul i64 %h, %phs
  %pb = getelementptr i8, i8* %past, i64 %po
  %xo = mul i64 %h, %xhs
  %xb8 = getelementptr i8, i8* %x, i64 %xo
  %yo = mul i64 %h, %yhs
  %yb8 = getelementptr i8, i8* %y, i64 %yo
  %xf = bitcast i8* %xb8 to float*
  %xv = bitcast i8* %xb8 to {v8}*
  %yf = bitcast i8* %yb8 to float*
  %yv = bitcast i8* %yb8 to {v8}*
"""
    if kind == "mm":
        head += f"""  br label %z
z:
  %zc = phi i64 [ 0, %entry ], [ %zc1, %zb ]
  %zm = icmp slt i64 %zc, %D8
  br i1 %zm, label %zb, label %start
zb:
  %zp = getelementptr {v8}, {v8}* %yv, i64 %zc
  store {v8} zeroinitializer, {v8}* %zp, align 4
  %zc1 = add i64 %zc, 1
  br label %z
"""
    else:
        head += "  br label %start\n"
    if nt:
        head += """start:
  %obi = ptrtoint i8* %ob to i64
  %mis = and i64 %obi, 15
  %al = icmp eq i64 %mis, 0
  br i1 %al, label %j_n, label %j_p
"""
    else:
        head += "start:\n  br label %j_p\n"

    def loop(sx, nts):
        store, pre, accphi, use = _row_parts(sx, kind, nts, v8, "%xf", "%yv", "%xv")
        if kind == "mm":
            end = ""
        else:
            end = f"""  %r{sx} = call reassoc float @llvm.vector.reduce.fadd.v8f32(float 0.0, {v8} %acc{sx})
  %rp{sx} = getelementptr float, float* %yf, i64 %jj{sx}
  store float %r{sx}, float* %rp{sx}, align 4
"""
        pfs = (f"  %pf8{sx} = bitcast {v8}* %vp{sx} to i8*\n  %pfa{sx} = getelementptr i8, i8* %pf8{sx}, i64 {pf}\n"
               f"  call void @llvm.prefetch.p0i8(i8* %pfa{sx}, i32 0, i32 3, i32 1)\n") if pf else ""
        return f"""j{sx}:
  %jj{sx} = phi i64 [ 0, %start ], [ %jj1{sx}, %je{sx} ]
  %jm{sx} = icmp slt i64 %jj{sx}, %T
  br i1 %jm{sx}, label %jb{sx}, label %done
jb{sx}:
  %isp{sx} = icmp slt i64 %jj{sx}, %P
  %ro{sx} = mul i64 %jj{sx}, %rs
  %sp{sx} = getelementptr i8, i8* %pb, i64 %ro{sx}
  %dp{sx} = getelementptr i8, i8* %ob, i64 %ro{sx}
  %src8{sx} = select i1 %isp{sx}, i8* %sp{sx}, i8* %dp{sx}
  %src{sx} = bitcast i8* %src8{sx} to {v8}*
  %dst{sx} = bitcast i8* %dp{sx} to {v8}*
{pre}  br label %c{sx}
c{sx}:
  %cc{sx} = phi i64 [ 0, %jb{sx} ], [ %cc1{sx}, %cb{sx} ]
{accphi}  %cm{sx} = icmp slt i64 %cc{sx}, %D8
  br i1 %cm{sx}, label %cb{sx}, label %je{sx}
cb{sx}:
  %vp{sx} = getelementptr {v8}, {v8}* %src{sx}, i64 %cc{sx}
  %v{sx} = load {v8}, {v8}* %vp{sx}, align 4
{pfs}  %op{sx} = getelementptr {v8}, {v8}* %dst{sx}, i64 %cc{sx}
{store}{use}  %cc1{sx} = add i64 %cc{sx}, 1
  br label %c{sx}
je{sx}:
{end}  %jj1{sx} = add i64 %jj{sx}, 1
  br label %j{sx}
"""
    body = loop("_p", False) + (loop("_n", True) if nt else "")
    tail = "done:\n" + ("  call void @llvm.x86.sse.sfence()\n" if nt else "") + "  ret void\n}\n"
    if nt:
        tail += "\n!0 = !{i32 1}\n"
    return head + body + tail


def bind_cat_matmul(out: np.ndarray, past: np.ndarray, p: np.ndarray, ctx: np.ndarray):
    """``f(out, past, p, ctx)``: ``out[..., :P, :] = past; ctx[...] = p @ out`` (``out``'s last rows
    already written) in one pass over ``past`` for arrays of these layouts and this thread count
    (False: the thread count changed), or None where the fused kernel does not apply: not float32,
    rows not a multiple of 8 elements, more than one query row, a layout whose heads are not one
    stride each (see _rows_view), overlapping arrays, no driver."""
    return _bind_kv(out, past, p, ctx, "mm", (out.shape[:-2] + (1, out.shape[-2]), out.shape[:-2] +
                                                            (1, out.shape[-1])) if out.ndim >= 2 else None)


def bind_cat_dot(out: np.ndarray, past: np.ndarray, q: np.ndarray, s: np.ndarray):
    """``f(out, past, q, s)``: ``out[..., :P, :] = past; s[...] = q @ out^T`` (``out``'s last rows
    already written; ``q`` one row per head, ``s`` its scores) in one pass over ``past``, as
    bind_cat_matmul (the attention's key side); None where it does not apply."""
    return _bind_kv(out, past, q, s, "dot", (out.shape[:-2] + (1, out.shape[-1]), out.shape[:-2] +
                                                               (1, out.shape[-2])) if out.ndim >= 2 else None)


def _bind_kv(out, past, x, y, kind, shapes):
    from .. import gemm_driver
    arrs = (out, past, x, y)
    if shapes is None or not all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in arrs) or \
            out.ndim < 2 or not all(a.ndim == out.ndim for a in arrs) or out.size == 0 or \
            not out.flags.writeable or not y.flags.writeable:
        return None
    # the layout analysis, the metas and the driver's descriptor, per layout (a decode loop whose cache grows
    # binds at new shapes every step, its layers at the same ones: the executor's generic loop)
    nt, nts = threads.NUM_THREADS, KV_NT[0]
    key = (kind, nt, nts, KV_PREFETCH[0], out.shape, out.strides, past.shape, past.strides, x.shape, x.strides,
           y.shape, y.strides)
    plan = _kv_plans.get(key)
    if plan is None:
        plan = _kv_plan(out, past, x, y, kind, shapes, nt, nts)
        if len(_kv_plans) >= 256:
            _kv_plans.clear()
        _kv_plans[key] = plan
    if plan is False or any(np.may_share_memory(a, b) for i, a in enumerate(arrs) for b in arrs[i + 1:]):
        return None
    desc, meta = plan
    call = gemm_driver.epilogue_caller(5)

    def f(out, past, x, y):
        if threads.NUM_THREADS != nt:
            return False
        call(desc, out, out, out, out, past, x, y, meta)
        return True
    return f


_kv_plans: dict = {}


def _kv_plan(out, past, x, y, kind, shapes, nt, nts):
    """(driver descriptor, metas) of _bind_kv for arrays of these layouts, or False."""
    from .. import gemm_driver, llvm_render
    lead = out.shape[:-2]
    T, D = out.shape[-2:]
    P = past.shape[-2]
    if past.shape != lead + (P, D) or x.shape != shapes[0] or y.shape != shapes[1] or \
            D % 8 or not 0 < P < T or x.strides[-1] != 4 or y.strides[-1] != 4:
        return False
    d = out.ndim - 2
    views = [_rows_view(out, d), _rows_view(past, d), _rows_view(x, d + 1), _rows_view(y, d + 1)]
    if any(v is None for v in views):
        return False
    H = views[0][0]
    if any(v[0] != H for v in views) or views[0][1] != T * D * 4 or views[1][1] != P * D * 4:
        return False
    if not gemm_driver.available():
        return False
    meta = np.zeros((H, _CATMM_WORDS), np.int64)
    meta[:, 0] = np.arange(H)
    meta[:, 1:] = (P, T, D // 8, views[0][2], views[1][2], views[2][2], views[3][2])
    meta.flags.writeable = False
    pf = KV_PREFETCH[0]
    addr = _cat_kernels.get((kind, nts, pf))
    if addr is None:
        text = _kv_ir(kind, nts, pf)
        addr = _cat_kernels[(kind, nts, pf)] = llvm_render.compile_ir(
            "kv" + kind + "_" + hashlib.sha1(text.encode()).hexdigest()[:16], lambda: text)
    desc = gemm_driver.call_plan(addr, 5, max(1, min(nt, H)), H, meta.strides[0])
    return False if desc is None else (desc, meta)


# ---- a decoder step's whole attention over its KV caches, one pass per cache, one job
# ``present_k = cat([past_k, new_k], -2); present_v = cat([past_v, new_v], -2);
# ctx = softmax(q @ present_k^T * scale) @ present_v`` with one query row per head (the ONNX GPT step's
# layer): one task per head on the driver's threads (gemm_driver.call_plan) copies the head's key rows
# (past_k's, then new_k's) into present_k while it takes their scores q . row (times scale), runs the
# softmax on the head's scores in a scratch row (in L1: max, exp, sum), then copies the value rows into
# present_v while it adds e_j * row into ctx, divided by the sum of the e_j at the end.  Where the two
# KV fusions above (bind_cat_dot, bind_cat_matmul) run four steps (the new rows' copies, the scores and
# their epilogue, the context: two jobs and four Python launches a layer), this is one launch and one
# job, and the new rows are read where they are (jit/executable.py _fuse_kv_attention on the fast path,
# _generic_kv / _generic_attn in the generic loop, a decode loop whose cache grows; NEE_JIT_FUSE_ATTN=0 turns it
# off).  float32, rows of a multiple of 8 elements; exp: Cephes' expf polynomial (x clamped to [-87, 0]: the
# scores minus their max), within 2 ulp.  Measured on the ONNX GPT step (bench/onnx_vs_ort.py's
# gpt_step; the same process, the variants interleaved, load 8.5-9.6 from other processes): a layer's attention
# steps 336 us (min of 40 calls, one thread: 26 + 12 for the cats, 160 scores, 138 context) vs 258-264 us
# fused (with KV_PREFETCH and the unrolled rows); the whole step's process CPU time, 100 rounds, paired median
# 0.83x on one thread (min 5.52 vs 6.53 ms), 80 rounds 0.90x on two (min 4.89 vs 5.74 ms).  The unrolled rows
# alone (six layers' attention from memory, 80 rounds): one thread min 1.20 vs 1.40 ms, median 1.48 vs 1.67.
_ATTN_WORDS = 16     # P, T, D/8, then the head's byte offsets in present_k, past_k, new_k, present_v,
#                      past_v, new_v, q, ctx, scratch, then scale's float32 bits
_attn_kernels: dict = {}
_attn_plans: dict = {}
_attn_fams: dict = {}     # (lead dims, threads, ...) -> (heads, their indices, driver descriptor, arange)
# rows of up to 8 * ATTN_UNROLL elements run the unrolled kernel (_attn_ir's d8; NEE_KV_ATTN_UNROLL=0: the loop)
ATTN_UNROLL = [int(os.environ.get("NEE_KV_ATTN_UNROLL", "8"))]
# heads per task (NEE_KV_ATTN_GROUP; 1: a task per head): a task's heads are consecutive, so one thread's reads of
# a cache run on from one head's rows into the next's (their prefetches ahead too)
ATTN_GROUP = [int(os.environ.get("NEE_KV_ATTN_GROUP", "1"))]


def _f32_hex(x: float) -> str:
    """An LLVM float literal (a double's hex of the float32 nearest ``x``)."""
    import struct
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(np.float32(x))))[0]


def _splat(x: float) -> str:
    h = _f32_hex(x)
    return "<" + ", ".join(f"float {h}" for _ in range(8)) + ">"


def _attn_ir(nt: bool, pf: int = 0, d8: int = 0) -> str:
    """``kernel(ko, kp, kn, vo, vp, vn, q, ctx, s, task)`` for one head (see the section's comment; with
    ``nt`` the present rows are stored non-temporally where both present heads are 16-byte aligned; ``pf``:
    KV_PREFETCH).  With ``d8`` (rows of 8 d8 elements, 1 <= d8 <= ATTN_UNROLL) a row's vectors are unrolled,
    q and the context's accumulators held in registers (else a loop over the row's vectors, q and the
    context read and written in L1 each row: a store-to-load chain per vector)."""
    words = ["P", "T", "D8", "kohs", "kphs", "knhs", "vohs", "vphs", "vnhs", "qhs", "chs", "shs", "scb"]
    v8 = "<8 x float>"
    loads = "".join(f"  %{w}.p = getelementptr i64, i64* %m, i64 {i}\n  %{w} = load i64, i64* %{w}.p\n"
                    for i, w in enumerate(words))
    bases = "".join(f"  %{b} = getelementptr i8, i8* %{a}, i64 %{w}\n"
                    for a, b, w in (("ko", "kob", "kohs"), ("kp", "kpb", "kphs"), ("kn", "knb", "knhs"),
                                    ("vo", "vob", "vohs"), ("vp", "vpb", "vphs"), ("vn", "vnb", "vnhs"),
                                    ("q", "qb", "qhs"), ("c", "cb", "chs"), ("s", "sb", "shs")))
    head = f"""declare {v8} @llvm.fmuladd.v8f32({v8}, {v8}, {v8})
declare float @llvm.vector.reduce.fadd.v8f32(float, {v8})
declare {v8} @llvm.floor.v8f32({v8})
declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)
{"declare void @llvm.x86.sse.sfence()" if nt else ""}

define void @"kernel"(i8* %ko, i8* %kp, i8* %kn, i8* %vo, i8* %vp, i8* %vn, i8* %q, i8* %c, i8* %s, i8* %mp) {{
entry:
  %mx = alloca float
  store float 0xFFF0000000000000, float* %mx
  %m = bitcast i8* %mp to i64*
{loads}  %rs = shl i64 %D8, 5
{bases}  %qv = bitcast i8* %qb to {v8}*
  %cv = bitcast i8* %cb to {v8}*
  %sf = bitcast i8* %sb to float*
  %sc32 = trunc i64 %scb to i32
  %scale = bitcast i32 %sc32 to float
""" + "".join(f"  %qe{c}p = getelementptr {v8}, {v8}* %qv, i64 {c}\n  %qe{c} = load {v8}, {v8}* %qe{c}p, align 4\n"
              for c in range(d8))
    if nt:
        head += """  %kobi = ptrtoint i8* %kob to i64
  %vobi = ptrtoint i8* %vob to i64
  %obi = or i64 %kobi, %vobi
  %mis = and i64 %obi, 15
  %al = icmp eq i64 %mis, 0
  br i1 %al, label %jk_n, label %jk_p
"""
    else:
        head += "  br label %jk_p\n"

    def loop(sx, kind, nts, start, nxt):
        # rows j of one head: the row (past's for j < P, else new's) loaded once, stored into present, used
        ob, pb, nb = ("%kob", "%kpb", "%knb") if kind == "dot" else ("%vob", "%vpb", "%vnb")
        store, pre, accphi, use = _row_parts(sx, kind, nts, v8, "%sf", "%cv", "%qv")
        if kind == "mm":
            end = ""
        else:
            # the score times scale, stored; the running max (a NaN score leaves it: the row's exps are NaN)
            end = f"""  %r{sx} = call reassoc float @llvm.vector.reduce.fadd.v8f32(float 0.0, {v8} %acc{sx})
  %rsc{sx} = fmul float %r{sx}, %scale
  %rp{sx} = getelementptr float, float* %sf, i64 %jj{sx}
  store float %rsc{sx}, float* %rp{sx}, align 4
  %mo{sx} = load float, float* %mx
  %gt{sx} = fcmp ogt float %rsc{sx}, %mo{sx}
  %mn{sx} = select i1 %gt{sx}, float %rsc{sx}, float %mo{sx}
  store float %mn{sx}, float* %mx
"""
        pfs = (f"  %pf8{sx} = bitcast {v8}* %vp{sx} to i8*\n  %pfa{sx} = getelementptr i8, i8* %pf8{sx}, i64 {pf}\n"
               f"  call void @llvm.prefetch.p0i8(i8* %pfa{sx}, i32 0, i32 3, i32 1)\n") if pf else ""
        return f"""{start}:
  br label %j{sx}
j{sx}:
  %jj{sx} = phi i64 [ 0, %{start} ], [ %jj1{sx}, %je{sx} ]
  %jm{sx} = icmp slt i64 %jj{sx}, %T
  br i1 %jm{sx}, label %jb{sx}, label %{nxt}
jb{sx}:
  %isp{sx} = icmp slt i64 %jj{sx}, %P
  %ro{sx} = mul i64 %jj{sx}, %rs
  %jn{sx} = sub i64 %jj{sx}, %P
  %rn{sx} = mul i64 %jn{sx}, %rs
  %sp{sx} = getelementptr i8, i8* {pb}, i64 %ro{sx}
  %np{sx} = getelementptr i8, i8* {nb}, i64 %rn{sx}
  %dp{sx} = getelementptr i8, i8* {ob}, i64 %ro{sx}
  %src8{sx} = select i1 %isp{sx}, i8* %sp{sx}, i8* %np{sx}
  %src{sx} = bitcast i8* %src8{sx} to {v8}*
  %dst{sx} = bitcast i8* %dp{sx} to {v8}*
{pre}  br label %c{sx}
c{sx}:
  %cc{sx} = phi i64 [ 0, %jb{sx} ], [ %cc1{sx}, %cb{sx} ]
{accphi}  %cm{sx} = icmp slt i64 %cc{sx}, %D8
  br i1 %cm{sx}, label %cb{sx}, label %je{sx}
cb{sx}:
  %vp{sx} = getelementptr {v8}, {v8}* %src{sx}, i64 %cc{sx}
  %v{sx} = load {v8}, {v8}* %vp{sx}, align 4
{pfs}  %op{sx} = getelementptr {v8}, {v8}* %dst{sx}, i64 %cc{sx}
{store}{use}  %cc1{sx} = add i64 %cc{sx}, 1
  br label %c{sx}
je{sx}:
{end}  %jj1{sx} = add i64 %jj{sx}, 1
  br label %j{sx}
"""
    def uloop(sx, kind, nts, start, nxt):
        # loop() with the row's d8 vectors unrolled: q (%qe*) and the context's sums (phis) in registers
        ob, pb, nb = ("%kob", "%kpb", "%knb") if kind == "dot" else ("%vob", "%vpb", "%vnb")
        phis = "".join(f"  %y{c}{sx} = phi {v8} [ zeroinitializer, %{start} ], [ %yn{c}{sx}, %jb{sx} ]\n"
                       for c in range(d8)) if kind == "mm" else ""
        body = []
        if kind == "mm":
            body.append(f"""  %wp{sx} = getelementptr float, float* %sf, i64 %jj{sx}
  %w{sx} = load float, float* %wp{sx}, align 4
  %w0{sx} = insertelement {v8} undef, float %w{sx}, i32 0
  %ws{sx} = shufflevector {v8} %w0{sx}, {v8} undef, <8 x i32> zeroinitializer""")
        for c in range(d8):
            t = f"{c}{sx}"
            body.append(f"""  %vp{t} = getelementptr {v8}, {v8}* %src{sx}, i64 {c}
  %v{t} = load {v8}, {v8}* %vp{t}, align 4
  %op{t} = getelementptr {v8}, {v8}* %dst{sx}, i64 {c}""")
            if pf and c % 2 == 0:
                body.append(f"""  %pf8{t} = bitcast {v8}* %vp{t} to i8*
  %pfa{t} = getelementptr i8, i8* %pf8{t}, i64 {pf}
  call void @llvm.prefetch.p0i8(i8* %pfa{t}, i32 0, i32 3, i32 1)""")
            if nts:
                body.append(f"""  %lo{t} = shufflevector {v8} %v{t}, {v8} undef, <4 x i32> <i32 0, i32 1, i32 2, i32 3>
  %hi{t} = shufflevector {v8} %v{t}, {v8} undef, <4 x i32> <i32 4, i32 5, i32 6, i32 7>
  %o4{t} = bitcast {v8}* %op{t} to <4 x float>*
  store <4 x float> %lo{t}, <4 x float>* %o4{t}, align 16, !nontemporal !0
  %o4h{t} = getelementptr <4 x float>, <4 x float>* %o4{t}, i64 1
  store <4 x float> %hi{t}, <4 x float>* %o4h{t}, align 16, !nontemporal !0""")
            else:
                body.append(f"  store {v8} %v{t}, {v8}* %op{t}, align 4")
            if kind == "mm":
                body.append(f"  %yn{t} = call {v8} @llvm.fmuladd.v8f32({v8} %ws{sx}, {v8} %v{t}, {v8} %y{t})")
            else:
                prev = "zeroinitializer" if c == 0 else f"%a{c - 1}{sx}"
                body.append(f"  %a{t} = call {v8} @llvm.fmuladd.v8f32({v8} %qe{c}, {v8} %v{t}, {v8} {prev})")
        if kind == "dot":
            body.append(f"""  %r{sx} = call reassoc float @llvm.vector.reduce.fadd.v8f32(float 0.0, {v8} %a{d8 - 1}{sx})
  %rsc{sx} = fmul float %r{sx}, %scale
  %rp{sx} = getelementptr float, float* %sf, i64 %jj{sx}
  store float %rsc{sx}, float* %rp{sx}, align 4
  %mo{sx} = load float, float* %mx
  %gt{sx} = fcmp ogt float %rsc{sx}, %mo{sx}
  %mn{sx} = select i1 %gt{sx}, float %rsc{sx}, float %mo{sx}
  store float %mn{sx}, float* %mx""")
        exit_st = "".join(f"  %yq{c}{sx} = getelementptr {v8}, {v8}* %cv, i64 {c}\n"
                          f"  store {v8} %y{c}{sx}, {v8}* %yq{c}{sx}, align 4\n"
                          for c in range(d8)) if kind == "mm" else ""
        nl = "\n"
        return f"""{start}:
  br label %j{sx}
j{sx}:
  %jj{sx} = phi i64 [ 0, %{start} ], [ %jj1{sx}, %jb{sx} ]
{phis}  %jm{sx} = icmp slt i64 %jj{sx}, %T
  br i1 %jm{sx}, label %jb{sx}, label %jx{sx}
jb{sx}:
  %isp{sx} = icmp slt i64 %jj{sx}, %P
  %ro{sx} = mul i64 %jj{sx}, %rs
  %jn{sx} = sub i64 %jj{sx}, %P
  %rn{sx} = mul i64 %jn{sx}, %rs
  %sp{sx} = getelementptr i8, i8* {pb}, i64 %ro{sx}
  %np{sx} = getelementptr i8, i8* {nb}, i64 %rn{sx}
  %dp{sx} = getelementptr i8, i8* {ob}, i64 %ro{sx}
  %src8{sx} = select i1 %isp{sx}, i8* %sp{sx}, i8* %np{sx}
  %src{sx} = bitcast i8* %src8{sx} to {v8}*
  %dst{sx} = bitcast i8* %dp{sx} to {v8}*
{nl.join(body)}
  %jj1{sx} = add i64 %jj{sx}, 1
  br label %j{sx}
jx{sx}:
{exit_st}  br label %{nxt}
"""
    if d8:
        loop = uloop      # noqa: F811  (the unrolled rows)
    lanes = "<" + ", ".join(f"i64 {i}" for i in range(8)) + ">"
    poly = [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1]
    pl = [f"  %p0 = call {v8} @llvm.fmuladd.v8f32({v8} {_splat(poly[0])}, {v8} %r, {v8} {_splat(poly[1])})"]
    for i, cf in enumerate(poly[2:]):
        pl.append(f"  %p{i + 1} = call {v8} @llvm.fmuladd.v8f32({v8} %p{i}, {v8} %r, {v8} {_splat(cf)})")
    pn = len(poly) - 2
    # the softmax on the head's scores: e_j = exp(s_j - max) in place (lanes past T zero), their sum
    soft = f"""sm:
  %mxv = load float, float* %mx
  %mxi = insertelement {v8} undef, float %mxv, i32 0
  %mxs = shufflevector {v8} %mxi, {v8} undef, <8 x i32> zeroinitializer
  %Ti = insertelement <8 x i64> undef, i64 %T, i32 0
  %Ts = shufflevector <8 x i64> %Ti, <8 x i64> undef, <8 x i32> zeroinitializer
  br label %ec
ec:
  %ej = phi i64 [ 0, %sm ], [ %ej1, %eb ]
  %es = phi {v8} [ zeroinitializer, %sm ], [ %es1, %eb ]
  %em = icmp slt i64 %ej, %T
  br i1 %em, label %eb, label %ed
eb:
  %ep = getelementptr float, float* %sf, i64 %ej
  %epv = bitcast float* %ep to {v8}*
  %x0 = load {v8}, {v8}* %epv, align 4
  %x1 = fsub {v8} %x0, %mxs
  %xlo = fcmp olt {v8} %x1, {_splat(-87.0)}
  %x = select <8 x i1> %xlo, {v8} {_splat(-87.0)}, {v8} %x1
  %t = call {v8} @llvm.fmuladd.v8f32({v8} %x, {v8} {_splat(1.44269504088896341)}, {v8} {_splat(0.5)})
  %kf = call {v8} @llvm.floor.v8f32({v8} %t)
  %r1 = call {v8} @llvm.fmuladd.v8f32({v8} %kf, {v8} {_splat(-0.693359375)}, {v8} %x)
  %r = call {v8} @llvm.fmuladd.v8f32({v8} %kf, {v8} {_splat(2.12194440e-4)}, {v8} %r1)
{chr(10).join(pl)}
  %rr = fmul {v8} %r, %r
  %y1 = fadd {v8} %r, {_splat(1.0)}
  %y = call {v8} @llvm.fmuladd.v8f32({v8} %p{pn}, {v8} %rr, {v8} %y1)
  %ki = fptosi {v8} %kf to <8 x i32>
  %kb = add <8 x i32> %ki, <i32 127, i32 127, i32 127, i32 127, i32 127, i32 127, i32 127, i32 127>
  %ks = shl <8 x i32> %kb, <i32 23, i32 23, i32 23, i32 23, i32 23, i32 23, i32 23, i32 23>
  %pw = bitcast <8 x i32> %ks to {v8}
  %e = fmul {v8} %y, %pw
  %eji = insertelement <8 x i64> undef, i64 %ej, i32 0
  %ejs = shufflevector <8 x i64> %eji, <8 x i64> undef, <8 x i32> zeroinitializer
  %idx = add <8 x i64> %ejs, {lanes}
  %in = icmp slt <8 x i64> %idx, %Ts
  %ez = select <8 x i1> %in, {v8} %e, {v8} zeroinitializer
  store {v8} %ez, {v8}* %epv, align 4
  %es1 = fadd {v8} %es, %ez
  %ej1 = add i64 %ej, 8
  br label %ec
ed:
  %sum = call reassoc float @llvm.vector.reduce.fadd.v8f32(float 0.0, {v8} %es)
  br label %z
z:
  %zc = phi i64 [ 0, %ed ], [ %zc1, %zb ]
  %zm = icmp slt i64 %zc, %D8
  br i1 %zm, label %zb, label %zd
zb:
  %zp = getelementptr {v8}, {v8}* %cv, i64 %zc
  store {v8} zeroinitializer, {v8}* %zp, align 4
  %zc1 = add i64 %zc, 1
  br label %z
zd:
  br {"i1 %al, label %jv_n, label %jv_p" if nt else "label %jv_p"}
"""
    fin = f"""fin:
  %si = insertelement {v8} undef, float %sum, i32 0
  %ss = shufflevector {v8} %si, {v8} undef, <8 x i32> zeroinitializer
  br label %f
f:
  %fc = phi i64 [ 0, %fin ], [ %fc1, %fb ]
  %fm = icmp slt i64 %fc, %D8
  br i1 %fm, label %fb, label %done
fb:
  %fp = getelementptr {v8}, {v8}* %cv, i64 %fc
  %fv = load {v8}, {v8}* %fp, align 4
  %fq = fdiv {v8} %fv, %ss
  store {v8} %fq, {v8}* %fp, align 4
  %fc1 = add i64 %fc, 1
  br label %f
done:
{"  call void @llvm.x86.sse.sfence()" if nt else ""}
  ret void
}}
"""
    body = loop("_kp", "dot", False, "jk_p", "sm") + (loop("_kn", "dot", True, "jk_n", "sm") if nt else "")
    body += soft
    body += loop("_vp", "mm", False, "jv_p", "fin") + (loop("_vn", "mm", True, "jv_n", "fin") if nt else "")
    text = head + body + fin
    if nt:
        text += "\n!0 = !{i32 1}\n"
    return text


def _attn_group_ir(text: str) -> str:
    """The one-head kernel of _attn_ir as ``head``, and a ``kernel`` running the task's heads in order: as many
    as its first meta row's word 13 says, their metas one after another."""
    args = "i8* %ko, i8* %kp, i8* %kn, i8* %vo, i8* %vp, i8* %vn, i8* %q, i8* %c, i8* %s"
    text = text.replace('define void @"kernel"(', 'define internal void @"head"(', 1)
    return text + f"""
define void @"kernel"({args}, i8* %mp) {{
entry:
  %m = bitcast i8* %mp to i64*
  %gp = getelementptr i64, i64* %m, i64 13
  %G = load i64, i64* %gp
  br label %l
l:
  %g = phi i64 [ 0, %entry ], [ %g1, %b ]
  %more = icmp slt i64 %g, %G
  br i1 %more, label %b, label %e
b:
  %off = mul i64 %g, {_ATTN_WORDS * 8}
  %mg = getelementptr i8, i8* %mp, i64 %off
  call void @"head"(i8* %ko, i8* %kp, i8* %kn, i8* %vo, i8* %vp, i8* %vn, i8* %q, i8* %c, i8* %s, i8* %mg)
  %g1 = add i64 %g, 1
  br label %l
e:
  ret void
}}
"""


def bind_kv_attention(ko, kp, kn, vo, vp, vn, q, ctx, scale: float):
    """``f(ko, kp, kn, vo, vp, vn, q, ctx)``: ``ko = cat([kp, kn], -2); vo = cat([vp, vn], -2);
    ctx = softmax(q @ ko^T * scale) @ vo`` (``q`` / ``ctx``: one row per head) in one job for arrays of these
    layouts and this thread count (False: the thread count changed, nothing written), or None where the
    kernel does not apply: not float32, rows not a multiple of 8 elements, more than one query row, a head's
    rows not contiguous, a present overlapping another array, no driver.  A ``ctx`` overlapping an input is
    written to a scratch and copied.  As the pairwise KV binders, the overlaps are checked here, for the
    arrays bound (the executor's fast path: the same buffers each call, the presents fresh)."""
    from .. import gemm_driver
    arrs = (ko, kp, kn, vo, vp, vn, q, ctx)
    if not all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in arrs) or ko.ndim < 2 or \
            not all(a.ndim == ko.ndim for a in arrs) or ko.size == 0 or \
            not all(a.flags.writeable for a in (ko, vo, ctx)):
        return None
    if any(np.may_share_memory(arrs[i], a) for i in (0, 3) for j, a in enumerate(arrs) if j != i) or \
            np.may_share_memory(ctx, ko) or np.may_share_memory(ctx, vo):
        return None         # (a present overlapping any other operand)
    tmp = None
    if any(np.may_share_memory(ctx, a) for a in arrs[:7]):
        # ctx over an input (a memory plan's buffer reused once q / the new rows are dead): written to a
        # scratch, copied after the job
        tmp = np.empty(ctx.shape, np.float32)
        arrs = arrs[:7] + (tmp,)
    nt = threads.NUM_THREADS
    key = (nt, KV_NT[0], KV_PREFETCH[0], ATTN_UNROLL[0], ATTN_GROUP[0], float(scale)) + \
        tuple((a.shape, a.strides) for a in arrs)
    plan = _attn_plans.get(key)
    if plan is None:
        plan = _attn_plan(arrs, float(scale), nt, KV_NT[0])
        if len(_attn_plans) >= 256:
            _attn_plans.clear()
        _attn_plans[key] = plan
    if plan is False:
        return None
    desc, meta, H, T8 = plan
    scratch = np.empty((H, T8), np.float32)     # the heads' scores (this binding's: calls may run in parallel)
    call = gemm_driver.epilogue_caller(10)

    if tmp is None:
        def f(ko, kp, kn, vo, vp, vn, q, ctx):
            if threads.NUM_THREADS != nt:
                return False
            call(desc, ko, ko, ko, ko, kp, kn, vo, vp, vn, q, ctx, scratch, meta)
            return True
        f.calls = lambda ko, kp, kn, vo, vp, vn, q, ctx: [
            native_chain.driver(call, desc, ko, ko, ko, ko, kp, kn, vo, vp, vn, q, ctx, scratch, meta)]
    else:
        def f(ko, kp, kn, vo, vp, vn, q, ctx):
            if threads.NUM_THREADS != nt:
                return False
            call(desc, ko, ko, ko, ko, kp, kn, vo, vp, vn, q, tmp, scratch, meta)
            np.copyto(ctx, tmp)
            return True
    return f


def _attn_plan(arrs, scale, nt, nts):
    """(driver descriptor, metas, heads, scratch row length) of bind_kv_attention, or False.  Each head's rows
    must be C-contiguous in every array; the heads (the dims before the last two) may lie at any strides: the
    metas hold each head's byte offsets."""
    from .. import gemm_driver, llvm_render
    ko, kp, kn, vo, vp, vn, q, ctx = arrs
    lead = ko.shape[:-2]
    T, D = ko.shape[-2:]
    P = kp.shape[-2]
    if not 0 < P < T or D % 8 or vo.shape != ko.shape or kp.shape != lead + (P, D) or vp.shape != kp.shape or \
            kn.shape != lead + (T - P, D) or vn.shape != kn.shape or q.shape != lead + (1, D) or ctx.shape != q.shape:
        return False
    if any(a.strides[-1] != 4 or (a.shape[-2] > 1 and a.strides[-2] != 4 * D) for a in arrs):
        return False
    if not gemm_driver.available():
        return False
    # what depends only on the heads' dims and the thread count (the heads' indices, the driver's descriptor) is
    # kept apart: a decode loop whose cache grows binds at a new length every step (the generic loop), and only
    # the metas change with it
    d8 = D // 8 if D // 8 <= ATTN_UNROLL[0] else 0
    G = max(ATTN_GROUP[0], 1)
    fam = (lead, nt, nts, KV_PREFETCH[0], d8, G)
    got = _attn_fams.get(fam)
    if got is None:
        H = int(np.prod(lead, dtype=np.int64))
        idx = np.indices(lead, dtype=np.int64).reshape(len(lead), H).T.copy()   # (each head's index in lead dims)
        G = min(G, H)
        kk = (nts, KV_PREFETCH[0], d8, G > 1)
        addr = _attn_kernels.get(kk)
        if addr is None:
            text = _attn_ir(nts, KV_PREFETCH[0], d8)
            if G > 1:
                text = _attn_group_ir(text)
            addr = _attn_kernels[kk] = llvm_render.compile_ir(
                "kvattn_" + hashlib.sha1(text.encode()).hexdigest()[:16], lambda: text)
        ntasks = -(-H // G)
        desc = gemm_driver.call_plan(addr, 10, max(1, min(nt, ntasks)), ntasks, G * _ATTN_WORDS * 8)
        if desc is None:
            return False
        if len(_attn_fams) >= 64:
            _attn_fams.clear()
        counts = np.zeros(H, np.int64)
        counts[::G] = [min(G, H - t) for t in range(0, H, G)]
        got = _attn_fams[fam] = (H, idx, desc, np.arange(H, dtype=np.int64), counts)
    H, idx, desc, heads, counts = got
    T8 = -(-T // 8) * 8
    meta = np.zeros((H, _ATTN_WORDS), np.int64)
    meta[:, 0:3] = (P, T, D // 8)
    if lead:
        meta[:, 3:11] = idx @ np.array([a.strides[:-2] for a in arrs], np.int64).T
    meta[:, 11] = heads * (T8 * 4)
    meta[:, 12] = int(np.array(scale, np.float32).view(np.int32))
    meta[:, 13] = counts
    meta.flags.writeable = False
    return desc, meta, H, T8
