"""Session 13 (issue 4, ONNX CNN speed): the paths this session changed, differential against torch / numpy /
onnxruntime.

* kernels/pool_native.py: whole-vector output stores wherever the vector ends inside the unit's band of output
  rows (the lanes past a row land on rows the same thread writes later), plain loads + a select for the row tails
  wherever the vector lies inside the input (masked loads only at the input's end).  Checked: odd planes (7x7,
  13x13, 5x9, 17 / 33 wide), strides 1-3, padding, ceil_mode, count_include_pad, NaN, float32 / float64, 1 and 2
  threads (row bands split over the threads), outputs that are a slice of a larger buffer (nothing written past
  them: sentinels), inputs that end right before an unreadable page (no read past the input: a segfault otherwise).
* 1x1 convs (the GEMM path with its epilogue in gemm_driver's blocks, and the direct kernel): conv2d_into on both
  paths (the rule and NEE_CONV_DIRECT=1) against torch, bias / relu / residual, channels not multiples of 8, odd
  planes, strides, float32 / float64, 1 / 2 threads, non-contiguous inputs.
* kernels/conv.py: ``_drv_gemm``'s plans keyed by ``_EPI_ROWS_K`` (a changed setting is not served a stale plan).
* The light ONNX models SqueezeNet and Inception v2 (seeded random weights) against onnxruntime.
"""
import ctypes
import mmap

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv as K
from neetorch.devices.cpu.kernels import conv_direct as D
from neetorch.devices.cpu.kernels import pool_native as P

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.fixture(params=[1, 2])
def nthreads(request):
    old = nee.get_num_threads()
    nee.set_num_threads(request.param)
    yield request.param
    nee.set_num_threads(old)


def _tol(dt):
    return {"rtol": 1e-5, "atol": 1e-5} if dt == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


def _torch_pool(x, is_max, k, s, p, ceil, cip):
    t = torch.from_numpy(x)
    if is_max:
        return F.max_pool2d(t, k, s, p, ceil_mode=ceil).numpy()
    return F.avg_pool2d(t, k, s, p, ceil_mode=ceil, count_include_pad=cip).numpy()


