"""Torch parity, session 13: complex ``logaddexp`` (and complex ``log1p``, which it rests on); ``log_normal_``,
``exponential_``, ``geometric_``, ``cauchy_``, ``random_`` and ``bernoulli_`` / ``bernoulli`` on empty tensors and
on every dtype (results, and refusals with torch's error type and message).  torch 2.13 is the reference."""
import math
import re
import warnings

import numpy as np
import pytest

import neetorch as nee

torch = pytest.importorskip("torch")

CDTS = [("complex64", np.complex64), ("complex128", np.complex128)]


def _tn(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _same_nan(x, y):
    return (np.isnan(x.real) | np.isnan(x.imag)) == (np.isnan(y.real) | np.isnan(y.imag))


def _check_close(ref, got, dt, a=None, b=None):
    """``got`` (neetorch) against ``ref`` (torch), componentwise: NaN where torch has NaN (except torch's
    subnormal artefact, below), the same infinities, finite parts within 8 ulp of ``|ref|``."""
    eps, tiny = np.finfo(dt).eps, np.finfo(dt).tiny
    ref, got = np.asarray(ref), np.asarray(got)
    assert ref.shape == got.shape and got.dtype == dt
    nan_r = np.isnan(ref.real) | np.isnan(ref.imag)
    nan_g = np.isnan(got.real) | np.isnan(got.imag)
    assert not np.any(nan_g & ~nan_r), (a[nan_g & ~nan_r] if a is not None else None)
    only_torch = nan_r & ~nan_g
    if only_torch.any():
        # torch's c10 complex log1p divides by a subnormal ``u - 1`` (1/d overflows: NaN) where exp(min - max)
        # has a subnormal part; neetorch scales first and gives the limit max + exp(min - max) ~= max
        assert a is not None, "NaN from torch only, outside logaddexp"
        mn = np.where(a.real < b.real, a, b)[only_torch]
        mx = np.where(a.real < b.real, b, a)[only_torch]
        with np.errstate(all="ignore"):
            e = np.exp(mn - mx)
        sub = lambda v: (np.abs(v) < tiny) & (v != 0)  # noqa: E731
        assert np.all(sub(e.real) | sub(e.imag)), (mn, mx)
        np.testing.assert_allclose(got[only_torch], mx, rtol=4 * eps, atol=tiny)
    ok = ~nan_r & ~nan_g
    for part in ("real", "imag"):
        r, g = getattr(ref, part)[ok], getattr(got, part)[ok]
        inf = np.isinf(r) | np.isinf(g)
        assert np.array_equal(r[inf], g[inf])
        scale = np.maximum(np.abs(ref[ok][~inf]), tiny)
        err = np.abs(r[~inf] - g[~inf]) / scale
        assert err.size == 0 or err.max() <= 8 * eps, (part, err.max())


# ------------------------------------------------------------------ complex logaddexp
_SPECIAL = [0.0, -0.0, 1.0, -1.0, 3.5, math.inf, -math.inf, math.nan, 1e30, -1e30, 88.5, 89.0, 700.0, -700.0,
            710.0, -745.0, 1e-30]


@pytest.mark.parametrize("name,dt", CDTS)
def test_complex_logaddexp_special_values_vs_torch(name, dt):
    cs = np.array([complex(r, i) for r in _SPECIAL for i in _SPECIAL], dtype=dt)
    A, B = (m.ravel() for m in np.meshgrid(cs, cs))
    ref = torch.logaddexp(_tn(A), _tn(B)).numpy()
    got = nee.logaddexp(nee.tensor(A), nee.tensor(B))
    assert got.dtype == getattr(nee, name)
    _check_close(ref, got.numpy(), dt, A, B)
    # NaN anywhere -> NaN+NaNj; two -inf real parts -> the min (the tie: other); the +inf tie is finite-angled
    nan_in = np.isnan(A.real) | np.isnan(A.imag) | np.isnan(B.real) | np.isnan(B.imag)
    g = got.numpy()
    assert np.all(np.isnan(g.real[nan_in]) & np.isnan(g.imag[nan_in]))


@pytest.mark.parametrize("name,dt", CDTS)
@pytest.mark.parametrize("scale", [1e-3, 1.0, 30.0, 1e4])
def test_complex_logaddexp_random_vs_torch(name, dt, scale):
    rng = np.random.default_rng(int(scale * 10) + len(name))
    a = ((rng.standard_normal(4000) + 1j * rng.standard_normal(4000)) * scale).astype(dt)
    b = ((rng.standard_normal(4000) + 1j * rng.standard_normal(4000)) * scale).astype(dt)
    b[::7] = a[::7]                                     # ties of the real part (and equal operands)
    b[1::7] = a[1::7].real + 1j * rng.standard_normal(len(a[1::7]))
    ref = torch.logaddexp(_tn(a), _tn(b)).numpy()
    _check_close(ref, nee.logaddexp(nee.tensor(a), nee.tensor(b)).numpy(), dt, a, b)
    # the argument order matters only through the tie rule: swap too
    ref2 = torch.logaddexp(_tn(b), _tn(a)).numpy()
    _check_close(ref2, nee.logaddexp(nee.tensor(b), nee.tensor(a)).numpy(), dt, b, a)


def test_complex_logaddexp_broadcast_views_and_promotion():
    rng = np.random.default_rng(5)
    base = (rng.standard_normal((6, 10)) + 1j * rng.standard_normal((6, 10))).astype(np.complex64)
    other = (rng.standard_normal((4, 1, 10)) * 3).astype(np.float64)
    tb, nb = _tn(base), nee.tensor(base)
    cases = [
        (lambda L, x: L.logaddexp(x.t(), x[:1].t())),                                   # non-contiguous, bcast
        (lambda L, x: L.logaddexp(x[::2, 1::3], x[1::2, 2::3])),                        # strided views
        (lambda L, x: L.logaddexp(x[0, 0], x)),                                         # 0-d with 2-d
        (lambda L, x: x[:, :5].logaddexp(x[:1, 5:])),                                   # method form
    ]
    for f in cases:
        r = f(torch, tb)
        g = f(nee, nb)
        assert tuple(g.shape) == tuple(r.shape)
        _check_close(r.numpy(), g.numpy(), np.complex64)
    # promotion: complex64 with float64 -> complex128; int64 / bool with complex -> complex; float16 -> complex64
    for ta, na in ((_tn(other), nee.tensor(other)),
                   (torch.arange(10).reshape(10, 1, 1), nee.arange(10).reshape(10, 1, 1)),
                   (torch.tensor([True, False]).reshape(2, 1, 1), nee.tensor([True, False]).reshape(2, 1, 1)),
                   (torch.ones(1, 1, 10, dtype=torch.float16), nee.ones(1, 1, 10, dtype=nee.float16))):
        r = torch.logaddexp(tb, ta)
        g = nee.logaddexp(nb, na)
        assert str(g.dtype).split(".")[-1] == str(r.dtype).split(".")[-1]
        _check_close(r.numpy(), g.numpy(), r.numpy().dtype.type)
    # empty
    g = nee.logaddexp(nee.ones(0, 3, dtype=nee.complex64), nee.ones(3, dtype=nee.complex128))
    assert g.shape == (0, 3) and g.dtype == nee.complex128


def test_complex_logaddexp_out_and_errors():
    a = np.array([1 + 2j, -3 + 0.5j, 0.25 - 1j], dtype=np.complex64)
    ref = torch.logaddexp(_tn(a), _tn(a[::-1].copy()))
    out = nee.empty(3, dtype=nee.complex128)
    r = nee.logaddexp(nee.tensor(a), nee.tensor(a[::-1].copy()), out=out)
    assert r is out and out.dtype == nee.complex128
    np.testing.assert_allclose(out.numpy(), ref.numpy().astype(np.complex128), rtol=1e-6)
    for odt in ("float32", "float64"):
        with pytest.raises(RuntimeError, match="can't be cast"):
            torch.logaddexp(_tn(a), _tn(a), out=torch.empty(3, dtype=getattr(torch, odt)))
        with pytest.raises(RuntimeError, match="can't be cast"):
            nee.logaddexp(nee.tensor(a), nee.tensor(a), out=nee.empty(3, dtype=getattr(nee, odt)))
    # torch has no complex logaddexp2
    with pytest.raises(NotImplementedError, match="logaddexp2"):
        torch.logaddexp2(_tn(a), _tn(a))
    with pytest.raises(NotImplementedError, match=r"logaddexp2.*complex64"):
        nee.logaddexp2(nee.tensor(a), nee.tensor(a))
    with pytest.raises(RuntimeError, match=r"logaddexp: shapes \(2, 3\) and \(4,\)"):
        nee.logaddexp(nee.ones(2, 3, dtype=nee.complex64), nee.ones(4, dtype=nee.complex128))
    with pytest.raises(TypeError, match="must be Tensor"):
        nee.logaddexp(nee.tensor(a), 1.0)
    # integer operands still refused, as torch does
    with pytest.raises(NotImplementedError):
        torch.logaddexp(torch.tensor([1, 2]), torch.tensor([1, 2]))
    with pytest.raises(NotImplementedError, match="logaddexp"):
        nee.logaddexp(nee.tensor([1, 2]), nee.tensor([1, 2]))


def test_complex_logaddexp_real_paths_unchanged():
    rng = np.random.default_rng(9)
    for dt in (np.float32, np.float64):
        a, b = (rng.standard_normal(300) * 50).astype(dt), (rng.standard_normal(300) * 50).astype(dt)
        a[:3] = [np.inf, -np.inf, np.nan]
        b[:3] = [np.inf, -np.inf, 1.0]
        for f in ("logaddexp", "logaddexp2"):
            np.testing.assert_allclose(getattr(nee, f)(nee.tensor(a), nee.tensor(b)).numpy(),
                                       getattr(torch, f)(_tn(a), _tn(b)).numpy(), rtol=4 * np.finfo(dt).eps)


@pytest.mark.parametrize("name,dt", CDTS)
def test_complex_log1p_accuracy_vs_torch(name, dt):
    """numpy's complex log1p is log(|1 + z|) (relative error ~1 at |z| = 1e-8 in complex64); neetorch now uses
    torch's c10 algorithm."""
    rng = np.random.default_rng(11)
    eps = np.finfo(dt).eps
    for scale in (1e-30, 1e-9, 1e-4, 0.3, 3.0, 1e6):
        z = ((rng.standard_normal(2000) + 1j * rng.standard_normal(2000)) * scale).astype(dt)
        ref = torch.log1p(_tn(z)).numpy()
        got = nee.tensor(z).log1p().numpy()
        err = np.abs(ref - got) / np.abs(ref)
        assert err.max() <= 8 * eps, (scale, err.max())
    vals = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 1e30, -1e30, 1e-300]
    z = np.array([complex(r, i) for r in vals for i in vals], dtype=dt)
    ref = torch.log1p(_tn(z)).numpy()
    got = nee.tensor(z).log1p().numpy()
    for part in ("real", "imag"):
        r, g = getattr(ref, part), getattr(got, part)
        same = (r == g) | (np.isnan(r) & np.isnan(g)) | (np.abs(r - g) <= 4 * eps * np.abs(r))
        assert same.all(), z[~same]
    # a transposed (non-contiguous) view
    m = (rng.standard_normal((5, 7)) * 1e-5 + 1j * rng.standard_normal((5, 7)) * 1e-5).astype(dt)
    np.testing.assert_allclose(nee.tensor(m).t().log1p().numpy(), torch.log1p(_tn(m).t()).numpy(), rtol=8 * eps)


