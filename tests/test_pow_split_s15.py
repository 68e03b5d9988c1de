"""Session 15: float32 pow as a vectorizable helper (scalar.f_pow32) and the cost-weighted parallel split of
elementwise launches (elementwise.split_weight), with launches re-split when the thread count changes."""
import ctypes
import ctypes.util

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import elementwise as ew
from neetorch.devices.cpu import threads

_SPECIAL = np.array([0, -0.0, 1, -1, 2, -2, 0.5, -0.5, 3, -3, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e38, -3e38,
                     0.75, 2.5, 1e10, -1e10, 16777216, 16777217, -16777215, 7, -7, 1.0000001, 0.9999999, 1e-3,
                     -1e-3, 127.5, -126.0], np.float32)


@pytest.fixture
def nthreads():
    n0 = nee.get_num_threads()
    yield
    nee.set_num_threads(n0)


_LIBM = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_LIBM.pow.restype, _LIBM.pow.argtypes = ctypes.c_double, [ctypes.c_double] * 2
_LIBM.powf.restype, _LIBM.powf.argtypes = ctypes.c_float, [ctypes.c_float] * 2


def _libm_pow(a, b):
    """C's pow / powf element by element (glibc's, what torch's CPU kernels call): not np.power, which on AVX-512
    hosts is SVML's and differs in the last bit (seen on AMD Zen 5: powf(7, -1) = 0.14285713)."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    f, dt = (_LIBM.powf, np.float32) if a.dtype == np.float32 else (_LIBM.pow, np.float64)
    return np.array([f(float(x), float(y)) for x, y in zip(a.ravel(), b.ravel())], dt).reshape(a.shape)


def _same_bits(a, b):
    """Equal values, the same sign on zeros and NaN positions (NaN payloads aside)."""
    a, b = np.asarray(a), np.asarray(b)
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan], b[~nan])
                and np.array_equal(np.signbit(a[~nan]), np.signbit(b[~nan])))


def _ulps(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)

    def key(v):
        i = v.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(key(a) - key(b))


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_special_values_grid_as_libm(mode):
    # every pair of special bases and exponents: C99's pow (glibc's powf)
    A, B = np.meshgrid(_SPECIAL, _SPECIAL)
    A, B = A.ravel(), B.ravel()
    ref = _libm_pow(A, B)
    f = (lambda a, b: a ** b) if mode == "eager" else nee.jit(lambda a, b: nee.pow(a, b))
    got = f(nee.tensor(A), nee.tensor(B)).numpy()
    assert got.dtype == np.float32
    bad = [(a, b, r, g) for a, b, r, g in zip(A, B, ref, got) if not _same_bits(r, g)]
    assert not bad, bad[:10]


def test_random_correctly_rounded_against_float64():
    rng = np.random.default_rng(5)
    x = (rng.random(1 << 16) * 20).astype(np.float32)
    x[::7] *= -1
    y = (rng.standard_normal(1 << 16) * 4).astype(np.float32)
    y[::3] = np.round(y[::3])          # integer exponents of negative bases too
    with np.errstate(all="ignore"):
        ref = np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    got = (nee.tensor(x) ** nee.tensor(y)).numpy()
    assert np.array_equal(np.isnan(ref), np.isnan(got))
    m = ~np.isnan(ref)
    # float64's pow rounded once to float32: the correctly rounded result but for double-rounding cases
    assert (_ulps(ref[m], got[m]) == 0).mean() > 0.9999
    assert _ulps(ref[m], got[m]).max() <= 1


@pytest.mark.parametrize("e", [0.75, 2.0, 3.0, 1.5, -1.25, 1 / 3, 7.0, -3.0])
def test_scalar_exponents_within_one_ulp_of_numpy(e):
    rng = np.random.default_rng(1)
    x = (rng.random(5003) * 10 + 1e-3).astype(np.float32)
    with np.errstate(all="ignore"):
        ref = np.power(x, np.float32(e))
    t = nee.tensor(x)
    assert _ulps(ref, nee.pow(t, e).numpy()).max() <= 1
    assert _ulps(ref, (t ** e).numpy()).max() <= 1
    # a strided view and a broadcast exponent tensor take other loops of the same kernel
    xs = nee.tensor(np.ascontiguousarray(np.stack([x, x])).T)[:, 0]
    assert _ulps(ref, nee.pow(xs, nee.tensor(np.float32(e))).numpy()).max() <= 1


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_floats_as_torch(dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = (rng.random(999) * 8).astype(np.float32)
    y = (rng.standard_normal(999) * 2).astype(np.float32)
    tx, ty = torch.tensor(x).to(getattr(torch, dtype)), torch.tensor(y).to(getattr(torch, dtype))
    ref = (tx ** ty).float().numpy()
    got = (nee.tensor(x).to(getattr(nee, dtype)) ** nee.tensor(y).to(getattr(nee, dtype))).float().numpy()
    # (torch computes in float32 and rounds once, as neetorch does; its float32 powf may sit 1 ulp off the
    # correctly rounded value, which can move the low-float rounding by one of its ulps)
    np.testing.assert_allclose(got, ref, rtol=1e-2 if dtype == "bfloat16" else 1e-3, atol=0)


def test_float64_keeps_libm_pow():
    rng = np.random.default_rng(3)
    x = rng.random(1000) * 10
    y = rng.standard_normal(1000) * 3
    assert np.array_equal((nee.tensor(x) ** nee.tensor(y)).numpy(), _libm_pow(x, y))


def _kernel_of(fn, *args):
    """The elementwise kernels the launch cache holds after running fn (keys added by this call)."""
    before = set(ew._launch_cache)
    fn(*args)
    return [k for k in ew._launch_cache if k not in before]


def test_costly_kernels_split_from_fewer_elements(nthreads):
    nee.set_num_threads(2)
    n = 300_000                  # below threads.PARALLEL_THRESHOLD: a plain kernel runs in one chunk
    assert n < threads.PARALLEL_THRESHOLD
    rng = np.random.default_rng(4)
    a = nee.tensor(rng.random(n).astype(np.float32) + 0.5)
    b = nee.tensor(rng.random(n).astype(np.float32) + 0.5)
    plain = _kernel_of(lambda: a + b)
    costly = _kernel_of(lambda: a ** b)
    assert plain and costly
    assert all(len(ew._launch_cache[k]) == 1 for k in plain)
    assert any(len(ew._launch_cache[k]) == 2 for k in costly)
    assert ew.split_weight(costly[0][0]) > 1 and ew.split_weight(plain[0][0]) == 1
    # the split launch gives the one-thread bits
    r2 = (a ** b).numpy()
    nee.set_num_threads(1)
    assert np.array_equal(r2, (a ** b).numpy())


def _lrn(x, C):
    sq = x * x
    sp = nee.nn.functional.pad(sq, (0, 0, 0, 0, 2, 2))
    acc = None
    for i in range(5):
        t = sp.narrow(1, i, C)
        acc = t if acc is None else acc + t
    return x / nee.pow(acc * (1e-4 / 5) + 1.0, 0.75)


def test_jit_launches_follow_the_thread_count(nthreads):
    C = 64                           # 193600 elements: the fused LRN kernel (a pow each) splits, plain ones not
    rng = np.random.default_rng(6)
    x = nee.tensor(rng.standard_normal((1, C, 55, 55)).astype(np.float32))
    f = nee.jit(lambda x: _lrn(x, C))
    ref = None
    calls = []
    orig = ew._native_chunks

    def spy(kern, metas):
        calls.append(len(metas))
        return orig(kern, metas)
    for nt in (1, 2, 1, 2):
        nee.set_num_threads(nt)
        ew._native_chunks = spy
        try:
            for _ in range(3):       # (first run, binding, bound runs)
                r = f(x).numpy()
        finally:
            ew._native_chunks = orig
        if ref is None:
            ref = r
        assert np.array_equal(r, ref)
    # the costly fused kernel was split at 2 threads (bound steps built their native chunk plans) and not at 1
    assert calls and all(c == 2 for c in calls)
    with np.errstate(all="ignore"):
        xn = x.numpy()
        sq = np.pad(xn * xn, ((0, 0), (2, 2), (0, 0), (0, 0)))
        acc = sum(sq[:, i:i + C] for i in range(5))
        np.testing.assert_allclose(r, xn / np.power(acc * np.float32(1e-4 / 5) + 1, np.float32(0.75)),
                                   rtol=2e-6, atol=1e-7)


def test_eager_plan_follows_the_thread_count(nthreads):
    n = 200_000
    x = nee.tensor(np.linspace(0.1, 5, n, dtype=np.float32))
    nee.set_num_threads(1)
    r1 = [nee.pow(x, 0.75).numpy() for _ in range(3)]     # a prepared plan for one thread
    nee.set_num_threads(2)
    keys = _kernel_of(lambda: nee.pow(x, 0.75))
    # the plan made for one thread is not replayed: the launch runs (and is cached) for two
    assert any(k[-1] == 2 and len(ew._launch_cache[k]) == 2 for k in keys)
    assert all(np.array_equal(r, r1[0]) for r in r1 + [nee.pow(x, 0.75).numpy()])


def test_onnx_lrn_against_onnxruntime(nthreads):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    node = helper.make_node("LRN", ["x"], ["y"], size=5, alpha=1e-4, beta=0.75, bias=1.0)
    g = helper.make_graph([node], "lrn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 40, 33, 33])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 40, 33, 33])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    x = (np.random.default_rng(7).standard_normal((1, 40, 33, 33)) * 30).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for nt in (1, 2):
        nee.set_num_threads(nt)
        s = nee.onnx.InferenceSession(m)
        for _ in range(2):
            np.testing.assert_allclose(s.run(None, {"x": x})[0], ref, rtol=1e-5, atol=1e-6)
