"""One-row products against frozen weights through kernels/gemv.py (packed column panels, one stream per
thread): the kernel against numpy float64 on odd / non-vector-multiple sizes, both dtypes, 1 and 2 threads;
which products take it (frozen 2-D weights in C or Fortran order, one output row in all) and which do not
(an unfrozen or batched weight, several rows, an output over an input); and that compiled graphs (``nee.jit``
frozen constants, an ONNX decoder step) run their one-row products through it with the same results as the
path without it."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import gemv, linalg, winograd


def _frozen(a):
    assert winograd.freeze(a)
    return a


def _check(y, x, w, dt):
    want = x.astype(np.float64) @ w.astype(np.float64)
    tol = 1e-5 if dt == np.float32 else 1e-12
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol * max(np.abs(want).max(), 1.0))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("K,N", [(384, 1152), (1, 1), (7, 5), (33, 1), (100, 129), (17, 64), (65, 200),
                                 (1536, 97), (40, 336), (9, 20)])
def test_kernel_matches_numpy(nthreads, dt, K, N, monkeypatch):
    monkeypatch.setattr(gemv, "PAR_BYTES", 1)        # split every product that has 2+ panels
    rng = np.random.default_rng(K * 1000 + N)
    for order in ("C", "F"):                          # row-major W, and W^T's rows (a transposed weight)
        w = np.asarray(rng.standard_normal((K, N)), dt, order=order)
        x = rng.standard_normal((1, K)).astype(dt)
        wp = gemv.pack(w)
        full, P, Pt = gemv._widths(N, np.dtype(dt))
        assert full * P + Pt - N < 64 // np.dtype(dt).itemsize and (Pt == 0) == (N % P == 0)
        assert wp.ctypes.data % 64 == 0 and wp.shape == (K * (full * P + Pt),)
        np.testing.assert_array_equal(wp[:full * K * P].reshape(full, K, P),
                                      w[:, :full * P].reshape(K, full, P).transpose(1, 0, 2))
        g = gemv._bind(wp, K, N, None)
        top = g.gemv[1]
        assert bool(top[gemv._D_THR]) == (nthreads > 1 and full > 1)
        y = np.full((1, N), np.nan, dt)
        g(y, x, w)
        _check(y, x, w, dt)
        # the output's neighbours are not written (the last panel's padding columns are not stored)
        big = np.full(N + 3, np.nan, dt)
        g(big[1:N + 1].reshape(1, N), x, w)
        assert np.isnan(big[0]) and np.isnan(big[N + 1:]).all()
        _check(big[1:N + 1].reshape(1, N), x, w, dt)


def test_nan_and_inf_propagate():
    w = np.ones((20, 70), np.float32)
    x = np.ones((1, 20), np.float32)
    x[0, 3] = np.nan
    g = gemv._bind(gemv.pack(w), 20, 70, None)
    y = np.zeros((1, 70), np.float32)
    g(y, x, w)
    assert np.isnan(y).all()
    x[0, 3] = np.inf
    g(y, x, w)
    assert np.isposinf(y).all()


def test_which_products_take_it(nthreads):
    rng = np.random.default_rng(1)
    K, N = 96, 130
    wc = _frozen(rng.standard_normal((K, N)).astype(np.float32))
    wf = _frozen(np.asfortranarray(rng.standard_normal((K, N)).astype(np.float32)))
    x, x3 = rng.standard_normal((1, K)).astype(np.float32), rng.standard_normal((1, 1, K)).astype(np.float32)
    y, y3 = np.empty((1, N), np.float32), np.empty((1, 1, N), np.float32)
    for w in (wc, wf):
        for xx, yy in ((x, y), (x3, y3)):
            g = linalg._rows_caller(yy, xx, w)          # (the compiled steps' product binder)
            assert getattr(g, "gemv", None) is not None
            yy[...] = np.nan
            g(yy, xx, w)
            _check(yy.reshape(1, N), xx.reshape(1, K), w, np.float32)
    # another weight of the same layout given to the bound caller: not the packed one's values
    other = rng.standard_normal((K, N)).astype(np.float32)
    g = gemv.caller(y, x, wc)
    g(y, x, other)
    _check(y, x, other, np.float32)
    # not taken: an unfrozen weight, two rows, a batch of weights, float16, an output over an input, a
    # non-contiguous weight, off
    assert gemv.caller(y, x, rng.standard_normal((K, N)).astype(np.float32)) is None
    assert gemv.caller(np.empty((2, N), np.float32), np.ones((2, K), np.float32), wc) is None
    assert gemv.caller(np.empty((2, 1, N), np.float32), np.ones((2, 1, K), np.float32), wc) is None
    wb = _frozen(rng.standard_normal((2, K, N)).astype(np.float32))
    assert gemv.caller(np.empty((2, 1, N), np.float32), np.ones((2, 1, K), np.float32), wb) is None
    # panels much wider than the weight (padding read as weight): N under a vector, or just above panels
    for n in (5, 65, 17):
        wn = _frozen(rng.standard_normal((K, n)).astype(np.float32))
        assert gemv.caller(np.empty((1, n), np.float32), x, wn) is None
    w16 = _frozen(rng.standard_normal((K, N)).astype(np.float16))
    assert gemv.caller(np.empty((1, N), np.float16), np.ones((1, K), np.float16), w16) is None
    buf = _frozen(rng.standard_normal((K + 1, N)).astype(np.float32))
    assert gemv.caller(buf[K:], np.ones((1, K), np.float32), buf[:K]) is None
    assert gemv.caller(y, x, _frozen(rng.standard_normal((K, 2 * N)).astype(np.float32))[:, ::2]) is None
    gemv._ON[0] = False
    try:
        assert gemv.caller(y, x, wc) is None
    finally:
        gemv._ON[0] = True


def test_jit_frozen_linear_takes_it(nthreads):
    """nee.jit(freeze=True): a captured weight read by one-row products becomes a frozen constant (laid out
    column-major by passes.freeze_constants), packed once; results as the eager function's over new inputs."""
    rng = np.random.default_rng(2)
    lin1, lin2 = nee.nn.Linear(72, 300), nee.nn.Linear(300, 48)

    def fn(x):
        return lin2(nee.nn.functional.gelu(lin1(x)))
    f = nee.jit(fn, freeze=True)
    before = gemv.stats["calls_bound"]
    for _ in range(3):
        x = nee.tensor(rng.standard_normal((1, 1, 72)).astype(np.float32))
        got = f(x).numpy()
        w1, b1 = lin1.weight.numpy().astype(np.float64), lin1.bias.numpy().astype(np.float64)
        w2, b2 = lin2.weight.numpy().astype(np.float64), lin2.bias.numpy().astype(np.float64)
        h = x.numpy().astype(np.float64) @ w1.T + b1
        from math import erf, sqrt
        h = h * 0.5 * (1 + np.vectorize(erf)(h / sqrt(2)))
        np.testing.assert_allclose(got, h @ w2.T + b2, rtol=2e-5, atol=2e-5)
    assert gemv.stats["calls_bound"] - before == 2           # both products, bound once


