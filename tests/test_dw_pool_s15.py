"""Session 15: depthwise_native's direct kernel (float32, column stride 2: no copy of the input, the even / odd
columns split in registers, masked loads only for the vectors at a row's ends) against torch (float64
reference) on odd shapes, windows 1-7 wide, row strides 1-3, row dilation, every padding (asymmetric, wider than
a vector), bias / relu, NaN / inf, 1 and 2 threads (bands split over the workers), non-contiguous inputs; the same
float32 bits as the padded-rows and the generic kernels; its fallbacks (zero row too wide, too many slow vectors);
and its reads against guard pages (no read before or after the input)."""
import ctypes
import mmap

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv as K
from neetorch.devices.cpu.kernels import depthwise_native as D
from neetorch.devices.cpu.kernels import pool_native

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.skipif(not pool_native.available(), reason="no llvmlite native target")


@pytest.fixture(autouse=True)
def _torch_one_thread(torch_one_thread):
    pass


@pytest.fixture
def runs(monkeypatch):
    """Counts of kernel runs: {"dir": direct, "pad": padded-rows, "gen": generic} (runners rebuilt)."""
    n = {"dir": 0, "pad": 0, "gen": 0}
    monkeypatch.setattr(D, "_runners", {})
    kp, kg = D.kernel_pad, D.kernel

    def pad(*a, **k):
        f = kp(*a, **k)
        key = "dir" if k.get("direct") else "pad"

        def run(*args):
            n[key] += 1
            return f(*args)
        return run

    def gen(*a, **k):
        f = kg(*a, **k)

        def run(*args):
            n["gen"] += 1
            return f(*args)
        return run
    monkeypatch.setattr(D, "kernel_pad", pad)
    monkeypatch.setattr(D, "kernel", gen)
    return n


def _want(x, w, b, s, p, d, relu):
    tx = torch.from_numpy(np.pad(x.astype(np.float64), ((0, 0), (0, 0), p[:2], p[2:])))
    y = F.conv2d(tx, torch.from_numpy(w.astype(np.float64)), None if b is None else torch.from_numpy(
        b.astype(np.float64)), s, 0, d, x.shape[1]).numpy()
    return np.maximum(y, 0) if relu else y


def _oshape(x, w, s, p, d):
    OH = (x.shape[2] + p[0] + p[1] - d[0] * (w.shape[2] - 1) - 1) // s[0] + 1
    OW = (x.shape[3] + p[2] + p[3] - d[1] * (w.shape[3] - 1) - 1) // s[1] + 1
    return OH, OW


def _got(x, w, b, s, p, d, relu):
    C = x.shape[1]
    out = np.full((x.shape[0], C) + _oshape(x, w, s, p, d), np.nan, x.dtype)
    attrs = {"stride": s, "padding": p, "dilation": d, "groups": C}
    K.conv2d_into(out, [x, w] + ([b] if b is not None else []), attrs, None, None, relu)
    return out


def _case(rng, N, C, H, W, k, s, p, d=(1, 1), bias=True, relu=False):
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((C, 1) + k).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32) if bias else None
    got = _got(x, w, b, s, p, d, relu)
    np.testing.assert_allclose(got, _want(x, w, b, s, p, d, relu), rtol=2e-5, atol=2e-5)
    return x, w, b, got


def _ok(H, W, k, s, p, d):
    return (H + p[0] + p[1] - d[0] * (k[0] - 1) - 1) >= 0 and (W + p[2] + p[3] - d[1] * (k[1] - 1) - 1) >= 0


def test_stride2_odd_shapes_match_torch(nthreads, runs):
    """Rows 1-70 wide (one vector, vectors all slow, fast runs between slow ends), 3x3, row strides 1 / 2,
    paddings 0-2 and asymmetric, bias or not, relu; every one on the direct kernel."""
    rng = np.random.default_rng(10)
    n = 0
    for H, W in [(1, 1), (2, 3), (3, 7), (5, 16), (6, 17), (7, 18), (9, 31), (11, 32), (12, 33), (14, 14),
                 (13, 35), (28, 28), (17, 47), (4, 56), (3, 70)]:
        for sh in (1, 2):
            for p in [(1, 1, 1, 1), (0, 0, 0, 0), (0, 1, 2, 0), (2, 1, 1, 2), (1, 0, 0, 1)]:
                if not _ok(H, W, (3, 3), (sh, 2), p, (1, 1)):
                    continue
                _case(rng, 1 + (n % 7 == 0), (3, 5, 1, 7)[n % 4], H, W, (3, 3), (sh, 2), p, bias=n % 3 != 0,
                      relu=n % 2 == 1)
                n += 1
    assert n > 120 and runs["gen"] == 0 and runs["pad"] == 0 and runs["dir"] >= n


