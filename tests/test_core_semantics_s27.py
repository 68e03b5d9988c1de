"""Session 27 core-semantics regressions, each checked against torch (CPU) as the reference.

* several ``...`` in one index (torch's dim cursor: each one skips ndim - the indexed dims);
* ``ldexp`` as torch 2.13 computes it (an integer exponent: std::ldexp in the input's dtype; otherwise
  ``mul(input, _pow2(input, other))`` with the power's dtype from the input's);
* result layouts (strides) of flip / roll / cat / stack with channels-last and permuted inputs.
"""
import warnings

import numpy as np
import pytest

import neetorch as nee

torch = pytest.importorskip("torch")


def _nee(t):
    if t.dtype == torch.bfloat16:
        return nee.tensor(t.float().numpy()).to(nee.bfloat16)
    return nee.tensor(t.numpy())


def _np(x):
    if isinstance(x, torch.Tensor):
        return (x.float() if x.dtype == torch.bfloat16 else x).numpy()
    return (x.float() if x.dtype is nee.bfloat16 else x).numpy()


# ---------------------------------------------------------------- several ellipses in one index
_I = "I"
_ELL_CASES = [
    (..., 0, ...), (..., ...), (0, ..., ...), (..., None, ...), (..., ..., ...), (..., slice(1, None), ...),
    (_I, ..., ...), (..., _I, ...), (None, ..., ...), (..., 0, 0, ...), (0, ..., 0, ...), (..., True, ...),
    (..., 0, ..., ...), (..., 0, None, ...), (..., slice(None), ..., slice(None)), (..., ..., 0, 0, 0),
    (..., ..., slice(None)), (..., 0, 0, 0, ..., None), (..., slice(None, None, 2), ...),
    # past the last dim: torch raises
    (..., 0, ..., 1), (..., ..., 0), (..., ..., None), (0, ..., ..., ..., 0), (..., ..., slice(None, None, 2)),
    (..., ..., _I), (..., ..., False), (..., 0, ..., None),
]


def _key(case, idx):
    return tuple(idx if e is _I else e for e in case)


@pytest.mark.parametrize("case", _ELL_CASES, ids=str)
def test_several_ellipses_getitem(case):
    x = torch.arange(24).reshape(2, 3, 4)
    y = nee.tensor(x.numpy())
    try:
        r = x[_key(case, torch.tensor([0, 1]))]
    except IndexError:
        with pytest.raises(IndexError):
            y[_key(case, nee.tensor([0, 1]))]
        return
    n = y[_key(case, nee.tensor([0, 1]))]
    assert tuple(n.shape) == tuple(r.shape)
    np.testing.assert_array_equal(n.numpy(), r.numpy())


@pytest.mark.parametrize("case", _ELL_CASES, ids=str)
def test_several_ellipses_setitem(case):
    x = torch.arange(24).reshape(2, 3, 4)
    y = nee.tensor(x.numpy())
    try:
        x[_key(case, torch.tensor([0, 1]))] = -1
    except IndexError:
        with pytest.raises(IndexError):
            y[_key(case, nee.tensor([0, 1]))] = -1
        return
    y[_key(case, nee.tensor([0, 1]))] = -1
    np.testing.assert_array_equal(y.numpy(), x.numpy())


def test_several_ellipses_is_a_view():
    y = nee.zeros(2, 3, 4)
    v = y[..., 1, ...]
    v += 5
    assert float(y[:, :, 1].sum()) == 30 and float(y.sum()) == 30


# ---------------------------------------------------------------- ldexp
_FL = ["float16", "bfloat16", "float32", "float64"]


