"""One-row products against frozen weights: ``y (1, N) = x (1, K) @ W (K, N)`` streaming a packed W.

A decoder's single-token step spends most of its time in products with one row of activations and
a weight read from memory once per step (the ONNX GPT step: 24 of them, 42.5 MB): the product is
bound by how fast the weight streams in, not by flops.  Read in its own layout, a row-major W split
across threads by columns gives each thread K short runs (a block of each row) that the hardware
prefetcher streams badly, and split by rows it needs partial sums added after; a column-major W
(a ``.T`` view) splits well by columns but its dot products reload x.  Here a weight the compiler
froze (``winograd.freeze``: ONNX initializers, ``@nee.jit`` frozen constants, promised never to
change) is re-laid out once into column panels of ``P`` columns (``Wp[j, k, :] = W[k, j P : j P + P]``;
64 floats / 32 doubles, 256 bytes a row; the last columns one narrower panel of whole 64-byte vectors,
zero-padded), cached with the weight (``winograd.weights``, gone with its owner).  The kernel (LLVM IR,
compiled once per dtype and panel width into llvm_render's disk cache) runs panel by panel: for each k it
broadcasts x[k] and adds x[k] * Wp[j, k, :] into (up to) four vector accumulators held in registers, so
each weight byte is loaded once with full-width loads in memory order and nothing else is read or written
but x (from L1) and y once per panel (a software prefetch ``PREFETCH`` bytes ahead is off by default: the
hardware's own streams do better).  The packed
copies live in slabs backed by 2 MiB pages (see SLAB_BYTES: in 4 KiB pages the hardware prefetcher stops
at every page boundary, and half the bandwidth was lost).  On 2+ threads a product of ``PAR_BYTES`` and
up is cut into tasks (runs of consecutive full panels, each one contiguous stretch of Wp: one stream per
thread) that the calling thread and gemm_driver's native workers claim: one call job
(``gemm_driver.call_plan``), published by the kernel itself from the step's call (as kernels/linalg.py's
few-row kernel does), no Python hand-off; the narrower last panel is a second call on the calling thread.

Taken for float32/float64 products whose output has one row in all (``(..., 1, N)``, every batch dim
1) with a 2-D frozen ``b`` in any layout, unit-stride rows of ``a`` and ``out``, and ``out`` overlapping
neither input, the panels at most MAX_PAD wider than ``b``; :func:`caller` returns None otherwise and the
product takes linalg's paths (a bound step keeps linalg's path for another ``b`` it is given).  The
packed copy costs the weight's size in memory again (the original stays: other steps may read it),
up to MAX_PACKED_BYTES in all.  ``NEE_GEMV=0`` turns the path off.

Measured on the shared 2-core box (AMD EPYC, load 3-4.6 from other processes; same process, the
variants interleaved, min of 20-30 rounds) on the ONNX GPT step's 24 weights (42.5 MB, column-major
as the session lays them out, so from memory): one thread's CPU time 1.50 ms (28.4 GB/s) vs 3.45 ms
(12.3 GB/s) for linalg's few-row kernel; two threads' wall time 1.36-1.47 ms (29-31 GB/s) vs
1.84-3.49; the whole step (bench/onnx_vs_ort.py gpt_step) one thread 3.80 vs 5.16 ms, two threads
3.10 vs 4.62 ms.
"""
from __future__ import annotations

import hashlib
import os
import sys
import threading
import weakref

import numpy as np

from .. import threads