# ------------------------------------------------------------------ in-place samplers: dtypes and empty tensors
DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
          "complex64", "complex128"]
#: torch's two spellings of each dtype in messages (ScalarType name, C++ type name)
_TORCH_NAMES = {"bool": ("Bool", "bool"), "uint8": ("Byte", "unsigned char"), "int8": ("Char", "signed char"),
                "int16": ("Short", "short int"), "int32": ("Int", "int"), "int64": ("Long", "long int"),
                "float16": ("Half", "c10::Half"), "bfloat16": ("BFloat16", "c10::BFloat16"),
                "float32": ("Float", "float"), "float64": ("Double", "double"),
                "complex64": ("ComplexFloat", "c10::complex<float>"),
                "complex128": ("ComplexDouble", "c10::complex<double>")}


def _nee_message(msg: str, dtypes) -> str:
    """torch's message in neetorch's words: its dtype spellings replaced by neetorch's names, the
    'Could this error message be improved?' tail dropped."""
    msg = msg.split("\n")[0].split("  (Could this error")[0].rstrip(".")
    for d in dtypes:
        for tn in sorted(_TORCH_NAMES[d], key=len, reverse=True):
            msg = re.sub(r"'" + re.escape(tn) + r"'", f"'{d}'", msg)
            msg = re.sub(r"((?:for|specified) )" + re.escape(tn) + r"$", r"\g<1>" + d, msg)
    return msg


