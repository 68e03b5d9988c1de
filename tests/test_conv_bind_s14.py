"""A compiled graph's conv steps bound per layout (kernels/conv.py ``bind_into`` / ``bind_kernel``,
conv_direct.py ``bind``, conv_epilogue's ``bind``): after the first call the direct kernel's launch runs
without conv2d_into's dispatch.  Checked against torch on every call: new inputs, weights and biases written
in place between calls (default jit mode: not frozen), the thread count and the path switches changed between
calls, residuals, plain conv steps, and an ONNX session (frozen initializers) against onnxruntime."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv as K
from neetorch.devices.cpu.kernels import conv_direct as D

torch = pytest.importorskip("torch")
TF = torch.nn.functional
F = nee.nn.functional
RNG = np.random.default_rng(14)

pytestmark = pytest.mark.skipif(not D.available(), reason="no direct-conv kernels on this host (AVX-512F or AVX2+FMA)")


@pytest.fixture
def counts(monkeypatch):
    """{'bind': bindings made, 'bound': bound calls that ran, 'into': conv2d_into calls}."""
    c = {"bind": 0, "bound": 0, "into": 0}
    orig_bind, orig_into = D.bind, K.conv2d_into

    def bind(*a, **k):
        f = orig_bind(*a, **k)
        if f is None:
            return None
        c["bind"] += 1

        def g(*a):
            r = f(*a)
            c["bound"] += bool(r)
            return r
        return g

    def into(*a, **k):
        c["into"] += 1
        return orig_into(*a, **k)
    monkeypatch.setattr(D, "bind", bind)
    monkeypatch.setattr(K, "conv2d_into", into)
    monkeypatch.setattr(D, "MODE", ["1"])      # every conv the direct kernel can take
    return c


def _t(a):
    return torch.from_numpy(np.asarray(a, np.float64))


def _ref(x, w, b, s, p, g, shift=None, res=None, relu=False):
    y = TF.conv2d(_t(x), _t(w), None if b is None else _t(b), s, p, 1, g)
    if shift is not None:
        y = y + _t(shift)
    if res is not None:
        y = y + _t(res)
    return (TF.relu(y) if relu else y).numpy()


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * max(1.0, np.abs(want).max()))


# (x shape, w shape, stride, padding, groups): "pix" (3 -> 24 stem, 1x1 short K), "chan" (3x3), grouped 3x3,
# odd sizes
CASES = [
    ((1, 3, 23, 21), (24, 3, 3, 3), 2, 1, 1),
    ((1, 8, 9, 7), (24, 8, 1, 1), 1, 0, 1),
    ((1, 16, 11, 13), (40, 16, 3, 3), 1, 1, 1),
    ((1, 12, 9, 8), (18, 4, 3, 3), 1, 1, 3),
    ((2, 5, 7, 10), (9, 5, 3, 3), 1, 0, 1),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-s{c[2]}p{c[3]}g{c[4]}")
@pytest.mark.parametrize("chain", ["", "shift", "shift+relu", "res+relu", "shift+res+relu"])
def test_bound_calls_match_torch(counts, case, chain):
    xs, ws, s, p, g = case
    w = RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32)
    shift = RNG.standard_normal((ws[0], 1, 1)).astype(np.float32)
    wn, bn, sn = nee.from_numpy(w), nee.from_numpy(b), nee.from_numpy(shift)

    def f(xx, rr):
        y = F.conv2d(xx, wn, bn, s, p, 1, g)
        if "shift" in chain:
            y = y + sn
        if "res" in chain:
            y = y + rr
        return F.relu(y) if "relu" in chain else y
    jf = nee.jit(f)
    x0 = RNG.standard_normal(xs).astype(np.float32)
    r0 = None
    for i in range(4):
        x = x0 if i == 2 else RNG.standard_normal(xs).astype(np.float32)   # (new arrays, and a repeated one)
        out_shape = _ref(x, w, b, s, p, g).shape
        r = RNG.standard_normal(out_shape).astype(np.float32) if r0 is None or i != 3 else r0
        r0 = r
        got = jf(nee.from_numpy(x), nee.from_numpy(r)).numpy()
        _close(got, _ref(x, w, b, s, p, g, shift if "shift" in chain else None, r if "res" in chain else None,
                         "relu" in chain))
    assert counts["bind"] >= 1 and counts["bound"] >= 2, counts


def test_weights_and_bias_written_between_calls(counts):
    # default jit mode: captured tensors may change after the trace; the bound step must see the new values
    xs, ws = (1, 6, 10, 9), (16, 6, 3, 3)
    w = RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    wn, bn = nee.from_numpy(w.copy()), nee.from_numpy(b.copy())
    jf = nee.jit(lambda xx: F.relu(F.conv2d(xx, wn, bn, 1, 1)))
    x = RNG.standard_normal(xs).astype(np.float32)
    xn = nee.from_numpy(x)
    for step in range(6):
        got = jf(xn).numpy()
        _close(got, _ref(x, wn.numpy(), bn.numpy(), 1, 1, 1, relu=True))
        if step % 2:
            wn.numpy()[...] = RNG.standard_normal(ws).astype(np.float32)
        else:
            bn.numpy()[...] = RNG.standard_normal(16).astype(np.float32)
    assert counts["bound"] >= 2, counts


def test_thread_count_and_switches_between_calls(counts, monkeypatch):
    xs, ws = (1, 32, 14, 14), (64, 32, 3, 3)
    w = RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(64).astype(np.float32)
    wn, bn = nee.from_numpy(w), nee.from_numpy(b)
    jf = nee.jit(lambda xx: F.relu(F.conv2d(xx, wn, bn, 1, 1)))
    nt0 = threads.get_num_threads()
    try:
        for i, (nt, mode, force) in enumerate([(1, "1", None), (1, "1", None), (2, "1", None), (2, "1", None),
                                                (2, "1", "pix"), (2, "0", None), (1, "1", None)]):
            nee.set_num_threads(nt)
            D.MODE[0] = mode
            monkeypatch.setattr(D, "FORCE", [force])
            x = RNG.standard_normal(xs).astype(np.float32)
            into = counts["into"]
            got = jf(nee.from_numpy(x)).numpy()
            _close(got, _ref(x, w, b, 1, 1, 1, relu=True))
            if i in (1, 3):     # the same settings as the call before: bound
                assert counts["into"] == into, (i, counts)
            if i in (2, 4, 5):  # a setting changed: the unbound path ran (and bound anew)
                assert counts["into"] == into + 1, (i, counts)
    finally:
        nee.set_num_threads(nt0)


def test_plain_conv_step_is_bound(counts):
    xs, ws = (1, 7, 12, 11), (10, 7, 3, 3)
    w = RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(10).astype(np.float32)
    wn, bn = nee.from_numpy(w), nee.from_numpy(b)
    jf = nee.jit(lambda xx: F.conv2d(xx, wn, bn, 2, 1) * 1.0)     # (a consumer that is not an epilogue chain)
    jg = nee.jit(lambda xx: F.conv2d(xx, wn, None, 1, 0))
    for _ in range(3):
        x = RNG.standard_normal(xs).astype(np.float32)
        _close(jf(nee.from_numpy(x)).numpy(), _ref(x, w, b, 2, 1, 1))
        _close(jg(nee.from_numpy(x)).numpy(), _ref(x, w, None, 1, 0, 1))
    assert counts["bound"] >= 2, counts


def test_nan_inf_through_bound_relu(counts):
    xs, ws = (1, 4, 8, 8), (8, 4, 3, 3)
    w = RNG.standard_normal(ws).astype(np.float32)
    wn = nee.from_numpy(w)
    jf = nee.jit(lambda xx: F.relu(F.conv2d(xx, wn, None, 1, 1)))
    for k in range(3):
        x = RNG.standard_normal(xs).astype(np.float32)
        x[0, k, 3, 4] = np.nan
        x[0, 3 - k, 6, 1] = np.inf
        got = jf(nee.from_numpy(x)).numpy()
        want = _ref(x, w, None, 1, 1, 1, relu=True)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        m = np.isfinite(want)
        _close(got[m], want[m])
        np.testing.assert_array_equal(got[~m & ~np.isnan(want)], want[~m & ~np.isnan(want)])
    assert counts["bound"] >= 1, counts


def test_onnx_session_bound_matches_onnxruntime(counts):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh
    from neetorch.onnx import InferenceSession
    inits = [nh.from_array(RNG.standard_normal((24, 3, 3, 3)).astype(np.float32) * 0.3, "w0"),
             nh.from_array(RNG.standard_normal(24).astype(np.float32), "b0"),
             nh.from_array(RNG.standard_normal((16, 24, 1, 1)).astype(np.float32) * 0.3, "w1"),
             nh.from_array(RNG.standard_normal(16).astype(np.float32), "b1"),
             nh.from_array(RNG.standard_normal((32, 16, 3, 3)).astype(np.float32) * 0.3, "w2")]
    nodes = [h.make_node("Conv", ["x", "w0", "b0"], ["c0"], strides=[2, 2], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c0"], ["r0"]),
             h.make_node("Conv", ["r0", "w1", "b1"], ["c1"]),
             h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("Conv", ["r1", "w2"], ["y"], pads=[1, 1, 1, 1])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 29, 27])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 32, 15, 14])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
    s = InferenceSession(m)
    o = ort.InferenceSession(m, providers=["CPUExecutionProvider"])
    for _ in range(4):
        feed = {"x": RNG.standard_normal((1, 3, 29, 27)).astype(np.float32)}
        _close(s.run(None, feed)[0], o.run(None, feed)[0])
    assert counts["bound"] >= 3, counts


def test_profile_times_the_bound_steps(counts, monkeypatch):
    # nee.profile() times the steps a call runs (the bound launches), one event per step; NEE_PROFILE_FAST=0
    # times the generic loop's unbound launches instead
    from neetorch.jit import executable as X
    xs, ws = (1, 8, 12, 12), (16, 8, 3, 3)
    w = RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    wn, bn = nee.from_numpy(w), nee.from_numpy(b)
    jf = nee.jit(lambda xx: F.max_pool2d(F.relu(F.conv2d(xx, wn, bn, 1, 1)), 2))
    x = RNG.standard_normal(xs).astype(np.float32)
    want = TF.max_pool2d(torch.from_numpy(_ref(x, w, b, 1, 1, 1, relu=True)), 2).numpy()
    jf(nee.from_numpy(x))
    for fast in (True, False):
        monkeypatch.setattr(X, "_PROFILE_FAST", [fast])
        bound, into = counts["bound"], counts["into"]
        with nee.profile() as prof:
            got = jf(nee.from_numpy(x)).numpy()
        _close(got, want)
        names = [e.name for e in prof.kernels()]
        assert len(names) == 2 and names[0].startswith("conv2d") and names[1] == "max_pool2d", names
        conv_ev = prof.kernels()[0]
        assert conv_ev.nbytes == 4 * (x.size + w.size + b.size + 16 * 12 * 12) and conv_ev.dur > 0
        if fast:
            assert counts["bound"] == bound + 1 and counts["into"] == into, counts
        else:
            assert counts["into"] == into + 1, counts


@pytest.mark.parametrize("case", [((1, 24, 15, 13), 1, 1), ((1, 16, 14, 14), 2, 1), ((2, 9, 7, 11), 1, 0)])
def test_depthwise_steps_bound(counts, case):
    # depthwise convs bind depthwise_native's launch (b + b2 as its bias); biases written in place between calls
    # (default jit mode: not frozen) and a thread-count change are seen
    xs, s, p = case
    C = xs[1]
    w = RNG.standard_normal((C, 1, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(C).astype(np.float32)
    shift = RNG.standard_normal((C, 1, 1)).astype(np.float32)
    wn, bn, sn = nee.from_numpy(w), nee.from_numpy(b.copy()), nee.from_numpy(shift)
    jf = nee.jit(lambda xx: F.relu(F.conv2d(xx, wn, bn, s, p, 1, C) + sn))
    nt0 = threads.get_num_threads()
    try:
        for i, nt in enumerate([1, 1, 1, 1, 2, 2, 1, 1]):
            nee.set_num_threads(nt)
            x = RNG.standard_normal(xs).astype(np.float32)
            into = counts["into"]
            got = jf(nee.from_numpy(x)).numpy()
            _close(got, _ref(x, w, bn.numpy(), s, p, C, shift, relu=True))
            if i in (1, 2, 3, 5, 7):
                assert counts["into"] == into, (i, counts)       # bound
            if i in (4, 6):
                assert counts["into"] == into + 1, (i, counts)   # the thread count changed: unbound, bound anew
            if i == 2:
                bn.numpy()[...] = RNG.standard_normal(C).astype(np.float32)
    finally:
        nee.set_num_threads(nt0)
