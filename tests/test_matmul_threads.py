"""Products split across neetorch's pool (kernels/linalg.py) with BLAS single-threaded
(devices/cpu/threads.py): results against numpy, thread counts respected and restored."""
import threading

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import linalg as L

RNG = np.random.default_rng(0)


def _r(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.fixture
def split_everything(monkeypatch):
    """Every product splits (thresholds at zero), on 3 threads (uneven blocks on any machine)."""
    monkeypatch.setattr(L, "PAR_FLOPS", 0.0)
    monkeypatch.setattr(L, "PAR_BYTES", 0)
    old = threads.get_num_threads()
    threads.set_num_threads(3)
    yield
    threads.set_num_threads(old)


CASES = [
    ((37, 19), (19, 53)),          # odd 2-D, rows < cols: column blocks
    ((101, 7), (7, 5)),            # rows > cols: row blocks
    ((1, 64), (64, 77)),           # vector @ matrix: column blocks of the weight
    ((5, 1), (1, 40)),             # k = 1
    ((3, 29, 11), (11, 31)),       # batch @ matrix, folded into one GEMM
    ((4, 9, 13), (4, 13, 6)),      # batched
    ((2, 1, 9, 13), (3, 13, 6)),   # broadcast batch dims
    ((1, 9, 13), (5, 13, 6)),      # batch of a broadcast
    ((5, 9, 13), (13, 6)),
]


@pytest.mark.parametrize("sa,sb", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_split_matches_numpy(split_everything, sa, sb, dtype):
    a, b = _r(*sa, dtype=dtype), _r(*sb, dtype=dtype)
    out = np.empty(np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1]), dtype)
    L.matmul_into(out, a, b)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    tol = 2e-2 if dtype == np.float16 else 1e-4
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("layout", ["transposed_a", "transposed_b", "sliced", "negative", "out_view"])
def test_split_strided_operands(split_everything, layout):
    a, b = _r(40, 24), _r(24, 70)
    out = np.empty((40, 70), np.float32)
    if layout == "transposed_a":
        a = np.ascontiguousarray(a.T).T
    elif layout == "transposed_b":
        b = np.ascontiguousarray(b.T).T
    elif layout == "sliced":
        a = _r(80, 48)[::2, ::2]
        b = _r(24, 140)[:, 1::2]
    elif layout == "negative":
        a = a[::-1]
        b = b[:, ::-1]
    else:
        big = np.zeros((40, 150), np.float32)
        out = big[:, 3:143:2]            # non-contiguous output
    L.matmul_into(out, a, b)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    if layout == "out_view":
        assert not big[:, :3].any() and not big[:, 4:143:2].any()   # nothing written between


