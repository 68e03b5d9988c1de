"""Fusion of matmul epilogues and of reduction prologues (jit/fusion.py, devices/cpu/kernels/fused.py):
kernel counts for the known patterns, and jitted == eager (and == numpy) for each."""
import math

import numpy as np
import pytest

import neetorch as nee
from neetorch.jit.fusion import MatmulEpilogue, ReductionPrologue

F = nee.nn.functional
VIEWS = ("reshape", "transpose", "t", "permute", "view", "expand", "unsqueeze", "squeeze", "getitem")


def _close(a, b, rtol=1e-5, atol=1e-6):
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=rtol, atol=atol)


def _kernels(f, *args):
    return [n.name for n in f.graph(*args).nodes if n.name not in VIEWS]


@pytest.fixture(params=["two launches", "single pass"])
def prologue_path(request, monkeypatch):
    """Reduction prologues run as two launches below fused.SINGLE_PASS_BYTES (all the small test
    shapes), else as one generated row kernel: every prologue test runs both."""
    from neetorch.devices.cpu.kernels import fused
    if request.param == "single pass":
        monkeypatch.setattr(fused, "SINGLE_PASS_BYTES", 0)
    return request.param


def _np_gelu(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf)(x / math.sqrt(2)))


# ------------------------------------------------------------------ matmul epilogues
def test_gelu_of_matmul_plus_bias_is_one_kernel():
    f = nee.jit(lambda x, w, b: F.gelu(x @ w + b))
    x, w, b = nee.randn(64, 32), nee.randn(32, 48), nee.randn(48)
    _close(f(x, w, b), f.eager(x, w, b))
    assert _kernels(f, x, w, b) == ["matmul+fused[add+gelu]"]
    node = f.graph(x, w, b).nodes[0]
    assert isinstance(node.op, MatmulEpilogue)
    ref = _np_gelu(x.numpy().astype(np.float64) @ w.numpy() + b.numpy())
    np.testing.assert_allclose(f(x, w, b).numpy(), ref, rtol=1e-4, atol=1e-5)


def test_linear_relu_batched_noncontiguous_and_float64():
    w, b = nee.randn(24, 16), nee.randn(24)
    f = nee.jit(lambda x: F.relu(F.linear(x, w, b)))
    x = nee.randn(3, 16, 5).transpose(1, 2)          # (3, 5, 16), not contiguous
    _close(f(x), f.eager(x))
    assert _kernels(f, x) == ["matmul+fused[add+relu]"]
    ref = np.maximum(x.numpy() @ w.numpy().T + b.numpy(), 0)
    np.testing.assert_allclose(f(x).numpy(), ref, rtol=1e-5, atol=1e-5)
    w64, b64 = w.to(nee.float64), b.to(nee.float64)
    g = nee.jit(lambda x: F.linear(x, w64, b64) * 2)
    x64 = nee.randn(7, 16, dtype=nee.float64)
    _close(g(x64), g.eager(x64), rtol=1e-12, atol=1e-12)
    assert _kernels(g, x64) == ["matmul+fused[add+mul]"]


def test_epilogue_with_several_outputs_and_a_bool_output():
    w = nee.randn(8, 6)

    def fn(x):
        y = x @ w + 1.0
        return y.relu(), y * y, y > 0
    f = nee.jit(fn)
    x = nee.randn(10, 8)
    _close(f(x), f.eager(x))
    assert len(_kernels(f, x)) == 1
    # only a bool comes out: the product goes to a scratch buffer
    g = nee.jit(lambda x: (x @ w) > 0.5)
    _close(g(x), g.eager(x))
    assert _kernels(g, x) == ["matmul+fused[gt]"]


def test_product_used_twice_or_broadcast_is_not_fused():
    w = nee.randn(8, 6)
    f = nee.jit(lambda x: (lambda y: (y, y + 1))(x @ w))
    x = nee.randn(5, 8)
    _close(f(x), f.eager(x))
    assert _kernels(f, x) == ["matmul", "add"]
    big = nee.randn(4, 5, 6)
    g = nee.jit(lambda x: (x @ w) + big)        # the epilogue broadcasts the product to (4, 5, 6)
    _close(g(x), g.eager(x))
    assert _kernels(g, x) == ["matmul", "add"]