@pytest.mark.parametrize("k,sh,p,d", [((3, 1), 2, (1, 1, 0, 0), 1), ((1, 2), 1, (0, 0, 0, 1), 1),
                                      ((2, 2), 2, (0, 1, 0, 1), 1), ((3, 4), 1, (1, 1, 2, 1), 1),
                                      ((5, 5), 2, (2, 2, 2, 2), 1), ((3, 5), 3, (1, 1, 4, 0), 2),
                                      ((7, 7), 2, (3, 3, 3, 3), 1), ((6, 7), 1, (0, 5, 6, 1), 1),
                                      ((3, 3), 2, (3, 3, 9, 11), 3)])
def test_stride2_windows_pads_dilation(k, sh, p, d, nthreads, runs):
    """Windows 1-7 wide (the last even tap from the odd lanes of the loads one column before), row strides 1-3,
    row dilation, paddings up to and past a vector of outputs (several slow vectors at each end)."""
    rng = np.random.default_rng(11)
    n = 0
    for H, W in [(6, 5), (11, 19), (9, 40), (23, 30)]:
        if not _ok(H, W, k, (sh, 2), p, (d, 1)):
            continue
        _case(rng, 1, 3, H, W, k, (sh, 2), p, (d, 1), relu=True)
        n += 1
    assert n > 0 and runs["gen"] == 0 and runs["pad"] == 0 and runs["dir"] >= n


def test_slow_vector_runs():
    """dir_params: the fast vectors one run [FA, FB) whose loads lie inside the row, the masks of the others
    exactly the lanes inside the row."""
    for W, pl, KW in [(56, 1, 3), (28, 1, 3), (14, 1, 3), (7, 0, 3), (100, 9, 5), (33, 0, 2), (40, 20, 7)]:
        OW = (W + 2 * pl - KW) // 2 + 1
        q = D.dir_params(5, W, 3, OW, 2, 2, 1, pl, 1, 3, KW)
        NV, JL, ZW, FA, FB = (int(v) for v in q[:5])
        sp = D.span(KW, 2)
        offs = D.load_offsets(KW, 2)
        tab = q[5:].view(np.int32).reshape(-1, len(offs), 8)
        slow = list(range(FA)) + list(range(FB, NV))
        assert ZW >= W and JL + 8 <= max(OW, 8) and len(tab) >= len(slow)
        for jv in range(NV):
            c = min(8 * jv, JL) * 2 - pl
            assert (FA <= jv < FB) == (c >= 0 and c + sp <= W)
        for n_, jv in enumerate(slow):
            c = min(8 * jv, JL) * 2 - pl
            for i, o in enumerate(offs):
                cols = c + o + np.arange(8)
                np.testing.assert_array_equal(tab[n_, i] < 0, (cols >= 0) & (cols < W))


@pytest.mark.parametrize("relu", [False, True])
def test_same_bits_as_padded_and_generic(relu):
    """Finite inputs: the direct kernel's float32 results are the padded-rows kernel's and the generic kernel's
    bit for bit (the same (ki, kj) order, the in-register lane order undone)."""
    rng = np.random.default_rng(12)
    for (H, W), sh, p, k, dh in [((56, 56), 2, (1, 1), (3, 3), 1), ((28, 28), 2, (1, 1), (3, 3), 1),
                                 ((14, 14), 2, (1, 1), (3, 3), 1), ((17, 23), 1, (2, 0), (5, 5), 1),
                                 ((9, 41), 2, (0, 2), (3, 4), 2), ((13, 13), 3, (3, 3), (7, 7), 1)]:
        x = rng.standard_normal((1, 9, H, W)).astype(np.float32)
        w = rng.standard_normal((9, 1) + k).astype(np.float32)
        b = rng.standard_normal(9).astype(np.float32)
        OH = (H + 2 * p[0] - dh * (k[0] - 1) - 1) // sh + 1
        OW = (W + 2 * p[1] - k[1]) // 2 + 1
        outs = []
        for pad, direct in (("1", "1"), ("1", "0"), ("0", "1")):
            old = D.PAD[0], D.DIRECT[0]
            D.PAD[0], D.DIRECT[0] = pad, direct
            try:
                o = np.full((1, 9, OH, OW), np.nan, np.float32)
                assert D.conv2d(x, w, b, o, sh, 2, p[0], p[1], dh, 1, relu)
                outs.append(o)
            finally:
                D.PAD[0], D.DIRECT[0] = old
        np.testing.assert_array_equal(outs[0], outs[1])
        np.testing.assert_array_equal(outs[0], outs[2])
        np.testing.assert_allclose(outs[0], _want(x, w, b, (sh, 2), (p[0], p[0], p[1], p[1]), (dh, 1), relu),
                                   rtol=2e-5, atol=2e-5)


