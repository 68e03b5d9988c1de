"""Session 15 torch parity: lerp's formula (bits), special.zeta's edge values,
preserve_format strides of copies and elementwise results, vmap over an empty batch.
Every check compares with torch directly."""
import math

import numpy as np
import pytest

import neetorch as nee

torch = pytest.importorskip("torch")


def _np(t):
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    return t.detach().numpy()


def _nnp(t):
    if t.dtype in (nee.float16, nee.bfloat16):
        t = t.float()
    return t.numpy()


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    eq = (a == b) | ((a != a) & (b != b))
    assert eq.all(), (np.flatnonzero(~eq)[:10], a[~eq][:5], b[~eq][:5])


# ------------------------------------------------------------------ lerp
@pytest.mark.parametrize("dt", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [1, 7, 33, 1000])
def test_lerp_bits_tensor_and_scalar_weight(dt, n):
    rng = np.random.default_rng(n)
    s, e = rng.standard_normal(n) * 10, rng.standard_normal(n) * 3
    w = rng.uniform(-1.5, 1.5, n)
    w[: n // 4] = rng.choice([0.5, -0.5, 0.0, 1.0, 0.49999997], n // 4)
    T = [torch.from_numpy(x).to(getattr(torch, dt)) for x in (s, e, w)]
    N = [nee.tensor(x).to(getattr(nee, dt)) for x in (s, e, w)]
    _same_bits(_nnp(nee.lerp(*N)), _np(torch.lerp(*T)))
    _same_bits(_nnp(N[0].lerp(N[1], N[2])), _np(T[0].lerp(T[1], T[2])))
    for wv in (0.3, 0.7, -0.6, 1.0, 2.5):
        _same_bits(_nnp(nee.lerp(N[0], N[1], wv)), _np(torch.lerp(T[0], T[1], wv)))
    a, at = N[0].clone(), T[0].clone()
    a.lerp_(N[1], 0.75)
    at.lerp_(T[1], 0.75)
    _same_bits(_nnp(a), _np(at))


def test_lerp_special_values_and_broadcast():
    sp = np.array([0, 1, -1, np.inf, -np.inf, np.nan, 1e38, -1e38, 3e38], np.float32)
    wv = np.array([0, 0.5, -0.5, 1, 2, np.inf, -np.inf, np.nan, 0.49999997], np.float32)
    A, B, W = np.meshgrid(sp, sp, wv)
    args = [x.ravel() for x in (A, B, W)]
    _same_bits(nee.lerp(*[nee.tensor(x) for x in args]).numpy(), torch.lerp(*[torch.from_numpy(x) for x in args]).numpy())
    # broadcasting, a transposed operand, a 0-d weight tensor
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 6)).astype(np.float32)
    b = rng.standard_normal((6,)).astype(np.float32)
    w = rng.uniform(0, 1, (6, 5)).astype(np.float32)
    r = nee.lerp(nee.tensor(a), nee.tensor(b), nee.tensor(w).t())
    _same_bits(r.numpy(), torch.lerp(torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(w).t()).numpy())
    for wd in ("float16", "float32", "float64"):
        x, y = rng.standard_normal(300).astype(np.float16), rng.standard_normal(300).astype(np.float16)
        t = torch.lerp(torch.from_numpy(x), torch.from_numpy(y), torch.tensor(0.7123, dtype=getattr(torch, wd)))
        r = nee.lerp(nee.tensor(x), nee.tensor(y), nee.tensor(0.7123, dtype=getattr(nee, wd)))
        assert r.dtype.name == str(t.dtype).split(".")[1]
        _same_bits(_nnp(r), _np(t))


@pytest.mark.parametrize("dt", ["complex64", "complex128"])
def test_lerp_complex(dt):
    rng = np.random.default_rng(3)
    n = 256
    s = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    e = (rng.standard_normal(n) + 1j * rng.standard_normal(n)) * 3
    w = rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n)
    T = [torch.from_numpy(x).to(getattr(torch, dt)) for x in (s, e, w)]
    N = [nee.tensor(x).to(getattr(nee, dt)) for x in (s, e, w)]
    for wv in (0.3, 0.7, 0.3 + 0.5j, 2 - 1j):     # a scalar weight: torch's formula, bit for bit
        _same_bits(nee.lerp(N[0], N[1], wv).numpy(), torch.lerp(T[0], T[1], wv).numpy())
    r, t = nee.lerp(*N).numpy(), torch.lerp(*T).numpy()
    if dt == "complex128":
        _same_bits(r, t)
    else:   # torch's AVX2 complex64 loop picks each pair's branch from its even element: same value, other rounding
        np.testing.assert_allclose(r, t, rtol=2e-6, atol=2e-6)
        assert np.mean(r == t) > 0.75