def test_blocked_gemm_and_epilogue(monkeypatch):
    from neetorch.devices.cpu.kernels import fused
    monkeypatch.setattr(fused, "BLOCK_BYTES", 1024)      # blocks of 256 rows
    monkeypatch.setattr(fused, "IN_BLOCK_EPILOGUE", [False])   # the Python blocks, not the driver's
    w, b = nee.randn(24, 16), nee.randn(24)
    f = nee.jit(lambda x, r: F.gelu(F.linear(x, w, b)) + r)
    x, r = nee.randn(2, 700, 16), nee.randn(700, 1)
    _close(f(x, r), f.eager(x, r), rtol=1e-5, atol=1e-5)
    assert _kernels(f, x, r) == ["matmul+fused[add+gelu+add]"]


@pytest.fixture
def in_block(monkeypatch):
    """Counts the products whose elementwise epilogue ran inside the GEMM driver's blocks
    (fused._InBlockEpilogue) and those that fell back to the separate launch."""
    from neetorch.devices.cpu import elementwise, gemm_driver
    from neetorch.devices.cpu.kernels import fused
    if elementwise.RENDERER != "llvm" or not gemm_driver.available():
        pytest.skip("no in-block epilogues: NEE_CPU_RENDERER=numba or no GEMM driver here")
    monkeypatch.setattr(fused, "IN_BLOCK_EPILOGUE", [True])
    seen = {"native": 0, "fallback": 0}
    for cls in (fused._InBlockEpilogue, fused._InBlockRows):
        if "__call__" not in vars(cls):
            continue        # (inherited: counted through its base's spy)

        def spy(self, outs, ins, real=cls.__call__):
            r = real(self, outs, ins)
            seen["native" if r else "fallback"] += 1
            return r
        monkeypatch.setattr(cls, "__call__", spy)
    return seen


@pytest.fixture(params=[1, 2, 3])
def nthreads(request, monkeypatch):
    """1-3 threads, with every float product split across them (the driver's thresholds at 0)."""
    from neetorch.devices.cpu.kernels import linalg
    monkeypatch.setattr(linalg, "DRV_MNK", 0)
    monkeypatch.setattr(linalg, "DRV_GEMV_BYTES", 0)
    monkeypatch.setattr(linalg, "_plans", {})
    # (the driver's blocks are what these tests check: since session 29 the packed kernel also takes widths that
    # are not a multiple of its panel, such as the "cols" case's 203)
    monkeypatch.setattr(linalg, "PK_ON", [False])
    old = nee.get_num_threads()
    nee.set_num_threads(request.param)
    yield request.param
    nee.set_num_threads(old)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", ["rows", "cols", "batched", "noncontig", "bcast_residual"])
def test_epilogue_in_gemm_blocks_matches_eager(in_block, nthreads, dtype, case):
    """The epilogue run by the GEMM driver on each block (row blocks, column blocks, whole matrices
    of a batch) == eager, at odd sizes, on 1-3 threads; float64 too."""
    dt = getattr(nee, dtype)
    if case == "batched":      # (B, n, k) @ (B, k, m): blocks are matrices (or parts of them)
        a, b2, r = nee.randn(3, 37, 19, dtype=dt), nee.randn(3, 19, 53, dtype=dt), nee.randn(53, dtype=dt)
        f = nee.jit(lambda a, b2, r: F.gelu(a @ b2) * r)
        args = (a, b2, r)
    else:
        rows, k, n = {"rows": (301, 17, 33), "cols": (37, 19, 203), "noncontig": (45, 16, 71),
                      "bcast_residual": (2 * 29, 23, 47)}[case]
        w, bias = nee.randn(n, k, dtype=dt), nee.randn(n, dtype=dt)
        x = nee.randn(rows, k, dtype=dt)
        if case == "noncontig":
            x = nee.randn(k, rows, dtype=dt).t()          # a transposed (column-major) activation
        res = nee.randn(rows, 1, dtype=dt) if case == "bcast_residual" else nee.randn(rows, n, dtype=dt)
        f = nee.jit(lambda x, res: F.gelu(F.linear(x, w, bias)) + res)
        args = (x, res)
    for _ in range(2):    # the plan is made by the first call, reused by the second
        tol = 1e-5 if dtype == "float32" else 1e-12
        _close(f(*args), f.eager(*args), rtol=tol, atol=tol)
        args = tuple(nee.randn(*t.shape, dtype=dt) if t.ndim > 1 else t for t in args)
    assert in_block["native"] == 2 and in_block["fallback"] == 0


