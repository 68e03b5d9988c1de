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

from .. import kernel, threads


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
