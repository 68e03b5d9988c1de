"""Tracer and graph IR: recording, printing, validation, replay, untraceable code."""
import re

import numpy as np
import pytest

import neetorch as nee
from neetorch.trace import Graph, GraphError, TraceError, run_graph, trace


def _mlp(x, w, b):
    h = (x @ w + b).relu()
    return h.reshape(-1).sigmoid()


def test_records_one_node_per_op_and_replays_on_new_inputs():
    x, y = nee.randn(4, 4), nee.randn(4)

    def f(x, y):
        h = (x * 2 + y).exp()
        return h.reshape(2, 8).t().sigmoid() - 1, h.abs()

    g = trace(f, x, y)
    names = [n.name for n in g.nodes]
    assert names == ["mul", "add", "exp", "reshape", "t", "sigmoid", "sub", "abs"]
    assert [v.shape for v in g.inputs] == [(4, 4), (4,)]
    assert [o.shape for o in g.outputs] == [(8, 2), (4, 4)]
    # replay on different values must follow the new data (nothing frozen at trace time)
    x2, y2 = nee.randn(4, 4), nee.randn(4)
    for got, want in zip(run_graph(g, x2, y2), f(x2, y2)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_printing_is_an_ssa_listing_with_types():
    g = trace(lambda x: (x + 1).tanh(), nee.ones(2, 3))
    text = str(g)
    assert text.splitlines()[0] == "graph <lambda>(%0: float32[2, 3]):"
    assert "= add(%0, %1)" in text and "tanh(" in text and text.rstrip().endswith("return %3")
    assert "const 1.0" in text
    dot = g.to_dot()
    assert dot.startswith('digraph "<lambda>"') and "tanh" in dot and dot.rstrip().endswith("}")


def test_constants_captured_from_closure():
    w = nee.randn(3)
    g = trace(lambda x: x * w, nee.randn(3))
    assert len(g.inputs) == 1 and len(g.consts) == 1
    x = nee.randn(3)
    np.testing.assert_array_equal(run_graph(g, x).numpy(), (x * w).numpy())


def test_python_control_flow_is_unrolled():
    def f(x):
        for _ in range(3):
            x = x * 2
        return x
    g = trace(f, nee.ones(2))
    assert [n.name for n in g.nodes] == ["mul"] * 3


@pytest.mark.parametrize("read", [lambda t: t.item(), lambda t: bool(t), lambda t: t.numpy(), lambda t: t.tolist(),
                                  lambda t: float(t)])
def test_data_dependent_reads_raise_with_location(read):
    def f(x):
        s = (x * 1).sum() if hasattr(x, "sum") else x * 1
        read(s.reshape(-1)[:1].reshape(()) if s.ndim else s)
        return x
    with pytest.raises(TraceError, match="test_trace.py"):
        trace(f, nee.ones(3))


def test_validate_detects_malformed_graphs():
    g = trace(lambda x: x.exp(), nee.ones(2))
    bad = Graph("bad")
    bad.inputs = []
    bad.nodes = g.nodes
    bad.outputs = g.outputs
    with pytest.raises(GraphError, match="before it is defined"):
        bad.validate()
    g.nodes[0].outputs[0].shape = (3,)
    with pytest.raises(GraphError, match="infers"):
        g.validate()


def test_run_graph_checks_input_types():
    g = trace(lambda x: x.exp(), nee.ones(2))
    with pytest.raises(TypeError, match="expects float32\\[2\\]"):
        run_graph(g, nee.ones(3))


def test_fingerprint_depends_on_structure_not_values():
    g1 = trace(lambda x: x.exp() + 1, nee.randn(2))
    g2 = trace(lambda x: x.exp() + 1, nee.randn(2))
    g3 = trace(lambda x: x.exp() + 2, nee.randn(2))
    assert g1.fingerprint() == g2.fingerprint() != g3.fingerprint()


def test_inplace_on_input_view_is_written_back():
    def f(x):
        v = x.narrow(0, 0, 1)
        v += 1
        return x * 1
    g = trace(f, nee.ones(3))
    assert g.writebacks and any(n.op.name == "view_assign" for n in g.nodes)
    xe, xj = nee.arange(3.0), nee.arange(3.0)
    np.testing.assert_array_equal(nee.jit(f)(xj).numpy(), f(xe).numpy())
    np.testing.assert_array_equal(xj.numpy(), [1.0, 1.0, 2.0])


def test_getitem_basic_and_advanced_are_recorded_with_index_inputs():
    def f(x, i):
        return x[1:, ::2] * 2 + x[i].sum()
    x, i = nee.randn(5, 6), nee.tensor([0, 2])
    g = trace(f, x, i)
    assert [n.name for n in g.nodes].count("getitem") == 2
    x2, i2 = nee.randn(5, 6), nee.tensor([4, 1])
    np.testing.assert_allclose(run_graph(g, x2, i2).numpy(), f(x2, i2).numpy())
    # the replayed index is validated like an eager one: never read out of bounds
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 5"):
        run_graph(g, x2, nee.tensor([7, 1]))


def test_setitem_on_an_intermediate_is_traced():
    def f(x):
        y = x * 1
        y[0] = 5
        y[1:] = y[1:] * x[:-1]
        return y
    j = nee.jit(f)
    for seed in range(3):
        nee.manual_seed(seed)
        x = nee.randn(4)
        np.testing.assert_allclose(j(x).numpy(), f(x).numpy(), rtol=1e-6)
    assert "setitem(" in str(trace(f, nee.ones(4)))


@pytest.mark.parametrize("mutate", [lambda y, x: y.fill_(1), lambda y, x: y.zero_(), lambda y, x: y.copy_(x.flip(0)),
                                    lambda y, x: y.copy_(nee.ones(3)), lambda y, x: y.masked_fill_(x > 0, 2.0),
                                    lambda y, x: nee.nn.functional.relu(y, inplace=True),
                                    lambda y, x: y.clamp_(-0.5, 0.5).mul_(2)],
                         ids=["fill_", "zero_", "copy_traced", "copy_const", "masked_fill_", "relu_inplace", "chain"])
def test_inplace_updates_of_intermediates_are_traced_as_new_values(mutate):
    """An in-place update of a tensor the function created rebinds it to the new value (masked_fill_
    once wrote into the trace's placeholder and the graph kept the old value: a silent wrong answer)."""
    def f(x):
        y = x * 1
        mutate(y, x)
        return y + x
    j = nee.jit(f)
    for seed in range(3):
        nee.manual_seed(seed)
        x = nee.randn(3)
        np.testing.assert_allclose(j(x).numpy(), f(x).numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("f, match", [
    (lambda x: (lambda b: (b[0].copy_(x[0]), b)[1])(nee.zeros(2, 3)), "writes into a view"),
    (lambda x: (lambda y: (y[:1].expand(3, 3).add_(1), y)[1])(x * 1), "more than one element|writes into a view"),
], ids=["view_of_factory_buffer", "expand_view"])
def test_inplace_updates_that_would_differ_from_eager_are_refused(f, match):
    with pytest.raises(RuntimeError, match=match):
        nee.jit(f)(nee.randn(2, 3))


@pytest.mark.parametrize("f", [
    lambda x: (lambda y: (y.t().mul_(2), y)[1])(x * 1),
    lambda x: (lambda y, v: (y.add_(1), v * 1)[1])(*(lambda y: (y, y.t()))(x * 1)),
], ids=["view", "base_of_view"])
def test_inplace_updates_through_views_follow_eager(f):
    x = nee.randn(2, 3)
    np.testing.assert_allclose(nee.jit(f)(x).numpy(), f(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("expr", [
    lambda x: x.t().contiguous() * 2,                 # a copy of a non-contiguous view
    lambda x: (x * 1.0).t().clone() + 1,
    lambda x: x[:1].expand(3, 4).contiguous() / (x * x + 1),
    lambda x: x.detach() * 3 + x.data,                # same storage, same value
    lambda x: x.to(nee.float32, copy=True) - x.mean(),
], ids=["contiguous", "clone", "expand_contiguous", "detach_data", "to_copy"])
def test_copies_and_aliases_are_traced_not_frozen(expr):
    """clone()/contiguous()/detach()/.data inside a traced function follow the inputs on every call
    (they once became constants holding the first call's values: silent wrong answers)."""
    f = nee.jit(expr)
    for seed in (0, 1, 2):
        nee.manual_seed(seed)
        x = nee.randn(3, 4)
        np.testing.assert_allclose(f(x).numpy(), expr(x).numpy(), rtol=1e-6, atol=1e-6)
    text = str(trace(expr, nee.randn(3, 4)))
    # only the scalar literals are constants; no tensor-sized constant holds a traced value
    assert not re.search(r"float32\[\d[^\]]*\] = const", text), text


def test_view_that_copies_is_recomputed_each_call():
    """reshape of a transposed intermediate is a copy, not a view: the executable must not memoize it
    like a view of the arena (it once returned the first call's values: MultiheadAttention and
    TransformerEncoderLayer under @nee.jit gave wrong answers from the second call on)."""
    w = nee.randn(16, 16)

    def f(a):
        return (a * 2).transpose(1, 2).reshape(2, 7, 16) @ w

    j = nee.jit(f)
    for seed in range(3):
        nee.manual_seed(seed)
        a = nee.randn(2, 4, 7, 4)
        np.testing.assert_allclose(j(a).numpy(), f(a).numpy(), rtol=1e-5, atol=1e-5)
    nee.manual_seed(0)
    layer = nee.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    jl = nee.jit(layer)
    for _ in range(3):
        x = nee.randn(2, 7, 16)
        np.testing.assert_allclose(jl(x).numpy(), layer(x).numpy(), rtol=1e-4, atol=1e-5)


def test_nested_results_keep_their_structure_under_jit():
    """A module returning (output, (h, c)) (LSTM), a pair with None (MultiheadAttention with
    need_weights=False), lists and dicts: jit returns the same structure the eager call does."""
    nee.manual_seed(0)
    lstm = nee.nn.LSTM(4, 6, num_layers=2, batch_first=True).eval()
    j = nee.jit(lstm)
    for _ in range(2):
        x = nee.randn(2, 5, 4)
        (o, (h, c)), (o2, (h2, c2)) = j(x), lstm(x)
        for a, b in ((o, o2), (h, h2), (c, c2)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    mha = nee.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = nee.randn(1, 3, 8)
    out, w = nee.jit(lambda x: mha(x, x, x, need_weights=False))(x)
    assert w is None and out.shape == (1, 3, 8)
    r = nee.jit(lambda x: {"a": x + 1, "b": [x * 2, None]})(x)
    assert isinstance(r, dict) and isinstance(r["b"], list) and r["b"][1] is None
    np.testing.assert_allclose(r["b"][0].numpy(), x.numpy() * 2)
    assert nee.jit(lambda x: (x, 3))(x)[1] == 3       # constant leaves are returned as they are
    with pytest.raises(TraceError, match=r"returned tuple\(Tensor, object\)"):
        nee.jit(lambda x: (x, object()))(x)


@pytest.mark.parametrize("f", [
    lambda x, y: x.sum(0) + y,                       # int64 0-d + int32 tensor: the 0-d operand is cast to int32
    lambda x, y: nee.maximum(x.sum(0).abs(), y),
    lambda x, y: y.float() * x.argmax(0),             # int64 0-d * float tensor
], ids=["sum_add", "maximum", "argmax_mul"])
def test_zero_dim_operands_cast_for_promotion_stay_in_the_graph(f):
    """A 0-d operand cast to the op's compute dtype (PyTorch promotion) once became a constant holding
    the trace's placeholder (integer placeholders are ones): x.sum(0) + y gave 1 + y."""
    j = nee.jit(f)
    for seed in range(3):
        nee.manual_seed(seed)
        x = nee.randint(-5, 6, (7,), dtype=nee.int32)
        y = nee.randint(-5, 6, (1,), dtype=nee.int32)
        e, r = f(x, y), j(x, y)
        assert r.dtype == e.dtype
        np.testing.assert_array_equal(r.numpy(), e.numpy())


def test_layer_norm_over_a_dynamic_axis_is_exact_at_every_size():
    """A fused prologue + layer_norm over the dynamic axis: its size lives inside the fused op; the
    bucket's executable (planned at the bucket's top) once ran with the top's row length: a crash or a
    wrong answer for every other size of the bucket. Such graphs now specialize per size."""
    F = nee.nn.functional

    def f(x):
        x = x.argmax(0).float() + x
        return F.layer_norm(x, (x.shape[-1],))

    j = nee.jit(f, dynamic={0: 1})
    for n in (50, 60, 64, 33, 50):
        x = nee.randn(9, n)
        np.testing.assert_allclose(j(x).numpy(), f(x).numpy(), rtol=1e-5, atol=1e-5)
    assert j.stats["bucket_specializations"] == 0
    g = nee.jit(lambda x: (x * 2).softmax(-1), dynamic={0: 1})   # softmax's row length is the shape's: one bucket
    for n in (33, 50, 64):
        x = nee.randn(9, n)
        np.testing.assert_allclose(g(x).numpy(), (x * 2).softmax(-1).numpy(), rtol=1e-5, atol=1e-6)
    assert g.stats["specializations"] == 1 and g.stats["bucket_specializations"] == 1


def test_control_flow_on_a_size_that_flips_inside_a_bucket_is_not_bucketed():
    """``if x.shape[0] <= x.shape[1]`` flips between sizes 9 and 16 of the bucket (9, 16]: the first call
    (12) and a probe at the top (16) agree, the bottom (9) does not; probing both ends keeps the
    function from sharing one executable across the bucket (it returned an (11, 11) result at n = 9)."""
    F = nee.nn.functional

    def f(x):
        x = F.pad(x, (0, 0, 1, 1))
        x = x @ x.t() if x.shape[0] <= x.shape[1] else x.t() @ x
        return x.logsumexp(-1, keepdim=True) - x

    j = nee.jit(f, dynamic={0: 1})
    for n in (12, 9, 16, 5):
        x = nee.randn(9, n)
        e, r = f(x), j(x)
        assert r.shape == e.shape
        np.testing.assert_allclose(r.numpy(), e.numpy(), rtol=1e-4, atol=1e-4)


def test_traces_in_several_threads_at_once_each_record_their_own_ops():
    """The tracer's hooks are process-wide: a trace finishing first once unhooked another thread's
    running trace, whose graph then kept placeholder values (wrong results, silently)."""
    import threading
    bad, errs = [], []

    def work(k):
        rng = np.random.default_rng(k)
        try:
            for i in range(15):
                f = nee.jit(lambda a, b: (a @ b).relu() * 2.0 + 1.0)   # a new function: traced on its first call
                a = nee.tensor(rng.standard_normal((8, 5)).astype(np.float32))
                b = nee.tensor(rng.standard_normal((5, 6)).astype(np.float32))
                want = np.maximum(a.numpy() @ b.numpy(), 0) * 2 + 1
                if not np.allclose(f(a, b).numpy(), want, atol=1e-5):
                    bad.append((k, i))
                # eager ops of this thread while others trace run for real
                if not np.allclose((a * 3).numpy(), a.numpy() * 3):
                    bad.append(("eager", k, i))
        except Exception as e:  # noqa: BLE001
            errs.append(repr(e))

    ts = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs and not bad
    from neetorch.ops import registry
    assert registry._trace_hook[0] is None and registry._meta_run[0] is None   # all unhooked at the end


def test_a_device_move_inside_a_traced_function_is_refused_with_the_way_out():
    """``.cpu()`` / ``.to(device)`` of a traced tensor is not a graph node (placement decides devices):
    refused naming the devices and the line, not reported as a data read."""
    try:
        x = nee.randn(3, 4).to("opencl")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no OpenCL device: {e}")
    with pytest.raises(TraceError, match=r"moving a traced tensor from opencl:0 to cpu .* move the results after"):
        nee.jit(lambda t: (t * 2).cpu() + 1)(x)
    y = nee.jit(lambda t: t * 2)(x).cpu() + 1   # the way out
    np.testing.assert_allclose(y.numpy(), x.cpu().numpy() * 2 + 1, rtol=1e-6)