# ------------------------------------------------------------------ special.zeta
_ZX = [-math.inf, -2, 0, 0.5, 1, 1.0000001, 1.5, 2, 3, 4.5, 10, 30, 100, 1e3, math.inf, math.nan]
_ZQ = [-math.inf, -5, -2.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 9, 9.5, 10, 100, 1e10, math.inf, math.nan]


def test_zeta_edge_grid_float64_bits():
    X, Q = (a.ravel() for a in np.meshgrid(np.array(_ZX), np.array(_ZQ)))
    _same_bits(nee.special.zeta(nee.tensor(X), nee.tensor(Q)).numpy(),
               torch.special.zeta(torch.from_numpy(X), torch.from_numpy(Q)).numpy())


def test_zeta_float32_and_scalars():
    X, Q = (a.ravel() for a in np.meshgrid(np.array(_ZX), np.array(_ZQ)))
    t = torch.special.zeta(torch.from_numpy(X).float(), torch.from_numpy(Q).float()).numpy()
    r = nee.special.zeta(nee.tensor(X).float(), nee.tensor(Q).float()).numpy()
    assert r.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(r), np.isnan(t))
    np.testing.assert_allclose(r, t, rtol=3e-7, atol=0)
    rng = np.random.default_rng(5)
    xs = rng.uniform(1, 8, 64).astype(np.float32)
    qs = rng.uniform(-3, 12, 64).astype(np.float32)
    for sc in (1.1, 2.3, -1.7, 3):
        np.testing.assert_allclose(nee.special.zeta(nee.tensor(xs), sc).numpy(),
                                   torch.special.zeta(torch.from_numpy(xs), sc).numpy(), rtol=3e-7)
        np.testing.assert_allclose(nee.special.zeta(sc, nee.tensor(qs)).numpy(),
                                   torch.special.zeta(sc, torch.from_numpy(qs)).numpy(), rtol=3e-7)


def test_zeta_random_float64_bits():
    rng = np.random.default_rng(0)
    X, Q = rng.uniform(1, 20, 400), rng.uniform(-30, 30, 400)
    X[:100] = np.round(X[:100])
    Q[::7] = np.nan             # a NaN among the q must not change the others (the negative-q shift)
    _same_bits(nee.special.zeta(nee.tensor(X), nee.tensor(Q)).numpy(),
               torch.special.zeta(torch.from_numpy(X), torch.from_numpy(Q)).numpy())


# ------------------------------------------------------------------ preserve_format strides
def _views(lib):
    base = lib.arange(2 * 3 * 4 * 5, dtype=lib.float32).reshape(2, 3, 4, 5)
    yield "T", base.transpose(1, 3)
    yield "perm", base.permute(2, 0, 3, 1)
    yield "slice", base[:, :, ::2]
    yield "perm_slice", base.permute(3, 2, 1, 0)[::2]
    yield "expand", lib.arange(5, dtype=lib.float32).reshape(1, 5).expand(4, 5)
    yield "mT", base.reshape(6, 20).t()
    yield "channels_last", base.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    yield "size1", lib.arange(6, dtype=lib.float32).reshape(1, 6, 1).transpose(0, 2)
    yield "contig", base


def _stride_ops(lib, x):
    ops = {
        "clone": lambda: x.clone(), "empty_like": lambda: lib.empty_like(x), "zeros_like": lambda: lib.zeros_like(x),
        "ones_like": lambda: lib.ones_like(x), "full_like": lambda: lib.full_like(x, 2.0),
        "rand_like": lambda: lib.rand_like(x), "randn_like": lambda: lib.randn_like(x),
        "to_f64": lambda: x.to(lib.float64), "to_f16": lambda: x.to(lib.float16), "double": lambda: x.double(),
        "neg": lambda: -x, "exp": lambda: x.exp(), "abs": lambda: lib.abs(x), "add_s": lambda: x + 1,
        "mul_self": lambda: x * x, "gt": lambda: x > 3, "where": lambda: lib.where(x > 3, x, 0.0),
        "relu": lambda: lib.relu(x), "clamp": lambda: x.clamp(1, 5), "pow": lambda: x ** 2,
        "contiguous": lambda: x.contiguous(), "add_contig": lambda: x + lib.ones(tuple(x.shape)),
        "radd_contig": lambda: lib.ones(tuple(x.shape)) + x, "add_bcast": lambda: x + lib.ones(x.shape[-1]),
        "add_f64": lambda: x + lib.ones(tuple(x.shape), dtype=lib.float64),
        "lerp": lambda: lib.lerp(x, lib.ones(tuple(x.shape)), 0.3),
    }
    return ops


def test_preserve_format_strides_like_torch():
    tv, nv = dict(_views(torch)), dict(_views(nee))
    bad = []
    for kind in tv:
        to, no = _stride_ops(torch, tv[kind]), _stride_ops(nee, nv[kind])
        for name in to:
            rt, rn = to[name](), no[name]()
            if tuple(rt.stride()) != tuple(rn.stride()):
                bad.append((kind, name, rt.stride(), rn.stride()))
            if name not in ("empty_like", "rand_like", "randn_like"):
                np.testing.assert_allclose(_nnp(rn), _np(rt), rtol=1e-6)
    assert not bad, bad


