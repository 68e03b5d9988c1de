"""Regression cases found by differential fuzzing of the eager op surface against PyTorch (the reference,
tests only).  Each case runs ``f(L, *arrays)`` with ``L = torch`` and ``L = neetorch`` on the same numpy inputs
(``tests/torch_check.py``): where torch raises neetorch must raise, where it returns the results must match in
type, dtype, shape and values (NaN positions and the sign of infinities included).

Covered: ``add``/``sub`` with ``alpha`` (the scaled operand keeps the promotion of the unscaled one), integer
division by zero on an empty result (nothing computed: no raise), ``isclose`` dtype checks, ``ldexp``'s
rounding and dtype rules, ``cat`` promotion with skipped empty 1-D tensors, ``setitem``'s dtype rules (index_put
vs masked_fill), ``clamp`` of bool tensors, the inf norm over non-empty dims of an empty tensor, zero-size ``area``
interpolation outputs, ``cross_entropy``'s ``ignore_index`` with
probability targets, ``round(decimals=)`` on integers, and the sign of a ``-0.0`` scalar operand.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch_check import make_check

check = make_check(torch, {"float16": 2e-3, "float32": 1e-5, "other": 1e-12})

_DT = [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64]
_rng = np.random.RandomState(7)


def _arr(shape, dt):
    if dt is np.bool_:
        return np.asarray(_rng.rand(*shape) > 0.5)
    if np.dtype(dt).kind in "iu":
        return np.asarray(_rng.randint(0 if dt is np.uint8 else -9, 10, shape)).astype(dt)
    return np.asarray((np.asarray(_rng.randn(*shape)) * 3).astype(dt))


# ------------------------------------------------------------------------------------------------ alpha
_ALPHA_SHAPES = [((), ()), ((3,), ()), ((), (3,)), ((2, 3), (3,))]


@pytest.mark.parametrize("d1", _DT, ids=lambda d: d.__name__)
def test_add_sub_alpha_promotion(d1):
    # a 0-d bool other scaled by alpha=2 must not become an int64 0-d tensor that re-promotes the sum
    for d2 in _DT:
        for s1, s2 in _ALPHA_SHAPES:
            a, b = _arr(s1, d1), _arr(s2, d2)
            for alpha in (2, 0.5, True):
                check(lambda L, a, b: L.add(a, b, alpha=alpha), a, b)
                check(lambda L, a, b: L.sub(a, b, alpha=alpha), a, b)
                for s in (3, 2.5, True):
                    check(lambda L, a: (L.add(a, s, alpha=alpha), L.sub(a, s, alpha=alpha)), a)


def test_sub_bool_scalar_with_alpha_refused():
    check(lambda L, a: L.sub(a, True, alpha=3), np.ones(3, np.float32))
    check(lambda L, a: L.sub(a, L.tensor(True), alpha=2), np.ones(3, np.float32))


# ------------------------------------------------------------------------------------------------ division
@pytest.mark.parametrize("dt", [np.uint8, np.int16, np.int64])
def test_integer_division_by_zero_on_empty_result(dt):
    e, z = np.ones((0, 3), dt), np.zeros(3, dt)
    check(lambda L, a, b: (a // b, a % b, L.fmod(a, b), L.div(a, b, rounding_mode="trunc"),
                           L.div(a, b, rounding_mode="floor")), e, z)
    check(lambda L, a: (a // 0, a % 0, L.fmod(a, 0), L.floor_divide(a, False)), e)
    check(lambda L, a, b: a // b, np.ones((2, 3), dt), z)  # non-empty: still raises
    check(lambda L, a, b: L.remainder(a, b), np.ones((2, 0), dt), np.zeros((2, 1), dt))


def test_negative_zero_scalar_keeps_its_sign():
    # 0.0 == -0.0 (same hash): a scalar cache must not hand one for the other (the frontend's 0-d scalar cache;
    # the CPU backend's scalar-buffer cache behind prepared plans, emptied first so that it is exercised)
    import importlib
    importlib.import_module("neetorch.devices.cpu.elementwise")._scalar_bufs.clear()
    import neetorch as nee
    nee.ops.elementwise._scalar_cache.clear()
    for a in (np.array([1, -1, 0, np.nan, np.inf, -2], np.float64), np.array([1, -1, 0, np.inf], np.float16)):
        _check_signed_zero(a)


def _check_signed_zero(a):
    for _ in range(2):
        check(lambda L, a: (a / 0.0, a / -0.0, L.floor_divide(a, -0.0), a * -0.0, L.copysign(a, L.tensor(-0.0))), a)
        check(lambda L, a: (a / -0.0, a / 0.0), a)


# ------------------------------------------------------------------------------------------------ isclose / ldexp
def test_isclose_dtype_rules():
    f = np.array([1.0, 2.0, np.nan], np.float32)
    check(lambda L, a, b: L.isclose(a, b), f, f.astype(np.float64))   # mixed dtypes: torch refuses
    check(lambda L, a, b: L.isclose(a, b), np.array([1, 2]), np.array([1, 3], np.int32))
    check(lambda L, a: L.isclose(a, 1.0), f)                            # other must be a tensor
    check(lambda L, a, b: L.isclose(a, b), np.array([True, False]), np.array([True, True]))
    check(lambda L, a, b: (L.isclose(a, b, equal_nan=True), L.allclose(a, b)), f, f.copy())
    check(lambda L, a, b: L.allclose(a, b), f, f.astype(np.float16))


@pytest.mark.parametrize("d1", _DT, ids=lambda d: d.__name__)
def test_ldexp_dtypes_and_rounding(d1):
    # the power rounds in other's floating dtype (float16 exponents: float16 powers), else in the result dtype
    for d2 in _DT:
        a, b = _arr((3, 4), d1), _arr((4,), d2)
        if d2 is np.uint8:
            b[0] = 200  # 2**200: inf in float32, finite in float64
        check(lambda L, a, b: L.ldexp(a, b), a, b, tol=0)


# ------------------------------------------------------------------------------------------------ cat / setitem / clamp
def test_cat_promotes_with_skipped_empty_1d():
    check(lambda L, a, b, c: L.cat([a, b, c], 1), np.array([[3], [1]], np.int32), np.zeros((0,), np.float32),
          np.zeros((2, 0), np.uint8))
    check(lambda L, a, b: (L.cat([a, b]), L.cat([b, a])), np.array([[1, 2]], np.int8), np.zeros((0,), np.float64))


def test_setitem_dtype_rules():
    a = np.zeros((4, 3, 2), np.float32)
    m = np.array([[0, 1, 0], [1, 0, 1], [1, 0, 1], [1, 0, 0]], bool)

    def put(key, v):
        def f(L, a, m):
            T = (lambda x: torch.from_numpy(x)) if L is torch else (lambda x: L.tensor(x))
            a[key(m)] = T(v)
            return a
        return f

    for v in (np.array([1], np.int32), np.array(1.5), np.array([[2]], np.int64), np.array([True])):
        check(put(lambda m: m, v), a, m)               # one bool mask + one-element value: masked_fill, any dtype
        check(put(lambda m: (m[:, 0], Ellipsis), v), a, m)
        check(put(lambda m: (slice(None), m[0]), v), a, m)
        check(put(lambda m: (m, m[:, 0]), v), a, m)    # two tensor indices: index_put_ refuses the dtype
        check(put(lambda m: True, v), a, m)            # a lone True: a cast copy
        check(put(lambda m: (True,), v), a, m)         # True in a tuple is an int64 index tensor: refused
        check(put(lambda m: (True, 0), v), a, m)
        check(put(lambda m: False, v), a, m)           # a lone False writes and checks nothing
    for v in (np.array([1, 2], np.int32), np.array([1.5, 2.5])):
        check(put(lambda m: m, v), a, m)               # several elements: index_put_ refuses the dtype
        check(put(lambda m: True, v), a, m)
        check(put(lambda m: (True,), v), a, m)
        check(put(lambda m: (slice(None), 1), v), a, m)  # basic indexing: a cast copy


def test_clamp_bool():
    b = np.array([True, False])
    for f in (lambda L, b: L.clamp(b, min=L.tensor([True])), lambda L, b: L.clamp(b, max=L.tensor([False])),
              lambda L, b: b.clamp_(min=L.tensor([True])), lambda L, b: L.clamp(b, L.tensor(False), L.tensor(True)),
              lambda L, b: L.clamp(b, min=True), lambda L, b: L.clamp(b, True, True), lambda L, b: L.clamp(b, 0, 1),
              lambda L, b: L.clamp(b, min=L.tensor([1])), lambda L, b: L.clamp(L.tensor([1, 2]), min=L.tensor([True]))):
        check(f, b)


# ------------------------------------------------------------------------------------------------ reductions / nn
def test_inf_norm_on_empty_tensor():
    z = np.zeros((3, 0), np.float32)
    for d in (0, 1, (0, 1), None, -2):
        for p in (float("inf"), float("-inf")):
            check(lambda L, a: L.linalg.vector_norm(a, p, dim=d), z)
            check(lambda L, a: L.norm(a, p=p, dim=d, keepdim=True), z)


def test_round_decimals_integer_refused():
    for dt in (np.uint8, np.int8, np.int64):
        a = np.array([35, 2], dt)
        check(lambda L, a: L.round(a), a)
        check(lambda L, a: L.special.round(a), a)  # always passes decimals: refused for integers
        for d in (0, 1, -1):
            check(lambda L, a: L.round(a, decimals=d), a)
    check(lambda L, a: (L.round(a, decimals=0), L.round(a, decimals=-1), a.round(decimals=2)),
          np.array([2.5, 35.0, -0.125, 1.005], np.float32))


def test_zero_size_area_interpolation():
    # area is adaptive average pooling: torch returns its empty output (the other modes refuse a zero size)
    x = np.ones((2, 2, 1, 3), np.float32)
    for mode in ("area", "nearest", "bilinear"):
        check(lambda L, a: L.nn.functional.interpolate(a, scale_factor=(0.5, 0.5), mode=mode), x)
    for shape in ((2, 2, 1, 3, 2), (2, 2, 3, 1, 2), (2, 2, 3)):
        check(lambda L, a: L.nn.functional.interpolate(a, scale_factor=0.4, mode="area"), np.ones(shape, np.float32))


def test_cross_entropy_probability_target_ignore_index():
    x = _arr((3, 4), np.float32)
    t = np.abs(_arr((3, 4), np.float32)) + 0.1
    t = t / t.sum(1, keepdims=True)
    for ii in (-100, -1, 0, 3, 7):
        check(lambda L, x, t: L.nn.functional.cross_entropy(x, t, ignore_index=ii), x, t)


# ------------------------------------------------------------------------------------------------ views
def test_movedim_zero_dim_and_repeated_dims():
    x, y = np.array(3.0, np.float32), np.zeros((2, 3, 4), np.float32)
    check(lambda L, x: (x.movedim(0, -1), x.movedim(-1, 0), L.movedim(x, (0,), (0,))), x)
    check(lambda L, x: x.movedim(1, 0), x)
    check(lambda L, y: y.movedim((0, 0), (1, 2)), y)
    check(lambda L, y: y.movedim((0, 1), (2, 2)), y)
    check(lambda L, y: L.moveaxis(y, (0, -1), (-1, 0)), y)


def test_ravel_copies_non_contiguous():
    # ravel is contiguous().view(-1): a strided 1-D view is copied, so writes do not reach the base
    def f(L, x, key):
        base = x.clone()
        r = key(base).ravel()
        r.add_(1)
        return base, r

    x = _arr((3, 1, 4), np.float32)
    for key in (lambda b: b.select(-1, -1), lambda b: b[..., ::2].diagonal(), lambda b: b, lambda b: b[1:],
                lambda b: b.t() if b.ndim == 2 else b.transpose(0, 2)):
        check(lambda L, x: f(L, x, key), x)


def test_as_strided_bounds():
    y = np.arange(4.0, dtype=np.float32)
    for size, stride, off in [((2, 2), (1, 2), None), ((3,), (1,), 0), ((2,), (1,), 2), ((3,), (1,), 2),
                              ((3,), (1,), None), ((2, 2), (1, 1), None), ((0, 5), (1, 1), 9), ((2,), (-1,), 2),
                              ((2,), (1,), -1), ((2, 2), (1,), None)]:
        check(lambda L, y: y[1:].as_strided(size, stride, off), y)
    check(lambda L, y: y[:1].reshape(1, 1, 1).as_strided((2, 2), (1, 2)), y)  # past a whole storage
    check(lambda L, y: (L.arange(6.0).as_strided((2, 2), (2, 1), 1), L.zeros(2, 3).t().as_strided((3, 2), (1, 3))), y)


def test_set_grad_enabled():
    import neetorch as nee
    with nee.set_grad_enabled(False):
        assert not nee.is_grad_enabled()
        assert (nee.ones(2) + 1).tolist() == [2.0, 2.0]
    assert nee.set_grad_enabled(True)(len) is len  # also a decorator
    with pytest.raises(TypeError):
        nee.set_grad_enabled(1)


# ------------------------------------------------------------------------------------------------ dtype rules
@pytest.mark.parametrize("d1", _DT, ids=lambda d: d.__name__)
def test_lerp_dtype_rules(d1):
    # end and a weight with dims must match input's dtype; a 0-d weight tensor promotes like a scalar; a Python
    # scalar weight needs floating inputs
    for d2 in _DT:
        a, b = _arr((3,), d1), _arr((3,), d1)
        for ws in ((), (3,)):
            w = _arr(ws, d2)
            check(lambda L, a, b, w: L.lerp(a, b, w), a, b, w)
            check(lambda L, a, w: L.lerp(a, w, 0.5), a, w)
        for s in (0.5, 2, True):
            check(lambda L, a, b: L.lerp(a, b, s), a, b)


def test_index_add_dtype_and_scan_bool_dtype():
    for d1, d2 in ((np.uint8, np.float16), (np.float32, np.float64), (np.int64, np.int32), (np.float32, np.float32)):
        check(lambda L, a, s: a.index_add(0, L.tensor([0, 0]), s, alpha=2), _arr((3,), d1), _arr((2,), d2))
    x = np.array([1, 2, 0], np.int8)
    check(lambda L, a: L.cumsum(a, 0, dtype=L.bool), x)
    check(lambda L, a: L.cumprod(a, 0, dtype=L.bool), x)
    check(lambda L, a: (L.cumsum(a[0], 0, dtype=L.bool), L.cumprod(a[:0], 0, dtype=L.bool)), x)
    check(lambda L, a: (L.cumsum(a.bool(), 0), L.cumsum(a, 0, dtype=L.float16), L.sum(a, dtype=L.bool)), x)


def test_index_put_dtype_rules():
    a, i, m = np.zeros((4, 3), np.float32), np.array([0, 2, 0]), np.array([True, False, True, False])
    for v in (np.array([1.5], np.float64), np.array(2, np.int64), np.array([1, 2, 3], np.int32),
              np.array([1.0, 2.0, 3.0], np.float32)):
        for acc in (False, True):
            check(lambda L, a, i, v: (a.index_put((i,), v, accumulate=acc), L.index_put(a, (i, i), v, accumulate=acc)),
                  a, i, v)
            check(lambda L, a, m, v: a.index_put_((m,), v, accumulate=acc), a, m, v)  # masked_fill: no accumulate


# ------------------------------------------------------------------------------------------------ out=
_OUT_CASES = [
    lambda L, a, f: L.add(f, 1, out=L.zeros(0, dtype=L.float64)),          # an empty out is resized
    lambda L, a, f: L.exp(f, out=L.empty(0, dtype=L.float64)),
    lambda L, a, f: L.cat([f, f], out=L.zeros(0, dtype=L.float64)),
    lambda L, a, f: L.stack([f, f], out=L.empty(0, dtype=L.float64)),
    lambda L, a, f: L.matmul(f, f.t(), out=L.zeros(0, dtype=L.float64)),
    lambda L, a, f: L.sum(f, 0, keepdim=True, out=L.zeros(0)),             # computed in out's dtype
    lambda L, a, f: L.sum(a, 1, out=L.zeros(2, dtype=L.float32)),
    lambda L, a, f: L.sum(f, (0, 1), out=L.zeros(0)),
    lambda L, a, f: L.sum(f, out=L.zeros((), dtype=L.float32)),            # no dim: torch has no such overload
    lambda L, a, f: L.sum(f, 0, dtype=L.float32, out=L.zeros(3, dtype=L.float64)),  # dtype= must match out
    lambda L, a, f: L.prod(f, 0, out=L.zeros(3, dtype=L.int64)),
    lambda L, a, f: L.mean(f, 0, out=L.zeros(3, dtype=L.float16)),
    lambda L, a, f: L.mean(a, 0, out=L.zeros(3)),                          # integer input: refused
    lambda L, a, f: L.mean(f, 0, out=L.zeros(3, dtype=L.int16)),           # integer out: refused
    lambda L, a, f: L.mean(a, 1, dtype=L.float64, out=L.zeros(2, dtype=L.float64)),
]


@pytest.mark.parametrize("k", range(len(_OUT_CASES)))
def test_out_resizes_and_sets_dtype(k):
    import warnings
    a = np.arange(6).reshape(2, 3)
    f = a + 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(_OUT_CASES[k], a, f)
    import neetorch as nee
    o = nee.zeros(0, dtype=nee.float64)
    assert nee.add(nee.tensor(f), 1, out=o) is o and tuple(o.shape) == (2, 3)
    # torch resizes a non-empty out of another shape too, with a deprecation warning (so does neetorch)
    for g in (lambda L, x: L.add(x, 1, out=L.zeros(6, dtype=L.float64)),
              lambda L, x: L.mm(x, x.t(), out=L.empty(5, dtype=L.float64)),
              lambda L, x: L.sum(x, 0, out=L.zeros(2, dtype=L.float64)),
              lambda L, x: L.cat([x, x], out=L.zeros(2, dtype=L.float64))):
        with pytest.warns(UserWarning, match="resized"):
            r = g(nee, nee.tensor(f))
        check(lambda L, x: g(L, x), f)
        assert tuple(r.shape) == tuple(g(torch, torch.from_numpy(f)).shape)


# ------------------------------------------------------------------------------------------------ scalar precision
_F16 = np.array([0.5, 3.0, 60000.0, 2.5, -7.3, 0.1, 1e-3, -0.0, np.inf, np.nan], np.float16)
_SCALAR_OPS = [
    lambda L, a, v: a * v, lambda L, a, v: v * a, lambda L, a, v: a / v, lambda L, a, v: v / a,
    lambda L, a, v: a + v, lambda L, a, v: a - v, lambda L, a, v: v - a, lambda L, a, v: L.add(a, v, alpha=2),
    lambda L, a, v: L.remainder(a, v), lambda L, a, v: L.fmod(a, v), lambda L, a, v: a // v, lambda L, a, v: v // a,
    lambda L, a, v: L.div(a, v, rounding_mode="trunc"), lambda L, a, v: L.div(a, v, rounding_mode="floor"),
    lambda L, a, v: v % a, lambda L, a, v: a.mul_(v), lambda L, a, v: a.div_(v), lambda L, a, v: a.add_(v),
]


@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64, np.int64, np.uint8])
def test_python_scalar_operand_precision(dt):
    # bit-exact: torch reads a second-operand Python scalar at float32 precision in float16 mul/div/floor/trunc
    # division (x * 70000.0 is finite where 70000 fits no float16) and rounds it to float16 in add/sub/remainder/
    # fmod; ``scalar / x`` is ``x.reciprocal() * scalar``
    a = _F16.astype(dt) if np.dtype(dt).kind == "f" else np.array([1, 3, 7, 100, 0], dt)
    for v in (70000.0, 1e-5, -70000.0, 0.1, 3, -2.5, 65519.0, 1 / 3, -1e-3, True, 0):
        for f in _SCALAR_OPS:
            check(lambda L, a: f(L, a, v), a, tol=0)


def test_arange_bool_bounds_are_integers():
    check(lambda L: (L.arange(True, 5), L.arange(0, 5, True), L.arange(True), L.arange(False, 3, 2)))


def test_matmul_family_out_dtype():
    a, m = _arr((3,), np.float32), _arr((2, 3), np.float32)
    fs = [lambda L, a, m, o: L.dot(a, a, out=o), lambda L, a, m, o: L.mv(m, a, out=o),
          lambda L, a, m, o: L.outer(a, a, out=o), lambda L, a, m, o: L.mm(m, m.t(), out=o),
          lambda L, a, m, o: L.matmul(m, m.t(), out=o), lambda L, a, m, o: L.bmm(m[None], m.t()[None], out=o),
          lambda L, a, m, o: L.addmm(L.zeros(2, 2), m, m.t(), out=o), lambda L, a, m, o: L.addmv(L.zeros(2), m, a, out=o)]
    for f in fs:
        for dt in ("float32", "float64", "float16", "int64"):
            check(lambda L, a, m: (f(L, a, m, L.empty(0, dtype=getattr(L, dt))),), a, m)
    for dt in ("float32", "float64", "float16", "int64", "bool"):  # cat: a castable out dtype
        check(lambda L, m: (L.cat([m, m], out=L.empty(0, dtype=getattr(L, dt))),
                            L.stack([m, m], out=L.empty(0, dtype=getattr(L, dt)))), m)


def test_trapezoid_bool_and_renorm_rank_refused():
    b, f = np.array([True, False, True]), np.array([1.0, 2.5, 4.0], np.float32)
    check(lambda L, b, f: L.trapezoid(b, f), b, f)
    check(lambda L, b, f: (L.trapezoid(f, b), L.cumulative_trapezoid(f, b)), b, f)
    check(lambda L, b: (L.trapezoid(b, dx=2), L.cumulative_trapezoid(b)), b)
    check(lambda L, f: (L.trapezoid(f), L.cumulative_trapezoid(f, dx=0.5)), f)
    for shape in ((), (3,), (2, 3)):
        check(lambda L, a: L.renorm(a, 2, 0, 1.0), _arr(shape, np.float32))


@pytest.mark.parametrize("d1", [np.float32, np.float64, np.int64, np.float16, np.bool_], ids=lambda d: d.__name__)
def test_addmm_family_dtypes(d1):
    # addmm/addmv/baddbmm/addbmm refuse an input of another dtype; addr (elementwise) promotes, computing the
    # outer product in the promoted dtype
    for d2 in (np.float32, np.float64, np.int64, np.int16, np.float16):
        i, v, m, v3, b = _arr((2, 2), d1), _arr((2,), d2), _arr((2, 3), d2), _arr((3,), d2), _arr((1, 2, 3), d2)
        check(lambda L, i, v: (L.addr(i, v, v), L.addr(i[0], v, v, beta=0)), i, v)
        if d1 is not np.bool_:
            check(lambda L, i, v: L.addr(i, v, v, beta=2, alpha=3), i, v)
        check(lambda L, i, m: L.addmm(i, m, m.t()), i, m)
        check(lambda L, i, m, v3: L.addmv(i[0], m, v3), i, m, v3)
        check(lambda L, i, b: (L.baddbmm(i[None], b, b.transpose(1, 2)),), i, b)
        check(lambda L, i, b: L.addbmm(i, b, b.transpose(1, 2)), i, b)
