"""The small non-conv steps of CNN graphs on the compiled graph's fast path: softmax / log_softmax, reductions and
max / average pooling bound to their kernels once per layout (kernels/nn.py bind_step, reduction.bind_reduce,
pool_native.bind_pool), a returned reshape of a step's new array made as a plain numpy view
(executable._plain_reshape), and the ONNX rewrite of ``Relu(Concat(...))`` into the Concat's inputs
(onnx/optimize.py).  Each is checked to be taken and against torch / eager / onnxruntime over several calls."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import nn as NN
from neetorch.devices.cpu.kernels import pool_native as PN
from neetorch.devices.cpu.kernels import reduction as RD

F = nee.nn.functional


@pytest.fixture
def bound_calls(monkeypatch):
    """Counts, per op name, the calls of the bound functions bind_step made (patched before the jit builds)."""
    calls: dict = {}
    orig = NN.bind_step

    def spy(name, attrs, outs, ins):
        f = orig(name, attrs, outs, ins)
        if f is None:
            return None

        def g(o, i):
            calls[name] = calls.get(name, 0) + 1
            return f(o, i)
        return g
    monkeypatch.setattr(NN, "bind_step", spy)
    return calls


def _head(x):
    # odd sizes, ceil mode, padding, a global window, a reduction, softmax over the last dim and over dim 1
    y = F.max_pool2d(x, 3, 2, 1, ceil_mode=True)
    z = F.avg_pool2d(y, 3, 1, 1, count_include_pad=False)
    g = F.avg_pool2d(z, z.shape[-2:])                   # global window
    m = z.mean((2, 3), keepdim=True)
    a = F.softmax(m.reshape(m.shape[0], -1), -1)
    b = F.log_softmax(z.amax(3), -1)
    return a, b, g, F.max_pool2d(z, 2, 2, 0, dilation=1)


def _torch_head(torch, x):
    T = torch.nn.functional
    y = T.max_pool2d(x, 3, 2, 1, ceil_mode=True)
    z = T.avg_pool2d(y, 3, 1, 1, count_include_pad=False)
    g = T.avg_pool2d(z, z.shape[-2:])
    m = z.mean((2, 3), keepdim=True)
    return (T.softmax(m.reshape(m.shape[0], -1), -1), T.log_softmax(z.amax(3), -1), g, T.max_pool2d(z, 2, 2, 0))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 5, 9, 11), (1, 48, 40, 40)])
def test_bound_small_steps_match_torch(nthreads, bound_calls, torch_mod, dt, shape):
    rng = np.random.default_rng(shape[1])
    f = nee.jit(_head)
    for k in range(3):
        xn = rng.standard_normal(shape).astype(dt)
        if k == 2:
            xn[0, 0, 1, 1] = np.nan          # torch's NaN propagation through max pooling
        got = f(nee.from_numpy(xn))
        ref = _torch_head(torch_mod, torch_mod.from_numpy(xn))
        eager = _head(nee.from_numpy(xn))
        for gt, r, e in zip(got, ref, eager):
            np.testing.assert_allclose(gt.numpy(), r.numpy(), rtol=1e-5 if dt == np.float32 else 1e-12, atol=1e-6)
            np.testing.assert_array_equal(gt.numpy(), e.numpy())     # the same kernels: bit-identical
    # bound after the first call, then run bound on the next two
    for op in ("max_pool2d", "avg_pool2d", "mean", "amax", "softmax", "log_softmax"):
        assert bound_calls.get(op, 0) >= 2, (op, bound_calls)


def test_bound_steps_follow_a_thread_count_change(bound_calls):
    rng = np.random.default_rng(3)
    f = nee.jit(_head)
    old = nee.get_num_threads()
    try:
        for nt in (1, 2, 1, 2):
            nee.set_num_threads(nt)
            xn = rng.standard_normal((1, 40, 64, 64)).astype(np.float32)
            for g, e in zip(f(nee.from_numpy(xn)), _head(nee.from_numpy(xn))):
                np.testing.assert_array_equal(g.numpy(), e.numpy())
    finally:
        nee.set_num_threads(old)
    assert bound_calls.get("softmax", 0) >= 1


def test_large_reduction_and_pool_bound_parallel_match_kernel():
    """The multi-thread splits the binders precompute (reduction metas over the outer dim, the pool's native
    workers, the global pool's plane chunks) give the kernel's own results."""
    rng = np.random.default_rng(4)
    old = nee.get_num_threads()
    nee.set_num_threads(2)
    try:
        x = rng.standard_normal((2, 128, 40, 40)).astype(np.float32)
        out, ref = np.empty((2, 128, 1, 1), np.float32), np.empty((2, 128, 1, 1), np.float32)
        f = RD.bind_reduce("mean", {"dims": (2, 3)}, out, [x])
        assert f is not None and f([out], [x])
        RD.reduce_into("mean", x, ref, (2, 3))
        np.testing.assert_array_equal(out, ref)
        for attrs, oshape, is_max in [
                ({"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1)}, (2, 128, 20, 20),
                 True),
                ({"kernel_size": (40, 40), "stride": (40, 40), "padding": (0, 0), "count_include_pad": False,
                  "divisor_override": None}, (2, 128, 1, 1), False),
                ({"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1), "count_include_pad": True,
                  "divisor_override": None}, (2, 128, 40, 40), False)]:
            o1, o2 = np.empty(oshape, np.float32), np.empty(oshape, np.float32)
            g = PN.bind_pool(is_max, attrs, o1, [x])
            assert g is not None and g([o1], [x])
            from neetorch.devices.cpu import _KERNELS
            _KERNELS["max_pool2d" if is_max else "avg_pool2d"](None, [o2], [x], attrs)
            np.testing.assert_array_equal(o1, o2)
    finally:
        nee.set_num_threads(old)


def test_binders_decline_what_their_kernels_do_otherwise():
    x = np.random.default_rng(5).standard_normal((2, 6, 10, 12)).astype(np.float32)
    o = np.zeros_like(x)
    sm = {"dim": 1}
    assert NN.bind_step("softmax", sm, [o], [x]) is None               # not unit-stride rows (the column kernel)
    assert NN.bind_step("softmax", {"dim": -1}, [o], [x]) is not None
    assert NN.bind_step("softmax", {"dim": -1}, [o], [o]) is None      # in place
    assert NN.bind_step("softmax", {"dim": -1}, [o], [x.transpose(0, 1, 3, 2).copy().transpose(0, 1, 3, 2)]) is None
    assert NN.bind_step("softmax", {"dim": -1}, [o.astype(np.float16)], [x.astype(np.float16)]) is None
    assert NN.bind_step("sum", {"dims": (1,)}, [np.empty((2, 1, 10, 12), np.int64)], [x.astype(np.int64)]) is None
    assert NN.bind_step("mean", {"dims": (1, 3)}, [np.empty((2, 1, 10, 1), np.float32)], [x]) is None  # 2 runs
    p = {"kernel_size": (3, 3), "stride": (5, 5), "padding": (1, 1), "dilation": (1, 1)}
    assert NN.bind_step("max_pool2d", p, [np.empty((2, 6, 2, 3), np.float32)], [x]) is None   # column stride 5
    p["stride"] = (2, 2)
    assert NN.bind_step("max_pool2d", p, [np.empty((2, 6, 5, 6), np.float32)], [x]) is not None
    assert NN.bind_step("max_pool2d", p, [np.empty((2, 6, 5, 6), np.float32)], [x[:, :, :, ::-1]]) is None


def test_returned_reshape_is_a_new_view_every_call():
    """A returned reshape of a step's new array (a classifier's softmax back to 4-D): each call's result is its
    own memory (a view frozen over one call's array would be overwritten by the next)."""
    def fn(x):
        return F.softmax(x.mean((2, 3)), 1).reshape(x.shape[0], -1, 1, 1)
    f = nee.jit(fn)
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal((2, 7, 5, 5)).astype(np.float32) for _ in range(3)]
    outs = [f(nee.from_numpy(x)) for x in xs]
    for x, o in zip(xs, outs):
        assert o.shape == (2, 7, 1, 1)
        np.testing.assert_array_equal(o.numpy(), fn(nee.from_numpy(x)).numpy())
    (exe, _), = {id(e[0]): e for e in f._fast.values()}.values()
    views = [s for s in exe.steps if s[0] == "view" and s[1].op.name == "reshape"]
    assert views and all(exe._plain_reshape(s[1]) == (2, 7, 1, 1) for s in views
                         if s[1].outputs[0] in exe.graph.outputs)