def test_epilogue_in_gemm_blocks_several_outputs_and_fallbacks(in_block, nthreads, monkeypatch):
    """An epilogue with two outputs (one bool) in the blocks; the separate launch (same results)
    when the driver is off, for a matrix-vector product below the split size, and with the switch off."""
    from neetorch.devices.cpu.kernels import fused, linalg
    w = nee.randn(40, 27)

    def fn(x):
        y = x @ w + 1.0
        return y.relu(), y > 0
    f = nee.jit(fn)
    x = nee.randn(33, 40)
    _close(f(x), f.eager(x))
    assert in_block == {"native": 1, "fallback": 0}
    monkeypatch.setenv("NEE_MATMUL_DRIVER", "0")
    g = nee.jit(fn)
    _close(g(x), g.eager(x))
    assert in_block == {"native": 1, "fallback": 1}
    monkeypatch.delenv("NEE_MATMUL_DRIVER")
    monkeypatch.setattr(linalg, "DRV_GEMV_BYTES", 1 << 30)
    v = nee.jit(lambda x: F.relu(x @ w) + 1)
    x1 = nee.randn(1, 40)
    _close(v(x1), v.eager(x1))
    assert in_block == {"native": 1, "fallback": 2}
    monkeypatch.setattr(fused, "IN_BLOCK_EPILOGUE", [False])     # the switch off: not even tried
    u = nee.jit(lambda x: F.relu(x @ w) - 1)
    _close(u(x), u.eager(x))
    assert in_block == {"native": 1, "fallback": 2}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_prologue_in_gemm_blocks_matches_eager(in_block, nthreads, dtype):
    """Softmax / log_softmax / layer_norm after a product run by the GEMM driver on each block's
    whole rows (the matrices of a batch, row blocks; a product the driver cuts into column blocks
    is re-cut into rows) == eager, at odd sizes on 1-3 threads; too few rows to re-cut: the
    separate launch."""
    dt = getattr(nee, dtype)
    tol = 1e-5 if dtype == "float32" else 1e-12
    mask = nee.tensor(np.tril(np.ones((37, 37), bool)))
    q, k = nee.randn(1, 3, 37, 16, dtype=dt), nee.randn(1, 3, 37, 16, dtype=dt)
    for fn in (F.softmax, F.log_softmax):
        f = nee.jit(lambda q, k, fn=fn: fn(nee.where(mask, (q @ k.transpose(-2, -1)) * 0.25, float("-inf")), dim=-1))
        _close(f(q, k), f.eager(q, k), rtol=tol, atol=tol)
        q2 = nee.randn(1, 3, 37, 16, dtype=dt)
        _close(f(q2, k), f.eager(q2, k), rtol=tol, atol=tol)
    assert in_block == {"native": 4, "fallback": 0}
    w, g, bb = nee.randn(24, 40, dtype=dt), nee.randn(40, dtype=dt), nee.randn(40, dtype=dt)

    def res_norm(x, r):                  # the residual sum is an output too
        y = x @ w + r
        return y, F.layer_norm(y, (40,), g, bb)
    f = nee.jit(res_norm)
    x, r = nee.randn(45, 24, dtype=dt), nee.randn(45, 40, dtype=dt)     # 45 rows > 40 cols: row blocks
    _close(f(x, r), f.eager(x, r), rtol=tol, atol=tol)
    assert in_block == {"native": 5, "fallback": 0}
    g.mul_(2.0)                          # the norm's weight is read in place at every call
    _close(f(x, r), f.eager(x, r), rtol=tol, atol=tol)
    w2 = nee.randn(24, 64, dtype=dt)
    g2 = nee.jit(lambda x: F.layer_norm(x @ w2 + 1.0, (64,)))
    x = nee.randn(40, 24, dtype=dt)       # 40 rows < 64 cols: the driver's column blocks, re-cut into rows
    _close(g2(x), g2.eager(x), rtol=tol, atol=tol)
    assert in_block == {"native": 7, "fallback": 0}
    x, r = nee.randn(20, 24, dtype=dt), nee.randn(20, 40, dtype=dt)     # 20 rows: too few to re-cut
    _close(f(x, r), f.eager(x, r), rtol=tol, atol=tol)
    if nthreads == 1:      # one block: whole rows
        assert in_block == {"native": 8, "fallback": 0}
    else:
        assert in_block == {"native": 7, "fallback": 1}


