"""Reductions and scans: differential tests against numpy (torch where the semantics differ)."""
import math

import numpy as np
import pytest

import neetorch as nee

RNG = np.random.default_rng(1234)
ALL_DT = ["bool", "uint8", "int32", "int64", "float16", "float32", "float64"]
FLOAT_DT = ["float16", "float32", "float64"]


def T(a):
    return nee.from_numpy(np.asarray(a))


def N(t):
    return np.asarray(t._data)


def data(shape, dt, lo=-5, hi=6):
    if dt == "bool":
        return RNG.random(shape) > 0.5
    if dt in ("uint8",):
        return RNG.integers(0, 10, shape).astype(dt)
    if dt.startswith("int"):
        return RNG.integers(lo, hi, shape).astype(dt)
    return RNG.standard_normal(shape).astype(dt)


def tol(dt):
    return {"float16": dict(rtol=2e-3, atol=2e-3), "float32": dict(rtol=1e-5, atol=1e-5),
            "float64": dict(rtol=1e-12, atol=1e-12)}.get(str(dt), dict(rtol=0, atol=0))


def check(t, ref, dtype=None, **kw):
    got = N(t)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if dtype is not None:
        assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    k = tol(got.dtype)
    k.update(kw)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), **k)
    else:
        np.testing.assert_array_equal(got, ref)


def layouts(a):
    """(name, numpy array, tensor) for contiguous and non-contiguous views of the same values."""
    out = [("contig", a, T(a))]
    if a.ndim >= 2:
        b = np.ascontiguousarray(a.swapaxes(0, 1))
        out.append(("transposed", b.swapaxes(0, 1), T(b).transpose(0, 1)))
        big = np.concatenate([a, a], axis=-1)
        out.append(("step", big[..., ::2], T(big)[..., ::2]))
        out.append(("flipped", a, nee.from_numpy(np.ascontiguousarray(a[::-1])[::-1])))
        out.append(("flipped2", a, nee.from_numpy(np.ascontiguousarray(a[:, ::-1])[:, ::-1])))
    if a.ndim >= 1:
        row = a[:1]
        exp_shape = (4,) + a.shape[1:]
        out.append(("expanded", np.broadcast_to(row, exp_shape), T(np.ascontiguousarray(row)).expand(*exp_shape)))
    return out


# ------------------------------------------------------------------ sum / mean / prod dtype rules
@pytest.mark.parametrize("dt", ALL_DT)
def test_sum_dtypes(dt):
    a = data((5, 7), dt)
    exp_dt = "int64" if dt in ("bool", "uint8", "int32", "int64") else dt
    for dim in (None, 0, 1, -1, (0, 1)):
        for kd in (False, True):
            r = np.sum(a.astype(np.float64 if dt.startswith("float") else np.int64),
                       axis=dim if dim is not None else None, keepdims=kd)
            check(nee.sum(T(a), dim, keepdim=kd), r, exp_dt)
    check(T(a).sum(), a.sum(dtype=np.float64 if dt.startswith("float") else np.int64), exp_dt)


@pytest.mark.parametrize("dt", ["bool", "int32", "float32", "float64"])
def test_prod_dtypes(dt):
    a = data((4, 6), dt, lo=-2, hi=3)
    exp_dt = "int64" if dt in ("bool", "int32") else dt
    for dim in (None, 0, 1):
        r = np.prod(a.astype(np.float64 if dt.startswith("float") else np.int64), axis=dim)
        check(nee.prod(T(a), dim) if dim is not None else nee.prod(T(a)), r, exp_dt)
    check(T(a).prod(1, keepdim=True), np.prod(a.astype(np.float64 if dt.startswith("f") else np.int64), 1,
                                               keepdims=True), exp_dt)