def _outcome(lib, make, call):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            t = make(lib)
            r = call(lib, t)
            return "ok", (r, t), [str(x.message) for x in w]
        except Exception as e:   # noqa: BLE001 - compared with torch's exception below
            return "err", e, [str(x.message) for x in w]


def _compare(make, call, dtypes, support=None, message=True):
    """Run ``call`` on torch's and neetorch's tensor: both succeed (same dtype, shape, the result is self for
    in-place calls, values in ``support``) or both raise the same exception class with torch's message (in
    neetorch's dtype names) as the start of neetorch's; the same warnings."""
    kt, vt, wt = _outcome(torch, make, call)
    kn, vn, wn = _outcome(nee, make, call)
    assert kt == kn, (kt, vt, kn, vn)
    assert len(wt) == len(wn) and all(n.startswith(_nee_message(t, dtypes)[:40]) for t, n in zip(wt, wn)), (wt, wn)
    if kt == "err":
        te, ne = vt, vn
        assert isinstance(ne, type(te)), (type(te), type(ne), str(ne))
        assert isinstance(ne, NotImplementedError) == isinstance(te, NotImplementedError), (te, ne)
        if message:
            assert str(ne).startswith(_nee_message(str(te), dtypes)), (str(te), str(ne))
        return None
    (rt, tt), (rn, tn) = vt, vn
    assert str(rn.dtype).split(".")[-1] == str(rt.dtype).split(".")[-1]
    assert tuple(rn.shape) == tuple(rt.shape)
    if support is not None and rn.numel():
        a = rn.to(nee.float64).numpy() if rn.dtype != nee.bool else rn.numpy().astype(np.float64)
        assert support(a), a
    return rn, tn


