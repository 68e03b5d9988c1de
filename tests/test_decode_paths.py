"""The decoder-step paths of the CPU kernels: few-row products read in memory order
(kernels/linalg.py ``_rows_product``) and ``cat`` (kernels/shape.py), against numpy."""
import threading

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import linalg as L

RNG = np.random.default_rng(0)


def _r(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


CALLS: list = []      # one entry per run of the few-row kernel (the spy below)


@pytest.fixture(autouse=True)
def spy_on_the_kernel(monkeypatch):
    real = [L._rows_kernel(0), L._rows_kernel(1)]
    monkeypatch.setattr(L, "_rows_fns", [lambda *args, f=f: (CALLS.append(1), f(*args))[1] for f in real])
    monkeypatch.setattr(L, "_rows_plans", {})      # plans made from here hold the spies
    CALLS.clear()


@pytest.fixture
def every_size(monkeypatch, nthreads):
    """The few-row kernel for every size (its thresholds at their minimum; products never split across the
    driver's workers, which take matrices from DRV_GEMV_BYTES on two threads)."""
    monkeypatch.setattr(L, "DRV_GEMV_BYTES", 1 << 40)
    monkeypatch.setattr(L, "ROWS_MIN_N", 1)
    monkeypatch.setattr(L, "ROWS_MIN_K", 1)
    monkeypatch.setattr(L, "ROWS_MULTI_MIN_BYTES", 0)
    return nthreads


def _check(a, b, out=None, taken=True, tol=None):
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    if out is None:
        out = np.full(shape, np.nan, a.dtype)
    before = len(CALLS)
    L.matmul_into(out, a, b)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    tol = tol or (1e-4 if a.dtype == np.float32 else 1e-11)
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * max(1.0, np.sqrt(a.shape[-1])))
    assert (len(CALLS) > before) == taken, (a.shape, a.strides, b.shape, b.strides)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 2, 3, 4])
@pytest.mark.parametrize("k,n", [(1, 1), (1, 17), (17, 1), (5, 3), (37, 65), (130, 3), (3, 300), (64, 4100)])
def test_few_rows_match_numpy(every_size, dtype, rows, k, n):
    a, b = _r(rows, k, dtype=dtype), _r(k, n, dtype=dtype)
    _check(a, b)                                       # b row-major: rows of b added into the output
    _check(a, np.asfortranarray(b))                    # b column-major (a weight's .T): dot products


@pytest.mark.parametrize("layout", ["b_rows_sliced", "b_cols_sliced", "a_sliced", "out_view", "a_transposed",
                                    "zero_stride_b", "negative"])
def test_few_rows_strided_operands(every_size, layout):
    a, b = _r(3, 40), _r(40, 70)
    out, taken = None, True
    if layout == "b_rows_sliced":
        b = _r(80, 70)[::2]                            # row stride 2 rows: still unit along N
    elif layout == "b_cols_sliced":
        b = _r(40, 140)[:, ::2]                        # no unit stride: BLAS's path (numpy copies it)
        taken = False
    elif layout == "a_sliced":
        a = _r(3, 80)[:, ::2]                          # x read with its stride
    elif layout == "a_transposed":
        a = np.ascontiguousarray(a.T).T
    elif layout == "zero_stride_b":
        b = np.broadcast_to(_r(1, 70), (40, 70))       # every row the same, stride 0 along K
    elif layout == "negative":
        b = b[::-1]
        taken = False
    else:
        big = np.zeros((3, 150), np.float32)
        out = big[:, 3:143:2]                          # output with a stride along N: the dot form
        b = np.asfortranarray(b)
    _check(a, b, out, taken=taken)
    if layout == "out_view":
        assert not big[:, :3].any() and not big[:, 4:143:2].any()      # nothing written between


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sa,sb", [
    ((2, 3, 1, 32), (2, 3, 32, 45)),       # attention's p @ v shape, odd lengths
    ((4, 1, 9), (4, 9, 70)),
    ((2, 1, 2, 13), (3, 13, 66)),          # broadcast on both sides: no one batch stride, BLAS's path
    ((1, 2, 13), (5, 13, 66)),             # a broadcast over the batch (stride 0)
    ((5, 3, 13), (13, 66)),                # one b for every batch matrix
    ((1, 3, 2, 13), (1, 3, 13, 66)),       # size-1 batch dims drop out
])
def test_few_rows_batched(every_size, dtype, sa, sb):
    a, b = _r(*sa, dtype=dtype), _r(*sb, dtype=dtype)
    taken = sa[:2] != (2, 1)            # (mixed broadcasting: one stride cannot step through the batch)
    _check(a, b, taken=taken)
    _check(a, np.swapaxes(np.ascontiguousarray(np.swapaxes(b, -1, -2)), -1, -2), taken=taken)   # column-major b


