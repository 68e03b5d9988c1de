"""The compiled graph's fast path: dynamic executables called at their traced shape, cached views,
and the fused kernels' layout shortcuts — each checked against eager / torch."""
import numpy as np
import pytest

import neetorch as nee

F = nee.nn.functional


def _t(rng, *s):
    return rng.standard_normal(s).astype(np.float32)


def test_dynamic_executable_fast_path_at_traced_shape_and_other_sizes():
    # sizes alternate between the bucket's top (the traced and planned shape: fast path)
    # and smaller ones (the generic path); every result must equal eager
    rng = np.random.default_rng(0)
    W = nee.from_numpy(_t(rng, 16, 16))

    def fn(x, y):
        h = F.layer_norm(x @ W + y, (16,))
        return nee.cat([h, y], 1).permute(1, 0), h.sum(0)

    f = nee.jit(fn, dynamic={0: 0, 1: 0})
    for n in (8, 5, 8, 7, 8, 8, 3, 8):
        x, y = nee.from_numpy(_t(rng, n, 16)), nee.from_numpy(_t(rng, n, 16))
        got, ref = f(x, y), fn(x, y)
        for g, r in zip(got, ref):
            assert tuple(g.shape) == tuple(r.shape)
            np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-5, atol=1e-5)


def test_view_of_a_graph_input_is_never_reused_across_calls():
    f = nee.jit(lambda x: x.transpose(0, 1) * 2 + x.sum())
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((2, 3), np.float32) * 5
    for arr in (a, b, a):
        np.testing.assert_allclose(f(nee.from_numpy(arr)).numpy(), arr.T * 2 + arr.sum())


def test_returned_views_stay_valid_after_later_calls():
    f = nee.jit(lambda x: (x * 3).reshape(-1).narrow(0, 1, 4))
    r1 = f(nee.from_numpy(np.arange(6, dtype=np.float32)))
    r2 = f(nee.from_numpy(np.arange(6, dtype=np.float32) + 10))
    np.testing.assert_allclose(r1.numpy(), [3, 6, 9, 12])
    np.testing.assert_allclose(r2.numpy(), [33, 36, 39, 42])


