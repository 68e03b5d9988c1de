"""Products split over 2 threads by gemm_driver, the short-K row-block rule included (kernels/linalg.py
``_plan2d``: K <= _DRV_ROWS_K with _DRV_ROWS_MIN_R rows or more go in row blocks; kernels/conv.py's 1x1 GEMMs,
``_drv_gemm`` and ``_gemm_epilogue``, the same with _EPI_ROWS_K): differential against a float64 numpy
reference on odd shapes, transposed and non-contiguous operands, float32 and float64, at 1 and 2 threads, and
with the rule off (NEE_MATMUL_DRV_ROWS_K=0 / NEE_CONV_EPI_ROWS_K=0), and the epilogue path at 1 and 2 blocks per
thread (NEE_CONV_EPI_BLOCKS)."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import gemm_driver as GD
from neetorch.devices.cpu.kernels import conv as CV
from neetorch.devices.cpu.kernels import conv_direct as CD
from neetorch.devices.cpu.kernels import linalg as LA


@pytest.fixture
def restore():
    n = nee.get_num_threads()
    rk, ek, eb, mode = LA._DRV_ROWS_K, CV._EPI_ROWS_K, CV._EPI_BLOCKS_PER_THREAD, CD.MODE[0]
    CD.MODE[0] = "0"      # float32 1x1 convs to the GEMM paths under test, not the direct kernel
    yield
    LA._DRV_ROWS_K, CV._EPI_ROWS_K, CV._EPI_BLOCKS_PER_THREAD, CD.MODE[0] = rk, ek, eb, mode
    LA._plans.clear()
    CV._drv_plans.clear()
    nee.set_num_threads(n)


def _set(nt, rows_k):
    nee.set_num_threads(nt)
    LA._DRV_ROWS_K = rows_k
    CV._EPI_ROWS_K = rows_k
    LA._plans.clear()
    CV._drv_plans.clear()


def _tol(dt, k):
    return (2e-5 * np.sqrt(k), 1e-4 * np.sqrt(k)) if dt == np.float32 else (1e-12 * k, 1e-12 * k)


# (M, K, N): ResNet's short-K 1x1 shapes (rows), odd sizes on both sides of the rule's bounds
_MM = [(256, 64, 3136), (131, 64, 1000), (128, 128, 257), (127, 128, 900), (200, 129, 700), (300, 37, 515),
       (64, 64, 1500), (512, 96, 49)]


# every shape at every (rows_k, nt), the dtype alternating: each shape meets both dtypes, each (rows_k, nt, dtype)
# four shapes (32 cases instead of the full 64-case product, session 13)
_MM_CASES = [(shape, rows_k, nt, (np.float32, np.float64)[(i + r + t) % 2])
             for i, shape in enumerate(_MM) for r, rows_k in enumerate((0, 128)) for t, nt in enumerate((1, 2))]


@pytest.mark.parametrize("shape,rows_k,nt,dt", _MM_CASES)
def test_matmul_split_matches_numpy(restore, nt, rows_k, dt, shape):
    M, K, N = shape
    rng = np.random.default_rng(M * 7 + K)
    a = rng.standard_normal((M, K)).astype(dt)
    b = rng.standard_normal((K, N)).astype(dt)
    _set(nt, rows_k)
    out = np.full((M, N), np.nan, dt)
    LA.matmul_into(out, a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    rt, at = _tol(dt, K)
    np.testing.assert_allclose(out, ref, rtol=rt, atol=at)


@pytest.mark.parametrize("nt", [1, 2])
@pytest.mark.parametrize("layout", ["aT", "bT", "both", "a_strided", "out_view"])
def test_matmul_split_transposed_and_views(restore, nt, layout):
    M, K, N = 257, 64, 1201
    rng = np.random.default_rng(3)
    _set(nt, 128)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    if layout in ("aT", "both"):
        a = np.ascontiguousarray(a.T).T          # column-major A
    if layout in ("bT", "both"):
        b = np.ascontiguousarray(b.T).T
    if layout == "a_strided":
        a = rng.standard_normal((M, 2 * K)).astype(np.float32)[:, ::2]   # non-unit column stride: copied
    big = np.full((M + 3, N + 40), np.nan, np.float32)
    out = big[1:M + 1, 8:N + 8] if layout == "out_view" else np.full((M, N), np.nan, np.float32)
    LA.matmul_into(out, a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-4)
    if layout == "out_view":      # nothing written outside the view
        assert np.isnan(big[0]).all() and np.isnan(big[-2:]).all()
        assert np.isnan(big[:, :8]).all() and np.isnan(big[:, N + 8:]).all()


def test_row_rule_picks_row_blocks(restore):
    """The plans the rule makes: short K and many rows in row blocks, else the larger dimension's split."""
    if not GD.available():
        pytest.skip("gemm_driver unavailable")
    f = np.float32
    _set(2, 128)
    d = LA._plan2d(GD, np.empty((256, 3136), f), np.empty((256, 64), f), np.empty((64, 3136), f), 2)
    assert int(d[GD.D_SPLIT]) == 0
    d = LA._plan2d(GD, np.empty((256, 3136), f), np.empty((256, 256), f), np.empty((256, 3136), f), 2)
    assert int(d[GD.D_SPLIT]) == 1
    d = LA._plan2d(GD, np.empty((64, 3136), f), np.empty((64, 64), f), np.empty((64, 3136), f), 2)
    assert int(d[GD.D_SPLIT]) == 1
    _set(2, 0)
    d = LA._plan2d(GD, np.empty((256, 3136), f), np.empty((256, 64), f), np.empty((64, 3136), f), 2)
    assert int(d[GD.D_SPLIT]) == 1


