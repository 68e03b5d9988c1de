"""Complex dtypes, ``nee.fft`` and ``nee.stft`` / ``nee.istft``, checked against torch."""
# ruff: noqa: B023  (the lambdas built in loops are called by check() before the loop moves on)
import itertools

import numpy as np
import pytest

import neetorch as nee
from neetorch.tensor import dtypes as _dt

torch = pytest.importorskip("torch")
from torch_check import make_check  # noqa: E402

RNG = np.random.default_rng(7)
C64 = (RNG.standard_normal((3, 5)) + 1j * RNG.standard_normal((3, 5))).astype(np.complex64)
C128 = C64.astype(np.complex128) + 1e-9j
TOL = {"complex64": 2e-5, "float32": 2e-5, "complex128": 1e-11, "float64": 1e-11}


# the shared harness (tests/torch_check.py), complex results within the tolerance
check = make_check(torch, {**TOL, "other": 2e-3}, complex_tol=True)


def tdt(L, name):
    return getattr(L, name)


# ------------------------------------------------------------------ dtypes and promotion
NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64",
         "complex128"]


def test_dtype_objects():
    assert nee.cfloat is nee.complex64 and nee.cdouble is nee.complex128
    assert nee.complex64.is_complex and not nee.complex64.is_floating_point and nee.complex128.itemsize == 16
    assert _dt.to_dtype(np.complex64) is nee.complex64 and _dt.to_dtype("cdouble") is nee.complex128
    assert _dt.to_dtype(complex) is nee.complex64
    assert repr(nee.complex64) == "neetorch.complex64"
    import pickle
    assert pickle.loads(pickle.dumps(nee.complex128)) is nee.complex128


def test_promote_types_every_pair():
    for a, b in itertools.product(NAMES, NAMES):
        got = nee.promote_types(getattr(nee, a), getattr(nee, b)).name
        assert got == str(torch.promote_types(getattr(torch, a), getattr(torch, b))).split(".")[-1], (a, b)


def test_result_type_with_complex_scalars_and_0d():
    scalars = [1j, 2.5, 3, True]
    for name in NAMES:
        for nd in (0, 1):
            shape = () if nd == 0 else (2,)
            tt, nt = torch.zeros(shape, dtype=getattr(torch, name)), nee.zeros(shape, dtype=getattr(nee, name))
            for s in scalars:
                want = torch.result_type(tt, s)
                if want == torch.complex32:   # float16 with a complex scalar: no complex32 in neetorch
                    with pytest.raises(TypeError, match="complex32"):
                        nee.result_type(nt, s)
                    continue
                assert nee.result_type(nt, s).name == str(want).split(".")[-1], (name, nd, s)
            for other in ("complex64", "complex128", "float64"):   # a 0-d tensor of another category
                t0, n0 = torch.zeros((), dtype=getattr(torch, other)), nee.zeros((), dtype=getattr(nee, other))
                want = torch.result_type(tt, t0)
                if want == torch.complex32:
                    continue
                assert nee.result_type(nt, n0).name == str(want).split(".")[-1], (name, nd, other)


def test_default_complex_follows_default_float():
    nee.set_default_dtype(nee.float64)
    try:
        assert nee.tensor([1j]).dtype is nee.complex128
        assert nee.result_type(nee.ones(2, dtype=nee.float32), 1j) is nee.complex64
    finally:
        nee.set_default_dtype(nee.float32)
    assert nee.tensor(1j).dtype is nee.complex64