_ON = [os.environ.get("NEE_GEMV", "1") not in ("0", "")]
# panel width in elements: 256 bytes a row of a panel (four 64-byte vectors), both dtypes
_P = {np.dtype(np.float32): 64, np.dtype(np.float64): 32}
_T = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
# split across threads from this many bytes of weight (a smaller one is read in the hand-off's time)
PAR_BYTES = int(os.environ.get("NEE_GEMV_PAR_BYTES", str(256 << 10)))
# tasks per thread: a thread that runs late (preempted on the shared cores) holds up one task at most
TASKS_PER_THREAD = int(os.environ.get("NEE_GEMV_TASKS", "4"))
# descriptor words (int64): K, N, panels [j0, j1) to compute, then a threaded product's top descriptor:
# 1, the address of gemm_driver's state cell, of the driver's call-job descriptor, of the tasks' descriptors;
# then the first output column (y0: the panels' columns are y0 + j P ...; N counts from y0)
_D_K, _D_N, _D_J0, _D_J1, _D_THR, _D_CELL, _D_DRV, _D_TASKS, _D_Y0 = range(9)
_D_WORDS = 16            # 128 bytes: stacked task descriptors on their own cache lines
# a weight whose packed panels would be this much wider than it is keeps linalg's paths (N under one
# vector, or just above one: the panels' padding would be read as weight)
MAX_PAD = 0.125

# software prefetch this many bytes ahead of the loads, one per 64-byte line (0: none).  Session 10 measured
# 4096 ~5% faster than none on one thread with the slabs' huge pages (10-20% before them); session 13 (load
# 7-11, the same process, variants interleaved, 40-50 rounds, one thread's CPU time, the GPT step's 24 weights,
# 42.5 MB) measured none faster than every distance and hint tried: min 2.83-3.23 ms vs 3.32-3.87 (4096, t0),
# 3.42 (1024), 3.02-3.79 (8192), 3.23 (16384), 3.25-3.32 (4096, t1/t2), 4.01 (4096, nta); with none the
# product streams at a streaming sum's rate (15.0 vs 15.1 GB/s, same load); the whole step (A/B in
# alternating fresh processes, one thread's CPU time, 12 rounds at load 7-10) median of the mins 5.4-5.6 vs
# 6.2-6.3 ms; with the slabs in 4 KiB pages (no madvise) none was faster too (min 2.39 vs 2.84 ms (4096),
# 2.79 (8192)).  (Presumably the prefetches, into L1, hold miss buffers the L2's hardware streams would use.)
# Not re-measured on a quiet box: NEE_GEMV_PREFETCH=4096 restores the old kernel.
PREFETCH = int(os.environ.get("NEE_GEMV_PREFETCH", "0"))
# its locality hint (llvm.prefetch: 3 prefetcht0, 0 prefetchnta): t0 / nta / t2 were within noise on the
# whole step (one thread's CPU time, interleaved, 25-40 rounds)
PREFETCH_LOCALITY = int(os.environ.get("NEE_GEMV_PREFETCH_LOCALITY", "3"))
# packed copies live past this many bytes in all: further weights keep linalg's paths (the copies double
# the memory of the weights they stand for)
MAX_PACKED_BYTES = int(float(os.environ.get("NEE_GEMV_MAX_MB", "4096")) * (1 << 20))
_live = [0]              # bytes of packed copies alive
_fns: dict = {}          # (dtype, panel width) -> (llvm_call caller, machine-code address)
stats = {"calls_bound": 0, "packed": 0}


