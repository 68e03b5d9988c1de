"""@nee.jit: equality with eager, passes, fusion counts, memory plan, caches."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import neetorch as nee
from neetorch.jit import FusedElementwise, fuse_elementwise, plan_memory
from neetorch.jit import passes
from neetorch.ops.elementwise import gelu
from neetorch.trace import trace


def _close(a, b, rtol=1e-5, atol=1e-6):
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=rtol, atol=atol)


def test_gelu_affine_is_one_fused_kernel_and_matches_eager():
    f = nee.jit(lambda x, w, b: gelu(x * w + b))
    x, w, b = nee.randn(257, 33), nee.randn(33), nee.randn(257, 1)
    _close(f(x, w, b), f.eager(x, w, b))
    g = f.graph(x, w, b)
    assert len(g.nodes) == 1 and isinstance(g.nodes[0].op, FusedElementwise)
    assert g.nodes[0].op.name == "fused[mul+add+gelu]"


def test_noncontiguous_and_broadcast_inputs():
    f = nee.jit(lambda x, y: (x - y).abs().sqrt() * 0.5 + x.sigmoid())
    x = nee.randn(30, 40).t()            # transposed
    y = nee.randn(60, 40)[::2].t()       # strided slice, transposed
    _close(f(x, y), f.eager(x, y))
    z = nee.randn(40, 1).expand(40, 30)  # stride-0 broadcast
    _close(f(z, y), f.eager(z, y))


def test_multiple_outputs_and_intermediates_used_twice():
    def fn(x):
        h = (x * 3).tanh()
        return h + 1, h * h, (h - 2).exp()
    f = nee.jit(fn)
    x = nee.randn(1000)
    _close(f(x), f.eager(x))
    assert sum(isinstance(n.op, FusedElementwise) for n in f.graph(x).nodes) == 1


def test_fusion_stops_at_views_and_shape_changes():
    def fn(x):
        y = (x + 1).exp()
        z = y.reshape(4, 6).t()     # a view between elementwise ops
        return (z * 2).relu()
    f = nee.jit(fn)
    x = nee.randn(24)
    _close(f(x), f.eager(x))
    ops = [n.name for n in f.graph(x).nodes]
    assert ops == ["fused[add+exp]", "reshape", "t", "fused[mul+relu]"]


def test_no_fusion_across_a_consumer_that_runs_in_between():
    # y feeds a view whose result feeds the chain again: the group must not be delayed past it
    def fn(x):
        y = x * 2
        v = y.flip(0) if hasattr(y, "flip") else y.reshape(-1)
        return y + v
    f = nee.jit(fn)
    x = nee.randn(7)
    _close(f(x), f.eager(x))


def test_dtype_promotion_inside_fused_groups():
    def fn(i, x):
        return (i * 3 + x).floor() + (i > 2)
    f = nee.jit(fn)
    i, x = nee.randint(0, 5, (50,)), nee.randn(50, dtype=nee.float64)
    _close(f(i, x), f.eager(i, x), rtol=1e-12, atol=0)
    h = nee.randn(50).half()
    f2 = nee.jit(lambda a, b: (a * b + 1).relu())
    _close(f2(h, h), f2.eager(h, h), rtol=1e-3, atol=1e-3)


def test_passes_cse_fold_simplify_dce():
    c = nee.tensor(2.0)

    def fn(x):
        a = x.exp()
        b = x.exp()            # CSE
        k = c * 3              # const-only: folded at trace time
        unused = x.sin()       # DCE
        return (a + b) * 1 * k  # x * 1 simplified
    g = trace(fn, nee.randn(5))
    n0 = len(g.nodes)
    g = passes.run_pipeline(g)
    names = [n.name for n in g.nodes]
    assert names.count("exp") == 1 and "sin" not in names and len(g.nodes) < n0
    assert names == ["exp", "add", "mul"]


def test_memory_plan_reuses_buffers():
    def fn(x):
        for _ in range(6):
            x = x.reshape(-1).reshape(64, 64).t()  # views keep fusion apart -> many intermediates
            x = (x + 1).exp() * 0.5
        return x
    g = fuse_elementwise(passes.run_pipeline(trace(fn, nee.randn(64, 64))))
    plan = plan_memory(g)
    assert plan.total_bytes > 0 and plan.arena_bytes < plan.total_bytes
    f = nee.jit(fn)
    x = nee.randn(64, 64)
    _close(f(x), f.eager(x), rtol=1e-4)
    _close(f(x), f.eager(x), rtol=1e-4)   # arena reused across calls


def test_guards_respecialize_and_count():
    f = nee.jit(lambda x: (x * 2).exp())
    f(nee.randn(8))
    f(nee.randn(8))
    assert f.stats["traces"] == 1 and f.stats["cache_hits"] == 1
    f(nee.randn(9))
    f(nee.randn(8, dtype=nee.float64))
    assert f.stats["traces"] == 3


def test_dynamic_size_sweep_compiles_kernels_once():
    f = nee.jit(lambda x, b: gelu(x * 2 + b))
    b = nee.randn(16)
    f(nee.randn(1, 16), b)
    before = f.stats["kernels_compiled"]
    for n in range(1, 513, 7):
        x = nee.randn(n, 16)
        _close(f(x, b), f.eager(x, b))
    # kernels take sizes at run time: new sizes re-trace but compile nothing new
    assert f.stats["kernels_compiled"] - before == 0


def test_methods_and_modules_and_eager_switch():
    class M:
        def __init__(self):
            self.w = nee.randn(10)

        @nee.jit
        def forward(self, x):
            return (x * self.w).relu()
    m = M()
    x = nee.randn(10)
    _close(m.forward(x), (x * m.w).relu())
    from neetorch.jit.api import set_enabled
    set_enabled(False)
    try:
        _close(m.forward(x), (x * m.w).relu())
    finally:
        set_enabled(True)


def test_explain_shows_stages_kernels_and_plan():
    f = nee.jit(lambda x: (x + 1).exp())
    text = f.explain(nee.randn(3))
    for part in ("after traced", "after cse", "after fused", "fused[add+exp]", "def kernel", "memory plan"):
        assert part in text


def test_second_process_compiles_nothing(tmp_path):
    script = textwrap.dedent("""
        import neetorch as nee
        from neetorch.ops.elementwise import gelu
        from neetorch.devices.cpu import codegen
        f = nee.jit(lambda x, w: gelu(x * w + 1.5).tanh())
        f(nee.randn(100), nee.randn(100))
        print(codegen.stats["compiled"], codegen.stats["disk_hits"])
    """)
    env = dict(os.environ, NEE_CACHE_DIR=str(tmp_path / "cache"))
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    c1, _ = map(int, first.stdout.split())
    c2, hits2 = map(int, second.stdout.split())
    assert c1 > 0 and c2 == 0 and hits2 == c1


def test_corrupt_cache_entry_is_rebuilt(tmp_path):
    script = textwrap.dedent("""
        import neetorch as nee, numpy as np
        x = nee.arange(5.)
        print(float((x * 3 + 1).sum()))
    """)
    env = dict(os.environ, NEE_CACHE_DIR=str(tmp_path / "cache"))
    subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True)
    for root, _, files in os.walk(tmp_path / "cache"):
        for fn in files:
            if fn.endswith(".py") and not root.endswith("__pycache__"):
                with open(os.path.join(root, fn), "a") as fh:
                    fh.write("\nthis is not python\n")
    out = subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True)
    assert float(out.stdout) == 35.0


def test_shape_buckets_sweep_1_to_512():
    f = nee.jit(lambda x, b: gelu(x * 2 + b).reshape(-1, 4).softmax(-1), dynamic={0: 0})
    b = nee.randn(16)
    for n in range(1, 513):
        x = nee.randn(n, 16)
        if n % 37 == 1 or n in (2, 3, 4, 5, 255, 256, 257, 511, 512):
            _close(f(x, b), f.eager(x, b))
        else:
            f(x, b)
    # powers of two: 1, 2, (2,4], ..., (256,512] -> 10 buckets, one specialization each
    assert f.stats["specializations"] <= 10 and f.stats["bucket_specializations"] >= 8


def test_explicit_bucket_list_and_sizes_past_it():
    f = nee.jit(lambda x: (x * 3).tanh(), dynamic={0: 0}, buckets=[8, 64])
    for n in (1, 5, 8, 9, 64, 100):
        x = nee.randn(n)
        _close(f(x), f.eager(x))
    # buckets (1,1), (2..8], (9..64], then 100 alone
    assert f.stats["specializations"] == 4


def test_shape_dependent_graph_falls_back_to_exact_shapes():
    f = nee.jit(lambda x: x.reshape(x.shape[0] * 2, -1).exp(), dynamic={0: 0})
    for n in (3, 4, 5, 4):
        x = nee.randn(n, 8)
        _close(f(x), f.eager(x))
    assert f.stats["bucket_specializations"] == 0 and f.stats["specializations"] == 3


def test_concurrent_calls_from_threads():
    from concurrent.futures import ThreadPoolExecutor
    f = nee.jit(lambda x: ((x * 2).tanh() + 1).reshape(-1).exp(), dynamic={0: 0})
    xs = [nee.randn(n, 8) for n in (3, 4, 5, 17, 30, 64, 3, 4)] * 4

    def call(x):
        return np.abs(f(x).numpy() - f.eager(x).numpy()).max()
    with ThreadPoolExecutor(4) as pool:
        errs = list(pool.map(call, xs))
    assert max(errs) < 1e-5


def _unary_ops():
    from neetorch.ops.elementwise import UNARY_FLOAT
    return sorted(UNARY_FLOAT) + ["abs", "neg", "floor", "ceil", "trunc", "sign", "relu", "square"]


def test_every_unary_elementwise_op_fuses_and_matches_eager():
    from neetorch.ops.registry import OPS
    from neetorch.ops.elementwise import apply
    x = nee.rand(3, 50) * 1.6 + 0.2          # in every op's domain (acosh gets its own below)
    for name in _unary_ops():
        op = OPS[name]
        src = x + 1.0 if name == "acosh" else x
        f = nee.jit(lambda t, op=op: apply(op, t * 0.5 + 0.25) - 0.125)
        got, want = f(src), f.eager(src)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-6, atol=2e-6, err_msg=name)
        assert len(f.graph(src).nodes) == 1, name


def test_matmul_epilogue_and_norm_kernel_counts():
    F = nee.nn.functional
    x, w, b = nee.randn(64, 32), nee.randn(32, 48), nee.randn(48)
    f = nee.jit(lambda x, w, b: F.gelu(x @ w + b))
    _close(f(x, w, b), f.eager(x, w, b), rtol=1e-4, atol=1e-5)
    assert [n.name for n in f.graph(x, w, b).nodes] == ["matmul+fused[add+gelu]"]
    g, bb = nee.randn(32), nee.randn(32)
    ln = nee.jit(lambda x: F.layer_norm(x, (32,), g, bb))
    _close(ln(x), ln.eager(x), rtol=1e-5, atol=1e-5)
    assert len(ln.graph(x).nodes) <= 2


def test_compiled_graphs_validate_indices_like_eager():
    f = nee.jit(lambda x, i: nee.gather(x, 1, i) * 2 + nee.index_select(x, 0, i[:, 0]).sum())
    x, i = nee.randn(4, 5), nee.tensor([[0, 4], [1, 2], [3, 3], [2, 0]])
    _close(f(x, i), f.eager(x, i))
    with pytest.raises(RuntimeError, match="gather\\(\\): index 5 is out of bounds for dimension 1 with size 5"):
        f(x, nee.tensor([[0, 5], [1, 2], [3, 3], [2, 0]]))


def test_two_dynamic_dims_on_one_argument():
    f = nee.jit(lambda x: (x * 2).tanh().sum(-1), dynamic={0: (0, 1)})
    for shape in [(3, 5), (4, 7), (4, 8), (9, 3)]:
        x = nee.randn(*shape)
        _close(f(x), f.eager(x))
    assert f.stats["specializations"] == 2   # buckets (3..4, 5..8) for the first three, (9..16, 3..4)


@pytest.mark.parametrize("dst", ["int64", "int32", "float64", "uint8"])
def test_jit_cast_node_types_itself(dst):
    # a traced cast carries its target dtype (regression: the graph failed validation)
    x = nee.tensor(np.array([[0.0, 1.7, -3.4], [5.1, 254.9, 0.2]], np.float32))
    f = nee.jit(lambda c: c.to(getattr(nee, dst)) * 2)
    out = f(x)
    ref = x.numpy().astype(dst) * np.array(2, dst)
    assert out.dtype.name == dst and f.stats["traces"] == 1
    np.testing.assert_array_equal(out.numpy(), ref)


def test_copying_reshape_of_an_intermediate_is_a_copy_into_a_reused_buffer(monkeypatch):
    """Attention's heads merged back (transpose then reshape: a copy) copy into one buffer per
    step instead of replaying the view; fresh values every call, and a result returned to the
    caller (or aliased by one) is never that reused buffer."""
    from neetorch.devices.cpu import CPUBackend
    w = nee.randn(8, 8)

    def merge(x):                       # (2, 5, 24) -> heads (2, 3, 5, 8) @ w -> back (2, 5, 24)
        h = x.reshape(2, 5, 3, 8).transpose(1, 2) @ w
        return h.transpose(1, 2).reshape(2, 5, 24) * 2

    def merge_out(x):                   # the copying reshape's result is returned (through a view)
        h = x.reshape(2, 5, 3, 8).transpose(1, 2) @ w
        return h.transpose(1, 2).reshape(2, 5, 24)[0]

    f, g = nee.jit(merge), nee.jit(merge_out)
    xs = [nee.randn(2, 5, 24) for _ in range(3)]
    _close(f(xs[0]), merge(xs[0]))
    _close(g(xs[0]), merge_out(xs[0]))
    copies = []
    real = CPUBackend.copy_
    monkeypatch.setattr(CPUBackend, "copy_", lambda self, d, s: (copies.append(d.shape), real(self, d, s)))
    outs = [f(x) for x in xs]
    assert copies == [], "the copying reshape was replayed"
    outs_g = [g(x) for x in xs]
    # (session 17: the copy is a cast kernel of the graph, jit/passes.py materialize_copying_reshapes; a returned
    # view of it gets memory of its own each call)
    assert copies == [] or len(copies) == 3, "a returned reshape must be made anew each call"
    assert not any(np.shares_memory(a.numpy(), b.numpy()) for a, b in zip(outs_g, outs_g[1:]))
    for x, o, og in zip(xs, outs, outs_g):
        _close(o, merge(x))
        _close(og, merge_out(x))


def test_float_arguments_key_by_sign_and_nan():
    """-0.0 == 0.0 (same hash) but x / -0.0 is -inf: the guard key keeps the sign; NaN (never equal to
    itself) still hits the cache instead of retracing on every call."""
    x = nee.tensor(np.array([1.0, -1.0, 2.0]))
    f = nee.jit(lambda x, s: x / s)
    np.testing.assert_array_equal(f(x, 0.0).numpy(), [np.inf, -np.inf, np.inf])
    np.testing.assert_array_equal(f(x, -0.0).numpy(), [-np.inf, np.inf, -np.inf])
    for _ in range(3):
        assert np.isnan(f(x, float("nan")).numpy()).all()
    assert f.stats["traces"] == 3


def test_fusion_passes_scale_linearly_with_graph_size():
    """fuse_matmul_epilogues / fuse_reduction_prologues fuse in one pass (users map kept current), not one
    rescan of the whole graph per fusion: Graph.users() runs a fixed number of times however many
    products a graph has (an unrolled LSTM has hundreds), and the result is the restart-per-fusion one."""
    from neetorch.trace import ir
    F = nee.nn.functional
    ws = [nee.randn(16, 16) * 0.3 for _ in range(8)]

    def body(x, steps):
        for i in range(steps):
            x = F.layer_norm(F.gelu(x @ ws[i % 8] + 1.0), (16,))
            x = F.softmax(x @ ws[(i + 3) % 8] * 0.5, -1) + x
        return x
    calls = []
    real = ir.Graph.users

    def counting(self):
        calls.append(len(self.nodes))
        return real(self)
    ir.Graph.users = counting
    try:
        counts = {}
        for steps in (4, 16):
            calls.clear()
            f = nee.jit(lambda x, steps=steps: body(x, steps))
            x = nee.randn(8, 16)
            np.testing.assert_allclose(f(x).numpy(), f.eager(x).numpy(), rtol=1e-5, atol=1e-5)
            counts[steps] = len(calls)
            names = [n.name for n in f.graph(x).nodes]
            assert names.count("matmul") == 0 and len(names) == 3 * steps   # every product fused (+ the residual add)
    finally:
        ir.Graph.users = real
    assert counts[16] == counts[4]