# ------------------------------------------------------------------ creation, views, casts, printing
def test_creation():
    check(lambda L: (L.tensor([1 + 2j, 3 - 1j]), L.tensor([[1, 2j]]), L.tensor(np.complex128(1 + 1j))))
    check(lambda L, a: L.tensor(a), C128)
    check(lambda L: (L.full((2, 3), 1 - 2j), L.zeros(2, dtype=L.complex64), L.ones(3, dtype=L.cdouble)))
    check(lambda L: L.full((2,), 1j, dtype=L.float32))   # imaginary part does not fit: both refuse
    re, im = RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal((3,)).astype(np.float32)
    check(lambda L, a, b: (L.complex(a, b), L.polar(a, b), L.complex(a.double(), b.double())), re, im)
    check(lambda L, a, b: L.complex(a, b.double()), re, im)   # mixed dtypes refused
    with pytest.raises(TypeError, match="complex32"):   # torch makes complex32, which neetorch does not have
        nee.complex(nee.tensor(re).half(), nee.tensor(im).half())
    check(lambda L: (L.linspace(0, 1j, 5), L.linspace(1 + 1j, -2, 4), L.linspace(0, 1, 3, dtype=L.complex128),
                     L.linspace(1j, 2j, 1), L.zeros_like(L.ones(2, dtype=L.cfloat)), L.full_like(L.ones(2), 1j)))
    check(lambda L: L.arange(3, dtype=L.complex64))   # torch refuses too
    check(lambda L: (L.randn(3, dtype=L.complex64).shape, L.rand(2, dtype=L.cdouble).shape))
    r = nee.randn(20000, dtype=nee.complex64).numpy()   # unit variance: 1/2 in each part, as in torch
    assert abs(r.real.var() - 0.5) < 0.03 and abs(r.imag.var() - 0.5) < 0.03
    t = nee.from_numpy(C64)
    assert t.dtype is nee.complex64 and t.is_complex() and nee.is_complex(t) and not nee.ones(1).is_complex()


def test_real_imag_are_views():
    x = nee.tensor(C64)
    check(lambda L, a: (a.real, a.imag, L.real(a), L.imag(a), a.real.stride(), a.t().imag.stride()), C64)
    x.real[0, 0] = 10.0
    x.imag.mul_(2)
    assert x.numpy()[0, 0] == pytest.approx(10 + 2j * C64[0, 0].imag)
    np.testing.assert_allclose(x.numpy()[1:].imag, 2 * C64[1:].imag)
    x.real = nee.zeros(3, 5)
    assert np.all(x.numpy().real == 0)
    check(lambda L, a: a.real, RNG.standard_normal(3).astype(np.float32))   # the tensor itself
    check(lambda L, a: a.imag, RNG.standard_normal(3).astype(np.float32))   # refused for real dtypes


def test_view_as_real_and_complex():
    check(lambda L, a: (L.view_as_real(a), L.view_as_real(a).stride(), L.view_as_real(a[:, 1::2]).stride(),
                        L.view_as_real(a[0, 0])), C64)
    x = nee.tensor(C64)
    nee.view_as_real(x)[1, 2, 1] = 7.0   # writes reach the complex tensor
    assert x.numpy()[1, 2].imag == 7.0
    f = RNG.standard_normal((4, 6, 2))
    check(lambda L, a: (L.view_as_complex(a), L.view_as_complex(a.float()), L.view_as_complex(a[:, ::2])), f)
    y = nee.tensor(f)
    c = nee.view_as_complex(y)
    c.mul_(2)   # a view: the real tensor sees it
    np.testing.assert_allclose(y.numpy(), 2 * f)
    for bad in (lambda L, a: L.view_as_complex(a[..., :1]), lambda L, a: L.view_as_complex(a.transpose(0, 2)),
                lambda L, a: L.view_as_complex(a.flatten()[1:-1].reshape(2, 23, 2)[:, ::2]),
                lambda L, a: L.view_as_complex(a.flatten()[1:-1].view(23, 2)),
                lambda L, a: L.view_as_real(a)):
        check(bad, f)