def test_sum_prod_dtype_arg():
    a = np.array([[1.5, 2.7], [3.2, -1.9]], np.float32)
    check(nee.sum(T(a), dtype=nee.int32), np.array(a.astype(np.int32).sum(), np.int32), "int32")
    check(nee.sum(T(a), 0, dtype=nee.float64), a.astype(np.float64).sum(0), "float64")
    check(nee.prod(T(a), 1, dtype=nee.float64), a.astype(np.float64).prod(1), "float64")
    i = np.arange(6, dtype=np.int32)
    check(nee.mean(T(i), dtype=nee.float32), np.float32(2.5), "float32")
    check(nee.cumsum(T(i), 0, dtype=nee.float32), np.cumsum(i).astype(np.float32), "float32")


@pytest.mark.parametrize("dt", FLOAT_DT)
def test_mean(dt):
    a = data((3, 4, 5), dt)
    a64 = a.astype(np.float64)
    for dim in (None, 0, 2, -1, (0, 2), (2, 0), (-1, -3), ()):
        for kd in (False, True):
            ax = None if dim in (None, ()) else dim
            check(nee.mean(T(a), dim, kd), np.mean(a64, axis=ax, keepdims=kd), dt)
    check(T(a).mean(), a64.mean(), dt)


def test_mean_int_error():
    with pytest.raises(RuntimeError, match=r"mean\(\): could not infer output dtype. Input dtype must be either a "
                                           r"floating point or complex dtype"):
        nee.mean(T(np.arange(3)))
    with pytest.raises(RuntimeError, match="nanmean"):
        nee.nanmean(T(np.arange(3)))


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin", "prod", "any", "all", "nansum"])
def test_layouts(op):
    a = data((6, 5, 4), "float32")
    np_op = {"sum": np.sum, "mean": np.mean, "amax": np.max, "amin": np.min, "prod": np.prod, "any": np.any,
             "all": np.all, "nansum": np.nansum}[op]
    f = getattr(nee, op)
    for name, na, t in layouts(a):
        for dim in ((0,), (1,), (2,), (0, 2), (0, 1), (1, 2), None):
            if op == "prod" and isinstance(dim, tuple) and len(dim) > 1:
                continue
            d = dim[0] if isinstance(dim, tuple) and len(dim) == 1 else dim
            for kd in (False, True):
                if op == "prod" and d is None and kd:
                    continue   # torch's prod has no all-elements keepdim form (prod(x, None, True): TypeError)
                ref = np_op(na.astype(np.float64), axis=dim, keepdims=kd)
                if d is None and op not in ("amax", "amin"):
                    got = f(t, None, kd) if kd else f(t)
                elif d is None:
                    got = f(t, (), kd)
                else:
                    got = f(t, d, kd)
                if op in ("any", "all"):
                    check(got, ref, "bool")
                else:
                    check(got, ref.astype(np.float32) if op in ("amax", "amin") else ref, "float32",
                          rtol=2e-5, atol=2e-5)


def test_layout_genuinely_non_contiguous():
    # a layout whose kept dims cannot be merged (forces the copy fallback) and negative strides
    a = data((4, 6, 5, 3), "float64")
    t = T(a).permute(2, 0, 3, 1)[:, ::2]
    na = a.transpose(2, 0, 3, 1)[:, ::2]
    for dim in ((0, 2), (1, 3), (0, 3), (1,), (3,), (0, 1, 2)):
        check(nee.sum(t, dim), na.sum(axis=dim))
        check(nee.amax(t, dim), na.max(axis=dim))
    f = T(np.ascontiguousarray(a))
    fl = nee.from_numpy(a[::-1, :, ::-1])
    check(nee.sum(fl, (0, 2)), a[::-1, :, ::-1].sum(axis=(0, 2)))
    check(nee.argmax(fl, 2), a[::-1, :, ::-1].argmax(2))
    check(nee.cumsum(fl, 1), np.cumsum(a[::-1, :, ::-1], 1))
    assert f.sum().item() == pytest.approx(a.sum())