def _maker(dt, n):
    # a non-empty target is a transposed (non-contiguous) view of its base
    def make(L):
        d = getattr(L, dt)
        return L.zeros(n, dtype=d) if n == 0 else L.zeros(3, 2, dtype=d).t()
    return make


_INT = lambda a: np.all(a == np.round(a))  # noqa: E731

SAMPLER_CASES = [
    ("log_normal_", (), lambda a: np.all(a > 0)),
    ("log_normal_", (1.0, 0.0), None),
    ("log_normal_", (0.0, -2.5), None),
    ("exponential_", (), lambda a: np.all(a >= 0)),
    ("exponential_", (-1.0,), None),
    ("exponential_", (0.0,), None),
    ("geometric_", (0.3,), lambda a: np.all(a >= 1) and _INT(a)),
    ("geometric_", (0.0,), None),
    ("geometric_", (1.5,), None),
    ("cauchy_", (), lambda a: not np.any(np.isnan(a))),
    ("cauchy_", (0.0, -1.0), None),
    ("bernoulli_", (), lambda a: set(np.unique(a)) <= {0.0, 1.0}),
    ("bernoulli_", (0.3,), lambda a: set(np.unique(a)) <= {0.0, 1.0}),
    ("bernoulli_", (1.5,), None),
    ("bernoulli_", (-0.1,), None),
]


@pytest.mark.parametrize("op,args,support", SAMPLER_CASES, ids=[f"{c[0]}{c[1]}" for c in SAMPLER_CASES])
def test_samplers_every_dtype_empty_and_not_vs_torch(op, args, support):
    for dt in DTYPES:
        for n in (0, 6):
            res = _compare(_maker(dt, n), lambda L, t: getattr(t, op)(*args), [dt], support)
            if res is not None:
                r, t = res
                assert r is t   # in place: returns self


RANDOM_CASES = [
    ((), None),
    ((10,), (0, 9)),
    ((2, 10), (2, 9)),
    ((-1, 5), (-1, 4)),
    ((0, 256), (0, 255)),
    ((0, 257), (0, 256)),
    ((5, 5), None),
    ((5, 3), None),
    ((0,), None),
    ((2048, None), None),
    ((2047, None), None),
    ((255, None), None),
    ((0, None), None),
    ((-3, None), None),
    ((1, None), None),
    ((2, None), None),
    ((-2 ** 63, None), None),
    ((0, 70000), (0, 69999)),
    ((0, 5000), (0, 4999)),
    ((1000, 1001), (1000, 1000)),
    ((0, 2 ** 24 + 1), None),
]