def test_elementwise_strides_fuzz():
    rng = np.random.default_rng(1)
    bad = []
    for _ in range(120):
        nd = int(rng.integers(2, 5))
        shape = tuple(int(v) for v in rng.choice([1, 2, 3, 4], nd))
        perm = tuple(int(v) for v in rng.permutation(nd))
        dt = str(rng.choice(["float32", "float64", "int32"]))
        a = np.arange(int(np.prod(shape))).reshape(shape).astype(dt)
        xt = torch.from_numpy(a).permute(*perm)
        xn = nee.tensor(a).permute(*perm)
        if rng.random() < 0.3:
            d = int(rng.integers(0, nd))
            sl = tuple([slice(None)] * d + [slice(None, None, 2)])
            xt, xn = xt[sl], xn[sl]
        if rng.random() < 0.2 and 1 in xt.shape:
            tgt = list(xt.shape)
            tgt[tgt.index(1)] = 3
            xt, xn = xt.expand(*tgt), xn.expand(*tgt)
        oshape = tuple(s if rng.random() < 0.6 else 1 for s in xt.shape)
        odt = str(rng.choice(["float32", "float64"]))
        yt, yn = torch.ones(oshape, dtype=getattr(torch, odt)), nee.ones(oshape, dtype=getattr(nee, odt))
        if rng.random() < 0.4:
            yt, yn = yt.transpose(0, -1).contiguous().transpose(0, -1), yn.transpose(0, -1).contiguous().transpose(0, -1)
        for name, ft, fn in (("clone", lambda: xt.clone(), lambda: xn.clone()),
                             ("to", lambda: xt.to(torch.float16), lambda: xn.to(nee.float16)),
                             ("neg", lambda: -xt, lambda: -xn), ("add", lambda: xt + yt, lambda: xn + yn),
                             ("radd", lambda: yt + xt, lambda: yn + xn), ("gt", lambda: xt > yt, lambda: xn > yn)):
            rt, rn = ft(), fn()
            if tuple(rt.stride()) != tuple(rn.stride()):
                bad.append((name, tuple(xt.shape), xt.stride(), tuple(yt.shape), yt.stride(), rt.stride(), rn.stride()))
            np.testing.assert_array_equal(_nnp(rn), _np(rt))
    assert not bad, bad[:5]


def test_empty_tensor_strides_row_major():
    for shape in ((2, 0, 3), (0, 4), (1, 2, 0, 1)):
        assert nee.empty(shape).stride() == torch.empty(shape).stride()
        assert nee.zeros(shape).clone().stride() == torch.zeros(shape).clone().stride()


def test_jit_matches_eager_on_permuted_inputs():
    x = nee.arange(24, dtype=nee.float32).reshape(2, 3, 4).permute(2, 0, 1)

    def f(a):
        return (a * 2.0 + 1.0).exp() - a

    eager = f(x)
    jitted = nee.jit(f)(x)
    np.testing.assert_array_equal(jitted.numpy(), eager.numpy())
    assert eager.stride() == (f(torch.arange(24, dtype=torch.float32).reshape(2, 3, 4).permute(2, 0, 1))).stride()


# ------------------------------------------------------------------ vmap over an empty batch
def test_vmap_empty_batch():
    r = nee.vmap(lambda x: x.sum(0) * 2)(nee.empty(0, 3, 2))
    assert tuple(r.shape) == (0, 2) and r.dtype is nee.float32
    a, b = nee.vmap(lambda x, y: (x + y, x.sum()), in_dims=(1, None), out_dims=(1, 0))(nee.empty(3, 0), nee.ones(3))
    ta, tb = torch.vmap(lambda x, y: (x + y, x.sum()), in_dims=(1, None), out_dims=(1, 0))(torch.empty(3, 0),
                                                                                           torch.ones(3))
    assert tuple(a.shape) == tuple(ta.shape) and tuple(b.shape) == tuple(tb.shape)
    assert nee.vmap(lambda x: x.to(nee.int64))(nee.empty(0, 3)).dtype is nee.int64
    d = nee.vmap(lambda x: {"a": x, "b": x[0]})(nee.empty(0, 3))
    td = torch.vmap(lambda x: {"a": x, "b": x[0]})(torch.empty(0, 3))
    assert {k: tuple(v.shape) for k, v in d.items()} == {k: tuple(v.shape) for k, v in td.items()}
    with pytest.raises(IndexError):     # out_dims beyond the output's dims: refused as torch refuses it
        nee.vmap(lambda x: x.sum(), out_dims=1)(nee.empty(0, 3))
    with pytest.raises(Exception):
        torch.vmap(lambda x: x.sum(), out_dims=1)(torch.empty(0, 3))