def test_casts_and_conj():
    assert nee.tensor(C64).type() == "neetorch.ComplexFloatTensor"
    with pytest.raises(RuntimeError, match="float and double"):   # torch: complex32
        nee.view_as_complex(nee.ones(3, 2, dtype=nee.float16))
    check(lambda L, a: (a.to(L.complex128), a.to(L.float32), a.float(), a.to(L.int32), a.type(L.complex64),
                        a.conj(), L.conj_physical(a), a.conj().is_conj() is not None, a.resolve_conj(), a.H, a.mH,
                        a.abs(), L.angle(a), a.sgn(), L.sgn(a)), C64)
    check(lambda L, a: (a.to(L.complex64), a.to(L.cdouble), L.angle(a), L.sgn(a), a.conj(), a.real), np.arange(-2, 3))
    with pytest.warns(UserWarning, match="discards the imaginary part"):
        nee.tensor(C64).to(nee.float32)
    big = nee.tensor(np.full(70000, 1 + 2j, np.complex64))   # the multi-threaded copy path
    r = nee.zeros(70000, dtype=nee.float64)
    with pytest.warns(UserWarning):
        r.copy_(big)
    assert np.all(r.numpy() == 1.0)
    z = nee.zeros(70000, dtype=nee.complex128)
    z.copy_(nee.arange(70000))
    assert z.numpy()[-1] == 69999 and z.dtype is nee.complex128


def test_repr_matches_torch():
    cases = [C64, C128[:2, :2], np.complex64(1.25 - 0.5j), np.array([np.nan + 1j, np.inf - 2j, -0.0 + 0j]),
             (np.arange(2000).reshape(40, 50) * (1 + 1j)).astype(np.complex64), np.array([0.1 + 0.2j, 1e9 - 3j])]
    for c in cases:
        a = np.asarray(c)
        assert repr(nee.from_numpy(a.copy())) == repr(torch.from_numpy(a.copy())).replace("torch.", "neetorch.")


# ------------------------------------------------------------------ elementwise
UNARY = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "asin",
         "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "reciprocal", "abs", "neg",
         "square", "isnan", "isinf", "isfinite", "logical_not", "angle", "sgn"]
REFUSED_UNARY = ["erf", "erfc", "lgamma", "floor", "ceil", "trunc", "round", "frac", "sign", "relu", "isposinf",
                 "isneginf", "signbit", "bitwise_not"]


@pytest.mark.parametrize("name", ["complex64", "complex128"])
def test_unary(name):
    a = C64 if name == "complex64" else C128
    for op in UNARY:
        check(lambda L, x: (getattr(L, op)(x), getattr(L, op)(x.t())), a)
    for op in REFUSED_UNARY:
        check(lambda L, x: getattr(L, op)(x), a)
    check(lambda L, x: x.sigmoid(), a)
    special = np.array([0j, 1 + 0j, -1 + 0j, 1j, np.inf + 0j, np.nan + 1j, -np.inf + 1j], a.dtype)
    for op in ("exp", "log", "sqrt", "abs", "isnan", "isinf", "isfinite", "angle", "sgn", "reciprocal"):
        check(lambda L, x: getattr(L, op)(x), special, tol=1e-5)


BINARY = ["add", "sub", "mul", "div", "pow", "eq", "ne", "logical_and", "logical_or", "logical_xor"]
REFUSED_BINARY = ["lt", "le", "gt", "ge", "maximum", "minimum", "fmax", "fmin", "atan2", "hypot", "copysign",
                  "remainder", "fmod", "floor_divide", "xlogy"]


def test_binary_promotion_and_broadcast():
    f32 = RNG.standard_normal((3, 1)).astype(np.float32)
    f64 = RNG.standard_normal((5,))
    i64 = np.arange(5) - 2
    for op in BINARY:
        for x, y in ((C64, C64[::-1]), (C64, f32), (f64, C64), (C64, i64), (C128, f32), (C64.T.copy(), C64.T)):
            check(lambda L, a, b: getattr(L, op)(a, b), x, y, tol=1e-4)
        for s in (2, 0.5, 1j, -1.5 + 2j, True):
            check(lambda L, a: (getattr(L, op)(a, s), getattr(L, op)(a.t(), s)), C64, tol=1e-4)
        check(lambda L, a: getattr(L, op)(a, L.tensor(2 + 1j, dtype=L.complex128)), f32, tol=1e-4)
        check(lambda L, a: getattr(L, op)(a, L.tensor(2 + 1j, dtype=L.complex64)), f64, tol=1e-4)
    for op in REFUSED_BINARY:
        check(lambda L, a, b: getattr(L, op)(a, b), C64, C64)
    check(lambda L, a: (a + 1j, 1j * a, a / 2j, 2 ** a, a ** 2, a ** 0.5, a - 1, 1 - a, -a, a == a.clone(), a != 0), C64,
          tol=1e-4)
    with pytest.raises(TypeError, match="complex32"):   # float16 + 1j is complex32 in torch: neetorch refuses
        nee.ones(3, dtype=nee.float16) + 1j
    check(lambda L, a: a.half() + L.ones(3, dtype=L.complex64), C64.real[0, :3])   # a complex64 tensor: fine
    check(lambda L, a: a < 1, C64)
    check(lambda L, a: a > a.conj(), C64)