def _out_hw(H, W, k, s, p, ceil):
    def one(n):
        num = n + 2 * p - k
        o = (-(-num // s) if ceil else num // s) + 1
        if ceil and (o - 1) * s >= n + p:
            o -= 1
        return o
    return one(H), one(W)


POOL_CASES = [  # (planes N, C, H, W), kernel, stride, pad, ceil, count_include_pad
    ((1, 37, 7, 7), 3, 1, 1, False, True), ((1, 37, 7, 7), 3, 1, 1, False, False),
    ((2, 19, 13, 13), 3, 2, 0, True, True), ((1, 11, 5, 9), 3, 2, 1, False, True),
    ((1, 5, 17, 17), 3, 2, 0, False, True), ((1, 3, 33, 33), 3, 1, 1, False, False),
    ((1, 2, 55, 55), 3, 2, 0, True, True), ((1, 6, 14, 14), 2, 2, 0, False, True),
    ((1, 4, 9, 31), 5, 3, 2, False, False), ((3, 1, 1, 7), 1, 1, 0, False, True)]


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("is_max", [True, False])
@pytest.mark.parametrize("case", POOL_CASES)
def test_pool_odd_planes_vs_torch_and_no_spill(case, is_max, dt, nthreads):
    """The kernel writes exactly its output (a contiguous block of a larger buffer whose neighbours are sentinels)
    and matches torch; NaN propagates through max windows."""
    shape, k, s, p, ceil, cip = case
    rng = np.random.default_rng(hash((shape, k, s, p, is_max)) % 2**32)
    x = rng.standard_normal(shape).astype(dt)
    if is_max:
        x.reshape(-1)[rng.random(x.size) < 0.02] = np.nan
    N, C, H, W = shape
    OH, OW = _out_hw(H, W, k, s, p, ceil)
    ref = _torch_pool(x, is_max, k, s, p, ceil, cip)
    assert ref.shape == (N, C, OH, OW)
    n = N * C * OH * OW
    buf = np.full(n + 64, 12345.0, dt)
    res = buf[32:32 + n].reshape(N, C, OH, OW)
    assert P.pool2d(x, res, k, k, s, s, p, p, 1, 1, is_max, cip)
    np.testing.assert_allclose(res, ref, equal_nan=True, **_tol(dt))
    assert np.all(buf[:32] == 12345.0) and np.all(buf[32 + n:] == 12345.0)


def test_pool_bands_split_over_threads_no_spill():
    """Few planes of many rows on 2 threads: each plane cut into row bands claimed by different threads; a band's
    whole-vector stores must stop at its last row (another thread owns the next band)."""
    old = nee.get_num_threads()
    nee.set_num_threads(2)
    try:
        rng = np.random.default_rng(5)
        for dt in (np.float32, np.float64):
            for shape, k, s, p in [((1, 1, 301, 21), 3, 1, 1), ((1, 2, 200, 7), 3, 1, 1), ((1, 1, 257, 45), 3, 2, 0)]:
                x = rng.standard_normal(shape).astype(dt)
                for is_max in (True, False):
                    OH, OW = _out_hw(shape[2], shape[3], k, s, p, False)
                    n = shape[0] * shape[1] * OH * OW
                    for _ in range(3):     # (bands claimed in another order on each call)
                        buf = np.full(n + 40, -7.0, dt)
                        res = buf[:n].reshape(shape[0], shape[1], OH, OW)
                        assert P.pool2d(x, res, k, k, s, s, p, p, 1, 1, is_max, True)
                        np.testing.assert_allclose(res, _torch_pool(x, is_max, k, s, p, False, True), **_tol(dt))
                        assert np.all(buf[n:] == -7.0)
    finally:
        nee.set_num_threads(old)


def _guarded(nbytes):
    """A writable buffer of nbytes whose end touches a PROT_NONE page (a read past it faults); (array, keep)."""
    page = mmap.PAGESIZE
    total = -(-nbytes // page) * page + page
    m = mmap.mmap(-1, total, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    if libc.mprotect(ctypes.c_void_p(base + total - page), page, 0) != 0:
        pytest.skip("mprotect unavailable")
    arr = np.frombuffer(m, np.uint8, count=nbytes, offset=total - page - nbytes)
    return arr, m


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 3, 7, 7), (1, 2, 13, 13), (1, 1, 5, 9), (2, 1, 6, 17)])
def test_pool_reads_nothing_past_the_input(shape, dt):
    """The input ends right before an unreadable page: the row tails' plain loads stop at the input's end (the
    last rows take the masked loads)."""
    n = int(np.prod(shape))
    raw, keep = _guarded(n * np.dtype(dt).itemsize)
    x = raw.view(dt).reshape(shape)
    x[...] = np.random.default_rng(1).standard_normal(shape)
    for is_max in (True, False):
        for k, s, p in [(3, 1, 1), (3, 2, 0), (2, 2, 0)]:
            OH, OW = _out_hw(shape[2], shape[3], k, s, p, False)
            res = np.empty((shape[0], shape[1], OH, OW), dt)
            assert P.pool2d(x, res, k, k, s, s, p, p, 1, 1, is_max, True)
            np.testing.assert_allclose(res, _torch_pool(np.array(x), is_max, k, s, p, False, True), **_tol(dt))
    del x, raw
    keep.close()


def test_pool_through_the_api_non_contiguous():
    rng = np.random.default_rng(2)
    base = rng.standard_normal((1, 7, 9, 23)).astype(np.float32)
    xt = nee.tensor(base).permute(0, 1, 3, 2)[:, :, 1:, :]     # a non-contiguous view, 22 x 9 planes
    ref_in = torch.from_numpy(base).permute(0, 1, 3, 2)[:, :, 1:, :]
    got = nee.nn.functional.max_pool2d(xt, 3, 2, 1).numpy()
    np.testing.assert_allclose(got, F.max_pool2d(ref_in, 3, 2, 1).numpy(), rtol=1e-6)
    got = nee.nn.functional.avg_pool2d(xt, 3, 1, 1, count_include_pad=False).numpy()
    np.testing.assert_allclose(got, F.avg_pool2d(ref_in, 3, 1, 1, count_include_pad=False).numpy(), rtol=1e-5,
                               atol=1e-6)


# ---------------------------------------------------------------- 1x1 convs: the GEMM path on AVX2
CONV1X1 = [  # N, C, H, W, O, stride
    (1, 64, 11, 13, 20, 1), (1, 37, 9, 9, 45, 1), (2, 48, 7, 5, 96, 1), (1, 33, 15, 15, 7, 2),
    (1, 96, 13, 13, 384, 1), (1, 12, 9, 7, 30, 1), (3, 40, 6, 6, 17, 1)]


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["", "1"])
@pytest.mark.parametrize("case", CONV1X1)
def test_conv1x1_paths_vs_torch(case, mode, dt, nthreads):
    N, C, H, W, O, s = case
    rng = np.random.default_rng(C * 1000 + O)
    x = rng.standard_normal((N, C, H, W)).astype(dt)
    w = rng.standard_normal((O, C, 1, 1)).astype(dt)
    b = rng.standard_normal(O).astype(dt)
    OH, OW = (H - 1) // s + 1, (W - 1) // s + 1
    e = rng.standard_normal((N, O, OH, OW)).astype(dt)
    ref = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), torch.from_numpy(b).double(),
                   stride=s).numpy()
    attrs = dict(stride=(s, s), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)
    old = D.MODE[0]
    D.MODE[0] = mode
    try:
        for use_e, relu in ((False, False), (False, True), (True, True)):
            out = np.full((N, O, OH, OW), np.nan, dt)
            K.conv2d_into(out, [x, w, b], attrs, e=e if use_e else None, relu=relu)
            want = ref + e if use_e else ref
            if relu:
                want = np.maximum(want, 0)
            np.testing.assert_allclose(out, want, rtol=2e-4 if dt == np.float32 else 1e-10,
                                       atol=2e-4 if dt == np.float32 else 1e-10)
    finally:
        D.MODE[0] = old