def test_attention_products_without_copies(every_size):
    """q @ k^T with k^T a transposed view of the cache, and p @ v, in one call per batch."""
    k, v = _r(2, 3, 45, 32), _r(2, 3, 45, 32)
    q, p = _r(2, 3, 1, 32), _r(2, 3, 1, 45)
    _check(q, k.transpose(0, 1, 3, 2))
    _check(p, v)
    _check(q, k[:, :, :40].transpose(0, 1, 3, 2))     # a slice of the cache along the sequence


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_column_products(every_size, dtype):
    """(n, k) @ (k, 1): the transposed problem, one row."""
    for a in (_r(50, 20, dtype=dtype), np.asfortranarray(_r(50, 20, dtype=dtype)), _r(3, 50, 20, dtype=dtype)):
        b = _r(*a.shape[:-2], 20, 1, dtype=dtype)
        _check(a, b)           # (a column-major a is a row-major a^T: rows of a^T added into out^T)


def test_empty_and_degenerate(every_size):
    for sa, sb in [((1, 0), (0, 5)), ((0, 4), (4, 3)), ((1, 4), (4, 0)), ((0, 1, 4), (4, 6))]:
        a, b = _r(*sa), _r(*sb)
        out = np.full(np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1]), np.nan, np.float32)
        L.matmul_into(out, a, b)
        np.testing.assert_array_equal(out, np.matmul(a, b))


def test_nan_and_inf_propagate(every_size):
    a, b = np.ones((1, 100), np.float32), np.ones((100, 70), np.float32)
    b[3, 5], b[4, 6], b[5, 7], b[6, 7] = np.nan, np.inf, -np.inf, np.inf
    for bb in (b, np.asfortranarray(b)):
        out = np.empty((1, 70), np.float32)
        L.matmul_into(out, a, bb)
        assert np.isnan(out[0, 5]) and out[0, 6] == np.inf and np.isnan(out[0, 7])
        assert np.all(out[0, 8:] == 100)


def test_output_with_overlapping_elements_keeps_numpys_path(every_size):
    a, b = _r(2, 30), _r(30, 70)
    out = np.lib.stride_tricks.as_strided(np.zeros(70, np.float32), (2, 70), (0, 4))   # both rows one memory
    L.matmul_into(out, a, b)
    assert not CALLS
    ref = a @ b                                        # (numpy writes one of the rows last)
    assert np.allclose(out[0], ref[0], rtol=1e-4, atol=1e-4) or np.allclose(out[0], ref[1], rtol=1e-4, atol=1e-4)


def test_output_over_an_input_is_not_overwritten_while_read(every_size):
    buf = _r(1, 64)
    b = _r(64, 64)
    ref = buf @ b
    L.matmul_into(buf, buf, b)                         # numpy's path: it copies the overlap
    np.testing.assert_allclose(buf, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float16])
def test_other_dtypes_keep_their_path(every_size, dtype):
    a = (RNG.integers(-5, 6, (2, 30)) if np.dtype(dtype).kind == "i" else _r(2, 30)).astype(dtype)
    b = (RNG.integers(-5, 6, (30, 70)) if np.dtype(dtype).kind == "i" else _r(30, 70)).astype(dtype)
    out = np.empty((2, 70), dtype)
    L.matmul_into(out, a, b)
    tol = 2e-2 if dtype == np.float16 else 0
    np.testing.assert_allclose(out.astype(np.float64), a.astype(np.float64) @ b, rtol=tol, atol=tol * 10)
    assert not CALLS


def test_default_thresholds(nthreads):
    """Which products take the kernel with the shipped settings (see the notes in linalg.py)."""
    w = _r(384, 1536)
    one = nthreads == 1      # from DRV_GEMV_BYTES (256 KiB) of matrix, 2+ threads split it across the driver
    _check(_r(1, 1, 384), w, taken=one)                # a decoder step's linear (2.4 MB): taken on one thread
    _check(_r(1, 1, 384), np.ascontiguousarray(w.T).T)
    _check(_r(1, 1, 384), _r(384, 160))                # 240 KB: taken
    _check(_r(1, 12, 1, 64), _r(1, 12, 64, 513))       # 64-wide heads: taken
    _check(_r(1, 12, 1, 32), _r(1, 12, 513, 32).transpose(0, 1, 3, 2))      # q @ k^T, 32-wide heads: taken
    _check(_r(1, 12, 1, 513), _r(1, 12, 513, 32), taken=not one)                  # p @ v, 32-wide heads: BLAS
    _check(_r(1, 12, 1, 8), _r(1, 12, 513, 8).transpose(0, 1, 3, 2), taken=False)
    _check(_r(2, 64), _r(64, 64), taken=False)         # 2 rows of a small (cached) matrix: BLAS's gemm
    _check(_r(2, 384), w, taken=one)                   # 2 rows of a 2.4 MB one: taken on one thread
    _check(_r(5, 384), w, taken=False)                 # more than ROWS_MAX rows
    big = _r(1024, 1100)                               # one matrix from PAR_BYTES on 2+ threads: split paths
    _check(_r(1, 1024), big, taken=nthreads == 1)


