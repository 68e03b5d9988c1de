"""kernels/pool_native.py's register kernel (fixed windows at column strides 1-2, no row buffer: the column
vectors of each output vector combined over the window rows straight from the input with masked loads, the taps
gathered in registers; rows in pairs (output rows of several vectors, output vectors from the last down) or in
groups of 4 (rows of one output vector); max without the NaN fix-up where no input of the pair / group is NaN,
redone exactly where one is), differential against torch and against the row-buffer kernels (NEE_POOL_REG=0):
exact max values (NaN payloads, signed zeros, -inf), odd shapes (rows of 1 to several output vectors, the
one-register vectors of narrow outputs, windows past the row), padding, ceil_mode, row strides 1-3, float32 /
float64, 1 and 2 threads, NaN anywhere in a pair / group (the exact redo), inputs ending at an unmapped page (no
read outside the input), the average pools."""
import ctypes
import mmap

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import pool_native as P

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.skipif(not P.available(), reason="no llvmlite native target")


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(P, "_runners", {})
    monkeypatch.setattr(P, "_plans", {})

    def mode(m):
        monkeypatch.setattr(P, "REG", [m])
    return mode


def _x(rng, shape, dt, nan=0.01):
    x = rng.standard_normal(shape).astype(dt)
    u = rng.random(x.shape)
    x[u < nan] = np.nan
    x[(u >= nan) & (u < nan + 0.02)] = -np.inf
    x[(u >= nan + 0.02) & (u < nan + 0.03)] = -0.0
    x[(u >= nan + 0.03) & (u < nan + 0.035)] = np.inf
    return x


def _out(shape, k, s, p, ceil):
    def one(n, kk, ss, pp):
        o = (n + 2 * pp - kk + (ss - 1 if ceil else 0)) // ss + 1
        if ceil and (o - 1) * ss >= n + pp:
            o -= 1
        return o
    return shape[:2] + (one(shape[2], k[0], s[0], p[0]), one(shape[3], k[1], s[1], p[1]))


def _run(x, k, s, p, ceil, is_max=True, cip=False):
    r = np.full(_out(x.shape, k, s, p, ceil), 7.0, x.dtype)
    assert P.pool2d(x, r, k[0], k[1], s[0], s[1], p[0], p[1], 1, 1, is_max, cip, 0)
    return r