def test_zero_dim_and_empty():
    s = T(np.array(3.5, np.float32))
    check(s.sum(), np.float32(3.5), "float32")
    check(s.sum(0), np.float32(3.5))
    check(s.sum(-1, keepdim=True), np.float32(3.5))
    check(s.mean(), np.float32(3.5))
    check(s.amax(), np.float32(3.5))
    mx = s.max(0)
    check(mx.values, np.float32(3.5))
    check(mx.indices, np.int64(0))
    check(s.argmax(), np.int64(0))
    check(s.cumsum(0), np.float32(3.5))
    check(s.prod(), np.float32(3.5))
    e = T(np.zeros((0, 3), np.float32))
    check(e.sum(), np.float32(0))
    check(e.sum(0), np.zeros(3, np.float32))
    check(e.sum(1), np.zeros(0, np.float32))
    check(e.prod(0), np.ones(3, np.float32))
    check(T(np.zeros((0, 3), np.int32)).prod(0), np.ones(3, np.int64), "int64")
    assert math.isnan(e.mean().item())
    check(e.amax(1), np.zeros(0, np.float32))
    check(e.any(), np.bool_(False))
    check(e.all(), np.bool_(True))
    check(nee.count_nonzero(e), np.int64(0))
    check(e.cumsum(0), np.zeros((0, 3), np.float32))
    check(nee.logsumexp(e, 0), np.full(3, -np.inf, np.float32))
    assert math.isnan(e.var().item())


def test_empty_errors():
    e = T(np.zeros((0, 3), np.float32))
    with pytest.raises(IndexError, match=r"max\(\): Expected reduction dim 0 to have non-zero size."):
        e.max(0)
    with pytest.raises(IndexError, match=r"amax\(\): Expected reduction dim 0 to have non-zero size."):
        e.amax(0)
    with pytest.raises(RuntimeError, match=r"max\(\): Expected reduction dim to be specified"):
        e.max()
    with pytest.raises(RuntimeError, match=r"amin\(\): Expected reduction dim to be specified"):
        e.amin()
    with pytest.raises(IndexError, match="argmax"):
        e.argmax()
    with pytest.raises(RuntimeError, match="aminmax"):
        nee.aminmax(e)


def test_bad_dim_errors():
    x = T(np.zeros((2, 3), np.float32))
    for name in ("sum", "mean", "amax", "amin", "prod", "any", "all", "nansum", "argmax", "argmin", "max", "min",
                 "var", "std", "logsumexp", "cumsum", "cumprod", "cummax", "cummin", "median", "count_nonzero",
                 "norm"):
        f = getattr(nee, name)
        with pytest.raises(IndexError, match=name):
            if name == "norm":
                f(x, 2, 2)
            else:
                f(x, 2)
    with pytest.raises(RuntimeError, match="multiple times"):
        nee.sum(x, (0, -2))
    with pytest.raises(TypeError):
        nee.sum([1, 2])


# ------------------------------------------------------------------ max / min / arg
@pytest.mark.parametrize("dt", ["bool", "uint8", "int32", "float16", "float32", "float64"])
def test_amax_amin_argmax(dt):
    a = data((5, 9), dt)
    for f, nf, af, naf in ((nee.amax, np.max, nee.argmax, np.argmax), (nee.amin, np.min, nee.argmin, np.argmin)):
        for dim in (0, 1, -1):
            for kd in (False, True):
                check(f(T(a), dim, kd), nf(a, axis=dim, keepdims=kd), dt)
                if dt != "bool":
                    check(af(T(a), dim, kd), naf(a, axis=dim, keepdims=kd), "int64")
        check(f(T(a)), nf(a), dt)
        if dt == "bool":       # torch: argmax/argmin reject bool (max(dim) accepts it)
            with pytest.raises(RuntimeError, match="bool"):
                af(T(a))
            check(nee.max(T(a), 1).indices, np.argmax(a, 1))
            continue
        check(af(T(a)), naf(a), "int64")
        check(af(T(a), keepdim=True), np.reshape(naf(a), (1, 1)), "int64")
        check(af(T(a).t()), naf(a.T), "int64")


