"""Session 25: what a compiled function did not see that eager does (scripts/jit_open_aliasing.py, note 24's open
item 2), each against the eager function on its own copies of the tensors:

* ``p.data = new`` for a captured tensor the graph reads through a view (``nn.Linear``'s ``W.t()``, ``W[0]``):
  the view held the old storage; the function is now traced again (``passes.view_guards``), once per change;
* inputs that alias what the call writes in place (the same tensor twice, overlapping views, an input that is a
  view of captured state the function writes, an input that a constant views): the call runs eagerly
  (``stats["aliased_eager_calls"]``); calls without aliasing take the compiled graph.
"""
import numpy as np
import pytest

import neetorch as nee
import neetorch.nn as nn


def _eq(a, b):
    np.testing.assert_allclose(np.asarray(a.numpy()), np.asarray(b.numpy()), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows", [1, 5])
def test_linear_weight_data_replaced_is_seen(rows):
    nee.manual_seed(0)
    m = nn.Linear(4, 3, bias=False)
    jm = nee.jit(m)
    x = nee.randn(rows, 4)
    _eq(jm(x), m(x))
    traces = jm.stats["traces"]
    m.weight.data = m.weight.data * 2
    _eq(jm(x), m(x))
    m.weight.data = nee.zeros(3, 4)
    _eq(jm(x), m(x))
    assert jm.stats["traces"] == traces + 2
    for _ in range(3):      # no change: no new trace
        _eq(jm(x), m(x))
    assert jm.stats["traces"] == traces + 2
    with nee.no_grad():     # an in-place update keeps the storage: read live, no new trace
        m.weight.mul_(3)
    _eq(jm(x), m(x))
    assert jm.stats["traces"] == traces + 2


def test_indexed_view_of_captured_tensor_follows_data_replacement():
    W = nee.ones(3, 4)
    f = lambda x: x * W[0]       # noqa: E731
    jf = nee.jit(f)
    x = nee.arange(4.0)
    _eq(jf(x), f(x))
    W.data = W.data * 5
    _eq(jf(x), f(x))
    W[0].fill_(-1.0)            # in place, through a view: read live
    _eq(jf(x), f(x))


def test_frozen_function_keeps_its_snapshot():
    W = nee.ones(3, 4)
    jf = nee.jit(lambda x: x * W[0], freeze=True)
    x = nee.arange(4.0)
    before = jf(x).numpy().copy()
    W.data = W.data * 5
    np.testing.assert_array_equal(jf(x).numpy(), before)


def _pair(fn, make):
    """fn run eagerly and jitted on separate copies of the tensors ``make()`` returns; both results and the
    tensors after."""
    ea, ja = make(), make()
    jf = nee.jit(fn)
    re, rj = fn(*ea), jf(*ja)
    return jf, (re, rj), (ea, ja)


def test_same_tensor_twice_with_an_inplace_write():
    def f(a, b):
        a.add_(1)
        return a + b
    t, te = nee.ones(3), nee.ones(3)
    jf = nee.jit(f)
    _eq(jf(t, t), f(te, te))
    _eq(t, te)
    assert jf.stats["aliased_eager_calls"] == 1
    u, v = nee.ones(3), nee.ones(3)       # distinct tensors: the compiled graph
    ue, ve = nee.ones(3), nee.ones(3)
    _eq(jf(u, v), f(ue, ve))
    _eq(u, ue)
    assert jf.stats["aliased_eager_calls"] == 1


def test_overlapping_views_with_an_inplace_write():
    def g(a, b):
        a.mul_(2)
        return b * 1
    base, basee = nee.arange(6.0), nee.arange(6.0)
    jg = nee.jit(g)
    _eq(jg(base[:4], base[2:]), g(basee[:4], basee[2:]))
    _eq(base, basee)
    # disjoint views of one tensor: no aliasing, the graph runs
    base2, base2e = nee.arange(6.0), nee.arange(6.0)
    jg2 = nee.jit(g)
    _eq(jg2(base2[:3], base2[3:]), g(base2e[:3], base2e[3:]))
    _eq(base2, base2e)
    assert jg2.stats.get("aliased_eager_calls", 0) == 0


def test_input_viewing_captured_state_the_function_writes():
    C, Ce = nee.zeros(3), nee.zeros(3)

    def h(x):
        C.add_(1)
        return x * 1

    def he(x):
        Ce.add_(1)
        return x * 1
    jh = nee.jit(h)
    for _ in range(3):
        _eq(jh(C[:2]), he(Ce[:2]))
        _eq(C, Ce)
    # an input that is not a view of C: the graph, C still written
    x = nee.ones(2)
    _eq(jh(x), he(x))
    _eq(C, Ce)


def test_written_input_viewed_by_a_constant():
    W, We = nee.ones(4), nee.ones(4)

    def k(x):
        x.mul_(3)
        return W + 0

    def ke(x):
        x.mul_(3)
        return We + 0
    jk = nee.jit(k)
    _eq(jk(nee.ones(2)), ke(nee.ones(2)))          # traced with an unrelated input
    _eq(jk(W[:2]), ke(We[:2]))                     # the input is a view of the constant W
    _eq(W, We)


def test_functions_without_inplace_writes_never_check():
    jf = nee.jit(lambda a, b: a * 2 + b)
    t = nee.ones(3)
    _eq(jf(t, t), t * 2 + t)
    assert jf.stats.get("aliased_eager_calls", 0) == 0


def test_captured_state_aliasing_other_state():
    """Two captured tensors over one memory, one written in place: the other's read after the write sees it
    (worked out once per set of storages; a storage replaced by ``.data =`` is looked at again)."""
    def make():
        base = nee.arange(6.0)
        return base, base[:4], base[2:]

    (_, a, b), (_, ae, be) = make(), make()

    def f(x):
        a.add_(1)
        return b * x

    def fe(x):
        ae.add_(1)
        return be * x
    jf = nee.jit(f)
    x = nee.full((4,), 2.0)
    for _ in range(2):
        _eq(jf(x), fe(x))
        _eq(a, ae)
    a.data = nee.zeros(4)           # no longer aliased: the compiled graph again
    ae.data = nee.zeros(4)
    n = jf.stats.get("aliased_eager_calls", 0)
    for _ in range(2):
        _eq(jf(x), fe(x))
        _eq(a, ae)
    assert jf.stats.get("aliased_eager_calls", 0) == n


@pytest.mark.parametrize("freeze", [False, True])
def test_views_taken_while_tracing_are_not_kept(freeze):
    """The tracer's record of views of captured tensors (how to take them again) is read while the function is
    compiled and not kept: an intermediate view (``W[0]`` of ``W[0].t()``-like chains) dies with the trace.  (Kept
    until exit with the compiled graph, such views were part of a segfault in the interpreter's final collection
    after an LSTM model's session ran two shape buckets.)"""
    import gc
    import weakref
    W = nee.randn(3, 4, 5)
    refs = []

    def f(x):
        v = W[1]
        refs.append(weakref.ref(v))
        return x @ v.t()
    jf = nee.jit(f, freeze=freeze)
    x = nee.randn(2, 5)
    _eq(jf(x), x @ W[1].t())
    gc.collect()
    assert refs and refs[0]() is None


def test_reshape_of_an_input_on_the_fast_path():
    """A reshape of a caller's input is made from the numpy array on the fast path (not the view function), in a
    shape-polymorphic executable too: traced and other sizes alternating, a non-contiguous input, and writes
    through the result reaching the input as eager's view does."""
    def f(x):
        y = x.reshape(-1, 6)
        return y * 2, y.sum(0)
    jf = nee.jit(f, dynamic={0: 0}, buckets=[4, 8])
    for n in (4, 3, 4, 2, 4):
        x = nee.randn(n, 2, 3)
        for a, b in zip(jf(x), f(x)):
            _eq(a, b)
    xt = nee.randn(3, 2, 4).permute(2, 1, 0)      # (4, 2, 3), not contiguous: the view function's copy
    for a, b in zip(jf(xt), f(xt)):
        _eq(a, b)
    g = nee.jit(lambda x: x.reshape(6).add_(1))
    x, xe = nee.zeros(2, 3), nee.zeros(2, 3)
    g(x)
    xe.reshape(6).add_(1)
    _eq(x, xe)


def test_written_input_viewing_a_replaced_constant():
    """The aliasing check's per-graph part follows a captured tensor's storage replaced by ``.data =``."""
    W, We = nee.ones(4), nee.ones(4)

    def k(x):
        x.mul_(3)
        return x.sum() + W

    def ke(x):
        x.mul_(3)
        return x.sum() + We
    jk = nee.jit(k)
    _eq(jk(nee.ones(2)), ke(nee.ones(2)))
    W.data = nee.full((4,), 2.0)
    We.data = nee.full((4,), 2.0)
    _eq(jk(W[:2]), ke(We[:2]))
    _eq(W, We)