def test_eager_and_jit_matmul_split_match_numpy(split_everything):
    a, b, c = _r(2, 33, 20), _r(20, 45), _r(45)
    ref = (a.astype(np.float64) @ b) + c
    np.testing.assert_allclose(nee.matmul(nee.tensor(a), nee.tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
    f = nee.jit(lambda x, y, z: nee.matmul(x, y) + z)
    for _ in range(2):
        np.testing.assert_allclose(f(nee.tensor(a), nee.tensor(b), nee.tensor(c)).numpy(), ref, rtol=1e-4, atol=1e-4)


def test_split_uses_the_pool_threads(monkeypatch):
    """A large product runs its blocks on set_num_threads threads, not more; 1 thread: no split."""
    monkeypatch.setattr(L, "PAR_FLOPS", 0.0)
    seen = []
    real = L._gemm

    def spy(out, a, b):
        seen.append((threading.get_ident(), out.shape))
        real(out, a, b)
    monkeypatch.setattr(L, "_gemm", spy)
    old = threads.get_num_threads()
    a, b = _r(256, 16), _r(16, 8)
    try:
        for n in (1, 2, 4):
            threads.set_num_threads(n)
            seen.clear()
            out = np.empty((256, 8), np.float32)
            L.matmul_into(out, a, b)
            np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
            blocks = 1 if n == 1 else min(n * L._BLOCKS_PER_THREAD, 256 // L._MIN_ROWS)
            assert len(seen) == blocks                           # row blocks, none lost or repeated
            assert sum(s[0] for _, s in seen) == 256
            assert len({t for t, _ in seen}) <= n                # never more threads than set
    finally:
        threads.set_num_threads(old)


def test_blas_is_single_threaded_inside_and_restored(monkeypatch):
    if L._set_threads_local is None:
        pytest.skip("numpy's OpenBLAS has no openblas_set_num_threads_local")
    seen = []
    real = L._gemm
    monkeypatch.setattr(L, "_gemm", lambda o, a, b: (seen.append(threads.blas_threads()), real(o, a, b)))
    monkeypatch.setattr(L, "_ROWS_ON", False)     # the one-row product below goes to BLAS's gemv
    before = L._set_threads_local(3)
    old = threads.get_num_threads()
    try:
        threads.set_num_threads(1)    # no split: one BLAS call on this thread
        L.matmul_into(np.empty((128, 128), np.float32), _r(128, 64), _r(64, 128))   # gemm
        L.matmul_into(np.empty((1, 128), np.float32), _r(1, 96), _r(96, 128))       # gemv
        assert seen == [1, 1]
        assert threads.blas_threads() == 3                     # the user's setting came back
        with threads.serial_blas():                            # nested blocks restore only at the end
            with threads.serial_blas():
                assert threads.blas_threads() == 1
            assert threads.blas_threads() == 1
        assert threads.blas_threads() == 3
    finally:
        threads.set_num_threads(old)
        L._set_threads_local(before)


def test_run_parallel_runs_each_chunk_once_and_reraises():
    old = threads.get_num_threads()
    threads.set_num_threads(3)
    try:
        got = []
        threads.run_parallel(got.append, list(range(50)))
        assert sorted(got) == list(range(50))

        def boom(c):
            if c == 7:
                raise ValueError("chunk 7")
        with pytest.raises(ValueError, match="chunk 7"):
            threads.run_parallel(boom, list(range(10)))
        # nested: a chunk that splits again does not deadlock on a busy pool
        inner = []
        threads.run_parallel(lambda c: threads.run_parallel(inner.append, [(c, i) for i in range(4)]), list(range(6)))
        assert sorted(inner) == [(c, i) for c in range(6) for i in range(4)]
    finally:
        threads.set_num_threads(old)


def test_split_ranges_and_bad_thread_count():
    assert threads.split(100, 3, 16) == [(0, 48), (48, 80), (80, 100)]
    assert threads.split(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert threads.split(3, 8) == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(ValueError, match="set_num_threads"):
        nee.set_num_threads(0)


# ---------------------------------------------------------------- per-call overhead paths of @nee.jit
def _block(x, w, b):
    h = nee.matmul(x, w) + b                  # matmul epilogue
    y = h.relu() * 2.0
    t = y.transpose(0, 1)                      # a view of an intermediate, returned
    return nee.matmul(y, w.transpose(0, 1)) - x, t, y.sum()


def _ref_block(x, w, b):
    y = np.maximum(x @ w + b, 0) * 2.0
    return y @ w.T - x, y.T, y.sum()


def test_jit_fast_guard_specializes_per_shape_and_dtype():
    f = nee.jit(_block)
    for shape, dt in [((6, 5), np.float32), ((7, 5), np.float32), ((6, 5), np.float64), ((6, 5), np.float32)]:
        x, w, b = _r(*shape, dtype=dt), _r(5, 5, dtype=dt), _r(5, dtype=dt)
        for _ in range(2):
            got = f(nee.tensor(x), nee.tensor(w), nee.tensor(b))
            for g, r in zip(got, _ref_block(x, w, b)):
                assert g.dtype == nee.float32 if dt == np.float32 else g.dtype == nee.float64
                np.testing.assert_allclose(g.numpy(), r, rtol=1e-4, atol=1e-4)
    assert f.stats["specializations"] == 3
    assert f.stats["calls"] == 8 and f.stats["cache_hits"] == 5
    # a non-tensor argument goes through the full guard and still specializes on its value
    g = nee.jit(lambda x, k: x * k)
    x = nee.tensor(_r(3, 4))
    np.testing.assert_allclose(g(x, 2.0).numpy(), x.numpy() * 2.0, rtol=1e-6)
    np.testing.assert_allclose(g(x, 3.0).numpy(), x.numpy() * 3.0, rtol=1e-6)
    assert g.stats["specializations"] == 2


def test_jit_fast_and_profiled_paths_agree_and_outputs_stay_valid():
    f = nee.jit(_block)
    x1, x2, w, b = _r(8, 5), _r(8, 5), _r(5, 5), _r(5)
    r1 = f(nee.tensor(x1), nee.tensor(w), nee.tensor(b))
    r2 = f(nee.tensor(x2), nee.tensor(w), nee.tensor(b))      # reuses the arena: r1 must not change
    for g, r in zip(r1, _ref_block(x1, w, b)):
        np.testing.assert_allclose(g.numpy(), r, rtol=1e-4, atol=1e-4)
    with nee.profiler.profile():                                # the generic (profiling) step loop
        r3 = f(nee.tensor(x2), nee.tensor(w), nee.tensor(b))
    for g, h, r in zip(r2, r3, _ref_block(x2, w, b)):
        np.testing.assert_allclose(g.numpy(), r, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(g.numpy(), h.numpy())


def test_jit_from_two_threads():
    f = nee.jit(_block)
    w, b = _r(5, 5), _r(5)
    xs = [_r(8, 5) for _ in range(8)]
    f(nee.tensor(xs[0]), nee.tensor(w), nee.tensor(b))
    errors = []

    def worker(i):
        try:
            for _ in range(20):
                x = xs[i]
                got = f(nee.tensor(x), nee.tensor(w), nee.tensor(b))
                np.testing.assert_allclose(got[0].numpy(), _ref_block(x, w, b)[0], rtol=1e-4, atol=1e-4)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(len(xs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


def test_set_num_threads_while_another_thread_runs_pooled_work():
    """set_num_threads shuts the pool down; a thread submitting to it at that moment got
    RuntimeError('cannot schedule new futures after shutdown'): it now does the chunks itself."""
    import threading

    from neetorch.devices.cpu import threads as T
    before = T.get_num_threads()
    stop, errs, seen = [False], [], []

    def switch():
        i = 0
        while not stop[0]:
            nee.set_num_threads(2 + i % 2)
            i += 1

    def work():
        try:
            for _ in range(2000):
                got = []
                T.run_parallel(got.append, [0, 1, 2])
                seen.append(sorted(got) == [0, 1, 2])
        except Exception as e:  # noqa: BLE001
            errs.append(repr(e))

    t1, t2 = threading.Thread(target=switch), threading.Thread(target=work)
    t1.start(), t2.start()
    t2.join()
    stop[0] = True
    t1.join()
    nee.set_num_threads(before)
    assert not errs and len(seen) == 2000 and all(seen)
