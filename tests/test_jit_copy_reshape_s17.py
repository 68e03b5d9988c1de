"""jit/passes.py materialize_copying_reshapes: a reshape that has to copy a permuted kernel output (ShuffleNet's
channel shuffle, attention's heads merged back) becomes an elementwise copy node (a generated, threaded kernel into
the memory plan) followed by a view; a reshape that can stay a view is left alone."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.jit import passes
from neetorch.trace.tracer import trace


def shuffle(x):
    y = (x * 2).relu()
    n, c, h, w = y.shape
    return y.reshape(n, 4, c // 4, h, w).permute(0, 2, 1, 3, 4).reshape(n, c, h, w) + 1


def merge_heads(x):
    b, s, d = x.shape
    q = (x * 0.5).reshape(b, s, 4, d // 4).transpose(1, 2)          # [b, heads, s, dh]
    return (q.exp()).transpose(1, 2).reshape(b, s, d) - 1


def no_copy_needed(x):
    return (x + 1).permute(0, 2, 1).reshape(x.shape[0], -1, 1).permute(0, 2, 1).sum(-1) * 1


@pytest.mark.parametrize("fn, shape, copies", [(shuffle, (2, 8, 5, 3), 1), (merge_heads, (2, 6, 8), 1),
                                               (no_copy_needed, (2, 3, 1), 0)])
def test_copying_reshapes_become_copy_kernels(fn, shape, copies):
    x = nee.randn(*shape)
    g = passes.materialize_copying_reshapes(passes.run_pipeline(trace(fn, x)))
    assert sum(n.name == "cast" for n in g.nodes) == copies
    np.testing.assert_allclose(nee.jit(fn)(x).numpy(), fn(x).numpy(), rtol=1e-6, atol=1e-6)


def test_switch_off_keeps_the_reshape_copy(monkeypatch):
    monkeypatch.setattr(passes, "_COPY_RESHAPES", [False])
    x = nee.randn(2, 8, 5, 3)
    g = passes.run_pipeline(trace(shuffle, x))
    assert not any(n.name == "cast" for n in g.nodes)
    np.testing.assert_allclose(nee.jit(shuffle)(x).numpy(), shuffle(x).numpy(), rtol=1e-6)
