"""``nee.compile``: torch.compile's API over nee.jit (neetorch/jit/compile.py) — functions, decorators, modules
(OptimizedModule, ``Module.compile()``), automatic / forced / no dynamic dims, graph breaks under fullgraph=False,
and torch's argument checks."""
import warnings

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn as nn
from neetorch.trace.tracer import TraceError


def _np(t):
    return t.numpy()


def test_function_and_decorator_forms_match_eager():
    def fn(x, y):
        return (x * y + 1).relu().sum(-1)
    c1 = nee.compile(fn)
    c2 = nee.compile(mode="reduce-overhead")(fn)
    c3 = nee.compile(backend=lambda gm, inputs: gm, options={"max_autotune": True})(fn)
    x, y = nee.randn(4, 7), nee.randn(7)
    for c in (c1, c2, c3):
        np.testing.assert_allclose(_np(c(x, y)), _np(fn(x, y)), rtol=1e-6, atol=1e-6)
    assert c1.stats["traces"] >= 1


def test_automatic_dynamic_dims_after_a_second_size():
    c = nee.compile(lambda x: (x * 2).softmax(-1))
    for n in (8, 8, 12, 20, 27, 30):
        x = nee.randn(3, n)
        np.testing.assert_allclose(_np(c(x)), _np((x * 2).softmax(-1)), rtol=1e-5, atol=1e-6)
    assert c.dynamic == {0: (1,)}                   # dim 0 never changed: static; dim 1 dynamic
    assert c.stats["bucket_specializations"] >= 2   # 12, 20 / 27 / 30 served by buckets


def test_dynamic_true_and_false():
    d = nee.compile(lambda a, b: a @ b, dynamic=True)
    s = nee.compile(lambda a, b: a @ b, dynamic=False)
    for m, k, n in ((3, 4, 5), (4, 4, 6), (7, 4, 7)):
        a, b = nee.randn(m, k), nee.randn(k, n)
        np.testing.assert_allclose(_np(d(a, b)), _np(a @ b), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(_np(s(a, b)), _np(a @ b), rtol=1e-5, atol=1e-5)
    assert d.stats["bucket_specializations"] >= 1 and s.stats["bucket_specializations"] == 0
    assert s.stats["specializations"] == 3


def test_graph_break_runs_eagerly_with_a_warning_unless_fullgraph():
    def fn(x):
        return x * float(x.sum())       # reads a value into Python: a graph break
    c = nee.compile(fn)
    x = nee.arange(3.0)
    with pytest.warns(RuntimeWarning, match="graph break"):
        r = c(x)
    np.testing.assert_allclose(_np(r), _np(fn(x)))
    assert c.graph_break is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # warned once
        np.testing.assert_allclose(_np(c(x + 1)), _np(fn(x + 1)))
    with pytest.raises(TraceError, match="reads a traced tensor"):
        nee.compile(fn, fullgraph=True)(x)


def test_compiled_module_is_the_module():
    nee.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 2))
    om = nee.compile(m)
    assert isinstance(om, nn.Module) and om._orig_mod is m
    assert list(om.state_dict()) == ["_orig_mod." + k for k in m.state_dict()]
    assert [p is q for p, q in zip(om.parameters(), m.parameters())] == [True] * 4
    om.eval()                                   # the module's mode: the compiled call re-specializes
    assert not m.training
    x = nee.randn(5, 4)
    np.testing.assert_allclose(_np(om(x)), _np(m(x)), rtol=1e-6, atol=1e-6)
    lin = nee.compile(nn.Linear(3, 2))
    assert tuple(lin.weight.shape) == (2, 3) and lin.in_features == 3
    lin.scale_note = 5
    assert lin._orig_mod.scale_note == 5


def test_module_compile_in_place_keeps_hooks_and_follows_weight_updates():
    m = nn.Linear(3, 3)
    seen = []
    m.register_forward_hook(lambda mod, args, out: seen.append(tuple(out.shape)))
    x = nee.randn(2, 3)
    want = m(x)
    m.compile()
    np.testing.assert_allclose(_np(m(x)), _np(want), rtol=1e-6, atol=1e-6)
    assert seen[-1] == (2, 3)
    with nee.no_grad():
        m.weight.mul_(2)
    np.testing.assert_allclose(_np(m(x)), _np(x @ m.weight.t() + m.bias), rtol=1e-5, atol=1e-6)
    assert m.compile(disable=True) is None


def test_torch_argument_checks():
    with pytest.raises(RuntimeError, match="Unrecognized mode"):
        nee.compile(lambda x: x, mode="fastest")
    with pytest.raises(RuntimeError, match="Either mode or options"):
        nee.compile(lambda x: x, mode="default", options={})
    f = lambda x: x   # noqa: E731
    assert nee.compile(f, disable=True) is f
    with pytest.raises(ValueError, match="dynamic"):
        nee.jit(f, dynamic="sometimes")


def test_compiled_modules_deepcopy_and_pickle():
    import copy
    import pickle
    x = nee.randn(2, 3)
    m = nn.Linear(3, 3)
    m.compile()
    want = _np(m(x))
    for m2 in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert m2.weight is not m.weight and "_compiled_call_impl" in m2.__dict__   # compiled anew
        np.testing.assert_allclose(_np(m2(x)), want, rtol=1e-6)
    om = nee.compile(nn.Linear(3, 3), dynamic=False)
    om2 = copy.deepcopy(om)
    assert om2._orig_mod is not om._orig_mod and om2._compiled.fn is om2._orig_mod
    np.testing.assert_allclose(_np(om2(x)), _np(om(x)), rtol=1e-6)
