"""What makes compiling fast, asserted by counts (never by wall-clock): a metadata-only trace
runs and compiles no kernels; the LLVM IR renderer builds the elementwise kernels, gives the
Numba renderer's results bit for bit, and its disk cache is reused and self-repairing."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F
from neetorch.devices.cpu import codegen, elementwise, llvm_render
from neetorch.trace import TraceError, run_graph, trace, tracer


def _launches(prof):
    return [e for e in prof.events if e.kind in ("kernel", "compile")]


def test_trace_runs_no_kernel_and_replays_exactly():
    w, b, g = nee.randn(16, 8), nee.randn(16), nee.ones(16)

    def block(x):
        h = F.gelu(F.linear(x, w, b)) * 0.5 + x.sum(-1, keepdim=True)
        h = F.layer_norm(h, (16,), g, None)
        return F.softmax(h, dim=-1), h.exp()

    x = nee.randn(4, 8)
    before = dict(tracer.stats)
    with nee.profile() as prof:
        gr = trace(block, x)
    assert _launches(prof) == []          # nothing ran, nothing compiled
    assert tracer.stats["meta_ops"] - before["meta_ops"] == len(gr.nodes) - sum(
        n.op.kind == "view" for n in gr.nodes)
    assert tracer.stats["eager_retraces"] == before["eager_retraces"]
    x2 = nee.randn(4, 8)
    for got, want in zip(run_graph(gr, x2), block(x2)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_causal_attention_traces_without_kernels():
    # the causal mask is computed from constants while tracing: by its (exact) numpy
    # reference, so no eager comparison / logical_not kernel is built for it
    q = nee.randn(1, 2, 8, 4)
    f = lambda q: F.scaled_dot_product_attention(q, q, q, is_causal=True)
    with nee.profile() as prof:
        gr = trace(f, q)
    assert _launches(prof) == []
    q2 = nee.randn(1, 2, 8, 4)
    np.testing.assert_allclose(run_graph(gr, q2).numpy(), f(q2).numpy(), rtol=1e-6, atol=1e-7)


def _attention(q):
    return F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).reshape(1, 8, 8)


def _shapes_and_scalars(x):
    n = nee.tensor(x.shape[0])                      # 0-d constants, computed while tracing
    i = nee.where(n - 5 < 0, n + 2, n)
    y = x.reshape(-1, 2)[:, 1] * (nee.tensor(2.0) < nee.tensor(3.0)) + i
    return y.unsqueeze(0).expand(3, -1).sum(0), (x > 0).sum(), x.argmax(-1)


@pytest.mark.parametrize("fn, shape", [(_attention, (1, 2, 8, 4)), (_shapes_and_scalars, (6, 4))])
def test_metadata_trace_records_the_eager_trace_graph(fn, shape):
    # same nodes, shapes, dtypes and constants as tracing by running every op
    x = nee.randn(*shape)
    assert str(trace(fn, x)) == str(trace(fn, x, meta=False))


def test_value_reads_inside_ops_fall_back_to_an_eager_trace():
    # a boolean mask's count decides the result's shape: the placeholder values cannot be
    # used, so the trace is abandoned and redone eagerly (counted), and the graph is right
    def f(x):
        return x[x.abs() > 0.5] * 2
    x = nee.tensor([1.0, -0.1, 2.0, -3.0, 0.2, 0.0])
    before = tracer.stats["eager_retraces"]
    gr = trace(f, x)
    assert tracer.stats["eager_retraces"] == before + 1
    np.testing.assert_array_equal(run_graph(gr, x).numpy(), f(x).numpy())


def test_data_reads_still_refused_and_inplace_on_local_tensors_recorded():
    with pytest.raises(TraceError, match="test_compile_time.py"):
        trace(lambda x: x * float((x * 2).sum()), nee.ones(3))

    def g(x):
        y = x * 1
        y += 2
        y.mul_(x)
        return y
    x = nee.randn(5)
    gr = trace(g, x)
    x2 = nee.randn(5)
    np.testing.assert_array_equal(run_graph(gr, x2).numpy(), g(x2).numpy())


_LLVM = pytest.mark.skipif(elementwise.RENDERER != "llvm", reason="NEE_CPU_RENDERER=numba")


@_LLVM
def test_jit_compiles_fused_groups_with_llvm():
    f = nee.jit(lambda x, w, b: F.gelu(x * w + b).tanh())
    x, w, b = nee.randn(33, 17), nee.randn(17), nee.randn(17)
    np.testing.assert_allclose(f(x, w, b).numpy(), f.eager(x, w, b).numpy(), rtol=1e-6, atol=1e-7)
    exe = f._executable((x, w, b), {})[0]
    fused = [s for s in exe.steps if s[0] == "fused"]
    assert fused and all(isinstance(s[2], llvm_render.LLVMKernel) for s in fused)
    assert "def kernel" in exe.kernels[0][1] and "define void" in exe.kernels[0][1]


def _inputs(n, step=1):
    rng = np.random.default_rng(1)
    a = np.concatenate([rng.standard_normal(n - 16) * 6, [0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 88.8,
                                                         -104.5, 20, -20, 1e30, -1e30, 3.9, -0.93, 1]])
    ins = [a.astype(np.float32), rng.standard_normal(n).astype(np.float32) * 3, rng.random(n) < 0.5,
           rng.integers(-128, 128, n).astype(np.int8), rng.integers(0, 256, n).astype(np.uint8)]
    return [x[::step] for x in ins]


# Numba's typing rules as the renderer must reproduce them, checked against numpy: int8
# arithmetic widens to int64 and wraps on the store, ``~`` on uint8 is taken in 64 bits, a
# float32 compared with an int literal compares in float64, where/max/min pick like Python
_OPS = ["t0 = np.float32(v1 if v2 else v0 / v1)", "t1 = np.float32(f_relu32(v0) + f_maximum(v0, v1))",
        "t2 = np.bool_((v0 < v1) != (not v2))", "t3 = np.int8(np.int8(v3) + np.int8(v3 * v3))",
        "t4 = np.uint8(~v4 & np.uint8(7) | (v4 ^ np.uint8(12)))", "t5 = np.float32(np.sqrt(abs(v0)) + np.floor(v1))",
        "t6 = np.bool_(v0 > 16777217)", "t7 = np.float32(max(v0, v1) - min(v0, f_zero32))"]
_OUT = ["float32", "float32", "bool", "int8", "uint8", "float32", "bool", "float32"]


def _expected(v0, v1, v2, v3, v4):
    f32 = np.float32
    with np.errstate(all="ignore"):
        relu = np.where(v0 < 0, f32(0), v0)
        maxi = np.where((v0 > v1) | np.isnan(v0), v0, np.where(np.isnan(v1) | (v1 > v0), v1, v0))
        i3 = v3.astype(np.int64)
        return [np.where(v2, v1, v0 / v1), relu + maxi, (v0 < v1) != ~v2, (i3 + i3 * i3).astype(np.int8),
                ((~v4.astype(np.uint64)) & 7 | (v4 ^ 12)).astype(np.uint8), np.sqrt(np.abs(v0)) + np.floor(v1),
                v0.astype(np.float64) > 16777217, np.where(v1 > v0, v1, v0) - np.where(f32(0) < v0, f32(0), v0)]


@pytest.mark.parametrize("layout", ["contiguous", "broadcast", "strided"])
def test_llvm_kernels_follow_numba_typing(layout):
    in_dt = ["float32", "float32", "bool", "int8", "uint8"]
    res = [s.split(" = ")[0] for s in _OPS]
    k, _ = llvm_render.load("test_typing", "typing", in_dt, _OUT, _OPS, res, "")
    ins = _inputs(2053, 2 if layout == "strided" else 1)
    if layout == "broadcast":
        ins[1] = ins[1][:1]
    outs = [np.zeros(ins[0].shape, d) for d in _OUT]
    elementwise.run_strided(k, outs, ins)
    for name, got, want in zip(res, outs, _expected(*[np.broadcast_to(x, ins[0].shape) for x in ins])):
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_llvm_fast_math_equals_numba_bit_for_bit():
    # the helpers are translated from their Python source: same operations, same results
    ops = ["t0 = np.float32(f_gelu32(v0) + f_sigmoid32(v0))"]
    src = elementwise.render_group("gs", ["float32"], ["float32"], ops, ["t0"])
    k_llvm, _ = llvm_render.load("test_gs", "gs", ["float32"], ["float32"], ops, ["t0"], src)
    k_numba = codegen.load_kernel("test_gs", src)
    x = _inputs(4099)[0]
    a, b = np.empty_like(x), np.empty_like(x)
    elementwise.run_strided(k_llvm, a, [x])
    elementwise.run_strided(k_numba, b, [x])
    assert a.tobytes() == b.tobytes()


def test_large_launches_split_across_threads_exactly():
    # 2M elements: chunks run on the pool, each a call of the same machine code
    x = nee.randn(1 << 21)
    a = x.numpy()
    np.testing.assert_array_equal((x * 3 + 0.5).numpy(), a * np.float32(3) + np.float32(0.5))
    y = nee.randn(1024, 2048).t()          # strided: the general loop, split too
    np.testing.assert_array_equal((y - 1).numpy(), y.numpy() - np.float32(1))


def test_unsupported_expressions_use_numba():
    # an ``if`` statement inside a helper (sin's huge-argument path) is not translated
    with pytest.raises(NotImplementedError):
        llvm_render.load("t", "sin", ["float32"], ["float32"], [], ["f_sin32(v0)"], "")
    x = nee.linspace(-3, 3, 50)
    np.testing.assert_allclose(x.sin().numpy(), np.sin(x.numpy()), rtol=1e-6, atol=1e-7)


def test_corrupt_object_file_is_rebuilt(tmp_path, monkeypatch):
    from neetorch import _env
    monkeypatch.setattr(_env, "CACHE_DIR", str(tmp_path))
    pieces = (["float32"], ["float32"], [], ["v0 * np.float32(3) + np.float32(0.25)"])
    key = llvm_render.kernel_key("corrupt_test", pieces, ())
    render = lambda: llvm_render.render_ir("t", *pieces, variant=())
    path = os.path.join(llvm_render.cache_dir(), key + ".o")
    with open(path, "wb") as f:
        f.write(b"0" * 40 + b"not an object file")
    c0 = llvm_render.stats["compiled"]
    llvm_render._addresses.pop(key, None)
    llvm_render.compile_ir(key, render)
    assert llvm_render.stats["compiled"] == c0 + 1
    assert llvm_render._read_cached(path) is not None      # rewritten, valid
    h0 = llvm_render.stats["disk_hits"]
    llvm_render._addresses.pop(key, None)
    llvm_render.compile_ir(key, render)
    assert llvm_render.stats["disk_hits"] == h0 + 1


@_LLVM
def test_second_process_renders_and_compiles_nothing(tmp_path):
    script = textwrap.dedent("""
        import neetorch as nee
        import neetorch.nn.functional as F
        from neetorch.devices.cpu import codegen, llvm_render
        f = nee.jit(lambda x, m: F.gelu(x * 0.5 + 1).masked_fill(m, 0.0) - x.sigmoid())
        x = nee.randn(64, 32)
        f(x, x > 1)
        f(x.t(), x.t() > 1)     # a strided layout: its own loop
        print(codegen.stats["compiled"], codegen.stats["disk_hits"], llvm_render.stats["compiled"])
    """)
    env = dict(os.environ, NEE_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_CACHE_DIR", None)
    r1 = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    r2 = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    c1, _, l1 = map(int, r1.stdout.split())
    c2, h2, l2 = map(int, r2.stdout.split())
    assert l1 >= 2 and c1 >= l1          # the fused kernels went through llvm
    assert c2 == 0 and l2 == 0 and h2 == c1
