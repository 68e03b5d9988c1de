"""The native split of matrix products (devices/cpu/gemm_driver.py, used by kernels/linalg.py):
every shape class and layout against numpy with the thresholds at zero, concurrent callers, fork."""
import multiprocessing
import os
import sys
import threading
import time

import numpy as np
import pytest

from neetorch.devices.cpu import gemm_driver as G
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import linalg as L

# where the driver can exist (Linux, numpy's ILP64 OpenBLAS) it must: its self-test failing is a bug
pytestmark = pytest.mark.skipif(sys.platform != "linux" or os.uname().machine not in G._SYS_FUTEX or
                                G._blas_fns() is None, reason="no gemm driver here (not Linux / no ILP64 OpenBLAS)")


def test_available():
    assert G.available()

RNG = np.random.default_rng(0)


def _r(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


class _Planned(list):
    ran: list


@pytest.fixture
def drive_everything(monkeypatch):
    """Every float product goes through the driver, on 3 threads (uneven blocks); yields the
    list of descriptors planned during the test."""
    monkeypatch.setattr(L, "DRV_MNK", 0)
    monkeypatch.setattr(L, "DRV_GEMV_BYTES", 0)
    monkeypatch.setattr(L, "_plans", {})
    # few-row products: the driver's gemv blocks, not the few-row kernel's own split (tests/test_rows_threaded.py)
    monkeypatch.setattr(L, "ROWS_PAR", [False])
    monkeypatch.setattr(L, "ROWS_TINY_BYTES", -1)    # (tiny one-row products: the few-row kernel, session 29)
    monkeypatch.setattr(L, "_rows_plans", {})
    old = threads.get_num_threads()
    threads.set_num_threads(3)
    planned = _Planned()
    real = G.plan

    def spy(*args, **kw):
        d = real(*args, **kw)
        if d is not None:
            planned.append(d)
        return d
    monkeypatch.setattr(G, "plan", spy)
    ran = []
    real_run = G.run
    monkeypatch.setattr(G, "run", lambda *args: (ran.append(args[0]), real_run(*args)))
    monkeypatch.setattr(L, "_drv_ok", [None])     # re-initialized: picks up the spies
    monkeypatch.setattr(L, "_drv_run", None)
    planned.ran = ran
    yield planned
    threads.set_num_threads(old)


def _check(out, a, b, dtype):
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    tol = 1e-4 if np.dtype(dtype) == np.float32 else 1e-10
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


CASES = [
    ((37, 19), (19, 53)),          # rows < cols: column blocks
    ((101, 7), (7, 5)),            # rows > cols: row blocks
    ((1, 64), (64, 77)),           # vector @ matrix: column blocks
    ((77, 64), (64, 1)),           # matrix @ vector: row blocks
    ((5, 1), (1, 40)),             # k = 1
    ((3, 29, 11), (11, 31)),       # batch @ matrix, folded into one GEMM
    ((4, 9, 13), (4, 13, 6)),      # batched, whole matrices per block
    ((2, 40, 13), (2, 13, 70)),    # fewer matrices than threads: each split too
    ((2, 1, 9, 13), (3, 13, 6)),   # broadcast batch dims that do not merge: numpy's loop
    ((1, 9, 13), (5, 13, 6)),      # batch of a broadcast
    ((6, 1, 13), (6, 13, 20)),     # batched vectors
]


@pytest.mark.parametrize("sa,sb", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_driver_matches_numpy(drive_everything, sa, sb, dtype):
    a, b = _r(*sa, dtype=dtype), _r(*sb, dtype=dtype)
    out = np.full(np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1]), np.nan, dtype)
    L.matmul_into(out, a, b)
    _check(out, a, b, dtype)
    driven = sa != (2, 1, 9, 13)
    assert bool(drive_everything) == driven and bool(drive_everything.ran) == driven, "not driven"


@pytest.mark.parametrize("layout", ["transposed_a", "transposed_b", "both_transposed", "sliced", "negative",
                                    "out_view", "out_rows", "batch_transposed", "batch_strided"])
