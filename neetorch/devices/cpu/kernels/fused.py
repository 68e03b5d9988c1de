"""CPU renderers of the fused patterns the JIT decides on (jit/fusion.py).

Registered as ``kernels["compile:<pattern>"]``: ``compiler(backend, op)`` returns
``(run, sources)`` where ``run(outs, ins)`` takes numpy arrays in the order of the
composite node's outputs/inputs, and ``sources`` are ``(name, source)`` pairs for
``explain()``.

* ``reduction_prologue``: one LLVM IR row kernel (``_single_pass_ir``: the group's expressions
  over a row, then the row's softmax / norm passes, ``llvm_render.render_rows_ir``) at every size
  where the IR renderer covers the group.  Otherwise (and with ``NEE_CPU_RENDERER=numba``):
  for data that fits in L2 (``SINGLE_PASS_BYTES``), the group's
  kernel then the reduction's kernel (cheap to compile, the data stays in cache between the
  two).  Larger: one generated Numba kernel walks the rows: the group's
  expressions (the pieces of the elementwise renderer, ``elementwise._group_pieces``) over
  one row, into the row's outputs or, when nothing else needs it, a row scratch that stays
  in L1; then the row kernel of softmax / log_softmax / layer_norm / rms_norm
  (``kernels/nn.py``) normalizes that row.  One read of the inputs, one write of each
  output.
* ``matmul_epilogue``: the GEMM (BLAS, ``kernels/linalg.matmul_into``; for ``conv2d`` the
  conv kernel) writes into a reused scratch buffer and the epilogue (a fused group or a reduction prologue) runs on it right
  after, while it is in cache.  (Not in place into the output: a kernel whose input and
  output are the same memory fails LLVM's runtime alias check and runs its scalar loop.)
  Products above ``BLOCK_BYTES`` are done in blocks of rows, each block's epilogue run
  while the block is still in cache.
* In-block epilogues (``_InBlockEpilogue``, ``_InBlockRows``; default, ``NEE_EPILOGUE_IN_BLOCK=0``
  turns them off): where the product has a GEMM-driver plan (``gemm_driver``, the float32/64
  layouts ``linalg._make_plan`` takes), the epilogue's LLVM kernel is handed to the driver, which
  runs it on each block of the product right after that block's BLAS call, on the thread that
  computed it: one native call for product + epilogue, the epilogue split across the driver's
  threads with the product (the separate launch ran on the calling thread alone below
  ``threads.PARALLEL_THRESHOLD`` elements), each block's epilogue while the block is in cache.
  Elementwise groups (any operand layout whose dims merge into the driver's (batch, rows, cols)
  view) use the elementwise kernel's own IR (its per-layout variant); softmax / log_softmax /
  layer_norm / rms_norm prologues use their IR row kernel where the driver's blocks hold whole
  rows (batched products: whole matrices; products cut into row blocks).  Anything else runs the
  paths above.  Measured on the shared 2-core box (1 thread, thread CPU time, min of 30
  interleaved rounds): the transformer block of asv_benchmarks/bench_jit.py 3.41 ms vs 3.63
  before (attention's scores + mask + softmax step 156 vs 228 us: the softmax of each matrix runs
  while it is in L1/L2).
* A product whose weight is frozen and that ``linalg._pk_caller`` takes (float32, 16+ rows; panels of 32
  columns on AVX-512, 16 on AVX2, the last one zero-padded) runs its packed-panel kernel instead (faster than BLAS there: see linalg.py), the
  epilogue after it as its own bound launch (``_packed_bind``, ``_late_bound``; bound steps only: a step's
  first, unbound run keeps the path above).  Where that product is cut into tasks (2+ threads) an
  elementwise epilogue runs in each task instead, on the task's rows and columns right after it computed
  them, in one driver call (``_InBlockEpilogue.bind_packed``, linalg.pk_with_epilogue); a row prologue
  (softmax / norms) likewise, the tasks then being blocks of whole rows (``_InBlockRows.bind_packed``,
  linalg.pk_with_row_epilogue); NEE_PACKED_EPILOGUE_IN_TASK=0 turns both off.  Bit-exact with the
  separate launch.  The long products linalg.PK_AVX2_RULE otherwise leaves to BLAS run packed where an
  elementwise epilogue follows (FF1's bias + GELU), cut into tasks of about linalg.PK_EPI_TILE_BYTES of
  output on any thread count, each task's epilogue reading its tiles from L2 (``_packed_bind(tiles=True)``,
  linalg.PK_EPI_TILES; NEE_PK_EPI_TILES=0 turns it off), where BLAS's blocks (1.5 MB of a 1024x1536 product
  on one thread) had left it.  Measured (2 threads,
  wall, in-process interleaved, min of 15-30 rounds, loaded box: ratios only) on a frozen
  x + Linear(GELU(Linear(x) + b)) block: 600x256 / 1024 hidden 0.97x the time, 256x384 / 1536 0.94x,
  128x256 / 1024 1.01x.
* A batch of small products with a row prologue (attention's scores, scale and softmax on (B, H, S, S), whose
  batch dims the driver cannot merge) that linalg's batched packed kernel takes runs it with the row kernel
  on each matrix's rows right after that matrix (``_InBlockRows.bind_batched``, linalg.bpk_with_row_epilogue;
  bound steps; NEE_MATMUL_BATCHED_PACKED=0 or NEE_PACKED_EPILOGUE_IN_TASK=0 turn it off).
"""
from __future__ import annotations

import functools
import operator
import os
import threading
from operator import is_ as _is

import numpy as np

from .. import codegen, kernel, layout, native_chain, threads
from .. import elementwise as ew
from .linalg import matmul_into
from .nn import _merge

_NB = {"float32": "float32", "float64": "float64"}


def _render_rows(name, in_dt, out_dt, body, results, bcast, src_k, src_ext, helper, reduce_call):
    """Source of ``rows``: for each row, the group's expressions (``body``/``results`` from the
    elementwise renderer's pieces) over the row, then the row reduction on it.

    Every operand is addressed per row as ``off + a*sa + b*sb`` (row r = a*B + b) with its own
    column stride; inputs whose column stride is not 1 are gathered into a row buffer first, so
    the one inner loop is unit-stride (vectorized).  ``bcast[i]``: input i is constant along a
    row (its last dim is 1), loaded once per row.  The normalized value ``src`` goes to a row
    scratch when nothing else needs it.
    """
    nin, nout = len(in_dt), len(out_dt)
    outs = [f"o{j}" for j in range(nout)]
    ins = [f"x{i}" for i in range(nin)]
    cdt = out_dt[src_k]
    sig = ("void(" + ", ".join([f"{ew._NB_TYPE[d]}[::1]" for d in out_dt + in_dt] + [f"{cdt}[::1]"] * 3 +
                               ["int64[:, ::1]", "int64", "int64", "int64", "int64", "float64", "boolean",
                                "boolean"]) + ")")
    L = [f"# neetorch reduction prologue: {name}({', '.join(in_dt)}) -> ({', '.join(out_dt)})",
         "import math", "import numpy as np", "from numba import njit",
         "from neetorch.devices.cpu.scalar import *",
         f"from neetorch.devices.cpu.kernels.nn import {helper}", "",
         f'@njit("{sig}", cache=True, nogil=True, error_model="numpy", fastmath={{"contract"}})',
         f"def rows({', '.join(outs + ins)}, dst, w, bb, lay, r0, r1, B, N, eps, fa, fb):",
         "    # fa, fb: (log, safe) for softmax, (rms, -) for the norms: runtime flags, so the row helpers'",
         "    # compiled (cached) specializations are reused instead of new literal-typed ones",
         "    # lay[k] = (stride of a, stride of b, column stride, offset) of operand k (outputs, then inputs)",
         "    zb = np.zeros(2, dst.dtype)",
         "    zb[1] = 1",
         "    none = np.empty(0, np.float64)"]
    if not src_ext:
        L.append(f"    tmp = np.empty(N, np.{cdt})")
    for i in range(nin):
        if not bcast[i]:
            L.append(f"    g{i} = np.empty(N, x{i}.dtype)")
    L += ["    for r in range(r0, r1):",
          "        a = r // B",
          "        b = r - a * B"]
    for k, v in enumerate(outs + ins):
        L.append(f"        p{v} = lay[{k}, 3] + a * lay[{k}, 0] + b * lay[{k}, 1]")
    for j, o in enumerate(outs):
        if j == src_k and not src_ext:
            L.append(f"        {o}v = tmp")
        else:
            L.append(f"        {o}v = {o}[p{o}:p{o} + N]")
    for i, x in enumerate(ins):
        k = nout + i
        if bcast[i]:
            L.append(f"        v{i} = {x}[p{x}]")
        else:
            L += [f"        if lay[{k}, 2] == 1:",
                  f"            xv{i} = {x}[p{x}:p{x} + N]",
                  "        else:",
                  f"            cs = lay[{k}, 2]",
                  "            for i in range(N):",
                  f"                g{i}[i] = {x}[p{x} + i * cs]",
                  f"            xv{i} = g{i}"]
    L.append("        for i in range(N):")
    for i in range(nin):
        if not bcast[i]:
            L.append(f"            v{i} = xv{i}[i]")
    L += ["            " + st for st in body]
    for j, (o, r) in enumerate(zip(outs, results)):
        L.append(f"            {o}v[i] = np.{out_dt[j]}({r})")
    L.append(f"        srow = {outs[src_k]}v")
    L.append("        " + reduce_call)
    return sig, "\n".join(L) + "\n"


