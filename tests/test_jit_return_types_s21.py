"""A jitted function returns what the eager one does: ops' named results (``max(dim)``'s (values, indices), ``sort``,
``topk``, ``median``, ``aminmax``, ``linalg.eigh`` ...; torch.return_types under torch.compile) and a user's namedtuple
keep their type and field names under ``nee.jit``, on the tracing call and on the cached ones; plain tuples stay
plain (session 21: a compiled graph's flat outputs were returned as a plain tuple)."""
import collections

import numpy as np
import pytest

import neetorch as nee

RNG = np.random.default_rng(21)

CASES = {
    "max": lambda t: t.max(dim=1),
    "min": lambda t: t.min(dim=0, keepdim=True),
    "median": lambda t: t.median(dim=1),
    "nanmedian": lambda t: t.nanmedian(dim=1),
    "mode": lambda t: t.mode(dim=1),
    "kthvalue": lambda t: t.kthvalue(2, dim=1),
    "sort": lambda t: t.sort(dim=1, descending=True),
    "topk": lambda t: t.topk(3, dim=1),
    "aminmax": lambda t: nee.aminmax(t, dim=1),
    "cummax": lambda t: t.cummax(dim=1),
    "eigh": lambda t: nee.linalg.eigh(t[:, :4] @ t[:, :4].T + nee.eye(t.shape[0])),
}


def _check_same(got, want):
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, tuple):
        assert getattr(type(got), "_fields", None) == getattr(type(want), "_fields", None)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _check_same(g, w)
    else:
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_named_results_kept(name):
    fn = CASES[name]
    x = nee.tensor(RNG.standard_normal((5, 7)).astype(np.float32))
    want = fn(x)
    assert hasattr(type(want), "_fields")
    f = nee.jit(fn)
    for _ in range(3):          # the tracing call, then the cached executable's
        got = f(x)
        _check_same(got, want)
        assert tuple(got._fields) == tuple(want._fields)
        assert got.values is got[0] if "values" in got._fields else True


def test_nested_and_user_namedtuple():
    Pair = collections.namedtuple("Pair", "total parts")
    x = nee.tensor(RNG.standard_normal((4, 6)).astype(np.float32))

    def fn(t):
        return Pair(t.sum(), (t.max(dim=1), [t * 2, None]))
    f = nee.jit(fn)
    for _ in range(2):
        got, want = f(x), fn(x)
        assert type(got) is Pair and type(got.parts) is tuple
        _check_same(got.total, want.total)
        _check_same(got.parts[0], want.parts[0])
        _check_same(got.parts[1][0], want.parts[1][0])
        assert got.parts[1][1] is None


def test_plain_tuples_stay_plain():
    x = nee.tensor(RNG.standard_normal((3, 3)).astype(np.float32))
    f = nee.jit(lambda t: (t + 1, t * 2))
    for _ in range(2):
        r = f(x)
        assert type(r) is tuple and len(r) == 2
        np.testing.assert_allclose(r[1].numpy(), x.numpy() * 2)
    g = nee.jit(lambda t: t.max(dim=1).values)      # one tensor: returned as it is
    assert isinstance(g(x), nee.Tensor) and isinstance(g(x), nee.Tensor)
