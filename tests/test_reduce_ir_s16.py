"""reduce_ir: reduction.py's float32 / float64 reduction kernels as LLVM IR (NEE_IR_REDUCE, default on).

Differential vs numpy for every kind on odd shapes in each loop mode (row: lanes and blocks, column: column
blocks, general strided), non-contiguous and negative-stride views, keepdim, empty dims, NaN / inf / -0.0,
at 1 and 2 threads (the parallel splits: outer, inner, bands, one long run, partial sums); a few kernels also
bitwise against the Numba kernels they replace (switch off); the argument checks before a kernel runs.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import reduce_ir, reduction

KINDS = ["sum", "mean", "nansum", "prod", "amax", "amin", "argmax", "argmin", "any", "all", "cnz"]
_SUMS = {"sum", "mean", "nansum", "prod"}


@pytest.fixture
def ir(monkeypatch):
    monkeypatch.setattr(reduce_ir, "MODE", ["1"])


def _specials(x, rng, frac=40):
    f = x.reshape(-1)
    n = f.size
    if n:
        for v in (np.nan, np.inf, -np.inf, -0.0, 0.0):
            f[rng.integers(0, n, max(1, n // frac))] = v
    return x


def _out_dtype(kind, dt):
    return {"any": np.bool_, "all": np.bool_, "cnz": np.int64}.get(kind, dt)


def _run(kind, x, dims):
    kshape = tuple(1 if d in dims else n for d, n in enumerate(x.shape))
    out = np.full(kshape, 7, _out_dtype(kind, x.dtype))
    idx = np.full(kshape, -5, np.int64) if kind in ("argmax", "argmin") else None
    reduction.reduce_into(kind, x, out, dims, idx)
    return out, idx


def _ref(kind, x, dims):
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if kind == "sum":
            return x64.sum(dims, keepdims=True).astype(x.dtype)
        if kind == "mean":
            n = int(np.prod([x.shape[d] for d in dims]))
            return (x64.sum(dims, keepdims=True) / n).astype(x.dtype) if n else \
                np.full([1 if d in dims else s for d, s in enumerate(x.shape)], np.nan, x.dtype)
        if kind == "nansum":
            return np.nansum(x64, dims, keepdims=True).astype(x.dtype)
        if kind == "prod":
            return x64.prod(dims, keepdims=True).astype(x.dtype)
        if kind == "amax":
            return x.max(dims, keepdims=True)
        if kind == "amin":
            return x.min(dims, keepdims=True)
        if kind == "any":
            return (x != 0).any(dims, keepdims=True)
        if kind == "all":
            return (x != 0).all(dims, keepdims=True)
        if kind == "cnz":
            return np.count_nonzero(x, axis=dims, keepdims=True).astype(np.int64)
    raise AssertionError(kind)


def _check(kind, x, dims):
    got, idx = _run(kind, x, dims)
    if kind in ("argmax", "argmin"):
        (d,) = dims
        ref_i = (np.argmax if kind == "argmax" else np.argmin)(x, axis=d)        # numpy: the first NaN, else first
        ref_i = np.expand_dims(ref_i, d)
        assert np.array_equal(idx, ref_i), (kind, x.shape, x.strides, dims, idx.ravel()[:8], ref_i.ravel()[:8])
        ref_v = np.take_along_axis(x, ref_i, d)
        assert np.array_equal(got, ref_v, equal_nan=True), (kind, x.shape, dims)
        return
    ref = _ref(kind, x, dims)
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape, got.dtype, ref.dtype)
    if kind in _SUMS:
        tol = 2e-6 if x.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol, equal_nan=True, err_msg=f"{kind} {x.shape} {dims}")
    else:
        assert np.array_equal(got, ref, equal_nan=True), (kind, x.shape, x.strides, dims, got.ravel()[:8],
                                                         ref.ravel()[:8])


def _views(base):
    """base and non-contiguous / offset / negative-stride views of it (3-D)."""
    return [base, base[:, ::2], base[1:, 1:-1, 1:], base[::-1], base[:, :, ::-2], base.transpose(2, 0, 1)]


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_kinds_vs_numpy_all_modes(ir, nthreads, kind, dt):
    rng = np.random.default_rng(hash(kind) % 1000)
    scale = 0.01 if kind == "prod" else 1.0
    base = rng.standard_normal((5, 37, 29)).astype(dt)
    if kind == "prod":
        base = (1 + scale * base).astype(dt)
    _specials(base, rng, frac=97)
    dimsets = [(2,), (1,), (0,)] if kind in ("argmax", "argmin") else [(2,), (1,), (0,), (0, 2), (1, 2), (0, 1, 2)]
    for x in _views(base):
        for dims in dimsets:
            _check(kind, x, dims)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_long_rows_columns_and_strided(ir, kind, dt):
    """Row runs past 4 * LANES (lanes + tail) and past BLOCK (blocked sums), columns past BLOCK (two column
    blocks), a general strided run; clean data and data with NaN / inf."""
    rng = np.random.default_rng(3)
    for shape, dims in (((3, 4099), (1,)), ((2, 257), (1,)), ((255, 5), (0,)), ((7, 2051), (0,)),
                        ((6000,), (0,)), ((9, 300, 3), (1,))):
        x = rng.standard_normal(shape).astype(dt)
        if kind == "prod":
            x = (1 + 0.001 * x).astype(dt)
        _check(kind, x, dims)
        _check(kind, _specials(x.copy(), rng, frac=500), dims)
    x = rng.standard_normal((40, 300)).astype(dt)[:, ::3]          # (40, 100) with element strides (300, 3)
    _check(kind, x, (0,))
    _check(kind, x, (1,))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_arg_ties_nan_first_and_all_inf(ir, dt):
    for n in (5, 64 * 4 + 3, 64 * 9):
        for pos in (0, 1, n // 2, n - 1):
            for kind in ("argmax", "argmin"):
                x = np.zeros((3, n), dt)
                ext = 1.0 if kind == "argmax" else -1.0
                x[:, pos] = ext
                x[:, n - 1 - (pos // 2)] = ext                        # a tie: the first occurrence wins
                x[1, (pos * 3) % n] = np.nan
                x[1, (pos * 7 + 1) % n] = np.nan                      # two NaN: the first NaN wins
                x[2] = -np.inf if kind == "argmax" else np.inf       # all at the init value: index 0
                _check(kind, x, (1,))
                _check(kind, np.ascontiguousarray(x.T), (0,))        # column mode
                _check(kind, np.asfortranarray(x)[:, ::1], (1,))      # strided rows


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_amax_nan_propagates_and_signed_zero(ir, dt):
    x = np.zeros((4, 700), dt)
    x[0, 5] = np.nan
    x[1, 699] = np.nan
    x[2, :] = -0.0
    x[3, 350] = np.inf
    for kind in ("amax", "amin"):
        got, _ = _run(kind, x, (1,))
        assert np.isnan(got[0, 0]) and np.isnan(got[1, 0])
        assert got[2, 0] == 0 and got[3, 0] == (np.inf if kind == "amax" else 0)
        got, _ = _run(kind, np.ascontiguousarray(x.T), (0,))
        assert np.isnan(got[0, 0]) and np.isnan(got[0, 1]) and got[0, 2] == 0


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_empty_dims_and_keepdim(ir, dt):
    x = np.ones((3, 0, 4), dt)
    for kind in ("sum", "nansum", "prod", "any", "all", "cnz", "mean"):
        _check(kind, x, (1,))
    t = nee.tensor(np.arange(24, dtype=dt).reshape(2, 3, 4)[:, ::-1])
    ref = np.arange(24, dtype=dt).reshape(2, 3, 4)[:, ::-1]
    assert np.array_equal(t.amax(1, keepdim=True).numpy(), ref.max(1, keepdims=True))
    assert np.array_equal(t.sum((0, 2), keepdim=True).numpy(), ref.sum((0, 2), keepdims=True))
    v, i = t.max(2, keepdim=True)
    assert np.array_equal(v.numpy(), ref.max(2, keepdims=True)) and np.array_equal(
        i.numpy(), ref.argmax(2)[..., None])
    assert np.array_equal(t.argmin(1).numpy(), ref.argmin(1))


def test_parallel_splits_two_threads(ir):
    """Sizes past reduction._PAR_MIN: outer split, inner split, column bands, one long run, partial sums."""
    rng = np.random.default_rng(11)
    old = nee.get_num_threads()
    nee.set_num_threads(2)
    try:
        big = rng.standard_normal((600, 700)).astype(np.float32)
        for kind in ("sum", "mean", "amax", "argmin", "prod", "any", "cnz"):
            xb = (1 + 0.0001 * big).astype(np.float32) if kind == "prod" else big
            _check(kind, xb, (1,))                                     # outer split
            _check(kind, xb, (0,))                                     # column: bands (or inner split)
            _check(kind, xb[:1].reshape(1, -1).repeat(400, 0).T.copy(), (0,))   # inner split (ni >= 16 nt)
            if kind not in ("argmin",):
                _check(kind, xb, (0, 1))                               # full: partials / one long run
        long = rng.standard_normal(300000)
        for kind in ("sum", "nansum", "mean", "amax"):
            _check(kind, long, (0,))
    finally:
        nee.set_num_threads(old)


def test_ir_kernels_bitwise_vs_numba(monkeypatch):
    """The compare / select kinds give the same bits as the Numba kernels they replace (sums: within rounding,
    the order inside a block is LLVM's choice in both).  Few kernels: a cold Numba compile is ~2 s each."""
    rng = np.random.default_rng(5)
    for kind, dt in (("amax", np.float32), ("argmax", np.float32), ("sum", np.float64)):
        for shape, dims in (((9, 300), (1,)), ((300, 9), (0,)), ((9, 300), (0,)), ((4, 70, 3), (1,))):
            x = _specials(rng.standard_normal(shape).astype(dt), rng, frac=200)
            res = {}
            for m in ("1", "0"):
                monkeypatch.setattr(reduce_ir, "MODE", [m])
                res[m] = _run(kind, x, dims)
            if kind == "sum":
                np.testing.assert_allclose(res["1"][0], res["0"][0], rtol=1e-13)
            else:
                assert np.array_equal(res["1"][0], res["0"][0], equal_nan=True)
            if kind == "argmax":
                assert np.array_equal(res["1"][1], res["0"][1])
    monkeypatch.setattr(reduce_ir, "MODE", ["0"])
    _check("argmin", rng.standard_normal((5, 333)).astype(np.float32), (1,))      # the Numba path still right


def test_switch_selects_kernel(monkeypatch):
    from numba.core.dispatcher import Dispatcher
    monkeypatch.setattr(reduce_ir, "MODE", ["1"])
    k = reduction._get("amin", np.dtype(np.float64), np.dtype(np.float64))[0]
    assert not isinstance(k, Dispatcher) and k.__module__ == reduce_ir.__name__
    monkeypatch.setattr(reduce_ir, "MODE", ["0"])
    k0 = reduction._get("amin", np.dtype(np.int32), np.dtype(np.int32))[0]        # int inputs: Numba either way
    assert isinstance(k0, Dispatcher)
    monkeypatch.setattr(reduce_ir, "MODE", ["1"])
    assert reduction._get("amin", np.dtype(np.int32), np.dtype(np.int32))[0] is k0


def test_bad_arguments_raise_before_the_kernel(ir):
    kern, part = reduction._get("sum", np.dtype(np.float32), np.dtype(np.float32))
    x = np.ones(100, np.float32)
    o = np.zeros(10, np.float32)
    e = reduction._EMPTY_I64
    ok = np.array([10, 10, 1, 10, 1, 1, 0, 1, 1, 0, reduction.LANES], np.int64)
    kern(x, o, e, ok)
    assert np.array_equal(o, np.full(10, 10, np.float32))
    for k, v in ((0, 11), (1, 11), (6, 1), (6, -1), (9, 1), (3, -10), (4, 1000), (7, 2)):
        m = ok.copy()
        m[k] = v
        with pytest.raises(IndexError, match="reduction sum"):
            kern(x, o, e, m)
    with pytest.raises(IndexError, match="arguments"):
        kern(x.astype(np.float64), o, e, ok)
    with pytest.raises(IndexError, match="arguments"):
        kern(np.ones(200, np.float32)[::2], o, e, ok)
    with pytest.raises(IndexError, match="arguments"):
        kern(x, o, e, list(ok))
    m = ok.copy()
    m[10] = 3                                      # a lane count the kernel was not built for
    with pytest.raises(IndexError, match="meta"):
        kern(x, o, e, m)
    ka = reduction._get("argmax", np.dtype(np.float32), np.dtype(np.float32))[0]
    with pytest.raises(IndexError, match="index"):
        ka(x, o, np.zeros(5, np.int64), ok)        # index output too short
    res = np.zeros(3, np.float64)
    part(x, 10, 90, 1, res, 2)
    assert res[2] == 90.0
    with pytest.raises(IndexError, match="partial"):
        part(x, 10, 91, 1, res, 0)
    with pytest.raises(IndexError, match="partial"):
        part(x, 0, 10, 1, res, 3)


def test_partial_sums_blocks_in_float64(ir):
    """The partial accumulator sums float32 in float64 blocks: a total that float32 accumulation would lose."""
    _, part = reduction._get("sum", np.dtype(np.float32), np.dtype(np.float32))
    x = np.full(1 << 20, 0.1, np.float32)
    res = np.zeros(1, np.float64)
    part(x, 0, x.size, 1, res, 0)
    assert math.isclose(res[0], float(np.float64(np.float32(0.1))) * x.size, rel_tol=1e-12)
    part(x, 1, 1000, 3, res, 0)                     # strided run
    assert math.isclose(res[0], float(np.float64(np.float32(0.1))) * 1000, rel_tol=1e-12)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_tensor_api_differential(ir, dt):
    """Through the tensor API (the planner's permutes and copies included) vs numpy, odd shapes and views."""
    rng = np.random.default_rng(21)
    a = _specials(rng.standard_normal((3, 65, 7, 9)).astype(dt), rng, frac=300)
    ta = nee.tensor(a)
    for x, t in ((a, ta), (a[:, ::2, :, 1:], ta[:, ::2, :, 1:]), (a.transpose(3, 1, 0, 2), ta.permute(3, 1, 0, 2))):
        for d in (0, 1, 3, (1, 3), (0, 2)):
            dd = d if isinstance(d, tuple) else (d,)
            np.testing.assert_allclose(t.sum(d).numpy(), x.astype(np.float64).sum(dd).astype(dt),
                                       rtol=2e-6 if dt == np.float32 else 1e-12, equal_nan=True)
            assert np.array_equal(t.amax(d).numpy(), x.max(dd), equal_nan=True)
        for d in (0, 2, 3):
            assert np.array_equal(t.argmax(d).numpy(), x.argmax(d))
            assert np.array_equal(t.argmin(d).numpy(), x.argmin(d))