@pytest.mark.parametrize("dt", ["int32", "float32", "float64"])
def test_max_min_dim(dt):
    a = data((6, 7), dt, lo=-2, hi=3)   # many ties: torch returns the first occurrence
    for f, nf, naf in ((nee.max, np.max, np.argmax), (nee.min, np.min, np.argmin)):
        check(f(T(a)), nf(a), dt)
        for dim in (0, 1, -2):
            r = f(T(a), dim)
            v, i = r
            check(r.values, nf(a, axis=dim), dt)
            check(r.indices, naf(a, axis=dim), "int64")
            check(v, nf(a, axis=dim))
            check(i, naf(a, axis=dim))
            r = T(a).max(dim, keepdim=True) if f is nee.max else T(a).min(dim, True)
            check(r.values, nf(a, axis=dim, keepdims=True))
        check(f(T(a).t(), 1).indices, naf(a.T, axis=1))
    b = data((6, 7), dt)
    check(nee.max(T(a), T(b)), np.maximum(a, b))
    check(T(a).min(T(b)), np.minimum(a, b))


def test_nan_propagation():
    a = np.array([[1.0, np.nan, 3.0, np.nan], [4.0, 2.0, 9.0, 1.0], [np.nan, 5, 6, 7]], np.float32)
    r = nee.max(T(a), 1)
    check(r.values, np.array([np.nan, 9, np.nan], np.float32))
    check(r.indices, np.array([1, 2, 0]))
    r = nee.min(T(a), 1)
    check(r.values, np.array([np.nan, 1, np.nan], np.float32))
    check(r.indices, np.array([1, 3, 0]))
    check(nee.argmax(T(a)), np.int64(1))
    check(nee.amax(T(a), 0), np.max(a, 0))
    check(nee.amin(T(a), 0), np.min(a, 0))
    check(nee.max(T(a), 0).indices, np.array([2, 0, 1, 0]))
    assert math.isnan(nee.max(T(a)).item()) and math.isnan(nee.min(T(a)).item())
    check(nee.sum(T(a), 1), a.sum(1))
    check(nee.nansum(T(a), 1), np.nansum(a, 1))
    check(nee.nansum(T(a)), np.nansum(a))
    check(nee.nanmean(T(a), 1), np.nanmean(a, 1))
    check(nee.nanmean(T(a)), np.float32(np.nanmean(a)))
    check(nee.nansum(T(np.arange(4, dtype=np.int32))), np.int64(6), "int64")
    check(nee.count_nonzero(T(a), 1), np.count_nonzero(a, 1), "int64")


def test_aminmax():
    a = data((4, 5), "float32")
    r = nee.aminmax(T(a))
    check(r.min, a.min())
    check(r.max, a.max())
    lo, hi = nee.aminmax(T(a), dim=1, keepdim=True)
    check(lo, a.min(1, keepdims=True))
    check(hi, a.max(1, keepdims=True))


# ------------------------------------------------------------------ any / all / count_nonzero
@pytest.mark.parametrize("dt", ["bool", "uint8", "int32", "float32"])
def test_any_all(dt):
    a = data((4, 6), dt, lo=0, hi=3)
    if dt != "bool":
        a[0] = 0
    exp_dt = "uint8" if dt == "uint8" else "bool"
    for dim in (None, 0, 1, (0, 1)):
        for kd in (False, True):
            ax = dim
            check(nee.any(T(a), dim, kd), np.any(a, axis=ax, keepdims=kd).astype(exp_dt), exp_dt)
            check(nee.all(T(a), dim, kd), np.all(a, axis=ax, keepdims=kd).astype(exp_dt), exp_dt)
    check(T(a).any(), np.any(a).astype(exp_dt), exp_dt)
    for dim in (None, 0, (0, 1)):
        check(nee.count_nonzero(T(a), dim), np.count_nonzero(a, axis=dim), "int64")


