"""index_select along the last dim by the row kernel (devices/cpu/kernels/indexing.py ``_gather_last``) against
numpy's take and torch's index_select: dtypes, negative indices (torch refuses them; the kernel's wrap is numpy's),
repeated and reversed indices, views (numpy's path), sizes on both sides of the kernel's and the threads'
thresholds, 1 and 2 threads, and in a compiled graph (a Resize-style gather + lerp)."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import indexing as I

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("nt", [1, 2])
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_, np.float16])
@pytest.mark.parametrize("shape,m", [((3, 5, 7), 11), ((1, 21, 224, 28), 224), ((600, 33), 65), ((4, 70000), 3),
                                     ((2, 1, 128), 512)])
def test_last_dim_index_select_matches_torch(nt, dt, shape, m):
    rng = np.random.default_rng(sum(shape) + m)
    x = (rng.standard_normal(shape) * 50).astype(dt)
    idx = rng.integers(0, shape[-1], m).astype(np.int64)
    idx[:3] = [shape[-1] - 1, 0, shape[-1] - 1][:len(idx)]
    n0 = nee.get_num_threads()
    try:
        nee.set_num_threads(nt)
        got = nee.index_select(nee.from_numpy(x), x.ndim - 1, nee.from_numpy(idx)).numpy()
    finally:
        nee.set_num_threads(n0)
    want = torch.index_select(torch.from_numpy(x), x.ndim - 1, torch.from_numpy(idx)).numpy()
    np.testing.assert_array_equal(got, want)


def test_kernel_taken_and_wraps_as_numpy(monkeypatch):
    hits = []
    orig = I._index_select_last
    monkeypatch.setattr(I, "_index_select_last", lambda *a: hits.append(orig(*a)) or hits[-1])
    x = np.arange(40 * 1000, dtype=np.float32).reshape(40, 1000)
    idx = np.array([5, -1, 999, 0, -1000], np.int64)
    out = np.empty((40, 5), np.float32)
    assert not I._index_select_last(x, idx, out)          # small: numpy's take
    big = np.empty((40, 2000), np.float32)
    idx2 = np.tile(idx, 400)
    assert I._index_select_last(x, idx2, big)
    np.testing.assert_array_equal(big, np.take(x, idx2, axis=1, mode="wrap"))
    # a transposed (non-contiguous) input: numpy's take
    assert not I._index_select_last(x.T.copy().T, idx2, big)


def test_resize_style_gather_in_a_jit_graph():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 21, 56, 28)).astype(np.float32)
    i0 = np.clip(np.arange(112) // 4, 0, 27).astype(np.int64)
    i1 = np.minimum(i0 + 1, 27)
    w = ((np.arange(112) % 4) / 4).astype(np.float32)
    I0, I1, Wt = nee.from_numpy(i0), nee.from_numpy(i1), nee.from_numpy(w)

    def fn(t):
        a, b = nee.index_select(t, 3, I0), nee.index_select(t, 3, I1)
        return a + (b - a) * Wt
    f = nee.jit(fn)
    for _ in range(3):
        got = f(nee.from_numpy(x)).numpy()
    a, b = x[..., i0], x[..., i1]
    np.testing.assert_allclose(got, a + (b - a) * w, rtol=1e-6, atol=1e-6)