def _mk(dt, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if dt in _FL:
        return (torch.randn(shape, generator=g) * 4).to(getattr(torch, dt))
    return torch.randint(-6, 8, shape, generator=g).to(getattr(torch, dt))


@pytest.mark.parametrize("shapes", [((9,), (9,)), ((9,), ()), ((), (9,))], ids=str)
@pytest.mark.parametrize("edt", _FL + ["int32", "int64", "uint8"])
@pytest.mark.parametrize("idt", _FL + ["int32", "int64"])
def test_ldexp_dtypes_and_values(idt, edt, shapes):
    a, b = _mk(idt, shapes[0], 0), _mk(edt, shapes[1], 1)
    with warnings.catch_warnings():      # (torch warns when its int-exponent kernel resizes a 0-d output)
        warnings.simplefilter("ignore")
        r = torch.ldexp(a, b)
    n = nee.ldexp(_nee(a), _nee(b))
    assert n.dtype.name == str(r.dtype).split(".")[-1]
    assert tuple(n.shape) == tuple(r.shape)
    np.testing.assert_array_equal(_np(n).astype(np.float64), _np(r).astype(np.float64))


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32", "float64"])
def test_ldexp_integer_exponent_extremes(dt):
    x = torch.tensor([1.5, -2.0, 0.0, float("inf"), float("nan"), 1e-3, 3.0, -0.0], dtype=getattr(torch, dt))
    e = torch.tensor([40, -30, 5000, -5000, 3, -14, 2 ** 31 + 5, 7])
    r = torch.ldexp(x, e)
    n = nee.ldexp(_nee(x), _nee(e))
    assert n.dtype.name == dt
    np.testing.assert_array_equal(_np(n), _np(r))
    assert np.array_equal(np.signbit(_np(n)), np.signbit(_np(r)))
    x2, n2 = x.clone(), _nee(x)
    x2.ldexp_(e)
    n2.ldexp_(_nee(e))
    np.testing.assert_array_equal(_np(n2), _np(x2))


def test_ldexp_bool_exponent_with_float_input_raises():
    with pytest.raises(NotImplementedError):
        torch.ldexp(torch.ones(2), torch.tensor([True, False]))
    with pytest.raises(NotImplementedError):
        nee.ldexp(nee.ones(2), nee.tensor([True, False]))


# ---------------------------------------------------------------- flip / roll / cat / stack layouts
def _pair(shape, kind):
    t = torch.arange(int(np.prod(shape)), dtype=torch.float32).reshape(shape)
    n = nee.tensor(t.numpy())
    if kind == "cl":
        return t.contiguous(memory_format=torch.channels_last), n.contiguous(memory_format=nee.channels_last)
    if kind == "cl3d":
        return (t.contiguous(memory_format=torch.channels_last_3d),
                n.contiguous(memory_format=nee.channels_last_3d))
    if kind == "T":
        return t.transpose(0, 1), n.transpose(0, 1)
    if kind == "mT":
        return t.mT, n.mT
    if kind == "perm":
        return t.permute(2, 0, 1), n.permute(2, 0, 1)
    return t, n


_LAYOUTS = [((2, 3, 4, 5), "cl"), ((2, 3, 4, 5), "T"), ((2, 3, 4, 5), "mT"), ((2, 3, 4), "perm"),
            ((2, 3, 4), "mT"), ((2, 3, 2, 4, 5), "cl3d"), ((2, 3, 4, 5), "c")]


def _same(r, n):
    assert tuple(n.shape) == tuple(r.shape)
    assert tuple(n.stride()) == tuple(r.stride())
    np.testing.assert_array_equal(n.numpy(), r.numpy())


@pytest.mark.parametrize("shape,kind", _LAYOUTS, ids=str)
def test_flip_layout(shape, kind):
    t, n = _pair(shape, kind)
    for d in range(t.ndim):
        _same(torch.flip(t, [d]), nee.flip(n, [d]))
    _same(torch.flip(t, list(range(t.ndim))), nee.flip(n, list(range(t.ndim))))
    _same(torch.fliplr(t), nee.fliplr(n))
    _same(torch.flipud(t), nee.flipud(n))


@pytest.mark.parametrize("shape,kind", _LAYOUTS, ids=str)
def test_roll_layout(shape, kind):
    t, n = _pair(shape, kind)
    for d in range(t.ndim):
        for s in (1, 0, t.shape[d], -1):
            _same(torch.roll(t, s, d), nee.roll(n, s, d))
    _same(torch.roll(t, 3), nee.roll(n, 3))
    _same(torch.roll(t, (1, 2), (0, -1)), nee.roll(n, (1, 2), (0, -1)))
    _same(torch.roll(t, (1, -1), (1, 1)), nee.roll(n, (1, -1), (1, 1)))


@pytest.mark.parametrize("shape,kind", _LAYOUTS, ids=str)
def test_cat_layout(shape, kind):
    t, n = _pair(shape, kind)
    for d in range(t.ndim):
        _same(torch.cat([t, t], d), nee.cat([n, n], d))
        _same(torch.cat([t, t.contiguous()], d), nee.cat([n, n.contiguous()], d))
        _same(torch.cat([t.contiguous(), t], d), nee.cat([n.contiguous(), n], d))
        _same(torch.cat([t, t.double()], d), nee.cat([n, n.double()], d))


def test_cat_layout_channels_last_pieces():
    t, n = _pair((2, 3, 4, 5), "cl")
    _same(torch.cat([t[..., :4], t[..., 1:]], 3), nee.cat([n[..., :4], n[..., 1:]], 3))
    _same(torch.cat([t[:, :2], t[:, 1:]], 1), nee.cat([n[:, :2], n[:, 1:]], 1))
    _same(torch.cat([t, torch.tensor([])], 1), nee.cat([n, nee.tensor([])], 1))


@pytest.mark.parametrize("shape,kind", _LAYOUTS, ids=str)
def test_stack_layout(shape, kind):
    t, n = _pair(shape, kind)
    for d in range(t.ndim + 1):
        _same(torch.stack([t, t], d), nee.stack([n, n], d))
        _same(torch.stack([t, t.double(), t], d), nee.stack([n, n.double(), n], d))


@pytest.mark.parametrize("shape,kind", _LAYOUTS + [((4, 5), "T"), ((4, 5), "c")], ids=str)
def test_rot90_layout(shape, kind):
    # rot90 is flip + transpose; k = 0 is torch's clone(contiguous_format)
    t, n = _pair(shape, kind)
    for k in range(-1, 5):
        for dims in [(0, 1), (-2, -1), (1, 0)]:
            _same(torch.rot90(t, k, dims), nee.rot90(n, k, dims))


# ---------------------------------------------------------------- nll_loss / cross_entropy weight dtypes
_WDT = [("float64", "float32"), ("float32", "float64"), ("float16", "float32"), ("float32", "float16"),
        ("bfloat16", "float32"), ("float32", "int64"), ("float32", "float32")]


def _run_both(tf, nf, *args, tol=1e-5, **kw):
    try:
        r = tf(*args, **kw)
    except Exception as e:       # noqa: BLE001 - the reference's exception type is what neetorch must raise
        with pytest.raises(type(e)):
            nf(*[_nee(a) if isinstance(a, torch.Tensor) else a for a in args],
               **{k: _nee(v) if isinstance(v, torch.Tensor) else v for k, v in kw.items()})
        return
    n = nf(*[_nee(a) if isinstance(a, torch.Tensor) else a for a in args],
           **{k: _nee(v) if isinstance(v, torch.Tensor) else v for k, v in kw.items()})
    assert n.dtype.name == str(r.dtype).split(".")[-1]
    assert tuple(n.shape) == tuple(r.shape)
    np.testing.assert_allclose(_np(n).astype(np.float64), _np(r).astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("idt,wdt", _WDT, ids=str)
def test_loss_weight_dtype(idt, wdt, reduction):
    F, TF = nee.nn.functional, torch.nn.functional
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, generator=g).to(getattr(torch, idt))
    y = torch.tensor([0, 1, 3])
    p = torch.randn(3, 4, generator=g).softmax(1).to(getattr(torch, idt))
    w = (torch.ones(4) * 1.3).to(getattr(torch, wdt))
    tol = 3e-3 if "16" in idt else 1e-5
    _run_both(TF.nll_loss, F.nll_loss, x, y, weight=w, reduction=reduction, tol=tol)
    for ls in (0.0, 0.1):
        _run_both(TF.cross_entropy, F.cross_entropy, x, y, weight=w, reduction=reduction, label_smoothing=ls, tol=tol)
        _run_both(TF.cross_entropy, F.cross_entropy, x, p, weight=w, reduction=reduction, label_smoothing=ls, tol=tol)
        _run_both(TF.cross_entropy, F.cross_entropy, x.reshape(1, 3, 4, 1), p.reshape(1, 3, 4, 1),
                  weight=w[:3], reduction=reduction, label_smoothing=ls, tol=tol)


# ---------------------------------------------------------------- clamp_min / clamp_max scalar overflow
@pytest.mark.parametrize("name,dt,bound", [
    ("clamp_min", "float16", 1e20), ("clamp_max", "float16", -1e20), ("clamp_min", "int32", 2 ** 40),
    ("clamp_max", "int8", -129), ("clamp_min", "uint8", 300), ("clamp_min", "int64", 2 ** 63),
    ("clamp_min", "float32", 1e39), ("clamp_min_", "float16", 1e20), ("clamp_max_", "int32", 2 ** 40),
    # in range / promoting: no error
    ("clamp_min", "uint8", -5), ("clamp_min", "int8", 2500.0), ("clamp_min", "float16", float("inf")),
    ("clamp_min", "float16", 65504.0), ("clamp_max", "bool", 2)])
def test_clamp_min_max_scalar_range(name, dt, bound):
    t = torch.tensor([1, 2, 3]).to(getattr(torch, dt))
    n = nee.tensor([1, 2, 3]).to(getattr(nee, dt))
    try:
        r = getattr(t, name)(bound)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            getattr(n, name)(bound)
        return
    out = getattr(n, name)(bound)
    assert out.dtype.name == str(r.dtype).split(".")[-1]
    assert out.tolist() == r.tolist()


# ---------------------------------------------------------------- in-place / out= arguments sharing memory
_OVERLAP = {
    "index_add_": lambda y, m: y.index_add_(0, m.tensor([0, 1]), y[2:4]),
    "index_add_same": lambda y, m: y[:2].index_add_(0, m.tensor([0, 1]), y[:2]),
    "index_add_clone": lambda y, m: y.index_add_(0, m.tensor([0, 1]), y[2:4].clone()),
    "index_copy_": lambda y, m: y.index_copy_(0, m.tensor([0, 1]), y[2:4]),
    "index_reduce_": lambda y, m: y.index_reduce_(0, m.tensor([0, 1]), y[2:4], "prod"),
    "scatter_": lambda y, m: y.scatter_(0, m.zeros(2, 4, dtype=m.int64), y[2:4]),
    "scatter_value": lambda y, m: y.scatter_(0, m.zeros(2, 4, dtype=m.int64), 2.0),
    "scatter_add_": lambda y, m: y.scatter_add_(0, m.zeros(2, 4, dtype=m.int64), y[2:4]),
    "scatter_reduce_": lambda y, m: y.scatter_reduce_(0, m.zeros(2, 4, dtype=m.int64), y[2:4], "sum"),
    "put_": lambda y, m: y.put_(m.tensor([0, 1]), y.view(-1)[5:7]),
    "gather_out": lambda y, m: m.gather(y, 0, m.zeros(2, 4, dtype=m.int64), out=y[2:4]),
    "gather_out_fresh": lambda y, m: m.gather(y, 0, m.zeros(2, 4, dtype=m.int64), out=m.empty(2, 4)),
    "index_select_out": lambda y, m: m.index_select(y, 0, m.tensor([0, 1]), out=y[2:4]),
    "cat_out": lambda y, m: m.cat([y[:2], y[2:4]], 0, out=y[2:]),
    "cat_out_same": lambda y, m: m.cat([y[:3]], 0, out=y[:3]),
    "cat_out_disjoint": lambda y, m: m.cat([y[:1], y[1:2]], 0, out=y[4:]),
    "stack_out_disjoint": lambda y, m: m.stack([y[0], y[1]], 0, out=y[2:4]),
    "stack_out": lambda y, m: m.stack([y[0], y[3]], 0, out=y[2:4]),
    "vstack_out": lambda y, m: m.vstack([y[0], y[1]], out=y[1:3]),
}


@pytest.mark.parametrize("case", sorted(_OVERLAP))
def test_inplace_and_out_overlap(case):
    f = _OVERLAP[case]
    x = torch.randn(6, 4)
    y, n = x.clone(), nee.tensor(x.numpy())
    try:
        f(y, torch)
    except RuntimeError as e:
        assert "unsupported operation" in str(e)
        with pytest.raises(RuntimeError, match="unsupported operation"):
            f(n, nee)
        return
    f(n, nee)
    np.testing.assert_allclose(n.numpy(), y.numpy(), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- masked_fill_ / index_fill_ on expanded views
_EXPANDED = {
    "mf_rows": lambda y, m: y[:1].expand(3, 4).masked_fill_(y[:3] > 0, 1.0),
    "mf_cols": lambda y, m: y[:, :1].expand(6, 3).masked_fill_(y[:, :3] > 0, -2.0),
    "mf_nan_value": lambda y, m: y[:1].expand(3, 4).masked_fill_(y[1:4] < 0, float("nan")),
    "mf_0d_mask": lambda y, m: y[:1].expand(3, 4).masked_fill_(m.tensor(True), 3.0),
    "mf_int": lambda y, m: y.nan_to_num().to(m.int64)[:1].expand(3, 4).masked_fill_(y[:3] > 0, 7),
    "if_dim0": lambda y, m: y[:1].expand(3, 4).index_fill_(0, m.tensor([1]), 5.0),
    "if_dim1": lambda y, m: y[:1].expand(3, 4).index_fill_(1, m.tensor([1, 3]), 5.0),
}


@pytest.mark.parametrize("case", sorted(_EXPANDED))
def test_fill_on_expanded_writes_selected_only(case):
    # torch (deprecated, with a warning) writes the selected elements only: an element aliased by a selected and
    # an unselected position takes the value (writing the whole result let the last alias win)
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(3)) * 3
    x[0, 2] = float("nan")
    y, n = x.clone(), nee.tensor(x.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = _EXPANDED[case](y, torch)
        b = _EXPANDED[case](n, nee)
    np.testing.assert_array_equal(n.numpy(), y.numpy())
    np.testing.assert_array_equal(b.numpy(), a.numpy())