# ------------------------------------------------------------------ var / std
def test_var_std():
    torch = pytest.importorskip("torch")
    a = data((5, 6, 3), "float64")
    ta = torch.from_numpy(a)
    for dim in (None, 0, 1, (0, 2), -1):
        for c in (0, 1, 2):
            for kd in (False, True):
                check(nee.var(T(a), dim, keepdim=kd, correction=c), torch.var(ta, dim, keepdim=kd, correction=c))
                check(nee.std(T(a), dim, keepdim=kd, correction=c), torch.std(ta, dim, keepdim=kd, correction=c))
                v, m = nee.var_mean(T(a), dim, keepdim=kd, correction=c)
                tv, tm = torch.var_mean(ta, dim, keepdim=kd, correction=c)
                check(v, tv)
                check(m, tm)
                s, m = nee.std_mean(T(a), dim, keepdim=kd, correction=c)
                check(s, torch.std_mean(ta, dim, keepdim=kd, correction=c)[0])
    check(nee.var(T(a), 1, False), torch.var(ta, 1, False))         # legacy unbiased positional
    check(T(a).std(unbiased=False), torch.std(ta, unbiased=False))
    check(T(a).var(False), torch.var(ta, False))
    f = data((7, 3), "float32")
    check(nee.var(T(f), 0), np.var(f.astype(np.float64), 0, ddof=1).astype(np.float32), "float32")
    h = data((7, 3), "float16")
    check(nee.std(T(h), 0), np.std(h.astype(np.float64), 0, ddof=1), "float16")
    # correction >= N: inf / nan like torch
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for vals, c in (([1.0, 2.0], 3), ([1.0], 1), ([1.0, 1.0], 2)):
            check(nee.var(T(np.array(vals)), correction=c), torch.var(torch.tensor(vals, dtype=torch.float64),
                                                                      correction=c))
    with pytest.raises(RuntimeError, match="floating point"):
        nee.var(T(np.arange(3)))


# ------------------------------------------------------------------ logsumexp / norms
def test_logsumexp():
    torch = pytest.importorskip("torch")
    a = data((4, 7), "float32") * 30
    a[1] = -np.inf
    a[2, 3] = np.inf
    ta = torch.from_numpy(a)
    for dim in (0, 1, (0, 1), -1):
        for kd in (False, True):
            check(nee.logsumexp(T(a), dim, kd), torch.logsumexp(ta, dim, kd), "float32")
    big = np.array([1000.0, 1000.0], np.float64)
    check(nee.logsumexp(T(big), 0), 1000.0 + math.log(2))
    check(nee.logsumexp(T(np.arange(3)), 0), torch.logsumexp(torch.arange(3), 0), "float32")


def test_norms():
    torch = pytest.importorskip("torch")
    a = data((5, 4), "float32")
    ta = torch.from_numpy(a)
    for p in ("fro", 2, 1, math.inf, -math.inf, 0, 3, 0.5):
        for dim in (None, 0, 1):
            check(nee.norm(T(a), p, dim), torch.norm(ta, p, dim), "float32")
    for o in (2, 1, math.inf, 3):
        for dim in (None, (0, 1), 1):
            for kd in (False, True):
                check(nee.vector_norm(T(a), o, dim, kd), torch.linalg.vector_norm(ta, o, dim, kd), "float32")
    check(T(a).norm(), torch.norm(ta))
    check(nee.norm(T(a.astype(np.float64)), dtype=nee.float64), torch.norm(ta.double()), "float64", rtol=1e-6)
    with pytest.raises(RuntimeError, match="floating point"):
        nee.norm(T(np.arange(3)))


# ------------------------------------------------------------------ median
def test_median():
    torch = pytest.importorskip("torch")
    a = RNG.permutation(30).reshape(5, 6).astype(np.float32)   # distinct values: indices are unambiguous
    ta = torch.from_numpy(a)
    check(nee.median(T(a)), torch.median(ta))
    for dim in (0, 1, -1):
        for kd in (False, True):
            r = nee.median(T(a), dim, kd)
            tr = torch.median(ta, dim, kd)
            check(r.values, tr.values)
            check(r.indices, tr.indices)
    b = np.array([[3.0, np.nan, 2.0, np.nan], [4.0, 1.0, 3.0, 2.0]], np.float32)
    r = nee.median(T(b), 1)
    tr = torch.median(torch.from_numpy(b), 1)
    check(r.values, tr.values)
    check(r.indices, tr.indices)
    check(nee.median(T(np.arange(7, dtype=np.int32))), np.int32(3), "int32")
    assert math.isnan(nee.median(T(np.zeros(0, np.float32))).item())


