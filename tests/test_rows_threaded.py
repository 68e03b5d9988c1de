"""The few-row product kernel split across threads (kernels/linalg.py ``_rows_threaded``: tasks of output
columns / matrices of a batch run by gemm_driver's native workers) and the threaded cat (kernels/shape.py
``_cat_native``), against numpy, on 1-3 threads, at odd sizes and in every layout the kernel takes."""
import multiprocessing
import os
import sys

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F
from neetorch.devices.cpu import gemm_driver as G
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import linalg as L
from neetorch.devices.cpu.kernels import shape as S

pytestmark = pytest.mark.skipif(sys.platform != "linux" or os.uname().machine not in G._SYS_FUTEX or
                                G._blas_fns() is None, reason="no gemm driver here (not Linux / no ILP64 OpenBLAS)")

RNG = np.random.default_rng(0)


def _r(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.fixture(params=[1, 2, 3], ids=["1thread", "2threads", "3threads"])
def nthreads(request, monkeypatch):
    """Every few-row product the kernel takes, split from 0 bytes on 2+ threads (its thresholds at their minimum)."""
    monkeypatch.setattr(L, "DRV_GEMV_BYTES", 0)
    monkeypatch.setattr(L, "ROWS_MIN_N", 1)
    monkeypatch.setattr(L, "ROWS_MIN_K", 1)
    monkeypatch.setattr(L, "ROWS_MULTI_MIN_BYTES", 0)
    monkeypatch.setattr(L, "_rows_plans", {})
    monkeypatch.setattr(S, "CAT_PAR_BYTES", 0)
    monkeypatch.setattr(S, "_cat_plans", {})
    old = threads.get_num_threads()
    nee.set_num_threads(request.param)
    yield request.param
    nee.set_num_threads(old)


def _plan_of(out, a, b):
    key = (out.shape, out.strides, a.shape, a.strides, b.shape, b.strides, out.dtype, a.dtype, b.dtype,
           threads.NUM_THREADS)
    return L._rows_plans.get(key)


def _check(a, b, nt, split=True, out=None):
    """out = a @ b through matmul_into == numpy (float64 reference); on 2+ threads the product must have
    been cut into tasks (``split``; None: by the kernel's rule) or not."""
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    if out is None:
        out = np.full(shape, np.nan, a.dtype)
    L.matmul_into(out, a, b)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    tol = 1e-4 if a.dtype == np.float32 else 1e-11
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * max(1.0, np.sqrt(a.shape[-1])))
    plan = _plan_of(out, a, b)
    threaded = bool(plan) and plan[4] is not None and hasattr(plan[4], "tasks")
    if split is None:
        # the rule: batches are cut into groups of matrices; one matrix into column blocks only when it is
        # column-major (mode 1: dot products) and has 2+ blocks of _COL_ALIGN columns
        assert plan, (a.shape, b.shape)
        mode, nb, N = int(plan[1][0]), int(plan[1][1]), int(plan[1][4])
        split = nb >= 2 or (mode == 1 and N > L._COL_ALIGN)
    assert threaded == (split and nt > 1), (a.shape, a.strides, b.shape, b.strides, nt)
    if threaded:
        # the tasks cover every (matrix, column) of the product exactly once
        t = plan[4].tasks
        nb, N = int(plan[1][1]), int(plan[1][4])
        cover = np.zeros((nb, N), np.int64)
        for b0, b1, n0, n1 in t[:, L._RD_B0:L._RD_N1 + 1]:
            cover[b0:b1, n0:n1] += 1
        assert (cover == 1).all()
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 2, 3, 4])
@pytest.mark.parametrize("k,n", [(1, 37), (17, 1), (5, 3), (37, 65), (130, 3), (3, 300), (64, 1031), (301, 47)])
def test_one_matrix_matches_numpy(nthreads, dtype, rows, k, n):
    """Column-major b (a weight's .T: dot products, cut into column blocks) and row-major b (axpy of b's
    rows: whole matrices only, so one matrix is not cut) at sizes off the vector width and the blocks."""
    a, b = _r(rows, k, dtype=dtype), _r(k, n, dtype=dtype)
    _check(a, np.asfortranarray(b), nthreads, split=None)
    _check(a, b, nthreads, split=None)
    if k > 1 and n > L._COL_ALIGN:
        _check(a, np.asfortranarray(b), nthreads, split=True)     # dot products: cut into column blocks
        _check(a, b, nthreads, split=False)                       # axpy rows: one matrix, not cut