def test_driver_strided_operands(drive_everything, layout):
    a, b = _r(40, 24), _r(24, 70)
    out = np.full((40, 70), np.nan, np.float32)
    if layout == "transposed_a":
        a = np.ascontiguousarray(a.T).T
    elif layout == "transposed_b":          # a weight used as x @ w.T
        b = np.ascontiguousarray(b.T).T
    elif layout == "both_transposed":
        a, b = np.ascontiguousarray(a.T).T, np.ascontiguousarray(b.T).T
    elif layout == "sliced":
        a = _r(80, 48)[::2, ::2]
        b = _r(24, 140)[:, 1::2]
    elif layout == "negative":
        a = a[::-1]
        b = b[:, ::-1]
    elif layout == "out_view":
        big = np.zeros((40, 150), np.float32)
        out = big[:, 3:143:2]               # non-unit column stride: not a CBLAS output
    elif layout == "out_rows":
        big = np.zeros((40, 150), np.float32)
        out = big[:, 3:73]                  # rows of a wider array: a leading dim > N
    elif layout == "batch_transposed":      # attention's q @ k.T over (batch, heads)
        a = _r(2, 3, 20, 8).transpose(0, 2, 1, 3).copy().transpose(0, 2, 1, 3)
        b = _r(2, 3, 30, 8).transpose(0, 1, 3, 2)
        out = np.full((2, 3, 20, 30), np.nan, np.float32)
    else:
        a = _r(4, 2, 20, 8)[:, 1]
        b = _r(8, 30)
        out = np.full((4, 20, 30), np.nan, np.float32)
    L.matmul_into(out, a, b)
    _check(out, a, b, np.float32)
    if layout == "out_view":
        assert not big[:, :3].any() and not big[:, 4:143:2].any()   # nothing written between
    if layout == "out_rows":
        assert not big[:, :3].any() and not big[:, 73:].any()
        assert drive_everything.ran


def test_driver_edge_shapes(drive_everything):
    for sa, sb in [((0, 5), (5, 7)), ((4, 0), (0, 6)), ((3, 0, 5), (5, 2)), ((1, 1), (1, 1))]:
        a, b = _r(*sa), _r(*sb)
        out = np.full(np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1]), np.nan, np.float32)
        L.matmul_into(out, a, b)
        _check(out, a, b, np.float32)


def test_overlapping_output_is_not_driven(drive_everything):
    buf = _r(32, 64)
    a, out = buf[:, :32], buf[:, 32:]
    b = _r(32, 32)
    ref = a @ b
    L.matmul_into(out, a, b)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert not drive_everything.ran


@pytest.mark.parametrize("split", [0, 1])
@pytest.mark.parametrize("blocks", [1, 2, 3, 7, 50])
def test_blocks_cover_the_output_once(split, blocks):
    a, b = _r(61, 33), _r(33, 45)
    out = np.full((61, 45), np.nan, np.float32)
    assert G.gemm(out, a, b, 3, blocks, split, align=4 if split else 1, min_block=1)
    _check(out, a, b, np.float32)
    assert not G.gemm(out[:, ::2], a, b[:, ::2], 3, 2)      # no CBLAS layout: refused, nothing written
    assert not G.gemm(out, a.astype(np.float64), b, 3, 2)   # mixed dtypes: refused


def test_concurrent_callers_and_nesting():
    """Products from several threads at once (one holds the driver, the others run serially)."""
    old = threads.get_num_threads()
    threads.set_num_threads(2)
    errors = []
    data = [(_r(96, 200), _r(200, 160)) for _ in range(6)]

    def worker(i):
        try:
            a, b = data[i]
            for _ in range(15):
                out = np.empty((96, 160), np.float32)
                L.matmul_into(out, a, b)
                np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    try:
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(len(data))]
        for t in ts:
            t.start()
        # products inside pool chunks while other threads hold the driver
        threads.run_parallel(lambda i: worker(i % len(data)), list(range(4)))
        for t in ts:
            t.join()
    finally:
        threads.set_num_threads(old)
    assert not errors, errors[0]


def test_workers_take_blocks():
    """On 2+ threads the driver's workers run some blocks (no worker: all on the caller)."""
    old = threads.get_num_threads()
    threads.set_num_threads(2)
    try:
        a, b = _r(64, 512), _r(512, 2048)
        out = np.empty((64, 2048), np.float32)
        L.matmul_into(out, a, b)
        w0 = G._state[0][G._WTASKS]
        t_end = time.monotonic() + 5            # a loaded box may keep the worker off a core a while
        while G._state[0][G._WTASKS] == w0 and time.monotonic() < t_end:
            assert G.gemm(out, a, b, 2, 16)
        assert G._state[0][G._WTASKS] > w0
        assert G.workers() >= 1
        np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    finally:
        threads.set_num_threads(old)


def _child(q):
    a, b = _r(64, 300), _r(300, 500)
    out = np.empty((64, 500), np.float32)
    threads.set_num_threads(2)
    L.matmul_into(out, a, b)
    q.put(float(np.abs(out - a @ b).max()))