def test_inplace_out_and_ternary():
    def f(L, a, b):
        x = a.clone()
        x += b
        x *= 1j
        x.sub_(b, alpha=2)
        y = L.empty(0, dtype=L.complex64)
        L.mul(a, b, out=y)
        return x, y
    check(f, C64, C64[0])
    check(lambda L, a: a.clone().add_(1j), RNG.standard_normal(3).astype(np.float32))   # complex into float: refused
    check(lambda L, a: L.mul(a, a, out=L.empty(15, dtype=L.float32)), C64)
    cond = RNG.random((3, 5)) > 0.5
    check(lambda L, c, a, b: (L.where(c, a, b), L.where(c, a, 0), L.where(c, a, 1j)), cond, C64, C64[::-1], tol=1e-6)
    check(lambda L, a, b: (L.addcmul(a, a, b, value=2), L.addcdiv(a, a, b, value=0.5), L.lerp(a, b, 0.3),
                           L.lerp(a, b, 0.8)), C64, C64[::-1], tol=1e-4)
    check(lambda L, a: (L.clamp(a, 0, 1), a.clamp(min=0)), C64)
    check(lambda L, a: L.nn.functional.relu(a), C64)
    check(lambda L, a: (L.isclose(a, a + 1e-7), L.allclose(a, a * (1 + 1e-7)), L.allclose(a, a + 1),
                        L.equal(a, a.clone())), C64)


# ------------------------------------------------------------------ reductions, products, shape ops
def test_reductions():
    x = C64.reshape(3, 5)
    for f in (lambda L, a: (a.sum(), a.sum(0), a.sum((0, 1), keepdim=True), a.sum(-1, dtype=L.complex128)),
              lambda L, a: (a.mean(), a.mean(1, keepdim=True), a.t().mean(0)),
              lambda L, a: (a.prod(), a.prod(0), a.cumsum(1), a.cumprod(0), a.t().cumsum(0)),
              lambda L, a: (a.any(), a.all(1), L.count_nonzero(a, 0), (a * 0).any()),
              lambda L, a: a.sum(dtype=L.float32)):
        check(f, x, tol=1e-4)
    for bad in ("max", "min", "amax", "argmax", "argmin", "sort", "median", "nansum", "aminmax"):
        check(lambda L, a: getattr(a, bad)(), x)
    check(lambda L, a: a.topk(2), x)
    check(lambda L, a: a.cummax(0), x)
    check(lambda L, a: L.clamp(a, max=1), x)


def test_matmul_and_shape_ops():
    a = (RNG.standard_normal((2, 3, 4)) + 1j * RNG.standard_normal((2, 3, 4))).astype(np.complex64)
    b = (RNG.standard_normal((4, 5)) + 1j * RNG.standard_normal((4, 5))).astype(np.complex64)
    check(lambda L, x, y: (x @ y, L.matmul(x[0], y), L.matmul(x[0, 0], y), L.matmul(x[0], y[:, 0]),
                           L.matmul(x.transpose(1, 2)[0].t(), y), L.einsum("bij,jk->bik", x, y)), a, b, tol=1e-4)
    check(lambda L, x: (x.reshape(6, 4), x.permute(2, 0, 1).contiguous(), x[:, 1:, ::2], x[..., None].expand(2, 3, 4, 2),
                        L.cat([x, x], 1), L.stack([x, x]), x.flip(0), x.roll(1, 2), x.repeat(1, 2, 1), x[x.real > 0],
                        x[:, [0, 2]], L.tril(x[0]), L.triu(x[0], 1), x.index_select(2, L.tensor([3, 0])),
                        x.flatten().take(L.tensor([0, 5])), L.nonzero(x[0].real > 0), x.clone(), x.unbind(0)[1],
                        x.gather(2, L.zeros(2, 3, 1, dtype=L.int64))), a)

    def setitem(L, x):
        y = x.clone()
        y[0, 1] = 5 + 1j
        y[1] = y[0] * 2
        y[:, :, 0] = 0
        return y
    check(setitem, a)
    check(lambda L, x: x.item(), a[0, 0, 0])
    assert nee.tensor(a)[0, 0, 0].item() == complex(a[0, 0, 0])
    assert nee.tensor(a).tolist() == a.tolist()


