"""torch's numpy-style keyword aliases (``axis`` for ``dim``, ``keepdims`` for ``keepdim``): accepted by the
functions and methods that take ``dim`` / ``keepdim``, with torch's values, in eager and traced code."""
import numpy as np
import pytest

import neetorch as nee

torch = pytest.importorskip("torch")

X = np.random.default_rng(11).standard_normal((3, 4, 5)).astype(np.float32)

REDUCTIONS = ["sum", "mean", "amax", "amin", "prod", "std", "var", "logsumexp", "nansum", "any", "all",
              "argmax", "argmin"]


def _np(r):
    if isinstance(r, tuple):
        return tuple(_np(v) for v in r)
    return r.numpy() if hasattr(r, "numpy") else r


def _same(a, b):
    a, b = _np(a), _np(b)
    if isinstance(a, tuple):
        assert len(a) == len(b)
        for u, v in zip(a, b):
            _same(u, v)
        return
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", REDUCTIONS + ["max", "min", "median"])
@pytest.mark.parametrize("form", ["function", "method"])
def test_reductions_take_axis_and_keepdims(name, form):
    def call(lib, x, **kw):
        return getattr(lib, name)(x, **kw) if form == "function" else getattr(x, name)(**kw)
    for kw in ({"axis": 1}, {"axis": -1, "keepdims": True}, {"dim": 0, "keepdims": True}):
        got = call(nee, nee.tensor(X), **kw)
        want = call(torch, torch.tensor(X), **kw)
        _same(got, want)


@pytest.mark.parametrize("name,args", [("cumsum", ()), ("softmax", ()), ("log_softmax", ()), ("squeeze", ()),
                                       ("unsqueeze", ()), ("sort", ()), ("topk", (2,)), ("argsort", ())])
def test_dim_ops_take_axis(name, args):
    x = X[:, :1] if name == "squeeze" else X
    got = getattr(nee, name)(nee.tensor(x), *args, axis=1)
    want = getattr(torch, name)(torch.tensor(x), *args, axis=1)
    _same(got, want)
    _same(getattr(nee.tensor(x), name)(*args, axis=1), want)


def test_alias_and_name_together_are_refused_like_torch():
    with pytest.raises(TypeError):
        torch.sum(torch.tensor(X), dim=0, axis=1)
    with pytest.raises(TypeError, match="multiple values for argument 'dim'"):
        nee.sum(nee.tensor(X), dim=0, axis=1)
    with pytest.raises(TypeError, match="multiple values for argument 'keepdim'"):
        nee.tensor(X).mean(0, keepdim=True, keepdims=False)


def test_aliases_under_jit():
    f = nee.jit(lambda x: (x.sum(axis=-1, keepdims=True) + x).softmax(axis=1))
    want = (torch.tensor(X).sum(axis=-1, keepdims=True) + torch.tensor(X)).softmax(axis=1)
    _same(f(nee.tensor(X)), want)