def test_after_fork():
    out = np.empty((64, 500), np.float32)
    L.matmul_into(out, _r(64, 300), _r(300, 500))    # workers started in the parent
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    err = q.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0 and err < 1e-3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_driver_matrix_vector_layouts(drive_everything, dtype):
    """One-row and one-column products (BLAS gemv in the driver) in every operand layout."""
    W = _r(90, 70, dtype=dtype)                          # a (90, 70) weight
    row = _r(3, 90, dtype=dtype)[1:2]                    # (1, 90), unit stride
    col_row = _r(90, 3, dtype=dtype)[:, 1:2].T           # (1, 90), element stride 3
    cases = [(row, W), (col_row, W),                     # x @ W (row-major weight)
             (row, np.ascontiguousarray(W.T).T),         # x @ W.T of a stored (70, 90): transposed
             (col_row, W[:, ::1][:, :50]),               # sliced weight columns (ld > N)
             (W.T, _r(90, 1, dtype=dtype)),              # transposed matrix @ column
             (W, _r(70, 4, dtype=dtype)[:, 2:3]),        # matrix @ a strided column
             (W, np.ascontiguousarray(_r(1, 70, dtype=dtype)).T)]   # matrix @ a contiguous column
    for a, b in cases:
        out = np.full((a.shape[0], b.shape[1]), np.nan, dtype)
        L.matmul_into(out, a, b)
        _check(out, a, b, dtype)
    assert len(drive_everything.ran) == len(cases)
    # a one-column output inside a wider array (its row stride is the leading dim)
    big = np.zeros((90, 5), dtype)
    v = _r(70, 1, dtype=dtype)
    L.matmul_into(big[:, 3:4], W, v)
    _check(big[:, 3:4], W, v, dtype)
    assert not big[:, :3].any() and not big[:, 4:].any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_public_ops_at_default_thresholds(monkeypatch, dtype):
    """nee.matmul, F.linear and a jitted linear+gelu (the matmul epilogue) at sizes the driver
    takes by default, against numpy."""
    import neetorch as nee
    import neetorch.nn.functional as F
    old = threads.get_num_threads()
    threads.set_num_threads(2)
    try:
        x, w, bias = _r(2, 96, 200, dtype=dtype), _r(300, 200, dtype=dtype), _r(300, dtype=dtype)
        assert x.shape[0] * 96 * 200 * 300 >= L.DRV_MNK
        monkeypatch.setattr(L, "_plans", {})
        ref = x.astype(np.float64) @ w.T.astype(np.float64) + bias
        tol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(nee.matmul(nee.tensor(x), nee.tensor(w.T)).numpy(), ref - bias, rtol=tol, atol=tol)
        np.testing.assert_allclose(F.linear(nee.tensor(x), nee.tensor(w), nee.tensor(bias)).numpy(), ref,
                                   rtol=tol, atol=tol)
        f = nee.jit(lambda a, b, c: F.relu(F.linear(a, b, c)))
        for _ in range(2):
            np.testing.assert_allclose(f(nee.tensor(x), nee.tensor(w), nee.tensor(bias)).numpy(), np.maximum(ref, 0),
                                       rtol=tol, atol=tol)
        driven = [k for k, v in L._plans.items() if v is not False]
        assert driven and all(k[6] == np.dtype(dtype) for k in driven)
    finally:
        threads.set_num_threads(old)


def _axpy_addr() -> int:
    """Address of an LLVM elementwise kernel ``out = 2 * a + b`` (float32), the epilogue the tests run."""
    from neetorch.devices.cpu import elementwise as ew
    from neetorch.devices.cpu import llvm_render
    kern, _ = ew.load_group("test_epi", "axpy", ["float32", "float32"], ["float32"],
                            ["t0 = np.float32(v0 * np.float32(2.0) + v1)"], ["t0"])
    if not isinstance(kern, llvm_render.LLVMKernel):
        pytest.skip("NEE_CPU_RENDERER=numba: no LLVM kernel")
    return llvm_render.compile_ir(llvm_render.kernel_key(kern.prefix, kern.pieces, ()),
                                  lambda: llvm_render.render_ir(kern.name, *kern.pieces, variant=()))