def test_row_prologue_with_a_weight_larger_than_its_output_runs_after_the_product(in_block, nthreads):
    """Row blocks each pack all of the weight: with 2+ threads and a weight over ROW_SPLIT_PACK_RATIO
    times the output's bytes (a wide-K product: BERT's FF2) the product keeps its column blocks and
    the norm runs as its own launch; one thread runs it in its one block.  Exact either way."""
    from neetorch.devices.cpu.kernels import fused
    w, g, bb = nee.randn(300, 64), nee.randn(64), nee.randn(64)       # 75 KB of weight
    f = nee.jit(lambda x, r: F.layer_norm(x @ w + r, (64,), g, bb))
    x, r = nee.randn(40, 300), nee.randn(40, 64)                      # 10 KB of output; 40 rows < 64 cols:
    assert (2 - 1) * 300 * 64 > fused.ROW_SPLIT_PACK_RATIO * 40 * 64  # column blocks, not re-cut into rows
    for _ in range(2):
        _close(f(x, r), f.eager(x, r), rtol=1e-5, atol=1e-5)
        x = nee.randn(40, 300)
    if nthreads == 1:
        assert in_block == {"native": 2, "fallback": 0}
    else:                  # the first call's fallback is remembered by the step
        assert in_block["native"] == 0 and in_block["fallback"] >= 1


def test_in_block_epilogues_from_concurrent_threads(in_block, nthreads):
    """Python threads running jitted products with in-block epilogues at once: one job holds the
    driver, the others run their blocks themselves (each with its own operands); all exact."""
    import threading
    w, bias = nee.randn(48, 40), nee.randn(40)
    mask = nee.tensor(np.tril(np.ones((33, 33), bool)))
    f = nee.jit(lambda x, r: F.gelu(x @ w + bias) + r)
    g = nee.jit(lambda q: F.softmax(nee.where(mask, q @ q.transpose(-2, -1), float("-inf")), dim=-1))
    errors = []

    def work(seed):
        try:
            for _ in range(15):
                x, r, q = nee.randn(61, 48), nee.randn(61, 40), nee.randn(2, 33, 8)
                _close(f(x, r), f.eager(x, r))
                _close(g(q), g.eager(q))
        except Exception as e:   # noqa: BLE001 - reported below
            errors.append(e)
    ths = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert not errors, errors[0]
    assert in_block["native"] == 90 and in_block["fallback"] == 0


# ------------------------------------------------------------------ reduction prologues
def test_layer_norm_alone_and_with_residual_add(prologue_path):
    g, bb = nee.randn(32), nee.randn(32)
    ln = nee.jit(lambda x: F.layer_norm(x, (32,), g, bb))
    x, y = nee.randn(64, 32), nee.randn(64, 32)
    _close(ln(x), ln.eager(x), rtol=1e-5, atol=1e-5)
    assert len(_kernels(ln, x)) <= 2

    def block(x, y):
        s = x + y * 0.5
        return s, F.layer_norm(s, (32,), g, bb)
    f = nee.jit(block)
    _close(f(x, y), f.eager(x, y), rtol=1e-5, atol=1e-5)
    nodes = f.graph(x, y).nodes
    assert [n.name for n in nodes] == ["fused[mul+add]+layer_norm"]
    assert isinstance(nodes[0].op, ReductionPrologue)
    s = x.numpy().astype(np.float64) + y.numpy() * 0.5
    m, v = s.mean(-1, keepdims=True), s.var(-1, keepdims=True)
    np.testing.assert_allclose(f(x, y)[1].numpy(), (s - m) / np.sqrt(v + 1e-5) * g.numpy() + bb.numpy(),
                               rtol=1e-4, atol=1e-4)