_SOFTMAX = "_softmax_row1(srow, dst[r * N:(r + 1) * N], fa, fb, zb[0], zb[1])"
_NORM = "_norm_rows(srow, dst, w, bb, r, r + 1, -r * N, N, 1, 1, N, 0, 1, eps, fa, none, none)"
_MODES = {"softmax": 0, "log_softmax": 1, "layer_norm": 2, "rms_norm": 3}


def _ab_layout(a: np.ndarray, shape, N: int):
    """(view, (stride of a, stride of b, column stride, offset), flat) of ``a`` broadcast to
    ``shape`` with rows r = a*B + b (B = shape[-2]); None when the leading dims do not merge."""
    v = a if a.shape == tuple(shape) else np.broadcast_to(a, shape)
    f, off, st = layout.flat(v)
    nd = len(shape)
    if N != shape[-1]:       # layer_norm over several trailing dims: rows of N elements
        k = nd
        tot = 1
        while k > 0 and tot < N:
            k -= 1
            tot *= shape[k]
        inner = _merge(list(zip(shape[k:], st[k:])))
        if tot != N or inner is None:
            return None
        lead = list(zip(shape[:k], st[:k]))
        cs = inner[1]
    else:
        lead = list(zip(shape[:-1], st[:-1]))
        cs = st[-1]
    if not lead:
        return f, (0, 0, cs, off)
    bdim = lead[-1]
    am = _merge(lead[:-1])
    if am is None:
        return None
    return f, (am[1], bdim[1], cs, off)


def _same_address(x: np.ndarray, a: np.ndarray) -> bool:
    """Whether the flat array ``x`` a kernel is given starts at ``a``'s data: then any array of
    ``a``'s layout can be passed in its place (the trampolines read only the data pointer)."""
    return isinstance(a, np.ndarray) and x.__array_interface__["data"][0] == a.__array_interface__["data"][0]


_tls = threading.local()


def _scratch(slot: str, n: int, dtype) -> np.ndarray:
    """A reused per-thread buffer of ``n`` elements: one per (slot, dtype), shared by every fused
    kernel of the thread (they run one after the other), grown to the largest request.  Slots:
    "acc" (a product before its epilogue), "row" (a normalized value needed nowhere else)."""
    d = getattr(_tls, "bufs", None)
    if d is None:
        d = _tls.bufs = {}
    key = (slot, np.dtype(dtype))
    buf = d.get(key)
    if buf is None or buf.size < n:
        buf = d[key] = np.empty(max(n, 1), dtype)
    return buf[:n]


# below this size (the normalized value's bytes at the graph's shapes) a reduction prologue runs
# as two launches over cache-resident data, the group's kernel (the elementwise renderer's, ~0.1 s
# cold) then the reduction's own kernel, instead of one generated single-pass Numba kernel
# (~2-5 s cold here): the data stays in L2 between the two, so the single pass would only save
# a launch
SINGLE_PASS_BYTES = 1 << 20


def _operand_positions(op, g, red):
    """Where the fused node's inputs feed the group (``pos_g``), the reduction's weight and bias
    (positions or None), and the reduction's eps."""
    pos_g = [op.inputs.index(a) for a in g.inputs]
    rest = [op.inputs.index(a) for a in red.inputs[1:]]
    has_w = bool(red.attrs.get("has_weight", False))
    has_b = bool(red.attrs.get("has_bias", False))
    pos_w = rest[0] if has_w else None
    pos_b = rest[1 if has_w else 0] if has_b else None
    return pos_g, pos_w, pos_b, float(red.attrs.get("eps", 0.0))