def test_through_the_public_api_and_jit(nthreads):
    x, w, bias = _r(1, 384), _r(384, 160), _r(160)   # 240 KB: under DRV_GEMV_BYTES, the few-row kernel
    ref = x.astype(np.float64) @ w + bias
    np.testing.assert_allclose(nee.matmul(nee.tensor(x), nee.tensor(w)).numpy(), x @ w, rtol=1e-4, atol=1e-4)
    assert len(CALLS) == 1
    lin = nee.jit(lambda a, b, c: nee.matmul(a, b) + c)     # the product feeds a fused epilogue
    for _ in range(2):
        np.testing.assert_allclose(lin(nee.tensor(x), nee.tensor(w), nee.tensor(bias)).numpy(), ref,
                                   rtol=1e-4, atol=1e-4)
    assert len(CALLS) == 3                                 # the jit's product ran it too
    wt = nee.tensor(np.ascontiguousarray(w.T))             # nn.Linear's layout: x @ W^T
    np.testing.assert_allclose(nee.matmul(nee.tensor(x), wt.transpose(0, 1)).numpy(), x @ w, rtol=1e-4, atol=1e-4)
    assert len(CALLS) == 4


# ---------------------------------------------------------------- cat (the KV cache's append)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.int32, np.bool_])
def test_kv_cache_cat_matches_numpy(nthreads, dtype):
    """past (B, H, P, dh) + new (B, H, 1, dh) along the sequence, contiguous or not, with empty pieces."""
    def arr(*shape):
        x = RNG.standard_normal(shape)
        return (x > 0) if dtype == np.bool_ else (x * 10).astype(dtype)
    past, new = arr(2, 3, 17, 8), arr(2, 3, 1, 8)
    cases = [(past, new),
             (np.ascontiguousarray(past.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2), new),   # strided past
             (past[:, :, ::2], new),                                                          # every other row
             (arr(2, 3, 0, 8), new, arr(2, 3, 0, 8))]                                          # empty pieces
    for pieces in cases:
        got = nee.cat([nee.tensor(p) for p in pieces], 2).numpy()
        np.testing.assert_array_equal(got, np.concatenate(pieces, axis=2))
        assert got.dtype == np.dtype(dtype)


def test_concurrent_callers(every_size):
    """The kernel runs without the GIL: callers on several threads at once, each its own layout and data."""
    ws = [_r(64 + i, 80 + 3 * i) for i in range(4)]
    xs = [_r(1 + i % 4, 64 + i) for i in range(4)]
    errors = []

    def work(i):
        try:
            for _ in range(50):
                out = np.empty((xs[i].shape[0], ws[i].shape[1]), np.float32)
                L.matmul_into(out, xs[i], ws[i])
                np.testing.assert_allclose(out, xs[i] @ ws[i], rtol=1e-4, atol=1e-4)
        except AssertionError as e:        # reported after the join
            errors.append(e)
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and len(CALLS) == 200


@pytest.mark.parametrize("shape", [((16, 8), (8, 1)), ((1, 8), (8, 16)), ((64, 8), (8, 1)), ((1, 12), (12, 40)),
                                   ((12, 5, 8), (12, 8, 1))])
def test_tiny_products_take_the_kernel_below_its_size_minimums(shape):
    """Session 29: one-column / few-row products of at most ROWS_TINY_BYTES of matrix (a squeeze-excite block's
    16 x 8 weight times its 8 pooled values) take the few-row kernel whatever K and N (BLAS and numpy's
    dispatch cost more than any loop there): in MobileNetV3 that step went 33-49 -> 5 us."""
    (sa, sb) = shape
    a, b = _r(*sa), _r(*sb)
    _check(a, b)
    _check(a, np.asfortranarray(b) if b.ndim == 2 else b)


def test_larger_short_dot_products_stay_with_blas():
    """Above ROWS_TINY_BYTES the size minimums hold: K = 8 dot products against a 8 x 1024 matrix go to BLAS."""
    a, b = _r(1024, 8), _r(8, 1)
    assert 1024 * 8 * 4 > L.ROWS_TINY_BYTES
    _check(a, b, taken=False)