def test_norm_prologues_multi_dim_no_affine_rms_and_broadcast_operands(prologue_path):
    x, y = nee.randn(6, 4, 8), nee.randn(4, 1)      # y broadcasts: no (rows, 32) view, read through a copy
    f = nee.jit(lambda x, y: F.layer_norm((x - y).relu(), (4, 8)))
    _close(f(x, y), f.eager(x, y), rtol=1e-5, atol=1e-5)
    assert _kernels(f, x, y) == ["fused[sub+relu]+layer_norm"]
    x4 = nee.randn(2, 3, 4, 8).transpose(0, 1)       # (3, 2, 4, 8), rows over two non-merging dims
    _close(f(x4, y), f.eager(x4, y), rtol=1e-5, atol=1e-5)
    w = nee.randn(8)
    r = nee.jit(lambda x, y: F.rms_norm(x * y, (8,), w))
    y2 = nee.randn(1, 4, 8)
    _close(r(x, y2), r.eager(x, y2), rtol=1e-5, atol=1e-5)
    assert _kernels(r, x, y2) == ["fused[mul]+rms_norm"]


def test_softmax_and_log_softmax_prologues(prologue_path):
    x, mask = nee.randn(3, 5, 40), nee.randn(5, 40)
    f = nee.jit(lambda x, m: F.softmax(x * 0.125 + m, dim=-1))
    _close(f(x, mask), f.eager(x, mask))
    assert _kernels(f, x, mask) == ["fused[mul+add]+softmax"]
    ref = x.numpy().astype(np.float64) * 0.125 + mask.numpy()
    ref = np.exp(ref - ref.max(-1, keepdims=True))
    np.testing.assert_allclose(f(x, mask).numpy(), ref / ref.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    g = nee.jit(lambda x: F.log_softmax(x.exp(), dim=2))
    _close(g(x), g.eager(x), rtol=1e-5, atol=1e-5)
    assert _kernels(g, x) == ["fused[exp]+log_softmax"]
    h = nee.jit(lambda x: F.softmax(x * 2, dim=1))     # not the last dim: not a row prologue
    _close(h(x), h.eager(x))
    assert _kernels(h, x) == ["mul", "softmax"]


def test_prologue_value_read_before_the_reduction_is_not_fused(prologue_path):
    def fn(x, y):
        s = x + y
        t = s.sum(-1, keepdim=True)           # reads s before the softmax runs
        return F.softmax(s, dim=-1) * t
    f = nee.jit(fn)
    x, y = nee.randn(4, 16), nee.randn(4, 16)
    _close(f(x, y), f.eager(x, y), rtol=1e-5, atol=1e-5)
    assert "add" in _kernels(f, x, y)


def test_attention_scores_mask_and_softmax_after_matmul(prologue_path):
    q, k, v = nee.randn(1, 2, 16, 8), nee.randn(1, 2, 16, 8), nee.randn(1, 2, 16, 8)
    f = nee.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    _close(f(q, k, v), f.eager(q, k, v), rtol=1e-5, atol=1e-6)
    assert "matmul+fused[where]+softmax" in _kernels(f, q, k, v)
    # rows with every position masked give zeros, like eager (the safe softmax)
    keep = nee.ones(16, 16, dtype=nee.bool)
    keep[3] = False
    g = nee.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=keep))
    out = g(q, k, v)
    _close(out, g.eager(q, k, v), rtol=1e-5, atol=1e-6)
    assert np.all(out.numpy()[:, :, 3] == 0)


def test_transformer_block_kernel_count_and_result(prologue_path):
    from asv_benchmarks.bench_jit import transformer_block
    blk, (x,) = transformer_block(nee, 16, 32, 4)
    f = nee.jit(blk)
    _close(f(x), blk(x), rtol=1e-4, atol=1e-5)
    ks = _kernels(f, x)
    # layer_norm, q/k/v, q*scale, scores+mask+softmax, @v, (transpose copy), out-proj+residual+layer_norm,
    # MLP up (+gelu), MLP down (+residual)
    assert "matmul+fused[add+add]+layer_norm" in ks and "matmul+fused[add+gelu]" in ks
    assert len(ks) <= 10, ks