def test_one_column_products(nthreads):
    """(n, k) @ (k, 1) runs as the one-row product of the transposes; cut over its n outputs."""
    for dtype in (np.float32, np.float64):
        a, v = _r(203, 77, dtype=dtype), _r(77, 1, dtype=dtype)
        _check(a, v, nthreads, split=True)                        # a row-major: dot products of a's rows
        _check(np.asfortranarray(a), v, nthreads, split=False)    # a column-major: one axpy matrix, not cut


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batches_match_numpy(nthreads, dtype):
    """Batched few-row products (attention against a KV cache): groups of matrices per task, and column
    blocks too when there are fewer matrices than tasks; broadcast and transposed operands."""
    q = _r(1, 12, 1, 32, dtype=dtype)
    k = _r(1, 12, 37, 32, dtype=dtype)
    _check(q, k.transpose(0, 1, 3, 2), nthreads)                  # q @ k^T: dot products per head
    p, v = _r(1, 12, 1, 37, dtype=dtype), _r(1, 12, 37, 70, dtype=dtype)
    _check(p, v, nthreads)                                        # p @ v: row-major, matrices per task
    _check(_r(2, 3, 45, dtype=dtype), _r(2, 45, 130, dtype=dtype).transpose(0, 2, 1).copy().transpose(0, 2, 1),
           nthreads)                                              # 2 matrices, 3 rows, fewer than the tasks
    _check(_r(5, 1, 40, dtype=dtype), _r(40, 90, dtype=dtype).T.copy().T, nthreads)   # one shared matrix
    _check(_r(1, 40, dtype=dtype), np.broadcast_to(_r(40, 33, dtype=dtype), (4, 40, 33)), nthreads)


def test_strided_operands(nthreads):
    """Sliced rows / columns, a transposed (column-major) activation, an output view inside a larger array."""
    w = _r(130, 60)
    _check(_r(2, 60), w[::2].T, nthreads)                         # b^T rows 2 apart: column-major, ld 120
    _check(_r(60, 3)[:, 1:2].T, _r(60, 90), nthreads, split=False)    # a with element stride 3: axpy, one matrix
    _check(_r(60, 3)[:, 1:2].T, np.asfortranarray(_r(60, 90)), nthreads, split=False)  # no unit stride along k: BLAS
    _check(_r(3, 200)[:, ::2][:, :60], np.asfortranarray(_r(60, 90)), nthreads, split=False)  # x strided: BLAS
    big = np.full((4, 200), np.nan, np.float32)
    out = big[1:3, 10:110]                                        # an output inside a larger array
    _check(_r(2, 60), np.asfortranarray(_r(60, 100)), nthreads, out=out)
    assert np.isnan(big[0]).all() and np.isnan(big[3]).all() and np.isnan(big[1:3, :10]).all() \
        and np.isnan(big[1:3, 110:]).all()


def test_output_over_an_input_is_not_taken(nthreads):
    """An output overlapping an input: numpy's path (the kernel would read what it wrote)."""
    buf = _r(1, 200)
    a = buf[:, :64]
    b = np.asfortranarray(_r(64, 100))
    ref = a.astype(np.float64) @ b
    L.matmul_into(buf[:, 50:150], a, b)
    np.testing.assert_allclose(buf[:, 50:150], ref, rtol=1e-4, atol=1e-4)


def test_nan_and_inf_propagate(nthreads):
    a, b = _r(1, 50), np.asfortranarray(_r(50, 70))
    a[0, 3] = np.nan
    b[7, 5] = np.inf
    out = np.zeros((1, 70), np.float32)
    L.matmul_into(out, a, b)
    assert np.isnan(out).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_jit_linears_with_epilogues(nthreads, dtype):
    """A decoder step's linears in a compiled graph (bound steps call the kernel straight): with a bias +
    gelu epilogue, a residual + layer_norm one, and none; nn.Linear's layout (x @ W^T)."""
    dt = getattr(nee, dtype)
    w1, b1 = nee.randn(97, 40, dtype=dt), nee.randn(97, dtype=dt)
    w2, b2 = nee.randn(40, 97, dtype=dt), nee.randn(40, dtype=dt)
    g, beta = nee.randn(40, dtype=dt), nee.randn(40, dtype=dt)

    def step(x):
        h = F.gelu(F.linear(x, w1, b1))
        y = F.layer_norm(F.linear(h, w2, b2) + x, (40,), g, beta)
        return y, F.linear(y, w1)
    f = nee.jit(step)
    tol = 1e-4 if dtype == "float32" else 1e-10
    for rows in (1, 3, 1):
        x = nee.randn(rows, 40, dtype=dt)
        for got, ref in zip(f(x), f.eager(x)):
            np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=tol, atol=tol)
    if nthreads > 1:
        assert any(p and p[4] is not None and hasattr(p[4], "tasks") for p in L._rows_plans.values())


