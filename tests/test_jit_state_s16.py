"""In-place writes the caller sees, under ``nee.jit``: inputs written in place and captured module state
(BatchNorm's running statistics in training mode) get their final values after every call, as eagerly; a
module's Python-side state (train()/eval(), scalar attributes, reassigned parameters) re-specializes; the same
tensor passed twice is two inputs.

Before: in-place writes into inputs and captured tensors were refused (a jitted training-mode BatchNorm raised),
model.eval() after the first call kept the training-mode graph (dropout still on: a silent wrong answer), and
f(x, x, y) computed with y in x's second place."""
import copy

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn as nn
import neetorch.nn.functional as F
from neetorch.trace.tracer import TraceError, run_graph, trace


def _np(t):
    return t.numpy()


@pytest.mark.parametrize("how", ["add_", "mul_chain", "copy_traced", "relu_inplace", "out", "sub_then_read"])
def test_input_written_in_place_like_eager(how):
    def f(x, y):
        if how == "add_":
            x.add_(y)
        elif how == "mul_chain":
            x.mul_(2).add_(1)
        elif how == "copy_traced":
            x.copy_(y * 3)
        elif how == "relu_inplace":
            F.relu(x, inplace=True)
        elif how == "out":
            nee.add(x, y, out=x)
        else:
            x.sub_(y)
            return x * y + 1
        return x
    jf = nee.jit(f)
    rng = np.random.default_rng(0)
    xe, xj = (nee.tensor(rng.standard_normal((3, 5)).astype(np.float32)) for _ in range(2))
    xj.copy_(xe)
    y = nee.tensor(rng.standard_normal((3, 5)).astype(np.float32))
    for _ in range(3):
        re, rj = f(xe, y), jf(xj, y)
        np.testing.assert_allclose(_np(rj), _np(re), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(_np(xj), _np(xe), rtol=1e-6, atol=1e-6)
        if how != "sub_then_read":
            assert rj is xj        # eager returns the written tensor itself
    assert jf.stats["traces"] == 1


def test_eager_trace_does_not_write_the_inputs():
    x = nee.zeros(3)
    g = trace(lambda x: x.add_(1) * 2, x, meta=False)
    np.testing.assert_array_equal(_np(x), 0)
    assert "write back" in str(g)
    out = run_graph(g, x)
    np.testing.assert_array_equal(_np(x), 1)
    np.testing.assert_array_equal(_np(out), 2)


@pytest.mark.parametrize("kind", ["bn1d", "bn2d", "instance_tracked"])
def test_training_mode_batch_norm_updates_its_running_stats(kind):
    nee.manual_seed(0)
    if kind == "bn1d":
        m = nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.ReLU())
        shape = (7, 6)
    elif kind == "bn2d":
        m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, momentum=0.3), nn.ReLU())
        shape = (2, 3, 6, 6)
    else:
        m = nn.Sequential(nn.Conv2d(3, 4, 1), nn.InstanceNorm2d(4, track_running_stats=True, affine=True))
        shape = (2, 3, 5, 5)
    ref = copy.deepcopy(m)
    jm = nee.jit(m)
    for step in range(3):
        x = nee.randn(*shape)
        np.testing.assert_allclose(_np(jm(x)), _np(ref(x)), rtol=1e-5, atol=1e-5)
        for (name, a), (_, b) in zip(m.named_buffers(), ref.named_buffers()):
            np.testing.assert_allclose(_np(a), _np(b), rtol=1e-5, atol=1e-6, err_msg=name)
    assert jm.stats["traces"] == 1
    g = jm.graph(nee.randn(*shape))
    assert len(g.state) >= 2 and "write back" in str(g)
    m.eval()
    ref.eval()
    x = nee.randn(*shape)
    np.testing.assert_allclose(_np(jm(x)), _np(ref(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls, shape", [(nn.BatchNorm1d, (6, 3)), (nn.BatchNorm2d, (4, 3, 5, 5))])
def test_cumulative_momentum_follows_eager(cls, shape):
    """``momentum=None`` (the cumulative average, factor 1 / num_batches_tracked) under jit: the factor comes from
    the buffer as a tensor (it was read into Python: a TraceError before session 17)."""
    nee.manual_seed(0)
    m, ref = cls(3, momentum=None), cls(3, momentum=None)
    jm = nee.jit(m)
    for i in range(4):
        x = nee.randn(*shape) * (i + 1) + i
        np.testing.assert_allclose(_np(jm(x)), _np(ref(x)), rtol=1e-5, atol=1e-5)
        for a, b in ((m.running_mean, ref.running_mean), (m.running_var, ref.running_var)):
            np.testing.assert_allclose(_np(a), _np(b), rtol=1e-5, atol=1e-6)
        assert int(m.num_batches_tracked) == int(ref.num_batches_tracked) == i + 1


def test_mode_and_attribute_changes_respecialize():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    jm = nee.jit(m)
    x = nee.randn(64, 4)
    jm(x)
    m.eval()
    np.testing.assert_array_equal(_np(jm(x)), _np(m(x)))
    m.train()
    assert (_np(jm(x)) == 0).mean() > 0.2

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.scale = 2.0

        def forward(self, x):
            return self.lin(x) * self.scale
    s = Scaled()
    js = nee.jit(s)
    np.testing.assert_allclose(_np(js(x)), _np(s(x)), rtol=1e-6)
    s.scale = 3.0
    np.testing.assert_allclose(_np(js(x)), _np(s(x)), rtol=1e-6)
    s.lin.weight = nn.Parameter(nee.ones(4, 4))
    np.testing.assert_allclose(_np(js(x)), _np(s(x)), rtol=1e-6)
    n = js.stats["traces"]
    for _ in range(3):
        js(x)
    assert js.stats["traces"] == n      # nothing changed: no re-trace


def test_same_tensor_passed_twice():
    f = nee.jit(lambda a, b, c: a * 1 + b * 10 + c * 100)
    x, y = nee.ones(3), nee.full((3,), 2.0)
    np.testing.assert_array_equal(_np(f(x, x, y)), 211)
    np.testing.assert_array_equal(_np(f(x, y, y)), 221)
    np.testing.assert_array_equal(_np(f(y, x, x)), 112)


def test_still_refused():
    # a view of a buffer the function made, held while the buffer is written: the view is of a constant (not
    # followed); writes through views of traced values are functionalized (tests/test_jit_views_s17.py)
    with pytest.raises(TraceError, match="views were taken of"):
        nee.jit(lambda x: (lambda b, v: (b.__setitem__(0, x[0]), v * 1)[1])(*(lambda b: (b, b[0]))(nee.zeros(4, 6))))(
            nee.ones(4, 6))


def test_setitem_and_updates_of_buffers_the_function_made():
    def cat_by_hand(x):
        o = nee.zeros(x.shape[0], 2 * x.shape[1])
        o[:, :x.shape[1]] = x
        o[:, x.shape[1]:] = x * 2
        b = nee.ones(x.shape)
        b.add_(x)
        return o.sum(1) + b.sum(1) + nee.empty(x.shape).copy_(x).sum(1)

    def masks(x):
        y = x * 1
        y[y > 0] = 0.0
        y[nee.tensor([0, 2])] = x[1]
        return y
    for f in (cat_by_hand, masks):
        jf = nee.jit(f)
        for seed in range(3):
            nee.manual_seed(seed)
            x = nee.randn(4, 6)
            np.testing.assert_allclose(_np(jf(x)), _np(f(x)), rtol=1e-5, atol=1e-6)
        assert jf.stats["traces"] == 1


def test_setitem_into_a_module_buffer_is_written_back():
    class Cache(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("k", nee.zeros(8, 4))

        def forward(self, x, i: int):
            self.k[i] = x
            return self.k.sum(0)
    c, ref = Cache(), Cache()
    jc = nee.jit(c)
    for i in range(4):
        v = nee.randn(4)
        np.testing.assert_allclose(_np(jc(v, i)), _np(ref(v, i)), rtol=1e-6)
        np.testing.assert_array_equal(_np(c.k), _np(ref.k))


def test_constant_leaves_in_the_result():
    """Python scalars, strings, sizes, dtypes and None returned beside tensors (torch.compile returns them too);
    a leaf computed from a dynamic size specializes per size (never a stale size from the bucket's trace)."""
    f = nee.jit(lambda x: (x * 2, x.shape[0], x.shape, "tag", x.dtype, None, {"n": x.ndim}), dynamic={0: 0})
    for n in (3, 5, 6, 7):
        r = f(nee.ones(n, 2))
        assert r[1:] == (n, (n, 2), "tag", nee.float32, None, {"n": 2})
        np.testing.assert_array_equal(_np(r[0]), 2)
    g = nee.jit(lambda x: [x + 1, 3.5])
    r = g(nee.ones(2))
    assert isinstance(r, list) and r[1] == 3.5
    with pytest.raises(TraceError, match="at least one tensor"):
        nee.jit(lambda x: (x, object()))(nee.ones(2))


@pytest.mark.parametrize("dev", ["opencl", "simnpu"])
def test_setitem_and_dropout_nodes_on_other_devices(dev):
    if not any(d.type == dev and d.available for d in nee.devices()):
        pytest.skip(f"no {dev} device")

    def f(x):
        y = x * 1
        y[:, 0] = 5.0
        y[1] = x[2] * 2
        return F.dropout(y, 0.5, training=True) + 1
    x = nee.randn(4, 6)
    jf = nee.jit(f)
    nee.manual_seed(3)
    e = _np(f(x))
    nee.manual_seed(3)
    r = jf(x.to(dev))
    assert r.device.type == dev
    np.testing.assert_allclose(r.cpu().numpy(), e, rtol=1e-5, atol=1e-6)
    g = jf.graph(x.to(dev))
    assert not [fb for fb in g.placement.fallbacks if fb.op in ("setitem", "random")]


def test_an_update_under_a_live_view_is_seen_through_the_view():
    """``v = t[:, 2]; t.add_(1); return v``: eager's view sees the update (the graph's view was of the old value,
    a silent wrong answer in session 15, then refused; now the view is taken again from the updated base).  An
    update of a basic-indexing view is written through to its base (``y[:, 0] += y[:, 1]``: a setitem node)."""
    def stale(x):
        t = x * 1.5
        v = t[:, 2]
        t.add_(1)
        return v * 1
    x = nee.randn(4, 5)
    np.testing.assert_allclose(_np(nee.jit(stale)(x)), _np(stale(x)), rtol=1e-6)

    def shifted(x):
        y = x * 1
        y[1:] = y[1:] * x[:-1]
        y[:, 0] += y[:, 1]
        y[0].mul_(2)
        y[3][1] = -5.0
        y[:, 4].copy_(x[:, 0])
        return y
    jf = nee.jit(shifted)
    for seed in range(3):
        nee.manual_seed(seed)
        x = nee.randn(4, 5)
        np.testing.assert_allclose(_np(jf(x)), _np(shifted(x)), rtol=1e-5, atol=1e-6)


def test_input_written_through_a_view():
    def f(x):
        x[:, 0] += 1
        x[1].mul_(3)
        return x.sum(0)
    jf = nee.jit(f)
    for seed in range(2):
        nee.manual_seed(seed)
        x = nee.randn(4, 5)
        xe, xj = x.clone(), x.clone()
        np.testing.assert_allclose(_np(jf(xj)), _np(f(xe)), rtol=1e-6)
        np.testing.assert_allclose(_np(xj), _np(xe), rtol=1e-6)
    x = nee.zeros(4, 5)
    trace(f, x, meta=False)             # an eager trace restores what it wrote
    np.testing.assert_array_equal(_np(x), 0)


def test_augmented_assignment_to_a_view_is_one_setitem():
    def f(x):
        y = x * 2
        y[:, 0] += 1
        return y
    jf = nee.jit(f)
    x = nee.randn(3, 4)
    np.testing.assert_allclose(_np(jf(x)), _np(f(x)), rtol=1e-6)
    g = jf.graph(x)
    assert sum(1 for n in g.nodes if n.name == "setitem") == 1, str(g)
