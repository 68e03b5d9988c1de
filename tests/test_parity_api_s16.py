"""Session 16 torch-API parity regressions (differential against torch on the CPU): sort/argsort's two overloads
(``stable=`` makes ``dim`` / ``descending`` keyword-only), linspace/logspace rounded as torch's range kernels round
them, torch.tensor's dtype inference with numpy values inside lists, requires_grad on integer tensors,
nanmean/vector_norm dtype checks, cummax/cummin dim type on empty inputs, round(decimals=) in the op-math type,
nan_to_num on complex tensors, isclose's tolerance checks, gcd at the integer minimum."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import neetorch as nee

torch = pytest.importorskip("torch")


def _np(r):
    if isinstance(r, torch.Tensor):
        return str(r.dtype).split(".")[-1], tuple(r.shape), (r.float() if r.dtype == torch.bfloat16 else r).numpy()
    return r.dtype.name, tuple(r.shape), np.asarray((r.float() if r.dtype.name == "bfloat16" else r).numpy())


def same(f, exact=True):
    """``f(L)`` for ``L = torch`` and ``L = nee``: both raise, or both return tensors (or tuples of them) of the
    same dtype, shape and values (exactly, NaN positions included, unless ``exact`` is False)."""
    res = []
    for L in (torch, nee):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res.append((True, f(L)))
        except Exception as e:  # noqa: BLE001 - raising behaviour is compared
            res.append((False, e))
    (ok_t, t), (ok_n, n) = res
    assert ok_t == ok_n, f"torch {'returned' if ok_t else 'raised'} {t!r}; neetorch {'returned' if ok_n else 'raised'} {n!r}"
    if not ok_t:
        return t, n
    ts, ns = (t, n) if isinstance(t, (tuple, list)) else ((t,), (n,))
    assert len(ts) == len(ns)
    for a, b in zip(ts, ns):
        (dta, sha, va), (dtb, shb, vb) = _np(a), _np(b)
        assert dta == dtb, f"dtype torch={dta} neetorch={dtb}"
        assert sha == shb, f"shape torch={sha} neetorch={shb}"
        if exact:
            np.testing.assert_array_equal(vb, va)
        else:
            np.testing.assert_allclose(vb, va, rtol=1e-6, atol=1e-6, equal_nan=True)
    return t, n


# ------------------------------------------------------------------ sort / argsort overloads
_X = np.array([[3, 1, 2, 1, 3], [0, 0, 5, -1, 0]], np.int64)


@pytest.mark.parametrize("call", [
    lambda L, x: L.argsort(x, 0, stable=True),          # torch refuses: dim is keyword-only with stable=
    lambda L, x: L.sort(x, 0, stable=True),
    lambda L, x: L.sort(x, 1, True, stable=True),
    lambda L, x: x.argsort(1, stable=True),
    lambda L, x: x.sort(-1, stable=False),
    lambda L, x: L.argsort(x, stable=None),               # argsort's stable is a bool, sort's may be None
    lambda L, x: L.argsort(x, 1, True, 0),
])
def test_sort_overload_refusals(call):
    (t_exc, n_exc) = same(lambda L: call(L, L.tensor(_X)))
    assert isinstance(n_exc, TypeError)


@pytest.mark.parametrize("call", [
    lambda L, x: L.argsort(x, dim=0, stable=True),
    lambda L, x: L.argsort(x, stable=True, dim=1, descending=True),
    lambda L, x: L.argsort(x, 0, True),
    lambda L, x: L.argsort(x, 1),
    lambda L, x: x.argsort(dim=0, stable=True),
    lambda L, x: L.sort(x, stable=True, dim=0),
    lambda L, x: L.sort(x, stable=None, dim=1, descending=True),
    lambda L, x: L.sort(x, 0, True),
    lambda L, x: x.sort(descending=True),
    lambda L, x: L.argsort(x, stable=True, dim=1, out=L.empty(0, dtype=L.int64)),
])
def test_sort_overloads_accepted(call):
    same(lambda L: call(L, L.tensor(_X)))


def test_argsort_out_needs_stable():
    same(lambda L: L.argsort(L.tensor(_X), dim=1, out=L.empty(0, dtype=L.int64)))


# ------------------------------------------------------------------ linspace / logspace rounding
_RNG = np.random.default_rng(16)
_RANGES = [(10, 0, 4), (-1, 1, 4), (0, 1, 7), (0.1, 0.7, 13), (0.1, 0.7, 100), (-3.3, 1e3, 77), (1e-3, 7.7, 300),
           (5, 5.1, 1000), (-2, 2, 5000), (0, 1, 2), (1, 0, 3), (0, 1, 1), (0, 1, 0), (3, 100, 1000)] + \
    [(float(_RNG.normal() * 10), float(_RNG.normal() * 10), int(_RNG.integers(2, 300))) for _ in range(6)]


@pytest.mark.parametrize("dt", ["float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "int16"])
def test_linspace_exact(dt):
    for a in _RANGES:
        same(lambda L: L.linspace(*a, dtype=getattr(L, dt)))


@pytest.mark.parametrize("dt", ["float32", "float64", "float16", "bfloat16", "int64", "int16"])
def test_logspace_exact(dt):
    for a in _RANGES:
        if max(abs(a[0]), abs(a[1])) > 30 and dt != "float64":
            continue
        for base in (10.0, 2.0, 1.5):
            same(lambda L: L.logspace(*a, base=base, dtype=getattr(L, dt)))


@pytest.mark.parametrize("call", [
    lambda L: L.linspace(0, 1e6, 3, dtype=L.float16),        # bounds that overflow the dtype raise
    lambda L: L.linspace(0, 300, 3, dtype=L.uint8),
    lambda L: L.linspace(0, 2 ** 40, 3, dtype=L.int32),
    lambda L: L.logspace(0, 1e6, 3, dtype=L.float16),
    lambda L: L.linspace(-1, 1, 4, dtype=L.uint8),           # a negative start wraps (-1 -> 255)
    lambda L: L.linspace(0, float("inf"), 3),
    lambda L: L.linspace(L.tensor(0.5), L.tensor(2.5), 5, dtype=L.float16),
    lambda L: L.logspace(0, 1, 1),
    lambda L: L.logspace(0, 3, 4, dtype=L.int64),
    lambda L: L.linspace(0, 1, 3.0),                         # steps is an int (a tensor of one int too)
    lambda L: L.logspace(0, 1, True),
    lambda L: L.linspace(0, 1, L.tensor(3)),
])
def test_range_edges(call):
    same(call)


# ------------------------------------------------------------------ torch.tensor inference
@pytest.mark.parametrize("data", [
    [np.float16(1.0), 2], [np.float16(1.0), 2.5], [np.float32(1.0), 2.5], [np.int16(1), np.float16(2.0)],
    [True, np.int8(3)], [[np.float16(1.0)], [2.5]], [np.uint8(1), np.int8(-1)], [np.float32(1.5), np.array(2.5)],
    [[np.float32(1), 2], [3, 4]], [np.array([1, 2], np.int8), np.array([3, 4], np.int16)], [np.int8(1), 2],
])
def test_tensor_infers_numpy_scalars_like_torch(data):
    same(lambda L: L.tensor(data))
    same(lambda L: L.as_tensor(data))


def test_requires_grad_needs_float():
    same(lambda L: L.tensor([1, 2], requires_grad=True))
    same(lambda L: L.zeros(2, dtype=L.int64).requires_grad_())
    same(lambda L: L.tensor([1.5], requires_grad=True).detach())
    assert nee.tensor([1.5], requires_grad=True).requires_grad
    assert nee.ones(2, dtype=nee.complex64).requires_grad_().requires_grad


def test_full_like_bool_complex_fill():
    same(lambda L: L.full_like(L.zeros(2, dtype=L.bool), 1 + 1j))
    same(lambda L: L.full_like(L.zeros(2, dtype=L.int32), 1 + 1j))


# ------------------------------------------------------------------ reductions' dtype checks
_I = np.arange(-5, 7, dtype=np.int64).reshape(3, 4)


@pytest.mark.parametrize("call", [
    lambda L, x: L.nanmean(x, dtype=L.float64),
    lambda L, x: L.linalg.vector_norm(x, dtype=L.float64),
    lambda L, x: L.norm(x, dtype=L.float64),
    lambda L, x: L.linalg.vector_norm(x.double(), dtype=L.float32),
    lambda L, x: L.linalg.vector_norm(x.float(), dtype=L.int64),
    lambda L, x: L.linalg.vector_norm(x.float(), dtype=L.complex64),
    lambda L, x: L.linalg.vector_norm(x.float(), 1, 1, dtype=L.float64),
    lambda L, x: L.norm(x.float(), p=1, dim=0, dtype=L.float64),
    lambda L, x: L.nanmean(x.double(), 1, dtype=L.float32),
    lambda L, x: L.nanmean(x.float(), 0, dtype=L.int32),
    lambda L, x: L.cummax(x[:0], (0, 1)),
    lambda L, x: L.cummin(x[:0], None),
    lambda L, x: L.cummax(x[:0], 1),
])
def test_reduction_dtype_checks(call):
    same(lambda L: call(L, L.tensor(_I)), exact=False)


# ------------------------------------------------------------------ elementwise
_V = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.4999, -0.0, np.nan, np.inf, -np.inf, 1e20, 250.0, -350.0,
               0.125, 1.05], np.float32)


@pytest.mark.parametrize("dt", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("decimals", [1, 2, -1, -2, 3])
def test_round_decimals(dt, decimals):
    same(lambda L: L.round(L.tensor(_V).to(getattr(L, dt)) * 3.3, decimals=decimals))


def test_round_decimals_out():
    same(lambda L: L.round(L.tensor(_V), decimals=1, out=L.empty(0, dtype=L.float64)))
    same(lambda L: L.round(L.tensor(_V), decimals=1, out=L.empty(0, dtype=L.int64)))
    same(lambda L: L.round(L.tensor(_V), decimals=-1, out=L.empty(0)))
    same(lambda L: L.round(L.tensor(_V, dtype=L.float16), decimals=2, out=L.empty(3, dtype=L.float16)))
    same(lambda L: L.tensor(_V).round_(decimals=-1))


def test_nan_to_num_complex():
    nan, inf = float("nan"), float("inf")
    data = [complex(nan, inf), complex(-inf, nan), complex(1, -inf), 2 - 3j]
    for dt in ("complex64", "complex128"):
        same(lambda L: L.nan_to_num(L.tensor(data, dtype=getattr(L, dt))))
        same(lambda L: L.nan_to_num(L.tensor(data, dtype=getattr(L, dt)), nan=1.5, posinf=7.0, neginf=-2.0))


def test_isclose_negative_tolerance():
    same(lambda L: L.isclose(L.tensor([1.0]), L.tensor([1.0]), rtol=-1))
    same(lambda L: L.isclose(L.tensor([1.0]), L.tensor([1.0]), atol=-0.5))
    same(lambda L: L.allclose(L.tensor([1.0]), L.tensor([1.0]), rtol=-1))


def test_gcd_integer_minimum():
    same(lambda L: L.gcd(L.tensor([-128, -128, 3, -128, 0], dtype=L.int8),
                         L.tensor([-128, 0, -128, 3, -128], dtype=L.int8)))
    same(lambda L: L.lcm(L.tensor([-4, 0, 6, -128], dtype=L.int8), L.tensor([6, 0, -4, 2], dtype=L.int8)))
    same(lambda L: L.gcd(L.tensor([-2 ** 63, 12, -7]), L.tensor([6, -2 ** 63, 0])))


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("value", [0.3, 7e4, 1e-8, 2])
def test_addcmul_addcdiv_value_at_float32(dt, value):
    # torch's Half/BFloat16 kernels read ``value`` at float32 (value.to<float>()), not rounded to the dtype
    x = (np.random.default_rng(5).normal(size=64) * 3).astype(np.float32)
    y = np.abs(x) + 0.01

    def operands(L):
        return [L.tensor(v).to(getattr(L, dt)) for v in (x, y, x)]
    same(lambda L: L.addcmul(*operands(L), value=value))
    same(lambda L: L.addcdiv(*operands(L), value=value))
    same(lambda L: operands(L)[0].addcmul_(*operands(L)[1:], value=value))