# ---------------------------------------------------------------- ONNX: Relu(Concat(...)) pushed into the inputs
def _concat_relu_model(kind):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((6, 4, 3, 3)).astype(np.float32) * 0.3, "w")
    b = numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["x"], ["rx"]),
             helper.make_node("AveragePool", ["rx"], ["ap"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["rx"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    ins = ["ap", "c", "mp"]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 14, 5, 5])]
    if kind == "input":          # a concat input nothing proves >= 0 and no node writes: left alone
        ins = ["ap", "c", "z"]
    if kind == "shared":         # the conv's output read by another node too: left alone
        nodes.append(helper.make_node("Identity", ["c"], ["c2"]))
        outs.append(helper.make_tensor_value_info("c2", TensorProto.FLOAT, [2, 6, 5, 5]))
    nodes += [helper.make_node("Concat", ins, ["cat"], axis=1), helper.make_node("Relu", ["cat"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 9, 9]),
                                       helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4, 5, 5])],
                          outs, initializer=[w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("kind", ["pushed", "input", "shared"])
def test_relu_of_concat_pushed_into_its_inputs(kind):
    ort = pytest.importorskip("onnxruntime")
    from neetorch.onnx import InferenceSession
    from neetorch.onnx.optimize import fold_affine
    m = _concat_relu_model(kind)
    m2 = type(m)()
    m2.CopyFrom(m)
    n = fold_affine(m2)
    relus = [x for x in m2.graph.node if x.op_type == "Relu"]
    cat = next(x for x in m2.graph.node if x.op_type == "Concat")
    assert n == 0                 # (fold_affine counts affine folds only)
    if kind == "pushed":
        # the conv's output gets the Relu; the pooled relu outputs (>= 0) do not; the Concat writes y
        assert cat.output[0] == "y" and len(relus) == 2
        assert {r.input[0] for r in relus} == {"x", "c"}
    else:
        assert any(r.input[0] == "cat" for r in relus) and cat.output[0] == "cat"
    rng = np.random.default_rng(8)
    feed = {"x": rng.standard_normal((2, 4, 9, 9)).astype(np.float32),
            "z": rng.standard_normal((2, 4, 5, 5)).astype(np.float32)}
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    s = InferenceSession(m.SerializeToString())
    for _ in range(2):
        got = s.run(None, feed)
        for g, r in zip(got, ref):
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)
    assert (got[0] >= 0).all() and (got[0] == 0).any()
