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