@pytest.mark.parametrize("args,bounds", RANDOM_CASES, ids=[str(c[0]) for c in RANDOM_CASES])
def test_random_every_dtype_empty_and_not_vs_torch(args, bounds):
    for dt in DTYPES:
        top = {"bool": 1, "float16": 2 ** 11, "bfloat16": 2 ** 8, "float32": 2 ** 24, "float64": 2 ** 53}.get(dt)
        if top is None and dt not in ("complex64", "complex128"):
            top = int(np.iinfo(getattr(np, dt)).max)

        def support(a, args=args, top=top):
            if not _INT(a):
                return False
            if args == ():
                return a.min() >= 0 and a.max() <= top
            if bounds is not None:
                return a.min() >= bounds[0] and a.max() <= bounds[1]
            if len(args) == 2 and args[1] is None and args[0] != -2 ** 63:
                return a.min() >= args[0] and a.max() <= top
            return True
        for n in (0, 6):
            _compare(_maker(dt, n), lambda L, t: t.random_(*args), [dt], support)


def test_random_argument_types_and_keywords():
    for args in ((1.5,), (True,), (0, 2.0)):
        for L in (torch, nee):
            with pytest.raises(TypeError):
                L.zeros(3).random_(*args)
    for L in (torch, nee):
        with pytest.raises((ValueError, RuntimeError)):
            L.zeros(3, dtype=L.int64).random_(0, 2 ** 63)
    a = nee.zeros(200, dtype=nee.int64).random_(**{"from": 3, "to": 6}).numpy()
    assert set(np.unique(a)) == {3, 4, 5}
    a = nee.zeros(200).random_(nee.tensor(3)).numpy()
    assert set(np.unique(a)) == {0.0, 1.0, 2.0}
    full = nee.zeros(4000, dtype=nee.int64).random_(-2 ** 63, None).numpy()
    assert full.min() < -2 ** 61 and full.max() > 2 ** 61           # the whole int64 range
    bf = nee.zeros(50, dtype=nee.bfloat16).random_().to(nee.float32).numpy()
    assert bf.min() >= 0 and bf.max() <= 256 and _INT(bf)


@pytest.mark.parametrize("pdt", ["bool", "int64", "float16", "float32", "float64", "complex64"])
def test_bernoulli_tensor_p_every_dtype_vs_torch(pdt):
    for sdt in DTYPES:
        for n in (0, 6):
            for pv in (0.5, 1.0, 2.0):
                def call(L, t, pv=pv):
                    p = L.full((2, 3) if n else (0,), pv if pdt[0] in "fc" else int(pv > 0.7), dtype=getattr(L, pdt))
                    return t.bernoulli_(p)
                _compare(_maker(sdt, n), call, [sdt, pdt], lambda a: set(np.unique(a)) <= {0.0, 1.0})
    # p broadcast from a row; p not broadcastable to self (torch's expand error: type only)
    r = _compare(_maker("float32", 6), lambda L, t: t.bernoulli_(L.full((3,), 1.0)), [], lambda a: np.all(a == 1))
    assert r is not None
    _compare(_maker("float32", 6), lambda L, t: t.bernoulli_(L.full((3, 3), 0.5)), [], message=False)
    _compare(_maker("float32", 6), lambda L, t: t.bernoulli_(L.zeros(0)), [], message=False)


def test_bernoulli_functional_every_dtype_vs_torch():
    for dt in DTYPES:
        for n in (0, 6):
            def make(L, dt=dt, n=n):
                d = getattr(L, dt)
                return L.full((n,), 1, dtype=d) if n else L.zeros(0, dtype=d)
            _compare(make, lambda L, t: L.bernoulli(t), [dt], lambda a: set(np.unique(a)) <= {0.0, 1.0})
            _compare(make, lambda L, t: L.bernoulli(t, 0.5), [dt], lambda a: set(np.unique(a)) <= {0.0, 1.0})
            _compare(make, lambda L, t: L.bernoulli(t, 1.5), [dt])


def test_samplers_write_through_views_and_keep_untouched_elements():
    nee.manual_seed(13)
    base = nee.zeros(4, 6, dtype=nee.int32)
    base[:, ::2].geometric_(0.5)
    a = base.numpy()
    assert np.all(a[:, ::2] >= 1) and np.all(a[:, 1::2] == 0)
    base = nee.zeros(4, 6, dtype=nee.float16)
    base.t()[1::2].exponential_(3.0)
    a = base.numpy().astype(np.float64)
    assert np.all(a[:, ::2] == 0) and np.all(a[:, 1::2] >= 0) and np.any(a[:, 1::2] > 0)
    e = nee.zeros(0, 3, dtype=nee.int64)
    for f in (lambda t: t.log_normal_(), lambda t: t.exponential_(), lambda t: t.geometric_(0.5),
              lambda t: t.random_(), lambda t: t.bernoulli_(), lambda t: t.bernoulli_(nee.zeros(0, 3))):
        assert f(e) is e and e.shape == (0, 3)
