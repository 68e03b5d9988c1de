"""The interleaved unit-stride loop of costly elementwise kernels (llvm_render.render_ir, session 13: erf,
gelu... run 4 vectors per iteration over whole multiples of 32 elements, the rest of each row as masked
vector iterations).  Bit for bit against the scalar helpers run by Numba (the kernels' reference), on
lengths around the block and vector boundaries, several rows, broadcast operands, strided and
transposed views, float32 and float64, and the fused gelu(x*w+b) of the benchmark; plus which kernels
take the path."""
import math

import numba
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import fastmath as fm
from neetorch.devices.cpu import llvm_render, scalar

F = nee.nn.functional

LENGTHS = [1, 7, 8, 9, 31, 32, 33, 39, 63, 64, 65, 95, 97, 1000, 1023, 1024, 1025]


@numba.njit(fastmath={"contract"})   # the elementwise kernels' flags
def _gelu32(x, out):
    for i in range(x.size):
        out[i] = scalar.f_gelu32(x[i])


@numba.njit(fastmath={"contract"})
def _gelu64(x, out):
    for i in range(x.size):
        out[i] = scalar.f_gelu64(x[i])


@numba.njit(fastmath={"contract"})
def _erf32(x, out):
    for i in range(x.size):
        out[i] = fm.erf_f32(x[i])


def _ref(fn, x):
    flat = np.ascontiguousarray(x).ravel()
    out = np.empty_like(flat)
    fn(flat, out)
    return out.reshape(x.shape)


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _values(n, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-6, 6, n) * rng.choice([1e-3, 0.3, 1.0, 2.0], n)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 0.8 * math.sqrt(2), -0.8 * math.sqrt(2), 1e-30]
    k = min(n, len(special))
    x[:k] = special[:k]
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", LENGTHS)
def test_gelu_lengths(n, dtype):
    x = _values(n, dtype, n)
    got = F.gelu(nee.tensor(x)).numpy()
    want = _ref(_gelu32 if dtype == np.float32 else _gelu64, x)
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("n", [1, 31, 33, 1023])
def test_erf_lengths(n):
    x = _values(n, np.float32, 100 + n)
    np.testing.assert_array_equal(_bits(nee.erf(nee.tensor(x)).numpy()), _bits(_ref(_erf32, x)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 1001), (5, 33), (7, 31), (2, 64), (4, 3, 97), (1, 1)])
def test_rows_views_and_broadcast(shape, dtype):
    x = _values(int(np.prod(shape)) * 2, dtype, 7).reshape(shape[:-1] + (shape[-1] * 2,))
    ref = _gelu32 if dtype == np.float32 else _gelu64
    t = nee.tensor(x)
    # contiguous rows, innermost-strided view, transposed view (any-strides loop / other collapse)
    for view, xv in ((t, x), (t[..., ::2], x[..., ::2]), (t.transpose(-1, -2), np.swapaxes(x, -1, -2))):
        np.testing.assert_array_equal(_bits(F.gelu(view).numpy()), _bits(_ref(ref, xv)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows, cols", [(4, 1024), (3, 1001), (6, 33), (5, 95)])
def test_fused_gelu_affine(rows, cols, dtype):
    rng = np.random.default_rng(rows * cols)
    x = _values(rows * cols, dtype, cols).reshape(rows, cols)
    # w: powers of two and b = 0, so x*w+b is exact whether or not it is contracted: the bits are gelu's
    w = (2.0 ** rng.integers(-3, 4, cols)).astype(dtype)
    b = np.zeros(cols, dtype)
    jf = nee.jit(lambda x, w, b: F.gelu(x * w + b))
    got = jf(nee.tensor(x), nee.tensor(w), nee.tensor(b)).numpy()
    want = _ref(_gelu32 if dtype == np.float32 else _gelu64, x * w + b)   # (-0.0 * w + 0 is +0.0)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    # general w, b: against a float64 gelu of the float64 affine values (the erf's and the roundings' error)
    x = rng.standard_normal((rows, cols)).astype(dtype)
    w, b = rng.standard_normal(cols).astype(dtype), rng.standard_normal(cols).astype(dtype)
    got = jf(nee.tensor(x), nee.tensor(w), nee.tensor(b)).numpy().astype(np.float64)
    t = x.astype(np.float64) * w + b
    want = 0.5 * t * (1 + np.vectorize(math.erf)(t / math.sqrt(2)))
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(got, want, rtol=8 * eps, atol=8 * eps * np.abs(t).max())


def test_which_kernels_interleave():
    f32 = ["float32"]
    gelu = llvm_render.render_ir("g", f32, f32, ["t0 = np.float32(f_gelu32(v0))"], ["t0"], variant=())
    assert "interleaved x4" in gelu.splitlines()[0] and "llvm.loop.interleave.count" in gelu
    assert "llvm.loop.vectorize.predicate.enable" in gelu          # the masked rest of the row
    cheap = llvm_render.render_ir("a", f32 * 3, f32, ["t0 = np.float32(v0 * v1)", "t1 = np.float32(t0 + v2)"],
                                  ["t1"], variant=())
    assert "interleave" not in cheap
    # the any-strides loop is never interleaved
    strided = llvm_render.render_ir("g", f32, f32, ["t0 = np.float32(f_gelu32(v0))"], ["t0"], variant=None)
    assert "interleave" not in strided


@pytest.mark.parametrize("n", [33, 1031, 4096 + 5])
def test_inplace_and_out(n):
    # in place (the output is the input: the alias check lets it run the interleaved loop) and out=
    x = _values(n, np.float32, n)
    want = _bits(_ref(_erf32, x))
    t = nee.tensor(x.copy())
    t.erf_()
    np.testing.assert_array_equal(_bits(t.numpy()), want)
    o = nee.empty(n)
    nee.erf(nee.tensor(x), out=o)
    np.testing.assert_array_equal(_bits(o.numpy()), want)


@pytest.mark.parametrize("shape", [(1031, 1023), ((1 << 20) + 7,)])
def test_thread_chunks(shape):
    # launches from threads.PARALLEL_THRESHOLD elements are split into one chunk per thread (by rows, or
    # along the only dim: chunks starting at any element, not at block multiples)
    x = _values(int(np.prod(shape)), np.float32, 11).reshape(shape)
    np.testing.assert_array_equal(_bits(F.gelu(nee.tensor(x)).numpy()), _bits(_ref(_gelu32, x)))