def test_conv1x1_non_contiguous_through_the_api():
    rng = np.random.default_rng(3)
    base = rng.standard_normal((1, 13, 11, 40)).astype(np.float32)
    w = rng.standard_normal((24, 40, 1, 1)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    xt = nee.tensor(base).permute(0, 3, 1, 2)                  # (1, 40, 13, 11), channels strided
    got = nee.nn.functional.conv2d(xt, nee.tensor(w), nee.tensor(b)).numpy()
    ref = F.conv2d(torch.from_numpy(base).permute(0, 3, 1, 2), torch.from_numpy(w), torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_drv_gemm_plans_follow_epi_rows_k():
    """_drv_gemm's plan cache is keyed by _EPI_ROWS_K: changing it gives the other split, never a stale plan."""
    if not K._driver():
        pytest.skip("no gemm_driver")
    rng = np.random.default_rng(4)
    a = rng.standard_normal((160, 64)).astype(np.float32)
    b = rng.standard_normal((64, 900)).astype(np.float32)
    old = K._EPI_ROWS_K
    try:
        for rk in (128, 0, 128):
            K._EPI_ROWS_K = rk
            o = np.zeros((160, 900), np.float32)
            assert K._drv_gemm(o, a, b, 2)
            np.testing.assert_allclose(o, a @ b, rtol=1e-4, atol=1e-4)
        keys = [k for k in K._drv_plans if k[0] == (160, 900) and k[2] == (160, 64) and k[-2] == 2]
        assert {k[-1] for k in keys} >= {0, 128}
    finally:
        K._EPI_ROWS_K = old


# ---------------------------------------------------------------- the light models vs onnxruntime
@pytest.mark.parametrize("name", ["light_squeezenet", "light_inception_v2"])
def test_light_model_random_weights_vs_onnxruntime(name):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from asv_benchmarks import _onnx_models as M
    if name not in M.light_names():
        pytest.skip(f"{name} is not shipped with this onnx version")
    spec = M.spec(name, random_weights=True)
    got = M.nee_session(spec.model, nee.get_num_threads()).run(None, spec.feed)
    ref = M.ort_session(spec.model, 1).run(None, spec.feed)
    assert len(got) == len(ref) >= 2          # the softmax and the exposed logits
    for g, r in zip(got, ref):
        g, r = np.asarray(g), np.asarray(r)
        assert g.shape == r.shape
        assert np.max(np.abs(g - r)) <= 1e-3 * max(float(np.max(np.abs(r))), 1e-5)