def test_onnx_decoder_step_takes_it(nthreads):
    """The ONNX GPT-style step (bench/onnx_vs_ort.py gpt_step, tiny): its 4 one-row products per layer run
    through the packed kernel; outputs equal to the session without it and close to onnxruntime's."""
    pytest.importorskip("onnx")
    from asv_benchmarks import _onnx_models as M
    spec = M.spec("gpt_step", tiny=True)
    before = gemv.stats["calls_bound"]
    sess = M.nee_session(spec.model, nthreads)
    got = sess.run(None, spec.feed)
    assert gemv.stats["calls_bound"] - before == 4 * spec.info["layers"]
    gemv._ON[0] = False
    try:
        ref = M.nee_session(spec.model, nthreads).run(None, spec.feed)
    finally:
        gemv._ON[0] = True
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    ort = pytest.importorskip("onnxruntime")
    oref = M.ort_session(spec.model, nthreads).run(None, spec.feed)
    assert ort is not None and spec.close(got, oref)


def test_packed_bytes_capped(monkeypatch):
    """Past MAX_PACKED_BYTES of live packed copies a new frozen weight is not packed (linalg's paths)."""
    import gc
    gc.collect()                            # (copies of earlier tests' weights gone first)
    rng = np.random.default_rng(3)
    w = _frozen(rng.standard_normal((64, 64)).astype(np.float32))
    x, y = np.ones((1, 64), np.float32), np.empty((1, 64), np.float32)
    monkeypatch.setattr(gemv, "MAX_PACKED_BYTES", gemv._live[0] + w.nbytes - 1)
    assert gemv.caller(y, x, w) is None
    w2 = _frozen(rng.standard_normal((64, 64)).astype(np.float32))
    monkeypatch.setattr(gemv, "MAX_PACKED_BYTES", gemv._live[0] + w2.nbytes)
    live = gemv._live[0]
    g = gemv.caller(y, x, w2)
    assert g is not None and gemv._live[0] == live + w2.nbytes
    g(y, x, w2)
    _check(y, x, w2, np.float32)
    del g
    w2 = None
    gc.collect()
    assert gemv._live[0] == live            # the copy went with its weight


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_jit_frozen_matmul_layouts(nthreads, dt):
    """A captured weight used as ``x @ w`` and as ``x @ w.T`` (row-major and transposed), 1-D bias, float32
    and float64, one query row of a (1, 1, K) batch: packed once each, results as numpy's float64."""
    rng = np.random.default_rng(4)
    K, N = 130, 77
    w = nee.tensor(rng.standard_normal((K, N)).astype(dt))
    wt = nee.tensor(rng.standard_normal((N, K)).astype(dt))
    bias = nee.tensor(rng.standard_normal(N).astype(dt))

    def fn(x):
        return x @ w + bias, x @ wt.T
    f = nee.jit(fn, freeze=True)
    before = gemv.stats["calls_bound"]
    for _ in range(3):
        x = rng.standard_normal((1, 1, K)).astype(dt)
        y1, y2 = f(nee.tensor(x))
        x64 = x.astype(np.float64)
        tol = 2e-5 if dt == np.float32 else 1e-12
        np.testing.assert_allclose(y1.numpy(), x64 @ w.numpy().astype(np.float64) + bias.numpy(), rtol=tol,
                                   atol=tol * 10)
        np.testing.assert_allclose(y2.numpy(), x64 @ wt.numpy().astype(np.float64).T, rtol=tol, atol=tol * 10)
    assert gemv.stats["calls_bound"] - before == 2


def test_thread_count_change_rebinds():
    """A compiled step bound on 2 threads, then run on 1 and on 2 again: bound anew each time (the packed
    copy reused: packed once), same results."""
    rng = np.random.default_rng(5)
    w = nee.tensor(rng.standard_normal((256, 320)).astype(np.float32))
    f = nee.jit(lambda x: x @ w, freeze=True)
    x = rng.standard_normal((1, 256)).astype(np.float32)
    want = x.astype(np.float64) @ w.numpy().astype(np.float64)
    old = nee.get_num_threads()
    packed = gemv.stats["packed"]
    try:
        for nt in (2, 1, 2):
            nee.set_num_threads(nt)
            before = gemv.stats["calls_bound"]
            for _ in range(2):
                np.testing.assert_allclose(f(nee.tensor(x)).numpy(), want, rtol=2e-5, atol=2e-4)
            assert gemv.stats["calls_bound"] - before == 1
    finally:
        nee.set_num_threads(old)
    assert gemv.stats["packed"] - packed == 1