def _ir(t: str, P: int, pf: int = 0, loc: int = 3) -> str:
    """LLVM IR of ``kernel(y, x, wp, desc)``: y[y0 + j P : y0 + j P + P] = x[0:K] @ Wp[j] for panels j in
    [desc[2], desc[3]) (columns from N on, the last panel's padding, not stored), or, with desc[4] set,
    the threaded product's call job published to gemm_driver (the tasks' descriptors have desc[4] = 0)."""
    from .. import gemm_driver
    L = 64 // (4 if t == "float" else 8)     # elements per 64-byte vector
    V = f"<{L} x {t}>"
    nv = P // L
    fm = "reassoc nsz arcp contract"         # (not nnan/ninf: NaN and inf propagate)
    zero = "zeroinitializer"
    acc_phis = "\n".join(f"  %a{i} = phi {V} [ {zero}, %pan.b ], [ %b{i}, %kb ]" for i in range(nv))
    loads = "\n".join(
        f"  %wq{i} = getelementptr inbounds {t}, {t}* %wrow, i64 {i * L}\n"
        f"  %wv{i}p = bitcast {t}* %wq{i} to {V}*\n"
        f"  %wv{i} = load {V}, {V}* %wv{i}p, align 64\n"
        f"  %m{i} = fmul {fm} {V} %xs, %wv{i}\n"
        f"  %b{i} = fadd {fm} {V} %a{i}, %m{i}" for i in range(nv))

    def stores(q, base):
        # the accumulators stored as nv vectors from ``base`` (an element pointer's type and value, indices before
        # the element's), value names prefixed with ``q``
        return "\n".join(
            f"  %{q}q{i} = getelementptr inbounds {base}, i64 {i * L}\n"
            f"  %{q}v{i}p = bitcast {t}* %{q}q{i} to {V}*\n"
            f"  store {V} %a{i}e, {V}* %{q}v{i}p, align 4" for i in range(nv))
    full_stores = stores("y", f"{t}, {t}* %yrow")
    tmp_stores = stores("t", f"[{P} x {t}], [{P} x {t}]* %tmp, i64 0")
    pfs = "".join(
        f"  %pf{i} = getelementptr inbounds {t}, {t}* %wrow, i64 {pf // (64 // L) + i * L}\n"
        f"  %pf{i}c = bitcast {t}* %pf{i} to i8*\n"
        f"  call void @llvm.prefetch.p0i8(i8* %pf{i}c, i32 0, i32 {loc}, i32 1)\n" for i in range(nv)) if pf else ""
    words = "".join(f"  %w{i}.p = getelementptr i64, i64* %d, i64 {i}\n  %dw{i} = load i64, i64* %w{i}.p\n"
                    for i in range(_D_WORDS))
    # with desc[4] set: the call job published (the same mechanism as linalg's few-row kernel)
    publish = gemm_driver.publish_ir(f"%dw{_D_THR}", f"%dw{_D_CELL}", f"%dw{_D_DRV}", f"%dw{_D_TASKS}", wp="%wpp")
    return f"""
define void @"kernel"(i8* noalias %yp, i8* noalias %xp, i8* noalias %wpp, i8* noalias %dp) {{
entry:
  %tmp = alloca [{P} x {t}], align 64
  %d = bitcast i8* %dp to i64*
{words}  %y = bitcast i8* %yp to {t}*
  %x = bitcast i8* %xp to {t}*
  %w = bitcast i8* %wpp to {t}*
  %K = add i64 %dw{_D_K}, 0
  %N = add i64 %dw{_D_N}, 0
{publish}  %KP = mul nsw i64 %K, {P}
  br label %pan.c
pan.c:
  %j = phi i64 [ %dw{_D_J0}, %compute ], [ %j1, %pan.n ]
  %jm = icmp slt i64 %j, %dw{_D_J1}
  br i1 %jm, label %pan.b, label %done
pan.b:
  %woff = mul nsw i64 %j, %KP
  %wpan = getelementptr inbounds {t}, {t}* %w, i64 %woff
  %kz = icmp sgt i64 %K, 0
  br i1 %kz, label %kb, label %kz.e
kb:
  %k = phi i64 [ 0, %pan.b ], [ %k1, %kb ]
{acc_phis}
  %xq = getelementptr inbounds {t}, {t}* %x, i64 %k
  %xv = load {t}, {t}* %xq
  %xi = insertelement {V} undef, {t} %xv, i32 0
  %xs = shufflevector {V} %xi, {V} undef, <{L} x i32> zeroinitializer
  %ko = mul nsw i64 %k, {P}
  %wrow = getelementptr inbounds {t}, {t}* %wpan, i64 %ko
{pfs}{loads}
  %k1 = add nsw i64 %k, 1
  %km = icmp slt i64 %k1, %K
  br i1 %km, label %kb, label %ke
kz.e:
  br label %ke
ke:
{chr(10).join(f"  %a{i}e = phi {V} [ %b{i}, %kb ], [ {zero}, %kz.e ]" for i in range(nv))}
  %n0 = mul nsw i64 %j, {P}
  %yc0 = add nsw i64 %n0, %dw{_D_Y0}
  %yrow = getelementptr inbounds {t}, {t}* %y, i64 %yc0
  %rem = sub nsw i64 %N, %n0
  %full = icmp sge i64 %rem, {P}
  br i1 %full, label %st.f, label %st.p
st.f:
{full_stores}
  br label %pan.n
st.p:
{tmp_stores}
  br label %cp.c
cp.c:
  %c = phi i64 [ 0, %st.p ], [ %c1, %cp.b ]
  %cm = icmp slt i64 %c, %rem
  br i1 %cm, label %cp.b, label %pan.n
cp.b:
  %tsrc = getelementptr inbounds [{P} x {t}], [{P} x {t}]* %tmp, i64 0, i64 %c
  %tval = load {t}, {t}* %tsrc
  %tdst = getelementptr inbounds {t}, {t}* %yrow, i64 %c
  store {t} %tval, {t}* %tdst
  %c1 = add nsw i64 %c, 1
  br label %cp.c
pan.n:
  %j1 = add nsw i64 %j, 1
  br label %pan.c
done:
  ret void
}}
declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)
"""