def test_dynamic_rows_with_epilogue_and_prologue(prologue_path):
    w, b, g = nee.randn(16, 8), nee.randn(16), nee.randn(16)

    def fn(x, r):
        h = F.gelu(F.linear(x, w, b))
        return F.layer_norm(h + r, (16,), g)
    f = nee.jit(fn, dynamic={0: 0, 1: 0})
    for n in (3, 4, 9, 13, 16):
        x, r = nee.randn(n, 8), nee.randn(n, 16)
        _close(f(x, r), f.eager(x, r), rtol=1e-5, atol=1e-5)
    assert f.stats["specializations"] <= 3


# ------------------------------------------------------------------ elementwise ops hoisted over views
def test_scale_of_a_head_view_joins_the_projection_epilogue():
    w, b = nee.randn(32, 16), nee.randn(32)

    k = nee.randn(1, 4, 8, 6)

    def fn(x):
        q = F.linear(x, w, b).reshape(1, 6, 4, 8).transpose(1, 2)
        return (q * 0.25) @ k
    f = nee.jit(fn)
    x = nee.randn(1, 6, 16)
    _close(f(x), f.eager(x))
    assert [n.name for n in f.graph(x).nodes] == ["matmul+fused[add+mul]", "reshape", "transpose", "matmul"]
    # a returned result is left alone (eager returns a fresh tensor there, laid out like the transposed view as
    # torch's is: strides (192, 8, 32, 1))
    g = nee.jit(lambda x: F.linear(x, w, b).reshape(1, 6, 4, 8).transpose(1, 2) * 0.25)
    _close(g(x), g.eager(x))
    assert g(x).stride() == g.eager(x).stride() and _kernels(g, x) == ["matmul+fused[add]", "mul"]


def test_view_read_twice_or_tensor_operand_is_not_hoisted():
    w = nee.randn(16, 12)

    def twice(x):
        v = (x @ w).t()
        return v * 2.0, v + 1.0
    f = nee.jit(twice)
    x = nee.randn(5, 16)
    _close(f(x), f.eager(x))
    assert _kernels(f, x)[0] == "matmul"
    y = nee.randn(12, 5)
    g = nee.jit(lambda x, y: (x @ w).t() * y)
    _close(g(x, y), g.eager(x, y))
    assert _kernels(g, x, y) == ["matmul", "mul"]


def test_empty_rows_through_epilogue_and_prologue(prologue_path):
    w, b, g = nee.randn(8, 6), nee.randn(6), nee.randn(6)
    f = nee.jit(lambda x: F.layer_norm(F.relu(x @ w + b), (6,), g))
    x = nee.randn(0, 8)
    out = f(x)
    assert out.shape == (0, 6)
    _close(out, f.eager(x))


def test_conv2d_bias_relu_epilogue():
    w, b = nee.randn(6, 3, 3, 3), nee.randn(6)
    f = nee.jit(lambda x: F.relu(F.conv2d(x, w, b, padding=1)) * 0.5)
    x = nee.randn(2, 3, 9, 7)
    _close(f(x), f.eager(x), rtol=1e-5, atol=1e-5)
    assert _kernels(f, x) == ["conv2d+fused[relu+mul]"]
    tw, tb, tx = (torch_from(t) for t in (w, b, x))
    import torch
    ref = torch.relu(torch.nn.functional.conv2d(tx, tw, tb, padding=1)) * 0.5
    np.testing.assert_allclose(f(x).numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


def torch_from(t):
    torch = pytest.importorskip("torch")
    return torch.from_numpy(t.numpy().copy())


def test_small_products_run_on_one_blas_thread_and_restore_it():
    from neetorch.devices.cpu.kernels import linalg as L
    a, b = np.random.default_rng(0).standard_normal((2, 3, 16, 8)).astype(np.float32), \
        np.random.default_rng(1).standard_normal((8, 5)).astype(np.float32)
    out = np.empty((2, 3, 16, 5), np.float32)
    L.matmul_into(out, a, b)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    if L._set_threads_local is None:
        pytest.skip("numpy's OpenBLAS has no openblas_set_num_threads_local")
    before = L._set_threads_local(0)
    L._set_threads_local(before)
    L.matmul_into(out, a, b)
    assert L._set_threads_local(before) == before     # the per-thread setting came back