def _two_launches(op, mode, safe):
    from .nn import norm_launch, softmax_launch
    g, red = op.group.op, op.red
    kern, src = ew.compile_group(g)
    kouts = list(g.outputs)
    ext_pos = {o: j for j, o in enumerate(op.outputs)}
    pos_g, pos_w, pos_b, eps = _operand_positions(op, g, red)
    npdt = red.outputs[0].dtype.np

    def run(outs, ins):
        dst = outs[-1]
        if dst.size == 0:
            return
        bufs = []
        for o in kouts:
            if o in ext_pos:
                bufs.append(outs[ext_pos[o]])
            else:   # the normalized value, needed nowhere else: a reused scratch
                bufs.append(_scratch("row", dst.size, npdt).reshape(dst.shape))
        ew.run_strided(kern, bufs, [ins[p] for p in pos_g])
        x = bufs[kouts.index(op.src)]
        if mode < 2:
            softmax_launch(x, dst, dst.ndim - 1, mode == 1, safe)
        else:
            N = red.attrs["n"]
            w = ins[pos_w] if pos_w is not None else None
            b = ins[pos_b] if pos_b is not None else None
            norm_launch(x, dst, w, b, dst.size // N, 1, 1, N, True, eps, mode == 3)

    return run, [(op.name, src)]


def _rows_shape(shape, N):
    """(R, B): rows r = a*B + b of ``shape`` normalized over its trailing N elements."""
    R = 1
    for d in shape:
        R *= d
    R //= N
    k = len(shape) - 1
    tot = shape[-1]
    while tot < N:
        k -= 1
        tot *= shape[k]
    return R, (shape[k - 1] if k >= 1 else 1)


def _single_pass_ir(op, mode, safe, dt, pieces):
    """``(run, sources)`` of the single-pass reduction prologue as one LLVM IR row kernel
    (llvm_render.render_rows_ir: the group's expressions over a row, then the row
    normalization; ~0.1-0.2 s cold, so it is used at every size), or None where the IR
    renderer does not cover the group (the Numba kernels then run)."""
    from .nn import _dummy, ir_rows, run_rows
    in_dt, out_dt, body, results, bcast, src_k, src_ext = pieces
    g, red = op.group.op, op.red
    kouts = list(g.outputs)
    ext_pos = {o: j for j, o in enumerate(op.outputs)}
    if any(o not in ext_pos and o is not op.src for o in kouts):
        return None
    pro = (tuple(in_dt), tuple(out_dt), tuple(body), tuple(results), tuple(bool(x) for x in bcast), src_k, src_ext)
    k = ir_rows(list(_MODES)[mode], dt, safe, pro)
    if k is None:
        return None
    pos_g, pos_w, pos_b, eps = _operand_positions(op, g, red)
    npdt = np.dtype(dt)
    dummy = np.zeros(1, npdt)
    ones = {}

    def prepare(outs, ins):
        """The launch's (arrays, lays, back copies, w, b, R, B, N, threads, sources): ``sources[k]`` says
        where kernel argument k comes from: ("o", j) output j, ("i", p) input p (the same memory, from
        the same address), None (a scratch or constant of this launch's own: ``arrays`` / ``w`` / ``b``
        hold it) or False (a copy of an operand, or a view of it from another address)."""
        dst = outs[-1]
        shape = dst.shape
        N = shape[-1] if mode < 2 else red.attrs["n"]
        R, B = _rows_shape(shape, N)
        arrays, lays, back, srcs = [], [], [], []
        nd = len(shape)

        def operand(a, out, src):
            if a.flags.c_contiguous and (a.flags.writeable or not out):
                # the common layouts, without _ab_layout's general derivation: the full shape
                # (row r at r*N), or one row's N elements shared by every row
                if a.shape == shape:
                    arrays.append(a.reshape(-1))
                    lays.append((B * N, N, 0))
                    srcs.append(src)
                    return
                if not out and a.size == N and a.ndim <= nd and a.shape == shape[nd - a.ndim:]:
                    arrays.append(a.reshape(-1))
                    lays.append((0, 0, 0))
                    srcs.append(src)
                    return
            r = _ab_layout(a, shape, N)
            if r is None or r[1][2] != 1:
                if out:    # a layout the kernel does not address: written to a copy, copied back
                    t = np.empty(shape, a.dtype)
                    back.append((a, t))
                    a = t
                else:
                    a = np.ascontiguousarray(np.broadcast_to(a, shape))
                src = False
                r = _ab_layout(a, shape, N)
            arrays.append(r[0])
            lays.append((r[1][0], r[1][1], r[1][3]))
            srcs.append(src if src and _same_address(r[0], a) else False)

        for o in kouts:
            if o in ext_pos:
                operand(outs[ext_pos[o]], True, ("o", ext_pos[o]))
            else:           # the normalized value, needed nowhere else: the kernel's row scratch
                arrays.append(dummy)
                lays.append((0, 0, 0))
                srcs.append(None)
        for i, p in enumerate(pos_g):
            a = ins[p]
            if bcast[i]:
                if a.size == 1:     # a scalar (e.g. attention's scale): element 0 for every row
                    arrays.append(a.reshape(-1))
                    lays.append((0, 0, 0))
                    srcs.append(("i", p) if _same_address(arrays[-1], a) else False)
                    continue
                src = ("i", p)
                r = _ab_layout(a, shape, N)
                if r is None:
                    r = _ab_layout(np.ascontiguousarray(np.broadcast_to(a, shape)), shape, N)
                    src = False
                arrays.append(r[0])
                lays.append((r[1][0], r[1][1], r[1][3]))
                srcs.append(src if src and _same_address(r[0], a) else False)
            else:
                operand(a, False, ("i", p))
        operand(dst, True, ("o", len(outs) - 1))
        wb = []
        if mode >= 2:
            w = np.ascontiguousarray(ins[pos_w], dtype=npdt).reshape(-1) if pos_w is not None else None
            b = np.ascontiguousarray(ins[pos_b], dtype=npdt).reshape(-1) if pos_b is not None else None
            if w is None or b is None:
                if N not in ones:
                    ones[N] = (np.ones(N, npdt), np.zeros(N, npdt))
                w = ones[N][0] if w is None else w
                b = ones[N][1] if b is None else b
            for x, p in ((w, pos_w), (b, pos_b)):
                wb.append(None if p is None else ("i", p) if _same_address(x, ins[p]) else False)
        else:
            w = b = None
            wb = [None, None]
        nt = threads.NUM_THREADS if R * N >= threads.PARALLEL_THRESHOLD and R > 1 else 1
        return arrays, lays, back, w, b, R, B, N, nt, srcs + wb

    def run(outs, ins):
        if outs[-1].size == 0:
            return
        arrays, lays, back, w, b, R, B, N, nt, _ = prepare(outs, ins)
        run_rows(k, arrays, R, B, N, eps, lays, nt, w, b, None if src_ext else npdt)
        for a, t in back:
            np.copyto(a, t)

    def bind(outs, ins):
        """``f(outs, ins)`` running this launch on arrays of these layouts (and thread count) with the
        layout analysis, the meta arrays and the row scratches made once; None when some operand is
        read from a copy (then each call must copy afresh: ``run``)."""
        if outs[-1].size == 0:
            return None
        arrays, lays, back, w, b, R, B, N, nt0, srcs = prepare(outs, ins)
        if back:
            return None
        dt = arrays[-1].dtype
        w = _dummy(dt) if w is None else w
        b = _dummy(dt) if b is None else b
        if any(s_ is False for s_ in srcs):
            return None          # read from a copy: its values would be frozen
        consts = arrays + [w, b]
        # each kernel argument's place in outs + ins + [this launch's own arrays]
        own = [c for s_, c in zip(srcs, consts) if s_ is None]
        nout, nin = len(outs), len(ins)
        idx, j = [], 0
        for s_ in srcs:
            if s_ is None:
                idx.append(nout + nin + j)
                j += 1
            else:
                idx.append(s_[1] if s_[0] == "o" else nout + s_[1])
        pick = operator.itemgetter(*idx)
        chunks = threads.split(R, nt0) if nt0 > 1 and R > 1 else [(0, R)]
        from .. import llvm_render
        launches = [(np.empty(N, dt) if not src_ext else _dummy(dt), llvm_render.row_meta(c[0], c[1], B, N, eps, lays))
                    for c in chunks]
        nt_now = threads.NUM_THREADS

        def f(outs, ins):
            if threads.NUM_THREADS != nt_now or len(outs) != nout or len(ins) != nin:
                return False
            args = pick([*outs, *ins, *own])
            if len(launches) == 1:
                tmp, meta = launches[0]
                k(*args, tmp, meta)
            else:
                threads.run_parallel(lambda tm: k(*args, tm[0], tm[1]), launches)
            return True
        if len(launches) == 1:
            def calls(outs, ins):
                if len(outs) != nout or len(ins) != nin:
                    return None
                return [(k, (*pick([*outs, *ins, *own]), *launches[0]), None)]
            f.calls = calls
        return f
    run.bind = bind

    from .. import llvm_render
    src = (f"# single-pass reduction prologue {op.name}: LLVM IR row kernel (llvm_render.render_rows_ir), "
           f"{red.name} {dt} after the group (its Numba form, then the IR):\n" +
           ew.render_group(g.name, in_dt, out_dt, body, results) + "\n" +
           llvm_render.row_ir_text(list(_MODES)[mode], dt, safe, pro))
    # what a GEMM driver running this prologue on its blocks needs (_InBlockRows)
    mname = list(_MODES)[mode]
    run.rows_spec = {"key": llvm_render.kernel_key("rows_" + mname, (mname, dt, bool(safe), pro), "rows"),
                     "mode": mode, "kouts": kouts, "ext_pos": ext_pos, "pos_g": pos_g, "pos_w": pos_w,
                     "pos_b": pos_b, "eps": eps, "bcast": tuple(bool(x) for x in bcast), "n": red.attrs.get("n")}
    return run, [(op.name, src)]


def compile_reduction_prologue(backend, op):
    grp, red = op.group, op.red
    g = grp.op
    dt = red.outputs[0].dtype.name
    if dt not in _NB or any(v.dtype.name == "float16" for v in list(g.inputs) + list(g.outputs)):
        return None
    kouts = list(g.outputs)
    src_k = kouts.index(op.src)
    src_ext = op.src in op.outputs
    mode = _MODES[red.name]
    safe = bool(red.attrs.get("safe", False)) if mode < 2 else False
    shape = tuple(op.src.shape)
    nbytes = np.dtype(dt).itemsize
    for d in shape:
        nbytes *= d if isinstance(d, int) else 1 << 20
    in_dt, out_dt, body, results = ew._group_pieces(g)
    N = shape[-1] if mode < 2 else red.attrs["n"]
    # inputs constant along a row: the normalized extent of their shape is all ones
    bcast = []
    for v in g.inputs:
        vs = (1,) * (len(shape) - len(v.shape)) + tuple(v.shape)
        n = 1
        k = len(vs)
        tot = 1
        while k > 0 and tot < N:
            k -= 1
            tot *= shape[k]
            n *= vs[k]
        bcast.append(n == 1 and N > 1)
    res = _single_pass_ir(op, mode, safe, dt, (in_dt, out_dt, body, results, bcast, src_k, src_ext))
    if res is not None:
        return res
    if nbytes < SINGLE_PASS_BYTES:
        return _two_launches(op, mode, safe)
    call = _SOFTMAX if mode < 2 else _NORM
    fa, fb = (mode == 1, safe) if mode < 2 else (mode == 3, False)
    _, src = _render_rows(g.name + "+" + red.name, in_dt, out_dt, body, results, bcast, src_k, src_ext,
                          "_softmax_row1" if mode < 2 else "_norm_rows", call)
    drive = codegen.load_kernel("fused_rows", src, attr="rows")
    pos_g, pos_w, pos_b, eps = _operand_positions(op, g, red)
    ext_pos = {o: j for j, o in enumerate(op.outputs)}
    npdt = np.dtype(dt)
    dummy = np.empty(1, npdt)

    def run(outs, ins):
        dst = outs[-1]
        shape = dst.shape
        if dst.size == 0:
            return
        N = shape[-1] if mode < 2 else red.attrs["n"]
        R = dst.size // N
        k = len(shape) - 1           # rows r = a*B + b: b runs over the dim before the normalized ones
        tot = shape[-1]
        while tot < N:
            k -= 1
            tot *= shape[k]
        B = shape[k - 1] if k >= 1 else 1
        ops = [outs[ext_pos[o]] if o in ext_pos else None for o in kouts] + [ins[p] for p in pos_g]
        lay = np.empty((len(ops), 4), np.int64)
        flats = []
        for k, a in enumerate(ops):
            if a is None:   # the row scratch inside the kernel
                flats.append(dummy)
                lay[k] = (0, 0, 1, 0)
                continue
            r = _ab_layout(a, shape, N)
            if r is None:
                r = _ab_layout(np.ascontiguousarray(np.broadcast_to(a, shape)), shape, N)
            flats.append(r[0])
            lay[k] = r[1]
        w = np.ascontiguousarray(ins[pos_w], dtype=npdt).reshape(-1) if pos_w is not None else np.ones(N, npdt)
        b = np.ascontiguousarray(ins[pos_b], dtype=npdt).reshape(-1) if pos_b is not None else np.zeros(N, npdt)
        fd = dst.reshape(-1)
        nt = threads.NUM_THREADS if R * N >= threads.PARALLEL_THRESHOLD and R > 1 else 1
        threads.run_parallel(lambda c: drive(*flats, fd, w, b, lay, c[0], c[1], B, N, eps, fa, fb), threads.split(R, nt))

    return run, [(op.name, src)]


# products above this many bytes are computed (and their epilogue run) in blocks of rows
BLOCK_BYTES = 8 << 20


def compile_matmul_epilogue(backend, op):
    from ....jit.fusion import FusedElementwise, ReductionPrologue
    epi = op.epilogue
    rows_spec = None
    if isinstance(epi.op, FusedElementwise):
        kern, src = ew.compile_group(epi.op)
        sources = [(op.name, src)]

        def run_epi(outs, ins):
            ew.run_strided(kern, list(outs), ins)
    elif isinstance(epi.op, ReductionPrologue):
        res = compile_reduction_prologue(backend, epi.op)
        if res is None:
            return None
        run_epi, sources = res
        rows_spec = getattr(run_epi, "rows_spec", None)
        sources = [(op.name, s) for _, s in sources]
    else:
        return None
    acc = op.acc
    einputs = list(epi.inputs)
    npdt = acc.dtype.np
    blockable = isinstance(epi.op, FusedElementwise)

    def scratch(shape):
        # the product goes to a reused scratch buffer, not into the epilogue's output: a kernel
        # whose input and output are the same memory fails LLVM's runtime alias check and runs
        # its scalar loop (several times slower for gelu)
        n = 1
        for d in shape:
            n *= d
        return _scratch("acc", n, npdt).reshape(shape)

    if op.matmul.name != "matmul":
        # another producer (conv2d): its own kernel writes the scratch, then the epilogue
        prod = op.matmul
        pkern = backend.kernels[prod.name]
        npin = len(prod.inputs)
        # conv2d + a bias / residual / relu chain: inside the conv kernel (kernels/conv_epilogue.py)
        inside = None
        if prod.name == "conv2d" and CONV_EPILOGUE[0]:
            from .conv_epilogue import plan as _conv_plan
            inside = _conv_plan(prod, epi, acc, einputs)

        def run_other(outs, ins):
            if outs[0].size == 0:
                return
            if inside is not None and inside(outs, ins):
                return
            from ....ops.registry import Meta
            mshape = prod.op.infer([Meta(a.shape, v.dtype) for a, v in zip(ins[:npin], prod.inputs)],
                                   prod.attrs)[0].shape
            buf = scratch(tuple(mshape))
            pkern(backend, [buf], list(ins[:npin]), prod.attrs)
            rest = iter(ins[npin:])
            run_epi(outs, [buf if v is acc else next(rest) for v in einputs])
        apart = _conv_then_epilogue_binder(prod, acc, einputs, npin, scratch, run_epi,
                                           lambda outs, eins: _bind_strided(kern, outs, eins)) \
            if prod.name == "conv2d" and blockable else None
        if inside is not None:
            # (jit/executable.py's _bound_runner: the conv's launch bound per layout, conv_epilogue's bind; where
            # it binds nothing (an activation other than relu on a conv that is not depthwise), the two apart)
            def bind_other(outs, ins):
                if outs[0].size == 0:
                    return None
                f = inside.bind(outs, ins)
                return apart(outs, ins) if f is None and apart is not None else f
            run_other.bind = bind_other
        elif apart is not None:
            run_other.bind = apart
        return run_other, sources

    native = None
    if IN_BLOCK_EPILOGUE[0] and op.matmul.name == "matmul":
        if blockable:
            native = _InBlockEpilogue(kern, acc, einputs, len(op.outputs), scratch)
        elif rows_spec is not None:
            native = _InBlockRows(rows_spec, acc, einputs, len(op.outputs), scratch)
    if native is not None and not native.ok:
        native = None

    def run(outs, ins):
        a, b = ins[0], ins[1]
        if outs[0].size == 0:
            return
        if native is not None and native(outs, ins):
            return
        if b.ndim == 2:
            mshape = a.shape[:-1] + (b.shape[-1],)
        else:
            mshape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        rest = iter(ins[2:])
        if blockable and b.ndim == 2 and a.ndim >= 2 and outs[0].nbytes > BLOCK_BYTES:
            if _blocked(mshape, a, b, outs, [None if v is acc else next(rest) for v in einputs], run_epi, scratch):
                return
            rest = iter(ins[2:])
        buf = scratch(mshape)
        matmul_into(buf, a, b)
        run_epi(outs, [buf if v is acc else next(rest) for v in einputs])

    # where each epilogue input comes from: None the product, else its place among the node's inputs
    eidx, j = [], 2
    for v in einputs:
        eidx.append(None if v is acc else j)
        j += v is not acc
    epi_bind = getattr(run_epi, "bind", None) if not blockable else \
        (lambda outs, eins: _bind_strided(kern, outs, eins))

    def bind(outs, ins):
        """``f(outs, ins)``: ``run`` for arrays of these layouts (shapes, strides, dtypes) and this
        thread count, with what depends only on them (the driver's or the few-row kernel's plan, the
        scratch, the epilogue's meta and machine-code caller) looked up once; ``f`` returns False
        (nothing done) when the thread count changed.  None: no such shortcut here (run each call)."""
        a, b = ins[0], ins[1]
        if outs[0].size == 0 or not all(isinstance(x, np.ndarray) for x in list(outs) + list(ins)):
            return None
        nt = threads.NUM_THREADS
        packed = _packed_bind(outs, ins) if b.ndim == 2 else None
        if b.ndim == 2 and type(native) is _InBlockEpilogue and PACKED_IN_TASK[0] and packed is None:
            # the long products PK_AVX2_RULE leaves to BLAS: packed with an elementwise epilogue in its tasks,
            # on one thread too (linalg.PK_EPI_TILES; where the packed product runs anyway, one thread: its
            # tiles measured no faster than the product then the epilogue's launch at 128x384x1536 + GELU)
            tiled = _packed_bind(outs, ins, tiles=True)
            f = native.bind_packed(outs, ins, tiled) if tiled is not None else None
            if f is not None:
                return _nt_guard(f, nt)
        if packed is not None and native is not None and PACKED_IN_TASK[0] and \
                getattr(packed, "pk", None) is not None:
            if type(native) is _InBlockEpilogue:
                f = native.bind_packed(outs, ins, packed)
            else:       # a row kernel: the tasks hold whole rows
                f = native.bind_packed(outs, ins, _packed_bind(outs, ins, rows_only=True))
            if f is not None:
                return _nt_guard(f, nt)
        if native is not None and packed is None and b.ndim > 2 and type(native) is _InBlockRows and \
                PACKED_IN_TASK[0]:
            # a batch of small products (attention's scores) and softmax: linalg's batched kernel, the row
            # kernel on each matrix right after it
            f = native.bind_batched(outs, ins)
            if f is not None:
                return _nt_guard(f, nt)
        if native is not None and packed is None:
            f = native.bind(outs, ins)
            if f is not None:
                return _nt_guard(f, nt)
        if b.ndim == 2:
            mshape = a.shape[:-1] + (b.shape[-1],)
        else:
            mshape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        if blockable and b.ndim == 2 and a.ndim >= 2 and outs[0].nbytes > BLOCK_BYTES:
            return None
        buf = scratch(mshape)
        prod = _bind_product(buf, a, b)
        eins = [buf if j is None else ins[j] for j in eidx]
        epi = epi_bind(outs, eins) if epi_bind is not None else None
        if epi is None and packed is not None and epi_bind is not None:
            # (the first runs took the in-block path: the epilogue's own launch is bound after it ran once)
            epi = _late_bound(run_epi, epi_bind)
        if epi is None:      # (a Numba epilogue, a copying layout) the product alone is bound
            def epi(outs, eins):
                run_epi(outs, eins)
                return True

        def f(outs, ins):
            if threads.NUM_THREADS != nt:
                return False
            prod(ins[0], ins[1])
            return epi(outs, [buf if j is None else ins[j] for j in eidx])
        pc, ec = getattr(prod, "calls", None), getattr(epi, "calls", None)
        if pc is not None and ec is not None:
            f.calls = lambda outs, ins: native_chain.join(pc(ins[0], ins[1]),
                                                          ec(outs, [buf if j is None else ins[j] for j in eidx]))
        return f

    def bind_epilogue(outs, ins):
        """``f(outs, ins, prod)``: the epilogue alone, on ``prod`` (the product ``ins[0] @ ins[1]``
        computed elsewhere: jit/executable.py's fused KV-cache steps) for arrays of these layouts;
        ``ins[1]`` is not read.  Its bound launch is looked up after a first run (which fills the
        launch's cache), else it runs as the unbound epilogue."""
        state = [None, 0]     # the bound epilogue, tries

        def f(outs, ins, prod):
            eins = [prod if j is None else ins[j] for j in eidx]
            g = state[0]
            if g is not None:
                if g(outs, eins):
                    return True
                state[0], state[1] = None, 0      # (the thread count changed: bound anew)
            run_epi(outs, eins)
            if epi_bind is not None and state[1] < 2:
                state[1] += 1
                state[0] = epi_bind(outs, eins)
            return True
        return f

    run.bind = bind
    if op.matmul.name == "matmul":
        run.bind_epilogue = bind_epilogue
    return run, sources


def _conv_then_epilogue_binder(prod, acc, einputs, npin, scratch, run_epi, epi_bind):
    """``bind(outs, ins)`` for a conv2d whose elementwise epilogue the conv kernels do not run inside
    (conv_epilogue.plan takes bias / residual / relu only: hardswish, SiLU, clip, ...): the conv into the
    thread's scratch through its bound launch (conv.bind_into, no epilogue) then the epilogue's bound launch, so
    a call passes the arrays straight to the two kernels.  Unbound, each call ran conv2d_into's dispatch and
    elementwise.run_strided's layout analysis: ~25 us of Python a step, most of a MobileNetV3 1x1 or depthwise
    conv on 14x14 (40 -> 240 + hardswish: 85 us a step, onnxruntime's conv 32 us).  None where conv.bind_into
    binds no kernel (the GEMM / Winograd paths): the step then runs unbound as before."""
    eidx, j = [], npin
    for v in einputs:
        eidx.append(None if v is acc else j)
        j += v is not acc

    def bind(outs, ins):
        if outs[0].size == 0 or not all(isinstance(x, np.ndarray) for x in list(outs) + list(ins)):
            return None
        from . import conv as C
        from ....ops.registry import Meta
        mshape = prod.op.infer([Meta(a.shape, v.dtype) for a, v in zip(ins[:npin], prod.inputs)], prod.attrs)[0].shape
        buf = scratch(tuple(mshape))
        g = C.bind_into(buf, list(ins[:npin]), prod.attrs)
        if g is None:
            return None
        epi = epi_bind(outs, [buf if k is None else ins[k] for k in eidx])
        if epi is None:
            epi = _late_bound(run_epi, epi_bind)

        def f(outs, ins):
            if not g(buf, ins[:npin], None, None):
                return False
            return epi(outs, [buf if k is None else ins[k] for k in eidx])
        ec = getattr(epi, "calls", None)
        if getattr(g, "calls", None) is not None and ec is not None:
            f.calls = lambda outs, ins: native_chain.join(g.calls(buf, ins[:npin], None, None),
                                                          ec(outs, [buf if k is None else ins[k] for k in eidx]))
        return f
    return bind


def _nt_guard(f, nt):
    """``f(outs, ins)`` while the thread count is ``nt`` (False after), with ``f``'s calls (native_chain)."""
    def fn(outs, ins):
        return threads.NUM_THREADS == nt and f(outs, ins)
    c = getattr(f, "calls", None)
    if c is not None:
        fn.calls = c
    return fn


def _packed_bind(outs, ins, rows_only=False, tiles=False):
    """The packed-weight product's caller (linalg._pk_caller) for a matmul epilogue's product at these
    layouts, or None: then the in-block epilogue (or the scratch path) runs as before.  ``tiles``: cut into
    tasks for an elementwise epilogue in each (linalg.PK_EPI_TILES)."""
    from . import linalg as L
    a, b = ins[0], ins[1]
    if not L.PK_ON[0] or b.ndim != 2 or a.ndim < 2:
        return None
    probe = np.empty(a.shape[:-1] + (b.shape[-1],), a.dtype) if a.dtype == b.dtype else None
    return None if probe is None else L._pk_caller(probe, a, b, rows_only, tiles)


def _late_bound(run_epi, epi_bind):
    """``f(outs, eins)`` running the epilogue unbound until a run has filled its launch cache, then bound."""
    state = [None, 0]

    def f(outs, eins):
        g = state[0]
        if g is not None:
            return g(outs, eins)
        run_epi(outs, eins)
        if state[1] < 2:
            state[1] += 1
            state[0] = epi_bind(outs, eins)
        return True
    return f


def _bind_product(buf, a, b):
    """``f(a, b)``: ``matmul_into(buf, a, b)`` for operands of these layouts (see _product_caller)."""
    g = _product_caller(buf, a, b)
    f = lambda a, b: g(buf, a, b)  # noqa: E731
    gc = getattr(g, "calls", None)
    if gc is not None:
        f.calls = lambda a, b: gc(buf, a, b)
    return f


def _product_caller(out, a, b):
    """``g(out, a, b)``: ``matmul_into(out, a, b)`` for arrays of these layouts, where ``out`` overlaps
    neither input (a compiled graph's step output: an arena buffer or a fresh one).  A few-row
    product the few-row kernel takes (linalg._rows_product's conditions, checked here once) calls
    the kernel with its plan directly; anything else goes through matmul_into."""
    from . import linalg as L
    return L._rows_caller(out, a, b) or L._pk_caller(out, a, b) or L._bpk_caller(out, a, b) or \
        L._drv_caller(out, a, b) or matmul_into


def bind_kernel(op, outs, ins, attrs=None):
    """``f(outs, ins)`` doing what the CPU kernel of ``op`` (a compiled graph's step) does on arrays of
    these layouts and this thread count (False: the thread count changed), or None where there is no
    such shortcut: a matmul (the few-row kernel's plan looked up once), the single elementwise ops
    (the launch's meta and machine-code caller resolved once; not an input overlapping the output, not
    float16/bfloat16 without a native kernel: those keep elementwise.launch's copies), layer_norm /
    rms_norm over contiguous rows (the IR row kernel's metas made once; nn.norm_launch's other cases
    are not bound)."""
    if len(outs) != 1 or not all(isinstance(x, np.ndarray) for x in list(outs) + list(ins)) or outs[0].size == 0:
        return None
    out = outs[0]
    if op.name in ("layer_norm", "rms_norm") and attrs is not None:
        return _bind_norm(op.name, attrs, out, ins)
    if op.name == "matmul" and len(ins) == 2:
        g = _product_caller(out, ins[0], ins[1])
        if g is matmul_into:
            return None
        nt = threads.NUM_THREADS

        def f(outs, ins):
            if threads.NUM_THREADS != nt:
                return False
            g(outs[0], ins[0], ins[1])
            return True
        gc = getattr(g, "calls", None)
        if gc is not None:
            f.calls = lambda outs, ins: gc(outs[0], ins[0], ins[1])
        return f
    if op.kind == "elementwise" and "py" in op.expr:
        from ....ops.registry import OPS
        op = OPS.get(op.name)      # the op the CPU kernel launches (devices/cpu: _ew_kernel)
        if getattr(op, "ew", None) is None or any(np.may_share_memory(out, x) for x in ins):
            return None
        # (float16/bfloat16: bound where the kernel loads and stores them itself, as launch() runs it;
        # None where it does not: launch() then widens them)
        kern = ew.get_kernel(op, [a.dtype for a in ins], out.dtype)
        return _bind_strided(kern, outs, ins) if kern is not None else None
    return None


def _bind_norm(name, attrs, out, ins):
    """nn.layer_norm_kernel / rms_norm_kernel -> norm_launch's IR row-kernel path, bound (see bind_kernel)."""
    from .. import llvm_render
    from .nn import _dummy, ir_rows
    x = ins[0]
    n = attrs["n"]
    dt = out.dtype
    if dt not in (np.float32, np.float64) or x.dtype != dt or not n or x.size % n or x.size != out.size \
            or not x.flags.c_contiguous or not out.flags.c_contiguous or not out.flags.writeable \
            or np.may_share_memory(out, x):
        return None
    rms = name == "rms_norm"
    k = ir_rows(name, dt.name, False)
    if k is None:
        return None
    R = x.size // n
    it = iter(range(1, len(ins)))
    pw = next(it) if attrs.get("has_weight") else None
    pb = next(it) if attrs.get("has_bias") and not rms else None
    own = []
    for p, fill in ((pw, 1.0), (pb, 0.0)):
        if p is None:
            own.append(np.full(n, fill, dt))
            continue
        a = ins[p]
        if a.dtype != dt or a.size != n or not a.flags.c_contiguous:
            return None    # norm_launch reads a converted copy: not bound
        own.append(None)
    nt = threads.NUM_THREADS
    nt_l = nt if R * n >= threads.PARALLEL_THRESHOLD else 1
    chunks = threads.split(R, nt_l) if nt_l > 1 and R > 1 else [(0, R)]
    eps = float(attrs["eps"])
    metas = [llvm_render.row_meta(c[0], c[1], 1, n, eps, [(n, 0, 0), (n, 0, 0)]) for c in chunks]
    tmp = _dummy(dt)
    w0, b0 = own
    nat = ew.native_calls(k, 6, metas) if len(metas) > 1 else False   # row chunks on the native workers

    def f(outs, ins):
        if threads.NUM_THREADS != nt:
            return False
        w = w0 if w0 is not None else ins[pw]
        b = b0 if b0 is not None else ins[pb]
        x, o = ins[0], outs[0]
        if len(metas) == 1:
            k(x, o, w, b, tmp, metas[0])
        elif nat:
            desc, caller, stacked, dummy = nat
            caller(desc, dummy, dummy, dummy, x, o, w, b, tmp, stacked)
        else:
            threads.run_parallel(lambda m: k(x, o, w, b, tmp, m), metas)
        return True
    if len(metas) == 1 or nat:
        def calls(outs, ins):
            w = w0 if w0 is not None else ins[pw]
            b = b0 if b0 is not None else ins[pb]
            if len(metas) == 1:
                return [(k, (ins[0], outs[0], w, b, tmp, metas[0]), None)]
            desc, caller, stacked, dummy = nat
            return [native_chain.driver(caller, desc, dummy, dummy, dummy, ins[0], outs[0], w, b, tmp, stacked)]
        f.calls = calls
    return f


def _bind_strided(kern, outs, ins):
    """``f(outs, ins)``: ``elementwise.run_strided(kern, outs, ins)`` for arrays of these layouts,
    the launch's metas (its cache, filled by a run at this layout) and the kernel's machine-code
    caller for them resolved once; None when not cached yet, not an LLVM kernel, or an operand's
    flat buffer does not start at its data (negative strides: the arrays can't be passed as is)."""
    from .. import llvm_render
    if not isinstance(kern, llvm_render.LLVMKernel) or not outs or outs[0].size == 0:
        return None
    shape = outs[0].shape
    nt0 = threads.NUM_THREADS
    key = (kern, shape, tuple(o.strides for o in outs), tuple((a.shape, a.strides) for a in ins), nt0)
    metas = ew._launch_cache.get(key)
    if metas is None or metas is ew._DENSE:      # (the dense launch: run_strided each call)
        return None
    for x in list(outs) + list(ins):
        if not isinstance(x, np.ndarray) or x.size == 0 or layout.flat(x)[1] != 0:
            return None
    launches = [(kern._specialize(m), m) for m in metas]
    th = threads
    # (f returns False once the thread count changed: the metas are one chunk per thread; the step runs
    # the launch and binds anew)
    if len(launches) == 1:
        call, meta = launches[0]

        def f(outs, ins):
            if th.NUM_THREADS != nt0:
                return False
            call(*outs, *ins, meta)
            return True
        f.calls = lambda outs, ins: [(call, (*outs, *ins, meta), None)]
    else:
        nat = ew._native_chunks(kern, metas)     # the chunks on gemm_driver's native workers
        if nat:
            desc, caller, stacked, dummy = nat

            def f(outs, ins):
                if th.NUM_THREADS != nt0:
                    return False
                caller(desc, dummy, dummy, dummy, *outs, *ins, stacked)
                return True
            f.calls = lambda outs, ins: [native_chain.driver(caller, desc, dummy, dummy, dummy, *outs, *ins, stacked)]
        else:
            def f(outs, ins):
                if th.NUM_THREADS != nt0:
                    return False
                threads.run_parallel(lambda cm: cm[0](*outs, *ins, cm[1]), launches)
                return True
    return f


# NEE_EPILOGUE_IN_BLOCK=0: matmul epilogues (elementwise groups, reduction prologues) run as their
# own launch after the whole product (read when a graph is compiled)
IN_BLOCK_EPILOGUE = [os.environ.get("NEE_EPILOGUE_IN_BLOCK", "1") not in ("0", "")]
# NEE_CONV_EPILOGUE=0: conv2d's bias / residual / relu epilogue chains run after the conv (a scratch and a
# pass), not inside its kernel (kernels/conv_epilogue.py; read when a graph is compiled)
CONV_EPILOGUE = [os.environ.get("NEE_CONV_EPILOGUE", "1") not in ("0", "")]
# NEE_PACKED_EPILOGUE_IN_TASK=0: a packed-weight product cut into tasks (2+ threads) runs its elementwise
# epilogue after the product as its own launch, not in each task on the task's block (bound steps)
PACKED_IN_TASK = [os.environ.get("NEE_PACKED_EPILOGUE_IN_TASK", "1") not in ("0", "")]


class _InBlockEpilogue:
    """The product and an elementwise epilogue in one native call: the GEMM driver
    (gemm_driver.with_epilogue) runs the epilogue's LLVM kernel on each block of the product right
    after computing it, on the same thread, while the block is in cache, instead of a second
    parallel launch over the whole product.

    ``__call__(outs, ins)`` returns False (nothing done: the caller's path runs) when this product's
    layout has no plan: the driver unavailable or off (NEE_MATMUL_DRIVER=0), a kernel that is not an
    LLVM one (NEE_CPU_RENDERER=numba), float16 / integer products, layouts BLAS or the driver do not
    take, matrix-vector products below the driver's split size, operands whose dims do not merge
    into the driver's (batch, rows, cols) view or whose dtype is not the kernel's.  The plan
    (descriptor + operand table) depends only on shapes, strides and the thread count: one per
    layout.  Operands must not partially overlap an output (the jit's memory plan never makes
    them: an output and an input of one step are distinct buffers)."""

    def __init__(self, kern, acc, einputs, nout, scratch):
        from .. import llvm_render
        self.ok = False
        if not isinstance(kern, llvm_render.LLVMKernel) or acc.dtype.name not in _NB or einputs.count(acc) != 1:
            return
        nops = nout + len(einputs)
        from .. import gemm_driver
        if nops > gemm_driver.MAX_EPI_OPS:
            return
        self.kern = kern
        self.apos = nout + einputs.index(acc)     # the product's place among the kernel's operands
        self.dts = list(kern.pieces[1]) + list(kern.pieces[0])
        self.npdt = acc.dtype.np
        self.scratch = scratch
        self.plans: dict = {}
        self._last = None
        self.ok = True

    def __call__(self, outs, ins) -> bool:
        c = self._call(outs, ins)
        if c is None:
            return False
        c[0](*c[1])
        return True

    def _call(self, outs, ins):
        """(the driver's caller, its arguments) for these arrays, or None (no plan)."""
        p = self._lookup(outs, ins)
        if p is False:
            return None
        desc, _keep, call, mshape = p
        buf = self.scratch(mshape)
        k = 2 + self.apos - len(outs)
        return call, (desc, ins[0], ins[1], buf, *outs, *ins[2:k], buf, *ins[k:])

    def calls(self, outs, ins):
        """(native_chain) this call's driver call, or None."""
        c = self._call(outs, ins)
        return None if c is None else [native_chain.driver(c[0], *c[1])]

    def _lookup(self, outs, ins):
        """The plan for these arrays' layouts (False: none).  The last call's arrays and plan are
        kept: the same array objects again (a compiled graph's arena buffers and constants) skip
        the layout key."""
        nt = threads.NUM_THREADS
        last = self._last
        if last is not None and last[0] == nt and all(map(_is, ins, last[1])) and all(map(_is, outs, last[2])) \
                and len(ins) == len(last[1]) and len(outs) == len(last[2]):
            return last[3]
        a, b = ins[0], ins[1]
        eins = ins[2:]
        key = (a.shape, a.strides, b.shape, b.strides, outs[0].shape, tuple(o.strides for o in outs),
               tuple((x.shape, x.strides) for x in eins), nt)
        p = self.plans.get(key)
        if p is None:
            p = self._plan(outs, a, b, eins, key)
        self._last = (nt, list(ins), list(outs), p)
        return p

    def bind(self, outs, ins):
        """``f(outs, ins)`` for the compiled graph's bound steps (see compile_matmul_epilogue's
        ``bind``): this call, False where there is no plan."""
        if self._lookup(outs, ins) is False:
            return None
        f = functools.partial(type(self).__call__, self)
        f.calls = self.calls
        return f

    @staticmethod
    def _view3(x, mshape, nb, M, N):
        """(batch, row, column) element strides of ``x`` broadcast to the product's shape and seen as
        the driver's (nb, M, N) product, or None when its dims do not merge so."""
        v = x if x.shape == mshape else np.broadcast_to(x, mshape)
        try:
            v = np.reshape(v, (nb, M, N) if nb > 1 else (M, N), copy=False)
        except ValueError:
            return None
        st = v.strides if nb > 1 else (0,) + v.strides
        if any(s % x.itemsize for s in st):
            return None
        return [s // x.itemsize for s in st]

    def _product_plan(self, outs, a, b):
        """(mshape, scratch buffer, the driver's descriptor) of the product, or None."""
        from .. import gemm_driver
        from . import linalg
        if os.environ.get("NEE_MATMUL_DRIVER", "1") in ("0", "") or not gemm_driver.available():
            return None
        if a.dtype != self.npdt or b.dtype != self.npdt or a.ndim < 2 or b.ndim < 2:
            return None
        if b.ndim == 2:
            mshape = a.shape[:-1] + (b.shape[-1],)
        else:
            mshape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        if any(o.shape != mshape for o in outs):
            return None
        if mshape[-2] <= getattr(linalg, "ROWS_MAX", 0) or mshape[-1] == 1:
            return None     # few-row products: matmul_into's own memory-order kernel (linalg)
        buf = self.scratch(mshape)
        if (b.ndim == 2 and linalg._gemv_frozen(b) and linalg._pk_caller(buf, a, b) is not None) or \
                (buf.ndim >= 3 and buf.dtype == np.float32 and linalg.BPK_ON[0] and
                 linalg._bpk_caller(buf, a, b) is not None):
            # a frozen weight the packed kernel takes, a batch of small products the batched one takes: matmul_into
            # runs them (then the epilogue), as the bound step does (_product_caller's order), so a compiled
            # graph's first call (its steps not bound yet) sums as its later calls do: the same bits
            return None
        desc = linalg._make_plan(buf, a, b)
        if desc is None:
            return None
        if threads.NUM_THREADS <= 1 or buf.size * a.shape[-1] < linalg.DRV_MNK:
            # what matmul_into runs on the calling thread alone: the blocks too
            desc = desc.copy()
            desc[gemm_driver.D_NWORK] = 0
        return mshape, buf, desc

    def _plan(self, outs, a, b, eins, key):
        res = False
        try:
            res = self._make(outs, a, b, eins)
        finally:
            if len(self.plans) > 256:
                self.plans.clear()
            self.plans[key] = res if res is not None else False
        return self.plans[key]

    def _addr(self, sn, nout):
        """Address of the kernel's variant for operands of these column strides (``sn``, elements)."""
        from .. import llvm_render
        if all(s == 1 for s in sn[:nout]) and all(s in (0, 1) for s in sn[nout:]):
            variant = tuple(i for i, s in enumerate(sn[nout:]) if s == 0)
        else:
            variant = None
        kern = self.kern

        def render():
            text = kern._ir.get(variant)
            return text if text is not None else llvm_render.render_ir(kern.name, *kern.pieces, variant=variant)
        return llvm_render.compile_ir(llvm_render.kernel_key(kern.prefix, kern.pieces, variant), render)

    def bind_packed(self, outs, ins, packed):
        """``f(outs, ins)``: the packed-weight product (``packed``: linalg._pk_caller's caller, cut into tasks
        on 2+ threads) with this epilogue run by each task on its rows and columns right after computing them
        (linalg.pk_with_epilogue), or None (then the product and the epilogue's own launch run in turn).
        ``f`` returns False (nothing done) for another weight than the packed one."""
        from . import linalg as L
        a, b = ins[0], ins[1]
        if b.ndim != 2 or a.ndim < 2 or getattr(packed, "pk", None) is None:
            return None
        mshape = a.shape[:-1] + (b.shape[-1],)
        if any(o.shape != mshape for o in outs):
            return None
        N = b.shape[-1]
        R = outs[0].size // N
        buf = self.scratch(mshape)
        nout = len(outs)
        k = self.apos - nout
        eins = ins[2:]
        ops = list(outs) + list(eins[:k]) + [buf] + list(eins[k:])
        rows = []
        for x, dt in zip(ops, self.dts):
            st = self._view3(x, mshape, 1, R, N) if x.dtype.name == dt else None
            if st is None:
                return None
            rows.append(st[1:] + [0])
        h = L.pk_with_epilogue(packed, self._addr([r[1] for r in rows], nout), np.array(rows, np.int64), self.apos)
        if h is None:
            return None
        kk = 2 + k

        def f(outs, ins):
            return h(ins[0], ins[1], [*outs, *ins[2:kk], buf, *ins[kk:]])
        if getattr(h, "calls", None) is not None:
            f.calls = lambda outs, ins: h.calls(ins[0], ins[1], [*outs, *ins[2:kk], buf, *ins[kk:]])
        return f

    def _make(self, outs, a, b, eins):
        from .. import gemm_driver
        pp = self._product_plan(outs, a, b)
        if pp is None:
            return None
        mshape, buf, desc = pp
        nb, M, N = int(desc[gemm_driver.D_NB]), int(desc[gemm_driver.D_M]), int(desc[gemm_driver.D_N])
        k = self.apos - len(outs)
        ops = list(outs) + list(eins[:k]) + [buf] + list(eins[k:])
        rows = []
        for x, dt in zip(ops, self.dts):
            st = self._view3(x, mshape, nb, M, N) if x.dtype.name == dt else None
            if st is None:
                return None
            rows.append(st + [0])
        addr = self._addr([r[2] for r in rows], len(outs))
        table = np.array(rows, np.int64)
        return (gemm_driver.with_epilogue(desc, addr, table), table, gemm_driver.epilogue_caller(len(ops)),
                mshape)


# a 2-D product the driver cuts into column blocks is cut into row blocks instead when a row
# prologue follows (attention's output projection + residual + layer_norm): on 2 threads the
# product costs a little more (each block packs all of the weight) and the norm runs on both
# threads, on each block while it is in cache, instead of after the product on one
ROW_SPLIT_FOR_ROWS = [True]
ROW_SPLIT_PACK_RATIO = 1.0


class _InBlockRows(_InBlockEpilogue):
    """A reduction prologue (softmax / log_softmax / layer_norm / rms_norm over the product's last
    dim, after the fused group) run by the GEMM driver on each block's rows right after the block's
    product (gemm_driver.with_row_epilogue), where the driver's blocks hold whole rows: the
    matrices of a batch (attention's scores), or row blocks.  Its IR row kernel is the one the
    separate launch runs (``rows_spec`` of _single_pass_ir).  Falls back (False) like
    _InBlockEpilogue, and where blocks cut rows (column blocks), a row is longer than
    gemm_driver.MAX_ROW_BYTES, an operand varies along a row with a stride other than 1, a norm's
    weight or bias is not contiguous, or the norm runs over more than the last dim."""

    def __init__(self, spec, acc, einputs, nout, scratch):
        from .. import gemm_driver, llvm_render
        self.ok = False
        addr = llvm_render._addresses.get(spec["key"])
        if addr is None or acc.dtype.name not in _NB or einputs.count(acc) != 1:
            return
        if len(spec["kouts"]) + len(spec["pos_g"]) + 3 > gemm_driver.MAX_EPI_OPS:
            return
        self.spec = spec
        self.addr = addr
        self.apos = nout + einputs.index(acc)
        self.npdt = acc.dtype.np
        self.scratch = scratch
        self.plans: dict = {}
        self._last = None
        self.ok = True

    def _call(self, outs, ins):
        p = self._lookup(outs, ins)
        if p is False:
            return None
        desc, (prog, _keep), call, mshape = p
        buf = self.scratch(mshape)
        k = self.apos - len(outs)
        eins = ins[2:]
        full = list(eins[:k]) + [buf] + list(eins[k:])
        # prog: (0, j) output j, (1, i) the epilogue's input i (the product: the scratch), (2, array)
        return call, (desc, ins[0], ins[1], buf, *[outs[i] if w == 0 else full[i] if w == 1 else i for w, i in prog])

    @staticmethod
    def _rows_plan(desc, buf, a, b):
        """The product of ``desc`` (one matrix, cut into column blocks) re-planned in as many blocks
        of whole rows, or None (a batch, or a layout the driver does not take so)."""
        from .. import gemm_driver
        from . import linalg
        if desc[gemm_driver.D_NB] != 1 or (b.ndim > 2 and any(n != 1 for n in b.shape[:-2])):
            return None
        M, K, N = int(desc[gemm_driver.D_M]), int(desc[gemm_driver.D_K]), int(desc[gemm_driver.D_N])
        try:
            a2 = np.reshape(a, (M, K), copy=False)
            o2 = np.reshape(buf, (M, N), copy=False)
        except ValueError:
            return None
        b2 = b if b.ndim == 2 else b[(0,) * (b.ndim - 2)]
        nt = threads.NUM_THREADS
        # one block of rows per thread: each block packs all of the weight
        d = gemm_driver.plan(o2, a2, b2, nt, min(int(desc[gemm_driver.D_NCH]), nt), 0, 1,
                             getattr(linalg, "_DRV_MIN_ROWS", 16))
        if d is None or d[gemm_driver.D_NCH] < min(nt, 2):
            return None
        if desc[gemm_driver.D_NWORK] == 0:
            d = d.copy()
            d[gemm_driver.D_NWORK] = 0
        return d

    def _make(self, outs, a, b, eins):
        from .. import gemm_driver, llvm_render
        sp = self.spec
        pp = self._product_plan(outs, a, b)
        if pp is None:
            return None
        mshape, buf, desc = pp
        nb, M, N = int(desc[gemm_driver.D_NB]), int(desc[gemm_driver.D_M]), int(desc[gemm_driver.D_N])
        if desc[gemm_driver.D_SPLIT] != 0 and desc[gemm_driver.D_NCH] != 1:
            desc = self._rows_plan(desc, buf, a, b) if ROW_SPLIT_FOR_ROWS[0] else None
            if desc is None:
                return None
            # every row block packs all of the weight: past ROW_SPLIT_PACK_RATIO times the product's
            # bytes of extra packing, the product runs in its own column blocks and the rows after it
            # (BERT's FF2 + residual + layer_norm, 128 x 1536 @ 1536 x 384: one thread, 4 row blocks
            # 1.80 ms, product + separate norm 1.63)
            w_bytes = int(desc[gemm_driver.D_K]) * N * buf.itemsize
            if (int(desc[gemm_driver.D_NCH]) - 1) * w_bytes > ROW_SPLIT_PACK_RATIO * M * N * nb * buf.itemsize:
                return None
        if N * 8 > gemm_driver.MAX_ROW_BYTES:
            return None
        if sp["mode"] >= 2 and sp["n"] != N:
            return None
        res = self._prog(outs, eins, buf, mshape, nb, M, N)
        if res is None:
            return None
        prog, lays, keep = res
        meta = llvm_render.row_meta(0, 0, M, N, sp["eps"], lays)
        keep.append(meta)
        d = gemm_driver.with_row_epilogue(desc, self.addr, meta, len(prog))
        return d, (prog, keep), gemm_driver.epilogue_caller(len(prog)), mshape

    def bind_packed(self, outs, ins, packed):
        """``f(outs, ins)``: the packed-weight product (``packed``: linalg._pk_caller's caller with
        ``rows_only``, cut into blocks of whole rows on 2+ threads) with this row kernel run by each task on
        its rows right after computing them (linalg.pk_with_row_epilogue), or None.  ``f`` returns False
        for another weight than the packed one."""
        from .. import gemm_driver
        from . import linalg as L
        sp = self.spec
        a, b = ins[0], ins[1]
        if packed is None or b.ndim != 2 or a.ndim < 2 or getattr(packed, "pk", None) is None:
            return None
        mshape = a.shape[:-1] + (b.shape[-1],)
        N = b.shape[-1]
        R = outs[0].size // N
        if any(o.shape != mshape for o in outs) or N * 8 > gemm_driver.MAX_ROW_BYTES or \
                (sp["mode"] >= 2 and sp["n"] != N):
            return None
        return self._bind_in_rows(outs, ins, mshape, 1, R, N, lambda buf, meta, nprog, at: L.pk_with_row_epilogue(
            packed, self.addr, meta, nprog, at))

    def _bind_in_rows(self, outs, ins, mshape, nb, M, N, make):
        """The bound step of bind_packed / bind_batched: the row kernel's operands over the (nb, M, N) product
        (the product itself into a scratch buffer), ``make(buf, meta, n operands, the product's position)`` the
        native caller (None: not taken)."""
        from .. import llvm_render
        buf = self.scratch(mshape)
        res = self._prog(outs, ins[2:], buf, mshape, nb, M, N)
        if res is None:
            return None
        prog, lays, keep = res
        k = self.apos - len(outs)
        if (1, k) not in prog:
            return None
        meta = llvm_render.row_meta(0, 0, M, N, self.spec["eps"], lays)
        h = make(buf, meta, len(prog), prog.index((1, k)))
        if h is None:
            return None
        keep.append(getattr(h, "keep", None))
        kk = 2 + k

        def f(outs, ins):
            full = [*ins[2:kk], buf, *ins[kk:]]
            return h(ins[0], ins[1], [outs[i] if w == 0 else full[i] if w == 1 else i for w, i in prog])

        def calls(outs, ins):
            full = [*ins[2:kk], buf, *ins[kk:]]
            return h.calls(ins[0], ins[1], [outs[i] if w == 0 else full[i] if w == 1 else i for w, i in prog])
        if getattr(h, "calls", None) is not None:
            f.calls = calls
        f.keep = keep
        return f

    def bind_batched(self, outs, ins):
        """``f(outs, ins)``: a batch of small products by linalg's batched packed kernel with this row kernel
        run on each matrix's rows right after computing it (linalg.bpk_with_row_epilogue), or None (a product
        that kernel does not take, operands whose dims do not merge into the (matrices, M, N) view)."""
        from .. import gemm_driver
        from . import linalg as L
        sp = self.spec
        a, b = ins[0], ins[1]
        if a.dtype != self.npdt or b.dtype != self.npdt or a.ndim < 2 or b.ndim < 3:
            return None
        mshape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        M, N = mshape[-2:]
        nb = 1
        for d in mshape[:-2]:
            nb *= d
        if nb < 2 or any(o.shape != mshape for o in outs) or N * 8 > gemm_driver.MAX_ROW_BYTES or \
                (sp["mode"] >= 2 and sp["n"] != N):
            return None
        return self._bind_in_rows(outs, ins, mshape, nb, M, N, lambda buf, meta, nprog, at: L.bpk_with_row_epilogue(
            buf, a, b, self.addr, meta, nprog, at))

    def _prog(self, outs, eins, buf, mshape, nb, M, N):
        """(prog, lays, keep) of the row kernel's operands over the (nb, M, N) product, or None."""
        sp = self.spec
        k = self.apos - len(outs)
        full = list(eins[:k]) + [buf] + list(eins[k:])
        npdt = self.npdt
        dummy = np.zeros(1, npdt)
        prog, lays, keep = [], [], [dummy]

        def add(x, w, i, bcast=False):
            if x.size == 1 and bcast:          # a scalar: element 0 for every row
                lays.append((0, 0, 0))
            else:
                st = self._view3(x, mshape, nb, M, N)
                if st is None or (st[2] != 1 and not bcast and N > 1):
                    return False
                lays.append((st[0], st[1], 0))
            prog.append((w, i))
            return True
        for o in sp["kouts"]:
            if o in sp["ext_pos"]:
                if not add(outs[sp["ext_pos"][o]], 0, sp["ext_pos"][o]):
                    return None
            else:          # the normalized value, needed nowhere else: the kernel's row scratch
                prog.append((2, dummy))
                lays.append((0, 0, 0))
        for i, pos in enumerate(sp["pos_g"]):
            if not add(full[pos], 1, pos, sp["bcast"][i]):
                return None
        if outs[-1].dtype != npdt or not add(outs[-1], 0, len(outs) - 1):
            return None
        for pos, fill in ((sp["pos_w"], 1.0), (sp["pos_b"], 0.0)):
            if pos is None:
                arr = np.full(N if sp["mode"] >= 2 else 1, fill, npdt)
                keep.append(arr)
                prog.append((2, arr))
            else:              # read in place each call (a parameter updated in place stays current)
                x = full[pos]
                if x.dtype != npdt or x.size != N or not x.flags.c_contiguous:
                    return None
                prog.append((1, pos))
        return prog, lays, keep


def _blocked(mshape, a, b, outs, eins, run_epi, scratch) -> bool:
    """GEMM + epilogue per block of rows of the (rows, N) product (``None`` in ``eins`` marks the
    product); False when some operand has no (rows, N) view."""
    N = mshape[-1]
    R = 1
    for d in mshape[:-1]:
        R *= d
    try:
        a2 = np.reshape(a, (R, a.shape[-1]), copy=False)
        o2 = [np.reshape(o, (R, N), copy=False) for o in outs]
        i2 = [None if x is None else _rows_view_strict(x, mshape, R, N) for x in eins]
    except ValueError:
        return False
    step = max(256, BLOCK_BYTES // 2 // (N * outs[0].itemsize))
    for r0 in range(0, R, step):
        r1 = min(R, r0 + step)
        acc = scratch((r1 - r0, N))
        matmul_into(acc, a2[r0:r1], b)
        run_epi([o[r0:r1] for o in o2], [acc if x is None else x[r0:r1] for x in i2])
    return True


def _rows_view_strict(a, shape, R, N):
    v = a if a.shape == tuple(shape) else np.broadcast_to(a, shape)
    return np.reshape(v, (R, N), copy=False)


kernel("compile:reduction_prologue")(compile_reduction_prologue)
kernel("compile:matmul_epilogue")(compile_matmul_epilogue)