def _kernel(dt: np.dtype, P: int):
    """(caller, address) of the kernel for ``dt`` and panels of ``P`` columns, compiled on first use."""
    got = _fns.get((dt, P))
    if got is None:
        from .. import llvm_call, llvm_render
        text = _ir(_T[dt], P, PREFETCH, PREFETCH_LOCALITY)
        key = "gemvp_" + hashlib.sha1(text.encode()).hexdigest()[:16]
        addr = llvm_render.compile_ir(key, lambda: text, True)
        got = _fns[(dt, P)] = (llvm_call.make(addr, 4), addr)
    return got


def _widths(N: int, dt: np.dtype):
    """(full panels, their width P, the last panel's width: N's remainder rounded up to whole vectors,
    0 when none)."""
    P = _P[dt]
    L = 64 // dt.itemsize
    full, r = divmod(N, P)
    return full, P, -(-r // L) * L


# Packed weights live in slabs of SLAB_BYTES backed by 2 MiB pages where the kernel allows it
# (madvise(MADV_HUGEPAGE): transparent huge pages in "madvise" mode).  A weight of a few hundred KB
# allocated on its own sits in 4 KiB pages, and the hardware prefetcher stops at each 4 KiB page
# boundary: the GPT step's 24 packed weights, 42.5 MB, streamed at 16.9 GB/s on one thread each in its
# own allocation vs 26.8 GB/s in one slab (2 threads 15.7 vs 31.1 GB/s; same process, interleaved, min of
# 30 rounds, load ~3.8).  numpy itself asks for huge pages only from 4 MiB per allocation.  A weight of
# more than a quarter of a slab gets its own (2 MiB-aligned, advised) allocation.  A slab is freed with
# the last packed weight in it.
SLAB_BYTES = int(os.environ.get("NEE_GEMV_SLAB_MB", "32")) << 20
_HUGE = 2 << 20
_MADV_HUGEPAGE = 14
_slab = [None, 0]        # the current slab (uint8, 2 MiB aligned), bytes used
_slab_lock = threading.Lock()
_madvise = []


def _advise_huge(buf: np.ndarray) -> bool:
    """madvise(MADV_HUGEPAGE) over ``buf`` (2 MiB aligned, a multiple of 2 MiB long); False where it
    cannot be asked (not Linux, no libc) or is refused."""
    if not _madvise:
        f = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes
                f = ctypes.CDLL(None, use_errno=True).madvise
                f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                f.restype = ctypes.c_int
            except (OSError, AttributeError):
                f = None
        _madvise.append(f)
    f = _madvise[0]
    return f is not None and f(buf.ctypes.data, buf.nbytes, _MADV_HUGEPAGE) == 0


def _huge_bytes(n: int) -> np.ndarray:
    """n bytes (rounded up to 2 MiB), 2 MiB aligned, advised to be backed by huge pages."""
    n = -(-n // _HUGE) * _HUGE
    raw = np.empty(n + _HUGE, np.uint8)
    off = -raw.ctypes.data % _HUGE
    buf = raw[off:off + n]
    _advise_huge(buf)
    return buf


def _aligned(n: int, dt: np.dtype) -> np.ndarray:
    """n elements of ``dt``, 64-byte aligned (the kernel's aligned vector loads), from a slab."""
    nbytes = -(-n * dt.itemsize // 64) * 64
    if nbytes > SLAB_BYTES // 4:
        return _huge_bytes(nbytes)[:n * dt.itemsize].view(dt)
    with _slab_lock:
        slab, used = _slab
        if slab is None or used + nbytes > slab.nbytes:
            slab, used = _huge_bytes(SLAB_BYTES), 0
        _slab[0], _slab[1] = slab, used + nbytes
    return slab[used:used + n * dt.itemsize].view(dt)


def pack(w: np.ndarray, tag=None) -> np.ndarray:
    """The packed weight, 64-byte aligned, flat: ``full`` panels (full, K, P) with panel[j, k, c] =
    w[k, j P + c], then the last columns as one narrower panel (K, Pt), zero past column N (see _widths;
    ``tag``: winograd.weights' cache tag, unused)."""
    K, N = w.shape
    full, P, Pt = _widths(N, w.dtype)
    wp = _aligned(K * (full * P + Pt), w.dtype)
    _live[0] += wp.nbytes
    weakref.finalize(wp, _release, wp.nbytes)
    if full:
        wp[:full * K * P].reshape(full, K, P)[...] = w[:, :full * P].reshape(K, full, P).transpose(1, 0, 2)
    if Pt:
        tail = wp[full * K * P:].reshape(K, Pt)
        r = N - full * P
        tail[:, :r] = w[:, full * P:]
        tail[:, r:] = 0
    stats["packed"] += 1
    return wp


def _pack_capped(w: np.ndarray, tag):
    """pack(w, tag), or None past MAX_PACKED_BYTES (winograd.weights then keeps None for this weight)."""
    if _live[0] + w.nbytes > MAX_PACKED_BYTES:
        return None
    return pack(w, tag)


def _release(n: int) -> None:
    _live[0] -= n


def _layout_ok(out: np.ndarray, a: np.ndarray, b: np.ndarray):
    """(K, N) when ``out = a @ b`` is a one-row product this kernel takes (layout and dtypes; not
    whether b is frozen), else None."""
    dt = out.dtype
    if dt not in _P or a.dtype != dt or b.dtype != dt or b.ndim != 2 or a.ndim < 2 or out.ndim < 2:
        return None
    K, N = b.shape
    if K == 0 or N == 0 or a.shape[-1] != K or out.shape[-1] != N or a.size != K or out.size != N:
        return None
    if not (b.flags.c_contiguous or b.flags.f_contiguous):
        return None
    isz = dt.itemsize
    if (K > 1 and a.strides[-1] != isz) or (N > 1 and out.strides[-1] != isz):
        return None
    return K, N


def caller(out: np.ndarray, a: np.ndarray, b: np.ndarray, count: bool = True):
    """``g(out, a, b)`` computing ``out = a @ b`` through the packed kernel for arrays of these layouts and
    this thread count, ``b`` this frozen weight (another ``b`` goes to linalg.matmul_into); None when the
    product is not one this kernel takes (see the module docs).  For callers whose ``out`` overlaps neither
    input (a compiled graph's steps: linalg._rows_caller; linalg._rows_product's unbound calls with ``count``
    False: not a step's binding in ``stats``)."""
    if not _ON[0]:
        return None
    kn = _layout_ok(out, a, b)
    if kn is None or np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return None
    from . import winograd
    if not winograd.is_frozen(b):
        return None
    dt = out.dtype
    full, P, Pt = _widths(kn[1], dt)
    if full * P + Pt > (1 + MAX_PAD) * kn[1]:
        return None
    wp = winograd.weights(b, ("gemv", P, b.strides), _pack_capped)
    if wp is None:
        return None
    g = _bind(wp, kn[0], kn[1], b)
    if not count:
        stats["calls_bound"] -= 1
    return g


def _bind(wp: np.ndarray, K: int, N: int, wb: np.ndarray | None):
    """``g(out, a, b)`` running the kernel on packed ``wp`` (:func:`pack`; see :func:`caller`; ``wb`` None:
    every ``b`` is taken as the weight packed, the tests' direct use).  The full panels run as one call
    (threaded from PAR_BYTES), the narrower last panel as a second one."""
    from .. import gemm_driver
    from .linalg import matmul_into
    dt = wp.dtype
    npan, P, Pt = _widths(N, dt)
    nt = threads.NUM_THREADS
    tail = None
    if Pt:
        fnt, _ = _kernel(dt, Pt)
        wt = wp[npan * K * P:]
        dtl = np.zeros(_D_WORDS, np.int64)
        dtl[:_D_J1 + 1] = (K, N - npan * P, 0, 1)
        dtl[_D_Y0] = npan * P
        dtl.flags.writeable = False
        tail = (fnt, wt, dtl)
    if not npan:
        fnt, wt, dtl = tail

        def g0(out, a, b):
            fnt(out, a, wt, dtl)
        return _guard(g0, wb, (wp, dtl, tail), matmul_into, calls=lambda out, a: [(fnt, (out, a, wt, dtl), None)])
    fn, addr = _kernel(dt, P)
    desc = np.zeros(_D_WORDS, np.int64)
    desc[:_D_J1 + 1] = (K, npan * P if Pt else N, 0, npan)
    top = desc
    ntasks = min(npan, nt * max(TASKS_PER_THREAD, 1))
    if nt > 1 and K * N * dt.itemsize >= PAR_BYTES and ntasks > 1 and gemm_driver.available():
        # (the top descriptor's buffer is kept alive by the closure)
        job = gemm_driver.published_job(desc, threads.split(npan, ntasks), _D_WORDS, _D_J0, _D_THR, addr, nt)
        top = desc if job is None else job[0]
    top.flags.writeable = False
    if tail is None:
        def g0(out, a, b):
            fn(out, a, wp, top)

        def calls(out, a):
            return [(fn, (out, a, wp, top), None)]
        if wb is not None:
            # the guard and the call in one closure (a decoder step makes 24 of these calls: each Python
            # frame on the way is paid per step)
            wkey = _wkey(wb)

            def g(out, a, b):
                if b is wb or (b.__array_interface__["data"][0], b.shape, b.strides) == wkey:
                    fn(out, a, wp, top)
                else:
                    matmul_into(out, a, b)
            return _guard(g0, None, (wp, top, tail), matmul_into, g, calls, wb)
        return _guard(g0, wb, (wp, top, tail), matmul_into, calls=calls)
    fnt, wt, dtl = tail

    def g0(out, a, b):
        fn(out, a, wp, top)
        fnt(out, a, wt, dtl)
    return _guard(g0, wb, (wp, top, tail), matmul_into,
                  calls=lambda out, a: [(fn, (out, a, wp, top), None), (fnt, (out, a, wt, dtl), None)])


def _wkey(wb):
    return (wb.__array_interface__["data"][0], wb.shape, wb.strides)


def weight_guard(g0, wb, other):
    """``g(out, a, b)``: ``g0`` for the weight ``wb`` (the same array object, or the same data, shape and strides),
    ``other`` for another ``b`` (products bound to a frozen weight's packed copy: here and linalg's packed GEMM)."""
    wkey = _wkey(wb)

    def g(out, a, b):
        if b is wb or (b.__array_interface__["data"][0], b.shape, b.strides) == wkey:
            g0(out, a, b)
        else:
            other(out, a, b)
    return g


def _guard(g0, wb, info, other, g=None, calls=None, gwb=None):
    """g0 for the weight ``wb`` packed, ``other`` (linalg.matmul_into) for another ``b`` (None: every ``b``);
    ``g``: that guard already made (for the weight ``gwb``).  ``calls(out, a)``: g0's native calls (``g.calls(out,
    a, b)``, native_chain: for ``b`` the bound weight array itself)."""
    stats["calls_bound"] += 1
    if g is None:
        g = g0 if wb is None else weight_guard(g0, wb, other)
    else:
        wb = gwb
    g.gemv = info      # (the tests read the packed weight and the split: (packed, top descriptor, tail))
    if calls is not None:
        g.calls = (lambda out, a, b: calls(out, a)) if wb is None else \
            (lambda out, a, b: calls(out, a) if b is wb else None)
    return g