def test_fused_prologue_layout_shortcuts(torch_mod):
    torch, TF = torch_mod, torch_mod.nn.functional
    rng = np.random.default_rng(0)
    x, r, v, w, b, m = _t(rng, 2, 3, 4, 8), _t(rng, 4, 8), _t(rng, 8), _t(rng, 4, 8), _t(rng, 4, 8), _t(rng, 2, 3, 1, 8)
    n, t = nee.from_numpy, torch.from_numpy
    f = nee.jit(lambda x, r, v, w, b: F.layer_norm(x * 2 + r + v, (4, 8), w, b))
    ref = TF.layer_norm(t(x) * 2 + t(r) + t(v), (4, 8), t(w), t(b))
    for _ in range(2):
        np.testing.assert_allclose(f(n(x), n(r), n(v), n(w), n(b)).numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
    g = nee.jit(lambda x, v, m: F.softmax(x * v + m, -1))
    ref = TF.softmax(t(x) * t(v) + t(m), -1)
    for _ in range(2):
        np.testing.assert_allclose(g(n(x), n(v), n(m)).numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    W, bb = _t(rng, 8, 8), _t(rng, 8)
    h = nee.jit(lambda x, W, bb, v: F.layer_norm(x @ W + bb + v, (8,)))
    ref = TF.layer_norm(t(x) @ t(W) + t(bb) + t(v), (8,))
    for _ in range(2):
        np.testing.assert_allclose(h(n(x), n(W), n(bb), n(v)).numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
    assert len(h.graph(n(x), n(W), n(bb), n(v)).nodes) == 1   # matmul + epilogue + layer_norm: one kernel


# ------------------------------------------------------------------ bound steps
# A compiled graph's fused steps (matmul epilogues, reduction prologues, elementwise groups) are
# bound after their first run at a layout (jit/executable.py _bound_runner, kernels/fused.py bind):
# later calls pass the arrays straight to the kernels.  They must still follow new input values,
# new input layouts (a transposed input of the same shape), fresh output buffers and thread-count
# changes, and give what eager gives.

def _decoder_like(rng, d=32, dtype=np.float32):
    W1, b1, W2, g, bb = (nee.from_numpy(_t(rng, *s).astype(dtype))
                         for s in ((d, 3 * d), (3 * d,), (3 * d, d), (d,), (d,)))
    Wh = nee.from_numpy(_t(rng, 48, d).astype(dtype))

    def fn(x, r):
        # a norm of a graph input (a kernel step of its own), then a product + elementwise epilogue
        h = F.gelu(F.layer_norm(x, (d,), g, bb) @ W1 + b1)
        y = F.layer_norm(h @ W2 + r + x, (d,), g, bb)  # product + residuals + layer_norm (row prologue)
        z = (y * 2 + r).exp() - r                      # an elementwise group on its own
        u = z * r
        # a product alone (a transposed weight), returned; a single elementwise op after a reduction;
        # a group with two outputs
        return y, z.sum(-1, keepdim=True) + u.tanh(), y @ Wh.t(), u, u.sigmoid()
    return fn


@pytest.mark.parametrize("rows,dtype", [(1, np.float32), (3, np.float32), (37, np.float32), (1, np.float64)])
def test_bound_steps_follow_values_layouts_and_threads(rows, dtype):
    # rows: the few-row kernel (1, 3), the GEMM driver's blocks (37)
    rng = np.random.default_rng(1)
    fn = _decoder_like(rng, dtype=dtype)
    f = nee.jit(fn)
    old = nee.get_num_threads()
    try:
        results = []
        for k in range(7):
            if k == 5:
                nee.set_num_threads(1 if old > 1 else 2)   # plans depend on the thread count
            x = _t(rng, rows, 32).astype(dtype)
            if k == 2:          # the same shape, transposed memory: the steps reading x re-bind
                x = np.ascontiguousarray(x.T).T
            if k == 3:          # every other column of a wider array
                x = np.repeat(x, 2, axis=1)[:, ::2]
            if k == 4:          # negative strides (kernels get these from a flat buffer at an offset)
                x = np.ascontiguousarray(x[::-1, ::-1])[::-1, ::-1]
            xt, rt = nee.from_numpy(x), nee.from_numpy(_t(rng, rows, 32).astype(dtype))
            got, ref = f(xt, rt), fn(xt, rt)
            for g, r in zip(got, ref):
                np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-4, atol=1e-5)
            results.append(([g.numpy().copy() for g in got], got))
        for want, got in results:     # returned outputs are fresh buffers, never overwritten by later calls
            for w, g in zip(want, got):
                np.testing.assert_array_equal(g.numpy(), w)
    finally:
        nee.set_num_threads(old)


def test_bound_steps_skip_the_per_call_analysis(monkeypatch):
    """After the first call, a one-row product's step calls the few-row kernel straight, without
    linalg._rows_product's layout key (what makes a jitted decode step cost its kernels' time)."""
    from neetorch.devices.cpu.kernels import linalg
    if not linalg._ROWS_ON:
        pytest.skip("NEE_MATMUL_ROWS=0: products go through matmul_into")
    rng = np.random.default_rng(2)
    W, b = nee.from_numpy(_t(rng, 64, 64)), nee.from_numpy(_t(rng, 64))
    f = nee.jit(lambda x: F.relu(F.relu(x @ W + b) @ W + b))
    xs = [nee.from_numpy(_t(rng, 1, 64)) for _ in range(4)]
    refs = [f.eager(x).numpy() for x in xs]
    calls = []
    real = linalg._rows_product
    monkeypatch.setattr(linalg, "_rows_product", lambda *a: calls.append(1) or real(*a))
    np.testing.assert_allclose(f(xs[0]).numpy(), refs[0], rtol=1e-5, atol=1e-5)
    assert len(calls) == 2      # the two products went through the few-row path on the first call
    for x, ref in zip(xs[1:], refs[1:]):
        np.testing.assert_allclose(f(x).numpy(), ref, rtol=1e-5, atol=1e-5)
    assert len(calls) == 2


def test_bound_steps_are_per_thread():
    import threading
    rng = np.random.default_rng(3)
    fn = _decoder_like(rng)
    f = nee.jit(fn)
    xs = [(nee.from_numpy(_t(rng, 1, 32)), nee.from_numpy(_t(rng, 1, 32))) for _ in range(4)]
    refs = [fn(*a) for a in xs]
    errors = []

    def work(k):
        try:
            for _ in range(20):
                for a, ref in zip(xs[k:] + xs[:k], refs[k:] + refs[:k]):
                    for g, r in zip(f(*a), ref):
                        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-4, atol=1e-5)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


def test_bound_dynamic_executable_between_sizes():
    """A shape-polymorphic executable: the fast (bound) path at the traced size, the generic path at
    others, alternating; the bound steps must not keep anything from the other sizes' calls."""
    rng = np.random.default_rng(4)
    fn = _decoder_like(rng)
    f = nee.jit(fn, dynamic={0: 0, 1: 0})
    for n in (8, 5, 8, 8, 3, 8, 6, 8):
        a = (nee.from_numpy(_t(rng, n, 32)), nee.from_numpy(_t(rng, n, 32)))
        for g, r in zip(f(*a), fn(*a)):
            np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-4, atol=1e-5)