SHAPES = [(1, 3, 13, 17), (2, 2, 5, 40), (1, 1, 1, 9), (1, 2, 33, 16), (1, 3, 7, 35), (1, 2, 14, 14),
          (1, 1, 27, 27), (1, 3, 9, 9), (1, 2, 6, 6), (1, 2, 11, 111), (1, 1, 4, 70), (1, 2, 30, 64), (1, 2, 9, 33),
          (1, 2, 10, 32)]


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_register_kernel_vs_torch(dt, nthreads, fresh):
    """Max pools on the register kernel: torch's values exactly (NaN where a window holds one, at 0 / 1% / 10% NaN:
    the exact redo of the pairs and groups), every window up to 3x3 at column strides 1-2, row strides 1-3,
    padding up to half the window, ceil_mode both ways."""
    rng = np.random.default_rng(40 + (dt == np.float64))
    checked = 0
    for kh, kw in [(3, 3), (2, 2), (3, 2), (1, 3), (2, 3)]:
        for sw in (1, 2):
            assert P.use_reg(kh, kw, sw, 1, 1, True)
            for shape in SHAPES:
                sh = int(rng.integers(1, 4))
                ph, pw = int(rng.integers(0, kh // 2 + 1)), int(rng.integers(0, kw // 2 + 1))
                ceil = bool(rng.random() < 0.5)
                x = _x(rng, shape, dt, float(rng.choice([0.0, 0.01, 0.1])))
                try:
                    ref = F.max_pool2d(torch.from_numpy(x), (kh, kw), (sh, sw), (ph, pw), ceil_mode=ceil).numpy()
                except RuntimeError:
                    continue
                got = _run(x, (kh, kw), (sh, sw), (ph, pw), ceil)
                assert got.shape == ref.shape
                np.testing.assert_array_equal(got, ref, err_msg=str((kh, kw, sh, sw, ph, pw, ceil, shape)))
                checked += 1
    assert checked > 100
    assert any(len(k) > 5 and k[5] == "reg" for k in P._kernels)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_register_kernel_matches_buffer_kernel_bits(dt, nthreads, fresh):
    """The register kernel gives the row-buffer kernel's bits (NEE_POOL_REG=0): which NaN of a window (payload and
    sign), which zero of a tie, on the models' geometries and odd ones, NaN-free and NaN-heavy inputs."""
    rng = np.random.default_rng(42)
    ut = np.uint32 if dt == np.float32 else np.uint64
    qnan = 0x7FC00000 if dt == np.float32 else 0x7FF8000000000000
    sign = 1 << (31 if dt == np.float32 else 63)
    cases = [((3, 3), (2, 2), (0, 0), False, (1, 8, 111, 111)), ((3, 3), (2, 2), (1, 1), False, (1, 5, 28, 28)),
             ((3, 3), (1, 1), (1, 1), False, (2, 3, 13, 13)), ((2, 2), (2, 2), (0, 0), False, (1, 4, 16, 50)),
             ((3, 3), (2, 2), (0, 0), True, (1, 6, 56, 56)), ((3, 3), (2, 2), (0, 0), True, (1, 7, 14, 14)),
             ((3, 3), (1, 1), (1, 1), False, (1, 9, 6, 6)), ((3, 3), (2, 2), (0, 0), False, (1, 9, 27, 27))]
    for k, s, p, ceil, shape in cases:
        for frac in (0.0005, 0.03):
            x = rng.standard_normal(shape).astype(dt)
            x[rng.random(x.shape) < 0.05] = -0.0
            x[rng.random(x.shape) < 0.05] = 0.0
            xi = x.view(ut).reshape(-1)
            idx = np.nonzero(rng.random(x.size) < frac)[0]
            xi[idx] = (qnan + rng.integers(1, 1 << 20, idx.size)).astype(ut) | np.where(
                rng.random(idx.size) < 0.5, ut(sign), ut(0)).astype(ut)
            outs = []
            for m in ("1", "0"):
                fresh(m)
                outs.append(_run(x, k, s, p, ceil))
            assert outs[0].tobytes() == outs[1].tobytes(), (k, s, p, ceil, shape, frac)


def test_nan_in_every_position_of_a_group(fresh):
    """One NaN per plane, at every input position of small planes (groups of 4 rows, the pairs' and the single
    rows' paths): the windows holding it give it, the others torch's values (the exact redo of a group or pair
    leaves no row of the plain pass behind)."""
    for shape, k, s, p, ceil in [((1, 1, 13, 13), 3, 2, 0, False), ((1, 1, 13, 13), 3, 1, 1, False),
                                 ((1, 1, 9, 40), 3, 2, 0, False), ((1, 1, 14, 14), 3, 2, 0, True)]:
        n = shape[2] * shape[3]
        x = np.random.default_rng(3).standard_normal((1, n) + shape[2:]).astype(np.float32)
        x.reshape(n, -1)[np.arange(n), np.arange(n)] = np.nan
        ref = F.max_pool2d(torch.from_numpy(x), k, s, p, ceil_mode=ceil).numpy()
        np.testing.assert_array_equal(_run(x, (k, k), (s, s), (p, p), ceil), ref)


def _guarded(n, dt):
    """An array of n elements of dt ending at an unmapped page and starting right after one (reads past either
    end fault)."""
    item = np.dtype(dt).itemsize
    pg = mmap.PAGESIZE
    size = -(-n * item // pg) * pg
    buf = mmap.mmap(-1, size + 2 * pg, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    assert libc.mprotect(addr, pg, 0) == 0 and libc.mprotect(addr + pg + size, pg, 0) == 0
    end = pg + size
    arr = np.frombuffer(buf, dtype=np.uint8, count=n * item, offset=end - n * item).view(dt)
    return buf, arr


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_no_read_outside_the_input(dt, fresh):
    """Inputs whose last element is the last of a mapped page and whose first follows an unmapped one: every
    geometry (right padding and ceil_mode windows past the row, left padding, rows of one or several output
    vectors, the last plane's last rows) runs without a fault and gives torch's values."""
    rng = np.random.default_rng(44)
    for shape, k, s, p, ceil in [((1, 3, 13, 17), 3, 2, 1, True), ((1, 2, 9, 40), 3, 2, 0, True),
                                 ((1, 2, 6, 6), 3, 1, 1, False), ((1, 1, 27, 27), 3, 2, 1, True),
                                 ((1, 2, 11, 111), 3, 2, 1, True), ((1, 1, 5, 16), 2, 2, 0, True),
                                 ((1, 1, 7, 64), 3, 1, 1, False)]:
        n = int(np.prod(shape))
        buf, arr = _guarded(n, dt)
        x = arr.reshape(shape)
        x[...] = _x(rng, shape, dt)
        ref = F.max_pool2d(torch.from_numpy(x.copy()), k, s, p, ceil_mode=ceil).numpy()
        np.testing.assert_array_equal(_run(x, (k, k), (s, s), (p, p), ceil), ref)
        del x, arr
        buf.close()


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_average_pools_on_the_register_kernel(dt, nthreads, fresh):
    """Average pools on the register kernel (the default; NEE_POOL_REG=max: max only), torch's values (count_include_pad both ways,
    ceil_mode, padding), the row-buffer kernel's values exactly (same summation order, same divisors)."""
    rng = np.random.default_rng(45)
    for shape, k, s, p, ceil in [((1, 3, 13, 17), 3, 2, 1, True), ((1, 4, 28, 28), 3, 1, 1, False),
                                 ((1, 5, 14, 14), 3, 2, 1, False), ((2, 3, 7, 7), 3, 1, 1, False),
                                 ((1, 2, 56, 56), 2, 2, 0, False), ((1, 2, 11, 111), 3, 2, 0, True)]:
        x = rng.standard_normal(shape).astype(dt)
        for cip in (False, True):
            ref = F.avg_pool2d(torch.from_numpy(x), k, s, p, ceil_mode=ceil, count_include_pad=cip).numpy()
            outs = []
            for m in ("1", "0"):
                fresh(m)
                outs.append(_run(x, (k, k), (s, s), (p, p), ceil, False, cip))
            tol = {"rtol": 2e-6, "atol": 1e-6} if dt == np.float32 else {"rtol": 1e-13, "atol": 1e-13}
            np.testing.assert_allclose(outs[0], ref, **tol)
            np.testing.assert_array_equal(outs[0], outs[1])