# ------------------------------------------------------------------ scans
@pytest.mark.parametrize("dt", ["bool", "int32", "int64", "float16", "float32", "float64"])
def test_cumsum_cumprod(dt):
    a = data((4, 5, 3), dt, lo=-2, hi=3)
    exp_dt = "int64" if dt in ("bool", "int32", "int64") else dt
    acc = np.float64 if dt.startswith("float") else np.int64
    for dim in (0, 1, 2, -1):
        check(nee.cumsum(T(a), dim), np.cumsum(a.astype(acc), dim), exp_dt)
        check(T(a).cumprod(dim), np.cumprod(a.astype(acc), dim), exp_dt)
    check(T(a).transpose(0, 2).cumsum(1), np.cumsum(a.transpose(2, 1, 0).astype(acc), 1), exp_dt)


@pytest.mark.parametrize("dt", ["int32", "float32"])
def test_cummax_cummin(dt):
    torch = pytest.importorskip("torch")
    a = data((5, 8), dt, lo=-2, hi=3)
    ta = torch.from_numpy(a)
    for dim in (0, 1, -1):
        for f in ("cummax", "cummin"):
            r = getattr(nee, f)(T(a), dim)
            tr = getattr(torch, f)(ta, dim)
            check(r.values, tr.values, dt)
            check(r.indices, tr.indices, "int64")
    y = np.array([1.0, np.nan, 3.0, np.nan, 9.0, 0.0], np.float32)
    for f in ("cummax", "cummin"):
        r = getattr(nee, f)(T(y), 0)
        tr = getattr(torch, f)(torch.from_numpy(y), 0)
        check(r.values, tr.values)
        check(r.indices, tr.indices)


# ------------------------------------------------------------------ large sizes (threaded and blocked paths)
def test_large_sums():
    a = RNG.standard_normal(1 << 20).astype(np.float32)
    ref = a.astype(np.float64).sum()
    assert abs(nee.sum(T(a)).item() - ref) <= 1e-6 * np.abs(a).sum()
    np.testing.assert_allclose(nee.mean(T(a)).item(), a.astype(np.float64).mean(), rtol=1e-5, atol=1e-7)
    d = RNG.random(3 << 20)
    np.testing.assert_allclose(nee.sum(T(d)).item(), math.fsum(d.tolist()), rtol=1e-12)
    b = RNG.standard_normal((1024, 512)).astype(np.float32)
    for dim in (0, 1):
        check(nee.sum(T(b), dim), b.astype(np.float64).sum(dim), rtol=1e-5, atol=1e-4)
        check(nee.amax(T(b), dim), b.max(dim))
        check(nee.argmax(T(b), dim), b.argmax(dim))
        check(nee.sum(T(b).t(), dim), b.T.astype(np.float64).sum(dim), rtol=1e-5, atol=1e-4)
    fl = nee.from_numpy(b[::-1, ::-1])              # negative strides on the kept and the reduced dim
    check(nee.sum(fl, 0), b[::-1, ::-1].astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
    check(nee.mean(fl, 0), b[::-1, ::-1].astype(np.float64).mean(0), rtol=1e-5, atol=1e-6)
    check(nee.mean(T(b), 0, keepdim=True), b.astype(np.float64).mean(0, keepdims=True), rtol=1e-5, atol=1e-6)
    check(nee.amin(fl, 0), b[::-1, ::-1].min(0))
    check(nee.argmax(fl, 0), b[::-1, ::-1].argmax(0))
    check(nee.any(T(b > 3.5), 0), (b > 3.5).any(0))
    b3 = RNG.standard_normal((3, 2048, 130)).astype(np.float32)
    check(nee.sum(T(b3), 1), b3.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)
    p3 = (1 + 0.001 * b3).astype(np.float32)
    check(nee.prod(T(p3), 1), np.prod(p3.astype(np.float64), 1), rtol=1e-4)
    check(nee.amax(T(a)), a.max())
    check(nee.argmin(T(a)), a.argmin())
    check(nee.any(T(a > 3)), np.any(a > 3))
    c = RNG.standard_normal((300, 400)).astype(np.float32)
    check(nee.cumsum(T(c), 1), np.cumsum(c.astype(np.float64), 1), rtol=1e-5, atol=1e-4)
    check(nee.cumsum(T(c), 0), np.cumsum(c.astype(np.float64), 0), rtol=1e-5, atol=1e-4)


def test_methods_and_namespace():
    a = data((3, 4), "float32")
    t = T(a)
    for name in ("sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "var", "std", "any", "all",
                 "logsumexp", "cumsum", "cumprod", "cummax", "cummin", "norm", "median", "nansum", "nanmean",
                 "count_nonzero", "aminmax"):
        assert hasattr(nee.Tensor, name), name
        assert callable(getattr(nee, name)), name
    assert callable(nee.var_mean) and callable(nee.std_mean) and callable(nee.vector_norm)
    check(t.sum(dim=1, keepdim=True), a.astype(np.float64).sum(1, keepdims=True))


# ------------------------------------------------------------------ properties
hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


@st.composite
def _arr_dims(draw):
    nd = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=nd, max_size=nd)))
    dims = tuple(sorted(draw(st.sets(st.integers(0, nd - 1), max_size=nd))))
    perm = draw(st.permutations(range(nd)))
    kd = draw(st.booleans())
    return shape, dims, tuple(perm), kd