def test_nan_inf(runs):
    """NaN / inf inputs reach only their windows' outputs (left / right slow vectors and fast ones); inf weights
    give NaN where they meet the zero padding (as torch)."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((1, 3, 12, 37)).astype(np.float32)
    x[0, 0, 5, 0] = np.nan
    x[0, 0, 2, 20] = np.nan
    x[0, 1, 0, 36] = np.inf
    x[0, 2, 11, 17] = -np.inf
    w = rng.standard_normal((3, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    for relu in (False, True):
        got = _got(x, w, b, (2, 2), (1, 1, 1, 1), (1, 1), relu)
        want = _want(x, w, b, (2, 2), (1, 1, 1, 1), (1, 1), relu)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, equal_nan=True)
        assert np.isnan(got[0, 0]).sum() == np.isnan(want[0, 0]).sum() > 0
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    w2 = w.copy()
    w2[1, 0, 0, 0] = np.inf
    x2 = np.abs(rng.standard_normal((1, 3, 12, 37))).astype(np.float32) + 1
    got = _got(x2, w2, b, (2, 2), (1, 1, 1, 1), (1, 1), False)
    want = _want(x2, w2, b, (2, 2), (1, 1, 1, 1), (1, 1), False)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, equal_nan=True)
    assert np.isnan(got[0, 1, 0]).all() and np.isnan(got[0, 1, :, 0]).all() and np.isinf(got[0, 1, 1:, 1:]).all()
    assert runs["dir"] > 0 and runs["gen"] == 0 and runs["pad"] == 0


@pytest.mark.parametrize("shape,sh", [((1, 112, 56, 56), 2), ((1, 3, 301, 77), 2), ((2, 5, 7, 9), 1),
                                      ((1, 1, 64, 130), 2)])
def test_split_over_threads(shape, sh, nthreads, monkeypatch):
    """Calls split over the native workers (planes, or bands of rows of few planes): the same bits on every run
    and as one thread's."""
    monkeypatch.setattr(D, "_PAR_NS", 0.0)
    monkeypatch.setattr(D, "_runners", {})
    rng = np.random.default_rng(14)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((shape[1], 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    first = None
    for _ in range(3):
        out = _got(x, w, b, (sh, 2), (1, 1, 1, 1), (1, 1), True)
        if first is None:
            np.testing.assert_allclose(out, _want(x, w, b, (sh, 2), (1, 1, 1, 1), (1, 1), True), rtol=2e-5,
                                       atol=2e-5)
            first = out
        np.testing.assert_array_equal(out, first)
    old = nee.get_num_threads()
    nee.set_num_threads(1)
    try:
        one = _got(x, w, b, (sh, 2), (1, 1, 1, 1), (1, 1), True)
    finally:
        nee.set_num_threads(old)
    np.testing.assert_array_equal(first, one)


def test_bands_and_non_contiguous(nthreads, runs, monkeypatch):
    """Planes in bands of a few rows (each band its own rows outside the input), and strided / transposed views
    through nee.nn.functional.conv2d."""
    monkeypatch.setattr(D, "_PAD_BAND_BYTES", 1024)
    rng = np.random.default_rng(15)
    for p in [(1, 1, 1, 1), (2, 0, 0, 2), (0, 2, 2, 0)]:
        _case(rng, 1, 3, 61, 45, (3, 3), (2, 2), p, relu=True)
        _case(rng, 1, 2, 40, 33, (5, 5), (1, 2), (2, 2, 2, 2), d=(2, 1))
    assert runs["dir"] > 0 and runs["gen"] == 0
    base = rng.standard_normal((2, 11, 31, 40)).astype(np.float32)
    for x in (base[:, ::2, 1::2, ::3], np.swapaxes(base[:1, :5, :17, :23], 2, 3)):
        C = x.shape[1]
        w = rng.standard_normal((C, 1, 3, 3)).astype(np.float32)
        b = rng.standard_normal(C).astype(np.float32)
        got = nee.nn.functional.conv2d(nee.from_numpy(x), nee.from_numpy(w), nee.from_numpy(b), 2, 1, 1, C).numpy()
        want = F.conv2d(torch.from_numpy(np.ascontiguousarray(x)).double(), torch.from_numpy(w).double(),
                        torch.from_numpy(b).double(), 2, 1, 1, C).numpy()
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_fallbacks(runs, monkeypatch):
    """Too many slow vectors for the mask table: the padded-rows kernel; a zero row over _PAD_MAX_BYTES: the
    generic kernel; column stride 1 stays on the padded-rows kernel; torch's results each way."""
    rng = np.random.default_rng(16)
    monkeypatch.setattr(D, "_DIR_MAX_SLOW", 0)
    _case(rng, 1, 3, 9, 30, (3, 3), (2, 2), (1, 1, 1, 1))
    assert runs["dir"] == 0 and runs["pad"] > 0
    monkeypatch.setattr(D, "_DIR_MAX_SLOW", 64)
    monkeypatch.setattr(D, "_runners", {})
    _case(rng, 1, 2, 3, 16500, (3, 3), (1, 2), (1, 1, 1, 1))     # 16500 floats: over 64 KB
    assert runs["dir"] == 0 and runs["gen"] > 0
    _case(rng, 1, 3, 9, 30, (3, 3), (2, 1), (1, 1, 1, 1))
    assert runs["dir"] == 0
    _case(rng, 1, 3, 9, 30, (3, 3), (2, 2), (1, 1, 1, 1))
    assert runs["dir"] > 0


def _guarded(shape, at_end: bool):
    """A float32 C-contiguous array of ``shape`` starting right after (``at_end`` False) or ending right before
    (True) a PROT_NONE page: a read outside it faults."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = mmap.PAGESIZE
    nbytes = int(np.prod(shape)) * 4
    data = -(-nbytes // page) * page
    m = mmap.mmap(-1, data + 2 * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    assert libc.mprotect(base, page, 0) == 0 and libc.mprotect(base + page + data, page, 0) == 0
    off = page + (data - nbytes if at_end else 0)
    arr = np.frombuffer(m, np.float32, int(np.prod(shape)), off).reshape(shape)
    return arr, m, (libc, base, data + 2 * page)


@pytest.mark.parametrize("at_end", [False, True])
def test_reads_stay_inside_the_input(at_end, runs):
    """The input between guard pages (its first / last float next to one): left / right paddings, rows of 1-30
    (every read of the first and the last rows' vectors next to a guard)."""
    rng = np.random.default_rng(17)
    for H, W, k, p in [(7, 30, (3, 3), (1, 1, 1, 1)), (5, 17, (3, 3), (0, 0, 0, 0)), (6, 9, (5, 5), (2, 2, 2, 2)),
                       (4, 1, (3, 1), (1, 1, 0, 0)), (9, 16, (3, 2), (1, 0, 0, 0)), (3, 33, (3, 7), (1, 1, 0, 3))]:
        C = 3
        x, m, (libc, base, ln) = _guarded((1, C, H, W), at_end)
        try:
            x[...] = rng.standard_normal(x.shape)
            w = rng.standard_normal((C, 1) + k).astype(np.float32)
            b = rng.standard_normal(C).astype(np.float32)
            got = _got(x, w, b, (2, 2), p, (1, 1), False)
            np.testing.assert_allclose(got, _want(np.array(x), w, b, (2, 2), p, (1, 1), False), rtol=2e-5,
                                       atol=2e-5)
        finally:
            del x
            libc.mprotect(base, ln, 3)
            m.close()
    assert runs["dir"] >= 6