def test_guard_refuses_everything_unlisted():
    from neetorch.ops import complex as cx
    from neetorch.ops.registry import OPS
    x = nee.tensor(C64)
    refused = [n for n in OPS if n not in cx.COMPLEX_ELEMENTWISE and n not in cx.COMPLEX_OTHER]
    assert {"lt", "amax", "sort", "softmax", "conv2d", "median", "topk"} <= set(refused)
    for name in refused:
        with pytest.raises(NotImplementedError, match=f"{name}: not implemented for complex"):
            OPS[name].infer([nee.ops.Meta(tuple(x.shape), x.dtype)], {})
        assert OPS[name].check is None or not getattr(OPS[name].check, "refuses_complex", False)


# ------------------------------------------------------------------ devices and tracing
def test_complex_stays_on_cpu():
    devs = [d.type for d in nee.devices() if d.available and d.type != "cpu"]
    x = nee.tensor(C64)
    for d in devs[:2]:
        with pytest.raises(RuntimeError, match="CPU only"):
            x.to(d)
        with pytest.raises(RuntimeError, match="CPU only"):
            nee.zeros(2, dtype=nee.complex64, device=d)
        with pytest.raises(RuntimeError, match="CPU"):
            nee.fft.rfft(nee.ones(4, device=d))
        assert nee.fft.fftfreq(4, device=d).device.type == d   # real results may live anywhere


def test_jit_refuses_complex():
    @nee.jit
    def f(a):
        return (a * 2).abs()

    with pytest.raises(NotImplementedError, match="complex"):
        f(nee.tensor(C64))

    @nee.jit
    def g(a):
        return nee.fft.fft(a).abs()

    with pytest.raises(NotImplementedError, match="eager only"):
        g(nee.ones(8))


# ------------------------------------------------------------------ fft
REAL = RNG.standard_normal((4, 7, 6))
NORMS = [None, "backward", "ortho", "forward"]


