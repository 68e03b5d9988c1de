"""Random samplers inside ``nee.jit`` functions draw anew at every call (trace.tracer.RandomOp).

Before: a sampler inside a traced function ran once at trace time and its sample became a constant, so a
jitted training-mode dropout applied the same mask at every call (a silent wrong answer)."""
import numpy as np
import pytest

import neetorch as nee
import neetorch.nn as nn
import neetorch.nn.functional as F
from neetorch.trace.tracer import RandomOp, TraceError


def _np(t):
    return t.cpu().numpy()


def _random_nodes(jf, *args):
    g = jf.graph(*args)
    return g, [n for n in g.nodes if isinstance(n.op, RandomOp)]


def test_dropout_fresh_mask_each_call_and_seeded_like_eager():
    x = nee.randn(64, 33)

    def f(x):
        h = F.dropout(x, 0.3, training=True)
        return F.dropout(h * 2, 0.5, training=True) + nee.randn(64, 33)

    jf = nee.jit(f)
    nee.manual_seed(7)
    e = [_np(f(x)) for _ in range(3)]
    nee.manual_seed(7)
    j = [_np(jf(x)) for _ in range(3)]
    for a, b in zip(e, j):
        np.testing.assert_array_equal(a, b)      # the same draws as the eager function, call for call
    assert not np.array_equal(j[0], j[1]) and not np.array_equal(j[1], j[2])
    g, rn = _random_nodes(jf, x)
    assert len(rn) == 3 and "random(" in str(g)
    g.validate()


def test_dropout_mask_values_and_rate():
    jf = nee.jit(lambda x: F.dropout(x, 0.25, training=True))
    nee.manual_seed(0)
    ys = np.stack([_np(jf(nee.ones(100, 100))) for _ in range(4)])
    vals = set(np.unique(ys).tolist())
    assert vals == {0.0, np.float32(1 / 0.75)}
    assert abs((ys == 0).mean() - 0.25) < 0.01
    assert len({y.tobytes() for y in ys}) == 4


def test_two_equal_draws_are_not_merged_nor_folded():
    # CSE must not merge two identical sampler calls; constant folding must not freeze a draw with no traced input
    jf = nee.jit(lambda x: (x + nee.rand(5, 4)) - nee.rand(5, 4))
    x = nee.zeros(5, 4)
    assert np.abs(_np(jf(x))).max() > 0
    jc = nee.jit(lambda x: x * 0 + nee.rand(3) * 2)
    a, b = _np(jc(nee.zeros(3))), _np(jc(nee.zeros(3)))
    assert not np.array_equal(a, b) and (a >= 0).all() and (a < 2).all()


def test_like_samplers_follow_a_dynamic_dim():
    jf = nee.jit(lambda x: F.dropout(x, 0.5, training=True) + nee.rand_like(x), dynamic={0: 0})
    for n in range(1, 65):
        y = _np(jf(nee.zeros(n, 8)))
        assert y.shape == (n, 8) and (y >= 0).all() and (y < 1).all()
    assert jf.stats["specializations"] <= 7       # one per power-of-two bucket, not one per size


def test_inplace_sampler_on_a_traced_value():
    def f(x):
        y = x * 0
        y.uniform_(-1, 1)
        return x + y
    jf = nee.jit(f)
    x = nee.randn(40, 3)
    a, b = _np(jf(x)), _np(jf(x))
    assert not np.array_equal(a, b)
    d = a - _np(x)
    assert (d >= -1 - 1e-6).all() and (d < 1 + 1e-6).all()


def test_bernoulli_of_a_traced_probability():
    jf = nee.jit(lambda p: nee.bernoulli(p))
    nee.manual_seed(1)
    p = nee.tensor(np.linspace(0, 1, 11, dtype=np.float32)).expand(4000, 11).contiguous()
    s = np.stack([_np(jf(p)) for _ in range(3)])
    np.testing.assert_allclose(s.mean(axis=(0, 1)), np.linspace(0, 1, 11), atol=0.02)
    assert not np.array_equal(s[0], s[1])


def test_other_samplers_draw_each_call():
    x = nee.randn(8, 16)
    jf = nee.jit(lambda x: x[nee.randperm(8)] + nee.randint(0, 5, (8, 16)) + nee.normal(x, 1.0))
    assert not np.array_equal(_np(jf(x)), _np(jf(x)))
    jm = nee.jit(lambda p: nee.multinomial(p, 5))
    p = nee.ones(6, 50)
    draws = [_np(jm(p)) for _ in range(3)]
    assert all(d.shape == (6, 5) and d.min() >= 0 and d.max() < 50 for d in draws)
    assert not np.array_equal(draws[0], draws[1])


def test_training_module_and_eval_module():
    m = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Dropout(0.5))
    x = nee.randn(4, 16)
    jm = nee.jit(m)
    assert not np.array_equal(_np(jm(x)), _np(jm(x)))
    m.eval()
    je = nee.jit(m)
    np.testing.assert_array_equal(_np(je(x)), _np(m(x)))
    assert not _random_nodes(je, x)[1]


def test_freeze_keeps_draws_fresh():
    jf = nee.jit(lambda x: F.dropout(x, 0.5, training=True), freeze=True)
    x = nee.ones(32, 32)
    assert not np.array_equal(_np(jf(x)), _np(jf(x)))


def test_inplace_sampler_into_an_input_is_written_back():
    jf = nee.jit(lambda x: x.normal_())
    x = nee.zeros(300)
    r = jf(x)
    first = _np(x).copy()
    assert r is x and first.std() > 0.5
    jf(x)
    assert not np.array_equal(first, _np(x))


def test_refused_samplers():
    jf = nee.jit(lambda x: x + nee.empty(3).normal_())      # a buffer the function made: drawn at every call
    assert not np.array_equal(_np(jf(nee.zeros(3))), _np(jf(nee.zeros(3))))
    with pytest.raises(TraceError, match="out="):
        nee.jit(lambda x: x + nee.normal(0.0, 1.0, (3,), out=nee.empty(3)))(nee.zeros(3))


def test_sampler_outside_a_trace_unchanged():
    nee.manual_seed(3)
    a = _np(nee.rand(4))
    nee.manual_seed(3)
    b = _np(nee.rand(4))
    np.testing.assert_array_equal(a, b)
    assert nee.rand.__name__ == "rand"