# (N, C, O, H, W): 1x1 convs, rule's bounds: K = C <= 128, O >= 64 (epilogue) / 128 (no epilogue)
_CONV = [(1, 64, 256, 56, 56), (1, 64, 64, 30, 31), (1, 128, 129, 17, 23), (1, 129, 200, 20, 20),
         (2, 48, 130, 19, 21), (1, 100, 63, 25, 25)]


_EPIS = ["none", "b", "b_relu", "b_e_relu"]
# a covering subset of the 6 x 4 x 2 x 2 x 3 product (72 of 288 cases, session 13): every shape at every
# (rows_k, threads/blocks, dtype) -- each plan the split rule can make for it -- and the epilogue rotating so that
# each (rows_k, threads/blocks, dtype) meets all four epilogues and each shape meets all four
_CONV_CASES = [(shape, _EPIS[(i + r + 2 * t + 3 * d) % 4], dt, rows_k, nt, blocks)
               for i, shape in enumerate(_CONV) for r, rows_k in enumerate((0, 128))
               for t, (nt, blocks) in enumerate(((1, 1), (2, 1), (2, 2)))
               for d, dt in enumerate((np.float32, np.float64))]


@pytest.mark.parametrize("shape,epi,dt,rows_k,nt,blocks", _CONV_CASES)
def test_conv1x1_split_matches_numpy(restore, nt, blocks, rows_k, dt, epi, shape):
    N, C, O, H, W = shape
    rng = np.random.default_rng(C * 3 + O)
    x = rng.standard_normal((N, C, H, W)).astype(dt)
    w = rng.standard_normal((O, C, 1, 1)).astype(dt)
    b = rng.standard_normal(O).astype(dt) if epi != "none" else None
    e = rng.standard_normal((N, O, H, W)).astype(dt) if "e" in epi.split("_") else None
    relu = epi.endswith("relu")
    _set(nt, rows_k)
    CV._EPI_BLOCKS_PER_THREAD = blocks
    out = np.full((N, O, H, W), np.nan, dt)
    attrs = dict(stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)
    CV.conv2d_into(out, [x, w] + ([b] if b is not None else []), attrs, None, e, relu)
    ref = np.einsum("nchw,oc->nohw", x.astype(np.float64), w.reshape(O, C).astype(np.float64))
    if b is not None:
        ref = ref + b[None, :, None, None]
    if e is not None:
        ref = ref + e
    if relu:
        ref = np.maximum(ref, 0)
    rt, at = _tol(dt, C)
    np.testing.assert_allclose(out, ref, rtol=rt, atol=at)


def test_conv_epilogue_rule_picks_row_blocks(restore):
    """conv._gemm_epilogue's plan for ResNet's 64 -> 256 on 56x56 (+ bias, relu): row blocks; with the rule off,
    column blocks (the larger dimension)."""
    if not GD.available():
        pytest.skip("gemm_driver unavailable")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    w = rng.standard_normal((256, 64, 1, 1)).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)
    attrs = dict(stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)
    for rows_k, split in ((128, 0), (0, 1)):
        _set(2, rows_k)
        CV._epi_plans.clear()
        out = np.empty((1, 256, 56, 56), np.float32)
        CV.conv2d_into(out, [x, w, b], attrs, None, None, True)
        plans = [p for p in CV._epi_plans.values() if p is not False]
        assert len(plans) == 1
        assert int(plans[0][0][GD.D_SPLIT]) == split