@pytest.mark.parametrize("split", [0, 1])
@pytest.mark.parametrize("nthreads", [1, 3])
def test_epilogue_runs_on_every_block_once(split, nthreads):
    """with_epilogue: an elementwise kernel (out = 2 * product + row) runs on each block, at the
    block's offset in every operand (an output inside a larger array, a broadcast row), once."""
    addr = _axpy_addr()
    a, b, row = _r(45, 19), _r(19, 77), _r(77)
    acc = np.full((45, 77), np.nan, np.float32)
    big = np.full((50, 80), np.nan, np.float32)       # the output: big[3:48, 2:79]
    d = G.plan(acc, a, b, nthreads, 5, split, 16, 4)
    assert d is not None and d[G.D_NTASKS] > 1
    table = np.array([[0, 80, 1, 3 * 80 + 2],      # output: (batch, row, col) strides, offset
                      [0, 77, 1, 0],               # the product
                      [0, 0, 1, 0]], np.int64)     # the row, broadcast over rows
    de = G.with_epilogue(d, addr, table)
    assert d[G.D_EPI] == 0 and de[G.D_EPI] == addr and not de.flags.writeable
    G.epilogue_caller(3)(de, a, b, acc, big, acc, row)
    ref = 2 * (a.astype(np.float64) @ b) + row
    np.testing.assert_allclose(big[3:48, 2:79], ref, rtol=1e-4, atol=1e-4)
    mask = np.ones(big.shape, bool)
    mask[3:48, 2:79] = False
    assert np.isnan(big[mask]).all(), "written outside the output"
    with pytest.raises(ValueError, match="operand table"):
        G.with_epilogue(d, addr, np.zeros((3, 3), np.int64))
    with pytest.raises(ValueError, match="operand table"):
        G.with_epilogue(d, addr, np.zeros((G.MAX_EPI_OPS + 1, 4), np.int64))


@pytest.mark.parametrize("nthreads", [1, 3])
def test_epilogue_descriptors_own_their_tables(nthreads):
    """with_epilogue / with_row_epilogue copy the operand table / row meta into the descriptor's own buffer:
    the caller's array overwritten (or freed: a fused matmul's plan replaced by another thread while a call
    with its descriptor ran, the session-24 jit thread race: the row kernel's input read one element off)
    after the descriptor is made changes nothing it computes."""
    from neetorch.devices.cpu import llvm_render
    addr = _axpy_addr()
    a, b, row = _r(37, 19), _r(19, 48), _r(48)
    acc, out = np.empty((37, 48), np.float32), np.full((37, 48), np.nan, np.float32)
    d = G.plan(acc, a, b, nthreads, 3, 0, 1, 4)
    table = np.array([[0, 48, 1, 0], [0, 48, 1, 0], [0, 0, 1, 0]], np.int64)
    de = G.with_epilogue(d, addr, table)
    table[:] = [[0, 1, 0, 5]] * 3
    G.epilogue_caller(3)(de, a, b, acc, out, acc, row)
    np.testing.assert_allclose(out, 2 * (a.astype(np.float64) @ b) + row, rtol=1e-4, atol=1e-4)
    # the softmax row kernel on each row block: kernel(x, dst, w, b, tmp, meta)
    llvm_render.row_kernel("softmax", "float32")
    raddr = llvm_render._addresses[llvm_render.kernel_key("rows_softmax", ("softmax", "float32", False, None),
                                                          "rows")]
    meta = llvm_render.row_meta(0, 0, 37, 48, 0.0, [(0, 48, 0), (0, 48, 0)])
    dr = G.with_row_epilogue(d, raddr, meta, 4)
    meta[5:] = 1
    out.fill(np.nan)
    dummy = np.zeros(1, np.float32)
    G.epilogue_caller(4)(dr, a, b, acc, acc, out, dummy, dummy)
    p = a.astype(np.float64) @ b
    e = np.exp(p - p.max(-1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)


def test_row_epilogue_refuses_blocks_that_cut_rows_and_bad_meta():
    a, b = _r(20, 8), _r(8, 64)
    out = np.empty((20, 64), np.float32)
    cols = G.plan(out, a, b, 2, 2, 1, 16, 16)       # two column blocks: rows cut in half
    rows = G.plan(out, a, b, 2, 2, 0, 1, 4)
    meta = np.zeros(5 + 4 * 2, np.int64)
    meta[2], meta[3] = 20, 64
    with pytest.raises(ValueError, match="column blocks"):
        G.with_row_epilogue(cols, 1, meta, 4)
    d = G.with_row_epilogue(rows, 1, meta, 4)
    assert d[G.D_EKIND] == 1 and d[G.D_EMLEN] == meta.size and d[G.D_ENOPS] == 4
    bad = meta.copy()
    bad[3] = 63
    with pytest.raises(ValueError, match="product's M, N"):
        G.with_row_epilogue(rows, 1, bad, 4)
    with pytest.raises(ValueError, match="meta must be"):
        G.with_row_epilogue(rows, 1, meta.astype(np.int32), 4)


_FIRST_USE = r"""
import sys, threading, time
import numpy as np
import llvmlite.binding as llvm
from neetorch.devices.cpu import gemm_driver as G, llvm_render
made = []
real = llvm.create_mcjit_compiler

def slow(*args, **kw):          # widens the window two first users once both fell into
    made.append(threading.get_ident())
    time.sleep(0.05)
    return real(*args, **kw)
llvm.create_mcjit_compiler = slow
bar = threading.Barrier(4)
res = []

def first_use(k):
    bar.wait()
    if k == 0:                   # the driver's own first use: compile, self-test, a product
        a = np.arange(40 * 30, dtype=np.float32).reshape(40, 30) / 100
        b = np.ones((30, 50), np.float32)
        o = np.empty((40, 50), np.float32)
        ok = G.available() and G.gemm(o, a, b, 2, 4, None, 16, 4) and np.allclose(o, a @ b, rtol=1e-5)
        res.append(("driver", bool(ok)))
    else:
        res.append(("machine", llvm_render._machine()))
ths = [threading.Thread(target=first_use, args=(k,)) for k in range(4)]
[t.start() for t in ths]
[t.join() for t in ths]
tms = {id(r[1]) for r in res if r[0] == "machine"}
print(len(made), len(tms), [r[1] for r in res if r[0] == "driver"])
sys.exit(0 if len(made) == 1 and len(tms) == 1 and res and all(r[1] for r in res if r[0] == "driver") else 1)
"""


def test_first_llvm_use_from_threads_makes_one_engine(tmp_path):
    """Threads making the process's first LLVM kernels at once (the driver's init among them) share
    one MCJIT engine: each used to create its own and the replaced engine was freed with the machine
    code loaded into it (segfaults and std::bad_alloc in scripts whose threads' first calls overlap).
    A fresh process: the engine is made once per process."""
    import subprocess
    env = dict(os.environ, NEE_CACHE_DIR=os.environ.get("NEE_CACHE_DIR", str(tmp_path)))
    r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _FIRST_USE], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, (r.stdout, r.stderr[-3000:])