@settings(max_examples=60, deadline=None)
@given(_arr_dims())
def test_prop_sum_amax_any_layouts(args):
    shape, dims, perm, kd = args
    a = RNG.integers(-3, 4, shape).astype(np.float64)
    na = a.transpose(perm)
    t = T(a).permute(*perm)
    dims = dims or None
    check(nee.sum(t, dims, kd), na.sum(axis=dims, keepdims=kd))
    check(nee.any(t, dims, kd), na.any(axis=dims, keepdims=kd))
    check(nee.prod(t) if dims is None or len(dims) != 1 else nee.prod(t, dims[0]),   # (torch: no dim=None)
          na.prod(axis=None if dims is None or len(dims) != 1 else dims[0]))
    if all(na.shape[d] > 0 for d in (dims or range(na.ndim))) and na.size:
        check(nee.amax(t, dims if dims else (), kd), na.max(axis=dims, keepdims=kd))


@settings(max_examples=40, deadline=None)
@given(_arr_dims())
def test_prop_argmax_cumsum(args):
    shape, dims, perm, kd = args
    a = RNG.integers(-3, 4, shape).astype(np.float32)
    na = a.transpose(perm)
    t = T(a).permute(*perm)
    for d in range(na.ndim):
        check(nee.cumsum(t, d), np.cumsum(na.astype(np.float64), d))
        if na.shape[d] > 0:
            check(nee.argmax(t, d, kd), np.argmax(na, d, keepdims=kd))
            check(nee.min(t, d).indices, np.argmin(na, d))


def test_long_rows_ties_and_nan():
    # rows long enough for the interleaved-lane path: ties resolve to the first occurrence, the first NaN wins
    a = RNG.integers(-3, 4, (6, 1000)).astype(np.float32)
    a[1, 517] = np.nan
    a[2, 3] = np.nan
    a[2, 999] = np.nan
    a[3, 998] = np.nan
    a[4, :] = -np.inf
    for f, nf, naf in ((nee.max, np.max, np.argmax), (nee.min, np.min, np.argmin)):
        r = f(T(a), 1)
        check(r.values, nf(a, 1))
        check(r.indices, naf(a, 1))
        check((nee.argmax if f is nee.max else nee.argmin)(T(a), 1), naf(a, 1))
        check(nee.amax(T(a), 1) if f is nee.max else nee.amin(T(a), 1), nf(a, 1))
    i = RNG.integers(-100, 100, (3, 777)).astype(np.int64)
    check(nee.argmax(T(i), 1), i.argmax(1))
    check(nee.amin(T(i), 1), i.min(1))
    check(nee.argmin(T(i)), i.argmin())
    b = RNG.random((5, 700)) > 0.01
    check(nee.all(T(b), 1), b.all(1))
    check(nee.any(T(~b), 1), (~b).any(1))