def test_concurrent_callers(nthreads):
    """Threaded products from several Python threads at once (one driver job at a time: the others run
    their tasks serially); every result right."""
    import threading
    ws = [np.asfortranarray(_r(64, 300)) for _ in range(3)]
    xs = [_r(1, 64) for _ in range(3)]
    errs = []

    def work(i):
        out = np.empty((1, 300), np.float32)
        for _ in range(50):
            L.matmul_into(out, xs[i], ws[i])
            errs.append(float(np.abs(out - xs[i].astype(np.float64) @ ws[i]).max()))
    ts = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(errs) == 150 and max(errs) < 1e-3


def _child(q):
    try:
        nee.set_num_threads(2)
        a, b = _r(1, 64), np.asfortranarray(_r(64, 300))
        out = np.empty((1, 300), np.float32)
        L.matmul_into(out, a, b)       # the parent's plan: the state cell points at the child's state
        L._rows_plans.clear()
        out2 = np.empty((1, 300), np.float32)
        L.matmul_into(out2, a, b)      # a fresh plan (its workers started in the child)
        q.put(max(float(np.abs(out - a @ b).max()), float(np.abs(out2 - a @ b).max())))
    except BaseException as e:   # noqa: BLE001 - reported to the parent
        q.put(repr(e))


def test_fork_child(nthreads):
    """A forked child runs threaded products with plans made in the parent (the driver's new state)."""
    if nthreads < 2:
        pytest.skip("threaded products only")
    _check(_r(1, 64), np.asfortranarray(_r(64, 300)), nthreads)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    err = q.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0 and isinstance(err, float) and err < 1e-3, err


# ---------------------------------------------------------------- cat
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.int8, np.bool_])
def test_cat_matches_numpy(nthreads, dtype):
    """Pieces copied by tasks (row blocks, byte blocks within rows) == np.concatenate, along the first, a
    middle and the last dim, with empty pieces, odd sizes and pieces from strided views."""
    def arr(*shape):
        x = RNG.standard_normal(shape)
        return (x > 0) if dtype == np.bool_ else (x * 10).astype(dtype)
    cases = [([arr(2, 3, 17, 8), arr(2, 3, 1, 8)], 2),                 # a KV cache append
             ([arr(1, 12, 33, 5), arr(1, 12, 0, 5), arr(1, 12, 2, 5)], 2),
             ([arr(7, 13), arr(5, 13)], 0),                             # whole-array pieces: byte blocks
             ([arr(3, 1001), arr(3, 7), arr(3, 64)], 1),                # last dim: rows of bytes
             ([arr(4, 6, 9)[:, ::2], arr(4, 2, 9)], 1),                 # a strided piece (outer stride 2 rows)
             ([arr(2, 5, 4)[::-1], arr(2, 5, 4)], 0)]                   # a reversed piece: numpy's copy
    for pieces, d in cases:
        ref = np.concatenate(pieces, axis=d)
        got = nee.cat([nee.tensor(p) for p in pieces], d).numpy()        # the public op
        np.testing.assert_array_equal(got, ref)
        assert got.dtype == np.dtype(dtype)
        out = np.zeros(ref.shape, ref.dtype)                              # the kernel on the arrays as they are
        S.cat_kernel(None, [out], pieces, {"dim": d})
        np.testing.assert_array_equal(out, ref)
    native = [v for v in S._cat_plans.values() if v]
    assert bool(native) == (nthreads > 1)


def test_cat_into_strided_output_and_casts(nthreads):
    """Outputs that are not whole rows, and a piece of another dtype: numpy's copy (same results)."""
    a, b = _r(3, 4, 5), _r(3, 2, 5).astype(np.float64)
    out = np.full((3, 6, 5), np.nan, np.float32)
    S.cat_kernel(None, [out], [a, b], {"dim": 1})
    np.testing.assert_array_equal(out, np.concatenate([a, b.astype(np.float32)], 1))
    big = np.full((3, 6, 10), np.nan, np.float32)
    view = big[:, :, ::2]
    S.cat_kernel(None, [view], [a, _r(3, 2, 5)], {"dim": 1})
    assert np.isnan(big[:, :, 1::2]).all() and not np.isnan(view).any()
    assert not any(S._cat_plans.values())


def test_cat_tasks_cover_the_output(nthreads):
    """Every byte of the output written exactly once (a NaN-filled output, pieces without NaNs), with more
    tasks than rows."""
    if nthreads < 2:
        pytest.skip("threaded cat only")
    for rows, widths in ((1, (1000, 3, 517)), (2, (4096, 1)), (5, (33, 64, 7))):
        pieces = [_r(rows, w) for w in widths]
        out = np.full((rows, sum(widths)), np.nan, np.float32)
        S.cat_kernel(None, [out], pieces, {"dim": 1})
        np.testing.assert_array_equal(out, np.concatenate(pieces, 1))
