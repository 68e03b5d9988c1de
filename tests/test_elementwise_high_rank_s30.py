"""Elementwise launches whose operands leave more than 4 dims after collapsing (devices/cpu/elementwise.py
``_dense_launch``: strided operands made dense by numpy first, strided outputs through dense temporaries): MaxViT's
window-partition permutes.  Checked against numpy: copies of 5-D / 6-D permuted views, binary ops with broadcast
operands, in-place ops on permuted outputs (an input aliasing the output), bool / int / float16 dtypes, eager and
jit, 1 and 2 threads, and a fused group with two outputs."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import elementwise as EW

PERMS = [(0, 5, 1, 3, 2, 4), (0, 5, 3, 1, 4, 2), (4, 2, 0, 5, 3, 1)]


def _base(rng, dt, ch=256):
    a = rng.standard_normal((1, 7, 7, 2, 2, ch)) * 10
    return a.astype(dt) if dt != np.bool_ else a > 0


@pytest.fixture(params=[1, 2])
def nt(request):
    n0 = nee.get_num_threads()
    nee.set_num_threads(request.param)
    yield request.param
    nee.set_num_threads(n0)


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.bool_, np.float16])
@pytest.mark.parametrize("perm", PERMS)
def test_copy_of_permuted_views(nt, spy_dense, dt, perm):
    rng = np.random.default_rng(len(perm))
    b = _base(rng, dt)
    got = nee.from_numpy(b).permute(*perm).contiguous().numpy()
    np.testing.assert_array_equal(got, np.ascontiguousarray(b.transpose(perm)))
    f = nee.jit(lambda x: x.permute(*perm).contiguous())
    for _ in range(3):
        np.testing.assert_array_equal(f(nee.from_numpy(b)).numpy(), np.ascontiguousarray(b.transpose(perm)))


@pytest.mark.parametrize("perm", PERMS)
def test_binary_ops_with_broadcast_and_in_place(nt, spy_dense, perm):
    rng = np.random.default_rng(7)
    a = _base(rng, np.float32)
    ap = a.transpose(perm)
    c = rng.standard_normal((ap.shape[-1],)).astype(np.float32)
    d = rng.standard_normal(ap.shape).astype(np.float32)
    A, C, D = nee.from_numpy(a), nee.from_numpy(c), nee.from_numpy(d)
    np.testing.assert_allclose((A.permute(*perm) * C + D).numpy(), ap * c + d, rtol=1e-6, atol=1e-6)
    # in place on a permuted view of itself: out and input alias
    a2 = a.copy()
    A2 = nee.from_numpy(a2)
    A2.permute(*perm).mul_(A2.permute(*perm)).add_(1.0)
    np.testing.assert_allclose(a2, a * a + 1.0, rtol=1e-6)
    f = nee.jit(lambda x, y: (x.permute(*perm) * 2.0 + y, x.permute(*perm) - y))
    for _ in range(3):
        p, q = f(A, D)
    np.testing.assert_allclose(p.numpy(), ap * 2 + d, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(q.numpy(), ap - d, rtol=1e-6, atol=1e-6)
    assert spy_dense


@pytest.fixture
def spy_dense(monkeypatch):
    hits = []
    orig = EW._dense_launch
    monkeypatch.setattr(EW, "_dense_launch", lambda *a: hits.append(orig(*a)) or hits[-1])
    return hits