def test_plan_refuses_shapes_its_blocks_would_run_past():
    """A batch of an operand shorter than the output's (its blocks would read past the operand's end),
    a 4-D product (it would compute the first matrix only), mismatched inner dims and a stride-0
    output batch (every block writing one matrix): a ValueError naming the shapes, not a plan."""
    out = np.empty((4, 8, 6), np.float32)
    with pytest.raises(ValueError, match=r"out\(4, 8, 6\) = a\(2, 8, 5\) @ b\(5, 6\)"):
        G.plan(out, _r(2, 8, 5), _r(5, 6), 2, 4)
    with pytest.raises(ValueError, match="gemm_driver.plan"):
        G.plan(np.empty((2, 4, 8, 6), np.float32), _r(2, 4, 8, 5), _r(2, 4, 5, 6), 2, 4)
    with pytest.raises(ValueError, match="gemm_driver.plan"):
        G.plan(np.empty((8, 6), np.float32), _r(8, 5), _r(4, 6), 2, 4)
    with pytest.raises(ValueError, match="stride-0 batch"):
        G.plan(np.broadcast_to(np.empty((1, 8, 6), np.float32), (4, 8, 6)), _r(4, 8, 5), _r(5, 6), 2, 4)
    d = G.plan(out, _r(1, 8, 5), _r(4, 5, 6), 2, 4)      # a batch of 1 is shared: fine
    assert d is not None and d[G.D_SA] == 0