@pytest.mark.parametrize("fn", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"])
def test_fft_1d(fn):
    cplx = (REAL + 1j * REAL[::-1]).astype(np.complex128)
    inputs = [REAL.astype(np.float32), REAL, cplx.astype(np.complex64), cplx, (REAL * 3).astype(np.int64),
              REAL > 0]
    for i, (a, n, dim) in enumerate(itertools.product(inputs, [None, 1, 4, 13], [-1, 0, 1])):
        norm = NORMS[(i + i // 4) % 4]   # every norm meets every input, n and dim
        check(lambda L, x: getattr(L.fft, fn)(x, n=n, dim=dim, norm=norm), a)
    check(lambda L, x: getattr(L.fft, fn)(x.transpose(0, 2)[1:, ::2], n=5, dim=1), cplx)   # non-contiguous
    check(lambda L, x: getattr(L.fft, fn)(x.transpose(0, 2)[1:, ::2], dim=-1, norm="ortho"), REAL.astype(np.float32))
    for bad in (lambda L, x: getattr(L.fft, fn)(x, n=0), lambda L, x: getattr(L.fft, fn)(x, norm="bad"),
                lambda L, x: getattr(L.fft, fn)(x, dim=3), lambda L, x: getattr(L.fft, fn)(x.half()),
                lambda L, x: getattr(L.fft, fn)(x[0, 0, 0]), lambda L, x: getattr(L.fft, fn)(x[..., :1])):
        check(bad, REAL.astype(np.float32))
    check(lambda L, x: getattr(L.fft, fn)(x + 0j), REAL)   # complex input: refused by rfft / ihfft


@pytest.mark.parametrize("fn", ["fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn", "hfft2",
                                "ihfft2", "hfftn", "ihfftn"])
def test_fft_nd(fn):
    cplx = (REAL + 1j * REAL[::-1]).astype(np.complex64)
    nd = fn.endswith("n")
    shapes = [None, (3, 4), (5, 9), (-1, 2)] + ([(2, 3, 10), (4,)] if nd else [])
    dims = [None, (0, 2), (-1, 0), (1,)] if nd else [(-2, -1), (0, 2), (2, 0)]
    for i, (a, s, dim) in enumerate(itertools.product([REAL.astype(np.float32), cplx, np.arange(24).reshape(2, 3, 4)],
                                                      shapes, dims)):
        check(lambda L, x: getattr(L.fft, fn)(x, s=s, dim=dim, norm=NORMS[i % 4]), a)
    check(lambda L, x: getattr(L.fft, fn)(x.transpose(0, 2)[::2]), cplx)
    for bad in (lambda L, x: getattr(L.fft, fn)(x, s=(0, 3)), lambda L, x: getattr(L.fft, fn)(x, s=(2,), dim=(0, 1)),
                lambda L, x: getattr(L.fft, fn)(x, dim=(0, 0)), lambda L, x: getattr(L.fft, fn)(x, s=(2, 2, 2, 2)),
                lambda L, x: getattr(L.fft, fn)(x, dim=()), lambda L, x: getattr(L.fft, fn)(x, norm="x"),
                lambda L, x: getattr(L.fft, fn)(x[:, :, :1])):
        check(bad, REAL.astype(np.float32))


def test_fft_out_and_round_trip():
    x = REAL.astype(np.float32)
    check(lambda L, a: L.fft.fft(a, out=L.empty(0, dtype=L.complex64)), x)
    check(lambda L, a: L.fft.fft(a, out=L.empty(0, dtype=L.complex128)), x, tol=1e-5)   # computed in float32
    t = nee.tensor(x)
    np.testing.assert_allclose(nee.fft.irfftn(nee.fft.rfftn(t), s=t.shape).numpy(), x, atol=1e-5)
    np.testing.assert_allclose(nee.fft.ifft(nee.fft.fft(t)).real.numpy(), x, atol=1e-5)


def test_freqs_and_shifts():
    for n, d in ((1, 1.0), (5, 0.3), (8, 2.0), (7, 1e-3)):
        check(lambda L: (L.fft.fftfreq(n, d), L.fft.rfftfreq(n, d), L.fft.fftfreq(n, d, dtype=L.float64),
                         L.fft.rfftfreq(n, d=d, dtype=L.float64)), tol=1e-7)
    check(lambda L: L.fft.fftfreq(5, dtype=L.int64))
    a = np.arange(30).reshape(5, 6)
    check(lambda L, x: (L.fft.fftshift(x), L.fft.ifftshift(x), L.fft.fftshift(x, dim=0), L.fft.ifftshift(x, dim=(-1,)),
                        L.fft.ifftshift(L.fft.fftshift(x)), L.fft.fftshift(x.t()), L.fft.fftshift(x + 1j, dim=1)), a)


# ------------------------------------------------------------------ stft / istft
def test_stft_matches_torch():
    x1 = RNG.standard_normal(45).astype(np.float32)
    x2 = RNG.standard_normal((2, 33))
    hann = np.hanning(8).astype(np.float32) + 0.1
    for i, (x, (n_fft, hop, win), pad_mode, w) in enumerate(itertools.product(
            [x1, x2], [(8, None, None), (8, 3, 6), (7, 2, None)],
            ["reflect", "constant", "replicate", "circular", None], ["none", "hann"])):
        center, normalized, onesided = pad_mode is not None, i % 2 == 1, [None, False][i // 2 % 2]
        pad_mode = pad_mode or "reflect"
        wl = win or n_fft
        wa = None if w == "none" else hann[:wl].astype(x.dtype)
        check(lambda L, a, *ws: L.stft(a, n_fft, hop_length=hop, win_length=win, window=ws[0] if ws else None,
                                       center=center, pad_mode=pad_mode, normalized=normalized, onesided=onesided,
                                       return_complex=True), x, *([] if wa is None else [wa]), tol=1e-4)
    xc = (x1 + 0.5j).astype(np.complex64)
    check(lambda L, a: (L.stft(a, 8, return_complex=True), L.stft(a, 8), L.stft(a, 8, onesided=False)), xc, tol=1e-4)
    check(lambda L, a, w: L.stft(a, 8, window=w, return_complex=True), x1, (hann + 1j).astype(np.complex64), tol=1e-4)
    check(lambda L, a: L.stft(a, 8, return_complex=False), x1, tol=1e-4)


def test_stft_errors():
    x = RNG.standard_normal(20).astype(np.float32)
    for bad in (lambda L, a: L.stft(a, 8),                                   # return_complex required
                lambda L, a: L.stft(a, 8, hop_length=0, return_complex=True),
                lambda L, a: L.stft(a, 8, win_length=9, return_complex=True),
                lambda L, a: L.stft(a, 8, window=L.ones(5), return_complex=True),
                lambda L, a: L.stft(a.reshape(2, 2, 5), 4, return_complex=True),
                lambda L, a: L.stft(a[:3], 8, return_complex=True),            # reflect pad longer than input
                lambda L, a: L.stft(a, 30, center=False, return_complex=True),
                lambda L, a: L.stft(a + 0j, 8, onesided=True),
                lambda L, a: L.stft(a, 0, return_complex=True)):
        check(bad, x)
    with pytest.raises(RuntimeError, match="return_complex"):
        nee.stft(nee.tensor(x), 8)
    with pytest.warns(UserWarning, match="window was not provided"):
        nee.stft(nee.tensor(x), 8, return_complex=True)


def test_istft_matches_torch():
    hann = np.hanning(10)[1:-1].astype(np.float32)   # no zeros at the ends: the overlap-add envelope stays > 0
    for i, (shape, (n_fft, hop, win), center, length, w) in enumerate(itertools.product(
            [(41,), (2, 36)], [(8, None, None), (8, 3, 6), (7, 2, None)], [True, False], [None, 25, 60],
            ["none", "hann"])):
        normalized, onesided = i % 2 == 1, [None, False][i // 2 % 2]
        x = RNG.standard_normal(shape).astype(np.float32)
        wl = win or n_fft
        wa = None if w == "none" else hann[:wl]

        def f(L, a, *ws):
            window = ws[0] if ws else None
            s = L.stft(a, n_fft, hop_length=hop, win_length=win, window=window, center=center,
                       normalized=normalized, onesided=onesided, return_complex=True)
            return L.istft(s, n_fft, hop_length=hop, win_length=win, window=window, center=center,
                           normalized=normalized, onesided=onesided, length=length)
        check(f, x, *([] if wa is None else [wa]), tol=1e-4)
    s = (RNG.standard_normal((8, 6)) + 1j * RNG.standard_normal((8, 6))).astype(np.complex64)
    check(lambda L, a: L.istft(a, 8, onesided=False, return_complex=True), s, tol=1e-4)
    check(lambda L, a: L.istft(a.to(L.complex128), 8, onesided=False), s, tol=1e-4)
    w = (np.hanning(8) + 0.2 + 0.1j).astype(np.complex64)
    check(lambda L, a, win: (L.istft(a, 8, window=win, onesided=False, return_complex=True),
                             L.stft(L.istft(a, 8, window=win, onesided=False, return_complex=True), 8, window=win)),
          s, w, tol=1e-4)
    check(lambda L, a, win: L.istft(a, 8, window=win, onesided=False), s, w)   # complex window, real output


def test_istft_errors():
    s = (RNG.standard_normal((5, 6)) + 1j * RNG.standard_normal((5, 6))).astype(np.complex64)
    for bad in (lambda L, a: L.istft(a.real, 8),                 # real input
                lambda L, a: L.istft(a[:4], 8),                  # frequency dim does not match n_fft
                lambda L, a: L.istft(a, 8, window=L.zeros(8)),   # vanishing envelope
                lambda L, a: L.istft(a, 8, return_complex=True),  # onesided and complex output
                lambda L, a: L.istft(a, 8, onesided=False),
                lambda L, a: L.istft(a, 8, hop_length=9),
                lambda L, a: L.istft(a, 8, window=L.ones(5))):
        check(bad, s)
    with pytest.warns(UserWarning, match="padded with zeros"):
        nee.istft(nee.tensor(s), 8, window=nee.ones(8), length=40)


def test_var_std_norms():
    x = C64.reshape(3, 5)
    check(lambda L, a: (a.var(), a.std(1), a.var(0, keepdim=True), L.var_mean(a, 1), L.std_mean(a, correction=0),
                        L.linalg.vector_norm(a), L.linalg.vector_norm(a, 1, dim=0), L.norm(a),
                        L.linalg.vector_norm(a, float("inf")), L.linalg.vector_norm(a, 0), L.linalg.vector_norm(a, 3)),
          x, tol=1e-4)


def test_frontends_with_complex_meaning():
    x = C64
    check(lambda L, a: (L.vdot(a[0], a[1]), a[0].vdot(a[2]), L.adjoint(a), a.adjoint(), L.inner(a, a),
                        L.outer(a[0], a[1]), L.kron(a[:2, :2], a[:2, :2]), L.einsum("ij,ij->i", a, a.conj())),
          x, tol=1e-4)
    check(lambda L, a: a.clone().abs_(), x)
    check(lambda L, a: (L.cov(a), L.corrcoef(a)), x, tol=1e-4)


def test_indexing_writes_and_padding():
    def f(L, a):
        y = a.clone()
        y[L.tensor([0, 2]), L.tensor([1, 3])] = L.tensor([5j, 2 + 1j])
        y[y.real > 1] = 1j
        z = y.index_put((L.tensor([0, 0]),), a[:2], accumulate=True)
        return (y, z, a.repeat_interleave(2, 0), L.nn.functional.pad(a, (1, 2)), a.masked_scatter(a.real > 0, a * 2),
                L.diag_embed(a), a.masked_fill(a.real > 0, 2j), L.where(a.real > 0, 1j, 0.5),
                L.nn.functional.pad(a[None], (1, 2), mode="reflect"), L.nn.functional.pad(a[None], (2, 1), mode="replicate"))
    check(f, C64, tol=1e-6)


def test_numpy_fft_backend(monkeypatch):
    """Without scipy, nee.fft runs numpy.fft: the same results."""
    monkeypatch.setattr(nee.fft, "_FFT", np.fft)
    x, c = REAL.astype(np.float32), (REAL + 1j * REAL[::-1]).astype(np.complex64)
    for fn in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
        check(lambda L, a: getattr(L.fft, fn)(a, n=5, dim=1, norm="ortho"), x if fn in ("rfft", "ihfft") else c)
    for fn in ("fftn", "ifftn", "rfftn", "irfftn", "fft2", "rfft2", "hfftn", "ihfft2"):
        for norm in (None, "forward", "ortho"):
            check(lambda L, a: getattr(L.fft, fn)(a, s=(3, 4), norm=norm), x)
            check(lambda L, a: getattr(L.fft, fn)(a, dim=(0, 2), norm=norm), c if fn == "hfftn" else x)
    w = np.hanning(8).astype(np.float32) + 0.1
    check(lambda L, a, win: L.istft(L.stft(a, 8, 3, window=win, return_complex=True), 8, 3, window=win), x[0, 0], w,
          tol=1e-4)


def test_bfloat16_with_complex():
    if not hasattr(nee, "bfloat16"):
        pytest.skip("no bfloat16 (ml_dtypes missing)")
    check(lambda L, a: (a.bfloat16().to(L.complex64), a.bfloat16() + 1j, str(L.result_type(a.bfloat16(), 1j)).split(".")[-1],
                        str(L.promote_types(L.bfloat16, L.complex128)).split(".")[-1]), np.array([1.5, -2.25], np.float32))
    check(lambda L, a: L.fft.fft(a.bfloat16()), np.array([1.5, -2.25], np.float32))   # both refuse
