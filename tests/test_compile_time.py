"""What makes compiling fast, asserted by counts (never by wall-clock): a metadata-only trace
runs and compiles no kernels; the LLVM IR renderer builds the elementwise kernels, gives the
Numba renderer's results bit for bit, and its disk cache is reused and self-repairing; the row kernels
(softmax / log_softmax / layer_norm / rms_norm, alone or after a fused prologue) run as IR and match numpy;
in-place elementwise launches are exact."""
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
    # a call the renderer does not translate (np.hypot: libm's hypot in Numba) raises, so the Numba
    # renderer builds that kernel; ``if`` helpers (sin's huge-argument path) are translated now
    u0 = llvm_render.stats["unsupported"]
    with pytest.raises(NotImplementedError):
        llvm_render.load("t", "hypot", ["float32", "float32"], ["float32"], [], ["np.hypot(v0, v1)"], "")
    assert llvm_render.stats["unsupported"] == u0 + 1
    llvm_render.load("t", "sin", ["float32"], ["float32"], [], ["f_sin32(v0)"], "")
    x, y = nee.linspace(-3, 3, 50), nee.linspace(1, 9, 50)
    np.testing.assert_allclose(nee.hypot(x, y).numpy(), np.hypot(x.numpy(), y.numpy()), rtol=1e-6)
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
        from neetorch.devices.cpu.kernels import nn
        f = nee.jit(lambda x, m: F.gelu(x * 0.5 + 1).masked_fill(m, 0.0) - x.sigmoid())
        x = nee.randn(64, 32)
        f(x, x > 1)
        f(x.t(), x.t() > 1)     # a strided layout: its own loop
        g = nee.jit(lambda x: (F.softmax(x * 0.5, dim=-1), F.layer_norm(x, (32,))))   # row kernels
        g(x)
        numba_rows = len(nn._softmax_rows.signatures) + len(nn._norm_rows.signatures)
        print(codegen.stats["compiled"], codegen.stats["disk_hits"], llvm_render.stats["compiled"], numba_rows)
    """)
    env = dict(os.environ, NEE_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_CACHE_DIR", None)
    r1 = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    r2 = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    c1, _, l1, n1 = map(int, r1.stdout.split())
    c2, h2, l2, n2 = map(int, r2.stdout.split())
    assert l1 >= 4 and c1 >= l1          # the fused and row kernels went through llvm
    assert c2 == 0 and l2 == 0 and h2 == c1
    assert n1 == n2 == 0                 # no Numba row kernel compiled or loaded


# ------------------------------------------------------------------ row kernels as LLVM IR
def _ref_rows(mode, x, w=None, b=None, eps=1e-5, safe=False):
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if mode in ("softmax", "log_softmax"):
            m = x.max(-1, keepdims=True)
            lse = np.log(np.exp(x - m).sum(-1, keepdims=True))
            r = np.exp(x - m - lse) if mode == "softmax" else x - m - lse
            if safe:
                r = np.where(np.isneginf(m), 0.0, r)
            return r
        if mode == "layer_norm":
            r = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
        else:
            r = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
        return r * w + b


@pytest.fixture
def no_numba_rows(monkeypatch):
    """The Numba row kernels raise: whatever passes ran the IR row kernels."""
    from neetorch.devices.cpu.kernels import nn

    def refuse(*a):
        raise AssertionError("the Numba row kernel ran")
    for name in ("_softmax_rows", "_norm_rows"):
        monkeypatch.setattr(nn, name, refuse)


@_LLVM
@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["softmax", "log_softmax"])
def test_ir_softmax_rows_match_numpy(mode, dt, no_numba_rows):
    from neetorch.devices.cpu.kernels.nn import softmax_launch
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((6, 7, 300)) * 30).astype(dt)
    x[0, 0, :5] = -np.inf                 # some -inf entries
    x[0, 1] = -np.inf                     # a whole -inf row: NaN, or zeros when "safe"
    x[0, 2, 7] = np.nan                   # NaN row
    x[0, 3, 1] = 1e30
    x[0, 4] = -1e4                        # constant row; exp of the others underflows (flushed to 0)
    x[0, 4, 3] = 0
    # float32: x - max itself rounds (relative error ~|x - max| * 6e-8 in the exponent)
    tol = {"rtol": 1e-5, "atol": 1e-37} if dt == "float32" else {"rtol": 1e-13, "atol": 1e-300}
    if mode == "log_softmax":     # (x - max) - log(sum): absolute error ~ ulp of |x - max| (~100 here)
        tol["atol"] = 2e-5 if dt == "float32" else 1e-12
    for safe in (False, True):
        for v in (x, x[:, :, 10:260], x[:, ::2, 3:]):     # contiguous rows; rows at (a, b) strides
            o = np.empty(v.shape, dt)
            softmax_launch(v, o, 2, mode == "log_softmax", safe)
            np.testing.assert_allclose(o, _ref_rows(mode, v, safe=safe), **tol)
    big = rng.standard_normal((4096, 257)).astype(dt)  # split across the thread pool
    o = np.empty_like(big)
    softmax_launch(big, o, 1, mode == "log_softmax")
    np.testing.assert_allclose(o, _ref_rows(mode, big), **tol)


@_LLVM
@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_ir_norm_rows_match_numpy(mode, dt, no_numba_rows):
    from neetorch.devices.cpu.kernels.nn import norm_launch
    rng = np.random.default_rng(1)
    n = 333
    # a large offset: float64 moments, two-pass variance keep float32 rows accurate
    x = (rng.standard_normal((40, n + 5)) + 1000).astype(dt)[:, 2:n + 2]
    w, b = rng.standard_normal(n).astype(dt), rng.standard_normal(n).astype(dt)
    o = np.empty(x.shape, dt)
    norm_launch(x, o, w, b if mode == "layer_norm" else None, 40, 1, 1, n, True, 1e-5, mode == "rms_norm")
    # float32: the affine pass subtracts the mean rounded to float32 (half an ulp of 1000 = 3e-5,
    # times rstd ~1 and |w| < 4), like the Numba kernel; without the offset it is ~1e-6
    tol = {"rtol": 2e-5, "atol": 2e-4} if dt == "float32" else {"rtol": 1e-11, "atol": 1e-11}
    np.testing.assert_allclose(o, _ref_rows(mode, x, w, b if mode == "layer_norm" else 0.0), **tol)
    tol = {"rtol": 2e-5, "atol": 5e-6} if dt == "float32" else {"rtol": 1e-11, "atol": 1e-11}
    big = rng.standard_normal((2048, 512)).astype(dt)
    o = np.empty_like(big)
    norm_launch(big, o, None, None, 2048, 1, 1, 512, True, 1e-6, mode == "rms_norm")
    np.testing.assert_allclose(o, _ref_rows(mode, big, 1.0, 0.0, 1e-6), **tol)


@_LLVM
def test_ir_reduction_prologues_match_eager_and_numpy(no_numba_rows):
    # one IR row kernel per prologue (elementwise group + softmax / norm), at small sizes too
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((2, 4, 16, 48)).astype(np.float32)
    mk = rng.random((16, 48)) < 0.2
    g, be = rng.standard_normal(48).astype(np.float32), rng.standard_normal(48).astype(np.float32)

    def f(x, m, w, b):
        s = F.softmax((x * 0.125).masked_fill(m, float("-inf")), dim=-1)
        h = x + 1.5
        ln = F.layer_norm(h, (48,), w, b)
        ls = F.log_softmax(x.tanh() * 2, dim=-1)
        return s, h, ln, ls
    jf = nee.jit(f)
    args = (nee.tensor(xs), nee.tensor(mk), nee.tensor(g), nee.tensor(be))
    got = [t.numpy() for t in jf(*args)]
    for a, e in zip(got, jf.eager(*args)):
        np.testing.assert_allclose(a, e.numpy(), rtol=2e-6, atol=1e-7)
    x64 = xs.astype(np.float64)
    np.testing.assert_allclose(got[0], _ref_rows("softmax", np.where(mk, -np.inf, x64 * 0.125)), rtol=3e-6, atol=1e-30)
    np.testing.assert_allclose(got[2], _ref_rows("layer_norm", x64 + 1.5, g, be), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[3], _ref_rows("log_softmax", np.tanh(x64) * 2), rtol=1e-5, atol=1e-6)
    exe = jf._executable(args, {})[0]
    srcs = "\n".join(s for _, s in exe.kernels)
    assert srcs.count("LLVM IR row kernel") == 3 and srcs.count("; neetorch row kernel") == 3
    # float64 rms_norm after a gelu, the group's value needed nowhere else (the row scratch)
    h = nee.jit(lambda x, w: F.rms_norm(F.gelu(x), (64,), w))
    x, w = nee.randn(37, 64, dtype=nee.float64), nee.randn(64, dtype=nee.float64)
    np.testing.assert_allclose(h(x, w).numpy(), h.eager(x, w).numpy(), rtol=1e-12, atol=1e-12)


@_LLVM
def test_inplace_elementwise_loop_is_annotated_parallel_and_exact():
    # out is in (x += y) or disjoint: the loop runs annotated parallel (vectorized without
    # LLVM's alias check, which failed on exact aliasing); a partial overlap keeps the
    # sequential loop's semantics
    pieces = (["float32", "float32"], ["float32"], [], ["v0 + v1"])
    k, src = llvm_render.load("test_inplace", "add", *pieces, "")
    assert "llvm.loop.parallel_accesses" in src
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 1000)).astype(np.float32)
    b = rng.standard_normal((64, 1000)).astype(np.float32)
    want = a + b
    elementwise.run_strided(k, a, [a, b])
    np.testing.assert_array_equal(a, want)
    buf = np.zeros(1001, np.float32)
    ones = np.ones(1000, np.float32)
    elementwise.run_strided(k, buf[1:], [buf[:-1], ones])      # sequential: buf[i+1] = buf[i] + 1
    np.testing.assert_array_equal(buf, np.arange(1001, dtype=np.float32))
    x, y = nee.randn(128, 1024), nee.randn(128, 1024)
    x0 = x.numpy().copy()
    x += y
    np.testing.assert_array_equal(x.numpy(), x0 + y.numpy())


@_LLVM
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_llvm_libm_calls_equal_numba_bit_for_bit(dt):
    # libm calls (tan, lgamma, atan2), np.log2 and float ** float through the intrinsics Numba uses, and
    # float -> int casts (fptosi / fptoui): the LLVM kernel gives the Numba kernel's bits
    c = "np.float32" if dt == "float32" else "np.float64"
    ops = [f"t0 = {c}(np.tan(v0) + np.log2(abs(v1)))", f"t1 = {c}(math.lgamma(v0) - np.arctan2(v0, v1))",
           f"t2 = {c}(abs(v0) ** v1)", "t3 = np.int32(v0 * 1000)", "t4 = np.uint8(v1 * 10)",
           f"t5 = {c}(math.erfc(v0) + np.arcsin(v1 * 0.3) + np.arccos(v1 * 0.3) + np.arctan(v0) + np.sinh(v1))",
           f"t6 = {c}(np.cosh(v1) + np.arcsinh(v0) + np.arccosh(abs(v0) + 1) + np.arctanh(v1 * 0.3))",
           f"t7 = {c}(np.expm1(v1) + np.log1p(abs(v0)) + math.erf(v0) + np.log10(abs(v1)))"]
    res = ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"]
    out_dt = [dt, dt, dt, "int32", "uint8", dt, dt, dt]
    src = elementwise.render_group("libm_" + dt, [dt, dt], out_dt, ops, res)
    k_llvm, _ = llvm_render.load("test_libm", "libm_" + dt, [dt, dt], out_dt, ops, res, src)
    k_numba = codegen.load_kernel("test_libm", src)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(1031) * 4).astype(dt)
    y = (rng.standard_normal(1031) * 2).astype(dt)
    x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30]
    y[:6] = [0.0, 2.0, -np.inf, 0.5, 1.0, -0.0]
    got = [np.zeros(x.shape, d) for d in out_dt]
    want = [np.zeros(x.shape, d) for d in out_dt]
    with np.errstate(all="ignore"):
        elementwise.run_strided(k_llvm, got, [x, y])
        elementwise.run_strided(k_numba, want, [x, y])
    for name, g, w in zip(res, got, want):
        ok = (np.isfinite(x) & np.isfinite(y)) if name in ("t3", "t4") else slice(None)  # inf/nan casts: hardware-defined
        assert g[ok].tobytes() == w[ok].tobytes(), name
    np.testing.assert_allclose(got[0][6:], (np.tan(x) + np.log2(np.abs(y)))[6:], rtol=1e-5 if dt == "float32" else 1e-12)