# a kernel for call jobs: claims indices from p[0] (atomic) up to p[1]; o[i] = 2 x[i]; p[2] counts the
# indices done; with p[3] != 0 the range comes from the meta row instead: (lo, hi) = (p[3], p[4])
_CALL_IR = """
define void @"kernel"(i8* %xi, i8* %oi, i8* %pi) {
entry:
  %x = bitcast i8* %xi to float*
  %o = bitcast i8* %oi to float*
  %p = bitcast i8* %pi to i64*
  %mp = getelementptr i64, i64* %p, i64 3
  %m = load i64, i64* %mp
  %byrow = icmp ne i64 %m, 0
  br i1 %byrow, label %row, label %claim
row:
  %hip = getelementptr i64, i64* %p, i64 4
  %hi = load i64, i64* %hip
  %lo = sub i64 %m, 1
  br label %rloop
rloop:
  %i = phi i64 [ %lo, %row ], [ %i1, %rbody ]
  %more = icmp slt i64 %i, %hi
  br i1 %more, label %rbody, label %done
rbody:
  %xp = getelementptr float, float* %x, i64 %i
  %v = load float, float* %xp
  %w = fmul float %v, 2.0
  %op = getelementptr float, float* %o, i64 %i
  %old = load float, float* %op
  %w2 = fadd float %old, %w
  store float %w2, float* %op
  %i1 = add i64 %i, 1
  br label %rloop
claim:
  %np = getelementptr i64, i64* %p, i64 1
  %n = load i64, i64* %np
  br label %loop
loop:
  %j = atomicrmw add i64* %p, i64 1 seq_cst
  %cmore = icmp slt i64 %j, %n
  br i1 %cmore, label %body, label %done
body:
  %xq = getelementptr float, float* %x, i64 %j
  %u = load float, float* %xq
  %u2 = fmul float %u, 2.0
  %oq = getelementptr float, float* %o, i64 %j
  store float %u2, float* %oq
  %cp = getelementptr i64, i64* %p, i64 2
  %c = atomicrmw add i64* %cp, i64 1 seq_cst
  br label %loop
done:
  ret void
}
"""


@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_call_job_runs_a_self_claiming_kernel_on_every_thread(nthreads):
    """call_plan: the kernel runs once per thread (native workers, no Python pool); its own atomic claims
    share the work: every index exactly once, whoever ran it."""
    from neetorch.devices.cpu import llvm_render
    addr = llvm_render.compile_ir("test_gemm_driver_call_v2", lambda: _CALL_IR)
    d = G.call_plan(addr, 3, nthreads)
    call, dummy = G.epilogue_caller(3), np.zeros(1, np.float32)
    for n in (1, 5, 1000, 200_000):
        x, o = _r(n), np.zeros(n, np.float32)
        p = np.array([0, n, 0, 0, 0], np.int64)
        call(d, dummy, dummy, dummy, x, o, p)
        assert p[2] == n and np.array_equal(o, 2 * x)


def test_call_job_gives_each_task_its_row_of_metas():
    """With last_stride, task t gets row t of the stacked metas: each chunk runs exactly once (the kernel
    adds, so a chunk run twice or skipped shows)."""
    from neetorch.devices.cpu import llvm_render
    addr = llvm_render.compile_ir("test_gemm_driver_call_v2", lambda: _CALL_IR)
    n = 10_007
    bounds = [0, 1, 2000, 2001, 7000, n]
    metas = np.array([[0, 0, 0, lo + 1, hi] for lo, hi in zip(bounds, bounds[1:])], np.int64)
    for nthreads in (1, 2, 3):
        d = G.call_plan(addr, 3, nthreads, len(metas), metas.strides[0])
        x, o = _r(n), np.zeros(n, np.float32)
        G.epilogue_caller(3)(d, x, x, x, x, o, metas)
        assert np.array_equal(o, 2 * x)


@pytest.mark.parametrize("native", [True, False])
def test_large_elementwise_launches_split_on_native_workers(native, monkeypatch):
    """Launches of PARALLEL_THRESHOLD elements and up run their chunks as one driver call job (eager and
    jitted fused groups, norms' row chunks); the Python pool when switched off: identical results."""
    import neetorch as nee
    from neetorch.devices.cpu import elementwise as ew
    monkeypatch.setattr(ew, "NATIVE_CHUNKS", [native])
    monkeypatch.setattr(ew, "_natives", {})
    monkeypatch.setattr(ew, "_launch_cache", {})
    old = nee.get_num_threads()
    nee.set_num_threads(2)
    try:
        xn = _r(1100, 1000)
        x = nee.tensor(xn)
        F = nee.nn.functional
        np.testing.assert_allclose((x * 3 + 1).numpy(), xn * 3 + 1, rtol=1e-6)
        f = nee.jit(lambda x: F.layer_norm(F.silu(x * 2 - 1), (1000,)))
        y = xn * 2 - 1
        y = y / (1 + np.exp(-y))
        want = (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5)
        for _ in range(3):
            np.testing.assert_allclose(f(x).numpy(), want, rtol=2e-4, atol=2e-4)
        assert any(ew._natives.values()) == native
    finally:
        nee.set_num_threads(old)
